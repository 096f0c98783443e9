/* emulation.c: the emulated kernels against double attention within reference.c's bounds, a NaN
 * key's rows, the pipelined staging bit for bit the synchronous one, and the faults (warp.c)
 * each caught. */
#include "mma_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the faults' names, in the order of mma_test.h's FAULT_ values */
static const char *fault_names[] = {"none",
                                    "a B operand's k halves swapped",
                                    "P's A operand packed in the wrong order",
                                    "the causal mask one key late",
                                    "a quad reduced over 2 lanes",
                                    "a step computed on the buffer being filled"};

/* ---- the emulation against double attention ------------------------------------------------- */

typedef struct {
    int64_t b, t, nh, hd, nkv;
    int window;
} shape;

/* worst of |got - ref| / tol, and of |got - ref| / max |ref| (the harness's measure) */
static double worst_ratio(const float *got, const double *ref, const double *tol, int64_t n,
                          double *rel) {
    double w = 0, big = 0, diff = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - ref[i]);
        w = fmax(w, isnan(d) ? INFINITY : d / tol[i]);
        big = fmax(big, fabs(ref[i]));
        diff = fmax(diff, isnan(d) ? INFINITY : d);
    }
    if (rel != NULL) *rel = diff / (big > 0 ? big : 1);
    return w;
}

/* The emulated kernels (variant: the staging) on bf16 inputs of one shape; false when an output
 * is past its bound (printed unless quiet). */
static bool emulation_within(shape sh, bool quiet, int variant) {
    const int64_t b = sh.b, t = sh.t, nh = sh.nh, c = nh * sh.hd, n = b * t * c, nl = b * nh * t;
    const int64_t nkv = sh.nkv, nq = b * t * (c + 2 * nkv * sh.hd);
    float *qkv = random_array(nq, 2.0f, true), *dout = random_array(n, 1.0f, true);
    float *out = calloc((size_t)n, sizeof(float)), *lse = calloc((size_t)nl, sizeof(float));
    float *dqkv = calloc((size_t)nq, sizeof(float)), *top = calloc((size_t)nl, 4);
    reference ref = {.out = malloc(sizeof(double) * (size_t)n),
                     .lse = malloc(sizeof(double) * (size_t)nl),
                     .dqkv = malloc(sizeof(double) * (size_t)nq),
                     .tol_out = malloc(sizeof(double) * (size_t)n),
                     .tol_dqkv = malloc(sizeof(double) * (size_t)nq),
                     .rowmax = malloc(sizeof(double) * (size_t)nl)};
    reference_attention(&ref, qkv, dout, NULL, b, t, c, nh, nkv, sh.window, b * nh);
    emulate_forward(out, lse, top, qkv, b, t, c, nh, nkv, sh.window, b * nh, variant);
    /* the backward from the reference's out and lse, as the harness hands a device the CPU's */
    float *ref_out = calloc((size_t)n, sizeof(float)), *ref_lse = calloc((size_t)nl, sizeof(float));
    for (int64_t i = 0; i < n; i++)
        ref_out[i] = (float)ref.out[i];
    for (int64_t i = 0; i < nl; i++)
        ref_lse[i] = (float)ref.lse[i];
    emulate_backward(dqkv, dout, qkv, ref_out, ref_lse, b, t, c, nh, nkv, sh.window, b * nh,
                     variant);
    double *tol_lse = malloc(sizeof(double) * (size_t)nl);
    for (int64_t i = 0; i < nl; i++)
        tol_lse[i] = (1 + fabs(ref.lse[i])) / 16384;
    double rel_out, rel_dqkv;
    const double w_out = worst_ratio(out, ref.out, ref.tol_out, n, &rel_out);
    const double w_lse = worst_ratio(lse, ref.lse, tol_lse, nl, NULL);
    /* a row's largest score: fp32 sums of exact products (the inputs are bf16), as lse */
    const double w_top = worst_ratio(top, ref.rowmax, tol_lse, nl, NULL);
    const double w_dqkv = worst_ratio(dqkv, ref.dqkv, ref.tol_dqkv, nq, &rel_dqkv);
    const bool ok = w_out <= 1 && w_lse <= 1 && w_top <= 1 && w_dqkv <= 1;
    if (!quiet)
        printf(
            "test_mma_layout: b %lld, t %lld, nh %lld, nkv %lld, window %d, head dim %lld: worst "
            "error / bound: out %.3f, lse %.3f, largest score %.3f, dqkv %.3f (of the largest "
            "value: out %.1e, dqkv %.1e)\n",
            (long long)b, (long long)t, (long long)nh, (long long)nkv, sh.window, (long long)sh.hd,
            w_out, w_lse, w_top, w_dqkv, rel_out, rel_dqkv);
    free(qkv), free(dout), free(out), free(lse), free(dqkv), free(ref_out), free(ref_lse);
    free(tol_lse), free(ref.out), free(ref.lse), free(ref.dqkv), free(ref.tol_out);
    free(ref.tol_dqkv), free(ref.rowmax), free(top);
    return ok;
}

/* A NaN in one key (KV head 0, channel 3): exactly the rows that see it are NaN in out, lse and
 * their largest scores; with one KV head for two query heads and a window, both query heads'
 * rows bad .. bad + window. */
static void nan_key(int64_t nkv, int window) {
    const int64_t t = 100, nh = 2, hd = 64, c = nh * hd, bad = 40, ld = c + 2 * nkv * hd;
    float *qkv = random_array(t * ld, 2.0f, true);
    float *out = calloc((size_t)(t * c), sizeof(float)), *lse = calloc((size_t)(nh * t), 4);
    float *top = calloc((size_t)(nh * t), 4);
    qkv[bad * ld + c + 3] = NAN;
    emulate_forward(out, lse, top, qkv, 1, t, c, nh, nkv, window, nh, LWC_FA_SYNC);
    bool as_promised = true;
    for (int64_t i = 0; i < t; i++)
        for (int64_t h = 0; h < nh; h++) {
            const bool nan = h / (nh / nkv) == 0 && lwc_fa_sees(i, bad, window);
            as_promised = as_promised && isnan(lse[h * t + i]) == nan;
            as_promised = as_promised && isnan(top[h * t + i]) == nan;
            for (int64_t d = 0; d < hd; d++)
                as_promised = as_promised && isnan(out[i * c + h * hd + d]) == nan;
        }
    EXPECT(as_promised);
    printf("test_mma_layout: a NaN key makes NaN exactly the rows that see it (%lld KV heads, "
           "window %d)\n",
           (long long)nkv, window);
    free(qkv), free(out), free(lse), free(top);
}

void test_nan_key(void) {
    nan_key(2, 0);
    nan_key(1, 30);
}

/* The pipelined staging (bf16 qkv, dout copied to bf16 by the row dots) gives the synchronous
 * staging's out, lse, rows' largest scores and dqkv bit for bit: the same values reach the same
 * tiles, through the other buffer every other step. */
static bool variants_agree(shape sh) {
    const int64_t b = sh.b, t = sh.t, nh = sh.nh, c = nh * sh.hd, n = b * t * c, nl = b * nh * t;
    const int64_t nq = b * t * (c + 2 * sh.nkv * sh.hd);
    float *qkv = random_array(nq, 2.0f, true), *dout = random_array(n, 1.0f, false);
    float *d0 = random_array(nq, 0.01f, false), *got[2][4];
    for (int v = 0; v < 2; v++) {
        float *out = got[v][0] = calloc((size_t)n, 4), *lse = got[v][1] = calloc((size_t)nl, 4);
        float *top = got[v][2] = calloc((size_t)nl, 4);
        float *dqkv = got[v][3] = malloc(sizeof(float) * (size_t)nq);
        memcpy(dqkv, d0, sizeof(float) * (size_t)nq);
        emulate_forward(out, lse, top, qkv, b, t, c, nh, sh.nkv, sh.window, b * nh, v);
        emulate_backward(dqkv, dout, qkv, out, lse, b, t, c, nh, sh.nkv, sh.window, b * nh, v);
    }
    const int64_t sizes[4] = {n, nl, nl, nq};
    bool same = true;
    for (int i = 0; i < 4; i++) {
        same = same && memcmp(got[0][i], got[1][i], sizeof(float) * (size_t)sizes[i]) == 0;
        free(got[0][i]), free(got[1][i]);
    }
    printf("test_mma_layout: b %lld, t %lld, nh %lld, nkv %lld, window %d, head dim %lld: the "
           "pipelined staging %s the synchronous one bit for bit\n",
           (long long)b, (long long)t, (long long)nh, (long long)sh.nkv, sh.window,
           (long long)sh.hd, same ? "gives" : "DOES NOT give");
    free(qkv), free(dout), free(d0);
    return same;
}

#if defined(LWOPT_SANITIZED)
enum { SANITIZED = 1 };
#else
enum { SANITIZED = 0 };
#endif

void test_emulation(void) {
    const shape shapes[] = {
        {1, 1, 1, 64, 1, 0},      /* one row */
        {1, 70, 2, 64, 2, 0},     /* past one tile */
        {2, 130, 1, 128, 1, 0},   /* head dim 128, batch 2, t past two tiles */
        {1, 200, 3, 64, 3, 0},    /* three heads */
        {1, 97, 2, 128, 2, 0},    /* head dim 128, dk/dv steps of 32 not dividing t */
        {1, 1024, 1, 64, 1, 0},   /* GPT-2's t */
        {1, 200, 4, 64, 2, 0},    /* two query heads per KV head */
        {2, 130, 3, 128, 1, 0},   /* multi-query, head dim 128 */
        {1, 300, 2, 64, 2, 50},   /* a window within a step: steps skipped before it */
        {1, 300, 4, 128, 2, 100}, /* grouped, head dim 128, a window past a step */
        {1, 200, 2, 64, 1, 1},    /* a window of one key before the diagonal */
        {1, 260, 2, 64, 2, 64},   /* a window of a whole step */
    };
    /* the sanitizer build (ten times slower) leaves out GPT-2's t, and pipelines only the shapes
     * of up to 200 rows: the others walk the same paths for longer; the Release build runs all */
    const int longest = SANITIZED ? 300 : 1024, longest_pipelined = SANITIZED ? 200 : 300;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (shapes[i].t <= longest) EXPECT(emulation_within(shapes[i], false, LWC_FA_SYNC));
    /* every shape but GPT-2's t (the longest), pipelined: the same bits */
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (shapes[i].t <= longest_pipelined) EXPECT(variants_agree(shapes[i]));
    for (fault = FAULT_NONE + 1; fault < FAULT_COUNT; fault++) {
        /* causal alone, and grouped under a window; each staging (the buffer fault the
         * pipelined one's alone) */
        bool caught = true;
        for (int v = fault == FAULT_BUFFER ? LWC_FA_PIPELINED : LWC_FA_SYNC; v <= LWC_FA_PIPELINED;
             v++)
            caught = caught && !emulation_within((shape){1, 70, 1, 64, 1, 0}, true, v) &&
                     !emulation_within((shape){1, 100, 2, 64, 1, 20}, true, v);
        printf("test_mma_layout: fault \"%s\": %s\n", fault_names[fault],
               caught ? "caught" : "NOT caught");
        EXPECT(caught);
    }
    fault = FAULT_NONE;
}
