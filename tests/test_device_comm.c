/* test_device_comm.c: a device communicator (lw_comm_device_new over the world) on this rank's
 * device: the cases of comm_cases.h on the device's memory, as test_comm.c runs them on host
 * memory, run alone (one rank, over the self communicator: the collectives still run) or under
 * mpirun; then what only a device communicator has: the backend chosen and why, the ranks'
 * agreement on the kind, host memory refused by the buffers' collectives and taken through the
 * parent by the others, a collective ordered after a stream of the caller's, and requests that
 * move between the parent and the device communicator. Which communicator it gets is the
 * library's choice, checked against the environment's expectation:
 *   LWOPT_TEST_DEVICE  the device (default cuda:<local rank>: a GPU per rank); cuda:0 for ranks
 *                      that share one GPU;
 *   LWOPT_TEST_COMM    the backend expected ("nccl", "staged"; default: either);
 *   LWOPT_TEST_ABOUT   words lw_comm_about must hold (why that backend).
 * On a GPU: NCCL alone, staged alone (LWOPT_DEVICE_COMM=staged), staged for ranks sharing the
 * GPU. Without one, over the fake device library (LWOPT_CUDA_LIB: host memory behind the device
 * table, no NCCL): the staged communicator at 1 to 3 ranks, sharing one device or not.
 * Skips (exit 77) when no device can be had, saying why. */
#include "comm_cases.h"

#include <stdlib.h>

static lw_device *gpu;

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

/* The buffers' collectives take the device's memory only (host memory is the parent's
 * business), refused alike on every rank before anything moves. */
static void test_host_memory_refused(lw_comm *c) {
    const int size = lw_comm_size(c);
    int64_t *counts = malloc(sizeof(int64_t) * (size_t)size);
    const int64_t total = segment_counts(0, size, counts);
    float *host = calloc((size_t)(total + 4 * size), sizeof(float));
    CHECK_FAILS(lw_comm_reduce_scatter(c, host, 4 * size, LW_DTYPE_F32, NULL), LW_ERR_INVALID,
                "reduce-scatter of host memory");
    CHECK_FAILS(lw_comm_allgather(c, host, 4 * size, LW_DTYPE_F32, NULL), LW_ERR_INVALID,
                "all-gather of host memory");
    CHECK_FAILS(lw_comm_reduce_scatterv(c, host, counts, LW_DTYPE_F32, NULL), LW_ERR_INVALID,
                "reduce-scatter-v of host memory");
    CHECK_FAILS(lw_comm_allgather_segments(c, host, counts, LW_DTYPE_F32, NULL), LW_ERR_INVALID,
                "of host memory");
    const mem_kind h = mem_host();
    a2a x = a2a_make(&h, c, 5, LW_DTYPE_BF16, NULL);
    CHECK_FAILS(
        lw_comm_alltoallv(c, x.send, x.send_counts, x.recv, x.recv_counts, LW_DTYPE_BF16, NULL),
        LW_ERR_INVALID, "all-to-all-v of host memory");
    a2a_free(&h, &x);
    free(host), free(counts);
}

/* All-gather-v into a separate buffer (legacy mode's), ordered after a large copy on the
 * communicator's stream that writes what it sends: without the ordering it would send the zeros
 * before. */
static void test_allgatherv_after_stream(const mem_kind *m, lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    int64_t *counts = malloc(sizeof(int64_t) * (size_t)size);
    const int64_t total = gatherv_counts(size, 1000, counts);
    const int64_t big = 1 << 24; /* 64 MiB: the copy takes long enough to lose a race */
    float *h = values_in(rank, big, 0, 0, 0.0f);
    for (int64_t i = 0; i < counts[rank]; i++)
        h[big - counts[rank] + i] = value(rank, i);
    float *staged = mem_upload(m, h, 4 * big), *sendbuf = mem_alloc(m, 4 * big);
    float *recv = mem_alloc(m, 4 * (total + 1));
    lw_stream *s = mem_stream_new(m);
    CHECK_OK(lw_device_copy(s, sendbuf, staged, 4 * big, LW_COPY_DEVICE_TO_DEVICE));
    CHECK_OK(lw_comm_set_stream(c, s));
    CHECK_OK(lw_comm_allgatherv(c, sendbuf + big - counts[rank], counts[rank], recv, counts,
                                LW_DTYPE_F32));
    CHECK_OK(lw_comm_set_stream(c, NULL));
    mem_get(m, h, recv, 4 * total);
    CHECK_EQ(gatherv_wrong(h, counts, size), 0);
    lw_stream_free(s);
    mem_free(m, staged), mem_free(m, sendbuf), mem_free(m, recv);
    free(h), free(counts);
}

/* All-reduce and broadcast of host memory go through the parent, which counts them; its
 * nonblocking all-reduce (f32 and bf16) is complete when it returns. */
static void test_host_memory_through_parent(lw_comm *parent, lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    lw_comm_counter before, after;
    CHECK_OK(lw_comm_counter_get(parent, LW_COMM_ALLREDUCE, &before));
    double norm[2] = {1.5 * (rank + 1), (double)rank};
    CHECK_OK(lw_comm_allreduce(c, norm, 2, LW_DTYPE_F64, LW_REDUCE_SUM));
    CHECK(norm[0] == 1.5 * size * (size + 1) / 2.0 && norm[1] == size * (size - 1) / 2.0);
    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    CHECK_OK(lw_request_set_stream(req, lw_device_stream(gpu)));
    float g[5];
    for (int k = 0; k < 5; k++)
        g[k] = (float)(rank + k);
    CHECK_OK(lw_comm_allreduce_start(c, g, 5, LW_DTYPE_F32, req));
    bool done = false;
    CHECK_OK(lw_request_test(req, &done));
    CHECK(done);
    for (int k = 0; k < 5; k++)
        CHECK(g[k] == size * (size - 1) / 2.0f + (float)(size * k));
    /* bf16 too, through the parent's blocking sum: 1, 2, and 1 + 2^-8 over 2 ranks */
    uint16_t hb[3] = {0x3f80, 0x4000, (uint16_t)(rank == 0 ? 0x3f80 : 0x3b80)};
    CHECK_OK(lw_comm_allreduce_start(c, hb, 3, LW_DTYPE_BF16, req));
    CHECK_OK(lw_request_test(req, &done));
    CHECK(done);
    CHECK(hb[0] == bf16_bits_of((float)size) && hb[1] == bf16_bits_of(2.0f * size));
    CHECK(size != 2 || hb[2] == 0x3f80); /* 1 + 2^-8: a tie, to even */
    CHECK_OK(lw_comm_counter_get(parent, LW_COMM_ALLREDUCE, &after));
    CHECK_EQ(after.calls - before.calls, 3);
    lw_request_free(req);
    char text[32] = "nothing", expect[32];
    snprintf(expect, sizeof expect, "from %d", size - 1);
    if (rank == size - 1) snprintf(text, sizeof text, "%s", expect);
    CHECK_OK(lw_comm_broadcast(c, text, sizeof text, size - 1));
    CHECK(strcmp(text, expect) == 0);
}

/* A request that served the parent serves the device communicator; a request's stream must be
 * the device's or the CPU's (nothing to follow). */
static void test_requests_across(const mem_kind *m, lw_comm *parent, lw_comm *c) {
    const int size = lw_comm_size(c);
    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    float h[2] = {1.0f, 2.0f};
    CHECK_OK(lw_comm_allreduce_start(parent, h, 2, LW_DTYPE_F32, req));
    CHECK_OK(lw_request_wait(req));
    float *d = mem_upload(m, h, sizeof h);
    CHECK_OK(lw_comm_allreduce_start(c, d, 2, LW_DTYPE_F32, req));
    CHECK_OK(lw_request_wait(req));
    mem_get(m, h, d, sizeof h);
    CHECK(h[0] == (float)(size * size) && h[1] == 2.0f * size * size);
    CHECK_OK(lw_request_set_stream(req, lw_device_stream(lw_device_cpu())));
    CHECK_OK(lw_comm_allreduce_start(c, d, 2, LW_DTYPE_F32, req));
    CHECK_OK(lw_request_wait(req));
    lw_request_free(req);
    mem_free(m, d);
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
    lw_comm *parent = NULL, *c = NULL;
    CHECK_OK(lw_comm_init(&parent));
    if (parent == NULL) return check_exit("test_device_comm");
    CHECK_OK(lw_comm_device_new(parent, gpu, &c));
    if (c == NULL) return check_exit_all_ranks(parent, "test_device_comm");
    test_identity(parent, c);
    const mem_kind dev = mem_device(gpu);
    comm_cases_run(&dev, c);
    test_host_memory_refused(c);
    test_allgatherv_after_stream(&dev, c);
    test_host_memory_through_parent(parent, c);
    test_requests_across(&dev, parent, c);
    lw_comm_free(c);
    return check_exit_all_ranks(parent, "test_device_comm");
}
