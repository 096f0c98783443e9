/* test_muon_tp.c: Muon under tensor parallelism and the QKV split (docs/algorithms.md section 9)
 * through lw_optimizer, at the rank count it is started with (ctest: alone, and under mpirun
 * at 2, 3 and 4 ranks). The world is one TP group of t = size ranks (DP 1); at 4 ranks also a
 * grid of TP 2 inside DP 2 (TP groups of consecutive ranks), with the cost and the rows layouts.
 * Every rank computes the full matrices and a one-process reference from the same values and
 * checks its own shards: duplicated equals TP = 1 (both dimensions, 1 and 3 blocks), distributed
 * equals duplicated, blockwise equals a per-shard reference and not duplicated, the scale is
 * the full shape's, the QKV split equals a split by hand (one group and a grouped-query shape),
 * split_qkv off is the optimizer of before bit for bit (t = 1), the gradient norm and zero count
 * take each TP shard once and each replicated tensor once, and bad metadata is refused. */
#include "optim_util.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>

enum { STEPS = 2, NP = 9 };
static const float LR = 0.02f, WD = 0.1f;

/* A parameter as the full model has it; TP rank r holds its shard (tp_blocks > 0). */
typedef struct full_param {
    const char *name;
    int64_t rows, cols; /* full shape; cols 1 and dims 1: a vector */
    int dims;
    int32_t tp_dim, tp_blocks;
    bool muon;
    int32_t groups;      /* qkv: the local shard's groups and rows, as its spec says */
    int64_t qkv[3];
    int32_t full_groups; /* ... and the full matrix's (groups over every TP rank) */
    int64_t full_qkv[3];
} full_param;

static full_param P[NP];
static int T = 1; /* the TP size the params were made for */

static void make_params(int t) {
    T = t;
    const full_param p[NP] = {
        {"c1", 16 * t, 24, 2, 0, 1, true, 0, {0}, 0, {0}},
        {"c3", 24 * t, 16, 2, 0, 3, true, 0, {0}, 0, {0}},
        {"r1", 20, 8 * t, 2, 1, 1, true, 0, {0}, 0, {0}},
        {"r3", 12, 12 * t, 2, 1, 3, true, 0, {0}, 0, {0}},
        {"rep", 10, 14, 2, 0, 0, true, 0, {0}, 0, {0}},
        /* GPT's fused [Q; K; V]: three blocks, one group of C/t rows each per rank */
        {"qkv", 24 * t, 16, 2, 0, 3, true, 1, {8, 8, 8}, 1, {8 * t, 8 * t, 8 * t}},
        /* grouped-query attention, Megatron's layout: 2 KV groups per rank, 2 query heads per
         * group, head dim 4 */
        {"gqa", 32 * t, 12, 2, 0, 1, true, 2, {8, 4, 4}, 2 * t, {8, 4, 4}},
        {"ln", 14, 1, 1, 0, 0, false, 0, {0}, 0, {0}},
        {"bias", 16 * t, 1, 1, 0, 1, false, 0, {0}, 0, {0}},
    };
    memcpy(P, p, sizeof P);
}

static int64_t local_rows(const full_param *p) {
    return p->tp_blocks && p->tp_dim == 0 ? p->rows / T : p->rows;
}
static int64_t local_cols(const full_param *p) {
    return p->tp_blocks && p->tp_dim == 1 ? p->cols / T : p->cols;
}
static int64_t local_numel(const full_param *p) { return local_rows(p) * local_cols(p); }

/* Full index of local (i, j) on TP rank r: along the TP dimension, piece r of every block. */
static int64_t full_index(const full_param *p, int r, int64_t i, int64_t j) {
    if (p->tp_blocks > 0) {
        const int64_t size = p->tp_dim == 0 ? p->rows : p->cols, block = size / p->tp_blocks;
        const int64_t piece = block / T, k = p->tp_dim == 0 ? i : j;
        const int64_t f = k / piece * block + r * piece + k % piece;
        if (p->tp_dim == 0) i = f;
        else j = f;
    }
    return i * p->cols + j;
}

/* Seeded values of the full tensors, full-rank; about 1 in 13 gradient elements exactly 0. */
static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 29;
    return x;
}
static float init_value(int p, int64_t f) {
    return 0.05f * (float)((int64_t)(mix((uint64_t)p * 7919 + (uint64_t)f) % 2001) - 1000) / 1000;
}
static float grad_value(int p, int64_t f, int step) {
    uint64_t h = mix(mix((uint64_t)p * 104729 + (uint64_t)f) + (uint64_t)step);
    return h % 13 == 0 ? 0.0f : (float)((int64_t)(h % 2001) - 1000) / 1000.0f;
}

static float *full_array(int p, int step) { /* step -1: the initial weights */
    const int64_t n = P[p].rows * P[p].cols;
    float *a = malloc(sizeof(float) * (size_t)n);
    for (int64_t f = 0; f < n; f++)
        a[f] = step < 0 ? init_value(p, f) : grad_value(p, f, step);
    return a;
}

/* What a run sets: the TP mode, the split, the scale, the Muon layout. */
typedef struct config {
    lw_muon_tp_mode mode;
    bool split;
    lw_muon_scale scale;
    lw_algorithm algorithm;
} config;

static double scale_of(lw_muon_scale s, double r, double c) {
    const double big = r > c ? r : c;
    if (s == LW_MUON_SCALE_UNIT_RMS_NORM) return sqrt(r / c);
    if (s == LW_MUON_SCALE_SHAPE_SCALING) return sqrt(r / c > 1.0 ? r / c : 1.0);
    if (s == LW_MUON_SCALE_MOONLIGHT) return 0.2 * sqrt(big);
    return sqrt(big);
}

/* One Muon step by hand on a rows x cols matrix: weight decay and momentum, then the whole
 * matrix or, with groups, each of its Q, K and V (every group's rows of that kind, in group
 * order) orthogonalised and scaled by its shape with rows times fr and cols times fc. */
static void ref_step(lw_muon *m, lw_muon_scale scale, float *w, const float *g, float *mom,
                     int64_t rows, int64_t cols, int32_t groups, const int64_t *qkv, int64_t fr,
                     int64_t fc) {
    const int64_t n = rows * cols;
    float *u = malloc(sizeof(float) * (size_t)n), *part = malloc(sizeof(float) * (size_t)n);
    CHECK_OK(lw_muon_momentum(m, NULL, w, g, mom, u, n, LR, WD, 1.0f));
    const int64_t whole[3] = {rows, 0, 0};
    const int64_t *kinds = groups > 0 ? qkv : whole;
    const int64_t per = groups > 0 ? qkv[0] + qkv[1] + qkv[2] : rows, ng = groups > 0 ? groups : 1;
    for (int c = 0, first = 0; c < 3 && kinds[c] > 0; first += (int)kinds[c], c++) {
        const int64_t r = ng * kinds[c];
        for (int64_t k = 0; k < ng; k++)
            memcpy(part + k * kinds[c] * cols, u + (k * per + first) * cols,
                   sizeof(float) * (size_t)(kinds[c] * cols));
        CHECK_OK(lw_muon_orthogonalize(m, NULL, part, part, r, cols));
        const float s = (float)scale_of(scale, (double)(r * fr), (double)(cols * fc));
        for (int64_t k = 0; k < ng; k++)
            for (int64_t e = 0; e < kinds[c] * cols; e++)
                w[(k * per + first) * cols + e] -= LR * (s * part[k * kinds[c] * cols + e]);
    }
    free(u);
    free(part);
}

/* The full model's Muon matrices after STEPS steps on one process (split: the QKV weights by
 * hand; otherwise lw_muon_update, today's single-matrix update). */
static void reference_full(const config *cfg, float **w) {
    lw_muon_options o = lw_muon_defaults();
    o.scale = cfg->scale;
    lw_muon *m = NULL;
    CHECK_OK(lw_muon_new(&o, &m));
    for (int p = 0; p < NP; p++) {
        w[p] = full_array(p, -1);
        if (!P[p].muon) continue;
        const int64_t n = P[p].rows * P[p].cols;
        float *mom = calloc((size_t)n, sizeof(float));
        for (int step = 0; step < STEPS; step++) {
            float *g = full_array(p, step);
            if (cfg->split && P[p].groups > 0)
                ref_step(m, cfg->scale, w[p], g, mom, P[p].rows, P[p].cols, P[p].full_groups,
                         P[p].full_qkv, 1, 1);
            else
                CHECK_OK(lw_muon_update(m, NULL, w[p], g, mom, P[p].rows, P[p].cols, LR, WD,
                                        1.0f));
            free(g);
        }
        free(mom);
    }
    lw_muon_free(m);
}

/* Each shard alone (blockwise), scaled by the full shape (full true) or its own. */
static void reference_shards(const config *cfg, int r, bool full, float **w) {
    lw_muon_options o = lw_muon_defaults();
    lw_muon *m = NULL;
    CHECK_OK(lw_muon_new(&o, &m));
    for (int p = 0; p < NP; p++) {
        const int64_t rows = local_rows(&P[p]), cols = local_cols(&P[p]), n = rows * cols;
        float *all = full_array(p, -1), *mom = calloc((size_t)n, sizeof(float));
        w[p] = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++)
            w[p][i] = all[full_index(&P[p], r, i / cols, i % cols)];
        for (int step = 0; P[p].muon && step < STEPS; step++) {
            float *g = full_array(p, step), *lg = malloc(sizeof(float) * (size_t)n);
            for (int64_t i = 0; i < n; i++)
                lg[i] = g[full_index(&P[p], r, i / cols, i % cols)];
            const bool sharded = full && P[p].tp_blocks > 0;
            ref_step(m, cfg->scale, w[p], lg, mom, rows, cols, cfg->split ? P[p].groups : 0,
                     P[p].qkv, sharded && P[p].tp_dim == 0 ? T : 1,
                     sharded && P[p].tp_dim == 1 ? T : 1);
            free(g);
            free(lg);
        }
        free(all);
        free(mom);
    }
    lw_muon_free(m);
}

/* The specs of this rank's shards. */
static void local_specs(lw_param_spec *s) {
    for (int p = 0; p < NP; p++) {
        s[p] = P[p].dims == 2 ? mat(P[p].name, local_rows(&P[p]), local_cols(&P[p]), P[p].muon)
                              : vec(P[p].name, local_rows(&P[p]));
        s[p].tp_dim = P[p].tp_dim;
        s[p].tp_blocks = P[p].tp_blocks;
        s[p].qkv_groups = P[p].groups;
        memcpy(s[p].qkv_rows, P[p].qkv, sizeof P[p].qkv);
    }
}

/* TP rank *ctx's shard of the full tensors: the initial weights (step -1) or a step's gradient. */
static void shard_fill(void *ctx, int p, int step, float *host, int64_t n) {
    const int r = *(const int *)ctx;
    float *all = full_array(p, step);
    for (int64_t i = 0; i < n; i++)
        host[i] = all[full_index(&P[p], r, i / local_cols(&P[p]), i % local_cols(&P[p]))];
    free(all);
}

/* STEPS steps of the optimizer on this rank's shards (every DP rank feeds the same gradient);
 * [out] w: the local parameters after them, norm and zeros: the first step's. */
static void run(lw_comm *tp, lw_comm *dp, const config *cfg, float **w, double *norm,
                int64_t *zeros) {
    int r = tp ? lw_comm_rank(tp) : 0;
    lw_param_spec s[NP];
    local_specs(s);
    lw_optimizer_options oo = lw_optimizer_defaults();
    oo.muon.tp_mode = cfg->mode;
    oo.muon.split_qkv = cfg->split;
    oo.muon.scale = cfg->scale;
    oo.tp_comm = tp;
    for (int p = 0; p < NP; p++)
        w[p] = calloc((size_t)local_numel(&P[p]), sizeof(float));
    rig rg;
    lw_layout *l = make_layout(s, NP, lw_comm_size(dp), 600, cfg->algorithm, LW_ALGORITHM_DISTOPT);
    if (rig_new(&rg, l, s, NP, dp, NULL, &oo)) {
        CHECK_OK(lw_optimizer_set_hparams(rg.opt, 0, LR, WD));
        rig_write_params(&rg, shard_fill, &r);
        lw_step_result res[STEPS];
        rig_steps(&rg, STEPS, shard_fill, &r, res);
        *norm = res[0].grad_norm, *zeros = res[0].zeros;
        rig_read_params(&rg, w);
    }
    rig_free(&rg);
}

/* Largest difference of a shard from b's (b: full == true, the full model's, sliced here),
 * over the largest update of the reference: relative to what the steps changed. */
static double differs(int p, int r, const float *a, const float *b, bool full) {
    float *init = full_array(p, -1);
    double diff = 0.0, moved = 0.0;
    for (int64_t i = 0; i < local_numel(&P[p]); i++) {
        const int64_t f = full_index(&P[p], r, i / local_cols(&P[p]), i % local_cols(&P[p]));
        const double ref = b[full ? f : i];
        diff = fmax(diff, fabs((double)a[i] - ref));
        moved = fmax(moved, fabs(ref - init[f]));
    }
    free(init);
    return diff / moved;
}

static void free_all(float **w) {
    for (int p = 0; p < NP; p++)
        free(w[p]);
}

/* Duplicated and distributed against TP = 1 reorder fp32 sums only: the gathered matrix is the
 * full one with its rows or columns permuted, and distributed sums the Gram matrix's partial
 * products over TP. A sum of q products carries a relative rounding of about sqrt(q) * 2^-24
 * (random walk; q <= 48 here: 4e-7); each of the 5 quintic steps can amplify a perturbation by
 * at most its polynomial's largest slope, a = 4.1 near 0 (4.1^5 ~ 1.2e3); and momentum carries
 * step 1's error into step 2 (x2): about 1e-3 of an update, in the worst element. */
static const double TOL = 1e-3;

static bool sharded(int p) { return P[p].tp_blocks > 0 && T > 1; }

/* Each TP mode, the split and the scale, over tp (and dp). */
static void test_modes(lw_comm *tp, lw_comm *dp, const char *where) {
    const int r = lw_comm_rank(tp);
    const int before = check_failures;
    float *full[NP], *dup[NP], *dist[NP], *off_full[NP], *off[NP], *block[NP], *shard[NP],
        *own[NP], *dup_rms[NP];
    double norm = 0, n2 = 0;
    int64_t zeros = 0, z2 = 0;
    config c = {LW_MUON_TP_DUPLICATED, true, LW_MUON_SCALE_MOONLIGHT, LW_ALGORITHM_COST};
    reference_full(&c, full);
    run(tp, dp, &c, dup, &norm, &zeros);
    c.mode = LW_MUON_TP_DISTRIBUTED;
    run(tp, dp, &c, dist, &n2, &z2);
    c.mode = LW_MUON_TP_DUPLICATED;
    c.split = false;
    reference_full(&c, off_full);
    run(tp, dp, &c, off, &n2, &z2);
    for (int p = 0; p < NP; p++) {
        if (!P[p].muon) continue;
        const double d_dup = differs(p, r, dup[p], full[p], true);
        const double d_dist = differs(p, r, dist[p], dup[p], false);
        const double d_off = differs(p, r, off[p], off_full[p], true);
        CHECK(d_dup <= TOL);  /* duplicated == TP = 1 (with the split by hand) */
        CHECK(d_dist <= TOL); /* distributed == duplicated */
        CHECK(d_off <= TOL);  /* split_qkv off: the fused weight as one matrix */
        /* a replicated matrix (and, at t = 1, every matrix without the split) takes today's
         * path: lw_muon_update's result bit for bit */
        if (!sharded(p) && !(P[p].groups > 0)) CHECK(d_dup == 0.0 && d_off == 0.0);
        if (T == 1) CHECK(d_off == 0.0);
        /* the split changes a fused weight's update */
        if (P[p].groups > 0) CHECK(differs(p, r, off[p], dup[p], false) > 100 * TOL);
        if (check_failures != before)
            fprintf(stderr, "%s: '%s': duplicated %g, distributed %g, split off %g\n", where,
                    P[p].name, d_dup, d_dist, d_off);
    }
    /* blockwise: each shard alone, scaled by the full shape (unit_rms_norm: rows / cols) */
    c = (config){LW_MUON_TP_BLOCKWISE, true, LW_MUON_SCALE_UNIT_RMS_NORM, LW_ALGORITHM_COST};
    run(tp, dp, &c, block, &n2, &z2);
    reference_shards(&c, r, true, shard);
    reference_shards(&c, r, false, own);
    c.mode = LW_MUON_TP_DUPLICATED;
    run(tp, dp, &c, dup_rms, &n2, &z2);
    for (int p = 0; p < NP; p++) {
        if (!P[p].muon) continue;
        const double d = differs(p, r, block[p], shard[p], false);
        CHECK(d <= 1e-6);
        if (sharded(p)) {
            CHECK(differs(p, r, block[p], own[p], false) > 1e-2); /* not the shard's scale */
            CHECK(differs(p, r, block[p], dup_rms[p], false) > 100 * TOL); /* not duplicated */
        }
        if (d > 1e-6) fprintf(stderr, "%s: '%s': blockwise %g\n", where, P[p].name, d);
    }
    /* the first step's norm and zeros: every full tensor once */
    double sq = 0;
    int64_t zero = 0;
    for (int p = 0; p < NP; p++) {
        float *g = full_array(p, 0);
        for (int64_t f = 0; f < P[p].rows * P[p].cols; f++)
            sq += (double)g[f] * g[f], zero += g[f] == 0.0f;
        free(g);
    }
    CHECK(fabs(norm - sqrt(sq)) <= 1e-9 * sqrt(sq));
    CHECK_EQ(zeros, zero);
    float **all[] = {full, dup, dist, off_full, off, block, shard, own, dup_rms};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
        free_all(all[k]);
}

/* Bad metadata is refused with the parameter and the numbers named; the cost of a fused QKV
 * weight is its Q, K and V matrices'. */
static void test_metadata(void) {
    lw_layout *l = NULL;
    lw_param_spec s = mat("h.0.qkv", 48, 16, true);
    s.tp_dim = 2, s.tp_blocks = 3;
    CHECK_FAILS(lw_layout_new(&s, 1, NULL, &l), LW_ERR_INVALID,
                "'h.0.qkv' is sharded over TP along dimension 2, but it has 2 dimensions "
                "(tp_dim 0 to 1)");
    s.tp_dim = 1;
    CHECK_FAILS(lw_layout_new(&s, 1, NULL, &l), LW_ERR_INVALID,
                "'h.0.qkv' has local size 16 along its TP dimension 1, not a multiple of its 3 "
                "TP blocks");
    s.tp_blocks = -1;
    CHECK_FAILS(lw_layout_new(&s, 1, NULL, &l), LW_ERR_INVALID, "'h.0.qkv' has tp_blocks -1");
    s.tp_dim = 0, s.tp_blocks = 3;
    s.qkv_groups = 2, s.qkv_rows[0] = 8, s.qkv_rows[1] = 8, s.qkv_rows[2] = 4;
    CHECK_FAILS(lw_layout_new(&s, 1, NULL, &l), LW_ERR_INVALID,
                "'h.0.qkv' has 48 rows, but its 2 qkv groups of 8 + 8 + 4 rows make 40");
    s.qkv_rows[2] = 0;
    CHECK_FAILS(lw_layout_new(&s, 1, NULL, &l), LW_ERR_INVALID,
                "'h.0.qkv' has qkv rows {8, 8, 0}: each must be between 1 and its 48 rows");
    s.qkv_groups = -1;
    CHECK_FAILS(lw_layout_new(&s, 1, NULL, &l), LW_ERR_INVALID, "'h.0.qkv' has qkv_groups -1");
    lw_param_spec v = vec("b", 48);
    v.qkv_groups = 1, v.qkv_rows[0] = v.qkv_rows[1] = v.qkv_rows[2] = 16;
    CHECK_FAILS(lw_layout_new(&v, 1, NULL, &l), LW_ERR_INVALID,
                "'b' is a fused QKV weight (qkv_groups 1) but has 1 dimensions");
    CHECK(l == NULL);
    /* grouped-query: 3 groups of 8 + 4 + 4 rows: Q 24 x 16, K and V 12 x 16 */
    s.qkv_groups = 3, s.qkv_rows[2] = 4, s.qkv_rows[1] = 4;
    CHECK_OK(lw_layout_new(&s, 1, NULL, &l));
    int64_t numel = 0;
    double cost = 0;
    CHECK_OK(lw_layout_rank_load(l, 0, &numel, &cost));
    CHECK(cost == 24.0 * 16 * 16 + 2 * 16.0 * 12 * 12); /* not 48 * 16 * 16 */
    lw_layout_free(l);

    lw_optimizer_options oo = lw_optimizer_defaults();
    CHECK(oo.muon.tp_mode == LW_MUON_TP_DUPLICATED && oo.muon.split_qkv && oo.tp_comm == NULL);
    oo.muon.tp_mode = (lw_muon_tp_mode)7;
    lw_muon *m = NULL;
    CHECK_FAILS(lw_muon_new(&oo.muon, &m), LW_ERR_INVALID, "unknown TP mode 7");
}

/* TP ranks with different layouts are refused on every rank, none left waiting. */
static void test_layouts_differ(lw_comm *tp) {
    lw_comm *self = NULL;
    CHECK_OK(lw_comm_self(&self));
    lw_param_spec s[NP];
    local_specs(s);
    lw_layout *l = make_layout(s, NP, 1, lw_comm_rank(tp) == 1 ? 300 : 600, LW_ALGORITHM_COST,
                               LW_ALGORITHM_DISTOPT);
    lw_buffers *bs = NULL;
    lw_optimizer *opt = NULL;
    if (l != NULL) CHECK_OK(lw_buffers_new(l, self, NULL, NULL, &bs));
    lw_optimizer_options oo = lw_optimizer_defaults();
    oo.tp_comm = tp;
    CHECK_FAILS(lw_optimizer_new(bs, &oo, &opt), LW_ERR_INVALID,
                "the layouts of 1 of the");
    CHECK(opt == NULL);
    lw_buffers_free(bs);
    lw_layout_free(l);
    lw_comm_free(self);
}

int main(void) {
    /* The bit-for-bit checks compare the optimizer's path with lw_muon_update's: on the CPU the
     * optimizer orthogonalises a batch a matrix per thread, each on one OpenBLAS thread, and a
     * lone matrix on all of them, whose GEMMs round differently. On one thread both are alike. */
    openblas_set_num_threads(1);
    lw_comm *c = NULL, *self = NULL;
    CHECK_OK(lw_comm_init(&c));
    if (c == NULL) return check_exit("test_muon_tp");
    CHECK_OK(lw_comm_self(&self));
    const int size = lw_comm_size(c), rank = lw_comm_rank(c);
    test_metadata();
    /* the world as one TP group */
    make_params(size);
    test_modes(c, self, "tp = world");
    if (size > 1) test_layouts_differ(c);
    if (size == 1) { /* no TP communicator at all: the same as a group of one */
        float *none[NP], *ref[NP];
        double norm;
        int64_t zeros;
        const config off = {LW_MUON_TP_DUPLICATED, false, LW_MUON_SCALE_MOONLIGHT,
                            LW_ALGORITHM_COST};
        run(NULL, self, &off, none, &norm, &zeros);
        reference_full(&off, ref);
        for (int p = 0; p < NP; p++)
            if (P[p].muon) CHECK(memcmp(none[p], ref[p], 4 * (size_t)local_numel(&P[p])) == 0);
        free_all(none);
        free_all(ref);
    }
    /* TP 2 inside DP size / 2: the owners of a matrix's shards form a TP group */
    if (size == 4) {
        lw_comm *tp = NULL, *dp = NULL;
        CHECK_OK(lw_comm_split(c, rank / 2, rank % 2, &tp));
        CHECK_OK(lw_comm_split(c, rank % 2, rank / 2, &dp));
        make_params(2);
        test_modes(tp, dp, "tp 2 x dp 2");
        /* row-sharded Muon under TP: every DP rank orthogonalises every matrix */
        float *full[NP], *rows[NP];
        double norm;
        int64_t zeros;
        for (int mode = LW_MUON_TP_DUPLICATED; mode <= LW_MUON_TP_DISTRIBUTED; mode++) {
            const config cfg = {(lw_muon_tp_mode)mode, true, LW_MUON_SCALE_MOONLIGHT,
                                LW_ALGORITHM_ROWS};
            reference_full(&cfg, full);
            run(tp, dp, &cfg, rows, &norm, &zeros);
            for (int p = 0; p < NP; p++)
                if (P[p].muon) CHECK(differs(p, lw_comm_rank(tp), rows[p], full[p], true) <= TOL);
            free_all(full);
            free_all(rows);
        }
        lw_comm_free(tp);
        lw_comm_free(dp);
    }
    lw_comm_free(self);
    return check_exit_all_ranks(c, "test_muon_tp");
}
