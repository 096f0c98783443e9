/* residency.c: the ways a rank holds a bucket group between uses, one per ZeRO level and
 * parameter dtype, chosen once when the buffers are made:
 *   replicated (ZeRO-1)       parameters and gradients whole in the arrays; the model reads and
 *                             writes them in place; gradients all-reduced or reduce-scattered
 *                             there (bf16 sums: through a bf16 copy of the array), parameters
 *                             all-gathered there.
 *   sharded gradients (2)     parameters whole; a group's gradient whole only in a block from
 *                             acquire for backward until its reduce-scatter is added into this
 *                             rank's gradient shard.
 *   sharded parameters (3)    gradients as ZeRO-2; parameters only as this rank's shard, a
 *                             group gathered into a block when acquired (or prefetched).
 * With bf16 parameters the arrays (whole or shards), the all-gathers and the commits are bf16;
 * the model kernels that take a weight's dtype read them as stored (the array below ZeRO-3, the
 * group gathered in bf16 at ZeRO-3), and the others read fp32 views in a block, widened a
 * parameter at a time on the first request. The optimizer keeps the fp32 master copy of what it
 * owns (optim/optimizer.c).
 * Legacy and replicated buffers exist at ZeRO-1 only (lw_runtime_check); how their syncs differ
 * is per buffer (whole.c). The blocks are sharded.c's, what is read in them views.c's. */
#include "buffers/buffers_state.h"

static lw_status whole_param(lw_buffers *bs, int32_t param, float **data) {
    const lwi_param_info *p = &bs->params[param];
    *data = (float *)bs->buffers[p->buffer].param + p->start; /* fp32: the array is the view */
    return LW_OK;
}

static lw_status whole_stored(lw_buffers *bs, int32_t param, const void **data) {
    const lwi_param_info *p = &bs->params[param];
    *data = (const float *)bs->buffers[p->buffer].param + p->start;
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

#define WHOLE "held whole"
#define WIDENED "held: bf16 parameters are readable (fp32 views, or as stored) while acquired"
#define GATHERED "gathered: at ZeRO-3 a rank holds only its shard"

static const lwi_residency residencies[3][2] = {
    { /* ZeRO-1: replicated parameters and gradients */
     {.param_dtype = LW_DTYPE_F32, .blocks = 0, .held_as = WHOLE, .param = whole_param,
      .stored = whole_stored, .grad = whole_grad, .acquire = acquire_whole,
      .start_grad = lwi_whole_start_grad, .finish_grads = lwi_whole_finish_grads,
      .end_backward = nothing_left, .start_params = lwi_whole_start_params,
      .finish_params = lwi_whole_finish_params, .commit = views_are_storage},
     {.param_dtype = LW_DTYPE_BF16, .blocks = 1, .held_as = WIDENED, .param = lwi_views_param,
      .stored = lwi_views_stored, .grad = whole_grad, .acquire = lwi_sharded_acquire_view,
      .start_grad = lwi_whole_start_grad, .finish_grads = lwi_whole_finish_grads,
      .end_backward = nothing_left, .start_params = lwi_sharded_start_whole_params,
      .finish_params = lwi_whole_finish_params, .commit = lwi_views_commit}},
    { /* ZeRO-2: sharded gradients */
     {.param_dtype = LW_DTYPE_F32, .sharded_grads = true, .blocks = 1, .held_as = WHOLE,
      .param = whole_param, .stored = whole_stored, .grad = lwi_views_grad,
      .acquire = acquire_whole_params, .start_grad = lwi_sharded_start_grad,
      .finish_grads = lwi_sharded_finish_grads, .end_backward = lwi_sync_end_backward,
      .start_params = lwi_whole_start_params, .finish_params = lwi_whole_finish_params,
      .commit = views_are_storage},
     {.param_dtype = LW_DTYPE_BF16, .sharded_grads = true, .blocks = 2, .held_as = WIDENED,
      .param = lwi_views_param, .stored = lwi_views_stored, .grad = lwi_views_grad,
      .acquire = lwi_sharded_acquire_view, .start_grad = lwi_sharded_start_grad,
      .finish_grads = lwi_sharded_finish_grads, .end_backward = lwi_sync_end_backward,
      .start_params = lwi_sharded_start_whole_params, .finish_params = lwi_whole_finish_params,
      .commit = lwi_views_commit}},
    { /* ZeRO-3: sharded parameters and gradients */
     {.param_dtype = LW_DTYPE_F32, .sharded_params = true, .sharded_grads = true, .blocks = 2,
      .held_as = GATHERED, .param = lwi_views_param, .stored = lwi_views_stored,
      .grad = lwi_views_grad, .acquire = lwi_sharded_acquire_view,
      .start_grad = lwi_sharded_start_grad, .finish_grads = lwi_sharded_finish_grads,
      .end_backward = lwi_sync_end_backward, .start_params = regather,
      .finish_params = wait_gathers, .commit = lwi_views_commit},
     {.param_dtype = LW_DTYPE_BF16, .sharded_params = true, .sharded_grads = true, .blocks = 2,
      .held_as = GATHERED, .param = lwi_views_param, .stored = lwi_views_stored,
      .grad = lwi_views_grad, .acquire = lwi_sharded_acquire_view,
      .start_grad = lwi_sharded_start_grad, .finish_grads = lwi_sharded_finish_grads,
      .end_backward = lwi_sync_end_backward, .start_params = regather,
      .finish_params = wait_gathers, .commit = lwi_views_commit}},
};

const lwi_residency *lwi_residency_for(int32_t zero, lw_dtype param_dtype) {
    if (zero < 1 || zero > 3) return NULL;
    if (param_dtype == LW_DTYPE_F32) return &residencies[zero - 1][0];
    if (param_dtype == LW_DTYPE_BF16) return &residencies[zero - 1][1];
    return NULL;
}
