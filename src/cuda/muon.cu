// muon.cu: Muon's kernels on a GPU besides the GEMMs (muon.c runs those on cuBLAS): the
// element-wise step (weight decay, momentum, Nesterov) in one pass, and Newton-Schulz's start
// (each matrix's Frobenius norm and the scaled copy in fp32 or bf16), all on the device: the norm
// never goes to the host (its end, bf16 back to fp32, is bf16.cu's conversion). Products and
// sums are rounded as the CPU reference rounds them (no FMA contraction) so that fp32 runs agree
// with it closely.
#include "cuda/kernels.h"

#include <cuda_bf16.h>

namespace {

constexpr int THREADS = 256;

int blocks_for(int64_t n, int64_t per_thread) {
    int64_t b = (n + THREADS * per_thread - 1) / (THREADS * per_thread);
    return (int)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

__global__ void momentum_kernel(float *w, const float *g, float *m, float *u, int64_t n,
                                float beta, bool nesterov, bool l2, float wd, float w_factor,
                                float grad_scale) {
    const float keep = 1.0f - beta;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float wi = w[i];
        if (w_factor != 1.0f) w[i] = wi = __fmul_rn(wi, w_factor);
        float gi = __fmul_rn(grad_scale, g[i]);
        if (l2) gi = __fadd_rn(gi, __fmul_rn(wd, wi));
        const float mi = __fadd_rn(__fmul_rn(beta, m[i]), __fmul_rn(keep, gi));
        m[i] = mi;
        u[i] = nesterov ? __fadd_rn(__fmul_rn(keep, gi), __fmul_rn(beta, mi)) : mi;
    }
}

__device__ double block_sum(double v) {
    __shared__ double shared[32];
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, off);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = threadIdx.x < blockDim.x / 32 ? shared[lane] : 0.0;
    if (warp == 0)
        for (int off = 16; off > 0; off >>= 1)
            v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

// grid (blocks, batch): partials[b * stride + block] = sum of squares of the block's elements
__global__ void square_partials(const float *u, int64_t n, float *partials, int32_t stride) {
    const float *x = u + blockIdx.y * n;
    double s = 0.0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        s += (double)x[i] * x[i];
    s = block_sum(s);
    if (threadIdx.x == 0) partials[blockIdx.y * stride + blockIdx.x] = (float)s;
}

// grid (blocks, batch): each block adds its matrix's partials (in the same order in every block)
// and writes its part of x = u / max(norm, eps)
__global__ void scale_by_norm(const float *u, int64_t n, const float *partials, int32_t stride,
                              float eps, float *x_f32, __nv_bfloat16 *x_bf16) {
    __shared__ float inv;
    double s = 0.0;
    for (int b = threadIdx.x; b < gridDim.x; b += blockDim.x)
        s += partials[blockIdx.y * stride + b];
    s = block_sum(s);
    if (threadIdx.x == 0) {
        const double norm = sqrt(s);
        inv = (float)(1.0 / (norm > eps ? norm : (double)eps));
    }
    __syncthreads();
    const float *src = u + blockIdx.y * n;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float v = __fmul_rn(src[i], inv);
        if (x_bf16)
            x_bf16[blockIdx.y * n + i] = __float2bfloat16_rn(v);
        else
            x_f32[blockIdx.y * n + i] = v;
    }
}

} // namespace

extern "C" cudaError_t lwc_muon_momentum_elements(cudaStream_t stream, float *w, const float *g,
                                                  float *m, float *u, int64_t n, float beta,
                                                  bool nesterov, int32_t wd_mode, float lr,
                                                  float wd, float grad_scale) {
    if (n <= 0) return cudaSuccess;
    // the factor as the CPU computes it (decoupled: 1 - lr wd; independent: 1 - wd)
    float factor = 1.0f;
    if (wd != 0.0f && wd_mode == 0) factor = 1.0f - lr * wd;
    if (wd != 0.0f && wd_mode == 1) factor = 1.0f - wd;
    momentum_kernel<<<blocks_for(n, 4), THREADS, 0, stream>>>(w, g, m, u, n, beta, nesterov,
                                                              wd_mode == 2, wd, factor,
                                                              grad_scale);
    return cudaGetLastError();
}

extern "C" cudaError_t lwc_ns_normalize(cudaStream_t stream, const float *u, int64_t batch,
                                        int64_t n, float eps, float *partials,
                                        int32_t partials_per_matrix, float *x_f32, void *x_bf16) {
    if (batch <= 0 || n <= 0) return cudaSuccess;
    int blocks = blocks_for(n, 8);
    if (blocks > partials_per_matrix) blocks = partials_per_matrix;
    const dim3 grid((unsigned)blocks, (unsigned)batch);
    square_partials<<<grid, THREADS, 0, stream>>>(u, n, partials, partials_per_matrix);
    scale_by_norm<<<grid, THREADS, 0, stream>>>(u, n, partials, partials_per_matrix, eps, x_f32,
                                                static_cast<__nv_bfloat16 *>(x_bf16));
    return cudaGetLastError();
}
