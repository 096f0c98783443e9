/* attention.c: causal multi-head self-attention on the CPU, forward and backward. Each
 * (batch, head) is GEMMs on strided views of qkv (no copies) plus a row softmax over the causal
 * lower triangle; the GEMMs run over the full t x t square of the scratch and the mask is applied
 * after. Only the rows' log-sum-exp is kept for the backward, which recomputes the probabilities
 * from it (the contract every device shares: no t x t matrix per head lives between passes). */
#include "device/cpu/cpu.h"

#include <cblas.h>
#include <math.h>

/* One head at a time: the probabilities, and in the backward their gradient beside them. */
int64_t lwi_cpu_attention_scratch_floats(int64_t b, int64_t t, int64_t nh) {
    (void)b, (void)nh;
    return 2 * t * t;
}

/* s[t, t] = scale q k^T for one head (q, k rows strided by 3c). */
static void scores(float *s, const float *q, const float *k, int64_t t, int64_t hd, int64_t c3,
                   float scale) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)t, (int)t, (int)hd, scale, q,
                (int)c3, k, (int)c3, 0.0f, s, (int)t);
}

lw_status lwi_cpu_attention_forward(lw_stream *stream, float *out, float *lse, float *scratch,
                                    const float *qkv, int64_t b, int64_t t, int64_t c,
                                    int64_t nh) {
    (void)stream;
    if (b <= 0 || t <= 0 || c <= 0 || nh <= 0) return LW_OK;
    const int64_t hd = c / nh, c3 = 3 * c;
    const float scale = 1.0f / sqrtf((float)hd);
    float *a = scratch; /* [t, t] */
    for (int64_t bi = 0; bi < b; bi++) {
        for (int64_t h = 0; h < nh; h++) {
            const float *q = qkv + bi * t * c3 + h * hd; /* [t, hd], row stride 3c */
            const float *k = q + c, *v = q + 2 * c;
            float *o = out + bi * t * c + h * hd; /* [t, hd], row stride c */
            float *row_lse = lse + (bi * nh + h) * t;
            scores(a, q, k, t, hd, c3, scale);
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
                row_lse[i] = (float)((double)m + log(sum));
                /* The zeros above the diagonal are what makes the full-square GEMM below causal. */
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
                                     const float *dout, const float *qkv, const float *out,
                                     const float *lse, int64_t b, int64_t t, int64_t c,
                                     int64_t nh) {
    (void)stream;
    if (b <= 0 || t <= 0 || c <= 0 || nh <= 0) return LW_OK;
    const int64_t hd = c / nh, c3 = 3 * c;
    const float scale = 1.0f / sqrtf((float)hd);
    float *p = scratch, *ds = scratch + t * t; /* [t, t] each: probabilities; datt, then dS */
    for (int64_t bi = 0; bi < b; bi++) {
        for (int64_t h = 0; h < nh; h++) {
            const int64_t off = bi * t * c3 + h * hd;
            const float *q = qkv + off, *k = q + c, *v = q + 2 * c;
            float *dq = dqkv + off, *dk = dq + c, *dv = dq + 2 * c;
            const float *row_lse = lse + (bi * nh + h) * t;
            const float *dout_h = dout + bi * t * c + h * hd;
            const float *out_h = out + bi * t * c + h * hd;
            scores(p, q, k, t, hd, c3, scale);
            for (int64_t i = 0; i < t; i++) {
                float *row = p + i * t;
                for (int64_t j = 0; j <= i; j++)
                    row[j] = expf(row[j] - row_lse[i]);
                for (int64_t j = i + 1; j < t; j++)
                    row[j] = 0.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)t, (int)t, (int)hd, 1.0f,
                        dout_h, (int)c, v, (int)c3, 0.0f, ds, (int)t);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)t, (int)hd, (int)t, 1.0f, p,
                        (int)t, dout_h, (int)c, 1.0f, dv, (int)c3);
            for (int64_t i = 0; i < t; i++) {
                float *drow = ds + i * t;
                const float *prow = p + i * t;
                /* sum_j p_ij datt_ij = dout_i . out_i: the softmax's backward from the saved
                 * output, as flash attention does (a device needs no row of p for it). */
                double dot = 0.0;
                for (int64_t e = 0; e < hd; e++)
                    dot += (double)dout_h[i * c + e] * out_h[i * c + e];
                const float s = (float)dot;
                for (int64_t j = 0; j <= i; j++)
                    drow[j] = prow[j] * (drow[j] - s);
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
