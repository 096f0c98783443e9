/* comm_cases_bf16.h: the sums in bf16 (lw_comm_reduce_scatter, lw_comm_reduce_scatterv,
 * lw_comm_allreduce_start and lw_comm_allreduce with LW_DTYPE_BF16), run by comm_cases_run on
 * host memory (test_comm.c) and a device's (test_device_comm.c) at whatever rank count the test
 * has. Against the promise docs/c_api.md states: values whose sums are exact in bf16 come out
 * exact on every backend and rank count; sums that bf16 cannot hold are rounded to nearest, ties
 * to even, at 2 ranks (one rounding), and within (p - 1) u / (1 - (p - 1) u) times the sum of
 * the contributions' magnitudes (u = 2^-8) at p ranks; the rest of a bucket is left as it was;
 * other dtypes are refused. The conversions here are the test's own, not the library's. */
#ifndef LW_TEST_COMM_CASES_BF16_H
#define LW_TEST_COMM_CASES_BF16_H

#include "comm_kind.h"

#include <math.h>
#include <stdlib.h>

/* bf16 bits as a double (exact). */
static inline double bf16_value(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return (double)f;
}

/* The bf16 bits of f, which bf16 holds exactly (few significant bits). */
static inline uint16_t bf16_bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    CHECK((u & 0xffffu) == 0);
    return (uint16_t)(u >> 16);
}

/* x (finite, nonzero, well inside bf16's range) rounded to bf16's 8 significant bits, to
 * nearest with ties to even, worked out on the value: frexp's fraction in [0.5, 1) scaled to
 * [128, 256), then rint (to nearest even in the default rounding mode). */
static inline double bf16_nearest(double x) {
    if (x == 0) return 0;
    int e = 0;
    const double m = frexp(x, &e);
    return ldexp(rint(ldexp(m, 8)), e - 8);
}

/* Sums whose bf16 result is written out, at any rank count: rank 0 contributes a, rank 1 b,
 * every other rank +0, so whatever the order of the additions exactly one of them rounds. */
typedef struct bf16_pair {
    uint16_t a, b, sum;
} bf16_pair;

static const bf16_pair bf16_pairs[] = {
    {0x3f80, 0x3b80, 0x3f80}, /* 1 + 2^-8: a tie, to even (down) */
    {0x3f81, 0x3b80, 0x3f82}, /* (1 + 2^-7) + 2^-8: a tie, to even (up) */
    {0x3f80, 0x3b81, 0x3f81}, /* 1 + 2^-8 + 2^-15: just past the tie, up */
    {0x4380, 0x3f80, 0x4380}, /* 256 + 1 = 257: a tie, to even 256 */
    {0x3f80, 0x3580, 0x3f80}, /* 1 + 2^-20: lost */
    {0x3f80, 0x3381, 0x3f80}, /* 1 + 2^-24 (1 + 2^-7): f32 rounds the sum up, bf16 down */
    {0xbf80, 0x3f80, 0x0000}, /* -1 + 1 = +0 */
    {0x7f00, 0x7f00, 0x7f80}, /* 2^127 + 2^127 = 2^128: past bf16's largest, infinity */
    {0x4040, 0xc0a0, 0xc000}, /* 3 + -5 = -2, exact */
};
#define BF16_PAIRS ((int64_t)(sizeof bf16_pairs / sizeof bf16_pairs[0]))

/* Rank r's contribution at position j of a sum (j counts from the start of the segment that
 * receives it): the pairs first, then exact quarter-integers up to BF16_EXACT_END (any sum of
 * four is exact in bf16, and so is every partial sum), then values of varied sign, exponent
 * (2^-3 .. 2^3) and significand, whose sums bf16 mostly cannot hold (exact in double). */
#define BF16_EXACT_END (BF16_PAIRS + 40)

static inline uint16_t bf16_contribution(int r, int64_t j) {
    if (j < BF16_PAIRS) return r == 0 ? bf16_pairs[j].a : r == 1 ? bf16_pairs[j].b : 0;
    if (j < BF16_EXACT_END) { /* 0.25 * (-8 .. 8): 6 significant bits at most when summed */
        return bf16_bits_of(0.25f * (float)((j * 5 + r * 3) % 17 - 8));
    }
    uint32_t h = (uint32_t)j * 2654435761u + (uint32_t)r * 40503u + 12345u;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    const uint32_t sign = (h >> 31) & 1u, exponent = 127u + (h >> 8) % 7u - 3u;
    return (uint16_t)(sign << 15 | exponent << 7 | (h & 0x7fu));
}

/* What is wrong with got[0..n), positions 0..n of a sum over `size` ranks: the pairs' and the
 * exact sums bit for bit; the others the sum rounded to nearest even at 1 or 2 ranks, within
 * the bound above. [out] *inexact (optional) counts the sums bf16 cannot hold, so that a
 * caller knows the case tested the rounding. */
static inline int bf16_sums_wrong(const uint16_t *got, int64_t n, int size, int *inexact) {
    const double u = ldexp(1.0, -8), gamma = (size - 1) * u / (1 - (size - 1) * u);
    int bad = 0;
    for (int64_t j = 0; j < n; j++) {
        if (j < BF16_PAIRS) {
            const uint16_t want = size == 1 ? bf16_pairs[j].a : bf16_pairs[j].sum;
            if (got[j] != want) {
                if (bad < 5)
                    fprintf(stderr, "bf16 pair %lld: got 0x%04x, want 0x%04x\n", (long long)j,
                            got[j], want);
                bad++;
            }
            continue;
        }
        double sum = 0, magnitude = 0;
        for (int r = 0; r < size; r++) {
            const double x = bf16_value(bf16_contribution(r, j));
            sum += x; /* exact: the contributions span few bits */
            magnitude += fabs(x);
        }
        const double g = bf16_value(got[j]), nearest = bf16_nearest(sum);
        if (inexact != NULL) *inexact += nearest != sum;
        const bool ok = j < BF16_EXACT_END || size <= 2
                            ? g == nearest /* exact sums stay exact; one rounding at 2 ranks */
                            : fabs(g - sum) <= gamma * magnitude * (1 + 1e-12);
        if (!ok && bad < 5)
            fprintf(stderr, "bf16 sum at %lld over %d ranks: got %.9g (0x%04x), exact %.9g, "
                    "nearest %.9g, bound %.3g\n", (long long)j, size, g, got[j], sum, nearest,
                    gamma * magnitude);
        bad += !ok;
    }
    return bad;
}

/* Bits past a bucket's end, this rank's own: left as they were. */
static inline uint16_t bf16_outside(int rank, int64_t i) {
    return (uint16_t)(0x4000 + rank * 64 + i % 61);
}

/* Equal shards (one element, the pairs and a little more, many), blocking and polled, then
 * f32 on the same request (its scratch grows from bf16's bytes to f32's); several in flight at
 * once, bf16 and f32 side by side; this rank's shard holds the sum, the rest is its own. */
static void case_reduce_scatter_bf16(const mem_kind *m, lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    const int64_t shards[] = {1, BF16_PAIRS + 3, 4096};
    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    int inexact = 0;
    for (int k = 0; k < 3; k++) {
        const int64_t shard = shards[k], n = shard * size, lo = rank * shard;
        uint16_t *h = malloc(2 * (size_t)n), *back = malloc(2 * (size_t)n);
        for (int64_t i = 0; i < n; i++) /* shard s receives the sum of bf16_contribution(., j) */
            h[i] = bf16_contribution(rank, i % shard);
        for (int nonblocking = 0; nonblocking < 2; nonblocking++) {
            void *d = mem_upload(m, h, 2 * n);
            CHECK_OK(lw_comm_reduce_scatter(c, d, n, LW_DTYPE_BF16, nonblocking ? req : NULL));
            if (nonblocking) poll_to_end(req);
            mem_get(m, back, d, 2 * n);
            CHECK_EQ(bf16_sums_wrong(back + lo, shard, size, &inexact), 0);
            int kept = 0;
            for (int64_t i = 0; i < n; i++)
                kept += (i < lo || i >= lo + shard) && back[i] == h[i];
            CHECK_EQ(kept, n - shard);
            mem_free(m, d);
        }
        free(h), free(back);
    }
    CHECK(size == 1 || inexact > 0); /* the sums tested rounding, not just exact ones */
    /* the same request in f32 after bf16: twice the bytes for as many elements */
    const int64_t n = 4096 * (int64_t)size;
    float *hf = values_in(rank, n, 0, n, 0.0f), *df = mem_upload(m, hf, 4 * n);
    CHECK_OK(lw_comm_reduce_scatter(c, df, n, LW_DTYPE_F32, req));
    CHECK_OK(lw_request_wait(req));
    float *backf = malloc(4 * (size_t)n);
    mem_get(m, backf, df, 4 * n);
    int64_t *cf = malloc(sizeof(int64_t) * (size_t)size);
    for (int r = 0; r < size; r++)
        cf[r] = 4096;
    CHECK_EQ(reduce_scatterv_wrong(backf, cf, rank, size), 0);
    free(cf), free(backf);
    /* in flight together: two bf16 sums and an f32 one, waited for in reverse order */
    lw_request *r2, *r3;
    CHECK_OK(lw_request_new(&r2));
    CHECK_OK(lw_request_new(&r3));
    const int64_t s1 = 300, s2 = 5000;
    uint16_t *h1 = malloc(2 * (size_t)(s1 * size)), *h2 = malloc(2 * (size_t)(s2 * size));
    for (int64_t i = 0; i < s1 * size; i++)
        h1[i] = bf16_contribution(rank, i % s1);
    for (int64_t i = 0; i < s2 * size; i++)
        h2[i] = bf16_contribution(rank, i % s2);
    void *d1 = mem_upload(m, h1, 2 * s1 * size), *d2 = mem_upload(m, h2, 2 * s2 * size);
    mem_put(m, df, hf, 4 * n);
    CHECK_OK(lw_comm_reduce_scatter(c, d1, s1 * size, LW_DTYPE_BF16, req));
    CHECK_OK(lw_comm_reduce_scatter(c, df, n, LW_DTYPE_F32, r2));
    CHECK_OK(lw_comm_reduce_scatter(c, d2, s2 * size, LW_DTYPE_BF16, r3));
    CHECK_OK(lw_request_wait(r3));
    CHECK_OK(lw_request_wait(r2));
    CHECK_OK(lw_request_wait(req));
    mem_get(m, h1, d1, 2 * s1 * size);
    mem_get(m, h2, d2, 2 * s2 * size);
    mem_get(m, hf, df, 4 * n);
    CHECK_EQ(bf16_sums_wrong(h1 + rank * s1, s1, size, NULL), 0);
    CHECK_EQ(bf16_sums_wrong(h2 + rank * s2, s2, size, NULL), 0);
    float want = 0.0f;
    for (int r = 0; r < size; r++)
        want += value(r, rank * 4096 + 5);
    CHECK(hf[rank * 4096 + 5] == want);
    lw_request_free(r2), lw_request_free(r3), lw_request_free(req);
    mem_free(m, d1), mem_free(m, d2), mem_free(m, df);
    free(h1), free(h2), free(hf);
}

/* Every segment pattern, blocking and on a request, in bf16: this rank's segment holds the sum
 * (position j of it summing bf16_contribution(., j)), the rest of the bucket and one element
 * past it are left as they were. */
static void case_reduce_scatterv_bf16(const mem_kind *m, lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    int64_t *counts = malloc(sizeof(int64_t) * (size_t)size);
    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    for (int k = 0; k < SEGMENT_PATTERNS; k++) {
        const int64_t total = segment_counts(k, size, counts);
        const int64_t lo = displ(counts, rank), hi = lo + counts[rank];
        uint16_t *h = malloc(2 * (size_t)(total + 1)), *back = malloc(2 * (size_t)(total + 1));
        for (int64_t i = 0; i < total; i++) {
            const int o = owner(counts, size, i);
            h[i] = bf16_contribution(rank, i - displ(counts, o));
        }
        h[total] = bf16_outside(rank, total);
        for (int nonblocking = 0; nonblocking < 2; nonblocking++) {
            void *d = mem_upload(m, h, 2 * (total + 1));
            int64_t *copy = counts_copy(counts, size);
            CHECK_OK(lw_comm_reduce_scatterv(c, d, copy, LW_DTYPE_BF16, nonblocking ? req : NULL));
            spoil_and_free(copy, size);
            CHECK_OK(lw_request_wait(req));
            mem_get(m, back, d, 2 * (total + 1));
            CHECK_EQ(bf16_sums_wrong(back + lo, hi - lo, size, NULL), 0);
            int kept = 0;
            for (int64_t i = 0; i <= total; i++)
                kept += (i < lo || i >= hi) && back[i] == h[i];
            CHECK_EQ(kept, total + 1 - (hi - lo));
            mem_free(m, d);
        }
        free(h), free(back);
    }
    lw_request_free(req);
    free(counts);
}

/* The all-reduce's sum in bf16, started on a request (the kind's stream) and blocking: every
 * element of the buffer holds the sum. */
static void case_allreduce_bf16(const mem_kind *m, lw_comm *c) {
    const int rank = lw_comm_rank(c), size = lw_comm_size(c);
    const int64_t n = 3000;
    uint16_t *h = malloc(2 * (size_t)n);
    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    CHECK_OK(lw_request_set_stream(req, lw_device_stream(m->dev)));
    for (int blocking = 0; blocking < 2; blocking++) {
        for (int64_t i = 0; i < n; i++)
            h[i] = bf16_contribution(rank, i);
        void *d = mem_upload(m, h, 2 * n);
        if (blocking) {
            CHECK_OK(lw_comm_allreduce(c, d, n, LW_DTYPE_BF16, LW_REDUCE_SUM));
        } else {
            CHECK_OK(lw_comm_allreduce_start(c, d, n, LW_DTYPE_BF16, req));
            CHECK_OK(lw_request_wait(req));
        }
        mem_get(m, h, d, 2 * n);
        CHECK_EQ(bf16_sums_wrong(h, n, size, NULL), 0);
        mem_free(m, d);
    }
    lw_request_free(req);
    free(h);
}

/* Other dtypes refused by the sums, naming the collective and the dtype, before anything starts
 * (alike on every rank: the communicator goes on in step); bf16's all-reduce sums only. Half
 * the bytes counted for bf16. */
static void case_sum_dtypes(const mem_kind *m, lw_comm *c) {
    const int size = lw_comm_size(c);
    int64_t *counts = malloc(sizeof(int64_t) * (size_t)size);
    const int64_t total = segment_counts(0, size, counts), n = 8 * (int64_t)size;
    void *b = mem_alloc(m, 8 * (total > n ? total : n));
    lw_request *req;
    CHECK_OK(lw_request_new(&req));
    CHECK_FAILS(lw_comm_reduce_scatter(c, b, n, LW_DTYPE_F16, NULL), LW_ERR_INVALID,
                "comm: reduce-scatter of dtype 2 (f16); it sums f32 or bf16");
    CHECK_FAILS(lw_comm_reduce_scatter(c, b, n, LW_DTYPE_I64, req), LW_ERR_INVALID,
                "comm: reduce-scatter of dtype 4 (i64)");
    CHECK_FAILS(lw_comm_reduce_scatter(c, b, n, (lw_dtype)9, NULL), LW_ERR_INVALID,
                "comm: reduce-scatter of dtype 9 (unknown)");
    CHECK_FAILS(lw_comm_reduce_scatterv(c, b, counts, LW_DTYPE_F64, NULL), LW_ERR_INVALID,
                "comm: reduce-scatter-v of dtype 3 (f64); it sums f32 or bf16");
    CHECK_FAILS(lw_comm_reduce_scatterv(c, b, counts, LW_DTYPE_F16, req), LW_ERR_INVALID,
                "comm: reduce-scatter-v of dtype 2 (f16)");
    CHECK_FAILS(lw_comm_allreduce_start(c, b, 4, LW_DTYPE_F16, req), LW_ERR_INVALID,
                "comm: all-reduce of dtype 2 (f16); it sums f32 or bf16");
    CHECK_FAILS(lw_comm_allreduce_start(c, b, 4, LW_DTYPE_F64, req), LW_ERR_INVALID,
                "comm: all-reduce of dtype 3 (f64)");
    CHECK_FAILS(lw_comm_allreduce(c, b, 4, LW_DTYPE_BF16, LW_REDUCE_MAX), LW_ERR_INVALID,
                "comm: all-reduce of dtype 1 (bf16) with op max; bf16 takes the sum only");
    CHECK_FAILS(lw_comm_allreduce(c, b, 4, LW_DTYPE_F16, LW_REDUCE_SUM), LW_ERR_INVALID,
                "comm: all-reduce of dtype 2 (f16); it takes f32, f64 or i64, and bf16 for a sum");
    CHECK(!lw_request_active(req));
    /* the counters: bf16 moves half of f32's bytes */
    uint16_t *zeros = calloc((size_t)(total > n ? total : n), 2);
    mem_put(m, b, zeros, 2 * n);
    lw_comm_counters_reset(c);
    CHECK_OK(lw_comm_reduce_scatter(c, b, n, LW_DTYPE_BF16, NULL));
    mem_put(m, b, zeros, 2 * total);
    CHECK_OK(lw_comm_reduce_scatterv(c, b, counts, LW_DTYPE_BF16, req));
    CHECK_OK(lw_request_wait(req));
    CHECK_OK(lw_comm_allreduce_start(c, b, 4, LW_DTYPE_BF16, req));
    CHECK_OK(lw_request_wait(req));
    lw_comm_counter rs, ar;
    CHECK_OK(lw_comm_counter_get(c, LW_COMM_REDUCE_SCATTER, &rs));
    CHECK_OK(lw_comm_counter_get(c, LW_COMM_ALLREDUCE, &ar));
    CHECK_EQ(rs.calls, 2);
    CHECK_EQ(rs.bytes, (int64_t)((double)(size - 1) / size * (double)(2 * n)) +
                           (int64_t)((double)(size - 1) / size * (double)(2 * total)));
    CHECK_EQ(ar.calls, 1);
    CHECK_EQ(ar.bytes, (int64_t)(2.0 * (size - 1) / size * 8.0));
    /* still in step on every rank */
    int64_t one = 1;
    CHECK_OK(lw_comm_allreduce(c, &one, 1, LW_DTYPE_I64, LW_REDUCE_SUM));
    CHECK_EQ(one, size);
    lw_request_free(req);
    mem_free(m, b);
    free(zeros), free(counts);
}

/* The bf16 sums' cases, in the same order on every rank. */
static void comm_cases_bf16_run(const mem_kind *m, lw_comm *c) {
    case_reduce_scatter_bf16(m, c);
    case_reduce_scatterv_bf16(m, c);
    case_allreduce_bf16(m, c);
    case_sum_dtypes(m, c);
}

#endif
