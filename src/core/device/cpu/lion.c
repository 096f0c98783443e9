/* lion.c: the Lion update of contiguous runs of elements on the CPU, the reference of the table's
 * lion entry: the sign of an interpolation of momentum and gradient as the step, decoupled
 * weight decay, then the momentum; a tensor's elements split over the CPU pool's threads
 * (pool.c). Each element's arithmetic is fixed (no contraction: CMakeLists.txt), so the split
 * and the machine change no bit. */
#include "device/cpu/cpu.h"
#include "device/cpu/fast_math.h"
#include "device/cpu/pool.h"

/* elements per part of the pool at least (memory-bound: smaller parts gain nothing) */
#define GRAIN 65536

/* sign(c) as Lion's step takes it: 0 for either zero (no step from a gradient that cancels the
 * momentum), NaN for NaN, so that a NaN gradient reaches w as it does in AdamW. */
LWI_ROW_HELPER float step_sign(float c) {
    return c > 0.0f ? 1.0f : c < 0.0f ? -1.0f : c == 0.0f ? 0.0f : c;
}

/* src/cuda/lion.cu does these operations in this order, rounding each: keep the two alike. */
LWI_SIMD_CLONES
static void lion(const lw_lion_options *o, float *w, const float *g, float *m, int64_t n, float lr,
                 float wd, float grad_scale) {
    const float b1 = o->beta1, b2 = o->beta2;
    const float k1 = 1.0f - b1, k2 = 1.0f - b2;
    for (int64_t i = 0; i < n; i++) {
        const float gi = grad_scale * g[i];
        const float s = step_sign(b1 * m[i] + k1 * gi);
        w[i] = w[i] - lr * (s + wd * w[i]);
        m[i] = b2 * m[i] + k2 * gi;
    }
}

/* One tensor's update, for the pool's parts (each takes a range of its elements). */
typedef struct {
    const lw_lion_options *o;
    const lwi_update_tensor *x;
    float grad_scale;
} lion_job;

static void lion_range(void *ctx, int64_t begin, int64_t end, int32_t part) {
    (void)part;
    const lion_job *j = ctx;
    const lwi_update_tensor *x = j->x;
    lion(j->o, x->w + begin, x->g + begin, x->m + begin, end - begin, x->lr, x->weight_decay,
         j->grad_scale);
}

lw_status lwi_cpu_lion(lw_stream *stream, const lw_lion_options *o,
                       const lwi_update_tensor *tensors, int32_t count, float grad_scale) {
    (void)stream;
    for (int32_t k = 0; k < count; k++) {
        lion_job j = {o, &tensors[k], grad_scale};
        lwi_cpu_parallel(tensors[k].n, GRAIN, lion_range, &j);
    }
    return LW_OK;
}
