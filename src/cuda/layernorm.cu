// layernorm.cu: the table's layer normalisation entries on a GPU, a warp per row: the forward
// (mean and the two-pass variance in double, as the CPU takes them) and the backward's input
// gradient, with the gain and shift gradients as column sums (colsum.cu) sharing one workspace;
// both also fused with the residual add around the norm: the forward's input the sum of two rows
// (written out as the residual stream), the backward's dx first added the stream's gradient.
// Products and sums rounded as the CPU rounds them (__fmul_rn / __fadd_rn: no FMA contraction).
// No atomics.
#include "cuda/bf16_bits.h"
#include "cuda/cuda.h"

namespace {

constexpr int THREADS = 256;

constexpr int LN_ROWS = THREADS / 32; // one warp per row

__device__ double warp_sum(double v) {
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v; // the same in every lane
}

// Element i of a row's input: x itself, or (ADD) the sum of two rows, rounded as the CPU adds.
template <bool ADD>
__device__ __forceinline__ float row_in(const float *xr, const float *br, int64_t i) {
    return ADD ? __fadd_rn(xr[i], br[i]) : xr[i];
}

// ADD: the input is x + b, written to sum (the residual stream) as it is first read and read
// back from there after (each lane its own elements: no barrier), so sum may be x or b. Y:
// float, or unsigned short for bf16 (the fp32 value rounded, as the CPU rounds it).
template <bool ADD, typename Y>
__global__ void ln_forward_kernel(float *sum, Y *y, float *mean, float *rstd, const float *x,
                                  const float *b, const float *g, const float *beta, int64_t n,
                                  int64_t c, float eps) {
    const int lane = threadIdx.x & 31;
    const int64_t r = blockIdx.x * (int64_t)LN_ROWS + (threadIdx.x >> 5);
    if (r >= n) return; // a whole warp leaves together: the shuffles below see full warps
    const float *br = ADD ? b + r * c : nullptr;
    double s = 0.0;
    for (int64_t i = lane; i < c; i += 32) {
        const float v = row_in<ADD>(x + r * c, br, i);
        if (ADD) sum[r * c + i] = v;
        s += (double)v;
    }
    const float *xr = ADD ? sum + r * c : x + r * c; // the row as normalised
    const double m = warp_sum(s) / (double)c;
    // the two-pass variance in double, as the CPU takes it
    double q = 0.0;
    for (int64_t i = lane; i < c; i += 32) {
        const double d = (double)xr[i] - m;
        q += d * d;
    }
    const double var = warp_sum(q) / (double)c;
    const float mf = (float)m, sf = (float)(1.0 / sqrt(var + (double)eps));
    if (lane == 0) {
        mean[r] = mf;
        rstd[r] = sf;
    }
    Y *yr = y + r * c;
    for (int64_t i = lane; i < c; i += 32) {
        const float v = __fmul_rn(__fmul_rn(__fsub_rn(xr[i], mf), sf), g[i]);
        lwc_store(yr, i, beta != nullptr ? __fadd_rn(v, beta[i]) : v);
    }
}

// dx only: dg and dbeta are column sums (colsum.cu). dres (optional): added into dx first.
__global__ void ln_dx_kernel(float *dx, const float *dres, const float *dy, const float *x,
                             const float *g, const float *mean, const float *rstd, int64_t n,
                             int64_t c) {
    const int lane = threadIdx.x & 31;
    const int64_t r = blockIdx.x * (int64_t)LN_ROWS + (threadIdx.x >> 5);
    if (r >= n) return;
    const float *xr = x + r * c, *dyr = dy + r * c;
    const float mf = mean[r], sf = rstd[r];
    double s1 = 0.0, s2 = 0.0;
    for (int64_t i = lane; i < c; i += 32) {
        const float dn = __fmul_rn(dyr[i], g[i]), xh = __fmul_rn(__fsub_rn(xr[i], mf), sf);
        s1 += (double)dn;
        s2 += (double)__fmul_rn(dn, xh);
    }
    s1 = warp_sum(s1);
    s2 = warp_sum(s2);
    const float m1 = (float)(s1 / (double)c), m2 = (float)(s2 / (double)c);
    float *dxr = dx + r * c;
    for (int64_t i = lane; i < c; i += 32) {
        const float xh = __fmul_rn(__fsub_rn(xr[i], mf), sf);
        const float inner = __fsub_rn(__fsub_rn(__fmul_rn(dyr[i], g[i]), m1), __fmul_rn(xh, m2));
        const float base = dres != nullptr ? __fadd_rn(dxr[i], dres[r * c + i]) : dxr[i];
        dxr[i] = __fadd_rn(base, __fmul_rn(sf, inner));
    }
}

} // namespace

namespace {

template <typename Y>
void ln_forward_launch(cudaStream_t stream, float *sum, Y *y, float *mean, float *rstd,
                       const float *x, const float *b, const float *g, const float *beta,
                       int64_t n, int64_t c, float eps) {
    const unsigned blocks = (unsigned)((n + LN_ROWS - 1) / LN_ROWS);
    if (b != nullptr)
        ln_forward_kernel<true, Y>
            <<<blocks, THREADS, 0, stream>>>(sum, y, mean, rstd, x, b, g, beta, n, c, eps);
    else
        ln_forward_kernel<false, Y>
            <<<blocks, THREADS, 0, stream>>>(sum, y, mean, rstd, x, b, g, beta, n, c, eps);
}

} // namespace

// Layer norm forward (one warp per row; mean and variance in double) of x, or with b (not NULL)
// of x + b, which is written to sum (the residual add fused before the norm).
static cudaError_t ln_forward(cudaStream_t stream, float *sum, void *y, bool y_bf16, float *mean,
                              float *rstd, const float *x, const float *b, const float *g,
                              const float *beta, int64_t n, int64_t c, float eps) {
    if (n <= 0 || c <= 0) return cudaSuccess;
    if (y_bf16)
        ln_forward_launch(stream, sum, static_cast<unsigned short *>(y), mean, rstd, x, b, g, beta,
                          n, c, eps);
    else
        ln_forward_launch(stream, sum, static_cast<float *>(y), mean, rstd, x, b, g, beta, n, c,
                          eps);
    return cudaGetLastError();
}

// dx[n, c] += dres (optional: NULL adds nothing), then += layer norm's input gradient (dg and
// dbeta: lwc_colsum_xhat, lwc_colsum).
static cudaError_t ln_dx(cudaStream_t stream, float *dx, const float *dres, const float *dy,
                         const float *x, const float *g, const float *mean, const float *rstd,
                         int64_t n, int64_t c) {
    if (n > 0 && c > 0)
        ln_dx_kernel<<<(unsigned)((n + LN_ROWS - 1) / LN_ROWS), THREADS, 0, stream>>>(
            dx, dres, dy, x, g, mean, rstd, n, c);
    return cudaGetLastError();
}

// ---- the table's entries ------------------------------------------------------------------------

lw_status lwc_layernorm_forward(lw_stream *s, void *y, lw_dtype y_dtype, float *mean, float *rstd,
                                const float *x, const float *g, const float *beta, int64_t n,
                                int64_t c, float eps) {
    return lwc_add_layernorm_forward(s, NULL, y, y_dtype, mean, rstd, x, NULL, g, beta, n, c, eps);
}

// b NULL: the plain norm of a (sum unused).
lw_status lwc_add_layernorm_forward(lw_stream *s, float *sum, void *y, lw_dtype y_dtype,
                                    float *mean, float *rstd, const float *a, const float *b,
                                    const float *g, const float *beta, int64_t n, int64_t c,
                                    float eps) {
    if (n <= 0 || c <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s,
                        ln_forward(lwc_cuda_stream(s), sum, y, y_dtype == LW_DTYPE_BF16, mean, rstd,
                                   a, b, g, beta, n, c, eps),
                        "the layer norm kernel");
}

lw_status lwc_layernorm_backward(lw_stream *s, float *dx, float *dg, float *dbeta, const float *dy,
                                 const float *x, const float *g, const float *mean,
                                 const float *rstd, int64_t n, int64_t c) {
    return lwc_add_layernorm_backward(s, dx, dg, dbeta, NULL, dy, x, g, mean, rstd, n, c);
}

// dres NULL: the plain backward.
lw_status lwc_add_layernorm_backward(lw_stream *s, float *dx, float *dg, float *dbeta,
                                     const float *dres, const float *dy, const float *x,
                                     const float *g, const float *mean, const float *rstd,
                                     int64_t n, int64_t c) {
    if (n <= 0 || c <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cudaStream_t cs = lwc_cuda_stream(s);
    void *work = NULL;
    lw_status st = lwc_workspace(s, (int64_t)sizeof(double) * lwc_colsum_doubles(n, c), &work);
    if (st != LW_OK) return st;
    // dg and dbeta reuse one workspace: the second sum's partials are written after the first's
    // are read, in stream order
    cudaError_t e = ln_dx(cs, dx, dres, dy, x, g, mean, rstd, n, c);
    double *partials = static_cast<double *>(work);
    if (e == cudaSuccess) e = lwc_colsum_xhat(cs, dg, dy, x, mean, rstd, n, c, partials);
    if (e == cudaSuccess && dbeta != NULL) e = lwc_colsum(cs, dbeta, dy, false, n, c, partials);
    return lwc_launched(s, e, "the layer norm backward kernels");
}
