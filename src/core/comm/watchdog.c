/* watchdog.c: the hang watchdog of the collectives, like the NCCL timeout in PyTorch. A
 * wait polls its collective against a deadline (its start + the comm's timeout); past it, the
 * wait fails with one line naming the rank, the collective, its label and the phase, and the
 * comm is marked broken. It cannot cancel the collective (MPI has no way to), so the job must
 * end. Also the setters of the timeout, the phase and the labels. */
#include "comm/comm.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

bool lwi_comm_timed_out;

static const char *const op_names[LWI_COMM_OPS] = {
    "all-reduce", "reduce-scatter", "all-gather", "all-gather-v", "broadcast", "barrier",
    "all-to-all",
};

const char *lw_comm_op_name(lw_comm_op op) {
    return op >= 0 && op < LWI_COMM_OPS ? op_names[op] : "unknown";
}

lw_status lwi_comm_env_timeout(double *seconds) {
    *seconds = 600.0;
    const char *text = getenv("LWOPT_TIMEOUT");
    if (text == NULL || text[0] == '\0') return LW_OK;
    char *end = NULL;
    double v = strtod(text, &end);
    while (end != text && (*end == ' ' || *end == '\t' || *end == '\n'))
        end++;
    if (end == text || *end != '\0' || !(v >= 0.0) || isinf(v))
        return lwi_fail(LW_ERR_INVALID,
                        "comm: LWOPT_TIMEOUT is '%.64s': it must be a number of seconds >= 0 "
                        "(0 turns the watchdog off)",
                        text);
    *seconds = v;
    return LW_OK;
}

lw_status lw_comm_set_timeout(lw_comm *c, double seconds) {
    if (c == NULL) return lwi_fail(LW_ERR_INVALID, "comm: communicator is NULL");
    if (!(seconds >= 0.0) || isinf(seconds))
        return lwi_fail(LW_ERR_INVALID,
                        "comm: timeout must be a finite number of seconds >= 0 (0 turns the "
                        "watchdog off), got %g",
                        seconds);
    c->timeout = seconds;
    return LW_OK;
}

double lw_comm_timeout(const lw_comm *c) { return c ? c->timeout : 0.0; }

/* Bounded copy; control characters become spaces, so the message stays one line. */
static void copy_text(char *dst, size_t cap, const char *src) {
    size_t n = src ? strnlen(src, cap - 1) : 0;
    for (size_t i = 0; i < n; i++)
        dst[i] = (unsigned char)src[i] < 0x20 ? ' ' : src[i];
    dst[n] = '\0';
}

lw_status lw_comm_set_phase(lw_comm *c, const char *phase) {
    if (c == NULL) return lwi_fail(LW_ERR_INVALID, "comm: communicator is NULL");
    copy_text(c->phase, sizeof c->phase, phase);
    return LW_OK;
}

lw_status lw_comm_set_label(lw_comm *c, const char *label) {
    if (c == NULL) return lwi_fail(LW_ERR_INVALID, "comm: communicator is NULL");
    copy_text(c->next_label, sizeof c->next_label, label);
    return LW_OK;
}

lw_status lw_request_set_label(lw_request *r, const char *label) {
    if (r == NULL) return lwi_fail(LW_ERR_INVALID, "comm: NULL request");
    copy_text(r->label, sizeof r->label, label);
    return LW_OK;
}

lw_status lwi_comm_check_broken(const lw_comm *c) {
    return c->broken ? lwi_fail(LW_ERR_TIMEOUT, "%s", c->broken_why) : LW_OK;
}

/* The deadline is checked on every poll, so it must cost next to nothing: the coarse clock is
 * read from memory the kernel updates each tick (a few ms, nothing against a timeout of
 * seconds), and lags the precise clock, so it never ends a wait early. */
static double coarse_now(void) {
#ifdef CLOCK_MONOTONIC_COARSE
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
#else
    return lwi_now();
#endif
}

/* ", 1.50 MB" (decimal units), or "" for a collective without payload. */
static void format_bytes(char *out, size_t cap, int64_t bytes) {
    const double b = (double)bytes;
    if (bytes <= 0)
        out[0] = '\0';
    else if (b < 1e3)
        snprintf(out, cap, ", %lld B", (long long)bytes);
    else if (b < 1e6)
        snprintf(out, cap, ", %.2f kB", b / 1e3);
    else if (b < 1e9)
        snprintf(out, cap, ", %.2f MB", b / 1e6);
    else
        snprintf(out, cap, ", %.2f GB", b / 1e9);
}

/* req, still in flight at `now`, is past its deadline: the message, and the comm broken. */
static lw_status expire(lw_request *r, double now) {
    lw_comm *c = r->comm;
    const char *label = r->once[0] ? r->once : r->label;
    char size[32];
    format_bytes(size, sizeof size, r->bytes);
    snprintf(c->broken_why, sizeof c->broken_why,
             "comm: watchdog: rank %d of %d waited %.1f s for the %s%s%s (collective #%lld on "
             "this communicator%s%s%s): another rank has stopped, or skipped or reordered a "
             "collective (timeout %g s; LWOPT_TIMEOUT sets it, 0 turns it off)",
             (int)c->rank, (int)c->size, now - r->started, lw_comm_op_name(r->op),
             label[0] ? " of " : "", label, (long long)r->seq, size, r->phase[0] ? "; during " : "",
             r->phase, c->timeout);
    c->broken = true;
    lwi_comm_timed_out = true;
    return lwi_fail(LW_ERR_TIMEOUT, "%s", c->broken_why);
}

lw_status lwi_watch_check(lw_request *r, double now) {
    const double timeout = r->comm->timeout;
    return timeout > 0 && now - r->started > timeout ? expire(r, now) : LW_OK;
}

lw_status lwi_watch_wait(lw_request *r) {
    lw_comm *c = r->comm;
    const double deadline = r->started + c->timeout;
    for (;;) {
        bool done = false;
        lw_status st = c->backend->test(r, &done);
        if (st != LW_OK || done) return st;
        /* with more ranks than cores, spinning would keep the core from the rank we wait for;
         * c->yield is off where MPI's progress yields by itself */
        if (c->yield) sched_yield();
        if (coarse_now() > deadline) return expire(r, lwi_now());
    }
}
