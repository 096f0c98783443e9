/* loader.c: finds and loads the CUDA library the first time a CUDA device is asked for, so that
 * CPU runs never load cuBLAS or NCCL and a machine without CUDA runs everything else. Looks for
 * $LWOPT_CUDA_LIB, then liblwopt_cuda.so beside liblwopt.so, then the loader's search path; the
 * error of a failed load names each place tried and what was wrong. */
#define _GNU_SOURCE /* dladdr */
#include "device/device.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIBRARY "liblwopt_cuda.so"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static lwi_device_entry entry;
static char why[1024]; /* what the failed load found, for every later call's message */

static void add_reason(const char *fmt, ...) {
    size_t used = strlen(why);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why + used, sizeof why - used, fmt, ap);
    va_end(ap);
}

/* dlopen of one candidate; on success the entry is looked up in it. */
static bool try_open(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *e = dlerror();
        add_reason("%s%s", why[0] ? "; " : "", e ? e : path);
        return false;
    }
    entry = (lwi_device_entry)(uintptr_t)dlsym(h, LWI_DEVICE_ENTRY);
    if (entry == NULL) {
        add_reason("%s%s has no %s (not an lwopt device library?)", why[0] ? "; " : "", path,
                   LWI_DEVICE_ENTRY);
        dlclose(h);
        return false;
    }
    return true;
}

static void load(void) {
    const char *env = getenv("LWOPT_CUDA_LIB");
    if (env != NULL && env[0] != '\0') {
        try_open(env); /* the user named it: nowhere else */
        return;
    }
    Dl_info info;
    if (dladdr((void *)(uintptr_t)&lwi_cuda_open, &info) && info.dli_fname != NULL) {
        char path[4096];
        const char *slash = strrchr(info.dli_fname, '/');
        int dir = slash ? (int)(slash - info.dli_fname) : 1;
        snprintf(path, sizeof path, "%.*s/%s", dir, slash ? info.dli_fname : ".", LIBRARY);
        if (try_open(path)) return;
    }
    try_open(LIBRARY);
}

lw_status lwi_cuda_open(int32_t index, const lwi_device_ops **ops, void **impl) {
    pthread_once(&once, load);
    if (entry == NULL)
        return lwi_fail(LW_ERR_UNSUPPORTED,
                        "device: CUDA is not available: %s could not be loaded (%s); it is "
                        "built from src/cuda/ on a machine with the CUDA toolkit, or set "
                        "LWOPT_CUDA_LIB to its path",
                        LIBRARY, why);
    static const lwi_device_host host = {
        .abi = LWI_DEVICE_ABI, .ops_bytes = (int32_t)sizeof(lwi_device_ops), .fail = lwi_fail};
    lw_status st = entry(&host, index, ops, impl);
    if (st == LW_OK && (*ops == NULL || (*ops)->alloc == NULL))
        return lwi_fail(LW_ERR_UNSUPPORTED, "device: %s gave no device table", LIBRARY);
    return st;
}
