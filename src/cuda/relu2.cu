// relu2.cu: the table's ReLU^2 entries on a GPU, the forward and the accumulating backward, the
// CPU's operations (device/cpu/relu2.c) each rounded to nearest with no FMA contraction, so that
// both agree bit for bit; fp32 or bf16 inputs and outputs as gelu.cu takes them.
#include "cuda/bf16_bits.h"
#include "cuda/cuda.h"

namespace {

constexpr int THREADS = 256;

int blocks_for(int64_t n) {
    int64_t b = (n + THREADS - 1) / THREADS;
    return (int)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

// max(x, 0) as a select in which a NaN x, failing the comparison, passes through
__device__ __forceinline__ float relu(float x) { return x < 0.0f ? 0.0f : x; }

// Y, X: float, or unsigned short for bf16 (a bf16 y is the fp32 result rounded; a bf16 x is
// widened exactly).
template <typename Y, typename X> __global__ void relu2_kernel(Y *y, const X *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float r = relu(lwc_load(x, i));
        lwc_store(y, i, __fmul_rn(r, r));
    }
}

// DX: float, or unsigned short for a bf16 dx (accumulated in fp32, then rounded).
template <typename DX, typename X>
__global__ void relu2_grad_kernel(DX *dx, const float *dy, const X *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float slope = __fmul_rn(2.0f, relu(lwc_load(x, i)));
        lwc_store(dx, i, __fadd_rn(lwc_load(dx, i), __fmul_rn(dy[i], slope)));
    }
}

template <typename Y>
void launch_forward(cudaStream_t stream, Y *y, const void *x, bool x_bf16, int64_t n) {
    if (x_bf16)
        relu2_kernel<<<blocks_for(n), THREADS, 0, stream>>>(
            y, static_cast<const unsigned short *>(x), n);
    else
        relu2_kernel<<<blocks_for(n), THREADS, 0, stream>>>(y, static_cast<const float *>(x), n);
}

template <typename DX>
void launch_backward(cudaStream_t stream, DX *dx, const float *dy, const void *x, bool x_bf16,
                     int64_t n) {
    if (x_bf16)
        relu2_grad_kernel<<<blocks_for(n), THREADS, 0, stream>>>(
            dx, dy, static_cast<const unsigned short *>(x), n);
    else
        relu2_grad_kernel<<<blocks_for(n), THREADS, 0, stream>>>(dx, dy,
                                                                 static_cast<const float *>(x), n);
}

} // namespace

// ---- the table's entries ------------------------------------------------------------------------

lw_status lwc_relu2_forward(lw_stream *s, void *y, lw_dtype y_dtype, const void *x,
                            lw_dtype x_dtype, int64_t n) {
    if (n <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cudaStream_t cs = lwc_cuda_stream(s);
    const bool x_bf16 = x_dtype == LW_DTYPE_BF16;
    if (y_dtype == LW_DTYPE_BF16)
        launch_forward(cs, static_cast<unsigned short *>(y), x, x_bf16, n);
    else
        launch_forward(cs, static_cast<float *>(y), x, x_bf16, n);
    return lwc_launched(s, cudaGetLastError(), "the relu2 kernel");
}

lw_status lwc_relu2_backward(lw_stream *s, void *dx, lw_dtype dx_dtype, const float *dy,
                             const void *x, lw_dtype x_dtype, int64_t n) {
    if (n <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cudaStream_t cs = lwc_cuda_stream(s);
    const bool x_bf16 = x_dtype == LW_DTYPE_BF16;
    if (dx_dtype == LW_DTYPE_BF16)
        launch_backward(cs, static_cast<unsigned short *>(dx), dy, x, x_bf16, n);
    else
        launch_backward(cs, static_cast<float *>(dx), dy, x, x_bf16, n);
    return lwc_launched(s, cudaGetLastError(), "the relu2 backward kernel");
}
