/* relu2.c: ReLU^2 (forward, backward) against the CPU and on every device against a float64
 * reference, on fp32 and bf16 inputs and outputs. */
#include "harness.h"

/* ---- the cases ------------------------------------------------------------------------------- *
 * Empty, one element, and a length no block size divides, the specials first. */

static const int64_t relu2_sizes[] = {0, 1, 100003};

/* ---- runs and hooks -------------------------------------------------------------------------- *
 * Exact against the CPU: the same operations on both devices, each rounded to nearest with no
 * FMA. Against float64: y = r r (r = max(x, 0)) is one rounding of the exact square, which the
 * reference rounds too (so that 3e38^2 is inf on both sides): 1e-7. dx = dx0 + dy 2r: two
 * roundings, the sum's against 1% of the largest |dx| where it cancels: 1e-6 (2r taken in float,
 * exact but for its overflow past 1.7e38). The specials:
 * signed zeros, tiny and huge values (whose square overflows), infinities, a NaN that passes. */

typedef struct {
    char shape[32];
    int64_t n;
    activation_inputs in;
} relu2_args;

static const float relu2_specials[] = {0.0f,  -0.0f,    1e-30f,    -1e-30f, 3e38f, -3e38f,
                                       1e20f, INFINITY, -INFINITY, NAN,     0.5f,  -0.5f};
enum { N_RELU2_SPECIALS = sizeof relu2_specials / sizeof relu2_specials[0], RELU2_NAN_AT = 9 };

/* the kernel as harness_activation.c's runs call it, at the case's length */
static lw_status forward(const void *p, lw_stream *s, void *y, lw_dtype y_dtype, const void *x,
                         lw_dtype x_dtype) {
    return lw_relu2_forward(s, y, y_dtype, x, x_dtype, ((const relu2_args *)p)->n);
}

static lw_status backward(const void *p, lw_stream *s, void *dx, lw_dtype dx_dtype, const float *dy,
                          const void *x, lw_dtype x_dtype) {
    return lw_relu2_backward(s, dx, dx_dtype, dy, x, x_dtype, ((const relu2_args *)p)->n);
}

static void run_relu2_forward(run *r, const void *p) {
    run_activation_forward(r, p, &((const relu2_args *)p)->in, forward);
}

static void run_relu2_backward(run *r, const void *p) {
    run_activation_backward(r, p, &((const relu2_args *)p)->in, backward);
}

/* max(x, 0) in double, a NaN kept */
static double relu_ref(float x) { return x < 0.0f ? 0.0 : (double)x; }

static void after_relu2(const kernel_case *k, const run *r) {
    const relu2_args *a = k->args;
    const activation_inputs *in = &a->in;
    const bool forward = strcmp(k->kernel, "relu2_forward") == 0;
    double *ref = malloc(sizeof(double) * (size_t)(a->n > 0 ? a->n : 1));
    double top = 0;
    for (int64_t i = 0; i < a->n; i++) {
        const double v = relu_ref(in->x[i]);
        /* 2r as the kernel forms it in float: exact, or inf past FLT_MAX / 2 */
        ref[i] =
            forward ? (double)(float)(v * v) : in->dx0[i] + in->dy[i] * (double)(float)(2.0 * v);
        if (isfinite(ref[i])) top = fmax(top, fabs(ref[i]));
    }
    if (forward)
        near_reference(k, r, "y", ref, a->n, 1e-7, 1e-30);
    else
        near_reference(k, r, "dx", ref, a->n, 1e-6, 1e-2 * top + 1e-30);
    free(ref);
    after_activation(k, r, forward, a->n);
    const float *y = f32_of(r, "y");
    if (forward && y != NULL && a->n > N_RELU2_SPECIALS)
        expect(k, r,
               isnan(y[RELU2_NAN_AT]) && y[1] == 0.0f && !signbit(y[1]) && y[8] == 0.0f &&
                   y[4] == INFINITY,
               "relu2(NaN) is NaN, relu2(-0) is +0, relu2(-inf) is 0, relu2(3e38) overflows");
}

/* ---- the cases, made and checked ------------------------------------------------------------ */

static void relu2_cases(const char *kernel, run_fn fn, after_fn after) {
    for (size_t s = 0; s < COUNT(relu2_sizes); s++) {
        relu2_args a = {.n = relu2_sizes[s]};
        snprintf(a.shape, sizeof a.shape, "n %lld", (long long)a.n);
        a.in = activation_inputs_new(a.n, a.n, 4.0f, relu2_specials,
                                     a.n > N_RELU2_SPECIALS ? N_RELU2_SPECIALS : 0);
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        activation_inputs_free(&a.in);
    }
}

/* ---- the list's entries ---------------------------------------------------------------------- */

const kernel_entry case_relu2_forward = {relu2_cases, run_relu2_forward, after_relu2};
const kernel_entry case_relu2_backward = {relu2_cases, run_relu2_backward, after_relu2};
