/* cross_entropy.c: the LM head fused with softmax cross-entropy on the CPU, a chunk of rows at a
 * time: the chunk's logits by one GEMM into the scratch, each row's stable log-sum-exp and loss,
 * and in the backward the softmax's gradient formed in place and two GEMMs into dh and dw. When
 * all rows fit one chunk (small vocabularies) the forward leaves the probabilities in the scratch
 * and the backward reuses them; otherwise it recomputes each chunk's logits. A target outside
 * [0, v) is ignored (loss 0, no gradient). */
#include "device/cpu/cpu.h"

#include <cblas.h>
#include <math.h>

/* Logits held at once: 16 Mi floats (64 MiB), whole batches at byte vocabularies, a few hundred
 * rows at GPT-2's. */
#define CE_CHUNK_FLOATS (INT64_C(1) << 24)

static inline bool counted(int32_t target, int64_t v) { return target >= 0 && target < v; }

static int64_t chunk_rows(int64_t n, int64_t v) {
    int64_t rows = v > 0 ? CE_CHUNK_FLOATS / v : n;
    rows = rows < 1 ? 1 : rows;
    return rows < n ? rows : n;
}

int64_t lwi_cpu_cross_entropy_scratch_floats(int64_t n, int64_t v) { return chunk_rows(n, v) * v; }

/* logits[rows, v] = h[rows, c] w[v, c]^T */
static void logits(float *out, const float *h, const float *w, int64_t rows, int64_t c,
                   int64_t v) {
    if (c > 0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)v, (int)c, 1.0f, h,
                    (int)c, w, (int)c, 0.0f, out, (int)v);
    } else {
        for (int64_t i = 0; i < rows * v; i++)
            out[i] = 0.0f;
    }
}

lw_status lwi_cpu_cross_entropy_forward(lw_stream *stream, float *losses, float *lse,
                                        float *scratch, const float *h, const float *w,
                                        const int32_t *targets, int64_t n, int64_t c, int64_t v,
                                        double *loss) {
    (void)stream;
    if (n <= 0 || v <= 0) {
        *loss = 0.0;
        return LW_OK;
    }
    const int64_t chunk = chunk_rows(n, v);
    double total = 0.0;
    int64_t count = 0;
    for (int64_t r0 = 0; r0 < n; r0 += chunk) {
        const int64_t rows = n - r0 < chunk ? n - r0 : chunk;
        logits(scratch, h + r0 * c, w, rows, c, v);
        for (int64_t i = 0; i < rows; i++) {
            float *row = scratch + i * v;
            float m = row[0];
            for (int64_t j = 1; j < v; j++)
                m = row[j] > m ? row[j] : m;
            /* The loss is taken from the shifted logits: log(sum) - (logit - max) stays accurate
             * where the target's probability would round to a tiny float (or to 0, giving inf).
             * The sum is in double because v can be 50k. */
            double sum = 0.0;
            for (int64_t j = 0; j < v; j++)
                sum += expf(row[j] - m);
            const float row_lse = (float)((double)m + log(sum));
            lse[r0 + i] = row_lse;
            const int32_t tg = targets[r0 + i];
            if (counted(tg, v)) {
                const double row_loss = log(sum) - (double)(row[tg] - m);
                losses[r0 + i] = (float)row_loss;
                total += row_loss;
                count++;
            } else {
                losses[r0 + i] = 0.0f;
            }
            if (chunk == n) /* kept for the backward */
                for (int64_t j = 0; j < v; j++)
                    row[j] = expf(row[j] - row_lse);
        }
    }
    *loss = count > 0 ? total / (double)count : 0.0;
    return LW_OK;
}

lw_status lwi_cpu_cross_entropy_backward(lw_stream *stream, float *dh, float *dw, float *scratch,
                                         const float *h, const float *w, const int32_t *targets,
                                         const float *lse, int64_t n, int64_t c, int64_t v,
                                         float loss_scale) {
    (void)stream;
    if (n <= 0 || v <= 0 || c <= 0) return LW_OK;
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++)
        count += counted(targets[i], v);
    /* No counted row means the loss is the constant 0: nothing to add. */
    if (count == 0) return LW_OK;
    const float s = loss_scale / (float)count;
    const int64_t chunk = chunk_rows(n, v);
    for (int64_t r0 = 0; r0 < n; r0 += chunk) {
        const int64_t rows = n - r0 < chunk ? n - r0 : chunk;
        if (chunk < n) {
            logits(scratch, h + r0 * c, w, rows, c, v);
            for (int64_t i = 0; i < rows; i++) {
                float *row = scratch + i * v;
                for (int64_t j = 0; j < v; j++)
                    row[j] = expf(row[j] - lse[r0 + i]);
            }
        }
        for (int64_t i = 0; i < rows; i++) {
            float *row = scratch + i * v;
            const int32_t tg = targets[r0 + i];
            if (counted(tg, v)) {
                for (int64_t j = 0; j < v; j++)
                    row[j] *= s;
                row[tg] -= s;
            } else {
                for (int64_t j = 0; j < v; j++)
                    row[j] = 0.0f;
            }
        }
        if (dh != NULL)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)c, (int)v, 1.0f,
                        scratch, (int)v, w, (int)c, 1.0f, dh + r0 * c, (int)c);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)v, (int)c, (int)rows, 1.0f,
                    scratch, (int)v, h + r0 * c, (int)c, 1.0f, dw, (int)c);
    }
    return LW_OK;
}
