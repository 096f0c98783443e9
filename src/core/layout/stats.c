/* stats.c: whole-model statistics of a layout (padding, per-rank owned numel and
 * Newton-Schulz cost over the Muon buffers, imbalance and its lower bound) and its stable hash. */
#include "layout/layout.h"

#include <stdlib.h>
#include <string.h>

/* Credits rank r of a Muon buffer with what it updates of param p. */
static void credit(lw_layout *l, int32_t rank, int64_t numel, double cost) {
    l->rank_numel[rank] += numel;
    l->rank_cost[rank] += cost;
}

static void credit_param(lw_layout *l, const lwi_buffer *b, const lwi_param *p) {
    const double cost = lwi_param_cost(p);
    if (p->owner >= 0) {
        credit(l, p->owner, p->numel, cost);
    } else if (lwi_is_elementwise(b->algorithm)) {
        /* element-wise: each rank updates the part of p inside its slice of the bucket */
        const lwi_bucket *k = &b->buckets[p->bucket];
        for (int32_t r = 0; r < b->dp; r++) {
            int64_t lo = k->start + r * k->shard_size, hi = lo + k->shard_size;
            if (lo < p->start) lo = p->start;
            if (hi > p->start + p->numel) hi = p->start + p->numel;
            if (hi > lo) credit(l, r, hi - lo, cost * (double)(hi - lo) / (double)p->numel);
        }
    } else {
        for (int32_t r = 0; r < b->dp; r++)
            credit(l, r, p->numel, cost); /* unsharded */
    }
}

static int by_value_desc(const void *x, const void *y) {
    const double a = *(const double *)x, b = *(const double *)y;
    return (a < b) - (a > b);
}

/* A lower bound on the largest rank load when each of the n costs (any order; sorted here) goes
 * whole to one of `ranks` ranks: the mean, the largest cost, and by pigeonhole, for every j >= 1,
 * the j + 1 smallest of the j * ranks + 1 largest costs (some rank holds j + 1 of those). */
static double whole_ownership_bound(double *costs, int32_t n, int32_t ranks, double total) {
    if (n == 0) return 0.0;
    qsort(costs, (size_t)n, sizeof(double), by_value_desc);
    double bound = total / ranks > costs[0] ? total / ranks : costs[0];
    for (int64_t j = 1; j * ranks + 1 <= n; j++) {
        const int64_t m = j * ranks + 1; /* the m largest, costs[0 .. m) */
        double sum = 0;
        for (int64_t i = m - 1 - j; i < m; i++)
            sum += costs[i];
        if (sum > bound) bound = sum;
    }
    return bound;
}

static double imbalance(double max, double total, int32_t ranks) {
    return total > 0 ? max / (total / ranks) : 1.0;
}

void lwi_layout_compute_stats(lw_layout *l) {
    lw_layout_stats *s = &l->stats;
    int32_t ranks = s->ranks;
    memset(s, 0, sizeof *s);
    s->ranks = ranks;
    s->params = l->n_params;
    double largest_cost = 0;
    for (int32_t bi = 0; bi < l->n_buffers; bi++) {
        const lwi_buffer *b = &l->buffers[bi];
        s->buffer_numel += b->numel;
        if (b->whole) s->muon_buffer_numel += b->numel;
        for (int32_t k = 0; k < b->n_params; k++) {
            const lwi_param *p = &l->params[b->params[k]];
            s->numel += p->numel;
            if (!b->whole) continue;
            s->muon_numel += p->numel;
            credit_param(l, b, p);
            double c = lwi_param_cost(p);
            if (c > largest_cost) largest_cost = c;
        }
    }
    s->padding = s->buffer_numel - s->numel;
    s->overhead = s->numel > 0 ? (double)s->padding / (double)s->numel : 0.0;
    s->muon_overhead = s->muon_numel > 0
                           ? (double)(s->muon_buffer_numel - s->muon_numel) / (double)s->muon_numel
                           : 0.0;
    int64_t max_numel = 0, total_numel = 0;
    double max_cost = 0, total_cost = 0;
    for (int32_t r = 0; r < ranks; r++) {
        total_numel += l->rank_numel[r];
        total_cost += l->rank_cost[r];
        if (l->rank_numel[r] > max_numel) max_numel = l->rank_numel[r];
        if (l->rank_cost[r] > max_cost) max_cost = l->rank_cost[r];
    }
    s->numel_imbalance = imbalance((double)max_numel, (double)total_numel, ranks);
    s->cost_imbalance = imbalance(max_cost, total_cost, ranks);
    const double mean = total_cost / ranks;
    s->cost_imbalance_bound = 1.0;
    if (total_cost <= 0) return;
    /* without memory for the sort, the bound without its pigeonhole terms (still a bound) */
    double *costs = malloc(sizeof(double) * (size_t)(l->n_params > 0 ? l->n_params : 1));
    if (costs == NULL) {
        s->cost_imbalance_bound = (largest_cost > mean ? largest_cost : mean) / mean;
        return;
    }
    int32_t n = 0;
    for (int32_t bi = 0; bi < l->n_buffers; bi++) {
        const lwi_buffer *b = &l->buffers[bi];
        for (int32_t k = 0; b->whole && k < b->n_params; k++)
            costs[n++] = lwi_param_cost(&l->params[b->params[k]]);
    }
    s->cost_imbalance_bound = whole_ownership_bound(costs, n, ranks, total_cost) / mean;
    free(costs);
}

lw_status lw_layout_stats_get(const lw_layout *l, lw_layout_stats *out) {
    if (l == NULL || out == NULL) return lwi_fail(LW_ERR_INVALID, "layout: NULL argument");
    *out = l->stats;
    return LW_OK;
}

lw_status lw_layout_rank_load(const lw_layout *l, int32_t rank, int64_t *numel, double *cost) {
    if (l == NULL) return lwi_fail(LW_ERR_INVALID, "layout: layout is NULL");
    if (rank < 0 || rank >= l->stats.ranks)
        return lwi_fail(LW_ERR_RANGE, "layout: rank %d out of range [0, %d)", rank, l->stats.ranks);
    if (numel) *numel = l->rank_numel[rank];
    if (cost) *cost = l->rank_cost[rank];
    return LW_OK;
}

/* ---- hash: FNV-1a 64 over a byte-order-independent serialisation ---------------------------- */

typedef struct fnv {
    uint64_t h;
} fnv;

static void fnv_bytes(fnv *f, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        f->h ^= p[i];
        f->h *= UINT64_C(1099511628211);
    }
}

static void fnv_int(fnv *f, int64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)v >> (8 * i));
    fnv_bytes(f, b, 8);
}

lw_status lw_layout_hash(const lw_layout *l, char *hex) {
    if (l == NULL || hex == NULL) return lwi_fail(LW_ERR_INVALID, "layout: NULL argument");
    fnv f = {UINT64_C(14695981039346656037)};
    const lw_layout_options *o = &l->opts;
    fnv_int(&f, o->dp);
    fnv_int(&f, o->expert_dp);
    fnv_int(&f, o->bucket_size);
    fnv_int(&f, o->algorithm);
    fnv_int(&f, o->adamw_algorithm);
    fnv_int(&f, o->high_busbw);
    fnv_int(&f, l->n_params);
    for (int32_t i = 0; i < l->n_params; i++) {
        const lwi_param *p = &l->params[i];
        /* An expert parameter's name is left out: under expert parallelism the ranks of an EP
         * group declare different experts (global indices in the names) in the same places, and
         * the buffers check compares this hash across the whole world. */
        if (!p->expert) fnv_bytes(&f, p->name, strlen(p->name) + 1);
        fnv_int(&f, p->ndim);
        for (int d = 0; d < p->ndim; d++)
            fnv_int(&f, p->shape[d]);
        fnv_int(&f, p->dtype | p->grad_dtype << 4 | p->expert << 8 | p->shared_embedding << 9 |
                        (int64_t)p->optimizer << 10);
        fnv_int(&f, p->buffer);
        fnv_int(&f, p->bucket);
        fnv_int(&f, p->start);
        fnv_int(&f, p->owner);
        /* only when present, so that the hashes of layouts without TP stay as they were */
        if (p->tp_blocks > 0) {
            fnv_int(&f, 0x7470); /* "tp" */
            fnv_int(&f, p->tp_dim);
            fnv_int(&f, p->tp_blocks);
        }
        if (p->qkv_groups > 0) {
            fnv_int(&f, 0x716b76); /* "qkv" */
            fnv_int(&f, p->qkv_groups);
            for (int c = 0; c < 3; c++)
                fnv_int(&f, p->qkv_rows[c]);
        }
    }
    for (int32_t bi = 0; bi < l->n_buffers; bi++) {
        const lwi_buffer *b = &l->buffers[bi];
        fnv_int(&f, b->algorithm);
        fnv_int(&f, b->dp);
        fnv_int(&f, b->numel);
        for (int32_t k = 0; k < b->n_buckets; k++) {
            fnv_int(&f, b->buckets[k].start);
            fnv_int(&f, b->buckets[k].stop);
            fnv_int(&f, b->buckets[k].shard_size);
        }
    }
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++)
        hex[i] = digits[(f.h >> (60 - 4 * i)) & 0xf];
    hex[16] = '\0';
    return LW_OK;
}
