/* cross_entropy.c: the LM head with its cross-entropy against the CPU: on one rank (forward,
 * backward) and vocabulary-parallel (a rank's partial forward and backward, the combination of
 * the ranks' statistics), in every matmul precision, with fp32 and bf16 heads and logits, with
 * and without the logits' softcap; the capped cases on every device against a float64
 * reference too (cross_entropy_reference.c). */
#include "cross_entropy_reference.h"

/* ---- the cases ------------------------------------------------------------------------------- *
 * The head on one rank: n rows of c channels, a vocabulary of v, every ignore_every-th target
 * ignored (0: none), with dh or not, a bf16 head, bf16 logits. Those with v 50304 are of a GPU's
 * size. */

static const struct {
    int64_t n, c, v;
    int ignore_every;
    bool dh, bf16_w, bf16_logits;
    float cap; /* the logits' softcap (0: none) */
} cross_entropy_shapes[] = {
    {7, 33, 50, 3, true, false, false, 0},       /* one chunk: the probabilities are kept */
    {1, 8, 1, 0, true, false, false, 0},         /* one row, one class: loss 0, gradient 0 */
    {300, 40, 1000, 4, false, false, false, 0},  /* dh NULL */
    {5, 8, 10, 1, true, false, false, 0},        /* every target ignored */
    {0, 8, 10, 0, true, false, false, 0},        /* no rows */
    {3000, 64, 50304, 5, true, false, false, 0}, /* three of the GPU's chunks of 1334 rows, the
                                                 last short */
    {7, 33, 50, 3, true, true, false, 0},        /* a bf16 head */
    {300, 40, 1000, 4, false, true, false, 0},   /* no dh: w is read by the logits alone */
    {3000, 64, 50304, 5, true, true, false, 0},
    {7, 33, 50, 3, true, false, true, 0},       /* bf16 logits: one chunk, the logits kept */
    {300, 40, 1000, 4, false, true, true, 0},   /* with a bf16 head, no dh */
    {5, 8, 10, 1, true, false, true, 0},        /* every target ignored */
    {3000, 64, 50304, 5, true, false, true, 0}, /* two of the GPU's bf16 chunks of 2668 rows */
    /* capped at 1, where logits reach ~1.5 and the cap bends them: one chunk (the capped logits
     * kept), a bf16 head, bf16 logits, no dh; nanochat's 15 at a GPU's size (its chunks, the
     * capped logits recomputed; the CPU's chunks: test_nn_cross_entropy.c) */
    {7, 9, 50, 3, true, false, false, 1.0f},
    {7, 9, 50, 3, true, true, false, 1.0f},
    {7, 9, 50, 3, true, false, true, 1.0f},
    {300, 16, 1000, 4, false, false, false, 1.0f},
    {3000, 64, 50304, 5, true, false, false, 15.0f},
    {3000, 64, 50304, 5, true, false, true, 15.0f},
};

/* A rank's rows [first, first + v) of a vocabulary `vocab` (rows past it: padding), with a bf16
 * head or bf16 logits. Those with v 25152 are of a GPU's size. */
static const struct {
    int64_t n, c, v, first, vocab;
    bool bf16_w, bf16_logits;
    float cap;
} head_shapes[] = {
    {7, 33, 25, 25, 50, false, false, 0},             /* one chunk: the logits are kept */
    {7, 33, 26, 26, 50, false, false, 0},             /* the last rank: 24 real rows, 2 of
                                                      padding */
    {5, 8, 4, 8, 8, false, false, 0},                 /* only padding here */
    {0, 8, 4, 0, 8, false, false, 0},                 /* no rows */
    {3000, 64, 25152, 25152, 50257, false, false, 0}, /* two of the GPU's chunks of 2668 rows;
                                                      47 of padding */
    {7, 33, 26, 26, 50, true, false, 0},              /* a bf16 head */
    {3000, 64, 25152, 25152, 50257, true, false, 0},
    {7, 33, 26, 26, 50, false, true, 0},             /* bf16 logits */
    {3000, 64, 25152, 25152, 50257, false, true, 0}, /* one of the GPU's bf16 chunks */
    {7, 9, 26, 26, 50, false, false, 1.0f},          /* capped: the last rank, padding */
    {7, 9, 25, 0, 50, true, false, 1.0f},            /* the first rank, a bf16 head */
    {7, 9, 26, 26, 50, false, true, 1.0f},           /* bf16 logits */
    {3000, 64, 25152, 25152, 50257, false, false, 15.0f},
};

/* ---- the head on one rank: tolerances, runs and hooks ---------------------------------------- *
 * fp32, 1e-5: the logits are fp32 GEMMs summed in other orders (each logit a few ulps of its
 * terms apart), the sums of exponentials are in double on both devices, and the GPU's expf is
 * within 2 ulps of the CPU's: losses relative to each value, lse as a log (lse_measure), dh and
 * dw as GEMM results (gemm). The mean loss: the same rows summed in double, 1e-6. With every
 * target ignored both leave dh and dw exactly as they were. The backward runs after the forward
 * on its own device (the scratch carries the probabilities when the rows fit one chunk) and
 * takes that forward's lse, as a training step does.
 * bf16 (the large shape: c 64, v 50304, three chunks of the GPU's, every 5th target ignored; h in
 * [-1, 1), w in [-0.5, 0.5)), as the linear layer derives: a logit, a sum of 64 products, is off
 * by ~sqrt(64) 2.3e-3 |term| = 3e-3; a row's loss, lse - the target's logit, carries its target
 * logit's error (the lse averages thousands of them): 1e-2 at most over 2400 rows, 3e-2 absolute
 * allowed (the losses are ~12); lse moves by ~1.5e-3 (1e-3 relative, as a log); the mean loss
 * averages 2400 independent errors, ~6e-5: 1e-4 relative (1.2e-3). dh is dominated by -w[target]
 * (dlogits' own rounding is ~0 there: n / count (p - 1) rounds to 1.25 within 2e-5), so its error
 * is w's rounding, at most 2^-8 of the largest value; dw likewise by h's: 1e-2 of the largest
 * value. Simulated (operands rounded as the GPU rounds them, sums exact): losses 9.8e-3 absolute,
 * lse 1.5e-3, mean loss 2e-6, dh 2.7e-3, dw 1.9e-3. And bf16 must have run: losses further than
 * 1e-3 from the CPU's somewhere (fp32 allows 1.2e-4), dh and dw further than 5e-4 of their
 * largest value.
 * TF32 (the same shape): tensor cores take 10-bit mantissas, 8 times finer than bf16, but cuBLAS
 * may truncate rather than round them, which biases every product the same way. Simulated with
 * both (operands rounded, or truncated, to TF32 as the GPU would, sums exact): losses 1.5e-3
 * absolute rounded, 4.5e-3 truncated; lse 1.6e-5 and 1.3e-4 (lse_measure); the mean loss 4e-7 and
 * 9.4e-5 relative (the truncation's bias does not average out); dh 4.8e-4 and 1.3e-3, dw 2.7e-4
 * and 1.2e-3 of the largest value. Tolerances 1.5e-2, 1e-3, 5e-4, and 5e-3 for dh and dw (as the
 * linear layer's). That TF32 ran is the linear layer's check: cuBLAS's FAST_TF32 permits tensor
 * cores, it does not oblige them, and bf16's rounding is lwopt's own. */

static int64_t gpu_chunk_rows(int64_t n, int64_t v) {
    int64_t rows = ((int64_t)1 << 26) / v;
    rows = rows < 1 ? 1 : rows;
    return rows < n ? rows : n;
}

/* On a GPU: the scratch its cross-entropy asks for, its chunks of 2^26 floats of logits. */
static void expect_gpu_scratch(int64_t n, int64_t v) {
    if (have_gpu())
        EXPECT_EQ(lw_cross_entropy_scratch_floats(other_stream(), n, v), gpu_chunk_rows(n, v) * v);
}

/* ", softcap C" for a capped head, else nothing: the end of a case's shape */
static void softcap_note(char note[24], float cap) {
    note[0] = '\0';
    if (cap > 0) snprintf(note, 24, ", softcap %g", (double)cap);
}

typedef struct {
    char shape[112];
    int64_t n, c, v;
    int ignore_every;
    bool dh, large;
    float *h, *w, *dh0, *dw0;
    int32_t *targets;
    uint16_t *w16;    /* a bf16 head (w: its widened values), or NULL */
    bool bf16_logits; /* the logits (and dlogits) in bf16 */
    float cap;        /* the logits' softcap (0: none) */
    /* capped fp32 logits: the float64 reference's losses, lse, mean loss, dh and dw (NULL:
     * none) */
    double *ref_losses, *ref_lse, *ref_dh, *ref_dw, ref_loss;
} ce_args;

/* bf16 logits: the CPU rounds its fp32 logits, a GPU its own (fp32 or bf16-product) sums, so a
 * logit may land a bf16 step (2^-8 of itself) from the CPU's under any product: bf16 products'
 * budget covers it (a loss moves by its target logit's step, ~1e-2 at these logits; lse and the
 * mean by far less; dlogits are rounded to bf16 under bf16 products already), without asking
 * that the results differ. */
static lw_matmul ce_budget(lw_matmul m, bool bf16_logits) {
    return bf16_logits ? LW_MATMUL_BF16 : m;
}
static measure any_difference(measure m) { return differing(m, 0); }

static void ce_forward_measures(lw_matmul m, measure *losses, measure *lse, measure *loss) {
    if (m == LW_MATMUL_FP32)
        *losses = scaled(1e-5), *lse = lse_measure(1e-5), *loss = relative(1e-6, 1e-30);
    else if (m == LW_MATMUL_BF16)
        *losses = differing(absolute(3e-2), 1e-3), *lse = lse_measure(1e-3),
        *loss = relative(1e-4, 1e-30);
    else
        *losses = absolute(1.5e-2), *lse = lse_measure(1e-3), *loss = relative(5e-4, 1e-30);
}

static measure ce_grad_measure(lw_matmul m) {
    return m == LW_MATMUL_FP32   ? gemm(1e-5)
           : m == LW_MATMUL_BF16 ? differing(gemm(1e-2), 5e-4)
                                 : gemm(5e-3);
}

static void run_cross_entropy_forward(run *r, const void *p) {
    const ce_args *a = p;
    const lw_dtype lt = a->bf16_logits ? LW_DTYPE_BF16 : LW_DTYPE_F32;
    measure ml, ms, mloss;
    ce_forward_measures(ce_budget(r->matmul, a->bf16_logits), &ml, &ms, &mloss);
    if (a->bf16_logits) ml = any_difference(ml);
    const float *h = input(r, a->h, a->n * a->c);
    const int32_t *targets = input_ids(r, a->targets, a->n);
    float *work = scratch(r, lw_cross_entropy_scratch_floats(r->s, a->n, a->v));
    for (int widened = 0; widened < 1 + (a->w16 != NULL); widened++) {
        lw_dtype wt;
        const void *w = input_typed(r, a->w, widened ? NULL : a->w16, a->v * a->c, &wt);
        float *losses = output(r, widened ? "losses (widened)" : "losses", a->n, ml);
        float *lse = output(r, widened ? "lse (widened)" : "lse", a->n, ms);
        double loss = -1;
        call(r, lw_cross_entropy_forward(r->s, losses, lse, work, h, w, wt, lt, a->cap, targets,
                                         a->n, a->c, a->v, &loss));
        result_of(r, widened ? "loss (widened)" : "loss", loss, mloss);
    }
    if (!a->bf16_logits) return;
    /* the same head with fp32 logits, for the CPU's check that the rounding happened */
    ce_forward_measures(r->matmul, &ml, &ms, &mloss);
    float *losses32 = output(r, "losses (fp32 logits)", a->n, ml);
    double loss = -1;
    call(r, lw_cross_entropy_forward(r->s, losses32, scratch(r, a->n), work, h,
                                     input(r, a->w, a->v * a->c), LW_DTYPE_F32, LW_DTYPE_F32,
                                     a->cap, targets, a->n, a->c, a->v, &loss));
}

/* loss_scale n: dlogits = n / count (p - onehot), entries of order 1, not 1 / n */
static void run_cross_entropy_backward(run *r, const void *p) {
    const ce_args *a = p;
    const float *h = input(r, a->h, a->n * a->c);
    const int32_t *targets = input_ids(r, a->targets, a->n);
    float *work = scratch(r, lw_cross_entropy_scratch_floats(r->s, a->n, a->v));
    float *losses = scratch(r, a->n), *lse = scratch(r, a->n);
    const lw_dtype lt = a->bf16_logits ? LW_DTYPE_BF16 : LW_DTYPE_F32;
    measure m = ce_grad_measure(ce_budget(r->matmul, a->bf16_logits));
    if (a->bf16_logits) m = any_difference(m);
    for (int widened = 0; widened < 1 + (a->w16 != NULL); widened++) {
        lw_dtype wt;
        const void *w = input_typed(r, a->w, widened ? NULL : a->w16, a->v * a->c, &wt);
        float *dh =
            a->dh ? accumulated(r, widened ? "dh (widened)" : "dh", a->dh0, a->n * a->c, m) : NULL;
        float *dw = accumulated(r, widened ? "dw (widened)" : "dw", a->dw0, a->v * a->c, m);
        double loss = 0;
        call(r, lw_cross_entropy_forward(r->s, losses, lse, work, h, w, wt, lt, a->cap, targets,
                                         a->n, a->c, a->v, &loss));
        call(r, lw_cross_entropy_backward(r->s, dh, dw, work, h, w, wt, lt, a->cap, targets, lse,
                                          a->n, a->c, a->v, (float)a->n));
    }
}

/* got = start + ref (ref a gradient in float64), n values: within tol of 1% of the largest */
static void near_gradient(const kernel_case *k, const run *r, const char *what, const float *start,
                          const double *ref, int64_t n, double tol) {
    double *want = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1)), top = 0;
    for (int64_t i = 0; i < n; i++) {
        want[i] = start[i] + ref[i];
        top = fmax(top, fabs(want[i]));
    }
    near_reference(k, r, what, want, n, tol, 1e-2 * top + 1e-30);
    free(want);
}

/* The capped head against float64 (fp32 GEMMs and tanhf: the forward within 1e-5 as against the
 * CPU, lse as a log; the gradients within 1e-4 of 1% of the largest value, the differences'
 * own error near 1e-10): the softcap reached the loss and the gradients (a head without it is
 * off by far more at cap 1). */
static void capped_reference(const kernel_case *k, const run *r, bool forward) {
    const ce_args *a = k->args;
    if (forward) {
        near_reference(k, r, "losses", a->ref_losses, a->n, 1e-5, 1.0);
        near_reference(k, r, "lse", a->ref_lse, a->n, 1e-5, 1.0);
        expect(k, r, fabs(result_named(r, "loss") - a->ref_loss) <= 1e-5 * fmax(1.0, a->ref_loss),
               "the capped mean loss is float64's");
        return;
    }
    if (a->dh) near_gradient(k, r, "dh", a->dh0, a->ref_dh, a->n * a->c, 1e-4);
    near_gradient(k, r, "dw", a->dw0, a->ref_dw, a->v * a->c, 1e-4);
}

/* every target ignored: loss 0, nothing added */
static void after_cross_entropy(const kernel_case *k, const run *r) {
    const ce_args *a = k->args;
    const bool forward = strcmp(k->kernel, "cross_entropy_forward") == 0;
    if (a->ref_losses != NULL) capped_reference(k, r, forward);
    if (a->w16 != NULL && forward) {
        same_as_widened(k, r, "losses", a->n);
        same_as_widened(k, r, "lse", a->n);
        if (on_cpu(r->device))
            expect(k, r, result_named(r, "loss") == result_named(r, "loss (widened)"),
                   "a bf16 head gives its widening's mean loss, bit for bit");
    } else if (a->w16 != NULL) {
        if (a->dh) same_as_widened(k, r, "dh", a->n * a->c);
        same_as_widened(k, r, "dw", a->v * a->c);
    }
    if (forward && a->bf16_logits && on_cpu(r->device) && a->ignore_every != 1) {
        /* bf16 logits round: some loss moves, none by more than a few of its logits' steps */
        const float *l16 = f32_of(r, "losses"), *l32 = f32_of(r, "losses (fp32 logits)");
        double most = 0;
        for (int64_t i = 0; i < a->n; i++)
            most = fmax(most, fabs((double)l16[i] - l32[i]));
        expect(k, r, most > 0 && most < 3e-2, "bf16 logits: the losses within rounding of fp32's");
    }
    if (a->ignore_every != 1) return;
    if (forward) {
        expect(k, r, result_named(r, "loss") == 0.0, "no counted row: loss 0");
        return;
    }
    expect(k, r,
           memcmp(f32_of(r, "dh"), a->dh0, 4 * (size_t)(a->n * a->c)) == 0 &&
               memcmp(f32_of(r, "dw"), a->dw0, 4 * (size_t)(a->v * a->c)) == 0,
           "no counted row: dh and dw as they were");
}

/* ---- the vocabulary-parallel head (tensor parallelism) --------------------------------------- *
 * One rank's rows [first, first + v) of a vocabulary `vocab` (rows past it: padding) and a second
 * rank's statistics made up on the host, as the all-gather would bring them. Tolerances as the
 * one-rank head's (fp32 GEMMs in other orders, expf within 2 ulps, sums in double on both): the
 * statistics' max and target logit are logits (1e-5 of the largest), the sums 1e-5 relative; the
 * combination runs on the CPU's statistics on every device, in the same order, with the same
 * double formulas: 1e-6 (exp and log of CUDA and glibc differ in the last double bits only); dh
 * and dw are GEMM results, 1e-5 of the largest value. The backward runs after its own device's
 * partial forward (the scratch) with the CPU's lse: dlogits depend on lse alone. The padding's dw
 * must stay as it was, exactly.
 * TF32 and bf16 (the large shape: a rank of two over GPT-2's vocabulary, 47 rows of padding, the
 * one-rank head's inputs), simulated as the one-rank head's (operands rounded to bf16, rounded or
 * truncated to TF32, sums exact; the backward's dlogits rounded too, as the GPU rounds them for
 * its two GEMMs): bf16: maxima and target logits 9.9e-4 of their scale, sums 1.0e-2 (each sum
 * moves with its row's max), dh 4.4e-3, dw 3.3e-3 of the largest value (this rank's share of dh
 * is smaller than the whole head's, its rounding not); TF32 rounded and truncated: logits 1.1e-4
 * and 4.2e-4, sums 1.3e-3 and 3.9e-3, dh 5.3e-4 and 1.2e-3, dw 2.4e-4 and 8.1e-4. Tolerances:
 * bf16 5e-3, 3e-2, and 2e-2 for dh and dw (the logits further than 1e-4 from fp32's, dh and dw
 * than 5e-4: bf16 ran); TF32 2e-3, 1.5e-2, and 5e-3. The combination takes no GEMM. */

typedef struct {
    char shape[128];
    int64_t n, c, v, first, vocab;
    bool large;
    float *h, *w, *stats, *lse, *dh0, *dw0; /* stats: [2, 3, n], this rank's and a peer's */
    int32_t *targets;
    uint16_t *w16;    /* this rank's rows of a bf16 head (w: their widened values), or NULL */
    bool bf16_logits; /* the logits (and dlogits) in bf16: bf16 products' budget, as above */
    float cap;        /* the logits' softcap (0: none) */
    /* capped fp32 logits: the float64 reference's statistics of this rank, dh and dw of the loss
     * with the peer's statistics held constant (NULL: none) */
    double *ref_stats, *ref_dh, *ref_dw;
} head_args;

static measure head_stats_measure(lw_matmul m) {
    return m == LW_MATMUL_FP32   ? stats_measure(1e-5, 1e-5)
           : m == LW_MATMUL_TF32 ? stats_measure(2e-3, 1.5e-2)
                                 : differing(stats_measure(5e-3, 3e-2), 1e-4);
}
static measure head_grad_measure(lw_matmul m) {
    return m == LW_MATMUL_FP32   ? gemm(1e-5)
           : m == LW_MATMUL_TF32 ? gemm(5e-3)
                                 : differing(gemm(2e-2), 5e-4);
}

static void run_partial_forward(run *r, const void *p) {
    const head_args *a = p;
    const float *h = input(r, a->h, a->n * a->c);
    const int32_t *targets = input_ids(r, a->targets, a->n);
    float *work = scratch(r, lw_cross_entropy_scratch_floats(r->s, a->n, a->v));
    const lw_dtype lt = a->bf16_logits ? LW_DTYPE_BF16 : LW_DTYPE_F32;
    measure m = head_stats_measure(ce_budget(r->matmul, a->bf16_logits));
    if (a->bf16_logits) m = any_difference(m);
    for (int widened = 0; widened < 1 + (a->w16 != NULL); widened++) {
        lw_dtype wt;
        const void *w = input_typed(r, a->w, widened ? NULL : a->w16, a->v * a->c, &wt);
        float *stats = output(r, widened ? "stats (widened)" : "stats", 3 * a->n, m);
        call(r, lw_cross_entropy_partial_forward(r->s, stats, work, h, w, wt, lt, a->cap, targets,
                                                 a->n, a->c, a->v, a->first, a->vocab));
    }
}

/* capped: the statistics against float64's (the maxima and target logits are logits within 1e-5
 * of 1, the sums 1e-5 relative) */
static void after_partial_forward(const kernel_case *k, const run *r) {
    const head_args *a = k->args;
    if (a->w16 != NULL) same_as_widened(k, r, "stats", 3 * a->n);
    if (a->ref_stats != NULL) near_reference(k, r, "stats", a->ref_stats, 3 * a->n, 1e-5, 1.0);
}

static void run_combine(run *r, const void *p) {
    const head_args *a = p;
    const float *stats = input(r, a->stats, 6 * a->n);
    const int32_t *targets = input_ids(r, a->targets, a->n);
    float *losses = output(r, "losses", a->n, relative(1e-6, 1.0));
    float *lse = output(r, "lse", a->n, relative(1e-6, 1.0));
    double loss = -1;
    call(r, lw_cross_entropy_combine(r->s, losses, lse, stats, 2, targets, a->n, a->vocab, &loss));
    result_of(r, "loss", loss, relative(1e-6, 1.0));
}

static void run_partial_backward(run *r, const void *p) {
    const head_args *a = p;
    const float *h = input(r, a->h, a->n * a->c);
    const int32_t *targets = input_ids(r, a->targets, a->n);
    const float *lse = input(r, a->lse, a->n);
    float *stats = scratch(r, 3 * a->n);
    float *work = scratch(r, lw_cross_entropy_scratch_floats(r->s, a->n, a->v));
    const lw_dtype lt = a->bf16_logits ? LW_DTYPE_BF16 : LW_DTYPE_F32;
    measure m = head_grad_measure(ce_budget(r->matmul, a->bf16_logits));
    if (a->bf16_logits) m = any_difference(m);
    for (int widened = 0; widened < 1 + (a->w16 != NULL); widened++) {
        lw_dtype wt;
        const void *w = input_typed(r, a->w, widened ? NULL : a->w16, a->v * a->c, &wt);
        float *dh = accumulated(r, widened ? "dh (widened)" : "dh", a->dh0, a->n * a->c, m);
        float *dw = accumulated(r, widened ? "dw (widened)" : "dw", a->dw0, a->v * a->c, m);
        call(r, lw_cross_entropy_partial_forward(r->s, stats, work, h, w, wt, lt, a->cap, targets,
                                                 a->n, a->c, a->v, a->first, a->vocab));
        call(r, lw_cross_entropy_partial_backward(r->s, dh, dw, work, h, w, wt, lt, a->cap, targets,
                                                  lse, a->n, a->c, a->v, a->first, a->vocab,
                                                  (float)a->n));
    }
}

/* The rows of [first, first + v) below vocab: the real ones; the padding's dw is untouched. */
static void after_partial_backward(const kernel_case *k, const run *r) {
    const head_args *a = k->args;
    const int64_t real = a->vocab - a->first < 0      ? 0
                         : a->vocab - a->first < a->v ? a->vocab - a->first
                                                      : a->v;
    expect(k, r,
           memcmp(f32_of(r, "dw") + real * a->c, a->dw0 + real * a->c,
                  4 * (size_t)((a->v - real) * a->c)) == 0,
           "the padding's dw is untouched");
    if (a->w16 != NULL) {
        same_as_widened(k, r, "dh", a->n * a->c);
        same_as_widened(k, r, "dw", a->v * a->c);
    }
    if (a->ref_dh != NULL) { /* as the one-rank head's, the lse the CPU's float */
        near_gradient(k, r, "dh", a->dh0, a->ref_dh, a->n * a->c, 1e-4);
        near_gradient(k, r, "dw", a->dw0, a->ref_dw, a->v * a->c, 1e-4);
    }
}

/* ---- the cases, made and checked ------------------------------------------------------------ */

static void cross_entropy_cases(const char *kernel, run_fn fn, after_fn after) {
    for (size_t s = 0; s < COUNT(cross_entropy_shapes); s++) {
        if (left_out(cross_entropy_shapes[s].v == 50304)) continue;
        ce_args a = {.n = cross_entropy_shapes[s].n,
                     .c = cross_entropy_shapes[s].c,
                     .v = cross_entropy_shapes[s].v,
                     .ignore_every = cross_entropy_shapes[s].ignore_every,
                     .dh = cross_entropy_shapes[s].dh,
                     .large = cross_entropy_shapes[s].v == 50304,
                     .bf16_logits = cross_entropy_shapes[s].bf16_logits,
                     .cap = cross_entropy_shapes[s].cap};
        char capped[24];
        softcap_note(capped, a.cap);
        snprintf(a.shape, sizeof a.shape, "n %lld, c %lld, v %lld%s%s%s%s%s", (long long)a.n,
                 (long long)a.c, (long long)a.v, a.ignore_every == 1 ? ", all ignored" : "",
                 a.dh ? "" : ", no dh", cross_entropy_shapes[s].bf16_w ? ", bf16 head" : "",
                 a.bf16_logits ? ", bf16 logits" : "", capped);
        a.h = random_floats(a.n * a.c), a.w = scaled_random(a.v * a.c, 0.5f, 0.0f);
        if (cross_entropy_shapes[s].bf16_w) a.w16 = round_weights(a.w, a.v * a.c);
        a.targets = random_ids(a.n, a.v);
        for (int64_t i = 0; i < a.n && a.ignore_every > 0; i++)
            if (i % a.ignore_every == a.ignore_every - 1)
                a.targets[i] = i % 2 ? -1 : (int32_t)(a.v + i); /* outside [0, v): ignored */
        a.dh0 = prefill(a.n * a.c), a.dw0 = prefill(a.v * a.c);
        if (a.cap > 0 && !a.bf16_logits && !a.large) {
            const ce_reference ref = {.n = a.n,
                                      .c = a.c,
                                      .v = a.v,
                                      .vocab = a.v,
                                      .cap = a.cap,
                                      .loss_scale = 1.0,
                                      .h = a.h,
                                      .w = a.w,
                                      .targets = a.targets};
            a.ref_losses = malloc(sizeof(double) * (size_t)a.n);
            a.ref_lse = malloc(sizeof(double) * (size_t)a.n);
            a.ref_dh = malloc(sizeof(double) * (size_t)(a.n * a.c));
            a.ref_dw = malloc(sizeof(double) * (size_t)(a.v * a.c));
            a.ref_loss = ce_reference_forward(&ref, a.ref_losses, a.ref_lse, NULL);
            ce_reference grads = ref;
            grads.loss_scale = (double)a.n; /* the backward's loss_scale */
            if (fn == run_cross_entropy_backward) ce_reference_grads(&grads, a.ref_dh, a.ref_dw);
        }
        expect_gpu_scratch(a.n, a.v);
        check(&(kernel_case){.kernel = kernel,
                             .shape = a.shape,
                             .fn = fn,
                             .args = &a,
                             .after = after,
                             .large = a.large,
                             .gemm = true});
        free(a.h), free(a.w), free(a.targets), free(a.dh0), free(a.dw0), free(a.w16);
        free(a.ref_losses), free(a.ref_lse), free(a.ref_dh), free(a.ref_dw);
    }
}

static void head_cases(const char *kernel, run_fn fn, after_fn after) {
    for (size_t s = 0; s < COUNT(head_shapes); s++) {
        if (left_out(head_shapes[s].v == 25152)) continue;
        /* the combination reads no head: bf16 heads and logits are the forward's and
         * backward's cases */
        if ((head_shapes[s].bf16_w || head_shapes[s].bf16_logits) && fn == run_combine) continue;
        head_args a = {.n = head_shapes[s].n,
                       .c = head_shapes[s].c,
                       .v = head_shapes[s].v,
                       .first = head_shapes[s].first,
                       .vocab = head_shapes[s].vocab,
                       .large = head_shapes[s].v == 25152,
                       .bf16_logits = head_shapes[s].bf16_logits,
                       .cap = head_shapes[s].cap};
        const int64_t n = a.n;
        char capped[24];
        softcap_note(capped, a.cap);
        snprintf(a.shape, sizeof a.shape, "n %lld, c %lld, rows [%lld, +%lld) of %lld%s%s%s",
                 (long long)n, (long long)a.c, (long long)a.first, (long long)a.v,
                 (long long)a.vocab, head_shapes[s].bf16_w ? ", bf16 head" : "",
                 a.bf16_logits ? ", bf16 logits" : "", capped);
        a.h = random_floats(n * a.c), a.w = scaled_random(a.v * a.c, 0.5f, 0.0f);
        if (head_shapes[s].bf16_w) a.w16 = round_weights(a.w, a.v * a.c);
        a.targets = random_ids(n, a.vocab);
        for (int64_t i = 0; i < n; i++) {
            if (i % 5 == 4) a.targets[i] = i % 2 ? -1 : (int32_t)a.vocab; /* ignored */
            if (i % 7 == 3) a.targets[i] = (int32_t)a.first;              /* some held here */
            if (a.targets[i] == (int32_t)a.first && a.first >= a.vocab) a.targets[i] = -1;
        }
        /* this rank's statistics from the CPU, a made-up peer's of the same scale, and their
         * combination: the inputs of the combine and the backward */
        a.stats = cpu_array(6 * n), a.lse = cpu_array(n);
        float *work = cpu_array(lw_cross_entropy_scratch_floats(NULL, n, a.v)),
              *losses = cpu_array(n);
        EXPECT_OK(lw_cross_entropy_partial_forward(NULL, a.stats, work, a.h, a.w, LW_DTYPE_F32,
                                                   LW_DTYPE_F32, a.cap, a.targets, n, a.c, a.v,
                                                   a.first, a.vocab));
        for (int64_t i = 0; i < n; i++) {
            a.stats[3 * n + i] = 0.5f * random_float();
            a.stats[4 * n + i] = 100.0f + 50.0f * random_float();
            a.stats[5 * n + i] = 0.0f;
        }
        double loss = 0;
        EXPECT_OK(lw_cross_entropy_combine(NULL, losses, a.lse, a.stats, 2, a.targets, n, a.vocab,
                                           &loss));
        a.dh0 = random_floats(n * a.c), a.dw0 = random_floats(a.v * a.c);
        if (a.cap > 0 && !a.bf16_logits && !a.large) {
            const ce_reference ref = {.n = n,
                                      .c = a.c,
                                      .v = a.v,
                                      .first = a.first,
                                      .vocab = a.vocab,
                                      .cap = a.cap,
                                      .loss_scale = (double)n,
                                      .h = a.h,
                                      .w = a.w,
                                      .peer = a.stats + 3 * n,
                                      .targets = a.targets};
            a.ref_stats = malloc(sizeof(double) * (size_t)(3 * n));
            a.ref_dh = malloc(sizeof(double) * (size_t)(n * a.c));
            a.ref_dw = malloc(sizeof(double) * (size_t)(a.v * a.c));
            if (fn == run_partial_forward) ce_reference_forward(&ref, NULL, NULL, a.ref_stats);
            if (fn == run_partial_backward) ce_reference_grads(&ref, a.ref_dh, a.ref_dw);
        }
        expect_gpu_scratch(n, a.v);
        check(&(kernel_case){.kernel = kernel,
                             .shape = a.shape,
                             .fn = fn,
                             .args = &a,
                             .after = after,
                             .large = a.large,
                             .gemm = fn != run_combine});
        free(a.h), free(a.w), free(a.targets), free(a.stats), free(a.lse), free(work), free(losses);
        free(a.w16);
        free(a.dh0), free(a.dw0), free(a.ref_stats), free(a.ref_dh), free(a.ref_dw);
    }
}

/* ---- the list's entries ---------------------------------------------------------------------- */

const kernel_entry case_cross_entropy_forward = {cross_entropy_cases, run_cross_entropy_forward,
                                                 after_cross_entropy};
const kernel_entry case_cross_entropy_backward = {cross_entropy_cases, run_cross_entropy_backward,
                                                  after_cross_entropy};
const kernel_entry case_cross_entropy_partial_forward = {head_cases, run_partial_forward,
                                                         after_partial_forward};
const kernel_entry case_cross_entropy_combine = {head_cases, run_combine, NULL};
const kernel_entry case_cross_entropy_partial_backward = {head_cases, run_partial_backward,
                                                          after_partial_backward};
