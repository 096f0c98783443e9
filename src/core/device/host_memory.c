/* host_memory.c: plain host allocations for the Lua side (model activations), which LuaJIT's
 * ffi.new caps at 2 GiB and reports only as "not enough memory". */
#include "base/base.h"

#include <stdlib.h>
#include <string.h>

lw_status lw_host_alloc(int64_t bytes, void **out) {
    if (out == NULL) return lwi_fail(LW_ERR_INVALID, "memory: out pointer is NULL");
    *out = NULL;
    if (bytes < 0) return lwi_fail(LW_ERR_INVALID, "memory: %lld bytes asked for", (long long)bytes);
    size_t size = ((size_t)bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, size ? size : 64);
    if (p == NULL)
        return lwi_fail(LW_ERR_NOMEM, "memory: cannot allocate %.2f GiB (%lld bytes)",
                        (double)bytes / (1 << 30), (long long)bytes);
    memset(p, 0, size);
    *out = p;
    return LW_OK;
}

void lw_host_free(void *p) { free(p); }
