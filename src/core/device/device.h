/* device.h: the device layer's internals, shared by the device/ files and the CPU implementation in
 * device/cpu/. Not public API. */
#ifndef LW_DEVICE_H
#define LW_DEVICE_H

#include "base/base.h"

/* BLAS threads for `ranks` processes sharing this machine, unless the user chose. */
void lwi_blas_share_cores(int32_t ranks);

#endif
