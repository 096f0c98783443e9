/* test_nn_layernorm.c: lw_layernorm_forward (y, saved mean and rstd) against a float64 loop,
 * also on rows whose mean is large against their spread; every gradient of
 * lw_layernorm_backward against finite differences; the accumulate (+=) contract; NULL beta. */
#include "nn_check.h"

#include <stdio.h>
#include <stdlib.h>

static void check_tol(const char *what, int64_t n, int64_t c, double err, double tol) {
    nn_within(err, tol, "layernorm n=%lld c=%lld %s", (long long)n, (long long)c, what);
}

#define LN_EPS 1e-5f

typedef struct {
    float *y, *mean, *rstd, *x, *g, *beta, *r;
    int64_t n, c;
} ctx_t;

static double loss(void *p) {
    ctx_t *k = p;
    CHECK_OK(lw_layernorm_forward(NULL, k->y, LW_DTYPE_F32, k->mean, k->rstd, k->x, k->g, k->beta,
                                  k->n, k->c, LN_EPS));
    return nn_dot(k->y, k->r, k->n * k->c);
}

/* Worst error of y (mixed: |err| / (1 + |ref|)) and of the saved mean and rstd (relative to
 * rstd, the scale both act on) against float64 row statistics. */
static void forward_errors(const ctx_t *k, const float *beta, double *ey, double *estat) {
    *ey = 0, *estat = 0;
    for (int64_t i = 0; i < k->n; i++) {
        const float *x = k->x + i * k->c;
        double m = 0, v = 0;
        for (int64_t j = 0; j < k->c; j++)
            m += x[j];
        m /= (double)k->c;
        for (int64_t j = 0; j < k->c; j++)
            v += (x[j] - m) * (x[j] - m);
        double rs = 1.0 / sqrt(v / (double)k->c + (double)LN_EPS);
        *estat = fmax(*estat, fabs(k->mean[i] - m) * rs);
        *estat = fmax(*estat, fabs(k->rstd[i] - rs) / rs);
        for (int64_t j = 0; j < k->c; j++) {
            double ref = (x[j] - m) * rs * k->g[j] + (beta ? beta[j] : 0.0);
            *ey = fmax(*ey, fabs(k->y[i * k->c + j] - ref) / (1.0 + fabs(ref)));
        }
    }
}

static void test_shape(int64_t n, int64_t c) {
    ctx_t k = {nn_alloc(n * c), nn_alloc(n), nn_alloc(n),
               nn_alloc(n * c), nn_alloc(c), nn_alloc(c),
               nn_alloc(n * c), n,           c};
    float *dx = nn_alloc(n * c), *dg = nn_alloc(c), *db = nn_alloc(c);
    nn_fill(k.x, n * c, 1.0f);
    nn_fill(k.g, c, 1.0f);
    nn_fill(k.beta, c, 1.0f);
    nn_fill(k.r, n * c, 1.0f);
    for (int64_t j = 0; j < c; j++)
        k.g[j] += 1.0f; /* gains around 1, as trained ones are */

    /* (a) forward. float32 rounding of x - mean, of the saved mean and of the products gives a
     * few ulps of |y| (measured < 1e-6); 1e-5 is the stated bound. */
    double ey, es;
    CHECK_OK(lw_layernorm_forward(NULL, k.y, LW_DTYPE_F32, k.mean, k.rstd, k.x, k.g, k.beta, n, c,
                                  LN_EPS));
    forward_errors(&k, k.beta, &ey, &es);
    check_tol("forward y", n, c, ey, 1e-5);
    check_tol("forward mean, rstd", n, c, es, 1e-6);

    /* (b) central differences. L is linear in g and beta (any eps is exact up to rounding);
     * in x it is smooth with curvature ~ rstd^2 ~ 3 for these rows, so eps = 3e-3 has
     * truncation error ~ eps^2 * 3 ~ 3e-5, and float32 rounding of the row's c outputs over
     * 2 eps adds ~ sqrt(c) * 1e-7 / 6e-3: 2e-4 at c = 131 (measured 3e-4 there, <= 8e-5 on the
     * small rows). 1e-2 as tolerance; a dropped or mis-scaled term of dx is off by ~0.1 or more
     * on these small rows (the mean terms weigh 1/c). */
    CHECK_OK(lw_layernorm_backward(NULL, dx, dg, db, k.r, k.x, k.g, k.mean, k.rstd, n, c));
    const double tol = 1e-2;
    check_tol("fd dx", n, c, nn_fd_worst(k.x, dx, n * c, loss, &k, 3e-3f, 400), tol);
    check_tol("fd dg", n, c, nn_fd_worst(k.g, dg, c, loss, &k, 1e-2f, 400), tol);
    check_tol("fd dbeta", n, c, nn_fd_worst(k.beta, db, c, loss, &k, 1e-2f, 400), tol);

    /* (c) accumulate into random contents; dg and dbeta then sum rows in another order than
     * into zeros, hence a rounding-level tolerance */
    CHECK_OK(lw_layernorm_forward(NULL, k.y, LW_DTYPE_F32, k.mean, k.rstd, k.x, k.g, k.beta, n, c,
                                  LN_EPS));
    float *pdx = nn_alloc(n * c), *pdg = nn_alloc(c), *pdb = nn_alloc(c);
    float *adx = nn_alloc(n * c), *adg = nn_alloc(c), *adb = nn_alloc(c);
    nn_fill(pdx, n * c, 1.0f);
    nn_fill(pdg, c, 1.0f);
    nn_fill(pdb, c, 1.0f);
    memcpy(adx, pdx, sizeof(float) * (size_t)(n * c));
    memcpy(adg, pdg, sizeof(float) * (size_t)c);
    memcpy(adb, pdb, sizeof(float) * (size_t)c);
    CHECK_OK(lw_layernorm_backward(NULL, adx, adg, adb, k.r, k.x, k.g, k.mean, k.rstd, n, c));
    check_tol("accumulate dx", n, c, nn_accumulate_error(adx, pdx, dx, n * c), 1e-6);
    check_tol("accumulate dg", n, c, nn_accumulate_error(adg, pdg, dg, c), 1e-6);
    check_tol("accumulate dbeta", n, c, nn_accumulate_error(adb, pdb, db, c), 1e-6);

    /* (d) no beta: y = xhat g; no dbeta: dx and dg the same bits */
    CHECK_OK(lw_layernorm_forward(NULL, k.y, LW_DTYPE_F32, k.mean, k.rstd, k.x, k.g, NULL, n, c,
                                  LN_EPS));
    forward_errors(&k, NULL, &ey, &es);
    check_tol("forward y, no beta", n, c, ey, 1e-5);
    float *dx2 = nn_alloc(n * c), *dg2 = nn_alloc(c);
    CHECK_OK(lw_layernorm_backward(NULL, dx2, dg2, NULL, k.r, k.x, k.g, k.mean, k.rstd, n, c));
    CHECK(memcmp(dx2, dx, sizeof(float) * (size_t)(n * c)) == 0);
    CHECK(memcmp(dg2, dg, sizeof(float) * (size_t)c) == 0);

    /* Rows at mean 10 with spread 0.1 (mean / std ~ 200): a one-pass E[x^2] - E[x]^2 in float
     * loses the variance; the two-pass double statistics do not. What remains is the saved
     * float mean, off by up to half an ulp of 10 (4.8e-7), i.e. 4.8e-7 rstd |g| in y: up to
     * ~4e-5 on 5-channel rows whose std happens to be ~0.03 (measured 3.2e-5). Hence 1e-4. */
    for (int64_t i = 0; i < n * c; i++)
        k.x[i] = 10.0f + nn_rand(0.1f);
    CHECK_OK(lw_layernorm_forward(NULL, k.y, LW_DTYPE_F32, k.mean, k.rstd, k.x, k.g, k.beta, n, c,
                                  LN_EPS));
    forward_errors(&k, k.beta, &ey, &es);
    check_tol("forward y, shifted rows", n, c, ey, 1e-4);
    check_tol("forward mean, rstd, shifted rows", n, c, es, 1e-4);

    free(k.y), free(k.mean), free(k.rstd), free(k.x), free(k.g), free(k.beta), free(k.r);
    free(dx), free(dg), free(db), free(pdx), free(pdg), free(pdb), free(adx), free(adg);
    free(adb), free(dx2), free(dg2);
}

int main(void) {
    test_shape(5, 13);
    test_shape(7, 9);
    test_shape(6, 5);   /* c below the 8 accumulator lanes: only the tail loops run */
    test_shape(3, 1);   /* one channel: xhat = 0, y = beta, dx = 0 */
    test_shape(6, 131); /* c past 64: the lane loops' body and a 3-element tail */
    return check_exit("test_nn_layernorm");
}
