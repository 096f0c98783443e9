/* head_rmsnorm.c: the per-head RMS norm (head_rmsnorm_forward, _backward) in place on heads of
 * strided rows, against the CPU, on fp32 and bf16 tensors; on the CPU against a float64
 * reference (and the columns outside the heads left as they were), the backward against finite
 * differences of the float64 forward, and the checks that refuse a bad call. */
#include "harness.h"

/* ---- the cases ------------------------------------------------------------------------------- *
 * rows of `stride` elements, n_heads heads of hd from column col0. */

typedef struct {
    int64_t rows, stride, col0, n_heads, hd;
    float eps;
    bool zero_head; /* the first head of the first row all zeros: rstd = 1 / sqrt(eps) */
} norm_shape;

static const norm_shape norm_shapes[] = {
    {1, 1, 0, 1, 1, 1e-6f, false},        /* one element: y = x / sqrt(x^2 + eps) */
    {10, 40, 0, 4, 8, 1e-6f, true},       /* GQA's qkv: 3 Q heads and 1 K head, V after */
    {51, 384, 0, 4, 64, 0x1p-23f, false}, /* a GPT-2-like qkv; torch's fp32 eps (nanochat's) */
    {7, 45, 7, 3, 10, 1e-5f, true},       /* columns either side */
    {4, 256, 0, 2, 128, 0.0f, false},     /* hd 128, no eps */
    {0, 16, 0, 2, 8, 1e-6f, false},       /* no rows */
};

/* ---- runs and hooks -------------------------------------------------------------------------- *
 * A head's sum of squares is taken in double on both devices, in other orders, and rounded once:
 * rstd may differ by an ulp, and y = x rstd (one float product) by two: 5e-7. The backward's
 * mean(dy y) likewise, then dy - y m can cancel: 1e-5 of 1% of the largest value. Against the
 * float64 reference, the CPU's rstd is within an ulp (2.5e-7), y within two roundings (3.6e-7);
 * its dx, from the float y and rstd the forward saved, within 1e-5 of the head's scale. */

typedef struct {
    char shape[96];
    const norm_shape *c;
    int64_t n, heads;
    float *x, *xw;     /* [rows stride], and rounded to bf16 and widened again */
    uint16_t *x16;     /* its bits */
    float *y, *rstd;   /* the CPU's forward of x */
    float *yw, *rstdw; /* of xw */
    uint16_t *y16;     /* yw rounded to bf16 (a bf16 forward's output) */
    float *y16w;       /* and widened */
    float *dy, *dyw;   /* the backward's start, and rounded to bf16 and widened again */
    uint16_t *dy16;
} norm_args;

static lw_status forward(lw_stream *s, const norm_args *a, void *x, lw_dtype dtype, float *rstd) {
    const norm_shape *c = a->c;
    return lw_head_rmsnorm_forward(s, x, dtype, rstd, c->rows, c->stride, c->col0, c->n_heads,
                                   c->hd, c->eps);
}

static lw_status backward(lw_stream *s, const norm_args *a, void *dx, lw_dtype dx_dtype,
                          const void *y, lw_dtype y_dtype, const float *rstd) {
    const norm_shape *c = a->c;
    return lw_head_rmsnorm_backward(s, dx, dx_dtype, y, y_dtype, rstd, c->rows, c->stride, c->col0,
                                    c->n_heads, c->hd);
}

static void run_norm_forward(run *r, const void *p) {
    const norm_args *a = p;
    const measure m = scaled(5e-7);
    float *x = updated(r, "x", a->x, a->n, m), *rstd = output(r, "rstd", a->heads, m);
    call(r, forward(r->s, a, x, LW_DTYPE_F32, rstd));
    float *xw = updated(r, "x (widened)", a->xw, a->n, m);
    float *rstdw = output(r, "rstd (widened)", a->heads, m);
    call(r, forward(r->s, a, xw, LW_DTYPE_F32, rstdw));
    uint16_t *x16 = updated_bf16(r, "x (widened) bf16", a->x16, a->n, bf16_step(m));
    float *rstd16 = output(r, "rstd of bf16", a->heads, m);
    call(r, forward(r->s, a, x16, LW_DTYPE_BF16, rstd16));
}

/* dy (fp32) from the fp32 forward; dy's widening with the widened bf16 forward's y (fp32), and
 * its bits with that forward's bits (bf16 dx and y). */
static void run_norm_backward(run *r, const void *p) {
    const norm_args *a = p;
    const measure m = scaled(1e-5);
    const float *y = input(r, a->y, a->n), *rstd = input(r, a->rstd, a->heads);
    float *dx = updated(r, "dx", a->dy, a->n, m);
    call(r, backward(r->s, a, dx, LW_DTYPE_F32, y, LW_DTYPE_F32, rstd));
    const float *yw = input(r, a->y16w, a->n), *rstdw = input(r, a->rstdw, a->heads);
    float *dxw = updated(r, "dx (widened)", a->dyw, a->n, m);
    call(r, backward(r->s, a, dxw, LW_DTYPE_F32, yw, LW_DTYPE_F32, rstdw));
    const uint16_t *y16 = input_bf16(r, a->y16, a->n);
    uint16_t *dx16 = updated_bf16(r, "dx (widened) bf16", a->dy16, a->n, bf16_step(m));
    call(r, backward(r->s, a, dx16, LW_DTYPE_BF16, y16, LW_DTYPE_BF16, rstdw));
}

/* The float64 forward of one head at x: y = x / sqrt(mean(x^2) + eps); returns its rstd. */
static double reference_head(const double *x, double *y, int64_t hd, double eps) {
    double s = 0;
    for (int64_t i = 0; i < hd; i++)
        s += x[i] * x[i];
    const double r = 1.0 / sqrt(s / (double)hd + eps);
    for (int64_t i = 0; i < hd; i++)
        y[i] = x[i] * r;
    return r;
}

/* Columns outside the heads as they were. */
static int64_t wrong_outside(const norm_args *a, const float *start, const float *got) {
    const norm_shape *c = a->c;
    int64_t wrong = 0;
    for (int64_t row = 0; row < c->rows; row++)
        for (int64_t col = 0; col < c->stride; col++)
            if (col < c->col0 || col >= c->col0 + c->n_heads * c->hd)
                wrong += memcmp(&start[row * c->stride + col], &got[row * c->stride + col], 4) != 0;
    return wrong;
}

/* The forward's y and rstd against the float64 reference. */
static int64_t wrong_forward(const norm_args *a, const float *y, const float *rstd) {
    const norm_shape *c = a->c;
    double *xd = malloc(sizeof(double) * 2 * (size_t)c->hd), *yd = xd + c->hd;
    int64_t wrong = wrong_outside(a, a->x, y);
    for (int64_t k = 0; k < a->heads; k++) {
        const int64_t at = (k / c->n_heads) * c->stride + c->col0 + (k % c->n_heads) * c->hd;
        for (int64_t i = 0; i < c->hd; i++)
            xd[i] = a->x[at + i];
        const double r = reference_head(xd, yd, c->hd, c->eps);
        wrong += !(fabs(rstd[k] - r) <= 2.5e-7 * r);
        for (int64_t i = 0; i < c->hd; i++)
            wrong += !(fabs(y[at + i] - yd[i]) <= 3.6e-7 * fabs(yd[i]));
    }
    free(xd);
    return wrong;
}

/* The backward's dx (from dy, the fp32 forward's y and rstd) against the float64 reference's
 * formula and, for up to 4 elements per head, central differences of <dy, F(x)> through the
 * float64 forward F (step 1e-4 of the head's rms: a truncation error of ~1e-8 of the slope):
 * both within 1e-5 of the head's scale rstd max|dy|. */
static int64_t wrong_backward(const norm_args *a, const float *dx) {
    const norm_shape *c = a->c;
    double *xd = malloc(sizeof(double) * 3 * (size_t)c->hd), *yd = xd + c->hd, *yh = yd + c->hd;
    int64_t wrong = wrong_outside(a, a->dy, dx);
    for (int64_t k = 0; k < a->heads; k++) {
        const int64_t at = (k / c->n_heads) * c->stride + c->col0 + (k % c->n_heads) * c->hd;
        const float *dy = a->dy + at;
        for (int64_t i = 0; i < c->hd; i++)
            xd[i] = a->x[at + i];
        const double r = reference_head(xd, yd, c->hd, c->eps);
        double dot = 0, top = 0;
        for (int64_t i = 0; i < c->hd; i++)
            dot += dy[i] * yd[i], top = fmax(top, fabs(dy[i]));
        const double tol = 1e-5 * r * top + 1e-30, step = 1e-4 / r;
        for (int64_t i = 0; i < c->hd; i++) {
            const double want = r * (dy[i] - yd[i] * dot / (double)c->hd);
            wrong += !(fabs(dx[at + i] - want) <= tol);
            if (i >= 4) continue;
            double loss[2];
            for (int side = 0; side < 2; side++) {
                xd[i] = a->x[at + i] + (side == 0 ? step : -step);
                reference_head(xd, yh, c->hd, c->eps);
                loss[side] = 0;
                for (int64_t e = 0; e < c->hd; e++)
                    loss[side] += dy[e] * yh[e];
            }
            xd[i] = a->x[at + i];
            wrong += !(fabs(dx[at + i] - (loss[0] - loss[1]) / (2 * step)) <= tol);
        }
    }
    free(xd);
    return wrong;
}

static void after_norm(const kernel_case *k, const run *r) {
    const norm_args *a = k->args;
    const bool forward_pass = strcmp(k->kernel, "head_rmsnorm_forward") == 0;
    after_bf16_output(k, r, forward_pass ? "x (widened)" : "dx (widened)", a->n);
    if (forward_pass) {
        const float *rw = f32_of(r, "rstd (widened)"), *r16 = f32_of(r, "rstd of bf16");
        expect(k, r, rw && r16 && memcmp(rw, r16, 4 * (size_t)a->heads) == 0,
               "a bf16 head's rstd is its widening's, bit for bit");
    }
    if (!on_cpu(r->device)) return;
    if (forward_pass) {
        const float *y = f32_of(r, "x"), *rstd = f32_of(r, "rstd");
        expect(k, r, y && rstd && wrong_forward(a, y, rstd) == 0,
               "y and rstd are the float64 reference's, the other columns untouched");
    } else {
        const float *dx = f32_of(r, "dx");
        expect(k, r, dx && wrong_backward(a, dx) == 0,
               "dx is the float64 formula's and the forward's finite differences");
    }
}

/* ---- refusals -------------------------------------------------------------------------------- */

static void norm_refusals(void) {
    float x[16] = {0}, rstd[2] = {0};
    EXPECT_FAILS(lw_head_rmsnorm_forward(NULL, x, LW_DTYPE_F32, rstd, 1, 16, 1, 2, 8, 1e-6f),
                 LW_ERR_INVALID,
                 "head rmsnorm forward: the heads' columns col0 + n_heads * hd = "
                 "1 + 2 * 8 pass the row stride 16");
    EXPECT_FAILS(lw_head_rmsnorm_forward(NULL, x, LW_DTYPE_F32, rstd, 1, 16, 0, 2, 8, -1.0f),
                 LW_ERR_INVALID, "head rmsnorm forward: eps must be finite and >= 0, got -1");
    EXPECT_FAILS(lw_head_rmsnorm_forward(NULL, x, LW_DTYPE_F32, rstd, 1, 16, 0, 2, 0, 1e-6f),
                 LW_ERR_INVALID, "the head dim hd = 0 must be >= 1");
    EXPECT_FAILS(
        lw_head_rmsnorm_backward(NULL, x, LW_DTYPE_F32, x, LW_DTYPE_F16, rstd, 1, 16, 0, 2, 8),
        LW_ERR_INVALID, "head rmsnorm backward: output of dtype f16: fp32 or bf16 only");
    EXPECT_FAILS(
        lw_head_rmsnorm_backward(NULL, x, LW_DTYPE_F32, x, LW_DTYPE_F32, rstd, -1, 16, 0, 2, 8),
        LW_ERR_INVALID, "rows (-1) must be >= 0");
    EXPECT_OK(lw_head_rmsnorm_forward(NULL, NULL, LW_DTYPE_F32, NULL, 0, 16, 0, 2, 8, 1e-6f));
}

/* ---- the cases, made and checked ------------------------------------------------------------ */

static float *copy_of(const float *x, int64_t n) {
    float *y = cpu_array(n);
    memcpy(y, x, sizeof(float) * (size_t)(n > 0 ? n : 1));
    return y;
}

static void norm_cases(const char *kernel, run_fn fn, after_fn after) {
    if (strcmp(kernel, "head_rmsnorm_forward") == 0) norm_refusals();
    for (size_t s = 0; s < COUNT(norm_shapes); s++) {
        const norm_shape *c = &norm_shapes[s];
        norm_args a = {.c = c, .n = c->rows * c->stride, .heads = c->rows * c->n_heads};
        snprintf(a.shape, sizeof a.shape, "%lld rows, %lld heads of %lld at %lld of %lld, eps %g",
                 (long long)c->rows, (long long)c->n_heads, (long long)c->hd, (long long)c->col0,
                 (long long)c->stride, (double)c->eps);
        a.x = scaled_random(a.n, 3.0f, 0.5f);
        if (c->zero_head) memset(a.x + c->col0, 0, sizeof(float) * (size_t)c->hd);
        a.xw = copy_of(a.x, a.n);
        a.x16 = round_weights(a.xw, a.n);
        a.y = copy_of(a.x, a.n), a.yw = copy_of(a.xw, a.n);
        a.rstd = cpu_array(a.heads), a.rstdw = cpu_array(a.heads);
        EXPECT_OK(forward(NULL, &a, a.y, LW_DTYPE_F32, a.rstd));
        EXPECT_OK(forward(NULL, &a, a.yw, LW_DTYPE_F32, a.rstdw));
        a.y16w = copy_of(a.yw, a.n);
        a.y16 = round_weights(a.y16w, a.n);
        a.dy = random_floats(a.n);
        a.dyw = copy_of(a.dy, a.n);
        a.dy16 = round_weights(a.dyw, a.n);
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        free(a.x), free(a.xw), free(a.x16), free(a.y), free(a.yw), free(a.rstd), free(a.rstdw);
        free(a.y16w), free(a.y16), free(a.dy), free(a.dyw), free(a.dy16);
    }
}

/* ---- the list's entries ---------------------------------------------------------------------- */

const kernel_entry case_head_rmsnorm_forward = {norm_cases, run_norm_forward, after_norm};
const kernel_entry case_head_rmsnorm_backward = {norm_cases, run_norm_backward, after_norm};
