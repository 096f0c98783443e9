/* kernel_list.h: every kernel of the device table, once, in ABI order. From these lists come the
 * table's members (device.h), the dispatchers with their checks (kernels.c), the CPU's and the
 * CUDA library's declarations (cpu/cpu.h, src/cuda/cuda.h) and their tables, and the test
 * harness's list of what to check (tests/kernels/). Adding a kernel is a line here, its
 * lw.h declaration (a public one), its CPU file, its CUDA file and its harness case; a device
 * that lacks one fails by name when it is called.
 *
 * X-macros rather than a generated header: the lists are C the compiler reads as it is (no
 * generator in the build, nothing to keep in sync with a template), and a missing piece (a CPU
 * function, a harness case) is a build error naming it, as ggml keeps its op list.
 *
 * Each entry is X(name, params, args, check):
 *   name    the table's member; lwi_cpu_<name> on the CPU, lwc_<name> in the CUDA library;
 *   params  its parameters, the stream first (always `s`);
 *   args    the same names, as a call passes them;
 *   check   what the dispatcher checks before any device runs it: an lw_status expression over
 *           the parameters (LW_OK: nothing to check), or LWI_NOTHING_TO_DO when there is no work
 *           (the call then returns LW_OK on every device without reaching it). Checks that hang
 *           on a device's limits (a GPU's shared memory) stay in that device's code. */
#ifndef LW_DEVICE_KERNEL_LIST_H
#define LW_DEVICE_KERNEL_LIST_H

/* The kernels with a public dispatcher of the same name and parameters: lw_<name>, declared in
 * the layer headers (lw_optim_kernels.h, lw_model_kernels.h). */
#define LWI_PUBLIC_KERNELS(X)                                                                      \
    X(vec_norm_stats, (lw_stream * s, const float *x, int64_t n, double *acc), (s, x, n, acc),     \
      LW_OK)                                                                                       \
    X(vec_all_finite, (lw_stream * s, const float *x, int64_t n, bool *finite),                    \
      (s, x, n, finite), LW_OK)                                                                    \
    X(vec_scale, (lw_stream * s, float *x, int64_t n, float alpha), (s, x, n, alpha), LW_OK)       \
    X(vec_add, (lw_stream * s, float *y, const float *a, const float *b, int64_t n),               \
      (s, y, a, b, n), LW_OK)                                                                      \
    X(vec_axpy, (lw_stream * s, float *y, float alpha, const float *x, int64_t n),                 \
      (s, y, alpha, x, n), LW_OK)                                                                  \
    X(linear_forward,                                                                              \
      (lw_stream * s, void *y, lw_dtype y_dtype, const void *x, lw_dtype x_dtype, const void *w,   \
       lw_dtype w_dtype, const float *b, int64_t n, int64_t in, int64_t out),                      \
      (s, y, y_dtype, x, x_dtype, w, w_dtype, b, n, in, out),                                      \
      lwi_check_linear("linear forward", "output", y_dtype, x_dtype, w_dtype))                     \
    X(linear_backward,                                                                             \
      (lw_stream * s, float *dx, float *dw, float *db, const void *dy, lw_dtype dy_dtype,          \
       const void *x, lw_dtype x_dtype, const void *w, lw_dtype w_dtype, int64_t n, int64_t in,    \
       int64_t out),                                                                               \
      (s, dx, dw, db, dy, dy_dtype, x, x_dtype, w, w_dtype, n, in, out),                           \
      lwi_check_linear("linear backward", "output gradient", dy_dtype, x_dtype, w_dtype))          \
    X(linear_gelu_forward,                                                                         \
      (lw_stream * s, void *y, void *pre, lw_dtype dtype, const void *x, lw_dtype x_dtype,         \
       const void *w, lw_dtype w_dtype, const float *b, int64_t n, int64_t in, int64_t out),       \
      (s, y, pre, dtype, x, x_dtype, w, w_dtype, b, n, in, out),                                   \
      lwi_check_linear("linear gelu forward", "output", dtype, x_dtype, w_dtype))                  \
    X(linear_gelu_backward,                                                                        \
      (lw_stream * s, void *dpre, lw_dtype dtype, float *dw, float *db, const void *dy,            \
       lw_dtype dy_dtype, const void *x, lw_dtype x_dtype, const void *w, lw_dtype w_dtype,        \
       const void *pre, int64_t n, int64_t in, int64_t out),                                       \
      (s, dpre, dtype, dw, db, dy, dy_dtype, x, x_dtype, w, w_dtype, pre, n, in, out),             \
      lwi_check_linear_gelu("linear gelu backward", dtype, dy_dtype, x_dtype, w_dtype))            \
    X(layernorm_forward,                                                                           \
      (lw_stream * s, void *y, lw_dtype y_dtype, float *mean, float *rstd, const float *x,         \
       const float *g, const float *beta, int64_t n, int64_t c, float eps),                        \
      (s, y, y_dtype, mean, rstd, x, g, beta, n, c, eps),                                          \
      lwi_check_activations("layer norm forward", y_dtype))                                        \
    X(layernorm_backward,                                                                          \
      (lw_stream * s, float *dx, float *dg, float *dbeta, const float *dy, const float *x,         \
       const float *g, const float *mean, const float *rstd, int64_t n, int64_t c),                \
      (s, dx, dg, dbeta, dy, x, g, mean, rstd, n, c), LW_OK)                                       \
    X(gelu_forward,                                                                                \
      (lw_stream * s, void *y, lw_dtype y_dtype, const void *x, lw_dtype x_dtype, int64_t n),      \
      (s, y, y_dtype, x, x_dtype, n), lwi_check_gelu("gelu forward", "output", y_dtype, x_dtype))  \
    X(gelu_backward,                                                                               \
      (lw_stream * s, void *dx, lw_dtype dx_dtype, const float *dy, const void *x,                 \
       lw_dtype x_dtype, int64_t n),                                                               \
      (s, dx, dx_dtype, dy, x, x_dtype, n),                                                        \
      lwi_check_gelu("gelu backward", "input gradient", dx_dtype, x_dtype))                        \
    X(attention_forward,                                                                           \
      (lw_stream * s, void *out, lw_dtype out_dtype, float *lse, float *head_max, float *scratch,  \
       const void *qkv, lw_dtype qkv_dtype, int64_t b, int64_t t, int64_t c, int64_t nh,           \
       int64_t nkv, int64_t window),                                                               \
      (s, out, out_dtype, lse, head_max, scratch, qkv, qkv_dtype, b, t, c, nh, nkv, window),       \
      lwi_check_attention("attention forward", qkv_dtype, out_dtype, LW_DTYPE_F32, b, t, c, nh,    \
                          nkv, window))                                                            \
    X(attention_backward,                                                                          \
      (lw_stream * s, void *dqkv, lw_dtype dqkv_dtype, float *scratch, const float *dout,          \
       const void *qkv, lw_dtype qkv_dtype, const void *out, lw_dtype out_dtype, const float *lse, \
       int64_t b, int64_t t, int64_t c, int64_t nh, int64_t nkv, int64_t window),                  \
      (s, dqkv, dqkv_dtype, scratch, dout, qkv, qkv_dtype, out, out_dtype, lse, b, t, c, nh, nkv,  \
       window),                                                                                    \
      lwi_check_attention("attention backward", qkv_dtype, out_dtype, dqkv_dtype, b, t, c, nh,     \
                          nkv, window))                                                            \
    X(cross_entropy_forward,                                                                       \
      (lw_stream * s, float *losses, float *lse, float *scratch, const float *h, const void *w,    \
       lw_dtype w_dtype, lw_dtype logits_dtype, float softcap, const int32_t *targets, int64_t n,  \
       int64_t c, int64_t v, double *loss),                                                        \
      (s, losses, lse, scratch, h, w, w_dtype, logits_dtype, softcap, targets, n, c, v, loss),     \
      lwi_check_head("cross-entropy forward", w_dtype, logits_dtype, softcap))                     \
    X(cross_entropy_backward,                                                                      \
      (lw_stream * s, float *dh, float *dw, float *scratch, const float *h, const void *w,         \
       lw_dtype w_dtype, lw_dtype logits_dtype, float softcap, const int32_t *targets,             \
       const float *lse, int64_t n, int64_t c, int64_t v, float loss_scale),                       \
      (s, dh, dw, scratch, h, w, w_dtype, logits_dtype, softcap, targets, lse, n, c, v,            \
       loss_scale),                                                                                \
      lwi_check_head("cross-entropy backward", w_dtype, logits_dtype, softcap))                    \
    X(moe_router_forward,                                                                          \
      (lw_stream * s, int32_t *experts, float *weights, float *probs, const float *logits,         \
       int64_t n, int64_t e, int64_t k),                                                           \
      (s, experts, weights, probs, logits, n, e, k),                                               \
      lwi_check_routing("moe_router_forward", n, e, k))                                            \
    X(moe_router_backward,                                                                         \
      (lw_stream * s, float *dlogits, const float *dweights, const float *dprobs,                  \
       const float *probs, const int32_t *experts, int64_t n, int64_t e, int64_t k),               \
      (s, dlogits, dweights, dprobs, probs, experts, n, e, k),                                     \
      lwi_check_routing("moe_router_backward", n, e, k))                                           \
    X(moe_aux_loss_forward,                                                                        \
      (lw_stream * s, const float *probs, const int32_t *experts, int64_t n, int64_t e, int64_t k, \
       float coef, double *loss),                                                                  \
      (s, probs, experts, n, e, k, coef, loss),                                                    \
      lwi_check_routing("moe_aux_loss_forward", n, e, k))                                          \
    X(moe_aux_loss_backward,                                                                       \
      (lw_stream * s, float *dprobs, const int32_t *experts, int64_t n, int64_t e, int64_t k,      \
       float coef, float scale),                                                                   \
      (s, dprobs, experts, n, e, k, coef, scale),                                                  \
      lwi_check_routing("moe_aux_loss_backward", n, e, k))                                         \
    X(gather_forward,                                                                              \
      (lw_stream * s, float *out, const float *x, const int32_t *rows, int64_t m, int64_t c),      \
      (s, out, x, rows, m, c), lwi_work_if(m > 0 && c > 0))                                        \
    X(gather_backward,                                                                             \
      (lw_stream * s, float *dx, const float *dout, const int32_t *rows, int64_t m, int64_t c),    \
      (s, dx, dout, rows, m, c), lwi_work_if(m > 0 && c > 0))                                      \
    X(combine_forward,                                                                             \
      (lw_stream * s, float *y, const float *src, const float *w, const int32_t *rows, int64_t m,  \
       int64_t c),                                                                                 \
      (s, y, src, w, rows, m, c), lwi_work_if(m > 0 && c > 0))                                     \
    X(combine_backward,                                                                            \
      (lw_stream * s, float *dsrc, float *dw, const float *dy, const float *src, const float *w,   \
       const int32_t *rows, int64_t m, int64_t c),                                                 \
      (s, dsrc, dw, dy, src, w, rows, m, c), lwi_work_if(m > 0 && c > 0))                          \
    X(embedding_range_forward,                                                                     \
      (lw_stream * s, float *y, const int32_t *tokens, const void *wte, const void *wpe,           \
       lw_dtype w_dtype, int64_t first, int64_t rows, int64_t b, int64_t t, int64_t c),            \
      (s, y, tokens, wte, wpe, w_dtype, first, rows, b, t, c),                                     \
      lwi_check_weight_range("embedding range forward", w_dtype, first, rows, 1))                  \
    X(embedding_range_backward,                                                                    \
      (lw_stream * s, float *dwte, float *dwpe, const float *dy, const int32_t *tokens,            \
       int64_t first, int64_t rows, int64_t b, int64_t t, int64_t c),                              \
      (s, dwte, dwpe, dy, tokens, first, rows, b, t, c),                                           \
      lwi_check_range("embedding range backward", first, rows, 1))                                 \
    X(cross_entropy_partial_forward,                                                               \
      (lw_stream * s, float *stats, float *scratch, const float *h, const void *w,                 \
       lw_dtype w_dtype, lw_dtype logits_dtype, float softcap, const int32_t *targets, int64_t n,  \
       int64_t c, int64_t v, int64_t first, int64_t vocab),                                        \
      (s, stats, scratch, h, w, w_dtype, logits_dtype, softcap, targets, n, c, v, first, vocab),   \
      lwi_check_head_range("cross-entropy partial forward", w_dtype, logits_dtype, softcap, first,  \
                           v, vocab))                                                              \
    X(cross_entropy_combine,                                                                       \
      (lw_stream * s, float *losses, float *lse, const float *stats, int64_t parts,                \
       const int32_t *targets, int64_t n, int64_t vocab, double *loss),                            \
      (s, losses, lse, stats, parts, targets, n, vocab, loss),                                     \
      lwi_check_parts("cross-entropy combine", parts, vocab))                                      \
    X(cross_entropy_partial_backward,                                                              \
      (lw_stream * s, float *dh, float *dw, float *scratch, const float *h, const void *w,         \
       lw_dtype w_dtype, lw_dtype logits_dtype, float softcap, const int32_t *targets,             \
       const float *lse, int64_t n, int64_t c, int64_t v, int64_t first, int64_t vocab,            \
       float loss_scale),                                                                          \
      (s, dh, dw, scratch, h, w, w_dtype, logits_dtype, softcap, targets, lse, n, c, v, first,     \
       vocab, loss_scale),                                                                         \
      lwi_check_head_range("cross-entropy partial backward", w_dtype, logits_dtype, softcap,       \
                           first, v, vocab))                                                       \
    X(vec_to_bf16, (lw_stream * s, uint16_t *y, const float *x, int64_t n), (s, y, x, n),          \
      lwi_work_if(n > 0))                                                                          \
    X(vec_from_bf16, (lw_stream * s, float *y, const uint16_t *x, int64_t n), (s, y, x, n),        \
      lwi_work_if(n > 0))                                                                          \
    X(add_layernorm_forward,                                                                       \
      (lw_stream * s, float *sum, void *y, lw_dtype y_dtype, float *mean, float *rstd,             \
       const float *a, const float *b, const float *g, const float *beta, int64_t n, int64_t c,    \
       float eps),                                                                                 \
      (s, sum, y, y_dtype, mean, rstd, a, b, g, beta, n, c, eps),                                  \
      lwi_check_activations("add layer norm forward", y_dtype))                                    \
    X(add_layernorm_backward,                                                                      \
      (lw_stream * s, float *dx, float *dg, float *dbeta, const float *dres, const float *dy,      \
       const float *x, const float *g, const float *mean, const float *rstd, int64_t n,            \
       int64_t c),                                                                                 \
      (s, dx, dg, dbeta, dres, dy, x, g, mean, rstd, n, c), lwi_work_if(n > 0 && c > 0))      \
    /* LLaMA's and nanochat's parts: RMSNorm, ReLU^2, SwiGLU, the logits' tanh softcap */         \
    X(rmsnorm_forward,                                                                             \
      (lw_stream * s, void *y, lw_dtype y_dtype, float *rstd, const float *x, const float *g,     \
       int64_t n, int64_t c, float eps),                                                           \
      (s, y, y_dtype, rstd, x, g, n, c, eps),                                                      \
      lwi_check_rmsnorm_forward("rms norm forward", y_dtype, eps))                                 \
    X(rmsnorm_backward,                                                                            \
      (lw_stream * s, float *dx, float *dg, const float *dy, const float *x, const float *g,      \
       const float *rstd, int64_t n, int64_t c),                                                   \
      (s, dx, dg, dy, x, g, rstd, n, c),                                                           \
      lwi_check_rmsnorm_backward("rms norm backward", g, dg))                                      \
    X(relu2_forward,                                                                               \
      (lw_stream * s, void *y, lw_dtype y_dtype, const void *x, lw_dtype x_dtype, int64_t n),      \
      (s, y, y_dtype, x, x_dtype, n), lwi_check_gelu("relu2 forward", "output", y_dtype, x_dtype)) \
    X(relu2_backward,                                                                              \
      (lw_stream * s, void *dx, lw_dtype dx_dtype, const float *dy, const void *x,                 \
       lw_dtype x_dtype, int64_t n),                                                               \
      (s, dx, dx_dtype, dy, x, x_dtype, n),                                                        \
      lwi_check_gelu("relu2 backward", "input gradient", dx_dtype, x_dtype))                       \
    X(swiglu_forward,                                                                              \
      (lw_stream * s, void *y, lw_dtype y_dtype, const void *x, lw_dtype x_dtype, int64_t n,       \
       int64_t c),                                                                                 \
      (s, y, y_dtype, x, x_dtype, n, c),                                                           \
      lwi_check_swiglu("swiglu forward", "output", y_dtype, x_dtype, n, c))                        \
    X(swiglu_backward,                                                                             \
      (lw_stream * s, void *dx, lw_dtype dx_dtype, const float *dy, const void *x,                 \
       lw_dtype x_dtype, int64_t n, int64_t c),                                                    \
      (s, dx, dx_dtype, dy, x, x_dtype, n, c),                                                     \
      lwi_check_swiglu("swiglu backward", "input gradient", dx_dtype, x_dtype, n, c))              \
    X(softcap_forward, (lw_stream * s, float *y, const float *x, int64_t n, float cap),            \
      (s, y, x, n, cap), lwi_check_softcap("softcap forward", n, cap))                             \
    X(softcap_backward,                                                                            \
      (lw_stream * s, float *dx, const float *dy, const float *y, int64_t n, float cap),           \
      (s, dx, dy, y, n, cap), lwi_check_softcap("softcap backward", n, cap))                       \
    /* rotary position embeddings and per-head RMS norm, in place on heads of a strided row */   \
    X(rope_forward,                                                                                \
      (lw_stream * s, void *x, lw_dtype dtype, int64_t b, int64_t t, int64_t pos0,               \
       int64_t row_stride, int64_t col0, int64_t n_heads, int64_t hd, float base,                \
       lw_rope_pairing pairing),                                                                   \
      (s, x, dtype, b, t, pos0, row_stride, col0, n_heads, hd, base, pairing),                     \
      lwi_check_rope("rope forward", dtype, b, t, pos0, row_stride, col0, n_heads, hd, base,     \
                     pairing))                                                                     \
    X(rope_backward,                                                                               \
      (lw_stream * s, void *dx, lw_dtype dtype, int64_t b, int64_t t, int64_t pos0,              \
       int64_t row_stride, int64_t col0, int64_t n_heads, int64_t hd, float base,                \
       lw_rope_pairing pairing),                                                                   \
      (s, dx, dtype, b, t, pos0, row_stride, col0, n_heads, hd, base, pairing),                    \
      lwi_check_rope("rope backward", dtype, b, t, pos0, row_stride, col0, n_heads, hd, base,    \
                     pairing))                                                                     \
    X(head_rmsnorm_forward,                                                                        \
      (lw_stream * s, void *x, lw_dtype dtype, float *rstd, int64_t rows, int64_t row_stride,    \
       int64_t col0, int64_t n_heads, int64_t hd, float eps),                                      \
      (s, x, dtype, rstd, rows, row_stride, col0, n_heads, hd, eps),                               \
      lwi_check_head_rmsnorm("head rmsnorm forward", dtype, dtype, rows, row_stride, col0,       \
                             n_heads, hd, eps))                                                    \
    X(head_rmsnorm_backward,                                                                       \
      (lw_stream * s, void *dx, lw_dtype dx_dtype, const void *y, lw_dtype y_dtype,              \
       const float *rstd, int64_t rows, int64_t row_stride, int64_t col0, int64_t n_heads,       \
       int64_t hd),                                                                                \
      (s, dx, dx_dtype, y, y_dtype, rstd, rows, row_stride, col0, n_heads, hd),                    \
      lwi_check_head_rmsnorm("head rmsnorm backward", dx_dtype, y_dtype, rows, row_stride, col0, \
                             n_heads, hd, 0.0f))                                                   \
    /* nanochat's value embeddings' per-head gate and its per-layer residual scalars */           \
    X(value_gate_forward,                                                                          \
      (lw_stream * s, void *qkv, lw_dtype qkv_dtype, const float *ve, const void *x,               \
       lw_dtype x_dtype, const float *w, int64_t n, int64_t row_stride, int64_t col0,              \
       int64_t x_stride, int64_t n_heads, int64_t hd, int64_t channels, float scale),              \
      (s, qkv, qkv_dtype, ve, x, x_dtype, w, n, row_stride, col0, x_stride, n_heads, hd, channels, \
       scale),                                                                                     \
      lwi_check_value_gate("value gate forward", qkv_dtype, x_dtype, n, row_stride, col0,        \
                           x_stride, n_heads, hd, channels, scale))                                \
    X(value_gate_backward,                                                                         \
      (lw_stream * s, float *dve, float *dx, float *dw, float *dz, const void *dqkv,               \
       lw_dtype qkv_dtype, const float *ve, const void *x, lw_dtype x_dtype, const float *w,      \
       int64_t n, int64_t row_stride, int64_t col0, int64_t x_stride, int64_t n_heads, int64_t hd, \
       int64_t channels, float scale),                                                             \
      (s, dve, dx, dw, dz, dqkv, qkv_dtype, ve, x, x_dtype, w, n, row_stride, col0, x_stride,      \
       n_heads, hd, channels, scale),                                                              \
      lwi_check_value_gate("value gate backward", qkv_dtype, x_dtype, n, row_stride, col0,       \
                           x_stride, n_heads, hd, channels, scale))                                \
    X(residual_mix_forward,                                                                        \
      (lw_stream * s, float *y, const float *x, const float *x0, const float *a, const float *b,   \
       int64_t n),                                                                                 \
      (s, y, x, x0, a, b, n), lwi_work_if(n > 0))                                                  \
    X(residual_mix_backward,                                                                       \
      (lw_stream * s, float *dx, float *dx0, float *da, float *db, const float *dy,                \
       const float *x, const float *x0, const float *a, const float *b, int64_t n),                \
      (s, dx, dx0, da, db, dy, x, x0, a, b, n), lwi_work_if(n > 0))

/* The kernels the core calls with its own structures (the optimizers): dispatched by
 * lwi_run_<name> (device.h), with no public function of their own.
 *   muon_momentum  Muon's element-wise step on n elements (lwi_muon_step: weight decay, momentum
 *                  m from grad_scale * g, the update to orthogonalise in u).
 *   newton_schulz  x[i] = NS(u[i]) for the batch of matrices u[i] = u + i * rows * cols (x may
 *                  be u), as the plan says (lwi_ns_plan).
 *   adamw          AdamW step t over `count` tensors (the list is host memory, read before the
 *                  call returns).
 *   copy_2d        rows x cols floats (device memory, on the stream) from src, rows src_ld floats
 *                  apart, to dst, rows dst_ld floats apart (lds >= cols; the two must not
 *                  overlap): Muon's TP shards and QKV blocks moved between a matrix and its
 *                  pieces.
 *   ns_gram,       Newton-Schulz in halves around an all-reduce of the Gram matrix (Muon's
 *   ns_step        distributed TP mode, optim/muon_tp.c), fp32 whatever the plan's precision. X
 *                  is p x q, stored row-major (ld q), or when `transposed` as the row-major q x p
 *                  matrix X^T (ld p). ns_gram: a = X X^T, p x p, both triangles. ns_step: X =
 *                  abc[0] X + (abc[1] A + abc[2] A A) X for a symmetric A (both triangles, which
 *                  it may rewrite from one another), in place, with work of at least p * p + p *
 *                  q floats. abc is host memory.
 *   lion           a Lion step over `count` tensors (host list, read before the call returns;
 *                  m their momentum, v unused), as lw_lion_update says of one.
 *   muon_equilibrate  x[i] = the batch's matrix u[i] (rows x cols, row-major) with each row
 *                  scaled by (float)(t / max(its norm, norm_floor)), t = ||u[i]||_F / sqrt(rows)
 *                  (the root mean square of the row norms), norms in double; x may be u; work:
 *                  at least batch * (rows + 1) doubles of device memory.
 *   muon_renormalize  x[i] *= (float)(target / max(||x[i]||_F, norm_floor)) for the batch's
 *                  matrices of n elements, the norm in double; work: at least batch *
 *                  LWI_MUON_NORM_BLOCKS doubles of device memory.
 *   muon_decay_step  w = w - (step * x + d), d = decay * w, or 0 under `cautious` where
 *                  x * w >= 0 fails, on n elements, each product and sum rounded on its own.
 *   normuon_variance  NorMuon's variance reduction of one rows x cols update x (row-major), in
 *                  place, with its second moment v (one float per line: per row when rows >=
 *                  cols, else per column): per line the mean of x's squares (float, summed in
 *                  double), v += (1 - beta2) (mean - v), s = 1 / sqrt(max(v, floor)); then each
 *                  line times s * (float)(||x||_F / max(||x s||_F, floor)), the norms from the
 *                  means in double. work: at least LWI_NORMUON_WORK(rows, cols) doubles. */
#define LWI_CORE_KERNELS(X)                                                                        \
    X(muon_momentum,                                                                               \
      (lw_stream * s, const lwi_muon_step *k, float *w, const float *g, float *m, float *u,        \
       int64_t n),                                                                                 \
      (s, k, w, g, m, u, n), LW_OK)                                                                \
    X(newton_schulz,                                                                               \
      (lw_stream * s, const lwi_ns_plan *plan, const float *u, float *x, int64_t batch,            \
       int64_t rows, int64_t cols),                                                                \
      (s, plan, u, x, batch, rows, cols), LW_OK)                                                   \
    X(adamw,                                                                                       \
      (lw_stream * s, const lw_adamw_options *o, const lwi_update_tensor *tensors,                 \
       int32_t count, int64_t t, float grad_scale),                                                \
      (s, o, tensors, count, t, grad_scale), lwi_work_if(count > 0))                               \
    X(copy_2d,                                                                                     \
      (lw_stream * s, float *dst, int64_t dst_ld, const float *src, int64_t src_ld, int64_t rows,  \
       int64_t cols),                                                                              \
      (s, dst, dst_ld, src, src_ld, rows, cols), LW_OK)                                            \
    X(ns_gram, (lw_stream * s, const float *x, float *a, int64_t p, int64_t q, bool transposed),   \
      (s, x, a, p, q, transposed), LW_OK)                                                          \
    X(ns_step,                                                                                     \
      (lw_stream * s, const float abc[3], float *a, float *x, int64_t p, int64_t q,                \
       bool transposed, float *work),                                                              \
      (s, abc, a, x, p, q, transposed, work), LW_OK)                                               \
    X(lion,                                                                                        \
      (lw_stream * s, const lw_lion_options *o, const lwi_update_tensor *tensors, int32_t count,   \
       float grad_scale),                                                                          \
      (s, o, tensors, count, grad_scale), lwi_work_if(count > 0))                                  \
    X(muon_equilibrate,                                                                            \
      (lw_stream * s, const float *u, float *x, int64_t batch, int64_t rows, int64_t cols,         \
       float norm_floor, double *work),                                                            \
      (s, u, x, batch, rows, cols, norm_floor, work),                                              \
      lwi_work_if(batch > 0 && rows > 0 && cols > 0))                                              \
    X(muon_renormalize,                                                                            \
      (lw_stream * s, float *x, int64_t batch, int64_t n, float target, float norm_floor,          \
       double *work),                                                                              \
      (s, x, batch, n, target, norm_floor, work), lwi_work_if(batch > 0 && n > 0))                 \
    X(muon_decay_step,                                                                             \
      (lw_stream * s, float *w, const float *x, int64_t n, float step, float decay,                \
       bool cautious),                                                                             \
      (s, w, x, n, step, decay, cautious), lwi_work_if(n > 0))                                     \
    X(normuon_variance,                                                                            \
      (lw_stream * s, float *x, float *v, int64_t rows, int64_t cols, float beta2, float floor,    \
       double *work),                                                                              \
      (s, x, v, rows, cols, beta2, floor, work), lwi_work_if(rows > 0 && cols > 0))

/* Every kernel: the table's members, the backends' declarations and tables. */
#define LWI_KERNELS(X) LWI_PUBLIC_KERNELS(X) LWI_CORE_KERNELS(X)

/* The scratch sizes of the kernels that take a scratch (floats, from the shapes alone; no
 * stream): S(name, params, args); lw_<name> in lw.h asks the stream's device. */
#define LWI_SCRATCH_SIZES(S)                                                                       \
    S(attention_scratch_floats,                                                                    \
      (int64_t b, int64_t t, int64_t c, int64_t nh, int64_t nkv, int64_t window),                  \
      (b, t, c, nh, nkv, window))                                                                  \
    S(cross_entropy_scratch_floats, (int64_t n, int64_t v), (n, v))

#endif
