/* swiglu.c: SwiGLU over fused rows [a | b] (LLaMA's gate and up projections from one linear
 * layer, gate first): y = silu(a) * b, forward and accumulating backward into the fused
 * gradient, over the pool a range of rows at a time, fp32 or bf16 inputs and outputs as gelu.c
 * takes them. silu(a) = a / (1 + exp(-a)) with the branch-free exp of fast_math.h, so the loops
 * vectorise and keep silu's relative accuracy for negative a. */
#include "device/cpu/cpu.h"
#include "device/cpu/fast_math.h"
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

/* The kernels' arguments, for the pool's parts (each takes a range of rows); dy is NULL for the
 * forward. */
typedef struct {
    float *out;
    uint16_t *out16; /* the forward's y (the backward's dx) in bf16 instead of out, or NULL */
    const float *x, *dy;
    const uint16_t *x16; /* the input in bf16 instead of x, or NULL */
    int64_t h;           /* half the fused width: y's columns */
} swiglu_job;

/* Columns [j0, j0 + m) of row r: its halves a and b as fp32 (widened into ab when bf16). */
LWI_ROW_HELPER void load_halves(const swiglu_job *j, int64_t r, int64_t j0, int64_t m, float *ab,
                                const float **a, const float **b) {
    const int64_t at = r * 2 * j->h + j0;
    if (j->x16 != NULL) {
        lwi_cpu_widen_bf16(ab, j->x16 + at, m);
        lwi_cpu_widen_bf16(ab + BLOCK, j->x16 + at + j->h, m);
        *a = ab, *b = ab + BLOCK;
    } else {
        *a = j->x + at, *b = j->x + at + j->h;
    }
}

LWI_SIMD_CLONES
static void swiglu_rows(void *ctx, int64_t begin, int64_t end, int32_t part) {
    (void)part;
    const swiglu_job *j = ctx;
    const int64_t h = j->h;
    float ab[2 * BLOCK], lo[BLOCK], vc[BLOCK], e[BLOCK], ob[2 * BLOCK];
    for (int64_t r = begin; r < end; r++)
        for (int64_t j0 = 0; j0 < h; j0 += BLOCK) {
            const int64_t m = h - j0 < BLOCK ? h - j0 : BLOCK;
            const float *a, *b;
            load_halves(j, r, j0, m, ab, &a, &b);
            exp_block(lo, vc, e, a, m);
            if (j->dy == NULL) {
                const int64_t at = r * h + j0;
                if (j->out16 == NULL) {
                    forward_block(j->out + at, lo, e, b, m);
                } else { /* computed in fp32, then rounded */
                    forward_block(ob, lo, e, b, m);
                    lwi_cpu_round_bf16(j->out16 + at, ob, m);
                }
                continue;
            }
            const float *dy = j->dy + r * h + j0;
            const int64_t at = r * 2 * h + j0;
            if (j->out16 == NULL) {
                backward_block(j->out + at, j->out + at + h, dy, lo, vc, e, b, m);
            } else { /* accumulated in fp32, then rounded */
                lwi_cpu_widen_bf16(ob, j->out16 + at, m);
                lwi_cpu_widen_bf16(ob + BLOCK, j->out16 + at + h, m);
                backward_block(ob, ob + BLOCK, dy, lo, vc, e, b, m);
                lwi_cpu_round_bf16(j->out16 + at, ob, m);
                lwi_cpu_round_bf16(j->out16 + at + h, ob + BLOCK, m);
            }
        }
}

/* rows per part at least: GRAIN elements of y */
static int64_t grain_rows(int64_t h) { return h >= GRAIN ? 1 : GRAIN / h; }

lw_status lwi_cpu_swiglu_forward(lw_stream *stream, void *y, lw_dtype y_dtype, const void *x,
                                 lw_dtype x_dtype, int64_t n, int64_t c) {
    (void)stream;
    if (n <= 0 || c <= 0) return LW_OK;
    const bool y16 = y_dtype == LW_DTYPE_BF16, x16 = x_dtype == LW_DTYPE_BF16;
    swiglu_job j = {y16 ? NULL : y, y16 ? y : NULL, x16 ? NULL : x, NULL, x16 ? x : NULL, c / 2};
    lwi_cpu_parallel(n, grain_rows(c / 2), swiglu_rows, &j);
    return LW_OK;
}

lw_status lwi_cpu_swiglu_backward(lw_stream *stream, void *dx, lw_dtype dx_dtype, const float *dy,
                                  const void *x, lw_dtype x_dtype, int64_t n, int64_t c) {
    (void)stream;
    if (n <= 0 || c <= 0) return LW_OK;
    const bool dx16 = dx_dtype == LW_DTYPE_BF16, x16 = x_dtype == LW_DTYPE_BF16;
    swiglu_job j = {dx16 ? NULL : dx, dx16 ? dx : NULL, x16 ? NULL : x, dy, x16 ? x : NULL, c / 2};
    lwi_cpu_parallel(n, grain_rows(c / 2), swiglu_rows, &j);
    return LW_OK;
}
