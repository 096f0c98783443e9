/* nccl_comm.h: what the NCCL communicator's two files share: its data, the error helper, and
 * the collectives' entries that nccl.c's backend table takes from nccl_collectives.c. Apart
 * from cuda.h because it reads nccl.h, which only the files built with NCCL (LWOPT_NCCL) may
 * include. Not public API. */
#ifndef LW_CUDA_NCCL_COMM_H
#define LW_CUDA_NCCL_COMM_H

#include "cuda/cuda.h"

#include <nccl.h>

typedef struct nccl_comm {
    ncclComm_t nccl; /* NULL once aborted */
    const lwi_comm_calls *calls; /* [borrowed] the core's calls on its communicators */
    lw_comm *parent; /* [borrowed]; [owned] when owns_parent (a split's) */
    bool owns_parent;
    lw_device *device;   /* [borrowed] */
    cudaStream_t stream; /* [owned] NCCL's kernels run here */
    cudaEvent_t ready;   /* [owned] the ordering stream's end, which the stream waits for */
} nccl_comm;

static inline nccl_comm *nc_of(const lw_comm *c) { return (nccl_comm *)c->impl; }

/* "comm: nccl on cuda:0: ncclAllReduce failed: unhandled system error (NCCL's last message)". */
lw_status lwc_nccl_fail(const lw_device *d, ncclResult_t r, const char *what);

/* nccl_collectives.c: the backend's collectives and requests (lwi_comm_backend's entries). */
lw_status lwc_nccl_barrier(lw_comm *c, lw_request *req);
lw_status lwc_nccl_broadcast(lw_comm *c, void *data, int64_t bytes, int32_t root, lw_request *req);
lw_status lwc_nccl_allreduce(lw_comm *c, void *data, int64_t n, lw_dtype dtype, lw_reduce_op op,
                             lw_request *req);
lw_status lwc_nccl_reduce_scatter(lw_comm *c, const void *send, void *recv, int64_t shard,
                                  lw_dtype dtype, lw_request *req);
lw_status lwc_nccl_reduce_scatterv(lw_comm *c, const void *send, void *recv, const int64_t *counts,
                                   lw_dtype dtype, lw_request *req);
lw_status lwc_nccl_allgather(lw_comm *c, void *bucket, int64_t shard, lw_dtype dtype,
                             lw_request *req);
lw_status lwc_nccl_allgatherv(lw_comm *c, const void *send, int64_t n, void *recv,
                              const int64_t *counts, lw_dtype dtype, lw_request *req);
lw_status lwc_nccl_alltoallv(lw_comm *c, const void *send, const int64_t *send_counts, void *recv,
                             const int64_t *recv_counts, lw_dtype dtype, lw_request *req);
lw_status lwc_nccl_test(lw_request *req, bool *done);
lw_status lwc_nccl_wait(lw_request *req);
void lwc_nccl_release(lw_request *req);

#endif
