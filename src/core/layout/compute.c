/* compute.c: the layout object: input validation, grouping params into buffers, dispatch to the
 * per-algorithm layouts (simple.c, aligned.c, which build buckets with bucket.c), and read
 * access. The invariants are checked in check.c, statistics and hash in stats.c. */
#include "layout/layout.h"

#include <stdlib.h>
#include <string.h>

/* Guards against int64 overflow: padding and dp-fold shards stay far below 2^63. */
#define MAX_PARAM_NUMEL (INT64_C(1) << 50)
#define MAX_TOTAL_NUMEL (INT64_C(1) << 52)
#define MAX_DP          (1 << 20)

lw_layout_options lw_layout_defaults(void) {
    lw_layout_options o;
    memset(&o, 0, sizeof o);
    o.size = sizeof o;
    o.dp = 1;
    o.expert_dp = 1;
    o.bucket_size = INT64_MAX;
    o.algorithm = LW_ALGORITHM_COST;
    o.adamw_algorithm = LW_ALGORITHM_DISTOPT;
    o.high_busbw = false;
    return o;
}

static lw_status check_options(const lw_layout_options *o) {
    if (o->dp < 1) return lwi_fail(LW_ERR_INVALID, "layout: dp must be >= 1, got %d", o->dp);
    if (o->expert_dp < 1)
        return lwi_fail(LW_ERR_INVALID, "layout: expert_dp must be >= 1, got %d", o->expert_dp);
    if (o->dp > MAX_DP || o->expert_dp > MAX_DP)
        return lwi_fail(LW_ERR_INVALID, "layout: dp %d / expert_dp %d above the limit of %d", o->dp,
                        o->expert_dp, MAX_DP);
    if (o->bucket_size < 0)
        return lwi_fail(LW_ERR_INVALID, "layout: bucket_size must be >= 0, got %lld",
                        (long long)o->bucket_size);
    if (o->algorithm < LW_ALGORITHM_COST || o->algorithm > LW_ALGORITHM_PACKED)
        return lwi_fail(LW_ERR_INVALID, "layout: unknown algorithm %d", (int)o->algorithm);
    if (o->adamw_algorithm == LW_ALGORITHM_ROWS)
        return lwi_fail(LW_ERR_INVALID, "layout: the rows layout is for Muon buffers (it splits "
                        "matrices by rows for row-sharded Muon); AdamW buffers use distopt");
    if (o->adamw_algorithm < LW_ALGORITHM_COST ||
        (o->adamw_algorithm > LW_ALGORITHM_LEGACY && o->adamw_algorithm != LW_ALGORITHM_PACKED))
        return lwi_fail(LW_ERR_INVALID, "layout: unknown AdamW algorithm %d",
                        (int)o->adamw_algorithm);
    return LW_OK;
}

static bool valid_dtype(lw_dtype d) { return d >= LW_DTYPE_F32 && d <= LW_DTYPE_F16; }

/* The tensor-parallel fields of a spec whose shape is already checked (docs/algorithms.md
 * section 9): a TP shard names one of its dimensions, whose local size its blocks divide (or,
 * for a fused QKV weight, whose qkv rows make its blocks); a fused QKV weight is 2-D with
 * exactly groups x (q + k + v) rows. */
static lw_status check_tp(const lw_param_spec *s) {
    if (s->tp_blocks < 0)
        return lwi_fail(LW_ERR_INVALID,
                        "layout: parameter '%s' has tp_blocks %d (>= 1 for a TP shard, 0 for a "
                        "tensor replicated over TP)",
                        s->name, s->tp_blocks);
    if (s->tp_blocks > 0) {
        if (s->tp_dim < 0 || s->tp_dim >= s->ndim)
            return lwi_fail(LW_ERR_INVALID,
                            "layout: parameter '%s' is sharded over TP along dimension %d, but "
                            "it has %d dimensions (tp_dim 0 to %d)",
                            s->name, s->tp_dim, s->ndim, s->ndim - 1);
        /* a fused QKV weight's blocks are its Q, K and V rows (unequal with grouped KV heads),
           which its qkv rows say below */
        if (s->shape[s->tp_dim] % s->tp_blocks != 0 && s->qkv_groups == 0)
            return lwi_fail(LW_ERR_INVALID,
                            "layout: parameter '%s' has local size %lld along its TP dimension "
                            "%d, not a multiple of its %d TP blocks",
                            s->name, (long long)s->shape[s->tp_dim], s->tp_dim, s->tp_blocks);
    }
    if (s->qkv_groups < 0)
        return lwi_fail(LW_ERR_INVALID,
                        "layout: parameter '%s' has qkv_groups %d (>= 1 for a fused QKV weight, "
                        "0 otherwise)",
                        s->name, s->qkv_groups);
    if (s->qkv_groups == 0) return LW_OK;
    if (s->ndim != 2)
        return lwi_fail(LW_ERR_INVALID,
                        "layout: parameter '%s' is a fused QKV weight (qkv_groups %d) but has %d "
                        "dimensions (a QKV weight is 2-D)",
                        s->name, s->qkv_groups, s->ndim);
    const int64_t q = s->qkv_rows[0], k = s->qkv_rows[1], v = s->qkv_rows[2], rows = s->shape[0];
    if (q < 1 || k < 1 || v < 1 || q > rows || k > rows || v > rows)
        return lwi_fail(LW_ERR_INVALID,
                        "layout: parameter '%s' has qkv rows {%lld, %lld, %lld}: each must be "
                        "between 1 and its %lld rows",
                        s->name, (long long)q, (long long)k, (long long)v, (long long)rows);
    const int64_t group = q + k + v;
    if (rows % group != 0 || rows / group != s->qkv_groups)
        return lwi_fail(LW_ERR_INVALID,
                        "layout: parameter '%s' has %lld rows, but its %d qkv groups of %lld + "
                        "%lld + %lld rows make %.0f",
                        s->name, (long long)rows, s->qkv_groups, (long long)q, (long long)k,
                        (long long)v, (double)s->qkv_groups * (double)group);
    return LW_OK;
}

/* Copies and validates one spec; the name is copied last so that a failure owns nothing. */
static lw_status copy_spec(const lw_param_spec *s, int32_t i, lwi_param *p) {
    if (s->name == NULL || s->name[0] == '\0')
        return lwi_fail(LW_ERR_INVALID, "layout: parameter %d has no name", i);
    if (s->ndim < 1 || s->ndim > 4)
        return lwi_fail(LW_ERR_INVALID, "layout: parameter '%s' has %d dimensions (1 to 4 allowed)",
                        s->name, s->ndim);
    int64_t numel = 1;
    for (int d = 0; d < s->ndim; d++) {
        if (s->shape[d] <= 0)
            return lwi_fail(LW_ERR_INVALID,
                            "layout: parameter '%s' has size %lld in dimension %d "
                            "(sizes must be > 0)",
                            s->name, (long long)s->shape[d], d + 1);
        if (numel > MAX_PARAM_NUMEL / s->shape[d])
            return lwi_fail(LW_ERR_INVALID, "layout: parameter '%s' has more than 2^50 elements",
                            s->name);
        numel *= s->shape[d];
    }
    if (!valid_dtype(s->dtype))
        return lwi_fail(LW_ERR_INVALID, "layout: parameter '%s' has unknown dtype %d", s->name,
                        (int)s->dtype);
    if (!valid_dtype(s->grad_dtype))
        return lwi_fail(LW_ERR_INVALID, "layout: parameter '%s' has unknown grad dtype %d", s->name,
                        (int)s->grad_dtype);
    if (lw_optimizer_kind_name(s->optimizer) == NULL)
        return lwi_fail(LW_ERR_INVALID, "layout: parameter '%s' has unknown optimizer rule %d",
                        s->name, (int)s->optimizer);
    if (lw_optimizer_kind_whole(s->optimizer) && s->ndim != 2)
        return lwi_fail(LW_ERR_INVALID,
                        "layout: parameter '%s' is routed to %s, which updates whole matrices, "
                        "but has %d dimensions",
                        s->name, lw_optimizer_kind_name(s->optimizer), s->ndim);
    if (s->shared_embedding && lw_optimizer_kind_whole(s->optimizer))
        return lwi_fail(LW_ERR_INVALID,
                        "layout: parameter '%s' is a shared embedding and cannot be updated by "
                        "%s, which updates whole matrices",
                        s->name, lw_optimizer_kind_name(s->optimizer));
    lw_status st = check_tp(s);
    if (st != LW_OK) return st;
    memset(p, 0, sizeof *p);
    p->ndim = s->ndim;
    memcpy(p->shape, s->shape, sizeof p->shape);
    for (int d = s->ndim; d < 4; d++)
        p->shape[d] = 0;
    p->numel = numel;
    p->dtype = s->dtype;
    p->grad_dtype = s->grad_dtype;
    p->expert = s->expert;
    p->shared_embedding = s->shared_embedding;
    p->optimizer = s->optimizer;
    p->whole = lw_optimizer_kind_whole(s->optimizer);
    if (s->tp_blocks > 0) {
        p->tp_dim = s->tp_dim;
        p->tp_blocks = s->tp_blocks;
    }
    if (s->qkv_groups > 0) {
        p->qkv_groups = s->qkv_groups;
        memcpy(p->qkv_rows, s->qkv_rows, sizeof p->qkv_rows);
    }
    p->owner = -1;
    p->name = strdup(s->name);
    if (p->name == NULL) return lwi_fail(LW_ERR_NOMEM, "layout: out of memory");
    return LW_OK;
}

typedef struct named {
    const char *name;
    int32_t index;
} named;

static int by_name_cmp(const void *a, const void *b) {
    const named *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c != 0 ? c : (x->index > y->index) - (x->index < y->index);
}

/* Sorts the params by name for lookups and rejects duplicates. */
static lw_status index_names(lw_layout *l) {
    size_t n = (size_t)(l->n_params ? l->n_params : 1);
    named *sorted = malloc(sizeof(named) * n);
    l->by_name = malloc(sizeof(int32_t) * n);
    if (sorted == NULL || l->by_name == NULL) {
        free(sorted);
        return lwi_fail(LW_ERR_NOMEM, "layout: out of memory");
    }
    for (int32_t i = 0; i < l->n_params; i++)
        sorted[i] = (named){l->params[i].name, i};
    qsort(sorted, (size_t)l->n_params, sizeof(named), by_name_cmp);
    lw_status st = LW_OK;
    for (int32_t k = 0; k < l->n_params; k++) {
        l->by_name[k] = sorted[k].index;
        if (st == LW_OK && k > 0 && strcmp(sorted[k - 1].name, sorted[k].name) == 0)
            st = lwi_fail(LW_ERR_INVALID,
                          "layout: duplicate parameter name '%s' (parameters "
                          "%d and %d)",
                          sorted[k].name, sorted[k - 1].index + 1, sorted[k].index + 1);
    }
    free(sorted);
    return st;
}

static bool same_key(const lwi_buffer *b, const lwi_param *p) {
    return b->param_dtype == p->dtype && b->grad_dtype == p->grad_dtype && b->expert == p->expert &&
           b->optimizer == p->optimizer;
}

/* Groups params into buffers by key, in first-seen order, keeping definition order inside. */
static lw_status group_buffers(lw_layout *l) {
    l->buffers = calloc((size_t)(l->n_params ? l->n_params : 1), sizeof(lwi_buffer));
    if (l->buffers == NULL) return lwi_fail(LW_ERR_NOMEM, "layout: out of memory");
    for (int32_t i = 0; i < l->n_params; i++) {
        lwi_param *p = &l->params[i];
        int32_t k = 0;
        while (k < l->n_buffers && !same_key(&l->buffers[k], p))
            k++;
        if (k == l->n_buffers) {
            lwi_buffer *b = &l->buffers[l->n_buffers++];
            b->param_dtype = p->dtype;
            b->grad_dtype = p->grad_dtype;
            b->expert = p->expert;
            b->optimizer = p->optimizer;
            b->whole = p->whole;
            b->algorithm = p->whole ? l->opts.algorithm : l->opts.adamw_algorithm;
            b->dp = p->expert ? l->opts.expert_dp : l->opts.dp;
        }
        p->buffer = k;
        l->buffers[k].n_params++;
    }
    for (int32_t k = 0; k < l->n_buffers; k++) {
        lwi_buffer *b = &l->buffers[k];
        b->params = malloc(sizeof(int32_t) * (size_t)b->n_params);
        b->placed = malloc(sizeof(int32_t) * (size_t)b->n_params);
        b->buckets = calloc((size_t)b->n_params, sizeof(lwi_bucket));
        if (b->params == NULL || b->placed == NULL || b->buckets == NULL)
            return lwi_fail(LW_ERR_NOMEM, "layout: out of memory");
        b->n_params = 0;
    }
    for (int32_t i = 0; i < l->n_params; i++) {
        lwi_buffer *b = &l->buffers[l->params[i].buffer];
        b->params[b->n_params++] = i;
    }
    return LW_OK;
}

static lw_status lay_out_buffer(lw_layout *l, lwi_buffer *b) {
    switch (b->algorithm) {
    case LW_ALGORITHM_DEFAULT:
        return lwi_layout_default(l, b);
    case LW_ALGORITHM_LEGACY:
        return lwi_layout_legacy(l, b);
    case LW_ALGORITHM_DISTOPT:
        return lwi_layout_distopt(l, b);
    case LW_ALGORITHM_ROWS:
        return lwi_layout_rows(l, b);
    case LW_ALGORITHM_PACKED:
        return lwi_layout_packed(l, b);
    default:
        return lwi_layout_aligned(l, b);
    }
}

lw_status lw_layout_new(const lw_param_spec *specs, int32_t n, const lw_layout_options *opts,
                        lw_layout **out) {
    if (out == NULL) return lwi_fail(LW_ERR_INVALID, "layout: out pointer is NULL");
    *out = NULL;
    if (n < 0) return lwi_fail(LW_ERR_INVALID, "layout: negative parameter count %d", n);
    if (n > 0 && specs == NULL) return lwi_fail(LW_ERR_INVALID, "layout: specs is NULL");
    const lw_layout_options d = lw_layout_defaults();
    lw_layout_options o;
    lw_status st = lwi_options_read("layout", &lwi_layout_options_kind, opts, &d, &o);
    if (st != LW_OK) return st;
    st = check_options(&o);
    if (st != LW_OK) return st;

    lw_layout *l = calloc(1, sizeof *l);
    if (l == NULL) return lwi_fail(LW_ERR_NOMEM, "layout: out of memory");
    l->opts = o;
    l->params = calloc((size_t)(n ? n : 1), sizeof(lwi_param));
    if (l->params == NULL) {
        st = lwi_fail(LW_ERR_NOMEM, "layout: out of memory");
        goto fail;
    }
    int64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        if ((st = copy_spec(&specs[i], i + 1, &l->params[i])) != LW_OK) goto fail;
        l->n_params++;
        total += l->params[i].numel;
        if (total > MAX_TOTAL_NUMEL) {
            st = lwi_fail(LW_ERR_INVALID, "layout: parameters total more than 2^52 elements");
            goto fail;
        }
    }
    if ((st = index_names(l)) != LW_OK) goto fail;
    if ((st = group_buffers(l)) != LW_OK) goto fail;
    for (int32_t k = 0; k < l->n_buffers; k++)
        if ((st = lay_out_buffer(l, &l->buffers[k])) != LW_OK) goto fail;

    l->stats.ranks = o.dp > o.expert_dp ? o.dp : o.expert_dp;
    l->rank_numel = calloc((size_t)l->stats.ranks, sizeof(int64_t));
    l->rank_cost = calloc((size_t)l->stats.ranks, sizeof(double));
    if (l->rank_numel == NULL || l->rank_cost == NULL) {
        st = lwi_fail(LW_ERR_NOMEM, "layout: out of memory");
        goto fail;
    }
    lwi_layout_compute_stats(l);
    *out = l;
    return LW_OK;
fail:
    lw_layout_free(l);
    return st;
}

void lw_layout_free(lw_layout *l) {
    if (l == NULL) return;
    for (int32_t i = 0; i < l->n_params; i++)
        free(l->params[i].name);
    if (l->buffers != NULL) {
        for (int32_t k = 0; k < l->n_buffers; k++) {
            free(l->buffers[k].params);
            free(l->buffers[k].placed);
            for (int32_t j = 0; l->buffers[k].buckets && j < l->buffers[k].n_buckets; j++)
                free(l->buffers[k].buckets[j].shards);
            free(l->buffers[k].buckets);
        }
    }
    free(l->buffers);
    free(l->params);
    free(l->by_name);
    free(l->rank_numel);
    free(l->rank_cost);
    free(l);
}

/* ---- read access --------------------------------------------------------------------------- */

lw_layout_options lw_layout_get_options(const lw_layout *l) { return l->opts; }
int32_t lw_layout_num_params(const lw_layout *l) { return l ? l->n_params : 0; }
int32_t lw_layout_num_buffers(const lw_layout *l) { return l ? l->n_buffers : 0; }

static lw_status check_buffer(const lw_layout *l, int32_t buffer) {
    if (l == NULL) return lwi_fail(LW_ERR_INVALID, "layout: layout is NULL");
    if (buffer < 0 || buffer >= l->n_buffers)
        return lwi_fail(LW_ERR_RANGE, "layout: buffer index %d out of range [0, %d)", buffer,
                        l->n_buffers);
    return LW_OK;
}

static lw_status check_bucket(const lw_layout *l, int32_t buffer, int32_t bucket) {
    lw_status st = check_buffer(l, buffer);
    if (st != LW_OK) return st;
    if (bucket < 0 || bucket >= l->buffers[buffer].n_buckets)
        return lwi_fail(LW_ERR_RANGE, "layout: bucket index %d out of range [0, %d) in buffer %d",
                        bucket, l->buffers[buffer].n_buckets, buffer);
    return LW_OK;
}

static lw_status check_param(const lw_layout *l, int32_t param) {
    if (l == NULL) return lwi_fail(LW_ERR_INVALID, "layout: layout is NULL");
    if (param < 0 || param >= l->n_params)
        return lwi_fail(LW_ERR_RANGE, "layout: parameter index %d out of range [0, %d)", param,
                        l->n_params);
    return LW_OK;
}

lw_status lw_layout_buffer(const lw_layout *l, int32_t buffer, lw_buffer_info *out) {
    lw_status st = check_buffer(l, buffer);
    if (st != LW_OK) return st;
    const lwi_buffer *b = &l->buffers[buffer];
    out->param_dtype = b->param_dtype;
    out->grad_dtype = b->grad_dtype;
    out->expert = b->expert;
    out->optimizer = b->optimizer;
    out->whole = b->whole;
    out->algorithm = b->algorithm;
    out->dp = b->dp;
    out->numel = b->numel;
    out->n_buckets = b->n_buckets;
    out->n_params = b->n_params;
    return LW_OK;
}

lw_status lw_layout_bucket(const lw_layout *l, int32_t buffer, int32_t bucket,
                           lw_bucket_info *out) {
    lw_status st = check_bucket(l, buffer, bucket);
    if (st != LW_OK) return st;
    const lwi_bucket *k = &l->buffers[buffer].buckets[bucket];
    out->start = k->start;
    out->stop = k->stop;
    out->shard_size = k->shard_size;
    out->numel_unpadded = k->numel_unpadded;
    out->n_params = k->count;
    return LW_OK;
}

lw_status lw_layout_shard(const lw_layout *l, int32_t buffer, int32_t bucket, int32_t rank,
                          int64_t *start, int64_t *count) {
    lw_status st = check_bucket(l, buffer, bucket);
    if (st != LW_OK) return st;
    if (start == NULL || count == NULL)
        return lwi_fail(LW_ERR_INVALID, "layout: start and count must not be NULL");
    const lwi_buffer *b = &l->buffers[buffer];
    const lwi_bucket *k = &b->buckets[bucket];
    if (rank < 0 || rank >= b->dp)
        return lwi_fail(LW_ERR_RANGE, "layout: rank %d out of range [0, %d) of buffer %d", rank,
                        b->dp, buffer);
    if (k->shards != NULL) {
        *start = k->shards[rank];
        *count = k->shards[rank + 1] - k->shards[rank];
    } else if (k->shard_size == k->stop - k->start) { /* unsharded, or dp 1 */
        *start = k->start;
        *count = k->shard_size;
    } else {
        *start = k->start + (int64_t)rank * k->shard_size;
        *count = k->shard_size;
    }
    return LW_OK;
}

lw_status lw_layout_bucket_param(const lw_layout *l, int32_t buffer, int32_t bucket, int32_t k,
                                 int32_t *param) {
    lw_status st = check_bucket(l, buffer, bucket);
    if (st != LW_OK) return st;
    const lwi_buffer *b = &l->buffers[buffer];
    const lwi_bucket *bk = &b->buckets[bucket];
    if (k < 0 || k >= bk->count)
        return lwi_fail(LW_ERR_RANGE, "layout: entry %d out of range [0, %d) in bucket %d", k,
                        bk->count, bucket);
    *param = b->placed[bk->first + k];
    return LW_OK;
}

lw_status lw_layout_place(const lw_layout *l, int32_t param, lw_param_place *out) {
    lw_status st = check_param(l, param);
    if (st != LW_OK) return st;
    const lwi_param *p = &l->params[param];
    out->buffer = p->buffer;
    out->bucket = p->bucket;
    out->start = p->start;
    out->stop = p->start + p->numel;
    out->owner = p->owner;
    return LW_OK;
}

lw_status lw_layout_find(const lw_layout *l, const char *name, int32_t *param) {
    if (l == NULL || name == NULL)
        return lwi_fail(LW_ERR_INVALID, "layout: layout or name is NULL");
    int32_t lo = 0, hi = l->n_params;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        int c = strcmp(l->params[l->by_name[mid]].name, name);
        if (c == 0) {
            *param = l->by_name[mid];
            return LW_OK;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lwi_fail(LW_ERR_RANGE, "layout: no parameter named '%s'", name);
}

lw_status lw_layout_param_name(const lw_layout *l, int32_t param, const char **name) {
    lw_status st = check_param(l, param);
    if (st != LW_OK) return st;
    *name = l->params[param].name;
    return LW_OK;
}
