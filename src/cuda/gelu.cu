// gelu.cu: the table's GELU entries on a GPU, the forward and the accumulating backward (GELU's
// tanh form), the CPU's formulas, polynomial exp and roundings operation for operation
// (device/cpu/gelu.c: __fmul_rn / __fadd_rn / __fdiv_rn, no FMA contraction), so that both agree
// bit for bit. The backward's launcher is linear.cu's too (cuda.h).
#include "cuda/bf16_bits.h"
#include "cuda/cuda.h"
#include "cuda/exp_fast.h"

namespace {

constexpr int THREADS = 256;

int blocks_for(int64_t n) {
    int64_t b = (n + THREADS - 1) / THREADS;
    return (int)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

constexpr float SQRT_2_OVER_PI = 0.7978845608028654f;
constexpr float GELU_C = 0.044715f;
constexpr float X_MAX = 9.0f;

// exp(-2u), u = sqrt(2/pi) (v + 0.044715 v^3), as the CPU rounds it: the constant -2 sqrt(2/pi)
// folded first, then ((c v) v) v.
__device__ float gelu_exp(float v) {
    constexpr float K = -2.0f * SQRT_2_OVER_PI;
    const float cube = __fmul_rn(__fmul_rn(__fmul_rn(GELU_C, v), v), v);
    return lwc_exp_fast(__fmul_rn(K, __fadd_rn(v, cube)));
}

// The clamps as selects: a NaN passes through both (comparisons with NaN are false).
__device__ float clamp_lo(float x) { return x < -X_MAX ? -X_MAX : x; }
__device__ float clamp_hi(float l) { return l > X_MAX ? X_MAX : l; }

// Y, X: float, or unsigned short for bf16 (a bf16 y is the fp32 result rounded, as the CPU
// rounds it; a bf16 x is widened exactly).
template <typename Y, typename X> __global__ void gelu_kernel(Y *y, const X *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float lo = clamp_lo(lwc_load(x, i)), v = clamp_hi(lo);
        lwc_store(y, i, __fdiv_rn(lo, __fadd_rn(1.0f, gelu_exp(v))));
    }
}

// DX: float, or unsigned short for a bf16 dx (accumulated in fp32, then rounded).
template <typename DX, typename X>
__global__ void gelu_grad_kernel(DX *dx, const float *dy, const X *x, int64_t n) {
    constexpr float C3 = 3.0f * GELU_C;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float v = clamp_hi(clamp_lo(lwc_load(x, i)));
        const float e = gelu_exp(v);
        const float s = __fdiv_rn(1.0f, __fadd_rn(1.0f, e));
        const float du = __fmul_rn(SQRT_2_OVER_PI, __fadd_rn(1.0f, __fmul_rn(__fmul_rn(C3, v), v)));
        // s + 2 v du (e s s), grouped as the CPU's ((2 v) du) ((e s) s)
        const float tail = __fmul_rn(__fmul_rn(__fmul_rn(2.0f, v), du), __fmul_rn(__fmul_rn(e, s), s));
        lwc_store(dx, i, __fadd_rn(lwc_load(dx, i), __fmul_rn(dy[i], __fadd_rn(s, tail))));
    }
}

template <typename Y>
void launch_forward(cudaStream_t stream, Y *y, const void *x, bool x_bf16, int64_t n) {
    if (x_bf16)
        gelu_kernel<<<blocks_for(n), THREADS, 0, stream>>>(
            y, static_cast<const unsigned short *>(x), n);
    else
        gelu_kernel<<<blocks_for(n), THREADS, 0, stream>>>(y, static_cast<const float *>(x), n);
}

template <typename DX>
void launch_backward(cudaStream_t stream, DX *dx, const float *dy, const void *x, bool x_bf16,
                     int64_t n) {
    if (x_bf16)
        gelu_grad_kernel<<<blocks_for(n), THREADS, 0, stream>>>(
            dx, dy, static_cast<const unsigned short *>(x), n);
    else
        gelu_grad_kernel<<<blocks_for(n), THREADS, 0, stream>>>(dx, dy,
                                                                static_cast<const float *>(x), n);
}

} // namespace

// y = GELU(x), fp32 or bf16 each.
static cudaError_t gelu(cudaStream_t stream, void *y, bool y_bf16, const void *x, bool x_bf16,
                        int64_t n) {
    if (n <= 0) return cudaSuccess;
    if (y_bf16)
        launch_forward(stream, static_cast<unsigned short *>(y), x, x_bf16, n);
    else
        launch_forward(stream, static_cast<float *>(y), x, x_bf16, n);
    return cudaGetLastError();
}

cudaError_t lwc_gelu_grad(cudaStream_t stream, void *dx, bool dx_bf16, const float *dy,
                          const void *x, bool x_bf16, int64_t n) {
    if (n <= 0) return cudaSuccess;
    if (dx_bf16)
        launch_backward(stream, static_cast<unsigned short *>(dx), dy, x, x_bf16, n);
    else
        launch_backward(stream, static_cast<float *>(dx), dy, x, x_bf16, n);
    return cudaGetLastError();
}

// ---- the table's entries ------------------------------------------------------------------------

lw_status lwc_gelu_forward(lw_stream *s, void *y, lw_dtype y_dtype, const void *x, lw_dtype x_dtype,
                           int64_t n) {
    if (n <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(
        s, gelu(lwc_cuda_stream(s), y, y_dtype == LW_DTYPE_BF16, x, x_dtype == LW_DTYPE_BF16, n),
        "the GELU kernel");
}

lw_status lwc_gelu_backward(lw_stream *s, void *dx, lw_dtype dx_dtype, const float *dy,
                            const void *x, lw_dtype x_dtype, int64_t n) {
    if (n <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s,
                        lwc_gelu_grad(lwc_cuda_stream(s), dx, dx_dtype == LW_DTYPE_BF16, dy, x,
                                      x_dtype == LW_DTYPE_BF16, n),
                        "the GELU backward kernel");
}
