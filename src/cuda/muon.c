/* muon.c: Muon's entries on a GPU: the element-wise step (kernel in muon.cu) and Newton-Schulz,
 * whose GEMMs run here on cuBLAS, batched over same-shaped matrices (strided-batched GEMMs) on
 * tensor cores: bf16 inputs with fp32 accumulation (default), TF32, or exact fp32. Its
 * normalisation is muon.cu's, its bf16 result's conversion bf16.cu's; the tensor-parallel halves
 * are muon_tp.c's.
 *
 * Layout, as on the CPU (device/cpu/muon.c): a row-major rows x cols matrix read column-major is
 * its transpose, so no transpose is ever copied. With p = min and q = max of the two, a wide
 * matrix (rows <= cols) is Z = X^T (q x p, ld q) to cuBLAS and a tall one is X (p x q, ld p).
 * Per step: A = X X^T (Z^T Z), B = b A + c A A (one GEMM with beta after B = A), and
 * X' = a X + B X (Z' = a Z + Z B, B symmetric), each a GEMM whose beta carries the added term.
 * X X^T and A A are symmetric, but cuBLAS has no bf16 or TF32 SYRK and its fp32 SYRK does not
 * use tensor cores: full GEMMs are taken on the GPU (plan->symmetric is the CPU's choice). */
#include "cuda/cuda.h"

lw_status lwc_muon_momentum(lw_stream *s, const lwi_muon_step *k, float *w, const float *g,
                            float *m, float *u, int64_t n) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s,
                        lwc_muon_momentum_elements(lwc_cuda_stream(s), w, g, m, u, n, k->beta,
                                                   k->nesterov, (int32_t)k->weight_decay_mode,
                                                   k->lr, k->weight_decay, k->grad_scale),
                        "Muon's momentum kernel");
}

/* ---- Newton-Schulz --------------------------------------------------------------------------- */

/* One strided-batched GEMM: C = alpha op(A) op(B) + beta C, every matrix of one type. */
typedef struct ns_gemm {
    cublasHandle_t blas;
    cudaDataType type;
    cublasComputeType_t compute;
    int batch;
} ns_gemm;

static cublasStatus_t gemm(const ns_gemm *g, cublasOperation_t ta, cublasOperation_t tb, int64_t m,
                           int64_t n, int64_t k, float alpha, const void *a, int64_t lda,
                           int64_t stride_a, const void *b, int64_t ldb, int64_t stride_b,
                           float beta, void *c, int64_t ldc, int64_t stride_c) {
    return cublasGemmStridedBatchedEx(g->blas, ta, tb, (int)m, (int)n, (int)k, &alpha, a, g->type,
                                      (int)lda, stride_a, b, g->type, (int)ldb, stride_b, &beta, c,
                                      g->type, (int)ldc, stride_c, g->batch, g->compute,
                                      CUBLAS_GEMM_DEFAULT);
}

/* The iterations on X (batch x p x q elements of `size` bytes), A and B (batch x p x p) and Y
 * (batch x p x q); [out] *result: X or Y, whichever holds the last iterate. */
static lw_status iterate(lw_stream *s, const lwi_ns_plan *plan, const ns_gemm *g, size_t size,
                         bool wide, int64_t p, int64_t q, char *x, char *a, char *b, char *y,
                         char **result) {
    cudaStream_t cs = lwc_cuda_stream(s);
    const int64_t pp = p * p, pq = p * q, batch = g->batch;
    cublasStatus_t e = CUBLAS_STATUS_SUCCESS;
    cudaError_t ce = cudaSuccess;
    for (int32_t k = 0; k < plan->steps && e == CUBLAS_STATUS_SUCCESS && ce == cudaSuccess; k++) {
        const float *abc = plan->abc + 3 * k;
        /* A = X X^T */
        if (wide)
            e = gemm(g, CUBLAS_OP_T, CUBLAS_OP_N, p, p, q, 1.0f, x, q, pq, x, q, pq, 0.0f, a, p, pp);
        else
            e = gemm(g, CUBLAS_OP_N, CUBLAS_OP_T, p, p, q, 1.0f, x, p, pq, x, p, pq, 0.0f, a, p, pp);
        /* M = b A + c A A (into B), or b A when c is 0 (cubic steps): then M X is b (A X) */
        const char *mat = a;
        float mcoef = abc[1];
        if (e == CUBLAS_STATUS_SUCCESS && abc[2] != 0.0f) {
            ce = cudaMemcpyAsync(b, a, (size_t)(batch * pp) * size, cudaMemcpyDeviceToDevice, cs);
            if (ce == cudaSuccess)
                e = gemm(g, CUBLAS_OP_N, CUBLAS_OP_N, p, p, p, abc[2], a, p, pp, a, p, pp, abc[1],
                         b, p, pp);
            mat = b;
            mcoef = 1.0f;
        }
        /* Y = a X + M X */
        if (e == CUBLAS_STATUS_SUCCESS && ce == cudaSuccess)
            ce = cudaMemcpyAsync(y, x, (size_t)(batch * pq) * size, cudaMemcpyDeviceToDevice, cs);
        if (e == CUBLAS_STATUS_SUCCESS && ce == cudaSuccess) {
            if (wide)
                e = gemm(g, CUBLAS_OP_N, CUBLAS_OP_N, q, p, p, mcoef, x, q, pq, mat, p, pp, abc[0],
                         y, q, pq);
            else
                e = gemm(g, CUBLAS_OP_N, CUBLAS_OP_N, p, q, p, mcoef, mat, p, pp, x, p, pq, abc[0],
                         y, p, pq);
        }
        char *t = x;
        x = y;
        y = t;
    }
    if (ce != cudaSuccess) return lwc_fail(s->device, ce, "Newton-Schulz's copies");
    if (e != CUBLAS_STATUS_SUCCESS) return lwc_fail_blas(s->device, e, "Newton-Schulz's GEMMs");
    *result = x;
    return LW_OK;
}

/* Up to 65535 matrices (the normalisation's grid has one row of blocks per matrix). */
static lw_status newton_schulz_chunk(lw_stream *s, const lwi_ns_plan *plan, const float *u,
                                     float *x, int64_t batch, int64_t rows, int64_t cols) {
    cudaStream_t cs = lwc_cuda_stream(s);
    const int64_t p = rows <= cols ? rows : cols, q = rows <= cols ? cols : rows;
    const int64_t n = rows * cols, pp = p * p, pq = p * q;
    float *partials = plan->work + batch * (2 * pp + pq);
    cublasHandle_t blas = lwc_dev(s->device)->blas;
    cublasStatus_t be = cublasSetStream(blas, cs);
    if (be != CUBLAS_STATUS_SUCCESS) return lwc_fail_blas(s->device, be, "cublasSetStream");
    ns_gemm g = {blas, CUDA_R_32F, CUBLAS_COMPUTE_32F, (int)batch};
    char *result = NULL;
    lw_status st;
    if (plan->precision == LW_NS_BF16) {
        /* X, A, B, Y in bf16: 2 p q + 2 p p halves per matrix, within the fp32 workspace */
        char *xb = (char *)plan->work, *a = xb + 2 * batch * pq, *b = a + 2 * batch * pp;
        char *y = b + 2 * batch * pp;
        g.type = CUDA_R_16BF;
        cudaError_t e = lwc_ns_normalize(cs, u, batch, n, plan->eps, partials, LWI_NS_PARTIALS,
                                         NULL, xb);
        if (e != cudaSuccess) return lwc_fail(s->device, e, "Newton-Schulz's normalisation");
        if ((st = iterate(s, plan, &g, 2, rows <= cols, p, q, xb, a, b, y, &result)) != LW_OK)
            return st;
        e = lwc_bf16_to_f32(cs, result, x, batch * n);
        return e == cudaSuccess ? LW_OK : lwc_fail(s->device, e, "Newton-Schulz's result");
    }
    /* fp32 or TF32: X starts in x itself (u may be x: the scaling reads then writes each element) */
    if (plan->precision == LW_NS_TF32) g.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    char *a = (char *)plan->work, *b = a + 4 * batch * pp, *y = b + 4 * batch * pp;
    cudaError_t e = lwc_ns_normalize(cs, u, batch, n, plan->eps, partials, LWI_NS_PARTIALS, x, NULL);
    if (e != cudaSuccess) return lwc_fail(s->device, e, "Newton-Schulz's normalisation");
    if ((st = iterate(s, plan, &g, 4, rows <= cols, p, q, (char *)x, a, b, y, &result)) != LW_OK)
        return st;
    if (result != (char *)x)
        e = cudaMemcpyAsync(x, result, (size_t)(batch * n) * 4, cudaMemcpyDeviceToDevice, cs);
    return e == cudaSuccess ? LW_OK : lwc_fail(s->device, e, "Newton-Schulz's result");
}

lw_status lwc_newton_schulz(lw_stream *s, const lwi_ns_plan *plan, const float *u, float *x,
                            int64_t batch, int64_t rows, int64_t cols) {
    lw_status st = lwc_use(s->device);
    const int64_t n = rows * cols, most = 65535;
    /* a smaller batch lays its workspace out within the larger one's */
    for (int64_t first = 0; st == LW_OK && first < batch; first += most)
        st = newton_schulz_chunk(s, plan, u + first * n, x + first * n,
                                 batch - first < most ? batch - first : most, rows, cols);
    return st;
}
