/* test_cuda_muon_tp.c: the CUDA device's entries for Muon under tensor parallelism against the
 * CPU's on the same seeded inputs: the 2-D copy (exact), and the distributed mode's Newton-Schulz
 * halves, the Gram matrix and the rest of a step, both orientations (fp32 GEMMs against the CPU's
 * SYRK/SYMM: sums in another order, 1e-5 of the result's norm), and a split QKV weight through
 * the optimizer on GPU buffers against the CPU's. Exit 77 (skipped) when CUDA is not available. */
#include "cuda_util.h"
#include "device/device.h"
#include "optim_util.h"

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

/* The seeded random values in turn (cuda_util.h), whatever is asked for. */
static void random_fill(void *ctx, int p, int step, float *host, int64_t n) {
    (void)ctx, (void)p, (void)step;
    for (int64_t i = 0; i < n; i++)
        host[i] = frand();
}

/* One step of the optimizer on a grouped-query QKV weight (2 groups of 8 + 4 + 4 rows, split)
 * and a plain matrix, on device d's buffers; [out] out: both after it, one after the other. */
static void optimizer_step(lw_device *d, float *out) {
    lw_param_spec s[2] = {mat("qkv", 32, 24, true), mat("w", 16, 24, true)};
    s[0].qkv_groups = 2, s[0].qkv_rows[0] = 8, s[0].qkv_rows[1] = 4, s[0].qkv_rows[2] = 4;
    lw_comm *self = NULL;
    CHECK_OK(lw_comm_self(&self));
    lw_comm *dc = comm_on(d, self);
    lw_buffers_options bo = lw_buffers_defaults();
    bo.device = d;
    lw_optimizer_options oo = lw_optimizer_defaults();
    oo.muon.precision = LW_NS_FP32;
    rig r = {0};
    lw_layout *l = NULL;
    if (dc != NULL) l = make_layout(s, 2, 1, INT64_MAX, LW_ALGORITHM_COST, LW_ALGORITHM_DISTOPT);
    if (dc != NULL && rig_new(&r, l, s, 2, dc, &bo, &oo)) {
        CHECK_OK(lw_optimizer_set_hparams(r.opt, 0, 0.02f, 0.0f));
        seed = 7;
        rig_write_params(&r, random_fill, NULL);
        lw_step_result res;
        rig_steps(&r, 1, random_fill, NULL, &res);
        float *const w[2] = {out, out + 32 * 24};
        rig_read_params(&r, w);
    }
    rig_free(&r);
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
