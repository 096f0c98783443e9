/* request.c: a collective in flight (lw_request): testing and waiting for it under the watchdog,
 * finishing it (the reduce-scatter's copy out of its scratch shard), and letting it go, also
 * when it timed out. The collectives that start requests are in comm.c. */
#include "comm/comm.h"

#include <stdlib.h>
#include <string.h>

/* Lets go of req's backend handle (the backend's release first: NCCL's holds a CUDA event). */
void lwi_request_drop_handle(lw_request *r) {
    if (r->handle_backend != NULL && r->handle_backend->release != NULL)
        r->handle_backend->release(r);
    free(r->handle);
    r->handle = NULL;
    r->handle_backend = NULL;
}

lw_status lw_request_set_stream(lw_request *r, lw_stream *stream) {
    if (r == NULL) return lwi_fail(LW_ERR_INVALID, "comm: request is NULL");
    if (r->comm != NULL)
        return lwi_fail(LW_ERR_STATE, "comm: request is still active; wait for it first");
    r->stream = stream;
    return LW_OK;
}

lw_status lw_request_new(lw_request **out) {
    if (out == NULL) return lwi_fail(LW_ERR_INVALID, "comm: out pointer is NULL");
    *out = calloc(1, sizeof **out);
    return *out ? LW_OK : lwi_fail(LW_ERR_NOMEM, "comm: out of memory");
}

void lw_request_free(lw_request *r) {
    if (r == NULL) return;
    lw_request_wait(r);
    free(r->scratch);
    free(r->ints);
    lwi_request_drop_handle(r);
    free(r);
}

bool lw_request_active(const lw_request *r) { return r != NULL && r->comm != NULL; }

/* Takes r off its comm's list of requests in flight. */
static void release(lw_request *r) {
    lw_comm *c = r->comm;
    if (r->prev_active != NULL) r->prev_active->next_active = r->next_active;
    else c->active = r->next_active;
    if (r->next_active != NULL) r->next_active->prev_active = r->prev_active;
    r->next_active = r->prev_active = NULL;
    r->comm = NULL;
}

/* Lets go of a collective that timed out. MPI still holds it and may still write into the
 * scratch shard or read the counts if the stopped rank comes back, so those stay allocated
 * (leaked: the job is ending); the request can start again with fresh ones. */
static void abandon(lw_request *r) {
    release(r);
    r->scratch = NULL;
    r->scratch_capacity = 0;
    r->ints = NULL;
    r->ints_capacity = 0;
}

/* The request completed in the backend: finish the reduce-scatter's copy, release it. */
static void complete(lw_request *r) {
    if (r->op == LW_COMM_REDUCE_SCATTER && r->copy_bytes > 0)
        memcpy(r->copy_to, r->scratch, (size_t)r->copy_bytes);
    release(r);
}

lw_status lw_request_test(lw_request *r, bool *done) {
    if (r == NULL || done == NULL) return lwi_fail(LW_ERR_INVALID, "comm: NULL request");
    *done = true;
    if (r->comm == NULL) return LW_OK;
    lw_comm *c = r->comm;
    lw_status st = lwi_comm_check_broken(c);
    if (st != LW_OK) {
        *done = false;
        abandon(r); /* broken: LW_ERR_TIMEOUT */
        return st;
    }
    double t = lwi_now();
    st = c->backend->test(r, done);
    double now = lwi_now();
    c->counters[r->op].seconds += now - t;
    if (st == LW_OK && !*done) st = lwi_watch_check(r, now);
    if (st == LW_ERR_TIMEOUT) {
        abandon(r);
    } else if (st != LW_OK) {
        release(r);
    } else if (*done) {
        complete(r);
    }
    return st;
}

/* Waits for r (in flight) without counting the time: the blocking forms count theirs whole. */
lw_status lwi_request_finish(lw_request *r) {
    lw_status st = lwi_comm_check_broken(r->comm);
    /* without a timeout, the backend's own wait: no polling at all */
    if (st == LW_OK) st = r->comm->timeout > 0 ? lwi_watch_wait(r) : r->comm->backend->wait(r);
    if (st == LW_ERR_TIMEOUT) {
        abandon(r);
    } else if (st != LW_OK) {
        release(r);
    } else {
        complete(r);
    }
    return st;
}

lw_status lw_request_wait(lw_request *r) {
    if (r == NULL) return lwi_fail(LW_ERR_INVALID, "comm: NULL request");
    if (r->comm == NULL) return LW_OK;
    lw_comm *c = r->comm;
    lw_comm_op op = r->op;
    double t = lwi_now();
    lw_status st = lwi_request_finish(r);
    c->counters[op].seconds += lwi_now() - t;
    return st;
}
