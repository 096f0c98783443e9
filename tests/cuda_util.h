/* cuda_util.h: what the GPU tests share: the GPU and its default stream, seeded random inputs,
 * copies to and from device memory, error measures between a GPU result and the CPU's, and the
 * start that skips (exit 77) when CUDA is not available (tests/kernels/harness.c, which runs every
 * device the build has, opens it without skipping). */
#ifndef LW_TEST_CUDA_UTIL_H
#define LW_TEST_CUDA_UTIL_H

#include "compare.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static lw_device *gpu;
static lw_stream *gs; /* the GPU's default stream */

static uint64_t seed = 20240601;
static inline float frand(void) { /* uniform in [-1, 1) */
    seed = seed * 6364136223846793005u + 1442695040888963407u;
    return (float)((double)(seed >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* uniform in [0, bound) */
static inline int32_t rand_below(int64_t bound) {
    seed = seed * 6364136223846793005u + 1442695040888963407u;
    return (int32_t)((seed >> 33) % (uint64_t)bound);
}

static inline float *host_random(int64_t n) {
    float *x = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++)
        x[i] = frand();
    return x;
}

/* Device memory holding a copy of host[0..n). */
static inline void *upload(const void *host, int64_t bytes) {
    void *d = NULL;
    CHECK_OK(lw_device_alloc(gpu, bytes, &d));
    if (d != NULL) CHECK_OK(lw_device_copy(gs, d, host, bytes, LW_COPY_HOST_TO_DEVICE));
    return d;
}

static inline void download(void *host, const void *dev, int64_t bytes) {
    CHECK_OK(lw_stream_synchronize(gs));
    CHECK_OK(lw_device_copy(gs, host, dev, bytes, LW_COPY_DEVICE_TO_HOST));
}

/* Distance in units in the last place between two finite floats of the same sign. */
static inline int64_t ulps(float a, float b) {
    if (a == b) return 0;
    if ((a < 0) != (b < 0)) return INT64_MAX;
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    return llabs((long long)ia - (long long)ib);
}

static inline int64_t max_ulps(const float *a, const float *b, int64_t n) {
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t u = ulps(a[i], b[i]);
        if (u > m) m = u;
    }
    return m;
}

/* ||a - b||_F / ||b||_F */
static inline double rel_frobenius(const float *a, const float *b, int64_t n) {
    double d = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)b[i] * b[i];
    }
    return sqrt(d) / fmax(sqrt(s), 1e-30);
}

/* Opens "cuda" into gpu and gs, saying nothing: 0; 77 when CUDA is not available (lw_last_error
 * says why); 1 when a GPU is there but fails to open (a broken CUDA library is a failure, not a
 * skip). */
static inline int cuda_try_open(void) {
    if (lw_device_get("cuda", &gpu) != LW_OK)
        return strstr(lw_last_error(), "CUDA is not available") != NULL ? 77 : 1;
    gs = lw_device_stream(gpu);
    return 0;
}

/* cuda_try_open for a test that needs the GPU: 0, or the exit status, said on stdout (skipped)
 * or stderr (failed). */
static inline int cuda_open(const char *test) {
    const int st = cuda_try_open();
    if (st == 77) printf("%s: skipped: %s\n", test, lw_last_error());
    if (st == 1) fprintf(stderr, "%s: lw_device_get(\"cuda\") failed: %s\n", test, lw_last_error());
    return st;
}

#endif
