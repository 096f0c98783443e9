/* test_qk_clip.c: QK-clip through the optimizer (lw_optimizer_qk_clip, lw_optimizer_scale_rows),
 * at whatever rank count it is started with (ctest: alone, mpirun -np 2, -np 3), for every
 * layout and ZeRO level, the row-sharded, legacy and replicated modes, fp32 parameters and bf16
 * ones with fp32 master weights. One attention layer's fused QKV weight (its spec's QKV groups,
 * so that Muon splits it) and bias, beside other parameters; each rank its own batch, the heads'
 * largest logits from the attention forward's head_max, max-reduced over the ranks. One head's Q
 * and K rows are made large, so that its logit passes tau while the others' stay below.
 *   - At lr 0 the update leaves the weights as they were, so after the step the hot head's
 *     largest logit over the same batches, recomputed, is tau: within 1e-5 relative with fp32
 *     parameters (a logit's fp32 sums), 2e-2 with bf16 ones (each of q's and k's hd weights and
 *     bias rounded to bf16 after the scale, 2^-9 relative each, at most 2^-8 on the logit, plus
 *     its fp32 sums: 2e-2 is twice that bound). The other heads' logits are unchanged, bit for
 *     bit, and every rank holds the same parameters.
 *   - At lr > 0 the scale comes after the update: the clipped run's weights are the unclipped
 *     run's with the hot head's Q and K rows (weight and bias) times sqrt(tau / S), bit for bit
 *     (fp32: the parameters; bf16: the master copies each rank updates), the rest equal.
 *   - Grouped KV heads (a weight of 2 groups, 4 Q heads sharing each K head): a clipped head's Q
 *     rows take tau / S whole and the shared K rows stay; on a skipped step (a NaN gradient) the
 *     scales apply all the same.
 *   - The calls refuse what they cannot do, naming the value. */
#include "bf16_reference.h"
#include "optim_util.h"

#include <math.h>
#include <stdlib.h>

enum { B = 2, T = 12, C = 32, NH = 4, HD = C / NH, N_SPECS = 5, HOT = 2 };
static lw_param_spec specs[N_SPECS], specs_bf16[N_SPECS];

static void make_specs(void) {
    specs[0] = vec("ln.g", C);
    specs[1] = mat("qkv.w", 3 * C, C, true);
    specs[1].qkv_groups = 1;
    specs[1].qkv_rows[0] = specs[1].qkv_rows[1] = specs[1].qkv_rows[2] = C;
    specs[2] = vec("qkv.b", 3 * C);
    specs[3] = mat("proj.w", C, C, true);
    specs[4] = mat("fc.w", 2 * C, C, true);
    for (int p = 0; p < N_SPECS; p++) {
        specs_bf16[p] = specs[p];
        specs_bf16[p].dtype = LW_DTYPE_BF16;
    }
}

/* Initial weights (step -1: values bf16 holds exactly, the same on every rank; the hot head's Q
 * and K rows of the QKV weight 8 times the others) and gradients (by rank and step; NaN
 * everywhere when *ctx is negative: a step to skip). */
static void fill(void *ctx, int p, int step, float *host, int64_t n) {
    const int rank = *(const int *)ctx;
    for (int64_t i = 0; i < n; i++) {
        if (step >= 0) {
            host[i] = rank < 0 ? NAN : (float)cos(0.3 * p + 0.11 * (double)i + step + 0.5 * rank);
            continue;
        }
        const int64_t row = i / C;
        const bool hot = p == 1 && (row / HD == HOT || row / HD == NH + HOT);
        const float x = (p == 0 ? 1.0f : 0.0f) + (hot ? 8.0f : 1.0f) * 0.5f * smooth_init(p, i);
        host[i] = (float)bf16_reference_value(bf16_reference(x));
    }
}

/* This rank's batch, x[B * T, C]. */
static void batch(float *x, int rank) {
    for (int64_t i = 0; i < B * T * C; i++)
        x[i] = (float)sin(0.37 * (double)i + 1.3 * rank);
}

/* The heads' largest logits over every rank's batch: qkv = x w^T + b, the attention forward's
 * head_max on this rank's, max-reduced over the ranks. */
static void logits(lw_comm *c, float *const *w, float out[NH]) {
    float x[B * T * C], qkv[B * T * 3 * C], y[B * T * C], lse[B * NH * T];
    const int64_t n = lw_attention_scratch_floats(NULL, B, T, C, NH, NH, 0);
    float *scratch = malloc(sizeof(float) * (size_t)n);
    batch(x, lw_comm_rank(c));
    CHECK_OK(lw_linear_forward(NULL, qkv, LW_DTYPE_F32, x, LW_DTYPE_F32, w[1], LW_DTYPE_F32, w[2],
                               B * T, C, 3 * C));
    CHECK_OK(lw_attention_forward(NULL, y, LW_DTYPE_F32, lse, out, scratch, qkv, LW_DTYPE_F32, B, T,
                                  C, NH, NH, 0));
    CHECK_OK(lw_comm_allreduce(c, out, NH, LW_DTYPE_F32, LW_REDUCE_MAX));
    free(scratch);
}

typedef struct variant {
    const char *name;
    lw_algorithm muon;
    lw_algorithm adamw;
    int64_t bucket_size;
    int zero;
} variant;

static const float LR0[2] = {0.0f, 0.0f}, LR[2] = {0.02f, 0.01f}, WD[2] = {0.1f, 0.05f};

static bool make_rig(rig *r, lw_comm *c, const variant *v, bool bf16, const float lr[2]) {
    const lw_param_spec *sp = bf16 ? specs_bf16 : specs;
    lw_buffers_options bo = lw_buffers_defaults();
    bo.zero = v->zero;
    int rank = lw_comm_rank(c);
    if (!rig_new(r, make_layout(sp, N_SPECS, lw_comm_size(c), v->bucket_size, v->muon, v->adamw),
                 sp, N_SPECS, c, &bo, NULL))
        return false;
    rig_groups(r, lr, WD);
    rig_write_params(r, fill, &rank);
    return true;
}

static float **params_of(rig *r) {
    float **w = malloc(sizeof(float *) * N_SPECS);
    for (int p = 0; p < N_SPECS; p++)
        w[p] = calloc((size_t)spec_numel(&specs[p]), sizeof(float));
    rig_read_params(r, w);
    return w;
}

static void free_params(float **w) {
    for (int p = 0; p < N_SPECS; p++)
        free(w[p]);
    free(w);
}

/* One step with QK-clip at tau queued before it (tau 0: none); [out] *clipped. */
static void clipped_step(rig *r, lw_comm *c, float tau, const float s[NH], int32_t *clipped) {
    int rank = lw_comm_rank(c);
    *clipped = 0;
    if (tau > 0) CHECK_OK(lw_optimizer_qk_clip(r->opt, 1, 2, HD, s, NH, tau, clipped));
    lw_step_result res;
    rig_steps(r, 1, fill, &rank, &res);
    CHECK(!res.skipped);
}

/* At lr 0: the hot head's logit becomes tau, the others' stay. */
static void run_lr0(lw_comm *c, const variant *v, bool bf16) {
    rig r;
    if (!make_rig(&r, c, v, bf16, LR0)) {
        rig_free(&r);
        return;
    }
    float **w = params_of(&r), before[NH], after[NH];
    logits(c, w, before);
    float others = 0;
    for (int h = 0; h < NH; h++)
        if (h != HOT) others = fmaxf(others, before[h]);
    CHECK(before[HOT] > 2 * others); /* the case is what it says */
    const float tau = 0.5f * (before[HOT] + others);
    int32_t clipped;
    clipped_step(&r, c, tau, before, &clipped);
    CHECK_EQ(clipped, 1);
    float **w2 = params_of(&r);
    logits(c, w2, after);
    CHECK(fabs(after[HOT] - tau) <= (bf16 ? 2e-2 : 1e-5) * tau);
    for (int h = 0; h < NH; h++)
        if (h != HOT) CHECK(f32_bits(after[h]) == f32_bits(before[h]));
    CHECK(identical_across_ranks(c, r.buffers, bf16 ? specs_bf16 : specs, N_SPECS));
    free_params(w), free_params(w2);
    rig_free(&r);
}

/* Element i of param p is in the hot head's Q or K rows (weight or bias). */
static bool hot_row(int p, int64_t i) {
    const int64_t row = p == 1 ? i / C : i;
    return (p == 1 || p == 2) && (row / HD == HOT || row / HD == NH + HOT);
}

/* At lr > 0: the clipped run is the unclipped one with the hot rows scaled after the update. */
static void run_after_update(lw_comm *c, const variant *v, bool bf16) {
    rig a, b;
    bool ok = make_rig(&a, c, v, bf16, LR);
    if (!make_rig(&b, c, v, bf16, LR) || !ok) {
        rig_free(&a), rig_free(&b);
        return;
    }
    float **w = params_of(&a), s[NH];
    logits(c, w, s);
    const float tau = s[HOT] / 3;
    const float f = (float)sqrt((double)tau / s[HOT]);
    int32_t clipped;
    clipped_step(&a, c, tau, s, &clipped);
    clipped_step(&b, c, 0, s, &clipped);
    int64_t wrong = 0;
    if (!bf16) {
        float **wa = params_of(&a), **wb = params_of(&b);
        for (int p = 0; p < N_SPECS; p++)
            for (int64_t i = 0; i < spec_numel(&specs[p]); i++)
                wrong += f32_bits(wa[p][i]) != f32_bits(hot_row(p, i) ? wb[p][i] * f : wb[p][i]);
        free_params(wa), free_params(wb);
    } else {
        lw_state_entry ea, eb;
        CHECK_EQ(lw_optimizer_state_count(a.opt), lw_optimizer_state_count(b.opt));
        for (int32_t k = 0; k < lw_optimizer_state_count(a.opt); k++) {
            CHECK_OK(lw_optimizer_state(a.opt, k, &ea));
            CHECK_OK(lw_optimizer_state(b.opt, k, &eb));
            for (int64_t i = 0; i < ea.count; i++) {
                const float want = eb.master[i];
                wrong += f32_bits(ea.master[i]) !=
                         f32_bits(hot_row(ea.param, ea.start + i) ? want * f : want);
            }
        }
    }
    CHECK_EQ(wrong, 0);
    free_params(w);
    rig_free(&a), rig_free(&b);
}

/* Grouped KV heads: 2 groups of 4 Q heads, 1 K and 1 V head each; head 5 (group 1's second)
 * clipped on a skipped step. */
static void run_gqa(lw_comm *c) {
    enum { G = 2, NQ = 4, ROWS = G * (NQ + 2) * HD };
    lw_param_spec sp[2] = {mat("gqa.w", ROWS, C, true), vec("gqa.b", ROWS)};
    sp[0].qkv_groups = G;
    sp[0].qkv_rows[0] = NQ * HD, sp[0].qkv_rows[1] = sp[0].qkv_rows[2] = HD;
    rig r;
    lw_buffers_options bo = lw_buffers_defaults();
    if (!rig_new(
            &r,
            make_layout(sp, 2, lw_comm_size(c), INT64_MAX, LW_ALGORITHM_COST, LW_ALGORITHM_DISTOPT),
            sp, 2, c, &bo, NULL)) {
        rig_free(&r);
        return;
    }
    int rank = lw_comm_rank(c), nan = -1;
    rig_groups(&r, LR, WD);
    rig_write_params(&r, fill, &rank);
    float *before[2], *after[2];
    for (int p = 0; p < 2; p++) {
        before[p] = malloc(sizeof(float) * (size_t)spec_numel(&sp[p]));
        after[p] = malloc(sizeof(float) * (size_t)spec_numel(&sp[p]));
    }
    rig_read_params(&r, before);
    float s[G * NQ] = {1, 1, 1, 1, 1, 9, 1, NAN}; /* a NaN maximum is passed over */
    int32_t clipped;
    CHECK_OK(lw_optimizer_qk_clip(r.opt, 0, 1, HD, s, G * NQ, 4.0f, &clipped));
    CHECK_EQ(clipped, 1);
    lw_step_result res;
    rig_steps(&r, 1, fill, &nan, &res);
    CHECK(res.skipped);
    rig_read_params(&r, after);
    /* head 5: group 1 (rows from 6 HD), its Q rows [6 HD + HD, 6 HD + 2 HD) times 4 / 9 */
    const float f = (float)(4.0 / 9.0);
    int64_t wrong = 0;
    for (int p = 0; p < 2; p++)
        for (int64_t i = 0; i < spec_numel(&sp[p]); i++) {
            const int64_t row = p == 0 ? i / C : i;
            const bool q5 = row >= 7 * HD && row < 8 * HD;
            wrong += f32_bits(after[p][i]) != f32_bits(q5 ? before[p][i] * f : before[p][i]);
        }
    CHECK_EQ(wrong, 0);
    for (int p = 0; p < 2; p++)
        free(before[p]), free(after[p]);
    rig_free(&r);
}

static void refusals(lw_comm *c) {
    rig r;
    const variant v = {"cost", LW_ALGORITHM_COST, LW_ALGORITHM_DISTOPT, INT64_MAX, 1};
    if (!make_rig(&r, c, &v, false, LR)) {
        rig_free(&r);
        return;
    }
    const float s[NH] = {1, 1, 1, 1};
    CHECK_FAILS(lw_optimizer_scale_rows(r.opt, 1, 90, 7, 0.5f), LW_ERR_RANGE, "not within the 96");
    CHECK_FAILS(lw_optimizer_scale_rows(r.opt, 9, 0, 1, 0.5f), LW_ERR_RANGE, "index 9");
    CHECK_FAILS(lw_optimizer_scale_rows(r.opt, 1, 0, 1, 0.0f), LW_ERR_INVALID, "got 0");
    CHECK_FAILS(lw_optimizer_scale_rows(r.opt, 1, 0, 1, INFINITY), LW_ERR_INVALID, "finite");
    CHECK_FAILS(lw_optimizer_qk_clip(r.opt, 3, -1, HD, s, NH, 1.0f, NULL), LW_ERR_INVALID,
                "'proj.w' is not a fused QKV weight");
    CHECK_FAILS(lw_optimizer_qk_clip(r.opt, 1, 2, HD, s, NH - 1, 1.0f, NULL), LW_ERR_INVALID,
                "has 4 heads");
    CHECK_FAILS(lw_optimizer_qk_clip(r.opt, 1, 2, 5, s, NH, 1.0f, NULL), LW_ERR_INVALID,
                "head dim 5");
    CHECK_FAILS(lw_optimizer_qk_clip(r.opt, 1, 0, HD, s, NH, 1.0f, NULL), LW_ERR_INVALID,
                "the bias 'ln.g'");
    CHECK_FAILS(lw_optimizer_qk_clip(r.opt, 1, 2, HD, s, NH, -1.0f, NULL), LW_ERR_INVALID,
                "tau must be");
    rig_free(&r);
}

int main(void) {
    lw_comm *c = NULL;
    CHECK_OK(lw_comm_init(&c));
    if (c == NULL) return check_exit("test_qk_clip");
    make_specs();
    for (int zero = 1; zero <= 3; zero++) {
        const variant v[] = {
            {"cost", LW_ALGORITHM_COST, LW_ALGORITHM_DISTOPT, 3500, zero},
            {"lpt whole", LW_ALGORITHM_LPT, LW_ALGORITHM_DISTOPT, INT64_MAX, zero},
            {"packed", LW_ALGORITHM_PACKED, LW_ALGORITHM_DISTOPT, 3500, zero},
            {"rows", LW_ALGORITHM_ROWS, LW_ALGORITHM_DISTOPT, 3500, zero},
        };
        for (size_t k = 0; k < sizeof v / sizeof v[0]; k++)
            for (int bf16 = 0; bf16 < 2 && (zero == 3 || v[k].muon != LW_ALGORITHM_ROWS); bf16++) {
                const int before = check_failures;
                run_lr0(c, &v[k], bf16);
                run_after_update(c, &v[k], bf16);
                if (check_failures != before)
                    fprintf(stderr, "rank %d: variant %s, zero %d, %s, failed\n", lw_comm_rank(c),
                            v[k].name, zero, bf16 ? "bf16" : "fp32");
            }
    }
    const variant modes[] = {{"legacy", LW_ALGORITHM_LEGACY, LW_ALGORITHM_LEGACY, 3500, 1},
                             {"replicated", LW_ALGORITHM_DEFAULT, LW_ALGORITHM_DEFAULT, 3500, 1}};
    for (int k = 0; k < 2; k++)
        for (int bf16 = 0; bf16 < 2; bf16++) {
            run_lr0(c, &modes[k], bf16);
            run_after_update(c, &modes[k], bf16);
        }
    run_gqa(c);
    refusals(c);
    lw_comm_free(c);
    return check_exit("test_qk_clip");
}
