/* exp_fast.h: the CPU's branch-free exp (core/device/cpu/fast_math.h, lwi_exp_fast) on a GPU,
 * operation for operation, each rounded to nearest with no FMA contraction, so that the kernels
 * built on it (GELU, SwiGLU) give the CPU's bits. The caller keeps x in [-87, 88]. CUDA only. */
#ifndef LWC_EXP_FAST_H
#define LWC_EXP_FAST_H

#include <stdint.h>

/* Cephes' expf polynomial on x - n ln 2, n = round(x / ln 2) taken with the 1.5 * 2^23 trick,
 * 2^n built in the exponent. */
__device__ __forceinline__ float lwc_exp_fast(float x) {
    const float t = __fadd_rn(__fmul_rn(x, 1.44269504088896341f), 12582912.0f);
    const float nf = __fsub_rn(t, 12582912.0f);
    const float r =
        __fadd_rn(__fsub_rn(x, __fmul_rn(nf, 0.693359375f)), __fmul_rn(nf, 2.12194440e-4f));
    float p = 1.9875691500e-4f;
    p = __fadd_rn(__fmul_rn(p, r), 1.3981999507e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 8.3334519073e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 4.1665795894e-2f);
    p = __fadd_rn(__fmul_rn(p, r), 1.6666665459e-1f);
    p = __fadd_rn(__fmul_rn(p, r), 5.0000001201e-1f);
    p = __fadd_rn(__fadd_rn(__fmul_rn(p, __fmul_rn(r, r)), r), 1.0f);
    const uint32_t bits = (__float_as_uint(t) - 0x4B400000u + 127u) << 23; // 2^n
    return __fmul_rn(p, __uint_as_float(bits));
}

#endif
