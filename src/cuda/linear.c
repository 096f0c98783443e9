/* linear.c: the fully connected layer y = x w^T + b on a GPU, forward and accumulating backward:
 * the GEMMs on cuBLAS in the device's matmul precision (lw_device_set_matmul: exact fp32 by
 * default, CUBLAS_COMPUTE_32F, the mode compared tightly with the CPU; or TF32 tensor cores),
 * the bias rows and the bias gradient's deterministic column sums in nn.cu. Also the one GEMM
 * helper the other entries (cross_entropy.c) call.
 *
 * Orientation: cuBLAS is column-major, and a row-major [r, k] matrix read column-major is its
 * transpose ([k, r], leading dimension k), so every row-major product is taken as its transpose
 * (C^T = B^T A^T) with no copies; each call below writes out its translation. */
#include "cuda/cuda.h"

#include <limits.h>

static bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

lw_status lwc_gemm(lw_stream *s, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                   float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                   float beta, float *c, int64_t ldc, const char *what) {
    if (m == 0 || n == 0) return LW_OK;
    if (!fits_int(m) || !fits_int(n) || !fits_int(k) || !fits_int(lda) || !fits_int(ldb) ||
        !fits_int(ldc))
        return lwc_host->fail(LW_ERR_RANGE,
                              "%s: %s: a GEMM of %lld x %lld x %lld is past cuBLAS's int sizes",
                              s->device->name, what, (long long)m, (long long)n, (long long)k);
    cublasHandle_t blas = lwc_dev(s->device)->blas;
    cublasStatus_t e = cublasSetStream(blas, lwc_cuda_stream(s));
    if (e != CUBLAS_STATUS_SUCCESS) return lwc_fail_blas(s->device, e, "cublasSetStream");
    e = cublasGemmEx(blas, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                     (int)m, (int)n, (int)k, &alpha, a, CUDA_R_32F, (int)lda, b, CUDA_R_32F,
                     (int)ldb, &beta, c, CUDA_R_32F, (int)ldc,
                     s->device->matmul == LW_MATMUL_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                         : CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT);
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
     * m = out, n = n, k = in. */
    return lwc_gemm(s, true, false, out, n, in, 1.0f, w, in, x, in, b != NULL ? 1.0f : 0.0f, y, out,
                    "the linear layer's GEMM");
}

lw_status lwc_linear_backward(lw_stream *s, float *dx, float *dw, float *db, const float *dy,
                              const float *x, const float *w, int64_t n, int64_t in, int64_t out) {
    if (n <= 0 || out <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    lw_status st = LW_OK;
    if (in > 0) {
        /* dx[n, in] += dy[n, out] w[out, in]. Column-major: dX^T [in, n] (ld in) = W^T [in, out]
         * (w as stored, ld in) dY^T [out, n] (dy as stored, ld out): op_N(w) op_N(dy),
         * m = in, n = n, k = out, beta 1. */
        if (dx != NULL)
            st = lwc_gemm(s, false, false, in, n, out, 1.0f, w, in, dy, out, 1.0f, dx, in,
                          "the linear layer's input gradient");
        /* dw[out, in] += dy^T x. Column-major: dW^T [in, out] (ld in) = X^T [in, n] (x as
         * stored, ld in) dY [n, out] (dy as stored is dY^T [out, n], ld out, transposed):
         * op_N(x) op_T(dy), m = in, n = out, k = n, beta 1. */
        if (st == LW_OK)
            st = lwc_gemm(s, false, true, in, out, n, 1.0f, x, in, dy, out, 1.0f, dw, in,
                          "the linear layer's weight gradient");
    }
    if (st != LW_OK || db == NULL) return st;
    void *work = NULL;
    st = lwc_workspace(s, (int64_t)sizeof(double) * lwc_colsum_doubles(n, out), &work);
    if (st != LW_OK) return st;
    return lwc_launched(s, lwc_colsum(lwc_cuda_stream(s), db, dy, n, out, work),
                        "the linear layer's bias gradient");
}
