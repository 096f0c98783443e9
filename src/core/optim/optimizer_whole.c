/* optimizer_whole.c: the whole-matrix rules' half of the optimizer's step (docs/algorithms.md
 * sections 5, 6, 8, 9): owned whole matrices in batches of one rule and shape, row-sharding on
 * the element-wise buckets, and the TP shards and split QKV weights through muon_tp.c (Muon's
 * TP modes); and the TP group's checks. The object, the norm, the element-wise rules and the
 * state are optimizer.c's; what a rule does to a matrix is its own file's (Muon: muon.c). */
#include "optim/optimizer_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Groups the owned whole matrices by rule, context (their groups' options) and shape, in owned
 * order, each batch within the cap. */
lw_status lwi_optimizer_whole_make_batches(lw_optimizer *opt) {
    const lw_layout *l = opt->layout;
    const int32_t n = opt->n_owned ? opt->n_owned : 1;
    free(opt->batches);
    free(opt->batch_members);
    free(opt->tensors);
    opt->n_batches = 0;
    opt->batches_stale = false;
    opt->batches = calloc((size_t)n, sizeof(lwi_matrix_batch));
    opt->batch_members = calloc((size_t)n, sizeof(int32_t));
    opt->tensors = calloc((size_t)n, sizeof(lwi_update_tensor));
    bool *placed = calloc((size_t)n, sizeof(bool));
    if (opt->batches == NULL || opt->batch_members == NULL || opt->tensors == NULL ||
        placed == NULL) {
        free(placed);
        return lwi_fail(LW_ERR_NOMEM, "optimizer: out of memory");
    }
    const int32_t cap = lw_device_is_host(opt->device) ? lwi_cpu_threads() : BATCH_MATRICES;
    int32_t members = 0;
    for (int32_t k = 0; k < opt->n_owned; k++) {
        const lwi_owned *o = &opt->owned[k];
        if (!o->whole || o->sliced || o->tp || placed[k]) continue;
        const lwi_param *p = &l->params[o->param];
        lwi_matrix_batch *b = &opt->batches[opt->n_batches++];
        b->kind = o->kind;
        b->ctx = lwi_optimizer_rule_ctx(opt, o->kind, opt->group[o->param]);
        b->rows = p->shape[0];
        b->cols = p->shape[1];
        b->first = members;
        for (int32_t j = k; j < opt->n_owned; j++) {
            const lwi_owned *oj = &opt->owned[j];
            const lwi_param *pj = &l->params[oj->param];
            if (!oj->whole || oj->sliced || oj->tp || placed[j] || oj->kind != b->kind ||
                lwi_optimizer_rule_ctx(opt, oj->kind, opt->group[oj->param]) != b->ctx ||
                pj->shape[0] != b->rows || pj->shape[1] != b->cols)
                continue;
            if (b->count > 0 && (b->count == cap ||
                                 (b->count + 1) * b->rows * b->cols > BATCH_FLOATS))
                break;
            placed[j] = true;
            opt->batch_members[members++] = j;
            b->count++;
        }
    }
    free(placed);
    return LW_OK;
}

/* The TP group: one of size 1 is no TP. Its collectives must reach the buffers' device (but
 * blockwise has none), and its ranks must hold equal layouts, or their Muon collectives would
 * pair different matrices: compared by hash, and every rank fails alike. */
lw_status lwi_optimizer_whole_check_tp(lw_optimizer *opt, lw_comm *tp, lw_muon_tp_mode mode) {
    if (tp == NULL || lw_comm_size(tp) == 1) return LW_OK;
    if (mode != LW_MUON_TP_BLOCKWISE && !lw_comm_reaches(tp, opt->device))
        return lwi_fail(LW_ERR_UNSUPPORTED,
                        "optimizer: Muon's TP mode %s needs a TP communicator that moves %s's "
                        "memory (a device communicator, lw_comm_device_new); the %s one moves "
                        "host memory",
                        lw_muon_tp_mode_name(mode), lw_device_name(opt->device),
                        lw_comm_backend(tp));
    char mine[17], root[17];
    lw_status st = lw_layout_hash(opt->layout, mine);
    if (st != LW_OK) return st;
    memcpy(root, mine, sizeof root);
    lw_comm_set_label(tp, "the TP ranks' layout hashes");
    if ((st = lw_comm_broadcast(tp, root, sizeof root, 0)) != LW_OK) return st;
    int64_t differ = memcmp(root, mine, sizeof root) != 0;
    lw_comm_set_label(tp, "the TP ranks' layout check");
    if ((st = lw_comm_allreduce(tp, &differ, 1, LW_DTYPE_I64, LW_REDUCE_SUM)) != LW_OK) return st;
    if (differ > 0)
        return lwi_fail(LW_ERR_INVALID,
                        "optimizer: the layouts of %lld of the %d TP ranks differ from TP rank "
                        "0's (hash %s; this rank's %s): every TP rank must build its buffers from "
                        "the same local shapes and options",
                        (long long)differ, lw_comm_size(tp), root, mine);
    opt->tp_comm = tp;
    return LW_OK;
}

/* Row-sharding on one bucket of an element-wise buffer of a whole-matrix rule: each owned slice
 * prepared (momentum), written where it lies in this rank's shard of the bucket; an all-gather
 * assembles the whole update of every matrix in it; each rank transforms (orthogonalises) the
 * matrices it holds a slice of. */
static lw_status update_sliced_bucket(lw_optimizer *opt, int32_t b, int32_t k, float grad_scale,
                                      lw_step_result *r) {
    const lw_layout *l = opt->layout;
    const lwi_buffer *lb = &l->buffers[b];
    const lwi_bucket *bk = &lb->buckets[k];
    lw_comm *comm = lw_buffers_buffer_comm(opt->buffers, b);
    const int64_t count = bk->stop - bk->start, shard = count / lb->dp;
    const int32_t rank = lw_comm_rank(comm);
    float *u = opt->gathered;
    /* padding stays zero */
    lw_status st = lw_device_set(opt->stream, u + rank * shard, 0, (int64_t)sizeof(float) * shard);
    for (int32_t j = 0; st == LW_OK && j < opt->n_owned; j++) {
        lwi_owned *o = &opt->owned[j];
        const lwi_param *p = &l->params[o->param];
        if (!o->sliced || p->buffer != b || p->bucket != k) continue;
        float *w, *g;
        st = lwi_optimizer_weights(opt, o, &w);
        if (st == LW_OK) st = lw_buffers_owned_grad(opt->buffers, o->param, &g);
        const int32_t grp = opt->group[o->param];
        if (st == LW_OK)
            st = o->rule->prepare(lwi_optimizer_rule_ctx(opt, o->kind, grp), opt->stream, w, g,
                                  o->parts,
                                  u + (p->start - bk->start) + o->start, o->count, opt->lr[grp],
                                  opt->wd[grp], grad_scale);
    }
    double t = lwi_now();
    char label[64];
    snprintf(label, sizeof label, "the %s updates of buffer %d bucket %d",
             lw_optimizer_kind_name(lb->optimizer), b + 1, k + 1);
    lw_comm_set_label(comm, label);
    if (st == LW_OK) st = lw_comm_allgather(comm, u, count, LW_DTYPE_F32, NULL);
    r->seconds_muon_comm += lwi_now() - t;
    for (int32_t j = 0; st == LW_OK && j < opt->n_owned; j++) {
        lwi_owned *o = &opt->owned[j];
        const lwi_param *p = &l->params[o->param];
        if (!o->sliced || p->buffer != b || p->bucket != k) continue;
        float *w;
        const int32_t grp = opt->group[o->param];
        const float lr = opt->lr[grp];
        void *ctx = lwi_optimizer_rule_ctx(opt, o->kind, grp);
        if (lwi_muon_tp_takes(opt->tp, p)) {
            lw_muon *muon = lwi_optimizer_rule_ctx(opt, LW_OPTIMIZER_MUON, grp);
            st = lwi_muon_tp_update(opt->tp, muon, opt->stream, p,
                                    u + (p->start - bk->start), opt->orthogonal,
                                    &r->seconds_muon_comm);
            if (st == LW_OK) st = lwi_optimizer_weights(opt, o, &w);
            if (st == LW_OK)
                st = lwi_muon_tp_apply(opt->tp, muon, opt->stream, p, w,
                                       opt->orthogonal + o->start, o->start, o->count, lr,
                                       opt->wd[grp]);
            continue;
        }
        st = o->rule->transform(ctx, opt->stream, u + (p->start - bk->start), opt->orthogonal, 1,
                                p->shape[0], p->numel / p->shape[0]);
        if (st == LW_OK) st = lwi_optimizer_weights(opt, o, &w);
        if (st == LW_OK)
            st = o->rule->apply(ctx, opt->stream, w, opt->orthogonal + o->start, o->parts,
                                o->count, p->shape[0], p->numel / p->shape[0], lr, opt->wd[grp]);
    }
    return st;
}

/* One batch of whole matrices of a rule: each prepared (weight decay, momentum) into the
 * batch's update array, all of them transformed (Newton-Schulz), then each applied (with a
 * decay that waits for the step). */
static lw_status update_batch(lw_optimizer *opt, const lwi_matrix_batch *b, float grad_scale) {
    const int64_t n = b->rows * b->cols;
    const lwi_rule *rule = lwi_rule_of(b->kind);
    void *ctx = b->ctx;
    float *u;
    lw_status st = rule->batch_space(ctx, opt->stream, b->count, b->rows, b->cols, &u);
    for (int32_t i = 0; st == LW_OK && i < b->count; i++) {
        lwi_owned *o = &opt->owned[opt->batch_members[b->first + i]];
        const int32_t grp = opt->group[o->param];
        float *w, *g;
        st = lwi_optimizer_weights(opt, o, &w);
        if (st == LW_OK) st = lw_buffers_owned_grad(opt->buffers, o->param, &g);
        if (st == LW_OK)
            st = rule->prepare(ctx, opt->stream, w, g, o->parts, u + i * n, n, opt->lr[grp],
                               opt->wd[grp], grad_scale);
    }
    if (st == LW_OK) st = rule->transform(ctx, opt->stream, u, u, b->count, b->rows, b->cols);
    for (int32_t i = 0; st == LW_OK && i < b->count; i++) {
        lwi_owned *o = &opt->owned[opt->batch_members[b->first + i]];
        const int32_t grp = opt->group[o->param];
        float *w;
        st = lwi_optimizer_weights(opt, o, &w);
        if (st == LW_OK)
            st = rule->apply(ctx, opt->stream, w, u + i * n, o->parts, n, b->rows, b->cols,
                             opt->lr[grp], opt->wd[grp]);
    }
    return st;
}

/* One whole owned TP shard or split QKV weight: weight decay and momentum, muon_tp.c's step
 * (collective over TP for a TP shard), W -= lr * step (with a decay that waits for the step). */
static lw_status update_muon_tp(lw_optimizer *opt, lwi_owned *o, float grad_scale,
                                lw_step_result *r) {
    const lwi_param *p = &opt->layout->params[o->param];
    const int32_t grp = opt->group[o->param];
    lw_muon *muon = lwi_optimizer_rule_ctx(opt, LW_OPTIMIZER_MUON, grp);
    float *w, *g;
    lw_status st = lwi_optimizer_weights(opt, o, &w);
    if (st == LW_OK) st = lw_buffers_owned_grad(opt->buffers, o->param, &g);
    if (st == LW_OK)
        st = lw_muon_momentum(muon, opt->stream, w, g, o->state, opt->tp_update, o->count,
                              opt->lr[grp], opt->wd[grp], grad_scale);
    if (st == LW_OK)
        st = lwi_muon_tp_update(opt->tp, muon, opt->stream, p, opt->tp_update,
                                opt->tp_update, &r->seconds_muon_comm);
    if (st == LW_OK)
        st = lwi_muon_tp_apply(opt->tp, muon, opt->stream, p, w, opt->tp_update, 0, o->count,
                               opt->lr[grp], opt->wd[grp]);
    return st;
}

/* The whole-matrix rules on everything this rank owns: the batches of whole matrices, then the
 * TP shards and split QKV weights, then the row-sharded buckets. */
lw_status lwi_optimizer_whole_step(lw_optimizer *opt, float grad_scale, lw_step_result *r) {
    const lw_layout *l = opt->layout;
    if (opt->batches_stale) {
        lw_status st = lwi_optimizer_whole_make_batches(opt);
        if (st != LW_OK) return st;
    }
    for (int32_t b = 0; b < opt->n_batches; b++) {
        double t = lwi_now();
        lw_status st = update_batch(opt, &opt->batches[b], grad_scale);
        r->seconds_muon += lwi_now() - t;
        if (st != LW_OK) return st;
    }
    double t = lwi_now();
    for (int32_t k = 0; k < opt->n_owned; k++) {
        if (!opt->owned[k].tp) continue;
        lw_status st = update_muon_tp(opt, &opt->owned[k], grad_scale, r);
        if (st != LW_OK) return st;
    }
    for (int32_t b = 0; b < l->n_buffers; b++)
        for (int32_t k = 0; l->buffers[b].whole && lwi_is_elementwise(l->buffers[b].algorithm) &&
                            k < l->buffers[b].n_buckets;
             k++) {
            lw_status st = update_sliced_bucket(opt, b, k, grad_scale, r);
            if (st != LW_OK) return st;
        }
    r->seconds_muon += lwi_now() - t;
    return LW_OK;
}
