/* layout.h: the layout's data structures, shared by the files of layout/ and by the
 * C tests that corrupt a layout on purpose to exercise the validator. Not public API. */
#ifndef LW_LAYOUT_H
#define LW_LAYOUT_H

#include "base/base.h"

typedef struct lwi_param {
    char *name; /* [owned] */
    int32_t ndim;
    int64_t shape[4];
    int64_t numel;
    lw_dtype dtype;
    lw_dtype grad_dtype;
    bool expert;
    bool shared_embedding;
    lw_optimizer_kind optimizer;
    bool whole; /* its rule updates whole matrices */
    /* tensor parallelism, as lw_param_spec: tp_blocks 0 = replicated over TP; qkv_groups 0 =
     * not a fused QKV weight */
    int32_t tp_dim;
    int32_t tp_blocks;
    int32_t qkv_groups;
    int64_t qkv_rows[3];
    /* placement */
    int32_t buffer;
    int32_t bucket;
    int64_t start;
    int32_t owner; /* -1: element-wise or unsharded */
} lwi_param;

typedef struct lwi_bucket {
    int64_t start;
    int64_t stop;
    int64_t shard_size;
    int64_t numel_unpadded;
    int32_t first; /* its params are placed[first .. first + count - 1] of the buffer */
    int32_t count;
    int64_t *shards; /* [owned] packed: dp + 1 shard boundaries, start .. stop; else NULL */
} lwi_bucket;

typedef struct lwi_buffer {
    lw_dtype param_dtype;
    lw_dtype grad_dtype;
    bool expert;
    lw_optimizer_kind optimizer;
    bool whole; /* its rule updates whole matrices: owned whole in shard-aligned layouts */
    lw_algorithm algorithm;
    int32_t dp;
    int64_t numel;
    int32_t n_params;
    int32_t *params; /* [owned] param indices in definition order */
    int32_t *placed; /* [owned] param indices in placement order, bucket by bucket */
    int32_t n_placed;
    int32_t n_buckets;
    lwi_bucket *buckets; /* [owned] capacity n_params: every bucket holds at least one param */
} lwi_buffer;

struct lw_layout {
    lw_layout_options opts;
    int32_t n_params;
    lwi_param *params; /* [owned] definition order */
    int32_t *by_name;  /* [owned] param indices sorted by name, for lookups */
    int32_t n_buffers;
    lwi_buffer *buffers; /* [owned] */
    lw_layout_stats stats;
    int64_t *rank_numel; /* [owned] stats.ranks entries */
    double *rank_cost;   /* [owned] stats.ranks entries */
};

/* Newton-Schulz cost of a param: max(m,n) * min(m,n)^2 for a 2-D (m, n), numel otherwise; a
 * fused QKV weight the sum over its Q, K and V matrices (Muon's split_qkv, the default). */
double lwi_param_cost(const lwi_param *p);
/* The k-th param of a buffer in backprop (reverse definition) order. */
static inline int32_t lwi_backprop(const lwi_buffer *b, int32_t k) {
    return b->params[b->n_params - 1 - k];
}
static inline bool lwi_is_aligned(lw_algorithm a) {
    return a == LW_ALGORITHM_COST || a == LW_ALGORITHM_LPT || a == LW_ALGORITHM_SIZE_MATCHING;
}
static inline bool lwi_is_padded(lw_algorithm a) {
    return lwi_is_aligned(a) || a == LW_ALGORITHM_DISTOPT || a == LW_ALGORITHM_ROWS;
}
/* Whole params owned, shards of unequal size (packed.c). */
static inline bool lwi_is_packed(lw_algorithm a) { return a == LW_ALGORITHM_PACKED; }
/* Element-wise: every rank owns the part of a param inside its shard of the bucket. */
static inline bool lwi_is_elementwise(lw_algorithm a) {
    return a == LW_ALGORITHM_DISTOPT || a == LW_ALGORITHM_ROWS;
}

/* Bucket building, used by every algorithm: open a bucket at start, place params into it,
 * close it at stop with its shard size (overflow of stop is the caller's check). */
void lwi_bucket_open(lwi_buffer *b, int64_t start);
void lwi_bucket_put(lw_layout *l, lwi_buffer *b, int32_t param, int64_t start, int32_t owner);
void lwi_bucket_close(lwi_buffer *b, int64_t stop, int64_t shard_size);
static inline lwi_bucket *lwi_bucket_current(lwi_buffer *b) {
    return &b->buckets[b->n_buckets - 1];
}

/* The layouts, one buffer at a time (buffer params and dp already set). */
lw_status lwi_layout_default(lw_layout *l, lwi_buffer *b);
lw_status lwi_layout_legacy(lw_layout *l, lwi_buffer *b);
lw_status lwi_layout_distopt(lw_layout *l, lwi_buffer *b);
lw_status lwi_layout_rows(lw_layout *l, lwi_buffer *b);
lw_status lwi_layout_aligned(lw_layout *l, lwi_buffer *b);
lw_status lwi_layout_packed(lw_layout *l, lwi_buffer *b);

/* Fills l->stats and the per-rank arrays (allocated by the caller). */
void lwi_layout_compute_stats(lw_layout *l);

#endif
