/* test_muon_options.c: Muon's options of docs/algorithms.md section 6 (row equilibration,
 * renormalisation, cautious and scaled weight decay, nanochat's coefficients, and all of them
 * as the nanochat preset sets them) through lw_optimizer, at the rank count it is started with
 * (ctest: alone, mpirun -np 2 and 3), at ZeRO-1, 2 and 3, with whole matrices (the cost layout:
 * batches of same-shaped matrices) and row-sharded (the rows layout, in buckets that split
 * matrices between ranks). Every rank feeds a different gradient whose average is known; after 3
 * steps every matrix must equal the float64 reference of muon_reference.h, be far from the
 * reference without the option, and be bit-identical across ranks. Then the same with the option
 * given to one hyper-parameter group only (lw_optimizer_set_group_options): its matrices follow
 * the option's reference, the others (of the same shapes, so batches must part them) the plain
 * one. */
#include "muon_reference.h"
#include "optim_util.h"

enum { N_SPECS = 6, STEPS = 3 };
static lw_param_spec specs[N_SPECS];
static const float LR[2] = {0.05f, 0.01f}, WD[2] = {0.5f, 0.0f};

static void make_specs(void) {
    specs[0] = mat("a.fc", 48, 16, true); /* tall, and a batch of two with b.fc */
    specs[1] = mat("a.proj", 16, 48, true);
    specs[2] = mat("b.fc", 48, 16, true);
    specs[3] = mat("b.proj", 16, 48, true);
    specs[4] = mat("c", 24, 24, true);
    specs[5] = mat("d", 20, 12, true);
}

typedef struct {
    int rank, size;
} who;

/* Rank r's gradient of element i of parameter p at a step (step -1: the initial weights, the
 * same on every rank); the average over ranks is the base, whose rows have norms over two
 * decades (which equilibration evens out). */
static float value(int p, int64_t i, int step, int rank, int size) {
    const uint64_t key = ((uint64_t)p * 1000003u + (uint64_t)i) * 17u + (uint64_t)(step + 1);
    if (step < 0) return (float)(0.1 * hashed(key));
    const int64_t cols = specs[p].shape[1], row = i / cols;
    const double spread = pow(10.0, 2.0 * (double)row / (double)specs[p].shape[0] - 1.0);
    const float base = (float)(spread * hashed(key));
    return base + ((float)rank - (float)(size - 1) / 2.0f) * 0.25f * (float)hashed(key + 7);
}

static void fill(void *ctx, int p, int step, float *host, int64_t n) {
    const who *w = ctx;
    for (int64_t i = 0; i < n; i++)
        host[i] = value(p, i, step, w->rank, w->size);
}

/* The float64 reference of each matrix after STEPS steps, with the averaged gradients. */
static void reference(const lw_muon_options *o, int size, double **w) {
    for (int p = 0; p < N_SPECS; p++) {
        const int64_t rows = specs[p].shape[0], cols = specs[p].shape[1], n = rows * cols;
        double *g = malloc(sizeof(double) * n), *m = calloc((size_t)n, sizeof(double));
        w[p] = malloc(sizeof(double) * n);
        for (int64_t i = 0; i < n; i++)
            w[p][i] = value(p, i, -1, 0, 1);
        for (int step = 0; step < STEPS; step++) {
            for (int64_t i = 0; i < n; i++) {
                double s = 0;
                for (int r = 0; r < size; r++)
                    s += value(p, i, step, r, size);
                g[i] = (float)(s / size);
            }
            ref_muon_update(o, w[p], g, m, rows, cols, LR[0], WD[0]);
        }
        free(g), free(m);
    }
}

/* As test_muon_variants: fp32 against float64 within 1e-5 of how far the weights moved (the
 * batches' and the row shards' Newton-Schulz is the same fp32 arithmetic as one matrix's). */
static const double TOL = 1e-5;

/* The matrices of the group that takes the option by itself ("b" and "d"). */
static bool in_own_group(int p) { return p == 2 || p == 3 || p == 5; }

static void run_case(lw_comm *c, const char *what, const lw_muon_options *o,
                     const lw_muon_options *off, lw_algorithm algorithm, int zero,
                     bool per_group) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c), before = check_failures;
    lw_buffers_options bo = lw_buffers_defaults();
    bo.zero = zero;
    lw_optimizer_options oo = lw_optimizer_defaults(), own = oo;
    oo.muon = per_group ? *off : *o;
    own.muon = *o;
    const int64_t bucket = algorithm == LW_ALGORITHM_ROWS ? 1500 : INT64_MAX;
    rig r;
    if (!rig_new(&r, make_layout(specs, N_SPECS, size, bucket, algorithm, LW_ALGORITHM_DISTOPT),
                 specs, N_SPECS, c, &bo, &oo)) {
        rig_free(&r);
        return;
    }
    who me = {rank, size};
    rig_groups(&r, LR, WD);
    if (per_group) {
        for (int p = 0; p < N_SPECS; p++)
            if (in_own_group(p)) CHECK_OK(lw_optimizer_set_group(r.opt, p, 2));
        CHECK_OK(lw_optimizer_set_hparams(r.opt, 2, LR[0], WD[0]));
        CHECK_OK(lw_optimizer_set_group_options(r.opt, 2, &own));
    }
    rig_write_params(&r, fill, &me);
    lw_step_result res[STEPS];
    rig_steps(&r, STEPS, fill, &me, res);
    float *w[N_SPECS], *start[N_SPECS];
    double *ref[N_SPECS], *ref_off[N_SPECS];
    for (int p = 0; p < N_SPECS; p++) {
        const int64_t n = spec_numel(&specs[p]);
        w[p] = calloc((size_t)n, sizeof(float));
        start[p] = malloc(sizeof(float) * n);
        fill(&me, p, -1, start[p], n);
    }
    rig_read_params(&r, w);
    reference(o, size, ref);
    reference(off, size, ref_off);
    double worst = 0, nearest_off = INFINITY;
    for (int p = 0; p < N_SPECS; p++) {
        const int64_t n = spec_numel(&specs[p]);
        const bool with = !per_group || in_own_group(p);
        worst = fmax(worst, ref_distance(w[p], with ? ref[p] : ref_off[p], start[p], n));
        if (with) nearest_off = fmin(nearest_off, ref_distance(w[p], ref_off[p], start[p], n));
        free(w[p]), free(start[p]), free(ref[p]), free(ref_off[p]);
    }
    CHECK(worst <= TOL);
    CHECK(nearest_off >= 100 * TOL);
    CHECK(identical_across_ranks(c, r.buffers, specs, N_SPECS));
    if (check_failures != before)
        fprintf(stderr,
                "rank %d: %s%s, %s, zero %d: %g from the reference, %g without the option\n",
                rank, what, per_group ? " (one group's)" : "", lw_algorithm_name(algorithm), zero,
                worst, nearest_off);
    rig_free(&r);
}

int main(void) {
    lw_comm *c = NULL;
    CHECK_OK(lw_comm_init(&c));
    if (c == NULL) return check_exit("test_muon_options");
    make_specs();
    const lw_muon_options base = lw_muon_defaults();
    lw_muon_options sets[5], offs[5];
    const char *names[5] = {"row_equilibrate", "renormalize", "cautious_wd", "scaled decay",
                            "the nanochat preset"};
    for (int k = 0; k < 5; k++)
        sets[k] = offs[k] = base;
    sets[0].row_equilibrate = true;
    sets[1].renormalize = true, sets[1].ns_steps = offs[1].ns_steps = 3;
    sets[2].cautious_wd = true;
    sets[3].weight_decay_mode = LW_WD_SCALED;
    lw_muon_options *n = &sets[4];
    n->coeffs = LW_NS_NANOCHAT, n->row_equilibrate = n->renormalize = n->cautious_wd = true;
    n->weight_decay_mode = LW_WD_SCALED, n->scale = LW_MUON_SCALE_SHAPE_SCALING;
    offs[4].scale = LW_MUON_SCALE_SHAPE_SCALING;
    const lw_algorithm layouts[2] = {LW_ALGORITHM_COST, LW_ALGORITHM_ROWS};
    for (int zero = 1; zero <= 3; zero++)
        for (int a = 0; a < 2; a++)
            for (int k = 0; k < 6; k++) {
                const int set = k < 5 ? k : 4; /* then the preset for one group */
                run_case(c, names[set], &sets[set], &offs[set], layouts[a], zero, k == 5);
            }
    return check_exit_all_ranks(c, "test_muon_options");
}
