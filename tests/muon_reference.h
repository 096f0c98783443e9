/* muon_reference.h: one Muon update of one matrix in float64, written from docs/algorithms.md
 * section 6 and apart from src/core/optim/muon.c, for the tests of Muon (test_muon.c) and its
 * options (test_muon_variants.c, test_muon_options.c, test_muon_tp_options.c): weight decay before the
 * update or with the step (cautious, scaled), momentum, row equilibration, Newton-Schulz's
 * normalisation and steps (a wide matrix's X X^T, a tall one's X^T X), renormalisation, NorMuon's
 * variance reduction (test_rules.c) and the scale of the step. */
#ifndef LW_TEST_MUON_REFERENCE_H
#define LW_TEST_MUON_REFERENCE_H

#include "lw.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The coefficient sets, as published (the library keeps them in float). */
static const double REF_QUINTIC[5][3] = {{4.0848, -6.8946, 2.9270},
                                         {3.9505, -6.3029, 2.6377},
                                         {3.7418, -5.5913, 2.3037},
                                         {2.8769, -3.1427, 1.2046},
                                         {2.8366, -3.0525, 1.2012}};
/* nanochat/optim.py's polar_express_coeffs */
static const double REF_NANOCHAT[5][3] = {
    {8.156554524902461, -22.48329292557795, 15.878769915207462},
    {4.042929935166739, -2.808917465908714, 0.5000178451051316},
    {3.8916678022926607, -2.772484153217685, 0.5060648178503393},
    {3.285753657755655, -2.3681294933425376, 0.46449024233003106},
    {2.3465413258596377, -1.7097828382687081, 0.42323551169305323}};

/* The options of one update, read from lw_muon_options (quintic, nanochat, identity or a custom
 * set). */
static inline double ref_scale(const lw_muon_options *o, double r, double c) {
    const double big = r > c ? r : c;
    double s = sqrt(big);
    if (o->scale == LW_MUON_SCALE_UNIT_RMS_NORM) s = sqrt(r / c);
    if (o->scale == LW_MUON_SCALE_SHAPE_SCALING) s = sqrt(r / c > 1.0 ? r / c : 1.0);
    if (o->scale == LW_MUON_SCALE_MOONLIGHT) s = 0.2 * sqrt(big);
    return s * o->extra_scale;
}

static inline double ref_frobenius(const double *x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += x[i] * x[i];
    return sqrt(s);
}

/* The coefficients of Newton-Schulz step s (from 0): quintic's cycled, nanochat's in order, or
 * a custom set's (o->custom, n_custom triples), cycled or with its last repeated. */
static inline const double *ref_step_coefficients(const lw_muon_options *o, int32_t s,
                                                  double custom[3]) {
    if (o->coeffs == LW_NS_NANOCHAT) return REF_NANOCHAT[s];
    if (o->coeffs != LW_NS_CUSTOM) return REF_QUINTIC[s % 5];
    const int32_t k = o->custom_repeat ? (s < o->n_custom ? s : o->n_custom - 1) : s % o->n_custom;
    for (int j = 0; j < 3; j++)
        custom[j] = (double)o->custom[3 * k + j];
    return custom;
}

/* x (rows x cols) orthogonalised in place: equilibrated, normalised, stepped, renormalised. */
static inline void ref_orthogonalize(const lw_muon_options *o, double *x, int64_t rows,
                                     int64_t cols) {
    const int64_t n = rows * cols;
    if (o->row_equilibrate) {
        const double t = ref_frobenius(x, n) / sqrt((double)rows);
        for (int64_t i = 0; i < rows; i++) {
            const double f = t / fmax(ref_frobenius(x + i * cols, cols), 1e-6);
            for (int64_t j = 0; j < cols; j++)
                x[i * cols + j] *= f;
        }
    }
    if (o->coeffs != LW_NS_IDENTITY) {
        const bool nano = o->coeffs == LW_NS_NANOCHAT;
        const double norm = ref_frobenius(x, n);
        const double d = nano ? 1.01 * norm + 1e-6 : fmax(norm, (double)o->eps);
        for (int64_t i = 0; i < n; i++)
            x[i] /= d;
        /* A = X X^T (p = rows) for a wide matrix, X^T X (p = cols) for a tall one */
        const bool tall = rows > cols;
        const int64_t p = tall ? cols : rows;
        double *a = malloc(sizeof(double) * (size_t)(p * p)),
               *b = malloc(sizeof(double) * (size_t)(p * p));
        double *y = malloc(sizeof(double) * (size_t)n);
#define REF_X(i, k) (tall ? x[(k)*cols + (i)] : x[(i)*cols + (k)]) /* X^T for a tall one */
        const int64_t q = tall ? rows : cols;
        double custom[3];
        for (int32_t s = 0; s < o->ns_steps; s++) {
            const double *abc = ref_step_coefficients(o, s, custom);
            for (int64_t i = 0; i < p; i++)
                for (int64_t j = 0; j < p; j++) {
                    double v = 0;
                    for (int64_t k = 0; k < q; k++)
                        v += REF_X(i, k) * REF_X(j, k);
                    a[i * p + j] = v;
                }
            for (int64_t i = 0; i < p; i++)
                for (int64_t j = 0; j < p; j++) {
                    double v = 0;
                    for (int64_t k = 0; k < p; k++)
                        v += a[i * p + k] * a[k * p + j];
                    b[i * p + j] = abc[1] * a[i * p + j] + abc[2] * v;
                }
            for (int64_t i = 0; i < p; i++)
                for (int64_t k = 0; k < q; k++) {
                    double v = 0;
                    for (int64_t j = 0; j < p; j++)
                        v += b[i * p + j] * REF_X(j, k);
                    y[tall ? k * cols + i : i * cols + k] = abc[0] * REF_X(i, k) + v;
                }
            memcpy(x, y, sizeof(double) * (size_t)n);
        }
#undef REF_X
        free(a), free(b), free(y);
    }
    if (o->renormalize) {
        const double f =
            sqrt((double)(rows < cols ? rows : cols)) / fmax(ref_frobenius(x, n), 1e-6);
        for (int64_t i = 0; i < n; i++)
            x[i] *= f;
    }
}

/* NorMuon's variance reduction of x (rows x cols) with its second moment v, one per line (row
 * when rows >= cols, else column): per line v += (1 - beta2) (mean of x^2 - v), then x times
 * max(v, floor)^-1/2 per line, rescaled to its Frobenius norm before. */
static inline void ref_normuon_variance(const lw_normuon_options *no, double *x, double *v,
                                        int64_t rows, int64_t cols) {
    const bool by_row = rows >= cols;
    const int64_t lines = by_row ? rows : cols, len = by_row ? cols : rows;
    const double before = ref_frobenius(x, rows * cols), floor = no->floor;
    for (int64_t l = 0; l < lines; l++) {
        double s = 0;
        for (int64_t k = 0; k < len; k++) {
            const double e = by_row ? x[l * cols + k] : x[k * cols + l];
            s += e * e;
        }
        v[l] += (1 - (double)no->beta2) * (s / (double)len - v[l]);
        const double f = 1 / sqrt(fmax(v[l], floor));
        for (int64_t k = 0; k < len; k++)
            x[by_row ? l * cols + k : k * cols + l] *= f;
    }
    const double f = before / fmax(ref_frobenius(x, rows * cols), floor);
    for (int64_t i = 0; i < rows * cols; i++)
        x[i] *= f;
}

/* One update of w (rows x cols) with gradient g (scaled already), momentum m, its step scaled
 * as a matrix of sr x sc (the full shape of a shard orthogonalised alone); with no and v,
 * NorMuon's (v its second moment), the variance reduced before the step. */
static inline void ref_normuon_update_as(const lw_muon_options *o, const lw_normuon_options *no,
                                         double *w, const double *g, double *m, double *v,
                                         int64_t rows, int64_t cols, int64_t sr, int64_t sc,
                                         double lr, double wd) {
    const int64_t n = rows * cols;
    const double b = o->momentum, step = lr * ref_scale(o, (double)sr, (double)sc);
    const bool at_step = o->cautious_wd || o->weight_decay_mode == LW_WD_SCALED;
    double *u = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        double gi = g[i] + (o->weight_decay_mode == LW_WD_L2 ? wd * w[i] : 0.0);
        if (!at_step && o->weight_decay_mode == LW_WD_DECOUPLED) w[i] *= 1 - lr * wd;
        if (!at_step && o->weight_decay_mode == LW_WD_INDEPENDENT) w[i] *= 1 - wd;
        m[i] = b * m[i] + (1 - b) * gi;
        u[i] = o->nesterov ? (1 - b) * gi + b * m[i] : m[i];
    }
    ref_orthogonalize(o, u, rows, cols);
    if (no != NULL) ref_normuon_variance(no, u, v, rows, cols);
    const double d = o->weight_decay_mode == LW_WD_SCALED        ? step * wd
                     : o->weight_decay_mode == LW_WD_INDEPENDENT ? wd
                                                                 : lr * wd;
    for (int64_t i = 0; i < n; i++) {
        const bool decays = at_step && (!o->cautious_wd || u[i] * w[i] >= 0);
        w[i] -= step * u[i] + (decays ? d * w[i] : 0.0);
    }
    free(u);
}

static inline void ref_muon_update_as(const lw_muon_options *o, double *w, const double *g,
                                      double *m, int64_t rows, int64_t cols, int64_t sr, int64_t sc,
                                      double lr, double wd) {
    ref_normuon_update_as(o, NULL, w, g, m, NULL, rows, cols, sr, sc, lr, wd);
}

static inline void ref_muon_update(const lw_muon_options *o, double *w, const double *g, double *m,
                                   int64_t rows, int64_t cols, double lr, double wd) {
    ref_muon_update_as(o, w, g, m, rows, cols, rows, cols, lr, wd);
}

/* Largest |a - b| over the largest |b - start|: a's distance from the reference b relative to
 * how far the updates moved it. */
static inline double ref_distance(const float *a, const double *b, const float *start, int64_t n) {
    double diff = 0, moved = 0;
    for (int64_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)a[i] - b[i]));
        moved = fmax(moved, fabs(b[i] - (double)start[i]));
    }
    return diff / moved;
}

#endif
