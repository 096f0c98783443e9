/* device.c: lw_comm_device_new, a communicator that moves a device's memory, made over a parent
 * communicator: the device library's own (NCCL on a CUDA device, src/cuda/nccl.c) or the staged
 * one (staged.c: through host memory and the parent). This file checks the arguments, lets the
 * ranks agree on the kind (each says which GPU it holds and which kind it asks for), and says
 * why in lw_comm_about. */
#include "comm/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *lw_comm_about(const lw_comm *c) { return c ? c->about : ""; }

/* What one rank tells the others, three int64 each (gathered by a sum of slots). */
enum { SAYS_GPU, SAYS_ASKS, SAYS_NATIVE, SAYS };

/* A 64-bit FNV-1a hash of the physical device: its id (a GPU's UUID), else this machine's name
 * and the device's name (a library that gives no id: ordinals may then name different GPUs
 * under CUDA_VISIBLE_DEVICES, so equal names are only a guess). Never 0 (0: said nothing). */
static int64_t gpu_identity(lw_device *device, char *id, size_t cap) {
    lw_device_info info;
    memset(&info, 0, sizeof info);
    if (device->ops->info == NULL || device->ops->info(device, &info) != LW_OK || !info.id[0]) {
        char host[128] = "?";
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = '\0';
        snprintf(info.id, sizeof info.id, "%.31s:%.31s", host, device->name);
    }
    snprintf(id, cap, "%s", info.id);
    uint64_t h = 1469598103934665603u;
    for (const char *p = info.id; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211u;
    h &= INT64_MAX;
    return h ? (int64_t)h : 1;
}

/* The kind asked: `kind`, or for AUTO the environment's LWOPT_DEVICE_COMM when set. */
static lw_status asked_kind(lw_device_comm kind, lw_device_comm *out) {
    *out = kind;
    const char *env = getenv("LWOPT_DEVICE_COMM");
    if (kind != LW_DEVICE_COMM_AUTO || env == NULL || env[0] == '\0') return LW_OK;
    lw_status st = lw_device_comm_from_name(env, out);
    if (st != LW_OK)
        return lwi_fail(st, "comm: LWOPT_DEVICE_COMM: %s", lw_last_error());
    return LW_OK;
}

/* The ranks' choice, the same on every one: the kind to make, or an error naming why the kind
 * asked cannot be had; about: the line lw_comm_about gives. */
static lw_status choose(lw_comm *parent, lw_device *device, lw_device_comm asked,
                        lw_device_comm *kind, char *about, size_t cap) {
    const int32_t size = parent->size, rank = parent->rank;
    int64_t *says = calloc((size_t)size * SAYS, sizeof *says);
    if (says == NULL) return lwi_fail(LW_ERR_NOMEM, "comm: out of memory");
    char id[64];
    says[rank * SAYS + SAYS_GPU] = gpu_identity(device, id, sizeof id);
    says[rank * SAYS + SAYS_ASKS] = (int64_t)asked;
    says[rank * SAYS + SAYS_NATIVE] = device->ops->comm_new != NULL;
    lw_status st = lw_comm_allreduce(parent, says, (int64_t)size * SAYS, LW_DTYPE_I64,
                                     LW_REDUCE_SUM);
    int32_t a = -1, b = -1, other = -1, without = -1;
    for (int32_t i = 0; st == LW_OK && i < size; i++) {
        if (says[i * SAYS + SAYS_ASKS] != (int64_t)asked && other < 0) other = i;
        if (!says[i * SAYS + SAYS_NATIVE] && without < 0) without = i;
        for (int32_t j = i + 1; j < size && a < 0; j++)
            if (says[i * SAYS + SAYS_GPU] == says[j * SAYS + SAYS_GPU]) a = i, b = j;
    }
    const int64_t other_asks = other >= 0 ? says[other * SAYS + SAYS_ASKS] : 0;
    free(says);
    if (st != LW_OK) return st;
    if (other >= 0)
        return lwi_fail(LW_ERR_INVALID, "comm: rank %d asks for a '%s' device communicator but "
                        "rank %d for '%s': every rank must ask for the same (LWOPT_DEVICE_COMM "
                        "must be alike on all)", rank, lw_device_comm_name(asked), other,
                        lw_device_comm_name((lw_device_comm)other_asks));
    char shared[160] = "";
    if (a >= 0 && (rank == a || rank == b)) /* one of the two: it can name the GPU */
        snprintf(shared, sizeof shared, "ranks %d and %d share one GPU (%s, %s)", a, b,
                 device->name, id);
    else if (a >= 0)
        snprintf(shared, sizeof shared, "ranks %d and %d share one GPU", a, b);
    if (asked == LW_DEVICE_COMM_STAGED) {
        *kind = LW_DEVICE_COMM_STAGED;
        snprintf(about, cap, "staged: asked for; device buffers are copied through host memory "
                 "and moved by '%s'", parent->backend->name);
        return LW_OK;
    }
    if (without >= 0 && asked == LW_DEVICE_COMM_NCCL)
        return lwi_fail(LW_ERR_UNSUPPORTED, "comm: a 'nccl' device communicator was asked for, "
                        "but %s's library on rank %d has none (built without NCCL): use 'staged' "
                        "or 'auto'", device->name, without);
    if (a >= 0 && asked == LW_DEVICE_COMM_NCCL)
        return lwi_fail(LW_ERR_UNSUPPORTED, "comm: a 'nccl' device communicator was asked for, "
                        "but %s, and NCCL takes one rank per GPU: use 'staged' or 'auto', or a "
                        "GPU per rank", shared);
    if (a >= 0 || without >= 0) {
        *kind = LW_DEVICE_COMM_STAGED;
        snprintf(about, cap, "staged: %s%s; device buffers are copied through host memory and "
                 "moved by '%s' (slower than NCCL)",
                 a >= 0 ? shared : "the device library has no NCCL (built without it)",
                 a >= 0 ? ", and NCCL takes one rank per GPU" : "", parent->backend->name);
        return LW_OK;
    }
    *kind = LW_DEVICE_COMM_NCCL;
    snprintf(about, cap, "nccl: %s", size > 1 ? "every rank has a GPU of its own" : "one rank");
    return LW_OK;
}

lw_status lw_comm_device_new_kind(lw_comm *parent, lw_device *device, lw_device_comm kind,
                                  lw_comm **out) {
    if (out == NULL) return lwi_fail(LW_ERR_INVALID, "comm: out pointer is NULL");
    *out = NULL;
    if (parent == NULL)
        return lwi_fail(LW_ERR_INVALID, "comm: a device communicator needs a parent "
                                        "communicator to bootstrap over; parent is NULL");
    if (device == NULL)
        return lwi_fail(LW_ERR_INVALID, "comm: a device communicator needs a device; it is NULL");
    if (lw_device_comm_name(kind) == NULL)
        return lwi_fail(LW_ERR_INVALID, "comm: unknown device communicator kind %d", (int)kind);
    lw_status st = lwi_comm_check_broken(parent);
    if (st != LW_OK) return st;
    if (device->ops->host_memory)
        return lwi_fail(LW_ERR_UNSUPPORTED,
                        "comm: %s has no communicator of its own: every communicator already "
                        "reaches host memory (use the '%s' communicator itself)",
                        device->name, parent->backend->name);
    /* the device communicator sends its host-memory collectives to the parent, which must be
     * able to move host memory itself */
    if (!parent->backend->host_memory)
        return lwi_fail(LW_ERR_INVALID,
                        "comm: the parent of a device communicator must move host memory (self "
                        "or mpi); '%s' is a device communicator already: pass the one it was "
                        "made from",
                        parent->backend->name);
    lw_device_comm asked = kind;
    char about[LWI_ABOUT];
    /* every rank takes part in the choice, also one whose environment is bad: the others would
     * wait for it in the choice's all-reduce */
    lw_status env = asked_kind(kind, &asked);
    st = choose(parent, device, env == LW_OK ? asked : LW_DEVICE_COMM_AUTO, &kind, about,
                sizeof about);
    if (env != LW_OK) return env;
    if (st != LW_OK) return st;
    static const lwi_comm_calls calls = {lwi_comm_make,  lw_comm_broadcast, lw_comm_allreduce,
                                         lw_comm_barrier, lw_comm_split,     lw_comm_abort,
                                         lw_comm_free};
    st = kind == LW_DEVICE_COMM_STAGED ? lwi_comm_staged_new(parent, device, out)
                                       : device->ops->comm_new(device, parent, &calls, out);
    if (st != LW_OK) {
        *out = NULL;
        return st;
    }
    /* like a split, it takes its parent's watchdog */
    (*out)->timeout = parent->timeout;
    (*out)->device = device;
    (*out)->yield = parent->yield;
    memcpy((*out)->about, about, sizeof about);
    return LW_OK;
}

lw_status lw_comm_device_new(lw_comm *parent, lw_device *device, lw_comm **out) {
    return lw_comm_device_new_kind(parent, device, LW_DEVICE_COMM_AUTO, out);
}
