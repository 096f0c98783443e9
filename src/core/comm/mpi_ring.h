/* mpi_ring.h: the reduce-scatter the MPI backend runs itself, as a ring of sends and receives
 * (mpi_ring.c). Not public API. */
#ifndef LW_COMM_MPI_RING_H
#define LW_COMM_MPI_RING_H

#include "base/base.h"

#include <mpi.h>

/* One reduce-scatter in flight: p - 1 steps, each a receive from the rank before and a send to
 * the rank after, the running sum of one segment travelling around the ring, in the bucket's
 * dtype (f32, or bf16: rounded at every step, see mpi_ring.c). */
typedef struct {
    MPI_Comm comm;
    int rank, size, tag;
    lw_dtype dtype;    /* LW_DTYPE_F32 or LW_DTYPE_BF16 */
    const char *send;  /* [borrowed] the bucket: segments of `shard` elements, or of counts[k] */
    char *recv;        /* [borrowed] this rank's sum: its segment's elements */
    const int *counts; /* [borrowed] the request's ints; NULL: equal segments of shard */
    int64_t shard;
    char *partial[2];           /* [owned] running sums between steps (3 ranks or more) */
    int64_t partial_capacity;   /* bytes in each */
    int step;                   /* the step in flight; size - 1 once done */
    MPI_Request reqs[2];        /* its receive and its send */
} lwi_mpi_ring;

/* Starts the sum over ranks of send into recv (send and recv do not overlap), elements of dtype
 * (F32 or BF16), segment k of send being counts[k] elements (the segments one after the other),
 * or shard elements when counts is NULL (each at most INT32_MAX); the ring's state lives in g,
 * whose partial buffers are kept for the next use. The tag is the collective's number on the
 * communicator, the same on every rank, so that rings in flight side by side on one
 * communicator never take each other's messages. */
lw_status lwi_mpi_ring_start(lwi_mpi_ring *g, MPI_Comm comm, const void *send, void *recv,
                             const int *counts, int64_t shard, lw_dtype dtype, int64_t seq);
/* Progresses the ring: adds what arrived and posts the next step; *done once the sum is in recv.
 * lwi_mpi_ring_wait blocks until then. */
lw_status lwi_mpi_ring_test(lwi_mpi_ring *g, bool *done);
lw_status lwi_mpi_ring_wait(lwi_mpi_ring *g);
/* Frees the partial buffers; a ring still in flight (its collective timed out, MPI may still
 * write into them) keeps them. */
void lwi_mpi_ring_release(lwi_mpi_ring *g);

/* An MPI error code as lwopt's error, naming the call (the ring's and mpi.c's). */
lw_status lwi_mpi_fail(int code, const char *what);

#endif
