/* gelu.c: GELU in the tanh form, forward and accumulating backward. It is evaluated through
 * the identity 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)) with a branch-free exp, so the loops
 * vectorise (libm's tanhf does not) and y keeps its relative accuracy for negative x. */
#include "device/cpu/cpu.h"

#include <string.h>

#define SQRT_2_OVER_PI 0.7978845608028654f
#define GELU_C         0.044715f
/* Beyond |x| = 9 GELU is x or 0 and its slope 1 or 0 to float precision (the neglected terms are
 * below 1e-27), so x is clamped there first: exp stays in range, 1 / (1 + exp) out of the
 * denormals, and x^3 cannot overflow into inf * 0 = NaN. Clamps are selects (which vectorise);
 * NaN passes through them, so a NaN input still gives NaN. */
#define X_MAX 9.0f
/* elements clamped per pass; two stack arrays of it stay in L1 */
#define BLOCK 256

/* exp(x) for x in [-87, 88] within ~2 ulp (Cephes expf: n = round(x / ln 2), a degree-5
 * polynomial on the remainder, 2^n built in the exponent bits). Branch-free so that loops
 * calling it vectorise; the caller keeps x in range. */
static inline float exp_fast(float x) {
    /* Adding 1.5 * 2^23 rounds x / ln 2 to the nearest integer n and leaves n in the low
     * mantissa bits of t (bits(t) = 0x4B400000 + n): no SSE4.1 roundps, and no float-to-int
     * conversion, which would be undefined behaviour for a NaN x. */
    float t = x * 1.44269504088896341f + 12582912.0f;
    float nf = t - 12582912.0f;
    /* ln 2 split in two so that nf * hi is exact and the remainder keeps its low bits */
    float r = x - nf * 0.693359375f + nf * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    uint32_t tb;
    memcpy(&tb, &t, sizeof tb);
    uint32_t bits = (tb - 0x4B400000u + 127u) << 23; /* 2^n */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* Clamps x[0, m) into lo = max(x, -X_MAX) and vc = min(lo, X_MAX). A pass of its own: fused
 * with the arithmetic, GCC (without -fno-trapping-math) precomputes the constant-clamped path
 * into a branch, and the loop no longer vectorises. */
static void clamp_block(float *lo, float *vc, const float *x, int64_t m) {
    for (int64_t i = 0; i < m; i++) {
        float l = x[i] < -X_MAX ? -X_MAX : x[i];
        lo[i] = l;
        vc[i] = l > X_MAX ? X_MAX : l;
    }
}

lw_status lwi_cpu_gelu_forward(lw_stream *stream, float *y, const float *x, int64_t n) {
    (void)stream;
    float lo[BLOCK], vc[BLOCK];
    for (int64_t i0 = 0; i0 < n; i0 += BLOCK) {
        int64_t m = n - i0 < BLOCK ? n - i0 : BLOCK;
        clamp_block(lo, vc, x + i0, m);
        float *yb = y + i0;
        for (int64_t i = 0; i < m; i++) {
            float v = vc[i];
            float e = exp_fast(-2.0f * SQRT_2_OVER_PI * (v + GELU_C * v * v * v)); /* exp(-2u) */
            /* 0.5 x (1 + tanh u) = x / (1 + exp(-2u)); lo, not vc, keeps y = x above X_MAX */
            yb[i] = lo[i] / (1.0f + e);
        }
    }
    return LW_OK;
}

lw_status lwi_cpu_gelu_backward(lw_stream *stream, float *dx, const float *dy, const float *x,
                                int64_t n) {
    (void)stream;
    float lo[BLOCK], vc[BLOCK];
    for (int64_t i0 = 0; i0 < n; i0 += BLOCK) {
        int64_t m = n - i0 < BLOCK ? n - i0 : BLOCK;
        clamp_block(lo, vc, x + i0, m);
        float *dxb = dx + i0;
        const float *dyb = dy + i0;
        for (int64_t i = 0; i < m; i++) {
            float v = vc[i];
            float e = exp_fast(-2.0f * SQRT_2_OVER_PI * (v + GELU_C * v * v * v));
            float s = 1.0f / (1.0f + e);
            /* d/dx [x s(2u)] = s + 2 x u' s (1 - s), the tanh form's 0.5 (1 + tanh u) +
             * 0.5 x u' sech^2 u; 1 - s is taken as e s, which does not cancel where s -> 1 */
            float du = SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_C * v * v);
            dxb[i] += dyb[i] * (s + 2.0f * v * du * (e * s * s));
        }
    }
    return LW_OK;
}
