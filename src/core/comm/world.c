/* world.c: the world communicator: the table of backends built in, and which one serves the
 * world (LWOPT_COMM, or MPI when a launcher started the process: launcher.c). */
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
