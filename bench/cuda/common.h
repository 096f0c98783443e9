/* common.h: what the GPU benchmarks share: the GPU (exit 77 with the reason when CUDA is not
 * available), seeded device arrays, timing by stream synchronisation around lw_now (best of the
 * repeats after a warm-up), and an optimizer over GPU buffers. Everything through lw.h; cuBLAS
 * only where a bench measures it. */
#ifndef LW_BENCH_CUDA_COMMON_H
#define LW_BENCH_CUDA_COMMON_H

#include "lw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Until the NCCL communicator is in liblwopt.so the reference stays NULL (see bench_gpu_comm). */
#pragma weak lw_comm_device_new

static lw_device *bench_gpu;
static lw_stream *bench_stream;

/* Opens "cuda" or exits: 77 when CUDA is not available (a CPU machine), 1 on any other error. */
static inline void bench_open(const char *name) {
    if (lw_device_get("cuda", &bench_gpu) != LW_OK) {
        const bool absent = strstr(lw_last_error(), "CUDA is not available") != NULL;
        fprintf(absent ? stdout : stderr, "%s: %s: %s\n", name, absent ? "skipped" : "failed",
                lw_last_error());
        exit(absent ? 77 : 1);
    }
    bench_stream = lw_device_stream(bench_gpu);
    lw_device_info info;
    if (lw_device_get_info(bench_gpu, &info) == LW_OK)
        printf("%s on %s: %s, sm_%d, %d SMs, %.1f GiB; %s\n\n", name, lw_device_name(bench_gpu),
               info.name, info.capability, info.processors, (double)info.total_bytes / (1 << 30),
               info.software);
}

/* Ends the bench with the call's error. */
static inline void bench_check(lw_status st, const char *what) {
    if (st == LW_OK) return;
    fprintf(stderr, "%s failed: %s\n", what, lw_last_error());
    exit(1);
}

/* n floats of device memory, uniform in [-scale, scale), from a fixed seed. [out] owned. */
static inline float *bench_random(int64_t n, float scale, uint64_t seed) {
    float *d = NULL;
    bench_check(lw_device_alloc(bench_gpu, 4 * (n > 0 ? n : 1), (void **)&d), "lw_device_alloc");
    const int64_t chunk = (int64_t)1 << 22;
    float *h = malloc(4 * (size_t)chunk);
    for (int64_t at = 0; at < n; at += chunk) {
        const int64_t k = n - at < chunk ? n - at : chunk;
        for (int64_t i = 0; i < k; i++) {
            seed = seed * 6364136223846793005u + 1442695040888963407u;
            h[i] = scale * (float)((double)(seed >> 11) / 9007199254740992.0 * 2.0 - 1.0);
        }
        bench_check(lw_device_copy(bench_stream, d + at, h, 4 * k, LW_COPY_HOST_TO_DEVICE),
                    "lw_device_copy");
    }
    free(h);
    return d;
}

/* Seconds since t0 once the stream's work has run. */
static inline double bench_since(lw_stream *s, double t0) {
    bench_check(lw_stream_synchronize(s), "lw_stream_synchronize");
    return lw_now() - t0;
}

/* An optimizer with its layout and buffers: specs' parameters as fp32 buffers on the GPU over
 * dc, options oo. Freed together by bench_optimizer_free. */
typedef struct {
    lw_layout *layout;
    lw_buffers *buffers;
    lw_optimizer *opt;
} bench_optimizer;

static inline bench_optimizer bench_optimizer_new(lw_comm *dc, const lw_param_spec *specs, int n,
                                                  const lw_optimizer_options *oo) {
    bench_optimizer o = {NULL, NULL, NULL};
    bench_check(lw_layout_new(specs, n, NULL, &o.layout), "lw_layout_new");
    lw_buffers_options bo = lw_buffers_defaults();
    bo.device = bench_gpu;
    bench_check(lw_buffers_new(o.layout, dc, NULL, &bo, &o.buffers), "lw_buffers_new");
    bench_check(lw_optimizer_new(o.buffers, oo, &o.opt), "lw_optimizer_new");
    return o;
}

static inline void bench_optimizer_free(bench_optimizer *o) {
    lw_optimizer_free(o->opt);
    lw_buffers_free(o->buffers);
    lw_layout_free(o->layout);
}

/* The device communicator of a one-rank job (NCCL), for buffers on the GPU. */
static inline lw_comm *bench_gpu_comm(lw_comm **self) {
    lw_comm *dc = NULL;
    bench_check(lw_comm_self(self), "lw_comm_self");
    if (lw_comm_device_new == NULL) {
        fprintf(stderr, "liblwopt.so has no lw_comm_device_new yet (the NCCL communicator)\n");
        exit(1);
    }
    bench_check(lw_comm_device_new(*self, bench_gpu, &dc), "lw_comm_device_new");
    return dc;
}

#endif
