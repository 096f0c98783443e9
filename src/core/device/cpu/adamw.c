/* adamw.c: the AdamW update of contiguous runs of elements on the CPU (docs/algorithms.md
 * section 7), with bias correction and decoupled weight decay; a tensor's elements split over the
 * CPU pool's threads (pool.c). */
#include "device/cpu/cpu.h"
#include "device/cpu/fast_math.h"
#include "device/cpu/pool.h"

#include <math.h>

/* elements per part of the pool at least (memory-bound: smaller parts gain nothing) */
#define GRAIN 65536

LWI_SIMD_CLONES
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

/* One tensor's update, for the pool's parts (each takes a range of its elements). */
typedef struct {
    const lw_adamw_options *o;
    const lwi_update_tensor *x;
    int64_t t;
    float grad_scale;
} adamw_job;

static void adamw_range(void *ctx, int64_t begin, int64_t end, int32_t part) {
    (void)part;
    const adamw_job *j = ctx;
    const lwi_update_tensor *x = j->x;
    adamw(j->o, x->w + begin, x->g + begin, x->m + begin, x->v + begin, end - begin, j->t, x->lr,
          x->weight_decay, j->grad_scale);
}

lw_status lwi_cpu_adamw(lw_stream *stream, const lw_adamw_options *o,
                        const lwi_update_tensor *tensors, int32_t count, int64_t t,
                        float grad_scale) {
    (void)stream;
    for (int32_t k = 0; k < count; k++) {
        adamw_job j = {o, &tensors[k], t, grad_scale};
        lwi_cpu_parallel(tensors[k].n, GRAIN, adamw_range, &j);
    }
    return LW_OK;
}
