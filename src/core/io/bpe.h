/* bpe.h: what the byte-level BPE files share (lwi_bpe_ prefix; not public API): the two hash
 * maps they count and look up with (bpe_maps.c: 64-bit keys, byte strings), the tokenizer's
 * state (bpe.c) and the pre-tokenizer's chunks (bpe_chunks.c). Training is bpe_train.c. */
#ifndef LW_BPE_H
#define LW_BPE_H

#include "io/io.h"

/* Token ids are below this: the tables indexed by id stay small enough to allocate. */
#define LWI_BPE_MAX_ID (1 << 24)

/* A map of 64-bit keys (never UINT64_MAX, the empty slot) to int32 values, open addressing
 * with linear probing, grown at half full. */
typedef struct lwi_bpe_map64 {
    uint64_t *keys; /* [cap] */
    int32_t *vals;  /* [cap] */
    int64_t cap, n; /* cap a power of two */
} lwi_bpe_map64;

lw_status lwi_bpe_map64_init(lwi_bpe_map64 *m, int64_t expected);
void lwi_bpe_map64_free(lwi_bpe_map64 *m);
/* The value of key, or -1. */
int32_t lwi_bpe_map64_get(const lwi_bpe_map64 *m, uint64_t key);
/* Sets key's value (a new key or a changed one). */
lw_status lwi_bpe_map64_put(lwi_bpe_map64 *m, uint64_t key, int32_t val);

/* A set of byte strings, each numbered in the order added (0, 1, ...), the bytes kept in one
 * pool; cleared whole (a cache), never entry by entry. */
typedef struct lwi_bpe_strings {
    int32_t *slots;  /* [cap] a string's number, or -1 */
    int64_t cap;     /* a power of two */
    int32_t n;       /* strings */
    int64_t *start;  /* [n] where each begins in pool */
    int32_t *len;    /* [n] */
    uint64_t *hash;  /* [n] */
    int32_t n_cap;   /* room in start, len, hash */
    char *pool;
    int64_t pool_len, pool_cap;
} lwi_bpe_strings;

lw_status lwi_bpe_strings_init(lwi_bpe_strings *s, int64_t expected);
void lwi_bpe_strings_free(lwi_bpe_strings *s);
void lwi_bpe_strings_clear(lwi_bpe_strings *s);
/* The number of bytes[0 .. len), or -1 when absent. */
int32_t lwi_bpe_strings_find(const lwi_bpe_strings *s, const char *bytes, int32_t len);
/* The number of bytes[0 .. len), added when absent ([out] *added says which). */
lw_status lwi_bpe_strings_add(lwi_bpe_strings *s, const char *bytes, int32_t len, int32_t *index,
                              bool *added);
/* [borrowed] string i's bytes. */
static inline const char *lwi_bpe_strings_bytes(const lwi_bpe_strings *s, int32_t i) {
    return s->pool + s->start[i];
}

/* The key of an adjacent pair of tokens in a map64. */
static inline uint64_t lwi_bpe_pair(int32_t left, int32_t right) {
    return (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
}

/* The tokenizer. Token ids need not be dense (a foreign vocabulary's may have gaps): id_len is
 * -1 at an id that is no token. */
typedef struct lwi_bpe_merge_row {
    int32_t left, right, id;
} lwi_bpe_merge_row;

struct lw_bpe {
    int32_t byte_id[256];
    int32_t n_ids;              /* ids in use are below it */
    int32_t ids_cap;
    int64_t *id_start;          /* [ids_cap] each token's bytes in pool */
    int32_t *id_len;            /* [ids_cap] -1: no token */
    char *pool;
    int64_t pool_len, pool_cap;
    lwi_bpe_merge_row *merges;  /* [n_merges] by rank */
    int32_t n_merges, merges_cap;
    lwi_bpe_map64 rank_of;      /* pair -> rank */
    int32_t *special_ids;       /* [n_special], in the order added */
    int32_t n_special, special_cap;
    bool special_first[256];    /* a special token begins with this byte */
    /* chunks already encoded: their bytes, and their tokens at cache_at[i] .. + cache_n[i] */
    lwi_bpe_strings cache;
    int64_t *cache_at;
    int32_t *cache_n, cache_rows;
    int32_t *cache_ids;
    int64_t cache_ids_len, cache_ids_cap;
};

/* Finds the next special token in text[at .. len): [out] *start and the index of the special
 * (in bpe->special_ids); false when none occurs (the longest wins where two begin at once). */
bool lwi_bpe_next_special(const lw_bpe *bpe, const char *text, int64_t len, int64_t at,
                          int64_t *start, int32_t *which);

#endif
