/* gemm_lt.c: GEMMs whose result is stored in bf16 (the linear layer's outputs that only feed the
 * attention or GELU), the bias added before the one rounding, as the CPU does (the bias seeded,
 * the product added in fp32, rounded once).
 *
 * Under bf16 products they run on cuBLASLt with the bias in the epilogue (CUBLASLT_EPILOGUE_BIAS
 * with an fp32 bias: the fp32 sum plus the bias, rounded as it is stored), one pass writing 2
 * bytes an element and no kernel of its own, wherever cuBLASLt's heuristic offers an algorithm
 * for the shapes, the operands' alignment and that bias type. Otherwise, and under fp32 or TF32
 * products, the GEMM writes fp32 into the stream's workspace seeded with the bias and one pass
 * rounds it (lwc_gemm's arithmetic, then lwc_to_bf16).
 *
 * The plan (descriptors, heuristic) is made per call: a few microseconds of host time against a
 * GEMM of milliseconds, and the host runs ahead of the GPU. */
#include "cuda/cuda.h"

#include <stdint.h>
#include <string.h>

/* cuBLASLt's workspace (its split-K kernels use one): 32 MiB, what NVIDIA advises for Hopper. */
#define LT_WORK_BYTES ((int64_t)32 << 20)
/* A region of the workspace starts 256-byte aligned (lwc_regions). */
#define REGION_ALIGN 256

/* The largest power of two up to 256 that divides the address: cuBLASLt picks kernels by it. */
static uint32_t alignment(const void *p) {
    uint32_t a = REGION_ALIGN;
    while (a > 1 && (uintptr_t)p % a != 0)
        a /= 2;
    return a;
}

typedef struct lt_plan {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulHeuristicResult_t found;
} lt_plan;

static void plan_free(lt_plan *p) {
    if (p->pref != NULL) cublasLtMatmulPreferenceDestroy(p->pref);
    if (p->c != NULL) cublasLtMatrixLayoutDestroy(p->c);
    if (p->b != NULL) cublasLtMatrixLayoutDestroy(p->b);
    if (p->a != NULL) cublasLtMatrixLayoutDestroy(p->a);
    if (p->op != NULL) cublasLtMatmulDescDestroy(p->op);
}

static cublasStatus_t set_op(lt_plan *p, cublasLtMatmulDescAttributes_t what, const void *v,
                             size_t size) {
    return cublasLtMatmulDescSetAttribute(p->op, what, v, size);
}

static cublasStatus_t set_pref(lt_plan *p, cublasLtMatmulPreferenceAttributes_t what, uint32_t v) {
    return cublasLtMatmulPreferenceSetAttribute(p->pref, what, &v, sizeof v);
}

/* The plan of C = op(A) op(B) (+ bias) with bf16 A, B and C, fp32 sums, or false where cuBLASLt
 * declines it (an attribute it does not take, no algorithm). align_a, align_b: the operands'
 * alignment as they will be read (a converted one lies at a region's start); has_bias: the bias,
 * copied to a region's start, is set on the plan before it runs. */
static bool plan_for(lw_stream *s, lt_plan *p, bool trans_a, bool trans_b, int64_t m, int64_t n,
                     int64_t k, int64_t lda, int64_t ldb, uint32_t align_a, uint32_t align_b,
                     bool has_bias, const void *c) {
    memset(p, 0, sizeof *p);
    const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasStatus_t e = cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (e == CUBLAS_STATUS_SUCCESS) e = set_op(p, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a);
    if (e == CUBLAS_STATUS_SUCCESS) e = set_op(p, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b);
    if (has_bias) {
        const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
        const int32_t bias_type = CUDA_R_32F;
        /* The heuristic reads the bias pointer's alignment only; the real one, at a region's
         * start, replaces this stand-in of the same alignment before the GEMM runs. */
        const void *stand_in = (const void *)(uintptr_t)REGION_ALIGN;
        if (e == CUBLAS_STATUS_SUCCESS)
            e = set_op(p, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
        if (e == CUBLAS_STATUS_SUCCESS)
            e = set_op(p, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type);
        if (e == CUBLAS_STATUS_SUCCESS)
            e = set_op(p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &stand_in, sizeof stand_in);
    }
    /* the layouts as stored: a transposed operand is stored k x m (or n x k) */
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, (uint64_t)(trans_a ? k : m),
                                       (uint64_t)(trans_a ? m : k), lda);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, (uint64_t)(trans_b ? n : k),
                                       (uint64_t)(trans_b ? k : n), ldb);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatrixLayoutCreate(&p->c, CUDA_R_16BF, (uint64_t)m, (uint64_t)n, m);
    if (e == CUBLAS_STATUS_SUCCESS) e = cublasLtMatmulPreferenceCreate(&p->pref);
    if (e == CUBLAS_STATUS_SUCCESS) {
        const uint64_t bytes = (uint64_t)LT_WORK_BYTES;
        e = cublasLtMatmulPreferenceSetAttribute(
            p->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof bytes);
    }
    if (e == CUBLAS_STATUS_SUCCESS)
        e = set_pref(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = set_pref(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = set_pref(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment(c));
    if (e == CUBLAS_STATUS_SUCCESS)
        e = set_pref(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment(c));
    int found = 0;
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatmulAlgoGetHeuristic(lwc_dev(s->device)->lt, p->op, p->a, p->b, p->c, p->c,
                                           p->pref, 1, &p->found, &found);
    return e == CUBLAS_STATUS_SUCCESS && found > 0;
}

/* The bias copied to the start of `extra` (one 256-aligned region), then the planned GEMM with
 * the rest of it as cuBLASLt's workspace. */
static lw_status run_plan(lw_stream *s, lt_plan *p, const void *a, const void *b,
                          const float *bias, int64_t m, void *c, void *extra, int64_t bias_bytes,
                          const char *what) {
    cudaStream_t cs = lwc_cuda_stream(s);
    if (bias != NULL) {
        cudaError_t ce = cudaMemcpyAsync(extra, bias, sizeof(float) * (size_t)m,
                                         cudaMemcpyDeviceToDevice, cs);
        if (ce != cudaSuccess) return lwc_fail(s->device, ce, "copying a GEMM's bias");
        const void *copied = extra;
        cublasStatus_t e = set_op(p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &copied, sizeof copied);
        if (e != CUBLAS_STATUS_SUCCESS) return lwc_fail_blas(s->device, e, what);
    }
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t e = cublasLtMatmul(lwc_dev(s->device)->lt, p->op, &alpha, a, p->a, b, p->b,
                                      &beta, c, p->c, c, p->c, &p->found.algo,
                                      (char *)extra + bias_bytes, (size_t)LT_WORK_BYTES, cs);
    return e == CUBLAS_STATUS_SUCCESS ? LW_OK : lwc_fail_blas(s->device, e, what);
}

lw_status lwc_gemm_bf16_out(lw_stream *s, bool trans_a, bool trans_b, int64_t m, int64_t n,
                            int64_t k, lwc_operand a, int64_t lda, lwc_operand b, int64_t ldb,
                            const float *bias, void *c, const char *what) {
    if (m <= 0 || n <= 0 || k <= 0) return LW_OK; /* the caller handles an empty k */
    lw_status st = LW_OK;
    if (s->device->matmul == LW_MATMUL_BF16) {
        lt_plan p;
        const bool planned = plan_for(s, &p, trans_a, trans_b, m, n, k, lda, ldb,
                                      a.bf16 ? alignment(a.p) : REGION_ALIGN,
                                      b.bf16 ? alignment(b.p) : REGION_ALIGN, bias != NULL, c);
        if (planned) {
            const int64_t bias_bytes =
                bias != NULL ? (4 * m + REGION_ALIGN - 1) / REGION_ALIGN * REGION_ALIGN : 0;
            void *extra = NULL;
            st = lwc_gemm_prepare(s, trans_a, trans_b, m, n, k, &a, lda, &b, ldb,
                                  bias_bytes + LT_WORK_BYTES, &extra, what);
            if (st == LW_OK) st = run_plan(s, &p, a.p, b.p, bias, m, c, extra, bias_bytes, what);
        }
        plan_free(&p);
        if (planned) return st;
    }
    /* fp32 into the workspace (the bias seeded, the product added), then rounded */
    void *y32 = NULL;
    st = lwc_gemm_prepare(s, trans_a, trans_b, m, n, k, &a, lda, &b, ldb, 4 * m * n, &y32, what);
    if (st == LW_OK && bias != NULL)
        st = lwc_launched(s, lwc_rows_fill(lwc_cuda_stream(s), y32, bias, n, m), "a GEMM's bias");
    if (st == LW_OK)
        st = lwc_gemm_ex(s, trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb,
                         bias != NULL ? 1.0f : 0.0f, y32, false, m, what);
    return st == LW_OK ? lwc_to_bf16(s, c, y32, m * n) : st;
}
