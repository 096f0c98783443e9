/* optimizer_step.c: one Muon + AdamW optimizer step on the GPU for the share of GPT-2 1.5B
 * (48 layers x 1600, vocabulary 50257, 1024 positions, tied embedding) that rank 0 of dp 8 holds:
 * the Muon matrices the cost layout at dp 8 gives rank 0 (lw_layout_place owner 0), and an
 * eighth of every AdamW parameter (distopt's element-wise share), as fp32 buffers on one GPU
 * with gradients given. Reported: the whole step (stream synchronised), lw_step_result's
 * breakdown of it (host clocks around work that is partly asynchronous: the norm ends in a
 * device-to-host copy, so grad sync + norm are real, while Muon and AdamW are what was issued
 * before the final synchronisation), and the two halves alone, each a synchronised step of its
 * own over only the Muon or only the AdamW share (their norm subtracted). Best of the repeats.
 * Usage: bench_cuda_optimizer_step [bf16|tf32|fp32] [--repeats N] */
#include "common.h"

enum { N_LAYER = 48, N_EMBD = 1600, VOCAB = 50257, N_CTX = 1024, DP = 8 };

typedef struct spec_list {
    lw_param_spec *specs;
    int n;
} spec_list;

static void add(spec_list *l, const char *name, int64_t rows, int64_t cols, bool muon) {
    lw_param_spec *s = &l->specs[l->n++];
    memset(s, 0, sizeof *s);
    s->name = strdup(name);
    s->ndim = cols > 0 ? 2 : 1;
    s->shape[0] = rows;
    s->shape[1] = cols;
    s->optimizer = muon ? LW_OPTIMIZER_MUON : LW_OPTIMIZER_ADAMW;
}

/* GPT-2 1.5B's parameters: matrices of the blocks to Muon, embeddings and vectors to AdamW. */
static spec_list gpt2_xl(void) {
    spec_list l = {calloc(16 * N_LAYER + 8, sizeof(lw_param_spec)), 0};
    char name[64];
    add(&l, "wte", VOCAB, N_EMBD, false);
    l.specs[0].shared_embedding = true;
    add(&l, "wpe", N_CTX, N_EMBD, false);
    for (int i = 0; i < N_LAYER; i++) {
        const struct {
            const char *what;
            int64_t rows, cols;
        } p[] = {{"ln_1.weight", N_EMBD, 0},           {"ln_1.bias", N_EMBD, 0},
                 {"attn.qkv.weight", 3 * N_EMBD, N_EMBD}, {"attn.qkv.bias", 3 * N_EMBD, 0},
                 {"attn.proj.weight", N_EMBD, N_EMBD}, {"attn.proj.bias", N_EMBD, 0},
                 {"ln_2.weight", N_EMBD, 0},           {"ln_2.bias", N_EMBD, 0},
                 {"mlp.fc.weight", 4 * N_EMBD, N_EMBD}, {"mlp.fc.bias", 4 * N_EMBD, 0},
                 {"mlp.proj.weight", N_EMBD, 4 * N_EMBD}, {"mlp.proj.bias", N_EMBD, 0}};
        for (size_t k = 0; k < sizeof p / sizeof p[0]; k++) {
            snprintf(name, sizeof name, "h.%d.%s", i, p[k].what);
            add(&l, name, p[k].rows, p[k].cols, p[k].cols > 0);
        }
    }
    add(&l, "ln_f.weight", N_EMBD, 0, false);
    add(&l, "ln_f.bias", N_EMBD, 0, false);
    return l;
}

static int64_t numel(const lw_param_spec *s) {
    return s->ndim == 2 ? s->shape[0] * s->shape[1] : s->shape[0];
}

typedef struct measured {
    double step;         /* synchronised step seconds */
    lw_step_result best; /* the fastest step's own breakdown */
    int64_t elements;
} measured;

/* Best synchronised optimizer step over specs as fp32 buffers on the GPU. */
static measured measure(lw_comm *dc, const lw_param_spec *specs, int n, lw_ns_precision precision,
                        int repeats) {
    lw_optimizer_options oo = lw_optimizer_defaults();
    oo.muon.precision = precision;
    oo.clip = 1.0f;
    bench_optimizer o = bench_optimizer_new(dc, specs, n, &oo);
    lw_stream *s = lw_device_stream(bench_gpu);
    measured m;
    memset(&m, 0, sizeof m);
    m.step = 1e30;
    for (int32_t b = 0; b < lw_layout_num_buffers(o.layout); b++) {
        lw_buffer_info info;
        float *g = NULL;
        bench_check(lw_layout_buffer(o.layout, b, &info), "lw_layout_buffer");
        bench_check(lw_buffers_grad_array(o.buffers, b, &g), "lw_buffers_grad_array");
        float *src = bench_random(info.numel, 1e-2f, 100 + (uint64_t)b);
        bench_check(lw_device_copy(s, g, src, 4 * info.numel, LW_COPY_DEVICE_TO_DEVICE), "copy");
        bench_check(lw_stream_synchronize(s), "sync");
        lw_device_free(bench_gpu, src);
        m.elements += info.numel;
    }
    for (int r = -1; r < repeats; r++) { /* r = -1: warm-up (state, workspace, cuBLAS) */
        lw_step_result res;
        double t0 = lw_now();
        bench_check(lw_optimizer_step(o.opt, &res), "lw_optimizer_step");
        double t = bench_since(s, t0);
        if (r >= 0 && t < m.step) m.step = t, m.best = res;
    }
    bench_optimizer_free(&o);
    return m;
}

int main(int argc, char **argv) {
    lw_ns_precision precision = LW_NS_BF16;
    int repeats = 5;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) repeats = atoi(argv[++i]);
        else if (lw_ns_precision_from_name(argv[i], &precision) != LW_OK) {
            fprintf(stderr, "usage: %s [bf16|tf32|fp32] [--repeats N]\n", argv[0]);
            return 2;
        }
    }
    if (repeats < 1) repeats = 1;
    spec_list all = gpt2_xl();
    lw_layout_options lo = lw_layout_defaults();
    lo.dp = lo.expert_dp = DP;
    lw_layout *full = NULL;
    bench_check(lw_layout_new(all.specs, all.n, &lo, &full), "lw_layout_new (dp 8)");
    /* rank 0's share: its Muon matrices whole, an eighth of each AdamW parameter */
    spec_list muon = {calloc((size_t)all.n, sizeof(lw_param_spec)), 0};
    spec_list adamw = {calloc((size_t)all.n, sizeof(lw_param_spec)), 0};
    spec_list both = {calloc((size_t)all.n, sizeof(lw_param_spec)), 0};
    int64_t total = 0, muon_numel = 0, adamw_numel = 0;
    for (int p = 0; p < all.n; p++) {
        const lw_param_spec *s = &all.specs[p];
        total += numel(s);
        if (s->optimizer == LW_OPTIMIZER_MUON) {
            lw_param_place place;
            bench_check(lw_layout_place(full, p, &place), "lw_layout_place");
            if (place.owner != 0) continue;
            muon.specs[muon.n++] = *s;
            muon_numel += numel(s);
        } else {
            lw_param_spec share = *s;
            share.ndim = 1;
            share.shape[0] = (numel(s) + DP - 1) / DP;
            share.shape[1] = 0;
            share.shared_embedding = false;
            adamw.specs[adamw.n++] = share;
            adamw_numel += share.shape[0];
        }
    }
    memcpy(both.specs, muon.specs, sizeof(lw_param_spec) * (size_t)muon.n);
    memcpy(both.specs + muon.n, adamw.specs, sizeof(lw_param_spec) * (size_t)adamw.n);
    both.n = muon.n + adamw.n;
    printf("GPT-2 1.5B: %.3fB parameters; rank 0 of dp %d (cost layout): %d Muon matrices "
           "(%.1fM elements), an eighth of %d AdamW parameters (%.2fM elements); Newton-Schulz "
           "%s; fp32 buffers; best of %d\n\n",
           (double)total / 1e9, DP, muon.n, (double)muon_numel / 1e6, adamw.n,
           (double)adamw_numel / 1e6, lw_ns_precision_name(precision), repeats);
    fflush(stdout);
    bench_open("bench_cuda_optimizer_step"); /* the share above needs no GPU */
    lw_comm *self = NULL, *dc = bench_gpu_comm(&self);
    measured whole = measure(dc, both.specs, both.n, precision, repeats);
    measured mu = measure(dc, muon.specs, muon.n, precision, repeats);
    measured ad = measure(dc, adamw.specs, adamw.n, precision, repeats);
    const lw_step_result *b = &whole.best;
    printf("| part | ms |\n|---|---|\n");
    printf("| step (synchronised) | %.3f |\n", 1e3 * whole.step);
    printf("| of it, lw_step_result: grad sync | %.3f |\n", 1e3 * b->seconds_grad_sync);
    printf("| of it, lw_step_result: norm (ends in a device-to-host copy) | %.3f |\n",
           1e3 * b->seconds_norm);
    printf("| of it, lw_step_result: Muon (host clock, issue) | %.3f |\n", 1e3 * b->seconds_muon);
    printf("| of it, lw_step_result: AdamW (host clock, issue) | %.3f |\n",
           1e3 * b->seconds_adamw);
    printf("| of it, lw_step_result: param sync | %.3f |\n", 1e3 * b->seconds_param_sync);
    printf("| Muon share alone, synchronised step - its norm | %.3f |\n",
           1e3 * (mu.step - mu.best.seconds_norm));
    printf("| AdamW share alone, synchronised step - its norm | %.3f |\n",
           1e3 * (ad.step - ad.best.seconds_norm));
    printf("\nelements in buffers: %.1fM (padding included)\n", (double)whole.elements / 1e6);
    lw_comm_free(dc);
    lw_comm_free(self);
    lw_layout_free(full);
    return 0;
}
