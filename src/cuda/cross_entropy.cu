// cross_entropy.cu: the LM head fused with softmax cross-entropy on a GPU, a chunk of rows at a
// time (lw_model_kernels.h's contract, as device/cpu/cross_entropy.c): the chunk's logits by one
// cuBLAS GEMM into the scratch, each row's max, sum of exponentials (in double, reduced in a fixed
// tree), log-sum-exp and loss (the row kernels below), and in the backward the count of counted
// targets on the device (no wait), the softmax's gradient formed in place and two GEMMs (beta 1)
// into dh and dw. A target outside [0, v) is ignored (loss 0, no gradient). When all rows fit one
// chunk the forward leaves the probabilities in the scratch and the backward reuses them; otherwise
// it recomputes each chunk's logits. The mean loss is summed on the host in double, as on the CPU.
// Formulas and roundings as the CPU reference's.
//
// Under bf16 GEMMs the head's weight w (v x c, 50304 x 768 for GPT-2: every chunk reads all of
// it; read as it is when it is bf16) and h are rounded to bf16 once per call, not once per chunk,
// and each chunk's dlogits once for its two GEMMs, each into its own region of the stream's
// workspace; under fp32 or TF32 GEMMs a bf16 w is widened once per call likewise. bf16 logits
// (autocast's: the GEMM's fp32 sums rounded) halve every pass over the chunk: under bf16 GEMMs
// cuBLAS writes them in bf16, twice the rows a chunk in the same scratch, and the backward's
// dlogits are formed in bf16 in place, read by its GEMMs as they are; under fp32 or TF32 GEMMs
// (the reference pairing) the logits pass through an fp32 region of a chunk's size and the
// dlogits are widened into it. The row kernels take logits of either dtype (L: float, or uint16_t
// for bf16 logits, read widened, dlogits written rounded as the CPU rounds them).
//
// At the end the same head split over tensor parallelism's vocabulary ranks: a rank's row
// statistics, their combination across ranks, and its rows' gradient.
// A softcap (cap > 0) is applied as the row kernels read each logit (softcap.h); a kept fp32 chunk
// holds the capped logits (not the probabilities), whence the backward's p and slope.
#include "cuda/bf16_bits.h"
#include "cuda/cuda.h"
#include "cuda/softcap.h"

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

// grid (rows): row r of logits[rows, v] (capped at cap > 0): lse[r], losses[r]; with keep (fp32
// logits only), the row becomes its probabilities exp(logit - lse), or with a cap its capped
// logits (the backward's input when the whole batch fit one chunk).
template <typename L>
__global__ void __launch_bounds__(ROW_THREADS)
    rows_kernel(L *logits, int64_t v, const int32_t *targets, float *losses, float *lse, bool keep,
                float cap) {
    __shared__ float fshared[33];
    __shared__ double dshared[33];
    __shared__ float row_lse;
    const int64_t r = blockIdx.x;
    L *row = logits + r * v;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
        m = fmaxf(m, lwc_capped_logit(row, j, cap));
    m = block_reduce(m, fshared, max_op(), -INFINITY);
    // expf of the shifted logits summed in double: v can be 50k
    double sum = 0.0;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
        sum += (double)expf(lwc_capped_logit(row, j, cap) - m);
    sum = block_reduce(sum, dshared, sum_op(), 0.0);
    if (threadIdx.x == 0) {
        const double log_sum = log(sum);
        const float l = (float)((double)m + log_sum);
        lse[r] = l;
        row_lse = l;
        const int32_t tg = targets[r];
        // log(sum) - (logit - max): accurate where the target's probability underflows
        losses[r] =
            counted(tg, v) ? (float)(log_sum - (double)(lwc_capped_logit(row, tg, cap) - m)) : 0.0f;
    }
    __syncthreads(); // row[tg] is read before any thread overwrites it
    if (keep && cap > 0.0f) {
        for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
            lwc_store(row, j, lwc_capped_logit(row, j, cap));
    } else if (keep) {
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
// then the target's entry minus s (then to bf16 for bf16 logits). Capped: p of the capped logit
// z (kept so, or capped here), each entry then times the cap's slope at z.
template <typename L>
__global__ void dlogits_kernel(L *logits, int64_t v, const int32_t *targets, const float *lse,
                               bool recompute, float loss_scale, const int32_t *count, float cap) {
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
    if (cap > 0.0f) {
        for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
            const float z = recompute ? lwc_capped_logit(row, j, cap) : lwc_load(row, j);
            const float d = __fmul_rn(expf(z - l), s);
            lwc_store(row, j, __fmul_rn(j == tg ? __fsub_rn(d, s) : d, lwc_softcap_slope(z, cap)));
        }
        return;
    }
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
        const float x = lwc_load(row, j);
        const float d = __fmul_rn(recompute ? expf(x - l) : x, s);
        lwc_store(row, j, j == tg ? __fsub_rn(d, s) : d);
    }
}

// ---- tensor parallelism: the vocabulary-parallel head -------------------------------------

// grid (rows): row r of logits[rows, v] (capped at cap > 0), its first `real` columns: the max,
// the sum of exp(logit - max) in double (rounded once to float), the target's logit where this
// rank holds it; into stats[3, n] at row r0 + r. real 0: -inf, 0, 0 (the logits are not read).
template <typename L>
__global__ void __launch_bounds__(ROW_THREADS)
    partial_rows_kernel(const L *logits, int64_t v, int64_t real, const int32_t *targets,
                        int64_t first, float *stats, int64_t n, int64_t r0, float cap) {
    __shared__ float fshared[33];
    __shared__ double dshared[33];
    const int64_t r = blockIdx.x;
    const L *row = logits + r * v;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < real; j += blockDim.x)
        m = fmaxf(m, lwc_capped_logit(row, j, cap));
    m = block_reduce(m, fshared, max_op(), -INFINITY);
    double sum = 0.0;
    for (int64_t j = threadIdx.x; j < real; j += blockDim.x)
        sum += (double)expf(lwc_capped_logit(row, j, cap) - m);
    sum = block_reduce(sum, dshared, sum_op(), 0.0);
    if (threadIdx.x == 0) {
        const int64_t k = (int64_t)targets[r] - first;
        stats[r0 + r] = m;
        stats[n + r0 + r] = (float)sum;
        stats[2 * n + r0 + r] = k >= 0 && k < real ? lwc_capped_logit(row, k, cap) : 0.0f;
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
// row whose target is ignored. Rounded as the CPU: p * s, then the target's entry minus s; with
// a cap, p of the capped logit z, each entry then times the cap's slope at z.
template <typename L>
__global__ void partial_dlogits_kernel(L *logits, int64_t v, int64_t real, const int32_t *targets,
                                       int64_t first, int64_t vocab, const float *lse,
                                       float loss_scale, const int32_t *count, float cap) {
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
        const float z = lwc_capped_logit(row, j, cap);
        const float d0 = __fmul_rn(expf(z - l), s), d = j == k ? __fsub_rn(d0, s) : d0;
        lwc_store(row, j, cap > 0.0f ? __fmul_rn(d, lwc_softcap_slope(z, cap)) : d);
    }
}

} // namespace

// The kernels' launchers (the vocabulary-parallel head's first), each returning the launch's error.
static cudaError_t ce_partial_rows(cudaStream_t stream, const void *logits, bool bf16, int64_t rows,
                                   int64_t v, int64_t real, const int32_t *targets, int64_t first,
                                   float *stats, int64_t n, int64_t r0, float cap) {
    if (rows <= 0) return cudaSuccess;
    if (bf16)
        partial_rows_kernel<<<(unsigned)rows, ROW_THREADS, 0, stream>>>(
            static_cast<const uint16_t *>(logits), v, real, targets, first, stats, n, r0, cap);
    else
        partial_rows_kernel<<<(unsigned)rows, ROW_THREADS, 0, stream>>>(
            static_cast<const float *>(logits), v, real, targets, first, stats, n, r0, cap);
    return cudaGetLastError();
}

static cudaError_t ce_combine(cudaStream_t stream, float *losses, float *lse, const float *stats,
                              int64_t parts, const int32_t *targets, int64_t n, int64_t vocab) {
    if (n > 0) {
        int64_t blocks = (n + THREADS - 1) / THREADS;
        blocks = blocks > 8192 ? 8192 : blocks;
        combine_kernel<<<(unsigned)blocks, THREADS, 0, stream>>>(losses, lse, stats, parts, targets,
                                                                 n, vocab);
    }
    return cudaGetLastError();
}

static cudaError_t ce_partial_dlogits(cudaStream_t stream, void *logits, bool bf16, int64_t rows,
                                      int64_t v, int64_t real, const int32_t *targets,
                                      int64_t first, int64_t vocab, const float *lse,
                                      float loss_scale, const int32_t *count, float cap) {
    if (rows <= 0 || v <= 0) return cudaSuccess;
    if (bf16)
        partial_dlogits_kernel<<<(unsigned)rows, THREADS, 0, stream>>>(
            static_cast<uint16_t *>(logits), v, real, targets, first, vocab, lse, loss_scale, count,
            cap);
    else
        partial_dlogits_kernel<<<(unsigned)rows, THREADS, 0, stream>>>(
            static_cast<float *>(logits), v, real, targets, first, vocab, lse, loss_scale, count,
            cap);
    return cudaGetLastError();
}

static cudaError_t ce_rows(cudaStream_t stream, void *logits, bool bf16, int64_t rows, int64_t v,
                           const int32_t *targets, float *losses, float *lse, bool keep,
                           float cap) {
    if (rows <= 0 || v <= 0) return cudaSuccess;
    if (bf16)
        rows_kernel<<<(unsigned)rows, ROW_THREADS, 0, stream>>>(static_cast<uint16_t *>(logits), v,
                                                                targets, losses, lse, false, cap);
    else
        rows_kernel<<<(unsigned)rows, ROW_THREADS, 0, stream>>>(static_cast<float *>(logits), v,
                                                                targets, losses, lse, keep, cap);
    return cudaGetLastError();
}

static cudaError_t ce_count(cudaStream_t stream, const int32_t *targets, int64_t n, int64_t v,
                            int32_t *count) {
    count_kernel<<<1, 1024, 0, stream>>>(targets, n, v, count);
    return cudaGetLastError();
}

static cudaError_t ce_dlogits(cudaStream_t stream, void *logits, bool bf16, int64_t rows, int64_t v,
                              const int32_t *targets, const float *lse, bool recompute,
                              float loss_scale, const int32_t *count, float cap) {
    if (rows <= 0 || v <= 0) return cudaSuccess;
    if (bf16) // bf16 logits are never overwritten by probabilities: always from the logits
        dlogits_kernel<<<(unsigned)rows, THREADS, 0, stream>>>(
            static_cast<uint16_t *>(logits), v, targets, lse, true, loss_scale, count, cap);
    else
        dlogits_kernel<<<(unsigned)rows, THREADS, 0, stream>>>(
            static_cast<float *>(logits), v, targets, lse, recompute, loss_scale, count, cap);
    return cudaGetLastError();
}

// ---- the table's entries ------------------------------------------------------------------------

// Logits held at once: 64 Mi floats (256 MiB), 1334 rows at GPT-2's 50304 tokens. The size
// depends on (n, v) alone (the table's scratch entry has no device).
#define CE_CHUNK_FLOATS (INT64_C(1) << 26)

// Rows per chunk: bf16 logits under bf16 products take twice fp32's in the same scratch (under
// fp32 or TF32 products they pass through an fp32 region of a chunk's size: fp32's rows).
static int64_t chunk_rows(int64_t n, int64_t v, bool doubled) {
    int64_t rows = v > 0 ? CE_CHUNK_FLOATS / v : n;
    rows = (rows < 1 ? 1 : rows) * (doubled ? 2 : 1);
    return rows < n ? rows : n;
}

// The chunk rows of a call with logits of logits_dtype on the stream's device.
static int64_t call_rows(const lw_stream *s, int64_t n, int64_t v, lw_dtype logits_dtype) {
    return chunk_rows(n, v, logits_dtype == LW_DTYPE_BF16 && s->device->matmul == LW_MATMUL_BF16);
}

// Values of the staging region a forward needs: bf16 logits under fp32 or TF32 products.
static int64_t forward_staging(const lw_stream *s, int64_t chunk, int64_t v, lw_dtype dtype) {
    return dtype == LW_DTYPE_BF16 && s->device->matmul != LW_MATMUL_BF16 ? chunk * v : 0;
}

int64_t lwc_cross_entropy_scratch_floats(int64_t n, int64_t v) {
    return n > 0 && v > 0 ? chunk_rows(n, v, false) * v : 0;
}

// The GEMMs' operands for a call, in the product's type: under bf16, h rounded into the second
// of the stream's workspace regions, w as it is when bf16 or rounded into the first; otherwise h
// as it is and w as it is when fp32 or widened into the first region. h is needed by the
// forward's logits and the backward's dw; w by the logits and dh. `dl`, a third region of a
// chunk (`chunk_elements` values) in the product's type, where the logits' dtype is not it: fp32
// logits under bf16 GEMMs round their dlogits there; bf16 logits under fp32 or TF32 GEMMs take
// their fp32 sums there (then rounded into the scratch) and widen their dlogits there.
typedef struct ce_operands {
    lwc_operand w, h;
    bool bf16_logits;
    void *dl; // NULL: the GEMMs read the scratch as it is
} ce_operands;

static lw_status operands(lw_stream *s, ce_operands *o, const float *h, const void *w,
                          lw_dtype w_dtype, lw_dtype logits_dtype, int64_t n, int64_t c, int64_t v,
                          bool need_w, int64_t chunk_elements) {
    o->w = lwc_typed(w, w_dtype), o->h = lwc_f32(h), o->dl = NULL;
    o->bf16_logits = logits_dtype == LW_DTYPE_BF16;
    if (c <= 0) return LW_OK;
    const bool bf16 = s->device->matmul == LW_MATMUL_BF16;
    const bool convert_w = need_w && o->w.bf16 != bf16;
    const bool staged = o->bf16_logits != bf16 && chunk_elements > 0;
    if (!bf16 && !convert_w && !staged) return LW_OK;
    const int64_t bytes[3] = {convert_w ? (bf16 ? 2 : 4) * v * c : 0, bf16 ? 2 * n * c : 0,
                              staged ? (bf16 ? 2 : 4) * chunk_elements : 0};
    void *r[3];
    lw_status st = lwc_regions(s, 3, bytes, r);
    if (st == LW_OK && convert_w)
        st = bf16 ? lwc_to_bf16(s, r[0], static_cast<const float *>(w), v * c)
                  : lwc_widen(s, static_cast<float *>(r[0]), w, v * c);
    if (st == LW_OK && bf16) st = lwc_to_bf16(s, r[1], h, n * c);
    if (st != LW_OK) return st;
    if (convert_w) o->w = lwc_operand{r[0], bf16};
    if (bf16) o->h = lwc_bf16(r[1]);
    if (staged) o->dl = r[2];
    return LW_OK;
}

// out[rows, v] (the logits' dtype) = h[r0 .. r0 + rows, c] w[v, c]^T. Column-major: out is L^T
// [v, rows] (ld v), w is W^T [c, v] (ld c), h is H^T [c, rows] (ld c); L^T = W H^T = op_T(w)
// op_N(h): m = v, n = rows, k = c. The operands are of the product's type already.
static lw_status logits(lw_stream *s, void *out, const ce_operands *o, int64_t r0, int64_t rows,
                        int64_t c, int64_t v) {
    const char *what = "the LM head's logits";
    if (c <= 0)
        return lwc_launched(s,
                            cudaMemsetAsync(out, 0, (o->bf16_logits ? 2 : 4) * (size_t)(rows * v),
                                            lwc_cuda_stream(s)),
                            "cudaMemsetAsync");
    const lwc_operand h = lwc_operand_at(o->h, r0 * c);
    if (!o->bf16_logits)
        return lwc_gemm(s, true, false, v, rows, c, 1.0f, o->w, c, h, c, 0.0f,
                        static_cast<float *>(out), v, what);
    if (o->dl == NULL) // bf16 products: cuBLAS rounds the fp32 sums as it stores them
        return lwc_gemm_ex(s, true, false, v, rows, c, 1.0f, o->w, c, h, c, 0.0f, out, true, v,
                           what);
    float *sums = static_cast<float *>(o->dl);
    lw_status st = lwc_gemm(s, true, false, v, rows, c, 1.0f, o->w, c, h, c, 0.0f, sums, v, what);
    return st == LW_OK ? lwc_to_bf16(s, out, sums, rows * v) : st;
}

// The mean over rows with targets in [0, v) of losses[n], summed on the host in double in row
// order, of the rows' float losses (the CPU sums the unrounded doubles: ~1e-7 relative apart);
// waits for the stream.
static lw_status mean_loss(lw_stream *s, const float *losses, const int32_t *targets, int64_t n,
                           int64_t v, double *loss) {
    *loss = 0.0;
    if (n <= 0) return LW_OK;
    cudaStream_t cs = lwc_cuda_stream(s);
    lw_status st;
    void *host = NULL;
    if ((st = lwc_host_workspace(s, 8 * n, &host)) != LW_OK) return st;
    float *hl = static_cast<float *>(host);
    int32_t *ht = (int32_t *)(hl + n);
    cudaError_t e =
        cudaMemcpyAsync(hl, losses, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost, cs);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(ht, targets, sizeof(int32_t) * (size_t)n, cudaMemcpyDeviceToHost, cs);
    if (e == cudaSuccess) e = cudaStreamSynchronize(cs);
    if (e != cudaSuccess) return lwc_fail(s->device, e, "copying the losses to the host");
    double total = 0.0;
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++)
        if (ht[i] >= 0 && ht[i] < v) {
            total += (double)hl[i];
            count++;
        }
    *loss = count > 0 ? total / (double)count : 0.0;
    return LW_OK;
}

lw_status lwc_cross_entropy_forward(lw_stream *s, float *losses, float *lse, float *scratch,
                                    const float *h, const void *w, lw_dtype w_dtype,
                                    lw_dtype logits_dtype, float softcap, const int32_t *targets,
                                    int64_t n, int64_t c, int64_t v, double *loss) {
    *loss = 0.0;
    if (n <= 0 || v <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cudaStream_t cs = lwc_cuda_stream(s);
    const bool bf16 = logits_dtype == LW_DTYPE_BF16;
    const int64_t chunk = call_rows(s, n, v, logits_dtype);
    ce_operands o;
    lw_status st = operands(s, &o, h, w, w_dtype, logits_dtype, n, c, v, true,
                            forward_staging(s, chunk, v, logits_dtype));
    for (int64_t r0 = 0; r0 < n && st == LW_OK; r0 += chunk) {
        const int64_t rows = n - r0 < chunk ? n - r0 : chunk;
        st = logits(s, scratch, &o, r0, rows, c, v);
        // chunk == n: the probabilities (fp32) or the logits (bf16) stay for the backward
        if (st == LW_OK)
            st = lwc_launched(s,
                              ce_rows(cs, scratch, bf16, rows, v, targets + r0, losses + r0,
                                      lse + r0, chunk == n, softcap),
                              "the cross-entropy row kernel");
    }
    if (st != LW_OK) return st;
    return mean_loss(s, losses, targets, n, v, loss);
}

// The LM head's gradients from a chunk's dlogits (scratch: [rows, v], rows r0.. of the batch):
// dh[rows, c] += dl w (when dh is wanted) and dw[v, c] += dl^T h. dlogits not of the product's
// type are converted once for both GEMMs into the `dl` region (the scratch is rewritten by the
// next chunk's logits only after the stream has run these).
static lw_status head_grads(lw_stream *s, const ce_operands *o, void *scratch, int64_t r0,
                            int64_t rows, int64_t c, int64_t v, float *dh, float *dw) {
    lw_status st = LW_OK;
    lwc_operand dl = {scratch, o->bf16_logits};
    if (o->dl != NULL) {
        st = o->bf16_logits ? lwc_widen(s, static_cast<float *>(o->dl), scratch, rows * v)
                            : lwc_to_bf16(s, o->dl, static_cast<const float *>(scratch), rows * v);
        dl = lwc_operand{o->dl, !o->bf16_logits};
    }
    // dh: column-major dH^T [c, rows] (ld c) = W^T [c, v] (w as stored, ld c) dL^T [v, rows] (the
    // scratch as stored, ld v): op_N(w) op_N(dl), m = c, n = rows, k = v, beta 1.
    if (st == LW_OK && dh != NULL)
        st = lwc_gemm(s, false, false, c, rows, v, 1.0f, o->w, c, dl, v, 1.0f, dh + r0 * c, c,
                      "the LM head's input gradient");
    // dw: column-major dW^T [c, v] (ld c) = H^T [c, rows] (h as stored, ld c) dL [rows, v] (the
    // scratch is dL^T [v, rows], ld v: transposed): op_N(h) op_T(dl), m = c, n = v, k = rows,
    // beta 1.
    if (st == LW_OK)
        st = lwc_gemm(s, false, true, c, v, rows, 1.0f, lwc_operand_at(o->h, r0 * c), c, dl, v,
                      1.0f, dw, c, "the LM head's weight gradient");
    return st;
}

lw_status lwc_cross_entropy_backward(lw_stream *s, float *dh, float *dw, float *scratch,
                                     const float *h, const void *w, lw_dtype w_dtype,
                                     lw_dtype logits_dtype, float softcap, const int32_t *targets,
                                     const float *lse, int64_t n, int64_t c, int64_t v,
                                     float loss_scale) {
    if (n <= 0 || v <= 0 || c <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cudaStream_t cs = lwc_cuda_stream(s);
    // The count stays on the device: the gradient kernel divides by it there. With no counted
    // row every row of dlogits is 0 and the GEMMs add zeros (the CPU skips them).
    int32_t *count = (int32_t *)((char *)lwc_str(s)->scratch + LWC_SCRATCH_COUNT_OFFSET);
    lw_status st =
        lwc_launched(s, ce_count(cs, targets, n, v, count), "the cross-entropy count kernel");
    const bool bf16 = logits_dtype == LW_DTYPE_BF16;
    const int64_t chunk = call_rows(s, n, v, logits_dtype);
    const bool recompute = chunk < n;
    // w serves the recomputed logits and dh: without either it is not rounded
    ce_operands o;
    if (st == LW_OK)
        st = operands(s, &o, h, w, w_dtype, logits_dtype, n, c, v, recompute || dh != NULL,
                      chunk * v);
    for (int64_t r0 = 0; r0 < n && st == LW_OK; r0 += chunk) {
        const int64_t rows = n - r0 < chunk ? n - r0 : chunk;
        if (recompute) st = logits(s, scratch, &o, r0, rows, c, v);
        if (st == LW_OK)
            st = lwc_launched(s,
                              ce_dlogits(cs, scratch, bf16, rows, v, targets + r0, lse + r0,
                                         recompute, loss_scale, count, softcap),
                              "the cross-entropy gradient kernel");
        if (st == LW_OK) st = head_grads(s, &o, scratch, r0, rows, c, v, dh, dw);
    }
    return st;
}

// ---- tensor parallelism: the vocabulary-parallel LM head (lw_model_kernels.h; the CPU's
// cross_entropy.c) ---

// The rows of [first, first + v) below vocab: the real ones.
static int64_t real_rows(int64_t first, int64_t v, int64_t vocab) {
    const int64_t real = vocab - first;
    return real < 0 ? 0 : real < v ? real : v;
}

lw_status lwc_cross_entropy_partial_forward(lw_stream *s, float *stats, float *scratch,
                                            const float *h, const void *w, lw_dtype w_dtype,
                                            lw_dtype logits_dtype, float softcap,
                                            const int32_t *targets, int64_t n, int64_t c, int64_t v,
                                            int64_t first, int64_t vocab) {
    if (n <= 0 || v <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cudaStream_t cs = lwc_cuda_stream(s);
    const bool bf16 = logits_dtype == LW_DTYPE_BF16;
    const int64_t chunk = call_rows(s, n, v, logits_dtype), real = real_rows(first, v, vocab);
    if (real == 0) // all padding: no logits needed, the kernel writes -inf, 0, 0
        return lwc_launched(
            s, ce_partial_rows(cs, scratch, bf16, n, v, 0, targets, first, stats, n, 0, softcap),
            "the cross-entropy statistics kernel");
    ce_operands o;
    lw_status st = operands(s, &o, h, w, w_dtype, logits_dtype, n, c, v, true,
                            forward_staging(s, chunk, v, logits_dtype));
    for (int64_t r0 = 0; r0 < n && st == LW_OK; r0 += chunk) {
        const int64_t rows = n - r0 < chunk ? n - r0 : chunk;
        st = logits(s, scratch, &o, r0, rows, c, v);
        // chunk == n: the logits stay for the backward
        if (st == LW_OK)
            st = lwc_launched(s,
                              ce_partial_rows(cs, scratch, bf16, rows, v, real, targets + r0, first,
                                              stats, n, r0, softcap),
                              "the cross-entropy statistics kernel");
    }
    return st;
}

lw_status lwc_cross_entropy_combine(lw_stream *s, float *losses, float *lse, const float *stats,
                                    int64_t parts, const int32_t *targets, int64_t n, int64_t vocab,
                                    double *loss) {
    *loss = 0.0;
    if (n <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    lw_status st = lwc_launched(
        s, ce_combine(lwc_cuda_stream(s), losses, lse, stats, parts, targets, n, vocab),
        "the cross-entropy combine kernel");
    return st == LW_OK ? mean_loss(s, losses, targets, n, vocab, loss) : st;
}

lw_status lwc_cross_entropy_partial_backward(lw_stream *s, float *dh, float *dw, float *scratch,
                                             const float *h, const void *w, lw_dtype w_dtype,
                                             lw_dtype logits_dtype, float softcap,
                                             const int32_t *targets, const float *lse, int64_t n,
                                             int64_t c, int64_t v, int64_t first, int64_t vocab,
                                             float loss_scale) {
    if (n <= 0 || v <= 0 || c <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cudaStream_t cs = lwc_cuda_stream(s);
    int32_t *count = (int32_t *)((char *)lwc_str(s)->scratch + LWC_SCRATCH_COUNT_OFFSET);
    lw_status st =
        lwc_launched(s, ce_count(cs, targets, n, vocab, count), "the cross-entropy count kernel");
    const bool bf16 = logits_dtype == LW_DTYPE_BF16;
    const int64_t chunk = call_rows(s, n, v, logits_dtype), real = real_rows(first, v, vocab);
    const bool recompute = chunk < n;
    ce_operands o;
    if (st == LW_OK)
        st = operands(s, &o, h, w, w_dtype, logits_dtype, n, c, v, recompute || dh != NULL,
                      chunk * v);
    for (int64_t r0 = 0; r0 < n && st == LW_OK; r0 += chunk) {
        const int64_t rows = n - r0 < chunk ? n - r0 : chunk;
        if (recompute) st = logits(s, scratch, &o, r0, rows, c, v);
        if (st == LW_OK)
            st =
                lwc_launched(s,
                             ce_partial_dlogits(cs, scratch, bf16, rows, v, real, targets + r0,
                                                first, vocab, lse + r0, loss_scale, count, softcap),
                             "the cross-entropy gradient kernel");
        if (st == LW_OK) st = head_grads(s, &o, scratch, r0, rows, c, v, dh, dw);
    }
    return st;
}
