/* comm.c: the communicator object: its collectives, each its argument checks (checks.c) and one
 * run of the shared skeleton (claim, stamp, the one-rank shortcut, start, count, and for the
 * blocking forms a start and a wait, so the watchdog sees every wait), over a backend (self.c:
 * one rank; mpi.c: MPI). Requests (testing, waiting, letting go) are in request.c. The watchdog
 * itself is in watchdog.c; which backend serves the world, in world.c. */
#include "comm/comm.h"

#include <stdlib.h>
#include <string.h>

lw_status lwi_comm_make(const lwi_comm_backend *backend, int32_t rank, int32_t size, void *impl,
                        lw_comm **out) {
    lw_comm *c = calloc(1, sizeof *c);
    if (c == NULL) return lwi_fail(LW_ERR_NOMEM, "comm: out of memory");
    c->backend = backend;
    c->rank = rank;
    c->size = size;
    c->impl = impl;
    c->timeout = 600.0;
    lw_status st = lw_request_new(&c->blocking);
    if (st != LW_OK) {
        free(c);
        return st;
    }
    *out = c;
    return LW_OK;
}

void lw_comm_free(lw_comm *c) {
    if (c == NULL) return;
    /* collectives still in flight finish first: their requests may outlive the comm (on a
     * broken comm each wait fails at once and lets its request go) */
    while (c->active != NULL) lw_request_wait(c->active);
    lw_request_free(c->blocking);
    c->backend->free(c);
    free(c);
}

int32_t lw_comm_rank(const lw_comm *c) { return c ? c->rank : -1; }

lw_status lw_comm_set_stream(lw_comm *c, lw_stream *stream) {
    if (c == NULL) return lwi_fail(LW_ERR_INVALID, "comm: communicator is NULL");
    c->stream = stream;
    return LW_OK;
}

lw_stream *lw_comm_stream(const lw_comm *c) { return c ? lwi_stream_or_cpu(c->stream) : NULL; }

bool lw_comm_reaches(const lw_comm *c, const lw_device *device) {
    return c != NULL && device != NULL && (lw_device_is_host(device) || c->device == device);
}

int32_t lw_comm_size(const lw_comm *c) { return c ? c->size : 0; }
const char *lw_comm_backend(const lw_comm *c) { return c ? c->backend->name : "none"; }

/* Collectives check the comm is there and not broken by an earlier timeout: after one, a
 * collective would only wait for the stopped rank again. */
static lw_status check_comm(const lw_comm *c) {
    if (c == NULL) return lwi_fail(LW_ERR_INVALID, "comm: communicator is NULL");
    return lwi_comm_check_broken(c);
}

static void count(lw_comm *c, lw_comm_op op, double bytes, double since) {
    c->counters[op].calls++;
    c->counters[op].bytes += (int64_t)bytes;
    c->counters[op].seconds += lwi_now() - since;
}

/* One rank's collectives are the identity, done here without the backend on host memory. A
 * device backend still runs them: all-gather-v must copy device memory, and its requests complete
 * with the device's work, so that one GPU runs the code that many do. */
static bool alone(const lw_comm *c) { return c->size == 1 && c->backend->host_memory; }


/* Takes req for a collective of c, which starts after the work issued so far on its stream: a
 * backend that moves host memory waits for the stream (on the CPU, a no-op). A request used
 * before on another backend (MPI, then NCCL) drops that backend's handle, which this one would
 * misread. */
static lw_status claim(lw_comm *c, lw_request *req) {
    if (req->comm != NULL)
        return lwi_fail(LW_ERR_STATE, "comm: request is still active; wait for it first");
    if (req->handle != NULL && req->handle_backend != c->backend) lwi_request_drop_handle(req);
    req->handle_backend = c->backend;
    return c->backend->host_memory ? lw_stream_synchronize(req->stream ? req->stream : c->stream)
                                   : LW_OK;
}

/* Numbers the collective about to start on req and records what the watchdog's message names:
 * its size, its label (the comm's one-shot label, if set) and the comm's phase. */
static void stamp(lw_comm *c, lw_request *req, lw_comm_op op, int64_t bytes) {
    req->op = op;
    req->seq = ++c->seq;
    req->bytes = bytes;
    memcpy(req->once, c->next_label, sizeof req->once);
    c->next_label[0] = '\0';
    memcpy(req->phase, c->phase, sizeof req->phase);
    req->copy_to = NULL;
    req->copy_bytes = 0;
}

/* Marks req in flight on c since `started` (after a successful start). */
static void activate(lw_comm *c, lw_request *req, double started) {
    req->comm = c;
    req->started = started;
    req->prev_active = NULL;
    req->next_active = c->active;
    if (c->active != NULL) c->active->prev_active = req;
    c->active = req;
}

/* MPI counts are int: the blocking forms move larger buffers in pieces. */
#define CHUNK_BYTES ((int64_t)1 << 30)

/* A collective's arguments for its backend call, which reads the fields it takes. */
typedef struct coll_args {
    void *data;   /* the buffer (broadcast, all-reduce) or bucket (the sums, the all-gathers) */
    int64_t n;    /* of data: bytes (broadcast), elements (all-reduce); this rank's elements */
    int64_t at;   /* the sums, the all-gather of segments: this rank's part of data, in elements */
    const void *send; /* all-gather-v, all-to-all-v */
    int64_t send_count;
    void *recv;
    const int64_t *counts;      /* one per rank: the segments, or all-to-all-v's send counts */
    const int64_t *recv_counts; /* all-to-all-v's */
    lw_dtype dtype;
    lw_reduce_op reduce;
    int32_t root;
} coll_args;

/* A collective, checked, as run() runs it. */
typedef struct collective {
    lw_comm_op op;  /* its counters, and its name in the watchdog's message */
    int64_t bytes;  /* its payload, as the watchdog's message names it */
    double counted; /* the bytes its counter adds: what this rank sends */
    /* starts it on the backend, on r (NULL: the backend's blocking call) */
    lw_status (*call)(lw_comm *c, const coll_args *a, lw_request *r);
    coll_args args;
    bool blocking_call; /* the backend has a blocking call, which the blocking form takes when
                           the watchdog is off (barrier, broadcast, all-reduce, all-gather-v) */
    int64_t chunk;      /* the blocking form moves args.n in pieces of chunk units of elem bytes
                           (args.data advancing), one blocking collective each; 0: one call */
    int64_t elem;
    bool empty; /* it moves nothing on any rank (alike on all: the counts are the same): no call */
    /* one rank on host memory: the copy that is the whole result; nothing without bytes */
    const void *alone_from;
    void *alone_to;
    int64_t alone_bytes;
} collective;

/* Every collective after its checks: claims req (NULL: the blocking form, on the comm's own
 * request), numbers and stamps it, starts it on the backend (unless one rank has the result
 * alone), counts it, and in the blocking form waits for it under the watchdog, before counting
 * so that the counter's seconds hold the wait. */
static lw_status run(lw_comm *c, const collective *k, lw_request *req) {
    lw_request *r = req ? req : c->blocking;
    lw_status st = claim(c, r);
    if (st != LW_OK) return st;
    double t = lwi_now();
    stamp(c, r, k->op, k->bytes);
    if (alone(c)) {
        if (k->alone_bytes > 0 && k->alone_to != k->alone_from)
            memmove(k->alone_to, k->alone_from, (size_t)k->alone_bytes);
    } else if (!k->empty) {
        lw_request *on = req != NULL || !k->blocking_call || c->timeout > 0 ? r : NULL;
        const int64_t chunk = req == NULL ? k->chunk : 0;
        coll_args a = k->args;
        double started = t;
        int64_t off = 0;
        do {
            if (chunk > 0) {
                a.data = (char *)k->args.data + off * k->elem;
                a.n = k->args.n - off < chunk ? k->args.n - off : chunk;
            }
            st = k->call(c, &a, on);
            if (st == LW_OK && on != NULL) {
                activate(c, on, started);
                if (req == NULL) st = lwi_request_finish(on);
            }
            off += chunk;
            started = lwi_now();
        } while (st == LW_OK && chunk > 0 && off < k->args.n);
    }
    count(c, k->op, k->counted, t);
    return st;
}

lw_status lw_comm_split(lw_comm *c, int32_t color, int32_t key, lw_comm **out) {
    lw_status st = check_comm(c);
    if (st != LW_OK) return st;
    if (out == NULL) return lwi_fail(LW_ERR_INVALID, "comm: out pointer is NULL");
    if (color < 0) return lwi_fail(LW_ERR_INVALID, "comm: split color must be >= 0, got %d", color);
    *out = NULL;
    st = c->backend->split(c, color, key, out);
    if (st == LW_OK) {
        (*out)->timeout = c->timeout;
        (*out)->device = c->device;
    }
    return st;
}

static lw_status call_barrier(lw_comm *c, const coll_args *a, lw_request *r) {
    (void)a;
    return c->backend->barrier(c, r);
}

lw_status lw_comm_barrier(lw_comm *c) {
    lw_status st = check_comm(c);
    if (st != LW_OK) return st;
    const collective k = {.op = LW_COMM_BARRIER, .call = call_barrier, .blocking_call = true};
    return run(c, &k, NULL);
}

static lw_status call_broadcast(lw_comm *c, const coll_args *a, lw_request *r) {
    return c->backend->broadcast(c, a->data, a->n, a->root, r);
}

lw_status lw_comm_broadcast(lw_comm *c, void *data, int64_t bytes, int32_t root) {
    lw_status st = check_comm(c);
    if (st != LW_OK) return st;
    if (bytes < 0 || (bytes > 0 && data == NULL))
        return lwi_fail(LW_ERR_INVALID, "comm: broadcast of %lld bytes from %p", (long long)bytes,
                        data);
    if (root < 0 || root >= c->size)
        return lwi_fail(LW_ERR_INVALID, "comm: broadcast root %d outside [0, %d)", root, c->size);
    const collective k = {.op = LW_COMM_BROADCAST, .bytes = bytes,
                          .counted = c->rank == root ? (double)bytes : 0, .call = call_broadcast,
                          .args = {.data = data, .n = bytes, .root = root},
                          .blocking_call = true, .chunk = CHUNK_BYTES, .elem = 1,
                          .empty = bytes == 0};
    return run(c, &k, NULL);
}

static lw_status call_allreduce(lw_comm *c, const coll_args *a, lw_request *r) {
    return c->backend->allreduce(c, a->data, a->n, a->dtype, a->reduce, r);
}

lw_status lw_comm_allreduce(lw_comm *c, void *data, int64_t n, lw_dtype dtype, lw_reduce_op op) {
    lw_status st = check_comm(c);
    if (st != LW_OK) return st;
    if (op < LW_REDUCE_SUM || op > LW_REDUCE_MIN)
        return lwi_fail(LW_ERR_INVALID, "comm: unknown reduce op %d", (int)op);
    if (dtype == LW_DTYPE_BF16 && op != LW_REDUCE_SUM)
        return lwi_fail(LW_ERR_INVALID, "comm: all-reduce of dtype %d (bf16) with op %s; bf16 "
                        "takes the sum only", (int)dtype, lw_reduce_op_name(op));
    if (dtype != LW_DTYPE_F32 && dtype != LW_DTYPE_F64 && dtype != LW_DTYPE_I64 &&
        dtype != LW_DTYPE_BF16)
        return lwi_fail(LW_ERR_INVALID, "comm: all-reduce of dtype %d (%s); it takes f32, f64 "
                        "or i64, and bf16 for a sum", (int)dtype, lwi_comm_dtype_word(dtype));
    if (n < 0 || (n > 0 && data == NULL))
        return lwi_fail(LW_ERR_INVALID, "comm: all-reduce of %lld elements at %p", (long long)n,
                        data);
    const int64_t size = (int64_t)lwi_dtype_size(dtype);
    const collective k = {
        .op = LW_COMM_ALLREDUCE, .bytes = n * size,
        .counted = 2.0 * (double)(c->size - 1) / c->size * (double)(n * size),
        .call = call_allreduce, .args = {.data = data, .n = n, .dtype = dtype, .reduce = op},
        .blocking_call = true, .chunk = CHUNK_BYTES / 8, .elem = size, .empty = n == 0};
    return run(c, &k, NULL);
}

lw_status lw_comm_allreduce_start(lw_comm *c, void *data, int64_t n, lw_dtype dtype,
                                  lw_request *req) {
    lw_status st = check_comm(c);
    if (st != LW_OK || (st = lwi_comm_check_sum_dtype(dtype, "all-reduce")) != LW_OK) return st;
    if (req == NULL) return lwi_fail(LW_ERR_INVALID, "comm: all-reduce start without a request");
    if (n < 0 || (n > 0 && data == NULL))
        return lwi_fail(LW_ERR_INVALID, "comm: all-reduce of %lld elements at %p", (long long)n,
                        data);
    const int64_t bytes = n * (int64_t)lwi_dtype_size(dtype);
    const collective k = {
        .op = LW_COMM_ALLREDUCE, .bytes = bytes,
        .counted = 2.0 * (double)(c->size - 1) / c->size * (double)bytes, .call = call_allreduce,
        .args = {.data = data, .n = n, .dtype = dtype, .reduce = LW_REDUCE_SUM}};
    return run(c, &k, req);
}

/* Where rank's segment starts: the sum of counts[0..rank). */
static int64_t displacement(const int64_t *counts, int32_t rank) {
    int64_t at = 0;
    for (int32_t r = 0; r < rank; r++)
        at += counts[r];
    return at;
}

/* Bytes a rank sends in a ring reduce-scatter or all-gather of a bucket of `bytes`: (p - 1) / p
 * of it (nccl-tests' bus volume), whatever the sizes of the shards or segments, so that a padded
 * layout's syncs and an unpadded one's count by the same rule. */
static double ring_bytes(const lw_comm *c, double bytes) {
    return (double)(c->size - 1) / c->size * bytes;
}

/* Starts the sum over the ranks of bucket (elements of dtype) on r, this rank's result being
 * bucket[at, at + n): in place on a backend that can, else into r's scratch, copied there on
 * completion (MPI forbids overlapping send and receive buffers). counts: the segments'
 * (reduce-scatter-v); NULL: equal shards of n. */
static lw_status start_sum(lw_comm *c, lw_request *r, void *bucket, int64_t at, int64_t n,
                           const int64_t *counts, lw_dtype dtype) {
    const int64_t size = (int64_t)lwi_dtype_size(dtype);
    void *recv = (char *)bucket + at * size;
    if (!c->backend->in_place_reduce_scatter) {
        /* never a NULL result buffer, even for nothing */
        const int64_t need = n > 0 ? n * size : size;
        if (need > r->scratch_capacity) {
            void *grown = realloc(r->scratch, (size_t)need);
            if (grown == NULL)
                return lwi_fail(LW_ERR_NOMEM, "comm: out of memory for a scratch shard of %lld "
                                "bytes", (long long)need);
            r->scratch = grown;
            r->scratch_capacity = need;
        }
        r->copy_to = recv;
        r->copy_bytes = n * size;
        recv = r->scratch;
    }
    return counts ? c->backend->reduce_scatterv_start(c, bucket, recv, counts, dtype, r)
                  : c->backend->reduce_scatter_start(c, bucket, recv, n, dtype, r);
}

/* The sums' backend call (reduce-scatter, reduce-scatter-v), through start_sum. */
static lw_status call_sum(lw_comm *c, const coll_args *a, lw_request *r) {
    return start_sum(c, r, a->data, a->at, a->n, a->counts, a->dtype);
}

/* The checks of a collective over equal shards, in order: the communicator, the bucket, the
 * dtype (a sum's, or a gather's). */
static lw_status check_shards(lw_comm *c, const void *bucket, int64_t n, lw_dtype dtype, bool sum,
                              const char *what) {
    lw_status st = check_comm(c);
    if (st == LW_OK) st = lwi_comm_check_bucket(c, bucket, n, what);
    if (st == LW_OK)
        st = sum ? lwi_comm_check_sum_dtype(dtype, what) : lwi_comm_check_gather_dtype(dtype, what);
    return st;
}

lw_status lw_comm_reduce_scatter(lw_comm *c, void *bucket, int64_t n, lw_dtype dtype,
                                 lw_request *req) {
    lw_status st = check_shards(c, bucket, n, dtype, true, "reduce-scatter");
    if (st != LW_OK) return st;
    const int64_t shard = n / c->size, bytes = n * (int64_t)lwi_dtype_size(dtype);
    /* over one rank the sum is the bucket itself */
    const collective k = {
        .op = LW_COMM_REDUCE_SCATTER, .bytes = bytes, .counted = ring_bytes(c, (double)bytes),
        .call = call_sum,
        .args = {.data = bucket, .at = (int64_t)c->rank * shard, .n = shard, .dtype = dtype}};
    return run(c, &k, req);
}

/* The checks of a collective over segments, in order: the communicator, the dtype (a sum's, or
 * a gather's), the counts and the bucket; [out] *total the elements. */
static lw_status check_segmented(lw_comm *c, const void *bucket, const int64_t *counts,
                                 lw_dtype dtype, bool sum, const char *what, int64_t *total) {
    lw_status st = check_comm(c);
    if (st == LW_OK)
        st = sum ? lwi_comm_check_sum_dtype(dtype, what) : lwi_comm_check_gather_dtype(dtype, what);
    if (st == LW_OK) st = lwi_comm_check_segments(c, bucket, counts, what, total);
    return st;
}

lw_status lw_comm_reduce_scatterv(lw_comm *c, void *bucket, const int64_t *counts,
                                  lw_dtype dtype, lw_request *req) {
    int64_t total = 0;
    lw_status st = check_segmented(c, bucket, counts, dtype, true, "reduce-scatter-v", &total);
    if (st != LW_OK) return st;
    const int64_t bytes = total * (int64_t)lwi_dtype_size(dtype);
    /* over one rank the sum is the bucket itself; an empty bucket has nothing to sum (every
     * rank skips it alike: the counts are the same on all) */
    const collective k = {
        .op = LW_COMM_REDUCE_SCATTER, .bytes = bytes, .counted = ring_bytes(c, (double)bytes),
        .call = call_sum,
        .args = {.data = bucket, .at = displacement(counts, c->rank), .n = counts[c->rank],
                 .counts = counts, .dtype = dtype},
        .empty = total == 0};
    return run(c, &k, req);
}

static lw_status call_allgather(lw_comm *c, const coll_args *a, lw_request *r) {
    return c->backend->allgather_start(c, a->data, a->n, a->dtype, r);
}

lw_status lw_comm_allgather(lw_comm *c, void *bucket, int64_t n, lw_dtype dtype,
                            lw_request *req) {
    lw_status st = check_shards(c, bucket, n, dtype, false, "all-gather");
    if (st != LW_OK) return st;
    /* one shard: every rank already has it */
    const collective k = {
        .op = LW_COMM_ALLGATHER, .bytes = n * (int64_t)lwi_dtype_size(dtype),
        .counted = ring_bytes(c, (double)n * lwi_dtype_size(dtype)), .call = call_allgather,
        .args = {.data = bucket, .n = n / c->size, .dtype = dtype}};
    return run(c, &k, req);
}

/* The all-gather of segments, in place: this rank sends its own segment of the bucket. */
static lw_status call_segments(lw_comm *c, const coll_args *a, lw_request *r) {
    const char *mine = (const char *)a->data + a->at * (int64_t)lwi_dtype_size(a->dtype);
    return c->backend->allgatherv(c, mine, a->n, a->data, a->counts, a->dtype, r);
}

lw_status lw_comm_allgather_segments(lw_comm *c, void *bucket, const int64_t *counts,
                                     lw_dtype dtype, lw_request *req) {
    int64_t total = 0;
    lw_status st = check_segmented(c, bucket, counts, dtype, false, "all-gather-segments", &total);
    if (st != LW_OK) return st;
    const int64_t size = (int64_t)lwi_dtype_size(dtype);
    /* one rank has every segment already; an empty bucket has none (alike on every rank) */
    const collective k = {
        .op = LW_COMM_ALLGATHER, .bytes = total * size,
        .counted = ring_bytes(c, (double)total * (double)size), .call = call_segments,
        .args = {.data = bucket, .at = displacement(counts, c->rank), .n = counts[c->rank],
                 .counts = counts, .dtype = dtype},
        .empty = total == 0};
    return run(c, &k, req);
}

static lw_status call_allgatherv(lw_comm *c, const coll_args *a, lw_request *r) {
    return c->backend->allgatherv(c, a->send, a->send_count, a->recv, a->counts, a->dtype, r);
}

lw_status lw_comm_allgatherv(lw_comm *c, const void *send, int64_t send_count, void *recv,
                             const int64_t *counts, lw_dtype dtype) {
    int64_t total = 0;
    lw_status st = check_comm(c);
    if (st != LW_OK || (st = lwi_comm_sum_counts(c, counts, "all-gather-v", "", &total)) != LW_OK)
        return st;
    if (send_count != counts[c->rank])
        return lwi_fail(LW_ERR_INVALID, "comm: all-gather-v sends %lld but counts[%d] is %lld",
                        (long long)send_count, c->rank, (long long)counts[c->rank]);
    if ((st = lwi_comm_check_gather_dtype(dtype, "all-gather-v")) != LW_OK) return st;
    const int64_t size = (int64_t)lwi_dtype_size(dtype);
    if ((send_count > 0 && send == NULL) || (total > 0 && recv == NULL))
        return lwi_fail(LW_ERR_INVALID, "comm: all-gather-v with a NULL buffer");
    /* one rank: its own contribution is the result */
    const collective k = {
        .op = LW_COMM_ALLGATHERV, .bytes = total * size,
        .counted = (double)((total - send_count) * size), .call = call_allgatherv,
        .args = {.send = send, .send_count = send_count, .recv = recv, .counts = counts,
                 .dtype = dtype},
        .blocking_call = true, .alone_from = send, .alone_to = recv,
        .alone_bytes = size * send_count};
    return run(c, &k, NULL);
}

static lw_status call_alltoallv(lw_comm *c, const coll_args *a, lw_request *r) {
    return c->backend->alltoallv_start(c, a->send, a->counts, a->recv, a->recv_counts, a->dtype,
                                       r);
}

lw_status lw_comm_alltoallv(lw_comm *c, const void *send, const int64_t *send_counts, void *recv,
                            const int64_t *recv_counts, lw_dtype dtype, lw_request *req) {
    int64_t sent = 0, received = 0;
    lw_status st = check_comm(c);
    if (st != LW_OK || (st = lwi_comm_check_alltoallv(c, send, send_counts, recv, recv_counts,
                                                      dtype, &sent, &received)) != LW_OK)
        return st;
    const int64_t size = (int64_t)lwi_dtype_size(dtype), own = send_counts[c->rank];
    /* one rank (host memory): its own part is the whole exchange; otherwise every rank starts
     * it, even with nothing to move: its peers' counts may not be 0 */
    const collective k = {
        .op = LW_COMM_ALLTOALL, .bytes = sent * size,
        .counted = (double)(sent - own) * (double)size, .call = call_alltoallv,
        .args = {.send = send, .counts = send_counts, .recv = recv, .recv_counts = recv_counts,
                 .dtype = dtype},
        .alone_from = send, .alone_to = recv, .alone_bytes = own * size};
    return run(c, &k, req);
}

lw_status lw_comm_abort(lw_comm *c, int32_t code) {
    if (c == NULL) return lwi_fail(LW_ERR_INVALID, "comm: communicator is NULL");
    c->backend->abort(c, code);
    return LW_OK;
}

lw_status lw_comm_counter_get(const lw_comm *c, lw_comm_op op, lw_comm_counter *out) {
    if (c == NULL) return lwi_fail(LW_ERR_INVALID, "comm: communicator is NULL");
    if (op < 0 || op >= LWI_COMM_OPS || out == NULL)
        return lwi_fail(LW_ERR_INVALID, "comm: unknown counter %d", (int)op);
    *out = c->counters[op];
    return LW_OK;
}

void lw_comm_counters_reset(lw_comm *c) {
    if (c != NULL) memset(c->counters, 0, sizeof c->counters);
}
