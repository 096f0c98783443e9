/* comm_internal.h: the communicator's data and the backend interface shared by comm.c and the
 * backends (comm_self.c, comm_mpi.c). Not public API. */
#ifndef LW_COMM_INTERNAL_H
#define LW_COMM_INTERNAL_H

#include "internal.h"

#define LWI_COMM_OPS 6

/* A backend: the nonblocking primitives (start / test / wait) and the blocking ones. Counts
 * are elements; a reduce-scatter reads send[0..shard * size) and writes recv[0..shard). */
typedef struct lwi_comm_backend {
    const char *name;
    lw_status (*split)(lw_comm *comm, int32_t color, int32_t key, lw_comm **out);
    lw_status (*barrier)(lw_comm *comm);
    lw_status (*broadcast)(lw_comm *comm, void *data, int64_t bytes, int32_t root);
    lw_status (*allreduce)(lw_comm *comm, void *data, int64_t count, lw_dtype dtype,
                           lw_reduce_op op);
    lw_status (*allreduce_start)(lw_comm *comm, float *data, int64_t count, lw_request *req);
    lw_status (*reduce_scatter_start)(lw_comm *comm, const float *send, float *recv,
                                      int64_t shard, lw_request *req);
    lw_status (*allgather_start)(lw_comm *comm, void *bucket, int64_t shard, lw_dtype dtype,
                                 lw_request *req);
    lw_status (*allgatherv)(lw_comm *comm, const float *send, int64_t send_count, float *recv,
                            const int64_t *counts);
    lw_status (*test)(lw_request *req, bool *done);
    lw_status (*wait)(lw_request *req);
    void (*abort)(lw_comm *comm, int32_t code);
    void (*free)(lw_comm *comm);
} lwi_comm_backend;

struct lw_comm {
    const lwi_comm_backend *backend;
    int32_t rank;
    int32_t size;
    void *impl; /* backend data (the MPI communicator) */
    lw_comm_counter counters[LWI_COMM_OPS];
    lw_request *blocking; /* [owned] request for the blocking forms of the collectives */
    lw_request *active;   /* [borrowed] requests in flight, completed before the comm is freed */
};

struct lw_request {
    lw_comm *comm; /* the communicator of the active collective; NULL when idle */
    lw_comm_op op;
    float *scratch; /* [owned] reduce-scatter result before it is copied into the bucket */
    int64_t scratch_capacity;
    float *copy_to; /* reduce-scatter: where the result goes on completion */
    int64_t copy_count;
    void *handle; /* [owned] backend handle storage (MPI_Request), allocated on first use */
    lw_request *next_active; /* the comm's list of requests in flight */
    lw_request *prev_active;
};

extern const lwi_comm_backend lwi_comm_self_backend;

/* A communicator object around a backend (counters zero, blocking request allocated). */
lw_status lwi_comm_make(const lwi_comm_backend *backend, int32_t rank, int32_t size, void *impl,
                        lw_comm **out);
/* Seconds on a monotonic clock. */
double lwi_now(void);
/* Bytes per element of a dtype. */
size_t lwi_dtype_size(lw_dtype dtype);
/* The MPI world, when built with MPI; LW_ERR_UNSUPPORTED otherwise. */
lw_status lwi_comm_mpi_world(lw_comm **out);
/* BLAS threads for `ranks` processes sharing this machine, unless the user chose. */
void lwi_blas_share_cores(int32_t ranks);

#endif
