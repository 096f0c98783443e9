/* attention.c: causal self-attention (forward, backward) against the CPU, in every matmul
 * precision (bf16: the GPU's tensor-core kernels at head dims 64 and 128), with fp32 and bf16
 * qkv, outputs and gradients, grouped KV heads and sliding windows; the forward's heads' largest
 * scores (head_max) against the CPU's, and the CPU's against a float64 reference, with a head
 * whose scores are made large. */
#include "harness.h"

/* ---- the cases ------------------------------------------------------------------------------- *
 * b sequences of t tokens, c channels in nh heads (head dim c / nh) reading nkv KV heads, a
 * window (0: every earlier key), where a key holds a NaN (nan_row -1: nowhere; the forward's
 * cases alone), and a hot head (-1: none), whose q and its KV head's k are scaled by HOT, so
 * that its scores are HOT^2 times the others' (a head QK-clip would clip; the other heads of its
 * group HOT times). Those with t 1024 are of a GPU's size. */

static const struct {
    int64_t b, t, c, nh, nkv, window, nan_row, hot;
} attention_shapes[] = {
    {1, 1, 16, 1, 1, 0, -1, -1},       /* one row, head dim 16 */
    {2, 70, 96, 2, 2, 0, -1, 1},       /* head dim 48, t past one 64-row tile, head 1 hot */
    {2, 64, 96, 4, 4, 0, -1, -1},      /* head dim 24, exactly one tile */
    {1, 1000, 128, 2, 2, 0, -1, -1},   /* head dim 64, t = 1000 (not a multiple of the tile) */
    {1, 130, 256, 2, 2, 0, -1, 0},     /* head dim 128, head 0 hot */
    {1, 77, 288, 3, 3, 0, -1, -1},     /* head dim 96 */
    {2, 1, 128, 2, 2, 0, -1, -1},      /* head dim 64, one row */
    {3, 77, 384, 3, 3, 0, -1, -1},     /* head dim 128, t short of two tiles */
    {2, 333, 640, 5, 5, 0, -1, 3},     /* head dim 128, five heads, t odd, head 3 hot */
    {2, 200, 256, 4, 4, 0, -1, 2},     /* head dim 64, head 2 hot */
    {2, 1024, 768, 12, 12, 0, -1, -1}, /* GPT-2 small's layer */
    {8, 1024, 768, 12, 12, 0, -1, 7},  /* GPT-2 small's layer at its batch of 8, head 7 hot */
    {1, 1024, 768, 6, 6, 0, -1, -1},   /* head dim 128 at GPT-2's width and t */
    {0, 8, 32, 2, 2, 0, -1, -1},       /* no batch: nothing to do */
    {1, 70, 32, 2, 2, 0, 9, -1},       /* a NaN key, rows in two tiles */
    {2, 70, 96, 2, 1, 0, -1, -1},      /* multi-query, head dim 48 */
    {2, 200, 256, 4, 2, 50, -1, 2},    /* head dim 64, pairs of heads, a window within tiles */
    {1, 333, 640, 5, 5, 100, -1, -1},  /* head dim 128, a window past a tile */
    {1, 130, 512, 4, 1, 64, -1, 0},    /* head dim 128, multi-query, a window of a tile */
    {2, 150, 32, 4, 2, 1, -1, -1},     /* head dim 8, a window of one key before the diagonal */
    {2, 1024, 768, 12, 4, 256, -1, 5}, /* a LLaMA-style layer: 4 KV heads, a window, head 5 hot */
    {1, 70, 32, 2, 1, 20, 9, -1},      /* a NaN key that only a window's rows see */
};

/* The hot head's q and k factor. */
static const float HOT = 3.0f;

/* ---- tolerances, runs and hooks -------------------------------------------------------------- *
 * 1e-5: the scores are fp32 dot products summed in other orders, the GPU's softmax is online
 * (rescaled tile by tile) where the CPU's takes the row max first, and the backward recomputes
 * the probabilities from the saved log-sum-exp on both: out and dqkv are GEMM results a few
 * roundings of their terms apart (of the largest value: gemm; a float32 emulation of these
 * kernels is within 7e-7 of the exact result on that measure), lse a log (lse_measure). The
 * backward takes the CPU's out and lse on every device. A NaN in a key reaches every row that
 * sees it, out and lse, on every device (the CPU makes a NaN score's row NaN; a GPU's online max
 * passes over it, but its exponential is NaN); the backward's NaN are not compared, since a tile
 * that runs past the diagonal multiplies a NaN key by a zero probability on one device and not on
 * another.
 * TF32 leaves attention in fp32 (1e-5). bf16, at head dims 64 and 128, runs the GPU's tensor-core
 * kernels (src/cuda/attention_mma.cu): q, k, v and dout rounded to bf16 as they are staged (2^-8
 * relative at most, ~2^-9.3 rms, each), P and dS rounded again before their products, sums and
 * outputs fp32. Propagated: a score, a sum of hd products each off by ~sqrt(2) 2^-9.3 of itself,
 * moves by ~2.3e-3 scale sqrt(hd) |q k|rms, ~3e-3 at these inputs (q, k, v in [-2, 2)); that is a
 * relative error of each p, and lse (a log) moves by about as much in a row of few keys and less
 * in a long one; out = sum p v takes p's, v's and P's roundings, each ~2^-9 to 3e-3 of its terms,
 * random in sign, so ~4e-3 of the outputs' scale, most at the rows of few keys (of the largest
 * value: gemm); dqkv likewise from P, dS and dout (dS = P (dP - D) inherits p's and dP's). No
 * closed bound is tight, so tests/mma_layout/harness.c (--harness) measures it: the kernels' tile
 * loops emulated on these shapes and inputs against double attention, over their first 2 to 10
 * heads: out 1.9e-3 to 5.8e-3 (t 1 the least: out is v rounded), lse 1.4e-3 to 6.1e-3 (t 77 at
 * head dim 128 the most), dqkv 3.0e-3 to 6.1e-3. More heads add a little to a maximum (~15% from
 * 2 heads' rows to 96's, for tails like these): tolerances 2e-2 for the three (over 3 times the
 * worst), and out and dqkv must be further from fp32 than 2e-4 (the tensor cores ran: fp32 is
 * ~1e-6 away) where the tensor cores round something: q, k, v or dout not already bf16 values,
 * or P, below 1 in a row of more than one key. At t = 1 each row's one probability is 1 and the
 * out of a bf16 qkv is its v, unrounded: equal to fp32's to ~1e-7. At other head dims bf16 runs
 * the fp32 kernels: 1e-5, as fp32. A hot head's scores are 9 times the others', and so are their
 * errors, in a softmax peaked enough that p's relative errors pass into out and dqkv almost
 * whole: the emulation gives out 3.2e-2 to 4.7e-2, lse 6.4e-3 to 2.5e-2 (the most: a window of
 * 50 keys, fewer to average a row's errors), dqkv 3.0e-2 to 4.3e-2 on the cases with one (its
 * shapes with their hot heads; grouped KV heads, whose dk and dv sum over 2 to 4 query heads,
 * stay within these), so those cases take 1e-1 for the three under the tensor cores (over twice
 * the worst). The windowed case without a hot head: out 4.0e-3, lse 4.9e-3, dqkv 4.9e-3.
 * head_max, a head's largest score, is a score: the fp32 kernels' differ from the CPU's by the
 * dot products' order (lse_measure 1e-5, as lse); the tensor cores' take q and k rounded to bf16,
 * which moves a score by ~2^-8.5 of sqrt(sum_d (q_d k_d)^2) scale, a few 1e-3 of the largest
 * score at these inputs (the emulation: at most 1.4e-3 on lse's measure, hot heads or not): 2e-2,
 * as lse, over ten times that. The CPU's against float64 (the largest
 * q_i . k_j / sqrt(hd) over j <= i, from the same fp32 values): its scores are fp32 sums of hd
 * products of q and k scale (k scaled once, rounded), so each is within (hd + 1) 2^-24 of
 * sum_d |q_d k_d| scale of its exact value, and so is their maximum of the largest such sum. */

/* out and dqkv, lse: by precision, head dim and whether a head is hot; head_max: as lse */
static bool att_tensor_cores(lw_matmul m, int64_t hd) {
    return m == LW_MATMUL_BF16 && (hd == 64 || hd == 128);
}
static measure att_gemm(lw_matmul m, int64_t hd, bool hot) {
    return att_tensor_cores(m, hd) ? differing(gemm(hot ? 1e-1 : 2e-2), 2e-4) : gemm(1e-5);
}
static measure att_lse(lw_matmul m, int64_t hd, bool hot) {
    return lse_measure(att_tensor_cores(m, hd) ? (hot ? 1e-1 : 2e-2) : 1e-5);
}
static measure att_head_max(lw_matmul m, int64_t hd) {
    return lse_measure(att_tensor_cores(m, hd) ? 2e-2 : 1e-5);
}

typedef struct {
    char shape[256];
    int64_t b, t, c, nh, nkv, window;
    int64_t w;       /* qkv's row: c + 2 nkv hd */
    int64_t nan_row; /* >= 0: channel 3 of that row's key is NaN (head 0) */
    float *qkv, *dout, *d0, *out, *lse;
    uint16_t *out16; /* out rounded to bf16 (the backward's bf16 out) */
    float *out_w;    /* and widened again */
    uint16_t *qkv16; /* qkv rounded to bf16 (a bf16 QKV GEMM's output) */
    float *qkv_w;    /* and widened again */
    uint16_t *d0_16; /* d0 rounded to bf16 (a bf16 dqkv's start), */
    float *d0_w;     /* and widened again */
    int64_t hot;     /* the head whose q and k were scaled by HOT, or -1 */
} att_args;

/* out, or dqkv from dout (NULL: the forward), of the values qkv: required to differ from fp32
 * where the tensor cores round one of them, or P (t > 1) */
static measure att_measure(const run *r, const att_args *a, const float *qkv, const float *dout) {
    const int64_t no = a->b * a->t * a->c;
    return differing_if(att_gemm(r->matmul, a->c / a->nh, a->hot >= 0),
                        no > 0 &&
                            (a->t > 1 || rounded_by(LW_MATMUL_BF16, qkv, a->b * a->t * a->w) ||
                             (dout != NULL && rounded_by(LW_MATMUL_BF16, dout, no))));
}

static void run_attention_forward(run *r, const void *p) {
    const att_args *a = p;
    const int64_t no = a->b * a->t * a->c, nq = a->b * a->t * a->w;
    const float *qkv = input(r, a->qkv, nq);
    const int64_t hd = a->c / a->nh;
    float *out = output(r, "out", no, att_measure(r, a, a->qkv, NULL));
    float *lse = output(r, "lse", a->b * a->nh * a->t, att_lse(r->matmul, hd, a->hot >= 0));
    /* the heads' maxima: written only where there is work */
    const int64_t nm = no > 0 ? a->nh : 0;
    float *hm = output(r, "head max", nm, att_head_max(r->matmul, hd));
    float *work =
        scratch(r, lw_attention_scratch_floats(r->s, a->b, a->t, a->c, a->nh, a->nkv, a->window));
    r->nan_fed = a->nan_row >= 0;
    call(r, lw_attention_forward(r->s, out, LW_DTYPE_F32, lse, hm, work, qkv, LW_DTYPE_F32, a->b,
                                 a->t, a->c, a->nh, a->nkv, a->window));
    const measure m16 = bf16_step(att_gemm(r->matmul, hd, a->hot >= 0));
    const measure mq = att_measure(r, a, a->qkv_w, NULL);
    float *lse_again = scratch(r, a->b * a->nh * a->t);
    uint16_t *out16 = output_bf16_values(r, "out bf16", no, m16);
    call(r, lw_attention_forward(r->s, out16, LW_DTYPE_BF16, lse_again, NULL, work, qkv,
                                 LW_DTYPE_F32, a->b, a->t, a->c, a->nh, a->nkv, a->window));
    /* a bf16 qkv, its widening, and both in bf16 (the model's pair) */
    const void *q16 = input_bf16(r, a->qkv16, nq);
    float *oq = output(r, "out of bf16 qkv", no, mq);
    float *hq = output(r, "head max of bf16 qkv", nm, att_head_max(r->matmul, hd));
    call(r, lw_attention_forward(r->s, oq, LW_DTYPE_F32, lse_again, hq, work, q16, LW_DTYPE_BF16,
                                 a->b, a->t, a->c, a->nh, a->nkv, a->window));
    float *ow = output(r, "out of bf16 qkv (widened)", no, mq);
    float *hw = output(r, "head max of bf16 qkv (widened)", nm, att_head_max(r->matmul, hd));
    call(r,
         lw_attention_forward(r->s, ow, LW_DTYPE_F32, lse_again, hw, work, input(r, a->qkv_w, nq),
                              LW_DTYPE_F32, a->b, a->t, a->c, a->nh, a->nkv, a->window));
    uint16_t *o16 = output_bf16_values(r, "out of bf16 qkv bf16", no, m16);
    call(r, lw_attention_forward(r->s, o16, LW_DTYPE_BF16, lse_again, NULL, work, q16,
                                 LW_DTYPE_BF16, a->b, a->t, a->c, a->nh, a->nkv, a->window));
}

static void run_attention_backward(run *r, const void *p) {
    const att_args *a = p;
    const int64_t no = a->b * a->t * a->c, nq = a->b * a->t * a->w;
    const float *qkv = input(r, a->qkv, nq), *dout = input(r, a->dout, no);
    const float *out = input(r, a->out, no), *lse = input(r, a->lse, a->b * a->nh * a->t);
    const measure m = att_measure(r, a, a->qkv, a->dout), mq = att_measure(r, a, a->qkv_w, a->dout);
    float *dqkv = accumulated(r, "dqkv", a->d0, nq, m);
    float *work =
        scratch(r, lw_attention_scratch_floats(r->s, a->b, a->t, a->c, a->nh, a->nkv, a->window));
    call(r, lw_attention_backward(r->s, dqkv, LW_DTYPE_F32, work, dout, qkv, LW_DTYPE_F32, out,
                                  LW_DTYPE_F32, lse, a->b, a->t, a->c, a->nh, a->nkv, a->window));
    /* out in bf16 (the CPU's, rounded), and the same run on its widening */
    float *d16 = accumulated(r, "dqkv bf16 out", a->d0, nq, m);
    call(r, lw_attention_backward(r->s, d16, LW_DTYPE_F32, work, dout, qkv, LW_DTYPE_F32,
                                  input_bf16(r, a->out16, no), LW_DTYPE_BF16, lse, a->b, a->t, a->c,
                                  a->nh, a->nkv, a->window));
    float *dw = accumulated(r, "dqkv bf16 out (widened)", a->d0, nq, m);
    call(r, lw_attention_backward(r->s, dw, LW_DTYPE_F32, work, dout, qkv, LW_DTYPE_F32,
                                  input(r, a->out_w, no), LW_DTYPE_F32, lse, a->b, a->t, a->c,
                                  a->nh, a->nkv, a->window));
    /* a bf16 qkv (with the bf16 out), and its widening */
    float *dq = accumulated(r, "dqkv of bf16 qkv", a->d0, nq, mq);
    call(r, lw_attention_backward(r->s, dq, LW_DTYPE_F32, work, dout, input_bf16(r, a->qkv16, nq),
                                  LW_DTYPE_BF16, input_bf16(r, a->out16, no), LW_DTYPE_BF16, lse,
                                  a->b, a->t, a->c, a->nh, a->nkv, a->window));
    float *dqw = accumulated(r, "dqkv of bf16 qkv (widened)", a->d0, nq, mq);
    call(r, lw_attention_backward(r->s, dqw, LW_DTYPE_F32, work, dout, input(r, a->qkv_w, nq),
                                  LW_DTYPE_F32, input(r, a->out_w, no), LW_DTYPE_F32, lse, a->b,
                                  a->t, a->c, a->nh, a->nkv, a->window));
    /* a bf16 dqkv: accumulated in fp32, rounded; against the fp32 run from its widened start */
    float *ds = accumulated(r, "dqkv from a bf16 start", a->d0_w, nq, m);
    call(r, lw_attention_backward(r->s, ds, LW_DTYPE_F32, work, dout, qkv, LW_DTYPE_F32, out,
                                  LW_DTYPE_F32, lse, a->b, a->t, a->c, a->nh, a->nkv, a->window));
    uint16_t *ds16 = accumulated_bf16(r, "dqkv from a bf16 start bf16", a->d0_16, nq, bf16_step(m));
    call(r, lw_attention_backward(r->s, ds16, LW_DTYPE_BF16, work, dout, qkv, LW_DTYPE_F32, out,
                                  LW_DTYPE_F32, lse, a->b, a->t, a->c, a->nh, a->nkv, a->window));
}

/* A bf16 out gives the results its widening gives, bit for bit on the CPU; a bf16 qkv on every
 * device (the tensor-core kernels stage its bits as they stage its widening's, rounded; the
 * others read its widening). */
static void after_attention_backward(const kernel_case *k, const run *r) {
    const att_args *a = k->args;
    same_as_widened(k, r, "dqkv bf16 out", a->b * a->t * a->w);
    widening_exact(k, r, "dqkv of bf16 qkv", a->b * a->t * a->w);
    after_bf16_output(k, r, "dqkv from a bf16 start", a->b * a->t * a->w);
}

/* The first key query i sees: i - window under a window, else 0. */
static int64_t first_key(const att_args *a, int64_t i) {
    return a->window > 0 && i > a->window ? i - a->window : 0;
}

/* The largest q_i . k_j / sqrt(hd) (first_key(i) <= j <= i) of each head over the batch in
 * float64 from qkv's values (head h's k that of KV head h / (nh / nkv)), into ref[nh], and the
 * CPU's bound of head h's error, into tol[nh]. */
static void reference_head_max(const att_args *a, const float *qkv, double *ref, double *tol) {
    const int64_t w = a->w, hd = a->c / a->nh, group = a->nh / a->nkv;
    const double scale = 1.0 / sqrt((double)hd);
    for (int64_t h = 0; h < a->nh; h++) {
        double top = -INFINITY, size = 0;
        for (int64_t bi = 0; bi < a->b; bi++) {
            const float *q = qkv + bi * a->t * w + h * hd;
            const float *k = qkv + bi * a->t * w + a->c + h / group * hd;
            for (int64_t i = 0; i < a->t; i++)
                for (int64_t j = first_key(a, i); j <= i; j++) {
                    double dot = 0, abs = 0;
                    for (int64_t d = 0; d < hd; d++) {
                        dot += (double)q[i * w + d] * k[j * w + d];
                        abs += fabs((double)q[i * w + d] * k[j * w + d]);
                    }
                    top = fmax(top, dot * scale), size = fmax(size, abs * scale);
                }
        }
        ref[h] = top;
        tol[h] = (double)(hd + 1) * ldexp(1.0, -24) * size + 1e-30;
    }
}

/* The heads' maxima of a run (what: its name) of the values qkv, bracketed by the run's lse
 * (NULL: none): a row's largest score m and its log-sum-exp over n keys have m <= lse <= m +
 * log(n), so a head's largest score lies within [max lse - log(t), max lse] (with a rounding's
 * slack), NaN exactly for the heads whose lse holds a NaN; on the CPU also within its bound of
 * the float64 reference of qkv, and the hot head's the largest. */
static void check_head_max(const kernel_case *k, const run *r, const char *what, const float *qkv,
                           const float *lse) {
    const att_args *a = k->args;
    const float *hm = f32_of(r, what);
    if (a->b * a->t == 0 || hm == NULL) return;
    bool bracketed = true;
    for (int64_t h = 0; lse != NULL && h < a->nh; h++) {
        double top = -INFINITY;
        bool nan = false;
        for (int64_t bi = 0; bi < a->b; bi++)
            for (int64_t i = 0; i < a->t; i++) {
                const float x = lse[(bi * a->nh + h) * a->t + i];
                nan = nan || isnan(x), top = fmax(top, x);
            }
        const double slack = 1e-5 * (1 + fabs(top));
        bracketed = bracketed && isnan(hm[h]) == nan &&
                    (nan || (hm[h] <= top + slack && hm[h] >= top - log((double)a->t) - slack));
    }
    if (lse != NULL)
        expect(k, r, bracketed, "each head's largest score lies in [max lse - log t, max lse]");
    /* (the GPU's sizes: the float64 reference is left to the smaller ones) */
    if (!on_cpu(r->device) || a->nan_row >= 0 || k->large) return;
    double ref[16], tol[16];
    reference_head_max(a, qkv, ref, tol);
    bool within = true, hottest = true;
    for (int64_t h = 0; h < a->nh; h++) {
        within = within && fabs(hm[h] - ref[h]) <= tol[h];
        hottest = hottest && (a->hot < 0 || h == a->hot || ref[a->hot] > 2 * ref[h]);
    }

    expect(k, r, within, "the CPU's heads' maxima are within their bound of float64's");
    expect(k, r, hottest, "the hot head's largest score is over twice any other head's");
}

/* With a NaN key at row j of KV head 0: the rows of its query heads that see it (j on, up to j +
 * window under a window) are NaN in out and lse, every other row finite. */
static void after_attention(const kernel_case *k, const run *r) {
    const att_args *a = k->args;
    const int64_t no = a->b * a->t * a->c;
    after_bf16_output(k, r, "out", no);
    after_bf16_output(k, r, "out of bf16 qkv", no);
    widening_exact(k, r, "out of bf16 qkv", no);
    check_head_max(k, r, "head max", a->qkv, f32_of(r, "lse"));
    if (no > 0) widening_exact(k, r, "head max of bf16 qkv", a->nh);
    check_head_max(k, r, "head max of bf16 qkv (widened)", a->qkv_w, NULL);
    if (a->nan_row < 0) return;
    const float *out = f32_of(r, "out"), *lse = f32_of(r, "lse");
    const int64_t hd = a->c / a->nh;
    bool as_promised = true;
    for (int64_t i = 0; i < a->t; i++)
        for (int64_t h = 0; h < a->nh; h++) {
            const bool nan =
                h / (a->nh / a->nkv) == 0 && i >= a->nan_row && first_key(a, i) <= a->nan_row;
            as_promised = as_promised && isnan(lse[h * a->t + i]) == nan;
            for (int64_t d = 0; d < hd; d++)
                as_promised = as_promised && isnan(out[i * a->c + h * hd + d]) == nan;
        }
    expect(k, r, as_promised, "a NaN key makes NaN exactly the rows that see it");
}

/* ---- the cases, made and checked ------------------------------------------------------------ */

static void attention_cases(const char *kernel, run_fn fn, after_fn after) {
    const bool forward = strcmp(kernel, "attention_forward") == 0;
    for (size_t s = 0; s < COUNT(attention_shapes); s++) {
        if (left_out(attention_shapes[s].t == 1024) ||
            left_out_sanitized(attention_shapes[s].t > 256))
            continue;
        att_args a = {.b = attention_shapes[s].b,
                      .t = attention_shapes[s].t,
                      .c = attention_shapes[s].c,
                      .nh = attention_shapes[s].nh,
                      .nkv = attention_shapes[s].nkv,
                      .window = attention_shapes[s].window,
                      .nan_row = attention_shapes[s].nan_row,
                      .hot = attention_shapes[s].hot};
        if (a.nan_row >= 0 && !forward) continue;
        const int64_t hd = a.c / a.nh;
        a.w = a.c + 2 * a.nkv * hd;
        const int64_t no = a.b * a.t * a.c, nl = a.b * a.nh * a.t, nq = a.b * a.t * a.w;
        char grouped[48] = "", windowed[40] = "";
        if (a.nkv != a.nh) snprintf(grouped, sizeof grouped, ", %lld KV heads", (long long)a.nkv);
        if (a.window > 0) snprintf(windowed, sizeof windowed, ", window %lld", (long long)a.window);
        snprintf(a.shape, sizeof a.shape, "b %lld, t %lld, c %lld, nh %lld (head dim %lld)%s%s%s%s",
                 (long long)a.b, (long long)a.t, (long long)a.c, (long long)a.nh, (long long)hd,
                 grouped, windowed, a.nan_row >= 0 ? ", a NaN key" : "",
                 a.hot >= 0 ? ", a hot head" : "");
        a.qkv = scaled_random(nq, 2.0f, 0.0f), a.dout = random_floats(no), a.d0 = prefill(nq);
        if (a.nan_row >= 0) a.qkv[a.nan_row * a.w + a.c + 3] = NAN;
        for (int64_t row = 0; a.hot >= 0 && row < a.b * a.t; row++) /* its q and its KV head's k */
            for (int64_t d = 0; d < hd; d++) {
                a.qkv[row * a.w + a.hot * hd + d] *= HOT;
                a.qkv[row * a.w + a.c + a.hot / (a.nh / a.nkv) * hd + d] *= HOT;
            }
        a.out = cpu_array(no), a.lse = cpu_array(nl);
        float *work =
            cpu_array(lw_attention_scratch_floats(NULL, a.b, a.t, a.c, a.nh, a.nkv, a.window));
        EXPECT_OK(lw_attention_forward(NULL, a.out, LW_DTYPE_F32, a.lse, NULL, work, a.qkv,
                                       LW_DTYPE_F32, a.b, a.t, a.c, a.nh, a.nkv, a.window));
        a.out16 = malloc(sizeof(uint16_t) * (size_t)(no > 0 ? no : 1));
        a.out_w = cpu_array(no);
        for (int64_t i = 0; i < no; i++) {
            a.out16[i] = bf16_reference(a.out[i]);
            a.out_w[i] = (float)bf16_reference_value(a.out16[i]);
        }
        a.qkv16 = round_copy(a.qkv, nq, &a.qkv_w);
        a.d0_16 = round_copy(a.d0, nq, &a.d0_w);
        /* the GPU's scratch: D = rowsum(dout * out), then at the tensor-core kernels' head dims
         * (64, 128), from a 256-byte boundary, dout's bf16 copy for their pipelined backward */
        const int64_t gpu_scratch = hd == 64 || hd == 128 ? (nl + 63) / 64 * 64 + (no + 1) / 2 : nl;
        if (have_gpu())
            EXPECT_EQ(
                lw_attention_scratch_floats(other_stream(), a.b, a.t, a.c, a.nh, a.nkv, a.window),
                gpu_scratch);
        check(&(kernel_case){.kernel = kernel,
                             .shape = a.shape,
                             .fn = fn,
                             .args = &a,
                             .after = after,
                             .large = a.t == 1024,
                             .tensor_cores = true});
        free(a.qkv), free(a.dout), free(a.d0), free(a.out), free(a.lse), free(work);
        free(a.out16), free(a.out_w), free(a.qkv16), free(a.qkv_w), free(a.d0_16), free(a.d0_w);
    }
    /* heads that do not divide the channels, KV heads that do not divide the heads, a negative
     * window: the dispatcher's errors, on every device */
    for (int d = 0; d < (other_stream() != NULL ? 2 : 1); d++) {
        lw_stream *s = d == 0 ? NULL : other_stream();
        float x = 0;
        const struct {
            int64_t c, nh, nkv, window;
            const char *says;
        } bad[] = {{100, 3, 3, 0, "must divide by the heads nh = 3"},
                   {96, 4, 3, 0, "the KV heads nkv = 3 must divide the heads nh = 4"},
                   {96, 4, 2, -2, "window = -2 must be >= 0"}};
        for (size_t i = 0; i < COUNT(bad); i++)
            EXPECT_FAILS(
                forward ? lw_attention_forward(s, &x, LW_DTYPE_F32, &x, NULL, &x, &x, LW_DTYPE_F32,
                                               1, 4, bad[i].c, bad[i].nh, bad[i].nkv, bad[i].window)
                        : lw_attention_backward(s, &x, LW_DTYPE_F32, &x, &x, &x, LW_DTYPE_F32, &x,
                                                LW_DTYPE_F32, &x, 1, 4, bad[i].c, bad[i].nh,
                                                bad[i].nkv, bad[i].window),
                LW_ERR_INVALID, bad[i].says);
    }
}

/* ---- the list's entries ---------------------------------------------------------------------- */

const kernel_entry case_attention_forward = {attention_cases, run_attention_forward,
                                             after_attention};
const kernel_entry case_attention_backward = {attention_cases, run_attention_backward,
                                              after_attention_backward};
