/* test_cuda_muon_tp.c: the CUDA device's entries for Muon under tensor parallelism against the
 * CPU's on the same seeded inputs: the 2-D copy (exact), and the distributed mode's Newton-Schulz
 * halves, the Gram matrix and the rest of a step, both orientations (fp32 GEMMs against the CPU's
 * SYRK/SYMM: sums in another order, 1e-5 of the result's norm), and a split QKV weight through
 * the optimizer on GPU buffers against the CPU's. Exit 77 (skipped) when CUDA is not available. */
#include "cuda_util.h"
#include "device/device.h"
#include "layout_util.h"

static lw_device *cpu;

/* A 7 x 5 block of a 9-wide matrix into a 6-wide one, and back: every element where it belongs,
 * nothing else touched. */
static void test_copy_2d(void) {
    const int64_t rows = 7, src_ld = 9, dst_ld = 6, cols = 5;
    float *src = host_random(rows * src_ld), *back = malloc(4 * rows * dst_ld);
    float *dsrc = upload(src, 4 * rows * src_ld), *ddst = NULL;
    CHECK_OK(lw_device_alloc(gpu, 4 * rows * dst_ld, (void **)&ddst));
    CHECK(gpu->ops->copy_2d != NULL);
    if (ddst != NULL && gpu->ops->copy_2d != NULL) {
        CHECK_OK(gpu->ops->copy_2d(gs, ddst, dst_ld, dsrc + 2, src_ld, rows, cols));
        download(back, ddst, 4 * rows * dst_ld);
        bool ok = true;
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < dst_ld; j++)
                ok = ok && back[i * dst_ld + j] == (j < cols ? src[i * src_ld + 2 + j] : 0.0f);
        CHECK(ok);
    }
    lw_device_free(gpu, dsrc), lw_device_free(gpu, ddst);
    free(src), free(back);
}

/* A = X X^T, then one step X' = a X + (b A + c A A) X, for X p x q stored as is or transposed,
 * on both devices; the CPU's result is the reference. */
static void test_ns_halves(void) {
    const int64_t shapes[][2] = {{24, 40}, {40, 24}, {1, 17}, {33, 33}};
    const float abc[3] = {4.0848f, -6.8946f, 2.9270f};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int transposed = 0; transposed < 2; transposed++) {
            const int64_t p = shapes[s][0], q = shapes[s][1], n = p * q;
            float *x = host_random(n), *a = malloc(4 * p * p), *work = malloc(4 * (p * p + n));
            float *ga = malloc(4 * p * p), *gx = malloc(4 * n);
            for (int64_t i = 0; i < n; i++)
                x[i] *= 0.1f; /* a normalised scale: the step's polynomial stays moderate */
            float *dx = upload(x, 4 * n), *da = NULL, *dw = NULL;
            CHECK_OK(lw_device_alloc(gpu, 4 * p * p, (void **)&da));
            CHECK_OK(lw_device_alloc(gpu, 4 * (p * p + n), (void **)&dw));
            lw_stream *cs = lw_device_stream(cpu);
            CHECK_OK(cpu->ops->ns_gram(cs, x, a, p, q, transposed));
            CHECK_OK(gpu->ops->ns_gram(gs, dx, da, p, q, transposed));
            download(ga, da, 4 * p * p);
            const double d_gram = rel_frobenius(ga, a, p * p);
            /* the step from the same A on both */
            CHECK_OK(lw_device_copy(gs, da, a, 4 * p * p, LW_COPY_HOST_TO_DEVICE));
            CHECK_OK(cpu->ops->ns_step(cs, abc, a, x, p, q, transposed, work));
            CHECK_OK(gpu->ops->ns_step(gs, abc, da, dx, p, q, transposed, dw));
            download(gx, dx, 4 * n);
            const double d_step = rel_frobenius(gx, x, n);
            if (!(d_gram <= 1e-5 && d_step <= 1e-5))
                fprintf(stderr, "ns halves %lldx%lld%s: gram %g, step %g\n", (long long)p,
                        (long long)q, transposed ? " transposed" : "", d_gram, d_step);
            CHECK(d_gram <= 1e-5);
            CHECK(d_step <= 1e-5);
            lw_device_free(gpu, dx), lw_device_free(gpu, da), lw_device_free(gpu, dw);
            free(x), free(a), free(work), free(ga), free(gx);
        }
}

/* One step of the optimizer on a grouped-query QKV weight (2 groups of 8 + 4 + 4 rows, split)
 * and a plain matrix, on device d's buffers; [out] out: both after it, one after the other. */
static void optimizer_step(lw_device *d, float *out) {
    lw_param_spec s[2] = {mat("qkv", 32, 24, true), mat("w", 16, 24, true)};
    s[0].qkv_groups = 2, s[0].qkv_rows[0] = 8, s[0].qkv_rows[1] = 4, s[0].qkv_rows[2] = 4;
    lw_stream *st = lw_device_stream(d);
    lw_comm *self = NULL, *dc = NULL;
    CHECK_OK(lw_comm_self(&self));
    dc = self;
    if (d != cpu) CHECK_OK(lw_comm_device_new(self, d, &dc));
    lw_layout *l = make_layout(s, 2, 1, INT64_MAX, LW_ALGORITHM_COST, LW_ALGORITHM_DISTOPT);
    lw_buffers_options bo = lw_buffers_defaults();
    bo.device = d;
    lw_buffers *bs = NULL;
    lw_optimizer *opt = NULL;
    if (l != NULL && dc != NULL) CHECK_OK(lw_buffers_new(l, dc, NULL, &bo, &bs));
    lw_optimizer_options oo = lw_optimizer_defaults();
    oo.muon.precision = LW_NS_FP32;
    if (bs != NULL) CHECK_OK(lw_optimizer_new(bs, &oo, &opt));
    if (opt == NULL) goto done;
    CHECK_OK(lw_optimizer_set_hparams(opt, 0, 0.02f, 0.0f));
    seed = 7;
    for (int p = 0; p < 2; p++) {
        const int64_t n = s[p].shape[0] * 24;
        float *h = host_random(n), *w = NULL;
        int32_t grp = 0;
        CHECK_OK(lw_buffers_acquire(bs, p, LW_PASS_FORWARD, true));
        CHECK_OK(lw_buffers_param(bs, p, &w));
        if (w != NULL) CHECK_OK(lw_device_copy(st, w, h, 4 * n, LW_COPY_HOST_TO_DEVICE));
        CHECK_OK(lw_buffers_param_group(bs, p, &grp));
        CHECK_OK(lw_buffers_commit(bs, grp));
        CHECK_OK(lw_buffers_release(bs, p));
        free(h);
    }
    CHECK_OK(lw_buffers_start_param_sync(bs));
    CHECK_OK(lw_buffers_zero_grad(bs));
    for (int p = 0; p < 2; p++) {
        CHECK_OK(lw_buffers_acquire(bs, p, LW_PASS_FORWARD, false));
        CHECK_OK(lw_buffers_release(bs, p));
    }
    for (int p = 1; p >= 0; p--) {
        const int64_t n = s[p].shape[0] * 24;
        float *h = host_random(n), *g = NULL;
        CHECK_OK(lw_buffers_acquire(bs, p, LW_PASS_BACKWARD, false));
        CHECK_OK(lw_buffers_grad(bs, p, &g));
        if (g != NULL) CHECK_OK(lw_device_copy(st, g, h, 4 * n, LW_COPY_HOST_TO_DEVICE));
        CHECK_OK(lw_buffers_release(bs, p));
        CHECK_OK(lw_buffers_grad_ready(bs, p));
        free(h);
    }
    CHECK_OK(lw_buffers_end_backward(bs));
    lw_step_result r;
    CHECK_OK(lw_optimizer_step(opt, &r));
    CHECK_OK(lw_buffers_finish_param_sync(bs, -1));
    for (int p = 0, at = 0; p < 2; at += (int)s[p].shape[0] * 24, p++) {
        float *w = NULL;
        CHECK_OK(lw_buffers_acquire(bs, p, LW_PASS_FORWARD, true));
        CHECK_OK(lw_buffers_param(bs, p, &w));
        CHECK_OK(lw_stream_synchronize(st));
        if (w != NULL)
            CHECK_OK(lw_device_copy(st, out + at, w, 4 * s[p].shape[0] * 24,
                                    LW_COPY_DEVICE_TO_HOST));
        CHECK_OK(lw_buffers_release(bs, p));
    }
done:
    lw_optimizer_free(opt);
    lw_buffers_free(bs);
    lw_layout_free(l);
    if (dc != self) lw_comm_free(dc);
    lw_comm_free(self);
}

/* The split through the optimizer (2-D copies, Newton-Schulz of each block, the scales), fp32:
 * 1e-5 of a parameter, as test_cuda's optimizer on the GPU. */
static void test_split_on_gpu(void) {
    float *c = calloc(48 * 24, 4), *g = calloc(48 * 24, 4);
    optimizer_step(cpu, c);
    optimizer_step(gpu, g);
    const double d = max_rel(g, c, 48 * 24, 1e-2);
    if (!(d <= 1e-5)) fprintf(stderr, "split QKV on the GPU: %g\n", d);
    CHECK(d <= 1e-5);
    free(c), free(g);
}

int main(void) {
    const int skip_or_fail = cuda_open("test_cuda_muon_tp");
    if (skip_or_fail != 0) return skip_or_fail;
    CHECK_OK(lw_device_get("cpu", &cpu));
    test_copy_2d();
    test_ns_halves();
    test_split_on_gpu();
    return check_exit("test_cuda_muon_tp");
}
