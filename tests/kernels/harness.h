/* harness.h: what a case file of test_kernels sees. The harness runs every kernel of the device
 * table's list (src/core/device/kernel_list.h) on every device the build has against the CPU: a
 * case file (tests/kernels/<family>.c) declares its family's cases, mostly as tables of shapes,
 * and for each kernel a run function that issues it through the helpers below and an optional
 * hook its results must hold. It defines one entry per kernel, case_<name> for the list's public
 * kernels and core_<name> for the optimizers' (declared here from the list, so a kernel without
 * an entry fails to link, naming it). Nothing else registers a family: CMake builds every file
 * of tests/kernels/ into test_kernels.
 *
 * A case file includes this header and no other test header: check.h's counters belong to one
 * file, so its checks count through expect() and the EXPECT_ macros below. */
#ifndef LW_TEST_KERNELS_HARNESS_H
#define LW_TEST_KERNELS_HARNESS_H

#include "../bf16_reference.h"
#include "device/kernel_list.h"
#include "lw.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static inline measure bits(void) { return (measure){.kind = BITS}; }
static inline measure relative(double tol, double floor) {
    return (measure){.kind = RELATIVE, .tol = tol, .floor = floor};
}
/* relative where the values carry the result, absolute at 1% of the tensor's largest value for
 * the few that cancel to near 0 */
static inline measure scaled(double tol) {
    return (measure){.kind = RELATIVE, .tol = tol, .floor = 1e-30, .scale = 1e-2};
}
/* For GEMM results, max |got - ref| / max |ref|: an fp32 dot product of k terms is off by up to ~k
 * ulps of its terms' scale (cuBLAS adds an output's k products one after another), not of its
 * value, which can cancel to near 0. A simulation of that order against OpenBLAS-like blocked
 * sums on uniform inputs gives 1.1e-6 at k = 1024 and 1.4e-6 at k = 2304 on this measure (but
 * 4e-5 to 8e-5 when judged against 1% of the largest value): 1e-5 keeps a margin. */
static inline measure gemm(double tol) {
    return (measure){.kind = RELATIVE, .tol = tol, .floor = 1e-30, .scale = 1.0};
}
/* A log-sum-exp is a log: an absolute difference of tol in it is a relative tol in every
 * probability it gives, so it is judged absolutely below 1 (a row of one score that cancels to
 * near 0 would otherwise be measured against itself). */
static inline measure lse_measure(double tol) {
    return (measure){.kind = RELATIVE, .tol = tol, .floor = 1.0, .scale = 1e-2};
}
static inline measure absolute(double tol) { return (measure){.kind = ABSOLUTE, .tol = tol}; }
static inline measure frobenius(double tol) { return (measure){.kind = FROBENIUS, .tol = tol}; }
static inline measure stats_measure(double logits, double sums) {
    return (measure){.kind = STATS, .tol = logits, .tol2 = sums};
}
/* ... and must be further from the CPU's fp32 than `by`: the precision asked for reached the
 * GEMMs (only on shapes whose rounding the comments show to be that large) */
static inline measure differing(measure m, double by) {
    m.differ = by;
    return m;
}

/* BF16: bf16 values as their bits (lw_vec_to_bf16), compared as the 16-bit integers they are.
 * BF16V: a model kernel's bf16 output, compared by its values (widened), as fp32 outputs are. */
typedef enum { F32, I32, F64, BF16, BF16V } elem_type;

static inline bool bf16_type(elem_type t) { return t == BF16 || t == BF16V; }
static inline size_t elem_size(elem_type t) { return t == F64 ? 8 : bf16_type(t) ? 2 : 4; }

/* element i of p, of type t, as a double */
double elem(elem_type t, const void *p, int64_t i);
/* The worst difference of got from ref, n elements of type t, under m (for STATS, the sums' in
 * *second). */
double distance(const measure *m, elem_type t, const void *got, const void *ref, int64_t n,
                double *second);
/* ||a - b||_F / ||b||_F */
double relative_frobenius(const float *a, const float *b, int64_t n);

/* ---- runs ------------------------------------------------------------------------------------ *
 * A case's run function issues its kernel on r->s through the helpers below, which place every
 * buffer in the run's device memory; the driver then reads them all back, checks the guards and
 * the inputs, and keeps the outputs for comparison. */

enum { MAX_BUFFERS = 24, MAX_RESULTS = 8 };

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
    char *alloc; /* device memory: guard bytes, n elements, guard bytes */
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

/* A kernel's status: the run's first failure is kept, with lw_last_error(). */
void call(run *r, lw_status st);

/* Buffers on the run's device, from n host elements (inputs, updated and accumulated ones) or
 * starting as NaN (outputs, scratch; ids as 0x7f7f7f7f, bf16 as a signalling NaN); an output is
 * compared with the CPU's as `how` says. */
const float *input(run *r, const float *host, int64_t n);
const int32_t *input_ids(run *r, const int32_t *host, int64_t n);
const uint16_t *input_bf16(run *r, const uint16_t *host, int64_t n);
float *output(run *r, const char *what, int64_t n, measure how);
int32_t *output_ids(run *r, const char *what, int64_t n);   /* bit for bit */
uint16_t *output_bf16(run *r, const char *what, int64_t n); /* bit for bit */
/* a model kernel's bf16 output, compared with the CPU's by its values, as `how` says */
uint16_t *output_bf16_values(run *r, const char *what, int64_t n, measure how);
float *updated(run *r, const char *what, const float *start, int64_t n, measure how);
float *accumulated(run *r, const char *what, const float *start, int64_t n, measure how);
/* bf16 values (bits) rewritten in place from `start`, compared by value as `how` says */
uint16_t *updated_bf16(run *r, const char *what, const uint16_t *start, int64_t n, measure how);
/* a bf16 output gradient accumulated from `start` (bits), compared by value as `how` says */
uint16_t *accumulated_bf16(run *r, const char *what, const uint16_t *start, int64_t n, measure how);
double *accumulated_f64(run *r, const char *what, const double *start, int64_t n, measure how);
float *scratch(run *r, int64_t n);

/* A result the kernel hands back in host memory (a loss, a flag). */
void result_of(run *r, const char *what, double value, measure how);

/* An output's host copy after the run, by name (NULL when the run has none of that name). */
const void *got_of(const run *r, const char *what);
static inline const float *f32_of(const run *r, const char *what) { return got_of(r, what); }
/* a result by name (NaN when the run has none) */
double result_named(const run *r, const char *what);

/* ---- cases ----------------------------------------------------------------------------------- */

/* the rows of a case file's table */
#define COUNT(table) (sizeof(table) / sizeof((table)[0]))

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
    bool large; /* a GPU's size (left_out says where it is made) */
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

/* A kernel's entry: the function that makes its cases and hands each to check(), the run that
 * issues the kernel, and the hook after each device's run (NULL: none). */
typedef struct {
    void (*cases)(const char *kernel, run_fn fn, after_fn after);
    run_fn fn;
    after_fn after;
} kernel_entry;

/* One entry per kernel of the list, each defined by its family's case file. */
#define LW_TEST_DECLARE_CASE(name, ...) extern const kernel_entry case_##name;
#define LW_TEST_DECLARE_CORE(name, ...) extern const kernel_entry core_##name;
LWI_PUBLIC_KERNELS(LW_TEST_DECLARE_CASE)
LWI_CORE_KERNELS(LW_TEST_DECLARE_CORE)

/* The case on the CPU, then on the other device against it (harness.c says what each checks). */
void check(const kernel_case *k);

/* The driver's own (harness.c, harness_runs.c): one run of case k on device d under a matmul
 * precision (zeroed: ACCUMULATED buffers start at 0), every buffer read back and its guards and
 * inputs checked; a run's host copies freed. */
void run_on(run *r, const kernel_case *k, lw_device *d, lw_matmul matmul, bool zeroed);
void run_free(run *r);
/* What a BF16 output starts as: a signalling NaN, which lw_vec_to_bf16 never writes (its NaN are
 * quiet), so that an element left unwritten shows (cpu_checks). */
enum { BF16_UNWRITTEN = 0x7fa5 };

/* Whether a case of a GPU's size is left out (no GPU, no LWOPT_TEST_LARGE=1); counted. */
bool left_out(bool large);
/* Whether a case long on the CPU is left out (a sanitizer build); counted. */
bool left_out_sanitized(bool long_on_cpu);

/* ---- checks ---------------------------------------------------------------------------------- */

/* A check of an `after` hook: counted, and said with the case when it fails. */
void expect(const kernel_case *k, const run *r, bool ok, const char *what);
/* Output `what` (fp32) of r's run against a float64 reference ref[n]: the worst |got - ref| /
 * max(|ref|, floor) must be within tol, a non-finite reference met exactly (a NaN by a NaN);
 * counted, the worst said when it fails. */
void near_reference(const kernel_case *k, const run *r, const char *what, const double *ref,
                    int64_t n, double tol, double floor);
/* The same with a floor per element, floors[i] (a sum's terms' scale where it may cancel). */
void near_reference_each(const kernel_case *k, const run *r, const char *what, const double *ref,
                         const double *floors, int64_t n, double tol);
/* A failure of the case on r's device, said as printf would; counted. */
void failed(const kernel_case *k, const run *r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void passed(void);

/* Checks outside a run (a reference the CPU computes for a case, a device's scratch size, a
 * refusal), counted with the others; a failure says its file, line and expression, as check.h's
 * CHECK, CHECK_EQ, CHECK_OK and CHECK_FAILS do. */
void expect_true(const char *file, int line, const char *expr, bool ok);
void expect_equal(const char *file, int line, const char *a, const char *b, long long x,
                  long long y);
void expect_status(const char *file, int line, const char *expr, lw_status st);
void expect_failure(const char *file, int line, const char *expr, lw_status st, lw_status want,
                    const char *text);
#define EXPECT(cond)    expect_true(__FILE__, __LINE__, #cond, (cond))
#define EXPECT_EQ(a, b) expect_equal(__FILE__, __LINE__, #a, #b, (long long)(a), (long long)(b))
#define EXPECT_OK(expr) expect_status(__FILE__, __LINE__, #expr, (expr))
#define EXPECT_FAILS(expr, status, text)                                                           \
    expect_failure(__FILE__, __LINE__, #expr, (expr), (status), (text))

/* ---- devices --------------------------------------------------------------------------------- */

bool on_cpu(lw_device *d);
/* lwopt's own CUDA library on a GPU (not a stand-in that LWOPT_CUDA_LIB names) */
bool have_gpu(void);
/* the other device's default stream; NULL when there is no other device */
lw_stream *other_stream(void);
/* The other device (a GPU or a stand-in), NULL without one. */
lw_device *other_device(void);
/* A GPU's own refusals and the attention variants' bits (harness_cuda.c); after the list. */
void cuda_device_contract(void);

/* ---- seeded inputs --------------------------------------------------------------------------- *
 * One seeded sequence for the whole run, drawn in the list's order, so that every case sees the
 * same inputs from run to run. */

float random_float(void);            /* uniform in [-1, 1) */
int32_t random_below(int64_t bound); /* uniform in [0, bound) */
float *random_floats(int64_t n);     /* n of random_float(), allocated */
float *scaled_random(int64_t n, float scale, float offset);
/* What a backward accumulates onto: small against the gradients (so that their own rounding is
 * what the comparisons see) yet far above the tolerances (so that a backward that overwrote
 * instead of adding would fail them, and the CPU's accumulation check sees it). */
float *prefill(int64_t n);
int32_t *random_ids(int64_t n, int64_t bound);
/* room for n floats (at least one): what the CPU's kernel gives, for the kernel after it */
float *cpu_array(int64_t n);
bool any_nan(const float *x, int64_t n);

/* ---- bf16 operands and outputs (harness_bf16.c says why) ------------------------------------- */

/* Whether a GEMM under precision m rounds an operand of these n values that fp32 reads as is. */
bool rounded_by(lw_matmul m, const float *v, int64_t n);
/* m, no longer required to differ from fp32 where nothing is rounded */
measure differing_if(measure m, bool rounded);
/* n weights rounded to bf16 in place (w holds the widened values after); their bits, allocated */
uint16_t *round_weights(float *w, int64_t n);
/* n values rounded to bf16, x left as it is: their bits; *widened: the widened values; both
 * allocated */
uint16_t *round_copy(const float *x, int64_t n, float **widened);
/* weights (or an input) as the kernel reads them: the bf16 bits when there are any, else the
 * fp32 values; *dtype says which */
const void *input_typed(run *r, const float *w, const uint16_t *bits, int64_t n, lw_dtype *dtype);
/* output `what` and its "(widened)" twin, n floats, agree bit for bit on r's device */
void widening_exact(const kernel_case *k, const run *r, const char *what, int64_t n);
/* the same on the CPU alone (a GPU may run another of cuBLAS's kernels on each) */
void same_as_widened(const kernel_case *k, const run *r, const char *what, int64_t n);
/* a bf16 output's measure: its fp32 output's, widened by a bf16 step */
measure bf16_step(measure m);
/* output "<what> bf16" (bits) is output `what` (fp32) rounded to nearest even, n values */
void after_bf16_output(const kernel_case *k, const run *r, const char *what, int64_t n);

/* ---- activations (harness_activation.c) ------------------------------------------------------ *
 * GELU, ReLU^2 and SwiGLU take x in fp32 or bf16 and write y (or accumulate dx) in fp32 or bf16:
 * their case files share the inputs and the runs over every combination, and give the kernel
 * through a function of the case's own sizes. */

/* An activation's inputs: nx values of x (and the start dx0 a backward accumulates onto), each
 * beside its bf16 rounding and that widened again, and ny of dy, y's gradient. */
typedef struct {
    int64_t nx, ny;
    float *x, *dy, *dx0;
    uint16_t *x16;    /* x rounded to bf16 (what a bf16 fc output gives) */
    float *xw;        /* and widened again */
    uint16_t *dx0_16; /* dx0 rounded to bf16 (a bf16 dx's start), */
    float *dx0_w;     /* and widened again */
} activation_inputs;

/* x drawn in [-scale, scale) with the n_specials values of specials first (0: none), then dy and
 * dx0 in [-1, 1), in that order from the seeded sequence; freed by activation_inputs_free. */
activation_inputs activation_inputs_new(int64_t nx, int64_t ny, float scale, const float *specials,
                                        size_t n_specials);
void activation_inputs_free(activation_inputs *in);

/* The kernel under test on stream s, with the sizes of the case's args: the forward into y of
 * y_dtype, the backward accumulating into dx of dx_dtype, x of x_dtype. */
typedef lw_status (*activation_forward_fn)(const void *args, lw_stream *s, void *y,
                                           lw_dtype y_dtype, const void *x, lw_dtype x_dtype);
typedef lw_status (*activation_backward_fn)(const void *args, lw_stream *s, void *dx,
                                            lw_dtype dx_dtype, const float *dy, const void *x,
                                            lw_dtype x_dtype);

/* The forward's runs, each output bit for bit against the CPU's: "y" and "y bf16" of the fp32
 * x, "y of bf16 x" of x16 and "y of bf16 x (widened)" of xw. */
void run_activation_forward(run *r, const void *args, const activation_inputs *in,
                            activation_forward_fn forward);
/* The backward's, likewise: "dx", "dx of bf16 x" and "dx of bf16 x (widened)" from dx0, and
 * "dx from a bf16 start" in fp32 from dx0_w and in bf16 from dx0_16 ("... bf16"). */
void run_activation_backward(run *r, const void *args, const activation_inputs *in,
                             activation_backward_fn backward);
/* What both runs give on every device, m values of y or dx: the bf16 output is the fp32 one
 * rounded, and a bf16 x gives its widening's results. */
void after_activation(const kernel_case *k, const run *r, bool forward, int64_t m);

#endif
