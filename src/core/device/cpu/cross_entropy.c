/* cross_entropy.c: the LM head fused with softmax cross-entropy on the CPU: logits by one GEMM
 * into the caller's probs buffer, a stable softmax in place, and the backward into dh and dw.
 * A target outside [0, v) is ignored (loss 0, no gradient); >= v is a caller bug, never read. */
#include "device/cpu/cpu.h"

#include <cblas.h>
#include <math.h>

static inline bool counted(int32_t target, int64_t v) { return target >= 0 && target < v; }

lw_status lwi_cpu_cross_entropy_forward(lw_stream *stream, float *probs, float *losses,
                                        const float *h, const float *w, const int32_t *targets,
                                        int64_t n, int64_t c, int64_t v, double *loss) {
    (void)stream;
    if (n <= 0 || v <= 0) {
        *loss = 0.0;
        return LW_OK;
    }
    if (c > 0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)v, (int)c, 1.0f, h,
                    (int)c, w, (int)c, 0.0f, probs, (int)v);
    } else {
        for (int64_t i = 0; i < n * v; i++)
            probs[i] = 0.0f;
    }
    double total = 0.0;
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++) {
        float *row = probs + i * v;
        float m = row[0];
        for (int64_t j = 1; j < v; j++)
            m = row[j] > m ? row[j] : m;
        /* The loss is taken from the shifted logits before they become probabilities:
         * log(sum) - (logit - max) stays accurate where the target's probability would round to
         * a tiny float (or to 0, giving inf). The sum is in double because v can be 50k. */
        const int32_t tg = targets[i];
        const float shifted_target = counted(tg, v) ? row[tg] - m : 0.0f;
        double sum = 0.0;
        for (int64_t j = 0; j < v; j++) {
            row[j] = expf(row[j] - m);
            sum += row[j];
        }
        const float inv = (float)(1.0 / sum);
        for (int64_t j = 0; j < v; j++)
            row[j] *= inv;
        if (counted(tg, v)) {
            const double row_loss = log(sum) - (double)shifted_target;
            losses[i] = (float)row_loss;
            total += row_loss;
            count++;
        } else {
            losses[i] = 0.0f;
        }
    }
    *loss = count > 0 ? total / (double)count : 0.0;
    return LW_OK;
}

lw_status lwi_cpu_cross_entropy_backward(lw_stream *stream, float *dh, float *dw, float *probs,
                                         const float *h, const float *w, const int32_t *targets,
                                         int64_t n, int64_t c, int64_t v, float loss_scale) {
    (void)stream;
    if (n <= 0 || v <= 0 || c <= 0) return LW_OK;
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++)
        count += counted(targets[i], v);
    const float s = count > 0 ? loss_scale / (float)count : 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float *row = probs + i * v;
        const int32_t tg = targets[i];
        if (counted(tg, v)) {
            for (int64_t j = 0; j < v; j++)
                row[j] *= s;
            row[tg] -= s;
        } else {
            for (int64_t j = 0; j < v; j++)
                row[j] = 0.0f;
        }
    }
    /* No counted row means the loss is the constant 0: probs is now all zeros, nothing to add. */
    if (count == 0) return LW_OK;
    if (dh != NULL)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)c, (int)v, 1.0f, probs,
                    (int)v, w, (int)c, 1.0f, dh, (int)c);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)v, (int)c, (int)n, 1.0f, probs,
                (int)v, h, (int)c, 1.0f, dw, (int)c);
    return LW_OK;
}
