/* muon_tp.h: Muon's orthogonalisation of a TP shard or a fused QKV weight (muon_tp.c,
 * docs/algorithms.md section 9), for the optimizer. The layout's data (which params are Muon
 * matrices, where they sit) is read through layout.h. Not public API. */
#ifndef LW_OPTIM_MUON_TP_H
#define LW_OPTIM_MUON_TP_H

#include "device/device.h"
#include "layout/layout.h"

/* Over a TP communicator (NULL: none, t = 1), with its own device workspace. */
typedef struct lwi_muon_tp lwi_muon_tp;
/* tp [borrowed]; o: tp_mode and split_qkv are read (and row_equilibrate, which the
 * distributed mode refuses). [out] owned. */
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
/* The step of p's elements [start, start + count) of its local shape (w and x point at element
 * start; x from lwi_muon_tp_update): W -= lr * x, with the decay the options put at the step
 * at each matrix's own scale (a split QKV weight's Q, K and V rows each their block's; a TP
 * shard its full matrix's). */
lw_status lwi_muon_tp_apply(lwi_muon_tp *t, lw_muon *m, lw_stream *s, const lwi_param *p, float *w,
                            const float *x, int64_t start, int64_t count, float lr, float wd);

#endif
