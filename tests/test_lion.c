/* test_lion.c: Lion through lw_lion_update against steps computed by hand, what a NaN gradient
 * does, and the options it refuses (the harness, tests/kernels/lion.c, checks every device). */
#include "check.h"

#include <math.h>

static bool near(float got, double want) { return fabs((double)got - want) < 1e-6; }

static void test_steps_by_hand(void) {
    const lw_lion_options o = lw_lion_defaults();
    CHECK(o.beta1 == 0.9f && o.beta2 == 0.99f);
    float w[4] = {1.0f, -2.0f, 0.5f, 3.0f};
    float g[4] = {0.5f, -0.25f, 0.0f, -4.0f}, m[4] = {0.0f, 0.0f, 0.0f, 1.0f};
    CHECK_OK(lw_lion_update(NULL, &o, w, g, m, 4, 0.1f, 0.01f, 1.0f));
    /* from m = 0 the step is lr * (sign(g) + wd * w); g = 0 there: sign 0, the decay alone; the
     * last element's momentum outweighs its gradient: c = 0.9 - 0.4 > 0 */
    CHECK(near(w[0], 1.0 - 0.1 * (1 + 0.01 * 1.0)));
    CHECK(near(w[1], -2.0 - 0.1 * (-1 + 0.01 * -2.0)));
    CHECK(near(w[2], 0.5 - 0.1 * (0.01 * 0.5)));
    CHECK(near(w[3], 3.0 - 0.1 * (1 + 0.01 * 3.0)));
    CHECK(near(m[0], 0.005) && near(m[1], -0.0025) && m[2] == 0.0f && near(m[3], 0.95));
    /* gradient 2 g' with grad_scale 0.5: c = 0.9 * 0.005 + 0.1 * -1 < 0 from a positive m */
    const float w0 = w[0];
    float g2[1] = {-2.0f};
    CHECK_OK(lw_lion_update(NULL, &o, w, g2, m, 1, 0.1f, 0.0f, 0.5f));
    CHECK(near(w[0], w0 + 0.1));
    CHECK(near(m[0], 0.99 * 0.005 + 0.01 * -1.0));
    /* NULL options are the defaults; nothing to update is no error */
    CHECK_OK(lw_lion_update(NULL, NULL, w, g2, m, 1, 0.1f, 0.0f, 1.0f));
    CHECK_OK(lw_lion_update(NULL, &o, w, g2, m, 0, 0.1f, 0.0f, 1.0f));
}

static void test_nan_gradient(void) {
    const lw_lion_options o = lw_lion_defaults();
    float w[3] = {1.0f, 1.0f, 1.0f}, g[3] = {1.0f, NAN, -1.0f}, m[3] = {0};
    CHECK_OK(lw_lion_update(NULL, &o, w, g, m, 3, 0.1f, 0.0f, 1.0f));
    CHECK(isnan(w[1]) && isnan(m[1]));
    CHECK(near(w[0], 0.9) && near(w[2], 1.1) && !isnan(m[0]) && !isnan(m[2]));
}

static void test_options_refused(void) {
    float w = 1.0f, g = 0.5f, m = 0.0f;
    lw_lion_options o = lw_lion_defaults();
    o.beta1 = 1.0f;
    CHECK_FAILS(lw_lion_update(NULL, &o, &w, &g, &m, 1, 0.1f, 0.0f, 1.0f), LW_ERR_INVALID,
                "lion: beta1 must be in [0, 1), got 1");
    o.beta1 = NAN;
    CHECK_FAILS(lw_lion_update(NULL, &o, &w, &g, &m, 1, 0.1f, 0.0f, 1.0f), LW_ERR_INVALID,
                "lion: beta1 must be in [0, 1)");
    o = lw_lion_defaults();
    o.beta2 = -0.5f;
    CHECK_FAILS(lw_lion_update(NULL, &o, &w, &g, &m, 1, 0.1f, 0.0f, 1.0f), LW_ERR_INVALID,
                "lion: beta2 must be in [0, 1), got -0.5");
    CHECK(w == 1.0f && m == 0.0f); /* refused before any update */
    o.beta1 = o.beta2 = 0.0f; /* the end of [0, 1) that is in it */
    CHECK_OK(lw_lion_update(NULL, &o, &w, &g, &m, 1, 0.1f, 0.0f, 1.0f));
    CHECK(near(w, 0.9) && m == 0.5f);
}

int main(void) {
    test_steps_by_hand();
    test_nan_gradient();
    test_options_refused();
    return check_exit("test_lion");
}
