/* optimizer_groups.c: the optimizer's options, read and checked, and its hyper-parameter groups
 * (docs/algorithms.md section 5): a learning rate and weight decay each, and optionally options
 * of their own (lw_optimizer_set_group_options: Muon's variant for some matrices, AdamW's betas
 * for others), with each whole-matrix rule's context opened from them. A group's own options may change any
 * rule's behaviour but not what the optimizer does once for all of them: the clip, the TP
 * communicator and Muon's TP mode and QKV split (its TP shards are laid out by them). */
#include "optim/lion.h"
#include "optim/normuon.h"
#include "optim/optimizer_state.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

lw_optimizer_options lw_optimizer_defaults(void) {
    lw_optimizer_options o;
    memset(&o, 0, sizeof o);
    o.size = sizeof o;
    o.muon = lw_muon_defaults();
    o.adamw = lw_adamw_defaults();
    o.lion = lw_lion_defaults();
    o.normuon = lw_normuon_defaults();
    o.clip = 0.0f;
    return o;
}

/* lw_optimizer_options's muon, adamw and lion are versioned with it: their sizes are the ones its
 * version holds (today's: one version of each), as lw_optimizer_defaults() set them. */
static lw_status check_nested(const char *field, size_t size, size_t held, const char *defaults) {
    if (size == held) return LW_OK;
    if (size == 0)
        return lwi_fail(LW_ERR_INVALID,
                        "optimizer: lw_optimizer_options.%s.size is 0: start from %s() (or keep "
                        "the one lw_optimizer_defaults() set)",
                        field, defaults);
    return lwi_fail(LW_ERR_INVALID,
                    "optimizer: lw_optimizer_options.%s.size is %zu, but this "
                    "lw_optimizer_options holds %zu: keep the one lw_optimizer_defaults() set",
                    field, size, held);
}

static lw_status check_adamw(const lw_adamw_options *a) {
    if (!(a->beta1 >= 0.0f && a->beta1 < 1.0f))
        return lwi_fail(LW_ERR_INVALID, "adamw: beta1 must be in [0, 1), got %g", (double)a->beta1);
    if (!(a->beta2 >= 0.0f && a->beta2 < 1.0f))
        return lwi_fail(LW_ERR_INVALID, "adamw: beta2 must be in [0, 1), got %g", (double)a->beta2);
    if (!(a->eps > 0.0f))
        return lwi_fail(LW_ERR_INVALID, "adamw: eps must be > 0, got %g", (double)a->eps);
    return LW_OK;
}

/* opts read and checked as lw_optimizer_new and lw_optimizer_set_group_options take them (the
 * rules' own checks run as their contexts open). */
lw_status lwi_optimizer_read_options(const lw_optimizer_options *opts, lw_optimizer_options *out) {
    const lw_optimizer_options d = lw_optimizer_defaults();
    lw_optimizer_options o;
    lw_status st = lwi_options_read("optimizer", &lwi_optimizer_options_kind, opts, &d, &o);
    if (st == LW_OK) st = check_nested("muon", o.muon.size, sizeof o.muon, "lw_muon_defaults");
    if (st == LW_OK) st = check_nested("adamw", o.adamw.size, sizeof o.adamw, "lw_adamw_defaults");
    if (st == LW_OK) st = check_nested("lion", o.lion.size, sizeof o.lion, "lw_lion_defaults");
    if (st == LW_OK) st = check_adamw(&o.adamw);
    if (st == LW_OK)
        st = check_nested("normuon", o.normuon.size, sizeof o.normuon, "lw_normuon_defaults");
    if (st == LW_OK) st = lwi_lion_check(&o.lion);
    if (st == LW_OK) st = lwi_normuon_check(&o.normuon);
    if (st != LW_OK) return st;
    if (!isfinite(o.clip)) return lwi_fail(LW_ERR_INVALID, "optimizer: clip must be finite");
    *out = o;
    return LW_OK;
}

lw_status lwi_optimizer_open_rules(const lw_optimizer_options *o, void *ctx[LWI_N_RULES]) {
    for (int32_t k = 0; k < LWI_N_RULES; k++) {
        const lwi_rule *rule = lwi_rule_of((lw_optimizer_kind)k);
        ctx[k] = NULL;
        lw_status st = rule->open != NULL ? rule->open(o, &ctx[k]) : LW_OK;
        if (st != LW_OK) {
            lwi_optimizer_close_rules(ctx);
            return st;
        }
    }
    return LW_OK;
}

void lwi_optimizer_close_rules(void *ctx[LWI_N_RULES]) {
    for (int32_t k = 0; k < LWI_N_RULES; k++) {
        const lwi_rule *rule = lwi_rule_of((lw_optimizer_kind)k);
        if (rule->close != NULL && ctx[k] != NULL) rule->close(ctx[k]);
        ctx[k] = NULL;
    }
}

static void free_group_options(lwi_group_options *g) {
    if (g == NULL) return;
    lwi_optimizer_close_rules(g->rule_ctx);
    free(g);
}

lw_status lwi_optimizer_grow_groups(lw_optimizer *opt, int32_t n) {
    if (n <= opt->n_groups) return LW_OK;
    float *lr = realloc(opt->lr, sizeof(float) * (size_t)n);
    if (lr == NULL) return lwi_fail(LW_ERR_NOMEM, "optimizer: out of memory");
    opt->lr = lr;
    float *wd = realloc(opt->wd, sizeof(float) * (size_t)n);
    if (wd == NULL) return lwi_fail(LW_ERR_NOMEM, "optimizer: out of memory");
    opt->wd = wd;
    lwi_group_options **own = realloc(opt->group_options, sizeof *own * (size_t)n);
    if (own == NULL) return lwi_fail(LW_ERR_NOMEM, "optimizer: out of memory");
    opt->group_options = own;
    for (int32_t g = opt->n_groups; g < n; g++) {
        opt->lr[g] = opt->wd[g] = 0.0f;
        opt->group_options[g] = NULL;
    }
    opt->n_groups = n;
    return LW_OK;
}

void lwi_optimizer_free_groups(lw_optimizer *opt) {
    for (int32_t g = 0; g < opt->n_groups; g++)
        free_group_options(opt->group_options[g]);
    free(opt->group_options);
    free(opt->lr);
    free(opt->wd);
}

static lw_status check_group(const lw_optimizer *opt, int32_t group) {
    if (opt == NULL) return lwi_fail(LW_ERR_INVALID, "optimizer: NULL optimizer");
    if (group < 0 || group > 1 << 16)
        return lwi_fail(LW_ERR_RANGE, "optimizer: group %d out of range [0, 65536]", group);
    return LW_OK;
}

lw_status lw_optimizer_set_group(lw_optimizer *opt, int32_t param, int32_t group) {
    lw_status st = check_group(opt, group);
    if (st != LW_OK) return st;
    if (param < 0 || param >= opt->layout->n_params)
        return lwi_fail(LW_ERR_RANGE, "optimizer: parameter index %d out of range [0, %d)", param,
                        opt->layout->n_params);
    if ((st = lwi_optimizer_grow_groups(opt, group + 1)) != LW_OK) return st;
    if (opt->group[param] != group) opt->batches_stale = true;
    opt->group[param] = group;
    return LW_OK;
}

lw_status lw_optimizer_set_hparams(lw_optimizer *opt, int32_t group, float lr, float wd) {
    lw_status st = check_group(opt, group);
    if (st != LW_OK) return st;
    if (!(lr >= 0.0f) || !isfinite(lr))
        return lwi_fail(LW_ERR_INVALID, "optimizer: lr must be finite and >= 0, got %g",
                        (double)lr);
    if (!(wd >= 0.0f) || !isfinite(wd))
        return lwi_fail(LW_ERR_INVALID, "optimizer: weight decay must be finite and >= 0, got %g",
                        (double)wd);
    if ((st = lwi_optimizer_grow_groups(opt, group + 1)) != LW_OK) return st;
    opt->lr[group] = lr;
    opt->wd[group] = wd;
    return LW_OK;
}

/* What a group may not set apart from the optimizer: named when it differs. */
static lw_status check_shared(const lw_optimizer_options *mine, const lw_optimizer_options *o,
                              int32_t group) {
    const char *field = NULL;
    if (o->clip != mine->clip) field = "clip";
    else if (o->tp_comm != mine->tp_comm) field = "tp_comm";
    else if (o->muon.tp_mode != mine->muon.tp_mode) field = "muon.tp_mode";
    else if (o->muon.split_qkv != mine->muon.split_qkv) field = "muon.split_qkv";
    if (field == NULL) return LW_OK;
    return lwi_fail(LW_ERR_INVALID,
                    "optimizer: group %d's options set %s apart from the optimizer's, but %s is "
                    "the whole optimizer's (give lw_optimizer_new's value)",
                    group, field, field);
}

lw_status lw_optimizer_set_group_options(lw_optimizer *opt, int32_t group,
                                         const lw_optimizer_options *opts) {
    lw_status st = check_group(opt, group);
    if (st != LW_OK) return st;
    if (opts == NULL)
        return lwi_fail(LW_ERR_INVALID, "optimizer: group %d's options must not be NULL", group);
    lw_optimizer_options o;
    if ((st = lwi_optimizer_read_options(opts, &o)) != LW_OK) return st;
    if ((st = check_shared(&opt->o, &o, group)) != LW_OK) return st;
    if ((st = lwi_optimizer_grow_groups(opt, group + 1)) != LW_OK) return st;
    lwi_group_options *g = calloc(1, sizeof *g);
    if (g == NULL) return lwi_fail(LW_ERR_NOMEM, "optimizer: out of memory");
    g->o = o;
    if ((st = lwi_optimizer_open_rules(&g->o, g->rule_ctx)) != LW_OK) {
        free(g);
        return st;
    }
    free_group_options(opt->group_options[group]);
    opt->group_options[group] = g;
    opt->batches_stale = true;
    return LW_OK;
}
