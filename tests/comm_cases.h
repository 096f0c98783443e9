/* comm_cases.h: the data of the collective tests, shared by test_comm.c (host memory, MPI and
 * self) and test_nccl.c (the GPU's memory, NCCL): each rank's values as a known function of
 * (rank, index), the variable-count forms' segment patterns, the all-to-all-v's count patterns
 * and values in every dtype it takes, and the checks that need only host arrays. */
#ifndef LW_TEST_COMM_CASES_H
#define LW_TEST_COMM_CASES_H

#include <stdlib.h>
#include <string.h>

#include "lw.h"

static float value(int rank, int64_t i) { return (float)(rank + 1) * 0.5f + (float)(i % 7); }

/* ---- variable-count forms: segments of unequal size, in rank order ---- */

#define SEGMENT_PATTERNS 6

/* Segment sizes, one per rank, for pattern k: unequal; one rank without a segment; all on the
 * last rank; all on rank 0; every segment empty; large (the algorithms MPI and NCCL take for
 * long messages). Returns their sum. */
static int64_t segment_counts(int k, int size, int64_t *counts) {
    int64_t total = 0;
    for (int r = 0; r < size; r++) {
        switch (k) {
        case 0: counts[r] = 3 * r + 1; break;
        case 1: counts[r] = r == 1 ? 0 : 10 + r; break;
        case 2: counts[r] = r == size - 1 ? 1000 : 0; break;
        case 3: counts[r] = r == 0 ? 77 : 0; break;
        case 4: counts[r] = 0; break;
        default: counts[r] = 100000 + 777 * r; break;
        }
        total += counts[r];
    }
    return total;
}

/* Where rank's segment starts: the sum of counts[0..rank). */
static int64_t displ(const int64_t *counts, int rank) {
    int64_t at = 0;
    for (int r = 0; r < rank; r++) at += counts[r];
    return at;
}

/* The rank whose segment holds element i. */
static int owner(const int64_t *counts, int size, int64_t i) {
    for (int r = 0; r < size; r++)
        if (i < displ(counts, r + 1)) return r;
    return -1;
}

/* Counts on the heap, spoiled and freed right after the call that takes them: the collective
 * must not read them later (NCCL enqueues everything during the call, MPI copies them). */
static int64_t *counts_copy(const int64_t *counts, int size) {
    int64_t *copy = malloc(sizeof(int64_t) * (size_t)size);
    memcpy(copy, counts, sizeof(int64_t) * (size_t)size);
    return copy;
}

static void spoil_and_free(int64_t *copy, int size) {
    for (int r = 0; r < size; r++) copy[r] = -12345;
    free(copy);
}

/* Mismatches of b (host) after a reduce-scatter-v of value(r, i) over every rank r: the sum in
 * this rank's segment, its own data elsewhere. */
static int reduce_scatterv_wrong(const float *b, const int64_t *counts, int rank, int size) {
    const int64_t lo = displ(counts, rank), hi = lo + counts[rank];
    const int64_t total = displ(counts, size);
    int bad = 0;
    for (int64_t i = 0; i < total; i++) {
        float want = value(rank, i);
        if (i >= lo && i < hi) {
            want = 0.0f;
            for (int r = 0; r < size; r++) want += value(r, i);
        }
        bad += b[i] != want;
    }
    return bad;
}

/* ---- all-to-all-v ---- */

#define A2A_PATTERNS 6
#define A2A_GUARD 65535 /* past the ends of the buffers, and nowhere else */

/* Elements rank `from` sends rank `to` in pattern k: unequal, its own part too; none to some
 * peers (and to itself on some ranks); every rank to the last rank only; only rank 0, to every
 * other rank; nothing at all; large (the long-message algorithms). */
static int64_t a2a_count(int k, int from, int to, int size) {
    switch (k) {
    case 0: return 1 + 3 * from + 2 * to;
    case 1: return (from + to) % 2 == 0 ? 0 : 5 + from + to;
    case 2: return to == size - 1 ? 100 + from : 0;
    case 3: return from == 0 && to != 0 ? 7 * to : 0;
    case 4: return 0;
    default: return 40000 + 333 * from + 77 * to;
    }
}

/* Element i of what rank `from` sends rank `to`, distinct per (from, to, i) in every dtype: i64
 * holds all three; f32 (exact small integers) and the two-byte bits wrap i. */
static int64_t a2a_value(lw_dtype d, int from, int to, int64_t i) {
    if (d == LW_DTYPE_I64) return ((int64_t)from << 40) + ((int64_t)to << 32) + i;
    if (d == LW_DTYPE_F32) return from * 4096 + to * 256 + i % 200;
    return from * 4096 + to * 512 + i % 500;
}

static void a2a_put(lw_dtype d, void *b, int64_t at, int64_t v) {
    if (d == LW_DTYPE_I64) ((int64_t *)b)[at] = v;
    else if (d == LW_DTYPE_F32) ((float *)b)[at] = (float)v;
    else ((uint16_t *)b)[at] = (uint16_t)v;
}

static int64_t a2a_get(lw_dtype d, const void *b, int64_t at) {
    if (d == LW_DTYPE_I64) return ((const int64_t *)b)[at];
    if (d == LW_DTYPE_F32) return (int64_t)((const float *)b)[at];
    return ((const uint16_t *)b)[at];
}

static size_t a2a_size(lw_dtype d) { return d == LW_DTYPE_I64 ? 8 : d == LW_DTYPE_F32 ? 4 : 2; }

/* One exchange of pattern k in host memory: rank's send buffer and counts, its receive buffer
 * (all guard) and counts, each buffer one guard element longer, and the totals. */
typedef struct a2a_host {
    int64_t *send_counts, *recv_counts, sent, received;
    void *send, *recv;
} a2a_host;

static a2a_host a2a_host_make(int rank, int size, int k, lw_dtype d) {
    a2a_host x = {0};
    x.send_counts = malloc(sizeof(int64_t) * (size_t)size);
    x.recv_counts = malloc(sizeof(int64_t) * (size_t)size);
    for (int j = 0; j < size; j++) {
        x.send_counts[j] = a2a_count(k, rank, j, size);
        x.recv_counts[j] = a2a_count(k, j, rank, size);
        x.sent += x.send_counts[j];
        x.received += x.recv_counts[j];
    }
    x.send = malloc(a2a_size(d) * (size_t)(x.sent + 1));
    x.recv = malloc(a2a_size(d) * (size_t)(x.received + 1));
    int64_t at = 0;
    for (int j = 0; j < size; j++)
        for (int64_t i = 0; i < x.send_counts[j]; i++)
            a2a_put(d, x.send, at++, a2a_value(d, rank, j, i));
    a2a_put(d, x.send, x.sent, A2A_GUARD);
    for (int64_t i = 0; i <= x.received; i++) a2a_put(d, x.recv, i, A2A_GUARD);
    return x;
}

/* Mismatches after the exchange (the host arrays as they are now): every part received where it
 * belongs, the guard past the receive buffer untouched, the send buffer as it was. */
static int a2a_host_wrong(const a2a_host *x, int rank, int size, lw_dtype d) {
    int bad = 0;
    int64_t at = 0;
    for (int j = 0; j < size; j++)
        for (int64_t i = 0; i < x->recv_counts[j]; i++)
            bad += a2a_get(d, x->recv, at++) != a2a_value(d, j, rank, i);
    bad += a2a_get(d, x->recv, x->received) != A2A_GUARD;
    at = 0;
    for (int j = 0; j < size; j++)
        for (int64_t i = 0; i < x->send_counts[j]; i++)
            bad += a2a_get(d, x->send, at++) != a2a_value(d, rank, j, i);
    bad += a2a_get(d, x->send, x->sent) != A2A_GUARD;
    return bad;
}

static void a2a_host_free(a2a_host *x) {
    free(x->send_counts), free(x->recv_counts), free(x->send), free(x->recv);
}

#endif
