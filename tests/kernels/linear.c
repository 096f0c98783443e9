/* linear.c: the linear layer (forward, backward, and both with GELU) against the CPU, in every
 * matmul precision, with fp32 and bf16 weights, inputs, output gradients and outputs. */
#include "harness.h"

/* ---- the cases ------------------------------------------------------------------------------- *
 * Rows of n inputs of `in` features to `out` outputs, with a bias or not, and which of the
 * weights, the input and the output gradient are given in bf16 (their fp32 arrays then hold the
 * widened values). Those with n 1024 are of a GPU's size. */

static const struct {
    int64_t n, in, out;
    bool bias, bf16_w, bf16_x, bf16_dy;
} linear_shapes[] = {
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

/* ---- tolerances, runs and hooks -------------------------------------------------------------- *
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
    uint16_t *w16;   /* bf16 weights (w: their widened values), or NULL */
    uint16_t *x16;   /* a bf16 input (x: its widened values), or NULL */
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

/* ---- the cases, made and checked ------------------------------------------------------------ */

static void linear_cases(const char *kernel, run_fn fn, after_fn after) {
    for (size_t s = 0; s < COUNT(linear_shapes); s++) {
        if (left_out(linear_shapes[s].n == 1024)) continue;
        linear_args a = {.n = linear_shapes[s].n,
                         .in = linear_shapes[s].in,
                         .out = linear_shapes[s].out,
                         .bias = linear_shapes[s].bias,
                         .large = linear_shapes[s].n == 1024};
        snprintf(a.shape, sizeof a.shape, "n %lld, in %lld, out %lld%s%s%s%s", (long long)a.n,
                 (long long)a.in, (long long)a.out, a.bias ? ", bias" : "",
                 linear_shapes[s].bf16_w ? ", bf16 weights" : "",
                 linear_shapes[s].bf16_x ? ", bf16 input" : "",
                 linear_shapes[s].bf16_dy ? ", bf16 dy" : "");
        a.x = random_floats(a.n * a.in), a.w = random_floats(a.out * a.in),
        a.b = random_floats(a.out);
        if (linear_shapes[s].bf16_w) a.w16 = round_weights(a.w, a.out * a.in);
        if (linear_shapes[s].bf16_x) a.x16 = round_weights(a.x, a.n * a.in);
        a.dy = random_floats(a.n * a.out), a.dx0 = prefill(a.n * a.in);
        if (linear_shapes[s].bf16_dy) a.dy16 = round_weights(a.dy, a.n * a.out);
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

/* ---- the list's entries ---------------------------------------------------------------------- */

const kernel_entry case_linear_forward = {linear_cases, run_linear_forward, after_linear_forward};
const kernel_entry case_linear_backward = {linear_cases, run_linear_backward,
                                           after_linear_backward};
const kernel_entry case_linear_gelu_forward = {linear_cases, run_linear_gelu_forward,
                                               after_linear_gelu};
const kernel_entry case_linear_gelu_backward = {linear_cases, run_linear_gelu_backward,
                                                after_linear_gelu_backward};
