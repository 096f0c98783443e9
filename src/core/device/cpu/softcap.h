/* softcap.h: the logits' tanh softcap as the CPU computes it, one value at a time, shared by the
 * softcap kernels (softcap.c) and the LM head's cross-entropy (cross_entropy.c), so that a capped
 * cross-entropy caps exactly as lw_softcap_forward does. Not public API. */
#ifndef LW_DEVICE_CPU_SOFTCAP_H
#define LW_DEVICE_CPU_SOFTCAP_H

#include <math.h>

/* cap tanh(x / cap): libm's tanhf keeps tanh's relative accuracy near 0, where an exp-based form
 * would cancel */
static inline float lwi_softcap_value(float x, float cap) { return cap * tanhf(x / cap); }

/* d(cap tanh(x / cap)) / dx from the capped value y: 1 - t^2, t = y / cap, as (1 - t)(1 + t),
 * since 1 - t is exact for |t| in [1/2, 1], where 1 - t^2 would lose the rounding of t^2 against
 * a small difference */
static inline float lwi_softcap_slope(float y, float cap) {
    const float t = y / cap;
    return (1.0f - t) * (1.0f + t);
}

#endif
