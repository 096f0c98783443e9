/* embedding.c: token plus position embedding on a GPU, forward (a gather, embedding.cu) and a
 * backward that repeats bit for bit and matches the CPU's order of additions: the positions are
 * bucketed by token on the host (buckets.c: a stable sort, so each token's positions stay in
 * batch-major order), and one block per (token, channel tile) adds its positions into the token's
 * row one after another. No atomics. Tokens are trusted to lie in [0, vocab) (the caller checks
 * them), except that a negative one is refused, since the sort would misplace it. The range forms
 * (tensor parallelism's vocabulary-parallel embedding) look up and add only the tokens of a rank's
 * rows: the bucketing leaves the others out. */
#include "cuda/cuda.h"

lw_status lwc_embedding_forward(lw_stream *s, float *y, const int32_t *tokens, const float *wte,
                                const float *wpe, int64_t b, int64_t t, int64_t c) {
    if (b <= 0 || t <= 0 || c <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s, lwc_embed(lwc_cuda_stream(s), y, tokens, wte, wpe, b, t, c),
                        "the embedding kernel");
}

lw_status lwc_embedding_backward(lw_stream *s, float *dwte, float *dwpe, const float *dy,
                                 const int32_t *tokens, int64_t b, int64_t t, int64_t c) {
    if (b <= 0 || t <= 0 || c <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    /* the tokens checked first: a refused call changes nothing */
    lwc_buckets bk;
    lw_status st = lwc_buckets_by_row(s, tokens, b * t, "embedding backward", "token", &bk);
    if (st != LW_OK) return st;
    cudaStream_t cs = lwc_cuda_stream(s);
    if (dwpe != NULL) {
        cudaError_t e = lwc_embed_dwpe(cs, dwpe, dy, b, t, c);
        if (e != cudaSuccess) return lwc_fail(s->device, e, "the position embedding's gradient");
    }
    return lwc_launched(s, lwc_embed_dwte(cs, dwte, dy, bk.perm, bk.start, bk.row, bk.segments, c),
                        "the token embedding's gradient");
}

lw_status lwc_embedding_range_forward(lw_stream *s, float *y, const int32_t *tokens,
                                      const float *wte, const float *wpe, int64_t first,
                                      int64_t rows, int64_t b, int64_t t, int64_t c) {
    if (b <= 0 || t <= 0 || c <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(s,
                        lwc_embed_range(lwc_cuda_stream(s), y, tokens, wte, wpe, first, rows, b, t,
                                        c),
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
    return lwc_launched(s, lwc_embed_dwte(cs, dwte, dy, bk.perm, bk.start, bk.row, bk.segments, c),
                        "the token embedding's gradient");
}
