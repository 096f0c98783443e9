/* objects.c: the device objects and their memory, stream and event calls, each a checked call
 * into the device's table. Devices are made once per name and kept for the process (a buffer
 * or a kernel may still use one while Lua's garbage collector frees another object). The
 * kernels' entry points are in kernels.c; what the CUDA library is and how it loads, in
 * loader.c. */
#include "device/device.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GPUS 64

static lw_stream cpu_stream;
static lw_device cpu_device = {&lwi_cpu_ops, "cpu", 0, NULL, &cpu_stream, LW_MATMUL_FP32};
static lw_stream cpu_stream = {&cpu_device, NULL};

static lw_device *gpus[MAX_GPUS];
static pthread_mutex_t gpus_lock = PTHREAD_MUTEX_INITIALIZER;

lw_device *lw_device_cpu(void) { return &cpu_device; }

bool lw_has_cuda(void) {
    lw_device *d = NULL;
    return lw_device_get("cuda", &d) == LW_OK;
}

lw_stream *lwi_stream_or_cpu(lw_stream *stream) { return stream ? stream : &cpu_stream; }

lw_status lwi_device_missing(const lw_stream *stream, const char *entry) {
    return lwi_fail(LW_ERR_UNSUPPORTED, "device: %s has no %s kernel", stream->device->name, entry);
}

/* "cuda" or "cuda:N" -> N; -1 for anything else. */
static int32_t cuda_index(const char *name) {
    if (strcmp(name, "cuda") == 0) return 0;
    if (strncmp(name, "cuda:", 5) != 0 || name[5] < '0' || name[5] > '9') return -1;
    char *end = NULL;
    long v = strtol(name + 5, &end, 10);
    return *end == '\0' && v < MAX_GPUS ? (int32_t)v : -1;
}

static lw_status open_gpu(int32_t index, lw_device **out) {
    const lwi_device_ops *ops = NULL;
    void *impl = NULL;
    lw_status st = lwi_cuda_open(index, &ops, &impl);
    if (st != LW_OK) return st;
    lw_device *d = calloc(1, sizeof *d);
    lw_stream *s = calloc(1, sizeof *s);
    if (d == NULL || s == NULL) {
        free(d);
        free(s);
        return lwi_fail(LW_ERR_NOMEM, "device: out of memory");
    }
    d->ops = ops;
    d->index = index;
    d->impl = impl;
    snprintf(d->name, sizeof d->name, "cuda:%d", index);
    s->device = d;
    if ((st = ops->stream_new(d, &s->impl)) != LW_OK) {
        free(d);
        free(s);
        return st;
    }
    d->stream = s;
    *out = d;
    return LW_OK;
}

lw_status lw_device_get(const char *name, lw_device **out) {
    if (name == NULL || out == NULL)
        return lwi_fail(LW_ERR_INVALID, "device: name and out must not be NULL");
    *out = NULL;
    if (strcmp(name, "cpu") == 0) {
        *out = &cpu_device;
        return LW_OK;
    }
    const int32_t index = cuda_index(name);
    if (index < 0)
        return lwi_fail(LW_ERR_INVALID, "device: unknown device '%s' (cpu, cuda or cuda:N)", name);
    pthread_mutex_lock(&gpus_lock);
    lw_status st = gpus[index] ? LW_OK : open_gpu(index, &gpus[index]);
    *out = gpus[index];
    pthread_mutex_unlock(&gpus_lock);
    return st;
}

const char *lw_device_name(const lw_device *d) { return d ? d->name : "none"; }
bool lw_device_is_host(const lw_device *d) { return d != NULL && d->ops->host_memory; }
lw_stream *lw_device_stream(lw_device *d) { return d ? d->stream : NULL; }

lw_status lw_device_set_matmul(lw_device *d, lw_matmul matmul) {
    if (d == NULL) return lwi_fail(LW_ERR_INVALID, "device: the device must not be NULL");
    if (lw_matmul_name(matmul) == NULL)
        return lwi_fail(LW_ERR_INVALID, "device: %s: matmul precision %d is not fp32 (0), "
                        "tf32 (1) or bf16 (2)", d->name, (int)matmul);
    d->matmul = matmul;
    return LW_OK;
}

lw_matmul lw_device_matmul(const lw_device *d) { return d ? d->matmul : LW_MATMUL_FP32; }

lw_status lw_device_alloc(lw_device *d, int64_t bytes, void **out) {
    if (d == NULL || out == NULL)
        return lwi_fail(LW_ERR_INVALID, "device: device and out must not be NULL");
    *out = NULL;
    if (bytes < 0)
        return lwi_fail(LW_ERR_INVALID, "device: %s: %lld bytes asked for", d->name,
                        (long long)bytes);
    return d->ops->alloc(d, bytes, out);
}

void lw_device_free(lw_device *d, void *p) {
    if (d != NULL && p != NULL) d->ops->free(d, p);
}

lw_status lw_device_set(lw_stream *s, void *dst, int32_t value, int64_t bytes) {
    s = lwi_stream_or_cpu(s);
    if (bytes < 0 || (bytes > 0 && dst == NULL) || value < 0 || value > 255)
        return lwi_fail(LW_ERR_INVALID, "device: set of %lld bytes to %d at %p", (long long)bytes,
                        value, dst);
    return bytes ? s->device->ops->set(s, dst, value, bytes) : LW_OK;
}

lw_status lw_device_copy(lw_stream *s, void *dst, const void *src, int64_t bytes,
                         lw_copy_kind kind) {
    s = lwi_stream_or_cpu(s);
    if (bytes < 0 || (bytes > 0 && (dst == NULL || src == NULL)))
        return lwi_fail(LW_ERR_INVALID, "device: copy of %lld bytes from %p to %p",
                        (long long)bytes, src, dst);
    if (kind != LW_COPY_HOST_TO_DEVICE && kind != LW_COPY_DEVICE_TO_HOST &&
        kind != LW_COPY_DEVICE_TO_DEVICE)
        return lwi_fail(LW_ERR_INVALID, "device: unknown copy kind %d", (int)kind);
    return bytes ? s->device->ops->copy(s, dst, src, bytes, kind) : LW_OK;
}

lw_status lw_stream_new(lw_device *d, lw_stream **out) {
    if (d == NULL || out == NULL)
        return lwi_fail(LW_ERR_INVALID, "device: device and out must not be NULL");
    *out = NULL;
    lw_stream *s = calloc(1, sizeof *s);
    if (s == NULL) return lwi_fail(LW_ERR_NOMEM, "device: out of memory");
    s->device = d;
    lw_status st = d->ops->stream_new(d, &s->impl);
    if (st != LW_OK) {
        free(s);
        return st;
    }
    *out = s;
    return LW_OK;
}

void lw_stream_free(lw_stream *s) {
    if (s == NULL || s == s->device->stream) return;
    s->device->ops->stream_synchronize(s);
    s->device->ops->stream_free(s->device, s->impl);
    free(s);
}

lw_device *lw_stream_device(const lw_stream *s) { return s ? s->device : &cpu_device; }

lw_status lw_stream_synchronize(lw_stream *s) {
    s = lwi_stream_or_cpu(s);
    return s->device->ops->stream_synchronize(s);
}

static lw_status check_event(const lw_event *e) {
    return e ? LW_OK : lwi_fail(LW_ERR_INVALID, "device: event is NULL");
}

lw_status lw_stream_wait(lw_stream *s, lw_event *e) {
    s = lwi_stream_or_cpu(s);
    lw_status st = check_event(e);
    if (st == LW_OK && e->device != s->device)
        st = lwi_fail(LW_ERR_INVALID, "device: a stream of %s cannot wait for an event of %s",
                      s->device->name, e->device->name);
    return st == LW_OK ? s->device->ops->stream_wait(s, e) : st;
}

lw_status lw_event_new(lw_device *d, lw_event **out) {
    if (d == NULL || out == NULL)
        return lwi_fail(LW_ERR_INVALID, "device: device and out must not be NULL");
    *out = NULL;
    lw_event *e = calloc(1, sizeof *e);
    if (e == NULL) return lwi_fail(LW_ERR_NOMEM, "device: out of memory");
    e->device = d;
    lw_status st = d->ops->event_new(d, &e->impl);
    if (st != LW_OK) {
        free(e);
        return st;
    }
    *out = e;
    return LW_OK;
}

void lw_event_free(lw_event *e) {
    if (e == NULL) return;
    e->device->ops->event_free(e->device, e->impl);
    free(e);
}

lw_status lw_event_record(lw_event *e, lw_stream *s) {
    s = lwi_stream_or_cpu(s);
    lw_status st = check_event(e);
    if (st == LW_OK && e->device != s->device)
        st = lwi_fail(LW_ERR_INVALID, "device: an event of %s cannot be recorded on %s",
                      e->device->name, s->device->name);
    return st == LW_OK ? s->device->ops->event_record(e, s) : st;
}

lw_status lw_event_synchronize(lw_event *e) {
    lw_status st = check_event(e);
    return st == LW_OK ? e->device->ops->event_synchronize(e) : st;
}

lw_status lw_event_query(lw_event *e, bool *done) {
    lw_status st = check_event(e);
    if (st == LW_OK && done == NULL) st = lwi_fail(LW_ERR_INVALID, "device: done is NULL");
    return st == LW_OK ? e->device->ops->event_query(e, done) : st;
}

lw_status lw_device_get_info(lw_device *d, lw_device_info *out) {
    if (d == NULL || out == NULL)
        return lwi_fail(LW_ERR_INVALID, "device: device and out must not be NULL");
    memset(out, 0, sizeof *out);
    if (d->ops->info == NULL) return lwi_fail(LW_ERR_UNSUPPORTED, "device: %s has no info entry",
                                              d->name);
    return d->ops->info(d, out);
}

/* Lua's activations: the CPU device's memory, named for what LuaJIT's ffi.new cannot give (it
 * caps at 2 GiB and says only "not enough memory"). */
lw_status lw_host_alloc(int64_t bytes, void **out) {
    if (out == NULL) return lwi_fail(LW_ERR_INVALID, "memory: out pointer is NULL");
    *out = NULL;
    if (bytes < 0)
        return lwi_fail(LW_ERR_INVALID, "memory: %lld bytes asked for", (long long)bytes);
    return lw_device_alloc(&cpu_device, bytes, out);
}

void lw_host_free(void *p) { lw_device_free(&cpu_device, p); }
