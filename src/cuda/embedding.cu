// embedding.cu: the table's token plus position embedding entries on a GPU over a range of the
// table's rows (a rank's under tensor parallelism; every row a token id can name for the whole
// table): forward a gather of fp32 or bf16 tables (tokens outside the range look up 0), and a
// backward that repeats bit for bit and matches the CPU's order of additions: the position
// table's gradient summed over the batch in order, and the token table's by gather.cu's
// scatter-add by row, the range's positions bucketed by token on the host (buckets.c: a stable
// sort, so each token's positions stay in batch-major order) and one block per (token, channel
// tile) adding its positions into the token's row one after another. Additions rounded as the
// CPU's (__fadd_rn); no atomics.
#include "cuda/cuda.h"

namespace {

constexpr int THREADS = 256;

int blocks_for(int64_t n) {
    int64_t b = (n + THREADS - 1) / THREADS;
    return (int)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

// Value i of a table of fp32 values, or of bf16 values (their bits; widened, exactly).
__device__ __forceinline__ float weight_at(const float *table, int64_t i) { return table[i]; }
__device__ __forceinline__ float weight_at(const uint16_t *table, int64_t i) {
    return __uint_as_float(static_cast<unsigned>(table[i]) << 16);
}

// The rows [first, first + rows) of the table (a rank's under tensor parallelism, or every row a
// token id can name): tokens outside it look up 0; the position row is added where wpe is given.
// W: the tables' element type (float, or uint16_t for bf16).
template <typename W>
__global__ void embed_range_kernel(float *y, const int32_t *tokens, const W *wte, const W *wpe,
                                   int64_t first, int64_t rows, int64_t t, int64_t c,
                                   int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = i / c, ch = i - row * c; // row = bi * t + ti
        const int64_t k = (int64_t)tokens[row] - first;
        const bool here = k >= 0 && k < rows;
        const float tok = here ? weight_at(wte, k * c + ch) : 0.0f;
        if (wpe == nullptr) {
            y[i] = tok;
        } else {
            const float pos = weight_at(wpe, (row % t) * c + ch);
            y[i] = here ? __fadd_rn(tok, pos) : pos;
        }
    }
}

// dwpe[ti, ch] += dy[bi, ti, ch] for bi = 0, 1, ... in order (the CPU's order).
__global__ void embed_dwpe_kernel(float *dwpe, const float *dy, int64_t b, int64_t t, int64_t c) {
    const int64_t tc = t * c;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < tc;
         i += (int64_t)gridDim.x * blockDim.x) {
        float acc = dwpe[i];
        for (int64_t bi = 0; bi < b; bi++)
            acc = __fadd_rn(acc, dy[bi * tc + i]);
        dwpe[i] = acc;
    }
}

} // namespace

// y[b, t, c] = wte[tokens - first] + wpe[t] for the rows [first, first + rows) of the token table
// (wpe may be NULL); other tokens look up 0 (plus wpe when given).
static cudaError_t embed_range(cudaStream_t stream, float *y, const int32_t *tokens,
                               const void *wte, const void *wpe, bool bf16, int64_t first,
                               int64_t rows, int64_t b, int64_t t, int64_t c) {
    const int64_t total = b * t * c;
    if (total <= 0) return cudaSuccess;
    if (bf16)
        embed_range_kernel<<<blocks_for(total), THREADS, 0, stream>>>(
            y, tokens, static_cast<const uint16_t *>(wte), static_cast<const uint16_t *>(wpe),
            first, rows, t, c, total);
    else
        embed_range_kernel<<<blocks_for(total), THREADS, 0, stream>>>(
            y, tokens, static_cast<const float *>(wte), static_cast<const float *>(wpe), first,
            rows, t, c, total);
    return cudaGetLastError();
}

// dwpe[t, c] += dy[bi, t, c] for bi = 0 .. b - 1 in order.
static cudaError_t embed_dwpe(cudaStream_t stream, float *dwpe, const float *dy, int64_t b,
                              int64_t t, int64_t c) {
    if (b > 0 && t * c > 0)
        embed_dwpe_kernel<<<blocks_for(t * c), THREADS, 0, stream>>>(dwpe, dy, b, t, c);
    return cudaGetLastError();
}

// ---- the table's entries ------------------------------------------------------------------------

lw_status lwc_embedding_range_forward(lw_stream *s, float *y, const int32_t *tokens,
                                      const void *wte, const void *wpe, lw_dtype w_dtype,
                                      int64_t first, int64_t rows, int64_t b, int64_t t,
                                      int64_t c) {
    if (b <= 0 || t <= 0 || c <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s,
                        embed_range(lwc_cuda_stream(s), y, tokens, wte, wpe,
                                    w_dtype == LW_DTYPE_BF16, first, rows, b, t, c),
                        "the embedding range kernel");
}

lw_status lwc_embedding_range_backward(lw_stream *s, float *dwte, float *dwpe, const float *dy,
                                       const int32_t *tokens, int64_t first, int64_t rows,
                                       int64_t b, int64_t t, int64_t c) {
    if (b <= 0 || t <= 0 || c <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    lwc_buckets bk;
    lw_status st = lwc_buckets_in(s, tokens, b * t, first, rows, false, "embedding range backward",
                                  "token", &bk);
    if (st != LW_OK) return st;
    cudaStream_t cs = lwc_cuda_stream(s);
    if (dwpe != NULL) {
        cudaError_t e = embed_dwpe(cs, dwpe, dy, b, t, c);
        if (e != cudaSuccess) return lwc_fail(s->device, e, "the position embedding's gradient");
    }
    return lwc_launched(s,
                        lwc_rows_add(cs, dwte, dy, NULL, bk.perm, bk.start, bk.row, bk.segments, c),
                        "the token embedding's gradient");
}
