/* optimizer.c: one optimizer step over lw_buffers (docs/algorithms.md section 5): finish the
 * gradient sync, the global gradient norm and zero count (one all-reduce over the world), skip on a
 * non-finite norm, clip, the element-wise rules (AdamW) on the elements this rank owns and the
 * whole-matrix rules (Muon) on the matrices it owns, the queued row scales (qk_clip.c), then
 * start the parameter sync. Each
 * parameter's rule is its spec's kind (optim/rules.h); only owners allocate optimizer state.
 *
 * Whole-matrix rules' matrices in element-wise buffers (the rows layout, row-sharded FSDP) are owned in slices:
 * each rank runs weight decay and momentum on its slice, one all-gather per bucket assembles
 * every matrix's update, each rank holding a slice of a matrix orthogonalises the whole of it
 * and keeps its slice. That all-gather and the repeated Newton-Schulz are what the
 * shard-aligned layouts avoid.
 *
 * Under tensor parallelism (a TP communicator of t > 1 ranks) every TP rank runs this over its
 * DP group on its local shards, with the same layout, so the owners of a full matrix's t shards
 * form one TP group and meet its collectives in the same order: the TP shards and the split
 * QKV weights go through muon_tp.c one by one after the batches, in owned order (row-sharded:
 * in their bucket's turn). The norm adds every TP rank's shards and TP rank 0's replicated
 * tensors (one all-reduce over TP before the one over the DP group). */
#include "optim/optimizer_state.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* Whether a rule's state has a part per line of the matrix, which only its owner can hold. */
static bool has_line_part(lw_optimizer_kind kind) {
    for (int32_t k = 0; k < lw_optimizer_kind_parts(kind); k++)
        if (lw_optimizer_kind_part_size(kind, k) == LW_PART_LINES) return true;
    return false;
}

/* What this rank updates, and its state. */
static lw_status collect_owned(lw_optimizer *opt) {
    const lw_layout *l = opt->layout;
    int64_t tp_numel = 0;
    opt->owned = calloc((size_t)(l->n_params ? l->n_params : 1), sizeof(lwi_owned));
    if (opt->owned == NULL) return lwi_fail(LW_ERR_NOMEM, "optimizer: out of memory");
    for (int32_t i = 0; i < l->n_params; i++) {
        const lwi_param *p = &l->params[i];
        const lwi_buffer *lb = &l->buffers[p->buffer];
        int64_t start, count;
        lw_status st = lw_buffers_owned(opt->buffers, i, &start, &count);
        if (st != LW_OK) return st;
        const char *rule = lw_optimizer_kind_name(p->optimizer);
        if (p->whole && lb->algorithm == LW_ALGORITHM_DISTOPT)
            return lwi_fail(LW_ERR_UNSUPPORTED,
                            "optimizer: '%s' is routed to %s, which updates whole matrices, "
                            "but lies in an element-wise (distopt) buffer: use a shard-aligned "
                            "algorithm (cost, lpt, size_matching), or rows for row-sharding",
                            p->name, rule);
        /* on every rank alike, owning a slice or not */
        if (p->whole && lwi_is_elementwise(lb->algorithm) && has_line_part(p->optimizer))
            return lwi_fail(LW_ERR_UNSUPPORTED,
                            "optimizer: '%s' is routed to %s, whose second moment belongs to the "
                            "whole matrix's owner, but the rows layout row-shards it: use a "
                            "shard-aligned algorithm (cost, lpt, size_matching)",
                            p->name, rule);
        /* the layout has refused a whole-matrix rule's parameter that is not 2-D */
        if (count == 0) continue;
        lwi_owned *o = &opt->owned[opt->n_owned++];
        o->param = i;
        o->start = start;
        o->count = count;
        o->kind = p->optimizer;
        o->rule = lwi_rule_of(p->optimizer);
        o->whole = p->whole;
        o->counted = lb->algorithm != LW_ALGORITHM_DEFAULT ||
                     lw_comm_rank(lw_buffers_comm(opt->buffers)) == 0;
        /* a tensor replicated over TP is the same on every TP rank: counted on rank 0's */
        if (opt->tp_comm != NULL && p->tp_blocks == 0 && lw_comm_rank(opt->tp_comm) != 0)
            o->counted = false;
        o->sliced = p->whole && lwi_is_elementwise(lb->algorithm);
        /* a fused QKV weight outside TP is split for Muon only (split_qkv): NorMuon's second
           moment, one per row of it, already treats Q's, K's and V's rows apart */
        const bool sharded = opt->tp_comm != NULL && p->tp_blocks > 0;
        const bool tp = p->whole && lwi_muon_tp_takes(opt->tp, p) &&
                        (p->optimizer == LW_OPTIMIZER_MUON || sharded);
        if (tp && p->optimizer != LW_OPTIMIZER_MUON)
            return lwi_fail(LW_ERR_UNSUPPORTED,
                            "optimizer: '%s' is split over tensor parallelism or a split QKV "
                            "weight, whose updates only Muon's TP modes make, but is routed to %s",
                            p->name, rule);
        o->tp = tp && !o->sliced;
        if (o->tp && p->numel > tp_numel) tp_numel = p->numel;
        const int32_t n_parts = lw_optimizer_kind_parts(p->optimizer);
        const int64_t rows = p->shape[0] > 0 ? p->shape[0] : 1;
        int64_t floats = 0;
        for (int32_t k = 0; k < n_parts; k++) {
            st = lw_optimizer_kind_part_count(p->optimizer, k, count, rows, p->numel / rows,
                                              &o->part_counts[k]);
            if (st != LW_OK) return st;
            floats += o->part_counts[k];
        }
        void *state = NULL;
        if (lw_device_alloc(opt->device, (int64_t)sizeof(float) * floats, &state) != LW_OK)
            return lwi_fail(LW_ERR_NOMEM, "optimizer: out of memory for the state of '%s' "
                            "(%.2f GiB on %s)", p->name, 4.0 * (double)floats / (1 << 30),
                            lw_device_name(opt->device));
        o->state = state;
        for (int64_t k = 0, at = 0; k < n_parts; at += o->part_counts[k++])
            o->parts[k] = o->state + at;
        if (lw_buffers_param_dtype(opt->buffers) != LW_DTYPE_F32) {
            void *master = NULL;
            if (lw_device_alloc(opt->device, (int64_t)sizeof(float) * count, &master) != LW_OK)
                return lwi_fail(LW_ERR_NOMEM, "optimizer: out of memory for the fp32 master "
                                "weights of '%s' (%.2f GiB on %s)", p->name,
                                4.0 * (double)count / (1 << 30), lw_device_name(opt->device));
            o->master = master;
            opt->has_master = true;
        }
        if (o->sliced && p->numel > opt->orthogonal_numel) opt->orthogonal_numel = p->numel;
    }
    /* every rank takes part in each bucket's gather, owning a slice of it or not */
    for (int32_t b = 0; b < l->n_buffers; b++)
        for (int32_t k = 0; l->buffers[b].whole && lwi_is_elementwise(l->buffers[b].algorithm) &&
                            k < l->buffers[b].n_buckets;
             k++) {
            const lwi_bucket *bk = &l->buffers[b].buckets[k];
            if (bk->stop - bk->start > opt->gathered_numel)
                opt->gathered_numel = bk->stop - bk->start;
        }
    if (opt->gathered_numel > 0) {
        void *gathered = NULL, *orthogonal = NULL;
        lw_status st = lw_device_alloc(opt->device, 4 * opt->gathered_numel, &gathered);
        opt->gathered = gathered;
        if (st == LW_OK) st = lw_device_alloc(opt->device, 4 * opt->orthogonal_numel, &orthogonal);
        opt->orthogonal = orthogonal;
        if (st != LW_OK)
            return lwi_fail(LW_ERR_NOMEM, "optimizer: out of memory for row-sharded Muon: %s",
                            lw_last_error());
    }
    if (tp_numel > 0) {
        void *u = NULL;
        lw_status st = lw_device_alloc(opt->device, 4 * tp_numel, &u);
        opt->tp_update = u;
        if (st != LW_OK)
            return lwi_fail(LW_ERR_NOMEM, "optimizer: out of memory for Muon's TP updates: %s",
                            lw_last_error());
    }
    void *acc = NULL;
    lw_status st = lw_device_alloc(opt->device, 2 * sizeof(double), &acc);
    opt->norm_acc = acc;
    return st;
}

lw_status lw_optimizer_new(lw_buffers *buffers, const lw_optimizer_options *opts,
                           lw_optimizer **out) {
    if (buffers == NULL || out == NULL)
        return lwi_fail(LW_ERR_INVALID, "optimizer: buffers and out must not be NULL");
    *out = NULL;
    lw_optimizer_options o;
    lw_status st = lwi_optimizer_read_options(opts, &o);
    if (st != LW_OK) return st;
    lw_optimizer *opt = calloc(1, sizeof *opt);
    if (opt == NULL) return lwi_fail(LW_ERR_NOMEM, "optimizer: out of memory");
    opt->buffers = buffers;
    opt->layout = lw_buffers_layout(buffers);
    opt->device = lw_buffers_device(buffers);
    opt->stream = lw_device_stream(opt->device);
    opt->o = o;
    if ((st = lwi_optimizer_open_rules(&opt->o, opt->rule_ctx)) != LW_OK) goto fail;
    if ((st = lwi_optimizer_whole_check_tp(opt, o.tp_comm, o.muon.tp_mode)) != LW_OK) goto fail;
    if ((st = lwi_muon_tp_new(opt->device, opt->tp_comm, &o.muon, &opt->tp)) != LW_OK) goto fail;
    opt->group =
        calloc((size_t)(opt->layout->n_params ? opt->layout->n_params : 1), sizeof(int32_t));
    if (opt->group == NULL) {
        st = lwi_fail(LW_ERR_NOMEM, "optimizer: out of memory");
        goto fail;
    }
    if ((st = lwi_optimizer_grow_groups(opt, 1)) != LW_OK) goto fail;
    if ((st = collect_owned(opt)) != LW_OK) goto fail;
    if ((st = lwi_optimizer_whole_make_batches(opt)) != LW_OK) goto fail;
    if ((st = lw_optimizer_reload_master(opt)) != LW_OK) goto fail;
    *out = opt;
    return LW_OK;
fail:
    lw_optimizer_free(opt);
    return st;
}

void lw_optimizer_free(lw_optimizer *opt) {
    if (opt == NULL) return;
    for (int32_t k = 0; k < opt->n_owned; k++) {
        lw_device_free(opt->device, opt->owned[k].state);
        lw_device_free(opt->device, opt->owned[k].master);
    }
    free(opt->owned);
    free(opt->group);
    lwi_optimizer_free_groups(opt);
    lw_device_free(opt->device, opt->gathered);
    lw_device_free(opt->device, opt->orthogonal);
    lw_device_free(opt->device, opt->norm_acc);
    free(opt->batches);
    free(opt->batch_members);
    free(opt->tensors);
    lwi_optimizer_close_rules(opt->rule_ctx);
    lwi_muon_tp_free(opt->tp);
    lw_device_free(opt->device, opt->tp_update);
    free(opt->scales);
    free(opt);
}

/* Sum of squares and zeros over the owned gradient elements, summed over the world. */
static lw_status global_norm(lw_optimizer *opt, double *norm, int64_t *zeros) {
    double local[2] = {0.0, 0.0};
    lw_status st = lw_device_set(opt->stream, opt->norm_acc, 0, sizeof local);
    for (int32_t k = 0; st == LW_OK && k < opt->n_owned; k++) {
        const lwi_owned *o = &opt->owned[k];
        if (!o->counted) continue;
        float *g;
        st = lw_buffers_owned_grad(opt->buffers, o->param, &g);
        if (st == LW_OK) st = lw_vec_norm_stats(opt->stream, g, o->count, opt->norm_acc);
    }
    if (st == LW_OK)
        st = lw_device_copy(opt->stream, local, opt->norm_acc, sizeof local,
                            LW_COPY_DEVICE_TO_HOST);
    if (st != LW_OK) return st;
    if (opt->tp_comm != NULL) {
        lw_comm_set_label(opt->tp_comm, "the gradient norm over TP");
        if ((st = lw_comm_allreduce(opt->tp_comm, local, 2, LW_DTYPE_F64, LW_REDUCE_SUM)) != LW_OK)
            return st;
    }
    lw_comm *comm = lw_buffers_comm(opt->buffers);
    lw_comm_set_label(comm, "the global gradient norm");
    st = lw_comm_allreduce(comm, local, 2, LW_DTYPE_F64, LW_REDUCE_SUM);
    *norm = sqrt(local[0]);
    *zeros = (int64_t)local[1];
    return st;
}

/* Between every master copy and its owned bf16 parameters: widened from them (to_master), or
 * rounded to nearest even into them, which the parameter sync then gathers. */
static lw_status move_master(lw_optimizer *opt, bool to_master) {
    lw_status st = LW_OK;
    for (int32_t k = 0; st == LW_OK && k < opt->n_owned; k++) {
        const lwi_owned *o = &opt->owned[k];
        void *w = NULL;
        if (o->master == NULL) continue;
        st = lw_buffers_owned_param(opt->buffers, o->param, &w);
        if (st != LW_OK) break;
        st = to_master ? lw_vec_from_bf16(opt->stream, o->master, w, o->count)
                       : lw_vec_to_bf16(opt->stream, w, o->master, o->count);
    }
    return st;
}

lw_status lw_optimizer_reload_master(lw_optimizer *opt) {
    if (opt == NULL) return lwi_fail(LW_ERR_INVALID, "optimizer: NULL optimizer");
    lw_status st = move_master(opt, true);
    if (st == LW_OK) opt->master_commits = lw_buffers_commits(opt->buffers);
    return st;
}

lw_status lw_optimizer_keep_master(lw_optimizer *opt) {
    if (opt == NULL) return lwi_fail(LW_ERR_INVALID, "optimizer: NULL optimizer");
    opt->master_commits = lw_buffers_commits(opt->buffers);
    return LW_OK;
}

/* Every element this rank owns of an element-wise rule's parameters whose groups take options
 * `from` (lwi_optimizer_options_of), in one multi-tensor call. */
static lw_status update_elementwise(lw_optimizer *opt, lw_optimizer_kind kind,
                                    const lw_optimizer_options *from, float grad_scale) {
    int32_t count = 0;
    for (int32_t k = 0; k < opt->n_owned; k++) {
        lwi_owned *o = &opt->owned[k];
        const int32_t grp = opt->group[o->param];
        if (o->kind != kind || lwi_optimizer_options_of(opt, grp) != from) continue;
        lwi_update_tensor *x = &opt->tensors[count++];
        float *w, *g;
        lw_status st = lwi_optimizer_weights(opt, o, &w);
        if (st == LW_OK) st = lw_buffers_owned_grad(opt->buffers, o->param, &g);
        if (st != LW_OK) return st;
        /* the second part where the rule has one */
        float *v = lw_optimizer_kind_parts(kind) > 1 ? o->parts[1] : NULL;
        *x = (lwi_update_tensor){w, g, o->parts[0], v, o->count, opt->lr[grp], opt->wd[grp]};
    }
    if (count == 0) return LW_OK;
    return lwi_rule_of(kind)->update(opt->stream, from, opt->tensors, count, opt->step,
                                     grad_scale);
}

/* An element-wise rule's parameters, one call per options in use: the optimizer's, then each
 * group's own. */
static lw_status update_elementwise_rule(lw_optimizer *opt, lw_optimizer_kind kind,
                                         float grad_scale) {
    lw_status st = update_elementwise(opt, kind, &opt->o, grad_scale);
    for (int32_t g = 0; st == LW_OK && g < opt->n_groups; g++)
        if (opt->group_options[g] != NULL)
            st = update_elementwise(opt, kind, &opt->group_options[g]->o, grad_scale);
    return st;
}

static lw_status update(lw_optimizer *opt, float grad_scale, lw_step_result *r) {
    double t0 = lwi_now();
    lw_status st = LW_OK;
    for (int32_t k = 0; st == LW_OK && k < LWI_N_RULES; k++)
        if (!lw_optimizer_kind_whole((lw_optimizer_kind)k))
            st = update_elementwise_rule(opt, (lw_optimizer_kind)k, grad_scale);
    r->seconds_adamw += lwi_now() - t0;
    return st == LW_OK ? lwi_optimizer_whole_step(opt, grad_scale, r) : st;
}

lw_status lw_optimizer_step(lw_optimizer *opt, lw_step_result *out) {
    if (opt == NULL || out == NULL)
        return lwi_fail(LW_ERR_INVALID, "optimizer: optimizer and result must not be NULL");
    lw_step_result r;
    memset(&r, 0, sizeof r);
    double t = lwi_now();
    /* parameters must all be here before they are updated */
    lw_status st = lw_buffers_finish_param_sync(opt->buffers, -1);
    /* parameters written since the master copies were set (initialisation, a load) win */
    if (st == LW_OK && opt->has_master && lw_buffers_commits(opt->buffers) != opt->master_commits)
        st = lw_optimizer_reload_master(opt);
    if (st == LW_OK) st = lw_buffers_finish_grad_sync(opt->buffers);
    r.seconds_grad_sync = lwi_now() - t;
    if (st != LW_OK) return st;

    t = lwi_now();
    if ((st = global_norm(opt, &r.grad_norm, &r.zeros)) != LW_OK) return st;
    r.seconds_norm = lwi_now() - t;

    /* every rank sees the same global norm, so all skip or none */
    if (!isfinite(r.grad_norm)) {
        r.skipped = true;
        opt->skips++;
    } else {
        float scale = 1.0f;
        if (opt->o.clip > 0.0f && opt->o.clip / (r.grad_norm + 1e-6) < 1.0)
            scale = (float)(opt->o.clip / (r.grad_norm + 1e-6));
        opt->step++;
        if ((st = update(opt, scale, &r)) != LW_OK) return st;
    }
    /* the queued row scales (QK-clip) on the weights as the update left them, or as they were
     * when it was skipped; then bf16 parameters take their master copies rounded, which the
     * parameter sync gathers */
    bool scaled = false;
    if ((st = lwi_optimizer_apply_scales(opt, &scaled)) != LW_OK) return st;
    if ((!r.skipped || scaled) && (st = move_master(opt, false)) != LW_OK) return st;
    t = lwi_now();
    st = lw_buffers_start_param_sync(opt->buffers);
    r.seconds_param_sync = lwi_now() - t;
    r.skips = opt->skips;
    r.step = opt->step;
    *out = r;
    return st;
}

/* ---- state, for checkpoints ---------------------------------------------------------------- */

_Static_assert(LWI_RULE_MAX_PARTS <= sizeof((lw_state_entry *)0)->parts / sizeof(float *),
               "lw_state_entry.parts is too short for a rule's parts");

int32_t lw_optimizer_state_count(const lw_optimizer *opt) { return opt ? opt->n_owned : 0; }

lw_status lw_optimizer_state(const lw_optimizer *opt, int32_t k, lw_state_entry *out) {
    if (opt == NULL || out == NULL) return lwi_fail(LW_ERR_INVALID, "optimizer: NULL argument");
    if (k < 0 || k >= opt->n_owned)
        return lwi_fail(LW_ERR_RANGE, "optimizer: state entry %d out of range [0, %d)", k,
                        opt->n_owned);
    const lwi_owned *o = &opt->owned[k];
    memset(out, 0, sizeof *out);
    out->param = o->param;
    out->optimizer = o->kind;
    out->start = o->start;
    out->count = o->count;
    out->n_parts = lw_optimizer_kind_parts(o->kind);
    for (int32_t i = 0; i < out->n_parts; i++) {
        out->parts[i] = o->parts[i];
        out->part_counts[i] = o->part_counts[i];
    }
    out->master = o->master;
    return LW_OK;
}

lw_status lw_optimizer_counters(const lw_optimizer *opt, int64_t *step, int64_t *skips) {
    if (opt == NULL) return lwi_fail(LW_ERR_INVALID, "optimizer: NULL optimizer");
    if (step) *step = opt->step;
    if (skips) *skips = opt->skips;
    return LW_OK;
}

lw_status lw_optimizer_set_counters(lw_optimizer *opt, int64_t step, int64_t skips) {
    if (opt == NULL) return lwi_fail(LW_ERR_INVALID, "optimizer: NULL optimizer");
    if (step < 0 || skips < 0)
        return lwi_fail(LW_ERR_INVALID,
                        "optimizer: counters must be >= 0, got step %lld, skips "
                        "%lld",
                        (long long)step, (long long)skips);
    opt->step = step;
    opt->skips = skips;
    return LW_OK;
}
