// head_rmsnorm.cu: the table's per-head RMS norm entries on a GPU (QK norm), in place on heads
// of strided rows, a warp per head: the sums in double (in the warp's order, the CPU's in its
// own), the per-element work in float as the CPU rounds it (device/cpu/head_rmsnorm.c;
// __fmul_rn / __fsub_rn: no FMA contraction). No atomics.
#include "cuda/bf16_bits.h"
#include "cuda/cuda.h"

namespace {

constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32; // heads per block

__device__ double warp_sum(double v) {
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v; // the same in every lane
}

// Head k = row * n_heads + h of warp k: x = x * rstd, rstd[k] = 1 / sqrt(mean(x^2) + eps).
template <typename X>
__global__ void forward_kernel(X *x, float *rstd, int64_t rows, int64_t stride, int64_t col0,
                               int64_t n_heads, int64_t hd, float eps) {
    const int lane = threadIdx.x & 31;
    const int64_t k = blockIdx.x * (int64_t)WARPS + (threadIdx.x >> 5);
    if (k >= rows * n_heads) return; // a whole warp leaves together
    X *head = x + (k / n_heads) * stride + col0 + (k % n_heads) * hd;
    double s = 0.0;
    for (int64_t i = lane; i < hd; i += 32) {
        const double v = lwc_load(head, i);
        s += v * v;
    }
    const float r = (float)(1.0 / sqrt(warp_sum(s) / (double)hd + (double)eps));
    if (lane == 0) rstd[k] = r;
    for (int64_t i = lane; i < hd; i += 32)
        lwc_store(head, i, __fmul_rn(lwc_load(head, i), r));
}

// dx = rstd (dy - y mean(dy y)) in place of dy, from the forward's y.
template <typename D, typename Y>
__global__ void backward_kernel(D *dx, const Y *y, const float *rstd, int64_t rows, int64_t stride,
                                int64_t col0, int64_t n_heads, int64_t hd) {
    const int lane = threadIdx.x & 31;
    const int64_t k = blockIdx.x * (int64_t)WARPS + (threadIdx.x >> 5);
    if (k >= rows * n_heads) return;
    const int64_t at = (k / n_heads) * stride + col0 + (k % n_heads) * hd;
    D *d = dx + at;
    const Y *yh = y + at;
    double s = 0.0;
    for (int64_t i = lane; i < hd; i += 32)
        s += (double)lwc_load(d, i) * (double)lwc_load(yh, i);
    const float m = (float)(warp_sum(s) / (double)hd), r = rstd[k];
    for (int64_t i = lane; i < hd; i += 32)
        lwc_store(d, i, __fmul_rn(r, __fsub_rn(lwc_load(d, i), __fmul_rn(lwc_load(yh, i), m))));
}

unsigned blocks_for(int64_t heads) { return (unsigned)((heads + WARPS - 1) / WARPS); }

template <typename D>
void launch_backward(cudaStream_t stream, D *dx, const void *y, bool y_bf16, const float *rstd,
                     int64_t rows, int64_t stride, int64_t col0, int64_t n_heads, int64_t hd) {
    const unsigned blocks = blocks_for(rows * n_heads);
    if (y_bf16)
        backward_kernel<<<blocks, THREADS, 0, stream>>>(dx, static_cast<const unsigned short *>(y),
                                                        rstd, rows, stride, col0, n_heads, hd);
    else
        backward_kernel<<<blocks, THREADS, 0, stream>>>(dx, static_cast<const float *>(y), rstd,
                                                        rows, stride, col0, n_heads, hd);
}

} // namespace

// ---- the table's entries ------------------------------------------------------------------------

lw_status lwc_head_rmsnorm_forward(lw_stream *s, void *x, lw_dtype dtype, float *rstd, int64_t rows,
                                   int64_t row_stride, int64_t col0, int64_t n_heads, int64_t hd,
                                   float eps) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cudaStream_t cs = lwc_cuda_stream(s);
    const unsigned blocks = blocks_for(rows * n_heads);
    if (dtype == LW_DTYPE_BF16)
        forward_kernel<<<blocks, THREADS, 0, cs>>>(static_cast<unsigned short *>(x), rstd, rows,
                                                   row_stride, col0, n_heads, hd, eps);
    else
        forward_kernel<<<blocks, THREADS, 0, cs>>>(static_cast<float *>(x), rstd, rows, row_stride,
                                                   col0, n_heads, hd, eps);
    return lwc_launched(s, cudaGetLastError(), "the head rmsnorm kernel");
}

lw_status lwc_head_rmsnorm_backward(lw_stream *s, void *dx, lw_dtype dx_dtype, const void *y,
                                    lw_dtype y_dtype, const float *rstd, int64_t rows,
                                    int64_t row_stride, int64_t col0, int64_t n_heads, int64_t hd) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cudaStream_t cs = lwc_cuda_stream(s);
    const bool y16 = y_dtype == LW_DTYPE_BF16;
    if (dx_dtype == LW_DTYPE_BF16)
        launch_backward(cs, static_cast<unsigned short *>(dx), y, y16, rstd, rows, row_stride, col0,
                        n_heads, hd);
    else
        launch_backward(cs, static_cast<float *>(dx), y, y16, rstd, rows, row_stride, col0, n_heads,
                        hd);
    return lwc_launched(s, cudaGetLastError(), "the head rmsnorm backward kernel");
}
