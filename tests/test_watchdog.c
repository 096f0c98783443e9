/* test_watchdog.c: the collectives' watchdog settings: LWOPT_TIMEOUT at creation or a timeout
 * given (lw_comm_init_timeout, which also bounds MPI's start-up), the setters' argument checks,
 * splits inheriting the timeout, phase and labels, every collective under the watchdog off and
 * on, and the self backend never timing out. Runs alone and under mpirun (-np 2, -np 3); a rank
 * that really stops, in training or before MPI starts, is tests/lua/watchdog.sh's case. */
#include "check.h"

#include <math.h>
#include <stdlib.h>

/* lw_comm_init with LWOPT_TIMEOUT set to text (NULL: unset); its timeout, or -1 if it failed */
static double init_with(const char *text) {
    if (text)
        setenv("LWOPT_TIMEOUT", text, 1);
    else
        unsetenv("LWOPT_TIMEOUT");
    lw_comm *c = NULL;
    lw_status st = lw_comm_init(&c);
    double t = st == LW_OK ? lw_comm_timeout(c) : -1.0;
    lw_comm_free(c);
    return t;
}

static void test_environment(void) {
    CHECK(init_with(NULL) == 600.0);
    CHECK(init_with("") == 600.0);
    CHECK(init_with("2.5") == 2.5);
    CHECK(init_with(" 30 ") == 30.0);
    CHECK(init_with("0") == 0.0);
    const char *bad[] = {"abc", "-1", "nan", "inf", "5s", "1e999"};
    for (int i = 0; i < 6; i++) {
        setenv("LWOPT_TIMEOUT", bad[i], 1);
        lw_comm *c = (lw_comm *)&c; /* not NULL: a failure must clear it */
        char expect[64];
        snprintf(expect, sizeof expect, "comm: LWOPT_TIMEOUT is '%s'", bad[i]);
        CHECK_FAILS(lw_comm_init(&c), LW_ERR_INVALID, expect);
        CHECK(c == NULL);
        CHECK_FAILS(lw_comm_self(&c), LW_ERR_INVALID, expect);
    }
    setenv("LWOPT_TIMEOUT", "4", 1);
    lw_comm *self;
    CHECK_OK(lw_comm_self(&self));
    CHECK(lw_comm_timeout(self) == 4.0);
    lw_comm_free(self);
    /* a timeout given (the recipe's --timeout) is taken instead of LWOPT_TIMEOUT's, unread */
    setenv("LWOPT_TIMEOUT", "abc", 1);
    lw_comm *given = NULL;
    CHECK_OK(lw_comm_init_timeout(7.5, &given));
    CHECK(lw_comm_timeout(given) == 7.5);
    lw_comm_free(given);
    CHECK_OK(lw_comm_init_timeout(0, &given));
    CHECK(lw_comm_timeout(given) == 0.0);
    lw_comm_free(given);
    CHECK_FAILS(lw_comm_init_timeout(NAN, &given), LW_ERR_INVALID, "got nan");
    CHECK(given == NULL);
    CHECK_FAILS(lw_comm_init_timeout(INFINITY, &given), LW_ERR_INVALID, "0 turns the watchdog");
    CHECK_FAILS(lw_comm_init_timeout(-1, &given), LW_ERR_INVALID, "LWOPT_TIMEOUT is 'abc'");
    unsetenv("LWOPT_TIMEOUT");
    CHECK_OK(lw_comm_init_timeout(-1, &given));
    CHECK(lw_comm_timeout(given) == 600.0);
    lw_comm_free(given);
}

static void test_setters(lw_comm *c) {
    CHECK(lw_comm_timeout(c) == 600.0);
    CHECK_OK(lw_comm_set_timeout(c, 30.0));
    CHECK(lw_comm_timeout(c) == 30.0);
    CHECK_FAILS(lw_comm_set_timeout(c, -1.0), LW_ERR_INVALID, "got -1");
    CHECK_FAILS(lw_comm_set_timeout(c, NAN), LW_ERR_INVALID, "got nan");
    CHECK_FAILS(lw_comm_set_timeout(c, INFINITY), LW_ERR_INVALID, "0 turns the watchdog off");
    CHECK(lw_comm_timeout(c) == 30.0); /* a refused value changes nothing */
    CHECK_FAILS(lw_comm_set_timeout(NULL, 1.0), LW_ERR_INVALID, "NULL");
    CHECK(lw_comm_timeout(NULL) == 0.0);

    char long_text[300];
    memset(long_text, 'x', sizeof long_text - 1);
    long_text[sizeof long_text - 1] = '\0';
    CHECK_OK(lw_comm_set_phase(c, "step 12"));
    CHECK_OK(lw_comm_set_phase(c, long_text)); /* kept bounded */
    CHECK_OK(lw_comm_set_phase(c, NULL));
    CHECK_FAILS(lw_comm_set_phase(NULL, "x"), LW_ERR_INVALID, "NULL");
    CHECK_OK(lw_comm_set_label(c, long_text));
    CHECK_OK(lw_comm_set_label(c, NULL));
    CHECK_FAILS(lw_comm_set_label(NULL, "x"), LW_ERR_INVALID, "NULL");
    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    CHECK_OK(lw_request_set_label(req, "buffer 1 bucket 2"));
    CHECK_OK(lw_request_set_label(req, long_text));
    CHECK_OK(lw_request_set_label(req, NULL));
    CHECK_FAILS(lw_request_set_label(NULL, "x"), LW_ERR_INVALID, "NULL request");
    lw_request_free(req);

    CHECK(strcmp(lw_comm_op_name(LW_COMM_REDUCE_SCATTER), "reduce-scatter") == 0);
    CHECK(strcmp(lw_comm_op_name(LW_COMM_ALLREDUCE), "all-reduce") == 0);
    CHECK(strcmp(lw_comm_op_name(LW_COMM_BARRIER), "barrier") == 0);
    CHECK(strcmp(lw_comm_op_name(LW_COMM_ALLTOALL), "all-to-all") == 0);
    CHECK(strcmp(lw_comm_op_name((lw_comm_op)(LW_COMM_ALLTOALL + 1)), "unknown") == 0);
    CHECK(strcmp(lw_comm_op_name((lw_comm_op)99), "unknown") == 0);
    CHECK_EQ(LW_ERR_TIMEOUT, -7);
}

/* Splits take the parent's timeout, not LWOPT_TIMEOUT's. */
static void test_split_inherits(lw_comm *c) {
    setenv("LWOPT_TIMEOUT", "9", 1);
    CHECK_OK(lw_comm_set_timeout(c, 7.5));
    lw_comm *half;
    CHECK_OK(lw_comm_split(c, lw_comm_rank(c) % 2, 0, &half));
    CHECK(lw_comm_timeout(half) == 7.5);
    CHECK_OK(lw_comm_set_timeout(c, 0.0));
    lw_comm *off;
    CHECK_OK(lw_comm_split(c, 0, 0, &off));
    CHECK(lw_comm_timeout(off) == 0.0);
    CHECK(lw_comm_timeout(half) == 7.5); /* the child's own copy */
    unsetenv("LWOPT_TIMEOUT");
    lw_comm_free(off);
    lw_comm_free(half);
}

/* Collectives with the watchdog off (plain waits) and on, with a label and a phase set; on one
 * rank nothing ever waits, so even a timeout of a nanosecond never fires there. */
static void test_collectives(lw_comm *c) {
    const int size = lw_comm_size(c);
    const double timeouts[3] = {0.0, 60.0, 1e-9};
    for (int k = 0; k < (size == 1 ? 3 : 2); k++) {
        CHECK_OK(lw_comm_set_timeout(c, timeouts[k]));
        CHECK_OK(lw_comm_set_phase(c, "testing"));
        int64_t one = 1;
        CHECK_OK(lw_comm_set_label(c, "the count of ranks"));
        CHECK_OK(lw_comm_allreduce(c, &one, 1, LW_DTYPE_I64, LW_REDUCE_SUM));
        CHECK_EQ(one, size);
        CHECK_OK(lw_comm_barrier(c));
        char text[8] = "none";
        if (lw_comm_rank(c) == 0) snprintf(text, sizeof text, "root");
        CHECK_OK(lw_comm_broadcast(c, text, sizeof text, 0));
        CHECK(strcmp(text, "root") == 0);
        float *b = calloc((size_t)size * 16, sizeof(float));
        lw_request *req;
        CHECK_OK(lw_request_new(&req));
        CHECK_OK(lw_request_set_label(req, "buffer 1 bucket 1"));
        for (int i = 0; i < size * 16; i++)
            b[i] = 1.0f;
        CHECK_OK(lw_comm_reduce_scatter(c, b, size * 16, LW_DTYPE_F32, req));
        bool done = false;
        while (!done)
            CHECK_OK(lw_request_test(req, &done));
        CHECK(b[lw_comm_rank(c) * 16] == (float)size);
        CHECK_OK(lw_comm_allgather(c, b, size * 16, LW_DTYPE_F32, req));
        CHECK_OK(lw_request_wait(req));
        int64_t *counts = malloc(sizeof(int64_t) * (size_t)size);
        for (int r = 0; r < size; r++)
            counts[r] = r + 1;
        float *all = calloc((size_t)(size * (size + 1) / 2), sizeof(float));
        CHECK_OK(lw_comm_allgatherv(c, b, lw_comm_rank(c) + 1, all, counts, LW_DTYPE_F32));
        CHECK(all[0] == (float)size);
        /* the variable-count forms, blocking (a plain wait with the watchdog off) and not */
        const int64_t mine = lw_comm_rank(c) * (int64_t)(lw_comm_rank(c) + 1) / 2;
        for (int i = 0; i < size * (size + 1) / 2; i++)
            all[i] = 1.0f;
        CHECK_OK(lw_comm_reduce_scatterv(c, all, counts, LW_DTYPE_F32, NULL));
        CHECK(all[mine] == (float)size);
        CHECK_OK(lw_comm_allgather_segments(c, all, counts, LW_DTYPE_F32, req));
        CHECK_OK(lw_request_wait(req));
        CHECK(all[0] == (float)size && all[size * (size + 1) / 2 - 1] == (float)size);
        /* the all-to-all-v, labelled, blocking and not: rank r sends r + 1 i64s to each rank */
        const int64_t rank = lw_comm_rank(c);
        int64_t *send_counts = malloc(sizeof(int64_t) * (size_t)size);
        int64_t *send = malloc(sizeof(int64_t) * (size_t)(size * (rank + 1)));
        int64_t *got = malloc(sizeof(int64_t) * (size_t)(size * (size + 1) / 2));
        for (int r = 0; r < size; r++)
            send_counts[r] = rank + 1;
        for (int i = 0; i < size * (rank + 1); i++)
            send[i] = rank * 1000 + i / (rank + 1);
        for (int blocking = 0; blocking < 2; blocking++) {
            for (int i = 0; i < size * (size + 1) / 2; i++)
                got[i] = -1;
            CHECK_OK(lw_comm_set_label(c, "the expert dispatch"));
            CHECK_OK(lw_comm_alltoallv(c, send, send_counts, got, counts, LW_DTYPE_I64,
                                       blocking ? NULL : req));
            CHECK_OK(lw_request_wait(req));
            /* from rank r: r + 1 elements r * 1000 + this rank */
            CHECK_EQ(got[0], rank);
            CHECK_EQ(got[size * (size + 1) / 2 - 1], (size - 1) * 1000 + rank);
        }
        free(send_counts), free(send), free(got);
        free(all), free(counts), free(b);
        lw_request_free(req);
    }
    CHECK_OK(lw_comm_set_timeout(c, 600.0));
}

int main(void) {
    unsetenv("LWOPT_TIMEOUT");
    lw_comm *c = NULL;
    CHECK_OK(lw_comm_init(&c));
    if (c == NULL) return check_exit("test_watchdog");
    test_environment();
    test_setters(c);
    test_split_inherits(c);
    test_collectives(c);
    lw_comm *self;
    CHECK_OK(lw_comm_self(&self));
    test_setters(self);
    test_split_inherits(self);
    test_collectives(self);
    lw_comm_free(self);
    return check_exit_all_ranks(c, "test_watchdog");
}
