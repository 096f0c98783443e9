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
    float *x, *dy, *dx0;
    uint16_t *x16;    /* x rounded to bf16 (what a bf16 fc output gives) */
    float *xw;        /* and widened again */
    uint16_t *dx0_16; /* dx0 rounded to bf16 (a bf16 dx's start), */
    float *dx0_w;     /* and widened again */
} relu2_args;

static const float relu2_specials[] = {0.0f,  -0.0f,    1e-30f,    -1e-30f, 3e38f, -3e38f,
                                       1e20f, INFINITY, -INFINITY, NAN,     0.5f,  -0.5f};
enum { N_RELU2_SPECIALS = sizeof relu2_specials / sizeof relu2_specials[0], RELU2_NAN_AT = 9 };

static void run_relu2_forward(run *r, const void *p) {
    const relu2_args *a = p;
    const float *x = input(r, a->x, a->n);
    float *y = output(r, "y", a->n, bits());
    r->nan_fed = any_nan(a->x, a->n);
    call(r, lw_relu2_forward(r->s, y, LW_DTYPE_F32, x, LW_DTYPE_F32, a->n));
    uint16_t *y16 = output_bf16_values(r, "y bf16", a->n, bits());
    call(r, lw_relu2_forward(r->s, y16, LW_DTYPE_BF16, x, LW_DTYPE_F32, a->n));
    /* a bf16 x, and its widening */
    float *yx = output(r, "y of bf16 x", a->n, bits());
    call(r, lw_relu2_forward(r->s, yx, LW_DTYPE_F32, input_bf16(r, a->x16, a->n), LW_DTYPE_BF16,
                             a->n));
    float *yw = output(r, "y of bf16 x (widened)", a->n, bits());
    call(r, lw_relu2_forward(r->s, yw, LW_DTYPE_F32, input(r, a->xw, a->n), LW_DTYPE_F32, a->n));
}

static void run_relu2_backward(run *r, const void *p) {
    const relu2_args *a = p;
    const float *dy = input(r, a->dy, a->n), *x = input(r, a->x, a->n);
    float *dx = accumulated(r, "dx", a->dx0, a->n, bits());
    r->nan_fed = any_nan(a->x, a->n);
    call(r, lw_relu2_backward(r->s, dx, LW_DTYPE_F32, dy, x, LW_DTYPE_F32, a->n));
    float *dxx = accumulated(r, "dx of bf16 x", a->dx0, a->n, bits());
    call(r, lw_relu2_backward(r->s, dxx, LW_DTYPE_F32, dy, input_bf16(r, a->x16, a->n),
                              LW_DTYPE_BF16, a->n));
    float *dxw = accumulated(r, "dx of bf16 x (widened)", a->dx0, a->n, bits());
    call(r,
         lw_relu2_backward(r->s, dxw, LW_DTYPE_F32, dy, input(r, a->xw, a->n), LW_DTYPE_F32, a->n));
    /* a bf16 dx: accumulated in fp32, rounded; against the fp32 run from its widened start */
    float *dxs = accumulated(r, "dx from a bf16 start", a->dx0_w, a->n, bits());
    call(r, lw_relu2_backward(r->s, dxs, LW_DTYPE_F32, dy, x, LW_DTYPE_F32, a->n));
    uint16_t *dx16 = accumulated_bf16(r, "dx from a bf16 start bf16", a->dx0_16, a->n, bits());
    call(r, lw_relu2_backward(r->s, dx16, LW_DTYPE_BF16, dy, x, LW_DTYPE_F32, a->n));
}

/* max(x, 0) in double, a NaN kept */
static double relu_ref(float x) { return x < 0.0f ? 0.0 : (double)x; }

static void after_relu2(const kernel_case *k, const run *r) {
    const relu2_args *a = k->args;
    const bool forward = strcmp(k->kernel, "relu2_forward") == 0;
    double *ref = malloc(sizeof(double) * (size_t)(a->n > 0 ? a->n : 1));
    double top = 0;
    for (int64_t i = 0; i < a->n; i++) {
        const double v = relu_ref(a->x[i]);
        /* 2r as the kernel forms it in float: exact, or inf past FLT_MAX / 2 */
        ref[i] = forward ? (double)(float)(v * v) : a->dx0[i] + a->dy[i] * (double)(float)(2.0 * v);
        if (isfinite(ref[i])) top = fmax(top, fabs(ref[i]));
    }
    if (forward) {
        near_reference(k, r, "y", ref, a->n, 1e-7, 1e-30);
        after_bf16_output(k, r, "y", a->n);
    } else {
        near_reference(k, r, "dx", ref, a->n, 1e-6, 1e-2 * top + 1e-30);
        after_bf16_output(k, r, "dx from a bf16 start", a->n);
    }
    free(ref);
    widening_exact(k, r, forward ? "y of bf16 x" : "dx of bf16 x", a->n);
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
        a.x = scaled_random(a.n, 4.0f, 0.0f), a.dy = random_floats(a.n), a.dx0 = random_floats(a.n);
        if (a.n > N_RELU2_SPECIALS) memcpy(a.x, relu2_specials, sizeof relu2_specials);
        a.xw = cpu_array(a.n);
        memcpy(a.xw, a.x, sizeof(float) * (size_t)a.n);
        a.x16 = round_weights(a.xw, a.n);
        a.dx0_w = cpu_array(a.n);
        memcpy(a.dx0_w, a.dx0, sizeof(float) * (size_t)a.n);
        a.dx0_16 = round_weights(a.dx0_w, a.n);
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        free(a.x), free(a.dy), free(a.dx0), free(a.x16), free(a.xw), free(a.dx0_16), free(a.dx0_w);
    }
}

/* ---- the list's entries ---------------------------------------------------------------------- */

const kernel_entry case_relu2_forward = {relu2_cases, run_relu2_forward, after_relu2};
const kernel_entry case_relu2_backward = {relu2_cases, run_relu2_backward, after_relu2};
