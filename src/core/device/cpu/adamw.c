/* adamw.c: the AdamW update of contiguous runs of elements on the CPU (REFERENCE.md section 7),
 * with bias correction and decoupled weight decay. */
#include "device/cpu/cpu.h"

#include <math.h>

static void adamw(const lw_adamw_options *o, float *w, const float *g, float *m, float *v,
                  int64_t n, int64_t t, float lr, float wd, float grad_scale) {
    const float b1 = o->beta1, b2 = o->beta2, eps = o->eps;
    /* bias corrections in double: 1 - beta^t loses digits in float for small t */
    const float c1 = (float)(1.0 / (1.0 - pow((double)b1, (double)t)));
    const float c2 = (float)(1.0 / (1.0 - pow((double)b2, (double)t)));
    for (int64_t i = 0; i < n; i++) {
        float gi = grad_scale * g[i];
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        float mhat = m[i] * c1, vhat = v[i] * c2;
        w[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * w[i]);
    }
}

lw_status lwi_cpu_adamw(lw_stream *stream, const lw_adamw_options *o,
                        const lwi_adamw_tensor *tensors, int32_t count, int64_t t,
                        float grad_scale) {
    (void)stream;
    for (int32_t k = 0; k < count; k++) {
        const lwi_adamw_tensor *x = &tensors[k];
        adamw(o, x->w, x->g, x->m, x->v, x->n, t, x->lr, x->weight_decay, grad_scale);
    }
    return LW_OK;
}
