/* test_comm.c: every collective against a direct computation, at whatever rank count it is
 * started with (ctest runs it alone and under mpirun -np 2 and -np 3). Each rank's data is a
 * known function of (rank, index), so every rank can compute the expected result itself. */
#include "check.h"

#include <stdlib.h>

static float value(int rank, int64_t i) { return (float)(rank + 1) * 0.5f + (float)(i % 7); }

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
