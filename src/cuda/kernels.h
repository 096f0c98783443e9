/* kernels.h: the CUDA kernels' launchers (the .cu files of src/cuda), callable from the
 * library's C files. Plain C types and the device table's (device.h reads as C and C++): this
 * header is read by gcc and by nvcc. Each launcher enqueues on `stream` and returns the
 * launch's error (cudaSuccess when it was issued). Not public API. */
#ifndef LW_CUDA_KERNELS_H
#define LW_CUDA_KERNELS_H

#include "device/device.h" /* lwi_adamw_tensor: the table's own list is the kernel's */

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of a stream's reduction scratch (lwc_stream.scratch): partial sums of the blocks of a
 * reduction and its flags. */
#define LWC_SCRATCH_BYTES (64 * 1024)

/* vec.cu */
/* acc[0] += sum of x^2, acc[1] += count of zeros (acc: 2 doubles of device memory), reduced in
 * a fixed order (block partials in scratch, then one block), so that runs repeat bit for bit. */
cudaError_t lwc_norm_stats(cudaStream_t stream, const float *x, int64_t n, double *acc,
                           void *scratch);
/* *flag (device int) = 1 if every x is finite, else 0. */
cudaError_t lwc_all_finite(cudaStream_t stream, const float *x, int64_t n, int32_t *flag);
cudaError_t lwc_scale(cudaStream_t stream, float *x, int64_t n, float alpha);
cudaError_t lwc_add(cudaStream_t stream, float *y, const float *a, const float *b, int64_t n);
cudaError_t lwc_axpy(cudaStream_t stream, float *y, float alpha, const float *x, int64_t n);

/* muon.cu */
/* Muon's element-wise step in one pass: weight decay of w (mode 0 decoupled: w *= 1 - lr wd;
 * 1 independent: w *= 1 - wd; 2 L2: g += wd w), m = beta m + (1 - beta) g, u = Nesterov's
 * (1 - beta) g + beta m, or m. */
cudaError_t lwc_muon_momentum(cudaStream_t stream, float *w, const float *g, float *m, float *u,
                              int64_t n, float beta, bool nesterov, int32_t wd_mode, float lr,
                              float wd, float grad_scale);
/* Newton-Schulz's start for `batch` matrices of n elements: partials[b * LWI_NS_PARTIALS ..]
 * get the sums of squares of matrix b's blocks, then x = u / max(||u||_F, eps) per matrix,
 * written as fp32 (x_bf16 NULL: into x_f32) or bf16 (into x_bf16), with no host round trip. */
cudaError_t lwc_ns_normalize(cudaStream_t stream, const float *u, int64_t batch, int64_t n,
                             float eps, float *partials, int32_t partials_per_matrix,
                             float *x_f32, void *x_bf16);
/* y = bf16 x, n elements, converted to fp32 (the orthogonalised result). */
cudaError_t lwc_bf16_to_f32(cudaStream_t stream, const void *x_bf16, float *y, int64_t n);

/* adamw.cu */
/* AdamW over `count` tensors (host list) in as few launches as the kernel's argument space
 * allows (LWC_ADAMW_PER_LAUNCH tensors each); c1, c2 = 1 / (1 - beta^t), computed by the caller
 * in double. */
#define LWC_ADAMW_PER_LAUNCH 48
cudaError_t lwc_adamw(cudaStream_t stream, const lwi_adamw_tensor *tensors, int32_t count,
                      float beta1, float beta2, float eps, float c1, float c2, float grad_scale);

#ifdef __cplusplus
}
#endif

#endif
