/* test_cuda_model.c: every model kernel of the CUDA device (fp32) against the CPU's (the
 * reference) on the same seeded inputs, forward and backward: linear, embedding, layer norm,
 * GELU, attention, the chunked cross-entropy and a mixture of experts' kernels (router, aux loss,
 * gather, combine: ties, k = 1 and k = e, rows that repeat). Backwards accumulate into non-zero
 * outputs, optional outputs are left NULL, shapes are odd (n = 1, c not a multiple of 32, t = 1
 * and 1000, head dims 16 to 128, a 50304 vocabulary over several chunks, ignored targets), and
 * two runs must agree bit for bit; then the GEMMs of linear and the LM head again in TF32 and bf16
 * (lw_device_set_matmul), within the error their rounding explains and demonstrably not fp32.
 * Each comparison states its tolerance and why. Exit 77 (skipped) when CUDA is not available. */
#include "cuda_util.h"

/* ---- helpers --------------------------------------------------------------------------------- */

static float *to_gpu(const float *h, int64_t n) { return upload(h, 4 * n); }

static float *from_gpu(const float *d, int64_t n) {
    float *h = calloc((size_t)(n > 0 ? n : 1), 4);
    download(h, d, 4 * n);
    return h;
}

static float *gpu_zeros(int64_t n) {
    float *d = NULL;
    CHECK_OK(lw_device_alloc(gpu, 4 * n, (void **)&d));
    return d;
}

static float *copy_of(const float *h, int64_t n) {
    float *c = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    memcpy(c, h, sizeof(float) * (size_t)n);
    return c;
}

static float *scaled_random(int64_t n, float scale, float offset) {
    float *x = host_random(n);
    for (int64_t i = 0; i < n; i++)
        x[i] = offset + scale * x[i];
    return x;
}

/* The worst of |got - ref| / max(|ref|, 1% of max |ref|, floor): relative for the values that
 * carry the result, absolute (at the tensor's scale, or at `floor`) for the few that cancel to
 * near 0. Printed when it is past tol. */
static bool close_to_floor(const char *what, const char *shape, const float *got, const float *ref,
                           int64_t n, double tol, double floor) {
    const double big = largest_finite(ref, n);
    return close_to(what, shape, got, ref, n, tol, fmax(fmax(1e-2 * big, floor), 1e-30));
}

static bool close_scaled(const char *what, const char *shape, const float *got, const float *ref,
                         int64_t n, double tol) {
    return close_to_floor(what, shape, got, ref, n, tol, 0.0);
}

/* For GEMM results, max |got - ref| / max |ref|: an fp32 dot product of k terms is off by up to
 * ~k ulps of its terms' scale (cuBLAS adds an output's k products one after another), not of its
 * value, which can cancel to near 0. A simulation of that order against OpenBLAS-like blocked
 * sums on uniform inputs gives 1.1e-6 at k = 1024 and 1.4e-6 at k = 2304 on this measure (but
 * 4e-5 to 8e-5 when judged against 1% of the largest value): 1e-5 keeps a margin. */
static bool close_gemm(const char *what, const char *shape, const float *got, const float *ref,
                       int64_t n, double tol) {
    double big = 0;
    for (int64_t i = 0; i < n; i++)
        big = fmax(big, fabs((double)ref[i]));
    return close_to_floor(what, shape, got, ref, n, tol, big);
}

/* A log-sum-exp is a log: an absolute difference of tol in it is a relative tol in every
 * probability it gives, so it is judged absolutely below 1 (a row of one score that cancels to
 * near 0 would otherwise be measured against itself). */
static bool close_lse(const char *what, const char *shape, const float *got, const float *ref,
                      int64_t n, double tol) {
    return close_to_floor(what, shape, got, ref, n, tol, 1.0);
}

/* What a backward accumulates onto: small against the gradients (so that their own rounding is
 * what the comparisons see) yet far above the tolerances (so that a backward that overwrote
 * instead of adding would fail them). */
static float *prefill(int64_t n) { return scaled_random(n, 0.01f, 0.0f); }

/* Equal bit for bit (NaN equal to any NaN: x86 and CUDA make NaNs with other payloads). */
static bool same_bits(const char *what, const char *shape, const float *a, const float *b,
                      int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) != 0 && !(isnan(a[i]) && isnan(b[i]))) {
            fprintf(stderr, "%s (%s): element %lld differs: %.9g and %.9g (%lld ulps)\n", what,
                    shape, (long long)i, (double)a[i], (double)b[i], (long long)ulps(a[i], b[i]));
            return false;
        }
    return true;
}

/* ---- linear ---------------------------------------------------------------------------------- */

/* Tolerances: y, dx and dw are fp32 GEMMs on both sides, summed in other orders (cuBLAS's, and
 * OpenBLAS's blocked kernels): 1e-5 of the largest value (close_gemm). db: both sum the column
 * in double and round once, so they differ only where the two double sums straddle a float's
 * rounding point: 1e-6 of each value. */
static void linear_case(int64_t n, int64_t in, int64_t out, bool bias) {
    char shape[96];
    snprintf(shape, sizeof shape, "n %lld, in %lld, out %lld%s", (long long)n, (long long)in,
             (long long)out, bias ? ", bias" : "");
    float *x = host_random(n * in), *w = host_random(out * in);
    float *b = bias ? host_random(out) : NULL;
    float *y = calloc((size_t)(n * out), 4);
    CHECK_OK(lw_linear_forward(NULL, y, x, w, b, n, in, out));
    /* y starts as NaN on the GPU: without a bias the GEMM must not read it (beta 0) */
    float *nan = malloc(4 * (size_t)(n * out));
    for (int64_t i = 0; i < n * out; i++)
        nan[i] = NAN;
    float *gx = to_gpu(x, n * in), *gw = to_gpu(w, out * in), *gb = bias ? to_gpu(b, out) : NULL;
    float *gy = to_gpu(nan, n * out);
    CHECK_OK(lw_linear_forward(gs, gy, gx, gw, gb, n, in, out));
    float *hy = from_gpu(gy, n * out);
    CHECK(close_gemm("linear forward y", shape, hy, y, n * out, 1e-5));

    float *dy = host_random(n * out), *dx0 = prefill(n * in), *dw0 = prefill(out * in);
    float *db0 = prefill(out);
    float *dx = copy_of(dx0, n * in), *dw = copy_of(dw0, out * in), *db = copy_of(db0, out);
    CHECK_OK(lw_linear_backward(NULL, dx, dw, db, dy, x, w, n, in, out));
    float *gdy = to_gpu(dy, n * out);
    float *got[2][3];
    for (int run = 0; run < 2; run++) { /* twice: bit for bit the same */
        float *gdx = to_gpu(dx0, n * in), *gdw = to_gpu(dw0, out * in), *gdb = to_gpu(db0, out);
        CHECK_OK(lw_linear_backward(gs, gdx, gdw, gdb, gdy, gx, gw, n, in, out));
        got[run][0] = from_gpu(gdx, n * in);
        got[run][1] = from_gpu(gdw, out * in);
        got[run][2] = from_gpu(gdb, out);
        lw_device_free(gpu, gdx), lw_device_free(gpu, gdw), lw_device_free(gpu, gdb);
    }
    CHECK(close_gemm("linear backward dx", shape, got[0][0], dx, n * in, 1e-5));
    CHECK(close_gemm("linear backward dw", shape, got[0][1], dw, out * in, 1e-5));
    CHECK(close_scaled("linear backward db", shape, got[0][2], db, out, 1e-6));
    CHECK(same_bits("linear backward dx, run 2", shape, got[1][0], got[0][0], n * in));
    CHECK(same_bits("linear backward dw, run 2", shape, got[1][1], got[0][1], out * in));
    CHECK(same_bits("linear backward db, run 2", shape, got[1][2], got[0][2], out));
    /* dx and db NULL: dw alone, the same GEMM as above */
    float *gdw = to_gpu(dw0, out * in);
    CHECK_OK(lw_linear_backward(gs, NULL, gdw, NULL, gdy, gx, gw, n, in, out));
    float *hdw = from_gpu(gdw, out * in);
    CHECK(same_bits("linear backward dw without dx and db", shape, hdw, got[0][1], out * in));
    lw_device_free(gpu, gx), lw_device_free(gpu, gw), lw_device_free(gpu, gb);
    lw_device_free(gpu, gy), lw_device_free(gpu, gdy), lw_device_free(gpu, gdw);
    for (int run = 0; run < 2; run++)
        for (int k = 0; k < 3; k++)
            free(got[run][k]);
    free(x), free(w), free(b), free(y), free(nan), free(hy), free(dy), free(dx0), free(dw0);
    free(db0), free(dx), free(dw), free(db), free(hdw);
}

static void test_linear(void) {
    linear_case(1, 1, 1, true);
    linear_case(1, 37, 5, true);
    linear_case(65, 33, 17, false);
    linear_case(300, 100, 7, true);
    linear_case(3, 0, 4, true); /* an empty inner dimension: y = b, dw and dx untouched */
    linear_case(1024, 768, 2304, true);
}

/* With the device's matmul set to TF32 the same GEMM runs on tensor cores over 10-bit mantissas:
 * each product carries ~2^-11 of relative rounding, and 768 of them of random sign sum to ~1e-3
 * of the largest output; 5e-3 bounds that, and a result no further from fp32 than 1e-6 would mean
 * the setting never reached cuBLAS. */
static void test_linear_tf32(void) {
    const int64_t n = 1024, in = 768, out = 2304;
    const char *shape = "n 1024, in 768, out 2304, tf32";
    float *x = host_random(n * in), *w = host_random(out * in), *y = calloc((size_t)(n * out), 4);
    CHECK_OK(lw_linear_forward(NULL, y, x, w, NULL, n, in, out));
    float *gx = to_gpu(x, n * in), *gw = to_gpu(w, out * in), *gy = gpu_zeros(n * out);
    CHECK_OK(lw_device_set_matmul(gpu, LW_MATMUL_TF32));
    CHECK_OK(lw_linear_forward(gs, gy, gx, gw, NULL, n, in, out));
    CHECK_OK(lw_device_set_matmul(gpu, LW_MATMUL_FP32));
    float *hy = from_gpu(gy, n * out);
    CHECK(close_gemm("linear forward y", shape, hy, y, n * out, 5e-3));
    double big = 0, diff = 0;
    for (int64_t i = 0; i < n * out; i++) {
        big = fmax(big, fabs((double)y[i]));
        diff = fmax(diff, fabs((double)hy[i] - y[i]));
    }
    printf("linear forward in tf32 (%s): max |tf32 - cpu| / max |cpu| = %.2e\n", shape,
           diff / big);
    CHECK(diff > 1e-6 * big);
    lw_device_free(gpu, gx), lw_device_free(gpu, gw), lw_device_free(gpu, gy);
    free(x), free(w), free(y), free(hy);
}

/* max |got - ref| / max |ref|: how far a GEMM result is from the CPU's, on close_gemm's measure;
 * printed so that a GPU run records it. */
static double gemm_distance(const char *what, const float *got, const float *ref, int64_t n) {
    double big = 0, diff = 0;
    for (int64_t i = 0; i < n; i++) {
        big = fmax(big, fabs((double)ref[i]));
        diff = fmax(diff, fabs((double)got[i] - ref[i]));
    }
    printf("%s in bf16: max |bf16 - cpu| / max |cpu| = %.2e\n", what, diff / big);
    return diff / fmax(big, 1e-30);
}

/* With the device's matmul set to bf16 each GEMM rounds its operands to bf16 (8 significant
 * bits, nearest even: at most 2^-8, typically (rms) 2^-9.3 = 1.6e-3 relative each) and sums the
 * products, exact in fp32, in fp32. A product is then off by ~sqrt(2) 1.6e-3 = 2.3e-3 of itself,
 * and a sum of k terms of random sign by ~sqrt(k) 2.3e-3 |term|, while the sum itself is
 * ~sqrt(k) |term|: ~2.3e-3 of the outputs' scale whatever k, and the largest error against the
 * largest output the same. Simulated (the same shapes and input distribution, operands rounded to
 * bf16, products summed exactly): 2.0e-3 for y (k 768), 2.0e-3 for dx (k 2304), 2.1e-3 for dw
 * (k 1024). Tolerance 1e-2 of the largest value (close_gemm). And the mode must be the one run:
 * further from fp32 than 5e-4 of the largest value, where fp32 is ~1e-6 away and TF32 (10-bit
 * mantissas) ~2.5e-4 in the same simulation. db is a column sum, no GEMM: 1e-6 as in fp32. The
 * GEMMs stay deterministic: two backwards agree bit for bit. */
static void test_linear_bf16(void) {
    const int64_t n = 1024, in = 768, out = 2304;
    const char *shape = "n 1024, in 768, out 2304, bias, bf16";
    float *x = host_random(n * in), *w = host_random(out * in), *b = host_random(out);
    float *y = calloc((size_t)(n * out), 4);
    CHECK_OK(lw_linear_forward(NULL, y, x, w, b, n, in, out));
    float *dy = host_random(n * out), *dx0 = prefill(n * in), *dw0 = prefill(out * in);
    float *db0 = prefill(out);
    float *dx = copy_of(dx0, n * in), *dw = copy_of(dw0, out * in), *db = copy_of(db0, out);
    CHECK_OK(lw_linear_backward(NULL, dx, dw, db, dy, x, w, n, in, out));

    float *gx = to_gpu(x, n * in), *gw = to_gpu(w, out * in), *gb = to_gpu(b, out);
    float *gy = gpu_zeros(n * out), *gdy = to_gpu(dy, n * out);
    CHECK_OK(lw_device_set_matmul(gpu, LW_MATMUL_BF16));
    CHECK_OK(lw_linear_forward(gs, gy, gx, gw, gb, n, in, out));
    float *got[2][3];
    for (int run = 0; run < 2; run++) {
        float *gdx = to_gpu(dx0, n * in), *gdw = to_gpu(dw0, out * in), *gdb = to_gpu(db0, out);
        CHECK_OK(lw_linear_backward(gs, gdx, gdw, gdb, gdy, gx, gw, n, in, out));
        got[run][0] = from_gpu(gdx, n * in);
        got[run][1] = from_gpu(gdw, out * in);
        got[run][2] = from_gpu(gdb, out);
        lw_device_free(gpu, gdx), lw_device_free(gpu, gdw), lw_device_free(gpu, gdb);
    }
    /* dx NULL: w is not rounded, dw alone from the same operands */
    float *gdw = to_gpu(dw0, out * in);
    CHECK_OK(lw_linear_backward(gs, NULL, gdw, NULL, gdy, gx, gw, n, in, out));
    CHECK_OK(lw_device_set_matmul(gpu, LW_MATMUL_FP32));
    float *hy = from_gpu(gy, n * out), *hdw = from_gpu(gdw, out * in);

    CHECK(close_gemm("linear forward y", shape, hy, y, n * out, 1e-2));
    CHECK(close_gemm("linear backward dx", shape, got[0][0], dx, n * in, 1e-2));
    CHECK(close_gemm("linear backward dw", shape, got[0][1], dw, out * in, 1e-2));
    CHECK(close_scaled("linear backward db", shape, got[0][2], db, out, 1e-6));
    CHECK(close_gemm("linear backward dw without dx and db", shape, hdw, dw, out * in, 1e-2));
    CHECK(gemm_distance("linear forward y", hy, y, n * out) > 5e-4);
    CHECK(gemm_distance("linear backward dx", got[0][0], dx, n * in) > 5e-4);
    CHECK(gemm_distance("linear backward dw", got[0][1], dw, out * in) > 5e-4);
    CHECK(same_bits("linear backward dx, run 2", shape, got[1][0], got[0][0], n * in));
    CHECK(same_bits("linear backward dw, run 2", shape, got[1][1], got[0][1], out * in));
    lw_device_free(gpu, gx), lw_device_free(gpu, gw), lw_device_free(gpu, gb);
    lw_device_free(gpu, gy), lw_device_free(gpu, gdy), lw_device_free(gpu, gdw);
    for (int run = 0; run < 2; run++)
        for (int k = 0; k < 3; k++)
            free(got[run][k]);
    free(x), free(w), free(b), free(y), free(dy), free(dx0), free(dw0), free(db0), free(dx);
    free(dw), free(db), free(hy), free(hdw);
}

/* ---- embedding ------------------------------------------------------------------------------- */

/* Exact: the gather adds the same two floats; the backward adds each token's positions in the
 * CPU's order (batch-major, then time), one float addition at a time on both sides. */
static void embedding_case(int64_t b, int64_t t, int64_t c, int32_t vocab, bool with_wpe) {
    char shape[96];
    snprintf(shape, sizeof shape, "b %lld, t %lld, c %lld, vocab %d%s", (long long)b, (long long)t,
             (long long)c, (int)vocab, with_wpe ? ", wpe" : "");
    const int64_t n = b * t;
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005u + 1442695040888963407u;
        tokens[i] = (int32_t)((seed >> 33) % (uint64_t)vocab);
        if (vocab > 65536 && i % 3 == 0) tokens[i] = 65535 + (int32_t)(i % 5); /* repeats there */
    }
    float *wte = host_random(vocab * c), *wpe = with_wpe ? host_random(t * c) : NULL;
    float *y = malloc(4 * (size_t)(n * c));
    CHECK_OK(lw_embedding_forward(NULL, y, tokens, wte, wpe, b, t, c));
    int32_t *gtok = upload(tokens, 4 * n);
    float *gwte = to_gpu(wte, vocab * c), *gwpe = with_wpe ? to_gpu(wpe, t * c) : NULL;
    float *gy = gpu_zeros(n * c);
    CHECK_OK(lw_embedding_forward(gs, gy, gtok, gwte, gwpe, b, t, c));
    float *hy = from_gpu(gy, n * c);
    CHECK(same_bits("embedding forward", shape, hy, y, n * c));

    float *dy = host_random(n * c), *dwte0 = host_random(vocab * c), *dwpe0 = host_random(t * c);
    float *dwte = copy_of(dwte0, vocab * c), *dwpe = copy_of(dwpe0, t * c);
    CHECK_OK(lw_embedding_backward(NULL, dwte, with_wpe ? dwpe : NULL, dy, tokens, b, t, c));
    float *gdy = to_gpu(dy, n * c);
    for (int run = 0; run < 2; run++) {
        float *gdwte = to_gpu(dwte0, vocab * c), *gdwpe = with_wpe ? to_gpu(dwpe0, t * c) : NULL;
        CHECK_OK(lw_embedding_backward(gs, gdwte, gdwpe, gdy, gtok, b, t, c));
        float *h1 = from_gpu(gdwte, vocab * c);
        CHECK(same_bits("embedding backward dwte", shape, h1, dwte, vocab * c));
        if (with_wpe) {
            float *h2 = from_gpu(gdwpe, t * c);
            CHECK(same_bits("embedding backward dwpe", shape, h2, dwpe, t * c));
            free(h2);
        }
        free(h1);
        lw_device_free(gpu, gdwte), lw_device_free(gpu, gdwpe);
    }
    lw_device_free(gpu, gtok), lw_device_free(gpu, gwte), lw_device_free(gpu, gwpe);
    lw_device_free(gpu, gy), lw_device_free(gpu, gdy);
    free(tokens), free(wte), free(wpe), free(y), free(hy), free(dy), free(dwte0), free(dwpe0);
    free(dwte), free(dwpe);
}

static void test_embedding(void) {
    embedding_case(1, 1, 1, 1, true);
    embedding_case(4, 64, 100, 50, true); /* many repeats of each token */
    embedding_case(3, 33, 40, 70000, false); /* ids past 2^16: both passes of the host's sort */
    embedding_case(2, 1024, 768, 50304, true);
    /* a negative id lies outside every range of rows, the whole table's too: it looks up 0 and
     * adds no gradient, on the GPU as on the CPU */
    int32_t bad[3] = {1, -4, 2};
    float *dy = host_random(3 * 8), *w = host_random(8 * 8), *dw = malloc(4 * 8 * 8);
    float *y = malloc(4 * 3 * 8), *hy = malloc(4 * 3 * 8), *hdw = malloc(4 * 8 * 8);
    memcpy(dw, w, 4 * 8 * 8);
    CHECK_OK(lw_embedding_forward(NULL, y, bad, w, NULL, 1, 3, 8));
    CHECK_OK(lw_embedding_backward(NULL, dw, NULL, dy, bad, 1, 3, 8));
    int32_t *gbad = upload(bad, sizeof bad);
    float *gd = upload(dy, 4 * 3 * 8), *gw = upload(w, 4 * 8 * 8), *gy = gpu_zeros(3 * 8);
    CHECK_OK(lw_embedding_forward(gs, gy, gbad, gw, NULL, 1, 3, 8));
    CHECK_OK(lw_embedding_backward(gs, gw, NULL, gd, gbad, 1, 3, 8));
    download(hy, gy, 4 * 3 * 8);
    download(hdw, gw, 4 * 8 * 8);
    CHECK(hy[8] == 0.0f && same_bits("embedding forward, a negative id", "1 x 3", hy, y, 3 * 8));
    CHECK(same_bits("embedding backward, a negative id", "1 x 3", hdw, dw, 8 * 8));
    lw_device_free(gpu, gbad), lw_device_free(gpu, gd), lw_device_free(gpu, gw);
    lw_device_free(gpu, gy);
    free(dy), free(w), free(dw), free(y), free(hy), free(hdw);
}

/* ---- layer norm ------------------------------------------------------------------------------ */

/* Tolerances: mean and variance are summed in double on both sides (in other orders) and rounded
 * to float once: they differ at most where a double sum straddles a float rounding point, an
 * ulp; y and dx are then the same float operations (no FMA on either side) on values an ulp
 * apart at most: 1e-6 and 1e-5 (dx subtracts two row means, which can cancel). dg and dbeta: the
 * CPU adds the rows into them in float, one after another (error growing with n), the GPU sums
 * each column in double first: 1e-4 up to n = 4096. */
static void layernorm_case(int64_t n, int64_t c, bool with_beta) {
    char shape[96];
    snprintf(shape, sizeof shape, "n %lld, c %lld%s", (long long)n, (long long)c,
             with_beta ? ", beta" : "");
    const int64_t nc = n * c;
    const float eps = 1e-5f;
    float *x = scaled_random(nc, 1.5f, 3.0f); /* a mean far from 0: the two-pass variance */
    float *g = scaled_random(c, 0.5f, 1.0f), *beta = with_beta ? host_random(c) : NULL;
    float *y = malloc(4 * (size_t)nc), *mean = malloc(4 * (size_t)n), *rstd = malloc(4 * (size_t)n);
    CHECK_OK(lw_layernorm_forward(NULL, y, mean, rstd, x, g, beta, n, c, eps));
    float *gx = to_gpu(x, nc), *gg = to_gpu(g, c), *gbeta = with_beta ? to_gpu(beta, c) : NULL;
    float *gy = gpu_zeros(nc), *gmean = gpu_zeros(n), *grstd = gpu_zeros(n);
    CHECK_OK(lw_layernorm_forward(gs, gy, gmean, grstd, gx, gg, gbeta, n, c, eps));
    float *hy = from_gpu(gy, nc), *hmean = from_gpu(gmean, n), *hrstd = from_gpu(grstd, n);
    CHECK(close_scaled("layernorm forward y", shape, hy, y, nc, 1e-5));
    CHECK(close_scaled("layernorm forward mean", shape, hmean, mean, n, 1e-6));
    CHECK(close_scaled("layernorm forward rstd", shape, hrstd, rstd, n, 1e-6));

    float *dy = host_random(nc), *dx0 = prefill(nc), *dg0 = prefill(c);
    float *dbeta0 = prefill(c);
    float *dx = copy_of(dx0, nc), *dg = copy_of(dg0, c), *dbeta = copy_of(dbeta0, c);
    CHECK_OK(lw_layernorm_backward(NULL, dx, dg, with_beta ? dbeta : NULL, dy, x, g, mean, rstd, n,
                                   c));
    float *gdy = to_gpu(dy, nc);
    float *got[2][3];
    for (int run = 0; run < 2; run++) {
        float *gdx = to_gpu(dx0, nc), *gdg = to_gpu(dg0, c);
        float *gdbeta = with_beta ? to_gpu(dbeta0, c) : NULL;
        /* the GPU's own mean and rstd, as a training step would pass them */
        CHECK_OK(lw_layernorm_backward(gs, gdx, gdg, gdbeta, gdy, gx, gg, gmean, grstd, n, c));
        got[run][0] = from_gpu(gdx, nc);
        got[run][1] = from_gpu(gdg, c);
        got[run][2] = with_beta ? from_gpu(gdbeta, c) : copy_of(dbeta0, c);
        lw_device_free(gpu, gdx), lw_device_free(gpu, gdg), lw_device_free(gpu, gdbeta);
    }
    CHECK(close_scaled("layernorm backward dx", shape, got[0][0], dx, nc, 1e-5));
    CHECK(close_scaled("layernorm backward dg", shape, got[0][1], dg, c, 1e-4));
    CHECK(close_scaled("layernorm backward dbeta", shape, got[0][2], dbeta, c, 1e-4));
    for (int k = 0; k < 3; k++)
        CHECK(same_bits("layernorm backward, run 2", shape, got[1][k], got[0][k], k ? c : nc));
    lw_device_free(gpu, gx), lw_device_free(gpu, gg), lw_device_free(gpu, gbeta);
    lw_device_free(gpu, gy), lw_device_free(gpu, gmean), lw_device_free(gpu, grstd);
    lw_device_free(gpu, gdy);
    for (int run = 0; run < 2; run++)
        for (int k = 0; k < 3; k++)
            free(got[run][k]);
    free(x), free(g), free(beta), free(y), free(mean), free(rstd), free(hy), free(hmean);
    free(hrstd), free(dy), free(dx0), free(dg0), free(dbeta0), free(dx), free(dg), free(dbeta);
}

static void test_layernorm(void) {
    layernorm_case(1, 1, true); /* variance 0: rstd = 1 / sqrt(eps) */
    layernorm_case(1, 768, true);
    layernorm_case(37, 100, false);
    layernorm_case(512, 1536, true);
    layernorm_case(4096, 33, true);
}

/* ---- GELU ------------------------------------------------------------------------------------ */

/* Exact: the GPU evaluates the CPU's formulas (its polynomial exp included) operation for
 * operation, each rounded to nearest with no FMA on either side. */
static void test_gelu(void) {
    const float special[] = {0.0f, -0.0f,    9.0f,      -9.0f,     9.0001f, -9.0001f,
                             20.0f, -20.0f,  1e-30f,    -1e-30f,   88.0f,   -88.0f,
                             3e38f, -3e38f,  INFINITY,  -INFINITY, NAN,     0.5f};
    const int64_t ns = (int64_t)(sizeof special / sizeof special[0]), n = 100003;
    float *x = scaled_random(n, 12.0f, 0.0f);
    memcpy(x, special, sizeof special);
    float *y = malloc(4 * (size_t)n), *dy = host_random(n), *dx = host_random(n);
    float *gx = to_gpu(x, n), *gy = gpu_zeros(n), *gdy = to_gpu(dy, n), *gdx = to_gpu(dx, n);
    CHECK_OK(lw_gelu_forward(NULL, y, x, n));
    CHECK_OK(lw_gelu_forward(gs, gy, gx, n));
    float *hy = from_gpu(gy, n);
    CHECK(same_bits("gelu forward", "n 100003", hy, y, n));
    CHECK_OK(lw_gelu_backward(NULL, dx, dy, x, n));
    CHECK_OK(lw_gelu_backward(gs, gdx, gdy, gx, n));
    float *hdx = from_gpu(gdx, n);
    CHECK(same_bits("gelu backward", "n 100003", hdx, dx, n));
    CHECK(ns < n && isnan(hy[ns - 2]) && hy[0] == 0.0f); /* NaN passes through */
    lw_device_free(gpu, gx), lw_device_free(gpu, gy), lw_device_free(gpu, gdy);
    lw_device_free(gpu, gdx);
    free(x), free(y), free(dy), free(dx), free(hy), free(hdx);
}

/* ---- attention ------------------------------------------------------------------------------- */

/* Tolerances, 1e-5: the scores are fp32 dot products summed in other orders, the GPU's softmax
 * is online (rescaled tile by tile) where the CPU's takes the row max first, and the backward
 * recomputes the probabilities from the saved log-sum-exp on both sides: out and dqkv are GEMM
 * results a few roundings of their terms apart (of the largest value: close_gemm; a float32
 * emulation of these kernels is within 7e-7 of the exact result on that measure), lse a log
 * (close_lse). */
static void attention_case(int64_t b, int64_t t, int64_t c, int64_t nh) {
    char shape[96];
    snprintf(shape, sizeof shape, "b %lld, t %lld, c %lld, nh %lld (head dim %lld)", (long long)b,
             (long long)t, (long long)c, (long long)nh, (long long)(c / nh));
    const int64_t n3 = b * t * 3 * c, no = b * t * c, nl = b * nh * t;
    float *qkv = scaled_random(n3, 2.0f, 0.0f), *dout = host_random(no), *d0 = prefill(n3);
    float *out = malloc(4 * (size_t)no), *lse = malloc(4 * (size_t)nl), *dqkv = copy_of(d0, n3);
    float *scratch = malloc(4 * (size_t)lw_attention_scratch_floats(NULL, b, t, c, nh));
    CHECK_OK(lw_attention_forward(NULL, out, lse, scratch, qkv, b, t, c, nh));
    CHECK_OK(lw_attention_backward(NULL, dqkv, scratch, dout, qkv, out, lse, b, t, c, nh));

    CHECK_EQ(lw_attention_scratch_floats(gs, b, t, c, nh), nl); /* D = rowsum(dout * out) only */
    float *gqkv = to_gpu(qkv, n3), *gdout = to_gpu(dout, no), *gscratch = gpu_zeros(nl);
    float *hout[2], *hlse[2], *hd[2];
    for (int run = 0; run < 2; run++) {
        float *gout = gpu_zeros(no), *glse = gpu_zeros(nl), *gd = to_gpu(d0, n3);
        CHECK_OK(lw_attention_forward(gs, gout, glse, gscratch, gqkv, b, t, c, nh));
        CHECK_OK(lw_attention_backward(gs, gd, gscratch, gdout, gqkv, gout, glse, b, t, c, nh));
        hout[run] = from_gpu(gout, no);
        hlse[run] = from_gpu(glse, nl);
        hd[run] = from_gpu(gd, n3);
        lw_device_free(gpu, gout), lw_device_free(gpu, glse), lw_device_free(gpu, gd);
    }
    CHECK(close_gemm("attention forward out", shape, hout[0], out, no, 1e-5));
    CHECK(close_lse("attention forward lse", shape, hlse[0], lse, nl, 1e-5));
    CHECK(close_gemm("attention backward dqkv", shape, hd[0], dqkv, n3, 1e-5));
    CHECK(same_bits("attention forward out, run 2", shape, hout[1], hout[0], no));
    CHECK(same_bits("attention forward lse, run 2", shape, hlse[1], hlse[0], nl));
    CHECK(same_bits("attention backward dqkv, run 2", shape, hd[1], hd[0], n3));
    lw_device_free(gpu, gqkv), lw_device_free(gpu, gdout), lw_device_free(gpu, gscratch);
    for (int run = 0; run < 2; run++)
        free(hout[run]), free(hlse[run]), free(hd[run]);
    free(qkv), free(dout), free(d0), free(out), free(lse), free(dqkv), free(scratch);
}

static void test_attention(void) {
    attention_case(1, 1, 16, 1);     /* one row, head dim 16 */
    attention_case(2, 70, 96, 2);    /* head dim 48, t past one 64-row tile */
    attention_case(2, 64, 96, 4);    /* head dim 24, exactly one tile */
    attention_case(1, 1000, 128, 2); /* head dim 64, t = 1000 (not a multiple of the tile) */
    attention_case(1, 130, 256, 2);  /* head dim 128 */
    attention_case(1, 77, 288, 3);   /* head dim 96 */
    attention_case(2, 1024, 768, 12); /* GPT-2 small's layer */
    /* past the largest head dim: a clear error, not a wrong answer */
    float *gq = gpu_zeros(4 * 3 * 512), *go = gpu_zeros(4 * 512), *gl = gpu_zeros(2 * 4);
    float *gsc = gpu_zeros(2 * 4);
    CHECK_FAILS(lw_attention_forward(gs, go, gl, gsc, gq, 1, 4, 512, 2), LW_ERR_UNSUPPORTED,
                "head dim 256");
    CHECK_FAILS(lw_attention_backward(gs, gq, gsc, go, gq, go, gl, 1, 4, 512, 2),
                LW_ERR_UNSUPPORTED, "head dim 256");
    CHECK_FAILS(lw_attention_forward(gs, go, gl, gsc, gq, 1, 4, 100, 3), LW_ERR_INVALID,
                "do not divide");
    lw_device_free(gpu, gq), lw_device_free(gpu, go), lw_device_free(gpu, gl);
    lw_device_free(gpu, gsc);
}

/* ---- cross-entropy --------------------------------------------------------------------------- */

static int64_t gpu_chunk_rows(int64_t n, int64_t v) { /* 2^26 floats of logits at once */
    int64_t rows = ((int64_t)1 << 26) / v;
    rows = rows < 1 ? 1 : rows;
    return rows < n ? rows : n;
}

/* Tolerances in fp32, 1e-5: the logits are fp32 GEMMs summed in other orders (each logit a few
 * ulps of its terms apart), the sums of exponentials are in double on both sides, and the GPU's
 * expf is within 2 ulps of the CPU's: losses relative to each value, lse as a log (close_lse), dh
 * and dw as GEMM results (close_gemm). The mean loss: the same rows summed in double, 1e-6. With
 * every target ignored both leave dh and dw exactly as they were.
 * In bf16 (the shape of the last fp32 case: c 64, v 50304, three chunks, every 5th target
 * ignored; h in [-1, 1), w in [-0.5, 0.5)), as test_linear_bf16 derives: a logit, a sum of 64
 * products, is off by ~sqrt(64) 2.3e-3 |term| = 3e-3; a row's loss, lse - the target's logit,
 * carries its target logit's error (the lse averages thousands of them): 1e-2 at most over 2400
 * rows, 3e-2 absolute allowed (the losses are ~12); lse moves by ~1.5e-3 (1e-3 relative, as a
 * log); the mean loss averages 2400 independent errors, ~6e-5: 1e-4 relative (1.2e-3). dh is
 * dominated by -w[target] (dlogits' own rounding is ~0 there: n / count (p - 1) rounds to
 * 1.25 within 2e-5), so its error is w's rounding, at most 2^-8 of the largest value; dw likewise
 * by h's: 1e-2 of the largest value. Simulated (operands rounded as the GPU rounds them, sums
 * exact): losses 9.8e-3 absolute, lse 1.5e-3, mean loss 2e-6, dh 2.7e-3, dw 1.9e-3. And bf16
 * must have run: losses further than 1e-3 from the CPU's somewhere (fp32 allows 1.2e-4), dh and dw
 * further than 5e-4 of their largest value. */
static void cross_entropy_case(int64_t n, int64_t c, int64_t v, int ignore_every, bool with_dh,
                               lw_matmul matmul) {
    const bool bf16 = matmul == LW_MATMUL_BF16;
    char shape[112];
    snprintf(shape, sizeof shape, "n %lld, c %lld, v %lld, chunk %lld%s%s", (long long)n,
             (long long)c, (long long)v, (long long)gpu_chunk_rows(n, v), with_dh ? "" : ", no dh",
             bf16 ? ", bf16" : "");
    float *h = host_random(n * c), *w = scaled_random(v * c, 0.5f, 0.0f);
    int32_t *targets = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005u + 1442695040888963407u;
        targets[i] = (int32_t)((seed >> 33) % (uint64_t)v);
        if (ignore_every > 0 && i % ignore_every == ignore_every - 1)
            targets[i] = i % 2 ? -1 : (int32_t)(v + i); /* outside [0, v): ignored */
    }
    /* loss_scale n: dlogits = n / count (p - onehot), entries of order 1, not 1 / n */
    const float loss_scale = (float)n;
    float *losses = malloc(4 * (size_t)n), *lse = malloc(4 * (size_t)n);
    float *scratch = malloc(4 * (size_t)lw_cross_entropy_scratch_floats(NULL, n, v));
    double loss = -1;
    CHECK_OK(lw_cross_entropy_forward(NULL, losses, lse, scratch, h, w, targets, n, c, v, &loss));
    float *dh0 = prefill(n * c), *dw0 = prefill(v * c);
    float *dh = copy_of(dh0, n * c), *dw = copy_of(dw0, v * c);
    CHECK_OK(lw_cross_entropy_backward(NULL, with_dh ? dh : NULL, dw, scratch, h, w, targets, lse, n,
                                       c, v, loss_scale));

    const int64_t sf = lw_cross_entropy_scratch_floats(gs, n, v);
    CHECK_EQ(sf, gpu_chunk_rows(n, v) * v);
    float *gh = to_gpu(h, n * c), *gw = to_gpu(w, v * c), *gscratch = gpu_zeros(sf);
    int32_t *gt = upload(targets, 4 * n);
    double gloss[2] = {-1, -1};
    float *hl[2], *hlse[2], *hdh[2], *hdw[2];
    CHECK_OK(lw_device_set_matmul(gpu, matmul));
    for (int run = 0; run < 2; run++) { /* forward then backward, twice */
        float *gl = gpu_zeros(n), *glse = gpu_zeros(n);
        float *gdh = to_gpu(dh0, n * c), *gdw = to_gpu(dw0, v * c);
        CHECK_OK(lw_cross_entropy_forward(gs, gl, glse, gscratch, gh, gw, gt, n, c, v,
                                          &gloss[run]));
        CHECK_OK(lw_cross_entropy_backward(gs, with_dh ? gdh : NULL, gdw, gscratch, gh, gw, gt,
                                           glse, n, c, v, loss_scale));
        hl[run] = from_gpu(gl, n);
        hlse[run] = from_gpu(glse, n);
        hdh[run] = from_gpu(gdh, n * c);
        hdw[run] = from_gpu(gdw, v * c);
        lw_device_free(gpu, gl), lw_device_free(gpu, glse), lw_device_free(gpu, gdh);
        lw_device_free(gpu, gdw);
    }
    CHECK_OK(lw_device_set_matmul(gpu, LW_MATMUL_FP32));
    const double loss_tol = bf16 ? 1e-4 : 1e-6;
    if (!(fabs(gloss[0] - loss) <= loss_tol * fmax(fabs(loss), 1e-30)))
        fprintf(stderr, "cross-entropy loss (%s): %.9g on the GPU, %.9g on the CPU\n", shape,
                gloss[0], loss);
    CHECK(fabs(gloss[0] - loss) <= loss_tol * fmax(fabs(loss), 1e-30));
    CHECK(gloss[1] == gloss[0]);
    if (bf16) {
        double worst = 0;
        for (int64_t i = 0; i < n; i++)
            worst = fmax(worst, fabs((double)hl[0][i] - losses[i]));
        printf("cross-entropy (%s): max |bf16 - cpu| over the losses %.2e, mean loss %.9g on the "
               "GPU, %.9g on the CPU\n", shape, worst, gloss[0], loss);
        if (!(worst <= 3e-2))
            fprintf(stderr, "cross-entropy losses (%s): max difference %.3g, tolerance 3e-2\n",
                    shape, worst);
        CHECK(worst <= 3e-2 && worst > 1e-3);
        CHECK(close_lse("cross-entropy lse", shape, hlse[0], lse, n, 1e-3));
        CHECK(close_gemm("cross-entropy dh", shape, hdh[0], dh, n * c, 1e-2));
        CHECK(close_gemm("cross-entropy dw", shape, hdw[0], dw, v * c, 1e-2));
        CHECK(gemm_distance("cross-entropy dh", hdh[0], dh, n * c) > 5e-4);
        CHECK(gemm_distance("cross-entropy dw", hdw[0], dw, v * c) > 5e-4);
    } else {
        CHECK(close_scaled("cross-entropy losses", shape, hl[0], losses, n, 1e-5));
        CHECK(close_lse("cross-entropy lse", shape, hlse[0], lse, n, 1e-5));
        if (ignore_every == 1) { /* nothing counted: loss 0, gradients untouched */
            CHECK(loss == 0.0 && gloss[0] == 0.0);
            CHECK(same_bits("cross-entropy dh, all ignored", shape, hdh[0], dh0, n * c));
            CHECK(same_bits("cross-entropy dw, all ignored", shape, hdw[0], dw0, v * c));
        }
        CHECK(close_gemm("cross-entropy dh", shape, hdh[0], dh, n * c, 1e-5));
        CHECK(close_gemm("cross-entropy dw", shape, hdw[0], dw, v * c, 1e-5));
    }
    CHECK(same_bits("cross-entropy losses, run 2", shape, hl[1], hl[0], n));
    CHECK(same_bits("cross-entropy lse, run 2", shape, hlse[1], hlse[0], n));
    CHECK(same_bits("cross-entropy dh, run 2", shape, hdh[1], hdh[0], n * c));
    CHECK(same_bits("cross-entropy dw, run 2", shape, hdw[1], hdw[0], v * c));
    lw_device_free(gpu, gh), lw_device_free(gpu, gw), lw_device_free(gpu, gscratch);
    lw_device_free(gpu, gt);
    for (int run = 0; run < 2; run++)
        free(hl[run]), free(hlse[run]), free(hdh[run]), free(hdw[run]);
    free(h), free(w), free(targets), free(losses), free(lse), free(scratch), free(dh0), free(dw0);
    free(dh), free(dw);
}

static void test_cross_entropy(void) {
    const lw_matmul fp32 = LW_MATMUL_FP32;
    cross_entropy_case(7, 33, 50, 3, true, fp32);       /* one chunk: the probabilities are kept */
    cross_entropy_case(1, 8, 1, 0, true, fp32);         /* one row, one class: loss 0, gradient 0 */
    cross_entropy_case(300, 40, 1000, 4, false, fp32);  /* dh NULL */
    cross_entropy_case(5, 8, 10, 1, true, fp32);        /* every target ignored */
    cross_entropy_case(3000, 64, 50304, 5, true, fp32); /* three chunks of 1334 rows, last short */
}

/* The LM head with bf16 GEMMs over several chunks: w and h rounded once per call, each chunk's
 * dlogits once for its two GEMMs (tolerances above cross_entropy_case). */
static void test_cross_entropy_bf16(void) {
    cross_entropy_case(3000, 64, 50304, 5, true, LW_MATMUL_BF16);
}

/* ---- mixture of experts ---------------------------------------------------------------------- */

static int32_t rand_below(int64_t bound) {
    seed = seed * 6364136223846793005u + 1442695040888963407u;
    return (int32_t)((seed >> 33) % (uint64_t)bound);
}

static bool same_ints(const char *what, const char *shape, const int32_t *a, const int32_t *b,
                      int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (a[i] != b[i]) {
            fprintf(stderr, "%s (%s): element %lld differs: %d and %d\n", what, shape,
                    (long long)i, (int)a[i], (int)b[i]);
            return false;
        }
    return true;
}

/* Tolerances. Router forward: the experts are ranked by logit on both sides with the same loops,
 * so they agree exactly, ties included (logits on a grid of quarters: most rows tie). probs:
 * CUDA's expf is within 2 ulps, glibc's within 1; the row sum (double) and the scaling then move
 * a probability by at most ~5 ulps (6e-7 relative): 1e-6. weights = p / z, both carrying that
 * error: 2e-6. Router backward, from the same probs and experts: the same float operations in
 * the same order, no FMA on either side: bit for bit. Aux loss: the column sums are taken in
 * double in other orders (chunks of rows, a tree in each) over positive values: far below 1e-10
 * of the loss. Its backward: the same double expression, rounded once per column, added in
 * float: bit for bit. Two runs of each agree bit for bit. */
static void router_case(int64_t n, int64_t e, int64_t k, bool ties) {
    char shape[96];
    snprintf(shape, sizeof shape, "n %lld, e %lld, k %lld%s", (long long)n, (long long)e,
             (long long)k, ties ? ", ties" : "");
    float *logits = scaled_random(n * e, 3.0f, 0.0f);
    if (ties)
        for (int64_t i = 0; i < n * e; i++)
            logits[i] = roundf(logits[i] * 4.0f) / 4.0f;
    int32_t *experts = malloc(sizeof(int32_t) * (size_t)(n * k));
    float *weights = malloc(4 * (size_t)(n * k)), *probs = malloc(4 * (size_t)(n * e));
    CHECK_OK(lw_moe_router_forward(NULL, experts, weights, probs, logits, n, e, k));
    float *glogits = to_gpu(logits, n * e), *gprobs = gpu_zeros(n * e), *gw = gpu_zeros(n * k);
    int32_t *gexp = NULL;
    CHECK_OK(lw_device_alloc(gpu, 4 * n * k, (void **)&gexp));
    int32_t *hexp = malloc(sizeof(int32_t) * (size_t)(n * k));
    float *first_p = NULL, *first_w = NULL;
    for (int run = 0; run < 2; run++) {
        CHECK_OK(lw_moe_router_forward(gs, gexp, gw, gprobs, glogits, n, e, k));
        download(hexp, gexp, 4 * n * k);
        float *hp = from_gpu(gprobs, n * e), *hw = from_gpu(gw, n * k);
        CHECK(same_ints("router experts", shape, hexp, experts, n * k));
        CHECK(close_scaled("router probs", shape, hp, probs, n * e, 1e-6));
        CHECK(close_scaled("router weights", shape, hw, weights, n * k, 2e-6));
        if (run == 0) {
            first_p = hp, first_w = hw;
        } else {
            CHECK(same_bits("router probs, two runs", shape, hp, first_p, n * e));
            CHECK(same_bits("router weights, two runs", shape, hw, first_w, n * k));
            free(hp), free(hw);
        }
    }

    /* backward from the CPU's probs and experts, onto non-zero dlogits, with and without dprobs */
    float *dweights = host_random(n * k), *dprobs = host_random(n * e), *dl0 = prefill(n * e);
    float *cprobs = to_gpu(probs, n * e), *gdw = to_gpu(dweights, n * k);
    float *gdp = to_gpu(dprobs, n * e);
    int32_t *cexp = upload(experts, 4 * n * k);
    for (int with_dp = 0; with_dp < 2; with_dp++) {
        float *dl = copy_of(dl0, n * e);
        CHECK_OK(lw_moe_router_backward(NULL, dl, dweights, with_dp ? dprobs : NULL, probs,
                                        experts, n, e, k));
        for (int run = 0; run < 2; run++) {
            float *gdl = to_gpu(dl0, n * e);
            CHECK_OK(lw_moe_router_backward(gs, gdl, gdw, with_dp ? gdp : NULL, cprobs, cexp, n,
                                            e, k));
            float *h = from_gpu(gdl, n * e);
            CHECK(same_bits(with_dp ? "router backward" : "router backward, no dprobs", shape, h,
                            dl, n * e));
            free(h);
            lw_device_free(gpu, gdl);
        }
        free(dl);
    }

    /* the load-balancing loss on the CPU's routing */
    const float coef = 0.01f;
    double loss = 0, gloss[2] = {0, 0};
    CHECK_OK(lw_moe_aux_loss_forward(NULL, probs, experts, n, e, k, coef, &loss));
    for (int run = 0; run < 2; run++)
        CHECK_OK(lw_moe_aux_loss_forward(gs, cprobs, cexp, n, e, k, coef, &gloss[run]));
    if (!(fabs(gloss[0] - loss) <= 1e-10 * fabs(loss)))
        fprintf(stderr, "aux loss (%s): %.17g, the CPU's %.17g\n", shape, gloss[0], loss);
    CHECK(fabs(gloss[0] - loss) <= 1e-10 * fabs(loss));
    CHECK(memcmp(&gloss[0], &gloss[1], sizeof(double)) == 0);
    float *dp = copy_of(dl0, n * e);
    CHECK_OK(lw_moe_aux_loss_backward(NULL, dp, experts, n, e, k, coef, 0.5f));
    for (int run = 0; run < 2; run++) {
        float *gdp2 = to_gpu(dl0, n * e);
        CHECK_OK(lw_moe_aux_loss_backward(gs, gdp2, cexp, n, e, k, coef, 0.5f));
        float *h = from_gpu(gdp2, n * e);
        CHECK(same_bits("aux loss backward", shape, h, dp, n * e));
        free(h);
        lw_device_free(gpu, gdp2);
    }

    lw_device_free(gpu, glogits), lw_device_free(gpu, gprobs), lw_device_free(gpu, gw);
    lw_device_free(gpu, gexp), lw_device_free(gpu, cprobs), lw_device_free(gpu, gdw);
    lw_device_free(gpu, gdp), lw_device_free(gpu, cexp);
    free(logits), free(experts), free(weights), free(probs), free(hexp), free(first_p);
    free(first_w), free(dweights), free(dprobs), free(dl0), free(dp);
}

static void test_moe_router(void) {
    router_case(1, 1, 1, false);
    router_case(7, 5, 1, true);            /* k = 1: every weight is 1 */
    router_case(33, 8, 2, true);
    router_case(130, 13, 13, true);        /* k = e: every expert, ranked */
    router_case(1000, 64, 4, true);
    router_case(5000, 8, 2, false);        /* the aux statistics in 3 chunks of rows */
    router_case(150000, 8, 2, true);       /* 64 chunks, the most */
}

/* Tolerances: the gather, its backward, the combine and dsrc are the CPU's float operations in
 * the CPU's order (each destination row adds its sources in the order of the list): bit for bit.
 * dw: the dot product in double in another order, rounded once, then added in float: within an
 * ulp of the dot, 1e-6 of the values (1% of the largest below that: a dw can cancel). */
static void rows_case(int64_t m, int64_t c, int64_t nrows, const int32_t *given, const char *kind) {
    char shape[128];
    snprintf(shape, sizeof shape, "m %lld, c %lld, %lld rows, %s", (long long)m, (long long)c,
             (long long)nrows, kind);
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)m);
    for (int64_t i = 0; i < m; i++)
        rows[i] = given != NULL ? given[i] : rand_below(nrows);
    if (given == NULL && nrows > 65536)
        for (int64_t i = 0; i < m; i += 3)
            rows[i] = 65535 + (int32_t)(i % 5); /* repeats past 2^16: both passes of the sort */
    float *x = host_random(nrows * c), *src = host_random(m * c), *w = host_random(m);
    float *dout = host_random(m * c), *dy = host_random(nrows * c);
    float *dx0 = prefill(nrows * c), *dsrc0 = prefill(m * c), *dw0 = prefill(m);
    int32_t *grows = upload(rows, 4 * m);
    float *gx = to_gpu(x, nrows * c), *gsrc = to_gpu(src, m * c), *gw = to_gpu(w, m);
    float *gdout = to_gpu(dout, m * c), *gdy = to_gpu(dy, nrows * c);

    float *out = malloc(4 * (size_t)(m * c));
    CHECK_OK(lw_gather_forward(NULL, out, x, rows, m, c));
    float *gout = gpu_zeros(m * c);
    CHECK_OK(lw_gather_forward(gs, gout, gx, grows, m, c));
    float *h = from_gpu(gout, m * c);
    CHECK(same_bits("gather forward", shape, h, out, m * c));
    free(h);

    float *dx = copy_of(dx0, nrows * c), *y = copy_of(dx0, nrows * c);
    CHECK_OK(lw_gather_backward(NULL, dx, dout, rows, m, c));
    CHECK_OK(lw_combine_forward(NULL, y, src, w, rows, m, c));
    float *dsrc = copy_of(dsrc0, m * c), *dw = copy_of(dw0, m);
    CHECK_OK(lw_combine_backward(NULL, dsrc, dw, dy, src, w, rows, m, c));
    float *dsrc_only = copy_of(dsrc0, m * c), *dw_only = copy_of(dw0, m);
    CHECK_OK(lw_combine_backward(NULL, dsrc_only, NULL, dy, src, w, rows, m, c));
    CHECK_OK(lw_combine_backward(NULL, NULL, dw_only, dy, src, w, rows, m, c));
    float *first_dw = NULL;
    for (int run = 0; run < 2; run++) {
        float *gdx = to_gpu(dx0, nrows * c), *gy = to_gpu(dx0, nrows * c);
        CHECK_OK(lw_gather_backward(gs, gdx, gdout, grows, m, c));
        CHECK_OK(lw_combine_forward(gs, gy, gsrc, gw, grows, m, c));
        float *h1 = from_gpu(gdx, nrows * c), *h2 = from_gpu(gy, nrows * c);
        CHECK(same_bits("gather backward", shape, h1, dx, nrows * c));
        CHECK(same_bits("combine forward", shape, h2, y, nrows * c));
        free(h1), free(h2);
        lw_device_free(gpu, gdx), lw_device_free(gpu, gy);

        float *gdsrc = to_gpu(dsrc0, m * c), *gdw = to_gpu(dw0, m);
        CHECK_OK(lw_combine_backward(gs, gdsrc, gdw, gdy, gsrc, gw, grows, m, c));
        float *h3 = from_gpu(gdsrc, m * c), *h4 = from_gpu(gdw, m);
        CHECK(same_bits("combine backward dsrc", shape, h3, dsrc, m * c));
        CHECK(close_scaled("combine backward dw", shape, h4, dw, m, 1e-6));
        if (run == 0) {
            first_dw = h4;
        } else {
            CHECK(same_bits("combine backward dw, two runs", shape, h4, first_dw, m));
            free(h4);
        }
        free(h3);
        lw_device_free(gpu, gdsrc), lw_device_free(gpu, gdw);
    }
    /* each optional output alone */
    float *gdsrc = to_gpu(dsrc0, m * c), *gdw = to_gpu(dw0, m);
    CHECK_OK(lw_combine_backward(gs, gdsrc, NULL, gdy, gsrc, gw, grows, m, c));
    CHECK_OK(lw_combine_backward(gs, NULL, gdw, gdy, gsrc, gw, grows, m, c));
    float *h3 = from_gpu(gdsrc, m * c), *h4 = from_gpu(gdw, m);
    CHECK(same_bits("combine backward, dsrc alone", shape, h3, dsrc_only, m * c));
    CHECK(same_bits("combine backward, dw alone", shape, h4, first_dw, m));
    CHECK(close_scaled("combine backward, dw alone", shape, h4, dw_only, m, 1e-6));
    free(h3), free(h4);
    lw_device_free(gpu, gdsrc), lw_device_free(gpu, gdw);

    lw_device_free(gpu, grows), lw_device_free(gpu, gx), lw_device_free(gpu, gsrc);
    lw_device_free(gpu, gw), lw_device_free(gpu, gdout), lw_device_free(gpu, gdy);
    lw_device_free(gpu, gout);
    free(rows), free(x), free(src), free(w), free(dout), free(dy), free(dx0), free(dsrc0);
    free(dw0), free(out), free(dx), free(y), free(dsrc), free(dw), free(dsrc_only), free(dw_only);
    free(first_dw);
}

/* A mixture of experts' dispatch order: the (token, slot) pairs of a routing sorted by expert
 * (stable), rows[i] = the token of the i-th: each token's row repeats k times. */
static void moe_rows_case(int64_t n, int64_t e, int64_t k, int64_t c) {
    float *logits = host_random(n * e);
    int32_t *experts = malloc(sizeof(int32_t) * (size_t)(n * k));
    float *weights = malloc(4 * (size_t)(n * k)), *probs = malloc(4 * (size_t)(n * e));
    CHECK_OK(lw_moe_router_forward(NULL, experts, weights, probs, logits, n, e, k));
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)(n * k));
    int64_t at = 0;
    for (int32_t j = 0; j < e; j++)
        for (int64_t a = 0; a < n * k; a++)
            if (experts[a] == j) rows[at++] = (int32_t)(a / k);
    CHECK(at == n * k);
    rows_case(n * k, c, n, rows, "dispatch order");
    free(logits), free(experts), free(weights), free(probs), free(rows);
}

static void test_moe_rows(void) {
    rows_case(1, 1, 1, NULL, "random");
    rows_case(300, 37, 50, NULL, "random, repeats");
    rows_case(200, 300, 1000, NULL, "random, few repeats, 3 channel tiles");
    rows_case(3000, 33, 70000, NULL, "random, rows past 2^16");
    moe_rows_case(1000, 8, 2, 100);
    moe_rows_case(77, 5, 5, 129);  /* k = e: every token to every expert */
    moe_rows_case(4096, 16, 1, 768);
    /* a negative row would be misplaced by the sort: refused, naming it */
    int32_t bad[3] = {1, -4, 2};
    int32_t *gbad = upload(bad, sizeof bad);
    float *gd = gpu_zeros(3 * 8), *gx = gpu_zeros(8 * 8), *gwt = gpu_zeros(3);
    CHECK_FAILS(lw_gather_backward(gs, gx, gd, gbad, 3, 8), LW_ERR_RANGE, "row -4 at position 1");
    CHECK_FAILS(lw_combine_forward(gs, gx, gd, gwt, gbad, 3, 8), LW_ERR_RANGE,
                "row -4 at position 1");
    lw_device_free(gpu, gbad), lw_device_free(gpu, gd), lw_device_free(gpu, gx);
    lw_device_free(gpu, gwt);
}

int main(void) {
    const int skip_or_fail = cuda_open("test_cuda_model");
    if (skip_or_fail != 0) return skip_or_fail;
    test_linear();
    test_linear_tf32();
    test_linear_bf16();
    test_embedding();
    test_layernorm();
    test_gelu();
    test_attention();
    test_cross_entropy();
    test_cross_entropy_bf16();
    test_moe_router();
    test_moe_rows();
    return check_exit("test_cuda_model");
}
