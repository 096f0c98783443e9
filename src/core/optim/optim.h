/* optim.h: what the optimizer's files share: the layout's data (which params are Muon matrices,
 * where they sit) read through layout.h; the buffers only through their public API; the
 * arithmetic through the device table. Not public API. */
#ifndef LW_OPTIM_H
#define LW_OPTIM_H

#include "device/device.h"
#include "layout/layout.h"

/* muon.c: the update of `batch` same-shaped matrices at once (the optimizer's batches; a device
 * runs their Newton-Schulz as batched GEMMs). lwi_muon_batch_updates reserves the workspace
 * for them and gives the batch's update array (batch x rows x cols, device memory, valid until
 * the next call on m); lwi_muon_orthogonalize_batch orthogonalises them in place. */
lw_status lwi_muon_batch_updates(lw_muon *m, lw_stream *stream, int64_t batch, int64_t rows,
                                 int64_t cols, float **updates);
lw_status lwi_muon_orthogonalize_batch(lw_muon *m, lw_stream *stream, float *u, int64_t batch,
                                       int64_t rows, int64_t cols);

#endif
