/* test_nn_moe.c: a mixture of experts' router (lw_moe_router_forward / _backward) and its
 * load-balancing loss (lw_moe_aux_loss_forward / _backward): a hand-computed example with ties,
 * the forward against a float64 loop, the gradients against finite differences (through the
 * renormalised weights, the probabilities, and the aux loss through the router), the
 * accumulate (+=) contract, k distinct experts per token however the logits tie, and the sizes
 * refused. */
#include "nn_check.h"

#include <stdio.h>
#include <stdlib.h>

static void check_tol(const char *what, int64_t n, int64_t e, int64_t k, double err, double tol) {
    nn_within(err, tol, "moe n=%lld e=%lld k=%lld %s", (long long)n, (long long)e, (long long)k,
              what);
}

/* 2 tokens, 4 experts, top-2, worked by hand. Row 0 ties logits 1 and 2 at the top: both are
 * taken, the lower index first, each weighing 1/2. Row 1: experts 2 and 3, weights e^2 / (e^2 +
 * e^1) and e^1 / (e^2 + e^1). Row 2 ties three logits for the second place: expert 0 wins. */
static void test_hand_example(void) {
    const float logits[12] = {1, 3, 3, 0, 0, -1, 2, 1, 2, 5, 2, 2};
    int32_t experts[6];
    float weights[6], probs[12];
    CHECK_OK(lw_moe_router_forward(NULL, experts, weights, probs, logits, 3, 4, 2));
    CHECK_EQ(experts[0], 1);
    CHECK_EQ(experts[1], 2);
    CHECK_EQ(experts[2], 2);
    CHECK_EQ(experts[3], 3);
    CHECK_EQ(experts[4], 1);
    CHECK_EQ(experts[5], 0);
    CHECK(fabs(weights[0] - 0.5) < 1e-7 && fabs(weights[1] - 0.5) < 1e-7);
    const double w2 = 1.0 / (1.0 + exp(-1.0)); /* e^2 / (e^2 + e^1) */
    CHECK(fabs(weights[2] - w2) < 1e-6);
    CHECK(fabs(weights[3] - (1.0 - w2)) < 1e-6);
    CHECK(fabs(weights[4] - 1.0 / (1.0 + exp(-3.0))) < 1e-6);
    const double z0 = exp(1.0) + 2 * exp(3.0) + 1.0;
    CHECK(fabs(probs[0] - exp(1.0) / z0) < 1e-7 && fabs(probs[1] - exp(3.0) / z0) < 1e-7);
    CHECK(fabs(probs[3] - 1.0 / z0) < 1e-7);

    /* the aux loss by hand for rows 0 and 1: f = (0, 1, 2, 1) / 4, L = coef e sum f_j P_j */
    double loss = 0, want = 0;
    const double f[4] = {0, 0.25, 0.5, 0.25};
    for (int j = 0; j < 4; j++)
        want += f[j] * (probs[j] + probs[4 + j]) / 2;
    want *= 0.1 * 4;
    CHECK_OK(lw_moe_aux_loss_forward(NULL, probs, experts, 2, 4, 2, 0.1f, &loss));
    CHECK(fabs(loss - want) < 1e-7);
    /* its gradient: coef e f_j / n in every row's column j, times the scale */
    float dprobs[8] = {0};
    CHECK_OK(lw_moe_aux_loss_backward(NULL, dprobs, experts, 2, 4, 2, 0.1f, 2.0f));
    for (int j = 0; j < 4; j++) {
        CHECK(fabs(dprobs[j] - 2.0 * 0.1 * 4 * f[j] / 2) < 1e-7);
        CHECK(dprobs[4 + j] == dprobs[j]);
    }
}

typedef struct {
    float *logits, *probs, *weights, *rw, *rp;
    int32_t *experts;
    int64_t n, e, k;
    float coef;
    int what; /* 0: sum weights rw + probs rp; 1: the aux loss */
} ctx_t;

static double loss(void *p) {
    ctx_t *x = p;
    CHECK_OK(
        lw_moe_router_forward(NULL, x->experts, x->weights, x->probs, x->logits, x->n, x->e, x->k));
    if (x->what == 1) {
        double l = 0;
        CHECK_OK(
            lw_moe_aux_loss_forward(NULL, x->probs, x->experts, x->n, x->e, x->k, x->coef, &l));
        return l;
    }
    return nn_dot(x->weights, x->rw, x->n * x->k) +
           (x->rp ? nn_dot(x->probs, x->rp, x->n * x->e) : 0.0);
}

/* Logits whose values within a row are at least 0.2 apart (a shuffled grid plus small noise),
 * so the finite differences never change the top-k choice. */
static void separated_logits(float *l, int64_t n, int64_t e) {
    for (int64_t i = 0; i < n; i++) {
        for (int64_t j = 0; j < e; j++)
            l[i * e + j] = 0.3f * (float)j + nn_rand(0.05f);
        for (int64_t j = e - 1; j > 0; j--) { /* Fisher-Yates */
            int64_t r = (int64_t)((nn_rand(1.0f) + 1.0f) * 0.5f * (float)(j + 1));
            if (r > j) r = j;
            float t = l[i * e + j];
            l[i * e + j] = l[i * e + r], l[i * e + r] = t;
        }
    }
}

static void test_shape(int64_t n, int64_t e, int64_t k) {
    ctx_t x = {nn_alloc(n * e),
               nn_alloc(n * e),
               nn_alloc(n * k),
               nn_alloc(n * k),
               nn_alloc(n * e),
               malloc(sizeof(int32_t) * (size_t)(n * k)),
               n,
               e,
               k,
               0.05f,
               0};
    separated_logits(x.logits, n, e);
    nn_fill(x.rw, n * k, 1.0f);
    nn_fill(x.rp, n * e, 1.0f);

    /* (a) forward against double: the softmax, the top-k by value, the renormalised weights */
    CHECK_OK(lw_moe_router_forward(NULL, x.experts, x.weights, x.probs, x.logits, n, e, k));
    double worst_p = 0, worst_w = 0;
    int order_ok = 1;
    for (int64_t i = 0; i < n; i++) {
        const float *l = x.logits + i * e;
        double m = l[0], z = 0;
        for (int64_t j = 1; j < e; j++)
            m = fmax(m, l[j]);
        for (int64_t j = 0; j < e; j++)
            z += exp(l[j] - m);
        for (int64_t j = 0; j < e; j++)
            worst_p = fmax(worst_p, fabs(x.probs[i * e + j] - exp(l[j] - m) / z));
        double top = 0;
        for (int64_t s = 0; s < k; s++)
            top += exp(l[x.experts[i * k + s]] - m) / z;
        for (int64_t s = 0; s < k; s++) {
            int32_t ex = x.experts[i * k + s];
            order_ok &= ex >= 0 && ex < e;
            if (s > 0) order_ok &= l[ex] < l[x.experts[i * k + s - 1]];
            /* every expert not chosen ranks below the last chosen */
            worst_w = fmax(worst_w, fabs(x.weights[i * k + s] - exp(l[ex] - m) / z / top));
        }
        for (int64_t j = 0; j < e; j++) {
            int chosen = 0;
            for (int64_t s = 0; s < k; s++)
                chosen |= x.experts[i * k + s] == j;
            if (!chosen) order_ok &= l[j] < l[x.experts[i * k + k - 1]];
        }
    }
    CHECK(order_ok);
    check_tol("forward probs", n, e, k, worst_p, 1e-6);
    check_tol("forward weights", n, e, k, worst_w, 2e-6);

    /* (b) the router's backward against central differences of sum w rw + sum p rp; the top-k
     * set is fixed within eps, so the loss is smooth there. eps = 1e-2 on values O(1): the
     * float32 rounding of the loss over 2 eps is ~1e-5 (measured); 5e-4 leaves a wide margin while
     * a wrong term (a missed renormalisation, the softmax Jacobian) is off by O(0.1). */
    float *dl = nn_alloc(n * e);
    CHECK_OK(lw_moe_router_forward(NULL, x.experts, x.weights, x.probs, x.logits, n, e, k));
    CHECK_OK(lw_moe_router_backward(NULL, dl, x.rw, x.rp, x.probs, x.experts, n, e, k));
    check_tol("fd dlogits (weights and probs)", n, e, k,
              nn_fd_worst(x.logits, dl, n * e, loss, &x, 1e-2f, 300), 5e-4);
    /* without dprobs: only the weights' gradient */
    float *dl_w = nn_alloc(n * e), *rp = x.rp;
    x.rp = NULL;
    CHECK_OK(lw_moe_router_forward(NULL, x.experts, x.weights, x.probs, x.logits, n, e, k));
    CHECK_OK(lw_moe_router_backward(NULL, dl_w, x.rw, NULL, x.probs, x.experts, n, e, k));
    check_tol("fd dlogits (weights only)", n, e, k,
              nn_fd_worst(x.logits, dl_w, n * e, loss, &x, 1e-2f, 300), 5e-4);
    x.rp = rp;

    /* (c) the aux loss through the router: its dprobs fed to the router's backward with zero
     * dweights is the gradient w.r.t. the logits, the assignment counts held constant (they
     * are, within eps) */
    float *dp = nn_alloc(n * e), *zero_w = nn_alloc(n * k), *dl_aux = nn_alloc(n * e);
    CHECK_OK(lw_moe_router_forward(NULL, x.experts, x.weights, x.probs, x.logits, n, e, k));
    CHECK_OK(lw_moe_aux_loss_backward(NULL, dp, x.experts, n, e, k, x.coef, 1.0f));
    CHECK_OK(lw_moe_router_backward(NULL, dl_aux, zero_w, dp, x.probs, x.experts, n, e, k));
    x.what = 1;
    check_tol("fd dlogits (aux loss)", n, e, k,
              nn_fd_worst(x.logits, dl_aux, n * e, loss, &x, 1e-2f, 300), 1e-4);
    x.what = 0;

    /* (d) the aux loss forward against double, and linear in probs (experts fixed): its
     * backward is the exact slope */
    double l = 0, want = 0;
    CHECK_OK(lw_moe_aux_loss_forward(NULL, x.probs, x.experts, n, e, k, x.coef, &l));
    for (int64_t j = 0; j < e; j++) {
        double f = 0, pm = 0;
        for (int64_t a = 0; a < n * k; a++)
            f += x.experts[a] == j;
        for (int64_t i = 0; i < n; i++)
            pm += x.probs[i * e + j];
        want += f / (double)(n * k) * pm / (double)n;
    }
    want *= (double)x.coef * (double)e;
    check_tol("aux forward", n, e, k, fabs(l - want), 1e-9);

    /* (e) accumulate: into random contents, pre + g */
    float *pre = nn_alloc(n * e), *acc = nn_alloc(n * e);
    nn_fill(pre, n * e, 1.0f);
    memcpy(acc, pre, sizeof(float) * (size_t)(n * e));
    CHECK_OK(lw_moe_router_forward(NULL, x.experts, x.weights, x.probs, x.logits, n, e, k));
    CHECK_OK(lw_moe_router_backward(NULL, acc, x.rw, x.rp, x.probs, x.experts, n, e, k));
    check_tol("accumulate dlogits", n, e, k, nn_accumulate_error(acc, pre, dl, n * e), 1e-6);
    memcpy(acc, pre, sizeof(float) * (size_t)(n * e));
    CHECK_OK(lw_moe_aux_loss_backward(NULL, acc, x.experts, n, e, k, x.coef, 1.0f));
    check_tol("accumulate dprobs", n, e, k, nn_accumulate_error(acc, pre, dp, n * e), 1e-6);

    free(x.logits), free(x.probs), free(x.weights), free(x.rw), free(x.rp), free(x.experts);
    free(dl), free(dl_w), free(dp), free(zero_w), free(dl_aux), free(pre), free(acc);
}

static void test_refused(void) {
    float logits[4] = {0}, probs[4], weights[4];
    int32_t experts[4];
    double loss;
    CHECK_FAILS(lw_moe_router_forward(NULL, experts, weights, probs, logits, 1, 2, 3),
                LW_ERR_INVALID, "moe_router_forward: k (3) must be between 1 and the experts (2)");
    CHECK_FAILS(lw_moe_router_backward(NULL, logits, weights, NULL, probs, experts, 1, 2, 0),
                LW_ERR_INVALID, "moe_router_backward: k (0) must be between 1 and the experts");
    CHECK_FAILS(lw_moe_aux_loss_forward(NULL, probs, experts, 1, 0, 1, 0.1f, &loss), LW_ERR_INVALID,
                "moe_aux_loss_forward: the experts (0) must be >= 1");
    CHECK_FAILS(lw_moe_aux_loss_backward(NULL, probs, experts, -1, 2, 1, 0.1f, 1.0f),
                LW_ERR_INVALID, "moe_aux_loss_backward: n (-1) must be >= 0");
    /* no tokens: nothing written, a loss of 0 */
    loss = 1;
    CHECK_OK(lw_moe_router_forward(NULL, experts, weights, probs, logits, 0, 2, 1));
    CHECK_OK(lw_moe_aux_loss_forward(NULL, probs, experts, 0, 2, 1, 0.1f, &loss));
    CHECK(loss == 0);
}

/* A token never reaches one expert twice, whatever the ties: rows of equal logits (every
 * expert tied) and of two tied pairs take k distinct experts, the lower index first among tied
 * ones, each weighing its share. */
static void test_distinct_under_ties(void) {
    enum { N = 3, E = 4 };
    const float logits[N * E] = {0, 0, 0, 0, 2, 1, 2, 1, -1, -1, -1, -1};
    for (int64_t k = 1; k <= E; k++) {
        int32_t experts[N * E];
        float weights[N * E], probs[N * E];
        CHECK_OK(lw_moe_router_forward(NULL, experts, weights, probs, logits, N, E, k));
        for (int64_t r = 0; r < N; r++) {
            int seen[E] = {0};
            float sum = 0.0f;
            for (int64_t j = 0; j < k; j++) {
                const int32_t x = experts[r * k + j];
                CHECK(x >= 0 && x < E);
                if (x >= 0 && x < E) seen[x]++;
                sum += weights[r * k + j];
            }
            for (int x = 0; x < E; x++) CHECK(seen[x] <= 1);
            CHECK(sum > 0.9999f && sum < 1.0001f);
        }
        /* row 1: experts 0 and 2 (tied at 2) first, then 1 and 3 (tied at 1) */
        const int32_t order[E] = {0, 2, 1, 3};
        for (int64_t j = 0; j < k; j++) CHECK_EQ(experts[1 * k + j], order[j]);
    }
}

int main(void) {
    test_hand_example();
    test_distinct_under_ties();
    test_shape(5, 4, 2);
    test_shape(7, 8, 2);
    test_shape(3, 6, 1); /* k = 1: the weight is 1, only dprobs moves the logits */
    test_shape(4, 5, 5); /* k = e: every expert, weights = probs */
    test_shape(33, 16, 4);
    test_refused();
    return check_exit("test_nn_moe");
}
