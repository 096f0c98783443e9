/* blas.c: how many OpenBLAS threads a rank uses. Ranks sharing a machine split its cores, so
 * that mpirun -np 2 on 2 cores runs one thread per rank; OPENBLAS_NUM_THREADS (or
 * OMP_NUM_THREADS) set by the user always wins. */
#include "device/cpu/cpu.h"

#include <cblas.h>
#include <stdlib.h>
#include <unistd.h>

void lwi_blas_share_cores(int32_t ranks) {
    if (getenv("OPENBLAS_NUM_THREADS") || getenv("OMP_NUM_THREADS") || ranks <= 1) return;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = (int)(cores / ranks);
    openblas_set_num_threads(threads < 1 ? 1 : threads);
}
