/* mpi_ring.c: reduce-scatter as a ring of nonblocking sends and receives. Open MPI's
 * nonblocking MPI_Ireduce_scatter(_block) (libnbc) reduces the whole bucket onto one rank and
 * then scatters it: on 2 ranks of one machine a 16 MB bucket took 17 ms, longer than an
 * all-reduce of it (11 ms), and this is the collective every gradient bucket goes through. A
 * ring moves (p - 1) / p of the bucket per rank and spreads the additions over all ranks.
 *
 * Step s (0 .. p - 2): rank r receives the running sum of segment (r - s - 2) mod p from rank
 * r - 1, adds its own part of that segment, and in the same step sends the running sum of
 * segment (r - s - 1) mod p (its own part alone at step 0) to rank r + 1. The last step's
 * segment is r's own, so its sum lands in recv. The order of the additions is fixed by the
 * ranks (rank k's sum is ((x_{k+1} + x_{k+2}) + ...) + x_k), so results repeat run to run.
 *
 * In bf16 the running sums travel as bf16 (half the bytes of f32), so each step rounds: the sum
 * that arrived and this rank's part are widened to f32, added, and rounded to bf16
 * (lwi_bf16_add, the correctly rounded bf16 sum of the two). Rank k's sum is then
 * bf16(...bf16(x_{k+1} + x_{k+2}) ... + x_k): p - 1 roundings, so it differs from the exact sum
 * by at most (p - 1) u / (1 - (p - 1) u) times the sum of |x_r| (u = 2^-8), and at 2 ranks it is
 * the correctly rounded sum. Summing in f32
 * and rounding once would be more accurate, but an f32 running sum on the wire doubles the
 * bytes the bf16 bucket was chosen to halve. */
#include "comm/comm.h"
#include "comm/mpi_ring.h"

#include <stdlib.h>

/* Here rather than in mpi.c, which calls the ring: the two files form a chain, mpi.c above. */
lw_status lwi_mpi_fail(int code, const char *what) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, text, &len);
    return lwi_fail(LW_ERR_IO, "comm: %s failed: %.*s", what, len, text);
}

/* a mod p for a > -p */
static int wrap_rank(int a, int p) { return (a % p + p) % p; }

/* The segment received at step s, and where its running sum goes: recv at the last step, else
 * the partial buffers in turn (the one sent from at step s + 1). */
static int recv_segment(const lwi_mpi_ring *g, int s) { return wrap_rank(g->rank - s - 2, g->size); }

/* Bytes of an element of the ring's dtype, and MPI's type for it on the wire (bf16 as its
 * bits: MPI has no bf16, and the ring adds them itself). */
static int64_t element_size(const lwi_mpi_ring *g) { return g->dtype == LW_DTYPE_BF16 ? 2 : 4; }

static MPI_Datatype wire_type(const lwi_mpi_ring *g) {
    return g->dtype == LW_DTYPE_BF16 ? MPI_UINT16_T : MPI_FLOAT;
}

/* segment k: its elements, and where it starts in send */
static int count_of(const lwi_mpi_ring *g, int k) {
    return g->counts ? g->counts[k] : (int)g->shard;
}

static const char *own_part(const lwi_mpi_ring *g, int k) {
    int64_t at = (int64_t)k * g->shard;
    if (g->counts)
        for (int j = 0; j < k; j++)
            at += g->counts[j];
    return g->send + at * element_size(g);
}

static char *recv_buffer(const lwi_mpi_ring *g, int s) {
    return s == g->size - 2 ? g->recv : g->partial[s % 2];
}

static lw_status post(lwi_mpi_ring *g) {
    const int s = g->step, p = g->size;
    const int in = recv_segment(g, s), out = wrap_rank(g->rank - s - 1, p);
    const char *from = s == 0 ? own_part(g, out) : recv_buffer(g, s - 1);
    int code = MPI_Irecv(recv_buffer(g, s), count_of(g, in), wire_type(g),
                         wrap_rank(g->rank - 1, p), g->tag, g->comm, &g->reqs[0]);
    if (code != MPI_SUCCESS) return lwi_mpi_fail(code, "MPI_Irecv (reduce-scatter)");
    code = MPI_Isend(from, count_of(g, out), wire_type(g), wrap_rank(g->rank + 1, p), g->tag,
                     g->comm, &g->reqs[1]);
    if (code != MPI_SUCCESS) return lwi_mpi_fail(code, "MPI_Isend (reduce-scatter)");
    return LW_OK;
}

/* Both messages of the step in flight are done: add this rank's part to what arrived (in bf16,
 * each sum rounded to bf16: see the file's comment), then post the next step, if any. */
static lw_status advance(lwi_mpi_ring *g) {
    const int s = g->step, k = recv_segment(g, s);
    const int n = count_of(g, k);
    if (g->dtype == LW_DTYPE_BF16) {
        uint16_t *sum = (uint16_t *)recv_buffer(g, s);
        const uint16_t *own = (const uint16_t *)own_part(g, k);
        for (int i = 0; i < n; i++)
            sum[i] = lwi_bf16_add(sum[i], own[i]);
    } else {
        float *sum = (float *)recv_buffer(g, s);
        const float *own = (const float *)own_part(g, k);
        for (int i = 0; i < n; i++)
            sum[i] += own[i];
    }
    return ++g->step == g->size - 1 ? LW_OK : post(g);
}

lw_status lwi_mpi_ring_start(lwi_mpi_ring *g, MPI_Comm comm, const void *send, void *recv,
                             const int *counts, int64_t shard, lw_dtype dtype, int64_t seq) {
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    g->dtype = dtype;
    if (size > 2) { /* running sums between steps: as large as the largest segment */
        int64_t most = shard > 1 ? shard : 1;
        for (int k = 0; counts != NULL && k < size; k++)
            most = counts[k] > most ? counts[k] : most;
        most *= element_size(g);
        if (most > g->partial_capacity) {
            lwi_mpi_ring_release(g);
            g->partial[0] = malloc((size_t)most);
            g->partial[1] = malloc((size_t)most);
            if (g->partial[0] == NULL || g->partial[1] == NULL) {
                lwi_mpi_ring_release(g);
                return lwi_fail(LW_ERR_NOMEM, "comm: out of memory for the reduce-scatter's "
                                "running sums (2 x %lld bytes)", (long long)most);
            }
            g->partial_capacity = most;
        }
    }
    g->comm = comm, g->rank = rank, g->size = size;
    g->tag = (int)(seq % 32768); /* MPI_TAG_UB is at least 32767 */
    g->send = send, g->recv = recv, g->counts = counts, g->shard = counts ? 0 : shard;
    g->step = 0;
    return post(g);
}

lw_status lwi_mpi_ring_test(lwi_mpi_ring *g, bool *done) {
    while (g->step < g->size - 1) {
        int flag = 0;
        int code = MPI_Testall(2, g->reqs, &flag, MPI_STATUSES_IGNORE);
        if (code != MPI_SUCCESS) return lwi_mpi_fail(code, "MPI_Testall (reduce-scatter)");
        if (!flag) break;
        lw_status st = advance(g);
        if (st != LW_OK) return st;
    }
    *done = g->step == g->size - 1;
    return LW_OK;
}

lw_status lwi_mpi_ring_wait(lwi_mpi_ring *g) {
    while (g->step < g->size - 1) {
        int code = MPI_Waitall(2, g->reqs, MPI_STATUSES_IGNORE);
        if (code != MPI_SUCCESS) return lwi_mpi_fail(code, "MPI_Waitall (reduce-scatter)");
        lw_status st = advance(g);
        if (st != LW_OK) return st;
    }
    return LW_OK;
}

void lwi_mpi_ring_release(lwi_mpi_ring *g) {
    if (g->size > 0 && g->step < g->size - 1) return; /* in flight: MPI may still write */
    free(g->partial[0]);
    free(g->partial[1]);
    g->partial[0] = g->partial[1] = NULL;
    g->partial_capacity = 0;
}
