/* moe.c: a mixture of experts' router (forward, backward) and load-balancing loss (forward,
 * backward) against the CPU. */
#include "harness.h"

/* ---- the cases ------------------------------------------------------------------------------- *
 * n tokens, e experts, top k; logits on a grid of quarters (ties) or not, or with NaN and
 * infinite ones among them (odd). */

static const struct {
    int64_t n, e, k;
    bool ties, odd;
} moe_shapes[] = {
    {1, 1, 1, false, false},
    {7, 5, 1, true, false}, /* k = 1: every weight is 1 */
    {33, 8, 2, true, false},
    {130, 13, 13, true, false}, /* k = e: every expert, ranked */
    {1000, 64, 4, true, false},
    {5000, 8, 2, false, false},  /* the GPU's aux statistics in 3 chunks */
    {150000, 8, 2, true, false}, /* 64 chunks, the most */
    {0, 4, 2, false, false},     /* no tokens */
    {4, 5, 2, false, true},      /* NaN and infinite logits */
};

/* ---- tolerances, runs and hooks -------------------------------------------------------------- *
 * Router forward: the experts are ranked by logit on both devices with the same loops, so they
 * agree exactly, ties included (logits on a grid of quarters: most rows tie), and NaN and inf
 * rows too (the first untaken candidate is taken whatever it holds). probs: CUDA's expf is within
 * 2 ulps, glibc's within 1; the row sum (double) and the scaling then move a probability by at
 * most ~5 ulps (6e-7 relative): 1e-6. weights = p / z, both carrying that error: 2e-6. Router
 * backward, from the CPU's probs and experts: the same float operations in the same order, no
 * FMA on either side: bit for bit. Aux loss: the column sums are taken in double in other orders
 * (chunks of rows, a tree in each) over positive values: far below 1e-10 of the loss. Its
 * backward: the same double expression, rounded once per column, added in float: bit for bit. */

typedef struct {
    char shape[80];
    int64_t n, e, k;
    float *logits, *probs, *weights, *dweights, *dprobs, *dl0;
    int32_t *experts;
} router_args;

static const float MOE_COEF = 0.01f;

static void run_router_forward(run *r, const void *p) {
    const router_args *a = p;
    const float *logits = input(r, a->logits, a->n * a->e);
    int32_t *experts = output_ids(r, "experts", a->n * a->k);
    float *weights = output(r, "weights", a->n * a->k, scaled(2e-6));
    float *probs = output(r, "probs", a->n * a->e, scaled(1e-6));
    r->nan_fed = any_nan(a->logits, a->n * a->e) || any_nan(a->probs, a->n * a->e);
    call(r, lw_moe_router_forward(r->s, experts, weights, probs, logits, a->n, a->e, a->k));
}

/* onto non-zero dlogits, with and without dprobs */
static void run_router_backward(run *r, const void *p) {
    const router_args *a = p;
    const int64_t ne = a->n * a->e;
    const float *dweights = input(r, a->dweights, a->n * a->k), *dprobs = input(r, a->dprobs, ne);
    const float *probs = input(r, a->probs, ne);
    const int32_t *experts = input_ids(r, a->experts, a->n * a->k);
    float *dl = accumulated(r, "dlogits", a->dl0, ne, bits());
    float *dl_alone = accumulated(r, "dlogits, no dprobs", a->dl0, ne, bits());
    r->nan_fed = any_nan(a->probs, ne);
    call(r, lw_moe_router_backward(r->s, dl, dweights, dprobs, probs, experts, a->n, a->e, a->k));
    call(r,
         lw_moe_router_backward(r->s, dl_alone, dweights, NULL, probs, experts, a->n, a->e, a->k));
}

static void run_aux_forward(run *r, const void *p) {
    const router_args *a = p;
    const float *probs = input(r, a->probs, a->n * a->e);
    const int32_t *experts = input_ids(r, a->experts, a->n * a->k);
    double loss = -1;
    r->nan_fed = any_nan(a->probs, a->n * a->e);
    call(r, lw_moe_aux_loss_forward(r->s, probs, experts, a->n, a->e, a->k, MOE_COEF, &loss));
    result_of(r, "loss", loss, relative(1e-10, 1e-300));
}

static void run_aux_backward(run *r, const void *p) {
    const router_args *a = p;
    const int32_t *experts = input_ids(r, a->experts, a->n * a->k);
    float *dprobs = accumulated(r, "dprobs", a->dl0, a->n * a->e, bits());
    call(r, lw_moe_aux_loss_backward(r->s, dprobs, experts, a->n, a->e, a->k, MOE_COEF, 0.5f));
}

/* coef e sum_j (count_j / (n k)) (col_j / n), in double: the CPU's, in another order */
static void after_aux_forward(const kernel_case *k, const run *r) {
    const router_args *a = k->args;
    if (!on_cpu(r->device) || a->n == 0 || any_nan(a->probs, a->n * a->e)) return;
    double total = 0;
    for (int64_t j = 0; j < a->e; j++) {
        double count = 0, col = 0;
        for (int64_t i = 0; i < a->n * a->k; i++)
            count += a->experts[i] == j;
        for (int64_t i = 0; i < a->n; i++)
            col += a->probs[i * a->e + j];
        total += count / (double)(a->n * a->k) * (col / (double)a->n);
    }
    const double want = MOE_COEF * (double)a->e * total, got = result_named(r, "loss");
    expect(k, r, fabs(got - want) <= 1e-12 * want, "the loss is the formula's, in double");
}

/* ---- the cases, made and checked ------------------------------------------------------------ */

static void router_cases(const char *kernel, run_fn fn, after_fn after) {
    for (size_t s = 0; s < COUNT(moe_shapes); s++) {
        router_args a = {.n = moe_shapes[s].n, .e = moe_shapes[s].e, .k = moe_shapes[s].k};
        const int64_t ne = a.n * a.e, nk = a.n * a.k;
        const bool odd = moe_shapes[s].odd;
        const char *kind = moe_shapes[s].ties ? ", ties" : odd ? ", NaN and inf" : "";
        snprintf(a.shape, sizeof a.shape, "n %lld, e %lld, k %lld%s", (long long)a.n,
                 (long long)a.e, (long long)a.k, kind);
        a.logits = scaled_random(ne, 3.0f, 0.0f);
        for (int64_t i = 0; i < ne && moe_shapes[s].ties; i++)
            a.logits[i] = roundf(a.logits[i] * 4.0f) / 4.0f;
        if (odd) { /* row 0 clean; a NaN first, a NaN later, +inf with a -inf */
            a.logits[5] = NAN, a.logits[13] = NAN, a.logits[17] = INFINITY;
            a.logits[19] = -INFINITY;
        }
        a.experts = malloc(sizeof(int32_t) * (size_t)(nk > 0 ? nk : 1));
        a.weights = cpu_array(nk), a.probs = cpu_array(ne);
        EXPECT_OK(
            lw_moe_router_forward(NULL, a.experts, a.weights, a.probs, a.logits, a.n, a.e, a.k));
        a.dweights = random_floats(nk), a.dprobs = random_floats(ne), a.dl0 = prefill(ne);
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        free(a.logits), free(a.experts), free(a.weights), free(a.probs), free(a.dweights);
        free(a.dprobs), free(a.dl0);
    }
}

/* ---- the list's entries ---------------------------------------------------------------------- */

const kernel_entry case_moe_router_forward = {router_cases, run_router_forward, NULL};
const kernel_entry case_moe_router_backward = {router_cases, run_router_backward, NULL};
const kernel_entry case_moe_aux_loss_forward = {router_cases, run_aux_forward, after_aux_forward};
const kernel_entry case_moe_aux_loss_backward = {router_cases, run_aux_backward, NULL};
