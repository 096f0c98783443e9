/* vec.c: reductions and element-wise updates over float vectors on the CPU (gradient norms, zero
 * counts, clipping, averaging, the Muon step). */
#include "device/cpu/cpu.h"

#include <math.h>

double lwi_cpu_sum_squares(const float *x, int64_t n) {
    /* four partial sums: independent dependency chains vectorise and lose less precision */
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += (double)x[i] * x[i];
        s1 += (double)x[i + 1] * x[i + 1];
        s2 += (double)x[i + 2] * x[i + 2];
        s3 += (double)x[i + 3] * x[i + 3];
    }
    for (; i < n; i++)
        s0 += (double)x[i] * x[i];
    return (s0 + s1) + (s2 + s3);
}

lw_status lwi_cpu_vec_norm_stats(lw_stream *stream, const float *x, int64_t n, double *acc) {
    (void)stream;
    int64_t zeros = 0;
    for (int64_t i = 0; i < n; i++)
        zeros += x[i] == 0.0f;
    acc[0] += lwi_cpu_sum_squares(x, n);
    acc[1] += (double)zeros;
    return LW_OK;
}

lw_status lwi_cpu_vec_all_finite(lw_stream *stream, const float *x, int64_t n, bool *finite) {
    (void)stream;
    *finite = true;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) {
            *finite = false;
            break;
        }
    return LW_OK;
}

lw_status lwi_cpu_vec_scale(lw_stream *stream, float *x, int64_t n, float alpha) {
    (void)stream;
    for (int64_t i = 0; i < n; i++)
        x[i] *= alpha;
    return LW_OK;
}

lw_status lwi_cpu_vec_add(lw_stream *stream, float *y, const float *a, const float *b, int64_t n) {
    (void)stream;
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i] + b[i];
    return LW_OK;
}

lw_status lwi_cpu_vec_axpy(lw_stream *stream, float *y, float alpha, const float *x, int64_t n) {
    (void)stream;
    for (int64_t i = 0; i < n; i++)
        y[i] += alpha * x[i];
    return LW_OK;
}
