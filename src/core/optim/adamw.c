/* adamw.c: AdamW's options (docs/algorithms.md section 7), its public one-tensor update, and
 * AdamW as the optimizer's element-wise rule; the arithmetic runs on the device (the adamw
 * kernel, device/cpu/adamw.c). */
#include "optim/rules.h"

lw_adamw_options lw_adamw_defaults(void) {
    lw_adamw_options o = {sizeof(lw_adamw_options), 0.9f, 0.95f, 1e-8f};
    return o;
}

lw_status lw_adamw_update(lw_stream *stream, const lw_adamw_options *opts, float *w, const float *g,
                          float *m, float *v, int64_t n, int64_t t, float lr, float weight_decay,
                          float grad_scale) {
    const lw_adamw_options d = lw_adamw_defaults();
    lw_adamw_options o;
    const lw_status st = lwi_options_read("adamw", &lwi_adamw_options_kind, opts, &d, &o);
    if (st != LW_OK) return st;
    const lwi_update_tensor x = {w, g, m, v, n, lr, weight_decay};
    return lwi_run_adamw(stream, &o, &x, 1, t, grad_scale);
}

static lw_status rule_update(lw_stream *s, const lw_optimizer_options *o,
                             const lwi_update_tensor *tensors, int32_t count, int64_t step,
                             float grad_scale) {
    return lwi_run_adamw(s, &o->adamw, tensors, count, step, grad_scale);
}

const lwi_rule lwi_rule_adamw = {.update = rule_update};
