/* softcap.c: the logits' tanh softcap (forward, in place too; backward from the forward's
 * output) against the CPU and on every device against a float64 reference; the dispatcher's
 * refusals. */
#include "harness.h"

/* ---- the cases ------------------------------------------------------------------------------- *
 * Empty, one element, a length no block size divides (nanochat's cap 15 on logits reaching 4x
 * past it, the specials first), and a small cap. */

static const struct {
    int64_t n;
    float cap, scale;
} softcap_shapes[] = {
    {0, 15.0f, 1.0f}, {1, 15.0f, 60.0f}, {100003, 15.0f, 60.0f}, {4097, 0.25f, 2.0f}};

/* ---- runs and hooks -------------------------------------------------------------------------- *
 * Against the CPU: the forward's tanhf is each device's own (glibc's and CUDA's, each within
 * two ulps of tanh), with a division before and a product after: 1e-6 relative. The backward
 * takes the CPU's y on every device and is the same float operations: bit for bit; so is the
 * forward run in place against its run apart on the same device.
 *
 * Against float64 (every device): the forward 1e-6 relative, as above. The backward dx0 + dy (1
 * - t)(1 + t), t = y / cap from the y it is given: t's rounding (half an ulp of 1) enters the
 * slope absolutely, up to 1.2e-7 |dy| where t nears 1, with the accumulation onto dx0: 2e-5 of
 * 1% of the largest value (a slope off by a term is off by far more). The specials: signed zeros,
 * huge values and infinities (y = +-cap), a NaN that passes. */

typedef struct {
    char shape[48];
    int64_t n;
    float cap;
    float *x, *y, *dy, *dx0;
} softcap_args;

static const float softcap_specials[] = {0.0f,   -0.0f, 1e-30f,   -1e-30f,   3e38f,
                                         -3e38f, 1e4f,  INFINITY, -INFINITY, NAN};
enum { N_SOFTCAP_SPECIALS = sizeof softcap_specials / sizeof softcap_specials[0] };

static void run_softcap_forward(run *r, const void *p) {
    const softcap_args *a = p;
    const float *x = input(r, a->x, a->n);
    float *y = output(r, "y", a->n, relative(1e-6, 1e-30));
    r->nan_fed = any_nan(a->x, a->n);
    call(r, lw_softcap_forward(r->s, y, x, a->n, a->cap));
    /* in place: a copy of x becomes y */
    float *in_place = updated(r, "y in place", a->x, a->n, relative(1e-6, 1e-30));
    call(r, lw_softcap_forward(r->s, in_place, in_place, a->n, a->cap));
}

static void run_softcap_backward(run *r, const void *p) {
    const softcap_args *a = p;
    const float *dy = input(r, a->dy, a->n), *y = input(r, a->y, a->n);
    float *dx = accumulated(r, "dx", a->dx0, a->n, bits());
    r->nan_fed = any_nan(a->y, a->n);
    call(r, lw_softcap_backward(r->s, dx, dy, y, a->n, a->cap));
}

static void after_softcap(const kernel_case *k, const run *r) {
    const softcap_args *a = k->args;
    const bool forward = strcmp(k->kernel, "softcap_forward") == 0;
    double *ref = malloc(sizeof(double) * (size_t)(a->n > 0 ? a->n : 1)), top = 0;
    for (int64_t i = 0; i < a->n; i++) {
        const double t = (double)a->y[i] / a->cap;
        ref[i] = forward ? a->cap * tanh((double)a->x[i] / a->cap)
                         : a->dx0[i] + a->dy[i] * (1.0 - t * t);
        if (isfinite(ref[i])) top = fmax(top, fabs(ref[i]));
    }
    if (forward) {
        near_reference(k, r, "y", ref, a->n, 1e-6, 1e-30);
        const float *y = f32_of(r, "y"), *in_place = f32_of(r, "y in place");
        expect(k, r, y && in_place && memcmp(y, in_place, sizeof(float) * (size_t)a->n) == 0,
               "the softcap in place gives what it gives apart, bit for bit");
        if (y != NULL && a->n > N_SOFTCAP_SPECIALS)
            expect(k, r,
                   y[7] == a->cap && y[8] == -a->cap && y[4] == a->cap && isnan(y[9]) &&
                       signbit(y[1]),
                   "softcap(+-inf) and softcap(3e38) are +-cap, softcap(NaN) NaN, -0 kept");
    } else {
        near_reference(k, r, "dx", ref, a->n, 2e-5, 1e-2 * top + 1e-30);
    }
    free(ref);
}

/* ---- the cases, made and checked ------------------------------------------------------------ */

/* A cap that is not finite and > 0, refused by name before anything is written. */
static void refusals(void) {
    float x[2] = {1, 2}, y[2] = {0};
    EXPECT_FAILS(lw_softcap_forward(NULL, y, x, 2, 0.0f), LW_ERR_INVALID,
                 "softcap forward: cap must be finite and > 0, got 0");
    EXPECT_FAILS(lw_softcap_forward(NULL, y, x, 2, -15.0f), LW_ERR_INVALID,
                 "softcap forward: cap must be finite and > 0, got -15");
    EXPECT_FAILS(lw_softcap_backward(NULL, y, x, x, 2, INFINITY), LW_ERR_INVALID,
                 "softcap backward: cap must be finite and > 0, got inf");
    EXPECT_FAILS(lw_softcap_backward(NULL, y, x, x, 2, NAN), LW_ERR_INVALID,
                 "softcap backward: cap must be finite and > 0");
    EXPECT(y[0] == 0 && y[1] == 0);
}

static void softcap_cases(const char *kernel, run_fn fn, after_fn after) {
    if (strcmp(kernel, "softcap_forward") == 0) refusals();
    for (size_t s = 0; s < COUNT(softcap_shapes); s++) {
        softcap_args a = {.n = softcap_shapes[s].n, .cap = softcap_shapes[s].cap};
        snprintf(a.shape, sizeof a.shape, "n %lld, cap %g", (long long)a.n, (double)a.cap);
        a.x = scaled_random(a.n, softcap_shapes[s].scale, 0.0f);
        if (a.n > N_SOFTCAP_SPECIALS) memcpy(a.x, softcap_specials, sizeof softcap_specials);
        a.y = cpu_array(a.n);
        EXPECT_OK(lw_softcap_forward(NULL, a.y, a.x, a.n, a.cap));
        a.dy = random_floats(a.n), a.dx0 = prefill(a.n);
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        free(a.x), free(a.y), free(a.dy), free(a.dx0);
    }
}

/* ---- the list's entries ---------------------------------------------------------------------- */

const kernel_entry case_softcap_forward = {softcap_cases, run_softcap_forward, after_softcap};
const kernel_entry case_softcap_backward = {softcap_cases, run_softcap_backward, after_softcap};
