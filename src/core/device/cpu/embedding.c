/* embedding.c: token embedding plus optional learned position embedding, forward and
 * accumulating backward, over a range of the table's rows: a rank's rows under tensor
 * parallelism, or every row a token id can name (lw_embedding_forward and _backward, whose
 * dispatchers pass first 0 and 2^31 rows). Token ids are trusted to lie in the vocabulary: the
 * kernel does not know it, so callers validate ids once per batch, not per lookup. */
#include "device/cpu/cpu.h"


/* The rows [first, first + rows) of the token table; other tokens look up nothing here (0) and
 * add no gradient. */
static inline bool in_range(int32_t tok, int64_t first, int64_t rows) {
    return (int64_t)tok >= first && (int64_t)tok - first < rows;
}

lw_status lwi_cpu_embedding_range_forward(lw_stream *stream, float *y, const int32_t *tokens,
                                          const void *wte, const void *wpe, lw_dtype w_dtype,
                                          int64_t first, int64_t rows, int64_t b, int64_t t,
                                          int64_t c) {
    (void)stream;
    if (b <= 0 || t <= 0 || c <= 0) return LW_OK;
    const bool bf16 = w_dtype == LW_DTYPE_BF16;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t ti = 0; ti < t; ti++) {
            float *out = y + (bi * t + ti) * c;
            const int32_t k = tokens[bi * t + ti];
            const bool tok = in_range(k, first, rows), pos = wpe != NULL;
            const int64_t at_tok = ((int64_t)k - first) * c, at_pos = ti * c;
            /* the rank holding the token adds the same two floats as one rank holding them all;
             * a lone row is copied as it is (0 + x would turn -0 into +0) */
            for (int64_t i = 0; i < c; i++) {
                const float x = tok ? lwi_cpu_load(wte, bf16, at_tok + i) : 0.0f;
                out[i] = !pos  ? x
                         : tok ? x + lwi_cpu_load(wpe, bf16, at_pos + i)
                               : lwi_cpu_load(wpe, bf16, at_pos + i);
            }
        }
    return LW_OK;
}

lw_status lwi_cpu_embedding_range_backward(lw_stream *stream, float *dwte, float *dwpe,
                                           const float *dy, const int32_t *tokens, int64_t first,
                                           int64_t rows, int64_t b, int64_t t, int64_t c) {
    (void)stream;
    if (b <= 0 || t <= 0 || c <= 0) return LW_OK;
    /* A token repeated in the batch adds into the same dwte row several times; the loop order
     * (batch-major, then time) is fixed, so the result is deterministic, and a rank's rows are
     * those of one rank holding them all, bit for bit. */
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t ti = 0; ti < t; ti++) {
            const float *g = dy + (bi * t + ti) * c;
            const int32_t k = tokens[bi * t + ti];
            if (in_range(k, first, rows)) {
                float *tok = dwte + ((int64_t)k - first) * c;
                for (int64_t i = 0; i < c; i++)
                    tok[i] += g[i];
            }
            if (dwpe != NULL) {
                float *pos = dwpe + ti * c;
                for (int64_t i = 0; i < c; i++)
                    pos[i] += g[i];
            }
        }
    return LW_OK;
}
