/* kernels.c: the public kernels (lw.h: vectors, AdamW, the model's forward and backward), each
 * run by the device of its stream through the device table; a NULL stream is the CPU's. The
 * CPU implementations, the reference every other device is tested against, are in cpu/. */
#include "device/device.h"

lw_status lw_vec_norm_stats(lw_stream *stream, const float *x, int64_t n, double *acc) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    if (s->device->ops->vec_norm_stats == NULL) return lwi_device_missing(s, "vec_norm_stats");
    return s->device->ops->vec_norm_stats(s, x, n, acc);
}

lw_status lw_vec_all_finite(lw_stream *stream, const float *x, int64_t n, bool *finite) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    if (s->device->ops->vec_all_finite == NULL) return lwi_device_missing(s, "vec_all_finite");
    return s->device->ops->vec_all_finite(s, x, n, finite);
}

lw_status lw_vec_scale(lw_stream *stream, float *x, int64_t n, float alpha) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    if (s->device->ops->vec_scale == NULL) return lwi_device_missing(s, "vec_scale");
    return s->device->ops->vec_scale(s, x, n, alpha);
}

lw_status lw_vec_add(lw_stream *stream, float *y, const float *a, const float *b, int64_t n) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    if (s->device->ops->vec_add == NULL) return lwi_device_missing(s, "vec_add");
    return s->device->ops->vec_add(s, y, a, b, n);
}

lw_status lw_vec_axpy(lw_stream *stream, float *y, float alpha, const float *x, int64_t n) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    if (s->device->ops->vec_axpy == NULL) return lwi_device_missing(s, "vec_axpy");
    return s->device->ops->vec_axpy(s, y, alpha, x, n);
}

lw_status lwi_adamw_tensors(lw_stream *stream, const lw_adamw_options *opts,
                            const lwi_adamw_tensor *tensors, int32_t count, int64_t t,
                            float grad_scale) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    if (s->device->ops->adamw == NULL) return lwi_device_missing(s, "adamw");
    return count > 0 ? s->device->ops->adamw(s, opts, tensors, count, t, grad_scale) : LW_OK;
}

lw_status lw_adamw_update(lw_stream *stream, const lw_adamw_options *opts, float *w, const float *g,
                          float *m, float *v, int64_t n, int64_t t, float lr, float weight_decay,
                          float grad_scale) {
    const lwi_adamw_tensor x = {w, g, m, v, n, lr, weight_decay};
    return lwi_adamw_tensors(stream, opts, &x, 1, t, grad_scale);
}

lw_status lw_linear_forward(lw_stream *stream, float *y, const float *x, const float *w,
                            const float *b, int64_t n, int64_t in, int64_t out) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    if (s->device->ops->linear_forward == NULL) return lwi_device_missing(s, "linear_forward");
    return s->device->ops->linear_forward(s, y, x, w, b, n, in, out);
}

lw_status lw_linear_backward(lw_stream *stream, float *dx, float *dw, float *db, const float *dy,
                             const float *x, const float *w, int64_t n, int64_t in, int64_t out) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    if (s->device->ops->linear_backward == NULL) return lwi_device_missing(s, "linear_backward");
    return s->device->ops->linear_backward(s, dx, dw, db, dy, x, w, n, in, out);
}

lw_status lw_embedding_forward(lw_stream *stream, float *y, const int32_t *tokens, const float *wte,
                               const float *wpe, int64_t b, int64_t t, int64_t c) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    if (s->device->ops->embedding_forward == NULL)
        return lwi_device_missing(s, "embedding_forward");
    return s->device->ops->embedding_forward(s, y, tokens, wte, wpe, b, t, c);
}

lw_status lw_embedding_backward(lw_stream *stream, float *dwte, float *dwpe, const float *dy,
                                const int32_t *tokens, int64_t b, int64_t t, int64_t c) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    if (s->device->ops->embedding_backward == NULL)
        return lwi_device_missing(s, "embedding_backward");
    return s->device->ops->embedding_backward(s, dwte, dwpe, dy, tokens, b, t, c);
}

lw_status lw_layernorm_forward(lw_stream *stream, float *y, float *mean, float *rstd,
                               const float *x, const float *g, const float *beta, int64_t n,
                               int64_t c, float eps) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    if (s->device->ops->layernorm_forward == NULL)
        return lwi_device_missing(s, "layernorm_forward");
    return s->device->ops->layernorm_forward(s, y, mean, rstd, x, g, beta, n, c, eps);
}

lw_status lw_layernorm_backward(lw_stream *stream, float *dx, float *dg, float *dbeta,
                                const float *dy, const float *x, const float *g, const float *mean,
                                const float *rstd, int64_t n, int64_t c) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    if (s->device->ops->layernorm_backward == NULL)
        return lwi_device_missing(s, "layernorm_backward");
    return s->device->ops->layernorm_backward(s, dx, dg, dbeta, dy, x, g, mean, rstd, n, c);
}

lw_status lw_gelu_forward(lw_stream *stream, float *y, const float *x, int64_t n) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    if (s->device->ops->gelu_forward == NULL) return lwi_device_missing(s, "gelu_forward");
    return s->device->ops->gelu_forward(s, y, x, n);
}

lw_status lw_gelu_backward(lw_stream *stream, float *dx, const float *dy, const float *x,
                           int64_t n) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    if (s->device->ops->gelu_backward == NULL) return lwi_device_missing(s, "gelu_backward");
    return s->device->ops->gelu_backward(s, dx, dy, x, n);
}

int64_t lw_attention_scratch_floats(lw_stream *stream, int64_t b, int64_t t, int64_t c,
                                    int64_t nh) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    if (s->device->ops->attention_scratch_floats == NULL) return 0;
    return s->device->ops->attention_scratch_floats(b, t, c, nh);
}

lw_status lw_attention_forward(lw_stream *stream, float *out, float *lse, float *scratch,
                               const float *qkv, int64_t b, int64_t t, int64_t c, int64_t nh) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    if (s->device->ops->attention_forward == NULL)
        return lwi_device_missing(s, "attention_forward");
    return s->device->ops->attention_forward(s, out, lse, scratch, qkv, b, t, c, nh);
}

lw_status lw_attention_backward(lw_stream *stream, float *dqkv, float *scratch, const float *dout,
                                const float *qkv, const float *out, const float *lse, int64_t b,
                                int64_t t, int64_t c, int64_t nh) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    if (s->device->ops->attention_backward == NULL)
        return lwi_device_missing(s, "attention_backward");
    return s->device->ops->attention_backward(s, dqkv, scratch, dout, qkv, out, lse, b, t, c, nh);
}

int64_t lw_cross_entropy_scratch_floats(lw_stream *stream, int64_t n, int64_t v) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    if (s->device->ops->cross_entropy_scratch_floats == NULL) return 0;
    return s->device->ops->cross_entropy_scratch_floats(n, v);
}

lw_status lw_cross_entropy_forward(lw_stream *stream, float *losses, float *lse, float *scratch,
                                   const float *h, const float *w, const int32_t *targets,
                                   int64_t n, int64_t c, int64_t v, double *loss) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    if (s->device->ops->cross_entropy_forward == NULL)
        return lwi_device_missing(s, "cross_entropy_forward");
    return s->device->ops->cross_entropy_forward(s, losses, lse, scratch, h, w, targets, n, c, v,
                                                 loss);
}

lw_status lw_cross_entropy_backward(lw_stream *stream, float *dh, float *dw, float *scratch,
                                    const float *h, const float *w, const int32_t *targets,
                                    const float *lse, int64_t n, int64_t c, int64_t v,
                                    float loss_scale) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    if (s->device->ops->cross_entropy_backward == NULL)
        return lwi_device_missing(s, "cross_entropy_backward");
    return s->device->ops->cross_entropy_backward(s, dh, dw, scratch, h, w, targets, lse, n, c, v,
                                                  loss_scale);
}

/* The router's and the auxiliary loss's sizes, checked here once for every device. */
static lw_status check_routing(const char *what, int64_t n, int64_t e, int64_t k) {
    if (n < 0) return lwi_fail(LW_ERR_INVALID, "%s: n (%lld) must be >= 0", what, (long long)n);
    if (e < 1)
        return lwi_fail(LW_ERR_INVALID, "%s: the experts (%lld) must be >= 1", what, (long long)e);
    if (k < 1 || k > e)
        return lwi_fail(LW_ERR_INVALID, "%s: k (%lld) must be between 1 and the experts (%lld)",
                        what, (long long)k, (long long)e);
    return LW_OK;
}

lw_status lw_moe_router_forward(lw_stream *stream, int32_t *experts, float *weights, float *probs,
                                const float *logits, int64_t n, int64_t e, int64_t k) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    lw_status st = check_routing("moe_router_forward", n, e, k);
    if (st != LW_OK) return st;
    if (s->device->ops->moe_router_forward == NULL)
        return lwi_device_missing(s, "moe_router_forward");
    return s->device->ops->moe_router_forward(s, experts, weights, probs, logits, n, e, k);
}

lw_status lw_moe_router_backward(lw_stream *stream, float *dlogits, const float *dweights,
                                 const float *dprobs, const float *probs, const int32_t *experts,
                                 int64_t n, int64_t e, int64_t k) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    lw_status st = check_routing("moe_router_backward", n, e, k);
    if (st != LW_OK) return st;
    if (s->device->ops->moe_router_backward == NULL)
        return lwi_device_missing(s, "moe_router_backward");
    return s->device->ops->moe_router_backward(s, dlogits, dweights, dprobs, probs, experts, n, e,
                                               k);
}

lw_status lw_moe_aux_loss_forward(lw_stream *stream, const float *probs, const int32_t *experts,
                                  int64_t n, int64_t e, int64_t k, float coef, double *loss) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    lw_status st = check_routing("moe_aux_loss_forward", n, e, k);
    if (st != LW_OK) return st;
    if (s->device->ops->moe_aux_loss_forward == NULL)
        return lwi_device_missing(s, "moe_aux_loss_forward");
    return s->device->ops->moe_aux_loss_forward(s, probs, experts, n, e, k, coef, loss);
}

lw_status lw_moe_aux_loss_backward(lw_stream *stream, float *dprobs, const int32_t *experts,
                                   int64_t n, int64_t e, int64_t k, float coef, float scale) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    lw_status st = check_routing("moe_aux_loss_backward", n, e, k);
    if (st != LW_OK) return st;
    if (s->device->ops->moe_aux_loss_backward == NULL)
        return lwi_device_missing(s, "moe_aux_loss_backward");
    return s->device->ops->moe_aux_loss_backward(s, dprobs, experts, n, e, k, coef, scale);
}

lw_status lw_gather_forward(lw_stream *stream, float *out, const float *x, const int32_t *rows,
                            int64_t m, int64_t c) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    if (s->device->ops->gather_forward == NULL) return lwi_device_missing(s, "gather_forward");
    return m > 0 && c > 0 ? s->device->ops->gather_forward(s, out, x, rows, m, c) : LW_OK;
}

lw_status lw_gather_backward(lw_stream *stream, float *dx, const float *dout, const int32_t *rows,
                             int64_t m, int64_t c) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    if (s->device->ops->gather_backward == NULL) return lwi_device_missing(s, "gather_backward");
    return m > 0 && c > 0 ? s->device->ops->gather_backward(s, dx, dout, rows, m, c) : LW_OK;
}

lw_status lw_combine_forward(lw_stream *stream, float *y, const float *src, const float *w,
                             const int32_t *rows, int64_t m, int64_t c) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    if (s->device->ops->combine_forward == NULL) return lwi_device_missing(s, "combine_forward");
    return m > 0 && c > 0 ? s->device->ops->combine_forward(s, y, src, w, rows, m, c) : LW_OK;
}

lw_status lw_combine_backward(lw_stream *stream, float *dsrc, float *dw, const float *dy,
                              const float *src, const float *w, const int32_t *rows, int64_t m,
                              int64_t c) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    if (s->device->ops->combine_backward == NULL) return lwi_device_missing(s, "combine_backward");
    return m > 0 && c > 0 ? s->device->ops->combine_backward(s, dsrc, dw, dy, src, w, rows, m, c)
                          : LW_OK;
}

/* The vocabulary range of a tensor-parallel call, checked here once for every device: a range
 * of rows starting at first >= 0, and (cross-entropy) a vocabulary of at least 1. */
static lw_status check_range(const char *what, int64_t first, int64_t rows, int64_t vocab) {
    if (first < 0 || rows < 0)
        return lwi_fail(LW_ERR_INVALID, "%s: the rows [%lld, +%lld) must be a range >= 0", what,
                        (long long)first, (long long)rows);
    if (vocab < 1)
        return lwi_fail(LW_ERR_INVALID, "%s: the vocabulary (%lld) must be >= 1", what,
                        (long long)vocab);
    return LW_OK;
}

lw_status lw_embedding_range_forward(lw_stream *stream, float *y, const int32_t *tokens,
                                     const float *wte, const float *wpe, int64_t first,
                                     int64_t rows, int64_t b, int64_t t, int64_t c) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    lw_status st = check_range("embedding range forward", first, rows, 1);
    if (st != LW_OK) return st;
    if (s->device->ops->embedding_range_forward == NULL)
        return lwi_device_missing(s, "embedding_range_forward");
    return s->device->ops->embedding_range_forward(s, y, tokens, wte, wpe, first, rows, b, t, c);
}

lw_status lw_embedding_range_backward(lw_stream *stream, float *dwte, float *dwpe, const float *dy,
                                      const int32_t *tokens, int64_t first, int64_t rows,
                                      int64_t b, int64_t t, int64_t c) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    lw_status st = check_range("embedding range backward", first, rows, 1);
    if (st != LW_OK) return st;
    if (s->device->ops->embedding_range_backward == NULL)
        return lwi_device_missing(s, "embedding_range_backward");
    return s->device->ops->embedding_range_backward(s, dwte, dwpe, dy, tokens, first, rows, b, t,
                                                    c);
}

lw_status lw_cross_entropy_partial_forward(lw_stream *stream, float *stats, float *scratch,
                                           const float *h, const float *w, const int32_t *targets,
                                           int64_t n, int64_t c, int64_t v, int64_t first,
                                           int64_t vocab) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    lw_status st = check_range("cross-entropy partial forward", first, v, vocab);
    if (st != LW_OK) return st;
    if (s->device->ops->cross_entropy_partial_forward == NULL)
        return lwi_device_missing(s, "cross_entropy_partial_forward");
    return s->device->ops->cross_entropy_partial_forward(s, stats, scratch, h, w, targets, n, c, v,
                                                         first, vocab);
}

lw_status lw_cross_entropy_combine(lw_stream *stream, float *losses, float *lse,
                                   const float *stats, int64_t parts, const int32_t *targets,
                                   int64_t n, int64_t vocab, double *loss) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    if (parts < 1)
        return lwi_fail(LW_ERR_INVALID, "cross-entropy combine: parts (%lld) must be >= 1",
                        (long long)parts);
    lw_status st = check_range("cross-entropy combine", 0, 0, vocab);
    if (st != LW_OK) return st;
    if (s->device->ops->cross_entropy_combine == NULL)
        return lwi_device_missing(s, "cross_entropy_combine");
    return s->device->ops->cross_entropy_combine(s, losses, lse, stats, parts, targets, n, vocab,
                                                 loss);
}

lw_status lw_cross_entropy_partial_backward(lw_stream *stream, float *dh, float *dw,
                                            float *scratch, const float *h, const float *w,
                                            const int32_t *targets, const float *lse, int64_t n,
                                            int64_t c, int64_t v, int64_t first, int64_t vocab,
                                            float loss_scale) {
    lw_stream *s = lwi_stream_or_cpu(stream);
    lw_status st = check_range("cross-entropy partial backward", first, v, vocab);
    if (st != LW_OK) return st;
    if (s->device->ops->cross_entropy_partial_backward == NULL)
        return lwi_device_missing(s, "cross_entropy_partial_backward");
    return s->device->ops->cross_entropy_partial_backward(s, dh, dw, scratch, h, w, targets, lse, n,
                                                          c, v, first, vocab, loss_scale);
}
