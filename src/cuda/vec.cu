// vec.cu: the table's vector entries on a GPU: the norm statistics, the finite check (its flag
// copied back, the stream waited for), scale, add and axpy (the conversions between fp32 and bf16
// are bf16.cu's). Reductions are deterministic: each block writes its partial in a fixed slot and
// one block adds them in order, so the gradient norm (and the clipping it decides) repeats bit for
// bit. Products and sums are rounded separately (no FMA contraction) wherever the CPU reference
// rounds them so.
#include "cuda/cuda.h"

namespace {

constexpr int THREADS = 256;
constexpr int MAX_BLOCKS = 1024; // partials of a reduction: 1024 x 2 doubles = 16 KiB of scratch

int blocks_for(int64_t n) {
    int64_t b = (n + THREADS - 1) / THREADS;
    return (int)(b < 1 ? 1 : b > MAX_BLOCKS * 4 ? MAX_BLOCKS * 4 : b);
}

template <typename T> __device__ T block_sum(T v, T *shared) {
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, off);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = threadIdx.x < blockDim.x / 32 ? shared[lane] : T(0);
    if (warp == 0)
        for (int off = 16; off > 0; off >>= 1)
            v += __shfl_down_sync(0xffffffffu, v, off);
    __syncthreads();
    return v; // valid in thread 0
}

__global__ void norm_partials(const float *x, int64_t n, double *partials) {
    __shared__ double shared[32];
    double squares = 0.0, zeros = 0.0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float v = x[i];
        squares += (double)v * v;
        zeros += v == 0.0f;
    }
    squares = block_sum(squares, shared);
    zeros = block_sum(zeros, shared);
    if (threadIdx.x == 0) {
        partials[2 * blockIdx.x] = squares;
        partials[2 * blockIdx.x + 1] = zeros;
    }
}

__global__ void norm_finish(const double *partials, int blocks, double *acc) {
    __shared__ double shared[32];
    double squares = 0.0, zeros = 0.0;
    for (int b = threadIdx.x; b < blocks; b += blockDim.x) {
        squares += partials[2 * b];
        zeros += partials[2 * b + 1];
    }
    squares = block_sum(squares, shared);
    zeros = block_sum(zeros, shared);
    if (threadIdx.x == 0) {
        acc[0] += squares;
        acc[1] += zeros;
    }
}

__global__ void finite_kernel(const float *x, int64_t n, int32_t *flag) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        if (!isfinite(x[i])) *flag = 0; // a benign race: every writer writes 0
}

__global__ void scale_kernel(float *x, int64_t n, float alpha) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] *= alpha;
}

__global__ void add_kernel(float *y, const float *a, const float *b, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = a[i] + b[i];
}

__global__ void axpy_kernel(float *y, float alpha, const float *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = __fadd_rn(y[i], __fmul_rn(alpha, x[i])); // no FMA: as the CPU rounds
}

__global__ void set_flag(int32_t *flag, int32_t v) { *flag = v; }

} // namespace

// acc[0] += sum of x^2, acc[1] += count of zeros (acc: 2 doubles of device memory), reduced in a
// fixed order (block partials in scratch, then one block), so that runs repeat bit for bit.
static cudaError_t norm_stats(cudaStream_t stream, const float *x, int64_t n, double *acc,
                              void *scratch) {
    if (n <= 0) return cudaSuccess;
    int blocks = blocks_for(n);
    if (blocks > MAX_BLOCKS) blocks = MAX_BLOCKS;
    double *partials = static_cast<double *>(scratch);
    norm_partials<<<blocks, THREADS, 0, stream>>>(x, n, partials);
    norm_finish<<<1, THREADS, 0, stream>>>(partials, blocks, acc);
    return cudaGetLastError();
}

// *flag (device int) = 1 if every x is finite, else 0.
static cudaError_t all_finite(cudaStream_t stream, const float *x, int64_t n, int32_t *flag) {
    set_flag<<<1, 1, 0, stream>>>(flag, 1);
    if (n > 0) finite_kernel<<<blocks_for(n), THREADS, 0, stream>>>(x, n, flag);
    return cudaGetLastError();
}

static cudaError_t scale(cudaStream_t stream, float *x, int64_t n, float alpha) {
    if (n > 0) scale_kernel<<<blocks_for(n), THREADS, 0, stream>>>(x, n, alpha);
    return cudaGetLastError();
}

static cudaError_t add(cudaStream_t stream, float *y, const float *a, const float *b, int64_t n) {
    if (n > 0) add_kernel<<<blocks_for(n), THREADS, 0, stream>>>(y, a, b, n);
    return cudaGetLastError();
}

static cudaError_t axpy(cudaStream_t stream, float *y, float alpha, const float *x, int64_t n) {
    if (n > 0) axpy_kernel<<<blocks_for(n), THREADS, 0, stream>>>(y, alpha, x, n);
    return cudaGetLastError();
}

// ---- the table's entries ------------------------------------------------------------------------

// The flag of the finite check: the last 8 bytes of the stream's scratch, after the partials.
#define FLAG_OFFSET (LWC_SCRATCH_BYTES - 8)

lw_status lwc_vec_norm_stats(lw_stream *s, const float *x, int64_t n, double *acc) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s, norm_stats(lwc_cuda_stream(s), x, n, acc, lwc_str(s)->scratch),
                        "the norm statistics kernel");
}

lw_status lwc_vec_all_finite(lw_stream *s, const float *x, int64_t n, bool *finite) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    lwc_stream *cs = lwc_str(s);
    int32_t *flag = (int32_t *)((char *)cs->scratch + FLAG_OFFSET);
    cudaError_t e = all_finite(cs->stream, x, n, flag);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(cs->host_flag, flag, sizeof *flag, cudaMemcpyDeviceToHost, cs->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(cs->stream);
    if (e != cudaSuccess) return lwc_fail(s->device, e, "the finite check");
    *finite = *(const int32_t *)cs->host_flag != 0;
    return LW_OK;
}

lw_status lwc_vec_scale(lw_stream *s, float *x, int64_t n, float alpha) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s, scale(lwc_cuda_stream(s), x, n, alpha), "the scale kernel");
}

lw_status lwc_vec_add(lw_stream *s, float *y, const float *a, const float *b, int64_t n) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s, add(lwc_cuda_stream(s), y, a, b, n), "the add kernel");
}

lw_status lwc_vec_axpy(lw_stream *s, float *y, float alpha, const float *x, int64_t n) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s, axpy(lwc_cuda_stream(s), y, alpha, x, n), "the axpy kernel");
}
