/* test_device_comm.c: a device communicator (lw_comm_device_new over the world) on this rank's
 * device, every collective against a direct computation, as test_comm.c does on host memory:
 * run alone (one rank, over the self communicator: the collectives still run) or under mpirun.
 * Also requests with test / wait and a stream, the ordering after a stream, host memory through
 * the parent, split, counters, the blocking forms with the watchdog on and off, the
 * variable-count forms over unequal, empty and lopsided segments, the all-to-all-v, and the
 * ranks' agreement on the kind. Which communicator it gets is the library's choice, checked
 * against the environment's expectation:
 *   LWOPT_TEST_DEVICE  the device (default cuda:<local rank>: a GPU per rank); cuda:0 for ranks
 *                      that share one GPU;
 *   LWOPT_TEST_COMM    the backend expected ("nccl", "staged"; default: either);
 *   LWOPT_TEST_ABOUT   words lw_comm_about must hold (why that backend).
 * On a GPU: NCCL alone, staged alone (LWOPT_DEVICE_COMM=staged), staged for ranks sharing the
 * GPU. Without one, over the fake device library (LWOPT_CUDA_LIB: host memory behind the device
 * table, no NCCL): the staged communicator at 1 to 3 ranks, sharing one device or not.
 * Skips (exit 77) when no device can be had, saying why. */
#include "check.h"
#include "comm_cases.h"

#include <stdlib.h>

static lw_device *gpu;
static lw_stream *gs; /* the GPU's default stream, for the copies */

/* n floats of device memory holding host[0..n). */
static float *to_device(const float *host, int64_t n) {
    float *d = NULL;
    CHECK_OK(lw_device_alloc(gpu, sizeof(float) * (size_t)(n > 0 ? n : 1), (void **)&d));
    if (d != NULL && n > 0)
        CHECK_OK(lw_device_copy(gs, d, host, sizeof(float) * (size_t)n, LW_COPY_HOST_TO_DEVICE));
    return d;
}

static void to_host(void *host, const void *d, int64_t bytes) {
    CHECK_OK(lw_device_copy(gs, host, d, bytes, LW_COPY_DEVICE_TO_HOST));
}

/* The backend and its reason as the environment expects; a device communicator is no parent for
 * another; the ranks must ask for the same kind. */
static void test_identity(lw_comm *parent, lw_comm *c) {
    const char *backend = lw_comm_backend(c), *want = getenv("LWOPT_TEST_COMM");
    const char *about = getenv("LWOPT_TEST_ABOUT");
    CHECK(strcmp(backend, "nccl") == 0 || strcmp(backend, "staged") == 0);
    if (want != NULL && strcmp(backend, want) != 0)
        fprintf(stderr, "backend '%s', expected '%s' (%s)\n", backend, want, lw_comm_about(c));
    CHECK(want == NULL || strcmp(backend, want) == 0);
    CHECK(strncmp(lw_comm_about(c), backend, strlen(backend)) == 0);
    if (about != NULL && strstr(lw_comm_about(c), about) == NULL)
        fprintf(stderr, "lw_comm_about: '%s', expected '%s' in it\n", lw_comm_about(c), about);
    CHECK(about == NULL || strstr(lw_comm_about(c), about) != NULL);
    CHECK_EQ(lw_comm_rank(c), lw_comm_rank(parent));
    CHECK_EQ(lw_comm_size(c), lw_comm_size(parent));
    CHECK(lw_comm_reaches(c, gpu));
    CHECK(lw_comm_reaches(c, lw_device_cpu()));
    CHECK(!lw_comm_reaches(parent, gpu));
    CHECK(lw_comm_timeout(c) == lw_comm_timeout(parent));
    /* a device communicator is no parent for another */
    lw_comm *again = (lw_comm *)1;
    char words[64];
    snprintf(words, sizeof words, "'%s' is a device communicator already", backend);
    CHECK_FAILS(lw_comm_device_new(c, gpu, &again), LW_ERR_INVALID, words);
    CHECK(again == NULL);
    if (lw_comm_size(parent) > 1) { /* rank 0 asks for another kind than the rest: all refuse */
        const int rank = lw_comm_rank(parent);
        CHECK_FAILS(lw_comm_device_new_kind(parent, gpu,
                                            rank == 0 ? LW_DEVICE_COMM_STAGED : LW_DEVICE_COMM_AUTO,
                                            &again),
                    LW_ERR_INVALID, "every rank must ask for the same");
        CHECK(again == NULL);
    }
}

static void test_reduce_scatter(lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    const int64_t shards[] = {1, 3, 64, 1000, 1 << 18};
    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    for (int k = 0; k < 5; k++) {
        const int64_t shard = shards[k], n = shard * size;
        float *h = malloc(sizeof(float) * (size_t)n);
        for (int nonblocking = 0; nonblocking < 2; nonblocking++) {
            for (int64_t i = 0; i < n; i++)
                h[i] = value(rank, i);
            float *d = to_device(h, n);
            if (nonblocking) {
                CHECK_OK(lw_comm_reduce_scatter(c, d, n, req));
                bool done = false;
                while (!done)
                    CHECK_OK(lw_request_test(req, &done));
                CHECK(!lw_request_active(req));
            } else {
                CHECK_OK(lw_comm_reduce_scatter(c, d, n, NULL));
            }
            to_host(h, d, sizeof(float) * n);
            int bad = 0;
            for (int64_t i = 0; i < n; i++) {
                float want = value(rank, i); /* outside its shard a rank keeps its own data */
                if (i / shard == rank) {
                    want = 0.0f;
                    for (int r = 0; r < size; r++)
                        want += value(r, i);
                }
                bad += h[i] != want;
            }
            CHECK_EQ(bad, 0);
            lw_device_free(gpu, d);
        }
        free(h);
    }
    lw_request_free(req);
    /* the buffers' collectives take the GPU's memory only */
    float host[4] = {0};
    CHECK_FAILS(lw_comm_reduce_scatter(c, host, 4 * size, NULL), LW_ERR_INVALID,
                "reduce-scatter of host memory");
}

/* bf16 of a float that has one (the upper half of its bits). */
static uint16_t bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}

static void test_allgather(lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    const int64_t shard = 777, n = shard * size;
    float *h = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        h[i] = i / shard == rank ? value(rank, i) : -1.0f;
    float *d = to_device(h, n);
    CHECK_OK(lw_comm_allgather(c, d, n, LW_DTYPE_F32, req));
    CHECK_OK(lw_request_wait(req));
    to_host(h, d, sizeof(float) * n);
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += h[i] != value((int)(i / shard), i);
    CHECK_EQ(bad, 0);

    /* bf16: the bits move untouched (values with exact bf16 forms) */
    uint16_t *b = malloc(sizeof(uint16_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        b[i] = i / shard == rank ? bf16(value(rank, i)) : 0xffff;
    CHECK_OK(lw_device_copy(gs, d, b, sizeof(uint16_t) * n, LW_COPY_HOST_TO_DEVICE));
    CHECK_OK(lw_comm_allgather(c, d, n, LW_DTYPE_BF16, NULL));
    CHECK_OK(lw_device_copy(gs, b, d, sizeof(uint16_t) * n, LW_COPY_DEVICE_TO_HOST));
    bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += b[i] != bf16(value((int)(i / shard), i));
    CHECK_EQ(bad, 0);
    free(b);
    lw_device_free(gpu, d);
    free(h);
    lw_request_free(req);
}

/* All-gather-v into a separate buffer (legacy mode's), ordered after a large copy on a stream of
 * the caller's that writes what it sends: without the ordering it would send the zeros before. */
static void test_allgatherv(lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    int64_t *counts = malloc(sizeof(int64_t) * (size_t)size), total = 0;
    for (int r = 0; r < size; r++) {
        counts[r] = r % 2 == 1 ? 0 : 1000 * (r + 2); /* uneven, some ranks send nothing */
        total += counts[r];
    }
    const int64_t big = 1 << 24; /* 64 MiB: the copy takes long enough to lose a race */
    float *h = malloc(sizeof(float) * (size_t)big);
    for (int64_t i = 0; i < big; i++)
        h[i] = 0.0f;
    for (int64_t i = 0; i < counts[rank]; i++)
        h[big - counts[rank] + i] = value(rank, i);
    float *staged = to_device(h, big), *sendbuf = NULL, *recv = NULL;
    CHECK_OK(lw_device_alloc(gpu, sizeof(float) * (size_t)big, (void **)&sendbuf));
    CHECK_OK(lw_device_alloc(gpu, sizeof(float) * (size_t)(total + 1), (void **)&recv));
    lw_stream *s = NULL;
    CHECK_OK(lw_stream_new(gpu, &s));
    CHECK_OK(lw_device_copy(s, sendbuf, staged, sizeof(float) * big, LW_COPY_DEVICE_TO_DEVICE));
    CHECK_OK(lw_comm_set_stream(c, s));
    const float *send = sendbuf + big - counts[rank];
    CHECK_OK(lw_comm_allgatherv(c, send, counts[rank], recv, counts));
    CHECK_OK(lw_comm_set_stream(c, NULL));
    float *back = malloc(sizeof(float) * (size_t)(total + 1));
    to_host(back, recv, sizeof(float) * total);
    int64_t at = 0;
    int bad = 0;
    for (int r = 0; r < size; r++)
        for (int64_t i = 0; i < counts[r]; i++)
            bad += back[at++] != value(r, i);
    CHECK_EQ(bad, 0);
    lw_stream_free(s);
    lw_device_free(gpu, staged);
    lw_device_free(gpu, sendbuf);
    lw_device_free(gpu, recv);
    free(back), free(h), free(counts);
}

/* ---- the variable-count forms: segments of unequal size, in rank order, in place ---- */


static void test_reduce_scatterv(lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    int64_t *counts = malloc(sizeof(int64_t) * (size_t)size);
    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    for (int k = 0; k < SEGMENT_PATTERNS; k++) {
        const int64_t total = segment_counts(k, size, counts);
        float *h = malloc(sizeof(float) * (size_t)(total + 1)); /* one past: left as it was */
        for (int nonblocking = 0; nonblocking < 2; nonblocking++) {
            for (int64_t i = 0; i <= total; i++)
                h[i] = value(rank, i);
            float *d = to_device(h, total + 1);
            int64_t *copy = counts_copy(counts, size);
            CHECK_OK(lw_comm_reduce_scatterv(c, d, copy, nonblocking ? req : NULL));
            spoil_and_free(copy, size);
            bool done = !nonblocking;
            while (!done)
                CHECK_OK(lw_request_test(req, &done));
            CHECK(!lw_request_active(req));
            to_host(h, d, sizeof(float) * (total + 1));
            CHECK_EQ(reduce_scatterv_wrong(h, counts, rank, size), 0);
            CHECK(h[total] == value(rank, total));
            lw_device_free(gpu, d);
        }
        free(h);
    }
    /* the buffers' collectives take the GPU's memory only */
    segment_counts(0, size, counts);
    float *host = calloc((size_t)displ(counts, size), sizeof(float));
    CHECK_FAILS(lw_comm_reduce_scatterv(c, host, counts, NULL), LW_ERR_INVALID,
                "reduce-scatter-v of host memory");
    CHECK_FAILS(lw_comm_allgather_segments(c, host, counts, LW_DTYPE_F32, NULL), LW_ERR_INVALID,
                "of host memory");
    free(host);
    lw_request_free(req);
    free(counts);
}

static void test_allgather_segments(lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    int64_t *counts = malloc(sizeof(int64_t) * (size_t)size);
    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    for (int k = 0; k < SEGMENT_PATTERNS; k++) {
        const int64_t total = segment_counts(k, size, counts);
        const int64_t lo = displ(counts, rank), hi = lo + counts[rank];
        float *h = malloc(sizeof(float) * (size_t)(total + 1));
        for (int nonblocking = 0; nonblocking < 2; nonblocking++) {
            for (int64_t i = 0; i <= total; i++)
                h[i] = i >= lo && i < hi ? value(rank, i) : -1.0f;
            float *d = to_device(h, total + 1);
            int64_t *copy = counts_copy(counts, size);
            CHECK_OK(
                lw_comm_allgather_segments(c, d, copy, LW_DTYPE_F32, nonblocking ? req : NULL));
            spoil_and_free(copy, size);
            CHECK_OK(lw_request_wait(req));
            to_host(h, d, sizeof(float) * (total + 1));
            int bad = 0;
            for (int64_t i = 0; i < total; i++)
                bad += h[i] != value(owner(counts, size, i), i);
            CHECK_EQ(bad, 0);
            CHECK(h[total] == -1.0f);
            lw_device_free(gpu, d);
        }
        /* bf16: the bits move untouched, displacements in two-byte elements */
        uint16_t *b = malloc(sizeof(uint16_t) * (size_t)(total + 1));
        for (int64_t i = 0; i <= total; i++)
            b[i] = i >= lo && i < hi ? bf16(value(rank, i)) : 0xffff;
        void *d = NULL;
        CHECK_OK(lw_device_alloc(gpu, sizeof(uint16_t) * (size_t)(total + 1), &d));
        CHECK_OK(lw_device_copy(gs, d, b, sizeof(uint16_t) * (total + 1), LW_COPY_HOST_TO_DEVICE));
        CHECK_OK(lw_comm_allgather_segments(c, d, counts, LW_DTYPE_BF16, req));
        CHECK_OK(lw_request_wait(req));
        CHECK_OK(lw_device_copy(gs, b, d, sizeof(uint16_t) * (total + 1), LW_COPY_DEVICE_TO_HOST));
        int bad = 0;
        for (int64_t i = 0; i < total; i++)
            bad += b[i] != bf16(value(owner(counts, size, i), i));
        CHECK_EQ(bad, 0);
        CHECK(b[total] == 0xffff);
        lw_device_free(gpu, d);
        free(b);
        free(h);
    }
    lw_request_free(req);
    free(counts);
}

/* In flight together on their own requests with an all-reduce and an equal-count
 * reduce-scatter between them, ordered after a stream of the caller's that wrote the data,
 * waited for in another order; then bad counts, refused alike on every rank. */
static void test_segments_interleaved(lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    int64_t *ca = malloc(sizeof(int64_t) * (size_t)size);
    int64_t *cb = malloc(sizeof(int64_t) * (size_t)size);
    const int64_t ta = segment_counts(0, size, ca), tb = segment_counts(5, size, cb);
    const int64_t n = 64 * (int64_t)size, lo = displ(cb, rank), hi = lo + cb[rank];
    float *ha = malloc(sizeof(float) * (size_t)ta), *hg = malloc(sizeof(float) * (size_t)tb);
    float *he = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < ta; i++)
        ha[i] = value(rank, i);
    for (int64_t i = 0; i < tb; i++)
        hg[i] = i >= lo && i < hi ? value(rank, i) : 0.0f;
    for (int64_t i = 0; i < n; i++)
        he[i] = 1.0f;
    float *a = NULL, *g = NULL, *e = to_device(he, n);
    CHECK_OK(lw_device_alloc(gpu, sizeof(float) * (size_t)ta, (void **)&a));
    CHECK_OK(lw_device_alloc(gpu, sizeof(float) * (size_t)tb, (void **)&g));
    lw_stream *s = NULL;
    CHECK_OK(lw_stream_new(gpu, &s));
    CHECK_OK(lw_device_copy(s, a, ha, sizeof(float) * ta, LW_COPY_HOST_TO_DEVICE));
    CHECK_OK(lw_device_copy(s, g, hg, sizeof(float) * tb, LW_COPY_HOST_TO_DEVICE));
    lw_request *ra, *rg, *re;
    CHECK_OK(lw_request_new(&ra));
    CHECK_OK(lw_request_new(&rg));
    CHECK_OK(lw_request_new(&re));
    CHECK_OK(lw_request_set_stream(ra, s));
    CHECK_OK(lw_request_set_stream(rg, s));
    CHECK_OK(lw_comm_reduce_scatterv(c, a, ca, ra));
    CHECK_OK(lw_comm_allgather_segments(c, g, cb, LW_DTYPE_F32, rg));
    CHECK_FAILS(lw_comm_reduce_scatterv(c, a, ca, ra), LW_ERR_STATE, "still active");
    int64_t one = 1;
    CHECK_OK(lw_comm_allreduce(c, &one, 1, LW_DTYPE_I64, LW_REDUCE_SUM));
    CHECK_EQ(one, size);
    CHECK_OK(lw_comm_reduce_scatter(c, e, n, re));
    CHECK_OK(lw_request_wait(re));
    CHECK_OK(lw_request_wait(rg));
    CHECK_OK(lw_request_wait(ra));
    to_host(ha, a, sizeof(float) * ta);
    to_host(hg, g, sizeof(float) * tb);
    to_host(he, e, sizeof(float) * n);
    CHECK_EQ(reduce_scatterv_wrong(ha, ca, rank, size), 0);
    int bad = 0;
    for (int64_t i = 0; i < tb; i++)
        bad += hg[i] != value(owner(cb, size, i), i);
    CHECK_EQ(bad, 0);
    CHECK(he[rank * 64] == (float)size && he[rank * 64 + 63] == (float)size);

    CHECK_FAILS(lw_comm_reduce_scatterv(c, a, NULL, NULL), LW_ERR_INVALID,
                "reduce-scatter-v without counts");
    ca[size - 1] = -1;
    CHECK_FAILS(lw_comm_allgather_segments(c, g, ca, LW_DTYPE_F32, NULL), LW_ERR_INVALID,
                "all-gather-segments count -1 for rank");
    CHECK_FAILS(lw_comm_allgather_segments(c, g, cb, LW_DTYPE_I64, NULL), LW_ERR_INVALID,
                "all-gather-segments of dtype 4");
    lw_request_free(ra), lw_request_free(rg), lw_request_free(re);
    lw_stream_free(s);
    lw_device_free(gpu, a), lw_device_free(gpu, g), lw_device_free(gpu, e);
    free(ha), free(hg), free(he), free(ca), free(cb);
}

/* ---- all-to-all-v: the patterns of test_comm.c on the GPU's memory ---- */


/* One exchange of pattern k: this rank's host arrays and counts (comm_cases.h) and device
 * copies of the arrays. */
typedef struct a2a {
    lw_dtype d;
    a2a_host h;
    void *d_send, *d_recv; /* the GPU's */
} a2a;

/* x's arrays to the GPU, on stream s (host-to-device copies: complete when it returns). */
static a2a a2a_make(lw_comm *c, int k, lw_dtype d, lw_stream *s) {
    a2a x = {.d = d, .h = a2a_host_make(lw_comm_rank(c), lw_comm_size(c), k, d)};
    const int64_t sb = (int64_t)a2a_size(d) * (x.h.sent + 1);
    const int64_t rb = (int64_t)a2a_size(d) * (x.h.received + 1);
    CHECK_OK(lw_device_alloc(gpu, sb, &x.d_send));
    CHECK_OK(lw_device_alloc(gpu, rb, &x.d_recv));
    CHECK_OK(lw_device_copy(s, x.d_send, x.h.send, sb, LW_COPY_HOST_TO_DEVICE));
    CHECK_OK(lw_device_copy(s, x.d_recv, x.h.recv, rb, LW_COPY_HOST_TO_DEVICE));
    return x;
}

/* Starts x's exchange on req (NULL: blocking), its counts on the heap, spoiled and freed right
 * after the call (NCCL enqueues everything during it). */
static lw_status a2a_start(lw_comm *c, a2a *x, lw_request *req) {
    const int size = lw_comm_size(c);
    int64_t *sc = counts_copy(x->h.send_counts, size), *rc = counts_copy(x->h.recv_counts, size);
    lw_status st = lw_comm_alltoallv(c, x->d_send, sc, x->d_recv, rc, x->d, req);
    spoil_and_free(sc, size);
    spoil_and_free(rc, size);
    return st;
}

/* Mismatches after the exchange completed: the device arrays back on the host, checked there. */
static int a2a_wrong(lw_comm *c, a2a *x) {
    to_host(x->h.recv, x->d_recv, (int64_t)a2a_size(x->d) * (x->h.received + 1));
    to_host(x->h.send, x->d_send, (int64_t)a2a_size(x->d) * (x->h.sent + 1));
    return a2a_host_wrong(&x->h, lw_comm_rank(c), lw_comm_size(c), x->d);
}

static void a2a_free(a2a *x) {
    lw_device_free(gpu, x->d_send), lw_device_free(gpu, x->d_recv);
    a2a_host_free(&x->h);
}

/* Every pattern in f32, i64, bf16 and f16, blocking and on a request (polled or waited for);
 * alone, NCCL's backend copies the own part on its stream. */
static void test_alltoallv(lw_comm *c) {
    const lw_dtype dtypes[4] = {LW_DTYPE_F32, LW_DTYPE_I64, LW_DTYPE_BF16, LW_DTYPE_F16};
    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    for (int k = 0; k < A2A_PATTERNS; k++) {
        for (int t = 0; t < 4; t++) {
            for (int nonblocking = 0; nonblocking < 2; nonblocking++) {
                a2a x = a2a_make(c, k, dtypes[t], gs);
                CHECK_OK(a2a_start(c, &x, nonblocking ? req : NULL));
                bool done = !nonblocking;
                while (!done && t % 2 == 0)
                    CHECK_OK(lw_request_test(req, &done));
                CHECK_OK(lw_request_wait(req));
                CHECK(!lw_request_active(req));
                const int bad = a2a_wrong(c, &x);
                if (bad)
                    fprintf(stderr, "all-to-all-v pattern %d dtype %d%s: %d wrong\n", k,
                            (int)dtypes[t], nonblocking ? " (nonblocking)" : "", bad);
                CHECK_EQ(bad, 0);
                a2a_free(&x);
            }
        }
    }
    lw_request_free(req);
}

/* In flight on their own requests behind a stream of the caller's that wrote the data, with an
 * all-reduce of host memory, a reduce-scatter and a blocking all-to-all between them, waited
 * for in another order; the counts learned first, as lw.h's pattern does it (i64 counts of the
 * GPU's memory); then host memory and bad arguments, refused; then the counters. */
static void test_alltoallv_interleaved(lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    lw_stream *s = NULL;
    CHECK_OK(lw_stream_new(gpu, &s));
    a2a x = a2a_make(c, 5, LW_DTYPE_BF16, s), y = a2a_make(c, 1, LW_DTYPE_I64, s);
    a2a z = a2a_make(c, 2, LW_DTYPE_F32, gs);
    const int64_t n = 64 * (int64_t)size;
    float *he = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        he[i] = 1.0f;
    float *e = to_device(he, n);
    lw_request *rx, *ry, *re;
    CHECK_OK(lw_request_new(&rx));
    CHECK_OK(lw_request_new(&ry));
    CHECK_OK(lw_request_new(&re));
    CHECK_OK(lw_request_set_stream(rx, s));
    CHECK_OK(lw_request_set_stream(ry, s));
    CHECK_OK(a2a_start(c, &x, rx));
    CHECK_OK(lw_comm_reduce_scatter(c, e, n, re));
    CHECK_OK(a2a_start(c, &y, ry));
    CHECK_FAILS(a2a_start(c, &y, ry), LW_ERR_STATE, "still active");
    int64_t one = 1;
    CHECK_OK(lw_comm_allreduce(c, &one, 1, LW_DTYPE_I64, LW_REDUCE_SUM));
    CHECK_EQ(one, size);
    CHECK_OK(a2a_start(c, &z, NULL));
    CHECK_OK(lw_request_wait(ry));
    CHECK_OK(lw_request_wait(re));
    CHECK_OK(lw_request_wait(rx));
    CHECK_EQ(a2a_wrong(c, &x), 0);
    CHECK_EQ(a2a_wrong(c, &y), 0);
    CHECK_EQ(a2a_wrong(c, &z), 0);
    to_host(he, e, sizeof(float) * n);
    CHECK(he[rank * 64] == (float)size && he[rank * 64 + 63] == (float)size);

    /* the receive counts learned from the send counts: one i64 per peer, on the GPU */
    int64_t *ones = malloc(sizeof(int64_t) * (size_t)size);
    int64_t *learned = malloc(sizeof(int64_t) * (size_t)size);
    for (int j = 0; j < size; j++)
        ones[j] = 1;
    int64_t *d_counts = NULL, *d_learned = NULL;
    CHECK_OK(lw_device_alloc(gpu, 8 * (int64_t)size, (void **)&d_counts));
    CHECK_OK(lw_device_alloc(gpu, 8 * (int64_t)size, (void **)&d_learned));
    CHECK_OK(lw_device_copy(gs, d_counts, x.h.send_counts, 8 * (int64_t)size,
                            LW_COPY_HOST_TO_DEVICE));
    CHECK_OK(lw_comm_alltoallv(c, d_counts, ones, d_learned, ones, LW_DTYPE_I64, NULL));
    to_host(learned, d_learned, 8 * (int64_t)size);
    int bad = 0;
    for (int j = 0; j < size; j++)
        bad += learned[j] != x.h.recv_counts[j];
    CHECK_EQ(bad, 0);

    /* host memory is the parent's business: all-to-all-v takes the GPU's only */
    CHECK_FAILS(lw_comm_alltoallv(c, x.h.send, x.h.send_counts, x.h.recv, x.h.recv_counts,
                                  LW_DTYPE_BF16, NULL),
                LW_ERR_INVALID, "all-to-all-v of host memory");
    CHECK_FAILS(lw_comm_alltoallv(c, x.d_send, x.h.send_counts, x.d_send, x.h.recv_counts,
                                  LW_DTYPE_BF16, NULL),
                LW_ERR_INVALID, "there is no in-place form");
    CHECK_FAILS(lw_comm_alltoallv(c, x.d_send, x.h.send_counts, x.d_recv, x.h.recv_counts,
                                  LW_DTYPE_F64, NULL),
                LW_ERR_INVALID, "all-to-all-v of dtype 3");
    CHECK_FAILS(lw_comm_alltoallv(c, x.d_send, NULL, x.d_recv, x.h.recv_counts, LW_DTYPE_BF16,
                                  NULL),
                LW_ERR_INVALID, "all-to-all-v without send counts");

    /* counted: the bytes sent to other ranks */
    lw_comm_counters_reset(c);
    CHECK_OK(a2a_start(c, &x, NULL));
    lw_comm_counter a2a_n;
    CHECK_OK(lw_comm_counter_get(c, LW_COMM_ALLTOALL, &a2a_n));
    CHECK_EQ(a2a_n.calls, 1);
    CHECK_EQ(a2a_n.bytes, (x.h.sent - x.h.send_counts[rank]) * 2);
    CHECK_EQ(a2a_wrong(c, &x), 0);

    lw_request_free(rx), lw_request_free(ry), lw_request_free(re);
    lw_stream_free(s);
    a2a_free(&x), a2a_free(&y), a2a_free(&z);
    lw_device_free(gpu, e), lw_device_free(gpu, d_counts), lw_device_free(gpu, d_learned);
    free(he), free(ones), free(learned);
}

static void test_allreduce(lw_comm *parent, lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    /* device memory: NCCL */
    float f[3] = {(float)rank, 1.0f, (float)(rank * rank)};
    float *df = to_device(f, 3);
    CHECK_OK(lw_comm_allreduce(c, df, 3, LW_DTYPE_F32, LW_REDUCE_SUM));
    to_host(f, df, sizeof f);
    CHECK(f[0] == size * (size - 1) / 2.0f && f[1] == (float)size);
    float m[2] = {(float)rank, -(float)rank};
    CHECK_OK(lw_device_copy(gs, df, m, sizeof m, LW_COPY_HOST_TO_DEVICE));
    CHECK_OK(lw_comm_allreduce(c, df, 2, LW_DTYPE_F32, LW_REDUCE_MAX));
    to_host(m, df, sizeof m);
    CHECK(m[0] == (float)(size - 1) && m[1] == 0.0f);
    double d[2] = {0.25 * rank, 1e-300};
    void *dd = NULL;
    CHECK_OK(lw_device_alloc(gpu, sizeof d, &dd));
    CHECK_OK(lw_device_copy(gs, dd, d, sizeof d, LW_COPY_HOST_TO_DEVICE));
    CHECK_OK(lw_comm_allreduce(c, dd, 2, LW_DTYPE_F64, LW_REDUCE_SUM));
    to_host(d, dd, sizeof d);
    CHECK(d[0] == 0.25 * size * (size - 1) / 2.0 && d[1] == 1e-300 * size);
    int64_t i[2] = {rank + 10, ((int64_t)1 << 40) + rank};
    CHECK_OK(lw_device_copy(gs, dd, i, sizeof i, LW_COPY_HOST_TO_DEVICE));
    CHECK_OK(lw_comm_allreduce(c, dd, 2, LW_DTYPE_I64, LW_REDUCE_MIN));
    to_host(i, dd, sizeof i);
    CHECK_EQ(i[0], 10);
    CHECK_EQ(i[1], (int64_t)1 << 40);
    /* the nonblocking form on a request with a stream */
    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    CHECK_OK(lw_request_set_stream(req, gs));
    float g[5];
    for (int k = 0; k < 5; k++)
        g[k] = (float)(rank + k);
    CHECK_OK(lw_device_copy(gs, df, g, sizeof(float) * 3, LW_COPY_HOST_TO_DEVICE));
    CHECK_OK(lw_comm_allreduce_start(c, df, 3, req));
    CHECK_OK(lw_request_wait(req));
    to_host(g, df, sizeof(float) * 3);
    for (int k = 0; k < 3; k++)
        CHECK(g[k] == size * (size - 1) / 2.0f + (float)(size * k));

    /* host memory: through the parent, which counts it too */
    lw_comm_counter before, after;
    CHECK_OK(lw_comm_counter_get(parent, LW_COMM_ALLREDUCE, &before));
    double norm[2] = {1.5 * (rank + 1), (double)rank};
    CHECK_OK(lw_comm_allreduce(c, norm, 2, LW_DTYPE_F64, LW_REDUCE_SUM));
    CHECK(norm[0] == 1.5 * size * (size + 1) / 2.0 && norm[1] == size * (size - 1) / 2.0);
    for (int k = 0; k < 5; k++)
        g[k] = (float)(rank + k);
    CHECK_OK(lw_comm_allreduce_start(c, g, 5, req)); /* complete when it returns */
    bool done = false;
    CHECK_OK(lw_request_test(req, &done));
    CHECK(done);
    for (int k = 0; k < 5; k++)
        CHECK(g[k] == size * (size - 1) / 2.0f + (float)(size * k));
    CHECK_OK(lw_comm_counter_get(parent, LW_COMM_ALLREDUCE, &after));
    CHECK_EQ(after.calls - before.calls, 2);
    lw_request_free(req);
    lw_device_free(gpu, df);
    lw_device_free(gpu, dd);
}

static void test_broadcast_barrier_split(lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    char text[32] = "nothing", expect[32];
    snprintf(expect, sizeof expect, "from %d", size - 1);
    if (rank == size - 1) snprintf(text, sizeof text, "from %d", size - 1);
    /* host memory: the parent's */
    CHECK_OK(lw_comm_broadcast(c, text, sizeof text, size - 1));
    CHECK(strcmp(text, expect) == 0);
    /* device memory: NCCL's */
    char *dt = NULL;
    CHECK_OK(lw_device_alloc(gpu, sizeof text, (void **)&dt));
    snprintf(text, sizeof text, "%s", rank == size - 1 ? expect : "stale");
    CHECK_OK(lw_device_copy(gs, dt, text, sizeof text, LW_COPY_HOST_TO_DEVICE));
    CHECK_OK(lw_comm_broadcast(c, dt, sizeof text, size - 1));
    CHECK_OK(lw_device_copy(gs, text, dt, sizeof text, LW_COPY_DEVICE_TO_HOST));
    CHECK(strcmp(text, expect) == 0);
    lw_device_free(gpu, dt);
    CHECK_OK(lw_comm_barrier(c));

    /* a split is the backend's split (NCCL's) and its parent's */
    lw_comm *half = NULL;
    CHECK_OK(lw_comm_split(c, rank % 2, rank, &half));
    if (half == NULL) return;
    CHECK(strcmp(lw_comm_backend(half), lw_comm_backend(c)) == 0);
    CHECK(lw_comm_reaches(half, gpu));
    CHECK_EQ(lw_comm_size(half), rank % 2 == 0 ? (size + 1) / 2 : size / 2);
    CHECK_EQ(lw_comm_rank(half), rank / 2);
    float one = 1.0f;
    float *d1 = to_device(&one, 1);
    CHECK_OK(lw_comm_allreduce(half, d1, 1, LW_DTYPE_F32, LW_REDUCE_SUM));
    to_host(&one, d1, sizeof one);
    CHECK(one == (float)lw_comm_size(half));
    int64_t n = 1;
    CHECK_OK(lw_comm_allreduce(half, &n, 1, LW_DTYPE_I64, LW_REDUCE_SUM));
    CHECK_EQ(n, lw_comm_size(half));
    CHECK_OK(lw_comm_barrier(half));
    /* freeing completes what is in flight (the request outlives the comm) */
    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    const int64_t hn = 4096 * (int64_t)lw_comm_size(half);
    float *b = NULL;
    CHECK_OK(lw_device_alloc(gpu, sizeof(float) * (size_t)hn, (void **)&b));
    CHECK_OK(lw_comm_allgather(half, b, hn, LW_DTYPE_F32, req));
    lw_comm_free(half);
    CHECK(!lw_request_active(req));
    lw_request_free(req);
    lw_device_free(gpu, b);
    lw_device_free(gpu, d1);
}

/* The blocking forms without the watchdog (waited for in the backend) and with it (a request
 * polled against the deadline); a request that served the parent serves the device comm. */
static void test_blocking_and_requests(lw_comm *parent, lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    const double timeout = lw_comm_timeout(c);
    for (int watchdog = 0; watchdog < 2; watchdog++) {
        CHECK_OK(lw_comm_set_timeout(c, watchdog ? 60.0 : 0.0));
        float f[4] = {1, 2, 3, (float)rank};
        float *d = to_device(f, 4);
        CHECK_OK(lw_comm_allreduce(c, d, 4, LW_DTYPE_F32, LW_REDUCE_SUM));
        CHECK_OK(lw_comm_broadcast(c, d, 8, 0));
        CHECK_OK(lw_comm_barrier(c));
        to_host(f, d, sizeof f);
        CHECK(f[0] == (float)size && f[2] == 3.0f * size);
        CHECK(f[3] == size * (size - 1) / 2.0f);
        lw_device_free(gpu, d);
    }
    CHECK_OK(lw_comm_set_timeout(c, timeout));

    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    float h[2] = {1.0f, 2.0f};
    CHECK_OK(lw_comm_allreduce_start(parent, h, 2, req));
    CHECK_OK(lw_request_wait(req));
    float *d = to_device(h, 2);
    CHECK_OK(lw_comm_allreduce_start(c, d, 2, req));
    CHECK_OK(lw_request_wait(req));
    to_host(h, d, sizeof h);
    CHECK(h[0] == (float)(size * size) && h[1] == 2.0f * size * size);
    /* a request's stream must be the GPU's (or the CPU's: nothing to follow) */
    lw_stream *cpu = lw_device_stream(lw_device_cpu());
    CHECK_OK(lw_request_set_stream(req, cpu));
    CHECK_OK(lw_comm_allreduce_start(c, d, 2, req));
    CHECK_OK(lw_request_wait(req));
    lw_request_free(req);
    lw_device_free(gpu, d);
}

static void test_counters(lw_comm *c) {
    const int size = lw_comm_size(c);
    lw_comm_counters_reset(c);
    float *b = NULL;
    CHECK_OK(lw_device_alloc(gpu, sizeof(float) * 256 * (size_t)size, (void **)&b));
    CHECK_OK(lw_comm_reduce_scatter(c, b, size * 256, NULL));
    CHECK_OK(lw_comm_allgather(c, b, size * 256, LW_DTYPE_F32, NULL));
    lw_comm_counter rs, ag;
    CHECK_OK(lw_comm_counter_get(c, LW_COMM_REDUCE_SCATTER, &rs));
    CHECK_OK(lw_comm_counter_get(c, LW_COMM_ALLGATHER, &ag));
    CHECK_EQ(rs.calls, 1);
    CHECK_EQ(ag.calls, 1);
    CHECK_EQ(rs.bytes, (int64_t)(size - 1) * 256 * 4);
    CHECK_EQ(ag.bytes, rs.bytes);
    CHECK(rs.seconds >= 0 && ag.seconds >= 0);
    /* the variable-count forms: as their kind, by the bucket's total alone */
    int64_t *counts = calloc((size_t)size, sizeof(int64_t));
    counts[0] = size * 256;
    lw_comm_counters_reset(c);
    CHECK_OK(lw_comm_reduce_scatterv(c, b, counts, NULL));
    CHECK_OK(lw_comm_allgather_segments(c, b, counts, LW_DTYPE_F32, NULL));
    lw_comm_counter rsv, agv;
    CHECK_OK(lw_comm_counter_get(c, LW_COMM_REDUCE_SCATTER, &rsv));
    CHECK_OK(lw_comm_counter_get(c, LW_COMM_ALLGATHER, &agv));
    CHECK_EQ(rsv.calls, 1);
    CHECK_EQ(agv.calls, 1);
    CHECK_EQ(rsv.bytes, rs.bytes);
    CHECK_EQ(agv.bytes, ag.bytes);
    free(counts);
    lw_device_free(gpu, b);
}

int main(void) {
    /* one GPU per rank, by the rank's place on its machine, unless the environment names one */
    char name[32];
    snprintf(name, sizeof name, "cuda:%d", lw_comm_local_rank() > 0 ? lw_comm_local_rank() : 0);
    if (getenv("LWOPT_TEST_DEVICE") != NULL)
        snprintf(name, sizeof name, "%s", getenv("LWOPT_TEST_DEVICE"));
    if (lw_device_get(name, &gpu) != LW_OK) {
        printf("test_device_comm: skipped: %s\n", lw_last_error());
        return 77;
    }
    gs = lw_device_stream(gpu);
    lw_comm *parent = NULL, *c = NULL;
    CHECK_OK(lw_comm_init(&parent));
    if (parent == NULL) return check_exit("test_device_comm");
    CHECK_OK(lw_comm_device_new(parent, gpu, &c));
    if (c == NULL) return check_exit_all_ranks(parent, "test_device_comm");
    test_identity(parent, c);
    test_reduce_scatter(c);
    test_allgather(c);
    test_allgatherv(c);
    test_reduce_scatterv(c);
    test_allgather_segments(c);
    test_segments_interleaved(c);
    test_alltoallv(c);
    test_alltoallv_interleaved(c);
    test_allreduce(parent, c);
    test_broadcast_barrier_split(c);
    test_blocking_and_requests(parent, c);
    test_counters(c);
    lw_comm_free(c);
    return check_exit_all_ranks(parent, "test_device_comm");
}
