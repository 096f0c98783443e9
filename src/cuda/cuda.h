/* cuda.h: what the CUDA library's C files share (device.c: the device, its memory, streams and
 * events; blas.c: Newton-Schulz on cuBLAS and the table's kernel entries; nccl.c: the NCCL
 * communicator). The library fills the core's device table (core/device/device.h) and reports
 * errors through the host's fail function: it cannot link the core's internal symbols.
 * Not public API. */
#ifndef LW_CUDA_H
#define LW_CUDA_H

#include "comm/comm.h"
#include "cuda/kernels.h"
#include "device/device.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

/* A CUDA device's data (lw_device.impl). */
typedef struct lwc_device {
    int32_t index;         /* the CUDA ordinal */
    cublasHandle_t blas;   /* set to the caller's stream before each call */
    struct cudaDeviceProp prop;
} lwc_device;

/* A stream (lw_stream.impl): the CUDA stream and its reduction scratch, so that reductions on
 * different streams never share one. */
typedef struct lwc_stream {
    cudaStream_t stream;
    void *scratch;   /* LWC_SCRATCH_BYTES of device memory */
    void *host_flag; /* 8 bytes of pinned host memory: flags copied back (the finite check) */
} lwc_stream;

/* The core's services, set by the entry (lwopt_device_open). */
extern const lwi_device_host *lwc_host;

/* Fails with the CUDA error named: "cuda:0: cudaMalloc of 1.50 GiB: out of memory
 * (cudaErrorMemoryAllocation)". device may be NULL. */
lw_status lwc_fail(const lw_device *device, cudaError_t e, const char *what);
lw_status lwc_fail_blas(const lw_device *device, cublasStatus_t e, const char *what);

static inline lwc_device *lwc_dev(const lw_device *d) { return (lwc_device *)d->impl; }
static inline lwc_stream *lwc_str(const lw_stream *s) { return (lwc_stream *)s->impl; }
static inline cudaStream_t lwc_cuda_stream(const lw_stream *s) { return lwc_str(s)->stream; }

/* Makes the device current on this thread (every entry that allocates or launches: a process
 * may drive several GPUs). Fails with the CUDA error recorded (callers return LW_ERR_IO). */
lw_status lwc_use(const lw_device *device);
/* LW_OK, or the launch's error named after `what` on the stream's device. */
lw_status lwc_launched(const lw_stream *s, cudaError_t e, const char *what);

/* blas.c: the kernel entries of the table. */
lw_status lwc_vec_norm_stats(lw_stream *s, const float *x, int64_t n, double *acc);
lw_status lwc_vec_all_finite(lw_stream *s, const float *x, int64_t n, bool *finite);
lw_status lwc_vec_scale(lw_stream *s, float *x, int64_t n, float alpha);
lw_status lwc_vec_add(lw_stream *s, float *y, const float *a, const float *b, int64_t n);
lw_status lwc_vec_axpy(lw_stream *s, float *y, float alpha, const float *x, int64_t n);
lw_status lwc_muon_step(lw_stream *s, const lwi_muon_step *k, float *w, const float *g, float *m,
                        float *u, int64_t n);
lw_status lwc_newton_schulz(lw_stream *s, const lwi_ns_plan *plan, const float *u, float *x,
                            int64_t batch, int64_t rows, int64_t cols);
lw_status lwc_adamw_step(lw_stream *s, const lw_adamw_options *o, const lwi_adamw_tensor *tensors,
                         int32_t count, int64_t t, float grad_scale);

/* nccl.c: a communicator of parent's ranks over NCCL (the table's comm_new). */
lw_status lwc_comm_new(lw_device *device, lw_comm *parent, lw_comm **out);

#endif
