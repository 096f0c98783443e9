/* comm.h: the communicator's data and the backend interface shared by comm.c and the
 * backends (self.c, mpi.c; nccl.c and nccl_collectives.c in the CUDA library, which reads these
 * structs too: they are part of its contract, see device/device.h). Not public API. */
#ifndef LW_COMM_H
#define LW_COMM_H

#include "base/base.h"
#include "device/device.h"

#include <string.h>

#define LWI_COMM_OPS 7 /* lw_comm_op's values */
#define LWI_LABEL 64   /* bytes of a collective's label, with its NUL */
#define LWI_PHASE 64   /* bytes of a communicator's phase, with its NUL */
#define LWI_BROKEN 640 /* bytes of the watchdog's message kept on a broken communicator */
#define LWI_ABOUT 512  /* bytes of lw_comm_about's line, with its NUL */

/* A backend: collectives start on a request and complete through test / wait, so that every
 * wait can go through the watchdog's deadline. Barrier, broadcast, all-reduce and all-gather-v
 * also have a blocking form, taken when req is NULL (the watchdog is off: MPI's blocking
 * collectives are faster than a start and a wait). Counts are elements, each at most INT32_MAX
 * (comm.c splits larger broadcasts and blocking all-reduces, and holds the collectives with
 * counts to max_count); a reduce-scatter reads send[0..shard * size) and writes recv[0..shard),
 * a reduce-scatter-v reads send[0..total) and writes recv[0..counts[rank]). counts (one per
 * rank, >= 0, checked) are [borrowed] for the call only: a backend that reads them later keeps
 * its own copy (MPI: in the request's ints). Segment r of a bucket starts at displ[r], the sum
 * of counts[0..r). A host-memory backend is never called for one rank (its collectives are the
 * identity there, or a copy comm.c makes: all-to-all-v), nor for collectives with counts that
 * move nothing (total 0, alike on every rank; not all-to-all-v, whose totals differ between
 * ranks); a device backend is called for one rank, since it must at least move device memory
 * (all-gather-v, all-to-all-v) and completes its requests with the device's work. */
typedef struct lwi_comm_backend {
    const char *name;
    bool host_memory;             /* moves host memory (MPI, self): starts after a stream sync */
    bool in_place_reduce_scatter; /* writes the sum into the rank's shard of the bucket itself:
                                     reduce_scatter_start(c, bucket, bucket + rank * shard, ...),
                                     reduce_scatterv_start(c, bucket, bucket + displ[rank], ...);
                                     otherwise into the request's scratch, copied on completion */
    int64_t max_count; /* the most elements a collective with counts (reduce-scatter-v, the
                          all-gather of segments) moves in all, and all-to-all-v sends and
                          receives, each: it bounds every count and displacement too (MPI:
                          INT32_MAX, its counts and displacements are int); 0: no limit but
                          comm.c's (bytes within int64) */
    lw_status (*split)(lw_comm *comm, int32_t color, int32_t key, lw_comm **out);
    lw_status (*barrier)(lw_comm *comm, lw_request *req);
    lw_status (*broadcast)(lw_comm *comm, void *data, int64_t bytes, int32_t root,
                           lw_request *req);
    lw_status (*allreduce)(lw_comm *comm, void *data, int64_t count, lw_dtype dtype,
                           lw_reduce_op op, lw_request *req);
    /* The sums (reduce_scatter_start, reduce_scatterv_start, and allreduce with
     * LW_REDUCE_SUM) take dtype F32 or BF16 (comm.c checks); bf16 rounds as docs/c_api.md says
     * of each backend. Counts and shards are elements of dtype. */
    lw_status (*reduce_scatter_start)(lw_comm *comm, const void *send, void *recv,
                                      int64_t shard, lw_dtype dtype, lw_request *req);
    lw_status (*allgather_start)(lw_comm *comm, void *bucket, int64_t shard, lw_dtype dtype,
                                 lw_request *req);
    /* Variable-count reduce-scatter: nonblocking only (req never NULL); as reduce_scatter_start,
     * in place or into scratch (see in_place_reduce_scatter). */
    lw_status (*reduce_scatterv_start)(lw_comm *comm, const void *send, void *recv,
                                       const int64_t *counts, lw_dtype dtype, lw_request *req);
    /* Rank r's counts[r] elements of dtype to recv + displ[r] on every rank; send_count =
     * counts[rank]. In place when send is this rank's own segment of recv (send == recv +
     * displ[rank] elements: the all-gather of segments); otherwise send must not overlap recv
     * (legacy mode's all-gather-v, f32). */
    lw_status (*allgatherv)(lw_comm *comm, const void *send, int64_t send_count, void *recv,
                            const int64_t *counts, lw_dtype dtype, lw_request *req);
    /* All-to-all-v: nonblocking only (req never NULL). send_counts[j] elements of dtype from
     * send + sdispl[j] to rank j, recv_counts[j] from rank j into recv + rdispl[j] (displacements
     * the prefix sums), this rank's own part included; send and recv do not overlap; each total
     * within max_count (checked). Called on every rank even when both totals are 0 (a peer may
     * still send or receive, and MPI numbers its collectives), for one rank only by a device
     * backend. */
    lw_status (*alltoallv_start)(lw_comm *comm, const void *send, const int64_t *send_counts,
                                 void *recv, const int64_t *recv_counts, lw_dtype dtype,
                                 lw_request *req);
    lw_status (*test)(lw_request *req, bool *done);
    lw_status (*wait)(lw_request *req);
    void (*abort)(lw_comm *comm, int32_t code);
    void (*free)(lw_comm *comm);
    /* Optional: lets go of what req->handle holds (NCCL: a CUDA event) before the core frees
     * the handle itself, when the request is freed or next used on another backend. Must not
     * need the communicator: a request may outlive it. NULL: the handle is plain memory. */
    void (*release)(lw_request *req);
} lwi_comm_backend;

struct lw_comm {
    const lwi_comm_backend *backend;
    int32_t rank;
    int32_t size;
    void *impl;        /* backend data (the MPI communicator) */
    lw_device *device; /* [borrowed] the device whose memory a device backend moves; NULL: host
                          memory only (self, MPI) */
    lw_stream *stream; /* [borrowed] collectives are ordered after it (lw_comm_set_stream) */
    lw_comm_counter counters[LWI_COMM_OPS];
    lw_request *blocking; /* [owned] request for the blocking forms of the collectives */
    lw_request *active;   /* [borrowed] requests in flight, completed before the comm is freed */
    /* the watchdog (watchdog.c) */
    double timeout;              /* seconds a collective may be in flight; 0 = no watchdog */
    bool yield;                  /* more ranks than cores, MPI not yielding: yield between polls */
    int64_t seq;                 /* collectives started on this communicator */
    char phase[LWI_PHASE];       /* what the caller is doing ("step 12"); "" = unset */
    char next_label[LWI_LABEL];  /* label of the next collective started (lw_comm_set_label) */
    bool broken;                 /* a collective timed out: every later one fails at once */
    char broken_why[LWI_BROKEN]; /* ... with this message */
    char about[LWI_ABOUT];       /* a device communicator: which kind, and why (lw_comm_about) */
};

struct lw_request {
    lw_comm *comm;     /* the communicator of the active collective; NULL when idle */
    lw_stream *stream; /* [borrowed] its collectives are ordered after it; NULL: the comm's */
    lw_comm_op op;
    void *scratch; /* [owned] reduce-scatter result before it is copied into the bucket */
    int64_t scratch_capacity; /* its bytes */
    void *copy_to; /* reduce-scatter: where the result goes on completion */
    int64_t copy_bytes;
    void *handle; /* [owned] backend handle storage (MPI_Request), allocated on first use */
    const lwi_comm_backend *handle_backend; /* the backend whose handle it is (see release) */
    int *ints;    /* [owned] backend integers that live as long as the collective (counts) */
    int64_t ints_capacity;
    /* for the watchdog: what is in flight, since when */
    double started; /* lwi_now() when it started */
    int64_t seq;    /* its number on its communicator */
    int64_t bytes;  /* its payload */
    char label[LWI_LABEL]; /* lw_request_set_label: what every collective on it is for */
    char once[LWI_LABEL];  /* lw_comm_set_label: what this one collective is for */
    char phase[LWI_PHASE]; /* the communicator's phase when it started */
    lw_request *next_active; /* the comm's list of requests in flight */
    lw_request *prev_active;
};


/* bf16 (the top half of an f32's bits) to f32: exact. */
static inline float lwi_bf16_to_f32(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* f32 to bf16, rounded to nearest, ties to even (a NaN stays a NaN, made quiet; past bf16's
 * largest finite value the sum rounds to infinity as IEEE's rounding does). */
static inline uint16_t lwi_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* The sum of two bf16 values as bf16: widened to f32, added, rounded once. Their f32 sum is
 * exact unless their exponents differ by more than 15, and then the smaller is below 2^-14 of
 * the larger, too little to reach a bf16 rounding boundary: either way the result is the
 * correctly rounded bf16 sum. The MPI backend's sums in bf16 add with it. */
static inline uint16_t lwi_bf16_add(uint16_t a, uint16_t b) {
    return lwi_f32_to_bf16(lwi_bf16_to_f32(a) + lwi_bf16_to_f32(b));
}

/* A communicator object around a backend (counters zero, blocking request allocated). */
lw_status lwi_comm_make(const lwi_comm_backend *backend, int32_t rank, int32_t size, void *impl,
                        lw_comm **out);
/* watchdog.c */
/* LWOPT_TIMEOUT in seconds, or 600 when unset; LW_ERR_INVALID naming a bad value. */
lw_status lwi_comm_env_timeout(double *seconds);
/* Waits for req (in flight on a comm with a timeout) by polling: LW_OK, the backend's error, or
 * LW_ERR_TIMEOUT once req has been in flight longer than the timeout (the comm is then broken:
 * lwi_comm_check_broken fails). */
lw_status lwi_watch_wait(lw_request *req);
/* LW_ERR_TIMEOUT (comm broken) if req, not completed at time `now`, is past its deadline. */
lw_status lwi_watch_check(lw_request *req, double now);

/* request.c: lets go of req's backend handle (the backend's release first: NCCL's holds a CUDA
 * event); waits for req (in flight) without counting the time (the blocking forms count theirs
 * whole), then completes, releases or abandons it. */
void lwi_request_drop_handle(lw_request *req);
lw_status lwi_request_finish(lw_request *req);
/* Whether any collective of this process timed out (then MPI must not be finalised: that would
 * wait for the stopped rank). */
extern bool lwi_comm_timed_out;
/* LW_ERR_TIMEOUT with the original message if a collective on c timed out; LW_OK otherwise. */
lw_status lwi_comm_check_broken(const lw_comm *c);

/* checks.c: the collectives' argument checks, each failing with the message that names the
 * collective (what: "reduce-scatter", ...) and the offending value. */
/* A dtype's name for a message: "unknown" for a value outside lw_dtype. */
const char *lwi_comm_dtype_word(lw_dtype dtype);
/* The sums take f32 or bf16; the all-gathers f32, bf16 or f16 (moved as bits). */
lw_status lwi_comm_check_sum_dtype(lw_dtype dtype, const char *what);
lw_status lwi_comm_check_gather_dtype(lw_dtype dtype, const char *what);
/* A bucket of n >= 0 elements (there when n > 0) in c's size of equal shards. */
lw_status lwi_comm_check_bucket(const lw_comm *c, const void *bucket, int64_t n,
                                const char *what);
/* Counts, one per rank, each >= 0, their sum [out] *total within int64 bytes whatever the
 * dtype; which: "" for segments, "send " or "receive " for all-to-all-v's two sets. */
lw_status lwi_comm_sum_counts(const lw_comm *c, const int64_t *counts, const char *what,
                              const char *which, int64_t *total);
/* A bucket of segments (counts[r] elements of rank r, in rank order): the counts, the bucket
 * there when they add up to anything, the backend's limit on one collective. */
lw_status lwi_comm_check_segments(const lw_comm *c, const void *bucket,
                                  const int64_t *counts, const char *what, int64_t *total);
/* What an all-to-all-v can check on its own rank: the dtype, both sets of counts with [out]
 * their totals, the own part alike in both, the buffers there and apart, the backend's limit
 * each way. */
lw_status lwi_comm_check_alltoallv(const lw_comm *c, const void *send,
                                   const int64_t *send_counts, const void *recv,
                                   const int64_t *recv_counts, lw_dtype dtype, int64_t *sent,
                                   int64_t *received);

/* The worlds of the backends (world.c chooses one): one rank (self.c); MPI (mpi.c), whose
 * start-up the timeout (seconds, 0: none) bounds, as it then bounds the world's collectives. */
lw_status lwi_comm_self_world(double timeout, lw_comm **out);
lw_status lwi_comm_mpi_world(double timeout, lw_comm **out);

/* guard.c: a deadline of `seconds` (0: none, *out NULL) around an MPI call, named in `what`,
 * that blocks until every rank arrives and cannot be polled; past it the process ends with one
 * line naming this rank, the call and the timeout. End it when the call returns. */
typedef struct lwi_guard lwi_guard;
lw_status lwi_guard_begin(double seconds, const char *what, lwi_guard **out);
void lwi_guard_end(lwi_guard *g);

/* The calls a device library's communicator (NCCL's, src/cuda/nccl.c and nccl_collectives.c)
 * makes on the core's communicators, lent with the device table's comm_new (device.c). */
typedef struct lwi_comm_calls {
    /* lwi_comm_make: a communicator object around the library's backend */
    lw_status (*make)(const lwi_comm_backend *backend, int32_t rank, int32_t size, void *impl,
                      lw_comm **out);
    /* lw.h's collectives, for the parent: its bootstrap and every collective on host memory go
     * through them, under the parent's checks, counters and watchdog */
    lw_status (*broadcast)(lw_comm *comm, void *data, int64_t bytes, int32_t root);
    lw_status (*allreduce)(lw_comm *comm, void *data, int64_t count, lw_dtype dtype,
                           lw_reduce_op op);
    lw_status (*barrier)(lw_comm *comm);
    lw_status (*split)(lw_comm *comm, int32_t color, int32_t key, lw_comm **out);
    lw_status (*abort)(lw_comm *comm, int32_t code);
    void (*free)(lw_comm *comm);
} lwi_comm_calls;

/* staged.c: a device communicator that copies the device's memory through host memory and moves
 * it with parent's collectives (lw_comm_device_new_kind, LW_DEVICE_COMM_STAGED). */
lw_status lwi_comm_staged_new(lw_comm *parent, lw_device *device, lw_comm **out);

#endif
