// cross_entropy.cu: the LM head's softmax cross-entropy on a GPU besides its GEMMs (cross_entropy.c
// runs those on cuBLAS): per row of a chunk of logits the max, the sum of exponentials (in
// double, reduced in a fixed tree), the log-sum-exp and the loss; the count of counted targets;
// and the softmax's gradient formed in place. A target outside [0, v) is ignored (loss 0, no
// gradient). Formulas and roundings as the CPU reference's (device/cpu/cross_entropy.c). Also
// the vocabulary-parallel head's pieces (tensor parallelism): a rank's row statistics, their
// combination across ranks, and its rows' gradient. Logits of either dtype (L: float, or
// uint16_t for bf16 logits, read widened, dlogits written rounded as the CPU rounds them).
#include "cuda/bf16_bits.h"
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

// grid (rows): row r of logits[rows, v]: lse[r], losses[r]; with keep (fp32 logits only), the
// row becomes its probabilities exp(logit - lse) (the backward's input when the whole batch fit
// one chunk).
template <typename L>
__global__ void __launch_bounds__(ROW_THREADS)
    rows_kernel(L *logits, int64_t v, const int32_t *targets, float *losses, float *lse,
                bool keep) {
    __shared__ float fshared[33];
    __shared__ double dshared[33];
    __shared__ float row_lse;
    const int64_t r = blockIdx.x;
    L *row = logits + r * v;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
        m = fmaxf(m, lwc_load(row, j));
    m = block_reduce(m, fshared, max_op(), -INFINITY);
    // expf of the shifted logits summed in double: v can be 50k
    double sum = 0.0;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
        sum += (double)expf(lwc_load(row, j) - m);
    sum = block_reduce(sum, dshared, sum_op(), 0.0);
    if (threadIdx.x == 0) {
        const double log_sum = log(sum);
        const float l = (float)((double)m + log_sum);
        lse[r] = l;
        row_lse = l;
        const int32_t tg = targets[r];
        // log(sum) - (logit - max): accurate where the target's probability underflows
        losses[r] = counted(tg, v) ? (float)(log_sum - (double)(lwc_load(row, tg) - m)) : 0.0f;
    }
    __syncthreads(); // row[tg] is read before any thread overwrites it
    if (keep) {
        const float l = row_lse;
        for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
            lwc_store(row, j, expf(lwc_load(row, j) - l));
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
// then the target's entry minus s (then to bf16 for bf16 logits).
template <typename L>
__global__ void dlogits_kernel(L *logits, int64_t v, const int32_t *targets, const float *lse,
                               bool recompute, float loss_scale, const int32_t *count) {
    const int64_t r = blockIdx.x;
    L *row = logits + r * v;
    const int32_t tg = targets[r];
    if (!counted(tg, v)) {
        for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
            lwc_store(row, j, 0.0f);
        return;
    }
    // count >= 1 here: this row's target is counted
    const float s = __fdiv_rn(loss_scale, (float)*count), l = lse[r];
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
        const float x = lwc_load(row, j);
        const float d = __fmul_rn(recompute ? expf(x - l) : x, s);
        lwc_store(row, j, j == tg ? __fsub_rn(d, s) : d);
    }
}

// ---- tensor parallelism: the vocabulary-parallel head -------------------------------------

// grid (rows): row r of logits[rows, v], its first `real` columns: the max, the sum of exp(logit
// - max) in double (rounded once to float), the target's logit where this rank holds it; into
// stats[3, n] at row r0 + r. real 0: -inf, 0, 0 (the logits are not read).
template <typename L>
__global__ void __launch_bounds__(ROW_THREADS)
    partial_rows_kernel(const L *logits, int64_t v, int64_t real, const int32_t *targets,
                        int64_t first, float *stats, int64_t n, int64_t r0) {
    __shared__ float fshared[33];
    __shared__ double dshared[33];
    const int64_t r = blockIdx.x;
    const L *row = logits + r * v;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < real; j += blockDim.x)
        m = fmaxf(m, lwc_load(row, j));
    m = block_reduce(m, fshared, max_op(), -INFINITY);
    double sum = 0.0;
    for (int64_t j = threadIdx.x; j < real; j += blockDim.x)
        sum += (double)expf(lwc_load(row, j) - m);
    sum = block_reduce(sum, dshared, sum_op(), 0.0);
    if (threadIdx.x == 0) {
        const int64_t k = (int64_t)targets[r] - first;
        stats[r0 + r] = m;
        stats[n + r0 + r] = (float)sum;
        stats[2 * n + r0 + r] = k >= 0 && k < real ? lwc_load(row, k) : 0.0f;
    }
}

// A thread per row: the parts' statistics in part order (the CPU's formulas and order).
__global__ void combine_kernel(float *losses, float *lse, const float *stats, int64_t parts,
                               const int32_t *targets, int64_t n, int64_t vocab) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float m = -INFINITY;
        for (int64_t p = 0; p < parts; p++)
            m = fmaxf(m, stats[p * 3 * n + i]);
        double sum = 0.0, target = 0.0;
        for (int64_t p = 0; p < parts; p++) {
            const float *part = stats + p * 3 * n;
            if (part[n + i] > 0.0f) sum += (double)part[n + i] * exp((double)part[i] - (double)m);
            target += (double)part[2 * n + i];
        }
        const double log_sum = log(sum);
        lse[i] = (float)((double)m + log_sum);
        losses[i] = counted(targets[i], vocab) ? (float)(log_sum - (target - (double)m)) : 0.0f;
    }
}

// grid (rows): row r becomes loss_scale / count * (exp(logit - lse) - onehot) over its first
// `real` columns (the target at column target - first when held here), 0 in the padding and in a
// row whose target is ignored. Rounded as the CPU: p * s, then the target's entry minus s.
template <typename L>
__global__ void partial_dlogits_kernel(L *logits, int64_t v, int64_t real, const int32_t *targets,
                                       int64_t first, int64_t vocab, const float *lse,
                                       float loss_scale, const int32_t *count) {
    const int64_t r = blockIdx.x;
    L *row = logits + r * v;
    const int32_t tg = targets[r];
    if (!counted(tg, vocab)) {
        for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
            lwc_store(row, j, 0.0f);
        return;
    }
    const float s = __fdiv_rn(loss_scale, (float)*count), l = lse[r];
    const int64_t k = (int64_t)tg - first;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
        if (j >= real) {
            lwc_store(row, j, 0.0f);
            continue;
        }
        const float d = __fmul_rn(expf(lwc_load(row, j) - l), s);
        lwc_store(row, j, j == k ? __fsub_rn(d, s) : d);
    }
}

} // namespace

extern "C" cudaError_t lwc_ce_partial_rows(cudaStream_t stream, const void *logits, bool bf16,
                                           int64_t rows, int64_t v, int64_t real,
                                           const int32_t *targets, int64_t first, float *stats,
                                           int64_t n, int64_t r0) {
    if (rows <= 0) return cudaSuccess;
    if (bf16)
        partial_rows_kernel<<<(unsigned)rows, ROW_THREADS, 0, stream>>>(
            static_cast<const uint16_t *>(logits), v, real, targets, first, stats, n, r0);
    else
        partial_rows_kernel<<<(unsigned)rows, ROW_THREADS, 0, stream>>>(
            static_cast<const float *>(logits), v, real, targets, first, stats, n, r0);
    return cudaGetLastError();
}

extern "C" cudaError_t lwc_ce_combine(cudaStream_t stream, float *losses, float *lse,
                                      const float *stats, int64_t parts, const int32_t *targets,
                                      int64_t n, int64_t vocab) {
    if (n > 0) {
        int64_t blocks = (n + THREADS - 1) / THREADS;
        blocks = blocks > 8192 ? 8192 : blocks;
        combine_kernel<<<(unsigned)blocks, THREADS, 0, stream>>>(losses, lse, stats, parts, targets,
                                                                 n, vocab);
    }
    return cudaGetLastError();
}

extern "C" cudaError_t lwc_ce_partial_dlogits(cudaStream_t stream, void *logits, bool bf16,
                                              int64_t rows, int64_t v, int64_t real,
                                              const int32_t *targets, int64_t first, int64_t vocab,
                                              const float *lse, float loss_scale,
                                              const int32_t *count) {
    if (rows <= 0 || v <= 0) return cudaSuccess;
    if (bf16)
        partial_dlogits_kernel<<<(unsigned)rows, THREADS, 0, stream>>>(
            static_cast<uint16_t *>(logits), v, real, targets, first, vocab, lse, loss_scale,
            count);
    else
        partial_dlogits_kernel<<<(unsigned)rows, THREADS, 0, stream>>>(
            static_cast<float *>(logits), v, real, targets, first, vocab, lse, loss_scale, count);
    return cudaGetLastError();
}

extern "C" cudaError_t lwc_ce_rows(cudaStream_t stream, void *logits, bool bf16, int64_t rows,
                                   int64_t v, const int32_t *targets, float *losses, float *lse,
                                   bool keep) {
    if (rows <= 0 || v <= 0) return cudaSuccess;
    if (bf16)
        rows_kernel<<<(unsigned)rows, ROW_THREADS, 0, stream>>>(static_cast<uint16_t *>(logits), v,
                                                                targets, losses, lse, false);
    else
        rows_kernel<<<(unsigned)rows, ROW_THREADS, 0, stream>>>(static_cast<float *>(logits), v,
                                                                targets, losses, lse, keep);
    return cudaGetLastError();
}

extern "C" cudaError_t lwc_ce_count(cudaStream_t stream, const int32_t *targets, int64_t n,
                                    int64_t v, int32_t *count) {
    count_kernel<<<1, 1024, 0, stream>>>(targets, n, v, count);
    return cudaGetLastError();
}

extern "C" cudaError_t lwc_ce_dlogits(cudaStream_t stream, void *logits, bool bf16, int64_t rows,
                                      int64_t v, const int32_t *targets, const float *lse,
                                      bool recompute, float loss_scale, const int32_t *count) {
    if (rows <= 0 || v <= 0) return cudaSuccess;
    if (bf16) /* bf16 logits are never overwritten by probabilities: always from the logits */
        dlogits_kernel<<<(unsigned)rows, THREADS, 0, stream>>>(
            static_cast<uint16_t *>(logits), v, targets, lse, true, loss_scale, count);
    else
        dlogits_kernel<<<(unsigned)rows, THREADS, 0, stream>>>(
            static_cast<float *>(logits), v, targets, lse, recompute, loss_scale, count);
    return cudaGetLastError();
}
