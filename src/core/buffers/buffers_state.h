/* buffers_state.h: the state of lw_buffers (its arrays, bucket groups, parameters, group blocks
 * and residency) and what its files offer one another: buffers.c (the object: arrays, views,
 * owned ranges, memory), groups.c (the bucket groups and their shards), residency.c (the ways of
 * holding a group between uses, chosen once from the ZeRO level and parameter dtype), sync.c
 * (when each group's gradient and parameter syncs run), whole.c (the syncs of groups held whole
 * in the arrays), sharded.c (the group blocks: their pool, budget, gathers and partial
 * reductions) and views.c (what is read and written in a held group). Not public API. */
#ifndef LW_BUFFERS_STATE_H
#define LW_BUFFERS_STATE_H

#include "comm/comm.h"
#include "layout/layout.h"

typedef enum sync_kind {
    SYNC_SHARDED,    /* reduce-scatter gradients, all-gather parameters */
    SYNC_REPLICATED, /* all-reduce gradients; every rank updates everything */
    SYNC_LEGACY      /* all-reduce gradients; gather updated params with all-gather-v */
} sync_kind;

/* A whole-group array from a buffer's pool (ZeRO-2/3): a gathered group's parameters or a
 * group's gradient while backward writes it and its reduce-scatter runs. */
typedef struct lwi_block {
    float *data;     /* [owned, device memory] the buffer's largest group, fp32 (the model's view);
                        bf16 parameters at ZeRO-3: then the group's bf16 as gathered */
    lw_request *req; /* [owned] its gather or reduce-scatter (the scratch shard lives here) */
} lwi_block;

typedef struct lwi_buf {
    void *param;  /* [owned] param_len of the param dtype: ZeRO-1/2 numel; ZeRO-3 this rank's
                     shards */
    float *grad;  /* [owned] grad_len: ZeRO-1 numel; ZeRO-2/3 this rank's shards */
    void *grad_wire; /* [owned] ZeRO-1 with bf16 gradients: numel bf16, what the sums move */
    int64_t numel;
    int64_t shards_len; /* this rank's shards of every bucket: numel / dp when they are equal */
    int64_t param_len;
    int64_t grad_len;
    lw_comm *comm; /* [borrowed] the group that shards it */
    int32_t dp;
    int32_t rank;
    sync_kind kind;
    /* legacy: params in (owner, definition) order and per-rank element counts */
    int32_t *by_owner; /* [owned] */
    int64_t *counts;   /* [owned] dp entries */
    void *pack;        /* [owned] this rank's owned params, packed (param dtype) */
    void *gathered;    /* [owned] every rank's, in rank order */
    /* ZeRO-2/3 */
    int64_t block_numel; /* its largest group */
    int64_t block_shard; /* the largest shard of a group on any rank (a reduce-scatter's result) */
    lwi_block *spare;    /* [owned] blocks not in use (data and req owned) */
    int32_t n_spare;
    int32_t cap_spare;
} lwi_buf;

typedef struct lwi_group {
    int32_t buffer;
    int64_t start; /* bucket range in its buffer */
    int64_t count;
    int32_t n_params;
    int32_t first; /* smallest and largest definition index of its params */
    int32_t last;
    int32_t ready;   /* params whose gradient arrived this step (ZeRO-2/3: micro-step) */
    lw_request *req; /* [owned] ZeRO-1: grad sync in backward, param sync after the step */
    char label[40];  /* "buffer 1 bucket 2" (1-based, as lw.layout numbers them): the watchdog's */
    /* this rank's shard of the bucket (lw_layout_shard): [shard_start, +shard_count) of the
     * buffer, at shard_base in this rank's shard arrays (ZeRO-2/3); counts: every rank's shard
     * size when they differ (packed: moved by the variable-count collectives), else NULL */
    int64_t shard_start;
    int64_t shard_count;
    int64_t shard_base;
    int64_t *counts; /* [owned] */
    bool grad_started;
    bool param_started;
    /* ZeRO-2/3 */
    lwi_block gblock; /* whole gradient (data NULL when not held) */
    bool reducing;    /* gblock's reduce-scatter is in flight */
    lwi_block pblock; /* ZeRO-3: gathered parameters (data NULL when not held) */
    bool gathering;   /* pblock's all-gather is in flight */
    int32_t pins;     /* acquires not yet released */
    int64_t used;     /* tick of its last acquire or prefetch: least recent is evicted first */
} lwi_group;

typedef struct lwi_param_info {
    int32_t buffer;
    int32_t group;
    int64_t start;
    int64_t numel;
    bool ready;
    bool widened; /* bf16 parameters: its fp32 view in the group's block is current */
} lwi_param_info;

/* How a rank holds a group's parameters and gradients between uses: what differs between the
 * ZeRO levels, chosen once by lw_buffers_new (residency.c), so that the syncs and views have no
 * branch on the level. */
typedef struct lwi_residency {
    lw_dtype param_dtype; /* of the parameter arrays: F32 (the views are them, or gathered as
                             they are) or BF16 (the views are fp32 blocks, widened from them) */
    bool sharded_params; /* the parameter arrays hold this rank's shards (ZeRO-3), else whole */
    bool sharded_grads;  /* the gradient arrays hold this rank's shards (ZeRO-2/3), else whole */
    int32_t blocks;      /* group blocks a held group may need: 0, 1 (its gradient, or its
                            parameters' fp32 view) or 2 (both); the pool's budget is two such
                            groups */
    const char *held_as; /* where a group's parameters are readable, for messages */
    /* Where the whole parameter / gradient of param is while readable (LW_ERR_STATE if not). */
    lw_status (*param)(lw_buffers *bs, int32_t param, float **data);
    lw_status (*grad)(lw_buffers *bs, int32_t param, float **data);
    /* Where the whole parameter is as stored (param_dtype), while readable. */
    lw_status (*stored)(lw_buffers *bs, int32_t param, const void **data);
    /* lw_buffers_acquire once the arguments are checked. */
    lw_status (*acquire)(lw_buffers *bs, int32_t param, lw_pass pass, bool reuse);
    /* Starts group's gradient sync (averaging included). */
    lw_status (*start_grad)(lw_buffers *bs, int32_t group);
    /* After every group's sync was waited for: completes what is left (ZeRO-2/3: adds the
     * reduced shards into the gradient shards). */
    lw_status (*finish_grads)(lw_buffers *bs);
    /* End of a micro-step's backward (lw_buffers_end_backward). */
    lw_status (*end_backward)(lw_buffers *bs);
    /* lw_buffers_start_param_sync and lw_buffers_finish_param_sync (group checked, -1: all). */
    lw_status (*start_params)(lw_buffers *bs);
    lw_status (*finish_params)(lw_buffers *bs, int32_t group);
    /* lw_buffers_commit (group checked). */
    lw_status (*commit)(lw_buffers *bs, int32_t group);
} lwi_residency;

struct lw_buffers {
    const lw_layout *layout;
    lw_comm *comm;
    lw_device *device; /* [borrowed] where the arrays and blocks live */
    lw_stream *stream; /* [borrowed] its default stream: syncs, averaging, copies */
    lw_buffers_options o;
    const lwi_residency *residency; /* [borrowed] static: the ZeRO level's and param dtype's */
    int64_t param_size;             /* bytes of a parameter element (param dtype) */
    lw_dtype grad_dtype;            /* what the gradient sums move: F32, or BF16 (rounded from
                                       the fp32 gradients, widened back into them) */
    int32_t n_buffers;
    lwi_buf *buffers; /* [owned] */
    int32_t n_params;
    lwi_param_info *params; /* [owned] */
    int32_t n_groups;
    lwi_group *groups;  /* [owned] forward order */
    int32_t *backward;  /* [owned] groups by last param, descending: backward's order of need */
    int32_t next_grad;  /* groups above this index have started their gradient sync */
    int32_t next_param; /* groups below this index have started their parameter sync */
    int32_t param_done; /* groups below this index have their parameters */
    /* ZeRO-2/3 residency */
    lw_pass pass;   /* of the last in-order acquire */
    int32_t cursor; /* its definition index: the pass has moved past the groups behind it */
    int64_t tick;
    int64_t array_bytes;   /* param and grad arrays (or shards) */
    int64_t largest_block; /* bytes of the largest block of any buffer */
    int64_t param_block_bytes;
    int64_t grad_block_bytes;
    int64_t cached_bytes;
    int64_t peak;
    int64_t budget;
    int64_t over_budget;
    int64_t gathers;
    int64_t flushes;
    int64_t commits; /* lw_buffers_commit calls: parameters written other than by the optimizer */
};

/* n zeroed bytes of the buffers' device (NULL when that fails: callers say what for). */
static inline void *lwi_alloc_zeroed(lw_buffers *bs, int64_t bytes) {
    void *p = NULL;
    return lw_device_alloc(bs->device, bytes, &p) == LW_OK ? p : NULL;
}

/* LW_OK for a parameter index of bs, else the error naming it. */
static inline lw_status lwi_check_param(const lw_buffers *bs, int32_t param) {
    if (bs == NULL) return lwi_fail(LW_ERR_INVALID, "buffers: NULL buffers");
    if (param < 0 || param >= bs->n_params)
        return lwi_fail(LW_ERR_RANGE, "buffers: parameter index %d out of range [0, %d)", param,
                        bs->n_params);
    return LW_OK;
}

/* Where a group's parameters arrive in block `data` of buffer b: the block itself for fp32,
 * after the fp32 view for a narrower dtype (the wire). */
static inline void *lwi_wire_of(const lw_buffers *bs, const lwi_buf *b, float *data) {
    return bs->param_size == (int64_t)sizeof(float) ? (void *)data
                                                    : (void *)(data + b->block_numel);
}
/* Group g's shard inside its whole-group block (a gathered or reduced bucket). */
static inline float *lwi_shard_in_block(const lwi_group *g, float *block) {
    return block + (g->shard_start - g->start);
}
/* Parameter element i of an array of the param dtype. */
static inline void *lwi_param_at(const lw_buffers *bs, void *array, int64_t i) {
    return (char *)array + i * bs->param_size;
}

/* Offset of element x (of a bucket of group g) in this rank's shard array; x must lie in this
 * rank's shard of the bucket. */
static inline int64_t lwi_shard_offset(const lwi_group *g, int64_t x) {
    return g->shard_base + (x - g->shard_start);
}

/* ---- what each file offers the others -------------------------------------------------------- */

/* groups.c: one group per bucket, in forward order, with this rank's shards; the backward
 * order. */
lw_status lwi_groups_make(lw_buffers *bs);
/* Elements of this rank's shards of every bucket of buffer b (numel / dp for equal shards). */
lw_status lwi_groups_shards_length(const lw_layout *l, int32_t b, int32_t rank, int64_t *len);

/* residency.c: the residency of a ZeRO level (1, 2 or 3) and parameter dtype (F32, BF16);
 * NULL for another dtype. */
const lwi_residency *lwi_residency_for(int32_t zero, lw_dtype param_dtype);

/* sync.c: ZeRO-2/3's end of a micro-step's backward: starts every gradient sync not started
 * yet. */
lw_status lwi_sync_end_backward(lw_buffers *bs);

/* whole.c: the syncs of groups held whole in the arrays (every ZeRO level's parameters below
 * ZeRO-3, ZeRO-1's gradients) and legacy's gather. */
lw_status lwi_whole_legacy_prepare(lw_buffers *bs, int32_t buffer);
lw_status lwi_whole_start_grad(lw_buffers *bs, int32_t group);
/* ZeRO-1, after every gradient sync was waited for: bf16 sums widened into the fp32 arrays. */
lw_status lwi_whole_finish_grads(lw_buffers *bs);
lw_status lwi_whole_start_params(lw_buffers *bs);
lw_status lwi_whole_finish_params(lw_buffers *bs, int32_t group);

/* sharded.c: the group blocks held (pool, budget, gathers, reductions). */
lw_status lwi_sharded_init(lw_buffers *bs);
void lwi_sharded_free(lw_buffers *bs);
/* Pins param's group and marks it used. */
void lwi_sharded_pin(lw_buffers *bs, int32_t group);
/* In backward, whole-gradient storage for group (a zeroed block) unless held (ZeRO-2/3). */
lw_status lwi_sharded_hold_grad(lw_buffers *bs, int32_t group);
/* The acquire of parameters read from a block: moves the pass, gathers the group unless held
 * (ZeRO-3; below it, bf16 arrays take a block of views only when a view is asked for), pins it,
 * holds its gradient in backward (ZeRO-2/3) and at ZeRO-3 prefetches the pass's next group. */
lw_status lwi_sharded_acquire_view(lw_buffers *bs, int32_t param, lw_pass pass, bool reuse);
/* Starts the reduce-scatter of group's gradient block. */
lw_status lwi_sharded_start_grad(lw_buffers *bs, int32_t group);
/* Waits for every reduce-scatter in flight and adds each into this rank's gradient shards. */
lw_status lwi_sharded_finish_grads(lw_buffers *bs);
lw_status lwi_sharded_wait_gathers(lw_buffers *bs);
/* Waits for group g's gather if it is in flight. */
lw_status lwi_sharded_wait_gather(lwi_group *g);
/* bf16 arrays below ZeRO-3: a block for group's fp32 views (none of them widened yet), taken when
 * the first of them is asked for. */
lw_status lwi_sharded_take_views(lw_buffers *bs, int32_t group);
/* Drops every gathered group (an error while one is acquired). */
lw_status lwi_sharded_drop_params(lw_buffers *bs);
/* Starts gathering group's parameters if there is room (nothing for -1 or a held group). */
lw_status lwi_sharded_prefetch(lw_buffers *bs, int32_t group);
/* bf16 arrays: drops every group's fp32 view (the arrays are about to change), then syncs. */
lw_status lwi_sharded_start_whole_params(lw_buffers *bs);

/* views.c: what is read and written in a held group. */
/* The whole parameter / gradient of param in its group's block (a bf16 parameter's view widened
 * on the first request since the block was filled). */
lw_status lwi_views_param(lw_buffers *bs, int32_t param, float **data);
lw_status lwi_views_grad(lw_buffers *bs, int32_t param, float **data);
/* The whole parameter of a held group as stored: the array below ZeRO-3, the gathered group at
 * ZeRO-3 (the block itself for fp32, its bf16 wire for bf16). */
lw_status lwi_views_stored(lw_buffers *bs, int32_t param, const void **data);
/* Written views back into what is stored (lw_buffers_commit, group checked). */
lw_status lwi_views_commit(lw_buffers *bs, int32_t group);

#endif
