/* ptx.c: the hardware, as the PTX ISA describes it, written apart from src/cuda/mma_layout.h:
 * mma.m16n8k16's fragment layouts, ldmatrix.x4 and mma.sync on a warp's 32 lanes' registers. */
#include "mma_test.h"

#include <string.h>

/* m16n8k16, .bf16 A: a_i at row groupID for i in {0, 1, 4, 5}, groupID + 8 otherwise; column
 * threadID_in_group * 2 + (i & 1), + 8 for i >= 4. B: b_i at row threadID_in_group * 2 + (i & 1),
 * + 8 for i >= 2, column groupID. C/D (f32): c_i at row groupID for i < 2, groupID + 8 otherwise,
 * column threadID_in_group * 2 + (i & 1). */
int ptx_a_row(int lane, int i) {
    return lane / 4 + ((i == 2 || i == 3 || i == 6 || i == 7) ? 8 : 0);
}
int ptx_a_col(int lane, int i) { return (lane % 4) * 2 + i % 2 + (i >= 4 ? 8 : 0); }
int ptx_b_row(int lane, int i) { return (lane % 4) * 2 + i % 2 + (i >= 2 ? 8 : 0); }
int ptx_b_col(int lane, int i) { return (void)i, lane / 4; }
int ptx_c_row(int lane, int i) { return lane / 4 + (i >= 2 ? 8 : 0); }
int ptx_c_col(int lane, int i) { return (lane % 4) * 2 + i % 2; }

uint16_t half_of(uint32_t reg, int h) { return (uint16_t)(h ? reg >> 16 : reg & 0xffffu); }
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
void ptx_ldmatrix_x4(uint32_t r[32][4], const uint16_t *tile, int hd, const int rows[32],
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
void ptx_mma(float *d[32], uint32_t *a[32], uint32_t b[32][4], int pair) {
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
