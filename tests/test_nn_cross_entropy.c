/* test_nn_cross_entropy.c: the fused LM head + cross-entropy against a float64 reference
 * (losses, each row's logsumexp, and the backward), in one chunk of rows and in several (a
 * GPT-2-sized vocabulary, where the backward recomputes the logits), with and without the
 * logits' softcap, dh and dw against finite
 * differences, accumulation, ignored and out-of-range targets, uniform logits, and logits too
 * large for an unshifted exp. */
#include "nn_check.h"

typedef struct {
    int64_t n, c, v;
    float cap;      /* the logits' softcap (0: none) */
    float *h;       /* [n, c] */
    float *w;       /* [v, c] */
    int32_t *tg;    /* [n] */
    float *lse;     /* [n] */
    float *scratch; /* lw_cross_entropy_scratch_floats */
    float *losses;  /* [n] */
    float *dh, *dw; /* [n, c], [v, c] */
} ce_case;

/* Targets uniform in [0, v); every `ignore_every`-th row (if > 0) gets -1. */
static ce_case case_new(int64_t n, int64_t c, int64_t v, int ignore_every) {
    ce_case k = {n, c, v, 0.0f, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    k.h = nn_alloc(n * c);
    k.w = nn_alloc(v * c);
    k.tg = calloc((size_t)n, sizeof(int32_t));
    k.lse = nn_alloc(n);
    k.scratch = nn_alloc(lw_cross_entropy_scratch_floats(NULL, n, v));
    k.losses = nn_alloc(n);
    k.dh = nn_alloc(n * c);
    k.dw = nn_alloc(v * c);
    nn_fill(k.h, n * c, 1.0f);
    nn_fill(k.w, v * c, 1.0f);
    for (int64_t i = 0; i < n; i++) {
        k.tg[i] = (int32_t)((nn_rand(0.5f) + 0.5f) * (float)v);
        if (k.tg[i] >= v) k.tg[i] = (int32_t)v - 1;
        if (ignore_every > 0 && i % ignore_every == 1) k.tg[i] = -1;
    }
    return k;
}

static void case_free(ce_case *k) {
    free(k->h), free(k->w), free(k->tg), free(k->lse), free(k->scratch), free(k->losses),
        free(k->dh), free(k->dw);
}

static double forward(ce_case *k) {
    double loss = NAN;
    CHECK_OK(lw_cross_entropy_forward(NULL, k->losses, k->lse, k->scratch, k->h, k->w, LW_DTYPE_F32,
                                      LW_DTYPE_F32, k->cap, k->tg, k->n, k->c, k->v, &loss));
    return loss;
}

static void backward(ce_case *k, float *dh, float *dw, float scale) {
    CHECK_OK(lw_cross_entropy_backward(NULL, dh, dw, k->scratch, k->h, k->w, LW_DTYPE_F32,
                                       LW_DTYPE_F32, k->cap, k->tg, k->lse, k->n, k->c, k->v,
                                       scale));
}

/* logit j of row i, capped at cap tanh(logit / cap) with a cap */
static double logit(const ce_case *k, int64_t i, int64_t j) {
    double s = 0;
    for (int64_t d = 0; d < k->c; d++)
        s += (double)k->h[i * k->c + d] * k->w[j * k->c + d];
    return k->cap > 0 ? k->cap * tanh(s / k->cap) : s;
}

/* Explicit logits and logsumexp in double: lse[n], losses[n], the mean over counted rows, and
 * the backward of scale * mean into dh[n, c] and dw[v, c] (from zero). */
static double reference(const ce_case *k, double *lse_out, double *losses, double *dh, double *dw,
                        double scale) {
    /* row i's logits, once: z[v] */
    double *probs = malloc(sizeof(double) * (size_t)k->v), *z = malloc(sizeof(double) * k->v);
    int64_t n = k->n, c = k->c, v = k->v, count = 0;
    double total = 0;
    for (int64_t i = 0; i < n; i++)
        count += k->tg[i] >= 0 && k->tg[i] < v;
    for (int64_t i = 0; i < n * c; i++)
        dh[i] = 0;
    for (int64_t i = 0; i < v * c; i++)
        dw[i] = 0;
    for (int64_t i = 0; i < n; i++) {
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < v; j++) {
            z[j] = logit(k, i, j);
            m = fmax(m, z[j]);
        }
        for (int64_t j = 0; j < v; j++)
            sum += exp(z[j] - m);
        double lse = m + log(sum);
        lse_out[i] = lse;
        for (int64_t j = 0; j < v; j++)
            probs[j] = exp(z[j] - lse);
        bool counted = k->tg[i] >= 0 && k->tg[i] < v;
        losses[i] = counted ? lse - z[k->tg[i]] : 0.0;
        total += losses[i];
        if (!counted) continue;
        for (int64_t j = 0; j < v; j++) {
            double g = scale * (probs[j] - (j == k->tg[i])) / (double)count;
            if (k->cap > 0) { /* the cap's slope 1 - tanh^2 */
                const double t = z[j] / k->cap;
                g *= 1 - t * t;
            }
            for (int64_t d = 0; d < c; d++) {
                dh[i * c + d] += g * k->w[j * c + d];
                dw[j * c + d] += g * k->h[i * c + d];
            }
        }
    }
    free(probs), free(z);
    return count > 0 ? total / (double)count : 0.0;
}

static double max_diff(const float *a, const double *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* Logits here are O(1) float32 dot products of <= 24 terms: log-sum-exps, losses and gradients
 * agree with float64 to ~3e-7 (measured), and 2e-6 leaves room for other OpenBLAS kernels. The
 * backward runs with loss_scale 2.5, so a dropped scale shows too. */
static void test_matches_reference(int64_t n, int64_t c, int64_t v, float cap) {
    ce_case k = case_new(n, c, v, 3);
    k.cap = cap;
    double *lse = malloc(sizeof(double) * (size_t)n), *losses = malloc(sizeof(double) * n);
    double *dh = malloc(sizeof(double) * (size_t)(n * c)), *dw = malloc(sizeof(double) * v * c);
    const double scale = 2.5;
    double ref = reference(&k, lse, losses, dh, dw, scale);
    double mean = forward(&k);
    double dp = max_diff(k.lse, lse, n), dl = max_diff(k.losses, losses, n);
    backward(&k, k.dh, k.dw, (float)scale);
    double ddh = max_diff(k.dh, dh, n * c), ddw = max_diff(k.dw, dw, v * c);
    const int64_t chunks = (n * v + lw_cross_entropy_scratch_floats(NULL, n, v) - 1) /
                           lw_cross_entropy_scratch_floats(NULL, n, v);
    printf("reference n=%lld c=%lld v=%lld softcap %g (%lld chunk%s): |mean| %.2e |lse| %.2e "
           "|losses| %.2e |dh| %.2e |dw| %.2e\n",
           (long long)n, (long long)c, (long long)v, (double)cap, (long long)chunks,
           chunks == 1 ? "" : "s", fabs(mean - ref), dp, dl, ddh, ddw);
    CHECK(fabs(mean - ref) <= 2e-6);
    CHECK(dp <= 2e-6);
    CHECK(dl <= 2e-6);
    CHECK(ddh <= 2e-6);
    CHECK(ddw <= 2e-6);
    free(lse), free(losses), free(dh), free(dw);
    case_free(&k);
}

static double loss_fn(void *ctx) { return forward(ctx); }

/* The loss is the returned mean (loss_scale 1), a double sum of float32 losses whose rounding is
 * ~1e-7; central differences with eps = 1e-2 then carry ~1e-5 of rounding and ~eps^2 |L'''| ~
 * 1e-5 of truncation error, so 1e-2 is loose for float32 yet a wrong 1/count, a dropped softmax
 * term or a transposed product is far outside it. Rows with target -1 are included: their dh
 * must be the zero that the differences measure. */
static void test_gradients(int64_t n, int64_t c, int64_t v, int64_t samples) {
    ce_case k = case_new(n, c, v, 3);
    forward(&k);
    backward(&k, k.dh, k.dw, 1.0f);
    double wh = nn_fd_worst(k.h, k.dh, n * c, loss_fn, &k, 1e-2f, samples);
    double ww = nn_fd_worst(k.w, k.dw, v * c, loss_fn, &k, 1e-2f, samples);
    printf("gradients n=%lld c=%lld v=%lld: worst finite-difference error dh %.2e dw %.2e\n",
           (long long)n, (long long)c, (long long)v, wh, ww);
    CHECK(wh <= 1e-2);
    CHECK(ww <= 1e-2);
    case_free(&k);
}

/* backward adds to pre-filled dh and dw; dh = NULL skips dh and leaves dw the same */
static void test_backward_accumulates(void) {
    int64_t n = 7, c = 9, v = 11;
    ce_case k = case_new(n, c, v, 0);
    float *pre_h = nn_alloc(n * c), *pre_w = nn_alloc(v * c), *dw2 = nn_alloc(v * c);
    nn_fill(pre_h, n * c, 1.0f);
    nn_fill(pre_w, v * c, 1.0f);
    forward(&k);
    backward(&k, k.dh, k.dw, 1.0f);
    forward(&k);
    backward(&k, NULL, dw2, 1.0f);
    CHECK(memcmp(dw2, k.dw, sizeof(float) * (size_t)(v * c)) == 0);
    float *acc_h = nn_alloc(n * c), *acc_w = nn_alloc(v * c);
    memcpy(acc_h, pre_h, sizeof(float) * (size_t)(n * c));
    memcpy(acc_w, pre_w, sizeof(float) * (size_t)(v * c));
    forward(&k);
    backward(&k, acc_h, acc_w, 1.0f);
    double worst = 0;
    for (int64_t i = 0; i < n * c; i++)
        worst = fmax(worst, fabs((double)acc_h[i] - ((double)pre_h[i] + k.dh[i])));
    for (int64_t i = 0; i < v * c; i++)
        worst = fmax(worst, fabs((double)acc_w[i] - ((double)pre_w[i] + k.dw[i])));
    CHECK(worst <= 1e-6);
    free(pre_h), free(pre_w), free(dw2), free(acc_h), free(acc_w);
    case_free(&k);
}

/* Rows with target < 0 (or >= v, a caller bug treated the same) add nothing: loss 0, excluded
 * from the mean, no gradient; with every row ignored the mean is 0 and backward adds nothing. */
static void test_ignored_targets(void) {
    int64_t n = 7, c = 9, v = 11;
    ce_case k = case_new(n, c, v, 0);
    double all = forward(&k);
    double expect = 0;
    for (int64_t i = 0; i < n; i++)
        expect += i == 2 || i == n - 1 ? 0.0 : k.losses[i];
    expect /= (double)(n - 2);
    k.tg[2] = -1;
    k.tg[n - 1] = (int32_t)v; /* the last row, so that reading logits[tg] would leave the buffer */
    double some = forward(&k);
    CHECK(fabs(some - expect) <= 1e-6);
    CHECK(fabs(some - all) > 1e-6);
    CHECK(k.losses[2] == 0.0f && k.losses[n - 1] == 0.0f);
    k.h[2 * c] += 1.0f; /* an ignored row's input does not move the loss */
    k.h[(n - 1) * c] += 1.0f;
    CHECK(forward(&k) == some);
    backward(&k, k.dh, k.dw, 1.0f);
    int ignored_nonzero = 0;
    for (int64_t d = 0; d < c; d++)
        ignored_nonzero += (k.dh[2 * c + d] != 0.0f) + (k.dh[(n - 1) * c + d] != 0.0f);
    CHECK_EQ(ignored_nonzero, 0);

    for (int64_t i = 0; i < n; i++)
        k.tg[i] = -1 - (int32_t)i;
    nn_fill(k.dh, n * c, 1.0f);
    nn_fill(k.dw, v * c, 1.0f);
    float *keep_h = nn_alloc(n * c), *keep_w = nn_alloc(v * c);
    memcpy(keep_h, k.dh, sizeof(float) * (size_t)(n * c));
    memcpy(keep_w, k.dw, sizeof(float) * (size_t)(v * c));
    CHECK(forward(&k) == 0.0);
    int nonzero_loss = 0;
    for (int64_t i = 0; i < n; i++)
        nonzero_loss += k.losses[i] != 0.0f;
    CHECK_EQ(nonzero_loss, 0);
    backward(&k, k.dh, k.dw, 1.0f);
    CHECK(memcmp(keep_h, k.dh, sizeof(float) * (size_t)(n * c)) == 0);
    CHECK(memcmp(keep_w, k.dw, sizeof(float) * (size_t)(v * c)) == 0);
    free(keep_h), free(keep_w);
    case_free(&k);
}

/* w = 0 gives all-zero logits: every loss and log-sum-exp is log(v). */
static void test_uniform_logits(int64_t n, int64_t c, int64_t v) {
    ce_case k = case_new(n, c, v, 0);
    memset(k.w, 0, sizeof(float) * (size_t)(v * c));
    double mean = forward(&k), worst = 0, pworst = 0;
    for (int64_t i = 0; i < n; i++)
        worst = fmax(worst, fabs(k.losses[i] - log((double)v)));
    for (int64_t i = 0; i < n; i++)
        pworst = fmax(pworst, fabs(k.lse[i] - log((double)v)));
    CHECK(fabs(mean - log((double)v)) <= 1e-6 * log((double)v));
    CHECK(worst <= 1e-6 * log((double)v));
    CHECK(pworst <= 1e-6 * log((double)v));
    case_free(&k);
}

/* Logits of several hundred overflow an unshifted expf (> 88), and a target at the row's smallest
 * logit has a probability far below float's smallest denormal, so -log(prob) would be inf: the
 * loss must come from the shifted logits. The float32 logits themselves carry ~1e-4 of absolute
 * rounding here, hence the tolerance relative to the loss, which is in the hundreds. */
static void test_large_logits(void) {
    int64_t n = 7, c = 9, v = 11;
    ce_case k = case_new(n, c, v, 0);
    for (int64_t i = 0; i < n * c; i++)
        k.h[i] *= 80.0f;
    for (int64_t i = 0; i < n; i++) {
        int64_t lo = 0;
        for (int64_t j = 1; j < v; j++)
            lo = logit(&k, i, j) < logit(&k, i, lo) ? j : lo;
        k.tg[i] = (int32_t)lo;
    }
    double *lse = malloc(sizeof(double) * (size_t)n), *losses = malloc(sizeof(double) * n);
    double *dh = malloc(sizeof(double) * (size_t)(n * c)), *dw = malloc(sizeof(double) * v * c);
    double ref = reference(&k, lse, losses, dh, dw, 1.0);
    double mean = forward(&k), worst = 0;
    int finite = isfinite(mean);
    for (int64_t i = 0; i < n; i++) {
        finite &= isfinite(k.losses[i]);
        worst = fmax(worst, fabs(k.losses[i] - losses[i]) / fmax(1.0, fabs(losses[i])));
    }
    for (int64_t i = 0; i < n; i++)
        finite &= isfinite(k.lse[i]);
    printf("large logits: mean loss %.1f (reference %.1f), worst relative loss error %.2e\n", mean,
           ref, worst);
    CHECK(finite);
    CHECK(ref > 100.0); /* the case is as hard as intended */
    CHECK(worst <= 1e-5);
    CHECK(fabs(mean - ref) <= 1e-5 * ref);
    free(lse), free(losses), free(dh), free(dw);
    case_free(&k);
}

/* Logits of a dtype the head does not hold, or a softcap not finite and >= 0, named, before
 * anything is written. */
static void test_dtypes(void) {
    float h[2] = {1, 2}, w[4] = {1, 0, 0, 1}, losses[1] = {7}, lse[1] = {7}, scratch[2];
    const int32_t tg[1] = {1};
    double loss = -1;
    CHECK_FAILS(lw_cross_entropy_forward(NULL, losses, lse, scratch, h, w, LW_DTYPE_F32,
                                         LW_DTYPE_F16, 0.0f, tg, 1, 2, 2, &loss),
                LW_ERR_INVALID, "cross-entropy forward: logits of dtype f16: fp32 or bf16 only");
    CHECK_FAILS(lw_cross_entropy_forward(NULL, losses, lse, scratch, h, w, LW_DTYPE_F32,
                                         LW_DTYPE_F32, -15.0f, tg, 1, 2, 2, &loss),
                LW_ERR_INVALID,
                "cross-entropy forward: softcap must be finite and >= 0 (0: none), got -15");
    CHECK_FAILS(lw_cross_entropy_backward(NULL, losses, w, scratch, h, w, LW_DTYPE_F32,
                                          LW_DTYPE_F32, INFINITY, tg, lse, 1, 2, 2, 1.0f),
                LW_ERR_INVALID,
                "cross-entropy backward: softcap must be finite and >= 0 (0: none), got inf");
    CHECK(losses[0] == 7 && lse[0] == 7);
}

int main(void) {
    test_dtypes();
    test_matches_reference(7, 9, 11, 0.0f);
    test_matches_reference(13, 24, 300, 0.0f);
    /* GPT-2's padded vocabulary: several chunks of rows, the backward recomputing each one */
    test_matches_reference(400, 4, 50304, 0.0f);
    /* capped at 1 (the logits reach ~3): one chunk keeping the capped logits, and several,
     * the backward capping each chunk's logits again */
    test_matches_reference(13, 24, 300, 1.0f);
    test_matches_reference(340, 4, 50304, 1.0f);
    test_gradients(7, 9, 11, 1000);
    test_gradients(13, 24, 300, 400);
    test_backward_accumulates();
    test_ignored_targets();
    test_uniform_logits(7, 9, 11);
    test_uniform_logits(5, 24, 300);
    test_large_logits();
    return check_exit("test_nn_cross_entropy");
}
