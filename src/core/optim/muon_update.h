/* muon_update.h: the Muon update of one matrix as the optimizer calls it: muon_update.c's
 * batched update and what muon_tp.c reads of a Muon, and muon_tp.c's update of a TP shard or a
 * fused QKV weight. The layout's data (which params are Muon matrices, where they sit) is read
 * through layout.h, the arithmetic through the device table. Not public API. */
#ifndef LW_MUON_UPDATE_H
#define LW_MUON_UPDATE_H

#include "device/device.h"
#include "layout/layout.h"

/* muon_update.c: the update of `batch` same-shaped matrices at once (the optimizer's batches;
 * a device runs their Newton-Schulz as batched GEMMs). lwi_muon_batch_updates reserves the
 * workspace for them and gives the batch's update array (batch x rows x cols, device memory,
 * valid until the next call on m); lwi_muon_orthogonalize_batch orthogonalises them in place. */
lw_status lwi_muon_batch_updates(lw_muon *m, lw_stream *stream, int64_t batch, int64_t rows,
                                 int64_t cols, float **updates);
lw_status lwi_muon_orthogonalize_batch(lw_muon *m, lw_stream *stream, float *u, int64_t batch,
                                       int64_t rows, int64_t cols);

/* muon_update.c: what muon_tp.c reads of a Muon: its options, its ns_steps (a, b, c) triples (host
 * memory), and the scale of a rows x cols matrix's step times extra_scale. */
const lw_muon_options *lwi_muon_options(const lw_muon *m);
const float *lwi_muon_abc(const lw_muon *m);
double lwi_muon_scale(const lw_muon *m, int64_t rows, int64_t cols);

/* muon_tp.c: Muon's orthogonalisation of a TP shard or a fused QKV weight (docs/algorithms.md
 * section 9), over a TP communicator (NULL: none, t = 1), with its own device workspace. */
typedef struct lwi_muon_tp lwi_muon_tp;
/* tp [borrowed]; o: tp_mode and split_qkv are read. [out] owned. */
lw_status lwi_muon_tp_new(lw_device *device, lw_comm *tp, const lw_muon_options *o,
                          lwi_muon_tp **out);
void lwi_muon_tp_free(lwi_muon_tp *t);
int32_t lwi_muon_tp_size(const lwi_muon_tp *t);
int32_t lwi_muon_tp_rank(const lwi_muon_tp *t);
/* Whether the 2-D Muon matrix p goes through lwi_muon_tp_update: a TP shard (tp_blocks) with
 * t > 1, or a fused QKV weight (qkv_groups) with split_qkv. Any other goes the plain way
 * (lw_muon_orthogonalize, lw_muon_apply), as without TP. */
bool lwi_muon_tp_takes(const lwi_muon_tp *t, const lwi_param *p);
/* x = the step of p's local update u (its local shape, device memory), scale included: W -=
 * lr * x. Collective over the TP group for a TP shard under duplicated or distributed (every
 * TP rank calls it for the same matrices in the same order). x may be u. Adds the seconds
 * spent in collectives to *seconds_comm. */
lw_status lwi_muon_tp_update(lwi_muon_tp *t, lw_muon *m, lw_stream *s, const lwi_param *p,
                             const float *u, float *x, double *seconds_comm);

#endif
