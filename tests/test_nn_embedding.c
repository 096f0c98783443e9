/* test_nn_embedding.c: lw_embedding_forward against a float64 loop, the gradients of
 * lw_embedding_backward (token rows used several times, and a row never used) against finite
 * differences, the accumulate (+=) contract, and a NULL position table and gradient. */
#include "nn_check.h"

#include <stdio.h>
#include <stdlib.h>

static void check_tol(const char *what, int64_t b, int64_t t, int64_t c, double err, double tol) {
    nn_within(err, tol, "embedding b=%lld t=%lld c=%lld %s", (long long)b, (long long)t,
              (long long)c, what);
}

typedef struct {
    float *y, *wte, *wpe, *r;
    int32_t *tokens;
    int64_t b, t, c;
} ctx_t;

static double loss(void *p) {
    ctx_t *x = p;
    CHECK_OK(lw_embedding_forward(NULL, x->y, x->tokens, x->wte, x->wpe, LW_DTYPE_F32, x->b, x->t,
                                  x->c));
    return nn_dot(x->y, x->r, x->b * x->t * x->c);
}

/* worst |y - (wte[tok] + wpe[t])|, the reference summed in double */
static double forward_error(const ctx_t *x, const float *wpe) {
    double worst = 0;
    for (int64_t bt = 0; bt < x->b * x->t; bt++)
        for (int64_t i = 0; i < x->c; i++) {
            double ref = x->wte[(int64_t)x->tokens[bt] * x->c + i];
            if (wpe) ref += wpe[(bt % x->t) * x->c + i];
            worst = fmax(worst, fabs(x->y[bt * x->c + i] - (double)(float)ref));
        }
    return worst;
}

/* vocab rows, of which tokens use only [0, vocab - 1): the last row's gradient must stay 0 */
static void test_shape(int64_t b, int64_t t, int64_t c, int64_t vocab) {
    int64_t n = b * t;
    ctx_t x = {nn_alloc(n * c),
               nn_alloc(vocab * c),
               nn_alloc(t * c),
               nn_alloc(n * c),
               malloc(sizeof(int32_t) * (size_t)n),
               b,
               t,
               c};
    float *dwte = nn_alloc(vocab * c), *dwpe = nn_alloc(t * c);
    nn_fill(x.wte, vocab * c, 1.0f);
    nn_fill(x.wpe, t * c, 1.0f);
    nn_fill(x.r, n * c, 1.0f);
    for (int64_t i = 0; i < n; i++) {
        int32_t k = (int32_t)((nn_rand(1.0f) + 1.0f) * 0.5f * (float)(vocab - 1));
        x.tokens[i] = k < vocab - 1 ? k : (int32_t)(vocab - 2);
    }

    /* (a) forward: a float sum of two floats is correctly rounded, and so is the double sum
     * rounded to float (53 >= 2 * 24 + 2 bits), so the two agree exactly */
    CHECK_OK(lw_embedding_forward(NULL, x.y, x.tokens, x.wte, x.wpe, LW_DTYPE_F32, b, t, c));
    check_tol("forward", b, t, c, forward_error(&x, x.wpe), 0.0);

    /* (b) L is linear in wte and wpe: no truncation error in the central differences, only
     * float32 rounding of the moved y entries over 2 eps (measured <= 6e-6 at eps = 1e-2);
     * 1e-3 is a 100x margin, and a missed or doubled row (repeated tokens) is off by O(1). */
    CHECK_OK(lw_embedding_backward(NULL, dwte, dwpe, x.r, x.tokens, b, t, c));
    const float eps = 1e-2f;
    const double tol = 1e-3;
    check_tol("fd dwte", b, t, c, nn_fd_worst(x.wte, dwte, vocab * c, loss, &x, eps, 400), tol);
    check_tol("fd dwpe", b, t, c, nn_fd_worst(x.wpe, dwpe, t * c, loss, &x, eps, 400), tol);
    int unused_zero = 1;
    for (int64_t i = 0; i < c; i++)
        unused_zero &= dwte[(vocab - 1) * c + i] == 0.0f;
    CHECK(unused_zero);

    /* (c) accumulate into random contents; repeated tokens add in another order than into a
     * zeroed buffer, hence a rounding-level tolerance instead of bit equality */
    float *pte = nn_alloc(vocab * c), *ppe = nn_alloc(t * c);
    float *ate = nn_alloc(vocab * c), *ape = nn_alloc(t * c);
    nn_fill(pte, vocab * c, 1.0f);
    nn_fill(ppe, t * c, 1.0f);
    memcpy(ate, pte, sizeof(float) * (size_t)(vocab * c));
    memcpy(ape, ppe, sizeof(float) * (size_t)(t * c));
    CHECK_OK(lw_embedding_backward(NULL, ate, ape, x.r, x.tokens, b, t, c));
    check_tol("accumulate dwte", b, t, c, nn_accumulate_error(ate, pte, dwte, vocab * c), 1e-6);
    check_tol("accumulate dwpe", b, t, c, nn_accumulate_error(ape, ppe, dwpe, t * c), 1e-6);

    /* (d) no position table: y is the token rows; no position gradient: dwte unchanged */
    CHECK_OK(lw_embedding_forward(NULL, x.y, x.tokens, x.wte, NULL, LW_DTYPE_F32, b, t, c));
    check_tol("forward, no wpe", b, t, c, forward_error(&x, NULL), 0.0);
    float *dwte2 = nn_alloc(vocab * c);
    CHECK_OK(lw_embedding_backward(NULL, dwte2, NULL, x.r, x.tokens, b, t, c));
    CHECK(memcmp(dwte2, dwte, sizeof(float) * (size_t)(vocab * c)) == 0);

    free(x.y), free(x.wte), free(x.wpe), free(x.r), free(x.tokens);
    free(dwte), free(dwpe), free(pte), free(ppe), free(ate), free(ape), free(dwte2);
}

/* A negative id lies outside every range of the table's rows, the whole table's too: its
 * position looks up zeros (plus its position row) and adds no gradient, instead of reading
 * before the table (which it did when the whole-table kernel was a kernel of its own). */
static void test_negative_id(void) {
    const int32_t tokens[3] = {1, -4, 2};
    float wte[3 * 4], wpe[3 * 4], y[3 * 4], dy[3 * 4], dwte[3 * 4] = {0}, dwpe[3 * 4] = {0};
    for (int i = 0; i < 12; i++)
        wte[i] = 1.0f + (float)i, wpe[i] = 0.5f * (float)i, dy[i] = 0.25f * (float)i;
    CHECK_OK(lw_embedding_forward(NULL, y, tokens, wte, wpe, LW_DTYPE_F32, 1, 3, 4));
    CHECK_OK(lw_embedding_backward(NULL, dwte, dwpe, dy, tokens, 1, 3, 4));
    bool ok = true;
    for (int i = 0; i < 4; i++) {
        ok &= y[4 + i] == wpe[4 + i];                       /* position 1: its position row */
        ok &= y[i] == wte[4 + i] + wpe[i];                  /* position 0: token 1 */
        ok &= dwte[i] == 0.0f;                              /* token 0: nobody */
        ok &= dwte[4 + i] == dy[i] && dwte[8 + i] == dy[8 + i]; /* tokens 1 and 2 */
        ok &= dwpe[4 + i] == dy[4 + i];                     /* positions all add */
    }
    CHECK(ok);
}

int main(void) {
    test_shape(2, 3, 13, 5);
    test_shape(3, 7, 9, 4);
    test_shape(1, 1, 1, 2);
    test_shape(4, 33, 70, 50); /* c past 64: the vector loops' main body and tail both run */
    test_negative_id();
    return check_exit("test_nn_embedding");
}
