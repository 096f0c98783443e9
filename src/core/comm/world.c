/* world.c: the world communicator: the table of backends built in, which one serves the world
 * (LWOPT_COMM, or MPI when a launcher started the process), and the launcher's view of this
 * process. The only place that reads the launcher's environment. */
#include "comm/comm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct world_backend {
    const char *name;
    lw_status (*world)(double timeout, lw_comm **out);
} world_backend;

static const world_backend backends[] = {
    {"self", lwi_comm_self_world},
    {"mpi", lwi_comm_mpi_world},
};
enum { N_BACKENDS = sizeof backends / sizeof backends[0] };

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

static lw_status named_world(const char *name, double timeout, lw_comm **out) {
    for (int32_t i = 0; i < N_BACKENDS; i++)
        if (strcmp(backends[i].name, name) == 0) return backends[i].world(timeout, out);
    return lwi_fail(LW_ERR_INVALID, "comm: LWOPT_COMM is '%s' (self or mpi)", name);
}

/* A new world with the timeout given, or (seconds < 0) LWOPT_TIMEOUT's, read before MPI starts:
 * a typo fails fast, and the timeout bounds the start-up too. */
static lw_status with_timeout(const char *name, double seconds, lw_comm **out) {
    if (out == NULL) return lwi_fail(LW_ERR_INVALID, "comm: out pointer is NULL");
    *out = NULL;
    double timeout = seconds;
    lw_status st = LW_OK;
    if (seconds < 0) st = lwi_comm_env_timeout(&timeout);
    else if (isnan(seconds) || isinf(seconds))
        st = lwi_fail(LW_ERR_INVALID,
                      "comm: timeout must be a finite number of seconds >= 0 (0 turns the "
                      "watchdog off), got %g",
                      seconds);
    if (st == LW_OK) st = named_world(name, timeout, out);
    if (st == LW_OK) (*out)->timeout = timeout;
    return st;
}

lw_status lw_comm_init_timeout(double seconds, lw_comm **out) {
    const char *choice = getenv("LWOPT_COMM");
    if (choice != NULL && choice[0] != '\0') return with_timeout(choice, seconds, out);
    return with_timeout(lw_comm_launched(NULL, NULL) ? "mpi" : "self", seconds, out);
}

lw_status lw_comm_init(lw_comm **out) { return lw_comm_init_timeout(-1, out); }

lw_status lw_comm_self(lw_comm **out) { return with_timeout("self", -1, out); }
