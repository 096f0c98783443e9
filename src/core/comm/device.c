/* device.c: lw_comm_device_new, a communicator that moves a device's memory (NCCL on a CUDA
 * device), made by the device's table over a parent communicator. The backend itself lives in
 * the device's library (src/cuda/nccl.c); this file checks the arguments and names what is
 * missing. */
#include "comm/comm.h"

lw_status lw_comm_device_new(lw_comm *parent, lw_device *device, lw_comm **out) {
    if (out == NULL) return lwi_fail(LW_ERR_INVALID, "comm: out pointer is NULL");
    *out = NULL;
    if (parent == NULL)
        return lwi_fail(LW_ERR_INVALID, "comm: a device communicator needs a parent "
                                        "communicator to bootstrap over; parent is NULL");
    if (device == NULL)
        return lwi_fail(LW_ERR_INVALID, "comm: a device communicator needs a device; it is NULL");
    lw_status st = lwi_comm_check_broken(parent);
    if (st != LW_OK) return st;
    if (device->ops->host_memory)
        return lwi_fail(LW_ERR_UNSUPPORTED,
                        "comm: %s has no communicator of its own: every communicator already "
                        "reaches host memory (use the '%s' communicator itself)",
                        device->name, parent->backend->name);
    if (device->ops->comm_new == NULL)
        return lwi_fail(LW_ERR_UNSUPPORTED,
                        "comm: %s has no communicator of its own: its device library gives none "
                        "(no comm_new in its table), so buffers cannot live there on more than "
                        "one rank",
                        device->name);
    /* the device communicator sends its host-memory collectives to the parent, which must be
     * able to move host memory itself */
    if (!parent->backend->host_memory)
        return lwi_fail(LW_ERR_INVALID,
                        "comm: the parent of a device communicator must move host memory (self "
                        "or mpi); '%s' is a device communicator already: pass the one it was "
                        "made from",
                        parent->backend->name);
    st = device->ops->comm_new(device, parent, out);
    if (st != LW_OK) {
        *out = NULL;
        return st;
    }
    /* like a split, it takes its parent's watchdog */
    (*out)->timeout = parent->timeout;
    (*out)->device = device;
    (*out)->yield = parent->yield;
    return LW_OK;
}
