/* signals.c: stop requests for a training job, read at its step boundaries: SIGTERM (a scheduler
 * preempting it), SIGUSR1 (sent ahead of a time limit; mpirun forwards it to every rank) and
 * SIGINT (a terminal's Ctrl-C) set a flag instead of ending the process mid-step, so that the
 * job can agree on a step, save a checkpoint and exit. A second SIGINT ends the process at once;
 * a deadline after the first request bounds how long the rest may take (on a thread of its own,
 * started by a process's first watch: a fork copies no thread). Also: SIGXFSZ ignored,
 * so that a write past the file-size limit fails with EFBIG like a full disk instead of killing
 * the process mid-record. */
#define _DEFAULT_SOURCE /* sigaction, SA_RESTART */
#include "base/base.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t requested; /* the first stop signal since the last reset; 0: none */
static volatile sig_atomic_t resets;    /* counts lw_stop_reset: a deadline from before is off */
static sem_t wake;                      /* posted by the handler: the deadline starts */
static pthread_mutex_t setup = PTHREAD_MUTEX_INITIALIZER;
static bool watching, deadline_started;
static const int stops[] = {SIGTERM, SIGUSR1, SIGINT};
static struct sigaction before[3]; /* the handlers lw_stop_unwatch puts back */
static double grace;     /* seconds from the first request to the forced end; 0: none */
static int late_status;  /* the forced end's exit status */

static void on_signal(int sig) {
    const int saved = errno;
    if (requested != 0 && sig == SIGINT) {
        /* only async-signal-safe calls here: write and _exit */
        static const char line[] = "lwopt: interrupted again: ending now, without waiting for "
                                   "the step to end\n";
        ssize_t ignored = write(STDERR_FILENO, line, sizeof line - 1);
        (void)ignored;
        _exit(130);
    }
    if (requested == 0) {
        requested = sig;
        sem_post(&wake);
    }
    errno = saved;
}

static const char *signal_name(int sig) {
    return sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : sig == SIGINT ? "SIGINT"
                                                                                     : "a signal";
}

/* Waits for a request, then grace seconds; a process still running then (a step or a save that
 * cannot end, a rank gone) ends with late_status, so that the job never outlives the time it
 * was given after the signal. */
static void *deadline(void *unused) {
    (void)unused;
    for (;;) {
        while (sem_wait(&wake) != 0 && errno == EINTR) {
        }
        pthread_mutex_lock(&setup);
        const double seconds = grace;
        const int status = late_status;
        pthread_mutex_unlock(&setup);
        const int sig = requested, epoch = resets;
        if (seconds <= 0 || sig == 0) continue;
        struct timespec left = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
        while (nanosleep(&left, &left) != 0 && errno == EINTR) {
        }
        if (requested == 0 || resets != epoch) continue;
        fprintf(stderr, "lwopt: still running %g s after %s (the --timeout): ending now; the "
                "checkpoint that `latest` names is whole\n", seconds, signal_name(sig));
        fflush(stderr);
        _exit(status);
    }
    return NULL;
}

lw_status lw_stop_watch(double grace_seconds, int32_t status) {
    if (!(grace_seconds >= 0) || status < 0 || status > 255)
        return lwi_fail(LW_ERR_INVALID, "signals: grace %g s and status %d: want >= 0 and 0..255",
                        grace_seconds, status);
    pthread_mutex_lock(&setup);
    grace = grace_seconds;
    late_status = status;
    lw_status st = LW_OK;
    if (!deadline_started) {
        pthread_t thread;
        if (sem_init(&wake, 0, 0) != 0 || pthread_create(&thread, NULL, deadline, NULL) != 0)
            st = lwi_fail(LW_ERR_IO, "signals: cannot start the deadline thread: %s",
                          strerror(errno));
        else
            pthread_detach(thread);
        deadline_started = st == LW_OK;
    }
    if (st == LW_OK && !watching) {
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_handler = on_signal;
        sigemptyset(&action.sa_mask);
        /* system calls interrupted by the signal go on: the step runs to its end */
        action.sa_flags = SA_RESTART;
        int i = 0;
        for (; i < 3 && st == LW_OK; i++)
            if (sigaction(stops[i], &action, &before[i]) != 0)
                st = lwi_fail(LW_ERR_IO, "signals: cannot handle %s: %s", signal_name(stops[i]),
                              strerror(errno));
        if (st != LW_OK) /* the ones taken, given back */
            for (i -= 2; i >= 0; i--) sigaction(stops[i], &before[i], NULL);
        watching = st == LW_OK;
    }
    pthread_mutex_unlock(&setup);
    return st;
}

void lw_stop_unwatch(void) {
    pthread_mutex_lock(&setup);
    if (watching)
        for (int i = 0; i < 3; i++) sigaction(stops[i], &before[i], NULL);
    watching = false;
    pthread_mutex_unlock(&setup);
    lw_stop_reset();
}

int32_t lw_stop_requested(void) { return requested; }

void lw_stop_reset(void) {
    resets = resets + 1;
    requested = 0;
}

void lw_file_size_limit_as_error(void) { signal(SIGXFSZ, SIG_IGN); }
