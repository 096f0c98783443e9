/* sync.c: the syncs of lw_buffers, per bucket group. Gradients sync in backprop order (a group
 * starts once it and every group after it in forward order are complete), parameters in forward
 * order with the next group's gather started while the current one is used, so every rank issues
 * the same collectives in the same sequence whatever order its gradients arrive in. This file
 * decides when; how a group syncs depends on the ZeRO level and is the residency's (residency.c):
 * whole arrays (whole.c) or group blocks (sharded.c). */
#include "buffers/buffers_state.h"

typedef lwi_group group;
typedef lwi_param_info param_info;

/* ---- gradient sync -------------------------------------------------------------------------- */

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
lw_status lwi_sync_end_backward(lw_buffers *bs) {
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
