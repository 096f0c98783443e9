/* attention.c: causal multi-head self-attention on the CPU, forward and backward. Each
 * (batch, head) is three GEMMs on strided views of qkv (no copies) plus a row softmax over the
 * causal lower triangle; the GEMMs run over the full t x t square and the mask is applied after. */
#include "device/cpu/cpu.h"

#include <cblas.h>
#include <math.h>

lw_status lwi_cpu_attention_forward(lw_stream *stream, float *out, float *att, const float *qkv,
                                    int64_t b, int64_t t, int64_t c, int64_t nh) {
    (void)stream;
    if (b <= 0 || t <= 0 || c <= 0 || nh <= 0) return LW_OK;
    const int64_t hd = c / nh, c3 = 3 * c;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int64_t bi = 0; bi < b; bi++) {
        for (int64_t h = 0; h < nh; h++) {
            const float *q = qkv + bi * t * c3 + h * hd; /* [t, hd], row stride 3c */
            const float *k = q + c, *v = q + 2 * c;
            float *a = att + (bi * nh + h) * t * t; /* [t, t] */
            float *o = out + bi * t * c + h * hd;   /* [t, hd], row stride c */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)t, (int)t, (int)hd, scale, q,
                        (int)c3, k, (int)c3, 0.0f, a, (int)t);
            for (int64_t i = 0; i < t; i++) {
                float *row = a + i * t;
                /* Subtracting the row max keeps expf in range; the diagonal is never masked, so
                 * every row has at least one term and the sum is >= 1. */
                float m = row[0];
                for (int64_t j = 1; j <= i; j++)
                    m = row[j] > m ? row[j] : m;
                double sum = 0.0;
                for (int64_t j = 0; j <= i; j++) {
                    row[j] = expf(row[j] - m);
                    sum += row[j];
                }
                const float inv = (float)(1.0 / sum);
                for (int64_t j = 0; j <= i; j++)
                    row[j] *= inv;
                /* The zeros above the diagonal are what makes the full-square GEMMs below (and in
                 * the backward) causal. */
                for (int64_t j = i + 1; j < t; j++)
                    row[j] = 0.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)t, (int)hd, (int)t, 1.0f, a,
                        (int)t, v, (int)c3, 0.0f, o, (int)c);
        }
    }
    return LW_OK;
}

lw_status lwi_cpu_attention_backward(lw_stream *stream, float *dqkv, float *scratch,
                                     const float *dout, const float *qkv, const float *att,
                                     int64_t b, int64_t t, int64_t c, int64_t nh) {
    (void)stream;
    if (b <= 0 || t <= 0 || c <= 0 || nh <= 0) return LW_OK;
    const int64_t hd = c / nh, c3 = 3 * c;
    const float scale = 1.0f / sqrtf((float)hd);
    float *ds = scratch; /* [t, t]: datt, then dS in place */
    for (int64_t bi = 0; bi < b; bi++) {
        for (int64_t h = 0; h < nh; h++) {
            const int64_t off = bi * t * c3 + h * hd;
            const float *q = qkv + off, *k = q + c, *v = q + 2 * c;
            float *dq = dqkv + off, *dk = dq + c, *dv = dq + 2 * c;
            const float *a = att + (bi * nh + h) * t * t;
            const float *dout_h = dout + bi * t * c + h * hd;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)t, (int)t, (int)hd, 1.0f,
                        dout_h, (int)c, v, (int)c3, 0.0f, ds, (int)t);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)t, (int)hd, (int)t, 1.0f, a,
                        (int)t, dout_h, (int)c, 1.0f, dv, (int)c3);
            for (int64_t i = 0; i < t; i++) {
                float *drow = ds + i * t;
                const float *arow = a + i * t;
                double dot = 0.0;
                for (int64_t j = 0; j <= i; j++)
                    dot += (double)drow[j] * arow[j];
                const float s = (float)dot;
                for (int64_t j = 0; j <= i; j++)
                    drow[j] = arow[j] * (drow[j] - s);
                /* datt is dense above the diagonal; zero it so the masked scores get no
                 * gradient through the full-square GEMMs below. */
                for (int64_t j = i + 1; j < t; j++)
                    drow[j] = 0.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)t, (int)hd, (int)t, scale,
                        ds, (int)t, k, (int)c3, 1.0f, dq, (int)c3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)t, (int)hd, (int)t, scale, ds,
                        (int)t, q, (int)c3, 1.0f, dk, (int)c3);
        }
    }
    return LW_OK;
}
