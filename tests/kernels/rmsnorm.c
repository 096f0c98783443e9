/* rmsnorm.c: RMSNorm (forward, backward), with a gain and without, against the CPU and on every
 * device against a float64 reference; the dispatcher's refusals. */
#include "harness.h"

/* ---- the cases ------------------------------------------------------------------------------- *
 * n rows of c channels, with the gain or parameter-free. */

static const struct {
    int64_t n, c;
    bool gain;
} rmsnorm_shapes[] = {
    {1, 1, true},      /* one channel: y = g x / sqrt(x^2 + eps) */
    {1, 768, false},   /* one row of GPT-2's width, parameter-free (nanochat's) */
    {37, 100, true},   /* rows no warp divides */
    {512, 1536, true}, /* wide rows */
    {4096, 33, false}, /* many short rows */
    {2048, 40, true},  /* dg summed over 2048 rows */
    {0, 16, true},     /* no rows */
};

/* ---- runs and hooks -------------------------------------------------------------------------- *
 * Against the CPU: the mean of squares is summed in double on both devices (in other orders) and
 * rounded to float once, so rstd differs at most by an ulp; y and dx are then the same float
 * operations (no FMA on either side): 1e-6 for rstd, 1e-5 for y, and for dx, which subtracts the
 * row's projection and can cancel, 1e-5 of 1% of its largest value. dg: the CPU adds the rows
 * into it in float one after another, the GPU sums each column in double first: 1e-4 up to 4096
 * rows. The backward takes the CPU's rstd on every device, so that it alone is compared.
 *
 * Against float64 (every device): rstd is one rounding of the double statistic (an ulp with the
 * GPU's other order), y two or three roundings more: 1e-6 relative each. dx: a few roundings of
 * terms as large as dy g, with the cancellation of the row's projection: 1e-5 of 1% of the
 * largest |dx|. dg: float sums of up to 4096 rows: 1e-4 likewise. A missing or mis-scaled term
 * (the projection's 1/c, a factor rstd) is off by far more. */

typedef struct {
    char shape[64];
    int64_t n, c;
    bool gain;
    float *x, *g, *rstd, *dy, *dx0, *dg0;
} rn_args;

static const float RN_EPS = 1e-5f;

static void run_rmsnorm_forward(run *r, const void *p) {
    const rn_args *a = p;
    const int64_t nc = a->n * a->c;
    const float *x = input(r, a->x, nc), *g = a->gain ? input(r, a->g, a->c) : NULL;
    float *y = output(r, "y", nc, scaled(1e-5));
    float *rstd = output(r, "rstd", a->n, scaled(1e-6));
    call(r, lw_rmsnorm_forward(r->s, y, LW_DTYPE_F32, rstd, x, g, a->n, a->c, RN_EPS));
    /* the same in bf16 (its statistics again, into scratch) */
    uint16_t *y16 = output_bf16_values(r, "y bf16", nc, bf16_step(scaled(1e-5)));
    call(r,
         lw_rmsnorm_forward(r->s, y16, LW_DTYPE_BF16, scratch(r, a->n), x, g, a->n, a->c, RN_EPS));
}

/* max |v| over n doubles */
static double largest_abs(const double *v, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs(v[i]));
    return m;
}

static void after_rmsnorm_forward(const kernel_case *k, const run *r) {
    const rn_args *a = k->args;
    const int64_t nc = a->n * a->c;
    after_bf16_output(k, r, "y", nc);
    double *y = malloc(sizeof(double) * (size_t)(nc > 0 ? nc : 1));
    double *rs = malloc(sizeof(double) * (size_t)(a->n > 0 ? a->n : 1));
    for (int64_t i = 0; i < a->n; i++) {
        const float *xr = a->x + i * a->c;
        double ss = 0;
        for (int64_t j = 0; j < a->c; j++)
            ss += (double)xr[j] * xr[j];
        rs[i] = 1.0 / sqrt(ss / (double)a->c + (double)RN_EPS);
        for (int64_t j = 0; j < a->c; j++)
            y[i * a->c + j] = xr[j] * rs[i] * (a->gain ? (double)a->g[j] : 1.0);
    }
    near_reference(k, r, "rstd", rs, a->n, 1e-6, 1e-30);
    near_reference(k, r, "y", y, nc, 1e-6, 1e-30);
    free(y), free(rs);
}

static void run_rmsnorm_backward(run *r, const void *p) {
    const rn_args *a = p;
    const int64_t nc = a->n * a->c;
    const float *dy = input(r, a->dy, nc), *x = input(r, a->x, nc);
    const float *g = a->gain ? input(r, a->g, a->c) : NULL, *rstd = input(r, a->rstd, a->n);
    float *dx = accumulated(r, "dx", a->dx0, nc, scaled(1e-5));
    float *dg = a->gain ? accumulated(r, "dg", a->dg0, a->c, scaled(1e-4)) : NULL;
    call(r, lw_rmsnorm_backward(r->s, dx, dg, dy, x, g, rstd, a->n, a->c));
}

/* dx = dx0 + rstd (dy g - xhat mean(dy g xhat)), dg = dg0 + sum of dy xhat, xhat = x rstd, from
 * the rstd the kernel was given */
static void after_rmsnorm_backward(const kernel_case *k, const run *r) {
    const rn_args *a = k->args;
    const int64_t nc = a->n * a->c;
    double *dx = malloc(sizeof(double) * (size_t)(nc > 0 ? nc : 1));
    double *dg = calloc((size_t)(a->c > 0 ? a->c : 1), sizeof(double));
    for (int64_t i = 0; i < a->n; i++) {
        const double rs = a->rstd[i];
        const float *xr = a->x + i * a->c, *dyr = a->dy + i * a->c;
        double m = 0;
        for (int64_t j = 0; j < a->c; j++)
            m += dyr[j] * (a->gain ? (double)a->g[j] : 1.0) * xr[j] * rs;
        m /= (double)a->c;
        for (int64_t j = 0; j < a->c; j++) {
            const double dn = dyr[j] * (a->gain ? (double)a->g[j] : 1.0);
            dx[i * a->c + j] = a->dx0[i * a->c + j] + rs * (dn - xr[j] * rs * m);
            dg[j] += dyr[j] * xr[j] * rs;
        }
    }
    near_reference(k, r, "dx", dx, nc, 1e-5, 1e-2 * largest_abs(dx, nc) + 1e-30);
    if (a->gain) {
        for (int64_t j = 0; j < a->c; j++)
            dg[j] += a->dg0[j];
        near_reference(k, r, "dg", dg, a->c, 1e-4, 1e-2 * largest_abs(dg, a->c) + 1e-30);
    }
    free(dx), free(dg);
}

/* ---- the cases, made and checked ------------------------------------------------------------ */

/* What the dispatcher refuses on every device, before any runs: a gain gradient with no gain, an
 * eps that is negative or not finite, a dtype it does not take. */
static void refusals(void) {
    float x[4] = {1, 2, 3, 4}, y[4] = {0}, rstd[2] = {0}, dg[2] = {0};
    EXPECT_FAILS(lw_rmsnorm_backward(NULL, y, dg, x, x, NULL, rstd, 2, 2), LW_ERR_INVALID,
                 "rms norm backward: a gain gradient dg without a gain g");
    EXPECT_FAILS(lw_rmsnorm_forward(NULL, y, LW_DTYPE_F32, rstd, x, NULL, 2, 2, -1e-5f),
                 LW_ERR_INVALID, "rms norm forward: eps must be finite and >= 0, got -1e-05");
    EXPECT_FAILS(lw_rmsnorm_forward(NULL, y, LW_DTYPE_F32, rstd, x, NULL, 2, 2, NAN),
                 LW_ERR_INVALID, "rms norm forward: eps must be finite and >= 0");
    EXPECT_FAILS(lw_rmsnorm_forward(NULL, y, LW_DTYPE_F16, rstd, x, NULL, 2, 2, 1e-5f),
                 LW_ERR_INVALID, "rms norm forward: activation of dtype f16: fp32 or bf16 only");
    EXPECT(y[0] == 0 && rstd[0] == 0 && dg[0] == 0);
}

static void rmsnorm_cases(const char *kernel, run_fn fn, after_fn after) {
    if (strcmp(kernel, "rmsnorm_forward") == 0) refusals();
    for (size_t s = 0; s < COUNT(rmsnorm_shapes); s++) {
        rn_args a = {
            .n = rmsnorm_shapes[s].n, .c = rmsnorm_shapes[s].c, .gain = rmsnorm_shapes[s].gain};
        const int64_t nc = a.n * a.c;
        snprintf(a.shape, sizeof a.shape, "n %lld, c %lld%s", (long long)a.n, (long long)a.c,
                 a.gain ? ", gain" : ", no gain");
        a.x = scaled_random(nc, 2.0f, 0.5f), a.g = scaled_random(a.c, 0.5f, 1.0f);
        a.rstd = cpu_array(a.n);
        float *y = cpu_array(nc);
        EXPECT_OK(lw_rmsnorm_forward(NULL, y, LW_DTYPE_F32, a.rstd, a.x, a.gain ? a.g : NULL, a.n,
                                     a.c, RN_EPS));
        a.dy = random_floats(nc), a.dx0 = prefill(nc), a.dg0 = prefill(a.c);
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        free(a.x), free(a.g), free(a.rstd), free(y), free(a.dy), free(a.dx0), free(a.dg0);
    }
}

/* ---- the list's entries ---------------------------------------------------------------------- */

const kernel_entry case_rmsnorm_forward = {rmsnorm_cases, run_rmsnorm_forward,
                                           after_rmsnorm_forward};
const kernel_entry case_rmsnorm_backward = {rmsnorm_cases, run_rmsnorm_backward,
                                            after_rmsnorm_backward};
