/* residual_mix.c: a layer's residual scalars, y = a x + b x0 (nanochat's resid_lambdas[i] and
 * x0_lambdas[i] before block i), and the backward with the scalars' gradients. Those are sums
 * over every element: partial sums in double over fixed blocks of BLOCK elements, added in block
 * order, so the result depends on n alone, not on the threads. */
#include "device/cpu/cpu.h"
#include "device/cpu/pool.h"

#include <stdlib.h>

/* elements per part of the pool at least, and per partial sum */
#define GRAIN 16384
#define BLOCK 8192

typedef struct {
    float *y, *dx, *dx0;
    const float *x, *x0, *dy;
    float a, b;
    int64_t n;
    double *partials; /* [2, blocks]: sum dy x, then sum dy x0 */
    int64_t blocks;
} mix_job;

static void forward_range(void *ctx, int64_t begin, int64_t end, int32_t part) {
    (void)part;
    const mix_job *j = ctx;
    for (int64_t i = begin; i < end; i++)
        j->y[i] = j->a * j->x[i] + j->b * j->x0[i];
}

static void backward_blocks(void *ctx, int64_t begin, int64_t end, int32_t part) {
    (void)part;
    const mix_job *j = ctx;
    for (int64_t k = begin; k < end; k++) {
        const int64_t i1 = (k + 1) * BLOCK < j->n ? (k + 1) * BLOCK : j->n;
        double sa = 0, sb = 0;
        for (int64_t i = k * BLOCK; i < i1; i++) {
            sa += (double)j->dy[i] * (double)j->x[i];
            sb += (double)j->dy[i] * (double)j->x0[i];
            j->dx[i] += j->a * j->dy[i];
            j->dx0[i] += j->b * j->dy[i];
        }
        j->partials[k] = sa, j->partials[j->blocks + k] = sb;
    }
}

lw_status lwi_cpu_residual_mix_forward(lw_stream *stream, float *y, const float *x, const float *x0,
                                       const float *a, const float *b, int64_t n) {
    (void)stream;
    mix_job j = {.y = y, .x = x, .x0 = x0, .a = *a, .b = *b, .n = n};
    lwi_cpu_parallel(n, GRAIN, forward_range, &j);
    return LW_OK;
}

lw_status lwi_cpu_residual_mix_backward(lw_stream *stream, float *dx, float *dx0, float *da,
                                        float *db, const float *dy, const float *x, const float *x0,
                                        const float *a, const float *b, int64_t n) {
    (void)stream;
    const int64_t blocks = (n + BLOCK - 1) / BLOCK;
    double *partials = malloc(sizeof(double) * (size_t)(2 * blocks));
    if (partials == NULL)
        return lwi_fail(LW_ERR_NOMEM, "residual mix backward: out of memory for %lld partial sums",
                        (long long)(2 * blocks));
    mix_job j = {.dx = dx,
                 .dx0 = dx0,
                 .dy = dy,
                 .x = x,
                 .x0 = x0,
                 .a = *a,
                 .b = *b,
                 .n = n,
                 .partials = partials,
                 .blocks = blocks};
    lwi_cpu_parallel(blocks, GRAIN / BLOCK, backward_blocks, &j);
    double sa = 0, sb = 0;
    for (int64_t k = 0; k < blocks; k++)
        sa += partials[k], sb += partials[blocks + k];
    free(partials);
    *da += (float)sa;
    *db += (float)sb;
    return LW_OK;
}
