/* gemm.c: the model's GEMM helper on cuBLAS, lwc_gemm (one GEMM with an fp32 C in the device's
 * matmul precision: exact fp32, TF32, or bf16 operands, each operand not already of the
 * product's type converted into the stream's workspace) and its two halves for callers that
 * need workspace of their own beside the converted operands (lwc_gemm_prepare, lwc_gemm_ex:
 * the bf16 outputs of gemm_lt.c), and the workspace regions for callers that convert an operand
 * once for several GEMMs (lwc_regions, lwc_to_bf16, lwc_widen). Apart from linear.cu because the
 * linear layer and the LM head (cross_entropy.cu) both call it; Newton-Schulz's GEMMs are
 * muon.cu's and muon_tp.c's own. Host code only (cuBLAS), so C. */
#include "cuda/cuda.h"

#include <limits.h>

static bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

/* Values an operand op(X) of rows x cols spans in memory, column-major with leading dimension ld
 * (stored as X, or as X^T when transposed): every column but the last is ld long. */
static int64_t span(bool trans, int64_t rows, int64_t cols, int64_t ld) {
    const int64_t r = trans ? cols : rows, c = trans ? rows : cols;
    return r > 0 && c > 0 ? ld * (c - 1) + r : 0;
}

lw_status lwc_regions(lw_stream *s, int32_t count, const int64_t *bytes, void **out) {
    if (count < 0 || count > LWC_REGIONS_MAX)
        return lwc_host->fail(LW_ERR_INVALID, "%s: %d workspace regions (at most %d)",
                              s->device->name, (int)count, LWC_REGIONS_MAX);
    int64_t offset[LWC_REGIONS_MAX], total = 0;
    for (int32_t i = 0; i < count; i++) {
        offset[i] = total;
        total += (bytes[i] + 255) / 256 * 256; /* cudaMalloc's base is 256-byte aligned */
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

lw_status lwc_widen(lw_stream *s, float *dst, const void *src, int64_t n) {
    return lwc_launched(s, lwc_bf16_to_f32(lwc_cuda_stream(s), src, dst, n),
                        "widening a bf16 GEMM operand");
}

/* The operand o (n values from its start) converted into region r, to bf16 or to fp32. */
static lw_status convert(lw_stream *s, lwc_operand *o, void *r, int64_t n, bool to_bf16) {
    const lw_status st = to_bf16 ? lwc_to_bf16(s, r, o->p, n) : lwc_widen(s, r, o->p, n);
    *o = (lwc_operand){r, to_bf16};
    return st;
}

lw_status lwc_gemm_prepare(lw_stream *s, bool trans_a, bool trans_b, int64_t m, int64_t n,
                           int64_t k, lwc_operand *a, int64_t lda, lwc_operand *b, int64_t ldb,
                           int64_t extra, void **extra_out, const char *what) {
    if (!fits_int(m) || !fits_int(n) || !fits_int(k) || !fits_int(lda) || !fits_int(ldb))
        return lwc_host->fail(LW_ERR_RANGE,
                              "%s: %s: a GEMM of %lld x %lld x %lld is past cuBLAS's int sizes",
                              s->device->name, what, (long long)m, (long long)n, (long long)k);
    /* The product's operand type: bf16 under bf16 products, fp32 under the others. An operand of
     * the other type is converted into its own region (the GEMM reads both together): an fp32
     * one rounded, a bf16 one (a weight or an input as stored) widened, which is exact, so an
     * fp32 or TF32 product of bf16 values is the product of their fp32 widenings. */
    const bool bf16 = s->device->matmul == LW_MATMUL_BF16;
    const int64_t size = bf16 ? 2 : 4;
    const int64_t elements[2] = {a->bf16 != bf16 ? span(trans_a, m, k, lda) : 0,
                                 b->bf16 != bf16 ? span(trans_b, k, n, ldb) : 0};
    if (elements[0] == 0 && elements[1] == 0 && extra == 0) return LW_OK;
    const int64_t bytes[3] = {size * elements[0], size * elements[1], extra};
    void *r[3];
    lw_status st = lwc_regions(s, 3, bytes, r);
    if (st == LW_OK && elements[0] > 0) st = convert(s, a, r[0], elements[0], bf16);
    if (st == LW_OK && elements[1] > 0) st = convert(s, b, r[1], elements[1], bf16);
    if (st == LW_OK && extra_out != NULL) *extra_out = r[2];
    return st;
}

lw_status lwc_gemm_ex(lw_stream *s, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      float alpha, lwc_operand a, int64_t lda, lwc_operand b, int64_t ldb,
                      float beta, void *c, bool c_bf16, int64_t ldc, const char *what) {
    if (!fits_int(ldc))
        return lwc_host->fail(LW_ERR_RANGE, "%s: %s: a GEMM's ldc %lld is past cuBLAS's int sizes",
                              s->device->name, what, (long long)ldc);
    if (c_bf16 && !(a.bf16 && b.bf16)) /* not among cublasGemmEx's combinations */
        return lwc_host->fail(LW_ERR_UNSUPPORTED, "%s: %s: a bf16 C needs bf16 operands",
                              s->device->name, what);
    cublasHandle_t blas = lwc_dev(s->device)->blas;
    cublasStatus_t e = cublasSetStream(blas, lwc_cuda_stream(s));
    if (e != CUBLAS_STATUS_SUCCESS) return lwc_fail_blas(s->device, e, "cublasSetStream");
    /* bf16 A and B into an fp32 or bf16 C with CUBLAS_COMPUTE_32F (fp32 scale type: alpha and
     * beta are floats) are among cublasGemmEx's documented combinations; the products of 8-bit
     * significands are exact in fp32, so only the operands' rounding and the fp32 sums differ
     * from exact fp32. */
    const cudaDataType type = a.bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const cublasComputeType_t compute = !a.bf16 && s->device->matmul == LW_MATMUL_TF32
                                            ? CUBLAS_COMPUTE_32F_FAST_TF32
                                            : CUBLAS_COMPUTE_32F;
    e = cublasGemmEx(blas, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                     (int)m, (int)n, (int)k, &alpha, a.p, type, (int)lda, b.p, type, (int)ldb,
                     &beta, c, c_bf16 ? CUDA_R_16BF : CUDA_R_32F, (int)ldc, compute,
                     CUBLAS_GEMM_DEFAULT);
    return e == CUBLAS_STATUS_SUCCESS ? LW_OK : lwc_fail_blas(s->device, e, what);
}

lw_status lwc_gemm(lw_stream *s, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                   float alpha, lwc_operand a, int64_t lda, lwc_operand b, int64_t ldb, float beta,
                   float *c, int64_t ldc, const char *what) {
    if (m == 0 || n == 0) return LW_OK;
    lw_status st = lwc_gemm_prepare(s, trans_a, trans_b, m, n, k, &a, lda, &b, ldb, 0, NULL, what);
    if (st != LW_OK) return st;
    return lwc_gemm_ex(s, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, false, ldc,
                       what);
}
