// softmax.cu: the LM head's softmax cross-entropy on a GPU besides its GEMMs (cross_entropy.c
// runs those on cuBLAS): per row of a chunk of logits the max, the sum of exponentials (in
// double, reduced in a fixed tree), the log-sum-exp and the loss; the count of counted targets;
// and the softmax's gradient formed in place. A target outside [0, v) is ignored (loss 0, no
// gradient). Formulas and roundings as the CPU reference's (device/cpu/cross_entropy.c).
#include "cuda/kernels.h"

#include <math.h>

namespace {

constexpr int ROW_THREADS = 512; // one block per row of up to ~50k logits
constexpr int THREADS = 256;

__device__ bool counted(int32_t target, int64_t v) { return target >= 0 && target < v; }

// Block-wide reductions (blockDim.x a multiple of 32, at most 1024): warps by xor-shuffles,
// then warp 0 over the warps' results; every thread gets the result. Max is exact in any order;
// the sum's order is fixed by the block size alone. shared: 33 slots (32 warps, the result).
template <typename T, typename Op> __device__ T block_reduce(T v, T *shared, Op op, T identity) {
    for (int off = 16; off > 0; off >>= 1)
        v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    __syncthreads(); // `shared` is free (a previous reduction's readers are done)
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < warps ? shared[lane] : identity;
        for (int off = 16; off > 0; off >>= 1)
            v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
        if (lane == 0) shared[32] = v;
    }
    __syncthreads();
    return shared[32];
}

struct max_op {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct sum_op {
    __device__ double operator()(double a, double b) const { return a + b; }
};

// grid (rows): row r of logits[rows, v]: lse[r], losses[r]; with keep, the row becomes its
// probabilities exp(logit - lse) (the backward's input when the whole batch fit one chunk).
__global__ void __launch_bounds__(ROW_THREADS)
    rows_kernel(float *logits, int64_t v, const int32_t *targets, float *losses, float *lse,
                bool keep) {
    __shared__ float fshared[33];
    __shared__ double dshared[33];
    __shared__ float row_lse;
    const int64_t r = blockIdx.x;
    float *row = logits + r * v;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
        m = fmaxf(m, row[j]);
    m = block_reduce(m, fshared, max_op(), -INFINITY);
    // expf of the shifted logits summed in double: v can be 50k
    double sum = 0.0;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
        sum += (double)expf(row[j] - m);
    sum = block_reduce(sum, dshared, sum_op(), 0.0);
    if (threadIdx.x == 0) {
        const double log_sum = log(sum);
        const float l = (float)((double)m + log_sum);
        lse[r] = l;
        row_lse = l;
        const int32_t tg = targets[r];
        // log(sum) - (logit - max): accurate where the target's probability underflows
        losses[r] = counted(tg, v) ? (float)(log_sum - (double)(row[tg] - m)) : 0.0f;
    }
    __syncthreads(); // row[tg] is read before any thread overwrites it
    if (keep) {
        const float l = row_lse;
        for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
            row[j] = expf(row[j] - l);
    }
}

// One block: *count = the number of targets in [0, v) (an integer sum: any order is exact).
__global__ void count_kernel(const int32_t *targets, int64_t n, int64_t v, int32_t *count) {
    __shared__ int32_t shared[32];
    int32_t k = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        k += counted(targets[i], v);
    for (int off = 16; off > 0; off >>= 1)
        k += __shfl_xor_sync(0xffffffffu, k, off);
    if ((threadIdx.x & 31) == 0) shared[threadIdx.x >> 5] = k;
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t total = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++)
            total += shared[w];
        *count = total;
    }
}

// grid (rows): row r becomes loss_scale / count * (p - onehot(target)), p = exp(logit - lse)
// (recompute) or the kept probabilities; 0 for an ignored target. Rounded as the CPU: p * s,
// then the target's entry minus s.
__global__ void dlogits_kernel(float *logits, int64_t v, const int32_t *targets,
                               const float *lse, bool recompute, float loss_scale,
                               const int32_t *count) {
    const int64_t r = blockIdx.x;
    float *row = logits + r * v;
    const int32_t tg = targets[r];
    if (!counted(tg, v)) {
        for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
            row[j] = 0.0f;
        return;
    }
    // count >= 1 here: this row's target is counted
    const float s = __fdiv_rn(loss_scale, (float)*count), l = lse[r];
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
        const float p = recompute ? expf(row[j] - l) : row[j];
        const float d = __fmul_rn(p, s);
        row[j] = j == tg ? __fsub_rn(d, s) : d;
    }
}

} // namespace

extern "C" cudaError_t lwc_ce_rows(cudaStream_t stream, float *logits, int64_t rows, int64_t v,
                                   const int32_t *targets, float *losses, float *lse, bool keep) {
    if (rows > 0 && v > 0)
        rows_kernel<<<(unsigned)rows, ROW_THREADS, 0, stream>>>(logits, v, targets, losses, lse,
                                                                keep);
    return cudaGetLastError();
}

extern "C" cudaError_t lwc_ce_count(cudaStream_t stream, const int32_t *targets, int64_t n,
                                    int64_t v, int32_t *count) {
    count_kernel<<<1, 1024, 0, stream>>>(targets, n, v, count);
    return cudaGetLastError();
}

extern "C" cudaError_t lwc_ce_dlogits(cudaStream_t stream, float *logits, int64_t rows, int64_t v,
                                      const int32_t *targets, const float *lse, bool recompute,
                                      float loss_scale, const int32_t *count) {
    if (rows > 0 && v > 0)
        dlogits_kernel<<<(unsigned)rows, THREADS, 0, stream>>>(logits, v, targets, lse, recompute,
                                                               loss_scale, count);
    return cudaGetLastError();
}
