/* test_comm.c: every collective of a host-memory communicator (MPI, or self alone) against a
 * direct computation, at whatever rank count it is started with (ctest runs it alone and under
 * mpirun -np 2, 3 and 4): the cases of comm_cases.h on host memory over the world, then what
 * only host memory has: the backend the launcher implies, MPI's reduce-scatter rings in flight
 * together, the CPU's refusal of a device communicator, and the local rank.
 * tests/test_device_comm.c runs the same cases on a device's memory. */
#include "comm_cases.h"

#include <math.h>
#include <stdlib.h>

/* Eight reduce-scatters in flight at once on one communicator (MPI runs them as rings of sends
 * and receives, p - 1 steps each), equal and unequal segments, waited for in reverse order
 * after a round of tests: each ends with its own sum, so no ring took another's messages. The
 * values are not exact in float, and a second round on the same data gives the same bits: the
 * order of the additions is fixed. */
static void test_reduce_scatters_in_flight(lw_comm *c) {
    enum { FLIGHT = 8 };
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    lw_request *req[FLIGHT];
    float *b[FLIGHT], *first[FLIGHT];
    int64_t *counts[FLIGHT], total[FLIGHT];
    for (int k = 0; k < FLIGHT; k++) {
        counts[k] = malloc(sizeof(int64_t) * (size_t)size);
        total[k] = 0;
        for (int r = 0; r < size; r++) /* odd k: unequal segments; even k: equal ones */
            total[k] += counts[k][r] = k % 2 ? 1000 * (k + 1) + 37 * r : 4096 * (k + 1);
        b[k] = malloc(sizeof(float) * (size_t)total[k]);
        first[k] = malloc(sizeof(float) * (size_t)total[k]);
        CHECK_OK(lw_request_new(&req[k]));
    }
    for (int round = 0; round < 2; round++) {
        for (int k = 0; k < FLIGHT; k++) {
            for (int64_t i = 0; i < total[k]; i++)
                b[k][i] = value(rank, i) * 0.1f + (float)k / 3;
            CHECK_OK(k % 2 ? lw_comm_reduce_scatterv(c, b[k], counts[k], LW_DTYPE_F32, req[k])
                           : lw_comm_reduce_scatter(c, b[k], total[k], LW_DTYPE_F32, req[k]));
        }
        for (int k = 0; k < FLIGHT; k++) {
            bool done = false;
            CHECK_OK(lw_request_test(req[k], &done));
        }
        for (int k = FLIGHT - 1; k >= 0; k--)
            CHECK_OK(lw_request_wait(req[k]));
        for (int k = 0; k < FLIGHT; k++) {
            const int64_t lo = displ(counts[k], rank), hi = lo + counts[k][rank];
            int bad = 0;
            for (int64_t i = lo; i < hi; i++) {
                double want = 0;
                for (int r = 0; r < size; r++)
                    want += value(r, i) * 0.1f + (float)k / 3;
                bad += fabs(b[k][i] - want) > 1e-5 * (fabs(want) + 1);
                if (round == 1) bad += b[k][i] != first[k][i];
            }
            CHECK_EQ(bad, 0);
            memcpy(first[k], b[k], sizeof(float) * (size_t)total[k]);
        }
    }
    for (int k = 0; k < FLIGHT; k++) {
        lw_request_free(req[k]);
        free(b[k]), free(first[k]), free(counts[k]);
    }
}

/* lw_comm_device_new: the CPU needs no communicator of its own, and bad arguments are named
 * (a GPU's is tests/test_device_comm.c's). */
static void test_device_comm(lw_comm *c) {
    lw_comm *d = (lw_comm *)1;
    CHECK_FAILS(lw_comm_device_new(c, lw_device_cpu(), &d), LW_ERR_UNSUPPORTED,
                "comm: cpu has no communicator of its own: every communicator already reaches "
                "host memory");
    CHECK(d == NULL);
    CHECK_FAILS(lw_comm_device_new(NULL, lw_device_cpu(), &d), LW_ERR_INVALID,
                "needs a parent communicator to bootstrap over; parent is NULL");
    CHECK_FAILS(lw_comm_device_new(c, NULL, &d), LW_ERR_INVALID, "needs a device; it is NULL");
    CHECK_FAILS(lw_comm_device_new(c, lw_device_cpu(), NULL), LW_ERR_INVALID,
                "out pointer is NULL");
}

/* The local rank: the launcher's (OpenMPI's under mpirun); without a launcher 0 whatever is
 * set, and under one the first variable set, -1 for none (the launcher variables are set here
 * by hand, then removed). */
static void test_local_rank(void) {
    if (lw_comm_launched(NULL, NULL)) {
        const char *ompi = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
        if (ompi != NULL) CHECK_EQ(lw_comm_local_rank(), atoi(ompi));
        CHECK(lw_comm_local_rank() >= -1);
        return;
    }
    CHECK_EQ(lw_comm_local_rank(), 0);
    setenv("SLURM_LOCALID", "3", 1);
    CHECK_EQ(lw_comm_local_rank(), 0); /* a batch script's variable, but no launched rank */
    setenv("PMI_RANK", "5", 1);
    CHECK(lw_comm_launched(NULL, NULL));
    CHECK_EQ(lw_comm_local_rank(), 3);
    setenv("MPI_LOCALRANKID", "1", 1); /* Hydra's comes before Slurm's */
    CHECK_EQ(lw_comm_local_rank(), 1);
    unsetenv("SLURM_LOCALID");
    setenv("MPI_LOCALRANKID", "one", 1); /* not a number: not a local rank */
    CHECK_EQ(lw_comm_local_rank(), -1);
    unsetenv("MPI_LOCALRANKID");
    CHECK_EQ(lw_comm_local_rank(), -1);
    unsetenv("PMI_RANK");
    CHECK(!lw_comm_launched(NULL, NULL));
    CHECK_EQ(lw_comm_local_rank(), 0);
}

int main(void) {
    lw_comm *c = NULL;
    CHECK_OK(lw_comm_init(&c));
    if (c == NULL) return check_exit("test_comm");
    const char *expect = getenv("OMPI_COMM_WORLD_SIZE") ? "mpi" : "self";
    CHECK(strcmp(lw_comm_backend(c), expect) == 0);
    /* the launcher's view agrees with the world MPI built */
    int32_t rank = -1, size = -1;
    CHECK(lw_comm_launched(&rank, &size) == (getenv("OMPI_COMM_WORLD_SIZE") != NULL));
    CHECK_EQ(rank, lw_comm_rank(c));
    CHECK_EQ(size, lw_comm_size(c));
    CHECK(lw_comm_launched(NULL, NULL) == (size > 1 || getenv("OMPI_COMM_WORLD_SIZE") != NULL));
    const mem_kind host = mem_host();
    comm_cases_run(&host, c);
    test_reduce_scatters_in_flight(c);
    test_device_comm(c);
    test_local_rank();
    return check_exit_all_ranks(c, "test_comm");
}
