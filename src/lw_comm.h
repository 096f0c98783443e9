/* lw_comm.h: the communicator: a group of ranks and the collectives lwopt needs, over "self"
 * (one rank), "mpi", and device communicators ("nccl", "staged") that move a device's memory.
 * Every rank issues the same collectives in the same order. Nonblocking collectives run on an
 * lw_request and progress only while polled. A watchdog fails a collective in flight too long
 * (LW_ERR_TIMEOUT) and breaks the communicator. The sums in bf16, the counters, the
 * variable-count forms and the watchdog in detail: docs/c_api.md.
 */
#ifndef LW_COMM_API_H
#define LW_COMM_API_H

#include "lw_base.h"
#include "lw_device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* LW_CDEF_BEGIN */

typedef struct lw_comm lw_comm;
typedef struct lw_request lw_request;

typedef enum lw_reduce_op {
    LW_REDUCE_SUM = 0,
    LW_REDUCE_MAX = 1,
    LW_REDUCE_MIN = 2
} lw_reduce_op;

/* "sum", "max", "min" (names as lw_dtype_name). */
const char *lw_reduce_op_name(lw_reduce_op op);
lw_status lw_reduce_op_from_name(const char *name, lw_reduce_op *out);

/* Kinds of operation, for the counters. */
typedef enum lw_comm_op {
    LW_COMM_ALLREDUCE = 0,
    LW_COMM_REDUCE_SCATTER = 1,
    LW_COMM_ALLGATHER = 2,
    LW_COMM_ALLGATHERV = 3,
    LW_COMM_BROADCAST = 4,
    LW_COMM_BARRIER = 5,
    LW_COMM_ALLTOALL = 6
} lw_comm_op;

/* Per kind of operation: calls, bytes this rank sends under ring algorithms (as docs/c_api.md
 * counts them), and seconds spent inside lwopt's calls for it (the communication left exposed). */
typedef struct lw_comm_counter {
    int64_t calls;
    int64_t bytes;
    double seconds;
} lw_comm_counter;

/* ---- communicators ------------------------------------------------------------------------- */

/* The world: MPI when an MPI launcher started the process (or LWOPT_COMM=mpi), one rank
 * otherwise (or LWOPT_COMM=self). MPI starts on first use and is finalised with the last MPI
 * communicator or at exit. [out] owned. */
lw_status lw_comm_init(lw_comm **out);
/* lw_comm_init with the watchdog's timeout (seconds; < 0: LWOPT_TIMEOUT's, else 600; 0: none),
 * which also bounds MPI's start-up and its other blocking calls: past it the process ends
 * (status 1, one line on stderr). [out] owned. */
lw_status lw_comm_init_timeout(double seconds, lw_comm **out);
/* A one-rank communicator. [out] owned. */
lw_status lw_comm_self(lw_comm **out);
/* Whether an MPI launcher (mpirun, srun, any PMI/PMIx launcher) started this process, from the
 * environment, before MPI starts; [out] *rank and *size (each optional) as the launcher gave
 * them, 0 and 1 when not launched. */
bool lw_comm_launched(int32_t *rank, int32_t *size);
/* This process's rank among the job's processes on its machine, from the launcher's
 * environment before MPI starts (its variables: docs/c_api.md); 0 when not launched, -1 when
 * launched without any of them. */
int32_t lw_comm_local_rank(void);
void lw_comm_free(lw_comm *comm);
int32_t lw_comm_rank(const lw_comm *comm);
int32_t lw_comm_size(const lw_comm *comm);
/* "self", "mpi", "nccl" or "staged" (lw_comm_device_new). [borrowed] static string. */
const char *lw_comm_backend(const lw_comm *comm);
/* Why a device communicator is the kind it is, one line ("staged: ranks 0 and 1 share cuda:0
 * (GPU-6f2c...), and NCCL takes one rank per GPU"); "" for the others. [borrowed] */
const char *lw_comm_about(const lw_comm *comm);
/* Collectives started on comm from now on are ordered after the work issued so far on stream
 * (NULL: the CPU's), unless their request has a stream of its own (lw_request_set_stream). */
lw_status lw_comm_set_stream(lw_comm *comm, lw_stream *stream);
/* [borrowed] the stream set, the CPU's when none was. */
lw_stream *lw_comm_stream(const lw_comm *comm);
/* Whether comm's collectives move device's memory (self and MPI: host memory only; a device
 * communicator: its device's memory, and host memory through its parent). */
bool lw_comm_reaches(const lw_comm *comm, const lw_device *device);

/* The kinds of device communicator: the device library's own (NCCL, one rank per GPU), device
 * memory staged through host memory and the parent's collectives, or AUTO: NCCL when it can,
 * else staged (LWOPT_DEVICE_COMM decides when set). */
typedef enum lw_device_comm {
    LW_DEVICE_COMM_AUTO = 0,
    LW_DEVICE_COMM_NCCL = 1,
    LW_DEVICE_COMM_STAGED = 2
} lw_device_comm;
/* "auto", "nccl", "staged". */
const char *lw_device_comm_name(lw_device_comm kind);
lw_status lw_device_comm_from_name(const char *name, lw_device_comm *out);

/* A communicator of parent's ranks (same numbers) whose collectives move device's memory, of
 * the kind asked, which every rank resolves alike (collective over parent). Host-memory
 * collectives still go through parent, which must outlive it. LW_ERR_UNSUPPORTED when the
 * device needs none (the CPU) or cannot have the kind; LW_ERR_INVALID when parent is a device
 * communicator. [out] owned. */
lw_status lw_comm_device_new_kind(lw_comm *parent, lw_device *device, lw_device_comm kind,
                                  lw_comm **out);
/* lw_comm_device_new_kind with LW_DEVICE_COMM_AUTO. */
lw_status lw_comm_device_new(lw_comm *parent, lw_device *device, lw_comm **out);
/* Ranks with equal color form a new communicator, ordered by key (collective). [out] owned. */
lw_status lw_comm_split(lw_comm *comm, int32_t color, int32_t key, lw_comm **out);

/* ---- collectives ----------------------------------------------------------------------------
 * With a req the collective starts and returns (finish with lw_request_wait); a NULL req
 * blocks. The sums on a request take F32 or BF16 and refuse any other dtype before anything
 * starts, naming the collective and the dtype; bf16 sums round at each step (docs/c_api.md). */

lw_status lw_comm_barrier(lw_comm *comm);
lw_status lw_comm_broadcast(lw_comm *comm, void *data, int64_t bytes, int32_t root);
/* In place over count elements of dtype F32, F64 or I64, or BF16 for LW_REDUCE_SUM. */
lw_status lw_comm_allreduce(lw_comm *comm, void *data, int64_t count, lw_dtype dtype,
                            lw_reduce_op op);
/* Nonblocking in-place sum of count elements (F32 or BF16) on req. */
lw_status lw_comm_allreduce_start(lw_comm *comm, void *data, int64_t count, lw_dtype dtype,
                                  lw_request *req);
/* Sum over ranks of bucket[0..count) (F32 or BF16, count divisible by the size) into this
 * rank's shard bucket[rank * count/size, +count/size); the rest is left as it was. */
lw_status lw_comm_reduce_scatter(lw_comm *comm, void *bucket, int64_t count, lw_dtype dtype,
                                 lw_request *req);
/* In place: every rank's shard of bucket[0..count) (count divisible by the size) to all ranks;
 * dtype F32, BF16 or F16. */
lw_status lw_comm_allgather(lw_comm *comm, void *bucket, int64_t count, lw_dtype dtype,
                            lw_request *req);
/* The variable-count forms, for layouts without padding: segment r of the bucket is
 * counts[r] elements at the sum of counts[0..r); counts [borrowed] for the call, one per rank,
 * the same on every rank (checks and limits: docs/c_api.md). */
/* Sum over ranks of the bucket (F32 or BF16) into this rank's segment; the rest is left as it
 * was. */
lw_status lw_comm_reduce_scatterv(lw_comm *comm, void *bucket, const int64_t *counts,
                                  lw_dtype dtype, lw_request *req);
/* In place: every rank's segment (F32, BF16 or F16) to all ranks; this rank's own is what it
 * sends, left as it was. */
lw_status lw_comm_allgather_segments(lw_comm *comm, void *bucket, const int64_t *counts,
                                     lw_dtype dtype, lw_request *req);
/* All-to-all with variable counts (mixture-of-experts dispatch and combine): send_counts[j]
 * elements to rank j, recv_counts[j] from it, each at the prefix sum of its counts; dtype F32,
 * BF16, F16 or I64; send and recv must not overlap. Counts must agree across ranks, which is
 * checked only for the own part; every rank calls it (protocol, errors: docs/c_api.md). */
lw_status lw_comm_alltoallv(lw_comm *comm, const void *send, const int64_t *send_counts,
                            void *recv, const int64_t *recv_counts, lw_dtype dtype,
                            lw_request *req);
/* Variable-size all-gather: rank r contributes counts[r] elements of dtype (F32, BF16 or F16,
 * moved as bits); recv holds them in rank order. send_count must equal counts[rank]. Blocking. */
lw_status lw_comm_allgatherv(lw_comm *comm, const void *send, int64_t send_count, void *recv,
                             const int64_t *counts, lw_dtype dtype);
/* Ends every rank of the job (MPI_Abort); returns only on the self backend. */
lw_status lw_comm_abort(lw_comm *comm, int32_t code);
lw_status lw_comm_counter_get(const lw_comm *comm, lw_comm_op op, lw_comm_counter *out);
void lw_comm_counters_reset(lw_comm *comm);
/* "all-reduce", "reduce-scatter", "all-gather", "all-gather-v", "broadcast", "barrier",
 * "all-to-all"; "unknown" otherwise (no _from_name). [borrowed] static string. */
const char *lw_comm_op_name(lw_comm_op op);

/* ---- the watchdog ---------------------------------------------------------------------------- */

/* Seconds a collective on comm may be in flight before it fails; 0 turns the watchdog off.
 * LW_ERR_INVALID for a negative, NaN or infinite value. */
lw_status lw_comm_set_timeout(lw_comm *comm, double seconds);
/* The timeout in seconds (0 = off; 0 for NULL). */
double lw_comm_timeout(const lw_comm *comm);
/* What the caller is doing ("step 12"), named by a timeout's message for collectives started
 * from now on. Copied, at most 63 bytes kept; NULL or "" clears. */
lw_status lw_comm_set_phase(lw_comm *comm, const char *phase);
/* What the next collective on comm is for, as it reads after "the all-reduce of" ("the global
 * gradient norm"); that collective only. Copied, at most 63 bytes; NULL clears. */
lw_status lw_comm_set_label(lw_comm *comm, const char *label);

/* ---- requests ------------------------------------------------------------------------------ */

/* A reusable handle for one nonblocking collective at a time, with the scratch a backend that
 * cannot reduce in place needs. [out] owned. */
lw_status lw_request_new(lw_request **out);
/* Waits for an active request, then frees. */
void lw_request_free(lw_request *req);
/* Progresses the request; *done once it completed (or was never started). LW_ERR_TIMEOUT once
 * in flight longer than its communicator's timeout. */
lw_status lw_request_test(lw_request *req, bool *done);
/* Blocks until the request completed; a no-op when not active. LW_ERR_TIMEOUT as
 * lw_request_test; after an error the request is no longer active. */
lw_status lw_request_wait(lw_request *req);
bool lw_request_active(const lw_request *req);
/* The stream the collectives started on req are ordered after; NULL: the communicator's.
 * LW_ERR_STATE while a collective is in flight on req. */
lw_status lw_request_set_stream(lw_request *req, lw_stream *stream);
/* What every collective started on req is for ("buffer 1 bucket 2"), named by a timeout's
 * message unless lw_comm_set_label named it. Copied, at most 63 bytes; NULL clears. */
lw_status lw_request_set_label(lw_request *req, const char *label);

/* LW_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* LW_COMM_API_H */
