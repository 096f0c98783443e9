/* nccl.c: the NCCL communicator, the device table's comm_new (lw_comm_device_new): bootstrapped
 * over a parent communicator (self or MPI), which also carries every collective on host memory,
 * and barriers; split, aborted and freed here, and its backend table. The collectives and their
 * requests are nccl_collectives.c's. Not the argument checks, counters or watchdog: comm.c does
 * those for every backend. */
#include "cuda/nccl_comm.h"

#include <stdlib.h>
#include <string.h>

static const lwi_comm_backend nccl_backend;

lw_status lwc_nccl_fail(const lw_device *d, ncclResult_t r, const char *what) {
    const char *detail = ncclGetLastError(NULL);
    const bool has = detail != NULL && detail[0] != '\0';
    cudaGetLastError(); /* a failed enqueue may leave a sticky launch error behind */
    return lwc_host->fail(LW_ERR_IO, "comm: nccl on %s: %s failed: %s%s%s%s", d->name, what,
                          ncclGetErrorString(r), has ? " (" : "", has ? detail : "",
                          has ? ")" : "");
}

/* Frees nc: NCCL's communicator aborted when its kernels may be stuck waiting for a rank that
 * stopped (ncclCommDestroy would wait for them), destroyed otherwise. */
static void destroy(nccl_comm *nc, bool stuck) {
    if (nc == NULL) return;
    lwc_use(nc->device);
    if (nc->nccl != NULL) {
        if (stuck)
            ncclCommAbort(nc->nccl);
        else
            ncclCommDestroy(nc->nccl);
    }
    if (nc->ready != NULL) cudaEventDestroy(nc->ready);
    if (nc->stream != NULL) cudaStreamDestroy(nc->stream);
    if (nc->owns_parent) nc->calls->free(nc->parent);
    free(nc);
}

/* nc's stream and event, on its (current) GPU. The stream has the highest priority: a
 * collective's kernels get the GPU ahead of the compute they overlap, which would otherwise
 * delay the whole ring. */
static lw_status make_streams(nccl_comm *nc) {
    int least = 0, greatest = 0;
    cudaError_t e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithPriority(&nc->stream, cudaStreamNonBlocking, greatest);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&nc->ready, cudaEventDisableTiming);
    return e == cudaSuccess ? LW_OK : lwc_fail(nc->device, e, "creating the communicator's stream");
}

/* Wraps nc (with its NCCL communicator) into an lw_comm; frees nc on failure. */
static lw_status wrap(nccl_comm *nc, lw_comm **out) {
    int rank = 0, size = 0;
    ncclResult_t r = ncclCommUserRank(nc->nccl, &rank);
    if (r == ncclSuccess) r = ncclCommCount(nc->nccl, &size);
    lw_status st = LW_OK;
    if (r != ncclSuccess)
        st = lwc_nccl_fail(nc->device, r, "ncclCommUserRank");
    else if (rank != nc->parent->rank || size != nc->parent->size)
        /* host collectives go to the parent: its ranks must be the same */
        st = lwc_host->fail(LW_ERR_STATE,
                            "comm: nccl on %s: NCCL made rank %d of %d but its parent is rank %d "
                            "of %d",
                            nc->device->name, rank, size, nc->parent->rank, nc->parent->size);
    if (st == LW_OK) st = nc->calls->make(&nccl_backend, rank, size, nc, out);
    if (st != LW_OK) destroy(nc, false);
    return st;
}

/* Whether every rank of parent got past a step: LW_OK on all; mine (this rank's error, its
 * message already set) where this rank failed; elsewhere an error naming the last rank that
 * failed, so that no rank goes on into a step that would wait for it forever. */
static lw_status agree(const nccl_comm *nc, lw_status mine, const char *step) {
    int64_t failed = mine == LW_OK ? 0 : (int64_t)nc->parent->rank + 1;
    lw_status st = nc->calls->allreduce(nc->parent, &failed, 1, LW_DTYPE_I64, LW_REDUCE_MAX);
    if (st != LW_OK) return st;
    if (mine != LW_OK) return mine;
    if (failed == 0) return LW_OK;
    return lwc_host->fail(LW_ERR_STATE,
                          "comm: nccl on %s: rank %lld could not %s (its own error says why), "
                          "so rank %d stops too",
                          nc->device->name, (long long)failed - 1, step, nc->parent->rank);
}

lw_status lwc_comm_new(lw_device *device, lw_comm *parent, const lwi_comm_calls *calls,
                       lw_comm **out) {
    nccl_comm *nc = calloc(1, sizeof *nc);
    if (nc == NULL) return lwc_host->fail(LW_ERR_NOMEM, "comm: out of memory");
    nc->device = device;
    nc->calls = calls;
    nc->parent = parent;
    /* rank 0 makes NCCL's id and broadcasts it through the parent; every rank sets its GPU up
     * first and learns whether all could, since ncclCommInitRank would wait forever for a rank
     * that never calls it */
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    lw_status mine = lwc_use(device);
    if (mine == LW_OK) mine = make_streams(nc);
    if (mine == LW_OK && parent->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) mine = lwc_nccl_fail(device, r, "ncclGetUniqueId");
    }
    lw_status st = agree(nc, mine, "set up its GPU for NCCL");
    if (st == LW_OK) st = calls->broadcast(parent, &id, sizeof id, 0);
    if (st == LW_OK && (st = lwc_use(device)) == LW_OK) {
        ncclResult_t r = ncclCommInitRank(&nc->nccl, parent->size, id, parent->rank);
        if (r != ncclSuccess) {
            nc->nccl = NULL;
            st = lwc_nccl_fail(device, r, "ncclCommInitRank");
        }
        st = agree(nc, st, "join the NCCL communicator");
    }
    if (st != LW_OK) {
        destroy(nc, false);
        return st;
    }
    return wrap(nc, out);
}

/* NCCL's split and the parent's, so that the new communicator's host collectives have a
 * parent of the same ranks (owned by it). */
static lw_status nccl_split(lw_comm *c, int32_t color, int32_t key, lw_comm **out) {
    nccl_comm *nc = nc_of(c);
    lw_comm *parent = NULL;
    lw_status st = nc->calls->split(nc->parent, color, key, &parent);
    if (st != LW_OK) return st;
    nccl_comm *sub = calloc(1, sizeof *sub);
    if (sub == NULL) {
        nc->calls->free(parent);
        return lwc_host->fail(LW_ERR_NOMEM, "comm: out of memory");
    }
    sub->device = nc->device;
    sub->calls = nc->calls;
    sub->parent = parent;
    sub->owns_parent = true;
    if ((st = lwc_use(nc->device)) == LW_OK) {
        ncclResult_t r = ncclCommSplit(nc->nccl, color, key, &sub->nccl, NULL);
        if (r != ncclSuccess) {
            sub->nccl = NULL;
            st = lwc_nccl_fail(nc->device, r, "ncclCommSplit");
        }
    }
    if (st == LW_OK) st = make_streams(sub);
    if (st != LW_OK) {
        destroy(sub, false);
        return st;
    }
    return wrap(sub, out);
}

static void nccl_abort(lw_comm *c, int32_t code) {
    nccl_comm *nc = nc_of(c);
    /* NCCL's kernels stop first: the parent's abort (MPI_Abort) may not return */
    if (nc->nccl != NULL) {
        lwc_use(nc->device);
        ncclCommAbort(nc->nccl);
        nc->nccl = NULL;
    }
    nc->calls->abort(nc->parent, code);
}

static void nccl_free(lw_comm *c) { destroy(nc_of(c), c->broken); }

static const lwi_comm_backend nccl_backend = {
    .name = "nccl",
    .host_memory = false,
    .in_place_reduce_scatter = true,
    .split = nccl_split,
    .barrier = lwc_nccl_barrier,
    .broadcast = lwc_nccl_broadcast,
    .allreduce = lwc_nccl_allreduce,
    .reduce_scatter_start = lwc_nccl_reduce_scatter,
    .reduce_scatterv_start = lwc_nccl_reduce_scatterv,
    .allgather_start = lwc_nccl_allgather,
    .allgatherv = lwc_nccl_allgatherv,
    .alltoallv_start = lwc_nccl_alltoallv,
    .test = lwc_nccl_test,
    .wait = lwc_nccl_wait,
    .abort = nccl_abort,
    .free = nccl_free,
    .release = lwc_nccl_release,
};
