/* staged.c: the staged device communicator. A collective on a device's memory copies what it
 * sends to host memory, runs the parent's collective there (MPI), and copies the result back.
 * It serves where the device library's own communicator cannot: ranks that share one GPU (NCCL
 * takes one rank per GPU), a device library built without NCCL, and a stand-in device that keeps
 * its memory on the host (the tests' fake device, through which this file's logic is tested on
 * machines without a GPU). Slower than NCCL: every byte crosses to the host and back, and the
 * copy out waits for the ordering stream.
 *
 * A collective: (1) what it sends is copied into a host buffer of its request on the ordering
 * stream (the request's, else the communicator's, else the device's default stream), behind the
 * work issued there before (a copy to the host has completed when lw_device_copy returns);
 * (2) the parent's collective starts on that buffer, on a request of its own, under the parent's
 * checks, counters and watchdog; (3) when it completes (test, wait), the result is copied into
 * the device's memory on this communicator's own stream, which holds no compute to wait for, and
 * the request completes with that copy. Host memory (the all-reduce of statistics, checkpoint
 * broadcasts, barriers) goes to the parent directly after the ordering stream's work, as the
 * NCCL communicator sends it. */
#include "comm/comm.h"

#include <stdlib.h>
#include <string.h>

typedef struct staged_comm {
    lw_comm *parent; /* [borrowed]; [owned] when owns_parent (a split's) */
    bool owns_parent;
    lw_device *device; /* [borrowed] */
    lw_stream *back;   /* [owned] results are copied into the device's memory here */
    char *host;        /* [owned] the blocking forms' staging buffer (without the watchdog) */
    int64_t capacity;  /* its bytes */
} staged_comm;

/* A request's handle (lw_request.handle): the parent's collective, its host buffer, and where
 * its result goes. */
typedef struct staged_handle {
    lw_request *inner; /* [owned] the parent's collective on the host buffer */
    char *host;        /* [owned] staging buffer */
    int64_t capacity;  /* its bytes */
    void *back_to;     /* device memory the result goes to; NULL: nothing to copy */
    const char *back_from;
    int64_t back_bytes;
    lw_stream *back; /* [borrowed] the communicator's copy stream (it outlives its requests) */
    bool pending;    /* inner is in flight */
} staged_handle;

/* Where a collective stages its data and finds the parent's request: the request's handle, or
 * for a blocking form without a request the communicator's buffer and no parent request. */
typedef struct stage {
    char *host;
    lw_request *inner; /* NULL: blocking */
    staged_handle *h;  /* NULL: blocking */
} stage;

static const lwi_comm_backend staged_backend;

static staged_comm *sc_of(const lw_comm *c) { return (staged_comm *)c->impl; }

/* A host buffer of at least `bytes` in *buf (grown, contents not kept). */
static lw_status grow(char **buf, int64_t *capacity, int64_t bytes) {
    if (bytes <= *capacity) return LW_OK;
    char *grown = realloc(*buf, (size_t)bytes);
    if (grown == NULL)
        return lwi_fail(LW_ERR_NOMEM, "comm: staged: out of host memory for a %lld-byte staging "
                        "buffer", (long long)bytes);
    *buf = grown;
    *capacity = bytes;
    return LW_OK;
}

/* The stream a collective is ordered after (see the file's comment); LW_ERR_INVALID when it is
 * another device's. */
static lw_status ordering_stream(lw_comm *c, const lw_request *req, lw_stream **out) {
    staged_comm *sc = sc_of(c);
    lw_stream *s = req != NULL && req->stream != NULL ? req->stream : c->stream;
    if (s == NULL || s->device->ops->host_memory) s = sc->device->stream;
    if (s->device != sc->device)
        return lwi_fail(LW_ERR_INVALID,
                        "comm: staged on %s: a collective ordered after a stream of %s (set a "
                        "stream of %s, or none)",
                        sc->device->name, s->device->name, sc->device->name);
    *out = s;
    return LW_OK;
}

/* Whether p is the device's memory (false: host memory). */
static lw_status is_here(const staged_comm *sc, const void *p, bool *here) {
    if (sc->device->ops->memory_here == NULL)
        return lwi_fail(LW_ERR_UNSUPPORTED, "comm: staged on %s: its device library cannot tell "
                        "its memory from the host's (no memory_here entry)", sc->device->name);
    return sc->device->ops->memory_here(sc->device, p, here);
}

/* The buffers' collectives take the device's memory only, as the NCCL communicator does: the
 * same code then runs on either. */
static lw_status on_device(const staged_comm *sc, const void *p, const char *what) {
    bool here = false;
    lw_status st = is_here(sc, p, &here);
    if (st == LW_OK && !here)
        return lwi_fail(LW_ERR_INVALID,
                        "comm: staged on %s: %s of host memory: its buffers must live on %s "
                        "(only all-reduce, broadcast and barrier take host memory, through the "
                        "parent communicator)",
                        sc->device->name, what, sc->device->name);
    return st;
}

/* The parent's next collective carries this one's label and the communicator's phase, so that
 * the parent's watchdog names what the caller named. */
static void pass_names(lw_comm *c, const lw_request *req) {
    const lw_request *r = req != NULL ? req : c->blocking;
    const char *label = r->once[0] != '\0' ? r->once : r->label;
    staged_comm *sc = sc_of(c);
    if (label[0] != '\0') lw_comm_set_label(sc->parent, label);
    if (strcmp(sc->parent->phase, c->phase) != 0) lw_comm_set_phase(sc->parent, c->phase);
}

/* A staging buffer of `bytes` for a collective on req (NULL: a blocking form), with the
 * parent's request to start it on. */
static lw_status stage_for(lw_comm *c, lw_request *req, int64_t bytes, stage *out) {
    staged_comm *sc = sc_of(c);
    memset(out, 0, sizeof *out);
    if (req == NULL) {
        lw_status st = grow(&sc->host, &sc->capacity, bytes > 0 ? bytes : 1);
        out->host = sc->host;
        return st;
    }
    staged_handle *h = req->handle;
    if (h == NULL) {
        h = calloc(1, sizeof *h);
        if (h == NULL) return lwi_fail(LW_ERR_NOMEM, "comm: out of memory");
        req->handle = h;
    }
    h->pending = false;
    h->back_to = NULL;
    h->back_bytes = 0;
    h->back = sc->back;
    lw_status st = h->inner == NULL ? lw_request_new(&h->inner) : LW_OK;
    if (st == LW_OK) st = grow(&h->host, &h->capacity, bytes > 0 ? bytes : 1);
    if (st != LW_OK) return st;
    out->host = h->host;
    out->inner = h->inner;
    out->h = h;
    return LW_OK;
}

/* Copies the result into the device's memory (complete when it returns). */
static lw_status copy_back(lw_stream *back, void *to, const char *from, int64_t bytes) {
    return bytes > 0 ? lw_device_copy(back, to, from, bytes, LW_COPY_HOST_TO_DEVICE) : LW_OK;
}

/* After the parent's collective started (status st) on the stage: a blocking form's result is
 * there already and goes back now; a request's goes back when the parent's request completes,
 * or now when the parent finished it at once (one rank, nothing to move). */
static lw_status started(lw_comm *c, const stage *g, lw_status st, void *to, const char *from,
                         int64_t bytes) {
    if (st != LW_OK) return st;
    if (g->h == NULL || !lw_request_active(g->inner))
        return copy_back(sc_of(c)->back, to, from, bytes);
    g->h->back_to = to;
    g->h->back_from = from;
    g->h->back_bytes = bytes;
    g->h->pending = true;
    return LW_OK;
}

/* Before a collective on host memory: the ordering stream's work has run (as a host-memory
 * backend waits for it); the request, if any, is complete with the parent's blocking call, so
 * nothing of an earlier collective on it is left to land. */
static lw_status host_side(lw_comm *c, lw_request *req) {
    lw_stream *order = NULL;
    lw_status st = ordering_stream(c, req, &order);
    if (st == LW_OK) st = lw_stream_synchronize(order);
    if (st == LW_OK && req != NULL && req->handle != NULL)
        ((staged_handle *)req->handle)->pending = false;
    if (st == LW_OK) pass_names(c, req);
    return st;
}

/* Copies `bytes` of device memory at src into host memory at dst behind the ordering stream. */
static lw_status copy_out(lw_comm *c, const lw_request *req, void *dst, const void *src,
                          int64_t bytes) {
    lw_stream *order = NULL;
    lw_status st = ordering_stream(c, req, &order);
    if (st != LW_OK) return st;
    if (bytes == 0) return lw_stream_synchronize(order);
    return lw_device_copy(order, dst, src, bytes, LW_COPY_DEVICE_TO_HOST);
}

/* ---- collectives --------------------------------------------------------------------------- */

static lw_status staged_barrier(lw_comm *c, lw_request *req) {
    lw_status st = host_side(c, req);
    return st == LW_OK ? lw_comm_barrier(sc_of(c)->parent) : st;
}

static lw_status staged_broadcast(lw_comm *c, void *data, int64_t bytes, int32_t root,
                                  lw_request *req) {
    staged_comm *sc = sc_of(c);
    bool here = false;
    lw_status st = is_here(sc, data, &here);
    if (st != LW_OK) return st;
    if (!here) {
        st = host_side(c, req);
        return st == LW_OK ? lw_comm_broadcast(sc->parent, data, bytes, root) : st;
    }
    stage g;
    if ((st = stage_for(c, req, bytes, &g)) != LW_OK) return st;
    st = copy_out(c, req, g.host, data, c->rank == root ? bytes : 0);
    if (st != LW_OK) return st;
    pass_names(c, req);
    st = lw_comm_broadcast(sc->parent, g.host, bytes, root); /* blocking, as MPI's is */
    return st == LW_OK ? copy_back(sc->back, data, g.host, c->rank == root ? 0 : bytes) : st;
}

static lw_status staged_allreduce(lw_comm *c, void *data, int64_t n, lw_dtype dtype,
                                  lw_reduce_op op, lw_request *req) {
    staged_comm *sc = sc_of(c);
    bool here = false;
    lw_status st = is_here(sc, data, &here);
    if (st != LW_OK) return st;
    if (!here) { /* the gradient norm's statistics, checks, checkpoints */
        st = host_side(c, req);
        return st == LW_OK ? lw_comm_allreduce(sc->parent, data, n, dtype, op) : st;
    }
    const int64_t bytes = n * (int64_t)lwi_dtype_size(dtype);
    stage g;
    if ((st = stage_for(c, req, bytes, &g)) != LW_OK ||
        (st = copy_out(c, req, g.host, data, bytes)) != LW_OK)
        return st;
    pass_names(c, req);
    /* the parent's nonblocking all-reduce is the sum in f32 or bf16 (the buffers' replicated
     * gradients), bf16 summed and rounded by the parent (MPI); the rest block */
    if (g.inner != NULL && (dtype == LW_DTYPE_F32 || dtype == LW_DTYPE_BF16) &&
        op == LW_REDUCE_SUM)
        st = lw_comm_allreduce_start(sc->parent, g.host, n, dtype, g.inner);
    else
        st = lw_comm_allreduce(sc->parent, g.host, n, dtype, op);
    return started(c, &g, st, data, g.host, bytes);
}

/* The sums (reduce-scatter, -v) stage the bucket in its own dtype: bf16 crosses to the host and
 * back as bf16, and the parent (MPI) sums and rounds it. */
static lw_status staged_reduce_scatter(lw_comm *c, const void *send, void *recv, int64_t shard,
                                       lw_dtype dtype, lw_request *req) {
    staged_comm *sc = sc_of(c);
    const int64_t piece = shard * (int64_t)lwi_dtype_size(dtype), bytes = piece * c->size;
    lw_status st = shard > 0 ? on_device(sc, send, "reduce-scatter") : LW_OK;
    stage g;
    if (st != LW_OK || (st = stage_for(c, req, bytes, &g)) != LW_OK ||
        (st = copy_out(c, req, g.host, send, bytes)) != LW_OK)
        return st;
    pass_names(c, req);
    st = lw_comm_reduce_scatter(sc->parent, g.host, shard * c->size, dtype, g.inner);
    /* in place: the sum lands in this rank's shard of the bucket (recv) */
    return started(c, &g, st, recv, g.host + piece * c->rank, piece);
}

static lw_status staged_allgather(lw_comm *c, void *bucket, int64_t shard, lw_dtype dtype,
                                  lw_request *req) {
    staged_comm *sc = sc_of(c);
    const int64_t piece = shard * (int64_t)lwi_dtype_size(dtype), mine = piece * c->rank;
    lw_status st = shard > 0 ? on_device(sc, bucket, "all-gather") : LW_OK;
    stage g;
    if (st != LW_OK || (st = stage_for(c, req, piece * c->size, &g)) != LW_OK ||
        (st = copy_out(c, req, g.host + mine, (const char *)bucket + mine, piece)) != LW_OK)
        return st;
    pass_names(c, req);
    st = lw_comm_allgather(sc->parent, g.host, shard * c->size, dtype, g.inner);
    return started(c, &g, st, bucket, g.host, piece * c->size);
}

static int64_t count_sum(const int64_t *counts, int32_t upto) {
    int64_t at = 0;
    for (int32_t r = 0; r < upto; r++)
        at += counts[r];
    return at;
}

static lw_status staged_reduce_scatterv(lw_comm *c, const void *send, void *recv,
                                        const int64_t *counts, lw_dtype dtype, lw_request *req) {
    staged_comm *sc = sc_of(c);
    const int64_t size = (int64_t)lwi_dtype_size(dtype), total = count_sum(counts, c->size);
    const int64_t at = size * count_sum(counts, c->rank);
    lw_status st = total > 0 ? on_device(sc, send, "reduce-scatter-v") : LW_OK;
    stage g;
    if (st != LW_OK || (st = stage_for(c, req, size * total, &g)) != LW_OK ||
        (st = copy_out(c, req, g.host, send, size * total)) != LW_OK)
        return st;
    pass_names(c, req);
    st = lw_comm_reduce_scatterv(sc->parent, g.host, counts, dtype, g.inner);
    return started(c, &g, st, recv, g.host + at, size * counts[c->rank]);
}

/* In place (send is this rank's segment of recv, the all-gather of segments) or not (legacy
 * mode's all-gather-v): either way this rank's segment goes into the host bucket, which the
 * parent gathers in place, and the whole bucket comes back into recv. */
static lw_status staged_allgatherv(lw_comm *c, const void *send, int64_t n, void *recv,
                                   const int64_t *counts, lw_dtype dtype, lw_request *req) {
    staged_comm *sc = sc_of(c);
    const int64_t size = (int64_t)lwi_dtype_size(dtype), total = count_sum(counts, c->size);
    const int64_t at = size * count_sum(counts, c->rank);
    lw_status st = total > 0 ? on_device(sc, recv, "all-gather-v") : LW_OK;
    if (st == LW_OK && n > 0) st = on_device(sc, send, "all-gather-v");
    stage g;
    if (st != LW_OK || (st = stage_for(c, req, size * total, &g)) != LW_OK ||
        (st = copy_out(c, req, g.host + at, send, size * n)) != LW_OK)
        return st;
    pass_names(c, req);
    st = lw_comm_allgather_segments(sc->parent, g.host, counts, dtype, g.inner);
    return started(c, &g, st, recv, g.host, size * total);
}

static lw_status staged_alltoallv(lw_comm *c, const void *send, const int64_t *send_counts,
                                  void *recv, const int64_t *recv_counts, lw_dtype dtype,
                                  lw_request *req) {
    staged_comm *sc = sc_of(c);
    const int64_t size = (int64_t)lwi_dtype_size(dtype);
    const int64_t out = size * count_sum(send_counts, c->size);
    const int64_t in = size * count_sum(recv_counts, c->size);
    lw_status st = out > 0 ? on_device(sc, send, "all-to-all-v") : LW_OK;
    if (st == LW_OK && in > 0) st = on_device(sc, recv, "all-to-all-v");
    stage g;
    if (st != LW_OK || (st = stage_for(c, req, out + in, &g)) != LW_OK ||
        (st = copy_out(c, req, g.host, send, out)) != LW_OK)
        return st;
    pass_names(c, req);
    st = lw_comm_alltoallv(sc->parent, g.host, send_counts, g.host + out, recv_counts, dtype,
                           g.inner);
    return started(c, &g, st, recv, g.host + out, in);
}

/* ---- requests ------------------------------------------------------------------------------ */

/* The parent's collective failed: after a timeout MPI may still write into the staging buffer
 * if the stopped rank comes back, so the buffer is let go of, not freed (the job is ending), as
 * request.c does with a scratch shard. */
static lw_status failed(staged_handle *h, lw_status st) {
    h->pending = false;
    if (st == LW_ERR_TIMEOUT) {
        h->host = NULL;
        h->capacity = 0;
    }
    return st;
}

/* The parent's collective completed: its result goes into the device's memory. */
static lw_status land(staged_handle *h) {
    h->pending = false;
    return copy_back(h->back, h->back_to, h->back_from, h->back_bytes);
}

static lw_status staged_test(lw_request *req, bool *done) {
    staged_handle *h = req->handle;
    *done = true;
    if (h == NULL || !h->pending) return LW_OK;
    lw_status st = lw_request_test(h->inner, done);
    if (st != LW_OK) return failed(h, st);
    return *done ? land(h) : LW_OK;
}

static lw_status staged_wait(lw_request *req) {
    staged_handle *h = req->handle;
    if (h == NULL || !h->pending) return LW_OK;
    lw_status st = lw_request_wait(h->inner);
    return st == LW_OK ? land(h) : failed(h, st);
}

static void staged_release(lw_request *req) {
    staged_handle *h = req->handle;
    if (h == NULL) return;
    lw_request_free(h->inner);
    free(h->host);
    h->inner = NULL;
    h->host = NULL;
}

/* ---- the communicator ---------------------------------------------------------------------- */

static void destroy(staged_comm *sc) {
    if (sc == NULL) return;
    lw_stream_free(sc->back);
    free(sc->host);
    if (sc->owns_parent) lw_comm_free(sc->parent);
    free(sc);
}

static lw_status make(lw_comm *parent, bool owns_parent, lw_device *device, lw_comm **out) {
    staged_comm *sc = calloc(1, sizeof *sc);
    if (sc == NULL) {
        if (owns_parent) lw_comm_free(parent);
        return lwi_fail(LW_ERR_NOMEM, "comm: out of memory");
    }
    sc->parent = parent;
    sc->owns_parent = owns_parent;
    sc->device = device;
    lw_status st = lw_stream_new(device, &sc->back);
    if (st == LW_OK) st = lwi_comm_make(&staged_backend, parent->rank, parent->size, sc, out);
    if (st != LW_OK) {
        destroy(sc);
        return st;
    }
    (*out)->device = device;
    return LW_OK;
}

lw_status lwi_comm_staged_new(lw_comm *parent, lw_device *device, lw_comm **out) {
    return make(parent, false, device, out);
}

/* The parent's split, under a staged communicator of its own (owning it). */
static lw_status staged_split(lw_comm *c, int32_t color, int32_t key, lw_comm **out) {
    staged_comm *sc = sc_of(c);
    lw_comm *parent = NULL;
    lw_status st = lw_comm_split(sc->parent, color, key, &parent);
    if (st != LW_OK) return st;
    st = make(parent, true, sc->device, out);
    if (st == LW_OK) memcpy((*out)->about, c->about, sizeof c->about);
    return st;
}

static void staged_abort(lw_comm *c, int32_t code) { lw_comm_abort(sc_of(c)->parent, code); }

static void staged_free(lw_comm *c) { destroy(sc_of(c)); }

static const lwi_comm_backend staged_backend = {
    .name = "staged",
    .host_memory = false,
    .in_place_reduce_scatter = true,
    .max_count = INT32_MAX, /* the parent's limit when it is MPI's (checked again there) */
    .split = staged_split,
    .barrier = staged_barrier,
    .broadcast = staged_broadcast,
    .allreduce = staged_allreduce,
    .reduce_scatter_start = staged_reduce_scatter,
    .reduce_scatterv_start = staged_reduce_scatterv,
    .allgather_start = staged_allgather,
    .allgatherv = staged_allgatherv,
    .alltoallv_start = staged_alltoallv,
    .test = staged_test,
    .wait = staged_wait,
    .abort = staged_abort,
    .free = staged_free,
    .release = staged_release,
};
