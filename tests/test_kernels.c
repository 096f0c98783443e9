/* test_kernels.c: every kernel of the device table's list (src/core/device/kernel_list.h) on every
 * device the build has, against the CPU's: the CPU always, the device behind "cuda" when there is
 * one (a GPU, or the stand-in library that LWOPT_CUDA_LIB names: test_kernels_fake). The table of
 * cases is made from the list, so a kernel added there without a case_<name> here does not
 * compile. Each case runs its kernel on seeded shapes, edge cases among them (one row, rows
 * shorter than a tile, empty shapes, head dims 64 and 128, a shard of padding alone, NaN and inf
 * where the kernel promises to pass them on), through one driver:
 *   - on the CPU (the reference): two runs agree bit for bit, nothing is written past an output
 *     (guards around each), inputs are left as they were, outputs written whole (they start as
 *     NaN), accumulating outputs add onto what they held (a run from zeros, plus the start, is
 *     the run), no NaN unless the case feeds one, the precisions a GPU's GEMMs take (TF32, bf16)
 *     give fp32's bits, and an fp64 or host reference where one is a few lines;
 *   - on any other device: each output against the CPU's within the tolerance its case states
 *     and derives (per matmul precision: fp32, TF32, bf16), the same guards, inputs and two runs
 *     bit for bit; lwopt's own CUDA library must have every kernel, a stand-in's missing ones are
 *     reported skipped by name.
 * Shapes of a GPU's size (GPT-2 small's) are made where a GPU needs the CPU's results for them,
 * or with LWOPT_TEST_LARGE=1. The optimizers' kernels (LWI_CORE_KERNELS) are run through their
 * public calls, or named where they are tested. A GPU's own limits and refusals close the file.
 * Without a GPU the CPU still runs, so the test never skips, unless LWOPT_TEST_REQUIRE=cuda asks
 * for one (test_kernels_gpu, label gpu): then no CUDA is exit 77. */
#include "bf16_reference.h"
#include "cuda_util.h"
#include "device/kernel_list.h"

#include <stdarg.h>
#include <stdio.h>

/* ---- devices --------------------------------------------------------------------------------- */

/* The CPU, and the other device when there is one (gpu and gs, from cuda_util.h). A library that
 * LWOPT_CUDA_LIB names may be a stand-in with some kernels only (tests/device/fake_device.c, as
 * test_device_plugin takes it); lwopt's own CUDA library, found beside liblwopt.so, has them all
 * (its table is made from the same list). */
static lw_device *cpu;
static bool have_other, other_partial;

static bool on_cpu(lw_device *d) { return d == cpu; }
static bool have_gpu(void) { return have_other && !other_partial; }

/* ---- measures -------------------------------------------------------------------------------- *
 * How an output of a device is compared with the CPU's. The distance is 0 for equal values
 * (infinities of one sign too) and for NaN on both sides (a case that feeds a NaN expects one
 * back; the CPU's results are checked to hold none otherwise), NaN for a NaN on one side only (no
 * tolerance accepts it). */

typedef enum {
    BITS,      /* the same bits (their distance: floats' ulps apart, others' infinite) */
    RELATIVE,  /* |got - ref| / max(|ref|, floor, scale * the largest finite |ref|) */
    ABSOLUTE,  /* |got - ref| */
    FROBENIUS, /* ||got - ref||_F / ||ref||_F */
    STATS      /* a vocabulary shard's statistics (compare.h, partial_stats_close): maxima and
                  target logits RELATIVE at their scale, within tol; sums relative, within tol2 */
} measure_kind;

typedef struct {
    measure_kind kind;
    double tol, tol2;
    double floor, scale; /* RELATIVE */
    double differ;       /* > 0: a GEMM precision that ran must also be further than this */
} measure;

static measure bits(void) { return (measure){.kind = BITS}; }
static measure relative(double tol, double floor) {
    return (measure){.kind = RELATIVE, .tol = tol, .floor = floor};
}
/* relative where the values carry the result, absolute at 1% of the tensor's largest value for
 * the few that cancel to near 0 */
static measure scaled(double tol) {
    return (measure){.kind = RELATIVE, .tol = tol, .floor = 1e-30, .scale = 1e-2};
}
/* For GEMM results, max |got - ref| / max |ref|: an fp32 dot product of k terms is off by up to ~k
 * ulps of its terms' scale (cuBLAS adds an output's k products one after another), not of its
 * value, which can cancel to near 0. A simulation of that order against OpenBLAS-like blocked
 * sums on uniform inputs gives 1.1e-6 at k = 1024 and 1.4e-6 at k = 2304 on this measure (but
 * 4e-5 to 8e-5 when judged against 1% of the largest value): 1e-5 keeps a margin. */
static measure gemm(double tol) {
    return (measure){.kind = RELATIVE, .tol = tol, .floor = 1e-30, .scale = 1.0};
}
/* A log-sum-exp is a log: an absolute difference of tol in it is a relative tol in every
 * probability it gives, so it is judged absolutely below 1 (a row of one score that cancels to
 * near 0 would otherwise be measured against itself). */
static measure lse_measure(double tol) {
    return (measure){.kind = RELATIVE, .tol = tol, .floor = 1.0, .scale = 1e-2};
}
static measure absolute(double tol) { return (measure){.kind = ABSOLUTE, .tol = tol}; }
static measure frobenius(double tol) { return (measure){.kind = FROBENIUS, .tol = tol}; }
static measure stats_measure(double logits, double sums) {
    return (measure){.kind = STATS, .tol = logits, .tol2 = sums};
}
/* ... and must be further from the CPU's fp32 than `by`: the precision asked for reached the
 * GEMMs (only on shapes whose rounding the comments show to be that large) */
static measure differing(measure m, double by) {
    m.differ = by;
    return m;
}

/* BF16: bf16 values as their bits (lw_vec_to_bf16), compared as the 16-bit integers they are.
 * BF16V: a model kernel's bf16 output, compared by its values (widened), as fp32 outputs are. */
typedef enum { F32, I32, F64, BF16, BF16V } elem_type;

static bool bf16_type(elem_type t) { return t == BF16 || t == BF16V; }
static size_t elem_size(elem_type t) { return t == F64 ? 8 : bf16_type(t) ? 2 : 4; }

static double elem(elem_type t, const void *p, int64_t i) {
    return t == F32    ? ((const float *)p)[i]
           : t == I32  ? ((const int32_t *)p)[i]
           : t == BF16 ? ((const uint16_t *)p)[i]
           : t == BF16V ? bf16_reference_value(((const uint16_t *)p)[i])
                       : ((const double *)p)[i];
}

static double largest(elem_type t, const void *p, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(elem(t, p, i))) m = fmax(m, fabs(elem(t, p, i)));
    return m;
}

/* worst of compare_rel over [0, n), a NaN on both sides counting as equal */
static double worst_relative(elem_type t, const void *got, const void *ref, int64_t n,
                             double floor) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        const double g = elem(t, got, i), r = elem(t, ref, i);
        const double d = isnan(g) && isnan(r) ? 0.0 : compare_rel(g, r, floor);
        if (isnan(d)) return d;
        m = fmax(m, d);
    }
    return m;
}

/* The worst difference of got from ref under m (for STATS, the sums' in *second). */
static double distance(const measure *m, elem_type t, const void *got, const void *ref, int64_t n,
                       double *second) {
    double w = 0;
    switch (m->kind) {
    case BITS: /* in ulps, that a failure says how far; 0 and -0 are 1 apart here */
        for (int64_t i = 0; i < n; i++) {
            const double g = elem(t, got, i), r = elem(t, ref, i);
            if ((isnan(g) && isnan(r)) || memcmp(&g, &r, sizeof g) == 0) continue;
            const bool floats = t == F32 && !isnan(g) && !isnan(r);
            w = fmax(w, floats ? fmax((double)ulps((float)g, (float)r), 1.0) : INFINITY);
        }
        return w;
    case RELATIVE:
        return worst_relative(t, got, ref, n, fmax(m->floor, m->scale * largest(t, ref, n)));
    case ABSOLUTE:
        for (int64_t i = 0; i < n; i++) {
            const double g = elem(t, got, i), r = elem(t, ref, i);
            if ((isnan(g) && isnan(r)) || g == r) continue;
            if (isnan(g) || isnan(r)) return NAN;
            w = fmax(w, fabs(g - r));
        }
        return w;
    case FROBENIUS:
        return rel_frobenius(got, ref, n);
    case STATS: /* the measure test_nn_vocab_parallel checks on the CPU, padding alone too */
        return partial_stats_distance(got, ref, n / 3, second);
    }
    return NAN;
}

/* ---- runs ------------------------------------------------------------------------------------ *
 * A case's run function issues its kernel on r->s through the helpers below, which place every
 * buffer in the run's device memory; the driver then reads them all back, checks the guards and
 * the inputs, and keeps the outputs for comparison. */

enum { GUARD_BYTES = 256, MAX_BUFFERS = 24, MAX_RESULTS = 8 };

typedef enum {
    INPUT,       /* read only: must be left as it was */
    WRITTEN,     /* starts as NaN: every element must be written, none read first */
    UPDATED,     /* starts as given, read and rewritten (in place) */
    ACCUMULATED, /* starts as given, added onto (+=): from zeros in the accumulation check */
    SCRATCH      /* the kernel's workspace: starts as NaN, only its guards are checked */
} role;

typedef struct {
    const char *what;
    role role;
    elem_type type;
    int64_t n;
    char *alloc; /* device memory: GUARD_BYTES, n elements, GUARD_BYTES */
    void *start; /* host: the n elements it started with */
    void *got;   /* host: the n elements after the run */
    measure how;
} buffer;

typedef struct {
    const char *what;
    double value;
    measure how;
} result;

typedef struct run {
    lw_device *device;
    lw_stream *s;
    lw_matmul matmul;
    bool zeroed;  /* the accumulation check's run: ACCUMULATED buffers start at 0 */
    bool nan_fed; /* the case feeds NaN or inf on purpose */
    buffer b[MAX_BUFFERS];
    int nb;
    result res[MAX_RESULTS];
    int nres;
    lw_status st; /* the first failure */
    char error[512];
} run;

typedef void (*run_fn)(run *r, const void *args);

/* Every word of a guard: a NaN that no kernel computes (a double guard reads as a NaN too). */
static const uint32_t GUARD_WORD = 0x7fa5a5a5u;
/* What a BF16 output starts as: a signalling NaN, which lw_vec_to_bf16 never writes (its NaN are
 * quiet), so that an element left unwritten shows (cpu_checks). */
static const uint16_t BF16_UNWRITTEN = 0x7fa5u;

static void call(run *r, lw_status st) {
    if (st != LW_OK && r->st == LW_OK) {
        r->st = st;
        snprintf(r->error, sizeof r->error, "%s", lw_last_error());
    }
}

static void *place(run *r, const char *what, role kind, elem_type type, int64_t n,
                   const void *start) {
    if (r->nb == MAX_BUFFERS) {
        fprintf(stderr, "test_kernels: more than %d buffers in one run\n", MAX_BUFFERS);
        exit(1);
    }
    buffer *b = &r->b[r->nb++];
    const size_t es = elem_size(type), data = (size_t)n * es;
    const int64_t bytes = 2 * GUARD_BYTES + (int64_t)data;
    *b = (buffer){.what = what, .role = kind, .type = type, .n = n};
    b->start = malloc(data + es);
    b->got = malloc(data + es);
    if (start != NULL && !(kind == ACCUMULATED && r->zeroed))
        memcpy(b->start, start, data);
    else if (kind == ACCUMULATED || type == I32) /* from zeros; ids start at 0x7f7f7f7f */
        memset(b->start, kind == ACCUMULATED ? 0 : 0x7f, data);
    else
        for (int64_t i = 0; i < n; i++)
            type == F32    ? (void)(((float *)b->start)[i] = NAN)
            : bf16_type(type) ? (void)(((uint16_t *)b->start)[i] = BF16_UNWRITTEN)
                           : (void)(((double *)b->start)[i] = NAN);
    char *host = malloc((size_t)bytes);
    for (int64_t i = 0; i < GUARD_BYTES / 4; i++) {
        memcpy(host + 4 * i, &GUARD_WORD, 4);
        memcpy(host + GUARD_BYTES + data + 4 * i, &GUARD_WORD, 4);
    }
    memcpy(host + GUARD_BYTES, b->start, data);
    lw_status st = lw_device_alloc(r->device, bytes, (void **)&b->alloc);
    if (st == LW_OK) st = lw_device_copy(r->s, b->alloc, host, bytes, LW_COPY_HOST_TO_DEVICE);
    free(host);
    if (st != LW_OK) { /* a kernel would be handed a bad pointer: nothing sensible follows */
        fprintf(stderr, "test_kernels: %s: placing %s: %s\n", lw_device_name(r->device), what,
                lw_last_error());
        exit(1);
    }
    return b->alloc + GUARD_BYTES;
}

static const float *input(run *r, const float *host, int64_t n) {
    return place(r, "an input", INPUT, F32, n, host);
}
static const int32_t *input_ids(run *r, const int32_t *host, int64_t n) {
    return place(r, "an input", INPUT, I32, n, host);
}
static float *output(run *r, const char *what, int64_t n, measure how) {
    float *p = place(r, what, WRITTEN, F32, n, NULL);
    r->b[r->nb - 1].how = how;
    return p;
}
static int32_t *output_ids(run *r, const char *what, int64_t n) {
    int32_t *p = place(r, what, WRITTEN, I32, n, NULL);
    r->b[r->nb - 1].how = bits();
    return p;
}
static const uint16_t *input_bf16(run *r, const uint16_t *host, int64_t n) {
    return place(r, "an input", INPUT, BF16, n, host);
}
static uint16_t *output_bf16(run *r, const char *what, int64_t n) {
    uint16_t *p = place(r, what, WRITTEN, BF16, n, NULL);
    r->b[r->nb - 1].how = bits();
    return p;
}
/* A model kernel's bf16 output, compared with the CPU's by its values, as `how` says. */
static uint16_t *output_bf16_values(run *r, const char *what, int64_t n, measure how) {
    uint16_t *p = place(r, what, WRITTEN, BF16V, n, NULL);
    r->b[r->nb - 1].how = how;
    return p;
}
static float *updated(run *r, const char *what, const float *start, int64_t n, measure how) {
    float *p = place(r, what, UPDATED, F32, n, start);
    r->b[r->nb - 1].how = how;
    return p;
}
/* A bf16 output gradient accumulated from `start` (bits), compared by value as `how` says. */
static uint16_t *accumulated_bf16(run *r, const char *what, const uint16_t *start, int64_t n,
                                  measure how) {
    uint16_t *p = place(r, what, ACCUMULATED, BF16V, n, start);
    r->b[r->nb - 1].how = how;
    return p;
}
static float *accumulated(run *r, const char *what, const float *start, int64_t n, measure how) {
    float *p = place(r, what, ACCUMULATED, F32, n, start);
    r->b[r->nb - 1].how = how;
    return p;
}
static double *accumulated_f64(run *r, const char *what, const double *start, int64_t n,
                               measure how) {
    double *p = place(r, what, ACCUMULATED, F64, n, start);
    r->b[r->nb - 1].how = how;
    return p;
}
static float *scratch(run *r, int64_t n) { return place(r, "scratch", SCRATCH, F32, n, NULL); }

/* A result the kernel hands back in host memory (a loss, a flag). */
static void result_of(run *r, const char *what, double value, measure how) {
    if (r->nres < MAX_RESULTS) r->res[r->nres++] = (result){what, value, how};
}

/* An output's host copy after the run, by name (NULL when the run has none of that name). */
static const void *got_of(const run *r, const char *what) {
    for (int i = 0; i < r->nb; i++)
        if (r->b[i].role != INPUT && strcmp(r->b[i].what, what) == 0) return r->b[i].got;
    return NULL;
}
static const float *f32_of(const run *r, const char *what) { return got_of(r, what); }
static double result_named(const run *r, const char *what) {
    for (int i = 0; i < r->nres; i++)
        if (strcmp(r->res[i].what, what) == 0) return r->res[i].value;
    return NAN;
}

static void run_free(run *r) {
    for (int i = 0; i < r->nb; i++)
        free(r->b[i].start), free(r->b[i].got);
    r->nb = 0;
}

/* ---- the driver ------------------------------------------------------------------------------ */

typedef struct kernel_case {
    const char *kernel; /* its name in the list */
    const char *shape;
    run_fn fn;
    const void *args;
    /* after each device's first run: what its results must hold whatever the device (NaN where
     * fed, relations between outputs), and on the CPU its fp64 or host reference; optional */
    void (*after)(const struct kernel_case *k, const run *r);
    /* The kernel's GEMMs take the device's matmul precision (lw_device_set_matmul): on a GPU
     * each precision runs on the large shapes, for which the tolerances of TF32 and bf16 are
     * derived; on the CPU, which computes fp32 whatever is asked, TF32 and bf16 must give fp32's
     * bits (on the other shapes: the large ones' runs cost the most and would show nothing
     * more). */
    bool gemm;
    bool large; /* a GPU's size (left_out below says where it is made) */
    /* The kernel has arithmetic of its own for the bf16 setting (attention on tensor cores),
     * which shapes of every size reach: on a GPU each precision runs on every shape; on the CPU,
     * as for GEMMs, TF32 and bf16 give fp32's bits (on the shapes that are not large). */
    bool tensor_cores;
    /* A GEMM shape that is not large but that cuBLASLt's epilogues take (gemm_lt.c: every
     * dimension a multiple of 16): on a GPU each precision runs on it too, so that under bf16
     * products every epilogue runs, those of shapes no large case has among them. */
    bool epilogues;
} kernel_case;

typedef void (*after_fn)(const kernel_case *k, const run *r);

static int cases_run[2];           /* on the CPU, on the other device */
static int cases_large;            /* left out: large, and no GPU */
static bool run_large;             /* a GPU, or LWOPT_TEST_LARGE=1 (the CPU's side alone) */
static const char *skipped_kernel; /* the kernel the other device was last found to lack */

static void failed(const kernel_case *k, const run *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout); /* after the comparisons printed before it, in a log of both */
    fprintf(stderr, "%s (%s) on %s in %s: ", k->kernel, k->shape, lw_device_name(r->device),
            lw_matmul_name(r->matmul));
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    check_failures++;
}

static void passed(void) { check_passes++; }

/* One run of the case on device d: the kernel, then every buffer read back and checked. */
static void run_on(run *r, const kernel_case *k, lw_device *d, lw_matmul matmul, bool zeroed) {
    *r = (run){.device = d, .s = lw_device_stream(d), .matmul = matmul, .zeroed = zeroed};
    CHECK_OK(lw_device_set_matmul(d, matmul));
    k->fn(r, k->args);
    call(r, lw_stream_synchronize(r->s));
    CHECK_OK(lw_device_set_matmul(d, LW_MATMUL_FP32));
    for (int i = 0; i < r->nb; i++) {
        buffer *b = &r->b[i];
        const size_t data = (size_t)b->n * elem_size(b->type);
        char *host = malloc(2 * GUARD_BYTES + data);
        CHECK_OK(lw_device_copy(r->s, host, b->alloc, 2 * GUARD_BYTES + (int64_t)data,
                                LW_COPY_DEVICE_TO_HOST));
        lw_device_free(d, b->alloc);
        memcpy(b->got, host + GUARD_BYTES, data);
        int64_t spoilt = 0;
        for (int64_t w = 0; w < GUARD_BYTES / 4; w++)
            spoilt += memcmp(host + 4 * w, &GUARD_WORD, 4) != 0;
        for (int64_t w = 0; w < GUARD_BYTES / 4; w++)
            spoilt += memcmp(host + GUARD_BYTES + data + 4 * w, &GUARD_WORD, 4) != 0;
        free(host);
        if (r->st != LW_OK) continue;
        if (spoilt > 0)
            failed(k, r, "%s (%lld elements): %lld words of its guards written", b->what,
                   (long long)b->n, (long long)spoilt);
        else if (b->role == INPUT && memcmp(b->got, b->start, data) != 0)
            failed(k, r, "an input of %lld elements was written", (long long)b->n);
        else
            passed();
    }
}

/* Two runs of one device agree bit for bit (NaN equal to any NaN). */
static void same_runs(const kernel_case *k, const run *a, const run *b) {
    const measure same = bits();
    double unused = 0;
    for (int i = 0; i < a->nb; i++) {
        const buffer *x = &a->b[i];
        if (x->role == INPUT || x->role == SCRATCH) continue;
        if (distance(&same, x->type, b->b[i].got, x->got, x->n, &unused) != 0)
            failed(k, b, "%s: the run differs from the run before", x->what);
        else
            passed();
    }
    for (int i = 0; i < a->nres; i++) {
        const double x = a->res[i].value, y = b->res[i].value;
        if (distance(&same, F64, &y, &x, 1, &unused) != 0)
            failed(k, b, "%s: %.17g, the run before %.17g", a->res[i].what, y, x);
        else
            passed();
    }
}

/* One output or result of got against ref's under got's measure; on a device other than the
 * CPU each comparison is printed, so that a GPU run records how close it came. */
static void compare_one(const kernel_case *k, const run *got, const char *what, const measure *m,
                        elem_type t, const void *g, const void *ref, int64_t n) {
    double sums = 0;
    const double worst = distance(m, t, g, ref, n, &sums);
    const bool within = worst <= m->tol && (m->kind != STATS || sums <= m->tol2);
    const bool differs = m->differ <= 0 || worst > m->differ;
    if (!on_cpu(got->device)) {
        printf("  %s %s (%s) %s: %s %.2e <= %.0e", lw_device_name(got->device), k->kernel, k->shape,
               lw_matmul_name(got->matmul), what, worst, m->tol);
        if (m->kind == STATS) printf(", sums %.2e <= %.0e", sums, m->tol2);
        if (m->differ > 0) printf(", > %.0e", m->differ);
        printf("\n");
    }
    if (!within)
        failed(k, got, "%s: worst difference from the CPU's %.3g%s, tolerance %.1g%s", what, worst,
               m->kind == STATS ? " (maxima and target logits)" : "", m->tol,
               m->kind == STATS ? "; or the sums'" : "");
    else if (!differs)
        failed(k, got,
               "%s: %.3g from the CPU's fp32, as if the precision did not reach the "
               "GEMMs (it must be more than %.1g)",
               what, worst, m->differ);
    else
        passed();
}

static void compare(const kernel_case *k, const run *got, const run *ref) {
    if (got->nb != ref->nb || got->nres != ref->nres) {
        failed(k, got, "the run has %d buffers and %d results, the CPU's %d and %d", got->nb,
               got->nres, ref->nb, ref->nres);
        return;
    }
    for (int i = 0; i < got->nb; i++) {
        const buffer *b = &got->b[i];
        if (b->role != INPUT && b->role != SCRATCH)
            compare_one(k, got, b->what, &b->how, b->type, b->got, ref->b[i].got, b->n);
    }
    for (int i = 0; i < got->nres; i++) {
        const result *x = &got->res[i];
        compare_one(k, got, x->what, &x->how, F64, &x->value, &ref->res[i].value, 1);
    }
}

/* The CPU's own checks of its first run: accumulation (with the run from zeros) and no NaN. */
static void cpu_checks(const kernel_case *k, const run *ref, const run *zeroed) {
    for (int i = 0; i < ref->nb; i++) {
        const buffer *b = &ref->b[i];
        if (b->role == ACCUMULATED) {
            /* start + the run from zeros = the run, within the rounding of adding the start at
             * the beginning rather than the end. Element-wise kernels: a rounding or two. A
             * beta-1 GEMM (the LM head's dh and dw): OpenBLAS adds the product into C one block
             * of the inner dimension at a time (kc = 256 to 384 by CPU), so the start meets
             * every block's rounding: up to K / kc of them, 50304 / 384 = 131 ulps, 8e-6 of the
             * largest value (measured 1.2e-6 on a 16-core Xeon's kernel; 2 cores here: less):
             * 1e-5 in float, 1e-12 in double. A kernel that overwrote would be off by the start,
             * far more (starts of ~0.01 against values of at most ~50 in float, 2e-4; 1.5
             * against 7e5 in double) */
            const int64_t n = b->n > 0 ? b->n : 1;
            double *sum = malloc(sizeof(double) * (size_t)n),
                   *got = malloc(sizeof(double) * (size_t)n);
            for (int64_t j = 0; j < b->n; j++) {
                sum[j] = elem(b->type, b->start, j) + elem(b->type, zeroed->b[i].got, j);
                got[j] = elem(b->type, b->got, j);
            }
            const double worst =
                worst_relative(F64, got, sum, b->n, fmax(largest(F64, got, b->n), 1e-300));
            /* a bf16 gradient is rounded once at the end: the sum of two roundings (the start's
             * and the run's from zeros) is up to two bf16 half-steps from it (2^-8 of the largest
             * value); whether it accumulated at all its case checks bit for bit against the
             * fp32 run from the same start (after_bf16_output) */
            const double tol = b->type == F64 ? 1e-12 : b->type == BF16V ? 1.0 / 128 : 1e-5;
            if (!(worst <= tol))
                failed(k, ref,
                       "%s does not accumulate: it is %.3g of its largest value from "
                       "its start plus the run from zeros",
                       b->what, worst);
            else
                passed();
            free(sum), free(got);
        }
        if (bf16_type(b->type) && b->role == WRITTEN) {
            int64_t unwritten = 0;
            for (int64_t j = 0; j < b->n; j++)
                unwritten += ((const uint16_t *)b->got)[j] == BF16_UNWRITTEN;
            if (unwritten > 0)
                failed(k, ref, "%s: %lld elements not written", b->what, (long long)unwritten);
        }
        if (ref->nan_fed || b->type != F32 || b->role == INPUT || b->role == SCRATCH) continue;
        int64_t nans = 0;
        for (int64_t j = 0; j < b->n; j++)
            nans += isnan(((const float *)b->got)[j]);
        if (nans > 0) failed(k, ref, "%s holds %lld NaN, fed none", b->what, (long long)nans);
    }
    for (int i = 0; i < ref->nres && !ref->nan_fed; i++)
        if (isnan(ref->res[i].value)) failed(k, ref, "%s is NaN, fed none", ref->res[i].what);
}

/* The other device's runs against the CPU's first: `first` (fp32, done), then the others the
 * case takes. */
static void check_other(const kernel_case *k, const run *ref, run *first) {
    for (int p = 0; p < ((k->gemm && (k->large || k->epilogues)) || k->tensor_cores ? 3 : 1); p++) {
        run got, again;
        if (p == 0)
            got = *first;
        else
            run_on(&got, k, gpu, (lw_matmul)p, false);
        if (got.st != LW_OK) { /* lwopt's CUDA library has every kernel */
            failed(k, &got, "%s", got.error);
            run_free(&got);
            return;
        }
        compare(k, &got, ref);
        run_on(&again, k, gpu, (lw_matmul)p, false);
        same_runs(k, &got, &again);
        if (k->after != NULL) k->after(k, &got);
        run_free(&got), run_free(&again);
    }
    cases_run[1]++;
}

/* A stand-in device's first run, when it has the kernel; false (said once) when it lacks it. */
static bool stand_in_has(const kernel_case *k, run *got) {
    if (skipped_kernel != NULL && strcmp(skipped_kernel, k->kernel) == 0) return false;
    run_on(got, k, gpu, LW_MATMUL_FP32, false);
    /* the dispatcher's "device: cuda:0 has no gelu_forward kernel" */
    if (got->st == LW_ERR_UNSUPPORTED && strstr(got->error, " kernel") != NULL) {
        const char *why = strstr(got->error, ": ");
        printf("test_kernels: %s: skipped: %s\n", k->kernel, why != NULL ? why + 2 : got->error);
        skipped_kernel = k->kernel;
        run_free(got);
        return false;
    }
    return true;
}

/* The case on the CPU, then on the other device against it. A stand-in device is asked first:
 * where it lacks the kernel the CPU has nothing to be compared with, and its own checks are the
 * plain run's (test_kernels without LWOPT_CUDA_LIB). */
static void check(const kernel_case *k) {
    run ref, again, first;
    if (have_other && other_partial && !stand_in_has(k, &first)) return;
    if (have_gpu()) run_on(&first, k, gpu, LW_MATMUL_FP32, false);
    run_on(&ref, k, cpu, LW_MATMUL_FP32, false);
    if (ref.st != LW_OK) { /* the reference has every kernel */
        failed(k, &ref, "%s", ref.error);
        run_free(&ref);
        if (have_other) run_free(&first);
        return;
    }
    run_on(&again, k, cpu, LW_MATMUL_FP32, false);
    same_runs(k, &ref, &again);
    run_free(&again);
    bool accumulates = false;
    for (int i = 0; i < ref.nb; i++)
        accumulates = accumulates || ref.b[i].role == ACCUMULATED;
    if (accumulates) run_on(&again, k, cpu, LW_MATMUL_FP32, true);
    cpu_checks(k, &ref, accumulates ? &again : NULL);
    if (accumulates) run_free(&again);
    if (k->after != NULL) k->after(k, &ref);
    for (int p = 1; p < ((k->gemm || k->tensor_cores) && !k->large ? 3 : 1); p++) {
        run_on(&again, k, cpu, (lw_matmul)p, false);
        same_runs(k, &ref, &again);
        run_free(&again);
    }
    cases_run[0]++;
    if (have_other) check_other(k, &ref, &first);
    run_free(&ref);
}

/* A shape of a GPU's size (GPT-2 small's layers, vocabulary and batch: the GPU's tiles, chunks
 * and the precisions' derivations) is made where a GPU's results need the CPU's, or with
 * LWOPT_TEST_LARGE=1; without one it is counted and left out: the CPU's own tests (test_nn_*)
 * cover its chunks and tiles, and here they would cost the most and show nothing more. */
static bool left_out(bool large) {
    cases_large += large && !run_large;
    return large && !run_large;
}

/* A check of an `after` hook: counted, and said with the case when it fails. */
static void expect(const kernel_case *k, const run *r, bool ok, const char *what) {
    if (ok)
        passed();
    else
        failed(k, r, "%s", what);
}

/* ---- seeded inputs --------------------------------------------------------------------------- */

static float *scaled_random(int64_t n, float scale, float offset) {
    float *x = host_random(n);
    for (int64_t i = 0; i < n; i++)
        x[i] = offset + scale * x[i];
    return x;
}

/* What a backward accumulates onto: small against the gradients (so that their own rounding is
 * what the comparisons see) yet far above the tolerances (so that a backward that overwrote
 * instead of adding would fail them, and the CPU's accumulation check sees it). */
static float *prefill(int64_t n) { return scaled_random(n, 0.01f, 0.0f); }

static int32_t *random_ids(int64_t n, int64_t bound) {
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++)
        ids[i] = rand_below(bound);
    return ids;
}

/* What the CPU's kernel gives, for the inputs of the kernel after it (a backward's forward). */
static float *cpu_array(int64_t n) { return malloc(sizeof(float) * (size_t)(n > 0 ? n : 1)); }

static bool any_nan(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (isnan(x[i])) return true;
    return false;
}

/* ---- vectors --------------------------------------------------------------------------------- *
 * Element-wise kernels are single IEEE operations on both devices (the GPU's axpy rounds its
 * product and its sum apart, as the CPU does): bit for bit, NaN and inf passing as IEEE says. The
 * reductions sum in double. */

typedef struct {
    char shape[64];
    int64_t n;
    float *x, *y, *b; /* x: with the special values first where n allows */
    int64_t bad_at;   /* all_finite and norm_stats: where x holds bad (-1: nowhere) */
    float bad;
} vec_args;

static const float specials[] = {NAN, INFINITY, -INFINITY, -0.0f, 0.0f, 3e38f, -3e38f, 1e-30f};
enum { N_SPECIALS = sizeof specials / sizeof specials[0] };

static vec_args vec_new(int64_t n, bool with_specials) {
    vec_args a = {.n = n, .bad_at = -1};
    snprintf(a.shape, sizeof a.shape, "n %lld%s", (long long)n,
             with_specials && n >= N_SPECIALS ? ", NaN, inf, -0 first" : "");
    a.x = host_random(n), a.y = host_random(n), a.b = host_random(n);
    if (with_specials && n >= N_SPECIALS) memcpy(a.x, specials, sizeof specials);
    return a;
}

static void vec_free(vec_args *a) { free(a->x), free(a->y), free(a->b); }

static const int64_t vec_sizes[] = {0, 1, 1000, (1 << 20) + 3};
enum { N_VEC_SIZES = sizeof vec_sizes / sizeof vec_sizes[0] };

/* Twice into acc = {1.5, 2}: acc[0] += the sum of squares (in double on both: only the order of
 * the sums differs, ~1e-16 per term; squares rounded to float first would show as ~1e-8), acc[1]
 * += the zeros, a count below 2^22 that 1e-10 of leaves exact. An inf or a NaN must reach the
 * norm: the optimizer skips the step on it. */
static void run_norm_stats(run *r, const void *p) {
    const vec_args *a = p;
    const double start[2] = {1.5, 2.0};
    const float *x = input(r, a->x, a->n);
    double *acc = accumulated_f64(r, "acc", start, 2, relative(1e-10, 0.0));
    r->nan_fed = a->bad_at >= 0;
    call(r, lw_vec_norm_stats(r->s, x, a->n, acc));
    call(r, lw_vec_norm_stats(r->s, x, a->n, acc));
}

static void after_norm_stats(const kernel_case *k, const run *r) {
    const vec_args *a = k->args;
    const double *acc = got_of(r, "acc");
    if (a->bad_at >= 0) {
        expect(k, r, isnan(a->bad) ? isnan(acc[0]) : isinf(acc[0]), "a bad value reaches acc[0]");
        return;
    }
    if (!on_cpu(r->device)) return;
    double squares = 0, zeros = 0;
    for (int64_t i = 0; i < a->n; i++)
        squares += (double)a->x[i] * a->x[i], zeros += a->x[i] == 0.0f;
    /* positive terms: within (n - 1) ulps of double of the sum whatever the order */
    expect(k, r, fabs(acc[0] - (1.5 + 2 * squares)) <= 1e-10 * acc[0],
           "acc[0] is the sum of squares");
    expect(k, r, acc[1] == 2.0 + 2.0 * zeros, "acc[1] counts the zeros");
}

static void norm_stats_cases(const char *kernel, run_fn fn, after_fn after) {
    for (int s = 0; s < N_VEC_SIZES + 2; s++) {
        vec_args a = vec_new(s < N_VEC_SIZES ? vec_sizes[s] : 1000, false);
        for (int64_t i = 0; i < a.n; i += 7)
            a.x[i] = 0.0f;
        if (a.n > 0) a.x[a.n - 1] = -0.0f; /* a negative zero counts as zero */
        if (s >= N_VEC_SIZES) {
            a.bad_at = s == N_VEC_SIZES ? 500 : 17, a.bad = s == N_VEC_SIZES ? INFINITY : NAN;
            a.x[a.bad_at] = a.bad;
            snprintf(a.shape, sizeof a.shape, "n 1000, %s at %lld", isnan(a.bad) ? "NaN" : "inf",
                     (long long)a.bad_at);
        }
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        vec_free(&a);
    }
}

/* The flag is host memory: exact. A bad value at the start, the middle and the end in turn, and
 * a clean vector after one with a bad value (no flag left over). */
static void run_all_finite(run *r, const void *p) {
    const vec_args *a = p;
    float *x = cpu_array(a->n);
    memcpy(x, a->x, sizeof(float) * (size_t)a->n);
    if (a->bad_at >= 0) x[a->bad_at] = a->bad;
    const float *clean = input(r, a->x, a->n), *dirty = input(r, x, a->n);
    free(x);
    bool finite[3] = {false, true, false};
    call(r, lw_vec_all_finite(r->s, clean, a->n, &finite[0]));
    call(r, lw_vec_all_finite(r->s, dirty, a->n, &finite[1]));
    call(r, lw_vec_all_finite(r->s, clean, a->n, &finite[2]));
    result_of(r, "finite", finite[0], bits());
    result_of(r, "finite with the bad value", finite[1], bits());
    result_of(r, "finite again", finite[2], bits());
}

static void after_all_finite(const kernel_case *k, const run *r) {
    const vec_args *a = k->args;
    expect(k, r, result_named(r, "finite") == 1 && result_named(r, "finite again") == 1,
           "a finite vector is finite");
    expect(k, r, result_named(r, "finite with the bad value") == (a->bad_at < 0),
           "a bad value makes it not finite");
}

static void all_finite_cases(const char *kernel, run_fn fn, after_fn after) {
    const int64_t sizes[] = {0, 1, 4099, (1 << 20) + 5};
    const float bad[] = {-INFINITY, NAN, INFINITY};
    for (int s = 0; s < 4; s++)
        for (int b = 0; b < (sizes[s] > 0 ? 3 : 1); b++) {
            vec_args a = vec_new(sizes[s], false);
            if (a.n > 0) {
                a.bad_at = b == 0 ? 0 : b == 1 ? a.n / 2 : a.n - 1, a.bad = bad[b];
                snprintf(a.shape, sizeof a.shape, "n %lld, %g at %lld", (long long)a.n,
                         (double)a.bad, (long long)a.bad_at);
            }
            check(&(kernel_case){
                .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
            vec_free(&a);
        }
}

static void run_scale(run *r, const void *p) {
    const vec_args *a = p;
    float *x = updated(r, "x", a->x, a->n, bits());
    r->nan_fed = any_nan(a->x, a->n);
    call(r, lw_vec_scale(r->s, x, a->n, 0.37f));
}

static void run_add(run *r, const void *p) {
    const vec_args *a = p;
    const float *x = input(r, a->x, a->n), *b = input(r, a->b, a->n);
    float *y = output(r, "y", a->n, bits());
    float *in_place = updated(r, "y = a + b, y = a", a->x, a->n, bits());
    r->nan_fed = any_nan(a->x, a->n);
    call(r, lw_vec_add(r->s, y, x, b, a->n));
    call(r, lw_vec_add(r->s, in_place, in_place, b, a->n));
}

static void run_axpy(run *r, const void *p) {
    const vec_args *a = p;
    const float *x = input(r, a->x, a->n);
    float *y = accumulated(r, "y", a->y, a->n, bits());
    r->nan_fed = any_nan(a->x, a->n);
    call(r, lw_vec_axpy(r->s, y, 0.731f, x, a->n));
}

/* The CPU against the correctly rounded result: each float operation of a double one. */
static void after_elementwise(const kernel_case *k, const run *r) {
    const vec_args *a = k->args;
    if (!on_cpu(r->device)) return;
    const bool scale = strcmp(k->kernel, "vec_scale") == 0, add = strcmp(k->kernel, "vec_add") == 0;
    const float *got = f32_of(r, scale ? "x" : "y");
    int64_t wrong = 0;
    for (int64_t i = 0; i < a->n; i++) {
        const float want =
            scale ? (float)((double)a->x[i] * 0.37f)
            : add ? (float)((double)a->x[i] + a->b[i])
                  : (float)((double)a->y[i] + (double)(float)((double)0.731f * a->x[i]));
        wrong += memcmp(&want, &got[i], 4) != 0 && !(isnan(want) && isnan(got[i]));
    }
    expect(k, r, wrong == 0, "each element is the correctly rounded operation");
    if (add)
        expect(k, r, memcmp(got, f32_of(r, "y = a + b, y = a"), 4 * (size_t)a->n) == 0,
               "y may be a");
}

static void elementwise_cases(const char *kernel, run_fn fn, after_fn after) {
    const int64_t sizes[] = {0, 1, 100003};
    for (int s = 0; s < 3; s++) {
        vec_args a = vec_new(sizes[s], true);
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        vec_free(&a);
    }
}

/* ---- bf16 conversions ------------------------------------------------------------------------ *
 * lw_vec_to_bf16 and lw_vec_from_bf16 are integer operations on the values' bits on every device:
 * bit for bit, a NaN's sign and payload too. Each device's results are also checked against
 * bf16_reference.h (the rounding found in double arithmetic, the widening from the fields'
 * values); test_bf16 checks the CPU's at length (every NaN, every neighbouring pair). */

typedef struct {
    char shape[64];
    int64_t n;
    float *x;    /* vec_to_bf16's input: the edges first, then random bit patterns and values */
    uint16_t *b; /* vec_from_bf16's: every bf16 in order when n is 65536, else random bits */
} bf16_args;

/* fp32 values at the edges of the rounding: zeros and infinities; ties at 1 either way, and the
 * floats beside one; fp32 subnormals, ties between bf16 subnormals, the largest subnormal's tie
 * into the smallest normal; the largest finite bf16, the float below the midpoint past it, the
 * midpoint (inf), FLT_MAX; NaN, signalling with the payload in the dropped half alone (which
 * must not become inf), of either sign, full payloads (no carry into the sign). */
static const uint32_t bf16_edges[] = {
    0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x3F808000u, 0x3F818000u,
    0xBF808000u, 0x3F807FFFu, 0x3F808001u, 0x00000001u, 0x80000001u, 0x00008000u,
    0x00018000u, 0x007F8000u, 0x007FFFFFu, 0x00800000u, 0x7F7F0000u, 0x7F7F7FFFu,
    0x7F7F8000u, 0xFF7F8000u, 0x7F7FFFFFu, 0x7F800001u, 0xFF800001u, 0x7F810000u,
    0x7FC00000u, 0xFFC00000u, 0x7FFFFFFFu, 0xFFFFFFFFu, 0x7FBF8000u};
enum { N_BF16_EDGES = sizeof bf16_edges / sizeof bf16_edges[0] };

static uint32_t random_u32(void) {
    return (uint32_t)rand_below(1 << 16) << 16 | (uint32_t)rand_below(1 << 16);
}

static bf16_args bf16_new(const char *kernel, int64_t n) {
    const bool to = strcmp(kernel, "vec_to_bf16") == 0;
    bf16_args a = {.n = n};
    a.x = cpu_array(n);
    a.b = malloc(sizeof(uint16_t) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        const uint32_t u = random_u32();
        /* a half random bit patterns (NaN, inf and subnormals among them), a quarter exact ties,
         * a quarter values of a model's scale */
        a.x[i] = i < N_BF16_EDGES ? f32_of_bits(bf16_edges[i])
                 : i % 4 < 2      ? f32_of_bits(u)
                 : i % 4 == 2     ? f32_of_bits((u & 0xFFFF0000u) | 0x8000u)
                                  : frand();
        a.b[i] = n == 65536 ? (uint16_t)i : (uint16_t)u;
    }
    snprintf(a.shape, sizeof a.shape, "n %lld%s", (long long)n,
             to && n >= N_BF16_EDGES ? ", edge values first"
             : !to && n == 65536     ? ", every bf16"
                                     : "");
    return a;
}

static void run_to_bf16(run *r, const void *p) {
    const bf16_args *a = p;
    const float *x = input(r, a->x, a->n);
    uint16_t *y = output_bf16(r, "y", a->n);
    r->nan_fed = any_nan(a->x, a->n);
    call(r, lw_vec_to_bf16(r->s, y, x, a->n));
}

static void after_to_bf16(const kernel_case *k, const run *r) {
    const bf16_args *a = k->args;
    const uint16_t *y = got_of(r, "y");
    int64_t wrong = 0;
    for (int64_t i = 0; i < a->n; i++)
        wrong += y[i] != bf16_reference(a->x[i]);
    expect(k, r, wrong == 0,
           "each element is x rounded to nearest even (a NaN quiet, its sign and payload kept)");
}

static void run_from_bf16(run *r, const void *p) {
    const bf16_args *a = p;
    const uint16_t *x = input_bf16(r, a->b, a->n);
    float *y = output(r, "y", a->n, bits());
    for (int64_t i = 0; i < a->n; i++)
        r->nan_fed = r->nan_fed || isnan(bf16_reference_value(a->b[i]));
    call(r, lw_vec_from_bf16(r->s, y, x, a->n));
}

static void after_from_bf16(const kernel_case *k, const run *r) {
    const bf16_args *a = k->args;
    const float *y = f32_of(r, "y");
    int64_t wrong = 0;
    for (int64_t i = 0; i < a->n; i++) {
        const double want = bf16_reference_value(a->b[i]);
        wrong += f32_bits(y[i]) != (uint32_t)a->b[i] << 16 || /* a NaN's payload kept */
                 !(isnan(want) || (double)y[i] == want);
    }
    expect(k, r, wrong == 0, "each element is the bf16's value, exactly");
}

static void bf16_cases(const char *kernel, run_fn fn, after_fn after) {
    const int64_t sizes[] = {0, 1, 7, 65536, (1 << 20) + 3};
    for (int s = 0; s < 5; s++) {
        bf16_args a = bf16_new(kernel, sizes[s]);
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        free(a.x), free(a.b);
    }
}

/* Whether a GEMM under precision m rounds an operand of these n values that fp32 products read
 * as it is: a value bf16 (8 significant bits) or TF32 (11) cannot hold. bf16 values, a bf16
 * operand's or its widening's, are read exactly by both. A lower precision can be required to
 * differ from fp32 (differing) only where it rounds something: else the sums' order is all
 * that differs. */
static bool rounded_by(lw_matmul m, const float *v, int64_t n) {
    const uint32_t lost = m == LW_MATMUL_BF16 ? 0xffffu : m == LW_MATMUL_TF32 ? 0x1fffu : 0;
    for (int64_t i = 0; i < n && lost != 0; i++) {
        uint32_t bits;
        memcpy(&bits, &v[i], sizeof bits);
        if ((bits & lost) != 0 && isfinite(v[i])) return true;
    }
    return false;
}

/* m, no longer required to differ from fp32 where nothing is rounded */
static measure differing_if(measure m, bool rounded) {
    if (!rounded) m.differ = 0;
    return m;
}

/* ---- bf16 weights ----------------------------------------------------------------------------- *
 * The kernels that read weight matrices (linear, the embedding tables, the LM head) take their
 * dtype, so that bf16 parameters are read as stored. A case with bf16 weights rounds its host
 * weights to bf16 (the fp32 array then holds the widened values, which the fp64 references and
 * the other checks read) and keeps their bits; its run calls the kernel on the bits, then again on
 * the widened fp32 into outputs named "... (widened)". On the CPU the two agree bit for bit
 * (a bf16 weight gives what its widening gives); on a GPU both meet the case's tolerance against
 * the CPU (under bf16 GEMMs the same bf16 operands, perhaps through another of cuBLAS's kernels;
 * under fp32 and TF32 the weight widened into the workspace). */

/* n weights rounded to bf16 in place (w holds the widened values after); their bits, allocated. */
static uint16_t *round_weights(float *w, int64_t n) {
    uint16_t *bits = malloc(sizeof(uint16_t) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        bits[i] = bf16_reference(w[i]);
        w[i] = (float)bf16_reference_value(bits[i]);
    }
    return bits;
}

/* A case's weights (or bf16 input) on the run's device as the kernel reads them: the bf16 bits
 * when it has them, else the fp32 values; *dtype says which. */
static const void *input_typed(run *r, const float *w, const uint16_t *bits, int64_t n,
                                 lw_dtype *dtype) {
    *dtype = bits != NULL ? LW_DTYPE_BF16 : LW_DTYPE_F32;
    return bits != NULL ? (const void *)input_bf16(r, bits, n) : (const void *)input(r, w, n);
}

/* Output `what` of the bf16 weights (or input) and its "(widened)" twin, n floats, agree bit for
 * bit, on the run's device. */
static void widening_exact(const kernel_case *k, const run *r, const char *what, int64_t n) {
    char twin[64];
    snprintf(twin, sizeof twin, "%s (widened)", what);
    const float *a = f32_of(r, what), *b = f32_of(r, twin);
    expect(k, r, a != NULL && b != NULL && memcmp(a, b, 4 * (size_t)n) == 0,
           "bf16 values give their widening's results, bit for bit");
}
/* The same on the CPU alone (a GPU may run another of cuBLAS's kernels on each). */
static void same_as_widened(const kernel_case *k, const run *r, const char *what, int64_t n) {
    if (on_cpu(r->device)) widening_exact(k, r, what, n);
}

/* The bf16 outputs (y_dtype or out_dtype bf16: the layer norm's, GELU's, the attention's, the
 * linear layer's) are the same kernel's fp32 output rounded to nearest even: checked on each
 * device against its own fp32 output, bit for bit (after_bf16_output; the linear layer's on the
 * CPU, a GPU's bf16 GEMM output may come from another of cuBLAS's kernels). Against the CPU
 * they are compared by value with the fp32 output's measure widened by a bf16 step: where a
 * device's fp32 value is an ulp from the CPU's, its rounding may land a step away, and a step is
 * 2^-7 of a value at the bottom of its binade (2^-8 at the top). */
static measure bf16_step(measure m) {
    if (m.kind == RELATIVE) m.tol += 1.0 / 128;
    m.differ = 0;
    return m;
}

/* Output `what` (bf16 bits, "<what> bf16") is output `what` (fp32) rounded, n values. */
static void after_bf16_output(const kernel_case *k, const run *r, const char *what, int64_t n) {
    char name[48];
    snprintf(name, sizeof name, "%s bf16", what);
    const float *y = f32_of(r, what);
    const uint16_t *y16 = got_of(r, name);
    int64_t wrong = y == NULL || y16 == NULL;
    for (int64_t i = 0; i < n && !wrong; i++)
        wrong += y16[i] != bf16_reference(y[i]);
    expect(k, r, wrong == 0, "the bf16 output is the fp32 output rounded to nearest even");
}

/* ---- linear ---------------------------------------------------------------------------------- *
 * y, dx and dw are GEMMs on both devices, summed in other orders (cuBLAS's, OpenBLAS's blocked
 * kernels): 1e-5 of the largest value in fp32 (gemm). db: both sum the column in double and round
 * once, so they differ only where the two double sums straddle a float's rounding point: 1e-6 of
 * each value, in every precision (no GEMM).
 * TF32 (tensor cores on 10-bit mantissas): each product carries ~2^-11 of relative rounding, and
 * k of them of random sign sum to ~1e-3 of the largest output at most. Simulated (operands rounded
 * to TF32, or truncated, as cuBLAS may do; products summed exactly): 2.9e-4 rounded, 6.0e-4 to
 * 7.0e-4 truncated, for y, dx and dw alike. 5e-3 bounds that, and a result no further from fp32
 * than 1e-6 would mean the setting never reached cuBLAS.
 * bf16: each GEMM rounds its operands to bf16 (8 significant bits, nearest even: at most 2^-8,
 * typically (rms) 2^-9.3 = 1.6e-3 relative each) and sums the products, exact in fp32, in fp32.
 * A product is then off by ~sqrt(2) 1.6e-3 = 2.3e-3 of itself, and a sum of k terms of random
 * sign by ~sqrt(k) 2.3e-3 |term|, while the sum itself is ~sqrt(k) |term|: ~2.3e-3 of the
 * outputs' scale whatever k, and the largest error against the largest output the same.
 * Simulated (the same shapes and input distribution, operands rounded to bf16, products summed
 * exactly): 2.0e-3 for y (k 768), 2.0e-3 for dx (k 2304), 2.1e-3 for dw (k 1024). Tolerance 1e-2
 * of the largest value, and further from fp32 than 5e-4 of it, where fp32 is ~1e-6 away and TF32
 * ~2.5e-4 in the same simulation. Those two precisions run on the large shapes, whose k the
 * simulations cover, and on the bias-less shape of cuBLASLt's epilogues, whose operands are all
 * bf16 (nothing rounded: the sums' order alone, as fp32).
 * A GEMM is required to differ from fp32 only where the precision rounds one of its operands (y:
 * x and w; dx: dy and w; dw: dy and x; rounded_by): a bf16 operand, or an fp32 one of bf16 values
 * (a "(widened)" twin), is read as fp32 reads it, by bf16 and TF32 products alike.
 * A bf16 output under bf16 products adds the bias rounded to bf16 (gemm_lt.c: cuBLASLt takes it
 * in D's type): at most 2^-9 of |b| < 1, against outputs of ~9 rms, within the bf16 step that
 * bf16_step allows. */

typedef struct {
    char shape[96];
    int64_t n, in, out;
    bool bias, large;
    float *x, *w, *b, *dy, *dx0, *dw0, *db0;
    uint16_t *w16; /* bf16 weights (w: their widened values), or NULL */
    uint16_t *x16; /* a bf16 input (x: its widened values), or NULL */
    uint16_t *dy16;  /* a bf16 output gradient (dy: its widened values), or NULL */
    float *pre;      /* GELU's input before the layer (linear_gelu_backward), */
    uint16_t *pre16; /* and rounded to bf16 */
} linear_args;

static measure linear_gemm(lw_matmul m) {
    return m == LW_MATMUL_FP32   ? gemm(1e-5)
           : m == LW_MATMUL_TF32 ? differing(gemm(5e-3), 1e-6)
                                 : differing(gemm(1e-2), 5e-4);
}

/* A linear case's inputs on the run's device, each as the kernel reads it (bf16 bits where the
 * case has them), with their dtypes: the forward's x, w and b (NULL without a bias), the
 * backward's dy, x and w. */
typedef struct {
    const void *dy, *x, *w;
    const float *b;
    lw_dtype dyt, xt, wt;
} linear_inputs;

static linear_inputs forward_inputs(run *r, const linear_args *a) {
    linear_inputs in = {0};
    in.x = input_typed(r, a->x, a->x16, a->n * a->in, &in.xt);
    in.w = input_typed(r, a->w, a->w16, a->out * a->in, &in.wt);
    in.b = a->bias ? input(r, a->b, a->out) : NULL;
    return in;
}

static linear_inputs backward_inputs(run *r, const linear_args *a) {
    linear_inputs in = {0};
    in.dy = input_typed(r, a->dy, a->dy16, a->n * a->out, &in.dyt);
    in.x = input_typed(r, a->x, a->x16, a->n * a->in, &in.xt);
    in.w = input_typed(r, a->w, a->w16, a->out * a->in, &in.wt);
    return in;
}

/* The measure of a GEMM's output of `count` elements from operands a (na values) and b (nb): it
 * must differ from fp32 where it has elements and the precision rounds an operand (none is
 * rounded where the inner dimension is empty: both are). */
static measure gemm_output(lw_matmul m, int64_t count, const float *a, int64_t na, const float *b,
                           int64_t nb) {
    return differing_if(linear_gemm(m),
                        count > 0 && (rounded_by(m, a, na) || rounded_by(m, b, nb)));
}
/* The forward's y reads x and w, dx reads dy and w, dw reads dy and x. */
static measure forward_measure(const run *r, const linear_args *a) {
    return gemm_output(r->matmul, a->n * a->out, a->x, a->n * a->in, a->w, a->out * a->in);
}
static measure dx_measure(const run *r, const linear_args *a) {
    return gemm_output(r->matmul, a->n * a->in, a->dy, a->n * a->out, a->w, a->out * a->in);
}
static measure dw_measure(const run *r, const linear_args *a) {
    return gemm_output(r->matmul, a->out * a->in, a->dy, a->n * a->out, a->x, a->n * a->in);
}

/* cuBLASLt's epilogues against the separate passes, on one device: the same operands (and under
 * bf16 products the same bf16 bias), so only the sums' order (1e-5 of the largest value, gemm's),
 * the roundings and cuBLASLt's GELU can differ.
 * - The bias (epilogue_measure), per element, relative to the value or 1% of the largest: a bf16
 *   output against the fp32 one (the bias epilogue against the bias rows and the GEMM) is half a
 *   step off (2^-8 of a value at the bottom of its binade), plus the bias's rounding (2^-9 |b| <
 *   2^-9, against a largest value of ~48: 4e-3) and the sums' order (1e-3): 9e-3; two bf16
 *   outputs (GELU's input from its epilogue and from the bias epilogue) a step apart at most
 *   (2^-7) where their sums straddle a rounding point: 8e-3. Tolerance 1.5e-2, where a bias left
 *   out, or added by column, is off by up to 1 of the values near 0.
 * - GELU's output (gelu_epilogue_measure) adds GELU of its input's rounding on the separate path
 *   (at most 1.3 times that rounding relative to y for x > 0, 5e-3; |GELU'(x) x| <= 0.2 absolute
 *   for x < 0) and cuBLASLt's own GELU (the tanh form, as PyTorch's fused path takes it: a
 *   hardware tanh is ~2^-11 relative, up to 1e-3 in y where it nears -1; the erf form would be
 *   4.7e-4 away). Relative to the value or 0.25 (GELU's values near 0): 8e-3 + 5e-3 + 4e-3 +
 *   1e-3 = 1.8e-2; 3e-2, where another activation, or a bias left out, is off by 0.1 to 1 there.
 * - GELU's gradient (dgelu_epilogue_measure), dy w GELU'(pre): its product is up to ~80 where
 *   GELU'(pre) crosses 0, so an error of cuBLASLt's GELU' (~1e-3, as its GELU's) is judged against
 *   the largest value: a step (2^-7) and 1e-3 of it, 2e-2, where GELU' of another input, or none,
 *   is off by O(1) of it. */
static measure epilogue_measure(void) { return scaled(1.5e-2); }
static measure gelu_epilogue_measure(void) {
    return (measure){.kind = RELATIVE, .tol = 3e-2, .floor = 0.25, .scale = 1e-2};
}
static measure dgelu_epilogue_measure(void) { return gemm(2e-2); }

/* Output `what` (of type wt) against `twin` (of type tt) of the same run, n values, within m:
 * another path to the same values on the same device. Printed on a device other than the CPU, as
 * compare_one prints, that a GPU run records how close its epilogues came. */
static void near_twin(const kernel_case *k, const run *r, const char *what, elem_type wt,
                      const char *twin, elem_type tt, int64_t n, measure m) {
    const void *g = got_of(r, what), *t = got_of(r, twin);
    double *gd = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    double *td = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n && g != NULL && t != NULL; i++)
        gd[i] = elem(wt, g, i), td[i] = elem(tt, t, i);
    double unused = 0;
    const double worst = g != NULL && t != NULL ? distance(&m, F64, gd, td, n, &unused) : NAN;
    if (!on_cpu(r->device))
        printf("  %s %s (%s) %s: %s against %s %.2e <= %.1e\n", lw_device_name(r->device),
               k->kernel, k->shape, lw_matmul_name(r->matmul), what, twin, worst, m.tol);
    if (worst <= m.tol)
        passed();
    else
        failed(k, r, "%s: %.3g from %s (another path to it), tolerance %.2g", what, worst, twin,
               m.tol);
    free(gd), free(td);
}

static void run_linear_forward(run *r, const void *p) {
    const linear_args *a = p;
    const linear_inputs in = forward_inputs(r, a);
    const void *x = in.x, *w = in.w;
    const float *b = in.b;
    const lw_dtype xt = in.xt, wt = in.wt;
    const measure m = forward_measure(r, a);
    /* y starts as NaN: without a bias the GEMM must not read it (beta 0) */
    float *y = output(r, "y", a->n * a->out, m);
    call(r, lw_linear_forward(r->s, y, LW_DTYPE_F32, x, xt, w, wt, b, a->n, a->in, a->out));
    /* the same in bf16: the fp32 result, bias included, rounded once */
    uint16_t *y16 = output_bf16_values(r, "y bf16", a->n * a->out, bf16_step(m));
    call(r, lw_linear_forward(r->s, y16, LW_DTYPE_BF16, x, xt, w, wt, b, a->n, a->in, a->out));
    if (a->w16 == NULL && a->x16 == NULL) return;
    float *y32 = output(r, "y (widened)", a->n * a->out, m);
    call(r,
         lw_linear_forward(r->s, y32, LW_DTYPE_F32, input(r, a->x, a->n * a->in), LW_DTYPE_F32,
                           input(r, a->w, a->out * a->in), LW_DTYPE_F32, b, a->n, a->in, a->out));
}

static void after_linear_forward(const kernel_case *k, const run *r) {
    const linear_args *a = k->args;
    if (a->w16 != NULL || a->x16 != NULL) same_as_widened(k, r, "y", a->n * a->out);
    /* y bf16 is y rounded: bit for bit on the CPU (after_bf16_output, below); on a GPU under bf16
     * products, cuBLASLt's bias epilogue (its default one without a bias) against the bias rows
     * and the GEMM, where it offers an algorithm */
    near_twin(k, r, "y bf16", BF16V, "y", F32, a->n * a->out, epilogue_measure());
    if (!on_cpu(r->device)) return;
    after_bf16_output(k, r, "y", a->n * a->out);
    if (a->large) return;
    float *want = cpu_array(a->n * a->out);
    for (int64_t i = 0; i < a->n; i++)
        for (int64_t o = 0; o < a->out; o++) {
            double s = a->bias ? a->b[o] : 0.0;
            for (int64_t j = 0; j < a->in; j++)
                s += (double)a->x[i * a->in + j] * a->w[o * a->in + j];
            want[i * a->out + o] = (float)s;
        }
    const measure m = gemm(1e-5);
    double unused;
    expect(k, r, distance(&m, F32, f32_of(r, "y"), want, a->n * a->out, &unused) <= m.tol,
           "y within 1e-5 of the largest value of an fp64 product");
    free(want);
}

/* The linear layer with GELU after it, in fp32 and in bf16, and the two kernels one after the
 * other on the same device: on the CPU the same results bit for bit, and on a GPU too but for
 * its bf16 outputs under bf16 products (cuBLASLt's GELU epilogue takes GELU of the unrounded sum,
 * with its own tanh: within the bf16 step the measure allows against the CPU). */
static void run_linear_gelu_forward(run *r, const void *p) {
    const linear_args *a = p;
    const linear_inputs in = forward_inputs(r, a);
    const void *x = in.x, *w = in.w;
    const float *b = in.b;
    const lw_dtype xt = in.xt, wt = in.wt;
    const int64_t ny = a->n * a->out;
    const measure m = forward_measure(r, a);
    float *pre = output(r, "pre", ny, m), *y = output(r, "y", ny, m);
    call(r,
         lw_linear_gelu_forward(r->s, y, pre, LW_DTYPE_F32, x, xt, w, wt, b, a->n, a->in, a->out));
    uint16_t *pre16 = output_bf16_values(r, "pre bf16", ny, bf16_step(m));
    uint16_t *y16 = output_bf16_values(r, "y bf16", ny, bf16_step(m));
    call(r, lw_linear_gelu_forward(r->s, y16, pre16, LW_DTYPE_BF16, x, xt, w, wt, b, a->n, a->in,
                                   a->out));
    float *pre2 = output(r, "pre (two kernels)", ny, m), *y2 = output(r, "y (two kernels)", ny, m);
    call(r, lw_linear_forward(r->s, pre2, LW_DTYPE_F32, x, xt, w, wt, b, a->n, a->in, a->out));
    call(r, lw_gelu_forward(r->s, y2, LW_DTYPE_F32, pre2, LW_DTYPE_F32, ny));
    uint16_t *pre16b = output_bf16_values(r, "pre bf16 (two kernels)", ny, bf16_step(m));
    uint16_t *y16b = output_bf16_values(r, "y bf16 (two kernels)", ny, bf16_step(m));
    call(r, lw_linear_forward(r->s, pre16b, LW_DTYPE_BF16, x, xt, w, wt, b, a->n, a->in, a->out));
    call(r, lw_gelu_forward(r->s, y16b, LW_DTYPE_BF16, pre16b, LW_DTYPE_BF16, ny));
}

/* Outputs `what` and "<what> (two kernels)", n values of `size` bytes, agree bit for bit. */
static void same_as_two_kernels(const kernel_case *k, const run *r, const char *what, int64_t n,
                                size_t size) {
    char twin[64];
    snprintf(twin, sizeof twin, "%s (two kernels)", what);
    const void *a = got_of(r, what), *b = got_of(r, twin);
    expect(k, r, a != NULL && b != NULL && memcmp(a, b, size * (size_t)n) == 0,
           "the linear layer with GELU gives the two kernels' results, bit for bit");
}

/* cuBLASLt's GELU epilogues take a leading dimension (the GEMM's m) that divides by 8: other
 * shapes run the two kernels on every device. Where the epilogue may run, its outputs against the
 * two kernels' within the tolerances derived above epilogue_measure. */
static void after_linear_gelu(const kernel_case *k, const run *r) {
    const linear_args *a = k->args;
    const int64_t ny = a->n * a->out;
    same_as_two_kernels(k, r, "pre", ny, 4);
    same_as_two_kernels(k, r, "y", ny, 4);
    if (on_cpu(r->device) || r->matmul != LW_MATMUL_BF16 || a->out % 8 != 0) {
        same_as_two_kernels(k, r, "pre bf16", ny, 2);
        same_as_two_kernels(k, r, "y bf16", ny, 2);
    } else {
        near_twin(k, r, "pre bf16", BF16V, "pre bf16 (two kernels)", BF16V, ny, epilogue_measure());
        near_twin(k, r, "y bf16", BF16V, "y bf16 (two kernels)", BF16V, ny,
                  gelu_epilogue_measure());
    }
}

/* The backward with GELU's before it, into an fp32 and a bf16 dpre, and the two kernels one
 * after the other (the linear backward into a zeroed dx, then GELU's into a zeroed dpre): the
 * same bit for bit but for a GPU's bf16 dpre under bf16 products (cuBLASLt's DGELU epilogue). */
static void run_linear_gelu_backward(run *r, const void *p) {
    const linear_args *a = p;
    const int64_t nx = a->n * a->in, nw = a->out * a->in;
    const linear_inputs in = backward_inputs(r, a);
    const void *dy = in.dy, *x = in.x, *w = in.w;
    const lw_dtype dyt = in.dyt, xt = in.xt, wt = in.wt;
    const float *pre = input(r, a->pre, nx);
    const uint16_t *pre16 = input_bf16(r, a->pre16, nx);
    const measure m = dx_measure(r, a); /* dpre is dx's GEMM's, times GELU' */
    float *dw = accumulated(r, "dw", a->dw0, nw, dw_measure(r, a));
    float *db = accumulated(r, "db", a->db0, a->out, scaled(1e-6));
    float *dpre = output(r, "dpre", nx, m);
    call(r, lw_linear_gelu_backward(r->s, dpre, LW_DTYPE_F32, dw, db, dy, dyt, x, xt, w, wt, pre,
                                    a->n, a->in, a->out));
    uint16_t *dpre16 = output_bf16_values(r, "dpre bf16", nx, bf16_step(m));
    call(r, lw_linear_gelu_backward(r->s, dpre16, LW_DTYPE_BF16, scratch(r, nw), NULL, dy, dyt, x,
                                    xt, w, wt, pre16, a->n, a->in, a->out));
    float *dx = accumulated(r, "dx (two kernels)", NULL, nx, m);
    call(r, lw_linear_backward(r->s, dx, scratch(r, nw), NULL, dy, dyt, x, xt, w, wt, a->n, a->in,
                               a->out));
    float *dpre2 = accumulated(r, "dpre (two kernels)", NULL, nx, m);
    call(r, lw_gelu_backward(r->s, dpre2, LW_DTYPE_F32, dx, pre, LW_DTYPE_F32, nx));
    uint16_t *dpre16b = accumulated_bf16(r, "dpre bf16 (two kernels)", NULL, nx, bf16_step(m));
    call(r, lw_gelu_backward(r->s, dpre16b, LW_DTYPE_BF16, dx, pre16, LW_DTYPE_BF16, nx));
}

static void after_linear_gelu_backward(const kernel_case *k, const run *r) {
    const linear_args *a = k->args;
    const int64_t nx = a->n * a->in;
    same_as_two_kernels(k, r, "dpre", nx, 4);
    if (on_cpu(r->device) || r->matmul != LW_MATMUL_BF16 || a->in % 8 != 0)
        same_as_two_kernels(k, r, "dpre bf16", nx, 2);
    else
        near_twin(k, r, "dpre bf16", BF16V, "dpre bf16 (two kernels)", BF16V, nx,
                  dgelu_epilogue_measure());
}

/* the whole backward; then dx and db NULL: dw alone, the same GEMM */
static void run_linear_backward(run *r, const void *p) {
    const linear_args *a = p;
    const int64_t nx = a->n * a->in, nw = a->out * a->in;
    const linear_inputs in = backward_inputs(r, a);
    const void *dy = in.dy, *x = in.x, *w = in.w;
    const lw_dtype dyt = in.dyt, xt = in.xt, wt = in.wt;
    const measure mx = dx_measure(r, a), mw = dw_measure(r, a);
    float *dx = accumulated(r, "dx", a->dx0, nx, mx);
    float *dw = accumulated(r, "dw", a->dw0, nw, mw);
    float *db = accumulated(r, "db", a->db0, a->out, scaled(1e-6));
    call(r, lw_linear_backward(r->s, dx, dw, db, dy, dyt, x, xt, w, wt, a->n, a->in, a->out));
    /* under bf16 without dx, w is not rounded: dw from the same rounded operands */
    float *alone = accumulated(r, "dw alone", a->dw0, nw, mw);
    call(r,
         lw_linear_backward(r->s, NULL, alone, NULL, dy, dyt, x, xt, w, wt, a->n, a->in, a->out));
    if (a->w16 == NULL && a->x16 == NULL && a->dy16 == NULL) return;
    float *dx32 = accumulated(r, "dx (widened)", a->dx0, nx, mx);
    float *dw32 = accumulated(r, "dw (widened)", a->dw0, nw, mw);
    float *db32 = accumulated(r, "db (widened)", a->db0, a->out, scaled(1e-6));
    call(r, lw_linear_backward(r->s, dx32, dw32, db32, input(r, a->dy, a->n * a->out), LW_DTYPE_F32,
                               input(r, a->x, nx), LW_DTYPE_F32, input(r, a->w, nw), LW_DTYPE_F32,
                               a->n, a->in, a->out));
}

static void after_linear_backward(const kernel_case *k, const run *r) {
    const linear_args *a = k->args;
    if (a->w16 != NULL || a->x16 != NULL || a->dy16 != NULL) {
        same_as_widened(k, r, "dx", a->n * a->in);
        same_as_widened(k, r, "dw", a->out * a->in);
        /* the column sums read a bf16 dy widened, on every device */
        widening_exact(k, r, "db", a->out);
    }
    if (r->matmul == LW_MATMUL_FP32)
        expect(k, r,
               memcmp(f32_of(r, "dw alone"), f32_of(r, "dw"), 4 * (size_t)(a->out * a->in)) == 0,
               "dw without dx and db is dw's GEMM, bit for bit");
}

static void linear_cases(const char *kernel, run_fn fn, after_fn after) {
    const struct {
        int64_t n, in, out;
        bool bias, bf16_w, bf16_x, bf16_dy;
    } shapes[] = {
        {1, 1, 1, true, false, false, false},
        {1, 37, 5, true, false, false, false},
        {65, 33, 17, false, false, false, false},
        {300, 100, 7, true, false, false, false},
        {3, 0, 4, true, false, false, false},         /* an empty inner dimension: y = b, dw and dx
                                                         untouched */
        {0, 5, 3, true, false, false, false},         /* no rows: nothing written */
        {1024, 768, 2304, true, false, false, false}, /* GPT-2 small's QKV */
        {65, 33, 17, false, true, false, false},      /* bf16 weights */
        {1, 1, 1, true, true, false, false},
        {1024, 768, 2304, true, true, false, false},
        {65, 33, 17, true, false, true, false},  /* a bf16 input */
        {300, 100, 7, false, true, true, false}, /* both */
        {1024, 768, 2304, true, true, true, false},
        {65, 33, 17, true, false, false, true},    /* a bf16 output gradient */
        {1024, 768, 2304, true, true, true, true}, /* all three: the model's QKV and fc */
        {64, 32, 48, false, true, true, true},     /* no bias, in and out multiples of 8: the
                                                      GPU's GELU epilogues without a bias */
        {3, 4, 0, true, false, false, false},      /* no outputs: dpre is written as zeros */
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        if (left_out(shapes[s].n == 1024)) continue;
        linear_args a = {.n = shapes[s].n,
                         .in = shapes[s].in,
                         .out = shapes[s].out,
                         .bias = shapes[s].bias,
                         .large = shapes[s].n == 1024};
        snprintf(a.shape, sizeof a.shape, "n %lld, in %lld, out %lld%s%s%s%s", (long long)a.n,
                 (long long)a.in, (long long)a.out, a.bias ? ", bias" : "",
                 shapes[s].bf16_w ? ", bf16 weights" : "", shapes[s].bf16_x ? ", bf16 input" : "",
                 shapes[s].bf16_dy ? ", bf16 dy" : "");
        a.x = host_random(a.n * a.in), a.w = host_random(a.out * a.in), a.b = host_random(a.out);
        if (shapes[s].bf16_w) a.w16 = round_weights(a.w, a.out * a.in);
        if (shapes[s].bf16_x) a.x16 = round_weights(a.x, a.n * a.in);
        a.dy = host_random(a.n * a.out), a.dx0 = prefill(a.n * a.in);
        if (shapes[s].bf16_dy) a.dy16 = round_weights(a.dy, a.n * a.out);
        a.pre = scaled_random(a.n * a.in, 4.0f, 0.0f);
        a.pre16 = malloc(sizeof(uint16_t) * (size_t)(a.n * a.in > 0 ? a.n * a.in : 1));
        for (int64_t i = 0; i < a.n * a.in; i++)
            a.pre16[i] = bf16_reference(a.pre[i]);
        a.dw0 = prefill(a.out * a.in), a.db0 = prefill(a.out);
        /* every dimension a multiple of 16: cuBLASLt's epilogues take the shape on a GPU */
        const bool epilogues =
            a.n > 0 && a.in > 0 && a.out > 0 && a.n % 16 == 0 && a.in % 16 == 0 && a.out % 16 == 0;
        check(&(kernel_case){.kernel = kernel,
                             .shape = a.shape,
                             .fn = fn,
                             .args = &a,
                             .after = after,
                             .large = a.large,
                             .gemm = true,
                             .epilogues = epilogues && !a.large});
        free(a.x), free(a.w), free(a.b), free(a.dy), free(a.dx0), free(a.dw0), free(a.db0);
        free(a.w16), free(a.x16), free(a.dy16), free(a.pre), free(a.pre16);
    }
}

/* ---- embedding ------------------------------------------------------------------------------- *
 * One kernel serves the whole table (lw_embedding_forward and _backward: the range of every row an
 * id can name) and a tensor-parallel rank's rows [first, first + rows). Exact on every device: the
 * forward adds the same two floats (or copies one), the backward adds each token's positions in
 * the CPU's order (batch-major, then time), one float addition at a time. */

typedef struct {
    char shape[128];
    int64_t b, t, c, first, rows; /* the table's rows [first, first + rows) */
    bool whole, wpe;              /* whole: through lw_embedding_*, the table `rows` long */
    int32_t *tokens;
    float *wte, *pos, *dy, *dwte0, *dwpe0;
    uint16_t *wte16, *pos16; /* bf16 tables (wte, pos: their widened values), or NULL */
} embed_args;

static void run_embedding_forward(run *r, const void *p) {
    const embed_args *a = p;
    const int64_t n = a->b * a->t;
    const int32_t *tokens = input_ids(r, a->tokens, n);
    for (int widened = 0; widened < 1 + (a->wte16 != NULL); widened++) {
        lw_dtype wt;
        const void *wte = input_typed(r, a->wte, widened ? NULL : a->wte16, a->rows * a->c, &wt);
        const void *wpe =
            a->wpe ? input_typed(r, a->pos, widened ? NULL : a->pos16, a->t * a->c, &wt) : NULL;
        float *y = output(r, widened ? "y (widened)" : "y", n * a->c, bits());
        call(r, a->whole ? lw_embedding_forward(r->s, y, tokens, wte, wpe, wt, a->b, a->t, a->c)
                         : lw_embedding_range_forward(r->s, y, tokens, wte, wpe, wt, a->first,
                                                      a->rows, a->b, a->t, a->c));
    }
}

static void run_embedding_backward(run *r, const void *p) {
    const embed_args *a = p;
    const int64_t n = a->b * a->t;
    const int32_t *tokens = input_ids(r, a->tokens, n);
    const float *dy = input(r, a->dy, n * a->c);
    float *dwte = accumulated(r, "dwte", a->dwte0, a->rows * a->c, bits());
    float *dwpe = a->wpe ? accumulated(r, "dwpe", a->dwpe0, a->t * a->c, bits()) : NULL;
    call(r, a->whole ? lw_embedding_backward(r->s, dwte, dwpe, dy, tokens, a->b, a->t, a->c)
                     : lw_embedding_range_backward(r->s, dwte, dwpe, dy, tokens, a->first, a->rows,
                                                   a->b, a->t, a->c));
}

/* The table row of position i's token, or -1: another rank's, or a negative id. */
static int64_t embed_row(const embed_args *a, int64_t i) {
    const int64_t id = a->tokens[i];
    return id >= a->first && id - a->first < a->rows ? id - a->first : -1;
}

/* The host's forward and backward, float by float in the CPU's order: the CPU bit for bit; a
 * negative id looks up zeros on every device. */
static void after_embedding(const kernel_case *k, const run *r) {
    const embed_args *a = k->args;
    const bool forward = strcmp(k->kernel, "embedding_range_forward") == 0;
    const int64_t n = a->b * a->t, c = a->c;
    if (forward && a->wte16 != NULL) same_as_widened(k, r, "y", n * c);
    for (int64_t i = 0; i < n && forward && !a->wpe; i++)
        if (a->tokens[i] < 0) {
            bool zero = true;
            for (int64_t j = 0; j < c; j++)
                zero = zero && f32_of(r, "y")[i * c + j] == 0.0f;
            expect(k, r, zero, "a negative id looks up zeros");
        }
    if (!on_cpu(r->device)) return;
    const int64_t nw = forward ? n * c : a->rows * c;
    float *want = cpu_array(nw), *wpe = a->wpe ? cpu_array(a->t * c) : NULL;
    if (!forward) {
        memcpy(want, a->dwte0, 4 * (size_t)nw);
        if (wpe != NULL) memcpy(wpe, a->dwpe0, 4 * (size_t)(a->t * c));
    }
    for (int64_t i = 0; i < n; i++) {
        const int64_t row = embed_row(a, i), t = i % a->t;
        for (int64_t j = 0; j < c && forward; j++) {
            const float *tok = row >= 0 ? a->wte + row * c : NULL;
            const float *pos = a->wpe ? a->pos + t * c : NULL;
            want[i * c + j] = tok && pos ? tok[j] + pos[j] : tok ? tok[j] : pos ? pos[j] : 0.0f;
        }
        for (int64_t j = 0; j < c && !forward; j++) {
            if (row >= 0) want[row * c + j] += a->dy[i * c + j];
            if (wpe != NULL) wpe[t * c + j] += a->dy[i * c + j];
        }
    }
    expect(k, r, memcmp(f32_of(r, forward ? "y" : "dwte"), want, 4 * (size_t)nw) == 0,
           forward ? "y is the host's lookup, bit for bit"
                   : "dwte is the host's sums, bit for bit");
    if (wpe != NULL && !forward)
        expect(k, r, memcmp(f32_of(r, "dwpe"), wpe, 4 * (size_t)(a->t * c)) == 0,
               "dwpe is the host's sums, bit for bit");
    free(want), free(wpe);
}

static void embedding_cases(const char *kernel, run_fn fn, after_fn after) {
    const struct {
        int64_t b, t, c, vocab, first, rows; /* rows 0: the whole table of `vocab` rows */
        bool wpe, bf16_w;
    } shapes[] = {
        {1, 1, 1, 1, 0, 0, true, false},
        {4, 64, 100, 50, 0, 0, true, false},      /* many repeats of each token */
        {3, 33, 40, 70000, 0, 0, false, false},   /* ids past 2^16: both passes of the GPU's sort */
        {2, 1024, 768, 50304, 0, 0, true, false}, /* GPT-2's */
        {1, 3, 8, 8, 0, 0, false, false},         /* a negative id: it lies outside every range */
        {0, 4, 8, 10, 0, 0, true, false},         /* no batch: nothing written */
        {1, 1, 1, 2, 1, 1, true, false},          /* a rank's rows */
        {4, 64, 100, 50, 25, 25, true, false},    /* half the tokens another rank's */
        {3, 33, 40, 70000, 35000, 35000, false, false},
        {2, 1024, 768, 50304, 0, 16768, true, false}, /* a third of GPT-2's vocabulary */
        {4, 64, 100, 50, 0, 0, true, true},           /* bf16 tables */
        {3, 33, 40, 70000, 35000, 35000, false, true},
        {1, 3, 8, 8, 0, 0, true, true},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        if (left_out(shapes[s].t == 1024)) continue;
        /* the backward reads no table: bf16 tables are the forward's cases */
        if (shapes[s].bf16_w && strcmp(kernel, "embedding_range_forward") != 0) continue;
        embed_args a = {.b = shapes[s].b,
                        .t = shapes[s].t,
                        .c = shapes[s].c,
                        .first = shapes[s].first,
                        .rows = shapes[s].rows,
                        .wpe = shapes[s].wpe};
        const int64_t n = a.b * a.t, vocab = shapes[s].vocab;
        a.whole = a.rows == 0;
        if (a.whole) a.rows = vocab;
        char rows[64];
        if (a.whole)
            snprintf(rows, sizeof rows, "the whole table of %lld", (long long)vocab);
        else
            snprintf(rows, sizeof rows, "rows [%lld, +%lld) of %lld", (long long)a.first,
                     (long long)a.rows, (long long)vocab);
        snprintf(a.shape, sizeof a.shape, "b %lld, t %lld, c %lld, %s%s%s", (long long)a.b,
                 (long long)a.t, (long long)a.c, rows, a.wpe ? ", wpe" : "",
                 shapes[s].bf16_w ? ", bf16 tables" : "");
        a.tokens = random_ids(n, vocab);
        for (int64_t i = 0; i < n && a.whole && vocab > 65536; i += 3)
            a.tokens[i] = 65535 + (int32_t)(i % 5); /* repeats there */
        if (vocab == 8) a.tokens[1] = -4;
        a.wte = host_random(a.rows * a.c), a.pos = host_random(a.t * a.c);
        a.dy = host_random(n * a.c), a.dwte0 = host_random(a.rows * a.c);
        a.dwpe0 = host_random(a.t * a.c);
        if (shapes[s].bf16_w) {
            a.wte16 = round_weights(a.wte, a.rows * a.c);
            a.pos16 = round_weights(a.pos, a.t * a.c);
        }
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        free(a.tokens), free(a.wte), free(a.pos), free(a.dy), free(a.dwte0), free(a.dwpe0);
        free(a.wte16), free(a.pos16);
    }
}

/* ---- layer norm ------------------------------------------------------------------------------ *
 * Mean and variance are summed in double on both devices (in other orders) and rounded to float
 * once: they differ at most where a double sum straddles a float rounding point, an ulp; y and
 * dx are then the same float operations (no FMA on either side) on values an ulp apart at most:
 * 1e-6 and 1e-5 (dx subtracts two row means, which can cancel). dg and dbeta: the CPU adds the
 * rows into them in float, one after another (error growing with n), the GPU sums each column in
 * double first: 1e-4 up to n = 4096. The backward takes the CPU's mean and rstd on every device,
 * so that it alone is compared. The norm fused with the residual add (add_layernorm_*) runs on
 * the same cases, beside the two kernels it replaces on the same device: the same results, bit
 * for bit, on every device (the sum is one rounded addition either way, and the norm's
 * arithmetic the same). */

typedef struct {
    char shape[64];
    int64_t n, c;
    bool beta;
    float *x, *g, *b, *mean, *rstd, *dy, *dx0, *dg0, *db0;
    float *r, *dres; /* the fused kernels' other row of the sum, and the stream's gradient */
} ln_args;

static const float LN_EPS = 1e-5f;

static void run_layernorm_forward(run *r, const void *p) {
    const ln_args *a = p;
    const int64_t nc = a->n * a->c;
    const float *x = input(r, a->x, nc), *g = input(r, a->g, a->c);
    const float *b = a->beta ? input(r, a->b, a->c) : NULL;
    float *y = output(r, "y", nc, scaled(1e-5));
    float *mean = output(r, "mean", a->n, scaled(1e-6));
    float *rstd = output(r, "rstd", a->n, scaled(1e-6));
    call(r, lw_layernorm_forward(r->s, y, LW_DTYPE_F32, mean, rstd, x, g, b, a->n, a->c, LN_EPS));
    /* the same in bf16 (its statistics again, into scratch) */
    uint16_t *y16 = output_bf16_values(r, "y bf16", nc, bf16_step(scaled(1e-5)));
    call(r, lw_layernorm_forward(r->s, y16, LW_DTYPE_BF16, scratch(r, a->n), scratch(r, a->n), x,
                                 g, b, a->n, a->c, LN_EPS));
}

static void after_layernorm_forward(const kernel_case *k, const run *r) {
    const ln_args *a = k->args;
    after_bf16_output(k, r, "y", a->n * a->c);
}

static void run_layernorm_backward(run *r, const void *p) {
    const ln_args *a = p;
    const int64_t nc = a->n * a->c;
    const float *dy = input(r, a->dy, nc), *x = input(r, a->x, nc), *g = input(r, a->g, a->c);
    const float *mean = input(r, a->mean, a->n), *rstd = input(r, a->rstd, a->n);
    float *dx = accumulated(r, "dx", a->dx0, nc, scaled(1e-5));
    float *dg = accumulated(r, "dg", a->dg0, a->c, scaled(1e-4));
    float *db = a->beta ? accumulated(r, "dbeta", a->db0, a->c, scaled(1e-4)) : NULL;
    call(r, lw_layernorm_backward(r->s, dx, dg, db, dy, x, g, mean, rstd, a->n, a->c));
}

/* The fused forward, then on the same device lw_vec_add and lw_layernorm_forward into the
 * outputs named "... (separate)". */
static void run_add_layernorm_forward(run *r, const void *p) {
    const ln_args *a = p;
    const int64_t nc = a->n * a->c;
    const float *x = input(r, a->x, nc), *res = input(r, a->r, nc), *g = input(r, a->g, a->c);
    const float *b = a->beta ? input(r, a->b, a->c) : NULL;
    for (int separate = 0; separate < 2; separate++) {
        float *sum = output(r, separate ? "sum (separate)" : "sum", nc, bits());
        float *y = output(r, separate ? "y (separate)" : "y", nc, scaled(1e-5));
        float *mean = output(r, separate ? "mean (separate)" : "mean", a->n, scaled(1e-6));
        float *rstd = output(r, separate ? "rstd (separate)" : "rstd", a->n, scaled(1e-6));
        if (!separate) {
            call(r, lw_add_layernorm_forward(r->s, sum, y, LW_DTYPE_F32, mean, rstd, x, res, g, b,
                                             a->n, a->c, LN_EPS));
            uint16_t *y16 = output_bf16_values(r, "y bf16", nc, bf16_step(scaled(1e-5)));
            call(r, lw_add_layernorm_forward(r->s, scratch(r, nc), y16, LW_DTYPE_BF16,
                                             scratch(r, a->n), scratch(r, a->n), x, res, g, b,
                                             a->n, a->c, LN_EPS));
            /* the sum in place of a (lw.h allows it): a copy of x becomes the sum */
            float *in_place = updated(r, "sum in place", a->x, nc, bits());
            float *y_in = output(r, "y in place", nc, scaled(1e-5));
            call(r, lw_add_layernorm_forward(r->s, in_place, y_in, LW_DTYPE_F32, scratch(r, a->n),
                                             scratch(r, a->n), in_place, res, g, b, a->n, a->c,
                                             LN_EPS));
        } else {
            call(r, lw_vec_add(r->s, sum, x, res, nc));
            call(r, lw_layernorm_forward(r->s, y, LW_DTYPE_F32, mean, rstd, sum, g, b, a->n, a->c,
                                         LN_EPS));
        }
    }
}

/* The fused backward, then on the same device lw_vec_add and lw_layernorm_backward. */
static void run_add_layernorm_backward(run *r, const void *p) {
    const ln_args *a = p;
    const int64_t nc = a->n * a->c;
    const float *dy = input(r, a->dy, nc), *x = input(r, a->x, nc), *g = input(r, a->g, a->c);
    const float *dres = input(r, a->dres, nc);
    const float *mean = input(r, a->mean, a->n), *rstd = input(r, a->rstd, a->n);
    for (int separate = 0; separate < 2; separate++) {
        float *dx = accumulated(r, separate ? "dx (separate)" : "dx", a->dx0, nc, scaled(1e-5));
        float *dg = accumulated(r, separate ? "dg (separate)" : "dg", a->dg0, a->c, scaled(1e-4));
        float *db = a->beta ? accumulated(r, separate ? "dbeta (separate)" : "dbeta", a->db0,
                                          a->c, scaled(1e-4))
                            : NULL;
        if (!separate) {
            call(r, lw_add_layernorm_backward(r->s, dx, dg, db, dres, dy, x, g, mean, rstd, a->n,
                                              a->c));
        } else {
            call(r, lw_vec_add(r->s, dx, dx, dres, nc));
            call(r, lw_layernorm_backward(r->s, dx, dg, db, dy, x, g, mean, rstd, a->n, a->c));
        }
    }
}

/* The fused kernels' outputs are their separate kernels', bit for bit, on every device. */
static void after_add_layernorm(const kernel_case *k, const run *r) {
    const ln_args *a = k->args;
    const bool forward = strcmp(k->kernel, "add_layernorm_forward") == 0;
    if (forward) {
        after_bf16_output(k, r, "y", a->n * a->c);
        const float *sum = f32_of(r, "sum"), *in_place = f32_of(r, "sum in place");
        const float *y = f32_of(r, "y"), *y_in = f32_of(r, "y in place");
        const size_t bytes = 4 * (size_t)(a->n * a->c);
        expect(k, r,
               sum && in_place && y && y_in && memcmp(sum, in_place, bytes) == 0 &&
                   memcmp(y, y_in, bytes) == 0,
               "the sum written over a gives what a sum apart gives, bit for bit");
    }
    const char *names[] = {forward ? "sum" : "dx", forward ? "y" : "dg",
                           forward ? "mean" : (a->beta ? "dbeta" : NULL), forward ? "rstd" : NULL};
    const int64_t sizes[] = {a->n * a->c, forward ? a->n * a->c : a->c, forward ? a->n : a->c,
                             a->n};
    for (int i = 0; i < 4; i++) {
        if (names[i] == NULL) continue;
        char twin[48];
        snprintf(twin, sizeof twin, "%s (separate)", names[i]);
        const float *fused = f32_of(r, names[i]), *separate = f32_of(r, twin);
        expect(k, r,
               fused != NULL && separate != NULL &&
                   memcmp(fused, separate, 4 * (size_t)sizes[i]) == 0,
               forward ? "the fused forward is the two kernels it replaces, bit for bit"
                       : "the fused backward is the two kernels it replaces, bit for bit");
    }
}

static void layernorm_cases(const char *kernel, run_fn fn, after_fn after) {
    const struct {
        int64_t n, c;
        bool beta;
    } shapes[] = {
        {1, 1, true}, /* variance 0: rstd = 1 / sqrt(eps) */
        {1, 768, true},   {37, 100, false}, {512, 1536, true},
        {4096, 33, true}, {0, 16, true}, /* no rows */
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        ln_args a = {.n = shapes[s].n, .c = shapes[s].c, .beta = shapes[s].beta};
        const int64_t nc = a.n * a.c;
        snprintf(a.shape, sizeof a.shape, "n %lld, c %lld%s", (long long)a.n, (long long)a.c,
                 a.beta ? ", beta" : "");
        a.x = scaled_random(nc, 1.5f, 3.0f); /* a mean far from 0: the two-pass variance */
        a.g = scaled_random(a.c, 0.5f, 1.0f), a.b = host_random(a.c);
        a.mean = cpu_array(a.n), a.rstd = cpu_array(a.n);
        float *y = cpu_array(nc);
        CHECK_OK(lw_layernorm_forward(NULL, y, LW_DTYPE_F32, a.mean, a.rstd, a.x, a.g,
                                      a.beta ? a.b : NULL, a.n, a.c, LN_EPS));
        a.dy = host_random(nc), a.dx0 = prefill(nc), a.dg0 = prefill(a.c), a.db0 = prefill(a.c);
        a.r = host_random(nc), a.dres = host_random(nc);
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        free(a.x), free(a.g), free(a.b), free(a.mean), free(a.rstd), free(y), free(a.dy);
        free(a.dx0), free(a.dg0), free(a.db0), free(a.r), free(a.dres);
    }
}

/* ---- GELU ------------------------------------------------------------------------------------ *
 * Exact: the GPU evaluates the CPU's formulas (its polynomial exp included) operation for
 * operation, each rounded to nearest with no FMA on either side. The specials first: signed
 * zeros, the clamps' edges (+-9, +-20), tiny and huge values, infinities; a NaN passes through
 * (the clamps are selects). */

typedef struct {
    char shape[32];
    int64_t n;
    float *x, *dy, *dx0;
    uint16_t *x16;    /* x rounded to bf16 (the input an MLP's bf16 fc output gives) */
    float *xw;        /* and widened again */
    uint16_t *dx0_16; /* dx0 rounded to bf16 (a bf16 dx's start), */
    float *dx0_w;     /* and widened again */
} gelu_args;

static const float gelu_specials[] = {0.0f,  -0.0f,  9.0f,     -9.0f,     9.0001f, -9.0001f,
                                      20.0f, -20.0f, 1e-30f,   -1e-30f,   88.0f,   -88.0f,
                                      3e38f, -3e38f, INFINITY, -INFINITY, NAN,     0.5f};
enum { N_GELU_SPECIALS = sizeof gelu_specials / sizeof gelu_specials[0], GELU_NAN_AT = 16 };

static void run_gelu_forward(run *r, const void *p) {
    const gelu_args *a = p;
    const float *x = input(r, a->x, a->n);
    float *y = output(r, "y", a->n, bits());
    r->nan_fed = any_nan(a->x, a->n);
    call(r, lw_gelu_forward(r->s, y, LW_DTYPE_F32, x, LW_DTYPE_F32, a->n));
    uint16_t *y16 = output_bf16_values(r, "y bf16", a->n, bits()); /* exact everywhere, as y */
    call(r, lw_gelu_forward(r->s, y16, LW_DTYPE_BF16, x, LW_DTYPE_F32, a->n));
    /* a bf16 x, and its widening */
    float *yx = output(r, "y of bf16 x", a->n, bits());
    call(r,
         lw_gelu_forward(r->s, yx, LW_DTYPE_F32, input_bf16(r, a->x16, a->n), LW_DTYPE_BF16, a->n));
    float *yw = output(r, "y of bf16 x (widened)", a->n, bits());
    call(r, lw_gelu_forward(r->s, yw, LW_DTYPE_F32, input(r, a->xw, a->n), LW_DTYPE_F32, a->n));
}

static void run_gelu_backward(run *r, const void *p) {
    const gelu_args *a = p;
    const float *dy = input(r, a->dy, a->n), *x = input(r, a->x, a->n);
    float *dx = accumulated(r, "dx", a->dx0, a->n, bits());
    r->nan_fed = any_nan(a->x, a->n);
    call(r, lw_gelu_backward(r->s, dx, LW_DTYPE_F32, dy, x, LW_DTYPE_F32, a->n));
    float *dxx = accumulated(r, "dx of bf16 x", a->dx0, a->n, bits());
    call(r, lw_gelu_backward(r->s, dxx, LW_DTYPE_F32, dy, input_bf16(r, a->x16, a->n),
                             LW_DTYPE_BF16, a->n));
    float *dxw = accumulated(r, "dx of bf16 x (widened)", a->dx0, a->n, bits());
    call(r,
         lw_gelu_backward(r->s, dxw, LW_DTYPE_F32, dy, input(r, a->xw, a->n), LW_DTYPE_F32, a->n));
    /* a bf16 dx: accumulated in fp32, rounded; against the fp32 run from its widened start */
    float *dxs = accumulated(r, "dx from a bf16 start", a->dx0_w, a->n, bits());
    call(r, lw_gelu_backward(r->s, dxs, LW_DTYPE_F32, dy, x, LW_DTYPE_F32, a->n));
    uint16_t *dx16 = accumulated_bf16(r, "dx from a bf16 start bf16", a->dx0_16, a->n, bits());
    call(r, lw_gelu_backward(r->s, dx16, LW_DTYPE_BF16, dy, x, LW_DTYPE_F32, a->n));
}

static void after_gelu(const kernel_case *k, const run *r) {
    const gelu_args *a = k->args;
    const float *y = f32_of(r, "y");
    const bool forward = strcmp(k->kernel, "gelu_forward") == 0;
    if (forward)
        after_bf16_output(k, r, "y", a->n);
    else
        after_bf16_output(k, r, "dx from a bf16 start", a->n);
    widening_exact(k, r, forward ? "y of bf16 x" : "dx of bf16 x", a->n);
    if (y != NULL && a->n > N_GELU_SPECIALS)
        expect(k, r, isnan(y[GELU_NAN_AT]) && y[0] == 0.0f, "gelu(NaN) is NaN, gelu(0) is 0");
}

static void gelu_cases(const char *kernel, run_fn fn, after_fn after) {
    const int64_t sizes[] = {0, 1, 100003};
    for (int s = 0; s < 3; s++) {
        gelu_args a = {.n = sizes[s]};
        snprintf(a.shape, sizeof a.shape, "n %lld", (long long)a.n);
        a.x = scaled_random(a.n, 12.0f, 0.0f), a.dy = host_random(a.n), a.dx0 = host_random(a.n);
        if (a.n > N_GELU_SPECIALS) memcpy(a.x, gelu_specials, sizeof gelu_specials);
        a.xw = cpu_array(a.n);
        memcpy(a.xw, a.x, sizeof(float) * (size_t)a.n);
        a.x16 = round_weights(a.xw, a.n);
        a.dx0_w = cpu_array(a.n);
        memcpy(a.dx0_w, a.dx0, sizeof(float) * (size_t)a.n);
        a.dx0_16 = round_weights(a.dx0_w, a.n);
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        free(a.x), free(a.dy), free(a.dx0), free(a.x16), free(a.xw), free(a.dx0_16), free(a.dx0_w);
    }
}

/* ---- attention ------------------------------------------------------------------------------- *
 * 1e-5: the scores are fp32 dot products summed in other orders, the GPU's softmax is online
 * (rescaled tile by tile) where the CPU's takes the row max first, and the backward recomputes
 * the probabilities from the saved log-sum-exp on both: out and dqkv are GEMM results a few
 * roundings of their terms apart (of the largest value: gemm; a float32 emulation of these
 * kernels is within 7e-7 of the exact result on that measure), lse a log (lse_measure). The
 * backward takes the CPU's out and lse on every device. A NaN in a key reaches every row that
 * sees it, out and lse, on every device (the CPU makes a NaN score's row NaN; a GPU's online max
 * passes over it, but its exponential is NaN); the backward's NaN are not compared, since a tile
 * that runs past the diagonal multiplies a NaN key by a zero probability on one device and not on
 * another.
 * TF32 leaves attention in fp32 (1e-5). bf16, at head dims 64 and 128, runs the GPU's tensor-core
 * kernels (src/cuda/attention_mma.cu): q, k, v and dout rounded to bf16 as they are staged (2^-8
 * relative at most, ~2^-9.3 rms, each), P and dS rounded again before their products, sums and
 * outputs fp32. Propagated: a score, a sum of hd products each off by ~sqrt(2) 2^-9.3 of itself,
 * moves by ~2.3e-3 scale sqrt(hd) |q k|rms, ~3e-3 at these inputs (q, k, v in [-2, 2)); that is a
 * relative error of each p, and lse (a log) moves by about as much in a row of few keys and less
 * in a long one; out = sum p v takes p's, v's and P's roundings, each ~2^-9 to 3e-3 of its terms,
 * random in sign, so ~4e-3 of the outputs' scale, most at the rows of few keys (of the largest
 * value: gemm); dqkv likewise from P, dS and dout (dS = P (dP - D) inherits p's and dP's). No
 * closed bound is tight, so tests/test_mma_layout.c --harness measures it: the kernels' tile
 * loops emulated on these shapes and inputs against double attention, over their first 2 to 10
 * heads: out 1.9e-3 to 5.8e-3 (t 1 the least: out is v rounded), lse 1.4e-3 to 6.1e-3 (t 77 at
 * head dim 128 the most), dqkv 3.0e-3 to 6.1e-3. More heads add a little to a maximum (~15% from
 * 2 heads' rows to 96's, for tails like these): tolerances 2e-2 for the three (over 3 times the
 * worst), and out and dqkv must be further from fp32 than 2e-4 (the tensor cores ran: fp32 is
 * ~1e-6 away) where the tensor cores round something: q, k, v or dout not already bf16 values,
 * or P, below 1 in a row of more than one key. At t = 1 each row's one probability is 1 and the
 * out of a bf16 qkv is its v, unrounded: equal to fp32's to ~1e-7. At other head dims bf16 runs
 * the fp32 kernels: 1e-5, as fp32. */

/* out and dqkv, lse: by precision and head dim */
static bool att_tensor_cores(lw_matmul m, int64_t hd) {
    return m == LW_MATMUL_BF16 && (hd == 64 || hd == 128);
}
static measure att_gemm(lw_matmul m, int64_t hd) {
    return att_tensor_cores(m, hd) ? differing(gemm(2e-2), 2e-4) : gemm(1e-5);
}
static measure att_lse(lw_matmul m, int64_t hd) {
    return lse_measure(att_tensor_cores(m, hd) ? 2e-2 : 1e-5);
}

typedef struct {
    char shape[80];
    int64_t b, t, c, nh;
    int64_t nan_row; /* >= 0: channel 3 of that row's key is NaN (head 0) */
    float *qkv, *dout, *d0, *out, *lse;
    uint16_t *out16; /* out rounded to bf16 (the backward's bf16 out) */
    float *out_w;    /* and widened again */
    uint16_t *qkv16; /* qkv rounded to bf16 (a bf16 QKV GEMM's output) */
    float *qkv_w;    /* and widened again */
    uint16_t *d0_16; /* d0 rounded to bf16 (a bf16 dqkv's start), */
    float *d0_w;     /* and widened again */
} att_args;

/* out, or dqkv from dout (NULL: the forward), of the values qkv: required to differ from fp32
 * where the tensor cores round one of them, or P (t > 1) */
static measure att_measure(const run *r, const att_args *a, const float *qkv, const float *dout) {
    const int64_t no = a->b * a->t * a->c;
    return differing_if(att_gemm(r->matmul, a->c / a->nh),
                        no > 0 && (a->t > 1 || rounded_by(LW_MATMUL_BF16, qkv, 3 * no) ||
                                   (dout != NULL && rounded_by(LW_MATMUL_BF16, dout, no))));
}

static void run_attention_forward(run *r, const void *p) {
    const att_args *a = p;
    const int64_t no = a->b * a->t * a->c;
    const float *qkv = input(r, a->qkv, 3 * no);
    const int64_t hd = a->c / a->nh;
    float *out = output(r, "out", no, att_measure(r, a, a->qkv, NULL));
    float *lse = output(r, "lse", a->b * a->nh * a->t, att_lse(r->matmul, hd));
    float *work = scratch(r, lw_attention_scratch_floats(r->s, a->b, a->t, a->c, a->nh));
    r->nan_fed = a->nan_row >= 0;
    call(r, lw_attention_forward(r->s, out, LW_DTYPE_F32, lse, work, qkv, LW_DTYPE_F32, a->b, a->t,
                                 a->c, a->nh));
    const measure m16 = bf16_step(att_gemm(r->matmul, hd)), mq = att_measure(r, a, a->qkv_w, NULL);
    float *lse_again = scratch(r, a->b * a->nh * a->t);
    uint16_t *out16 = output_bf16_values(r, "out bf16", no, m16);
    call(r, lw_attention_forward(r->s, out16, LW_DTYPE_BF16, lse_again, work, qkv, LW_DTYPE_F32,
                                 a->b, a->t, a->c, a->nh));
    /* a bf16 qkv, its widening, and both in bf16 (the model's pair) */
    const void *q16 = input_bf16(r, a->qkv16, 3 * no);
    float *oq = output(r, "out of bf16 qkv", no, mq);
    call(r, lw_attention_forward(r->s, oq, LW_DTYPE_F32, lse_again, work, q16, LW_DTYPE_BF16, a->b,
                                 a->t, a->c, a->nh));
    float *ow = output(r, "out of bf16 qkv (widened)", no, mq);
    call(r,
         lw_attention_forward(r->s, ow, LW_DTYPE_F32, lse_again, work, input(r, a->qkv_w, 3 * no),
                              LW_DTYPE_F32, a->b, a->t, a->c, a->nh));
    uint16_t *o16 = output_bf16_values(r, "out of bf16 qkv bf16", no, m16);
    call(r, lw_attention_forward(r->s, o16, LW_DTYPE_BF16, lse_again, work, q16, LW_DTYPE_BF16,
                                 a->b, a->t, a->c, a->nh));
}

static void run_attention_backward(run *r, const void *p) {
    const att_args *a = p;
    const int64_t no = a->b * a->t * a->c;
    const float *qkv = input(r, a->qkv, 3 * no), *dout = input(r, a->dout, no);
    const float *out = input(r, a->out, no), *lse = input(r, a->lse, a->b * a->nh * a->t);
    const measure m = att_measure(r, a, a->qkv, a->dout), mq = att_measure(r, a, a->qkv_w, a->dout);
    float *dqkv = accumulated(r, "dqkv", a->d0, 3 * no, m);
    float *work = scratch(r, lw_attention_scratch_floats(r->s, a->b, a->t, a->c, a->nh));
    call(r, lw_attention_backward(r->s, dqkv, LW_DTYPE_F32, work, dout, qkv, LW_DTYPE_F32, out,
                                  LW_DTYPE_F32, lse, a->b, a->t, a->c, a->nh));
    /* out in bf16 (the CPU's, rounded), and the same run on its widening */
    float *d16 = accumulated(r, "dqkv bf16 out", a->d0, 3 * no, m);
    call(r, lw_attention_backward(r->s, d16, LW_DTYPE_F32, work, dout, qkv, LW_DTYPE_F32,
                                  input_bf16(r, a->out16, no), LW_DTYPE_BF16, lse, a->b, a->t, a->c,
                                  a->nh));
    float *dw = accumulated(r, "dqkv bf16 out (widened)", a->d0, 3 * no, m);
    call(r,
         lw_attention_backward(r->s, dw, LW_DTYPE_F32, work, dout, qkv, LW_DTYPE_F32,
                               input(r, a->out_w, no), LW_DTYPE_F32, lse, a->b, a->t, a->c, a->nh));
    /* a bf16 qkv (with the bf16 out), and its widening */
    float *dq = accumulated(r, "dqkv of bf16 qkv", a->d0, 3 * no, mq);
    call(r, lw_attention_backward(
                r->s, dq, LW_DTYPE_F32, work, dout, input_bf16(r, a->qkv16, 3 * no), LW_DTYPE_BF16,
                input_bf16(r, a->out16, no), LW_DTYPE_BF16, lse, a->b, a->t, a->c, a->nh));
    float *dqw = accumulated(r, "dqkv of bf16 qkv (widened)", a->d0, 3 * no, mq);
    call(r, lw_attention_backward(r->s, dqw, LW_DTYPE_F32, work, dout, input(r, a->qkv_w, 3 * no),
                                  LW_DTYPE_F32, input(r, a->out_w, no), LW_DTYPE_F32, lse, a->b,
                                  a->t, a->c, a->nh));
    /* a bf16 dqkv: accumulated in fp32, rounded; against the fp32 run from its widened start */
    float *ds = accumulated(r, "dqkv from a bf16 start", a->d0_w, 3 * no, m);
    call(r, lw_attention_backward(r->s, ds, LW_DTYPE_F32, work, dout, qkv, LW_DTYPE_F32, out,
                                  LW_DTYPE_F32, lse, a->b, a->t, a->c, a->nh));
    uint16_t *ds16 =
        accumulated_bf16(r, "dqkv from a bf16 start bf16", a->d0_16, 3 * no, bf16_step(m));
    call(r, lw_attention_backward(r->s, ds16, LW_DTYPE_BF16, work, dout, qkv, LW_DTYPE_F32, out,
                                  LW_DTYPE_F32, lse, a->b, a->t, a->c, a->nh));
}

/* A bf16 out gives the results its widening gives, bit for bit on the CPU; a bf16 qkv on every
 * device (the tensor-core kernels stage its bits as they stage its widening's, rounded; the
 * others read its widening). */
static void after_attention_backward(const kernel_case *k, const run *r) {
    const att_args *a = k->args;
    same_as_widened(k, r, "dqkv bf16 out", 3 * a->b * a->t * a->c);
    widening_exact(k, r, "dqkv of bf16 qkv", 3 * a->b * a->t * a->c);
    after_bf16_output(k, r, "dqkv from a bf16 start", 3 * a->b * a->t * a->c);
}

/* With a NaN key at row j of head 0: that head's rows from j on are NaN in out and lse, the rows
 * before it and the other heads finite. */
static void after_attention(const kernel_case *k, const run *r) {
    const att_args *a = k->args;
    const int64_t no = a->b * a->t * a->c;
    after_bf16_output(k, r, "out", no);
    after_bf16_output(k, r, "out of bf16 qkv", no);
    widening_exact(k, r, "out of bf16 qkv", no);
    if (a->nan_row < 0) return;
    const float *out = f32_of(r, "out"), *lse = f32_of(r, "lse");
    const int64_t hd = a->c / a->nh;
    bool as_promised = true;
    for (int64_t i = 0; i < a->t; i++)
        for (int64_t h = 0; h < a->nh; h++) {
            const bool nan = h == 0 && i >= a->nan_row;
            as_promised = as_promised && isnan(lse[h * a->t + i]) == nan;
            for (int64_t d = 0; d < hd; d++)
                as_promised = as_promised && isnan(out[i * a->c + h * hd + d]) == nan;
        }
    expect(k, r, as_promised, "a NaN key makes NaN exactly the rows that see it");
}

static void attention_cases(const char *kernel, run_fn fn, after_fn after) {
    const struct {
        int64_t b, t, c, nh, nan_row;
    } shapes[] = {
        {1, 1, 16, 1, -1},      /* one row, head dim 16 */
        {2, 70, 96, 2, -1},     /* head dim 48, t past one 64-row tile */
        {2, 64, 96, 4, -1},     /* head dim 24, exactly one tile */
        {1, 1000, 128, 2, -1},  /* head dim 64, t = 1000 (not a multiple of the tile) */
        {1, 130, 256, 2, -1},   /* head dim 128 */
        {1, 77, 288, 3, -1},    /* head dim 96 */
        {2, 1, 128, 2, -1},     /* head dim 64, one row */
        {3, 77, 384, 3, -1},    /* head dim 128, t short of two tiles */
        {2, 333, 640, 5, -1},   /* head dim 128, five heads, t odd */
        {2, 1024, 768, 12, -1}, /* GPT-2 small's layer */
        {8, 1024, 768, 12, -1}, /* GPT-2 small's layer at its batch of 8 */
        {1, 1024, 768, 6, -1},  /* head dim 128 at GPT-2's width and t */
        {0, 8, 32, 2, -1},      /* no batch: nothing to do */
        {1, 70, 32, 2, 9},      /* a NaN key, rows in two tiles */
    };
    const bool forward = strcmp(kernel, "attention_forward") == 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        if (left_out(shapes[s].t == 1024)) continue;
        att_args a = {.b = shapes[s].b,
                      .t = shapes[s].t,
                      .c = shapes[s].c,
                      .nh = shapes[s].nh,
                      .nan_row = shapes[s].nan_row};
        if (a.nan_row >= 0 && !forward) continue;
        const int64_t no = a.b * a.t * a.c, nl = a.b * a.nh * a.t;
        snprintf(a.shape, sizeof a.shape, "b %lld, t %lld, c %lld, nh %lld (head dim %lld)%s",
                 (long long)a.b, (long long)a.t, (long long)a.c, (long long)a.nh,
                 (long long)(a.c / a.nh), a.nan_row >= 0 ? ", a NaN key" : "");
        a.qkv = scaled_random(3 * no, 2.0f, 0.0f), a.dout = host_random(no), a.d0 = prefill(3 * no);
        if (a.nan_row >= 0) a.qkv[a.nan_row * 3 * a.c + a.c + 3] = NAN;
        a.out = cpu_array(no), a.lse = cpu_array(nl);
        float *work = cpu_array(lw_attention_scratch_floats(NULL, a.b, a.t, a.c, a.nh));
        CHECK_OK(lw_attention_forward(NULL, a.out, LW_DTYPE_F32, a.lse, work, a.qkv, LW_DTYPE_F32,
                                      a.b, a.t, a.c, a.nh));
        a.out16 = malloc(sizeof(uint16_t) * (size_t)(no > 0 ? no : 1));
        a.out_w = cpu_array(no);
        for (int64_t i = 0; i < no; i++) {
            a.out16[i] = bf16_reference(a.out[i]);
            a.out_w[i] = (float)bf16_reference_value(a.out16[i]);
        }
        a.qkv_w = cpu_array(3 * no);
        memcpy(a.qkv_w, a.qkv, sizeof(float) * (size_t)(3 * no));
        a.qkv16 = round_weights(a.qkv_w, 3 * no);
        a.d0_w = cpu_array(3 * no);
        memcpy(a.d0_w, a.d0, sizeof(float) * (size_t)(3 * no));
        a.d0_16 = round_weights(a.d0_w, 3 * no);
        if (have_gpu()) /* the GPU's scratch: D = rowsum(dout * out) alone */
            CHECK_EQ(lw_attention_scratch_floats(gs, a.b, a.t, a.c, a.nh), nl);
        check(&(kernel_case){.kernel = kernel,
                             .shape = a.shape,
                             .fn = fn,
                             .args = &a,
                             .after = after,
                             .large = a.t == 1024,
                             .tensor_cores = true});
        free(a.qkv), free(a.dout), free(a.d0), free(a.out), free(a.lse), free(work);
        free(a.out16), free(a.out_w), free(a.qkv16), free(a.qkv_w), free(a.d0_16), free(a.d0_w);
    }
    /* heads that do not divide the channels: the dispatcher's error, on every device */
    for (int d = 0; d < (have_other ? 2 : 1); d++) {
        lw_stream *s = d == 0 ? NULL : gs;
        float x = 0;
        CHECK_FAILS(forward ? lw_attention_forward(s, &x, LW_DTYPE_F32, &x, &x, &x, LW_DTYPE_F32, 1,
                                                   4, 100, 3)
                            : lw_attention_backward(s, &x, LW_DTYPE_F32, &x, &x, &x, LW_DTYPE_F32,
                                                    &x, LW_DTYPE_F32, &x, 1, 4, 100, 3),
                    LW_ERR_INVALID, "must divide by the heads nh = 3");
    }
}

/* ---- cross-entropy --------------------------------------------------------------------------- *
 * fp32, 1e-5: the logits are fp32 GEMMs summed in other orders (each logit a few ulps of its
 * terms apart), the sums of exponentials are in double on both devices, and the GPU's expf is
 * within 2 ulps of the CPU's: losses relative to each value, lse as a log (lse_measure), dh and
 * dw as GEMM results (gemm). The mean loss: the same rows summed in double, 1e-6. With every
 * target ignored both leave dh and dw exactly as they were. The backward runs after the forward
 * on its own device (the scratch carries the probabilities when the rows fit one chunk) and
 * takes that forward's lse, as a training step does.
 * bf16 (the large shape: c 64, v 50304, three chunks of the GPU's, every 5th target ignored; h in
 * [-1, 1), w in [-0.5, 0.5)), as the linear layer derives: a logit, a sum of 64 products, is off
 * by ~sqrt(64) 2.3e-3 |term| = 3e-3; a row's loss, lse - the target's logit, carries its target
 * logit's error (the lse averages thousands of them): 1e-2 at most over 2400 rows, 3e-2 absolute
 * allowed (the losses are ~12); lse moves by ~1.5e-3 (1e-3 relative, as a log); the mean loss
 * averages 2400 independent errors, ~6e-5: 1e-4 relative (1.2e-3). dh is dominated by -w[target]
 * (dlogits' own rounding is ~0 there: n / count (p - 1) rounds to 1.25 within 2e-5), so its error
 * is w's rounding, at most 2^-8 of the largest value; dw likewise by h's: 1e-2 of the largest
 * value. Simulated (operands rounded as the GPU rounds them, sums exact): losses 9.8e-3 absolute,
 * lse 1.5e-3, mean loss 2e-6, dh 2.7e-3, dw 1.9e-3. And bf16 must have run: losses further than
 * 1e-3 from the CPU's somewhere (fp32 allows 1.2e-4), dh and dw further than 5e-4 of their
 * largest value.
 * TF32 (the same shape): tensor cores take 10-bit mantissas, 8 times finer than bf16, but cuBLAS
 * may truncate rather than round them, which biases every product the same way. Simulated with
 * both (operands rounded, or truncated, to TF32 as the GPU would, sums exact): losses 1.5e-3
 * absolute rounded, 4.5e-3 truncated; lse 1.6e-5 and 1.3e-4 (lse_measure); the mean loss 4e-7 and
 * 9.4e-5 relative (the truncation's bias does not average out); dh 4.8e-4 and 1.3e-3, dw 2.7e-4
 * and 1.2e-3 of the largest value. Tolerances 1.5e-2, 1e-3, 5e-4, and 5e-3 for dh and dw (as the
 * linear layer's). That TF32 ran is the linear layer's check: cuBLAS's FAST_TF32 permits tensor
 * cores, it does not oblige them, and bf16's rounding is lwopt's own. */

static int64_t gpu_chunk_rows(int64_t n, int64_t v) {
    int64_t rows = ((int64_t)1 << 26) / v;
    rows = rows < 1 ? 1 : rows;
    return rows < n ? rows : n;
}

typedef struct {
    char shape[112];
    int64_t n, c, v;
    int ignore_every;
    bool dh, large;
    float *h, *w, *dh0, *dw0;
    int32_t *targets;
    uint16_t *w16;    /* a bf16 head (w: its widened values), or NULL */
    bool bf16_logits; /* the logits (and dlogits) in bf16 */
} ce_args;

/* bf16 logits: the CPU rounds its fp32 logits, a GPU its own (fp32 or bf16-product) sums, so a
 * logit may land a bf16 step (2^-8 of itself) from the CPU's under any product: bf16 products'
 * budget covers it (a loss moves by its target logit's step, ~1e-2 at these logits; lse and the
 * mean by far less; dlogits are rounded to bf16 under bf16 products already), without asking
 * that the results differ. */
static lw_matmul ce_budget(lw_matmul m, bool bf16_logits) {
    return bf16_logits ? LW_MATMUL_BF16 : m;
}
static measure any_difference(measure m) { return differing(m, 0); }

static void ce_forward_measures(lw_matmul m, measure *losses, measure *lse, measure *loss) {
    if (m == LW_MATMUL_FP32)
        *losses = scaled(1e-5), *lse = lse_measure(1e-5), *loss = relative(1e-6, 1e-30);
    else if (m == LW_MATMUL_BF16)
        *losses = differing(absolute(3e-2), 1e-3), *lse = lse_measure(1e-3),
        *loss = relative(1e-4, 1e-30);
    else
        *losses = absolute(1.5e-2), *lse = lse_measure(1e-3), *loss = relative(5e-4, 1e-30);
}

static measure ce_grad_measure(lw_matmul m) {
    return m == LW_MATMUL_FP32   ? gemm(1e-5)
           : m == LW_MATMUL_BF16 ? differing(gemm(1e-2), 5e-4)
                                 : gemm(5e-3);
}

static void run_cross_entropy_forward(run *r, const void *p) {
    const ce_args *a = p;
    const lw_dtype lt = a->bf16_logits ? LW_DTYPE_BF16 : LW_DTYPE_F32;
    measure ml, ms, mloss;
    ce_forward_measures(ce_budget(r->matmul, a->bf16_logits), &ml, &ms, &mloss);
    if (a->bf16_logits) ml = any_difference(ml);
    const float *h = input(r, a->h, a->n * a->c);
    const int32_t *targets = input_ids(r, a->targets, a->n);
    float *work = scratch(r, lw_cross_entropy_scratch_floats(r->s, a->n, a->v));
    for (int widened = 0; widened < 1 + (a->w16 != NULL); widened++) {
        lw_dtype wt;
        const void *w = input_typed(r, a->w, widened ? NULL : a->w16, a->v * a->c, &wt);
        float *losses = output(r, widened ? "losses (widened)" : "losses", a->n, ml);
        float *lse = output(r, widened ? "lse (widened)" : "lse", a->n, ms);
        double loss = -1;
        call(r, lw_cross_entropy_forward(r->s, losses, lse, work, h, w, wt, lt, targets, a->n, a->c,
                                         a->v, &loss));
        result_of(r, widened ? "loss (widened)" : "loss", loss, mloss);
    }
    if (!a->bf16_logits) return;
    /* the same head with fp32 logits, for the CPU's check that the rounding happened */
    ce_forward_measures(r->matmul, &ml, &ms, &mloss);
    float *losses32 = output(r, "losses (fp32 logits)", a->n, ml);
    double loss = -1;
    call(r, lw_cross_entropy_forward(r->s, losses32, scratch(r, a->n), work, h,
                                     input(r, a->w, a->v * a->c), LW_DTYPE_F32, LW_DTYPE_F32,
                                     targets, a->n, a->c, a->v, &loss));
}

/* loss_scale n: dlogits = n / count (p - onehot), entries of order 1, not 1 / n */
static void run_cross_entropy_backward(run *r, const void *p) {
    const ce_args *a = p;
    const float *h = input(r, a->h, a->n * a->c);
    const int32_t *targets = input_ids(r, a->targets, a->n);
    float *work = scratch(r, lw_cross_entropy_scratch_floats(r->s, a->n, a->v));
    float *losses = scratch(r, a->n), *lse = scratch(r, a->n);
    const lw_dtype lt = a->bf16_logits ? LW_DTYPE_BF16 : LW_DTYPE_F32;
    measure m = ce_grad_measure(ce_budget(r->matmul, a->bf16_logits));
    if (a->bf16_logits) m = any_difference(m);
    for (int widened = 0; widened < 1 + (a->w16 != NULL); widened++) {
        lw_dtype wt;
        const void *w = input_typed(r, a->w, widened ? NULL : a->w16, a->v * a->c, &wt);
        float *dh =
            a->dh ? accumulated(r, widened ? "dh (widened)" : "dh", a->dh0, a->n * a->c, m)
                  : NULL;
        float *dw = accumulated(r, widened ? "dw (widened)" : "dw", a->dw0, a->v * a->c, m);
        double loss = 0;
        call(r, lw_cross_entropy_forward(r->s, losses, lse, work, h, w, wt, lt, targets, a->n, a->c,
                                         a->v, &loss));
        call(r, lw_cross_entropy_backward(r->s, dh, dw, work, h, w, wt, lt, targets, lse, a->n,
                                          a->c, a->v, (float)a->n));
    }
}

/* every target ignored: loss 0, nothing added */
static void after_cross_entropy(const kernel_case *k, const run *r) {
    const ce_args *a = k->args;
    const bool forward = strcmp(k->kernel, "cross_entropy_forward") == 0;
    if (a->w16 != NULL && forward) {
        same_as_widened(k, r, "losses", a->n);
        same_as_widened(k, r, "lse", a->n);
        if (on_cpu(r->device))
            expect(k, r, result_named(r, "loss") == result_named(r, "loss (widened)"),
                   "a bf16 head gives its widening's mean loss, bit for bit");
    } else if (a->w16 != NULL) {
        if (a->dh) same_as_widened(k, r, "dh", a->n * a->c);
        same_as_widened(k, r, "dw", a->v * a->c);
    }
    if (forward && a->bf16_logits && on_cpu(r->device) && a->ignore_every != 1) {
        /* bf16 logits round: some loss moves, none by more than a few of its logits' steps */
        const float *l16 = f32_of(r, "losses"), *l32 = f32_of(r, "losses (fp32 logits)");
        double most = 0;
        for (int64_t i = 0; i < a->n; i++)
            most = fmax(most, fabs((double)l16[i] - l32[i]));
        expect(k, r, most > 0 && most < 3e-2, "bf16 logits: the losses within rounding of fp32's");
    }
    if (a->ignore_every != 1) return;
    if (forward) {
        expect(k, r, result_named(r, "loss") == 0.0, "no counted row: loss 0");
        return;
    }
    expect(k, r,
           memcmp(f32_of(r, "dh"), a->dh0, 4 * (size_t)(a->n * a->c)) == 0 &&
               memcmp(f32_of(r, "dw"), a->dw0, 4 * (size_t)(a->v * a->c)) == 0,
           "no counted row: dh and dw as they were");
}

static void cross_entropy_cases(const char *kernel, run_fn fn, after_fn after) {
    const struct {
        int64_t n, c, v;
        int ignore_every;
        bool dh, bf16_w, bf16_logits;
    } shapes[] = {
        {7, 33, 50, 3, true, false, false},       /* one chunk: the probabilities are kept */
        {1, 8, 1, 0, true, false, false},         /* one row, one class: loss 0, gradient 0 */
        {300, 40, 1000, 4, false, false, false},  /* dh NULL */
        {5, 8, 10, 1, true, false, false},        /* every target ignored */
        {0, 8, 10, 0, true, false, false},        /* no rows */
        {3000, 64, 50304, 5, true, false, false}, /* three of the GPU's chunks of 1334 rows, the
                                                     last short */
        {7, 33, 50, 3, true, true, false},        /* a bf16 head */
        {300, 40, 1000, 4, false, true, false},   /* no dh: w is read by the logits alone */
        {3000, 64, 50304, 5, true, true, false},
        {7, 33, 50, 3, true, false, true},       /* bf16 logits: one chunk, the logits kept */
        {300, 40, 1000, 4, false, true, true},   /* with a bf16 head, no dh */
        {5, 8, 10, 1, true, false, true},        /* every target ignored */
        {3000, 64, 50304, 5, true, false, true}, /* two of the GPU's bf16 chunks of 2668 rows */
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        if (left_out(shapes[s].v == 50304)) continue;
        ce_args a = {.n = shapes[s].n,
                     .c = shapes[s].c,
                     .v = shapes[s].v,
                     .ignore_every = shapes[s].ignore_every,
                     .dh = shapes[s].dh,
                     .large = shapes[s].v == 50304,
                     .bf16_logits = shapes[s].bf16_logits};
        snprintf(a.shape, sizeof a.shape, "n %lld, c %lld, v %lld%s%s%s%s", (long long)a.n,
                 (long long)a.c, (long long)a.v, a.ignore_every == 1 ? ", all ignored" : "",
                 a.dh ? "" : ", no dh", shapes[s].bf16_w ? ", bf16 head" : "",
                 a.bf16_logits ? ", bf16 logits" : "");
        a.h = host_random(a.n * a.c), a.w = scaled_random(a.v * a.c, 0.5f, 0.0f);
        if (shapes[s].bf16_w) a.w16 = round_weights(a.w, a.v * a.c);
        a.targets = random_ids(a.n, a.v);
        for (int64_t i = 0; i < a.n && a.ignore_every > 0; i++)
            if (i % a.ignore_every == a.ignore_every - 1)
                a.targets[i] = i % 2 ? -1 : (int32_t)(a.v + i); /* outside [0, v): ignored */
        a.dh0 = prefill(a.n * a.c), a.dw0 = prefill(a.v * a.c);
        if (have_gpu()) /* the GPU's chunks of 2^26 floats of logits */
            CHECK_EQ(lw_cross_entropy_scratch_floats(gs, a.n, a.v), gpu_chunk_rows(a.n, a.v) * a.v);
        check(&(kernel_case){.kernel = kernel,
                             .shape = a.shape,
                             .fn = fn,
                             .args = &a,
                             .after = after,
                             .large = a.large,
                             .gemm = true});
        free(a.h), free(a.w), free(a.targets), free(a.dh0), free(a.dw0), free(a.w16);
    }
}

/* ---- the vocabulary-parallel head (tensor parallelism) --------------------------------------- *
 * One rank's rows [first, first + v) of a vocabulary `vocab` (rows past it: padding) and a second
 * rank's statistics made up on the host, as the all-gather would bring them. Tolerances as the
 * one-rank head's (fp32 GEMMs in other orders, expf within 2 ulps, sums in double on both): the
 * statistics' max and target logit are logits (1e-5 of the largest), the sums 1e-5 relative; the
 * combination runs on the CPU's statistics on every device, in the same order, with the same
 * double formulas: 1e-6 (exp and log of CUDA and glibc differ in the last double bits only); dh
 * and dw are GEMM results, 1e-5 of the largest value. The backward runs after its own device's
 * partial forward (the scratch) with the CPU's lse: dlogits depend on lse alone. The padding's dw
 * must stay as it was, exactly.
 * TF32 and bf16 (the large shape: a rank of two over GPT-2's vocabulary, 47 rows of padding, the
 * one-rank head's inputs), simulated as the one-rank head's (operands rounded to bf16, rounded or
 * truncated to TF32, sums exact; the backward's dlogits rounded too, as the GPU rounds them for
 * its two GEMMs): bf16: maxima and target logits 9.9e-4 of their scale, sums 1.0e-2 (each sum
 * moves with its row's max), dh 4.4e-3, dw 3.3e-3 of the largest value (this rank's share of dh
 * is smaller than the whole head's, its rounding not); TF32 rounded and truncated: logits 1.1e-4
 * and 4.2e-4, sums 1.3e-3 and 3.9e-3, dh 5.3e-4 and 1.2e-3, dw 2.4e-4 and 8.1e-4. Tolerances:
 * bf16 5e-3, 3e-2, and 2e-2 for dh and dw (the logits further than 1e-4 from fp32's, dh and dw
 * than 5e-4: bf16 ran); TF32 2e-3, 1.5e-2, and 5e-3. The combination takes no GEMM. */

typedef struct {
    char shape[128];
    int64_t n, c, v, first, vocab;
    bool large;
    float *h, *w, *stats, *lse, *dh0, *dw0; /* stats: [2, 3, n], this rank's and a peer's */
    int32_t *targets;
    uint16_t *w16;    /* this rank's rows of a bf16 head (w: their widened values), or NULL */
    bool bf16_logits; /* the logits (and dlogits) in bf16: bf16 products' budget, as above */
} head_args;

static measure head_stats_measure(lw_matmul m) {
    return m == LW_MATMUL_FP32   ? stats_measure(1e-5, 1e-5)
           : m == LW_MATMUL_TF32 ? stats_measure(2e-3, 1.5e-2)
                                 : differing(stats_measure(5e-3, 3e-2), 1e-4);
}
static measure head_grad_measure(lw_matmul m) {
    return m == LW_MATMUL_FP32   ? gemm(1e-5)
           : m == LW_MATMUL_TF32 ? gemm(5e-3)
                                 : differing(gemm(2e-2), 5e-4);
}

static void run_partial_forward(run *r, const void *p) {
    const head_args *a = p;
    const float *h = input(r, a->h, a->n * a->c);
    const int32_t *targets = input_ids(r, a->targets, a->n);
    float *work = scratch(r, lw_cross_entropy_scratch_floats(r->s, a->n, a->v));
    const lw_dtype lt = a->bf16_logits ? LW_DTYPE_BF16 : LW_DTYPE_F32;
    measure m = head_stats_measure(ce_budget(r->matmul, a->bf16_logits));
    if (a->bf16_logits) m = any_difference(m);
    for (int widened = 0; widened < 1 + (a->w16 != NULL); widened++) {
        lw_dtype wt;
        const void *w = input_typed(r, a->w, widened ? NULL : a->w16, a->v * a->c, &wt);
        float *stats = output(r, widened ? "stats (widened)" : "stats", 3 * a->n, m);
        call(r, lw_cross_entropy_partial_forward(r->s, stats, work, h, w, wt, lt, targets, a->n,
                                                 a->c, a->v, a->first, a->vocab));
    }
}

static void after_partial_forward(const kernel_case *k, const run *r) {
    const head_args *a = k->args;
    if (a->w16 != NULL) same_as_widened(k, r, "stats", 3 * a->n);
}

static void run_combine(run *r, const void *p) {
    const head_args *a = p;
    const float *stats = input(r, a->stats, 6 * a->n);
    const int32_t *targets = input_ids(r, a->targets, a->n);
    float *losses = output(r, "losses", a->n, relative(1e-6, 1.0));
    float *lse = output(r, "lse", a->n, relative(1e-6, 1.0));
    double loss = -1;
    call(r, lw_cross_entropy_combine(r->s, losses, lse, stats, 2, targets, a->n, a->vocab, &loss));
    result_of(r, "loss", loss, relative(1e-6, 1.0));
}

static void run_partial_backward(run *r, const void *p) {
    const head_args *a = p;
    const float *h = input(r, a->h, a->n * a->c);
    const int32_t *targets = input_ids(r, a->targets, a->n);
    const float *lse = input(r, a->lse, a->n);
    float *stats = scratch(r, 3 * a->n);
    float *work = scratch(r, lw_cross_entropy_scratch_floats(r->s, a->n, a->v));
    const lw_dtype lt = a->bf16_logits ? LW_DTYPE_BF16 : LW_DTYPE_F32;
    measure m = head_grad_measure(ce_budget(r->matmul, a->bf16_logits));
    if (a->bf16_logits) m = any_difference(m);
    for (int widened = 0; widened < 1 + (a->w16 != NULL); widened++) {
        lw_dtype wt;
        const void *w = input_typed(r, a->w, widened ? NULL : a->w16, a->v * a->c, &wt);
        float *dh = accumulated(r, widened ? "dh (widened)" : "dh", a->dh0, a->n * a->c, m);
        float *dw = accumulated(r, widened ? "dw (widened)" : "dw", a->dw0, a->v * a->c, m);
        call(r, lw_cross_entropy_partial_forward(r->s, stats, work, h, w, wt, lt, targets, a->n,
                                                 a->c, a->v, a->first, a->vocab));
        call(r,
             lw_cross_entropy_partial_backward(r->s, dh, dw, work, h, w, wt, lt, targets, lse, a->n,
                                               a->c, a->v, a->first, a->vocab, (float)a->n));
    }
}

/* The rows of [first, first + v) below vocab: the real ones; the padding's dw is untouched. */
static void after_partial_backward(const kernel_case *k, const run *r) {
    const head_args *a = k->args;
    const int64_t real = a->vocab - a->first < 0      ? 0
                         : a->vocab - a->first < a->v ? a->vocab - a->first
                                                      : a->v;
    expect(k, r,
           memcmp(f32_of(r, "dw") + real * a->c, a->dw0 + real * a->c,
                  4 * (size_t)((a->v - real) * a->c)) == 0,
           "the padding's dw is untouched");
    if (a->w16 != NULL) {
        same_as_widened(k, r, "dh", a->n * a->c);
        same_as_widened(k, r, "dw", a->v * a->c);
    }
}

static void head_cases(const char *kernel, run_fn fn, after_fn after) {
    const struct {
        int64_t n, c, v, first, vocab;
        bool bf16_w, bf16_logits;
    } shapes[] = {
        {7, 33, 25, 25, 50, false, false},             /* one chunk: the logits are kept */
        {7, 33, 26, 26, 50, false, false},             /* the last rank: 24 real rows, 2 of
                                                          padding */
        {5, 8, 4, 8, 8, false, false},                 /* only padding here */
        {0, 8, 4, 0, 8, false, false},                 /* no rows */
        {3000, 64, 25152, 25152, 50257, false, false}, /* two of the GPU's chunks of 2668 rows;
                                                          47 of padding */
        {7, 33, 26, 26, 50, true, false},              /* a bf16 head */
        {3000, 64, 25152, 25152, 50257, true, false},
        {7, 33, 26, 26, 50, false, true},             /* bf16 logits */
        {3000, 64, 25152, 25152, 50257, false, true}, /* one of the GPU's bf16 chunks */
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        if (left_out(shapes[s].v == 25152)) continue;
        /* the combination reads no head: bf16 heads and logits are the forward's and
         * backward's cases */
        if ((shapes[s].bf16_w || shapes[s].bf16_logits) && fn == run_combine) continue;
        head_args a = {.n = shapes[s].n,
                       .c = shapes[s].c,
                       .v = shapes[s].v,
                       .first = shapes[s].first,
                       .vocab = shapes[s].vocab,
                       .large = shapes[s].v == 25152,
                       .bf16_logits = shapes[s].bf16_logits};
        const int64_t n = a.n;
        snprintf(a.shape, sizeof a.shape, "n %lld, c %lld, rows [%lld, +%lld) of %lld%s%s",
                 (long long)n, (long long)a.c, (long long)a.first, (long long)a.v,
                 (long long)a.vocab, shapes[s].bf16_w ? ", bf16 head" : "",
                 a.bf16_logits ? ", bf16 logits" : "");
        a.h = host_random(n * a.c), a.w = scaled_random(a.v * a.c, 0.5f, 0.0f);
        if (shapes[s].bf16_w) a.w16 = round_weights(a.w, a.v * a.c);
        a.targets = random_ids(n, a.vocab);
        for (int64_t i = 0; i < n; i++) {
            if (i % 5 == 4) a.targets[i] = i % 2 ? -1 : (int32_t)a.vocab; /* ignored */
            if (i % 7 == 3) a.targets[i] = (int32_t)a.first;              /* some held here */
            if (a.targets[i] == (int32_t)a.first && a.first >= a.vocab) a.targets[i] = -1;
        }
        /* this rank's statistics from the CPU, a made-up peer's of the same scale, and their
         * combination: the inputs of the combine and the backward */
        a.stats = cpu_array(6 * n), a.lse = cpu_array(n);
        float *work = cpu_array(lw_cross_entropy_scratch_floats(NULL, n, a.v)),
              *losses = cpu_array(n);
        CHECK_OK(lw_cross_entropy_partial_forward(NULL, a.stats, work, a.h, a.w, LW_DTYPE_F32,
                                                  LW_DTYPE_F32, a.targets, n, a.c, a.v, a.first,
                                                  a.vocab));
        for (int64_t i = 0; i < n; i++) {
            a.stats[3 * n + i] = 0.5f * frand();
            a.stats[4 * n + i] = 100.0f + 50.0f * frand();
            a.stats[5 * n + i] = 0.0f;
        }
        double loss = 0;
        CHECK_OK(lw_cross_entropy_combine(NULL, losses, a.lse, a.stats, 2, a.targets, n, a.vocab,
                                          &loss));
        a.dh0 = host_random(n * a.c), a.dw0 = host_random(a.v * a.c);
        if (have_gpu())
            CHECK_EQ(lw_cross_entropy_scratch_floats(gs, n, a.v), gpu_chunk_rows(n, a.v) * a.v);
        check(&(kernel_case){.kernel = kernel,
                             .shape = a.shape,
                             .fn = fn,
                             .args = &a,
                             .after = after,
                             .large = a.large,
                             .gemm = fn != run_combine});
        free(a.h), free(a.w), free(a.targets), free(a.stats), free(a.lse), free(work), free(losses);
        free(a.w16);
        free(a.dh0), free(a.dw0);
    }
}

/* ---- a mixture of experts' router and load-balancing loss ------------------------------------ *
 * Router forward: the experts are ranked by logit on both devices with the same loops, so they
 * agree exactly, ties included (logits on a grid of quarters: most rows tie), and NaN and inf
 * rows too (the first untaken candidate is taken whatever it holds). probs: CUDA's expf is within
 * 2 ulps, glibc's within 1; the row sum (double) and the scaling then move a probability by at
 * most ~5 ulps (6e-7 relative): 1e-6. weights = p / z, both carrying that error: 2e-6. Router
 * backward, from the CPU's probs and experts: the same float operations in the same order, no
 * FMA on either side: bit for bit. Aux loss: the column sums are taken in double in other orders
 * (chunks of rows, a tree in each) over positive values: far below 1e-10 of the loss. Its
 * backward: the same double expression, rounded once per column, added in float: bit for bit. */

typedef struct {
    char shape[80];
    int64_t n, e, k;
    float *logits, *probs, *weights, *dweights, *dprobs, *dl0;
    int32_t *experts;
} router_args;

static const float MOE_COEF = 0.01f;

static void run_router_forward(run *r, const void *p) {
    const router_args *a = p;
    const float *logits = input(r, a->logits, a->n * a->e);
    int32_t *experts = output_ids(r, "experts", a->n * a->k);
    float *weights = output(r, "weights", a->n * a->k, scaled(2e-6));
    float *probs = output(r, "probs", a->n * a->e, scaled(1e-6));
    r->nan_fed = any_nan(a->logits, a->n * a->e) || any_nan(a->probs, a->n * a->e);
    call(r, lw_moe_router_forward(r->s, experts, weights, probs, logits, a->n, a->e, a->k));
}

/* onto non-zero dlogits, with and without dprobs */
static void run_router_backward(run *r, const void *p) {
    const router_args *a = p;
    const int64_t ne = a->n * a->e;
    const float *dweights = input(r, a->dweights, a->n * a->k), *dprobs = input(r, a->dprobs, ne);
    const float *probs = input(r, a->probs, ne);
    const int32_t *experts = input_ids(r, a->experts, a->n * a->k);
    float *dl = accumulated(r, "dlogits", a->dl0, ne, bits());
    float *dl_alone = accumulated(r, "dlogits, no dprobs", a->dl0, ne, bits());
    r->nan_fed = any_nan(a->probs, ne);
    call(r, lw_moe_router_backward(r->s, dl, dweights, dprobs, probs, experts, a->n, a->e, a->k));
    call(r,
         lw_moe_router_backward(r->s, dl_alone, dweights, NULL, probs, experts, a->n, a->e, a->k));
}

static void run_aux_forward(run *r, const void *p) {
    const router_args *a = p;
    const float *probs = input(r, a->probs, a->n * a->e);
    const int32_t *experts = input_ids(r, a->experts, a->n * a->k);
    double loss = -1;
    r->nan_fed = any_nan(a->probs, a->n * a->e);
    call(r, lw_moe_aux_loss_forward(r->s, probs, experts, a->n, a->e, a->k, MOE_COEF, &loss));
    result_of(r, "loss", loss, relative(1e-10, 1e-300));
}

static void run_aux_backward(run *r, const void *p) {
    const router_args *a = p;
    const int32_t *experts = input_ids(r, a->experts, a->n * a->k);
    float *dprobs = accumulated(r, "dprobs", a->dl0, a->n * a->e, bits());
    call(r, lw_moe_aux_loss_backward(r->s, dprobs, experts, a->n, a->e, a->k, MOE_COEF, 0.5f));
}

/* coef e sum_j (count_j / (n k)) (col_j / n), in double: the CPU's, in another order */
static void after_aux_forward(const kernel_case *k, const run *r) {
    const router_args *a = k->args;
    if (!on_cpu(r->device) || a->n == 0 || any_nan(a->probs, a->n * a->e)) return;
    double total = 0;
    for (int64_t j = 0; j < a->e; j++) {
        double count = 0, col = 0;
        for (int64_t i = 0; i < a->n * a->k; i++)
            count += a->experts[i] == j;
        for (int64_t i = 0; i < a->n; i++)
            col += a->probs[i * a->e + j];
        total += count / (double)(a->n * a->k) * (col / (double)a->n);
    }
    const double want = MOE_COEF * (double)a->e * total, got = result_named(r, "loss");
    expect(k, r, fabs(got - want) <= 1e-12 * want, "the loss is the formula's, in double");
}

static void router_cases(const char *kernel, run_fn fn, after_fn after) {
    const struct {
        int64_t n, e, k;
        bool ties;
    } shapes[] = {
        {1, 1, 1, false},     {7, 5, 1, true},     /* k = 1: every weight is 1 */
        {33, 8, 2, true},     {130, 13, 13, true}, /* k = e: every expert, ranked */
        {1000, 64, 4, true},  {5000, 8, 2, false}, /* the GPU's aux statistics in 3 chunks */
        {150000, 8, 2, true},                      /* 64 chunks, the most */
        {0, 4, 2, false},                          /* no tokens */
        {4, 5, 2, false},                          /* NaN and infinite logits */
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        router_args a = {.n = shapes[s].n, .e = shapes[s].e, .k = shapes[s].k};
        const int64_t ne = a.n * a.e, nk = a.n * a.k;
        const bool odd = s == sizeof shapes / sizeof shapes[0] - 1;
        const char *kind = shapes[s].ties ? ", ties" : odd ? ", NaN and inf" : "";
        snprintf(a.shape, sizeof a.shape, "n %lld, e %lld, k %lld%s", (long long)a.n,
                 (long long)a.e, (long long)a.k, kind);
        a.logits = scaled_random(ne, 3.0f, 0.0f);
        for (int64_t i = 0; i < ne && shapes[s].ties; i++)
            a.logits[i] = roundf(a.logits[i] * 4.0f) / 4.0f;
        if (odd) { /* row 0 clean; a NaN first, a NaN later, +inf with a -inf */
            a.logits[5] = NAN, a.logits[13] = NAN, a.logits[17] = INFINITY;
            a.logits[19] = -INFINITY;
        }
        a.experts = malloc(sizeof(int32_t) * (size_t)(nk > 0 ? nk : 1));
        a.weights = cpu_array(nk), a.probs = cpu_array(ne);
        CHECK_OK(
            lw_moe_router_forward(NULL, a.experts, a.weights, a.probs, a.logits, a.n, a.e, a.k));
        a.dweights = host_random(nk), a.dprobs = host_random(ne), a.dl0 = prefill(ne);
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        free(a.logits), free(a.experts), free(a.weights), free(a.probs), free(a.dweights);
        free(a.dprobs), free(a.dl0);
    }
}

/* ---- gather and combine ---------------------------------------------------------------------- *
 * The gather, its backward, the combine and dsrc are the CPU's float operations in the CPU's
 * order (each destination row adds its sources in the order of the list): bit for bit. dw: the
 * dot product in double in another order, rounded once, then added in float: within an ulp of
 * the dot, 1e-6 of the values (1% of the largest below that: a dw can cancel). */

typedef struct {
    char shape[112];
    int64_t m, c, nrows;
    int32_t *rows;
    float *x, *src, *w, *dout, *dy, *dx0, *dsrc0, *dw0;
} rows_args;

static void run_gather_forward(run *r, const void *p) {
    const rows_args *a = p;
    const float *x = input(r, a->x, a->nrows * a->c);
    const int32_t *rows = input_ids(r, a->rows, a->m);
    float *out = output(r, "out", a->m * a->c, bits());
    call(r, lw_gather_forward(r->s, out, x, rows, a->m, a->c));
}

static void run_gather_backward(run *r, const void *p) {
    const rows_args *a = p;
    const float *dout = input(r, a->dout, a->m * a->c);
    const int32_t *rows = input_ids(r, a->rows, a->m);
    float *dx = accumulated(r, "dx", a->dx0, a->nrows * a->c, bits());
    call(r, lw_gather_backward(r->s, dx, dout, rows, a->m, a->c));
}

static void run_combine_forward(run *r, const void *p) {
    const rows_args *a = p;
    const float *src = input(r, a->src, a->m * a->c), *w = input(r, a->w, a->m);
    const int32_t *rows = input_ids(r, a->rows, a->m);
    float *y = accumulated(r, "y", a->dx0, a->nrows * a->c, bits());
    call(r, lw_combine_forward(r->s, y, src, w, rows, a->m, a->c));
}

/* both outputs, then each alone */
static void run_combine_backward(run *r, const void *p) {
    const rows_args *a = p;
    const int64_t mc = a->m * a->c;
    const float *dy = input(r, a->dy, a->nrows * a->c), *src = input(r, a->src, mc);
    const float *w = input(r, a->w, a->m);
    const int32_t *rows = input_ids(r, a->rows, a->m);
    float *dsrc = accumulated(r, "dsrc", a->dsrc0, mc, bits());
    float *dw = accumulated(r, "dw", a->dw0, a->m, scaled(1e-6));
    float *dsrc_alone = accumulated(r, "dsrc alone", a->dsrc0, mc, bits());
    float *dw_alone = accumulated(r, "dw alone", a->dw0, a->m, scaled(1e-6));
    call(r, lw_combine_backward(r->s, dsrc, dw, dy, src, w, rows, a->m, a->c));
    call(r, lw_combine_backward(r->s, dsrc_alone, NULL, dy, src, w, rows, a->m, a->c));
    call(r, lw_combine_backward(r->s, NULL, dw_alone, dy, src, w, rows, a->m, a->c));
}

/* The host's loops, float by float in the list's order, for the CPU; each output alone is the
 * same as both together on every device. */
static void after_rows(const kernel_case *k, const run *r) {
    const rows_args *a = k->args;
    const int64_t c = a->c;
    if (strcmp(k->kernel, "combine_backward") == 0) {
        expect(k, r,
               memcmp(f32_of(r, "dsrc"), f32_of(r, "dsrc alone"), 4 * (size_t)(a->m * c)) == 0 &&
                   memcmp(f32_of(r, "dw"), f32_of(r, "dw alone"), 4 * (size_t)a->m) == 0,
               "dsrc and dw alone are as together, bit for bit");
        return;
    }
    if (!on_cpu(r->device)) return;
    const bool gather = strcmp(k->kernel, "gather_forward") == 0;
    const bool combine = strcmp(k->kernel, "combine_forward") == 0;
    const int64_t n = gather ? a->m * c : a->nrows * c;
    float *want = cpu_array(n);
    if (!gather) memcpy(want, a->dx0, 4 * (size_t)n);
    for (int64_t i = 0; i < a->m; i++)
        for (int64_t j = 0; j < c; j++) {
            const int64_t at = (int64_t)a->rows[i] * c + j;
            if (gather)
                want[i * c + j] = a->x[at];
            else if (combine)
                want[at] += a->w[i] * a->src[i * c + j];
            else
                want[at] += a->dout[i * c + j];
        }
    const char *out = gather ? "out" : combine ? "y" : "dx";
    expect(k, r, memcmp(f32_of(r, out), want, 4 * (size_t)n) == 0, "the host's loops, bit for bit");
    free(want);
}

typedef struct { /* a family's kernel, its run function and hook */
    const char *kernel;
    run_fn fn;
    after_fn after;
} rows_kernel;

static void rows_case(const rows_kernel *k, int64_t m, int64_t c, int64_t nrows,
                      const int32_t *given, const char *kind) {
    rows_args a = {.m = m, .c = c, .nrows = nrows};
    snprintf(a.shape, sizeof a.shape, "m %lld, c %lld, %lld rows, %s", (long long)m, (long long)c,
             (long long)nrows, kind);
    a.rows = random_ids(m, nrows);
    if (given != NULL) memcpy(a.rows, given, sizeof(int32_t) * (size_t)m);
    if (given == NULL && nrows > 65536)
        for (int64_t i = 0; i < m; i += 3)
            a.rows[i] = 65535 + (int32_t)(i % 5); /* repeats past 2^16: both passes of the sort */
    a.x = host_random(nrows * c), a.src = host_random(m * c), a.w = host_random(m);
    a.dout = host_random(m * c), a.dy = host_random(nrows * c);
    a.dx0 = prefill(nrows * c), a.dsrc0 = prefill(m * c), a.dw0 = prefill(m);
    check(&(kernel_case){
        .kernel = k->kernel, .shape = a.shape, .fn = k->fn, .args = &a, .after = k->after});
    free(a.rows), free(a.x), free(a.src), free(a.w), free(a.dout), free(a.dy), free(a.dx0);
    free(a.dsrc0), free(a.dw0);
}

/* A mixture of experts' dispatch order: the (token, slot) pairs of a routing sorted by expert
 * (stable), rows[i] = the token of the i-th: each token's row repeats k times. */
static void dispatch_case(const rows_kernel *kernel, int64_t n, int64_t e, int64_t k, int64_t c) {
    float *logits = host_random(n * e), *weights = cpu_array(n * k), *probs = cpu_array(n * e);
    int32_t *experts = malloc(sizeof(int32_t) * (size_t)(n * k));
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)(n * k));
    CHECK_OK(lw_moe_router_forward(NULL, experts, weights, probs, logits, n, e, k));
    int64_t at = 0;
    for (int32_t j = 0; j < e; j++)
        for (int64_t i = 0; i < n * k; i++)
            if (experts[i] == j) rows[at++] = (int32_t)(i / k);
    CHECK(at == n * k);
    rows_case(kernel, n * k, c, n, rows, "dispatch order");
    free(logits), free(weights), free(probs), free(experts), free(rows);
}

static void rows_cases(const char *kernel, run_fn fn, after_fn after) {
    const rows_kernel k = {kernel, fn, after};
    rows_case(&k, 1, 1, 1, NULL, "random");
    rows_case(&k, 300, 37, 50, NULL, "random, repeats");
    rows_case(&k, 200, 300, 1000, NULL, "random, few repeats, 3 channel tiles");
    rows_case(&k, 3000, 33, 70000, NULL, "random, rows past 2^16");
    rows_case(&k, 0, 8, 10, NULL, "no rows listed");
    rows_case(&k, 5, 0, 10, NULL, "no columns");
    dispatch_case(&k, 1000, 8, 2, 100);
    dispatch_case(&k, 77, 5, 5, 129); /* k = e: every token to every expert */
    dispatch_case(&k, 4096, 16, 1, 768);
}

/* ---- the optimizers' kernels (LWI_CORE_KERNELS), through their public calls ------------------ */

/* muon_momentum, through lw_muon_momentum: two steps, so that the momentum carried between them
 * is compared too, in every weight decay mode, with and without Nesterov. A few chained float
 * operations per element, any of which the GPU may fuse into one FMA (one rounding instead of
 * two): a few ulps, relative to the values (1e-3 below: values that cancel). */
typedef struct {
    char shape[80];
    int64_t n;
    lw_muon_options o;
    float *w, *g, *m;
} momentum_args;

static void run_muon_momentum(run *r, const void *p) {
    const momentum_args *a = p;
    const float *g = input(r, a->g, a->n);
    float *w = updated(r, "w", a->w, a->n, relative(1e-6, 1e-3));
    float *m = updated(r, "m", a->m, a->n, relative(1e-6, 1e-3));
    float *u = output(r, "u", a->n, relative(1e-6, 1e-3));
    lw_muon *muon = NULL;
    call(r, lw_muon_new(&a->o, &muon));
    for (int step = 0; step < 2 && muon != NULL; step++)
        call(r, lw_muon_momentum(muon, r->s, w, g, m, u, a->n, 0.02f, 0.1f, 0.5f));
    call(r, lw_stream_synchronize(r->s));
    lw_muon_free(muon);
}

static void momentum_cases(const char *kernel, run_fn fn, after_fn after) {
    const int64_t sizes[] = {0, 1, 10007};
    for (int s = 0; s < 3; s++)
        for (int mode = LW_WD_DECOUPLED; mode <= LW_WD_L2; mode++)
            for (int nesterov = 0; nesterov < 2; nesterov++) {
                momentum_args a = {.n = sizes[s], .o = lw_muon_defaults()};
                a.o.momentum = 0.9f, a.o.nesterov = nesterov;
                a.o.weight_decay_mode = (lw_weight_decay)mode;
                snprintf(a.shape, sizeof a.shape, "n %lld, weight decay %s%s", (long long)a.n,
                         lw_weight_decay_name(a.o.weight_decay_mode), nesterov ? ", nesterov" : "");
                a.w = host_random(a.n), a.g = host_random(a.n), a.m = host_random(a.n);
                check(&(kernel_case){
                    .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
                free(a.w), free(a.g), free(a.m);
            }
}

/* newton_schulz, through lw_muon_orthogonalize, in each of Newton-Schulz's precisions (Muon's
 * own setting, not the device's matmul), against the CPU's fp32, ||got - cpu||_F / ||cpu||_F:
 *   fp32: cuBLAS sums in another order than OpenBLAS (and SYRK/SYMM there, perhaps GEMMs here);
 *     float rounding, amplified by the iteration's slope near 0 (up to ~4 per step): 1e-5; for a
 *     single vector, whose result can hang on the rounding of its norm, the slope measured below
 *     times (q + 4) u, when that is more.
 *   tf32: tensor cores round the inputs of each product to 10 bits of mantissa (2^-11 relative),
 *     five steps of three products each: 1e-2.
 *   bf16: 8 bits of mantissa (2^-9 relative, 4x coarser than tf32) for X, A, B and each
 *     product's inputs: 3e-2.
 * The identity coefficients leave U as it is, bit for bit. And the arithmetic asked for must be
 * the one done: a GPU's bf16 and fp32 differ; the CPU's are the same bits. In place (x = u, fp32)
 * gives the same within fp32's tolerance.
 * On a single vector (1 x q or q x 1) Newton-Schulz is a scalar recursion on its norm s, which
 * normalisation makes 1: s -> a s + b s^3 + c s^5 per step, the vector's direction unchanged.
 * Its result F(s) is as sensitive to s as |d ln F / d ln s| at s = 1 says, and for some
 * coefficient sets that is large: cubic5's first step leaves a + b = 0.0236 of s = 1 with slope
 * a + 3b = -6.66, a relative slope of ~ -280 (~235 over its five steps). The GPU and the CPU sum
 * the q squares of the norm and of X X^T in other orders: the two s differ by up to (q + 4) u
 * relative (u = 2^-24: q - 1 additions, a square, the scale's division and its square), which
 * the recursion multiplies by that slope. The slope is measured on the CPU's own Newton-Schulz:
 * an input whose norm is just below the normalisation floor eps is divided by eps instead of its
 * norm, starting the recursion at s = 1 - delta; the results at 1 and at 1 - delta give
 * d ln F / d ln s (delta 1e-4 keeps the secant within 0.1% of the tangent while F moves far more
 * than its rounding). */
typedef struct {
    char shape[96];
    int64_t rows, cols;
    lw_ns_coeffs coeffs;
    bool symmetric;
    double fp32_tol;
    float *u;
} ns_args;

static const char *const ns_outputs[] = {"x bf16", "x tf32", "x fp32"}; /* by lw_ns_precision */

static void run_newton_schulz(run *r, const void *p) {
    const ns_args *a = p;
    const int64_t n = a->rows * a->cols;
    const double tol[] = {3e-2, 1e-2, a->fp32_tol};
    const float *u = input(r, a->u, n);
    lw_muon_options o = lw_muon_defaults();
    o.coeffs = a->coeffs, o.symmetric = a->symmetric;
    for (int prec = LW_NS_BF16; prec <= LW_NS_FP32; prec++) {
        o.precision = (lw_ns_precision)prec;
        float *x = output(r, ns_outputs[prec], n,
                          a->coeffs == LW_NS_IDENTITY ? bits() : frobenius(tol[prec]));
        lw_muon *m = NULL;
        call(r, lw_muon_new(&o, &m));
        if (m != NULL) call(r, lw_muon_orthogonalize(m, r->s, u, x, a->rows, a->cols));
        call(r, lw_stream_synchronize(r->s));
        lw_muon_free(m);
    }
    o.precision = LW_NS_FP32, o.symmetric = true;
    float *in_place =
        updated(r, "x = u", a->u, n, a->coeffs == LW_NS_IDENTITY ? bits() : frobenius(a->fp32_tol));
    lw_muon *m = NULL;
    call(r, lw_muon_new(&o, &m));
    if (m != NULL) call(r, lw_muon_orthogonalize(m, r->s, in_place, in_place, a->rows, a->cols));
    call(r, lw_stream_synchronize(r->s));
    lw_muon_free(m);
}

static void after_newton_schulz(const kernel_case *k, const run *r) {
    const ns_args *a = k->args;
    const int64_t n = a->rows * a->cols;
    const float *bf16 = f32_of(r, "x bf16"), *tf32 = f32_of(r, "x tf32"),
                *fp32 = f32_of(r, "x fp32");
    if (a->coeffs == LW_NS_IDENTITY)
        expect(k, r,
               memcmp(fp32, a->u, 4 * (size_t)n) == 0 && memcmp(bf16, a->u, 4 * (size_t)n) == 0,
               "the identity leaves U as it is");
    else if (on_cpu(r->device))
        expect(k, r,
               memcmp(bf16, fp32, 4 * (size_t)n) == 0 && memcmp(tf32, fp32, 4 * (size_t)n) == 0,
               "the CPU computes fp32 whatever the precision asked");
    else if (n >= 64 * 64)
        expect(k, r, rel_frobenius(bf16, fp32, n) > 1e-6, "bf16 is not fp32 on the device");
}

static double vector_slope(lw_ns_coeffs coeffs, const float *u, int64_t q) {
    const double delta = 1e-4;
    double norm = 0;
    for (int64_t i = 0; i < q; i++)
        norm += (double)u[i] * u[i];
    norm = sqrt(norm);
    float *at1 = cpu_array(q), *below = cpu_array(q);
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
    for (int64_t i = 0; i < q; i++)
        f1 += (double)at1[i] * at1[i], fd += (double)below[i] * below[i];
    free(at1), free(below);
    return fabs(0.5 * log(f1 / fd) / -log1p(-delta));
}

static void newton_schulz_cases(const char *kernel, run_fn fn, after_fn after) {
    const int64_t shapes[][2] = {{64, 256}, {256, 64}, {128, 128}, {1, 37}, {300, 7}, {37, 1}};
    const lw_ns_coeffs sets[] = {LW_NS_QUINTIC, LW_NS_CUBIC5, LW_NS_IDENTITY};
    for (int s = 0; s < 6; s++)
        for (int c = 0; c < 3; c++)
            for (int sym = 0; sym < 2; sym++) {
                ns_args a = {.rows = shapes[s][0],
                             .cols = shapes[s][1],
                             .coeffs = sets[c],
                             .symmetric = sym,
                             .fp32_tol = 1e-5};
                const int64_t n = a.rows * a.cols;
                a.u = host_random(n);
                if ((a.rows == 1 || a.cols == 1) && a.coeffs != LW_NS_IDENTITY)
                    a.fp32_tol = fmax(a.fp32_tol,
                                      vector_slope(a.coeffs, a.u, n) * (double)(n + 4) * 0x1p-24);
                snprintf(a.shape, sizeof a.shape, "%lld x %lld, %s, %s (fp32 tolerance %.2g)",
                         (long long)a.rows, (long long)a.cols, lw_ns_coeffs_name(a.coeffs),
                         sym ? "symmetric" : "full GEMMs", a.fp32_tol);
                check(&(kernel_case){
                    .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
                free(a.u);
            }
}

/* adamw, through lw_adamw_update: five steps with new gradients each. Per element a handful of
 * float operations, a sqrt and a division (correctly rounded on both unless fast math) and the
 * bias corrections, which the caller computes in double and either side may round at another
 * point: a few ulps per step, compounding over the steps in m, v and w. */
typedef struct {
    char shape[32];
    int64_t n;
    float *w, *g[5], *zeros; /* zeros: m and v at the start */
} adamw_args;

static void run_adamw(run *r, const void *p) {
    const adamw_args *a = p;
    const lw_adamw_options o = lw_adamw_defaults();
    float *w = updated(r, "w", a->w, a->n, relative(1e-6, 1.0));
    float *m = updated(r, "m", a->zeros, a->n, relative(1e-5, 1e-3));
    float *v = updated(r, "v", a->zeros, a->n, relative(1e-5, 1e-6));
    for (int64_t t = 1; t <= 5; t++)
        call(r, lw_adamw_update(r->s, &o, w, input(r, a->g[t - 1], a->n), m, v, a->n, t, 0.01f,
                                0.1f, 0.7f));
}

static void adamw_cases(const char *kernel, run_fn fn, after_fn after) {
    const int64_t sizes[] = {0, 1, 100003};
    for (int s = 0; s < 3; s++) {
        adamw_args a = {.n = sizes[s]};
        snprintf(a.shape, sizeof a.shape, "n %lld, 5 steps", (long long)a.n);
        a.w = host_random(a.n), a.zeros = calloc((size_t)(a.n > 0 ? a.n : 1), sizeof(float));
        for (int t = 0; t < 5; t++)
            a.g[t] = host_random(a.n);
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        free(a.w), free(a.zeros);
        for (int t = 0; t < 5; t++)
            free(a.g[t]);
    }
}

/* Muon's tensor-parallel pieces have no public call of their own: they run inside the optimizer
 * under TP, against a single rank's Muon in tests/test_muon_tp.c (the CPU, MPI ranks), and each
 * against the CPU's in tests/test_cuda_muon_tp.c (the GPU). */
static void elsewhere(const char *kernel, run_fn fn, after_fn after) {
    (void)fn, (void)after;
    printf("test_kernels: %s: checked by test_muon_tp (the CPU) and test_cuda_muon_tp (the GPU)\n",
           kernel);
}

/* ---- what lwopt's CUDA device adds to the contract ------------------------------------------- *
 * Besides its scratch sizes (checked with the cases), the shapes it refuses with a clear error
 * rather than a wrong answer: a head dim past its kernels' largest (128), a negative row in a
 * scatter-add (its sort would misplace it; the CPU trusts rows to lie in the array). */

static void cuda_contract(void) {
    float *q = NULL, *o = NULL, *l = NULL, *sc = NULL;
    CHECK_OK(lw_device_alloc(gpu, 4 * 4 * 3 * 512, (void **)&q));
    CHECK_OK(lw_device_alloc(gpu, 4 * 4 * 512, (void **)&o));
    CHECK_OK(lw_device_alloc(gpu, 4 * 2 * 4, (void **)&l));
    CHECK_OK(lw_device_alloc(gpu, 4 * 2 * 4, (void **)&sc));
    CHECK_FAILS(lw_attention_forward(gs, o, LW_DTYPE_F32, l, sc, q, LW_DTYPE_F32, 1, 4, 512, 2),
                LW_ERR_UNSUPPORTED, "head dim 256");
    CHECK_FAILS(lw_attention_backward(gs, q, LW_DTYPE_F32, sc, o, q, LW_DTYPE_F32, o, LW_DTYPE_F32,
                                      l, 1, 4, 512, 2),
                LW_ERR_UNSUPPORTED, "head dim 256");
    const int32_t bad[3] = {1, -4, 2};
    int32_t *rows = NULL;
    CHECK_OK(lw_device_alloc(gpu, sizeof bad, (void **)&rows));
    CHECK_OK(lw_device_copy(gs, rows, bad, sizeof bad, LW_COPY_HOST_TO_DEVICE));
    CHECK_FAILS(lw_gather_backward(gs, q, o, rows, 3, 8), LW_ERR_RANGE, "row -4 at position 1");
    CHECK_FAILS(lw_combine_forward(gs, q, o, l, rows, 3, 8), LW_ERR_RANGE, "row -4 at position 1");
    lw_device_free(gpu, q), lw_device_free(gpu, o), lw_device_free(gpu, l);
    lw_device_free(gpu, sc), lw_device_free(gpu, rows);
}

/* ---- the list's kernels, each with its case ------------------------------------------------- *
 * A kernel added to kernel_list.h without a case_<name> (public) or core_<name> (the optimizers')
 * here is a compile error: its family of shapes, the run function that issues it, and the hook
 * its results must satisfy after each device's run. */

typedef struct {
    void (*cases)(const char *kernel, run_fn fn, after_fn after);
    run_fn fn;
    after_fn after;
} entry;

static const entry case_vec_norm_stats = {norm_stats_cases, run_norm_stats, after_norm_stats};
static const entry case_vec_all_finite = {all_finite_cases, run_all_finite, after_all_finite};
static const entry case_vec_scale = {elementwise_cases, run_scale, after_elementwise};
static const entry case_vec_add = {elementwise_cases, run_add, after_elementwise};
static const entry case_vec_axpy = {elementwise_cases, run_axpy, after_elementwise};
static const entry case_linear_forward = {linear_cases, run_linear_forward, after_linear_forward};
static const entry case_linear_gelu_forward = {linear_cases, run_linear_gelu_forward,
                                               after_linear_gelu};
static const entry case_linear_gelu_backward = {linear_cases, run_linear_gelu_backward,
                                                after_linear_gelu_backward};
static const entry case_linear_backward = {linear_cases, run_linear_backward,
                                           after_linear_backward};
static const entry case_layernorm_forward = {layernorm_cases, run_layernorm_forward,
                                             after_layernorm_forward};
static const entry case_layernorm_backward = {layernorm_cases, run_layernorm_backward, NULL};
static const entry case_add_layernorm_forward = {layernorm_cases, run_add_layernorm_forward,
                                                 after_add_layernorm};
static const entry case_add_layernorm_backward = {layernorm_cases, run_add_layernorm_backward,
                                                  after_add_layernorm};
static const entry case_gelu_forward = {gelu_cases, run_gelu_forward, after_gelu};
static const entry case_gelu_backward = {gelu_cases, run_gelu_backward, after_gelu};
static const entry case_attention_forward = {attention_cases, run_attention_forward,
                                             after_attention};
static const entry case_attention_backward = {attention_cases, run_attention_backward,
                                              after_attention_backward};
static const entry case_cross_entropy_forward = {cross_entropy_cases, run_cross_entropy_forward,
                                                 after_cross_entropy};
static const entry case_cross_entropy_backward = {cross_entropy_cases, run_cross_entropy_backward,
                                                  after_cross_entropy};
static const entry case_moe_router_forward = {router_cases, run_router_forward, NULL};
static const entry case_moe_router_backward = {router_cases, run_router_backward, NULL};
static const entry case_moe_aux_loss_forward = {router_cases, run_aux_forward, after_aux_forward};
static const entry case_moe_aux_loss_backward = {router_cases, run_aux_backward, NULL};
static const entry case_gather_forward = {rows_cases, run_gather_forward, after_rows};
static const entry case_gather_backward = {rows_cases, run_gather_backward, after_rows};
static const entry case_combine_forward = {rows_cases, run_combine_forward, after_rows};
static const entry case_combine_backward = {rows_cases, run_combine_backward, after_rows};
static const entry case_embedding_range_forward = {embedding_cases, run_embedding_forward,
                                                   after_embedding};
static const entry case_embedding_range_backward = {embedding_cases, run_embedding_backward,
                                                    after_embedding};
static const entry case_cross_entropy_partial_forward = {head_cases, run_partial_forward,
                                                         after_partial_forward};
static const entry case_cross_entropy_combine = {head_cases, run_combine, NULL};
static const entry case_cross_entropy_partial_backward = {head_cases, run_partial_backward,
                                                          after_partial_backward};
static const entry case_vec_to_bf16 = {bf16_cases, run_to_bf16, after_to_bf16};
static const entry case_vec_from_bf16 = {bf16_cases, run_from_bf16, after_from_bf16};

static const entry core_muon_momentum = {momentum_cases, run_muon_momentum, NULL};
static const entry core_newton_schulz = {newton_schulz_cases, run_newton_schulz,
                                         after_newton_schulz};
static const entry core_adamw = {adamw_cases, run_adamw, NULL};
static const entry core_copy_2d = {elsewhere, NULL, NULL};
static const entry core_ns_gram = {elsewhere, NULL, NULL};
static const entry core_ns_step = {elsewhere, NULL, NULL};

typedef struct {
    const char *name;
    const entry *entry;
} list_entry;

#define LIST_CASE(name, ...) {#name, &case_##name},
#define LIST_CORE(name, ...) {#name, &core_##name},
static const list_entry public_kernels[] = {LWI_PUBLIC_KERNELS(LIST_CASE)};
static const list_entry core_kernels[] = {LWI_CORE_KERNELS(LIST_CORE)};

static void run_list(const list_entry *list, size_t count, int *skipped) {
    for (size_t i = 0; i < count; i++) {
        const char *before = skipped_kernel;
        const entry *e = list[i].entry;
        e->cases(list[i].name, e->fn, e->after);
        *skipped += skipped_kernel != before;
    }
}

int main(void) {
    cpu = lw_device_cpu();
    const char *require = getenv("LWOPT_TEST_REQUIRE");
    const int other = cuda_try_open();
    if (other == 1) {
        fprintf(stderr, "test_kernels: lw_device_get(\"cuda\") failed: %s\n", lw_last_error());
        return 1;
    }
    if (other == 77 && require != NULL && strcmp(require, "cuda") == 0) {
        printf("test_kernels: skipped: LWOPT_TEST_REQUIRE=cuda: %s\n", lw_last_error());
        return 77;
    }
    have_other = other == 0;
    other_partial = have_other && getenv("LWOPT_CUDA_LIB") != NULL;
    const char *large = getenv("LWOPT_TEST_LARGE");
    run_large = have_gpu() || (large != NULL && strcmp(large, "1") == 0);
    if (have_other) {
        lw_device_info info;
        CHECK_OK(lw_device_get_info(gpu, &info));
        printf("test_kernels: the CPU and %s (%s%s)\n", lw_device_name(gpu), info.name,
               other_partial ? ", from LWOPT_CUDA_LIB: kernels it lacks are skipped" : "");
    } else {
        printf("test_kernels: the CPU alone (no other device: %s)\n", lw_last_error());
    }
    int skipped = 0;
    run_list(public_kernels, sizeof public_kernels / sizeof public_kernels[0], &skipped);
    run_list(core_kernels, sizeof core_kernels / sizeof core_kernels[0], &skipped);
    if (have_gpu()) cuda_contract();
    printf("test_kernels: %d cases on the CPU", cases_run[0]);
    if (cases_large > 0)
        printf(" (%d of a GPU's size left out: no GPU; LWOPT_TEST_LARGE=1 runs them)", cases_large);
    if (have_other) printf(", %d on %s", cases_run[1], lw_device_name(gpu));
    if (skipped > 0) printf(" (%d kernels it lacks skipped)", skipped);
    printf("\n");
    return check_exit("test_kernels");
}
