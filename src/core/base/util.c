/* util.c: small helpers every subsystem uses: the clock, dtype sizes, gcd and lcm, terminals. */
#include "base/base.h"

#include <time.h>
#include <unistd.h>

double lwi_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

double lw_now(void) { return lwi_now(); }

double lw_wall_clock(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

size_t lwi_dtype_size(lw_dtype dtype) {
    switch (dtype) {
    case LW_DTYPE_F32: return 4;
    case LW_DTYPE_BF16:
    case LW_DTYPE_F16: return 2;
    case LW_DTYPE_F64:
    case LW_DTYPE_I64: return 8;
    }
    return 0;
}

bool lw_is_terminal(int32_t fd) { return isatty(fd) == 1; }

int64_t lwi_gcd(int64_t a, int64_t b) {
    while (b != 0) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int64_t lwi_lcm(int64_t a, int64_t b) { return a / lwi_gcd(a, b) * b; }
