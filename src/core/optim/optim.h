/* optim.h: what the optimizer's files share: the layout's data (which params are Muon matrices,
 * where they sit) read through layout.h; the buffers only through their public API; the
 * arithmetic through the device table. Not public API. */
#ifndef LW_OPTIM_H
#define LW_OPTIM_H

#include "device/device.h"
#include "layout/layout.h"

#endif
