/* optim.h: what the optimizer's files share: the layout's data (which params are Muon matrices,
 * where they sit) read through layout.h; the buffers only through their public API. Not public
 * API. */
#ifndef LW_OPTIM_H
#define LW_OPTIM_H

#include "layout/layout.h"

#endif
