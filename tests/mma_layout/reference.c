/* reference.c: double-precision causal attention (grouped KV heads, a sliding window) and each
 * output's bound, and the seeded inputs.
 * The bound: with inputs already bf16, the kernels' only roundings beyond fp32 are P (forward:
 * P V; backward: P^T dO) and dS (dS K, dS^T Q) rounded to bf16 (u = 2^-8 relative each, nearest
 * even). An output sum_j x_j of terms x_j (p_j v_j, p_ij dout_i, scale dS_ij q_i, ...) is then
 * off by sum_j e_j x_j, |e_j| <= u: at most u sum |x_j|, and, the e_j being independent of zero
 * mean, beyond 8 u sqrt(sum x_j^2) with probability below 2 exp(-32) (Hoeffding); the bound is
 * the smaller of the two, plus 2^-14 of the terms' magnitudes (sum |x_j| with dS's factors taken
 * apart: sum p_ij (|dP_ij| + |D_i|) |q_i|) for fp32's sums, exp2f and the saved lse (~2^-17 at
 * worst here). An index slip moves an output by whole terms, far past it. */
#include "mma_test.h"

#include <math.h>
#include <stdlib.h>

/* ---- double-precision attention, and each output's bound ------------------------------------- */

static const double U = 1.0 / 256; /* bf16's unit roundoff, 2^-8 */

static double bound(double s1, double s2, double mag) {
    return fmin(U * s1, 8 * U * sqrt(s2)) + mag / 16384;
}

/* The first key query i sees: i - window under a window, else 0. */
static int64_t first_key(int64_t i, int window) {
    return window > 0 && i > window ? i - window : 0;
}

void reference_attention(reference *ref, const float *qkv, const float *dout, const float *d0,
                         int64_t b, int64_t t, int64_t c, int64_t nh, int64_t nkv, int window,
                         int64_t heads) {
    const int64_t hd = c / nh, c3 = c + 2 * nkv * hd, group = nh / nkv;
    const double scale = 1.0 / sqrt((double)hd);
    const size_t tt = sizeof(double) * (size_t)(t * t);
    double *p = malloc(tt), *ds = malloc(tt), *dpm = malloc(tt);
    double *dd = malloc(sizeof(double) * (size_t)t);
    if (ref->dqkv != NULL)
        for (int64_t i = 0; i < b * t * c3; i++)
            ref->dqkv[i] = d0 != NULL ? d0[i] : 0.0;
    /* a KV head's bounds add up over its query heads, as its gradient does */
    if (ref->tol_dqkv != NULL)
        for (int64_t i = 0; i < b * t * c3; i++)
            ref->tol_dqkv[i] = 0.0;
    for (int64_t bh = 0; bh < heads; bh++) {
        const int64_t bi = bh / nh, h = bh % nh, rows = bi * t * c3, head = rows + h * hd;
        const int64_t kv = rows + c + h / group * hd;
        const float *q = qkv + head, *k = qkv + kv, *v = k + nkv * hd;
        for (int64_t i = 0; i < t; i++) {
            double mx = -INFINITY;
            for (int64_t j = first_key(i, window); j <= i; j++) {
                double s = 0;
                for (int64_t d = 0; d < hd; d++)
                    s += (double)q[i * c3 + d] * k[j * c3 + d];
                p[i * t + j] = s * scale;
                mx = fmax(mx, s * scale);
            }
            double sum = 0;
            for (int64_t j = first_key(i, window); j <= i; j++)
                sum += exp(p[i * t + j] - mx);
            const double lse = mx + log(sum);
            ref->lse[bh * t + i] = lse;
            if (ref->rowmax != NULL) ref->rowmax[bh * t + i] = mx;
            for (int64_t j = first_key(i, window); j <= i; j++)
                p[i * t + j] = exp(p[i * t + j] - lse);
            for (int64_t d = 0; d < hd; d++) {
                double o = 0, s1 = 0, s2 = 0;
                for (int64_t j = first_key(i, window); j <= i; j++) {
                    const double x = p[i * t + j] * v[j * c3 + d];
                    o += x, s1 += fabs(x), s2 += x * x;
                }
                ref->out[(bi * t + i) * c + h * hd + d] = o;
                if (ref->tol_out != NULL)
                    ref->tol_out[(bi * t + i) * c + h * hd + d] = bound(s1, s2, s1);
            }
        }
        if (ref->dqkv == NULL) continue;
        const float *g = dout + bi * t * c + h * hd;
        const double *o = ref->out + bi * t * c + h * hd;
        double *gq = ref->dqkv + head, *gk = ref->dqkv + kv, *gv = gk + nkv * hd;
        double *tq = ref->tol_dqkv != NULL ? ref->tol_dqkv + head : NULL;
        double *tk = ref->tol_dqkv != NULL ? ref->tol_dqkv + kv : NULL;
        for (int64_t i = 0; i < t; i++) {
            dd[i] = 0;
            for (int64_t d = 0; d < hd; d++)
                dd[i] += (double)g[i * c + d] * o[i * c + d];
            for (int64_t j = first_key(i, window); j <= i; j++) {
                double dp = 0;
                for (int64_t d = 0; d < hd; d++)
                    dp += (double)g[i * c + d] * v[j * c3 + d];
                dpm[i * t + j] = fabs(dp) + fabs(dd[i]);
                ds[i * t + j] = p[i * t + j] * (dp - dd[i]);
            }
        }
        for (int64_t d = 0; d < hd; d++) {
            for (int64_t i = 0; i < t; i++) { /* dq_i = scale sum_j dS_ij k_j */
                double x = 0, s1 = 0, s2 = 0, mag = 0;
                for (int64_t j = first_key(i, window); j <= i; j++) {
                    const double y = scale * ds[i * t + j] * k[j * c3 + d];
                    x += y, s1 += fabs(y), s2 += y * y;
                    mag += scale * p[i * t + j] * dpm[i * t + j] * fabs(k[j * c3 + d]);
                }
                gq[i * c3 + d] += x;
                if (tq != NULL) tq[i * c3 + d] = bound(s1, s2, mag);
            }
            /* dk_j = scale sum_i dS_ij q_i; dv_j = sum_i p_ij dout_i, over the queries that see
             * key j */
            for (int64_t j = 0; j < t; j++) {
                double xk = 0, k1 = 0, k2 = 0, kmag = 0, xv = 0, v1 = 0, v2 = 0;
                const int64_t end = window > 0 && j + window < t - 1 ? j + window : t - 1;
                for (int64_t i = j; i <= end; i++) {
                    const double y = scale * ds[i * t + j] * q[i * c3 + d];
                    xk += y, k1 += fabs(y), k2 += y * y;
                    kmag += scale * p[i * t + j] * dpm[i * t + j] * fabs(q[i * c3 + d]);
                    const double z = p[i * t + j] * g[i * c + d];
                    xv += z, v1 += fabs(z), v2 += z * z;
                }
                gk[j * c3 + d] += xk, gv[j * c3 + d] += xv;
                if (tk != NULL) {
                    tk[j * c3 + d] += bound(k1, k2, kmag);
                    tk[j * c3 + nkv * hd + d] += bound(v1, v2, v1);
                }
            }
        }
    }
    free(p), free(ds), free(dpm), free(dd);
}

/* ---- inputs -------------------------------------------------------------------------------- */

static uint64_t rng = 20240601;
static float uniform(void) { /* [-1, 1) */
    rng = rng * 6364136223846793005u + 1442695040888963407u;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
float *random_array(int64_t n, float scale, bool bf16) {
    float *x = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        x[i] = scale * uniform();
        if (bf16) x[i] = lwc_mma_float(lwc_mma_bf16(x[i]));
    }
    return x;
}
