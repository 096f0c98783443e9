// bf16.cu: the library's conversions between fp32 and bf16 (round to nearest even), element by
// element: fp32 operands to bf16 for the model's bf16 GEMMs (gemm.c, for linear.c and
// cross_entropy.c), and Newton-Schulz's bf16 result back to fp32 (muon.c). Newton-Schulz's start
// scales and rounds in one pass of its own (muon.cu). Several families use them, so they are a
// file of their own.
#include "cuda/kernels.h"

#include <cuda_bf16.h>

namespace {

constexpr int THREADS = 256;

int blocks_for(int64_t n) {
    int64_t b = (n + THREADS * 4 - 1) / (THREADS * 4);
    return (int)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

__global__ void f32_to_bf16_kernel(const float *x, __nv_bfloat16 *y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16_rn(x[i]);
}

__global__ void bf16_to_f32_kernel(const __nv_bfloat16 *x, float *y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = __bfloat162float(x[i]);
}

} // namespace

extern "C" cudaError_t lwc_f32_to_bf16(cudaStream_t stream, const float *x, void *y_bf16,
                                       int64_t n) {
    if (n > 0)
        f32_to_bf16_kernel<<<blocks_for(n), THREADS, 0, stream>>>(
            x, static_cast<__nv_bfloat16 *>(y_bf16), n);
    return cudaGetLastError();
}

extern "C" cudaError_t lwc_bf16_to_f32(cudaStream_t stream, const void *x_bf16, float *y,
                                       int64_t n) {
    if (n > 0)
        bf16_to_f32_kernel<<<blocks_for(n), THREADS, 0, stream>>>(
            static_cast<const __nv_bfloat16 *>(x_bf16), y, n);
    return cudaGetLastError();
}
