/* bpe.c: the byte-level BPE tokenizer object: its byte tokens, its merges in rank order, its
 * special tokens, every token's bytes, and decoding (a token's bytes after another's). Encoding
 * is bpe_encode.c, training bpe_train.c; the file formats are read and written in Lua. */
#include "io/bpe.h"

#include <stdlib.h>
#include <string.h>

static lw_status no_memory(void) { return lwi_fail(LW_ERR_NOMEM, "bpe: out of memory"); }

static bool is_token(const lw_bpe *b, int32_t id) {
    return id >= 0 && id < b->n_ids && b->id_len[id] >= 0;
}

/* Makes `id` (not yet a token, checked by the caller) a token of len bytes, [out] *room where
 * the caller writes them: a copy of other tokens' bytes is made after the pool has grown. */
static lw_status new_token(lw_bpe *b, int32_t id, int64_t len, char **room) {
    if (id >= b->ids_cap) {
        int32_t cap = b->ids_cap ? b->ids_cap : 512;
        while (cap <= id) cap *= 2;
        int64_t *start = realloc(b->id_start, (size_t)cap * sizeof *start);
        if (start) b->id_start = start;
        int32_t *lens = realloc(b->id_len, (size_t)cap * sizeof *lens);
        if (lens) b->id_len = lens;
        if (!start || !lens) return no_memory();
        for (int32_t i = b->ids_cap; i < cap; i++) b->id_len[i] = -1;
        b->ids_cap = cap;
    }
    if (b->pool_len + len > b->pool_cap) {
        int64_t cap = b->pool_cap ? b->pool_cap : 4096;
        while (cap < b->pool_len + len) cap *= 2;
        char *pool = realloc(b->pool, (size_t)cap);
        if (pool == NULL) return no_memory();
        b->pool = pool, b->pool_cap = cap;
    }
    b->id_start[id] = b->pool_len;
    b->id_len[id] = (int32_t)len;
    b->pool_len += len;
    if (id >= b->n_ids) b->n_ids = id + 1;
    *room = b->pool + b->id_start[id];
    return LW_OK;
}

/* Why `id` cannot name a new token, or NULL when it can. */
static const char *bad_new_id(const lw_bpe *b, int32_t id) {
    if (id < 0 || id >= LWI_BPE_MAX_ID) return "is outside [0, 16777216)";
    if (is_token(b, id)) return "is a token already";
    return NULL;
}

lw_status lw_bpe_new(const int32_t *byte_ids, lw_bpe **out) {
    if (out == NULL) return lwi_fail(LW_ERR_INVALID, "bpe: NULL out");
    *out = NULL;
    lw_bpe *b = calloc(1, sizeof *b);
    if (b == NULL) return no_memory();
    lw_status st = lwi_bpe_map64_init(&b->rank_of, 1024);
    if (st == LW_OK) st = lwi_bpe_strings_init(&b->cache, 1024);
    for (int32_t byte = 0; byte < 256 && st == LW_OK; byte++) {
        int32_t id = byte_ids ? byte_ids[byte] : byte;
        const char *why = bad_new_id(b, id);
        if (why) {
            st = lwi_fail(LW_ERR_INVALID, "bpe: the token %d of byte %d %s", id, byte, why);
            break;
        }
        char *room;
        st = new_token(b, id, 1, &room);
        if (st == LW_OK) *room = (char)byte, b->byte_id[byte] = id;
    }
    if (st != LW_OK) {
        lw_bpe_free(b);
        return st;
    }
    *out = b;
    return LW_OK;
}

void lw_bpe_free(lw_bpe *b) {
    if (b == NULL) return;
    free(b->id_start);
    free(b->id_len);
    free(b->pool);
    free(b->merges);
    lwi_bpe_map64_free(&b->rank_of);
    free(b->special_ids);
    lwi_bpe_strings_free(&b->cache);
    free(b->cache_at);
    free(b->cache_n);
    free(b->cache_ids);
    free(b);
}

lw_status lw_bpe_add_merge(lw_bpe *b, int32_t left, int32_t right, int32_t id) {
    if (b == NULL) return lwi_fail(LW_ERR_INVALID, "bpe: NULL tokenizer");
    int32_t rank = b->n_merges;
    if (!is_token(b, left) || !is_token(b, right))
        return lwi_fail(LW_ERR_INVALID, "bpe: merge %d (%d %d -> %d): token %d is not in the "
                        "vocabulary (a merge joins two tokens already there)", rank, left, right,
                        id, is_token(b, left) ? right : left);
    const char *why = bad_new_id(b, id);
    if (why)
        return lwi_fail(LW_ERR_INVALID, "bpe: merge %d (%d %d -> %d): the new token %d %s", rank,
                        left, right, id, id, why);
    int32_t before = lwi_bpe_map64_get(&b->rank_of, lwi_bpe_pair(left, right));
    if (before >= 0)
        return lwi_fail(LW_ERR_INVALID, "bpe: merge %d (%d %d -> %d): the pair is merge %d "
                        "already", rank, left, right, id, before);
    if (b->n_merges == b->merges_cap) {
        int32_t cap = b->merges_cap ? 2 * b->merges_cap : 256;
        lwi_bpe_merge_row *rows = realloc(b->merges, (size_t)cap * sizeof *rows);
        if (rows == NULL) return no_memory();
        b->merges = rows, b->merges_cap = cap;
    }
    int64_t a = b->id_len[left], c = b->id_len[right];
    char *room;
    lw_status st = new_token(b, id, a + c, &room);
    if (st != LW_OK) return st;
    memcpy(room, b->pool + b->id_start[left], (size_t)a);
    memcpy(room + a, b->pool + b->id_start[right], (size_t)c);
    st = lwi_bpe_map64_put(&b->rank_of, lwi_bpe_pair(left, right), rank);
    if (st != LW_OK) {
        b->id_len[id] = -1;
        return st;
    }
    b->merges[b->n_merges++] = (lwi_bpe_merge_row){left, right, id};
    /* a chunk encoded before may merge further now */
    lwi_bpe_strings_clear(&b->cache);
    b->cache_rows = 0, b->cache_ids_len = 0;
    return LW_OK;
}

lw_status lw_bpe_add_special(lw_bpe *b, const char *text, int64_t len, int32_t id) {
    if (b == NULL || (text == NULL && len > 0))
        return lwi_fail(LW_ERR_INVALID, "bpe: bad arguments to add a special token");
    if (len < 1 || len > (1 << 20))
        return lwi_fail(LW_ERR_INVALID, "bpe: special token %d has %lld bytes: it needs 1 to "
                        "1048576", id, (long long)len);
    const char *why = bad_new_id(b, id);
    if (why) return lwi_fail(LW_ERR_INVALID, "bpe: special token %d %s", id, why);
    for (int32_t i = 0; i < b->n_special; i++) {
        int32_t other = b->special_ids[i];
        if (b->id_len[other] == len && memcmp(b->pool + b->id_start[other], text, (size_t)len) == 0)
            return lwi_fail(LW_ERR_INVALID, "bpe: special token %d has the text of special "
                            "token %d", id, other);
    }
    if (b->n_special == b->special_cap) {
        int32_t cap = b->special_cap ? 2 * b->special_cap : 8;
        int32_t *ids = realloc(b->special_ids, (size_t)cap * sizeof *ids);
        if (ids == NULL) return no_memory();
        b->special_ids = ids, b->special_cap = cap;
    }
    char *room;
    lw_status st = new_token(b, id, len, &room);
    if (st != LW_OK) return st;
    memcpy(room, text, (size_t)len);
    b->special_ids[b->n_special++] = id;
    b->special_first[(unsigned char)text[0]] = true;
    return LW_OK;
}

int32_t lw_bpe_vocab(const lw_bpe *b) { return b ? b->n_ids : 0; }
int32_t lw_bpe_merge_count(const lw_bpe *b) { return b ? b->n_merges : 0; }
int32_t lw_bpe_special_count(const lw_bpe *b) { return b ? b->n_special : 0; }

lw_status lw_bpe_merge(const lw_bpe *b, int32_t rank, int32_t *left, int32_t *right,
                       int32_t *id) {
    if (b == NULL || rank < 0 || rank >= b->n_merges)
        return lwi_fail(LW_ERR_RANGE, "bpe: merge %d out of range [0, %d)", rank,
                        b ? b->n_merges : 0);
    if (left) *left = b->merges[rank].left;
    if (right) *right = b->merges[rank].right;
    if (id) *id = b->merges[rank].id;
    return LW_OK;
}

const char *lw_bpe_special(const lw_bpe *b, int32_t i, int32_t *id, int64_t *len) {
    if (b == NULL || i < 0 || i >= b->n_special) return NULL;
    int32_t s = b->special_ids[i];
    if (id) *id = s;
    if (len) *len = b->id_len[s];
    return b->pool + b->id_start[s];
}

const char *lw_bpe_token(const lw_bpe *b, int32_t id, int64_t *len) {
    if (b == NULL || !is_token(b, id)) return NULL;
    if (len) *len = b->id_len[id];
    return b->pool + b->id_start[id];
}

lw_status lw_bpe_decode(const lw_bpe *b, const int32_t *ids, int64_t n, char *out,
                        int64_t out_cap, int64_t *len) {
    if (b == NULL || len == NULL || n < 0 || (n > 0 && ids == NULL))
        return lwi_fail(LW_ERR_INVALID, "bpe: bad arguments to decode");
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!is_token(b, ids[i]))
            return lwi_fail(LW_ERR_RANGE, "bpe: id %d (at %lld) is no token of this tokenizer "
                            "(its vocabulary: %d)", ids[i], (long long)i, b->n_ids);
        total += b->id_len[ids[i]];
    }
    *len = total;
    if (out == NULL) return LW_OK;
    if (out_cap < total)
        return lwi_fail(LW_ERR_RANGE, "bpe: decoding needs %lld bytes, the buffer has %lld",
                        (long long)total, (long long)out_cap);
    for (int64_t i = 0, at = 0; i < n; i++) {
        int32_t k = b->id_len[ids[i]];
        memcpy(out + at, b->pool + b->id_start[ids[i]], (size_t)k);
        at += k;
    }
    return LW_OK;
}
