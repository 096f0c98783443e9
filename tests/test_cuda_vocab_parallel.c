/* test_cuda_vocab_parallel.c: the CUDA device's vocabulary-parallel kernels (tensor parallelism:
 * lw_embedding_range_*, lw_cross_entropy_partial_forward / _combine / _partial_backward) against
 * the CPU's on the same seeded inputs, beside test_cuda_model.c (which holds the one-rank model
 * kernels and is past the size a file should have): the range embedding bit for bit, forward and
 * backward (tokens outside the range, the position table on one rank only, accumulation); a
 * rank's softmax statistics, their combination and its backward, in one chunk and in several, a
 * rank holding only padding, ignored targets; two runs bit for bit. Each comparison states its
 * tolerance. Exit 77 (skipped) when CUDA is not available. */
#include "cuda_util.h"

#include <stdio.h>

static float *to_gpu(const float *h, int64_t n) { return upload(h, 4 * n); }

static float *from_gpu(const float *d, int64_t n) {
    float *h = calloc((size_t)(n > 0 ? n : 1), 4);
    download(h, d, 4 * n);
    return h;
}

static bool same_bits(const char *what, const char *shape, const float *a, const float *b,
                      int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) != 0 && !(isnan(a[i]) && isnan(b[i]))) {
            fprintf(stderr, "%s (%s): element %lld differs: %.9g and %.9g\n", what, shape,
                    (long long)i, (double)a[i], (double)b[i]);
            return false;
        }
    return true;
}

static int32_t rand_below(int64_t bound) {
    seed = seed * 6364136223846793005u + 1442695040888963407u;
    return (int32_t)((seed >> 33) % (uint64_t)bound);
}

/* ---- embedding: exact (the same float additions, in the CPU's order) ------------------------- */

static void embedding_case(int64_t b, int64_t t, int64_t c, int64_t vocab, int64_t first,
                           int64_t rows, bool with_wpe) {
    char shape[112];
    snprintf(shape, sizeof shape, "b %lld, t %lld, c %lld, rows [%lld, +%lld) of %lld%s",
             (long long)b, (long long)t, (long long)c, (long long)first, (long long)rows,
             (long long)vocab, with_wpe ? ", wpe" : "");
    const int64_t n = b * t;
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        tokens[i] = rand_below(vocab);
    float *wte = host_random(rows * c), *wpe = with_wpe ? host_random(t * c) : NULL;
    float *y = malloc(4 * (size_t)(n * c));
    CHECK_OK(lw_embedding_range_forward(NULL, y, tokens, wte, wpe, first, rows, b, t, c));
    int32_t *gtok = upload(tokens, 4 * n);
    float *gwte = to_gpu(wte, rows * c), *gwpe = with_wpe ? to_gpu(wpe, t * c) : NULL;
    float *gy = to_gpu(y, n * c); /* overwritten: the kernel must write every element */
    CHECK_OK(lw_device_set(gs, gy, 0x7f, 4 * n * c));
    CHECK_OK(lw_embedding_range_forward(gs, gy, gtok, gwte, gwpe, first, rows, b, t, c));
    float *hy = from_gpu(gy, n * c);
    CHECK(same_bits("range embedding forward", shape, hy, y, n * c));

    float *dy = host_random(n * c), *dwte0 = host_random(rows * c), *dwpe0 = host_random(t * c);
    float *dwte = malloc(4 * (size_t)(rows * c)), *dwpe = malloc(4 * (size_t)(t * c));
    memcpy(dwte, dwte0, 4 * (size_t)(rows * c));
    memcpy(dwpe, dwpe0, 4 * (size_t)(t * c));
    CHECK_OK(lw_embedding_range_backward(NULL, dwte, with_wpe ? dwpe : NULL, dy, tokens, first,
                                         rows, b, t, c));
    float *gdy = to_gpu(dy, n * c);
    for (int run = 0; run < 2; run++) {
        float *gdwte = to_gpu(dwte0, rows * c), *gdwpe = with_wpe ? to_gpu(dwpe0, t * c) : NULL;
        CHECK_OK(lw_embedding_range_backward(gs, gdwte, gdwpe, gdy, gtok, first, rows, b, t, c));
        float *h1 = from_gpu(gdwte, rows * c);
        CHECK(same_bits("range embedding backward dwte", shape, h1, dwte, rows * c));
        if (with_wpe) {
            float *h2 = from_gpu(gdwpe, t * c);
            CHECK(same_bits("range embedding backward dwpe", shape, h2, dwpe, t * c));
            free(h2);
        }
        free(h1);
        lw_device_free(gpu, gdwte), lw_device_free(gpu, gdwpe);
    }
    lw_device_free(gpu, gtok), lw_device_free(gpu, gwte), lw_device_free(gpu, gwpe);
    lw_device_free(gpu, gy), lw_device_free(gpu, gdy);
    free(tokens), free(wte), free(wpe), free(y), free(hy), free(dy), free(dwte0), free(dwpe0);
    free(dwte), free(dwpe);
}

/* ---- the vocabulary-parallel head ------------------------------------------------------------ */

static int64_t gpu_chunk_rows(int64_t n, int64_t v) { /* 2^26 floats of logits at once */
    int64_t r = ((int64_t)1 << 26) / v;
    r = r < 1 ? 1 : r;
    return r < n ? r : n;
}

/* One rank's rows [first, first + v) of a vocabulary `vocab` (rows past it: padding) and a
 * second rank's statistics made up on the host, as the all-gather would bring them.
 * Tolerances as test_cuda_model.c's cross-entropy (fp32 GEMMs in other orders, expf within 2
 * ulps, sums in double on both sides): the statistics' max and target logit are logits (1e-5 of
 * the largest), the sums 1e-5 relative; the combination runs on the same statistics on both
 * sides, in the same order, with the same double formulas: 1e-6 (exp and log of CUDA and glibc
 * differ in the last double bits only); dh and dw are GEMM results, 1e-5 of the largest value.
 * The padding's dw must stay as it was, exactly. */
static void head_case(int64_t n, int64_t c, int64_t v, int64_t first, int64_t vocab) {
    char shape[128];
    snprintf(shape, sizeof shape, "n %lld, c %lld, rows [%lld, +%lld) of %lld, chunk %lld",
             (long long)n, (long long)c, (long long)first, (long long)v, (long long)vocab,
             (long long)gpu_chunk_rows(n, v));
    float *h = host_random(n * c), *w = host_random(v * c);
    for (int64_t i = 0; i < v * c; i++)
        w[i] *= 0.5f;
    int32_t *tg = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        tg[i] = rand_below(vocab);
        if (i % 5 == 4) tg[i] = i % 2 ? -1 : (int32_t)vocab; /* ignored */
        if (i % 7 == 3) tg[i] = (int32_t)first;              /* some held here */
        if (tg[i] == (int32_t)first && first >= vocab) tg[i] = -1;
    }
    /* rank 0 is this one, rank 1 a made-up peer with statistics of the same scale */
    float *stats = malloc(4 * (size_t)(6 * n));
    float *scratch = malloc(4 * (size_t)lw_cross_entropy_scratch_floats(NULL, n, v));
    CHECK_OK(
        lw_cross_entropy_partial_forward(NULL, stats, scratch, h, w, tg, n, c, v, first, vocab));
    for (int64_t i = 0; i < n; i++) {
        stats[3 * n + i] = 0.5f * frand();
        stats[4 * n + i] = 100.0f + 50.0f * frand();
        stats[5 * n + i] = 0.0f;
    }
    float *losses = malloc(4 * (size_t)n), *lse = malloc(4 * (size_t)n);
    double loss = -1;
    CHECK_OK(lw_cross_entropy_combine(NULL, losses, lse, stats, 2, tg, n, vocab, &loss));
    const float scale = (float)n;
    float *dh0 = host_random(n * c), *dw0 = host_random(v * c);
    float *dh = malloc(4 * (size_t)(n * c)), *dw = malloc(4 * (size_t)(v * c));
    memcpy(dh, dh0, 4 * (size_t)(n * c));
    memcpy(dw, dw0, 4 * (size_t)(v * c));
    CHECK_OK(lw_cross_entropy_partial_backward(NULL, dh, dw, scratch, h, w, tg, lse, n, c, v, first,
                                               vocab, scale));

    const int64_t sf = lw_cross_entropy_scratch_floats(gs, n, v);
    float *gh = to_gpu(h, n * c), *gw = to_gpu(w, v * c), *gscratch = NULL;
    CHECK_OK(lw_device_alloc(gpu, 4 * (sf > 0 ? sf : 1), (void **)&gscratch));
    int32_t *gt = upload(tg, 4 * n);
    float *gstats = to_gpu(stats, 6 * n); /* the peer's half stays; this rank's is rewritten */
    float *hs[2], *hl[2], *hlse[2], *hdh[2], *hdw[2];
    double gloss[2] = {-1, -1};
    for (int run = 0; run < 2; run++) {
        float *gl = to_gpu(losses, n), *glse = to_gpu(lse, n);
        float *gdh = to_gpu(dh0, n * c), *gdw = to_gpu(dw0, v * c);
        CHECK_OK(lw_cross_entropy_partial_forward(gs, gstats, gscratch, gh, gw, gt, n, c, v, first,
                                                  vocab));
        hs[run] = from_gpu(gstats, 3 * n);
        /* the combination from the CPU's statistics: it alone is compared here */
        float *cpu_stats = to_gpu(stats, 6 * n);
        CHECK_OK(lw_cross_entropy_combine(gs, gl, glse, cpu_stats, 2, gt, n, vocab, &gloss[run]));
        /* the backward on the GPU's own logits, with the CPU's lse: dlogits depend on lse alone */
        float *glse_cpu = to_gpu(lse, n);
        CHECK_OK(lw_cross_entropy_partial_backward(gs, gdh, gdw, gscratch, gh, gw, gt, glse_cpu, n,
                                                   c, v, first, vocab, scale));
        hl[run] = from_gpu(gl, n);
        hlse[run] = from_gpu(glse, n);
        hdh[run] = from_gpu(gdh, n * c);
        hdw[run] = from_gpu(gdw, v * c);
        lw_device_free(gpu, gl), lw_device_free(gpu, glse), lw_device_free(gpu, gdh);
        lw_device_free(gpu, gdw), lw_device_free(gpu, cpu_stats), lw_device_free(gpu, glse_cpu);
    }
    CHECK(partial_stats_close(shape, hs[0], stats, n));
    CHECK(close_to("combine: losses", shape, hl[0], losses, n, 1e-6, 1.0));
    CHECK(close_to("combine: lse", shape, hlse[0], lse, n, 1e-6, 1.0));
    CHECK(fabs(gloss[0] - loss) <= 1e-6 * fmax(fabs(loss), 1.0));
    CHECK(gloss[1] == gloss[0]);
    CHECK(close_to("partial head: dh", shape, hdh[0], dh, n * c, 1e-5, largest_finite(dh, n * c)));
    CHECK(close_to("partial head: dw", shape, hdw[0], dw, v * c, 1e-5, largest_finite(dw, v * c)));
    const int64_t real = vocab - first < 0 ? 0 : vocab - first < v ? vocab - first : v;
    CHECK(same_bits("partial head: padding's dw untouched", shape, hdw[0] + real * c,
                    dw0 + real * c, (v - real) * c));
    CHECK(same_bits("partial head: stats, run 2", shape, hs[1], hs[0], 3 * n));
    CHECK(same_bits("combine: losses, run 2", shape, hl[1], hl[0], n));
    CHECK(same_bits("partial head: dh, run 2", shape, hdh[1], hdh[0], n * c));
    CHECK(same_bits("partial head: dw, run 2", shape, hdw[1], hdw[0], v * c));
    lw_device_free(gpu, gh), lw_device_free(gpu, gw), lw_device_free(gpu, gscratch);
    lw_device_free(gpu, gt), lw_device_free(gpu, gstats);
    for (int run = 0; run < 2; run++)
        free(hs[run]), free(hl[run]), free(hlse[run]), free(hdh[run]), free(hdw[run]);
    free(h), free(w), free(tg), free(stats), free(scratch), free(losses), free(lse);
    free(dh0), free(dw0), free(dh), free(dw);
}

int main(void) {
    const int skip_or_fail = cuda_open("test_cuda_vocab_parallel");
    if (skip_or_fail != 0) return skip_or_fail;
    embedding_case(1, 1, 1, 2, 1, 1, true);
    embedding_case(4, 64, 100, 50, 25, 25, true);          /* half the tokens another rank's */
    embedding_case(3, 33, 40, 70000, 35000, 35000, false); /* rows past 2^16 */
    embedding_case(2, 1024, 768, 50304, 0, 16768, true);   /* a third of GPT-2's vocabulary */
    head_case(7, 33, 25, 25, 50);                          /* one chunk: the logits are kept */
    head_case(7, 33, 26, 26, 50);             /* the last rank: 24 real rows, 2 of padding */
    head_case(5, 8, 4, 8, 8);                 /* only padding here */
    head_case(3000, 64, 25152, 25152, 50257); /* two chunks of 2668 rows; 47 rows of padding */
    return check_exit("test_cuda_vocab_parallel");
}
