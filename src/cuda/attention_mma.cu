// attention_mma.cu: causal multi-head attention on tensor cores, flash-attention style, for head
// dims 64 and 128, with grouped KV heads and a sliding window (the steps wholly outside it
// skipped): mma.sync.m16n8k16 with bf16 operands and fp32 accumulators, the running max
// and sum in fp32, Q, K, V and dO rounded to bf16 as they are staged into shared memory from
// fp32 tensors (a bf16 qkv copied as it is), out and dqkv fp32 or rounded to bf16, lse fp32. The
// forward saves each row's log-sum-exp; the backward recomputes P from it in two passes that
// each own what they write (no atomics: it repeats bit for bit): a kernel over a KV head's key
// tiles for dK and dV (over the query heads that read it), one over query tiles for dQ,
// after attention.cu's D = rowsum(dout * out). attention.cu's entries run these under the bf16
// matmul setting (its fp32 kernels otherwise: the reference path); attention_mma.h declares the
// launchers at the end of this file.
//
// Every index (which lane holds which element of a fragment, where it points ldmatrix, the
// tiles, the steps' causal ranges and masks, shared memory) and every per-lane step of the
// softmax comes from mma_layout.h, which tests/mma_layout/ shares: it runs these three
// tile loops on the CPU, step for step (the numbered steps below are its), emulating a warp's
// lanes, mma.sync and ldmatrix, against double-precision attention. The tile sizes and why are
// in mma_layout.h; the two stagings of the steps' tiles (PIPE), in attention_stage.h.
#include "cuda/bf16_bits.h"
#include "cuda/attention_mma.h"
#include "cuda/attention_stage.h"
#include "cuda/mma_layout.h"

#include <type_traits>

namespace {

constexpr int THREADS = LWC_FA_THREADS;
// Blocks an SM should hold at once, which caps the registers a thread may use: at head dim 64
// the forward and dQ kernels fit 168 registers (three blocks of 128 threads in an SM's 64 Ki)
// with no spill (ptxas -v, sm_80 and sm_90); dK/dV would spill there, and at 128 each needs
// about 255 (two blocks) whatever is asked. The pipelined kernels' counts are alike, and so
// are their blocks per SM (mma_layout.h's tiles comment).
template <int D> constexpr int MIN_BLOCKS = D == 64 ? 3 : 2;
constexpr float LOG2E = 1.44269504088896341f;

// What every kernel takes of the shapes: qkv's rows `ld` = c + 2 nkv hd values apart, query head
// h reading KV head h / group (group = nh / nkv), the window (0: none), tiles of t, block order.
struct heads {
    int t, c, nh, nkv, group, ld, window, tiles, order;
};

// d (a C tile, 4 floats) += a (A, 4 registers) b (B, 2 registers): one warp's m16n8k16.
__device__ __forceinline__ void mma(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The lane's registers of the 16 x 16 block at (row, col) of a shared bf16 tile, read as `kind`
// (mma_layout.h: an A operand, or the B operands of two 8-column tiles, from a [n][k] tile or,
// transposed, a [k][n] one). volatile: the tiles are rewritten between steps, so no two reads of
// one address may be merged across a __syncthreads.
template <int D, int KIND>
__device__ __forceinline__ void load_block(uint32_t *r, const uint16_t *tile, int row, int col,
                                           int lane) {
    const uint16_t *p =
        tile + lwc_fa_at(row + lwc_ldsm_row(lane, KIND), col + lwc_ldsm_col(lane, KIND), D);
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
    if (KIND == LWC_LDSM_BT)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
}

// A lane's two adjacent outputs of a row (col even): float2, or two bf16 rounded as the CPU
// rounds (bf16_bits.h) in one 4-byte store.
__device__ __forceinline__ void store2(float *p, float x, float y) {
    *reinterpret_cast<float2 *>(p) = make_float2(x, y);
}
__device__ __forceinline__ void store2(uint16_t *p, float x, float y) {
    const uint32_t lo = lwc_round_bf16(x), hi = lwc_round_bf16(y);
    *reinterpret_cast<uint32_t *>(p) = lo | hi << 16;
}

// Over a row's 4 lanes (a quad), for the lane's two rows; xor: every lane ends with the same
// value, bit for bit (each step combines the same two values in either order).
__device__ __forceinline__ void quad_max(float *v) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        v[r] = fmaxf(v[r], __shfl_xor_sync(0xffffffffu, v[r], 1));
        v[r] = fmaxf(v[r], __shfl_xor_sync(0xffffffffu, v[r], 2));
    }
}
__device__ __forceinline__ void quad_sum(float *v) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        v[r] += __shfl_xor_sync(0xffffffffu, v[r], 1);
        v[r] += __shfl_xor_sync(0xffffffffu, v[r], 2);
    }
}

// Two score tiles at once, as both backward kernels take them: s = X Y^T and dp = W Z^T over the
// head dim, X and W the warp's 16 rows of two [rows][D] tiles (A operands), Y and Z the step's NT
// columns of two [n][D] tiles (B operands, two 8-column tiles per ldmatrix).
template <int D, int NT>
__device__ __forceinline__ void score_pair(float (*s)[4], float (*dp)[4], const uint16_t *x,
                                           const uint16_t *w, const uint16_t *y, const uint16_t *z,
                                           int warp, int lane) {
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t xa[4], wa[4];
        load_block<D, LWC_LDSM_A>(xa, x, LWC_FA_WARP_ROWS * warp, 16 * kk, lane);
        load_block<D, LWC_LDSM_A>(wa, w, LWC_FA_WARP_ROWS * warp, 16 * kk, lane);
#pragma unroll
        for (int jj = 0; jj < NT / 2; jj++) {
            uint32_t b[4];
            load_block<D, LWC_LDSM_B>(b, y, 16 * jj, 16 * kk, lane);
            mma(s[2 * jj], xa, b[0], b[1]);
            mma(s[2 * jj + 1], xa, b[2], b[3]);
            load_block<D, LWC_LDSM_B>(b, z, 16 * jj, 16 * kk, lane);
            mma(dp[2 * jj], wa, b[0], b[1]);
            mma(dp[2 * jj + 1], wa, b[2], b[3]);
        }
    }
}

// acc (D / 8 C tiles) += P T: P the warp's NT C tiles, packed in pairs as A operands, T the
// step's [NT * 8][D] tile read transposed by ldmatrix as B operands (O += P V, dV += P^T dO,
// dK += dS^T Q, dQ += dS K).
template <int D, int NT>
__device__ __forceinline__ void accumulate(float (*acc)[4], float (*p)[4], const uint16_t *tile,
                                           int lane) {
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) {
        uint32_t pa[4];
        lwc_fa_pack_a(p, kk, pa);
#pragma unroll
        for (int jj = 0; jj < D / 16; jj++) {
            uint32_t b[4];
            load_block<D, LWC_LDSM_BT>(b, tile, 16 * kk, 16 * jj, lane);
            mma(acc[2 * jj], pa, b[0], b[1]);
            mma(acc[2 * jj + 1], pa, b[2], b[3]);
        }
    }
}

// g[col], g[col + 1] += x, y (a lane's two columns of a row of dqkv; col even, g 8-byte aligned
// for fp32, 4-byte for bf16: the pair widened, added in fp32, rounded back)
__device__ __forceinline__ void add2(float *g, float x, float y) {
    float2 *p = reinterpret_cast<float2 *>(g);
    float2 v = *p;
    v.x += x;
    v.y += y;
    *p = v;
}
__device__ __forceinline__ void add2(uint16_t *g, float x, float y) {
    uint32_t *p = reinterpret_cast<uint32_t *>(g);
    const uint32_t v = *p;
    const uint32_t lo = lwc_round_bf16(__uint_as_float(v << 16) + x);
    const uint32_t hi = lwc_round_bf16(__uint_as_float(v & 0xFFFF0000u) + y);
    *p = lo | hi << 16;
}

// Forward: a block per (batch x head, 64 query rows), warp w owning rows 16w .. 16w + 15, over
// the key steps up to the diagonal. sc: 1 / sqrt(hd) log2(e).
template <int D, typename QKV, typename O, bool PIPE>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS<D>)
    flash_mma_forward_kernel(O *out, float *lse, float *rowmax, const QKV *qkv, heads a, float sc) {
    static_assert(!PIPE || sizeof(QKV) == 2, "the pipeline copies a bf16 qkv as it is");
    constexpr int NT = LWC_FA_STEP / 8, ND = D / 8, KD = D / 16, LD = D + LWC_FA_PAD;
    extern __shared__ __align__(16) uint16_t smem[];
    // PIPE: a second K and V tile follow these (lwc_key_step)
    uint16_t *qs = smem, *ks = qs + LWC_FA_BLOCK * LD, *vs = ks + LWC_FA_STEP * LD;
    const int t = a.t, c = a.c, window = a.window;
    int bh, tile;
    lwc_fa_block(blockIdx.x, a.tiles, gridDim.x / a.tiles, LWC_FA_FORWARD, a.order, &bh, &tile);
    const int bi = bh / a.nh, h = bh - bi * a.nh, q0 = tile * LWC_FA_BLOCK;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row0 = q0 + LWC_FA_WARP_ROWS * warp;
    const int64_t c3 = a.ld;
    const QKV *rows = qkv + (int64_t)bi * t * c3, *q = rows + (int64_t)h * D;
    const QKV *k = rows + c + (int64_t)(h / a.group) * D, *v = k + (int64_t)a.nkv * D;

    // 1. the block's Q (PIPE: once the first K and V are sent); its A operands, held throughout
    if constexpr (PIPE) {
        const int k0 = lwc_fa_first_key_step(q0, window) * LWC_FA_STEP;
        lwc_stage_async<D, LWC_FA_STEP, THREADS>(ks, k, c3, k0, t);
        lwc_stage_async<D, LWC_FA_STEP, THREADS>(vs, v, c3, k0, t);
        lwc_stage_commit();
    }
    lwc_stage<D, LWC_FA_BLOCK, THREADS>(qs, q, c3, q0, t);
    __syncthreads();
    uint32_t qa[KD][4];
#pragma unroll
    for (int kk = 0; kk < KD; kk++)
        load_block<D, LWC_LDSM_A>(qa[kk], qs, LWC_FA_WARP_ROWS * warp, 16 * kk, lane);
    float o[ND][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    const int last = lwc_fa_last_key_step(q0, t);
    const int first = lwc_fa_first_key_step(q0, window);
    for (int step = first; step <= last; step++) {
        const int k0 = step * LWC_FA_STEP;
        // 2. the step's K and V
        const uint16_t *kb, *vb;
        lwc_key_step<D, PIPE, THREADS>(&kb, &vb, ks, vs, k, v, c3, step, first, last, t);
        // 3. S = Q K^T, two key tiles per ldmatrix
        float s[NT][4] = {};
#pragma unroll
        for (int kk = 0; kk < KD; kk++) {
#pragma unroll
            for (int jj = 0; jj < NT / 2; jj++) {
                uint32_t b[4];
                load_block<D, LWC_LDSM_B>(b, kb, 16 * jj, 16 * kk, lane);
                mma(s[2 * jj], qa[kk], b[0], b[1]);
                mma(s[2 * jj + 1], qa[kk], b[2], b[3]);
            }
        }
        // 4. the causal and window mask (the diagonal's and the window edge's steps), the online
        // softmax
        if (lwc_fa_forward_masked(q0, k0, LWC_FA_STEP, window))
            lwc_fa_mask_causal(s, NT, lane, row0, k0, window);
        float mx[2], alpha[2];
        lwc_fa_row_max(s, NT, mx);
        quad_max(mx);
        lwc_fa_softmax(s, NT, sc, mx, m, l, alpha);
        lwc_fa_rescale(o, ND, alpha);
        // 5. O += P V: P's C tiles as A operands, V's B operands transposed by ldmatrix
        accumulate<D, NT>(o, s, vb, lane);
    }
    // 6. the rows' sums over the quad; out = O / l, lse, and when asked the rows' largest scores
    quad_sum(l);
    lwc_fa_normalise(o, ND, l);
    O *out_h = out + (int64_t)bi * t * c + (int64_t)h * D;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row0 + lwc_mma_c_row(lane, 2 * r);
        if (row >= t) continue;
#pragma unroll
        for (int j = 0; j < ND; j++)
            store2(out_h + (int64_t)row * c + 8 * j + lwc_mma_c_col(lane, 0), o[j][2 * r],
                   o[j][2 * r + 1]);
        if (lwc_mma_quad(lane) == 0) lse[(int64_t)bh * t + row] = lwc_fa_lse(m[r], l[r]);
        if (lwc_mma_quad(lane) == 0 && rowmax != nullptr)
            rowmax[(int64_t)bh * t + row] = lwc_fa_max_score(m[r], l[r]);
    }
}

// The backward kernels' dout: fp32, or (PIPE) attention.cu's bf16 copy of it.
template <bool PIPE> using dout_t = typename std::conditional<PIPE, uint16_t, float>::type;

// dK and dV: a block per (batch x KV head, 64 keys), warp w owning keys 16w .. 16w + 15, over
// the query heads that read the KV head and, for each, the query steps from the diagonal to the
// window's last. dd: D per (batch x head, row). PIPE: the steps run as one sequence over the
// query heads, the next (the next head's first after a head's last) staged during this one.
template <int D, typename QKV, typename DQ, bool PIPE>
__global__ void __launch_bounds__(THREADS)
    flash_mma_dkdv_kernel(DQ *dqkv, const dout_t<PIPE> *dout, const QKV *qkv, const float *lse,
                          const float *dd, heads a, float scale, float sc) {
    static_assert(!PIPE || sizeof(QKV) == 2, "the pipeline copies a bf16 qkv as it is");
    constexpr int M = LWC_FA_KV_STEP(D), NT = M / 8, ND = D / 8, LD = D + LWC_FA_PAD;
    // PIPE: buffer 1's Q and dO follow buffer 0's (Q_BUF apart), then both buffers' floats
    constexpr int Q_BUF = 2 * M * LD, F_BUF = 2 * M;
    extern __shared__ __align__(16) uint16_t smem[];
    uint16_t *ks = smem, *vs = ks + LWC_FA_BLOCK * LD, *qs = vs + LWC_FA_BLOCK * LD;
    uint16_t *os = qs + M * LD;
    float *ls = reinterpret_cast<float *>(PIPE ? qs + 2 * Q_BUF : os + M * LD), *ds = ls + M;
    const int t = a.t, c = a.c, window = a.window;
    int bk, tile;
    lwc_fa_block(blockIdx.x, a.tiles, gridDim.x / a.tiles, LWC_FA_DKDV, a.order, &bk, &tile);
    const int bi = bk / a.nkv, kh = bk - bi * a.nkv, k0 = tile * LWC_FA_BLOCK;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row0 = k0 + LWC_FA_WARP_ROWS * warp;
    const int64_t c3 = a.ld, rows = (int64_t)bi * t * c3;
    const int64_t kv = rows + c + (int64_t)kh * D; // the KV head's k (its v nkv D further)
    const QKV *k = qkv + kv, *v = k + (int64_t)a.nkv * D;

    // 1. the block's K and V (PIPE: with the first step's Q and dO)
    if constexpr (PIPE) {
        lwc_stage_async<D, LWC_FA_BLOCK, THREADS>(ks, k, c3, k0, t);
        lwc_stage_async<D, LWC_FA_BLOCK, THREADS>(vs, v, c3, k0, t);
        const int h0 = kh * a.group, first = lwc_fa_first_query_step(k0, M);
        lwc_stage_query_tiles<D, M, THREADS>(qs, os, qkv + rows + (int64_t)h0 * D, c3,
                                             dout + (int64_t)bi * t * c + (int64_t)h0 * D, c,
                                             first * M, t);
        lwc_stage_commit();
        const int64_t bh0 = (int64_t)bi * a.nh + h0;
        lwc_query_floats_store<M>(
            ls, ds,
            lwc_query_floats_load<M, THREADS>(lse + bh0 * t, dd + bh0 * t, LOG2E, first * M, t));
    } else {
        lwc_stage<D, LWC_FA_BLOCK, THREADS>(ks, k, c3, k0, t);
        lwc_stage<D, LWC_FA_BLOCK, THREADS>(vs, v, c3, k0, t);
    }
    float dk[ND][4] = {}, dv[ND][4] = {};

    const int first = lwc_fa_first_query_step(k0, M);
    const int last = lwc_fa_last_query_step(k0, t, M, window);
    int n = 0; // PIPE: the steps begun, whose parity is the buffer
    for (int h = kh * a.group; h < (kh + 1) * a.group; h++) {
        const int bh = bi * a.nh + h;
        const QKV *q = qkv + rows + (int64_t)h * D;
        const dout_t<PIPE> *dout_h = dout + (int64_t)bi * t * c + (int64_t)h * D;
        const float *lse_h = lse + (int64_t)bh * t, *dd_h = dd + (int64_t)bh * t;
        for (int step = first; step <= last; step++) {
            const int q0 = step * M;
            // 2. the step's Q, dO, lse log2(e) and D (0 past t)
            const uint16_t *qb = qs, *ob = os;
            const float *lb = ls, *db = ds;
            // PIPE: the next step's lse and D, loaded with its tiles sent, stored after this one's
            // products (into the other buffer, nlb and ndb)
            bool more = false;
            lwc_query_floats next = {0.0f, 0.0f};
            float *nlb = nullptr, *ndb = nullptr;
            if constexpr (PIPE) {
                const int buf = lwc_fa_stage_buffer(n++), other = 1 - buf;
                qb = qs + buf * Q_BUF, ob = os + buf * Q_BUF, lb = ls + buf * F_BUF,
                db = ds + buf * F_BUF;
                lwc_stage_wait_all();
                __syncthreads(); // this step's tiles are in; every warp is done with the other
                int nh = h, ns = step;
                more = lwc_fa_next_query_step(&nh, &ns, first, last, (kh + 1) * a.group);
                if (more) {
                    const int64_t nbh = (int64_t)bi * a.nh + nh;
                    lwc_stage_query_tiles<D, M, THREADS>(
                        qs + other * Q_BUF, os + other * Q_BUF, qkv + rows + (int64_t)nh * D, c3,
                        dout + (int64_t)bi * t * c + (int64_t)nh * D, c, ns * M, t);
                    lwc_stage_commit();
                    next = lwc_query_floats_load<M, THREADS>(lse + nbh * t, dd + nbh * t, LOG2E,
                                                             ns * M, t);
                    nlb = ls + other * F_BUF, ndb = ds + other * F_BUF;
                }
            } else {
                __syncthreads();
                lwc_stage<D, M, THREADS>(qs, q, c3, q0, t);
                lwc_stage<D, M, THREADS>(os, dout_h, c, q0, t);
                for (int r = threadIdx.x; r < M; r += THREADS) {
                    ls[r] = q0 + r < t ? lse_h[q0 + r] * LOG2E : 0.0f;
                    ds[r] = q0 + r < t ? dd_h[q0 + r] : 0.0f;
                }
                __syncthreads();
            }
            // 3. S^T = K Q^T and dP^T = V dO^T, the warp's keys as A operands
            float s[NT][4] = {}, dp[NT][4] = {};
            score_pair<D, NT>(s, dp, ks, vs, qb, ob, warp, lane);
            // 4. P^T and dS^T (masked on the diagonal's and the window edge's steps, and past t)
            lwc_fa_grad_kv(s, dp, NT, lane, lb, db, row0, q0, t, window,
                           lwc_fa_grad_masked(q0, M, k0, LWC_FA_BLOCK, t, window), sc);
            // 5. dV += P^T dO, dK += dS^T Q
            accumulate<D, NT>(dv, s, ob, lane);
            accumulate<D, NT>(dk, dp, qb, lane);
            if constexpr (PIPE)
                if (more) lwc_query_floats_store<M>(nlb, ndb, next);
        }
    }
    // 6. dqkv's k part += scale dK, its v part += dV
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int key = row0 + lwc_mma_c_row(lane, 2 * r);
        if (key >= t) continue;
        DQ *g = dqkv + kv + (int64_t)key * c3 + lwc_mma_c_col(lane, 0);
#pragma unroll
        for (int j = 0; j < ND; j++) {
            add2(g + 8 * j, scale * dk[j][2 * r], scale * dk[j][2 * r + 1]);
            add2(g + (int64_t)a.nkv * D + 8 * j, dv[j][2 * r], dv[j][2 * r + 1]);
        }
    }
}

// dQ: a block per (batch x head, 64 query rows), warp w owning rows 16w .. 16w + 15, over the
// key steps from the window's first to the diagonal.
template <int D, typename QKV, typename DQ, bool PIPE>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS<D>)
    flash_mma_dq_kernel(DQ *dqkv, const dout_t<PIPE> *dout, const QKV *qkv, const float *lse,
                        const float *dd, heads a, float scale, float sc) {
    static_assert(!PIPE || sizeof(QKV) == 2, "the pipeline copies a bf16 qkv as it is");
    constexpr int NT = LWC_FA_STEP / 8, ND = D / 8, LD = D + LWC_FA_PAD;
    // PIPE: a second K and V tile follow these (lwc_key_step)
    extern __shared__ __align__(16) uint16_t smem[];
    uint16_t *qs = smem, *os = qs + LWC_FA_BLOCK * LD, *ks = os + LWC_FA_BLOCK * LD;
    uint16_t *vs = ks + LWC_FA_STEP * LD;
    const int t = a.t, c = a.c, window = a.window;
    int bh, tile;
    lwc_fa_block(blockIdx.x, a.tiles, gridDim.x / a.tiles, LWC_FA_DQ, a.order, &bh, &tile);
    const int bi = bh / a.nh, h = bh - bi * a.nh, q0 = tile * LWC_FA_BLOCK;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row0 = q0 + LWC_FA_WARP_ROWS * warp;
    const int64_t c3 = a.ld, rows = (int64_t)bi * t * c3, head = rows + (int64_t)h * D;
    const QKV *q = qkv + head, *k = qkv + rows + c + (int64_t)(h / a.group) * D;
    const QKV *v = k + (int64_t)a.nkv * D;
    const dout_t<PIPE> *dout_h = dout + (int64_t)bi * t * c + (int64_t)h * D;

    // 1. the block's Q and dO (PIPE: with the first K and V); the lane's rows' lse log2(e), D
    if constexpr (PIPE) {
        lwc_stage_async<D, LWC_FA_BLOCK, THREADS>(qs, q, c3, q0, t);
        lwc_stage_async<D, LWC_FA_BLOCK, THREADS>(os, dout_h, c, q0, t);
        const int k0 = lwc_fa_first_key_step(q0, window) * LWC_FA_STEP;
        lwc_stage_async<D, LWC_FA_STEP, THREADS>(ks, k, c3, k0, t);
        lwc_stage_async<D, LWC_FA_STEP, THREADS>(vs, v, c3, k0, t);
        lwc_stage_commit();
    } else {
        lwc_stage<D, LWC_FA_BLOCK, THREADS>(qs, q, c3, q0, t);
        lwc_stage<D, LWC_FA_BLOCK, THREADS>(os, dout_h, c, q0, t);
    }
    float lr[2], dr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row0 + lwc_mma_c_row(lane, 2 * r);
        lr[r] = row < t ? lse[(int64_t)bh * t + row] * LOG2E : 0.0f;
        dr[r] = row < t ? dd[(int64_t)bh * t + row] : 0.0f;
    }
    float dq[ND][4] = {};

    const int last = lwc_fa_last_key_step(q0, t);
    const int first = lwc_fa_first_key_step(q0, window);
    for (int step = first; step <= last; step++) {
        const int k0 = step * LWC_FA_STEP;
        // 2. the step's K and V
        const uint16_t *kb, *vb;
        lwc_key_step<D, PIPE, THREADS>(&kb, &vb, ks, vs, k, v, c3, step, first, last, t);
        // 3. S = Q K^T and dP = dO V^T, the warp's rows as A operands
        float s[NT][4] = {}, dp[NT][4] = {};
        score_pair<D, NT>(s, dp, qs, os, kb, vb, warp, lane);
        // 4. dS = P (dP - D), into s
        lwc_fa_grad_q(s, dp, NT, lane, lr, dr, row0, k0, t, window,
                      lwc_fa_grad_masked(q0, LWC_FA_BLOCK, k0, LWC_FA_STEP, t, window), sc);
        // 5. dQ += dS K
        accumulate<D, NT>(dq, s, kb, lane);
    }
    // 6. dqkv's q part += scale dQ
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row0 + lwc_mma_c_row(lane, 2 * r);
        if (row >= t) continue;
        DQ *g = dqkv + head + (int64_t)row * c3 + lwc_mma_c_col(lane, 0);
#pragma unroll
        for (int j = 0; j < ND; j++)
            add2(g + 8 * j, scale * dq[j][2 * r], scale * dq[j][2 * r + 1]);
    }
}

// Opts a kernel in to the dynamic shared memory it takes (past 48 KB at head dim 128).
template <typename K> cudaError_t opt_in(K kernel, size_t bytes) {
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

// A window of t - 1 keys or more is every earlier key: 0, which also keeps it within int.
heads heads_of(int64_t t, int64_t c, int64_t nh, int64_t nkv, int64_t window, int order) {
    heads a;
    a.t = (int)t, a.c = (int)c, a.nh = (int)nh, a.nkv = (int)nkv, a.group = (int)(nh / nkv);
    a.ld = (int)(c + 2 * nkv * (c / nh)), a.window = window < t - 1 ? (int)window : 0;
    a.tiles = lwc_fa_tiles(t, LWC_FA_BLOCK), a.order = order;
    return a;
}

template <int D, typename QKV, typename O, bool PIPE>
cudaError_t forward(cudaStream_t stream, O *out, float *lse, float *rowmax, const QKV *qkv,
                    int64_t b, const heads &a) {
    const size_t bytes = lwc_fa_smem_bytes(D, LWC_FA_FORWARD, PIPE);
    cudaError_t e = opt_in(flash_mma_forward_kernel<D, QKV, O, PIPE>, bytes);
    if (e != cudaSuccess) return e;
    const float sc = 1.0f / sqrtf((float)D) * LOG2E;
    flash_mma_forward_kernel<D, QKV, O, PIPE>
        <<<(unsigned)(b * a.nh * a.tiles), THREADS, bytes, stream>>>(out, lse, rowmax, qkv, a, sc);
    return cudaGetLastError();
}

template <int D, typename QKV, typename DQ, bool PIPE>
cudaError_t backward(cudaStream_t stream, DQ *dqkv, const float *dd, const dout_t<PIPE> *dout,
                     const QKV *qkv, const float *lse, int64_t b, const heads &a) {
    const size_t kv_bytes = lwc_fa_smem_bytes(D, LWC_FA_DKDV, PIPE);
    const size_t q_bytes = lwc_fa_smem_bytes(D, LWC_FA_DQ, PIPE);
    cudaError_t e = opt_in(flash_mma_dkdv_kernel<D, QKV, DQ, PIPE>, kv_bytes);
    if (e == cudaSuccess) e = opt_in(flash_mma_dq_kernel<D, QKV, DQ, PIPE>, q_bytes);
    if (e != cudaSuccess) return e;
    const float scale = 1.0f / sqrtf((float)D), sc = scale * LOG2E;
    // dK and dV a block per KV head's key tile, dQ a block per query head's query tile
    flash_mma_dkdv_kernel<D, QKV, DQ, PIPE>
        <<<(unsigned)(b * a.nkv * a.tiles), THREADS, kv_bytes, stream>>>(dqkv, dout, qkv, lse, dd,
                                                                         a, scale, sc);
    flash_mma_dq_kernel<D, QKV, DQ, PIPE>
        <<<(unsigned)(b * a.nh * a.tiles), THREADS, q_bytes, stream>>>(dqkv, dout, qkv, lse, dd, a,
                                                                       scale, sc);
    return cudaGetLastError();
}

// The head dim's kernels for qkv of either type (bf16 as uint16_t; an fp32 one's staging rounds).
template <int D, typename O>
cudaError_t forward_for(cudaStream_t stream, O *out, float *lse, float *rowmax, const void *qkv,
                        bool qkv_bf16, bool pipelined, int64_t b, const heads &a) {
    const uint16_t *q16 = static_cast<const uint16_t *>(qkv);
    if (qkv_bf16 && pipelined)
        return forward<D, uint16_t, O, true>(stream, out, lse, rowmax, q16, b, a);
    if (qkv_bf16) return forward<D, uint16_t, O, false>(stream, out, lse, rowmax, q16, b, a);
    return forward<D, float, O, false>(stream, out, lse, rowmax, static_cast<const float *>(qkv), b,
                                       a);
}

template <int D>
cudaError_t forward_typed(cudaStream_t stream, void *out, bool out_bf16, float *lse, float *rowmax,
                          const void *qkv, bool qkv_bf16, bool pipelined, int64_t b,
                          const heads &a) {
    if (out_bf16)
        return forward_for<D>(stream, static_cast<uint16_t *>(out), lse, rowmax, qkv, qkv_bf16,
                              pipelined, b, a);
    return forward_for<D>(stream, static_cast<float *>(out), lse, rowmax, qkv, qkv_bf16, pipelined,
                          b, a);
}

// dout16 (a bf16 qkv alone): the pipelined kernels, which stage it instead of dout.
template <int D, typename DQ>
cudaError_t backward_for(cudaStream_t stream, DQ *dqkv, const float *dd, const float *dout,
                         const uint16_t *dout16, const void *qkv, bool qkv_bf16, const float *lse,
                         int64_t b, const heads &a) {
    const uint16_t *q16 = static_cast<const uint16_t *>(qkv);
    if (qkv_bf16 && dout16 != nullptr)
        return backward<D, uint16_t, DQ, true>(stream, dqkv, dd, dout16, q16, lse, b, a);
    if (qkv_bf16) return backward<D, uint16_t, DQ, false>(stream, dqkv, dd, dout, q16, lse, b, a);
    return backward<D, float, DQ, false>(stream, dqkv, dd, dout, static_cast<const float *>(qkv),
                                         lse, b, a);
}

template <int D>
cudaError_t backward_typed(cudaStream_t stream, void *dqkv, bool dqkv_bf16, const float *dd,
                           const float *dout, const uint16_t *dout16, const void *qkv,
                           bool qkv_bf16, const float *lse, int64_t b, const heads &a) {
    if (dqkv_bf16)
        return backward_for<D>(stream, static_cast<uint16_t *>(dqkv), dd, dout, dout16, qkv,
                               qkv_bf16, lse, b, a);
    return backward_for<D>(stream, static_cast<float *>(dqkv), dd, dout, dout16, qkv, qkv_bf16, lse,
                           b, a);
}

} // namespace

bool lwc_flash_mma_serves(int64_t hd) { return hd == 64 || hd == 128; }

size_t lwc_flash_mma_smem_bytes(int64_t hd, bool backward, bool pipelined) {
    if (!lwc_flash_mma_serves(hd)) return 0;
    const int v = pipelined ? LWC_FA_PIPELINED : LWC_FA_SYNC;
    if (!backward) return lwc_fa_smem_bytes((int)hd, LWC_FA_FORWARD, v);
    const size_t kv = lwc_fa_smem_bytes((int)hd, LWC_FA_DKDV, v);
    const size_t q = lwc_fa_smem_bytes((int)hd, LWC_FA_DQ, v);
    return kv > q ? kv : q;
}

int64_t lwc_flash_mma_blocks(int64_t b, int64_t t, int64_t nh) {
    return b * nh * lwc_fa_tiles(t, LWC_FA_BLOCK);
}

cudaError_t lwc_flash_mma_forward(cudaStream_t stream, void *out, bool out_bf16, float *lse,
                                  float *rowmax, const void *qkv, bool qkv_bf16, int64_t b,
                                  int64_t t, int64_t c, int64_t nh, int64_t nkv, int64_t window,
                                  bool pipelined, int order) {
    if (b <= 0 || t <= 0 || c <= 0 || nh <= 0 || nkv <= 0) return cudaSuccess;
    const heads a = heads_of(t, c, nh, nkv, window, order);
    switch (c / nh) {
    case 64:
        return forward_typed<64>(stream, out, out_bf16, lse, rowmax, qkv, qkv_bf16, pipelined, b,
                                 a);
    case 128:
        return forward_typed<128>(stream, out, out_bf16, lse, rowmax, qkv, qkv_bf16, pipelined, b,
                                  a);
    default:
        return cudaErrorInvalidValue; // the caller checks the head dim first
    }
}

cudaError_t lwc_flash_mma_backward(cudaStream_t stream, void *dqkv, bool dqkv_bf16, const float *dd,
                                   const float *dout, const void *qkv, bool qkv_bf16,
                                   const float *lse, int64_t b, int64_t t, int64_t c, int64_t nh,
                                   int64_t nkv, int64_t window, const uint16_t *dout16, int order) {
    if (b <= 0 || t <= 0 || c <= 0 || nh <= 0 || nkv <= 0) return cudaSuccess;
    const heads a = heads_of(t, c, nh, nkv, window, order);
    switch (c / nh) {
    case 64:
        return backward_typed<64>(stream, dqkv, dqkv_bf16, dd, dout, dout16, qkv, qkv_bf16, lse, b,
                                  a);
    case 128:
        return backward_typed<128>(stream, dqkv, dqkv_bf16, dd, dout, dout16, qkv, qkv_bf16, lse, b,
                                   a);
    default:
        return cudaErrorInvalidValue;
    }
}
