/* test_comm.c: every collective against a direct computation, the variable-count forms over
 * unequal, empty and lopsided segments too, and the all-to-all-v over such counts in every
 * dtype it takes, at whatever rank count it is started with (ctest
 * runs it alone and under mpirun -np 2, 3 and 4). Each rank's data is a known function of
 * (rank, index), so every rank can compute the expected result itself. */
#include "check.h"
#include "comm_cases.h"

#include <math.h>
#include <stdlib.h>

static void test_reduce_scatter_and_allgather(lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    /* several bucket sizes, including shards of one element and many */
    const int64_t shards[] = {1, 3, 64, 1000};
    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    for (int k = 0; k < 4; k++) {
        int64_t shard = shards[k], n = shard * size;
        float *b = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) b[i] = value(rank, i);
        for (int nonblocking = 0; nonblocking < 2; nonblocking++) {
            for (int64_t i = 0; i < n; i++) b[i] = value(rank, i);
            if (nonblocking) {
                CHECK_OK(lw_comm_reduce_scatter(c, b, n, req));
                bool done = false;
                while (!done) CHECK_OK(lw_request_test(req, &done));
                CHECK(!lw_request_active(req));
            } else {
                CHECK_OK(lw_comm_reduce_scatter(c, b, n, NULL));
            }
            int bad = 0;
            for (int64_t i = rank * shard; i < (rank + 1) * shard; i++) {
                float sum = 0;
                for (int r = 0; r < size; r++) sum += value(r, i);
                bad += b[i] != sum;
            }
            /* outside its shard a rank keeps its own data */
            for (int64_t i = 0; i < n; i++)
                if (i < rank * shard || i >= (rank + 1) * shard) bad += b[i] != value(rank, i);
            CHECK_EQ(bad, 0);
        }
        /* all-gather: shard r comes from rank r */
        for (int64_t i = 0; i < n; i++) b[i] = (i / shard == rank) ? value(rank, i) : -1.0f;
        CHECK_OK(lw_comm_allgather(c, b, n, LW_DTYPE_F32, req));
        CHECK_OK(lw_request_wait(req));
        int bad = 0;
        for (int64_t i = 0; i < n; i++) bad += b[i] != value((int)(i / shard), i);
        CHECK_EQ(bad, 0);
        free(b);
    }
    /* a second start on an active request is refused */
    float x[64];
    for (int i = 0; i < 64; i++) x[i] = 1.0f;
    if (64 % size == 0 && size > 1) { /* one rank: nothing is ever in flight */
        CHECK_OK(lw_comm_allgather(c, x, 64, LW_DTYPE_F32, req));
        CHECK_FAILS(lw_comm_allgather(c, x, 64, LW_DTYPE_F32, req), LW_ERR_STATE,
                    "still active");
        CHECK_OK(lw_request_wait(req));
    }
    lw_request_free(req);
    if (size > 1)
        CHECK_FAILS(lw_comm_reduce_scatter(c, x, size * 3 + 1, NULL), LW_ERR_INVALID,
                    "equal shards");
}

/* ---- the variable-count forms (segments of unequal size, in rank order) ---- */


static void test_reduce_scatterv(lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    int64_t *counts = malloc(sizeof(int64_t) * (size_t)size);
    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    for (int k = 0; k < SEGMENT_PATTERNS; k++) {
        const int64_t total = segment_counts(k, size, counts);
        /* one more element past the bucket, which must stay as it was */
        float *b = malloc(sizeof(float) * (size_t)(total + 1));
        for (int nonblocking = 0; nonblocking < 2; nonblocking++) {
            for (int64_t i = 0; i <= total; i++) b[i] = value(rank, i);
            int64_t *copy = counts_copy(counts, size);
            if (nonblocking) {
                CHECK_OK(lw_comm_reduce_scatterv(c, b, copy, req));
                spoil_and_free(copy, size);
                bool done = false;
                while (!done) CHECK_OK(lw_request_test(req, &done));
                CHECK(!lw_request_active(req));
            } else {
                CHECK_OK(lw_comm_reduce_scatterv(c, b, copy, NULL));
                spoil_and_free(copy, size);
            }
            CHECK_EQ(reduce_scatterv_wrong(b, counts, rank, size), 0);
            CHECK(b[total] == value(rank, total));
        }
        free(b);
    }
    /* an empty bucket may be NULL */
    segment_counts(4, size, counts);
    CHECK_OK(lw_comm_reduce_scatterv(c, NULL, counts, NULL));
    lw_request_free(req);
    free(counts);
}

/* bf16 / f16 bits of element i of rank r's segment: moved, never read as numbers. */
static uint16_t bits(int r, int64_t i) { return (uint16_t)(r * 4096 + i % 4000); }

static void test_allgather_segments(lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    int64_t *counts = malloc(sizeof(int64_t) * (size_t)size);
    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    for (int k = 0; k < SEGMENT_PATTERNS; k++) {
        const int64_t total = segment_counts(k, size, counts);
        const int64_t lo = displ(counts, rank), hi = lo + counts[rank];
        /* f32, nonblocking and blocking: this rank fills its segment only */
        float *b = malloc(sizeof(float) * (size_t)(total + 1));
        for (int nonblocking = 0; nonblocking < 2; nonblocking++) {
            for (int64_t i = 0; i <= total; i++)
                b[i] = i >= lo && i < hi ? value(rank, i) : -1.0f;
            int64_t *copy = counts_copy(counts, size);
            CHECK_OK(lw_comm_allgather_segments(c, b, copy, LW_DTYPE_F32,
                                                nonblocking ? req : NULL));
            spoil_and_free(copy, size);
            if (nonblocking) CHECK_OK(lw_request_wait(req));
            int bad = 0;
            for (int64_t i = 0; i < total; i++) bad += b[i] != value(owner(counts, size, i), i);
            CHECK_EQ(bad, 0);
            CHECK(b[total] == -1.0f);
        }
        free(b);
        /* bf16 and f16: two bytes an element, displacements in elements */
        const lw_dtype halves[2] = {LW_DTYPE_BF16, LW_DTYPE_F16};
        uint16_t *h = malloc(sizeof(uint16_t) * (size_t)(total + 1));
        for (int d = 0; d < 2; d++) {
            for (int64_t i = 0; i <= total; i++) h[i] = i >= lo && i < hi ? bits(rank, i) : 0xffff;
            CHECK_OK(lw_comm_allgather_segments(c, h, counts, halves[d], req));
            CHECK_OK(lw_request_wait(req));
            int bad = 0;
            for (int64_t i = 0; i < total; i++) bad += h[i] != bits(owner(counts, size, i), i);
            CHECK_EQ(bad, 0);
            CHECK(h[total] == 0xffff);
        }
        free(h);
    }
    segment_counts(4, size, counts);
    CHECK_OK(lw_comm_allgather_segments(c, NULL, counts, LW_DTYPE_F32, NULL));
    lw_request_free(req);
    free(counts);
}

/* Several collectives in flight on their own requests, started in one order on every rank, a
 * blocking all-reduce and an equal-count reduce-scatter among them, waited for in another
 * order: each finishes with its own result (the two reduce-scatters' scratch stays apart). */
static void test_segments_interleaved(lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    int64_t *ca = malloc(sizeof(int64_t) * (size_t)size);
    int64_t *cb = malloc(sizeof(int64_t) * (size_t)size);
    const int64_t ta = segment_counts(0, size, ca), tb = segment_counts(5, size, cb);
    float *a = malloc(sizeof(float) * (size_t)ta), *g = malloc(sizeof(float) * (size_t)tb);
    const int64_t n = 64 * (int64_t)size;
    float *e = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < ta; i++) a[i] = value(rank, i);
    const int64_t lo = displ(cb, rank), hi = lo + cb[rank];
    for (int64_t i = 0; i < tb; i++) g[i] = i >= lo && i < hi ? value(rank, i) : 0.0f;
    for (int64_t i = 0; i < n; i++) e[i] = 1.0f;
    lw_request *ra, *rg, *re;
    CHECK_OK(lw_request_new(&ra));
    CHECK_OK(lw_request_new(&rg));
    CHECK_OK(lw_request_new(&re));
    CHECK_OK(lw_comm_reduce_scatterv(c, a, ca, ra));
    CHECK_OK(lw_comm_allgather_segments(c, g, cb, LW_DTYPE_F32, rg));
    int64_t one = 1;
    CHECK_OK(lw_comm_allreduce(c, &one, 1, LW_DTYPE_I64, LW_REDUCE_SUM));
    CHECK_EQ(one, size);
    CHECK_OK(lw_comm_reduce_scatter(c, e, n, re));
    /* a second start on a request in flight is refused (one rank: nothing stays in flight) */
    if (size > 1) {
        CHECK(lw_request_active(ra));
        CHECK_FAILS(lw_comm_reduce_scatterv(c, a, ca, ra), LW_ERR_STATE, "still active");
        CHECK_FAILS(lw_comm_allgather_segments(c, g, cb, LW_DTYPE_F32, rg), LW_ERR_STATE,
                    "still active");
    }
    bool done = false;
    CHECK_OK(lw_request_test(rg, &done));
    CHECK_OK(lw_request_wait(re));
    CHECK_OK(lw_request_wait(rg));
    CHECK_OK(lw_request_wait(ra));
    CHECK_EQ(reduce_scatterv_wrong(a, ca, rank, size), 0);
    int bad = 0;
    for (int64_t i = 0; i < tb; i++) bad += g[i] != value(owner(cb, size, i), i);
    CHECK_EQ(bad, 0);
    CHECK(e[rank * 64] == (float)size && e[rank * 64 + 63] == (float)size);
    lw_request_free(ra), lw_request_free(rg), lw_request_free(re);
    free(ca), free(cb), free(a), free(g), free(e);
}

/* Eight reduce-scatters in flight at once on one communicator (MPI runs them as rings of sends
 * and receives, p - 1 steps each), equal and unequal segments, waited for in reverse order
 * after a round of tests: each ends with its own sum, so no ring took another's messages. The
 * values are not exact in float, and a second round on the same data gives the same bits: the
 * order of the additions is fixed. */
static void test_reduce_scatters_in_flight(lw_comm *c) {
    enum { FLIGHT = 8 };
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    lw_request *req[FLIGHT];
    float *b[FLIGHT], *first[FLIGHT];
    int64_t *counts[FLIGHT], total[FLIGHT];
    for (int k = 0; k < FLIGHT; k++) {
        counts[k] = malloc(sizeof(int64_t) * (size_t)size);
        total[k] = 0;
        for (int r = 0; r < size; r++) /* odd k: unequal segments; even k: equal ones */
            total[k] += counts[k][r] = k % 2 ? 1000 * (k + 1) + 37 * r : 4096 * (k + 1);
        b[k] = malloc(sizeof(float) * (size_t)total[k]);
        first[k] = malloc(sizeof(float) * (size_t)total[k]);
        CHECK_OK(lw_request_new(&req[k]));
    }
    for (int round = 0; round < 2; round++) {
        for (int k = 0; k < FLIGHT; k++) {
            for (int64_t i = 0; i < total[k]; i++) b[k][i] = value(rank, i) * 0.1f + (float)k / 3;
            CHECK_OK(k % 2 ? lw_comm_reduce_scatterv(c, b[k], counts[k], req[k])
                           : lw_comm_reduce_scatter(c, b[k], total[k], req[k]));
        }
        for (int k = 0; k < FLIGHT; k++) {
            bool done = false;
            CHECK_OK(lw_request_test(req[k], &done));
        }
        for (int k = FLIGHT - 1; k >= 0; k--) CHECK_OK(lw_request_wait(req[k]));
        for (int k = 0; k < FLIGHT; k++) {
            const int64_t lo = displ(counts[k], rank), hi = lo + counts[k][rank];
            int bad = 0;
            for (int64_t i = lo; i < hi; i++) {
                double want = 0;
                for (int r = 0; r < size; r++) want += value(r, i) * 0.1f + (float)k / 3;
                bad += fabs(b[k][i] - want) > 1e-5 * (fabs(want) + 1);
                if (round == 1) bad += b[k][i] != first[k][i];
            }
            CHECK_EQ(bad, 0);
            memcpy(first[k], b[k], sizeof(float) * (size_t)total[k]);
        }
    }
    for (int k = 0; k < FLIGHT; k++) {
        lw_request_free(req[k]);
        free(b[k]), free(first[k]), free(counts[k]);
    }
}

/* Bad counts fail alike on every rank (the counts are the same on all), naming the collective
 * and the value, before anything starts; the MPI backend's limit is int's. */
static void test_segments_errors(lw_comm *c) {
    const int size = lw_comm_size(c);
    int64_t *counts = calloc((size_t)size, sizeof(int64_t));
    float b[8] = {0};
    CHECK_FAILS(lw_comm_reduce_scatterv(c, b, NULL, NULL), LW_ERR_INVALID,
                "comm: reduce-scatter-v without counts");
    CHECK_FAILS(lw_comm_allgather_segments(c, b, NULL, LW_DTYPE_F32, NULL), LW_ERR_INVALID,
                "comm: all-gather-segments without counts");
    counts[size - 1] = -2;
    char expect[80];
    snprintf(expect, sizeof expect, "reduce-scatter-v count -2 for rank %d", size - 1);
    CHECK_FAILS(lw_comm_reduce_scatterv(c, b, counts, NULL), LW_ERR_INVALID, expect);
    snprintf(expect, sizeof expect, "all-gather-segments count -2 for rank %d", size - 1);
    CHECK_FAILS(lw_comm_allgather_segments(c, b, counts, LW_DTYPE_F32, NULL), LW_ERR_INVALID,
                expect);
    counts[size - 1] = 3;
    CHECK_FAILS(lw_comm_reduce_scatterv(c, NULL, counts, NULL), LW_ERR_INVALID,
                "reduce-scatter-v of 3 elements at");
    CHECK_FAILS(lw_comm_allgather_segments(c, b, counts, LW_DTYPE_F64, NULL), LW_ERR_INVALID,
                "all-gather-segments of dtype 3 (f32, bf16 or f16)");
    counts[0] = INT64_MAX; /* past any bucket: bytes would overflow */
    CHECK_FAILS(lw_comm_allgather_segments(c, b, counts, LW_DTYPE_F32, NULL), LW_ERR_INVALID,
                "all-gather-segments counts add up past");
    /* 2^31 elements: MPI's counts are int; one rank of self moves nothing, whatever the size */
    for (int r = 0; r < size; r++) counts[r] = 0;
    counts[0] = (int64_t)1 << 31;
    if (strcmp(lw_comm_backend(c), "mpi") == 0) {
        CHECK_FAILS(lw_comm_reduce_scatterv(c, b, counts, NULL), LW_ERR_UNSUPPORTED,
                    "reduce-scatter-v of 2147483648 elements exceeds the mpi backend's limit of "
                    "2147483647 elements per collective");
        CHECK_FAILS(lw_comm_allgather_segments(c, b, counts, LW_DTYPE_BF16, NULL),
                    LW_ERR_UNSUPPORTED, "all-gather-segments of 2147483648 elements exceeds");
    } else {
        CHECK_OK(lw_comm_reduce_scatterv(c, b, counts, NULL));
        CHECK_OK(lw_comm_allgather_segments(c, b, counts, LW_DTYPE_BF16, NULL));
    }
    /* the communicator still works, in step on every rank */
    int64_t one = 1;
    CHECK_OK(lw_comm_allreduce(c, &one, 1, LW_DTYPE_I64, LW_REDUCE_SUM));
    CHECK_EQ(one, size);
    free(counts);
}

/* ---- all-to-all-v ---- */


/* One exchange of pattern k on this rank's host memory (comm_cases.h). */
typedef a2a_host a2a;

static a2a a2a_make(lw_comm *c, int k, lw_dtype d) {
    return a2a_host_make(lw_comm_rank(c), lw_comm_size(c), k, d);
}

static int a2a_wrong(lw_comm *c, const a2a *x, lw_dtype d) {
    return a2a_host_wrong(x, lw_comm_rank(c), lw_comm_size(c), d);
}

static void a2a_free(a2a *x) { a2a_host_free(x); }

/* Starts x's exchange on req (NULL: blocking), with its counts on the heap, spoiled and freed
 * right after the call, and NULL for an empty side (allowed with a total of 0). */
static lw_status a2a_start(lw_comm *c, a2a *x, lw_dtype d, lw_request *req) {
    const int size = lw_comm_size(c);
    int64_t *sc = counts_copy(x->send_counts, size), *rc = counts_copy(x->recv_counts, size);
    lw_status st = lw_comm_alltoallv(c, x->sent > 0 ? x->send : NULL, sc,
                                     x->received > 0 ? x->recv : NULL, rc, d, req);
    spoil_and_free(sc, size);
    spoil_and_free(rc, size);
    return st;
}

static void test_alltoallv(lw_comm *c) {
    const lw_dtype dtypes[4] = {LW_DTYPE_F32, LW_DTYPE_I64, LW_DTYPE_BF16, LW_DTYPE_F16};
    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    for (int k = 0; k < A2A_PATTERNS; k++) {
        for (int t = 0; t < 4; t++) {
            for (int nonblocking = 0; nonblocking < 2; nonblocking++) {
                a2a x = a2a_make(c, k, dtypes[t]);
                CHECK_OK(a2a_start(c, &x, dtypes[t], nonblocking ? req : NULL));
                if (nonblocking && t % 2 == 0) {
                    bool done = false;
                    while (!done) CHECK_OK(lw_request_test(req, &done));
                } else if (nonblocking) {
                    CHECK_OK(lw_request_wait(req));
                }
                CHECK(!lw_request_active(req));
                const int bad = a2a_wrong(c, &x, dtypes[t]);
                if (bad) fprintf(stderr, "all-to-all-v pattern %d dtype %d%s: %d wrong\n", k,
                                 (int)dtypes[t], nonblocking ? " (nonblocking)" : "", bad);
                CHECK_EQ(bad, 0);
                a2a_free(&x);
            }
        }
    }
    lw_request_free(req);
}

/* The pattern lw.h documents: a rank that knows only what it sends learns what it receives with
 * an all-to-all of one i64 count per peer, then exchanges the payload with both. */
static void test_alltoallv_counts_first(lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    int64_t *ones = malloc(sizeof(int64_t) * (size_t)size);
    int64_t *learned = malloc(sizeof(int64_t) * (size_t)size);
    for (int j = 0; j < size; j++) ones[j] = 1, learned[j] = -1;
    a2a x = a2a_make(c, 0, LW_DTYPE_F32);
    CHECK_OK(lw_comm_alltoallv(c, x.send_counts, ones, learned, ones, LW_DTYPE_I64, NULL));
    int bad = 0;
    for (int j = 0; j < size; j++) bad += learned[j] != a2a_count(0, j, rank, size);
    CHECK_EQ(bad, 0);
    CHECK_OK(lw_comm_alltoallv(c, x.send, x.send_counts, x.recv, learned, LW_DTYPE_F32, NULL));
    CHECK_EQ(a2a_wrong(c, &x, LW_DTYPE_F32), 0);
    a2a_free(&x);
    free(ones), free(learned);
}

/* All-to-alls on their own requests in flight with the other collectives, started in one order
 * on every rank, a blocking all-reduce and all-to-all among them, waited for in another. */
static void test_alltoallv_interleaved(lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    a2a x = a2a_make(c, 5, LW_DTYPE_BF16), y = a2a_make(c, 1, LW_DTYPE_I64);
    a2a z = a2a_make(c, 2, LW_DTYPE_F32);
    int64_t *counts = malloc(sizeof(int64_t) * (size_t)size);
    const int64_t total = segment_counts(0, size, counts);
    float *b = malloc(sizeof(float) * (size_t)total);
    for (int64_t i = 0; i < total; i++) b[i] = value(rank, i);
    lw_request *rx, *ry, *rb;
    CHECK_OK(lw_request_new(&rx));
    CHECK_OK(lw_request_new(&ry));
    CHECK_OK(lw_request_new(&rb));
    CHECK_OK(lw_request_set_label(rx, "the expert dispatch"));
    CHECK_OK(a2a_start(c, &x, LW_DTYPE_BF16, rx));
    CHECK_OK(lw_comm_reduce_scatterv(c, b, counts, rb));
    CHECK_OK(a2a_start(c, &y, LW_DTYPE_I64, ry));
    if (size > 1) {
        CHECK(lw_request_active(rx));
        CHECK_FAILS(a2a_start(c, &y, LW_DTYPE_I64, ry), LW_ERR_STATE, "still active");
    }
    int64_t one = 1;
    CHECK_OK(lw_comm_allreduce(c, &one, 1, LW_DTYPE_I64, LW_REDUCE_SUM));
    CHECK_EQ(one, size);
    CHECK_OK(a2a_start(c, &z, LW_DTYPE_F32, NULL));
    CHECK_EQ(a2a_wrong(c, &z, LW_DTYPE_F32), 0);
    bool done = false;
    CHECK_OK(lw_request_test(ry, &done));
    CHECK_OK(lw_request_wait(rb));
    CHECK_OK(lw_request_wait(ry));
    CHECK_OK(lw_request_wait(rx));
    CHECK_EQ(a2a_wrong(c, &x, LW_DTYPE_BF16), 0);
    CHECK_EQ(a2a_wrong(c, &y, LW_DTYPE_I64), 0);
    CHECK_EQ(reduce_scatterv_wrong(b, counts, rank, size), 0);
    lw_request_free(rx), lw_request_free(ry), lw_request_free(rb);
    a2a_free(&x), a2a_free(&y), a2a_free(&z);
    free(counts), free(b);
}

/* Bad arguments, refused before anything starts (every rank makes the same bad call here, so
 * none is left waiting), naming the collective and the value; the MPI backend's limit is int's. */
static void test_alltoallv_errors(lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    a2a x = a2a_make(c, 0, LW_DTYPE_F32);
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
    snprintf(expect, sizeof expect, "all-to-all-v on rank %d: send_counts[%d] is %lld but "
             "recv_counts[%d] is %lld", rank, rank, (long long)sc[rank], rank,
             (long long)rc[rank]);
    CHECK_FAILS(lw_comm_alltoallv(c, s, sc, r, rc, f32, NULL), LW_ERR_INVALID, expect);
    sc[rank] -= 1;
    snprintf(expect, sizeof expect, "all-to-all-v sends %lld elements from a NULL buffer",
             (long long)x.sent);
    CHECK_FAILS(lw_comm_alltoallv(c, NULL, sc, r, rc, f32, NULL), LW_ERR_INVALID, expect);
    snprintf(expect, sizeof expect, "all-to-all-v receives %lld elements into a NULL buffer",
             (long long)x.received);
    CHECK_FAILS(lw_comm_alltoallv(c, s, sc, NULL, rc, f32, NULL), LW_ERR_INVALID, expect);
    /* no in-place form: the same buffer, or one starting inside the other */
    float *both = malloc(sizeof(float) * (size_t)(x.sent + x.received));
    CHECK_FAILS(lw_comm_alltoallv(c, both, sc, both, rc, f32, NULL), LW_ERR_INVALID,
                "overlaps its receive buffer");
    CHECK_FAILS(lw_comm_alltoallv(c, both + x.received - 1, sc, both, rc, f32, NULL),
                LW_ERR_INVALID, "there is no in-place form");
    CHECK_FAILS(lw_comm_alltoallv(c, both, sc, both + x.sent - 1, rc, f32, NULL),
                LW_ERR_INVALID, "overlaps");
    /* back to back is apart */
    CHECK_OK(lw_comm_alltoallv(c, both, sc, both + x.sent, rc, f32, NULL));
    free(both);
    /* 2^31 elements one way: MPI's counts and displacements are int (a peer's part, so that the
     * own part stays alike; one rank has no peer and self no limit) */
    if (strcmp(lw_comm_backend(c), "mpi") == 0 && size > 1) {
        int64_t *zero = calloc((size_t)size, sizeof(int64_t));
        int64_t *big = calloc((size_t)size, sizeof(int64_t));
        big[(rank + 1) % size] = (int64_t)1 << 31;
        CHECK_FAILS(lw_comm_alltoallv(c, s, big, NULL, zero, LW_DTYPE_BF16, NULL),
                    LW_ERR_UNSUPPORTED, "comm: all-to-all-v sends 2147483648 elements, past the "
                    "mpi backend's limit of 2147483647 elements per collective each way");
        CHECK_FAILS(lw_comm_alltoallv(c, NULL, zero, r, big, LW_DTYPE_I64, NULL),
                    LW_ERR_UNSUPPORTED, "all-to-all-v receives 2147483648 elements, past");
        free(zero), free(big);
    }
    /* the communicator still works, in step on every rank */
    int64_t one = 1;
    CHECK_OK(lw_comm_allreduce(c, &one, 1, LW_DTYPE_I64, LW_REDUCE_SUM));
    CHECK_EQ(one, size);
    a2a_free(&x);
}

static void test_allreduce(lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    float f[3] = {(float)rank, 1.0f, (float)(rank * rank)};
    CHECK_OK(lw_comm_allreduce(c, f, 3, LW_DTYPE_F32, LW_REDUCE_SUM));
    CHECK(f[0] == size * (size - 1) / 2.0f && f[1] == (float)size);
    double d[2] = {(double)rank, -(double)rank};
    CHECK_OK(lw_comm_allreduce(c, d, 2, LW_DTYPE_F64, LW_REDUCE_MAX));
    CHECK(d[0] == size - 1 && d[1] == 0.0);
    int64_t i[1] = {rank + 10};
    CHECK_OK(lw_comm_allreduce(c, i, 1, LW_DTYPE_I64, LW_REDUCE_MIN));
    CHECK_EQ(i[0], 10);
    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    float g[5];
    for (int k = 0; k < 5; k++) g[k] = (float)(rank + k);
    CHECK_OK(lw_comm_allreduce_start(c, g, 5, req));
    CHECK_OK(lw_request_wait(req));
    for (int k = 0; k < 5; k++) CHECK(g[k] == size * (size - 1) / 2.0f + (float)(size * k));
    lw_request_free(req);
    CHECK_FAILS(lw_comm_allreduce(c, f, 3, LW_DTYPE_BF16, LW_REDUCE_SUM), LW_ERR_INVALID,
                "all-reduce of dtype 1");
}

static void test_allgatherv(lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    int64_t *counts = malloc(sizeof(int64_t) * (size_t)size), total = 0;
    for (int r = 0; r < size; r++) {
        counts[r] = r % 2 == 1 ? 0 : r + 2; /* uneven, some ranks send nothing */
        total += counts[r];
    }
    float *send = malloc(sizeof(float) * (size_t)(counts[rank] + 1));
    float *recv = malloc(sizeof(float) * (size_t)(total + 1));
    for (int64_t i = 0; i < counts[rank]; i++) send[i] = value(rank, i);
    CHECK_OK(lw_comm_allgatherv(c, send, counts[rank], recv, counts));
    int64_t at = 0;
    int bad = 0;
    for (int r = 0; r < size; r++)
        for (int64_t i = 0; i < counts[r]; i++) bad += recv[at++] != value(r, i);
    CHECK_EQ(bad, 0);
    CHECK_FAILS(lw_comm_allgatherv(c, send, counts[rank] + 1, recv, counts), LW_ERR_INVALID,
                "all-gather-v sends");
    free(counts), free(send), free(recv);
}

static void test_broadcast_split_barrier(lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    char text[32] = "nothing";
    if (rank == size - 1) snprintf(text, sizeof text, "from %d", size - 1);
    CHECK_OK(lw_comm_broadcast(c, text, sizeof text, size - 1));
    char expect[32];
    snprintf(expect, sizeof expect, "from %d", size - 1);
    CHECK(strcmp(text, expect) == 0);
    CHECK_FAILS(lw_comm_broadcast(c, text, 4, size), LW_ERR_INVALID, "root");

    lw_comm *half;
    CHECK_OK(lw_comm_split(c, rank % 2, rank, &half));
    CHECK_EQ(lw_comm_size(half), rank % 2 == 0 ? (size + 1) / 2 : size / 2);
    CHECK_EQ(lw_comm_rank(half), rank / 2);
    int64_t one = 1;
    CHECK_OK(lw_comm_allreduce(half, &one, 1, LW_DTYPE_I64, LW_REDUCE_SUM));
    CHECK_EQ(one, lw_comm_size(half));
    lw_comm_free(half);
    CHECK_OK(lw_comm_barrier(c));
}

static void test_counters(lw_comm *c) {
    const int size = lw_comm_size(c);
    lw_comm_counters_reset(c);
    float *b = calloc((size_t)(size * 256), sizeof(float));
    CHECK_OK(lw_comm_reduce_scatter(c, b, size * 256, NULL));
    CHECK_OK(lw_comm_allgather(c, b, size * 256, LW_DTYPE_F32, NULL));
    lw_comm_counter rs, ag;
    CHECK_OK(lw_comm_counter_get(c, LW_COMM_REDUCE_SCATTER, &rs));
    CHECK_OK(lw_comm_counter_get(c, LW_COMM_ALLGATHER, &ag));
    CHECK_EQ(rs.calls, 1);
    CHECK_EQ(ag.calls, 1);
    /* ring volume: (p - 1) / p of the buffer each */
    CHECK_EQ(rs.bytes, (int64_t)(size - 1) * 256 * 4);
    CHECK_EQ(ag.bytes, rs.bytes);
    CHECK(rs.seconds >= 0 && ag.seconds >= 0);
    /* the variable-count forms count as their kind, by the bucket's total alone: unequal
     * segments of the same total send what equal shards do */
    int64_t *counts = calloc((size_t)size, sizeof(int64_t));
    counts[size - 1] = size * 256;
    lw_comm_counters_reset(c);
    CHECK_OK(lw_comm_reduce_scatterv(c, b, counts, NULL));
    CHECK_OK(lw_comm_allgather_segments(c, b, counts, LW_DTYPE_F32, NULL));
    CHECK_OK(lw_comm_allgather_segments(c, b, counts, LW_DTYPE_BF16, NULL));
    lw_comm_counter rsv, agv;
    CHECK_OK(lw_comm_counter_get(c, LW_COMM_REDUCE_SCATTER, &rsv));
    CHECK_OK(lw_comm_counter_get(c, LW_COMM_ALLGATHER, &agv));
    CHECK_EQ(rsv.calls, 1);
    CHECK_EQ(agv.calls, 2);
    CHECK_EQ(rsv.bytes, rs.bytes);
    CHECK_EQ(agv.bytes, ag.bytes + ag.bytes / 2); /* bf16: half the bytes */
    /* the all-to-all: what this rank sends its peers, not its own part; nothing else counted */
    a2a x = a2a_make(c, 0, LW_DTYPE_F32), y = a2a_make(c, 3, LW_DTYPE_BF16);
    lw_comm_counters_reset(c);
    CHECK_OK(a2a_start(c, &x, LW_DTYPE_F32, NULL));
    CHECK_OK(a2a_start(c, &y, LW_DTYPE_BF16, NULL));
    lw_comm_counter a2a_n, none;
    CHECK_OK(lw_comm_counter_get(c, LW_COMM_ALLTOALL, &a2a_n));
    CHECK_EQ(a2a_n.calls, 2);
    const int rank = lw_comm_rank(c);
    CHECK_EQ(a2a_n.bytes,
             (x.sent - x.send_counts[rank]) * 4 + (y.sent - y.send_counts[rank]) * 2);
    CHECK(a2a_n.seconds >= 0);
    for (int op = LW_COMM_ALLREDUCE; op < LW_COMM_ALLTOALL; op++) {
        CHECK_OK(lw_comm_counter_get(c, (lw_comm_op)op, &none));
        CHECK_EQ(none.calls, 0);
    }
    CHECK_FAILS(lw_comm_counter_get(c, (lw_comm_op)(LW_COMM_ALLTOALL + 1), &none), LW_ERR_INVALID,
                "unknown counter 7");
    a2a_free(&x), a2a_free(&y);
    free(counts);
    free(b);
}

/* Freeing a communicator completes its collectives in flight, so a request that outlives it
 * (freed later, as Lua's garbage collector may order it) touches no freed memory. */
static void test_free_with_request_in_flight(lw_comm *c) {
    if (lw_comm_size(c) < 2) return; /* one rank completes collectives at once */
    lw_comm *part;
    CHECK_OK(lw_comm_split(c, 0, lw_comm_rank(c), &part));
    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    float *b = calloc((size_t)lw_comm_size(part) * 8, sizeof(float));
    CHECK_OK(lw_comm_allgather(part, b, lw_comm_size(part) * 8, LW_DTYPE_F32, req));
    CHECK(lw_request_active(req));
    lw_comm_free(part);
    CHECK(!lw_request_active(req));
    lw_request_free(req);
    free(b);
}

/* Collectives on a stream: on the CPU the stream's work is already done, so they give the same
 * sums; a stream cannot change under a collective in flight; host-memory backends reach the
 * CPU's memory. */
static void test_streams(lw_comm *c) {
    const int32_t size = lw_comm_size(c), rank = lw_comm_rank(c);
    lw_device *cpu = lw_device_cpu();
    CHECK(lw_comm_reaches(c, cpu));
    CHECK(lw_comm_stream(c) == lw_device_stream(cpu));
    lw_stream *s = NULL;
    CHECK_OK(lw_stream_new(cpu, &s));
    CHECK_OK(lw_comm_set_stream(c, s));
    CHECK(lw_comm_stream(c) == s);
    lw_request *req = NULL;
    CHECK_OK(lw_request_new(&req));
    CHECK_OK(lw_request_set_stream(req, lw_device_stream(cpu)));
    const int64_t n = 4 * (int64_t)size;
    float *b = calloc((size_t)n, sizeof(float));
    for (int64_t i = 0; i < n; i++) b[i] = (float)(rank + 1);
    CHECK_OK(lw_comm_reduce_scatter(c, b, n, req));
    if (size > 1) CHECK_FAILS(lw_request_set_stream(req, s), LW_ERR_STATE, "still active");
    CHECK_OK(lw_request_wait(req));
    const float sum = (float)(size * (size + 1) / 2);
    CHECK(b[rank * 4] == sum && b[rank * 4 + 3] == sum);
    CHECK_OK(lw_comm_allgather(c, b, n, LW_DTYPE_F32, NULL)); /* on the comm's stream */
    CHECK(b[0] == sum && b[n - 1] == sum);
    CHECK_OK(lw_comm_set_stream(c, NULL));
    lw_request_free(req);
    lw_stream_free(s);
    free(b);
}

/* lw_comm_device_new: the CPU needs no communicator of its own, and bad arguments are named
 * (a GPU's, NCCL, is tests/test_nccl.c's). */
static void test_device_comm(lw_comm *c) {
    lw_comm *d = (lw_comm *)1;
    CHECK_FAILS(lw_comm_device_new(c, lw_device_cpu(), &d), LW_ERR_UNSUPPORTED,
                "comm: cpu has no communicator of its own: every communicator already reaches "
                "host memory");
    CHECK(d == NULL);
    CHECK_FAILS(lw_comm_device_new(NULL, lw_device_cpu(), &d), LW_ERR_INVALID,
                "needs a parent communicator to bootstrap over; parent is NULL");
    CHECK_FAILS(lw_comm_device_new(c, NULL, &d), LW_ERR_INVALID, "needs a device; it is NULL");
    CHECK_FAILS(lw_comm_device_new(c, lw_device_cpu(), NULL), LW_ERR_INVALID,
                "out pointer is NULL");
}

/* The local rank: the launcher's (OpenMPI's under mpirun); without a launcher 0 whatever is
 * set, and under one the first variable set, -1 for none (the launcher variables are set here
 * by hand, then removed). */
static void test_local_rank(void) {
    if (lw_comm_launched(NULL, NULL)) {
        const char *ompi = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
        if (ompi != NULL) CHECK_EQ(lw_comm_local_rank(), atoi(ompi));
        CHECK(lw_comm_local_rank() >= -1);
        return;
    }
    CHECK_EQ(lw_comm_local_rank(), 0);
    setenv("SLURM_LOCALID", "3", 1);
    CHECK_EQ(lw_comm_local_rank(), 0); /* a batch script's variable, but no launched rank */
    setenv("PMI_RANK", "5", 1);
    CHECK(lw_comm_launched(NULL, NULL));
    CHECK_EQ(lw_comm_local_rank(), 3);
    setenv("MPI_LOCALRANKID", "1", 1); /* Hydra's comes before Slurm's */
    CHECK_EQ(lw_comm_local_rank(), 1);
    unsetenv("SLURM_LOCALID");
    setenv("MPI_LOCALRANKID", "one", 1); /* not a number: not a local rank */
    CHECK_EQ(lw_comm_local_rank(), -1);
    unsetenv("MPI_LOCALRANKID");
    CHECK_EQ(lw_comm_local_rank(), -1);
    unsetenv("PMI_RANK");
    CHECK(!lw_comm_launched(NULL, NULL));
    CHECK_EQ(lw_comm_local_rank(), 0);
}

int main(void) {
    lw_comm *c = NULL;
    CHECK_OK(lw_comm_init(&c));
    if (c == NULL) return check_exit("test_comm");
    const char *expect = getenv("OMPI_COMM_WORLD_SIZE") ? "mpi" : "self";
    CHECK(strcmp(lw_comm_backend(c), expect) == 0);
    /* the launcher's view agrees with the world MPI built */
    int32_t rank = -1, size = -1;
    CHECK(lw_comm_launched(&rank, &size) == (getenv("OMPI_COMM_WORLD_SIZE") != NULL));
    CHECK_EQ(rank, lw_comm_rank(c));
    CHECK_EQ(size, lw_comm_size(c));
    CHECK(lw_comm_launched(NULL, NULL) == (size > 1 || getenv("OMPI_COMM_WORLD_SIZE") != NULL));
    test_reduce_scatter_and_allgather(c);
    test_reduce_scatterv(c);
    test_allgather_segments(c);
    test_segments_interleaved(c);
    test_reduce_scatters_in_flight(c);
    test_segments_errors(c);
    test_alltoallv(c);
    test_alltoallv_counts_first(c);
    test_alltoallv_interleaved(c);
    test_alltoallv_errors(c);
    test_allreduce(c);
    test_allgatherv(c);
    test_broadcast_split_barrier(c);
    test_counters(c);
    test_free_with_request_in_flight(c);
    test_streams(c);
    test_device_comm(c);
    test_local_rank();
    return check_exit_all_ranks(c, "test_comm");
}
