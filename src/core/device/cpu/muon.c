/* muon.c: Muon's kernels on the CPU (docs/algorithms.md section 6): the element-wise step (weight
 * decay, EMA momentum, Nesterov look-ahead) and Newton-Schulz on OpenBLAS, whole or in the
 * halves of the distributed TP mode (section 9: the Gram product, then the rest of a step).
 * The symmetric products X X^T and A A go through SYRK and B X through SYMM, which do about
 * 3/4 (wide) to 2/3 (square) of the full-GEMM FLOPs. No transposes are copied: a row-major
 * rows x cols matrix with rows > cols is, read column-major, its cols x rows transpose. The
 * coefficients, scales and options are the optimizer's (optim/muon.c). */
#include "device/cpu/cpu.h"
#include "device/cpu/pool.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

lw_status lwi_cpu_muon_momentum(lw_stream *stream, const lwi_muon_step *k, float *w, const float *g,
                                float *m, float *u, int64_t n) {
    (void)stream;
    const float beta = k->beta, lr = k->lr, wd = k->weight_decay;
    /* 1. weight decay, before momentum */
    const lw_weight_decay mode = k->weight_decay_mode;
    if (mode == LW_WD_DECOUPLED && wd != 0.0f) lwi_cpu_vec_scale(stream, w, n, 1.0f - lr * wd);
    if (mode == LW_WD_INDEPENDENT && wd != 0.0f) lwi_cpu_vec_scale(stream, w, n, 1.0f - wd);
    /* 2. momentum (EMA) and the Nesterov look-ahead, into u */
    for (int64_t i = 0; i < n; i++) {
        float gi = k->grad_scale * g[i];
        if (mode == LW_WD_L2) gi += wd * w[i];
        m[i] = beta * m[i] + (1.0f - beta) * gi;
        u[i] = k->nesterov ? (1.0f - beta) * gi + beta * m[i] : m[i];
    }
    return LW_OK;
}

/* Tiles of the transposing copy: a tile's strided side, 32 cache lines, stays in L1. */
#define SYM_TILE 32

/* Copies the stored triangle of the p x p symmetric A onto the other: SYRK writes one
 * triangle, the next SYRK reads A whole. `row_major_upper`: the stored triangle is the upper
 * one in row-major terms. In tiles: element by element, every strided access of a 256 x 256
 * copy missed the cache, 3% of a Newton-Schulz step. */
static void symmetrize(float *a, int64_t p, bool row_major_upper) {
    for (int64_t i0 = 0; i0 < p; i0 += SYM_TILE)
        for (int64_t j0 = i0; j0 < p; j0 += SYM_TILE) {
            const int64_t i1 = i0 + SYM_TILE < p ? i0 + SYM_TILE : p;
            const int64_t j1 = j0 + SYM_TILE < p ? j0 + SYM_TILE : p;
            for (int64_t i = i0; i < i1; i++)
                for (int64_t j = j0 > i + 1 ? j0 : i + 1; j < j1; j++) {
                    if (row_major_upper)
                        a[j * p + i] = a[i * p + j];
                    else
                        a[i * p + j] = a[j * p + i];
                }
        }
}

/* The rest of a step once A = X X^T is in a (p x p, the triangle `order`'s upper one at least,
 * or whole): next = a X + (b A + c A A) X from cur, with a2 (p x p) for the bracket. */
static void combine(const float *abc, float *a, float *a2, const float *cur, float *next,
                    int64_t p, int64_t q, CBLAS_ORDER order, int64_t ld, bool sym) {
    /* B = b A + c A A (into a2); A is symmetric, so A A = A A^T */
    if (abc[2] != 0.0f) {
        if (sym) {
            symmetrize(a, p, order == CblasRowMajor);
            cblas_ssyrk(order, CblasUpper, CblasNoTrans, (int)p, (int)p, abc[2], a, (int)p, 0.0f,
                        a2, (int)p);
        } else {
            cblas_sgemm(order, CblasNoTrans, CblasNoTrans, (int)p, (int)p, (int)p, abc[2], a,
                        (int)p, a, (int)p, 0.0f, a2, (int)p);
        }
        for (int64_t i = 0; i < p * p; i++)
            a2[i] += abc[1] * a[i];
    } else {
        for (int64_t i = 0; i < p * p; i++)
            a2[i] = abc[1] * a[i];
    }
    /* X' = a X + B X */
    memcpy(next, cur, sizeof(float) * (size_t)(p * q));
    if (sym) {
        cblas_ssymm(order, CblasLeft, CblasUpper, (int)p, (int)q, 1.0f, a2, (int)p, cur, (int)ld,
                    abc[0], next, (int)ld);
    } else {
        cblas_sgemm(order, CblasNoTrans, CblasNoTrans, (int)p, (int)q, (int)p, 1.0f, a2, (int)p,
                    cur, (int)ld, abc[0], next, (int)ld);
    }
}

/* A = X X^T for X p x q in `order` with leading dimension ld: the upper triangle (SYRK) or the
 * whole (GEMM). */
static void gram(const float *x, float *a, int64_t p, int64_t q, CBLAS_ORDER order, int64_t ld,
                 bool sym) {
    if (sym) {
        cblas_ssyrk(order, CblasUpper, CblasNoTrans, (int)p, (int)q, 1.0f, x, (int)ld, 0.0f, a,
                    (int)p);
    } else {
        cblas_sgemm(order, CblasNoTrans, CblasTrans, (int)p, (int)p, (int)q, 1.0f, x, (int)ld, x,
                    (int)ld, 0.0f, a, (int)p);
    }
}

/* Newton-Schulz on X (p x q, p <= q, in `order` with leading dimension ld), in place, using
 * work for A, A2 (p x p) and Y (p x q). */
static void iterate(const lwi_ns_plan *plan, float *x, int64_t p, int64_t q, CBLAS_ORDER order,
                    int64_t ld) {
    float *a = plan->work, *a2 = a + p * p, *y = a + 2 * p * p, *cur = x, *next = y;
    for (int32_t k = 0; k < plan->steps; k++) {
        gram(cur, a, p, q, order, ld, plan->symmetric);
        combine(plan->abc + 3 * k, a, a2, cur, next, p, q, order, ld, plan->symmetric);
        float *t = cur;
        cur = next;
        next = t;
    }
    if (cur != x) memcpy(x, cur, sizeof(float) * (size_t)(p * q));
}

/* One matrix, with the workspace at plan->work. */
static void newton_schulz(const lwi_ns_plan *plan, const float *u, float *x, int64_t rows,
                          int64_t cols) {
    const int64_t n = rows * cols;
    const double norm = sqrt(lwi_cpu_sum_squares(u, n));
    const double d = (double)plan->norm_gain * norm + (double)plan->norm_offset;
    const float inv = (float)(1.0 / (d > plan->eps ? d : plan->eps));
    for (int64_t i = 0; i < n; i++)
        x[i] = u[i] * inv;
    const int64_t p = rows <= cols ? rows : cols, q = rows <= cols ? cols : rows;
    /* rows <= cols: X = U row-major (ld cols); else X = U^T, which is U read column-major */
    const CBLAS_ORDER order = rows <= cols ? CblasRowMajor : CblasColMajor;
    iterate(plan, x, p, q, order, rows <= cols ? q : p);
}

typedef struct {
    const lwi_ns_plan *plan;
    const float *u;
    float *x;
    int64_t rows, cols;
} ns_job;

/* A part's matrices of the batch, each in its own slot of the workspace (which holds one per
 * matrix: lwi_ns_work_floats). */
static void ns_range(void *ctx, int64_t begin, int64_t end, int32_t part) {
    (void)part;
    const ns_job *j = ctx;
    const int64_t n = j->rows * j->cols, slot = lwi_ns_work_floats(1, j->rows, j->cols);
    for (int64_t i = begin; i < end; i++) {
        lwi_ns_plan plan = *j->plan;
        plan.work = j->plan->work + i * slot;
        newton_schulz(&plan, j->u + i * n, j->x + i * n, j->rows, j->cols);
    }
}

/* The batch's matrices split over the CPU pool's threads, each orthogonalised on one: small
 * matrices' GEMMs scale poorly over threads, whole matrices side by side do not. Whole rounds of
 * a matrix per thread go side by side; the rest, fewer than the threads, one at a time on all
 * of OpenBLAS's threads (a split QKV weight's 3 blocks on 2 threads took two matrices' time
 * side by side; the third on 2 threads takes 0.7 of one: 256 x 256, 4.2 -> 3.0 ms). */
lw_status lwi_cpu_newton_schulz(lw_stream *stream, const lwi_ns_plan *plan, const float *u,
                                float *x, int64_t batch, int64_t rows, int64_t cols) {
    (void)stream;
    ns_job j = {plan, u, x, rows, cols};
    const int64_t threads = lwi_cpu_threads();
    const int64_t side = batch - batch % threads;
    if (side > 0) lwi_cpu_parallel(side, 1, ns_range, &j);
    if (side < batch) ns_range(&j, side, batch, 0);
    return LW_OK;
}

/* A row-major p x q X is read as stored; a transposed one (X^T row-major, q x p) is X read
 * column-major with ld p, as newton_schulz reads a tall matrix. */
lw_status lwi_cpu_ns_gram(lw_stream *stream, const float *x, float *a, int64_t p, int64_t q,
                          bool transposed) {
    (void)stream;
    const CBLAS_ORDER order = transposed ? CblasColMajor : CblasRowMajor;
    gram(x, a, p, q, order, transposed ? p : q, true);
    symmetrize(a, p, order == CblasRowMajor);
    return LW_OK;
}

lw_status lwi_cpu_ns_step(lw_stream *stream, const float abc[3], float *a, float *x, int64_t p,
                          int64_t q, bool transposed, float *work) {
    (void)stream;
    const CBLAS_ORDER order = transposed ? CblasColMajor : CblasRowMajor;
    float *a2 = work, *y = work + p * p;
    combine(abc, a, a2, x, y, p, q, order, transposed ? p : q, true);
    memcpy(x, y, sizeof(float) * (size_t)(p * q));
    return LW_OK;
}
