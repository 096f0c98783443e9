/* buffers.c: lw_buffers, the flat parameter and gradient arrays of a layout on a device: making
 * them (with the bucket groups of groups.c and the residency of the ZeRO level, residency.c),
 * the views of a parameter and its gradient, the elements a rank owns, the memory held. The
 * syncs are sync.c's and whole.c's or sharded.c's; updating parameters is the optimizer's
 * (optim/optimizer.c). */
#include "buffers/buffers_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef lwi_buf buffer;
typedef lwi_group group;
typedef lwi_param_info param_info;

lw_buffers_options lw_buffers_defaults(void) {
    lw_buffers_options o = {sizeof(lw_buffers_options), true, true, 1, NULL};
    return o;
}

static sync_kind kind_of(lw_algorithm a) {
    if (a == LW_ALGORITHM_DEFAULT) return SYNC_REPLICATED;
    if (a == LW_ALGORITHM_LEGACY) return SYNC_LEGACY;
    return SYNC_SHARDED;
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

/* Parameter p's dtype of `what` (its parameters, or gradients): f32 or bf16, and the same as
 * the first parameter's, since one set of buffers holds one of each. */
static lw_status check_dtype(const lwi_param *p, const lwi_param *first, lw_dtype dtype,
                             lw_dtype first_dtype, const char *what, const char *verb,
                             const char *kind) {
    if (dtype != LW_DTYPE_F32 && dtype != LW_DTYPE_BF16)
        return lwi_fail(LW_ERR_UNSUPPORTED, "buffers: '%s' has %s %s; buffers %s f32 or bf16 %s",
                        p->name, lw_dtype_name(dtype), what, verb, what);
    if (dtype != first_dtype)
        return lwi_fail(LW_ERR_UNSUPPORTED,
                        "buffers: '%s' has %s %s but '%s' %s; every parameter of one set of "
                        "buffers has the same %sdtype",
                        p->name, lw_dtype_name(dtype), what, first->name,
                        lw_dtype_name(first_dtype), kind);
    return LW_OK;
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
        const lwi_param *p = &l->params[i], *first = &l->params[0];
        lw_status st = check_dtype(p, first, p->dtype, first->dtype, "parameters", "hold", "");
        if (st == LW_OK)
            st = check_dtype(p, first, p->grad_dtype, first->grad_dtype, "gradients", "sum",
                             "gradient ");
        if (st != LW_OK) return st;
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

lw_status lw_buffers_new(const lw_layout *layout, lw_comm *comm, lw_comm *expert_comm,
                         const lw_buffers_options *opts, lw_buffers **out) {
    if (out == NULL || layout == NULL || comm == NULL)
        return lwi_fail(LW_ERR_INVALID, "buffers: layout, comm and out must not be NULL");
    *out = NULL;
    if (expert_comm == NULL) expert_comm = comm;
    const lw_buffers_options d = lw_buffers_defaults();
    lw_buffers_options o;
    lw_status st = lwi_options_read("buffers", &lwi_buffers_options_kind, opts, &d, &o);
    if (st != LW_OK) return st;
    lw_device *device = o.device ? o.device : lw_device_cpu();
    if (!lw_comm_reaches(comm, device) || !lw_comm_reaches(expert_comm, device))
        return lwi_fail(LW_ERR_UNSUPPORTED,
                        "buffers: buffers on %s need a communicator that moves its memory "
                        "(NCCL, from the CUDA library); the %s backend moves host memory",
                        lw_device_name(device),
                        lw_comm_backend(lw_comm_reaches(comm, device) ? expert_comm : comm));
    st = check_same_layout(layout, comm);
    if (st != LW_OK || (st = check_fits(layout, comm, expert_comm)) != LW_OK ||
        (st = check_zero(layout, o.zero)) != LW_OK)
        return st;

    lw_buffers *bs = calloc(1, sizeof *bs);
    if (bs == NULL) return lwi_fail(LW_ERR_NOMEM, "buffers: out of memory");
    bs->layout = layout;
    bs->comm = comm;
    bs->o = o;
    bs->residency = lwi_residency_for(o.zero, layout->n_params ? layout->params[0].dtype
                                                               : LW_DTYPE_F32);
    bs->param_size = (int64_t)lwi_dtype_size(bs->residency->param_dtype);
    bs->grad_dtype = layout->n_params ? layout->params[0].grad_dtype : LW_DTYPE_F32;
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
        st = lwi_groups_shards_length(layout, b, buf->rank, &buf->shards_len);
        if (st != LW_OK) goto fail;
        buf->param_len = bs->residency->sharded_params ? buf->shards_len : lb->numel;
        buf->grad_len = bs->residency->sharded_grads ? buf->shards_len : lb->numel;
        /* below ZeRO-2 bf16 sums need a bf16 copy of the whole gradient to move */
        const int64_t wire = !bs->residency->sharded_grads && bs->grad_dtype != LW_DTYPE_F32
                                 ? (int64_t)lwi_dtype_size(bs->grad_dtype) * lb->numel
                                 : 0;
        const int64_t bytes = bs->param_size * buf->param_len + 4 * buf->grad_len + wire;
        buf->param = lwi_alloc_zeroed(bs, bs->param_size * buf->param_len);
        buf->grad = lwi_alloc_zeroed(bs, (int64_t)sizeof(float) * buf->grad_len);
        buf->grad_wire = wire > 0 ? lwi_alloc_zeroed(bs, wire) : NULL;
        bs->array_bytes += bytes;
        if (buf->param == NULL || buf->grad == NULL || (wire > 0 && buf->grad_wire == NULL)) {
            st = lwi_fail(LW_ERR_NOMEM, "buffers: out of memory for buffer #%d: its parameters "
                          "and gradients need %.2f GiB of %s on this rank (%lld elements)", b + 1,
                          (double)bytes / (1 << 30), lw_device_name(bs->device),
                          (long long)lb->numel);
            goto fail;
        }
        if (buf->kind == SYNC_LEGACY && (st = lwi_whole_legacy_prepare(bs, b)) != LW_OK)
            goto fail;
    }
    if ((st = lwi_groups_make(bs)) != LW_OK || (st = lwi_sharded_init(bs)) != LW_OK) goto fail;
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
        lw_device_free(bs->device, buf->grad_wire);
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
int64_t lw_buffers_commits(const lw_buffers *bs) { return bs ? bs->commits : 0; }
lw_dtype lw_buffers_param_dtype(const lw_buffers *bs) {
    return bs ? bs->residency->param_dtype : LW_DTYPE_F32;
}
lw_dtype lw_buffers_grad_dtype(const lw_buffers *bs) { return bs ? bs->grad_dtype : LW_DTYPE_F32; }

lw_status lw_buffers_param(lw_buffers *bs, int32_t param, float **data) {
    lw_status st = lwi_check_param(bs, param);
    return st != LW_OK ? st : bs->residency->param(bs, param, data);
}

lw_status lw_buffers_param_stored(lw_buffers *bs, int32_t param, const void **data,
                                  lw_dtype *dtype) {
    lw_status st = lwi_check_param(bs, param);
    if (st != LW_OK) return st;
    if (data == NULL || dtype == NULL)
        return lwi_fail(LW_ERR_INVALID, "buffers: param_stored: NULL output");
    *dtype = bs->residency->param_dtype;
    return bs->residency->stored(bs, param, data);
}

lw_status lw_buffers_grad(lw_buffers *bs, int32_t param, float **data) {
    lw_status st = lwi_check_param(bs, param);
    return st != LW_OK ? st : bs->residency->grad(bs, param, data);
}

static lw_status check_buffer(const lw_buffers *bs, int32_t b) {
    if (bs == NULL) return lwi_fail(LW_ERR_INVALID, "buffers: NULL buffers");
    if (b < 0 || b >= bs->n_buffers)
        return lwi_fail(LW_ERR_RANGE, "buffers: buffer index %d out of range [0, %d)", b,
                        bs->n_buffers);
    return LW_OK;
}

/* LW_OK when buffer b's whole array of `what` is held, else the error saying only this rank's
 * shards are kept (sharded). */
static lw_status whole_array(const lw_buffers *bs, int32_t b, bool sharded, const char *what) {
    lw_status st = check_buffer(bs, b);
    if (st == LW_OK && sharded)
        return lwi_fail(LW_ERR_STATE, "buffers: at ZeRO-%d no rank holds buffer #%d's %s whole",
                        bs->o.zero, b + 1, what);
    return st;
}

lw_status lw_buffers_param_array(lw_buffers *bs, int32_t b, void **data) {
    lw_status st = whole_array(bs, b, bs && bs->residency->sharded_params, "parameters");
    if (st == LW_OK) *data = bs->buffers[b].param;
    return st;
}

lw_status lw_buffers_grad_array(lw_buffers *bs, int32_t b, float **data) {
    lw_status st = whole_array(bs, b, bs && bs->residency->sharded_grads, "gradients");
    if (st == LW_OK) *data = bs->buffers[b].grad;
    return st;
}

lw_status lw_buffers_param_group(const lw_buffers *bs, int32_t param, int32_t *out) {
    lw_status st = lwi_check_param(bs, param);
    if (st == LW_OK) *out = bs->params[param].group;
    return st;
}

lw_status lw_buffers_owned(const lw_buffers *bs, int32_t param, int64_t *start, int64_t *count) {
    lw_status st = lwi_check_param(bs, param);
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

/* The owned elements of param in an array of `size`-byte elements that is whole (sharded =
 * false) or this rank's shards (sharded = true). */
static lw_status owned_in(lw_buffers *bs, int32_t param, bool sharded, bool grads, void **data) {
    int64_t start, count;
    lw_status st = lw_buffers_owned(bs, param, &start, &count);
    if (st != LW_OK) return st;
    const param_info *p = &bs->params[param];
    buffer *b = &bs->buffers[p->buffer];
    char *array = grads ? (char *)b->grad : (char *)b->param;
    const int64_t size = grads ? (int64_t)sizeof(float) : bs->param_size;
    *data = NULL;
    if (count == 0) return LW_OK;
    const int64_t x = p->start + start;
    *data = array + size * (sharded ? lwi_shard_offset(&bs->groups[p->group], x) : x);
    return LW_OK;
}

lw_status lw_buffers_owned_param(lw_buffers *bs, int32_t param, void **data) {
    return owned_in(bs, param, bs && bs->residency->sharded_params, false, data);
}

lw_status lw_buffers_owned_grad(lw_buffers *bs, int32_t param, float **data) {
    void *at = NULL;
    lw_status st = owned_in(bs, param, bs && bs->residency->sharded_grads, true, &at);
    if (st == LW_OK) *data = at;
    return st;
}

lw_status lw_buffers_acquire(lw_buffers *bs, int32_t param, lw_pass pass, bool reuse) {
    lw_status st = lwi_check_param(bs, param);
    if (st != LW_OK) return st;
    if (pass != LW_PASS_FORWARD && pass != LW_PASS_BACKWARD)
        return lwi_fail(LW_ERR_INVALID, "buffers: unknown pass %d", (int)pass);
    return bs->residency->acquire(bs, param, pass, reuse);
}

lw_status lw_buffers_release(lw_buffers *bs, int32_t param) {
    lw_status st = lwi_check_param(bs, param);
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
    bs->commits++;
    return bs->residency->commit(bs, gi);
}

lw_status lw_buffers_memory_get(const lw_buffers *bs, lw_buffers_memory *out) {
    if (bs == NULL || out == NULL) return lwi_fail(LW_ERR_INVALID, "buffers: NULL argument");
    memset(out, 0, sizeof *out);
    for (int32_t b = 0; b < bs->n_buffers; b++) {
        out->params += bs->param_size * bs->buffers[b].param_len;
        out->grads += (int64_t)sizeof(float) * bs->buffers[b].grad_len;
        if (bs->buffers[b].grad_wire != NULL)
            out->grads += (int64_t)lwi_dtype_size(bs->grad_dtype) * bs->buffers[b].numel;
    }
    out->arrays = bs->array_bytes;
    out->params += bs->param_block_bytes;
    out->grads += bs->grad_block_bytes;
    out->cached = bs->cached_bytes;
    out->peak = bs->peak;
    out->budget = bs->budget;
    out->block_bytes = bs->residency->blocks > 0 ? bs->largest_block : 0;
    out->over_budget = bs->over_budget;
    out->gathers = bs->gathers;
    out->flushes = bs->flushes;
    return LW_OK;
}
