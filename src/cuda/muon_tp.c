/* muon_tp.c: the CUDA entries behind Muon's tensor-parallel modes (core optim/muon_tp.c): the
 * 2-D copy that moves TP shards and QKV blocks between a matrix and its pieces, and
 * Newton-Schulz in halves around the all-reduce of the Gram matrix (the distributed mode), as
 * fp32 GEMMs on cuBLAS. The whole-matrix Newton-Schulz of the other modes is muon.cu's. No kernel
 * of its own (a copy and cuBLAS calls), so C.
 *
 * Layout, as muon.cu: a row-major p x q X is, to cuBLAS (column-major), Z = X^T (q x p, ld q);
 * a transposed one (X^T stored row-major, q x p) is X itself (p x q, ld p). */
#include "cuda/cuda.h"

lw_status lwc_copy_2d(lw_stream *s, float *dst, int64_t dst_ld, const float *src, int64_t src_ld,
                      int64_t rows, int64_t cols) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    if (rows <= 0 || cols <= 0) return LW_OK;
    return lwc_launched(s,
                        cudaMemcpy2DAsync(dst, (size_t)dst_ld * 4, src, (size_t)src_ld * 4,
                                          (size_t)cols * 4, (size_t)rows,
                                          cudaMemcpyDeviceToDevice, lwc_cuda_stream(s)),
                        "cudaMemcpy2DAsync");
}

/* C = alpha op(A) op(B) + beta C in fp32 (no TF32), on the stream set on the handle. */
static cublasStatus_t gemm(cublasHandle_t blas, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                           float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                           float beta, float *c, int64_t ldc) {
    return cublasGemmEx(blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                        (int)m, (int)n, (int)k, &alpha, a, CUDA_R_32F, (int)lda, b, CUDA_R_32F,
                        (int)ldb, &beta, c, CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT);
}

static lw_status blas_on(lw_stream *s, cublasHandle_t *out) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cublasHandle_t blas = lwc_dev(s->device)->blas;
    cublasStatus_t e = cublasSetStream(blas, lwc_cuda_stream(s));
    if (e != CUBLAS_STATUS_SUCCESS) return lwc_fail_blas(s->device, e, "cublasSetStream");
    *out = blas;
    return LW_OK;
}

lw_status lwc_ns_gram(lw_stream *s, const float *x, float *a, int64_t p, int64_t q,
                      bool transposed) {
    cublasHandle_t blas = NULL;
    lw_status st = blas_on(s, &blas);
    if (st != LW_OK) return st;
    /* a full GEMM fills both triangles (cuBLAS's fp32 SYRK would leave one) */
    cublasStatus_t e = transposed
                           ? gemm(blas, false, true, p, p, q, 1.0f, x, p, x, p, 0.0f, a, p)
                           : gemm(blas, true, false, p, p, q, 1.0f, x, q, x, q, 0.0f, a, p);
    return e == CUBLAS_STATUS_SUCCESS ? LW_OK
                                      : lwc_fail_blas(s->device, e, "the Gram matrix's GEMM");
}

lw_status lwc_ns_step(lw_stream *s, const float abc[3], float *a, float *x, int64_t p, int64_t q,
                      bool transposed, float *work) {
    cublasHandle_t blas = NULL;
    lw_status st = blas_on(s, &blas);
    if (st != LW_OK) return st;
    cudaStream_t cs = lwc_cuda_stream(s);
    float *b = work, *y = work + p * p;
    const size_t pp = (size_t)(p * p) * 4, pq = (size_t)(p * q) * 4;
    /* M = b A + c A A (into work), or b A when c is 0: then M X is b (A X) */
    const float *mat = a;
    float mcoef = abc[1];
    cublasStatus_t e = CUBLAS_STATUS_SUCCESS;
    cudaError_t ce = cudaSuccess;
    if (abc[2] != 0.0f) {
        ce = cudaMemcpyAsync(b, a, pp, cudaMemcpyDeviceToDevice, cs);
        if (ce == cudaSuccess)
            e = gemm(blas, false, false, p, p, p, abc[2], a, p, a, p, abc[1], b, p);
        mat = b;
        mcoef = 1.0f;
    }
    /* Y = a X + M X (M symmetric: Z' = a Z + Z M for Z = X^T) */
    if (ce == cudaSuccess && e == CUBLAS_STATUS_SUCCESS)
        ce = cudaMemcpyAsync(y, x, pq, cudaMemcpyDeviceToDevice, cs);
    if (ce == cudaSuccess && e == CUBLAS_STATUS_SUCCESS)
        e = transposed ? gemm(blas, false, false, p, q, p, mcoef, mat, p, x, p, abc[0], y, p)
                       : gemm(blas, false, false, q, p, p, mcoef, x, q, mat, p, abc[0], y, q);
    if (ce == cudaSuccess && e == CUBLAS_STATUS_SUCCESS)
        ce = cudaMemcpyAsync(x, y, pq, cudaMemcpyDeviceToDevice, cs);
    if (ce != cudaSuccess) return lwc_fail(s->device, ce, "a Newton-Schulz step's copies");
    if (e != CUBLAS_STATUS_SUCCESS) return lwc_fail_blas(s->device, e, "a Newton-Schulz step");
    return LW_OK;
}
