// nn.cu: the model's element-wise and row kernels on a GPU besides attention (attention.cu) and
// the LM head's softmax (softmax.cu): bias rows and deterministic column sums (linear), embedding
// gathers and their fixed-order backward, layer normalisation, GELU. Products and sums are
// rounded as the CPU reference rounds them (__fmul_rn / __fadd_rn: no FMA contraction), and
// sums the CPU takes in double are taken in double, so that fp32 runs agree with it closely
// (GELU bit for bit). No atomics: every result is summed in an order fixed by the shapes alone.
#include "cuda/kernels.h"

namespace {

constexpr int THREADS = 256;

int blocks_for(int64_t n) {
    int64_t b = (n + THREADS - 1) / THREADS;
    return (int)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

// ---- bias rows and column sums ------------------------------------------------------------

__global__ void fill_rows_kernel(float *y, const float *b, int64_t n, int64_t cols) {
    const int64_t total = n * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = b[i % cols];
}

// Column sums in two passes. Pass 1: a block of 32 x 8 threads per (tile of 32 columns, chunk
// of rows); thread (tx, ty) adds rows ty, ty + 8, ... of its chunk for column tx in double, the
// 8 partials of a column are added in ty order and written to partials[chunk * cols + col].
// Pass 2: one thread per column adds the chunks' partials in chunk order. Both orders depend on
// (n, cols) only, so the sums repeat bit for bit.
constexpr int COL_TILE = 32, ROW_THREADS = 8;

struct colsum_plan {
    int64_t chunks, rows_per_chunk;
};

colsum_plan plan_colsum(int64_t n, int64_t cols) {
    const int64_t tiles = (cols + COL_TILE - 1) / COL_TILE;
    // about 1024 blocks in all; a chunk keeps at least 64 rows (8 per thread)
    int64_t chunks = 1024 / (tiles > 0 ? tiles : 1);
    const int64_t most = (n + 63) / 64;
    if (chunks > most) chunks = most;
    if (chunks < 1) chunks = 1;
    const int64_t per = (n + chunks - 1) / chunks;
    return colsum_plan{(n + per - 1) / per, per};
}

// The value summed for (row, col): dy, or dy * xhat (layernorm's dg: xhat = (x - mean) rstd,
// rounded as the CPU rounds it).
struct plain_value {
    const float *dy;
    __device__ float operator()(int64_t r, int64_t j, int64_t cols) const { return dy[r * cols + j]; }
};

struct xhat_value {
    const float *dy, *x, *mean, *rstd;
    __device__ float operator()(int64_t r, int64_t j, int64_t cols) const {
        const int64_t i = r * cols + j;
        return __fmul_rn(dy[i], __fmul_rn(__fsub_rn(x[i], mean[r]), rstd[r]));
    }
};

template <typename V>
__global__ void colsum_partials(V value, int64_t n, int64_t cols, int64_t per, double *partials) {
    __shared__ double part[ROW_THREADS][COL_TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t j = blockIdx.x * (int64_t)COL_TILE + tx;
    const int64_t r0 = blockIdx.y * per, r1 = r0 + per < n ? r0 + per : n;
    double s = 0.0;
    if (j < cols)
        for (int64_t r = r0 + ty; r < r1; r += ROW_THREADS)
            s += (double)value(r, j, cols);
    part[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && j < cols) {
        double t = part[0][tx];
        for (int k = 1; k < ROW_THREADS; k++)
            t += part[k][tx];
        partials[blockIdx.y * cols + j] = t;
    }
}

__global__ void colsum_finish(float *out, const double *partials, int64_t chunks, int64_t cols) {
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < cols;
         j += (int64_t)gridDim.x * blockDim.x) {
        double s = 0.0;
        for (int64_t k = 0; k < chunks; k++)
            s += partials[k * cols + j];
        out[j] = __fadd_rn(out[j], (float)s); // out += (float)sum, as the CPU adds it
    }
}

template <typename V>
cudaError_t colsum(cudaStream_t stream, float *out, V value, int64_t n, int64_t cols,
                   double *work) {
    if (n <= 0 || cols <= 0) return cudaSuccess;
    const colsum_plan p = plan_colsum(n, cols);
    const dim3 grid((unsigned)((cols + COL_TILE - 1) / COL_TILE), (unsigned)p.chunks);
    colsum_partials<V><<<grid, dim3(COL_TILE, ROW_THREADS), 0, stream>>>(value, n, cols,
                                                                         p.rows_per_chunk, work);
    colsum_finish<<<blocks_for(cols), THREADS, 0, stream>>>(out, work, p.chunks, cols);
    return cudaGetLastError();
}

// ---- embedding ------------------------------------------------------------------------------

// The rows [first, first + rows) of the table (a rank's under tensor parallelism, or every row a
// token id can name): tokens outside it look up 0; the position row is added where wpe is given.
__global__ void embed_range_kernel(float *y, const int32_t *tokens, const float *wte,
                                   const float *wpe, int64_t first, int64_t rows, int64_t t,
                                   int64_t c, int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = i / c, ch = i - row * c; // row = bi * t + ti
        const int64_t k = (int64_t)tokens[row] - first;
        const bool here = k >= 0 && k < rows;
        const float tok = here ? wte[k * c + ch] : 0.0f;
        if (wpe == nullptr) y[i] = tok;
        else y[i] = here ? __fadd_rn(tok, wpe[(row % t) * c + ch]) : wpe[(row % t) * c + ch];
    }
}

// grid (segments, channel tiles): segment s holds the positions perm[start[s] .. start[s + 1])
// of token seg_token[s], in increasing order (batch-major, then time: the CPU's order); each
// thread adds them one after another into its channel of the token's row.
__global__ void embed_dwte_kernel(float *dwte, const float *dy, const int32_t *perm,
                                  const int32_t *start, const int32_t *seg_token, int64_t c) {
    const int64_t ch = blockIdx.y * (int64_t)blockDim.x + threadIdx.x;
    if (ch >= c) return;
    const int32_t s = (int32_t)blockIdx.x;
    float *row = dwte + (int64_t)seg_token[s] * c + ch;
    float acc = *row;
    for (int32_t k = start[s]; k < start[s + 1]; k++)
        acc = __fadd_rn(acc, dy[(int64_t)perm[k] * c + ch]);
    *row = acc;
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

// ---- layer normalisation --------------------------------------------------------------------

constexpr int LN_ROWS = THREADS / 32; // one warp per row

__device__ double warp_sum(double v) {
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v; // the same in every lane
}

__global__ void ln_forward_kernel(float *y, float *mean, float *rstd, const float *x,
                                  const float *g, const float *beta, int64_t n, int64_t c,
                                  float eps) {
    const int lane = threadIdx.x & 31;
    const int64_t r = blockIdx.x * (int64_t)LN_ROWS + (threadIdx.x >> 5);
    if (r >= n) return; // a whole warp leaves together: the shuffles below see full warps
    const float *xr = x + r * c;
    double s = 0.0;
    for (int64_t i = lane; i < c; i += 32)
        s += (double)xr[i];
    const double m = warp_sum(s) / (double)c;
    // the two-pass variance in double, as the CPU takes it
    double q = 0.0;
    for (int64_t i = lane; i < c; i += 32) {
        const double d = (double)xr[i] - m;
        q += d * d;
    }
    const double var = warp_sum(q) / (double)c;
    const float mf = (float)m, sf = (float)(1.0 / sqrt(var + (double)eps));
    if (lane == 0) {
        mean[r] = mf;
        rstd[r] = sf;
    }
    float *yr = y + r * c;
    for (int64_t i = lane; i < c; i += 32) {
        const float v = __fmul_rn(__fmul_rn(__fsub_rn(xr[i], mf), sf), g[i]);
        yr[i] = beta != nullptr ? __fadd_rn(v, beta[i]) : v;
    }
}

// dx only: dg and dbeta are column sums (colsum above).
__global__ void ln_dx_kernel(float *dx, const float *dy, const float *x, const float *g,
                             const float *mean, const float *rstd, int64_t n, int64_t c) {
    const int lane = threadIdx.x & 31;
    const int64_t r = blockIdx.x * (int64_t)LN_ROWS + (threadIdx.x >> 5);
    if (r >= n) return;
    const float *xr = x + r * c, *dyr = dy + r * c;
    const float mf = mean[r], sf = rstd[r];
    double s1 = 0.0, s2 = 0.0;
    for (int64_t i = lane; i < c; i += 32) {
        const float dn = __fmul_rn(dyr[i], g[i]), xh = __fmul_rn(__fsub_rn(xr[i], mf), sf);
        s1 += (double)dn;
        s2 += (double)__fmul_rn(dn, xh);
    }
    s1 = warp_sum(s1);
    s2 = warp_sum(s2);
    const float m1 = (float)(s1 / (double)c), m2 = (float)(s2 / (double)c);
    float *dxr = dx + r * c;
    for (int64_t i = lane; i < c; i += 32) {
        const float xh = __fmul_rn(__fsub_rn(xr[i], mf), sf);
        const float inner = __fsub_rn(__fsub_rn(__fmul_rn(dyr[i], g[i]), m1), __fmul_rn(xh, m2));
        dxr[i] = __fadd_rn(dxr[i], __fmul_rn(sf, inner));
    }
}

// ---- GELU (the CPU's formulas and rounding, so that both agree bit for bit) ------------------

constexpr float SQRT_2_OVER_PI = 0.7978845608028654f;
constexpr float GELU_C = 0.044715f;
constexpr float X_MAX = 9.0f;

// The CPU's exp_fast (device/cpu/gelu.c), operation for operation: Cephes' expf polynomial on
// x - n ln 2, n = round(x / ln 2) taken with the 1.5 * 2^23 trick, 2^n built in the exponent.
__device__ float exp_fast(float x) {
    const float t = __fadd_rn(__fmul_rn(x, 1.44269504088896341f), 12582912.0f);
    const float nf = __fsub_rn(t, 12582912.0f);
    const float r = __fadd_rn(__fsub_rn(x, __fmul_rn(nf, 0.693359375f)), __fmul_rn(nf, 2.12194440e-4f));
    float p = 1.9875691500e-4f;
    p = __fadd_rn(__fmul_rn(p, r), 1.3981999507e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 8.3334519073e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 4.1665795894e-2f);
    p = __fadd_rn(__fmul_rn(p, r), 1.6666665459e-1f);
    p = __fadd_rn(__fmul_rn(p, r), 5.0000001201e-1f);
    p = __fadd_rn(__fadd_rn(__fmul_rn(p, __fmul_rn(r, r)), r), 1.0f);
    const uint32_t bits = (__float_as_uint(t) - 0x4B400000u + 127u) << 23; // 2^n
    return __fmul_rn(p, __uint_as_float(bits));
}

// exp(-2u), u = sqrt(2/pi) (v + 0.044715 v^3), as the CPU rounds it: the constant -2 sqrt(2/pi)
// folded first, then ((c v) v) v.
__device__ float gelu_exp(float v) {
    constexpr float K = -2.0f * SQRT_2_OVER_PI;
    const float cube = __fmul_rn(__fmul_rn(__fmul_rn(GELU_C, v), v), v);
    return exp_fast(__fmul_rn(K, __fadd_rn(v, cube)));
}

// The clamps as selects: a NaN passes through both (comparisons with NaN are false).
__device__ float clamp_lo(float x) { return x < -X_MAX ? -X_MAX : x; }
__device__ float clamp_hi(float l) { return l > X_MAX ? X_MAX : l; }

__global__ void gelu_kernel(float *y, const float *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float lo = clamp_lo(x[i]), v = clamp_hi(lo);
        y[i] = __fdiv_rn(lo, __fadd_rn(1.0f, gelu_exp(v)));
    }
}

__global__ void gelu_grad_kernel(float *dx, const float *dy, const float *x, int64_t n) {
    constexpr float C3 = 3.0f * GELU_C;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float v = clamp_hi(clamp_lo(x[i]));
        const float e = gelu_exp(v);
        const float s = __fdiv_rn(1.0f, __fadd_rn(1.0f, e));
        const float du = __fmul_rn(SQRT_2_OVER_PI, __fadd_rn(1.0f, __fmul_rn(__fmul_rn(C3, v), v)));
        // s + 2 v du (e s s), grouped as the CPU's ((2 v) du) ((e s) s)
        const float tail = __fmul_rn(__fmul_rn(__fmul_rn(2.0f, v), du), __fmul_rn(__fmul_rn(e, s), s));
        dx[i] = __fadd_rn(dx[i], __fmul_rn(dy[i], __fadd_rn(s, tail)));
    }
}

} // namespace

extern "C" cudaError_t lwc_rows_fill(cudaStream_t stream, float *y, const float *b, int64_t n,
                                     int64_t cols) {
    if (n > 0 && cols > 0) fill_rows_kernel<<<blocks_for(n * cols), THREADS, 0, stream>>>(y, b, n, cols);
    return cudaGetLastError();
}

extern "C" int64_t lwc_colsum_doubles(int64_t n, int64_t cols) {
    if (n <= 0 || cols <= 0) return 0;
    return plan_colsum(n, cols).chunks * cols;
}

extern "C" cudaError_t lwc_colsum(cudaStream_t stream, float *out, const float *dy, int64_t n,
                                  int64_t cols, double *work) {
    return colsum(stream, out, plain_value{dy}, n, cols, work);
}

extern "C" cudaError_t lwc_colsum_xhat(cudaStream_t stream, float *dg, const float *dy,
                                       const float *x, const float *mean, const float *rstd,
                                       int64_t n, int64_t c, double *work) {
    return colsum(stream, dg, xhat_value{dy, x, mean, rstd}, n, c, work);
}

extern "C" cudaError_t lwc_embed_range(cudaStream_t stream, float *y, const int32_t *tokens,
                                       const float *wte, const float *wpe, int64_t first,
                                       int64_t rows, int64_t b, int64_t t, int64_t c) {
    const int64_t total = b * t * c;
    if (total > 0)
        embed_range_kernel<<<blocks_for(total), THREADS, 0, stream>>>(y, tokens, wte, wpe, first,
                                                                      rows, t, c, total);
    return cudaGetLastError();
}

extern "C" cudaError_t lwc_embed_dwte(cudaStream_t stream, float *dwte, const float *dy,
                                      const int32_t *perm, const int32_t *start,
                                      const int32_t *seg_token, int64_t segments, int64_t c) {
    if (segments <= 0 || c <= 0) return cudaSuccess;
    // LWC_ROW_TILE channels per block: four warps, each row read 512 bytes at a time
    const dim3 grid((unsigned)segments, (unsigned)((c + LWC_ROW_TILE - 1) / LWC_ROW_TILE));
    embed_dwte_kernel<<<grid, LWC_ROW_TILE, 0, stream>>>(dwte, dy, perm, start, seg_token, c);
    return cudaGetLastError();
}

extern "C" cudaError_t lwc_embed_dwpe(cudaStream_t stream, float *dwpe, const float *dy, int64_t b,
                                      int64_t t, int64_t c) {
    if (b > 0 && t * c > 0) embed_dwpe_kernel<<<blocks_for(t * c), THREADS, 0, stream>>>(dwpe, dy, b, t, c);
    return cudaGetLastError();
}

extern "C" cudaError_t lwc_ln_forward(cudaStream_t stream, float *y, float *mean, float *rstd,
                                      const float *x, const float *g, const float *beta, int64_t n,
                                      int64_t c, float eps) {
    if (n > 0 && c > 0)
        ln_forward_kernel<<<(unsigned)((n + LN_ROWS - 1) / LN_ROWS), THREADS, 0, stream>>>(
            y, mean, rstd, x, g, beta, n, c, eps);
    return cudaGetLastError();
}

extern "C" cudaError_t lwc_ln_dx(cudaStream_t stream, float *dx, const float *dy, const float *x,
                                 const float *g, const float *mean, const float *rstd, int64_t n,
                                 int64_t c) {
    if (n > 0 && c > 0)
        ln_dx_kernel<<<(unsigned)((n + LN_ROWS - 1) / LN_ROWS), THREADS, 0, stream>>>(
            dx, dy, x, g, mean, rstd, n, c);
    return cudaGetLastError();
}

extern "C" cudaError_t lwc_gelu(cudaStream_t stream, float *y, const float *x, int64_t n) {
    if (n > 0) gelu_kernel<<<blocks_for(n), THREADS, 0, stream>>>(y, x, n);
    return cudaGetLastError();
}

extern "C" cudaError_t lwc_gelu_grad(cudaStream_t stream, float *dx, const float *dy, const float *x,
                                     int64_t n) {
    if (n > 0) gelu_grad_kernel<<<blocks_for(n), THREADS, 0, stream>>>(dx, dy, x, n);
    return cudaGetLastError();
}
