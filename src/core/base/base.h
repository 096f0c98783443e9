/* base.h: helpers every subsystem of the core shares (lwi_ prefix); not public API. Each
 * subsystem folder has one internal header that includes this one. */
#ifndef LW_BASE_H
#define LW_BASE_H

#include "lw.h"

#if defined(__GNUC__)
#define LWI_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define LWI_PRINTF(fmt, args)
#endif

/* Records "message" as the thread's last error and returns status, so that error paths read
 * `return lwi_fail(LW_ERR_INVALID, "layout: dp must be >= 1, got %d", dp);`. */
lw_status lwi_fail(lw_status status, const char *fmt, ...) LWI_PRINTF(2, 3);

/* pad(v, d) = ceil(v / d) * d for v >= 0, d > 0. */
static inline int64_t lwi_pad(int64_t v, int64_t d) { return (v + d - 1) / d * d; }

/* One versioned option struct of lw.h (its first field `size_t size`): its name, its defaults
 * function and this library's sizeof, and each older lw.h's version of it as {sizeof, the end of
 * its last field}, oldest first, {0, 0}-terminated (none yet: every struct has one version). */
typedef struct lwi_options_kind {
    const char *type;        /* "lw_layout_options" */
    const char *defaults_fn; /* "lw_layout_defaults" */
    size_t size;
    size_t older[4][2];
} lwi_options_kind;

/* Reads the caller's option struct opts (NULL: *defaults) into *out, kind->size bytes, for the
 * library to use in its place. Its size field must be this library's size or an older lw.h's:
 * an older struct's fields are copied over *defaults, so the fields it lacks keep their
 * defaults. A size of 0 (a struct not from its defaults function), one larger than this
 * library's (a newer lw.h) or any other is LW_ERR_INVALID, "object: lw_x_options.size is 0:
 * start from lw_x_defaults()". */
lw_status lwi_options_read(const char *object, const lwi_options_kind *kind, const void *opts,
                           const void *defaults, void *out);
/* The versioned option structs, one each (base/options.c). */
extern const lwi_options_kind lwi_layout_options_kind, lwi_runtime_options_kind,
    lwi_muon_options_kind, lwi_adamw_options_kind, lwi_lion_options_kind, lwi_buffers_options_kind,
    lwi_optimizer_options_kind;

int64_t lwi_gcd(int64_t a, int64_t b);
/* Seconds on a monotonic clock. */
double lwi_now(void);
/* Bytes per element of a dtype (0 for an unknown one). */
size_t lwi_dtype_size(lw_dtype dtype);
int64_t lwi_lcm(int64_t a, int64_t b);

#endif
