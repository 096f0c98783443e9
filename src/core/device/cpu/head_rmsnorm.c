/* head_rmsnorm.c: the parameter-free RMS norm of each head of strided rows, in place (QK norm),
 * forward saving each head's 1/rms and backward from the forward's output. Sums are taken in
 * double (a product of two floats is exact there); the per-element work stays in float, as the
 * layer norm's does, so that a GPU can repeat it operation for operation. */
#include "device/cpu/cpu.h"
#include "device/cpu/pool.h"

#include <math.h>
#include <stdlib.h>

/* elements per part of the pool at least */
#define GRAIN 16384

typedef struct {
    void *x;                 /* the forward's x, the backward's dx */
    bool backward, x16, y16; /* bf16 x (dx), bf16 y */
    const void *y;           /* the backward's forward output */
    float *rstd;             /* the forward's output */
    const float *rstd_in;    /* the backward's input */
    int64_t stride, col0, n_heads, hd;
    float eps;
    float *heads; /* [LWI_POOL_MAX, 2 hd]: a part's head (and y) widened from bf16 */
} norm_job;

/* 1 / sqrt(mean(x^2) + eps) of one head, the mean in double. */
static float head_rstd(const float *x, int64_t hd, float eps) {
    double s = 0;
    for (int64_t i = 0; i < hd; i++)
        s += (double)x[i] * (double)x[i];
    return (float)(1.0 / sqrt(s / (double)hd + (double)eps));
}

/* dx = r (dy - y m), m = mean(dy y) in double, in place of dy. */
static void head_backward(float *d, const float *y, float r, int64_t hd) {
    double s = 0;
    for (int64_t i = 0; i < hd; i++)
        s += (double)d[i] * (double)y[i];
    const float m = (float)(s / (double)hd);
    for (int64_t i = 0; i < hd; i++)
        d[i] = r * (d[i] - y[i] * m);
}

static void norm_range(void *ctx, int64_t begin, int64_t end, int32_t part) {
    const norm_job *j = ctx;
    float *wide = j->heads + (int64_t)part * 2 * j->hd, *ywide = wide + j->hd;
    for (int64_t r = begin; r < end; r++)
        for (int64_t h = 0; h < j->n_heads; h++) {
            const int64_t at = r * j->stride + j->col0 + h * j->hd, k = r * j->n_heads + h;
            float *x = j->x16 ? wide : (float *)j->x + at;
            if (j->x16) lwi_cpu_widen_bf16(wide, (const uint16_t *)j->x + at, j->hd);
            if (!j->backward) {
                const float rs = head_rstd(x, j->hd, j->eps);
                j->rstd[k] = rs;
                for (int64_t i = 0; i < j->hd; i++)
                    x[i] = x[i] * rs;
            } else {
                const float *y = (const float *)j->y + at;
                if (j->y16) {
                    lwi_cpu_widen_bf16(ywide, (const uint16_t *)j->y + at, j->hd);
                    y = ywide;
                }
                head_backward(x, y, j->rstd_in[k], j->hd);
            }
            if (j->x16) lwi_cpu_round_bf16((uint16_t *)j->x + at, wide, j->hd);
        }
}

static lw_status run(norm_job *j, int64_t rows) {
    j->heads = malloc(sizeof(float) * LWI_POOL_MAX * 2 * (size_t)j->hd);
    if (j->heads == NULL)
        return lwi_fail(LW_ERR_NOMEM, "cpu: out of memory for a head rmsnorm of head dim %lld",
                        (long long)j->hd);
    const int64_t per_row = j->n_heads * j->hd;
    lwi_cpu_parallel(rows, (GRAIN + per_row - 1) / per_row, norm_range, j);
    free(j->heads);
    return LW_OK;
}

lw_status lwi_cpu_head_rmsnorm_forward(lw_stream *stream, void *x, lw_dtype dtype, float *rstd,
                                       int64_t rows, int64_t row_stride, int64_t col0,
                                       int64_t n_heads, int64_t hd, float eps) {
    (void)stream;
    norm_job j = {.x = x,
                  .x16 = dtype == LW_DTYPE_BF16,
                  .rstd = rstd,
                  .stride = row_stride,
                  .col0 = col0,
                  .n_heads = n_heads,
                  .hd = hd,
                  .eps = eps};
    return run(&j, rows);
}

lw_status lwi_cpu_head_rmsnorm_backward(lw_stream *stream, void *dx, lw_dtype dx_dtype,
                                        const void *y, lw_dtype y_dtype, const float *rstd,
                                        int64_t rows, int64_t row_stride, int64_t col0,
                                        int64_t n_heads, int64_t hd) {
    (void)stream;
    norm_job j = {.x = dx,
                  .backward = true,
                  .x16 = dx_dtype == LW_DTYPE_BF16,
                  .y = y,
                  .y16 = y_dtype == LW_DTYPE_BF16,
                  .rstd_in = rstd,
                  .stride = row_stride,
                  .col0 = col0,
                  .n_heads = n_heads,
                  .hd = hd};
    return run(&j, rows);
}
