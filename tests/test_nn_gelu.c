/* test_nn_gelu.c: lw_gelu_forward against the tanh formula in float64, lw_gelu_backward
 * against finite differences and against the analytic derivative, the accumulate (+=)
 * contract, and the tails: huge, infinite and NaN inputs. */
#include "nn_check.h"

#include <stdio.h>
#include <stdlib.h>

static void check_tol(const char *what, int64_t n, double err, double tol) {
    nn_within(err, tol, "gelu n=%lld %s", (long long)n, what);
}

static const double K = 0.7978845608028654; /* sqrt(2 / pi) */

static double gelu_ref(double x) { return 0.5 * x * (1.0 + tanh(K * (x + 0.044715 * x * x * x))); }

static double gelu_grad_ref(double x) {
    double t = tanh(K * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * K * (1.0 + 3.0 * 0.044715 * x * x);
}

typedef struct {
    float *y, *x, *r;
    int64_t n;
} ctx_t;

static double loss(void *p) {
    ctx_t *k = p;
    CHECK_OK(lw_gelu_forward(NULL, k->y, LW_DTYPE_F32, k->x, LW_DTYPE_F32, k->n));
    return nn_dot(k->y, k->r, k->n);
}

/* |got - ref| / max(|ref|, 1e-3). Relative down to |y| = 1e-3; below that (x < -3.5) only
 * absolute, because there y ~ x exp(-2u) and the float32 argument 2u carries a relative error
 * of a few ulps that exp turns into ~|2u| ulps of y: an ill-conditioned tail, not a bug. */
static double rel_error(const float *got, const double *ref, int64_t n) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++)
        worst = fmax(worst, fabs(got[i] - ref[i]) / fmax(fabs(ref[i]), 1e-3));
    return worst;
}

static void test_shape(int64_t n, float scale) {
    ctx_t k = {nn_alloc(n), nn_alloc(n), nn_alloc(n), n};
    float *dx = nn_alloc(n);
    double *ref = malloc(sizeof(double) * (size_t)n);
    nn_fill(k.x, n, scale);
    nn_fill(k.r, n, 1.0f);

    /* (a) forward; the exp-based evaluation is within a few ulps (measured <= 7.4e-7) */
    CHECK_OK(lw_gelu_forward(NULL, k.y, LW_DTYPE_F32, k.x, LW_DTYPE_F32, n));
    for (int64_t i = 0; i < n; i++)
        ref[i] = gelu_ref(k.x[i]);
    check_tol("forward", n, rel_error(k.y, ref, n), 1e-5);

    /* (b) dx against central differences: each x moves one y, gelu''' is O(1), so eps = 1e-2
     * has truncation error ~ eps^2 / 6 ~ 2e-5, and float32 rounding of y over 2 eps adds ~3e-6
     * |y|. Measured <= 2e-5; 1e-3 keeps a 50x margin. Dropping the sech^2 term or a factor of
     * it is off by O(0.1). Also against the float64 derivative, to 1e-5 mixed. */
    CHECK_OK(lw_gelu_backward(NULL, dx, LW_DTYPE_F32, k.r, k.x, LW_DTYPE_F32, n));
    check_tol("fd dx", n, nn_fd_worst(k.x, dx, n, loss, &k, 1e-2f, 1000), 1e-3);
    double worst = 0;
    for (int64_t i = 0; i < n; i++)
        worst = fmax(worst, fabs(dx[i] - k.r[i] * gelu_grad_ref(k.x[i])) /
                                (1.0 + fabs(k.r[i] * gelu_grad_ref(k.x[i]))));
    check_tol("dx vs float64 derivative", n, worst, 1e-5);

    /* (c) accumulate: elementwise, so backward into random contents is bit for bit the
     * random contents plus the gradient from zeros (one float addition, the same operands) */
    float *pre = nn_alloc(n), *acc = nn_alloc(n);
    nn_fill(pre, n, 1.0f);
    memcpy(acc, pre, sizeof(float) * (size_t)n);
    CHECK_OK(lw_gelu_backward(NULL, acc, LW_DTYPE_F32, k.r, k.x, LW_DTYPE_F32, n));
    int exact = 1;
    for (int64_t i = 0; i < n; i++)
        exact &= acc[i] == pre[i] + dx[i];
    CHECK(exact);
    CHECK_OK(lw_gelu_backward(NULL, acc, LW_DTYPE_F32, k.r, k.x, LW_DTYPE_F32, n));
    exact = 1;
    for (int64_t i = 0; i < n; i++)
        exact &= acc[i] == (pre[i] + dx[i]) + dx[i];
    CHECK(exact);

    free(k.y), free(k.x), free(k.r), free(dx), free(ref), free(pre), free(acc);
}

/* The clamped tails: |x| >= 9 gives x or 0 and slope 1 or 0; huge and infinite x give no NaN
 * (x^3 overflows to inf there); NaN stays NaN; n = 0 touches nothing. */
static void test_tails(void) {
    const float x[] = {9.0f, 9.5f, 30.0f, 1e30f, INFINITY, -9.0f, -9.5f, -30.0f, -1e30f, NAN};
    const int64_t n = 10;
    float y[10], dx[10] = {0}, dy[10];
    for (int i = 0; i < n; i++)
        dy[i] = 1.0f;
    CHECK_OK(lw_gelu_forward(NULL, y, LW_DTYPE_F32, x, LW_DTYPE_F32, n));
    CHECK_OK(lw_gelu_backward(NULL, dx, LW_DTYPE_F32, dy, x, LW_DTYPE_F32, n));
    for (int i = 0; i < 4; i++)
        CHECK(y[i] == x[i] && dx[i] == 1.0f);
    CHECK(y[4] == INFINITY && dx[4] == 1.0f);
    for (int i = 5; i < 9; i++)
        CHECK(fabsf(y[i]) < 1e-27f && fabsf(dx[i]) < 1e-25f);
    CHECK(isnan(y[9]) && isnan(dx[9]));
    float keep[1] = {42.0f};
    CHECK_OK(lw_gelu_forward(NULL, keep, LW_DTYPE_F32, x, LW_DTYPE_F32, 0));
    CHECK_OK(lw_gelu_backward(NULL, keep, LW_DTYPE_F32, dy, x, LW_DTYPE_F32, 0));
    CHECK(keep[0] == 42.0f);
}

/* A dtype the kernels do not take, named with its role, before anything is written. */
static void test_dtypes(void) {
    float x[2] = {1, 2}, y[2] = {9, 9}, dy[2] = {1, 1};
    CHECK_FAILS(lw_gelu_forward(NULL, y, LW_DTYPE_F32, x, LW_DTYPE_F16, 2), LW_ERR_INVALID,
                "gelu forward: input of dtype f16: fp32 or bf16 only");
    CHECK_FAILS(lw_gelu_backward(NULL, y, LW_DTYPE_F16, dy, x, LW_DTYPE_F32, 2), LW_ERR_INVALID,
                "gelu backward: input gradient of dtype f16: fp32 or bf16 only");
    CHECK(y[0] == 9 && y[1] == 9);
}

int main(void) {
    test_dtypes();
    test_shape(7, 3.0f);
    test_shape(13, 5.0f);
    /* past the 256-element clamp block, with a tail, and wide enough to reach the
     * ill-conditioned negative side and the |x| > 9 clamp */
    test_shape(1031, 10.0f);
    test_tails();
    return check_exit("test_nn_gelu");
}
