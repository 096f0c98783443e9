/* layernorm.c: layer normalisation over the last dimension (biased variance, as in torch),
 * forward saving mean and 1/std per row, and accumulating backward; and the same fused with the
 * residual add before it (forward: sum = a + b, then the norm of sum; backward: dx += the
 * stream's gradient, then the norm's), row by row, as the separate kernels compute them. Row
 * statistics and the two backward row sums are taken in double; the per-element work stays in
 * float. */
#include "device/cpu/cpu.h"
#include "device/cpu/fast_math.h"

#include <math.h>
#include <stdlib.h>

/* sum_i (x[i] - m)^2 in double: the two-pass variance, which unlike E[x^2] - E[x]^2 does not
 * cancel when the mean is large against the spread. */
LWI_ROW_HELPER double row_sq_dev(const float *x, int64_t c, double m) {
    double acc[LWI_LANES] = {0};
    int64_t i = 0;
    for (; i + LWI_LANES <= c; i += LWI_LANES)
        for (int k = 0; k < LWI_LANES; k++) {
            double d = (double)x[i + k] - m;
            acc[k] += d * d;
        }
    double s = 0;
    for (; i < c; i++) {
        double d = (double)x[i] - m;
        s += d * d;
    }
    for (int k = 0; k < LWI_LANES; k++)
        s += acc[k];
    return s;
}

/* One row of the forward: the row's mean and 1/std saved, y normalised with them. */
LWI_ROW_HELPER void forward_row(float *yr, float *mean, float *rstd, const float *xr,
                                const float *g, const float *beta, int64_t c, float eps) {
    double m = lwi_row_sum(xr, c) / (double)c;
    double var = row_sq_dev(xr, c, m) / (double)c;
    /* Normalise with the float values that are saved, so that the backward pass recomputes
     * exactly the xhat this forward pass used. */
    float mf = (float)m, sf = (float)(1.0 / sqrt(var + (double)eps));
    *mean = mf;
    *rstd = sf;
    if (beta != NULL)
        for (int64_t i = 0; i < c; i++)
            yr[i] = (xr[i] - mf) * sf * g[i] + beta[i];
    else
        for (int64_t i = 0; i < c; i++)
            yr[i] = (xr[i] - mf) * sf * g[i];
}

/* The forward over n rows of a, or (b given) of sum = a + b, written row by row and normalised
 * while in cache; y in fp32, or computed in fp32 a row at a time and rounded to bf16. */
LWI_SIMD_CLONES
static lw_status forward_rows(float *sum, void *y, lw_dtype y_dtype, float *mean, float *rstd,
                              const float *a, const float *b, const float *g, const float *beta,
                              int64_t n, int64_t c, float eps) {
    if (n <= 0 || c <= 0) return LW_OK;
    float *row = NULL;
    if (y_dtype == LW_DTYPE_BF16 && (row = malloc(sizeof(float) * (size_t)c)) == NULL)
        return lwi_fail(LW_ERR_NOMEM, "cpu: out of memory for a layer norm row of %lld",
                        (long long)c);
    for (int64_t r = 0; r < n; r++) {
        const float *xr = a + r * c;
        if (b != NULL) {
            float *sr = sum + r * c;
            const float *br = b + r * c;
            for (int64_t i = 0; i < c; i++)
                sr[i] = xr[i] + br[i];
            xr = sr;
        }
        float *yr = row != NULL ? row : (float *)y + r * c;
        forward_row(yr, mean + r, rstd + r, xr, g, beta, c, eps);
        if (row != NULL) lwi_cpu_round_bf16((uint16_t *)y + r * c, row, c);
    }
    free(row);
    return LW_OK;
}

lw_status lwi_cpu_layernorm_forward(lw_stream *stream, void *y, lw_dtype y_dtype, float *mean,
                                    float *rstd, const float *x, const float *g, const float *beta,
                                    int64_t n, int64_t c, float eps) {
    (void)stream;
    return forward_rows(NULL, y, y_dtype, mean, rstd, x, NULL, g, beta, n, c, eps);
}

lw_status lwi_cpu_add_layernorm_forward(lw_stream *stream, float *sum, void *y, lw_dtype y_dtype,
                                        float *mean, float *rstd, const float *a, const float *b,
                                        const float *g, const float *beta, int64_t n, int64_t c,
                                        float eps) {
    (void)stream;
    return forward_rows(sum, y, y_dtype, mean, rstd, a, b, g, beta, n, c, eps);
}

/* One row of the backward: dx += dres (when given), then += the input gradient; dg and dbeta
 * (optional) accumulate the row. */
LWI_ROW_HELPER void backward_row(float *dxr, float *dg, float *dbeta, const float *dres,
                                 const float *dyr, const float *xr, const float *g, float mf,
                                 float sf, int64_t c) {
    /* mean over the row of dnorm = dy * g and of dnorm * xhat: the two projections that
     * the normalisation removes from the gradient */
    double a1[LWI_LANES] = {0}, a2[LWI_LANES] = {0}, s1 = 0, s2 = 0;
    int64_t i = 0;
    for (; i + LWI_LANES <= c; i += LWI_LANES)
        for (int k = 0; k < LWI_LANES; k++) {
            float dn = dyr[i + k] * g[i + k], xh = (xr[i + k] - mf) * sf;
            a1[k] += (double)dn;
            a2[k] += (double)(dn * xh);
        }
    for (; i < c; i++) {
        float dn = dyr[i] * g[i], xh = (xr[i] - mf) * sf;
        s1 += (double)dn;
        s2 += (double)(dn * xh);
    }
    for (int k = 0; k < LWI_LANES; k++)
        s1 += a1[k], s2 += a2[k];
    float m1 = (float)(s1 / (double)c), m2 = (float)(s2 / (double)c);
    if (dres != NULL)
        for (i = 0; i < c; i++)
            dxr[i] += dres[i];
    for (i = 0; i < c; i++) {
        float xh = (xr[i] - mf) * sf;
        dxr[i] += sf * (dyr[i] * g[i] - m1 - xh * m2);
        dg[i] += dyr[i] * xh;
    }
    if (dbeta != NULL)
        for (i = 0; i < c; i++)
            dbeta[i] += dyr[i];
}

LWI_SIMD_CLONES
lw_status lwi_cpu_layernorm_backward(lw_stream *stream, float *dx, float *dg, float *dbeta,
                                     const float *dy, const float *x, const float *g,
                                     const float *mean, const float *rstd, int64_t n, int64_t c) {
    (void)stream;
    if (n <= 0 || c <= 0) return LW_OK;
    for (int64_t r = 0; r < n; r++)
        backward_row(dx + r * c, dg, dbeta, NULL, dy + r * c, x + r * c, g, mean[r], rstd[r], c);
    return LW_OK;
}

LWI_SIMD_CLONES
lw_status lwi_cpu_add_layernorm_backward(lw_stream *stream, float *dx, float *dg, float *dbeta,
                                         const float *dres, const float *dy, const float *x,
                                         const float *g, const float *mean, const float *rstd,
                                         int64_t n, int64_t c) {
    (void)stream;
    if (n <= 0 || c <= 0) return LW_OK;
    for (int64_t r = 0; r < n; r++)
        backward_row(dx + r * c, dg, dbeta, dres + r * c, dy + r * c, x + r * c, g, mean[r],
                     rstd[r], c);
    return LW_OK;
}
