// swiglu.cu: the table's SwiGLU entries on a GPU over fused rows [a | b] (gate first): y =
// silu(a) * b and the accumulating backward into the fused gradient, a thread per element of y,
// the CPU's formulas, polynomial exp and roundings operation for operation (device/cpu/swiglu.c:
// __fmul_rn / __fadd_rn / __fdiv_rn, no FMA contraction), so that both agree bit for bit; fp32
// or bf16 inputs and outputs as gelu.cu takes them.
#include "cuda/bf16_bits.h"
#include "cuda/cuda.h"
#include "cuda/exp_fast.h"

namespace {

constexpr int THREADS = 256;

int blocks_for(int64_t n) {
    int64_t b = (n + THREADS - 1) / THREADS;
    return (int)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

// The CPU's clamps (selects, which a NaN passes through): a at -88 into lo, lo at 87 into vc,
// the value exp and the slope take.
constexpr float A_MIN = -88.0f, A_MAX = 87.0f;

__device__ __forceinline__ float clamp_lo(float a) { return a < A_MIN ? A_MIN : a; }
__device__ __forceinline__ float clamp_hi(float lo) { return lo > A_MAX ? A_MAX : lo; }

// Y, X: float, or unsigned short for bf16. Element k of y is row k / h, column k % h; its a and b
// are columns k % h and h + k % h of the fused row.
template <typename Y, typename X>
__global__ void swiglu_kernel(Y *y, const X *x, int64_t n, int64_t h) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n * h;
         k += (int64_t)gridDim.x * blockDim.x) {
        const int64_t ia = (k / h) * 2 * h + k % h;
        const float lo = clamp_lo(lwc_load(x, ia));
        const float silu = __fdiv_rn(lo, __fadd_rn(1.0f, lwc_exp_fast(-clamp_hi(lo))));
        lwc_store(y, k, __fmul_rn(silu, lwc_load(x, ia + h)));
    }
}

// DX: float, or unsigned short for a bf16 dx (accumulated in fp32, then rounded).
template <typename DX, typename X>
__global__ void swiglu_grad_kernel(DX *dx, const float *dy, const X *x, int64_t n, int64_t h) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n * h;
         k += (int64_t)gridDim.x * blockDim.x) {
        const int64_t ia = (k / h) * 2 * h + k % h;
        const float lo = clamp_lo(lwc_load(x, ia)), vc = clamp_hi(lo), b = lwc_load(x, ia + h);
        const float e = lwc_exp_fast(-vc);
        const float den = __fadd_rn(1.0f, e);
        const float s = __fdiv_rn(1.0f, den);
        // s + ((vc (e s)) s), grouped as the CPU's
        const float ds = __fadd_rn(s, __fmul_rn(__fmul_rn(vc, __fmul_rn(e, s)), s));
        const float g = dy[k];
        lwc_store(dx, ia, __fadd_rn(lwc_load(dx, ia), __fmul_rn(__fmul_rn(g, b), ds)));
        lwc_store(dx, ia + h, __fadd_rn(lwc_load(dx, ia + h), __fmul_rn(g, __fdiv_rn(lo, den))));
    }
}

template <typename Y>
void launch_forward(cudaStream_t stream, Y *y, const void *x, bool x_bf16, int64_t n, int64_t h) {
    if (x_bf16)
        swiglu_kernel<<<blocks_for(n * h), THREADS, 0, stream>>>(
            y, static_cast<const unsigned short *>(x), n, h);
    else
        swiglu_kernel<<<blocks_for(n * h), THREADS, 0, stream>>>(y, static_cast<const float *>(x),
                                                                 n, h);
}

template <typename DX>
void launch_backward(cudaStream_t stream, DX *dx, const float *dy, const void *x, bool x_bf16,
                     int64_t n, int64_t h) {
    if (x_bf16)
        swiglu_grad_kernel<<<blocks_for(n * h), THREADS, 0, stream>>>(
            dx, dy, static_cast<const unsigned short *>(x), n, h);
    else
        swiglu_grad_kernel<<<blocks_for(n * h), THREADS, 0, stream>>>(
            dx, dy, static_cast<const float *>(x), n, h);
}

} // namespace

// ---- the table's entries ------------------------------------------------------------------------

lw_status lwc_swiglu_forward(lw_stream *s, void *y, lw_dtype y_dtype, const void *x,
                             lw_dtype x_dtype, int64_t n, int64_t c) {
    if (n <= 0 || c <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cudaStream_t cs = lwc_cuda_stream(s);
    const bool x_bf16 = x_dtype == LW_DTYPE_BF16;
    if (y_dtype == LW_DTYPE_BF16)
        launch_forward(cs, static_cast<unsigned short *>(y), x, x_bf16, n, c / 2);
    else
        launch_forward(cs, static_cast<float *>(y), x, x_bf16, n, c / 2);
    return lwc_launched(s, cudaGetLastError(), "the swiglu kernel");
}

lw_status lwc_swiglu_backward(lw_stream *s, void *dx, lw_dtype dx_dtype, const float *dy,
                              const void *x, lw_dtype x_dtype, int64_t n, int64_t c) {
    if (n <= 0 || c <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cudaStream_t cs = lwc_cuda_stream(s);
    const bool x_bf16 = x_dtype == LW_DTYPE_BF16;
    if (dx_dtype == LW_DTYPE_BF16)
        launch_backward(cs, static_cast<unsigned short *>(dx), dy, x, x_bf16, n, c / 2);
    else
        launch_backward(cs, static_cast<float *>(dx), dy, x, x_bf16, n, c / 2);
    return lwc_launched(s, cudaGetLastError(), "the swiglu backward kernel");
}
