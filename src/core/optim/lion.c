/* lion.c: Lion's options (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"),
 * their check, lw_lion_update, which runs the step on the stream's device (device/cpu/lion.c
 * on the CPU), and Lion as the optimizer's element-wise rule. */
#include "optim/lion.h"
#include "optim/rules.h"

lw_lion_options lw_lion_defaults(void) {
    lw_lion_options o = {sizeof(lw_lion_options), 0.9f, 0.99f};
    return o;
}

lw_status lwi_lion_check(const lw_lion_options *o) {
    /* written so that a NaN fails too */
    if (!(o->beta1 >= 0.0f && o->beta1 < 1.0f))
        return lwi_fail(LW_ERR_INVALID, "lion: beta1 must be in [0, 1), got %g", (double)o->beta1);
    if (!(o->beta2 >= 0.0f && o->beta2 < 1.0f))
        return lwi_fail(LW_ERR_INVALID, "lion: beta2 must be in [0, 1), got %g", (double)o->beta2);
    return LW_OK;
}

lw_status lw_lion_update(lw_stream *stream, const lw_lion_options *opts, float *w, const float *g,
                         float *m, int64_t n, float lr, float weight_decay, float grad_scale) {
    const lw_lion_options d = lw_lion_defaults();
    lw_lion_options o;
    lw_status st = lwi_options_read("lion", &lwi_lion_options_kind, opts, &d, &o);
    if (st == LW_OK) st = lwi_lion_check(&o);
    if (st != LW_OK) return st;
    const lwi_update_tensor x = {w, g, m, NULL, n, lr, weight_decay};
    return lwi_run_lion(stream, &o, &x, 1, grad_scale);
}

static lw_status rule_update(lw_stream *s, const lw_optimizer_options *o,
                             const lwi_update_tensor *tensors, int32_t count, int64_t step,
                             float grad_scale) {
    (void)step; /* Lion has no bias correction */
    return lwi_run_lion(s, &o->lion, tensors, count, grad_scale);
}

const lwi_rule lwi_rule_lion = {.update = rule_update};
