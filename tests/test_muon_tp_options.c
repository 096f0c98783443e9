/* test_muon_tp_options.c: Muon's options of docs/algorithms.md section 6 under tensor parallelism
 * and the QKV split (section 9), through lw_optimizer at the rank count it is started with (ctest:
 * alone, mpirun -np 2 and 3), the world one TP group: duplicated with every option equals the
 * float64 reference of the full matrices (muon_reference.h; a fused QKV weight's Q, K and V each
 * a matrix of its own, decayed at its own scale); distributed with every option but row
 * equilibration equals it too; blockwise equals each shard alone, scaled and decayed at its full
 * matrix's scale; distributed refuses row equilibration, naming the option and the mode. */
#include "muon_reference.h"
#include "optim_util.h"

enum { NP = 4, STEPS = 2 };
static const float LR = 0.05f, WD = 0.5f;

/* A parameter as the full model has it; TP rank r holds piece r of each of its blocks along its
 * TP dimension (tp_blocks > 0), or all of it. */
typedef struct {
    const char *name;
    int64_t rows, cols;
    int32_t tp_dim, tp_blocks;
    bool qkv; /* [Q; K; V], one group: three blocks of rows / 3 */
} full_param;

static full_param P[NP];
static int T = 1;

static void make_params(int t) {
    T = t;
    const full_param p[NP] = {{"c", 16 * t, 24, 0, 1, false},
                              {"r", 20, 8 * t, 1, 1, false},
                              {"qkv", 24 * t, 16, 0, 3, true},
                              {"rep", 10, 14, 0, 0, false}};
    memcpy(P, p, sizeof P);
}

static int64_t local_rows(const full_param *p) {
    return p->tp_blocks && p->tp_dim == 0 ? p->rows / T : p->rows;
}
static int64_t local_cols(const full_param *p) {
    return p->tp_blocks && p->tp_dim == 1 ? p->cols / T : p->cols;
}

/* Full index of local (i, j) on TP rank r. */
static int64_t full_index(const full_param *p, int r, int64_t i, int64_t j) {
    if (p->tp_blocks > 0) {
        const int64_t size = p->tp_dim == 0 ? p->rows : p->cols, block = size / p->tp_blocks;
        const int64_t piece = block / T, k = p->tp_dim == 0 ? i : j;
        const int64_t f = k / piece * block + r * piece + k % piece;
        if (p->tp_dim == 0)
            i = f;
        else
            j = f;
    }
    return i * p->cols + j;
}

/* The full tensors' values: initial weights (step -1) or a step's gradient, seeded and full-rank
 * (optim_util.h's hashed says why), rows of spread norms. */
static double full_value(int p, int64_t f, int step) {
    const double h = hashed(((uint64_t)p * 1000003u + (uint64_t)f) * 17u + (uint64_t)(step + 1));
    if (step < 0) return 0.05 * h;
    const double row = (double)(f / P[p].cols) / (double)P[p].rows;
    return (float)(pow(10.0, 2.0 * row - 1.0) * h);
}

static void shard_fill(void *ctx, int p, int step, float *host, int64_t n) {
    const int r = *(const int *)ctx;
    const int64_t cols = local_cols(&P[p]);
    for (int64_t i = 0; i < n; i++)
        host[i] = (float)full_value(p, full_index(&P[p], r, i / cols, i % cols), step);
}

/* One update of a whole matrix or, split, of each of its Q, K and V row blocks (rows / 3 each),
 * each scaled as sr x sc (its full shape's multiple: rows times fr). */
static void ref_update(const lw_muon_options *o, double *w, const double *g, double *m,
                       int64_t rows, int64_t cols, bool split, int64_t fr, int64_t fc) {
    const int64_t parts = split ? 3 : 1, r = rows / parts;
    for (int64_t k = 0; k < parts; k++)
        ref_muon_update_as(o, w + k * r * cols, g + k * r * cols, m + k * r * cols, r, cols, fr * r,
                           fc * cols, LR, WD);
}

/* The reference of this rank's shards after STEPS steps: the full matrices updated, then sliced
 * (alone false), or each shard updated alone at its full shape's scale (alone true). */
static void reference(const lw_muon_options *o, int r, bool alone, double **out) {
    for (int p = 0; p < NP; p++) {
        const full_param *fp = &P[p];
        const int64_t lr = local_rows(fp), lc = local_cols(fp);
        const int64_t rows = alone ? lr : fp->rows, cols = alone ? lc : fp->cols, n = rows * cols;
        double *w = malloc(sizeof(double) * n), *g = malloc(sizeof(double) * n);
        double *m = calloc((size_t)n, sizeof(double));
        for (int step = -1; step < STEPS; step++) {
            for (int64_t i = 0; i < n; i++) {
                const int64_t f = alone ? full_index(fp, r, i / cols, i % cols) : i;
                (step < 0 ? w : g)[i] =
                    step < 0 ? (float)full_value(p, f, -1) : full_value(p, f, step);
            }
            if (step >= 0)
                ref_update(o, w, g, m, rows, cols, fp->qkv, alone ? fp->rows / lr : 1,
                           alone ? fp->cols / lc : 1);
        }
        out[p] = malloc(sizeof(double) * lr * lc);
        for (int64_t i = 0; i < lr * lc; i++)
            out[p][i] = w[alone ? i : full_index(fp, r, i / lc, i % lc)];
        free(w), free(g), free(m);
    }
}

/* STEPS steps on this rank's shards; [out] w: them after. False when the optimizer refused. */
static bool run(lw_comm *tp, const lw_muon_options *o, float **w) {
    int r = lw_comm_rank(tp);
    lw_comm *self = NULL;
    CHECK_OK(lw_comm_self(&self));
    lw_param_spec s[NP];
    for (int p = 0; p < NP; p++) {
        s[p] = mat(P[p].name, local_rows(&P[p]), local_cols(&P[p]), true);
        s[p].tp_dim = P[p].tp_dim, s[p].tp_blocks = P[p].tp_blocks;
        if (P[p].qkv) {
            s[p].qkv_groups = 1;
            for (int c = 0; c < 3; c++)
                s[p].qkv_rows[c] = local_rows(&P[p]) / 3;
        }
        w[p] = calloc((size_t)(local_rows(&P[p]) * local_cols(&P[p])), sizeof(float));
    }
    lw_optimizer_options oo = lw_optimizer_defaults();
    oo.muon = *o;
    oo.tp_comm = tp;
    rig rg;
    lw_layout *l = make_layout(s, NP, 1, INT64_MAX, LW_ALGORITHM_COST, LW_ALGORITHM_DISTOPT);
    memset(&rg, 0, sizeof rg);
    rg.specs = s, rg.n = NP, rg.device = lw_device_cpu(), rg.layout = l;
    if (l != NULL) CHECK_OK(lw_buffers_new(l, self, NULL, NULL, &rg.buffers));
    const bool made = rg.buffers != NULL && lw_optimizer_new(rg.buffers, &oo, &rg.opt) == LW_OK;
    if (made) {
        CHECK_OK(lw_optimizer_set_hparams(rg.opt, 0, LR, WD));
        rig_write_params(&rg, shard_fill, &r);
        lw_step_result res[STEPS];
        rig_steps(&rg, STEPS, shard_fill, &r, res);
        rig_read_params(&rg, w);
    }
    rig_free(&rg);
    lw_comm_free(self);
    return made;
}

/* fp32 against float64, the TP modes reordering fp32 sums (test_muon_tp's 1e-3 is their bound
 * against an fp32 TP = 1 run, for gradients of any rank); measured at t = 1 to 3 up to 9e-6 of
 * how far the steps moved the weights: 3e-5. */
static const double TOL = 3e-5;

static void expect_close(const char *what, lw_comm *tp, const lw_muon_options *o, bool alone) {
    const int r = lw_comm_rank(tp);
    float *w[NP];
    double *ref[NP];
    if (!run(tp, o, w)) {
        CHECK_OK(LW_ERR_INVALID); /* the optimizer refused: lw_last_error() says why */
        return;
    }
    reference(o, r, alone, ref);
    for (int p = 0; p < NP; p++) {
        const int64_t n = local_rows(&P[p]) * local_cols(&P[p]);
        float *start = malloc(sizeof(float) * n);
        int rank = r;
        shard_fill(&rank, p, -1, start, n);
        const double d = ref_distance(w[p], ref[p], start, n);
        if (d > TOL)
            fprintf(stderr, "%s, t %d: '%s' %g from the reference\n", what, T, P[p].name, d);
        CHECK(d <= TOL);
        free(start), free(w[p]), free(ref[p]);
    }
}

int main(void) {
    lw_comm *c = NULL;
    CHECK_OK(lw_comm_init(&c));
    if (c == NULL) return check_exit("test_muon_tp_options");
    make_params(lw_comm_size(c));
    lw_muon_options o = lw_muon_defaults();
    o.coeffs = LW_NS_NANOCHAT, o.row_equilibrate = o.renormalize = o.cautious_wd = true;
    o.weight_decay_mode = LW_WD_SCALED, o.scale = LW_MUON_SCALE_SPECTRAL;
    expect_close("duplicated", c, &o, false);
    o.tp_mode = LW_MUON_TP_BLOCKWISE;
    expect_close("blockwise", c, &o, true);
    o.tp_mode = LW_MUON_TP_DISTRIBUTED, o.row_equilibrate = false;
    expect_close("distributed", c, &o, false);
    if (lw_comm_size(c) > 1) {
        o.row_equilibrate = true;
        float *w[NP];
        CHECK(!run(c, &o, w));
        CHECK(strstr(lw_last_error(), "row_equilibrate is not supported with TP mode "
                                      "distributed") != NULL);
        for (int p = 0; p < NP; p++)
            free(w[p]);
    }
    return check_exit_all_ranks(c, "test_muon_tp_options");
}
