/* buffers.c: the flat parameter and gradient arrays of a layout, and their synchronisation per
 * bucket group (one group per bucket). Groups are numbered in forward order (by the first
 * parameter each holds); gradients sync in the reverse order, parameters in forward order, so
 * every rank issues the same collectives in the same sequence whatever order its gradients
 * arrive in. ZeRO-2/3 residency (group blocks) is in sharded.c. Does not update
 * parameters: that is the optimizer's (optimizer.c). */
#include "buffers/buffers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef lwi_buf buffer;
typedef lwi_group group;
typedef lwi_param_info param_info;

lw_buffers_options lw_buffers_defaults(void) {
    lw_buffers_options o = {true, true, 1, NULL};
    return o;
}

static sync_kind kind_of(lw_algorithm a) {
    if (a == LW_ALGORITHM_DEFAULT) return SYNC_REPLICATED;
    if (a == LW_ALGORITHM_LEGACY) return SYNC_LEGACY;
    return SYNC_SHARDED;
}

/* n zeroed floats of the buffers' device (NULL when that fails: callers say what for). */
static float *alloc_zeroed(lw_buffers *bs, int64_t n) {
    void *p = NULL;
    return lw_device_alloc(bs->device, (int64_t)sizeof(float) * n, &p) == LW_OK ? p : NULL;
}

/* Every rank must hold the same layout: compare against rank 0's hash (collective). */
static lw_status check_same_layout(const lw_layout *l, lw_comm *comm) {
    char mine[17], root[17];
    lw_status st = lw_layout_hash(l, mine);
    if (st != LW_OK) return st;
    memcpy(root, mine, sizeof root);
    lw_comm_set_label(comm, "the layout hash");
    if ((st = lw_comm_broadcast(comm, root, sizeof root, 0)) != LW_OK) return st;
    int64_t differs = strcmp(mine, root) != 0;
    lw_comm_set_label(comm, "the layout hash check");
    if ((st = lw_comm_allreduce(comm, &differs, 1, LW_DTYPE_I64, LW_REDUCE_SUM)) != LW_OK)
        return st;
    if (differs == 0) return LW_OK;
    if (strcmp(mine, root) != 0)
        return lwi_fail(LW_ERR_INVALID,
                        "buffers: the layout hash on rank %d (%s) differs from "
                        "rank 0's (%s): every rank must compute the layout from the same specs "
                        "and options",
                        lw_comm_rank(comm), mine, root);
    return lwi_fail(LW_ERR_INVALID,
                    "buffers: the layout hash of %lld rank(s) differs from rank "
                    "0's (%s): every rank must compute the layout from the same specs and "
                    "options",
                    (long long)differs, root);
}

static lw_status check_fits(const lw_layout *l, lw_comm *comm, lw_comm *expert_comm) {
    if (lw_comm_size(comm) != l->opts.dp)
        return lwi_fail(LW_ERR_INVALID,
                        "buffers: the layout is for dp %d but the communicator "
                        "has %d rank%s",
                        l->opts.dp, lw_comm_size(comm), lw_comm_size(comm) == 1 ? "" : "s");
    for (int32_t b = 0; b < l->n_buffers; b++)
        if (l->buffers[b].expert && lw_comm_size(expert_comm) != l->opts.expert_dp)
            return lwi_fail(LW_ERR_INVALID,
                            "buffers: the layout's expert_dp is %d but the expert "
                            "communicator has %d rank%s (pass one of that size)",
                            l->opts.expert_dp, lw_comm_size(expert_comm),
                            lw_comm_size(expert_comm) == 1 ? "" : "s");
    for (int32_t i = 0; i < l->n_params; i++) {
        const lwi_param *p = &l->params[i];
        if (p->dtype != LW_DTYPE_F32 || p->grad_dtype != LW_DTYPE_F32)
            return lwi_fail(LW_ERR_UNSUPPORTED,
                            "buffers: '%s' is not f32; host buffers hold "
                            "f32 parameters and gradients",
                            p->name);
    }
    return LW_OK;
}

/* The layout fixed the mode, sharding and algorithms; what the ZeRO level needs of them is a
 * rule of lw_runtime_check, with the other choices at their defaults. */
static lw_status check_zero(const lw_layout *l, int32_t zero) {
    lw_runtime_options r = lw_runtime_defaults();
    r.zero = zero;
    return lw_runtime_check(&r, l);
}

/* Legacy: the order in which the variable-size all-gather lays params out (by owner, then by
 * definition) and how many elements each rank contributes. */
static lw_status prepare_legacy(lw_buffers *bs, int32_t bi) {
    const lwi_buffer *lb = &bs->layout->buffers[bi];
    buffer *b = &bs->buffers[bi];
    b->by_owner = malloc(sizeof(int32_t) * (size_t)lb->n_params);
    b->counts = calloc((size_t)lb->dp, sizeof(int64_t));
    if (b->by_owner == NULL || b->counts == NULL)
        return lwi_fail(LW_ERR_NOMEM, "buffers: out of memory");
    int32_t k = 0;
    for (int32_t r = 0; r < lb->dp; r++)
        for (int32_t j = 0; j < lb->n_params; j++) {
            const lwi_param *p = &bs->layout->params[lb->params[j]];
            if (p->owner != r) continue;
            b->by_owner[k++] = lb->params[j];
            b->counts[r] += p->numel;
        }
    b->pack = alloc_zeroed(bs, b->counts[lw_comm_rank(b->comm)]);
    b->gathered = alloc_zeroed(bs, b->numel);
    return b->pack && b->gathered ? LW_OK : lwi_fail(LW_ERR_NOMEM, "buffers: out of memory");
}

/* Elements of this rank's shards of every bucket of buffer b (numel / dp for equal shards). */
static lw_status shards_length(const lw_layout *l, int32_t b, int32_t rank, int64_t *len) {
    *len = 0;
    for (int32_t k = 0; k < l->buffers[b].n_buckets; k++) {
        int64_t start, count;
        lw_status st = lw_layout_shard(l, b, k, rank, &start, &count);
        if (st != LW_OK) return st;
        *len += count;
    }
    return LW_OK;
}

/* Group g's shard (bucket k of buffer b) on this rank, its place in the rank's shard arrays,
 * and every rank's shard size when the layout gives them unequal sizes. */
static lw_status place_shard(lw_buffers *bs, group *g, int32_t b, int32_t k, int64_t base) {
    const lw_layout *l = bs->layout;
    const buffer *buf = &bs->buffers[b];
    lw_status st = lw_layout_shard(l, b, k, buf->rank, &g->shard_start, &g->shard_count);
    if (st != LW_OK) return st;
    g->shard_base = base;
    if (l->buffers[b].algorithm != LW_ALGORITHM_PACKED) return LW_OK;
    g->counts = malloc(sizeof(int64_t) * (size_t)buf->dp);
    if (g->counts == NULL) return lwi_fail(LW_ERR_NOMEM, "buffers: out of memory");
    for (int32_t r = 0; r < buf->dp && st == LW_OK; r++) {
        int64_t start;
        st = lw_layout_shard(l, b, k, r, &start, &g->counts[r]);
    }
    return st;
}

/* The order backward needs groups in: by their last-defined parameter, latest first. */
static lw_status order_backward(lw_buffers *bs) {
    bs->backward = malloc(sizeof(int32_t) * (size_t)(bs->n_groups ? bs->n_groups : 1));
    if (bs->backward == NULL) return lwi_fail(LW_ERR_NOMEM, "buffers: out of memory");
    for (int32_t k = 0; k < bs->n_groups; k++) {
        int32_t at = k; /* insertion sort: a model has few groups */
        while (at > 0 && bs->groups[bs->backward[at - 1]].last < bs->groups[k].last) {
            bs->backward[at] = bs->backward[at - 1];
            at--;
        }
        bs->backward[at] = k;
    }
    return LW_OK;
}

/* One group per bucket, in forward order: by the smallest definition index it holds. */
static lw_status make_groups(lw_buffers *bs) {
    const lw_layout *l = bs->layout;
    int32_t n = 0;
    for (int32_t b = 0; b < l->n_buffers; b++)
        n += l->buffers[b].n_buckets;
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
    for (int32_t k = 0; st == LW_OK && k < n; k++)
        slot[k] = -1;
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
    for (int32_t b = 0; st == LW_OK && b < l->n_buffers; b++) {
        int64_t shard_base = 0; /* where the bucket's shard starts in this rank's shard arrays */
        for (int32_t k = 0; st == LW_OK && k < l->buffers[b].n_buckets; k++) {
            group *g = &bs->groups[slot[base[b] + k]];
            const lwi_bucket *bk = &l->buffers[b].buckets[k];
            g->buffer = b;
            g->start = bk->start;
            g->count = bk->stop - bk->start;
            g->n_params = bk->count;
            g->first = l->n_params;
            g->last = -1;
            snprintf(g->label, sizeof g->label, "buffer %d bucket %d", b + 1, k + 1);
            if ((st = lw_request_new(&g->req)) != LW_OK) break;
            lw_request_set_stream(g->req, bs->stream); /* syncs follow the device's work */
            lw_request_set_label(g->req, g->label);
            bs->n_groups++;
            if ((st = place_shard(bs, g, b, k, shard_base)) != LW_OK) break;
            shard_base += g->shard_count;
        }
    }
    for (int32_t i = 0; st == LW_OK && i < l->n_params; i++) {
        const lwi_param *p = &l->params[i];
        param_info *pi = &bs->params[i];
        pi->buffer = p->buffer;
        pi->group = slot[base[p->buffer] + p->bucket];
        pi->start = p->start;
        pi->numel = p->numel;
        group *g = &bs->groups[pi->group];
        if (i < g->first) g->first = i;
        if (i > g->last) g->last = i;
    }
    free(first);
    free(slot);
    free(base);
    if (st == LW_OK) st = order_backward(bs);
    return st;
}

lw_status lw_buffers_new(const lw_layout *layout, lw_comm *comm, lw_comm *expert_comm,
                         const lw_buffers_options *opts, lw_buffers **out) {
    if (out == NULL || layout == NULL || comm == NULL)
        return lwi_fail(LW_ERR_INVALID, "buffers: layout, comm and out must not be NULL");
    *out = NULL;
    if (expert_comm == NULL) expert_comm = comm;
    const lw_buffers_options o = opts ? *opts : lw_buffers_defaults();
    lw_device *device = o.device ? o.device : lw_device_cpu();
    if (!lw_comm_reaches(comm, device) || !lw_comm_reaches(expert_comm, device))
        return lwi_fail(LW_ERR_UNSUPPORTED,
                        "buffers: buffers on %s need a communicator that moves its memory "
                        "(NCCL, from the CUDA library); the %s backend moves host memory",
                        lw_device_name(device),
                        lw_comm_backend(lw_comm_reaches(comm, device) ? expert_comm : comm));
    lw_status st = check_same_layout(layout, comm);
    if (st != LW_OK || (st = check_fits(layout, comm, expert_comm)) != LW_OK ||
        (st = check_zero(layout, o.zero)) != LW_OK)
        return st;

    lw_buffers *bs = calloc(1, sizeof *bs);
    if (bs == NULL) return lwi_fail(LW_ERR_NOMEM, "buffers: out of memory");
    bs->layout = layout;
    bs->comm = comm;
    bs->o = o;
    bs->device = device;
    bs->stream = lw_device_stream(bs->device);
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
        buf->dp = lw_comm_size(buf->comm);
        buf->rank = lw_comm_rank(buf->comm);
        if ((st = shards_length(layout, b, buf->rank, &buf->shards_len)) != LW_OK) goto fail;
        buf->param_len = o.zero == 3 ? buf->shards_len : lb->numel;
        buf->grad_len = o.zero >= 2 ? buf->shards_len : lb->numel;
        buf->param = alloc_zeroed(bs, buf->param_len);
        buf->grad = alloc_zeroed(bs, buf->grad_len);
        bs->array_bytes += (int64_t)sizeof(float) * (buf->param_len + buf->grad_len);
        if (buf->param == NULL || buf->grad == NULL) {
            st = lwi_fail(LW_ERR_NOMEM, "buffers: out of memory for buffer #%d: its parameters "
                          "and gradients need %.2f GiB of %s on this rank (%lld elements)", b + 1,
                          4.0 * (double)(buf->param_len + buf->grad_len) / (1 << 30),
                          lw_device_name(bs->device), (long long)lb->numel);
            goto fail;
        }
        if (buf->kind == SYNC_LEGACY && (st = prepare_legacy(bs, b)) != LW_OK) goto fail;
    }
    if ((st = make_groups(bs)) != LW_OK || (st = lwi_sharded_init(bs)) != LW_OK) goto fail;
    bs->peak = bs->array_bytes;
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
    if (bs->groups != NULL) lwi_sharded_free(bs);
    for (int32_t g = 0; g < bs->n_groups; g++) {
        lw_request_free(bs->groups[g].req);
        free(bs->groups[g].counts);
    }
    for (int32_t b = 0; b < bs->n_buffers; b++) {
        buffer *buf = &bs->buffers[b];
        lw_device_free(bs->device, buf->param);
        lw_device_free(bs->device, buf->grad);
        free(buf->by_owner);
        free(buf->counts);
        lw_device_free(bs->device, buf->pack);
        lw_device_free(bs->device, buf->gathered);
    }
    free(bs->buffers);
    free(bs->params);
    free(bs->groups);
    free(bs->backward);
    free(bs);
}

const lw_layout *lw_buffers_layout(const lw_buffers *bs) { return bs ? bs->layout : NULL; }
lw_comm *lw_buffers_comm(const lw_buffers *bs) { return bs ? bs->comm : NULL; }
lw_device *lw_buffers_device(const lw_buffers *bs) { return bs ? bs->device : NULL; }
lw_comm *lw_buffers_buffer_comm(const lw_buffers *bs, int32_t b) {
    return bs && b >= 0 && b < bs->n_buffers ? bs->buffers[b].comm : NULL;
}
int32_t lw_buffers_num_groups(const lw_buffers *bs) { return bs ? bs->n_groups : 0; }
int32_t lw_buffers_zero(const lw_buffers *bs) { return bs ? bs->o.zero : 0; }

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
    const param_info *p = &bs->params[param];
    if (bs->o.zero < 3) {
        *data = bs->buffers[p->buffer].param + p->start;
        return LW_OK;
    }
    group *g = &bs->groups[p->group];
    if (g->pblock.data == NULL)
        return lwi_fail(LW_ERR_STATE,
                        "buffers: '%s' is not gathered: at ZeRO-3 a rank holds only "
                        "its shard; acquire the parameter first",
                        bs->layout->params[param].name);
    if ((st = lwi_sharded_wait_gather(g)) != LW_OK) return st;
    *data = g->pblock.data + (p->start - g->start);
    return LW_OK;
}

lw_status lw_buffers_grad(lw_buffers *bs, int32_t param, float **data) {
    lw_status st = check_param(bs, param);
    if (st != LW_OK) return st;
    const param_info *p = &bs->params[param];
    if (bs->o.zero < 2) {
        *data = bs->buffers[p->buffer].grad + p->start;
        return LW_OK;
    }
    const group *g = &bs->groups[p->group];
    if (g->gblock.data == NULL || g->reducing)
        return lwi_fail(LW_ERR_STATE,
                        "buffers: the whole gradient of '%s' is not held: at ZeRO-%d "
                        "it is there only between acquire for backward and its reduce-scatter "
                        "(read the owned part with lw_buffers_owned_grad)",
                        bs->layout->params[param].name, bs->o.zero);
    *data = g->gblock.data + (p->start - g->start);
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
    if (st == LW_OK && bs->o.zero == 3)
        return lwi_fail(LW_ERR_STATE,
                        "buffers: at ZeRO-3 no rank holds buffer #%d's parameters "
                        "whole",
                        b + 1);
    if (st == LW_OK) *data = bs->buffers[b].param;
    return st;
}

lw_status lw_buffers_grad_array(lw_buffers *bs, int32_t b, float **data) {
    lw_status st = check_buffer(bs, b);
    if (st == LW_OK && bs->o.zero >= 2)
        return lwi_fail(LW_ERR_STATE,
                        "buffers: at ZeRO-%d no rank holds buffer #%d's gradients "
                        "whole",
                        bs->o.zero, b + 1);
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
    } else if (lwi_is_elementwise(lb->algorithm)) {
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

/* The owned elements of param in an array that is whole (sharded = false) or this rank's
 * shards (sharded = true). */
static lw_status owned_in(lw_buffers *bs, int32_t param, bool sharded, bool grads, float **data) {
    int64_t start, count;
    lw_status st = lw_buffers_owned(bs, param, &start, &count);
    if (st != LW_OK) return st;
    const param_info *p = &bs->params[param];
    buffer *b = &bs->buffers[p->buffer];
    float *array = grads ? b->grad : b->param;
    *data = NULL;
    if (count == 0) return LW_OK;
    const int64_t x = p->start + start;
    *data = array + (sharded ? lwi_shard_offset(&bs->groups[p->group], x) : x);
    return LW_OK;
}

lw_status lw_buffers_owned_param(lw_buffers *bs, int32_t param, float **data) {
    return owned_in(bs, param, bs && bs->o.zero == 3, false, data);
}

lw_status lw_buffers_owned_grad(lw_buffers *bs, int32_t param, float **data) {
    return owned_in(bs, param, bs && bs->o.zero >= 2, true, data);
}

lw_status lw_buffers_acquire(lw_buffers *bs, int32_t param, lw_pass pass, bool reuse) {
    lw_status st = check_param(bs, param);
    if (st != LW_OK) return st;
    if (pass != LW_PASS_FORWARD && pass != LW_PASS_BACKWARD)
        return lwi_fail(LW_ERR_INVALID, "buffers: unknown pass %d", (int)pass);
    /* below ZeRO-3 the parameters are in the arrays once their sync is done */
    if (bs->o.zero < 3 && (st = lw_buffers_finish_param_sync(bs, bs->params[param].group)) != LW_OK)
        return st;
    return lwi_sharded_acquire(bs, param, pass, reuse);
}

lw_status lw_buffers_release(lw_buffers *bs, int32_t param) {
    lw_status st = check_param(bs, param);
    if (st != LW_OK) return st;
    group *g = &bs->groups[bs->params[param].group];
    if (g->pins == 0)
        return lwi_fail(LW_ERR_STATE, "buffers: '%s' released more often than acquired",
                        bs->layout->params[param].name);
    g->pins--;
    return LW_OK;
}

lw_status lw_buffers_commit(lw_buffers *bs, int32_t gi) {
    if (bs == NULL) return lwi_fail(LW_ERR_INVALID, "buffers: NULL buffers");
    if (gi < 0 || gi >= bs->n_groups)
        return lwi_fail(LW_ERR_RANGE, "buffers: group %d out of range [0, %d)", gi, bs->n_groups);
    return bs->o.zero == 3 ? lwi_sharded_commit(bs, gi) : LW_OK;
}

lw_status lw_buffers_memory_get(const lw_buffers *bs, lw_buffers_memory *out) {
    if (bs == NULL || out == NULL) return lwi_fail(LW_ERR_INVALID, "buffers: NULL argument");
    memset(out, 0, sizeof *out);
    for (int32_t b = 0; b < bs->n_buffers; b++) {
        out->params += (int64_t)sizeof(float) * bs->buffers[b].param_len;
        out->grads += (int64_t)sizeof(float) * bs->buffers[b].grad_len;
    }
    out->arrays = bs->array_bytes;
    out->params += bs->param_block_bytes;
    out->grads += bs->grad_block_bytes;
    out->cached = bs->cached_bytes;
    out->peak = bs->peak;
    out->budget = bs->o.zero >= 2 ? bs->budget : 0;
    out->block_bytes = bs->o.zero >= 2 ? bs->largest_block : 0;
    out->over_budget = bs->over_budget;
    out->gathers = bs->gathers;
    out->flushes = bs->flushes;
    return LW_OK;
}

/* ---- gradient sync -------------------------------------------------------------------------- */

static lw_status start_grad(lw_buffers *bs, int32_t gi) {
    if (bs->o.zero >= 2) return lwi_sharded_start_grad(bs, gi);
    group *g = &bs->groups[gi];
    buffer *b = &bs->buffers[g->buffer];
    float *bucket = b->grad + g->start;
    const int32_t dp = lw_comm_size(b->comm);
    lw_status st = dp > 1 ? lw_vec_scale(bs->stream, bucket, g->count, 1.0f / (float)dp) : LW_OK;
    if (st != LW_OK) return st;
    g->grad_started = true;
    if (b->kind != SYNC_SHARDED)
        return lw_comm_allreduce_start(b->comm, bucket, g->count, LW_DTYPE_F32, g->req);
    if (g->counts != NULL)
        return lw_comm_reduce_scatterv(b->comm, bucket, g->counts, LW_DTYPE_F32, g->req);
    return lw_comm_reduce_scatter(b->comm, bucket, g->count, LW_DTYPE_F32, g->req);
}

/* Starts the gradient syncs, in backprop order, of every group that is complete and has no
 * incomplete group before it in that order. */
static lw_status start_ready_grads(lw_buffers *bs) {
    while (bs->next_grad >= 0 &&
           bs->groups[bs->next_grad].ready == bs->groups[bs->next_grad].n_params) {
        lw_status st = start_grad(bs, bs->next_grad);
        bs->next_grad--;
        if (st != LW_OK) return st;
    }
    return LW_OK;
}

lw_status lw_buffers_progress(lw_buffers *bs) {
    if (bs == NULL) return lwi_fail(LW_ERR_INVALID, "buffers: NULL buffers");
    for (int32_t g = 0; g < bs->n_groups; g++) {
        const group *gr = &bs->groups[g];
        lw_request *reqs[3] = {gr->req, gr->gblock.data ? gr->gblock.req : NULL,
                               gr->pblock.data ? gr->pblock.req : NULL};
        for (int k = 0; k < 3; k++) {
            bool done; /* only progress: what completion frees is decided elsewhere */
            lw_status st = reqs[k] ? lw_request_test(reqs[k], &done) : LW_OK;
            if (st != LW_OK) return st;
        }
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
    for (int32_t i = 0; i < bs->n_params; i++)
        bs->params[i].ready = false;
    for (int32_t g = 0; g < bs->n_groups; g++) {
        bs->groups[g].ready = 0;
        bs->groups[g].grad_started = false;
    }
    bs->next_grad = bs->n_groups - 1;
}

lw_status lw_buffers_end_backward(lw_buffers *bs) {
    if (bs == NULL) return lwi_fail(LW_ERR_INVALID, "buffers: NULL buffers");
    if (bs->o.zero == 1) return LW_OK;
    lw_status st = LW_OK;
    while (st == LW_OK && bs->next_grad >= 0)
        st = start_grad(bs, bs->next_grad--);
    reset_grad_state(bs);
    return st;
}

lw_status lw_buffers_finish_grad_sync(lw_buffers *bs) {
    if (bs == NULL) return lwi_fail(LW_ERR_INVALID, "buffers: NULL buffers");
    lw_status st = LW_OK;
    /* groups whose gradients never all arrived take part too, so no rank waits alone */
    while (st == LW_OK && bs->next_grad >= 0)
        st = start_grad(bs, bs->next_grad--);
    lw_status waited = wait_all(bs);
    if (bs->o.zero >= 2) {
        lw_status added = lwi_sharded_finish_grads(bs);
        if (waited == LW_OK) waited = added;
    }
    reset_grad_state(bs);
    return st != LW_OK ? st : waited;
}

lw_status lw_buffers_zero_grad(lw_buffers *bs) {
    if (bs == NULL) return lwi_fail(LW_ERR_INVALID, "buffers: NULL buffers");
    lw_status st = wait_all(bs);
    if (bs->o.zero >= 2) {
        lw_status added = lwi_sharded_finish_grads(bs);
        if (st == LW_OK) st = added;
    }
    for (int32_t b = 0; b < bs->n_buffers; b++) {
        lw_status zeroed = lw_device_set(bs->stream, bs->buffers[b].grad, 0,
                                         (int64_t)sizeof(float) * bs->buffers[b].grad_len);
        if (st == LW_OK) st = zeroed;
    }
    reset_grad_state(bs);
    return st;
}

/* ---- parameter sync ------------------------------------------------------------------------- */

static lw_status start_param(lw_buffers *bs, int32_t gi) {
    group *g = &bs->groups[gi];
    buffer *b = &bs->buffers[g->buffer];
    g->param_started = true;
    if (b->kind != SYNC_SHARDED) return LW_OK;
    if (g->counts != NULL)
        return lw_comm_allgather_segments(b->comm, b->param + g->start, g->counts, LW_DTYPE_F32,
                                          g->req);
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
        lw_status st = lw_device_copy(bs->stream, b->pack + at, b->param + p->start,
                                      (int64_t)sizeof(float) * p->numel, LW_COPY_DEVICE_TO_DEVICE);
        if (st != LW_OK) return st;
        at += p->numel;
    }
    char label[48];
    snprintf(label, sizeof label, "the parameters of buffer %d", bi + 1);
    lw_comm_set_label(b->comm, label);
    lw_status st = lw_comm_allgatherv(b->comm, b->pack, at, b->gathered, b->counts);
    if (st != LW_OK) return st;
    at = 0;
    for (int32_t k = 0; k < n; k++) {
        const lwi_param *p = &l->params[b->by_owner[k]];
        st = lw_device_copy(bs->stream, b->param + p->start, b->gathered + at,
                            (int64_t)sizeof(float) * p->numel, LW_COPY_DEVICE_TO_DEVICE);
        if (st != LW_OK) return st;
        at += p->numel;
    }
    return LW_OK;
}

lw_status lw_buffers_start_param_sync(lw_buffers *bs) {
    if (bs == NULL) return lwi_fail(LW_ERR_INVALID, "buffers: NULL buffers");
    if (bs->o.zero == 3) {
        /* the shards changed: nothing gathered is current; forward starts with group 0 */
        lw_status st = lwi_sharded_drop_params(bs);
        if (st == LW_OK && bs->o.overlap_param) st = lwi_sharded_prefetch(bs, 0);
        return st;
    }
    lw_status st = lw_buffers_finish_param_sync(bs, -1);
    for (int32_t b = 0; st == LW_OK && b < bs->n_buffers; b++)
        if (bs->buffers[b].kind == SYNC_LEGACY) st = gather_legacy(bs, b);
    if (st != LW_OK) return st;
    for (int32_t g = 0; g < bs->n_groups; g++)
        bs->groups[g].param_started = false;
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
    if (bs->o.zero == 3) return lwi_sharded_wait_gathers(bs);
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
