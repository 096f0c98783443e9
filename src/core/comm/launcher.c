/* launcher.c: the launcher's view of this process (mpirun, srun, any PMI/PMIx launcher): whether
 * one started it, its rank, size and local rank, read from the environment before MPI starts.
 * The only place that reads the launcher's environment; world.c (which backend serves the
 * world) and guard.c (the start-up watchdog's message) ask it. */
#include "comm/comm.h"

#include <stdlib.h>

/* The first of these variables that is set and a number: OpenMPI's, then PMIx's and PMI's
 * (Slurm, MPICH), so that any launcher lwopt runs under is recognised. */
static bool env_int(const char *const *names, int32_t *out) {
    for (; *names != NULL; names++) {
        const char *text = getenv(*names);
        char *end = NULL;
        if (text == NULL || text[0] == '\0') continue;
        long v = strtol(text, &end, 10);
        if (*end == '\0' && v >= 0 && v <= INT32_MAX) {
            *out = (int32_t)v;
            return true;
        }
    }
    return false;
}

bool lw_comm_launched(int32_t *rank, int32_t *size) {
    static const char *const rank_vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", NULL};
    static const char *const size_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", NULL};
    int32_t r = 0, s = 1;
    const bool has_rank = env_int(rank_vars, &r), has_size = env_int(size_vars, &s);
    if (rank) *rank = has_rank ? r : 0;
    if (size) *size = has_size ? s : 1;
    return has_rank || has_size;
}

int32_t lw_comm_local_rank(void) {
    /* OpenMPI, MPICH / Intel MPI (Hydra), MVAPICH, Cray PALS, then Slurm's srun (last: a batch
     * script's own SLURM_LOCALID would shadow an mpirun started inside it) */
    static const char *const local_vars[] = {
        "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK",
        "PALS_LOCAL_RANKID",          "SLURM_LOCALID",   NULL};
    if (!lw_comm_launched(NULL, NULL)) return 0;
    int32_t r = 0;
    return env_int(local_vars, &r) ? r : -1;
}
