// attention_mma.h: the launchers of the tensor-core attention kernels (attention_mma.cu), for
// attention.cu's entries, which choose between them and the fp32 kernels: the same contract on
// tensor cores (mma.sync, bf16 operands rounded from an fp32 qkv as they are staged or read from
// a bf16 one as they are, fp32 sums, an fp32 or bf16 out), head dims 64 and 128, 16-byte aligned
// tensors (float4 loads, float2 stores), compute capability 8.0 or later. C++ linkage: a
// declaration that drifted from its definition would not link. nvcc only.
#ifndef LWC_ATTENTION_MMA_H
#define LWC_ATTENTION_MMA_H

#include <cuda_runtime.h>
#include <stdint.h>

// Whether the kernels serve head dim hd.
bool lwc_flash_mma_serves(int64_t hd);
// Dynamic shared memory per block (the larger of the backward's two kernels), 0 for a head dim
// they do not serve: the caller checks it against the device's opt-in maximum. pipelined: the
// kernels that double-buffer their steps (lwc_flash_mma_forward's pipelined, dout16).
size_t lwc_flash_mma_smem_bytes(int64_t hd, bool backward, bool pipelined);
// Blocks of each kernel's one-dimensional grid: the caller keeps it within INT_MAX.
int64_t lwc_flash_mma_blocks(int64_t b, int64_t t, int64_t nh);
// out[b, t, c] and lse[b, nh, t] from qkv[b, t, c + 2 nkv hd] (nh query heads, nkv KV heads,
// window 0 or w: lw_model_kernels.h's contract); rowmax[b, nh, t] (optional): each row's largest
// scaled score (mma_layout.h's lwc_fa_max_score); each returns the launch's error. pipelined
// (a bf16 qkv; an fp32 one ignores it): K and V staged by cp.async a step ahead, the same
// results bit for bit. order (either launcher): the grids' block order, mma_layout.h's
// LWC_FA_ORDER_HEADS (a head's tiles together) or LWC_FA_ORDER_WORK (tile-major, every head's
// heaviest tile first): the same blocks, the same results bit for bit.
cudaError_t lwc_flash_mma_forward(cudaStream_t stream, void *out, bool out_bf16, float *lse,
                                  float *rowmax, const void *qkv, bool qkv_bf16, int64_t b,
                                  int64_t t, int64_t c, int64_t nh, int64_t nkv, int64_t window,
                                  bool pipelined, int order);
// dqkv[b, t, c + 2 nkv hd] += the backward, from dd (attention.cu's rowsum(dout * out), queued
// before). dout16[b, t, c] (optional, 16-byte aligned, a bf16 qkv alone): dout rounded to bf16
// as the kernels round it (lwc_flash_rowdot's copy), which the pipelined kernels stage a step
// ahead by cp.async instead of reading dout; NULL: today's kernels, from dout.
cudaError_t lwc_flash_mma_backward(cudaStream_t stream, void *dqkv, bool dqkv_bf16, const float *dd,
                                   const float *dout, const void *qkv, bool qkv_bf16,
                                   const float *lse, int64_t b, int64_t t, int64_t c, int64_t nh,
                                   int64_t nkv, int64_t window, const uint16_t *dout16, int order);

#endif
