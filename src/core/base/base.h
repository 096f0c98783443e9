/* base.h: helpers every subsystem of the core shares (lwi_ prefix); not public API. Each
 * subsystem folder has one internal header that includes this one. */
#ifndef LW_BASE_H
#define LW_BASE_H

#include "lw.h"

#if defined(__GNUC__)
#define LWI_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define LWI_PRINTF(fmt, args)
#endif

/* Records "message" as the thread's last error and returns status, so that error paths read
 * `return lwi_fail(LW_ERR_INVALID, "layout: dp must be >= 1, got %d", dp);`. */
lw_status lwi_fail(lw_status status, const char *fmt, ...) LWI_PRINTF(2, 3);

/* pad(v, d) = ceil(v / d) * d for v >= 0, d > 0. */
static inline int64_t lwi_pad(int64_t v, int64_t d) { return (v + d - 1) / d * d; }

int64_t lwi_gcd(int64_t a, int64_t b);
/* Seconds on a monotonic clock. */
double lwi_now(void);
/* Bytes per element of a dtype (0 for an unknown one). */
size_t lwi_dtype_size(lw_dtype dtype);
int64_t lwi_lcm(int64_t a, int64_t b);

#endif
