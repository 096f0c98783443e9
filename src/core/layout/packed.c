/* packed.c: the packed layout. Each rank owns whole params, as in the shard-aligned layouts,
 * but a bucket's shards have unequal sizes: nothing is padded to make them equal, so nothing
 * but real elements (and at most 63 elements before each param, for 64-element alignment)
 * travels in the reduce-scatter and all-gather, which become variable-count collectives.
 *
 * Three independent choices:
 * - buckets: contiguous ranges of backprop order, each closed once it holds bucket_size
 *   elements (so a bucket's reduce-scatter can start as early in backward as with cost); a
 *   shared embedding sits alone in its own bucket, owned by rank 0;
 * - owners: chosen for the whole buffer at once, since Newton-Schulz runs after every bucket
 *   is reduced: largest cost first onto the least-loaded rank (LPT), then moves and swaps
 *   between the most- and the least-loaded rank while they lower the larger load;
 * - placement: inside a bucket the params sit rank by rank (in backprop order within a rank),
 *   so rank r's shard is one run, and the dp shards tile the bucket in rank order. */
#include "layout/layout.h"

#include <stdlib.h>
#include <string.h>

/* Sort key of the owner assignment: cost, then numel, then backprop position, so the order is a
 * total one and the layout is the same on every rank and every run. */
typedef struct ranked {
    double cost;
    int64_t numel;
    int32_t pos;
    int32_t param;
} ranked;

static int by_cost_desc(const void *x, const void *y) {
    const ranked *a = x, *b = y;
    if (a->cost != b->cost) return a->cost > b->cost ? -1 : 1;
    if (a->numel != b->numel) return a->numel > b->numel ? -1 : 1;
    return (a->pos > b->pos) - (a->pos < b->pos);
}

/* The least-loaded rank (ties: fewer elements, then the lower rank). */
static int32_t lightest(const double *load, const int64_t *numel, int32_t dp) {
    int32_t best = 0;
    for (int32_t r = 1; r < dp; r++)
        if (load[r] < load[best] || (load[r] == load[best] && numel[r] < numel[best])) best = r;
    return best;
}

static int32_t heaviest(const double *load, int32_t dp) {
    int32_t best = 0;
    for (int32_t r = 1; r < dp; r++)
        if (load[r] > load[best]) best = r;
    return best;
}

/* One improvement between the heaviest rank h and the lightest: moving one of h's params over,
 * or swapping one of h's params with a cheaper one of the lightest, whichever lowers the larger
 * of the two loads the most. Returns false when nothing improves. */
static bool improve(lw_layout *l, const ranked *items, int32_t n, double *load, int64_t *numel,
                    int32_t dp) {
    const int32_t h = heaviest(load, dp), light = lightest(load, numel, dp);
    if (h == light) return false;
    double best = load[h]; /* the larger of the two loads after the change */
    int32_t best_i = -1, best_j = -1;
    for (int32_t i = 0; i < n; i++) {
        const lwi_param *p = &l->params[items[i].param];
        if (p->owner != h || p->shared_embedding) continue;
        const double ci = items[i].cost;
        if (load[light] + ci < best) {
            best = load[light] + ci;
            best_i = i, best_j = -1;
        }
        for (int32_t j = 0; j < n; j++) {
            const lwi_param *q = &l->params[items[j].param];
            if (q->owner != light || q->shared_embedding || items[j].cost >= ci) continue;
            const double d = ci - items[j].cost;
            const double worse = load[h] - d > load[light] + d ? load[h] - d : load[light] + d;
            if (worse < best) {
                best = worse;
                best_i = i, best_j = j;
            }
        }
    }
    /* an improvement must be worth more than a float's rounding, so that the search ends */
    if (best_i < 0 || best >= load[h] * (1.0 - 1e-12)) return false;
    lwi_param *p = &l->params[items[best_i].param];
    p->owner = light;
    load[h] -= items[best_i].cost, load[light] += items[best_i].cost;
    numel[h] -= p->numel, numel[light] += p->numel;
    if (best_j >= 0) {
        lwi_param *q = &l->params[items[best_j].param];
        q->owner = h;
        load[light] -= items[best_j].cost, load[h] += items[best_j].cost;
        numel[light] -= q->numel, numel[h] += q->numel;
    }
    return true;
}

/* What the Muon buffers laid out before this one already give each rank (a Muon buffer's
 * rank r is rank r of the other Muon buffers' groups, as the layout's statistics count it): a
 * model's expert matrices then fill around its dense ones instead of piling onto the same
 * ranks. AdamW buffers balance on their own. */
static void start_loads(const lw_layout *l, const lwi_buffer *b, double *load, int64_t *numel) {
    memset(load, 0, sizeof(double) * (size_t)b->dp);
    memset(numel, 0, sizeof(int64_t) * (size_t)b->dp);
    for (const lwi_buffer *o = l->buffers; b->whole && o < b; o++) {
        for (int32_t k = 0; o->whole && k < o->n_params; k++) {
            const lwi_param *p = &l->params[o->params[k]];
            if (p->owner < 0 || p->owner >= b->dp) continue;
            load[p->owner] += lwi_param_cost(p);
            numel[p->owner] += p->numel;
        }
    }
}

/* Sets every param's owner; items, load and numel are scratch of n, dp and dp entries. */
static void assign_owners(lw_layout *l, lwi_buffer *b, ranked *items, double *load,
                          int64_t *numel) {
    const int32_t dp = b->dp;
    int32_t n = 0;
    start_loads(l, b, load, numel);
    for (int32_t k = 0; k < b->n_params; k++) {
        const int32_t i = lwi_backprop(b, k);
        lwi_param *p = &l->params[i];
        items[n++] = (ranked){lwi_param_cost(p), p->numel, k, i};
        if (p->shared_embedding) { /* rank 0, as in the shard-aligned layouts */
            p->owner = 0;
            load[0] += lwi_param_cost(p);
            numel[0] += p->numel;
        }
    }
    qsort(items, (size_t)n, sizeof(ranked), by_cost_desc);
    for (int32_t k = 0; k < n; k++) {
        lwi_param *p = &l->params[items[k].param];
        if (p->shared_embedding) continue;
        const int32_t r = lightest(load, numel, dp);
        p->owner = r;
        load[r] += items[k].cost;
        numel[r] += p->numel;
    }
    /* Each round lowers the heaviest load or ends; the cap bounds the time on huge buffers
     * (LPT alone is already within 4/3 of the optimum). */
    for (int32_t round = 0; round < 4 * n + 64 && dp > 1; round++)
        if (!improve(l, items, n, load, numel, dp)) break;
}

/* Lays out the bucket of params bucket[0..count) (backprop order): rank by rank, each param at
 * the next multiple of 64, each shard ending at one. */
static lw_status emit_bucket(lw_layout *l, lwi_buffer *b, const int32_t *bucket, int32_t count,
                             int64_t start) {
    int64_t *shards = malloc(sizeof(int64_t) * (size_t)(b->dp + 1));
    if (shards == NULL) return lwi_fail(LW_ERR_NOMEM, "layout: out of memory");
    lwi_bucket_open(b, start);
    lwi_bucket_current(b)->shards = shards;
    int64_t at = start, largest = 0;
    for (int32_t r = 0; r < b->dp; r++) {
        shards[r] = at;
        for (int32_t e = 0; e < count; e++) {
            const lwi_param *p = &l->params[bucket[e]];
            if (p->owner != r) continue;
            lwi_bucket_put(l, b, bucket[e], at, r);
            at = lwi_pad(at + p->numel, 64);
        }
        if (at - shards[r] > largest) largest = at - shards[r];
    }
    shards[b->dp] = at;
    lwi_bucket_close(b, at, largest);
    return LW_OK;
}

lw_status lwi_layout_packed(lw_layout *l, lwi_buffer *b) {
    const int32_t n = b->n_params;
    ranked *items = malloc(sizeof(ranked) * (size_t)n);
    int32_t *bucket = malloc(sizeof(int32_t) * (size_t)n);
    double *load = malloc(sizeof(double) * (size_t)b->dp);
    int64_t *numel = malloc(sizeof(int64_t) * (size_t)b->dp);
    lw_status st = LW_OK;
    if (items == NULL || bucket == NULL || load == NULL || numel == NULL)
        st = lwi_fail(LW_ERR_NOMEM, "layout: out of memory");
    if (st == LW_OK) assign_owners(l, b, items, load, numel);
    /* buckets: backprop order, closed at bucket_size; a shared embedding alone */
    int64_t start = 0, fill = 0;
    int32_t count = 0;
    for (int32_t k = 0; st == LW_OK && k < n; k++) {
        const int32_t i = lwi_backprop(b, k);
        const lwi_param *p = &l->params[i];
        if (p->shared_embedding && count > 0) {
            st = emit_bucket(l, b, bucket, count, start);
            start = b->numel, fill = 0, count = 0;
        }
        if (st != LW_OK) break;
        bucket[count++] = i;
        fill += lwi_pad(p->numel, 64);
        if (p->shared_embedding || fill >= l->opts.bucket_size) {
            st = emit_bucket(l, b, bucket, count, start);
            start = b->numel, fill = 0, count = 0;
        }
    }
    if (st == LW_OK && count > 0) st = emit_bucket(l, b, bucket, count, start);
    free(items);
    free(bucket);
    free(load);
    free(numel);
    return st;
}
