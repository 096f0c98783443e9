/* sync.c: the syncs of lw_buffers, per bucket group. Gradients sync in backprop order (a group
 * starts once it and every group after it in forward order are complete), parameters in forward
 * order with the next group's gather started while the current one is used, so every rank issues
 * the same collectives in the same sequence whatever order its gradients arrive in. What the ZeRO
 * level changes (where a group is held, what a sync adds into) is the residency's (residency.c);
 * the syncs of whole arrays and legacy's gather are here. */
#include "buffers/buffers.h"

#include <stdio.h>
#include <stdlib.h>

typedef lwi_buf buffer;
typedef lwi_group group;
typedef lwi_param_info param_info;

/* Legacy: the order in which the variable-size all-gather lays params out (by owner, then by
 * definition) and how many elements each rank contributes. */
lw_status lwi_legacy_prepare(lw_buffers *bs, int32_t bi) {
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
    b->pack = lwi_alloc_zeroed(bs, bs->param_size * b->counts[lw_comm_rank(b->comm)]);
    b->gathered = lwi_alloc_zeroed(bs, bs->param_size * b->numel);
    return b->pack && b->gathered ? LW_OK : lwi_fail(LW_ERR_NOMEM, "buffers: out of memory");
}


/* ---- gradient sync -------------------------------------------------------------------------- */

/* The gradient sync of a group whose whole gradient is in the array (ZeRO-1): averaged, then
 * all-reduced (unsharded buffers) or reduce-scattered. */
lw_status lwi_whole_start_grad(lw_buffers *bs, int32_t gi) {
    group *g = &bs->groups[gi];
    buffer *b = &bs->buffers[g->buffer];
    float *bucket = b->grad + g->start;
    const int32_t dp = lw_comm_size(b->comm);
    lw_status st = dp > 1 ? lw_vec_scale(bs->stream, bucket, g->count, 1.0f / (float)dp) : LW_OK;
    if (st != LW_OK) return st;
    /* bf16: the averaged fp32 gradient rounded once, summed in bf16 (see lwi_whole_finish_grads) */
    void *sum = bucket;
    if (b->grad_wire != NULL) {
        sum = (uint16_t *)b->grad_wire + g->start;
        if ((st = lw_vec_to_bf16(bs->stream, sum, bucket, g->count)) != LW_OK) return st;
    }
    if (b->kind != SYNC_SHARDED)
        return lw_comm_allreduce_start(b->comm, sum, g->count, bs->grad_dtype, g->req);
    if (g->counts != NULL)
        return lw_comm_reduce_scatterv(b->comm, sum, g->counts, bs->grad_dtype, g->req);
    return lw_comm_reduce_scatter(b->comm, sum, g->count, bs->grad_dtype, g->req);
}

lw_status lwi_whole_finish_grads(lw_buffers *bs) {
    lw_status st = LW_OK;
    for (int32_t gi = 0; st == LW_OK && gi < bs->n_groups; gi++) {
        const group *g = &bs->groups[gi];
        const buffer *b = &bs->buffers[g->buffer];
        if (b->grad_wire == NULL) continue;
        /* what the sum left: this rank's shard (reduce-scatter) or the whole bucket */
        const bool shard = b->kind == SYNC_SHARDED;
        const int64_t at = shard ? g->shard_start : g->start;
        st = lw_vec_from_bf16(bs->stream, b->grad + at, (const uint16_t *)b->grad_wire + at,
                              shard ? g->shard_count : g->count);
    }
    return st;
}

static lw_status start_grad(lw_buffers *bs, int32_t gi) {
    bs->groups[gi].grad_started = true;
    return bs->residency->start_grad(bs, gi);
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
    lw_status st = lwi_check_param(bs, param);
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

/* Starts every gradient sync not started yet, in backprop order. */
static lw_status start_remaining_grads(lw_buffers *bs) {
    lw_status st = LW_OK;
    while (st == LW_OK && bs->next_grad >= 0)
        st = start_grad(bs, bs->next_grad--);
    return st;
}

/* ZeRO-2/3's end of a micro-step's backward: nothing stays held whole into the next one. */
lw_status lwi_sharded_end_backward(lw_buffers *bs) {
    lw_status st = start_remaining_grads(bs);
    reset_grad_state(bs);
    return st;
}

lw_status lw_buffers_end_backward(lw_buffers *bs) {
    if (bs == NULL) return lwi_fail(LW_ERR_INVALID, "buffers: NULL buffers");
    return bs->residency->end_backward(bs);
}

lw_status lw_buffers_finish_grad_sync(lw_buffers *bs) {
    if (bs == NULL) return lwi_fail(LW_ERR_INVALID, "buffers: NULL buffers");
    /* groups whose gradients never all arrived take part too, so no rank waits alone */
    lw_status st = start_remaining_grads(bs);
    lw_status waited = wait_all(bs);
    lw_status added = bs->residency->finish_grads(bs);
    if (waited == LW_OK) waited = added;
    reset_grad_state(bs);
    return st != LW_OK ? st : waited;
}

lw_status lw_buffers_zero_grad(lw_buffers *bs) {
    if (bs == NULL) return lwi_fail(LW_ERR_INVALID, "buffers: NULL buffers");
    lw_status st = wait_all(bs);
    lw_status added = bs->residency->finish_grads(bs);
    if (st == LW_OK) st = added;
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
        return lw_comm_allgather_segments(b->comm, lwi_param_at(bs, b->param, g->start),
                                          g->counts, bs->residency->param_dtype, g->req);
    return lw_comm_allgather(b->comm, lwi_param_at(bs, b->param, g->start), g->count,
                             bs->residency->param_dtype, g->req);
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
        lw_status st = lw_device_copy(bs->stream, lwi_param_at(bs, b->pack, at),
                                      lwi_param_at(bs, b->param, p->start),
                                      bs->param_size * p->numel, LW_COPY_DEVICE_TO_DEVICE);
        if (st != LW_OK) return st;
        at += p->numel;
    }
    char label[48];
    snprintf(label, sizeof label, "the parameters of buffer %d", bi + 1);
    lw_comm_set_label(b->comm, label);
    lw_status st = lw_comm_allgatherv(b->comm, b->pack, at, b->gathered, b->counts,
                                      bs->residency->param_dtype);
    if (st != LW_OK) return st;
    at = 0;
    for (int32_t k = 0; k < n; k++) {
        const lwi_param *p = &l->params[b->by_owner[k]];
        st = lw_device_copy(bs->stream, lwi_param_at(bs, b->param, p->start),
                            lwi_param_at(bs, b->gathered, at), bs->param_size * p->numel,
                            LW_COPY_DEVICE_TO_DEVICE);
        if (st != LW_OK) return st;
        at += p->numel;
    }
    return LW_OK;
}

/* Below ZeRO-3: the arrays hold the parameters whole; each group's sync gathers the owners'
 * updates (legacy buffers all at once, here). */
lw_status lwi_whole_start_params(lw_buffers *bs) {
    lw_status st = lwi_whole_finish_params(bs, -1);
    for (int32_t b = 0; st == LW_OK && b < bs->n_buffers; b++)
        if (bs->buffers[b].kind == SYNC_LEGACY) st = gather_legacy(bs, b);
    if (st != LW_OK) return st;
    for (int32_t g = 0; g < bs->n_groups; g++)
        bs->groups[g].param_started = false;
    bs->next_param = bs->param_done = 0;
    if (bs->n_groups == 0) return LW_OK;
    if (!bs->o.overlap_param) return lwi_whole_finish_params(bs, -1);
    bs->next_param = 1;
    return start_param(bs, 0);
}

lw_status lwi_whole_finish_params(lw_buffers *bs, int32_t gi) {
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

lw_status lw_buffers_start_param_sync(lw_buffers *bs) {
    if (bs == NULL) return lwi_fail(LW_ERR_INVALID, "buffers: NULL buffers");
    return bs->residency->start_params(bs);
}

lw_status lw_buffers_finish_param_sync(lw_buffers *bs, int32_t gi) {
    if (bs == NULL) return lwi_fail(LW_ERR_INVALID, "buffers: NULL buffers");
    if (gi < -1 || gi >= bs->n_groups)
        return lwi_fail(LW_ERR_RANGE, "buffers: group %d out of range [0, %d)", gi, bs->n_groups);
    return bs->residency->finish_params(bs, gi);
}
