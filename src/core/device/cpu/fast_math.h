/* fast_math.h: what the CPU kernels' element-wise loops share: a branch-free exp that vectorises
 * (libm's expf is a call per element), a row sum in lanes, 8-float vectors for register tiles,
 * and the attribute that compiles a hot loop twice, for AVX2 and for the baseline x86-64 the
 * library is built for, picking one at load time. The CMake
 * build turns off floating-point contraction for these files, so both builds round alike and a
 * result does not depend on the machine that computed it. Not public API. */
#ifndef LW_DEVICE_CPU_FAST_MATH_H
#define LW_DEVICE_CPU_FAST_MATH_H

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__)
#define LWI_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define LWI_SIMD_CLONES
#endif
/* A helper of a LWI_SIMD_CLONES function: inlined, so that it is built for each clone's target. */
#define LWI_ROW_HELPER static inline __attribute__((always_inline))

/* Independent accumulators per row reduction: without -ffast-math the compiler may not reorder
 * a single running sum, but it does vectorise LWI_LANES separate ones. */
#define LWI_LANES 8

/* sum_i x[i] in double, in LWI_LANES partial sums (the same order at every vector width) */
LWI_ROW_HELPER double lwi_row_sum(const float *x, int64_t n) {
    double acc[LWI_LANES] = {0};
    int64_t i = 0;
    for (; i + LWI_LANES <= n; i += LWI_LANES)
        for (int k = 0; k < LWI_LANES; k++)
            acc[k] += (double)x[i + k];
    double s = 0;
    for (; i < n; i++)
        s += (double)x[i];
    for (int k = 0; k < LWI_LANES; k++)
        s += acc[k];
    return s;
}

/* Arguments below this give exp_fast's smallest normal result; callers clamp to it (a select,
 * which vectorises) where x can be lower: e^-87 is below 1e-37, nothing beside a sum of 1. */
#define LWI_EXP_MIN (-87.0f)

/* Eight floats in a vector register (GCC's vector extensions: AVX in the x86-64-v3 clone, two
 * SSE halves in the baseline one), for kernels that keep tiles of a product in registers. */
typedef float lwi_v8f __attribute__((vector_size(32)));
typedef uint32_t lwi_v8u __attribute__((vector_size(32)));
LWI_ROW_HELPER lwi_v8f lwi_v8_load(const float *p) {
    lwi_v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}
LWI_ROW_HELPER void lwi_v8_store(float *p, lwi_v8f v) { memcpy(p, &v, sizeof v); }
LWI_ROW_HELPER lwi_v8f lwi_v8_splat(float x) { return (lwi_v8f){0} + x; }
/* lanewise a > b ? a : b (b where a is NaN) */
LWI_ROW_HELPER lwi_v8f lwi_v8_max(lwi_v8f a, lwi_v8f b) {
    lwi_v8u m = (lwi_v8u)(a > b);
    return (lwi_v8f)((m & (lwi_v8u)a) | (~m & (lwi_v8u)b));
}

/* exp(x) for x in [-87, 88] within ~2 ulp (Cephes expf: n = round(x / ln 2), a degree-5
 * polynomial on the remainder, 2^n built in the exponent bits). Branch-free so that loops
 * calling it vectorise; the caller keeps x in range. A NaN x gives NaN. Defined once for a float
 * and once for eight (T a float type, U the unsigned integers of its size). */
#define LWI_DEFINE_EXP_FAST(name, T, U)                                                            \
    LWI_ROW_HELPER T name(T x) {                                                                   \
        /* Adding 1.5 * 2^23 rounds x / ln 2 to the nearest integer n and leaves n in the low     \
         * mantissa bits of t (bits(t) = 0x4B400000 + n): no SSE4.1 roundps, and no float-to-int  \
         * conversion, which would be undefined behaviour for a NaN x. */                          \
        T t = x * 1.44269504088896341f + 12582912.0f;                                              \
        T nf = t - 12582912.0f;                                                                    \
        /* ln 2 split in two so that nf * hi is exact and the remainder keeps its low bits */      \
        T r = x - nf * 0.693359375f + nf * 2.12194440e-4f;                                         \
        T p = r * 1.9875691500e-4f + 1.3981999507e-3f;                                             \
        p = p * r + 8.3334519073e-3f;                                                              \
        p = p * r + 4.1665795894e-2f;                                                              \
        p = p * r + 1.6666665459e-1f;                                                              \
        p = p * r + 5.0000001201e-1f;                                                              \
        p = p * (r * r) + r + 1.0f;                                                                \
        U tb;                                                                                      \
        memcpy(&tb, &t, sizeof tb);                                                                \
        U bits = (tb - 0x4B400000u + 127u) << 23; /* 2^n */                                        \
        T scale;                                                                                   \
        memcpy(&scale, &bits, sizeof scale);                                                       \
        return p * scale;                                                                          \
    }
LWI_DEFINE_EXP_FAST(lwi_exp_fast, float, uint32_t)
LWI_DEFINE_EXP_FAST(lwi_v8_exp_fast, lwi_v8f, lwi_v8u)

#endif
