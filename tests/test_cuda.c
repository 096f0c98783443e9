/* test_cuda.c: every entry of the CUDA device against the CPU's (the reference) on the same seeded
 * inputs, each with its tolerance and the reason for it: memory, streams and events, the device's
 * info, the vector kernels, Muon (momentum, Newton-Schulz in fp32 / tf32 / bf16, the update),
 * AdamW, and the layer-wise optimizer on GPU buffers (batched Newton-Schulz, ZeRO-1/2/3, row
 * sharding) against the same steps on the CPU. Exit 77 (skipped) when CUDA is not available; a
 * GPU that is there and gives a wrong answer, or a CUDA library that is broken, fails. */
#include "cuda_util.h"
#include "optim_util.h"

/* ---- the device, memory, streams and events ------------------------------------------------ */

static void test_device_and_info(void) {
    CHECK(lw_has_cuda());
    CHECK(strcmp(lw_device_name(gpu), "cuda:0") == 0);
    CHECK(!lw_device_is_host(gpu));
    CHECK(lw_stream_device(gs) == gpu);
    lw_device *again = NULL;
    CHECK_OK(lw_device_get("cuda:0", &again));
    CHECK(again == gpu);
    lw_device_info info;
    CHECK_OK(lw_device_get_info(gpu, &info));
    printf("test_cuda: %s, %.1f GiB (%.1f free), sm_%d, %d SMs, %s\n", info.name,
           (double)info.total_bytes / (1 << 30), (double)info.free_bytes / (1 << 30),
           info.capability, info.processors, info.software);
    CHECK(info.name[0] != '\0' && strcmp(info.name, "cpu") != 0);
    CHECK(info.total_bytes >= ((int64_t)1 << 30)); /* every GPU lwopt targets has >= 1 GiB */
    CHECK(info.free_bytes > 0 && info.free_bytes <= info.total_bytes);
    CHECK(info.capability >= 50 && info.capability < 200);
    CHECK(info.processors >= 1 && info.processors < 10000);
    CHECK(strstr(info.software, "CUDA ") != NULL && strstr(info.software, "cuBLAS") != NULL &&
          strstr(info.software, "NCCL") != NULL);
}

/* Odd sizes and offsets: new memory is zero, copies of every kind and sets round-trip exactly. */
static void test_memory(void) {
    const int64_t sizes[] = {1, 3, 17, 1000, 65537, (1 << 20) + 7};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const int64_t n = sizes[k];
        unsigned char *h = malloc((size_t)n), *back = malloc((size_t)n + 1);
        unsigned char *expect = malloc((size_t)n + 1);
        for (int64_t i = 0; i < n; i++)
            h[i] = (unsigned char)(i * 131 + 7);
        unsigned char *a = NULL, *b = NULL;
        CHECK_OK(lw_device_alloc(gpu, n, (void **)&a));
        CHECK_OK(lw_device_alloc(gpu, n + 1, (void **)&b));
        if (a == NULL || b == NULL) goto next;
        CHECK(((uintptr_t)a & 63) == 0);
        CHECK_OK(lw_device_copy(gs, back, b, n + 1, LW_COPY_DEVICE_TO_HOST));
        bool zero = true;
        for (int64_t i = 0; i <= n; i++)
            zero = zero && back[i] == 0;
        CHECK(zero);
        /* host -> device, device -> device at an odd byte offset, device -> host */
        CHECK_OK(lw_device_copy(gs, a, h, n, LW_COPY_HOST_TO_DEVICE));
        CHECK_OK(lw_device_copy(gs, b + 1, a, n, LW_COPY_DEVICE_TO_DEVICE));
        CHECK_OK(lw_device_copy(gs, back, b, n + 1, LW_COPY_DEVICE_TO_HOST));
        CHECK(back[0] == 0 && memcmp(back + 1, h, (size_t)n) == 0);
        /* a set of the middle third to 0xA5, and of the first byte to 0 */
        const int64_t lo = n / 3, len = n - 2 * (n / 3);
        CHECK_OK(lw_device_set(gs, b + 1 + lo, 0xA5, len));
        CHECK_OK(lw_device_set(gs, b, 0, 1));
        expect[0] = 0;
        memcpy(expect + 1, h, (size_t)n);
        memset(expect + 1 + lo, 0xA5, (size_t)len);
        CHECK_OK(lw_device_copy(gs, back, b, n + 1, LW_COPY_DEVICE_TO_HOST));
        CHECK(memcmp(back, expect, (size_t)n + 1) == 0);
    next:
        lw_device_free(gpu, a);
        lw_device_free(gpu, b);
        free(h), free(back), free(expect);
    }
    CHECK_FAILS(lw_device_set(gs, NULL, 0, 4), LW_ERR_INVALID, "set of 4 bytes to 0");
}

/* Work on stream 1 that stream 2 must wait for: 3.0 copied in, doubled ten times; stream 2
 * adds the result to itself only after the event. Read early, it would see 0, 3, 6, ... */
static void test_streams_and_events(void) {
    const int64_t n = (int64_t)1 << 24; /* 64 MiB: long enough for a race to show */
    lw_stream *s1 = NULL, *s2 = NULL;
    lw_event *e = NULL;
    CHECK_OK(lw_stream_new(gpu, &s1));
    CHECK_OK(lw_stream_new(gpu, &s2));
    CHECK_OK(lw_event_new(gpu, &e));
    float *src = NULL, *x = NULL, *y = NULL;
    CHECK_OK(lw_device_alloc(gpu, 4 * n, (void **)&src));
    CHECK_OK(lw_device_alloc(gpu, 4 * n, (void **)&x));
    CHECK_OK(lw_device_alloc(gpu, 4 * n, (void **)&y));
    if (s1 == NULL || s2 == NULL || e == NULL || src == NULL || x == NULL || y == NULL) goto done;
    CHECK(lw_stream_device(s1) == gpu);
    float *h = malloc(4 * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        h[i] = 3.0f;
    CHECK_OK(lw_device_copy(s1, src, h, 4 * n, LW_COPY_HOST_TO_DEVICE));
    CHECK_OK(lw_device_copy(s1, x, src, 4 * n, LW_COPY_DEVICE_TO_DEVICE));
    for (int k = 0; k < 10; k++)
        CHECK_OK(lw_vec_scale(s1, x, n, 2.0f));
    CHECK_OK(lw_event_record(e, s1));
    CHECK_OK(lw_stream_wait(s2, e));
    CHECK_OK(lw_vec_add(s2, y, x, x, n));
    bool done = false;
    CHECK_OK(lw_event_query(e, &done)); /* either answer is right here; it must not fail */
    CHECK_OK(lw_stream_synchronize(s2));
    CHECK_OK(lw_event_query(e, &done));
    CHECK(done); /* s2 ran after the event's work */
    CHECK_OK(lw_device_copy(s2, h, y, 4 * n, LW_COPY_DEVICE_TO_HOST));
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; i++)
        wrong += h[i] != 6144.0f; /* 3 * 2^10 * 2: powers of two, exact */
    CHECK_EQ(wrong, 0);
    /* an event recorded again marks the new end; synchronize waits for it */
    CHECK_OK(lw_vec_scale(s1, x, n, 0.5f));
    CHECK_OK(lw_event_record(e, s1));
    CHECK_OK(lw_event_synchronize(e));
    CHECK_OK(lw_event_query(e, &done));
    CHECK(done);
    CHECK_OK(lw_device_copy(s1, h, x + n - 1, 4, LW_COPY_DEVICE_TO_HOST));
    CHECK(h[0] == 1536.0f);
    /* a GPU event cannot be recorded on the CPU's stream */
    CHECK_FAILS(lw_event_record(e, NULL), LW_ERR_INVALID, "cannot be recorded on cpu");
    free(h);
done:
    lw_device_free(gpu, src), lw_device_free(gpu, x), lw_device_free(gpu, y);
    lw_event_free(e);
    lw_stream_free(s1);
    lw_stream_free(s2);
    lw_stream_free(gs); /* the default stream is never freed */
}

/* ---- vector kernels -------------------------------------------------------------------------- */

static void test_norm_stats(void) {
    const int64_t sizes[] = {1, 1000, (1 << 20) + 3};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const int64_t n = sizes[k];
        float *x = host_random(n);
        for (int64_t i = 0; i < n; i += 7)
            x[i] = 0.0f;
        x[n - 1] = -0.0f; /* a negative zero counts as zero */
        int64_t zeros = 0;
        for (int64_t i = 0; i < n; i++)
            zeros += x[i] == 0.0f;
        double cpu[2] = {1.5, 2.0}, got[2] = {1.5, 2.0}; /* += into what is there */
        CHECK_OK(lw_vec_norm_stats(NULL, x, n, cpu));
        CHECK_OK(lw_vec_norm_stats(NULL, x, n, cpu));
        float *dx = upload(x, 4 * n);
        double *acc = upload(got, sizeof got);
        CHECK_OK(lw_vec_norm_stats(gs, dx, n, acc));
        CHECK_OK(lw_vec_norm_stats(gs, dx, n, acc));
        download(got, acc, sizeof got);
        /* both sum squares in double (lw.h): only the order of the sums differs, ~1e-16 per
         * term; squares rounded to float first would show as ~1e-8 */
        CHECK(fabs(got[0] - cpu[0]) <= 1e-10 * cpu[0]);
        CHECK(got[1] == cpu[1]); /* a count: exact */
        CHECK(cpu[1] == 2.0 + 2.0 * (double)zeros);
        lw_device_free(gpu, dx), lw_device_free(gpu, acc);
        free(x);
    }
}

static void test_all_finite(void) {
    const int64_t sizes[] = {1, 4099, (1 << 20) + 5};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const int64_t n = sizes[k];
        float *x = host_random(n);
        float *dx = upload(x, 4 * n);
        const int64_t at[] = {0, n / 2, n - 1};
        const float bad[] = {-INFINITY, NAN, INFINITY};
        bool cpu = false, got = false;
        CHECK_OK(lw_vec_all_finite(NULL, x, n, &cpu));
        CHECK_OK(lw_vec_all_finite(gs, dx, n, &got));
        CHECK(cpu && got);
        for (int b = 0; b < 3; b++) {
            float keep = x[at[b]];
            x[at[b]] = bad[b];
            CHECK_OK(lw_device_copy(gs, dx + at[b], &bad[b], 4, LW_COPY_HOST_TO_DEVICE));
            cpu = got = true;
            CHECK_OK(lw_vec_all_finite(NULL, x, n, &cpu));
            CHECK_OK(lw_vec_all_finite(gs, dx, n, &got));
            CHECK(!cpu && !got);
            x[at[b]] = keep;
            CHECK_OK(lw_device_copy(gs, dx + at[b], &keep, 4, LW_COPY_HOST_TO_DEVICE));
        }
        /* every bad value gone: finite again (no flag left over from the last call) */
        CHECK_OK(lw_vec_all_finite(gs, dx, n, &got));
        CHECK(got);
        lw_device_free(gpu, dx);
        free(x);
    }
}

static void test_scale_add_axpy(void) {
    const int64_t n = 100003;
    float *a = host_random(n), *b = host_random(n), *y = host_random(n);
    float *da = upload(a, 4 * n), *db = upload(b, 4 * n), *dy = upload(y, 4 * n);
    float *got = malloc(4 * (size_t)n);
    /* scale and add: one IEEE-rounded operation per element on both: exact */
    CHECK_OK(lw_vec_scale(NULL, a, n, 0.37f));
    CHECK_OK(lw_vec_scale(gs, da, n, 0.37f));
    download(got, da, 4 * n);
    CHECK_EQ(max_ulps(got, a, n), 0);
    CHECK_OK(lw_vec_add(NULL, y, a, b, n));
    CHECK_OK(lw_vec_add(gs, dy, da, db, n));
    download(got, dy, 4 * n);
    CHECK_EQ(max_ulps(got, y, n), 0);
    CHECK_OK(lw_vec_add(NULL, a, a, b, n)); /* y may be a */
    CHECK_OK(lw_vec_add(gs, da, da, db, n));
    download(got, da, 4 * n);
    CHECK_EQ(max_ulps(got, a, n), 0);
    /* axpy: a fused multiply-add rounds once where a*x + y rounds twice: 1 ulp; values of one
     * sign keep ulps meaningful */
    for (int64_t i = 0; i < n; i++)
        y[i] = 1.0f + fabsf(y[i]), b[i] = fabsf(b[i]);
    CHECK_OK(lw_device_copy(gs, dy, y, 4 * n, LW_COPY_HOST_TO_DEVICE));
    CHECK_OK(lw_device_copy(gs, db, b, 4 * n, LW_COPY_HOST_TO_DEVICE));
    CHECK_OK(lw_vec_axpy(NULL, y, 0.731f, b, n));
    CHECK_OK(lw_vec_axpy(gs, dy, 0.731f, db, n));
    download(got, dy, 4 * n);
    CHECK(max_ulps(got, y, n) <= 1);
    lw_device_free(gpu, da), lw_device_free(gpu, db), lw_device_free(gpu, dy);
    free(a), free(b), free(y), free(got);
}

/* ---- Muon ---------------------------------------------------------------------------------- */

static void test_muon_momentum(void) {
    const int64_t n = 10007;
    for (int mode = LW_WD_DECOUPLED; mode <= LW_WD_L2; mode++)
        for (int nesterov = 0; nesterov < 2; nesterov++) {
            lw_muon_options o = lw_muon_defaults();
            o.momentum = 0.9f;
            o.nesterov = nesterov;
            o.weight_decay_mode = (lw_weight_decay)mode;
            lw_muon *mc = NULL, *mg = NULL;
            CHECK_OK(lw_muon_new(&o, &mc));
            CHECK_OK(lw_muon_new(&o, &mg));
            float *w = host_random(n), *g = host_random(n), *m = host_random(n);
            float *u = calloc((size_t)n, 4), *hw = malloc(4 * (size_t)n);
            float *hm = malloc(4 * (size_t)n), *hu = malloc(4 * (size_t)n);
            float *dw = upload(w, 4 * n), *dg = upload(g, 4 * n), *dm = upload(m, 4 * n);
            float *du = upload(u, 4 * n);
            /* two steps, so the momentum carried between them is compared too */
            for (int step = 0; step < 2; step++) {
                CHECK_OK(lw_muon_momentum(mc, NULL, w, g, m, u, n, 0.02f, 0.1f, 0.5f));
                CHECK_OK(lw_muon_momentum(mg, gs, dw, dg, dm, du, n, 0.02f, 0.1f, 0.5f));
            }
            download(hw, dw, 4 * n), download(hm, dm, 4 * n), download(hu, du, 4 * n);
            /* a few chained float operations per element, any of which the GPU may fuse into
             * one FMA (one rounding instead of two): a few ulps, relative to the values */
            double dwr = max_rel(hw, w, n, 1e-3), dmr = max_rel(hm, m, n, 1e-3);
            double dur = max_rel(hu, u, n, 1e-3);
            if (dwr > 1e-6 || dmr > 1e-6 || dur > 1e-6)
                fprintf(stderr, "muon momentum wd %s nesterov %d: w %g m %g u %g\n",
                        lw_weight_decay_name((lw_weight_decay)mode), nesterov, dwr, dmr, dur);
            CHECK(dwr <= 1e-6 && dmr <= 1e-6 && dur <= 1e-6);
            lw_device_free(gpu, dw), lw_device_free(gpu, dg), lw_device_free(gpu, dm);
            lw_device_free(gpu, du);
            free(w), free(g), free(m), free(u), free(hw), free(hm), free(hu);
            lw_muon_free(mc), lw_muon_free(mg);
        }
}

/* On a single vector (1 x q or q x 1) Newton-Schulz is a scalar recursion on its norm s, which
 * normalisation makes 1: s -> a s + b s^3 + c s^5 per step, the vector's direction unchanged.
 * Its result F(s) is as sensitive to s as |d ln F / d ln s| at s = 1 says, and for some
 * coefficient sets that is large: cubic5's first step leaves a + b = 0.0236 of s = 1 with slope
 * a + 3b = -6.66, a relative slope of ~ -280 (~235 over its five steps). The GPU and the CPU sum
 * the q squares of the norm and of X X^T in other orders: the two s differ by up to (q + 4) u
 * relative (u = 2^-24: q - 1 additions, a square, the scale's division and its square), which
 * the recursion multiplies by that slope.
 * The slope is measured here on the CPU's own Newton-Schulz: an input whose norm is just below
 * the normalisation floor eps is divided by eps instead of its norm, starting the recursion at s
 * = 1 - delta; the results at 1 and at 1 - delta give d ln F / d ln s (delta 1e-4 keeps the
 * secant within 0.1% of the tangent while F moves far more than its rounding). */
static double vector_slope(lw_ns_coeffs coeffs, const float *u, int q) {
    const double delta = 1e-4;
    double norm = 0;
    for (int i = 0; i < q; i++)
        norm += (double)u[i] * u[i];
    norm = sqrt(norm);
    float *at1 = malloc(4 * (size_t)q), *below = malloc(4 * (size_t)q);
    lw_muon_options o = lw_muon_defaults();
    o.coeffs = coeffs;
    lw_muon *m = NULL;
    CHECK_OK(lw_muon_new(&o, &m));
    CHECK_OK(lw_muon_orthogonalize(m, NULL, u, at1, 1, q));
    lw_muon_free(m);
    o.eps = (float)(norm / (1.0 - delta));
    CHECK_OK(lw_muon_new(&o, &m));
    CHECK_OK(lw_muon_orthogonalize(m, NULL, u, below, 1, q));
    lw_muon_free(m);
    double f1 = 0, fd = 0;
    for (int i = 0; i < q; i++)
        f1 += (double)at1[i] * at1[i], fd += (double)below[i] * below[i];
    free(at1), free(below);
    return fabs(0.5 * log(f1 / fd) / -log1p(-delta));
}

/* Newton-Schulz against the CPU's fp32 result, ||GPU - CPU||_F / ||CPU||_F:
 *   fp32: cuBLAS sums in another order than OpenBLAS (and SYRK/SYMM there, perhaps GEMMs here);
 *     float rounding, amplified by the iteration's slope near 0 (up to ~4 per step): 1e-5; for a
 *     single vector, whose result can hang on the rounding of its norm, the slope measured above
 *     times (q + 4) u, when that is more.
 *   tf32: tensor cores round the inputs of each product to 10 bits of mantissa (2^-11 relative),
 *     five steps of three products each: 1e-2.
 *   bf16: 8 bits of mantissa (2^-9 relative, 4x coarser than tf32) for X, A, B and each
 *     product's inputs: 3e-2.
 * And the arithmetic asked for must be the one done: bf16 and fp32 on the GPU differ. */
static void test_orthogonalize(void) {
    const int shapes[][2] = {{64, 256}, {256, 64}, {128, 128}, {1, 37}, {300, 7}, {37, 1}};
    const lw_ns_coeffs sets[] = {LW_NS_QUINTIC, LW_NS_CUBIC5, LW_NS_IDENTITY};
    const lw_ns_precision precisions[] = {LW_NS_FP32, LW_NS_TF32, LW_NS_BF16};
    const double tolerance[] = {1e-5, 1e-2, 3e-2};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t c = 0; c < sizeof sets / sizeof sets[0]; c++) {
            const int r = shapes[s][0], k = shapes[s][1];
            const int64_t n = (int64_t)r * k;
            float *u = host_random(n), *ref = malloc(4 * (size_t)n);
            float *got[3] = {malloc(4 * (size_t)n), malloc(4 * (size_t)n), malloc(4 * (size_t)n)};
            float *du = upload(u, 4 * n), *dx = NULL;
            CHECK_OK(lw_device_alloc(gpu, 4 * n, (void **)&dx));
            lw_muon_options o = lw_muon_defaults();
            o.coeffs = sets[c];
            lw_muon *mc = NULL;
            CHECK_OK(lw_muon_new(&o, &mc));
            CHECK_OK(lw_muon_orthogonalize(mc, NULL, u, ref, r, k));
            double fp32_tol = tolerance[0];
            if ((r == 1 || k == 1) && sets[c] != LW_NS_IDENTITY) {
                const int q = r * k;
                const double slope = vector_slope(sets[c], u, q);
                fp32_tol = fmax(fp32_tol, slope * (q + 4) * 0x1p-24);
                printf("orthogonalize %dx%d %s: slope %.1f, fp32 tolerance %.2g\n", r, k,
                       lw_ns_coeffs_name(sets[c]), slope, fp32_tol);
            }
            for (int p = 0; p < 3; p++) {
                o.precision = precisions[p];
                for (int sym = 0; sym < 2; sym++) {
                    o.symmetric = sym;
                    lw_muon *mg = NULL;
                    CHECK_OK(lw_muon_new(&o, &mg));
                    CHECK_OK(lw_device_set(gs, dx, 0, 4 * n));
                    CHECK_OK(lw_muon_orthogonalize(mg, gs, du, dx, r, k));
                    download(got[p], dx, 4 * n);
                    double d = rel_frobenius(got[p], ref, n);
                    bool ok = sets[c] == LW_NS_IDENTITY ? memcmp(got[p], u, 4 * (size_t)n) == 0
                                                        : d <= (p == 0 ? fp32_tol : tolerance[p]);
                    if (!ok)
                        fprintf(stderr, "orthogonalize %dx%d %s %s %s: relative error %g\n", r, k,
                                lw_ns_coeffs_name(sets[c]), lw_ns_precision_name(precisions[p]),
                                sym ? "symmetric" : "full GEMMs", d);
                    CHECK(ok);
                    lw_muon_free(mg);
                }
            }
            if (sets[c] != LW_NS_IDENTITY && n >= 64 * 64) {
                double d = rel_frobenius(got[2], got[0], n);
                if (!(d > 1e-6)) fprintf(stderr, "bf16 == fp32 at %dx%d: %g\n", r, k, d);
                CHECK(d > 1e-6);
            }
            /* in place (x = u) gives the same */
            o.precision = LW_NS_FP32;
            o.symmetric = true;
            lw_muon *mg = NULL;
            CHECK_OK(lw_muon_new(&o, &mg));
            CHECK_OK(lw_muon_orthogonalize(mg, gs, du, du, r, k));
            download(got[1], du, 4 * n);
            CHECK(rel_frobenius(got[1], ref, n) <= fp32_tol);
            lw_muon_free(mg), lw_muon_free(mc);
            lw_device_free(gpu, du), lw_device_free(gpu, dx);
            free(u), free(ref), free(got[0]), free(got[1]), free(got[2]);
        }
}

/* The whole update, twice, fp32: w moves by lr * scale * X, so its difference is X's (1e-5
 * relative) times lr * scale; the momentum is element-wise (a few ulps). */
static void test_muon_update(void) {
    const int shapes[][2] = {{96, 160}, {160, 96}, {50, 50}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int r = shapes[s][0], k = shapes[s][1];
        const int64_t n = (int64_t)r * k;
        lw_muon_options o = lw_muon_defaults();
        o.precision = LW_NS_FP32;
        lw_muon *mc = NULL, *mg = NULL;
        CHECK_OK(lw_muon_new(&o, &mc));
        CHECK_OK(lw_muon_new(&o, &mg));
        float *w = host_random(n), *g = host_random(n), *m = calloc((size_t)n, 4);
        float *hw = malloc(4 * (size_t)n), *hm = malloc(4 * (size_t)n), *hg = malloc(4 * (size_t)n);
        float *dw = upload(w, 4 * n), *dg = upload(g, 4 * n), *dm = upload(m, 4 * n);
        for (int step = 0; step < 2; step++) {
            CHECK_OK(lw_muon_update(mc, NULL, w, g, m, r, k, 0.02f, 0.1f, 0.8f));
            CHECK_OK(lw_muon_update(mg, gs, dw, dg, dm, r, k, 0.02f, 0.1f, 0.8f));
        }
        download(hw, dw, 4 * n), download(hm, dm, 4 * n), download(hg, dg, 4 * n);
        double dw_abs = 0;
        for (int64_t i = 0; i < n; i++)
            dw_abs = fmax(dw_abs, fabs((double)hw[i] - w[i]));
        CHECK(dw_abs <= 1e-5);
        CHECK(max_rel(hm, m, n, 1e-3) <= 1e-6);
        CHECK(memcmp(hg, g, 4 * (size_t)n) == 0); /* g is not modified */
        lw_device_free(gpu, dw), lw_device_free(gpu, dg), lw_device_free(gpu, dm);
        free(w), free(g), free(m), free(hw), free(hm), free(hg);
        lw_muon_free(mc), lw_muon_free(mg);
    }
}

/* ---- AdamW --------------------------------------------------------------------------------- */

/* Five steps with new gradients each: per element a handful of float operations, a sqrt and a
 * division (correctly rounded on both unless fast math) and the bias corrections, which the
 * caller computes in double and either side may round at another point: a few ulps per step,
 * compounding over the steps in m, v and w. */
static void test_adamw(void) {
    const int64_t sizes[] = {1, 100003};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const int64_t n = sizes[k];
        lw_adamw_options o = lw_adamw_defaults();
        float *w = host_random(n), *m = calloc((size_t)n, 4), *v = calloc((size_t)n, 4);
        float *hw = malloc(4 * (size_t)n), *hm = malloc(4 * (size_t)n), *hv = malloc(4 * (size_t)n);
        float *dw = upload(w, 4 * n), *dm = upload(m, 4 * n), *dv = upload(v, 4 * n);
        float *dg = NULL;
        CHECK_OK(lw_device_alloc(gpu, 4 * n, (void **)&dg));
        for (int64_t t = 1; t <= 5; t++) {
            float *g = host_random(n);
            CHECK_OK(lw_device_copy(gs, dg, g, 4 * n, LW_COPY_HOST_TO_DEVICE));
            CHECK_OK(lw_adamw_update(NULL, &o, w, g, m, v, n, t, 0.01f, 0.1f, 0.7f));
            CHECK_OK(lw_adamw_update(gs, &o, dw, dg, dm, dv, n, t, 0.01f, 0.1f, 0.7f));
            free(g);
        }
        download(hw, dw, 4 * n), download(hm, dm, 4 * n), download(hv, dv, 4 * n);
        double ew = max_rel(hw, w, n, 1.0), em = max_rel(hm, m, n, 1e-3);
        double ev = max_rel(hv, v, n, 1e-6);
        if (ew > 1e-6 || em > 1e-5 || ev > 1e-5)
            fprintf(stderr, "adamw n %lld: w %g m %g v %g\n", (long long)n, ew, em, ev);
        CHECK(ew <= 1e-6 && em <= 1e-5 && ev <= 1e-5);
        lw_device_free(gpu, dw), lw_device_free(gpu, dm), lw_device_free(gpu, dv);
        lw_device_free(gpu, dg);
        free(w), free(m), free(v), free(hw), free(hm), free(hv);
    }
}

/* ---- the optimizer on GPU buffers ----------------------------------------------------------- */

/* Several matrices of each shape, so that a GPU batches their Newton-Schulz; AdamW vectors and a
 * shared embedding. */
enum { N_PARAMS = 14, STEPS = 3 };
static lw_param_spec specs[N_PARAMS];

static void make_specs(void) {
    static const char *names[N_PARAMS] = {"emb",  "a0",  "a1",  "a2",   "a3",   "b0",  "b1",
                                          "b2",   "sq0", "sq1", "bias", "gain", "tall", "head"};
    specs[0] = mat(names[0], 64, 32, false);
    specs[0].shared_embedding = true;
    for (int i = 1; i <= 4; i++)
        specs[i] = mat(names[i], 32, 96, true); /* wide x4 */
    for (int i = 5; i <= 7; i++)
        specs[i] = mat(names[i], 96, 32, true); /* tall x3 */
    specs[8] = mat(names[8], 48, 48, true);
    specs[9] = mat(names[9], 48, 48, true);
    specs[10] = vec(names[10], 96);
    specs[11] = vec(names[11], 32);
    specs[12] = mat(names[12], 130, 7, true);
    specs[13] = mat(names[13], 10, 32, false);
}

/* The initial weights (step -1), then each step's gradients, about 1 in 13 elements zero. */
static void fill(void *ctx, int p, int step, float *host, int64_t n) {
    (void)ctx;
    for (int64_t i = 0; i < n; i++) {
        if (step < 0)
            host[i] = smooth_init(p, i);
        else
            host[i] =
                i % 13 == 5 ? 0.0f : (float)cos(0.3 * p + 0.11 * (double)i + step) + 0.01f * p;
    }
}

typedef struct run_options {
    const char *name;
    lw_algorithm muon;
    int zero;
    int64_t bucket_size;
    bool overlap;
} run_options;

typedef struct run_result {
    float *params[N_PARAMS]; /* [owned] host copies after the steps */
    double norms[STEPS];
    int64_t zeros[STEPS];
    int32_t n_state;
    float *state_m[2 * N_PARAMS], *state_v[2 * N_PARAMS]; /* [owned] host copies */
    int64_t state_count[2 * N_PARAMS];
    bool ok;
} run_result;

/* n floats of the buffers' device d back into host memory, after its work. */
static void to_host(lw_device *d, float *dst, const float *src, int64_t n) {
    CHECK_OK(lw_stream_synchronize(lw_device_stream(d)));
    CHECK_OK(lw_device_copy(lw_device_stream(d), dst, src, 4 * n, LW_COPY_DEVICE_TO_HOST));
}

/* STEPS optimizer steps on device d's buffers over comm, parameters and gradients written and
 * read the way modules reach them (acquire, view, release). */
static void run_steps(lw_device *d, lw_comm *comm, const run_options *ro, run_result *out) {
    memset(out, 0, sizeof *out);
    lw_buffers_options bo = lw_buffers_defaults();
    bo.device = d;
    bo.zero = ro->zero;
    bo.overlap_grad = bo.overlap_param = ro->overlap;
    lw_optimizer_options oo = lw_optimizer_defaults();
    oo.muon.precision = LW_NS_FP32;
    oo.clip = 5.0f;
    rig r;
    lw_layout *l = make_layout(specs, N_PARAMS, 1, ro->bucket_size, ro->muon, LW_ALGORITHM_DISTOPT);
    if (!rig_new(&r, l, specs, N_PARAMS, comm, &bo, &oo)) {
        rig_free(&r);
        return;
    }
    const float lr[2] = {0.02f, 0.01f}, wd[2] = {0.1f, 0.05f};
    rig_groups(&r, lr, wd);
    rig_write_params(&r, fill, NULL);
    lw_step_result res[STEPS];
    rig_steps(&r, STEPS, fill, NULL, res);
    for (int step = 0; step < STEPS; step++) {
        CHECK(!res[step].skipped);
        out->norms[step] = res[step].grad_norm;
        out->zeros[step] = res[step].zeros;
    }
    for (int p = 0; p < N_PARAMS; p++)
        out->params[p] = calloc((size_t)spec_numel(&specs[p]), 4);
    rig_read_params(&r, out->params);
    out->n_state = lw_optimizer_state_count(r.opt);
    for (int32_t k = 0; k < out->n_state && k < 2 * N_PARAMS; k++) {
        lw_state_entry e;
        CHECK_OK(lw_optimizer_state(r.opt, k, &e));
        out->state_count[k] = e.count;
        out->state_m[k] = calloc((size_t)e.count + 1, 4);
        to_host(d, out->state_m[k], e.m, e.count);
        if (e.v != NULL) {
            out->state_v[k] = calloc((size_t)e.count + 1, 4);
            to_host(d, out->state_v[k], e.v, e.count);
        }
    }
    out->ok = true;
    rig_free(&r);
}

static void free_result(run_result *r) {
    for (int p = 0; p < N_PARAMS; p++)
        free(r->params[p]);
    for (int k = 0; k < 2 * N_PARAMS; k++)
        free(r->state_m[k]), free(r->state_v[k]);
}

/* The layer-wise step on GPU buffers (Newton-Schulz batched by shape, multi-tensor AdamW, the
 * NCCL communicator's collectives on one rank) against the same steps on the CPU: within 1e-5,
 * as tests/test_optimizer.c holds the CPU to its reference (fp32 Newton-Schulz differs in the
 * order of its sums, 1e-5 relative; the element-wise kernels in a few ulps). */
static void test_optimizer_on_gpu(void) {
    make_specs();
    lw_comm *self = NULL;
    CHECK_OK(lw_comm_self(&self));
    lw_comm *dc = comm_on(gpu, self);
    if (dc == NULL) {
        lw_comm_free(self);
        return;
    }
    CHECK(lw_comm_reaches(dc, gpu));
    CHECK(lw_comm_reaches(dc, lw_device_cpu()));
    CHECK_EQ(lw_comm_size(dc), 1);
    CHECK_EQ(lw_comm_rank(dc), 0);
    const run_options runs[] = {
        {"ZeRO-1, one bucket", LW_ALGORITHM_COST, 1, INT64_MAX, false},
        {"ZeRO-1, buckets, overlap", LW_ALGORITHM_COST, 1, 4096, true},
        {"ZeRO-2", LW_ALGORITHM_LPT, 2, 4096, true},
        {"ZeRO-3", LW_ALGORITHM_COST, 3, 4096, true},
        {"ZeRO-3 row-sharded", LW_ALGORITHM_ROWS, 3, 4096, true},
    };
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        int before = check_failures;
        run_result cpu, dev;
        run_steps(lw_device_cpu(), self, &runs[k], &cpu);
        run_steps(gpu, dc, &runs[k], &dev);
        double worst = 0, worst_state = 0;
        if (cpu.ok && dev.ok) {
            for (int s = 0; s < STEPS; s++) {
                CHECK(fabs(dev.norms[s] - cpu.norms[s]) <= 1e-6 * cpu.norms[s]);
                CHECK_EQ(dev.zeros[s], cpu.zeros[s]);
                CHECK(cpu.zeros[s] > 0);
            }
            for (int p = 0; p < N_PARAMS; p++)
                for (int64_t i = 0; i < spec_numel(&specs[p]); i++)
                    worst = fmax(worst, fabs((double)dev.params[p][i] - cpu.params[p][i]));
            CHECK_EQ(dev.n_state, cpu.n_state);
            for (int32_t e = 0; e < cpu.n_state && e < dev.n_state && e < 2 * N_PARAMS; e++) {
                CHECK_EQ(dev.state_count[e], cpu.state_count[e]);
                if (dev.state_count[e] != cpu.state_count[e]) continue;
                worst_state = fmax(worst_state, max_rel(dev.state_m[e], cpu.state_m[e],
                                                        cpu.state_count[e], 1e-2));
                if (cpu.state_v[e] != NULL && dev.state_v[e] != NULL)
                    worst_state = fmax(worst_state, max_rel(dev.state_v[e], cpu.state_v[e],
                                                            cpu.state_count[e], 1e-4));
                CHECK((cpu.state_v[e] == NULL) == (dev.state_v[e] == NULL));
            }
            /* the parameters moved, so agreeing says something */
            CHECK(fabs(cpu.params[1][0] - smooth_init(1, 0)) > 1e-4);
        }
        CHECK(worst <= 1e-5);
        CHECK(worst_state <= 1e-5);
        if (check_failures != before)
            fprintf(stderr, "optimizer on the GPU, %s: failed (params max diff %g, state %g)\n",
                    runs[k].name, worst, worst_state);
        free_result(&cpu), free_result(&dev);
    }
    lw_comm_free(dc);
    lw_comm_free(self);
}

int main(void) {
    const int skip_or_fail = cuda_open("test_cuda");
    if (skip_or_fail != 0) return skip_or_fail;
    test_device_and_info();
    test_memory();
    test_streams_and_events();
    test_norm_stats();
    test_all_finite();
    test_scale_add_axpy();
    test_muon_momentum();
    test_orthogonalize();
    test_muon_update();
    test_adamw();
    test_optimizer_on_gpu();
    return check_exit("test_cuda");
}
