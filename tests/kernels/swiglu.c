/* swiglu.c: SwiGLU over fused rows [gate | up] (forward, backward into the fused gradient)
 * against the CPU and on every device against a float64 reference, on fp32 and bf16 inputs and
 * outputs; the dispatcher's refusals. */
#include "harness.h"

/* ---- the cases ------------------------------------------------------------------------------- *
 * n rows of fused width c (y has c / 2 columns): no rows, one pair, a half no block divides,
 * LLaMA-like widths; the specials in the first row's gates. */

static const struct {
    int64_t n, c;
} swiglu_shapes[] = {{0, 8}, {1, 2}, {37, 202}, {300, 1376}, {3, 600}};

/* ---- runs and hooks -------------------------------------------------------------------------- *
 * Exact against the CPU: the GPU evaluates the CPU's formulas (its polynomial exp included)
 * operation for operation, each rounded to nearest with no FMA on either side.
 *
 * Against float64 (every device): silu(a) = a / (1 + exp(-a)) with an exp within ~2 ulp, a
 * division and the product with b: a few ulps, 1e-6 relative (down to 1e-28: below a = -88 the
 * kernel's silu is a clamp's ~1e-37, the true one smaller still). The gradients: a few more
 * roundings, and the accumulation onto the start, which can cancel: 1e-6 of 1% of the largest
 * value. The reference takes silu and its slope as 0 below a = -88 and as a and 1 above 87
 * (where their neglected terms are below 1e-35), so that a = -inf and inf have gradients, as the
 * kernels give them. */

typedef struct {
    char shape[48];
    int64_t n, c;
    activation_inputs in; /* x of n c values, dy of n c / 2 */
} swiglu_args;

static const float swiglu_specials[] = {0.0f,      -0.0f,  87.5f,  -87.5f, 88.5f,  -88.5f,
                                        100.0f,    -100.f, 1e-30f, 3e38f,  -3e38f, INFINITY,
                                        -INFINITY, NAN,    20.0f,  -20.0f, 0.5f,   -0.5f};
enum { N_SWIGLU_SPECIALS = sizeof swiglu_specials / sizeof swiglu_specials[0] };

/* the kernel as harness_activation.c's runs call it, over the case's rows */
static lw_status forward(const void *p, lw_stream *s, void *y, lw_dtype y_dtype, const void *x,
                         lw_dtype x_dtype) {
    const swiglu_args *a = p;
    return lw_swiglu_forward(s, y, y_dtype, x, x_dtype, a->n, a->c);
}

static lw_status backward(const void *p, lw_stream *s, void *dx, lw_dtype dx_dtype, const float *dy,
                          const void *x, lw_dtype x_dtype) {
    const swiglu_args *a = p;
    return lw_swiglu_backward(s, dx, dx_dtype, dy, x, x_dtype, a->n, a->c);
}

static void run_swiglu_forward(run *r, const void *p) {
    run_activation_forward(r, p, &((const swiglu_args *)p)->in, forward);
}

static void run_swiglu_backward(run *r, const void *p) {
    run_activation_backward(r, p, &((const swiglu_args *)p)->in, backward);
}

/* silu(a) and its slope in double, with the limits the header above says */
static void silu_ref(double a, double *silu, double *slope) {
    if (a < -88.0) {
        *silu = 0, *slope = 0;
    } else if (a > 87.0) {
        *silu = a, *slope = 1;
    } else {
        const double s = 1.0 / (1.0 + exp(-a));
        *silu = a * s, *slope = s + a * s * (1.0 - s);
    }
}

static void after_swiglu(const kernel_case *k, const run *r) {
    const swiglu_args *a = k->args;
    const activation_inputs *in = &a->in;
    const bool forward = strcmp(k->kernel, "swiglu_forward") == 0;
    const int64_t h = a->c / 2, nc = a->n * a->c, m = forward ? nc / 2 : nc;
    /* top: the largest value, and in the backward the largest of the terms a gradient adds,
     * whose roundings stay when the sum cancels */
    double *ref = malloc(sizeof(double) * (size_t)(m > 0 ? m : 1)), top = 0;
    for (int64_t i = 0; i < a->n; i++)
        for (int64_t j = 0; j < h; j++) {
            const float *xr = in->x + i * a->c;
            double silu, slope;
            silu_ref(xr[j], &silu, &slope);
            if (forward) {
                ref[i * h + j] = (double)(float)(silu * xr[h + j]); /* inf past FLT_MAX */
            } else {
                const double g = in->dy[i * h + j];
                ref[i * a->c + j] = in->dx0[i * a->c + j] + g * xr[h + j] * slope;
                ref[i * a->c + h + j] = in->dx0[i * a->c + h + j] + g * silu;
                /* silu's slope s + a s (1 - s) cancels near a = -1.28: its terms, below 1.1,
                 * carry their rounding, so the scale is g b's */
                if (isfinite(g * xr[h + j])) top = fmax(top, fabs(g * xr[h + j]));
                if (isfinite(g * silu)) top = fmax(top, fabs(g * silu));
            }
        }
    for (int64_t i = 0; i < m; i++)
        if (isfinite(ref[i])) top = fmax(top, fabs(ref[i]));
    if (forward)
        near_reference(k, r, "y", ref, m, 1e-6, 1e-28);
    else
        near_reference(k, r, "dx", ref, m, 1e-6, 1e-2 * top + 1e-30);
    free(ref);
    after_activation(k, r, forward, m);
}

/* ---- the cases, made and checked ------------------------------------------------------------ */

/* An odd or negative fused width, refused by name before anything is written. */
static void refusals(void) {
    float x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {0};
    EXPECT_FAILS(lw_swiglu_forward(NULL, y, LW_DTYPE_F32, x, LW_DTYPE_F32, 2, 3), LW_ERR_INVALID,
                 "swiglu forward: the fused width c = 3 must be even and >= 0");
    EXPECT_FAILS(lw_swiglu_backward(NULL, y, LW_DTYPE_F32, x, x, LW_DTYPE_F32, 1, -2),
                 LW_ERR_INVALID, "swiglu backward: the fused width c = -2 must be even");
    EXPECT_FAILS(lw_swiglu_forward(NULL, y, LW_DTYPE_F32, x, LW_DTYPE_F16, 1, 6), LW_ERR_INVALID,
                 "swiglu forward: input of dtype f16: fp32 or bf16 only");
    EXPECT(y[0] == 0 && y[5] == 0);
}

static void swiglu_cases(const char *kernel, run_fn fn, after_fn after) {
    if (strcmp(kernel, "swiglu_forward") == 0) refusals();
    for (size_t s = 0; s < COUNT(swiglu_shapes); s++) {
        swiglu_args a = {.n = swiglu_shapes[s].n, .c = swiglu_shapes[s].c};
        const int64_t nc = a.n * a.c;
        snprintf(a.shape, sizeof a.shape, "n %lld, c %lld", (long long)a.n, (long long)a.c);
        /* the specials in the first row's gates */
        const bool specials = a.n > 0 && a.c / 2 >= N_SWIGLU_SPECIALS;
        a.in = activation_inputs_new(nc, nc / 2, 6.0f, swiglu_specials,
                                     specials ? N_SWIGLU_SPECIALS : 0);
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        activation_inputs_free(&a.in);
    }
}

/* ---- the list's entries ---------------------------------------------------------------------- */

const kernel_entry case_swiglu_forward = {swiglu_cases, run_swiglu_forward, after_swiglu};
const kernel_entry case_swiglu_backward = {swiglu_cases, run_swiglu_backward, after_swiglu};
