/* workspace.c: device memory that grows on demand (lwi_workspace): the optimizer's rules keep
 * one each for the scratch their steps need, sized by the largest call so far and moved to the
 * device of the stream that asks. */
#include "device/device.h"

lw_status lwi_workspace_reserve(lwi_workspace *w, lw_stream *s, int64_t count, int64_t size,
                                const char *what, const char *unit) {
    lw_device *d = lw_stream_device(s);
    const int64_t bytes = count * size;
    if (bytes <= w->bytes && d == w->device) return LW_OK;
    if (w->data != NULL) lw_stream_synchronize(s); /* the old block may still be in use */
    lwi_workspace_free(w);
    void *p = NULL;
    lw_status st = lw_device_alloc(d, bytes, &p);
    if (st != LW_OK)
        return lwi_fail(st, "%s (%lld %s): %s", what, (long long)count, unit, lw_last_error());
    w->device = d;
    w->data = p;
    w->bytes = bytes;
    return LW_OK;
}

void lwi_workspace_free(lwi_workspace *w) {
    lw_device_free(w->device, w->data);
    w->data = NULL;
    w->bytes = 0;
}
