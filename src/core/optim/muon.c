/* muon.c: lw_muon, the Muon update of one matrix (docs/algorithms.md section 6): its options, the
 * Newton-Schulz coefficient sets and normalisations, the scale of the step, where the weight
 * decay goes, and the workspace, over the device table: weight decay and momentum, row
 * equilibration, Newton-Schulz, renormalisation and the step run on the stream's device
 * (device/cpu/muon.c and muon_rescale.c on the CPU). */
#include "optim/muon.h"
#include "optim/rules.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct lw_muon {
    lw_muon_options o;
    float *custom;     /* [owned] copy of the custom triples */
    float *abc;        /* [owned] ns_steps (a, b, c) triples, one per step */
    lwi_workspace work; /* floats: lwi_muon_work_floats of the largest matrix */
};

static const float SIMPLE[][3] = {{3.4445f, -4.7750f, 2.0315f}};
static const float QUINTIC[][3] = {{4.0848f, -6.8946f, 2.9270f},
                                   {3.9505f, -6.3029f, 2.6377f},
                                   {3.7418f, -5.5913f, 2.3037f},
                                   {2.8769f, -3.1427f, 1.2046f},
                                   {2.8366f, -3.0525f, 1.2012f}};
static const float POLAR_EXPRESS[][3] = {
    {8.2051f, -22.9019f, 16.4607f}, {4.0664f, -2.8612f, 0.5184f}, {3.9096f, -2.8234f, 0.5250f},
    {3.2856f, -2.4153f, 0.4853f},   {2.2779f, -1.6198f, 0.3985f}, {1.8726f, -1.2307f, 0.3585f},
    {1.8564f, -1.2132f, 0.3568f},   {1.8750f, -1.2500f, 0.3750f}};
/* nanochat's (nanochat/optim.py, polar_express_coeffs: num_iters 5, safety factor 2e-2,
 * cushion 2), rounded to float as its fp32 and bf16 products round them. */
static const float NANOCHAT[][3] = {
    {8.156554524902461f, -22.48329292557795f, 15.878769915207462f},
    {4.042929935166739f, -2.808917465908714f, 0.5000178451051316f},
    {3.8916678022926607f, -2.772484153217685f, 0.5060648178503393f},
    {3.285753657755655f, -2.3681294933425376f, 0.46449024233003106f},
    {2.3465413258596377f, -1.7097828382687081f, 0.42323551169305323f}};
static const float CUBIC5[][3] = {{3.3656576f, -3.3420992f, 0.0f},
                                  {2.5744352f, -1.4957376f, 0.0f},
                                  {2.5368962f, -1.4312570f, 0.0f},
                                  {2.4418906f, -1.2764040f, 0.0f},
                                  {2.2230472f, -0.9630650f, 0.0f}};

lw_muon_options lw_muon_defaults(void) {
    lw_muon_options o;
    memset(&o, 0, sizeof o);
    o.size = sizeof o;
    o.momentum = 0.95f;
    o.nesterov = true;
    o.ns_steps = 5;
    o.coeffs = LW_NS_QUINTIC;
    o.weight_decay_mode = LW_WD_DECOUPLED;
    o.scale = LW_MUON_SCALE_MOONLIGHT;
    o.extra_scale = 1.0f;
    o.eps = 1e-7f;
    o.symmetric = true;
    o.precision = LW_NS_BF16;
    o.tp_mode = LW_MUON_TP_DUPLICATED;
    o.split_qkv = true;
    return o;
}

static lw_status check_options(const lw_muon_options *o) {
    if (!(o->momentum >= 0.0f && o->momentum < 1.0f))
        return lwi_fail(LW_ERR_INVALID, "muon: momentum must be in [0, 1), got %g",
                        (double)o->momentum);
    if (o->ns_steps < 1)
        return lwi_fail(LW_ERR_INVALID, "muon: ns_steps must be >= 1, got %d", o->ns_steps);
    if (o->coeffs < LW_NS_SIMPLE || o->coeffs > LW_NS_NANOCHAT)
        return lwi_fail(LW_ERR_INVALID, "muon: unknown coefficient set %d", (int)o->coeffs);
    if (o->coeffs == LW_NS_CUBIC5 && o->ns_steps != 5)
        return lwi_fail(LW_ERR_INVALID,
                        "muon: the cubic5 coefficients take exactly 5 steps, "
                        "got ns_steps %d",
                        o->ns_steps);
    if (o->coeffs == LW_NS_NANOCHAT && o->ns_steps > 5)
        return lwi_fail(LW_ERR_INVALID,
                        "muon: the nanochat coefficients are five triples for at most 5 steps, "
                        "got ns_steps %d",
                        o->ns_steps);
    if (o->coeffs == LW_NS_CUSTOM) {
        if (o->custom == NULL || o->n_custom < 1)
            return lwi_fail(LW_ERR_INVALID,
                            "muon: custom coefficients need at least one (a, b, c) "
                            "triple, got %d",
                            o->n_custom);
        for (int32_t i = 0; i < 3 * o->n_custom; i++)
            if (!isfinite(o->custom[i]))
                return lwi_fail(LW_ERR_INVALID, "muon: custom coefficient %d is not finite", i);
    }
    if (o->weight_decay_mode < LW_WD_DECOUPLED || o->weight_decay_mode > LW_WD_SCALED)
        return lwi_fail(LW_ERR_INVALID, "muon: unknown weight decay mode %d",
                        (int)o->weight_decay_mode);
    if (o->scale < LW_MUON_SCALE_SPECTRAL || o->scale > LW_MUON_SCALE_MOONLIGHT)
        return lwi_fail(LW_ERR_INVALID, "muon: unknown scale mode %d", (int)o->scale);
    if (!(o->eps > 0.0f))
        return lwi_fail(LW_ERR_INVALID, "muon: eps must be > 0, got %g", (double)o->eps);
    if (!isfinite(o->extra_scale))
        return lwi_fail(LW_ERR_INVALID, "muon: extra_scale must be finite");
    if (lw_ns_precision_name(o->precision) == NULL)
        return lwi_fail(LW_ERR_INVALID, "muon: unknown Newton-Schulz precision %d",
                        (int)o->precision);
    if (lw_muon_tp_mode_name(o->tp_mode) == NULL)
        return lwi_fail(LW_ERR_INVALID, "muon: unknown TP mode %d", (int)o->tp_mode);
    if (o->cautious_wd && o->weight_decay_mode == LW_WD_L2)
        return lwi_fail(LW_ERR_INVALID,
                        "muon: cautious_wd masks a decay of W at the step, but weight_decay_mode "
                        "l2 adds the decay to the gradient: use decoupled, independent or scaled");
    if (o->cautious_wd && !(o->extra_scale > 0.0f))
        return lwi_fail(LW_ERR_INVALID,
                        "muon: cautious_wd compares the signs of W and the step, which needs "
                        "extra_scale > 0, got %g",
                        (double)o->extra_scale);
    return LW_OK;
}

/* Coefficients of step k: "cycle" restarts the list, "repeat" keeps the last triple. */
static const float *coefficients(const lw_muon_options *o, int32_t k) {
    const float(*list)[3];
    int32_t n;
    bool repeat = false;
    switch (o->coeffs) {
    case LW_NS_SIMPLE:
        list = SIMPLE, n = 1;
        break;
    case LW_NS_POLAR_EXPRESS:
        list = POLAR_EXPRESS, n = 8, repeat = true;
        break;
    case LW_NS_CUBIC5:
        list = CUBIC5, n = 5;
        break;
    case LW_NS_CUSTOM:
        list = (const float(*)[3])o->custom, n = o->n_custom, repeat = o->custom_repeat;
        break;
    case LW_NS_NANOCHAT:
        list = NANOCHAT, n = 5;
        break;
    default:
        list = QUINTIC, n = 5;
        break;
    }
    return list[repeat ? (k < n ? k : n - 1) : k % n];
}

lw_status lw_muon_new(const lw_muon_options *opts, lw_muon **out) {
    if (out == NULL) return lwi_fail(LW_ERR_INVALID, "muon: out pointer is NULL");
    *out = NULL;
    const lw_muon_options d = lw_muon_defaults();
    lw_muon_options o;
    lw_status st = lwi_options_read("muon", &lwi_muon_options_kind, opts, &d, &o);
    if (st != LW_OK) return st;
    st = check_options(&o);
    if (st != LW_OK) return st;
    lw_muon *m = calloc(1, sizeof *m);
    if (m == NULL) return lwi_fail(LW_ERR_NOMEM, "muon: out of memory");
    m->o = o;
    m->abc = malloc(sizeof(float) * 3 * (size_t)o.ns_steps);
    if (o.coeffs == LW_NS_CUSTOM) m->custom = malloc(sizeof(float) * 3 * (size_t)o.n_custom);
    if (m->abc == NULL || (o.coeffs == LW_NS_CUSTOM && m->custom == NULL)) {
        lw_muon_free(m);
        return lwi_fail(LW_ERR_NOMEM, "muon: out of memory");
    }
    if (o.coeffs == LW_NS_CUSTOM)
        memcpy(m->custom, o.custom, sizeof(float) * 3 * (size_t)o.n_custom);
    m->o.custom = m->custom;
    for (int32_t k = 0; k < o.ns_steps; k++)
        memcpy(m->abc + 3 * k, coefficients(&m->o, k), 12);
    *out = m;
    return LW_OK;
}

void lw_muon_free(lw_muon *m) {
    if (m == NULL) return;
    free(m->custom);
    free(m->abc);
    lwi_workspace_free(&m->work);
    free(m);
}

/* Workspace of at least `floats` on the stream's device (moved there if it was elsewhere). */
static lw_status reserve(lw_muon *m, lw_stream *s, int64_t floats) {
    return lwi_workspace_reserve(&m->work, s, floats, sizeof(float),
                                 "muon: the Newton-Schulz workspace", "floats");
}

/* Floats of workspace before a batch's updates: Newton-Schulz's, which renormalisation reuses
 * after it (LWI_MUON_NORM_BLOCKS doubles a matrix fit in its partials), and at least the row
 * norms and the target of each matrix for equilibration, which runs before it. */
static int64_t work_floats(const lw_muon *m, int64_t batch, int64_t rows, int64_t cols) {
    const int64_t ns = lwi_ns_work_floats(batch, rows, cols), rows_eq = 2 * batch * (rows + 1);
    return m->o.row_equilibrate && rows_eq > ns ? rows_eq : ns;
}

/* Newton-Schulz's normalisation: U / max(gain ||U||_F + offset, eps); nanochat's set brings its
 * own, 1.01 ||U||_F + 1e-6 (a divisor of at least 1e-6, which the default eps never floors). */
static void normalisation(const lw_muon_options *o, float *gain, float *offset) {
    *gain = o->coeffs == LW_NS_NANOCHAT ? 1.01f : 1.0f;
    *offset = o->coeffs == LW_NS_NANOCHAT ? 1e-6f : 0.0f;
}

double lwi_muon_norm_divisor(const lw_muon *m, double norm) {
    float gain, offset;
    normalisation(&m->o, &gain, &offset);
    const double d = (double)gain * norm + (double)offset;
    return d > m->o.eps ? d : (double)m->o.eps;
}

static lw_status check_shape(int64_t rows, int64_t cols) {
    if (rows < 1 || cols < 1 || rows > 0x7fffffff || cols > 0x7fffffff)
        return lwi_fail(LW_ERR_INVALID, "muon: bad matrix shape %lld x %lld", (long long)rows,
                        (long long)cols);
    return LW_OK;
}

static lw_status check_matrix(const void *a, const void *b, int64_t rows, int64_t cols) {
    if (a == NULL || b == NULL) return lwi_fail(LW_ERR_INVALID, "muon: NULL matrix");
    return check_shape(rows, cols);
}

/* Row equilibration (into x), Newton-Schulz (x in place then), renormalisation, as the options
 * say; the workspace holds each one's scratch in turn. */
static lw_status orthogonalize(lw_muon *m, lw_stream *s, const float *u, float *x, int64_t batch,
                               int64_t rows, int64_t cols) {
    const lw_muon_options *o = &m->o;
    const int64_t n = batch * rows * cols;
    if (o->coeffs == LW_NS_IDENTITY && !o->row_equilibrate && !o->renormalize)
        return x == u
                   ? LW_OK
                   : lw_device_copy(s, x, u, (int64_t)sizeof(float) * n, LW_COPY_DEVICE_TO_DEVICE);
    lw_status st = reserve(m, s, work_floats(m, batch, rows, cols));
    if (st == LW_OK && o->row_equilibrate) {
        st = lwi_run_muon_equilibrate(s, u, x, batch, rows, cols, LWI_MUON_NORM_FLOOR,
                                      (double *)m->work.data);
        u = x;
    }
    if (st == LW_OK && o->coeffs == LW_NS_IDENTITY && x != u)
        st = lw_device_copy(s, x, u, (int64_t)sizeof(float) * n, LW_COPY_DEVICE_TO_DEVICE);
    if (st == LW_OK && o->coeffs != LW_NS_IDENTITY) {
        lwi_ns_plan plan = {m->abc, o->ns_steps,  o->eps,       1.0f,
                            0.0f,   o->symmetric, o->precision, m->work.data};
        normalisation(o, &plan.norm_gain, &plan.norm_offset);
        st = lwi_run_newton_schulz(s, &plan, u, x, batch, rows, cols);
    }
    if (st == LW_OK && o->renormalize)
        st = lwi_run_muon_renormalize(s, x, batch, rows * cols,
                                      (float)sqrt((double)(rows < cols ? rows : cols)),
                                      LWI_MUON_NORM_FLOOR, (double *)m->work.data);
    return st;
}

lw_status lw_muon_orthogonalize(lw_muon *m, lw_stream *stream, const float *u, float *x,
                                int64_t rows, int64_t cols) {
    lw_status st = m ? check_matrix(u, x, rows, cols) : lwi_fail(LW_ERR_INVALID, "muon: NULL muon");
    if (st != LW_OK) return st;
    const float *work = m->work.data;
    if (u != x && work != NULL && u >= work && u < work + m->work.bytes / (int64_t)sizeof(float))
        return lwi_fail(LW_ERR_INVALID, "muon: the matrix to orthogonalise is in the workspace");
    return orthogonalize(m, lwi_stream_or_cpu(stream), u, x, 1, rows, cols);
}

/* The batch's updates live after the Newton-Schulz workspace, which a batch of the same shape
 * does not grow again. */
lw_status lwi_muon_batch_updates(lw_muon *m, lw_stream *stream, int64_t batch, int64_t rows,
                                 int64_t cols, float **updates) {
    lw_status st = m ? check_shape(rows, cols) : lwi_fail(LW_ERR_INVALID, "muon: NULL muon");
    if (st != LW_OK) return st;
    if (batch < 1) return lwi_fail(LW_ERR_INVALID, "muon: batch of %lld", (long long)batch);
    const int64_t work = work_floats(m, batch, rows, cols);
    if ((st = reserve(m, lwi_stream_or_cpu(stream), work + batch * rows * cols)) != LW_OK)
        return st;
    *updates = (float *)m->work.data + work;
    return LW_OK;
}

lw_status lwi_muon_orthogonalize_batch(lw_muon *m, lw_stream *stream, float *u, int64_t batch,
                                       int64_t rows, int64_t cols) {
    lw_status st = m ? check_matrix(u, u, rows, cols) : lwi_fail(LW_ERR_INVALID, "muon: NULL muon");
    if (st != LW_OK) return st;
    if (u != (float *)m->work.data + work_floats(m, batch, rows, cols))
        return lwi_fail(LW_ERR_INVALID, "muon: a batch is orthogonalised where "
                                        "lwi_muon_batch_updates put it");
    return orthogonalize(m, lwi_stream_or_cpu(stream), u, u, batch, rows, cols);
}

static double scale_of(const lw_muon_options *o, int64_t rows, int64_t cols) {
    double r = (double)rows, c = (double)cols, big = r > c ? r : c;
    switch (o->scale) {
    case LW_MUON_SCALE_UNIT_RMS_NORM:
        return sqrt(r / c);
    case LW_MUON_SCALE_SHAPE_SCALING:
        return sqrt(r / c > 1.0 ? r / c : 1.0);
    case LW_MUON_SCALE_MOONLIGHT:
        return 0.2 * sqrt(big);
    default:
        return sqrt(big);
    }
}

const lw_muon_options *lwi_muon_options(const lw_muon *m) { return &m->o; }

const float *lwi_muon_abc(const lw_muon *m) { return m->abc; }

double lwi_muon_scale(const lw_muon *m, int64_t rows, int64_t cols) {
    return scale_of(&m->o, rows, cols) * (double)m->o.extra_scale;
}

/* Whether the decay of W waits for the step: a cautious one needs the update's signs, a scaled
 * one the matrix's shape (which a row shard's momentum does not know). */
static bool decay_at_step(const lw_muon_options *o) {
    return o->cautious_wd || o->weight_decay_mode == LW_WD_SCALED;
}

lw_status lw_muon_momentum(lw_muon *m, lw_stream *stream, float *w, const float *g, float *mom,
                           float *u, int64_t n, float lr, float wd, float grad_scale) {
    if (m == NULL || w == NULL || g == NULL || mom == NULL || u == NULL || n < 0)
        return lwi_fail(LW_ERR_INVALID, "muon: NULL argument or negative size");
    lw_stream *s = lwi_stream_or_cpu(stream);
    const float decay = decay_at_step(&m->o) ? 0.0f : wd; /* the step's, then */
    const lwi_muon_step k = {m->o.momentum, m->o.nesterov, m->o.weight_decay_mode, lr,
                             decay,         grad_scale};
    return lwi_run_muon_momentum(s, &k, w, g, mom, u, n);
}

/* w -= x_step * x, with the decay at the step when the options put it there. step is the whole
 * step's factor, lr * scale * extra (x_step itself, or lr for an x already scaled), of which the
 * scaled decay is wd times (in float, as nanochat multiplies its lr by its weight decay). */
static lw_status step_with_decay(lw_muon *m, lw_stream *s, float *w, const float *x, int64_t n,
                                 float x_step, float lr, float step, float wd) {
    const lw_muon_options *o = &m->o;
    if (!decay_at_step(o)) return lw_vec_axpy(s, w, -x_step, x, n);
    const float decay = o->weight_decay_mode == LW_WD_SCALED        ? step * wd
                        : o->weight_decay_mode == LW_WD_INDEPENDENT ? wd
                                                                    : lr * wd;
    return lwi_run_muon_decay_step(s, w, x, n, x_step, decay, o->cautious_wd);
}

lw_status lw_muon_apply(lw_muon *m, lw_stream *stream, float *w, const float *x, int64_t n,
                        int64_t rows, int64_t cols, float lr) {
    lw_status st = m ? check_matrix(w, x, rows, cols) : lwi_fail(LW_ERR_INVALID, "muon: NULL muon");
    if (st != LW_OK) return st;
    const float step = (float)(lr * scale_of(&m->o, rows, cols) * m->o.extra_scale);
    return lw_vec_axpy(stream, w, -step, x, n);
}

lw_status lw_muon_apply_decay(lw_muon *m, lw_stream *stream, float *w, const float *x, int64_t n,
                              int64_t rows, int64_t cols, float lr, float wd) {
    lw_status st = m ? check_matrix(w, x, rows, cols) : lwi_fail(LW_ERR_INVALID, "muon: NULL muon");
    if (st != LW_OK) return st;
    const float step = (float)(lr * scale_of(&m->o, rows, cols) * m->o.extra_scale);
    return step_with_decay(m, lwi_stream_or_cpu(stream), w, x, n, step, lr, step, wd);
}

lw_status lwi_muon_apply_scaled(lw_muon *m, lw_stream *s, float *w, const float *x, int64_t n,
                                int64_t rows, int64_t cols, float lr, float wd) {
    const float step = (float)(lr * scale_of(&m->o, rows, cols) * m->o.extra_scale);
    return step_with_decay(m, s, w, x, n, lr, lr, step, wd);
}

lw_status lw_muon_update(lw_muon *m, lw_stream *stream, float *w, const float *g, float *mom,
                         int64_t rows, int64_t cols, float lr, float wd, float grad_scale) {
    lw_status st = m ? check_matrix(w, g, rows, cols) : lwi_fail(LW_ERR_INVALID, "muon: NULL muon");
    if (st != LW_OK) return st;
    if (mom == NULL) return lwi_fail(LW_ERR_INVALID, "muon: NULL momentum");
    lw_stream *s = lwi_stream_or_cpu(stream);
    const int64_t n = rows * cols;
    float *u;
    if ((st = lwi_muon_batch_updates(m, s, 1, rows, cols, &u)) != LW_OK) return st;
    if ((st = lw_muon_momentum(m, s, w, g, mom, u, n, lr, wd, grad_scale)) != LW_OK) return st;
    /* 3. orthogonalise, 4. step */
    if ((st = lwi_muon_orthogonalize_batch(m, s, u, 1, rows, cols)) != LW_OK) return st;
    return lw_muon_apply_decay(m, s, w, u, n, rows, cols, lr, wd);
}

/* ---- Muon as the optimizer's whole-matrix rule (optim/rules.h) ------------------------------ */

static lw_status rule_open(const lw_optimizer_options *o, void **ctx) {
    lw_muon *m = NULL;
    lw_status st = lw_muon_new(&o->muon, &m);
    *ctx = m;
    return st;
}

static void rule_close(void *ctx) { lw_muon_free(ctx); }

static lw_status rule_batch_space(void *ctx, lw_stream *s, int64_t batch, int64_t rows,
                                  int64_t cols, float **u) {
    return lwi_muon_batch_updates(ctx, s, batch, rows, cols, u);
}

static lw_status rule_prepare(void *ctx, lw_stream *s, float *w, const float *g,
                              float *const *state, float *u, int64_t n, float lr, float wd,
                              float grad_scale) {
    return lw_muon_momentum(ctx, s, w, g, state[0], u, n, lr, wd, grad_scale);
}

static lw_status rule_transform(void *ctx, lw_stream *s, float *u, float *x, int64_t batch,
                                int64_t rows, int64_t cols) {
    if (x == u) return lwi_muon_orthogonalize_batch(ctx, s, u, batch, rows, cols);
    return lw_muon_orthogonalize(ctx, s, u, x, rows, cols);
}

static lw_status rule_apply(void *ctx, lw_stream *s, float *w, float *x, float *const *state,
                            int64_t n, int64_t rows, int64_t cols, float lr, float wd) {
    (void)state;
    return lw_muon_apply_decay(ctx, s, w, x, n, rows, cols, lr, wd);
}

const lwi_rule lwi_rule_muon = {.open = rule_open,
                                .close = rule_close,
                                .batch_space = rule_batch_space,
                                .prepare = rule_prepare,
                                .transform = rule_transform,
                                .apply = rule_apply};
