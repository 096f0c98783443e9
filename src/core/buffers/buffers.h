/* buffers.h: the data of lw_buffers, shared by buffers.c (arrays, views, the ZeRO-1
 * syncs) and sharded.c (ZeRO-2/3: group blocks, their budget, gathers and partial
 * reductions). Not public API. */
#ifndef LW_BUFFERS_H
#define LW_BUFFERS_H

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
    float *data;     /* [owned, device memory] the buffer's largest group */
    lw_request *req; /* [owned] its gather or reduce-scatter (the scratch shard lives here) */
} lwi_block;

typedef struct lwi_buf {
    float *param; /* [owned] param_len: ZeRO-1/2 numel; ZeRO-3 this rank's shards */
    float *grad;  /* [owned] grad_len: ZeRO-1 numel; ZeRO-2/3 this rank's shards */
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
    float *pack;       /* [owned] this rank's owned params, packed */
    float *gathered;   /* [owned] every rank's, in rank order */
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
} lwi_param_info;

struct lw_buffers {
    const lw_layout *layout;
    lw_comm *comm;
    lw_device *device; /* [borrowed] where the arrays and blocks live */
    lw_stream *stream; /* [borrowed] its default stream: syncs, averaging, copies */
    lw_buffers_options o;
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
};

/* sharded.c */
lw_status lwi_sharded_init(lw_buffers *bs);
void lwi_sharded_free(lw_buffers *bs);
/* lw_buffers_acquire's residency part, once the parameters' sync is done below ZeRO-3: pins the
 * group, gathers it at ZeRO-3, gives it whole-gradient storage in backward at ZeRO-2/3. */
lw_status lwi_sharded_acquire(lw_buffers *bs, int32_t param, lw_pass pass, bool reuse);
lw_status lwi_sharded_start_grad(lw_buffers *bs, int32_t group);
/* Waits for every reduce-scatter in flight and adds each into this rank's gradient shards. */
lw_status lwi_sharded_finish_grads(lw_buffers *bs);
lw_status lwi_sharded_wait_gathers(lw_buffers *bs);
/* Waits for group g's gather if it is in flight. */
lw_status lwi_sharded_wait_gather(lwi_group *g);
/* Drops every gathered group (an error while one is acquired). */
lw_status lwi_sharded_drop_params(lw_buffers *bs);
lw_status lwi_sharded_prefetch(lw_buffers *bs, int32_t group);
lw_status lwi_sharded_commit(lw_buffers *bs, int32_t group);
/* Offset of element x (of a bucket of group g) in this rank's shard array; x must lie in this
 * rank's shard of the bucket. */
static inline int64_t lwi_shard_offset(const lwi_group *g, int64_t x) {
    return g->shard_base + (x - g->shard_start);
}

#endif
