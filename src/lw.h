/* lw.h: the whole public C API of lwopt, and the contract of the LuaJIT binding.
 *
 * The region between the LW_CDEF markers is copied verbatim into the Lua binding at build time,
 * so it holds plain declarations only: no macros, no #if, only stddef/stdint/stdbool types.
 * Conventions: calls that can fail return lw_status (0 ok, negative error) and write results
 * through out pointers; lw_last_error() then says "object: what went wrong, with the value".
 * Objects are opaque; option structs are plain data with a lw_<x>_defaults() function.
 * A C program meets the training API in order (devices, parameter specs, layouts, runtime
 * choices, communicator, kernels, Muon, AdamW, buffers, optimizer, model kernels); the host
 * helpers the Lua front end needs (files, JSON, CRC32C, clocks, terminals, safetensors, token
 * shards) are in lw_host.h, which this header includes at its end.
 *
 * Option structs are versioned, as NCCL's ncclConfig_t: lw_layout_options, lw_runtime_options,
 * lw_muon_options, lw_adamw_options, lw_buffers_options and lw_optimizer_options open with
 * `size_t size`, sizeof the struct as the caller's lw.h had it, which lw_<x>_defaults() sets;
 * so start every one from its defaults function and set fields by name (an initialiser or a
 * zeroed struct leaves size 0). Fields are only ever appended. A call taking the struct refuses
 * (LW_ERR_INVALID) a size of 0 ("optimizer: lw_optimizer_options.size is 0: start from
 * lw_optimizer_defaults()"), one larger than the library's (a program built against a newer lw.h
 * than its liblwopt.so) and any size no lw.h ever had; an older lw.h's smaller size is read with
 * the fields that lw.h lacked at their defaults. A struct held inside another (lw_muon_options
 * and lw_adamw_options in lw_optimizer_options) is versioned with it: the outer size fixes the
 * inner layouts, and each inner size must be the one that outer version holds (keep the ones
 * lw_optimizer_defaults() set). Structs the library fills (lw_*_info, lw_layout_stats,
 * lw_step_result, lw_buffers_memory, lw_state_entry) and lw_param_spec, an array of which is
 * read at its element size, never change layout within one soname: new per-parameter facts or
 * results come with new calls.
 * Enum values are explicit and only ever appended. Offsets are element offsets, 0-based,
 * half-open [start, stop). Indices of buffers, buckets and params are 0-based.
 */
#ifndef LW_H
#define LW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* LW_CDEF_BEGIN */

/* ---- status ------------------------------------------------------------------------------ */

typedef enum lw_status {
    LW_OK = 0,
    LW_ERR_INVALID = -1,     /* bad argument or input; the message names it */
    LW_ERR_NOMEM = -2,       /* an allocation failed */
    LW_ERR_UNSUPPORTED = -3, /* not built in (e.g. CUDA) or not implemented for this case */
    LW_ERR_RANGE = -4,       /* an index or name out of range / not found */
    LW_ERR_STATE = -5,       /* object in the wrong state for this call */
    LW_ERR_IO = -6,          /* file or system error */
    LW_ERR_TIMEOUT = -7      /* a collective did not complete within its communicator's timeout */
} lw_status;

/* Message of the last failed call on this thread; "" if none. [borrowed] valid until the next
 * failing call on the same thread. */
const char *lw_last_error(void);
/* Library version, "MAJOR.MINOR.PATCH". [borrowed] static string. */
const char *lw_version(void);
/* Whether the CUDA library (liblwopt_cuda.so) is present and loads, and sees a GPU: asks the
 * loader (lw_device_get("cuda") says what is missing when it is false). */
bool lw_has_cuda(void);
/* Seconds on a monotonic clock, for timing. */
double lw_now(void);

/* ---- devices --------------------------------------------------------------------------------
 * Where memory lives and kernels run: "cpu" (host memory, OpenBLAS: the reference of every
 * kernel) always; "cuda" / "cuda:N" when the CUDA library (liblwopt_cuda.so) is present and
 * loads. Devices live as long as the process: lw_device_get hands out the same [borrowed]
 * object for the same name. Work is ordered on streams; every device has a default stream, and
 * every call below that takes a stream accepts NULL for the CPU's. On the CPU a stream runs
 * work at once (it is the identity), so its events are always complete. Nothing above the
 * device layer dereferences device memory: Lua and checkpoints copy with lw_device_copy. */

typedef struct lw_device lw_device;
typedef struct lw_stream lw_stream;
typedef struct lw_event lw_event;

typedef enum lw_copy_kind {
    LW_COPY_HOST_TO_DEVICE = 0,
    LW_COPY_DEVICE_TO_HOST = 1,
    LW_COPY_DEVICE_TO_DEVICE = 2
} lw_copy_kind;

/* The device called `name`: "cpu", "cuda" (= "cuda:0") or "cuda:N". [out] borrowed. Fails
 * with LW_ERR_UNSUPPORTED naming what is missing (the library, a symbol, the GPU) when CUDA
 * cannot be had, LW_ERR_INVALID for an unknown name. */
lw_status lw_device_get(const char *name, lw_device **out);
/* The CPU device. [borrowed] */
lw_device *lw_device_cpu(void);
/* "cpu", "cuda:0", ... [borrowed] */
const char *lw_device_name(const lw_device *device);
/* Whether the host can read and write the device's memory directly (the CPU): views of it are
 * then free, and copies are plain memory copies. */
bool lw_device_is_host(const lw_device *device);
/* The device's default stream. [borrowed] */
lw_stream *lw_device_stream(lw_device *device);
/* Zeroed, 64-byte-aligned device memory of `bytes`. [out] owned, release with
 * lw_device_free on the same device. An allocation that fails names the bytes asked for. */
lw_status lw_device_alloc(lw_device *device, int64_t bytes, void **out);
void lw_device_free(lw_device *device, void *p);
/* Sets `bytes` bytes at dst (the stream's device memory) to `value` (0..255), on stream. */
lw_status lw_device_set(lw_stream *stream, void *dst, int32_t value, int64_t bytes);
/* Copies `bytes` bytes on stream. A copy from or to host memory has completed when the call
 * returns (the host array may be reused at once); device-to-device copies are ordered on the
 * stream. Regions must not overlap. */
lw_status lw_device_copy(lw_stream *stream, void *dst, const void *src, int64_t bytes,
                         lw_copy_kind kind);

/* The model kernels' matrix products on a device (linear layers, the LM head): exact fp32, the
 * default; TF32 tensor cores (fp32 storage and accumulation, products of 10-bit mantissas); or
 * bf16 tensor cores, as autocast runs matmuls: each GEMM rounds its fp32 operands to bf16
 * (nearest even, 8-bit significands) into a per-stream workspace, reads bf16 weights as they
 * are, and sums the products in fp32 into fp32 outputs (gradients still accumulate in fp32).
 * Activations and gradients stay fp32 in memory under every setting; weights are as the
 * parameters are stored (fp32, or bf16: widened into the workspace for fp32 and TF32 products).
 * On a GPU only: the CPU computes fp32 whichever is set. */
typedef enum lw_matmul {
    LW_MATMUL_FP32 = 0,
    LW_MATMUL_TF32 = 1,
    LW_MATMUL_BF16 = 2
} lw_matmul;
/* "fp32", "tf32", "bf16" (see lw_dtype_name). */
const char *lw_matmul_name(lw_matmul matmul);
lw_status lw_matmul_from_name(const char *name, lw_matmul *out);
lw_status lw_device_set_matmul(lw_device *device, lw_matmul matmul);
lw_matmul lw_device_matmul(const lw_device *device);

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
    char id[64];         /* the physical device, the same in every process that opens it: the
                            GPU's UUID ("GPU-6f2cc1a0-..."); "" for the CPU. Ranks whose ids are
                            equal share one GPU (lw_comm_device_new) */
} lw_device_info;
lw_status lw_device_get_info(lw_device *device, lw_device_info *out);

/* ---- parameter specs ----------------------------------------------------------------------- */

typedef enum lw_dtype {
    LW_DTYPE_F32 = 0,
    LW_DTYPE_BF16 = 1,
    LW_DTYPE_F16 = 2,
    LW_DTYPE_F64 = 3, /* reductions only (norms), not parameters */
    LW_DTYPE_I64 = 4  /* reductions only (counts), not parameters */
} lw_dtype;

/* The enums a user names in words (dtype, algorithm, mode, shard, reduce op, Muon's three,
 * path kind) have a name function and its inverse, as ggml_type_name: the stable lower-case words
 * Lua, the recipes, messages and documentation use, kept only here. lw_<enum>_name: a value's
 * name, NULL for a value out of range (so a caller lists the names by asking for 0, 1, 2, ...
 * until NULL). [borrowed] static string. lw_<enum>_from_name: [out] *out the value of an exact
 * name; LW_ERR_INVALID for any other (or NULL) name, *out left as it was, with the message
 * "unknown dtype 'x' (one of f32, bf16, f16, f64, i64)" (no prefix: callers put their own in
 * front). lw_comm_op has lw_comm_op_name only ("unknown" out of range). */
/* "f32", "bf16", "f16", "f64", "i64". */
const char *lw_dtype_name(lw_dtype dtype);
lw_status lw_dtype_from_name(const char *name, lw_dtype *out);

/* One model parameter, as the layout engine sees it. */
typedef struct lw_param_spec {
    const char *name;      /* [borrowed] unique, non-empty; copied by lw_layout_new */
    int32_t ndim;          /* 1..4 */
    int64_t shape[4];      /* shape[0..ndim-1] > 0; e.g. {out, in} for a linear weight */
    lw_dtype dtype;        /* parameter dtype */
    lw_dtype grad_dtype;   /* gradient dtype */
    bool expert;           /* sharded over the expert data-parallel group */
    bool shared_embedding; /* one tensor used as input embedding and LM head: never Muon,
                              isolated in its own bucket */
    bool muon;             /* managed by Muon (routed); false = AdamW */
    /* Tensor parallelism (docs/algorithms.md section 9), appended: a zero-filled tail means a
     * tensor replicated over TP and no QKV split, as before. tp_blocks >= 1: the tensor is a TP
     * shard; its shape is the full shape with dimension tp_dim (0-based: 0 for column-parallel
     * {out/t, in}, 1 for row-parallel {out, in/t}) divided by the TP size t; along tp_dim the
     * full tensor is tp_blocks equal consecutive blocks, each split into t equal contiguous
     * pieces, and TP rank r holds piece r of every block, concatenated (3 for a fused
     * [Q; K; V]). tp_blocks 0: replicated over TP (identical on every TP rank), tp_dim
     * ignored. */
    int32_t tp_dim;
    int32_t tp_blocks;
    /* qkv_groups >= 1: a fused QKV weight whose local rows are qkv_groups consecutive groups
     * of qkv_rows[0] + qkv_rows[1] + qkv_rows[2] rows (q, k, v: Megatron's per-group layout;
     * grouped-query attention: groups = KV heads, q = heads / groups * head_dim, k = v =
     * head_dim). Muon's split_qkv orthogonalises Q, K and V apart. 0: not a fused QKV. */
    int32_t qkv_groups;
    int64_t qkv_rows[3];
} lw_param_spec;

/* ---- layouts ------------------------------------------------------------------------------- */

typedef enum lw_algorithm {
    LW_ALGORITHM_COST = 0,          /* shard-aligned, balances Newton-Schulz cost */
    LW_ALGORITHM_LPT = 1,           /* shard-aligned, largest-first on contiguous chunks */
    LW_ALGORITHM_SIZE_MATCHING = 2, /* shard-aligned, first published version */
    LW_ALGORITHM_DISTOPT = 3,       /* element-wise ZeRO-1: rank r owns the r-th slice */
    LW_ALGORITHM_DEFAULT = 4,       /* unpadded, unsharded (plain data parallel) */
    LW_ALGORITHM_LEGACY = 5,        /* unpadded, whole params owned by ping-pong dealing */
    LW_ALGORITHM_ROWS = 6,          /* element-wise, one bucket per param, every param split by
                                       rows into dp equal shards (row-sharded FSDP) */
    LW_ALGORITHM_PACKED = 7,        /* whole matrices owned, no padding on the wire: shards of
                                       unequal size (variable-count collectives), owners
                                       balancing Newton-Schulz cost over the whole buffer */
    LW_ALGORITHM_AUTO = -1          /* lw_runtime_options only: the layout follows from the mode and
                                       shard (lw_runtime_layout); no layout has it; no name */
} lw_algorithm;

/* "cost", "lpt", "size_matching", "distopt", "default", "legacy", "rows", "packed" (see
 * lw_dtype_name). */
const char *lw_algorithm_name(lw_algorithm algorithm);
lw_status lw_algorithm_from_name(const char *name, lw_algorithm *out);

typedef struct lw_layout_options {
    size_t size;                  /* sizeof, set by lw_layout_defaults() (see the top) */
    int32_t dp;                   /* data-parallel size for non-expert buffers, >= 1 */
    int32_t expert_dp;            /* data-parallel size for expert buffers, >= 1 */
    int64_t bucket_size;          /* elements, >= 0; INT64_MAX = one bucket per buffer */
    lw_algorithm algorithm;       /* layout of Muon buffers (ROWS only here) */
    lw_algorithm adamw_algorithm; /* layout of AdamW buffers (DISTOPT, or a shard-aligned one
                                     for owning AdamW params whole) */
    bool high_busbw;              /* pad bucket ends to lcm(dp, 128, 65536) */
} lw_layout_options;

/* dp 1, expert_dp 1, no bucket limit, cost for Muon, distopt for AdamW, no high-busbw pad. */
lw_layout_options lw_layout_defaults(void);

typedef struct lw_layout lw_layout;

/* A buffer: the params of one (dtype, grad dtype, expert, muon) key, in one flat array. */
typedef struct lw_buffer_info {
    lw_dtype param_dtype;
    lw_dtype grad_dtype;
    bool expert;
    bool muon;
    lw_algorithm algorithm;
    int32_t dp;    /* size of the group that shards it */
    int64_t numel; /* elements, padding included */
    int32_t n_buckets;
    int32_t n_params;
} lw_buffer_info;

/* A bucket: [start, stop) of its buffer, dp shards (lw_layout_shard): equal ones of shard_size
 * elements, or with the packed layout each rank's run of what it owns there. */
typedef struct lw_bucket_info {
    int64_t start;
    int64_t stop;
    int64_t shard_size;     /* (stop - start) / dp; stop - start for the unsharded layouts; the
                               largest shard for packed */
    int64_t numel_unpadded; /* sum of the real sizes of its params */
    int32_t n_params;
} lw_bucket_info;

/* Where a parameter lives. */
typedef struct lw_param_place {
    int32_t buffer;
    int32_t bucket;
    int64_t start; /* element offset in the buffer */
    int64_t stop;  /* start + numel */
    int32_t owner; /* rank within the buffer's group that owns it whole; -1 if element-wise
                      (distopt: split across ranks) or unsharded (default: every rank) */
} lw_param_place;

/* Whole-model statistics. Per-rank figures cover Muon buffers only, over
 * max(dp, expert_dp) ranks: owned numel, and owned Newton-Schulz cost (max(m,n) * min(m,n)^2
 * for an m x n matrix, numel otherwise; an element-wise slice counts its share). A fused QKV
 * weight (qkv_groups) costs its Q, K and V matrices' sum, as Muon's split_qkv (the default)
 * orthogonalises it; shapes are the local (TP shard) ones. The cost layout balances the same
 * costs. */
typedef struct lw_layout_stats {
    int32_t params;       /* number of parameters */
    int64_t numel;        /* sum of real parameter sizes */
    int64_t buffer_numel; /* sum of buffer sizes, padding included */
    int64_t padding;      /* buffer_numel - numel */
    double overhead;      /* padding / numel */
    int64_t muon_numel;   /* the same, for Muon buffers only */
    int64_t muon_buffer_numel;
    double muon_overhead;
    double numel_imbalance; /* max over ranks / mean over ranks; 1 when nothing is owned */
    double cost_imbalance;
    double cost_imbalance_bound; /* lower bound for whole-matrix ownership, over the mean
                                    total/ranks: the largest of the mean, the largest cost, and
                                    for each j >= 1 the sum of the j + 1 smallest of the
                                    j * ranks + 1 largest costs (pigeonhole) */
    int32_t ranks;               /* number of per-rank entries, max(dp, expert_dp) */
} lw_layout_stats;

/* Computes the layout of n params (definition order) under opts. [out] *out owned by the
 * caller, freed with lw_layout_free. Validates every input; on error *out is NULL. */
lw_status lw_layout_new(const lw_param_spec *specs, int32_t n, const lw_layout_options *opts,
                        lw_layout **out);
void lw_layout_free(lw_layout *layout);

lw_layout_options lw_layout_get_options(const lw_layout *layout);
int32_t lw_layout_num_params(const lw_layout *layout);
int32_t lw_layout_num_buffers(const lw_layout *layout);
lw_status lw_layout_buffer(const lw_layout *layout, int32_t buffer, lw_buffer_info *out);
lw_status lw_layout_bucket(const lw_layout *layout, int32_t buffer, int32_t bucket,
                           lw_bucket_info *out);
/* Rank `rank`'s shard of a bucket (0 <= rank < the buffer's dp): [*start, *start + *count) of
 * the buffer. Equal shards: start + rank * shard_size; packed: the run of the params the rank
 * owns in the bucket (count 0 when it owns none there; the shards tile the bucket in rank
 * order); the unsharded layouts (default, legacy): the whole bucket. */
lw_status lw_layout_shard(const lw_layout *layout, int32_t buffer, int32_t bucket, int32_t rank,
                          int64_t *start, int64_t *count);
/* The k-th param of a bucket, in placement order: [out] *param is its index in the specs. */
lw_status lw_layout_bucket_param(const lw_layout *layout, int32_t buffer, int32_t bucket, int32_t k,
                                 int32_t *param);
/* Place of the param with this index in the specs. */
lw_status lw_layout_place(const lw_layout *layout, int32_t param, lw_param_place *out);
/* Index of the param with this name; LW_ERR_RANGE if none. */
lw_status lw_layout_find(const lw_layout *layout, const char *name, int32_t *param);
/* Name of a param. [out] *name borrowed from the layout. */
lw_status lw_layout_param_name(const lw_layout *layout, int32_t param, const char **name);
lw_status lw_layout_stats_get(const lw_layout *layout, lw_layout_stats *out);
/* Owned numel and cost of one rank (0 <= rank < stats.ranks), Muon buffers. */
lw_status lw_layout_rank_load(const lw_layout *layout, int32_t rank, int64_t *numel, double *cost);
/* Checks every invariant; LW_ERR_INVALID with the first violation named if one fails. */
lw_status lw_layout_check(const lw_layout *layout);
/* Stable 64-bit hash of options and placement, as 16 hex digits. [out] hex: 17 bytes. Expert
 * parameters (expert = true) are hashed without their names (shape, flags and placement only):
 * under expert parallelism each EP rank holds different experts in the same places, and
 * lw_buffers_new compares this hash across every rank of its communicator. */
lw_status lw_layout_hash(const lw_layout *layout, char *hex);

/* Padding rules of docs/algorithms.md section 3. */
int64_t lw_bucket_end_divisor(int32_t dp, bool high_busbw);
int64_t lw_shard_divisor(int32_t dp, bool high_busbw);

/* ---- runtime choices: mode, ZeRO level, sharding ---------------------------------------------
 * How a model is trained across ranks, as lw.ddp.new and the recipes take it, and the rules about
 * which choices go together. They are checked here and nowhere else: lw.ddp.new and the recipes
 * call lw_runtime_check before any work, lw_buffers_new calls it with its ZeRO level and layout. */

typedef enum lw_mode {
    LW_MODE_LAYERWISE = 0, /* sharded buffers: Muon matrices owned whole, AdamW element-wise */
    LW_MODE_LEGACY = 1,    /* unpadded buffers, whole params owned by ping-pong dealing */
    LW_MODE_REPLICATED = 2 /* unsharded buffers: plain data parallel, every rank updates all */
} lw_mode;

/* "layerwise", "legacy", "replicated" (see lw_dtype_name). */
const char *lw_mode_name(lw_mode mode);
lw_status lw_mode_from_name(const char *name, lw_mode *out);

typedef enum lw_shard {
    LW_SHARD_ALIGNED = 0, /* each rank owns whole Muon matrices (a shard-aligned layout) */
    LW_SHARD_ROWS = 1     /* every Muon matrix split by rows across the ranks (the rows layout,
                             row-sharded FSDP) */
} lw_shard;

/* "aligned", "rows" (see lw_dtype_name). */
const char *lw_shard_name(lw_shard shard);
lw_status lw_shard_from_name(const char *name, lw_shard *out);

typedef struct lw_runtime_options {
    size_t size;                  /* sizeof, set by lw_runtime_defaults() (see the top) */
    lw_mode mode;
    int32_t zero;                 /* ZeRO level 1, 2 or 3 (lw_buffers_options.zero) */
    lw_shard shard;               /* how Muon matrices are sharded (mode layerwise) */
    lw_algorithm algorithm;       /* layout of Muon buffers, or LW_ALGORITHM_AUTO (not chosen) */
    lw_algorithm adamw_algorithm; /* layout of AdamW buffers (Lua's adamw_layout), or AUTO */
} lw_runtime_options;

/* Mode layerwise, ZeRO-1, shard aligned, both algorithms AUTO. */
lw_runtime_options lw_runtime_defaults(void);
/* Whether the choices go together; every rule about combinations is here. On their own: zero
 * is 1, 2 or 3; mode, shard and the algorithms are values of their enums (an algorithm may be
 * AUTO). Together: ZeRO-2/3 shard gradients (and parameters) across ranks, so they need mode
 * layerwise; shard rows needs ZeRO-3 and fixes the Muon layout (no algorithm); modes legacy and
 * replicated fix the layout (neither algorithm). With a layout (optional; the one the buffers
 * will hold), the ZeRO level against it too: at ZeRO-2/3 every buffer is sharded (none default
 * or legacy); at ZeRO-3 (a bucket group is gathered whole) the layout's bucket size holds the
 * largest parameter outside rows buffers. LW_ERR_INVALID names the first rule broken, with the
 * choices in the words of the name functions: "runtime: zero 2 shards gradients across ranks;
 * mode 'legacy' keeps them whole (use mode 'layerwise')". lw_buffers_new passes its ZeRO level
 * with the other choices at their defaults: the layout holds them. layout [borrowed]. */
lw_status lw_runtime_check(const lw_runtime_options *opts, const lw_layout *layout);
/* The layout algorithms the choices stand for: checks opts (lw_runtime_check without a
 * layout), then sets layout->algorithm (rows for shard rows; legacy or default for those modes;
 * else opts->algorithm, cost when AUTO) and layout->adamw_algorithm (legacy or default for those
 * modes; else opts->adamw_algorithm, distopt when AUTO). [out] the other fields of *layout are
 * left as they were. */
lw_status lw_runtime_layout(const lw_runtime_options *opts, lw_layout_options *layout);


/* ---- communicator ---------------------------------------------------------------------------
 * A group of ranks and the collectives lwopt needs. Backends: "self" (one rank, no MPI) and
 * "mpi". Every rank of a communicator must issue the same collectives in the same order.
 * Nonblocking collectives run on an lw_request; MPI progresses them only inside MPI calls, so
 * callers poll (lw_request_test, lw_buffers_progress) while they compute.
 *
 * The watchdog: a collective still in flight `timeout` seconds after it started (another rank
 * stopped, or skipped or reordered a collective) fails, in whichever wait or test sees it, with
 * LW_ERR_TIMEOUT and one line naming this rank, the collective, what it is for (its label), its
 * number on the communicator, its size and the phase. The communicator is broken from then on:
 * every later collective on it, and every wait for one in flight, fails at once with the same
 * message. The job must then end (lw_comm_abort; Lua's lw.comm.run does it): MPI cannot cancel
 * the stopped collective, and MPI_Finalize would wait for the stopped rank. */

typedef struct lw_comm lw_comm;
typedef struct lw_request lw_request;

typedef enum lw_reduce_op {
    LW_REDUCE_SUM = 0,
    LW_REDUCE_MAX = 1,
    LW_REDUCE_MIN = 2
} lw_reduce_op;

/* "sum", "max", "min" (see lw_dtype_name). */
const char *lw_reduce_op_name(lw_reduce_op op);
lw_status lw_reduce_op_from_name(const char *name, lw_reduce_op *out);

/* Kinds of operation, for the counters. */
typedef enum lw_comm_op {
    LW_COMM_ALLREDUCE = 0,
    LW_COMM_REDUCE_SCATTER = 1,
    LW_COMM_ALLGATHER = 2,
    LW_COMM_ALLGATHERV = 3,
    LW_COMM_BROADCAST = 4,
    LW_COMM_BARRIER = 5,
    LW_COMM_ALLTOALL = 6
} lw_comm_op;

/* Per-operation counters: calls, bytes this rank sends under ring algorithms ((p-1)/p of the
 * buffer for reduce-scatter and all-gather, 2(p-1)/p for all-reduce), and wall time spent
 * inside lwopt's calls for it (start, test, wait): the communication time left exposed. The
 * variable-count forms count as their equal-count kind (LW_COMM_REDUCE_SCATTER for
 * lw_comm_reduce_scatterv, LW_COMM_ALLGATHER for lw_comm_allgather_segments) by the same rule:
 * (p-1)/p of the bucket's total elements times the element size, whatever the segments' sizes
 * (the average over ranks of what a ring sends), so that a padded layout's syncs and a packed
 * one's compare by the bytes each bucket holds. LW_COMM_ALLTOALL (lw_comm_alltoallv) counts the
 * bytes this rank sends to other ranks: the sum of its send counts less send_counts[rank] (its
 * own part, a local copy), times the element size. */
typedef struct lw_comm_counter {
    int64_t calls;
    int64_t bytes;
    double seconds;
} lw_comm_counter;

/* The world: MPI when the process was started by an MPI launcher (or LWOPT_COMM=mpi), a
 * one-rank communicator otherwise (or LWOPT_COMM=self). MPI is initialised on first use and
 * finalised when the last MPI communicator is freed or at exit. [out] owned. */
lw_status lw_comm_init(lw_comm **out);
/* lw_comm_init with the watchdog's timeout given (seconds; < 0: LWOPT_TIMEOUT's, else 600; 0:
 * none), which also bounds the start-up: MPI's initialisation (MPI_Init_thread, which waits
 * for every rank of the job) and the world's duplication, and later MPI_Comm_split and
 * MPI_Finalize, blocking calls the watchdog cannot poll. Past the timeout there the process
 * ends with status 1 and one line on stderr naming the rank, the call and the timeout ("comm:
 * start-up watchdog: rank 0 of 2 waited 5 s in MPI_Init_thread ..."): a call that does not
 * return cannot fail, and a job whose rank never arrives can only end. [out] owned. */
lw_status lw_comm_init_timeout(double seconds, lw_comm **out);
/* A one-rank communicator. [out] owned. */
lw_status lw_comm_self(lw_comm **out);
/* Whether an MPI launcher (mpirun, srun, any PMI/PMIx launcher) started this process, read from
 * the environment before MPI starts; [out] *rank and *size (each optional) the launcher gave it,
 * 0 and 1 when not launched. */
bool lw_comm_launched(int32_t *rank, int32_t *size);
/* This process's rank among the job's processes on its machine, read from the launcher's
 * environment (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, MV2_COMM_WORLD_LOCAL_RANK,
 * PALS_LOCAL_RANKID, SLURM_LOCALID: the first set) before MPI starts: 0 when no launcher started
 * the process (lw_comm_launched), -1 when one did but set none of them. One GPU per rank: Lua's
 * device "cuda" means cuda:<local rank> under a launcher. */
int32_t lw_comm_local_rank(void);
void lw_comm_free(lw_comm *comm);
int32_t lw_comm_rank(const lw_comm *comm);
int32_t lw_comm_size(const lw_comm *comm);
/* "self", "mpi", "nccl" or "staged" (lw_comm_device_new). [borrowed] static string. */
const char *lw_comm_backend(const lw_comm *comm);
/* Why a device communicator is the kind it is, one line ("staged: ranks 0 and 1 share cuda:0
 * (GPU-6f2c...), and NCCL takes one rank per GPU"); "" for the others. [borrowed] */
const char *lw_comm_about(const lw_comm *comm);
/* Collectives started on comm from now on are ordered after the work issued so far on stream
 * (NULL: the CPU's): a backend that moves host memory (self, MPI) waits for the stream before it
 * starts one; a device backend (NCCL, with the CUDA library) will enqueue behind it. A request
 * with its own stream (lw_request_set_stream) follows that one instead. */
lw_status lw_comm_set_stream(lw_comm *comm, lw_stream *stream);
/* [borrowed] the stream set, the CPU's when none was. */
lw_stream *lw_comm_stream(const lw_comm *comm);
/* Whether comm's collectives move the memory of device (self and MPI: host memory only; a
 * device communicator: its device's memory, and host memory through its parent). */
bool lw_comm_reaches(const lw_comm *comm, const lw_device *device);
/* The kinds of device communicator (lw_comm_device_new_kind):
 * NCCL: the device library's own (NCCL for a CUDA device): device memory moved between GPUs
 *   directly; one rank per GPU.
 * STAGED: the device's memory copied to host memory, moved by parent's collectives (MPI), and
 *   copied back: slower, but it works where NCCL cannot (ranks sharing a GPU, a device library
 *   built without NCCL).
 * AUTO: NCCL when the device library has it and every rank has a GPU of its own (their
 *   lw_device_info ids differ), else STAGED; the environment's LWOPT_DEVICE_COMM (auto, nccl,
 *   staged) decides instead when set. */
typedef enum lw_device_comm {
    LW_DEVICE_COMM_AUTO = 0,
    LW_DEVICE_COMM_NCCL = 1,
    LW_DEVICE_COMM_STAGED = 2
} lw_device_comm;
/* "auto", "nccl", "staged". */
const char *lw_device_comm_name(lw_device_comm kind);
lw_status lw_device_comm_from_name(const char *name, lw_device_comm *out);

/* A communicator of parent's ranks (same rank numbers) whose collectives move device's memory,
 * of the kind lw_device_comm says (collective over parent, which every rank must call with the
 * same kind; each rank passes its own device: its GPU, or the one GPU the ranks share). The
 * ranks agree on the kind: AUTO resolves alike on all of them, and an asked kind that one rank
 * cannot have fails on every rank, naming it. Collectives on host memory (the gradient norm's
 * all-reduce, barriers, checkpoint broadcasts) still go through parent, which must outlive it.
 * A collective on device memory starts behind the work issued so far on the ordering stream
 * (the request's, else lw_comm_set_stream's, else the device's default stream); its request
 * completes when its result is in the device's memory. Its splits split parent too (and own
 * that split); it takes parent's timeout. lw_comm_about says which kind it is and why.
 * LW_ERR_UNSUPPORTED when the device needs none (the CPU: every communicator reaches host
 * memory) or cannot have the kind asked (NCCL with ranks sharing a GPU, or without NCCL),
 * LW_ERR_INVALID when parent is itself a device communicator. [out] owned. */
lw_status lw_comm_device_new_kind(lw_comm *parent, lw_device *device, lw_device_comm kind,
                                  lw_comm **out);
/* lw_comm_device_new_kind with LW_DEVICE_COMM_AUTO. */
lw_status lw_comm_device_new(lw_comm *parent, lw_device *device, lw_comm **out);
/* Ranks with equal color form a new communicator, ordered by key (collective). [out] owned. */
lw_status lw_comm_split(lw_comm *comm, int32_t color, int32_t key, lw_comm **out);
lw_status lw_comm_barrier(lw_comm *comm);
lw_status lw_comm_broadcast(lw_comm *comm, void *data, int64_t bytes, int32_t root);
/* The sums in bf16 (lw_comm_allreduce's with LW_REDUCE_SUM, lw_comm_allreduce_start,
 * lw_comm_reduce_scatter, lw_comm_reduce_scatterv with LW_DTYPE_BF16): bf16 on the wire, half
 * the bytes of f32, and rounded to bf16 (to nearest, ties to even) where a partial sum is
 * passed on, since it travels as bf16:
 *   self (one rank; any backend at one rank): the bucket itself, no rounding.
 *   MPI, reduce-scatter(-v): lwopt's ring; each step widens the running sum that arrived and
 *     this rank's own part to f32, adds them and rounds the sum to bf16, which is the correctly
 *     rounded bf16 sum of the two (their f32 sum is exact, or the smaller is so far below half a
 *     bf16 unit of the larger that f32's rounding cannot change bf16's). Rank k's shard is
 *     bf16(...bf16(bf16(x[k+1] + x[k+2]) + x[k+3]) ... + x[k]) (indices mod p) over the ranks:
 *     p - 1 roundings, one (the correctly rounded sum) at 2 ranks, in a fixed order, so results
 *     repeat run to run.
 *   MPI, all-reduce: MPI's own algorithm with an operation of lwopt's on pairs of bf16 that
 *     rounds as a ring step does, once per addition (p - 1 roundings on any rank's result;
 *     MPI chooses the order).
 *   staged (device memory through host memory): copied to the host as bf16 and summed by the
 *     parent (MPI above).
 *   NCCL (ncclBfloat16): NCCL's algorithms, which pass bf16 partial sums between GPUs, each
 *     rounded where it is formed: at most p - 1 roundings, in NCCL's order.
 * So at p ranks an element's result s differs from the exact sum S of the contributions x_r by
 * |s - S| <= g * sum_r |x_r|, g = (p - 1) u / (1 - (p - 1) u), u = 2^-8 (bf16's unit
 * roundoff); at 2 ranks s is S rounded to bf16. Widening every contribution to f32 and
 * rounding once at the end would give |s - S| <= u |S| plus f32's own error, but f32 on the
 * wire doubles the bytes that bf16 was chosen to halve: the backends round per step instead.
 * A bucket that needs better keeps its gradients in f32. */
/* In place over count elements of dtype F32, F64 or I64, or BF16 for LW_REDUCE_SUM (see the
 * sums in bf16 above). */
lw_status lw_comm_allreduce(lw_comm *comm, void *data, int64_t count, lw_dtype dtype,
                            lw_reduce_op op);
/* Nonblocking in-place sum of count elements of dtype F32 or BF16 over the ranks, on req
 * (finish with lw_request_wait). */
lw_status lw_comm_allreduce_start(lw_comm *comm, void *data, int64_t count, lw_dtype dtype,
                                  lw_request *req);
/* Sum over ranks of bucket[0..count) (dtype F32 or BF16), count divisible by the size;
 * afterwards this rank's shard bucket[rank * count/size, +count/size) holds the sum (the rest is
 * left as it was). With req, it starts and returns (finish with lw_request_wait); with req NULL
 * it blocks. The sums (this one, lw_comm_reduce_scatterv, lw_comm_allreduce_start) refuse any
 * other dtype with LW_ERR_INVALID naming the collective and the dtype, before anything starts
 * (alike on every rank). */
lw_status lw_comm_reduce_scatter(lw_comm *comm, void *bucket, int64_t count, lw_dtype dtype,
                                 lw_request *req);
/* In place: every rank's shard of bucket[0..count) (count divisible by the size) to all ranks.
 * dtype F32, BF16 or F16. With req it starts and returns; with NULL it blocks. */
lw_status lw_comm_allgather(lw_comm *comm, void *bucket, int64_t count, lw_dtype dtype,
                            lw_request *req);
/* The variable-count forms, for layouts without padding: the bucket is rank 0's segment, then
 * rank 1's, ...: segment r is bucket[displ[r], displ[r] + counts[r]), displ[r] the sum of
 * counts[0..r), total the sum of all counts[0..size) (the bucket's count). counts: one per rank,
 * each >= 0 (0: that rank has no segment), the same on every rank; [borrowed] for the call only
 * (copied where the collective needs them later). LW_ERR_INVALID for NULL counts, a negative
 * count, counts adding up past 2^60 - 1 elements, or a NULL bucket with total > 0;
 * LW_ERR_UNSUPPORTED for a total past the backend's limit (MPI: 2^31 - 1 elements, its counts
 * are int). Nonblocking with req, blocking with req NULL, as the equal-count forms; requests,
 * counters (see lw_comm_counter), labels and the watchdog alike. A total of 0 moves nothing on
 * any backend. */
/* Sum over ranks of bucket[0..total) (dtype F32 or BF16); afterwards this rank's segment
 * bucket[displ[rank], +counts[rank]) holds the sum, and the rest of the bucket is left as it
 * was. */
lw_status lw_comm_reduce_scatterv(lw_comm *comm, void *bucket, const int64_t *counts,
                                  lw_dtype dtype, lw_request *req);
/* In place: every rank's segment of bucket[0..total) (dtype F32, BF16 or F16) to all ranks;
 * this rank's own segment is what it sends, and is left as it was. */
lw_status lw_comm_allgather_segments(lw_comm *comm, void *bucket, const int64_t *counts,
                                     lw_dtype dtype, lw_request *req);
/* All-to-all with variable counts (mixture-of-experts dispatch and combine): this rank sends
 * send[sdispl[j], +send_counts[j]) to each rank j and receives from each rank j into
 * recv[rdispl[j], +recv_counts[j]), sdispl and rdispl the prefix sums of the counts, in elements
 * of dtype: F32, BF16 or F16 (activations, moved as bits) or I64 (routing metadata: expert ids,
 * positions, counts). Its own part (j = rank) is copied too; the rest of recv is left as it was.
 * send_counts and recv_counts: one per rank, each >= 0, [borrowed] for the call only (copied
 * where the collective needs them later). send and recv must not overlap: no in-place form.
 * The counts must agree across ranks: recv_counts[j] here equals send_counts[rank] on rank j.
 * Only the own part is checked (send_counts[rank] == recv_counts[rank]); a mismatch between
 * ranks is the caller's error: MPI sees it only when a peer sends more than the receiver
 * expects (truncation, which OpenMPI 4.1 makes fatal to the job; less leaves the rest of the
 * part as it was), NCCL not at all (a hang or wrong data). A caller that knows only its
 * send counts learns its receive counts first with this same call, one I64 count per peer:
 * lw_comm_alltoallv(comm, send_counts, ones, recv_counts, ones, LW_DTYPE_I64, NULL), ones[j] = 1
 * for every rank j; then the payload with both. Every rank calls it, even with nothing to send
 * or receive. Refused before anything starts, naming the collective and the value:
 * LW_ERR_INVALID for a bad dtype, NULL counts, a negative count, counts adding up past 2^60 - 1
 * elements, a NULL send or recv with a total above 0, overlapping buffers, an own part that
 * differs between the send and receive counts; LW_ERR_UNSUPPORTED for a send or receive total
 * past the backend's limit (MPI: 2^31 - 1 elements, its counts and displacements are int).
 * Unlike the other collectives' counts these differ between ranks, so a rank that refuses its
 * call may be the only one: its peers then wait for it until the watchdog ends them.
 * Nonblocking with req, blocking with req NULL; requests, counters (LW_COMM_ALLTOALL), labels
 * and the watchdog as the other collectives. On a device communicator: device memory only. */
lw_status lw_comm_alltoallv(lw_comm *comm, const void *send, const int64_t *send_counts,
                            void *recv, const int64_t *recv_counts, lw_dtype dtype,
                            lw_request *req);
/* Variable-size all-gather: rank r contributes counts[r] elements of dtype (F32, BF16 or F16,
 * moved as bits); recv holds them in rank order. send_count must equal counts[rank]. Blocking. */
lw_status lw_comm_allgatherv(lw_comm *comm, const void *send, int64_t send_count, void *recv,
                             const int64_t *counts, lw_dtype dtype);
/* Ends every rank of the job (MPI_Abort); returns only on the self backend. */
lw_status lw_comm_abort(lw_comm *comm, int32_t code);
lw_status lw_comm_counter_get(const lw_comm *comm, lw_comm_op op, lw_comm_counter *out);
void lw_comm_counters_reset(lw_comm *comm);
/* "all-reduce", "reduce-scatter", "all-gather", "all-gather-v", "broadcast", "barrier",
 * "all-to-all"; "unknown" otherwise. [borrowed] static string. */
const char *lw_comm_op_name(lw_comm_op op);

/* Seconds a collective on comm may be in flight before the watchdog ends it; 0 turns the
 * watchdog off (MPI's own blocking collectives and waits, no polling). LW_ERR_INVALID for a
 * negative, NaN or infinite value. New communicators take the environment variable
 * LWOPT_TIMEOUT (a bad value fails lw_comm_init), else 600; splits take their parent's. */
lw_status lw_comm_set_timeout(lw_comm *comm, double seconds);
/* The timeout in seconds (0 = off; 0 for NULL). */
double lw_comm_timeout(const lw_comm *comm);
/* What the caller is doing ("step 12", "checkpoint.save"), named by a timeout's message for
 * collectives started from now on. Copied, at most 63 bytes kept; NULL or "" clears. */
lw_status lw_comm_set_phase(lw_comm *comm, const char *phase);
/* What the next collective started on comm is for, as it reads after "the all-reduce of" ("the
 * global gradient norm"); that collective only. Copied, at most 63 bytes; NULL clears. */
lw_status lw_comm_set_label(lw_comm *comm, const char *label);

/* A reusable handle for one nonblocking collective at a time; it keeps the scratch that
 * reduce-scatter needs on a backend that cannot reduce in place (MPI forbids overlapping send
 * and receive buffers). [out] owned. */
lw_status lw_request_new(lw_request **out);
/* Waits for an active request, then frees. */
void lw_request_free(lw_request *req);
/* Progresses the request; *done is true once it completed (or was never started).
 * LW_ERR_TIMEOUT once it has been in flight longer than its communicator's timeout. */
lw_status lw_request_test(lw_request *req, bool *done);
/* Blocks until the request completed; a no-op when it is not active. LW_ERR_TIMEOUT once it has
 * been in flight longer than its communicator's timeout. After an error the request is no
 * longer active. */
lw_status lw_request_wait(lw_request *req);
bool lw_request_active(const lw_request *req);
/* The stream the collectives started on req are ordered after (see lw_comm_set_stream); NULL:
 * the communicator's. LW_ERR_STATE while a collective is in flight on req. */
lw_status lw_request_set_stream(lw_request *req, lw_stream *stream);
/* What every collective started on req is for ("buffer 1 bucket 2"), named by a timeout's
 * message unless lw_comm_set_label named that collective. Copied, at most 63 bytes; NULL
 * clears. */
lw_status lw_request_set_label(lw_request *req, const char *label);

/* ---- vector kernels ------------------------------------------------------------------------ *
 * On the stream's device (NULL: the CPU); vectors in that device's memory. */

/* acc[0] += sum of squares of x (in double), acc[1] += number of elements exactly zero: the
 * gradient norm and zero count. acc: two doubles in the device's memory. */
lw_status lw_vec_norm_stats(lw_stream *stream, const float *x, int64_t n, double *acc);
/* [out] *finite (host): whether every element is finite. Waits for the stream. */
lw_status lw_vec_all_finite(lw_stream *stream, const float *x, int64_t n, bool *finite);
/* x *= alpha */
lw_status lw_vec_scale(lw_stream *stream, float *x, int64_t n, float alpha);
/* y = a + b (y may be a or b) */
lw_status lw_vec_add(lw_stream *stream, float *y, const float *a, const float *b, int64_t n);
/* y += alpha * x */
lw_status lw_vec_axpy(lw_stream *stream, float *y, float alpha, const float *x, int64_t n);

/* bf16 (bfloat16: fp32's sign, 8 exponent bits and top 7 mantissa bits) is stored as its 16 bits,
 * uint16_t: the raw bits of one value, nothing else, in the host's byte order. The two
 * conversions serve bf16 parameters with fp32 master weights: the optimizer updates the fp32
 * copy and writes it back rounded, and the buffers widen a bf16 parameter into an fp32 view for
 * the kernels that read fp32 (norms, biases). y and x are n elements each, in the stream's
 * device memory, and must not overlap; n <= 0 does nothing. Every device gives the same bits. */
/* y[i] = x[i] rounded to bf16, to nearest, ties to even (IEEE 754 roundTiesToEven): subnormals
 * rounded as any other value (bf16 has fp32's exponent range: no flush to zero), signed zeros
 * and infinities kept. A finite magnitude of 3.3961775e38 (0x7F7F8000) or more, the midpoint
 * between the largest finite bf16 (3.3895314e38, 0x7F7F) and 2^128, rounds to an infinity of its
 * sign, as IEEE overflow does (the midpoint itself is a tie, and inf the even side). A NaN stays
 * a NaN, never an infinity: y keeps its sign and the top 7 bits of its mantissa, the first of
 * them (the quiet bit, 0x0040) set: 0x7FC00000 gives 0x7FC0, 0x7F800001 (signalling) 0x7FC0,
 * 0xFFFFFFFF 0xFFFF. */
lw_status lw_vec_to_bf16(lw_stream *stream, uint16_t *y, const float *x, int64_t n);
/* y[i] = the bf16 x[i] as fp32, exactly: its bits shifted into fp32's top half (a NaN keeps its
 * sign and payload, signalling or quiet). */
lw_status lw_vec_from_bf16(lw_stream *stream, float *y, const uint16_t *x, int64_t n);

/* ---- Muon ---------------------------------------------------------------------------------- */

typedef enum lw_ns_coeffs {
    LW_NS_SIMPLE = 0,        /* (3.4445, -4.7750, 2.0315), cycled */
    LW_NS_QUINTIC = 1,       /* five triples, cycled */
    LW_NS_POLAR_EXPRESS = 2, /* eight triples, the last repeated */
    LW_NS_CUBIC5 = 3,        /* five (a, b) pairs, exactly 5 steps */
    LW_NS_CUSTOM = 4,        /* options.custom */
    LW_NS_IDENTITY = 5       /* no orthogonalisation, X = U: for tests and ablations */
} lw_ns_coeffs;

/* Newton-Schulz's arithmetic on a GPU: bf16 inputs with fp32 accumulation on tensor cores (the
 * default, as Muon is run in practice), TF32 tensor cores, or exact fp32. The CPU computes in
 * fp32 whichever is asked. */
typedef enum lw_ns_precision {
    LW_NS_BF16 = 0,
    LW_NS_TF32 = 1,
    LW_NS_FP32 = 2
} lw_ns_precision;

typedef enum lw_weight_decay {
    LW_WD_DECOUPLED = 0,   /* W -= lr * wd * W */
    LW_WD_INDEPENDENT = 1, /* W -= wd * W */
    LW_WD_L2 = 2           /* G += wd * W */
} lw_weight_decay;

typedef enum lw_muon_scale {
    LW_MUON_SCALE_SPECTRAL = 0,      /* sqrt(max(rows, cols)) */
    LW_MUON_SCALE_UNIT_RMS_NORM = 1, /* sqrt(rows / cols) */
    LW_MUON_SCALE_SHAPE_SCALING = 2, /* sqrt(max(1, rows / cols)) */
    LW_MUON_SCALE_MOONLIGHT = 3      /* 0.2 * sqrt(max(rows, cols)) */
} lw_muon_scale;

/* The names of the three enums above (see lw_dtype_name). Coefficient sets: "simple",
 * "quintic", "polar_express", "cubic5", "custom", "identity"; weight decay modes: "decoupled",
 * "independent", "l2"; scales: "spectral", "unit_rms_norm", "shape_scaling", "moonlight". */
const char *lw_ns_coeffs_name(lw_ns_coeffs coeffs);
lw_status lw_ns_coeffs_from_name(const char *name, lw_ns_coeffs *out);
const char *lw_weight_decay_name(lw_weight_decay mode);
lw_status lw_weight_decay_from_name(const char *name, lw_weight_decay *out);
const char *lw_muon_scale_name(lw_muon_scale scale);
lw_status lw_muon_scale_from_name(const char *name, lw_muon_scale *out);
/* "bf16", "tf32", "fp32". */
const char *lw_ns_precision_name(lw_ns_precision precision);
lw_status lw_ns_precision_from_name(const char *name, lw_ns_precision *out);

/* Muon on a TP-sharded matrix (docs/algorithms.md section 9; lw_param_spec.tp_blocks), with the
 * optimizer's TP communicator of size t > 1. The step's scale always comes from the full
 * matrix shape.
 * DUPLICATED: all-gather the update over TP, Newton-Schulz on the whole matrix on every TP
 *   rank, keep this rank's slice: the same update as TP = 1 (up to rounding).
 * DISTRIBUTED: Newton-Schulz with the sharded dimension as the contraction dimension of the
 *   Gram matrix X X^T: one all-reduce of the squared norm, then one of the Gram matrix (the
 *   full matrix's other dimension squared) per step; each rank updates its own slice. Equal to
 *   duplicated up to rounding; its GEMMs run in fp32 on every device.
 * BLOCKWISE: Newton-Schulz on each local shard alone, no communication: an update that depends
 *   on t, by design. */
typedef enum lw_muon_tp_mode {
    LW_MUON_TP_DUPLICATED = 0,
    LW_MUON_TP_DISTRIBUTED = 1,
    LW_MUON_TP_BLOCKWISE = 2
} lw_muon_tp_mode;

/* "duplicated", "distributed", "blockwise". */
const char *lw_muon_tp_mode_name(lw_muon_tp_mode mode);
lw_status lw_muon_tp_mode_from_name(const char *name, lw_muon_tp_mode *out);

typedef struct lw_muon_options {
    size_t size;          /* sizeof, set by lw_muon_defaults() (see the top) */
    float momentum;       /* beta in [0, 1) */
    bool nesterov;
    int32_t ns_steps;     /* >= 1 */
    lw_ns_coeffs coeffs;
    const float *custom;  /* [borrowed, copied] n_custom (a, b, c) triples for LW_NS_CUSTOM */
    int32_t n_custom;
    bool custom_repeat;   /* custom: keep the last triple (true) or cycle the list (false) */
    lw_weight_decay weight_decay_mode;
    lw_muon_scale scale;
    float extra_scale;
    float eps;            /* Frobenius normalisation floor */
    bool symmetric;       /* X X^T and A A through SYRK/SYMM (default); false: full GEMMs */
    lw_ns_precision precision; /* Newton-Schulz's arithmetic on a GPU (the CPU computes fp32) */
    /* Read by the optimizer (lw_optimizer_new), not by lw_muon's own calls: */
    lw_muon_tp_mode tp_mode; /* TP-sharded matrices, with a TP communicator of size > 1 */
    bool split_qkv;          /* a fused QKV weight (lw_param_spec.qkv_groups) is viewed as
                                (groups, q + k + v, cols) and orthogonalised as three matrices:
                                Q = every group's q rows ((groups * q) x cols, group order), K
                                and V alike, each with its own shape's scale (full shape under
                                TP), then put back; false: one matrix, as any other */
} lw_muon_options;

/* momentum 0.95, nesterov, 5 steps, quintic, decoupled wd, moonlight scale (AdamW learning
 * rates carry over), extra 1, eps 1e-7, symmetric, TP mode duplicated, split_qkv on (as
 * Megatron's command line). */
lw_muon_options lw_muon_defaults(void);

/* Muon's kernels with their workspace (device memory of the stream's device, grown on demand,
 * kept between calls; moved when a call comes on another device). Matrices are in the stream's
 * device memory (NULL stream: the CPU). */
typedef struct lw_muon lw_muon;
lw_status lw_muon_new(const lw_muon_options *opts, lw_muon **out);
void lw_muon_free(lw_muon *muon);
/* x = Newton-Schulz orthogonalisation of the rows x cols matrix u (row-major); x may be u. */
lw_status lw_muon_orthogonalize(lw_muon *muon, lw_stream *stream, const float *u, float *x,
                                int64_t rows, int64_t cols);
/* The element-wise part of a Muon update, on any n elements of a matrix (a row shard): weight
 * decay of w, momentum m from gradient grad_scale * g, and the update to orthogonalise in u. */
lw_status lw_muon_momentum(lw_muon *muon, lw_stream *stream, float *w, const float *g, float *m,
                           float *u, int64_t n, float lr, float weight_decay, float grad_scale);
/* w -= lr * scale * extra * x on n elements of a rows x cols matrix (scale from its shape). */
lw_status lw_muon_apply(lw_muon *muon, lw_stream *stream, float *w, const float *x, int64_t n,
                        int64_t rows, int64_t cols, float lr);
/* One Muon update of w (rows x cols) with gradient g (read as grad_scale * g), momentum m:
 * weight decay, momentum, Newton-Schulz, w -= lr * scale * extra * X. g is not modified. */
lw_status lw_muon_update(lw_muon *muon, lw_stream *stream, float *w, const float *g, float *m,
                         int64_t rows, int64_t cols, float lr, float weight_decay,
                         float grad_scale);

/* ---- AdamW --------------------------------------------------------------------------------- */

typedef struct lw_adamw_options {
    size_t size; /* sizeof, set by lw_adamw_defaults() (see the top) */
    float beta1;
    float beta2;
    float eps;
} lw_adamw_options;

/* beta1 0.9, beta2 0.95, eps 1e-8. */
lw_adamw_options lw_adamw_defaults(void);
/* One AdamW update of n elements at step t >= 1 (bias correction), gradient grad_scale * g, on
 * the stream's device. */
lw_status lw_adamw_update(lw_stream *stream, const lw_adamw_options *opts, float *w,
                          const float *g, float *m, float *v, int64_t n, int64_t t, float lr,
                          float weight_decay, float grad_scale);

/* ---- buffers ------------------------------------------------------------------------------- *
 * The flat parameter and gradient arrays of a layout (memory of the options' device, 64-byte
 * aligned, padding zero), a view per parameter, and gradient / parameter synchronisation per
 * bucket. Buckets are synchronised in a fixed order that every rank shares: gradients in
 * backprop order (a bucket starts once it and every bucket before it have all their gradients),
 * parameters in forward order. Sharded buffers (shard-aligned, distopt, rows) reduce-scatter
 * gradients and all-gather parameters; default buffers all-reduce gradients; legacy buffers
 * all-reduce gradients and gather updated parameters with a variable-size all-gather.
 *
 * ZeRO levels (sharded buffers only). 1: every rank holds whole parameter and gradient arrays;
 * the optimizer state is sharded. 2: gradients are held whole only per bucket group while
 * backward writes them and the reduce-scatter runs; afterwards only this rank's shard is kept.
 * 3: parameters too: each rank keeps its shard of every bucket; lw_buffers_acquire gathers a
 * group's parameters when a module needs them. Group-sized blocks come from a pool that every
 * rank manages identically, within a budget of the two largest groups' parameters, gradients
 * and reduce-scatter shards; ranks must therefore call acquire / release / grad_ready in the
 * same order (same model, same passes). */

typedef struct lw_buffers lw_buffers;

typedef struct lw_buffers_options {
    size_t size;        /* sizeof, set by lw_buffers_defaults() (see the top) */
    bool overlap_grad;  /* start a bucket's gradient sync as soon as it is ready */
    bool overlap_param; /* defer parameter all-gathers to lw_buffers_finish_param_sync; ZeRO-3:
                           prefetch the next group's parameters */
    int32_t zero;       /* 1, 2 or 3 (see above) */
    lw_device *device;  /* where the arrays live and the syncs' arithmetic runs; NULL = CPU */
} lw_buffers_options;

/* Both overlaps on, ZeRO-1, on the CPU. */
lw_buffers_options lw_buffers_defaults(void);
/* layout and comm (and expert_comm, for expert buffers; NULL = comm) are [borrowed] and must
 * outlive the buffers; their sizes must equal the layout's dp and expert_dp. [out] owned. */
lw_status lw_buffers_new(const lw_layout *layout, lw_comm *comm, lw_comm *expert_comm,
                         const lw_buffers_options *opts, lw_buffers **out);
void lw_buffers_free(lw_buffers *buffers);
const lw_layout *lw_buffers_layout(const lw_buffers *buffers);
lw_comm *lw_buffers_comm(const lw_buffers *buffers);
/* The device the arrays live on. [borrowed] */
lw_device *lw_buffers_device(const lw_buffers *buffers);
/* The communicator that shards buffer `buffer` (the expert one for expert buffers); NULL when out
 * of range. [borrowed] */
lw_comm *lw_buffers_buffer_comm(const lw_buffers *buffers, int32_t buffer);
int32_t lw_buffers_zero(const lw_buffers *buffers);
/* The dtype the parameter arrays hold (the layout's params', all alike): F32, or BF16 (with the
 * optimizer's fp32 master copy of what this rank owns). */
lw_dtype lw_buffers_param_dtype(const lw_buffers *buffers);
/* The dtype the gradient sums move (the layout's grad dtype, all alike): F32, or BF16: each
 * group's averaged fp32 gradient rounded to bf16 once, summed in bf16 over the ranks (rounded at
 * each step of the sum, see lw_comm_reduce_scatter), the result widened and accumulated in fp32.
 * The arrays the model writes and the optimizer reads stay fp32 either way: micro-steps and
 * ZeRO-2/3's partial reductions accumulate in fp32, where bf16 would drop a gradient smaller
 * than 2^-9 of the sum it is added to. */
lw_dtype lw_buffers_grad_dtype(const lw_buffers *buffers);
/* Views of a whole parameter / gradient, fp32, as the model reads and writes them. [out] *data
 * borrowed, numel elements. ZeRO-3 parameters, bf16 parameters (the view is an fp32 block
 * widened from them) and ZeRO-2/3 gradients are only there while their group is held
 * (acquired, or not yet reused); otherwise LW_ERR_STATE. */
lw_status lw_buffers_param(lw_buffers *buffers, int32_t param, float **data);
lw_status lw_buffers_grad(lw_buffers *buffers, int32_t param, float **data);
/* A whole parameter as the buffers store it, for the model kernels that take a weight's dtype:
 * [out] *data borrowed, numel elements of [out] *dtype (lw_buffers_param_dtype). fp32: the view
 * of lw_buffers_param. bf16: the array itself below ZeRO-3, the gathered bf16 group at ZeRO-3;
 * reading it this way never widens it, which is all the fp32 view costs: bf16 views are widened
 * per parameter when lw_buffers_param first asks for one after the group was acquired. Readable
 * while its group is held, as lw_buffers_param's view (else LW_ERR_STATE). */
lw_status lw_buffers_param_stored(lw_buffers *buffers, int32_t param, const void **data,
                                  lw_dtype *dtype);
/* Whole arrays of one buffer (numel of lw_buffer_info; parameters in the param dtype);
 * LW_ERR_STATE where only shards are kept (params at ZeRO-3, gradients at ZeRO-2/3). */
lw_status lw_buffers_param_array(lw_buffers *buffers, int32_t buffer, void **data);
lw_status lw_buffers_grad_array(lw_buffers *buffers, int32_t buffer, float **data);
/* Zeroes every gradient (after any sync in flight). */
lw_status lw_buffers_zero_grad(lw_buffers *buffers);
/* The gradient of param is complete for this step (ZeRO-2/3: for this micro-step); may start
 * bucket syncs. */
lw_status lw_buffers_grad_ready(lw_buffers *buffers, int32_t param);
/* ZeRO-2/3, after each micro-step's backward: starts the gradient syncs not started yet, so
 * the next micro-step begins with no gradient held whole. A no-op at ZeRO-1. */
lw_status lw_buffers_end_backward(lw_buffers *buffers);
/* Starts the syncs not started yet, then waits for all: afterwards each rank holds the
 * averaged gradient of everything it updates. */
lw_status lw_buffers_finish_grad_sync(lw_buffers *buffers);
/* After the optimizer wrote its updates: starts the parameter syncs (the first group's with
 * overlap_param, every one and waits without). ZeRO-3: drops every gathered group (they are
 * stale) and, with overlap_param, starts gathering group 0. */
lw_status lw_buffers_start_param_sync(lw_buffers *buffers);
/* Waits for the parameters of group (and every group before it in forward order) and starts
 * the next group's gather; group -1 waits for all. ZeRO-3: waits for gathers in flight. */
lw_status lw_buffers_finish_param_sync(lw_buffers *buffers, int32_t group);
/* Parameter groups: one per bucket; numbered in forward order (group 0 is used first). */
int32_t lw_buffers_num_groups(const lw_buffers *buffers);
lw_status lw_buffers_param_group(const lw_buffers *buffers, int32_t param, int32_t *group);

typedef enum lw_pass {
    LW_PASS_FORWARD = 0,
    LW_PASS_BACKWARD = 1
} lw_pass;

/* A module is about to read param (and, in backward, accumulate into its gradient): makes the
 * param's group readable (ZeRO-1/2: waits for its parameter sync; ZeRO-3: gathers it unless
 * held) and, in backward at ZeRO-2/3, gives the group whole-gradient storage (zeroed). The
 * group stays held until the matching lw_buffers_release. Prefetches the next group of the pass
 * (ZeRO-3, with overlap_param) unless reuse is set: reuse marks a use out of the pass's order
 * (a tied weight read again), which neither advances the pass nor frees groups behind it. */
lw_status lw_buffers_acquire(lw_buffers *buffers, int32_t param, lw_pass pass, bool reuse);
lw_status lw_buffers_release(lw_buffers *buffers, int32_t param);
/* After writing into the acquired views of group's params (initialisation, loading a
 * checkpoint): ZeRO-3 copies this rank's shard of them back into its parameter shard (every rank
 * must have written the same values); bf16 parameters are rounded back into the array (nearest
 * even). A no-op for fp32 parameters below ZeRO-3, where the views are the storage. The
 * optimizer widens its master copies from them before its next step (lw_buffers_commits). */
lw_status lw_buffers_commit(lw_buffers *buffers, int32_t group);
/* How many commits there have been: the optimizer widens its master copies again when this
 * changed since it last set them. */
int64_t lw_buffers_commits(const lw_buffers *buffers);
/* Drives progress of nonblocking syncs in flight. */
lw_status lw_buffers_progress(lw_buffers *buffers);
/* The elements of param this rank updates: [start, start + count) of the param (count 0 when
 * none): the whole param for its owner, a slice in element-wise buffers, all of it in default
 * buffers. */
lw_status lw_buffers_owned(const lw_buffers *buffers, int32_t param, int64_t *start,
                           int64_t *count);
/* Where those elements are held (params: after the parameter sync, in the param dtype;
 * gradients: after the gradient sync), at every ZeRO level; NULL when count is 0. [out]
 * borrowed. */
lw_status lw_buffers_owned_param(lw_buffers *buffers, int32_t param, void **data);
lw_status lw_buffers_owned_grad(lw_buffers *buffers, int32_t param, float **data);

/* Bytes held on this rank for parameters and gradients. */
typedef struct lw_buffers_memory {
    int64_t params;      /* parameter arrays (whole, or this rank's shards) + gathered groups */
    int64_t grads;       /* gradient arrays (whole, or shards) + whole-gradient groups in use */
    int64_t arrays;      /* of which the parameter and gradient arrays (whole or shards) */
    int64_t cached;      /* group blocks kept for reuse */
    int64_t peak;        /* the most params + grads + cached held at once */
    int64_t budget;      /* ZeRO-2/3: bytes allowed for group blocks; 0 at ZeRO-1 */
    int64_t block_bytes; /* bytes of one block of the largest group (with its reduce shard) */
    int64_t over_budget; /* blocks taken beyond the budget because every block was in use */
    int64_t gathers;     /* ZeRO-3 parameter all-gathers of a group */
    int64_t flushes;     /* ZeRO-2/3 partial gradient reductions forced by the budget */
} lw_buffers_memory;

lw_status lw_buffers_memory_get(const lw_buffers *buffers, lw_buffers_memory *out);

/* ---- optimizer ----------------------------------------------------------------------------- *
 * One step over buffers: finish the gradient sync, global gradient norm (one all-reduce over
 * the world), skip on a non-finite norm, clip, Muon on the owned matrices and AdamW on the owned
 * elements, then start the parameter sync. Only owners keep optimizer state. The mode
 * (layer-wise, legacy, replicated) follows from the layout's algorithms. */

typedef struct lw_optimizer lw_optimizer;

typedef struct lw_optimizer_options {
    size_t size;            /* sizeof, set by lw_optimizer_defaults() (see the top) */
    lw_muon_options muon;   /* size set too: the one this lw_optimizer_options holds */
    lw_adamw_options adamw; /* likewise */
    float clip; /* max gradient norm; <= 0: no clipping */
    /* [borrowed, must outlive the optimizer] the tensor-parallel group of this rank (its t
     * ranks hold the shards of the same full tensors, and their buffers were made from equal
     * layouts), or NULL: no TP. With t > 1 Muon runs muon.tp_mode on TP-sharded matrices
     * (lw_param_spec.tp_blocks), the gradient norm adds each TP shard once and each
     * TP-replicated tensor once (TP rank 0's), and lw_optimizer_new compares the layouts over
     * it (collective over it). Its collectives must move the buffers' device memory
     * (lw_comm_reaches; on a GPU a device communicator, lw_comm_device_new), except under
     * blockwise. NULL or t = 1: the optimizer of a run without TP, bit for bit (split_qkv,
     * which needs no TP, still splits the fused QKV weights). */
    lw_comm *tp_comm;
} lw_optimizer_options;

/* Muon's and AdamW's defaults (lw_muon_defaults, lw_adamw_defaults), no clipping, no TP. */
lw_optimizer_options lw_optimizer_defaults(void);

typedef struct lw_step_result {
    double grad_norm; /* before clipping */
    int64_t zeros;    /* gradient elements exactly zero */
    bool skipped;     /* non-finite norm: nothing was updated */
    int64_t skips;    /* skipped steps so far */
    int64_t step;     /* updates applied so far */
    double seconds_grad_sync;  /* waiting for gradient syncs */
    double seconds_norm;       /* norm, zeros and their all-reduce */
    double seconds_muon;       /* Muon updates of the owned matrices */
    double seconds_adamw;      /* AdamW updates of the owned elements */
    double seconds_param_sync; /* starting (or, without overlap, doing) the parameter sync */
    double seconds_muon_comm;  /* of seconds_muon: row-sharded Muon's all-gathers of updates
                                  and the TP modes' collectives */
} lw_step_result;

/* buffers [borrowed] must outlive the optimizer. [out] owned. */
lw_status lw_optimizer_new(lw_buffers *buffers, const lw_optimizer_options *opts,
                           lw_optimizer **out);
void lw_optimizer_free(lw_optimizer *opt);
/* Hyper-parameter groups: every param starts in group 0; groups are numbered from 0 and
 * created by naming them. */
lw_status lw_optimizer_set_group(lw_optimizer *opt, int32_t param, int32_t group);
/* Learning rate and weight decay of a group, for the next steps (schedules call it each step).
 * lr >= 0. */
lw_status lw_optimizer_set_hparams(lw_optimizer *opt, int32_t group, float lr,
                                   float weight_decay);
lw_status lw_optimizer_step(lw_optimizer *opt, lw_step_result *out);

/* The optimizer state this rank holds, for checkpoints: one entry per parameter it updates.
 * Muon: the momentum of the whole matrix (count = numel, v NULL). AdamW: m and v of elements
 * [start, start + count) of the parameter. With bf16 parameters each entry has the fp32 master
 * copy of those elements too. The arrays are [borrowed] and writable, so a checkpoint loads
 * state by writing into them. */
typedef struct lw_state_entry {
    int32_t param;
    bool muon;
    int64_t start;
    int64_t count;
    float *m;      /* Muon momentum, or AdamW first moment */
    float *v;      /* AdamW second moment; NULL for Muon */
    float *master; /* fp32 master weights (bf16 parameters); NULL for fp32 parameters */
} lw_state_entry;

int32_t lw_optimizer_state_count(const lw_optimizer *opt);
/* bf16 parameters: sets every fp32 master copy from the owned bf16 parameters (widened exactly).
 * lw_optimizer_new does it, and a step does it first when parameters were committed since
 * (lw_buffers_commits: initialisation, a broadcast, a checkpoint's parameters). A no-op for fp32
 * parameters. */
lw_status lw_optimizer_reload_master(lw_optimizer *opt);
/* bf16 parameters: the master copies were written through lw_optimizer_state (a checkpoint's
 * exact fp32 weights) after the parameters were: keep them, rather than widen the parameters
 * committed before now into them at the next step. */
lw_status lw_optimizer_keep_master(lw_optimizer *opt);
lw_status lw_optimizer_state(const lw_optimizer *opt, int32_t k, lw_state_entry *out);
/* Updates applied and steps skipped so far (AdamW's bias correction uses the updates). */
lw_status lw_optimizer_counters(const lw_optimizer *opt, int64_t *step, int64_t *skips);
lw_status lw_optimizer_set_counters(lw_optimizer *opt, int64_t step, int64_t skips);

/* ---- model kernels (row-major; fp32 where no dtype is given) ---------------------------------- *
 * Forward and backward of the GPT building blocks, on raw pointers into the memory of the
 * stream's device (NULL stream: the CPU, whose kernels are the reference). Shapes: n rows (n =
 * batch * time), c channels. Every backward ACCUMULATES (+=) into its outputs (parameter
 * gradients sum over micro-steps and tied uses, activation gradients over residual branches),
 * so callers zero them first. A NULL optional output is skipped.
 * The weight matrices a kernel reads (a linear layer's w, the embedding tables, the LM head's w)
 * come with their dtype, w_dtype: LW_DTYPE_F32 or LW_DTYPE_BF16, so that bf16 parameters are
 * read as the buffers store them (lw_buffers_param_stored) rather than through an fp32 copy.
 * bf16 widens to fp32 exactly, so a bf16 weight gives the results its fp32 widening gives, bit
 * for bit; bf16 matrix products read it as it is (no rounding step), fp32 ones widen it into
 * the stream's workspace first (the CPU: into memory it allocates for the call). A kernel with
 * two tables (the embedding's wte and wpe) takes one w_dtype for both.
 * The activations that only feed matrix products, the attention or GELU come in either dtype
 * too: a linear layer's input x (x_dtype) and output y (y_dtype), GELU's input, the attention's
 * qkv, and the layer norm's, GELU's and the attention's outputs (y_dtype, out_dtype). A bf16
 * output is computed in fp32 and rounded to nearest even (the bits lw_vec_to_bf16 gives); a bf16
 * input is read as its exact fp32 widening. bf16 ones halve their memory and spare the bf16 GEMMs
 * a rounding pass; read by fp32 products they are widened like weights. The gradients of the
 * bf16 outputs that feed the attention and GELU may be bf16 too (the attention's dqkv, GELU's
 * dx, which the linear layer's backward reads as dy): accumulated in fp32 and rounded.
 * Everything else (the residual stream, gradients, statistics) is fp32. */

/* y[n, out] = x[n, in] w[out, in]^T + b[out] (b optional); x of x_dtype, y of y_dtype (bf16:
 * the fp32 result, bias included, rounded; on a GPU under bf16 products the bias is rounded to
 * bf16 too before it is added, as the operands are). */
lw_status lw_linear_forward(lw_stream *stream, void *y, lw_dtype y_dtype, const void *x,
                            lw_dtype x_dtype, const void *w, lw_dtype w_dtype, const float *b,
                            int64_t n, int64_t in, int64_t out);
/* dx[n, in] += dy w; dw[out, in] += dy^T x; db[out] += column sums of dy (dx, db optional); dy
 * of dy_dtype. */
lw_status lw_linear_backward(lw_stream *stream, float *dx, float *dw, float *db, const void *dy,
                             lw_dtype dy_dtype, const void *x, lw_dtype x_dtype, const void *w,
                             lw_dtype w_dtype, int64_t n, int64_t in, int64_t out);

/* A linear layer and the GELU after it in one call (an MLP's first half): pre[n, out] = x w^T + b
 * and y = GELU of pre (tanh form), both of dtype: the results of lw_linear_forward into pre then
 * lw_gelu_forward of pre, bit for bit (a bf16 pre is rounded first and GELU takes its rounding),
 * except on a GPU under bf16 products, where cuBLASLt's GELU epilogue writes both from the fp32
 * sums in one pass (its GELU of the unrounded pre: within bf16's rounding of the two calls'). */
lw_status lw_linear_gelu_forward(lw_stream *stream, void *y, void *pre, lw_dtype dtype,
                                 const void *x, lw_dtype x_dtype, const void *w, lw_dtype w_dtype,
                                 const float *b, int64_t n, int64_t in, int64_t out);

/* The backward of a linear layer whose input is GELU's output, x = GELU(pre) (an MLP's second
 * half), with GELU's backward: dw[out, in] += dy^T x and db[out] += column sums of dy (db
 * optional) as lw_linear_backward, and dpre[n, in] = (dy w) GELU'(pre), pre and dpre of dtype,
 * WRITTEN, not accumulated (the one backward that overwrites: a GPU forms it in its GEMM's
 * epilogue). The results of lw_linear_backward into a zeroed dx, then lw_gelu_backward of it into
 * a zeroed dpre, bit for bit, except on a GPU under bf16 products with bf16 dpre (cuBLASLt's DGELU
 * epilogue on the fp32 product, with its own GELU': within bf16's rounding). */
lw_status lw_linear_gelu_backward(lw_stream *stream, void *dpre, lw_dtype dtype, float *dw,
                                  float *db, const void *dy, lw_dtype dy_dtype, const void *x,
                                  lw_dtype x_dtype, const void *w, lw_dtype w_dtype,
                                  const void *pre, int64_t n, int64_t in, int64_t out);

/* y[b, t, c] = wte[tokens[b, t], :] + wpe[t, :] (wpe optional). Tokens must be in [0, vocab). */
lw_status lw_embedding_forward(lw_stream *stream, float *y, const int32_t *tokens, const void *wte,
                               const void *wpe, lw_dtype w_dtype, int64_t b, int64_t t, int64_t c);
/* dwte[tokens[b, t], :] += dy[b, t, :]; dwpe[t, :] += dy[b, t, :] (dwpe optional). */
lw_status lw_embedding_backward(lw_stream *stream, float *dwte, float *dwpe, const float *dy,
                                const int32_t *tokens, int64_t b, int64_t t, int64_t c);

/* y = (x - mean) * rstd * g + beta per row (beta optional), y of y_dtype; saves mean[n],
 * rstd[n]. */
lw_status lw_layernorm_forward(lw_stream *stream, void *y, lw_dtype y_dtype, float *mean,
                               float *rstd, const float *x, const float *g, const float *beta,
                               int64_t n, int64_t c, float eps);
/* dx[n, c] += ...; dg[c] += ...; dbeta[c] += ... (dbeta optional). */
lw_status lw_layernorm_backward(lw_stream *stream, float *dx, float *dg, float *dbeta,
                                const float *dy, const float *x, const float *g, const float *mean,
                                const float *rstd, int64_t n, int64_t c);
/* The residual add fused with the layer norm after it, one pass instead of two: sum = a + b (the
 * residual stream, kept; it may be a or b), y = layer norm of sum as lw_layernorm_forward, mean
 * and rstd saved; the results of lw_vec_add then lw_layernorm_forward, bit for bit. */
lw_status lw_add_layernorm_forward(lw_stream *stream, float *sum, void *y, lw_dtype y_dtype,
                                   float *mean, float *rstd, const float *a, const float *b,
                                   const float *g, const float *beta, int64_t n, int64_t c,
                                   float eps);
/* The backward of a layer norm whose input x also flows on along the residual stream: dx +=
 * dres (the stream's gradient), then dx += the layer norm's input gradient from dy, with dg and
 * dbeta as lw_layernorm_backward; the results of lw_vec_add then lw_layernorm_backward, bit for
 * bit. */
lw_status lw_add_layernorm_backward(lw_stream *stream, float *dx, float *dg, float *dbeta,
                                    const float *dres, const float *dy, const float *x,
                                    const float *g, const float *mean, const float *rstd,
                                    int64_t n, int64_t c);

/* GELU, tanh form: y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), y of y_dtype, x of
 * x_dtype. */
lw_status lw_gelu_forward(lw_stream *stream, void *y, lw_dtype y_dtype, const void *x,
                          lw_dtype x_dtype, int64_t n);
/* dx += dy * gelu'(x), x of x_dtype, dx of dx_dtype (bf16: the fp32 sum rounded) */
lw_status lw_gelu_backward(lw_stream *stream, void *dx, lw_dtype dx_dtype, const float *dy,
                           const void *x, lw_dtype x_dtype, int64_t n);

/* Causal multi-head self-attention, memory-efficient: no t x t matrix per head is kept between
 * forward and backward (the backward recomputes the probabilities from q, k and the saved
 * log-sum-exp, as flash attention does). qkv[b, t, 3c] holds q, k, v (each [b, t, c], head h in
 * channels [h*c/nh, (h+1)*c/nh)); out[b, t, c]; lse[b, nh, t] saves each row's log-sum-exp of
 * the scaled scores. Scale 1/sqrt(c/nh); c must divide by nh. scratch: at least
 * lw_attention_scratch_floats(stream, b, t, c, nh) floats of the stream's device, the caller's
 * workspace for both passes (the CPU works a head at a time per thread, its keys and values
 * packed by head dim c/nh, in blocks of 64 query rows by the keys they see; a GPU needs no
 * square at all). */
int64_t lw_attention_scratch_floats(lw_stream *stream, int64_t b, int64_t t, int64_t c,
                                    int64_t nh);
/* qkv of qkv_dtype; out of out_dtype (fp32, or bf16: computed in fp32 and rounded); lse fp32. */
lw_status lw_attention_forward(lw_stream *stream, void *out, lw_dtype out_dtype, float *lse,
                               float *scratch, const void *qkv, lw_dtype qkv_dtype, int64_t b,
                               int64_t t, int64_t c, int64_t nh);
/* dqkv[b, t, 3c] += ..., from the forward's qkv (of qkv_dtype), out (of out_dtype) and lse;
 * dqkv of dqkv_dtype (bf16: the fp32 sum rounded). */
lw_status lw_attention_backward(lw_stream *stream, void *dqkv, lw_dtype dqkv_dtype, float *scratch,
                                const float *dout, const void *qkv, lw_dtype qkv_dtype,
                                const void *out, lw_dtype out_dtype, const float *lse, int64_t b,
                                int64_t t, int64_t c, int64_t nh);

/* The LM head fused with softmax cross-entropy, in chunks of rows: logits = h[n, c] w[v, c]^T
 * are formed a chunk at a time in scratch (at least lw_cross_entropy_scratch_floats(stream, n,
 * v) floats; never n x v at once unless that fits the device's chunk), giving losses[n] =
 * -log softmax(logits)[target] and lse[n], each row's log-sum-exp. [out] *loss (host): the
 * mean loss over rows whose target is in [0, v) (other targets are ignored: loss 0, no
 * gradient); waits for the stream. logits_dtype: the logits held in fp32, or in bf16 (each the
 * fp32 sum rounded, as autocast's matmul gives them; the statistics and the loss still taken in
 * fp32 and double from those values, and the backward's dlogits rounded to bf16 before its two
 * GEMMs); the backward takes the forward's. */
int64_t lw_cross_entropy_scratch_floats(lw_stream *stream, int64_t n, int64_t v);
lw_status lw_cross_entropy_forward(lw_stream *stream, float *losses, float *lse, float *scratch,
                                   const float *h, const void *w, lw_dtype w_dtype,
                                   lw_dtype logits_dtype, const int32_t *targets, int64_t n,
                                   int64_t c, int64_t v, double *loss);
/* Backward of loss_scale * (mean loss) after the forward of the same h, w, targets with the same
 * scratch untouched since (when all n rows fit one chunk the forward's probabilities, or its bf16
 * logits, are still there and are reused; otherwise each chunk's logits are recomputed):
 * dlogits = loss_scale * (softmax - onehot) / count, dh[n, c] += dlogits w and
 * dw[v, c] += dlogits^T h (dh optional). */
lw_status lw_cross_entropy_backward(lw_stream *stream, float *dh, float *dw, float *scratch,
                                    const float *h, const void *w, lw_dtype w_dtype,
                                    lw_dtype logits_dtype, const int32_t *targets, const float *lse,
                                    int64_t n, int64_t c, int64_t v, float loss_scale);

/* Tensor parallelism's vocabulary-parallel token embedding and LM head: each rank of
 * a TP group holds the rows [first, first + rows) of the vocabulary's tables, and a collective
 * over the group between these calls (the caller's: an all-reduce of the embedding's output, an
 * all-gather of the cross-entropy's statistics, an all-reduce of dh) makes the results those of
 * the one-rank kernels above. Rows at or past `vocab` are padding (the vocabulary rounded up to a
 * multiple of the group's size): never looked up, their logits masked out as if -inf. */

/* y[b, t, c] = wte[tokens[b, t] - first, :] for tokens in [first, first + rows), 0 for the
 * others (another rank's), plus wpe[t, :] (optional: one rank of the group passes it, so that the
 * group's sum adds it once). wte: [rows, c]. With first 0 and rows the vocabulary it is
 * lw_embedding_forward. */
lw_status lw_embedding_range_forward(lw_stream *stream, float *y, const int32_t *tokens,
                                     const void *wte, const void *wpe, lw_dtype w_dtype,
                                     int64_t first, int64_t rows, int64_t b, int64_t t,
                                     int64_t c);
/* dwte[tokens[b, t] - first, :] += dy[b, t, :] for tokens in [first, first + rows) (the others
 * are another rank's), in the order of lw_embedding_backward; dwpe[t, :] += dy[b, t, :]
 * (optional). */
lw_status lw_embedding_range_backward(lw_stream *stream, float *dwte, float *dwpe, const float *dy,
                                      const int32_t *tokens, int64_t first, int64_t rows,
                                      int64_t b, int64_t t, int64_t c);
/* This rank's statistics of the LM head's softmax: logits = h[n, c] w[v, c]^T for the vocabulary
 * rows [first, first + v) (those at or past vocab masked), formed a chunk at a time in scratch
 * (at least lw_cross_entropy_scratch_floats(stream, n, v) floats) as lw_cross_entropy_forward.
 * stats[3, n]: stats[i] = row i's largest logit here (-inf when every row here is padding),
 * stats[n + i] = the sum of exp(logit - that max), stats[2n + i] = the target's logit when this
 * rank holds it (first <= targets[i] < first + v, targets[i] < vocab), else 0. When all n rows
 * fit one chunk the logits stay in scratch for the backward. */
lw_status lw_cross_entropy_partial_forward(lw_stream *stream, float *stats, float *scratch,
                                           const float *h, const void *w, lw_dtype w_dtype,
                                           lw_dtype logits_dtype, const int32_t *targets, int64_t n,
                                           int64_t c, int64_t v, int64_t first, int64_t vocab);
/* The group's statistics combined: stats[parts, 3, n], every rank's stats in rank order (an
 * all-gather of the above). lse[n] = log of the sum of exp over the whole vocabulary, losses[n]
 * = lse - the target's logit for targets in [0, vocab) (others: 0, ignored). [out] *loss (host):
 * the mean over counted rows; waits for the stream. Every rank combining the same stats gets the
 * same values bit for bit. With one part holding the whole vocabulary these are
 * lw_cross_entropy_forward's losses and lse within float rounding. */
lw_status lw_cross_entropy_combine(lw_stream *stream, float *losses, float *lse,
                                   const float *stats, int64_t parts, const int32_t *targets,
                                   int64_t n, int64_t vocab, double *loss);
/* Backward of loss_scale * (mean loss) on this rank's rows, after lw_cross_entropy_combine gave
 * lse and with the scratch untouched since lw_cross_entropy_partial_forward (one chunk: its
 * logits are reused; several: recomputed): dlogits = loss_scale * (softmax - onehot) / count
 * (count: targets in [0, vocab); padding rows 0), dh[n, c] += dlogits w (this rank's share: the
 * group's sum is the input gradient) and dw[v, c] += dlogits^T h (dh optional). */
lw_status lw_cross_entropy_partial_backward(lw_stream *stream, float *dh, float *dw, float *scratch,
                                            const float *h, const void *w, lw_dtype w_dtype,
                                            lw_dtype logits_dtype, const int32_t *targets,
                                            const float *lse, int64_t n, int64_t c, int64_t v,
                                            int64_t first, int64_t vocab, float loss_scale);

/* A mixture of experts: n tokens, e experts, each token sent to k of them. The
 * router and its load-balancing loss below; the token permutation (tokens sorted by expert) is
 * the caller's, built from the experts array, and rows move with the gather and combine
 * kernels after them. Routing sizes are checked (n >= 0, 1 <= k <= e); indices are trusted to
 * lie in the arrays they index (the kernels do not know their rows), as tokens are in
 * lw_embedding_forward. */

/* probs[n, e] = softmax of each row of logits[n, e]; experts[n, k] = each row's k largest,
 * ranked by logit (which orders as the probabilities do, without their rounding), best first,
 * ties to the lower expert index, so a token's k experts are distinct; weights[n, k] = their
 * probabilities renormalised to sum to 1 (k = 1: every weight is 1, and the router learns only
 * through dprobs). */
lw_status lw_moe_router_forward(lw_stream *stream, int32_t *experts, float *weights, float *probs,
                                const float *logits, int64_t n, int64_t e, int64_t k);
/* dlogits[n, e] += the gradient through the renormalised weights and the softmax, given
 * dweights[n, k] and dprobs[n, e] (optional: a gradient w.r.t. the probabilities themselves,
 * the auxiliary loss's), from the forward's probs and experts. The choice of experts is
 * piecewise constant and has no gradient. */
lw_status lw_moe_router_backward(lw_stream *stream, float *dlogits, const float *dweights,
                                 const float *dprobs, const float *probs, const int32_t *experts,
                                 int64_t n, int64_t e, int64_t k);
/* The load-balancing loss (Switch Transformer's): coef * e * sum_j f_j P_j, f_j = (entries of
 * experts[n, k] equal to j) / (n k), P_j = the mean over tokens of probs[:, j]. [out] *loss
 * (host; 0 for n = 0); waits for the stream. */
lw_status lw_moe_aux_loss_forward(lw_stream *stream, const float *probs, const int32_t *experts,
                                  int64_t n, int64_t e, int64_t k, float coef, double *loss);
/* dprobs[n, e] += scale * dL/dprobs = scale * coef * e * f_j / n in column j (f is held
 * constant, as is standard: the assignment counts have no gradient). */
lw_status lw_moe_aux_loss_backward(lw_stream *stream, float *dprobs, const int32_t *experts,
                                   int64_t n, int64_t e, int64_t k, float coef, float scale);

/* out[i, :] = x[rows[i], :] for i < m (c columns): a mixture of experts' dispatch, the tokens'
 * rows in expert order (also weights, with c = 1). */
lw_status lw_gather_forward(lw_stream *stream, float *out, const float *x, const int32_t *rows,
                            int64_t m, int64_t c);
/* dx[rows[i], :] += dout[i, :]: a scatter-add; a row listed several times sums in the order of
 * i, so the result is deterministic. */
lw_status lw_gather_backward(lw_stream *stream, float *dx, const float *dout, const int32_t *rows,
                             int64_t m, int64_t c);
/* y[rows[i], :] += w[i] * src[i, :] for i < m, in the order of i: a mixture of experts'
 * combine, the experts' outputs weighted back into token order. */
lw_status lw_combine_forward(lw_stream *stream, float *y, const float *src, const float *w,
                             const int32_t *rows, int64_t m, int64_t c);
/* dsrc[i, :] += w[i] * dy[rows[i], :]; dw[i] += dot(src[i, :], dy[rows[i], :]) (dsrc and dw
 * each optional). */
lw_status lw_combine_backward(lw_stream *stream, float *dsrc, float *dw, const float *dy,
                              const float *src, const float *w, const int32_t *rows, int64_t m,
                              int64_t c);

/* LW_CDEF_END */

#ifdef __cplusplus
}
#endif

/* Host helpers for the Lua front end (files, JSON, CRC32C, clocks, terminals, formats). */
#include "lw_host.h"

#endif /* LW_H */
