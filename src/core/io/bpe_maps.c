/* bpe_maps.c: the hash maps of the BPE files: 64-bit keys (token pairs) to int32 values, and
 * numbered sets of byte strings (a corpus's chunks, the encoder's cache). Open addressing with
 * linear probing, doubled at half full; nothing is ever removed one by one. */
#include "io/bpe.h"

#include <stdlib.h>
#include <string.h>

#define EMPTY UINT64_MAX

/* A 64-bit mix (the finaliser of MurmurHash3), so that pairs of small ids spread. */
static uint64_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

/* FNV-1a over the bytes, then mixed. */
static uint64_t hash_bytes(const char *b, int32_t len) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int32_t i = 0; i < len; i++) h = (h ^ (unsigned char)b[i]) * 0x100000001b3ULL;
    return mix(h);
}

static int64_t capacity_for(int64_t expected) {
    int64_t cap = 16;
    while (cap < 2 * expected) cap *= 2;
    return cap;
}

static lw_status no_memory(void) { return lwi_fail(LW_ERR_NOMEM, "bpe: out of memory"); }

lw_status lwi_bpe_map64_init(lwi_bpe_map64 *m, int64_t expected) {
    m->cap = capacity_for(expected);
    m->n = 0;
    m->keys = malloc((size_t)m->cap * sizeof *m->keys);
    m->vals = malloc((size_t)m->cap * sizeof *m->vals);
    if (m->keys == NULL || m->vals == NULL) {
        lwi_bpe_map64_free(m);
        return no_memory();
    }
    memset(m->keys, 0xff, (size_t)m->cap * sizeof *m->keys);
    return LW_OK;
}

void lwi_bpe_map64_free(lwi_bpe_map64 *m) {
    free(m->keys);
    free(m->vals);
    m->keys = NULL, m->vals = NULL, m->cap = 0, m->n = 0;
}

int32_t lwi_bpe_map64_get(const lwi_bpe_map64 *m, uint64_t key) {
    for (uint64_t i = mix(key) & (uint64_t)(m->cap - 1);; i = (i + 1) & (uint64_t)(m->cap - 1)) {
        if (m->keys[i] == key) return m->vals[i];
        if (m->keys[i] == EMPTY) return -1;
    }
}

/* Puts key into keys/vals of cap slots; returns whether it was new. */
static bool place(uint64_t *keys, int32_t *vals, int64_t cap, uint64_t key, int32_t val) {
    for (uint64_t i = mix(key) & (uint64_t)(cap - 1);; i = (i + 1) & (uint64_t)(cap - 1)) {
        if (keys[i] == key || keys[i] == EMPTY) {
            bool fresh = keys[i] == EMPTY;
            keys[i] = key, vals[i] = val;
            return fresh;
        }
    }
}

lw_status lwi_bpe_map64_put(lwi_bpe_map64 *m, uint64_t key, int32_t val) {
    if (2 * (m->n + 1) > m->cap) {
        lwi_bpe_map64 grown;
        lw_status st = lwi_bpe_map64_init(&grown, m->cap);
        if (st != LW_OK) return st;
        for (int64_t i = 0; i < m->cap; i++)
            if (m->keys[i] != EMPTY)
                place(grown.keys, grown.vals, grown.cap, m->keys[i], m->vals[i]);
        grown.n = m->n;
        lwi_bpe_map64_free(m);
        *m = grown;
    }
    if (place(m->keys, m->vals, m->cap, key, val)) m->n++;
    return LW_OK;
}

lw_status lwi_bpe_strings_init(lwi_bpe_strings *s, int64_t expected) {
    memset(s, 0, sizeof *s);
    s->cap = capacity_for(expected);
    s->slots = malloc((size_t)s->cap * sizeof *s->slots);
    if (s->slots == NULL) return no_memory();
    memset(s->slots, 0xff, (size_t)s->cap * sizeof *s->slots);
    return LW_OK;
}

void lwi_bpe_strings_free(lwi_bpe_strings *s) {
    free(s->slots);
    free(s->start);
    free(s->len);
    free(s->hash);
    free(s->pool);
    memset(s, 0, sizeof *s);
}

void lwi_bpe_strings_clear(lwi_bpe_strings *s) {
    memset(s->slots, 0xff, (size_t)s->cap * sizeof *s->slots);
    s->n = 0;
    s->pool_len = 0;
}

static int64_t find_slot(const lwi_bpe_strings *s, const char *bytes, int32_t len, uint64_t h) {
    for (uint64_t i = h & (uint64_t)(s->cap - 1);; i = (i + 1) & (uint64_t)(s->cap - 1)) {
        int32_t k = s->slots[i];
        if (k < 0) return (int64_t)i;
        if (s->hash[k] == h && s->len[k] == len &&
            (len == 0 || memcmp(s->pool + s->start[k], bytes, (size_t)len) == 0))
            return (int64_t)i;
    }
}

int32_t lwi_bpe_strings_find(const lwi_bpe_strings *s, const char *bytes, int32_t len) {
    return s->slots[find_slot(s, bytes, len, hash_bytes(bytes, len))];
}

/* Room for one more string of len bytes: the rows, the pool, and slots below half full. */
static lw_status make_room(lwi_bpe_strings *s, int32_t len) {
    if (s->n == s->n_cap) {
        int32_t cap = s->n_cap ? 2 * s->n_cap : 64;
        int64_t *start = realloc(s->start, (size_t)cap * sizeof *start);
        if (start) s->start = start;
        int32_t *lens = realloc(s->len, (size_t)cap * sizeof *lens);
        if (lens) s->len = lens;
        uint64_t *hash = realloc(s->hash, (size_t)cap * sizeof *hash);
        if (hash) s->hash = hash;
        if (!start || !lens || !hash) return no_memory();
        s->n_cap = cap;
    }
    if (s->pool_len + len > s->pool_cap) {
        int64_t cap = s->pool_cap ? s->pool_cap : 4096;
        while (cap < s->pool_len + len) cap *= 2;
        char *pool = realloc(s->pool, (size_t)cap);
        if (pool == NULL) return no_memory();
        s->pool = pool, s->pool_cap = cap;
    }
    if (2 * ((int64_t)s->n + 1) > s->cap) {
        int64_t cap = 2 * s->cap;
        int32_t *slots = malloc((size_t)cap * sizeof *slots);
        if (slots == NULL) return no_memory();
        memset(slots, 0xff, (size_t)cap * sizeof *slots);
        for (int32_t k = 0; k < s->n; k++) {
            uint64_t i = s->hash[k] & (uint64_t)(cap - 1);
            while (slots[i] >= 0) i = (i + 1) & (uint64_t)(cap - 1);
            slots[i] = k;
        }
        free(s->slots);
        s->slots = slots, s->cap = cap;
    }
    return LW_OK;
}

lw_status lwi_bpe_strings_add(lwi_bpe_strings *s, const char *bytes, int32_t len, int32_t *index,
                              bool *added) {
    uint64_t h = hash_bytes(bytes, len);
    int64_t slot = find_slot(s, bytes, len, h);
    *added = s->slots[slot] < 0;
    if (!*added) {
        *index = s->slots[slot];
        return LW_OK;
    }
    lw_status st = make_room(s, len);
    if (st != LW_OK) return st;
    slot = find_slot(s, bytes, len, h); /* the slots may have grown */
    int32_t k = s->n++;
    s->start[k] = s->pool_len, s->len[k] = len, s->hash[k] = h;
    if (len > 0) memcpy(s->pool + s->pool_len, bytes, (size_t)len);
    s->pool_len += len;
    s->slots[slot] = k;
    *index = k;
    return LW_OK;
}
