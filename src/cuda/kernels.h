/* kernels.h: the CUDA kernels' launchers (the .cu files of src/cuda), callable from the
 * library's C files. Plain C types and the device table's (device.h reads as C and C++): this
 * header is read by gcc and by nvcc. Each launcher enqueues on `stream` and returns the
 * launch's error (cudaSuccess when it was issued). Not public API. */
#ifndef LW_CUDA_KERNELS_H
#define LW_CUDA_KERNELS_H

#include "device/device.h" /* lwi_adamw_tensor: the table's own list is the kernel's */

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of a stream's reduction scratch (lwc_stream.scratch): partial sums of the blocks of a
 * reduction and its flags. */
#define LWC_SCRATCH_BYTES (64 * 1024)
/* An int32 slot of that scratch past the partials (vec.cu uses the first 16 KiB, vec.c the last
 * 8 bytes): the cross-entropy backward's count of counted targets. */
#define LWC_SCRATCH_COUNT_OFFSET (LWC_SCRATCH_BYTES - 16)

/* vec.cu */
/* acc[0] += sum of x^2, acc[1] += count of zeros (acc: 2 doubles of device memory), reduced in
 * a fixed order (block partials in scratch, then one block), so that runs repeat bit for bit. */
cudaError_t lwc_norm_stats(cudaStream_t stream, const float *x, int64_t n, double *acc,
                           void *scratch);
/* *flag (device int) = 1 if every x is finite, else 0. */
cudaError_t lwc_all_finite(cudaStream_t stream, const float *x, int64_t n, int32_t *flag);
cudaError_t lwc_scale(cudaStream_t stream, float *x, int64_t n, float alpha);
cudaError_t lwc_add(cudaStream_t stream, float *y, const float *a, const float *b, int64_t n);
cudaError_t lwc_axpy(cudaStream_t stream, float *y, float alpha, const float *x, int64_t n);

/* muon.cu */
/* Muon's element-wise step in one pass: weight decay of w (mode 0 decoupled: w *= 1 - lr wd;
 * 1 independent: w *= 1 - wd; 2 L2: g += wd w), m = beta m + (1 - beta) g, u = Nesterov's
 * (1 - beta) g + beta m, or m. */
cudaError_t lwc_muon_momentum_elements(cudaStream_t stream, float *w, const float *g, float *m,
                                       float *u, int64_t n, float beta, bool nesterov,
                                       int32_t wd_mode, float lr, float wd, float grad_scale);
/* Newton-Schulz's start for `batch` matrices of n elements: partials[b * LWI_NS_PARTIALS ..]
 * get the sums of squares of matrix b's blocks, then x = u / max(||u||_F, eps) per matrix,
 * written as fp32 (x_bf16 NULL: into x_f32) or bf16 (into x_bf16), with no host round trip. */
cudaError_t lwc_ns_normalize(cudaStream_t stream, const float *u, int64_t batch, int64_t n,
                             float eps, float *partials, int32_t partials_per_matrix,
                             float *x_f32, void *x_bf16);

/* bf16.cu: the conversions between fp32 and bf16 (the library's only ones, apart from
 * lwc_ns_normalize's rounding) */
/* y_bf16[n] = x rounded to bf16, nearest even, bit for bit as the CPU rounds, NaN included (lw.h,
 * lw_vec_to_bf16): lw_vec_to_bf16 itself, and the model's bf16 GEMM operands. */
cudaError_t lwc_f32_to_bf16(cudaStream_t stream, const float *x, void *y_bf16, int64_t n);
/* y[n] = bf16 x, converted to fp32 exactly (lw_vec_from_bf16, Newton-Schulz's orthogonalised
 * result, bf16 weights widened for fp32 and TF32 GEMMs: lwc_widen). */
cudaError_t lwc_bf16_to_f32(cudaStream_t stream, const void *x_bf16, float *y, int64_t n);

/* adamw.cu */
/* AdamW over `count` tensors (host list) in as few launches as the kernel's argument space
 * allows (LWC_ADAMW_PER_LAUNCH tensors each); c1, c2 = 1 / (1 - beta^t), computed by the caller
 * in double. */
#define LWC_ADAMW_PER_LAUNCH 48
cudaError_t lwc_adamw_tensors(cudaStream_t stream, const lwi_adamw_tensor *tensors,
                              int32_t count, float beta1, float beta2, float eps, float c1,
                              float c2, float grad_scale);

/* The model's kernels: rounded as the CPU's, no atomics. */

/* linear.cu */
/* y[n, cols] = b in every row (a linear layer's bias, before its GEMM adds x w^T). */
cudaError_t lwc_rows_fill(cudaStream_t stream, float *y, const float *b, int64_t n, int64_t cols);

/* colsum.cu: deterministic column sums (linear.c's bias gradient, layernorm.c's gain and shift) */
/* Doubles of workspace that lwc_colsum and lwc_colsum_xhat need for (n, cols). */
int64_t lwc_colsum_doubles(int64_t n, int64_t cols);
/* out[cols] += column sums of dy[n, cols] (fp32, or bf16 widened), summed in double in an order
 * fixed by (n, cols): block partials over chunks of rows into `work`, then the chunks in order. */
cudaError_t lwc_colsum(cudaStream_t stream, float *out, const void *dy, bool bf16, int64_t n,
                       int64_t cols, double *work);
/* dg[c] += column sums of dy * (x - mean[row]) * rstd[row] (layer norm's gain gradient). */
cudaError_t lwc_colsum_xhat(cudaStream_t stream, float *dg, const float *dy, const float *x,
                            const float *mean, const float *rstd, int64_t n, int64_t c,
                            double *work);

/* embedding.cu */
/* y[b, t, c] = wte[tokens - first] + wpe[t] for the rows [first, first + rows) of the token
 * table (wpe may be NULL); other tokens look up 0 (plus wpe when given). */
cudaError_t lwc_embed_range(cudaStream_t stream, float *y, const int32_t *tokens,
                            const void *wte, const void *wpe, bool bf16, int64_t first,
                            int64_t rows, int64_t b, int64_t t, int64_t c);
/* dwpe[t, c] += dy[bi, t, c] for bi = 0 .. b - 1 in order. */
cudaError_t lwc_embed_dwpe(cudaStream_t stream, float *dwpe, const float *dy, int64_t b, int64_t t,
                           int64_t c);

/* layernorm.cu */
/* Layer norm forward (one warp per row; mean and variance in double) of x, or with b (not
 * NULL) of x + b, which is written to sum (the residual add fused before the norm). */
cudaError_t lwc_ln_forward(cudaStream_t stream, float *sum, void *y, bool y_bf16, float *mean,
                           float *rstd, const float *x, const float *b, const float *g,
                           const float *beta, int64_t n, int64_t c, float eps);
/* dx[n, c] += dres (optional: NULL adds nothing), then += layer norm's input gradient (dg and
 * dbeta: lwc_colsum_xhat, lwc_colsum). */
cudaError_t lwc_ln_dx(cudaStream_t stream, float *dx, const float *dres, const float *dy,
                      const float *x, const float *g, const float *mean, const float *rstd,
                      int64_t n, int64_t c);

/* gelu.cu */
/* GELU (tanh form) and dx += dy gelu'(x), the CPU's formulas operation for operation. */
cudaError_t lwc_gelu(cudaStream_t stream, void *y, bool y_bf16, const void *x, bool x_bf16,
                     int64_t n);
cudaError_t lwc_gelu_grad(cudaStream_t stream, void *dx, bool dx_bf16, const float *dy,
                          const void *x, bool x_bf16, int64_t n);

/* attention.cu: causal attention, flash-attention style (lw.h's contract) */
/* The largest head dim (c / nh) the kernels serve. */
int64_t lwc_flash_head_dim_limit(void);
/* Dynamic shared memory per block of the forward or backward kernels for head dim hd (0 past
 * the limit): the caller checks it against the device's opt-in maximum. */
size_t lwc_flash_smem_bytes(int64_t hd, bool backward);
/* out[b, t, c] and lse[b, nh, t] from qkv[b, t, 3c]. */
cudaError_t lwc_flash_forward(cudaStream_t stream, float *out, float *lse, const float *qkv,
                              int64_t b, int64_t t, int64_t c, int64_t nh);
/* dd[b, nh, t] = rowsum(dout * out) over each head's channels, in double rounded once: the
 * backward's D, for these kernels and attention_mma.cu's (dd: the entry's scratch). */
cudaError_t lwc_flash_rowdot(cudaStream_t stream, float *dd, const float *dout, const void *out,
                             bool out_bf16, int64_t b, int64_t t, int64_t c, int64_t nh);
/* dqkv[b, t, 3c] += the backward, from dd (lwc_flash_rowdot's, queued before). */
cudaError_t lwc_flash_backward(cudaStream_t stream, float *dqkv, const float *dd,
                               const float *dout, const float *qkv, const float *lse, int64_t b,
                               int64_t t, int64_t c, int64_t nh);

/* attention_mma.cu: the same contract on tensor cores (mma.sync, bf16 operands rounded from an
 * fp32 qkv as they are staged or read from a bf16 one as they are, fp32 sums, an fp32 or bf16
 * out), head dims 64 and 128; 16-byte aligned tensors (float4 loads, float2 stores), compute
 * capability 8.0 or later */
/* Whether the kernels serve head dim hd. */
bool lwc_flash_mma_serves(int64_t hd);
/* Dynamic shared memory per block (the larger of the backward's two kernels), 0 for a head dim
 * they do not serve: the caller checks it against the device's opt-in maximum. */
size_t lwc_flash_mma_smem_bytes(int64_t hd, bool backward);
/* Blocks of each kernel's one-dimensional grid: the caller keeps it within INT_MAX. */
int64_t lwc_flash_mma_blocks(int64_t b, int64_t t, int64_t nh);
cudaError_t lwc_flash_mma_forward(cudaStream_t stream, void *out, bool out_bf16, float *lse,
                                  const void *qkv, bool qkv_bf16, int64_t b, int64_t t, int64_t c,
                                  int64_t nh);
cudaError_t lwc_flash_mma_backward(cudaStream_t stream, void *dqkv, bool dqkv_bf16,
                                   const float *dd, const float *dout, const void *qkv,
                                   bool qkv_bf16, const float *lse, int64_t b, int64_t t, int64_t c,
                                   int64_t nh);

/* cross_entropy.cu: the LM head's softmax cross-entropy on a chunk of logits, fp32 or (bf16)
 * bf16 ones (a target outside [0, v) is ignored) */
/* Per row of logits[rows, v]: lse[rows], losses[rows]; keep (fp32 logits only): the rows become
 * probabilities. */
cudaError_t lwc_ce_rows(cudaStream_t stream, void *logits, bool bf16, int64_t rows, int64_t v,
                        const int32_t *targets, float *losses, float *lse, bool keep);
/* *count (device) = the number of targets[n] in [0, v). */
cudaError_t lwc_ce_count(cudaStream_t stream, const int32_t *targets, int64_t n, int64_t v,
                         int32_t *count);
/* logits[rows, v] = loss_scale / *count * (p - onehot(target)) in place, p = exp(logit - lse)
 * (recompute, and always for bf16 logits) or the rows themselves (kept probabilities); ignored
 * rows 0; bf16 ones rounded. */
cudaError_t lwc_ce_dlogits(cudaStream_t stream, void *logits, bool bf16, int64_t rows, int64_t v,
                           const int32_t *targets, const float *lse, bool recompute,
                           float loss_scale, const int32_t *count);

/* The vocabulary-parallel head (tensor parallelism): per row of logits[rows, v], of which the
 * first `real` columns are real (the rest padding): stats[i] = the row's max (-inf when real is
 * 0), stats[n + i] = the sum of exp(logit - max) in double, rounded once, stats[2n + i] = the
 * logit of the target when first <= target < first + real, else 0 (stats: [3, n], the chunk's
 * rows written at its offset r0). */
cudaError_t lwc_ce_partial_rows(cudaStream_t stream, const void *logits, bool bf16, int64_t rows,
                                int64_t v, int64_t real, const int32_t *targets, int64_t first,
                                float *stats, int64_t n, int64_t r0);
/* Per row (a thread each): the parts' stats[parts, 3, n] combined in part order: lse[n] and
 * losses[n] (targets outside [0, vocab): 0). */
cudaError_t lwc_ce_combine(cudaStream_t stream, float *losses, float *lse, const float *stats,
                           int64_t parts, const int32_t *targets, int64_t n, int64_t vocab);
/* logits[rows, v] (raw logits) = loss_scale / *count * (exp(logit - lse) - onehot(target - first))
 * in place over the first `real` columns, 0 in the padding and in rows whose target is outside
 * [0, vocab). */
cudaError_t lwc_ce_partial_dlogits(cudaStream_t stream, void *logits, bool bf16, int64_t rows,
                                   int64_t v, int64_t real, const int32_t *targets, int64_t first,
                                   int64_t vocab, const float *lse, float loss_scale,
                                   const int32_t *count);

/* moe.cu: a mixture of experts' router and load-balancing loss (lw.h's contract; the CPU's
 * operations in its order) */
/* Per token (a thread each): probs[n, e] = softmax(logits), experts[n, k] = the k best by logit
 * (ties to the lower index), weights[n, k] = their probabilities renormalised. */
cudaError_t lwc_moe_router(cudaStream_t stream, int32_t *experts, float *weights, float *probs,
                           const float *logits, int64_t n, int64_t e, int64_t k);
/* dlogits[n, e] += the router's backward (dprobs may be NULL). */
cudaError_t lwc_moe_router_grad(cudaStream_t stream, float *dlogits, const float *dweights,
                                const float *dprobs, const float *probs, const int32_t *experts,
                                int64_t n, int64_t e, int64_t k);
/* The load-balancing loss's statistics in chunks of tokens: the number of chunks for n tokens
 * (at most LWC_MOE_AUX_CHUNKS_MAX; [out] *per tokens each, the last one fewer). */
#define LWC_MOE_AUX_CHUNKS_MAX 64
int64_t lwc_moe_aux_chunks(int64_t n, int64_t *per);
/* counts[chunk * e + j] = the entries of the chunk's rows of experts[n, k] equal to j, and
 * (probs not NULL) cols[chunk * e + j] = the sum of its probs[:, j] in double, in a fixed order
 * (device arrays of lwc_moe_aux_chunks(n) * e values). */
cudaError_t lwc_moe_aux_stats(cudaStream_t stream, const float *probs, const int32_t *experts,
                              int64_t n, int64_t e, int64_t k, long long *counts, double *cols);
/* dprobs[n, e] += g[j] in column j, g[j] = (float)(per * count_j) (g: e floats of device
 * scratch), the counts from lwc_moe_aux_stats. */
cudaError_t lwc_moe_aux_grad(cudaStream_t stream, float *dprobs, const long long *counts,
                             int64_t n, int64_t e, double per, float *g);

/* gather.cu: rows moved by an index list (lw.h's contract; the CPU's order) */
/* out[m, c] = x[rows[i], :] row by row. */
cudaError_t lwc_gather_rows(cudaStream_t stream, float *out, const float *x, const int32_t *rows,
                            int64_t m, int64_t c);
/* Channels per block of the by-row scatter-add (lwc_rows_add): its grid is (segments,
 * c / LWC_ROW_TILE rounded up), so c is at most 65535 tiles. */
#define LWC_ROW_TILE 128
/* y[row[s]] += w[perm[q]] * src[perm[q]] (src[perm[q]] where w is NULL) for q in [start[s],
 * start[s + 1]) in order, for each of the `segments` segments (device int32 arrays: the positions
 * bucketed by destination row on the host, lwc_buckets_by_row's or lwc_buckets_in's): the
 * combine's scatter-add, and unweighted the gather's backward and the embedding's token
 * gradient. */
cudaError_t lwc_rows_add(cudaStream_t stream, float *y, const float *src, const float *w,
                         const int32_t *perm, const int32_t *start, const int32_t *row,
                         int64_t segments, int64_t c);
/* dsrc[m, c] += w[i] dy[rows[i]] (dsrc may be NULL); dw[m] += dot(src[i], dy[rows[i]]) in double
 * (a warp per row; dw may be NULL). */
cudaError_t lwc_combine_grad(cudaStream_t stream, float *dsrc, float *dw, const float *dy,
                             const float *src, const float *w, const int32_t *rows, int64_t m,
                             int64_t c);

#ifdef __cplusplus
}
#endif

#endif
