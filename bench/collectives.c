/* collectives.c: time per collective through lw_comm, from 8 B to 16 MB, under mpirun at any
 * rank count; nccl-tests style lines: size count type op time algbw busbw #wrong. Written to
 * measure what the watchdog's polling costs (LWOPT_TIMEOUT=0 turns it off: plain MPI_Wait).
 * Usage: mpirun -np N build/bench_collectives [iterations at 8 B, default 2000] */
#include <stdio.h>
#include <stdlib.h>

#include "lw.h"

typedef enum { ALLREDUCE, REDUCE_SCATTER, ALLGATHER } which;
static const char *const names[] = {"all-reduce", "reduce-scatter", "all-gather"};

/* One collective on data[0..n); the blocking all-reduce, or a start and a wait on req. */
static lw_status run(lw_comm *c, which op, float *data, int64_t n, lw_request *req) {
    lw_status st = LW_OK;
    if (op == ALLREDUCE) return lw_comm_allreduce(c, data, n, LW_DTYPE_F32, LW_REDUCE_SUM);
    if (op == REDUCE_SCATTER)
        st = lw_comm_reduce_scatter(c, data, n, LW_DTYPE_F32, req);
    else
        st = lw_comm_allgather(c, data, n, LW_DTYPE_F32, req);
    return st == LW_OK ? lw_request_wait(req) : st;
}

/* Elements of data that differ from what the op leaves there when every rank put 1s. */
static int64_t wrong(lw_comm *c, which op, const float *data, int64_t n) {
    const int size = lw_comm_size(c), rank = lw_comm_rank(c);
    int64_t bad = 0, from = 0, to = n;
    float expect = op == ALLGATHER ? 1.0f : (float)size;
    if (op == REDUCE_SCATTER) from = rank * (n / size), to = from + n / size;
    for (int64_t i = from; i < to; i++)
        bad += data[i] != expect;
    return bad;
}

int main(int argc, char **argv) {
    lw_comm *c;
    if (lw_comm_init(&c) != LW_OK) {
        fprintf(stderr, "collectives: %s\n", lw_last_error());
        return 1;
    }
    const int size = lw_comm_size(c), rank = lw_comm_rank(c);
    const int64_t base_iters = argc > 1 ? atoll(argv[1]) : 2000;
    lw_request *req;
    if (lw_request_new(&req) != LW_OK) return 1;
    const int64_t top = (int64_t)1 << 22; /* floats: 16 MB */
    float *data = malloc(sizeof(float) * (size_t)(top * size));
    if (rank == 0)
        printf("# %d ranks, LWOPT_TIMEOUT %s\n# %10s %10s %5s %14s %10s %8s %8s %7s\n", size,
               getenv("LWOPT_TIMEOUT") ? getenv("LWOPT_TIMEOUT") : "unset", "size", "count", "type",
               "op", "time us", "algbw", "busbw", "#wrong");
    int status = 0;
    for (int op = ALLREDUCE; op <= ALLGATHER; op++) {
        for (int64_t count = 2; count <= top; count *= 16) {
            const int64_t n = count * size; /* divisible into equal shards */
            int64_t iters = base_iters * 2 / count;
            if (iters < 10) iters = 10;
            if (iters > base_iters) iters = base_iters;
            double elapsed = 0.0;
            int64_t bad = 0;
            for (int64_t k = -2; k < iters && status == 0; k++) { /* two warm-up rounds */
                for (int64_t i = 0; i < n; i++)
                    data[i] = 1.0f;
                if (lw_comm_barrier(c) != LW_OK) status = 1;
                double t = lw_now();
                if (status == 0 && run(c, (which)op, data, n, req) != LW_OK) status = 1;
                if (k >= 0) elapsed += lw_now() - t;
                bad += wrong(c, (which)op, data, n);
            }
            if (status != 0) {
                fprintf(stderr, "collectives: rank %d: %s\n", rank, lw_last_error());
                break;
            }
            double slowest = elapsed / (double)iters;
            lw_comm_allreduce(c, &slowest, 1, LW_DTYPE_F64, LW_REDUCE_MAX);
            lw_comm_allreduce(c, &bad, 1, LW_DTYPE_I64, LW_REDUCE_SUM);
            const double bytes = 4.0 * (double)n, algbw = bytes / slowest / 1e9;
            const double factor =
                op == ALLREDUCE ? 2.0 * (size - 1) / size : (double)(size - 1) / size;
            if (rank == 0)
                printf("  %10.0f %10lld %5s %14s %10.2f %8.3f %8.3f %7lld\n", bytes, (long long)n,
                       "float", names[op], slowest * 1e6, algbw, algbw * factor, (long long)bad);
            if (bad != 0) status = 1;
        }
    }
    free(data);
    lw_request_free(req);
    lw_comm_free(c);
    return status;
}
