// rmsnorm.cu: the table's RMSNorm entries on a GPU, a warp per row as layernorm.cu does it: the
// forward (the mean of squares in double, as the CPU takes it) and the backward's input
// gradient, with the gain's gradient as column sums (colsum.cu). Products and sums rounded as
// the CPU rounds them (__fmul_rn / __fadd_rn: no FMA contraction). No atomics.
#include "cuda/bf16_bits.h"
#include "cuda/cuda.h"

namespace {

constexpr int THREADS = 256;

constexpr int RN_ROWS = THREADS / 32; // one warp per row

__device__ double warp_sum(double v) {
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v; // the same in every lane
}

// G: whether there is a gain. Y: float, or unsigned short for bf16 (the fp32 value rounded, as
// the CPU rounds it).
template <bool G, typename Y>
__global__ void rn_forward_kernel(Y *y, float *rstd, const float *x, const float *g, int64_t n,
                                  int64_t c, float eps) {
    const int lane = threadIdx.x & 31;
    const int64_t r = blockIdx.x * (int64_t)RN_ROWS + (threadIdx.x >> 5);
    if (r >= n) return; // a whole warp leaves together: the shuffles below see full warps
    const float *xr = x + r * c;
    double q = 0.0;
    for (int64_t i = lane; i < c; i += 32)
        q += (double)xr[i] * (double)xr[i];
    const float sf = (float)(1.0 / sqrt(warp_sum(q) / (double)c + (double)eps));
    if (lane == 0) rstd[r] = sf;
    Y *yr = y + r * c;
    for (int64_t i = lane; i < c; i += 32) {
        const float v = __fmul_rn(xr[i], sf);
        lwc_store(yr, i, G ? __fmul_rn(v, g[i]) : v);
    }
}

// dx only: dg is a column sum (colsum.cu).
template <bool G>
__global__ void rn_dx_kernel(float *dx, const float *dy, const float *x, const float *g,
                             const float *rstd, int64_t n, int64_t c) {
    const int lane = threadIdx.x & 31;
    const int64_t r = blockIdx.x * (int64_t)RN_ROWS + (threadIdx.x >> 5);
    if (r >= n) return;
    const float *xr = x + r * c, *dyr = dy + r * c;
    const float sf = rstd[r];
    double s = 0.0;
    for (int64_t i = lane; i < c; i += 32) {
        const float dn = G ? __fmul_rn(dyr[i], g[i]) : dyr[i];
        s += (double)__fmul_rn(dn, __fmul_rn(xr[i], sf));
    }
    const float m = (float)(warp_sum(s) / (double)c);
    float *dxr = dx + r * c;
    for (int64_t i = lane; i < c; i += 32) {
        const float dn = G ? __fmul_rn(dyr[i], g[i]) : dyr[i];
        const float inner = __fsub_rn(dn, __fmul_rn(__fmul_rn(xr[i], sf), m));
        dxr[i] = __fadd_rn(dxr[i], __fmul_rn(sf, inner));
    }
}

template <typename Y>
void rn_forward_launch(cudaStream_t stream, Y *y, float *rstd, const float *x, const float *g,
                       int64_t n, int64_t c, float eps) {
    const unsigned blocks = (unsigned)((n + RN_ROWS - 1) / RN_ROWS);
    if (g != nullptr)
        rn_forward_kernel<true, Y><<<blocks, THREADS, 0, stream>>>(y, rstd, x, g, n, c, eps);
    else
        rn_forward_kernel<false, Y><<<blocks, THREADS, 0, stream>>>(y, rstd, x, g, n, c, eps);
}

} // namespace

// ---- the table's entries ------------------------------------------------------------------------

lw_status lwc_rmsnorm_forward(lw_stream *s, void *y, lw_dtype y_dtype, float *rstd, const float *x,
                              const float *g, int64_t n, int64_t c, float eps) {
    if (n <= 0 || c <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cudaStream_t cs = lwc_cuda_stream(s);
    if (y_dtype == LW_DTYPE_BF16)
        rn_forward_launch(cs, static_cast<unsigned short *>(y), rstd, x, g, n, c, eps);
    else
        rn_forward_launch(cs, static_cast<float *>(y), rstd, x, g, n, c, eps);
    return lwc_launched(s, cudaGetLastError(), "the rms norm kernel");
}

lw_status lwc_rmsnorm_backward(lw_stream *s, float *dx, float *dg, const float *dy, const float *x,
                               const float *g, const float *rstd, int64_t n, int64_t c) {
    if (n <= 0 || c <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cudaStream_t cs = lwc_cuda_stream(s);
    // the workspace first, so that a failure to get it leaves dx as it was
    void *work = NULL;
    if (dg != NULL) {
        const lw_status st =
            lwc_workspace(s, (int64_t)sizeof(double) * lwc_colsum_doubles(n, c), &work);
        if (st != LW_OK) return st;
    }
    const unsigned blocks = (unsigned)((n + RN_ROWS - 1) / RN_ROWS);
    if (g != NULL)
        rn_dx_kernel<true><<<blocks, THREADS, 0, cs>>>(dx, dy, x, g, rstd, n, c);
    else
        rn_dx_kernel<false><<<blocks, THREADS, 0, cs>>>(dx, dy, x, g, rstd, n, c);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && dg != NULL)
        e = lwc_colsum_xhat(cs, dg, dy, x, NULL, rstd, n, c, static_cast<double *>(work));
    return lwc_launched(s, e, "the rms norm backward kernels");
}
