/* guard.c: a deadline around the MPI calls that block until every rank of the job arrives and
 * that cannot be polled as the collectives are (watchdog.c): MPI_Init_thread, MPI_Comm_dup,
 * MPI_Comm_split, MPI_Finalize. A thread waits for the call to return; past the deadline it
 * prints one line naming this rank, the call and the timeout, and ends the process. That is the
 * one place the library ends a process: a call that never returns cannot return a status, and
 * the job's launcher ends the other ranks once one has ended (before MPI has started there is
 * no MPI_Abort to call). */
#include "comm/comm.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct lwi_guard {
    pthread_t thread;
    pthread_mutex_t mutex;
    pthread_cond_t returned; /* signalled when the guarded call has returned */
    bool done;
    double seconds;
    char line[512]; /* the message, ready before the wait: nothing is formatted at the end */
};

static void *watch(void *arg) {
    lwi_guard *g = arg;
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    const double whole = (double)(time_t)g->seconds;
    deadline.tv_sec += (time_t)whole;
    deadline.tv_nsec += (long)((g->seconds - whole) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&g->mutex);
    bool late = false;
    while (!g->done && !late)
        late = pthread_cond_timedwait(&g->returned, &g->mutex, &deadline) != 0 && !g->done;
    pthread_mutex_unlock(&g->mutex);
    if (late) {
        const ssize_t ignored = write(2, g->line, strlen(g->line));
        (void)ignored;
        _exit(1); /* not exit(): its handlers would finalise MPI, which waits for the same ranks */
    }
    return NULL;
}

lw_status lwi_guard_begin(double seconds, const char *what, lwi_guard **out) {
    *out = NULL;
    if (!(seconds > 0)) return LW_OK;
    lwi_guard *g = calloc(1, sizeof *g);
    if (g == NULL) return lwi_fail(LW_ERR_NOMEM, "comm: out of memory");
    g->seconds = seconds;
    int32_t rank = 0, size = 1;
    lw_comm_launched(&rank, &size);
    char prefix[32] = "";
    if (size > 1) snprintf(prefix, sizeof prefix, "[rank %d] ", (int)rank);
    snprintf(g->line, sizeof g->line,
             "%scomm: start-up watchdog: rank %d of %d waited %g s in %s: another rank has "
             "stopped or failed to start (timeout %g s; --timeout or LWOPT_TIMEOUT sets it, 0 "
             "turns it off)\n",
             prefix, (int)rank, (int)size, seconds, what, seconds);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&g->returned, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&g->mutex, NULL);
    if (pthread_create(&g->thread, NULL, watch, g) != 0) {
        pthread_cond_destroy(&g->returned);
        pthread_mutex_destroy(&g->mutex);
        free(g);
        return lwi_fail(LW_ERR_STATE, "comm: cannot start the start-up watchdog's thread");
    }
    *out = g;
    return LW_OK;
}

void lwi_guard_end(lwi_guard *g) {
    if (g == NULL) return;
    pthread_mutex_lock(&g->mutex);
    g->done = true;
    pthread_cond_signal(&g->returned);
    pthread_mutex_unlock(&g->mutex);
    pthread_join(g->thread, NULL);
    pthread_cond_destroy(&g->returned);
    pthread_mutex_destroy(&g->mutex);
    free(g);
}
