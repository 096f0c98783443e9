/* bf16_convert.c: the conversions between fp32 and bf16 against the CPU. lw_vec_to_bf16 and
 * lw_vec_from_bf16 are integer operations on the values' bits on every device: bit for bit, a NaN's
 * sign and payload too. Each device's results are also checked against bf16_reference.h (the
 * rounding found in double arithmetic, the widening from the fields' values); test_bf16 checks the
 * CPU's at length (every NaN, every neighbouring pair). */
#include "harness.h"

/* ---- the cases ------------------------------------------------------------------------------- */

/* Empty, one, a few, every bf16 (vec_from_bf16) or 65536 values, and more than 2^20. */
static const int64_t bf16_sizes[] = {0, 1, 7, 65536, (1 << 20) + 3};

/* ---- runs and hooks -------------------------------------------------------------------------- */

typedef struct {
    char shape[64];
    int64_t n;
    float *x;    /* vec_to_bf16's input: the edges first, then random bit patterns and values */
    uint16_t *b; /* vec_from_bf16's: every bf16 in order when n is 65536, else random bits */
} bf16_args;

/* fp32 values at the edges of the rounding: zeros and infinities; ties at 1 either way, and the
 * floats beside one; fp32 subnormals, ties between bf16 subnormals, the largest subnormal's tie
 * into the smallest normal; the largest finite bf16, the float below the midpoint past it, the
 * midpoint (inf), FLT_MAX; NaN, signalling with the payload in the dropped half alone (which
 * must not become inf), of either sign, full payloads (no carry into the sign). */
static const uint32_t bf16_edges[] = {
    0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x3F808000u, 0x3F818000u,
    0xBF808000u, 0x3F807FFFu, 0x3F808001u, 0x00000001u, 0x80000001u, 0x00008000u,
    0x00018000u, 0x007F8000u, 0x007FFFFFu, 0x00800000u, 0x7F7F0000u, 0x7F7F7FFFu,
    0x7F7F8000u, 0xFF7F8000u, 0x7F7FFFFFu, 0x7F800001u, 0xFF800001u, 0x7F810000u,
    0x7FC00000u, 0xFFC00000u, 0x7FFFFFFFu, 0xFFFFFFFFu, 0x7FBF8000u};
enum { N_BF16_EDGES = sizeof bf16_edges / sizeof bf16_edges[0] };

static uint32_t random_u32(void) {
    return (uint32_t)random_below(1 << 16) << 16 | (uint32_t)random_below(1 << 16);
}

static bf16_args bf16_new(const char *kernel, int64_t n) {
    const bool to = strcmp(kernel, "vec_to_bf16") == 0;
    bf16_args a = {.n = n};
    a.x = cpu_array(n);
    a.b = malloc(sizeof(uint16_t) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        const uint32_t u = random_u32();
        /* a half random bit patterns (NaN, inf and subnormals among them), a quarter exact ties,
         * a quarter values of a model's scale */
        a.x[i] = i < N_BF16_EDGES ? f32_of_bits(bf16_edges[i])
                 : i % 4 < 2      ? f32_of_bits(u)
                 : i % 4 == 2     ? f32_of_bits((u & 0xFFFF0000u) | 0x8000u)
                                  : random_float();
        a.b[i] = n == 65536 ? (uint16_t)i : (uint16_t)u;
    }
    snprintf(a.shape, sizeof a.shape, "n %lld%s", (long long)n,
             to && n >= N_BF16_EDGES ? ", edge values first"
             : !to && n == 65536     ? ", every bf16"
                                     : "");
    return a;
}

static void run_to_bf16(run *r, const void *p) {
    const bf16_args *a = p;
    const float *x = input(r, a->x, a->n);
    uint16_t *y = output_bf16(r, "y", a->n);
    r->nan_fed = any_nan(a->x, a->n);
    call(r, lw_vec_to_bf16(r->s, y, x, a->n));
}

static void after_to_bf16(const kernel_case *k, const run *r) {
    const bf16_args *a = k->args;
    const uint16_t *y = got_of(r, "y");
    int64_t wrong = 0;
    for (int64_t i = 0; i < a->n; i++)
        wrong += y[i] != bf16_reference(a->x[i]);
    expect(k, r, wrong == 0,
           "each element is x rounded to nearest even (a NaN quiet, its sign and payload kept)");
}

static void run_from_bf16(run *r, const void *p) {
    const bf16_args *a = p;
    const uint16_t *x = input_bf16(r, a->b, a->n);
    float *y = output(r, "y", a->n, bits());
    for (int64_t i = 0; i < a->n; i++)
        r->nan_fed = r->nan_fed || isnan(bf16_reference_value(a->b[i]));
    call(r, lw_vec_from_bf16(r->s, y, x, a->n));
}

static void after_from_bf16(const kernel_case *k, const run *r) {
    const bf16_args *a = k->args;
    const float *y = f32_of(r, "y");
    int64_t wrong = 0;
    for (int64_t i = 0; i < a->n; i++) {
        const double want = bf16_reference_value(a->b[i]);
        wrong += f32_bits(y[i]) != (uint32_t)a->b[i] << 16 || /* a NaN's payload kept */
                 !(isnan(want) || (double)y[i] == want);
    }
    expect(k, r, wrong == 0, "each element is the bf16's value, exactly");
}

/* ---- the cases, made and checked ------------------------------------------------------------ */

static void bf16_cases(const char *kernel, run_fn fn, after_fn after) {
    for (size_t s = 0; s < COUNT(bf16_sizes); s++) {
        bf16_args a = bf16_new(kernel, bf16_sizes[s]);
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        free(a.x), free(a.b);
    }
}

/* ---- the list's entries ---------------------------------------------------------------------- */

const kernel_entry case_vec_to_bf16 = {bf16_cases, run_to_bf16, after_to_bf16};
const kernel_entry case_vec_from_bf16 = {bf16_cases, run_from_bf16, after_from_bf16};
