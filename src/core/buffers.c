/* buffers.c: the flat parameter and gradient arrays of a layout, and their synchronisation per
 * bucket group (one group per bucket). Groups are numbered in forward order (by the first
 * parameter each holds); gradients sync in the reverse order, parameters in forward order, so
 * every rank issues the same collectives in the same sequence whatever order its gradients
 * arrive in. Does not update parameters: that is the optimizer's (optimizer.c). */
#include "comm_internal.h"
#include "layout_internal.h"

#include <stdlib.h>
#include <string.h>

typedef enum sync_kind {
    SYNC_SHARDED,    /* reduce-scatter gradients, all-gather parameters */
    SYNC_REPLICATED, /* all-reduce gradients; every rank updates everything */
    SYNC_LEGACY      /* all-reduce gradients; gather updated params with all-gather-v */
} sync_kind;

typedef struct buffer {
    float *param; /* [owned] numel, 64-byte aligned, zero padding */
    float *grad;  /* [owned] */
    int64_t numel;
    lw_comm *comm; /* [borrowed] the group that shards it */
    sync_kind kind;
    /* legacy: params in (owner, definition) order and per-rank element counts */
    int32_t *by_owner; /* [owned] */
    int64_t *counts;   /* [owned] dp entries */
    float *pack;       /* [owned] this rank's owned params, packed */
    float *gathered;   /* [owned] every rank's, in rank order */
} buffer;

typedef struct group {
    int32_t buffer;
    int64_t start; /* bucket range in its buffer */
    int64_t count;
    int32_t n_params;
    int32_t ready; /* params whose gradient arrived this step */
    lw_request *req; /* [owned] grad sync in backward, param sync after the step: never both */
    bool grad_started;
    bool param_started;
} group;

typedef struct param_info {
    int32_t buffer;
    int32_t group;
    int64_t start;
    int64_t numel;
    bool ready;
} param_info;

struct lw_buffers {
    const lw_layout *layout;
    lw_comm *comm;
    lw_buffers_options o;
    int32_t n_buffers;
    buffer *buffers;     /* [owned] */
    int32_t n_params;
    param_info *params;  /* [owned] */
    int32_t n_groups;
    group *groups;       /* [owned] forward order */
    int32_t next_grad;   /* groups above this index have started their gradient sync */
    int32_t next_param;  /* groups below this index have started their parameter sync */
    int32_t param_done;  /* groups below this index have their parameters */
};

lw_buffers_options lw_buffers_defaults(void) {
    lw_buffers_options o = {true, true};
    return o;
}

static sync_kind kind_of(lw_algorithm a) {
    if (a == LW_ALGORITHM_DEFAULT) return SYNC_REPLICATED;
    if (a == LW_ALGORITHM_LEGACY) return SYNC_LEGACY;
    return SYNC_SHARDED;
}

static float *alloc_zeroed(int64_t n) {
    size_t bytes = ((size_t)(n > 0 ? n : 1) * sizeof(float) + 63) / 64 * 64;
    float *p = aligned_alloc(64, bytes);
    if (p != NULL) memset(p, 0, bytes);
    return p;
}

/* Every rank must hold the same layout: compare against rank 0's hash (collective). */
static lw_status check_same_layout(const lw_layout *l, lw_comm *comm) {
    char mine[17], root[17];
    lw_status st = lw_layout_hash(l, mine);
    if (st != LW_OK) return st;
    memcpy(root, mine, sizeof root);
    if ((st = lw_comm_broadcast(comm, root, sizeof root, 0)) != LW_OK) return st;
    int64_t differs = strcmp(mine, root) != 0;
    if ((st = lw_comm_allreduce(comm, &differs, 1, LW_DTYPE_I64, LW_REDUCE_SUM)) != LW_OK)
        return st;
    if (differs == 0) return LW_OK;
    if (strcmp(mine, root) != 0)
        return lwi_fail(LW_ERR_INVALID, "buffers: the layout hash on rank %d (%s) differs from "
                        "rank 0's (%s): every rank must compute the layout from the same specs "
                        "and options", lw_comm_rank(comm), mine, root);
    return lwi_fail(LW_ERR_INVALID, "buffers: the layout hash of %lld rank(s) differs from rank "
                    "0's (%s): every rank must compute the layout from the same specs and "
                    "options", (long long)differs, root);
}

static lw_status check_fits(const lw_layout *l, lw_comm *comm, lw_comm *expert_comm) {
    if (lw_comm_size(comm) != l->opts.dp)
        return lwi_fail(LW_ERR_INVALID, "buffers: the layout is for dp %d but the communicator "
                        "has %d ranks", l->opts.dp, lw_comm_size(comm));
    for (int32_t b = 0; b < l->n_buffers; b++)
        if (l->buffers[b].expert && lw_comm_size(expert_comm) != l->opts.expert_dp)
            return lwi_fail(LW_ERR_INVALID, "buffers: the layout's expert_dp is %d but the expert "
                            "communicator has %d ranks (pass one of that size)",
                            l->opts.expert_dp, lw_comm_size(expert_comm));
    for (int32_t i = 0; i < l->n_params; i++) {
        const lwi_param *p = &l->params[i];
        if (p->dtype != LW_DTYPE_F32 || p->grad_dtype != LW_DTYPE_F32)
            return lwi_fail(LW_ERR_UNSUPPORTED, "buffers: '%s' is not f32; host buffers hold "
                            "f32 parameters and gradients", p->name);
    }
    return LW_OK;
}

/* Legacy: the order in which the variable-size all-gather lays params out (by owner, then by
 * definition) and how many elements each rank contributes. */
static lw_status prepare_legacy(lw_buffers *bs, int32_t bi) {
    const lwi_buffer *lb = &bs->layout->buffers[bi];
    buffer *b = &bs->buffers[bi];
    b->by_owner = malloc(sizeof(int32_t) * (size_t)lb->n_params);
    b->counts = calloc((size_t)lb->dp, sizeof(int64_t));
    if (b->by_owner == NULL || b->counts == NULL) return lwi_fail(LW_ERR_NOMEM, "buffers: out of memory");
    int32_t k = 0;
    for (int32_t r = 0; r < lb->dp; r++)
        for (int32_t j = 0; j < lb->n_params; j++) {
            const lwi_param *p = &bs->layout->params[lb->params[j]];
            if (p->owner != r) continue;
            b->by_owner[k++] = lb->params[j];
            b->counts[r] += p->numel;
        }
    b->pack = alloc_zeroed(b->counts[lw_comm_rank(b->comm)]);
    b->gathered = alloc_zeroed(b->numel);
    return b->pack && b->gathered ? LW_OK : lwi_fail(LW_ERR_NOMEM, "buffers: out of memory");
}

/* One group per bucket, in forward order: by the smallest definition index it holds. */
static lw_status make_groups(lw_buffers *bs) {
    const lw_layout *l = bs->layout;
    int32_t n = 0;
    for (int32_t b = 0; b < l->n_buffers; b++) n += l->buffers[b].n_buckets;
    bs->groups = calloc((size_t)(n ? n : 1), sizeof(group));
    int32_t *first = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (bs->groups == NULL || first == NULL) {
        free(first);
        return lwi_fail(LW_ERR_NOMEM, "buffers: out of memory");
    }
    /* rank the buckets by their first-defined param: counting through params in definition
     * order meets each bucket first at that param */
    int32_t *slot = calloc((size_t)(n ? n : 1), sizeof(int32_t));
    int32_t *base = calloc((size_t)l->n_buffers + 1, sizeof(int32_t));
    lw_status st = LW_OK;
    if (slot == NULL || base == NULL) st = lwi_fail(LW_ERR_NOMEM, "buffers: out of memory");
    for (int32_t b = 0; st == LW_OK && b < l->n_buffers; b++)
        base[b + 1] = base[b] + l->buffers[b].n_buckets;
    for (int32_t k = 0; st == LW_OK && k < n; k++) slot[k] = -1;
    int32_t next = 0;
    for (int32_t i = 0; st == LW_OK && i < l->n_params; i++) {
        const lwi_param *p = &l->params[i];
        int32_t key = base[p->buffer] + p->bucket;
        if (slot[key] < 0) {
            slot[key] = next;
            first[next] = key;
            next++;
        }
    }
    for (int32_t b = 0; st == LW_OK && b < l->n_buffers; b++)
        for (int32_t k = 0; k < l->buffers[b].n_buckets; k++) {
            group *g = &bs->groups[slot[base[b] + k]];
            const lwi_bucket *bk = &l->buffers[b].buckets[k];
            g->buffer = b;
            g->start = bk->start;
            g->count = bk->stop - bk->start;
            g->n_params = bk->count;
            if ((st = lw_request_new(&g->req)) != LW_OK) break;
            bs->n_groups++;
        }
    for (int32_t i = 0; st == LW_OK && i < l->n_params; i++) {
        const lwi_param *p = &l->params[i];
        param_info *pi = &bs->params[i];
        pi->buffer = p->buffer;
        pi->group = slot[base[p->buffer] + p->bucket];
        pi->start = p->start;
        pi->numel = p->numel;
    }
    free(first);
    free(slot);
    free(base);
    return st;
}

lw_status lw_buffers_new(const lw_layout *layout, lw_comm *comm, lw_comm *expert_comm,
                         const lw_buffers_options *opts, lw_buffers **out) {
    if (out == NULL || layout == NULL || comm == NULL)
        return lwi_fail(LW_ERR_INVALID, "buffers: layout, comm and out must not be NULL");
    *out = NULL;
    if (expert_comm == NULL) expert_comm = comm;
    lw_status st = check_same_layout(layout, comm);
    if (st != LW_OK || (st = check_fits(layout, comm, expert_comm)) != LW_OK) return st;

    lw_buffers *bs = calloc(1, sizeof *bs);
    if (bs == NULL) return lwi_fail(LW_ERR_NOMEM, "buffers: out of memory");
    bs->layout = layout;
    bs->comm = comm;
    bs->o = opts ? *opts : lw_buffers_defaults();
    bs->n_params = layout->n_params;
    bs->buffers = calloc((size_t)(layout->n_buffers ? layout->n_buffers : 1), sizeof(buffer));
    bs->params = calloc((size_t)(bs->n_params ? bs->n_params : 1), sizeof(param_info));
    if (bs->buffers == NULL || bs->params == NULL) {
        st = lwi_fail(LW_ERR_NOMEM, "buffers: out of memory");
        goto fail;
    }
    bs->n_buffers = layout->n_buffers;
    for (int32_t b = 0; b < bs->n_buffers; b++) {
        const lwi_buffer *lb = &layout->buffers[b];
        buffer *buf = &bs->buffers[b];
        buf->numel = lb->numel;
        buf->comm = lb->expert ? expert_comm : comm;
        buf->kind = kind_of(lb->algorithm);
        buf->param = alloc_zeroed(lb->numel);
        buf->grad = alloc_zeroed(lb->numel);
        if (buf->param == NULL || buf->grad == NULL) {
            st = lwi_fail(LW_ERR_NOMEM, "buffers: out of memory for buffer #%d (%lld elements)",
                          b + 1, (long long)lb->numel);
            goto fail;
        }
        if (buf->kind == SYNC_LEGACY && (st = prepare_legacy(bs, b)) != LW_OK) goto fail;
    }
    if ((st = make_groups(bs)) != LW_OK) goto fail;
    bs->next_grad = bs->n_groups - 1;
    bs->next_param = bs->param_done = bs->n_groups;
    *out = bs;
    return LW_OK;
fail:
    lw_buffers_free(bs);
    return st;
}

void lw_buffers_free(lw_buffers *bs) {
    if (bs == NULL) return;
    for (int32_t g = 0; g < bs->n_groups; g++) lw_request_free(bs->groups[g].req);
    for (int32_t b = 0; b < bs->n_buffers; b++) {
        buffer *buf = &bs->buffers[b];
        free(buf->param);
        free(buf->grad);
        free(buf->by_owner);
        free(buf->counts);
        free(buf->pack);
        free(buf->gathered);
    }
    free(bs->buffers);
    free(bs->params);
    free(bs->groups);
    free(bs);
}

const lw_layout *lw_buffers_layout(const lw_buffers *bs) { return bs ? bs->layout : NULL; }
lw_comm *lw_buffers_comm(const lw_buffers *bs) { return bs ? bs->comm : NULL; }
int32_t lw_buffers_num_groups(const lw_buffers *bs) { return bs ? bs->n_groups : 0; }

static lw_status check_param(const lw_buffers *bs, int32_t param) {
    if (bs == NULL) return lwi_fail(LW_ERR_INVALID, "buffers: NULL buffers");
    if (param < 0 || param >= bs->n_params)
        return lwi_fail(LW_ERR_RANGE, "buffers: parameter index %d out of range [0, %d)", param,
                        bs->n_params);
    return LW_OK;
}

lw_status lw_buffers_param(lw_buffers *bs, int32_t param, float **data) {
    lw_status st = check_param(bs, param);
    if (st != LW_OK) return st;
    *data = bs->buffers[bs->params[param].buffer].param + bs->params[param].start;
    return LW_OK;
}

lw_status lw_buffers_grad(lw_buffers *bs, int32_t param, float **data) {
    lw_status st = check_param(bs, param);
    if (st != LW_OK) return st;
    *data = bs->buffers[bs->params[param].buffer].grad + bs->params[param].start;
    return LW_OK;
}

static lw_status check_buffer(const lw_buffers *bs, int32_t b) {
    if (bs == NULL) return lwi_fail(LW_ERR_INVALID, "buffers: NULL buffers");
    if (b < 0 || b >= bs->n_buffers)
        return lwi_fail(LW_ERR_RANGE, "buffers: buffer index %d out of range [0, %d)", b,
                        bs->n_buffers);
    return LW_OK;
}

lw_status lw_buffers_param_array(lw_buffers *bs, int32_t b, float **data) {
    lw_status st = check_buffer(bs, b);
    if (st == LW_OK) *data = bs->buffers[b].param;
    return st;
}

lw_status lw_buffers_grad_array(lw_buffers *bs, int32_t b, float **data) {
    lw_status st = check_buffer(bs, b);
    if (st == LW_OK) *data = bs->buffers[b].grad;
    return st;
}

lw_status lw_buffers_param_group(const lw_buffers *bs, int32_t param, int32_t *out) {
    lw_status st = check_param(bs, param);
    if (st == LW_OK) *out = bs->params[param].group;
    return st;
}

lw_status lw_buffers_owned(const lw_buffers *bs, int32_t param, int64_t *start, int64_t *count) {
    lw_status st = check_param(bs, param);
    if (st != LW_OK) return st;
    const lwi_param *p = &bs->layout->params[param];
    const lwi_buffer *lb = &bs->layout->buffers[p->buffer];
    int32_t rank = lw_comm_rank(bs->buffers[p->buffer].comm);
    *start = 0;
    *count = 0;
    if (lb->algorithm == LW_ALGORITHM_DEFAULT) {
        *count = p->numel;
    } else if (lb->algorithm == LW_ALGORITHM_DISTOPT) {
        const lwi_bucket *k = &lb->buckets[p->bucket];
        int64_t lo = k->start + rank * k->shard_size, hi = lo + k->shard_size;
        if (lo < p->start) lo = p->start;
        if (hi > p->start + p->numel) hi = p->start + p->numel;
        if (hi > lo) {
            *start = lo - p->start;
            *count = hi - lo;
        }
    } else if (p->owner == rank) {
        *count = p->numel;
    }
    return LW_OK;
}

/* ---- gradient sync -------------------------------------------------------------------------- */

static lw_status start_grad(lw_buffers *bs, int32_t gi) {
    group *g = &bs->groups[gi];
    buffer *b = &bs->buffers[g->buffer];
    float *bucket = b->grad + g->start;
    const int32_t dp = lw_comm_size(b->comm);
    if (dp > 1) lw_vec_scale(bucket, g->count, 1.0f / (float)dp);
    g->grad_started = true;
    if (b->kind == SYNC_SHARDED) return lw_comm_reduce_scatter(b->comm, bucket, g->count, g->req);
    return lw_comm_allreduce_start(b->comm, bucket, g->count, g->req);
}

/* Starts the gradient syncs, in backprop order, of every group that is complete and has no
 * incomplete group before it in that order. */
static lw_status start_ready_grads(lw_buffers *bs) {
    while (bs->next_grad >= 0 && bs->groups[bs->next_grad].ready == bs->groups[bs->next_grad].n_params) {
        lw_status st = start_grad(bs, bs->next_grad);
        bs->next_grad--;
        if (st != LW_OK) return st;
    }
    return LW_OK;
}

lw_status lw_buffers_progress(lw_buffers *bs) {
    if (bs == NULL) return lwi_fail(LW_ERR_INVALID, "buffers: NULL buffers");
    for (int32_t g = 0; g < bs->n_groups; g++) {
        bool done;
        lw_status st = lw_request_test(bs->groups[g].req, &done);
        if (st != LW_OK) return st;
    }
    return LW_OK;
}

lw_status lw_buffers_grad_ready(lw_buffers *bs, int32_t param) {
    lw_status st = check_param(bs, param);
    if (st != LW_OK) return st;
    param_info *p = &bs->params[param];
    if (p->ready)
        return lwi_fail(LW_ERR_STATE, "buffers: gradient of '%s' reported ready twice in one step",
                        bs->layout->params[param].name);
    p->ready = true;
    bs->groups[p->group].ready++;
    if (bs->o.overlap_grad && (st = start_ready_grads(bs)) != LW_OK) return st;
    return lw_buffers_progress(bs);
}

static lw_status wait_all(lw_buffers *bs) {
    lw_status first = LW_OK;
    for (int32_t g = bs->n_groups - 1; g >= 0; g--) {
        lw_status st = lw_request_wait(bs->groups[g].req);
        if (first == LW_OK) first = st;
    }
    return first;
}

static void reset_grad_state(lw_buffers *bs) {
    for (int32_t i = 0; i < bs->n_params; i++) bs->params[i].ready = false;
    for (int32_t g = 0; g < bs->n_groups; g++) {
        bs->groups[g].ready = 0;
        bs->groups[g].grad_started = false;
    }
    bs->next_grad = bs->n_groups - 1;
}

lw_status lw_buffers_finish_grad_sync(lw_buffers *bs) {
    if (bs == NULL) return lwi_fail(LW_ERR_INVALID, "buffers: NULL buffers");
    lw_status st = LW_OK;
    /* groups whose gradients never all arrived take part too, so no rank waits alone */
    while (st == LW_OK && bs->next_grad >= 0) st = start_grad(bs, bs->next_grad--);
    lw_status waited = wait_all(bs);
    reset_grad_state(bs);
    return st != LW_OK ? st : waited;
}

lw_status lw_buffers_zero_grad(lw_buffers *bs) {
    if (bs == NULL) return lwi_fail(LW_ERR_INVALID, "buffers: NULL buffers");
    lw_status st = wait_all(bs);
    for (int32_t b = 0; b < bs->n_buffers; b++)
        memset(bs->buffers[b].grad, 0, sizeof(float) * (size_t)bs->buffers[b].numel);
    reset_grad_state(bs);
    return st;
}

/* ---- parameter sync ------------------------------------------------------------------------- */

static lw_status start_param(lw_buffers *bs, int32_t gi) {
    group *g = &bs->groups[gi];
    buffer *b = &bs->buffers[g->buffer];
    g->param_started = true;
    if (b->kind != SYNC_SHARDED) return LW_OK;
    return lw_comm_allgather(b->comm, b->param + g->start, g->count, LW_DTYPE_F32, g->req);
}

/* Legacy: each rank packs the params it owns, all ranks gather, everyone unpacks. */
static lw_status gather_legacy(lw_buffers *bs, int32_t bi) {
    buffer *b = &bs->buffers[bi];
    const lw_layout *l = bs->layout;
    const int32_t rank = lw_comm_rank(b->comm);
    const int32_t n = l->buffers[bi].n_params;
    int64_t at = 0;
    for (int32_t k = 0; k < n; k++) {
        const lwi_param *p = &l->params[b->by_owner[k]];
        if (p->owner != rank) continue;
        memcpy(b->pack + at, b->param + p->start, sizeof(float) * (size_t)p->numel);
        at += p->numel;
    }
    lw_status st = lw_comm_allgatherv(b->comm, b->pack, at, b->gathered, b->counts);
    if (st != LW_OK) return st;
    at = 0;
    for (int32_t k = 0; k < n; k++) {
        const lwi_param *p = &l->params[b->by_owner[k]];
        memcpy(b->param + p->start, b->gathered + at, sizeof(float) * (size_t)p->numel);
        at += p->numel;
    }
    return LW_OK;
}

lw_status lw_buffers_start_param_sync(lw_buffers *bs) {
    if (bs == NULL) return lwi_fail(LW_ERR_INVALID, "buffers: NULL buffers");
    lw_status st = lw_buffers_finish_param_sync(bs, -1);
    for (int32_t b = 0; st == LW_OK && b < bs->n_buffers; b++)
        if (bs->buffers[b].kind == SYNC_LEGACY) st = gather_legacy(bs, b);
    if (st != LW_OK) return st;
    for (int32_t g = 0; g < bs->n_groups; g++) bs->groups[g].param_started = false;
    bs->next_param = bs->param_done = 0;
    if (bs->n_groups == 0) return LW_OK;
    if (!bs->o.overlap_param) return lw_buffers_finish_param_sync(bs, -1);
    bs->next_param = 1;
    return start_param(bs, 0);
}

lw_status lw_buffers_finish_param_sync(lw_buffers *bs, int32_t gi) {
    if (bs == NULL) return lwi_fail(LW_ERR_INVALID, "buffers: NULL buffers");
    if (gi < -1 || gi >= bs->n_groups)
        return lwi_fail(LW_ERR_RANGE, "buffers: group %d out of range [0, %d)", gi, bs->n_groups);
    if (gi == -1) gi = bs->n_groups - 1;
    lw_status st = LW_OK;
    for (int32_t k = bs->param_done; st == LW_OK && k <= gi; k++) {
        if (k >= bs->next_param) {
            st = start_param(bs, k);
            bs->next_param = k + 1;
        }
        if (st == LW_OK) st = lw_request_wait(bs->groups[k].req);
        if (st == LW_OK) bs->param_done = k + 1;
    }
    /* prefetch: the group forward needs next gathers while this one computes */
    if (st == LW_OK && bs->param_done == gi + 1 && bs->next_param == gi + 1 &&
        bs->next_param < bs->n_groups) {
        st = start_param(bs, bs->next_param);
        bs->next_param++;
    }
    return st;
}
