/* bucket.c: what every layout algorithm builds with: the padding rules of docs/algorithms.md
 * section 3, a parameter's Newton-Schulz cost, and opening, filling and closing a buffer's
 * buckets. */
#include "layout/layout.h"

#include <string.h>

int64_t lw_bucket_end_divisor(int32_t dp, bool high_busbw) {
    if (dp < 1) return 0;
    int64_t d = lwi_lcm(dp, 128);
    return high_busbw ? lwi_lcm(d, 65536) : d;
}

int64_t lw_shard_divisor(int32_t dp, bool high_busbw) {
    if (dp < 1) return 0;
    return lwi_lcm(64, lw_bucket_end_divisor(dp, high_busbw) / dp);
}

static double matrix_cost(double m, double n) { return m >= n ? m * n * n : n * m * m; }

/* The layout does not see the optimizer's split_qkv: a fused QKV weight is costed as the
 * default splits it, into (groups * q) x cols, (groups * k) x cols and (groups * v) x cols. */
double lwi_param_cost(const lwi_param *p) {
    if (p->ndim != 2) return (double)p->numel;
    const double n = (double)p->shape[1];
    if (p->qkv_groups > 0) {
        double sum = 0.0;
        for (int c = 0; c < 3; c++)
            sum += matrix_cost((double)p->qkv_groups * (double)p->qkv_rows[c], n);
        return sum;
    }
    return matrix_cost((double)p->shape[0], n);
}

void lwi_bucket_open(lwi_buffer *b, int64_t start) {
    lwi_bucket *k = &b->buckets[b->n_buckets++];
    memset(k, 0, sizeof *k);
    k->start = start;
    k->first = b->n_placed;
}

void lwi_bucket_put(lw_layout *l, lwi_buffer *b, int32_t param, int64_t start, int32_t owner) {
    lwi_bucket *k = lwi_bucket_current(b);
    lwi_param *p = &l->params[param];
    p->bucket = b->n_buckets - 1;
    p->start = start;
    p->owner = owner;
    b->placed[b->n_placed++] = param;
    k->count++;
    k->numel_unpadded += p->numel;
}

void lwi_bucket_close(lwi_buffer *b, int64_t stop, int64_t shard_size) {
    lwi_bucket *k = lwi_bucket_current(b);
    k->stop = stop;
    k->shard_size = shard_size;
    b->numel = stop;
}
