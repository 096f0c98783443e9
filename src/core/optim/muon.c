/* muon.c: the Muon update of one matrix (REFERENCE.md section 6): weight decay, EMA momentum
 * (Nesterov optional), Newton-Schulz orthogonalisation on OpenBLAS, scaled step. The
 * symmetric products X X^T and A A go through SYRK and B X through SYMM, which do about 3/4
 * (wide) to 2/3 (square) of the full-GEMM FLOPs. No transposes are copied: a row-major
 * rows x cols matrix with rows > cols is, read column-major, its cols x rows transpose. */
#include "base/base.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct lw_muon {
    lw_muon_options o;
    float *custom;   /* [owned] copy of the custom triples */
    float *work;     /* [owned] A, A2 (p x p each), Y (p x q), update (rows x cols) */
    size_t capacity; /* floats in work */
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
static const float CUBIC5[][3] = {{3.3656576f, -3.3420992f, 0.0f},
                                  {2.5744352f, -1.4957376f, 0.0f},
                                  {2.5368962f, -1.4312570f, 0.0f},
                                  {2.4418906f, -1.2764040f, 0.0f},
                                  {2.2230472f, -0.9630650f, 0.0f}};

lw_muon_options lw_muon_defaults(void) {
    lw_muon_options o;
    memset(&o, 0, sizeof o);
    o.momentum = 0.95f;
    o.nesterov = true;
    o.ns_steps = 5;
    o.coeffs = LW_NS_QUINTIC;
    o.weight_decay_mode = LW_WD_DECOUPLED;
    o.scale = LW_MUON_SCALE_MOONLIGHT;
    o.extra_scale = 1.0f;
    o.eps = 1e-7f;
    o.symmetric = true;
    return o;
}

static lw_status check_options(const lw_muon_options *o) {
    if (!(o->momentum >= 0.0f && o->momentum < 1.0f))
        return lwi_fail(LW_ERR_INVALID, "muon: momentum must be in [0, 1), got %g",
                        (double)o->momentum);
    if (o->ns_steps < 1)
        return lwi_fail(LW_ERR_INVALID, "muon: ns_steps must be >= 1, got %d", o->ns_steps);
    if (o->coeffs < LW_NS_SIMPLE || o->coeffs > LW_NS_IDENTITY)
        return lwi_fail(LW_ERR_INVALID, "muon: unknown coefficient set %d", (int)o->coeffs);
    if (o->coeffs == LW_NS_CUBIC5 && o->ns_steps != 5)
        return lwi_fail(LW_ERR_INVALID,
                        "muon: the cubic5 coefficients take exactly 5 steps, "
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
    if (o->weight_decay_mode < LW_WD_DECOUPLED || o->weight_decay_mode > LW_WD_L2)
        return lwi_fail(LW_ERR_INVALID, "muon: unknown weight decay mode %d",
                        (int)o->weight_decay_mode);
    if (o->scale < LW_MUON_SCALE_SPECTRAL || o->scale > LW_MUON_SCALE_MOONLIGHT)
        return lwi_fail(LW_ERR_INVALID, "muon: unknown scale mode %d", (int)o->scale);
    if (!(o->eps > 0.0f))
        return lwi_fail(LW_ERR_INVALID, "muon: eps must be > 0, got %g", (double)o->eps);
    if (!isfinite(o->extra_scale))
        return lwi_fail(LW_ERR_INVALID, "muon: extra_scale must be finite");
    return LW_OK;
}

lw_status lw_muon_new(const lw_muon_options *opts, lw_muon **out) {
    if (out == NULL) return lwi_fail(LW_ERR_INVALID, "muon: out pointer is NULL");
    *out = NULL;
    lw_muon_options o = opts ? *opts : lw_muon_defaults();
    lw_status st = check_options(&o);
    if (st != LW_OK) return st;
    lw_muon *m = calloc(1, sizeof *m);
    if (m == NULL) return lwi_fail(LW_ERR_NOMEM, "muon: out of memory");
    m->o = o;
    if (o.coeffs == LW_NS_CUSTOM) {
        m->custom = malloc(sizeof(float) * 3 * (size_t)o.n_custom);
        if (m->custom == NULL) {
            free(m);
            return lwi_fail(LW_ERR_NOMEM, "muon: out of memory");
        }
        memcpy(m->custom, o.custom, sizeof(float) * 3 * (size_t)o.n_custom);
    }
    m->o.custom = m->custom;
    *out = m;
    return LW_OK;
}

void lw_muon_free(lw_muon *m) {
    if (m == NULL) return;
    free(m->custom);
    free(m->work);
    free(m);
}

/* Coefficients of step k: "cycle" restarts the list, "repeat" keeps the last triple. */
static const float *coefficients(const lw_muon *m, int32_t k) {
    const float(*list)[3];
    int32_t n;
    bool repeat = false;
    switch (m->o.coeffs) {
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
        list = (const float(*)[3])m->custom, n = m->o.n_custom, repeat = m->o.custom_repeat;
        break;
    default:
        list = QUINTIC, n = 5;
        break;
    }
    return list[repeat ? (k < n ? k : n - 1) : k % n];
}

static lw_status reserve(lw_muon *m, size_t floats) {
    if (floats <= m->capacity) return LW_OK;
    float *grown = realloc(m->work, sizeof(float) * floats);
    if (grown == NULL) return lwi_fail(LW_ERR_NOMEM, "muon: out of memory for %zu floats", floats);
    m->work = grown;
    m->capacity = floats;
    return LW_OK;
}

/* Copies the stored triangle of the p x p symmetric A onto the other: SYRK writes one
 * triangle, the next SYRK reads A whole. `row_major_upper`: the stored triangle is the upper
 * one in row-major terms. */
static void symmetrize(float *a, int64_t p, bool row_major_upper) {
    for (int64_t i = 0; i < p; i++)
        for (int64_t j = i + 1; j < p; j++) {
            if (row_major_upper)
                a[j * p + i] = a[i * p + j];
            else
                a[i * p + j] = a[j * p + i];
        }
}

/* Newton-Schulz on X (p x q, p <= q, in `order` with leading dimension ld), in place, using
 * work for A, A2 (p x p) and Y (p x q). */
static void newton_schulz(const lw_muon *m, float *x, int64_t p, int64_t q, CBLAS_ORDER order,
                          int64_t ld, float *work) {
    float *a = work, *a2 = work + p * p, *y = work + 2 * p * p, *cur = x, *next = y;
    const bool sym = m->o.symmetric;
    for (int32_t k = 0; k < m->o.ns_steps; k++) {
        const float *abc = coefficients(m, k);
        /* A = X X^T */
        if (sym) {
            cblas_ssyrk(order, CblasUpper, CblasNoTrans, (int)p, (int)q, 1.0f, cur, (int)ld, 0.0f,
                        a, (int)p);
        } else {
            cblas_sgemm(order, CblasNoTrans, CblasTrans, (int)p, (int)p, (int)q, 1.0f, cur, (int)ld,
                        cur, (int)ld, 0.0f, a, (int)p);
        }
        /* B = b A + c A A (into a2); A is symmetric, so A A = A A^T */
        if (abc[2] != 0.0f) {
            if (sym) {
                symmetrize(a, p, order == CblasRowMajor);
                cblas_ssyrk(order, CblasUpper, CblasNoTrans, (int)p, (int)p, abc[2], a, (int)p,
                            0.0f, a2, (int)p);
            } else {
                cblas_sgemm(order, CblasNoTrans, CblasNoTrans, (int)p, (int)p, (int)p, abc[2], a,
                            (int)p, a, (int)p, 0.0f, a2, (int)p);
            }
            for (int64_t i = 0; i < p * p; i++)
                a2[i] += abc[1] * a[i];
        } else {
            for (int64_t i = 0; i < p * p; i++)
                a2[i] = abc[1] * a[i];
        }
        /* X' = a X + B X */
        memcpy(next, cur, sizeof(float) * (size_t)(p * q));
        if (sym) {
            cblas_ssymm(order, CblasLeft, CblasUpper, (int)p, (int)q, 1.0f, a2, (int)p, cur,
                        (int)ld, abc[0], next, (int)ld);
        } else {
            cblas_sgemm(order, CblasNoTrans, CblasNoTrans, (int)p, (int)q, (int)p, 1.0f, a2, (int)p,
                        cur, (int)ld, abc[0], next, (int)ld);
        }
        float *t = cur;
        cur = next;
        next = t;
    }
    if (cur != x) memcpy(x, cur, sizeof(float) * (size_t)(p * q));
}

static lw_status check_matrix(const void *a, const void *b, int64_t rows, int64_t cols) {
    if (a == NULL || b == NULL) return lwi_fail(LW_ERR_INVALID, "muon: NULL matrix");
    if (rows < 1 || cols < 1 || rows > 0x7fffffff || cols > 0x7fffffff)
        return lwi_fail(LW_ERR_INVALID, "muon: bad matrix shape %lld x %lld", (long long)rows,
                        (long long)cols);
    return LW_OK;
}

lw_status lw_muon_orthogonalize(lw_muon *m, const float *u, float *x, int64_t rows, int64_t cols) {
    lw_status st = m ? check_matrix(u, x, rows, cols) : lwi_fail(LW_ERR_INVALID, "muon: NULL muon");
    if (st != LW_OK) return st;
    const int64_t n = rows * cols;
    if (m->o.coeffs == LW_NS_IDENTITY) {
        if (x != u) memcpy(x, u, sizeof(float) * (size_t)n);
        return LW_OK;
    }
    double norm = sqrt(lw_vec_sum_squares(u, n));
    float inv = (float)(1.0 / (norm > m->o.eps ? norm : m->o.eps));
    for (int64_t i = 0; i < n; i++)
        x[i] = u[i] * inv;
    const int64_t p = rows <= cols ? rows : cols, q = rows <= cols ? cols : rows;
    /* rows <= cols: X = U row-major (ld cols); else X = U^T, which is U read column-major */
    const CBLAS_ORDER order = rows <= cols ? CblasRowMajor : CblasColMajor;
    if ((st = reserve(m, (size_t)(2 * p * p + p * q + n))) != LW_OK) return st;
    newton_schulz(m, x, p, q, order, rows <= cols ? q : p, m->work);
    return LW_OK;
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

lw_status lw_muon_momentum(lw_muon *m, float *w, const float *g, float *mom, float *u, int64_t n,
                           float lr, float wd, float grad_scale) {
    if (m == NULL || w == NULL || g == NULL || mom == NULL || u == NULL || n < 0)
        return lwi_fail(LW_ERR_INVALID, "muon: NULL argument or negative size");
    const float beta = m->o.momentum;
    /* 1. weight decay, before momentum */
    const lw_weight_decay mode = m->o.weight_decay_mode;
    if (mode == LW_WD_DECOUPLED && wd != 0.0f) lw_vec_scale(w, n, 1.0f - lr * wd);
    if (mode == LW_WD_INDEPENDENT && wd != 0.0f) lw_vec_scale(w, n, 1.0f - wd);
    /* 2. momentum (EMA) and the Nesterov look-ahead, into u */
    for (int64_t i = 0; i < n; i++) {
        float gi = grad_scale * g[i];
        if (mode == LW_WD_L2) gi += wd * w[i];
        mom[i] = beta * mom[i] + (1.0f - beta) * gi;
        u[i] = m->o.nesterov ? (1.0f - beta) * gi + beta * mom[i] : mom[i];
    }
    return LW_OK;
}

lw_status lw_muon_apply(lw_muon *m, float *w, const float *x, int64_t n, int64_t rows, int64_t cols,
                        float lr) {
    lw_status st = m ? check_matrix(w, x, rows, cols) : lwi_fail(LW_ERR_INVALID, "muon: NULL muon");
    if (st != LW_OK) return st;
    const float step = (float)(lr * scale_of(&m->o, rows, cols) * m->o.extra_scale);
    for (int64_t i = 0; i < n; i++)
        w[i] -= step * x[i];
    return LW_OK;
}

lw_status lw_muon_update(lw_muon *m, float *w, const float *g, float *mom, int64_t rows,
                         int64_t cols, float lr, float wd, float grad_scale) {
    lw_status st = m ? check_matrix(w, g, rows, cols) : lwi_fail(LW_ERR_INVALID, "muon: NULL muon");
    if (st != LW_OK) return st;
    if (mom == NULL) return lwi_fail(LW_ERR_INVALID, "muon: NULL momentum");
    const int64_t n = rows * cols, p = rows <= cols ? rows : cols;
    const int64_t q = rows <= cols ? cols : rows;
    if ((st = reserve(m, (size_t)(2 * p * p + p * q + n))) != LW_OK) return st;
    float *u = m->work + 2 * p * p + p * q; /* the update, after the NS workspace */
    if ((st = lw_muon_momentum(m, w, g, mom, u, n, lr, wd, grad_scale)) != LW_OK) return st;
    /* 3. orthogonalise, 4. step */
    if ((st = lw_muon_orthogonalize(m, u, u, rows, cols)) != LW_OK) return st;
    return lw_muon_apply(m, w, u, n, rows, cols, lr);
}
