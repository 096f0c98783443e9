/* comm_cases_a2a.h: the all-to-all-v's cases, written once and run on one memory kind (see
 * comm_cases.h), and their data: the count patterns, values distinct per (from, to, index) in
 * every dtype it takes, and one exchange's arrays on the host and in the kind's memory. */
#ifndef LW_TEST_COMM_CASES_A2A_H
#define LW_TEST_COMM_CASES_A2A_H

#include "comm_kind.h"

#include <stdlib.h>

#define A2A_PATTERNS 6
#define A2A_GUARD    65535 /* past the ends of the buffers, and nowhere else */

/* Elements rank `from` sends rank `to` in pattern k: unequal, its own part too; none to some
 * peers (and to itself on some ranks); every rank to the last rank only; only rank 0, to every
 * other rank; nothing at all; large (the long-message algorithms). */
static inline int64_t a2a_count(int k, int from, int to, int size) {
    switch (k) {
    case 0:
        return 1 + 3 * from + 2 * to;
    case 1:
        return (from + to) % 2 == 0 ? 0 : 5 + from + to;
    case 2:
        return to == size - 1 ? 100 + from : 0;
    case 3:
        return from == 0 && to != 0 ? 7 * to : 0;
    case 4:
        return 0;
    default:
        return 40000 + 333 * from + 77 * to;
    }
}

/* Element i of what rank `from` sends rank `to`, distinct per (from, to, i) in every dtype: i64
 * holds all three; f32 (exact small integers) and the two-byte bits wrap i. */
static inline int64_t a2a_value(lw_dtype d, int from, int to, int64_t i) {
    if (d == LW_DTYPE_I64) return ((int64_t)from << 40) + ((int64_t)to << 32) + i;
    if (d == LW_DTYPE_F32) return from * 4096 + to * 256 + i % 200;
    return from * 4096 + to * 512 + i % 500;
}

static inline void a2a_put(lw_dtype d, void *b, int64_t at, int64_t v) {
    if (d == LW_DTYPE_I64)
        ((int64_t *)b)[at] = v;
    else if (d == LW_DTYPE_F32)
        ((float *)b)[at] = (float)v;
    else
        ((uint16_t *)b)[at] = (uint16_t)v;
}

static inline int64_t a2a_get(lw_dtype d, const void *b, int64_t at) {
    if (d == LW_DTYPE_I64) return ((const int64_t *)b)[at];
    if (d == LW_DTYPE_F32) return (int64_t)((const float *)b)[at];
    return ((const uint16_t *)b)[at];
}

static inline int64_t a2a_size(lw_dtype d) {
    return d == LW_DTYPE_I64 ? 8 : d == LW_DTYPE_F32 ? 4 : 2;
}

/* One exchange of pattern k in dtype d: this rank's counts, its send and receive arrays on the
 * host (the receive one all guard), each one guard element longer, and their copies in the
 * kind's memory (send, recv: what the collective takes). */
typedef struct a2a {
    lw_dtype d;
    int64_t *send_counts, *recv_counts, sent, received;
    void *h_send, *h_recv; /* host */
    void *send, *recv;     /* the kind's */
    bool null_if_empty;    /* an empty side passed as NULL (allowed with a total of 0) */
} a2a;

/* The copies go to the kind's memory on stream s (NULL: the default; complete on return). */
static inline a2a a2a_make(const mem_kind *m, lw_comm *c, int k, lw_dtype d, lw_stream *s) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    a2a x = {.d = d, .null_if_empty = true};
    x.send_counts = malloc(sizeof(int64_t) * (size_t)size);
    x.recv_counts = malloc(sizeof(int64_t) * (size_t)size);
    for (int j = 0; j < size; j++) {
        x.send_counts[j] = a2a_count(k, rank, j, size);
        x.recv_counts[j] = a2a_count(k, j, rank, size);
        x.sent += x.send_counts[j];
        x.received += x.recv_counts[j];
    }
    const int64_t sb = a2a_size(d) * (x.sent + 1), rb = a2a_size(d) * (x.received + 1);
    x.h_send = malloc((size_t)sb);
    x.h_recv = malloc((size_t)rb);
    int64_t at = 0;
    for (int j = 0; j < size; j++)
        for (int64_t i = 0; i < x.send_counts[j]; i++)
            a2a_put(d, x.h_send, at++, a2a_value(d, rank, j, i));
    a2a_put(d, x.h_send, x.sent, A2A_GUARD);
    for (int64_t i = 0; i <= x.received; i++)
        a2a_put(d, x.h_recv, i, A2A_GUARD);
    x.send = mem_alloc(m, sb);
    x.recv = mem_alloc(m, rb);
    mem_put_on(m, s, x.send, x.h_send, sb);
    mem_put_on(m, s, x.recv, x.h_recv, rb);
    return x;
}

/* Starts x's exchange on req (NULL: blocking), its counts on the heap, spoiled and freed right
 * after the call. */
static inline lw_status a2a_start(lw_comm *c, a2a *x, lw_request *req) {
    const int size = lw_comm_size(c);
    int64_t *sc = counts_copy(x->send_counts, size), *rc = counts_copy(x->recv_counts, size);
    const bool none = x->null_if_empty;
    lw_status st = lw_comm_alltoallv(c, x->sent > 0 || !none ? x->send : NULL, sc,
                                     x->received > 0 || !none ? x->recv : NULL, rc, x->d, req);
    spoil_and_free(sc, size);
    spoil_and_free(rc, size);
    return st;
}

/* Mismatches after the exchange completed (the kind's arrays back on the host): every part
 * received where it belongs, the guard past the receive buffer untouched, the send buffer as it
 * was. */
static inline int a2a_wrong(const mem_kind *m, lw_comm *c, a2a *x) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    const lw_dtype d = x->d;
    mem_get(m, x->h_recv, x->recv, a2a_size(d) * (x->received + 1));
    mem_get(m, x->h_send, x->send, a2a_size(d) * (x->sent + 1));
    int bad = 0;
    int64_t at = 0;
    for (int j = 0; j < size; j++)
        for (int64_t i = 0; i < x->recv_counts[j]; i++)
            bad += a2a_get(d, x->h_recv, at++) != a2a_value(d, j, rank, i);
    bad += a2a_get(d, x->h_recv, x->received) != A2A_GUARD;
    at = 0;
    for (int j = 0; j < size; j++)
        for (int64_t i = 0; i < x->send_counts[j]; i++)
            bad += a2a_get(d, x->h_send, at++) != a2a_value(d, rank, j, i);
    bad += a2a_get(d, x->h_send, x->sent) != A2A_GUARD;
    return bad;
}

static inline void a2a_free(const mem_kind *m, a2a *x) {
    mem_free(m, x->send), mem_free(m, x->recv);
    free(x->send_counts), free(x->recv_counts), free(x->h_send), free(x->h_recv);
}

/* ---- the cases ---- */

/* Every pattern in f32, i64, bf16 and f16, blocking and on a request (polled, or waited for),
 * an empty side passed as NULL or as a buffer. */
static void case_alltoallv(const mem_kind *m, lw_comm *c) {
    const lw_dtype dtypes[4] = {LW_DTYPE_F32, LW_DTYPE_I64, LW_DTYPE_BF16, LW_DTYPE_F16};
    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    for (int k = 0; k < A2A_PATTERNS; k++) {
        for (int t = 0; t < 4; t++) {
            for (int nonblocking = 0; nonblocking < 2; nonblocking++) {
                a2a x = a2a_make(m, c, k, dtypes[t], NULL);
                x.null_if_empty = (k + t) % 2 == 0; /* else buffers there, with nothing in them */
                CHECK_OK(a2a_start(c, &x, nonblocking ? req : NULL));
                bool done = !nonblocking;
                while (!done && t % 2 == 0)
                    CHECK_OK(lw_request_test(req, &done));
                CHECK_OK(lw_request_wait(req));
                CHECK(!lw_request_active(req));
                const int bad = a2a_wrong(m, c, &x);
                if (bad)
                    fprintf(stderr, "all-to-all-v pattern %d dtype %d%s: %d wrong\n", k,
                            (int)dtypes[t], nonblocking ? " (nonblocking)" : "", bad);
                CHECK_EQ(bad, 0);
                a2a_free(m, &x);
            }
        }
    }
    lw_request_free(req);
}

/* The pattern lw.h documents: a rank that knows only what it sends learns what it receives with
 * an all-to-all of one i64 count per peer (counts in the kind's memory), then exchanges the
 * payload with both. */
static void case_alltoallv_counts_first(const mem_kind *m, lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    int64_t *ones = malloc(sizeof(int64_t) * (size_t)size);
    int64_t *learned = malloc(sizeof(int64_t) * (size_t)size);
    const int patterns[2] = {0, 5};
    const lw_dtype dtypes[2] = {LW_DTYPE_F32, LW_DTYPE_BF16};
    for (int p = 0; p < 2; p++) {
        for (int j = 0; j < size; j++)
            ones[j] = 1, learned[j] = -1;
        a2a x = a2a_make(m, c, patterns[p], dtypes[p], NULL);
        int64_t *d_counts = mem_upload(m, x.send_counts, 8 * (int64_t)size);
        int64_t *d_learned = mem_upload(m, learned, 8 * (int64_t)size);
        CHECK_OK(lw_comm_alltoallv(c, d_counts, ones, d_learned, ones, LW_DTYPE_I64, NULL));
        mem_get(m, learned, d_learned, 8 * (int64_t)size);
        int bad = 0;
        for (int j = 0; j < size; j++)
            bad += learned[j] != a2a_count(patterns[p], j, rank, size);
        CHECK_EQ(bad, 0);
        CHECK_OK(lw_comm_alltoallv(c, x.send, x.send_counts, x.recv, learned, x.d, NULL));
        CHECK_EQ(a2a_wrong(m, c, &x), 0);
        mem_free(m, d_counts), mem_free(m, d_learned);
        a2a_free(m, &x);
    }
    free(ones), free(learned);
}

/* All-to-alls on their own requests behind a stream of the caller's that wrote their data, in
 * flight with the other collectives (a reduce-scatter-v and a reduce-scatter on requests, a
 * blocking all-reduce of host memory and a blocking all-to-all), started in one order on every
 * rank, waited for in another. */
static void case_alltoallv_interleaved(const mem_kind *m, lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    lw_stream *s = mem_stream_new(m);
    a2a x = a2a_make(m, c, 5, LW_DTYPE_BF16, s), y = a2a_make(m, c, 1, LW_DTYPE_I64, s);
    a2a z = a2a_make(m, c, 2, LW_DTYPE_F32, NULL);
    int64_t *counts = malloc(sizeof(int64_t) * (size_t)size);
    const int64_t total = segment_counts(0, size, counts), n = 64 * (int64_t)size;
    float *hb = values_in(rank, total, 0, total, 0.0f), *he = values_in(rank, n, 0, 0, 1.0f);
    float *b = mem_upload(m, hb, 4 * total), *e = mem_upload(m, he, 4 * n);
    lw_request *rx, *ry, *rb, *re;
    CHECK_OK(lw_request_new(&rx));
    CHECK_OK(lw_request_new(&ry));
    CHECK_OK(lw_request_new(&rb));
    CHECK_OK(lw_request_new(&re));
    CHECK_OK(lw_request_set_stream(rx, s));
    CHECK_OK(lw_request_set_stream(ry, s));
    CHECK_OK(lw_request_set_label(rx, "the expert dispatch"));
    CHECK_OK(a2a_start(c, &x, rx));
    CHECK_OK(lw_comm_reduce_scatterv(c, b, counts, LW_DTYPE_F32, rb));
    CHECK_OK(lw_comm_reduce_scatter(c, e, n, LW_DTYPE_F32, re));
    CHECK_OK(a2a_start(c, &y, ry));
    if (stays_active(m, c)) {
        CHECK(lw_request_active(rx));
        CHECK_FAILS(a2a_start(c, &y, ry), LW_ERR_STATE, "still active");
    }
    int64_t one = 1;
    CHECK_OK(lw_comm_allreduce(c, &one, 1, LW_DTYPE_I64, LW_REDUCE_SUM));
    CHECK_EQ(one, size);
    CHECK_OK(a2a_start(c, &z, NULL));
    CHECK_EQ(a2a_wrong(m, c, &z), 0);
    bool done = false;
    CHECK_OK(lw_request_test(ry, &done));
    CHECK_OK(lw_request_wait(rb));
    CHECK_OK(lw_request_wait(ry));
    CHECK_OK(lw_request_wait(re));
    CHECK_OK(lw_request_wait(rx));
    CHECK_EQ(a2a_wrong(m, c, &x), 0);
    CHECK_EQ(a2a_wrong(m, c, &y), 0);
    mem_get(m, hb, b, 4 * total);
    mem_get(m, he, e, 4 * n);
    CHECK_EQ(reduce_scatterv_wrong(hb, counts, rank, size), 0);
    CHECK(he[rank * 64] == (float)size && he[rank * 64 + 63] == (float)size);
    lw_request_free(rx), lw_request_free(ry), lw_request_free(rb), lw_request_free(re);
    lw_stream_free(s);
    a2a_free(m, &x), a2a_free(m, &y), a2a_free(m, &z);
    mem_free(m, b), mem_free(m, e);
    free(counts), free(hb), free(he);
}

/* Bad arguments, refused before anything starts (every rank makes the same bad call here, so
 * none is left waiting), naming the collective and the value; a backend with a limit refuses
 * 2^31 elements one way (a peer's part, so that the own part stays alike; one rank has no peer
 * and NCCL no limit). */
static void case_alltoallv_errors(const mem_kind *m, lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    a2a x = a2a_make(m, c, 0, LW_DTYPE_F32, NULL);
    int64_t *sc = x.send_counts, *rc = x.recv_counts;
    void *s = x.send, *r = x.recv;
    const lw_dtype f32 = LW_DTYPE_F32;
    CHECK_FAILS(lw_comm_alltoallv(c, s, NULL, r, rc, f32, NULL), LW_ERR_INVALID,
                "comm: all-to-all-v without send counts");
    CHECK_FAILS(lw_comm_alltoallv(c, s, sc, r, NULL, f32, NULL), LW_ERR_INVALID,
                "comm: all-to-all-v without receive counts");
    CHECK_FAILS(lw_comm_alltoallv(c, s, sc, r, rc, LW_DTYPE_F64, NULL), LW_ERR_INVALID,
                "comm: all-to-all-v of dtype 3 (f32, bf16, f16 or i64)");
    CHECK_FAILS(lw_comm_alltoallv(c, s, sc, r, rc, (lw_dtype)77, NULL), LW_ERR_INVALID,
                "all-to-all-v of dtype 77");
    char expect[160];
    const int64_t keep_s = sc[size - 1], keep_r = rc[size - 1];
    sc[size - 1] = -2;
    snprintf(expect, sizeof expect, "comm: all-to-all-v send count -2 for rank %d", size - 1);
    CHECK_FAILS(lw_comm_alltoallv(c, s, sc, r, rc, f32, NULL), LW_ERR_INVALID, expect);
    sc[size - 1] = keep_s;
    rc[size - 1] = -3;
    snprintf(expect, sizeof expect, "comm: all-to-all-v receive count -3 for rank %d", size - 1);
    CHECK_FAILS(lw_comm_alltoallv(c, s, sc, r, rc, f32, NULL), LW_ERR_INVALID, expect);
    rc[size - 1] = keep_r;
    const int64_t keep_0 = sc[0];
    sc[0] = INT64_MAX;
    CHECK_FAILS(lw_comm_alltoallv(c, s, sc, r, rc, f32, NULL), LW_ERR_INVALID,
                "all-to-all-v send counts add up past 1152921504606846975 elements at rank 0");
    sc[0] = keep_0;
    /* this rank's part to itself is in both sets of counts: they must agree */
    sc[rank] += 1;
    snprintf(expect, sizeof expect,
             "all-to-all-v on rank %d: send_counts[%d] is %lld but "
             "recv_counts[%d] is %lld",
             rank, rank, (long long)sc[rank], rank, (long long)rc[rank]);
    CHECK_FAILS(lw_comm_alltoallv(c, s, sc, r, rc, f32, NULL), LW_ERR_INVALID, expect);
    sc[rank] -= 1;
    snprintf(expect, sizeof expect, "all-to-all-v sends %lld elements from a NULL buffer",
             (long long)x.sent);
    CHECK_FAILS(lw_comm_alltoallv(c, NULL, sc, r, rc, f32, NULL), LW_ERR_INVALID, expect);
    snprintf(expect, sizeof expect, "all-to-all-v receives %lld elements into a NULL buffer",
             (long long)x.received);
    CHECK_FAILS(lw_comm_alltoallv(c, s, sc, NULL, rc, f32, NULL), LW_ERR_INVALID, expect);
    /* no in-place form: the same buffer, or one starting inside the other */
    float *both = mem_alloc(m, 4 * (x.sent + x.received));
    CHECK_FAILS(lw_comm_alltoallv(c, both, sc, both, rc, f32, NULL), LW_ERR_INVALID,
                "overlaps its receive buffer");
    CHECK_FAILS(lw_comm_alltoallv(c, both + x.received - 1, sc, both, rc, f32, NULL),
                LW_ERR_INVALID, "there is no in-place form");
    CHECK_FAILS(lw_comm_alltoallv(c, both, sc, both + x.sent - 1, rc, f32, NULL), LW_ERR_INVALID,
                "overlaps");
    /* back to back is apart */
    CHECK_OK(lw_comm_alltoallv(c, both, sc, both + x.sent, rc, f32, NULL));
    mem_free(m, both);
    const char *backend = lw_comm_backend(c);
    if (strcmp(backend, "self") != 0 && strcmp(backend, "nccl") != 0 && size > 1) {
        int64_t *zero = calloc((size_t)size, sizeof(int64_t));
        int64_t *big = calloc((size_t)size, sizeof(int64_t));
        big[(rank + 1) % size] = (int64_t)1 << 31;
        snprintf(expect, sizeof expect,
                 "comm: all-to-all-v sends 2147483648 elements, past the "
                 "%s backend's limit of 2147483647 elements per collective each way",
                 backend);
        CHECK_FAILS(lw_comm_alltoallv(c, s, big, NULL, zero, LW_DTYPE_BF16, NULL),
                    LW_ERR_UNSUPPORTED, expect);
        CHECK_FAILS(lw_comm_alltoallv(c, NULL, zero, r, big, LW_DTYPE_I64, NULL),
                    LW_ERR_UNSUPPORTED, "all-to-all-v receives 2147483648 elements, past");
        free(zero), free(big);
    }
    /* the communicator still works, in step on every rank */
    int64_t one = 1;
    CHECK_OK(lw_comm_allreduce(c, &one, 1, LW_DTYPE_I64, LW_REDUCE_SUM));
    CHECK_EQ(one, size);
    a2a_free(m, &x);
}

#endif
