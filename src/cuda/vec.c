/* vec.c: the table's vector entries on a GPU (kernels in vec.cu): the norm statistics, the finite
 * check (its flag copied back, the stream waited for), scale, add and axpy; and the conversions
 * between fp32 and bf16 (kernels in bf16.cu, which the library's bf16 GEMMs share). */
#include "cuda/cuda.h"

/* The flag of the finite check: the last 8 bytes of the stream's scratch, after the partials. */
#define FLAG_OFFSET (LWC_SCRATCH_BYTES - 8)

lw_status lwc_vec_norm_stats(lw_stream *s, const float *x, int64_t n, double *acc) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s, lwc_norm_stats(lwc_cuda_stream(s), x, n, acc, lwc_str(s)->scratch),
                        "the norm statistics kernel");
}

lw_status lwc_vec_all_finite(lw_stream *s, const float *x, int64_t n, bool *finite) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    lwc_stream *cs = lwc_str(s);
    int32_t *flag = (int32_t *)((char *)cs->scratch + FLAG_OFFSET);
    cudaError_t e = lwc_all_finite(cs->stream, x, n, flag);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(cs->host_flag, flag, sizeof *flag, cudaMemcpyDeviceToHost, cs->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(cs->stream);
    if (e != cudaSuccess) return lwc_fail(s->device, e, "the finite check");
    *finite = *(const int32_t *)cs->host_flag != 0;
    return LW_OK;
}

lw_status lwc_vec_scale(lw_stream *s, float *x, int64_t n, float alpha) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s, lwc_scale(lwc_cuda_stream(s), x, n, alpha), "the scale kernel");
}

lw_status lwc_vec_add(lw_stream *s, float *y, const float *a, const float *b, int64_t n) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s, lwc_add(lwc_cuda_stream(s), y, a, b, n), "the add kernel");
}

lw_status lwc_vec_axpy(lw_stream *s, float *y, float alpha, const float *x, int64_t n) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s, lwc_axpy(lwc_cuda_stream(s), y, alpha, x, n), "the axpy kernel");
}

lw_status lwc_vec_to_bf16(lw_stream *s, uint16_t *y, const float *x, int64_t n) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s, lwc_f32_to_bf16(lwc_cuda_stream(s), x, y, n),
                        "the fp32 to bf16 conversion");
}

lw_status lwc_vec_from_bf16(lw_stream *s, float *y, const uint16_t *x, int64_t n) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s, lwc_bf16_to_f32(lwc_cuda_stream(s), x, y, n),
                        "the bf16 to fp32 conversion");
}
