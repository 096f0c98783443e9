// embedding.cu: token plus position embedding on a GPU: the gather of a range of the token
// table's rows (every row for the whole table) and the position table's gradient, summed over the
// batch in order (the token table's is gather.cu's scatter-add by row). Additions rounded as the
// CPU's (__fadd_rn); no atomics, so the backward repeats bit for bit and equals the CPU's.
#include "cuda/kernels.h"

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

extern "C" cudaError_t lwc_embed_range(cudaStream_t stream, float *y, const int32_t *tokens,
                                       const void *wte, const void *wpe, bool bf16,
                                       int64_t first, int64_t rows, int64_t b, int64_t t,
                                       int64_t c) {
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

extern "C" cudaError_t lwc_embed_dwpe(cudaStream_t stream, float *dwpe, const float *dy, int64_t b,
                                      int64_t t, int64_t c) {
    if (b > 0 && t * c > 0)
        embed_dwpe_kernel<<<blocks_for(t * c), THREADS, 0, stream>>>(dwpe, dy, b, t, c);
    return cudaGetLastError();
}
