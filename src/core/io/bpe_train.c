/* bpe_train.c: learning a byte-level BPE tokenizer's merges from text. The text is cut at
 * special tokens and into chunks (bpe_chunks.c), and each distinct chunk is counted once with
 * its frequency; then, merge after merge, the most frequent adjacent pair of tokens within the
 * chunks becomes a new token. Pair counts are kept up to date through the chunks each merge
 * touches (an index from every pair to the chunks that hold it), never recounted whole. */
#include "io/bpe.h"

#include <stdlib.h>
#include <string.h>

struct lw_bpe_trainer {
    int32_t vocab;
    int64_t min_count;
    lw_bpe *specials;       /* the special tokens, to cut the text at; ids from 256 */
    lwi_bpe_strings chunks; /* every distinct chunk */
    int64_t *counts;        /* [counts_cap] occurrences of chunk i */
    int32_t counts_cap;
    int64_t bytes, n_chunks;
};

static lw_status no_memory(void) { return lwi_fail(LW_ERR_NOMEM, "bpe: out of memory"); }

void lw_bpe_trainer_free(lw_bpe_trainer *t) {
    if (t == NULL) return;
    lw_bpe_free(t->specials);
    lwi_bpe_strings_free(&t->chunks);
    free(t->counts);
    free(t);
}

lw_status lw_bpe_trainer_new(int32_t vocab, int64_t min_count, const char *const *special,
                             int32_t n_special, lw_bpe_trainer **out) {
    if (out == NULL || n_special < 0 || (n_special > 0 && special == NULL))
        return lwi_fail(LW_ERR_INVALID, "bpe: bad arguments to the trainer");
    *out = NULL;
    if (vocab < 256 + n_special || vocab >= LWI_BPE_MAX_ID)
        return lwi_fail(LW_ERR_INVALID, "bpe: vocab %d is smaller than the 256 byte tokens and "
                        "%d special token%s", vocab, n_special, n_special == 1 ? "" : "s");
    if (min_count < 1)
        return lwi_fail(LW_ERR_INVALID, "bpe: min_count must be >= 1, got %lld",
                        (long long)min_count);
    lw_bpe_trainer *t = calloc(1, sizeof *t);
    if (t == NULL) return no_memory();
    t->vocab = vocab, t->min_count = min_count;
    lw_status st = lw_bpe_new(NULL, &t->specials);
    if (st == LW_OK) st = lwi_bpe_strings_init(&t->chunks, 1 << 16);
    for (int32_t i = 0; i < n_special && st == LW_OK; i++) {
        if (special[i] == NULL) st = lwi_fail(LW_ERR_INVALID, "bpe: special token %d is NULL", i);
        else st = lw_bpe_add_special(t->specials, special[i], (int64_t)strlen(special[i]), 256 + i);
    }
    if (st != LW_OK) {
        lw_bpe_trainer_free(t);
        return st;
    }
    *out = t;
    return LW_OK;
}

static lw_status count_chunk(lw_bpe_trainer *t, const char *chunk, int64_t len) {
    if (len > INT32_MAX) return lwi_fail(LW_ERR_INVALID, "bpe: a chunk of %lld bytes is too "
                                         "long to count", (long long)len);
    int32_t i;
    bool added;
    lw_status st = lwi_bpe_strings_add(&t->chunks, chunk, (int32_t)len, &i, &added);
    if (st != LW_OK) return st;
    if (i >= t->counts_cap) {
        int32_t cap = t->counts_cap ? 2 * t->counts_cap : 1 << 16;
        int64_t *counts = realloc(t->counts, (size_t)cap * sizeof *counts);
        if (counts == NULL) return no_memory();
        t->counts = counts, t->counts_cap = cap;
    }
    if (added) t->counts[i] = 0;
    t->counts[i]++;
    t->n_chunks++;
    return LW_OK;
}

lw_status lw_bpe_trainer_add_text(lw_bpe_trainer *t, const char *text, int64_t len) {
    if (t == NULL || len < 0 || (len > 0 && text == NULL))
        return lwi_fail(LW_ERR_INVALID, "bpe: bad arguments to add text");
    lw_status st = LW_OK;
    int64_t at = 0;
    while (at < len && st == LW_OK) {
        int64_t end;
        int32_t which = -1;
        if (!lwi_bpe_next_special(t->specials, text, len, at, &end, &which)) end = len;
        for (int64_t c = at; c < end && st == LW_OK;) {
            int64_t e = at + lw_bpe_chunk(text + at, end - at, c - at);
            st = count_chunk(t, text + c, e - c);
            c = e;
        }
        at = end;
        if (which >= 0) {
            int64_t k;
            lw_bpe_special(t->specials, which, NULL, &k);
            at += k;
        }
    }
    t->bytes += len;
    return st;
}

lw_status lw_bpe_trainer_add_file(lw_bpe_trainer *t, const char *path) {
    if (t == NULL || path == NULL)
        return lwi_fail(LW_ERR_INVALID, "bpe: bad arguments to add a file");
    void *data = NULL;
    int64_t len = 0;
    lw_status st = lw_file_read(path, INT64_MAX - 1, true, &data, &len);
    if (st == LW_OK) st = lw_bpe_trainer_add_text(t, data, len);
    lw_file_read_free(data);
    return st;
}

void lw_bpe_trainer_counts(const lw_bpe_trainer *t, int64_t *bytes, int64_t *chunks,
                           int64_t *distinct) {
    if (bytes) *bytes = t ? t->bytes : 0;
    if (chunks) *chunks = t ? t->n_chunks : 0;
    if (distinct) *distinct = t ? t->chunks.n : 0;
}

/* ---- learning the merges ------------------------------------------------------------------ */

/* The distinct chunks as words of token ids (those of 2 bytes or more: a single byte has no
 * pair), every pair's count over them and the words each pair occurs in, and a max-heap of
 * (count, left, right) whose entries are checked against the counts when popped. */
typedef struct learner {
    int32_t n_words;
    int64_t *word_at;  /* [n_words] first symbol in sym */
    int32_t *word_len; /* [n_words] symbols now */
    int64_t *freq;     /* [n_words] */
    int32_t *sym;
    int32_t *seen;     /* [n_words] the step that last touched the word */
    lwi_bpe_map64 pair_of;
    int32_t n_pairs, pairs_cap;
    int32_t *left, *right;
    int64_t *count, *before; /* before: the count at the start of the step that changed it */
    int32_t *changed_at;     /* the step that last changed it */
    int32_t **words, *n_in, *in_cap; /* the words each pair was seen in (some no longer) */
    int32_t *changed, n_changed;     /* pairs changed in this step */
    struct top {
        int64_t count;
        int32_t left, right;
    } *heap;
    int64_t heap_n, heap_cap;
} learner;

static void learner_free(learner *l) {
    for (int32_t p = 0; p < l->n_pairs; p++) free(l->words[p]);
    free(l->word_at), free(l->word_len), free(l->freq), free(l->sym), free(l->seen);
    lwi_bpe_map64_free(&l->pair_of);
    free(l->left), free(l->right), free(l->count), free(l->before), free(l->changed_at);
    free(l->words), free(l->n_in), free(l->in_cap), free(l->changed), free(l->heap);
}

/* Doubles a pair array of n_pairs elements of `size` bytes when full. */
static bool grow(void **array, int32_t cap, size_t size) {
    void *p = realloc(*array, (size_t)cap * size);
    if (p == NULL) return false;
    *array = p;
    return true;
}

/* The index of pair (a, b), made (count 0, in no word) when new. */
static lw_status pair_index(learner *l, int32_t a, int32_t b, int32_t *p) {
    *p = lwi_bpe_map64_get(&l->pair_of, lwi_bpe_pair(a, b));
    if (*p >= 0) return LW_OK;
    if (l->n_pairs == l->pairs_cap) {
        int32_t cap = l->pairs_cap ? 2 * l->pairs_cap : 1 << 14;
        if (!grow((void **)&l->left, cap, sizeof *l->left) ||
            !grow((void **)&l->right, cap, sizeof *l->right) ||
            !grow((void **)&l->count, cap, sizeof *l->count) ||
            !grow((void **)&l->before, cap, sizeof *l->before) ||
            !grow((void **)&l->changed_at, cap, sizeof *l->changed_at) ||
            !grow((void **)&l->words, cap, sizeof *l->words) ||
            !grow((void **)&l->n_in, cap, sizeof *l->n_in) ||
            !grow((void **)&l->in_cap, cap, sizeof *l->in_cap) ||
            !grow((void **)&l->changed, cap, sizeof *l->changed))
            return no_memory();
        l->pairs_cap = cap;
    }
    *p = l->n_pairs++;
    l->left[*p] = a, l->right[*p] = b, l->count[*p] = 0, l->changed_at[*p] = -1;
    l->words[*p] = NULL, l->n_in[*p] = 0, l->in_cap[*p] = 0;
    return lwi_bpe_map64_put(&l->pair_of, lwi_bpe_pair(a, b), *p);
}

/* Notes word w in pair p's list (once in a row: a word's repeats of a pair come together). */
static lw_status note_word(learner *l, int32_t p, int32_t w) {
    if (l->n_in[p] > 0 && l->words[p][l->n_in[p] - 1] == w) return LW_OK;
    if (l->n_in[p] == l->in_cap[p]) {
        int32_t cap = l->in_cap[p] ? 2 * l->in_cap[p] : 4;
        if (!grow((void **)&l->words[p], cap, sizeof **l->words)) return no_memory();
        l->in_cap[p] = cap;
    }
    l->words[p][l->n_in[p]++] = w;
    return LW_OK;
}

static bool above(struct top x, struct top y) {
    if (x.count != y.count) return x.count > y.count;
    if (x.left != y.left) return x.left < y.left;
    return x.right < y.right;
}

static lw_status heap_push(learner *l, int32_t p) {
    if (l->heap_n == l->heap_cap) {
        int64_t cap = l->heap_cap ? 2 * l->heap_cap : 1 << 14;
        struct top *heap = realloc(l->heap, (size_t)cap * sizeof *heap);
        if (heap == NULL) return no_memory();
        l->heap = heap, l->heap_cap = cap;
    }
    struct top e = {l->count[p], l->left[p], l->right[p]};
    int64_t i = l->heap_n++;
    while (i > 0 && above(e, l->heap[(i - 1) / 2])) {
        l->heap[i] = l->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    l->heap[i] = e;
    return LW_OK;
}

static struct top heap_pop(learner *l) {
    struct top top = l->heap[0], last = l->heap[--l->heap_n];
    int64_t i = 0, n = l->heap_n;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && above(l->heap[c + 1], l->heap[c])) c++;
        if (!above(l->heap[c], last)) break;
        l->heap[i] = l->heap[c];
        i = c;
    }
    if (n > 0) l->heap[i] = last;
    return top;
}

/* Adds delta x the word's frequency to the count of every pair in word w (made when new), at
 * step `step`; with `fresh` (a token made in this step), w joins the lists of its pairs. */
static lw_status count_word(learner *l, int32_t w, int64_t delta, int32_t step, int32_t fresh) {
    const int32_t *s = l->sym + l->word_at[w];
    for (int32_t i = 0; i + 1 < l->word_len[w]; i++) {
        int32_t p;
        lw_status st = pair_index(l, s[i], s[i + 1], &p);
        if (st == LW_OK && (s[i] == fresh || s[i + 1] == fresh)) st = note_word(l, p, w);
        if (st != LW_OK) return st;
        if (l->changed_at[p] != step) {
            l->changed_at[p] = step, l->before[p] = l->count[p];
            l->changed[l->n_changed++] = p;
        }
        l->count[p] += delta * l->freq[w];
    }
    return LW_OK;
}

/* Builds the words, counts their pairs and fills the heap. */
static lw_status learner_init(learner *l, const lw_bpe_trainer *t) {
    const lwi_bpe_strings *c = &t->chunks;
    int64_t total = 0;
    for (int32_t i = 0; i < c->n; i++) total += c->len[i] >= 2 ? c->len[i] : 0;
    l->word_at = malloc(((size_t)c->n + 1) * sizeof *l->word_at);
    l->word_len = malloc(((size_t)c->n + 1) * sizeof *l->word_len);
    l->freq = malloc(((size_t)c->n + 1) * sizeof *l->freq);
    l->seen = malloc(((size_t)c->n + 1) * sizeof *l->seen);
    l->sym = malloc(((size_t)total + 1) * sizeof *l->sym);
    if (!l->word_at || !l->word_len || !l->freq || !l->seen || !l->sym) return no_memory();
    lw_status st = lwi_bpe_map64_init(&l->pair_of, 1 << 14);
    int64_t at = 0;
    for (int32_t i = 0; i < c->n && st == LW_OK; i++) {
        if (c->len[i] < 2) continue;
        int32_t w = l->n_words++;
        const unsigned char *b = (const unsigned char *)lwi_bpe_strings_bytes(c, i);
        l->word_at[w] = at, l->word_len[w] = c->len[i], l->freq[w] = t->counts[i];
        l->seen[w] = -1;
        for (int32_t k = 0; k < c->len[i]; k++) l->sym[at++] = b[k];
        /* every token is fresh here: each word joins the lists of all its pairs */
        const int32_t *s = l->sym + l->word_at[w];
        for (int32_t k = 0; k + 1 < l->word_len[w] && st == LW_OK; k++) {
            int32_t p;
            st = pair_index(l, s[k], s[k + 1], &p);
            if (st == LW_OK) st = note_word(l, p, w);
            if (st == LW_OK) l->count[p] += l->freq[w];
        }
    }
    for (int32_t p = 0; p < l->n_pairs && st == LW_OK; p++) st = heap_push(l, p);
    return st;
}

/* Merges pair p into token id throughout the words that hold it (step `step`). */
static lw_status learn_merge(learner *l, int32_t p, int32_t id, int32_t step) {
    int32_t a = l->left[p], b = l->right[p];
    l->n_changed = 0;
    lw_status st = LW_OK;
    for (int32_t k = 0; k < l->n_in[p] && st == LW_OK; k++) {
        int32_t w = l->words[p][k];
        if (l->seen[w] == step) continue;
        l->seen[w] = step;
        int32_t *s = l->sym + l->word_at[w], n = l->word_len[w];
        bool holds = false;
        for (int32_t i = 0; i + 1 < n && !holds; i++) holds = s[i] == a && s[i + 1] == b;
        if (!holds) continue; /* an earlier merge took the pair out of this word */
        st = count_word(l, w, -1, step, -1);
        int32_t m = 0;
        for (int32_t i = 0; i < n; i++) {
            if (i + 1 < n && s[i] == a && s[i + 1] == b) s[m++] = id, i++;
            else s[m++] = s[i];
        }
        l->word_len[w] = m;
        if (st == LW_OK) st = count_word(l, w, +1, step, id);
    }
    for (int32_t i = 0; i < l->n_changed && st == LW_OK; i++) {
        int32_t q = l->changed[i];
        if (l->count[q] != l->before[q] && l->count[q] > 0) st = heap_push(l, q);
    }
    free(l->words[p]);
    l->words[p] = NULL, l->n_in[p] = 0, l->in_cap[p] = 0;
    return st;
}

lw_status lw_bpe_trainer_train(lw_bpe_trainer *t, lw_bpe **out) {
    if (t == NULL || out == NULL) return lwi_fail(LW_ERR_INVALID, "bpe: bad arguments to train");
    *out = NULL;
    int32_t n_special = lw_bpe_special_count(t->specials);
    int32_t wanted = t->vocab - 256 - n_special;
    lw_bpe *b = NULL;
    learner l = {0};
    lw_status st = lw_bpe_new(NULL, &b);
    if (st == LW_OK) st = learner_init(&l, t);
    for (int32_t step = 0; step < wanted && st == LW_OK;) {
        if (l.heap_n == 0) break;
        struct top best = heap_pop(&l);
        int32_t p = lwi_bpe_map64_get(&l.pair_of, lwi_bpe_pair(best.left, best.right));
        if (l.count[p] != best.count) continue; /* stale: a newer entry holds its count */
        if (best.count < t->min_count) break;
        int32_t id = 256 + step;
        st = lw_bpe_add_merge(b, best.left, best.right, id);
        if (st == LW_OK) st = learn_merge(&l, p, id, step);
        step++;
    }
    for (int32_t i = 0; i < n_special && st == LW_OK; i++) {
        int64_t len;
        const char *text = lw_bpe_special(t->specials, i, NULL, &len);
        st = lw_bpe_add_special(b, text, len, 256 + lw_bpe_merge_count(b) + i);
    }
    learner_free(&l);
    if (st != LW_OK) {
        lw_bpe_free(b);
        return st;
    }
    *out = b;
    return LW_OK;
}
