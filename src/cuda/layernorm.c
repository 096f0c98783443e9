/* layernorm.c: the table's layer normalisation entries on a GPU: the forward, and the backward's
 * input gradient (kernels in layernorm.cu) with the gain and shift gradients as column sums
 * (colsum.cu) sharing one workspace; and both fused with the residual add around the norm (the
 * same kernels with the sum's second row, or the stream's gradient, given). */
#include "cuda/cuda.h"

lw_status lwc_layernorm_forward(lw_stream *s, void *y, lw_dtype y_dtype, float *mean,
                                float *rstd, const float *x, const float *g, const float *beta,
                                int64_t n, int64_t c, float eps) {
    return lwc_add_layernorm_forward(s, NULL, y, y_dtype, mean, rstd, x, NULL, g, beta, n, c,
                                     eps);
}

/* b NULL: the plain norm of a (sum unused). */
lw_status lwc_add_layernorm_forward(lw_stream *s, float *sum, void *y, lw_dtype y_dtype,
                                    float *mean, float *rstd, const float *a, const float *b,
                                    const float *g, const float *beta, int64_t n, int64_t c,
                                    float eps) {
    if (n <= 0 || c <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s,
                        lwc_ln_forward(lwc_cuda_stream(s), sum, y, y_dtype == LW_DTYPE_BF16, mean,
                                       rstd, a, b, g, beta, n, c, eps),
                        "the layer norm kernel");
}

lw_status lwc_layernorm_backward(lw_stream *s, float *dx, float *dg, float *dbeta, const float *dy,
                                 const float *x, const float *g, const float *mean,
                                 const float *rstd, int64_t n, int64_t c) {
    return lwc_add_layernorm_backward(s, dx, dg, dbeta, NULL, dy, x, g, mean, rstd, n, c);
}

/* dres NULL: the plain backward. */
lw_status lwc_add_layernorm_backward(lw_stream *s, float *dx, float *dg, float *dbeta,
                                     const float *dres, const float *dy, const float *x,
                                     const float *g, const float *mean, const float *rstd,
                                     int64_t n, int64_t c) {
    if (n <= 0 || c <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cudaStream_t cs = lwc_cuda_stream(s);
    void *work = NULL;
    lw_status st = lwc_workspace(s, (int64_t)sizeof(double) * lwc_colsum_doubles(n, c), &work);
    if (st != LW_OK) return st;
    /* dg and dbeta reuse one workspace: the second sum's partials are written after the first's
     * are read, in stream order */
    cudaError_t e = lwc_ln_dx(cs, dx, dres, dy, x, g, mean, rstd, n, c);
    if (e == cudaSuccess) e = lwc_colsum_xhat(cs, dg, dy, x, mean, rstd, n, c, work);
    if (e == cudaSuccess && dbeta != NULL) e = lwc_colsum(cs, dbeta, dy, false, n, c, work);
    return lwc_launched(s, e, "the layer norm backward kernels");
}
