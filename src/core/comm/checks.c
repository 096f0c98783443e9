/* checks.c: what the collectives check of their arguments before anything starts (comm.c's
 * public calls), the same on every rank that calls alike, so that all refuse alike: dtypes,
 * bucket sizes, counts and their totals, buffers there and apart, the backend's limits. */
#include "comm/comm.h"

#include <stdint.h>

/* A dtype's name for a message: "unknown" for a value outside lw_dtype. */
const char *lwi_comm_dtype_word(lw_dtype dtype) {
    const char *name = lw_dtype_name(dtype);
    return name != NULL ? name : "unknown";
}

/* The sums (all-reduce start, reduce-scatter, reduce-scatter-v) take f32 and bf16, what the
 * gradients are kept in; bf16 rounds as docs/c_api.md says of each backend. */
lw_status lwi_comm_check_sum_dtype(lw_dtype dtype, const char *what) {
    if (dtype != LW_DTYPE_F32 && dtype != LW_DTYPE_BF16)
        return lwi_fail(LW_ERR_INVALID, "comm: %s of dtype %d (%s); it sums f32 or bf16", what,
                        (int)dtype, lwi_comm_dtype_word(dtype));
    return LW_OK;
}

lw_status lwi_comm_check_bucket(const lw_comm *c, const void *bucket, int64_t n,
                                const char *what) {
    if (n < 0 || (n > 0 && bucket == NULL))
        return lwi_fail(LW_ERR_INVALID, "comm: %s of %lld elements at %p", what, (long long)n,
                        bucket);
    if (n % c->size != 0)
        return lwi_fail(LW_ERR_INVALID, "comm: %s of %lld elements does not split into %d equal "
                        "shards", what, (long long)n, c->size);
    return LW_OK;
}

/* Counts of a collective, one per rank: each >= 0, their sum [out] *total small enough that its
 * bytes fit int64 whatever the dtype. which: "" for a collective over segments, "send " or
 * "receive " for all-to-all-v's two sets, as the messages name them. */
lw_status lwi_comm_sum_counts(const lw_comm *c, const int64_t *counts, const char *what,
                              const char *which, int64_t *total) {
    if (counts == NULL)
        return lwi_fail(LW_ERR_INVALID, "comm: %s without %scounts (one per rank: %d)", what,
                        which, c->size);
    int64_t sum = 0;
    for (int32_t r = 0; r < c->size; r++) {
        if (counts[r] < 0)
            return lwi_fail(LW_ERR_INVALID, "comm: %s %scount %lld for rank %d (counts must be "
                            ">= 0)", what, which, (long long)counts[r], r);
        if (counts[r] > INT64_MAX / 8 - sum)
            return lwi_fail(LW_ERR_INVALID, "comm: %s %scounts add up past %lld elements at rank "
                            "%d (count %lld)", what, which, (long long)(INT64_MAX / 8), r,
                            (long long)counts[r]);
        sum += counts[r];
    }
    *total = sum;
    return LW_OK;
}

/* A bucket of segments, counts[r] elements for rank r in rank order: the counts, the bucket
 * there when they add up to anything, the backend's limit on one collective. */
lw_status lwi_comm_check_segments(const lw_comm *c, const void *bucket,
                                  const int64_t *counts, const char *what, int64_t *total) {
    lw_status st = lwi_comm_sum_counts(c, counts, what, "", total);
    if (st != LW_OK) return st;
    if (*total > 0 && bucket == NULL)
        return lwi_fail(LW_ERR_INVALID, "comm: %s of %lld elements at %p", what,
                        (long long)*total, bucket);
    if (c->backend->max_count > 0 && *total > c->backend->max_count)
        return lwi_fail(LW_ERR_UNSUPPORTED, "comm: %s of %lld elements exceeds the %s backend's "
                        "limit of %lld elements per collective; use smaller buckets", what,
                        (long long)*total, c->backend->name, (long long)c->backend->max_count);
    return LW_OK;
}

lw_status lwi_comm_check_gather_dtype(lw_dtype dtype, const char *what) {
    if (dtype != LW_DTYPE_F32 && dtype != LW_DTYPE_BF16 && dtype != LW_DTYPE_F16)
        return lwi_fail(LW_ERR_INVALID, "comm: %s of dtype %d (f32, bf16 or f16)", what,
                        (int)dtype);
    return LW_OK;
}

/* What an all-to-all-v can check on its own rank (the peers' counts it cannot see): the dtype,
 * both sets of counts with [out] their totals, the own part alike in both, the buffers there
 * and apart, the backend's limit each way. */
lw_status lwi_comm_check_alltoallv(const lw_comm *c, const void *send,
                                   const int64_t *send_counts, const void *recv,
                                   const int64_t *recv_counts, lw_dtype dtype, int64_t *sent,
                                   int64_t *received) {
    if (dtype != LW_DTYPE_F32 && dtype != LW_DTYPE_BF16 && dtype != LW_DTYPE_F16 &&
        dtype != LW_DTYPE_I64)
        return lwi_fail(LW_ERR_INVALID, "comm: all-to-all-v of dtype %d (f32, bf16, f16 or i64)",
                        (int)dtype);
    lw_status st = lwi_comm_sum_counts(c, send_counts, "all-to-all-v", "send ", sent);
    if (st == LW_OK) st = lwi_comm_sum_counts(c, recv_counts, "all-to-all-v", "receive ", received);
    if (st != LW_OK) return st;
    const int32_t me = c->rank;
    if (send_counts[me] != recv_counts[me])
        return lwi_fail(LW_ERR_INVALID, "comm: all-to-all-v on rank %d: send_counts[%d] is %lld "
                        "but recv_counts[%d] is %lld (this rank's part to itself: the same in "
                        "both)", me, me, (long long)send_counts[me], me,
                        (long long)recv_counts[me]);
    if (*sent > 0 && send == NULL)
        return lwi_fail(LW_ERR_INVALID, "comm: all-to-all-v sends %lld elements from a NULL "
                        "buffer", (long long)*sent);
    if (*received > 0 && recv == NULL)
        return lwi_fail(LW_ERR_INVALID, "comm: all-to-all-v receives %lld elements into a NULL "
                        "buffer", (long long)*received);
    /* as addresses, not pointers: the two are separate objects unless the caller erred */
    const uintptr_t size = lwi_dtype_size(dtype), s = (uintptr_t)send, r = (uintptr_t)recv;
    const uintptr_t s_bytes = (uintptr_t)*sent * size, r_bytes = (uintptr_t)*received * size;
    if (s_bytes > 0 && r_bytes > 0 && s < r + r_bytes && r < s + s_bytes)
        return lwi_fail(LW_ERR_INVALID, "comm: all-to-all-v send buffer %p (%llu bytes) overlaps "
                        "its receive buffer %p (%llu bytes): there is no in-place form", send,
                        (unsigned long long)s_bytes, recv, (unsigned long long)r_bytes);
    const int64_t most = c->backend->max_count;
    if (most > 0 && (*sent > most || *received > most))
        return lwi_fail(LW_ERR_UNSUPPORTED, "comm: all-to-all-v %s %lld elements, past the %s "
                        "backend's limit of %lld elements per collective each way; exchange "
                        "them in smaller pieces", *sent > most ? "sends" : "receives",
                        (long long)(*sent > most ? *sent : *received), c->backend->name,
                        (long long)most);
    return LW_OK;
}
