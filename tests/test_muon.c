/* test_muon.c: Newton-Schulz against a float64 reference and near the polar factor, the SYRK
 * path against full GEMMs, the transposed case, and the update properties of docs/algorithms.md
 * section 6 (SGD equivalences, weight-decay modes), plus option errors. */
#include "check.h"
#include "muon_reference.h"

#include <math.h>
#include <stdlib.h>

static uint64_t seed = 12345;
static float frand(void) { /* uniform in [-1, 1) */
    seed = seed * 6364136223846793005u + 1442695040888963407u;
    return (float)((double)(seed >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void fill(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        x[i] = frand();
}

static double max_diff(const float *a, const double *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* muon_reference.h's float64 Newton-Schulz of u (r x c) into x, with n triples abc (cycled, or
 * the last repeated) for `steps` steps. */
static void ns_reference(const float *u, double *x, int r, int c, const double (*abc)[3], int n,
                         int steps, bool repeat) {
    float *coeffs = malloc(sizeof(float) * 3 * (size_t)n);
    for (int k = 0; k < 3 * n; k++)
        coeffs[k] = (float)abc[k / 3][k % 3];
    lw_muon_options o = lw_muon_defaults();
    o.coeffs = LW_NS_CUSTOM, o.custom = coeffs, o.n_custom = n, o.custom_repeat = repeat;
    o.ns_steps = steps;
    for (int i = 0; i < r * c; i++)
        x[i] = u[i];
    ref_orthogonalize(&o, x, r, c);
    free(coeffs);
}

static void test_against_float64(void) {
    const int shapes[][2] = {{8, 8}, {16, 48}, {33, 100}, {64, 64}, {5, 200}};
    for (int s = 0; s < 5; s++) {
        int r = shapes[s][0], c = shapes[s][1];
        float *u = malloc(sizeof(float) * r * c), *x = malloc(sizeof(float) * r * c);
        double *ref = malloc(sizeof(double) * r * c);
        fill(u, r * c);
        lw_muon *m;
        CHECK_OK(lw_muon_new(NULL, &m));
        CHECK_OK(lw_muon_orthogonalize(m, NULL, u, x, r, c));
        ns_reference(u, ref, r, c, REF_QUINTIC, 5, 5, false);
        double d = max_diff(x, ref, r * c);
        if (d > 1e-5) fprintf(stderr, "float64 reference %dx%d: max diff %g\n", r, c, d);
        CHECK(d <= 1e-5);
        lw_muon_free(m);
        free(u), free(x), free(ref);
    }
}

static void test_symmetric_matches_full_gemm(void) {
    const int shapes[][2] = {{24, 24}, {24, 80}, {80, 24}};
    for (int s = 0; s < 3; s++) {
        int r = shapes[s][0], c = shapes[s][1];
        float *u = malloc(sizeof(float) * r * c), *x1 = malloc(sizeof(float) * r * c);
        float *x2 = malloc(sizeof(float) * r * c);
        fill(u, r * c);
        lw_muon_options o = lw_muon_defaults();
        lw_muon *sym, *full;
        CHECK_OK(lw_muon_new(&o, &sym));
        o.symmetric = false;
        CHECK_OK(lw_muon_new(&o, &full));
        CHECK_OK(lw_muon_orthogonalize(sym, NULL, u, x1, r, c));
        CHECK_OK(lw_muon_orthogonalize(full, NULL, u, x2, r, c));
        double d = 0;
        for (int i = 0; i < r * c; i++)
            d = fmax(d, fabs(x1[i] - x2[i]));
        CHECK(d <= 1e-5);
        lw_muon_free(sym), lw_muon_free(full);
        free(u), free(x1), free(x2);
    }
}

/* rows > cols works on the transpose: NS(U) = NS(U^T)^T */
static void test_tall_is_transposed_wide(void) {
    int r = 40, c = 12;
    float *u = malloc(sizeof(float) * r * c), *ut = malloc(sizeof(float) * r * c);
    float *x = malloc(sizeof(float) * r * c), *xt = malloc(sizeof(float) * r * c);
    fill(u, r * c);
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++)
            ut[j * r + i] = u[i * c + j];
    lw_muon *m;
    CHECK_OK(lw_muon_new(NULL, &m));
    CHECK_OK(lw_muon_orthogonalize(m, NULL, u, x, r, c));
    CHECK_OK(lw_muon_orthogonalize(m, NULL, ut, xt, c, r));
    double d = 0;
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++)
            d = fmax(d, fabs(x[i * c + j] - xt[j * r + i]));
    CHECK(d <= 1e-6);
    /* in place gives the same */
    CHECK_OK(lw_muon_orthogonalize(m, NULL, u, u, r, c));
    d = 0;
    for (int i = 0; i < r * c; i++)
        d = fmax(d, fabs(u[i] - x[i]));
    CHECK(d == 0);
    lw_muon_free(m);
    free(u), free(ut), free(x), free(xt);
}

/* The polar factor U V^T, from many float64 steps of the classic cubic iteration
 * X <- 1.5 X - 0.5 X X^T X, which converges to it from a Frobenius-normalised start. */
static void test_near_polar_factor(void) {
    int r = 32, c = 96;
    float *u = malloc(sizeof(float) * r * c), *x = malloc(sizeof(float) * r * c);
    double *polar = malloc(sizeof(double) * r * c);
    fill(u, r * c);
    const double cubic[1][3] = {{1.5, -0.5, 0.0}};
    ns_reference(u, polar, r, c, cubic, 1, 200, false);
    lw_muon_options o = lw_muon_defaults();
    static const lw_ns_coeffs sets[] = {LW_NS_SIMPLE, LW_NS_QUINTIC, LW_NS_POLAR_EXPRESS,
                                        LW_NS_CUBIC5};
    for (int k = 0; k < 4; k++) {
        o.coeffs = sets[k];
        o.ns_steps = sets[k] == LW_NS_POLAR_EXPRESS ? 8 : 5;
        lw_muon *m;
        CHECK_OK(lw_muon_new(&o, &m));
        CHECK_OK(lw_muon_orthogonalize(m, NULL, u, x, r, c));
        double d = max_diff(x, polar, r * c);
        if (d > 0.35) fprintf(stderr, "coefficient set %d: %g from the polar factor\n", k, d);
        CHECK(d < 0.35);
        lw_muon_free(m);
    }
    free(u), free(x), free(polar);
}

static void test_custom_cycle_and_repeat(void) {
    int r = 6, c = 10;
    float u[60], x[60];
    double ref[60];
    fill(u, 60);
    const float custom[] = {3.0f, -3.2f, 1.2f, 2.0f, -1.5f, 0.5f};
    const double abc[2][3] = {{3.0, -3.2, 1.2}, {2.0, -1.5, 0.5}};
    for (int repeat = 0; repeat < 2; repeat++) {
        lw_muon_options o = lw_muon_defaults();
        o.coeffs = LW_NS_CUSTOM;
        o.custom = custom;
        o.n_custom = 2;
        o.custom_repeat = repeat;
        o.ns_steps = 4;
        lw_muon *m;
        CHECK_OK(lw_muon_new(&o, &m));
        CHECK_OK(lw_muon_orthogonalize(m, NULL, u, x, r, c));
        ns_reference(u, ref, r, c, abc, 2, 4, repeat);
        CHECK(max_diff(x, ref, 60) <= 1e-5);
        lw_muon_free(m);
    }
}

/* Identity orthogonaliser, momentum 0, lr 2, decoupled wd 0.5, unit scale: plain SGD with
 * weight decay, W <- W - lr * (G + wd W) ... with decoupled decay W(1 - lr wd) - lr G. */
static void test_sgd_equivalences(void) {
    enum { R = 4, C = 4, N = 16 };
    float w[N], g[N], mom[N] = {0}, w0[N];
    fill(w, N), fill(g, N);
    for (int i = 0; i < N; i++)
        w0[i] = w[i];
    lw_muon_options o = lw_muon_defaults();
    o.coeffs = LW_NS_IDENTITY;
    o.momentum = 0.0f;
    o.nesterov = false;
    o.scale = LW_MUON_SCALE_UNIT_RMS_NORM; /* sqrt(rows / cols) = 1 */
    lw_muon *m;
    CHECK_OK(lw_muon_new(&o, &m));
    CHECK_OK(lw_muon_update(m, NULL, w, g, mom, R, C, 2.0f, 0.5f, 1.0f));
    for (int i = 0; i < N; i++)
        CHECK(fabsf(w[i] - (w0[i] * (1.0f - 1.0f) - 2.0f * g[i])) < 1e-6f);
    lw_muon_free(m);

    /* EMA momentum 0.5 at lr 2 == classic momentum 0.5 at lr 1 (buf = 0.5 buf + g) */
    o.momentum = 0.5f;
    CHECK_OK(lw_muon_new(&o, &m));
    float a[N], b[N], ma[N] = {0}, buf[N] = {0};
    fill(a, N);
    for (int i = 0; i < N; i++)
        b[i] = a[i];
    for (int step = 0; step < 4; step++) {
        fill(g, N);
        CHECK_OK(lw_muon_update(m, NULL, a, g, ma, R, C, 2.0f, 0.0f, 1.0f));
        for (int i = 0; i < N; i++) {
            buf[i] = 0.5f * buf[i] + g[i];
            b[i] -= 1.0f * buf[i];
        }
    }
    double d = 0;
    for (int i = 0; i < N; i++)
        d = fmax(d, fabs(a[i] - b[i]));
    CHECK(d < 1e-5);
    lw_muon_free(m);

    /* independent wd 0.25 with lr 0: exactly 0.75 W */
    o.weight_decay_mode = LW_WD_INDEPENDENT;
    CHECK_OK(lw_muon_new(&o, &m));
    for (int i = 0; i < N; i++)
        w0[i] = w[i];
    CHECK_OK(lw_muon_update(m, NULL, w, g, mom, R, C, 0.0f, 0.25f, 1.0f));
    for (int i = 0; i < N; i++)
        CHECK(w[i] == 0.75f * w0[i]);
    lw_muon_free(m);

    /* l2: G += wd W, so with identity and no momentum W <- W - lr (G + wd W) */
    o.weight_decay_mode = LW_WD_L2;
    o.momentum = 0.0f;
    CHECK_OK(lw_muon_new(&o, &m));
    for (int i = 0; i < N; i++)
        w0[i] = w[i];
    float mz[N] = {0};
    CHECK_OK(lw_muon_update(m, NULL, w, g, mz, R, C, 0.1f, 0.3f, 2.0f));
    for (int i = 0; i < N; i++)
        CHECK(fabsf(w[i] - (w0[i] - 0.1f * (2.0f * g[i] + 0.3f * w0[i]))) < 1e-6f);
    lw_muon_free(m);
}

static void test_scale_modes(void) {
    /* with the identity orthogonaliser the step is lr * scale * extra * G */
    enum { R = 2, C = 8, N = 16 };
    const double expect[4] = {sqrt(8.0), sqrt(2.0 / 8.0), 1.0, 0.2 * sqrt(8.0)};
    for (int s = 0; s < 4; s++) {
        lw_muon_options o = lw_muon_defaults();
        o.coeffs = LW_NS_IDENTITY;
        o.momentum = 0.0f;
        o.nesterov = false;
        o.scale = (lw_muon_scale)s;
        o.extra_scale = 3.0f;
        lw_muon *m;
        CHECK_OK(lw_muon_new(&o, &m));
        float w[N] = {0}, g[N], mom[N] = {0};
        for (int i = 0; i < N; i++)
            g[i] = 1.0f;
        CHECK_OK(lw_muon_update(m, NULL, w, g, mom, R, C, 0.5f, 0.0f, 1.0f));
        CHECK(fabs(w[0] + 0.5 * 3.0 * expect[s]) < 1e-5);
        lw_muon_free(m);
    }
}

static void test_nesterov(void) {
    /* one step from zero momentum: nesterov U = (1-b) G + b (1-b) G */
    enum { N = 4 };
    lw_muon_options o = lw_muon_defaults();
    o.coeffs = LW_NS_IDENTITY;
    o.momentum = 0.9f;
    o.scale = LW_MUON_SCALE_UNIT_RMS_NORM;
    lw_muon *m;
    CHECK_OK(lw_muon_new(&o, &m));
    float w[N] = {0}, g[N] = {1, 2, 3, 4}, mom[N] = {0};
    CHECK_OK(lw_muon_update(m, NULL, w, g, mom, 2, 2, 1.0f, 0.0f, 1.0f));
    for (int i = 0; i < N; i++) {
        CHECK(fabsf(mom[i] - 0.1f * g[i]) < 1e-6f);
        CHECK(fabsf(w[i] + (0.1f * g[i] + 0.9f * 0.1f * g[i])) < 1e-6f);
    }
    lw_muon_free(m);
}

static void test_bad_options(void) {
    lw_muon *m = NULL;
    lw_muon_options o = lw_muon_defaults();
    o.momentum = 1.0f;
    CHECK_FAILS(lw_muon_new(&o, &m), LW_ERR_INVALID, "momentum must be in [0, 1), got 1");
    o = lw_muon_defaults();
    o.momentum = -0.1f;
    CHECK_FAILS(lw_muon_new(&o, &m), LW_ERR_INVALID, "momentum must be in [0, 1)");
    o = lw_muon_defaults();
    o.ns_steps = 0;
    CHECK_FAILS(lw_muon_new(&o, &m), LW_ERR_INVALID, "ns_steps must be >= 1, got 0");
    o = lw_muon_defaults();
    o.coeffs = (lw_ns_coeffs)9;
    CHECK_FAILS(lw_muon_new(&o, &m), LW_ERR_INVALID, "unknown coefficient set 9");
    o = lw_muon_defaults();
    o.coeffs = LW_NS_CUSTOM;
    CHECK_FAILS(lw_muon_new(&o, &m), LW_ERR_INVALID, "at least one (a, b, c) triple, got 0");
    o = lw_muon_defaults();
    o.coeffs = LW_NS_CUBIC5;
    o.ns_steps = 4;
    CHECK_FAILS(lw_muon_new(&o, &m), LW_ERR_INVALID, "cubic5 coefficients take exactly 5 steps");
    CHECK(m == NULL);
    CHECK_OK(lw_muon_new(NULL, &m));
    float x[4] = {0};
    CHECK_FAILS(lw_muon_orthogonalize(m, NULL, x, x, 0, 4), LW_ERR_INVALID,
                "bad matrix shape 0 x 4");
    /* a zero matrix stays zero (eps keeps the normalisation finite) */
    CHECK_OK(lw_muon_orthogonalize(m, NULL, x, x, 2, 2));
    CHECK(x[0] == 0.0f && x[3] == 0.0f);
    lw_muon_free(m);
}

int main(void) {
    test_against_float64();
    test_symmetric_matches_full_gemm();
    test_tall_is_transposed_wide();
    test_near_polar_factor();
    test_custom_cycle_and_repeat();
    test_sgd_equivalences();
    test_scale_modes();
    test_nesterov();
    test_bad_options();
    return check_exit("test_muon");
}
