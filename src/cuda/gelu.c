/* gelu.c: the table's GELU entries on a GPU, forward and accumulating backward (kernels in
 * gelu.cu). */
#include "cuda/cuda.h"

lw_status lwc_gelu_forward(lw_stream *s, void *y, lw_dtype y_dtype, const void *x, lw_dtype x_dtype,
                           int64_t n) {
    if (n <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(
        s,
        lwc_gelu(lwc_cuda_stream(s), y, y_dtype == LW_DTYPE_BF16, x, x_dtype == LW_DTYPE_BF16, n),
        "the GELU kernel");
}

lw_status lwc_gelu_backward(lw_stream *s, void *dx, lw_dtype dx_dtype, const float *dy,
                            const void *x, lw_dtype x_dtype, int64_t n) {
    if (n <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s,
                        lwc_gelu_grad(lwc_cuda_stream(s), dx, dx_dtype == LW_DTYPE_BF16, dy, x,
                                      x_dtype == LW_DTYPE_BF16, n),
                        "the GELU backward kernel");
}
