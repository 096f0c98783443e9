/* lw_optimizer.h: training across ranks: the runtime choices (mode, ZeRO level, sharding) and
 * the one place that checks which go together; the buffers (a layout's flat parameter and
 * gradient arrays on a device, a view per parameter, their syncs per bucket, ZeRO 1-3); and the
 * optimizer's step over them (gradient norm, clipping, Muon, AdamW). Sync order, ZeRO levels
 * and the step in detail: docs/c_api.md.
 */
#ifndef LW_OPTIMIZER_API_H
#define LW_OPTIMIZER_API_H

#include "lw_base.h"
#include "lw_comm.h"
#include "lw_device.h"
#include "lw_layout.h"
#include "lw_optim_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* LW_CDEF_BEGIN */

/* ---- runtime choices: mode, ZeRO level, sharding ------------------------------------------- */

typedef enum lw_mode {
    LW_MODE_LAYERWISE = 0, /* sharded buffers: Muon matrices owned whole, AdamW element-wise */
    LW_MODE_LEGACY = 1,    /* unpadded buffers, whole params owned by ping-pong dealing */
    LW_MODE_REPLICATED = 2 /* unsharded buffers: plain data parallel, every rank updates all */
} lw_mode;

/* "layerwise", "legacy", "replicated" (names as lw_dtype_name). */
const char *lw_mode_name(lw_mode mode);
lw_status lw_mode_from_name(const char *name, lw_mode *out);

typedef enum lw_shard {
    LW_SHARD_ALIGNED = 0, /* each rank owns whole Muon matrices (a shard-aligned layout) */
    LW_SHARD_ROWS = 1     /* every Muon matrix split by rows across the ranks (the rows layout,
                             row-sharded FSDP) */
} lw_shard;

/* "aligned", "rows" (names as lw_dtype_name). */
const char *lw_shard_name(lw_shard shard);
lw_status lw_shard_from_name(const char *name, lw_shard *out);

typedef struct lw_runtime_options {
    size_t size;                  /* sizeof, set by lw_runtime_defaults() (docs/c_api.md) */
    lw_mode mode;
    int32_t zero;                 /* ZeRO level 1, 2 or 3 (lw_buffers_options.zero) */
    lw_shard shard;               /* how Muon matrices are sharded (mode layerwise) */
    lw_algorithm algorithm;       /* layout of Muon buffers, or LW_ALGORITHM_AUTO (not chosen) */
    lw_algorithm adamw_algorithm; /* layout of AdamW buffers (Lua's adamw_layout), or AUTO */
} lw_runtime_options;

/* Mode layerwise, ZeRO-1, shard aligned, both algorithms AUTO. */
lw_runtime_options lw_runtime_defaults(void);
/* Whether the choices go together and, with layout (optional, [borrowed]: the one the buffers
 * will hold), the ZeRO level with it; every rule about combinations is here (docs/c_api.md).
 * LW_ERR_INVALID names the first rule broken, in the name functions' words. */
lw_status lw_runtime_check(const lw_runtime_options *opts, const lw_layout *layout);
/* The layout algorithms the choices stand for: checks opts (lw_runtime_check without a
 * layout), then sets layout->algorithm and layout->adamw_algorithm (AUTO: cost and distopt),
 * leaving the other fields of *layout as they were. */
lw_status lw_runtime_layout(const lw_runtime_options *opts, lw_layout_options *layout);

/* ---- buffers ------------------------------------------------------------------------------- */

typedef struct lw_buffers lw_buffers;

typedef struct lw_buffers_options {
    size_t size;        /* sizeof, set by lw_buffers_defaults() (docs/c_api.md) */
    bool overlap_grad;  /* start a bucket's gradient sync as soon as it is ready */
    bool overlap_param; /* defer parameter all-gathers to lw_buffers_finish_param_sync; ZeRO-3:
                           prefetch the next group's parameters */
    int32_t zero;       /* ZeRO level 1, 2 or 3 (sharded buffers only) */
    lw_device *device;  /* where the arrays live and the syncs' arithmetic runs; NULL = CPU */
} lw_buffers_options;

/* Both overlaps on, ZeRO-1, on the CPU. */
lw_buffers_options lw_buffers_defaults(void);
/* layout, comm and expert_comm (for expert buffers; NULL = comm) are [borrowed] and must
 * outlive the buffers; their sizes must equal the layout's dp and expert_dp. Collective: the
 * ranks' layout hashes are compared. [out] owned. */
lw_status lw_buffers_new(const lw_layout *layout, lw_comm *comm, lw_comm *expert_comm,
                         const lw_buffers_options *opts, lw_buffers **out);
void lw_buffers_free(lw_buffers *buffers);
const lw_layout *lw_buffers_layout(const lw_buffers *buffers);
lw_comm *lw_buffers_comm(const lw_buffers *buffers);
/* The device the arrays live on. [borrowed] */
lw_device *lw_buffers_device(const lw_buffers *buffers);
/* The communicator that shards buffer (the expert one for expert buffers); NULL out of range.
 * [borrowed] */
lw_comm *lw_buffers_buffer_comm(const lw_buffers *buffers, int32_t buffer);
int32_t lw_buffers_zero(const lw_buffers *buffers);
/* The dtype the parameter arrays hold: F32, or BF16 (with the optimizer's fp32 master copy of
 * what this rank owns). */
lw_dtype lw_buffers_param_dtype(const lw_buffers *buffers);
/* The dtype the gradient sums move: F32, or BF16 (rounded once per group, summed in bf16); the
 * gradient arrays themselves stay fp32 either way (docs/c_api.md). */
lw_dtype lw_buffers_grad_dtype(const lw_buffers *buffers);
/* fp32 views of a whole parameter / gradient, as the model reads and writes them. [out] *data
 * borrowed, numel elements. LW_ERR_STATE where the view exists only while its group is held
 * (ZeRO-3 or bf16 parameters, ZeRO-2/3 gradients) and it is not. */
lw_status lw_buffers_param(lw_buffers *buffers, int32_t param, float **data);
lw_status lw_buffers_grad(lw_buffers *buffers, int32_t param, float **data);
/* A whole parameter as stored, for the kernels that take a weight's dtype: [out] *data
 * borrowed, numel elements of [out] *dtype; never widened. While its group is held, as
 * lw_buffers_param (else LW_ERR_STATE). */
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
/* Starts the syncs not started yet and waits for all: each rank then holds the averaged
 * gradient of everything it updates. */
lw_status lw_buffers_finish_grad_sync(lw_buffers *buffers);
/* After the optimizer wrote its updates: starts the parameter syncs (the first group's with
 * overlap_param, every one and waits without). ZeRO-3: drops every gathered group (stale) and,
 * with overlap_param, starts gathering group 0. */
lw_status lw_buffers_start_param_sync(lw_buffers *buffers);
/* Waits for the parameters of group and every group before it in forward order, and starts
 * the next group's gather; group -1 waits for all. ZeRO-3: waits for gathers in flight. */
lw_status lw_buffers_finish_param_sync(lw_buffers *buffers, int32_t group);
/* Parameter groups: one per bucket; numbered in forward order (group 0 is used first). */
int32_t lw_buffers_num_groups(const lw_buffers *buffers);
lw_status lw_buffers_param_group(const lw_buffers *buffers, int32_t param, int32_t *group);

typedef enum lw_pass {
    LW_PASS_FORWARD = 0,
    LW_PASS_BACKWARD = 1
} lw_pass;

/* A module is about to read param (in backward, and accumulate into its gradient): makes its
 * group readable and, in backward at ZeRO-2/3, gives it zeroed whole-gradient storage, until
 * the matching lw_buffers_release. reuse: a use out of the pass's order (a tied weight read
 * again), which neither advances the pass, prefetches, nor frees groups behind it. */
lw_status lw_buffers_acquire(lw_buffers *buffers, int32_t param, lw_pass pass, bool reuse);
lw_status lw_buffers_release(lw_buffers *buffers, int32_t param);
/* After writing into the acquired views of group's params (initialisation, a checkpoint):
 * stores them (ZeRO-3: into this rank's shard, every rank having written the same values; bf16:
 * rounded to nearest even); a no-op for fp32 parameters below ZeRO-3. */
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

/* ---- optimizer ----------------------------------------------------------------------------- */

typedef struct lw_optimizer lw_optimizer;

typedef struct lw_optimizer_options {
    size_t size;            /* sizeof, set by lw_optimizer_defaults() (docs/c_api.md) */
    lw_muon_options muon;   /* size set too: the one this lw_optimizer_options holds */
    lw_adamw_options adamw; /* likewise */
    float clip;             /* max gradient norm; <= 0: no clipping */
    lw_comm *tp_comm;       /* [borrowed, must outlive the optimizer] this rank's tensor-parallel
                               group, or NULL: no TP (docs/c_api.md) */
    lw_lion_options lion;   /* size set too, as muon's */
    lw_normuon_options normuon; /* likewise; NorMuon also takes muon's */
} lw_optimizer_options;

/* Muon's, AdamW's and Lion's defaults (lw_muon_defaults, ...), no clipping, no TP. */
lw_optimizer_options lw_optimizer_defaults(void);

typedef struct lw_step_result {
    double grad_norm; /* before clipping */
    int64_t zeros;    /* gradient elements exactly zero */
    bool skipped;     /* non-finite norm: nothing was updated */
    int64_t skips;    /* skipped steps so far */
    int64_t step;     /* updates applied so far */
    double seconds_grad_sync;  /* waiting for gradient syncs */
    double seconds_norm;       /* norm, zeros and their all-reduce */
    double seconds_muon;       /* the whole-matrix rules' (Muon's) updates of owned matrices */
    double seconds_adamw;      /* the element-wise rules' (AdamW's) updates of owned elements */
    double seconds_param_sync; /* starting (or, without overlap, doing) the parameter sync */
    double seconds_muon_comm;  /* of seconds_muon: row-sharded Muon's all-gathers of updates
                                  and the TP modes' collectives */
} lw_step_result;

/* buffers [borrowed] must outlive the optimizer. With a TP group, collective over it: the
 * layouts are compared. [out] owned. */
lw_status lw_optimizer_new(lw_buffers *buffers, const lw_optimizer_options *opts,
                           lw_optimizer **out);
void lw_optimizer_free(lw_optimizer *opt);
/* Puts param in a hyper-parameter group; every param starts in group 0, and groups, numbered
 * from 0, are created by naming them. */
lw_status lw_optimizer_set_group(lw_optimizer *opt, int32_t param, int32_t group);
/* Learning rate (>= 0) and weight decay of a group for the next steps (schedules call it each
 * step). */
lw_status lw_optimizer_set_hparams(lw_optimizer *opt, int32_t group, float lr,
                                   float weight_decay);
/* A group's own options (opts [copied]: read and checked as lw_optimizer_new reads them) for
 * its parameters' rules from the next step: Muon's variant or AdamW's betas for some
 * parameters only. clip, tp_comm, muon.tp_mode and muon.split_qkv are the optimizer's and must
 * equal its. Each whole-matrix rule gets a context of its own for the group (on a GPU, its own
 * Newton-Schulz workspace). Calling it again replaces the group's options. */
lw_status lw_optimizer_set_group_options(lw_optimizer *opt, int32_t group,
                                         const lw_optimizer_options *opts);
/* One step: gradient sync, global norm, skip on a non-finite norm, clip, each parameter's rule
 * (lw_param_spec.optimizer) on what this rank owns, the queued row scales, then the parameter
 * sync started. */
lw_status lw_optimizer_step(lw_optimizer *opt, lw_step_result *out);

/* ---- row scales (QK-clip) ------------------------------------------------------------------ *
 * Queued before lw_optimizer_step, applied inside it after the update (or the skip) and before
 * the parameter sync starts, to what this rank updates of the rows: its fp32 weights (the master
 * copy with bf16 parameters, then rounded into them). Every rank of the buffers' communicator
 * queues the same scales; each applies its part (docs/c_api.md). */

/* Rows [first_row, first_row + n_rows) of param (along its first dimension; a vector's
 * elements) times factor (finite, > 0) at the next step; scales of the same rows multiply. */
lw_status lw_optimizer_scale_rows(lw_optimizer *opt, int32_t param, int64_t first_row,
                                  int64_t n_rows, float factor);
/* QK-clip of a fused QKV weight (its spec's qkv_groups and qkv_rows place each head's Q and K
 * rows, head_dim rows a head) and of its bias (a vector param of as many rows, or -1), from
 * head_max[n_heads] (host; the Q heads in row order): each head whose largest logit S is above
 * tau (finite, > 0) gets its Q and K rows times sqrt(tau / S), or, where several Q heads share
 * one K head, its Q rows times tau / S and the shared K rows left alone. A NaN or infinite S is
 * passed over. [out] *clipped (optional): the heads clipped. */
lw_status lw_optimizer_qk_clip(lw_optimizer *opt, int32_t weight, int32_t bias, int64_t head_dim,
                               const float *head_max, int32_t n_heads, float tau,
                               int32_t *clipped);

/* The optimizer state of one parameter this rank updates, for checkpoints: its rule's named
 * parts over [start, start + count) of the parameter (the whole matrix for a whole-matrix
 * rule; Muon: "m", the momentum; AdamW: "m" and "v"); with bf16 parameters also the fp32
 * master copy. The arrays are [borrowed] and writable: a checkpoint loads into them. */
typedef struct lw_state_entry {
    int32_t param;
    lw_optimizer_kind optimizer;
    int64_t start;
    int64_t count;   /* elements: numel for a whole-matrix rule */
    int32_t n_parts; /* lw_optimizer_kind_parts(optimizer) */
    float *parts[4]; /* part i named lw_optimizer_kind_part(optimizer, i), part_counts[i] floats */
    float *master;   /* fp32 master weights (bf16 parameters); NULL for fp32 parameters */
    int64_t part_counts[4]; /* count for a per-element part, else lw_optimizer_kind_part_count */
} lw_state_entry;

int32_t lw_optimizer_state_count(const lw_optimizer *opt);
/* bf16 parameters: sets every fp32 master copy from the owned parameters (widened exactly), as
 * lw_optimizer_new does and a step does after commits. A no-op for fp32 parameters. */
lw_status lw_optimizer_reload_master(lw_optimizer *opt);
/* bf16 parameters: the master copies were written through lw_optimizer_state after the
 * parameters were: keep them rather than widen the parameters committed before now at the
 * next step. */
lw_status lw_optimizer_keep_master(lw_optimizer *opt);
lw_status lw_optimizer_state(const lw_optimizer *opt, int32_t k, lw_state_entry *out);
/* Updates applied and steps skipped so far (AdamW's bias correction uses the updates). */
lw_status lw_optimizer_counters(const lw_optimizer *opt, int64_t *step, int64_t *skips);
lw_status lw_optimizer_set_counters(lw_optimizer *opt, int64_t step, int64_t skips);

/* LW_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* LW_OPTIMIZER_API_H */
