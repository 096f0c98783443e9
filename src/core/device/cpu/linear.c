/* linear.c: the fully connected layer y = x w^T + b, forward and accumulating backward (and the
 * forward with the GELU after it, and the backward with the GELU before it: the two kernels, one
 * after the other), with the GEMMs on OpenBLAS (row-major; w is [out, in] as in torch, so the
 * forward reads it transposed without a copy). bf16 weights, inputs and output gradients are
 * widened into memory of the call's own (exact, so the results are those of their fp32
 * widening); fp32 ones are read in place. A bf16 output is the fp32 result rounded. No checks
 * beyond empty shapes. */
#include "device/cpu/cpu.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

/* Columns summed per pass of the bias gradient: the double accumulators stay in L1. */
#define DB_BLOCK 256

/* y in fp32 (the forward's result before a bf16 output's rounding). */
static lw_status forward_f32(float *y, const void *x, lw_dtype x_dtype, const void *w,
                             lw_dtype w_dtype, const float *b, int64_t n, int64_t in, int64_t out) {
    /* Seeding y with the bias and letting the GEMM add onto it (beta = 1) saves a second sweep
     * over y; without a bias, beta = 0 means y's old contents are never read. */
    if (b != NULL)
        for (int64_t i = 0; i < n; i++)
            memcpy(y + i * out, b, sizeof(float) * (size_t)out);
    if (in <= 0) { /* an empty inner dimension: BLAS rejects lda = 0, and the product is 0 */
        if (b == NULL) memset(y, 0, sizeof(float) * (size_t)(n * out));
        return LW_OK;
    }
    const float *wf, *xf;
    float *owned, *owned_x = NULL;
    lw_status st = lwi_cpu_as_f32(w, w_dtype, out * in, &wf, &owned);
    if (st == LW_OK) st = lwi_cpu_as_f32(x, x_dtype, n * in, &xf, &owned_x);
    if (st == LW_OK)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)out, (int)in, 1.0f, xf,
                    (int)in, wf, (int)in, b != NULL ? 1.0f : 0.0f, y, (int)out);
    free(owned), free(owned_x);
    return st;
}

lw_status lwi_cpu_linear_forward(lw_stream *stream, void *y, lw_dtype y_dtype, const void *x,
                                 lw_dtype x_dtype, const void *w, lw_dtype w_dtype, const float *b,
                                 int64_t n, int64_t in, int64_t out) {
    if (n <= 0 || out <= 0) return LW_OK;
    if (y_dtype != LW_DTYPE_BF16) return forward_f32(y, x, x_dtype, w, w_dtype, b, n, in, out);
    float *y32 = malloc(sizeof(float) * (size_t)(n * out));
    if (y32 == NULL)
        return lwi_fail(LW_ERR_NOMEM, "cpu: linear forward: out of memory for %lld x %lld floats",
                        (long long)n, (long long)out);
    lw_status st = forward_f32(y32, x, x_dtype, w, w_dtype, b, n, in, out);
    if (st == LW_OK) st = lwi_cpu_vec_to_bf16(stream, y, y32, n * out);
    free(y32);
    return st;
}

/* The backward on an fp32 dy. */
static lw_status backward_f32(float *dx, float *dw, float *db, const float *dy, const void *x,
                              lw_dtype x_dtype, const void *w, lw_dtype w_dtype, int64_t n,
                              int64_t in, int64_t out) {
    if (in > 0) {
        /* dx[n, in] += dy[n, out] w[out, in] */
        if (dx != NULL) {
            const float *wf;
            float *owned;
            const lw_status st = lwi_cpu_as_f32(w, w_dtype, out * in, &wf, &owned);
            if (st != LW_OK) return st;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)in, (int)out, 1.0f,
                        dy, (int)out, wf, (int)in, 1.0f, dx, (int)in);
            free(owned);
        }
        /* dw[out, in] += dy^T x: dy read transposed, no copy */
        const float *xf;
        float *owned_x;
        const lw_status st = lwi_cpu_as_f32(x, x_dtype, n * in, &xf, &owned_x);
        if (st != LW_OK) return st;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)out, (int)in, (int)n, 1.0f, dy,
                    (int)out, xf, (int)in, 1.0f, dw, (int)in);
        free(owned_x);
    }
    if (db == NULL) return LW_OK;
    /* Column sums over n rows (n = batch * time, thousands): summed in double so the bias
     * gradient does not lose digits to the row count; row-wise sweeps keep dy contiguous. */
    for (int64_t j0 = 0; j0 < out; j0 += DB_BLOCK) {
        int64_t m = out - j0 < DB_BLOCK ? out - j0 : DB_BLOCK;
        double acc[DB_BLOCK];
        for (int64_t j = 0; j < m; j++)
            acc[j] = 0.0;
        for (int64_t i = 0; i < n; i++) {
            const float *row = dy + i * out + j0;
            for (int64_t j = 0; j < m; j++)
                acc[j] += (double)row[j];
        }
        for (int64_t j = 0; j < m; j++)
            db[j0 + j] += (float)acc[j];
    }
    return LW_OK;
}

lw_status lwi_cpu_linear_backward(lw_stream *stream, float *dx, float *dw, float *db,
                                  const void *dy, lw_dtype dy_dtype, const void *x,
                                  lw_dtype x_dtype, const void *w, lw_dtype w_dtype, int64_t n,
                                  int64_t in, int64_t out) {
    (void)stream;
    if (n <= 0 || out <= 0) return LW_OK;
    const float *dyf;
    float *owned;
    lw_status st = lwi_cpu_as_f32(dy, dy_dtype, n * out, &dyf, &owned);
    if (st == LW_OK) st = backward_f32(dx, dw, db, dyf, x, x_dtype, w, w_dtype, n, in, out);
    free(owned);
    return st;
}

lw_status lwi_cpu_linear_gelu_forward(lw_stream *stream, void *y, void *pre, lw_dtype dtype,
                                      const void *x, lw_dtype x_dtype, const void *w,
                                      lw_dtype w_dtype, const float *b, int64_t n, int64_t in,
                                      int64_t out) {
    lw_status st = lwi_cpu_linear_forward(stream, pre, dtype, x, x_dtype, w, w_dtype, b, n, in, out);
    if (st == LW_OK && n > 0 && out > 0)
        st = lwi_cpu_gelu_forward(stream, y, dtype, pre, dtype, n * out);
    return st;
}

lw_status lwi_cpu_linear_gelu_backward(lw_stream *stream, void *dpre, lw_dtype dtype, float *dw,
                                       float *db, const void *dy, lw_dtype dy_dtype,
                                       const void *x, lw_dtype x_dtype, const void *w,
                                       lw_dtype w_dtype, const void *pre, int64_t n, int64_t in,
                                       int64_t out) {
    if (n <= 0 || (in <= 0 && out <= 0)) return LW_OK;
    if (out <= 0) { /* an empty product: dpre is 0 (it is written, not accumulated) */
        memset(dpre, 0, (size_t)(n * in) * (dtype == LW_DTYPE_BF16 ? 2 : 4));
        return LW_OK;
    }
    float *dx = in > 0 ? calloc((size_t)(n * in), sizeof(float)) : NULL;
    if (in > 0 && dx == NULL)
        return lwi_fail(LW_ERR_NOMEM, "cpu: linear gelu backward: out of memory for %lld x %lld "
                                      "floats",
                        (long long)n, (long long)in);
    lw_status st = lwi_cpu_linear_backward(stream, dx, dw, db, dy, dy_dtype, x, x_dtype, w, w_dtype,
                                           n, in, out);
    if (st == LW_OK && in > 0) {
        memset(dpre, 0, (size_t)(n * in) * (dtype == LW_DTYPE_BF16 ? 2 : 4));
        st = lwi_cpu_gelu_backward(stream, dpre, dtype, dx, pre, dtype, n * in);
    }
    free(dx);
    return st;
}
