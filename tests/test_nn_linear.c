/* test_nn_linear.c: lw_linear_forward against a float64 loop, every gradient of
 * lw_linear_backward against finite differences, the accumulate (+=) contract, NULL bias and
 * NULL dx/db, and empty shapes. Shapes are small and odd, plus one past OpenBLAS's blocking. */
#include "nn_check.h"

#include <stdio.h>
#include <stdlib.h>

/* Prints the measured error on failure, or always with NN_VERBOSE set (to re-derive the
 * tolerances below). */
static void check_tol(const char *what, int64_t n, int64_t in, int64_t out, double err,
                      double tol) {
    nn_within(err, tol, "linear n=%lld in=%lld out=%lld %s", (long long)n, (long long)in,
              (long long)out, what);
}

typedef struct {
    float *y, *x, *w, *b, *r;
    int64_t n, in, out;
} ctx_t;

static double loss(void *p) {
    ctx_t *c = p;
    CHECK_OK(lw_linear_forward(NULL, c->y, LW_DTYPE_F32, c->x, LW_DTYPE_F32, c->w, LW_DTYPE_F32,
                               c->b, c->n, c->in, c->out));
    return nn_dot(c->y, c->r, c->n * c->out);
}

/* Float64 reference; the error is measured against sum_k |x w| + |b|, the scale a float32 dot
 * product's rounding error is proportional to (at most ~in * 6e-8 of it). */
static double forward_error(const float *y, const float *x, const float *w, const float *b,
                            int64_t n, int64_t in, int64_t out) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < out; j++) {
            double s = b ? b[j] : 0.0, mag = b ? fabs(b[j]) : 0.0;
            for (int64_t k = 0; k < in; k++) {
                s += (double)x[i * in + k] * w[j * in + k];
                mag += fabs((double)x[i * in + k] * w[j * in + k]);
            }
            worst = fmax(worst, fabs(y[i * out + j] - s) / fmax(mag, 1e-30));
        }
    return worst;
}

/* max |got - (pre + g)| / (1 + |pre| + |g|): got should be pre + g up to the rounding of one
 * addition (an OpenBLAS beta = 1 update adds C after the product). */
static void test_shape(int64_t n, int64_t in, int64_t out) {
    ctx_t c = {nn_alloc(n * out),
               nn_alloc(n * in),
               nn_alloc(out * in),
               nn_alloc(out),
               nn_alloc(n * out),
               n,
               in,
               out};
    float *dx = nn_alloc(n * in), *dw = nn_alloc(out * in), *db = nn_alloc(out);
    nn_fill(c.x, n * in, 1.0f);
    nn_fill(c.w, out * in, 1.0f);
    nn_fill(c.b, out, 1.0f);
    nn_fill(c.r, n * out, 1.0f);

    /* (a) forward, with and without bias */
    CHECK_OK(lw_linear_forward(NULL, c.y, LW_DTYPE_F32, c.x, LW_DTYPE_F32, c.w, LW_DTYPE_F32, c.b,
                               n, in, out));
    check_tol("forward", n, in, out, forward_error(c.y, c.x, c.w, c.b, n, in, out), 1e-5);
    nn_fill(c.y, n * out, 100.0f); /* without a bias y's old contents must not leak in */
    CHECK_OK(lw_linear_forward(NULL, c.y, LW_DTYPE_F32, c.x, LW_DTYPE_F32, c.w, LW_DTYPE_F32, NULL,
                               n, in, out));
    check_tol("forward, no bias", n, in, out, forward_error(c.y, c.x, c.w, NULL, n, in, out), 1e-5);

    /* (b) gradients of L = sum y r against central differences. L is linear in each of x, w,
     * b, so the differences have no truncation error; what is left is the float32 rounding of
     * the y entries one perturbation moves (a whole row of `out` for an x entry), divided by
     * 2 eps: measured 2e-5 on the small shapes, 1.4e-4 at out = 131 with eps = 1e-2. 3e-3 keeps
     * a 20x margin, and a wrong gradient (an entry missed, transposed or doubled) is off by
     * O(1). */
    CHECK_OK(lw_linear_backward(NULL, dx, dw, db, c.r, LW_DTYPE_F32, c.x, LW_DTYPE_F32, c.w,
                                LW_DTYPE_F32, n, in, out));
    const float eps = 1e-2f;
    const double tol = 3e-3;
    check_tol("fd dx", n, in, out, nn_fd_worst(c.x, dx, n * in, loss, &c, eps, 300), tol);
    check_tol("fd dw", n, in, out, nn_fd_worst(c.w, dw, out * in, loss, &c, eps, 300), tol);
    check_tol("fd db", n, in, out, nn_fd_worst(c.b, db, out, loss, &c, eps, 300), tol);

    /* (c) accumulate: backward into buffers holding random values adds to them */
    float *pdx = nn_alloc(n * in), *pdw = nn_alloc(out * in), *pdb = nn_alloc(out);
    float *adx = nn_alloc(n * in), *adw = nn_alloc(out * in), *adb = nn_alloc(out);
    nn_fill(pdx, n * in, 1.0f);
    nn_fill(pdw, out * in, 1.0f);
    nn_fill(pdb, out, 1.0f);
    memcpy(adx, pdx, sizeof(float) * (size_t)(n * in));
    memcpy(adw, pdw, sizeof(float) * (size_t)(out * in));
    memcpy(adb, pdb, sizeof(float) * (size_t)out);
    CHECK_OK(lw_linear_backward(NULL, adx, adw, adb, c.r, LW_DTYPE_F32, c.x, LW_DTYPE_F32, c.w,
                                LW_DTYPE_F32, n, in, out));
    check_tol("accumulate dx", n, in, out, nn_accumulate_error(adx, pdx, dx, n * in), 1e-6);
    check_tol("accumulate dw", n, in, out, nn_accumulate_error(adw, pdw, dw, out * in), 1e-6);
    check_tol("accumulate db", n, in, out, nn_accumulate_error(adb, pdb, db, out), 1e-6);

    /* (d) dx and db NULL: dw alone, the same bits as with all three */
    float *dw2 = nn_alloc(out * in);
    CHECK_OK(lw_linear_backward(NULL, NULL, dw2, NULL, c.r, LW_DTYPE_F32, c.x, LW_DTYPE_F32, c.w,
                                LW_DTYPE_F32, n, in, out));
    CHECK(memcmp(dw2, dw, sizeof(float) * (size_t)(out * in)) == 0);

    free(c.y), free(c.x), free(c.w), free(c.b), free(c.r);
    free(dx), free(dw), free(db), free(pdx), free(pdw), free(pdb), free(adx), free(adw);
    free(adb), free(dw2);
}

/* Empty shapes touch nothing (n = 0, out = 0), and in = 0 gives y = b, dw untouched, db the
 * column sums: BLAS itself rejects a leading dimension of 0. */
static void test_empty(void) {
    float y[6] = {9, 9, 9, 9, 9, 9}, b[3] = {1, 2, 3}, dy[6] = {1, 1, 1, 2, 2, 2}, db[3] = {0};
    float x[1] = {7}, w[1] = {7}, dx[1] = {5}, dw[1] = {5};
    CHECK_OK(
        lw_linear_forward(NULL, y, LW_DTYPE_F32, x, LW_DTYPE_F32, w, LW_DTYPE_F32, b, 0, 1, 3));
    CHECK_OK(
        lw_linear_forward(NULL, y, LW_DTYPE_F32, x, LW_DTYPE_F32, w, LW_DTYPE_F32, b, 2, 1, 0));
    CHECK(y[0] == 9 && y[5] == 9);
    CHECK_OK(
        lw_linear_forward(NULL, y, LW_DTYPE_F32, x, LW_DTYPE_F32, w, LW_DTYPE_F32, b, 2, 0, 3));
    CHECK(y[0] == 1 && y[2] == 3 && y[3] == 1 && y[5] == 3);
    CHECK_OK(
        lw_linear_forward(NULL, y, LW_DTYPE_F32, x, LW_DTYPE_F32, w, LW_DTYPE_F32, NULL, 2, 0, 3));
    CHECK(y[0] == 0 && y[5] == 0);
    CHECK_OK(lw_linear_backward(NULL, dx, dw, db, dy, LW_DTYPE_F32, x, LW_DTYPE_F32, w,
                                LW_DTYPE_F32, 2, 0, 3));
    CHECK(db[0] == 3 && db[1] == 3 && db[2] == 3 && dx[0] == 5 && dw[0] == 5);
    CHECK_OK(lw_linear_backward(NULL, dx, dw, db, dy, LW_DTYPE_F32, x, LW_DTYPE_F32, w,
                                LW_DTYPE_F32, 0, 1, 3));
    CHECK(db[0] == 3 && dx[0] == 5 && dw[0] == 5);
}

/* Weights of a dtype the kernels do not read are refused by name, an unknown one by number,
 * before anything is written. */
static void test_weight_dtypes(void) {
    float y[2] = {9, 9}, x[1] = {1}, w[2] = {1, 1}, dx[1] = {5}, dw[2] = {5, 5}, dy[2] = {1, 1};
    CHECK_FAILS(
        lw_linear_forward(NULL, y, LW_DTYPE_F32, x, LW_DTYPE_F32, w, LW_DTYPE_F16, NULL, 1, 1, 2),
        LW_ERR_INVALID, "linear forward: weight of dtype f16: fp32 or bf16 only");
    CHECK_FAILS(
        lw_linear_forward(NULL, y, LW_DTYPE_F16, x, LW_DTYPE_F32, w, LW_DTYPE_F32, NULL, 1, 1, 2),
        LW_ERR_INVALID, "linear forward: output of dtype f16: fp32 or bf16 only");
    CHECK_FAILS(lw_linear_backward(NULL, dx, dw, NULL, dy, LW_DTYPE_F32, x, LW_DTYPE_F32, w,
                                   (lw_dtype)7, 1, 1, 2),
                LW_ERR_INVALID, "linear backward: unknown weight dtype 7");
    CHECK(y[0] == 9 && dx[0] == 5 && dw[0] == 5);
    /* bf16 weights: 1.5 and -2 are exact in bf16 (0x3FC0, 0xC000) */
    const uint16_t w16[2] = {0x3FC0, 0xC000};
    x[0] = 2;
    CHECK_OK(lw_linear_forward(NULL, y, LW_DTYPE_F32, x, LW_DTYPE_F32, w16, LW_DTYPE_BF16, NULL, 1,
                               1, 2));
    CHECK(y[0] == 3 && y[1] == -4);
    /* a bf16 output: the fp32 result, bias included, rounded. y0 = 2 * 1.5 + 1 + 2^-8 = 4 + 2^-8,
     * under half of bf16's step in [4, 8) (2^-5): 4 (0x4080); y1 = 2 * -2 + 1 + 2^-8 = -3 + 2^-8,
     * under half of the step in [2, 4) (2^-6): -3 (0xC040). */
    uint16_t y16[2] = {0, 0};
    const float b[2] = {1.0f + 0x1p-8f, 1.0f + 0x1p-8f};
    x[0] = 2;
    CHECK_OK(lw_linear_forward(NULL, y16, LW_DTYPE_BF16, x, LW_DTYPE_F32, w16, LW_DTYPE_BF16, b, 1,
                               1, 2));
    CHECK(y16[0] == 0x4080 && y16[1] == 0xC040);
    /* the linear layer with GELU, forward and backward: each dtype named by its role */
    float pre[2] = {9, 9};
    CHECK_FAILS(lw_linear_gelu_forward(NULL, y, pre, LW_DTYPE_F16, x, LW_DTYPE_F32, w, LW_DTYPE_F32,
                                       NULL, 1, 1, 2),
                LW_ERR_INVALID, "linear gelu forward: output of dtype f16: fp32 or bf16 only");
    CHECK_FAILS(lw_linear_gelu_backward(NULL, pre, LW_DTYPE_F32, dw, NULL, dy, LW_DTYPE_F16, x,
                                        LW_DTYPE_F32, w, LW_DTYPE_F32, pre, 1, 2, 1),
                LW_ERR_INVALID,
                "linear gelu backward: output gradient of dtype f16: fp32 or bf16 only");
    CHECK_FAILS(lw_linear_gelu_backward(NULL, pre, (lw_dtype)7, dw, NULL, dy, LW_DTYPE_F32, x,
                                        LW_DTYPE_F32, w, LW_DTYPE_F32, pre, 1, 2, 1),
                LW_ERR_INVALID, "linear gelu backward: unknown GELU input dtype 7");
    CHECK(pre[0] == 9 && pre[1] == 9);
}

int main(void) {
    test_weight_dtypes();
    test_shape(5, 9, 11);
    test_shape(7, 13, 6);
    test_shape(1, 1, 1);
    /* every dimension past 64, so OpenBLAS's blocked kernels and edge handling run, and the
     * transposed operands (w in the forward, dy in dw) cross block boundaries */
    test_shape(70, 67, 131);
    test_shape(9, 5, 300); /* out past the bias gradient's 256-column block */
    test_empty();
    return check_exit("test_nn_linear");
}
