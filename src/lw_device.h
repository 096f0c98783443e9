/* lw_device.h: devices, streams and events: where memory lives and kernels run. "cpu" (host
 * memory and OpenBLAS, the reference of every kernel) always; "cuda" / "cuda:N" when the CUDA
 * library (liblwopt_cuda.so) loads. Work is ordered on streams; every call that takes a stream
 * accepts NULL for the CPU's default stream. How the CPU's streams behave, and who may touch
 * device memory: docs/c_api.md.
 */
#ifndef LW_DEVICE_API_H
#define LW_DEVICE_API_H

#include "lw_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* LW_CDEF_BEGIN */

/* ---- devices ------------------------------------------------------------------------------- */

typedef struct lw_device lw_device;
typedef struct lw_stream lw_stream;
typedef struct lw_event lw_event;

typedef enum lw_copy_kind {
    LW_COPY_HOST_TO_DEVICE = 0,
    LW_COPY_DEVICE_TO_HOST = 1,
    LW_COPY_DEVICE_TO_DEVICE = 2
} lw_copy_kind;

/* Whether the CUDA library is present, loads and sees a GPU (asks the loader; when false,
 * lw_device_get("cuda") says what is missing). */
bool lw_has_cuda(void);
/* The device called name: "cpu", "cuda" (= "cuda:0") or "cuda:N". [out] borrowed: the same
 * object for the same name, for the life of the process. LW_ERR_UNSUPPORTED names what is
 * missing (the library, a symbol, the GPU); LW_ERR_INVALID for an unknown name. */
lw_status lw_device_get(const char *name, lw_device **out);
/* The CPU device. [borrowed] */
lw_device *lw_device_cpu(void);
/* "cpu", "cuda:0", ... [borrowed] */
const char *lw_device_name(const lw_device *device);
/* Whether the host reads and writes the device's memory directly (the CPU): views of it are
 * free, and copies are plain memory copies. */
bool lw_device_is_host(const lw_device *device);
/* The device's default stream. [borrowed] */
lw_stream *lw_device_stream(lw_device *device);
/* Zeroed, 64-byte-aligned device memory of bytes. [out] owned: lw_device_free on the same
 * device. A failed allocation names the bytes asked for. */
lw_status lw_device_alloc(lw_device *device, int64_t bytes, void **out);
void lw_device_free(lw_device *device, void *p);
/* Sets bytes bytes at dst (the stream's device memory) to value (0..255), on stream. */
lw_status lw_device_set(lw_stream *stream, void *dst, int32_t value, int64_t bytes);
/* Copies bytes bytes on stream; the regions must not overlap. A copy from or to host memory
 * has completed on return (the host array may be reused at once); device to device is ordered
 * on the stream. */
lw_status lw_device_copy(lw_stream *stream, void *dst, const void *src, int64_t bytes,
                         lw_copy_kind kind);

/* The model kernels' matrix products on a GPU: exact fp32 (the default), TF32 tensor cores, or
 * bf16 tensor cores with fp32 sums, as autocast (docs/c_api.md). The CPU computes fp32
 * whichever is set. */
typedef enum lw_matmul {
    LW_MATMUL_FP32 = 0,
    LW_MATMUL_TF32 = 1,
    LW_MATMUL_BF16 = 2
} lw_matmul;
/* "fp32", "tf32", "bf16" (names as lw_dtype_name). */
const char *lw_matmul_name(lw_matmul matmul);
lw_status lw_matmul_from_name(const char *name, lw_matmul *out);
lw_status lw_device_set_matmul(lw_device *device, lw_matmul matmul);
lw_matmul lw_device_matmul(const lw_device *device);

/* ---- streams and events -------------------------------------------------------------------- */

/* A stream of device's. [out] owned. */
lw_status lw_stream_new(lw_device *device, lw_stream **out);
/* Waits for the stream's work, then frees it (a device's default stream is never freed). */
void lw_stream_free(lw_stream *stream);
/* [borrowed] the stream's device (the CPU's for NULL). */
lw_device *lw_stream_device(const lw_stream *stream);
/* Waits until everything issued on stream has run. */
lw_status lw_stream_synchronize(lw_stream *stream);
/* Work issued on stream after this call waits for the event's work (no host wait). */
lw_status lw_stream_wait(lw_stream *stream, lw_event *event);
/* An event of device's. [out] owned. */
lw_status lw_event_new(lw_device *device, lw_event **out);
void lw_event_free(lw_event *event);
/* Marks the current end of stream's work; the event completes when that work has run. */
lw_status lw_event_record(lw_event *event, lw_stream *stream);
lw_status lw_event_synchronize(lw_event *event);
/* [out] *done: whether the work the event marks has run. */
lw_status lw_event_query(lw_event *event, bool *done);

/* What a device is, for logs and for choosing sizes. */
typedef struct lw_device_info {
    char name[128];      /* "cpu" or the GPU's name ("NVIDIA H100 80GB HBM3") */
    int64_t total_bytes; /* its memory (the CPU: the machine's) */
    int64_t free_bytes;  /* free now (the CPU: available to allocate) */
    int32_t capability;  /* compute capability x 10 (90 for sm_90); 0 for the CPU */
    int32_t processors;  /* streaming multiprocessors; the CPU: online cores */
    char software[96];   /* "CUDA 13.0 (driver 13.0), cuBLAS 130000, NCCL 22703"; "" for the CPU */
    char id[64];         /* the physical device, equal in every process that opens it: the GPU's
                            UUID ("GPU-6f2cc1a0-..."); "" for the CPU */
} lw_device_info;
lw_status lw_device_get_info(lw_device *device, lw_device_info *out);

/* LW_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* LW_DEVICE_API_H */
