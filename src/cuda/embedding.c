/* embedding.c: token plus position embedding on a GPU over a range of the table's rows (a rank's
 * under tensor parallelism; every row a token id can name for the whole table): forward (a
 * gather, embedding.cu, of fp32 or bf16 tables; tokens outside the range look up 0) and a
 * backward that repeats bit for bit and matches the CPU's order of additions: the positions of
 * the range's tokens are bucketed by token on the host (buckets.c: a stable sort, so each
 * token's positions stay in batch-major order), and one block per (token, channel tile) adds its
 * positions into the token's row one after another. No atomics. */
#include "cuda/cuda.h"

lw_status lwc_embedding_range_forward(lw_stream *s, float *y, const int32_t *tokens,
                                      const void *wte, const void *wpe, lw_dtype w_dtype,
                                      int64_t first, int64_t rows, int64_t b, int64_t t,
                                      int64_t c) {
    if (b <= 0 || t <= 0 || c <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s,
                        lwc_embed_range(lwc_cuda_stream(s), y, tokens, wte, wpe,
                                        w_dtype == LW_DTYPE_BF16, first, rows, b, t, c),
                        "the embedding range kernel");
}

lw_status lwc_embedding_range_backward(lw_stream *s, float *dwte, float *dwpe, const float *dy,
                                       const int32_t *tokens, int64_t first, int64_t rows,
                                       int64_t b, int64_t t, int64_t c) {
    if (b <= 0 || t <= 0 || c <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    lwc_buckets bk;
    lw_status st = lwc_buckets_in(s, tokens, b * t, first, rows, false, "embedding range backward",
                                  "token", &bk);
    if (st != LW_OK) return st;
    cudaStream_t cs = lwc_cuda_stream(s);
    if (dwpe != NULL) {
        cudaError_t e = lwc_embed_dwpe(cs, dwpe, dy, b, t, c);
        if (e != cudaSuccess) return lwc_fail(s->device, e, "the position embedding's gradient");
    }
    return lwc_launched(
        s, lwc_rows_add(cs, dwte, dy, NULL, bk.perm, bk.start, bk.row, bk.segments, c),
        "the token embedding's gradient");
}
