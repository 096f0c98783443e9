/* device.c: the CUDA device: the library's entry (lwopt_device_open), the device table, device
 * memory, streams (each with its reduction scratch and workspaces) and events, and what the
 * device is. The kernels' entries are in a file per op family with their kernels (vec.cu,
 * adamw.cu, muon.cu, linear.cu, ..., as device/cpu/ has them), the communicator in nccl.c. */
#include "cuda/cuda.h"

#ifdef LWOPT_NCCL
#include <nccl.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const lwi_device_host *lwc_host;

lw_status lwc_fail(const lw_device *d, cudaError_t e, const char *what) {
    /* clears a launch's error state (a fault that corrupts the context stays: every later
     * call fails, each saying so) */
    cudaGetLastError();
    return lwc_host->fail(LW_ERR_IO, "%s: %s: %s (%s)", d ? d->name : "cuda", what,
                          cudaGetErrorString(e), cudaGetErrorName(e));
}

lw_status lwc_fail_blas(const lw_device *d, cublasStatus_t e, const char *what) {
    return lwc_host->fail(LW_ERR_IO, "%s: %s: %s (cuBLAS status %d)", d ? d->name : "cuda", what,
                          cublasGetStatusString(e), (int)e);
}

lw_status lwc_use(const lw_device *d) {
    cudaError_t e = cudaSetDevice(lwc_dev(d)->index);
    return e == cudaSuccess ? LW_OK : lwc_fail(d, e, "cudaSetDevice");
}

lw_status lwc_launched(const lw_stream *s, cudaError_t e, const char *what) {
    return e == cudaSuccess ? LW_OK : lwc_fail(s->device, e, what);
}

/* ---- memory ---------------------------------------------------------------------------------- */

static lw_status cuda_alloc(lw_device *d, int64_t bytes, void **out) {
    lw_status st = lwc_use(d);
    if (st != LW_OK) return st;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, (size_t)(bytes ? bytes : 1));
    if (e != cudaSuccess) {
        char what[96];
        snprintf(what, sizeof what, "cudaMalloc of %.2f GiB (%lld bytes)",
                 (double)bytes / (1 << 30), (long long)bytes);
        return lwc_fail(d, e, what);
    }
    /* zeroed before any stream can use it: the legacy stream, then a wait */
    if ((e = cudaMemsetAsync(p, 0, (size_t)bytes, 0)) == cudaSuccess) e = cudaStreamSynchronize(0);
    if (e != cudaSuccess) {
        cudaFree(p);
        return lwc_fail(d, e, "zeroing new memory");
    }
    *out = p;
    return LW_OK;
}

static void cuda_free(lw_device *d, void *p) {
    if (lwc_use(d) == LW_OK) cudaFree(p);
}

static lw_status cuda_set(lw_stream *s, void *dst, int32_t value, int64_t bytes) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s, cudaMemsetAsync(dst, value, (size_t)bytes, lwc_cuda_stream(s)),
                        "cudaMemsetAsync");
}

static lw_status cuda_copy(lw_stream *s, void *dst, const void *src, int64_t bytes,
                           lw_copy_kind kind) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    static const enum cudaMemcpyKind kinds[] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                                                cudaMemcpyDeviceToDevice};
    cudaStream_t cs = lwc_cuda_stream(s);
    cudaError_t e = cudaMemcpyAsync(dst, src, (size_t)bytes, kinds[kind], cs);
    /* a copy from or to host memory has completed when lw_device_copy returns */
    if (e == cudaSuccess && kind != LW_COPY_DEVICE_TO_DEVICE) e = cudaStreamSynchronize(cs);
    return lwc_launched(s, e, "cudaMemcpyAsync");
}

/* ---- streams and events ---------------------------------------------------------------------- */

static void stream_free(lw_device *d, void *impl) {
    lwc_stream *s = impl;
    if (s == NULL || lwc_use(d) != LW_OK) return;
    if (s->stream) cudaStreamDestroy(s->stream);
    cudaFree(s->scratch);
    cudaFreeHost(s->host_flag);
    cudaFree(s->work);
    cudaFreeHost(s->host_work);
    free(s);
}

static lw_status stream_new(lw_device *d, void **impl) {
    lw_status st = lwc_use(d);
    if (st != LW_OK) return st;
    lwc_stream *s = calloc(1, sizeof *s);
    if (s == NULL) return lwc_host->fail(LW_ERR_NOMEM, "%s: out of memory", d->name);
    /* non-blocking: never serialised against the legacy default stream */
    cudaError_t e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaMalloc(&s->scratch, LWC_SCRATCH_BYTES);
    if (e == cudaSuccess) e = cudaMallocHost(&s->host_flag, 8);
    if (e != cudaSuccess) {
        stream_free(d, s);
        return lwc_fail(d, e, "creating a stream");
    }
    *impl = s;
    return LW_OK;
}

/* Grows a workspace to `bytes` (rounded up to 1 MiB: a few sizes serve a training run). The
 * stream is waited for first: queued work may still read or write the old allocation. */
static lw_status grow(lw_stream *s, bool host, int64_t bytes, void **out) {
    lwc_stream *cs = lwc_str(s);
    void **p = host ? &cs->host_work : &cs->work;
    int64_t *have = host ? &cs->host_work_bytes : &cs->work_bytes;
    if (bytes <= *have) {
        *out = *p;
        return LW_OK;
    }
    const int64_t mib = (int64_t)1 << 20, want = (bytes + mib - 1) / mib * mib;
    cudaError_t e = cudaStreamSynchronize(cs->stream);
    if (e != cudaSuccess) return lwc_fail(s->device, e, "waiting for the stream's workspace");
    if (host)
        cudaFreeHost(*p);
    else
        cudaFree(*p);
    *p = NULL;
    *have = 0;
    e = host ? cudaMallocHost(p, (size_t)want) : cudaMalloc(p, (size_t)want);
    if (e != cudaSuccess) {
        *p = NULL;
        char what[96];
        snprintf(what, sizeof what, "%s workspace of %.2f MiB", host ? "a pinned host" : "a",
                 (double)want / (double)mib);
        return lwc_fail(s->device, e, what);
    }
    *have = want;
    *out = *p;
    return LW_OK;
}

lw_status lwc_workspace(lw_stream *s, int64_t bytes, void **out) { return grow(s, false, bytes, out); }

lw_status lwc_host_workspace(lw_stream *s, int64_t bytes, void **out) {
    return grow(s, true, bytes, out);
}

static lw_status stream_synchronize(lw_stream *s) {
    return lwc_launched(s, cudaStreamSynchronize(lwc_cuda_stream(s)), "cudaStreamSynchronize");
}

static lw_status stream_wait(lw_stream *s, lw_event *e) {
    return lwc_launched(s, cudaStreamWaitEvent(lwc_cuda_stream(s), (cudaEvent_t)e->impl, 0),
                        "cudaStreamWaitEvent");
}

static lw_status event_new(lw_device *d, void **impl) {
    lw_status st = lwc_use(d);
    if (st != LW_OK) return st;
    cudaEvent_t ev;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e != cudaSuccess) return lwc_fail(d, e, "cudaEventCreate");
    *impl = ev;
    return LW_OK;
}

static void event_free(lw_device *d, void *impl) {
    if (impl != NULL && lwc_use(d) == LW_OK) cudaEventDestroy((cudaEvent_t)impl);
}

static lw_status event_record(lw_event *ev, lw_stream *s) {
    return lwc_launched(s, cudaEventRecord((cudaEvent_t)ev->impl, lwc_cuda_stream(s)),
                        "cudaEventRecord");
}

static lw_status event_synchronize(lw_event *ev) {
    cudaError_t e = cudaEventSynchronize((cudaEvent_t)ev->impl);
    return e == cudaSuccess ? LW_OK : lwc_fail(ev->device, e, "cudaEventSynchronize");
}

static lw_status event_query(lw_event *ev, bool *done) {
    cudaError_t e = cudaEventQuery((cudaEvent_t)ev->impl);
    *done = e == cudaSuccess;
    return e == cudaSuccess || e == cudaErrorNotReady ? LW_OK
                                                      : lwc_fail(ev->device, e, "cudaEventQuery");
}

/* ---- what the device is ---------------------------------------------------------------------- */

static lw_status info(lw_device *d, lw_device_info *out) {
    lw_status st = lwc_use(d);
    if (st != LW_OK) return st;
    const lwc_device *c = lwc_dev(d);
    snprintf(out->name, sizeof out->name, "%.127s", c->prop.name);
    size_t free_bytes = 0, total_bytes = 0;
    cudaError_t e = cudaMemGetInfo(&free_bytes, &total_bytes);
    if (e != cudaSuccess) return lwc_fail(d, e, "cudaMemGetInfo");
    out->total_bytes = (int64_t)total_bytes;
    out->free_bytes = (int64_t)free_bytes;
    out->capability = 10 * c->prop.major + c->prop.minor;
    out->processors = c->prop.multiProcessorCount;
    int runtime = 0, driver = 0, blas = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    cublasGetVersion(c->blas, &blas);
    char nccl[32] = "no NCCL (built without it)";
#ifdef LWOPT_NCCL
    int v = 0;
    ncclGetVersion(&v);
    snprintf(nccl, sizeof nccl, "NCCL %d.%d.%d", v / 10000, v % 10000 / 100, v % 100);
#endif
    snprintf(out->software, sizeof out->software, "CUDA %d.%d (driver %d.%d), cuBLAS %d, %s",
             runtime / 1000, runtime % 1000 / 10, driver / 1000, driver % 1000 / 10, blas, nccl);
    /* the UUID as nvidia-smi -L prints it */
    const unsigned char *u = (const unsigned char *)c->prop.uuid.bytes;
    snprintf(out->id, sizeof out->id,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
             u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
             u[14], u[15]);
    return LW_OK;
}

/* Whether p is this GPU's memory; host memory (pageable or pinned) is not. Another GPU's memory
 * is an error: a communicator of this GPU cannot move it. */
static lw_status memory_here(lw_device *d, const void *p, bool *here) {
    struct cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) return lwc_fail(d, e, "cudaPointerGetAttributes");
    *here = a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
    if (*here && a.device != lwc_dev(d)->index)
        return lwc_host->fail(LW_ERR_INVALID,
                              "%s: memory of GPU %d: a communicator of %s moves its own GPU's "
                              "memory and host memory only",
                              d->name, a.device, d->name);
    return LW_OK;
}

/* ---- the table and the entry ----------------------------------------------------------------- */

static const lwi_device_ops cuda_ops = {
    .kind = "cuda",
    .host_memory = false,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .set = cuda_set,
    .copy = cuda_copy,
    .stream_new = stream_new,
    .stream_free = stream_free,
    .stream_synchronize = stream_synchronize,
    .stream_wait = stream_wait,
    .event_new = event_new,
    .event_free = event_free,
    .event_record = event_record,
    .event_synchronize = event_synchronize,
    .event_query = event_query,
    .info = info,
#ifdef LWOPT_NCCL
    .comm_new = lwc_comm_new,
#endif
    .memory_here = memory_here,
#define LWC_SIZE_ENTRY(name, params, args) .name = lwc_##name,
    LWI_SCRATCH_SIZES(LWC_SIZE_ENTRY)
#define LWC_KERNEL_ENTRY(name, params, args, check) .name = lwc_##name,
    LWI_KERNELS(LWC_KERNEL_ENTRY)
};

/* Why no GPU can be had, in the words a user can act on. */
static lw_status no_gpu(cudaError_t e) {
    int runtime = 0;
    cudaRuntimeGetVersion(&runtime);
    if (e == cudaErrorInsufficientDriver)
        return lwc_host->fail(LW_ERR_UNSUPPORTED,
                              "device: CUDA is not available: no usable NVIDIA driver (libcuda.so is "
                              "missing or older than the CUDA %d.%d runtime liblwopt_cuda.so was "
                              "built with)",
                              runtime / 1000, runtime % 1000 / 10);
    if (e == cudaErrorNoDevice || e == cudaSuccess)
        return lwc_host->fail(LW_ERR_UNSUPPORTED,
                              "device: CUDA is not available: the driver sees no GPU "
                              "(CUDA_VISIBLE_DEVICES is '%s')",
                              getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES")
                                                             : "unset");
    return lwc_host->fail(LW_ERR_UNSUPPORTED, "device: CUDA is not available: %s (%s)",
                          cudaGetErrorString(e), cudaGetErrorName(e));
}

lw_status lwopt_device_open(const lwi_device_host *host, int32_t index, const lwi_device_ops **ops,
                            void **impl);
lw_status lwopt_device_open(const lwi_device_host *host, int32_t index, const lwi_device_ops **ops,
                            void **impl) {
    if (host->abi != LWI_DEVICE_ABI)
        return host->fail(LW_ERR_UNSUPPORTED,
                          "liblwopt_cuda.so speaks device ABI %d but liblwopt.so speaks %d: "
                          "build both from one source tree",
                          LWI_DEVICE_ABI, host->abi);
    if (host->ops_bytes != (int32_t)sizeof(lwi_device_ops))
        return host->fail(LW_ERR_UNSUPPORTED,
                          "liblwopt_cuda.so's device table is %d bytes but liblwopt.so's is %d "
                          "(their kernel lists differ): build both from one source tree",
                          (int)sizeof(lwi_device_ops), (int)host->ops_bytes);
    lwc_host = host;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) return no_gpu(e);
    if (index >= count)
        return host->fail(LW_ERR_UNSUPPORTED, "device: there is no GPU %d (the driver sees %d)", index,
                          count);
    lwc_device *c = calloc(1, sizeof *c);
    if (c == NULL) return host->fail(LW_ERR_NOMEM, "cuda: out of memory");
    c->index = index;
    e = cudaSetDevice(index);
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&c->prop, index);
    if (e != cudaSuccess) {
        free(c);
        return no_gpu(e);
    }
    cublasStatus_t b = cublasCreate(&c->blas);
    if (b != CUBLAS_STATUS_SUCCESS) {
        free(c);
        return lwc_fail_blas(NULL, b, "cublasCreate");
    }
    b = cublasLtCreate(&c->lt);
    if (b != CUBLAS_STATUS_SUCCESS) {
        cublasDestroy(c->blas);
        free(c);
        return lwc_fail_blas(NULL, b, "cublasLtCreate");
    }
    *ops = &cuda_ops;
    *impl = c;
    return LW_OK;
}
