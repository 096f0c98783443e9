/* rules.h: what the optimizer asks of a rule (rule_list.h lists them; each rule's file defines
 * its lwi_rule_<name>): an element-wise rule updates every tensor it has in one call; a
 * whole-matrix rule turns a matrix's gradient into an update (prepare: weight decay, momentum),
 * transforms batches of same-shaped updates (Muon: Newton-Schulz), then applies them, and
 * keeps what it needs between calls in a context made from the options. A rule's state is its
 * parts (lw_optimizer_kind_parts), each of its size (lw_optimizer_kind_part_count), in
 * `state[part]`. Not public API. */
#ifndef LW_OPTIM_RULES_H
#define LW_OPTIM_RULES_H

#include "base/rule_list.h"
#include "device/device.h"

typedef struct lwi_rule {
    /* element-wise rules */
    lw_status (*update)(lw_stream *s, const lw_optimizer_options *o,
                        const lwi_update_tensor *tensors, int32_t count, int64_t step,
                        float grad_scale);
    /* whole-matrix rules */
    lw_status (*open)(const lw_optimizer_options *o, void **ctx);
    void (*close)(void *ctx);
    /* the update array of `batch` rows x cols matrices, valid until the next call on ctx */
    lw_status (*batch_space)(void *ctx, lw_stream *s, int64_t batch, int64_t rows, int64_t cols,
                             float **u);
    lw_status (*prepare)(void *ctx, lw_stream *s, float *w, const float *g, float *const *state,
                         float *u, int64_t n, float lr, float wd, float grad_scale);
    /* x may be u (then in place); out of place, batch is 1 */
    lw_status (*transform)(void *ctx, lw_stream *s, float *u, float *x, int64_t batch,
                           int64_t rows, int64_t cols);
    /* the step; wd: the group's weight decay, for a rule that decays W with the step (Muon's
       cautious or scaled decay) rather than in prepare; x may be rescaled in place with the
       state (NorMuon's variance reduction: the whole matrix, never a row shard) */
    lw_status (*apply)(void *ctx, lw_stream *s, float *w, float *x, float *const *state,
                       int64_t n, int64_t rows, int64_t cols, float lr, float wd);
} lwi_rule;

#define LWI_RULE_DECLARATION(KIND, name, whole, parts) extern const lwi_rule lwi_rule_##name;
LWI_RULES(LWI_RULE_DECLARATION)
#undef LWI_RULE_DECLARATION

/* The rule of kind, or NULL for a value no rule has. */
const lwi_rule *lwi_rule_of(lw_optimizer_kind kind);

#endif
