// residual_mix.cu: the table's residual-scalar entries on a GPU: y = a x + b x0 (a and b read
// from device memory), and the backward, whose scalar gradients are sums over every element in
// double: a block per fixed chunk of CHUNK elements (its tree, block_sum.h), then one block over
// the chunks' partials in order, so the sums depend on n alone. The element-wise parts are the
// CPU's operations (device/cpu/residual_mix.c) rounded alike, bit for bit; the sums agree within
// their last rounding.
#include "cuda/block_sum.h"
#include "cuda/cuda.h"

namespace {

constexpr int THREADS = 256;
constexpr int64_t CHUNK = 8192;

int blocks_for(int64_t n) {
    int64_t b = (n + THREADS - 1) / THREADS;
    return (int)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

__global__ void mix_kernel(float *y, const float *x, const float *x0, const float *a,
                           const float *b, int64_t n) {
    const float av = *a, bv = *b;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = __fadd_rn(__fmul_rn(av, x[i]), __fmul_rn(bv, x0[i]));
}

// chunk blockIdx.x: dx and dx0, and the chunk's two sums into partials[k] and [chunks + k]
__global__ void mix_grad_kernel(float *dx, float *dx0, double *partials, const float *dy,
                                const float *x, const float *x0, const float *a, const float *b,
                                int64_t n, int64_t chunks) {
    const float av = *a, bv = *b;
    const int64_t i0 = blockIdx.x * CHUNK, i1 = i0 + CHUNK < n ? i0 + CHUNK : n;
    double sa = 0.0, sb = 0.0;
    for (int64_t i = i0 + threadIdx.x; i < i1; i += THREADS) {
        sa += (double)dy[i] * (double)x[i];
        sb += (double)dy[i] * (double)x0[i];
        dx[i] = __fadd_rn(dx[i], __fmul_rn(av, dy[i]));
        dx0[i] = __fadd_rn(dx0[i], __fmul_rn(bv, dy[i]));
    }
    sa = lwc_block_sum<THREADS>(sa);
    sb = lwc_block_sum<THREADS>(sb);
    if (threadIdx.x == 0) partials[blockIdx.x] = sa, partials[chunks + blockIdx.x] = sb;
}

__global__ void mix_finish_kernel(float *da, float *db, const double *partials, int64_t chunks) {
    double sa = 0.0, sb = 0.0;
    for (int64_t k = threadIdx.x; k < chunks; k += THREADS)
        sa += partials[k], sb += partials[chunks + k];
    sa = lwc_block_sum<THREADS>(sa);
    sb = lwc_block_sum<THREADS>(sb);
    if (threadIdx.x == 0) {
        *da = __fadd_rn(*da, (float)sa);
        *db = __fadd_rn(*db, (float)sb);
    }
}

} // namespace

// ---- the table's entries ------------------------------------------------------------------------

lw_status lwc_residual_mix_forward(lw_stream *s, float *y, const float *x, const float *x0,
                                   const float *a, const float *b, int64_t n) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    mix_kernel<<<blocks_for(n), THREADS, 0, lwc_cuda_stream(s)>>>(y, x, x0, a, b, n);
    return lwc_launched(s, cudaGetLastError(), "the residual mix kernel");
}

lw_status lwc_residual_mix_backward(lw_stream *s, float *dx, float *dx0, float *da, float *db,
                                    const float *dy, const float *x, const float *x0,
                                    const float *a, const float *b, int64_t n) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    const int64_t chunks = (n + CHUNK - 1) / CHUNK;
    void *work = NULL;
    lw_status st = lwc_workspace(s, (int64_t)sizeof(double) * 2 * chunks, &work);
    if (st != LW_OK) return st;
    double *partials = static_cast<double *>(work);
    cudaStream_t cs = lwc_cuda_stream(s);
    mix_grad_kernel<<<(unsigned)chunks, THREADS, 0, cs>>>(dx, dx0, partials, dy, x, x0, a, b, n,
                                                          chunks);
    st = lwc_launched(s, cudaGetLastError(), "the residual mix backward kernel");
    if (st != LW_OK) return st;
    mix_finish_kernel<<<1, THREADS, 0, cs>>>(da, db, partials, chunks);
    return lwc_launched(s, cudaGetLastError(), "the residual mix's scalar gradient sums");
}
