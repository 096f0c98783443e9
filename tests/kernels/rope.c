/* rope.c: rotary position embeddings (rope_forward, rope_backward) in place on heads of strided
 * rows, against the CPU, in both pairings, on fp32 and bf16 tensors; on the CPU against a
 * float64 reference of the rotation (and the columns outside the heads left as they were), the
 * backward against finite differences of the forward, and the checks that refuse a bad call. */
#include "harness.h"

/* ---- the cases ------------------------------------------------------------------------------- *
 * b sequences of t rows of `stride` elements, n_heads heads of hd from column col0; positions
 * from pos0. */

typedef struct {
    int64_t b, t, pos0, stride, col0, n_heads, hd;
    float base;
} rope_shape;

static const rope_shape rope_shapes[] = {
    {1, 1, 0, 2, 0, 1, 2, 10000.0f},        /* one pair at position 0: the identity */
    {2, 5, 3, 40, 0, 4, 8, 10000.0f},       /* GQA's qkv: 3 Q heads and 1 K head, V after */
    {3, 17, 0, 384, 0, 4, 64, 10000.0f},    /* a GPT-2-like qkv: 2 heads of 64, Q and K */
    {2, 3, 1, 45, 7, 3, 10, 500000.0f},     /* columns either side, LLaMA 3's base, hd 10 */
    {1, 4, 8190, 256, 0, 2, 128, 10000.0f}, /* far positions: angles of thousands of radians */
    {0, 4, 0, 16, 0, 2, 8, 10000.0f},       /* no rows */
};

/* ---- runs and hooks -------------------------------------------------------------------------- *
 * Both devices take each angle, its cosine and sine and the rotation in double and round once to
 * fp32, from the same inputs: their double cos and sin differ by an ulp of double at most, which
 * moves a fp32 result only where it lies at a rounding point, by an ulp (2^-23 of it). Against
 * the float64 reference the CPU is within half an ulp of fp32 plus the double's errors (angle
 * p theta up to 1e4 rad: 1e-12 rad): 2^-24 of the value and 1e-11 of the pair's size. */

static const double ROPE_TOL = 2.5e-7;

typedef struct {
    char shape[96];
    const rope_shape *c;
    lw_rope_pairing pairing;
    int64_t n;
    float *x;      /* [b t stride] */
    float *xw;     /* x rounded to bf16 and widened again */
    uint16_t *x16; /* its bits */
} rope_args;

typedef lw_status (*rope_fn)(lw_stream *, void *, lw_dtype, int64_t, int64_t, int64_t, int64_t,
                             int64_t, int64_t, int64_t, float, lw_rope_pairing);

static lw_status rope_call(rope_fn fn, lw_stream *s, const rope_args *a, void *x, lw_dtype dtype) {
    const rope_shape *c = a->c;
    return fn(s, x, dtype, c->b, c->t, c->pos0, c->stride, c->col0, c->n_heads, c->hd, c->base,
              a->pairing);
}

/* x (fp32), its widening (fp32) and its bf16 bits, each rotated in place. */
static void run_rope(run *r, const rope_args *a, rope_fn fn) {
    const measure m = scaled(ROPE_TOL);
    call(r, rope_call(fn, r->s, a, updated(r, "x", a->x, a->n, m), LW_DTYPE_F32));
    call(r, rope_call(fn, r->s, a, updated(r, "x (widened)", a->xw, a->n, m), LW_DTYPE_F32));
    call(r, rope_call(fn, r->s, a, updated_bf16(r, "x (widened) bf16", a->x16, a->n, bf16_step(m)),
                      LW_DTYPE_BF16));
}

static void run_rope_forward(run *r, const void *p) { run_rope(r, p, lw_rope_forward); }
static void run_rope_backward(run *r, const void *p) { run_rope(r, p, lw_rope_backward); }

/* The float64 rotation of x by sign times the angles (the reference's own: base^(-2i/hd) as
 * exp(-2i/hd log base)), compared with got; the columns outside the heads as they were. */
static int64_t wrong_against_reference(const rope_args *a, const float *got, double sign) {
    const rope_shape *c = a->c;
    const int64_t half = c->hd / 2, width = c->n_heads * c->hd;
    int64_t wrong = 0;
    for (int64_t row = 0; row < c->b * c->t; row++) {
        const double pos = (double)(row % c->t + c->pos0);
        const float *x = a->x + row * c->stride;
        const float *g = got + row * c->stride;
        for (int64_t col = 0; col < c->stride; col++)
            if (col < c->col0 || col >= c->col0 + width) wrong += memcmp(&x[col], &g[col], 4) != 0;
        for (int64_t h = 0; h < c->n_heads; h++)
            for (int64_t i = 0; i < half; i++) {
                const double theta = exp(-(double)(2 * i) / (double)c->hd * log((double)c->base));
                const double cs = cos(pos * theta), sn = sign * sin(pos * theta);
                const int64_t o = c->col0 + h * c->hd;
                const int64_t ia = o + (a->pairing == LW_ROPE_HALVES ? i : 2 * i);
                const int64_t ib = o + (a->pairing == LW_ROPE_HALVES ? i + half : 2 * i + 1);
                const double xa = x[ia], xb = x[ib], size = fabs(xa) + fabs(xb);
                const double ya = xa * cs - xb * sn, yb = xb * cs + xa * sn;
                wrong += !(fabs(g[ia] - ya) <= 0x1p-24 * fabs(ya) + 1e-11 * size);
                wrong += !(fabs(g[ib] - yb) <= 0x1p-24 * fabs(yb) + 1e-11 * size);
            }
    }
    return wrong;
}

/* The backward's dx against finite differences of the CPU's forward kernel: for loss L = <w,
 * F(x)> (w the backward's dy), dL/dx_j = (L(x + h e_j) - L(x - h e_j)) / 2h. F is linear, so h =
 * 1 is exact but for the rounding of the pair j moves, the only outputs that differ (the sum
 * runs over the differences, in double): 1e-6 of the terms' size. Up to 16 columns. */
static int64_t wrong_against_differences(const rope_args *a, const float *dx) {
    const rope_shape *c = a->c;
    float *plus = cpu_array(a->n), *minus = cpu_array(a->n);
    int64_t wrong = 0;
    const int64_t width = c->n_heads * c->hd, heads = c->b * c->t * width;
    for (int64_t s = 0; s < 16 && heads > 0; s++) {
        const int64_t e = (s * 7919) % heads, row = e / width;
        const int64_t j = row * c->stride + c->col0 + e % width;
        memcpy(plus, a->x, sizeof(float) * (size_t)a->n);
        memcpy(minus, a->x, sizeof(float) * (size_t)a->n);
        plus[j] += 1.0f, minus[j] -= 1.0f;
        EXPECT_OK(rope_call(lw_rope_forward, NULL, a, plus, LW_DTYPE_F32));
        EXPECT_OK(rope_call(lw_rope_forward, NULL, a, minus, LW_DTYPE_F32));
        double diff = 0, size = 0;
        for (int64_t i = 0; i < a->n; i++)
            if (plus[i] != minus[i]) {
                diff += (double)a->x[i] * ((double)plus[i] - (double)minus[i]);
                size += fabs((double)a->x[i]) * (fabs(plus[i]) + fabs(minus[i]));
            }
        wrong += !(fabs(dx[j] - diff / 2) <= 1e-6 * size + 1e-30);
    }
    free(plus), free(minus);
    return wrong;
}

static void after_rope(const kernel_case *k, const run *r) {
    const rope_args *a = k->args;
    const bool forward = strcmp(k->kernel, "rope_forward") == 0;
    after_bf16_output(k, r, "x (widened)", a->n);
    if (!on_cpu(r->device)) return;
    const float *x = f32_of(r, "x");
    expect(k, r, x != NULL && wrong_against_reference(a, x, forward ? 1.0 : -1.0) == 0,
           forward
               ? "the rotation is the float64 reference's, the other columns untouched"
               : "the inverse rotation is the float64 reference's, the other columns untouched");
    if (!forward)
        expect(k, r, x != NULL && wrong_against_differences(a, x) == 0,
               "the backward is the forward's finite differences");
}

/* ---- refusals -------------------------------------------------------------------------------- */

static void rope_refusals(void) {
    float x[16] = {0};
    const lw_rope_pairing H = LW_ROPE_HALVES;
    EXPECT_FAILS(lw_rope_forward(NULL, x, LW_DTYPE_F32, 1, 1, 0, 16, 0, 1, 7, 1e4f, H),
                 LW_ERR_INVALID, "rope forward: the head dim hd = 7 must be even");
    EXPECT_FAILS(lw_rope_backward(NULL, x, LW_DTYPE_F32, 1, 1, 0, 16, 2, 2, 8, 1e4f, H),
                 LW_ERR_INVALID,
                 "rope backward: the heads' columns col0 + n_heads * hd = 2 + 2 * 8 "
                 "pass the row stride 16");
    EXPECT_FAILS(lw_rope_forward(NULL, x, LW_DTYPE_F32, 1, 1, 0, 16, 0, 2, 8, 0.0f, H),
                 LW_ERR_INVALID, "rope forward: base must be finite and > 0, got 0");
    EXPECT_FAILS(lw_rope_forward(NULL, x, LW_DTYPE_F32, 1, 1, 0, 16, 0, 2, 8, -1.0f, H),
                 LW_ERR_INVALID, "base must be finite and > 0, got -1");
    EXPECT_FAILS(
        lw_rope_forward(NULL, x, LW_DTYPE_F32, 1, 1, 0, 16, 0, 2, 8, 1e4f, (lw_rope_pairing)2),
        LW_ERR_INVALID, "rope forward: unknown pairing 2 (halves or interleaved)");
    EXPECT_FAILS(lw_rope_forward(NULL, x, LW_DTYPE_F64, 1, 1, 0, 16, 0, 2, 8, 1e4f, H),
                 LW_ERR_INVALID, "rope forward: activation of dtype f64: fp32 or bf16 only");
    EXPECT_FAILS(lw_rope_forward(NULL, x, LW_DTYPE_F32, 1, 0, 0, 16, 0, 2, 8, 1e4f, H),
                 LW_ERR_INVALID, "t (0) >= 1");
    EXPECT_FAILS(lw_rope_forward(NULL, x, LW_DTYPE_F32, 1, 1, -1, 16, 0, 2, 8, 1e4f, H),
                 LW_ERR_INVALID, "pos0 (-1) must be >= 0");
    /* no rows, or no heads: nothing to do, nothing read */
    EXPECT_OK(lw_rope_forward(NULL, NULL, LW_DTYPE_F32, 0, 4, 0, 16, 0, 2, 8, 1e4f, H));
    EXPECT_OK(lw_rope_forward(NULL, NULL, LW_DTYPE_F32, 4, 4, 0, 16, 0, 0, 8, 1e4f, H));
    lw_rope_pairing p = H;
    EXPECT_OK(lw_rope_pairing_from_name("interleaved", &p));
    EXPECT_EQ(p, LW_ROPE_INTERLEAVED);
    EXPECT_FAILS(lw_rope_pairing_from_name("neox", &p), LW_ERR_INVALID,
                 "unknown rope pairing 'neox' (one of halves, interleaved)");
}

/* ---- the cases, made and checked ------------------------------------------------------------ */

static void rope_cases(const char *kernel, run_fn fn, after_fn after) {
    if (strcmp(kernel, "rope_forward") == 0) rope_refusals();
    for (size_t s = 0; s < COUNT(rope_shapes); s++)
        for (int pairing = 0; pairing < 2; pairing++) {
            const rope_shape *c = &rope_shapes[s];
            rope_args a = {
                .c = c, .pairing = (lw_rope_pairing)pairing, .n = c->b * c->t * c->stride};
            snprintf(a.shape, sizeof a.shape,
                     "b %lld, t %lld from %lld, %lld heads of %lld at %lld "
                     "of %lld, %s",
                     (long long)c->b, (long long)c->t, (long long)c->pos0, (long long)c->n_heads,
                     (long long)c->hd, (long long)c->col0, (long long)c->stride,
                     lw_rope_pairing_name(a.pairing));
            a.x = scaled_random(a.n, 2.0f, 0.0f);
            a.x16 = round_copy(a.x, a.n, &a.xw);
            check(&(kernel_case){
                .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
            free(a.x), free(a.xw), free(a.x16);
        }
}

/* ---- the list's entries ---------------------------------------------------------------------- */

const kernel_entry case_rope_forward = {rope_cases, run_rope_forward, after_rope};
const kernel_entry case_rope_backward = {rope_cases, run_rope_backward, after_rope};
