// linear.cu: the fully connected layer y = x w^T + b on a GPU, forward and accumulating backward:
// the GEMMs through lwc_gemm (gemm.c) in the device's matmul precision (lw_device_set_matmul:
// exact fp32 by default, CUBLAS_COMPUTE_32F, the mode compared tightly with the CPU; TF32 tensor
// cores; or bf16 operands with fp32 sums on tensor cores, autocast's arithmetic), the bias rows
// (the kernel below, which gemm_lt.c's bias shares) and the bias gradient's deterministic
// column sums (colsum.cu).
//
// Orientation: cuBLAS is column-major, and a row-major [r, k] matrix read column-major is its
// transpose ([k, r], leading dimension k), so every row-major product is taken as its transpose
// (C^T = B^T A^T) with no copies; each call below writes out its translation.
//
// bf16: an fp32 operand (the gradients, an fp32 input or weight) is read through a bf16 copy
// rounded into the stream's workspace just before the GEMM, and one that feeds two GEMMs (dy in
// the backward) is rounded once; bf16 weights (the buffers' bf16 parameters) and bf16 inputs
// (the activations a model keeps in bf16) are read as they are. Under fp32 or TF32 products a
// bf16 operand is widened instead (lwc_gemm). A bf16 output comes from gemm_lt.c (cuBLASLt with
// the bias in its epilogue under bf16 products; with GELU after it, cuBLASLt's GELU epilogue); a
// bf16 output gradient dy (what the attention's and GELU's backwards write for the layers that
// feed them) is read as it is, like a bf16 input.
#include "cuda/cuda.h"

namespace {

constexpr int THREADS = 256;

int blocks_for(int64_t n) {
    int64_t b = (n + THREADS - 1) / THREADS;
    return (int)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

__global__ void fill_rows_kernel(float *y, const float *b, int64_t n, int64_t cols) {
    const int64_t total = n * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = b[i % cols];
}

} // namespace

cudaError_t lwc_rows_fill(cudaStream_t stream, float *y, const float *b, int64_t n, int64_t cols) {
    if (n > 0 && cols > 0) fill_rows_kernel<<<blocks_for(n * cols), THREADS, 0, stream>>>(y, b, n, cols);
    return cudaGetLastError();
}

// ---- the table's entries ------------------------------------------------------------------------

lw_status lwc_linear_forward(lw_stream *s, void *y, lw_dtype y_dtype, const void *x,
                             lw_dtype x_dtype, const void *w, lw_dtype w_dtype, const float *b,
                             int64_t n, int64_t in, int64_t out) {
    if (n <= 0 || out <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cudaStream_t cs = lwc_cuda_stream(s);
    // y[n, out] = x[n, in] w[out, in]^T. Column-major: y is Y^T [out, n] (ld out), w is W^T
    // [in, out] (ld in), x is X^T [in, n] (ld in); Y^T = W X^T = op_T(w) op_N(x):
    // m = out, n = n, k = in. The GEMM helpers convert what the product's type needs.
    if (y_dtype == LW_DTYPE_BF16 && in > 0)
        return lwc_gemm_bf16_out(s, true, false, out, n, in, lwc_typed(w, w_dtype), in,
                                 lwc_typed(x, x_dtype), in, b, y, "the linear layer's GEMM");
    // An fp32 y is seeded with the bias and the GEMM adds onto it (beta = 1), as the CPU does;
    // without a bias, beta = 0 never reads y.
    float *y32 = static_cast<float *>(y);
    if (y_dtype == LW_DTYPE_BF16) { // an empty inner dimension: y is the bias, rounded
        void *w32 = NULL;
        lw_status st = lwc_workspace(s, (int64_t)sizeof(float) * n * out, &w32);
        if (st != LW_OK) return st;
        y32 = static_cast<float *>(w32);
    }
    if (b != NULL) {
        cudaError_t e = lwc_rows_fill(cs, y32, b, n, out);
        if (e != cudaSuccess) return lwc_fail(s->device, e, "the linear layer's bias");
    } else if (in <= 0) { // the product is 0 (cuBLAS rejects lda = 0)
        lw_status st = lwc_launched(
            s, cudaMemsetAsync(y32, 0, sizeof(float) * (size_t)(n * out), cs), "cudaMemsetAsync");
        if (st != LW_OK) return st;
    }
    if (in <= 0) return y32 == y ? LW_OK : lwc_to_bf16(s, y, y32, n * out);
    return lwc_gemm(s, true, false, out, n, in, 1.0f, lwc_typed(w, w_dtype), in,
                    lwc_typed(x, x_dtype), in, b != NULL ? 1.0f : 0.0f, y32, out,
                    "the linear layer's GEMM");
}

// The forward and GELU: cuBLASLt's GELU epilogue under bf16 products with bf16 outputs, else the
// two entries one after the other (the CPU's results).
lw_status lwc_linear_gelu_forward(lw_stream *s, void *y, void *pre, lw_dtype dtype, const void *x,
                                  lw_dtype x_dtype, const void *w, lw_dtype w_dtype, const float *b,
                                  int64_t n, int64_t in, int64_t out) {
    if (n <= 0 || out <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    lw_status st = LW_OK;
    if (dtype == LW_DTYPE_BF16 && in > 0) {
        bool ran = false;
        st = lwc_gemm_gelu_bf16_out(s, true, false, out, n, in, lwc_typed(w, w_dtype), in,
                                    lwc_typed(x, x_dtype), in, b, y, pre, &ran,
                                    "the linear layer's GEMM with GELU");
        if (st != LW_OK || ran) return st;
    }
    st = lwc_linear_forward(s, pre, dtype, x, x_dtype, w, w_dtype, b, n, in, out);
    return st == LW_OK ? lwc_gelu_forward(s, y, dtype, pre, dtype, n * out) : st;
}

lw_status lwc_linear_backward(lw_stream *s, float *dx, float *dw, float *db, const void *dy,
                              lw_dtype dy_dtype, const void *x, lw_dtype x_dtype, const void *w,
                              lw_dtype w_dtype, int64_t n, int64_t in, int64_t out) {
    if (n <= 0 || out <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    lw_status st = LW_OK;
    if (in > 0) {
        lwc_operand ody = lwc_typed(dy, dy_dtype), ow = lwc_typed(w, w_dtype);
        lwc_operand ox = lwc_typed(x, x_dtype);
        if (s->device->matmul == LW_MATMUL_BF16) {
            // an fp32 dy, an fp32 w (only for dx) and an fp32 x rounded once each, into three
            // regions: both GEMMs read dy. The column sum below asks for the workspace again only
            // after both GEMMs are queued, and the stream runs them first.
            const bool round_dy = !ody.bf16, round_w = dx != NULL && !ow.bf16, round_x = !ox.bf16;
            const int64_t bytes[3] = {round_dy ? 2 * n * out : 0, round_w ? 2 * out * in : 0,
                                      round_x ? 2 * n * in : 0};
            void *r[3];
            if (round_dy || round_w || round_x) st = lwc_regions(s, 3, bytes, r);
            if (st == LW_OK && round_dy)
                st = lwc_to_bf16(s, r[0], static_cast<const float *>(dy), n * out);
            if (st == LW_OK && round_w)
                st = lwc_to_bf16(s, r[1], static_cast<const float *>(w), out * in);
            if (st == LW_OK && round_x)
                st = lwc_to_bf16(s, r[2], static_cast<const float *>(x), n * in);
            if (round_dy) ody = lwc_bf16(r[0]);
            if (round_w) ow = lwc_bf16(r[1]);
            if (round_x) ox = lwc_bf16(r[2]);
        }
        // dx[n, in] += dy[n, out] w[out, in]. Column-major: dX^T [in, n] (ld in) = W^T [in, out]
        // (w as stored, ld in) dY^T [out, n] (dy as stored, ld out): op_N(w) op_N(dy),
        // m = in, n = n, k = out, beta 1.
        if (st == LW_OK && dx != NULL)
            st = lwc_gemm(s, false, false, in, n, out, 1.0f, ow, in, ody, out, 1.0f, dx, in,
                          "the linear layer's input gradient");
        // dw[out, in] += dy^T x. Column-major: dW^T [in, out] (ld in) = X^T [in, n] (x as
        // stored, ld in) dY [n, out] (dy as stored is dY^T [out, n], ld out, transposed):
        // op_N(x) op_T(dy), m = in, n = out, k = n, beta 1.
        if (st == LW_OK)
            st = lwc_gemm(s, false, true, in, out, n, 1.0f, ox, in, ody, out, 1.0f, dw, in,
                          "the linear layer's weight gradient");
    }
    if (st != LW_OK || db == NULL) return st;
    void *work = NULL;
    st = lwc_workspace(s, (int64_t)sizeof(double) * lwc_colsum_doubles(n, out), &work);
    if (st != LW_OK) return st;
    return lwc_launched(s,
                        lwc_colsum(lwc_cuda_stream(s), db, dy, dy_dtype == LW_DTYPE_BF16, n, out,
                                   static_cast<double *>(work)),
                        "the linear layer's bias gradient");
}

// dw and db as the linear backward gives them; dpre by cuBLASLt's DGELU epilogue under bf16
// products with a bf16 dpre, else as the two kernels give it: dx = 0 + dy w into an fp32 region
// of the workspace (with the operands' conversions, in one request), then dpre = 0 + dx GELU'.
lw_status lwc_linear_gelu_backward(lw_stream *s, void *dpre, lw_dtype dtype, float *dw, float *db,
                                   const void *dy, lw_dtype dy_dtype, const void *x,
                                   lw_dtype x_dtype, const void *w, lw_dtype w_dtype,
                                   const void *pre, int64_t n, int64_t in, int64_t out) {
    if (n <= 0 || (in <= 0 && out <= 0)) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    const bool bf16 = dtype == LW_DTYPE_BF16;
    cudaStream_t cs = lwc_cuda_stream(s);
    if (out <= 0) // an empty product: dpre is 0 (it is written, not accumulated)
        return lwc_launched(s, cudaMemsetAsync(dpre, 0, (bf16 ? 2 : 4) * (size_t)(n * in), cs),
                            "cudaMemsetAsync");
    lw_status st =
        lwc_linear_backward(s, NULL, dw, db, dy, dy_dtype, x, x_dtype, w, w_dtype, n, in, out);
    if (st != LW_OK || in <= 0) return st;
    const char *what = "the linear layer's input gradient with GELU's";
    // dpre: column-major dPre^T [in, n] (ld in) = W^T [in, out] (w as stored, ld in) dY^T [out,
    // n] (dy as stored, ld out): op_N(w) op_N(dy), m = in, n = n, k = out
    lwc_operand a = lwc_typed(w, w_dtype), b = lwc_typed(dy, dy_dtype);
    if (bf16) {
        bool ran = false;
        st = lwc_gemm_dgelu_bf16_out(s, false, false, in, n, out, a, in, b, out, dpre, pre, &ran,
                                     what);
        if (st != LW_OK || ran) return st;
    }
    void *dx = NULL;
    st = lwc_gemm_prepare(s, false, false, in, n, out, &a, in, &b, out, 4 * n * in, &dx, what);
    if (st == LW_OK)
        st = lwc_launched(s, cudaMemsetAsync(dx, 0, 4 * (size_t)(n * in), cs), "cudaMemsetAsync");
    if (st == LW_OK)
        st = lwc_gemm_ex(s, false, false, in, n, out, 1.0f, a, in, b, out, 1.0f, dx, false, in,
                         what);
    if (st == LW_OK)
        st = lwc_launched(s, cudaMemsetAsync(dpre, 0, (bf16 ? 2 : 4) * (size_t)(n * in), cs),
                          "cudaMemsetAsync");
    if (st == LW_OK)
        st = lwc_launched(
            s, lwc_gelu_grad(cs, dpre, bf16, static_cast<float *>(dx), pre, bf16, n * in),
            "the GELU backward kernel");
    return st;
}
