/* test_rules.c: every optimizer rule through lw_optimizer_step against a float64 reference of its
 * formula written here (not the library's kernels), at whatever rank count it is started with
 * (ctest: alone, mpirun -np 2, -np 3), at ZeRO-1, 2 and 3, with the element-wise rules' buffers
 * shard-aligned (cost) or element-wise (distopt). Ranks feed different gradients whose average is
 * known; 3 steps, one clipped; two hyper-parameter groups; non-default AdamW and Lion options.
 * Checked: parameters within each rule's stated tolerance of the reference and bit-identical
 * across ranks; the state each rank lends, part by part (count and values), against the
 * reference's; the refusals (a whole-matrix rule on a tensor that is not 2-D, an unknown rule,
 * NorMuon row-sharded). A new rule adds one row to
 * `cases` (its reference step, part names and tolerances). */
#include "muon_reference.h"
#include "optim_util.h"

#include <math.h>
#include <stdlib.h>

enum { N_SPECS = 10, STEPS = 3, MAX_PARTS = 4, N_CASES = 4 };
static const double U = 1.0 / 16777216.0; /* fp32 unit roundoff, 2^-24 */

static lw_param_spec specs[N_SPECS];
/* every rule has a parameter in each group, and AdamW and Lion a matrix and a vector */
static const int GROUP[N_SPECS] = {0, 0, 1, 1, 1, 1, 0, 0, 0, 1};
static const float LR[2] = {0.02f, 0.01f}, WD[2] = {0.1f, 0.05f};
/* the gradient norm is about 38 at steps 0 and 2 and three times that at step 1: only step 1
 * is clipped (checked on the reference's norms) */
static const float AMP[STEPS] = {1.0f, 3.0f, 1.0f}, CLIP = 60.0f;

static lw_param_spec routed(lw_param_spec s, lw_optimizer_kind kind) {
    s.optimizer = kind;
    return s;
}

static void make_specs(void) {
    specs[0] = mat("emb", 40, 16, false);
    specs[1] = mat("l0.w", 24, 16, true); /* tall: Newton-Schulz on the transpose */
    specs[2] = routed(vec("l0.b", 24), LW_OPTIMIZER_LION);
    specs[3] = mat("l0.o", 16, 40, true); /* wide */
    specs[4] = vec("ln", 16);
    specs[5] = mat("l1.w", 24, 16, true); /* l0.w's shape: one batch where a rank owns both */
    specs[6] = routed(mat("head", 12, 16, false), LW_OPTIMIZER_LION);
    specs[7] = routed(vec("l1.b", 37), LW_OPTIMIZER_LION); /* odd: uneven distopt slices */
    /* NorMuon: a statistic per row of the tall one, per column of the wide one */
    specs[8] = routed(mat("l1.o", 20, 12, true), LW_OPTIMIZER_NORMUON);
    specs[9] = routed(mat("l1.p", 12, 28, true), LW_OPTIMIZER_NORMUON);
}

/* rank's gradient; the average over ranks is AMP * cos(...). The i^2 term makes the matrices
 * full rank (a cos of row + col phases is rank 2): the 16 x 40 updates well conditioned, the
 * 24 x 16 ones with singular values down to 1e-6 of their largest, where Newton-Schulz amplifies
 * rounding the most (the tolerances). */
static float grad_value(int p, int64_t i, int step, int rank, int size) {
    const double x = (double)i;
    float base = AMP[step] * (float)cos(0.3 * p + 0.11 * x + 0.002 * x * x + 1.3 * step);
    float spread = 0.25f * (float)sin(0.5 * x + p);
    return base + ((float)rank - (float)(size - 1) / 2.0f) * spread;
}

typedef struct feed {
    int rank, size;
} feed;

static void fill(void *ctx, int p, int step, float *host, int64_t n) {
    const feed *f = ctx;
    for (int64_t i = 0; i < n; i++)
        host[i] = step < 0 ? smooth_init(p, i) : grad_value(p, i, step, f->rank, f->size);
}

/* ---- the rules' formulas in double ---------------------------------------------------------- */

/* One tensor's step: w, the averaged gradient g (before clipping) and the state parts, numel
 * each; t counts updates from 1; gmax is the largest |gradient| a rank fed it, clipped. */
typedef struct ref_args {
    const lw_param_spec *spec;
    const lw_optimizer_options *o;
    double lr, wd, grad_scale, gmax;
    int64_t t;
} ref_args;
typedef void (*ref_step)(const ref_args *a, double *w, const double *g, double *const *state);

/* docs/algorithms.md section 7 */
static void reference_adamw(const ref_args *a, double *w, const double *g, double *const *s) {
    const double b1 = a->o->adamw.beta1, b2 = a->o->adamw.beta2, eps = a->o->adamw.eps;
    for (int64_t i = 0; i < spec_numel(a->spec); i++) {
        const double gi = a->grad_scale * g[i];
        s[0][i] = b1 * s[0][i] + (1 - b1) * gi;
        s[1][i] = b2 * s[1][i] + (1 - b2) * gi * gi;
        const double mhat = s[0][i] / (1 - pow(b1, (double)a->t));
        const double vhat = s[1][i] / (1 - pow(b2, (double)a->t));
        w[i] -= a->lr * (mhat / (sqrt(vhat) + eps) + a->wd * w[i]);
    }
}

/* The smallest |c| Lion's sign was taken of, over the size of c's terms: fp32 computes c to
 * within a few tens of ulps of those terms, so a margin well above that means no sign can
 * differ from the reference's. */
static double lion_margin = INFINITY;

/* docs/algorithms.md section 7, Chen et al. 2023's Algorithm 2: c = b1 m + (1 - b1) g;
 * w -= lr (sign(c) + wd w); m = b2 m + (1 - b2) g */
static void reference_lion(const ref_args *a, double *w, const double *g, double *const *s) {
    const double b1 = a->o->lion.beta1, b2 = a->o->lion.beta2;
    for (int64_t i = 0; i < spec_numel(a->spec); i++) {
        const double gi = a->grad_scale * g[i], c = b1 * s[0][i] + (1 - b1) * gi;
        lion_margin = fmin(lion_margin, fabs(c) / (b1 * fabs(s[0][i]) + (1 - b1) * a->gmax));
        w[i] -= a->lr * ((c > 0) - (c < 0) + a->wd * w[i]);
        s[0][i] = b2 * s[0][i] + (1 - b2) * gi;
    }
}

/* The default coefficient set (LW_NS_QUINTIC), cycled: the fp32 constants of QUINTIC in
 * src/core/optim/muon.c (docs/algorithms.md section 6); no public call returns them. */
static const float QUINTIC[5][3] = {{4.0848f, -6.8946f, 2.9270f},
                                    {3.9505f, -6.3029f, 2.6377f},
                                    {3.7418f, -5.5913f, 2.3037f},
                                    {2.8769f, -3.1427f, 1.2046f},
                                    {2.8366f, -3.0525f, 1.2012f}};

/* sum of a[k sa] b[k sb] over k < n */
static double dot(const double *a, int64_t sa, const double *b, int64_t sb, int64_t n) {
    double s = 0;
    for (int64_t k = 0; k < n; k++)
        s += a[k * sa] * b[k * sb];
    return s;
}

/* docs/algorithms.md section 6 with the defaults main checks: decoupled weight decay before the
 * momentum; EMA momentum, Nesterov's look-ahead as U; X = U / max(|U|_F, eps), on the transpose
 * when rows > cols; per step A = X X^T, X = a X + (b A + c A A) X; W -= lr * moonlight scale *
 * extra * X. */
static void reference_muon(const ref_args *a, double *w, const double *g, double *const *s) {
    const lw_muon_options *o = &a->o->muon;
    const int64_t rows = a->spec->shape[0], cols = a->spec->shape[1], n = rows * cols;
    const int64_t p = rows <= cols ? rows : cols, q = n / p;
    const double beta = o->momentum;
    double *x = malloc(sizeof(double) * (size_t)(2 * n + 2 * p * p));
    double *y = x + n, *A = y + n, *B = A + p * p, norm = 0;
    for (int64_t i = 0; i < n; i++) {
        const double gi = a->grad_scale * g[i];
        w[i] *= 1 - a->lr * a->wd;
        s[0][i] = beta * s[0][i] + (1 - beta) * gi;
        const double u = o->nesterov ? (1 - beta) * gi + beta * s[0][i] : s[0][i];
        x[rows <= cols ? i : (i % cols) * rows + i / cols] = u;
        norm += u * u;
    }
    norm = fmax(sqrt(norm), (double)o->eps);
    for (int64_t i = 0; i < n; i++)
        x[i] /= norm;
    for (int k = 0; k < o->ns_steps; k++) {
        const double ca = QUINTIC[k % 5][0], cb = QUINTIC[k % 5][1], cc = QUINTIC[k % 5][2];
        for (int64_t i = 0; i < p * p; i++) /* A = X X^T */
            A[i] = dot(x + i / p * q, 1, x + i % p * q, 1, q);
        for (int64_t i = 0; i < p * p; i++) /* B = b A + c A A */
            B[i] = cb * A[i] + cc * dot(A + i / p * p, 1, A + i % p, p, p);
        for (int64_t i = 0; i < n; i++) /* X = a X + B X */
            y[i] = ca * x[i] + dot(B + i / q * p, 1, x + i % q, q, p);
        memcpy(x, y, sizeof(double) * (size_t)n);
    }
    const double step = a->lr * 0.2 * sqrt((double)(rows > cols ? rows : cols)) * o->extra_scale;
    for (int64_t i = 0; i < n; i++)
        w[i] -= step * x[rows <= cols ? i : (i % cols) * rows + i / cols];
    free(x);
}

/* Muon's reference of muon_reference.h (the same Muon at these defaults) with NorMuon's variance
 * reduction: the state is m (numel) then v (one per line). */
static void reference_normuon(const ref_args *a, double *w, const double *g, double *const *s) {
    const int64_t rows = a->spec->shape[0], cols = a->spec->shape[1], n = rows * cols;
    double *gs = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        gs[i] = a->grad_scale * g[i];
    ref_normuon_update_as(&a->o->muon, &a->o->normuon, w, gs, s[0], s[1], rows, cols, rows, cols,
                          a->lr, a->wd);
    free(gs);
}

/* ---- the table of rules --------------------------------------------------------------------- */

typedef struct rule_case {
    lw_optimizer_kind kind;
    const char *name;
    ref_step step;
    const char *parts[MAX_PARTS]; /* its state's part names, in order */
    double tol_w;                 /* max |w - reference| after STEPS steps */
    double tol_state;             /* max |part - reference| over the part's largest |reference| */
} rule_case;

/* Tolerances, with u = 2^-24, |w| <= 0.2, lr <= 0.02, gradients |g| <= 3.3 (AMP 3 plus the rank
 * spread). The averaged gradient itself is within ~4u max|g_rank| of the exact average (ZeRO-2/3
 * scale each rank's share by fp32 1/dp before summing), and each state part takes about 4
 * roundings a step, so every part is within 3 steps x ~10u of its largest value: tol_state 64u.
 * AdamW: m-hat / (sqrt(v-hat) + eps) is at most ~2 in these 3 steps (v-hat averages g^2 with
 * weights >= 0.3) and within ~32u (1 + 2) of the double ratio, so w drifts by lr x 100u plus 2u|w|
 * of its own rounding a step: 3 x (0.02 x 100u + 0.4u) = 1.2e-7; tol_w 4e-7.
 * Lion: with the signs agreeing (lion_margin), w only rounds: 4 roundings of terms <= |w| + lr,
 * 3 x 4u x 0.22 = 1.6e-7; tol_w 4e-7. One sign flipped would be off by 2 lr >= 0.02.
 * Muon: Newton-Schulz in fp32 (OpenBLAS) against double. Its five quintic steps map a singular
 * value s to P(s), with P(s)/s and |P'(s)| at most 493 on (0, 1] (the product of the a's, at
 * s -> 0), so a perturbation of X grows up to 493-fold where U has tiny singular values, as the
 * 24 x 16 updates here do (down to 1e-6 of |U|_F; the 16 x 40 ones lie in 0.22-0.30). fp32 rounds
 * X = U / |U|_F, entries <= 0.075, by ~u: 493 x 0.075u = 2.2e-6 in X, times lr x scale <= 0.02 x
 * 0.98 gives 4.3e-8 in w a step, 1.3e-7 in 3 (what is seen). The products' roundings (sums of <= 40
 * terms) add terms of that size amplified less: tol_w 1e-6. A coefficient off by 0.001 moves w
 * by 4e-6 to 2e-5. Its momentum m is element-wise: tol_state 64u.
 * NorMuon: Muon's (better conditioned matrices here), each line then scaled by v^-1/2 and the
 * whole back to its norm, a handful of roundings more: tol_w 1e-6; v, means of squares of X,
 * takes X's error twice: tol_state 1e-5 (1.5e-6 seen). */
static const rule_case cases[N_CASES] = {
    {LW_OPTIMIZER_ADAMW, "adamw", reference_adamw, {"m", "v"}, 4e-7, 64 * U},
    {LW_OPTIMIZER_MUON, "muon", reference_muon, {"m"}, 1e-6, 64 * U},
    {LW_OPTIMIZER_LION, "lion", reference_lion, {"m"}, 4e-7, 64 * U},
    {LW_OPTIMIZER_NORMUON, "normuon", reference_normuon, {"m", "v"}, 1e-6, 1e-5},
};

static const rule_case *case_of(lw_optimizer_kind kind) {
    for (int k = 0; k < N_CASES; k++)
        if (cases[k].kind == kind) return &cases[k];
    return NULL;
}

static int parts_of(const rule_case *rc) {
    int n = 0;
    while (n < MAX_PARTS && rc->parts[n] != NULL)
        n++;
    return n;
}

/* worst[case][0]: |w - reference| over tol_w; [1]: the state's likewise; over all variants */
static double worst[N_CASES][2];

static void note(const rule_case *rc, int what, double ratio) {
    double *x = &worst[rc - cases][what];
    *x = fmax(*x, ratio);
}

/* Every rule has exactly one case, under its own name (its parts' names: check_state). */
static void test_table(void) {
    CHECK_EQ(lw_optimizer_kind_count(), N_CASES);
    for (int32_t k = 0; k < lw_optimizer_kind_count(); k++) {
        const rule_case *rc = case_of((lw_optimizer_kind)k);
        CHECK(rc != NULL && strcmp(lw_optimizer_kind_name(rc->kind), rc->name) == 0);
        CHECK(rc != NULL && lw_optimizer_kind_parts(rc->kind) == parts_of(rc));
        CHECK(rc != NULL && lw_optimizer_kind_part(rc->kind, parts_of(rc)) == NULL);
    }
}

/* ---- the reference run ---------------------------------------------------------------------- */

typedef struct reference {
    double *w[N_SPECS], *state[N_SPECS][MAX_PARTS];
    double norm[STEPS];
    int clipped; /* steps whose gradient was scaled */
} reference;

/* oo[g]: the options of group g's parameters */
static void run_reference(reference *ref, const lw_optimizer_options *const oo[2], int size) {
    double *g[N_SPECS], gmax[N_SPECS];
    memset(ref, 0, sizeof *ref);
    for (int p = 0; p < N_SPECS; p++) {
        const int64_t n = spec_numel(&specs[p]);
        ref->w[p] = malloc(sizeof(double) * (size_t)n);
        g[p] = malloc(sizeof(double) * (size_t)n);
        for (int k = 0; k < parts_of(case_of(specs[p].optimizer)); k++)
            ref->state[p][k] = calloc((size_t)n, sizeof(double));
        for (int64_t i = 0; i < n; i++)
            ref->w[p][i] = smooth_init(p, i);
    }
    for (int step = 0; step < STEPS; step++) {
        double sq = 0;
        for (int p = 0; p < N_SPECS; p++) {
            gmax[p] = 0;
            for (int64_t i = 0; i < spec_numel(&specs[p]); i++) {
                double sum = 0;
                for (int r = 0; r < size; r++) {
                    const float v = grad_value(p, i, step, r, size);
                    sum += v;
                    gmax[p] = fmax(gmax[p], fabs(v));
                }
                g[p][i] = sum / size;
                sq += g[p][i] * g[p][i];
            }
        }
        ref->norm[step] = sqrt(sq);
        double scale = 1.0; /* docs/algorithms.md section 5 */
        if (CLIP / (ref->norm[step] + 1e-6) < 1.0) scale = CLIP / (ref->norm[step] + 1e-6);
        ref->clipped += scale < 1.0;
        for (int p = 0; p < N_SPECS; p++) {
            const ref_args a = {&specs[p],    oo[GROUP[p]], LR[GROUP[p]], WD[GROUP[p]],
                                scale,        scale * gmax[p], step + 1};
            case_of(specs[p].optimizer)->step(&a, ref->w[p], g[p], ref->state[p]);
        }
    }
    for (int p = 0; p < N_SPECS; p++)
        free(g[p]);
}

static void free_reference(reference *ref) {
    for (int p = 0; p < N_SPECS; p++) {
        free(ref->w[p]);
        for (int k = 0; k < MAX_PARTS; k++)
            free(ref->state[p][k]);
    }
}

/* ---- the optimizer against it --------------------------------------------------------------- */

/* The state this rank lends: each entry's rule, parts and range; its values against the
 * reference's; every element's state lent by exactly one rank. */
static void check_state(lw_comm *c, lw_optimizer *opt, const reference *ref) {
    int64_t covered[N_SPECS] = {0};
    for (int32_t k = 0; k < lw_optimizer_state_count(opt); k++) {
        lw_state_entry e;
        CHECK_OK(lw_optimizer_state(opt, k, &e));
        const rule_case *rc = case_of(e.optimizer);
        const int64_t numel = spec_numel(&specs[e.param]);
        CHECK(rc != NULL && e.optimizer == specs[e.param].optimizer);
        if (rc == NULL) continue;
        CHECK_EQ(e.n_parts, lw_optimizer_kind_parts(e.optimizer));
        CHECK_EQ(e.n_parts, parts_of(rc));
        CHECK(e.start >= 0 && e.count > 0 && e.start + e.count <= numel);
        if (lw_optimizer_kind_whole(e.optimizer)) CHECK(e.start == 0 && e.count == numel);
        CHECK(e.master == NULL); /* fp32 parameters */
        covered[e.param] += e.count;
        for (int32_t i = 0; i < e.n_parts && i < parts_of(rc); i++) {
            const char *name = lw_optimizer_kind_part(e.optimizer, i);
            CHECK(name != NULL && strcmp(name, rc->parts[i]) == 0);
            /* a part per line: one per row of a tall matrix, per column of a wide one */
            const bool lines = lw_optimizer_kind_part_size(e.optimizer, i) == LW_PART_LINES;
            const int64_t r = specs[e.param].shape[0], cl = numel / r;
            const int64_t count = lines ? (r >= cl ? r : cl) : e.count, at = lines ? 0 : e.start;
            int64_t asked = -1;
            CHECK_OK(lw_optimizer_kind_part_count(e.optimizer, i, e.count, r, cl, &asked));
            CHECK(e.part_counts[i] == count && asked == count);
            const double *want = ref->state[e.param][i];
            double largest = 0, err = 0;
            for (int64_t j = 0; j < (lines ? count : numel); j++)
                largest = fmax(largest, fabs(want[j]));
            for (int64_t j = 0; j < count && e.part_counts[i] == count; j++)
                err = fmax(err, fabs((double)e.parts[i][j] - want[at + j]));
            note(rc, 1, err / largest / rc->tol_state);
            CHECK(err <= rc->tol_state * largest);
        }
    }
    CHECK_OK(lw_comm_allreduce(c, covered, N_SPECS, LW_DTYPE_I64, LW_REDUCE_SUM));
    for (int p = 0; p < N_SPECS; p++)
        CHECK_EQ(covered[p], spec_numel(&specs[p]));
}

/* oo: the optimizer's options; own: group 1's (lw_optimizer_set_group_options), or NULL */
static void run_variant(lw_comm *c, const lw_optimizer_options *oo, const lw_optimizer_options *own,
                        const reference *ref, int zero, lw_algorithm elementwise) {
    const int before = check_failures;
    feed f = {lw_comm_rank(c), lw_comm_size(c)};
    lw_buffers_options bo = lw_buffers_defaults();
    bo.zero = zero;
    rig r;
    /* buckets of 700: several per buffer, each holding the largest parameter (ZeRO-3) */
    if (!rig_new(&r, make_layout(specs, N_SPECS, f.size, 700, LW_ALGORITHM_COST, elementwise),
                 specs, N_SPECS, c, &bo, oo)) {
        rig_free(&r);
        return;
    }
    for (int p = 0; p < N_SPECS; p++)
        CHECK_OK(lw_optimizer_set_group(r.opt, p, GROUP[p]));
    for (int grp = 0; grp < 2; grp++)
        CHECK_OK(lw_optimizer_set_hparams(r.opt, grp, LR[grp], WD[grp]));
    if (own != NULL) CHECK_OK(lw_optimizer_set_group_options(r.opt, 1, own));
    rig_write_params(&r, fill, &f);
    lw_step_result res[STEPS];
    rig_steps(&r, STEPS, fill, &f, res);
    for (int step = 0; step < STEPS; step++) {
        CHECK(!res[step].skipped);
        CHECK(fabs(res[step].grad_norm - ref->norm[step]) <= 1e-6 * ref->norm[step]);
    }
    CHECK_EQ(res[STEPS - 1].step, STEPS);
    check_state(c, r.opt, ref);

    float *w[N_SPECS];
    for (int p = 0; p < N_SPECS; p++)
        w[p] = calloc((size_t)spec_numel(&specs[p]), sizeof(float));
    rig_read_params(&r, w);
    for (int p = 0; p < N_SPECS; p++) {
        const rule_case *rc = case_of(specs[p].optimizer);
        double err = 0;
        for (int64_t i = 0; i < spec_numel(&specs[p]); i++)
            err = fmax(err, fabs((double)w[p][i] - ref->w[p][i]));
        note(rc, 0, err / rc->tol_w);
        if (err > rc->tol_w)
            fprintf(stderr, "'%s' (%s): max |w - reference| %.3g > %.3g\n", specs[p].name, rc->name,
                    err, rc->tol_w);
        CHECK(err <= rc->tol_w);
        free(w[p]);
    }
    CHECK(identical_across_ranks(c, r.buffers, specs, N_SPECS));
    if (check_failures != before)
        fprintf(stderr, "rank %d: ZeRO-%d, element-wise rules' layout %s%s: failed\n", f.rank,
                zero, lw_algorithm_name(elementwise), own ? ", group 1's own options" : "");
    rig_free(&r);
}

/* The layout refuses a parameter that is not 2-D routed to a whole-matrix rule, and a rule that
 * does not exist, naming it. */
static void test_refusals(lw_comm *c) {
    const int size = lw_comm_size(c);
    char want[128];
    for (int32_t k = 0; k < lw_optimizer_kind_count(); k++) {
        if (!lw_optimizer_kind_whole((lw_optimizer_kind)k)) continue;
        lw_param_spec bad[2] = {routed(vec("bad", 16), (lw_optimizer_kind)k)};
        bad[1] = bad[0];
        bad[1].name = "cube";
        bad[1].ndim = 3, bad[1].shape[0] = 2, bad[1].shape[1] = bad[1].shape[2] = 4;
        for (int i = 0; i < 2; i++) {
            lw_layout_options lo = lw_layout_defaults();
            lw_layout *l = NULL;
            lo.dp = size;
            snprintf(want, sizeof want,
                     "parameter '%s' is routed to %s, which updates whole matrices, but has %d "
                     "dimensions",
                     bad[i].name, lw_optimizer_kind_name((lw_optimizer_kind)k), bad[i].ndim);
            CHECK_FAILS(lw_layout_new(&bad[i], 1, &lo, &l), LW_ERR_INVALID, want);
            CHECK(l == NULL);
        }
    }
    /* NorMuon's second moment is its whole matrix's: the rows layout's row shards are refused */
    lw_layout *rows = make_layout(&specs[8], 1, size, 700, LW_ALGORITHM_ROWS, LW_ALGORITHM_COST);
    lw_buffers *bs = NULL;
    lw_optimizer *opt = NULL;
    if (rows != NULL) CHECK_OK(lw_buffers_new(rows, c, NULL, NULL, &bs));
    if (bs != NULL)
        CHECK_FAILS(lw_optimizer_new(bs, NULL, &opt), LW_ERR_UNSUPPORTED,
                    "optimizer: 'l1.o' is routed to normuon, whose second moment belongs to the "
                    "whole matrix's owner, but the rows layout row-shards it");
    CHECK(opt == NULL);
    lw_buffers_free(bs), lw_layout_free(rows);
    /* 99, and the first number no rule has yet */
    const int32_t unknown[2] = {99, lw_optimizer_kind_count()};
    for (int i = 0; i < 2; i++) {
        lw_param_spec s = routed(vec("odd", 8), (lw_optimizer_kind)unknown[i]);
        lw_layout_options lo = lw_layout_defaults();
        lw_layout *l = NULL;
        lo.dp = size;
        snprintf(want, sizeof want, "parameter 'odd' has unknown optimizer rule %d", unknown[i]);
        CHECK_FAILS(lw_layout_new(&s, 1, &lo, &l), LW_ERR_INVALID, want);
        CHECK(l == NULL);
        CHECK(lw_optimizer_kind_name(s.optimizer) == NULL);
        CHECK(lw_optimizer_kind_parts(s.optimizer) == 0 && !lw_optimizer_kind_whole(s.optimizer));
    }
}

/* What a group may not set apart from the optimizer is refused by name; NULL options too. */
static void test_group_refusals(lw_comm *c, const lw_optimizer_options *oo) {
    rig r;
    if (!rig_new(&r, make_layout(specs, N_SPECS, lw_comm_size(c), 700, LW_ALGORITHM_COST,
                                 LW_ALGORITHM_COST),
                 specs, N_SPECS, c, NULL, oo)) {
        rig_free(&r);
        return;
    }
    lw_optimizer_options other = *oo;
    other.clip = 2 * CLIP;
    CHECK_FAILS(lw_optimizer_set_group_options(r.opt, 1, &other), LW_ERR_INVALID,
                "optimizer: group 1's options set clip apart from the optimizer's, but clip is "
                "the whole optimizer's (give lw_optimizer_new's value)");
    other = *oo;
    other.muon.split_qkv = !oo->muon.split_qkv;
    CHECK_FAILS(lw_optimizer_set_group_options(r.opt, 0, &other), LW_ERR_INVALID,
                "optimizer: group 0's options set muon.split_qkv apart");
    CHECK_FAILS(lw_optimizer_set_group_options(r.opt, 1, NULL), LW_ERR_INVALID,
                "optimizer: group 1's options must not be NULL");
    other = *oo;
    other.adamw.beta1 = 1.5f;
    CHECK_FAILS(lw_optimizer_set_group_options(r.opt, 1, &other), LW_ERR_INVALID,
                "adamw: beta1 must be in [0, 1), got 1.5");
    other = *oo;
    other.muon.ns_steps = 0;
    CHECK(lw_optimizer_set_group_options(r.opt, 1, &other) != LW_OK); /* Muon's own check */
    rig_free(&r);
}

int main(void) {
    lw_comm *c = NULL;
    CHECK_OK(lw_comm_init(&c));
    if (c == NULL) return check_exit("test_rules");
    make_specs();
    test_table();
    lw_optimizer_options oo = lw_optimizer_defaults();
    oo.clip = CLIP;
    /* away from the defaults (0.9, 0.95, 1e-8; 0.9, 0.99): the options must reach the rules. An
     * eps near sqrt(v-hat) of the small gradients makes where it is added show. */
    oo.adamw.beta1 = 0.85f, oo.adamw.beta2 = 0.98f, oo.adamw.eps = 1e-3f;
    oo.lion.beta1 = 0.8f, oo.lion.beta2 = 0.95f;
    /* Muon at its defaults: what reference_muon implements */
    const lw_muon_options *mo = &oo.muon;
    CHECK(mo->coeffs == LW_NS_QUINTIC && mo->weight_decay_mode == LW_WD_DECOUPLED);
    CHECK(mo->scale == LW_MUON_SCALE_MOONLIGHT && mo->nesterov && mo->momentum == 0.95f);

    reference ref, mixed;
    const lw_optimizer_options *same[2] = {&oo, &oo};
    run_reference(&ref, same, lw_comm_size(c));
    CHECK_EQ(ref.clipped, 1);
    CHECK(lion_margin > 1e-4); /* ~1700u: Lion's signs are the reference's (tolerances) */
    for (int zero = 1; zero <= 3; zero++) {
        run_variant(c, &oo, NULL, &ref, zero, LW_ALGORITHM_COST);
        run_variant(c, &oo, NULL, &ref, zero, LW_ALGORITHM_DISTOPT);
    }
    /* group 1 with the options above as its own, group 0 at the defaults: each rule's update
     * takes its group's (one element-wise call per options; batches parted by group) */
    lw_optimizer_options plain = lw_optimizer_defaults();
    plain.clip = CLIP;
    const lw_optimizer_options *by_group[2] = {&plain, &oo};
    run_reference(&mixed, by_group, lw_comm_size(c));
    for (int zero = 1; zero <= 3; zero += 2)
        run_variant(c, &plain, &oo, &mixed, zero, LW_ALGORITHM_DISTOPT);
    test_group_refusals(c, &plain);
    test_refusals(c);

    CHECK_OK(lw_comm_allreduce(c, worst, 2 * N_CASES, LW_DTYPE_F64, LW_REDUCE_MAX));
    if (lw_comm_rank(c) == 0) {
        for (int k = 0; k < N_CASES; k++)
            printf("%s: worst |w - reference| %.2g (tol %.2g), state %.2g of its largest (tol "
                   "%.2g)\n",
                   cases[k].name, worst[k][0] * cases[k].tol_w, cases[k].tol_w,
                   worst[k][1] * cases[k].tol_state, cases[k].tol_state);
        printf("norms %.4g %.4g %.4g (clip %g); lion margin %.3g\n", ref.norm[0], ref.norm[1],
               ref.norm[2], (double)CLIP, lion_margin);
    }
    free_reference(&ref), free_reference(&mixed);
    return check_exit_all_ranks(c, "test_rules");
}
