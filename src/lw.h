/* lw.h: the whole public C API of lwopt, and the contract of the LuaJIT binding. It includes
 * one header per layer, each usable on its own, in the order a program meets them; the Lua
 * binding's declarations are generated from their LW_CDEF regions in the same order. The
 * conventions they share, and the long explanations, are in docs/c_api.md.
 */
#ifndef LW_H
#define LW_H

#include "lw_base.h"          /* status codes, the last error, version, clock, lw_dtype */
#include "lw_device.h"        /* devices, streams, events, matrix-product precision */
#include "lw_layout.h"        /* parameter specs, layouts: buffers, buckets, owners */
#include "lw_comm.h"          /* communicators, collectives, requests, the watchdog */
#include "lw_optim_kernels.h" /* vector kernels, Muon, AdamW, Lion */
#include "lw_optimizer.h"     /* runtime choices, buffers and their syncs, the optimizer */
#include "lw_model_kernels.h" /* the model's forward and backward kernels */
#include "lw_host.h"          /* host helpers for the Lua front end: files, JSON, formats */

#endif /* LW_H */
