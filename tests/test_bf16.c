/* test_bf16.c: the CPU's conversions between fp32 and bf16 (lw_vec_to_bf16, lw_vec_from_bf16)
 * element by element against references found another way (bf16_reference.h: rounding in double
 * arithmetic, widening from the fields' values), and against the rounding rule itself:
 *   - every bf16 value widened, checked against its fields' value (all 65536);
 *   - around every pair of neighbouring bf16 values of either sign (subnormals, the smallest
 *     normal, the largest finite and the infinity past it included): the lower one, the float
 *     just above it, just below the midpoint, the midpoint (a tie: the even one), just above it
 *     and the float just below the upper one, each expected from the enumeration alone, and the
 *     double reference checked to expect the same;
 *   - signed zeros, infinities, fp32's own subnormals, FLT_MAX and the midpoint past the largest
 *     finite bf16 (inf), by value;
 *   - every fp32 NaN (2^24 - 2 of them): a NaN of the same sign, quiet, with the payload's top
 *     bits, never an infinity;
 *   - a sweep of random fp32 bit patterns, a quarter of them exact ties, against the double
 *     reference, in one call long enough to be split over the CPU pool's threads, and again at
 *     unaligned offsets and odd lengths, with nothing written outside y;
 *   - round trips: every bf16 back from its fp32 value.
 * LWOPT_TEST_LARGE=1 also checks every one of the 2^32 fp32 bit patterns (minutes). */
#include "bf16_reference.h"
#include "check.h"

#include <fenv.h>
#include <float.h>
#include <stdlib.h>

static uint64_t state = 0x2545F4914F6CDD1Dull;
static uint32_t random_bits(void) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(state >> 32);
}

/* A NaN of x's sign, quiet, with x's top 6 payload bits after its quiet bit: what a NaN x must
 * give, asked of the result's fields (bf16_reference_nan says the same by construction). */
static bool nan_kept(float x, uint16_t b) {
    const uint32_t u = f32_bits(x);
    return (b & 0x7F80) == 0x7F80 && (b & 0x0040) != 0 && (b >> 15) == (u >> 31) &&
           (b & 0x3F) == ((u >> 16) & 0x3F);
}

/* Rounds n floats on the CPU; y is allocated with room for guards on both sides. */
static uint16_t *rounded(const float *x, int64_t n) {
    uint16_t *y = malloc(sizeof(uint16_t) * (size_t)(n > 0 ? n : 1));
    CHECK_OK(lw_vec_to_bf16(NULL, y, x, n));
    return y;
}

/* Counts and reports (the first few) elements of x whose rounding is not `want`'s. */
static int64_t report(const char *what, const float *x, const uint16_t *got, const uint16_t *want,
                      int64_t n) {
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; i++)
        if (got[i] != want[i] && wrong++ < 8)
            fprintf(stderr, "%s: %.9g (0x%08X) gives 0x%04X, expected 0x%04X\n", what, (double)x[i],
                    (unsigned)f32_bits(x[i]), got[i], want[i]);
    if (wrong > 0)
        fprintf(stderr, "%s: %lld of %lld wrong\n", what, (long long)wrong, (long long)n);
    return wrong;
}

static void test_widening_every_bf16(void) {
    uint16_t b[65536];
    float y[65536];
    for (int i = 0; i < 65536; i++)
        b[i] = (uint16_t)i;
    CHECK_OK(lw_vec_from_bf16(NULL, y, b, 65536));
    int64_t wrong = 0;
    for (int i = 0; i < 65536; i++) {
        const double want = bf16_reference_value(b[i]);
        const bool ok = isnan(want) ? f32_bits(y[i]) == (uint32_t)b[i] << 16 /* payload kept */
                                    : (double)y[i] == want && !signbit(y[i]) == !signbit(want);
        if (!ok && wrong++ < 8)
            fprintf(stderr, "from bf16: 0x%04X gives %.9g, expected %.9g\n", i, (double)y[i], want);
    }
    CHECK_EQ(wrong, 0);
    /* and back: every bf16 is its own rounding; a NaN comes back quiet */
    uint16_t back[65536];
    CHECK_OK(lw_vec_to_bf16(NULL, back, y, 65536));
    wrong = 0;
    for (int i = 0; i < 65536; i++) {
        const uint16_t want = isnan(y[i]) ? (uint16_t)(i | 0x0040) : (uint16_t)i;
        if (back[i] != want && wrong++ < 8)
            fprintf(stderr, "round trip: 0x%04X comes back 0x%04X\n", i, back[i]);
    }
    CHECK_EQ(wrong, 0);
}

/* Probes around each pair of neighbours lo < hi (bf16 bits k and k + 1, k from 0 to 0x7F7F; hi
 * is inf past the largest finite): the expected rounding from the pair alone, then both signs. */
static void test_neighbours(void) {
    enum { PAIRS = 0x7F80, PER_PAIR = 6 };
    const int64_t n = 2 * PAIRS * PER_PAIR;
    float *x = malloc(sizeof(float) * (size_t)n);
    uint16_t *want = malloc(sizeof(uint16_t) * (size_t)n);
    int64_t m = 0, inexact = 0;
    for (int sign = 0; sign < 2; sign++)
        for (uint32_t k = 0; k < PAIRS; k++) {
            const double lo = bf16_reference_value((uint16_t)k);
            /* past the largest finite bf16 the next step would be 2^128: the midpoint is
             * representable, 2^128 itself is not a float, so the float below it is FLT_MAX */
            const double hi = k == 0x7F7F ? 0x1p128 : bf16_reference_value((uint16_t)(k + 1));
            const double mid = (lo + hi) / 2; /* exact: 9 significant bits */
            const uint16_t even = (k & 1) ? (uint16_t)(k + 1) : (uint16_t)k;
            const float flo = (float)lo, fmid = (float)mid;
            const float fhi_below = k == 0x7F7F ? FLT_MAX : nextafterf((float)hi, 0.0f);
            const float probes[PER_PAIR] = {
                flo,  nextafterf(flo, INFINITY),  nextafterf(fmid, 0.0f),
                fmid, nextafterf(fmid, INFINITY), fhi_below};
            const uint16_t expect[PER_PAIR] = {(uint16_t)k, (uint16_t)k,       (uint16_t)k,
                                               even,        (uint16_t)(k + 1), (uint16_t)(k + 1)};
            inexact += (double)fmid != mid;
            for (int p = 0; p < PER_PAIR; p++) {
                x[m] = sign ? -probes[p] : probes[p];
                want[m] = (uint16_t)(expect[p] | (sign ? 0x8000 : 0));
                m++;
            }
        }
    CHECK_EQ(m, n);
    CHECK_EQ(inexact, 0); /* every midpoint is a float: the ties are probed exactly */
    uint16_t *got = rounded(x, n);
    CHECK_EQ(report("neighbours", x, got, want, n), 0);
    /* the double reference agrees with the enumeration (so that the sweeps below test the same
     * rule) */
    uint16_t *ref = malloc(sizeof(uint16_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        ref[i] = bf16_reference(x[i]);
    CHECK_EQ(report("the double reference at the neighbours", x, ref, want, n), 0);
    free(x), free(want), free(got), free(ref);
}

/* Named values, by their expected bits. */
static void test_special_values(void) {
    const struct {
        float x;
        uint16_t want;
    } cases[] = {
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {INFINITY, 0x7F80},
        {-INFINITY, 0xFF80},
        {1.0f, 0x3F80},
        {-2.0f, 0xC000},
        {1.0f + 0x1p-8f, 0x3F80},     /* a tie: to 1 (even) */
        {1.0f + 3 * 0x1p-8f, 0x3F82}, /* a tie: to 1 + 2^-6 (even) */
        {-(1.0f + 0x1p-8f), 0xBF80},  /* ties to even whatever the sign */
        {1.0f + 0x1p-8f + 0x1p-23f, 0x3F81},
        {0x1p-149f, 0x0000},                 /* fp32's smallest subnormal: far below 2^-134 */
        {-0x1p-149f, 0x8000},                /* rounds to a zero of its sign */
        {0x1p-134f, 0x0000},                 /* half of the smallest bf16 subnormal: a tie, to 0 */
        {0x1p-134f + 0x1p-149f, 0x0001},     /* just above: the smallest subnormal */
        {0x1p-133f, 0x0001},                 /* the smallest bf16 subnormal */
        {3 * 0x1p-134f, 0x0002},             /* a tie between 1 and 2 (x 2^-133): even */
        {127 * 0x1p-133f, 0x007F},           /* the largest bf16 subnormal */
        {127.5f * 0x1p-133f, 0x0080},        /* a tie: up into the smallest normal (even) */
        {FLT_MIN, 0x0080},                   /* 2^-126 */
        {nextafterf(FLT_MIN, 0.0f), 0x0080}, /* fp32's largest subnormal rounds up to it */
        {255 * 0x1p120f, 0x7F7F},            /* the largest finite bf16 */
        {255.5f * 0x1p120f, 0x7F80},         /* the midpoint past it: a tie, to inf (even) */
        {nextafterf(255.5f * 0x1p120f, 0.0f), 0x7F7F},
        {-255.5f * 0x1p120f, 0xFF80},
        {FLT_MAX, 0x7F80},
        {-FLT_MAX, 0xFF80},
        {f32_of_bits(0x7F800001u), 0x7FC0}, /* a signalling NaN, payload below: never inf */
        {f32_of_bits(0xFF800001u), 0xFFC0}, /* its sign kept */
        {f32_of_bits(0x7F810000u), 0x7FC1}, /* payload in the top half: kept */
        {f32_of_bits(0x7FC00000u), 0x7FC0}, /* the quiet NaN */
        {f32_of_bits(0xFFC00000u), 0xFFC0}, /* -NaN */
        {f32_of_bits(0x7FFFFFFFu), 0x7FFF}, /* no carry out of a full payload */
        {f32_of_bits(0xFFFFFFFFu), 0xFFFF}, /* nor into the sign */
        {f32_of_bits(0x7FBFFFFFu), 0x7FFF},
        {f32_of_bits(0x7FBF8000u), 0x7FFF}, /* a NaN at a "tie" is not rounded */
    };
    enum { N = sizeof cases / sizeof cases[0] };
    float x[N];
    uint16_t want[N], ref[N];
    for (int i = 0; i < N; i++)
        x[i] = cases[i].x, want[i] = cases[i].want, ref[i] = bf16_reference(cases[i].x);
    uint16_t *got = rounded(x, N);
    CHECK_EQ(report("special values", x, got, want, N), 0);
    CHECK_EQ(report("the double reference at the special values", x, ref, want, N), 0);
    free(got);
}

/* Every fp32 NaN, both signs, in chunks. */
static void test_every_nan(void) {
    enum { CHUNK = 1 << 20 };
    float *x = malloc(sizeof(float) * CHUNK);
    uint16_t *y = malloc(sizeof(uint16_t) * CHUNK);
    int64_t wrong = 0, count = 0;
    for (uint32_t sign = 0; sign < 2; sign++)
        for (uint32_t first = 1; first < (1u << 23); first += CHUNK) {
            const uint32_t m = (1u << 23) - first < CHUNK ? (1u << 23) - first : CHUNK;
            for (uint32_t i = 0; i < m; i++)
                x[i] = f32_of_bits(sign << 31 | 0x7F800000u | (first + i));
            CHECK_OK(lw_vec_to_bf16(NULL, y, x, m));
            for (uint32_t i = 0; i < m; i++)
                if (!nan_kept(x[i], y[i]) && wrong++ < 8)
                    fprintf(stderr, "NaN 0x%08X gives 0x%04X\n", (unsigned)f32_bits(x[i]), y[i]);
            count += m;
        }
    CHECK_EQ(count, 2 * ((1 << 23) - 1));
    CHECK_EQ(wrong, 0);
    free(x), free(y);
}

/* Random bit patterns: any float (NaN, inf, subnormals among them), a quarter of them exact ties
 * (the low half 0x8000), against the double reference. One call of 2^22 elements: the CPU pool
 * splits it. */
static void test_random_sweep(void) {
    const int64_t n = 1 << 22;
    float *x = malloc(sizeof(float) * (size_t)n);
    uint16_t *want = malloc(sizeof(uint16_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = random_bits();
        if ((i & 3) == 3) u = (u & 0xFFFF0000u) | 0x8000u;
        x[i] = f32_of_bits(u);
        want[i] = bf16_reference(x[i]);
    }
    uint16_t *got = rounded(x, n);
    CHECK_EQ(report("random bit patterns", x, got, want, n), 0);
    /* at unaligned offsets and odd lengths, inside guards that must stay as they were */
    enum { GUARD = 64 };
    const int64_t offsets[][3] = {{1, 3, 1}, {3, 1, 7}, {5, 2, 33}, {7, 0, 65537}, {2, 5, 200003}};
    uint16_t *y = malloc(sizeof(uint16_t) * (size_t)(n + 2 * GUARD));
    for (int k = 0; k < 5; k++) {
        const int64_t xo = offsets[k][0], yo = offsets[k][1], len = offsets[k][2];
        for (int64_t i = 0; i < len + 2 * GUARD; i++)
            y[i] = 0xA5A5;
        CHECK_OK(lw_vec_to_bf16(NULL, y + GUARD + yo, x + xo, len));
        CHECK_EQ(report("at an offset", x + xo, y + GUARD + yo, want + xo, len), 0);
        int64_t spoilt = 0;
        for (int64_t i = 0; i < GUARD + yo; i++)
            spoilt += y[i] != 0xA5A5;
        for (int64_t i = GUARD + yo + len; i < len + 2 * GUARD; i++)
            spoilt += y[i] != 0xA5A5;
        CHECK_EQ(spoilt, 0);
    }
    /* widening at offsets too: exact, so the bits are the bf16's shifted */
    float *w = malloc(sizeof(float) * (size_t)(n + 2 * GUARD));
    for (int k = 0; k < 5; k++) {
        const int64_t xo = offsets[k][0], yo = offsets[k][1], len = offsets[k][2];
        for (int64_t i = 0; i < len + 2 * GUARD; i++)
            w[i] = f32_of_bits(0x7FA5A5A5u);
        CHECK_OK(lw_vec_from_bf16(NULL, w + GUARD + yo, got + xo, len));
        int64_t wrong = 0, spoilt = 0;
        for (int64_t i = 0; i < len; i++)
            wrong += f32_bits(w[GUARD + yo + i]) != (uint32_t)got[xo + i] << 16;
        for (int64_t i = 0; i < len + 2 * GUARD; i++)
            spoilt += (i < GUARD + yo || i >= GUARD + yo + len) && f32_bits(w[i]) != 0x7FA5A5A5u;
        CHECK_EQ(wrong, 0);
        CHECK_EQ(spoilt, 0);
    }
    free(x), free(want), free(got), free(y), free(w);
}

/* n <= 0 does nothing; a NULL stream is the CPU's. */
static void test_empty(void) {
    float x = 1.0f;
    uint16_t b = 0x1234;
    CHECK_OK(lw_vec_to_bf16(NULL, &b, &x, 0));
    CHECK_OK(lw_vec_to_bf16(NULL, &b, &x, -1));
    CHECK_EQ(b, 0x1234);
    CHECK_OK(lw_vec_from_bf16(NULL, &x, &b, 0));
    CHECK_OK(lw_vec_from_bf16(lw_device_stream(lw_device_cpu()), &x, &b, -5));
    CHECK(x == 1.0f);
    CHECK_OK(lw_vec_to_bf16(lw_device_stream(lw_device_cpu()), &b, &x, 1));
    CHECK_EQ(b, 0x3F80);
}

/* Every fp32 bit pattern against the double reference (LWOPT_TEST_LARGE=1). */
static void test_every_float(void) {
    enum { CHUNK = 1 << 22 };
    float *x = malloc(sizeof(float) * CHUNK);
    uint16_t *y = malloc(sizeof(uint16_t) * CHUNK);
    int64_t wrong = 0;
    for (uint64_t first = 0; first < (1ull << 32); first += CHUNK) {
        for (uint32_t i = 0; i < CHUNK; i++)
            x[i] = f32_of_bits((uint32_t)(first + i));
        CHECK_OK(lw_vec_to_bf16(NULL, y, x, CHUNK));
        for (uint32_t i = 0; i < CHUNK; i++)
            if (y[i] != bf16_reference(x[i]) && wrong++ < 8)
                fprintf(stderr, "every float: 0x%08X gives 0x%04X, expected 0x%04X\n",
                        (unsigned)f32_bits(x[i]), y[i], bf16_reference(x[i]));
    }
    CHECK_EQ(wrong, 0);
    printf("test_bf16: every fp32 bit pattern checked\n");
    free(x), free(y);
}

int main(void) {
    CHECK(fegetround() == FE_TONEAREST); /* the reference's nearbyint rounds ties to even */
    test_widening_every_bf16();
    test_neighbours();
    test_special_values();
    test_every_nan();
    test_random_sweep();
    test_empty();
    const char *large = getenv("LWOPT_TEST_LARGE");
    if (large != NULL && strcmp(large, "1") == 0) test_every_float();
    return check_exit("test_bf16");
}
