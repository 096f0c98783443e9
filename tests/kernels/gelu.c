/* gelu.c: GELU (forward, backward) against the CPU, on fp32 and bf16 inputs and outputs. */
#include "harness.h"

/* ---- the cases ------------------------------------------------------------------------------- *
 * Empty, one element, and a length no block size divides, the specials first. */

static const int64_t gelu_sizes[] = {0, 1, 100003};

/* ---- runs and hooks -------------------------------------------------------------------------- *
 * Exact: the GPU evaluates the CPU's formulas (its polynomial exp included) operation for
 * operation, each rounded to nearest with no FMA on either side. The specials first: signed
 * zeros, the clamps' edges (+-9, +-20), tiny and huge values, infinities; a NaN passes through
 * (the clamps are selects). */

typedef struct {
    char shape[32];
    int64_t n;
    activation_inputs in;
} gelu_args;

static const float gelu_specials[] = {0.0f,  -0.0f,  9.0f,     -9.0f,     9.0001f, -9.0001f,
                                      20.0f, -20.0f, 1e-30f,   -1e-30f,   88.0f,   -88.0f,
                                      3e38f, -3e38f, INFINITY, -INFINITY, NAN,     0.5f};
enum { N_GELU_SPECIALS = sizeof gelu_specials / sizeof gelu_specials[0], GELU_NAN_AT = 16 };

/* the kernel as harness_activation.c's runs call it, at the case's length */
static lw_status forward(const void *p, lw_stream *s, void *y, lw_dtype y_dtype, const void *x,
                         lw_dtype x_dtype) {
    return lw_gelu_forward(s, y, y_dtype, x, x_dtype, ((const gelu_args *)p)->n);
}

static lw_status backward(const void *p, lw_stream *s, void *dx, lw_dtype dx_dtype, const float *dy,
                          const void *x, lw_dtype x_dtype) {
    return lw_gelu_backward(s, dx, dx_dtype, dy, x, x_dtype, ((const gelu_args *)p)->n);
}

static void run_gelu_forward(run *r, const void *p) {
    run_activation_forward(r, p, &((const gelu_args *)p)->in, forward);
}

static void run_gelu_backward(run *r, const void *p) {
    run_activation_backward(r, p, &((const gelu_args *)p)->in, backward);
}

static void after_gelu(const kernel_case *k, const run *r) {
    const gelu_args *a = k->args;
    const float *y = f32_of(r, "y");
    after_activation(k, r, strcmp(k->kernel, "gelu_forward") == 0, a->n);
    if (y != NULL && a->n > N_GELU_SPECIALS)
        expect(k, r, isnan(y[GELU_NAN_AT]) && y[0] == 0.0f, "gelu(NaN) is NaN, gelu(0) is 0");
}

/* ---- the cases, made and checked ------------------------------------------------------------ */

static void gelu_cases(const char *kernel, run_fn fn, after_fn after) {
    for (size_t s = 0; s < COUNT(gelu_sizes); s++) {
        gelu_args a = {.n = gelu_sizes[s]};
        snprintf(a.shape, sizeof a.shape, "n %lld", (long long)a.n);
        a.in = activation_inputs_new(a.n, a.n, 12.0f, gelu_specials,
                                     a.n > N_GELU_SPECIALS ? N_GELU_SPECIALS : 0);
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        activation_inputs_free(&a.in);
    }
}

/* ---- the list's entries ---------------------------------------------------------------------- */

const kernel_entry case_gelu_forward = {gelu_cases, run_gelu_forward, after_gelu};
const kernel_entry case_gelu_backward = {gelu_cases, run_gelu_backward, after_gelu};
