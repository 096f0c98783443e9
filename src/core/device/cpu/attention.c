/* attention.c: causal multi-head self-attention on the CPU, forward and backward. Each
 * (batch, head) is worked in blocks of ATT_ROWS query rows: GEMMs on strided views of qkv (no
 * copies) and a row softmax with a vectorised exp (fast_math.h). A block's rows see the keys up
 * to its last row only, so the GEMMs skip the blocks of the t x t square above the diagonal (a
 * quarter of it at t = 2 ATT_ROWS, nearly half for long sequences) and the zeros written above
 * the diagonal inside a block keep the rest causal. Only the rows' log-sum-exp is kept for the
 * backward, which recomputes the probabilities from it (the contract every device shares: no
 * t x t matrix per head lives between passes). The (batch, head) pairs are split over the CPU
 * pool's threads (pool.c), each with its own part of the scratch. */
#include "device/cpu/cpu.h"
#include "device/cpu/fast_math.h"
#include "device/cpu/pool.h"

#include <cblas.h>
#include <math.h>

/* Query rows per block: GEMMs of at least 64 rows keep OpenBLAS near its speed on these small
 * shapes, and 64 x t x head_dim stays in cache. */
#define ATT_ROWS 64

/* Per part of the pool: a block's probabilities (rows x keys), and in the backward their
 * gradient beside it. */
static int64_t part_floats(int64_t t) { return 2 * (t < ATT_ROWS ? t : ATT_ROWS) * t; }

int64_t lwi_cpu_attention_scratch_floats(int64_t b, int64_t t, int64_t nh) {
    (void)b, (void)nh;
    return LWI_POOL_MAX * part_floats(t);
}

/* What a part of the pool needs to run its heads, forward or backward. */
typedef struct {
    float *out, *lse, *dqkv, *scratch;
    const float *qkv, *dout, *saved_out, *saved_lse;
    int64_t t, c, nh, hd;
    float scale;
} att_job;

/* The row helpers are inlined into the per-head functions, whose AVX2 build they then share. */
LWI_ROW_HELPER float row_max(const float *x, int64_t n) {
    float acc[LWI_LANES];
    for (int k = 0; k < LWI_LANES; k++)
        acc[k] = x[0];
    int64_t i = 0;
    for (; i + LWI_LANES <= n; i += LWI_LANES)
        for (int k = 0; k < LWI_LANES; k++)
            acc[k] = x[i + k] > acc[k] ? x[i + k] : acc[k];
    float m = acc[0];
    for (int k = 1; k < LWI_LANES; k++)
        m = acc[k] > m ? acc[k] : m;
    for (; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

/* x[i] = exp(x[i] - shift) for i < n, returning their sum (in double). The argument is clamped
 * at LWI_EXP_MIN: a term that small is nothing beside the row's largest, which is 1. Three passes
 * over the row (in L1), each of which vectorises: fused with the arithmetic, GCC turns the clamp
 * into a branch (gelu.c has the same), and the conversions to double keep it from the sum. */
LWI_ROW_HELPER double exp_shifted(float *x, int64_t n, float shift) {
    for (int64_t i = 0; i < n; i++) {
        float d = x[i] - shift;
        x[i] = d < LWI_EXP_MIN ? LWI_EXP_MIN : d;
    }
    for (int64_t i = 0; i < n; i++)
        x[i] = lwi_exp_fast(x[i]);
    return lwi_row_sum(x, n);
}

/* sum_i x[i] y[i] in double */
LWI_ROW_HELPER double row_dot(const float *x, const float *y, int64_t n) {
    double acc[LWI_LANES] = {0};
    int64_t i = 0;
    for (; i + LWI_LANES <= n; i += LWI_LANES)
        for (int k = 0; k < LWI_LANES; k++)
            acc[k] += (double)x[i + k] * (double)y[i + k];
    double s = 0.0;
    for (; i < n; i++)
        s += (double)x[i] * (double)y[i];
    for (int k = 0; k < LWI_LANES; k++)
        s += acc[k];
    return s;
}

LWI_ROW_HELPER void zero_tail(float *row, int64_t from, int64_t n) {
    for (int64_t j = from; j < n; j++)
        row[j] = 0.0f;
}

/* One head's forward: q, k, v rows strided by 3c, o strided by c, lse[t]. */
LWI_SIMD_CLONES
static void head_forward(float *o, float *lse, float *a, const float *q, const float *k,
                         const float *v, int64_t t, int64_t hd, int64_t c, float scale) {
    const int64_t c3 = 3 * c;
    for (int64_t i0 = 0; i0 < t; i0 += ATT_ROWS) {
        const int64_t m = t - i0 < ATT_ROWS ? t - i0 : ATT_ROWS, keys = i0 + m;
        /* a[m, keys] = scale q[i0 .. i0 + m) k[0 .. keys)^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)keys, (int)hd, scale,
                    q + i0 * c3, (int)c3, k, (int)c3, 0.0f, a, (int)keys);
        for (int64_t r = 0; r < m; r++) {
            float *row = a + r * keys;
            const int64_t n = i0 + r + 1; /* keys 0 .. i: the diagonal is never masked */
            /* Subtracting the row max keeps exp in range; the sum is then >= 1. */
            const float mx = row_max(row, n);
            const double sum = exp_shifted(row, n, mx);
            const float inv = (float)(1.0 / sum);
            for (int64_t j = 0; j < n; j++)
                row[j] *= inv;
            zero_tail(row, n, keys);
            lse[i0 + r] = (float)((double)mx + log(sum));
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)hd, (int)keys, 1.0f, a,
                    (int)keys, v, (int)c3, 0.0f, o + i0 * c, (int)c);
    }
}

static void forward_heads(void *ctx, int64_t begin, int64_t end, int32_t part) {
    const att_job *j = ctx;
    const int64_t t = j->t, c = j->c, nh = j->nh, hd = j->hd;
    float *a = j->scratch + part * part_floats(t);
    for (int64_t bh = begin; bh < end; bh++) {
        const int64_t bi = bh / nh, h = bh % nh;
        const float *q = j->qkv + bi * t * 3 * c + h * hd;
        head_forward(j->out + bi * t * c + h * hd, j->lse + bh * t, a, q, q + c, q + 2 * c, t, hd,
                     c, j->scale);
    }
}

lw_status lwi_cpu_attention_forward(lw_stream *stream, float *out, float *lse, float *scratch,
                                    const float *qkv, int64_t b, int64_t t, int64_t c,
                                    int64_t nh) {
    (void)stream;
    if (b <= 0 || t <= 0 || c <= 0 || nh <= 0) return LW_OK;
    att_job j = {.out = out, .lse = lse, .scratch = scratch, .qkv = qkv, .t = t, .c = c,
                 .nh = nh, .hd = c / nh, .scale = 1.0f / sqrtf((float)(c / nh))};
    lwi_cpu_parallel(b * nh, 1, forward_heads, &j);
    return LW_OK;
}

/* One head's backward, accumulating into dq, dk, dv (strided by 3c) from dout and out (strided
 * by c). p and ds: ATT_ROWS x t each. */
LWI_SIMD_CLONES
static void head_backward(float *dq, float *dk, float *dv, float *p, float *ds, const float *q,
                          const float *k, const float *v, const float *dout, const float *out,
                          const float *lse, int64_t t, int64_t hd, int64_t c, float scale) {
    const int64_t c3 = 3 * c;
    for (int64_t i0 = 0; i0 < t; i0 += ATT_ROWS) {
        const int64_t m = t - i0 < ATT_ROWS ? t - i0 : ATT_ROWS, keys = i0 + m;
        const float *q_b = q + i0 * c3, *dout_b = dout + i0 * c;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)keys, (int)hd, scale,
                    q_b, (int)c3, k, (int)c3, 0.0f, p, (int)keys);
        for (int64_t r = 0; r < m; r++) {
            float *row = p + r * keys;
            const int64_t n = i0 + r + 1;
            exp_shifted(row, n, lse[i0 + r]);
            zero_tail(row, n, keys);
        }
        /* datt[m, keys] = dout v^T; dv[0 .. keys) += p^T dout */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)keys, (int)hd, 1.0f,
                    dout_b, (int)c, v, (int)c3, 0.0f, ds, (int)keys);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)keys, (int)hd, (int)m, 1.0f, p,
                    (int)keys, dout_b, (int)c, 1.0f, dv, (int)c3);
        for (int64_t r = 0; r < m; r++) {
            float *drow = ds + r * keys;
            const float *prow = p + r * keys, *dout_i = dout_b + r * c, *out_i = out + (i0 + r) * c;
            const int64_t n = i0 + r + 1;
            /* sum_j p_ij datt_ij = dout_i . out_i: the softmax's backward from the saved
             * output, as flash attention does (a device needs no row of p for it). */
            const float s = (float)row_dot(dout_i, out_i, hd);
            for (int64_t j = 0; j < n; j++)
                drow[j] = prow[j] * (drow[j] - s);
            /* datt is dense above the diagonal; zeroed, the masked scores get no gradient
             * through the GEMMs below. */
            zero_tail(drow, n, keys);
        }
        /* dq[i0 ..] += scale dS k; dk[0 .. keys) += scale dS^T q */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)hd, (int)keys, scale,
                    ds, (int)keys, k, (int)c3, 1.0f, dq + i0 * c3, (int)c3);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)keys, (int)hd, (int)m, scale, ds,
                    (int)keys, q_b, (int)c3, 1.0f, dk, (int)c3);
    }
}

static void backward_heads(void *ctx, int64_t begin, int64_t end, int32_t part) {
    const att_job *j = ctx;
    const int64_t t = j->t, c = j->c, nh = j->nh, hd = j->hd;
    float *p = j->scratch + part * part_floats(t), *ds = p + part_floats(t) / 2;
    for (int64_t bh = begin; bh < end; bh++) {
        const int64_t bi = bh / nh, h = bh % nh, off = bi * t * 3 * c + h * hd;
        const float *q = j->qkv + off;
        float *dq = j->dqkv + off;
        head_backward(dq, dq + c, dq + 2 * c, p, ds, q, q + c, q + 2 * c,
                      j->dout + bi * t * c + h * hd, j->saved_out + bi * t * c + h * hd,
                      j->saved_lse + bh * t, t, hd, c, j->scale);
    }
}

lw_status lwi_cpu_attention_backward(lw_stream *stream, float *dqkv, float *scratch,
                                     const float *dout, const float *qkv, const float *out,
                                     const float *lse, int64_t b, int64_t t, int64_t c,
                                     int64_t nh) {
    (void)stream;
    if (b <= 0 || t <= 0 || c <= 0 || nh <= 0) return LW_OK;
    att_job j = {.dqkv = dqkv, .scratch = scratch, .qkv = qkv, .dout = dout, .saved_out = out,
                 .saved_lse = lse, .t = t, .c = c, .nh = nh, .hd = c / nh,
                 .scale = 1.0f / sqrtf((float)(c / nh))};
    lwi_cpu_parallel(b * nh, 1, backward_heads, &j);
    return LW_OK;
}
