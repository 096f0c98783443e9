/* test_nn_attention.c: causal attention, with grouped KV heads and sliding windows, against a
 * float64 reference loop (the outputs, each row's log-sum-exp, all the backward keeps, and the
 * heads' largest scores), dqkv against finite differences (the backward recomputes the
 * probabilities), accumulation into a pre-filled dqkv, causality and the window's edges of the
 * outputs and of the gradients, grouped heads against the same heads with their KV heads
 * repeated, a window covering every key against none. One case has t = 70 so that OpenBLAS runs
 * its blocked GEMM paths, others t = 150: three of the CPU's blocks of query rows. */
#include "nn_check.h"

typedef struct {
    int64_t b, t, c, nh, nkv, window;
    int64_t w;   /* qkv's row: c + 2 nkv hd */
    float *qkv;  /* [b, t, w] */
    float *out;  /* [b, t, c] */
    float *lse;  /* [b, nh, t] */
    float *r;    /* [b, t, c]: the loss weights, so dout = r */
    float *dqkv; /* [b, t, w] */
    float *scratch;
} att_case;

static att_case case_gqa(int64_t b, int64_t t, int64_t c, int64_t nh, int64_t nkv, int64_t window) {
    const int64_t w = c + 2 * nkv * (c / nh);
    att_case k = {b, t, c, nh, nkv, window, w, NULL, NULL, NULL, NULL, NULL, NULL};
    k.qkv = nn_alloc(b * t * w);
    k.out = nn_alloc(b * t * c);
    k.lse = nn_alloc(b * nh * t);
    k.r = nn_alloc(b * t * c);
    k.dqkv = nn_alloc(b * t * w);
    k.scratch = nn_alloc(lw_attention_scratch_floats(NULL, b, t, c, nh, nkv, window));
    nn_fill(k.qkv, b * t * w, 1.0f);
    nn_fill(k.r, b * t * c, 1.0f);
    return k;
}

static att_case case_new(int64_t b, int64_t t, int64_t c, int64_t nh) {
    return case_gqa(b, t, c, nh, nh, 0);
}

static void case_free(att_case *k) {
    free(k->qkv), free(k->out), free(k->lse), free(k->r), free(k->dqkv), free(k->scratch);
}

static void forward(att_case *k) {
    CHECK_OK(lw_attention_forward(NULL, k->out, LW_DTYPE_F32, k->lse, NULL, k->scratch, k->qkv,
                                  LW_DTYPE_F32, k->b, k->t, k->c, k->nh, k->nkv, k->window));
}

static void backward_into(att_case *k, float *dqkv, const float *dout) {
    CHECK_OK(lw_attention_backward(NULL, dqkv, LW_DTYPE_F32, k->scratch, dout, k->qkv, LW_DTYPE_F32,
                                   k->out, LW_DTYPE_F32, k->lse, k->b, k->t, k->c, k->nh, k->nkv,
                                   k->window));
}

/* Explicit per-head loops in double, the mask as loop bounds (keys j0 .. i, j0 = i - window
 * under a window): the outputs, each row's log-sum-exp of the scaled scores and each head's
 * largest score (head_max, optional). Query head h reads KV head h / (nh / nkv), its K at
 * channel c + that head's hd, its V nkv hd further. */
static void reference(const att_case *k, double *out, double *lse, double *head_max) {
    const int64_t b = k->b, t = k->t, c = k->c, nh = k->nh, hd = c / nh, w = k->w;
    double *p = malloc(sizeof(double) * (size_t)t);
    for (int64_t h = 0; head_max != NULL && h < nh; h++)
        head_max[h] = -INFINITY;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t h = 0; h < nh; h++)
            for (int64_t i = 0; i < t; i++) {
                const int64_t kc = c + h / (nh / k->nkv) * hd, vc = kc + k->nkv * hd;
                const int64_t j0 = k->window > 0 && i > k->window ? i - k->window : 0;
                const float *q = k->qkv + (bi * t + i) * w + h * hd;
                double m = -INFINITY, sum = 0;
                for (int64_t j = j0; j <= i; j++) {
                    const float *kj = k->qkv + (bi * t + j) * w + kc;
                    double s = 0;
                    for (int64_t d = 0; d < hd; d++)
                        s += (double)q[d] * kj[d];
                    p[j] = s / sqrt((double)hd);
                    m = fmax(m, p[j]);
                }
                if (head_max != NULL) head_max[h] = fmax(head_max[h], m);
                for (int64_t j = j0; j <= i; j++)
                    sum += (p[j] = exp(p[j] - m));
                lse[(bi * nh + h) * t + i] = m + log(sum);
                for (int64_t d = 0; d < hd; d++) {
                    double o = 0;
                    for (int64_t j = j0; j <= i; j++)
                        o += p[j] / sum * k->qkv[(bi * t + j) * w + vc + d];
                    out[(bi * t + i) * c + h * hd + d] = o;
                }
            }
    free(p);
}

/* float32 GEMMs of <= 150 terms of size <= 1 against float64: ~1e-7 is typical (measured <=
 * 1e-7), 1e-6 leaves room for other summation orders. The heads' largest scores are fp32 dot
 * products of hd <= 32 terms of size <= 1, scaled: within 1e-6 as well. */
static void test_forward_matches_reference(int64_t b, int64_t t, int64_t c, int64_t nh, int64_t nkv,
                                           int64_t window) {
    att_case k = case_gqa(b, t, c, nh, nkv, window);
    double *out = malloc(sizeof(double) * (size_t)(b * t * c));
    double *lse = malloc(sizeof(double) * (size_t)(b * nh * t));
    double ref_max[16];
    float head_max[16];
    CHECK(nh <= 16);
    CHECK_OK(lw_attention_forward(NULL, k.out, LW_DTYPE_F32, k.lse, head_max, k.scratch, k.qkv,
                                  LW_DTYPE_F32, b, t, c, nh, nkv, window));
    reference(&k, out, lse, ref_max);
    double dout = 0, dlse = 0, dmax = 0;
    for (int64_t i = 0; i < b * t * c; i++)
        dout = fmax(dout, fabs(k.out[i] - out[i]));
    for (int64_t i = 0; i < b * nh * t; i++)
        dlse = fmax(dlse, fabs(k.lse[i] - lse[i]));
    for (int64_t h = 0; h < nh; h++)
        dmax = fmax(dmax, fabs(head_max[h] - ref_max[h]));
    printf("forward b=%lld t=%lld c=%lld nh=%lld nkv=%lld window=%lld: max |out - ref| %.2e, "
           "|lse - ref| %.2e, |head max - ref| %.2e\n",
           (long long)b, (long long)t, (long long)c, (long long)nh, (long long)nkv,
           (long long)window, dout, dlse, dmax);
    CHECK(dout <= 1e-6);
    CHECK(dlse <= 1e-6);
    CHECK(dmax <= 1e-6);
    free(out), free(lse);
    case_free(&k);
}

/* Scores in the hundreds overflow an unshifted expf (> 88): the softmax must subtract the row
 * max. The float32 scores carry ~3e-5 of absolute rounding at this size, so the outputs are
 * held to 5e-4 rather than 1e-6. */
static void test_forward_large_scores(void) {
    int64_t b = 2, t = 7, c = 12, nh = 3;
    att_case k = case_new(b, t, c, nh);
    for (int64_t i = 0; i < b * t; i++)
        for (int64_t j = 0; j < c; j++)
            k.qkv[i * 3 * c + j] *= 200.0f;
    double *out = malloc(sizeof(double) * (size_t)(b * t * c));
    double *lse = malloc(sizeof(double) * (size_t)(b * nh * t));
    forward(&k);
    reference(&k, out, lse, NULL);
    int finite = 1;
    double dout = 0;
    for (int64_t i = 0; i < b * t * c; i++) {
        finite &= isfinite(k.out[i]);
        dout = fmax(dout, fabs(k.out[i] - out[i]));
    }
    for (int64_t i = 0; i < b * nh * t; i++)
        finite &= isfinite(k.lse[i]);
    printf("forward with scores ~100: max |out - ref| %.2e\n", dout);
    CHECK(finite);
    CHECK(dout <= 5e-4);
    free(out), free(lse);
    case_free(&k);
}

static double loss_fn(void *ctx) {
    att_case *k = ctx;
    forward(k);
    return nn_dot(k->out, k->r, k->b * k->t * k->c);
}

/* L = sum(out * r) in double over a float32 forward. Central differences with eps = 5e-3 have a
 * truncation error ~eps^2 |L'''| ~ 1e-5 and a rounding error ~ (float noise of L, ~1e-6) / eps ~
 * 2e-4, so 1e-2 (absolute below 1, relative above) leaves margin while a wrong factor such as a
 * missing 1/sqrt(hd) (x2 at hd = 4) or a missing softmax term is far outside it. */
static void test_gradients(int64_t b, int64_t t, int64_t c, int64_t nh, int64_t nkv, int64_t window,
                           int64_t samples) {
    att_case k = case_gqa(b, t, c, nh, nkv, window);
    int64_t n = b * t * k.w;
    forward(&k);
    backward_into(&k, k.dqkv, k.r);
    double worst = nn_fd_worst(k.qkv, k.dqkv, n, loss_fn, &k, 5e-3f, samples);
    printf("dqkv b=%lld t=%lld c=%lld nh=%lld nkv=%lld window=%lld: worst finite-difference "
           "error %.2e\n",
           (long long)b, (long long)t, (long long)c, (long long)nh, (long long)nkv,
           (long long)window, worst);
    CHECK(worst <= 1e-2);
    case_free(&k);
}

/* backward(pre) == pre + backward(0) up to the rounding of one addition */
static void test_backward_accumulates(void) {
    att_case k = case_new(2, 6, 12, 3);
    int64_t n = 2 * 6 * 36;
    float *pre = nn_alloc(n), *acc = nn_alloc(n);
    nn_fill(pre, n, 1.0f);
    memcpy(acc, pre, sizeof(float) * (size_t)n);
    forward(&k);
    backward_into(&k, k.dqkv, k.r);
    backward_into(&k, acc, k.r);
    double worst = 0;
    for (int64_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)acc[i] - ((double)pre[i] + k.dqkv[i])));
    CHECK(worst <= 1e-6);
    free(pre), free(acc);
    case_free(&k);
}

/* Changing q, k and v at step s of batch 0 leaves batch 0's outputs and log-sum-exps before s
 * bit-identical (masked scores are never read) and all of batch 1; a dout that is zero from step
 * s on gives exactly zero dq, dk, dv from step s on. */
static void test_causality(int64_t b, int64_t t, int64_t c, int64_t nh, int64_t s) {
    att_case k = case_new(b, t, c, nh);
    float *out0 = nn_alloc(b * t * c), *lse0 = nn_alloc(b * nh * t);
    forward(&k);
    memcpy(out0, k.out, sizeof(float) * (size_t)(b * t * c));
    memcpy(lse0, k.lse, sizeof(float) * (size_t)(b * nh * t));
    for (int64_t j = 0; j < 3 * c; j++)
        k.qkv[s * 3 * c + j] += 0.5f + nn_rand(0.25f);
    forward(&k);
    int before_changed = 0, batch1_changed = 0;
    double at_s = 0;
    for (int64_t i = 0; i < t; i++)
        for (int64_t j = 0; j < c; j++) {
            if (i < s) before_changed += k.out[i * c + j] != out0[i * c + j];
            if (i == s) at_s = fmax(at_s, fabs(k.out[i * c + j] - out0[i * c + j]));
            batch1_changed += k.out[(t + i) * c + j] != out0[(t + i) * c + j];
        }
    for (int64_t h = 0; h < nh; h++)
        for (int64_t i = 0; i < s; i++)
            before_changed += k.lse[h * t + i] != lse0[h * t + i];
    CHECK_EQ(before_changed, 0);
    CHECK_EQ(batch1_changed, 0);
    CHECK(at_s > 1e-3); /* the perturbation does reach step s itself */

    float *dout = nn_alloc(b * t * c);
    for (int64_t i = 0; i < s * c; i++)
        dout[i] = k.r[i];
    backward_into(&k, k.dqkv, dout);
    int late_nonzero = 0;
    double early = 0;
    for (int64_t i = 0; i < t; i++)
        for (int64_t j = 0; j < 3 * c; j++) {
            if (i >= s)
                late_nonzero += k.dqkv[i * 3 * c + j] != 0.0f;
            else
                early = fmax(early, fabs(k.dqkv[i * 3 * c + j]));
        }
    CHECK_EQ(late_nonzero, 0);
    CHECK(early > 1e-3);
    free(out0), free(lse0), free(dout);
    case_free(&k);
}

/* heads that do not divide the channels: an error naming both, nothing written */
static void test_heads_must_divide_channels(void) {
    att_case k = case_new(1, 4, 12, 3); /* buffers for c = 12; the calls say c = 10 */
    nn_fill(k.out, 4 * 12, 1.0f);
    const float first = k.out[0];
    CHECK_EQ(lw_attention_forward(NULL, k.out, LW_DTYPE_F32, k.lse, NULL, k.scratch, k.qkv,
                                  LW_DTYPE_F32, 1, 4, 10, 3, 3, 0),
             LW_ERR_INVALID);
    CHECK(strstr(lw_last_error(), "c = 10") != NULL && strstr(lw_last_error(), "nh = 3") != NULL);
    CHECK_EQ(lw_attention_backward(NULL, k.dqkv, LW_DTYPE_F32, k.scratch, k.r, k.qkv, LW_DTYPE_F32,
                                   k.out, LW_DTYPE_F32, k.lse, 1, 4, 10, 3, 3, 0),
             LW_ERR_INVALID);
    CHECK_EQ(k.out[0], first);
    case_free(&k);
}

/* A NaN in a key reaches every row that sees it, forward and backward (as NaN, not as a zero
 * probability): the key is past the first 8 of a row, where the row's max passes over it. */
static void test_nan_key_propagates(void) {
    const int64_t t = 20, c = 8, nh = 1, bad = 9;
    att_case k = case_new(1, t, c, nh);
    k.qkv[bad * 3 * c + c + 3] = NAN;
    forward(&k);
    int nan_out = 0, nan_lse = 0, nan_before = 0;
    for (int64_t i = 0; i < t; i++) {
        int row_nan = isnan(k.out[i * c]), lse_nan = isnan(k.lse[i]);
        if (i >= bad)
            nan_out += row_nan, nan_lse += lse_nan;
        else
            nan_before += row_nan + lse_nan;
    }
    CHECK_EQ(nan_out, t - bad);
    CHECK_EQ(nan_lse, t - bad);
    CHECK_EQ(nan_before, 0);
    memset(k.dqkv, 0, sizeof(float) * (size_t)(t * 3 * c));
    backward_into(&k, k.dqkv, k.r);
    int nan_dq = 0;
    for (int64_t i = bad; i < t; i++)
        nan_dq += isnan(k.dqkv[i * 3 * c]);
    CHECK_EQ(nan_dq, t - bad);
    case_free(&k);
}

/* A qkv gradient of a dtype the kernels do not write, named, before anything is written. */
static void test_dtypes(void) {
    att_case k = case_new(1, 4, 12, 3);
    nn_fill(k.dqkv, 4 * 36, 1.0f);
    const float first = k.dqkv[0];
    CHECK_FAILS(lw_attention_backward(NULL, k.dqkv, LW_DTYPE_F16, k.scratch, k.r, k.qkv,
                                      LW_DTYPE_F32, k.out, LW_DTYPE_F32, k.lse, 1, 4, 12, 3, 3, 0),
                LW_ERR_INVALID, "attention backward: qkv gradient of dtype f16: fp32 or bf16 only");
    CHECK(k.dqkv[0] == first);
    case_free(&k);
}

/* KV heads that do not divide the heads, none, or a negative window: errors naming the value,
 * nothing written. */
static void test_kv_heads_and_window_checked(void) {
    att_case k = case_gqa(1, 4, 12, 3, 3, 0);
    nn_fill(k.out, 4 * 12, 1.0f);
    const float first = k.out[0];
    CHECK_FAILS(lw_attention_forward(NULL, k.out, LW_DTYPE_F32, k.lse, NULL, k.scratch, k.qkv,
                                     LW_DTYPE_F32, 1, 4, 12, 3, 2, 0),
                LW_ERR_INVALID, "the KV heads nkv = 2 must divide the heads nh = 3");
    CHECK_FAILS(lw_attention_backward(NULL, k.dqkv, LW_DTYPE_F32, k.scratch, k.r, k.qkv,
                                      LW_DTYPE_F32, k.out, LW_DTYPE_F32, k.lse, 1, 4, 12, 3, 0, 0),
                LW_ERR_INVALID, "nkv = 0 must divide");
    CHECK_FAILS(lw_attention_forward(NULL, k.out, LW_DTYPE_F32, k.lse, NULL, k.scratch, k.qkv,
                                     LW_DTYPE_F32, 1, 4, 12, 3, 3, -1),
                LW_ERR_INVALID, "window = -1 must be >= 0");
    CHECK_EQ(k.out[0], first);
    case_free(&k);
}

/* Grouped heads read their KV head as the same heads would with it repeated (nkv = nh): out and
 * lse bit for bit, and dq (each query head's own work); a KV head's dk and dv are the sum over
 * its query heads' (the same fp32 terms over queries and heads summed in another order: within
 * 5e-6 of the largest gradient: a GEMM's sums of a few hundred terms reordered, measured 6e-7). */
static void test_grouped_as_repeated(int64_t b, int64_t t, int64_t c, int64_t nh, int64_t nkv,
                                     int64_t window) {
    att_case g = case_gqa(b, t, c, nh, nkv, window), m = case_gqa(b, t, c, nh, nh, window);
    const int64_t hd = c / nh, group = nh / nkv;
    for (int64_t row = 0; row < b * t; row++) {
        const float *src = g.qkv + row * g.w;
        float *dst = m.qkv + row * m.w;
        memcpy(dst, src, sizeof(float) * (size_t)c);
        for (int64_t h = 0; h < nh; h++) {
            memcpy(dst + c + h * hd, src + c + h / group * hd, sizeof(float) * (size_t)hd);
            memcpy(dst + 2 * c + h * hd, src + c + (nkv + h / group) * hd,
                   sizeof(float) * (size_t)hd);
        }
    }
    memcpy(m.r, g.r, sizeof(float) * (size_t)(b * t * c));
    forward(&g), forward(&m);
    CHECK(memcmp(g.out, m.out, sizeof(float) * (size_t)(b * t * c)) == 0);
    CHECK(memcmp(g.lse, m.lse, sizeof(float) * (size_t)(b * nh * t)) == 0);
    backward_into(&g, g.dqkv, g.r), backward_into(&m, m.dqkv, m.r);
    int dq_differs = 0;
    double worst = 0, largest = 0;
    for (int64_t i = 0; i < b * t * m.w; i++)
        largest = fmax(largest, i % m.w >= c ? fabs(m.dqkv[i]) : 0.0);
    for (int64_t row = 0; row < b * t; row++) {
        const float *dg = g.dqkv + row * g.w, *dm = m.dqkv + row * m.w;
        dq_differs += memcmp(dg, dm, sizeof(float) * (size_t)c) != 0;
        for (int64_t kh = 0; kh < nkv; kh++)
            for (int64_t d = 0; d < hd; d++)
                for (int part = 1; part <= 2; part++) {
                    double sum = 0;
                    for (int64_t h = kh * group; h < (kh + 1) * group; h++)
                        sum += dm[part * c + h * hd + d];
                    const float got = dg[c + ((part - 1) * nkv + kh) * hd + d];
                    worst = fmax(worst, fabs(got - sum) / largest);
                }
    }
    printf("grouped b=%lld t=%lld nh=%lld nkv=%lld window=%lld as repeated: dk, dv within %.2e "
           "of the sums (of the largest)\n",
           (long long)b, (long long)t, (long long)nh, (long long)nkv, (long long)window, worst);
    CHECK_EQ(dq_differs, 0);
    CHECK(worst <= 5e-6);
    case_free(&g), case_free(&m);
}

/* A window that covers every earlier key (t - 1, or more, up to the largest int64) is no
 * window: out, lse and dqkv bit for bit those of window 0. */
static void test_wide_window_is_causal(int64_t b, int64_t t, int64_t c, int64_t nh, int64_t nkv) {
    att_case full = case_gqa(b, t, c, nh, nkv, 0);
    forward(&full);
    backward_into(&full, full.dqkv, full.r);
    const int64_t windows[3] = {t - 1, 10 * t, INT64_MAX};
    for (int i = 0; i < 3; i++) {
        att_case k = case_gqa(b, t, c, nh, nkv, windows[i]);
        memcpy(k.qkv, full.qkv, sizeof(float) * (size_t)(b * t * k.w));
        memcpy(k.r, full.r, sizeof(float) * (size_t)(b * t * c));
        forward(&k);
        backward_into(&k, k.dqkv, k.r);
        CHECK(memcmp(k.out, full.out, sizeof(float) * (size_t)(b * t * c)) == 0);
        CHECK(memcmp(k.lse, full.lse, sizeof(float) * (size_t)(b * nh * t)) == 0);
        CHECK(memcmp(k.dqkv, full.dqkv, sizeof(float) * (size_t)(b * t * k.w)) == 0);
        case_free(&k);
    }
    case_free(&full);
}

/* The window's edges, exactly: changing row s of batch 0's qkv changes the outputs and lse of
 * rows s .. s + window alone (every other bit for bit, masked scores never reaching a sum); a
 * dout that is zero on rows s .. s + window gives row s exactly zero dq, dk and dv, while rows
 * that do see a weighted row get gradients. */
static void test_window_reach(int64_t t, int64_t c, int64_t nh, int64_t nkv, int64_t window,
                              int64_t s) {
    att_case k = case_gqa(1, t, c, nh, nkv, window);
    float *out0 = nn_alloc(t * c), *lse0 = nn_alloc(nh * t);
    forward(&k);
    memcpy(out0, k.out, sizeof(float) * (size_t)(t * c));
    memcpy(lse0, k.lse, sizeof(float) * (size_t)(nh * t));
    for (int64_t j = 0; j < k.w; j++)
        k.qkv[s * k.w + j] += 0.5f + nn_rand(0.25f);
    forward(&k);
    int outside_changed = 0, inside_same = 0;
    for (int64_t i = 0; i < t; i++) {
        const bool sees = i >= s && i <= s + window;
        int changed = 0;
        for (int64_t j = 0; j < c; j++)
            changed += k.out[i * c + j] != out0[i * c + j];
        for (int64_t h = 0; h < nh; h++)
            changed += k.lse[h * t + i] != lse0[h * t + i];
        if (!sees) outside_changed += changed;
        if (sees && changed == 0) inside_same++;
    }
    CHECK_EQ(outside_changed, 0);
    CHECK_EQ(inside_same, 0);
    float *dout = nn_alloc(t * c);
    for (int64_t i = 0; i < t; i++)
        if (i < s || i > s + window) memcpy(dout + i * c, k.r + i * c, sizeof(float) * (size_t)c);
    backward_into(&k, k.dqkv, dout);
    int row_s_nonzero = 0;
    double others = 0;
    for (int64_t j = 0; j < k.w; j++)
        row_s_nonzero += k.dqkv[s * k.w + j] != 0.0f;
    for (int64_t j = 0; j < k.w && s + window + 1 < t; j++)
        others = fmax(others, fabs(k.dqkv[(s + window + 1) * k.w + j]));
    CHECK_EQ(row_s_nonzero, 0);
    CHECK(s + window + 1 >= t || others > 1e-3);
    free(out0), free(lse0), free(dout);
    case_free(&k);
}

int main(void) {
    test_dtypes();
    test_heads_must_divide_channels();
    test_kv_heads_and_window_checked();
    test_nan_key_propagates();
    test_forward_matches_reference(2, 5, 12, 3, 3, 0);
    test_forward_matches_reference(2, 7, 12, 3, 3, 0);
    test_forward_matches_reference(2, 70, 64, 2, 2, 0);
    test_forward_matches_reference(2, 150, 32, 4, 4, 0);
    /* grouped KV heads, multi-query, windows within a tile, past a block of 64 rows, of one key */
    test_forward_matches_reference(2, 70, 64, 4, 2, 0);
    test_forward_matches_reference(2, 150, 32, 4, 1, 0);
    test_forward_matches_reference(2, 150, 32, 4, 4, 20);
    test_forward_matches_reference(2, 150, 32, 4, 2, 70);
    test_forward_matches_reference(1, 150, 16, 2, 1, 1);
    test_forward_matches_reference(2, 130, 32, 8, 2, 64);
    test_forward_large_scores();
    test_gradients(2, 5, 12, 3, 3, 0, 360);
    test_gradients(2, 7, 12, 3, 3, 0, 504);
    test_gradients(1, 70, 64, 2, 2, 0, 400);
    test_gradients(1, 150, 16, 2, 2, 0, 400);
    test_gradients(2, 7, 12, 3, 1, 2, 504);
    test_gradients(1, 70, 32, 4, 2, 9, 400);
    test_gradients(1, 150, 16, 4, 1, 40, 400);
    test_backward_accumulates();
    test_causality(2, 7, 12, 3, 3);
    /* the CPU works in blocks of 64 query rows that see keys up to their last row: step s in
     * the third block, masked in the middle of the second's square */
    test_causality(2, 150, 16, 2, 100);
    test_causality(2, 150, 16, 2, 129);
    test_grouped_as_repeated(2, 150, 32, 4, 2, 0);
    test_grouped_as_repeated(1, 70, 32, 4, 1, 30);
    test_wide_window_is_causal(2, 150, 32, 4, 2);
    test_window_reach(150, 32, 4, 2, 20, 50);
    test_window_reach(150, 32, 4, 4, 70, 60);
    test_window_reach(150, 16, 2, 1, 1, 127);
    test_window_reach(150, 16, 2, 1, 40, 140);
    return check_exit("test_nn_attention");
}
