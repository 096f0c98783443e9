/* aligned.c: the shard-aligned layouts of docs/algorithms.md section 4 (size_matching, lpt,
 * cost). Every bucket is dp equal shards of S = pad(max shard fill, shard_divisor(dp)); no param
 * crosses a shard and its owner is its shard index. A shared embedding sits alone in shard 0 of
 * its own bucket. Buckets are emitted from a list of (param, shard, offset-in-shard) entries. */
#include "layout/layout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    int32_t param;
    int32_t shard;
    int64_t offset; /* within the shard, 64-aligned */
} entry;

/* A sort key that carries its own tie-break, so qsort gives a stable, context-free order. */
typedef struct keyed {
    double key;
    int32_t pos;
    int32_t param;
} keyed;

typedef struct aligned {
    lw_layout *l;
    lwi_buffer *b;
    int32_t dp;
    int64_t shard_div;
    int64_t bucket_size;
    int64_t next_start; /* where the next bucket begins */
    entry *entries;     /* the open bucket, in assignment order */
    int32_t n_entries;
    int64_t *fill;     /* [dp] per-shard fill of the bucket being emitted */
    int64_t *estimate; /* [dp] lpt/cost: fills estimated while a chunk grows */
    double *load;      /* [dp] cost: Newton-Schulz load, kept across the buffer's buckets */
    keyed *chunk;      /* lpt/cost: the growing chunk, in arrival order */
    int32_t n_chunk;
    int64_t chunk_numel;
    int64_t chunk_max;
    int32_t *pool_next; /* size_matching: linked list of unassigned pool positions */
    int32_t *pool_prev;
} aligned;

static int64_t pad64(int64_t v) { return lwi_pad(v, 64); }

static int32_t argmin_i64(const int64_t *v, int32_t n) {
    int32_t best = 0;
    for (int32_t s = 1; s < n; s++)
        if (v[s] < v[best]) best = s;
    return best;
}

static void push(aligned *a, int32_t param, int32_t shard, int64_t offset) {
    a->entries[a->n_entries++] = (entry){param, shard, offset};
}

/* Writes the open bucket: S = pad(max_fill, shard_divisor), entries at shard * S + offset. */
static lw_status emit_bucket(aligned *a, int64_t max_fill) {
    int64_t shard = lwi_pad(max_fill, a->shard_div);
    if (shard > (INT64_MAX / 2 - a->next_start) / a->dp)
        return lwi_fail(LW_ERR_INVALID, "layout: buffer larger than 2^62 elements at dp %d", a->dp);
    lwi_bucket_open(a->b, a->next_start);
    for (int32_t k = 0; k < a->n_entries; k++) {
        const entry *e = &a->entries[k];
        lwi_bucket_put(a->l, a->b, e->param, a->next_start + e->shard * shard + e->offset,
                       e->shard);
    }
    a->next_start += (int64_t)a->dp * shard;
    lwi_bucket_close(a->b, a->next_start, shard);
    a->n_entries = 0;
    return LW_OK;
}

static lw_status emit_shared_embedding(aligned *a, int32_t param) {
    push(a, param, 0, 0);
    return emit_bucket(a, a->l->params[param].numel);
}

/* ---- size_matching --------------------------------------------------------------------------- */

static void pool_remove(aligned *a, int32_t *head, int32_t k) {
    int32_t p = a->pool_prev[k], n = a->pool_next[k];
    if (p >= 0)
        a->pool_next[p] = n;
    else
        *head = n;
    if (n >= 0) a->pool_prev[n] = p;
}

/* Closing test dp * pad(cursor, shard_div) >= bucket_size, without overflowing. */
static bool bucket_full(const aligned *a, int64_t cursor) {
    int64_t need = a->bucket_size / a->dp + (a->bucket_size % a->dp != 0);
    return lwi_pad(cursor, a->shard_div) >= need;
}

/* One pool (the params between shared embeddings), in backprop order. Each round the first
 * unassigned param (size n) seeds shard 0; every other shard takes the next param of exactly
 * size n, or else greedily the next params that fit into n; all shards advance by n. */
static lw_status size_matching_pool(aligned *a, const int32_t *pool, int32_t n) {
    const lwi_param *params = a->l->params;
    if (n == 0) return LW_OK;
    for (int32_t k = 0; k < n; k++) {
        a->pool_next[k] = k + 1 < n ? k + 1 : -1;
        a->pool_prev[k] = k - 1;
    }
    int32_t head = 0;
    int64_t cursor = 0;
    lw_status st;
    while (head >= 0) {
        int32_t seed = head;
        int64_t size = params[pool[seed]].numel, at = pad64(cursor);
        pool_remove(a, &head, seed);
        push(a, pool[seed], 0, at);
        for (int32_t s = 1; s < a->dp && head >= 0; s++) {
            int32_t match = head;
            while (match >= 0 && params[pool[match]].numel != size)
                match = a->pool_next[match];
            if (match >= 0) {
                pool_remove(a, &head, match);
                push(a, pool[match], s, at);
                continue;
            }
            int64_t fill = 0;
            for (int32_t k = head; k >= 0;) {
                int64_t numel = params[pool[k]].numel;
                if (pad64(fill) + numel > size) break;
                int32_t next = a->pool_next[k];
                pool_remove(a, &head, k);
                push(a, pool[k], s, at + pad64(fill));
                fill = pad64(fill) + numel;
                k = next;
            }
        }
        cursor = at + size;
        if (bucket_full(a, cursor)) {
            if ((st = emit_bucket(a, cursor)) != LW_OK) return st;
            cursor = 0;
        }
    }
    return a->n_entries > 0 ? emit_bucket(a, cursor) : LW_OK;
}

static lw_status size_matching(aligned *a, int32_t *pool) {
    lwi_buffer *b = a->b;
    int32_t n = 0;
    lw_status st;
    for (int32_t k = 0; k < b->n_params; k++) {
        int32_t i = lwi_backprop(b, k);
        if (!a->l->params[i].shared_embedding) {
            pool[n++] = i;
            continue;
        }
        if ((st = size_matching_pool(a, pool, n)) != LW_OK) return st;
        n = 0;
        if ((st = emit_shared_embedding(a, i)) != LW_OK) return st;
    }
    return size_matching_pool(a, pool, n);
}

/* ---- lpt and cost ---------------------------------------------------------------------------- */

static int by_key_desc(const void *x, const void *y) {
    const keyed *a = x, *b = y;
    if (a->key != b->key) return a->key > b->key ? -1 : 1;
    return (a->pos > b->pos) - (a->pos < b->pos);
}

/* cost: the shard with the smallest load among those where the param fits under
 * 1.3 * chunk_numel / dp; if none, the shard with the smallest fill. */
static int32_t cost_shard(const aligned *a, int64_t numel) {
    const double cap = 1.3 * (double)a->chunk_numel / (double)a->dp;
    int32_t best = -1;
    for (int32_t s = 0; s < a->dp; s++) {
        if ((double)(pad64(a->fill[s]) + numel) > cap) continue;
        if (best < 0 || a->load[s] < a->load[best]) best = s;
    }
    return best >= 0 ? best : argmin_i64(a->fill, a->dp);
}

/* Emits the chunk: params sorted largest first (numel for lpt, cost for cost), stable. */
static lw_status emit_chunk(aligned *a) {
    if (a->n_chunk == 0) return LW_OK;
    const bool by_cost = a->b->algorithm == LW_ALGORITHM_COST;
    qsort(a->chunk, (size_t)a->n_chunk, sizeof(keyed), by_key_desc);
    memset(a->fill, 0, sizeof(int64_t) * (size_t)a->dp);
    int64_t max_fill = 0;
    for (int32_t k = 0; k < a->n_chunk; k++) {
        const lwi_param *p = &a->l->params[a->chunk[k].param];
        int32_t s = by_cost ? cost_shard(a, p->numel) : argmin_i64(a->fill, a->dp);
        int64_t at = pad64(a->fill[s]);
        push(a, a->chunk[k].param, s, at);
        a->fill[s] = at + p->numel;
        if (by_cost) a->load[s] += a->chunk[k].key;
        if (a->fill[s] > max_fill) max_fill = a->fill[s];
    }
    a->n_chunk = 0;
    a->chunk_numel = 0;
    a->chunk_max = 0;
    memset(a->estimate, 0, sizeof(int64_t) * (size_t)a->dp);
    return emit_bucket(a, max_fill);
}

/* Closes the chunk before a param when it is big enough and the param would not fit into the
 * padding the chunk's estimated shards already have (the soft minimum). */
static bool chunk_closes_before(const aligned *a, int64_t numel) {
    if (a->n_chunk == 0) return false;
    double soft = floor((double)a->dp * (double)a->chunk_max * 0.9);
    int64_t threshold = a->bucket_size;
    if (soft < 9.2e18 && (int64_t)soft > threshold) threshold = (int64_t)soft;
    if (a->chunk_numel < threshold) return false;
    int64_t min_fill = a->estimate[0], max_fill = a->estimate[0];
    for (int32_t s = 1; s < a->dp; s++) {
        if (a->estimate[s] < min_fill) min_fill = a->estimate[s];
        if (a->estimate[s] > max_fill) max_fill = a->estimate[s];
    }
    return pad64(min_fill) + numel > lwi_pad(max_fill, a->shard_div);
}

static lw_status chunked(aligned *a) {
    lwi_buffer *b = a->b;
    const bool by_cost = b->algorithm == LW_ALGORITHM_COST;
    lw_status st;
    for (int32_t k = 0; k < b->n_params; k++) {
        int32_t i = lwi_backprop(b, k);
        const lwi_param *p = &a->l->params[i];
        if (p->shared_embedding) {
            if ((st = emit_chunk(a)) != LW_OK) return st;
            if ((st = emit_shared_embedding(a, i)) != LW_OK) return st;
            continue;
        }
        if (chunk_closes_before(a, p->numel) && (st = emit_chunk(a)) != LW_OK) return st;
        int32_t s = argmin_i64(a->estimate, a->dp);
        a->estimate[s] = pad64(a->estimate[s]) + p->numel;
        a->chunk_numel += p->numel;
        if (p->numel > a->chunk_max) a->chunk_max = p->numel;
        a->chunk[a->n_chunk] =
            (keyed){by_cost ? lwi_param_cost(p) : (double)p->numel, a->n_chunk, i};
        a->n_chunk++;
    }
    return emit_chunk(a);
}

lw_status lwi_layout_aligned(lw_layout *l, lwi_buffer *b) {
    aligned a;
    memset(&a, 0, sizeof a);
    a.l = l;
    a.b = b;
    a.dp = b->dp;
    a.shard_div = lw_shard_divisor(b->dp, l->opts.high_busbw);
    a.bucket_size = l->opts.bucket_size;
    size_t n = (size_t)b->n_params, dp = (size_t)b->dp;
    a.entries = malloc(sizeof(entry) * n);
    a.fill = calloc(dp, sizeof(int64_t));
    a.estimate = calloc(dp, sizeof(int64_t));
    a.load = calloc(dp, sizeof(double));
    a.chunk = malloc(sizeof(keyed) * n);
    a.pool_next = malloc(sizeof(int32_t) * n);
    a.pool_prev = malloc(sizeof(int32_t) * n);
    int32_t *pool = malloc(sizeof(int32_t) * n);
    lw_status st;
    if (!a.entries || !a.fill || !a.estimate || !a.load || !a.chunk || !a.pool_next ||
        !a.pool_prev || !pool)
        st = lwi_fail(LW_ERR_NOMEM, "layout: out of memory");
    else if (b->algorithm == LW_ALGORITHM_SIZE_MATCHING)
        st = size_matching(&a, pool);
    else
        st = chunked(&a);
    free(a.entries);
    free(a.fill);
    free(a.estimate);
    free(a.load);
    free(a.chunk);
    free(a.pool_next);
    free(a.pool_prev);
    free(pool);
    return st;
}
