/* rope.c: rotary position embeddings in place on heads of strided rows, forward (rotation by
 * the angle) and backward (by minus the angle: a rotation's inverse is its transpose). Angles,
 * their cosines and sines, and the rotation itself are taken in double and rounded once: in
 * fp32, pos * theta alone is off by up to pos * 2^-24 rad (1e-4 rad at position 2048), more
 * than the rounding of the result. The table of one position serves every row and head there. */
#include "device/cpu/cpu.h"
#include "device/cpu/pool.h"

#include <math.h>
#include <stdlib.h>

/* elements per part of the pool at least */
#define GRAIN 16384

typedef struct {
    void *x;
    bool bf16;
    int64_t b, t, pos0, stride, col0, n_heads, hd;
    double base, sign; /* sign: +1 forward, -1 backward */
    lw_rope_pairing pairing;
    double *tables; /* [LWI_POOL_MAX, hd]: a part's cosines, then its sines */
    float *heads;   /* [LWI_POOL_MAX, hd]: a part's head widened from bf16 */
} rope_job;

/* Pair i's two elements in a head: (i, i + hd/2) or (2i, 2i + 1). */
static inline void pair_of(lw_rope_pairing pairing, int64_t hd, int64_t i, int64_t *a, int64_t *b) {
    *a = pairing == LW_ROPE_HALVES ? i : 2 * i;
    *b = pairing == LW_ROPE_HALVES ? i + hd / 2 : 2 * i + 1;
}

/* One head of fp32 values, rotated pair by pair with the position's cosines and sines. */
static void rotate_head(float *h, const double *cs, const double *sn, int64_t hd,
                        lw_rope_pairing pairing) {
    for (int64_t i = 0; i < hd / 2; i++) {
        int64_t ia, ib;
        pair_of(pairing, hd, i, &ia, &ib);
        const double a = h[ia], b = h[ib];
        h[ia] = (float)(a * cs[i] - b * sn[i]);
        h[ib] = (float)(b * cs[i] + a * sn[i]);
    }
}

/* Positions [begin, end) of the sequence: their rows in every sequence of the batch. */
static void rope_range(void *ctx, int64_t begin, int64_t end, int32_t part) {
    const rope_job *j = ctx;
    const int64_t half = j->hd / 2;
    double *cs = j->tables + (int64_t)part * j->hd, *sn = cs + half;
    float *widened = j->heads + (int64_t)part * j->hd;
    for (int64_t p = begin; p < end; p++) {
        const double pos = (double)(p + j->pos0);
        for (int64_t i = 0; i < half; i++) {
            const double angle = pos * pow(j->base, -(double)(2 * i) / (double)j->hd);
            cs[i] = cos(angle);
            sn[i] = j->sign * sin(angle);
        }
        for (int64_t s = 0; s < j->b; s++) {
            const int64_t row = (s * j->t + p) * j->stride + j->col0;
            for (int64_t h = 0; h < j->n_heads; h++) {
                const int64_t at = row + h * j->hd;
                if (!j->bf16) {
                    rotate_head((float *)j->x + at, cs, sn, j->hd, j->pairing);
                    continue;
                }
                /* computed in fp32 as the fp32 kernel computes it, then rounded */
                uint16_t *x16 = (uint16_t *)j->x + at;
                lwi_cpu_widen_bf16(widened, x16, j->hd);
                rotate_head(widened, cs, sn, j->hd, j->pairing);
                lwi_cpu_round_bf16(x16, widened, j->hd);
            }
        }
    }
}

static lw_status rope(void *x, lw_dtype dtype, int64_t b, int64_t t, int64_t pos0,
                      int64_t row_stride, int64_t col0, int64_t n_heads, int64_t hd, float base,
                      lw_rope_pairing pairing, double sign) {
    rope_job j = {.x = x,
                  .bf16 = dtype == LW_DTYPE_BF16,
                  .b = b,
                  .t = t,
                  .pos0 = pos0,
                  .stride = row_stride,
                  .col0 = col0,
                  .n_heads = n_heads,
                  .hd = hd,
                  .base = base,
                  .sign = sign,
                  .pairing = pairing};
    j.tables = malloc(sizeof(double) * LWI_POOL_MAX * (size_t)hd);
    j.heads = malloc(sizeof(float) * LWI_POOL_MAX * (size_t)hd);
    if (j.tables == NULL || j.heads == NULL) {
        free(j.tables), free(j.heads);
        return lwi_fail(LW_ERR_NOMEM, "cpu: out of memory for rope tables of head dim %lld",
                        (long long)hd);
    }
    const int64_t per_position = b * n_heads * hd;
    lwi_cpu_parallel(t, (GRAIN + per_position - 1) / per_position, rope_range, &j);
    free(j.tables), free(j.heads);
    return LW_OK;
}

lw_status lwi_cpu_rope_forward(lw_stream *stream, void *x, lw_dtype dtype, int64_t b, int64_t t,
                               int64_t pos0, int64_t row_stride, int64_t col0, int64_t n_heads,
                               int64_t hd, float base, lw_rope_pairing pairing) {
    (void)stream;
    return rope(x, dtype, b, t, pos0, row_stride, col0, n_heads, hd, base, pairing, 1.0);
}

lw_status lwi_cpu_rope_backward(lw_stream *stream, void *dx, lw_dtype dtype, int64_t b, int64_t t,
                                int64_t pos0, int64_t row_stride, int64_t col0, int64_t n_heads,
                                int64_t hd, float base, lw_rope_pairing pairing) {
    (void)stream;
    return rope(dx, dtype, b, t, pos0, row_stride, col0, n_heads, hd, base, pairing, -1.0);
}
