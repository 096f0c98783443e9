// softcap.h: the logits' tanh softcap on a GPU, one value at a time, shared by the softcap
// entries (softcap.cu) and the LM head's cross-entropy (cross_entropy.cu), so that a capped
// cross-entropy caps exactly as lw_softcap_forward does. The CPU's operations
// (device/cpu/softcap.h), each rounded to nearest with no FMA contraction; tanhf is CUDA's.
#ifndef LW_CUDA_SOFTCAP_H
#define LW_CUDA_SOFTCAP_H

#include "cuda/bf16_bits.h"

// cap tanh(x / cap)
__device__ __forceinline__ float lwc_softcap_value(float x, float cap) {
    return __fmul_rn(cap, tanhf(__fdiv_rn(x, cap)));
}

// The slope of the cap at its output y: (1 - t)(1 + t), t = y / cap (1 - t^2 without the
// cancellation of t^2 near 1)
__device__ __forceinline__ float lwc_softcap_slope(float y, float cap) {
    const float t = __fdiv_rn(y, cap);
    return __fmul_rn(__fsub_rn(1.0f, t), __fadd_rn(1.0f, t));
}

// Logit j of a row (fp32, or bf16 widened) as a capped softmax sees it: capped when cap > 0 (a
// uniform branch), as it is at 0
template <typename L>
__device__ __forceinline__ float lwc_capped_logit(const L *row, int64_t j, float cap) {
    const float x = lwc_load(row, j);
    return cap > 0.0f ? lwc_softcap_value(x, cap) : x;
}

#endif
