/* residency.c: the three ways a rank holds a bucket group between uses, one per ZeRO level,
 * chosen once when the buffers are made:
 *   replicated (ZeRO-1)       parameters and gradients whole in the arrays; the model reads and
 *                             writes them in place; gradients all-reduced or reduce-scattered
 *                             there, parameters all-gathered there.
 *   sharded gradients (2)     parameters whole; a group's gradient whole only in a block from
 *                             acquire for backward until its reduce-scatter is added into this
 *                             rank's gradient shard.
 *   sharded parameters (3)    gradients as ZeRO-2; parameters only as this rank's shard, a
 *                             group gathered into a block when acquired (or prefetched).
 * Legacy and replicated buffers exist at ZeRO-1 only (lw_runtime_check); how their syncs differ
 * is per buffer (sync.c). The blocks are sharded.c's. */
#include "buffers/buffers.h"

static lw_status whole_param(lw_buffers *bs, int32_t param, float **data) {
    const lwi_param_info *p = &bs->params[param];
    *data = bs->buffers[p->buffer].param + p->start;
    return LW_OK;
}

static lw_status whole_grad(lw_buffers *bs, int32_t param, float **data) {
    const lwi_param_info *p = &bs->params[param];
    *data = bs->buffers[p->buffer].grad + p->start;
    return LW_OK;
}

/* Below ZeRO-3 the parameters are in the arrays once their group's sync is done. */
static lw_status acquire_whole(lw_buffers *bs, int32_t param, lw_pass pass, bool reuse) {
    (void)pass;
    (void)reuse;
    const int32_t gi = bs->params[param].group;
    lw_status st = lwi_whole_finish_params(bs, gi);
    if (st == LW_OK) lwi_sharded_pin(bs, gi);
    return st;
}

static lw_status acquire_whole_params(lw_buffers *bs, int32_t param, lw_pass pass, bool reuse) {
    lw_status st = acquire_whole(bs, param, pass, reuse);
    if (st != LW_OK || pass != LW_PASS_BACKWARD) return st;
    const int32_t gi = bs->params[param].group;
    if ((st = lwi_sharded_hold_grad(bs, gi)) != LW_OK) bs->groups[gi].pins--;
    return st;
}

static lw_status nothing_left(lw_buffers *bs) {
    (void)bs;
    return LW_OK;
}

static lw_status views_are_storage(lw_buffers *bs, int32_t group) {
    (void)bs;
    (void)group;
    return LW_OK;
}

/* The shards changed: nothing gathered is current; forward starts with group 0. */
static lw_status regather(lw_buffers *bs) {
    lw_status st = lwi_sharded_drop_params(bs);
    if (st == LW_OK && bs->o.overlap_param) st = lwi_sharded_prefetch(bs, 0);
    return st;
}

static lw_status wait_gathers(lw_buffers *bs, int32_t group) {
    (void)group;
    return lwi_sharded_wait_gathers(bs);
}

static const lwi_residency replicated = {
    .sharded_params = false,
    .sharded_grads = false,
    .blocks = 0,
    .param = whole_param,
    .grad = whole_grad,
    .acquire = acquire_whole,
    .start_grad = lwi_whole_start_grad,
    .finish_grads = nothing_left,
    .end_backward = nothing_left,
    .start_params = lwi_whole_start_params,
    .finish_params = lwi_whole_finish_params,
    .commit = views_are_storage,
};

static const lwi_residency sharded_grads = {
    .sharded_params = false,
    .sharded_grads = true,
    .blocks = 1,
    .param = whole_param,
    .grad = lwi_sharded_grad,
    .acquire = acquire_whole_params,
    .start_grad = lwi_sharded_start_grad,
    .finish_grads = lwi_sharded_finish_grads,
    .end_backward = lwi_sharded_end_backward,
    .start_params = lwi_whole_start_params,
    .finish_params = lwi_whole_finish_params,
    .commit = views_are_storage,
};

static const lwi_residency sharded_params = {
    .sharded_params = true,
    .sharded_grads = true,
    .blocks = 2,
    .param = lwi_sharded_param,
    .grad = lwi_sharded_grad,
    .acquire = lwi_sharded_acquire_gathered,
    .start_grad = lwi_sharded_start_grad,
    .finish_grads = lwi_sharded_finish_grads,
    .end_backward = lwi_sharded_end_backward,
    .start_params = regather,
    .finish_params = wait_gathers,
    .commit = lwi_sharded_commit,
};

const lwi_residency *lwi_residency_for(int32_t zero) {
    return zero == 3 ? &sharded_params : zero == 2 ? &sharded_grads : &replicated;
}
