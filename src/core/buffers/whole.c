/* whole.c: the syncs of bucket groups held whole in the arrays: every ZeRO level's parameters
 * below ZeRO-3 and ZeRO-1's gradients, all-reduced, reduce-scattered or all-gathered in place,
 * and legacy's gather of whole parameters. The residency (residency.c) picks these or sharded.c's
 * blocks; sync.c decides when a group's sync starts. */
#include "buffers/buffers_state.h"

#include <stdio.h>
#include <stdlib.h>

typedef lwi_buf buffer;
typedef lwi_group group;

/* Legacy: the order in which the variable-size all-gather lays params out (by owner, then by
 * definition) and how many elements each rank contributes. */
lw_status lwi_whole_legacy_prepare(lw_buffers *bs, int32_t bi) {
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

/* ---- gradients ------------------------------------------------------------------------------ */

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

/* ---- parameters ----------------------------------------------------------------------------- */

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
