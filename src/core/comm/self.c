/* self.c: the one-rank backend. Every collective over one rank is the identity, so it
 * does no work beyond copying where the result lives elsewhere, and completes as it starts:
 * nothing ever waits, so the watchdog never fires here. */
#include "comm/comm.h"

#include <stdlib.h>
#include <string.h>

static const lwi_comm_backend self_backend;

static lw_status self_split(lw_comm *c, int32_t color, int32_t key, lw_comm **out) {
    (void)c, (void)color, (void)key;
    return lwi_comm_make(&self_backend, 0, 1, NULL, out);
}

static lw_status self_barrier(lw_comm *c, lw_request *req) {
    (void)c, (void)req;
    return LW_OK;
}

static lw_status self_broadcast(lw_comm *c, void *data, int64_t bytes, int32_t root,
                                lw_request *req) {
    (void)c, (void)data, (void)bytes, (void)root, (void)req;
    return LW_OK;
}

static lw_status self_allreduce(lw_comm *c, void *data, int64_t n, lw_dtype dtype, lw_reduce_op op,
                                lw_request *req) {
    (void)c, (void)data, (void)n, (void)dtype, (void)op, (void)req;
    return LW_OK;
}

/* The sum over one rank is its own contribution, in any dtype: nothing is rounded. */
static lw_status self_reduce_scatter(lw_comm *c, const void *send, void *recv, int64_t shard,
                                     lw_dtype dtype, lw_request *req) {
    (void)c, (void)req;
    if (shard > 0 && recv != send) memmove(recv, send, lwi_dtype_size(dtype) * (size_t)shard);
    return LW_OK;
}

/* One segment, the whole bucket, which is already this rank's sum: in place, nothing moves. */
static lw_status self_reduce_scatterv(lw_comm *c, const void *send, void *recv,
                                      const int64_t *counts, lw_dtype dtype, lw_request *req) {
    (void)c, (void)req;
    if (counts[0] > 0 && recv != send)
        memmove(recv, send, lwi_dtype_size(dtype) * (size_t)counts[0]);
    return LW_OK;
}

static lw_status self_allgather(lw_comm *c, void *bucket, int64_t shard, lw_dtype dtype,
                                lw_request *req) {
    (void)c, (void)bucket, (void)shard, (void)dtype, (void)req;
    return LW_OK;
}

/* recv is this rank's own contribution: a copy unless it is there already (in place). */
static lw_status self_allgatherv(lw_comm *c, const void *send, int64_t n, void *recv,
                                 const int64_t *counts, lw_dtype dtype, lw_request *req) {
    (void)c, (void)counts, (void)req;
    if (n > 0 && send != recv) memmove(recv, send, lwi_dtype_size(dtype) * (size_t)n);
    return LW_OK;
}

/* One peer, itself: its own part, send_counts[0] elements (recv_counts[0], checked equal), is
 * the whole exchange. comm.c copies it without the backend; this serves a caller that does not. */
static lw_status self_alltoallv(lw_comm *c, const void *send, const int64_t *send_counts,
                                void *recv, const int64_t *recv_counts, lw_dtype dtype,
                                lw_request *req) {
    (void)c, (void)recv_counts, (void)req;
    if (send_counts[0] > 0) memcpy(recv, send, lwi_dtype_size(dtype) * (size_t)send_counts[0]);
    return LW_OK;
}

static lw_status self_test(lw_request *req, bool *done) {
    (void)req;
    *done = true;
    return LW_OK;
}

static lw_status self_wait(lw_request *req) {
    (void)req;
    return LW_OK;
}

static void self_abort(lw_comm *c, int32_t code) { (void)c, (void)code; }

static void self_free(lw_comm *c) { (void)c; }

static const lwi_comm_backend self_backend = {
    .name = "self",
    .host_memory = true,
    .in_place_reduce_scatter = true,
    .split = self_split,
    .barrier = self_barrier,
    .broadcast = self_broadcast,
    .allreduce = self_allreduce,
    .reduce_scatter_start = self_reduce_scatter,
    .reduce_scatterv_start = self_reduce_scatterv,
    .allgather_start = self_allgather,
    .allgatherv = self_allgatherv,
    .alltoallv_start = self_alltoallv,
    .test = self_test,
    .wait = self_wait,
    .abort = self_abort,
    .free = self_free,
};

lw_status lwi_comm_self_world(double timeout, lw_comm **out) {
    (void)timeout; /* nothing to wait for */
    return lwi_comm_make(&self_backend, 0, 1, NULL, out);
}
