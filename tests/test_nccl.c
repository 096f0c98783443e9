/* test_nccl.c: the NCCL communicator (lw_comm_device_new over the world) on this rank's GPU,
 * every collective against a direct computation, as test_comm.c does on host memory: run alone
 * (one rank, over the self communicator: NCCL still runs every collective) or under mpirun with a
 * GPU per rank. Also requests with test / wait and a stream, the ordering after a stream, host
 * memory through the parent, split, counters, the blocking forms with the watchdog on and off.
 * Skips (exit 77) when no GPU can be had, saying why. */
#include "check.h"

#include <stdlib.h>

static lw_device *gpu;
static lw_stream *gs; /* the GPU's default stream, for the copies */

static float value(int rank, int64_t i) { return (float)(rank + 1) * 0.5f + (float)(i % 7); }

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

static void test_identity(lw_comm *parent, lw_comm *c) {
    CHECK(strcmp(lw_comm_backend(c), "nccl") == 0);
    CHECK_EQ(lw_comm_rank(c), lw_comm_rank(parent));
    CHECK_EQ(lw_comm_size(c), lw_comm_size(parent));
    CHECK(lw_comm_reaches(c, gpu));
    CHECK(lw_comm_reaches(c, lw_device_cpu()));
    CHECK(!lw_comm_reaches(parent, gpu));
    CHECK(lw_comm_timeout(c) == lw_comm_timeout(parent));
    /* a device communicator is no parent for another */
    lw_comm *again = (lw_comm *)1;
    CHECK_FAILS(lw_comm_device_new(c, gpu, &again), LW_ERR_INVALID,
                "'nccl' is a device communicator already");
    CHECK(again == NULL);
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

    /* a split is NCCL's split and its parent's */
    lw_comm *half = NULL;
    CHECK_OK(lw_comm_split(c, rank % 2, rank, &half));
    if (half == NULL) return;
    CHECK(strcmp(lw_comm_backend(half), "nccl") == 0);
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
    lw_device_free(gpu, b);
}

int main(void) {
    /* one GPU per rank, by the rank's place on its machine */
    char name[32];
    snprintf(name, sizeof name, "cuda:%d", lw_comm_local_rank() > 0 ? lw_comm_local_rank() : 0);
    if (lw_device_get(name, &gpu) != LW_OK) {
        printf("test_nccl: skipped: %s\n", lw_last_error());
        return 77;
    }
    gs = lw_device_stream(gpu);
    lw_comm *parent = NULL, *c = NULL;
    CHECK_OK(lw_comm_init(&parent));
    if (parent == NULL) return check_exit("test_nccl");
    CHECK_OK(lw_comm_device_new(parent, gpu, &c));
    if (c == NULL) return check_exit_all_ranks(parent, "test_nccl");
    test_identity(parent, c);
    test_reduce_scatter(c);
    test_allgather(c);
    test_allgatherv(c);
    test_allreduce(parent, c);
    test_broadcast_barrier_split(c);
    test_blocking_and_requests(parent, c);
    test_counters(c);
    lw_comm_free(c);
    return check_exit_all_ranks(parent, "test_nccl");
}
