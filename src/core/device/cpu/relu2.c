/* relu2.c: ReLU^2 (the squared ReLU of Primer, nanochat's MLP activation), forward and
 * accumulating backward, element-wise over the pool, with fp32 or bf16 inputs and outputs
 * (activation.h). */
#include "device/cpu/activation.h"
#include "device/cpu/pool.h"

/* elements widened or rounded per pass (stack arrays in L1) */
#define BLOCK 256
/* elements per part of the pool at least: below that a thread's wake-up costs more than it saves */
#define GRAIN 16384

/* max(x, 0) as a select in which a NaN x, failing the comparison, passes through */
LWI_ROW_HELPER float relu(float x) { return x < 0.0f ? 0.0f : x; }

/* y[0, m) = max(x, 0)^2 */
LWI_ROW_HELPER void forward_block(float *y, const float *x, int64_t m) {
    for (int64_t i = 0; i < m; i++) {
        const float r = relu(x[i]);
        y[i] = r * r;
    }
}

/* dx[0, m) += dy * 2 max(x, 0) */
LWI_ROW_HELPER void backward_block(float *dx, const float *dy, const float *x, int64_t m) {
    for (int64_t i = 0; i < m; i++)
        dx[i] += dy[i] * (2.0f * relu(x[i]));
}

LWI_SIMD_CLONES
static void relu2_range(void *ctx, int64_t begin, int64_t end, int32_t part) {
    (void)part;
    const lwi_activation_io *io = ctx;
    for (int64_t i0 = begin; i0 < end; i0 += BLOCK) {
        const int64_t m = end - i0 < BLOCK ? end - i0 : BLOCK;
        float xb[BLOCK], ob[BLOCK];
        const float *x = lwi_activation_in(io, i0, m, xb);
        float *out = lwi_activation_out(io, i0, m, ob);
        if (io->dy == NULL)
            forward_block(out, x, m);
        else
            backward_block(out, io->dy + i0, x, m);
        lwi_activation_store(io, i0, m, ob);
    }
}

/* the forward (dy NULL) or the backward over the pool */
static lw_status relu2(void *out, lw_dtype out_dtype, const float *dy, const void *x,
                       lw_dtype x_dtype, int64_t n) {
    lwi_activation_io io = lwi_activation_io_of(out, out_dtype, dy, x, x_dtype);
    lwi_cpu_parallel(n, GRAIN, relu2_range, &io);
    return LW_OK;
}

lw_status lwi_cpu_relu2_forward(lw_stream *stream, void *y, lw_dtype y_dtype, const void *x,
                                lw_dtype x_dtype, int64_t n) {
    (void)stream;
    return relu2(y, y_dtype, NULL, x, x_dtype, n);
}

lw_status lwi_cpu_relu2_backward(lw_stream *stream, void *dx, lw_dtype dx_dtype, const float *dy,
                                 const void *x, lw_dtype x_dtype, int64_t n) {
    (void)stream;
    return relu2(dx, dx_dtype, dy, x, x_dtype, n);
}
