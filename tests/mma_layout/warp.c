/* warp.c: a warp's pieces as the kernels run them (load_block, mma, the quads' shuffles, stage,
 * pack, score_pair, accumulate) on the emulated lanes, and the faults injected into them. */
#include "mma_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int fault = FAULT_NONE;
int emu_order = LWC_FA_ORDER_HEADS;

/* ---- a warp's pieces, emulated --------------------------------------------------------------- */

/* The kernel's load_block: the header's lane addresses, the ISA's ldmatrix. */
void emu_load_block(uint32_t r[32][4], const uint16_t *tile, int row, int col, int kind, int hd) {
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
void emu_mma(float (*d)[4], int tiles, int j, uint32_t (*a)[4], int a_stride, uint32_t b[32][4],
             int pair) {
    float *dl[32];
    uint32_t *al[32];
    for (int l = 0; l < 32; l++) {
        dl[l] = d[l * tiles + j];
        al[l] = a[l * a_stride];
    }
    ptx_mma(dl, al, b, pair);
}

/* The kernel's quad_max and quad_sum: xor 1, then xor 2, a lane's own value first. */
void emu_quad_max(float v[32][2]) {
    for (int step = 1; step <= (fault == FAULT_QUAD ? 1 : 2); step <<= 1) {
        float w[32][2];
        for (int l = 0; l < 32; l++)
            for (int r = 0; r < 2; r++)
                w[l][r] = fmaxf(v[l][r], v[l ^ step][r]);
        memcpy(v, w, sizeof w);
    }
}
void emu_quad_sum(float v[32][2]) {
    for (int step = 1; step <= 2; step <<= 1) {
        float w[32][2];
        for (int l = 0; l < 32; l++)
            for (int r = 0; r < 2; r++)
                w[l][r] = v[l][r] + v[l ^ step][r];
        memcpy(v, w, sizeof w);
    }
}

/* The kernel's stage: chunks of 4 floats of rows [r0, r0 + rows), zeros past t, as bf16. */
void emu_stage(uint16_t *tile, const float *src, int64_t stride, int r0, int rows, int64_t t,
               int hd) {
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

/* attention_stage.h's lwc_stage_async: chunks of 8 bf16 (lwc_fa_chunk16), copied; rows past t
 * zero-filled. */
void emu_stage_async(uint16_t *tile, const uint16_t *src, int64_t stride, int r0, int rows,
                     int64_t t, int hd) {
    for (int e = 0; e < rows * hd / 8; e++) {
        int row, col;
        lwc_fa_chunk16(e, hd, &row, &col);
        for (int i = 0; i < 8; i++)
            tile[lwc_fa_at(row, col + i, hd)] =
                r0 + row < t ? src[(int64_t)(r0 + row) * stride + col + i] : 0;
    }
}

/* The buffer a step computes on, with the fault that reads the one being filled. */
int emu_buffer(int n) { return lwc_fa_stage_buffer(n) ^ (fault == FAULT_BUFFER); }

/* The kernels' key_step: the step's K and V tiles (*kb, *vb). Pipelined (q16, qkv's bf16 bits,
 * given), the next step's are sent into the other buffer before this one computes; else this
 * step's are staged from qkv. k_at, v_at: the head's K and V in qkv's rows of stride c3. */
void emu_key_step(const uint16_t **kb, const uint16_t **vb, uint16_t *ks, uint16_t *vs,
                  const float *qkv, const uint16_t *q16, int64_t k_at, int64_t v_at, int64_t c3,
                  int step, int first, int last, int64_t t, int hd) {
    const int kv_buf = 2 * LWC_FA_STEP * (hd + LWC_FA_PAD); /* buffer 1's K and V past buffer 0's */
    if (q16 != NULL) {
        *kb = ks + emu_buffer(step - first) * kv_buf;
        *vb = vs + emu_buffer(step - first) * kv_buf;
        const int other = 1 - lwc_fa_stage_buffer(step - first);
        const int next = (step + 1) * LWC_FA_STEP;
        if (step < last) {
            emu_stage_async(ks + other * kv_buf, q16 + k_at, c3, next, LWC_FA_STEP, t, hd);
            emu_stage_async(vs + other * kv_buf, q16 + v_at, c3, next, LWC_FA_STEP, t, hd);
        }
    } else {
        *kb = ks, *vb = vs;
        emu_stage(ks, qkv + k_at, c3, step * LWC_FA_STEP, LWC_FA_STEP, t, hd);
        emu_stage(vs, qkv + v_at, c3, step * LWC_FA_STEP, LWC_FA_STEP, t, hd);
    }
}

uint16_t *bf16_bits_of(const float *x, int64_t n) {
    uint16_t *b = malloc(sizeof(uint16_t) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++)
        b[i] = lwc_mma_bf16(x[i]);
    return b;
}

/* The kernel's pack of P (or dS) into A operands, with the packing fault. */
static void emu_pack(float (*s)[4], int kk, uint32_t a[4]) {
    lwc_fa_pack_a(s, kk, a);
    if (fault == FAULT_PACK) {
        const uint32_t x = a[1];
        a[1] = a[2], a[2] = x;
    }
}

/* The kernel's score_pair on every lane: s = X Y^T and dp = W Z^T (lane-major, MAX_NT tiles a
 * lane), X and W warp w's rows of two tiles, Y and Z the step's nt columns of two tiles. */
void emu_score_pair(float (*s)[4], float (*dp)[4], const uint16_t *x, const uint16_t *w,
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
void emu_accumulate(float (*acc)[4], float (*p)[MAX_NT][4], const uint16_t *tile, int nt, int hd) {
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
uint16_t *smem_of(int hd, int kernel, int variant) {
    return calloc(lwc_fa_smem_bytes(hd, kernel, variant), 1);
}
