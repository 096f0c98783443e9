/* check.h: the C tests' assertions. A failed check prints file:line and the expression, counts
 * the failure and carries on; main returns check_exit(), non-zero if anything failed. */
#ifndef LW_TEST_CHECK_H
#define LW_TEST_CHECK_H

#include <stdio.h>
#include <string.h>

#include "lw.h"

static int check_failures;
static int check_passes;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (cond) {                                                                                \
            check_passes++;                                                                        \
        } else {                                                                                   \
            check_failures++;                                                                      \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        long long check_a = (long long)(a), check_b = (long long)(b);                              \
        if (check_a == check_b) {                                                                  \
            check_passes++;                                                                        \
        } else {                                                                                   \
            check_failures++;                                                                      \
            fprintf(stderr, "%s:%d: check failed: %s == %s (%lld != %lld)\n", __FILE__, __LINE__,  \
                    #a, #b, check_a, check_b);                                                     \
        }                                                                                          \
    } while (0)

/* status is ok; otherwise print lw_last_error() */
#define CHECK_OK(expr)                                                                             \
    do {                                                                                           \
        lw_status check_st = (expr);                                                               \
        if (check_st == LW_OK) {                                                                   \
            check_passes++;                                                                        \
        } else {                                                                                   \
            check_failures++;                                                                      \
            fprintf(stderr, "%s:%d: %s failed (%d): %s\n", __FILE__, __LINE__, #expr,              \
                    (int)check_st, lw_last_error());                                               \
        }                                                                                          \
    } while (0)

/* status is `status` and the error message contains `text` */
#define CHECK_FAILS(expr, status, text)                                                            \
    do {                                                                                           \
        lw_status check_st = (expr);                                                               \
        if (check_st == (status) && strstr(lw_last_error(), (text)) != NULL) {                     \
            check_passes++;                                                                        \
        } else {                                                                                   \
            check_failures++;                                                                      \
            fprintf(stderr, "%s:%d: %s: expected status %d with \"%s\", got %d: \"%s\"\n",         \
                    __FILE__, __LINE__, #expr, (int)(status), (text), (int)check_st,               \
                    lw_last_error());                                                              \
        }                                                                                          \
    } while (0)

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
