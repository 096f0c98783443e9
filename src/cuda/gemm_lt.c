/* gemm_lt.c: GEMMs whose result is stored in bf16 (the linear layer's outputs that only feed the
 * attention or GELU), the bias added before the one rounding, as the CPU does (the bias seeded,
 * the product added in fp32, rounded once).
 *
 * Under bf16 products they run on cuBLASLt with the bias in the epilogue (CUBLASLT_EPILOGUE_BIAS:
 * the fp32 sum plus the bias, rounded as it is stored), one pass writing 2 bytes an element and
 * no kernel of its own, wherever cuBLASLt's heuristic offers an algorithm for the shapes and the
 * operands' alignment. Otherwise, and under fp32 or TF32 products, the GEMM writes fp32 into the
 * stream's workspace seeded with the bias and one pass rounds it (lwc_gemm's arithmetic, then
 * lwc_to_bf16).
 *
 * The bias under bf16 products is rounded to bf16 once per call, on either path, as the operands
 * are (autocast rounds a linear layer's bias too): cuBLASLt takes the epilogue's bias in D's
 * type, bf16 here, and documents another type for IMMA and fp8 kernels only. Which path runs then
 * changes only the sums' order. Under fp32 and TF32 products the bias is added as it is, and so
 * on the CPU, which computes fp32 whatever is set.
 *
 * The heuristic's choice is remembered per device and shape (a few shapes a model: its search
 * costs tens of microseconds of host time); the descriptors are made per call (host work only).
 * A shape cuBLASLt declines, at the heuristic or when its algorithm is run, takes the fp32 pass
 * from then on; LWOPT_GEMM_REPORT=1 prints each shape's choice on stderr.
 *
 * The same with GELU after the bias (CUBLASLT_EPILOGUE_GELU_AUX_BIAS: an MLP's fc and its
 * activation in one pass), GELU's input written beside its output; and with GELU's gradient
 * (CUBLASLT_EPILOGUE_DGELU: the input gradient of the MLP's proj times GELU' of fc's output, read
 * beside). Where cuBLASLt declines either, the caller runs the separate kernels. */
#include "cuda/cuda.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The most workspace cuBLASLt may ask for (its split-K kernels use some): 32 MiB, what NVIDIA
 * advises for Hopper; a call takes only what its algorithm needs. */
#define LT_WORK_MAX ((uint64_t)32 << 20)
/* A region of the workspace starts 256-byte aligned (lwc_regions). */
#define REGION_ALIGN 256
/* Shapes whose choice is remembered per device (a model has a few: QKV and fc, forward). */
#define LT_CHOICES 32

/* bytes rounded up to a whole number of regions' alignments */
static int64_t aligned(int64_t bytes) {
    return (bytes + REGION_ALIGN - 1) / REGION_ALIGN * REGION_ALIGN;
}

/* The largest power of two up to 256 that divides the address: cuBLASLt picks kernels by it. */
static uint32_t alignment(const void *p) {
    uint32_t a = REGION_ALIGN;
    while (a > 1 && (uintptr_t)p % a != 0)
        a /= 2;
    return a;
}

/* What follows the product in the epilogue: the bias alone (or nothing), the bias and GELU
 * (GELU's input written beside), or GELU's gradient (GELU's input read beside). */
typedef enum { LT_PLAIN, LT_GELU, LT_DGELU } lt_kind;
static const char *const lt_kind_names[] = {"", " and GELU", " and GELU's gradient"};

/* A shape's choice: cuBLASLt's algorithm with its epilogue (fused), or the caller's other path
 * (cuBLASLt declined it). key: m, n, k, lda, ldb, the transposes, the operands', C's and GELU's
 * input's alignments, whether there is a bias, the epilogue's kind. */
#define LT_KEY 13
typedef struct lt_choice {
    int64_t key[LT_KEY];
    bool fused;
    cublasLtMatmulAlgo_t algo;
    size_t work; /* the workspace bytes the algorithm takes */
} lt_choice;

struct lwc_lt_choices {
    lt_choice c[LT_CHOICES];
    int32_t used, next; /* filled, then replaced round-robin */
};

/* One call's descriptors: the operation and the layouts of A, B and C (= D). */
typedef struct lt_plan {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
} lt_plan;

static void plan_free(lt_plan *p) {
    if (p->c != NULL) cublasLtMatrixLayoutDestroy(p->c);
    if (p->b != NULL) cublasLtMatrixLayoutDestroy(p->b);
    if (p->a != NULL) cublasLtMatrixLayoutDestroy(p->a);
    if (p->op != NULL) cublasLtMatmulDescDestroy(p->op);
}

static cublasStatus_t set_op(lt_plan *p, cublasLtMatmulDescAttributes_t what, const void *v,
                             size_t size) {
    return cublasLtMatmulDescSetAttribute(p->op, what, v, size);
}

/* C = op(A) op(B) (+ bias) with bf16 A, B and C, fp32 sums and scale; bias: the bf16 bias's
 * pointer, or NULL; pre: GELU's input (bf16, ld m), where LT_GELU writes it (C then GELU of it)
 * and LT_DGELU reads it (C then the product times GELU' of it); NULL for LT_PLAIN.
 * CUBLAS_STATUS_SUCCESS, or why cuBLASLt refused a descriptor. */
static cublasStatus_t describe(lt_plan *p, bool trans_a, bool trans_b, int64_t m, int64_t n,
                               int64_t k, int64_t lda, int64_t ldb, const void *bias,
                               const void *pre, lt_kind kind) {
    memset(p, 0, sizeof *p);
    const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasStatus_t e = cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (e == CUBLAS_STATUS_SUCCESS) e = set_op(p, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a);
    if (e == CUBLAS_STATUS_SUCCESS) e = set_op(p, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b);
    cublasLtEpilogue_t epilogue = bias != NULL ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if (kind == LT_GELU)
        epilogue = bias != NULL ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    if (kind == LT_DGELU) epilogue = CUBLASLT_EPILOGUE_DGELU; /* no bias here */
    if (e == CUBLAS_STATUS_SUCCESS)
        e = set_op(p, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
    if (bias != NULL) {
        /* bf16, D's type: cuBLASLt's header documents a bias of another type for IMMA and fp8
         * kernels alone, so an fp32 one may find no algorithm (every biased GEMM on the fp32
         * pass). Set, though it is the default, to say so. */
        const int32_t bias_type = CUDA_R_16BF;
        if (e == CUBLAS_STATUS_SUCCESS)
            e = set_op(p, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type);
        if (e == CUBLAS_STATUS_SUCCESS)
            e = set_op(p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    }
    if (kind != LT_PLAIN) { /* GELU's input, laid out as C is; its type defaults to C's, bf16 */
        const int64_t ld = m;
        if (e == CUBLAS_STATUS_SUCCESS)
            e = set_op(p, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &pre, sizeof pre);
        if (e == CUBLAS_STATUS_SUCCESS)
            e = set_op(p, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld);
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
    return e;
}

/* cuBLASLt's heuristic for the described GEMM, its operands and C aligned as given: whether it
 * offers an algorithm (*out filled then). */
static bool heuristic(lw_stream *s, lt_plan *p, const uint32_t align[3], lt_choice *out) {
    cublasLtMatmulPreference_t pref = NULL;
    cublasStatus_t e = cublasLtMatmulPreferenceCreate(&pref);
    const uint64_t most = LT_WORK_MAX;
    const cublasLtMatmulPreferenceAttributes_t which[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const uint32_t value[4] = {align[0], align[1], align[2], align[2]};
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &most, sizeof most);
    for (int i = 0; i < 4 && e == CUBLAS_STATUS_SUCCESS; i++)
        e = cublasLtMatmulPreferenceSetAttribute(pref, which[i], &value[i], sizeof value[i]);
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatmulAlgoGetHeuristic(lwc_dev(s->device)->lt, p->op, p->a, p->b, p->c, p->c,
                                           pref, 1, &result, &found);
    if (pref != NULL) cublasLtMatmulPreferenceDestroy(pref);
    if (e != CUBLAS_STATUS_SUCCESS || found < 1) return false;
    out->algo = result.algo;
    out->work = result.workspaceSize;
    return true;
}

/* LWOPT_GEMM_REPORT set: a line on stderr for each shape's choice, to see which path runs. */
static void report(const lw_stream *s, const lt_choice *c, const char *why) {
    const char *env = getenv("LWOPT_GEMM_REPORT");
    if (env == NULL || env[0] == '\0' || strcmp(env, "0") == 0) return;
    fprintf(stderr, "lwopt %s: bf16-output GEMM %lld x %lld x %lld%s%s: %s\n", s->device->name,
            (long long)c->key[0], (long long)c->key[1], (long long)c->key[2],
            c->key[11] ? " with a bias" : "", lt_kind_names[c->key[12]], why);
}

/* The device's choice for this key: remembered, or made now (descriptors described in p). */
static lt_choice *choice_for(lw_stream *s, lt_plan *p, const int64_t key[LT_KEY],
                             const uint32_t align[3]) {
    lwc_device *d = lwc_dev(s->device);
    if (d->lt_choices == NULL && (d->lt_choices = calloc(1, sizeof *d->lt_choices)) == NULL)
        return NULL; /* out of host memory: the fp32 pass, which needs none */
    struct lwc_lt_choices *all = d->lt_choices;
    for (int32_t i = 0; i < all->used; i++)
        if (memcmp(all->c[i].key, key, sizeof all->c[i].key) == 0) return &all->c[i];
    lt_choice *c;
    if (all->used < LT_CHOICES) {
        c = &all->c[all->used++];
    } else {
        c = &all->c[all->next];
        all->next = (all->next + 1) % LT_CHOICES;
    }
    memcpy(c->key, key, sizeof c->key);
    c->fused = heuristic(s, p, align, c);
    report(s, c,
           c->fused ? "cuBLASLt, with its epilogue"
                    : "cuBLASLt offers no algorithm: the separate passes");
    return c;
}

/* The bias rounded to bf16 into the start of `extra` (one 256-aligned region: cuBLASLt reads it
 * in vectors), then the chosen algorithm with the rest of `extra` as its workspace. *declined:
 * the GEMM did not run because cuBLASLt refused the call (not a failure: the caller takes the
 * fp32 pass). */
static lw_status run_fused(lw_stream *s, lt_plan *p, const lt_choice *c, const void *a,
                           const void *b, const float *bias, int64_t m, void *out, void *extra,
                           int64_t bias_bytes, bool *declined, const char *what) {
    cudaStream_t cs = lwc_cuda_stream(s);
    *declined = false;
    if (bias != NULL) {
        const lw_status st = lwc_to_bf16(s, extra, bias, m);
        if (st != LW_OK) return st;
        const void *rounded = extra;
        cublasStatus_t e = set_op(p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &rounded, sizeof rounded);
        if (e != CUBLAS_STATUS_SUCCESS) return lwc_fail_blas(s->device, e, what);
    }
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t e = cublasLtMatmul(lwc_dev(s->device)->lt, p->op, &alpha, a, p->a, b, p->b,
                                      &beta, out, p->c, out, p->c, &c->algo,
                                      c->work > 0 ? (char *)extra + bias_bytes : NULL, c->work, cs);
    if (e == CUBLAS_STATUS_NOT_SUPPORTED || e == CUBLAS_STATUS_INVALID_VALUE) {
        *declined = true;
        return LW_OK;
    }
    return e == CUBLAS_STATUS_SUCCESS ? LW_OK : lwc_fail_blas(s->device, e, what);
}

/* Under bf16 products: the GEMM on cuBLASLt with the epilogue `kind` where it takes it; *ran
 * says whether it did. */
static lw_status try_fused(lw_stream *s, bool trans_a, bool trans_b, int64_t m, int64_t n,
                           int64_t k, lwc_operand a, int64_t lda, lwc_operand b, int64_t ldb,
                           const float *bias, void *out, const void *pre, lt_kind kind, bool *ran,
                           const char *what) {
    *ran = false;
    /* GELU's input takes a leading dimension that divides by 8 */
    if (kind != LT_PLAIN && m % 8 != 0) return LW_OK;
    /* an operand converted by lwc_gemm_prepare lies at a region's start; the bias likewise, so
     * the descriptors are made with a stand-in of that alignment, replaced before the GEMM runs
     * (the heuristic reads a pointer's alignment only) */
    const uint32_t align[3] = {a.bf16 ? alignment(a.p) : REGION_ALIGN,
                               b.bf16 ? alignment(b.p) : REGION_ALIGN, alignment(out)};
    const int64_t key[LT_KEY] = {m,
                                 n,
                                 k,
                                 lda,
                                 ldb,
                                 trans_a,
                                 trans_b,
                                 align[0],
                                 align[1],
                                 align[2],
                                 kind != LT_PLAIN ? alignment(pre) : 0,
                                 bias != NULL,
                                 kind};
    const void *stand_in = bias != NULL ? (const void *)(uintptr_t)REGION_ALIGN : NULL;
    lt_plan p;
    lw_status st = LW_OK;
    lt_choice *c = NULL;
    if (describe(&p, trans_a, trans_b, m, n, k, lda, ldb, stand_in, pre, kind) ==
        CUBLAS_STATUS_SUCCESS)
        c = choice_for(s, &p, key, align);
    if (c != NULL && c->fused) {
        const int64_t bias_bytes = bias != NULL ? aligned(2 * m) : 0;
        void *extra = NULL;
        st = lwc_gemm_prepare(s, trans_a, trans_b, m, n, k, &a, lda, &b, ldb,
                              bias_bytes + (int64_t)c->work, &extra, what);
        bool declined = false;
        if (st == LW_OK)
            st = run_fused(s, &p, c, a.p, b.p, bias, m, out, extra, bias_bytes, &declined, what);
        if (declined) {
            c->fused = false;
            report(s, c, "cuBLASLt refused its algorithm: the separate passes");
        }
        *ran = st == LW_OK && !declined;
    }
    plan_free(&p);
    return st;
}

lw_status lwc_gemm_bf16_out(lw_stream *s, bool trans_a, bool trans_b, int64_t m, int64_t n,
                            int64_t k, lwc_operand a, int64_t lda, lwc_operand b, int64_t ldb,
                            const float *bias, void *c, const char *what) {
    if (m <= 0 || n <= 0 || k <= 0) return LW_OK; /* the caller handles an empty k */
    if (s->device->matmul == LW_MATMUL_BF16) {
        bool ran = false;
        const lw_status st = try_fused(s, trans_a, trans_b, m, n, k, a, lda, b, ldb, bias, c, NULL,
                                       LT_PLAIN, &ran, what);
        if (st != LW_OK || ran) return st;
    }
    /* fp32 into the workspace (the bias seeded, the product added), then rounded; nothing holds
     * a region of the workspace here, so it may move. Under bf16 products the bias seeded is its
     * bf16 rounding widened (after the product's region), what cuBLASLt's epilogue adds. */
    const bool round_bias = bias != NULL && s->device->matmul == LW_MATMUL_BF16;
    const int64_t y_bytes = aligned(4 * m * n), b32_bytes = aligned(4 * m);
    void *y32 = NULL;
    lw_status st = lwc_gemm_prepare(s, trans_a, trans_b, m, n, k, &a, lda, &b, ldb,
                                    y_bytes + (round_bias ? b32_bytes + 2 * m : 0), &y32, what);
    const float *seed = bias;
    if (st == LW_OK && round_bias) {
        float *b32 = (float *)((char *)y32 + y_bytes);
        void *b16 = (char *)b32 + b32_bytes;
        st = lwc_to_bf16(s, b16, bias, m);
        if (st == LW_OK) st = lwc_widen(s, b32, b16, m);
        seed = b32;
    }
    if (st == LW_OK && bias != NULL)
        st = lwc_launched(s, lwc_rows_fill(lwc_cuda_stream(s), y32, seed, n, m), "a GEMM's bias");
    if (st == LW_OK)
        st = lwc_gemm_ex(s, trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb,
                         bias != NULL ? 1.0f : 0.0f, y32, false, m, what);
    return st == LW_OK ? lwc_to_bf16(s, c, y32, m * n) : st;
}

lw_status lwc_gemm_gelu_bf16_out(lw_stream *s, bool trans_a, bool trans_b, int64_t m, int64_t n,
                                 int64_t k, lwc_operand a, int64_t lda, lwc_operand b, int64_t ldb,
                                 const float *bias, void *y, void *pre, bool *ran,
                                 const char *what) {
    *ran = false;
    if (m <= 0 || n <= 0 || k <= 0 || s->device->matmul != LW_MATMUL_BF16) return LW_OK;
    return try_fused(s, trans_a, trans_b, m, n, k, a, lda, b, ldb, bias, y, pre, LT_GELU, ran,
                     what);
}

lw_status lwc_gemm_dgelu_bf16_out(lw_stream *s, bool trans_a, bool trans_b, int64_t m, int64_t n,
                                  int64_t k, lwc_operand a, int64_t lda, lwc_operand b, int64_t ldb,
                                  void *d, const void *pre, bool *ran, const char *what) {
    *ran = false;
    if (m <= 0 || n <= 0 || k <= 0 || s->device->matmul != LW_MATMUL_BF16) return LW_OK;
    return try_fused(s, trans_a, trans_b, m, n, k, a, lda, b, ldb, NULL, d, pre, LT_DGELU, ran,
                     what);
}
