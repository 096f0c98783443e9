/* views.c: what a rank reads and writes of a held bucket group (ZeRO-2/3, and bf16 parameters at
 * every level): a parameter through its fp32 view in the group's block (a bf16 one widened on
 * the first request after the block was filled, so parameters read only as stored are never
 * widened), a parameter as stored (lw_buffers_param_stored), a gradient in its block, and the
 * commit of written views back into what is stored. Apart from sharded.c, which decides which
 * blocks are held and fills them (pool, budget, gathers, reductions). */
#include "buffers/buffers_state.h"

/* Where param's bf16 values are: in the array below ZeRO-3, in its group's gathered wire at
 * ZeRO-3 (group held). */
static void *bf16_of(lw_buffers *bs, int32_t param) {
    const lwi_param_info *p = &bs->params[param];
    const lwi_group *g = &bs->groups[p->group];
    lwi_buf *b = &bs->buffers[p->buffer];
    if (!bs->residency->sharded_params) return lwi_param_at(bs, b->param, p->start);
    return lwi_param_at(bs, lwi_wire_of(bs, b, g->pblock.data), p->start - g->start);
}

lw_status lwi_views_commit(lw_buffers *bs, int32_t gi) {
    lwi_group *g = &bs->groups[gi];
    lwi_buf *b = &bs->buffers[g->buffer];
    const bool shard = bs->residency->sharded_params;
    if (g->pblock.data == NULL && !shard && g->pins > 0)
        return LW_OK; /* acquired, no view made: nothing was written */
    if (g->pblock.data == NULL)
        return lwi_fail(LW_ERR_STATE,
                        "buffers: commit of group %d, whose parameters are not "
                        "%s (acquire one of its parameters first)",
                        gi, bs->residency->held_as);
    lw_status st = lwi_sharded_wait_gather(g);
    if (st != LW_OK) return st;
    if (bs->param_size == (int64_t)sizeof(float)) /* ZeRO-3: this rank's shard of the view */
        return lw_device_copy(bs->stream, lwi_param_at(bs, b->param, g->shard_base),
                              lwi_shard_in_block(g, g->pblock.data),
                              (int64_t)sizeof(float) * g->shard_count, LW_COPY_DEVICE_TO_DEVICE);
    /* bf16: each view that was widened (only those can have been written) rounded into its bf16
     * (the array below ZeRO-3, the block's wire at ZeRO-3) and widened back, so what the model
     * reads next is what is stored on every rank */
    for (int32_t i = g->first; i <= g->last && st == LW_OK; i++) {
        const lwi_param_info *p = &bs->params[i];
        if (p->group != gi || !p->widened) continue;
        float *view = g->pblock.data + (p->start - g->start);
        st = lw_vec_to_bf16(bs->stream, bf16_of(bs, i), view, p->numel);
        if (st == LW_OK) st = lw_vec_from_bf16(bs->stream, view, bf16_of(bs, i), p->numel);
    }
    if (st != LW_OK || !shard) return st;
    return lw_device_copy(bs->stream, lwi_param_at(bs, b->param, g->shard_base),
                          lwi_param_at(bs, lwi_wire_of(bs, b, g->pblock.data),
                                       g->shard_start - g->start),
                          bs->param_size * g->shard_count, LW_COPY_DEVICE_TO_DEVICE);
}

/* LW_OK when param's group holds its parameters (then waited for), else the error naming it: at
 * ZeRO-3 a gathered block; below, the bf16 arrays are current once acquired, so an acquired
 * group, or one whose block of views is still held. */
static lw_status held(lw_buffers *bs, int32_t param) {
    lwi_group *g = &bs->groups[bs->params[param].group];
    const bool whole = !bs->residency->sharded_params;
    if (g->pblock.data == NULL && !(whole && g->pins > 0))
        return lwi_fail(LW_ERR_STATE,
                        "buffers: '%s' is not %s; acquire the parameter first",
                        bs->layout->params[param].name, bs->residency->held_as);
    return lwi_sharded_wait_gather(g);
}

lw_status lwi_views_param(lw_buffers *bs, int32_t param, float **data) {
    lw_status st = held(bs, param);
    if (st != LW_OK) return st;
    lwi_param_info *p = &bs->params[param];
    const lwi_group *g = &bs->groups[p->group];
    if (g->pblock.data == NULL) st = lwi_sharded_take_views(bs, p->group); /* the first view */
    if (st != LW_OK) return st;
    float *view = g->pblock.data + (p->start - g->start);
    if (bs->param_size != (int64_t)sizeof(float) && !p->widened) {
        st = lw_vec_from_bf16(bs->stream, view, bf16_of(bs, param), p->numel);
        if (st != LW_OK) return st;
        p->widened = true;
    }
    *data = view;
    return LW_OK;
}

lw_status lwi_views_stored(lw_buffers *bs, int32_t param, const void **data) {
    lw_status st = held(bs, param);
    if (st != LW_OK) return st;
    if (bs->param_size != (int64_t)sizeof(float)) {
        *data = bf16_of(bs, param);
        return LW_OK;
    }
    float *view = NULL; /* ZeRO-3 fp32: the gathered block is the view */
    st = lwi_views_param(bs, param, &view);
    *data = view;
    return st;
}

lw_status lwi_views_grad(lw_buffers *bs, int32_t param, float **data) {
    const lwi_param_info *p = &bs->params[param];
    const lwi_group *g = &bs->groups[p->group];
    if (g->gblock.data == NULL || g->reducing)
        return lwi_fail(LW_ERR_STATE,
                        "buffers: the whole gradient of '%s' is not held: at ZeRO-%d "
                        "it is there only between acquire for backward and its reduce-scatter "
                        "(read the owned part with lw_buffers_owned_grad)",
                        bs->layout->params[param].name, bs->o.zero);
    *data = g->gblock.data + (p->start - g->start);
    return LW_OK;
}
