// bf16.cu: the library's conversions between fp32 and bf16 (round to nearest even), element by
// element: the table's vec_to_bf16 and vec_from_bf16 (as device/cpu/bf16.c has them), fp32
// operands to bf16 for the model's bf16 GEMMs and bf16 weights to fp32 for the others (gemm.c,
// for linear.cu and cross_entropy.cu), and Newton-Schulz's bf16 result back to fp32 (muon.cu).
// Newton-Schulz's start scales and rounds in one pass of its own (muon.cu). Several families use
// the launchers (cuda.h); the rounding itself is bf16_bits.h's, which the kernels with bf16
// outputs share.
#include "cuda/bf16_bits.h"
#include "cuda/cuda.h"

namespace {

constexpr int THREADS = 256;

int blocks_for(int64_t n) {
    int64_t b = (n + THREADS * 4 - 1) / (THREADS * 4);
    return (int)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

__global__ void f32_to_bf16_kernel(const float *x, unsigned short *y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = lwc_round_bf16(x[i]);
}

// Exact: the bits shifted into fp32's top half, as the CPU widens. Not __bfloat162float, which on
// sm_90 is a conversion instruction whose NaN results need not keep the payload.
__global__ void bf16_to_f32_kernel(const unsigned short *x, float *y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = __uint_as_float((unsigned int)x[i] << 16);
}

} // namespace

cudaError_t lwc_f32_to_bf16(cudaStream_t stream, const float *x, void *y_bf16, int64_t n) {
    if (n > 0)
        f32_to_bf16_kernel<<<blocks_for(n), THREADS, 0, stream>>>(
            x, static_cast<unsigned short *>(y_bf16), n);
    return cudaGetLastError();
}

cudaError_t lwc_bf16_to_f32(cudaStream_t stream, const void *x_bf16, float *y, int64_t n) {
    if (n > 0)
        bf16_to_f32_kernel<<<blocks_for(n), THREADS, 0, stream>>>(
            static_cast<const unsigned short *>(x_bf16), y, n);
    return cudaGetLastError();
}

// ---- the table's entries ------------------------------------------------------------------------

lw_status lwc_vec_to_bf16(lw_stream *s, uint16_t *y, const float *x, int64_t n) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s, lwc_f32_to_bf16(lwc_cuda_stream(s), x, y, n),
                        "the fp32 to bf16 conversion");
}

lw_status lwc_vec_from_bf16(lw_stream *s, float *y, const uint16_t *x, int64_t n) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s, lwc_bf16_to_f32(lwc_cuda_stream(s), x, y, n),
                        "the bf16 to fp32 conversion");
}
