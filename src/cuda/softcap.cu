// softcap.cu: the table's logit softcap entries on a GPU: y = cap tanh(x / cap) (in place
// allowed) and the accumulating backward from the forward's output. The forward's tanhf is
// CUDA's (within an ulp or two of the CPU's libm); the backward is the CPU's operations
// (device/cpu/softcap.c), each rounded to nearest with no FMA contraction, bit for bit.
#include "cuda/cuda.h"
#include "cuda/softcap.h"

namespace {

constexpr int THREADS = 256;

int blocks_for(int64_t n) {
    int64_t b = (n + THREADS - 1) / THREADS;
    return (int)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

__global__ void softcap_kernel(float *y, const float *x, int64_t n, float cap) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = lwc_softcap_value(x[i], cap);
}

// dx += dy (1 - t)(1 + t), t = y / cap
__global__ void softcap_grad_kernel(float *dx, const float *dy, const float *y, int64_t n,
                                    float cap) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dx[i] = __fadd_rn(dx[i], __fmul_rn(dy[i], lwc_softcap_slope(y[i], cap)));
}

} // namespace

// ---- the table's entries ------------------------------------------------------------------------

lw_status lwc_softcap_forward(lw_stream *s, float *y, const float *x, int64_t n, float cap) {
    if (n <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    softcap_kernel<<<blocks_for(n), THREADS, 0, lwc_cuda_stream(s)>>>(y, x, n, cap);
    return lwc_launched(s, cudaGetLastError(), "the softcap kernel");
}

lw_status lwc_softcap_backward(lw_stream *s, float *dx, const float *dy, const float *y, int64_t n,
                               float cap) {
    if (n <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    softcap_grad_kernel<<<blocks_for(n), THREADS, 0, lwc_cuda_stream(s)>>>(dx, dy, y, n, cap);
    return lwc_launched(s, cudaGetLastError(), "the softcap backward kernel");
}
