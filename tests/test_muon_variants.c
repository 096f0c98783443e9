/* test_muon_variants.c: Muon's options of docs/algorithms.md section 6 through lw_muon_update, each
 * against its formula in float64 (muon_reference.h) over three steps, and each shown to matter
 * (the reference without it is far off); a float64 transcription of nanochat's whole Muon step
 * (nanochat/optim.py, muon_step_fused), against the nanochat preset without its variance
 * reduction and against lw_optimizer_step's NorMuon rule with the preset's options (what
 * `--optimizer normuon --muon-variant nanochat` runs) with it; the options' refusals; and the step
 * without a decay at the step as lw_muon_apply, bit for bit. */
#include "muon_reference.h"
#include "optim_util.h"

enum { STEPS = 3 };

static uint64_t seed = 2026;
static float frand(void) { /* uniform in [-1, 1) */
    seed = seed * 6364136223846793005u + 1442695040888963407u;
    return (float)((double)(seed >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* A gradient whose rows have norms spread over three decades (row i times 10^(3 i / rows - 2)),
 * so that equilibrating them changes the update. */
static void gradient(float *g, int64_t rows, int64_t cols) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            g[i * cols + j] = frand() * (float)pow(10.0, 3.0 * (double)i / (double)rows - 2.0);
}

/* STEPS updates through lw_muon_update and the reference with o, from the same weights and
 * gradients; the distance (ref_distance) of the library's weights from the reference's and
 * from the reference's with `off` instead (the option not taken). */
static void run(const lw_muon_options *o, const lw_muon_options *off, int64_t rows, int64_t cols,
                float lr, float wd, double *d_on, double *d_off) {
    const int64_t n = rows * cols;
    float *w = malloc(sizeof(float) * n), *w0 = malloc(sizeof(float) * n);
    float *g = malloc(sizeof(float) * n), *m = calloc((size_t)n, sizeof(float));
    double *wr = malloc(sizeof(double) * n), *wo = malloc(sizeof(double) * n);
    double *gr = malloc(sizeof(double) * n), *mr = calloc((size_t)n, sizeof(double));
    double *mo = calloc((size_t)n, sizeof(double));
    for (int64_t i = 0; i < n; i++)
        w[i] = w0[i] = 0.1f * frand(), wr[i] = wo[i] = w[i];
    lw_muon *muon = NULL;
    CHECK_OK(lw_muon_new(o, &muon));
    for (int s = 0; s < STEPS && muon != NULL; s++) {
        gradient(g, rows, cols);
        for (int64_t i = 0; i < n; i++)
            gr[i] = g[i];
        CHECK_OK(lw_muon_update(muon, NULL, w, g, m, rows, cols, lr, wd, 1.0f));
        ref_muon_update(o, wr, gr, mr, rows, cols, lr, wd);
        ref_muon_update(off, wo, gr, mo, rows, cols, lr, wd);
    }
    *d_on = ref_distance(w, wr, w0, n);
    *d_off = ref_distance(w, wo, w0, n);
    lw_muon_free(muon);
    free(w), free(w0), free(g), free(m), free(wr), free(wo), free(gr), free(mr), free(mo);
}

/* fp32 Newton-Schulz against float64 drifts by ~1e-6 of an update (test_muon's 1e-5 bound on
 * X, scaled by the step); over three steps up to 5e-6 of how far the weights moved (measured:
 * 1e-7 to 5e-6, the most for nanochat's coefficients, whose first step's slope is 8): 1e-5. An
 * option that matters moves them by far more than that: at least 100 times. */
static const double TOL = 1e-5;

static void expect(const char *what, const lw_muon_options *o, const lw_muon_options *off,
                   int64_t rows, int64_t cols, float lr, float wd) {
    double on, away;
    run(o, off, rows, cols, lr, wd, &on, &away);
    if (on > TOL || away < 100 * TOL)
        fprintf(stderr, "%s, %lld x %lld: %g from its float64 reference, %g without it\n", what,
                (long long)rows, (long long)cols, on, away);
    CHECK(on <= TOL);
    CHECK(away >= 100 * TOL);
}

/* Each option alone, on a wide, a tall and a square matrix. */
static void test_each_option(void) {
    const int64_t shapes[][2] = {{16, 40}, {48, 16}, {24, 24}};
    for (int k = 0; k < 3; k++) {
        const int64_t r = shapes[k][0], c = shapes[k][1];
        lw_muon_options base = lw_muon_defaults(), o = base;
        o.row_equilibrate = true;
        expect("row_equilibrate", &o, &base, r, c, 0.02f, 0.1f);
        /* three steps leave the norm further from sqrt(min(rows, cols)) than five */
        lw_muon_options three = base;
        three.ns_steps = 3;
        o = three, o.renormalize = true;
        expect("renormalize", &o, &three, r, c, 0.02f, 0.1f);
        o = base, o.coeffs = LW_NS_NANOCHAT;
        expect("nanochat coefficients", &o, &base, r, c, 0.02f, 0.1f);
        /* a large decay, that the mask and the decay's scale show */
        for (int mode = LW_WD_DECOUPLED; mode <= LW_WD_SCALED; mode++) {
            if (mode == LW_WD_L2) continue;
            o = base, o.weight_decay_mode = (lw_weight_decay)mode, o.cautious_wd = true;
            lw_muon_options plain = o;
            plain.cautious_wd = false;
            char what[64];
            snprintf(what, sizeof what, "cautious_wd, %s",
                     lw_weight_decay_name(o.weight_decay_mode));
            expect(what, &o, &plain, r, c, 0.05f, 2.0f);
        }
        o = base, o.weight_decay_mode = LW_WD_SCALED;
        expect("weight_decay_mode scaled", &o, &base, r, c, 0.05f, 2.0f);
        /* the identity coefficients with both rescalings: a rescaled SGD step */
        o = base, o.coeffs = LW_NS_IDENTITY, o.row_equilibrate = o.renormalize = true;
        lw_muon_options id = base;
        id.coeffs = LW_NS_IDENTITY;
        expect("identity, equilibrated and renormalised", &o, &id, r, c, 0.02f, 0.1f);
    }
}

/* The options the nanochat preset sets (lua/lwopt/optim.lua's muon_variants.nanochat, which
 * spec/optim_spec.lua checks field by field against these). */
static lw_muon_options nanochat_options(void) {
    lw_muon_options o = lw_muon_defaults();
    o.momentum = 0.95f, o.nesterov = true, o.ns_steps = 5, o.coeffs = LW_NS_NANOCHAT;
    o.row_equilibrate = o.renormalize = o.cautious_wd = true;
    o.weight_decay_mode = LW_WD_SCALED, o.scale = LW_MUON_SCALE_SHAPE_SCALING;
    o.extra_scale = 1.0f;
    return o;
}

/* nanochat's variance reduction of its orthogonalised update x (rows x cols) with its factored
 * second moment v (rows x 1 when rows >= cols, else 1 x cols), in its order: the mean square of
 * each line, the norm they make, v lerped to the means by 1 - beta2, each line scaled by
 * max(v, 1e-10)^-1/2 and the whole by the old norm over the new (floored at 1e-10). */
static void nanochat_variance(double *x, double *v, int64_t rows, int64_t cols, double beta2) {
    const bool by_row = rows >= cols; /* red_dim -1: the mean over a row's columns */
    const int64_t lines = by_row ? rows : cols, red = by_row ? cols : rows;
    double *mean = malloc(sizeof(double) * 2 * lines), *step = mean + lines;
    double norm_sq = 0, scaled_sq = 0;
    for (int64_t l = 0; l < lines; l++) {
        double s = 0;
        for (int64_t k = 0; k < red; k++) {
            const double e = by_row ? x[l * cols + k] : x[k * cols + l];
            s += e * e;
        }
        mean[l] = s / (double)red;
        norm_sq += mean[l] * (double)red;
    }
    for (int64_t l = 0; l < lines; l++) {
        /* second_momentum_buffer.lerp_(v_mean, 1 - beta2), then its clamp and rsqrt */
        v[l] += (1 - beta2) * (mean[l] - v[l]);
        step[l] = 1 / sqrt(fmax(v[l], 1e-10));
        scaled_sq += mean[l] * (double)red * step[l] * step[l];
    }
    const double ratio = sqrt(norm_sq) / fmax(sqrt(scaled_sq), 1e-10);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            x[i * cols + j] *= step[by_row ? i : j] * ratio;
    free(mean);
}

/* nanochat's muon_step_fused for one matrix p (rows x cols, torch's (out, in)), in float64, line
 * by line: the lerps of its Nesterov momentum, MuonEq, the Polar Express normalisation and
 * iterations (X^T X for a tall matrix, X X^T for a wide one), Muon+'s renormalisation, the
 * variance reduction with its second moment (NULL: without it, as Muon's preset steps), then the
 * cautious update with lr scaled by max(1, rows / cols)^0.5, as its caller scales it. */
static void nanochat_step(double *p, const double *grad, double *buf, double *second, int64_t rows,
                          int64_t cols, double momentum, double beta2, double lr, double wd) {
    const int64_t n = rows * cols;
    const bool tall = rows > cols;
    const int64_t k = tall ? cols : rows; /* A is k x k */
    double *x = malloc(sizeof(double) * n), *a = malloc(sizeof(double) * k * k);
    double *b = malloc(sizeof(double) * k * k), *y = malloc(sizeof(double) * n);
    for (int64_t i = 0; i < n; i++) {
        buf[i] += (1 - momentum) * (grad[i] - buf[i]);  /* momentum_buffer.lerp_(g, 1 - m) */
        x[i] = grad[i] + momentum * (buf[i] - grad[i]); /* g.lerp_(momentum_buffer, m) */
    }
    double total = 0;
    for (int64_t i = 0; i < n; i++)
        total += x[i] * x[i];
    const double target = sqrt(total) / sqrt((double)rows);
    for (int64_t i = 0; i < rows; i++) {
        double row = 0;
        for (int64_t j = 0; j < cols; j++)
            row += x[i * cols + j] * x[i * cols + j];
        for (int64_t j = 0; j < cols; j++)
            x[i * cols + j] *= target / fmax(sqrt(row), 1e-6);
    }
    double norm = 0;
    for (int64_t i = 0; i < n; i++)
        norm += x[i] * x[i];
    for (int64_t i = 0; i < n; i++)
        x[i] /= sqrt(norm) * 1.01 + 1e-6;
    for (int s = 0; s < 5; s++) {
        const double *abc = REF_NANOCHAT[s];
        for (int64_t i = 0; i < k; i++) /* A = X^T X or X X^T */
            for (int64_t j = 0; j < k; j++) {
                double v = 0;
                for (int64_t t = 0; t < (tall ? rows : cols); t++)
                    v += tall ? x[t * cols + i] * x[t * cols + j]
                              : x[i * cols + t] * x[j * cols + t];
                a[i * k + j] = v;
            }
        for (int64_t i = 0; i < k; i++) /* B = b A + c A A */
            for (int64_t j = 0; j < k; j++) {
                double v = 0;
                for (int64_t t = 0; t < k; t++)
                    v += a[i * k + t] * a[t * k + j];
                b[i * k + j] = abc[1] * a[i * k + j] + abc[2] * v;
            }
        for (int64_t i = 0; i < rows; i++) /* X = a X + X B, or a X + B X */
            for (int64_t j = 0; j < cols; j++) {
                double v = 0;
                for (int64_t t = 0; t < k; t++)
                    v += tall ? x[i * cols + t] * b[t * k + j] : b[i * k + t] * x[t * cols + j];
                y[i * cols + j] = abc[0] * x[i * cols + j] + v;
            }
        memcpy(x, y, sizeof(double) * n);
    }
    norm = 0;
    for (int64_t i = 0; i < n; i++)
        norm += x[i] * x[i];
    const double side = (double)(rows < cols ? rows : cols);
    for (int64_t i = 0; i < n; i++)
        x[i] *= sqrt(side) / fmax(sqrt(norm), 1e-6);
    if (second != NULL) nanochat_variance(x, second, rows, cols, beta2);
    const double lr_eff = lr * pow(fmax(1.0, (double)rows / (double)cols), 0.5);
    for (int64_t i = 0; i < n; i++) {
        const double mask = x[i] * p[i] >= 0 ? 1.0 : 0.0;
        p[i] -= lr_eff * x[i] + lr_eff * wd * p[i] * mask;
    }
    free(x), free(a), free(b), free(y);
}

/* The preset's step against nanochat's over three steps, a tall (as its MLP's c_fc, 4 x wider
 * out than in), a wide and a square matrix, one of them starting at zero (its c_proj's init). */
static void test_nanochat_preset(void) {
    const int64_t shapes[][2] = {{64, 16}, {16, 48}, {32, 32}};
    const lw_muon_options o = nanochat_options();
    lw_muon_options plain = lw_muon_defaults(); /* plain Muon with nanochat's scale */
    plain.scale = LW_MUON_SCALE_SHAPE_SCALING;
    for (int k = 0; k < 3; k++) {
        const int64_t rows = shapes[k][0], cols = shapes[k][1], n = rows * cols;
        float *w = malloc(sizeof(float) * n), *w0 = malloc(sizeof(float) * n);
        float *g = malloc(sizeof(float) * n), *m = calloc((size_t)n, sizeof(float));
        double *p = malloc(sizeof(double) * n), *gd = malloc(sizeof(double) * n);
        double *buf = calloc((size_t)n, sizeof(double)), *wr = malloc(sizeof(double) * n);
        double *mr = calloc((size_t)n, sizeof(double)), *wp = malloc(sizeof(double) * n);
        double *mp = calloc((size_t)n, sizeof(double));
        for (int64_t i = 0; i < n; i++)
            w[i] = w0[i] = k == 2 ? 0.0f : 0.05f * frand(), p[i] = wr[i] = wp[i] = w[i];
        lw_muon *muon = NULL;
        CHECK_OK(lw_muon_new(&o, &muon));
        for (int s = 0; s < STEPS && muon != NULL; s++) {
            gradient(g, rows, cols);
            for (int64_t i = 0; i < n; i++)
                gd[i] = g[i];
            CHECK_OK(lw_muon_update(muon, NULL, w, g, m, rows, cols, 0.02f, 0.28f, 1.0f));
            nanochat_step(p, gd, buf, NULL, rows, cols, 0.95, 0, (double)0.02f, (double)0.28f);
            ref_muon_update(&o, wr, gd, mr, rows, cols, 0.02f, 0.28f);
            ref_muon_update(&plain, wp, gd, mp, rows, cols, 0.02f, 0.28f);
        }
        const double d = ref_distance(w, p, w0, n), d_ref = ref_distance(w, wr, w0, n);
        const double d_plain = ref_distance(w, wp, w0, n);
        if (d > TOL || d_ref > TOL || d_plain < 100 * TOL)
            fprintf(stderr,
                    "nanochat preset %lld x %lld: %g from nanochat's step, %g from the "
                    "reference, %g from plain Muon\n",
                    (long long)rows, (long long)cols, d, d_ref, d_plain);
        CHECK(d <= TOL);
        CHECK(d_ref <= TOL);
        CHECK(d_plain >= 100 * TOL);
        lw_muon_free(muon);
        free(w), free(w0), free(g), free(m), free(p), free(gd), free(buf), free(wr), free(mr);
        free(wp), free(mp);
    }
}

/* ---- NorMuon with the preset's options: nanochat's whole step -------------------------------- */

enum { NM_SPECS = 4, NM_STEPS = 5 };

/* Tall (c_fc's 4:1, and one less square), wide and square, the square from zero; each matrix's
 * gradients and start drawn before the run, so that the optimizer and the reference see the
 * same. */
static lw_param_spec nm_specs[NM_SPECS];
static float *nm_grad[NM_SPECS][NM_STEPS], *nm_start[NM_SPECS];

static void nm_fill(void *ctx, int p, int step, float *host, int64_t n) {
    (void)ctx;
    memcpy(host, step < 0 ? nm_start[p] : nm_grad[p][step], sizeof(float) * (size_t)n);
}

/* The optimizer's weights and each matrix's second moment against nanochat's step; [out] d_on,
 * d_ref, d_muon: the largest ref_distance of the weights from nanochat's step, from
 * muon_reference.h's NorMuon, and from nanochat's step without the variance reduction (Muon's
 * preset); *v_err: the largest |v - nanochat's v| over its largest |v|. */
static void nm_compare(rig *r, const lw_optimizer_options *oo, double *d_on, double *d_ref,
                       double *d_muon, double *v_err) {
    float *w[NM_SPECS];
    double *p[NM_SPECS], *v[NM_SPECS];
    *d_on = *d_ref = *v_err = 0, *d_muon = INFINITY;
    for (int k = 0; k < NM_SPECS; k++)
        w[k] = malloc(sizeof(float) * (size_t)spec_numel(&nm_specs[k]));
    rig_read_params(r, w);
    for (int k = 0; k < NM_SPECS; k++) {
        const int64_t rows = nm_specs[k].shape[0], cols = nm_specs[k].shape[1], n = rows * cols;
        const int64_t lines = rows >= cols ? rows : cols;
        p[k] = malloc(sizeof(double) * n), v[k] = calloc((size_t)lines, sizeof(double));
        double *wr = malloc(sizeof(double) * n), *wm = malloc(sizeof(double) * n);
        double *gd = malloc(sizeof(double) * n), *buf = calloc((size_t)n, sizeof(double));
        double *mr = calloc((size_t)n, sizeof(double)), *vr = calloc((size_t)lines, sizeof(double));
        double *bm = calloc((size_t)n, sizeof(double));
        for (int64_t i = 0; i < n; i++)
            p[k][i] = wr[i] = wm[i] = nm_start[k][i];
        for (int s = 0; s < NM_STEPS; s++) {
            for (int64_t i = 0; i < n; i++)
                gd[i] = nm_grad[k][s][i];
            nanochat_step(p[k], gd, buf, v[k], rows, cols, 0.95, 0.9, (double)0.02f, (double)0.28f);
            nanochat_step(wm, gd, bm, NULL, rows, cols, 0.95, 0.9, (double)0.02f, (double)0.28f);
            ref_normuon_update_as(&oo->muon, &oo->normuon, wr, gd, mr, vr, rows, cols, rows, cols,
                                  0.02f, 0.28f);
        }
        const double on = ref_distance(w[k], p[k], nm_start[k], n);
        const double ref = ref_distance(w[k], wr, nm_start[k], n);
        const double muon = ref_distance(w[k], wm, nm_start[k], n);
        if (on > TOL || ref > TOL || muon < 100 * TOL)
            fprintf(stderr,
                    "normuon as nanochat, %lld x %lld: %g from nanochat's step, %g from the "
                    "reference, %g from nanochat's step without its variance reduction\n",
                    (long long)rows, (long long)cols, on, ref, muon);
        *d_on = fmax(*d_on, on), *d_ref = fmax(*d_ref, ref), *d_muon = fmin(*d_muon, muon);
        free(wr), free(wm), free(gd), free(buf), free(mr), free(vr), free(bm);
    }
    /* the second moments, one per line, as the optimizer lends them */
    int seen = 0;
    for (int32_t i = 0; i < lw_optimizer_state_count(r->opt); i++) {
        lw_state_entry e;
        CHECK_OK(lw_optimizer_state(r->opt, i, &e));
        if (e.param < 0 || e.param >= NM_SPECS || e.n_parts != 2) continue;
        const int64_t rows = nm_specs[e.param].shape[0], cols = nm_specs[e.param].shape[1];
        const int64_t lines = rows >= cols ? rows : cols;
        CHECK_EQ(e.part_counts[1], lines);
        double largest = 0, err = 0;
        for (int64_t l = 0; l < lines && e.part_counts[1] == lines; l++) {
            largest = fmax(largest, fabs(v[e.param][l]));
            err = fmax(err, fabs((double)e.parts[1][l] - v[e.param][l]));
        }
        *v_err = fmax(*v_err, err / largest);
        seen++;
    }
    CHECK_EQ(seen, NM_SPECS);
    for (int k = 0; k < NM_SPECS; k++)
        free(w[k]), free(p[k]), free(v[k]);
}

/* lw_optimizer_step with every matrix routed to NorMuon, Muon's options the preset's and
 * NorMuon's the defaults (nanochat's beta2 0.9 and clamp 1e-10; the recipe sets no other), over
 * NM_STEPS steps at one rank: the weights within TOL of nanochat's step and of the reference,
 * far from nanochat's step without its variance reduction, and the second moments nanochat's.
 * TOL holds over five steps as over three (2.5e-6 seen); v, means of squares of X, carries X's
 * relative error twice (1.7e-6 seen of its largest). */
static void test_nanochat_normuon(void) {
    const int64_t shapes[NM_SPECS][2] = {{64, 16}, {16, 48}, {32, 32}, {40, 24}};
    static const char *names[NM_SPECS] = {"fc", "proj", "square", "tall"};
    for (int k = 0; k < NM_SPECS; k++) {
        const int64_t n = shapes[k][0] * shapes[k][1];
        nm_specs[k] = mat(names[k], shapes[k][0], shapes[k][1], true);
        nm_specs[k].optimizer = LW_OPTIMIZER_NORMUON;
        nm_start[k] = malloc(sizeof(float) * n);
        for (int64_t i = 0; i < n; i++)
            nm_start[k][i] = k == 2 ? 0.0f : 0.05f * frand();
        for (int s = 0; s < NM_STEPS; s++) {
            nm_grad[k][s] = malloc(sizeof(float) * n);
            gradient(nm_grad[k][s], shapes[k][0], shapes[k][1]);
        }
    }
    lw_optimizer_options oo = lw_optimizer_defaults();
    oo.muon = nanochat_options();
    CHECK(oo.normuon.beta2 == 0.9f && oo.normuon.floor == 1e-10f && oo.clip <= 0.0f);
    lw_comm *self = NULL;
    CHECK_OK(lw_comm_self(&self));
    rig r;
    memset(&r, 0, sizeof r);
    if (self != NULL &&
        rig_new(&r, make_layout(nm_specs, NM_SPECS, 1, 0, LW_ALGORITHM_COST, LW_ALGORITHM_COST),
                nm_specs, NM_SPECS, self, NULL, &oo)) {
        for (int k = 0; k < NM_SPECS; k++)
            CHECK_OK(lw_optimizer_set_group(r.opt, k, 0));
        CHECK_OK(lw_optimizer_set_hparams(r.opt, 0, 0.02f, 0.28f));
        rig_write_params(&r, nm_fill, NULL);
        lw_step_result res[NM_STEPS];
        rig_steps(&r, NM_STEPS, nm_fill, NULL, res);
        for (int s = 0; s < NM_STEPS; s++)
            CHECK(!res[s].skipped);
        double on, ref, muon, v_err;
        nm_compare(&r, &oo, &on, &ref, &muon, &v_err);
        printf("normuon as nanochat: %.2g from nanochat's step, %.2g from the reference, %.2g "
               "without the variance reduction; v within %.2g\n",
               on, ref, muon, v_err);
        CHECK(on <= TOL);
        CHECK(ref <= TOL);
        CHECK(muon >= 100 * TOL);
        CHECK(v_err <= TOL);
    }
    rig_free(&r);
    lw_comm_free(self);
    for (int k = 0; k < NM_SPECS; k++) {
        free(nm_start[k]);
        for (int s = 0; s < NM_STEPS; s++)
            free(nm_grad[k][s]);
    }
}

static void test_refusals(void) {
    lw_muon *m = NULL;
    lw_muon_options o = lw_muon_defaults();
    o.coeffs = LW_NS_NANOCHAT, o.ns_steps = 6;
    CHECK_FAILS(lw_muon_new(&o, &m), LW_ERR_INVALID,
                "the nanochat coefficients are five triples for at most 5 steps, got ns_steps 6");
    o.ns_steps = 3; /* the first three, as nanochat slices its list */
    CHECK_OK(lw_muon_new(&o, &m));
    lw_muon_free(m), m = NULL;
    o = lw_muon_defaults();
    o.cautious_wd = true, o.weight_decay_mode = LW_WD_L2;
    CHECK_FAILS(lw_muon_new(&o, &m), LW_ERR_INVALID,
                "cautious_wd masks a decay of W at the step, but weight_decay_mode l2");
    o.weight_decay_mode = LW_WD_DECOUPLED, o.extra_scale = 0.0f;
    CHECK_FAILS(lw_muon_new(&o, &m), LW_ERR_INVALID, "needs extra_scale > 0, got 0");
    o = lw_muon_defaults();
    o.weight_decay_mode = (lw_weight_decay)4;
    CHECK_FAILS(lw_muon_new(&o, &m), LW_ERR_INVALID, "unknown weight decay mode 4");
    o = lw_muon_defaults();
    o.coeffs = (lw_ns_coeffs)7;
    CHECK_FAILS(lw_muon_new(&o, &m), LW_ERR_INVALID, "unknown coefficient set 7");
    CHECK(m == NULL);
}

/* Without a decay at the step, lw_muon_apply_decay is lw_muon_apply bit for bit (the decay was
 * the momentum's), and the defaults take none of the new options. */
static void test_plain_step(void) {
    const lw_muon_options d = lw_muon_defaults();
    CHECK(!d.row_equilibrate && !d.renormalize && !d.cautious_wd);
    CHECK(d.coeffs == LW_NS_QUINTIC && d.weight_decay_mode == LW_WD_DECOUPLED);
    enum { R = 8, C = 12, N = R * C };
    float a[N], b[N], x[N];
    for (int i = 0; i < N; i++)
        a[i] = b[i] = frand(), x[i] = frand();
    lw_muon *m = NULL;
    CHECK_OK(lw_muon_new(&d, &m));
    CHECK_OK(lw_muon_apply(m, NULL, a, x, N, R, C, 0.03f));
    CHECK_OK(lw_muon_apply_decay(m, NULL, b, x, N, R, C, 0.03f, 0.5f));
    CHECK(memcmp(a, b, sizeof a) == 0);
    lw_muon_free(m);
}

int main(void) {
    test_each_option();
    test_nanochat_preset();
    test_nanochat_normuon();
    test_refusals();
    test_plain_step();
    return check_exit("test_muon_variants");
}
