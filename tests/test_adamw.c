/* test_adamw.c: AdamW against steps computed by hand, and the vector kernels. */
#include "check.h"

#include <math.h>

static void test_first_steps_by_hand(void) {
    lw_adamw_options o = lw_adamw_defaults(); /* 0.9, 0.95, 1e-8 */
    float w[2] = {1.0f, -2.0f}, g[2] = {0.5f, -0.25f}, m[2] = {0}, v[2] = {0};
    CHECK_OK(lw_adamw_update(NULL, &o, w, g, m, v, 2, 1, 0.1f, 0.01f, 1.0f));
    /* t = 1: mhat = g, vhat = g^2, so the step is lr * (sign(g) + wd * w) */
    CHECK(fabsf(m[0] - 0.05f) < 1e-7f && fabsf(v[0] - 0.0125f) < 1e-7f);
    CHECK(fabs(w[0] - (1.0 - 0.1 * (0.5 / (0.5 + 1e-8) + 0.01 * 1.0))) < 1e-6);
    CHECK(fabs(w[1] - (-2.0 - 0.1 * (-0.25 / (0.25 + 1e-8) + 0.01 * -2.0))) < 1e-6);
    /* t = 2 with gradient 2 g and grad_scale 0.5: the same gradient again */
    float w1 = w[0];
    float g2[2] = {1.0f, -0.5f};
    CHECK_OK(lw_adamw_update(NULL, &o, w, g2, m, v, 2, 2, 0.1f, 0.01f, 0.5f));
    double m2 = 0.9 * 0.05 + 0.1 * 0.5, v2 = 0.95 * 0.0125 + 0.05 * 0.25;
    double mhat = m2 / (1 - 0.81), vhat = v2 / (1 - 0.9025);
    CHECK(fabs(w[0] - (w1 - 0.1 * (mhat / (sqrt(vhat) + 1e-8) + 0.01 * w1))) < 1e-6);
}

static void test_vectors(void) {
    float x[5] = {1.0f, 0.0f, -2.0f, 0.0f, 3.0f};
    double acc[2] = {1.0, 1.0}; /* the statistics accumulate */
    CHECK_OK(lw_vec_norm_stats(NULL, x, 5, acc));
    CHECK(acc[0] == 15.0 && acc[1] == 3.0);
    bool finite = false;
    CHECK_OK(lw_vec_all_finite(NULL, x, 5, &finite));
    CHECK(finite);
    x[1] = NAN;
    CHECK_OK(lw_vec_all_finite(NULL, x, 5, &finite));
    CHECK(!finite);
    x[1] = INFINITY;
    CHECK_OK(lw_vec_all_finite(NULL, x, 5, &finite));
    CHECK(!finite);
    CHECK_OK(lw_vec_scale(NULL, x, 1, 0.5f));
    CHECK(x[0] == 0.5f);
    float a[3] = {1, 2, 3}, b[3] = {10, 20, 30};
    CHECK_OK(lw_vec_add(NULL, a, a, b, 3));
    CHECK(a[0] == 11 && a[1] == 22 && a[2] == 33);
    CHECK_OK(lw_vec_axpy(NULL, a, -2.0f, b, 3));
    CHECK(a[0] == -9 && a[1] == -18 && a[2] == -27);
}

int main(void) {
    test_first_steps_by_hand();
    test_vectors();
    return check_exit("test_adamw");
}
