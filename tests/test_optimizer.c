/* test_optimizer.c: the layer-wise optimizer against a one-process Muon + AdamW reference, at
 * whatever rank count it is started with (ctest: alone, mpirun -np 2, -np 3). Every rank feeds
 * different gradients whose average is known; after 3 steps the parameters must equal the
 * reference within 1e-5 and be bit-identical across ranks, for every layout algorithm, with and
 * without buckets and overlap, at ZeRO-1, 2 and 3, row-sharded, and for the legacy and
 * replicated modes. Parameters and gradients are reached the way modules reach them: acquire,
 * view, release. */
#include "optim_util.h"

#include <math.h>
#include <stdlib.h>

enum { N_SPECS = 11, STEPS = 3 };
static lw_param_spec specs[N_SPECS];

static void make_specs(void) {
    specs[0] = mat("emb", 50, 16, false);
    specs[0].shared_embedding = true;
    specs[1] = mat("l0.w", 48, 16, true);
    specs[2] = vec("l0.b", 48);
    specs[3] = mat("l0.o", 16, 48, true);
    specs[4] = vec("ln", 16);
    specs[5] = mat("l1.w", 48, 16, true);
    specs[6] = mat("l1.o", 16, 48, true);
    specs[7] = mat("l1.x", 24, 16, true);
    specs[8] = mat("l1.y", 16, 24, true);
    specs[9] = mat("head", 10, 16, false);
    /* a third 16 x 48: on the CPU a batch of three, of which with 2 BLAS threads two go side by
     * side and the third alone on both threads */
    specs[10] = mat("l2.o", 16, 48, true);
}

static void init_fill(void *ctx, int p, int step, float *host, int64_t n) {
    (void)ctx, (void)step;
    for (int64_t i = 0; i < n; i++)
        host[i] = smooth_init(p, i);
}

/* rank r's gradient; the average over ranks is base(p, i, step) */
static float grad_value(int p, int64_t i, int step, int rank, int size) {
    float base = (float)cos(0.3 * p + 0.11 * (double)i + step);
    float spread = 0.25f * (float)sin(0.5 * (double)i + p);
    return base + ((float)rank - (float)(size - 1) / 2.0f) * spread;
}

typedef struct variant {
    const char *name;
    lw_algorithm muon;
    lw_algorithm adamw;
    int64_t bucket_size;
    bool overlap;
    float clip;
    int nan_step;   /* -1: none */
    float bad;      /* the non-finite value injected at nan_step (NAN or INFINITY) */
    int silent;     /* a param whose gradient never arrives (-1: none): zeros, still synced */
    int zero;       /* ZeRO level (0 = 1) */
    int micro;      /* micro-steps, each adding 1/micro of the gradient (0 = 1) */
    bool scrambled; /* backward visits params in definition order: groups complete out of
                       order, so ZeRO-2/3 hold many gradient groups and must reduce early */
} variant;

static const float LR[2] = {0.02f, 0.01f}, WD[2] = {0.1f, 0.05f};

/* One-process reference: whole params, averaged gradients, the kernels directly. */
static void reference(const lw_param_spec *sp, int n, const variant *v, int size, float **w,
                      double *norms) {
    lw_muon *muon;
    CHECK_OK(lw_muon_new(NULL, &muon));
    lw_adamw_options ao = lw_adamw_defaults();
    float *state[N_SPECS], *g[N_SPECS];
    for (int p = 0; p < n; p++) {
        int64_t k = spec_numel(&sp[p]);
        w[p] = malloc(sizeof(float) * (size_t)k);
        g[p] = malloc(sizeof(float) * (size_t)k);
        state[p] = calloc((size_t)(2 * k), sizeof(float));
        for (int64_t i = 0; i < k; i++)
            w[p][i] = smooth_init(p, i);
    }
    int64_t t = 0;
    for (int step = 0; step < STEPS; step++) {
        double sq = 0;
        for (int p = 0; p < n; p++)
            for (int64_t i = 0; i < spec_numel(&sp[p]); i++) {
                double s = 0;
                for (int r = 0; r < size; r++)
                    s += grad_value(p, i, step, r, size);
                g[p][i] = p == v->silent ? 0.0f : (float)(s / size);
                if (step == v->nan_step && p == 3 && i == 5) g[p][i] = v->bad;
                sq += (double)g[p][i] * g[p][i];
            }
        norms[step] = sqrt(sq);
        if (!isfinite(norms[step])) continue;
        float scale = 1.0f;
        if (v->clip > 0 && v->clip / (norms[step] + 1e-6) < 1.0)
            scale = (float)(v->clip / (norms[step] + 1e-6));
        t++;
        for (int p = 0; p < n; p++) {
            int grp = sp[p].optimizer == LW_OPTIMIZER_MUON ? 0 : 1;
            if (sp[p].optimizer == LW_OPTIMIZER_MUON)
                CHECK_OK(lw_muon_update(muon, NULL, w[p], g[p], state[p], sp[p].shape[0],
                                        sp[p].shape[1], LR[grp], WD[grp], scale));
            else
                CHECK_OK(lw_adamw_update(NULL, &ao, w[p], g[p], state[p],
                                         state[p] + spec_numel(&sp[p]), spec_numel(&sp[p]), t,
                                         LR[grp], WD[grp], scale));
        }
    }
    for (int p = 0; p < n; p++)
        free(g[p]), free(state[p]);
    lw_muon_free(muon);
}

/* One micro-step's backward: each param's share of its gradient, written through its view. */
static void backward(lw_buffers *bs, const lw_param_spec *sp, int n, const variant *v, int step,
                     int micro, int rank, int size) {
    const int micros = v->micro ? v->micro : 1, zero = v->zero ? v->zero : 1;
    const bool report = zero >= 2 || micro == micros - 1;
    for (int k = 0; k < n; k++) {
        int p = v->scrambled ? k : n - 1 - k; /* backprop order unless scrambled */
        if (p == v->silent) continue;
        float *g = NULL;
        CHECK_OK(lw_buffers_acquire(bs, p, LW_PASS_BACKWARD, false));
        CHECK_OK(lw_buffers_grad(bs, p, &g));
        if (g == NULL) return;
        for (int64_t i = 0; i < spec_numel(&sp[p]); i++)
            g[i] += grad_value(p, i, step, rank, size) / (float)micros;
        if (step == v->nan_step && p == 3 && rank == size - 1 && micro == 0) g[5] = v->bad;
        CHECK_OK(lw_buffers_release(bs, p));
        if (report) CHECK_OK(lw_buffers_grad_ready(bs, p));
    }
    CHECK_OK(lw_buffers_end_backward(bs));
}

static void run_variant(lw_comm *c, const lw_param_spec *sp, int n, const variant *v) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    int before = check_failures;
    lw_buffers_options bo = lw_buffers_defaults();
    bo.overlap_grad = bo.overlap_param = v->overlap;
    bo.zero = v->zero ? v->zero : 1;
    lw_optimizer_options oo = lw_optimizer_defaults();
    oo.clip = v->clip;
    rig r;
    if (!rig_new(&r, make_layout(sp, n, size, v->bucket_size, v->muon, v->adamw), sp, n, c, &bo,
                 &oo)) {
        rig_free(&r);
        return;
    }
    lw_buffers *bs = r.buffers;
    rig_groups(&r, LR, WD);
    rig_write_params(&r, init_fill, NULL);
    /* everything this rank updates, summed over ranks, covers every element once */
    int64_t owned = 0, total = 0;
    for (int p = 0; p < n; p++) {
        int64_t start, count;
        CHECK_OK(lw_buffers_owned(bs, p, &start, &count));
        owned += count;
        total += spec_numel(&sp[p]);
    }
    CHECK_OK(lw_comm_allreduce(c, &owned, 1, LW_DTYPE_I64, LW_REDUCE_SUM));
    CHECK_EQ(owned, v->muon == LW_ALGORITHM_DEFAULT ? total * size : total);

    float *ref[N_SPECS], *w[N_SPECS];
    double norms[STEPS];
    reference(sp, n, v, size, ref, norms);
    for (int step = 0; step < STEPS; step++) {
        CHECK_OK(lw_buffers_zero_grad(bs));
        for (int micro = 0; micro < (v->micro ? v->micro : 1); micro++) {
            rig_forward(&r);
            backward(bs, sp, n, v, step, micro, rank, size);
        }
        lw_step_result res;
        CHECK_OK(lw_optimizer_step(r.opt, &res));
        if (isfinite(norms[step])) {
            CHECK(fabs(res.grad_norm - norms[step]) <= 1e-5 * norms[step]);
            CHECK(!res.skipped);
        } else {
            CHECK(res.skipped);
            CHECK(!isfinite(res.grad_norm));
        }
    }
    for (int p = 0; p < n; p++)
        w[p] = calloc((size_t)spec_numel(&sp[p]), sizeof(float));
    rig_read_params(&r, w);
    double worst = 0;
    for (int p = 0; p < n; p++) {
        for (int64_t i = 0; i < spec_numel(&sp[p]); i++)
            worst = fmax(worst, fabs((double)w[p][i] - ref[p][i]));
        free(ref[p]), free(w[p]);
    }
    CHECK(worst <= 1e-5);
    CHECK(identical_across_ranks(c, bs, sp, n));
    lw_buffers_memory mem;
    CHECK_OK(lw_buffers_memory_get(bs, &mem));
    CHECK_EQ(mem.over_budget, 0); /* one group pinned at a time: the budget always suffices */
    if (v->zero >= 2) CHECK(mem.peak <= mem.arrays + mem.budget);
    /* five groups, one or two blocks each allowed: out of order, some must reduce early */
    if (v->scrambled && v->zero >= 2 && v->muon == LW_ALGORITHM_SIZE_MATCHING)
        CHECK(mem.flushes > 0);
    if (check_failures != before)
        fprintf(stderr, "rank %d: variant %s, zero %d, failed (max diff %g)\n", rank, v->name,
                v->zero, worst);
    rig_free(&r);
}

static void test_errors(lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    lw_layout_options lo = lw_layout_defaults();
    lo.dp = size + 1;
    lw_layout *l = NULL;
    lw_buffers *bs = NULL;
    CHECK_OK(lw_layout_new(specs, N_SPECS, &lo, &l));
    CHECK_FAILS(lw_buffers_new(l, c, NULL, NULL, &bs), LW_ERR_INVALID, "has ");
    CHECK(bs == NULL);
    lw_layout_free(l);

    /* one rank builds another layout: every rank gets an error, none hangs */
    lo.dp = size;
    lo.bucket_size = rank == size - 1 && size > 1 ? 1000 : INT64_MAX;
    CHECK_OK(lw_layout_new(specs, N_SPECS, &lo, &l));
    if (size > 1) CHECK_FAILS(lw_buffers_new(l, c, NULL, NULL, &bs), LW_ERR_INVALID, "layout hash");
    lw_layout_free(l);

    lo.bucket_size = INT64_MAX;
    CHECK_OK(lw_layout_new(specs, N_SPECS, &lo, &l));
    CHECK_OK(lw_buffers_new(l, c, NULL, NULL, &bs));
    lw_optimizer *opt = NULL;
    lw_optimizer_options oo = lw_optimizer_defaults();
    oo.muon.ns_steps = 0;
    CHECK_FAILS(lw_optimizer_new(bs, &oo, &opt), LW_ERR_INVALID, "ns_steps must be >= 1");
    oo = lw_optimizer_defaults();
    oo.adamw.beta2 = 1.0f;
    CHECK_FAILS(lw_optimizer_new(bs, &oo, &opt), LW_ERR_INVALID, "beta2 must be in [0, 1)");
    CHECK_OK(lw_optimizer_new(bs, NULL, &opt));
    CHECK_FAILS(lw_optimizer_set_hparams(opt, 0, -0.1f, 0.0f), LW_ERR_INVALID,
                "lr must be finite and >= 0, got -0.1");
    CHECK_FAILS(lw_optimizer_set_group(opt, N_SPECS, 0), LW_ERR_RANGE, "parameter index 11");
    CHECK_FAILS(lw_buffers_grad_ready(bs, N_SPECS), LW_ERR_RANGE, "parameter index 11");
    CHECK_OK(lw_buffers_grad_ready(bs, 4));
    CHECK_FAILS(lw_buffers_grad_ready(bs, 4), LW_ERR_STATE, "'ln' reported ready twice");
    CHECK_OK(lw_buffers_zero_grad(bs));
    lw_optimizer_free(opt);
    lw_buffers_free(bs);
    lw_layout_free(l);

    /* ZeRO-2/3 need sharded buffers; at ZeRO-3 buckets must hold the largest parameter */
    lo.algorithm = LW_ALGORITHM_LEGACY;
    lo.adamw_algorithm = LW_ALGORITHM_LEGACY;
    CHECK_OK(lw_layout_new(specs, N_SPECS, &lo, &l));
    lw_buffers_options bo = lw_buffers_defaults();
    bo.zero = 2;
    CHECK_FAILS(lw_buffers_new(l, c, NULL, &bo, &bs), LW_ERR_INVALID,
                "ZeRO-2 shards gradients across ranks, so it needs sharded buffers");
    lw_layout_free(l);
    lo = lw_layout_defaults();
    lo.dp = size;
    lo.bucket_size = 500;
    CHECK_OK(lw_layout_new(specs, N_SPECS, &lo, &l));
    bo.zero = 4;
    CHECK_FAILS(lw_buffers_new(l, c, NULL, &bo, &bs), LW_ERR_INVALID, "zero must be 1, 2 or 3");
    bo.zero = 3;
    CHECK_FAILS(lw_buffers_new(l, c, NULL, &bo, &bs), LW_ERR_INVALID,
                "bucket_size 500 is smaller than 'emb' (800 elements)");
    lw_layout_free(l);
    lo.bucket_size = 800;
    CHECK_OK(lw_layout_new(specs, N_SPECS, &lo, &l));
    CHECK_OK(lw_buffers_new(l, c, NULL, &bo, &bs));
    float *data;
    void *array;
    CHECK_FAILS(lw_buffers_param_array(bs, 0, &array), LW_ERR_STATE, "no rank holds");
    CHECK_FAILS(lw_buffers_param(bs, 1, &data), LW_ERR_STATE, "'l0.w' is not gathered");
    CHECK_FAILS(lw_buffers_grad(bs, 1, &data), LW_ERR_STATE, "whole gradient of 'l0.w'");
    CHECK_FAILS(lw_buffers_release(bs, 1), LW_ERR_STATE, "released more often than acquired");
    CHECK_OK(lw_buffers_acquire(bs, 1, LW_PASS_FORWARD, false));
    CHECK_OK(lw_buffers_param(bs, 1, &data));
    CHECK_FAILS(lw_buffers_start_param_sync(bs), LW_ERR_STATE, "still acquired");
    CHECK_OK(lw_buffers_release(bs, 1));
    lw_buffers_free(bs);
    lw_layout_free(l);
    lo = lw_layout_defaults();
    lo.dp = size;

    /* routed to muon, which updates whole matrices, but lies in an element-wise (distopt) buffer: an element-wise Muon buffer is refused */
    lo.algorithm = LW_ALGORITHM_DISTOPT;
    CHECK_OK(lw_layout_new(specs, N_SPECS, &lo, &l));
    CHECK_OK(lw_buffers_new(l, c, NULL, NULL, &bs));
    CHECK_FAILS(lw_optimizer_new(bs, NULL, &opt), LW_ERR_UNSUPPORTED, "routed to muon, which updates whole matrices, but lies in an element-wise (distopt) buffer");
    lw_buffers_free(bs);
    lw_layout_free(l);
}

int main(void) {
    lw_comm *c = NULL;
    CHECK_OK(lw_comm_init(&c));
    if (c == NULL) return check_exit("test_optimizer");
    make_specs();
    const lw_algorithm aligned[] = {LW_ALGORITHM_COST, LW_ALGORITHM_LPT,
                                    LW_ALGORITHM_SIZE_MATCHING};
    const char *names[] = {"cost", "lpt", "size_matching"};
    char label[64];
    for (int zero = 1; zero <= 3; zero++)
        for (int a = 0; a < 3; a++)
            for (int bucket = 0; bucket < 2; bucket++)
                for (int overlap = 0; overlap < 2; overlap++) {
                    snprintf(label, sizeof label, "%s bucket=%d overlap=%d zero=%d", names[a],
                             bucket, overlap, zero);
                    variant v = {label,
                                 aligned[a],
                                 LW_ALGORITHM_DISTOPT,
                                 bucket ? 1500 : INT64_MAX,
                                 overlap,
                                 0.0f,
                                 -1,
                                 0.0f,
                                 -1,
                                 zero,
                                 0,
                                 false};
                    run_variant(c, specs, N_SPECS, &v);
                }
    for (int zero = 1; zero <= 3; zero++) {
        variant z[] = {
            {"rows", LW_ALGORITHM_ROWS, LW_ALGORITHM_DISTOPT, 1500, true, 0.0f, -1, 0.0f, -1, zero,
             0, false},
            {"rows clipped", LW_ALGORITHM_ROWS, LW_ALGORITHM_DISTOPT, INT64_MAX, false, 1.0f, -1,
             0.0f, -1, zero, 0, false},
            {"scrambled", LW_ALGORITHM_COST, LW_ALGORITHM_DISTOPT, 1500, true, 0.0f, -1, 0.0f, -1,
             zero, 0, true},
            {"scrambled size_matching", LW_ALGORITHM_SIZE_MATCHING, LW_ALGORITHM_COST, 800, true,
             0.0f, -1, 0.0f, -1, zero, 0, true},
            {"two micro-steps", LW_ALGORITHM_LPT, LW_ALGORITHM_DISTOPT, 1500, true, 0.0f, -1, 0.0f,
             -1, zero, 2, false},
            {"nan skipped", LW_ALGORITHM_COST, LW_ALGORITHM_DISTOPT, 1500, true, 0.0f, 1, NAN, -1,
             zero, 2, false},
            {"silent", LW_ALGORITHM_COST, LW_ALGORITHM_DISTOPT, 1500, true, 0.0f, -1, 0.0f, 5, zero,
             0, false},
        };
        for (size_t k = 0; k < sizeof z / sizeof z[0]; k++)
            run_variant(c, specs, N_SPECS, &z[k]);
    }
    variant more[] = {
        {"aligned adamw", LW_ALGORITHM_COST, LW_ALGORITHM_COST, 2000, true, 0.0f, -1, 0.0f, -1, 0,
         0, false},
        {"legacy", LW_ALGORITHM_LEGACY, LW_ALGORITHM_LEGACY, INT64_MAX, true, 0.0f, -1, 0.0f, -1, 0,
         0, false},
        {"legacy buckets", LW_ALGORITHM_LEGACY, LW_ALGORITHM_LEGACY, 1000, false, 0.0f, -1, 0.0f,
         -1, 0, 0, false},
        {"replicated", LW_ALGORITHM_DEFAULT, LW_ALGORITHM_DEFAULT, 1000, true, 0.0f, -1, 0.0f, -1,
         0, 0, false},
        {"clipped", LW_ALGORITHM_COST, LW_ALGORITHM_DISTOPT, 1500, true, 1.0f, -1, 0.0f, -1, 0, 0,
         false},
        {"nan skipped", LW_ALGORITHM_COST, LW_ALGORITHM_DISTOPT, 1500, true, 0.0f, 1, NAN, -1, 0, 0,
         false},
        {"inf skipped", LW_ALGORITHM_LPT, LW_ALGORITHM_DISTOPT, INT64_MAX, false, 0.0f, 2, INFINITY,
         -1, 0, 0, false},
        {"nan legacy", LW_ALGORITHM_LEGACY, LW_ALGORITHM_LEGACY, INT64_MAX, true, 0.0f, 1, NAN, -1,
         0, 0, false},
        {"silent matrix", LW_ALGORITHM_COST, LW_ALGORITHM_DISTOPT, 1500, true, 0.0f, -1, 0.0f, 5, 0,
         0, false},
        {"silent vector", LW_ALGORITHM_SIZE_MATCHING, LW_ALGORITHM_DISTOPT, INT64_MAX, true, 0.0f,
         -1, 0.0f, 4, 0, 0, false},
    };
    for (size_t k = 0; k < sizeof more / sizeof more[0]; k++)
        run_variant(c, specs, N_SPECS, &more[k]);

    /* two parameters: at dp 3 at least one rank owns nothing and still takes part */
    lw_param_spec two[2] = {mat("w", 8, 8, true), vec("g", 4)};
    variant tiny = {"two params",
                    LW_ALGORITHM_COST,
                    LW_ALGORITHM_COST,
                    INT64_MAX,
                    true,
                    0.0f,
                    -1,
                    0.0f,
                    -1,
                    0,
                    0,
                    false};
    run_variant(c, two, 2, &tiny);

    test_errors(c);
    return check_exit_all_ranks(c, "test_optimizer");
}
