/* attention.c: lwopt's causal attention per layer on the GPU, forward and forward + backward in
 * ms, through lw_attention_forward and lw_attention_backward (the backward's D = rowsum(dout *
 * out) included): under the bf16 matmul setting, the tensor-core kernels (src/cuda/
 * attention_mma.cu) on a bf16 qkv, out and dqkv, and at t 1024 under fp32 too, the fp32 kernels
 * (attention_fp32.cu) on fp32 tensors, at b 8 and c 768 as 12 heads of 64 (GPT-2 124M's layer)
 * and 6 heads of 128, t 1024, 2048, 4096. The same
 * shapes in PyTorch's scaled_dot_product_attention, bf16 and causal: bench/peers/
 * torch_attention.py; scripts/gpu_report.py puts the two side by side. TFLOP/s count the causal
 * half of the products: the forward's b nh t^2 hd multiply-adds (half of Q K^T's and of P V's)
 * at 2 flops each, the backward 2.5 times that, as FlashAttention counts (lwopt's backward
 * recomputes S and dP in both its passes: 3.5 times the forward's products, not 2.5). Each figure
 * is the best of the repeats of `calls` calls in a row after a warm-up, the stream synchronised
 * around them.
 * Each bf16 shape runs four times, side by side: the tensor-core kernels' synchronous staging
 * (LWOPT_ATTN_PIPELINE=0) and their pipelined one (=1, rows "lwopt bf16 pipelined"), each in the
 * grids' two block orders (LWOPT_ATTN_ORDER=heads, a head's tiles together, and =work,
 * tile-major: rows "(tensor cores, order work)"; bench/attention_schedule.c simulates why), the
 * variables set before each run and put back after.
 * Goal: forward + backward within 1.3x of torch SDPA's, <= 0.33 ms at b 8, 12 heads, t 1024,
 * head dim 64 on an H100.
 * Usage: bench_cuda_attention [--repeats N] [--calls N] */
#include "common.h"

typedef struct {
    int64_t b, t, c, nh;
} shape;

/* Best ms per call of the forward (backward false) or the forward and backward. */
static double best_ms(const shape *s, void *out, float *lse, float *scratch, float *dqkv,
                      const void *qkv, lw_dtype dtype, const float *dout, bool backward,
                      int repeats, int calls) {
    double best = 1e30;
    for (int r = -1; r < repeats; r++) { /* r = -1: the warm-up */
        const double t0 = lw_now();
        for (int i = 0; i < calls; i++) {
            bench_check(lw_attention_forward(bench_stream, out, dtype, lse, NULL, scratch, qkv,
                                             dtype, s->b, s->t, s->c, s->nh, s->nh, 0),
                        "lw_attention_forward");
            if (backward)
                bench_check(lw_attention_backward(bench_stream, dqkv, dtype, scratch, dout, qkv,
                                                  dtype, out, dtype, lse, s->b, s->t, s->c, s->nh,
                                                  s->nh, 0),
                            "lw_attention_backward");
        }
        const double ms = 1e3 * bench_since(bench_stream, t0) / calls;
        if (r >= 0 && ms < best) best = ms;
    }
    return best;
}

int main(int argc, char **argv) {
    int repeats = 5, calls = 10;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) repeats = atoi(argv[++i]);
        else if (strcmp(argv[i], "--calls") == 0 && i + 1 < argc) calls = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--repeats N] [--calls N]\n", argv[0]);
            return 2;
        }
    }
    if (repeats < 1) repeats = 1;
    if (calls < 1) calls = 1;
    bench_open("bench_cuda_attention");
    const shape shapes[] = {{8, 1024, 768, 12}, {8, 1024, 768, 6}, {8, 2048, 768, 12},
                            {8, 2048, 768, 6},  {8, 4096, 768, 12}, {8, 4096, 768, 6}};
    const int64_t most = 8 * 4096 * 768; /* the largest b t c */
    float *qkv = bench_random(3 * most, 1.0f, 1), *dout = bench_random(most, 1.0f, 2);
    float *dqkv = bench_random(3 * most, 0.0f, 3), *out = NULL, *lse = NULL, *scratch = NULL;
    uint16_t *qkv16 = NULL; /* the model's bf16 qkv (a bf16 GEMM's output) */
    bench_check(lw_device_alloc(bench_gpu, 2 * 3 * most, (void **)&qkv16), "lw_device_alloc");
    bench_check(lw_vec_to_bf16(bench_stream, qkv16, qkv, 3 * most), "lw_vec_to_bf16");
    bench_check(lw_device_alloc(bench_gpu, 4 * most, (void **)&out), "lw_device_alloc");
    bench_check(lw_device_alloc(bench_gpu, 4 * 8 * 12 * 4096, (void **)&lse), "lw_device_alloc");
    /* the largest shape's scratch (D, and dout's bf16 copy for the pipelined backward) */
    int64_t scratch_floats = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int64_t n = lw_attention_scratch_floats(bench_stream, shapes[i].b, shapes[i].t,
                                                      shapes[i].c, shapes[i].nh, shapes[i].nh, 0);
        scratch_floats = n > scratch_floats ? n : scratch_floats;
    }
    bench_check(lw_device_alloc(bench_gpu, 4 * scratch_floats, (void **)&scratch),
                "lw_device_alloc");
    static const char *vars[2] = {"LWOPT_ATTN_PIPELINE", "LWOPT_ATTN_ORDER"};
    char *saved[2];
    for (int v = 0; v < 2; v++)
        saved[v] = getenv(vars[v]) != NULL ? strdup(getenv(vars[v])) : NULL;
    /* a shape's runs: the row's kernels, the matmul setting, the two variables */
    static const struct {
        const char *kernels;
        lw_matmul matmul;
        const char *pipeline, *order;
    } runs[] = {
        {"bf16 (tensor cores)", LW_MATMUL_BF16, "0", "heads"},
        {"bf16 pipelined (tensor cores)", LW_MATMUL_BF16, "1", "heads"},
        {"bf16 (tensor cores, order work)", LW_MATMUL_BF16, "0", "work"},
        {"bf16 pipelined (tensor cores, order work)", LW_MATMUL_BF16, "1", "work"},
        {"fp32", LW_MATMUL_FP32, "0", "heads"}, /* at t 1024 alone: ms a call */
    };
    const int bf16_runs = 4;
    printf("| attention shape | kernels | fwd ms | fwd+bwd ms | fwd TFLOP/s | fwd+bwd TFLOP/s |\n"
           "|---|---|---|---|---|---|\n");
    double goal[4] = {0, 0, 0, 0}; /* the bf16 runs' at the first shape */
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape *s = &shapes[i];
        const int64_t hd = s->c / s->nh;
        const double flops = 2.0 * (double)(s->b * s->nh) * (double)(s->t * s->t) * (double)hd;
        for (int p = 0; p < (s->t == 1024 ? bf16_runs + 1 : bf16_runs); p++) {
            const bool bf16 = p < bf16_runs;
            bench_check(lw_device_set_matmul(bench_gpu, runs[p].matmul), "lw_device_set_matmul");
            setenv(vars[0], runs[p].pipeline, 1), setenv(vars[1], runs[p].order, 1);
            const int n = bf16 ? calls : 1; /* the fp32 kernels take ms a call */
            /* bf16: qkv and out in bf16, as the model keeps them (and SDPA is given) */
            const void *q = bf16 ? (const void *)qkv16 : (const void *)qkv;
            const lw_dtype dt = bf16 ? LW_DTYPE_BF16 : LW_DTYPE_F32;
            const double f = best_ms(s, out, lse, scratch, dqkv, q, dt, dout, false, repeats, n);
            const double fb = best_ms(s, out, lse, scratch, dqkv, q, dt, dout, true, repeats, n);
            printf("| attention b %lld, nh %lld, t %lld, hd %lld | lwopt %s | %.3f | %.3f | %.1f | "
                   "%.1f |\n",
                   (long long)s->b, (long long)s->nh, (long long)s->t, (long long)hd,
                   runs[p].kernels, f, fb, flops / f / 1e9, 3.5 * flops / fb / 1e9);
            fflush(stdout);
            if (bf16 && i == 0) goal[p] = fb;
        }
    }
    bench_check(lw_device_set_matmul(bench_gpu, LW_MATMUL_FP32), "lw_device_set_matmul");
    for (int v = 0; v < 2; v++) {
        if (saved[v] != NULL)
            setenv(vars[v], saved[v], 1);
        else
            unsetenv(vars[v]);
        free(saved[v]);
    }
    printf("\nb 8, 12 heads, t 1024, head dim 64: forward + backward %.3f ms a layer in bf16 "
           "(goal <= 0.33 ms: 1.3x torch SDPA's ~0.25 ms on an H100); best of %d x %d calls\n",
           goal[0], repeats, calls);
    printf("the same, pipelined staging (LWOPT_ATTN_PIPELINE=1): %.3f ms, %.2f of the "
           "synchronous; tile-major grids (LWOPT_ATTN_ORDER=work): %.3f ms, %.2f; both: %.3f ms, "
           "%.2f\n",
           goal[1], goal[1] / goal[0], goal[2], goal[2] / goal[0], goal[3], goal[3] / goal[0]);
    lw_device_free(bench_gpu, qkv), lw_device_free(bench_gpu, dout);
    lw_device_free(bench_gpu, dqkv), lw_device_free(bench_gpu, out);
    lw_device_free(bench_gpu, lse), lw_device_free(bench_gpu, scratch);
    lw_device_free(bench_gpu, qkv16);
    return 0;
}
