/* value_gate.c: nanochat's value embeddings' per-head gate (value_gate_forward, _backward) on
 * the V heads of strided qkv rows, with fp32 and bf16 qkv and x, against the CPU; on every device
 * against a float64 reference (bf16's at a bf16 step), the backward also against central
 * differences of the float64 forward; the dispatcher's refusals. */
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
    float *qkvw, *xw, *dqkvw;       /* qkv, x and dqkv rounded to bf16 and widened again */
    uint16_t *qkv16, *x16, *dqkv16; /* their bits */
    bool mixed; /* the backward with one of dqkv and x in bf16 (a run of its own: its buffers) */
} gate_args;

/* A bf16 value off its float64 reference by the rounding to bf16 (half a step: 2^-9 of the
 * value, 2^-8 at the bottom of a binade) and the fp32 roundings before it. */
#define BF16_TOL (1.0 / 256 + 1e-5)

static lw_status forward(lw_stream *s, const gate_args *a, void *qkv, lw_dtype qkv_dtype,
                         const float *ve, const void *x, lw_dtype x_dtype, const float *w) {
    const gate_shape *c = a->c;
    return lw_value_gate_forward(s, qkv, qkv_dtype, ve, x, x_dtype, w, c->n, a->row_stride, a->col0,
                                 c->x_stride, c->n_heads, c->hd, c->channels, c->scale);
}

/* fp32; fp32 on the bf16 inputs widened ("qkv (widened)"); and bf16 qkv and x */
static void run_gate_forward(run *r, const void *p) {
    const gate_args *a = p;
    const gate_shape *c = a->c;
    const measure m = gate_measure();
    const float *ve = input(r, a->ve, c->n * a->kv), *x = input(r, a->x, a->nx);
    const float *w = input(r, a->w, a->nw);
    float *qkv = updated(r, "qkv", a->qkv, a->nqkv, m);
    call(r, forward(r->s, a, qkv, LW_DTYPE_F32, ve, x, LW_DTYPE_F32, w));
    const float *xw = input(r, a->xw, a->nx);
    float *qkvw = updated(r, "qkv (widened)", a->qkvw, a->nqkv, m);
    call(r, forward(r->s, a, qkvw, LW_DTYPE_F32, ve, xw, LW_DTYPE_F32, w));
    const uint16_t *x16 = input_bf16(r, a->x16, a->nx);
    uint16_t *qkv16 = updated_bf16(r, "qkv (widened) bf16", a->qkv16, a->nqkv, bf16_step(m));
    call(r, forward(r->s, a, qkv16, LW_DTYPE_BF16, ve, x16, LW_DTYPE_BF16, w));
    /* one of the two in bf16 */
    uint16_t *q16 = updated_bf16(r, "qkv bf16, x fp32", a->qkv16, a->nqkv, bf16_step(m));
    call(r, forward(r->s, a, q16, LW_DTYPE_BF16, ve, xw, LW_DTYPE_F32, w));
    float *q32 = updated(r, "qkv fp32, x bf16", a->qkvw, a->nqkv, m);
    call(r, forward(r->s, a, q32, LW_DTYPE_F32, ve, x16, LW_DTYPE_BF16, w));
}

/* The backward's outputs, named by `names` (dve, dx, dw, dz: string constants, which the run
 * keeps), from dqkv and x of a dtype. */
static void backward_into(run *r, const gate_args *a, const char *const names[4], const void *dqkv,
                          lw_dtype qkv_dtype, const void *x, lw_dtype x_dtype) {
    const gate_shape *c = a->c;
    const measure m = gate_measure();
    const float *ve = input(r, a->ve, c->n * a->kv), *w = input(r, a->w, a->nw);
    float *dve = accumulated(r, names[0], a->dve0, c->n * a->kv, m);
    float *dx = accumulated(r, names[1], a->dx0, a->nx, m);
    float *dw = accumulated(r, names[2], a->dw0, a->nw, m);
    float *dz = output(r, names[3], a->nz, m);
    call(r, lw_value_gate_backward(r->s, dve, dx, dw, dz, dqkv, qkv_dtype, ve, x, x_dtype, w, c->n,
                                   a->row_stride, a->col0, c->x_stride, c->n_heads, c->hd,
                                   c->channels, c->scale));
}

static const char *const FP32_NAMES[4] = {"dve", "dx", "dw", "dz"};
static const char *const BF16_NAMES[4] = {"dve of bf16", "dx of bf16", "dw of bf16", "dz of bf16"};
static const char *const DQKV16_NAMES[4] = {"dve of bf16 dqkv", "dx of bf16 dqkv",
                                            "dw of bf16 dqkv", "dz of bf16 dqkv"};
static const char *const X16_NAMES[4] = {"dve of bf16 x", "dx of bf16 x", "dw of bf16 x",
                                         "dz of bf16 x"};
static const char *const WIDENED_NAMES[4] = {"dve of bf16 (widened)", "dx of bf16 (widened)",
                                             "dw of bf16 (widened)", "dz of bf16 (widened)"};

/* fp32; bf16 dqkv and x ("of bf16"); and fp32 on them widened ("of bf16 (widened)"). Mixed:
 * the widened run, and bf16 dqkv with fp32 x, and fp32 dqkv with bf16 x. */
static void run_gate_backward(run *r, const void *p) {
    const gate_args *a = p;
    if (!a->mixed) {
        backward_into(r, a, FP32_NAMES, input(r, a->dqkv, a->nqkv), LW_DTYPE_F32,
                      input(r, a->x, a->nx), LW_DTYPE_F32);
        backward_into(r, a, BF16_NAMES, input_bf16(r, a->dqkv16, a->nqkv), LW_DTYPE_BF16,
                      input_bf16(r, a->x16, a->nx), LW_DTYPE_BF16);
    }
    backward_into(r, a, WIDENED_NAMES, input(r, a->dqkvw, a->nqkv), LW_DTYPE_F32,
                  input(r, a->xw, a->nx), LW_DTYPE_F32);
    if (a->mixed) {
        backward_into(r, a, DQKV16_NAMES, input_bf16(r, a->dqkv16, a->nqkv), LW_DTYPE_BF16,
                      input(r, a->xw, a->nx), LW_DTYPE_F32);
        backward_into(r, a, X16_NAMES, input(r, a->dqkvw, a->nqkv), LW_DTYPE_F32,
                      input_bf16(r, a->x16, a->nx), LW_DTYPE_BF16);
    }
}

/* Outputs `got` and `want` the same bytes (bytes each), on r's device. */
static void same_bits(const kernel_case *k, const run *r, const char *got, const char *want,
                      int64_t bytes, const char *what) {
    const void *g = got_of(r, got), *w = got_of(r, want);
    expect(k, r, g != NULL && w != NULL && memcmp(g, w, (size_t)bytes) == 0, what);
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

/* The float64 forward from qkv and x (float values): qkv's new values, allocated. */
static double *forward_reference(const gate_args *a, const float *qkv, const float *xf) {
    const gate_shape *c = a->c;
    double *x = widened(xf, a->nx), *w = widened(a->w, a->nw), *ref = widened(qkv, a->nqkv);
    for (int64_t row = 0; row < c->n; row++)
        for (int64_t h = 0; h < c->n_heads; h++) {
            const double g = gate_of(a, x, w, row, h, NULL);
            for (int64_t d = 0; d < c->hd; d++)
                ref[row * a->row_stride + a->col0 + h * c->hd + d] +=
                    g * a->ve[row * a->kv + h * c->hd + d];
        }
    free(x), free(w);
    return ref;
}

static double top_of(const double *v, int64_t n) {
    double top = 0;
    for (int64_t i = 0; i < n; i++)
        top = fmax(top, fabs(v[i]));
    return top;
}

/* Whether each row's columns before the V heads (the Q and K heads, not the gate's) are bit for
 * bit as they were: `size` bytes an element. */
static bool kept_before_v(const gate_args *a, const void *got, const void *start, size_t size) {
    bool kept = got != NULL;
    for (int64_t row = 0; kept && row < a->c->n; row++)
        kept = memcmp((const char *)got + size * (size_t)(row * a->row_stride),
                      (const char *)start + size * (size_t)(row * a->row_stride),
                      size * (size_t)a->col0) == 0;
    return kept;
}

static void after_gate_forward(const kernel_case *k, const run *r) {
    const gate_args *a = k->args;
    double *ref = forward_reference(a, a->qkv, a->x);
    near_reference(k, r, "qkv", ref, a->nqkv, 1e-5, 0.1 * top_of(ref, a->nqkv) + 1e-30);
    expect(k, r, kept_before_v(a, f32_of(r, "qkv"), a->qkv, 4),
           "the columns before the V heads are untouched");
    free(ref);
    /* bf16: the widened inputs' fp32 output rounded, and so within a bf16 step of float64 */
    after_bf16_output(k, r, "qkv (widened)", a->nqkv);
    const uint16_t *got16 = got_of(r, "qkv (widened) bf16");
    expect(k, r, kept_before_v(a, got16, a->qkv16, 2),
           "bf16: the columns before the V heads are untouched");
    ref = forward_reference(a, a->qkvw, a->xw);
    const double floor = 0.1 * top_of(ref, a->nqkv) + 1e-30;
    double worst = got16 == NULL ? INFINITY : 0;
    for (int64_t i = 0; got16 != NULL && i < a->nqkv; i++)
        worst =
            fmax(worst, fabs(bf16_reference_value(got16[i]) - ref[i]) / fmax(fabs(ref[i]), floor));
    expect(k, r, worst <= BF16_TOL, "bf16 qkv is within a bf16 step of the float64 reference");
    free(ref);
    same_bits(k, r, "qkv bf16, x fp32", "qkv (widened) bf16", 2 * a->nqkv,
              "bf16 qkv with fp32 x: bf16 x's widening's results");
    same_bits(k, r, "qkv fp32, x bf16", "qkv (widened)", 4 * a->nqkv,
              "fp32 qkv with bf16 x: its widening's results");
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

/* The backward's outputs (names) from dqkv and x (float values), against the
 * float64 reference; with differences (the fp32 run: dqkv and x are the case's own), on the CPU
 * also against the float64 forward's central differences. */
static void check_backward(const kernel_case *k, const run *r, const float *dqkvf, const float *xf,
                           const char *const names[4], bool differences) {
    const gate_args *a = k->args;
    const gate_shape *c = a->c;
    double *x = widened(xf, a->nx), *w = widened(a->w, a->nw), *ve = widened(a->ve, c->n * a->kv);
    double *dve = widened(a->dve0, c->n * a->kv), *dx = widened(a->dx0, a->nx);
    double *dw = widened(a->dw0, a->nw), *dz = calloc((size_t)(a->nz > 0 ? a->nz : 1), 8);
    for (int64_t row = 0; row < c->n; row++)
        for (int64_t h = 0; h < c->n_heads; h++) {
            double slope, dot = 0;
            const double g = gate_of(a, x, w, row, h, &slope);
            for (int64_t d = 0; d < c->hd; d++) {
                const double dv = dqkvf[row * a->row_stride + a->col0 + h * c->hd + d];
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
    const double *ref[4] = {dve, dx, dw, dz};
    const int64_t n[4] = {c->n * a->kv, a->nx, a->nw, a->nz};
    for (int i = 0; i < 4; i++)
        near_reference(k, r, names[i], ref[i], n[i], 1e-5, 0.1 * top_of(ref[i], n[i]) + 1e-30);
    const float *gdve = f32_of(r, names[0]), *gdx = f32_of(r, names[1]);
    const float *gdw = f32_of(r, names[2]);
    if (differences && on_cpu(r->device) && c->n > 0 && gdx && gdw && gdve) {
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

/* bf16 dqkv and x give their widening's fp32 results, bit for bit, on every device: the
 * kernels read them widened and compute the same from there. */
static void after_gate_backward(const kernel_case *k, const run *r) {
    const gate_args *a = k->args;
    const int64_t bytes[4] = {4 * a->c->n * a->kv, 4 * a->nx, 4 * a->nw, 4 * a->nz};
    if (a->mixed) {
        for (int i = 0; i < 4; i++) {
            same_bits(k, r, DQKV16_NAMES[i], WIDENED_NAMES[i], bytes[i],
                      "bf16 dqkv with fp32 x: its widening's results");
            same_bits(k, r, X16_NAMES[i], WIDENED_NAMES[i], bytes[i],
                      "fp32 dqkv with bf16 x: its widening's results");
        }
        return;
    }
    check_backward(k, r, a->dqkv, a->x, FP32_NAMES, true);
    check_backward(k, r, a->dqkvw, a->xw, BF16_NAMES, false);
    for (int i = 0; i < 4; i++)
        widening_exact(k, r, BF16_NAMES[i], bytes[i] / 4);
}

/* ---- refusals -------------------------------------------------------------------------------- */

static void gate_refusals(void) {
    float v[64] = {0}, x[16] = {0}, w[12] = {0};
    const lw_dtype f32 = LW_DTYPE_F32;
    EXPECT_FAILS(lw_value_gate_forward(NULL, v, f32, v, x, f32, w, 1, 16, 12, 16, 1, 8, 12, 3.0f),
                 LW_ERR_INVALID,
                 "value gate forward: the heads' columns col0 + n_heads * hd = 12 + 1 * 8 pass "
                 "the row stride 16");
    EXPECT_FAILS(lw_value_gate_forward(NULL, v, f32, v, x, f32, w, 1, 16, 8, 8, 1, 8, 12, 3.0f),
                 LW_ERR_INVALID,
                 "value gate forward: the gate's channels (12) must be >= 1 and within x's row "
                 "stride (8)");
    EXPECT_FAILS(lw_value_gate_backward(NULL, v, x, w, v, v, f32, v, x, f32, w, 1, 16, 8, 16, 1, 8,
                                        12, INFINITY),
                 LW_ERR_INVALID, "value gate backward: scale must be finite, got inf");
    EXPECT_FAILS(lw_value_gate_forward(NULL, v, f32, v, x, f32, w, 1, 16, 8, 16, 0, 8, 12, 3.0f),
                 LW_ERR_INVALID, "n_heads (0) and the head dim hd (8) must be >= 1");
    EXPECT_FAILS(lw_value_gate_forward(NULL, v, f32, v, x, f32, w, -1, 16, 8, 16, 1, 8, 12, 3.0f),
                 LW_ERR_INVALID, "value gate forward: n (-1) must be >= 0");
    EXPECT_FAILS(
        lw_value_gate_forward(NULL, v, LW_DTYPE_F16, v, x, f32, w, 1, 16, 8, 16, 1, 8, 12, 3.0f),
        LW_ERR_INVALID, "value gate forward: qkv of dtype f16: fp32 or bf16 only");
    EXPECT_FAILS(lw_value_gate_backward(NULL, v, x, w, v, v, f32, v, x, LW_DTYPE_F16, w, 1, 16, 8,
                                        16, 1, 8, 12, 3.0f),
                 LW_ERR_INVALID, "value gate backward: input of dtype f16: fp32 or bf16 only");
    EXPECT(v[0] == 0 && x[0] == 0 && w[0] == 0);
}

static float *copy_of(const float *x, int64_t n) {
    float *y = cpu_array(n);
    memcpy(y, x, sizeof(float) * (size_t)(n > 0 ? n : 1));
    return y;
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
        a.qkvw = copy_of(a.qkv, a.nqkv), a.xw = copy_of(a.x, a.nx),
        a.dqkvw = copy_of(a.dqkv, a.nqkv);
        a.qkv16 = round_weights(a.qkvw, a.nqkv), a.x16 = round_weights(a.xw, a.nx);
        a.dqkv16 = round_weights(a.dqkvw, a.nqkv);
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        if (strcmp(kernel, "value_gate_backward") == 0) {
            a.mixed = true;
            snprintf(a.shape + strlen(a.shape), sizeof a.shape - strlen(a.shape), ", mixed");
            check(&(kernel_case){
                .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        }
        free(a.qkv), free(a.ve), free(a.x), free(a.w), free(a.dqkv);
        free(a.dve0), free(a.dx0), free(a.dw0);
        free(a.qkvw), free(a.xw), free(a.dqkvw), free(a.qkv16), free(a.x16), free(a.dqkv16);
    }
}

/* ---- the list's entries ---------------------------------------------------------------------- */

const kernel_entry case_value_gate_forward = {gate_cases, run_gate_forward, after_gate_forward};
const kernel_entry case_value_gate_backward = {gate_cases, run_gate_backward, after_gate_backward};
