// value_gate.cu: the table's value-gate entries on a GPU: nanochat's value embeddings mixed into
// the V heads through a per-head gate, and the backward. A thread per (row, head) takes the
// gate's logit and sigmoid in double as the CPU does (device/cpu/value_gate.c), so g agrees
// within an ulp of its rounding (CUDA's exp against glibc's); the weight's gradient is a
// deterministic column sum (colsum.cu). qkv and x of fp32 or bf16 (template parameters Q and X:
// float or bf16 bits), read widened, a bf16 V value written rounded once.
#include "cuda/bf16_bits.h"
#include "cuda/cuda.h"

namespace {

constexpr int THREADS = 256;

int blocks_for(int64_t n) {
    int64_t b = (n + THREADS - 1) / THREADS;
    return (int)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

struct gate_args {
    int64_t n, row_stride, col0, x_stride, n_heads, hd, channels;
    double scale;
};

template <typename X>
__device__ double logit(const X *x, const float *w, const gate_args &a, int64_t r, int64_t h) {
    double z = 0.0;
    for (int64_t k = 0; k < a.channels; k++)
        z += (double)w[h * a.channels + k] * (double)lwc_load(x, r * a.x_stride + k);
    return z;
}

template <typename Q, typename X>
__global__ void gate_forward_kernel(Q *qkv, const float *ve, const X *x, const float *w,
                                    gate_args a) {
    const int64_t kv = a.n_heads * a.hd;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < a.n * a.n_heads;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / a.n_heads, h = i % a.n_heads;
        const float g = (float)(a.scale / (1.0 + exp(-logit(x, w, a, r, h))));
        const int64_t at = r * a.row_stride + a.col0 + h * a.hd;
        const float *e = ve + r * kv + h * a.hd;
        for (int64_t d = 0; d < a.hd; d++)
            lwc_store(qkv, at + d, __fadd_rn(lwc_load(qkv, at + d), __fmul_rn(g, e[d])));
    }
}

// dz and dve per (row, head); s and 1 - s each from its own exp, as the CPU takes them
template <typename Q, typename X>
__global__ void gate_backward_kernel(float *dve, float *dz, const Q *dqkv, const float *ve,
                                     const X *x, const float *w, gate_args a) {
    const int64_t kv = a.n_heads * a.hd;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < a.n * a.n_heads;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / a.n_heads, h = i % a.n_heads;
        const double z = logit(x, w, a, r, h);
        const double s = 1.0 / (1.0 + exp(-z)), sc = 1.0 / (1.0 + exp(z));
        const float g = (float)(a.scale * s);
        const int64_t at = r * a.row_stride + a.col0 + h * a.hd;
        const float *e = ve + r * kv + h * a.hd;
        float *dvr = dve + r * kv + h * a.hd;
        double dot = 0.0;
        for (int64_t d = 0; d < a.hd; d++) {
            const float dv = lwc_load(dqkv, at + d);
            dot += (double)dv * (double)e[d];
            dvr[d] = __fadd_rn(dvr[d], __fmul_rn(g, dv));
        }
        dz[i] = (float)(dot * a.scale * s * sc);
    }
}

// dx[r, k] += sum_h dz[r, h] w[h, k], a thread per (row, channel)
__global__ void gate_input_kernel(float *dx, const float *dz, const float *w, gate_args a) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < a.n * a.channels;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / a.channels, k = i % a.channels;
        double acc = 0.0;
        for (int64_t h = 0; h < a.n_heads; h++)
            acc += (double)dz[r * a.n_heads + h] * (double)w[h * a.channels + k];
        dx[r * a.x_stride + k] = __fadd_rn(dx[r * a.x_stride + k], (float)acc);
    }
}

template <typename Q, typename X>
void launch_forward(cudaStream_t cs, void *qkv, const float *ve, const void *x, const float *w,
                    const gate_args &a) {
    gate_forward_kernel<<<blocks_for(a.n * a.n_heads), THREADS, 0, cs>>>(
        static_cast<Q *>(qkv), ve, static_cast<const X *>(x), w, a);
}

template <typename Q, typename X>
void launch_backward(cudaStream_t cs, float *dve, float *dz, const void *dqkv, const float *ve,
                     const void *x, const float *w, const gate_args &a) {
    gate_backward_kernel<<<blocks_for(a.n * a.n_heads), THREADS, 0, cs>>>(
        dve, dz, static_cast<const Q *>(dqkv), ve, static_cast<const X *>(x), w, a);
}

using bf16 = unsigned short;

} // namespace

// ---- the table's entries ------------------------------------------------------------------------

lw_status lwc_value_gate_forward(lw_stream *s, void *qkv, lw_dtype qkv_dtype, const float *ve,
                                 const void *x, lw_dtype x_dtype, const float *w, int64_t n,
                                 int64_t row_stride, int64_t col0, int64_t x_stride,
                                 int64_t n_heads, int64_t hd, int64_t channels, float scale) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    const gate_args a = {n, row_stride, col0, x_stride, n_heads, hd, channels, scale};
    cudaStream_t cs = lwc_cuda_stream(s);
    const bool q16 = qkv_dtype == LW_DTYPE_BF16, x16 = x_dtype == LW_DTYPE_BF16;
    if (q16 && x16)
        launch_forward<bf16, bf16>(cs, qkv, ve, x, w, a);
    else if (q16)
        launch_forward<bf16, float>(cs, qkv, ve, x, w, a);
    else if (x16)
        launch_forward<float, bf16>(cs, qkv, ve, x, w, a);
    else
        launch_forward<float, float>(cs, qkv, ve, x, w, a);
    return lwc_launched(s, cudaGetLastError(), "the value gate kernel");
}

lw_status lwc_value_gate_backward(lw_stream *s, float *dve, float *dx, float *dw, float *dz,
                                  const void *dqkv, lw_dtype qkv_dtype, const float *ve,
                                  const void *x, lw_dtype x_dtype, const float *w, int64_t n,
                                  int64_t row_stride, int64_t col0, int64_t x_stride,
                                  int64_t n_heads, int64_t hd, int64_t channels, float scale) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    void *work = NULL;
    lw_status st = lwc_workspace(
        s, (int64_t)sizeof(double) * lwc_colsum_doubles(n, n_heads * channels), &work);
    if (st != LW_OK) return st;
    const gate_args a = {n, row_stride, col0, x_stride, n_heads, hd, channels, scale};
    cudaStream_t cs = lwc_cuda_stream(s);
    const bool q16 = qkv_dtype == LW_DTYPE_BF16, x16 = x_dtype == LW_DTYPE_BF16;
    if (q16 && x16)
        launch_backward<bf16, bf16>(cs, dve, dz, dqkv, ve, x, w, a);
    else if (q16)
        launch_backward<bf16, float>(cs, dve, dz, dqkv, ve, x, w, a);
    else if (x16)
        launch_backward<float, bf16>(cs, dve, dz, dqkv, ve, x, w, a);
    else
        launch_backward<float, float>(cs, dve, dz, dqkv, ve, x, w, a);
    st = lwc_launched(s, cudaGetLastError(), "the value gate backward kernel");
    if (st != LW_OK) return st;
    gate_input_kernel<<<blocks_for(n * channels), THREADS, 0, cs>>>(dx, dz, w, a);
    st = lwc_launched(s, cudaGetLastError(), "the value gate's input gradient kernel");
    if (st != LW_OK) return st;
    return lwc_launched(s,
                        lwc_colsum_outer(cs, dw, dz, x, x16, n, n_heads, channels, x_stride,
                                         static_cast<double *>(work)),
                        "the value gate's weight gradient column sums");
}
