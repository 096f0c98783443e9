/* muon_tp.c: Muon's orthogonalisation of one matrix that is a tensor-parallel shard or a fused
 * QKV weight (docs/algorithms.md section 9): the QKV split, the three TP modes over the TP
 * communicator, and the scale of the full shape. Weight decay, momentum and the step itself are
 * the optimizer's (optimizer_whole.c); the arithmetic runs through the device table. */
#include "optim/muon.h"
#include "optim/muon_tp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

struct lwi_muon_tp {
    lw_comm *comm; /* [borrowed] the TP group; NULL: none */
    int32_t size;  /* t */
    int32_t rank;
    lw_muon_tp_mode mode;
    bool split_qkv;
    lw_device *device;  /* of acc */
    lwi_workspace work; /* floats: gathered shards, QKV blocks, Gram matrices */
    double *acc;       /* [owned, device memory] distributed: the shard's sum of squares */
};

lw_status lwi_muon_tp_new(lw_device *device, lw_comm *tp, const lw_muon_options *o,
                          lwi_muon_tp **out) {
    *out = NULL;
    /* a column shard holds a piece of every row: its rows' norms would need one more
       all-reduce per matrix, which the mode does not make */
    if (tp != NULL && lw_comm_size(tp) > 1 && o->tp_mode == LW_MUON_TP_DISTRIBUTED &&
        o->row_equilibrate)
        return lwi_fail(LW_ERR_UNSUPPORTED,
                        "muon: row_equilibrate is not supported with TP mode distributed "
                        "(Newton-Schulz sharded over the TP ranks); use tp_mode duplicated or "
                        "blockwise");
    lwi_muon_tp *t = calloc(1, sizeof *t);
    if (t == NULL) return lwi_fail(LW_ERR_NOMEM, "muon: out of memory");
    t->comm = tp;
    t->size = tp ? lw_comm_size(tp) : 1;
    t->rank = tp ? lw_comm_rank(tp) : 0;
    t->mode = o->tp_mode;
    t->split_qkv = o->split_qkv;
    t->device = device;
    void *acc = NULL;
    lw_status st = lw_device_alloc(device, 2 * sizeof(double), &acc);
    t->acc = acc;
    if (st != LW_OK) {
        lwi_muon_tp_free(t);
        return st;
    }
    *out = t;
    return LW_OK;
}

void lwi_muon_tp_free(lwi_muon_tp *t) {
    if (t == NULL) return;
    lwi_workspace_free(&t->work);
    lw_device_free(t->device, t->acc);
    free(t);
}

int32_t lwi_muon_tp_size(const lwi_muon_tp *t) { return t->size; }
int32_t lwi_muon_tp_rank(const lwi_muon_tp *t) { return t->rank; }

bool lwi_muon_tp_takes(const lwi_muon_tp *t, const lwi_param *p) {
    return (t->size > 1 && p->tp_blocks > 0) || (t->split_qkv && p->qkv_groups > 0);
}

/* The dimension p is sharded along over TP, or -1 (replicated, or t = 1). */
static int32_t sharded_dim(const lwi_muon_tp *t, const lwi_param *p) {
    return t->size > 1 && p->tp_blocks > 0 ? p->tp_dim : -1;
}

/* Floats of workspace a rows x cols shard along dim needs (besides lw_muon's own). */
static int64_t shard_floats(const lwi_muon_tp *t, int64_t rows, int64_t cols, int32_t dim) {
    if (dim < 0 || t->mode == LW_MUON_TP_BLOCKWISE) return 0;
    const int64_t n = rows * cols, all = t->size * n;
    if (t->mode == LW_MUON_TP_DUPLICATED) return dim == 0 ? all : 2 * all;
    const int64_t p = dim == 0 ? cols : rows; /* the Gram matrix's side */
    return 2 * p * p + n;
}

/* At least `floats` of workspace on s's device; the old one is waited for before it goes. */
static lw_status reserve(lwi_muon_tp *t, lw_stream *s, int64_t floats) {
    return lwi_workspace_reserve(&t->work, s, floats, sizeof(float), "muon: the TP workspace",
                                 "floats");
}

static lw_status copy(lw_stream *s, float *dst, const float *src, int64_t n) {
    return dst == src ? LW_OK
                      : lw_device_copy(s, dst, src, (int64_t)sizeof(float) * n,
                                       LW_COPY_DEVICE_TO_DEVICE);
}

/* A collective over the TP group, labelled for the watchdog and timed. */
static lw_status all_gather(lwi_muon_tp *t, const char *name, float *data, int64_t count,
                            double *seconds) {
    char label[64];
    snprintf(label, sizeof label, "Muon's TP shards of '%s'", name);
    lw_comm_set_label(t->comm, label);
    const double t0 = lwi_now();
    lw_status st = lw_comm_allgather(t->comm, data, count, LW_DTYPE_F32, NULL);
    *seconds += lwi_now() - t0;
    return st;
}

static lw_status all_reduce(lwi_muon_tp *t, const char *what, const char *name, void *data,
                            int64_t count, lw_dtype dtype, double *seconds) {
    char label[64];
    snprintf(label, sizeof label, "Muon's TP %s of '%s'", what, name);
    lw_comm_set_label(t->comm, label);
    const double t0 = lwi_now();
    lw_status st = lw_comm_allreduce(t->comm, data, count, dtype, LW_REDUCE_SUM);
    *seconds += lwi_now() - t0;
    return st;
}

/* duplicated: the whole matrix on every TP rank. The gather leaves rank r's shard at r * n;
 * read as a matrix in that order, the full matrix has its rows (dim 0) or columns (dim 1)
 * permuted (rank 0's piece of every block, then rank 1's, ...). Newton-Schulz commutes with
 * both: for permutations P and Q, (P U Q)(P U Q)^T = P (U U^T) P^T, so every step's polynomial
 * in X X^T conjugates alike and NS(P U Q) = P NS(U) Q, and the Frobenius norm is unchanged;
 * so this rank's slice of the result is the slice it gathered from. Rows in rank order are
 * the gathered array itself; columns are first set side by side. */
static lw_status duplicated(lwi_muon_tp *t, lw_muon *m, lw_stream *s, const char *name,
                            const float *u, float *x, int64_t rows, int64_t cols, int32_t dim,
                            float *work, double *seconds) {
    const int64_t n = rows * cols, T = t->size;
    float *g = work, *f = work + T * n;
    lw_status st = copy(s, g + t->rank * n, u, n);
    if (st == LW_OK) st = all_gather(t, name, g, T * n, seconds);
    if (st != LW_OK) return st;
    if (dim == 0) {
        if ((st = lw_muon_orthogonalize(m, s, g, g, T * rows, cols)) != LW_OK) return st;
        return copy(s, x, g + t->rank * n, n);
    }
    for (int64_t r = 0; st == LW_OK && r < T; r++)
        st = lwi_run_copy_2d(s, f + r * cols, T * cols, g + r * n, cols, rows, cols);
    if (st == LW_OK) st = lw_muon_orthogonalize(m, s, f, f, rows, T * cols);
    if (st == LW_OK) st = lwi_run_copy_2d(s, x, cols, f + t->rank * cols, T * cols, rows, cols);
    return st;
}

/* The full matrix's sum of squares of the shard x (n elements), all-reduced over TP. */
static lw_status full_norm(lwi_muon_tp *t, lw_stream *s, const char *name, const float *x,
                           int64_t n, double *norm, double *seconds) {
    double sums[2] = {0.0, 0.0};
    lw_status st = lw_device_set(s, t->acc, 0, sizeof sums);
    if (st == LW_OK) st = lw_vec_norm_stats(s, x, n, t->acc);
    if (st == LW_OK) st = lw_device_copy(s, sums, t->acc, sizeof sums, LW_COPY_DEVICE_TO_HOST);
    if (st == LW_OK) st = all_reduce(t, "norm", name, sums, 1, LW_DTYPE_F64, seconds);
    *norm = sqrt(sums[0]);
    return st;
}

/* distributed: the sharded dimension is the Gram product's contraction dimension (X is the
 * shard's transpose for dim 0, the shard itself for dim 1), so the full X X^T is the sum over
 * TP of the shards' Gram matrices, p x p for p the unsharded side; each step is then local to
 * the shard. The normalisation is the full matrix's: the squared norms are summed first; so is
 * the renormalisation's after the steps. */
static lw_status distributed(lwi_muon_tp *t, lw_muon *m, lw_stream *s, const char *name,
                             const float *u, float *x, int64_t rows, int64_t cols, int32_t dim,
                             float *work, double *seconds) {
    const lw_muon_options *o = lwi_muon_options(m);
    const int64_t n = rows * cols;
    const bool transposed = dim == 0;
    const int64_t p = transposed ? cols : rows, q = transposed ? rows : cols;
    lw_status st = copy(s, x, u, n);
    if (st == LW_OK && o->coeffs != LW_NS_IDENTITY) {
        /* before the collectives below: a device without these fails on every rank alike */
        if (s->device->ops->ns_gram == NULL) return lwi_device_missing(s, "ns_gram");
        if (s->device->ops->ns_step == NULL) return lwi_device_missing(s, "ns_step");
        float *a = work, *rest = work + p * p;
        double norm = 0.0;
        if ((st = full_norm(t, s, name, u, n, &norm, seconds)) != LW_OK) return st;
        st = lw_vec_scale(s, x, n, (float)(1.0 / lwi_muon_norm_divisor(m, norm)));
        const float *abc = lwi_muon_abc(m);
        for (int32_t k = 0; st == LW_OK && k < o->ns_steps; k++) {
            st = lwi_run_ns_gram(s, x, a, p, q, transposed);
            if (st == LW_OK)
                st = all_reduce(t, "Gram matrix", name, a, p * p, LW_DTYPE_F32, seconds);
            if (st == LW_OK) st = lwi_run_ns_step(s, abc + 3 * k, a, x, p, q, transposed, rest);
        }
    }
    if (st == LW_OK && o->renormalize) {
        /* the full matrix is p x (t q): its smaller side */
        const int64_t full_q = t->size * q, side = p < full_q ? p : full_q;
        double norm = 0.0;
        if ((st = full_norm(t, s, name, x, n, &norm, seconds)) != LW_OK) return st;
        const double floored = norm > LWI_MUON_NORM_FLOOR ? norm : LWI_MUON_NORM_FLOOR;
        st = lw_vec_scale(s, x, n, (float)(sqrt((double)side) / floored));
    }
    return st;
}

/* x = the orthogonalised local shard u (rows x cols) of a matrix sharded along dim over TP
 * (-1: not sharded, orthogonalised alone), in the TP mode; x may be u. */
static lw_status orthogonalize_shard(lwi_muon_tp *t, lw_muon *m, lw_stream *s, const char *name,
                                     const float *u, float *x, int64_t rows, int64_t cols,
                                     int32_t dim, float *work, double *seconds) {
    if (dim < 0 || t->mode == LW_MUON_TP_BLOCKWISE)
        return lw_muon_orthogonalize(m, s, u, x, rows, cols);
    if (t->mode == LW_MUON_TP_DUPLICATED)
        return duplicated(t, m, s, name, u, x, rows, cols, dim, work, seconds);
    return distributed(t, m, s, name, u, x, rows, cols, dim, work, seconds);
}

/* The step of one shard: orthogonalised, then scaled by its full matrix's shape. */
static lw_status shard_step(lwi_muon_tp *t, lw_muon *m, lw_stream *s, const char *name,
                            const float *u, float *x, int64_t rows, int64_t cols, int32_t dim,
                            float *work, double *seconds) {
    lw_status st = orthogonalize_shard(t, m, s, name, u, x, rows, cols, dim, work, seconds);
    if (st != LW_OK) return st;
    const int64_t full_rows = dim == 0 ? t->size * rows : rows;
    const int64_t full_cols = dim == 1 ? t->size * cols : cols;
    return lw_vec_scale(s, x, rows * cols, (float)lwi_muon_scale(m, full_rows, full_cols));
}

/* Without TP, Q, K and V of one shape (no GQA) are orthogonalised as a batch of three, side by
 * side on the CPU's threads (a GPU batches their GEMMs): copied into lw_muon's batch array,
 * orthogonalised and scaled there, copied back. */
static lw_status qkv_batch(lw_muon *m, lw_stream *s, const lwi_param *p, const float *u,
                           float *x) {
    const int64_t cols = p->shape[1], groups = p->qkv_groups, r = p->qkv_rows[0];
    const int64_t per = 3 * r, n = groups * r * cols;
    float *b;
    lw_status st = lwi_muon_batch_updates(m, s, 3, groups * r, cols, &b);
    for (int c = 0; c < 3 && st == LW_OK; c++)
        st = lwi_run_copy_2d(s, b + c * n, r * cols, u + c * r * cols, per * cols, groups,
                             r * cols);
    if (st == LW_OK) st = lwi_muon_orthogonalize_batch(m, s, b, 3, groups * r, cols);
    if (st == LW_OK) st = lw_vec_scale(s, b, 3 * n, (float)lwi_muon_scale(m, groups * r, cols));
    for (int c = 0; c < 3 && st == LW_OK; c++)
        st = lwi_run_copy_2d(s, x + c * r * cols, per * cols, b + c * n, r * cols, groups,
                             r * cols);
    return st;
}

/* The QKV split follows Megatron's split_qkv: the local rows viewed as (groups, q + k + v),
 * Q is the (groups * q) x cols matrix of every group's q rows in group order (one matrix over
 * all groups, not one per group), K and V alike. Under TP each is a shard of the full Q (K, V)
 * along the weight's own TP dimension (for dim 0 the gathered Q is every TP rank's groups'
 * rows, a row permutation of the full Q), so each goes through the TP mode on its own. */
lw_status lwi_muon_tp_update(lwi_muon_tp *t, lw_muon *m, lw_stream *s, const lwi_param *p,
                             const float *u, float *x, double *seconds_comm) {
    const int64_t rows = p->shape[0], cols = p->shape[1];
    const int32_t dim = sharded_dim(t, p);
    lw_status st;
    if (!(t->split_qkv && p->qkv_groups > 0)) {
        if ((st = reserve(t, s, shard_floats(t, rows, cols, dim))) != LW_OK) return st;
        return shard_step(t, m, s, p->name, u, x, rows, cols, dim, t->work.data, seconds_comm);
    }
    if (dim < 0 && p->qkv_rows[0] == p->qkv_rows[1] && p->qkv_rows[1] == p->qkv_rows[2])
        return qkv_batch(m, s, p, u, x);
    const int64_t groups = p->qkv_groups;
    const int64_t per = p->qkv_rows[0] + p->qkv_rows[1] + p->qkv_rows[2];
    int64_t block = 0, floats = 0;
    for (int c = 0; c < 3; c++) {
        const int64_t n = groups * p->qkv_rows[c] * cols;
        if (n > block) block = n;
        const int64_t f = shard_floats(t, groups * p->qkv_rows[c], cols, dim);
        if (f > floats) floats = f;
    }
    if ((st = reserve(t, s, block + floats)) != LW_OK) return st;
    float *part = t->work.data, *work = part + block;
    int64_t first = 0; /* the block's first row within a group */
    for (int c = 0; c < 3 && st == LW_OK; c++) {
        const int64_t r = p->qkv_rows[c];
        st = lwi_run_copy_2d(s, part, r * cols, u + first * cols, per * cols, groups, r * cols);
        if (st == LW_OK)
            st = shard_step(t, m, s, p->name, part, part, groups * r, cols, dim, work,
                            seconds_comm);
        if (st == LW_OK)
            st = lwi_run_copy_2d(s, x + first * cols, per * cols, part, r * cols, groups, r * cols);
        first += r;
    }
    return st;
}

/* A split QKV weight's block c takes the rows [first, first + r) of every group of `per` rows;
 * so this rank's elements [start, start + count) meet it in at most one run per group, each
 * stepped at the block's scale (its full shape as shard_step's). Without a decay at the step the
 * scale is in x already: one run. */
lw_status lwi_muon_tp_apply(lwi_muon_tp *t, lw_muon *m, lw_stream *s, const lwi_param *p, float *w,
                            const float *x, int64_t start, int64_t count, float lr, float wd) {
    const int64_t rows = p->shape[0], cols = p->shape[1];
    const int32_t dim = sharded_dim(t, p);
    const int64_t tr = dim == 0 ? t->size : 1, tc = dim == 1 ? t->size : 1;
    if (!(t->split_qkv && p->qkv_groups > 0))
        return lwi_muon_apply_scaled(m, s, w, x, count, tr * rows, tc * cols, lr, wd);
    const lw_muon_options *o = lwi_muon_options(m);
    if (!o->cautious_wd && o->weight_decay_mode != LW_WD_SCALED)
        return lw_vec_axpy(s, w, -lr, x, count);
    const int64_t per = p->qkv_rows[0] + p->qkv_rows[1] + p->qkv_rows[2];
    lw_status st = LW_OK;
    for (int64_t g = 0; g < p->qkv_groups && st == LW_OK; g++) {
        int64_t first = g * per;
        for (int c = 0; c < 3 && st == LW_OK; c++) {
            const int64_t r = p->qkv_rows[c];
            int64_t lo = first * cols, hi = (first + r) * cols;
            first += r;
            lo = lo > start ? lo : start;
            hi = hi < start + count ? hi : start + count;
            if (lo < hi)
                st = lwi_muon_apply_scaled(m, s, w + (lo - start), x + (lo - start), hi - lo,
                                           tr * p->qkv_groups * r, tc * cols, lr, wd);
        }
    }
    return st;
}
