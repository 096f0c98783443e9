/* muon.c: Muon's kernels against the CPU, through their public calls: the momentum step
 * (lw_muon_momentum) and Newton-Schulz (lw_muon_orthogonalize); its tensor-parallel pieces are
 * tested elsewhere. */
#include "harness.h"

/* ---- the cases ------------------------------------------------------------------------------- */

/* The momentum step: each size in every weight decay mode, with and without Nesterov. */
static const int64_t momentum_sizes[] = {0, 1, 10007};

/* Newton-Schulz: rows x cols, wide, tall, square and single vectors, with each coefficient set
 * (nanochat's with its own normalisation, 1.01 ||U||_F + 1e-6), symmetric products or full
 * GEMMs. */
static const int64_t ns_shapes[][2] = {{64, 256}, {256, 64}, {128, 128},
                                       {1, 37},   {300, 7},  {37, 1}};
static const lw_ns_coeffs ns_coeff_sets[] = {LW_NS_QUINTIC, LW_NS_CUBIC5, LW_NS_IDENTITY,
                                             LW_NS_NANOCHAT};

/* ---- tolerances, runs and hooks -------------------------------------------------------------- */

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

/* newton_schulz, through lw_muon_orthogonalize, in each of Newton-Schulz's precisions (Muon's
 * own setting, not the device's matmul), against the CPU's fp32, ||got - cpu||_F / ||cpu||_F:
 *   fp32: cuBLAS sums in another order than OpenBLAS (and SYRK/SYMM there, perhaps GEMMs here);
 *     float rounding, amplified by the iteration's slope near 0 (up to ~4 per step): 1e-5
 *     (nanochat's set, whose first step's slope is 8: 2e-5; its sums taken in reverse order
 *     measured 5e-6); for a single vector, whose result can hang on the rounding of its norm, the
 *     slope measured below times (q + 4) u, when that is more.
 *   tf32: tensor cores round the inputs of each product to 10 bits of mantissa (2^-11 relative),
 *     five steps of three products each: 1e-2.
 *   bf16: 8 bits of mantissa (2^-9 relative, 4x coarser than tf32) for X, A, B and each
 *     product's inputs: 3e-2.
 *   nanochat's set amplifies these roundings more (its first step's slope at 0 is 8.2, quintic's
 *     4.1, and its A A term's coefficient 15.9): a float emulation of the GPU's bf16 and TF32
 *     paths (operands rounded; bf16 outputs too) on these shapes gives up to 3.5e-2 (bf16) and
 *     1.0e-2 (TF32), against quintic's 0.7e-2 and 0.7e-2: 8e-2 and 3e-2.
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
 * than its rounding). nanochat's set divides by 1.01 ||U||_F + 1e-6, not the norm: its start is
 * s0 = ||U||_F / that, and the floor is set to that divisor over 1 - delta (s0 (1 - delta)). */
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
    const bool nano = a->coeffs == LW_NS_NANOCHAT;
    const double tol[] = {nano ? 8e-2 : 3e-2, nano ? 3e-2 : 1e-2, a->fp32_tol};
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
        expect(k, r, relative_frobenius(bf16, fp32, n) > 1e-6, "bf16 is not fp32 on the device");
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
    EXPECT_OK(lw_muon_new(&o, &m));
    EXPECT_OK(lw_muon_orthogonalize(m, NULL, u, at1, 1, q));
    lw_muon_free(m);
    const double divisor = coeffs == LW_NS_NANOCHAT ? 1.01 * norm + 1e-6 : norm;
    o.eps = (float)(divisor / (1.0 - delta));
    EXPECT_OK(lw_muon_new(&o, &m));
    EXPECT_OK(lw_muon_orthogonalize(m, NULL, u, below, 1, q));
    lw_muon_free(m);
    double f1 = 0, fd = 0;
    for (int64_t i = 0; i < q; i++)
        f1 += (double)at1[i] * at1[i], fd += (double)below[i] * below[i];
    free(at1), free(below);
    return fabs(0.5 * log(f1 / fd) / -log1p(-delta));
}

/* ---- the cases, made and checked ------------------------------------------------------------ */

static void momentum_cases(const char *kernel, run_fn fn, after_fn after) {
    for (size_t s = 0; s < COUNT(momentum_sizes); s++)
        for (int mode = LW_WD_DECOUPLED; mode <= LW_WD_L2; mode++)
            for (int nesterov = 0; nesterov < 2; nesterov++) {
                momentum_args a = {.n = momentum_sizes[s], .o = lw_muon_defaults()};
                a.o.momentum = 0.9f, a.o.nesterov = nesterov;
                a.o.weight_decay_mode = (lw_weight_decay)mode;
                snprintf(a.shape, sizeof a.shape, "n %lld, weight decay %s%s", (long long)a.n,
                         lw_weight_decay_name(a.o.weight_decay_mode), nesterov ? ", nesterov" : "");
                a.w = random_floats(a.n), a.g = random_floats(a.n), a.m = random_floats(a.n);
                check(&(kernel_case){
                    .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
                free(a.w), free(a.g), free(a.m);
            }
}

static void newton_schulz_cases(const char *kernel, run_fn fn, after_fn after) {
    for (size_t s = 0; s < COUNT(ns_shapes); s++)
        for (size_t c = 0; c < COUNT(ns_coeff_sets); c++)
            for (int sym = 0; sym < 2; sym++) {
                ns_args a = {.rows = ns_shapes[s][0],
                             .cols = ns_shapes[s][1],
                             .coeffs = ns_coeff_sets[c],
                             .symmetric = sym,
                             .fp32_tol = ns_coeff_sets[c] == LW_NS_NANOCHAT ? 2e-5 : 1e-5};
                const int64_t n = a.rows * a.cols;
                a.u = random_floats(n);
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

/* Muon's tensor-parallel pieces have no public call of their own: they run inside the optimizer
 * under TP, against a single rank's Muon in tests/test_muon_tp.c (the CPU, MPI ranks), and each
 * against the CPU's in tests/test_cuda_muon_tp.c (the GPU). */
static void elsewhere(const char *kernel, run_fn fn, after_fn after) {
    (void)fn, (void)after;
    printf("test_kernels: %s: checked by test_muon_tp (the CPU) and test_cuda_muon_tp (the GPU)\n",
           kernel);
}

/* ---- the list's entries ---------------------------------------------------------------------- */

const kernel_entry core_muon_momentum = {momentum_cases, run_muon_momentum, NULL};
const kernel_entry core_newton_schulz = {newton_schulz_cases, run_newton_schulz,
                                         after_newton_schulz};
const kernel_entry core_copy_2d = {elsewhere, NULL, NULL};
const kernel_entry core_ns_gram = {elsewhere, NULL, NULL};
const kernel_entry core_ns_step = {elsewhere, NULL, NULL};
