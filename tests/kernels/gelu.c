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
    float *x, *dy, *dx0;
    uint16_t *x16;    /* x rounded to bf16 (the input an MLP's bf16 fc output gives) */
    float *xw;        /* and widened again */
    uint16_t *dx0_16; /* dx0 rounded to bf16 (a bf16 dx's start), */
    float *dx0_w;     /* and widened again */
} gelu_args;

static const float gelu_specials[] = {0.0f,  -0.0f,  9.0f,     -9.0f,     9.0001f, -9.0001f,
                                      20.0f, -20.0f, 1e-30f,   -1e-30f,   88.0f,   -88.0f,
                                      3e38f, -3e38f, INFINITY, -INFINITY, NAN,     0.5f};
enum { N_GELU_SPECIALS = sizeof gelu_specials / sizeof gelu_specials[0], GELU_NAN_AT = 16 };

static void run_gelu_forward(run *r, const void *p) {
    const gelu_args *a = p;
    const float *x = input(r, a->x, a->n);
    float *y = output(r, "y", a->n, bits());
    r->nan_fed = any_nan(a->x, a->n);
    call(r, lw_gelu_forward(r->s, y, LW_DTYPE_F32, x, LW_DTYPE_F32, a->n));
    uint16_t *y16 = output_bf16_values(r, "y bf16", a->n, bits()); /* exact everywhere, as y */
    call(r, lw_gelu_forward(r->s, y16, LW_DTYPE_BF16, x, LW_DTYPE_F32, a->n));
    /* a bf16 x, and its widening */
    float *yx = output(r, "y of bf16 x", a->n, bits());
    call(r,
         lw_gelu_forward(r->s, yx, LW_DTYPE_F32, input_bf16(r, a->x16, a->n), LW_DTYPE_BF16, a->n));
    float *yw = output(r, "y of bf16 x (widened)", a->n, bits());
    call(r, lw_gelu_forward(r->s, yw, LW_DTYPE_F32, input(r, a->xw, a->n), LW_DTYPE_F32, a->n));
}

static void run_gelu_backward(run *r, const void *p) {
    const gelu_args *a = p;
    const float *dy = input(r, a->dy, a->n), *x = input(r, a->x, a->n);
    float *dx = accumulated(r, "dx", a->dx0, a->n, bits());
    r->nan_fed = any_nan(a->x, a->n);
    call(r, lw_gelu_backward(r->s, dx, LW_DTYPE_F32, dy, x, LW_DTYPE_F32, a->n));
    float *dxx = accumulated(r, "dx of bf16 x", a->dx0, a->n, bits());
    call(r, lw_gelu_backward(r->s, dxx, LW_DTYPE_F32, dy, input_bf16(r, a->x16, a->n),
                             LW_DTYPE_BF16, a->n));
    float *dxw = accumulated(r, "dx of bf16 x (widened)", a->dx0, a->n, bits());
    call(r,
         lw_gelu_backward(r->s, dxw, LW_DTYPE_F32, dy, input(r, a->xw, a->n), LW_DTYPE_F32, a->n));
    /* a bf16 dx: accumulated in fp32, rounded; against the fp32 run from its widened start */
    float *dxs = accumulated(r, "dx from a bf16 start", a->dx0_w, a->n, bits());
    call(r, lw_gelu_backward(r->s, dxs, LW_DTYPE_F32, dy, x, LW_DTYPE_F32, a->n));
    uint16_t *dx16 = accumulated_bf16(r, "dx from a bf16 start bf16", a->dx0_16, a->n, bits());
    call(r, lw_gelu_backward(r->s, dx16, LW_DTYPE_BF16, dy, x, LW_DTYPE_F32, a->n));
}

static void after_gelu(const kernel_case *k, const run *r) {
    const gelu_args *a = k->args;
    const float *y = f32_of(r, "y");
    const bool forward = strcmp(k->kernel, "gelu_forward") == 0;
    if (forward)
        after_bf16_output(k, r, "y", a->n);
    else
        after_bf16_output(k, r, "dx from a bf16 start", a->n);
    widening_exact(k, r, forward ? "y of bf16 x" : "dx of bf16 x", a->n);
    if (y != NULL && a->n > N_GELU_SPECIALS)
        expect(k, r, isnan(y[GELU_NAN_AT]) && y[0] == 0.0f, "gelu(NaN) is NaN, gelu(0) is 0");
}

/* ---- the cases, made and checked ------------------------------------------------------------ */

static void gelu_cases(const char *kernel, run_fn fn, after_fn after) {
    for (size_t s = 0; s < COUNT(gelu_sizes); s++) {
        gelu_args a = {.n = gelu_sizes[s]};
        snprintf(a.shape, sizeof a.shape, "n %lld", (long long)a.n);
        a.x = scaled_random(a.n, 12.0f, 0.0f), a.dy = random_floats(a.n),
        a.dx0 = random_floats(a.n);
        if (a.n > N_GELU_SPECIALS) memcpy(a.x, gelu_specials, sizeof gelu_specials);
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

const kernel_entry case_gelu_forward = {gelu_cases, run_gelu_forward, after_gelu};
const kernel_entry case_gelu_backward = {gelu_cases, run_gelu_backward, after_gelu};
