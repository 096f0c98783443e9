// gather.cu: the table's entries for rows moved by an index list on a GPU, as the CPU's gather.c
// (a mixture of experts' dispatch and combine): the gather; its backward and the weighted
// combine, scatter-adds by destination row over buckets built on the host (buckets.c), so that a
// row listed several times sums in the order of the list, as on the CPU (the scatter-add,
// lwc_rows_add, is also embedding.cu's token gradient); and the combine's backward (dsrc
// element-wise, dw a warp per row in double). No atomics.
#include "cuda/cuda.h"

namespace {

constexpr int THREADS = 256;

int blocks_for(int64_t n) {
    int64_t b = (n + THREADS - 1) / THREADS;
    return (int)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

__global__ void gather_kernel(float *out, const float *x, const int32_t *rows, int64_t c,
                              int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / c, ch = i - r * c;
        out[i] = x[(int64_t)rows[r] * c + ch];
    }
}

// grid (segments, channel tiles): segment s lists the sources perm[start[s] .. start[s + 1]) of
// destination row row[s] in increasing order (the CPU's order); each thread adds their values,
// times w[source] where WEIGHTED, one after another into its channel of the row.
template <bool WEIGHTED>
__global__ void rows_add_kernel(float *y, const float *src, const float *w, const int32_t *perm,
                                const int32_t *start, const int32_t *row, int64_t c) {
    const int64_t ch = blockIdx.y * (int64_t)blockDim.x + threadIdx.x;
    if (ch >= c) return;
    const int32_t s = (int32_t)blockIdx.x;
    float *d = y + (int64_t)row[s] * c + ch;
    float acc = *d;
    for (int32_t q = start[s]; q < start[s + 1]; q++) {
        const int32_t i = perm[q];
        const float v = src[(int64_t)i * c + ch];
        acc = __fadd_rn(acc, WEIGHTED ? __fmul_rn(w[i], v) : v);
    }
    *d = acc;
}

// dsrc[i, ch] += w[i] * dy[rows[i], ch]: every destination written once, no ordering needed.
__global__ void combine_dsrc_kernel(float *dsrc, const float *dy, const float *w,
                                    const int32_t *rows, int64_t c, int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / c, ch = i - r * c;
        dsrc[i] = __fadd_rn(dsrc[i], __fmul_rn(w[r], dy[(int64_t)rows[r] * c + ch]));
    }
}

constexpr int DW_ROWS = THREADS / 32; // one warp per row

__device__ double warp_sum(double v) {
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v; // the same in every lane
}

// dw[i] += (float)dot(src[i, :], dy[rows[i], :]) in double (each product of two floats is exact
// in double, so only the order of the sum differs from the CPU's: lanes, then a fixed shuffle).
__global__ void combine_dw_kernel(float *dw, const float *dy, const float *src, const int32_t *rows,
                                  int64_t m, int64_t c) {
    const int lane = threadIdx.x & 31;
    const int64_t i = blockIdx.x * (int64_t)DW_ROWS + (threadIdx.x >> 5);
    if (i >= m) return; // a whole warp leaves together
    const float *s = src + i * c, *g = dy + (int64_t)rows[i] * c;
    double dot = 0.0;
    for (int64_t j = lane; j < c; j += 32)
        dot += (double)s[j] * (double)g[j];
    dot = warp_sum(dot);
    if (lane == 0) dw[i] = __fadd_rn(dw[i], (float)dot);
}

unsigned row_blocks(int64_t n, int64_t per_block) {
    return (unsigned)((n + per_block - 1) / per_block);
}

} // namespace

// out[m, c] = x[rows[i], :] row by row.
static cudaError_t gather_rows(cudaStream_t stream, float *out, const float *x, const int32_t *rows,
                               int64_t m, int64_t c) {
    if (m > 0 && c > 0)
        gather_kernel<<<blocks_for(m * c), THREADS, 0, stream>>>(out, x, rows, c, m * c);
    return cudaGetLastError();
}

cudaError_t lwc_rows_add(cudaStream_t stream, float *y, const float *src, const float *w,
                         const int32_t *perm, const int32_t *start, const int32_t *row,
                         int64_t segments, int64_t c) {
    if (segments <= 0 || c <= 0) return cudaSuccess;
    // LWC_ROW_TILE channels per block: four warps, each row read 512 bytes at a time
    const dim3 grid((unsigned)segments, (unsigned)((c + LWC_ROW_TILE - 1) / LWC_ROW_TILE));
    if (w != nullptr)
        rows_add_kernel<true><<<grid, LWC_ROW_TILE, 0, stream>>>(y, src, w, perm, start, row, c);
    else
        rows_add_kernel<false><<<grid, LWC_ROW_TILE, 0, stream>>>(y, src, w, perm, start, row, c);
    return cudaGetLastError();
}

// dsrc[m, c] += w[i] dy[rows[i]] (dsrc may be NULL); dw[m] += dot(src[i], dy[rows[i]]) in double
// (a warp per row; dw may be NULL).
static cudaError_t combine_grad(cudaStream_t stream, float *dsrc, float *dw, const float *dy,
                                const float *src, const float *w, const int32_t *rows, int64_t m,
                                int64_t c) {
    if (m <= 0 || c <= 0) return cudaSuccess;
    if (dsrc != nullptr) {
        combine_dsrc_kernel<<<blocks_for(m * c), THREADS, 0, stream>>>(dsrc, dy, w, rows, c, m * c);
        const cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) return err;
    }
    if (dw != nullptr)
        combine_dw_kernel<<<row_blocks(m, DW_ROWS), THREADS, 0, stream>>>(dw, dy, src, rows, m, c);
    return cudaGetLastError();
}

// ---- the table's entries ------------------------------------------------------------------------

lw_status lwc_gather_forward(lw_stream *s, float *out, const float *x, const int32_t *rows,
                             int64_t m, int64_t c) {
    if (m <= 0 || c <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s, gather_rows(lwc_cuda_stream(s), out, x, rows, m, c),
                        "the gather kernel");
}

// What a by-row scatter-add over rows[0, m) needs before its launch: the grid's c / LWC_ROW_TILE
// channel tiles in y (at most 65535), the device, and the positions bucketed by destination row
// (buckets.c) into *bk; `what` names the kernel in errors.
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
    // dx[row[s]] += dout[perm[q]] in order: the scatter-add, unweighted
    return lwc_launched(
        s,
        lwc_rows_add(lwc_cuda_stream(s), dx, dout, NULL, bk.perm, bk.start, bk.row, bk.segments, c),
        "the gather backward kernel");
}

lw_status lwc_combine_forward(lw_stream *s, float *y, const float *src, const float *w,
                              const int32_t *rows, int64_t m, int64_t c) {
    if (m <= 0 || c <= 0) return LW_OK;
    lwc_buckets bk;
    lw_status st = by_row(s, "combine forward", rows, m, c, &bk);
    if (st != LW_OK) return st;
    return lwc_launched(
        s, lwc_rows_add(lwc_cuda_stream(s), y, src, w, bk.perm, bk.start, bk.row, bk.segments, c),
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
    return lwc_launched(s, combine_grad(lwc_cuda_stream(s), dsrc, dw, dy, src, w, rows, m, c),
                        "the combine backward kernels");
}
