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
    float *x, *dy, *dx0;
    uint16_t *x16;    /* x rounded to bf16 (what a bf16 fc output gives) */
    float *xw;        /* and widened again */
    uint16_t *dx0_16; /* dx0 rounded to bf16 (a bf16 dx's start), */
    float *dx0_w;     /* and widened again */
} swiglu_args;

static const float swiglu_specials[] = {0.0f,      -0.0f,  87.5f,  -87.5f, 88.5f,  -88.5f,
                                        100.0f,    -100.f, 1e-30f, 3e38f,  -3e38f, INFINITY,
                                        -INFINITY, NAN,    20.0f,  -20.0f, 0.5f,   -0.5f};
enum { N_SWIGLU_SPECIALS = sizeof swiglu_specials / sizeof swiglu_specials[0] };

static void run_swiglu_forward(run *r, const void *p) {
    const swiglu_args *a = p;
    const int64_t nc = a->n * a->c, ny = nc / 2;
    const float *x = input(r, a->x, nc);
    float *y = output(r, "y", ny, bits());
    r->nan_fed = any_nan(a->x, nc);
    call(r, lw_swiglu_forward(r->s, y, LW_DTYPE_F32, x, LW_DTYPE_F32, a->n, a->c));
    uint16_t *y16 = output_bf16_values(r, "y bf16", ny, bits());
    call(r, lw_swiglu_forward(r->s, y16, LW_DTYPE_BF16, x, LW_DTYPE_F32, a->n, a->c));
    float *yx = output(r, "y of bf16 x", ny, bits());
    call(r, lw_swiglu_forward(r->s, yx, LW_DTYPE_F32, input_bf16(r, a->x16, nc), LW_DTYPE_BF16,
                              a->n, a->c));
    float *yw = output(r, "y of bf16 x (widened)", ny, bits());
    call(r,
         lw_swiglu_forward(r->s, yw, LW_DTYPE_F32, input(r, a->xw, nc), LW_DTYPE_F32, a->n, a->c));
}

static void run_swiglu_backward(run *r, const void *p) {
    const swiglu_args *a = p;
    const int64_t nc = a->n * a->c;
    const float *dy = input(r, a->dy, nc / 2), *x = input(r, a->x, nc);
    float *dx = accumulated(r, "dx", a->dx0, nc, bits());
    r->nan_fed = any_nan(a->x, nc);
    call(r, lw_swiglu_backward(r->s, dx, LW_DTYPE_F32, dy, x, LW_DTYPE_F32, a->n, a->c));
    float *dxx = accumulated(r, "dx of bf16 x", a->dx0, nc, bits());
    call(r, lw_swiglu_backward(r->s, dxx, LW_DTYPE_F32, dy, input_bf16(r, a->x16, nc),
                               LW_DTYPE_BF16, a->n, a->c));
    float *dxw = accumulated(r, "dx of bf16 x (widened)", a->dx0, nc, bits());
    call(r, lw_swiglu_backward(r->s, dxw, LW_DTYPE_F32, dy, input(r, a->xw, nc), LW_DTYPE_F32, a->n,
                               a->c));
    /* a bf16 dx: accumulated in fp32, rounded; against the fp32 run from its widened start */
    float *dxs = accumulated(r, "dx from a bf16 start", a->dx0_w, nc, bits());
    call(r, lw_swiglu_backward(r->s, dxs, LW_DTYPE_F32, dy, x, LW_DTYPE_F32, a->n, a->c));
    uint16_t *dx16 = accumulated_bf16(r, "dx from a bf16 start bf16", a->dx0_16, nc, bits());
    call(r, lw_swiglu_backward(r->s, dx16, LW_DTYPE_BF16, dy, x, LW_DTYPE_F32, a->n, a->c));
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
    const bool forward = strcmp(k->kernel, "swiglu_forward") == 0;
    const int64_t h = a->c / 2, nc = a->n * a->c, m = forward ? nc / 2 : nc;
    double *ref = malloc(sizeof(double) * (size_t)(m > 0 ? m : 1)), top = 0;
    for (int64_t i = 0; i < a->n; i++)
        for (int64_t j = 0; j < h; j++) {
            const float *xr = a->x + i * a->c;
            double silu, slope;
            silu_ref(xr[j], &silu, &slope);
            if (forward) {
                ref[i * h + j] = (double)(float)(silu * xr[h + j]); /* inf past FLT_MAX */
            } else {
                const double g = a->dy[i * h + j];
                ref[i * a->c + j] = a->dx0[i * a->c + j] + g * xr[h + j] * slope;
                ref[i * a->c + h + j] = a->dx0[i * a->c + h + j] + g * silu;
            }
        }
    for (int64_t i = 0; i < m; i++)
        if (isfinite(ref[i])) top = fmax(top, fabs(ref[i]));
    if (forward) {
        near_reference(k, r, "y", ref, m, 1e-6, 1e-28);
        after_bf16_output(k, r, "y", m);
    } else {
        near_reference(k, r, "dx", ref, m, 1e-6, 1e-2 * top + 1e-30);
        after_bf16_output(k, r, "dx from a bf16 start", m);
    }
    free(ref);
    widening_exact(k, r, forward ? "y of bf16 x" : "dx of bf16 x", m);
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
        a.x = scaled_random(nc, 6.0f, 0.0f), a.dy = random_floats(nc / 2);
        a.dx0 = random_floats(nc);
        if (a.n > 0 && a.c / 2 >= N_SWIGLU_SPECIALS)
            memcpy(a.x, swiglu_specials, sizeof swiglu_specials);
        a.xw = cpu_array(nc);
        memcpy(a.xw, a.x, sizeof(float) * (size_t)nc);
        a.x16 = round_weights(a.xw, nc);
        a.dx0_w = cpu_array(nc);
        memcpy(a.dx0_w, a.dx0, sizeof(float) * (size_t)nc);
        a.dx0_16 = round_weights(a.dx0_w, nc);
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        free(a.x), free(a.dy), free(a.dx0), free(a.x16), free(a.xw), free(a.dx0_16), free(a.dx0_w);
    }
}

/* ---- the list's entries ---------------------------------------------------------------------- */

const kernel_entry case_swiglu_forward = {swiglu_cases, run_swiglu_forward, after_swiglu};
const kernel_entry case_swiglu_backward = {swiglu_cases, run_swiglu_backward, after_swiglu};
