/* embedding.c: token plus position embedding on a GPU over a range of the table's rows (a rank's
 * under tensor parallelism; every row a token id can name for the whole table): forward (a
 * gather, nn.cu; tokens outside the range look up 0) and a backward that repeats bit for bit and
 * matches the CPU's order of additions: the positions of the range's tokens are bucketed by
 * token on the host (a stable sort, so each token's positions stay in batch-major order), and
 * one block per (token, channel tile) adds its positions into the token's row one after another.
 * No atomics. The bucketing (lwc_buckets_by_row) also serves the mixture of experts'
 * scatter-adds (moe.c), where a negative row is refused, since the sort would misplace it. */
#include "cuda/cuda.h"

#include <stdlib.h>
#include <string.h>

/* perm[n] = 0 .. n - 1 ordered by tok[perm[i]], equal tokens in increasing position: stable
 * counting passes (LSD radix) over the low 16 bits, then the high 16 bits when some token has
 * them, so that the work does not grow with the vocabulary. tmp: n more ints; counts: 65536. */
static void sort_by_token(const int32_t *tok, int32_t n, int32_t *perm, int32_t *tmp,
                          int32_t *counts, bool two_passes) {
    int32_t *first = two_passes ? tmp : perm;
    memset(counts, 0, sizeof(int32_t) * 65536);
    for (int32_t i = 0; i < n; i++)
        counts[tok[i] & 0xFFFF]++;
    for (int32_t k = 0, at = 0; k < 65536; k++) {
        const int32_t m = counts[k];
        counts[k] = at;
        at += m;
    }
    for (int32_t i = 0; i < n; i++)
        first[counts[tok[i] & 0xFFFF]++] = i;
    if (!two_passes) return;
    memset(counts, 0, sizeof(int32_t) * 65536);
    for (int32_t i = 0; i < n; i++)
        counts[tok[i] >> 16]++;
    for (int32_t k = 0, at = 0; k < 65536; k++) {
        const int32_t m = counts[k];
        counts[k] = at;
        at += m;
    }
    for (int32_t i = 0; i < n; i++)
        perm[counts[tok[tmp[i]] >> 16]++] = tmp[i];
}

/* The buckets of the positions whose row lies in [first, first + count), rows shifted by -first
 * (lwc_buckets_by_row's with first 0 and every row; there a negative row is refused, here it is
 * outside the range like any other). */
static lw_status buckets_in(lw_stream *s, const int32_t *rows, int64_t n, int64_t first,
                            int64_t count, bool refuse_negative, const char *what,
                            const char *item, lwc_buckets *out) {
    const char *name = s->device->name;
    if (n > INT32_MAX / 6)
        return lwc_host->fail(LW_ERR_RANGE, "%s: %s of %lld positions: at most %d", name, what,
                              (long long)n, INT32_MAX / 6);
    cudaStream_t cs = lwc_cuda_stream(s);
    /* host: rows[n] | perm[n] | start[n + 1] | seg_row[n] | tmp[n] | at[n]; the device gets
     * perm | start[segments + 1] | seg_row[segments] in one copy */
    int32_t *host = NULL, *dev = NULL;
    lw_status st = lwc_host_workspace(s, (int64_t)sizeof(int32_t) * (6 * n + 1), (void **)&host);
    if (st == LW_OK) st = lwc_workspace(s, (int64_t)sizeof(int32_t) * (3 * n + 1), (void **)&dev);
    if (st != LW_OK) return st;
    /* The rows come to the host and the stream is waited for: the callers are backwards (and the
     * combine, a mixture of experts' last step), so the wait costs little, and the buckets then
     * need no device sort. */
    cudaError_t e = cudaMemcpyAsync(host, rows, sizeof(int32_t) * (size_t)n,
                                    cudaMemcpyDeviceToHost, cs);
    if (e == cudaSuccess) e = cudaStreamSynchronize(cs);
    if (e != cudaSuccess) return lwc_fail(s->device, e, "copying the row indices to the host");
    int32_t *tok = host, *perm = host + n, *tmp = host + 4 * n + 1, *at = host + 5 * n + 1;
    /* the positions in range, compacted in place: tok[m] their shifted rows, at[m] where each was */
    int32_t high = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        if (refuse_negative && tok[i] < 0)
            return lwc_host->fail(LW_ERR_RANGE, "%s: %s: %s %d at position %lld is negative", name,
                                  what, item, (int)tok[i], (long long)i);
        if ((int64_t)tok[i] < first || (int64_t)tok[i] - first >= count) continue;
        tok[m] = (int32_t)((int64_t)tok[i] - first);
        at[m++] = (int32_t)i;
        high |= tok[m - 1];
    }
    int32_t *counts = malloc(sizeof(int32_t) * 65536);
    if (counts == NULL) return lwc_host->fail(LW_ERR_NOMEM, "%s: out of memory", name);
    sort_by_token(tok, m, perm, tmp, counts, high > 0xFFFF);
    free(counts);
    /* segments: runs of one row in perm order */
    int32_t *start = perm + m, segments = 0;
    for (int32_t i = 0; i < m; i++)
        if (i == 0 || tok[perm[i]] != tok[perm[i - 1]]) start[segments++] = i;
    start[segments] = m;
    int32_t *seg_row = start + segments + 1;
    for (int32_t k = 0; k < segments; k++)
        seg_row[k] = tok[perm[start[k]]];
    /* perm back from the compacted order to the positions (the sort kept them increasing) */
    for (int32_t i = 0; i < m; i++)
        perm[i] = at[perm[i]];
    /* The upload reads pinned memory asynchronously; the next call rewrites it only after its
     * own copy and wait on this stream, which come after this upload. */
    e = cudaMemcpyAsync(dev, perm, sizeof(int32_t) * (size_t)(m + 2 * (int64_t)segments + 1),
                        cudaMemcpyHostToDevice, cs);
    if (e != cudaSuccess) return lwc_fail(s->device, e, "copying the row buckets to the device");
    *out = (lwc_buckets){dev, dev + m, dev + m + segments + 1, segments};
    return LW_OK;
}

lw_status lwc_buckets_by_row(lw_stream *s, const int32_t *rows, int64_t n, const char *what,
                             const char *item, lwc_buckets *out) {
    return buckets_in(s, rows, n, 0, INT64_MAX, true, what, item, out);
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
    lw_status st = buckets_in(s, tokens, b * t, first, rows, false, "embedding range backward",
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
