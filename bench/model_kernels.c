/* model_kernels.c: one transformer block's kernels on the CPU at the small preset's shapes (8
 * sequences of 128, 256 channels, 8 heads, MLP 1024), forward and backward, each timed alone
 * (best of the repeats: the machine is shared), with the GEMM FLOPs of the linears and of the
 * attention (over the causal half of each t x t square, what it must compute) per kernel, and the
 * block's forward + backward GFLOP/s against sgemm 1024^3 measured in the same run on the same
 * threads (OPENBLAS_NUM_THREADS: 1 for a rank per core, 2 for one process on the 2 cores).
 * Usage: bench_model_kernels [repeats]   (20 by default). To compare two builds interleaved,
 * run the same binary with LD_LIBRARY_PATH pointing at the other build's liblwopt. OpenBLAS's
 * idle threads spin as OPENBLAS_THREAD_TIMEOUT says, read when OpenBLAS loads (before main):
 * without it the binary restarts itself with 16, what the Lua front end sets (lwopt/C.lua). */
#include "lw.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define B  8
#define T  128
#define C  256
#define NH 8
#define N  (B * T)
#define H  (4 * C)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float *filled(int64_t n) {
    float *p = malloc(sizeof(float) * (size_t)n);
    uint64_t s = 0x9E3779B97F4A7C15u;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        p[i] = (float)((double)(s >> 40) / 16777216.0 - 0.5);
    }
    return p;
}

static int repeats = 20;
static double total; /* seconds of the pass being timed */

/* Times stmt alone, best of the repeats, and prints it with its GFLOP/s (flops 0: element-wise). */
#define TIME(name, flops, stmt)                                                                    \
    do {                                                                                           \
        double best = 1e30;                                                                        \
        for (int r_ = 0; r_ < repeats; r_++) {                                                     \
            double t0_ = now();                                                                    \
            if ((stmt) != LW_OK) {                                                                 \
                fprintf(stderr, "%s failed: %s\n", name, lw_last_error());                         \
                exit(1);                                                                           \
            }                                                                                      \
            double t_ = now() - t0_;                                                               \
            best = t_ < best ? t_ : best;                                                          \
        }                                                                                          \
        total += best;                                                                             \
        if ((flops) > 0)                                                                           \
            printf("| %s | %.3f | %.1f |\n", name, best * 1e3, (flops) / best / 1e9);              \
        else                                                                                       \
            printf("| %s | %.3f | |\n", name, best * 1e3);                                         \
    } while (0)

static double sgemm_gflops(void) {
    const int n = 1024;
    float *a = filled(n * n), *b = filled(n * n), *c = filled(n * n);
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c,
                    n);
        double t = now() - t0;
        best = t < best ? t : best;
    }
    free(a), free(b), free(c);
    return 2.0 * n * n * n / best / 1e9;
}

int main(int argc, char **argv) {
    if (getenv("OPENBLAS_THREAD_TIMEOUT") == NULL) {
        setenv("OPENBLAS_THREAD_TIMEOUT", "16", 1);
        execv("/proc/self/exe", argv);
        perror("bench_model_kernels: restarting with OPENBLAS_THREAD_TIMEOUT");
        return 1;
    }
    if (argc > 1) repeats = atoi(argv[1]) > 0 ? atoi(argv[1]) : repeats;
    float *x = filled(N * C), *ln = filled(N * C), *qkv = filled(N * 3 * C), *att = filled(N * C);
    float *h = filled(N * H), *a = filled(N * H), *y = filled(N * C), *mean = filled(N);
    float *rstd = filled(N), *lse = filled(B * NH * T), *g = filled(C), *dg = filled(C);
    float *wqkv = filled(3 * C * C), *wproj = filled(C * C), *wfc = filled(H * C);
    float *wmp = filled(C * H), *dw = filled(H * C), *dout = filled(N * C), *dx = filled(N * C);
    float *dh = filled(N * H), *da = filled(N * H), *dqkv = filled(N * 3 * C);
    float *scratch = filled(lw_attention_scratch_floats(NULL, B, T, C, NH, NH, 0));
    const double lin = 2.0 * N * C, attn = 4.0 * B * NH * (T * (T + 1) / 2.0) * (C / NH);

    printf("model kernels, one block: b %d, t %d, c %d, heads %d, OpenBLAS threads %d, "
           "OPENBLAS_THREAD_TIMEOUT %s\n\n",
           B, T, C, NH, openblas_get_num_threads(), getenv("OPENBLAS_THREAD_TIMEOUT"));
    printf("| kernel | ms | GFLOP/s |\n|---|---|---|\n");
    total = 0;
    TIME("ln_1 forward", 0,
         lw_layernorm_forward(NULL, ln, LW_DTYPE_F32, mean, rstd, x, g, NULL, N, C, 1e-5f));
    TIME("qkv forward", lin * 3 * C,
         lw_linear_forward(NULL, qkv, LW_DTYPE_F32, ln, LW_DTYPE_F32, wqkv, LW_DTYPE_F32, NULL, N,
                           C, 3 * C));
    TIME("attention forward", attn,
         lw_attention_forward(NULL, att, LW_DTYPE_F32, lse, NULL, scratch, qkv, LW_DTYPE_F32, B, T,
                              C, NH, NH, 0));
    TIME("proj forward", lin * C,
         lw_linear_forward(NULL, y, LW_DTYPE_F32, att, LW_DTYPE_F32, wproj, LW_DTYPE_F32, NULL, N,
                           C, C));
    TIME("residual add", 0, lw_vec_add(NULL, y, x, y, N * C));
    TIME("ln_2 forward", 0,
         lw_layernorm_forward(NULL, ln, LW_DTYPE_F32, mean, rstd, y, g, NULL, N, C, 1e-5f));
    TIME("fc forward", lin * H,
         lw_linear_forward(NULL, h, LW_DTYPE_F32, ln, LW_DTYPE_F32, wfc, LW_DTYPE_F32, NULL, N, C,
                           H));
    TIME("gelu forward", 0, lw_gelu_forward(NULL, a, LW_DTYPE_F32, h, LW_DTYPE_F32, N * H));
    TIME("mlp proj forward", lin * H,
         lw_linear_forward(NULL, y, LW_DTYPE_F32, a, LW_DTYPE_F32, wmp, LW_DTYPE_F32, NULL, N, H,
                           C));
    const double fwd = total;
    total = 0;
    TIME("mlp proj backward", 2 * lin * H,
         lw_linear_backward(NULL, da, dw, NULL, dout, LW_DTYPE_F32, a, LW_DTYPE_F32, wmp,
                            LW_DTYPE_F32, N, H, C));
    TIME("gelu backward", 0, lw_gelu_backward(NULL, dh, LW_DTYPE_F32, da, h, LW_DTYPE_F32, N * H));
    TIME("fc backward", 2 * lin * H,
         lw_linear_backward(NULL, dx, dw, NULL, dh, LW_DTYPE_F32, ln, LW_DTYPE_F32, wfc,
                            LW_DTYPE_F32, N, C, H));
    TIME("ln_2 backward", 0,
         lw_layernorm_backward(NULL, dx, dg, NULL, dout, y, g, mean, rstd, N, C));
    TIME("proj backward", 2 * lin * C,
         lw_linear_backward(NULL, dx, dw, NULL, dout, LW_DTYPE_F32, att, LW_DTYPE_F32, wproj,
                            LW_DTYPE_F32, N, C, C));
    TIME("attention backward", 2 * attn,
         lw_attention_backward(NULL, dqkv, LW_DTYPE_F32, scratch, dout, qkv, LW_DTYPE_F32, att,
                               LW_DTYPE_F32, lse, B, T, C, NH, NH, 0));
    TIME("qkv backward", 2 * lin * 3 * C,
         lw_linear_backward(NULL, dx, dw, NULL, dqkv, LW_DTYPE_F32, ln, LW_DTYPE_F32, wqkv,
                            LW_DTYPE_F32, N, C, 3 * C));
    TIME("ln_1 backward", 0,
         lw_layernorm_backward(NULL, dx, dg, NULL, dout, x, g, mean, rstd, N, C));
    const double bwd = total;
    /* the block's FLOPs counted as bench/train_throughput.lua counts the model's: 6 per
     * multiply-add of the linears, the attention GEMMs over the full t x t square */
    const double flops = 3.0 * lin * 12 * C + 3.0 * 4.0 * B * NH * T * T * (C / NH);
    const double sgemm = sgemm_gflops();
    printf("\nforward %.2f ms, backward %.2f ms; sgemm 1024^3 %.1f GFLOP/s\n", fwd * 1e3,
           bwd * 1e3, sgemm);
    printf("block forward + backward: %.1f GFLOP/s, %.0f%% of sgemm\n", flops / (fwd + bwd) / 1e9,
           100.0 * flops / (fwd + bwd) / 1e9 / sgemm);
    return 0;
}
