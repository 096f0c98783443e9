/* harness_cuda.c: what lwopt's CUDA device adds to test_kernels' contract, run once the list's
 * kernels have run on a GPU: the shapes it refuses with a clear error, and the tensor-core
 * attention's variants (environment variables read per launch) giving the default's bits. Its
 * checks count through harness.h's EXPECT_ macros. */
#include "harness.h"

/* The GPU and its stream; host <-> device copies for the checks below (stream-ordered, the
 * download synchronised). */
static lw_device *gpu;
static lw_stream *gs;

static void *upload(const void *host, int64_t bytes) {
    void *d = NULL;
    EXPECT_OK(lw_device_alloc(gpu, bytes, &d));
    if (d != NULL) EXPECT_OK(lw_device_copy(gs, d, host, bytes, LW_COPY_HOST_TO_DEVICE));
    return d;
}

static void download(void *host, const void *dev, int64_t bytes) {
    EXPECT_OK(lw_stream_synchronize(gs));
    EXPECT_OK(lw_device_copy(gs, host, dev, bytes, LW_COPY_DEVICE_TO_HOST));
}

/* ---- what lwopt's CUDA device adds to the contract ------------------------------------------- *
 * Besides its scratch sizes (checked with the cases), the shapes it refuses with a clear error
 * rather than a wrong answer: a head dim past its kernels' largest (128), a negative row in a
 * scatter-add (its sort would misplace it; the CPU trusts rows to lie in the array). */

static void cuda_contract(void) {
    float *q = NULL, *o = NULL, *l = NULL, *sc = NULL;
    EXPECT_OK(lw_device_alloc(gpu, 4 * 4 * 3 * 512, (void **)&q));
    EXPECT_OK(lw_device_alloc(gpu, 4 * 4 * 512, (void **)&o));
    EXPECT_OK(lw_device_alloc(gpu, 4 * 2 * 4, (void **)&l));
    EXPECT_OK(lw_device_alloc(gpu, 4 * 2 * 4, (void **)&sc));
    EXPECT_FAILS(
        lw_attention_forward(gs, o, LW_DTYPE_F32, l, NULL, sc, q, LW_DTYPE_F32, 1, 4, 512, 2, 2, 0),
        LW_ERR_UNSUPPORTED, "head dim 256");
    EXPECT_FAILS(lw_attention_backward(gs, q, LW_DTYPE_F32, sc, o, q, LW_DTYPE_F32, o, LW_DTYPE_F32,
                                       l, 1, 4, 512, 2, 2, 0),
                 LW_ERR_UNSUPPORTED, "head dim 256");
    const int32_t bad[3] = {1, -4, 2};
    int32_t *rows = NULL;
    EXPECT_OK(lw_device_alloc(gpu, sizeof bad, (void **)&rows));
    EXPECT_OK(lw_device_copy(gs, rows, bad, sizeof bad, LW_COPY_HOST_TO_DEVICE));
    EXPECT_FAILS(lw_gather_backward(gs, q, o, rows, 3, 8), LW_ERR_RANGE, "row -4 at position 1");
    EXPECT_FAILS(lw_combine_forward(gs, q, o, l, rows, 3, 8), LW_ERR_RANGE, "row -4 at position 1");
    lw_device_free(gpu, q), lw_device_free(gpu, o), lw_device_free(gpu, l);
    lw_device_free(gpu, sc), lw_device_free(gpu, rows);
}

/* The tensor-core attention's variables, read at each launch: under `name`, `variant` gives
 * `base`'s out, lse, heads' maxima and dqkv bit for bit (a bf16 qkv, head dims 64 and 128,
 * grouped, windowed, t not a multiple of a tile), and `bad` is refused, named; the variable is
 * put back after. LWOPT_ATTN_PIPELINE=1 stages a step ahead by cp.async, dO from the row dots'
 * bf16 copy; LWOPT_ATTN_ORDER=work orders the grids' blocks tile-major: the same blocks, each
 * computing what it did. */
static void cuda_attention_variable(const char *name, const char *base, const char *variant,
                                    const char *bad) {
    const char *was = getenv(name);
    char *saved = was != NULL ? strdup(was) : NULL;
    char refused[64];
    snprintf(refused, sizeof refused, "%s is \"%s\"", name, bad);
    const struct {
        int64_t b, t, c, nh, nkv, window;
    } shapes[] = {{2, 200, 256, 4, 2, 0}, {1, 130, 256, 2, 1, 50}};
    EXPECT_OK(lw_device_set_matmul(gpu, LW_MATMUL_BF16));
    bool same = true;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int64_t b = shapes[i].b, t = shapes[i].t, c = shapes[i].c, nh = shapes[i].nh;
        const int64_t nkv = shapes[i].nkv, window = shapes[i].window, hd = c / nh;
        const int64_t nq = b * t * (c + 2 * nkv * hd), no = b * t * c, nl = b * nh * t;
        const int64_t n[4] = {no, nl, nh, nq}; /* out, lse, head_max, dqkv */
        float *qkv = random_floats(nq), *dout = random_floats(no), *zeros = calloc((size_t)nq, 4);
        uint16_t *q16 = malloc(sizeof(uint16_t) * (size_t)nq);
        for (int64_t j = 0; j < nq; j++)
            q16[j] = bf16_reference(qkv[j]);
        void *dq16 = upload(q16, 2 * nq), *ddout = upload(dout, 4 * no);
        float *dev[4], *host[2][4], *scratch = NULL;
        for (int j = 0; j < 4; j++)
            EXPECT_OK(lw_device_alloc(gpu, 4 * n[j], (void **)&dev[j]));
        EXPECT_OK(lw_device_alloc(
            gpu, 4 * lw_attention_scratch_floats(gs, b, t, c, nh, nkv, window), (void **)&scratch));
        for (int v = 0; v < 2; v++) {
            setenv(name, v == 0 ? base : variant, 1);
            EXPECT_OK(lw_device_copy(gs, dev[3], zeros, 4 * nq, LW_COPY_HOST_TO_DEVICE));
            EXPECT_OK(lw_attention_forward(gs, dev[0], LW_DTYPE_F32, dev[1], dev[2], scratch, dq16,
                                           LW_DTYPE_BF16, b, t, c, nh, nkv, window));
            EXPECT_OK(lw_attention_backward(gs, dev[3], LW_DTYPE_F32, scratch, ddout, dq16,
                                            LW_DTYPE_BF16, dev[0], LW_DTYPE_F32, dev[1], b, t, c,
                                            nh, nkv, window));
            for (int j = 0; j < 4; j++) {
                host[v][j] = malloc(4 * (size_t)n[j]);
                download(host[v][j], dev[j], 4 * n[j]);
            }
        }
        setenv(name, bad, 1);
        EXPECT_FAILS(lw_attention_forward(gs, dev[0], LW_DTYPE_F32, dev[1], NULL, scratch, dq16,
                                          LW_DTYPE_BF16, b, t, c, nh, nkv, window),
                     LW_ERR_INVALID, refused);
        for (int j = 0; j < 4; j++) {
            same = same && memcmp(host[0][j], host[1][j], 4 * (size_t)n[j]) == 0;
            free(host[0][j]), free(host[1][j]), lw_device_free(gpu, dev[j]);
        }
        lw_device_free(gpu, scratch), lw_device_free(gpu, dq16), lw_device_free(gpu, ddout);
        free(qkv), free(dout), free(zeros), free(q16);
    }
    EXPECT(same);
    printf("test_kernels: %s=%s %s =%s's attention bit for bit (bf16 qkv, head dims 64, 128); "
           "=%s refused\n",
           name, variant, same ? "gives" : "DOES NOT give", base, bad);
    if (saved != NULL)
        setenv(name, saved, 1);
    else
        unsetenv(name);
    free(saved);
    EXPECT_OK(lw_device_set_matmul(gpu, LW_MATMUL_FP32));
}

void cuda_device_contract(void) {
    gpu = other_device(), gs = other_stream();
    cuda_contract();
    cuda_attention_variable("LWOPT_ATTN_PIPELINE", "0", "1", "2");
    cuda_attention_variable("LWOPT_ATTN_ORDER", "heads", "work", "diagonal");
}
