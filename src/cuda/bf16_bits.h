/* bf16_bits.h: rounding to bf16 on a GPU, for the .cu files that write bf16 (the conversions,
 * the layer norm's, GELU's and the attention's bf16 outputs): one definition, so that every
 * kernel gives the bits the CPU's rounding gives (core/device/cpu/bf16.c), NaN included; and
 * the exact widening of the kernels that read bf16 inputs. CUDA only. */
#ifndef LWC_BF16_BITS_H
#define LWC_BF16_BITS_H

/* The bf16 nearest to x, ties to even, on its bits: __float2bfloat16_rn agrees on every other
 * value but promises a NaN no more than being a NaN (its emulation for older GPUs makes each one
 * 0x7FFF), where lw.h keeps a NaN's sign and top payload bits and sets its quiet bit. Adding
 * 0x7FFF plus the lowest kept bit carries into the top half exactly when the dropped half is past
 * the midpoint, or at it with the kept half odd; the carry runs into the exponent where it must
 * (subnormal to normal, past the largest finite to infinity). A NaN would carry into an
 * infinity, so it keeps its own top half, quieted. */
__device__ __forceinline__ unsigned short lwc_round_bf16(float x) {
    const unsigned int u = __float_as_uint(x);
    const unsigned int rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    const unsigned int quieted = (u >> 16) | 0x0040u;
    return (unsigned short)((u & 0x7FFFFFFFu) > 0x7F800000u ? quieted : rounded);
}

/* Where a kernel writes value i of an output of fp32 or (bf16) bf16 bits: the output's element
 * type picks the store. */
__device__ __forceinline__ void lwc_store(float *y, long long i, float v) { y[i] = v; }
__device__ __forceinline__ void lwc_store(unsigned short *y, long long i, float v) {
    y[i] = lwc_round_bf16(v);
}

/* Value i of an input of fp32 or (unsigned short) bf16 bits, as fp32: a bf16 widened exactly. */
__device__ __forceinline__ float lwc_load(const float *x, long long i) { return x[i]; }
__device__ __forceinline__ float lwc_load(const unsigned short *x, long long i) {
    return __uint_as_float((unsigned int)x[i] << 16);
}

#endif
