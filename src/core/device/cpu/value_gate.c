/* value_gate.c: nanochat's value embeddings mixed into the V heads through a per-head gate,
 * forward and backward (lw_model_kernels.h). The gate's logit and sigmoid are taken in double
 * and g rounded once, so a device that does the same agrees within an ulp of g; the weight's
 * gradient is a column sum over the rows in row order, in double. No table lookup here: the
 * value embeddings arrive as rows (the embedding kernels give them). */
#include "device/cpu/cpu.h"
#include "device/cpu/pool.h"

#include <math.h>

/* rows per part of the pool at least */
#define GRAIN 64

typedef struct {
    float *qkv, *dve, *dx, *dw, *dz;
    const float *dqkv, *ve, *x, *w;
    int64_t n, row_stride, col0, x_stride, n_heads, hd, channels;
    double scale;
} gate_job;

/* the gate's logit of head h at row r, in double */
static double logit(const gate_job *j, int64_t r, int64_t h) {
    const float *xr = j->x + r * j->x_stride, *wh = j->w + h * j->channels;
    double z = 0;
    for (int64_t k = 0; k < j->channels; k++)
        z += (double)wh[k] * (double)xr[k];
    return z;
}

static void forward_rows(void *ctx, int64_t begin, int64_t end, int32_t part) {
    (void)part;
    const gate_job *j = ctx;
    const int64_t kv = j->n_heads * j->hd;
    for (int64_t r = begin; r < end; r++) {
        for (int64_t h = 0; h < j->n_heads; h++) {
            const float g = (float)(j->scale / (1.0 + exp(-logit(j, r, h))));
            float *v = j->qkv + r * j->row_stride + j->col0 + h * j->hd;
            const float *e = j->ve + r * kv + h * j->hd;
            for (int64_t d = 0; d < j->hd; d++)
                v[d] += g * e[d];
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
            const float *dv = j->dqkv + r * j->row_stride + j->col0 + h * j->hd;
            const float *e = j->ve + r * kv + h * j->hd;
            float *dvr = j->dve + r * kv + h * j->hd;
            double dot = 0;
            for (int64_t d = 0; d < j->hd; d++) {
                dot += (double)dv[d] * (double)e[d];
                dvr[d] += g * dv[d];
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
            acc += (double)j->dz[r * j->n_heads + h] * (double)j->x[r * j->x_stride + k];
        j->dw[col] += (float)acc;
    }
}

lw_status lwi_cpu_value_gate_forward(lw_stream *stream, float *qkv, const float *ve, const float *x,
                                     const float *w, int64_t n, int64_t row_stride, int64_t col0,
                                     int64_t x_stride, int64_t n_heads, int64_t hd,
                                     int64_t channels, float scale) {
    (void)stream;
    gate_job j = {.qkv = qkv,
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
    lwi_cpu_parallel(n, GRAIN, forward_rows, &j);
    return LW_OK;
}

lw_status lwi_cpu_value_gate_backward(lw_stream *stream, float *dve, float *dx, float *dw,
                                      float *dz, const float *dqkv, const float *ve, const float *x,
                                      const float *w, int64_t n, int64_t row_stride, int64_t col0,
                                      int64_t x_stride, int64_t n_heads, int64_t hd,
                                      int64_t channels, float scale) {
    (void)stream;
    gate_job j = {.dve = dve,
                  .dx = dx,
                  .dw = dw,
                  .dz = dz,
                  .dqkv = dqkv,
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
    lwi_cpu_parallel(n, GRAIN, backward_rows, &j);
    lwi_cpu_parallel(n_heads * channels, 1, weight_columns, &j);
    return LW_OK;
}
