/* softcap.c: the logits' tanh softcap y = cap tanh(x / cap) (Gemma 2's, nanochat's), forward
 * (in place allowed) and accumulating backward from the forward's output, element-wise over the
 * pool. libm's tanhf keeps tanh's relative accuracy near 0, where an exp-based form would
 * cancel; a GPU's tanhf differs from it by an ulp or two, so the devices agree within rounding
 * on the forward and bit for bit on the backward (the same y). */
#include "device/cpu/cpu.h"
#include "device/cpu/pool.h"
#include "device/cpu/softcap.h"

/* elements per part of the pool at least */
#define GRAIN 16384

typedef struct {
    float *out;
    const float *x, *dy, *y; /* forward: x; backward: dy and the forward's y */
    float cap;
} softcap_job;

static void forward_range(void *ctx, int64_t begin, int64_t end, int32_t part) {
    (void)part;
    const softcap_job *j = ctx;
    for (int64_t i = begin; i < end; i++)
        j->out[i] = lwi_softcap_value(j->x[i], j->cap);
}

static void backward_range(void *ctx, int64_t begin, int64_t end, int32_t part) {
    (void)part;
    const softcap_job *j = ctx;
    for (int64_t i = begin; i < end; i++)
        j->out[i] += j->dy[i] * lwi_softcap_slope(j->y[i], j->cap);
}

lw_status lwi_cpu_softcap_forward(lw_stream *stream, float *y, const float *x, int64_t n,
                                  float cap) {
    (void)stream;
    softcap_job j = {.out = y, .x = x, .cap = cap};
    lwi_cpu_parallel(n, GRAIN, forward_range, &j);
    return LW_OK;
}

lw_status lwi_cpu_softcap_backward(lw_stream *stream, float *dx, const float *dy, const float *y,
                                   int64_t n, float cap) {
    (void)stream;
    softcap_job j = {.out = dx, .dy = dy, .y = y, .cap = cap};
    lwi_cpu_parallel(n, GRAIN, backward_range, &j);
    return LW_OK;
}
