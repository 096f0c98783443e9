/* cross_entropy_reference.c: the LM head's softmax cross-entropy in float64, written from the
 * formulas (logits h w^T, capped at cap tanh(logit / cap), log-sum-exp, the target's logit), and
 * its gradients by central differences or by the formula. No lwopt kernel is called. */
#include "cross_entropy_reference.h"

static bool counted(int32_t target, int64_t vocab) { return target >= 0 && target < vocab; }

/* The rows of [first, first + v) below vocab: the real ones. */
static int64_t real_rows(const ce_reference *p) {
    const int64_t real = p->vocab - p->first;
    return real < 0 ? 0 : real < p->v ? real : p->v;
}

/* logit j of row i, capped */
static double capped_logit(const ce_reference *p, const double *h, const double *w, int64_t i,
                           int64_t j) {
    double l = 0;
    for (int64_t k = 0; k < p->c; k++)
        l += h[i * p->c + k] * w[j * p->c + k];
    return p->cap > 0 ? p->cap * tanh(l / p->cap) : l;
}

static int64_t count_rows(const ce_reference *p) {
    int64_t count = 0;
    for (int64_t i = 0; i < p->n; i++)
        count += counted(p->targets[i], p->vocab);
    return count;
}

/* the loss at double h and w (the perturbed ones of the differences) */
static double loss_at(const ce_reference *p, const double *h, const double *w, double *losses,
                      double *lse, double *stats) {
    const int64_t n = p->n, real = real_rows(p), count = count_rows(p);
    double *z = malloc(sizeof(double) * (size_t)(real > 0 ? real : 1)), total = 0;
    for (int64_t i = 0; i < n; i++) {
        double m = -INFINITY, sum = 0, target = 0;
        for (int64_t j = 0; j < real; j++) {
            z[j] = capped_logit(p, h, w, i, j);
            m = fmax(m, z[j]);
        }
        for (int64_t j = 0; j < real; j++)
            sum += exp(z[j] - m);
        const int64_t k = (int64_t)p->targets[i] - p->first;
        const bool here = k >= 0 && k < real;
        if (here) target = z[k];
        if (stats != NULL) stats[i] = m, stats[n + i] = sum, stats[2 * n + i] = here ? target : 0.0;
        /* the whole vocabulary's sum, around the larger of the two maxima */
        double top = m, all = sum;
        if (p->peer != NULL) {
            const double pm = p->peer[i], ps = p->peer[n + i];
            top = fmax(m, pm);
            all = (real > 0 ? sum * exp(m - top) : 0) + (ps > 0 ? ps * exp(pm - top) : 0);
            if (!here) target = p->peer[2 * n + i];
        }
        const double row_lse = top + log(all);
        if (lse != NULL) lse[i] = row_lse;
        const double row_loss = counted(p->targets[i], p->vocab) ? row_lse - target : 0.0;
        if (losses != NULL) losses[i] = row_loss;
        total += row_loss;
    }
    free(z);
    return count > 0 ? p->loss_scale * total / (double)count : 0.0;
}

static double *widen(const float *x, int64_t n) {
    double *y = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i];
    return y;
}

double ce_reference_forward(const ce_reference *p, double *losses, double *lse, double *stats) {
    double *h = widen(p->h, p->n * p->c), *w = widen(p->w, p->v * p->c);
    const double loss = loss_at(p, h, w, losses, lse, stats);
    free(h), free(w);
    return loss;
}

/* d loss / d x[i] for every element of x (h or w), x[i] +- eps, eps 1e-5 of its scale: the
 * truncation (eps^2 times the third derivative) and the cancellation (1e-16 / eps of the loss)
 * both near 1e-10 */
static void differences(const ce_reference *p, double *h, double *w, double *x, int64_t n,
                        double *grad) {
    for (int64_t i = 0; i < n; i++) {
        const double x0 = x[i], eps = 1e-5 * fmax(1.0, fabs(x0));
        x[i] = x0 + eps;
        const double up = loss_at(p, h, w, NULL, NULL, NULL);
        x[i] = x0 - eps;
        const double down = loss_at(p, h, w, NULL, NULL, NULL);
        x[i] = x0;
        grad[i] = (up - down) / (2 * eps);
    }
}

/* the formula: dz = loss_scale / count (softmax - onehot), dlogit = dz times the cap's slope
 * 1 - (z / cap)^2, dh += dlogit w, dw += dlogit^T h */
static void formula(const ce_reference *p, const double *h, const double *w, double *dh,
                    double *dw) {
    const int64_t n = p->n, c = p->c, real = real_rows(p), count = count_rows(p);
    double *lse = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    loss_at(p, h, w, NULL, lse, NULL);
    for (int64_t i = 0; i < n && count > 0; i++) {
        if (!counted(p->targets[i], p->vocab)) continue;
        const double s = p->loss_scale / (double)count;
        for (int64_t j = 0; j < real; j++) {
            const double z = capped_logit(p, h, w, i, j);
            double d = s * (exp(z - lse[i]) - (j == (int64_t)p->targets[i] - p->first));
            if (p->cap > 0) d *= 1 - (z / p->cap) * (z / p->cap);
            for (int64_t k = 0; k < c; k++) {
                dh[i * c + k] += d * w[j * c + k];
                dw[j * c + k] += d * h[i * c + k];
            }
        }
    }
    free(lse);
}

void ce_reference_grads(const ce_reference *p, double *dh, double *dw) {
    double *h = widen(p->h, p->n * p->c), *w = widen(p->w, p->v * p->c);
    if (p->n * p->v * p->c <= 100000) {
        differences(p, h, w, h, p->n * p->c, dh);
        differences(p, h, w, w, p->v * p->c, dw);
    } else {
        memset(dh, 0, sizeof(double) * (size_t)(p->n * p->c));
        memset(dw, 0, sizeof(double) * (size_t)(p->v * p->c));
        formula(p, h, w, dh, dw);
    }
    free(h), free(w);
}
