/* adamw.c: AdamW's memory bandwidth on the GPU: lw_adamw_update over n elements (default 100M)
 * reads w, g, m, v and writes w, m, v: 7 x 4 bytes per element; against lw_device_copy
 * (device to device) moving the same bytes (a copy of 14n bytes reads and writes them once
 * each), measured in the same run. Best of the repeats after a warm-up, stream synchronisation
 * around lw_now. Goal: AdamW at >= 80% of the copy's bandwidth.
 * Usage: bench_cuda_adamw [elements, default 100000000] [--repeats N] */
#include "common.h"

int main(int argc, char **argv) {
    int64_t n = 100000000;
    int repeats = 10;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) repeats = atoi(argv[++i]);
        else if (atoll(argv[i]) > 0) n = atoll(argv[i]);
        else {
            fprintf(stderr, "usage: %s [elements] [--repeats N]\n", argv[0]);
            return 2;
        }
    }
    if (repeats < 1) repeats = 1;
    bench_open("bench_cuda_adamw");
    float *w = bench_random(n, 1.0f, 1), *g = bench_random(n, 1.0f, 2);
    float *m = bench_random(n, 0.1f, 3), *v = NULL;
    bench_check(lw_device_alloc(bench_gpu, 4 * n, (void **)&v), "lw_device_alloc");
    const int64_t copy_bytes = 14 * n; /* read once and written once: 28n bytes moved */
    void *src = NULL, *dst = NULL;
    bench_check(lw_device_alloc(bench_gpu, copy_bytes, &src), "lw_device_alloc");
    bench_check(lw_device_alloc(bench_gpu, copy_bytes, &dst), "lw_device_alloc");
    lw_adamw_options o = lw_adamw_defaults();
    double best_adamw = 1e30, best_copy = 1e30;
    int64_t t = 1;
    /* warm-up, then interleaved so that clocks and neighbours treat both alike */
    bench_check(lw_adamw_update(bench_stream, &o, w, g, m, v, n, t++, 1e-4f, 0.1f, 1.0f), "adamw");
    bench_check(lw_device_copy(bench_stream, dst, src, copy_bytes, LW_COPY_DEVICE_TO_DEVICE),
                "copy");
    bench_check(lw_stream_synchronize(bench_stream), "sync");
    for (int r = 0; r < repeats; r++) {
        double t0 = lw_now();
        bench_check(lw_adamw_update(bench_stream, &o, w, g, m, v, n, t++, 1e-4f, 0.1f, 1.0f),
                    "lw_adamw_update");
        double a = bench_since(bench_stream, t0);
        t0 = lw_now();
        bench_check(lw_device_copy(bench_stream, dst, src, copy_bytes, LW_COPY_DEVICE_TO_DEVICE),
                    "lw_device_copy");
        double c = bench_since(bench_stream, t0);
        if (a < best_adamw) best_adamw = a;
        if (c < best_copy) best_copy = c;
    }
    const double bytes = 28.0 * (double)n;
    printf("| op | elements | bytes moved | ms | GB/s |\n|---|---|---|---|---|\n");
    printf("| lw_adamw_update | %lld | %.3e | %.3f | %.0f |\n", (long long)n, bytes,
           1e3 * best_adamw, bytes / best_adamw / 1e9);
    printf("| lw_device_copy (d2d, %lld bytes) | - | %.3e | %.3f | %.0f |\n",
           (long long)copy_bytes, bytes, 1e3 * best_copy, bytes / best_copy / 1e9);
    printf("\nAdamW / copy bandwidth: %.2f (goal >= 0.80); best of %d\n", best_copy / best_adamw,
           repeats);
    lw_device_free(bench_gpu, w), lw_device_free(bench_gpu, g), lw_device_free(bench_gpu, m);
    lw_device_free(bench_gpu, v), lw_device_free(bench_gpu, src), lw_device_free(bench_gpu, dst);
    return 0;
}
