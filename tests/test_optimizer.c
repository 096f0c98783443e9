/* test_optimizer.c: the layer-wise optimizer against a one-process Muon + AdamW reference, at
 * whatever rank count it is started with (ctest: alone, mpirun -np 2, -np 3). Every rank feeds
 * different gradients whose average is known; after 3 steps the parameters must equal the
 * reference within 1e-5 and be bit-identical across ranks, for every layout algorithm, with and
 * without buckets and overlap, and for the legacy and replicated modes. */
#include "layout_util.h"

#include <math.h>
#include <stdlib.h>

enum { N_SPECS = 10, STEPS = 3 };
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
}

static int64_t numel_of(const lw_param_spec *s) {
    int64_t n = 1;
    for (int d = 0; d < s->ndim; d++) n *= s->shape[d];
    return n;
}

static float init_value(int p, int64_t i) { return 0.1f * (float)sin(0.7 * p + 0.37 * (double)i); }

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
    int nan_step; /* -1: none */
    float bad;    /* the non-finite value injected at nan_step (NAN or INFINITY) */
    int silent;   /* a param whose gradient never arrives (-1: none): zeros, still synced */
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
        int64_t k = numel_of(&sp[p]);
        w[p] = malloc(sizeof(float) * (size_t)k);
        g[p] = malloc(sizeof(float) * (size_t)k);
        state[p] = calloc((size_t)(2 * k), sizeof(float));
        for (int64_t i = 0; i < k; i++) w[p][i] = init_value(p, i);
    }
    int64_t t = 0;
    for (int step = 0; step < STEPS; step++) {
        double sq = 0;
        for (int p = 0; p < n; p++)
            for (int64_t i = 0; i < numel_of(&sp[p]); i++) {
                double s = 0;
                for (int r = 0; r < size; r++) s += grad_value(p, i, step, r, size);
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
            int grp = sp[p].muon ? 0 : 1;
            if (sp[p].muon)
                CHECK_OK(lw_muon_update(muon, w[p], g[p], state[p], sp[p].shape[0],
                                        sp[p].shape[1], LR[grp], WD[grp], scale));
            else
                lw_adamw_update(&ao, w[p], g[p], state[p], state[p] + numel_of(&sp[p]),
                                numel_of(&sp[p]), t, LR[grp], WD[grp], scale);
        }
    }
    for (int p = 0; p < n; p++) free(g[p]), free(state[p]);
    lw_muon_free(muon);
}

/* Compares rank 0's parameter arrays with this rank's, byte for byte. */
static bool identical_across_ranks(lw_comm *c, lw_buffers *bs, const lw_layout *l) {
    int64_t differs = 0;
    for (int32_t b = 0; b < lw_layout_num_buffers(l); b++) {
        lw_buffer_info info;
        float *data;
        CHECK_OK(lw_layout_buffer(l, b, &info));
        CHECK_OK(lw_buffers_param_array(bs, b, &data));
        float *root = malloc(sizeof(float) * (size_t)info.numel);
        memcpy(root, data, sizeof(float) * (size_t)info.numel);
        CHECK_OK(lw_comm_broadcast(c, root, (int64_t)sizeof(float) * info.numel, 0));
        differs += memcmp(root, data, sizeof(float) * (size_t)info.numel) != 0;
        free(root);
    }
    CHECK_OK(lw_comm_allreduce(c, &differs, 1, LW_DTYPE_I64, LW_REDUCE_SUM));
    return differs == 0;
}

static void run_variant(lw_comm *c, const lw_param_spec *sp, int n, const variant *v) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    int before = check_failures;
    lw_layout_options lo = lw_layout_defaults();
    lo.dp = lo.expert_dp = size;
    lo.bucket_size = v->bucket_size;
    lo.algorithm = v->muon;
    lo.adamw_algorithm = v->adamw;
    lw_layout *l = NULL;
    lw_buffers *bs = NULL;
    lw_optimizer *opt = NULL;
    CHECK_OK(lw_layout_new(sp, n, &lo, &l));
    lw_buffers_options bo = {v->overlap, v->overlap};
    CHECK_OK(lw_buffers_new(l, c, NULL, &bo, &bs));
    lw_optimizer_options oo = lw_optimizer_defaults();
    oo.clip = v->clip;
    CHECK_OK(lw_optimizer_new(bs, &oo, &opt));
    if (opt == NULL) goto done;
    for (int p = 0; p < n; p++) CHECK_OK(lw_optimizer_set_group(opt, p, sp[p].muon ? 0 : 1));
    for (int grp = 0; grp < 2; grp++) CHECK_OK(lw_optimizer_set_hparams(opt, grp, LR[grp], WD[grp]));

    for (int p = 0; p < n; p++) {
        float *w;
        CHECK_OK(lw_buffers_param(bs, p, &w));
        for (int64_t i = 0; i < numel_of(&sp[p]); i++) w[i] = init_value(p, i);
    }
    /* everything this rank updates, summed over ranks, covers every element once */
    int64_t owned = 0, total = 0;
    for (int p = 0; p < n; p++) {
        int64_t start, count;
        CHECK_OK(lw_buffers_owned(bs, p, &start, &count));
        owned += count;
        total += numel_of(&sp[p]);
    }
    CHECK_OK(lw_comm_allreduce(c, &owned, 1, LW_DTYPE_I64, LW_REDUCE_SUM));
    CHECK_EQ(owned, v->muon == LW_ALGORITHM_DEFAULT ? total * size : total);

    float *ref[N_SPECS];
    double norms[STEPS];
    reference(sp, n, v, size, ref, norms);
    for (int step = 0; step < STEPS; step++) {
        /* forward: the pre-hooks finish each group's parameter gather in turn */
        for (int32_t grp = 0; grp < lw_buffers_num_groups(bs); grp++)
            CHECK_OK(lw_buffers_finish_param_sync(bs, grp));
        CHECK_OK(lw_buffers_zero_grad(bs));
        /* backward: gradients arrive in reverse definition order */
        for (int p = n - 1; p >= 0; p--) {
            if (p == v->silent) continue;
            float *g;
            CHECK_OK(lw_buffers_grad(bs, p, &g));
            for (int64_t i = 0; i < numel_of(&sp[p]); i++)
                g[i] = grad_value(p, i, step, rank, size);
            if (step == v->nan_step && p == 3 && rank == size - 1) g[5] = v->bad;
            CHECK_OK(lw_buffers_grad_ready(bs, p));
        }
        lw_step_result r;
        CHECK_OK(lw_optimizer_step(opt, &r));
        if (isfinite(norms[step])) {
            CHECK(fabs(r.grad_norm - norms[step]) <= 1e-5 * norms[step]);
            CHECK(!r.skipped);
        } else {
            CHECK(r.skipped);
            CHECK(!isfinite(r.grad_norm));
        }
    }
    CHECK_OK(lw_buffers_finish_param_sync(bs, -1));
    double worst = 0;
    for (int p = 0; p < n; p++) {
        float *w;
        CHECK_OK(lw_buffers_param(bs, p, &w));
        for (int64_t i = 0; i < numel_of(&sp[p]); i++)
            worst = fmax(worst, fabs((double)w[i] - ref[p][i]));
        free(ref[p]);
    }
    CHECK(worst <= 1e-5);
    CHECK(identical_across_ranks(c, bs, l));
    if (check_failures != before)
        fprintf(stderr, "rank %d: variant %s failed (max diff %g)\n", rank, v->name, worst);
done:
    lw_optimizer_free(opt);
    lw_buffers_free(bs);
    lw_layout_free(l);
}

static void test_errors(lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    lw_layout_options lo = lw_layout_defaults();
    lo.dp = size + 1;
    lw_layout *l = NULL;
    lw_buffers *bs = NULL;
    CHECK_OK(lw_layout_new(specs, N_SPECS, &lo, &l));
    CHECK_FAILS(lw_buffers_new(l, c, NULL, NULL, &bs), LW_ERR_INVALID, "has " );
    CHECK(bs == NULL);
    lw_layout_free(l);

    /* one rank builds another layout: every rank gets an error, none hangs */
    lo.dp = size;
    lo.bucket_size = rank == size - 1 && size > 1 ? 1000 : INT64_MAX;
    CHECK_OK(lw_layout_new(specs, N_SPECS, &lo, &l));
    if (size > 1)
        CHECK_FAILS(lw_buffers_new(l, c, NULL, NULL, &bs), LW_ERR_INVALID, "layout hash");
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
    CHECK_FAILS(lw_optimizer_set_group(opt, N_SPECS, 0), LW_ERR_RANGE, "parameter index 10");
    CHECK_FAILS(lw_buffers_grad_ready(bs, N_SPECS), LW_ERR_RANGE, "parameter index 10");
    CHECK_OK(lw_buffers_grad_ready(bs, 4));
    CHECK_FAILS(lw_buffers_grad_ready(bs, 4), LW_ERR_STATE, "'ln' reported ready twice");
    CHECK_OK(lw_buffers_zero_grad(bs));
    lw_optimizer_free(opt);
    lw_buffers_free(bs);
    lw_layout_free(l);

    /* Muon needs whole matrices: an element-wise Muon buffer is refused */
    lo.algorithm = LW_ALGORITHM_DISTOPT;
    CHECK_OK(lw_layout_new(specs, N_SPECS, &lo, &l));
    CHECK_OK(lw_buffers_new(l, c, NULL, NULL, &bs));
    CHECK_FAILS(lw_optimizer_new(bs, NULL, &opt), LW_ERR_UNSUPPORTED, "Muon needs whole matrices");
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
    for (int a = 0; a < 3; a++)
        for (int bucket = 0; bucket < 2; bucket++)
            for (int overlap = 0; overlap < 2; overlap++) {
                snprintf(label, sizeof label, "%s bucket=%d overlap=%d", names[a], bucket, overlap);
                variant v = {label, aligned[a], LW_ALGORITHM_DISTOPT, bucket ? 1500 : INT64_MAX,
                             overlap, 0.0f, -1, 0.0f, -1};
                run_variant(c, specs, N_SPECS, &v);
            }
    variant more[] = {
        {"aligned adamw", LW_ALGORITHM_COST, LW_ALGORITHM_COST, 2000, true, 0.0f, -1, 0.0f, -1},
        {"legacy", LW_ALGORITHM_LEGACY, LW_ALGORITHM_LEGACY, INT64_MAX, true, 0.0f, -1, 0.0f, -1},
        {"legacy buckets", LW_ALGORITHM_LEGACY, LW_ALGORITHM_LEGACY, 1000, false, 0.0f, -1, 0.0f,
         -1},
        {"replicated", LW_ALGORITHM_DEFAULT, LW_ALGORITHM_DEFAULT, 1000, true, 0.0f, -1, 0.0f, -1},
        {"clipped", LW_ALGORITHM_COST, LW_ALGORITHM_DISTOPT, 1500, true, 1.0f, -1, 0.0f, -1},
        {"nan skipped", LW_ALGORITHM_COST, LW_ALGORITHM_DISTOPT, 1500, true, 0.0f, 1, NAN, -1},
        {"inf skipped", LW_ALGORITHM_LPT, LW_ALGORITHM_DISTOPT, INT64_MAX, false, 0.0f, 2,
         INFINITY, -1},
        {"nan legacy", LW_ALGORITHM_LEGACY, LW_ALGORITHM_LEGACY, INT64_MAX, true, 0.0f, 1, NAN, -1},
        {"silent matrix", LW_ALGORITHM_COST, LW_ALGORITHM_DISTOPT, 1500, true, 0.0f, -1, 0.0f, 5},
        {"silent vector", LW_ALGORITHM_SIZE_MATCHING, LW_ALGORITHM_DISTOPT, INT64_MAX, true, 0.0f,
         -1, 0.0f, 4},
    };
    for (size_t k = 0; k < sizeof more / sizeof more[0]; k++)
        run_variant(c, specs, N_SPECS, &more[k]);

    /* two parameters: at dp 3 at least one rank owns nothing and still takes part */
    lw_param_spec two[2] = {mat("w", 8, 8, true), vec("g", 4)};
    variant tiny = {"two params", LW_ALGORITHM_COST, LW_ALGORITHM_COST, INT64_MAX, true, 0.0f, -1,
                    0.0f, -1};
    run_variant(c, two, 2, &tiny);

    test_errors(c);
    return check_exit_all_ranks(c, "test_optimizer");
}
