/* layouts.c: the header's index arithmetic against the ISA (ptx.c) and brute force: the
 * fragments, ldmatrix's reads and banks, the tile plan (blocks, steps, masks, shared memory), the
 * pipelined staging's chunks, buffers and order of steps. */
#include "mma_test.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- the layouts ----------------------------------------------------------------------------- */

void test_fragments(void) {
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
    EXPECT(same);
    EXPECT(once);
    EXPECT(reuse);
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
    EXPECT(figures);
    printf("test_mma_layout: A, B and C fragments: the ISA's layouts, each element held once, two "
           "C tiles an A operand\n");
}

/* Each kind of ldmatrix read at the header's addresses delivers its operand's layout; its rows
 * are 16-byte aligned and an 8-row phase touches 32 different banks; the staging's 8-byte stores
 * of a half-warp, 16 different 8-byte bank pairs. */
void test_ldmatrix(void) {
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
        EXPECT(right);
        EXPECT(aligned);
        EXPECT(banks);
        printf("test_mma_layout: head dim %d: ldmatrix A, B and B^T reads deliver the operands, "
               "16-byte rows, no bank conflicts\n", hd);
        free(tile);
    }
}

/* The plan against brute force over every t up to 300, with no window and with windows inside a
 * step, of one, past one: blocks, steps, masks, shared memory. */
void test_plan(void) {
    bool blocks = true, steps = true, masks = true, smem = true;
    static const int windows[] = {0, 1, 40, 64, 100};
    for (int64_t t = 1; t <= 300; t++) {
        const int tiles = lwc_fa_tiles(t, LWC_FA_BLOCK);
        for (int kernel = LWC_FA_FORWARD; kernel <= LWC_FA_DQ; kernel++) {
            int seen[3][8] = {{0}};
            for (int64_t block = 0; block < 3 * tiles; block++) {
                int bh, tile;
                lwc_fa_block(block, tiles, 3, kernel, LWC_FA_ORDER_HEADS, &bh, &tile);
                if (bh < 3 && tile >= 0 && tile < tiles) seen[bh][tile]++;
                /* the heaviest first within a head */
                if (block % tiles == 0)
                    blocks = blocks && tile == (kernel == LWC_FA_DKDV ? 0 : tiles - 1);
            }
            for (int bh = 0; bh < 3; bh++)
                for (int tile = 0; tile < tiles; tile++)
                    blocks = blocks && seen[bh][tile] == 1;
        }
        for (size_t wi = 0; wi < sizeof windows / sizeof windows[0]; wi++) {
            const int window = windows[wi];
            for (int tile = 0; tile < tiles; tile++) {
                const int q0 = tile * LWC_FA_BLOCK, last = lwc_fa_last_key_step(q0, t);
                const int first = lwc_fa_first_key_step(q0, window);
                for (int step = 0; step * LWC_FA_STEP < t; step++) {
                    const int k0 = step * LWC_FA_STEP;
                    bool kept = false, fwd_mask = false, grad_mask = false;
                    for (int qi = q0; qi < q0 + LWC_FA_BLOCK; qi++)
                        for (int kj = k0; kj < k0 + LWC_FA_STEP; kj++) {
                            kept = kept || lwc_fa_kept(qi, kj, t, window);
                            fwd_mask = fwd_mask || !lwc_fa_sees(qi, kj, window);
                            grad_mask = grad_mask || !lwc_fa_kept(qi, kj, t, window);
                        }
                    steps = steps && kept == (step >= first && step <= last);
                    if (step >= first && step <= last)
                        masks = masks &&
                                fwd_mask == lwc_fa_forward_masked(q0, k0, LWC_FA_STEP, window) &&
                                grad_mask == lwc_fa_grad_masked(q0, LWC_FA_BLOCK, k0, LWC_FA_STEP,
                                                                t, window);
                }
            }
            for (int hd = 64; hd <= 128; hd += 64) {
                const int M = LWC_FA_KV_STEP(hd);
                for (int tile = 0; tile < tiles; tile++) {
                    const int k0 = tile * LWC_FA_BLOCK, first = lwc_fa_first_query_step(k0, M);
                    const int last = lwc_fa_last_query_step(k0, t, M, window);
                    for (int step = 0; step < lwc_fa_tiles(t, M); step++) {
                        const int q0 = step * M;
                        bool kept = false, mask = false;
                        for (int qi = q0; qi < q0 + M; qi++)
                            for (int kj = k0; kj < k0 + LWC_FA_BLOCK; kj++) {
                                kept = kept || lwc_fa_kept(qi, kj, t, window);
                                mask = mask || !lwc_fa_kept(qi, kj, t, window);
                            }
                        steps = steps && kept == (step >= first && step <= last);
                        if (step >= first && step <= last)
                            masks = masks &&
                                    mask == lwc_fa_grad_masked(q0, M, k0, LWC_FA_BLOCK, t, window);
                    }
                }
            }
        }
    }
    for (int hd = 64; hd <= 128; hd += 64) {
        const size_t row = 2 * (size_t)(hd + LWC_FA_PAD), M = (size_t)LWC_FA_KV_STEP(hd);
        smem = smem && lwc_fa_smem_bytes(hd, LWC_FA_FORWARD, LWC_FA_SYNC) >= (64 + 64 + 64) * row &&
               lwc_fa_smem_bytes(hd, LWC_FA_DKDV, LWC_FA_SYNC) >= (64 + 64 + 2 * M) * row + 8 * M &&
               lwc_fa_smem_bytes(hd, LWC_FA_DQ, LWC_FA_SYNC) >= 4 * 64 * row;
        /* the pipelined variant: a second buffer of each step's tiles (and floats) */
        smem = smem &&
               lwc_fa_smem_bytes(hd, LWC_FA_FORWARD, LWC_FA_PIPELINED) >= (64 + 4 * 64) * row &&
               lwc_fa_smem_bytes(hd, LWC_FA_DKDV, LWC_FA_PIPELINED) >=
                   (64 + 64 + 4 * M) * row + 16 * M &&
               lwc_fa_smem_bytes(hd, LWC_FA_DQ, LWC_FA_PIPELINED) >= (2 * 64 + 4 * 64) * row;
        for (int kernel = LWC_FA_FORWARD; kernel <= LWC_FA_DQ; kernel++) /* an H100's opt-in */
            smem = smem && lwc_fa_smem_bytes(hd, kernel, LWC_FA_PIPELINED) <= 227 * 1024;
    }
    EXPECT(blocks);
    EXPECT(steps);
    EXPECT(masks);
    EXPECT(smem);
    printf("test_mma_layout: t = 1 .. 300, windows 0, 1, 40, 64, 100: every block once, heaviest "
           "first; the steps run are those with a kept pair; masks where a pair is masked; shared "
           "memory holds the tiles\n");
}

/* The pipelined staging: the 16-byte chunks of a step's tile cover it once, each within a row,
 * 16-byte aligned in shared memory, a warp's 8-lane phases bank-conflict free; consecutive steps
 * use different buffers; the dk/dv kernel's next step walks its nested loops' order. */
void test_pipeline(void) {
    bool cover = true, aligned = true, banks = true, buffers = true, order = true;
    for (int hd = 64; hd <= 128; hd += 64)
        for (int rows = 32; rows <= 64; rows += 32) {
            int *seen = calloc((size_t)(rows * hd), sizeof(int));
            for (int e = 0; e < rows * hd / 8; e++) {
                int row, col;
                lwc_fa_chunk16(e, hd, &row, &col);
                cover = cover && row >= 0 && row < rows && col >= 0 && col + 8 <= hd;
                for (int i = 0; i < 8 && cover; i++)
                    seen[row * hd + col + i]++;
                aligned = aligned && (2 * lwc_fa_at(row, col, hd)) % 16 == 0;
            }
            for (int i = 0; i < rows * hd; i++)
                cover = cover && seen[i] == 1;
            free(seen);
            /* cp.async of 16 bytes: a warp's stores go in phases of 8 lanes, each 128 bytes */
            for (int e0 = 0; e0 < rows * hd / 8; e0 += 8) {
                unsigned used = 0;
                for (int e = e0; e < e0 + 8; e++) {
                    int row, col;
                    lwc_fa_chunk16(e, hd, &row, &col);
                    const unsigned bank = (unsigned)(lwc_fa_at(row, col, hd) / 2) % 32;
                    banks = banks && bank % 4 == 0 && !(used >> bank & 15u);
                    used |= 15u << bank;
                }
            }
        }
    for (int n = 0; n < 100; n++)
        buffers = buffers && lwc_fa_stage_buffer(n) != lwc_fa_stage_buffer(n + 1) &&
                  (lwc_fa_stage_buffer(n) == 0 || lwc_fa_stage_buffer(n) == 1);
    for (int first = 0; first < 4; first++)
        for (int last = first; last < first + 4; last++)
            for (int h0 = 0; h0 < 3; h0++)
                for (int h1 = h0 + 1; h1 < h0 + 4; h1++) {
                    int h = h0, step = first;
                    bool more = true;
                    for (int hh = h0; hh < h1; hh++)
                        for (int ss = first; ss <= last; ss++) {
                            order = order && more && h == hh && step == ss;
                            more = lwc_fa_next_query_step(&h, &step, first, last, h1);
                        }
                    order = order && !more;
                }
    EXPECT(cover);
    EXPECT(aligned);
    EXPECT(banks);
    EXPECT(buffers);
    EXPECT(order);
    printf("test_mma_layout: the pipelined staging: 16-byte chunks cover a tile once, aligned, no "
           "bank conflicts; steps alternate buffers; dk/dv's steps run in their loops' order\n");
}
