/* test_mma_layout.c: the tensor-core attention (src/cuda/attention_mma.cu) on the CPU, where no
 * GPU runs it. Its index arithmetic lives in src/cuda/mma_layout.h, which this test shares:
 *   - the layouts: the header's lanes of mma.m16n8k16's A, B and C fragments against the PTX
 *     ISA's formulas (transcribed here on their own), each element of A (16 x 16), B (16 x 8) and
 *     C (16 x 8) held by exactly one (lane, register, half); two C tiles are an A operand
 *     element for element (the kernels' P -> A reuse); ldmatrix.x4, emulated from the ISA's
 *     description, at the header's lane addresses delivers exactly those operands for each kind
 *     of read, with 16-byte aligned rows, and with no bank conflict between the 8 rows of a
 *     phase (nor between the stores of a half-warp when tiles are staged);
 *   - the tile plan: every (batch x head, tile) block once, the steps a block runs are exactly
 *     those holding a kept pair, the masks applied exactly where a pair is masked (all t up to
 *     300), shared memory holding the kernels' tiles;
 *   - the kernels' three tile loops run on the CPU step for step (emulate_* below, numbered as in
 *     attention_mma.cu): 32 lanes' registers as arrays, mma.sync and ldmatrix emulated from the
 *     ISA's layouts, the header's per-lane steps, the quads' shuffles, the same tiles, causal
 *     skipping, online rescaling and order of accumulation; against double-precision causal
 *     attention on bf16-rounded inputs, within a bound per element (below), the forward's rows'
 *     largest scores (lwc_fa_max_score, which attention.cu reduces per head) as lse is;
 *   - that the comparison could fail: four faults injected into the emulation (an operand's
 *     halves swapped, the P -> A packing reordered, the mask one key late, a quad reduced over
 *     two lanes) must each break it.
 * The bound: with inputs already bf16, the kernels' only roundings beyond fp32 are P (forward:
 * P V; backward: P^T dO) and dS (dS K, dS^T Q) rounded to bf16 (u = 2^-8 relative each, nearest
 * even). An output sum_j x_j of terms x_j (p_j v_j, p_ij dout_i, scale dS_ij q_i, ...) is then
 * off by sum_j e_j x_j, |e_j| <= u: at most u sum |x_j|, and, the e_j being independent of zero
 * mean, beyond 8 u sqrt(sum x_j^2) with probability below 2 exp(-32) (Hoeffding); the bound is
 * the smaller of the two, plus 2^-14 of the terms' magnitudes (sum |x_j| with dS's factors taken
 * apart: sum p_ij (|dP_ij| + |D_i|) |q_i|) for fp32's sums, exp2f and the saved lse (~2^-17 at
 * worst here). An index slip moves an output by whole terms, far past it.
 * `test_mma_layout --harness` instead prints, for tests/kernels/attention.c's shapes and inputs
 * (uniform, not rounded to bf16), how far the emulation comes from double attention on the
 * measures that test uses: what its bf16 tolerances are derived from. */
#include "check.h"
#include "cuda/mma_layout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the hardware, as the PTX ISA describes it (written here apart from the header) -------- */

/* m16n8k16, .bf16 A: a_i at row groupID for i in {0, 1, 4, 5}, groupID + 8 otherwise; column
 * threadID_in_group * 2 + (i & 1), + 8 for i >= 4. B: b_i at row threadID_in_group * 2 + (i & 1),
 * + 8 for i >= 2, column groupID. C/D (f32): c_i at row groupID for i < 2, groupID + 8 otherwise,
 * column threadID_in_group * 2 + (i & 1). */
static int ptx_a_row(int lane, int i) {
    return lane / 4 + ((i == 2 || i == 3 || i == 6 || i == 7) ? 8 : 0);
}
static int ptx_a_col(int lane, int i) { return (lane % 4) * 2 + i % 2 + (i >= 4 ? 8 : 0); }
static int ptx_b_row(int lane, int i) { return (lane % 4) * 2 + i % 2 + (i >= 2 ? 8 : 0); }
static int ptx_b_col(int lane, int i) { return (void)i, lane / 4; }
static int ptx_c_row(int lane, int i) { return lane / 4 + (i >= 2 ? 8 : 0); }
static int ptx_c_col(int lane, int i) { return (lane % 4) * 2 + i % 2; }

static uint16_t half_of(uint32_t reg, int h) { return (uint16_t)(h ? reg >> 16 : reg & 0xffffu); }
static double widen(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* ldmatrix.sync.aligned.m8n8.x4(.trans).b16: lanes 8m .. 8m + 7 give the rows of matrix m
 * (rows[lane], cols[lane]: the element of the tile where its 8 elements start); register m of
 * lane l receives row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1 (the lower in the low half),
 * or with .trans column l / 4, elements of rows 2 (l % 4) and 2 (l % 4) + 1. */
static void ptx_ldmatrix_x4(uint32_t r[32][4], const uint16_t *tile, int hd, const int rows[32],
                            const int cols[32], bool trans) {
    for (int m = 0; m < 4; m++)
        for (int l = 0; l < 32; l++) {
            const int a = trans ? 2 * (l % 4) : l / 4, b = trans ? l / 4 : 2 * (l % 4);
            /* element (row i, column j) of matrix m: the j-th from lane 8m + i's address */
#define ELEM(i, j) tile[lwc_fa_at(rows[8 * m + (i)], cols[8 * m + (i)], hd) + (j)]
            const uint16_t lo = ELEM(a, b), hi = trans ? ELEM(a + 1, b) : ELEM(a, b + 1);
#undef ELEM
            r[l][m] = (uint32_t)lo | (uint32_t)hi << 16;
        }
}

/* d[lane] (a C tile each) += a[lane] (A) times registers 2 pair, 2 pair + 1 of b[lane] (B):
 * products exact (bf16 x bf16 fits a float), each output's 16 added to c in double, rounded
 * once (the hardware's order inside one mma is its own; fp32 sums of 16 terms stay within a few
 * ulps of this). */
static void ptx_mma(float *d[32], uint32_t *a[32], uint32_t b[32][4], int pair) {
    double A[16][16], B[16][8], C[16][8];
    for (int l = 0; l < 32; l++) {
        for (int i = 0; i < 8; i++)
            A[ptx_a_row(l, i)][ptx_a_col(l, i)] = widen(half_of(a[l][i / 2], i % 2));
        for (int i = 0; i < 4; i++)
            B[ptx_b_row(l, i)][ptx_b_col(l, i)] = widen(half_of(b[l][2 * pair + i / 2], i % 2));
        for (int i = 0; i < 4; i++)
            C[ptx_c_row(l, i)][ptx_c_col(l, i)] = d[l][i];
    }
    for (int l = 0; l < 32; l++)
        for (int i = 0; i < 4; i++) {
            const int row = ptx_c_row(l, i), col = ptx_c_col(l, i);
            double s = C[row][col];
            for (int k = 0; k < 16; k++)
                s += A[row][k] * B[k][col];
            d[l][i] = (float)s;
        }
}

/* ---- faults: what the comparisons must catch ----------------------------------------------- */

enum { FAULT_NONE, FAULT_B_HALVES, FAULT_PACK, FAULT_MASK, FAULT_QUAD, FAULT_COUNT };
static const char *fault_names[] = {"none", "a B operand's k halves swapped",
                                    "P's A operand packed in the wrong order",
                                    "the causal mask one key late", "a quad reduced over 2 lanes"};
static int fault = FAULT_NONE;

/* ---- a warp's pieces, emulated --------------------------------------------------------------- */

/* The kernel's load_block: the header's lane addresses, the ISA's ldmatrix. */
static void emu_load_block(uint32_t r[32][4], const uint16_t *tile, int row, int col, int kind,
                           int hd) {
    int rows[32], cols[32];
    for (int l = 0; l < 32; l++) {
        rows[l] = row + lwc_ldsm_row(l, kind);
        cols[l] = col + lwc_ldsm_col(l, kind);
        if (fault == FAULT_B_HALVES && kind == LWC_LDSM_B) cols[l] ^= 8;
    }
    ptx_ldmatrix_x4(r, tile, hd, rows, cols, kind == LWC_LDSM_BT);
}

/* The kernel's mma(d[j], a, b[2 pair], b[2 pair + 1]) on every lane: d is a lane-major array of
 * C tiles, tile j. */
static void emu_mma(float (*d)[4], int tiles, int j, uint32_t (*a)[4], int a_stride,
                    uint32_t b[32][4], int pair) {
    float *dl[32];
    uint32_t *al[32];
    for (int l = 0; l < 32; l++) {
        dl[l] = d[l * tiles + j];
        al[l] = a[l * a_stride];
    }
    ptx_mma(dl, al, b, pair);
}

/* The kernel's quad_max and quad_sum: xor 1, then xor 2, a lane's own value first. */
static void emu_quad_max(float v[32][2]) {
    for (int step = 1; step <= (fault == FAULT_QUAD ? 1 : 2); step <<= 1) {
        float w[32][2];
        for (int l = 0; l < 32; l++)
            for (int r = 0; r < 2; r++)
                w[l][r] = fmaxf(v[l][r], v[l ^ step][r]);
        memcpy(v, w, sizeof w);
    }
}
static void emu_quad_sum(float v[32][2]) {
    for (int step = 1; step <= 2; step <<= 1) {
        float w[32][2];
        for (int l = 0; l < 32; l++)
            for (int r = 0; r < 2; r++)
                w[l][r] = v[l][r] + v[l ^ step][r];
        memcpy(v, w, sizeof w);
    }
}

/* The kernel's stage: chunks of 4 floats of rows [r0, r0 + rows), zeros past t, as bf16. */
static void emu_stage(uint16_t *tile, const float *src, int64_t stride, int r0, int rows,
                      int64_t t, int hd) {
    for (int e = 0; e < rows * hd / 4; e++) {
        int row, col;
        lwc_fa_chunk(e, hd, &row, &col);
        float v[4] = {0, 0, 0, 0};
        if (r0 + row < t)
            for (int i = 0; i < 4; i++)
                v[i] = src[(int64_t)(r0 + row) * stride + col + i];
        const uint32_t w0 = lwc_mma_pack(v[0], v[1]), w1 = lwc_mma_pack(v[2], v[3]);
        uint16_t *p = tile + lwc_fa_at(row, col, hd);
        p[0] = half_of(w0, 0), p[1] = half_of(w0, 1), p[2] = half_of(w1, 0), p[3] = half_of(w1, 1);
    }
}

/* The kernel's pack of P (or dS) into A operands, with the packing fault. */
static void emu_pack(float (*s)[4], int kk, uint32_t a[4]) {
    lwc_fa_pack_a(s, kk, a);
    if (fault == FAULT_PACK) {
        const uint32_t x = a[1];
        a[1] = a[2], a[2] = x;
    }
}

static const float LOG2E = 1.44269504088896341f;

enum { MAX_ND = 16, MAX_NT = 8, MAX_KD = 8 }; /* hd 128: 16 C tiles of output, 8 k steps */

/* The kernel's score_pair on every lane: s = X Y^T and dp = W Z^T (lane-major, MAX_NT tiles a
 * lane), X and W warp w's rows of two tiles, Y and Z the step's nt columns of two tiles. */
static void emu_score_pair(float (*s)[4], float (*dp)[4], const uint16_t *x, const uint16_t *w,
                           const uint16_t *y, const uint16_t *z, int warp, int nt, int hd) {
    for (int kk = 0; kk < hd / 16; kk++) {
        uint32_t xa[32][4], wa[32][4], b[32][4];
        emu_load_block(xa, x, LWC_FA_WARP_ROWS * warp, 16 * kk, LWC_LDSM_A, hd);
        emu_load_block(wa, w, LWC_FA_WARP_ROWS * warp, 16 * kk, LWC_LDSM_A, hd);
        for (int jj = 0; jj < nt / 2; jj++) {
            emu_load_block(b, y, 16 * jj, 16 * kk, LWC_LDSM_B, hd);
            emu_mma(s, MAX_NT, 2 * jj, xa, 1, b, 0);
            emu_mma(s, MAX_NT, 2 * jj + 1, xa, 1, b, 1);
            emu_load_block(b, z, 16 * jj, 16 * kk, LWC_LDSM_B, hd);
            emu_mma(dp, MAX_NT, 2 * jj, wa, 1, b, 0);
            emu_mma(dp, MAX_NT, 2 * jj + 1, wa, 1, b, 1);
        }
    }
}

/* The kernel's accumulate on every lane: acc (lane-major, MAX_ND tiles a lane) += P T, P the
 * lanes' nt C tiles of p (lane-major, MAX_NT a lane), T the step's tile read transposed. */
static void emu_accumulate(float (*acc)[4], float (*p)[MAX_NT][4], const uint16_t *tile, int nt,
                           int hd) {
    for (int kk = 0; kk < nt / 2; kk++) {
        uint32_t pa[32][4], b[32][4];
        for (int ln = 0; ln < 32; ln++)
            emu_pack(p[ln], kk, pa[ln]);
        for (int jj = 0; jj < hd / 16; jj++) {
            emu_load_block(b, tile, 16 * kk, 16 * jj, LWC_LDSM_BT, hd);
            emu_mma(acc, MAX_ND, 2 * jj, pa, 1, b, 0);
            emu_mma(acc, MAX_ND, 2 * jj + 1, pa, 1, b, 1);
        }
    }
}

/* One shared memory of `bytes`, as the kernel's (tiles placed at the kernel's offsets). */
static uint16_t *smem_of(int hd, int kernel) {
    return calloc(lwc_fa_smem_bytes(hd, kernel), 1);
}

/* ---- the forward, as flash_mma_forward_kernel ---------------------------------------------- */

static void emulate_forward(float *out, float *lse, float *rowmax, const float *qkv, int64_t b,
                            int64_t t, int64_t c, int64_t nh, int64_t heads) {
    const int hd = (int)(c / nh), LD = hd + LWC_FA_PAD, NT = LWC_FA_STEP / 8, ND = hd / 8;
    const int KD = hd / 16, tiles = lwc_fa_tiles(t, LWC_FA_BLOCK);
    const float sc = 1.0f / sqrtf((float)hd) * LOG2E;
    uint16_t *smem = smem_of(hd, LWC_FA_FORWARD);
    uint16_t *qs = smem, *ks = qs + LWC_FA_BLOCK * LD, *vs = ks + LWC_FA_STEP * LD;
    static uint32_t qa[LWC_FA_WARPS][32][MAX_KD][4];
    static float o[LWC_FA_WARPS][32][MAX_ND][4], m[LWC_FA_WARPS][32][2], l[LWC_FA_WARPS][32][2];
    for (int64_t block = 0; block < b * nh * tiles; block++) {
        int bh, tile;
        lwc_fa_block(block, tiles, LWC_FA_FORWARD, &bh, &tile);
        if (bh >= heads) continue;
        const int64_t bi = bh / nh, h = bh % nh, c3 = 3 * c;
        const int q0 = tile * LWC_FA_BLOCK;
        const float *q = qkv + bi * t * c3 + h * hd, *k = q + c, *v = q + 2 * c;
        /* 1. */
        emu_stage(qs, q, c3, q0, LWC_FA_BLOCK, t, hd);
        for (int w = 0; w < LWC_FA_WARPS; w++) {
            for (int kk = 0; kk < KD; kk++) {
                uint32_t r[32][4];
                emu_load_block(r, qs, LWC_FA_WARP_ROWS * w, 16 * kk, LWC_LDSM_A, hd);
                for (int ln = 0; ln < 32; ln++)
                    memcpy(qa[w][ln][kk], r[ln], sizeof r[ln]);
            }
            memset(o[w], 0, sizeof o[w]);
            for (int ln = 0; ln < 32; ln++)
                m[w][ln][0] = m[w][ln][1] = -INFINITY, l[w][ln][0] = l[w][ln][1] = 0.0f;
        }
        const int last = lwc_fa_last_key_step(q0, t);
        for (int step = 0; step <= last; step++) {
            const int k0 = step * LWC_FA_STEP;
            /* 2. */
            emu_stage(ks, k, c3, k0, LWC_FA_STEP, t, hd);
            emu_stage(vs, v, c3, k0, LWC_FA_STEP, t, hd);
            for (int w = 0; w < LWC_FA_WARPS; w++) {
                const int row0 = q0 + LWC_FA_WARP_ROWS * w;
                /* 3. */
                float s[32][MAX_NT][4];
                memset(s, 0, sizeof s);
                for (int kk = 0; kk < KD; kk++)
                    for (int jj = 0; jj < NT / 2; jj++) {
                        uint32_t bq[32][4];
                        emu_load_block(bq, ks, 16 * jj, 16 * kk, LWC_LDSM_B, hd);
                        emu_mma(&s[0][0], MAX_NT, 2 * jj, &qa[w][0][kk], MAX_KD, bq, 0);
                        emu_mma(&s[0][0], MAX_NT, 2 * jj + 1, &qa[w][0][kk], MAX_KD, bq, 1);
                    }
                /* 4. */
                if (lwc_fa_forward_masked(q0, k0, LWC_FA_STEP))
                    for (int ln = 0; ln < 32; ln++)
                        lwc_fa_mask_causal(s[ln], NT, ln, row0, k0 + (fault == FAULT_MASK));
                float mx[32][2], alpha[2];
                for (int ln = 0; ln < 32; ln++)
                    lwc_fa_row_max(s[ln], NT, mx[ln]);
                emu_quad_max(mx);
                for (int ln = 0; ln < 32; ln++) {
                    lwc_fa_softmax(s[ln], NT, sc, mx[ln], m[w][ln], l[w][ln], alpha);
                    lwc_fa_rescale(o[w][ln], ND, alpha);
                }
                /* 5. */
                emu_accumulate(&o[w][0][0], s, vs, NT, hd);
            }
        }
        /* 6. */
        for (int w = 0; w < LWC_FA_WARPS; w++) {
            const int row0 = q0 + LWC_FA_WARP_ROWS * w;
            emu_quad_sum(l[w]);
            for (int ln = 0; ln < 32; ln++) {
                lwc_fa_normalise(o[w][ln], ND, l[w][ln]);
                for (int r = 0; r < 2; r++) {
                    const int row = row0 + lwc_mma_c_row(ln, 2 * r);
                    if (row >= t) continue;
                    float *dst = out + (bi * t + row) * c + h * hd + lwc_mma_c_col(ln, 0);
                    for (int j = 0; j < ND; j++)
                        dst[8 * j] = o[w][ln][j][2 * r], dst[8 * j + 1] = o[w][ln][j][2 * r + 1];
                    if (lwc_mma_quad(ln) == 0)
                        lse[(int64_t)bh * t + row] = lwc_fa_lse(m[w][ln][r], l[w][ln][r]);
                    if (lwc_mma_quad(ln) == 0 && rowmax != NULL)
                        rowmax[(int64_t)bh * t + row] = lwc_fa_max_score(m[w][ln][r], l[w][ln][r]);
                }
            }
        }
    }
    free(smem);
}

/* ---- the backward: attention.cu's rowdot, then flash_mma_dkdv_kernel and flash_mma_dq_kernel */

static void emulate_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                             const float *lse, int64_t b, int64_t t, int64_t c, int64_t nh,
                             int64_t heads) {
    const int hd = (int)(c / nh), LD = hd + LWC_FA_PAD, ND = hd / 8;
    const int tiles = lwc_fa_tiles(t, LWC_FA_BLOCK);
    const float scale = 1.0f / sqrtf((float)hd), sc = scale * LOG2E;
    const int64_t c3 = 3 * c;
    /* D = rowsum(dout * out), in double rounded once (rowdot_kernel) */
    float *dd = calloc((size_t)(b * nh * t), sizeof(float));
    for (int64_t bh = 0; bh < b * nh; bh++)
        for (int64_t i = 0; i < t; i++) {
            const int64_t off = ((bh / nh) * t + i) * c + (bh % nh) * hd;
            double s = 0;
            for (int d = 0; d < hd; d++)
                s += (double)dout[off + d] * out[off + d];
            dd[bh * t + i] = (float)s;
        }
    static float acc_a[LWC_FA_WARPS][32][MAX_ND][4], acc_b[LWC_FA_WARPS][32][MAX_ND][4];

    /* dk, dv */
    {
        const int M = LWC_FA_KV_STEP(hd), NT = M / 8;
        uint16_t *smem = smem_of(hd, LWC_FA_DKDV);
        uint16_t *ks = smem, *vs = ks + LWC_FA_BLOCK * LD, *qs = vs + LWC_FA_BLOCK * LD;
        uint16_t *os = qs + M * LD;
        float *ls = (float *)(os + M * LD), *ds = ls + M;
        for (int64_t block = 0; block < b * nh * tiles; block++) {
            int bh, tile;
            lwc_fa_block(block, tiles, LWC_FA_DKDV, &bh, &tile);
            if (bh >= heads) continue;
            const int64_t bi = bh / nh, h = bh % nh, head = bi * t * c3 + h * hd;
            const int k0 = tile * LWC_FA_BLOCK;
            const float *q = qkv + head, *k = q + c, *v = q + 2 * c;
            const float *dout_h = dout + bi * t * c + h * hd;
            /* 1. */
            emu_stage(ks, k, c3, k0, LWC_FA_BLOCK, t, hd);
            emu_stage(vs, v, c3, k0, LWC_FA_BLOCK, t, hd);
            memset(acc_a, 0, sizeof acc_a), memset(acc_b, 0, sizeof acc_b); /* dk, dv */
            const int steps = lwc_fa_tiles(t, M);
            for (int step = lwc_fa_first_query_step(k0, M); step < steps; step++) {
                const int q0 = step * M;
                /* 2. */
                emu_stage(qs, q, c3, q0, M, t, hd);
                emu_stage(os, dout_h, c, q0, M, t, hd);
                for (int r = 0; r < M; r++) {
                    ls[r] = q0 + r < t ? lse[bh * t + q0 + r] * LOG2E : 0.0f;
                    ds[r] = q0 + r < t ? dd[bh * t + q0 + r] : 0.0f;
                }
                for (int w = 0; w < LWC_FA_WARPS; w++) {
                    const int row0 = k0 + LWC_FA_WARP_ROWS * w;
                    /* 3. */
                    float s[32][MAX_NT][4], dp[32][MAX_NT][4];
                    memset(s, 0, sizeof s), memset(dp, 0, sizeof dp);
                    emu_score_pair(&s[0][0], &dp[0][0], ks, vs, qs, os, w, NT, hd);
                    /* 4. */
                    const bool masked = lwc_fa_grad_masked(q0, M, k0, LWC_FA_BLOCK, t);
                    for (int ln = 0; ln < 32; ln++)
                        lwc_fa_grad_kv(s[ln], dp[ln], NT, ln, ls, ds, row0, q0, t, masked, sc);
                    /* 5. */
                    emu_accumulate(&acc_b[w][0][0], s, os, NT, hd); /* dv */
                    emu_accumulate(&acc_a[w][0][0], dp, qs, NT, hd); /* dk */
                }
            }
            /* 6. */
            for (int w = 0; w < LWC_FA_WARPS; w++)
                for (int ln = 0; ln < 32; ln++)
                    for (int r = 0; r < 2; r++) {
                        const int key = k0 + LWC_FA_WARP_ROWS * w + lwc_mma_c_row(ln, 2 * r);
                        if (key >= t) continue;
                        float *g = dqkv + head + key * c3 + lwc_mma_c_col(ln, 0);
                        for (int j = 0; j < ND; j++)
                            for (int e = 0; e < 2; e++) {
                                g[c + 8 * j + e] += scale * acc_a[w][ln][j][2 * r + e];
                                g[2 * c + 8 * j + e] += acc_b[w][ln][j][2 * r + e];
                            }
                    }
        }
        free(smem);
    }

    /* dq */
    {
        const int NT = LWC_FA_STEP / 8;
        uint16_t *smem = smem_of(hd, LWC_FA_DQ);
        uint16_t *qs = smem, *os = qs + LWC_FA_BLOCK * LD, *ks = os + LWC_FA_BLOCK * LD;
        uint16_t *vs = ks + LWC_FA_STEP * LD;
        for (int64_t block = 0; block < b * nh * tiles; block++) {
            int bh, tile;
            lwc_fa_block(block, tiles, LWC_FA_DQ, &bh, &tile);
            if (bh >= heads) continue;
            const int64_t bi = bh / nh, h = bh % nh, head = bi * t * c3 + h * hd;
            const int q0 = tile * LWC_FA_BLOCK;
            const float *q = qkv + head, *k = q + c, *v = q + 2 * c;
            /* 1. */
            emu_stage(qs, q, c3, q0, LWC_FA_BLOCK, t, hd);
            emu_stage(os, dout + bi * t * c + h * hd, c, q0, LWC_FA_BLOCK, t, hd);
            float lr[LWC_FA_WARPS][32][2], dr[LWC_FA_WARPS][32][2];
            for (int w = 0; w < LWC_FA_WARPS; w++)
                for (int ln = 0; ln < 32; ln++)
                    for (int r = 0; r < 2; r++) {
                        const int row = q0 + LWC_FA_WARP_ROWS * w + lwc_mma_c_row(ln, 2 * r);
                        lr[w][ln][r] = row < t ? lse[bh * t + row] * LOG2E : 0.0f;
                        dr[w][ln][r] = row < t ? dd[bh * t + row] : 0.0f;
                    }
            memset(acc_a, 0, sizeof acc_a); /* dq */
            const int last = lwc_fa_last_key_step(q0, t);
            for (int step = 0; step <= last; step++) {
                const int k0 = step * LWC_FA_STEP;
                /* 2. */
                emu_stage(ks, k, c3, k0, LWC_FA_STEP, t, hd);
                emu_stage(vs, v, c3, k0, LWC_FA_STEP, t, hd);
                for (int w = 0; w < LWC_FA_WARPS; w++) {
                    const int row0 = q0 + LWC_FA_WARP_ROWS * w;
                    /* 3. */
                    float s[32][MAX_NT][4], dp[32][MAX_NT][4];
                    memset(s, 0, sizeof s), memset(dp, 0, sizeof dp);
                    emu_score_pair(&s[0][0], &dp[0][0], qs, os, ks, vs, w, NT, hd);
                    /* 4. */
                    const bool masked = lwc_fa_grad_masked(q0, LWC_FA_BLOCK, k0, LWC_FA_STEP, t);
                    for (int ln = 0; ln < 32; ln++)
                        lwc_fa_grad_q(s[ln], dp[ln], NT, ln, lr[w][ln], dr[w][ln], row0, k0, t,
                                      masked, sc);
                    /* 5. */
                    emu_accumulate(&acc_a[w][0][0], s, ks, NT, hd); /* dq */
                }
            }
            /* 6. */
            for (int w = 0; w < LWC_FA_WARPS; w++)
                for (int ln = 0; ln < 32; ln++)
                    for (int r = 0; r < 2; r++) {
                        const int row = q0 + LWC_FA_WARP_ROWS * w + lwc_mma_c_row(ln, 2 * r);
                        if (row >= t) continue;
                        float *g = dqkv + head + row * c3 + lwc_mma_c_col(ln, 0);
                        for (int j = 0; j < ND; j++)
                            for (int e = 0; e < 2; e++)
                                g[8 * j + e] += scale * acc_a[w][ln][j][2 * r + e];
                    }
        }
        free(smem);
    }
    free(dd);
}

/* ---- double-precision attention, and each output's bound ------------------------------------- */

/* out, lse, and (dout given) dqkv = d0 + the gradient, of the heads bh < heads; the bounds
 * (tol_* NULL: not wanted) of the file's header for inputs that are bf16 already. */
typedef struct {
    double *out, *lse, *dqkv;
    double *tol_out, *tol_dqkv;
    double *rowmax; /* each row's largest scaled score (optional) */
} reference;

static const double U = 1.0 / 256; /* bf16's unit roundoff, 2^-8 */

static double bound(double s1, double s2, double mag) {
    return fmin(U * s1, 8 * U * sqrt(s2)) + mag / 16384;
}

static void reference_attention(reference *ref, const float *qkv, const float *dout,
                                const float *d0, int64_t b, int64_t t, int64_t c, int64_t nh,
                                int64_t heads) {
    const int64_t hd = c / nh, c3 = 3 * c;
    const double scale = 1.0 / sqrt((double)hd);
    const size_t tt = sizeof(double) * (size_t)(t * t);
    double *p = malloc(tt), *ds = malloc(tt), *dpm = malloc(tt);
    double *dd = malloc(sizeof(double) * (size_t)t);
    if (ref->dqkv != NULL)
        for (int64_t i = 0; i < b * t * c3; i++)
            ref->dqkv[i] = d0 != NULL ? d0[i] : 0.0;
    for (int64_t bh = 0; bh < heads; bh++) {
        const int64_t bi = bh / nh, h = bh % nh, head = bi * t * c3 + h * hd;
        const float *q = qkv + head, *k = q + c, *v = q + 2 * c;
        for (int64_t i = 0; i < t; i++) {
            double mx = -INFINITY;
            for (int64_t j = 0; j <= i; j++) {
                double s = 0;
                for (int64_t d = 0; d < hd; d++)
                    s += (double)q[i * c3 + d] * k[j * c3 + d];
                p[i * t + j] = s * scale;
                mx = fmax(mx, s * scale);
            }
            double sum = 0;
            for (int64_t j = 0; j <= i; j++)
                sum += exp(p[i * t + j] - mx);
            const double lse = mx + log(sum);
            ref->lse[bh * t + i] = lse;
            if (ref->rowmax != NULL) ref->rowmax[bh * t + i] = mx;
            for (int64_t j = 0; j <= i; j++)
                p[i * t + j] = exp(p[i * t + j] - lse);
            for (int64_t d = 0; d < hd; d++) {
                double o = 0, s1 = 0, s2 = 0;
                for (int64_t j = 0; j <= i; j++) {
                    const double x = p[i * t + j] * v[j * c3 + d];
                    o += x, s1 += fabs(x), s2 += x * x;
                }
                ref->out[(bi * t + i) * c + h * hd + d] = o;
                if (ref->tol_out != NULL)
                    ref->tol_out[(bi * t + i) * c + h * hd + d] = bound(s1, s2, s1);
            }
        }
        if (ref->dqkv == NULL) continue;
        const float *g = dout + bi * t * c + h * hd;
        const double *o = ref->out + bi * t * c + h * hd;
        double *gq = ref->dqkv + head, *gk = gq + c, *gv = gq + 2 * c;
        double *tq = ref->tol_dqkv != NULL ? ref->tol_dqkv + head : NULL;
        for (int64_t i = 0; i < t; i++) {
            dd[i] = 0;
            for (int64_t d = 0; d < hd; d++)
                dd[i] += (double)g[i * c + d] * o[i * c + d];
            for (int64_t j = 0; j <= i; j++) {
                double dp = 0;
                for (int64_t d = 0; d < hd; d++)
                    dp += (double)g[i * c + d] * v[j * c3 + d];
                dpm[i * t + j] = fabs(dp) + fabs(dd[i]);
                ds[i * t + j] = p[i * t + j] * (dp - dd[i]);
            }
        }
        for (int64_t d = 0; d < hd; d++) {
            for (int64_t i = 0; i < t; i++) { /* dq_i = scale sum_j dS_ij k_j */
                double x = 0, s1 = 0, s2 = 0, mag = 0;
                for (int64_t j = 0; j <= i; j++) {
                    const double y = scale * ds[i * t + j] * k[j * c3 + d];
                    x += y, s1 += fabs(y), s2 += y * y;
                    mag += scale * p[i * t + j] * dpm[i * t + j] * fabs(k[j * c3 + d]);
                }
                gq[i * c3 + d] += x;
                if (tq != NULL) tq[i * c3 + d] = bound(s1, s2, mag);
            }
            /* dk_j = scale sum_i dS_ij q_i; dv_j = sum_i p_ij dout_i */
            for (int64_t j = 0; j < t; j++) {
                double xk = 0, k1 = 0, k2 = 0, kmag = 0, xv = 0, v1 = 0, v2 = 0;
                for (int64_t i = j; i < t; i++) {
                    const double y = scale * ds[i * t + j] * q[i * c3 + d];
                    xk += y, k1 += fabs(y), k2 += y * y;
                    kmag += scale * p[i * t + j] * dpm[i * t + j] * fabs(q[i * c3 + d]);
                    const double z = p[i * t + j] * g[i * c + d];
                    xv += z, v1 += fabs(z), v2 += z * z;
                }
                gk[j * c3 + d] += xk, gv[j * c3 + d] += xv;
                if (tq != NULL) {
                    tq[j * c3 + c + d] = bound(k1, k2, kmag);
                    tq[j * c3 + 2 * c + d] = bound(v1, v2, v1);
                }
            }
        }
    }
    free(p), free(ds), free(dpm), free(dd);
}

/* ---- inputs -------------------------------------------------------------------------------- */

static uint64_t rng = 20240601;
static float uniform(void) { /* [-1, 1) */
    rng = rng * 6364136223846793005u + 1442695040888963407u;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static float *random_array(int64_t n, float scale, bool bf16) {
    float *x = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        x[i] = scale * uniform();
        if (bf16) x[i] = lwc_mma_float(lwc_mma_bf16(x[i]));
    }
    return x;
}

/* ---- the layouts ----------------------------------------------------------------------------- */

static void test_fragments(void) {
    int a[16][16] = {{0}}, bm[16][8] = {{0}}, cm[16][8] = {{0}};
    bool same = true, reuse = true;
    for (int l = 0; l < 32; l++) {
        for (int i = 0; i < 8; i++) {
            a[lwc_mma_a_row(l, i)][lwc_mma_a_col(l, i)]++;
            same = same && lwc_mma_a_row(l, i) == ptx_a_row(l, i) &&
                   lwc_mma_a_col(l, i) == ptx_a_col(l, i);
            /* a_i is c_(i & 3) of C tile i >> 2 (columns + 8) */
            reuse = reuse && lwc_mma_a_row(l, i) == lwc_mma_c_row(l, i & 3) &&
                    lwc_mma_a_col(l, i) == 8 * (i >> 2) + lwc_mma_c_col(l, i & 3);
        }
        for (int i = 0; i < 4; i++) {
            bm[lwc_mma_b_row(l, i)][lwc_mma_b_col(l, i)]++;
            cm[lwc_mma_c_row(l, i)][lwc_mma_c_col(l, i)]++;
            same = same && lwc_mma_b_row(l, i) == ptx_b_row(l, i) &&
                   lwc_mma_b_col(l, i) == ptx_b_col(l, i) &&
                   lwc_mma_c_row(l, i) == ptx_c_row(l, i) && lwc_mma_c_col(l, i) == ptx_c_col(l, i);
        }
        same = same && lwc_mma_group(l) == l / 4 && lwc_mma_quad(l) == l % 4;
    }
    bool once = true;
    for (int r = 0; r < 16; r++)
        for (int col = 0; col < 16; col++)
            once = once && a[r][col] == 1 && (col >= 8 || (bm[r][col] == 1 && cm[r][col] == 1));
    CHECK(same);
    CHECK(once);
    CHECK(reuse);
    /* the ISA's figures: lane 0 holds A (0, 0), (0, 1), (8, 0), (8, 1), (0, 8), (0, 9), (8, 8),
     * (8, 9); lane 6 (group 1, place 2) B (4, 1), (5, 1), (12, 1), (13, 1) and C (1, 4), (1, 5),
     * (9, 4), (9, 5) */
    const int a0[8][2] = {{0, 0}, {0, 1}, {8, 0}, {8, 1}, {0, 8}, {0, 9}, {8, 8}, {8, 9}};
    const int b6[4][2] = {{4, 1}, {5, 1}, {12, 1}, {13, 1}};
    const int c6[4][2] = {{1, 4}, {1, 5}, {9, 4}, {9, 5}};
    bool figures = true;
    for (int i = 0; i < 8; i++)
        figures = figures && lwc_mma_a_row(0, i) == a0[i][0] && lwc_mma_a_col(0, i) == a0[i][1];
    for (int i = 0; i < 4; i++)
        figures = figures && lwc_mma_b_row(6, i) == b6[i][0] && lwc_mma_b_col(6, i) == b6[i][1] &&
                  lwc_mma_c_row(6, i) == c6[i][0] && lwc_mma_c_col(6, i) == c6[i][1];
    CHECK(figures);
    printf("test_mma_layout: A, B and C fragments: the ISA's layouts, each element held once, two "
           "C tiles an A operand\n");
}

/* Each kind of ldmatrix read at the header's addresses delivers its operand's layout; its rows
 * are 16-byte aligned and an 8-row phase touches 32 different banks; the staging's 8-byte stores
 * of a half-warp, 16 different 8-byte bank pairs. */
static void test_ldmatrix(void) {
    for (int hd = 64; hd <= 128; hd += 64) {
        const int rows = 64, n = rows * (hd + LWC_FA_PAD);
        uint16_t *tile = malloc(sizeof(uint16_t) * (size_t)n);
        for (int i = 0; i < n; i++)
            tile[i] = (uint16_t)i; /* each element's own index */
        bool right = true, aligned = true, banks = true;
        for (int kind = LWC_LDSM_A; kind <= LWC_LDSM_BT; kind++)
            for (int row = 0; row + 16 <= rows; row += 16)
                for (int col = 0; col + 16 <= hd; col += 16) {
                    uint32_t r[32][4];
                    int lr[32], lc[32];
                    for (int l = 0; l < 32; l++) {
                        lr[l] = row + lwc_ldsm_row(l, kind), lc[l] = col + lwc_ldsm_col(l, kind);
                        aligned = aligned && (2 * lwc_fa_at(lr[l], lc[l], hd)) % 16 == 0;
                    }
                    for (int ph = 0; ph < 4; ph++) {
                        unsigned used = 0;
                        for (int l = 8 * ph; l < 8 * ph + 8; l++)
                            for (int w = 0; w < 4; w++) {
                                const int word = lwc_fa_at(lr[l], lc[l], hd) / 2 + w;
                                const unsigned bank = (unsigned)word % 32;
                                banks = banks && !(used >> bank & 1u);
                                used |= 1u << bank;
                            }
                    }
                    ptx_ldmatrix_x4(r, tile, hd, lr, lc, kind == LWC_LDSM_BT);
                    for (int l = 0; l < 32; l++)
                        for (int reg = 0; reg < 4; reg++)
                            for (int hf = 0; hf < 2; hf++) {
                                int er, ec;
                                if (kind == LWC_LDSM_A) {
                                    er = row + lwc_mma_a_row(l, 2 * reg + hf);
                                    ec = col + lwc_mma_a_col(l, 2 * reg + hf);
                                } else {
                                    /* registers 0, 1: B of columns n 0..7; 2, 3: of n 8..15 */
                                    const int i = 2 * (reg & 1) + hf;
                                    const int kb = lwc_mma_b_row(l, i);
                                    const int nb = 8 * (reg >> 1) + lwc_mma_b_col(l, i);
                                    er = row + (kind == LWC_LDSM_B ? nb : kb);
                                    ec = col + (kind == LWC_LDSM_B ? kb : nb);
                                }
                                right = right && half_of(r[l][reg], hf) == lwc_fa_at(er, ec, hd);
                            }
                }
        /* staging: warp w's lane l stores chunk e = 32 w + l + 128 i as 8 bytes */
        for (int w = 0; w < LWC_FA_WARPS; w++)
            for (int hw = 0; hw < 2; hw++) {
                unsigned used = 0;
                for (int l = 16 * hw; l < 16 * hw + 16; l++) {
                    int row, col;
                    lwc_fa_chunk(32 * w + l, hd, &row, &col);
                    const unsigned bank = (unsigned)(lwc_fa_at(row, col, hd) / 2) % 32;
                    banks = banks && (bank % 2 == 0) && !(used >> bank & 3u);
                    used |= 3u << bank;
                }
            }
        CHECK(right);
        CHECK(aligned);
        CHECK(banks);
        printf("test_mma_layout: head dim %d: ldmatrix A, B and B^T reads deliver the operands, "
               "16-byte rows, no bank conflicts\n", hd);
        free(tile);
    }
}

/* The plan against brute force over every t up to 300: blocks, steps, masks, shared memory. */
static void test_plan(void) {
    bool blocks = true, steps = true, masks = true, smem = true;
    for (int64_t t = 1; t <= 300; t++) {
        const int tiles = lwc_fa_tiles(t, LWC_FA_BLOCK);
        for (int kernel = LWC_FA_FORWARD; kernel <= LWC_FA_DQ; kernel++) {
            int seen[3][8] = {{0}};
            for (int64_t block = 0; block < 3 * tiles; block++) {
                int bh, tile;
                lwc_fa_block(block, tiles, kernel, &bh, &tile);
                if (bh < 3 && tile >= 0 && tile < tiles) seen[bh][tile]++;
                /* the heaviest first within a head */
                if (block % tiles == 0)
                    blocks = blocks && tile == (kernel == LWC_FA_DKDV ? 0 : tiles - 1);
            }
            for (int bh = 0; bh < 3; bh++)
                for (int tile = 0; tile < tiles; tile++)
                    blocks = blocks && seen[bh][tile] == 1;
        }
        for (int tile = 0; tile < tiles; tile++) {
            const int q0 = tile * LWC_FA_BLOCK, last = lwc_fa_last_key_step(q0, t);
            for (int step = 0; step * LWC_FA_STEP < t; step++) {
                const int k0 = step * LWC_FA_STEP;
                bool kept = false, fwd_mask = false, grad_mask = false;
                for (int qi = q0; qi < q0 + LWC_FA_BLOCK; qi++)
                    for (int kj = k0; kj < k0 + LWC_FA_STEP; kj++) {
                        kept = kept || lwc_fa_kept(qi, kj, t);
                        fwd_mask = fwd_mask || kj > qi;
                        grad_mask = grad_mask || !lwc_fa_kept(qi, kj, t);
                    }
                steps = steps && kept == (step <= last);
                if (step <= last)
                    masks = masks && fwd_mask == lwc_fa_forward_masked(q0, k0, LWC_FA_STEP) &&
                            grad_mask == lwc_fa_grad_masked(q0, LWC_FA_BLOCK, k0, LWC_FA_STEP, t);
            }
        }
        for (int hd = 64; hd <= 128; hd += 64) {
            const int M = LWC_FA_KV_STEP(hd);
            for (int tile = 0; tile < tiles; tile++) {
                const int k0 = tile * LWC_FA_BLOCK, first = lwc_fa_first_query_step(k0, M);
                for (int step = 0; step < lwc_fa_tiles(t, M); step++) {
                    const int q0 = step * M;
                    bool kept = false, mask = false;
                    for (int qi = q0; qi < q0 + M; qi++)
                        for (int kj = k0; kj < k0 + LWC_FA_BLOCK; kj++) {
                            kept = kept || lwc_fa_kept(qi, kj, t);
                            mask = mask || !lwc_fa_kept(qi, kj, t);
                        }
                    steps = steps && kept == (step >= first);
                    if (step >= first)
                        masks = masks && mask == lwc_fa_grad_masked(q0, M, k0, LWC_FA_BLOCK, t);
                }
            }
        }
    }
    for (int hd = 64; hd <= 128; hd += 64) {
        const size_t row = 2 * (size_t)(hd + LWC_FA_PAD), M = (size_t)LWC_FA_KV_STEP(hd);
        smem = smem && lwc_fa_smem_bytes(hd, LWC_FA_FORWARD) >= (64 + 64 + 64) * row &&
               lwc_fa_smem_bytes(hd, LWC_FA_DKDV) >= (64 + 64 + 2 * M) * row + 8 * M &&
               lwc_fa_smem_bytes(hd, LWC_FA_DQ) >= 4 * 64 * row &&
               lwc_fa_smem_bytes(hd, LWC_FA_DKDV) <= 227 * 1024; /* an H100's opt-in limit */
    }
    CHECK(blocks);
    CHECK(steps);
    CHECK(masks);
    CHECK(smem);
    printf("test_mma_layout: t = 1 .. 300: every block once, heaviest first; the steps run are "
           "those with a kept pair; masks where a pair is masked; shared memory holds the tiles\n");
}

/* ---- the emulation against double attention ------------------------------------------------- */

typedef struct {
    int64_t b, t, nh, hd;
} shape;

/* worst of |got - ref| / tol, and of |got - ref| / max |ref| (the harness's measure) */
static double worst_ratio(const float *got, const double *ref, const double *tol, int64_t n,
                          double *rel) {
    double w = 0, big = 0, diff = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - ref[i]);
        w = fmax(w, isnan(d) ? INFINITY : d / tol[i]);
        big = fmax(big, fabs(ref[i]));
        diff = fmax(diff, isnan(d) ? INFINITY : d);
    }
    if (rel != NULL) *rel = diff / (big > 0 ? big : 1);
    return w;
}

/* The emulated kernels on bf16 inputs of one shape; false when an output is past its bound
 * (printed unless quiet). */
static bool emulation_within(shape sh, bool quiet) {
    const int64_t b = sh.b, t = sh.t, nh = sh.nh, c = nh * sh.hd, n = b * t * c, nl = b * nh * t;
    float *qkv = random_array(3 * n, 2.0f, true), *dout = random_array(n, 1.0f, true);
    float *out = calloc((size_t)n, sizeof(float)), *lse = calloc((size_t)nl, sizeof(float));
    float *dqkv = calloc((size_t)(3 * n), sizeof(float)), *top = calloc((size_t)nl, 4);
    reference ref = {.out = malloc(sizeof(double) * (size_t)n),
                     .lse = malloc(sizeof(double) * (size_t)nl),
                     .dqkv = malloc(sizeof(double) * (size_t)(3 * n)),
                     .tol_out = malloc(sizeof(double) * (size_t)n),
                     .tol_dqkv = malloc(sizeof(double) * (size_t)(3 * n)),
                     .rowmax = malloc(sizeof(double) * (size_t)nl)};
    reference_attention(&ref, qkv, dout, NULL, b, t, c, nh, b * nh);
    emulate_forward(out, lse, top, qkv, b, t, c, nh, b * nh);
    /* the backward from the reference's out and lse, as the harness hands a device the CPU's */
    float *ref_out = calloc((size_t)n, sizeof(float)), *ref_lse = calloc((size_t)nl, sizeof(float));
    for (int64_t i = 0; i < n; i++)
        ref_out[i] = (float)ref.out[i];
    for (int64_t i = 0; i < nl; i++)
        ref_lse[i] = (float)ref.lse[i];
    emulate_backward(dqkv, dout, qkv, ref_out, ref_lse, b, t, c, nh, b * nh);
    double *tol_lse = malloc(sizeof(double) * (size_t)nl);
    for (int64_t i = 0; i < nl; i++)
        tol_lse[i] = (1 + fabs(ref.lse[i])) / 16384;
    double rel_out, rel_dqkv;
    const double w_out = worst_ratio(out, ref.out, ref.tol_out, n, &rel_out);
    const double w_lse = worst_ratio(lse, ref.lse, tol_lse, nl, NULL);
    /* a row's largest score: fp32 sums of exact products (the inputs are bf16), as lse */
    const double w_top = worst_ratio(top, ref.rowmax, tol_lse, nl, NULL);
    const double w_dqkv = worst_ratio(dqkv, ref.dqkv, ref.tol_dqkv, 3 * n, &rel_dqkv);
    const bool ok = w_out <= 1 && w_lse <= 1 && w_top <= 1 && w_dqkv <= 1;
    if (!quiet)
        printf("test_mma_layout: b %lld, t %lld, nh %lld, head dim %lld: worst error / bound: out "
               "%.3f, lse %.3f, largest score %.3f, dqkv %.3f (of the largest value: out %.1e, "
               "dqkv %.1e)\n",
               (long long)b, (long long)t, (long long)nh, (long long)sh.hd, w_out, w_lse, w_top,
               w_dqkv, rel_out, rel_dqkv);
    free(qkv), free(dout), free(out), free(lse), free(dqkv), free(ref_out), free(ref_lse);
    free(tol_lse), free(ref.out), free(ref.lse), free(ref.dqkv), free(ref.tol_out);
    free(ref.tol_dqkv), free(ref.rowmax), free(top);
    return ok;
}

/* A NaN in one key (head 0, channel 3): exactly the rows that see it are NaN in out, lse and
 * their largest scores. */
static void test_nan_key(void) {
    const int64_t t = 100, nh = 2, hd = 64, c = nh * hd, bad = 40;
    float *qkv = random_array(3 * t * c, 2.0f, true);
    float *out = calloc((size_t)(t * c), sizeof(float)), *lse = calloc((size_t)(nh * t), 4);
    float *top = calloc((size_t)(nh * t), 4);
    qkv[bad * 3 * c + c + 3] = NAN;
    emulate_forward(out, lse, top, qkv, 1, t, c, nh, nh);
    bool as_promised = true;
    for (int64_t i = 0; i < t; i++)
        for (int64_t h = 0; h < nh; h++) {
            const bool nan = h == 0 && i >= bad;
            as_promised = as_promised && isnan(lse[h * t + i]) == nan;
            as_promised = as_promised && isnan(top[h * t + i]) == nan;
            for (int64_t d = 0; d < hd; d++)
                as_promised = as_promised && isnan(out[i * c + h * hd + d]) == nan;
        }
    CHECK(as_promised);
    printf("test_mma_layout: a NaN key makes NaN exactly the rows that see it\n");
    free(qkv), free(out), free(lse), free(top);
}

static void test_emulation(void) {
    const shape shapes[] = {
        {1, 1, 1, 64},    /* one row */
        {1, 70, 2, 64},   /* past one tile */
        {2, 130, 1, 128}, /* head dim 128, batch 2, t past two tiles */
        {1, 200, 3, 64},  /* three heads */
        {1, 97, 2, 128},  /* head dim 128, dk/dv steps of 32 not dividing t */
        {1, 1024, 1, 64}, /* GPT-2's t */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        CHECK(emulation_within(shapes[i], false));
    for (fault = FAULT_NONE + 1; fault < FAULT_COUNT; fault++) {
        const bool caught = !emulation_within((shape){1, 70, 1, 64}, true);
        printf("test_mma_layout: fault \"%s\": %s\n", fault_names[fault],
               caught ? "caught" : "NOT caught");
        CHECK(caught);
    }
    fault = FAULT_NONE;
}

/* ---- --harness: what tests/kernels/attention.c's bf16 tolerances come from --------------- */

/* max |got - ref| / max |ref| */
static double gemm_measure(const float *got, const double *ref, int64_t n) {
    double big = 0, diff = 0;
    for (int64_t i = 0; i < n; i++)
        big = fmax(big, fabs(ref[i])), diff = fmax(diff, fabs((double)got[i] - ref[i]));
    return diff / big;
}
/* relative, the floor max(1, 1% of the largest) (tests/kernels/harness.h's lse_measure) */
static double lse_measure(const float *got, const double *ref, int64_t n) {
    double big = 0, w = 0;
    for (int64_t i = 0; i < n; i++)
        big = fmax(big, fabs(ref[i]));
    for (int64_t i = 0; i < n; i++)
        w = fmax(w, fabs((double)got[i] - ref[i]) / fmax(fabs(ref[i]), fmax(1.0, 0.01 * big)));
    return w;
}

static void harness(void) {
    const struct {
        int64_t b, t, c, nh, heads, hot;
    } shapes[] = {
        {1, 1000, 128, 2, 2, -1}, {1, 130, 256, 2, 2, 0},  {2, 1024, 768, 12, 3, -1},
        {8, 1024, 768, 12, 8, 7}, {2, 1, 128, 2, 4, -1},   {3, 77, 384, 3, 9, -1},
        {1, 1024, 768, 6, 2, -1}, {2, 333, 640, 5, 10, 3}, {2, 200, 256, 4, 8, 2},
    };
    printf("test_mma_layout --harness: the emulated kernels on test_kernels' inputs (qkv in "
           "[-2, 2), the hot head's q and k times 3, dout in [-1, 1), dqkv from [-0.01, 0.01), "
           "not rounded) against double attention, over the first heads (largest score: of each "
           "(batch, head), lse's measure):\n");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t b = shapes[s].b, t = shapes[s].t, c = shapes[s].c, nh = shapes[s].nh;
        const int64_t heads = shapes[s].heads, n = b * t * c, nl = b * nh * t, hd = c / nh;
        float *qkv = random_array(3 * n, 2.0f, false), *dout = random_array(n, 1.0f, false);
        float *d0 = random_array(3 * n, 0.01f, false);
        for (int64_t row = 0; shapes[s].hot >= 0 && row < b * t; row++)
            for (int64_t d = 0; d < hd; d++)
                qkv[row * 3 * c + shapes[s].hot * hd + d] *= 3.0f,
                    qkv[row * 3 * c + c + shapes[s].hot * hd + d] *= 3.0f;
        float *out = calloc((size_t)n, 4), *lse = calloc((size_t)nl, 4);
        float *dqkv = malloc(sizeof(float) * (size_t)(3 * n)), *top = calloc((size_t)nl, 4);
        memcpy(dqkv, d0, sizeof(float) * (size_t)(3 * n));
        reference ref = {.out = calloc((size_t)n, sizeof(double)),
                         .lse = calloc((size_t)nl, sizeof(double)),
                         .dqkv = malloc(sizeof(double) * (size_t)(3 * n)),
                         .rowmax = calloc((size_t)nl, sizeof(double))};
        reference_attention(&ref, qkv, dout, d0, b, t, c, nh, heads);
        emulate_forward(out, lse, top, qkv, b, t, c, nh, heads);
        float *bh_top = malloc(sizeof(float) * (size_t)heads);
        double *bh_ref = malloc(sizeof(double) * (size_t)heads);
        for (int64_t bh = 0; bh < heads; bh++) {
            bh_top[bh] = -INFINITY, bh_ref[bh] = -INFINITY;
            for (int64_t i = 0; i < t; i++)
                bh_top[bh] = fmaxf(bh_top[bh], top[bh * t + i]),
                bh_ref[bh] = fmax(bh_ref[bh], ref.rowmax[bh * t + i]);
        }
        float *ro = calloc((size_t)n, sizeof(float)), *rl = calloc((size_t)nl, sizeof(float));
        for (int64_t i = 0; i < n; i++)
            ro[i] = (float)ref.out[i];
        for (int64_t i = 0; i < nl; i++)
            rl[i] = (float)ref.lse[i];
        emulate_backward(dqkv, dout, qkv, ro, rl, b, t, c, nh, heads);
        /* over the heads emulated only: the rest of out is 0 on both sides, of dqkv d0 */
        for (int64_t i = 0; i < 3 * n; i++) {
            const int64_t head = (i / (3 * c)) / t * nh + (i % c) / (c / nh);
            if (head >= heads) dqkv[i] = (float)(ref.dqkv[i] = d0[i]);
        }
        printf("  b %lld, t %lld, c %lld, nh %lld (head dim %lld), %lld heads%s: out %.2e, lse "
               "%.2e, dqkv %.2e, largest score %.2e\n",
               (long long)b, (long long)t, (long long)c, (long long)nh, (long long)(c / nh),
               (long long)heads, shapes[s].hot >= 0 ? ", a hot head" : "",
               gemm_measure(out, ref.out, n), lse_measure(lse, ref.lse, nl),
               gemm_measure(dqkv, ref.dqkv, 3 * n), lse_measure(bh_top, bh_ref, heads));
        fflush(stdout);
        free(qkv), free(dout), free(d0), free(out), free(lse), free(dqkv), free(ro), free(rl);
        free(ref.out), free(ref.lse), free(ref.dqkv), free(ref.rowmax), free(top), free(bh_top);
        free(bh_ref);
    }
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--harness") == 0) {
        harness();
        return 0;
    }
    test_fragments();
    test_ldmatrix();
    test_plan();
    test_nan_key();
    test_emulation();
    return check_exit("test_mma_layout");
}
