/* gather.c: the row gather and the weighted combine (forward, backward) that move a mixture of
 * experts' tokens, against the CPU. */
#include "harness.h"

/* ---- the cases ------------------------------------------------------------------------------- *
 * m rows listed out of an array of nrows rows of c columns: random lists first. */

static const struct {
    int64_t m, c, nrows;
    const char *kind;
} rows_shapes[] = {
    {1, 1, 1, "random"},
    {300, 37, 50, "random, repeats"},
    {200, 300, 1000, "random, few repeats, 3 channel tiles"},
    {3000, 33, 70000, "random, rows past 2^16"},
    {0, 8, 10, "no rows listed"},
    {5, 0, 10, "no columns"},
};

/* A mixture of experts' dispatch order (dispatch_case): n tokens routed to the top k of e
 * experts, c columns; each token's row listed k times. */
static const struct {
    int64_t n, e, k, c;
} dispatch_shapes[] = {
    {1000, 8, 2, 100},
    {77, 5, 5, 129}, /* k = e: every token to every expert */
    {4096, 16, 1, 768},
};

/* ---- runs and hooks -------------------------------------------------------------------------- *
 * The gather, its backward, the combine and dsrc are the CPU's float operations in the CPU's
 * order (each destination row adds its sources in the order of the list): bit for bit. dw: the
 * dot product in double in another order, rounded once, then added in float: within an ulp of
 * the dot, 1e-6 of the values (1% of the largest below that: a dw can cancel). */

typedef struct {
    char shape[112];
    int64_t m, c, nrows;
    int32_t *rows;
    float *x, *src, *w, *dout, *dy, *dx0, *dsrc0, *dw0;
} rows_args;

static void run_gather_forward(run *r, const void *p) {
    const rows_args *a = p;
    const float *x = input(r, a->x, a->nrows * a->c);
    const int32_t *rows = input_ids(r, a->rows, a->m);
    float *out = output(r, "out", a->m * a->c, bits());
    call(r, lw_gather_forward(r->s, out, x, rows, a->m, a->c));
}

static void run_gather_backward(run *r, const void *p) {
    const rows_args *a = p;
    const float *dout = input(r, a->dout, a->m * a->c);
    const int32_t *rows = input_ids(r, a->rows, a->m);
    float *dx = accumulated(r, "dx", a->dx0, a->nrows * a->c, bits());
    call(r, lw_gather_backward(r->s, dx, dout, rows, a->m, a->c));
}

static void run_combine_forward(run *r, const void *p) {
    const rows_args *a = p;
    const float *src = input(r, a->src, a->m * a->c), *w = input(r, a->w, a->m);
    const int32_t *rows = input_ids(r, a->rows, a->m);
    float *y = accumulated(r, "y", a->dx0, a->nrows * a->c, bits());
    call(r, lw_combine_forward(r->s, y, src, w, rows, a->m, a->c));
}

/* both outputs, then each alone */
static void run_combine_backward(run *r, const void *p) {
    const rows_args *a = p;
    const int64_t mc = a->m * a->c;
    const float *dy = input(r, a->dy, a->nrows * a->c), *src = input(r, a->src, mc);
    const float *w = input(r, a->w, a->m);
    const int32_t *rows = input_ids(r, a->rows, a->m);
    float *dsrc = accumulated(r, "dsrc", a->dsrc0, mc, bits());
    float *dw = accumulated(r, "dw", a->dw0, a->m, scaled(1e-6));
    float *dsrc_alone = accumulated(r, "dsrc alone", a->dsrc0, mc, bits());
    float *dw_alone = accumulated(r, "dw alone", a->dw0, a->m, scaled(1e-6));
    call(r, lw_combine_backward(r->s, dsrc, dw, dy, src, w, rows, a->m, a->c));
    call(r, lw_combine_backward(r->s, dsrc_alone, NULL, dy, src, w, rows, a->m, a->c));
    call(r, lw_combine_backward(r->s, NULL, dw_alone, dy, src, w, rows, a->m, a->c));
}

/* The host's loops, float by float in the list's order, for the CPU; each output alone is the
 * same as both together on every device. */
static void after_rows(const kernel_case *k, const run *r) {
    const rows_args *a = k->args;
    const int64_t c = a->c;
    if (strcmp(k->kernel, "combine_backward") == 0) {
        expect(k, r,
               memcmp(f32_of(r, "dsrc"), f32_of(r, "dsrc alone"), 4 * (size_t)(a->m * c)) == 0 &&
                   memcmp(f32_of(r, "dw"), f32_of(r, "dw alone"), 4 * (size_t)a->m) == 0,
               "dsrc and dw alone are as together, bit for bit");
        return;
    }
    if (!on_cpu(r->device)) return;
    const bool gather = strcmp(k->kernel, "gather_forward") == 0;
    const bool combine = strcmp(k->kernel, "combine_forward") == 0;
    const int64_t n = gather ? a->m * c : a->nrows * c;
    float *want = cpu_array(n);
    if (!gather) memcpy(want, a->dx0, 4 * (size_t)n);
    for (int64_t i = 0; i < a->m; i++)
        for (int64_t j = 0; j < c; j++) {
            const int64_t at = (int64_t)a->rows[i] * c + j;
            if (gather)
                want[i * c + j] = a->x[at];
            else if (combine)
                want[at] += a->w[i] * a->src[i * c + j];
            else
                want[at] += a->dout[i * c + j];
        }
    const char *out = gather ? "out" : combine ? "y" : "dx";
    expect(k, r, memcmp(f32_of(r, out), want, 4 * (size_t)n) == 0, "the host's loops, bit for bit");
    free(want);
}

/* ---- the cases, made and checked ------------------------------------------------------------ */

typedef struct { /* a family's kernel, its run function and hook */
    const char *kernel;
    run_fn fn;
    after_fn after;
} rows_kernel;

static void rows_case(const rows_kernel *k, int64_t m, int64_t c, int64_t nrows,
                      const int32_t *given, const char *kind) {
    rows_args a = {.m = m, .c = c, .nrows = nrows};
    snprintf(a.shape, sizeof a.shape, "m %lld, c %lld, %lld rows, %s", (long long)m, (long long)c,
             (long long)nrows, kind);
    a.rows = random_ids(m, nrows);
    if (given != NULL) memcpy(a.rows, given, sizeof(int32_t) * (size_t)m);
    if (given == NULL && nrows > 65536)
        for (int64_t i = 0; i < m; i += 3)
            a.rows[i] = 65535 + (int32_t)(i % 5); /* repeats past 2^16: both passes of the sort */
    a.x = random_floats(nrows * c), a.src = random_floats(m * c), a.w = random_floats(m);
    a.dout = random_floats(m * c), a.dy = random_floats(nrows * c);
    a.dx0 = prefill(nrows * c), a.dsrc0 = prefill(m * c), a.dw0 = prefill(m);
    check(&(kernel_case){
        .kernel = k->kernel, .shape = a.shape, .fn = k->fn, .args = &a, .after = k->after});
    free(a.rows), free(a.x), free(a.src), free(a.w), free(a.dout), free(a.dy), free(a.dx0);
    free(a.dsrc0), free(a.dw0);
}

/* A mixture of experts' dispatch order: the (token, slot) pairs of a routing sorted by expert
 * (stable), rows[i] = the token of the i-th: each token's row repeats k times. */
static void dispatch_case(const rows_kernel *kernel, int64_t n, int64_t e, int64_t k, int64_t c) {
    float *logits = random_floats(n * e), *weights = cpu_array(n * k), *probs = cpu_array(n * e);
    int32_t *experts = malloc(sizeof(int32_t) * (size_t)(n * k));
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)(n * k));
    EXPECT_OK(lw_moe_router_forward(NULL, experts, weights, probs, logits, n, e, k));
    int64_t at = 0;
    for (int32_t j = 0; j < e; j++)
        for (int64_t i = 0; i < n * k; i++)
            if (experts[i] == j) rows[at++] = (int32_t)(i / k);
    EXPECT(at == n * k);
    rows_case(kernel, n * k, c, n, rows, "dispatch order");
    free(logits), free(weights), free(probs), free(experts), free(rows);
}

static void rows_cases(const char *kernel, run_fn fn, after_fn after) {
    const rows_kernel k = {kernel, fn, after};
    for (size_t s = 0; s < COUNT(rows_shapes); s++)
        rows_case(&k, rows_shapes[s].m, rows_shapes[s].c, rows_shapes[s].nrows, NULL,
                  rows_shapes[s].kind);
    for (size_t s = 0; s < COUNT(dispatch_shapes); s++)
        dispatch_case(&k, dispatch_shapes[s].n, dispatch_shapes[s].e, dispatch_shapes[s].k,
                      dispatch_shapes[s].c);
}

/* ---- the list's entries ---------------------------------------------------------------------- */

const kernel_entry case_gather_forward = {rows_cases, run_gather_forward, after_rows};
const kernel_entry case_gather_backward = {rows_cases, run_gather_backward, after_rows};
const kernel_entry case_combine_forward = {rows_cases, run_combine_forward, after_rows};
const kernel_entry case_combine_backward = {rows_cases, run_combine_backward, after_rows};
