/* gelu.c: GELU in the tanh form, forward and accumulating backward. It is evaluated through
 * the identity 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)) with a branch-free exp (fast_math.h), so
 * the loops vectorise (libm's tanhf does not) and y keeps its relative accuracy for negative x. */
#include "device/cpu/activation.h"
#include "device/cpu/pool.h"

#define SQRT_2_OVER_PI 0.7978845608028654f
#define GELU_C         0.044715f
/* Beyond |x| = 9 GELU is x or 0 and its slope 1 or 0 to float precision (the neglected terms are
 * below 1e-27), so x is clamped there first: exp stays in range, 1 / (1 + exp) out of the
 * denormals, and x^3 cannot overflow into inf * 0 = NaN. Clamps are selects (which vectorise);
 * NaN passes through them, so a NaN input still gives NaN. */
#define X_MAX 9.0f
/* elements clamped per pass; three stack arrays of it stay in L1 */
#define BLOCK 256
/* elements per part of the pool at least: below that a thread's wake-up costs more than it saves */
#define GRAIN 16384

/* Clamps x[0, m) into lo = max(x, -X_MAX) and vc = min(lo, X_MAX), then sets e = exp(-2u), u =
 * sqrt(2/pi) (vc + c vc^3), what forward and backward both start from. The clamp is a pass of
 * its own: fused with the arithmetic, GCC (without -fno-trapping-math) precomputes the
 * constant-clamped path into a branch, and the loop no longer vectorises. */
LWI_ROW_HELPER void exp_block(float *lo, float *vc, float *e, const float *x, int64_t m) {
    for (int64_t i = 0; i < m; i++) {
        float l = x[i] < -X_MAX ? -X_MAX : x[i];
        lo[i] = l;
        vc[i] = l > X_MAX ? X_MAX : l;
    }
    for (int64_t i = 0; i < m; i++) {
        float v = vc[i];
        e[i] = lwi_exp_fast(-2.0f * SQRT_2_OVER_PI * (v + GELU_C * v * v * v));
    }
}

/* y[0, m) = 0.5 x (1 + tanh u) = x / (1 + exp(-2u)); lo, not vc, keeps y = x above X_MAX */
LWI_ROW_HELPER void forward_block(float *y, const float *lo, const float *e, int64_t m) {
    for (int64_t i = 0; i < m; i++) y[i] = lo[i] / (1.0f + e[i]);
}

/* dx[0, m) += dy * GELU'(x) */
LWI_ROW_HELPER void backward_block(float *dx, const float *dy, const float *vc, const float *e,
                                   int64_t m) {
    for (int64_t i = 0; i < m; i++) {
        float v = vc[i];
        float s = 1.0f / (1.0f + e[i]);
        /* d/dx [x s(2u)] = s + 2 x u' s (1 - s), the tanh form's 0.5 (1 + tanh u) +
         * 0.5 x u' sech^2 u; 1 - s is taken as e s, which does not cancel where s -> 1 */
        float du = SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_C * v * v);
        dx[i] += dy[i] * (s + 2.0f * v * du * (e[i] * s * s));
    }
}

LWI_SIMD_CLONES
static void gelu_range(void *ctx, int64_t begin, int64_t end, int32_t part) {
    (void)part;
    const lwi_activation_io *io = ctx;
    float lo[BLOCK], vc[BLOCK], e[BLOCK];
    for (int64_t i0 = begin; i0 < end; i0 += BLOCK) {
        int64_t m = end - i0 < BLOCK ? end - i0 : BLOCK;
        float xb[BLOCK], ob[BLOCK];
        exp_block(lo, vc, e, lwi_activation_in(io, i0, m, xb), m);
        float *out = lwi_activation_out(io, i0, m, ob);
        if (io->dy == NULL)
            forward_block(out, lo, e, m);
        else
            backward_block(out, io->dy + i0, vc, e, m);
        lwi_activation_store(io, i0, m, ob);
    }
}

/* the forward (dy NULL) or the backward over the pool, each part a range of elements */
static lw_status gelu(void *out, lw_dtype out_dtype, const float *dy, const void *x,
                      lw_dtype x_dtype, int64_t n) {
    lwi_activation_io io = lwi_activation_io_of(out, out_dtype, dy, x, x_dtype);
    lwi_cpu_parallel(n, GRAIN, gelu_range, &io);
    return LW_OK;
}

lw_status lwi_cpu_gelu_forward(lw_stream *stream, void *y, lw_dtype y_dtype, const void *x,
                               lw_dtype x_dtype, int64_t n) {
    (void)stream;
    return gelu(y, y_dtype, NULL, x, x_dtype, n);
}

lw_status lwi_cpu_gelu_backward(lw_stream *stream, void *dx, lw_dtype dx_dtype, const float *dy,
                                const void *x, lw_dtype x_dtype, int64_t n) {
    (void)stream;
    return gelu(dx, dx_dtype, dy, x, x_dtype, n);
}
