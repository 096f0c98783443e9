/* relu2.c: ReLU^2 (the squared ReLU of Primer, nanochat's MLP activation), forward and
 * accumulating backward, element-wise over the pool, with fp32 or bf16 inputs and outputs as
 * gelu.c takes them. */
#include "device/cpu/cpu.h"
#include "device/cpu/fast_math.h"
#include "device/cpu/pool.h"

/* elements widened or rounded per pass (stack arrays in L1) */
#define BLOCK 256
/* elements per part of the pool at least: below that a thread's wake-up costs more than it saves */
#define GRAIN 16384

/* max(x, 0) as a select in which a NaN x, failing the comparison, passes through */
LWI_ROW_HELPER float relu(float x) { return x < 0.0f ? 0.0f : x; }

/* y[0, m) = max(x, 0)^2 */
LWI_ROW_HELPER void forward_block(float *y, const float *x, int64_t m) {
    for (int64_t i = 0; i < m; i++) {
        const float r = relu(x[i]);
        y[i] = r * r;
    }
}

/* dx[0, m) += dy * 2 max(x, 0) */
LWI_ROW_HELPER void backward_block(float *dx, const float *dy, const float *x, int64_t m) {
    for (int64_t i = 0; i < m; i++)
        dx[i] += dy[i] * (2.0f * relu(x[i]));
}

/* The kernels' arguments, for the pool's parts; dy is NULL for the forward. */
typedef struct {
    float *out;
    uint16_t *out16; /* the forward's output (the backward's dx) in bf16 instead of out, or NULL */
    const float *x, *dy;
    const uint16_t *x16; /* the input in bf16 instead of x, or NULL */
} relu2_job;

LWI_SIMD_CLONES
static void relu2_range(void *ctx, int64_t begin, int64_t end, int32_t part) {
    (void)part;
    const relu2_job *j = ctx;
    for (int64_t i0 = begin; i0 < end; i0 += BLOCK) {
        const int64_t m = end - i0 < BLOCK ? end - i0 : BLOCK;
        float xb[BLOCK], ob[BLOCK];
        const float *x = xb;
        if (j->x16 != NULL)
            lwi_cpu_widen_bf16(xb, j->x16 + i0, m);
        else
            x = j->x + i0;
        if (j->dy == NULL && j->out16 != NULL) { /* computed in fp32, then rounded */
            forward_block(ob, x, m);
            lwi_cpu_round_bf16(j->out16 + i0, ob, m);
        } else if (j->dy == NULL) {
            forward_block(j->out + i0, x, m);
        } else if (j->out16 != NULL) { /* accumulated in fp32, then rounded */
            lwi_cpu_widen_bf16(ob, j->out16 + i0, m);
            backward_block(ob, j->dy + i0, x, m);
            lwi_cpu_round_bf16(j->out16 + i0, ob, m);
        } else
            backward_block(j->out + i0, j->dy + i0, x, m);
    }
}

lw_status lwi_cpu_relu2_forward(lw_stream *stream, void *y, lw_dtype y_dtype, const void *x,
                                lw_dtype x_dtype, int64_t n) {
    (void)stream;
    const bool y16 = y_dtype == LW_DTYPE_BF16, x16 = x_dtype == LW_DTYPE_BF16;
    relu2_job j = {y16 ? NULL : y, y16 ? y : NULL, x16 ? NULL : x, NULL, x16 ? x : NULL};
    lwi_cpu_parallel(n, GRAIN, relu2_range, &j);
    return LW_OK;
}

lw_status lwi_cpu_relu2_backward(lw_stream *stream, void *dx, lw_dtype dx_dtype, const float *dy,
                                 const void *x, lw_dtype x_dtype, int64_t n) {
    (void)stream;
    const bool dx16 = dx_dtype == LW_DTYPE_BF16, x16 = x_dtype == LW_DTYPE_BF16;
    relu2_job j = {dx16 ? NULL : dx, dx16 ? dx : NULL, x16 ? NULL : x, dy, x16 ? x : NULL};
    lwi_cpu_parallel(n, GRAIN, relu2_range, &j);
    return LW_OK;
}
