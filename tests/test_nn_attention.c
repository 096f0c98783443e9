/* test_nn_attention.c: causal attention against a float64 reference loop (the outputs and each
 * row's log-sum-exp, all the backward keeps), dqkv against finite differences (the backward
 * recomputes the probabilities), accumulation into a pre-filled dqkv, and causality of the
 * outputs and of the gradients. One case has t = 70 so that OpenBLAS runs its blocked GEMM
 * paths, others t = 150: three of the CPU's blocks of query rows. */
#include "nn_check.h"

typedef struct {
    int64_t b, t, c, nh;
    float *qkv;  /* [b, t, 3c] */
    float *out;  /* [b, t, c] */
    float *lse;  /* [b, nh, t] */
    float *r;    /* [b, t, c]: the loss weights, so dout = r */
    float *dqkv; /* [b, t, 3c] */
    float *scratch;
} att_case;

static att_case case_new(int64_t b, int64_t t, int64_t c, int64_t nh) {
    att_case k = {b, t, c, nh, NULL, NULL, NULL, NULL, NULL, NULL};
    k.qkv = nn_alloc(b * t * 3 * c);
    k.out = nn_alloc(b * t * c);
    k.lse = nn_alloc(b * nh * t);
    k.r = nn_alloc(b * t * c);
    k.dqkv = nn_alloc(b * t * 3 * c);
    k.scratch = nn_alloc(lw_attention_scratch_floats(NULL, b, t, c, nh));
    nn_fill(k.qkv, b * t * 3 * c, 1.0f);
    nn_fill(k.r, b * t * c, 1.0f);
    return k;
}

static void case_free(att_case *k) {
    free(k->qkv), free(k->out), free(k->lse), free(k->r), free(k->dqkv), free(k->scratch);
}

static void forward(att_case *k) {
    CHECK_OK(lw_attention_forward(NULL, k->out, LW_DTYPE_F32, k->lse, NULL, k->scratch, k->qkv,
                                  LW_DTYPE_F32, k->b, k->t, k->c, k->nh));
}

static void backward_into(att_case *k, float *dqkv, const float *dout) {
    CHECK_OK(lw_attention_backward(NULL, dqkv, LW_DTYPE_F32, k->scratch, dout, k->qkv, LW_DTYPE_F32,
                                   k->out, LW_DTYPE_F32, k->lse, k->b, k->t, k->c, k->nh));
}

/* Explicit per-head loops in double, the causal mask as a loop bound: the outputs and each row's
 * log-sum-exp of the scaled scores. */
static void reference(const att_case *k, double *out, double *lse) {
    int64_t b = k->b, t = k->t, c = k->c, nh = k->nh, hd = c / nh;
    double *p = malloc(sizeof(double) * (size_t)t);
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t h = 0; h < nh; h++)
            for (int64_t i = 0; i < t; i++) {
                const float *q = k->qkv + (bi * t + i) * 3 * c + h * hd;
                double m = -INFINITY, sum = 0;
                for (int64_t j = 0; j <= i; j++) {
                    const float *kj = k->qkv + (bi * t + j) * 3 * c + c + h * hd;
                    double s = 0;
                    for (int64_t d = 0; d < hd; d++)
                        s += (double)q[d] * kj[d];
                    p[j] = s / sqrt((double)hd);
                    m = fmax(m, p[j]);
                }
                for (int64_t j = 0; j <= i; j++)
                    sum += (p[j] = exp(p[j] - m));
                lse[(bi * nh + h) * t + i] = m + log(sum);
                for (int64_t d = 0; d < hd; d++) {
                    double o = 0;
                    for (int64_t j = 0; j <= i; j++)
                        o += p[j] / sum * k->qkv[(bi * t + j) * 3 * c + 2 * c + h * hd + d];
                    out[(bi * t + i) * c + h * hd + d] = o;
                }
            }
    free(p);
}

/* float32 GEMMs of <= 70 terms of size <= 1 against float64: ~1e-7 is typical (measured <= 1e-7),
 * 1e-6 leaves room for other OpenBLAS kernels' summation orders. */
static void test_forward_matches_reference(int64_t b, int64_t t, int64_t c, int64_t nh) {
    att_case k = case_new(b, t, c, nh);
    double *out = malloc(sizeof(double) * (size_t)(b * t * c));
    double *lse = malloc(sizeof(double) * (size_t)(b * nh * t));
    forward(&k);
    reference(&k, out, lse);
    double dout = 0, dlse = 0;
    for (int64_t i = 0; i < b * t * c; i++)
        dout = fmax(dout, fabs(k.out[i] - out[i]));
    for (int64_t i = 0; i < b * nh * t; i++)
        dlse = fmax(dlse, fabs(k.lse[i] - lse[i]));
    printf("forward b=%lld t=%lld c=%lld nh=%lld: max |out - ref| %.2e, |lse - ref| %.2e\n",
           (long long)b, (long long)t, (long long)c, (long long)nh, dout, dlse);
    CHECK(dout <= 1e-6);
    CHECK(dlse <= 1e-6);
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
    reference(&k, out, lse);
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
static void test_gradients(int64_t b, int64_t t, int64_t c, int64_t nh, int64_t samples) {
    att_case k = case_new(b, t, c, nh);
    int64_t n = b * t * 3 * c;
    forward(&k);
    backward_into(&k, k.dqkv, k.r);
    double worst = nn_fd_worst(k.qkv, k.dqkv, n, loss_fn, &k, 5e-3f, samples);
    printf("dqkv b=%lld t=%lld c=%lld nh=%lld: worst finite-difference error %.2e\n", (long long)b,
           (long long)t, (long long)c, (long long)nh, worst);
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
                                  LW_DTYPE_F32, 1, 4, 10, 3),
             LW_ERR_INVALID);
    CHECK(strstr(lw_last_error(), "c = 10") != NULL && strstr(lw_last_error(), "nh = 3") != NULL);
    CHECK_EQ(lw_attention_backward(NULL, k.dqkv, LW_DTYPE_F32, k.scratch, k.r, k.qkv, LW_DTYPE_F32,
                                   k.out, LW_DTYPE_F32, k.lse, 1, 4, 10, 3),
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
        if (i >= bad) nan_out += row_nan, nan_lse += lse_nan;
        else nan_before += row_nan + lse_nan;
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
                                      LW_DTYPE_F32, k.out, LW_DTYPE_F32, k.lse, 1, 4, 12, 3),
                LW_ERR_INVALID, "attention backward: qkv gradient of dtype f16: fp32 or bf16 only");
    CHECK(k.dqkv[0] == first);
    case_free(&k);
}

int main(void) {
    test_dtypes();
    test_heads_must_divide_channels();
    test_nan_key_propagates();
    test_forward_matches_reference(2, 5, 12, 3);
    test_forward_matches_reference(2, 7, 12, 3);
    test_forward_matches_reference(2, 70, 64, 2);
    test_forward_matches_reference(2, 150, 32, 4);
    test_forward_large_scores();
    test_gradients(2, 5, 12, 3, 360);
    test_gradients(2, 7, 12, 3, 504);
    test_gradients(1, 70, 64, 2, 400);
    test_gradients(1, 150, 16, 2, 400);
    test_backward_accumulates();
    test_causality(2, 7, 12, 3, 3);
    /* the CPU works in blocks of 64 query rows that see keys up to their last row: step s in
     * the third block, masked in the middle of the second's square */
    test_causality(2, 150, 16, 2, 100);
    test_causality(2, 150, 16, 2, 129);
    return check_exit("test_nn_attention");
}
