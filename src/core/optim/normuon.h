/* normuon.h: what the optimizer uses of normuon.c beyond the public API: the check of NorMuon's
 * own options, so that the optimizer says what is wrong with them. Not public API. */
#ifndef LW_OPTIM_NORMUON_H
#define LW_OPTIM_NORMUON_H

#include "device/device.h"

/* LW_OK, or LW_ERR_INVALID naming the field out of range: beta2 in [0, 1), floor > 0. */
lw_status lwi_normuon_check(const lw_normuon_options *o);

#endif
