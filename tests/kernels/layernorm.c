/* layernorm.c: the layer norm (forward, backward) and the norm fused with the residual add
 * against the CPU; the fused kernels also against the two kernels they replace. */
#include "harness.h"

/* ---- the cases ------------------------------------------------------------------------------- *
 * n rows of c channels, with the norm's bias (beta) or not. */

static const struct {
    int64_t n, c;
    bool beta;
} layernorm_shapes[] = {
    {1, 1, true},      /* variance 0: rstd = 1 / sqrt(eps) */
    {1, 768, true},    /* one row of GPT-2's width */
    {37, 100, false},  /* no beta */
    {512, 1536, true}, /* wide rows */
    {4096, 33, true},  /* many short rows: dg and dbeta summed over 4096 */
    {0, 16, true},     /* no rows */
};

/* ---- runs and hooks -------------------------------------------------------------------------- *
 * Mean and variance are summed in double on both devices (in other orders) and rounded to float
 * once: they differ at most where a double sum straddles a float rounding point, an ulp; y and
 * dx are then the same float operations (no FMA on either side) on values an ulp apart at most:
 * 1e-6 and 1e-5 (dx subtracts two row means, which can cancel). dg and dbeta: the CPU adds the
 * rows into them in float, one after another (error growing with n), the GPU sums each column in
 * double first: 1e-4 up to n = 4096. The backward takes the CPU's mean and rstd on every device,
 * so that it alone is compared. The norm fused with the residual add (add_layernorm_*) runs on
 * the same cases, beside the two kernels it replaces on the same device: the same results, bit
 * for bit, on every device (the sum is one rounded addition either way, and the norm's
 * arithmetic the same). */

typedef struct {
    char shape[64];
    int64_t n, c;
    bool beta;
    float *x, *g, *b, *mean, *rstd, *dy, *dx0, *dg0, *db0;
    float *r, *dres; /* the fused kernels' other row of the sum, and the stream's gradient */
} ln_args;

static const float LN_EPS = 1e-5f;

static void run_layernorm_forward(run *r, const void *p) {
    const ln_args *a = p;
    const int64_t nc = a->n * a->c;
    const float *x = input(r, a->x, nc), *g = input(r, a->g, a->c);
    const float *b = a->beta ? input(r, a->b, a->c) : NULL;
    float *y = output(r, "y", nc, scaled(1e-5));
    float *mean = output(r, "mean", a->n, scaled(1e-6));
    float *rstd = output(r, "rstd", a->n, scaled(1e-6));
    call(r, lw_layernorm_forward(r->s, y, LW_DTYPE_F32, mean, rstd, x, g, b, a->n, a->c, LN_EPS));
    /* the same in bf16 (its statistics again, into scratch) */
    uint16_t *y16 = output_bf16_values(r, "y bf16", nc, bf16_step(scaled(1e-5)));
    call(r, lw_layernorm_forward(r->s, y16, LW_DTYPE_BF16, scratch(r, a->n), scratch(r, a->n), x, g,
                                 b, a->n, a->c, LN_EPS));
}

static void after_layernorm_forward(const kernel_case *k, const run *r) {
    const ln_args *a = k->args;
    after_bf16_output(k, r, "y", a->n * a->c);
}

static void run_layernorm_backward(run *r, const void *p) {
    const ln_args *a = p;
    const int64_t nc = a->n * a->c;
    const float *dy = input(r, a->dy, nc), *x = input(r, a->x, nc), *g = input(r, a->g, a->c);
    const float *mean = input(r, a->mean, a->n), *rstd = input(r, a->rstd, a->n);
    float *dx = accumulated(r, "dx", a->dx0, nc, scaled(1e-5));
    float *dg = accumulated(r, "dg", a->dg0, a->c, scaled(1e-4));
    float *db = a->beta ? accumulated(r, "dbeta", a->db0, a->c, scaled(1e-4)) : NULL;
    call(r, lw_layernorm_backward(r->s, dx, dg, db, dy, x, g, mean, rstd, a->n, a->c));
}

/* The fused forward, then on the same device lw_vec_add and lw_layernorm_forward into the
 * outputs named "... (separate)". */
static void run_add_layernorm_forward(run *r, const void *p) {
    const ln_args *a = p;
    const int64_t nc = a->n * a->c;
    const float *x = input(r, a->x, nc), *res = input(r, a->r, nc), *g = input(r, a->g, a->c);
    const float *b = a->beta ? input(r, a->b, a->c) : NULL;
    for (int separate = 0; separate < 2; separate++) {
        float *sum = output(r, separate ? "sum (separate)" : "sum", nc, bits());
        float *y = output(r, separate ? "y (separate)" : "y", nc, scaled(1e-5));
        float *mean = output(r, separate ? "mean (separate)" : "mean", a->n, scaled(1e-6));
        float *rstd = output(r, separate ? "rstd (separate)" : "rstd", a->n, scaled(1e-6));
        if (!separate) {
            call(r, lw_add_layernorm_forward(r->s, sum, y, LW_DTYPE_F32, mean, rstd, x, res, g, b,
                                             a->n, a->c, LN_EPS));
            uint16_t *y16 = output_bf16_values(r, "y bf16", nc, bf16_step(scaled(1e-5)));
            call(r, lw_add_layernorm_forward(r->s, scratch(r, nc), y16, LW_DTYPE_BF16,
                                             scratch(r, a->n), scratch(r, a->n), x, res, g, b, a->n,
                                             a->c, LN_EPS));
            /* the sum in place of a (lw.h allows it): a copy of x becomes the sum */
            float *in_place = updated(r, "sum in place", a->x, nc, bits());
            float *y_in = output(r, "y in place", nc, scaled(1e-5));
            call(r, lw_add_layernorm_forward(r->s, in_place, y_in, LW_DTYPE_F32, scratch(r, a->n),
                                             scratch(r, a->n), in_place, res, g, b, a->n, a->c,
                                             LN_EPS));
        } else {
            call(r, lw_vec_add(r->s, sum, x, res, nc));
            call(r, lw_layernorm_forward(r->s, y, LW_DTYPE_F32, mean, rstd, sum, g, b, a->n, a->c,
                                         LN_EPS));
        }
    }
}

/* The fused backward, then on the same device lw_vec_add and lw_layernorm_backward. */
static void run_add_layernorm_backward(run *r, const void *p) {
    const ln_args *a = p;
    const int64_t nc = a->n * a->c;
    const float *dy = input(r, a->dy, nc), *x = input(r, a->x, nc), *g = input(r, a->g, a->c);
    const float *dres = input(r, a->dres, nc);
    const float *mean = input(r, a->mean, a->n), *rstd = input(r, a->rstd, a->n);
    for (int separate = 0; separate < 2; separate++) {
        float *dx = accumulated(r, separate ? "dx (separate)" : "dx", a->dx0, nc, scaled(1e-5));
        float *dg = accumulated(r, separate ? "dg (separate)" : "dg", a->dg0, a->c, scaled(1e-4));
        float *db = a->beta ? accumulated(r, separate ? "dbeta (separate)" : "dbeta", a->db0, a->c,
                                          scaled(1e-4))
                            : NULL;
        if (!separate) {
            call(r, lw_add_layernorm_backward(r->s, dx, dg, db, dres, dy, x, g, mean, rstd, a->n,
                                              a->c));
        } else {
            call(r, lw_vec_add(r->s, dx, dx, dres, nc));
            call(r, lw_layernorm_backward(r->s, dx, dg, db, dy, x, g, mean, rstd, a->n, a->c));
        }
    }
}

/* The fused kernels' outputs are their separate kernels', bit for bit, on every device. */
static void after_add_layernorm(const kernel_case *k, const run *r) {
    const ln_args *a = k->args;
    const bool forward = strcmp(k->kernel, "add_layernorm_forward") == 0;
    if (forward) {
        after_bf16_output(k, r, "y", a->n * a->c);
        const float *sum = f32_of(r, "sum"), *in_place = f32_of(r, "sum in place");
        const float *y = f32_of(r, "y"), *y_in = f32_of(r, "y in place");
        const size_t bytes = 4 * (size_t)(a->n * a->c);
        expect(k, r,
               sum && in_place && y && y_in && memcmp(sum, in_place, bytes) == 0 &&
                   memcmp(y, y_in, bytes) == 0,
               "the sum written over a gives what a sum apart gives, bit for bit");
    }
    const char *names[] = {forward ? "sum" : "dx", forward ? "y" : "dg",
                           forward ? "mean" : (a->beta ? "dbeta" : NULL), forward ? "rstd" : NULL};
    const int64_t sizes[] = {a->n * a->c, forward ? a->n * a->c : a->c, forward ? a->n : a->c,
                             a->n};
    for (int i = 0; i < 4; i++) {
        if (names[i] == NULL) continue;
        char twin[48];
        snprintf(twin, sizeof twin, "%s (separate)", names[i]);
        const float *fused = f32_of(r, names[i]), *separate = f32_of(r, twin);
        expect(k, r,
               fused != NULL && separate != NULL &&
                   memcmp(fused, separate, 4 * (size_t)sizes[i]) == 0,
               forward ? "the fused forward is the two kernels it replaces, bit for bit"
                       : "the fused backward is the two kernels it replaces, bit for bit");
    }
}

/* ---- the cases, made and checked ------------------------------------------------------------ */

static void layernorm_cases(const char *kernel, run_fn fn, after_fn after) {
    for (size_t s = 0; s < COUNT(layernorm_shapes); s++) {
        ln_args a = {.n = layernorm_shapes[s].n,
                     .c = layernorm_shapes[s].c,
                     .beta = layernorm_shapes[s].beta};
        const int64_t nc = a.n * a.c;
        snprintf(a.shape, sizeof a.shape, "n %lld, c %lld%s", (long long)a.n, (long long)a.c,
                 a.beta ? ", beta" : "");
        a.x = scaled_random(nc, 1.5f, 3.0f); /* a mean far from 0: the two-pass variance */
        a.g = scaled_random(a.c, 0.5f, 1.0f), a.b = random_floats(a.c);
        a.mean = cpu_array(a.n), a.rstd = cpu_array(a.n);
        float *y = cpu_array(nc);
        EXPECT_OK(lw_layernorm_forward(NULL, y, LW_DTYPE_F32, a.mean, a.rstd, a.x, a.g,
                                       a.beta ? a.b : NULL, a.n, a.c, LN_EPS));
        a.dy = random_floats(nc), a.dx0 = prefill(nc), a.dg0 = prefill(a.c), a.db0 = prefill(a.c);
        a.r = random_floats(nc), a.dres = random_floats(nc);
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        free(a.x), free(a.g), free(a.b), free(a.mean), free(a.rstd), free(y), free(a.dy);
        free(a.dx0), free(a.dg0), free(a.db0), free(a.r), free(a.dres);
    }
}

/* ---- the list's entries ---------------------------------------------------------------------- */

const kernel_entry case_layernorm_forward = {layernorm_cases, run_layernorm_forward,
                                             after_layernorm_forward};
const kernel_entry case_layernorm_backward = {layernorm_cases, run_layernorm_backward, NULL};
const kernel_entry case_add_layernorm_forward = {layernorm_cases, run_add_layernorm_forward,
                                                 after_add_layernorm};
const kernel_entry case_add_layernorm_backward = {layernorm_cases, run_add_layernorm_backward,
                                                  after_add_layernorm};
