/* normuon.c: NorMuon (Li et al. 2025, arXiv:2510.05491) as the optimizer's whole-matrix rule:
 * Muon's step (lw_muon: its options, momentum, Newton-Schulz, scale and decay) with the
 * variance reduction of the orthogonalised update before the step (docs/algorithms.md section
 * 6), which runs on the stream's device (device/cpu/normuon.c on the CPU). */
#include "optim/normuon.h"
#include "optim/muon.h"
#include "optim/rules.h"

#include <stdlib.h>

lw_normuon_options lw_normuon_defaults(void) {
    lw_normuon_options o = {sizeof(lw_normuon_options), 0.9f, 1e-10f};
    return o;
}

lw_status lwi_normuon_check(const lw_normuon_options *o) {
    /* written so that a NaN fails too */
    if (!(o->beta2 >= 0.0f && o->beta2 < 1.0f))
        return lwi_fail(LW_ERR_INVALID, "normuon: beta2 must be in [0, 1), got %g",
                        (double)o->beta2);
    if (!(o->floor > 0.0f))
        return lwi_fail(LW_ERR_INVALID, "normuon: floor must be > 0, got %g", (double)o->floor);
    return LW_OK;
}

typedef struct normuon {
    lw_muon *muon; /* [owned] the Muon whose step this is */
    lw_normuon_options o;
    lwi_workspace work; /* doubles: the variance reduction's */
} normuon;

static void rule_close(void *ctx) {
    normuon *n = ctx;
    if (n == NULL) return;
    lw_muon_free(n->muon);
    lwi_workspace_free(&n->work);
    free(n);
}

static lw_status rule_open(const lw_optimizer_options *o, void **ctx) {
    *ctx = NULL;
    normuon *n = calloc(1, sizeof *n);
    if (n == NULL) return lwi_fail(LW_ERR_NOMEM, "normuon: out of memory");
    n->o = o->normuon;
    lw_status st = lw_muon_new(&o->muon, &n->muon);
    if (st != LW_OK) {
        rule_close(n);
        return st;
    }
    *ctx = n;
    return LW_OK;
}

static lw_status reserve(normuon *n, lw_stream *s, int64_t doubles) {
    return lwi_workspace_reserve(&n->work, s, doubles, sizeof(double),
                                 "normuon: the variance reduction's work", "doubles");
}

static lw_status rule_batch_space(void *ctx, lw_stream *s, int64_t batch, int64_t rows,
                                  int64_t cols, float **u) {
    return lwi_muon_batch_updates(((normuon *)ctx)->muon, s, batch, rows, cols, u);
}

static lw_status rule_prepare(void *ctx, lw_stream *s, float *w, const float *g,
                              float *const *state, float *u, int64_t n, float lr, float wd,
                              float grad_scale) {
    return lw_muon_momentum(((normuon *)ctx)->muon, s, w, g, state[0], u, n, lr, wd, grad_scale);
}

static lw_status rule_transform(void *ctx, lw_stream *s, float *u, float *x, int64_t batch,
                                int64_t rows, int64_t cols) {
    lw_muon *m = ((normuon *)ctx)->muon;
    if (x == u) return lwi_muon_orthogonalize_batch(m, s, u, batch, rows, cols);
    return lw_muon_orthogonalize(m, s, u, x, rows, cols);
}

/* The variance reduction after Muon's orthogonalisation (and renormalisation), before the
 * step's shape scale and its decay, as nanochat orders them; the optimizer never gives a row
 * shard here (it refuses the rows layout for NorMuon). */
static lw_status rule_apply(void *ctx, lw_stream *s, float *w, float *x, float *const *state,
                            int64_t n, int64_t rows, int64_t cols, float lr, float wd) {
    normuon *nm = ctx;
    if (n != rows * cols)
        return lwi_fail(LW_ERR_UNSUPPORTED,
                        "normuon: a step on %lld of a %lld x %lld matrix's "
                        "elements: its variance reduction needs the whole matrix",
                        (long long)n, (long long)rows, (long long)cols);
    lw_status st = reserve(nm, s, LWI_NORMUON_WORK(rows, cols));
    if (st == LW_OK)
        st = lwi_run_normuon_variance(s, x, state[1], rows, cols, nm->o.beta2, nm->o.floor,
                                      (double *)nm->work.data);
    if (st == LW_OK) st = lw_muon_apply_decay(nm->muon, s, w, x, n, rows, cols, lr, wd);
    return st;
}

const lwi_rule lwi_rule_normuon = {.open = rule_open,
                                   .close = rule_close,
                                   .batch_space = rule_batch_space,
                                   .prepare = rule_prepare,
                                   .transform = rule_transform,
                                   .apply = rule_apply};
