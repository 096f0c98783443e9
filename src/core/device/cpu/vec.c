/* vec.c: reductions and scaling over float vectors (gradient norms, zero counts, clipping). */
#include "base/base.h"

#include <math.h>

double lw_vec_sum_squares(const float *x, int64_t n) {
    /* four partial sums: independent dependency chains vectorise and lose less precision */
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += (double)x[i] * x[i];
        s1 += (double)x[i + 1] * x[i + 1];
        s2 += (double)x[i + 2] * x[i + 2];
        s3 += (double)x[i + 3] * x[i + 3];
    }
    for (; i < n; i++) s0 += (double)x[i] * x[i];
    return (s0 + s1) + (s2 + s3);
}

int64_t lw_vec_count_zeros(const float *x, int64_t n) {
    int64_t zeros = 0;
    for (int64_t i = 0; i < n; i++) zeros += x[i] == 0.0f;
    return zeros;
}

bool lw_vec_all_finite(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return false;
    return true;
}

void lw_vec_scale(float *x, int64_t n, float alpha) {
    for (int64_t i = 0; i < n; i++) x[i] *= alpha;
}

void lw_vec_add(float *y, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}
