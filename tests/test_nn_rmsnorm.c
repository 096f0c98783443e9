/* test_nn_rmsnorm.c: lw_rmsnorm_forward (y, the saved rstd) against a float64 loop, with a gain
 * and without; every gradient of lw_rmsnorm_backward against finite differences; the accumulate
 * (+=) contract; the parameter-free norm the gained one with g = 1, bit for bit. */
#include "nn_check.h"

#include <stdio.h>
#include <string.h>

static void check_tol(const char *what, int64_t n, int64_t c, double err, double tol) {
    nn_within(err, tol, "rmsnorm n=%lld c=%lld %s", (long long)n, (long long)c, what);
}

#define RN_EPS 1e-5f

typedef struct {
    float *y, *rstd, *x, *g, *r;
    int64_t n, c;
} ctx_t;

static double loss(void *p) {
    ctx_t *k = p;
    CHECK_OK(lw_rmsnorm_forward(NULL, k->y, LW_DTYPE_F32, k->rstd, k->x, k->g, k->n, k->c, RN_EPS));
    return nn_dot(k->y, k->r, k->n * k->c);
}

/* Worst mixed error |err| / (1 + |ref|) of y, and relative error of rstd, against float64. */
static void forward_errors(const ctx_t *k, double *ey, double *es) {
    *ey = 0, *es = 0;
    for (int64_t i = 0; i < k->n; i++) {
        const float *x = k->x + i * k->c;
        double ss = 0;
        for (int64_t j = 0; j < k->c; j++)
            ss += (double)x[j] * x[j];
        const double rs = 1.0 / sqrt(ss / (double)k->c + (double)RN_EPS);
        *es = fmax(*es, fabs(k->rstd[i] - rs) / rs);
        for (int64_t j = 0; j < k->c; j++) {
            const double ref = x[j] * rs * (k->g != NULL ? (double)k->g[j] : 1.0);
            *ey = fmax(*ey, fabs(k->y[i * k->c + j] - ref) / (1.0 + fabs(ref)));
        }
    }
}

static void test_shape(int64_t n, int64_t c) {
    float *g = nn_alloc(c), *ones = nn_alloc(c);
    ctx_t k = {nn_alloc(n * c), nn_alloc(n), nn_alloc(n * c), g, nn_alloc(n * c), n, c};
    float *dx = nn_alloc(n * c), *dg = nn_alloc(c);
    nn_fill(k.x, n * c, 1.0f);
    nn_fill(k.r, n * c, 1.0f);
    nn_fill(g, c, 0.5f);
    for (int64_t j = 0; j < c; j++)
        g[j] += 1.0f, ones[j] = 1.0f; /* gains around 1, as trained ones are */

    /* (a) forward: rstd is one rounding of the double statistic, y two more: a few ulps */
    double ey, es;
    loss(&k);
    forward_errors(&k, &ey, &es);
    check_tol("forward y", n, c, ey, 1e-6);
    check_tol("forward rstd", n, c, es, 1e-6);

    /* (b) central differences. L is linear in g (any eps is exact up to rounding); in x smooth
     * with curvature ~ rstd^2 ~ 3 for these rows: eps = 3e-3 has truncation error ~3e-5, and
     * float32 rounding of the row's outputs over 2 eps ~ sqrt(c) 1e-7 / 6e-3: 2e-4 at c = 131.
     * 1e-2 as tolerance, as for the layer norm; dropping the projection term, or its 1/c, is
     * off by ~0.1 or more on these rows. */
    CHECK_OK(lw_rmsnorm_backward(NULL, dx, dg, k.r, k.x, g, k.rstd, n, c));
    check_tol("fd dx", n, c, nn_fd_worst(k.x, dx, n * c, loss, &k, 3e-3f, 400), 1e-2);
    check_tol("fd dg", n, c, nn_fd_worst(g, dg, c, loss, &k, 1e-2f, 400), 1e-2);

    /* (c) accumulate into random contents: dx element-wise bit for bit after one addition, dg
     * summing rows in another order than into zeros: a rounding's tolerance */
    loss(&k);
    float *pdx = nn_alloc(n * c), *pdg = nn_alloc(c), *adx = nn_alloc(n * c), *adg = nn_alloc(c);
    nn_fill(pdx, n * c, 1.0f);
    nn_fill(pdg, c, 1.0f);
    memcpy(adx, pdx, sizeof(float) * (size_t)(n * c));
    memcpy(adg, pdg, sizeof(float) * (size_t)c);
    CHECK_OK(lw_rmsnorm_backward(NULL, adx, adg, k.r, k.x, g, k.rstd, n, c));
    check_tol("accumulate dx", n, c, nn_accumulate_error(adx, pdx, dx, n * c), 1e-6);
    check_tol("accumulate dg", n, c, nn_accumulate_error(adg, pdg, dg, c), 1e-6);

    /* (d) parameter-free (nanochat's): y and rstd against float64, dx against finite
     * differences, and both the gained norm's with g = 1, bit for bit */
    k.g = NULL;
    loss(&k);
    forward_errors(&k, &ey, &es);
    check_tol("forward y, no gain", n, c, ey, 1e-6);
    float *dx0 = nn_alloc(n * c), *dx1 = nn_alloc(n * c), *y0 = nn_alloc(n * c);
    CHECK_OK(lw_rmsnorm_backward(NULL, dx0, NULL, k.r, k.x, NULL, k.rstd, n, c));
    check_tol("fd dx, no gain", n, c, nn_fd_worst(k.x, dx0, n * c, loss, &k, 3e-3f, 400), 1e-2);
    loss(&k);
    memcpy(y0, k.y, sizeof(float) * (size_t)(n * c));
    CHECK_OK(lw_rmsnorm_forward(NULL, k.y, LW_DTYPE_F32, k.rstd, k.x, ones, n, c, RN_EPS));
    CHECK(memcmp(y0, k.y, sizeof(float) * (size_t)(n * c)) == 0);
    CHECK_OK(lw_rmsnorm_backward(NULL, dx1, NULL, k.r, k.x, ones, k.rstd, n, c));
    CHECK(memcmp(dx0, dx1, sizeof(float) * (size_t)(n * c)) == 0);

    free(k.y), free(k.rstd), free(k.x), free(g), free(ones), free(k.r), free(dx), free(dg);
    free(pdx), free(pdg), free(adx), free(adg), free(dx0), free(dx1), free(y0);
}

int main(void) {
    test_shape(5, 13);
    test_shape(6, 5);   /* c below the 8 accumulator lanes: only the tail loops run */
    test_shape(3, 1);   /* one channel: y = g sign(x) |x| / sqrt(x^2 + eps) */
    test_shape(6, 131); /* the lane loops' body and a 3-element tail */
    return check_exit("test_nn_rmsnorm");
}
