/* residual_mix.c: a layer's residual scalars (residual_mix_forward, _backward: y = a x + b x0)
 * against the CPU and on every device against a float64 reference, the scalars' gradients also
 * against central differences, and the sums repeated bit for bit. */
#include "harness.h"

/* ---- the cases ------------------------------------------------------------------------------- *
 * Empty, one element, one past a block of the sums (8192), and a length no block divides. */

static const int64_t mix_sizes[] = {0, 1, 8193, 100003};

/* ---- runs and hooks -------------------------------------------------------------------------- *
 * The element-wise parts are the same float operations on every device (two products rounded,
 * then their sum; dx + a dy): bit for bit, and within a rounding of each product and sum of
 * float64 (3.6e-7 relative; where a sum cancels, 1e-6 of the element's two terms' sizes). The
 * scalars' gradients are sums in double in orders fixed by n (the devices' differ), rounded once
 * onto da0: 1e-6 of the sum of |dy x| at least. */

typedef struct {
    char shape[48];
    int64_t n;
    float *x, *x0, *dy, *dx0, *dxx0;
    float a[1], b[1], da0[1], db0[1];
} mix_args;

static void run_mix_forward(run *r, const void *p) {
    const mix_args *a = p;
    const float *x = input(r, a->x, a->n), *x0 = input(r, a->x0, a->n);
    const float *sa = input(r, a->a, 1), *sb = input(r, a->b, 1);
    float *y = output(r, "y", a->n, bits());
    call(r, lw_residual_mix_forward(r->s, y, x, x0, sa, sb, a->n));
    float *in_place = updated(r, "y in place", a->x, a->n, bits());
    call(r, lw_residual_mix_forward(r->s, in_place, in_place, x0, sa, sb, a->n));
}

static void run_mix_backward(run *r, const void *p) {
    const mix_args *a = p;
    const float *dy = input(r, a->dy, a->n), *x = input(r, a->x, a->n);
    const float *x0 = input(r, a->x0, a->n);
    const float *sa = input(r, a->a, 1), *sb = input(r, a->b, 1);
    float *dx = accumulated(r, "dx", a->dx0, a->n, bits());
    float *dx0 = accumulated(r, "dx0", a->dxx0, a->n, bits());
    float *da = accumulated(r, "da", a->da0, 1, relative(1e-6, 1e-30));
    float *db = accumulated(r, "db", a->db0, 1, relative(1e-6, 1e-30));
    call(r, lw_residual_mix_backward(r->s, dx, dx0, da, db, dy, x, x0, sa, sb, a->n));
}

/* ref = a u + b v in float64, and each element's floor, |a u_i| + |b v_i|: where the sum cancels,
 * its two roundings of terms that size move it by up to 1.2e-7 of them, not of the result */
static void sum_reference(double *ref, double *floors, double a, const float *u, double b,
                          const float *v, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        ref[i] = a * u[i] + b * v[i];
        floors[i] = fabs(a * u[i]) + fabs(b * v[i]) + 1e-30;
    }
}

static void after_mix(const kernel_case *k, const run *r) {
    const mix_args *a = k->args;
    const int64_t n = a->n;
    double *ref = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    double *floors = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    if (strcmp(k->kernel, "residual_mix_forward") == 0) {
        sum_reference(ref, floors, a->a[0], a->x, a->b[0], a->x0, n);
        near_reference_each(k, r, "y", ref, floors, n, 1e-6);
        const float *y = f32_of(r, "y"), *in_place = f32_of(r, "y in place");
        expect(k, r, y && in_place && memcmp(y, in_place, sizeof(float) * (size_t)n) == 0,
               "the mix in place gives what it gives apart, bit for bit");
        free(ref), free(floors);
        return;
    }
    double sa = 0, sb = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) {
        sa += (double)a->dy[i] * a->x[i], sb += (double)a->dy[i] * a->x0[i];
        mag += fabs((double)a->dy[i] * a->x[i]) + fabs((double)a->dy[i] * a->x0[i]);
    }
    sum_reference(ref, floors, 1, a->dx0, a->a[0], a->dy, n);
    near_reference_each(k, r, "dx", ref, floors, n, 1e-6);
    sum_reference(ref, floors, 1, a->dxx0, a->b[0], a->dy, n);
    near_reference_each(k, r, "dx0", ref, floors, n, 1e-6);
    const double da = a->da0[0] + sa, db = a->db0[0] + sb;
    near_reference(k, r, "da", &da, 1, 1e-6, 1e-6 * mag + 1e-30);
    near_reference(k, r, "db", &db, 1, 1e-6, 1e-6 * mag + 1e-30);
    /* the objective sum dy (a x + b x0) is linear in a and b: its central differences, in float64,
     * with a step of 0.5, are its slopes to the rounding of the sums */
    const float *ga = f32_of(r, "da"), *gb = f32_of(r, "db");
    if (ga && gb && n > 0) {
        double up_a = 0, down_a = 0, up_b = 0, down_b = 0;
        for (int64_t i = 0; i < n; i++) {
            const double dy = a->dy[i], x = a->x[i], x0 = a->x0[i];
            up_a += dy * ((a->a[0] + 0.5) * x + a->b[0] * x0);
            down_a += dy * ((a->a[0] - 0.5) * x + a->b[0] * x0);
            up_b += dy * (a->a[0] * x + (a->b[0] + 0.5) * x0);
            down_b += dy * (a->a[0] * x + (a->b[0] - 0.5) * x0);
        }
        const double fa = up_a - down_a, fb = up_b - down_b, tol = 1e-6 * mag + 1e-30;
        expect(k, r, fabs(ga[0] - a->da0[0] - fa) <= tol && fabs(gb[0] - a->db0[0] - fb) <= tol,
               "da and db are the central differences of sum dy (a x + b x0)");
    }
    free(ref), free(floors);
}

/* ---- the cases, made and checked ------------------------------------------------------------ */

static void mix_cases(const char *kernel, run_fn fn, after_fn after) {
    for (size_t s = 0; s < COUNT(mix_sizes); s++) {
        mix_args a = {.n = mix_sizes[s]};
        snprintf(a.shape, sizeof a.shape, "n %lld", (long long)a.n);
        a.x = scaled_random(a.n, 4.0f, 0.0f), a.x0 = random_floats(a.n);
        a.dy = random_floats(a.n), a.dx0 = prefill(a.n), a.dxx0 = prefill(a.n);
        a.a[0] = 1.15f - 0.1f * random_float(), a.b[0] = 0.2f * random_float();
        a.da0[0] = 0.25f, a.db0[0] = -0.5f;
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        free(a.x), free(a.x0), free(a.dy), free(a.dx0), free(a.dxx0);
    }
}

/* ---- the list's entries ---------------------------------------------------------------------- */

const kernel_entry case_residual_mix_forward = {mix_cases, run_mix_forward, after_mix};
const kernel_entry case_residual_mix_backward = {mix_cases, run_mix_backward, after_mix};
