/* lw_model_kernels.h: forward and backward of the GPT building blocks (linear, embedding, layer
 * norm, GELU, attention, the LM head's cross-entropy, their tensor-parallel forms, a mixture of
 * experts' router, gather and combine) and of LLaMA's and nanochat's parts (RMSNorm, ReLU^2,
 * SwiGLU, the logits' softcap) on raw pointers into the stream's device memory (NULL: the CPU,
 * whose kernels are the reference). Row-major; n rows (batch * time), c channels;
 * fp32 where no dtype is given. Every backward ACCUMULATES (+=) into its outputs unless it says
 * otherwise, so callers zero them first; a NULL optional output is skipped. Weights (w_dtype)
 * and the activations that only feed matrix products, the attention or GELU may be bf16: the
 * rules are in docs/c_api.md.
 */
#ifndef LW_MODEL_KERNELS_API_H
#define LW_MODEL_KERNELS_API_H

#include "lw_base.h"
#include "lw_device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* LW_CDEF_BEGIN */

/* ---- linear, embedding, layer norm, GELU ----------------------------------------------------- */

/* y[n, out] = x[n, in] w[out, in]^T + b[out] (b optional); x of x_dtype, y of y_dtype (bf16:
 * the fp32 result, bias included, rounded; on a GPU under bf16 products the bias is rounded to
 * bf16 too before it is added, as the operands are). */
lw_status lw_linear_forward(lw_stream *stream, void *y, lw_dtype y_dtype, const void *x,
                            lw_dtype x_dtype, const void *w, lw_dtype w_dtype, const float *b,
                            int64_t n, int64_t in, int64_t out);
/* dx[n, in] += dy w; dw[out, in] += dy^T x; db[out] += column sums of dy (dx, db optional); dy
 * of dy_dtype. */
lw_status lw_linear_backward(lw_stream *stream, float *dx, float *dw, float *db, const void *dy,
                             lw_dtype dy_dtype, const void *x, lw_dtype x_dtype, const void *w,
                             lw_dtype w_dtype, int64_t n, int64_t in, int64_t out);
/* An MLP's first half in one call: pre[n, out] = x w^T + b and y = GELU(pre), both of dtype;
 * lw_linear_forward then lw_gelu_forward bit for bit, except on a GPU under bf16 products
 * (within bf16's rounding: docs/c_api.md). */
lw_status lw_linear_gelu_forward(lw_stream *stream, void *y, void *pre, lw_dtype dtype,
                                 const void *x, lw_dtype x_dtype, const void *w, lw_dtype w_dtype,
                                 const float *b, int64_t n, int64_t in, int64_t out);
/* An MLP's second half backward, x = GELU(pre): dw += dy^T x, db += column sums of dy (db
 * optional), and dpre[n, in] = (dy w) GELU'(pre) of dtype, WRITTEN, not accumulated (the one
 * backward that overwrites); lw_linear_backward then lw_gelu_backward into zeroed arrays, bit
 * for bit, except on a GPU under bf16 products with bf16 dpre (docs/c_api.md). */
lw_status lw_linear_gelu_backward(lw_stream *stream, void *dpre, lw_dtype dtype, float *dw,
                                  float *db, const void *dy, lw_dtype dy_dtype, const void *x,
                                  lw_dtype x_dtype, const void *w, lw_dtype w_dtype,
                                  const void *pre, int64_t n, int64_t in, int64_t out);

/* y[b, t, c] = wte[tokens[b, t], :] + wpe[t, :] (wpe optional), both tables of w_dtype. Tokens
 * must be in [0, vocab). */
lw_status lw_embedding_forward(lw_stream *stream, float *y, const int32_t *tokens, const void *wte,
                               const void *wpe, lw_dtype w_dtype, int64_t b, int64_t t, int64_t c);
/* dwte[tokens[b, t], :] += dy[b, t, :]; dwpe[t, :] += dy[b, t, :] (dwpe optional). */
lw_status lw_embedding_backward(lw_stream *stream, float *dwte, float *dwpe, const float *dy,
                                const int32_t *tokens, int64_t b, int64_t t, int64_t c);

/* y = (x - mean) * rstd * g + beta per row (beta optional), y of y_dtype; saves mean[n],
 * rstd[n]. */
lw_status lw_layernorm_forward(lw_stream *stream, void *y, lw_dtype y_dtype, float *mean,
                               float *rstd, const float *x, const float *g, const float *beta,
                               int64_t n, int64_t c, float eps);
/* dx[n, c] += ...; dg[c] += ...; dbeta[c] += ... (dbeta optional). */
lw_status lw_layernorm_backward(lw_stream *stream, float *dx, float *dg, float *dbeta,
                                const float *dy, const float *x, const float *g, const float *mean,
                                const float *rstd, int64_t n, int64_t c);
/* The residual add and the layer norm after it in one pass: sum = a + b (kept; may be a or b),
 * y = layer norm of sum, mean and rstd saved; lw_vec_add then lw_layernorm_forward, bit for
 * bit. */
lw_status lw_add_layernorm_forward(lw_stream *stream, float *sum, void *y, lw_dtype y_dtype,
                                   float *mean, float *rstd, const float *a, const float *b,
                                   const float *g, const float *beta, int64_t n, int64_t c,
                                   float eps);
/* A layer norm's backward whose input also flows on the residual stream: dx += dres, then as
 * lw_layernorm_backward; lw_vec_add then lw_layernorm_backward, bit for bit. */
lw_status lw_add_layernorm_backward(lw_stream *stream, float *dx, float *dg, float *dbeta,
                                    const float *dres, const float *dy, const float *x,
                                    const float *g, const float *mean, const float *rstd, int64_t n,
                                    int64_t c);

/* GELU, tanh form: y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), y of y_dtype, x of
 * x_dtype. */
lw_status lw_gelu_forward(lw_stream *stream, void *y, lw_dtype y_dtype, const void *x,
                          lw_dtype x_dtype, int64_t n);
/* dx += dy * gelu'(x), x of x_dtype, dx of dx_dtype (bf16: the fp32 sum rounded) */
lw_status lw_gelu_backward(lw_stream *stream, void *dx, lw_dtype dx_dtype, const float *dy,
                           const void *x, lw_dtype x_dtype, int64_t n);

/* ---- LLaMA's and nanochat's parts: RMSNorm, ReLU^2, SwiGLU, the logits' softcap ------------- */

/* RMSNorm over the last dimension: rstd[n] = 1 / sqrt(mean(x^2) + eps) per row (saved, in
 * float, the mean of squares taken in double), y = x * rstd * g (g[c] optional: NULL for the
 * parameter-free norm, y = x * rstd), y of y_dtype. eps finite, >= 0. */
lw_status lw_rmsnorm_forward(lw_stream *stream, void *y, lw_dtype y_dtype, float *rstd,
                             const float *x, const float *g, int64_t n, int64_t c, float eps);
/* From the forward's rstd: dx[n, c] += rstd (dy g - xhat mean(dy g xhat)), xhat = x rstd;
 * dg[c] += column sums of dy xhat (only with a gain: dg must be NULL when g is). */
lw_status lw_rmsnorm_backward(lw_stream *stream, float *dx, float *dg, const float *dy,
                              const float *x, const float *g, const float *rstd, int64_t n,
                              int64_t c);

/* ReLU^2 (the Primer activation nanochat uses): y = max(x, 0)^2, y of y_dtype, x of x_dtype; a
 * NaN stays NaN. */
lw_status lw_relu2_forward(lw_stream *stream, void *y, lw_dtype y_dtype, const void *x,
                           lw_dtype x_dtype, int64_t n);
/* dx += dy * 2 max(x, 0), x of x_dtype, dx of dx_dtype (bf16: the fp32 sum rounded) */
lw_status lw_relu2_backward(lw_stream *stream, void *dx, lw_dtype dx_dtype, const float *dy,
                            const void *x, lw_dtype x_dtype, int64_t n);

/* SwiGLU over fused rows: x[n, c] holds per row the gate a (columns [0, c/2)) then the up
 * projection b (columns [c/2, c)), as one linear layer with LLaMA's gate and up weights stacked
 * (gate rows first) writes them; y[n, c/2] = silu(a) * b, silu(a) = a / (1 + exp(-a)). c must
 * be even. y of y_dtype, x of x_dtype. */
lw_status lw_swiglu_forward(lw_stream *stream, void *y, lw_dtype y_dtype, const void *x,
                            lw_dtype x_dtype, int64_t n, int64_t c);
/* The fused gradient dx[n, c] += [dy * b * silu'(a) | dy * silu(a)] from dy[n, c/2] and the
 * forward's x; dx of dx_dtype (bf16: the fp32 sums rounded). */
lw_status lw_swiglu_backward(lw_stream *stream, void *dx, lw_dtype dx_dtype, const float *dy,
                             const void *x, lw_dtype x_dtype, int64_t n, int64_t c);

/* The logits' tanh softcap (Gemma 2's, nanochat's): y = cap * tanh(x / cap), n elements, fp32;
 * y may be x (in place). cap finite, > 0. */
lw_status lw_softcap_forward(lw_stream *stream, float *y, const float *x, int64_t n, float cap);
/* dx += dy * (1 - (y / cap)^2) from the forward's OUTPUT y (so that the forward may run in place
 * on the logits); dx must not be dy. */
lw_status lw_softcap_backward(lw_stream *stream, float *dx, const float *dy, const float *y,
                              int64_t n, float cap);

/* ---- attention ----------------------------------------------------------------------------- *
 * Causal self-attention with grouped KV heads and an optional sliding window, keeping no t x t
 * matrix between forward and backward: qkv[b, t, c + 2 nkv hd] (hd = c / nh) holds the nh query
 * heads, then the nkv key heads, then the nkv value heads, hd channels each; query head h reads
 * KV head h / (nh / nkv) (nkv = nh: qkv[b, t, 3c], one KV head per head; nkv = 1: multi-query).
 * out[b, t, c], and lse[b, nh, t] each row's log-sum-exp of the scaled scores, from which the
 * backward recomputes the probabilities. Scale 1/sqrt(hd). window 0: query i sees keys j <= i;
 * window w > 0: keys i - w <= j <= i (w earlier keys and its own, flash attention's window_size
 * (w, 0)). c must divide by nh, nh by nkv. */

/* Floats of scratch both passes need, the caller's workspace on the stream's device. */
int64_t lw_attention_scratch_floats(lw_stream *stream, int64_t b, int64_t t, int64_t c, int64_t nh,
                                    int64_t nkv, int64_t window);
/* qkv of qkv_dtype; out of out_dtype (fp32, or bf16: computed in fp32 and rounded); lse fp32.
 * head_max[nh] (optional, fp32): each head's largest score q_i . k_j / sqrt(hd) over the
 * batch's unmasked pairs (the causal window's), as the kernel computes its scores; NaN for a
 * head with a NaN row (docs/c_api.md). */
lw_status lw_attention_forward(lw_stream *stream, void *out, lw_dtype out_dtype, float *lse,
                               float *head_max, float *scratch, const void *qkv, lw_dtype qkv_dtype,
                               int64_t b, int64_t t, int64_t c, int64_t nh, int64_t nkv,
                               int64_t window);
/* dqkv[b, t, c + 2 nkv hd] += ..., from the forward's qkv (of qkv_dtype), out (of out_dtype)
 * and lse; dqkv of dqkv_dtype (bf16: the fp32 sum rounded). A KV head's gradient sums over the
 * query heads that read it. */
lw_status lw_attention_backward(lw_stream *stream, void *dqkv, lw_dtype dqkv_dtype, float *scratch,
                                const float *dout, const void *qkv, lw_dtype qkv_dtype,
                                const void *out, lw_dtype out_dtype, const float *lse, int64_t b,
                                int64_t t, int64_t c, int64_t nh, int64_t nkv, int64_t window);

/* ---- the LM head: logits and softmax cross-entropy ------------------------------------------ *
 * logits = h[n, c] w[v, c]^T, formed a chunk of rows at a time in scratch (never n x v at once
 * unless that fits one chunk), in logits_dtype (fp32, or bf16 with fp32 statistics); the
 * backward takes the forward's. softcap > 0 caps every logit at softcap tanh(logit / softcap)
 * (lw_softcap_forward's formula, in fp32) before the softmax, and the backward takes the cap's
 * slope; 0 leaves them as they are. Rows whose target is outside [0, v) are ignored. */

/* Floats of scratch the LM head needs for n rows and v vocabulary rows. */
int64_t lw_cross_entropy_scratch_floats(lw_stream *stream, int64_t n, int64_t v);
/* losses[n] = -log softmax(logits)[target], lse[n] each row's log-sum-exp; [out] *loss (host):
 * the mean over counted rows; waits for the stream. */
lw_status lw_cross_entropy_forward(lw_stream *stream, float *losses, float *lse, float *scratch,
                                   const float *h, const void *w, lw_dtype w_dtype,
                                   lw_dtype logits_dtype, float softcap, const int32_t *targets,
                                   int64_t n, int64_t c, int64_t v, double *loss);
/* Backward of loss_scale * (mean loss), after the forward of the same h, w, softcap, targets
 * with its scratch untouched: dlogits = loss_scale * (softmax - onehot) / count (times the cap's
 * slope 1 - (z / softcap)^2 at each capped logit z), dh[n, c] += dlogits w (dh optional),
 * dw[v, c] += dlogits^T h. */
lw_status lw_cross_entropy_backward(lw_stream *stream, float *dh, float *dw, float *scratch,
                                    const float *h, const void *w, lw_dtype w_dtype,
                                    lw_dtype logits_dtype, float softcap, const int32_t *targets,
                                    const float *lse, int64_t n, int64_t c, int64_t v,
                                    float loss_scale);

/* ---- tensor parallelism: the vocabulary-parallel embedding and LM head ----------------------- *
 * Each rank of a TP group holds rows [first, first + rows) of the vocabulary's tables; the
 * caller's collectives between these calls make the results the one-rank kernels'. Rows at or
 * past vocab are padding: never looked up, their logits masked. */

/* y[b, t, c] = wte[tokens[b, t] - first, :] for tokens in [first, first + rows), else 0, plus
 * wpe[t, :] (optional: one rank passes it). wte: [rows, c]. */
lw_status lw_embedding_range_forward(lw_stream *stream, float *y, const int32_t *tokens,
                                     const void *wte, const void *wpe, lw_dtype w_dtype,
                                     int64_t first, int64_t rows, int64_t b, int64_t t, int64_t c);
/* dwte[tokens[b, t] - first, :] += dy[b, t, :] for tokens in [first, first + rows), in the
 * order of lw_embedding_backward; dwpe[t, :] += dy[b, t, :] (optional). */
lw_status lw_embedding_range_backward(lw_stream *stream, float *dwte, float *dwpe, const float *dy,
                                      const int32_t *tokens, int64_t first, int64_t rows, int64_t b,
                                      int64_t t, int64_t c);
/* This rank's softmax statistics for vocabulary rows [first, first + v): stats[3, n] = each
 * row's largest logit here, its sum of exp(logit - max), and the target's logit when held here
 * (else 0), of the capped logits with softcap > 0 (as lw_cross_entropy_forward's). Scratch as
 * lw_cross_entropy_forward's. */
lw_status lw_cross_entropy_partial_forward(lw_stream *stream, float *stats, float *scratch,
                                           const float *h, const void *w, lw_dtype w_dtype,
                                           lw_dtype logits_dtype, float softcap,
                                           const int32_t *targets, int64_t n, int64_t c, int64_t v,
                                           int64_t first, int64_t vocab);
/* The group's stats[parts, 3, n] (all ranks', in rank order) combined into lse[n] and
 * losses[n]; [out] *loss (host): the mean over counted rows; waits for the stream. The same on
 * every rank, bit for bit. */
lw_status lw_cross_entropy_combine(lw_stream *stream, float *losses, float *lse, const float *stats,
                                   int64_t parts, const int32_t *targets, int64_t n, int64_t vocab,
                                   double *loss);
/* Backward of loss_scale * (mean loss) on this rank's rows, after lw_cross_entropy_combine and
 * with the partial forward's scratch untouched (and its softcap): dh[n, c] += this rank's share
 * (dh optional), dw[v, c] += dlogits^T h. */
lw_status lw_cross_entropy_partial_backward(lw_stream *stream, float *dh, float *dw, float *scratch,
                                            const float *h, const void *w, lw_dtype w_dtype,
                                            lw_dtype logits_dtype, float softcap,
                                            const int32_t *targets, const float *lse, int64_t n,
                                            int64_t c, int64_t v, int64_t first, int64_t vocab,
                                            float loss_scale);

/* ---- a mixture of experts ---------------------------------------------------------------------
 * n tokens, e experts, each token sent to k of them. The token permutation (tokens sorted by
 * expert) is the caller's, built from experts; rows move with gather and combine. Routing sizes
 * are checked (n >= 0, 1 <= k <= e); indices are trusted to lie in the arrays they index. */

/* probs[n, e] = row softmax of logits[n, e]; experts[n, k] = each row's k largest logits, best
 * first, ties to the lower index; weights[n, k] = their probabilities renormalised to sum 1. */
lw_status lw_moe_router_forward(lw_stream *stream, int32_t *experts, float *weights, float *probs,
                                const float *logits, int64_t n, int64_t e, int64_t k);
/* dlogits[n, e] += the gradient through the weights and the softmax, from dweights[n, k] and
 * dprobs[n, e] (optional: the auxiliary loss's), given the forward's probs and experts. */
lw_status lw_moe_router_backward(lw_stream *stream, float *dlogits, const float *dweights,
                                 const float *dprobs, const float *probs, const int32_t *experts,
                                 int64_t n, int64_t e, int64_t k);
/* The load-balancing loss (Switch Transformer's): coef * e * sum_j f_j P_j, f_j = the share of
 * experts[n, k] equal to j, P_j = the mean of probs[:, j]. [out] *loss (host; 0 for n = 0);
 * waits for the stream. */
lw_status lw_moe_aux_loss_forward(lw_stream *stream, const float *probs, const int32_t *experts,
                                  int64_t n, int64_t e, int64_t k, float coef, double *loss);
/* dprobs[n, e] += scale * coef * e * f_j / n in column j (f held constant). */
lw_status lw_moe_aux_loss_backward(lw_stream *stream, float *dprobs, const int32_t *experts,
                                   int64_t n, int64_t e, int64_t k, float coef, float scale);

/* out[i, :] = x[rows[i], :] for i < m (c columns): the tokens' rows in expert order. */
lw_status lw_gather_forward(lw_stream *stream, float *out, const float *x, const int32_t *rows,
                            int64_t m, int64_t c);
/* dx[rows[i], :] += dout[i, :]; a row listed several times sums in the order of i. */
lw_status lw_gather_backward(lw_stream *stream, float *dx, const float *dout, const int32_t *rows,
                             int64_t m, int64_t c);
/* y[rows[i], :] += w[i] * src[i, :] for i < m, in the order of i: the experts' outputs weighted
 * back into token order. */
lw_status lw_combine_forward(lw_stream *stream, float *y, const float *src, const float *w,
                             const int32_t *rows, int64_t m, int64_t c);
/* dsrc[i, :] += w[i] * dy[rows[i], :]; dw[i] += dot(src[i, :], dy[rows[i], :]) (dsrc and dw
 * each optional). */
lw_status lw_combine_backward(lw_stream *stream, float *dsrc, float *dw, const float *dy,
                              const float *src, const float *w, const int32_t *rows, int64_t m,
                              int64_t c);

/* ---- rotary position embeddings and per-head RMS norm (QK norm) ---------------------------- *
 * In place on n_heads heads of hd elements each, side by side from column col0 of rows that lie
 * row_stride elements apart (fp32 or bf16 elements, dtype): the Q and K heads of a fused qkv
 * activation [b, t, (n_head + 2 n_kv_head) hd] are col0 0 and n_heads n_head + n_kv_head. The
 * heads must fit the row: col0 + n_heads hd <= row_stride. A bf16 tensor is computed in fp32
 * (angles and sums in double) and rounded once. The conventions: docs/parts.md. */

/* How a head's elements pair up for rotation; frequency i (0 <= i < hd/2) turns pair i. */
typedef enum lw_rope_pairing {
    LW_ROPE_HALVES = 0,     /* element i with i + hd/2 (Hugging Face's LLaMA, nanochat) */
    LW_ROPE_INTERLEAVED = 1 /* element 2i with 2i + 1 (Meta's original LLaMA checkpoints) */
} lw_rope_pairing;

/* "halves", "interleaved"; NULL out of range. [borrowed] static string. */
const char *lw_rope_pairing_name(lw_rope_pairing pairing);
/* [out] *out: the pairing of an exact name; LW_ERR_INVALID naming the word otherwise. */
lw_status lw_rope_pairing_from_name(const char *name, lw_rope_pairing *out);

/* Rotary position embedding in place: row r of the b * t rows is at position p = (r mod t) +
 * pos0, and pair i (a, b) of each head becomes (a cos - b sin, b cos + a sin) at the angle
 * p * base^(-2i / hd) (Hugging Face's and Meta's direction). hd even, base > 0. */
lw_status lw_rope_forward(lw_stream *stream, void *x, lw_dtype dtype, int64_t b, int64_t t,
                          int64_t pos0, int64_t row_stride, int64_t col0, int64_t n_heads,
                          int64_t hd, float base, lw_rope_pairing pairing);
/* Its backward, the inverse rotation of the gradient in place (the forward at minus the
 * angle): dx OVERWRITES dy, not accumulated. It is also nanochat's forward. */
lw_status lw_rope_backward(lw_stream *stream, void *dx, lw_dtype dtype, int64_t b, int64_t t,
                           int64_t pos0, int64_t row_stride, int64_t col0, int64_t n_heads,
                           int64_t hd, float base, lw_rope_pairing pairing);

/* Parameter-free RMS norm of each head in place, over rows rows: x = x * rstd, with
 * rstd[rows, n_heads] = 1 / sqrt(mean(x^2) + eps) saved (fp32; the mean in double). eps >= 0. */
lw_status lw_head_rmsnorm_forward(lw_stream *stream, void *x, lw_dtype dtype, float *rstd,
                                  int64_t rows, int64_t row_stride, int64_t col0, int64_t n_heads,
                                  int64_t hd, float eps);
/* Its backward in place, from the forward's output y (same layout, of y_dtype) and rstd: dx =
 * rstd (dy - y mean(dy y)) per head OVERWRITES dy (of dx_dtype), not accumulated. */
lw_status lw_head_rmsnorm_backward(lw_stream *stream, void *dx, lw_dtype dx_dtype, const void *y,
                                   lw_dtype y_dtype, const float *rstd, int64_t rows,
                                   int64_t row_stride, int64_t col0, int64_t n_heads, int64_t hd);

/* ---- nanochat's value embeddings and residual scalars ---------------------------------------- *
 * The value embeddings' gate (ResFormer's value residual as nanochat gates it), over n rows: per
 * row r and head h < n_heads, g = scale * sigmoid(z), z = sum_{j < channels} w[h, j] x[r, j]
 * (w [n_heads, channels], x rows x_stride floats apart: the attention's input, of which the
 * first channels columns feed the gate), and the head's hd values of qkv from column col0 + h hd
 * (rows row_stride apart: the V heads of a fused qkv) get += g * ve[r, h hd + d] (ve [n,
 * n_heads hd], the rows' value embeddings). z and sigmoid in double, g rounded once. qkv is
 * of qkv_dtype and x of x_dtype (fp32 or bf16: bf16 is read widened, and a bf16 V value is
 * written as the fp32 sum rounded once to nearest even); ve and w fp32. */
lw_status lw_value_gate_forward(lw_stream *stream, void *qkv, lw_dtype qkv_dtype, const float *ve,
                                const void *x, lw_dtype x_dtype, const float *w, int64_t n,
                                int64_t row_stride, int64_t col0, int64_t x_stride,
                                int64_t n_heads, int64_t hd, int64_t channels, float scale);
/* Its backward from dqkv (the V heads' gradient, same layout and qkv_dtype as qkv):
 * dve[n, n_heads hd] += g dv; dz[n, n_heads] = the gate logits' gradient (written: z's, sum_d dv
 * ve times g (1 - sigmoid), in double, rounded once); dx[r, j < channels] += sum_h dz w[h, j]
 * (the other columns untouched); dw[n_heads, channels] += sum_r dz[r, h] x[r, j], in double in
 * an order fixed by the shape. x of x_dtype; the gradients written fp32. */
lw_status lw_value_gate_backward(lw_stream *stream, float *dve, float *dx, float *dw, float *dz,
                                 const void *dqkv, lw_dtype qkv_dtype, const float *ve,
                                 const void *x, lw_dtype x_dtype, const float *w, int64_t n,
                                 int64_t row_stride, int64_t col0, int64_t x_stride,
                                 int64_t n_heads, int64_t hd, int64_t channels, float scale);

/* A layer's residual scalars: y[n] = a x + b x0, a and b one float each in device memory (the
 * parameters resid_lambdas[i] and x0_lambdas[i]); y may be x. Each product rounded, then the
 * sum. */
lw_status lw_residual_mix_forward(lw_stream *stream, float *y, const float *x, const float *x0,
                                  const float *a, const float *b, int64_t n);
/* dx += a dy, dx0 += b dy, da[0] += sum dy x, db[0] += sum dy x0: the sums in double in an
 * order fixed by n (the same result on every call), rounded once. */
lw_status lw_residual_mix_backward(lw_stream *stream, float *dx, float *dx0, float *da, float *db,
                                   const float *dy, const float *x, const float *x0,
                                   const float *a, const float *b, int64_t n);

/* LW_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* LW_MODEL_KERNELS_API_H */
