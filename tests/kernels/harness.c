/* harness.c: the driver of test_kernels: every kernel of the device table's list
 * (src/core/device/kernel_list.h) on every device the build has, against the CPU's: the CPU
 * always, the device behind "cuda" when there is one (a GPU, or the stand-in library that
 * LWOPT_CUDA_LIB names: test_kernels_fake). Each kernel's entry comes from its family's case file
 * (tests/kernels/<family>.c), whose cases run on seeded shapes, edge cases among them (one row,
 * rows shorter than a tile, empty shapes, head dims 64 and 128, a shard of padding alone, NaN and
 * inf where the kernel promises to pass them on), through check():
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
 * or with LWOPT_TEST_LARGE=1 (=0: not even on a GPU). The optimizers' kernels (LWI_CORE_KERNELS)
 * are run through their public calls, or named where they are tested. A GPU's own limits and
 * refusals close the run (harness_cuda.c). Without a GPU the CPU still runs, so the test never
 * skips, unless LWOPT_TEST_REQUIRE=cuda asks for one (test_kernels_gpu, label gpu): then no CUDA is
 * exit 77. `test_kernels PREFIX...` runs the kernels whose names begin with a prefix
 * (test_kernels_attention_pipeline_gpu and test_kernels_attention_order_gpu: attention, under
 * LWOPT_ATTN_PIPELINE=1 and LWOPT_ATTN_ORDER=work). */
#include "harness.h"

#include "bf16_reference.h"
#include "cuda_util.h"

#include <stdarg.h>

/* ---- devices --------------------------------------------------------------------------------- */

/* The CPU, and the other device when there is one (gpu and gs, from cuda_util.h). A library that
 * LWOPT_CUDA_LIB names may be a stand-in with some kernels only (tests/device/fake_device.c, as
 * test_device_plugin takes it); lwopt's own CUDA library, found beside liblwopt.so, has them all
 * (its table is made from the same list). */
static lw_device *cpu;
static bool have_other, other_partial;

bool on_cpu(lw_device *d) { return d == cpu; }
bool have_gpu(void) { return have_other && !other_partial; }
lw_stream *other_stream(void) { return have_other ? gs : NULL; }
lw_device *other_device(void) { return have_other ? gpu : NULL; }

/* ---- measures -------------------------------------------------------------------------------- */

double elem(elem_type t, const void *p, int64_t i) {
    return t == F32     ? ((const float *)p)[i]
           : t == I32   ? ((const int32_t *)p)[i]
           : t == BF16  ? ((const uint16_t *)p)[i]
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
double distance(const measure *m, elem_type t, const void *got, const void *ref, int64_t n,
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

double relative_frobenius(const float *a, const float *b, int64_t n) {
    return rel_frobenius(a, b, n);
}

/* ---- checks ---------------------------------------------------------------------------------- *
 * Counted in check.h's counters, which are this file's: check_exit reports them. */

void failed(const kernel_case *k, const run *r, const char *fmt, ...) {
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

void passed(void) { check_passes++; }

void expect(const kernel_case *k, const run *r, bool ok, const char *what) {
    if (ok)
        passed();
    else
        failed(k, r, "%s", what);
}

/* near_reference's comparison, the floor either one for all (floors NULL) or each element's */
static void near_floors(const kernel_case *k, const run *r, const char *what, const double *ref,
                        int64_t n, double tol, double floor, const double *floors) {
    const float *got = f32_of(r, what);
    if (got == NULL) {
        failed(k, r, "no output %s to hold against its float64 reference", what);
        return;
    }
    double worst = 0;
    int64_t at = -1;
    for (int64_t i = 0; i < n; i++) {
        const double f = floors != NULL ? floors[i] : floor;
        const double e = isfinite(ref[i]) ? fabs(got[i] - ref[i]) / fmax(fabs(ref[i]), f)
                         : isnan(ref[i])  ? (isnan(got[i]) ? 0 : INFINITY)
                                          : (got[i] == ref[i] ? 0 : INFINITY);
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e, at = i; /* a NaN got: infinitely off */
    }
    if (!(worst <= tol))
        failed(k, r, "%s is %.3g from its float64 reference at %lld (%.9g, want %.9g; tol %g)",
               what, worst, (long long)at, (double)got[at], ref[at], tol);
    else
        passed();
}

void near_reference(const kernel_case *k, const run *r, const char *what, const double *ref,
                    int64_t n, double tol, double floor) {
    near_floors(k, r, what, ref, n, tol, floor, NULL);
}

void near_reference_each(const kernel_case *k, const run *r, const char *what, const double *ref,
                         const double *floors, int64_t n, double tol) {
    near_floors(k, r, what, ref, n, tol, 0, floors);
}

void expect_true(const char *file, int line, const char *expr, bool ok) {
    check_true(file, line, expr, ok);
}

void expect_equal(const char *file, int line, const char *a, const char *b, long long x,
                  long long y) {
    check_equal(file, line, a, b, x, y);
}

void expect_status(const char *file, int line, const char *expr, lw_status st) {
    check_status(file, line, expr, st);
}

void expect_failure(const char *file, int line, const char *expr, lw_status st, lw_status want,
                    const char *text) {
    check_failure(file, line, expr, st, want, text);
}

/* ---- the driver ------------------------------------------------------------------------------ */

static int cases_run[2];           /* on the CPU, on the other device */
static int cases_large;            /* left out: large, and no GPU */
static bool run_large;             /* a GPU, or LWOPT_TEST_LARGE=1; not if it is 0 */
static int cases_sanitized;        /* left out: long on the CPU, and a sanitizer build */
static const char *skipped_kernel; /* the kernel the other device was last found to lack */

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
void check(const kernel_case *k) {
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
bool left_out(bool large) {
    cases_large += large && !run_large;
    return large && !run_large;
}

/* A shape that is long on the CPU (hundreds of rows through every run's float64 reference) is
 * left out, counted, where the sanitizers are built in (CMake's LWOPT_SANITIZE): their
 * checks make such a shape cost ten times the Release build's, and the smaller shapes walk the
 * same tiles, edges, windows and grouped heads. The Release build runs every one. */
#if defined(LWOPT_SANITIZED)
enum { SANITIZED = 1 };
#else
enum { SANITIZED = 0 };
#endif

bool left_out_sanitized(bool long_on_cpu) {
    cases_sanitized += long_on_cpu && SANITIZED;
    return long_on_cpu && SANITIZED;
}

/* ---- seeded inputs: cuda_util.h's sequence, the one this file holds -------------------------- */

float random_float(void) { return frand(); }
int32_t random_below(int64_t bound) { return rand_below(bound); }
float *random_floats(int64_t n) { return host_random(n); }

/* ---- the list's kernels, each with its entry ------------------------------------------------ *
 * The entries come from the case files (harness.h declares them from the list): a kernel added to
 * kernel_list.h without a case_<name> (public) or core_<name> (the optimizers') fails to link,
 * naming it. */

typedef struct {
    const char *name;
    const kernel_entry *entry;
} list_entry;

#define LIST_CASE(name, ...) {#name, &case_##name},
#define LIST_CORE(name, ...) {#name, &core_##name},
static const list_entry public_kernels[] = {LWI_PUBLIC_KERNELS(LIST_CASE)};
static const list_entry core_kernels[] = {LWI_CORE_KERNELS(LIST_CORE)};

/* `test_kernels [PREFIX ...]`: the kernels whose names begin with one of the prefixes (every
 * kernel without one): `test_kernels attention` runs attention_forward and attention_backward. */
static int prefixes;
static char **prefix;

static bool chosen(const char *name) {
    for (int i = 0; i < prefixes; i++)
        if (strncmp(name, prefix[i], strlen(prefix[i])) == 0) return true;
    return prefixes == 0;
}

/* A prefix that names no kernel of either list: say so rather than run nothing. */
static bool prefix_unknown(const char *p, const list_entry *a, size_t na, const list_entry *b,
                           size_t nb) {
    for (size_t i = 0; i < na + nb; i++) {
        const char *name = i < na ? a[i].name : b[i - na].name;
        if (strncmp(name, p, strlen(p)) == 0) return false;
    }
    return true;
}

static void run_list(const list_entry *list, size_t count, int *skipped) {
    for (size_t i = 0; i < count; i++) {
        if (!chosen(list[i].name)) continue;
        const char *before = skipped_kernel;
        const kernel_entry *e = list[i].entry;
        e->cases(list[i].name, e->fn, e->after);
        *skipped += skipped_kernel != before;
    }
}

int main(int argc, char **argv) {
    prefixes = argc - 1, prefix = argv + 1;
    const size_t npub = sizeof public_kernels / sizeof public_kernels[0];
    const size_t ncore = sizeof core_kernels / sizeof core_kernels[0];
    for (int i = 0; i < prefixes; i++)
        if (prefix_unknown(prefix[i], public_kernels, npub, core_kernels, ncore)) {
            fprintf(stderr,
                    "test_kernels: no kernel of the list begins with \"%s\" (usage: test_kernels "
                    "[PREFIX ...], e.g. test_kernels attention)\n",
                    prefix[i]);
            return 2;
        }
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
    run_large = large != NULL && *large != '\0' ? strcmp(large, "1") == 0 : have_gpu();
    if (have_other) {
        lw_device_info info;
        CHECK_OK(lw_device_get_info(gpu, &info));
        printf("test_kernels: the CPU and %s (%s%s)\n", lw_device_name(gpu), info.name,
               other_partial ? ", from LWOPT_CUDA_LIB: kernels it lacks are skipped" : "");
    } else {
        printf("test_kernels: the CPU alone (no other device: %s)\n", lw_last_error());
    }
    int skipped = 0;
    run_list(public_kernels, npub, &skipped);
    run_list(core_kernels, ncore, &skipped);
    if (have_gpu()) cuda_device_contract();
    printf("test_kernels: %d cases on the CPU", cases_run[0]);
    if (cases_large > 0)
        printf(" (%d of a GPU's size left out: no GPU; LWOPT_TEST_LARGE=1 runs them)", cases_large);
    if (cases_sanitized > 0)
        printf(" (%d long ones left out under the sanitizers: the Release build runs them)",
               cases_sanitized);
    if (have_other) printf(", %d on %s", cases_run[1], lw_device_name(gpu));
    if (skipped > 0) printf(" (%d kernels it lacks skipped)", skipped);
    printf("\n");
    return check_exit("test_kernels");
}
