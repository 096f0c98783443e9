/* simple.c: the layouts that need no shard alignment (docs/algorithms.md section 3):
 * default (unpadded, unsharded), legacy (default offsets, whole params dealt to owners
 * ping-pong), distopt (element-wise ZeRO-1 with 64-aligned starts and padded bucket ends) and
 * rows (row-sharded FSDP: each param alone in a bucket whose dp shards are whole rows). */
#include "layout/layout.h"

#include <stdlib.h>

/* Unpadded, back to back in backprop order; a bucket closes once it holds bucket_size. */
lw_status lwi_layout_default(lw_layout *l, lwi_buffer *b) {
    const int64_t bucket_size = l->opts.bucket_size;
    int64_t offset = 0;
    bool open = false;
    for (int32_t k = 0; k < b->n_params; k++) {
        int32_t i = lwi_backprop(b, k);
        if (!open) {
            lwi_bucket_open(b, offset);
            open = true;
        }
        lwi_bucket_put(l, b, i, offset, -1);
        offset += l->params[i].numel;
        int64_t size = offset - lwi_bucket_current(b)->start;
        if (size >= bucket_size) {
            lwi_bucket_close(b, offset, size);
            open = false;
        }
    }
    if (open) lwi_bucket_close(b, offset, offset - lwi_bucket_current(b)->start);
    return LW_OK;
}

typedef struct sized {
    int64_t numel;
    int32_t index;
} sized;

static int by_numel_stable(const void *a, const void *b) {
    const sized *x = a, *y = b;
    if (x->numel != y->numel) return x->numel < y->numel ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* Default offsets; owners dealt 0, 1, .., dp-1, dp-1, .., 1, 0, 0, 1, .. over the params
 * stable-sorted by numel ascending, so big and small params alternate between ranks. */
lw_status lwi_layout_legacy(lw_layout *l, lwi_buffer *b) {
    lw_status st = lwi_layout_default(l, b);
    if (st != LW_OK) return st;
    sized *order = malloc(sizeof(sized) * (size_t)b->n_params);
    if (order == NULL) return lwi_fail(LW_ERR_NOMEM, "layout: out of memory");
    for (int32_t k = 0; k < b->n_params; k++)
        order[k] = (sized){l->params[b->params[k]].numel, b->params[k]};
    qsort(order, (size_t)b->n_params, sizeof(sized), by_numel_stable);
    for (int32_t k = 0; k < b->n_params; k++) {
        int32_t round = k / b->dp, slot = k % b->dp;
        l->params[order[k].index].owner = (round % 2 == 0) ? slot : b->dp - 1 - slot;
    }
    free(order);
    return LW_OK;
}

/* Element-wise ZeRO-1: params start on multiples of 64; a bucket closes once
 * param_end - bucket_start >= bucket_size and its end is padded to bucket_end_divisor(dp);
 * a shared embedding closes the bucket before it and sits alone in its own. */
lw_status lwi_layout_distopt(lw_layout *l, lwi_buffer *b) {
    const int64_t bucket_size = l->opts.bucket_size;
    const int64_t end_div = lw_bucket_end_divisor(b->dp, l->opts.high_busbw);
    int64_t start = 0;
    bool open = false;
    for (int32_t k = 0; k < b->n_params; k++) {
        int32_t i = lwi_backprop(b, k);
        const lwi_param *p = &l->params[i];
        start = lwi_pad(start, 64);
        if (p->shared_embedding && open) {
            start = lwi_pad(start, end_div);
            lwi_bucket_close(b, start, (start - lwi_bucket_current(b)->start) / b->dp);
            open = false;
        }
        if (!open) {
            lwi_bucket_open(b, start);
            open = true;
        }
        lwi_bucket_put(l, b, i, start, -1);
        int64_t end = start + p->numel;
        if (end - lwi_bucket_current(b)->start >= bucket_size || p->shared_embedding) {
            end = lwi_pad(end, end_div);
            lwi_bucket_close(b, end, (end - lwi_bucket_current(b)->start) / b->dp);
            open = false;
        }
        start = end;
    }
    if (open) {
        int64_t end = lwi_pad(start, end_div);
        lwi_bucket_close(b, end, (end - lwi_bucket_current(b)->start) / b->dp);
    }
    return LW_OK;
}

/* Rows of a param: its first dimension; the rest of it is one row. */
static int64_t row_length(const lwi_param *p) { return p->numel / p->shape[0]; }

/* Row-sharded: each param (backprop order) alone in its bucket, each of the dp shards holding
 * the same whole number of rows, at least ceil(rows / dp), raised until the bucket is a
 * multiple of bucket_end_divisor(dp); the rows past the param's own are padding. */
lw_status lwi_layout_rows(lw_layout *l, lwi_buffer *b) {
    const int64_t end_div = lw_bucket_end_divisor(b->dp, l->opts.high_busbw);
    int64_t start = 0;
    for (int32_t k = 0; k < b->n_params; k++) {
        int32_t i = lwi_backprop(b, k);
        const lwi_param *p = &l->params[i];
        const int64_t cols = row_length(p);
        int64_t rows = (p->shape[0] + b->dp - 1) / b->dp;
        while ((rows * cols * b->dp) % end_div != 0)
            rows++;
        lwi_bucket_open(b, start);
        lwi_bucket_put(l, b, i, start, -1);
        start += rows * cols * b->dp;
        lwi_bucket_close(b, start, rows * cols);
    }
    return LW_OK;
}
