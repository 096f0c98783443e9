/* value_gate.c: nanochat's value embeddings mixed into the V heads through a per-head gate,
 * forward and backward (lw_model_kernels.h). The gate's logit and sigmoid are taken in double
 * and g rounded once, so a device that does the same agrees within an ulp of g; the weight's
 * gradient is a column sum over the rows in row order, in double. bf16 qkv and x are read
 * widened (and a bf16 V value written rounded once), so they give their widening's results. No
 * table lookup here: the value embeddings arrive as rows (the embedding kernels give them). */
#include "device/cpu/cpu.h"
#include "device/cpu/pool.h"

#include <math.h>

/* rows per part of the pool at least */
#define GRAIN 64

typedef struct {
    void *qkv; /* of qkv16 ? bf16 : fp32, as dqkv */
    float *dve, *dx, *dw, *dz;
    const void *dqkv, *x; /* x of x16 ? bf16 : fp32 */
    const float *ve, *w;
    bool qkv16, x16;
    int64_t n, row_stride, col0, x_stride, n_heads, hd, channels;
    double scale;
} gate_job;

/* the gate's logit of head h at row r, in double */
static double logit(const gate_job *j, int64_t r, int64_t h) {
    const float *wh = j->w + h * j->channels;
    const int64_t at = r * j->x_stride;
    double z = 0;
    for (int64_t k = 0; k < j->channels; k++)
        z += (double)wh[k] * (double)lwi_cpu_load(j->x, j->x16, at + k);
    return z;
}

static void forward_rows(void *ctx, int64_t begin, int64_t end, int32_t part) {
    (void)part;
    const gate_job *j = ctx;
    const int64_t kv = j->n_heads * j->hd;
    for (int64_t r = begin; r < end; r++) {
        for (int64_t h = 0; h < j->n_heads; h++) {
            const float g = (float)(j->scale / (1.0 + exp(-logit(j, r, h))));
            const int64_t at = r * j->row_stride + j->col0 + h * j->hd;
            const float *e = j->ve + r * kv + h * j->hd;
            for (int64_t d = 0; d < j->hd; d++) {
                const float v = lwi_cpu_load(j->qkv, j->qkv16, at + d) + g * e[d];
                if (j->qkv16)
                    lwi_cpu_round_bf16((uint16_t *)j->qkv + at + d, &v, 1);
                else
                    ((float *)j->qkv)[at + d] = v;
            }
        }
    }
}

/* Per row: dz, dve and dx. The sigmoid's slope s (1 - s) from s and 1 - s = 1 / (1 + exp(z)),
 * each accurate on its own (1 - s formed by subtraction would cancel as s nears 1). */
static void backward_rows(void *ctx, int64_t begin, int64_t end, int32_t part) {
    (void)part;
    const gate_job *j = ctx;
    const int64_t kv = j->n_heads * j->hd;
    for (int64_t r = begin; r < end; r++) {
        float *dzr = j->dz + r * j->n_heads;
        for (int64_t h = 0; h < j->n_heads; h++) {
            const double z = logit(j, r, h);
            const double s = 1.0 / (1.0 + exp(-z)), sc = 1.0 / (1.0 + exp(z));
            const float g = (float)(j->scale * s);
            const int64_t at = r * j->row_stride + j->col0 + h * j->hd;
            const float *e = j->ve + r * kv + h * j->hd;
            float *dvr = j->dve + r * kv + h * j->hd;
            double dot = 0;
            for (int64_t d = 0; d < j->hd; d++) {
                const float dv = lwi_cpu_load(j->dqkv, j->qkv16, at + d);
                dot += (double)dv * (double)e[d];
                dvr[d] += g * dv;
            }
            dzr[h] = (float)(dot * j->scale * s * sc);
        }
        float *dxr = j->dx + r * j->x_stride;
        for (int64_t k = 0; k < j->channels; k++) {
            double acc = 0;
            for (int64_t h = 0; h < j->n_heads; h++)
                acc += (double)dzr[h] * (double)j->w[h * j->channels + k];
            dxr[k] += (float)acc;
        }
    }
}

/* dw: column (h, k) over every row in row order; the columns split over the pool */
static void weight_columns(void *ctx, int64_t begin, int64_t end, int32_t part) {
    (void)part;
    const gate_job *j = ctx;
    for (int64_t col = begin; col < end; col++) {
        const int64_t h = col / j->channels, k = col % j->channels;
        double acc = 0;
        for (int64_t r = 0; r < j->n; r++)
            acc += (double)j->dz[r * j->n_heads + h] *
                   (double)lwi_cpu_load(j->x, j->x16, r * j->x_stride + k);
        j->dw[col] += (float)acc;
    }
}

/* the fields both directions read: the layout, the value embeddings, x and the gate's weight */
static gate_job job_of(lw_dtype qkv_dtype, const float *ve, const void *x, lw_dtype x_dtype,
                       const float *w, int64_t n, int64_t row_stride, int64_t col0,
                       int64_t x_stride, int64_t n_heads, int64_t hd, int64_t channels,
                       float scale) {
    return (gate_job){.qkv16 = qkv_dtype == LW_DTYPE_BF16,
                      .x16 = x_dtype == LW_DTYPE_BF16,
                      .ve = ve,
                      .x = x,
                      .w = w,
                      .n = n,
                      .row_stride = row_stride,
                      .col0 = col0,
                      .x_stride = x_stride,
                      .n_heads = n_heads,
                      .hd = hd,
                      .channels = channels,
                      .scale = scale};
}

lw_status lwi_cpu_value_gate_forward(lw_stream *stream, void *qkv, lw_dtype qkv_dtype,
                                     const float *ve, const void *x, lw_dtype x_dtype,
                                     const float *w, int64_t n, int64_t row_stride, int64_t col0,
                                     int64_t x_stride, int64_t n_heads, int64_t hd,
                                     int64_t channels, float scale) {
    (void)stream;
    gate_job j = job_of(qkv_dtype, ve, x, x_dtype, w, n, row_stride, col0, x_stride, n_heads, hd,
                        channels, scale);
    j.qkv = qkv;
    lwi_cpu_parallel(n, GRAIN, forward_rows, &j);
    return LW_OK;
}

lw_status lwi_cpu_value_gate_backward(lw_stream *stream, float *dve, float *dx, float *dw,
                                      float *dz, const void *dqkv, lw_dtype qkv_dtype,
                                      const float *ve, const void *x, lw_dtype x_dtype,
                                      const float *w, int64_t n, int64_t row_stride, int64_t col0,
                                      int64_t x_stride, int64_t n_heads, int64_t hd,
                                      int64_t channels, float scale) {
    (void)stream;
    gate_job j = job_of(qkv_dtype, ve, x, x_dtype, w, n, row_stride, col0, x_stride, n_heads, hd,
                        channels, scale);
    j.dve = dve;
    j.dx = dx;
    j.dw = dw;
    j.dz = dz;
    j.dqkv = dqkv;
    lwi_cpu_parallel(n, GRAIN, backward_rows, &j);
    lwi_cpu_parallel(n_heads * channels, 1, weight_columns, &j);
    return LW_OK;
}
