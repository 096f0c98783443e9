/* mpi.c: the MPI backend. Communicators are duplicates of MPI_COMM_WORLD (or splits of
 * them) with errors returned, not fatal; MPI is initialised on first use and finalised when
 * the last communicator is freed, or at exit. Every collective has a nonblocking form
 * (MPI_I...), so that comm.c can wait for it under the watchdog's deadline; reduce-scatters run
 * here as rings of sends and receives (mpi_ring.c), faster than Open MPI's own. Sums in bf16
 * (which MPI lacks) move bf16's bits: the ring adds them itself, the all-reduce through an
 * operation of ours (bf16_sum), both rounding each addition to bf16 (docs/c_api.md says why). */
#include "comm/comm.h"
#include "comm/mpi_ring.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int live_comms;     /* MPI communicators alive */
static bool we_initialised; /* MPI_Init came from here, so MPI_Finalize is ours too */
static bool poll_yields;    /* the watchdog's polls give the core up (see mpi_yields) */
static double end_timeout;  /* bounds MPI_Finalize: the world's timeout when MPI started */
/* MPI has no bf16: the all-reduce's sum in bf16 is an operation of ours on MPI_UINT16_T
 * (bf16_sum), made on first use (MPI_OP_NULL until then) and freed before MPI_Finalize. */
static MPI_Op bf16_sum_op = MPI_OP_NULL;

#define MPI_CHECK(call, what)                                                                  \
    do {                                                                                       \
        int mpi_code = (call);                                                                 \
        if (mpi_code != MPI_SUCCESS) return lwi_mpi_fail(mpi_code, what);                      \
    } while (0)

static MPI_Comm *handle_of(lw_comm *c) { return (MPI_Comm *)c->impl; }

/* Whether this process may call MPI_Finalize: not after a collective timed out, since
 * MPI_Finalize would wait for the rank that stopped; the launcher ends the job instead. */
static bool may_finalize(void) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    return we_initialised && !finalized && !lwi_comm_timed_out;
}

/* MPI_Finalize waits for every rank: under the start-up watchdog's deadline (guard.c). */
static void finalize(void) {
    if (bf16_sum_op != MPI_OP_NULL) MPI_Op_free(&bf16_sum_op); /* sets it to MPI_OP_NULL */
    lwi_guard *g = NULL;
    lwi_guard_begin(end_timeout, "MPI_Finalize (the end of the job, which waits for every rank)",
                    &g);
    MPI_Finalize();
    lwi_guard_end(g);
}

static void finalize_at_exit(void) {
    if (may_finalize()) finalize();
}

static MPI_Datatype mpi_type(lw_dtype dtype) {
    switch (dtype) {
    case LW_DTYPE_F32: return MPI_FLOAT;
    case LW_DTYPE_F64: return MPI_DOUBLE;
    case LW_DTYPE_I64: return MPI_INT64_T;
    default: return MPI_UINT16_T; /* bf16 / f16: their bits (bf16 sums: bf16_sum_op) */
    }
}

/* inout[i] = in[i] + inout[i] in bf16, rounded once per pair (lwi_bf16_add): each of MPI's
 * reduction steps rounds, as the ring's steps do (mpi_ring.c); the order of the steps is MPI's.
 * Commutative (a + b and b + a round alike), though not associative, as MPI_SUM on floats. */
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type; /* MPI_UINT16_T, the only type it is used with */
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = lwi_bf16_add(a[i], b[i]);
}

/* MPI's operation for op over dtype: [out] *out; MPI's own but for the bf16 sum. */
static lw_status mpi_op(lw_reduce_op op, lw_dtype dtype, MPI_Op *out) {
    if (dtype == LW_DTYPE_BF16) { /* the sum: comm.c refuses bf16 with max and min */
        if (bf16_sum_op == MPI_OP_NULL)
            MPI_CHECK(MPI_Op_create(bf16_sum, 1, &bf16_sum_op), "MPI_Op_create (bf16 sum)");
        *out = bf16_sum_op;
        return LW_OK;
    }
    *out = op == LW_REDUCE_MAX ? MPI_MAX : op == LW_REDUCE_MIN ? MPI_MIN : MPI_SUM;
    return LW_OK;
}

/* A request's handle: MPI's request for a collective MPI runs, or a reduce-scatter's ring. */
typedef struct {
    bool is_ring;
    MPI_Request mpi;
    lwi_mpi_ring ring;
} mpi_handle;

static mpi_handle *handle(lw_request *req, bool ring) {
    if (req->handle == NULL) req->handle = calloc(1, sizeof(mpi_handle));
    mpi_handle *h = req->handle;
    if (h != NULL) h->is_ring = ring;
    return h;
}

static MPI_Request *request_handle(lw_request *req) {
    mpi_handle *h = handle(req, false);
    return h ? &h->mpi : NULL;
}

extern const lwi_comm_backend lwi_comm_mpi_backend;

/* Whether MPI's progress (inside MPI_Test too) already yields the core while it waits: OpenMPI's
 * mpi_yield_when_idle, on by default when mpirun oversubscribes the machine. With more ranks
 * than cores and no yield there, the watchdog's polls yield themselves; a second yield per poll
 * only adds latency (measured: 13 -> 34 us for a small all-reduce at 3 ranks on 2 cores). */
static bool mpi_yields(bool flagged) {
    const char *y = getenv("OMPI_MCA_mpi_yield_when_idle");
    if (y == NULL || y[0] == '\0') return flagged;
    return strchr("1tTyYeE", y[0]) != NULL; /* 1, true, yes, enabled */
}

/* Ranks of this job on this machine. */
static int local_ranks(void) {
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    return local ? atoi(local) : 1;
}

/* Wraps an MPI communicator we own (a dup or split) into an lw_comm. */
static lw_status wrap(MPI_Comm mc, lw_comm **out) {
    MPI_Comm *h = malloc(sizeof *h);
    if (h == NULL) {
        MPI_Comm_free(&mc);
        return lwi_fail(LW_ERR_NOMEM, "comm: out of memory");
    }
    *h = mc;
    MPI_Comm_set_errhandler(mc, MPI_ERRORS_RETURN);
    int rank = 0, size = 1;
    MPI_Comm_rank(mc, &rank);
    MPI_Comm_size(mc, &size);
    lw_status st = lwi_comm_make(&lwi_comm_mpi_backend, rank, size, h, out);
    if (st != LW_OK) {
        MPI_Comm_free(h);
        free(h);
        return st;
    }
    (*out)->yield = poll_yields;
    live_comms++;
    return LW_OK;
}

lw_status lwi_comm_mpi_world(double timeout, lw_comm **out) {
    int initialised = 0, finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return lwi_fail(LW_ERR_STATE, "comm: MPI was already finalised");
    MPI_Initialized(&initialised);
    lwi_guard *g = NULL;
    if (!initialised) {
        /* a rank stopped before it gets here leaves the others in MPI_Init_thread for good */
        lw_status st = lwi_guard_begin(timeout, "MPI_Init_thread (MPI's start-up, which waits "
                                       "for every rank of the job)", &g);
        if (st != LW_OK) return st;
        int provided = 0;
        const int code = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        lwi_guard_end(g);
        if (code != MPI_SUCCESS) return lwi_mpi_fail(code, "MPI_Init");
        we_initialised = true;
        end_timeout = timeout;
        atexit(finalize_at_exit);
        lwi_blas_share_cores(local_ranks());
    }
    /* mpirun says so when it placed more ranks than slots */
    const char *over = getenv("OMPI_MCA_mpi_oversubscribe");
    const bool flagged = over != NULL && strcmp(over, "1") == 0;
    const bool over_cores = flagged || local_ranks() > sysconf(_SC_NPROCESSORS_ONLN);
    poll_yields = over_cores && !mpi_yields(flagged);
    MPI_Comm world;
    lw_status st = lwi_guard_begin(timeout, "MPI_Comm_dup (the world's communicator, made by "
                                   "every rank together)", &g);
    if (st != LW_OK) return st;
    const int code = MPI_Comm_dup(MPI_COMM_WORLD, &world);
    lwi_guard_end(g);
    if (code != MPI_SUCCESS) return lwi_mpi_fail(code, "MPI_Comm_dup");
    return wrap(world, out);
}

static lw_status mpi_split(lw_comm *c, int32_t color, int32_t key, lw_comm **out) {
    MPI_Comm part;
    lwi_guard *g = NULL;
    lw_status st = lwi_guard_begin(c->timeout, "MPI_Comm_split (a communicator made by every "
                                   "rank of its parent together)", &g);
    if (st != LW_OK) return st;
    const int code = MPI_Comm_split(*handle_of(c), color, key, &part);
    lwi_guard_end(g);
    if (code != MPI_SUCCESS) return lwi_mpi_fail(code, "MPI_Comm_split");
    return wrap(part, out);
}

static lw_status check_int(int64_t n, const char *what) {
    if (n > 0x7fffffff)
        return lwi_fail(LW_ERR_UNSUPPORTED, "comm: %s shard of %lld elements exceeds MPI's int "
                        "count; use smaller buckets", what, (long long)n);
    return LW_OK;
}

/* Barrier, broadcast, all-reduce and all-gather-v: with req, the nonblocking form started on
 * it; without, MPI's blocking collective. */
static lw_status mpi_barrier(lw_comm *c, lw_request *req) {
    if (req == NULL) {
        MPI_CHECK(MPI_Barrier(*handle_of(c)), "MPI_Barrier");
        return LW_OK;
    }
    MPI_Request *h = request_handle(req);
    if (h == NULL) return lwi_fail(LW_ERR_NOMEM, "comm: out of memory");
    MPI_CHECK(MPI_Ibarrier(*handle_of(c), h), "MPI_Ibarrier");
    return LW_OK;
}

static lw_status mpi_broadcast(lw_comm *c, void *data, int64_t bytes, int32_t root,
                               lw_request *req) {
    lw_status st = check_int(bytes, "broadcast");
    if (st != LW_OK) return st;
    if (req == NULL) {
        MPI_CHECK(MPI_Bcast(data, (int)bytes, MPI_BYTE, root, *handle_of(c)), "MPI_Bcast");
        return LW_OK;
    }
    MPI_Request *h = request_handle(req);
    if (h == NULL) return lwi_fail(LW_ERR_NOMEM, "comm: out of memory");
    MPI_CHECK(MPI_Ibcast(data, (int)bytes, MPI_BYTE, root, *handle_of(c), h), "MPI_Ibcast");
    return LW_OK;
}

static lw_status mpi_allreduce(lw_comm *c, void *data, int64_t n, lw_dtype dtype, lw_reduce_op op,
                               lw_request *req) {
    lw_status st = check_int(n, "all-reduce");
    MPI_Op mop = MPI_OP_NULL;
    if (st != LW_OK || (st = mpi_op(op, dtype, &mop)) != LW_OK) return st;
    if (req == NULL) {
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, (int)n, mpi_type(dtype), mop, *handle_of(c)),
                  "MPI_Allreduce");
        return LW_OK;
    }
    MPI_Request *h = request_handle(req);
    if (h == NULL) return lwi_fail(LW_ERR_NOMEM, "comm: out of memory");
    MPI_CHECK(
        MPI_Iallreduce(MPI_IN_PLACE, data, (int)n, mpi_type(dtype), mop, *handle_of(c), h),
        "MPI_Iallreduce");
    return LW_OK;
}

static lw_status mpi_reduce_scatter(lw_comm *c, const void *send, void *recv, int64_t shard,
                                    lw_dtype dtype, lw_request *req) {
    lw_status st = check_int(shard, "reduce-scatter");
    if (st != LW_OK) return st;
    mpi_handle *h = handle(req, true);
    if (h == NULL) return lwi_fail(LW_ERR_NOMEM, "comm: out of memory");
    return lwi_mpi_ring_start(&h->ring, *handle_of(c), send, recv, NULL, shard, dtype, req->seq);
}

static lw_status mpi_allgather(lw_comm *c, void *bucket, int64_t shard, lw_dtype dtype,
                               lw_request *req) {
    lw_status st = check_int(shard, "all-gather");
    if (st != LW_OK) return st;
    MPI_Request *h = request_handle(req);
    if (h == NULL) return lwi_fail(LW_ERR_NOMEM, "comm: out of memory");
    MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, bucket, (int)shard,
                             mpi_type(dtype), *handle_of(c), h),
              "MPI_Iallgather");
    return LW_OK;
}

/* Room in req for n ints that live as long as its collective (MPI's nonblocking collectives
 * read their counts and displacements until they complete; the caller's may be gone by then). */
static int *request_ints(lw_request *req, int64_t n) {
    if (n > req->ints_capacity) {
        int *grown = realloc(req->ints, sizeof(int) * (size_t)n);
        if (grown == NULL) return NULL;
        req->ints = grown;
        req->ints_capacity = n;
    }
    return req->ints;
}

/* counts as MPI's ints in cnt[0..size), and with displs, their displacements; LW_ERR_UNSUPPORTED
 * where one does not fit (comm.c holds the collectives with counts to max_count, their total). */
static lw_status mpi_counts(const lw_comm *c, const int64_t *counts, int *cnt, int *displs,
                            const char *what) {
    int64_t at = 0;
    for (int32_t r = 0; r < c->size; r++) {
        if (counts[r] > 0x7fffffff || at > 0x7fffffff)
            return check_int(counts[r] > at ? counts[r] : at, what);
        cnt[r] = (int)counts[r];
        if (displs != NULL) displs[r] = (int)at;
        at += counts[r];
    }
    return LW_OK;
}

/* The reduce-scatter-v from the bucket into recv, which comm.c makes the request's scratch
 * (copied to this rank's segment on completion). */
static lw_status mpi_reduce_scatterv(lw_comm *c, const void *send, void *recv,
                                     const int64_t *counts, lw_dtype dtype, lw_request *req) {
    int *cnt = request_ints(req, c->size);
    mpi_handle *h = handle(req, true);
    if (cnt == NULL || h == NULL) return lwi_fail(LW_ERR_NOMEM, "comm: out of memory");
    lw_status st = mpi_counts(c, counts, cnt, NULL, "reduce-scatter-v");
    if (st != LW_OK) return st;
    return lwi_mpi_ring_start(&h->ring, *handle_of(c), send, recv, cnt, 0, dtype, req->seq);
}

static lw_status mpi_allgatherv(lw_comm *c, const void *send, int64_t n, void *recv,
                                const int64_t *counts, lw_dtype dtype, lw_request *req) {
    int *ints = req ? request_ints(req, 2 * (int64_t)c->size)
                    : malloc(sizeof(int) * (size_t)c->size * 2);
    if (ints == NULL) return lwi_fail(LW_ERR_NOMEM, "comm: out of memory");
    int *cnt = ints, *displs = ints + c->size;
    lw_status st = mpi_counts(c, counts, cnt, displs, "all-gather-v");
    if (st == LW_OK) {
        /* this rank's own segment of recv is MPI's in-place form, which gathers around it */
        const char *own = (const char *)recv + (size_t)displs[c->rank] * lwi_dtype_size(dtype);
        const void *from = send == own ? MPI_IN_PLACE : send;
        const MPI_Datatype type = mpi_type(dtype);
        MPI_Comm mc = *handle_of(c);
        MPI_Request *h = req ? request_handle(req) : NULL;
        int code = MPI_SUCCESS;
        if (req == NULL) {
            code = MPI_Allgatherv(from, (int)n, type, recv, cnt, displs, type, mc);
            st = code == MPI_SUCCESS ? LW_OK : lwi_mpi_fail(code, "MPI_Allgatherv");
        } else if (h == NULL) {
            st = lwi_fail(LW_ERR_NOMEM, "comm: out of memory");
        } else {
            code = MPI_Iallgatherv(from, (int)n, type, recv, cnt, displs, type, mc, h);
            st = code == MPI_SUCCESS ? LW_OK : lwi_mpi_fail(code, "MPI_Iallgatherv");
        }
    }
    if (req == NULL) free(ints);
    return st;
}

/* MPI_Ialltoallv with the counts and displacements as ints in the request (MPI reads them until
 * the collective completes), send and receive counts alike: scnt, sdispl, rcnt, rdispl. */
static lw_status mpi_alltoallv(lw_comm *c, const void *send, const int64_t *send_counts,
                               void *recv, const int64_t *recv_counts, lw_dtype dtype,
                               lw_request *req) {
    const int64_t size = c->size;
    int *ints = request_ints(req, 4 * size);
    MPI_Request *h = request_handle(req);
    if (ints == NULL || h == NULL) return lwi_fail(LW_ERR_NOMEM, "comm: out of memory");
    int *scnt = ints, *sdispl = ints + size, *rcnt = ints + 2 * size, *rdispl = ints + 3 * size;
    lw_status st = mpi_counts(c, send_counts, scnt, sdispl, "all-to-all-v send");
    if (st == LW_OK) st = mpi_counts(c, recv_counts, rcnt, rdispl, "all-to-all-v receive");
    if (st != LW_OK) return st;
    const MPI_Datatype type = mpi_type(dtype);
    MPI_CHECK(MPI_Ialltoallv(send, scnt, sdispl, type, recv, rcnt, rdispl, type, *handle_of(c), h),
              "MPI_Ialltoallv");
    return LW_OK;
}

static lw_status mpi_test(lw_request *req, bool *done) {
    mpi_handle *h = req->handle;
    if (h->is_ring) return lwi_mpi_ring_test(&h->ring, done);
    int flag = 0;
    MPI_CHECK(MPI_Test(&h->mpi, &flag, MPI_STATUS_IGNORE), "MPI_Test");
    *done = flag != 0;
    return LW_OK;
}

static lw_status mpi_wait(lw_request *req) {
    mpi_handle *h = req->handle;
    if (h->is_ring) return lwi_mpi_ring_wait(&h->ring);
    MPI_CHECK(MPI_Wait(&h->mpi, MPI_STATUS_IGNORE), "MPI_Wait");
    return LW_OK;
}

static void mpi_release(lw_request *req) {
    mpi_handle *h = req->handle;
    if (h != NULL) lwi_mpi_ring_release(&h->ring);
}

static void mpi_abort(lw_comm *c, int32_t code) {
    (void)c;
    MPI_Abort(MPI_COMM_WORLD, code);
}

static void mpi_free(lw_comm *c) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(handle_of(c));
    free(c->impl);
    if (--live_comms == 0 && may_finalize()) finalize();
}

const lwi_comm_backend lwi_comm_mpi_backend = {
    .name = "mpi",
    .host_memory = true,
    .in_place_reduce_scatter = false,
    .split = mpi_split,
    .barrier = mpi_barrier,
    .broadcast = mpi_broadcast,
    .allreduce = mpi_allreduce,
    .max_count = 0x7fffffff, /* MPI's counts and displacements are int */
    .reduce_scatter_start = mpi_reduce_scatter,
    .reduce_scatterv_start = mpi_reduce_scatterv,
    .allgather_start = mpi_allgather,
    .allgatherv = mpi_allgatherv,
    .alltoallv_start = mpi_alltoallv,
    .test = mpi_test,
    .wait = mpi_wait,
    .abort = mpi_abort,
    .free = mpi_free,
    .release = mpi_release,
};
