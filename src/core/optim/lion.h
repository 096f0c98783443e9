/* lion.h: what the optimizer uses of lion.c beyond the public API: the check of Lion's options,
 * so that an optimizer taking them says what is wrong as lw_lion_update does. Not public API. */
#ifndef LW_OPTIM_LION_H
#define LW_OPTIM_LION_H

#include "device/device.h"

/* LW_OK, or LW_ERR_INVALID naming the field out of range ("lion: beta1 must be in [0, 1), got
 * 1"): beta1 and beta2 in [0, 1). */
lw_status lwi_lion_check(const lw_lion_options *o);

#endif
