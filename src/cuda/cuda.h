/* cuda.h: what the CUDA library's files share, read by gcc (the host-only .c files) and nvcc
 * (the .cu files, as C++): the device and stream data, error helpers and workspaces, the table's
 * entries, the GEMM helpers, the row buckets, and the launchers several families use. Its
 * declarations have C linkage. The library fills the core's device table
 * (core/device/device.h) and reports errors through the host's fail function: it cannot link
 * the core's internal symbols. Not public API. */
#ifndef LW_CUDA_H
#define LW_CUDA_H

#include "comm/comm.h"
#include "device/device.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A CUDA device's data (lw_device.impl). */
typedef struct lwc_device {
    int32_t index;         /* the CUDA ordinal */
    cublasHandle_t blas;   /* set to the caller's stream before each call */
    cublasLtHandle_t lt;   /* cuBLASLt's: the GEMMs with epilogues (gemm_lt.c) */
    struct lwc_lt_choices *lt_choices; /* gemm_lt.c's algorithm per shape, made on first use */
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

/* Bytes of a stream's reduction scratch (lwc_stream.scratch): partial sums of the blocks of a
 * reduction and its flags. */
#define LWC_SCRATCH_BYTES (64 * 1024)
/* An int32 slot of that scratch past the partials (vec.cu uses the first 16 KiB and the last 8
 * bytes): the cross-entropy backward's count of counted targets. */
#define LWC_SCRATCH_COUNT_OFFSET (LWC_SCRATCH_BYTES - 16)

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

/* The table's kernels (src/core/device/kernel_list.h), lwc_<name>, each in its family's .cu
 * file (muon_tp.c's are cuBLAS calls and copies only). */
#define LWC_SIZE_DECLARATION(name, params, args) int64_t lwc_##name params;
LWI_SCRATCH_SIZES(LWC_SIZE_DECLARATION)
#undef LWC_SIZE_DECLARATION
#define LWC_DECLARATION(name, params, args, check) lw_status lwc_##name params;
LWI_KERNELS(LWC_DECLARATION)
#undef LWC_DECLARATION

/* gemm.c: the model's GEMMs on cuBLAS (linear.cu's, the LM head's in cross_entropy.cu).
 * A GEMM operand: device memory of fp32 values, or of bf16 values (bf16 weights as the buffers
 * store them, or an operand a caller rounds once for several GEMMs: lwc_to_bf16 into
 * lwc_regions). */
typedef struct lwc_operand {
    const void *p;
    bool bf16;
} lwc_operand;
/* (No compound literals: C++ reads this header too.) */
static inline lwc_operand lwc_f32(const float *p) {
    const lwc_operand o = {p, false};
    return o;
}
static inline lwc_operand lwc_bf16(const void *p) {
    const lwc_operand o = {p, true};
    return o;
}
/* A model kernel's weights or inputs of a dtype (fp32 or bf16, checked by the dispatcher). */
static inline lwc_operand lwc_typed(const void *p, lw_dtype dtype) {
    const lwc_operand o = {p, dtype == LW_DTYPE_BF16};
    return o;
}
/* The operand `elements` values further on (a later row block). */
static inline lwc_operand lwc_operand_at(lwc_operand o, int64_t elements) {
    const lwc_operand at = {(const char *)o.p + (o.bf16 ? 2 : 4) * elements, o.bf16};
    return at;
}
/* One GEMM on the stream, column-major as cuBLAS: C = alpha op(A) op(B) + beta C, C fp32 (beta 1
 * accumulates into it); `what` names it in errors. It runs in the device's matmul precision:
 * exact CUBLAS_COMPUTE_32F, TF32 tensor cores, or bf16 (A and B CUDA_R_16BF, C CUDA_R_32F,
 * CUBLAS_COMPUTE_32F: tensor cores, fp32 sums). An operand not of the product's type is first
 * converted into a region of the stream's workspace: fp32 rounded for bf16 products, bf16 (a
 * weight or an input as stored) widened for the others; a caller that rounds an operand once
 * for several bf16 GEMMs passes it as bf16. */
lw_status lwc_gemm(lw_stream *s, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                   float alpha, lwc_operand a, int64_t lda, lwc_operand b, int64_t ldb,
                   float beta, float *c, int64_t ldc, const char *what);
/* lwc_gemm's two halves. prepare: a and b converted to the product's type (in place of the
 * operands given) in regions of one workspace request that also holds `extra` bytes for the
 * caller (*extra_out, 256-byte aligned; nothing requests the workspace again before the GEMM,
 * so none of it moves). ex: the GEMM on operands of the product's type, into an fp32 C or (c_bf16,
 * bf16 operands only: cublasGemmEx's combination) a bf16 one, the fp32 sums rounded. */
lw_status lwc_gemm_prepare(lw_stream *s, bool trans_a, bool trans_b, int64_t m, int64_t n,
                           int64_t k, lwc_operand *a, int64_t lda, lwc_operand *b, int64_t ldb,
                           int64_t extra, void **extra_out, const char *what);
lw_status lwc_gemm_ex(lw_stream *s, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      float alpha, lwc_operand a, int64_t lda, lwc_operand b, int64_t ldb,
                      float beta, void *c, bool c_bf16, int64_t ldc, const char *what);

/* gemm_lt.c: C[m, n] (bf16, column-major, ld m) = op(A) op(B) + bias[m] (bias optional, fp32,
 * one per row of C), the fp32 result rounded to bf16 once: on cuBLASLt with the bias in its
 * epilogue under bf16 products where it offers an algorithm, else through an fp32 copy in the
 * workspace (the bias seeded, the GEMM added, then rounded). Under bf16 products the bias is
 * rounded to bf16 first on either path (cuBLASLt takes it in D's type). */
lw_status lwc_gemm_bf16_out(lw_stream *s, bool trans_a, bool trans_b, int64_t m, int64_t n,
                            int64_t k, lwc_operand a, int64_t lda, lwc_operand b, int64_t ldb,
                            const float *bias, void *c, const char *what);
/* The same with GELU after it, in one cuBLASLt pass under bf16 products: pre[m, n] (bf16, ld m) =
 * op(A) op(B) + bias rounded, y (bf16, ld m) = GELU of the unrounded sum rounded. *ran: false
 * where it did not run (other products, or cuBLASLt declines the shape): the caller then runs
 * the two kernels. */
lw_status lwc_gemm_gelu_bf16_out(lw_stream *s, bool trans_a, bool trans_b, int64_t m, int64_t n,
                                 int64_t k, lwc_operand a, int64_t lda, lwc_operand b, int64_t ldb,
                                 const float *bias, void *y, void *pre, bool *ran,
                                 const char *what);
/* And with GELU's gradient after it: d[m, n] (bf16, ld m) = op(A) op(B) times GELU' of pre (bf16,
 * ld m), rounded; *ran as above. */
lw_status lwc_gemm_dgelu_bf16_out(lw_stream *s, bool trans_a, bool trans_b, int64_t m, int64_t n,
                                  int64_t k, lwc_operand a, int64_t lda, lwc_operand b,
                                  int64_t ldb, void *d, const void *pre, bool *ran,
                                  const char *what);
/* Regions of the stream's device workspace for `count` (at most 4) arrays of bytes[i] bytes,
 * taken in one request so that no region overlaps another, each 256-byte aligned. They serve the
 * work enqueued on the stream until its workspace is next requested (lwc_workspace, or lwc_gemm
 * of an operand it converts); a request that grows it waits for that work first. */
#define LWC_REGIONS_MAX 4
lw_status lwc_regions(lw_stream *s, int32_t count, const int64_t *bytes, void **out);
/* dst[n] (bf16, device) = src[n] rounded to nearest even, on the stream. */
lw_status lwc_to_bf16(lw_stream *s, void *dst, const float *src, int64_t n);
/* dst[n] (fp32, device) = src[n] (bf16) widened, exactly, on the stream. */
lw_status lwc_widen(lw_stream *s, float *dst, const void *src, int64_t n);

/* buckets.c: for the scatter-adds of embedding.cu and gather.cu */
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

/* ---- launchers that several files use ------------------------------------------------------
 * Each enqueues on `stream` and returns the launch's error (cudaSuccess when it was issued); a
 * launcher that one family alone uses is static in its .cu file. */

/* bf16.cu: the conversions between fp32 and bf16 (the library's only ones, apart from
 * Newton-Schulz's scaled start in muon.cu) */
/* y_bf16[n] = x rounded to bf16, nearest even, bit for bit as the CPU rounds, NaN included
 * (docs/c_api.md, lw_vec_to_bf16): lw_vec_to_bf16 itself, and the model's bf16 GEMM operands
 * (gemm.c). */
cudaError_t lwc_f32_to_bf16(cudaStream_t stream, const float *x, void *y_bf16, int64_t n);
/* y[n] = bf16 x, converted to fp32 exactly (lw_vec_from_bf16, Newton-Schulz's orthogonalised
 * result, bf16 weights widened for fp32 and TF32 GEMMs: lwc_widen). */
cudaError_t lwc_bf16_to_f32(cudaStream_t stream, const void *x_bf16, float *y, int64_t n);

/* colsum.cu: deterministic column sums (linear.cu's bias gradient, layernorm.cu's gain and
 * shift, rmsnorm.cu's gain) */
/* Doubles of workspace that lwc_colsum and lwc_colsum_xhat need for (n, cols). */
int64_t lwc_colsum_doubles(int64_t n, int64_t cols);
/* out[cols] += column sums of dy[n, cols] (fp32, or bf16 widened), summed in double in an order
 * fixed by (n, cols): block partials over chunks of rows into `work`, then the chunks in order. */
cudaError_t lwc_colsum(cudaStream_t stream, float *out, const void *dy, bool bf16, int64_t n,
                       int64_t cols, double *work);
/* dg[c] += column sums of dy * (x - mean[row]) * rstd[row] (layer norm's gain gradient; with
 * mean NULL, of dy * x * rstd[row]: RMSNorm's). */
cudaError_t lwc_colsum_xhat(cudaStream_t stream, float *dg, const float *dy, const float *x,
                            const float *mean, const float *rstd, int64_t n, int64_t c,
                            double *work);
/* dw[heads * channels] += column sums of dz[r, h] * x[r, k] (column h * channels + k; x rows
 * x_stride elements apart, fp32 or (x_bf16) bf16 read widened), each product in double: the
 * value embeddings' gate weight gradient (value_gate.cu). Workspace: lwc_colsum_doubles(n, heads
 * * channels). */
cudaError_t lwc_colsum_outer(cudaStream_t stream, float *dw, const float *dz, const void *x,
                             bool x_bf16, int64_t n, int64_t heads, int64_t channels,
                             int64_t x_stride, double *work);

/* linear.cu: y[n, cols] = b in every row (a linear layer's bias, before its GEMM adds x w^T;
 * gemm_lt.c's bias seeded the same way). */
cudaError_t lwc_rows_fill(cudaStream_t stream, float *y, const float *b, int64_t n, int64_t cols);

/* gelu.cu: dx += dy gelu'(x) (GELU's tanh form), the CPU's formulas operation for operation
 * (linear.cu's GELU backward runs it where cuBLASLt's DGELU epilogue does not). */
cudaError_t lwc_gelu_grad(cudaStream_t stream, void *dx, bool dx_bf16, const float *dy,
                          const void *x, bool x_bf16, int64_t n);

/* gather.cu: the scatter-add by destination row (the gather's backward, the combine, and
 * embedding.cu's token gradient) */
/* Channels per block of the by-row scatter-add (lwc_rows_add): its grid is (segments,
 * c / LWC_ROW_TILE rounded up), so c is at most 65535 tiles. */
#define LWC_ROW_TILE 128
/* y[row[s]] += w[perm[q]] * src[perm[q]] (src[perm[q]] where w is NULL) for q in [start[s],
 * start[s + 1]) in order, for each of the `segments` segments (device int32 arrays: the positions
 * bucketed by destination row on the host, lwc_buckets_by_row's or lwc_buckets_in's). */
cudaError_t lwc_rows_add(cudaStream_t stream, float *y, const float *src, const float *w,
                         const int32_t *perm, const int32_t *start, const int32_t *row,
                         int64_t segments, int64_t c);

/* nccl.c: a communicator of parent's ranks over NCCL (the table's comm_new; built only where
 * NCCL was found, LWOPT_NCCL). */
lw_status lwc_comm_new(lw_device *device, lw_comm *parent, const lwi_comm_calls *calls,
                       lw_comm **out);

#ifdef __cplusplus
}
#endif

#endif
