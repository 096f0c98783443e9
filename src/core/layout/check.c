/* check.c: the validator. Checks every invariant of docs/algorithms.md sections 2-4 on a
 * finished layout and names the first violation ("buffer #1 bucket #2: ..."; ordinals count
 * from 1, as the Lua tables do). It reads the layout only; it does not recompute it. */
#include "layout/layout.h"

#include <stdlib.h>

typedef struct span {
    int64_t start;
    int64_t stop;
    int32_t param;
} span;

static int by_start(const void *a, const void *b) {
    const span *x = a, *y = b;
    return (x->start > y->start) - (x->start < y->start);
}

#define FAIL(...) return lwi_fail(LW_ERR_INVALID, "layout check: " __VA_ARGS__)

static lw_status check_param_in_bucket(const lw_layout *l, const lwi_buffer *b, int32_t bi,
                                       int32_t ki, int32_t i) {
    const lwi_bucket *k = &b->buckets[ki];
    const lwi_param *p = &l->params[i];
    const lw_algorithm alg = b->algorithm;
    if (p->buffer != bi || p->bucket != ki)
        FAIL("buffer #%d bucket #%d: '%s' says it is in buffer #%d bucket #%d", bi + 1, ki + 1,
             p->name, p->buffer + 1, p->bucket + 1);
    if (p->start < k->start || p->start + p->numel > k->stop)
        FAIL("buffer #%d bucket #%d: '%s' at [%lld, %lld) is outside the bucket [%lld, %lld)",
             bi + 1, ki + 1, p->name, (long long)p->start, (long long)(p->start + p->numel),
             (long long)k->start, (long long)k->stop);
    if ((lwi_is_padded(alg) || lwi_is_packed(alg)) && p->start % 64 != 0)
        FAIL("buffer #%d bucket #%d: '%s' starts at %lld, not a multiple of 64", bi + 1, ki + 1,
             p->name, (long long)p->start);
    if (p->shared_embedding && (lwi_is_padded(alg) || lwi_is_packed(alg)) && k->count != 1)
        FAIL("buffer #%d bucket #%d: shared embedding '%s' shares its bucket with %d others",
             bi + 1, ki + 1, p->name, k->count - 1);
    if (lwi_is_aligned(alg)) {
        int64_t shard = (p->start - k->start) / k->shard_size;
        int64_t last = (p->start + p->numel - 1 - k->start) / k->shard_size;
        if (shard != last)
            FAIL("buffer #%d bucket #%d: '%s' crosses from shard %lld into shard %lld", bi + 1,
                 ki + 1, p->name, (long long)shard, (long long)last);
        if (p->owner != shard)
            FAIL("buffer #%d bucket #%d: '%s' is owned by rank %d but lies in shard %lld", bi + 1,
                 ki + 1, p->name, p->owner, (long long)shard);
        if (p->shared_embedding && shard != 0)
            FAIL("buffer #%d bucket #%d: shared embedding '%s' is in shard %lld, not 0", bi + 1,
                 ki + 1, p->name, (long long)shard);
    } else if (lwi_is_packed(alg)) {
        if (p->owner < 0 || p->owner >= b->dp)
            FAIL("buffer #%d: '%s' has owner %d outside [0, %d)", bi + 1, p->name, p->owner, b->dp);
        if (p->start < k->shards[p->owner] || p->start + p->numel > k->shards[p->owner + 1])
            FAIL("buffer #%d bucket #%d: '%s' is owned by rank %d but lies outside its shard "
                 "[%lld, %lld)",
                 bi + 1, ki + 1, p->name, p->owner, (long long)k->shards[p->owner],
                 (long long)k->shards[p->owner + 1]);
        if (p->shared_embedding && p->owner != 0)
            FAIL("buffer #%d bucket #%d: shared embedding '%s' is owned by rank %d, not 0", bi + 1,
                 ki + 1, p->name, p->owner);
    } else if (alg == LW_ALGORITHM_LEGACY) {
        if (p->owner < 0 || p->owner >= b->dp)
            FAIL("buffer #%d: '%s' has owner %d outside [0, %d)", bi + 1, p->name, p->owner, b->dp);
    } else if (p->owner != -1) {
        FAIL("buffer #%d: '%s' has owner %d in an element-wise buffer", bi + 1, p->name, p->owner);
    }
    return LW_OK;
}

/* Packed: dp + 1 boundaries from the bucket's start to its stop, in order, at multiples of 64,
 * and shard_size the largest shard. */
static lw_status check_shards(const lwi_buffer *b, int32_t bi, int32_t ki) {
    const lwi_bucket *k = &b->buckets[ki];
    if (k->shards == NULL) FAIL("buffer #%d bucket #%d: packed bucket without shards", bi + 1, ki + 1);
    if (k->shards[0] != k->start || k->shards[b->dp] != k->stop)
        FAIL("buffer #%d bucket #%d: shards span [%lld, %lld), not the bucket [%lld, %lld)",
             bi + 1, ki + 1, (long long)k->shards[0], (long long)k->shards[b->dp],
             (long long)k->start, (long long)k->stop);
    int64_t largest = 0;
    for (int32_t r = 0; r < b->dp; r++) {
        const int64_t size = k->shards[r + 1] - k->shards[r];
        if (size < 0 || k->shards[r + 1] % 64 != 0)
            FAIL("buffer #%d bucket #%d: shard %d is [%lld, %lld)", bi + 1, ki + 1, r,
                 (long long)k->shards[r], (long long)k->shards[r + 1]);
        if (size > largest) largest = size;
    }
    if (k->shard_size != largest)
        FAIL("buffer #%d bucket #%d: shard size %lld is not the largest shard, %lld", bi + 1,
             ki + 1, (long long)k->shard_size, (long long)largest);
    return LW_OK;
}

static lw_status check_bucket(const lw_layout *l, const lwi_buffer *b, int32_t bi, int32_t ki,
                              span *spans) {
    const lwi_bucket *k = &b->buckets[ki];
    const lw_algorithm alg = b->algorithm;
    const int64_t end_div = lw_bucket_end_divisor(b->dp, l->opts.high_busbw);
    const int64_t shard_div = lw_shard_divisor(b->dp, l->opts.high_busbw);
    if (k->count < 1) FAIL("buffer #%d bucket #%d is empty", bi + 1, ki + 1);
    if (k->start >= k->stop)
        FAIL("buffer #%d bucket #%d: empty range [%lld, %lld)", bi + 1, ki + 1, (long long)k->start,
             (long long)k->stop);
    if (lwi_is_padded(alg)) {
        if (k->stop % end_div != 0)
            FAIL("buffer #%d bucket #%d: end %lld is not a multiple of bucket_end_divisor %lld",
                 bi + 1, ki + 1, (long long)k->stop, (long long)end_div);
        if (k->shard_size * b->dp != k->stop - k->start)
            FAIL("buffer #%d bucket #%d: %d shards of %lld do not make its %lld elements", bi + 1,
                 ki + 1, b->dp, (long long)k->shard_size, (long long)(k->stop - k->start));
    } else if (lwi_is_packed(alg)) {
        lw_status st = check_shards(b, bi, ki);
        if (st != LW_OK) return st;
    } else if (k->shard_size != k->stop - k->start) {
        FAIL("buffer #%d bucket #%d: unsharded bucket has shard size %lld, not %lld", bi + 1,
             ki + 1, (long long)k->shard_size, (long long)(k->stop - k->start));
    }
    if (lwi_is_aligned(alg) && k->shard_size % shard_div != 0)
        FAIL("buffer #%d bucket #%d: shard size %lld is not a multiple of shard_divisor %lld",
             bi + 1, ki + 1, (long long)k->shard_size, (long long)shard_div);
    if (alg == LW_ALGORITHM_ROWS) {
        const lwi_param *p = &l->params[b->placed[k->first]];
        if (k->count != 1)
            FAIL("buffer #%d bucket #%d: rows layout with %d params in one bucket", bi + 1, ki + 1,
                 k->count);
        if (p->start != k->start || k->shard_size % (p->numel / p->shape[0]) != 0 ||
            k->shard_size * b->dp < p->numel)
            FAIL("buffer #%d bucket #%d: the shards of %lld elements are not whole rows of '%s'",
                 bi + 1, ki + 1, (long long)k->shard_size, p->name);
    }
    int64_t real = 0;
    for (int32_t e = 0; e < k->count; e++) {
        int32_t i = b->placed[k->first + e];
        lw_status st = check_param_in_bucket(l, b, bi, ki, i);
        if (st != LW_OK) return st;
        real += l->params[i].numel;
        spans[e] = (span){l->params[i].start, l->params[i].start + l->params[i].numel, i};
    }
    if (real != k->numel_unpadded)
        FAIL("buffer #%d bucket #%d: numel_unpadded is %lld but its params hold %lld", bi + 1,
             ki + 1, (long long)k->numel_unpadded, (long long)real);
    qsort(spans, (size_t)k->count, sizeof(span), by_start);
    for (int32_t e = 1; e < k->count; e++)
        if (spans[e].start < spans[e - 1].stop)
            FAIL("buffer #%d bucket #%d: '%s' and '%s' overlap", bi + 1, ki + 1,
                 l->params[spans[e - 1].param].name, l->params[spans[e].param].name);
    if (lwi_is_packed(alg) && k->stop - k->start - k->numel_unpadded > 63 * (int64_t)k->count)
        FAIL("buffer #%d bucket #%d: %lld elements of padding for %d params (at most 63 each, "
             "for alignment)",
             bi + 1, ki + 1, (long long)(k->stop - k->start - k->numel_unpadded), k->count);
    if (!lwi_is_padded(alg) && !lwi_is_packed(alg)) {
        /* default and legacy have no padding: the params tile the bucket exactly */
        int64_t at = k->start;
        for (int32_t e = 0; e < k->count; e++) {
            if (spans[e].start != at)
                FAIL("buffer #%d bucket #%d: unpadded layout has a gap before '%s'", bi + 1, ki + 1,
                     l->params[spans[e].param].name);
            at = spans[e].stop;
        }
        if (at != k->stop)
            FAIL("buffer #%d bucket #%d: unpadded layout has a gap at its end", bi + 1, ki + 1);
    }
    return LW_OK;
}

static lw_status check_buffer(const lw_layout *l, int32_t bi, int32_t *seen, span *spans) {
    const lwi_buffer *b = &l->buffers[bi];
    if (b->n_params < 1) FAIL("buffer #%d has no parameters", bi + 1);
    if (b->dp != (b->expert ? l->opts.expert_dp : l->opts.dp))
        FAIL("buffer #%d: dp %d does not match the options", bi + 1, b->dp);
    if (b->n_placed != b->n_params)
        FAIL("buffer #%d: %d params placed out of %d", bi + 1, b->n_placed, b->n_params);
    for (int32_t k = 0; k < b->n_params; k++) {
        if (b->params[k] < 0 || b->params[k] >= l->n_params)
            FAIL("buffer #%d: member %d names parameter %d of %d", bi + 1, k + 1, b->params[k],
                 l->n_params);
        const lwi_param *p = &l->params[b->params[k]];
        if (k > 0 && b->params[k] <= b->params[k - 1])
            FAIL("buffer #%d: params are not in definition order at '%s'", bi + 1, p->name);
        if (p->dtype != b->param_dtype || p->grad_dtype != b->grad_dtype ||
            p->expert != b->expert || p->optimizer != b->optimizer || p->whole != b->whole)
            FAIL("buffer #%d: '%s' does not have the buffer's key", bi + 1, p->name);
        if (p->whole && p->shared_embedding)
            FAIL("buffer #%d: shared embedding '%s' is updated by a whole-matrix rule", bi + 1,
                 p->name);
    }
    for (int32_t k = 0; k < b->n_placed; k++) {
        if (b->placed[k] < 0 || b->placed[k] >= l->n_params)
            FAIL("buffer #%d: entry %d names parameter %d of %d", bi + 1, k + 1, b->placed[k],
                 l->n_params);
        seen[b->placed[k]]++;
    }
    int64_t at = 0;
    int32_t first = 0;
    for (int32_t ki = 0; ki < b->n_buckets; ki++) {
        const lwi_bucket *k = &b->buckets[ki];
        if (k->start != at)
            FAIL("buffer #%d bucket #%d starts at %lld, not at the previous end %lld", bi + 1,
                 ki + 1, (long long)k->start, (long long)at);
        if (k->first != first)
            FAIL("buffer #%d bucket #%d: entry list out of step", bi + 1, ki + 1);
        lw_status st = check_bucket(l, b, bi, ki, spans);
        if (st != LW_OK) return st;
        at = k->stop;
        first += k->count;
    }
    if (first != b->n_placed || at != b->numel)
        FAIL("buffer #%d: buckets cover %lld of its %lld elements", bi + 1, (long long)at,
             (long long)b->numel);
    if (b->algorithm == LW_ALGORITHM_LPT || b->algorithm == LW_ALGORITHM_COST ||
        lwi_is_packed(b->algorithm)) {
        /* buckets must be contiguous backprop ranges so reduce-scatter can overlap backward */
        for (int32_t k = 1; k < b->n_params; k++) {
            const lwi_param *prev = &l->params[lwi_backprop(b, k - 1)];
            const lwi_param *p = &l->params[lwi_backprop(b, k)];
            if (p->bucket < prev->bucket)
                FAIL("buffer #%d: bucket of '%s' (#%d) comes before that of '%s' (#%d), which "
                     "is earlier in backprop order",
                     bi + 1, p->name, p->bucket + 1, prev->name, prev->bucket + 1);
        }
    }
    return LW_OK;
}

lw_status lw_layout_check(const lw_layout *l) {
    if (l == NULL) return lwi_fail(LW_ERR_INVALID, "layout check: layout is NULL");
    size_t n = (size_t)(l->n_params ? l->n_params : 1);
    int32_t *seen = calloc(n, sizeof(int32_t));
    span *spans = malloc(sizeof(span) * n);
    lw_status st = LW_OK;
    if (seen == NULL || spans == NULL) st = lwi_fail(LW_ERR_NOMEM, "layout check: out of memory");
    for (int32_t bi = 0; st == LW_OK && bi < l->n_buffers; bi++)
        st = check_buffer(l, bi, seen, spans);
    for (int32_t i = 0; st == LW_OK && i < l->n_params; i++)
        if (seen[i] != 1)
            st = lwi_fail(LW_ERR_INVALID, "layout check: '%s' is placed %d times, not once",
                          l->params[i].name, seen[i]);
    free(seen);
    free(spans);
    return st;
}
