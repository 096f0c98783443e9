/* internal.h: helpers shared between the C files of the core (lwi_ prefix); not public API. */
#ifndef LW_INTERNAL_H
#define LW_INTERNAL_H

#include "../lw.h"

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
int64_t lwi_lcm(int64_t a, int64_t b);

#endif
