/* embedding.c: the embedding's range kernels against the CPU, over the whole table (as
 * lw_embedding_forward and _backward call them) and over a tensor-parallel rank's rows. */
#include "harness.h"

/* ---- the cases ------------------------------------------------------------------------------- *
 * Batches of b sequences of t tokens, c channels, from a vocabulary of `vocab` rows: the whole
 * table (rows 0) or the rows [first, first + rows) of one rank; with the positions' table or
 * not, fp32 or bf16 tables. Those with t 1024 are of a GPU's size. */

static const struct {
    int64_t b, t, c, vocab, first, rows; /* rows 0: the whole table of `vocab` rows */
    bool wpe, bf16_w;
} embedding_shapes[] = {
    {1, 1, 1, 1, 0, 0, true, false},
    {4, 64, 100, 50, 0, 0, true, false},      /* many repeats of each token */
    {3, 33, 40, 70000, 0, 0, false, false},   /* ids past 2^16: both passes of the GPU's sort */
    {2, 1024, 768, 50304, 0, 0, true, false}, /* GPT-2's */
    {1, 3, 8, 8, 0, 0, false, false},         /* a negative id: it lies outside every range */
    {0, 4, 8, 10, 0, 0, true, false},         /* no batch: nothing written */
    {1, 1, 1, 2, 1, 1, true, false},          /* a rank's rows */
    {4, 64, 100, 50, 25, 25, true, false},    /* half the tokens another rank's */
    {3, 33, 40, 70000, 35000, 35000, false, false},
    {2, 1024, 768, 50304, 0, 16768, true, false}, /* a third of GPT-2's vocabulary */
    {4, 64, 100, 50, 0, 0, true, true},           /* bf16 tables */
    {3, 33, 40, 70000, 35000, 35000, false, true},
    {1, 3, 8, 8, 0, 0, true, true},
};

/* ---- runs and hooks -------------------------------------------------------------------------- *
 * One kernel serves the whole table (lw_embedding_forward and _backward: the range of every row an
 * id can name) and a tensor-parallel rank's rows [first, first + rows). Exact on every device: the
 * forward adds the same two floats (or copies one), the backward adds each token's positions in
 * the CPU's order (batch-major, then time), one float addition at a time. */

typedef struct {
    char shape[128];
    int64_t b, t, c, first, rows; /* the table's rows [first, first + rows) */
    bool whole, wpe;              /* whole: through lw_embedding_*, the table `rows` long */
    int32_t *tokens;
    float *wte, *pos, *dy, *dwte0, *dwpe0;
    uint16_t *wte16, *pos16; /* bf16 tables (wte, pos: their widened values), or NULL */
} embed_args;

static void run_embedding_forward(run *r, const void *p) {
    const embed_args *a = p;
    const int64_t n = a->b * a->t;
    const int32_t *tokens = input_ids(r, a->tokens, n);
    for (int widened = 0; widened < 1 + (a->wte16 != NULL); widened++) {
        lw_dtype wt;
        const void *wte = input_typed(r, a->wte, widened ? NULL : a->wte16, a->rows * a->c, &wt);
        const void *wpe =
            a->wpe ? input_typed(r, a->pos, widened ? NULL : a->pos16, a->t * a->c, &wt) : NULL;
        float *y = output(r, widened ? "y (widened)" : "y", n * a->c, bits());
        call(r, a->whole ? lw_embedding_forward(r->s, y, tokens, wte, wpe, wt, a->b, a->t, a->c)
                         : lw_embedding_range_forward(r->s, y, tokens, wte, wpe, wt, a->first,
                                                      a->rows, a->b, a->t, a->c));
    }
}

static void run_embedding_backward(run *r, const void *p) {
    const embed_args *a = p;
    const int64_t n = a->b * a->t;
    const int32_t *tokens = input_ids(r, a->tokens, n);
    const float *dy = input(r, a->dy, n * a->c);
    float *dwte = accumulated(r, "dwte", a->dwte0, a->rows * a->c, bits());
    float *dwpe = a->wpe ? accumulated(r, "dwpe", a->dwpe0, a->t * a->c, bits()) : NULL;
    call(r, a->whole ? lw_embedding_backward(r->s, dwte, dwpe, dy, tokens, a->b, a->t, a->c)
                     : lw_embedding_range_backward(r->s, dwte, dwpe, dy, tokens, a->first, a->rows,
                                                   a->b, a->t, a->c));
}

/* The table row of position i's token, or -1: another rank's, or a negative id. */
static int64_t embed_row(const embed_args *a, int64_t i) {
    const int64_t id = a->tokens[i];
    return id >= a->first && id - a->first < a->rows ? id - a->first : -1;
}

/* The host's forward and backward, float by float in the CPU's order: the CPU bit for bit; a
 * negative id looks up zeros on every device. */
static void after_embedding(const kernel_case *k, const run *r) {
    const embed_args *a = k->args;
    const bool forward = strcmp(k->kernel, "embedding_range_forward") == 0;
    const int64_t n = a->b * a->t, c = a->c;
    if (forward && a->wte16 != NULL) same_as_widened(k, r, "y", n * c);
    for (int64_t i = 0; i < n && forward && !a->wpe; i++)
        if (a->tokens[i] < 0) {
            bool zero = true;
            for (int64_t j = 0; j < c; j++)
                zero = zero && f32_of(r, "y")[i * c + j] == 0.0f;
            expect(k, r, zero, "a negative id looks up zeros");
        }
    if (!on_cpu(r->device)) return;
    const int64_t nw = forward ? n * c : a->rows * c;
    float *want = cpu_array(nw), *wpe = a->wpe ? cpu_array(a->t * c) : NULL;
    if (!forward) {
        memcpy(want, a->dwte0, 4 * (size_t)nw);
        if (wpe != NULL) memcpy(wpe, a->dwpe0, 4 * (size_t)(a->t * c));
    }
    for (int64_t i = 0; i < n; i++) {
        const int64_t row = embed_row(a, i), t = i % a->t;
        for (int64_t j = 0; j < c && forward; j++) {
            const float *tok = row >= 0 ? a->wte + row * c : NULL;
            const float *pos = a->wpe ? a->pos + t * c : NULL;
            want[i * c + j] = tok && pos ? tok[j] + pos[j] : tok ? tok[j] : pos ? pos[j] : 0.0f;
        }
        for (int64_t j = 0; j < c && !forward; j++) {
            if (row >= 0) want[row * c + j] += a->dy[i * c + j];
            if (wpe != NULL) wpe[t * c + j] += a->dy[i * c + j];
        }
    }
    expect(k, r, memcmp(f32_of(r, forward ? "y" : "dwte"), want, 4 * (size_t)nw) == 0,
           forward ? "y is the host's lookup, bit for bit"
                   : "dwte is the host's sums, bit for bit");
    if (wpe != NULL && !forward)
        expect(k, r, memcmp(f32_of(r, "dwpe"), wpe, 4 * (size_t)(a->t * c)) == 0,
               "dwpe is the host's sums, bit for bit");
    free(want), free(wpe);
}

/* ---- the cases, made and checked ------------------------------------------------------------ */

static void embedding_cases(const char *kernel, run_fn fn, after_fn after) {
    for (size_t s = 0; s < COUNT(embedding_shapes); s++) {
        if (left_out(embedding_shapes[s].t == 1024)) continue;
        /* the backward reads no table: bf16 tables are the forward's cases */
        if (embedding_shapes[s].bf16_w && strcmp(kernel, "embedding_range_forward") != 0) continue;
        embed_args a = {.b = embedding_shapes[s].b,
                        .t = embedding_shapes[s].t,
                        .c = embedding_shapes[s].c,
                        .first = embedding_shapes[s].first,
                        .rows = embedding_shapes[s].rows,
                        .wpe = embedding_shapes[s].wpe};
        const int64_t n = a.b * a.t, vocab = embedding_shapes[s].vocab;
        a.whole = a.rows == 0;
        if (a.whole) a.rows = vocab;
        char rows[64];
        if (a.whole)
            snprintf(rows, sizeof rows, "the whole table of %lld", (long long)vocab);
        else
            snprintf(rows, sizeof rows, "rows [%lld, +%lld) of %lld", (long long)a.first,
                     (long long)a.rows, (long long)vocab);
        snprintf(a.shape, sizeof a.shape, "b %lld, t %lld, c %lld, %s%s%s", (long long)a.b,
                 (long long)a.t, (long long)a.c, rows, a.wpe ? ", wpe" : "",
                 embedding_shapes[s].bf16_w ? ", bf16 tables" : "");
        a.tokens = random_ids(n, vocab);
        for (int64_t i = 0; i < n && a.whole && vocab > 65536; i += 3)
            a.tokens[i] = 65535 + (int32_t)(i % 5); /* repeats there */
        if (vocab == 8) a.tokens[1] = -4;
        a.wte = random_floats(a.rows * a.c), a.pos = random_floats(a.t * a.c);
        a.dy = random_floats(n * a.c), a.dwte0 = random_floats(a.rows * a.c);
        a.dwpe0 = random_floats(a.t * a.c);
        if (embedding_shapes[s].bf16_w) {
            a.wte16 = round_weights(a.wte, a.rows * a.c);
            a.pos16 = round_weights(a.pos, a.t * a.c);
        }
        check(&(kernel_case){
            .kernel = kernel, .shape = a.shape, .fn = fn, .args = &a, .after = after});
        free(a.tokens), free(a.wte), free(a.pos), free(a.dy), free(a.dwte0), free(a.dwpe0);
        free(a.wte16), free(a.pos16);
    }
}

/* ---- the list's entries ---------------------------------------------------------------------- */

const kernel_entry case_embedding_range_forward = {embedding_cases, run_embedding_forward,
                                                   after_embedding};
const kernel_entry case_embedding_range_backward = {embedding_cases, run_embedding_backward,
                                                    after_embedding};
