/* buckets.c: rows bucketed on the host for the scatter-adds that add in the CPU's order without
 * atomics: the embedding's backward (embedding.cu, by token) and the gather's backward and the
 * combine (gather.cu, by destination row). Two families use it, so it is a file of its own. The
 * rows are copied to the host (the stream is waited for), ordered by a stable radix sort, cut
 * into segments of one row each and uploaded into the stream's workspace. */
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
lw_status lwc_buckets_in(lw_stream *s, const int32_t *rows, int64_t n, int64_t first, int64_t count,
                         bool refuse_negative, const char *what, const char *item,
                         lwc_buckets *out) {
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
    return lwc_buckets_in(s, rows, n, 0, INT64_MAX, true, what, item, out);
}
