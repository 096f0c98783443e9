/* forward.c: flash_mma_forward_kernel's tile loop on the emulated warps, steps numbered as in
 * attention_mma.cu, with either staging (the pipelined one sends step n + 1's K and V into the
 * other buffer before step n computes, as the copies land while it does). */
#include "mma_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the forward, as flash_mma_forward_kernel ---------------------------------------------- */

void emulate_forward(float *out, float *lse, float *rowmax, const float *qkv, int64_t b, int64_t t,
                     int64_t c, int64_t nh, int64_t nkv, int window, int64_t heads, int variant) {
    const int hd = (int)(c / nh), LD = hd + LWC_FA_PAD, NT = LWC_FA_STEP / 8, ND = hd / 8;
    const int KD = hd / 16, tiles = lwc_fa_tiles(t, LWC_FA_BLOCK);
    const float sc = 1.0f / sqrtf((float)hd) * LOG2E;
    const bool pipe = variant == LWC_FA_PIPELINED;
    uint16_t *smem = smem_of(hd, LWC_FA_FORWARD, variant);
    uint16_t *qs = smem, *ks = qs + LWC_FA_BLOCK * LD, *vs = ks + LWC_FA_STEP * LD;
    uint16_t *q16 = pipe ? bf16_bits_of(qkv, b * t * (c + 2 * nkv * hd)) : NULL;
    static uint32_t qa[LWC_FA_WARPS][32][MAX_KD][4];
    static float o[LWC_FA_WARPS][32][MAX_ND][4], m[LWC_FA_WARPS][32][2], l[LWC_FA_WARPS][32][2];
    for (int64_t block = 0; block < b * nh * tiles; block++) {
        int bh, tile;
        lwc_fa_block(block, tiles, b * nh, LWC_FA_FORWARD, emu_order, &bh, &tile);
        if (bh >= heads) continue;
        const int64_t bi = bh / nh, h = bh % nh, c3 = c + 2 * nkv * hd;
        const int q0 = tile * LWC_FA_BLOCK;
        const float *q = qkv + bi * t * c3 + h * hd;
        const int64_t k_at = bi * t * c3 + c + h / (nh / nkv) * hd, v_at = k_at + nkv * hd;
        const int first = lwc_fa_first_key_step(q0, window), last = lwc_fa_last_key_step(q0, t);
        /* 1. */
        if (pipe) {
            emu_stage_async(ks, q16 + k_at, c3, first * LWC_FA_STEP, LWC_FA_STEP, t, hd);
            emu_stage_async(vs, q16 + v_at, c3, first * LWC_FA_STEP, LWC_FA_STEP, t, hd);
        }
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
        for (int step = first; step <= last; step++) {
            const int k0 = step * LWC_FA_STEP;
            /* 2. */
            const uint16_t *kb, *vb;
            emu_key_step(&kb, &vb, ks, vs, qkv, q16, k_at, v_at, c3, step, first, last, t, hd);
            for (int w = 0; w < LWC_FA_WARPS; w++) {
                const int row0 = q0 + LWC_FA_WARP_ROWS * w;
                /* 3. */
                float s[32][MAX_NT][4];
                memset(s, 0, sizeof s);
                for (int kk = 0; kk < KD; kk++)
                    for (int jj = 0; jj < NT / 2; jj++) {
                        uint32_t bq[32][4];
                        emu_load_block(bq, kb, 16 * jj, 16 * kk, LWC_LDSM_B, hd);
                        emu_mma(&s[0][0], MAX_NT, 2 * jj, &qa[w][0][kk], MAX_KD, bq, 0);
                        emu_mma(&s[0][0], MAX_NT, 2 * jj + 1, &qa[w][0][kk], MAX_KD, bq, 1);
                    }
                /* 4. */
                if (lwc_fa_forward_masked(q0, k0, LWC_FA_STEP, window))
                    for (int ln = 0; ln < 32; ln++)
                        lwc_fa_mask_causal(s[ln], NT, ln, row0, k0 + (fault == FAULT_MASK), window);
                float mx[32][2], alpha[2];
                for (int ln = 0; ln < 32; ln++)
                    lwc_fa_row_max(s[ln], NT, mx[ln]);
                emu_quad_max(mx);
                for (int ln = 0; ln < 32; ln++) {
                    lwc_fa_softmax(s[ln], NT, sc, mx[ln], m[w][ln], l[w][ln], alpha);
                    lwc_fa_rescale(o[w][ln], ND, alpha);
                }
                /* 5. */
                emu_accumulate(&o[w][0][0], s, vb, NT, hd);
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
    free(smem), free(q16);
}
