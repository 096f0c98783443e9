/* harness.c: `test_mma_layout --harness`: prints, for tests/kernels/attention.c's shapes and
 * inputs (uniform, not rounded to bf16), how far the emulation comes from double attention on the
 * measures that test uses: what its bf16 tolerances are derived from. */
#include "mma_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- --harness: what tests/kernels/attention.c's bf16 tolerances come from --------------- */

/* max |got - ref| / max |ref| */
static double gemm_measure(const float *got, const double *ref, int64_t n) {
    double big = 0, diff = 0;
    for (int64_t i = 0; i < n; i++)
        big = fmax(big, fabs(ref[i])), diff = fmax(diff, fabs((double)got[i] - ref[i]));
    return diff / big;
}
/* relative, the floor max(1, 1% of the largest) (tests/kernels/harness.h's lse_measure) */
static double lse_measure(const float *got, const double *ref, int64_t n) {
    double big = 0, w = 0;
    for (int64_t i = 0; i < n; i++)
        big = fmax(big, fabs(ref[i]));
    for (int64_t i = 0; i < n; i++)
        w = fmax(w, fabs((double)got[i] - ref[i]) / fmax(fabs(ref[i]), fmax(1.0, 0.01 * big)));
    return w;
}

void harness(void) {
    /* heads: a multiple of nh / nkv (a KV head's query heads all emulated) */
    const struct {
        int64_t b, t, c, nh, heads, hot, nkv;
        int window;
    } shapes[] = {
        {1, 1000, 128, 2, 2, -1, 2, 0},   {1, 130, 256, 2, 2, 0, 2, 0},
        {2, 1024, 768, 12, 3, -1, 12, 0}, {8, 1024, 768, 12, 8, 7, 12, 0},
        {2, 1, 128, 2, 4, -1, 2, 0},      {3, 77, 384, 3, 9, -1, 3, 0},
        {1, 1024, 768, 6, 2, -1, 6, 0},   {2, 333, 640, 5, 10, 3, 5, 0},
        {2, 200, 256, 4, 8, 2, 4, 0},     {2, 200, 256, 4, 8, 2, 2, 50},
        {1, 333, 640, 5, 5, -1, 5, 100},  {1, 130, 512, 4, 4, 0, 1, 64},
        {2, 1024, 768, 12, 6, 5, 4, 256},
    };
    printf("test_mma_layout --harness: the emulated kernels on test_kernels' inputs (qkv in "
           "[-2, 2), the hot head's q and k times 3, dout in [-1, 1), dqkv from [-0.01, 0.01), "
           "not rounded) against double attention, over the first heads (largest score: of each "
           "(batch, head), lse's measure):\n");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t b = shapes[s].b, t = shapes[s].t, c = shapes[s].c, nh = shapes[s].nh;
        const int64_t heads = shapes[s].heads, n = b * t * c, nl = b * nh * t, hd = c / nh;
        const int64_t nkv = shapes[s].nkv, group = nh / nkv, ld = c + 2 * nkv * hd;
        const int64_t nq = b * t * ld;
        const int window = shapes[s].window, hot = shapes[s].hot;
        float *qkv = random_array(nq, 2.0f, false), *dout = random_array(n, 1.0f, false);
        float *d0 = random_array(nq, 0.01f, false);
        for (int64_t row = 0; hot >= 0 && row < b * t; row++) /* its q and its KV head's k */
            for (int64_t d = 0; d < hd; d++)
                qkv[row * ld + hot * hd + d] *= 3.0f,
                    qkv[row * ld + c + hot / group * hd + d] *= 3.0f;
        float *out = calloc((size_t)n, 4), *lse = calloc((size_t)nl, 4);
        float *dqkv = malloc(sizeof(float) * (size_t)nq), *top = calloc((size_t)nl, 4);
        memcpy(dqkv, d0, sizeof(float) * (size_t)nq);
        reference ref = {.out = calloc((size_t)n, sizeof(double)),
                         .lse = calloc((size_t)nl, sizeof(double)),
                         .dqkv = malloc(sizeof(double) * (size_t)nq),
                         .rowmax = calloc((size_t)nl, sizeof(double))};
        reference_attention(&ref, qkv, dout, d0, b, t, c, nh, nkv, window, heads);
        emulate_forward(out, lse, top, qkv, b, t, c, nh, nkv, window, heads, LWC_FA_SYNC);
        float *bh_top = malloc(sizeof(float) * (size_t)heads);
        double *bh_ref = malloc(sizeof(double) * (size_t)heads);
        for (int64_t bh = 0; bh < heads; bh++) {
            bh_top[bh] = -INFINITY, bh_ref[bh] = -INFINITY;
            for (int64_t i = 0; i < t; i++)
                bh_top[bh] = fmaxf(bh_top[bh], top[bh * t + i]),
                bh_ref[bh] = fmax(bh_ref[bh], ref.rowmax[bh * t + i]);
        }
        float *ro = calloc((size_t)n, sizeof(float)), *rl = calloc((size_t)nl, sizeof(float));
        for (int64_t i = 0; i < n; i++)
            ro[i] = (float)ref.out[i];
        for (int64_t i = 0; i < nl; i++)
            rl[i] = (float)ref.lse[i];
        emulate_backward(dqkv, dout, qkv, ro, rl, b, t, c, nh, nkv, window, heads, LWC_FA_SYNC);
        /* over the heads emulated only: the rest of out is 0 on both sides, of dqkv d0 (a K or
         * V column counts as its KV head's first query head) */
        for (int64_t i = 0; i < nq; i++) {
            const int64_t col = i % ld, bi = i / ld / t;
            const int64_t head = col < c ? col / hd : (col - c) / hd % nkv * group;
            if (bi * nh + head >= heads) dqkv[i] = (float)(ref.dqkv[i] = d0[i]);
        }
        printf("  b %lld, t %lld, c %lld, nh %lld (head dim %lld), nkv %lld, window %d, %lld "
               "heads%s: out %.2e, lse %.2e, dqkv %.2e, largest score %.2e\n",
               (long long)b, (long long)t, (long long)c, (long long)nh, (long long)(c / nh),
               (long long)nkv, window, (long long)heads, hot >= 0 ? ", a hot head" : "",
               gemm_measure(out, ref.out, n), lse_measure(lse, ref.lse, nl),
               gemm_measure(dqkv, ref.dqkv, nq), lse_measure(bh_top, bh_ref, heads));
        fflush(stdout);
        free(qkv), free(dout), free(d0), free(out), free(lse), free(dqkv), free(ro), free(rl);
        free(ref.out), free(ref.lse), free(ref.dqkv), free(ref.rowmax), free(top), free(bh_top);
        free(bh_ref);
    }
}
