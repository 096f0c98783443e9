/* test_master.c: bf16 parameters with fp32 master weights against fp32 parameters, at whatever
 * rank count it is started with (ctest: alone, mpirun -np 2, -np 3). Both runs start from the
 * same weights (values bf16 holds exactly) and get the same gradients, so the optimizer does the
 * same arithmetic on the bf16 run's master copies as on the fp32 run's parameters: after every
 * step each master copy must equal the fp32 run's owned elements bit for bit, and every bf16
 * parameter the reference rounding (nearest even) of the fp32 run's, for every layout, ZeRO
 * level, the row-sharded, legacy and replicated modes, with micro-steps and with parameters
 * written after the optimizer was made (which it must widen into its master copies again). The
 * bf16 arrays and the all-gathers' bytes are half the fp32 ones. With bf16 gradient sums each
 * owned gradient is the bf16 sum of the ranks' averaged gradients rounded to bf16: exactly at 1
 * and 2 ranks, within the bound of p - 1 roundings beyond, and the sums move half the bytes.
 * The parameters as stored (lw_buffers_param_stored, which the model kernels that take a
 * weight's dtype read) are those bf16 roundings, read before any view widens them, and below
 * ZeRO-3 reading them so takes no block of fp32 views.
 * With LWOPT_TEST_REQUIRE=cuda (ctest test_master_gpu, label gpu) the same on the GPU, one rank,
 * skipped (exit 77) without one. */
#include "bf16_reference.h"
#include "optim_util.h"

#include <math.h>
#include <stdlib.h>

enum { N_SPECS = 7, STEPS = 3 };
static lw_param_spec specs[N_SPECS], specs_bf16[N_SPECS], specs_grad16[N_SPECS];

static void make_specs(void) {
    specs[0] = mat("emb", 40, 16, false);
    specs[1] = mat("l0.w", 48, 16, true);
    specs[2] = vec("l0.b", 48);
    specs[3] = mat("l0.o", 16, 48, true);
    specs[4] = vec("ln", 16);
    specs[5] = mat("l1.w", 24, 16, true);
    specs[6] = mat("head", 10, 16, false);
    for (int p = 0; p < N_SPECS; p++) {
        specs_bf16[p] = specs[p];
        specs_bf16[p].dtype = LW_DTYPE_BF16;
        specs_grad16[p] = specs[p];
        specs_grad16[p].grad_dtype = LW_DTYPE_BF16;
    }
}

/* Initial weights bf16 holds exactly (so both runs start equal); gradients that differ by rank
 * and step. */
static void fill(void *ctx, int p, int step, float *host, int64_t n) {
    const int rank = *(const int *)ctx;
    for (int64_t i = 0; i < n; i++)
        host[i] = step < 0 ? bf16_reference_value(bf16_reference(smooth_init(p, i)))
                           : (float)cos(0.3 * p + 0.11 * (double)i + step + 0.5 * rank);
}

typedef struct variant {
    const char *name;
    lw_algorithm muon;
    lw_algorithm adamw;
    int64_t bucket_size;
    int zero;
} variant;

static const float LR[2] = {0.02f, 0.01f}, WD[2] = {0.1f, 0.05f};

/* Where the rigs run: the CPU, or a GPU with LWOPT_TEST_REQUIRE=cuda. */
static lw_device *device;

/* n floats of the rigs' device memory at src, copied to a new host array (free it). */
static float *host_copy(const void *src, int64_t n) {
    float *h = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    lw_stream *s = lw_device_stream(device);
    CHECK_OK(lw_stream_synchronize(s));
    CHECK_OK(lw_device_copy(s, h, src, (int64_t)sizeof(float) * n, LW_COPY_DEVICE_TO_HOST));
    return h;
}

/* Every master copy of r (bf16) equals the owned elements of fp32 (the fp32 rig) bit for bit. */
static int64_t masters_differ(rig *bf, rig *fp) {
    int64_t differ = 0;
    lw_state_entry e;
    for (int32_t k = 0; k < lw_optimizer_state_count(bf->opt); k++) {
        CHECK_OK(lw_optimizer_state(bf->opt, k, &e));
        void *w = NULL;
        CHECK_OK(lw_buffers_owned_param(fp->buffers, e.param, &w));
        CHECK(e.master != NULL);
        if (e.master == NULL || w == NULL) return 1;
        float *master = host_copy(e.master, e.count), *fp32 = host_copy(w, e.count);
        differ += memcmp(master, fp32, sizeof(float) * (size_t)e.count) != 0;
        free(master), free(fp32);
    }
    return differ;
}

/* Parameters as stored (lw_buffers_param_stored), read before any fp32 view of them since the
 * last sync: the bf16 rig's are the reference rounding of fp32's (want: the fp32 rig's values),
 * bit for bit; the fp32 rig's are its views, dtype f32. Returns the elements that differ. */
static int64_t stored_differ(rig *bf, rig *fp, float *const *want) {
    lw_stream *s = lw_device_stream(device);
    int64_t wrong = 0;
    CHECK_OK(lw_buffers_finish_param_sync(bf->buffers, -1));
    const void *none = NULL;
    lw_dtype none_dtype;
    CHECK_FAILS(lw_buffers_param_stored(bf->buffers, 0, NULL, &none_dtype), LW_ERR_INVALID,
                "NULL output");
    if (lw_buffers_zero(bf->buffers) < 3) /* the sync dropped every group's block */
        CHECK_FAILS(lw_buffers_param_stored(bf->buffers, 1, &none, &none_dtype), LW_ERR_STATE,
                    "acquire the parameter first");
    lw_buffers_memory before, now;
    CHECK_OK(lw_buffers_memory_get(bf->buffers, &before));
    for (int p = 0; p < N_SPECS; p++) {
        const int64_t n = spec_numel(&specs[p]);
        const void *bits = NULL, *data = NULL;
        float *view = NULL;
        lw_dtype dtype = LW_DTYPE_F64;
        CHECK_OK(lw_buffers_acquire(bf->buffers, p, LW_PASS_FORWARD, true));
        CHECK_OK(lw_buffers_param_stored(bf->buffers, p, &bits, &dtype));
        CHECK_EQ(dtype, LW_DTYPE_BF16);
        CHECK_OK(lw_buffers_memory_get(bf->buffers, &now));
        if (lw_buffers_zero(bf->buffers) < 3) /* read as stored: no block of fp32 views taken */
            CHECK_EQ(now.params, before.params);
        uint16_t *got = malloc(sizeof(uint16_t) * (size_t)n);
        CHECK_OK(lw_stream_synchronize(s));
        CHECK_OK(lw_device_copy(s, got, bits, 2 * n, LW_COPY_DEVICE_TO_HOST));
        for (int64_t i = 0; i < n; i++)
            wrong += got[i] != bf16_reference(want[p][i]);
        free(got);
        CHECK_OK(lw_buffers_release(bf->buffers, p));
        CHECK_OK(lw_buffers_acquire(fp->buffers, p, LW_PASS_FORWARD, true));
        CHECK_OK(lw_buffers_param_stored(fp->buffers, p, &data, &dtype));
        CHECK_OK(lw_buffers_param(fp->buffers, p, &view));
        CHECK(dtype == LW_DTYPE_F32 && data == (const void *)view);
        CHECK_OK(lw_buffers_release(fp->buffers, p));
    }
    return wrong;
}

static void run_variant(lw_comm *c, const variant *v) {
    int rank = lw_comm_rank(c);
    const int size = lw_comm_size(c), before = check_failures;
    lw_buffers_options bo = lw_buffers_defaults();
    bo.zero = v->zero;
    bo.device = device;
    rig fp, bf;
    bool ok = rig_new(&fp, make_layout(specs, N_SPECS, size, v->bucket_size, v->muon, v->adamw),
                      specs, N_SPECS, c, &bo, NULL);
    ok = rig_new(&bf, make_layout(specs_bf16, N_SPECS, size, v->bucket_size, v->muon, v->adamw),
                 specs_bf16, N_SPECS, c, &bo, NULL) && ok;
    if (!ok) {
        rig_free(&fp), rig_free(&bf);
        return;
    }
    CHECK_EQ(lw_buffers_param_dtype(bf.buffers), LW_DTYPE_BF16);
    rig_groups(&fp, LR, WD);
    rig_groups(&bf, LR, WD);
    /* written after the optimizers were made: the bf16 one widens them at its first step */
    rig_write_params(&fp, fill, &rank);
    rig_write_params(&bf, fill, &rank);
    lw_step_result rf[STEPS], rb[STEPS];
    int64_t gathered[2] = {0, 0}; /* bytes the parameter syncs moved: fp32, bf16 */
    for (int step = 0; step < STEPS; step++) {
        rig *runs[2] = {&fp, &bf};
        lw_step_result *res[2] = {&rf[step], &rb[step]};
        for (int k = 0; k < 2; k++) {
            lw_comm_counter gather, gatherv;
            lw_comm_counters_reset(c);
            rig_steps(runs[k], 1, fill, &rank, res[k]);
            CHECK_OK(lw_buffers_finish_param_sync(runs[k]->buffers, -1));
            CHECK_OK(lw_comm_counter_get(c, LW_COMM_ALLGATHER, &gather));
            CHECK_OK(lw_comm_counter_get(c, LW_COMM_ALLGATHERV, &gatherv));
            gathered[k] += gather.bytes + gatherv.bytes;
        }
        CHECK(rf[step].grad_norm == rb[step].grad_norm);
        CHECK_EQ(masters_differ(&bf, &fp), 0);
    }
    /* every bf16 parameter (as the model reads it, widened) is the fp32 one rounded */
    float *wf[N_SPECS], *wb[N_SPECS];
    for (int p = 0; p < N_SPECS; p++) {
        wf[p] = calloc((size_t)spec_numel(&specs[p]), sizeof(float));
        wb[p] = calloc((size_t)spec_numel(&specs[p]), sizeof(float));
    }
    rig_read_params(&fp, wf);
    CHECK_EQ(stored_differ(&bf, &fp, wf), 0);
    rig_read_params(&bf, wb);
    int64_t wrong = 0;
    for (int p = 0; p < N_SPECS; p++) {
        for (int64_t i = 0; i < spec_numel(&specs[p]); i++)
            wrong += f32_bits(wb[p][i]) !=
                     f32_bits((float)bf16_reference_value(bf16_reference(wf[p][i])));
        free(wf[p]), free(wb[p]);
    }
    CHECK_EQ(wrong, 0);
    CHECK(identical_across_ranks(c, bf.buffers, specs_bf16, N_SPECS));
    /* half the parameter arrays (the gradients stay fp32) and half the gathers' bytes */
    lw_buffers_memory mf, mb;
    CHECK_OK(lw_buffers_memory_get(fp.buffers, &mf));
    CHECK_OK(lw_buffers_memory_get(bf.buffers, &mb));
    if (v->zero < 3) CHECK_EQ(2 * (mf.arrays - mb.arrays), mf.params);
    CHECK(mb.arrays < mf.arrays);
    /* (row-sharded Muon also gathers its fp32 updates, in both runs) */
    if (size > 1 && v->muon != LW_ALGORITHM_ROWS) CHECK_EQ(2 * gathered[1], gathered[0]);
    if (check_failures != before)
        fprintf(stderr, "rank %d: variant %s, zero %d, failed\n", rank, v->name, v->zero);
    rig_free(&fp);
    rig_free(&bf);
}

/* bf16 rounded as a double (the reference's). */
static double bf16_round(double x) { return bf16_reference_value(bf16_reference((float)x)); }

/* bf16 gradient sums: after one backward and the gradient sync, every owned gradient element
 * against the sum of the ranks' averaged gradients each rounded to bf16: exactly that sum
 * rounded at 1 and 2 ranks (one rounding), within p - 1 roundings' bound beyond. */
static void run_grad_variant(lw_comm *c, const variant *v) {
    int rank = lw_comm_rank(c);
    const int size = lw_comm_size(c), before = check_failures;
    lw_buffers_options bo = lw_buffers_defaults();
    bo.zero = v->zero;
    bo.device = device;
    rig r;
    if (!rig_new(&r, make_layout(specs_grad16, N_SPECS, size, v->bucket_size, v->muon, v->adamw),
                 specs_grad16, N_SPECS, c, &bo, NULL)) {
        rig_free(&r);
        return;
    }
    CHECK_EQ(lw_buffers_grad_dtype(r.buffers), LW_DTYPE_BF16);
    rig_write_params(&r, fill, &rank);
    CHECK_OK(lw_buffers_zero_grad(r.buffers));
    rig_forward(&r);
    lw_comm_counters_reset(c);
    rig_backward(&r, 0, fill, &rank);
    CHECK_OK(lw_buffers_finish_grad_sync(r.buffers));
    lw_comm_counter sums[2];
    CHECK_OK(lw_comm_counter_get(c, LW_COMM_REDUCE_SCATTER, &sums[0]));
    CHECK_OK(lw_comm_counter_get(c, LW_COMM_ALLREDUCE, &sums[1]));
    int64_t total = 0, bytes = sums[0].bytes + sums[1].bytes, wrong = 0;
    const double u = ldexp(1.0, -8), gamma = (size - 1) * u / (1 - (size - 1) * u);
    for (int p = 0; p < N_SPECS; p++) {
        int64_t start, count;
        float *g = NULL;
        CHECK_OK(lw_buffers_owned(r.buffers, p, &start, &count));
        CHECK_OK(lw_buffers_owned_grad(r.buffers, p, &g));
        g = count > 0 ? host_copy(g, count) : NULL;
        total += spec_numel(&specs[p]);
        float *h = malloc(sizeof(float) * (size_t)spec_numel(&specs[p]));
        for (int64_t i = start; i < start + count; i++) {
            double sum = 0, magnitude = 0;
            for (int k = 0; k < size; k++) {
                fill(&k, p, 0, h, spec_numel(&specs[p]));
                const double part = bf16_round(h[i] * (1.0f / (float)size));
                sum += part, magnitude += fabs(part);
            }
            const double got = g[i - start];
            wrong += size <= 2 ? got != bf16_round(sum) : fabs(got - sum) > gamma * magnitude;
        }
        free(h), free(g);
    }
    CHECK_EQ(wrong, 0);
    /* bf16 on the wire: 2 bytes an element of each group's sum (every element once) */
    if (size > 1 && v->muon != LW_ALGORITHM_ROWS) CHECK(bytes <= 2 * total * 2);
    if (check_failures != before)
        fprintf(stderr, "rank %d: bf16 gradients, variant %s, zero %d, failed\n", rank, v->name,
                v->zero);
    rig_free(&r);
}

int main(void) {
    lw_comm *world = NULL, *c = NULL;
    CHECK_OK(lw_comm_init(&world));
    if (world == NULL) return check_exit("test_master");
    device = lw_device_cpu();
    const char *require = getenv("LWOPT_TEST_REQUIRE");
    if (require != NULL && strcmp(require, "cuda") == 0) {
        if (lw_device_get("cuda", &device) != LW_OK) {
            const bool absent = strstr(lw_last_error(), "CUDA is not available") != NULL;
            printf("test_master: %s: %s\n", absent ? "skipped" : "failed", lw_last_error());
            lw_comm_free(world);
            return absent ? 77 : 1;
        }
    }
    c = comm_on(device, world);
    if (c == NULL) return check_exit("test_master");
    make_specs();
    for (int zero = 1; zero <= 3; zero++) {
        const variant v[] = {
            {"cost", LW_ALGORITHM_COST, LW_ALGORITHM_DISTOPT, 1500, zero},
            {"lpt whole", LW_ALGORITHM_LPT, LW_ALGORITHM_DISTOPT, INT64_MAX, zero},
            {"packed", LW_ALGORITHM_PACKED, LW_ALGORITHM_DISTOPT, 1500, zero},
            {"rows", LW_ALGORITHM_ROWS, LW_ALGORITHM_DISTOPT, 1500, zero},
        };
        for (size_t k = 0; k < sizeof v / sizeof v[0]; k++)
            if (zero == 3 || v[k].muon != LW_ALGORITHM_ROWS) {
                run_variant(c, &v[k]);
                run_grad_variant(c, &v[k]);
            }
    }
    const variant legacy = {"legacy", LW_ALGORITHM_LEGACY, LW_ALGORITHM_LEGACY, 1500, 1};
    const variant replicated = {"replicated", LW_ALGORITHM_DEFAULT, LW_ALGORITHM_DEFAULT, 1500, 1};
    run_variant(c, &legacy);
    run_variant(c, &replicated);
    run_grad_variant(c, &legacy);
    run_grad_variant(c, &replicated);
    if (c != world) lw_comm_free(c);
    lw_comm_free(world);
    return check_exit("test_master");
}
