/* optim_util.h: the set-up the optimizer tests share (test_optimizer.c and test_cuda.c,
 * test_muon_tp.c and test_cuda_muon_tp.c): a rig of layout, buffers and optimizer made and freed
 * together on any device, parameters and gradients written and read the way modules reach them
 * (acquire, view, release) from a seeded fill, whole steps of forward, backward and the
 * optimizer, the communicator a rig on one rank takes, and seeded full-rank values. What each test
 * checks stays in it. */
#ifndef LW_TEST_OPTIM_UTIL_H
#define LW_TEST_OPTIM_UTIL_H

#include "layout_util.h"

#include <math.h>
#include <stdlib.h>

static inline int64_t spec_numel(const lw_param_spec *s) {
    int64_t n = 1;
    for (int d = 0; d < s->ndim; d++)
        n *= s->shape[d];
    return n;
}

/* A smooth initial weight of element i of parameter p, distinct per parameter. */
static inline float smooth_init(int p, int64_t i) {
    return 0.1f * (float)sin(0.7 * p + 0.37 * (double)i);
}

/* A seeded value in [-1, 1] of key x, a 4-digit grid: whole tensors of these are full-rank (a
 * low-rank gradient leaves singular values near 0, whose rounding Newton-Schulz amplifies by its
 * slope there, ~4 a step: float against float64 would differ by 1e-4, not 1e-6). */
static inline double hashed(uint64_t x) {
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 29;
    x *= UINT64_C(0xc4ceb9fe1a85ec53);
    x ^= x >> 33;
    return (double)(x % 20001) / 10000.0 - 1.0;
}

/* Fills host[0..n) with parameter p's initial weights (step -1) or its gradient at `step`. */
typedef void (*rig_fill)(void *ctx, int p, int step, float *host, int64_t n);

/* An optimizer under test: its layout, the buffers of it on a device, and the optimizer. */
typedef struct rig {
    const lw_param_spec *specs; /* [borrowed] the layout's, n of them */
    int n;
    lw_device *device; /* the buffers' */
    lw_layout *layout; /* [owned] */
    lw_buffers *buffers;
    lw_optimizer *opt;
} rig;

/* [out] r over layout ([owned], made from specs[0..n); NULL: it failed): buffers of it over comm
 * by bo (NULL: defaults) and an optimizer over them by oo (NULL: defaults). True when all three
 * are there; else the failure is counted, and rig_free frees what was made. */
static inline bool rig_new(rig *r, lw_layout *layout, const lw_param_spec *specs, int n,
                           lw_comm *comm, const lw_buffers_options *bo,
                           const lw_optimizer_options *oo) {
    memset(r, 0, sizeof *r);
    r->specs = specs;
    r->n = n;
    r->device = bo != NULL && bo->device != NULL ? bo->device : lw_device_cpu();
    r->layout = layout;
    if (layout != NULL) CHECK_OK(lw_buffers_new(layout, comm, NULL, bo, &r->buffers));
    if (r->buffers != NULL) CHECK_OK(lw_optimizer_new(r->buffers, oo, &r->opt));
    return r->opt != NULL;
}

static inline void rig_free(rig *r) {
    lw_optimizer_free(r->opt);
    lw_buffers_free(r->buffers);
    lw_layout_free(r->layout);
    memset(r, 0, sizeof *r);
}

/* Two hyper-parameter groups: Muon's parameters in group 0, the rest (AdamW's) in group 1. */
static inline void rig_groups(rig *r, const float lr[2], const float wd[2]) {
    for (int p = 0; p < r->n; p++)
        CHECK_OK(lw_optimizer_set_group(r->opt, p, r->specs[p].optimizer == LW_OPTIMIZER_MUON ? 0 : 1));
    for (int grp = 0; grp < 2; grp++)
        CHECK_OK(lw_optimizer_set_hparams(r->opt, grp, lr[grp], wd[grp]));
}

/* Each parameter's initial weights from fill (step -1), copied through its view onto the
 * buffers' device, its group committed; then the parameter sync started (ZeRO-3: what was
 * gathered is dropped). */
static inline void rig_write_params(rig *r, rig_fill fill, void *ctx) {
    lw_stream *s = lw_device_stream(r->device);
    for (int p = 0; p < r->n; p++) {
        const int64_t n = spec_numel(&r->specs[p]);
        float *h = malloc(sizeof(float) * (size_t)n), *w = NULL;
        int32_t grp = 0;
        fill(ctx, p, -1, h, n);
        CHECK_OK(lw_buffers_acquire(r->buffers, p, LW_PASS_FORWARD, true));
        CHECK_OK(lw_buffers_param(r->buffers, p, &w));
        if (w != NULL) CHECK_OK(lw_device_copy(s, w, h, 4 * n, LW_COPY_HOST_TO_DEVICE));
        CHECK_OK(lw_buffers_param_group(r->buffers, p, &grp));
        CHECK_OK(lw_buffers_commit(r->buffers, grp));
        CHECK_OK(lw_buffers_release(r->buffers, p));
        free(h);
    }
    CHECK_OK(lw_buffers_start_param_sync(r->buffers));
}

/* A micro-step's forward: each parameter acquired and released in turn, as its module would. */
static inline void rig_forward(rig *r) {
    for (int p = 0; p < r->n; p++) {
        CHECK_OK(lw_buffers_acquire(r->buffers, p, LW_PASS_FORWARD, false));
        CHECK_OK(lw_buffers_release(r->buffers, p));
    }
}

/* A backward in backprop order (the last parameter first): each gradient from fill at step,
 * copied through its view and reported ready; then the backward's end. */
static inline void rig_backward(rig *r, int step, rig_fill fill, void *ctx) {
    lw_stream *s = lw_device_stream(r->device);
    for (int p = r->n - 1; p >= 0; p--) {
        const int64_t n = spec_numel(&r->specs[p]);
        float *h = malloc(sizeof(float) * (size_t)n), *g = NULL;
        fill(ctx, p, step, h, n);
        CHECK_OK(lw_buffers_acquire(r->buffers, p, LW_PASS_BACKWARD, false));
        CHECK_OK(lw_buffers_grad(r->buffers, p, &g));
        if (g != NULL) CHECK_OK(lw_device_copy(s, g, h, 4 * n, LW_COPY_HOST_TO_DEVICE));
        CHECK_OK(lw_buffers_release(r->buffers, p));
        CHECK_OK(lw_buffers_grad_ready(r->buffers, p));
        free(h);
    }
    CHECK_OK(lw_buffers_end_backward(r->buffers));
}

/* `steps` optimizer steps, each after zeroed gradients, a forward and a backward from fill;
 * [out] res[step]: each step's result. */
static inline void rig_steps(rig *r, int steps, rig_fill fill, void *ctx, lw_step_result *res) {
    for (int step = 0; step < steps; step++) {
        CHECK_OK(lw_buffers_zero_grad(r->buffers));
        rig_forward(r);
        rig_backward(r, step, fill, ctx);
        memset(&res[step], 0, sizeof res[step]);
        CHECK_OK(lw_optimizer_step(r->opt, &res[step]));
    }
}

/* Ends the parameter sync and copies each parameter through its view into out[p] (its numel
 * floats, [borrowed]), after the buffers' device's work. */
static inline void rig_read_params(rig *r, float *const *out) {
    lw_stream *s = lw_device_stream(r->device);
    CHECK_OK(lw_buffers_finish_param_sync(r->buffers, -1));
    for (int p = 0; p < r->n; p++) {
        float *w = NULL;
        CHECK_OK(lw_buffers_acquire(r->buffers, p, LW_PASS_FORWARD, true));
        CHECK_OK(lw_buffers_param(r->buffers, p, &w));
        CHECK_OK(lw_stream_synchronize(s));
        if (w != NULL)
            CHECK_OK(
                lw_device_copy(s, out[p], w, 4 * spec_numel(&r->specs[p]), LW_COPY_DEVICE_TO_HOST));
        CHECK_OK(lw_buffers_release(r->buffers, p));
    }
}

/* Compares rank 0's parameters with this rank's, byte for byte. */
static inline bool identical_across_ranks(lw_comm *c, lw_buffers *bs, const lw_param_spec *sp,
                                          int n) {
    int64_t differs = 0;
    for (int p = 0; p < n; p++) {
        float *data = NULL;
        const int64_t k = spec_numel(&sp[p]);
        CHECK_OK(lw_buffers_acquire(bs, p, LW_PASS_FORWARD, true));
        CHECK_OK(lw_buffers_param(bs, p, &data));
        if (data == NULL) return false;
        float *root = malloc(sizeof(float) * (size_t)k);
        memcpy(root, data, sizeof(float) * (size_t)k);
        CHECK_OK(lw_comm_broadcast(c, root, (int64_t)sizeof(float) * k, 0));
        differs += memcmp(root, data, sizeof(float) * (size_t)k) != 0;
        free(root);
        CHECK_OK(lw_buffers_release(bs, p));
    }
    CHECK_OK(lw_comm_allreduce(c, &differs, 1, LW_DTYPE_I64, LW_REDUCE_SUM));
    return differs == 0;
}

/* The communicator a rig on device d takes at one rank: self itself for the CPU, else a device
 * communicator over self ([owned] by the caller; NULL when that failed, counted). */
static inline lw_comm *comm_on(lw_device *d, lw_comm *self) {
    if (lw_device_is_host(d)) return self;
    lw_comm *dc = NULL;
    CHECK_OK(lw_comm_device_new(self, d, &dc));
    return dc;
}

#endif
