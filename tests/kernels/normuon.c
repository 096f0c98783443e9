/* normuon.c: NorMuon's variance reduction (normuon_variance) against the CPU and, on the CPU,
 * against its formula in double: the second moment's EMA per line (rows when rows >= cols, else
 * columns), the update normalised by it, its Frobenius norm kept. Through the device table's
 * entry, which only the optimizer reaches. */
#include "harness.h"

#include "device/device.h"

/* Shapes: one row, one column, tall, wide, square; v from zero (the first step: the floor
 * meets a zero line) or drawn; a NaN in x makes its line's v and the whole update NaN. */
typedef struct {
    int64_t rows, cols;
    bool v_zero, zero_line, nan;
} variance_shape;

static const variance_shape shapes[] = {
    {1, 37, false, false, false}, {37, 1, false, false, false}, {64, 24, false, false, false},
    {24, 64, true, false, false}, {48, 48, false, true, false}, {20, 10, true, true, false},
    {9, 16, false, false, true},
};

static const float BETA2 = 0.9f, FLOOR = 1e-10f;

typedef struct {
    char shape[96];
    const variance_shape *c;
    float *x, *v;
} variance_args;

/* Each line's factor is a float from double sums; the GPU's sums differ in order only, which
 * can move a mean or a factor by a unit in its last place: 1e-6 of the CPU's. */
static const double GPU_TOL = 1e-6, FORMULA_TOL = 2e-6;

static int64_t lines_of(const variance_shape *c) { return c->rows >= c->cols ? c->rows : c->cols; }

static void run_variance(run *r, const void *p) {
    const variance_args *a = p;
    const variance_shape *c = a->c;
    r->nan_fed = c->nan;
    float *x = updated(r, "x", a->x, c->rows * c->cols, relative(GPU_TOL, 1e-30));
    float *v = updated(r, "v", a->v, lines_of(c), relative(GPU_TOL, 1e-30));
    double *work = (double *)scratch(r, 2 * LWI_NORMUON_WORK(c->rows, c->cols));
    if (r->s->device->ops->normuon_variance == NULL) {
        call(r, LW_ERR_UNSUPPORTED);
        return;
    }
    call(r, r->s->device->ops->normuon_variance(r->s, x, v, c->rows, c->cols, BETA2, FLOOR, work));
}

static bool near(double got, double want, double tol) {
    if (!isfinite(want)) return isnan(want) ? isnan(got) : got == want;
    return fabs(got - want) <= tol * fabs(want) + 1e-30;
}

static void after_variance(const kernel_case *k, const run *r) {
    const variance_args *a = k->args;
    const variance_shape *c = a->c;
    if (!on_cpu(r->device)) return;
    const float *x = f32_of(r, "x"), *v = f32_of(r, "v");
    const bool by_row = c->rows >= c->cols;
    const int64_t lines = lines_of(c), reduced = by_row ? c->cols : c->rows;
    double *step = calloc((size_t)lines, sizeof(double)), norm = 0, scaled = 0;
    int64_t wrong = 0;
    for (int64_t l = 0; l < lines; l++) {
        double s = 0;
        for (int64_t i = 0; i < reduced; i++) {
            const double e = by_row ? a->x[l * c->cols + i] : a->x[i * c->cols + l];
            s += e * e;
        }
        const double mean = s / (double)reduced, vl = a->v[l] + (1.0 - BETA2) * (mean - a->v[l]);
        wrong += !near(v[l], vl, FORMULA_TOL);
        step[l] = 1.0 / sqrt(fmax(vl, FLOOR));
        norm += s, scaled += s * step[l] * step[l];
    }
    const double ratio = sqrt(norm) / fmax(sqrt(scaled), FLOOR);
    double out = 0;
    for (int64_t i = 0; i < c->rows * c->cols; i++) {
        const double want = a->x[i] * step[by_row ? i / c->cols : i % c->cols] * ratio;
        wrong += !near(x[i], want, FORMULA_TOL);
        out += (double)x[i] * x[i];
    }
    free(step);
    expect(k, r, wrong == 0, "v and x are their formulas' in double within 2e-6");
    if (!c->nan)
        expect(k, r, near(sqrt(out), sqrt(norm), 1e-5), "the update keeps its Frobenius norm");
}

static void variance_cases(const char *kernel, run_fn fn, after_fn after) {
    for (size_t s = 0; s < COUNT(shapes); s++) {
        const variance_shape *c = &shapes[s];
        variance_args a = {.c = c};
        const int64_t lines = lines_of(c);
        a.x = random_floats(c->rows * c->cols);
        a.v = random_floats(lines);
        for (int64_t l = 0; l < lines; l++)
            a.v[l] = c->v_zero ? 0.0f : a.v[l] * a.v[l] * 1e-2f;
        if (c->zero_line)
            for (int64_t i = 0; i < c->cols; i++)
                a.x[i] = 0.0f; /* row 0: a line or a 0 in each */
        if (c->nan) a.x[c->cols + 1] = NAN;
        snprintf(a.shape, sizeof a.shape, "%lld x %lld%s%s%s", (long long)c->rows,
                 (long long)c->cols, c->v_zero ? ", v zero" : "", c->zero_line ? ", zero row" : "",
                 c->nan ? ", a NaN" : "");
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        free(a.x), free(a.v);
    }
}

const kernel_entry core_normuon_variance = {variance_cases, run_variance, after_variance};
