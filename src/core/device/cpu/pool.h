/* pool.h: the CPU kernels' worker threads (pool.c). Not public API. */
#ifndef LW_DEVICE_CPU_POOL_H
#define LW_DEVICE_CPU_POOL_H

#include "device/device.h"

/* The most parts a job is split into; kernels size per-part scratch by it. */
#define LWI_POOL_MAX 8

/* Runs body(ctx, begin, end, part) over [0, n) split into contiguous ranges, one per part, in
 * parallel; returns when all are done. Parts: the pool's threads (lwi_cpu_threads), fewer when
 * n / grain is smaller (at least grain items per part); part 0 runs on the caller. */
typedef void lwi_parallel_body(void *ctx, int64_t begin, int64_t end, int32_t part);
void lwi_cpu_parallel(int64_t n, int64_t grain, lwi_parallel_body *body, void *ctx);
/* lwi_cpu_threads (device.h): threads a job may use, OpenBLAS's count, at most LWI_POOL_MAX. */

#endif
