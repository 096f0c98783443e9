/* test_cuda.c: what the CUDA device is besides its kernels, against the CPU (the reference) on the
 * same seeded inputs, each with its tolerance and the reason for it: memory, streams and events,
 * the device's info, a whole Muon update, and the layer-wise optimizer on GPU buffers (batched
 * Newton-Schulz, ZeRO-1/2/3, row sharding) against the same steps on the CPU. Every kernel of the
 * list, the vectors', Muon's and AdamW's among them, is in tests/kernels/. Exit 77
 * (skipped) when CUDA is not available; a GPU that is there and gives a wrong answer, or a CUDA
 * library that is broken, fails. */
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

/* ---- Muon ---------------------------------------------------------------------------------- */

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
        to_host(d, out->state_m[k], e.parts[0], e.count);
        if (e.n_parts > 1) {
            out->state_v[k] = calloc((size_t)e.count + 1, 4);
            to_host(d, out->state_v[k], e.parts[1], e.count);
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
    test_muon_update();
    test_optimizer_on_gpu();
    return check_exit("test_cuda");
}
