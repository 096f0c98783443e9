/* nccl_collectives.c: the NCCL communicator's collectives and requests (the backend entries
 * that nccl.c's table names). Collectives on the GPU's memory run on the communicator's own
 * stream, behind an event of the ordering stream, and complete through an event per request, so
 * that reduce-scatters overlap backward and all-gathers forward; those on host memory, and
 * barriers, go through the parent. Apart from nccl.c, which makes, splits and frees the
 * communicator: this is what runs on it. */
#include "cuda/nccl_comm.h"

#include <sched.h>
#include <stdlib.h>

/* A request's handle (lw_request.handle): the event that completes its collective. */
typedef struct nccl_handle {
    int32_t index;    /* the CUDA ordinal `done` was made on */
    cudaEvent_t done; /* recorded on NCCL's stream after the collective; NULL until needed */
    bool pending;     /* `done` marks a collective not yet seen complete; false: the collective
                         ran on the host through the parent and is complete */
} nccl_handle;

#define NCCL_TRY(nc, call, what)                                                                   \
    do {                                                                                           \
        ncclResult_t nccl_r = (call);                                                              \
        if (nccl_r != ncclSuccess) return lwc_nccl_fail((nc)->device, nccl_r, what);               \
    } while (0)

static ncclDataType_t nccl_type(lw_dtype t) {
    switch (t) {
    case LW_DTYPE_F32:
        return ncclFloat32;
    case LW_DTYPE_BF16:
        return ncclBfloat16;
    case LW_DTYPE_F16:
        return ncclFloat16;
    case LW_DTYPE_F64:
        return ncclFloat64;
    case LW_DTYPE_I64:
        return ncclInt64;
    }
    return ncclUint8;
}

static size_t type_size(lw_dtype t) {
    return t == LW_DTYPE_BF16 || t == LW_DTYPE_F16 ? 2 : t == LW_DTYPE_F32 ? 4 : 8;
}

static ncclRedOp_t nccl_op(lw_reduce_op op) {
    return op == LW_REDUCE_MAX ? ncclMax : op == LW_REDUCE_MIN ? ncclMin : ncclSum;
}

/* Whether p is host memory (a collective on it goes through the parent); LW_ERR_INVALID when it
 * is another GPU's, which NCCL on this one cannot move. */
static lw_status is_host(const nccl_comm *nc, const void *p, const char *what, bool *host) {
    struct cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) return lwc_fail(nc->device, e, "cudaPointerGetAttributes");
    *host = a.type == cudaMemoryTypeUnregistered || a.type == cudaMemoryTypeHost;
    if (!*host && a.device != lwc_dev(nc->device)->index)
        return lwc_host->fail(LW_ERR_INVALID,
                              "comm: nccl on %s: %s of memory on GPU %d: a device communicator "
                              "moves its own GPU's memory and host memory only",
                              nc->device->name, what, a.device);
    return LW_OK;
}

/* Device memory only: the collectives that the parent cannot take over (the buffers'). */
static lw_status on_device(const nccl_comm *nc, const void *p, const char *what) {
    bool host = false;
    lw_status st = is_host(nc, p, what, &host);
    if (st == LW_OK && host)
        return lwc_host->fail(LW_ERR_INVALID,
                              "comm: nccl on %s: %s of host memory: its buffers must live on %s "
                              "(only all-reduce, broadcast and barrier take host memory, through "
                              "the parent communicator)",
                              nc->device->name, what, nc->device->name);
    return st;
}

/* The CUDA stream a collective is ordered after: the request's, else the communicator's (each
 * of this GPU), else the GPU's default stream (for none, or the CPU's: no GPU work to follow). */
static lw_status ordering_stream(lw_comm *c, const lw_request *req, cudaStream_t *out) {
    const nccl_comm *nc = nc_of(c);
    lw_stream *s = req != NULL && req->stream != NULL ? req->stream : c->stream;
    if (s == NULL || s->device->ops->host_memory) s = nc->device->stream;
    if (s->device != nc->device)
        return lwc_host->fail(LW_ERR_INVALID,
                              "comm: nccl on %s: a collective ordered after a stream of %s (set "
                              "a stream of %s, or none)",
                              nc->device->name, s->device->name, nc->device->name);
    *out = lwc_cuda_stream(s);
    return LW_OK;
}

/* The request's handle (nothing pending); with `event`, an event on this GPU (current). */
static lw_status request_handle(lw_request *req, const nccl_comm *nc, bool event,
                                nccl_handle **out) {
    nccl_handle *h = req->handle;
    if (h == NULL) {
        h = calloc(1, sizeof *h);
        if (h == NULL) return lwc_host->fail(LW_ERR_NOMEM, "comm: out of memory");
        h->index = -1;
        req->handle = h;
    }
    h->pending = false;
    *out = h;
    if (!event) return LW_OK;
    const int32_t index = lwc_dev(nc->device)->index;
    if (h->done != NULL && h->index != index) { /* the request moved to another GPU's comm */
        cudaEventDestroy(h->done);
        h->done = NULL;
    }
    if (h->done == NULL) {
        cudaError_t e = cudaEventCreateWithFlags(&h->done, cudaEventDisableTiming);
        if (e != cudaSuccess) {
            h->done = NULL;
            return lwc_fail(nc->device, e, "cudaEventCreate for a request");
        }
        h->index = index;
    }
    return LW_OK;
}

/* Before NCCL's kernels are enqueued: its stream waits for the work issued so far on the
 * ordering stream (the gradients backward has written, the shard the optimizer updated). */
static lw_status begin(lw_comm *c, const lw_request *req) {
    nccl_comm *nc = nc_of(c);
    if (nc->nccl == NULL)
        return lwc_host->fail(LW_ERR_STATE, "comm: nccl on %s: the communicator was aborted",
                              nc->device->name);
    cudaStream_t order = NULL;
    lw_status st = ordering_stream(c, req, &order);
    if (st == LW_OK) st = lwc_use(nc->device);
    if (st != LW_OK) return st;
    cudaError_t e = cudaEventRecord(nc->ready, order);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(nc->stream, nc->ready, 0);
    return e == cudaSuccess ? LW_OK
                            : lwc_fail(nc->device, e, "ordering a collective after its stream");
}

/* An error NCCL found while its kernels run (a peer or the network gone): polls ask for it, so
 * that a wait fails with NCCL's reason instead of waiting for the watchdog. */
static lw_status async_error(const nccl_comm *nc) {
    ncclResult_t a = ncclSuccess;
    if (nc->nccl == NULL)
        return lwc_host->fail(LW_ERR_STATE, "comm: nccl on %s: the communicator was aborted",
                              nc->device->name);
    ncclResult_t r = ncclCommGetAsyncError(nc->nccl, &a);
    if (r != ncclSuccess) return lwc_nccl_fail(nc->device, r, "ncclCommGetAsyncError");
    return a == ncclSuccess || a == ncclInProgress ? LW_OK
                                                   : lwc_nccl_fail(nc->device, a, "a collective");
}

/* Polls `done` (a request's event) or, for NULL, the whole NCCL stream, until its work ran. */
static lw_status poll(const lw_comm *c, cudaEvent_t done) {
    const nccl_comm *nc = nc_of(c);
    for (;;) {
        cudaError_t e = done ? cudaEventQuery(done) : cudaStreamQuery(nc->stream);
        if (e == cudaSuccess) return LW_OK;
        if (e != cudaErrorNotReady) return lwc_fail(nc->device, e, "waiting for a collective");
        lw_status st = async_error(nc);
        if (st != LW_OK) return st;
        if (c->yield) sched_yield();
    }
}

/* After NCCL's kernels were enqueued: the request's event marks their end; without a request
 * (a blocking form, watchdog off) the call waits for them here. */
static lw_status end(lw_comm *c, lw_request *req) {
    nccl_comm *nc = nc_of(c);
    if (req == NULL) return poll(c, NULL);
    nccl_handle *h = NULL;
    lw_status st = request_handle(req, nc, true, &h);
    if (st != LW_OK) return st;
    cudaError_t e = cudaEventRecord(h->done, nc->stream);
    if (e != cudaSuccess) return lwc_fail(nc->device, e, "recording a collective's end");
    h->pending = true;
    return LW_OK;
}

/* Before a collective on host memory, through the parent: the ordering stream's work has run
 * (as a host-memory backend waits for it), and the request completes with the parent's
 * collective, which blocks. */
static lw_status host_side(lw_comm *c, lw_request *req) {
    nccl_comm *nc = nc_of(c);
    cudaStream_t order = NULL;
    lw_status st = ordering_stream(c, req, &order);
    if (st != LW_OK) return st;
    cudaError_t e = cudaStreamSynchronize(order);
    if (e != cudaSuccess) return lwc_fail(nc->device, e, "cudaStreamSynchronize");
    nccl_handle *h = NULL;
    if (req != NULL && (st = request_handle(req, nc, false, &h)) != LW_OK) return st;
    return LW_OK;
}

/* ---- collectives --------------------------------------------------------------------------- */

lw_status lwc_nccl_barrier(lw_comm *c, lw_request *req) {
    lw_status st = host_side(c, req);
    return st == LW_OK ? nc_of(c)->calls->barrier(nc_of(c)->parent) : st;
}

lw_status lwc_nccl_broadcast(lw_comm *c, void *data, int64_t bytes, int32_t root, lw_request *req) {
    nccl_comm *nc = nc_of(c);
    bool host = false;
    lw_status st = is_host(nc, data, "broadcast", &host);
    if (st != LW_OK) return st;
    if (host) {
        st = host_side(c, req);
        return st == LW_OK ? nc->calls->broadcast(nc->parent, data, bytes, root) : st;
    }
    if ((st = begin(c, req)) != LW_OK) return st;
    NCCL_TRY(nc, ncclBroadcast(data, data, (size_t)bytes, ncclUint8, root, nc->nccl, nc->stream),
             "ncclBroadcast");
    return end(c, req);
}

lw_status lwc_nccl_allreduce(lw_comm *c, void *data, int64_t n, lw_dtype dtype, lw_reduce_op op,
                             lw_request *req) {
    nccl_comm *nc = nc_of(c);
    bool host = false;
    lw_status st = is_host(nc, data, "all-reduce", &host);
    if (st != LW_OK) return st;
    if (host) { /* the gradient norm's statistics, checks, checkpoints */
        st = host_side(c, req);
        return st == LW_OK ? nc->calls->allreduce(nc->parent, data, n, dtype, op) : st;
    }
    if ((st = begin(c, req)) != LW_OK) return st;
    NCCL_TRY(
        nc,
        ncclAllReduce(data, data, (size_t)n, nccl_type(dtype), nccl_op(op), nc->nccl, nc->stream),
        "ncclAllReduce");
    return end(c, req);
}

/* The sums in bf16 (ncclBfloat16, here and in per_root, lwc_nccl_allreduce) are NCCL's: bf16
 * between GPUs, each partial sum rounded to bf16 where NCCL forms it, in the order of the
 * algorithm NCCL picks (the bound of p - 1 roundings that docs/c_api.md states holds for any
 * of them). */
lw_status lwc_nccl_reduce_scatter(lw_comm *c, const void *send, void *recv, int64_t shard,
                                  lw_dtype dtype, lw_request *req) {
    nccl_comm *nc = nc_of(c);
    lw_status st = shard > 0 ? on_device(nc, send, "reduce-scatter") : LW_OK;
    if (st != LW_OK || (st = begin(c, req)) != LW_OK) return st;
    /* in place: recv is this rank's shard of send (comm.c), as NCCL defines it */
    NCCL_TRY(nc,
             ncclReduceScatter(send, recv, (size_t)shard, nccl_type(dtype), ncclSum, nc->nccl,
                               nc->stream),
             "ncclReduceScatter");
    return end(c, req);
}

lw_status lwc_nccl_allgather(lw_comm *c, void *bucket, int64_t shard, lw_dtype dtype,
                             lw_request *req) {
    nccl_comm *nc = nc_of(c);
    lw_status st = shard > 0 ? on_device(nc, bucket, "all-gather") : LW_OK;
    if (st != LW_OK || (st = begin(c, req)) != LW_OK) return st;
    /* in place: this rank's shard is where the gathered bucket keeps it */
    const char *mine = (const char *)bucket + (size_t)c->rank * (size_t)shard * type_size(dtype);
    NCCL_TRY(nc, ncclAllGather(mine, bucket, (size_t)shard, nccl_type(dtype), nc->nccl, nc->stream),
             "ncclAllGather");
    return end(c, req);
}

/* NCCL has no variable-count collectives: one operation per rank with a segment (counts[root]
 * elements at recv + displ[root]), rooted there and fused in a group so that they run as one,
 * zero-count segments skipped. reduce: ncclReduce of send's segment into the root's (recv is
 * this rank's segment of send: in place, and the other segments are left as they were); else
 * ncclBroadcast from the root's send into its segment of recv (in place when send is that
 * segment: NCCL's own in-place broadcast). */
static lw_status per_root(lw_comm *c, bool reduce, const void *send, void *recv,
                          const int64_t *counts, lw_dtype dtype, lw_request *req) {
    nccl_comm *nc = nc_of(c);
    const char *what = reduce ? "reduce-scatter-v" : "all-gather-v";
    int64_t total = 0;
    for (int32_t r = 0; r < c->size; r++)
        total += counts[r];
    lw_status st = total > 0 ? on_device(nc, reduce ? send : recv, what) : LW_OK;
    if (st == LW_OK && !reduce && counts[c->rank] > 0) st = on_device(nc, send, what);
    if (st != LW_OK || (st = begin(c, req)) != LW_OK) return st;
    NCCL_TRY(nc, ncclGroupStart(), "ncclGroupStart");
    ncclResult_t r = ncclSuccess;
    const size_t size = type_size(dtype);
    const char *from = reduce ? (const char *)send : (const char *)recv;
    size_t at = 0; /* bytes */
    for (int32_t root = 0; root < c->size && r == ncclSuccess; root++) {
        const size_t n = (size_t)counts[root];
        const bool mine = root == c->rank;
        if (n > 0 && reduce)
            r = ncclReduce(from + at, mine ? recv : (void *)(from + at), n, nccl_type(dtype),
                           ncclSum, root, nc->nccl, nc->stream);
        else if (n > 0)
            r = ncclBroadcast(mine ? send : (const void *)(from + at), (char *)recv + at, n,
                              nccl_type(dtype), root, nc->nccl, nc->stream);
        at += n * size;
    }
    ncclResult_t ended = ncclGroupEnd(); /* also after a failed call: the group must close */
    if (r != ncclSuccess)
        return lwc_nccl_fail(nc->device, r,
                             reduce ? "ncclReduce (reduce-scatter-v)"
                                    : "ncclBroadcast (all-gather-v)");
    if (ended != ncclSuccess) return lwc_nccl_fail(nc->device, ended, "ncclGroupEnd");
    return end(c, req);
}

lw_status lwc_nccl_reduce_scatterv(lw_comm *c, const void *send, void *recv, const int64_t *counts,
                                   lw_dtype dtype, lw_request *req) {
    return per_root(c, true, send, recv, counts, dtype, req);
}

lw_status lwc_nccl_allgatherv(lw_comm *c, const void *send, int64_t n, void *recv,
                              const int64_t *counts, lw_dtype dtype, lw_request *req) {
    (void)n; /* counts[rank], checked by comm.c */
    return per_root(c, false, send, recv, counts, dtype, req);
}

/* NCCL has no all-to-all-v either: one ncclSend and one ncclRecv per peer with a count, fused
 * in a group, in which they all progress together (no order of peers can deadlock), zero
 * counts skipped on both sides (the counts agree across ranks: a send of 0 meets a receive of
 * 0). The own part is a device-to-device copy on NCCL's stream, not a send to itself; over one
 * rank that copy is all there is. */
lw_status lwc_nccl_alltoallv(lw_comm *c, const void *send, const int64_t *send_counts, void *recv,
                             const int64_t *recv_counts, lw_dtype dtype, lw_request *req) {
    nccl_comm *nc = nc_of(c);
    int64_t sent = 0, received = 0;
    for (int32_t r = 0; r < c->size; r++) {
        sent += send_counts[r];
        received += recv_counts[r];
    }
    lw_status st = sent > 0 ? on_device(nc, send, "all-to-all-v") : LW_OK;
    if (st == LW_OK && received > 0) st = on_device(nc, recv, "all-to-all-v");
    if (st != LW_OK || (st = begin(c, req)) != LW_OK) return st;
    const size_t size = type_size(dtype);
    const char *from = send;
    char *to = recv;
    size_t s_at = 0, r_at = 0; /* bytes */
    for (int32_t peer = 0; peer < c->rank; peer++) {
        s_at += (size_t)send_counts[peer] * size;
        r_at += (size_t)recv_counts[peer] * size;
    }
    const size_t own = (size_t)send_counts[c->rank] * size;
    if (own > 0) {
        cudaError_t e =
            cudaMemcpyAsync(to + r_at, from + s_at, own, cudaMemcpyDeviceToDevice, nc->stream);
        if (e != cudaSuccess) return lwc_fail(nc->device, e, "cudaMemcpyAsync (all-to-all-v)");
    }
    NCCL_TRY(nc, ncclGroupStart(), "ncclGroupStart");
    ncclResult_t r = ncclSuccess;
    const char *failed = "";
    s_at = r_at = 0;
    for (int32_t peer = 0; peer < c->size && r == ncclSuccess; peer++) {
        const size_t s_n = (size_t)send_counts[peer], r_n = (size_t)recv_counts[peer];
        if (peer != c->rank && s_n > 0) {
            r = ncclSend(from + s_at, s_n, nccl_type(dtype), peer, nc->nccl, nc->stream);
            failed = "ncclSend (all-to-all-v)";
        }
        if (r == ncclSuccess && peer != c->rank && r_n > 0) {
            r = ncclRecv(to + r_at, r_n, nccl_type(dtype), peer, nc->nccl, nc->stream);
            failed = "ncclRecv (all-to-all-v)";
        }
        s_at += s_n * size;
        r_at += r_n * size;
    }
    ncclResult_t ended = ncclGroupEnd(); /* also after a failed call: the group must close */
    if (r != ncclSuccess) return lwc_nccl_fail(nc->device, r, failed);
    if (ended != ncclSuccess) return lwc_nccl_fail(nc->device, ended, "ncclGroupEnd");
    return end(c, req);
}

lw_status lwc_nccl_test(lw_request *req, bool *done) {
    nccl_handle *h = req->handle;
    *done = true;
    if (h == NULL || !h->pending) return LW_OK;
    const nccl_comm *nc = nc_of(req->comm);
    cudaError_t e = cudaEventQuery(h->done);
    if (e == cudaSuccess) {
        h->pending = false;
        return LW_OK;
    }
    *done = false;
    if (e != cudaErrorNotReady) return lwc_fail(nc->device, e, "cudaEventQuery of a collective");
    return async_error(nc);
}

/* Without the watchdog: polls too, so that NCCL's own errors still end the wait. */
lw_status lwc_nccl_wait(lw_request *req) {
    nccl_handle *h = req->handle;
    if (h == NULL || !h->pending) return LW_OK;
    lw_status st = poll(req->comm, h->done);
    if (st == LW_OK) h->pending = false;
    return st;
}

void lwc_nccl_release(lw_request *req) {
    nccl_handle *h = req->handle;
    if (h != NULL && h->done != NULL) cudaEventDestroy(h->done);
    if (h != NULL) h->done = NULL;
}
