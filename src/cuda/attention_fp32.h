// attention_fp32.h: the launchers of the fp32 attention kernels (attention_fp32.cu), for
// attention.cu's entries, which check the shapes against what these say and choose between them
// and the tensor-core kernels (attention_mma.h). Head dims up to lwc_flash_head_dim_limit(), any
// value. C++ linkage: a declaration that drifted from its definition would not link. nvcc only.
#ifndef LWC_ATTENTION_FP32_H
#define LWC_ATTENTION_FP32_H

#include <cuda_runtime.h>
#include <stdint.h>

// The largest head dim (c / nh) the kernels serve.
int64_t lwc_flash_head_dim_limit(void);
// Dynamic shared memory per block of the forward or backward kernels for head dim hd (0 past the
// limit): the caller checks it against the device's opt-in maximum.
size_t lwc_flash_smem_bytes(int64_t hd, bool backward);
// out[b, t, c] and lse[b, nh, t] from qkv[b, t, c + 2 nkv hd] (nh query heads, nkv KV heads,
// window 0 or w: lw_model_kernels.h's contract); rowmax[b, nh, t] (optional): each row's largest
// scaled score (NaN for a row whose sum is NaN). Each returns the launch's error.
cudaError_t lwc_flash_forward(cudaStream_t stream, float *out, float *lse, float *rowmax,
                              const float *qkv, int64_t b, int64_t t, int64_t c, int64_t nh,
                              int64_t nkv, int64_t window);
// dd[b, nh, t] = rowsum(dout * out) over each head's channels, in double rounded once: the
// backward's D, for these kernels and attention_mma.cu's (dd: the entry's scratch). dout16[b, t,
// c] (optional; head dim a multiple of 32): dout rounded to bf16 as attention_mma.cu's staging
// rounds it, for its pipelined kernels.
cudaError_t lwc_flash_rowdot(cudaStream_t stream, float *dd, const float *dout, const void *out,
                             bool out_bf16, int64_t b, int64_t t, int64_t c, int64_t nh,
                             uint16_t *dout16);
// dqkv[b, t, c + 2 nkv hd] += the backward, from dd (lwc_flash_rowdot's, queued before).
cudaError_t lwc_flash_backward(cudaStream_t stream, float *dqkv, const float *dd, const float *dout,
                               const float *qkv, const float *lse, int64_t b, int64_t t, int64_t c,
                               int64_t nh, int64_t nkv, int64_t window);

#endif
