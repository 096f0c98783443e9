/* moe.c: a mixture of experts' router (softmax, top-k, renormalised weights) and its
 * load-balancing loss, forward and accumulating backward. Moving rows to and from the experts
 * is in gather.c; the permutation and the experts themselves are the caller's. Every loop runs
 * in a fixed order, so results do not depend on threads or timing. */
#include "device/cpu/cpu.h"

#include <math.h>

lw_status lwi_cpu_moe_router_forward(lw_stream *stream, int32_t *experts, float *weights,
                                     float *probs, const float *logits, int64_t n, int64_t e,
                                     int64_t k) {
    (void)stream;
    for (int64_t i = 0; i < n; i++) {
        const float *l = logits + i * e;
        float *p = probs + i * e;
        int32_t *top = experts + i * k;
        float *w = weights + i * k;
        float max = l[0];
        for (int64_t j = 1; j < e; j++)
            if (l[j] > max) max = l[j];
        double sum = 0;
        for (int64_t j = 0; j < e; j++) {
            p[j] = expf(l[j] - max);
            sum += p[j];
        }
        const float inv = (float)(1.0 / sum);
        for (int64_t j = 0; j < e; j++)
            p[j] *= inv;
        /* Ranked by logit, which the softmax orders alike but without its rounding, so every
         * device ranks the same; a strict > keeps the lower index on ties, and the first
         * candidate is taken whatever it holds, so a NaN row still gets k distinct experts. */
        float z = 0;
        for (int64_t s = 0; s < k; s++) {
            int64_t best = -1;
            for (int64_t j = 0; j < e; j++) {
                bool taken = false;
                for (int64_t t = 0; t < s; t++)
                    taken |= top[t] == j;
                if (!taken && (best < 0 || l[j] > l[best])) best = j;
            }
            top[s] = (int32_t)best;
            z += p[best];
        }
        for (int64_t s = 0; s < k; s++)
            w[s] = p[top[s]] / z;
    }
    return LW_OK;
}

lw_status lwi_cpu_moe_router_backward(lw_stream *stream, float *dlogits, const float *dweights,
                                      const float *dprobs, const float *probs,
                                      const int32_t *experts, int64_t n, int64_t e, int64_t k) {
    (void)stream;
    for (int64_t i = 0; i < n; i++) {
        const float *p = probs + i * e;
        const int32_t *top = experts + i * k;
        const float *dw = dweights + i * k;
        const float *dp = dprobs != NULL ? dprobs + i * e : NULL;
        float *dl = dlogits + i * e;
        /* w_s = p[top_s] / z: dL/dp[top_s] = (dw_s - sum_t dw_t w_t) / z */
        float z = 0;
        for (int64_t s = 0; s < k; s++)
            z += p[top[s]];
        float dot_w = 0;
        for (int64_t s = 0; s < k; s++)
            dot_w += dw[s] * (p[top[s]] / z);
        /* softmax: dlogits_j = p_j (dp_j - sum_t p_t dp_t); dp is dprobs plus the top-k terms,
         * never formed as an array, so the kernel needs no scratch */
        float dot = 0;
        if (dp != NULL)
            for (int64_t j = 0; j < e; j++)
                dot += p[j] * dp[j];
        for (int64_t s = 0; s < k; s++)
            dot += p[top[s]] * ((dw[s] - dot_w) / z);
        for (int64_t j = 0; j < e; j++)
            dl[j] += p[j] * ((dp != NULL ? dp[j] : 0.0f) - dot);
        for (int64_t s = 0; s < k; s++)
            dl[top[s]] += p[top[s]] * ((dw[s] - dot_w) / z);
    }
    return LW_OK;
}

lw_status lwi_cpu_moe_aux_loss_forward(lw_stream *stream, const float *probs,
                                       const int32_t *experts, int64_t n, int64_t e, int64_t k,
                                       float coef, double *loss) {
    (void)stream;
    *loss = 0;
    if (n <= 0) return LW_OK;
    /* expert by expert, so that no count array is needed: O(n k e) with the counts, O(n e)
     * with the column sums, both in double */
    double total = 0;
    for (int64_t j = 0; j < e; j++) {
        int64_t count = 0;
        for (int64_t a = 0; a < n * k; a++)
            count += experts[a] == j;
        if (count == 0) continue;
        double col = 0;
        for (int64_t i = 0; i < n; i++)
            col += probs[i * e + j];
        total += (double)count * col;
    }
    /* coef e sum_j (count_j / (n k)) (col_j / n) */
    *loss = (double)coef * (double)e * total / ((double)n * (double)n * (double)k);
    return LW_OK;
}

lw_status lwi_cpu_moe_aux_loss_backward(lw_stream *stream, float *dprobs, const int32_t *experts,
                                        int64_t n, int64_t e, int64_t k, float coef, float scale) {
    (void)stream;
    if (n <= 0) return LW_OK;
    /* dL/dprobs[i, j] = coef e f_j / n for every token i: the same row added to each */
    const double per = (double)scale * (double)coef * (double)e / ((double)n * (double)n * k);
    for (int64_t j = 0; j < e; j++) {
        int64_t count = 0;
        for (int64_t a = 0; a < n * k; a++)
            count += experts[a] == j;
        const float g = (float)(per * (double)count);
        for (int64_t i = 0; i < n; i++)
            dprobs[i * e + j] += g;
    }
    return LW_OK;
}
