/* newton_schulz.c: Newton-Schulz on the GPU (lw_muon_orthogonalize: 5 steps of Keller Jordan's
 * quintic (3.4445, -4.7750, 2.0315), bf16 unless told) for the Muon shapes of GPT-2 124M, GPT-2
 * 1.5B and LLaMA-8B, against cuBLAS's bf16 GEMM (cublasGemmEx, bf16 in and out, fp32 compute)
 * of p x q x p measured in the same run; then the same shapes batched, as the optimizer batches
 * a rank's same-shaped matrices (one Muon-only optimizer step over `batch` of them on GPU
 * buffers). TFLOP/s count full-GEMM FLOPs: per step 2 p^2 q (X X^T) + 2 p^3 (A A) + 2 p^2 q (B X),
 * p = min, q = max of the shape. Times: best of the repeats after a warm-up, each a stream
 * synchronisation around lw_now. The table's columns are bench/peers/torch_newton_schulz.py's.
 * Usage: bench_cuda_newton_schulz [bf16|tf32|fp32] [--repeats N] [--batch B] [--no-batched] */
#include "common.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

typedef struct shape {
    const char *model;
    int64_t rows, cols;
} shape;

static const shape SHAPES[] = {
    {"GPT-2 124M", 768, 768},    {"GPT-2 124M", 768, 2304},   {"GPT-2 124M", 768, 3072},
    {"GPT-2 124M", 3072, 768},   {"GPT-2 1.5B", 1600, 1600},  {"GPT-2 1.5B", 1600, 4800},
    {"GPT-2 1.5B", 1600, 6400},  {"GPT-2 1.5B", 6400, 1600},  {"LLaMA-8B", 4096, 4096},
    {"LLaMA-8B", 4096, 1024},    {"LLaMA-8B", 4096, 14336},   {"LLaMA-8B", 14336, 4096},
};
enum { N_SHAPES = sizeof SHAPES / sizeof SHAPES[0], STEPS = 5 };

static double ns_flops(int64_t rows, int64_t cols) {
    const double p = (double)(rows < cols ? rows : cols), q = (double)(rows < cols ? cols : rows);
    return STEPS * (4.0 * p * p * q + 2.0 * p * p * p);
}

/* Waits for the work fn issued: lwopt's stream (s), or the whole device (cuBLAS runs on the
 * CUDA default stream, which lw.h does not name). */
static void wait_for(lw_stream *s) {
    if (s != NULL) {
        bench_check(lw_stream_synchronize(s), "lw_stream_synchronize");
    } else if (cudaDeviceSynchronize() != cudaSuccess) {
        fprintf(stderr, "cudaDeviceSynchronize failed\n");
        exit(1);
    }
}

/* Best seconds per call of `calls` back-to-back calls of fn, over `repeats` rounds. */
typedef void (*bench_fn)(void *ctx);
static double best_of(bench_fn fn, void *ctx, lw_stream *s, int repeats, int calls) {
    fn(ctx), fn(ctx); /* warm-up: workspaces, cuBLAS heuristics, clocks */
    wait_for(s);
    double best = 1e30;
    for (int r = 0; r < repeats; r++) {
        double t0 = lw_now();
        for (int c = 0; c < calls; c++)
            fn(ctx);
        wait_for(s);
        double t = (lw_now() - t0) / calls;
        if (t < best) best = t;
    }
    return best;
}

typedef struct ns_ctx {
    lw_muon *muon;
    float *u, *x;
    int64_t rows, cols;
} ns_ctx;

static void run_ns(void *p) {
    ns_ctx *c = p;
    bench_check(lw_muon_orthogonalize(c->muon, bench_stream, c->u, c->x, c->rows, c->cols),
                "lw_muon_orthogonalize");
}

typedef struct gemm_ctx {
    cublasHandle_t h;
    const void *a; /* bf16 */
    void *c;       /* bf16 */
    int p, q;
} gemm_ctx;

/* C (p x p) = A^T A with A q x p column-major: the p x q x p product of X X^T. */
static void run_gemm(void *p) {
    gemm_ctx *g = p;
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st = cublasGemmEx(g->h, CUBLAS_OP_T, CUBLAS_OP_N, g->p, g->p, g->q, &one, g->a,
                                     CUDA_R_16BF, g->q, g->a, CUDA_R_16BF, g->q, &zero, g->c,
                                     CUDA_R_16BF, g->p, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cublasGemmEx %dx%dx%d: %s\n", g->p, g->q, g->p, cublasGetStatusString(st));
        exit(1);
    }
}

/* cuBLAS's TFLOP/s for the bf16 p x q x p GEMM, on the CUDA default stream. */
static double gemm_tflops(cublasHandle_t h, lw_stream *s, int64_t rows, int64_t cols,
                          int repeats) {
    const int p = (int)(rows < cols ? rows : cols), q = (int)(rows < cols ? cols : rows);
    gemm_ctx g = {h, NULL, NULL, p, q};
    void *a = NULL, *c = NULL;
    bench_check(lw_device_alloc(bench_gpu, 2 * (int64_t)p * q, &a), "lw_device_alloc");
    bench_check(lw_device_alloc(bench_gpu, 2 * (int64_t)p * p, &c), "lw_device_alloc");
    /* every byte 0x3c: bf16 0x3c3c = 0.0115, finite sums of products, no denormals */
    bench_check(lw_device_set(s, a, 0x3c, 2 * (int64_t)p * q), "lw_device_set");
    wait_for(s);
    g.a = a, g.c = c;
    double t = best_of(run_gemm, &g, NULL, repeats, 10);
    lw_device_free(bench_gpu, a), lw_device_free(bench_gpu, c);
    return 2.0 * p * (double)p * q / t / 1e12;
}

typedef struct step_ctx {
    lw_optimizer *opt;
} step_ctx;

static void run_step(void *p) {
    lw_step_result r;
    bench_check(lw_optimizer_step(((step_ctx *)p)->opt, &r), "lw_optimizer_step");
}

/* One Muon-only optimizer step over `batch` rows x cols matrices on GPU buffers: the batched
 * Newton-Schulz plus the momentum, norm and apply passes around it. */
static double batched_step(lw_comm *dc, lw_ns_precision precision, int64_t rows, int64_t cols,
                           int batch, int repeats) {
    lw_param_spec *specs = calloc((size_t)batch, sizeof *specs);
    char (*names)[16] = calloc((size_t)batch, 16);
    for (int i = 0; i < batch; i++) {
        snprintf(names[i], 16, "m%d", i);
        specs[i] = (lw_param_spec){.name = names[i], .ndim = 2, .shape = {rows, cols, 0, 0},
                                   .dtype = LW_DTYPE_F32, .grad_dtype = LW_DTYPE_F32,
                                   .optimizer = LW_OPTIMIZER_MUON};
    }
    lw_optimizer_options oo = lw_optimizer_defaults();
    oo.muon.coeffs = LW_NS_SIMPLE;
    oo.muon.precision = precision;
    bench_optimizer o = bench_optimizer_new(dc, specs, batch, &oo);
    lw_stream *s = lw_device_stream(bench_gpu);
    for (int i = 0; i < batch; i++) { /* gradients once: every step reuses them */
        float *g = NULL, *src = bench_random(rows * cols, 1.0f, 7 + (uint64_t)i);
        bench_check(lw_buffers_grad(o.buffers, i, &g), "lw_buffers_grad");
        bench_check(lw_device_copy(s, g, src, 4 * rows * cols, LW_COPY_DEVICE_TO_DEVICE), "copy");
        bench_check(lw_stream_synchronize(s), "sync");
        lw_device_free(bench_gpu, src);
    }
    step_ctx c = {o.opt};
    double t = best_of(run_step, &c, s, repeats, 1);
    bench_optimizer_free(&o);
    free(specs), free(names);
    return t;
}

int main(int argc, char **argv) {
    lw_ns_precision precision = LW_NS_BF16;
    int repeats = 5, batch = 4;
    bool batched = true;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) repeats = atoi(argv[++i]);
        else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) batch = atoi(argv[++i]);
        else if (strcmp(argv[i], "--no-batched") == 0) batched = false;
        else if (lw_ns_precision_from_name(argv[i], &precision) != LW_OK) {
            fprintf(stderr, "usage: %s [bf16|tf32|fp32] [--repeats N] [--batch B] "
                            "[--no-batched]\n", argv[0]);
            return 2;
        }
    }
    if (repeats < 1) repeats = 1;
    if (batch < 1) batch = 1;
    bench_open("bench_cuda_newton_schulz");
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cublasCreate failed\n");
        return 1;
    }
    lw_muon_options o = lw_muon_defaults();
    o.coeffs = LW_NS_SIMPLE; /* the reference's coefficients: the same math as the torch peer */
    o.precision = precision;
    lw_muon *muon = NULL;
    bench_check(lw_muon_new(&o, &muon), "lw_muon_new");
    printf("Newton-Schulz, %d quintic steps, %s; best of %d; TFLOP/s in full-GEMM FLOPs; ratio: "
           "against the cuBLAS bf16 GEMM (p x q x p) of the same run (goal >= 0.70)\n\n",
           STEPS, lw_ns_precision_name(precision), repeats);
    printf("| model | shape | batch | impl | precision | ms | TFLOP/s | cuBLAS bf16 GEMM TFLOP/s "
           "| ratio |\n|---|---|---|---|---|---|---|---|---|\n");
    double gemm[N_SHAPES], worst = 1e30;
    for (int k = 0; k < N_SHAPES; k++) {
        const shape *sh = &SHAPES[k];
        gemm[k] = gemm_tflops(h, bench_stream, sh->rows, sh->cols, repeats);
        ns_ctx c = {muon, bench_random(sh->rows * sh->cols, 1.0f, 11 + (uint64_t)k), NULL,
                    sh->rows, sh->cols};
        bench_check(lw_device_alloc(bench_gpu, 4 * sh->rows * sh->cols, (void **)&c.x), "alloc");
        double t = best_of(run_ns, &c, bench_stream, repeats, 3);
        double tf = ns_flops(sh->rows, sh->cols) / t / 1e12;
        if (tf / gemm[k] < worst) worst = tf / gemm[k];
        printf("| %s | %lldx%lld | 1 | lwopt | %s | %.3f | %.1f | %.1f | %.2f |\n", sh->model,
               (long long)sh->rows, (long long)sh->cols, lw_ns_precision_name(precision), 1e3 * t,
               tf, gemm[k], tf / gemm[k]);
        fflush(stdout);
        lw_device_free(bench_gpu, c.u), lw_device_free(bench_gpu, c.x);
    }
    printf("\nworst ratio %.2f (goal >= 0.70)\n", worst);
    if (batched) {
        lw_comm *self = NULL, *dc = bench_gpu_comm(&self);
        printf("\nbatched: one Muon-only optimizer step over %d matrices of a shape (momentum, "
               "norm and apply included; TFLOP/s count Newton-Schulz only)\n\n", batch);
        printf("| model | shape | batch | impl | precision | ms | TFLOP/s | cuBLAS bf16 GEMM "
               "TFLOP/s | ratio |\n|---|---|---|---|---|---|---|---|---|\n");
        for (int k = 0; k < N_SHAPES; k++) {
            const shape *sh = &SHAPES[k];
            double t = batched_step(dc, precision, sh->rows, sh->cols, batch, repeats);
            double tf = batch * ns_flops(sh->rows, sh->cols) / t / 1e12;
            printf("| %s | %lldx%lld | %d | lwopt step | %s | %.3f | %.1f | %.1f | %.2f |\n",
                   sh->model, (long long)sh->rows, (long long)sh->cols, batch,
                   lw_ns_precision_name(precision), 1e3 * t, tf, gemm[k], tf / gemm[k]);
            fflush(stdout);
        }
        lw_comm_free(dc);
        lw_comm_free(self);
    }
    lw_muon_free(muon);
    cublasDestroy(h);
    return 0;
}
