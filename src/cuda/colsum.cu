// colsum.cu: deterministic column sums on a GPU, in double, in two passes (block partials over
// chunks of rows, then the chunks in order): a linear layer's bias gradient (linear.cu), layer
// norm's gain and shift gradients (layernorm.cu) and RMSNorm's gain gradient (rmsnorm.cu).
// Several families use them, so they are a file of their own; the gain's summand dy * xhat
// (lwc_colsum_xhat) is formed here, inside the template that sums it. Products rounded as the
// CPU rounds them (__fmul_rn: no FMA contraction), each column added to its output once, as the
// CPU adds it. No atomics.
#include "cuda/bf16_bits.h"
#include "cuda/cuda.h"

namespace {

constexpr int THREADS = 256;

int blocks_for(int64_t n) {
    int64_t b = (n + THREADS - 1) / THREADS;
    return (int)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

// Column sums in two passes. Pass 1: a block of 32 x 8 threads per (tile of 32 columns, chunk
// of rows); thread (tx, ty) adds rows ty, ty + 8, ... of its chunk for column tx in double, the
// 8 partials of a column are added in ty order and written to partials[chunk * cols + col].
// Pass 2: one thread per column adds the chunks' partials in chunk order. Both orders depend on
// (n, cols) only, so the sums repeat bit for bit.
constexpr int COL_TILE = 32, ROW_THREADS = 8;

struct colsum_plan {
    int64_t chunks, rows_per_chunk;
};

colsum_plan plan_colsum(int64_t n, int64_t cols) {
    const int64_t tiles = (cols + COL_TILE - 1) / COL_TILE;
    // about 1024 blocks in all; a chunk keeps at least 64 rows (8 per thread)
    int64_t chunks = 1024 / (tiles > 0 ? tiles : 1);
    const int64_t most = (n + 63) / 64;
    if (chunks > most) chunks = most;
    if (chunks < 1) chunks = 1;
    const int64_t per = (n + chunks - 1) / chunks;
    return colsum_plan{(n + per - 1) / per, per};
}

// The value summed for (row, col): dy, or dy * xhat (layernorm's dg: xhat = (x - mean) rstd,
// rounded as the CPU rounds it).
struct plain_value {
    const float *dy;
    __device__ float operator()(int64_t r, int64_t j, int64_t cols) const { return dy[r * cols + j]; }
};
// dy in bf16 (a bf16 output gradient), widened exactly
struct bf16_value {
    const uint16_t *dy;
    __device__ float operator()(int64_t r, int64_t j, int64_t cols) const {
        return lwc_load(dy, r * cols + j);
    }
};

struct xhat_value {
    const float *dy, *x, *mean, *rstd;
    __device__ float operator()(int64_t r, int64_t j, int64_t cols) const {
        const int64_t i = r * cols + j;
        return __fmul_rn(dy[i], __fmul_rn(__fsub_rn(x[i], mean[r]), rstd[r]));
    }
};

// RMSNorm's dg: xhat = x rstd (no mean), rounded as the CPU rounds it
struct xrstd_value {
    const float *dy, *x, *rstd;
    __device__ float operator()(int64_t r, int64_t j, int64_t cols) const {
        const int64_t i = r * cols + j;
        return __fmul_rn(dy[i], __fmul_rn(x[i], rstd[r]));
    }
};

// The value embeddings' gate weight gradient: column h * channels + k of row r is dz[r, h] x[r,
// k] (x rows x_stride apart), the product in double, as the CPU forms it
template <typename X> struct outer_value {
    const float *dz;
    const X *x; // fp32, or bf16 bits read widened
    int64_t heads, channels, x_stride;
    __device__ double operator()(int64_t r, int64_t j, int64_t cols) const {
        (void)cols;
        return (double)dz[r * heads + j / channels] *
               (double)lwc_load(x, r * x_stride + j % channels);
    }
};

template <typename V>
__global__ void colsum_partials(V value, int64_t n, int64_t cols, int64_t per, double *partials) {
    __shared__ double part[ROW_THREADS][COL_TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t j = blockIdx.x * (int64_t)COL_TILE + tx;
    const int64_t r0 = blockIdx.y * per, r1 = r0 + per < n ? r0 + per : n;
    double s = 0.0;
    if (j < cols)
        for (int64_t r = r0 + ty; r < r1; r += ROW_THREADS)
            s += (double)value(r, j, cols);
    part[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && j < cols) {
        double t = part[0][tx];
        for (int k = 1; k < ROW_THREADS; k++)
            t += part[k][tx];
        partials[blockIdx.y * cols + j] = t;
    }
}

__global__ void colsum_finish(float *out, const double *partials, int64_t chunks, int64_t cols) {
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < cols;
         j += (int64_t)gridDim.x * blockDim.x) {
        double s = 0.0;
        for (int64_t k = 0; k < chunks; k++)
            s += partials[k * cols + j];
        out[j] = __fadd_rn(out[j], (float)s); // out += (float)sum, as the CPU adds it
    }
}

template <typename V>
cudaError_t colsum(cudaStream_t stream, float *out, V value, int64_t n, int64_t cols,
                   double *work) {
    if (n <= 0 || cols <= 0) return cudaSuccess;
    const colsum_plan p = plan_colsum(n, cols);
    const dim3 grid((unsigned)((cols + COL_TILE - 1) / COL_TILE), (unsigned)p.chunks);
    colsum_partials<V><<<grid, dim3(COL_TILE, ROW_THREADS), 0, stream>>>(value, n, cols,
                                                                         p.rows_per_chunk, work);
    colsum_finish<<<blocks_for(cols), THREADS, 0, stream>>>(out, work, p.chunks, cols);
    return cudaGetLastError();
}

} // namespace

extern "C" int64_t lwc_colsum_doubles(int64_t n, int64_t cols) {
    if (n <= 0 || cols <= 0) return 0;
    return plan_colsum(n, cols).chunks * cols;
}

extern "C" cudaError_t lwc_colsum(cudaStream_t stream, float *out, const void *dy, bool bf16,
                                  int64_t n, int64_t cols, double *work) {
    if (bf16)
        return colsum(stream, out, bf16_value{static_cast<const uint16_t *>(dy)}, n, cols, work);
    return colsum(stream, out, plain_value{static_cast<const float *>(dy)}, n, cols, work);
}

extern "C" cudaError_t lwc_colsum_xhat(cudaStream_t stream, float *dg, const float *dy,
                                       const float *x, const float *mean, const float *rstd,
                                       int64_t n, int64_t c, double *work) {
    if (mean == NULL) return colsum(stream, dg, xrstd_value{dy, x, rstd}, n, c, work);
    return colsum(stream, dg, xhat_value{dy, x, mean, rstd}, n, c, work);
}

extern "C" cudaError_t lwc_colsum_outer(cudaStream_t stream, float *dw, const float *dz,
                                        const void *x, bool x_bf16, int64_t n, int64_t heads,
                                        int64_t channels, int64_t x_stride, double *work) {
    if (x_bf16)
        return colsum(stream, dw,
                      outer_value<unsigned short>{dz, static_cast<const unsigned short *>(x), heads,
                                                  channels, x_stride},
                      n, heads * channels, work);
    return colsum(stream, dw,
                  outer_value<float>{dz, static_cast<const float *>(x), heads, channels, x_stride},
                  n, heads * channels, work);
}
