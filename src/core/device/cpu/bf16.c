/* bf16.c: the conversions between fp32 and bf16 on the CPU (lw_vec_to_bf16, lw_vec_from_bf16):
 * bf16 parameters with fp32 master weights, and the model kernels' bf16 weights widened for
 * OpenBLAS (which has no bf16 operands with fp32 products). Integer arithmetic on the values'
 * bits, branch-free so that the loops vectorise; memory-bound, so a long vector is split over the
 * pool's threads as AdamW's update is. */
#include "device/cpu/cpu.h"
#include "device/cpu/fast_math.h"
#include "device/cpu/pool.h"

#include <stdlib.h>
#include <string.h>

/* elements per part of the pool at least (memory-bound: smaller parts gain nothing) */
#define GRAIN 65536

/* The bf16 nearest to the fp32 with bits u, ties to even, as IEEE rounds: bf16 is fp32's top
 * half, so adding 0x7FFF plus the lowest kept bit (1 for an odd result) to the bits carries into
 * the kept half exactly when the dropped half is above one half of the kept half's last bit, or
 * equal to it with that bit odd. The carry runs on through the exponent where the value needs it:
 * the largest subnormal rounds up to the smallest normal, a value at or past the midpoint above
 * the largest finite bf16 to infinity; infinities gain nothing (their dropped half is 0). A NaN
 * would carry into an infinity (or wrap into the sign), so it takes its own top half instead,
 * sign and top payload bits kept, with the quiet bit set, which keeps it a NaN even when its
 * payload lay in the dropped half alone. */
LWI_ROW_HELPER uint16_t to_bf16(uint32_t u) {
    const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quieted = (u >> 16) | 0x0040u;
    return (uint16_t)((u & 0x7FFFFFFFu) > 0x7F800000u ? quieted : rounded);
}

typedef struct {
    void *y;
    const void *x;
} bf16_job;

LWI_SIMD_CLONES
static void to_bf16_range(void *ctx, int64_t begin, int64_t end, int32_t part) {
    (void)part;
    const bf16_job *j = ctx;
    const float *restrict x = (const float *)j->x + begin; /* y and x never overlap */
    uint16_t *restrict y = (uint16_t *)j->y + begin;
    const int64_t n = end - begin;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        y[i] = to_bf16(u);
    }
}

LWI_SIMD_CLONES
static void from_bf16_range(void *ctx, int64_t begin, int64_t end, int32_t part) {
    (void)part;
    const bf16_job *j = ctx;
    const uint16_t *restrict x = (const uint16_t *)j->x + begin;
    float *restrict y = (float *)j->y + begin;
    const int64_t n = end - begin;
    for (int64_t i = 0; i < n; i++) {
        const uint32_t u = (uint32_t)x[i] << 16;
        memcpy(&y[i], &u, sizeof u);
    }
}

lw_status lwi_cpu_vec_to_bf16(lw_stream *stream, uint16_t *y, const float *x, int64_t n) {
    (void)stream;
    bf16_job j = {y, x};
    lwi_cpu_parallel(n, GRAIN, to_bf16_range, &j);
    return LW_OK;
}

lw_status lwi_cpu_vec_from_bf16(lw_stream *stream, float *y, const uint16_t *x, int64_t n) {
    (void)stream;
    bf16_job j = {y, x};
    lwi_cpu_parallel(n, GRAIN, from_bf16_range, &j);
    return LW_OK;
}

lw_status lwi_cpu_as_f32(const void *x, lw_dtype dtype, int64_t n, const float **out,
                         float **owned) {
    *owned = NULL;
    *out = x;
    if (dtype == LW_DTYPE_F32 || x == NULL || n <= 0) return LW_OK;
    *owned = malloc(sizeof(float) * (size_t)n);
    if (*owned == NULL)
        return lwi_fail(LW_ERR_NOMEM, "cpu: out of memory widening %lld bf16 values",
                        (long long)n);
    lwi_cpu_vec_from_bf16(NULL, *owned, x, n);
    *out = *owned;
    return LW_OK;
}

void lwi_cpu_round_bf16(uint16_t *y, const float *x, int64_t n) {
    bf16_job j = {y, x};
    to_bf16_range(&j, 0, n, 0);
}

void lwi_cpu_widen_bf16(float *y, const uint16_t *x, int64_t n) {
    bf16_job j = {y, x};
    from_bf16_range(&j, 0, n, 0);
}
