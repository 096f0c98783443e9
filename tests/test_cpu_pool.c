/* test_cpu_pool.c: the CPU kernels' worker threads (src/core/device/cpu/pool.c, compiled into
 * this test): every item of a job runs once, in contiguous ranges, one per part; a job nested
 * in a body, or with one thread, runs inline; OpenBLAS holds to one thread inside a job and gets
 * its count back after; thousands of short jobs in a row (the generation handshake). Then,
 * through the library, the kernels that use the pool (attention, GELU, AdamW) give
 * bit-identical results on 1 and on 4 threads: results never depend on the thread count. */
#include "device/cpu/pool.h"
#include "nn_check.h"

#include <cblas.h>
#include <stdatomic.h>
#include <string.h>

#define ITEMS 1000

static atomic_int visits[ITEMS];
static atomic_int part_seen[LWI_POOL_MAX];
static atomic_int blas_inside; /* the most OpenBLAS threads a body saw */
static atomic_int disorder;    /* a range that was not contiguous, or out of [0, n) */

static void count(void *ctx, int64_t begin, int64_t end, int32_t part) {
    const int64_t n = *(const int64_t *)ctx;
    if (begin < 0 || end > n || begin >= end || part < 0 || part >= LWI_POOL_MAX)
        atomic_fetch_add(&disorder, 1);
    for (int64_t i = begin; i < end; i++)
        atomic_fetch_add(&visits[i], 1);
    atomic_fetch_add(&part_seen[part], 1);
    int b = openblas_get_num_threads();
    if (b > atomic_load(&blas_inside)) atomic_store(&blas_inside, b);
}

static void reset(void) {
    for (int i = 0; i < ITEMS; i++)
        atomic_store(&visits[i], 0);
    for (int i = 0; i < LWI_POOL_MAX; i++)
        atomic_store(&part_seen[i], 0);
    atomic_store(&blas_inside, 0), atomic_store(&disorder, 0);
}

static int parts_used(void) {
    int used = 0;
    for (int i = 0; i < LWI_POOL_MAX; i++)
        used += atomic_load(&part_seen[i]) > 0;
    return used;
}

static int64_t visited_once(int64_t n) {
    int64_t once = 0;
    for (int64_t i = 0; i < n; i++)
        once += atomic_load(&visits[i]) == 1;
    return once;
}

static void test_split(void) {
    openblas_set_num_threads(4);
    CHECK_EQ(lwi_cpu_threads(), 4);
    int64_t n = ITEMS;
    reset();
    lwi_cpu_parallel(n, 1, count, &n);
    CHECK_EQ(visited_once(n), n);
    CHECK_EQ(parts_used(), 4);
    CHECK_EQ(atomic_load(&disorder), 0);
    CHECK_EQ(atomic_load(&blas_inside), 1);
    CHECK_EQ(openblas_get_num_threads(), 4); /* given back */
    /* grain: 10 items at 4 per part at least are 2 parts */
    n = 10;
    reset();
    lwi_cpu_parallel(n, 4, count, &n);
    CHECK_EQ(visited_once(n), n);
    CHECK_EQ(parts_used(), 2);
    /* fewer items than threads: one part each */
    n = 3;
    reset();
    lwi_cpu_parallel(n, 1, count, &n);
    CHECK_EQ(visited_once(n), n);
    CHECK_EQ(parts_used(), 3);
    /* more threads than the pool holds: LWI_POOL_MAX parts */
    openblas_set_num_threads(LWI_POOL_MAX + 3);
    CHECK_EQ(lwi_cpu_threads(), LWI_POOL_MAX);
    n = ITEMS;
    reset();
    lwi_cpu_parallel(n, 1, count, &n);
    CHECK_EQ(visited_once(n), n);
    CHECK_EQ(parts_used(), LWI_POOL_MAX);
    openblas_set_num_threads(4);
}

static void test_one_thread_inline(void) {
    openblas_set_num_threads(1);
    int64_t n = ITEMS;
    reset();
    lwi_cpu_parallel(n, 1, count, &n);
    CHECK_EQ(visited_once(n), n);
    CHECK_EQ(atomic_load(&part_seen[0]), 1); /* one call, the whole range */
    CHECK_EQ(parts_used(), 1);
    openblas_set_num_threads(4);
}

/* a body that starts a job of its own over the second half of visits */
static void nested(void *ctx, int64_t begin, int64_t end, int32_t part) {
    (void)ctx, (void)part;
    for (int64_t i = begin; i < end; i++)
        atomic_fetch_add(&visits[i], 1);
    if (begin == 0) {
        int64_t half = ITEMS / 2;
        lwi_cpu_parallel(half, 1, count, &half);
    }
}

static void test_nested_runs_inline(void) {
    reset();
    lwi_cpu_parallel(ITEMS / 2, 1, nested, NULL);
    /* the outer job's items once, and the inner one's (the same first half) once more */
    int64_t twice = 0;
    for (int i = 0; i < ITEMS / 2; i++)
        twice += atomic_load(&visits[i]) == 2;
    CHECK_EQ(twice, ITEMS / 2);
    CHECK_EQ(atomic_load(&part_seen[0]), 1); /* inline: one call on part 0 */
}

static void test_many_short_jobs(void) {
    reset();
    int64_t n = 8;
    for (int r = 0; r < 5000; r++)
        lwi_cpu_parallel(n, 1, count, &n);
    int64_t all = 0;
    for (int i = 0; i < n; i++)
        all += atomic_load(&visits[i]) == 5000;
    CHECK_EQ(all, n);
    CHECK_EQ(atomic_load(&disorder), 0);
}

/* attention and GELU, forward and backward (three blocks of query rows, the last partial), and
 * AdamW steps on GELU's output */
static void run_kernels(float *out, float *lse, float *dqkv, float *y, float *dx,
                        const float *qkv, const float *dout, const float *x, int64_t b,
                        int64_t t, int64_t c, int64_t nh, int64_t n) {
    float *scratch = nn_alloc(lw_attention_scratch_floats(NULL, b, t, c, nh, nh, 0));
    memset(dqkv, 0, sizeof(float) * (size_t)(b * t * 3 * c));
    memset(dx, 0, sizeof(float) * (size_t)n);
    CHECK_EQ(lw_attention_forward(NULL, out, LW_DTYPE_F32, lse, NULL, scratch, qkv, LW_DTYPE_F32, b,
                                  t, c, nh, nh, 0),
             LW_OK);
    CHECK_EQ(lw_attention_backward(NULL, dqkv, LW_DTYPE_F32, scratch, dout, qkv, LW_DTYPE_F32, out,
                                   LW_DTYPE_F32, lse, b, t, c, nh, nh, 0),
             LW_OK);
    CHECK_EQ(lw_gelu_forward(NULL, y, LW_DTYPE_F32, x, LW_DTYPE_F32, n), LW_OK);
    CHECK_EQ(lw_gelu_backward(NULL, dx, LW_DTYPE_F32, x, x, LW_DTYPE_F32, n), LW_OK);
    /* AdamW on y with dx as the gradient: two steps, moments from zero */
    float *m = nn_alloc(n), *v = nn_alloc(n);
    const lw_adamw_options o = lw_adamw_defaults(); /* 0.9, 0.95, 1e-8 */
    for (int64_t step = 1; step <= 2; step++)
        CHECK_EQ(lw_adamw_update(NULL, &o, y, dx, m, v, n, step, 1e-2f, 0.1f, 0.5f), LW_OK);
    free(scratch), free(m), free(v);
}

static void test_kernels_thread_invariant(void) {
    const int64_t b = 3, t = 150, c = 64, nh = 4, n = 100000;
    float *qkv = nn_alloc(b * t * 3 * c), *dout = nn_alloc(b * t * c), *x = nn_alloc(n);
    nn_fill(qkv, b * t * 3 * c, 1.0f), nn_fill(dout, b * t * c, 1.0f), nn_fill(x, n, 4.0f);
    float *r[2][5];
    for (int k = 0; k < 2; k++) {
        openblas_set_num_threads(k == 0 ? 1 : 4);
        r[k][0] = nn_alloc(b * t * c), r[k][1] = nn_alloc(b * nh * t);
        r[k][2] = nn_alloc(b * t * 3 * c), r[k][3] = nn_alloc(n), r[k][4] = nn_alloc(n);
        run_kernels(r[k][0], r[k][1], r[k][2], r[k][3], r[k][4], qkv, dout, x, b, t, c, nh, n);
    }
    const int64_t sizes[5] = {b * t * c, b * nh * t, b * t * 3 * c, n, n};
    for (int i = 0; i < 5; i++)
        CHECK(memcmp(r[0][i], r[1][i], sizeof(float) * (size_t)sizes[i]) == 0);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 5; i++)
            free(r[k][i]);
    free(qkv), free(dout), free(x);
    openblas_set_num_threads(4);
}

int main(void) {
    test_split();
    test_one_thread_inline();
    test_nested_runs_inline();
    test_many_short_jobs();
    test_kernels_thread_invariant();
    return check_exit("test_cpu_pool");
}
