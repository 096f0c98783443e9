/* bf16_reference.h: what lw_vec_to_bf16 and lw_vec_from_bf16 must give, found another way than
 * the kernels find it: the rounding in double arithmetic (the value scaled so that bf16's last
 * place is 1, rounded to an integer by nearbyint in the default mode, ties to even, scaled
 * back), the widening from the fields' values (ldexp), never from shifting bits. A value's bits
 * are only read to tell a NaN's sign and payload, and written to encode a value that bf16 holds
 * exactly. Shared by test_bf16 (the CPU against it, element by element) and test_kernels (every
 * device against it). */
#ifndef LW_TEST_BF16_REFERENCE_H
#define LW_TEST_BF16_REFERENCE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float f32_of_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* The value of the bf16 b: sign, 8 exponent bits (bias 127), 7 mantissa bits; subnormals (the
 * exponent field 0) are mantissa * 2^-133, normals (128 + mantissa) * 2^(exponent - 134). */
static inline double bf16_reference_value(uint16_t b) {
    const int exponent = (b >> 7) & 0xFF, mantissa = b & 0x7F;
    double v;
    if (exponent == 0xFF)
        v = mantissa != 0 ? NAN : INFINITY;
    else if (exponent == 0)
        v = ldexp((double)mantissa, -133);
    else
        v = ldexp(128.0 + mantissa, exponent - 134);
    return (b & 0x8000) ? -v : v;
}

/* The bf16 bits of a value bf16 holds exactly (zeros and infinities of either sign too). */
static inline uint16_t bf16_reference_encode(double v) {
    return (uint16_t)(f32_bits((float)v) >> 16);
}

/* The NaN that x, a NaN, becomes: its sign and its payload's top 7 bits, quiet. */
static inline uint16_t bf16_reference_nan(float x) {
    return (uint16_t)((f32_bits(x) >> 16) | 0x0040u);
}

/* x rounded to bf16, to nearest, ties to even (IEEE roundTiesToEven on 8 significant bits and
 * fp32's exponent range). A finite nonzero x is m 2^e with 0.5 <= |m| < 1 (frexp): bf16's last
 * place there is 2^(e - 8), or 2^-133, its subnormals' spacing, below its smallest normal
 * 2^-126. x / place is exact in double (x has 24 bits), so nearbyint rounds it once, as IEEE
 * says, ties to even; a magnitude of 2^128 or more after rounding is past the largest finite bf16
 * (255 2^120), an infinity. */
static inline uint16_t bf16_reference(float x) {
    if (isnan(x)) return bf16_reference_nan(x);
    if (isinf(x) || x == 0.0f) return bf16_reference_encode(x);
    int e = 0;
    (void)frexp((double)x, &e);
    const int place = e - 8 < -133 ? -133 : e - 8;
    const double r = ldexp(nearbyint(ldexp((double)x, -place)), place);
    if (fabs(r) >= 0x1p128) return bf16_reference_encode(r < 0 ? -INFINITY : INFINITY);
    return bf16_reference_encode(r);
}

#endif
