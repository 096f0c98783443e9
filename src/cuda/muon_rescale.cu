// muon_rescale.cu: Muon's rescalings around Newton-Schulz on a GPU, as the CPU's reference
// (src/core/device/cpu/muon_rescale.c): row equilibration of a batch of updates, renormalisation
// of a batch of results, and the step with a decay at the step (cautious or scaled). Norms are
// summed in double in a fixed order (warp and block trees, no atomics), so a run repeats bit for
// bit; they differ from the CPU's sums in order only, so the factors agree to a unit or so in
// the last place of float. The step rounds each product and sum on its own, as the CPU does:
// bit for bit its result.
#include "cuda/cuda.h"
#include "cuda/block_sum.h"

namespace {

constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
// the batch's matrices per launch: a grid's y dimension
constexpr int64_t MOST_MATRICES = 65535;

__device__ __forceinline__ double warp_sum(double v) { return lwc_warp_sum(v); }
__device__ __forceinline__ double block_sum(double v) { return lwc_block_sum<THREADS>(v); }

// grid (row groups, batch), a warp per row: norms[b * (rows + 1) + r] = the row's sum of squares.
__global__ void row_squares(const float *u, int64_t rows, int64_t cols, double *norms) {
    const int64_t r = blockIdx.x * (int64_t)WARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (r >= rows) return;
    const float *row = u + (blockIdx.y * rows + r) * cols;
    double s = 0.0;
    for (int64_t c = lane; c < cols; c += 32)
        s += (double)row[c] * row[c];
    s = warp_sum(s);
    if (lane == 0) norms[blockIdx.y * (rows + 1) + r] = s;
}

// grid (batch): norms[b * (rows + 1) + rows] = t = sqrt(sum of the row sums) / sqrt(rows).
__global__ void row_target(int64_t rows, double *norms) {
    double *m = norms + blockIdx.x * (rows + 1);
    double s = 0.0;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
        s += m[r];
    s = block_sum(s);
    if (threadIdx.x == 0) m[rows] = sqrt(s) / sqrt((double)rows);
}

// grid (row groups, batch), a warp per row: x = u * (float)(t / max(row norm, floor)).
__global__ void scale_rows(const float *u, float *x, int64_t rows, int64_t cols,
                           const double *norms, float norm_floor) {
    const int64_t r = blockIdx.x * (int64_t)WARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (r >= rows) return;
    const double *m = norms + blockIdx.y * (rows + 1);
    const double norm = sqrt(m[r]);
    const float scale = (float)(m[rows] / (norm > norm_floor ? norm : (double)norm_floor));
    const int64_t at = (blockIdx.y * rows + r) * cols;
    for (int64_t c = lane; c < cols; c += 32)
        x[at + c] = __fmul_rn(u[at + c], scale);
}

// grid (blocks, batch): partials[b * LWI_MUON_NORM_BLOCKS + block] = the block's sum of squares.
__global__ void square_partials(const float *x, int64_t n, double *partials) {
    const float *m = x + blockIdx.y * n;
    double s = 0.0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        s += (double)m[i] * m[i];
    s = block_sum(s);
    if (threadIdx.x == 0) partials[blockIdx.y * LWI_MUON_NORM_BLOCKS + blockIdx.x] = s;
}

// grid (blocks, batch): each block adds its matrix's partials, in the same order in every block,
// and scales its part of the matrix by (float)(target / max(norm, floor)).
__global__ void scale_to_norm(float *x, int64_t n, const double *partials, float target,
                              float norm_floor) {
    double s = 0.0;
    for (int b = threadIdx.x; b < gridDim.x; b += blockDim.x)
        s += partials[blockIdx.y * LWI_MUON_NORM_BLOCKS + b];
    const double norm = sqrt(block_sum(s));
    const float scale = (float)((double)target / (norm > norm_floor ? norm : (double)norm_floor));
    float *m = x + blockIdx.y * n;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        m[i] = __fmul_rn(m[i], scale);
}

// w = w - (step x + d), d = decay w or, under cautious where x w >= 0 fails (NaN too), 0.
__global__ void decay_step(float *w, const float *x, int64_t n, float step, float decay,
                           bool cautious) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float wi = w[i], xi = x[i];
        const float d = !cautious || __fmul_rn(xi, wi) >= 0.0f ? __fmul_rn(decay, wi) : 0.0f;
        w[i] = __fsub_rn(wi, __fadd_rn(__fmul_rn(step, xi), d));
    }
}

unsigned blocks_for(int64_t n, int64_t most) {
    int64_t b = (n + 4 * THREADS - 1) / (4 * THREADS);
    return (unsigned)(b < 1 ? 1 : b > most ? most : b);
}

} // namespace

// ---- the table's entries ------------------------------------------------------------------------

lw_status lwc_muon_equilibrate(lw_stream *s, const float *u, float *x, int64_t batch, int64_t rows,
                               int64_t cols, float norm_floor, double *work) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cudaStream_t cs = lwc_cuda_stream(s);
    const unsigned groups = (unsigned)((rows + WARPS - 1) / WARPS);
    cudaError_t e = cudaSuccess;
    for (int64_t first = 0; first < batch && e == cudaSuccess; first += MOST_MATRICES) {
        const int64_t count = batch - first < MOST_MATRICES ? batch - first : MOST_MATRICES;
        const float *ub = u + first * rows * cols;
        float *xb = x + first * rows * cols;
        double *norms = work + first * (rows + 1);
        row_squares<<<dim3(groups, (unsigned)count), THREADS, 0, cs>>>(ub, rows, cols, norms);
        row_target<<<(unsigned)count, THREADS, 0, cs>>>(rows, norms);
        scale_rows<<<dim3(groups, (unsigned)count), THREADS, 0, cs>>>(ub, xb, rows, cols, norms,
                                                                      norm_floor);
        e = cudaGetLastError();
    }
    return lwc_launched(s, e, "Muon's row equilibration");
}

lw_status lwc_muon_renormalize(lw_stream *s, float *x, int64_t batch, int64_t n, float target,
                               float norm_floor, double *work) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cudaStream_t cs = lwc_cuda_stream(s);
    const unsigned blocks = blocks_for(n, LWI_MUON_NORM_BLOCKS);
    cudaError_t e = cudaSuccess;
    for (int64_t first = 0; first < batch && e == cudaSuccess; first += MOST_MATRICES) {
        const int64_t count = batch - first < MOST_MATRICES ? batch - first : MOST_MATRICES;
        const dim3 grid(blocks, (unsigned)count);
        square_partials<<<grid, THREADS, 0, cs>>>(x + first * n, n, work);
        scale_to_norm<<<grid, THREADS, 0, cs>>>(x + first * n, n, work, target, norm_floor);
        e = cudaGetLastError();
    }
    return lwc_launched(s, e, "Muon's renormalisation");
}

lw_status lwc_muon_decay_step(lw_stream *s, float *w, const float *x, int64_t n, float step,
                              float decay, bool cautious) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    decay_step<<<blocks_for(n, 8192), THREADS, 0, lwc_cuda_stream(s)>>>(w, x, n, step, decay,
                                                                        cautious);
    return lwc_launched(s, cudaGetLastError(), "Muon's step with weight decay");
}
