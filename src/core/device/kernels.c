/* kernels.c: the kernels' dispatchers, generated from kernel_list.h: the public ones (lw.h:
 * vectors, the model's forward and backward) and the core's (lwi_run_<name>: the optimizers'),
 * each running the list's device-independent check, then the device of its stream through the
 * device table (a NULL stream is the CPU's). The CPU implementations, the reference every other
 * device is tested against, are in cpu/. */
#include "device/device.h"

#include <limits.h>
#include <math.h>

/* The dispatcher's body: the check, then the device's kernel, named when the device lacks it. */
#define LWI_DISPATCH(name, args, check)                                                            \
    s = lwi_stream_or_cpu(s);                                                                      \
    const lw_status st = (check);                                                                  \
    if (st == LWI_NOTHING_TO_DO) return LW_OK;                                                     \
    if (st != LW_OK) return st;                                                                    \
    if (s->device->ops->name == NULL) return lwi_device_missing(s, #name);                         \
    return s->device->ops->name args;

#define LWI_PUBLIC_DISPATCHER(name, params, args, check)                                           \
    lw_status lw_##name params { LWI_DISPATCH(name, args, check) }
LWI_PUBLIC_KERNELS(LWI_PUBLIC_DISPATCHER)

#define LWI_CORE_DISPATCHER(name, params, args, check)                                             \
    lw_status lwi_run_##name params { LWI_DISPATCH(name, args, check) }
LWI_CORE_KERNELS(LWI_CORE_DISPATCHER)

/* A scratch size: 0 on a device that needs none (or lacks the kernel, which then fails by name
 * when called). */
#define LWI_SIZE_DISPATCHER(name, params, args)                                                    \
    int64_t lw_##name(lw_stream *stream, LWI_UNPAREN params) {                                     \
        lw_stream *s = lwi_stream_or_cpu(stream);                                                  \
        return s->device->ops->name == NULL ? 0 : s->device->ops->name args;                       \
    }
#define LWI_UNPAREN(...) __VA_ARGS__
LWI_SCRATCH_SIZES(LWI_SIZE_DISPATCHER)

/* The whole vocabulary is the range of every row a token id can name (ids are int32). */
#define ALL_ROWS ((int64_t)INT32_MAX + 1)

lw_status lw_embedding_forward(lw_stream *stream, float *y, const int32_t *tokens, const void *wte,
                               const void *wpe, lw_dtype w_dtype, int64_t b, int64_t t, int64_t c) {
    return lw_embedding_range_forward(stream, y, tokens, wte, wpe, w_dtype, 0, ALL_ROWS, b, t, c);
}

lw_status lw_embedding_backward(lw_stream *stream, float *dwte, float *dwpe, const float *dy,
                                const int32_t *tokens, int64_t b, int64_t t, int64_t c) {
    return lw_embedding_range_backward(stream, dwte, dwpe, dy, tokens, 0, ALL_ROWS, b, t, c);
}

/* ---- the checks the list names ------------------------------------------------------------- */

lw_status lwi_check_heads(const char *what, int64_t b, int64_t t, int64_t c, int64_t nh,
                          int64_t nkv, int64_t window) {
    if (b <= 0 || t <= 0 || c <= 0 || nh <= 0) return LWI_NOTHING_TO_DO;
    if (c % nh != 0)
        return lwi_fail(LW_ERR_INVALID, "%s: channels c = %lld must divide by the heads nh = %lld",
                        what, (long long)c, (long long)nh);
    if (nkv < 1 || nh % nkv != 0)
        return lwi_fail(LW_ERR_INVALID,
                        "%s: the KV heads nkv = %lld must divide the heads nh = %lld (nkv = nh: "
                        "one KV head per head)",
                        what, (long long)nkv, (long long)nh);
    if (window < 0)
        return lwi_fail(LW_ERR_INVALID,
                        "%s: window = %lld must be >= 0 (0: every earlier key; w: the w keys "
                        "before a query and its own)",
                        what, (long long)window);
    return LW_OK;
}

lw_status lwi_check_routing(const char *what, int64_t n, int64_t e, int64_t k) {
    if (n < 0) return lwi_fail(LW_ERR_INVALID, "%s: n (%lld) must be >= 0", what, (long long)n);
    if (e < 1)
        return lwi_fail(LW_ERR_INVALID, "%s: the experts (%lld) must be >= 1", what, (long long)e);
    if (k < 1 || k > e)
        return lwi_fail(LW_ERR_INVALID, "%s: k (%lld) must be between 1 and the experts (%lld)",
                        what, (long long)k, (long long)e);
    return LW_OK;
}

lw_status lwi_check_range(const char *what, int64_t first, int64_t rows, int64_t vocab) {
    if (first < 0 || rows < 0)
        return lwi_fail(LW_ERR_INVALID, "%s: the rows [%lld, +%lld) must be a range >= 0", what,
                        (long long)first, (long long)rows);
    if (vocab < 1)
        return lwi_fail(LW_ERR_INVALID, "%s: the vocabulary (%lld) must be >= 1", what,
                        (long long)vocab);
    return LW_OK;
}

/* LW_OK for fp32 or bf16, else the error naming `what` and the tensor's role. */
static lw_status check_dtype(const char *what, const char *role, lw_dtype dtype) {
    if (dtype == LW_DTYPE_F32 || dtype == LW_DTYPE_BF16) return LW_OK;
    const char *name = lw_dtype_name(dtype);
    if (name == NULL)
        return lwi_fail(LW_ERR_INVALID, "%s: unknown %s dtype %d: fp32 or bf16 only", what, role,
                        (int)dtype);
    return lwi_fail(LW_ERR_INVALID, "%s: %s of dtype %s: fp32 or bf16 only", what, role, name);
}

lw_status lwi_check_weights(const char *what, lw_dtype w_dtype) {
    return check_dtype(what, "weight", w_dtype);
}

lw_status lwi_check_activations(const char *what, lw_dtype dtype) {
    return check_dtype(what, "activation", dtype);
}

lw_status lwi_check_gelu(const char *what, const char *role, lw_dtype dtype, lw_dtype x_dtype) {
    const lw_status st = check_dtype(what, role, dtype);
    return st != LW_OK ? st : check_dtype(what, "input", x_dtype);
}

lw_status lwi_check_attention(const char *what, lw_dtype qkv_dtype, lw_dtype out_dtype,
                              lw_dtype dqkv_dtype, int64_t b, int64_t t, int64_t c, int64_t nh,
                              int64_t nkv, int64_t window) {
    lw_status st = check_dtype(what, "qkv", qkv_dtype);
    if (st == LW_OK) st = check_dtype(what, "output", out_dtype);
    if (st == LW_OK) st = check_dtype(what, "qkv gradient", dqkv_dtype);
    return st != LW_OK ? st : lwi_check_heads(what, b, t, c, nh, nkv, window);
}

lw_status lwi_check_linear(const char *what, const char *role, lw_dtype dtype, lw_dtype x_dtype,
                           lw_dtype w_dtype) {
    lw_status st = check_dtype(what, role, dtype);
    if (st == LW_OK) st = check_dtype(what, "input", x_dtype);
    return st != LW_OK ? st : check_dtype(what, "weight", w_dtype);
}

lw_status lwi_check_linear_gelu(const char *what, lw_dtype dtype, lw_dtype dy_dtype,
                                lw_dtype x_dtype, lw_dtype w_dtype) {
    const lw_status st = check_dtype(what, "output gradient", dy_dtype);
    return st != LW_OK ? st : lwi_check_linear(what, "GELU input", dtype, x_dtype, w_dtype);
}

lw_status lwi_check_head(const char *what, lw_dtype w_dtype, lw_dtype logits_dtype, float softcap) {
    lw_status st = check_dtype(what, "weight", w_dtype);
    if (st == LW_OK) st = check_dtype(what, "logits", logits_dtype);
    if (st == LW_OK && (!(softcap >= 0.0f) || isinf(softcap)))
        return lwi_fail(LW_ERR_INVALID, "%s: softcap must be finite and >= 0 (0: none), got %g",
                        what, (double)softcap);
    return st;
}

lw_status lwi_check_head_range(const char *what, lw_dtype w_dtype, lw_dtype logits_dtype,
                               float softcap, int64_t first, int64_t rows, int64_t vocab) {
    const lw_status st = lwi_check_head(what, w_dtype, logits_dtype, softcap);
    return st != LW_OK ? st : lwi_check_range(what, first, rows, vocab);
}

lw_status lwi_check_weight_range(const char *what, lw_dtype w_dtype, int64_t first, int64_t rows,
                                 int64_t vocab) {
    const lw_status st = lwi_check_weights(what, w_dtype);
    return st != LW_OK ? st : lwi_check_range(what, first, rows, vocab);
}

lw_status lwi_check_parts(const char *what, int64_t parts, int64_t vocab) {
    if (parts < 1)
        return lwi_fail(LW_ERR_INVALID, "%s: parts (%lld) must be >= 1", what, (long long)parts);
    return lwi_check_range(what, 0, 0, vocab);
}

lw_status lwi_check_rmsnorm_forward(const char *what, lw_dtype y_dtype, float eps) {
    const lw_status st = check_dtype(what, "activation", y_dtype);
    if (st != LW_OK) return st;
    if (!(eps >= 0.0f) || isinf(eps))
        return lwi_fail(LW_ERR_INVALID, "%s: eps must be finite and >= 0, got %g", what,
                        (double)eps);
    return LW_OK;
}

lw_status lwi_check_rmsnorm_backward(const char *what, const float *g, const float *dg) {
    if (g == NULL && dg != NULL)
        return lwi_fail(LW_ERR_INVALID,
                        "%s: a gain gradient dg without a gain g (a norm without a gain has no "
                        "parameter: pass dg NULL)",
                        what);
    return LW_OK;
}

lw_status lwi_check_swiglu(const char *what, const char *role, lw_dtype dtype, lw_dtype x_dtype,
                           int64_t n, int64_t c) {
    const lw_status st = lwi_check_gelu(what, role, dtype, x_dtype);
    if (st != LW_OK) return st;
    if (c < 0 || c % 2 != 0)
        return lwi_fail(LW_ERR_INVALID,
                        "%s: the fused width c = %lld must be even and >= 0 (a gate half, then "
                        "an up half)",
                        what, (long long)c);
    return lwi_work_if(n > 0 && c > 0);
}

lw_status lwi_check_softcap(const char *what, int64_t n, float cap) {
    if (!(cap > 0.0f) || isinf(cap))
        return lwi_fail(LW_ERR_INVALID, "%s: cap must be finite and > 0, got %g", what,
                        (double)cap);
    return lwi_work_if(n > 0);
}

/* n_heads heads of hd elements from column col0 fit a row of row_stride elements. */
static lw_status check_heads_in_row(const char *what, int64_t row_stride, int64_t col0,
                                    int64_t n_heads, int64_t hd) {
    if (n_heads < 0 || col0 < 0 || row_stride < 0)
        return lwi_fail(LW_ERR_INVALID,
                        "%s: n_heads (%lld), col0 (%lld) and row_stride (%lld) must be >= 0", what,
                        (long long)n_heads, (long long)col0, (long long)row_stride);
    /* n_heads <= row_stride / hd first, so that n_heads * hd cannot overflow */
    if (n_heads > row_stride / hd || col0 > row_stride - n_heads * hd)
        return lwi_fail(LW_ERR_INVALID,
                        "%s: the heads' columns col0 + n_heads * hd = %lld + %lld * %lld pass the "
                        "row stride %lld",
                        what, (long long)col0, (long long)n_heads, (long long)hd,
                        (long long)row_stride);
    return LW_OK;
}

lw_status lwi_check_rope(const char *what, lw_dtype dtype, int64_t b, int64_t t, int64_t pos0,
                         int64_t row_stride, int64_t col0, int64_t n_heads, int64_t hd, float base,
                         lw_rope_pairing pairing) {
    lw_status st = check_dtype(what, "activation", dtype);
    if (st != LW_OK) return st;
    if (lw_rope_pairing_name(pairing) == NULL)
        return lwi_fail(LW_ERR_INVALID, "%s: unknown pairing %d (halves or interleaved)", what,
                        (int)pairing);
    if (hd < 2 || hd % 2 != 0)
        return lwi_fail(LW_ERR_INVALID, "%s: the head dim hd = %lld must be even and >= 2", what,
                        (long long)hd);
    if (!(base > 0.0f) || isinf(base))
        return lwi_fail(LW_ERR_INVALID, "%s: base must be finite and > 0, got %g", what,
                        (double)base);
    if (b < 0 || t < 1 || pos0 < 0)
        return lwi_fail(LW_ERR_INVALID,
                        "%s: b (%lld) and pos0 (%lld) must be >= 0 and t (%lld) >= 1", what,
                        (long long)b, (long long)pos0, (long long)t);
    st = check_heads_in_row(what, row_stride, col0, n_heads, hd);
    return st != LW_OK ? st : lwi_work_if(b > 0 && n_heads > 0);
}

lw_status lwi_check_head_rmsnorm(const char *what, lw_dtype dtype, lw_dtype y_dtype, int64_t rows,
                                 int64_t row_stride, int64_t col0, int64_t n_heads, int64_t hd,
                                 float eps) {
    lw_status st = check_dtype(what, "activation", dtype);
    if (st == LW_OK) st = check_dtype(what, "output", y_dtype);
    if (st != LW_OK) return st;
    if (hd < 1)
        return lwi_fail(LW_ERR_INVALID, "%s: the head dim hd = %lld must be >= 1", what,
                        (long long)hd);
    if (!(eps >= 0.0f) || isinf(eps))
        return lwi_fail(LW_ERR_INVALID, "%s: eps must be finite and >= 0, got %g", what,
                        (double)eps);
    if (rows < 0)
        return lwi_fail(LW_ERR_INVALID, "%s: rows (%lld) must be >= 0", what, (long long)rows);
    st = check_heads_in_row(what, row_stride, col0, n_heads, hd);
    return st != LW_OK ? st : lwi_work_if(rows > 0 && n_heads > 0);
}

lw_status lwi_check_value_gate(const char *what, lw_dtype qkv_dtype, lw_dtype x_dtype, int64_t n,
                               int64_t row_stride, int64_t col0, int64_t x_stride, int64_t n_heads,
                               int64_t hd, int64_t channels, float scale) {
    lw_status st = check_dtype(what, "qkv", qkv_dtype);
    if (st == LW_OK) st = check_dtype(what, "input", x_dtype);
    if (st != LW_OK) return st;
    if (n < 0) return lwi_fail(LW_ERR_INVALID, "%s: n (%lld) must be >= 0", what, (long long)n);
    if (n_heads < 1 || hd < 1)
        return lwi_fail(LW_ERR_INVALID,
                        "%s: n_heads (%lld) and the head dim hd (%lld) must be >= 1", what,
                        (long long)n_heads, (long long)hd);
    if (channels < 1 || channels > x_stride)
        return lwi_fail(LW_ERR_INVALID,
                        "%s: the gate's channels (%lld) must be >= 1 and within x's row stride "
                        "(%lld)",
                        what, (long long)channels, (long long)x_stride);
    if (!isfinite(scale))
        return lwi_fail(LW_ERR_INVALID, "%s: scale must be finite, got %g", what, (double)scale);
    st = check_heads_in_row(what, row_stride, col0, n_heads, hd);
    return st != LW_OK ? st : lwi_work_if(n > 0);
}
