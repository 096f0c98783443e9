/* check.h: the C tests' assertions. A failed check prints file:line and the expression, counts
 * the failure and carries on; main returns check_exit(), non-zero if anything failed. */
#ifndef LW_TEST_CHECK_H
#define LW_TEST_CHECK_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "lw.h"

static int check_failures;
static int check_passes;

/* The checks' bodies, for the macros below and for harnesses whose own macros count here. */
static inline void check_true(const char *file, int line, const char *expr, bool ok) {
    if (ok) {
        check_passes++;
    } else {
        check_failures++;
        fprintf(stderr, "%s:%d: check failed: %s\n", file, line, expr);
    }
}

static inline void check_equal(const char *file, int line, const char *a, const char *b,
                               long long x, long long y) {
    if (x == y) {
        check_passes++;
    } else {
        check_failures++;
        fprintf(stderr, "%s:%d: check failed: %s == %s (%lld != %lld)\n", file, line, a, b, x, y);
    }
}

static inline void check_status(const char *file, int line, const char *expr, lw_status st) {
    if (st == LW_OK) {
        check_passes++;
    } else {
        check_failures++;
        fprintf(stderr, "%s:%d: %s failed (%d): %s\n", file, line, expr, (int)st, lw_last_error());
    }
}

static inline void check_failure(const char *file, int line, const char *expr, lw_status st,
                                 lw_status want, const char *text) {
    if (st == want && strstr(lw_last_error(), text) != NULL) {
        check_passes++;
    } else {
        check_failures++;
        fprintf(stderr, "%s:%d: %s: expected status %d with \"%s\", got %d: \"%s\"\n", file, line,
                expr, (int)want, text, (int)st, lw_last_error());
    }
}

#define CHECK(cond)    check_true(__FILE__, __LINE__, #cond, (cond))
#define CHECK_EQ(a, b) check_equal(__FILE__, __LINE__, #a, #b, (long long)(a), (long long)(b))
/* status is ok; otherwise print lw_last_error() */
#define CHECK_OK(expr) check_status(__FILE__, __LINE__, #expr, (expr))
/* status is `status` and the error message contains `text` */
#define CHECK_FAILS(expr, status, text)                                                            \
    check_failure(__FILE__, __LINE__, #expr, (expr), (status), (text))

static inline int check_exit(const char *name) {
    printf("%s: %d checks passed, %d failed\n", name, check_passes, check_failures);
    return check_failures == 0 ? 0 : 1;
}

/* For tests that run on several ranks: fails every rank when any rank failed, frees the
 * communicator, and reports "rank r of n: ...". */
static inline int check_exit_all_ranks(lw_comm *c, const char *name) {
    int rank = lw_comm_rank(c), size = lw_comm_size(c);
    int64_t failures = check_failures;
    CHECK_OK(lw_comm_allreduce(c, &failures, 1, LW_DTYPE_I64, LW_REDUCE_SUM));
    if (failures > 0 && check_failures == 0) check_failures = 1;
    lw_comm_free(c);
    printf("rank %d of %d: ", rank, size);
    return check_exit(name);
}

#endif
