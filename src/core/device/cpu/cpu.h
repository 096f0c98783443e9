/* cpu.h: the CPU device's kernels, one family per file of device/cpu/, each the reference
 * implementation of its device-table entry (device.h has what each computes). Host memory;
 * the stream is the identity (work runs when called). Not public API. */
#ifndef LW_DEVICE_CPU_H
#define LW_DEVICE_CPU_H

#include "device/device.h"

#include <stdbool.h>
#include <string.h>

/* Sum of squares in double (four partial sums): the norms of the gradient and of Muon's update. */
double lwi_cpu_sum_squares(const float *x, int64_t n);

/* A model kernel's weights or activations x (n values of dtype) as fp32: *out = x itself for
 * fp32, else x widened into new memory that *owned holds (the caller frees it; NULL when nothing
 * was made). */
lw_status lwi_cpu_as_f32(const void *x, lw_dtype dtype, int64_t n, const float **out,
                         float **owned);
/* y[n] = x[n] rounded to bf16 (nearest even, lw_vec_to_bf16's bits), on the calling thread: a
 * kernel's row or block of bf16 output. */
void lwi_cpu_round_bf16(uint16_t *y, const float *x, int64_t n);
/* y[n] = x[n] (bf16) widened, exactly, on the calling thread: a kernel's block of bf16 input. */
void lwi_cpu_widen_bf16(float *y, const uint16_t *x, int64_t n);
/* Element i of an array of fp32, or of bf16 (widened: exact): a kernel reading either. */
static inline float lwi_cpu_load(const void *x, bool bf16, int64_t i) {
    if (!bf16) return ((const float *)x)[i];
    const uint32_t u = (uint32_t)((const uint16_t *)x)[i] << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Every kernel of the list (kernel_list.h), lwi_cpu_<name>, one family per file: vec.c, muon.c
 * (Newton-Schulz and Muon's step, its TP halves), muon_rescale.c (Muon's row equilibration,
 * renormalisation and decay at the step), adamw.c, lion.c, linear.c, embedding.c (the
 * vocabulary-range form, which serves the whole vocabulary too), layernorm.c, gelu.c,
 * rmsnorm.c, relu2.c, swiglu.c (the activations: their operands in activation.h), softcap.c (the
 * logits' softcap), attention.c, cross_entropy.c, moe.c (router, load-balancing loss), gather.c
 * (gather, combine), bf16.c (the conversions between fp32 and bf16), rope.c (rotary embeddings),
 * head_rmsnorm.c (QK norm), value_gate.c and residual_mix.c (nanochat's value embeddings' gate
 * and residual scalars); copy_2d in cpu.c with the memory entries. */
#define LWI_CPU_SIZE_DECLARATION(name, params, args) int64_t lwi_cpu_##name params;
LWI_SCRATCH_SIZES(LWI_CPU_SIZE_DECLARATION)
#undef LWI_CPU_SIZE_DECLARATION
#define LWI_CPU_DECLARATION(name, params, args, check) lw_status lwi_cpu_##name params;
LWI_KERNELS(LWI_CPU_DECLARATION)
#undef LWI_CPU_DECLARATION

#endif
