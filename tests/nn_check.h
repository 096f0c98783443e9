/* nn_check.h: helpers for the model-kernel tests: seeded random fills, an error held to its
 * tolerance, and a finite-difference gradient check. The loss is a weighted sum
 * L = sum_i y_i r_i of a kernel's output with fixed random weights r, so the analytic gradient
 * is the kernel's backward with dy = r. */
#ifndef LW_TEST_NN_CHECK_H
#define LW_TEST_NN_CHECK_H

#include "check.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t nn_seed = 0x2545F4914F6CDD1Du;

/* uniform in [-scale, scale) */
static inline float nn_rand(float scale) {
    nn_seed ^= nn_seed << 13;
    nn_seed ^= nn_seed >> 7;
    nn_seed ^= nn_seed << 17;
    return scale * (float)((double)(nn_seed >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static inline void nn_fill(float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) x[i] = nn_rand(scale);
}

static inline float *nn_alloc(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

/* sum_i y_i r_i in double */
static inline double nn_dot(const float *y, const float *r, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)y[i] * r[i];
    return s;
}

/* max |got - (pre + g)| / (1 + |pre| + |g|): a backward into buffers pre-filled with `pre`
 * should leave pre + g, up to the rounding of one addition (an OpenBLAS beta = 1 update adds C
 * after the product). */
static inline double nn_accumulate_error(const float *got, const float *pre, const float *g,
                                         int64_t n) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)got[i] - ((double)pre[i] + g[i])) /
                                (1.0 + fabs(pre[i]) + fabs(g[i])));
    return worst;
}

/* Checks err <= tol, printing "<label>: err (tol tol)" (the label from fmt) when it is not, or
 * always with NN_VERBOSE set. */
static inline void nn_within(double err, double tol, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void nn_within(double err, double tol, const char *fmt, ...) {
    if (err > tol || getenv("NN_VERBOSE")) {
        FILE *to = err > tol ? stderr : stdout;
        va_list ap;
        va_start(ap, fmt);
        vfprintf(to, fmt, ap);
        va_end(ap);
        fprintf(to, ": %.3g (tol %g)\n", err, tol);
    }
    CHECK(err <= tol);
}

/* Runs the forward pass and returns the loss; ctx is the test's. */
typedef double (*nn_loss_fn)(void *ctx);

/* Central differences of loss() w.r.t. x[i] for up to `samples` indices spread over x,
 * against grad[i]. Returns the worst error |num - ana| / max(1, |num| + |ana|) (absolute for
 * small gradients, relative for large). x is restored. */
static inline double nn_fd_worst(float *x, const float *grad, int64_t n, nn_loss_fn loss,
                                 void *ctx, float eps, int64_t samples) {
    double worst = 0;
    int64_t step = n > samples ? n / samples : 1;
    for (int64_t i = 0; i < n; i += step) {
        float keep = x[i];
        x[i] = keep + eps;
        double up = loss(ctx);
        x[i] = keep - eps;
        double down = loss(ctx);
        x[i] = keep;
        double num = (up - down) / (2.0 * (double)eps), ana = grad[i];
        double err = fabs(num - ana) / fmax(1.0, fabs(num) + fabs(ana));
        if (err > worst) worst = err;
    }
    return worst;
}

#endif
