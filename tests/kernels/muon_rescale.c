/* muon_rescale.c: Muon's rescalings against the CPU and, on the CPU, against their formulas in
 * double: row equilibration and renormalisation (one matrix through lw_muon_orthogonalize with
 * the identity coefficients and the option on; batches through the device table's entry, which
 * the optimizer's batches reach and no public call does), and the step with a decay at the step
 * through lw_muon_apply_decay. */
#include "harness.h"

#include "device/device.h"

/* ---- the cases ------------------------------------------------------------------------------- *
 * Shapes: a row vector, a column (rows of one element), wide, tall, square, and batches of
 * several; rows: as drawn, one row zero (it stays zero), one row of norm below the floor 1e-6
 * (scaled by t / 1e-6, not to t), a whole matrix zero, a NaN (the whole matrix NaN). */

typedef enum { DRAWN, ZERO_ROW, TINY_ROW, ZERO_MATRIX, NAN_ROW } rows_kind;
static const char *const rows_names[] = {"drawn", "a zero row", "a row of norm 1e-8", "all zero",
                                         "a NaN"};

typedef struct {
    int64_t batch, rows, cols;
    rows_kind kind;
} rescale_shape;

static const rescale_shape rescale_shapes[] = {
    {1, 1, 37, DRAWN},     {1, 37, 1, DRAWN},    {1, 64, 256, DRAWN},    {1, 300, 7, DRAWN},
    {1, 48, 48, ZERO_ROW}, {1, 16, 9, TINY_ROW}, {1, 5, 5, ZERO_MATRIX}, {1, 8, 12, NAN_ROW},
    {3, 48, 16, DRAWN},    {5, 1, 9, DRAWN},     {4, 33, 70, ZERO_ROW},  {2, 20, 10, NAN_ROW},
};

static const float FLOOR = 1e-6f;

typedef struct {
    char shape[96];
    const rescale_shape *c;
    float *u;
} rescale_args;

/* ---- tolerances and runs --------------------------------------------------------------------- *
 * Each element is its input times a factor rounded to float, and that product rounded: within
 * 2^-23 of the formula in double, relative (3e-7 below). The GPU sums the norms in double in
 * another order, which can move a factor by one unit in its last place: 4e-7 of the CPU's. */

static const double RESCALE_TOL = 4e-7, FORMULA_TOL = 3e-7;

/* The batch's matrices through the table's entry; a device without it is asked through the
 * public call, whose dispatcher names the kernel it lacks. */
static void run_equilibrate(run *r, const void *p) {
    const rescale_args *a = p;
    const rescale_shape *c = a->c;
    const int64_t n = c->batch * c->rows * c->cols;
    r->nan_fed = c->kind == NAN_ROW;
    const float *u = input(r, a->u, n);
    float *x = output(r, "x", n, relative(RESCALE_TOL, 1e-30));
    if (c->batch > 1 && r->s->device->ops->muon_equilibrate != NULL) {
        double *work = (double *)scratch(r, 2 * c->batch * (c->rows + 1));
        call(r, r->s->device->ops->muon_equilibrate(r->s, u, x, c->batch, c->rows, c->cols, FLOOR,
                                                    work));
        return;
    }
    lw_muon_options o = lw_muon_defaults();
    o.coeffs = LW_NS_IDENTITY, o.row_equilibrate = true;
    lw_muon *m = NULL;
    call(r, lw_muon_new(&o, &m));
    if (m != NULL) call(r, lw_muon_orthogonalize(m, r->s, u, x, c->rows, c->cols));
    call(r, lw_stream_synchronize(r->s));
    lw_muon_free(m);
}

static void run_renormalize(run *r, const void *p) {
    const rescale_args *a = p;
    const rescale_shape *c = a->c;
    const int64_t n = c->rows * c->cols;
    r->nan_fed = c->kind == NAN_ROW;
    if (c->batch > 1 && r->s->device->ops->muon_renormalize != NULL) {
        float *x = updated(r, "x", a->u, c->batch * n, relative(RESCALE_TOL, 1e-30));
        double *work = (double *)scratch(r, 2 * c->batch * LWI_MUON_NORM_BLOCKS);
        const float target = (float)sqrt((double)(c->rows < c->cols ? c->rows : c->cols));
        call(r, r->s->device->ops->muon_renormalize(r->s, x, c->batch, n, target, FLOOR, work));
        return;
    }
    const float *u = input(r, a->u, n);
    float *x = output(r, "x", n, relative(RESCALE_TOL, 1e-30));
    lw_muon_options o = lw_muon_defaults();
    o.coeffs = LW_NS_IDENTITY, o.renormalize = true;
    lw_muon *m = NULL;
    call(r, lw_muon_new(&o, &m));
    if (m != NULL) call(r, lw_muon_orthogonalize(m, r->s, u, x, c->rows, c->cols));
    call(r, lw_stream_synchronize(r->s));
    lw_muon_free(m);
}

static bool near(double got, double want, double tol) {
    if (!isfinite(want)) return isnan(want) ? isnan(got) : got == want;
    return fabs(got - want) <= tol * fabs(want);
}

/* On the CPU, each matrix against t / max(row norm, floor) (equilibrate) or sqrt(min(rows,
 * cols)) / max(||X||_F, floor) (renormalize) in double. */
static void after_rescale(const kernel_case *k, const run *r, bool rows) {
    const rescale_args *a = k->args;
    const rescale_shape *c = a->c;
    if (!on_cpu(r->device)) return;
    const float *x = f32_of(r, "x");
    const int64_t n = c->rows * c->cols;
    int64_t wrong = 0, zero_rows_moved = 0;
    for (int64_t b = 0; b < c->batch; b++) {
        const float *u = a->u + b * n, *xb = x + b * n;
        double total = 0;
        for (int64_t i = 0; i < n; i++)
            total += (double)u[i] * u[i];
        const double side = (double)(c->rows < c->cols ? c->rows : c->cols);
        for (int64_t i0 = 0; i0 < c->rows; i0++) {
            double row = 0;
            for (int64_t j = 0; j < c->cols; j++)
                row += (double)u[i0 * c->cols + j] * u[i0 * c->cols + j];
            const double factor = rows ? sqrt(total / (double)c->rows) / fmax(sqrt(row), FLOOR)
                                       : sqrt(side) / fmax(sqrt(total), FLOOR);
            for (int64_t j = 0; j < c->cols; j++) {
                const int64_t i = i0 * c->cols + j;
                wrong += !near(xb[i], u[i] * factor, FORMULA_TOL);
                if (row == 0) zero_rows_moved += xb[i] != 0;
            }
        }
    }
    expect(k, r, wrong == 0, "every element is its formula's in double within 3e-7");
    expect(k, r, zero_rows_moved == 0, "a zero row stays zero");
}

static void after_equilibrate(const kernel_case *k, const run *r) { after_rescale(k, r, true); }
static void after_renormalize(const kernel_case *k, const run *r) { after_rescale(k, r, false); }

static void rescale_cases(const char *kernel, run_fn fn, after_fn after) {
    for (size_t s = 0; s < COUNT(rescale_shapes); s++) {
        const rescale_shape *c = &rescale_shapes[s];
        rescale_args a = {.c = c};
        const int64_t n = c->rows * c->cols;
        a.u = random_floats(c->batch * n);
        for (int64_t b = 0; b < c->batch; b++) {
            float *u = a.u + b * n;
            const int64_t row = (b * 7 + 3) % c->rows;
            for (int64_t j = 0; j < c->cols; j++) {
                float *v = &u[row * c->cols + j];
                *v = c->kind == ZERO_ROW ? 0.0f : c->kind == TINY_ROW ? *v * 1e-8f : *v;
                if (c->kind == NAN_ROW && j == c->cols / 2) *v = NAN;
            }
            if (c->kind == ZERO_MATRIX) memset(u, 0, sizeof(float) * (size_t)n);
        }
        snprintf(a.shape, sizeof a.shape, "%lld x %lld x %lld, %s", (long long)c->batch,
                 (long long)c->rows, (long long)c->cols, rows_names[c->kind]);
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        free(a.u);
    }
}

/* ---- the step with a decay at the step ------------------------------------------------------- *
 * The GPU evaluates the CPU's expression operation for operation (no FMA on either side): bit for
 * bit. On the CPU against w - (step x + d w [x w >= 0]) in double, step = lr * 0.2 sqrt(max)
 * (moonlight) and d by the mode: the three roundings of step x + d w and its subtraction, and
 * the step's and d's own, stay within 4 u (|w'| + |step x| + 2 |d w|), u = 2^-24; a mask turned
 * round would be off by d |w| >= 1e-3 |w|. */

typedef struct {
    char shape[96];
    int64_t n;
    lw_weight_decay mode;
    bool cautious, special; /* special: exact zeros of x and w, NaN in x */
    float *w, *x;
} step_args;

static const float LR = 0.02f, WD = 0.1f;
enum { STEP_ROWS = 64, STEP_COLS = 32 };

static void run_decay_step(run *r, const void *p) {
    const step_args *a = p;
    r->nan_fed = a->special;
    float *w = updated(r, "w", a->w, a->n, bits());
    const float *x = input(r, a->x, a->n);
    lw_muon_options o = lw_muon_defaults();
    o.weight_decay_mode = a->mode, o.cautious_wd = a->cautious;
    lw_muon *m = NULL;
    call(r, lw_muon_new(&o, &m));
    if (m != NULL) call(r, lw_muon_apply_decay(m, r->s, w, x, a->n, STEP_ROWS, STEP_COLS, LR, WD));
    call(r, lw_stream_synchronize(r->s));
    lw_muon_free(m);
}

static void after_decay_step(const kernel_case *k, const run *r) {
    const step_args *a = k->args;
    if (!on_cpu(r->device)) return;
    const double step = LR * 0.2 * sqrt((double)STEP_ROWS), u = 0x1p-24;
    const double d = a->mode == LW_WD_SCALED        ? step * WD
                     : a->mode == LW_WD_INDEPENDENT ? WD
                                                    : LR * WD;
    const float *w = f32_of(r, "w");
    int64_t wrong = 0;
    for (int64_t i = 0; i < a->n; i++) {
        const double w0 = a->w[i], x = a->x[i];
        const double dw = !a->cautious || x * w0 >= 0 ? d * w0 : 0.0;
        const double want = w0 - (step * x + dw);
        if (!isfinite(want)
                ? !isnan(w[i])
                : fabs(w[i] - want) > 4 * u * (fabs(want) + fabs(step * x) + 2 * fabs(dw)))
            wrong++;
    }
    expect(k, r, wrong == 0, "every element is w - (step x + d w [x w >= 0]) in double");
}

static void step_cases(const char *kernel, run_fn fn, after_fn after) {
    const int64_t sizes[] = {0, 1, 10007};
    const struct {
        lw_weight_decay mode;
        bool cautious;
    } kinds[] = {{LW_WD_DECOUPLED, true},
                 {LW_WD_INDEPENDENT, true},
                 {LW_WD_SCALED, true},
                 {LW_WD_SCALED, false}};
    for (size_t s = 0; s < COUNT(sizes) + 1; s++)
        for (size_t m = 0; m < COUNT(kinds); m++) {
            step_args a = {.n = s < COUNT(sizes) ? sizes[s] : 999,
                           .mode = kinds[m].mode,
                           .cautious = kinds[m].cautious,
                           .special = s == COUNT(sizes)};
            a.w = random_floats(a.n), a.x = random_floats(a.n);
            for (int64_t i = 0; a.special && i < a.n; i++) {
                if (i % 5 == 1) a.x[i] = 0.0f;
                if (i % 7 == 2) a.w[i] = 0.0f;
                if (i % 97 == 3) a.x[i] = NAN;
            }
            snprintf(a.shape, sizeof a.shape, "n %lld, %s%s%s", (long long)a.n,
                     lw_weight_decay_name(a.mode), a.cautious ? ", cautious" : "",
                     a.special ? ", zeros and NaN" : "");
            check(&(kernel_case){
                .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
            free(a.w), free(a.x);
        }
}

/* ---- the list's entries ---------------------------------------------------------------------- */

const kernel_entry core_muon_equilibrate = {rescale_cases, run_equilibrate, after_equilibrate};
const kernel_entry core_muon_renormalize = {rescale_cases, run_renormalize, after_renormalize};
const kernel_entry core_muon_decay_step = {step_cases, run_decay_step, after_decay_step};
