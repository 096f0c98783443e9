/* groups.c: the bucket groups of lw_buffers, one per bucket, numbered in forward order (by the
 * first parameter each holds), with this rank's shard of each and the order backward needs them
 * in. Every rank derives them from the same layout, so all issue the same collectives in the same
 * sequence. Holds no data and syncs nothing (sync.c). */
#include "buffers/buffers_state.h"

#include <stdio.h>
#include <stdlib.h>

typedef lwi_group group;

lw_status lwi_groups_shards_length(const lw_layout *l, int32_t b, int32_t rank, int64_t *len) {
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
    const lwi_buf *buf = &bs->buffers[b];
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
lw_status lwi_groups_make(lw_buffers *bs) {
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
        lwi_param_info *pi = &bs->params[i];
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
