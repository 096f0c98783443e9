/* gather.c: rows moved by an index list on a GPU, as the CPU's gather.c (a mixture of experts'
 * dispatch and combine): the gather; its backward and the weighted combine, scatter-adds by
 * destination row over buckets built on the host (buckets.c), so that a row listed several times
 * sums in the order of the list, as on the CPU, without atomics; and the combine's backward.
 * Kernels in gather.cu (lwc_rows_add, the scatter-add, is also the embedding's backward). */
#include "cuda/cuda.h"

lw_status lwc_gather_forward(lw_stream *s, float *out, const float *x, const int32_t *rows,
                             int64_t m, int64_t c) {
    if (m <= 0 || c <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s, lwc_gather_rows(lwc_cuda_stream(s), out, x, rows, m, c),
                        "the gather kernel");
}

/* What a by-row scatter-add over rows[0, m) needs before its launch: the grid's c / LWC_ROW_TILE
 * channel tiles in y (at most 65535), the device, and the positions bucketed by destination row
 * (buckets.c) into *bk; `what` names the kernel in errors. */
static lw_status by_row(lw_stream *s, const char *what, const int32_t *rows, int64_t m, int64_t c,
                        lwc_buckets *bk) {
    if (c > (int64_t)65535 * LWC_ROW_TILE)
        return lwc_host->fail(LW_ERR_RANGE, "%s: %s: c = %lld columns, at most %lld",
                              s->device->name, what, (long long)c, (long long)65535 * LWC_ROW_TILE);
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_buckets_by_row(s, rows, m, what, "row", bk);
}

lw_status lwc_gather_backward(lw_stream *s, float *dx, const float *dout, const int32_t *rows,
                              int64_t m, int64_t c) {
    if (m <= 0 || c <= 0) return LW_OK;
    lwc_buckets bk;
    lw_status st = by_row(s, "gather backward", rows, m, c, &bk);
    if (st != LW_OK) return st;
    /* dx[row[s]] += dout[perm[q]] in order: the scatter-add, unweighted */
    return lwc_launched(
        s, lwc_rows_add(lwc_cuda_stream(s), dx, dout, NULL, bk.perm, bk.start, bk.row, bk.segments,
                        c),
        "the gather backward kernel");
}

lw_status lwc_combine_forward(lw_stream *s, float *y, const float *src, const float *w,
                              const int32_t *rows, int64_t m, int64_t c) {
    if (m <= 0 || c <= 0) return LW_OK;
    lwc_buckets bk;
    lw_status st = by_row(s, "combine forward", rows, m, c, &bk);
    if (st != LW_OK) return st;
    return lwc_launched(
        s,
        lwc_rows_add(lwc_cuda_stream(s), y, src, w, bk.perm, bk.start, bk.row, bk.segments, c),
        "the combine kernel");
}

lw_status lwc_combine_backward(lw_stream *s, float *dsrc, float *dw, const float *dy,
                               const float *src, const float *w, const int32_t *rows, int64_t m,
                               int64_t c) {
    if (m <= 0 || c <= 0) return LW_OK;
    if (m > (int64_t)INT32_MAX * 8)
        return lwc_host->fail(LW_ERR_RANGE, "%s: combine backward of %lld rows: at most %lld",
                              s->device->name, (long long)m, (long long)INT32_MAX * 8);
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s, lwc_combine_grad(lwc_cuda_stream(s), dsrc, dw, dy, src, w, rows, m, c),
                        "the combine backward kernels");
}
