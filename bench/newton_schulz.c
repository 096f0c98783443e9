/* newton_schulz.c: Newton-Schulz time on one thread for a list of Muon shapes: lwopt's
 * symmetric path (SYRK for X X^T and A A, SYMM for B X) against the same five steps done with
 * full GEMMs, and the GFLOP/s of each counted with full-GEMM FLOPs (4 m^2 n + 2 m^3 per step),
 * next to plain sgemm on an n x n x n product measured in the same run. Best of the repeats.
 * Usage: bench_newton_schulz [repeats] [--sgemm-threads N]   (make bench). With
 * --sgemm-threads it only prints sgemm's GFLOP/s on N threads (for bench/train_throughput.lua). */
#include "lw.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The machine is shared and noisy: variants are timed interleaved, and the best of the
 * repeats is kept (the least disturbed run). */
static double time_once(lw_muon *m, const float *u, float *x, int rows, int cols) {
    double t0 = now();
    if (lw_muon_orthogonalize(m, NULL, u, x, rows, cols) != LW_OK) return -1.0;
    return now() - t0;
}

static double sgemm_gflops(int n, int repeats) {
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n);
    float *c = malloc(sizeof(float) * n * n);
    for (int i = 0; i < n * n; i++) a[i] = b[i] = 1.0f / (float)(1 + i % 13);
    double best = 1e30;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
    for (int r = 0; r < repeats; r++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
        double t = now() - t0;
        if (t < best) best = t;
    }
    free(a), free(b), free(c);
    return 2.0 * n * n * (double)n / best / 1e9;
}

int main(int argc, char **argv) {
    int repeats = argc > 1 ? atoi(argv[1]) : 5;
    if (repeats < 1 || repeats > 32) repeats = 5;
    if (argc > 3 && strcmp(argv[2], "--sgemm-threads") == 0) {
        openblas_set_num_threads(atoi(argv[3]));
        printf("%.1f\n", sgemm_gflops(1024, repeats));
        return 0;
    }
    openblas_set_num_threads(1);
    const int shapes[][2] = {{256, 768}, {256, 1024}, {768, 768},
                             {768, 3072}, {1024, 1024}, {1024, 4096}};
    lw_muon_options o = lw_muon_defaults();
    lw_muon *sym, *full;
    if (lw_muon_new(&o, &sym) != LW_OK) return 1;
    o.symmetric = false;
    if (lw_muon_new(&o, &full) != LW_OK) return 1;
    printf("sgemm 1024^3, one thread: %.1f GFLOP/s\n\n", sgemm_gflops(1024, repeats));
    printf("| shape | full-GEMM FLOPs (5 steps) | full GEMMs ms | GFLOP/s | lwopt (SYRK/SYMM) ms "
           "| GFLOP/s equiv. | lwopt / full |\n|---|---|---|---|---|---|---|\n");
    double worst = 0;
    for (int s = 0; s < 6; s++) {
        int rows = shapes[s][0], cols = shapes[s][1];
        double m = rows < cols ? rows : cols, n = rows < cols ? cols : rows;
        double flops = 5 * (4 * m * m * n + 2 * m * m * m);
        float *u = malloc(sizeof(float) * rows * cols), *x = malloc(sizeof(float) * rows * cols);
        for (int i = 0; i < rows * cols; i++) u[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1;
        double tf = 1e30, ts = 1e30;
        time_once(full, u, x, rows, cols); /* warm-up: workspace, caches */
        time_once(sym, u, x, rows, cols);
        for (int r = 0; r < repeats; r++) {
            double a = time_once(full, u, x, rows, cols), b = time_once(sym, u, x, rows, cols);
            if (a < tf) tf = a;
            if (b < ts) ts = b;
        }
        if (ts / tf > worst) worst = ts / tf;
        printf("| %dx%d | %.2e | %.1f | %.1f | %.1f | %.1f | %.2f |\n", rows, cols, flops,
               1e3 * tf, flops / tf / 1e9, 1e3 * ts, flops / ts / 1e9, ts / tf);
        free(u), free(x);
    }
    printf("\nworst lwopt / full-GEMM time: %.2f (goal <= 0.85)\n", worst);
    lw_muon_free(sym);
    lw_muon_free(full);
    return 0;
}
