/* bpe_encode.c: text to token ids: special tokens found first, the text between them cut into
 * chunks (bpe_chunks.c), each chunk's bytes merged as GPT-2 merges them: the pair of lowest rank
 * anywhere in the chunk, its occurrences left to right, again until no pair has a rank.
 * Chunks seen before come from a cache. It does not read tokenizer files. */
#include "io/bpe.h"

#include <stdlib.h>
#include <string.h>

/* Chunks up to this long are cached, while the cache stays below these sizes (then cleared). */
#define CACHE_CHUNK 256
#define CACHE_ROWS (1 << 20)
#define CACHE_IDS (1 << 24)

static lw_status no_memory(void) { return lwi_fail(LW_ERR_NOMEM, "bpe: out of memory"); }

/* Token ids written so far: into a caller's array of room enough (grow false), or a growing one. */
typedef struct ids_out {
    int32_t *ids;
    int64_t n, cap;
    bool grow;
} ids_out;

static lw_status emit(ids_out *o, int32_t id) {
    if (o->n == o->cap) {
        if (!o->grow) return lwi_fail(LW_ERR_INVALID, "bpe: more ids than the room given");
        int64_t cap = o->cap ? 2 * o->cap : 1024;
        int32_t *ids = realloc(o->ids, (size_t)cap * sizeof *ids);
        if (ids == NULL) return no_memory();
        o->ids = ids, o->cap = cap;
    }
    o->ids[o->n++] = id;
    return LW_OK;
}

/* A chunk's symbols while merging: token ids in a list linked both ways, and a heap of the
 * pairs that have a rank, (rank, position of the pair's left symbol), smallest first. */
typedef struct work {
    int32_t *sym;
    int64_t *prev, *next; /* -1 / n: none */
    bool *alive;
    int64_t cap;
    struct entry {
        int32_t rank;
        int64_t pos;
    } *heap;
    int64_t heap_n, heap_cap;
} work;

static void work_free(work *w) {
    free(w->sym), free(w->prev), free(w->next), free(w->alive), free(w->heap);
}

static lw_status work_reserve(work *w, int64_t n) {
    if (n <= w->cap) return LW_OK;
    int32_t *sym = realloc(w->sym, (size_t)n * sizeof *sym);
    if (sym) w->sym = sym;
    int64_t *prev = realloc(w->prev, (size_t)n * sizeof *prev);
    if (prev) w->prev = prev;
    int64_t *next = realloc(w->next, (size_t)n * sizeof *next);
    if (next) w->next = next;
    bool *alive = realloc(w->alive, (size_t)n * sizeof *alive);
    if (alive) w->alive = alive;
    if (!sym || !prev || !next || !alive) return no_memory();
    w->cap = n;
    return LW_OK;
}

static bool before(struct entry a, struct entry b) {
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static lw_status push(work *w, int32_t rank, int64_t pos) {
    if (rank < 0) return LW_OK;
    if (w->heap_n == w->heap_cap) {
        int64_t cap = w->heap_cap ? 2 * w->heap_cap : 256;
        struct entry *heap = realloc(w->heap, (size_t)cap * sizeof *heap);
        if (heap == NULL) return no_memory();
        w->heap = heap, w->heap_cap = cap;
    }
    int64_t i = w->heap_n++;
    struct entry e = {rank, pos};
    while (i > 0 && before(e, w->heap[(i - 1) / 2])) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = e;
    return LW_OK;
}

static struct entry pop(work *w) {
    struct entry top = w->heap[0], last = w->heap[--w->heap_n];
    int64_t i = 0, n = w->heap_n;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && before(w->heap[c + 1], w->heap[c])) c++;
        if (!before(w->heap[c], last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n > 0) w->heap[i] = last;
    return top;
}

static int32_t rank_of(const lw_bpe *b, int32_t left, int32_t right) {
    return lwi_bpe_map64_get(&b->rank_of, lwi_bpe_pair(left, right));
}

/* Whether the symbols at p and its successor still are merge `rank`'s pair. */
static bool still_pair(const lw_bpe *b, const work *w, int64_t n, int32_t rank, int64_t p) {
    if (!w->alive[p] || w->next[p] >= n) return false;
    const lwi_bpe_merge_row *m = &b->merges[rank];
    return w->sym[p] == m->left && w->sym[w->next[p]] == m->right;
}

/* Merges the symbols at p and its successor into merge `rank`'s token, and queues the pairs it
 * makes with its neighbours. */
static lw_status join(const lw_bpe *b, work *w, int64_t n, int32_t rank, int64_t p) {
    int64_t q = w->next[p];
    w->sym[p] = b->merges[rank].id;
    w->alive[q] = false;
    w->next[p] = w->next[q];
    if (w->next[q] < n) w->prev[w->next[q]] = p;
    lw_status st = LW_OK;
    if (w->prev[p] >= 0) st = push(w, rank_of(b, w->sym[w->prev[p]], w->sym[p]), w->prev[p]);
    if (st == LW_OK && w->next[p] < n) st = push(w, rank_of(b, w->sym[p], w->sym[w->next[p]]), p);
    return st;
}

/* Merges the n bytes (n >= 1) of chunk t; the live symbols from 0 on are the result. */
static lw_status merge_chunk(const lw_bpe *b, work *w, const unsigned char *t, int64_t n) {
    lw_status st = work_reserve(w, n);
    w->heap_n = 0;
    for (int64_t i = 0; i < n && st == LW_OK; i++) {
        w->sym[i] = b->byte_id[t[i]], w->prev[i] = i - 1, w->next[i] = i + 1, w->alive[i] = true;
        if (i > 0) st = push(w, rank_of(b, w->sym[i - 1], w->sym[i]), i - 1);
    }
    /* lowest rank first, and left to right within a rank: GPT-2's order. A merge's parts are
     * tokens of earlier merges (lw_bpe_add_merge), so the pairs a merge makes rank after it, and
     * every pair of one rank is in the heap before the first of them is popped. */
    while (st == LW_OK && w->heap_n > 0) {
        struct entry e = pop(w);
        if (still_pair(b, w, n, e.rank, e.pos)) st = join(b, w, n, e.rank, e.pos);
    }
    return st;
}

/* Encodes one chunk t[0 .. n) onto o, through the cache. */
static lw_status encode_chunk(lw_bpe *b, work *w, const unsigned char *t, int64_t n, ids_out *o) {
    if (n == 1) return emit(o, b->byte_id[t[0]]);
    int32_t row = n <= CACHE_CHUNK ? lwi_bpe_strings_find(&b->cache, (const char *)t, (int32_t)n)
                                   : -1;
    lw_status st = LW_OK;
    if (row >= 0) {
        for (int32_t i = 0; i < b->cache_n[row] && st == LW_OK; i++)
            st = emit(o, b->cache_ids[b->cache_at[row] + i]);
        return st;
    }
    st = merge_chunk(b, w, t, n);
    int64_t first = o->n;
    for (int64_t p = 0; p < n && st == LW_OK; p = w->next[p]) st = emit(o, w->sym[p]);
    if (st != LW_OK || n > CACHE_CHUNK) return st;
    int64_t count = o->n - first;
    if (b->cache.n >= CACHE_ROWS || b->cache_ids_len + count > CACHE_IDS) {
        lwi_bpe_strings_clear(&b->cache);
        b->cache_ids_len = 0;
    }
    if (b->cache.n == b->cache_rows) {
        int32_t rows = b->cache_rows ? 2 * b->cache_rows : 1024;
        int64_t *at = realloc(b->cache_at, (size_t)rows * sizeof *at);
        if (at) b->cache_at = at;
        int32_t *cn = realloc(b->cache_n, (size_t)rows * sizeof *cn);
        if (cn) b->cache_n = cn;
        if (!at || !cn) return no_memory();
        b->cache_rows = rows;
    }
    if (b->cache_ids_len + count > b->cache_ids_cap) {
        int64_t cap = b->cache_ids_cap ? b->cache_ids_cap : 4096;
        while (cap < b->cache_ids_len + count) cap *= 2;
        int32_t *ids = realloc(b->cache_ids, (size_t)cap * sizeof *ids);
        if (ids == NULL) return no_memory();
        b->cache_ids = ids, b->cache_ids_cap = cap;
    }
    bool added;
    st = lwi_bpe_strings_add(&b->cache, (const char *)t, (int32_t)n, &row, &added);
    if (st != LW_OK) return st;
    b->cache_at[row] = b->cache_ids_len, b->cache_n[row] = (int32_t)count;
    memcpy(b->cache_ids + b->cache_ids_len, o->ids + first, (size_t)count * sizeof *o->ids);
    b->cache_ids_len += count;
    return LW_OK;
}

bool lwi_bpe_next_special(const lw_bpe *b, const char *text, int64_t len, int64_t at,
                          int64_t *start, int32_t *which) {
    for (int64_t i = at; i < len; i++) {
        if (!b->special_first[(unsigned char)text[i]]) continue;
        int32_t best = -1, best_len = 0;
        for (int32_t s = 0; s < b->n_special; s++) {
            int32_t id = b->special_ids[s], k = b->id_len[id];
            if (k > best_len && k <= len - i &&
                memcmp(text + i, b->pool + b->id_start[id], (size_t)k) == 0)
                best = s, best_len = k;
        }
        if (best >= 0) {
            *start = i, *which = best;
            return true;
        }
    }
    return false;
}

/* Encodes text[0 .. len) onto o. */
static lw_status encode(lw_bpe *b, const char *text, int64_t len, bool special, ids_out *o) {
    work w = {0};
    lw_status st = LW_OK;
    int64_t at = 0;
    while (at < len && st == LW_OK) {
        int64_t end = len;
        int32_t which = -1;
        if (special && b->n_special > 0 && !lwi_bpe_next_special(b, text, len, at, &end, &which))
            end = len, which = -1;
        const char *seg = text + at;
        for (int64_t c = 0; c < end - at && st == LW_OK;) {
            int64_t e = lw_bpe_chunk(seg, end - at, c);
            st = encode_chunk(b, &w, (const unsigned char *)seg + c, e - c, o);
            c = e;
        }
        at = end;
        if (which >= 0 && st == LW_OK) {
            int32_t id = b->special_ids[which];
            st = emit(o, id);
            at += b->id_len[id];
        }
    }
    work_free(&w);
    return st;
}

lw_status lw_bpe_encode(lw_bpe *b, const char *text, int64_t len, bool special, int32_t *ids,
                        int64_t *n) {
    if (b == NULL || n == NULL || len < 0 || (len > 0 && (text == NULL || ids == NULL)))
        return lwi_fail(LW_ERR_INVALID, "bpe: bad arguments to encode");
    /* every token holds a byte or more: len ids are room enough */
    ids_out o = {ids, 0, len, false};
    lw_status st = encode(b, text, len, special, &o);
    *n = o.n;
    return st;
}

lw_status lw_bpe_encode_file(lw_bpe *b, const char *path, bool special, int32_t **ids,
                             int64_t *n) {
    if (b == NULL || path == NULL || ids == NULL || n == NULL)
        return lwi_fail(LW_ERR_INVALID, "bpe: bad arguments to encode a file");
    *ids = NULL, *n = 0;
    void *data = NULL;
    int64_t len = 0;
    lw_status st = lw_file_read(path, INT64_MAX - 1, true, &data, &len);
    if (st != LW_OK) return st;
    ids_out o = {NULL, 0, 0, true};
    st = encode(b, data, len, special, &o);
    lw_file_read_free(data);
    if (st == LW_OK && o.ids == NULL) st = emit(&o, 0), o.n = 0; /* an empty file: no ids */
    if (st != LW_OK) {
        free(o.ids);
        return st;
    }
    *ids = o.ids, *n = o.n;
    return LW_OK;
}

void lw_bpe_ids_free(int32_t *ids) { free(ids); }
