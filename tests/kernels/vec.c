/* vec.c: the vector kernels (norm statistics, the finite check, scale, add, axpy) against the
 * CPU. Element-wise kernels are single IEEE operations on both devices (the GPU's axpy rounds its
 * product and its sum apart, as the CPU does): bit for bit, NaN and inf passing as IEEE says. The
 * reductions sum in double. */
#include "harness.h"

/* ---- the cases ------------------------------------------------------------------------------- */

/* Element-wise: empty, one element, and a length no block size divides, the specials first. */
static const int64_t elementwise_sizes[] = {0, 1, 100003};

/* Norm statistics: every 7th element zero and the last -0 (a negative zero counts as zero); and
 * an inf, then a NaN, in a vector of 1000. */
static const struct {
    int64_t n, bad_at; /* bad_at -1: nothing bad */
    float bad;
} norm_stats_shapes[] = {
    {0, -1, 0.0f},         {1, -1, 0.0f},   {1000, -1, 0.0f}, {(1 << 20) + 3, -1, 0.0f},
    {1000, 500, INFINITY}, {1000, 17, NAN},
};

/* The finite check: each size with a bad value at the start, the middle and the end in turn. */
static const int64_t all_finite_sizes[] = {0, 1, 4099, (1 << 20) + 5};
static const struct {
    float bad;
    int where; /* 0: the first element, 1: the middle one, 2: the last */
} all_finite_bad[] = {{-INFINITY, 0}, {NAN, 1}, {INFINITY, 2}};

/* The values element-wise cases start x with, where n allows. */
static const float specials[] = {NAN, INFINITY, -INFINITY, -0.0f, 0.0f, 3e38f, -3e38f, 1e-30f};
enum { N_SPECIALS = sizeof specials / sizeof specials[0] };

/* ---- runs and hooks -------------------------------------------------------------------------- */

typedef struct {
    char shape[64];
    int64_t n;
    float *x, *y, *b; /* x: with the special values first where n allows */
    int64_t bad_at;   /* all_finite and norm_stats: where x holds bad (-1: nowhere) */
    float bad;
} vec_args;

static vec_args vec_new(int64_t n, bool with_specials) {
    vec_args a = {.n = n, .bad_at = -1};
    snprintf(a.shape, sizeof a.shape, "n %lld%s", (long long)n,
             with_specials && n >= N_SPECIALS ? ", NaN, inf, -0 first" : "");
    a.x = random_floats(n), a.y = random_floats(n), a.b = random_floats(n);
    if (with_specials && n >= N_SPECIALS) memcpy(a.x, specials, sizeof specials);
    return a;
}

static void vec_free(vec_args *a) { free(a->x), free(a->y), free(a->b); }

/* Twice into acc = {1.5, 2}: acc[0] += the sum of squares (in double on both: only the order of
 * the sums differs, ~1e-16 per term; squares rounded to float first would show as ~1e-8), acc[1]
 * += the zeros, a count below 2^22 that 1e-10 of leaves exact. An inf or a NaN must reach the
 * norm: the optimizer skips the step on it. */
static void run_norm_stats(run *r, const void *p) {
    const vec_args *a = p;
    const double start[2] = {1.5, 2.0};
    const float *x = input(r, a->x, a->n);
    double *acc = accumulated_f64(r, "acc", start, 2, relative(1e-10, 0.0));
    r->nan_fed = a->bad_at >= 0;
    call(r, lw_vec_norm_stats(r->s, x, a->n, acc));
    call(r, lw_vec_norm_stats(r->s, x, a->n, acc));
}

static void after_norm_stats(const kernel_case *k, const run *r) {
    const vec_args *a = k->args;
    const double *acc = got_of(r, "acc");
    if (a->bad_at >= 0) {
        expect(k, r, isnan(a->bad) ? isnan(acc[0]) : isinf(acc[0]), "a bad value reaches acc[0]");
        return;
    }
    if (!on_cpu(r->device)) return;
    double squares = 0, zeros = 0;
    for (int64_t i = 0; i < a->n; i++)
        squares += (double)a->x[i] * a->x[i], zeros += a->x[i] == 0.0f;
    /* positive terms: within (n - 1) ulps of double of the sum whatever the order */
    expect(k, r, fabs(acc[0] - (1.5 + 2 * squares)) <= 1e-10 * acc[0],
           "acc[0] is the sum of squares");
    expect(k, r, acc[1] == 2.0 + 2.0 * zeros, "acc[1] counts the zeros");
}

/* The flag is host memory: exact. A clean vector after one with a bad value: no flag left over. */
static void run_all_finite(run *r, const void *p) {
    const vec_args *a = p;
    float *x = cpu_array(a->n);
    memcpy(x, a->x, sizeof(float) * (size_t)a->n);
    if (a->bad_at >= 0) x[a->bad_at] = a->bad;
    const float *clean = input(r, a->x, a->n), *dirty = input(r, x, a->n);
    free(x);
    bool finite[3] = {false, true, false};
    call(r, lw_vec_all_finite(r->s, clean, a->n, &finite[0]));
    call(r, lw_vec_all_finite(r->s, dirty, a->n, &finite[1]));
    call(r, lw_vec_all_finite(r->s, clean, a->n, &finite[2]));
    result_of(r, "finite", finite[0], bits());
    result_of(r, "finite with the bad value", finite[1], bits());
    result_of(r, "finite again", finite[2], bits());
}

static void after_all_finite(const kernel_case *k, const run *r) {
    const vec_args *a = k->args;
    expect(k, r, result_named(r, "finite") == 1 && result_named(r, "finite again") == 1,
           "a finite vector is finite");
    expect(k, r, result_named(r, "finite with the bad value") == (a->bad_at < 0),
           "a bad value makes it not finite");
}

static void run_scale(run *r, const void *p) {
    const vec_args *a = p;
    float *x = updated(r, "x", a->x, a->n, bits());
    r->nan_fed = any_nan(a->x, a->n);
    call(r, lw_vec_scale(r->s, x, a->n, 0.37f));
}

static void run_add(run *r, const void *p) {
    const vec_args *a = p;
    const float *x = input(r, a->x, a->n), *b = input(r, a->b, a->n);
    float *y = output(r, "y", a->n, bits());
    float *in_place = updated(r, "y = a + b, y = a", a->x, a->n, bits());
    r->nan_fed = any_nan(a->x, a->n);
    call(r, lw_vec_add(r->s, y, x, b, a->n));
    call(r, lw_vec_add(r->s, in_place, in_place, b, a->n));
}

static void run_axpy(run *r, const void *p) {
    const vec_args *a = p;
    const float *x = input(r, a->x, a->n);
    float *y = accumulated(r, "y", a->y, a->n, bits());
    r->nan_fed = any_nan(a->x, a->n);
    call(r, lw_vec_axpy(r->s, y, 0.731f, x, a->n));
}

/* The CPU against the correctly rounded result: each float operation of a double one. */
static void after_elementwise(const kernel_case *k, const run *r) {
    const vec_args *a = k->args;
    if (!on_cpu(r->device)) return;
    const bool scale = strcmp(k->kernel, "vec_scale") == 0, add = strcmp(k->kernel, "vec_add") == 0;
    const float *got = f32_of(r, scale ? "x" : "y");
    int64_t wrong = 0;
    for (int64_t i = 0; i < a->n; i++) {
        const float want =
            scale ? (float)((double)a->x[i] * 0.37f)
            : add ? (float)((double)a->x[i] + a->b[i])
                  : (float)((double)a->y[i] + (double)(float)((double)0.731f * a->x[i]));
        wrong += memcmp(&want, &got[i], 4) != 0 && !(isnan(want) && isnan(got[i]));
    }
    expect(k, r, wrong == 0, "each element is the correctly rounded operation");
    if (add)
        expect(k, r, memcmp(got, f32_of(r, "y = a + b, y = a"), 4 * (size_t)a->n) == 0,
               "y may be a");
}

/* ---- the cases, made and checked ------------------------------------------------------------ */

static void norm_stats_cases(const char *kernel, run_fn fn, after_fn after) {
    for (size_t s = 0; s < COUNT(norm_stats_shapes); s++) {
        vec_args a = vec_new(norm_stats_shapes[s].n, false);
        for (int64_t i = 0; i < a.n; i += 7)
            a.x[i] = 0.0f;
        if (a.n > 0) a.x[a.n - 1] = -0.0f;
        if (norm_stats_shapes[s].bad_at >= 0) {
            a.bad_at = norm_stats_shapes[s].bad_at, a.bad = norm_stats_shapes[s].bad;
            a.x[a.bad_at] = a.bad;
            snprintf(a.shape, sizeof a.shape, "n 1000, %s at %lld", isnan(a.bad) ? "NaN" : "inf",
                     (long long)a.bad_at);
        }
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        vec_free(&a);
    }
}

static void all_finite_cases(const char *kernel, run_fn fn, after_fn after) {
    for (size_t s = 0; s < COUNT(all_finite_sizes); s++)
        for (size_t b = 0; b < (all_finite_sizes[s] > 0 ? COUNT(all_finite_bad) : 1); b++) {
            vec_args a = vec_new(all_finite_sizes[s], false);
            if (a.n > 0) {
                const int where = all_finite_bad[b].where;
                a.bad_at = where == 0 ? 0 : where == 1 ? a.n / 2 : a.n - 1;
                a.bad = all_finite_bad[b].bad;
                snprintf(a.shape, sizeof a.shape, "n %lld, %g at %lld", (long long)a.n,
                         (double)a.bad, (long long)a.bad_at);
            }
            check(&(kernel_case){
                .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
            vec_free(&a);
        }
}

static void elementwise_cases(const char *kernel, run_fn fn, after_fn after) {
    for (size_t s = 0; s < COUNT(elementwise_sizes); s++) {
        vec_args a = vec_new(elementwise_sizes[s], true);
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        vec_free(&a);
    }
}

/* ---- the list's entries ---------------------------------------------------------------------- */

const kernel_entry case_vec_norm_stats = {norm_stats_cases, run_norm_stats, after_norm_stats};
const kernel_entry case_vec_all_finite = {all_finite_cases, run_all_finite, after_all_finite};
const kernel_entry case_vec_scale = {elementwise_cases, run_scale, after_elementwise};
const kernel_entry case_vec_add = {elementwise_cases, run_add, after_elementwise};
const kernel_entry case_vec_axpy = {elementwise_cases, run_axpy, after_elementwise};
