/* adamw.c: AdamW's kernel against the CPU, through lw_adamw_update. */
#include "harness.h"

/* ---- the cases ------------------------------------------------------------------------------- *
 * Empty, one element, and a length no block size divides; five steps each. */

static const int64_t adamw_sizes[] = {0, 1, 100003};

/* ---- tolerances and runs --------------------------------------------------------------------- *
 * Five steps with new gradients each. Per element a handful of
 * float operations, a sqrt and a division (correctly rounded on both unless fast math) and the
 * bias corrections, which the caller computes in double and either side may round at another
 * point: a few ulps per step, compounding over the steps in m, v and w. */
typedef struct {
    char shape[32];
    int64_t n;
    float *w, *g[5], *zeros; /* zeros: m and v at the start */
} adamw_args;

static void run_adamw(run *r, const void *p) {
    const adamw_args *a = p;
    const lw_adamw_options o = lw_adamw_defaults();
    float *w = updated(r, "w", a->w, a->n, relative(1e-6, 1.0));
    float *m = updated(r, "m", a->zeros, a->n, relative(1e-5, 1e-3));
    float *v = updated(r, "v", a->zeros, a->n, relative(1e-5, 1e-6));
    for (int64_t t = 1; t <= 5; t++)
        call(r, lw_adamw_update(r->s, &o, w, input(r, a->g[t - 1], a->n), m, v, a->n, t, 0.01f,
                                0.1f, 0.7f));
}

/* ---- the cases, made and checked ------------------------------------------------------------ */

static void adamw_cases(const char *kernel, run_fn fn, after_fn after) {
    for (size_t s = 0; s < COUNT(adamw_sizes); s++) {
        adamw_args a = {.n = adamw_sizes[s]};
        snprintf(a.shape, sizeof a.shape, "n %lld, 5 steps", (long long)a.n);
        a.w = random_floats(a.n), a.zeros = calloc((size_t)(a.n > 0 ? a.n : 1), sizeof(float));
        for (int t = 0; t < 5; t++)
            a.g[t] = random_floats(a.n);
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        free(a.w), free(a.zeros);
        for (int t = 0; t < 5; t++)
            free(a.g[t]);
    }
}

/* ---- the list's entries ---------------------------------------------------------------------- */

const kernel_entry core_adamw = {adamw_cases, run_adamw, NULL};
