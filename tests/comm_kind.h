/* comm_kind.h: what the collective tests (comm_cases.h) run on: a memory kind, where the
 * collectives' buffers live (host memory, or a device's through lw_device_*), with the copies of
 * the test's host arrays there and back; and the cases' data: each rank's values as a known
 * function of (rank, index), the variable-count forms' segment patterns, and the checks that
 * need only host arrays (the all-to-all-v's are comm_cases_a2a.h's). */
#ifndef LW_TEST_COMM_KIND_H
#define LW_TEST_COMM_KIND_H

#include <stdlib.h>
#include <string.h>

#include "check.h"

/* ---- memory kinds ---- */

/* Where a communicator's buffers live. Host memory is malloc'd to the byte (so that the
 * sanitizers see a write one past a buffer) and copied with memcpy; a device's is
 * lw_device_alloc'd and copied on a stream of the device (its default one unless named). */
typedef struct mem_kind {
    lw_device *dev; /* [borrowed] the buffers' device: the CPU for host memory */
    bool host;      /* host memory (malloc, memcpy) */
} mem_kind;

static inline mem_kind mem_host(void) { return (mem_kind){lw_device_cpu(), true}; }
static inline mem_kind mem_device(lw_device *d) { return (mem_kind){d, false}; }

/* Whether a collective of c started on a request stays active until it is waited for: one rank
 * of host memory finishes it at once (the identity); a device communicator finishes it with the
 * device's work, even alone. */
static inline bool stays_active(const mem_kind *m, const lw_comm *c) {
    return !m->host || lw_comm_size(c) > 1;
}

/* Polls req with lw_request_test until its collective completes; then it is no longer active. */
static inline void poll_to_end(lw_request *req) {
    bool done = false;
    while (!done)
        CHECK_OK(lw_request_test(req, &done));
    CHECK(!lw_request_active(req));
}

/* A new stream of the buffers' device (the caller's stream that collectives are ordered after). */
static inline lw_stream *mem_stream_new(const mem_kind *m) {
    lw_stream *s = NULL;
    CHECK_OK(lw_stream_new(m->dev, &s));
    return s;
}

/* bytes of the kind's memory (at least one byte: never NULL for an empty buffer). */
static inline void *mem_alloc(const mem_kind *m, int64_t bytes) {
    void *p = NULL;
    if (m->host)
        p = malloc((size_t)(bytes > 0 ? bytes : 1));
    else
        CHECK_OK(lw_device_alloc(m->dev, bytes > 0 ? bytes : 1, &p));
    return p;
}

static inline void mem_free(const mem_kind *m, void *p) {
    if (m->host)
        free(p);
    else
        lw_device_free(m->dev, p);
}

/* host[0..bytes) into the kind's memory at p, on stream s (NULL: the device's default stream);
 * a host-to-device copy is complete when it returns. */
static inline void mem_put_on(const mem_kind *m, lw_stream *s, void *p, const void *host,
                              int64_t bytes) {
    if (bytes <= 0 || p == NULL) return;
    if (m->host)
        memcpy(p, host, (size_t)bytes);
    else
        CHECK_OK(lw_device_copy(s ? s : lw_device_stream(m->dev), p, host, bytes,
                                LW_COPY_HOST_TO_DEVICE));
}

static inline void mem_put(const mem_kind *m, void *p, const void *host, int64_t bytes) {
    mem_put_on(m, NULL, p, host, bytes);
}

/* New memory of the kind holding host[0..bytes). */
static inline void *mem_upload(const mem_kind *m, const void *host, int64_t bytes) {
    void *p = mem_alloc(m, bytes);
    mem_put(m, p, host, bytes);
    return p;
}

/* The kind's memory at p back into host[0..bytes), after the device's default stream. */
static inline void mem_get(const mem_kind *m, void *host, const void *p, int64_t bytes) {
    if (bytes <= 0 || p == NULL) return;
    if (m->host)
        memcpy(host, p, (size_t)bytes);
    else
        CHECK_OK(lw_device_copy(lw_device_stream(m->dev), host, p, bytes, LW_COPY_DEVICE_TO_HOST));
}

/* ---- values ---- */

static inline float value(int rank, int64_t i) { return (float)(rank + 1) * 0.5f + (float)(i % 7); }

/* bf16 / f16 bits of element i of rank r's segment: moved, never read as numbers. */
static inline uint16_t bits(int r, int64_t i) { return (uint16_t)(r * 4096 + i % 4000); }

/* n floats: value(rank, i) inside [lo, hi), `other` outside. */
static inline float *values_in(int rank, int64_t n, int64_t lo, int64_t hi, float other) {
    float *h = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++)
        h[i] = i >= lo && i < hi ? value(rank, i) : other;
    return h;
}

/* ---- variable-count forms: segments of unequal size, in rank order ---- */

#define SEGMENT_PATTERNS 6

/* Segment sizes, one per rank, for pattern k: unequal; one rank without a segment; all on the
 * last rank; all on rank 0; every segment empty; large (the algorithms MPI and NCCL take for
 * long messages). Returns their sum. */
static inline int64_t segment_counts(int k, int size, int64_t *counts) {
    int64_t total = 0;
    for (int r = 0; r < size; r++) {
        switch (k) {
        case 0:
            counts[r] = 3 * r + 1;
            break;
        case 1:
            counts[r] = r == 1 ? 0 : 10 + r;
            break;
        case 2:
            counts[r] = r == size - 1 ? 1000 : 0;
            break;
        case 3:
            counts[r] = r == 0 ? 77 : 0;
            break;
        case 4:
            counts[r] = 0;
            break;
        default:
            counts[r] = 100000 + 777 * r;
            break;
        }
        total += counts[r];
    }
    return total;
}

/* Where rank's segment starts: the sum of counts[0..rank). */
static inline int64_t displ(const int64_t *counts, int rank) {
    int64_t at = 0;
    for (int r = 0; r < rank; r++)
        at += counts[r];
    return at;
}

/* The rank whose segment holds element i. */
static inline int owner(const int64_t *counts, int size, int64_t i) {
    for (int r = 0; r < size; r++)
        if (i < displ(counts, r + 1)) return r;
    return -1;
}

/* Counts on the heap, spoiled and freed right after the call that takes them: the collective
 * must not read them later (NCCL enqueues everything during the call, MPI copies them). */
static inline int64_t *counts_copy(const int64_t *counts, int size) {
    int64_t *copy = malloc(sizeof(int64_t) * (size_t)size);
    memcpy(copy, counts, sizeof(int64_t) * (size_t)size);
    return copy;
}

static inline void spoil_and_free(int64_t *copy, int size) {
    for (int r = 0; r < size; r++)
        copy[r] = -12345;
    free(copy);
}

/* Mismatches of b (host) after a reduce-scatter-v of value(r, i) over every rank r: the sum in
 * this rank's segment, its own data elsewhere. */
static inline int reduce_scatterv_wrong(const float *b, const int64_t *counts, int rank, int size) {
    const int64_t lo = displ(counts, rank), hi = lo + counts[rank];
    const int64_t total = displ(counts, size);
    int bad = 0;
    for (int64_t i = 0; i < total; i++) {
        float want = value(rank, i);
        if (i >= lo && i < hi) {
            want = 0.0f;
            for (int r = 0; r < size; r++)
                want += value(r, i);
        }
        bad += b[i] != want;
    }
    return bad;
}

/* Mismatches of h[0..total) after an all-gather of segments: element i from its owner. */
static inline int gathered_wrong(const float *h, const int64_t *counts, int size) {
    int bad = 0;
    for (int64_t i = 0; i < displ(counts, size); i++)
        bad += h[i] != value(owner(counts, size, i), i);
    return bad;
}

/* All-gather-v's counts: uneven, scale * (r + 2) for even ranks r, nothing from odd ones.
 * Returns their sum. */
static inline int64_t gatherv_counts(int size, int64_t scale, int64_t *counts) {
    int64_t total = 0;
    for (int r = 0; r < size; r++)
        total += counts[r] = r % 2 == 1 ? 0 : scale * (r + 2);
    return total;
}

/* Mismatches of h after an all-gather-v of value(r, i), counts[r] of them from each rank r. */
static inline int gatherv_wrong(const float *h, const int64_t *counts, int size) {
    int64_t at = 0;
    int bad = 0;
    for (int r = 0; r < size; r++)
        for (int64_t i = 0; i < counts[r]; i++)
            bad += h[at++] != value(r, i);
    return bad;
}

#endif
