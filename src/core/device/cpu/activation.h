/* activation.h: what the CPU's activation kernels (gelu.c, relu2.c, swiglu.c) share: their
 * operands, the output (the backward's dx) and the input each in fp32 or bf16, and the blocks
 * their loops read and write through them. Not public API. */
#ifndef LW_DEVICE_CPU_ACTIVATION_H
#define LW_DEVICE_CPU_ACTIVATION_H

#include "device/cpu/cpu.h"
#include "device/cpu/fast_math.h"

/* An activation's operands, for the pool's parts: out and x each through its fp32 pointer or its
 * bf16 one (the other NULL); dy NULL for the forward. */
typedef struct {
    float *out;
    uint16_t *out16;
    const float *x, *dy;
    const uint16_t *x16;
} lwi_activation_io;

/* out of out_dtype, x of x_dtype, each set on the pointer of its dtype; dy NULL for a forward */
static inline lwi_activation_io lwi_activation_io_of(void *out, lw_dtype out_dtype, const float *dy,
                                                     const void *x, lw_dtype x_dtype) {
    const bool out16 = out_dtype == LW_DTYPE_BF16, x16 = x_dtype == LW_DTYPE_BF16;
    return (lwi_activation_io){out16 ? NULL : out, out16 ? out : NULL, x16 ? NULL : x, dy,
                               x16 ? x : NULL};
}

/* The inputs [at, at + m) as fp32: x itself, or the bf16 input widened (exactly) into xb[m]. */
LWI_ROW_HELPER const float *lwi_activation_in(const lwi_activation_io *io, int64_t at, int64_t m,
                                              float *xb) {
    if (io->x16 == NULL) return io->x + at;
    lwi_cpu_widen_bf16(xb, io->x16 + at, m);
    return xb;
}

/* Where a block computes the outputs [at, at + m) in fp32: out itself, or ob[m] for a bf16
 * output, which a backward first fills with the bf16 values it accumulates onto. */
LWI_ROW_HELPER float *lwi_activation_out(const lwi_activation_io *io, int64_t at, int64_t m,
                                         float *ob) {
    if (io->out16 == NULL) return io->out + at;
    if (io->dy != NULL) lwi_cpu_widen_bf16(ob, io->out16 + at, m);
    return ob;
}

/* After the block: a bf16 output is its fp32 values in ob[m] rounded (computed, or accumulated,
 * in fp32, then rounded once). */
LWI_ROW_HELPER void lwi_activation_store(const lwi_activation_io *io, int64_t at, int64_t m,
                                         const float *ob) {
    if (io->out16 != NULL) lwi_cpu_round_bf16(io->out16 + at, ob, m);
}

#endif
