// linear.cu: the linear layer's kernel besides its GEMMs (linear.c runs those on cuBLAS): the bias
// copied into every row of y, onto which the forward's beta-1 GEMM then adds x w^T. The bias
// gradient's column sums are colsum.cu's.
#include "cuda/kernels.h"

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

extern "C" cudaError_t lwc_rows_fill(cudaStream_t stream, float *y, const float *b, int64_t n,
                                     int64_t cols) {
    if (n > 0 && cols > 0) fill_rows_kernel<<<blocks_for(n * cols), THREADS, 0, stream>>>(y, b, n, cols);
    return cudaGetLastError();
}
