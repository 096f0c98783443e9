/* cuda.h: what the CUDA library's C files share (device.c: the device, its memory, streams and
 * events; a file per op family with the table's entries, as device/cpu/ has: vec.c, adamw.c,
 * muon.c, muon_tp.c, linear.c, embedding.c, layernorm.c, gelu.c, attention.c, cross_entropy.c,
 * moe.c, gather.c; gemm.c: the GEMM helper; buckets.c: the scatter-adds' row buckets; nccl.c: the
 * NCCL communicator). The library fills the core's device table (core/device/device.h) and
 * reports errors through the host's fail function: it cannot link the core's internal symbols.
 * Not public API. */
#ifndef LW_CUDA_H
#define LW_CUDA_H

#include "comm/comm.h"
#include "cuda/kernels.h"
#include "device/device.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

/* A CUDA device's data (lw_device.impl). */
typedef struct lwc_device {
    int32_t index;         /* the CUDA ordinal */
    cublasHandle_t blas;   /* set to the caller's stream before each call */
    struct cudaDeviceProp prop;
} lwc_device;

/* A stream (lw_stream.impl): the CUDA stream and its reduction scratch, so that reductions on
 * different streams never share one. */
typedef struct lwc_stream {
    cudaStream_t stream;
    void *scratch;   /* LWC_SCRATCH_BYTES of device memory */
    void *host_flag; /* 8 bytes of pinned host memory: flags copied back (the finite check) */
    /* grown on demand (lwc_workspace, lwc_host_workspace), freed with the stream */
    void *work;          /* device memory: column-sum partials, row buckets, bf16 operands */
    int64_t work_bytes;
    void *host_work;     /* pinned host memory: tokens, targets and losses copied back */
    int64_t host_work_bytes;
} lwc_stream;

/* The core's services, set by the entry (lwopt_device_open). */
extern const lwi_device_host *lwc_host;

/* Fails with the CUDA error named: "cuda:0: cudaMalloc of 1.50 GiB: out of memory
 * (cudaErrorMemoryAllocation)". device may be NULL. */
lw_status lwc_fail(const lw_device *device, cudaError_t e, const char *what);
lw_status lwc_fail_blas(const lw_device *device, cublasStatus_t e, const char *what);

static inline lwc_device *lwc_dev(const lw_device *d) { return (lwc_device *)d->impl; }
static inline lwc_stream *lwc_str(const lw_stream *s) { return (lwc_stream *)s->impl; }
static inline cudaStream_t lwc_cuda_stream(const lw_stream *s) { return lwc_str(s)->stream; }

/* Makes the device current on this thread (every entry that allocates or launches: a process
 * may drive several GPUs). Fails with the CUDA error recorded (callers return LW_ERR_IO). */
lw_status lwc_use(const lw_device *device);
/* LW_OK, or the launch's error named after `what` on the stream's device. */
lw_status lwc_launched(const lw_stream *s, cudaError_t e, const char *what);

/* At least `bytes` of the stream's device (or pinned host) workspace. Growing it first waits for
 * the stream, so that no queued kernel or copy still uses the old one. Its contents are not
 * kept across calls; work on the stream uses it in stream order. */
lw_status lwc_workspace(lw_stream *s, int64_t bytes, void **out);
lw_status lwc_host_workspace(lw_stream *s, int64_t bytes, void **out);

/* vec.c */
lw_status lwc_vec_norm_stats(lw_stream *s, const float *x, int64_t n, double *acc);
lw_status lwc_vec_all_finite(lw_stream *s, const float *x, int64_t n, bool *finite);
lw_status lwc_vec_scale(lw_stream *s, float *x, int64_t n, float alpha);
lw_status lwc_vec_add(lw_stream *s, float *y, const float *a, const float *b, int64_t n);
lw_status lwc_vec_axpy(lw_stream *s, float *y, float alpha, const float *x, int64_t n);
/* muon.c: Muon's step and Newton-Schulz */
lw_status lwc_muon_step(lw_stream *s, const lwi_muon_step *k, float *w, const float *g, float *m,
                        float *u, int64_t n);
lw_status lwc_newton_schulz(lw_stream *s, const lwi_ns_plan *plan, const float *u, float *x,
                            int64_t batch, int64_t rows, int64_t cols);
/* adamw.c */
lw_status lwc_adamw_step(lw_stream *s, const lw_adamw_options *o, const lwi_adamw_tensor *tensors,
                         int32_t count, int64_t t, float grad_scale);

/* gemm.c: the model's GEMMs on cuBLAS (the linear layer's, the LM head's).
 * A GEMM operand: device memory of fp32 values, or of bf16 values already rounded (lwc_to_bf16
 * into lwc_bf16_regions) by a caller that uses the operand in several GEMMs and rounds it once. */
typedef struct lwc_operand {
    const void *p;
    bool bf16;
} lwc_operand;
static inline lwc_operand lwc_f32(const float *p) { return (lwc_operand){p, false}; }
static inline lwc_operand lwc_bf16(const void *p) { return (lwc_operand){p, true}; }
/* The operand `elements` values further on (a later row block). */
static inline lwc_operand lwc_operand_at(lwc_operand o, int64_t elements) {
    return (lwc_operand){(const char *)o.p + (o.bf16 ? 2 : 4) * elements, o.bf16};
}
/* One GEMM on the stream, column-major as cuBLAS: C = alpha op(A) op(B) + beta C, C fp32 (beta 1
 * accumulates into it); `what` names it in errors. Two fp32 operands run in the device's matmul
 * precision: exact CUBLAS_COMPUTE_32F, TF32 tensor cores, or bf16, for which both are first
 * rounded into two regions of the stream's workspace (a caller that holds regions of its own
 * passes bf16 operands instead). Two bf16 operands run as bf16 whatever the setting: A and B
 * CUDA_R_16BF, C CUDA_R_32F, CUBLAS_COMPUTE_32F (tensor cores, fp32 sums). One of each: refused. */
lw_status lwc_gemm(lw_stream *s, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                   float alpha, lwc_operand a, int64_t lda, lwc_operand b, int64_t ldb,
                   float beta, float *c, int64_t ldc, const char *what);
/* Regions of the stream's device workspace for `count` (at most 4) bf16 arrays of elements[i]
 * values, taken in one request so that no region overlaps another, each 256-byte aligned. They
 * serve the work enqueued on the stream until its workspace is next requested (lwc_workspace, or
 * lwc_gemm of fp32 operands under bf16); a request that grows it waits for that work first. */
#define LWC_BF16_REGIONS_MAX 4
lw_status lwc_bf16_regions(lw_stream *s, int32_t count, const int64_t *elements, void **out);
/* dst[n] (bf16, device) = src[n] rounded to nearest even, on the stream. */
lw_status lwc_to_bf16(lw_stream *s, void *dst, const float *src, int64_t n);
/* linear.c */
lw_status lwc_linear_forward(lw_stream *s, float *y, const float *x, const float *w,
                             const float *b, int64_t n, int64_t in, int64_t out);
lw_status lwc_linear_backward(lw_stream *s, float *dx, float *dw, float *db, const float *dy,
                              const float *x, const float *w, int64_t n, int64_t in, int64_t out);

/* buckets.c: for the scatter-adds of embedding.c and gather.c */
/* rows[n] (device int32, each >= 0) bucketed by value on the host, for scatter-adds that add in
 * the CPU's order: perm[n] = the positions ordered by row, a row's positions increasing (a stable
 * radix sort); segment s is perm[start[s] .. start[s + 1]), all of row row[s]. The arrays lie in
 * the stream's device workspace (valid until it is next requested), uploaded on the stream. Waits
 * for the stream (the rows are copied back). Fails, changing nothing, for a negative row (named
 * "<what>: <item> -4 at position 1 is negative") or n past INT32_MAX / 6. */
typedef struct lwc_buckets {
    const int32_t *perm;  /* [n] */
    const int32_t *start; /* [segments + 1] */
    const int32_t *row;   /* [segments] */
    int32_t segments;
} lwc_buckets;
lw_status lwc_buckets_by_row(lw_stream *s, const int32_t *rows, int64_t n, const char *what,
                             const char *item, lwc_buckets *out);
/* The same for the positions whose row lies in [first, first + count), rows shifted by -first
 * (the embedding's range form); a negative row fails as above when refuse_negative, else it is
 * outside the range like any other. */
lw_status lwc_buckets_in(lw_stream *s, const int32_t *rows, int64_t n, int64_t first, int64_t count,
                         bool refuse_negative, const char *what, const char *item,
                         lwc_buckets *out);

/* embedding.c */
lw_status lwc_embedding_forward(lw_stream *s, float *y, const int32_t *tokens, const float *wte,
                                const float *wpe, int64_t b, int64_t t, int64_t c);
lw_status lwc_embedding_backward(lw_stream *s, float *dwte, float *dwpe, const float *dy,
                                 const int32_t *tokens, int64_t b, int64_t t, int64_t c);

lw_status lwc_embedding_range_forward(lw_stream *s, float *y, const int32_t *tokens,
                                      const float *wte, const float *wpe, int64_t first,
                                      int64_t rows, int64_t b, int64_t t, int64_t c);
lw_status lwc_embedding_range_backward(lw_stream *s, float *dwte, float *dwpe, const float *dy,
                                       const int32_t *tokens, int64_t first, int64_t rows,
                                       int64_t b, int64_t t, int64_t c);

/* layernorm.c */
lw_status lwc_layernorm_forward(lw_stream *s, float *y, float *mean, float *rstd, const float *x,
                                const float *g, const float *beta, int64_t n, int64_t c,
                                float eps);
lw_status lwc_layernorm_backward(lw_stream *s, float *dx, float *dg, float *dbeta, const float *dy,
                                 const float *x, const float *g, const float *mean,
                                 const float *rstd, int64_t n, int64_t c);
/* gelu.c */
lw_status lwc_gelu_forward(lw_stream *s, float *y, const float *x, int64_t n);
lw_status lwc_gelu_backward(lw_stream *s, float *dx, const float *dy, const float *x, int64_t n);
/* attention.c */
int64_t lwc_attention_scratch_floats(int64_t b, int64_t t, int64_t c, int64_t nh);
lw_status lwc_attention_forward(lw_stream *s, float *out, float *lse, float *scratch,
                                const float *qkv, int64_t b, int64_t t, int64_t c, int64_t nh);
lw_status lwc_attention_backward(lw_stream *s, float *dqkv, float *scratch, const float *dout,
                                 const float *qkv, const float *out, const float *lse, int64_t b,
                                 int64_t t, int64_t c, int64_t nh);

/* cross_entropy.c: the LM head fused with softmax cross-entropy, in chunks of rows */
int64_t lwc_cross_entropy_scratch_floats(int64_t n, int64_t v);
lw_status lwc_cross_entropy_forward(lw_stream *s, float *losses, float *lse, float *scratch,
                                    const float *h, const float *w, const int32_t *targets,
                                    int64_t n, int64_t c, int64_t v, double *loss);
lw_status lwc_cross_entropy_backward(lw_stream *s, float *dh, float *dw, float *scratch,
                                     const float *h, const float *w, const int32_t *targets,
                                     const float *lse, int64_t n, int64_t c, int64_t v,
                                     float loss_scale);
/* and split over tensor parallelism's vocabulary ranks */
lw_status lwc_cross_entropy_partial_forward(lw_stream *s, float *stats, float *scratch,
                                            const float *h, const float *w,
                                            const int32_t *targets, int64_t n, int64_t c,
                                            int64_t v, int64_t first, int64_t vocab);
lw_status lwc_cross_entropy_combine(lw_stream *s, float *losses, float *lse, const float *stats,
                                    int64_t parts, const int32_t *targets, int64_t n,
                                    int64_t vocab, double *loss);
lw_status lwc_cross_entropy_partial_backward(lw_stream *s, float *dh, float *dw, float *scratch,
                                             const float *h, const float *w,
                                             const int32_t *targets, const float *lse, int64_t n,
                                             int64_t c, int64_t v, int64_t first, int64_t vocab,
                                             float loss_scale);

/* moe.c: a mixture of experts' router and load-balancing loss */
lw_status lwc_moe_router_forward(lw_stream *s, int32_t *experts, float *weights, float *probs,
                                 const float *logits, int64_t n, int64_t e, int64_t k);
lw_status lwc_moe_router_backward(lw_stream *s, float *dlogits, const float *dweights,
                                  const float *dprobs, const float *probs, const int32_t *experts,
                                  int64_t n, int64_t e, int64_t k);
lw_status lwc_moe_aux_loss_forward(lw_stream *s, const float *probs, const int32_t *experts,
                                   int64_t n, int64_t e, int64_t k, float coef, double *loss);
lw_status lwc_moe_aux_loss_backward(lw_stream *s, float *dprobs, const int32_t *experts,
                                    int64_t n, int64_t e, int64_t k, float coef, float scale);
/* gather.c: rows moved by an index list, gather and combine */
lw_status lwc_gather_forward(lw_stream *s, float *out, const float *x, const int32_t *rows,
                             int64_t m, int64_t c);
lw_status lwc_gather_backward(lw_stream *s, float *dx, const float *dout, const int32_t *rows,
                              int64_t m, int64_t c);
lw_status lwc_combine_forward(lw_stream *s, float *y, const float *src, const float *w,
                              const int32_t *rows, int64_t m, int64_t c);
lw_status lwc_combine_backward(lw_stream *s, float *dsrc, float *dw, const float *dy,
                               const float *src, const float *w, const int32_t *rows, int64_t m,
                               int64_t c);

/* muon_tp.c: the 2-D copy and Muon's distributed TP Newton-Schulz halves (device.h) */
lw_status lwc_copy_2d(lw_stream *s, float *dst, int64_t dst_ld, const float *src, int64_t src_ld,
                      int64_t rows, int64_t cols);
lw_status lwc_ns_gram(lw_stream *s, const float *x, float *a, int64_t p, int64_t q,
                      bool transposed);
lw_status lwc_ns_step(lw_stream *s, const float abc[3], float *a, float *x, int64_t p, int64_t q,
                      bool transposed, float *work);

/* nccl.c: a communicator of parent's ranks over NCCL (the table's comm_new; built only where
 * NCCL was found, LWOPT_NCCL). */
lw_status lwc_comm_new(lw_device *device, lw_comm *parent, lw_comm **out);

#endif
