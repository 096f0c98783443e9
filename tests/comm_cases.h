/* comm_cases.h: every collective's cases, written once and run on one memory kind (comm_kind.h)
 * by comm_cases_run: host memory over the world communicator (test_comm.c) and a device's over
 * a device communicator (test_device_comm.c). Each against a direct computation: blocking and on
 * requests (polled or waited for), behind a stream of the caller's, the variable-count forms
 * over unequal, empty and lopsided segments, several in flight at once, bad arguments refused
 * alike on every rank, the counters, splits and the watchdog's blocking forms; the all-to-all-v's
 * in comm_cases_a2a.h, the sums in bf16 in comm_cases_bf16.h. What only one kind has stays in
 * its program. */
#ifndef LW_TEST_COMM_CASES_H
#define LW_TEST_COMM_CASES_H

#include "comm_cases_a2a.h"
#include "comm_cases_bf16.h"
#include "comm_kind.h"

#include <stdlib.h>

/* ---- the equal-count forms ---- */

/* Reduce-scatter over several bucket sizes (shards of one element to many), blocking and polled:
 * this rank's shard holds the sum, the rest its own data; all-gather of each in f32 on a
 * request, bf16 and f16 blocking (bits moved untouched). Then a second start on an active
 * request, and a bucket that does not split into equal shards, refused. */
static void case_reduce_scatter_allgather(const mem_kind *m, lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    const int64_t shards[] = {1, 3, 64, 1000, 1 << 18};
    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    for (int k = 0; k < 5; k++) {
        const int64_t shard = shards[k], n = shard * size, lo = rank * shard, hi = lo + shard;
        float *h = values_in(rank, n, 0, n, 0.0f);
        for (int nonblocking = 0; nonblocking < 2; nonblocking++) {
            float *d = mem_upload(m, h, 4 * n);
            CHECK_OK(lw_comm_reduce_scatter(c, d, n, LW_DTYPE_F32, nonblocking ? req : NULL));
            if (nonblocking) poll_to_end(req);
            float *back = malloc(4 * (size_t)n);
            mem_get(m, back, d, 4 * n);
            int bad = 0;
            for (int64_t i = 0; i < n; i++) {
                float want = value(rank, i); /* outside its shard a rank keeps its own data */
                if (i >= lo && i < hi) {
                    want = 0.0f;
                    for (int r = 0; r < size; r++)
                        want += value(r, i);
                }
                bad += back[i] != want;
            }
            CHECK_EQ(bad, 0);
            free(back);
            mem_free(m, d);
        }
        /* all-gather: shard r comes from rank r */
        free(h);
        h = values_in(rank, n, lo, hi, -1.0f);
        float *d = mem_upload(m, h, 4 * n);
        CHECK_OK(lw_comm_allgather(c, d, n, LW_DTYPE_F32, req));
        CHECK_OK(lw_request_wait(req));
        mem_get(m, h, d, 4 * n);
        int bad = 0;
        for (int64_t i = 0; i < n; i++)
            bad += h[i] != value((int)(i / shard), i);
        CHECK_EQ(bad, 0);
        const lw_dtype halves[2] = {LW_DTYPE_BF16, LW_DTYPE_F16};
        uint16_t *b = malloc(2 * (size_t)n);
        for (int t = 0; t < 2; t++) {
            for (int64_t i = 0; i < n; i++)
                b[i] = i >= lo && i < hi ? bits(rank, i) : 0xffff;
            mem_put(m, d, b, 2 * n);
            CHECK_OK(lw_comm_allgather(c, d, n, halves[t], NULL));
            mem_get(m, b, d, 2 * n);
            bad = 0;
            for (int64_t i = 0; i < n; i++)
                bad += b[i] != bits((int)(i / shard), i);
            CHECK_EQ(bad, 0);
        }
        free(b);
        mem_free(m, d);
        free(h);
    }
    const int64_t n = 16 * (int64_t)size;
    float *h = values_in(rank, n, 0, n, 0.0f), *x = mem_upload(m, h, 4 * n);
    if (stays_active(m, c)) {
        CHECK_OK(lw_comm_allgather(c, x, n, LW_DTYPE_F32, req));
        CHECK_FAILS(lw_comm_allgather(c, x, n, LW_DTYPE_F32, req), LW_ERR_STATE, "still active");
        CHECK_OK(lw_request_wait(req));
    }
    lw_request_free(req);
    if (size > 1)
        CHECK_FAILS(lw_comm_reduce_scatter(c, x, size * 3 + 1, LW_DTYPE_F32, NULL), LW_ERR_INVALID,
                    "equal shards");
    mem_free(m, x);
    free(h);
}

/* ---- the variable-count forms: segments of unequal size, in rank order, in place ---- */

/* Every segment pattern, blocking and polled, its counts spoiled right after the call, one
 * element past the bucket left as it was; an empty bucket may be NULL. */
static void case_reduce_scatterv(const mem_kind *m, lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    int64_t *counts = malloc(sizeof(int64_t) * (size_t)size);
    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    for (int k = 0; k < SEGMENT_PATTERNS; k++) {
        const int64_t total = segment_counts(k, size, counts);
        float *h = values_in(rank, total + 1, 0, total + 1, 0.0f);
        for (int nonblocking = 0; nonblocking < 2; nonblocking++) {
            float *d = mem_upload(m, h, 4 * (total + 1));
            int64_t *copy = counts_copy(counts, size);
            CHECK_OK(lw_comm_reduce_scatterv(c, d, copy, LW_DTYPE_F32, nonblocking ? req : NULL));
            spoil_and_free(copy, size);
            if (nonblocking)
                poll_to_end(req);
            else
                CHECK(!lw_request_active(req));
            float *back = malloc(4 * (size_t)(total + 1));
            mem_get(m, back, d, 4 * (total + 1));
            CHECK_EQ(reduce_scatterv_wrong(back, counts, rank, size), 0);
            CHECK(back[total] == value(rank, total));
            free(back);
            mem_free(m, d);
        }
        free(h);
    }
    segment_counts(4, size, counts);
    CHECK_OK(lw_comm_reduce_scatterv(c, NULL, counts, LW_DTYPE_F32, NULL));
    lw_request_free(req);
    free(counts);
}

/* Every segment pattern: this rank fills its segment only; f32 blocking and on a request, bf16
 * and f16 (two bytes an element, displacements in elements) on a request; one element past the
 * bucket left as it was; an empty bucket may be NULL. */
static void case_allgather_segments(const mem_kind *m, lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    int64_t *counts = malloc(sizeof(int64_t) * (size_t)size);
    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    for (int k = 0; k < SEGMENT_PATTERNS; k++) {
        const int64_t total = segment_counts(k, size, counts);
        const int64_t lo = displ(counts, rank), hi = lo + counts[rank];
        float *h = values_in(rank, total + 1, lo, hi, -1.0f);
        for (int nonblocking = 0; nonblocking < 2; nonblocking++) {
            float *d = mem_upload(m, h, 4 * (total + 1)), *back = malloc(4 * (size_t)(total + 1));
            int64_t *copy = counts_copy(counts, size);
            CHECK_OK(
                lw_comm_allgather_segments(c, d, copy, LW_DTYPE_F32, nonblocking ? req : NULL));
            spoil_and_free(copy, size);
            CHECK_OK(lw_request_wait(req));
            mem_get(m, back, d, 4 * (total + 1));
            CHECK_EQ(gathered_wrong(back, counts, size), 0);
            CHECK(back[total] == -1.0f);
            free(back);
            mem_free(m, d);
        }
        free(h);
        const lw_dtype halves[2] = {LW_DTYPE_BF16, LW_DTYPE_F16};
        uint16_t *b = malloc(2 * (size_t)(total + 1));
        void *d = mem_alloc(m, 2 * (total + 1));
        for (int t = 0; t < 2; t++) {
            for (int64_t i = 0; i <= total; i++)
                b[i] = i >= lo && i < hi ? bits(rank, i) : 0xffff;
            mem_put(m, d, b, 2 * (total + 1));
            CHECK_OK(lw_comm_allgather_segments(c, d, counts, halves[t], req));
            CHECK_OK(lw_request_wait(req));
            mem_get(m, b, d, 2 * (total + 1));
            int bad = 0;
            for (int64_t i = 0; i < total; i++)
                bad += b[i] != bits(owner(counts, size, i), i);
            CHECK_EQ(bad, 0);
            CHECK(b[total] == 0xffff);
        }
        mem_free(m, d);
        free(b);
    }
    segment_counts(4, size, counts);
    CHECK_OK(lw_comm_allgather_segments(c, NULL, counts, LW_DTYPE_F32, NULL));
    lw_request_free(req);
    free(counts);
}

/* Several collectives in flight on their own requests, behind a stream of the caller's that
 * wrote their data, started in one order on every rank, a blocking all-reduce (host memory) and
 * an equal-count reduce-scatter among them, waited for in another order: each finishes with its
 * own result (the two reduce-scatters' scratch stays apart). */
static void case_segments_interleaved(const mem_kind *m, lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    int64_t *ca = malloc(sizeof(int64_t) * (size_t)size);
    int64_t *cb = malloc(sizeof(int64_t) * (size_t)size);
    const int64_t ta = segment_counts(0, size, ca), tb = segment_counts(5, size, cb);
    const int64_t n = 64 * (int64_t)size, lo = displ(cb, rank), hi = lo + cb[rank];
    float *ha = values_in(rank, ta, 0, ta, 0.0f), *hg = values_in(rank, tb, lo, hi, 0.0f);
    float *he = values_in(rank, n, 0, 0, 1.0f);
    lw_stream *s = mem_stream_new(m);
    float *a = mem_alloc(m, 4 * ta), *g = mem_alloc(m, 4 * tb), *e = mem_upload(m, he, 4 * n);
    mem_put_on(m, s, a, ha, 4 * ta);
    mem_put_on(m, s, g, hg, 4 * tb);
    lw_request *ra, *rg, *re;
    CHECK_OK(lw_request_new(&ra));
    CHECK_OK(lw_request_new(&rg));
    CHECK_OK(lw_request_new(&re));
    CHECK_OK(lw_request_set_stream(ra, s));
    CHECK_OK(lw_request_set_stream(rg, s));
    CHECK_OK(lw_comm_reduce_scatterv(c, a, ca, LW_DTYPE_F32, ra));
    CHECK_OK(lw_comm_allgather_segments(c, g, cb, LW_DTYPE_F32, rg));
    int64_t one = 1;
    CHECK_OK(lw_comm_allreduce(c, &one, 1, LW_DTYPE_I64, LW_REDUCE_SUM));
    CHECK_EQ(one, size);
    CHECK_OK(lw_comm_reduce_scatter(c, e, n, LW_DTYPE_F32, re));
    if (stays_active(m, c)) { /* a second start on a request in flight is refused */
        CHECK(lw_request_active(ra));
        CHECK_FAILS(lw_comm_reduce_scatterv(c, a, ca, LW_DTYPE_F32, ra), LW_ERR_STATE,
                    "still active");
        CHECK_FAILS(lw_comm_allgather_segments(c, g, cb, LW_DTYPE_F32, rg), LW_ERR_STATE,
                    "still active");
    }
    bool done = false;
    CHECK_OK(lw_request_test(rg, &done));
    CHECK_OK(lw_request_wait(re));
    CHECK_OK(lw_request_wait(rg));
    CHECK_OK(lw_request_wait(ra));
    mem_get(m, ha, a, 4 * ta);
    mem_get(m, hg, g, 4 * tb);
    mem_get(m, he, e, 4 * n);
    CHECK_EQ(reduce_scatterv_wrong(ha, ca, rank, size), 0);
    CHECK_EQ(gathered_wrong(hg, cb, size), 0);
    CHECK(he[rank * 64] == (float)size && he[rank * 64 + 63] == (float)size);
    lw_request_free(ra), lw_request_free(rg), lw_request_free(re);
    lw_stream_free(s);
    mem_free(m, a), mem_free(m, g), mem_free(m, e);
    free(ha), free(hg), free(he), free(ca), free(cb);
}

/* Bad counts fail alike on every rank (the counts are the same on all), naming the collective
 * and the value, before anything starts; a backend with a limit (MPI's counts are int; staged's
 * are MPI's) refuses 2^31 elements, one rank of self moves nothing whatever the size, and NCCL
 * has no limit to try. */
static void case_segments_errors(const mem_kind *m, lw_comm *c) {
    const int size = lw_comm_size(c);
    int64_t *counts = calloc((size_t)size, sizeof(int64_t));
    float *b = mem_alloc(m, 4 * 8);
    CHECK_FAILS(lw_comm_reduce_scatterv(c, b, NULL, LW_DTYPE_F32, NULL), LW_ERR_INVALID,
                "comm: reduce-scatter-v without counts");
    CHECK_FAILS(lw_comm_allgather_segments(c, b, NULL, LW_DTYPE_F32, NULL), LW_ERR_INVALID,
                "comm: all-gather-segments without counts");
    char expect[160];
    for (int64_t bad = -1; bad >= -2; bad--) {
        counts[size - 1] = bad;
        snprintf(expect, sizeof expect, "reduce-scatter-v count %lld for rank %d", (long long)bad,
                 size - 1);
        CHECK_FAILS(lw_comm_reduce_scatterv(c, b, counts, LW_DTYPE_F32, NULL), LW_ERR_INVALID,
                    expect);
        snprintf(expect, sizeof expect, "all-gather-segments count %lld for rank %d",
                 (long long)bad, size - 1);
        CHECK_FAILS(lw_comm_allgather_segments(c, b, counts, LW_DTYPE_F32, NULL), LW_ERR_INVALID,
                    expect);
    }
    counts[size - 1] = 3;
    CHECK_FAILS(lw_comm_reduce_scatterv(c, NULL, counts, LW_DTYPE_F32, NULL), LW_ERR_INVALID,
                "reduce-scatter-v of 3 elements at");
    CHECK_FAILS(lw_comm_allgather_segments(c, b, counts, LW_DTYPE_F64, NULL), LW_ERR_INVALID,
                "all-gather-segments of dtype 3 (f32, bf16 or f16)");
    CHECK_FAILS(lw_comm_allgather_segments(c, b, counts, LW_DTYPE_I64, NULL), LW_ERR_INVALID,
                "all-gather-segments of dtype 4");
    counts[0] = INT64_MAX; /* past any bucket: bytes would overflow */
    CHECK_FAILS(lw_comm_allgather_segments(c, b, counts, LW_DTYPE_F32, NULL), LW_ERR_INVALID,
                "all-gather-segments counts add up past");
    for (int r = 0; r < size; r++)
        counts[r] = 0;
    counts[0] = (int64_t)1 << 31;
    const char *backend = lw_comm_backend(c);
    if (strcmp(backend, "self") == 0) {
        CHECK_OK(lw_comm_reduce_scatterv(c, b, counts, LW_DTYPE_F32, NULL));
        CHECK_OK(lw_comm_allgather_segments(c, b, counts, LW_DTYPE_BF16, NULL));
    } else if (strcmp(backend, "nccl") != 0) {
        snprintf(expect, sizeof expect,
                 "reduce-scatter-v of 2147483648 elements exceeds the %s "
                 "backend's limit of 2147483647 elements per collective",
                 backend);
        CHECK_FAILS(lw_comm_reduce_scatterv(c, b, counts, LW_DTYPE_F32, NULL),
                    LW_ERR_UNSUPPORTED, expect);
        CHECK_FAILS(lw_comm_allgather_segments(c, b, counts, LW_DTYPE_BF16, NULL),
                    LW_ERR_UNSUPPORTED, "all-gather-segments of 2147483648 elements exceeds");
    }
    /* the communicator still works, in step on every rank */
    int64_t one = 1;
    CHECK_OK(lw_comm_allreduce(c, &one, 1, LW_DTYPE_I64, LW_REDUCE_SUM));
    CHECK_EQ(one, size);
    mem_free(m, b);
    free(counts);
}

/* ---- all-reduce, all-gather-v, broadcast, barrier, split ---- */

/* Sums, maxima and minima in f32, f64 (a sum near the smallest normal) and i64 (past 2^32), the
 * nonblocking sum on a request with the kind's stream; f16 refused (bf16's sums:
 * comm_cases_bf16.h). */
static void case_allreduce(const mem_kind *m, lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    void *d = mem_alloc(m, 4 * 5);
    float f[3] = {(float)rank, 1.0f, (float)(rank * rank)};
    mem_put(m, d, f, sizeof f);
    CHECK_OK(lw_comm_allreduce(c, d, 3, LW_DTYPE_F32, LW_REDUCE_SUM));
    mem_get(m, f, d, sizeof f);
    CHECK(f[0] == size * (size - 1) / 2.0f && f[1] == (float)size);
    float fm[2] = {(float)rank, -(float)rank};
    mem_put(m, d, fm, sizeof fm);
    CHECK_OK(lw_comm_allreduce(c, d, 2, LW_DTYPE_F32, LW_REDUCE_MAX));
    mem_get(m, fm, d, sizeof fm);
    CHECK(fm[0] == (float)(size - 1) && fm[1] == 0.0f);
    double dm[2] = {(double)rank, -(double)rank};
    mem_put(m, d, dm, sizeof dm);
    CHECK_OK(lw_comm_allreduce(c, d, 2, LW_DTYPE_F64, LW_REDUCE_MAX));
    mem_get(m, dm, d, sizeof dm);
    CHECK(dm[0] == size - 1 && dm[1] == 0.0);
    double ds[2] = {0.25 * rank, 1e-300};
    mem_put(m, d, ds, sizeof ds);
    CHECK_OK(lw_comm_allreduce(c, d, 2, LW_DTYPE_F64, LW_REDUCE_SUM));
    mem_get(m, ds, d, sizeof ds);
    CHECK(ds[0] == 0.25 * size * (size - 1) / 2.0 && ds[1] == 1e-300 * size);
    int64_t i[2] = {rank + 10, ((int64_t)1 << 40) + rank};
    mem_put(m, d, i, sizeof i);
    CHECK_OK(lw_comm_allreduce(c, d, 2, LW_DTYPE_I64, LW_REDUCE_MIN));
    mem_get(m, i, d, sizeof i);
    CHECK_EQ(i[0], 10);
    CHECK_EQ(i[1], (int64_t)1 << 40);
    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    CHECK_OK(lw_request_set_stream(req, lw_device_stream(m->dev)));
    float g[5];
    for (int k = 0; k < 5; k++)
        g[k] = (float)(rank + k);
    mem_put(m, d, g, sizeof g);
    CHECK_OK(lw_comm_allreduce_start(c, d, 5, LW_DTYPE_F32, req));
    CHECK_OK(lw_request_wait(req));
    mem_get(m, g, d, sizeof g);
    for (int k = 0; k < 5; k++)
        CHECK(g[k] == size * (size - 1) / 2.0f + (float)(size * k));
    lw_request_free(req);
    CHECK_FAILS(lw_comm_allreduce(c, d, 3, LW_DTYPE_F16, LW_REDUCE_SUM), LW_ERR_INVALID,
                "all-reduce of dtype 2");
    mem_free(m, d);
}

/* All-gather-v into a separate buffer (legacy mode's), uneven, some ranks sending nothing; a
 * send count other than the rank's count refused. */
static void case_allgatherv(const mem_kind *m, lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    int64_t *counts = malloc(sizeof(int64_t) * (size_t)size);
    const int64_t total = gatherv_counts(size, 1, counts);
    float *h = values_in(rank, counts[rank], 0, counts[rank], 0.0f);
    float *send = mem_upload(m, h, 4 * counts[rank]), *recv = mem_alloc(m, 4 * (total + 1));
    CHECK_OK(lw_comm_allgatherv(c, send, counts[rank], recv, counts, LW_DTYPE_F32));
    float *back = malloc(4 * (size_t)(total + 1));
    mem_get(m, back, recv, 4 * total);
    CHECK_EQ(gatherv_wrong(back, counts, size), 0);
    CHECK_FAILS(lw_comm_allgatherv(c, send, counts[rank] + 1, recv, counts, LW_DTYPE_F32),
                LW_ERR_INVALID,
                "all-gather-v sends");
    mem_free(m, send), mem_free(m, recv);
    free(counts), free(h), free(back);
}

/* A broadcast from the last rank (a root outside the ranks refused), a barrier; a split is its
 * parent's backend on the same memory, whose collectives work on its own ranks. */
static void case_broadcast_barrier_split(const mem_kind *m, lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    char text[32] = "stale", expect[32];
    snprintf(expect, sizeof expect, "from %d", size - 1);
    if (rank == size - 1) snprintf(text, sizeof text, "%s", expect);
    char *dt = mem_upload(m, text, sizeof text);
    CHECK_OK(lw_comm_broadcast(c, dt, sizeof text, size - 1));
    mem_get(m, text, dt, sizeof text);
    CHECK(strcmp(text, expect) == 0);
    CHECK_FAILS(lw_comm_broadcast(c, dt, 4, size), LW_ERR_INVALID, "root");
    mem_free(m, dt);
    CHECK_OK(lw_comm_barrier(c));

    lw_comm *half = NULL;
    CHECK_OK(lw_comm_split(c, rank % 2, rank, &half));
    if (half == NULL) return;
    CHECK(strcmp(lw_comm_backend(half), lw_comm_backend(c)) == 0);
    CHECK(lw_comm_reaches(half, m->dev));
    CHECK_EQ(lw_comm_size(half), rank % 2 == 0 ? (size + 1) / 2 : size / 2);
    CHECK_EQ(lw_comm_rank(half), rank / 2);
    float one = 1.0f;
    float *d1 = mem_upload(m, &one, sizeof one);
    CHECK_OK(lw_comm_allreduce(half, d1, 1, LW_DTYPE_F32, LW_REDUCE_SUM));
    mem_get(m, &one, d1, sizeof one);
    CHECK(one == (float)lw_comm_size(half));
    int64_t n = 1;
    CHECK_OK(lw_comm_allreduce(half, &n, 1, LW_DTYPE_I64, LW_REDUCE_SUM));
    CHECK_EQ(n, lw_comm_size(half));
    CHECK_OK(lw_comm_barrier(half));
    lw_comm_free(half);
    mem_free(m, d1);
}

/* Freeing a communicator completes its collectives in flight, so a request that outlives it
 * (freed later, as Lua's garbage collector may order it) touches no freed memory. */
static void case_free_with_request_in_flight(const mem_kind *m, lw_comm *c) {
    lw_comm *part = NULL;
    CHECK_OK(lw_comm_split(c, 0, lw_comm_rank(c), &part));
    if (part == NULL) return;
    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    const int64_t n = 4096 * (int64_t)lw_comm_size(part);
    float *h = values_in(lw_comm_rank(c), n, 0, n, 0.0f), *b = mem_upload(m, h, 4 * n);
    CHECK_OK(lw_comm_allgather(part, b, n, LW_DTYPE_F32, req));
    if (stays_active(m, part)) CHECK(lw_request_active(req));
    lw_comm_free(part);
    CHECK(!lw_request_active(req));
    lw_request_free(req);
    mem_free(m, b);
    free(h);
}

/* Collectives on the communicator's stream (none set: the CPU's) and on a request's; a
 * request's stream cannot change under a collective in flight. */
static void case_streams(const mem_kind *m, lw_comm *c) {
    const int32_t size = lw_comm_size(c), rank = lw_comm_rank(c);
    CHECK(lw_comm_reaches(c, m->dev));
    CHECK(lw_comm_stream(c) == lw_device_stream(lw_device_cpu()));
    lw_stream *s = mem_stream_new(m);
    CHECK_OK(lw_comm_set_stream(c, s));
    CHECK(lw_comm_stream(c) == s);
    lw_request *req = NULL;
    CHECK_OK(lw_request_new(&req));
    CHECK_OK(lw_request_set_stream(req, lw_device_stream(m->dev)));
    const int64_t n = 4 * (int64_t)size;
    float *h = values_in(rank, n, 0, 0, (float)(rank + 1)), *b = mem_upload(m, h, 4 * n);
    CHECK_OK(lw_comm_reduce_scatter(c, b, n, LW_DTYPE_F32, req));
    if (stays_active(m, c))
        CHECK_FAILS(lw_request_set_stream(req, s), LW_ERR_STATE, "still active");
    CHECK_OK(lw_request_wait(req));
    mem_get(m, h, b, 4 * n);
    const float sum = (float)(size * (size + 1) / 2);
    CHECK(h[rank * 4] == sum && h[rank * 4 + 3] == sum);
    CHECK_OK(lw_comm_allgather(c, b, n, LW_DTYPE_F32, NULL)); /* on the comm's stream */
    mem_get(m, h, b, 4 * n);
    CHECK(h[0] == sum && h[n - 1] == sum);
    CHECK_OK(lw_comm_set_stream(c, NULL));
    lw_request_free(req);
    lw_stream_free(s);
    mem_free(m, b);
    free(h);
}

/* The blocking forms without the watchdog (waited for in the backend) and with it (a request
 * polled against the deadline). */
static void case_blocking_forms(const mem_kind *m, lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    const double timeout = lw_comm_timeout(c);
    for (int watchdog = 0; watchdog < 2; watchdog++) {
        CHECK_OK(lw_comm_set_timeout(c, watchdog ? 60.0 : 0.0));
        float f[4] = {1, 2, 3, (float)rank};
        float *d = mem_upload(m, f, sizeof f);
        CHECK_OK(lw_comm_allreduce(c, d, 4, LW_DTYPE_F32, LW_REDUCE_SUM));
        CHECK_OK(lw_comm_broadcast(c, d, 8, 0));
        CHECK_OK(lw_comm_barrier(c));
        mem_get(m, f, d, sizeof f);
        CHECK(f[0] == (float)size && f[2] == 3.0f * size);
        CHECK(f[3] == size * (size - 1) / 2.0f);
        mem_free(m, d);
    }
    CHECK_OK(lw_comm_set_timeout(c, timeout));
}

/* ---- counters ---- */

/* Calls and bytes by kind: a ring's volume, (p - 1) / p of the bucket; the variable-count forms
 * as their kind by the bucket's total alone; the all-to-all by what this rank sends its peers;
 * nothing else counted; an unknown counter refused. */
static void case_counters(const mem_kind *m, lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    lw_comm_counters_reset(c);
    float *h = values_in(rank, size * 256, 0, 0, 0.0f), *b = mem_upload(m, h, 4 * size * 256);
    CHECK_OK(lw_comm_reduce_scatter(c, b, size * 256, LW_DTYPE_F32, NULL));
    CHECK_OK(lw_comm_allgather(c, b, size * 256, LW_DTYPE_F32, NULL));
    lw_comm_counter rs, ag;
    CHECK_OK(lw_comm_counter_get(c, LW_COMM_REDUCE_SCATTER, &rs));
    CHECK_OK(lw_comm_counter_get(c, LW_COMM_ALLGATHER, &ag));
    CHECK_EQ(rs.calls, 1);
    CHECK_EQ(ag.calls, 1);
    CHECK_EQ(rs.bytes, (int64_t)(size - 1) * 256 * 4);
    CHECK_EQ(ag.bytes, rs.bytes);
    CHECK(rs.seconds >= 0 && ag.seconds >= 0);
    /* unequal segments of the same total send what equal shards do */
    int64_t *counts = calloc((size_t)size, sizeof(int64_t));
    counts[size - 1] = size * 256;
    lw_comm_counters_reset(c);
    CHECK_OK(lw_comm_reduce_scatterv(c, b, counts, LW_DTYPE_F32, NULL));
    CHECK_OK(lw_comm_allgather_segments(c, b, counts, LW_DTYPE_F32, NULL));
    CHECK_OK(lw_comm_allgather_segments(c, b, counts, LW_DTYPE_BF16, NULL));
    lw_comm_counter rsv, agv;
    CHECK_OK(lw_comm_counter_get(c, LW_COMM_REDUCE_SCATTER, &rsv));
    CHECK_OK(lw_comm_counter_get(c, LW_COMM_ALLGATHER, &agv));
    CHECK_EQ(rsv.calls, 1);
    CHECK_EQ(agv.calls, 2);
    CHECK_EQ(rsv.bytes, rs.bytes);
    CHECK_EQ(agv.bytes, ag.bytes + ag.bytes / 2); /* bf16: half the bytes */
    /* the all-to-all: what this rank sends its peers, not its own part */
    a2a x = a2a_make(m, c, 0, LW_DTYPE_F32, NULL), y = a2a_make(m, c, 3, LW_DTYPE_BF16, NULL);
    lw_comm_counters_reset(c);
    CHECK_OK(a2a_start(c, &x, NULL));
    CHECK_OK(a2a_start(c, &y, NULL));
    lw_comm_counter a2a_n, none;
    CHECK_OK(lw_comm_counter_get(c, LW_COMM_ALLTOALL, &a2a_n));
    CHECK_EQ(a2a_n.calls, 2);
    CHECK_EQ(a2a_n.bytes, (x.sent - x.send_counts[rank]) * 4 + (y.sent - y.send_counts[rank]) * 2);
    CHECK(a2a_n.seconds >= 0);
    CHECK_EQ(a2a_wrong(m, c, &x), 0);
    CHECK_EQ(a2a_wrong(m, c, &y), 0);
    for (int op = LW_COMM_ALLREDUCE; op < LW_COMM_ALLTOALL; op++) {
        CHECK_OK(lw_comm_counter_get(c, (lw_comm_op)op, &none));
        CHECK_EQ(none.calls, 0);
    }
    CHECK_FAILS(lw_comm_counter_get(c, (lw_comm_op)(LW_COMM_ALLTOALL + 1), &none), LW_ERR_INVALID,
                "unknown counter 7");
    a2a_free(m, &x), a2a_free(m, &y);
    mem_free(m, b);
    free(counts), free(h);
}

/* Every case above on memory of kind m over c, in the same order on every rank. */
static void comm_cases_run(const mem_kind *m, lw_comm *c) {
    case_reduce_scatter_allgather(m, c);
    case_reduce_scatterv(m, c);
    case_allgather_segments(m, c);
    case_segments_interleaved(m, c);
    case_segments_errors(m, c);
    case_alltoallv(m, c);
    case_alltoallv_counts_first(m, c);
    case_alltoallv_interleaved(m, c);
    case_alltoallv_errors(m, c);
    case_allreduce(m, c);
    case_allgatherv(m, c);
    case_broadcast_barrier_split(m, c);
    case_free_with_request_in_flight(m, c);
    case_streams(m, c);
    case_blocking_forms(m, c);
    case_counters(m, c);
    comm_cases_bf16_run(m, c);
}

#endif
