/* test_nn_gather.c: rows moved by an index list: lw_gather_forward / _backward (a mixture of
 * experts' dispatch and its scatter-add) and lw_combine_forward / _backward (the weighted
 * combine), against reference loops and finite differences, with rows listed several times and
 * rows never listed, the accumulate (+=) contract, optional outputs and empty lists. */
#include "nn_check.h"

#include <stdio.h>
#include <stdlib.h>

static void check_tol(const char *what, int64_t m, int64_t c, double err, double tol) {
    nn_within(err, tol, "gather m=%lld c=%lld %s", (long long)m, (long long)c, what);
}

typedef struct {
    float *x, *out, *src, *w, *y, *r_out, *r_y;
    int32_t *rows;
    int64_t rows_x, m, c;
} ctx_t;

static double gather_loss(void *p) {
    ctx_t *x = p;
    CHECK_OK(lw_gather_forward(NULL, x->out, x->x, x->rows, x->m, x->c));
    return nn_dot(x->out, x->r_out, x->m * x->c);
}

static double combine_loss(void *p) {
    ctx_t *x = p;
    memset(x->y, 0, sizeof(float) * (size_t)(x->rows_x * x->c));
    CHECK_OK(lw_combine_forward(NULL, x->y, x->src, x->w, x->rows, x->m, x->c));
    return nn_dot(x->y, x->r_y, x->rows_x * x->c);
}

/* m listed rows out of rows_x, drawn from [0, rows_x - 1): the last row is never listed, and
 * with m > rows_x some rows are listed several times */
static void test_shape(int64_t rows_x, int64_t m, int64_t c) {
    ctx_t x = {nn_alloc(rows_x * c),
               nn_alloc(m * c),
               nn_alloc(m * c),
               nn_alloc(m),
               nn_alloc(rows_x * c),
               nn_alloc(m * c),
               nn_alloc(rows_x * c),
               malloc(sizeof(int32_t) * (size_t)(m > 0 ? m : 1)),
               rows_x,
               m,
               c};
    nn_fill(x.x, rows_x * c, 1.0f);
    nn_fill(x.src, m * c, 1.0f);
    nn_fill(x.w, m, 1.0f);
    nn_fill(x.r_out, m * c, 1.0f);
    nn_fill(x.r_y, rows_x * c, 1.0f);
    for (int64_t i = 0; i < m; i++) {
        int32_t r = (int32_t)((nn_rand(1.0f) + 1.0f) * 0.5f * (float)(rows_x - 1));
        x.rows[i] = r < rows_x - 1 ? r : (int32_t)(rows_x - 2);
    }

    /* (a) gather: exact copies */
    CHECK_OK(lw_gather_forward(NULL, x.out, x.x, x.rows, m, c));
    int same = 1;
    for (int64_t i = 0; i < m; i++)
        same &= memcmp(x.out + i * c, x.x + (int64_t)x.rows[i] * c, sizeof(float) * (size_t)c) == 0;
    CHECK(same);

    /* (b) its backward, a scatter-add: L is linear in x, so the central differences carry only
     * the rounding of the moved terms (~1e-5 at eps 1e-2); a row missed or counted once too
     * often is off by O(1). The row never listed gets exactly 0. */
    float *dx = nn_alloc(rows_x * c);
    CHECK_OK(lw_gather_backward(NULL, dx, x.r_out, x.rows, m, c));
    check_tol("fd gather dx", m, c, nn_fd_worst(x.x, dx, rows_x * c, gather_loss, &x, 1e-2f, 400),
              1e-3);
    int unlisted_zero = 1;
    for (int64_t j = 0; j < c; j++)
        unlisted_zero &= dx[(rows_x - 1) * c + j] == 0.0f;
    CHECK(unlisted_zero);

    /* (c) combine against a double loop */
    memset(x.y, 0, sizeof(float) * (size_t)(rows_x * c));
    CHECK_OK(lw_combine_forward(NULL, x.y, x.src, x.w, x.rows, m, c));
    double worst = 0;
    for (int64_t r = 0; r < rows_x; r++)
        for (int64_t j = 0; j < c; j++) {
            double ref = 0;
            for (int64_t i = 0; i < m; i++)
                if (x.rows[i] == r) ref += (double)x.w[i] * x.src[i * c + j];
            worst = fmax(worst, fabs(x.y[r * c + j] - ref));
        }
    check_tol("combine forward", m, c, worst, 1e-6);

    /* (d) its backward: dsrc (linear, as (b)) and dw (linear in w too) */
    float *dsrc = nn_alloc(m * c), *dw = nn_alloc(m);
    CHECK_OK(lw_combine_backward(NULL, dsrc, dw, x.r_y, x.src, x.w, x.rows, m, c));
    check_tol("fd combine dsrc", m, c,
              nn_fd_worst(x.src, dsrc, m * c, combine_loss, &x, 1e-2f, 400), 1e-3);
    check_tol("fd combine dw", m, c, nn_fd_worst(x.w, dw, m, combine_loss, &x, 1e-2f, 400), 1e-3);

    /* (e) accumulate, and each output alone */
    float *pre_x = nn_alloc(rows_x * c), *acc_x = nn_alloc(rows_x * c);
    float *pre_s = nn_alloc(m * c), *acc_s = nn_alloc(m * c), *pre_w = nn_alloc(m);
    float *acc_w = nn_alloc(m);
    nn_fill(pre_x, rows_x * c, 1.0f);
    nn_fill(pre_s, m * c, 1.0f);
    nn_fill(pre_w, m, 1.0f);
    memcpy(acc_x, pre_x, sizeof(float) * (size_t)(rows_x * c));
    CHECK_OK(lw_gather_backward(NULL, acc_x, x.r_out, x.rows, m, c));
    /* a row listed several times adds several terms onto pre: a few roundings */
    check_tol("accumulate gather dx", m, c, nn_accumulate_error(acc_x, pre_x, dx, rows_x * c),
              1e-5);
    memcpy(acc_s, pre_s, sizeof(float) * (size_t)(m * c));
    memcpy(acc_w, pre_w, sizeof(float) * (size_t)m);
    CHECK_OK(lw_combine_backward(NULL, acc_s, NULL, x.r_y, x.src, x.w, x.rows, m, c));
    check_tol("accumulate combine dsrc", m, c, nn_accumulate_error(acc_s, pre_s, dsrc, m * c),
              1e-6);
    CHECK_OK(lw_combine_backward(NULL, NULL, acc_w, x.r_y, x.src, x.w, x.rows, m, c));
    check_tol("accumulate combine dw", m, c, nn_accumulate_error(acc_w, pre_w, dw, m), 1e-6);
    /* combine adds onto y as well */
    memcpy(acc_x, pre_x, sizeof(float) * (size_t)(rows_x * c));
    CHECK_OK(lw_combine_forward(NULL, acc_x, x.src, x.w, x.rows, m, c));
    combine_loss(&x);
    check_tol("accumulate combine y", m, c, nn_accumulate_error(acc_x, pre_x, x.y, rows_x * c),
              1e-5);

    free(x.x), free(x.out), free(x.src), free(x.w), free(x.y), free(x.r_out), free(x.r_y);
    free(x.rows), free(dx), free(dsrc), free(dw), free(pre_x), free(acc_x), free(pre_s);
    free(acc_s), free(pre_w), free(acc_w);
}

static void test_empty(void) {
    float y[4] = {1, 2, 3, 4};
    const float src[1] = {9};
    const int32_t rows[1] = {0};
    CHECK_OK(lw_gather_forward(NULL, y, src, rows, 0, 4));
    CHECK_OK(lw_gather_backward(NULL, y, src, rows, 0, 4));
    CHECK_OK(lw_combine_forward(NULL, y, src, src, rows, 0, 4));
    CHECK_OK(lw_combine_backward(NULL, y, y, src, src, src, rows, 0, 4));
    CHECK(y[0] == 1 && y[1] == 2 && y[2] == 3 && y[3] == 4);
}

int main(void) {
    test_shape(5, 3, 4);
    test_shape(6, 20, 7);   /* rows listed several times (a token at its k experts) */
    test_shape(9, 16, 1);   /* c = 1: the weights' own gather */
    test_shape(40, 80, 70); /* past 64 columns */
    test_empty();
    return check_exit("test_nn_gather");
}
