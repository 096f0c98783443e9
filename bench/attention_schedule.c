/* attention_schedule.c: the GPU's block scheduler simulated on the CPU for the tensor-core
 * attention's three kernels (src/cuda/attention_mma.cu), to compare the grids' two block orders
 * (mma_layout.h's lwc_fa_block: "heads", a head's tiles together, and "work", tile-major) before
 * a GPU times them (bench/cuda/attention.c). Greedy, as a GPU hands out a 1-D grid: blocks in
 * grid order, each to the slot (SMs x blocks per SM) that frees first, lowest first on a tie,
 * taking as long as the steps it runs (lwc_fa_steps; a dk/dv block once per query head of its
 * group), plus --overhead steps (its staging and stores). Prints each kernel's makespan in steps
 * under either order and the bound no order beats: the larger of the work over the slots and the
 * longest block. It models no memory: the L2 reuse "work" gives up is not in it.
 * Usage: bench_attention_schedule [--sms N] [--overhead S] [--pipelined]
 * (--pipelined: the pipelined staging's shared memory and registers, LWOPT_ATTN_PIPELINE=1) */
#include "cuda/mma_layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Registers a thread of each kernel (ptxas -v, sm_90, CUDA 13: the largest over the qkv and
 * output types), which with its shared memory sets the blocks an SM holds:
 * [variant: synchronous, pipelined][kernel: forward, dk/dv, dq][head dim 64, 128]. */
static const int registers[2][3][2] = {{{168, 255}, {232, 246}, {168, 248}},
                                       {{160, 239}, {243, 242}, {168, 250}}};

/* An H100's or H200's SM (compute capability 9.0): 64 Ki registers, allocated 256 a warp (8 a
 * thread); 228 KiB of shared memory, 1 KiB of it reserved per block; 2048 threads; 32 blocks. */
static int blocks_per_sm(int kernel, int hd, int variant) {
    const int per_thread = (registers[variant][kernel][hd == 128] + 7) / 8 * 8;
    int n = 65536 / (per_thread * LWC_FA_THREADS);
    const int smem = (int)lwc_fa_smem_bytes(hd, kernel, variant) + 1024;
    if (228 * 1024 / smem < n) n = 228 * 1024 / smem;
    if (2048 / LWC_FA_THREADS < n) n = 2048 / LWC_FA_THREADS;
    return n < 32 ? n : 32;
}

typedef struct {
    int64_t b, t, nh, hd;
    int window;
} shape;

typedef struct {
    int64_t blocks, slots;
    double makespan[2], bound; /* [order] */
} schedule;

static schedule simulate(const shape *s, int kernel, int variant, int sms, double overhead) {
    const int tiles = lwc_fa_tiles(s->t, LWC_FA_BLOCK);
    const int64_t pairs = s->b * s->nh; /* nkv = nh: one query head per KV head */
    schedule r = {
        pairs * tiles, (int64_t)sms * blocks_per_sm(kernel, (int)s->hd, variant), {0, 0}, 0};
    double *free_at = malloc(sizeof(double) * (size_t)r.slots), total = 0, longest = 0;
    for (int order = LWC_FA_ORDER_HEADS; order <= LWC_FA_ORDER_WORK; order++) {
        for (int64_t i = 0; i < r.slots; i++)
            free_at[i] = 0;
        for (int64_t block = 0; block < r.blocks; block++) {
            int bh, tile;
            lwc_fa_block(block, tiles, pairs, kernel, order, &bh, &tile);
            const double took = lwc_fa_steps(kernel, tile, s->t, (int)s->hd, s->window) + overhead;
            int64_t first = 0;
            for (int64_t i = 1; i < r.slots; i++)
                if (free_at[i] < free_at[first]) first = i;
            free_at[first] += took;
            if (free_at[first] > r.makespan[order]) r.makespan[order] = free_at[first];
            if (order == LWC_FA_ORDER_HEADS)
                total += took, longest = took > longest ? took : longest;
        }
    }
    r.bound = total / (double)r.slots > longest ? total / (double)r.slots : longest;
    free(free_at);
    return r;
}

int main(int argc, char **argv) {
    int sms = 132; /* an H100 SXM's or an H200's */
    double overhead = 0;
    int variant = LWC_FA_SYNC;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--pipelined") == 0) {
            variant = LWC_FA_PIPELINED;
        } else if (strcmp(argv[i], "--sms") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0) {
            sms = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--overhead") == 0 && i + 1 < argc && atof(argv[i + 1]) >= 0) {
            overhead = atof(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--sms N] [--overhead S] [--pipelined] (N > 0, S >= 0)\n",
                    argv[0]);
            return 2;
        }
    }
    /* GPT-2's layer (b 8, c 768) as 12 heads of 64 and 6 of 128, and a window of 1024 keys */
    static const shape shapes[] = {
        {8, 1024, 12, 64, 0}, {8, 1024, 6, 128, 0}, {8, 2048, 12, 64, 0},   {8, 2048, 6, 128, 0},
        {8, 4096, 12, 64, 0}, {8, 4096, 6, 128, 0}, {8, 4096, 12, 64, 1024}};
    static const char *names[] = {"forward", "dk/dv", "dq"};
    printf("attention_schedule: %d SMs, blocks of %d threads, %s staging; a block takes its steps "
           "+ %g; simulated, not measured\n",
           sms, LWC_FA_THREADS, variant == LWC_FA_PIPELINED ? "pipelined" : "synchronous",
           overhead);
    printf("| shape | kernel | blocks | slots | heads | work | work / heads | bound |\n"
           "|---|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int kernel = LWC_FA_FORWARD; kernel <= LWC_FA_DQ; kernel++) {
            const shape *s = &shapes[i];
            const schedule r = simulate(s, kernel, variant, sms, overhead);
            char window[32] = "";
            if (s->window > 0) snprintf(window, sizeof window, ", window %d", s->window);
            printf("| b %lld, nh %lld, t %lld, hd %lld%s | %s | %lld | %lld (%d an SM) | %g | %g "
                   "| %.3f | %.1f |\n",
                   (long long)s->b, (long long)s->nh, (long long)s->t, (long long)s->hd, window,
                   names[kernel], (long long)r.blocks, (long long)r.slots,
                   blocks_per_sm(kernel, (int)s->hd, variant), r.makespan[0], r.makespan[1],
                   r.makespan[1] / r.makespan[0], r.bound);
        }
    return 0;
}
