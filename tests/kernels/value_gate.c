/* value_gate.c: nanochat's value embeddings' per-head gate (value_gate_forward, _backward) on
 * the V heads of strided qkv rows, against the CPU; on every device against a float64
 * reference, the backward also against central differences of the float64 forward; the
 * dispatcher's refusals. */
#include "harness.h"

/* ---- the cases ------------------------------------------------------------------------------- *
 * n rows; qkv rows of n_q query heads, then n_heads K heads, then n_heads V heads (GQA's layout)
 * of hd each, V from col0 = (n_q + n_heads) hd; x rows x_stride wide, of which the first
 * `channels` feed the gate. */

typedef struct {
    int64_t n, n_q, n_heads, hd, channels, x_stride;
    float scale, gate_scale; /* the gate's scale; w drawn in [-gate_scale, gate_scale) */
} gate_shape;

static const gate_shape gate_shapes[] = {
    {0, 2, 1, 4, 12, 16, 3.0f, 1.0f},     /* no rows */
    {1, 1, 1, 4, 12, 12, 3.0f, 1.0f},     /* one row, channels the whole of x */
    {37, 4, 2, 8, 12, 32, 3.0f, 1.0f},    /* GQA: 4 query heads over 2 KV heads */
    {300, 6, 3, 16, 5, 48, 2.0f, 20.0f},  /* logits far out: the sigmoid's tails */
    {129, 6, 6, 64, 12, 384, 3.0f, 0.3f}, /* nanochat's head dim, no GQA */
};

/* ---- runs and hooks -------------------------------------------------------------------------- *
 * The gate's logit and sigmoid are taken in double on every device and g rounded once; CUDA's
 * double exp is within an ulp of glibc's, so g may differ by an ulp of float, and v + g e by
 * that times |e|. Each result is off from float64 by the roundings of g, of g e and of the sum,
 * each relative to its operands (|v| + |g e| up to 4 here), not to the result, which can cancel:
 * about 5e-7 absolute, so 1e-5 relative, judged against a tenth of the largest value. dz (a dot
 * of hd terms in double, rounded once), dx and dw (sums in double of products of the rounded dz,
 * dw's in another order on a GPU) likewise. Finite differences of the float64 forward, central
 * with step 1e-3: the truncation is ~1e-6 |f'''| (f''' of the scaled sigmoid is at most 3/8
 * scale); 1e-4 of the gradient's scale. */

static measure gate_measure(void) {
    measure m = scaled(1e-5);
    m.scale = 0.1;
    return m;
}

typedef struct {
    char shape[96];
    const gate_shape *c;
    int64_t row_stride, col0, kv, nqkv, nx, nw, nz;
    float *qkv, *ve, *x, *w, *dqkv, *dve0, *dx0, *dw0;
} gate_args;

static void run_gate_forward(run *r, const void *p) {
    const gate_args *a = p;
    const gate_shape *c = a->c;
    const float *ve = input(r, a->ve, c->n * a->kv), *x = input(r, a->x, a->nx);
    const float *w = input(r, a->w, a->nw);
    float *qkv = updated(r, "qkv", a->qkv, a->nqkv, gate_measure());
    call(r, lw_value_gate_forward(r->s, qkv, ve, x, w, c->n, a->row_stride, a->col0, c->x_stride,
                                  c->n_heads, c->hd, c->channels, c->scale));
}

static void run_gate_backward(run *r, const void *p) {
    const gate_args *a = p;
    const gate_shape *c = a->c;
    const float *dqkv = input(r, a->dqkv, a->nqkv), *ve = input(r, a->ve, c->n * a->kv);
    const float *x = input(r, a->x, a->nx), *w = input(r, a->w, a->nw);
    float *dve = accumulated(r, "dve", a->dve0, c->n * a->kv, gate_measure());
    float *dx = accumulated(r, "dx", a->dx0, a->nx, gate_measure());
    float *dw = accumulated(r, "dw", a->dw0, a->nw, gate_measure());
    float *dz = output(r, "dz", a->nz, gate_measure());
    call(r, lw_value_gate_backward(r->s, dve, dx, dw, dz, dqkv, ve, x, w, c->n, a->row_stride,
                                   a->col0, c->x_stride, c->n_heads, c->hd, c->channels, c->scale));
}

/* The float64 gate of head h at row r, and its logit's slope g'(z) = scale s (1 - s). */
static double gate_of(const gate_args *a, const double *x, const double *w, int64_t r, int64_t h,
                      double *slope) {
    const gate_shape *c = a->c;
    double z = 0;
    for (int64_t k = 0; k < c->channels; k++)
        z += w[h * c->channels + k] * x[r * c->x_stride + k];
    const double s = 1.0 / (1.0 + exp(-z));
    if (slope) *slope = c->scale * s * (1.0 - s);
    return c->scale * s;
}

/* sum over the V heads of dqkv * (the forward's qkv), in float64: what the backward's gradients
 * are the derivatives of */
static double objective(const gate_args *a, const double *x, const double *w, const double *ve) {
    const gate_shape *c = a->c;
    double total = 0;
    for (int64_t r = 0; r < c->n; r++)
        for (int64_t h = 0; h < c->n_heads; h++) {
            const double g = gate_of(a, x, w, r, h, NULL);
            for (int64_t d = 0; d < c->hd; d++) {
                const int64_t i = r * a->row_stride + a->col0 + h * c->hd + d;
                total += a->dqkv[i] * (a->qkv[i] + g * ve[r * a->kv + h * c->hd + d]);
            }
        }
    return total;
}

static double *widened(const float *x, int64_t n) {
    double *y = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i];
    return y;
}

static void after_gate_forward(const kernel_case *k, const run *r) {
    const gate_args *a = k->args;
    const gate_shape *c = a->c;
    double *x = widened(a->x, a->nx), *w = widened(a->w, a->nw), *ref = widened(a->qkv, a->nqkv);
    for (int64_t row = 0; row < c->n; row++)
        for (int64_t h = 0; h < c->n_heads; h++) {
            const double g = gate_of(a, x, w, row, h, NULL);
            for (int64_t d = 0; d < c->hd; d++)
                ref[row * a->row_stride + a->col0 + h * c->hd + d] +=
                    g * a->ve[row * a->kv + h * c->hd + d];
        }
    double top = 0;
    for (int64_t i = 0; i < a->nqkv; i++)
        top = fmax(top, fabs(ref[i]));
    near_reference(k, r, "qkv", ref, a->nqkv, 1e-5, 0.1 * top + 1e-30);
    /* the Q and K heads are not the gate's: bit for bit as they were */
    const float *got = f32_of(r, "qkv");
    bool kept = got != NULL;
    for (int64_t row = 0; kept && row < c->n; row++)
        kept = memcmp(got + row * a->row_stride, a->qkv + row * a->row_stride,
                      sizeof(float) * (size_t)a->col0) == 0;
    expect(k, r, kept, "the columns before the V heads are untouched");
    free(x), free(w), free(ref);
}

static double top_of(const double *v, int64_t n) {
    double top = 0;
    for (int64_t i = 0; i < n; i++)
        top = fmax(top, fabs(v[i]));
    return top;
}

/* Central differences of the objective in element i of p (float64), against the kernel's
 * gradient got - start; the worst relative error over `count` elements spread over p. */
static double worst_difference(const gate_args *a, double *x, double *w, double *ve, double *p,
                               int64_t n, const float *got, const float *start, double scale) {
    const double step = 1e-3;
    double worst = 0;
    const int64_t count = n < 16 ? n : 16;
    for (int64_t m = 0; m < count; m++) {
        const int64_t i = m * (n / count) + (m * 7) % (n / count > 0 ? n / count : 1);
        const double keep = p[i];
        p[i] = keep + step;
        const double up = objective(a, x, w, ve);
        p[i] = keep - step;
        const double down = objective(a, x, w, ve);
        p[i] = keep;
        const double fd = (up - down) / (2 * step), kernel = (double)got[i] - start[i];
        worst = fmax(worst, fabs(fd - kernel) / (fabs(fd) + scale));
    }
    return worst;
}

static void after_gate_backward(const kernel_case *k, const run *r) {
    const gate_args *a = k->args;
    const gate_shape *c = a->c;
    double *x = widened(a->x, a->nx), *w = widened(a->w, a->nw), *ve = widened(a->ve, c->n * a->kv);
    double *dve = widened(a->dve0, c->n * a->kv), *dx = widened(a->dx0, a->nx);
    double *dw = widened(a->dw0, a->nw), *dz = calloc((size_t)(a->nz > 0 ? a->nz : 1), 8);
    for (int64_t row = 0; row < c->n; row++)
        for (int64_t h = 0; h < c->n_heads; h++) {
            double slope, dot = 0;
            const double g = gate_of(a, x, w, row, h, &slope);
            for (int64_t d = 0; d < c->hd; d++) {
                const double dv = a->dqkv[row * a->row_stride + a->col0 + h * c->hd + d];
                dot += dv * ve[row * a->kv + h * c->hd + d];
                dve[row * a->kv + h * c->hd + d] += g * dv;
            }
            const double z = dot * slope;
            dz[row * c->n_heads + h] = z;
            for (int64_t j = 0; j < c->channels; j++) {
                dx[row * c->x_stride + j] += z * w[h * c->channels + j];
                dw[h * c->channels + j] += z * x[row * c->x_stride + j];
            }
        }
    near_reference(k, r, "dve", dve, c->n * a->kv, 1e-5, 0.1 * top_of(dve, c->n * a->kv) + 1e-30);
    near_reference(k, r, "dx", dx, a->nx, 1e-5, 0.1 * top_of(dx, a->nx) + 1e-30);
    near_reference(k, r, "dw", dw, a->nw, 1e-5, 0.1 * top_of(dw, a->nw) + 1e-30);
    near_reference(k, r, "dz", dz, a->nz, 1e-5, 0.1 * top_of(dz, a->nz) + 1e-30);
    const float *gdx = f32_of(r, "dx"), *gdw = f32_of(r, "dw"), *gdve = f32_of(r, "dve");
    if (on_cpu(r->device) && c->n > 0 && gdx && gdw && gdve) {
        /* x's columns past the gate's channels have no gradient: only its first ones moved */
        double worst =
            worst_difference(a, x, w, ve, w, a->nw, gdw, a->dw0, 1e-2 * top_of(dw, a->nw));
        worst = fmax(worst, worst_difference(a, x, w, ve, ve, c->n * a->kv, gdve, a->dve0,
                                             1e-2 * top_of(dve, c->n * a->kv)));
        worst = fmax(worst, worst_difference(a, x, w, ve, x, c->channels, gdx, a->dx0,
                                             1e-2 * top_of(dx, a->nx)));
        expect(k, r, worst < 1e-4, "dw, dve and dx are the float64 forward's central differences");
    }
    free(x), free(w), free(ve), free(dve), free(dx), free(dw), free(dz);
}

/* ---- refusals -------------------------------------------------------------------------------- */

static void gate_refusals(void) {
    float v[64] = {0}, x[16] = {0}, w[12] = {0};
    EXPECT_FAILS(lw_value_gate_forward(NULL, v, v, x, w, 1, 16, 12, 16, 1, 8, 12, 3.0f),
                 LW_ERR_INVALID,
                 "value gate forward: the heads' columns col0 + n_heads * hd = 12 + 1 * 8 pass "
                 "the row stride 16");
    EXPECT_FAILS(lw_value_gate_forward(NULL, v, v, x, w, 1, 16, 8, 8, 1, 8, 12, 3.0f),
                 LW_ERR_INVALID,
                 "value gate forward: the gate's channels (12) must be >= 1 and within x's row "
                 "stride (8)");
    EXPECT_FAILS(
        lw_value_gate_backward(NULL, v, x, w, v, v, v, x, w, 1, 16, 8, 16, 1, 8, 12, INFINITY),
        LW_ERR_INVALID, "value gate backward: scale must be finite, got inf");
    EXPECT_FAILS(lw_value_gate_forward(NULL, v, v, x, w, 1, 16, 8, 16, 0, 8, 12, 3.0f),
                 LW_ERR_INVALID, "n_heads (0) and the head dim hd (8) must be >= 1");
    EXPECT_FAILS(lw_value_gate_forward(NULL, v, v, x, w, -1, 16, 8, 16, 1, 8, 12, 3.0f),
                 LW_ERR_INVALID, "value gate forward: n (-1) must be >= 0");
    EXPECT(v[0] == 0 && x[0] == 0 && w[0] == 0);
}

/* ---- the cases, made and checked ------------------------------------------------------------ */

static void gate_cases(const char *kernel, run_fn fn, after_fn after) {
    if (strcmp(kernel, "value_gate_forward") == 0) gate_refusals();
    for (size_t s = 0; s < COUNT(gate_shapes); s++) {
        const gate_shape *c = &gate_shapes[s];
        gate_args a = {.c = c};
        a.kv = c->n_heads * c->hd;
        a.row_stride = c->n_q * c->hd + 2 * a.kv;
        a.col0 = c->n_q * c->hd + a.kv;
        a.nqkv = c->n * a.row_stride, a.nx = c->n * c->x_stride;
        a.nw = c->n_heads * c->channels, a.nz = c->n * c->n_heads;
        snprintf(a.shape, sizeof a.shape,
                 "%lld rows, %lld V heads of %lld at %lld of %lld, %lld of %lld channels",
                 (long long)c->n, (long long)c->n_heads, (long long)c->hd, (long long)a.col0,
                 (long long)a.row_stride, (long long)c->channels, (long long)c->x_stride);
        a.qkv = random_floats(a.nqkv), a.ve = random_floats(c->n * a.kv);
        a.x = scaled_random(a.nx, 2.0f, 0.0f), a.w = scaled_random(a.nw, c->gate_scale, 0.0f);
        a.dqkv = random_floats(a.nqkv);
        a.dve0 = prefill(c->n * a.kv), a.dx0 = prefill(a.nx), a.dw0 = prefill(a.nw);
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        free(a.qkv), free(a.ve), free(a.x), free(a.w), free(a.dqkv);
        free(a.dve0), free(a.dx0), free(a.dw0);
    }
}

/* ---- the list's entries ---------------------------------------------------------------------- */

const kernel_entry case_value_gate_forward = {gate_cases, run_gate_forward, after_gate_forward};
const kernel_entry case_value_gate_backward = {gate_cases, run_gate_backward, after_gate_backward};
