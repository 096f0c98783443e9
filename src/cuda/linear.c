/* linear.c: the fully connected layer y = x w^T + b on a GPU, forward and accumulating backward:
 * the GEMMs on cuBLAS in the device's matmul precision (lw_device_set_matmul: exact fp32 by
 * default, CUBLAS_COMPUTE_32F, the mode compared tightly with the CPU; TF32 tensor cores; or bf16
 * operands with fp32 sums on tensor cores, autocast's arithmetic), the bias rows and the bias
 * gradient's deterministic column sums in nn.cu. Also the GEMM helper the other entries
 * (cross_entropy.c) call, with its bf16 operand regions.
 *
 * Orientation: cuBLAS is column-major, and a row-major [r, k] matrix read column-major is its
 * transpose ([k, r], leading dimension k), so every row-major product is taken as its transpose
 * (C^T = B^T A^T) with no copies; each call below writes out its translation.
 *
 * bf16: operands are fp32 in memory (weights, activations, gradients), so each GEMM reads bf16
 * copies rounded into the stream's workspace just before it; an operand that feeds two GEMMs
 * (dy in the backward) is rounded once. */
#include "cuda/cuda.h"

#include <limits.h>

static bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

/* Values an operand op(X) of rows x cols spans in memory, column-major with leading dimension ld
 * (stored as X, or as X^T when transposed): every column but the last is ld long. */
static int64_t span(bool trans, int64_t rows, int64_t cols, int64_t ld) {
    const int64_t r = trans ? cols : rows, c = trans ? rows : cols;
    return r > 0 && c > 0 ? ld * (c - 1) + r : 0;
}

lw_status lwc_bf16_regions(lw_stream *s, int32_t count, const int64_t *elements, void **out) {
    if (count < 0 || count > LWC_BF16_REGIONS_MAX)
        return lwc_host->fail(LW_ERR_INVALID, "%s: %d bf16 workspace regions (at most %d)",
                              s->device->name, (int)count, LWC_BF16_REGIONS_MAX);
    int64_t offset[LWC_BF16_REGIONS_MAX], total = 0;
    for (int32_t i = 0; i < count; i++) {
        offset[i] = total;
        total += (2 * elements[i] + 255) / 256 * 256; /* cudaMalloc's base is 256-byte aligned */
    }
    void *base = NULL;
    lw_status st = lwc_workspace(s, total, &base);
    if (st != LW_OK) return st;
    for (int32_t i = 0; i < count; i++)
        out[i] = (char *)base + offset[i];
    return LW_OK;
}

lw_status lwc_to_bf16(lw_stream *s, void *dst, const float *src, int64_t n) {
    return lwc_launched(s, lwc_f32_to_bf16(lwc_cuda_stream(s), src, dst, n),
                        "rounding a GEMM operand to bf16");
}

lw_status lwc_gemm(lw_stream *s, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                   float alpha, lwc_operand a, int64_t lda, lwc_operand b, int64_t ldb,
                   float beta, float *c, int64_t ldc, const char *what) {
    if (m == 0 || n == 0) return LW_OK;
    if (!fits_int(m) || !fits_int(n) || !fits_int(k) || !fits_int(lda) || !fits_int(ldb) ||
        !fits_int(ldc))
        return lwc_host->fail(LW_ERR_RANGE,
                              "%s: %s: a GEMM of %lld x %lld x %lld is past cuBLAS's int sizes",
                              s->device->name, what, (long long)m, (long long)n, (long long)k);
    if (a.bf16 != b.bf16)
        return lwc_host->fail(LW_ERR_INVALID, "%s: %s: one fp32 and one bf16 operand",
                              s->device->name, what);
    const lw_matmul mode = s->device->matmul;
    if (!a.bf16 && mode == LW_MATMUL_BF16) {
        /* Both rounded, each into its own region: the GEMM reads them together. */
        const int64_t elements[2] = {span(trans_a, m, k, lda), span(trans_b, k, n, ldb)};
        void *r[2];
        lw_status st = lwc_bf16_regions(s, 2, elements, r);
        if (st == LW_OK) st = lwc_to_bf16(s, r[0], a.p, elements[0]);
        if (st == LW_OK) st = lwc_to_bf16(s, r[1], b.p, elements[1]);
        if (st != LW_OK) return st;
        a = lwc_bf16(r[0]);
        b = lwc_bf16(r[1]);
    }
    cublasHandle_t blas = lwc_dev(s->device)->blas;
    cublasStatus_t e = cublasSetStream(blas, lwc_cuda_stream(s));
    if (e != CUBLAS_STATUS_SUCCESS) return lwc_fail_blas(s->device, e, "cublasSetStream");
    /* bf16 A and B into an fp32 C with CUBLAS_COMPUTE_32F (fp32 scale type: alpha and beta are
     * floats) is one of cublasGemmEx's documented combinations; the products of 8-bit
     * significands are exact in fp32, so only the operands' rounding and the fp32 sums differ
     * from exact fp32. */
    const cudaDataType type = a.bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const cublasComputeType_t compute =
        !a.bf16 && mode == LW_MATMUL_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    e = cublasGemmEx(blas, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                     (int)m, (int)n, (int)k, &alpha, a.p, type, (int)lda, b.p, type, (int)ldb,
                     &beta, c, CUDA_R_32F, (int)ldc, compute, CUBLAS_GEMM_DEFAULT);
    return e == CUBLAS_STATUS_SUCCESS ? LW_OK : lwc_fail_blas(s->device, e, what);
}

lw_status lwc_linear_forward(lw_stream *s, float *y, const float *x, const float *w,
                             const float *b, int64_t n, int64_t in, int64_t out) {
    if (n <= 0 || out <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cudaStream_t cs = lwc_cuda_stream(s);
    /* Seeding y with the bias and letting the GEMM add onto it (beta = 1), as the CPU does; without
     * a bias, beta = 0 never reads y. */
    if (b != NULL) {
        cudaError_t e = lwc_rows_fill(cs, y, b, n, out);
        if (e != cudaSuccess) return lwc_fail(s->device, e, "the linear layer's bias");
    }
    if (in <= 0) /* an empty inner dimension: the product is 0 (cuBLAS rejects lda = 0) */
        return b != NULL ? LW_OK
                         : lwc_launched(s, cudaMemsetAsync(y, 0, sizeof(float) * (size_t)(n * out),
                                                           cs),
                                        "cudaMemsetAsync");
    /* y[n, out] = x[n, in] w[out, in]^T. Column-major: y is Y^T [out, n] (ld out), w is W^T
     * [in, out] (ld in), x is X^T [in, n] (ld in); Y^T = W X^T = op_T(w) op_N(x):
     * m = out, n = n, k = in. Under bf16 lwc_gemm rounds w and x itself. */
    return lwc_gemm(s, true, false, out, n, in, 1.0f, lwc_f32(w), in, lwc_f32(x), in,
                    b != NULL ? 1.0f : 0.0f, y, out, "the linear layer's GEMM");
}

lw_status lwc_linear_backward(lw_stream *s, float *dx, float *dw, float *db, const float *dy,
                              const float *x, const float *w, int64_t n, int64_t in, int64_t out) {
    if (n <= 0 || out <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    lw_status st = LW_OK;
    if (in > 0) {
        lwc_operand ody = lwc_f32(dy), ow = lwc_f32(w), ox = lwc_f32(x);
        if (s->device->matmul == LW_MATMUL_BF16) {
            /* dy, w (only for dx) and x rounded once each, into three regions: both GEMMs
             * read dy. The column sum below asks for the workspace again only after both GEMMs
             * are queued, and the stream runs them first. */
            const int64_t elements[3] = {n * out, dx != NULL ? out * in : 0, n * in};
            void *r[3];
            st = lwc_bf16_regions(s, 3, elements, r);
            if (st == LW_OK) st = lwc_to_bf16(s, r[0], dy, elements[0]);
            if (st == LW_OK && dx != NULL) st = lwc_to_bf16(s, r[1], w, elements[1]);
            if (st == LW_OK) st = lwc_to_bf16(s, r[2], x, elements[2]);
            ody = lwc_bf16(r[0]), ow = lwc_bf16(r[1]), ox = lwc_bf16(r[2]);
        }
        /* dx[n, in] += dy[n, out] w[out, in]. Column-major: dX^T [in, n] (ld in) = W^T [in, out]
         * (w as stored, ld in) dY^T [out, n] (dy as stored, ld out): op_N(w) op_N(dy),
         * m = in, n = n, k = out, beta 1. */
        if (st == LW_OK && dx != NULL)
            st = lwc_gemm(s, false, false, in, n, out, 1.0f, ow, in, ody, out, 1.0f, dx, in,
                          "the linear layer's input gradient");
        /* dw[out, in] += dy^T x. Column-major: dW^T [in, out] (ld in) = X^T [in, n] (x as
         * stored, ld in) dY [n, out] (dy as stored is dY^T [out, n], ld out, transposed):
         * op_N(x) op_T(dy), m = in, n = out, k = n, beta 1. */
        if (st == LW_OK)
            st = lwc_gemm(s, false, true, in, out, n, 1.0f, ox, in, ody, out, 1.0f, dw, in,
                          "the linear layer's weight gradient");
    }
    if (st != LW_OK || db == NULL) return st;
    void *work = NULL;
    st = lwc_workspace(s, (int64_t)sizeof(double) * lwc_colsum_doubles(n, out), &work);
    if (st != LW_OK) return st;
    return lwc_launched(s, lwc_colsum(lwc_cuda_stream(s), db, dy, n, out, work),
                        "the linear layer's bias gradient");
}
