/* qk_clip.c: row scales of parameters queued for the next optimizer step and applied inside it
 * after the update, before the parameter sync (lw_optimizer_scale_rows), and QK-clip's scales of
 * a fused QKV weight's heads from their largest logits (lw_optimizer_qk_clip; docs/algorithms.md
 * section 12). What is scaled is this rank's part of the rows, in the fp32 weights the update
 * wrote: the optimizer state (momenta, moments) is left as it is. */
#include "optim/optimizer_state.h"

#include <math.h>
#include <stdlib.h>

static lw_status check_param(const lw_optimizer *opt, const char *what, int32_t param) {
    if (param < 0 || param >= opt->layout->n_params)
        return lwi_fail(LW_ERR_RANGE, "optimizer: %s: parameter index %d out of range [0, %d)",
                        what, param, opt->layout->n_params);
    return LW_OK;
}

lw_status lw_optimizer_scale_rows(lw_optimizer *opt, int32_t param, int64_t first_row,
                                  int64_t n_rows, float factor) {
    if (opt == NULL) return lwi_fail(LW_ERR_INVALID, "optimizer: NULL optimizer");
    lw_status st = check_param(opt, "scale_rows", param);
    if (st != LW_OK) return st;
    const lwi_param *p = &opt->layout->params[param];
    if (first_row < 0 || n_rows < 0 || first_row > p->shape[0] - n_rows)
        return lwi_fail(LW_ERR_RANGE,
                        "optimizer: scale_rows: rows [%lld, %lld + %lld) are not within the %lld "
                        "rows of '%s'",
                        (long long)first_row, (long long)first_row, (long long)n_rows,
                        (long long)p->shape[0], p->name);
    if (!isfinite(factor) || !(factor > 0.0f))
        return lwi_fail(LW_ERR_INVALID,
                        "optimizer: scale_rows: the factor of '%s' must be finite and > 0, got %g",
                        p->name, (double)factor);
    if (n_rows == 0) return LW_OK;
    if (opt->n_scales == opt->cap_scales) {
        const int32_t cap = opt->cap_scales > 0 ? 2 * opt->cap_scales : 16;
        lwi_row_scale *grown = realloc(opt->scales, sizeof *grown * (size_t)cap);
        if (grown == NULL) return lwi_fail(LW_ERR_NOMEM, "optimizer: out of memory for row scales");
        opt->scales = grown, opt->cap_scales = cap;
    }
    opt->scales[opt->n_scales++] = (lwi_row_scale){param, first_row, n_rows, factor};
    return LW_OK;
}

/* Where head j's Q and K rows lie in a fused QKV weight of `groups` groups of q, k and v rows
 * (Megatron's layout: each group's Q heads, then its K heads, then its V heads), head_dim rows
 * a head: *q its first Q row, *k its K head's first row, *shared whether that K head serves
 * other Q heads too (grouped KV heads). */
static void head_rows(const lwi_param *p, int64_t head_dim, int32_t j, int64_t *q, int64_t *k,
                      bool *shared) {
    const int64_t nq = p->qkv_rows[0] / head_dim, nk = p->qkv_rows[1] / head_dim;
    const int64_t group = j / nq, i = j % nq, per_k = nq / nk;
    const int64_t base = group * (p->qkv_rows[0] + p->qkv_rows[1] + p->qkv_rows[2]);
    *q = base + i * head_dim;
    *k = base + p->qkv_rows[0] + i / per_k * head_dim;
    *shared = per_k > 1;
}

static lw_status check_qkv(const lw_optimizer *opt, int32_t weight, int32_t bias, int64_t head_dim,
                           const float *head_max, int32_t n_heads, float tau) {
    lw_status st = check_param(opt, "qk_clip", weight);
    if (st == LW_OK && bias != -1) st = check_param(opt, "qk_clip's bias", bias);
    if (st != LW_OK) return st;
    const lwi_param *p = &opt->layout->params[weight];
    if (p->qkv_groups < 1 || p->ndim != 2)
        return lwi_fail(LW_ERR_INVALID,
                        "optimizer: qk_clip: '%s' is not a fused QKV weight (its spec's "
                        "qkv_groups is %d)",
                        p->name, p->qkv_groups);
    const int64_t q = p->qkv_rows[0], k = p->qkv_rows[1];
    const bool heads = head_dim >= 1 && q % head_dim == 0 && k % head_dim == 0 && k > 0;
    if (!heads || (q / head_dim) % (k / head_dim) != 0)
        return lwi_fail(LW_ERR_INVALID,
                        "optimizer: qk_clip: head dim %lld does not split '%s''s %lld Q and %lld "
                        "K rows a group into heads, each K head serving as many Q heads",
                        (long long)head_dim, p->name, (long long)q, (long long)k);
    if (n_heads != p->qkv_groups * (q / head_dim) || (n_heads > 0 && head_max == NULL))
        return lwi_fail(LW_ERR_INVALID,
                        "optimizer: qk_clip: '%s' has %lld heads (%d groups of %lld), got %d "
                        "maxima",
                        p->name, (long long)(p->qkv_groups * (q / head_dim)), p->qkv_groups,
                        (long long)(q / head_dim), n_heads);
    if (bias != -1) {
        const lwi_param *b = &opt->layout->params[bias];
        if (b->ndim != 1 || b->shape[0] != p->shape[0])
            return lwi_fail(LW_ERR_INVALID,
                            "optimizer: qk_clip: the bias '%s' must be a vector of '%s''s %lld "
                            "rows",
                            b->name, p->name, (long long)p->shape[0]);
    }
    if (!isfinite(tau) || !(tau > 0.0f))
        return lwi_fail(LW_ERR_INVALID, "optimizer: qk_clip: tau must be finite and > 0, got %g",
                        (double)tau);
    return LW_OK;
}

lw_status lw_optimizer_qk_clip(lw_optimizer *opt, int32_t weight, int32_t bias, int64_t head_dim,
                               const float *head_max, int32_t n_heads, float tau,
                               int32_t *clipped) {
    if (opt == NULL) return lwi_fail(LW_ERR_INVALID, "optimizer: NULL optimizer");
    lw_status st = check_qkv(opt, weight, bias, head_dim, head_max, n_heads, tau);
    int32_t count = 0;
    for (int32_t j = 0; st == LW_OK && j < n_heads; j++) {
        const float s = head_max[j];
        if (!isfinite(s) || !(s > tau)) continue;
        /* the logit is (a q) . (b k) = a b q . k: a = b = sqrt(tau / s) when the head has its K
         * to itself; a K shared with other heads stays, and q takes tau / s alone, as MuonClip
         * leaves MLA's shared rotary key and scales its query part by tau / s */
        int64_t q, k;
        bool shared;
        head_rows(&opt->layout->params[weight], head_dim, j, &q, &k, &shared);
        const float f = (float)((double)tau / s), half = (float)sqrt((double)tau / s);
        for (int pass = 0; st == LW_OK && pass < (bias != -1 ? 2 : 1); pass++) {
            const int32_t param = pass == 0 ? weight : bias;
            st = lw_optimizer_scale_rows(opt, param, q, head_dim, shared ? f : half);
            if (st == LW_OK && !shared) st = lw_optimizer_scale_rows(opt, param, k, head_dim, half);
        }
        count++;
    }
    if (clipped != NULL) *clipped = st == LW_OK ? count : 0;
    return st;
}

lw_status lwi_optimizer_apply_scales(lw_optimizer *opt, bool *applied) {
    lw_status st = LW_OK;
    *applied = opt->n_scales > 0;
    for (int32_t i = 0; st == LW_OK && i < opt->n_scales; i++) {
        const lwi_row_scale *sc = &opt->scales[i];
        const lwi_param *p = &opt->layout->params[sc->param];
        const int64_t cols = p->numel / p->shape[0];
        const int64_t lo = sc->first * cols, hi = (sc->first + sc->count) * cols;
        for (int32_t k = 0; st == LW_OK && k < opt->n_owned; k++) {
            const lwi_owned *o = &opt->owned[k];
            const int64_t from = o->start > lo ? o->start : lo;
            const int64_t to = o->start + o->count < hi ? o->start + o->count : hi;
            if (o->param != sc->param || from >= to) continue;
            float *w;
            st = lwi_optimizer_weights(opt, o, &w);
            if (st == LW_OK) st = lw_vec_scale(opt->stream, w + (from - o->start), to - from,
                                               sc->factor);
        }
    }
    opt->n_scales = 0;
    return st;
}
