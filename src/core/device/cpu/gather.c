/* gather.c: rows moved by an index list, forward and accumulating backward: a gather (a mixture
 * of experts' dispatch, tokens into expert order) and a weighted scatter-add (its combine, the
 * experts' outputs back into token order). Indices are trusted to lie in the indexed array: the
 * kernels do not know its rows, so callers build them in range. A row indexed several times
 * sums in the order of the list, so results are deterministic. */
#include "device/cpu/cpu.h"

#include <string.h>

lw_status lwi_cpu_gather_forward(lw_stream *stream, float *out, const float *x, const int32_t *rows,
                                 int64_t m, int64_t c) {
    (void)stream;
    if (c <= 0) return LW_OK;
    for (int64_t i = 0; i < m; i++)
        memcpy(out + i * c, x + (int64_t)rows[i] * c, sizeof(float) * (size_t)c);
    return LW_OK;
}

lw_status lwi_cpu_gather_backward(lw_stream *stream, float *dx, const float *dout,
                                  const int32_t *rows, int64_t m, int64_t c) {
    (void)stream;
    for (int64_t i = 0; i < m; i++) {
        float *d = dx + (int64_t)rows[i] * c;
        const float *g = dout + i * c;
        for (int64_t j = 0; j < c; j++)
            d[j] += g[j];
    }
    return LW_OK;
}

lw_status lwi_cpu_combine_forward(lw_stream *stream, float *y, const float *src, const float *w,
                                  const int32_t *rows, int64_t m, int64_t c) {
    (void)stream;
    for (int64_t i = 0; i < m; i++) {
        float *d = y + (int64_t)rows[i] * c;
        const float *s = src + i * c;
        const float a = w[i];
        for (int64_t j = 0; j < c; j++)
            d[j] += a * s[j];
    }
    return LW_OK;
}

lw_status lwi_cpu_combine_backward(lw_stream *stream, float *dsrc, float *dw, const float *dy,
                                   const float *src, const float *w, const int32_t *rows, int64_t m,
                                   int64_t c) {
    (void)stream;
    for (int64_t i = 0; i < m; i++) {
        const float *g = dy + (int64_t)rows[i] * c;
        if (dsrc != NULL) {
            float *d = dsrc + i * c;
            const float a = w[i];
            for (int64_t j = 0; j < c; j++)
                d[j] += a * g[j];
        }
        if (dw != NULL) {
            /* a double sum: the weight's gradient is a dot product over all c channels */
            const float *s = src + i * c;
            double dot = 0;
            for (int64_t j = 0; j < c; j++)
                dot += (double)s[j] * g[j];
            dw[i] += (float)dot;
        }
    }
    return LW_OK;
}
