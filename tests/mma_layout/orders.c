/* orders.c: the grids' two block orders (mma_layout.h's LWC_FA_ORDER_*): each covers every
 * (batch x head, tile) block once; "heads" keeps a head's tiles together, the heaviest first;
 * "work" never lets a block's steps grow along the grid; and the emulated kernels give the same
 * bits under either. */
#include "mma_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* b sequences, nh query heads reading nkv KV heads, t rows, head dim hd */
typedef struct {
    int64_t b, nh, nkv, t;
    int hd;
} grid_shape;

/* The steps of `tile` of `kernel` from the step ranges (a dk/dv block runs its KV head's group
 * of query heads in turn). */
static int64_t work_of(const grid_shape *g, int kernel, int tile, int window) {
    const int r0 = tile * LWC_FA_BLOCK;
    if (kernel != LWC_FA_DKDV)
        return lwc_fa_last_key_step(r0, g->t) - lwc_fa_first_key_step(r0, window) + 1;
    const int m = LWC_FA_KV_STEP(g->hd);
    const int64_t per_head =
        lwc_fa_last_query_step(r0, g->t, m, window) - lwc_fa_first_query_step(r0, m) + 1;
    return g->nh / g->nkv * per_head;
}

typedef struct {
    bool once;       /* every (pair, tile) exactly once, nothing out of range */
    bool together;   /* a pair's tiles consecutive, its work never growing */
    bool decreasing; /* the work never growing along the whole grid, at every window */
    bool steps;      /* lwc_fa_steps is the step ranges' count */
} order_facts;

static order_facts facts_of(const grid_shape *g, int kernel, int order) {
    static const int windows[] = {0, 1, 50, 64, 100, 256};
    const int tiles = lwc_fa_tiles(g->t, LWC_FA_BLOCK);
    const int64_t pairs = g->b * (kernel == LWC_FA_DKDV ? g->nkv : g->nh);
    const int group = (int)(g->nh / g->nkv);
    int *seen = calloc((size_t)(pairs * tiles), sizeof(int));
    order_facts f = {true, true, true, true};
    for (size_t wi = 0; wi < sizeof windows / sizeof windows[0]; wi++) {
        const int window = windows[wi];
        int64_t before = -1, before_pair = -1;
        for (int64_t block = 0; block < pairs * tiles; block++) {
            int bh, tile;
            lwc_fa_block(block, tiles, pairs, kernel, order, &bh, &tile);
            if (bh < 0 || bh >= pairs || tile < 0 || tile >= tiles) {
                f.once = false;
                continue;
            }
            if (wi == 0) seen[bh * tiles + tile]++;
            const int64_t work = work_of(g, kernel, tile, window);
            f.steps = f.steps && lwc_fa_steps(kernel, tile, g->t, g->hd, window) *
                                         (kernel == LWC_FA_DKDV ? group : 1) ==
                                     work;
            if (block > 0) {
                f.decreasing = f.decreasing && work <= before;
                f.together =
                    f.together &&
                    (bh == before_pair ? work <= before : bh > before_pair && block % tiles == 0);
            }
            before = work, before_pair = bh;
        }
    }
    for (int64_t i = 0; i < pairs * tiles; i++)
        f.once = f.once && seen[i] == 1;
    free(seen);
    return f;
}

void test_orders(void) {
    static const grid_shape shapes[] = {
        {1, 1, 1, 1, 64},      /* one row */
        {1, 2, 2, 64, 64},     /* one tile a pair */
        {2, 3, 3, 70, 64},     /* t past one tile */
        {3, 2, 1, 333, 128},   /* multi-query, head dim 128 (dk/dv steps of 32), t odd */
        {2, 4, 2, 1000, 64},   /* pairs of query heads, t not a multiple of 64 */
        {8, 12, 12, 1024, 64}, /* GPT-2 small */
        {8, 6, 6, 2048, 128},  /* its width in heads of 128 */
        {2, 12, 4, 777, 128},  /* grouped, head dim 128 */
    };
    bool heads_once = true, heads_together = true, work_once = true, work_decreasing = true;
    bool steps = true, heads_grow = true;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int kernel = LWC_FA_FORWARD; kernel <= LWC_FA_DQ; kernel++) {
            const grid_shape *g = &shapes[s];
            const order_facts h = facts_of(g, kernel, LWC_FA_ORDER_HEADS);
            const order_facts w = facts_of(g, kernel, LWC_FA_ORDER_WORK);
            heads_once = heads_once && h.once, heads_together = heads_together && h.together;
            work_once = work_once && w.once, work_decreasing = work_decreasing && w.decreasing;
            steps = steps && h.steps && w.steps;
            /* the checks can fail: with several pairs of several tiles, "heads" starts a
             * pair's heaviest tile after another's lightest */
            if (g->b * g->nkv > 1 && g->t > LWC_FA_BLOCK) heads_grow = heads_grow && !h.decreasing;
        }
    EXPECT(heads_once);
    EXPECT(heads_together);
    EXPECT(work_once);
    EXPECT(work_decreasing);
    EXPECT(steps);
    EXPECT(heads_grow);
    printf("test_mma_layout: grid orders over %zu shapes, each kernel, windows 0 to 256: every "
           "block once in both; \"heads\" a head's tiles together, heaviest first; \"work\" no "
           "block's steps above the one before it (\"heads\"'s do grow)\n",
           sizeof shapes / sizeof shapes[0]);
}

/* ---- the emulated kernels under both orders ------------------------------------------------- */

static float *nans(int64_t n) {
    float *p = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        p[i] = NAN;
    return p;
}

/* The forward's out, lse and rows' maxima and the backward's dqkv of one shape, under `order`
 * and staging `variant` (outputs start as NaN, so a block left out shows). */
static void run_in(int order, int variant, const float *qkv, const float *dout, const float *d0,
                   const grid_shape *g, int window, float *out, float *lse, float *top,
                   float *dqkv) {
    const int64_t c = g->nh * g->hd, nq = g->b * g->t * (c + 2 * g->nkv * g->hd);
    emu_order = order;
    emulate_forward(out, lse, top, qkv, g->b, g->t, c, g->nh, g->nkv, window, g->b * g->nh,
                    variant);
    memcpy(dqkv, d0, sizeof(float) * (size_t)nq);
    emulate_backward(dqkv, dout, qkv, out, lse, g->b, g->t, c, g->nh, g->nkv, window, g->b * g->nh,
                     variant);
    emu_order = LWC_FA_ORDER_HEADS;
}

static bool same_bits(const float *a, const float *b, int64_t n) {
    return memcmp(a, b, sizeof(float) * (size_t)n) == 0;
}

void test_orders_emulated(void) {
    /* the synchronous staging, and the pipelined one (a bf16 qkv's) */
    static const struct {
        grid_shape g;
        int window, variant;
    } cases[] = {{{2, 3, 3, 130, 64}, 0, LWC_FA_SYNC}, {{2, 4, 2, 100, 128}, 40, LWC_FA_PIPELINED}};
    for (size_t s = 0; s < sizeof cases / sizeof cases[0]; s++) {
        const grid_shape *g = &cases[s].g;
        const int64_t c = g->nh * g->hd, n = g->b * g->t * c, nl = g->b * g->nh * g->t;
        const int64_t nq = g->b * g->t * (c + 2 * g->nkv * g->hd);
        float *qkv = random_array(nq, 2.0f, true), *dout = random_array(n, 1.0f, true);
        float *d0 = random_array(nq, 0.01f, false);
        float *out[2], *lse[2], *top[2], *dqkv[2];
        for (int o = 0; o < 2; o++) {
            out[o] = nans(n), lse[o] = nans(nl), top[o] = nans(nl), dqkv[o] = nans(nq);
            run_in(o == 0 ? LWC_FA_ORDER_HEADS : LWC_FA_ORDER_WORK, cases[s].variant, qkv, dout, d0,
                   g, cases[s].window, out[o], lse[o], top[o], dqkv[o]);
        }
        bool written = true; /* qkv is finite: a NaN is a block that did not run */
        for (int64_t i = 0; i < n; i++)
            written = written && !isnan(out[1][i]);
        for (int64_t i = 0; i < nq; i++)
            written = written && !isnan(dqkv[1][i]);
        EXPECT(written);
        EXPECT(same_bits(out[0], out[1], n) && same_bits(lse[0], lse[1], nl));
        EXPECT(same_bits(top[0], top[1], nl) && same_bits(dqkv[0], dqkv[1], nq));
        printf("test_mma_layout: b %lld, t %lld, nh %lld, nkv %lld, window %d, head dim %d, %s "
               "staging: the emulated kernels give the same bits in grid order \"work\" as in "
               "\"heads\"\n",
               (long long)g->b, (long long)g->t, (long long)g->nh, (long long)g->nkv,
               cases[s].window, g->hd,
               cases[s].variant == LWC_FA_PIPELINED ? "pipelined" : "synchronous");
        for (int o = 0; o < 2; o++)
            free(out[o]), free(lse[o]), free(top[o]), free(dqkv[o]);
        free(qkv), free(dout), free(d0);
    }
}
