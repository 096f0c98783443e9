/* cross_entropy.c: the LM head fused with softmax cross-entropy on the CPU, a chunk of rows at a
 * time: the chunk's logits by one GEMM into the scratch, each row's stable log-sum-exp and loss,
 * and in the backward the softmax's gradient formed in place and two GEMMs into dh and dw. When
 * all rows fit one chunk (small vocabularies) the forward leaves the probabilities in the scratch
 * and the backward reuses them; otherwise it recomputes each chunk's logits. A target outside
 * [0, v) is ignored (loss 0, no gradient). Below, the same head split over tensor parallelism's
 * vocabulary ranks (lw_cross_entropy_partial_forward, _combine, _partial_backward). A bf16 head
 * is widened once per call (exactly) by the entry points at the end, not once per chunk. bf16
 * logits are held as the fp32 values of their bf16 rounding (the scratch stays fp32 here): each
 * logit rounded after its GEMM, each row of dlogits after it is formed. With a softcap (cap > 0)
 * every logit is first capped in place, cap tanh(logit / cap), in fp32 (a bf16 logit's capped
 * value is not rounded again), and the softmax is of the capped logits; the backward multiplies
 * each dlogit by the cap's slope at that logit, so the forward keeps the capped logits (not the
 * probabilities) for it. */
#include "device/cpu/cpu.h"
#include "device/cpu/softcap.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>

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

/* x[n] replaced by the values of its bf16 rounding (nearest even): what bf16 logits hold. */
static void as_bf16(float *x, int64_t n) {
    uint16_t bits[256];
    for (int64_t i0 = 0; i0 < n; i0 += 256) {
        const int64_t m = n - i0 < 256 ? n - i0 : 256;
        lwi_cpu_round_bf16(bits, x + i0, m);
        lwi_cpu_widen_bf16(x + i0, bits, m);
    }
}

/* logits[rows, v] = h[rows, c] w[v, c]^T, rounded to bf16 values with bf16 */
static void logits(float *out, const float *h, const float *w, int64_t rows, int64_t c, int64_t v,
                   bool bf16) {
    if (c > 0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)v, (int)c, 1.0f, h,
                    (int)c, w, (int)c, 0.0f, out, (int)v);
        if (bf16) as_bf16(out, rows * v);
    } else {
        for (int64_t i = 0; i < rows * v; i++)
            out[i] = 0.0f;
    }
}

/* The first `real` logits of each of the chunk's rows capped in place (cap > 0; 0: none). */
static void cap_rows(float *scratch, int64_t rows, int64_t v, int64_t real, float cap) {
    if (cap <= 0.0f) return;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < real; j++)
            scratch[i * v + j] = lwi_softcap_value(scratch[i * v + j], cap);
}

/* A capped row's dlogits in place from its capped logits z: s (exp(z - lse) - onehot) times the
 * cap's slope at z, over its first `real` columns (k: the target's column, or -1). */
static void capped_dlogits(float *row, int64_t real, int64_t k, float row_lse, float s, float cap) {
    for (int64_t j = 0; j < real; j++) {
        const float z = row[j];
        float d = expf(z - row_lse) * s;
        if (j == k) d -= s;
        row[j] = d * lwi_softcap_slope(z, cap);
    }
}

static lw_status forward(float *losses, float *lse, float *scratch, const float *h, const float *w,
                         bool bf16, float cap, const int32_t *targets, int64_t n, int64_t c,
                         int64_t v, double *loss) {
    if (n <= 0 || v <= 0) {
        *loss = 0.0;
        return LW_OK;
    }
    const int64_t chunk = chunk_rows(n, v);
    double total = 0.0;
    int64_t count = 0;
    for (int64_t r0 = 0; r0 < n; r0 += chunk) {
        const int64_t rows = n - r0 < chunk ? n - r0 : chunk;
        logits(scratch, h + r0 * c, w, rows, c, v, bf16);
        cap_rows(scratch, rows, v, v, cap);
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
            if (chunk == n && cap <= 0.0f) /* kept for the backward (capped: the capped logits) */
                for (int64_t j = 0; j < v; j++)
                    row[j] = expf(row[j] - row_lse);
        }
    }
    *loss = count > 0 ? total / (double)count : 0.0;
    return LW_OK;
}

/* Rows whose target is counted (in [0, vocab)). */
static int64_t counted_rows(const int32_t *targets, int64_t n, int64_t vocab) {
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++)
        count += counted(targets[i], vocab);
    return count;
}

/* A chunk's share of the head's gradients from its dlogits in scratch [rows, v] (rows r0.. of
 * the batch): dh[rows, c] += dl w (when dh is wanted), dw[v, c] += dl^T h. */
static void head_grads(float *dh, float *dw, const float *scratch, const float *h, const float *w,
                       int64_t r0, int64_t rows, int64_t c, int64_t v) {
    if (dh != NULL)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)c, (int)v, 1.0f,
                    scratch, (int)v, w, (int)c, 1.0f, dh + r0 * c, (int)c);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)v, (int)c, (int)rows, 1.0f, scratch,
                (int)v, h + r0 * c, (int)c, 1.0f, dw, (int)c);
}

static lw_status backward(float *dh, float *dw, float *scratch, const float *h, const float *w,
                          bool bf16, float cap, const int32_t *targets, const float *lse, int64_t n,
                          int64_t c, int64_t v, float loss_scale) {
    if (n <= 0 || v <= 0 || c <= 0) return LW_OK;
    const int64_t count = counted_rows(targets, n, v);
    /* No counted row means the loss is the constant 0: nothing to add. */
    if (count == 0) return LW_OK;
    const float s = loss_scale / (float)count;
    const int64_t chunk = chunk_rows(n, v);
    for (int64_t r0 = 0; r0 < n; r0 += chunk) {
        const int64_t rows = n - r0 < chunk ? n - r0 : chunk;
        if (chunk < n) {
            logits(scratch, h + r0 * c, w, rows, c, v, bf16);
            /* capped: the capped logits, as the forward keeps them; else the probabilities */
            cap_rows(scratch, rows, v, v, cap);
            for (int64_t i = 0; cap <= 0.0f && i < rows; i++) {
                float *row = scratch + i * v;
                for (int64_t j = 0; j < v; j++)
                    row[j] = expf(row[j] - lse[r0 + i]);
            }
        }
        for (int64_t i = 0; i < rows; i++) {
            float *row = scratch + i * v;
            const int32_t tg = targets[r0 + i];
            if (counted(tg, v) && cap > 0.0f) {
                capped_dlogits(row, v, tg, lse[r0 + i], s, cap);
                if (bf16) as_bf16(row, v);
            } else if (counted(tg, v)) {
                for (int64_t j = 0; j < v; j++)
                    row[j] *= s;
                row[tg] -= s;
                if (bf16) as_bf16(row, v);
            } else {
                for (int64_t j = 0; j < v; j++)
                    row[j] = 0.0f;
            }
        }
        head_grads(dh, dw, scratch, h, w, r0, rows, c, v);
    }
    return LW_OK;
}

/* ---- tensor parallelism: the vocabulary-parallel LM head --------------------------------------
 * Each rank forms the logits of its vocabulary rows and reduces each row to three numbers (its
 * max, its sum of exponentials below that max, the target's logit where it holds it); the ranks'
 * numbers, gathered, combine into the whole vocabulary's log-sum-exp and loss; the backward is
 * local again. Rows at or past `vocab` are padding: left out of every sum. */

/* The rows of [first, first + v) below vocab: the real ones. */
static int64_t real_rows(int64_t first, int64_t v, int64_t vocab) {
    const int64_t real = vocab - first;
    return real < 0 ? 0 : real < v ? real : v;
}

static inline bool held(int32_t target, int64_t first, int64_t real) {
    return (int64_t)target >= first && (int64_t)target - first < real;
}

static lw_status partial_forward(float *stats, float *scratch, const float *h, const float *w,
                                 bool bf16, float cap, const int32_t *targets, int64_t n, int64_t c,
                                 int64_t v, int64_t first, int64_t vocab) {
    if (n <= 0) return LW_OK;
    float *mx = stats, *sums = stats + n, *tl = stats + 2 * n;
    const int64_t real = real_rows(first, v, vocab);
    if (real == 0) { /* all padding: this rank adds nothing to any row */
        for (int64_t i = 0; i < n; i++)
            mx[i] = -INFINITY, sums[i] = 0.0f, tl[i] = 0.0f;
        return LW_OK;
    }
    const int64_t chunk = chunk_rows(n, v);
    for (int64_t r0 = 0; r0 < n; r0 += chunk) {
        const int64_t rows = n - r0 < chunk ? n - r0 : chunk;
        logits(scratch, h + r0 * c, w, rows, c, v, bf16);
        cap_rows(scratch, rows, v, real, cap);
        for (int64_t i = 0; i < rows; i++) {
            const float *row = scratch + i * v;
            float m = row[0];
            for (int64_t j = 1; j < real; j++)
                m = row[j] > m ? row[j] : m;
            double sum = 0.0; /* in double, as the one-rank kernel: v can be 50k */
            for (int64_t j = 0; j < real; j++)
                sum += expf(row[j] - m);
            const int32_t tg = targets[r0 + i];
            mx[r0 + i] = m;
            sums[r0 + i] = (float)sum;
            tl[r0 + i] = held(tg, first, real) ? row[tg - first] : 0.0f;
        }
        /* chunk == n: the (capped) logits stay in the scratch for the backward */
    }
    return LW_OK;
}

lw_status lwi_cpu_cross_entropy_combine(lw_stream *stream, float *losses, float *lse,
                                        const float *stats, int64_t parts, const int32_t *targets,
                                        int64_t n, int64_t vocab, double *loss) {
    (void)stream;
    double total = 0.0;
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++) {
        float m = -INFINITY;
        for (int64_t p = 0; p < parts; p++)
            m = stats[p * 3 * n + i] > m ? stats[p * 3 * n + i] : m;
        /* each part's sum rescaled to the common max, in rank order: every rank gets the same */
        double sum = 0.0, target = 0.0;
        for (int64_t p = 0; p < parts; p++) {
            const float *part = stats + p * 3 * n;
            if (part[n + i] > 0.0f) sum += (double)part[n + i] * exp((double)part[i] - (double)m);
            target += (double)part[2 * n + i];
        }
        const double log_sum = log(sum);
        lse[i] = (float)((double)m + log_sum);
        if (counted(targets[i], vocab)) {
            /* log(sum) - (logit - max), as the one-rank kernel: accurate where the target's
             * probability underflows */
            const double row_loss = log_sum - (target - (double)m);
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

static lw_status partial_backward(float *dh, float *dw, float *scratch, const float *h,
                                  const float *w, bool bf16, float cap, const int32_t *targets,
                                  const float *lse, int64_t n, int64_t c, int64_t v, int64_t first,
                                  int64_t vocab, float loss_scale) {
    if (n <= 0 || v <= 0 || c <= 0) return LW_OK;
    const int64_t count = counted_rows(targets, n, vocab);
    if (count == 0) return LW_OK;
    const float s = loss_scale / (float)count;
    const int64_t real = real_rows(first, v, vocab);
    const int64_t chunk = chunk_rows(n, v);
    for (int64_t r0 = 0; r0 < n; r0 += chunk) {
        const int64_t rows = n - r0 < chunk ? n - r0 : chunk;
        if (chunk < n) {
            logits(scratch, h + r0 * c, w, rows, c, v, bf16);
            cap_rows(scratch, rows, v, real, cap);
        }
        for (int64_t i = 0; i < rows; i++) {
            float *row = scratch + i * v;
            const int32_t tg = targets[r0 + i];
            if (!counted(tg, vocab)) {
                for (int64_t j = 0; j < v; j++)
                    row[j] = 0.0f;
                continue;
            }
            /* rounded as the one-rank kernel: p, then p * s, then the target's minus s */
            const float l = lse[r0 + i];
            if (cap > 0.0f) {
                capped_dlogits(row, real, held(tg, first, real) ? tg - first : -1, l, s, cap);
            } else {
                for (int64_t j = 0; j < real; j++)
                    row[j] = expf(row[j] - l) * s;
                if (held(tg, first, real)) row[tg - first] -= s;
            }
            for (int64_t j = real; j < v; j++)
                row[j] = 0.0f;
            if (bf16) as_bf16(row, real);
        }
        head_grads(dh, dw, scratch, h, w, r0, rows, c, v);
    }
    return LW_OK;
}

/* ---- the entry points: the head's weights as fp32 (bf16 widened once for the call) ---------- */

/* The head as fp32 for one call: the caller's weights, or bf16 ones widened into `owned`. */
typedef struct {
    const float *w;
    float *owned;
} head_f32;

static lw_status head_open(head_f32 *hd, const void *w, lw_dtype w_dtype, int64_t n, int64_t v,
                           int64_t c) {
    const int64_t numel = n > 0 && v > 0 && c > 0 ? v * c : 0; /* no rows: nothing reads w */
    return lwi_cpu_as_f32(w, w_dtype, numel, &hd->w, &hd->owned);
}

/* Frees what head_open made; passes the call's status on. */
static lw_status head_close(head_f32 *hd, lw_status st) {
    free(hd->owned);
    return st;
}

lw_status lwi_cpu_cross_entropy_forward(lw_stream *stream, float *losses, float *lse,
                                        float *scratch, const float *h, const void *w,
                                        lw_dtype w_dtype, lw_dtype logits_dtype, float softcap,
                                        const int32_t *targets, int64_t n, int64_t c, int64_t v,
                                        double *loss) {
    (void)stream;
    head_f32 hd;
    lw_status st = head_open(&hd, w, w_dtype, n, v, c);
    if (st == LW_OK)
        st = forward(losses, lse, scratch, h, hd.w, logits_dtype == LW_DTYPE_BF16, softcap, targets,
                     n, c, v, loss);
    return head_close(&hd, st);
}

lw_status lwi_cpu_cross_entropy_backward(lw_stream *stream, float *dh, float *dw, float *scratch,
                                         const float *h, const void *w, lw_dtype w_dtype,
                                         lw_dtype logits_dtype, float softcap,
                                         const int32_t *targets, const float *lse, int64_t n,
                                         int64_t c, int64_t v, float loss_scale) {
    (void)stream;
    head_f32 hd;
    lw_status st = head_open(&hd, w, w_dtype, n, v, c);
    if (st == LW_OK)
        st = backward(dh, dw, scratch, h, hd.w, logits_dtype == LW_DTYPE_BF16, softcap, targets,
                      lse, n, c, v, loss_scale);
    return head_close(&hd, st);
}

lw_status lwi_cpu_cross_entropy_partial_forward(lw_stream *stream, float *stats, float *scratch,
                                                const float *h, const void *w, lw_dtype w_dtype,
                                                lw_dtype logits_dtype, float softcap,
                                                const int32_t *targets, int64_t n, int64_t c,
                                                int64_t v, int64_t first, int64_t vocab) {
    (void)stream;
    head_f32 hd;
    lw_status st = head_open(&hd, w, w_dtype, n, v, c);
    if (st == LW_OK)
        st = partial_forward(stats, scratch, h, hd.w, logits_dtype == LW_DTYPE_BF16, softcap,
                             targets, n, c, v, first, vocab);
    return head_close(&hd, st);
}

lw_status lwi_cpu_cross_entropy_partial_backward(lw_stream *stream, float *dh, float *dw,
                                                 float *scratch, const float *h, const void *w,
                                                 lw_dtype w_dtype, lw_dtype logits_dtype,
                                                 float softcap, const int32_t *targets,
                                                 const float *lse, int64_t n, int64_t c, int64_t v,
                                                 int64_t first, int64_t vocab, float loss_scale) {
    (void)stream;
    head_f32 hd;
    lw_status st = head_open(&hd, w, w_dtype, n, v, c);
    if (st == LW_OK)
        st = partial_backward(dh, dw, scratch, h, hd.w, logits_dtype == LW_DTYPE_BF16, softcap,
                              targets, lse, n, c, v, first, vocab, loss_scale);
    return head_close(&hd, st);
}
