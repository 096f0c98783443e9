/* swiglu.c: SwiGLU over fused rows [a | b] (LLaMA's gate and up projections from one linear
 * layer, gate first): y = silu(a) * b, forward and accumulating backward into the fused
 * gradient, over the pool a range of rows at a time, fp32 or bf16 inputs and outputs
 * (activation.h). silu(a) = a / (1 + exp(-a)) with the branch-free exp of fast_math.h, so the loops
 * vectorise and keep silu's relative accuracy for negative a. */
#include "device/cpu/activation.h"
#include "device/cpu/pool.h"

/* Below a = -88 silu(a) is under 1e-36 and its slope too, above 87 they are a and 1 to float
 * precision (the neglected terms are below 1e-35): a is clamped at -88 into lo first, and lo at
 * 87 into vc, the value exp and the slope take, so that exp stays in range, a = -inf gives ~0
 * (not -inf / inf) and a = inf a slope of 1 (not inf * 0). Clamps are selects, which vectorise
 * and which a NaN passes through. */
#define A_MIN (-88.0f)
#define A_MAX 87.0f
/* elements per pass within a row (stack arrays in L1) */
#define BLOCK 256
/* elements per part of the pool at least */
#define GRAIN 16384

/* lo = max(a, A_MIN), vc = min(lo, A_MAX) and e = exp(-vc), the terms forward and backward
 * start from; the clamps are a pass of their own, as gelu.c's, so the exp loop vectorises */
LWI_ROW_HELPER void exp_block(float *lo, float *vc, float *e, const float *a, int64_t m) {
    for (int64_t i = 0; i < m; i++) {
        const float l = a[i] < A_MIN ? A_MIN : a[i];
        lo[i] = l;
        vc[i] = l > A_MAX ? A_MAX : l;
    }
    for (int64_t i = 0; i < m; i++)
        e[i] = lwi_exp_fast(-vc[i]);
}

/* y[0, m) = silu(a) * b */
LWI_ROW_HELPER void forward_block(float *y, const float *lo, const float *e, const float *b,
                                  int64_t m) {
    for (int64_t i = 0; i < m; i++)
        y[i] = lo[i] / (1.0f + e[i]) * b[i];
}

/* da[0, m) += dy b silu'(a), db += dy silu(a); silu' = s + a s (1 - s) with s = 1 / (1 + e)
 * and 1 - s taken as e s, which does not cancel where s -> 1 */
LWI_ROW_HELPER void backward_block(float *da, float *db, const float *dy, const float *lo,
                                   const float *vc, const float *e, const float *b, int64_t m) {
    for (int64_t i = 0; i < m; i++) {
        const float den = 1.0f + e[i];
        const float s = 1.0f / den;
        const float ds = s + vc[i] * (e[i] * s) * s;
        da[i] += dy[i] * b[i] * ds;
        db[i] += dy[i] * (lo[i] / den);
    }
}

/* The kernels' arguments, for the pool's parts (each takes a range of rows). */
typedef struct {
    lwi_activation_io io; /* x and out (y, the backward's dx) over whole rows */
    int64_t h;            /* half the fused width: y's columns */
} swiglu_job;

LWI_SIMD_CLONES
static void swiglu_rows(void *ctx, int64_t begin, int64_t end, int32_t part) {
    (void)part;
    const swiglu_job *j = ctx;
    const lwi_activation_io *io = &j->io;
    const int64_t h = j->h;
    float ab[2 * BLOCK], lo[BLOCK], vc[BLOCK], e[BLOCK], ob[2 * BLOCK];
    for (int64_t r = begin; r < end; r++)
        for (int64_t j0 = 0; j0 < h; j0 += BLOCK) {
            const int64_t m = h - j0 < BLOCK ? h - j0 : BLOCK;
            /* columns [j0, j0 + m) of row r's halves a and b */
            const int64_t at = r * 2 * h + j0;
            const float *a = lwi_activation_in(io, at, m, ab);
            const float *b = lwi_activation_in(io, at + h, m, ab + BLOCK);
            exp_block(lo, vc, e, a, m);
            if (io->dy == NULL) {
                const int64_t y_at = r * h + j0;
                float *y = lwi_activation_out(io, y_at, m, ob);
                forward_block(y, lo, e, b, m);
                lwi_activation_store(io, y_at, m, ob);
                continue;
            }
            float *da = lwi_activation_out(io, at, m, ob);
            float *db = lwi_activation_out(io, at + h, m, ob + BLOCK);
            backward_block(da, db, io->dy + r * h + j0, lo, vc, e, b, m);
            lwi_activation_store(io, at, m, ob);
            lwi_activation_store(io, at + h, m, ob + BLOCK);
        }
}

/* rows per part at least: GRAIN elements of y */
static int64_t grain_rows(int64_t h) { return h >= GRAIN ? 1 : GRAIN / h; }

/* the forward (dy NULL) or the backward over the pool */
static lw_status swiglu(void *out, lw_dtype out_dtype, const float *dy, const void *x,
                        lw_dtype x_dtype, int64_t n, int64_t c) {
    if (n <= 0 || c <= 0) return LW_OK;
    swiglu_job j = {lwi_activation_io_of(out, out_dtype, dy, x, x_dtype), c / 2};
    lwi_cpu_parallel(n, grain_rows(c / 2), swiglu_rows, &j);
    return LW_OK;
}

lw_status lwi_cpu_swiglu_forward(lw_stream *stream, void *y, lw_dtype y_dtype, const void *x,
                                 lw_dtype x_dtype, int64_t n, int64_t c) {
    (void)stream;
    return swiglu(y, y_dtype, NULL, x, x_dtype, n, c);
}

lw_status lwi_cpu_swiglu_backward(lw_stream *stream, void *dx, lw_dtype dx_dtype, const float *dy,
                                  const void *x, lw_dtype x_dtype, int64_t n, int64_t c) {
    (void)stream;
    return swiglu(dx, dx_dtype, dy, x, x_dtype, n, c);
}
