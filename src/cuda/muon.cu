// muon.cu: Muon's entries on a GPU: the element-wise step (weight decay, momentum, Nesterov) in
// one pass, and Newton-Schulz, whose GEMMs run on cuBLAS, batched over same-shaped matrices
// (strided-batched GEMMs) on tensor cores: bf16 inputs with fp32 accumulation (default), TF32, or
// exact fp32. Its start (each matrix's Frobenius norm and the scaled copy in fp32 or bf16) runs
// on the device: the norm never goes to the host; its bf16 result's conversion is bf16.cu's, the
// tensor-parallel halves are muon_tp.c's. The kernels' products and sums are rounded as the CPU
// reference rounds them (no FMA contraction) so that fp32 runs agree with it closely.
//
// Layout, as on the CPU (device/cpu/muon.c): a row-major rows x cols matrix read column-major is
// its transpose, so no transpose is ever copied. With p = min and q = max of the two, a wide
// matrix (rows <= cols) is Z = X^T (q x p, ld q) to cuBLAS and a tall one is X (p x q, ld p).
// Per step: A = X X^T (Z^T Z), B = b A + c A A (one GEMM with beta after B = A), and
// X' = a X + B X (Z' = a Z + Z B, B symmetric), each a GEMM whose beta carries the added term.
// X X^T and A A are symmetric, but cuBLAS has no bf16 or TF32 SYRK and its fp32 SYRK does not
// use tensor cores: full GEMMs are taken on the GPU (plan->symmetric is the CPU's choice).
#include "cuda/cuda.h"

#include <cuda_bf16.h>

namespace {

constexpr int THREADS = 256;

int blocks_for(int64_t n, int64_t per_thread) {
    int64_t b = (n + THREADS * per_thread - 1) / (THREADS * per_thread);
    return (int)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

__global__ void momentum_kernel(float *w, const float *g, float *m, float *u, int64_t n,
                                float beta, bool nesterov, bool l2, float wd, float w_factor,
                                float grad_scale) {
    const float keep = 1.0f - beta;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float wi = w[i];
        if (w_factor != 1.0f) w[i] = wi = __fmul_rn(wi, w_factor);
        float gi = __fmul_rn(grad_scale, g[i]);
        if (l2) gi = __fadd_rn(gi, __fmul_rn(wd, wi));
        const float mi = __fadd_rn(__fmul_rn(beta, m[i]), __fmul_rn(keep, gi));
        m[i] = mi;
        u[i] = nesterov ? __fadd_rn(__fmul_rn(keep, gi), __fmul_rn(beta, mi)) : mi;
    }
}

__device__ double block_sum(double v) {
    __shared__ double shared[32];
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, off);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = threadIdx.x < blockDim.x / 32 ? shared[lane] : 0.0;
    if (warp == 0)
        for (int off = 16; off > 0; off >>= 1)
            v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

// grid (blocks, batch): partials[b * stride + block] = sum of squares of the block's elements
__global__ void square_partials(const float *u, int64_t n, float *partials, int32_t stride) {
    const float *x = u + blockIdx.y * n;
    double s = 0.0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        s += (double)x[i] * x[i];
    s = block_sum(s);
    if (threadIdx.x == 0) partials[blockIdx.y * stride + blockIdx.x] = (float)s;
}

// grid (blocks, batch): each block adds its matrix's partials (in the same order in every block)
// and writes its part of x = u / max(gain norm + offset, eps)
__global__ void scale_by_norm(const float *u, int64_t n, const float *partials, int32_t stride,
                              float eps, float gain, float offset, float *x_f32,
                              __nv_bfloat16 *x_bf16) {
    __shared__ float inv;
    double s = 0.0;
    for (int b = threadIdx.x; b < gridDim.x; b += blockDim.x)
        s += partials[blockIdx.y * stride + b];
    s = block_sum(s);
    if (threadIdx.x == 0) {
        const double d = __dadd_rn(__dmul_rn((double)gain, sqrt(s)), (double)offset);
        inv = (float)(1.0 / (d > eps ? d : (double)eps));
    }
    __syncthreads();
    const float *src = u + blockIdx.y * n;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float v = __fmul_rn(src[i], inv);
        if (x_bf16)
            x_bf16[blockIdx.y * n + i] = __float2bfloat16_rn(v);
        else
            x_f32[blockIdx.y * n + i] = v;
    }
}

} // namespace

// Muon's element-wise step in one pass: weight decay of w (mode 0 decoupled: w *= 1 - lr wd;
// 1 independent: w *= 1 - wd; 2 L2: g += wd w), m = beta m + (1 - beta) g, u = Nesterov's
// (1 - beta) g + beta m, or m.
static cudaError_t momentum_elements(cudaStream_t stream, float *w, const float *g, float *m,
                                     float *u, int64_t n, float beta, bool nesterov,
                                     int32_t wd_mode, float lr, float wd, float grad_scale) {
    if (n <= 0) return cudaSuccess;
    // the factor as the CPU computes it (decoupled: 1 - lr wd; independent: 1 - wd)
    float factor = 1.0f;
    if (wd != 0.0f && wd_mode == 0) factor = 1.0f - lr * wd;
    if (wd != 0.0f && wd_mode == 1) factor = 1.0f - wd;
    momentum_kernel<<<blocks_for(n, 4), THREADS, 0, stream>>>(w, g, m, u, n, beta, nesterov,
                                                              wd_mode == 2, wd, factor,
                                                              grad_scale);
    return cudaGetLastError();
}

// Newton-Schulz's start for `batch` matrices of n elements: partials[b * LWI_NS_PARTIALS ..] get
// the sums of squares of matrix b's blocks, then x = u / max(gain ||u||_F + offset, eps) per
// matrix (the plan's), written as fp32 (x_bf16 NULL: into x_f32) or bf16 (into x_bf16), with no
// host round trip.
static cudaError_t ns_normalize(cudaStream_t stream, const float *u, int64_t batch, int64_t n,
                                const lwi_ns_plan *plan, float *partials,
                                int32_t partials_per_matrix, float *x_f32, void *x_bf16) {
    if (batch <= 0 || n <= 0) return cudaSuccess;
    int blocks = blocks_for(n, 8);
    if (blocks > partials_per_matrix) blocks = partials_per_matrix;
    const dim3 grid((unsigned)blocks, (unsigned)batch);
    square_partials<<<grid, THREADS, 0, stream>>>(u, n, partials, partials_per_matrix);
    scale_by_norm<<<grid, THREADS, 0, stream>>>(u, n, partials, partials_per_matrix, plan->eps,
                                                plan->norm_gain, plan->norm_offset, x_f32,
                                                static_cast<__nv_bfloat16 *>(x_bf16));
    return cudaGetLastError();
}

// ---- the table's entries ------------------------------------------------------------------------

lw_status lwc_muon_momentum(lw_stream *s, const lwi_muon_step *k, float *w, const float *g,
                            float *m, float *u, int64_t n) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s,
                        momentum_elements(lwc_cuda_stream(s), w, g, m, u, n, k->beta, k->nesterov,
                                          (int32_t)k->weight_decay_mode, k->lr, k->weight_decay,
                                          k->grad_scale),
                        "Muon's momentum kernel");
}

// ---- Newton-Schulz ---------------------------------------------------------------------------

// One strided-batched GEMM: C = alpha op(A) op(B) + beta C, every matrix of one type.
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

// The iterations on X (batch x p x q elements of `size` bytes), A and B (batch x p x p) and Y
// (batch x p x q); [out] *result: X or Y, whichever holds the last iterate.
static lw_status iterate(lw_stream *s, const lwi_ns_plan *plan, const ns_gemm *g, size_t size,
                         bool wide, int64_t p, int64_t q, char *x, char *a, char *b, char *y,
                         char **result) {
    cudaStream_t cs = lwc_cuda_stream(s);
    const int64_t pp = p * p, pq = p * q, batch = g->batch;
    cublasStatus_t e = CUBLAS_STATUS_SUCCESS;
    cudaError_t ce = cudaSuccess;
    for (int32_t k = 0; k < plan->steps && e == CUBLAS_STATUS_SUCCESS && ce == cudaSuccess; k++) {
        const float *abc = plan->abc + 3 * k;
        // A = X X^T
        if (wide)
            e = gemm(g, CUBLAS_OP_T, CUBLAS_OP_N, p, p, q, 1.0f, x, q, pq, x, q, pq, 0.0f, a, p,
                     pp);
        else
            e = gemm(g, CUBLAS_OP_N, CUBLAS_OP_T, p, p, q, 1.0f, x, p, pq, x, p, pq, 0.0f, a, p,
                     pp);
        // M = b A + c A A (into B), or b A when c is 0 (cubic steps): then M X is b (A X)
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
        // Y = a X + M X
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

// Up to 65535 matrices (the normalisation's grid has one row of blocks per matrix).
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
        // X, A, B, Y in bf16: 2 p q + 2 p p halves per matrix, within the fp32 workspace
        char *xb = (char *)plan->work, *a = xb + 2 * batch * pq, *b = a + 2 * batch * pp;
        char *y = b + 2 * batch * pp;
        g.type = CUDA_R_16BF;
        cudaError_t e = ns_normalize(cs, u, batch, n, plan, partials, LWI_NS_PARTIALS, NULL, xb);
        if (e != cudaSuccess) return lwc_fail(s->device, e, "Newton-Schulz's normalisation");
        if ((st = iterate(s, plan, &g, 2, rows <= cols, p, q, xb, a, b, y, &result)) != LW_OK)
            return st;
        e = lwc_bf16_to_f32(cs, result, x, batch * n);
        return e == cudaSuccess ? LW_OK : lwc_fail(s->device, e, "Newton-Schulz's result");
    }
    // fp32 or TF32: X starts in x itself (u may be x: the scaling reads then writes each element)
    if (plan->precision == LW_NS_TF32) g.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    char *a = (char *)plan->work, *b = a + 4 * batch * pp, *y = b + 4 * batch * pp;
    cudaError_t e = ns_normalize(cs, u, batch, n, plan, partials, LWI_NS_PARTIALS, x, NULL);
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
    // a smaller batch lays its workspace out within the larger one's
    for (int64_t first = 0; st == LW_OK && first < batch; first += most)
        st = newton_schulz_chunk(s, plan, u + first * n, x + first * n,
                                 batch - first < most ? batch - first : most, rows, cols);
    return st;
}
