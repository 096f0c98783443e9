/* muon.h: what the optimizer and muon_tp.c use of lw_muon (muon.c) beyond the public API: the
 * batched update of same-shaped matrices, and a Muon's options, coefficients and scale. The
 * arithmetic runs through the device table. Not public API. */
#ifndef LW_OPTIM_MUON_H
#define LW_OPTIM_MUON_H

#include "device/device.h"

/* The update of `batch` same-shaped matrices at once (the optimizer's batches; a device runs
 * their Newton-Schulz as batched GEMMs). lwi_muon_batch_updates reserves the workspace for them
 * and gives the batch's update array (batch x rows x cols, device memory, valid until the next
 * call on m); lwi_muon_orthogonalize_batch orthogonalises them in place. */
lw_status lwi_muon_batch_updates(lw_muon *m, lw_stream *stream, int64_t batch, int64_t rows,
                                 int64_t cols, float **updates);
lw_status lwi_muon_orthogonalize_batch(lw_muon *m, lw_stream *stream, float *u, int64_t batch,
                                       int64_t rows, int64_t cols);

/* The floor of the norms that row equilibration and renormalisation divide by (nanochat's). */
#define LWI_MUON_NORM_FLOOR 1e-6f

/* What muon_tp.c reads of a Muon: its options, its ns_steps (a, b, c) triples (host memory),
 * the scale of a rows x cols matrix's step times extra_scale, and what Newton-Schulz divides a
 * matrix of Frobenius norm `norm` by (its coefficient set's normalisation, floored at eps). */
const lw_muon_options *lwi_muon_options(const lw_muon *m);
const float *lwi_muon_abc(const lw_muon *m);
double lwi_muon_scale(const lw_muon *m, int64_t rows, int64_t cols);
double lwi_muon_norm_divisor(const lw_muon *m, double norm);

/* w -= lr * x on n elements of a rows x cols matrix (its full shape) whose update x is already
 * scaled (muon_tp.c's), with the weight decay the options put at the step at that shape's
 * scale (lw_muon_apply_decay); without one, the plain step. */
lw_status lwi_muon_apply_scaled(lw_muon *m, lw_stream *s, float *w, const float *x, int64_t n,
                                int64_t rows, int64_t cols, float lr, float wd);

#endif
