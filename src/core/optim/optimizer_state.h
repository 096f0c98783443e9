/* optimizer_state.h: the state of lw_optimizer (what this rank owns, its batches of whole
 * matrices, its workspaces), shared by optimizer.c (the object, the gradient norm, the
 * element-wise rules, the step, the state) and optimizer_whole.c (the step's whole-matrix rules
 * over the matrices this rank owns, and the TP checks); the buffers only through their public
 * API. Not public API. */
#ifndef LW_OPTIMIZER_STATE_H
#define LW_OPTIMIZER_STATE_H

#include "optim/muon.h"
#include "optim/muon_tp.h"
#include "optim/rules.h"

typedef struct lwi_owned {
    int32_t param;
    int64_t start; /* elements of the param this rank updates */
    int64_t count;
    lw_optimizer_kind kind;
    const lwi_rule *rule;
    bool whole;   /* its rule updates whole matrices */
    float *state; /* [owned, device memory] the rule's parts one after another (Muon: momentum;
                     AdamW: m then v; NorMuon: m, then v per line) */
    float *parts[LWI_RULE_MAX_PARTS];          /* [borrowed] into state: each part */
    int64_t part_counts[LWI_RULE_MAX_PARTS]; /* floats of each part */
    float *master; /* [owned, device memory] count: the fp32 master copy of the owned elements
                      when the buffers hold bf16 parameters (NULL for fp32: the array is it) */
    bool counted; /* counts towards the global norm (unsharded buffers: rank 0 only) */
    bool sliced;  /* a whole-matrix rule's matrix in an element-wise buffer: the slice is
                     prepared here, the whole matrix transformed from the bucket's gathered
                     update */
    bool tp;      /* a TP shard under TP or a split QKV weight: through muon_tp.c (Muon's) */
} lwi_owned;

/* Rows [first, first + count) of a param times factor, queued for the next step (qk_clip.c). */
typedef struct lwi_row_scale {
    int32_t param;
    int64_t first;
    int64_t count;
    float factor;
} lwi_row_scale;

/* A hyper-parameter group's own options (lw_optimizer_set_group_options) and its rules'
 * contexts opened from them. */
typedef struct lwi_group_options {
    lw_optimizer_options o;
    void *rule_ctx[LWI_N_RULES]; /* [owned] */
} lwi_group_options;

/* Owned whole matrices of one rule, context and shape, updated together: each prepared (momentum), all
 * of them transformed as one batch (Muon: Newton-Schulz, batched GEMMs on a GPU), then each
 * applied. */
typedef struct lwi_matrix_batch {
    lw_optimizer_kind kind;
    void *ctx; /* [borrowed] the rule's context its members' groups share */
    int64_t rows;
    int64_t cols;
    int32_t first; /* its members: batch_members[first .. first + count) (indices of owned) */
    int32_t count;
} lwi_matrix_batch;

/* Floats of updates a batch may hold on a GPU (128 MiB; its Newton-Schulz workspace is about
 * as much again). On the CPU a batch holds a matrix per thread of its kernels (lwi_cpu_threads:
 * each matrix orthogonalised on one thread, side by side), one matrix on one thread. */
#define BATCH_FLOATS ((int64_t)1 << 25)
#define BATCH_MATRICES 1024

struct lw_optimizer {
    lw_buffers *buffers;
    const lw_layout *layout;
    lw_device *device; /* [borrowed] the buffers': state and arithmetic live there */
    lw_stream *stream; /* [borrowed] its default stream */
    double *norm_acc;  /* [owned, device memory] sum of squares and zeros of the owned grads */
    lw_optimizer_options o;
    void *rule_ctx[LWI_N_RULES]; /* [owned] each whole-matrix rule's context */
    int32_t n_owned;
    lwi_owned *owned;   /* [owned] */
    int32_t *group; /* [owned] per param */
    int32_t n_groups;
    float *lr; /* [owned] per group */
    float *wd; /* [owned] per group */
    lwi_group_options **group_options; /* [owned] per group; NULL: the optimizer's (o) */
    bool batches_stale; /* groups or their options changed since the batches were made */
    int64_t step;
    int64_t skips;
    bool has_master;        /* bf16 parameters: owned entries have fp32 master copies */
    int64_t master_commits; /* lw_buffers_commits when the master copies were last set */
    float *gathered;   /* [owned, device memory] row-sharded Muon: a bucket's assembled update */
    float *orthogonal; /* [owned, device memory] and one matrix's orthogonalised update */
    int64_t gathered_numel;
    int64_t orthogonal_numel;
    lwi_update_tensor *tensors; /* [owned] n_owned: an element-wise rule's tensors, one call */
    int32_t n_batches;
    lwi_matrix_batch *batches;  /* [owned] */
    int32_t *batch_members; /* [owned] */
    lwi_muon_tp *tp;        /* [owned] TP shards and QKV splits (muon_tp.c) */
    lw_comm *tp_comm;       /* [borrowed] NULL: no TP (or t = 1) */
    float *tp_update;       /* [owned, device memory] a whole tp matrix's update */
    lwi_row_scale *scales;  /* [owned] n_scales queued for the next step, room for cap_scales */
    int32_t n_scales;
    int32_t cap_scales;
};

/* The fp32 weights the update of owned entry o reads and writes: its master copy, or the owned
 * elements of an fp32 array. */
static inline lw_status lwi_optimizer_weights(lw_optimizer *opt, const lwi_owned *o, float **w) {
    void *at = o->master;
    lw_status st = at != NULL ? LW_OK : lw_buffers_owned_param(opt->buffers, o->param, &at);
    *w = at;
    return st;
}

/* optimizer_groups.c */
/* opts read and checked (sizes of the nested structs, AdamW's, Lion's and NorMuon's ranges,
 * clip) into out. */
lw_status lwi_optimizer_read_options(const lw_optimizer_options *opts, lw_optimizer_options *out);
/* Each whole-matrix rule's context opened from o into ctx (closed again on failure). */
lw_status lwi_optimizer_open_rules(const lw_optimizer_options *o, void *ctx[LWI_N_RULES]);
void lwi_optimizer_close_rules(void *ctx[LWI_N_RULES]);
/* Room for n groups (new ones: lr and weight decay 0, the optimizer's options). */
lw_status lwi_optimizer_grow_groups(lw_optimizer *opt, int32_t n);
void lwi_optimizer_free_groups(lw_optimizer *opt);

/* The options group grp's parameters take: its own, or the optimizer's. */
static inline const lw_optimizer_options *lwi_optimizer_options_of(const lw_optimizer *opt,
                                                                   int32_t grp) {
    return opt->group_options[grp] != NULL ? &opt->group_options[grp]->o : &opt->o;
}

/* The context of rule kind for group grp's matrices. */
static inline void *lwi_optimizer_rule_ctx(const lw_optimizer *opt, lw_optimizer_kind kind,
                                           int32_t grp) {
    return opt->group_options[grp] != NULL ? opt->group_options[grp]->rule_ctx[kind]
                                           : opt->rule_ctx[kind];
}

/* qk_clip.c */
/* The queued row scales on what this rank updates (its fp32 weights), the queue then emptied;
 * *applied: whether any was queued (the master copies then need rounding into the parameters). */
lw_status lwi_optimizer_apply_scales(lw_optimizer *opt, bool *applied);

/* optimizer_whole.c */
/* Groups the owned whole matrices (not row-sharded, not TP) into batches of a rule, context
 * and shape (again, freeing the old batches, when called again). */
lw_status lwi_optimizer_whole_make_batches(lw_optimizer *opt);
/* Takes tp as the TP group when its size is above 1, after checking it (collective over it). */
lw_status lwi_optimizer_whole_check_tp(lw_optimizer *opt, lw_comm *tp, lw_muon_tp_mode mode);
/* Every whole-matrix update this rank makes in a step; times into r. */
lw_status lwi_optimizer_whole_step(lw_optimizer *opt, float grad_scale, lw_step_result *r);

#endif
