// moe.cu: the table's entries for a mixture of experts' router and load-balancing loss on a GPU:
// the router (softmax, top-k, renormalised weights) and its backward; the loss's per-expert
// counts and column sums on the device, added up on the host in double as the CPU adds them, and
// its backward. The router runs a thread per token, the CPU's loops operation for operation
// (__fmul_rn / __fadd_rn / __fdiv_rn: no FMA contraction), so ranks, ties and NaN rows come out as
// the CPU's. No atomics. Moving rows to and from the experts is gather.cu's.
#include "cuda/cuda.h"

namespace {

constexpr int THREADS = 256;

int blocks_for(int64_t n) {
    int64_t b = (n + THREADS - 1) / THREADS;
    return (int)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

// ---- the router ----------------------------------------------------------------------------

// One thread per token: e is the number of experts (tens), small against the tokens, and a
// thread's sequential loops reproduce the CPU's ranking exactly (a strict > keeps the lower index
// on ties; the first untaken candidate is taken whatever it holds, so NaN rows get k distinct
// experts as on the CPU). The row's probabilities and experts are re-read from global memory by
// the thread that wrote them.
__global__ void router_forward_kernel(int32_t *experts, float *weights, float *probs,
                                      const float *logits, int64_t n, int64_t e, int64_t k) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float *l = logits + i * e;
    float *p = probs + i * e;
    int32_t *top = experts + i * k;
    float *w = weights + i * k;
    float max = l[0];
    for (int64_t j = 1; j < e; j++)
        if (l[j] > max) max = l[j];
    double sum = 0.0;
    for (int64_t j = 0; j < e; j++) {
        const float v = expf(__fsub_rn(l[j], max));
        p[j] = v;
        sum += (double)v;
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t j = 0; j < e; j++)
        p[j] = __fmul_rn(p[j], inv);
    float z = 0.0f;
    for (int64_t s = 0; s < k; s++) {
        int64_t best = -1;
        for (int64_t j = 0; j < e; j++) {
            bool taken = false;
            for (int64_t t = 0; t < s; t++)
                taken |= top[t] == j;
            if (!taken && (best < 0 || l[j] > l[best])) best = j;
        }
        top[s] = (int32_t)best;
        z = __fadd_rn(z, p[best]);
    }
    for (int64_t s = 0; s < k; s++)
        w[s] = __fdiv_rn(p[top[s]], z);
}

// The CPU's backward, operation for operation (moe.c there has the derivation).
__global__ void router_backward_kernel(float *dlogits, const float *dweights, const float *dprobs,
                                       const float *probs, const int32_t *experts, int64_t n,
                                       int64_t e, int64_t k) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float *p = probs + i * e;
    const int32_t *top = experts + i * k;
    const float *dw = dweights + i * k;
    const float *dp = dprobs != nullptr ? dprobs + i * e : nullptr;
    float *dl = dlogits + i * e;
    float z = 0.0f;
    for (int64_t s = 0; s < k; s++)
        z = __fadd_rn(z, p[top[s]]);
    float dot_w = 0.0f;
    for (int64_t s = 0; s < k; s++)
        dot_w = __fadd_rn(dot_w, __fmul_rn(dw[s], __fdiv_rn(p[top[s]], z)));
    float dot = 0.0f;
    if (dp != nullptr)
        for (int64_t j = 0; j < e; j++)
            dot = __fadd_rn(dot, __fmul_rn(p[j], dp[j]));
    for (int64_t s = 0; s < k; s++)
        dot = __fadd_rn(dot, __fmul_rn(p[top[s]], __fdiv_rn(__fsub_rn(dw[s], dot_w), z)));
    for (int64_t j = 0; j < e; j++)
        dl[j] = __fadd_rn(dl[j], __fmul_rn(p[j], __fsub_rn(dp != nullptr ? dp[j] : 0.0f, dot)));
    for (int64_t s = 0; s < k; s++)
        dl[top[s]] =
            __fadd_rn(dl[top[s]], __fmul_rn(p[top[s]], __fdiv_rn(__fsub_rn(dw[s], dot_w), z)));
}

// ---- the load-balancing loss ------------------------------------------------------------------

// Block (j, chunk): over the chunk's tokens [r0, r1), counts[chunk * e + j] = the entries of
// experts[r0 k .. r1 k) equal to j and (probs not NULL) cols[chunk * e + j] = the sum of
// probs[r0 .. r1, j] in double; each thread's strided share, then a tree in shared memory, both
// orders fixed by the shapes. Integer counts are exact in any order.
__global__ void aux_stats_kernel(const float *probs, const int32_t *experts, int64_t n, int64_t e,
                                 int64_t k, int64_t per, long long *counts, double *cols) {
    __shared__ long long cnt_part[THREADS];
    __shared__ double col_part[THREADS];
    const int64_t j = blockIdx.x, chunk = blockIdx.y;
    const int64_t r0 = chunk * per, r1 = r0 + per < n ? r0 + per : n;
    const int tid = threadIdx.x;
    long long cnt = 0;
    for (int64_t a = r0 * k + tid; a < r1 * k; a += THREADS)
        cnt += experts[a] == j;
    double col = 0.0;
    if (probs != nullptr)
        for (int64_t r = r0 + tid; r < r1; r += THREADS)
            col += (double)probs[r * e + j];
    cnt_part[tid] = cnt;
    col_part[tid] = col;
    __syncthreads();
    for (int half = THREADS / 2; half > 0; half >>= 1) {
        if (tid < half) {
            cnt_part[tid] += cnt_part[tid + half];
            col_part[tid] += col_part[tid + half];
        }
        __syncthreads();
    }
    if (tid == 0) {
        counts[chunk * e + j] = cnt_part[0];
        if (cols != nullptr) cols[chunk * e + j] = col_part[0];
    }
}

// g[j] = (float)(per * count_j), count_j summed over the chunks: the CPU's rounding of the
// column's gradient.
__global__ void aux_grad_finish_kernel(float *g, const long long *counts, int64_t chunks, int64_t e,
                                       double per) {
    const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (j >= e) return;
    long long count = 0;
    for (int64_t c = 0; c < chunks; c++)
        count += counts[c * e + j];
    g[j] = (float)(per * (double)count);
}

__global__ void aux_grad_add_kernel(float *dprobs, const float *g, int64_t e, int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x)
        dprobs[i] = __fadd_rn(dprobs[i], g[i % e]);
}

unsigned row_blocks(int64_t n, int64_t per_block) {
    return (unsigned)((n + per_block - 1) / per_block);
}

} // namespace

// ---- launchers ----------------------------------------------------------------------------------

constexpr int ROUTER_THREADS = 128;

// The load-balancing loss's statistics are taken in at most this many chunks of tokens.
constexpr int64_t AUX_CHUNKS_MAX = 64;

// Per token (a thread each): probs[n, e] = softmax(logits), experts[n, k] = the k best by logit
// (ties to the lower index), weights[n, k] = their probabilities renormalised.
static cudaError_t moe_router(cudaStream_t stream, int32_t *experts, float *weights, float *probs,
                              const float *logits, int64_t n, int64_t e, int64_t k) {
    if (n > 0)
        router_forward_kernel<<<row_blocks(n, ROUTER_THREADS), ROUTER_THREADS, 0, stream>>>(
            experts, weights, probs, logits, n, e, k);
    return cudaGetLastError();
}

// dlogits[n, e] += the router's backward (dprobs may be NULL).
static cudaError_t moe_router_grad(cudaStream_t stream, float *dlogits, const float *dweights,
                                   const float *dprobs, const float *probs, const int32_t *experts,
                                   int64_t n, int64_t e, int64_t k) {
    if (n > 0)
        router_backward_kernel<<<row_blocks(n, ROUTER_THREADS), ROUTER_THREADS, 0, stream>>>(
            dlogits, dweights, dprobs, probs, experts, n, e, k);
    return cudaGetLastError();
}

// The number of chunks for n tokens (at most AUX_CHUNKS_MAX; [out] *per tokens each, the
// last one fewer).
static int64_t moe_aux_chunks(int64_t n, int64_t *per) {
    // chunks of at least 2048 tokens, at most AUX_CHUNKS_MAX of them
    int64_t chunks = (n + 2047) / 2048;
    if (chunks > AUX_CHUNKS_MAX) chunks = AUX_CHUNKS_MAX;
    if (chunks < 1) chunks = 1;
    const int64_t p = (n + chunks - 1) / chunks;
    *per = p > 0 ? p : 1;
    return n > 0 ? (n + *per - 1) / *per : 1;
}

// counts[chunk * e + j] = the entries of the chunk's rows of experts[n, k] equal to j, and (probs
// not NULL) cols[chunk * e + j] = the sum of its probs[:, j] in double, in a fixed order (device
// arrays of moe_aux_chunks(n) * e values).
static cudaError_t moe_aux_stats(cudaStream_t stream, const float *probs, const int32_t *experts,
                                 int64_t n, int64_t e, int64_t k, long long *counts, double *cols) {
    int64_t per = 1;
    const int64_t chunks = moe_aux_chunks(n, &per);
    if (n > 0 && e > 0)
        aux_stats_kernel<<<dim3((unsigned)e, (unsigned)chunks), THREADS, 0, stream>>>(
            probs, experts, n, e, k, per, counts, cols);
    return cudaGetLastError();
}

// dprobs[n, e] += g[j] in column j, g[j] = (float)(per * count_j) (g: e floats of device scratch),
// the counts from moe_aux_stats.
static cudaError_t moe_aux_grad(cudaStream_t stream, float *dprobs, const long long *counts,
                                int64_t n, int64_t e, double per, float *g) {
    int64_t rows_per = 1;
    const int64_t chunks = moe_aux_chunks(n, &rows_per);
    if (n <= 0 || e <= 0) return cudaSuccess;
    aux_grad_finish_kernel<<<blocks_for(e), THREADS, 0, stream>>>(g, counts, chunks, e, per);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    aux_grad_add_kernel<<<blocks_for(n * e), THREADS, 0, stream>>>(dprobs, g, e, n * e);
    return cudaGetLastError();
}

// ---- the table's entries ------------------------------------------------------------------------

lw_status lwc_moe_router_forward(lw_stream *s, int32_t *experts, float *weights, float *probs,
                                 const float *logits, int64_t n, int64_t e, int64_t k) {
    if (n <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s, moe_router(lwc_cuda_stream(s), experts, weights, probs, logits, n, e, k),
                        "the router kernel");
}

lw_status lwc_moe_router_backward(lw_stream *s, float *dlogits, const float *dweights,
                                  const float *dprobs, const float *probs, const int32_t *experts,
                                  int64_t n, int64_t e, int64_t k) {
    if (n <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(
        s, moe_router_grad(lwc_cuda_stream(s), dlogits, dweights, dprobs, probs, experts, n, e, k),
        "the router backward kernel");
}

// The statistics' grid is (e, chunks): e blocks in x (at most 2^31 - 1).
static lw_status check_experts(lw_stream *s, const char *what, int64_t e) {
    if (e > INT32_MAX)
        return lwc_host->fail(LW_ERR_RANGE, "%s: %s: %lld experts, at most %d", s->device->name,
                              what, (long long)e, INT32_MAX);
    return LW_OK;
}

lw_status lwc_moe_aux_loss_forward(lw_stream *s, const float *probs, const int32_t *experts,
                                   int64_t n, int64_t e, int64_t k, float coef, double *loss) {
    *loss = 0;
    if (n <= 0) return LW_OK;
    lw_status st = check_experts(s, "aux loss forward", e);
    if (st != LW_OK) return st;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    int64_t per = 1;
    const int64_t chunks = moe_aux_chunks(n, &per), cells = chunks * e;
    // device and host alike: counts[chunks, e] (long long) | cols[chunks, e] (double)
    void *dev = NULL, *host = NULL;
    st = lwc_workspace(s, 16 * cells, &dev);
    if (st == LW_OK) st = lwc_host_workspace(s, 16 * cells, &host);
    if (st != LW_OK) return st;
    cudaStream_t cs = lwc_cuda_stream(s);
    cudaError_t err =
        moe_aux_stats(cs, probs, experts, n, e, k, (long long *)dev, (double *)dev + cells);
    if (err != cudaSuccess) return lwc_fail(s->device, err, "the aux loss kernel");
    err = cudaMemcpyAsync(host, dev, (size_t)(16 * cells), cudaMemcpyDeviceToHost, cs);
    if (err == cudaSuccess) err = cudaStreamSynchronize(cs);
    if (err != cudaSuccess) return lwc_fail(s->device, err, "copying the aux loss's statistics");
    const long long *counts = static_cast<const long long *>(host);
    const double *cols = (const double *)host + cells;
    // the CPU's sum: expert by expert, count_j times column j's sum, in double (the column
    // sums' own order differs: chunks of the rows, then the chunks in order)
    double total = 0;
    for (int64_t j = 0; j < e; j++) {
        long long count = 0;
        double col = 0;
        for (int64_t c = 0; c < chunks; c++) {
            count += counts[c * e + j];
            col += cols[c * e + j];
        }
        if (count != 0) total += (double)count * col;
    }
    *loss = (double)coef * (double)e * total / ((double)n * (double)n * (double)k);
    return LW_OK;
}

lw_status lwc_moe_aux_loss_backward(lw_stream *s, float *dprobs, const int32_t *experts, int64_t n,
                                    int64_t e, int64_t k, float coef, float scale) {
    if (n <= 0) return LW_OK;
    lw_status st = check_experts(s, "aux loss backward", e);
    if (st != LW_OK) return st;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    int64_t rows_per = 1;
    const int64_t cells = moe_aux_chunks(n, &rows_per) * e;
    // counts[chunks, e] (long long) | g[e] (float)
    void *dev = NULL;
    st = lwc_workspace(s, 8 * cells + 4 * e, &dev);
    if (st != LW_OK) return st;
    // the CPU's expression, so that each column's float is the CPU's
    const double per = (double)scale * (double)coef * (double)e / ((double)n * (double)n * k);
    cudaStream_t cs = lwc_cuda_stream(s);
    cudaError_t err = moe_aux_stats(cs, NULL, experts, n, e, k, (long long *)dev, NULL);
    if (err == cudaSuccess)
        err = moe_aux_grad(cs, dprobs, (const long long *)dev, n, e, per,
                           (float *)((long long *)dev + cells));
    return lwc_launched(s, err, "the aux loss backward kernels");
}
