// attention_fp32.cu: the causal attention's fp32 kernels on a GPU, flash-attention style, with
// grouped KV heads and a sliding window: no t x t matrix anywhere; the reference path on a GPU,
// whose D = rowsum(dout * out) serves both these and attention_mma.cu's backward. attention.cu's
// entries check the shapes, choose between these and the tensor-core kernels, and launch these
// through the launchers at the end of this file (attention_fp32.h). The forward runs a block per
// (batch x head, tile of 64 query rows) over the key tiles from the window's first to the diagonal
// with an online softmax and saves each row's log-sum-exp (and, when asked, its largest score); the
// backward recomputes the probabilities from it: D = rowsum(dout * out) first, then a kernel over
// key tiles for dk and dv (a block per KV head's tile, over the query heads that read it) and one
// over query tiles for dq, each output element owned by one thread (no atomics: the backward
// repeats bit for bit). Head dims up to 128, any value: the kernels are compiled for a largest head
// dim D of 32, 64 or 128 and the smallest that fits runs.
//
// Tiles and threads: 64 query rows x 64 keys per step, 256 threads as 32 (ty) x 8 (tx). Thread
// (ty, tx) owns rows ty and ty + 32 of a tile and columns tx + 8 j: the 16 scores s[i][j] of rows
// ty + 32 i and keys tx + 8 j, and of a [64, D] output the elements (ty + 32 i, tx + 8 j),
// j < D / 8. A row's 8 threads are 8 consecutive lanes of one warp, so row maxima and sums are
// xor-shuffles within those lanes. Shared tiles keep rows D + 1 floats apart (odd: the 4 rows a
// warp reads at once, and the 8 rows read across tx, fall in different banks); the score tile's
// rows are 72 apart, so that the warp's (ty, tx) writes and its row reads are conflict free.
#include "cuda/attention_fp32.h"
#include "cuda/bf16_bits.h"
#include "cuda/cuda.h"
#include "cuda/mma_layout.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>

namespace {

constexpr int TILE = 64;      // query rows and keys per tile
constexpr int THREADS = 256;  // 32 x 8
constexpr int SLD = TILE + 8; // row stride of the score tile

template <int D> constexpr int ld() { return D + 1; }

template <int D> constexpr size_t forward_floats() { return 3 * TILE * ld<D>() + TILE * SLD; }
template <int D> constexpr size_t backward_floats() {
    return 4 * TILE * ld<D>() + TILE * SLD + 2 * TILE;
}

// Rows [r0, r0 + TILE) of one head's [t, hd] slice (rows `stride` floats apart) into a shared
// tile; rows at or past t are zero. Columns hd .. D - 1 are left as they are (zeroed once).
template <int D>
__device__ void load_tile(float *tile, const float *src, int64_t stride, int r0, int t, int hd) {
    for (int e = threadIdx.x; e < TILE * hd; e += THREADS) {
        const int r = e / hd, d = e - r * hd;
        tile[r * ld<D>() + d] = r0 + r < t ? src[(int64_t)(r0 + r) * stride + d] : 0.0f;
    }
}

__device__ void zero(float *p, int n) {
    for (int e = threadIdx.x; e < n; e += THREADS)
        p[e] = 0.0f;
}

// Sum and max over a row's 8 lanes (xor: every lane ends with the same value, bit for bit, since
// each step adds the same two values in either order).
__device__ float row_max(float v) {
    for (int off = 1; off < 8; off <<= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}
__device__ float row_sum(float v) {
    for (int off = 1; off < 8; off <<= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// Whether query `query` sees key `key`: causal, and within the window (0: none).
__device__ __forceinline__ bool sees(int query, int key, int window) {
    return key <= query && (window == 0 || key >= query - window);
}

// The first key tile a query tile from q0 sees under the window; the last query tile (of
// `tiles`) that sees a key tile from k0.
__device__ __forceinline__ int first_key_tile(int q0, int window) {
    return window > 0 && q0 > window ? (q0 - window) / TILE : 0;
}
__device__ __forceinline__ int last_query_tile(int k0, int tiles, int window) {
    const int last = window > 0 ? (k0 + TILE - 1 + window) / TILE : tiles - 1;
    return last < tiles - 1 ? last : tiles - 1;
}

// s[i][j] = a[ty + 32 i] . b[tx + 8 j] over hd, a and b shared tiles.
template <int D>
__device__ void tile_dots(float (&s)[2][8], const float *a, const float *b, int hd, int ty,
                          int tx) {
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 8; j++)
            s[i][j] = 0.0f;
#pragma unroll 4
    for (int d = 0; d < hd; d++) {
        float av[2], bv[8];
#pragma unroll
        for (int i = 0; i < 2; i++)
            av[i] = a[(ty + 32 * i) * ld<D>() + d];
#pragma unroll
        for (int j = 0; j < 8; j++)
            bv[j] = b[(tx + 8 * j) * ld<D>() + d];
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < 8; j++)
                s[i][j] = fmaf(av[i], bv[j], s[i][j]);
    }
}

// acc[i][j] += sum over k < TILE of w[ty + 32 i][k] * m[k][tx + 8 j] (w: a score tile, m: a
// [TILE, D] tile).
template <int D>
__device__ void tile_matmul(float (&acc)[2][D / 8], const float *w, const float *m, int ty,
                            int tx) {
#pragma unroll 4
    for (int k = 0; k < TILE; k++) {
        const float w0 = w[ty * SLD + k], w1 = w[(ty + 32) * SLD + k];
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
            const float mv = m[k * ld<D>() + tx + 8 * j];
            acc[0][j] = fmaf(w0, mv, acc[0][j]);
            acc[1][j] = fmaf(w1, mv, acc[1][j]);
        }
    }
}

// What every kernel takes of the shapes: qkv's rows `ld` = c + 2 nkv hd floats apart, query
// head h reading KV head h / group (group = nh / nkv), the window (0: none).
struct heads {
    int t, c, nh, nkv, group, hd, ld, window;
};

// grid (b * nh, query tiles), the last query tile (the most keys) first.
template <int D>
__global__ void __launch_bounds__(THREADS)
    forward_kernel(float *out, float *lse, float *rowmax, const float *qkv, heads a, float scale) {
    extern __shared__ float smem[];
    float *qs = smem, *ks = qs + TILE * ld<D>(), *vs = ks + TILE * ld<D>();
    float *ss = vs + TILE * ld<D>();
    const int t = a.t, c = a.c, hd = a.hd, window = a.window;
    const int bh = blockIdx.x, bi = bh / a.nh, h = bh - bi * a.nh;
    const int qt = gridDim.y - 1 - blockIdx.y, q0 = qt * TILE;
    const int tx = threadIdx.x & 7, ty = threadIdx.x >> 3;
    const int64_t c3 = a.ld;
    const float *row0 = qkv + (int64_t)bi * t * c3, *q = row0 + (int64_t)h * hd;
    const float *k = row0 + c + (int64_t)(h / a.group) * hd, *v = k + (int64_t)a.nkv * hd;

    zero(smem, 3 * TILE * ld<D>()); // columns hd .. D - 1 stay 0 for the whole block
    __syncthreads();
    load_tile<D>(qs, q, c3, q0, t, hd);

    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float acc[2][D / 8];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < D / 8; j++)
            acc[i][j] = 0.0f;

    for (int kt = first_key_tile(q0, window); kt <= qt; kt++) {
        const int k0 = kt * TILE;
        __syncthreads(); // the last step's reads of ks, vs and ss are done
        load_tile<D>(ks, k, c3, k0, t, hd);
        load_tile<D>(vs, v, c3, k0, t, hd);
        __syncthreads();
        float s[2][8];
        tile_dots<D>(s, qs, ks, hd, ty, tx);
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int row = q0 + ty + 32 * i;
            // causal (key <= row) and within the window. Keys past t are zero rows of ks and vs:
            // for a row < t they are masked (key > row); rows past t are never stored.
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                s[i][j] = sees(row, k0 + tx + 8 * j, window) ? s[i][j] * scale : -INFINITY;
                mx = fmaxf(mx, s[i][j]);
            }
            const float mnew = fmaxf(m[i], row_max(mx));
            // Without a window every row sees key 0 in the first tile, so mnew is finite; under
            // one a row may see nothing in its first tile: exponentials from 0 there (every p
            // 0), not -inf - -inf.
            const float base = mnew == -INFINITY ? 0.0f : mnew;
            const float alpha = expf(m[i] - base); // 0 on the first tile (m = -inf)
            float rs = 0.0f;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                s[i][j] = expf(s[i][j] - base);
                rs += s[i][j];
            }
            l[i] = l[i] * alpha + row_sum(rs);
            m[i] = mnew;
#pragma unroll
            for (int j = 0; j < D / 8; j++)
                acc[i][j] *= alpha;
#pragma unroll
            for (int j = 0; j < 8; j++)
                ss[(ty + 32 * i) * SLD + tx + 8 * j] = s[i][j];
        }
        __syncthreads();
        tile_matmul<D>(acc, ss, vs, ty, tx);
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int row = q0 + ty + 32 * i;
        if (row >= t) continue;
        float *o = out + ((int64_t)bi * t + row) * c + (int64_t)h * hd;
#pragma unroll
        for (int j = 0; j < D / 8; j++)
            if (tx + 8 * j < hd) o[tx + 8 * j] = acc[i][j] / l[i];
        if (tx == 0) lse[(int64_t)bh * t + row] = (float)((double)m[i] + log((double)l[i]));
        // m is the row's largest scaled score, fmaxf passing over a NaN, whose exponential
        // makes l NaN: the row's maximum is NaN then, as on the CPU
        if (tx == 0 && rowmax != nullptr) rowmax[(int64_t)bh * t + row] = isnan(l[i]) ? NAN : m[i];
    }
}

// dd[bh, i] = dout_i . out_i over the head's hd channels (in double, as the CPU): one warp per
// row, rows = b * nh * t.
// O: float, or unsigned short for a bf16 out (widened exactly). COPY (hd a multiple of 32): also
// dout16 = dout in bf16, each even channel's lane rounding it with the next as the tensor-core
// kernels' staging rounds a pair (mma_layout.h's lwc_mma_pack), so that their pipelined variant
// stages the same bits.
template <typename O, bool COPY>
__global__ void rowdot_kernel(float *dd, uint16_t *dout16, const float *dout, const O *out,
                              int64_t rows, int t, int c, int nh, int hd) {
    const int lane = threadIdx.x & 31;
    const int64_t r = blockIdx.x * (int64_t)(blockDim.x / 32) + (threadIdx.x >> 5);
    if (r >= rows) return; // whole warps
    const int64_t bh = r / t, i = r - bh * t, bi = bh / nh, h = bh - bi * nh;
    const int64_t off = (bi * t + i) * c + h * hd;
    double s = 0.0;
    for (int d = lane; d < hd; d += 32) {
        s += (double)dout[off + d] * lwc_load(out, off + d);
        if (COPY) {
            const float next = __shfl_down_sync(0xffffffffu, dout[off + d], 1);
            if ((lane & 1) == 0)
                *reinterpret_cast<uint32_t *>(dout16 + off + d) = lwc_mma_pack(dout[off + d], next);
        }
    }
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) dd[r] = (float)s;
}

// Rows [r0, r0 + TILE) of lse and dd into shared memory (0 past t).
__device__ void load_rows(float *ls, float *ds, const float *lse, const float *dd, int r0, int t) {
    for (int r = threadIdx.x; r < TILE; r += THREADS) {
        ls[r] = r0 + r < t ? lse[r0 + r] : 0.0f;
        ds[r] = r0 + r < t ? dd[r0 + r] : 0.0f;
    }
}

// dk and dv of one key tile of a KV head: grid (b * nkv, key tiles), the first key tile (the most
// queries) first. For each query head reading it and each query tile from the key tile's to the
// window's last: P^T[key][query] = exp(s - lse[query]) (0 where the query does not see the key,
// or query >= t), dv += P^T dout, dP^T = v dout^T, dS^T = P^T (dP^T - D[query]), dk += scale
// dS^T q.
template <int D>
__global__ void __launch_bounds__(THREADS)
    dkdv_kernel(float *dqkv, const float *dout, const float *qkv, const float *lse, const float *dd,
                heads a, float scale) {
    extern __shared__ float smem[];
    float *ks = smem, *vs = ks + TILE * ld<D>(), *qs = vs + TILE * ld<D>();
    float *os = qs + TILE * ld<D>(), *ss = os + TILE * ld<D>(), *ls = ss + TILE * SLD;
    float *ds = ls + TILE;
    const int t = a.t, c = a.c, hd = a.hd, window = a.window;
    const int bk = blockIdx.x, bi = bk / a.nkv, kh = bk - bi * a.nkv;
    const int kt = blockIdx.y, k0 = kt * TILE, tiles = (t + TILE - 1) / TILE;
    const int last = last_query_tile(k0, tiles, window);
    const int tx = threadIdx.x & 7, ty = threadIdx.x >> 3;
    const int64_t c3 = a.ld, row0 = (int64_t)bi * t * c3;
    const int64_t kv = row0 + c + (int64_t)kh * hd; // the KV head's k (its v nkv hd further)
    const float *k = qkv + kv, *v = k + (int64_t)a.nkv * hd;

    zero(smem, 4 * TILE * ld<D>());
    __syncthreads();
    load_tile<D>(ks, k, c3, k0, t, hd);
    load_tile<D>(vs, v, c3, k0, t, hd);

    float dk[2][D / 8], dv[2][D / 8];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < D / 8; j++)
            dk[i][j] = dv[i][j] = 0.0f;

    for (int h = kh * a.group; h < (kh + 1) * a.group; h++) {
        const int bh = bi * a.nh + h;
        const float *q = qkv + row0 + (int64_t)h * hd;
        const float *dout_h = dout + (int64_t)bi * t * c + (int64_t)h * hd;
        const float *lse_h = lse + (int64_t)bh * t, *dd_h = dd + (int64_t)bh * t;
        for (int qt = kt; qt <= last; qt++) {
            const int q0 = qt * TILE;
            __syncthreads(); // the last step's reads of qs, os, ss, ls and ds are done
            load_tile<D>(qs, q, c3, q0, t, hd);
            load_tile<D>(os, dout_h, c, q0, t, hd);
            load_rows(ls, ds, lse_h, dd_h, q0, t);
            __syncthreads();
            float p[2][8], dp[2][8];
            tile_dots<D>(p, ks, qs, hd, ty, tx); // [key ty + 32 i][query tx + 8 j]
            tile_dots<D>(dp, vs, os, hd, ty, tx);
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const int key = k0 + ty + 32 * i;
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    const int b = tx + 8 * j, query = q0 + b;
                    const float pij = sees(query, key, window) && query < t
                                          ? expf(p[i][j] * scale - ls[b])
                                          : 0.0f;
                    dp[i][j] = pij * (dp[i][j] - ds[b]); // dS^T, kept for after dv
                    ss[(ty + 32 * i) * SLD + b] = pij;
                }
            }
            __syncthreads();
            tile_matmul<D>(dv, ss, os, ty, tx);
            __syncthreads(); // every read of P^T is done before dS^T replaces it
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 8; j++)
                    ss[(ty + 32 * i) * SLD + tx + 8 * j] = dp[i][j];
            __syncthreads();
            tile_matmul<D>(dk, ss, qs, ty, tx);
        }
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int key = k0 + ty + 32 * i;
        if (key >= t) continue;
        float *g = dqkv + kv + (int64_t)key * c3;
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
            const int col = tx + 8 * j;
            if (col >= hd) continue;
            g[col] += scale * dk[i][j];
            g[(int64_t)a.nkv * hd + col] += dv[i][j];
        }
    }
}

// dq of one query tile: grid (b * nh, query tiles), the last first. For each key tile from the
// window's first to the diagonal: P = exp(s - lse), dP = dout v^T, dS = P (dP - D), dq += scale
// dS k.
template <int D>
__global__ void __launch_bounds__(THREADS)
    dq_kernel(float *dqkv, const float *dout, const float *qkv, const float *lse, const float *dd,
              heads a, float scale) {
    extern __shared__ float smem[];
    float *qs = smem, *os = qs + TILE * ld<D>(), *ks = os + TILE * ld<D>();
    float *vs = ks + TILE * ld<D>(), *ss = vs + TILE * ld<D>(), *ls = ss + TILE * SLD;
    float *ds = ls + TILE;
    const int t = a.t, c = a.c, hd = a.hd, window = a.window;
    const int bh = blockIdx.x, bi = bh / a.nh, h = bh - bi * a.nh;
    const int qt = gridDim.y - 1 - blockIdx.y, q0 = qt * TILE;
    const int tx = threadIdx.x & 7, ty = threadIdx.x >> 3;
    const int64_t c3 = a.ld, row0 = (int64_t)bi * t * c3;
    const int64_t head = row0 + (int64_t)h * hd;
    const float *q = qkv + head, *k = qkv + row0 + c + (int64_t)(h / a.group) * hd;
    const float *v = k + (int64_t)a.nkv * hd;
    const float *dout_h = dout + (int64_t)bi * t * c + (int64_t)h * hd;

    zero(smem, 4 * TILE * ld<D>());
    __syncthreads();
    load_tile<D>(qs, q, c3, q0, t, hd);
    load_tile<D>(os, dout_h, c, q0, t, hd);
    load_rows(ls, ds, lse + (int64_t)bh * t, dd + (int64_t)bh * t, q0, t);

    float dq[2][D / 8];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < D / 8; j++)
            dq[i][j] = 0.0f;

    for (int kt = first_key_tile(q0, window); kt <= qt; kt++) {
        const int k0 = kt * TILE;
        __syncthreads(); // the last step's reads of ks, vs and ss are done
        load_tile<D>(ks, k, c3, k0, t, hd);
        load_tile<D>(vs, v, c3, k0, t, hd);
        __syncthreads();
        float p[2][8], dp[2][8];
        tile_dots<D>(p, qs, ks, hd, ty, tx); // [query ty + 32 i][key tx + 8 j]
        tile_dots<D>(dp, os, vs, hd, ty, tx);
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int r = ty + 32 * i, query = q0 + r;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const int key = k0 + tx + 8 * j;
                const float pij =
                    sees(query, key, window) && query < t ? expf(p[i][j] * scale - ls[r]) : 0.0f;
                ss[r * SLD + tx + 8 * j] = pij * (dp[i][j] - ds[r]);
            }
        }
        __syncthreads();
        tile_matmul<D>(dq, ss, ks, ty, tx);
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int query = q0 + ty + 32 * i;
        if (query >= t) continue;
        float *g = dqkv + head + (int64_t)query * c3;
#pragma unroll
        for (int j = 0; j < D / 8; j++)
            if (tx + 8 * j < hd) g[tx + 8 * j] += scale * dq[i][j];
    }
}

// The compiled head dim that serves hd: 32, 64 or 128; 0 past the largest.
int head_dim_max(int64_t hd) { return hd <= 32 ? 32 : hd <= 64 ? 64 : hd <= 128 ? 128 : 0; }

// A window of t - 1 keys or more is every earlier key: 0, which also keeps it within int.
heads heads_of(int64_t t, int64_t c, int64_t nh, int64_t nkv, int64_t window) {
    heads a;
    a.t = (int)t, a.c = (int)c, a.nh = (int)nh, a.nkv = (int)nkv, a.group = (int)(nh / nkv);
    a.hd = (int)(c / nh), a.ld = (int)(c + 2 * nkv * (c / nh)),
    a.window = window < t - 1 ? (int)window : 0;
    return a;
}

template <int D>
cudaError_t forward(cudaStream_t stream, float *out, float *lse, float *rowmax, const float *qkv,
                    int64_t b, const heads &a) {
    const size_t bytes = forward_floats<D>() * sizeof(float);
    cudaError_t e = cudaFuncSetAttribute(forward_kernel<D>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e != cudaSuccess) return e;
    const dim3 grid((unsigned)(b * a.nh), (unsigned)((a.t + TILE - 1) / TILE));
    forward_kernel<D>
        <<<grid, THREADS, bytes, stream>>>(out, lse, rowmax, qkv, a, 1.0f / sqrtf((float)a.hd));
    return cudaGetLastError();
}

template <int D>
cudaError_t backward(cudaStream_t stream, float *dqkv, const float *dd, const float *dout,
                     const float *qkv, const float *lse, int64_t b, const heads &a) {
    const size_t bytes = backward_floats<D>() * sizeof(float);
    cudaError_t e = cudaFuncSetAttribute(dkdv_kernel<D>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(dq_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)bytes);
    if (e != cudaSuccess) return e;
    const float scale = 1.0f / sqrtf((float)a.hd);
    const unsigned tiles = (unsigned)((a.t + TILE - 1) / TILE);
    // dk and dv a block per KV head's key tile, dq a block per query head's query tile
    dkdv_kernel<D><<<dim3((unsigned)(b * a.nkv), tiles), THREADS, bytes, stream>>>(
        dqkv, dout, qkv, lse, dd, a, scale);
    dq_kernel<D><<<dim3((unsigned)(b * a.nh), tiles), THREADS, bytes, stream>>>(dqkv, dout, qkv,
                                                                                lse, dd, a, scale);
    return cudaGetLastError();
}

} // namespace

int64_t lwc_flash_head_dim_limit(void) { return 128; }

size_t lwc_flash_smem_bytes(int64_t hd, bool backward) {
    switch (head_dim_max(hd)) {
    case 32:
        return (backward ? backward_floats<32>() : forward_floats<32>()) * sizeof(float);
    case 64:
        return (backward ? backward_floats<64>() : forward_floats<64>()) * sizeof(float);
    case 128:
        return (backward ? backward_floats<128>() : forward_floats<128>()) * sizeof(float);
    default:
        return 0;
    }
}

cudaError_t lwc_flash_forward(cudaStream_t stream, float *out, float *lse, float *rowmax,
                              const float *qkv, int64_t b, int64_t t, int64_t c, int64_t nh,
                              int64_t nkv, int64_t window) {
    if (b <= 0 || t <= 0 || c <= 0 || nh <= 0 || nkv <= 0) return cudaSuccess;
    const heads a = heads_of(t, c, nh, nkv, window);
    switch (head_dim_max(c / nh)) {
    case 32:
        return forward<32>(stream, out, lse, rowmax, qkv, b, a);
    case 64:
        return forward<64>(stream, out, lse, rowmax, qkv, b, a);
    case 128:
        return forward<128>(stream, out, lse, rowmax, qkv, b, a);
    default:
        return cudaErrorInvalidValue; // the caller checks the head dim first
    }
}

// The row dots with out of either type, and dout's bf16 copy when asked.
template <bool COPY>
static void rowdot(cudaStream_t stream, float *dd, uint16_t *dout16, const float *dout,
                   const void *out, bool out_bf16, int64_t rows, int64_t t, int64_t c, int64_t nh) {
    const int64_t per_block = THREADS / 32;
    const unsigned blocks = (unsigned)((rows + per_block - 1) / per_block);
    if (out_bf16)
        rowdot_kernel<unsigned short, COPY><<<blocks, THREADS, 0, stream>>>(
            dd, dout16, dout, static_cast<const unsigned short *>(out), rows, (int)t, (int)c,
            (int)nh, (int)(c / nh));
    else
        rowdot_kernel<float, COPY>
            <<<blocks, THREADS, 0, stream>>>(dd, dout16, dout, static_cast<const float *>(out),
                                             rows, (int)t, (int)c, (int)nh, (int)(c / nh));
}

cudaError_t lwc_flash_rowdot(cudaStream_t stream, float *dd, const float *dout, const void *out,
                             bool out_bf16, int64_t b, int64_t t, int64_t c, int64_t nh,
                             uint16_t *dout16) {
    if (b <= 0 || t <= 0 || c <= 0 || nh <= 0) return cudaSuccess;
    if (dout16 != nullptr && (c / nh) % 32 != 0) return cudaErrorInvalidValue;
    const int64_t rows = b * nh * t;
    if (dout16 != nullptr)
        rowdot<true>(stream, dd, dout16, dout, out, out_bf16, rows, t, c, nh);
    else
        rowdot<false>(stream, dd, nullptr, dout, out, out_bf16, rows, t, c, nh);
    return cudaGetLastError();
}

cudaError_t lwc_flash_backward(cudaStream_t stream, float *dqkv, const float *dd, const float *dout,
                               const float *qkv, const float *lse, int64_t b, int64_t t, int64_t c,
                               int64_t nh, int64_t nkv, int64_t window) {
    if (b <= 0 || t <= 0 || c <= 0 || nh <= 0 || nkv <= 0) return cudaSuccess;
    const heads a = heads_of(t, c, nh, nkv, window);
    switch (head_dim_max(c / nh)) {
    case 32:
        return backward<32>(stream, dqkv, dd, dout, qkv, lse, b, a);
    case 64:
        return backward<64>(stream, dqkv, dd, dout, qkv, lse, b, a);
    case 128:
        return backward<128>(stream, dqkv, dd, dout, qkv, lse, b, a);
    default:
        return cudaErrorInvalidValue;
    }
}
