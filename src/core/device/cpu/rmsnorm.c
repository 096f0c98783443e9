/* rmsnorm.c: RMSNorm over the last dimension (LLaMA's, and nanochat's without a gain), forward
 * saving 1/rms per row, and accumulating backward. The mean of squares and the backward's row
 * sum are taken in double; the per-element work stays in float, as layernorm.c does it. */
#include "device/cpu/cpu.h"
#include "device/cpu/fast_math.h"

#include <math.h>
#include <stdlib.h>

/* sum_i x[i]^2 in double, in LWI_LANES partial sums (vectorises; the same order at every width) */
LWI_ROW_HELPER double row_sum_squares(const float *x, int64_t c) {
    double acc[LWI_LANES] = {0};
    int64_t i = 0;
    for (; i + LWI_LANES <= c; i += LWI_LANES)
        for (int k = 0; k < LWI_LANES; k++)
            acc[k] += (double)x[i + k] * (double)x[i + k];
    double s = 0;
    for (; i < c; i++)
        s += (double)x[i] * (double)x[i];
    for (int k = 0; k < LWI_LANES; k++)
        s += acc[k];
    return s;
}

/* One row of the forward: 1/rms saved, y = x rstd (g) with the float that is saved, so that the
 * backward recomputes exactly the xhat this pass used. */
LWI_ROW_HELPER void forward_row(float *yr, float *rstd, const float *xr, const float *g, int64_t c,
                                float eps) {
    const double ms = row_sum_squares(xr, c) / (double)c;
    const float sf = (float)(1.0 / sqrt(ms + (double)eps));
    *rstd = sf;
    if (g != NULL)
        for (int64_t i = 0; i < c; i++)
            yr[i] = xr[i] * sf * g[i];
    else
        for (int64_t i = 0; i < c; i++)
            yr[i] = xr[i] * sf;
}

LWI_SIMD_CLONES
lw_status lwi_cpu_rmsnorm_forward(lw_stream *stream, void *y, lw_dtype y_dtype, float *rstd,
                                  const float *x, const float *g, int64_t n, int64_t c, float eps) {
    (void)stream;
    if (n <= 0 || c <= 0) return LW_OK;
    float *row = NULL; /* a bf16 y: each row computed in fp32 here, then rounded */
    if (y_dtype == LW_DTYPE_BF16 && (row = malloc(sizeof(float) * (size_t)c)) == NULL)
        return lwi_fail(LW_ERR_NOMEM, "cpu: out of memory for an rms norm row of %lld",
                        (long long)c);
    for (int64_t r = 0; r < n; r++) {
        float *yr = row != NULL ? row : (float *)y + r * c;
        forward_row(yr, rstd + r, x + r * c, g, c, eps);
        if (row != NULL) lwi_cpu_round_bf16((uint16_t *)y + r * c, row, c);
    }
    free(row);
    return LW_OK;
}

/* One row of the backward: dx += rstd (dn - xhat m), dn = dy g (dy without a gain), m the row's
 * mean of dn xhat (the projection the normalisation removes); dg (optional) += dy xhat. */
LWI_ROW_HELPER void backward_row(float *dxr, float *dg, const float *dyr, const float *xr,
                                 const float *g, float sf, int64_t c) {
    double acc[LWI_LANES] = {0}, s = 0;
    int64_t i = 0;
    for (; i + LWI_LANES <= c; i += LWI_LANES)
        for (int k = 0; k < LWI_LANES; k++) {
            const float dn = g != NULL ? dyr[i + k] * g[i + k] : dyr[i + k];
            acc[k] += (double)(dn * (xr[i + k] * sf));
        }
    for (; i < c; i++) {
        const float dn = g != NULL ? dyr[i] * g[i] : dyr[i];
        s += (double)(dn * (xr[i] * sf));
    }
    for (int k = 0; k < LWI_LANES; k++)
        s += acc[k];
    const float m = (float)(s / (double)c);
    for (i = 0; i < c; i++) {
        const float dn = g != NULL ? dyr[i] * g[i] : dyr[i];
        dxr[i] += sf * (dn - (xr[i] * sf) * m);
    }
    if (dg != NULL)
        for (i = 0; i < c; i++)
            dg[i] += dyr[i] * (xr[i] * sf);
}

LWI_SIMD_CLONES
lw_status lwi_cpu_rmsnorm_backward(lw_stream *stream, float *dx, float *dg, const float *dy,
                                   const float *x, const float *g, const float *rstd, int64_t n,
                                   int64_t c) {
    (void)stream;
    if (n <= 0 || c <= 0) return LW_OK;
    for (int64_t r = 0; r < n; r++)
        backward_row(dx + r * c, dg, dy + r * c, x + r * c, g, rstd[r], c);
    return LW_OK;
}
