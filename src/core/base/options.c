/* options.c: the size check of lw.h's versioned option structs (lwi_options_read): which sizes a
 * caller may pass, and an older lw.h's struct read with the newer fields at their defaults. */
#include "base/base.h"

#include <string.h>

/* When a struct grows, its older version goes into `older`: {its sizeof, offsetof its last
 * field + that field's size}, both numbers of the platform the library is built for. */
const lwi_options_kind lwi_layout_options_kind = {"lw_layout_options", "lw_layout_defaults",
                                                  sizeof(lw_layout_options), {{0, 0}}};
const lwi_options_kind lwi_runtime_options_kind = {"lw_runtime_options", "lw_runtime_defaults",
                                                   sizeof(lw_runtime_options), {{0, 0}}};
const lwi_options_kind lwi_muon_options_kind = {"lw_muon_options", "lw_muon_defaults",
                                                sizeof(lw_muon_options), {{0, 0}}};
const lwi_options_kind lwi_adamw_options_kind = {"lw_adamw_options", "lw_adamw_defaults",
                                                 sizeof(lw_adamw_options), {{0, 0}}};
const lwi_options_kind lwi_lion_options_kind = {"lw_lion_options", "lw_lion_defaults",
                                                sizeof(lw_lion_options), {{0, 0}}};
const lwi_options_kind lwi_buffers_options_kind = {"lw_buffers_options", "lw_buffers_defaults",
                                                   sizeof(lw_buffers_options), {{0, 0}}};
const lwi_options_kind lwi_optimizer_options_kind = {
    "lw_optimizer_options", "lw_optimizer_defaults", sizeof(lw_optimizer_options), {{0, 0}}};

lw_status lwi_options_read(const char *object, const lwi_options_kind *kind, const void *opts,
                           const void *defaults, void *out) {
    memcpy(out, defaults, kind->size);
    if (opts == NULL) return LW_OK;
    size_t size;
    memcpy(&size, opts, sizeof size); /* every versioned struct opens with its size_t size */
    if (size == 0)
        return lwi_fail(LW_ERR_INVALID, "%s: %s.size is 0: start from %s()", object, kind->type,
                        kind->defaults_fn);
    if (size == kind->size) {
        memcpy(out, opts, size);
        return LW_OK;
    }
    if (size > kind->size)
        return lwi_fail(LW_ERR_INVALID,
                        "%s: %s.size is %zu, larger than this library's %zu: the program was "
                        "built against a newer lw.h than this liblwopt.so",
                        object, kind->type, size, kind->size);
    for (int v = 0; v < 4 && kind->older[v][0] != 0; v++) {
        if (size != kind->older[v][0]) continue;
        /* only the older version's fields: its tail padding may lie under a newer field */
        memcpy(out, opts, kind->older[v][1]);
        memcpy(out, &kind->size, sizeof kind->size);
        return LW_OK;
    }
    return lwi_fail(LW_ERR_INVALID,
                    "%s: %s.size is %zu, which no lw.h's %s has (this library's: %zu): start "
                    "from %s()",
                    object, kind->type, size, kind->type, kind->size, kind->defaults_fn);
}
