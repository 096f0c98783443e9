/* cpu.h: the CPU device's kernels, one family per file of device/cpu/, each the reference
 * implementation of its device-table entry (device.h has what each computes). Host memory;
 * the stream is the identity (work runs when called). Not public API. */
#ifndef LW_DEVICE_CPU_H
#define LW_DEVICE_CPU_H

#include "device/device.h"

/* Sum of squares in double (four partial sums): the norms of the gradient and of Muon's update. */
double lwi_cpu_sum_squares(const float *x, int64_t n);

lw_status lwi_cpu_vec_norm_stats(lw_stream *stream, const float *x, int64_t n, double *acc);
lw_status lwi_cpu_vec_all_finite(lw_stream *stream, const float *x, int64_t n, bool *finite);
lw_status lwi_cpu_vec_scale(lw_stream *stream, float *x, int64_t n, float alpha);
lw_status lwi_cpu_vec_add(lw_stream *stream, float *y, const float *a, const float *b, int64_t n);
lw_status lwi_cpu_vec_axpy(lw_stream *stream, float *y, float alpha, const float *x, int64_t n);
lw_status lwi_cpu_muon_momentum(lw_stream *stream, const lwi_muon_step *k, float *w, const float *g,
                                float *m, float *u, int64_t n);
lw_status lwi_cpu_newton_schulz(lw_stream *stream, const lwi_ns_plan *plan, const float *u,
                                float *x, int64_t batch, int64_t rows, int64_t cols);
lw_status lwi_cpu_ns_gram(lw_stream *stream, const float *x, float *a, int64_t p, int64_t q,
                          bool transposed);
lw_status lwi_cpu_ns_step(lw_stream *stream, const float abc[3], float *a, float *x, int64_t p,
                          int64_t q, bool transposed, float *work);

lw_status lwi_cpu_adamw(lw_stream *stream, const lw_adamw_options *o,
                        const lwi_adamw_tensor *tensors, int32_t count, int64_t t,
                        float grad_scale);
lw_status lwi_cpu_linear_forward(lw_stream *stream, float *y, const float *x, const float *w,
                                 const float *b, int64_t n, int64_t in, int64_t out);
lw_status lwi_cpu_linear_backward(lw_stream *stream, float *dx, float *dw, float *db,
                                  const float *dy, const float *x, const float *w, int64_t n,
                                  int64_t in, int64_t out);
lw_status lwi_cpu_embedding_forward(lw_stream *stream, float *y, const int32_t *tokens,
                                    const float *wte, const float *wpe, int64_t b, int64_t t,
                                    int64_t c);
lw_status lwi_cpu_embedding_backward(lw_stream *stream, float *dwte, float *dwpe, const float *dy,
                                     const int32_t *tokens, int64_t b, int64_t t, int64_t c);
lw_status lwi_cpu_layernorm_forward(lw_stream *stream, float *y, float *mean, float *rstd,
                                    const float *x, const float *g, const float *beta, int64_t n,
                                    int64_t c, float eps);
lw_status lwi_cpu_layernorm_backward(lw_stream *stream, float *dx, float *dg, float *dbeta,
                                     const float *dy, const float *x, const float *g,
                                     const float *mean, const float *rstd, int64_t n, int64_t c);
lw_status lwi_cpu_gelu_forward(lw_stream *stream, float *y, const float *x, int64_t n);
lw_status lwi_cpu_gelu_backward(lw_stream *stream, float *dx, const float *dy, const float *x,
                                int64_t n);
int64_t lwi_cpu_attention_scratch_floats(int64_t b, int64_t t, int64_t c, int64_t nh);
lw_status lwi_cpu_attention_forward(lw_stream *stream, float *out, float *lse, float *scratch,
                                    const float *qkv, int64_t b, int64_t t, int64_t c,
                                    int64_t nh);
lw_status lwi_cpu_attention_backward(lw_stream *stream, float *dqkv, float *scratch,
                                     const float *dout, const float *qkv, const float *out,
                                     const float *lse, int64_t b, int64_t t, int64_t c,
                                     int64_t nh);
int64_t lwi_cpu_cross_entropy_scratch_floats(int64_t n, int64_t v);
lw_status lwi_cpu_cross_entropy_forward(lw_stream *stream, float *losses, float *lse,
                                        float *scratch, const float *h, const float *w,
                                        const int32_t *targets, int64_t n, int64_t c, int64_t v,
                                        double *loss);
lw_status lwi_cpu_cross_entropy_backward(lw_stream *stream, float *dh, float *dw, float *scratch,
                                         const float *h, const float *w, const int32_t *targets,
                                         const float *lse, int64_t n, int64_t c, int64_t v,
                                         float loss_scale);
/* embedding.c and cross_entropy.c: tensor parallelism's vocabulary-parallel forms */
lw_status lwi_cpu_embedding_range_forward(lw_stream *stream, float *y, const int32_t *tokens,
                                          const float *wte, const float *wpe, int64_t first,
                                          int64_t rows, int64_t b, int64_t t, int64_t c);
lw_status lwi_cpu_embedding_range_backward(lw_stream *stream, float *dwte, float *dwpe,
                                           const float *dy, const int32_t *tokens, int64_t first,
                                           int64_t rows, int64_t b, int64_t t, int64_t c);
lw_status lwi_cpu_cross_entropy_partial_forward(lw_stream *stream, float *stats, float *scratch,
                                                const float *h, const float *w,
                                                const int32_t *targets, int64_t n, int64_t c,
                                                int64_t v, int64_t first, int64_t vocab);
lw_status lwi_cpu_cross_entropy_combine(lw_stream *stream, float *losses, float *lse,
                                        const float *stats, int64_t parts, const int32_t *targets,
                                        int64_t n, int64_t vocab, double *loss);
lw_status lwi_cpu_cross_entropy_partial_backward(lw_stream *stream, float *dh, float *dw,
                                                 float *scratch, const float *h, const float *w,
                                                 const int32_t *targets, const float *lse,
                                                 int64_t n, int64_t c, int64_t v, int64_t first,
                                                 int64_t vocab, float loss_scale);
/* moe.c and gather.c: a mixture of experts' router, its load-balancing loss, and rows moved by
 * an index list */
lw_status lwi_cpu_moe_router_forward(lw_stream *stream, int32_t *experts, float *weights,
                                     float *probs, const float *logits, int64_t n, int64_t e,
                                     int64_t k);
lw_status lwi_cpu_moe_router_backward(lw_stream *stream, float *dlogits, const float *dweights,
                                      const float *dprobs, const float *probs,
                                      const int32_t *experts, int64_t n, int64_t e, int64_t k);
lw_status lwi_cpu_moe_aux_loss_forward(lw_stream *stream, const float *probs,
                                       const int32_t *experts, int64_t n, int64_t e, int64_t k,
                                       float coef, double *loss);
lw_status lwi_cpu_moe_aux_loss_backward(lw_stream *stream, float *dprobs, const int32_t *experts,
                                        int64_t n, int64_t e, int64_t k, float coef, float scale);
lw_status lwi_cpu_gather_forward(lw_stream *stream, float *out, const float *x, const int32_t *rows,
                                 int64_t m, int64_t c);
lw_status lwi_cpu_gather_backward(lw_stream *stream, float *dx, const float *dout,
                                  const int32_t *rows, int64_t m, int64_t c);
lw_status lwi_cpu_combine_forward(lw_stream *stream, float *y, const float *src, const float *w,
                                  const int32_t *rows, int64_t m, int64_t c);
lw_status lwi_cpu_combine_backward(lw_stream *stream, float *dsrc, float *dw, const float *dy,
                                   const float *src, const float *w, const int32_t *rows, int64_t m,
                                   int64_t c);

#endif
