/* fake_device.c: a device library for testing the loader (test_device_plugin) and, on machines
 * without a GPU, the staged communicator (test_device_comm under mpirun): host memory behind
 * the device table, with only the memory, stream and event entries, what the device is (its id:
 * "fake-0", or "fake-rank-<r>" per MPI rank when LWOPT_FAKE_ID_PER_RANK is set, as ranks with
 * GPUs of their own would say), whether memory is its own (it remembers its allocations), no
 * communicator of its own, and one kernel (vec_scale), so that the tests see the core call into
 * a library it loaded, and a missing kernel fail by name. Built as a module, never installed. */
#include "device/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const lwi_device_host *host;

/* The live allocations, so that memory_here tells the device's memory from the host's. */
typedef struct allocation {
    char *p;
    int64_t bytes;
    struct allocation *next;
} allocation;
static allocation *allocations;

static lw_status fake_alloc(lw_device *d, int64_t bytes, void **out) {
    (void)d;
    allocation *a = malloc(sizeof *a);
    *out = calloc(1, (size_t)(bytes ? bytes : 1));
    if (a == NULL || *out == NULL) {
        free(a), free(*out);
        return host->fail(LW_ERR_NOMEM, "fake: out of memory");
    }
    a->p = *out;
    a->bytes = bytes ? bytes : 1;
    a->next = allocations;
    allocations = a;
    return LW_OK;
}
static void fake_free(lw_device *d, void *p) {
    (void)d;
    for (allocation **a = &allocations; *a != NULL; a = &(*a)->next)
        if ((*a)->p == p) {
            allocation *gone = *a;
            *a = gone->next;
            free(gone);
            break;
        }
    free(p);
}
static lw_status fake_memory_here(lw_device *d, const void *p, bool *here) {
    (void)d;
    *here = false;
    for (const allocation *a = allocations; a != NULL && !*here; a = a->next)
        *here = (const char *)p >= a->p && (const char *)p < a->p + a->bytes;
    return LW_OK;
}
static lw_status fake_info(lw_device *d, lw_device_info *out) {
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    snprintf(out->name, sizeof out->name, "fake device");
    if (getenv("LWOPT_FAKE_ID_PER_RANK") != NULL)
        snprintf(out->id, sizeof out->id, "fake-rank-%s", rank ? rank : "0");
    else
        snprintf(out->id, sizeof out->id, "fake-%d", (int)d->index);
    return LW_OK;
}
static lw_status fake_set(lw_stream *s, void *dst, int32_t v, int64_t n) {
    (void)s, memset(dst, v, (size_t)n);
    return LW_OK;
}
static lw_status fake_copy(lw_stream *s, void *dst, const void *src, int64_t n, lw_copy_kind k) {
    (void)s, (void)k, memcpy(dst, src, (size_t)n);
    return LW_OK;
}
static lw_status fake_handle_new(lw_device *d, void **impl) {
    (void)d, *impl = NULL;
    return LW_OK;
}
static void fake_handle_free(lw_device *d, void *impl) { (void)d, (void)impl; }
static lw_status fake_stream(lw_stream *s) { return (void)s, LW_OK; }
static lw_status fake_wait(lw_stream *s, lw_event *e) { return (void)s, (void)e, LW_OK; }
static lw_status fake_record(lw_event *e, lw_stream *s) { return (void)e, (void)s, LW_OK; }
static lw_status fake_event(lw_event *e) { return (void)e, LW_OK; }
static lw_status fake_query(lw_event *e, bool *done) { return (void)e, *done = true, LW_OK; }
static lw_status fake_scale(lw_stream *s, float *x, int64_t n, float alpha) {
    (void)s;
    for (int64_t i = 0; i < n; i++)
        x[i] *= alpha;
    return LW_OK;
}

static const lwi_device_ops fake_ops = {
    .kind = "cuda",
    .host_memory = false,
    .alloc = fake_alloc,
    .free = fake_free,
    .set = fake_set,
    .copy = fake_copy,
    .stream_new = fake_handle_new,
    .stream_free = fake_handle_free,
    .stream_synchronize = fake_stream,
    .stream_wait = fake_wait,
    .event_new = fake_handle_new,
    .event_free = fake_handle_free,
    .event_record = fake_record,
    .event_synchronize = fake_event,
    .event_query = fake_query,
    .vec_scale = fake_scale,
    .info = fake_info,
    .memory_here = fake_memory_here,
};

lw_status lwopt_device_open(const lwi_device_host *h, int32_t index, const lwi_device_ops **ops,
                            void **impl);
lw_status lwopt_device_open(const lwi_device_host *h, int32_t index, const lwi_device_ops **ops,
                            void **impl) {
    host = h;
    if (h->abi != LWI_DEVICE_ABI || h->ops_bytes != (int32_t)sizeof(lwi_device_ops))
        return h->fail(LW_ERR_UNSUPPORTED, "fake: ABI %d, a table of %d bytes", h->abi,
                       (int)h->ops_bytes);
    if (index > 0) return h->fail(LW_ERR_UNSUPPORTED, "fake: there is no GPU %d", index);
    *ops = &fake_ops;
    *impl = NULL;
    return LW_OK;
}
