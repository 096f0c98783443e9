// normuon.cu: NorMuon's variance reduction on a GPU, as the CPU's reference
// (src/core/device/cpu/normuon.c): a block per line for its mean square and second moment, one
// block for the two norms, then the scaling. Sums in double in a fixed order (no atomics): the
// factors agree with the CPU's to a unit or so in the last place of float.
#include "cuda/cuda.h"
#include "cuda/block_sum.h"

namespace {

constexpr int THREADS = 256;

__device__ __forceinline__ double block_sum(double v) { return lwc_block_sum<THREADS>(v); }

// grid (lines): the line's mean square (float), v's update, its step into work[l], and the
// mean times the line's length into work[lines + 2 + l] (the norms' terms).
__global__ void line_moments(const float *x, float *v, int64_t rows, int64_t cols, bool by_row,
                             float rate, float floor, double *work) {
    const int64_t l = blockIdx.x, lines = by_row ? rows : cols, reduced = by_row ? cols : rows;
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < reduced; i += blockDim.x) {
        const float e = by_row ? x[l * cols + i] : x[i * cols + l];
        s += (double)e * e;
    }
    s = block_sum(s);
    if (threadIdx.x != 0) return;
    const float mean = (float)(s / (double)reduced);
    const float vl = v[l] + rate * (mean - v[l]);
    v[l] = vl;
    const float step = 1.0f / sqrtf(vl > floor ? vl : floor);
    work[l] = step;
    work[lines + 2 + l] = (double)mean * (double)reduced;
}

// one block: work[lines] = ||x||_F^2, work[lines + 1] = ||x s||_F^2.
__global__ void norms(int64_t lines, double *work) {
    double a = 0.0, b = 0.0;
    for (int64_t l = threadIdx.x; l < lines; l += blockDim.x) {
        const double t = work[lines + 2 + l];
        a += t;
        b += t * work[l] * work[l];
    }
    a = block_sum(a);
    b = block_sum(b);
    if (threadIdx.x == 0) work[lines] = a, work[lines + 1] = b;
}

__global__ void scale_lines(float *x, int64_t rows, int64_t cols, bool by_row, float floor,
                            const double *work) {
    const int64_t lines = by_row ? rows : cols, n = rows * cols;
    const double scaled = sqrt(work[lines + 1]);
    const float ratio = (float)(sqrt(work[lines]) / (scaled > floor ? scaled : (double)floor));
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] *= (float)work[by_row ? i / cols : i % cols] * ratio;
}

} // namespace

// work: LWI_NORMUON_WORK(rows, cols) doubles: steps, two norms, terms.
lw_status lwc_normuon_variance(lw_stream *s, float *x, float *v, int64_t rows, int64_t cols,
                               float beta2, float floor, double *work) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cudaStream_t cs = lwc_cuda_stream(s);
    const bool by_row = rows >= cols;
    const int64_t lines = by_row ? rows : cols, n = rows * cols;
    line_moments<<<(unsigned)lines, THREADS, 0, cs>>>(x, v, rows, cols, by_row, 1.0f - beta2,
                                                      floor, work);
    norms<<<1, THREADS, 0, cs>>>(lines, work);
    const int64_t blocks = (n + THREADS - 1) / THREADS;
    scale_lines<<<(unsigned)(blocks < 8192 ? blocks : 8192), THREADS, 0, cs>>>(x, rows, cols,
                                                                              by_row, floor, work);
    return lwc_launched(s, cudaGetLastError(), "NorMuon's variance reduction");
}
