/* lion.c: Lion's kernel against the CPU, bit for bit, and the CPU's (every device's) result
 * against the update evaluated in double. A call of one tensor goes through lw_lion_update; a
 * call of several through the device table's entry, which the public call cannot reach. */
#include "harness.h"

#include "device/device.h"

/* ---- the cases ------------------------------------------------------------------------------- *
 * Each case's tensors are runs of the same arrays (w, g, m of `length`), as the optimizer's are of
 * its buffers, with gaps between them that must stay as they were; each has its own learning
 * rate and weight decay. Sizes: none, one element, a length no block size divides, a tensor longer
 * than two of the CPU pool's grains (split over its threads), an empty one among others. */

/* One tensor: its run of the arrays, its learning rate and weight decay. */
typedef struct {
    int64_t offset, n;
    float lr, weight_decay;
} lion_piece;

typedef enum {
    PLAIN,
    ZERO_STEPS, /* every other element's interpolation exactly 0 (sign 0: no step from it) */
    NON_FINITE  /* NaN and infinite gradients at some elements */
} lion_special;

typedef struct {
    const char *what;
    int64_t length;
    float beta1, beta2, grad_scale;
    lion_special special;
    int32_t count; /* 1: through lw_lion_update */
    const lion_piece *t;
} lion_shape;

enum { MAX_PIECES = 4 };
static const lion_piece none[] = {{0, 0, 1e-3f, 0.0f}}, one[] = {{0, 1, 1e-3f, 0.0f}};
static const lion_piece whole[] = {{0, 100003, 3e-4f, 0.1f}};
static const lion_piece four[] = {{0, 7, 1e-2f, 0.0f},        /* gap of 3 after it */
                                  {10, 0, 1e-2f, 0.1f},       /* empty */
                                  {10, 131077, 1e-3f, 0.01f}, /* over two of the pool's grains */
                                  {131100, 68899, 5e-4f, 0.0f}};
static const lion_piece zeros[] = {{0, 500, 1e-2f, 0.1f}, {503, 497, 2e-2f, 0.0f}};
static const lion_piece two[] = {{0, 600, 1e-3f, 0.1f}, {600, 401, 1e-3f, 0.0f}};
static const lion_piece three[] = {
    {0, 1, 1e-2f, 0.0f}, {1, 2, 1e-2f, 0.5f}, {5, 4998, 1e-3f, 0.01f}};

static const lion_shape lion_shapes[] = {
    {"0, lw_lion_update", 0, 0.9f, 0.99f, 1.0f, PLAIN, 1, none},
    {"1, lw_lion_update", 1, 0.9f, 0.99f, 1.0f, PLAIN, 1, one},
    {"100003, lw_lion_update, decay", 100003, 0.9f, 0.99f, 0.7f, PLAIN, 1, whole},
    {"4 tensors: 7, 0, 131077, 68899", 200000, 0.9f, 0.99f, 1.0f, PLAIN, 4, four},
    {"2 tensors, exact zeros", 1000, 0.75f, 0.5f, 0.5f, ZERO_STEPS, 2, zeros},
    {"2 tensors, NaN and inf", 1001, 0.9f, 0.99f, 2.0f, NON_FINITE, 2, two},
    {"3 tensors, betas 0 and 0.3", 5003, 0.0f, 0.3f, 1.5f, PLAIN, 3, three},
};

typedef struct {
    const lion_shape *c;
    float *w, *g, *m; /* length each: the start */
} lion_args;

/* ---- runs ------------------------------------------------------------------------------------ *
 * The GPU evaluates the CPU's expression operation for operation, each rounded to nearest with no
 * FMA on either side, so every element must have the CPU's bits (NaN as any NaN). */

static lw_status lion_tensors(lw_stream *s, const lw_lion_options *o, const lwi_update_tensor *x,
                              int32_t count, float grad_scale) {
    /* a stand-in device without the kernel: the public call fails naming it, as the harness
     * expects of a device that lacks one */
    if (s->device->ops->lion == NULL) return lw_lion_update(s, o, NULL, NULL, NULL, 0, 0, 0, 1);
    return s->device->ops->lion(s, o, x, count, grad_scale);
}

static void run_lion(run *r, const void *p) {
    const lion_args *a = p;
    const lion_shape *c = a->c;
    lw_lion_options o = lw_lion_defaults();
    o.beta1 = c->beta1, o.beta2 = c->beta2;
    float *w = updated(r, "w", a->w, c->length, bits());
    float *m = updated(r, "m", a->m, c->length, bits());
    const float *g = input(r, a->g, c->length);
    r->nan_fed = c->special == NON_FINITE;
    lwi_update_tensor x[MAX_PIECES];
    for (int32_t k = 0; k < c->count; k++) {
        const lion_piece *t = &c->t[k];
        x[k] = (lwi_update_tensor){.w = w + t->offset,
                                   .g = g + t->offset,
                                   .m = m + t->offset,
                                   .n = t->n,
                                   .lr = t->lr,
                                   .weight_decay = t->weight_decay};
    }
    if (c->count == 1)
        call(r, lw_lion_update(r->s, &o, x[0].w, x[0].g, x[0].m, x[0].n, x[0].lr, x[0].weight_decay,
                               c->grad_scale));
    else
        call(r, lion_tensors(r->s, &o, x, c->count, c->grad_scale));
}

/* ---- the reference --------------------------------------------------------------------------- *
 * Each element's update in double from the same start, u = 2^-24 the float rounding:
 *   m: gs g, beta2 m, (1 - beta2) gs g and their sum, each rounded once (and 1 - beta2 itself
 *      when beta2 < 1/2), are within 4u (|beta2 m| + |(1 - beta2) gs g|) of the exact value;
 *   c: the same sum with beta1, within the same bound with beta1: where |c| is at most twice
 *      that, its float can have any sign (or be 0), so each of -1, 0, 1 is accepted; where c is
 *      exactly 0 (the ZERO_STEPS elements, whose products and sum are exact in float too), sign
 *      0 alone;
 *   w: wd w, s + wd w, lr (s + wd w) and w - that, each rounded once, are within
 *      u |w'| + u lr (2 |s| + 3 |wd w|) <= 4u (|w'| + lr (1 + wd |w|)) of the exact w'.
 * The steps (lr >= 3e-4) are far larger than those bounds (4u |w| <= 2.4e-7), so a wrong sign
 * fails. A non-finite reference must be met exactly (NaN by any NaN). */

static const double U = 1.0 / 16777216.0;

static bool close_to(double got, double want, double tol) {
    if (!isfinite(want)) return isnan(want) ? isnan(got) : got == want;
    return fabs(got - want) <= tol;
}

/* The piece that holds element i, or NULL in a gap. */
static const lion_piece *piece_of(const lion_shape *c, int64_t i) {
    for (int32_t k = 0; k < c->count; k++)
        if (i >= c->t[k].offset && i < c->t[k].offset + c->t[k].n) return &c->t[k];
    return NULL;
}

/* Whether element i's w and m after the run are the update's. */
static bool element_right(const lion_shape *c, const lion_piece *t, double w, double g, double m,
                          double got_w, double got_m) {
    const double b1 = c->beta1, b2 = c->beta2, gs = (double)c->grad_scale * g;
    const double lr = t->lr, wd = t->weight_decay;
    const double m_ref = b2 * m + (1 - b2) * gs;
    if (!close_to(got_m, m_ref, 4 * U * (fabs(b2 * m) + fabs((1 - b2) * gs)))) return false;
    const double cv = b1 * m + (1 - b1) * gs, band = 8 * U * (fabs(b1 * m) + fabs((1 - b1) * gs));
    const double sign = cv > 0 ? 1 : cv < 0 ? -1 : cv == 0 ? 0 : cv;
    const bool any_sign = cv != 0 && isfinite(cv) && fabs(cv) <= band;
    for (int s = -1; s <= 1; s++) {
        const double si = any_sign ? s : sign;
        const double w_ref = w - lr * (si + wd * w);
        if (close_to(got_w, w_ref, 4 * U * (fabs(w_ref) + lr * (1 + wd * fabs(w))))) return true;
        if (!any_sign) break;
    }
    return false;
}

static void after_lion(const kernel_case *k, const run *r) {
    const lion_args *a = k->args;
    const lion_shape *c = a->c;
    const float *w = f32_of(r, "w"), *m = f32_of(r, "m");
    int64_t wrong = 0, moved = 0, first = -1;
    for (int64_t i = 0; i < c->length; i++) {
        const lion_piece *t = piece_of(c, i);
        if (t == NULL) {
            moved += memcmp(&w[i], &a->w[i], 4) != 0 || memcmp(&m[i], &a->m[i], 4) != 0;
            continue;
        }
        if (!element_right(c, t, a->w[i], a->g[i], a->m[i], w[i], m[i])) {
            wrong++;
            if (first < 0) first = i;
        }
    }
    if (wrong > 0)
        failed(k, r,
               "%lld elements away from the update in double, the first %lld: w %.9g -> %.9g,"
               " m %.9g -> %.9g, g %.9g",
               (long long)wrong, (long long)first, (double)a->w[first], (double)w[first],
               (double)a->m[first], (double)m[first], (double)a->g[first]);
    else
        passed();
    expect(k, r, moved == 0, "the elements between the tensors are left as they were");
}

/* ---- the cases, made and checked ------------------------------------------------------------ */

/* ZERO_STEPS: m a multiple of 2^-10 and g = -6 m, so that with beta1 = 3/4 and grad_scale 1/2
 * beta1 m = 3/4 m and (1 - beta1) gs g = -3/4 m are exact and cancel to 0 in float as in double;
 * NON_FINITE: a NaN or an infinity of either sign every 97 elements. */
static void make_special(const lion_shape *c, float *g, float *m) {
    for (int64_t i = 0; i < c->length; i++) {
        if (c->special == ZERO_STEPS && i % 2 == 0) {
            m[i] = (float)(random_below(2001) - 1000) / 1024.0f;
            g[i] = -6.0f * m[i];
        }
        if (c->special == NON_FINITE && i % 97 == 5)
            g[i] = (i / 97) % 3 == 0 ? NAN : (i / 97) % 3 == 1 ? INFINITY : -INFINITY;
    }
}

static void lion_cases(const char *kernel, run_fn fn, after_fn after) {
    for (size_t s = 0; s < COUNT(lion_shapes); s++) {
        lion_args a = {.c = &lion_shapes[s]};
        a.w = random_floats(a.c->length);
        a.g = random_floats(a.c->length);
        a.m = scaled_random(a.c->length, 0.1f, 0.0f);
        make_special(a.c, a.g, a.m);
        check(&(kernel_case){
            .kernel = kernel, .shape = a.c->what, .fn = fn, .args = &a, .after = after});
        free(a.w), free(a.g), free(a.m);
    }
}

/* ---- the list's entries ---------------------------------------------------------------------- */

const kernel_entry core_lion = {lion_cases, run_lion, after_lion};
