/* device.h: the device table, the one seam between the core and the hardware. The core above
 * (buffers, optimizer, the public kernels) calls devices only through it; device/cpu/ fills it
 * with the reference implementations, the CUDA library (src/cuda/) fills the same table and is
 * loaded by device/loader.c. Not public API, but the CUDA library's contract: a library opens
 * only for a core of its LWI_DEVICE_ABI and its table's size (lwi_device_host), so an entry
 * added here or to the kernel list needs no new version; LWI_DEVICE_ABI goes up when an entry's
 * parameters or meaning, or the host struct, change. The
 * communicator's structs (comm/comm.h: lw_comm, lw_request, lwi_comm_backend) are part of the
 * same contract, since the CUDA library's NCCL backend fills a backend and reads them. */
#ifndef LW_DEVICE_H
#define LW_DEVICE_H

#include "base/base.h"
#include "device/kernel_list.h"

#define LWI_DEVICE_ABI 17 /* the current version; what each one changed: docs/abi.md */

/* What Muon's element-wise step needs besides the arrays (lw_muon_momentum). */
typedef struct lwi_muon_step {
    float beta;
    bool nesterov;
    lw_weight_decay weight_decay_mode;
    float lr;
    float weight_decay;
    float grad_scale;
} lwi_muon_step;

/* Newton-Schulz of a batch of same-shaped matrices (lw_muon_orthogonalize, the optimizer's
 * batches): steps (a, b, c) triples, the normalisation (U divided by max(gain ||U||_F + offset,
 * eps), in double: gain 1 and offset 0 are max(||U||_F, eps) exactly), SYRK/SYMM or full GEMMs,
 * the arithmetic (the CPU computes fp32 whatever is asked), and a workspace of at least
 * lwi_ns_work_floats(batch, rows, cols) floats in the device's memory. */
typedef struct lwi_ns_plan {
    const float *abc; /* host: steps x 3 */
    int32_t steps;
    float eps;
    float norm_gain;
    float norm_offset;
    bool symmetric;
    lw_ns_precision precision;
    float *work;
} lwi_ns_plan;

/* Per matrix, floats of partial sums for its Frobenius norm (a device reduces in blocks). */
#define LWI_NS_PARTIALS 1024

/* Per matrix, doubles of partial sums muon_renormalize may use (its work). */
#define LWI_MUON_NORM_BLOCKS 256
/* Doubles of work normuon_variance takes: its lines' scales and terms, and two norms. */
#define LWI_NORMUON_WORK(rows, cols) (2 * ((rows) >= (cols) ? (rows) : (cols)) + 2)

/* Floats of Newton-Schulz workspace for `batch` rows x cols matrices: per matrix A and A2
 * (p x p), Y (p x q), p = min, q = max of the two, and the norm's partial sums (bf16 needs
 * half of the first three: X, A, B, Y in halves). */
static inline int64_t lwi_ns_work_floats(int64_t batch, int64_t rows, int64_t cols) {
    const int64_t p = rows <= cols ? rows : cols, q = rows <= cols ? cols : rows;
    return batch * (2 * p * p + p * q + LWI_NS_PARTIALS);
}

/* One tensor of a multi-tensor element-wise update (AdamW, Lion): a contiguous run of elements
 * (w, g and the state m, v, each n floats) and its group's learning rate and weight decay. A
 * rule with one state part (Lion: m) leaves v unused (NULL). */
typedef struct lwi_update_tensor {
    float *w;
    const float *g;
    float *m;
    float *v;
    int64_t n;
    float lr;
    float weight_decay;
} lwi_update_tensor;

/* Every entry returns LW_OK or fails through lwi_fail (the CUDA library through the host's
 * fail function, lwi_device_host). Streams and events carry the backend's handle in impl. */
struct lwi_comm_calls; /* comm/comm.h */

typedef struct lwi_device_ops {
    const char *kind; /* "cpu", "cuda" */
    bool host_memory; /* lw_device_is_host */
    /* memory */
    lw_status (*alloc)(lw_device *device, int64_t bytes, void **out); /* zeroed */
    void (*free)(lw_device *device, void *p);
    lw_status (*set)(lw_stream *stream, void *dst, int32_t value, int64_t bytes);
    lw_status (*copy)(lw_stream *stream, void *dst, const void *src, int64_t bytes,
                      lw_copy_kind kind);
    /* streams and events */
    lw_status (*stream_new)(lw_device *device, void **impl);
    void (*stream_free)(lw_device *device, void *impl);
    lw_status (*stream_synchronize)(lw_stream *stream);
    lw_status (*stream_wait)(lw_stream *stream, lw_event *event);
    lw_status (*event_new)(lw_device *device, void **impl);
    void (*event_free)(lw_device *device, void *impl);
    lw_status (*event_record)(lw_event *event, lw_stream *stream);
    lw_status (*event_synchronize)(lw_event *event);
    lw_status (*event_query)(lw_event *event, bool *done);
    /* what the device is (lw_device_get_info) */
    lw_status (*info)(lw_device *device, lw_device_info *out);
    /* A communicator of parent's ranks that moves this device's memory (NCCL), bootstrapped
     * through parent's collectives, which it reaches through `calls` (comm/comm.h: the
     * communicator lends them, so that the device layer never includes the communicator's);
     * NULL: none. */
    lw_status (*comm_new)(lw_device *device, lw_comm *parent, const struct lwi_comm_calls *calls,
                          lw_comm **out);
    /* [out] *here: whether p is this device's memory (which a staged communicator copies
     * through the host) rather than host memory; fails naming the other device when it is
     * another device's. */
    lw_status (*memory_here)(lw_device *device, const void *p, bool *here);
    /* the kernels' scratch sizes and the kernels (kernel_list.h, where each says what it takes;
     * lw.h says what the public ones compute, and the core kernels are described there) */
#define LWI_SIZE_MEMBER(name, params, args) int64_t(*name) params;
    LWI_SCRATCH_SIZES(LWI_SIZE_MEMBER)
#undef LWI_SIZE_MEMBER
#define LWI_KERNEL_MEMBER(name, params, args, check) lw_status(*name) params;
    LWI_KERNELS(LWI_KERNEL_MEMBER)
#undef LWI_KERNEL_MEMBER
} lwi_device_ops;

struct lw_device {
    const lwi_device_ops *ops;
    char name[32];     /* "cpu", "cuda:0" */
    int32_t index;     /* the GPU's ordinal; 0 for the CPU */
    void *impl;        /* the backend's per-device data */
    lw_stream *stream; /* [owned] the default stream */
    lw_matmul matmul;  /* the model kernels' matrix products (lw_device_set_matmul) */
};

struct lw_stream {
    lw_device *device;
    void *impl;
};

struct lw_event {
    lw_device *device;
    void *impl;
};

/* What the core lends a device library when it opens it: its error reporting (a device library
 * is dlopened by liblwopt.so and links neither the core's internal symbols nor the core itself;
 * the communicator lends its calls with comm_new). */
typedef struct lwi_device_host {
    int32_t abi;       /* LWI_DEVICE_ABI */
    int32_t ops_bytes; /* sizeof(lwi_device_ops): a kernel added to the list changes it */
    lw_status (*fail)(lw_status status, const char *fmt, ...);
} lwi_device_host;

/* The entry a device library exports (named LWI_DEVICE_ENTRY): fills *ops for the device
 * `index` of its kind and its per-device data, or fails saying why (no GPU, a driver too old). */
typedef lw_status (*lwi_device_entry)(const lwi_device_host *host, int32_t index,
                                      const lwi_device_ops **ops, void **impl);
#define LWI_DEVICE_ENTRY "lwopt_device_open"

/* kernels.c: the core kernels' dispatchers, lwi_run_<name>(stream, ...) (a NULL stream is the
 * CPU's): the list's check, then the stream's device, which must have the kernel. The optimizer
 * calls these; lw.h's kernels have public dispatchers of the same form. */
#define LWI_RUN_DECLARATION(name, params, args, check) lw_status lwi_run_##name params;
LWI_CORE_KERNELS(LWI_RUN_DECLARATION)
#undef LWI_RUN_DECLARATION

/* What a check in kernel_list.h returns when a call has no work: the dispatcher returns LW_OK
 * without reaching the device (no lw_status has this value). */
#define LWI_NOTHING_TO_DO ((lw_status)1000)
/* LW_OK when there is work, LWI_NOTHING_TO_DO when not. */
static inline lw_status lwi_work_if(bool work) { return work ? LW_OK : LWI_NOTHING_TO_DO; }

/* Device memory grown on demand (workspace.c), zero-initialised as {0}: `bytes` of it at
 * `data` on `device`. */
typedef struct lwi_workspace {
    lw_device *device;
    void *data; /* [owned, device memory] */
    int64_t bytes;
} lwi_workspace;

/* At least count * size bytes on s's device (the old block, waited for on s, freed first); a
 * failure says "<what> (<count> <unit>): <why>". */
lw_status lwi_workspace_reserve(lwi_workspace *w, lw_stream *s, int64_t count, int64_t size,
                                const char *what, const char *unit);
void lwi_workspace_free(lwi_workspace *w);

/* kernels.c: the checks the list names, once for every device. Attention: nothing to do for an
 * empty shape; the heads must divide the channels, the KV heads (1 <= nkv) the heads, and the
 * window must be >= 0. */
lw_status lwi_check_heads(const char *what, int64_t b, int64_t t, int64_t c, int64_t nh,
                          int64_t nkv, int64_t window);
/* A mixture of experts' routing sizes: n >= 0, e >= 1, 1 <= k <= e. */
lw_status lwi_check_routing(const char *what, int64_t n, int64_t e, int64_t k);
/* A vocabulary range of a tensor-parallel call: rows [first, first + rows) >= 0, and (the
 * cross-entropy) a vocabulary of at least 1. */
lw_status lwi_check_range(const char *what, int64_t first, int64_t rows, int64_t vocab);
/* A weight dtype the model kernels read, an activation dtype they read or write, a linear
 * layer's and GELU's dtypes (the output's or its gradient's, named by `role`; the input's; the
 * weight's): fp32 or bf16. */
lw_status lwi_check_weights(const char *what, lw_dtype w_dtype);
lw_status lwi_check_activations(const char *what, lw_dtype dtype);
lw_status lwi_check_linear(const char *what, const char *role, lw_dtype dtype, lw_dtype x_dtype,
                           lw_dtype w_dtype);
lw_status lwi_check_gelu(const char *what, const char *role, lw_dtype dtype, lw_dtype x_dtype);
/* The linear layer after GELU's backward: dy's dtype, then GELU's input's, x's and w's. */
lw_status lwi_check_linear_gelu(const char *what, lw_dtype dtype, lw_dtype dy_dtype,
                                lw_dtype x_dtype, lw_dtype w_dtype);
/* The attention's qkv, output and qkv gradient dtypes (fp32 or bf16), then lwi_check_heads. */
lw_status lwi_check_attention(const char *what, lw_dtype qkv_dtype, lw_dtype out_dtype,
                              lw_dtype dqkv_dtype, int64_t b, int64_t t, int64_t c, int64_t nh,
                              int64_t nkv, int64_t window);
/* The LM head's weight and logits dtypes (fp32 or bf16) and its softcap (finite, >= 0), and
 * with the range. */
lw_status lwi_check_head(const char *what, lw_dtype w_dtype, lw_dtype logits_dtype, float softcap);
lw_status lwi_check_head_range(const char *what, lw_dtype w_dtype, lw_dtype logits_dtype,
                               float softcap, int64_t first, int64_t rows, int64_t vocab);
/* Both of the above: the weights' dtype, then the range. */
lw_status lwi_check_weight_range(const char *what, lw_dtype w_dtype, int64_t first, int64_t rows,
                                 int64_t vocab);
/* The cross-entropy's combination: at least one part, a vocabulary of at least 1. */
lw_status lwi_check_parts(const char *what, int64_t parts, int64_t vocab);
/* RMSNorm: the output's dtype and an eps that is finite and >= 0; the backward's gain gradient
 * only with a gain (a parameter-free norm has none). */
lw_status lwi_check_rmsnorm_forward(const char *what, lw_dtype y_dtype, float eps);
lw_status lwi_check_rmsnorm_backward(const char *what, const float *g, const float *dg);
/* SwiGLU: the dtypes as lwi_check_gelu's, then an even fused width c (gate and up halves);
 * nothing to do for no rows. */
lw_status lwi_check_swiglu(const char *what, const char *role, lw_dtype dtype, lw_dtype x_dtype,
                           int64_t n, int64_t c);
/* The softcap: a finite cap > 0; nothing to do for no elements. */
lw_status lwi_check_softcap(const char *what, int64_t n, float cap);
/* Rotary embeddings: the dtype, a known pairing, an even head dim, base > 0 and finite, b >= 0,
 * t >= 1, pos0 >= 0, and the heads within the row (col0 >= 0, col0 + n_heads hd <= row_stride);
 * nothing to do without rows or heads. */
lw_status lwi_check_rope(const char *what, lw_dtype dtype, int64_t b, int64_t t, int64_t pos0,
                         int64_t row_stride, int64_t col0, int64_t n_heads, int64_t hd, float base,
                         lw_rope_pairing pairing);
/* The per-head RMS norm: both dtypes, hd >= 1, rows >= 0, eps >= 0 and finite, the heads within
 * the row; nothing to do without rows or heads. */
lw_status lwi_check_head_rmsnorm(const char *what, lw_dtype dtype, lw_dtype y_dtype, int64_t rows,
                                 int64_t row_stride, int64_t col0, int64_t n_heads, int64_t hd,
                                 float eps);

/* The value embeddings' gate: qkv (and its gradient) and x of fp32 or bf16, n >= 0, n_heads, hd
 * and channels >= 1, the gate's channels within x's row (channels <= x_stride), the V heads
 * within qkv's row (col0 >= 0, col0 + n_heads hd <= row_stride), a finite scale; nothing to do
 * without rows. */
lw_status lwi_check_value_gate(const char *what, lw_dtype qkv_dtype, lw_dtype x_dtype, int64_t n,
                               int64_t row_stride, int64_t col0, int64_t x_stride, int64_t n_heads,
                               int64_t hd, int64_t channels, float scale);

/* The stream to run on: the CPU's default stream for NULL. */
lw_stream *lwi_stream_or_cpu(lw_stream *stream);
/* LW_ERR_UNSUPPORTED: the stream's device has no `entry` (a device library still being built). */
lw_status lwi_device_missing(const lw_stream *stream, const char *entry);

/* device/cpu: the reference table. */
extern const lwi_device_ops lwi_cpu_ops;
/* device/loader.c: the CUDA device with this ordinal, from liblwopt_cuda.so. */
lw_status lwi_cuda_open(int32_t index, const lwi_device_ops **ops, void **impl);

/* BLAS threads for `ranks` processes sharing this machine, unless the user chose. */
void lwi_blas_share_cores(int32_t ranks);
/* Threads the CPU's kernels run on (device/cpu/pool.c: OpenBLAS's count, at most 8): the
 * optimizer batches that many Muon matrices on the CPU, one per thread. */
int32_t lwi_cpu_threads(void);

#endif
