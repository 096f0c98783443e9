/* backward.c: the backward on the emulated warps: attention.cu's rowdot, then the tile loops of
 * flash_mma_dkdv_kernel and flash_mma_dq_kernel, steps numbered as in attention_mma.cu, with
 * either staging (the pipelined one: the row dots' bf16 copy of dout, and each step's tiles sent
 * into the other buffer before the step before computes). */
#include "mma_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the backward: attention.cu's rowdot, then flash_mma_dkdv_kernel and flash_mma_dq_kernel */

/* The dk/dv kernel's pipelined step (attention_stage.h's lwc_stage_query_tiles and
 * lwc_query_floats_*): query head h's M rows of Q and dO from q0 into one buffer, with their lse
 * log2(e) and D (which the kernel stores after the step before, here at once: the same values
 * in the same buffer before the next barrier). */
static void stage_query_step(uint16_t *qb, uint16_t *ob, float *lb, float *db, const uint16_t *q16,
                             const uint16_t *d16, const float *lse, const float *dd, int64_t bi,
                             int64_t h, int q0, int M, int64_t t, int64_t c, int64_t nh, int64_t c3,
                             int hd) {
    emu_stage_async(qb, q16 + bi * t * c3 + h * hd, c3, q0, M, t, hd);
    emu_stage_async(ob, d16 + bi * t * c + h * hd, c, q0, M, t, hd);
    for (int r = 0; r < M; r++) {
        lb[r] = q0 + r < t ? lse[(bi * nh + h) * t + q0 + r] * LOG2E : 0.0f;
        db[r] = q0 + r < t ? dd[(bi * nh + h) * t + q0 + r] : 0.0f;
    }
}

void emulate_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                      const float *lse, int64_t b, int64_t t, int64_t c, int64_t nh, int64_t nkv,
                      int window, int64_t heads, int variant) {
    const int hd = (int)(c / nh), LD = hd + LWC_FA_PAD, ND = hd / 8;
    const int tiles = lwc_fa_tiles(t, LWC_FA_BLOCK);
    const int64_t group = nh / nkv;
    const float scale = 1.0f / sqrtf((float)hd), sc = scale * LOG2E;
    const int64_t c3 = c + 2 * nkv * hd;
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
    /* the pipelined kernels': a bf16 qkv, and the row dots' copy of dout, rounded in pairs */
    const bool pipe = variant == LWC_FA_PIPELINED;
    uint16_t *q16 = pipe ? bf16_bits_of(qkv, b * t * c3) : NULL;
    uint16_t *d16 = pipe ? malloc(sizeof(uint16_t) * (size_t)(b * t * c)) : NULL;
    for (int64_t i = 0; pipe && i < b * t * c; i += 2) {
        const uint32_t w = lwc_mma_pack(dout[i], dout[i + 1]);
        d16[i] = half_of(w, 0), d16[i + 1] = half_of(w, 1);
    }
    static float acc_a[LWC_FA_WARPS][32][MAX_ND][4], acc_b[LWC_FA_WARPS][32][MAX_ND][4];

    /* dk, dv: a block per (batch x KV head, key tile), over the query heads that read it */
    {
        const int M = LWC_FA_KV_STEP(hd), NT = M / 8;
        uint16_t *smem = smem_of(hd, LWC_FA_DKDV, variant);
        uint16_t *ks = smem, *vs = ks + LWC_FA_BLOCK * LD, *qs = vs + LWC_FA_BLOCK * LD;
        uint16_t *os = qs + M * LD;
        const int q_buf = 2 * M * LD, f_buf = 2 * M; /* buffer 1's past buffer 0's */
        float *ls = (float *)(pipe ? qs + 2 * q_buf : os + M * LD), *ds = ls + M;
        for (int64_t block = 0; block < b * nkv * tiles; block++) {
            int bk, tile;
            lwc_fa_block(block, tiles, b * nkv, LWC_FA_DKDV, emu_order, &bk, &tile);
            const int64_t bi = bk / nkv, kh = bk % nkv, rows = bi * t * c3;
            if (bi * nh + kh * group >= heads) continue;
            const int k0 = tile * LWC_FA_BLOCK;
            const int64_t kv = rows + c + kh * hd;
            const float *k = qkv + kv, *v = k + nkv * hd;
            const int first = lwc_fa_first_query_step(k0, M);
            const int last = lwc_fa_last_query_step(k0, t, M, window);
            /* 1. */
            if (pipe) {
                emu_stage_async(ks, q16 + kv, c3, k0, LWC_FA_BLOCK, t, hd);
                emu_stage_async(vs, q16 + kv + nkv * hd, c3, k0, LWC_FA_BLOCK, t, hd);
                stage_query_step(qs, os, ls, ds, q16, d16, lse, dd, bi, kh * group, first * M, M, t,
                                 c, nh, c3, hd);
            } else {
                emu_stage(ks, k, c3, k0, LWC_FA_BLOCK, t, hd);
                emu_stage(vs, v, c3, k0, LWC_FA_BLOCK, t, hd);
            }
            memset(acc_a, 0, sizeof acc_a), memset(acc_b, 0, sizeof acc_b); /* dk, dv */
            int n = 0;                                                      /* the steps begun */
            for (int64_t h = kh * group; h < (kh + 1) * group; h++) {
                const int64_t bh = bi * nh + h;
                const float *q = qkv + rows + h * hd, *dout_h = dout + bi * t * c + h * hd;
                for (int step = first; step <= last; step++) {
                    const int q0 = step * M;
                    /* 2. */
                    const uint16_t *qb = qs, *ob = os;
                    const float *lb = ls, *db = ds;
                    if (pipe) {
                        const int buf = emu_buffer(n), other = 1 - lwc_fa_stage_buffer(n);
                        qb = qs + buf * q_buf, ob = os + buf * q_buf;
                        lb = ls + buf * f_buf, db = ds + buf * f_buf;
                        n++;
                        int nh_next = (int)h, ns = step;
                        if (lwc_fa_next_query_step(&nh_next, &ns, first, last,
                                                   (int)((kh + 1) * group)))
                            stage_query_step(qs + other * q_buf, os + other * q_buf,
                                             ls + other * f_buf, ds + other * f_buf, q16, d16, lse,
                                             dd, bi, nh_next, ns * M, M, t, c, nh, c3, hd);
                    } else {
                        emu_stage(qs, q, c3, q0, M, t, hd);
                        emu_stage(os, dout_h, c, q0, M, t, hd);
                        for (int r = 0; r < M; r++) {
                            ls[r] = q0 + r < t ? lse[bh * t + q0 + r] * LOG2E : 0.0f;
                            ds[r] = q0 + r < t ? dd[bh * t + q0 + r] : 0.0f;
                        }
                    }
                    for (int w = 0; w < LWC_FA_WARPS; w++) {
                        const int row0 = k0 + LWC_FA_WARP_ROWS * w;
                        /* 3. */
                        float s[32][MAX_NT][4], dp[32][MAX_NT][4];
                        memset(s, 0, sizeof s), memset(dp, 0, sizeof dp);
                        emu_score_pair(&s[0][0], &dp[0][0], ks, vs, qb, ob, w, NT, hd);
                        /* 4. */
                        const bool masked = lwc_fa_grad_masked(q0, M, k0, LWC_FA_BLOCK, t, window);
                        for (int ln = 0; ln < 32; ln++)
                            lwc_fa_grad_kv(s[ln], dp[ln], NT, ln, lb, db, row0, q0, t, window,
                                           masked, sc);
                        /* 5. */
                        emu_accumulate(&acc_b[w][0][0], s, ob, NT, hd);  /* dv */
                        emu_accumulate(&acc_a[w][0][0], dp, qb, NT, hd); /* dk */
                    }
                }
            }
            /* 6. */
            for (int w = 0; w < LWC_FA_WARPS; w++)
                for (int ln = 0; ln < 32; ln++)
                    for (int r = 0; r < 2; r++) {
                        const int key = k0 + LWC_FA_WARP_ROWS * w + lwc_mma_c_row(ln, 2 * r);
                        if (key >= t) continue;
                        float *g = dqkv + kv + key * c3 + lwc_mma_c_col(ln, 0);
                        for (int j = 0; j < ND; j++)
                            for (int e = 0; e < 2; e++) {
                                g[8 * j + e] += scale * acc_a[w][ln][j][2 * r + e];
                                g[nkv * hd + 8 * j + e] += acc_b[w][ln][j][2 * r + e];
                            }
                    }
        }
        free(smem);
    }

    /* dq */
    {
        const int NT = LWC_FA_STEP / 8;
        uint16_t *smem = smem_of(hd, LWC_FA_DQ, variant);
        uint16_t *qs = smem, *os = qs + LWC_FA_BLOCK * LD, *ks = os + LWC_FA_BLOCK * LD;
        uint16_t *vs = ks + LWC_FA_STEP * LD;
        for (int64_t block = 0; block < b * nh * tiles; block++) {
            int bh, tile;
            lwc_fa_block(block, tiles, b * nh, LWC_FA_DQ, emu_order, &bh, &tile);
            if (bh >= heads) continue;
            const int64_t bi = bh / nh, h = bh % nh, rows = bi * t * c3, head = rows + h * hd;
            const int q0 = tile * LWC_FA_BLOCK;
            const float *q = qkv + head;
            const int64_t k_at = rows + c + h / group * hd, v_at = k_at + nkv * hd;
            const int first = lwc_fa_first_key_step(q0, window), last = lwc_fa_last_key_step(q0, t);
            /* 1. */
            if (pipe) {
                emu_stage_async(qs, q16 + head, c3, q0, LWC_FA_BLOCK, t, hd);
                emu_stage_async(os, d16 + bi * t * c + h * hd, c, q0, LWC_FA_BLOCK, t, hd);
                emu_stage_async(ks, q16 + k_at, c3, first * LWC_FA_STEP, LWC_FA_STEP, t, hd);
                emu_stage_async(vs, q16 + v_at, c3, first * LWC_FA_STEP, LWC_FA_STEP, t, hd);
            } else {
                emu_stage(qs, q, c3, q0, LWC_FA_BLOCK, t, hd);
                emu_stage(os, dout + bi * t * c + h * hd, c, q0, LWC_FA_BLOCK, t, hd);
            }
            float lr[LWC_FA_WARPS][32][2], dr[LWC_FA_WARPS][32][2];
            for (int w = 0; w < LWC_FA_WARPS; w++)
                for (int ln = 0; ln < 32; ln++)
                    for (int r = 0; r < 2; r++) {
                        const int row = q0 + LWC_FA_WARP_ROWS * w + lwc_mma_c_row(ln, 2 * r);
                        lr[w][ln][r] = row < t ? lse[bh * t + row] * LOG2E : 0.0f;
                        dr[w][ln][r] = row < t ? dd[bh * t + row] : 0.0f;
                    }
            memset(acc_a, 0, sizeof acc_a); /* dq */
            for (int step = first; step <= last; step++) {
                const int k0 = step * LWC_FA_STEP;
                /* 2. */
                const uint16_t *kb, *vb;
                emu_key_step(&kb, &vb, ks, vs, qkv, q16, k_at, v_at, c3, step, first, last, t, hd);
                for (int w = 0; w < LWC_FA_WARPS; w++) {
                    const int row0 = q0 + LWC_FA_WARP_ROWS * w;
                    /* 3. */
                    float s[32][MAX_NT][4], dp[32][MAX_NT][4];
                    memset(s, 0, sizeof s), memset(dp, 0, sizeof dp);
                    emu_score_pair(&s[0][0], &dp[0][0], qs, os, kb, vb, w, NT, hd);
                    /* 4. */
                    const bool masked =
                        lwc_fa_grad_masked(q0, LWC_FA_BLOCK, k0, LWC_FA_STEP, t, window);
                    for (int ln = 0; ln < 32; ln++)
                        lwc_fa_grad_q(s[ln], dp[ln], NT, ln, lr[w][ln], dr[w][ln], row0, k0, t,
                                      window, masked, sc);
                    /* 5. */
                    emu_accumulate(&acc_a[w][0][0], s, kb, NT, hd); /* dq */
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
    free(dd), free(q16), free(d16);
}
