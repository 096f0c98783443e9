/* mma_layout.h: the index arithmetic of the tensor-core attention (attention_mma.cu), in C that
 * nvcc and gcc both read: which lane of a warp holds which element of mma.m16n8k16's bf16
 * operands and fp32 accumulators (the PTX ISA's fragment layouts), which row each lane points
 * ldmatrix.x4 at, the kernels' tiles (sizes, the blocks of the grid, the causal and windowed
 * ranges of their steps, the masks, shared memory), and the per-lane steps of the online softmax
 * and of the gradients. tests/mma_layout/ runs the kernels' tile loops on the CPU through these
 * same functions, emulating a warp's 32 lanes; nothing here touches memory beyond its arguments. */
#ifndef LW_CUDA_MMA_LAYOUT_H
#define LW_CUDA_MMA_LAYOUT_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#define LWC_MMA_FN static __host__ __device__ __forceinline__
#else
#define LWC_MMA_FN static inline
#endif
/* the device pass unrolls the lanes' loops (their arrays then live in registers); the host passes,
 * gcc's and nvcc's, see nothing */
#if defined(__CUDA_ARCH__)
#define LWC_MMA_UNROLL _Pragma("unroll")
#else
#define LWC_MMA_UNROLL
#endif

/* ---- mma.m16n8k16.row.col.f32.bf16.bf16.f32 ------------------------------------------------- *
 * D (16 x 8, f32) = A (16 x 16, bf16, row) B (16 x 8, bf16, col) + C. A lane's group is lane / 4
 * (the rows it holds), its place in the group lane % 4 (the column pairs). Registers hold two
 * bf16 each, the lower-numbered element in the low half:
 *   A: a0..a7, in four registers: a0 a1 at (g, 2q, 2q + 1), a2 a3 at row g + 8, a4 a5 at
 *      columns + 8, a6 a7 at both;
 *   B: b0..b3 in two registers: b0 b1 at rows (k) 2q, 2q + 1 of column (n) g, b2 b3 at k + 8;
 *   C, D: c0..c3, one float each: c0 c1 at (g, 2q, 2q + 1), c2 c3 at row g + 8.
 * So a row's 8 columns of C lie in the 4 lanes of one group, and two C tiles side by side (16
 * columns) are, element for element, an A operand: tile j's c0..c3 are a0..a3 and tile j + 1's
 * are a4..a7 (lwc_fa_pack_a). */

LWC_MMA_FN int lwc_mma_group(int lane) { return lane >> 2; }
LWC_MMA_FN int lwc_mma_quad(int lane) { return lane & 3; }

/* A's element a_i (i < 8) of `lane`: its row and column in the 16 x 16 operand */
LWC_MMA_FN int lwc_mma_a_row(int lane, int i) { return (lane >> 2) + 8 * ((i >> 1) & 1); }
LWC_MMA_FN int lwc_mma_a_col(int lane, int i) { return 2 * (lane & 3) + (i & 1) + 8 * (i >> 2); }
/* B's element b_i (i < 4): its row (k) and column (n) in the 16 x 8 operand */
LWC_MMA_FN int lwc_mma_b_row(int lane, int i) { return 2 * (lane & 3) + (i & 1) + 8 * (i >> 1); }
LWC_MMA_FN int lwc_mma_b_col(int lane, int i) { return (void)i, lane >> 2; }
/* C's (and D's) element c_i (i < 4): its row and column in the 16 x 8 accumulator */
LWC_MMA_FN int lwc_mma_c_row(int lane, int i) { return (lane >> 2) + 8 * (i >> 1); }
LWC_MMA_FN int lwc_mma_c_col(int lane, int i) { return 2 * (lane & 3) + (i & 1); }

/* ---- ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16 ----------------------------------------- *
 * Lanes 8m .. 8m + 7 give the addresses of the 8 rows (16 bytes each) of matrix m, and register m
 * of every lane receives its part of matrix m: a lane holds row lane / 4, elements 2 (lane % 4)
 * and the next, or with .trans those of column lane / 4. The kernels read three kinds of 16 x 16
 * blocks of a row-major bf16 tile with one x4 each; these give, for a lane, the row and column
 * (within the block) of the row whose address it gives:
 *   LWC_LDSM_A   an A operand from a [m][k] tile (Q for Q K^T): registers a0a1, a2a3, a4a5, a6a7;
 *                matrix m covers rows 8 (m & 1), columns 8 (m >> 1);
 *   LWC_LDSM_B   the B operands of two 8-column tiles from a [n][k] tile (K for Q K^T): b0b1,
 *                b2b3 of columns n 0..7, then of n 8..15; matrix m covers rows (n) 8 (m >> 1),
 *                columns (k) 8 (m & 1);
 *   LWC_LDSM_BT  the same from a [k][n] tile, with .trans (V for P V): matrix m covers rows (k)
 *                8 (m & 1), columns (n) 8 (m >> 1). */
enum { LWC_LDSM_A = 0, LWC_LDSM_B = 1, LWC_LDSM_BT = 2 };

LWC_MMA_FN int lwc_ldsm_row(int lane, int kind) {
    const int m = lane >> 3;
    return (lane & 7) + 8 * (kind == LWC_LDSM_B ? m >> 1 : m & 1);
}
LWC_MMA_FN int lwc_ldsm_col(int lane, int kind) {
    const int m = lane >> 3;
    return 8 * (kind == LWC_LDSM_B ? m & 1 : m >> 1);
}

/* ---- bf16 ------------------------------------------------------------------------------------ */

/* x rounded to bf16, to nearest even (a NaN stays a NaN, quiet): the bits. */
LWC_MMA_FN uint16_t lwc_mma_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

LWC_MMA_FN float lwc_mma_float(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* lo and hi rounded to bf16 in one register, lo in the low half (as mma and ldmatrix read it). */
LWC_MMA_FN uint32_t lwc_mma_pack(float lo, float hi) {
#if defined(__CUDA_ARCH__)
    /* cvt.rn.bf16x2.f32: the same rounding */
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
#else
    return (uint32_t)lwc_mma_bf16(lo) | (uint32_t)lwc_mma_bf16(hi) << 16;
#endif
}

/* ---- the kernels' tiles ---------------------------------------------------------------------- *
 * Every kernel runs 4 warps, each owning 16 rows (one mma tile's) of the block's 64: the forward's
 * query rows, the dk/dv kernel's key rows, the dq kernel's query rows. The other side of each
 * product moves in steps: 64 keys (forward, dq), 64 queries (dk/dv at head dim 64) or 32 (at 128).
 *   - 4 warps x 16 rows: a block's 64 rows share each staged K/V (or Q/dO) tile four ways, which
 *     is what keeps shared-memory traffic (every warp reads the whole step tile through ldmatrix:
 *     256 bytes per mma) below the SM's 128 bytes per clock at the tensor cores' rate; 64 rows also
 *     give GPT-2 (b 8 x 12 heads, t 1024) 1536 blocks, over 11 per SM of an H100.
 *   - 64 columns per step: the scores of a warp's 16 rows are 8 C tiles, 32 registers a lane;
 *     the forward holds them, the output (hd / 2 registers) and Q (hd / 4), and the dq kernel
 *     S, dP and dQ, within 255 registers: ptxas gives 255 for both at hd 128 (two blocks an SM)
 *     and 168 at hd 64 (three, with no spill: attention_mma.cu's MIN_BLOCKS); dk/dv 240 and
 *     177-188.
 *   - the dk/dv kernel holds dK and dV (hd registers together: 128 at hd 128) besides P^T and
 *     dP^T, so at hd 128 it steps over 32 queries (32 registers for both) instead of 64 (64).
 *   - ptxas -v, sm_90, no spill in any instantiation; synchronous / pipelined staging: hd 64
 *     forward 168 / 160, dq 168 / 168, dk/dv 232 / 243; hd 128 forward 245-255 / 239, dq
 *     244-248 / 250, dk/dv 246 / 242 (the pipelined dk/dv holds the next step's lse and D; the
 *     synchronous dk/dv at hd 64 took 178 before the grids' order became a run-time choice, two
 *     blocks an SM either way). The pipelined tiles (lwc_fa_smem_bytes: hd 64 45, 54, 55 KB for
 *     forward, dq, dk/dv; hd 128 85, 102, 69 KB, against 27, 36, 37 and 51, 68, 51) leave the
 *     blocks per SM as the registers set them, three or two at hd 64 (two for dk/dv), two at
 *     128, within an H100's 228 KB; an 8.6 / 8.9 GPU's 99 KB per block does not hold hd 128's
 *     pipelined dq (attention.cu stages synchronously there).
 * Shared tiles are bf16, row-major, rows hd + 8 elements apart: 144 or 272 bytes, 4 banks past a
 * multiple of 32, so the 8 rows an ldmatrix phase reads (16 bytes each) fall in 32 different
 * banks; the staging's 8-byte stores of a half-warp cover one row's 128 contiguous bytes. */
enum {
    LWC_FA_WARPS = 4,
    LWC_FA_THREADS = 32 * LWC_FA_WARPS,
    LWC_FA_WARP_ROWS = 16,                          /* an mma tile's rows */
    LWC_FA_BLOCK = LWC_FA_WARPS * LWC_FA_WARP_ROWS, /* a block's rows */
    LWC_FA_STEP = 64, /* keys per step of the forward and dq kernels */
    LWC_FA_PAD = 8    /* bf16 elements past hd in a shared row */
};
/* queries per step of the dk/dv kernel */
#define LWC_FA_KV_STEP(hd) ((hd) > 64 ? 32 : 64)

enum { LWC_FA_FORWARD = 0, LWC_FA_DKDV = 1, LWC_FA_DQ = 2 };

LWC_MMA_FN int lwc_fa_tiles(int64_t t, int size) { return (int)((t + size - 1) / size); }

/* The orders of a grid's blocks (attention_mma.cu takes one per launch from LWOPT_ATTN_ORDER):
 *   LWC_FA_ORDER_HEADS  a head's tiles consecutive, the heaviest first: their K and V (or Q and
 *                       dO) stay in L2 while they run;
 *   LWC_FA_ORDER_WORK   tile-major across the (batch x head) pairs: every pair's heaviest tile,
 *                       then every pair's next, ...: the longest blocks start first and the last
 *                       to start are the shortest, so the SMs run out of work closer together (a
 *                       greedy scheduler's makespan: bench/attention_schedule.c), at the cost of
 *                       that L2 reuse (a head's tiles run `pairs` blocks apart). */
enum { LWC_FA_ORDER_HEADS = 0, LWC_FA_ORDER_WORK = 1 };

/* Block `block` of a grid of pairs (batch x head) x tiles blocks, in `order`: its batch x head and
 * its tile, the heaviest first: the last query tile (the most keys) for the forward and dq
 * kernels, the first key tile (the most queries) for the dk/dv kernel. */
LWC_MMA_FN void lwc_fa_block(int64_t block, int tiles, int64_t pairs, int kernel, int order,
                             int *bh, int *tile) {
    int64_t i; /* the tile's rank, heaviest 0 */
    if (order == LWC_FA_ORDER_WORK) {
        i = block / pairs;
        *bh = (int)(block - i * pairs);
    } else {
        *bh = (int)(block / tiles);
        i = block - (int64_t)*bh * tiles;
    }
    *tile = kernel == LWC_FA_DKDV ? (int)i : tiles - 1 - (int)i;
}

/* Whether query `query` sees key `key`: causal, and under a window (0: none) no more than
 * `window` keys back (flash attention's window_size (window, 0)). */
LWC_MMA_FN bool lwc_fa_sees(int64_t query, int64_t key, int window) {
    return key <= query && (window == 0 || key >= query - window);
}

/* Forward and dq: the first and the last key step (of LWC_FA_STEP keys, from key 0) that the
 * queries [q0, q0 + LWC_FA_BLOCK) see; every other one is masked whole and skipped. */
LWC_MMA_FN int lwc_fa_first_key_step(int q0, int window) {
    return window > 0 && q0 > window ? (q0 - window) / LWC_FA_STEP : 0;
}
LWC_MMA_FN int lwc_fa_last_key_step(int q0, int64_t t) {
    const int64_t last = q0 + LWC_FA_BLOCK - 1 < t - 1 ? q0 + LWC_FA_BLOCK - 1 : t - 1;
    return (int)(last / LWC_FA_STEP);
}
/* dk/dv: the first and the last query step (of `step` queries) that see a key of [k0, k0 +
 * LWC_FA_BLOCK), the last a real query's (< t); every other one is masked whole and skipped. */
LWC_MMA_FN int lwc_fa_first_query_step(int k0, int step) { return k0 / step; }
LWC_MMA_FN int lwc_fa_last_query_step(int k0, int64_t t, int step, int window) {
    const int64_t reach = window > 0 ? (int64_t)k0 + LWC_FA_BLOCK - 1 + window : t - 1;
    return (int)((reach < t - 1 ? reach : t - 1) / step);
}

/* The steps block `tile` of `kernel` runs at head dim hd, the measure of its work: key steps for
 * the forward and dq kernels, query steps for the dk/dv kernel (once per query head of its KV
 * head's group). */
LWC_MMA_FN int lwc_fa_steps(int kernel, int tile, int64_t t, int hd, int window) {
    const int r0 = tile * LWC_FA_BLOCK;
    if (kernel != LWC_FA_DKDV)
        return lwc_fa_last_key_step(r0, t) - lwc_fa_first_key_step(r0, window) + 1;
    const int step = LWC_FA_KV_STEP(hd);
    return lwc_fa_last_query_step(r0, t, step, window) - lwc_fa_first_query_step(r0, step) + 1;
}

/* Whether a step of queries [q0, q0 + qn) against keys [k0, k0 + kn) holds a masked pair, and so
 * needs the mask: the forward's a key past a query or before its window (rows at or past t are
 * never stored); the gradients' also a query at or past t. */
LWC_MMA_FN bool lwc_fa_forward_masked(int q0, int k0, int kn, int window) {
    return k0 + kn - 1 > q0 || (window > 0 && k0 < q0 + LWC_FA_BLOCK - 1 - window);
}
LWC_MMA_FN bool lwc_fa_grad_masked(int q0, int qn, int k0, int kn, int64_t t, int window) {
    return k0 + kn - 1 > q0 || q0 + qn > t || (window > 0 && k0 < q0 + qn - 1 - window);
}
/* the pairs the gradients keep: seen, and a real query */
LWC_MMA_FN bool lwc_fa_kept(int64_t query, int64_t key, int64_t t, int window) {
    return lwc_fa_sees(query, key, window) && query < t;
}

/* The bf16 element (row, col) of a shared tile. */
LWC_MMA_FN int lwc_fa_at(int row, int col, int hd) { return row * (hd + LWC_FA_PAD) + col; }

/* The staging's chunk e (of rows * hd / 4): 4 consecutive floats of one row, read as a float4
 * and stored as 4 bf16; consecutive threads take consecutive chunks. */
LWC_MMA_FN void lwc_fa_chunk(int e, int hd, int *row, int *col) {
    *row = e / (hd / 4);
    *col = 4 * (e - *row * (hd / 4));
}

/* ---- the staging's variants ------------------------------------------------------------------ *
 * LWC_FA_SYNC: a step's two tiles (forward and dq K and V, dk/dv Q and dO) are loaded, stored
 * and waited for before the warps compute on them. LWC_FA_PIPELINED (a bf16 qkv, and the bf16
 * copy of dO that attention.cu's row dots write): the next step's two tiles travel by cp.async
 * (16 bytes a thread a chunk) into a second buffer while the warps compute on the current one,
 * as FlashAttention-2 double-buffers; a block's steps alternate between the buffers. */
enum { LWC_FA_SYNC = 0, LWC_FA_PIPELINED = 1 };

/* The buffer (0 or 1) of the block's n-th step (n from 0, counted over the dk/dv kernel's
 * query heads as one sequence): consecutive steps never share one, so a step's copies land in
 * the buffer that no warp still reads. */
LWC_MMA_FN int lwc_fa_stage_buffer(int n) { return n & 1; }

/* The pipelined staging's chunk e (of rows * hd / 8): 8 consecutive bf16 of one row, 16 bytes
 * (one cp.async); consecutive threads take consecutive chunks, so a warp's 8-lane phase writes
 * one row's 128 contiguous bytes. */
LWC_MMA_FN void lwc_fa_chunk16(int e, int hd, int *row, int *col) {
    *row = e / (hd / 8);
    *col = 8 * (e - *row * (hd / 8));
}

/* dk/dv under the pipeline: the step after (*h, *step) in the block's order (the query heads
 * [*h, h_end) in turn, each over its steps first .. last), in place; false after the last. */
LWC_MMA_FN bool lwc_fa_next_query_step(int *h, int *step, int first, int last, int h_end) {
    if (*step < last) {
        ++*step;
        return true;
    }
    if (*h + 1 >= h_end) return false;
    ++*h;
    *step = first;
    return true;
}

/* Shared memory of a kernel at head dim hd, in bytes: its bf16 tiles (forward Q, K, V; dk/dv
 * K, V, Q, dO; dq Q, dO, K, V) and the dk/dv kernel's two floats per query of a step; the
 * pipelined variant holds two of each step's tiles (and floats). */
LWC_MMA_FN size_t lwc_fa_smem_bytes(int hd, int kernel, int variant) {
    const size_t row = 2 * (size_t)(hd + LWC_FA_PAD), buffers = variant == LWC_FA_PIPELINED ? 2 : 1;
    switch (kernel) {
    case LWC_FA_FORWARD:
        return (LWC_FA_BLOCK + buffers * 2 * LWC_FA_STEP) * row;
    case LWC_FA_DKDV:
        return (2 * LWC_FA_BLOCK + buffers * 2 * LWC_FA_KV_STEP(hd)) * row +
               buffers * 2 * sizeof(float) * LWC_FA_KV_STEP(hd);
    default:
        return (2 * LWC_FA_BLOCK + buffers * 2 * LWC_FA_STEP) * row;
    }
}

/* ---- a lane's steps -------------------------------------------------------------------------- *
 * A warp's 16 rows x 8 nt columns of scores are nt C tiles, s[j] holding columns 8j .. 8j + 7; a
 * lane holds two rows of each (g: elements 0, 1; g + 8: 2, 3), so per-row values come in pairs
 * (index 0 for row g, 1 for g + 8). Exponentials are exp2 of scores times scale log2(e), which
 * the caller passes as c. Reductions over a row's 4 lanes (the quad) are the caller's: shuffles
 * on a GPU, loops in the emulation. */

/* Forward: -inf where the query (row0 + row) does not see the key (col0 + column). */
LWC_MMA_FN void lwc_fa_mask_causal(float (*s)[4], int nt, int lane, int row0, int col0,
                                   int window) {
    LWC_MMA_UNROLL
    for (int j = 0; j < nt; j++) {
        LWC_MMA_UNROLL
        for (int i = 0; i < 4; i++)
            if (!lwc_fa_sees(row0 + lwc_mma_c_row(lane, i), col0 + 8 * j + lwc_mma_c_col(lane, i),
                             window))
                s[j][i] = -INFINITY;
    }
}

/* The lane's largest score of each of its two rows (NaN passed over, as fmaxf does). */
LWC_MMA_FN void lwc_fa_row_max(float (*s)[4], int nt, float mx[2]) {
    mx[0] = mx[1] = -INFINITY;
    LWC_MMA_UNROLL
    for (int j = 0; j < nt; j++) {
        LWC_MMA_UNROLL
        for (int i = 0; i < 4; i++)
            mx[i >> 1] = fmaxf(mx[i >> 1], s[j][i]);
    }
}

/* The online softmax's step, once mx holds the rows' maxima over the quad: the running maxima m
 * (of scores times c) move up to this step's, alpha the factor by which the rows' earlier sums
 * and outputs shrink (0 on the first step, where m is -inf), s becomes p = exp2(s c - m), and the
 * lane's shares of the row sums l take this step's p (the quad's shares are added at the end).
 * A NaN score makes its p, then the row's l and output, NaN. A row that has seen no key yet (a
 * window's first step may hold none of a row's keys) keeps m -inf and takes exponentials from
 * 0: every p and alpha 0, where -inf - -inf would be NaN. */
LWC_MMA_FN void lwc_fa_softmax(float (*s)[4], int nt, float c, const float mx[2], float m[2],
                               float l[2], float alpha[2]) {
    float base[2];
    LWC_MMA_UNROLL
    for (int r = 0; r < 2; r++) {
        const float mnew = fmaxf(m[r], mx[r] * c);
        base[r] = mnew == -INFINITY ? 0.0f : mnew;
        alpha[r] = exp2f(m[r] - base[r]);
        m[r] = mnew;
        l[r] *= alpha[r];
    }
    LWC_MMA_UNROLL
    for (int j = 0; j < nt; j++) {
        LWC_MMA_UNROLL
        for (int i = 0; i < 4; i++) {
            const float p = exp2f(fmaf(s[j][i], c, -base[i >> 1]));
            s[j][i] = p;
            l[i >> 1] += p;
        }
    }
}

/* o (nd C tiles of the rows' outputs) *= alpha of its row */
LWC_MMA_FN void lwc_fa_rescale(float (*o)[4], int nd, const float alpha[2]) {
    LWC_MMA_UNROLL
    for (int j = 0; j < nd; j++) {
        LWC_MMA_UNROLL
        for (int i = 0; i < 4; i++)
            o[j][i] *= alpha[i >> 1];
    }
}

/* C tiles 2kk and 2kk + 1 of s (columns 16kk .. 16kk + 15) rounded to bf16 as the A operand of
 * those 16 columns (the k of the next product): P for P V, dS for dS K, P^T, dS^T. */
LWC_MMA_FN void lwc_fa_pack_a(float (*s)[4], int kk, uint32_t a[4]) {
    a[0] = lwc_mma_pack(s[2 * kk][0], s[2 * kk][1]);
    a[1] = lwc_mma_pack(s[2 * kk][2], s[2 * kk][3]);
    a[2] = lwc_mma_pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[3] = lwc_mma_pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

/* Forward, at the end: the outputs divided by the rows' sums (the quad's, added). */
LWC_MMA_FN void lwc_fa_normalise(float (*o)[4], int nd, const float l[2]) {
    LWC_MMA_UNROLL
    for (int j = 0; j < nd; j++) {
        LWC_MMA_UNROLL
        for (int i = 0; i < 4; i++)
            o[j][i] = o[j][i] / l[i >> 1];
    }
}

/* A row's log-sum-exp of its scaled scores, natural log (lw.h's contract), from m (log2 units)
 * and the row's sum. */
LWC_MMA_FN float lwc_fa_lse(float m, float l) { return (m + log2f(l)) * 0.693147180559945309f; }

/* A row's largest scaled score (natural units), from m: the running maximum of its raw scores
 * times c = scale log2(e), which rounds as the maximum of the products would (a positive factor
 * keeps the order), so m ln(2) is the largest score times scale within two roundings. The row
 * max passes over a NaN score (fmaxf), whose exponential makes the sum NaN: NaN then. */
LWC_MMA_FN float lwc_fa_max_score(float m, float l) {
    return isnan(l) ? NAN : m * 0.693147180559945309f;
}

/* dk/dv: rows are keys (row0 the warp's first), columns queries (col0 the step's first); lse2 and
 * dd the step's queries' lse log2(e) and D = rowsum(dout * out), by column. s (K Q^T) becomes
 * P^T = exp2(s c - lse2), 0 where the pair is masked (only when `masked`: lwc_fa_grad_masked),
 * and dp (V dO^T) becomes dS^T = P^T (dp - D). */
LWC_MMA_FN void lwc_fa_grad_kv(float (*s)[4], float (*dp)[4], int nt, int lane, const float *lse2,
                               const float *dd, int row0, int col0, int64_t t, int window,
                               bool masked, float c) {
    LWC_MMA_UNROLL
    for (int j = 0; j < nt; j++) {
        LWC_MMA_UNROLL
        for (int i = 0; i < 4; i++) {
            const int col = 8 * j + lwc_mma_c_col(lane, i);
            const bool kept =
                !masked || lwc_fa_kept(col0 + col, row0 + lwc_mma_c_row(lane, i), t, window);
            const float p = kept ? exp2f(fmaf(s[j][i], c, -lse2[col])) : 0.0f;
            s[j][i] = p;
            dp[j][i] = p * (dp[j][i] - dd[col]);
        }
    }
}

/* dq: rows are queries (row0), columns keys (col0); lse2 and dd the lane's two rows' values. s
 * (Q K^T) becomes dS = P (dp - D) with P = exp2(s c - lse2), 0 where masked; dp (dO V^T) is
 * read. */
LWC_MMA_FN void lwc_fa_grad_q(float (*s)[4], float (*dp)[4], int nt, int lane, const float lse2[2],
                              const float dd[2], int row0, int col0, int64_t t, int window,
                              bool masked, float c) {
    LWC_MMA_UNROLL
    for (int j = 0; j < nt; j++) {
        LWC_MMA_UNROLL
        for (int i = 0; i < 4; i++) {
            const int r = i >> 1;
            const bool kept =
                !masked || lwc_fa_kept(row0 + lwc_mma_c_row(lane, i),
                                       col0 + 8 * j + lwc_mma_c_col(lane, i), t, window);
            const float p = kept ? exp2f(fmaf(s[j][i], c, -lse2[r])) : 0.0f;
            s[j][i] = p * (dp[j][i] - dd[r]);
        }
    }
}

#endif
