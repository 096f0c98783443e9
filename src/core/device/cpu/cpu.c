/* cpu.c: the CPU device: host memory (64-byte aligned, zeroed), copies as memcpy (2-D: a row at
 * a time), streams that run work when it is issued (so events are complete once recorded), and
 * the table of the reference kernels in the other files of device/cpu/. */
#include "device/cpu/cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static lw_status cpu_alloc(lw_device *device, int64_t bytes, void **out) {
    (void)device;
    const size_t size = ((size_t)bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, size ? size : 64);
    if (p == NULL)
        return lwi_fail(LW_ERR_NOMEM, "memory: cannot allocate %.2f GiB (%lld bytes)",
                        (double)bytes / (1 << 30), (long long)bytes);
    memset(p, 0, size ? size : 64);
    *out = p;
    return LW_OK;
}

static void cpu_free(lw_device *device, void *p) {
    (void)device;
    free(p);
}

static lw_status cpu_set(lw_stream *stream, void *dst, int32_t value, int64_t bytes) {
    (void)stream;
    memset(dst, value, (size_t)bytes);
    return LW_OK;
}

static lw_status cpu_copy(lw_stream *stream, void *dst, const void *src, int64_t bytes,
                          lw_copy_kind kind) {
    (void)stream, (void)kind;
    memcpy(dst, src, (size_t)bytes);
    return LW_OK;
}

lw_status lwi_cpu_copy_2d(lw_stream *stream, float *dst, int64_t dst_ld, const float *src,
                          int64_t src_ld, int64_t rows, int64_t cols) {
    (void)stream;
    for (int64_t i = 0; i < rows; i++)
        memcpy(dst + i * dst_ld, src + i * src_ld, sizeof(float) * (size_t)cols);
    return LW_OK;
}

static lw_status cpu_handle_new(lw_device *device, void **impl) {
    (void)device;
    *impl = NULL;
    return LW_OK;
}

static void cpu_handle_free(lw_device *device, void *impl) { (void)device, (void)impl; }

static lw_status cpu_stream_synchronize(lw_stream *stream) {
    (void)stream;
    return LW_OK;
}

static lw_status cpu_stream_wait(lw_stream *stream, lw_event *event) {
    (void)stream, (void)event;
    return LW_OK;
}

static lw_status cpu_event_record(lw_event *event, lw_stream *stream) {
    (void)event, (void)stream;
    return LW_OK;
}

static lw_status cpu_event_synchronize(lw_event *event) {
    (void)event;
    return LW_OK;
}

static lw_status cpu_event_query(lw_event *event, bool *done) {
    (void)event;
    *done = true;
    return LW_OK;
}

/* The machine's memory and cores, as sysconf sees them. */
static lw_status cpu_info(lw_device *device, lw_device_info *out) {
    (void)device;
    snprintf(out->name, sizeof out->name, "cpu");
    const long page = sysconf(_SC_PAGESIZE);
    out->total_bytes = (int64_t)sysconf(_SC_PHYS_PAGES) * page;
    out->free_bytes = (int64_t)sysconf(_SC_AVPHYS_PAGES) * page;
    out->processors = (int32_t)sysconf(_SC_NPROCESSORS_ONLN);
    return LW_OK;
}

const lwi_device_ops lwi_cpu_ops = {
    .kind = "cpu",
    .host_memory = true,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .set = cpu_set,
    .copy = cpu_copy,
    .stream_new = cpu_handle_new,
    .stream_free = cpu_handle_free,
    .stream_synchronize = cpu_stream_synchronize,
    .stream_wait = cpu_stream_wait,
    .event_new = cpu_handle_new,
    .event_free = cpu_handle_free,
    .event_record = cpu_event_record,
    .event_synchronize = cpu_event_synchronize,
    .event_query = cpu_event_query,
    .info = cpu_info,
#define LWI_CPU_SIZE(name, params, args) .name = lwi_cpu_##name,
    LWI_SCRATCH_SIZES(LWI_CPU_SIZE)
#define LWI_CPU_KERNEL(name, params, args, check) .name = lwi_cpu_##name,
    LWI_KERNELS(LWI_CPU_KERNEL)
};
