/* test_nn_vocab_parallel.c: tensor parallelism's vocabulary-parallel kernels against the one-rank
 * kernels they split, with the group's collectives done here by hand. The range embedding: its
 * ranks' outputs summed equal lw_embedding_forward bit for bit and their gradients are the
 * rows of lw_embedding_backward's, bit for bit (padding rows untouched, accumulation kept). The
 * partial cross-entropy: every rank's statistics, concatenated (the all-gather) and combined,
 * give lw_cross_entropy_forward's losses, log-sum-exps and mean; the ranks' dh summed (the
 * all-reduce) and their dw rows give its backward; padded rows hold huge weights yet change
 * nothing; one and several chunks, a rank holding only padding, ignored targets, accumulation,
 * and finite differences of the combined loss. */
#include "compare.h"
#include "nn_check.h"

#include <stdio.h>

static void check_tol(const char *what, const char *shape, double err, double tol) {
    nn_within(err, tol, "%s (%s)", what, shape);
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* ---- embedding ------------------------------------------------------------------------------ */

static void embedding_case(int64_t b, int64_t t, int64_t c, int64_t vocab, int64_t parts) {
    char shape[96];
    snprintf(shape, sizeof shape, "b %lld t %lld c %lld vocab %lld parts %lld", (long long)b,
             (long long)t, (long long)c, (long long)vocab, (long long)parts);
    const int64_t n = b * t, rows = ceil_div(vocab, parts), padded = rows * parts;
    /* the full table padded with rows no token reaches: their garbage must never show */
    float *wte = nn_alloc(padded * c), *wpe = nn_alloc(t * c), *dy = nn_alloc(n * c);
    nn_fill(wte, padded * c, 1.0f);
    nn_fill(wpe, t * c, 1.0f);
    nn_fill(dy, n * c, 1.0f);
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        int64_t k = (int64_t)((nn_rand(0.5f) + 0.5f) * (float)vocab);
        tokens[i] = (int32_t)(k < vocab ? k : vocab - 1);
    }
    float *y = nn_alloc(n * c), *dwte = nn_alloc(padded * c), *dwpe = nn_alloc(t * c);
    CHECK_OK(lw_embedding_forward(NULL, y, tokens, wte, wpe, LW_DTYPE_F32, b, t, c));
    CHECK_OK(lw_embedding_backward(NULL, dwte, dwpe, dy, tokens, b, t, c));

    float *sum = nn_alloc(n * c), *part = nn_alloc(n * c);
    float *pre = nn_alloc(rows * c), *got = nn_alloc(rows * c), *gpe = nn_alloc(t * c);
    float *accb = nn_alloc(rows * c);
    bool forward_same = true, backward_same = true, padding_zero = true, wpe_same = true;
    double acc = 0;
    for (int64_t p = 0; p < parts; p++) {
        /* rank p adds the position rows when it is rank 0 */
        CHECK_OK(lw_embedding_range_forward(NULL, part, tokens, wte + p * rows * c,
                                            p == 0 ? wpe : NULL, LW_DTYPE_F32, p * rows, rows, b, t,
                                            c));
        for (int64_t i = 0; i < n * c; i++)
            sum[i] = p == 0 ? part[i] : sum[i] + part[i];
        memset(got, 0, sizeof(float) * (size_t)(rows * c));
        memset(gpe, 0, sizeof(float) * (size_t)(t * c));
        CHECK_OK(lw_embedding_range_backward(NULL, got, gpe, dy, tokens, p * rows, rows, b, t, c));
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; i < c; i++) {
                const float g = got[r * c + i];
                if (p * rows + r < vocab)
                    backward_same &= g == dwte[(p * rows + r) * c + i];
                else
                    padding_zero &= g == 0.0f;
            }
        wpe_same &= memcmp(gpe, dwpe, sizeof(float) * (size_t)(t * c)) == 0;
        /* accumulates (+=) into what is there */
        nn_fill(pre, rows * c, 1.0f);
        memcpy(accb, pre, sizeof(float) * (size_t)(rows * c));
        CHECK_OK(
            lw_embedding_range_backward(NULL, accb, NULL, dy, tokens, p * rows, rows, b, t, c));
        acc = fmax(acc, nn_accumulate_error(accb, pre, got, rows * c));
    }
    forward_same = memcmp(sum, y, sizeof(float) * (size_t)(n * c)) == 0;
    check_tol("range embedding: the ranks' sum is the forward (bits differing)", shape,
              forward_same ? 0 : 1, 0);
    check_tol("range embedding: dwte rows are the backward's (bits differing)", shape,
              backward_same ? 0 : 1, 0);
    check_tol("range embedding: padding rows get no gradient", shape, padding_zero ? 0 : 1, 0);
    check_tol("range embedding: every rank's dwpe is the backward's", shape, wpe_same ? 0 : 1, 0);
    check_tol("range embedding: accumulates", shape, acc, 1e-6);
    free(wte), free(wpe), free(dy), free(tokens), free(y), free(dwte), free(dwpe), free(sum);
    free(part), free(pre), free(got), free(gpe), free(accb);
}

/* A token held by no rank (another range, or negative) looks up 0; with wpe, the position row. */
static void test_embedding_outside(void) {
    int32_t tokens[3] = {5, -1, 2};
    float wte[2 * 2] = {1, 2, 3, 4}, wpe[3 * 2] = {10, 20, 30, 40, 50, 60}, y[6], dw[4] = {0};
    CHECK_OK(lw_embedding_range_forward(NULL, y, tokens, wte, NULL, LW_DTYPE_F32, 2, 2, 1, 3, 2));
    CHECK(y[0] == 0 && y[1] == 0 && y[2] == 0 && y[3] == 0 && y[4] == 1 && y[5] == 2);
    CHECK_OK(lw_embedding_range_forward(NULL, y, tokens, wte, wpe, LW_DTYPE_F32, 2, 2, 1, 3, 2));
    CHECK(y[0] == 10 && y[3] == 40 && y[4] == 51 && y[5] == 62);
    float dy[6] = {1, 1, 1, 1, 1, 1};
    CHECK_OK(lw_embedding_range_backward(NULL, dw, NULL, dy, tokens, 2, 2, 1, 3, 2));
    CHECK(dw[0] == 1 && dw[1] == 1 && dw[2] == 0 && dw[3] == 0);
    CHECK_FAILS(
        lw_embedding_range_forward(NULL, y, tokens, wte, NULL, LW_DTYPE_F32, -1, 2, 1, 3, 2),
        LW_ERR_INVALID, "[-1, +2)");
}

/* ---- cross-entropy -------------------------------------------------------------------------- */

typedef struct {
    int64_t n, c, vocab, parts, rows; /* rows: each rank's, vocab rounded up to parts */
    float *h, *w;                     /* [n, c], [parts * rows, c] (padding rows huge) */
    int32_t *tg;
    float **scratch, *stats, *losses, *lse;
} tp_case;

static tp_case tp_new(int64_t n, int64_t c, int64_t vocab, int64_t parts) {
    tp_case k = {n,    c,    vocab, parts, ceil_div(vocab, parts), NULL, NULL, NULL,
                 NULL, NULL, NULL,  NULL};
    const int64_t padded = k.rows * parts;
    k.h = nn_alloc(n * c);
    k.w = nn_alloc(padded * c);
    nn_fill(k.h, n * c, 1.0f);
    nn_fill(k.w, vocab * c, 1.0f);
    for (int64_t i = vocab * c; i < padded * c; i++)
        k.w[i] = 50.0f; /* logits of hundreds: unmasked, they would own the softmax */
    k.tg = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        int64_t t = (int64_t)((nn_rand(0.5f) + 0.5f) * (float)vocab);
        k.tg[i] = (int32_t)(t < vocab ? t : vocab - 1);
        if (i % 3 == 1) k.tg[i] = -1;
        if (i == n - 1 && n > 2) k.tg[i] = (int32_t)vocab; /* a padding row's id: ignored too */
    }
    k.scratch = malloc(sizeof(float *) * (size_t)parts);
    for (int64_t p = 0; p < parts; p++)
        k.scratch[p] = nn_alloc(lw_cross_entropy_scratch_floats(NULL, n, k.rows));
    k.stats = nn_alloc(parts * 3 * n);
    k.losses = nn_alloc(n);
    k.lse = nn_alloc(n);
    return k;
}

static void tp_free(tp_case *k) {
    for (int64_t p = 0; p < k->parts; p++)
        free(k->scratch[p]);
    free(k->scratch), free(k->h), free(k->w), free(k->tg), free(k->stats), free(k->losses);
    free(k->lse);
}

/* every rank's statistics into its slot (the all-gather), then the combination */
static double tp_forward(tp_case *k) {
    for (int64_t p = 0; p < k->parts; p++)
        CHECK_OK(lw_cross_entropy_partial_forward(
            NULL, k->stats + p * 3 * k->n, k->scratch[p], k->h, k->w + p * k->rows * k->c,
            LW_DTYPE_F32, LW_DTYPE_F32, 0.0f, k->tg, k->n, k->c, k->rows, p * k->rows, k->vocab));
    double loss = NAN;
    CHECK_OK(lw_cross_entropy_combine(NULL, k->losses, k->lse, k->stats, k->parts, k->tg, k->n,
                                      k->vocab, &loss));
    return loss;
}

/* every rank's backward; dh summed over the ranks (the all-reduce) into dh */
static void tp_backward(tp_case *k, float *dh, float *dw, float scale) {
    float *part = nn_alloc(k->n * k->c);
    for (int64_t p = 0; p < k->parts; p++) {
        memset(part, 0, sizeof(float) * (size_t)(k->n * k->c));
        CHECK_OK(lw_cross_entropy_partial_backward(
            NULL, part, dw + p * k->rows * k->c, k->scratch[p], k->h, k->w + p * k->rows * k->c,
            LW_DTYPE_F32, LW_DTYPE_F32, 0.0f, k->tg, k->lse, k->n, k->c, k->rows, p * k->rows,
            k->vocab, scale));
        for (int64_t i = 0; i < k->n * k->c; i++)
            dh[i] += part[i];
    }
    free(part);
}

static double max_diff(const float *a, const float *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* relative above 1 (compare.h's max_rel with floor 1): losses and log-sum-exps of a 50k
 * vocabulary are ~11, an ulp there ~1e-6 */

/* Against the one-rank kernel on the real rows: the statistics' float sums and the rescaling
 * in double move each lse and loss by an ulp at most (measured: 1e-7 relative); dh sums the
 * ranks' GEMMs in another grouping (measured 1.5e-7): 2e-6, as test_nn_cross_entropy allows
 * against float64. */
static void cross_entropy_case(int64_t n, int64_t c, int64_t vocab, int64_t parts) {
    char shape[96];
    snprintf(shape, sizeof shape, "n %lld c %lld vocab %lld parts %lld", (long long)n, (long long)c,
             (long long)vocab, (long long)parts);
    tp_case k = tp_new(n, c, vocab, parts);
    const int64_t padded = k.rows * parts;
    float *losses = nn_alloc(n), *lse = nn_alloc(n), *dh = nn_alloc(n * c),
          *dw = nn_alloc(vocab * c);
    float *scratch = nn_alloc(lw_cross_entropy_scratch_floats(NULL, n, vocab));
    double ref = NAN;
    const float scale = 2.5f;
    CHECK_OK(lw_cross_entropy_forward(NULL, losses, lse, scratch, k.h, k.w, LW_DTYPE_F32,
                                      LW_DTYPE_F32, 0.0f, k.tg, n, c, vocab, &ref));
    CHECK_OK(lw_cross_entropy_backward(NULL, dh, dw, scratch, k.h, k.w, LW_DTYPE_F32, LW_DTYPE_F32,
                                       0.0f, k.tg, lse, n, c, vocab, scale));
    const double mean = tp_forward(&k);
    float *tdh = nn_alloc(n * c), *tdw = nn_alloc(padded * c);
    tp_backward(&k, tdh, tdw, scale);
    check_tol("partial cross-entropy: mean loss", shape, fabs(mean - ref), 2e-6);
    check_tol("partial cross-entropy: losses", shape, max_rel(k.losses, losses, n, 1.0), 2e-6);
    check_tol("partial cross-entropy: lse", shape, max_rel(k.lse, lse, n, 1.0), 2e-6);
    check_tol("partial cross-entropy: dh", shape, max_diff(tdh, dh, n * c), 2e-6);
    check_tol("partial cross-entropy: dw", shape, max_diff(tdw, dw, vocab * c), 2e-6);
    double pad = 0;
    for (int64_t i = vocab * c; i < padded * c; i++)
        pad = fmax(pad, fabs(tdw[i]));
    check_tol("partial cross-entropy: padding rows' dw", shape, pad, 0);
    /* accumulation: into random contents (again from the forward: the scratch was consumed) */
    float *pre_h = nn_alloc(n * c), *pre_w = nn_alloc(padded * c);
    nn_fill(pre_h, n * c, 1.0f);
    nn_fill(pre_w, padded * c, 1.0f);
    float *acc_h = nn_alloc(n * c), *acc_w = nn_alloc(padded * c);
    memcpy(acc_h, pre_h, sizeof(float) * (size_t)(n * c));
    memcpy(acc_w, pre_w, sizeof(float) * (size_t)(padded * c));
    tp_forward(&k);
    tp_backward(&k, acc_h, acc_w, scale);
    check_tol("partial cross-entropy: accumulates dh", shape,
              nn_accumulate_error(acc_h, pre_h, tdh, n * c), 1e-5);
    check_tol("partial cross-entropy: accumulates dw", shape,
              nn_accumulate_error(acc_w, pre_w, tdw, padded * c), 1e-6);
    free(losses), free(lse), free(dh), free(dw), free(scratch), free(tdh), free(tdw);
    free(pre_h), free(pre_w), free(acc_h), free(acc_w);
    tp_free(&k);
}

static double tp_loss(void *ctx) { return tp_forward(ctx); }

/* Finite differences of the combined mean loss (tolerances of test_nn_cross_entropy's) in h and
 * in the weights of every rank, padding rows included (their gradient must be the 0 measured). */
static void test_gradients(int64_t n, int64_t c, int64_t vocab, int64_t parts) {
    tp_case k = tp_new(n, c, vocab, parts);
    for (int64_t i = vocab * c; i < k.rows * parts * c; i++)
        k.w[i] = 0.3f; /* moderate: the differences must not move a masked logit into view */
    float *dh = nn_alloc(n * c), *dw = nn_alloc(k.rows * parts * c);
    tp_forward(&k);
    tp_backward(&k, dh, dw, 1.0f);
    char shape[96];
    snprintf(shape, sizeof shape, "n %lld c %lld vocab %lld parts %lld", (long long)n, (long long)c,
             (long long)vocab, (long long)parts);
    check_tol("partial cross-entropy: fd dh", shape,
              nn_fd_worst(k.h, dh, n * c, tp_loss, &k, 1e-2f, 400), 1e-2);
    check_tol("partial cross-entropy: fd dw", shape,
              nn_fd_worst(k.w, dw, k.rows * parts * c, tp_loss, &k, 1e-2f, 400), 1e-2);
    free(dh), free(dw);
    tp_free(&k);
}

/* Every target ignored: the mean is 0 and the backward adds nothing. */
static void test_all_ignored(void) {
    tp_case k = tp_new(5, 4, 7, 2);
    for (int64_t i = 0; i < k.n; i++)
        k.tg[i] = -1;
    float *dh = nn_alloc(k.n * k.c), *dw = nn_alloc(k.rows * 2 * k.c);
    CHECK(tp_forward(&k) == 0.0);
    tp_backward(&k, dh, dw, 1.0f);
    double any = 0;
    for (int64_t i = 0; i < k.n * k.c; i++)
        any = fmax(any, fabs(dh[i]));
    for (int64_t i = 0; i < k.rows * 2 * k.c; i++)
        any = fmax(any, fabs(dw[i]));
    CHECK(any == 0.0);
    CHECK_FAILS(lw_cross_entropy_combine(NULL, k.losses, k.lse, k.stats, 0, k.tg, k.n, 7, NULL),
                LW_ERR_INVALID, "parts (0)");
    free(dh), free(dw);
    tp_free(&k);
}

/* The measure the GPU test compares a shard's statistics with (compare.h's partial_stats_close),
 * here on the CPU so that it cannot break unseen: a shard of padding alone has maxima -inf and
 * sums and target logits 0, which two runs must give alike and the measure must call equal; it
 * must still refuse a NaN, an infinity of the other sign, and a sum that moved. */
static void test_padding_shard_compares(void) {
    const int64_t n = 6, c = 5, v = 4, first = 8, vocab = 8; /* rows [8, 12) of 8 */
    float *h = nn_alloc(n * c), *w = nn_alloc(v * c), *a = nn_alloc(3 * n), *b = nn_alloc(3 * n);
    float *scratch = nn_alloc(lw_cross_entropy_scratch_floats(NULL, n, v));
    nn_fill(h, n * c, 1.0f);
    nn_fill(w, v * c, 1.0f);
    int32_t tg[6] = {0, 3, 7, -1, 8, 5};
    CHECK_OK(lw_cross_entropy_partial_forward(NULL, a, scratch, h, w, LW_DTYPE_F32, LW_DTYPE_F32,
                                              0.0f, tg, n, c, v, first, vocab));
    CHECK_OK(lw_cross_entropy_partial_forward(NULL, b, scratch, h, w, LW_DTYPE_F32, LW_DTYPE_F32,
                                              0.0f, tg, n, c, v, first, vocab));
    bool padding = true;
    for (int64_t i = 0; i < n; i++)
        padding &= isinf(a[i]) && a[i] < 0 && a[n + i] == 0.0f && a[2 * n + i] == 0.0f;
    CHECK(padding);
    CHECK(compare_rel(-INFINITY, -INFINITY, 1.0) == 0.0);
    CHECK(partial_stats_close("padding alone", a, b, n));
    fprintf(stderr, "(three differences follow, on purpose)\n");
    b[1] = NAN;
    CHECK(!partial_stats_close("padding alone, a NaN", a, b, n));
    b[1] = INFINITY;
    CHECK(!partial_stats_close("padding alone, +inf for -inf", a, b, n));
    b[1] = a[1];
    b[n + 2] = 1e-3f;
    CHECK(!partial_stats_close("padding alone, a sum moved", a, b, n));
    CHECK(isnan(max_rel(a, b, 1, 1.0)) == false && largest_finite(a, n) == 0.0);
    free(h), free(w), free(a), free(b), free(scratch);
}

int main(void) {
    embedding_case(2, 3, 13, 5, 1);
    embedding_case(2, 3, 13, 5, 2);
    embedding_case(3, 7, 9, 10, 3);   /* 12 rows padded: the last rank holds 2 real of 4 */
    embedding_case(4, 33, 70, 50, 4); /* c past 64 */
    test_embedding_outside();
    cross_entropy_case(7, 9, 11, 1);
    cross_entropy_case(7, 9, 11, 3); /* 12 rows: the last rank holds 3, 2 of them real */
    cross_entropy_case(13, 24, 300, 2);
    cross_entropy_case(9, 8, 4, 3);       /* 6 rows: the last rank holds only padding */
    cross_entropy_case(800, 4, 50304, 2); /* two chunks per rank: the backward recomputes */
    test_gradients(7, 9, 11, 3);
    test_gradients(6, 5, 4, 3);
    test_all_ignored();
    test_padding_shard_compares();
    return check_exit("test_nn_vocab_parallel");
}
