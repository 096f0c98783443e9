/* test_parsers_fuzz.c: random bytes and random mutations of valid inputs fed to the JSON and
 * safetensors parsers. Nothing may crash or read out of bounds (the sanitizer build runs this
 * too); each input either parses or fails with a message. Seeded; LW_FUZZ_CASES overrides the
 * count (default 20000 per parser). */
#include "check.h"

#include <stdlib.h>

static uint64_t state = 0x853c49e6748fea9bu;
static uint32_t next(void) {
    state = state * 6364136223846793005u + 1442695040888963407u;
    return (uint32_t)(state >> 33);
}

static const char *json_seeds[] = {
    "{\"a\":[1,2.5e-3,true,false,null],\"b\":{\"c\":\"x\\u00e9\\ud83d\\ude00\"}}",
    "[[[[]]],{},\"\",-0,1E9]",
    "{\"step\":12,\"files\":[{\"name\":\"model.safetensors\",\"crc32c\":\"0a1b2c3d\"}]}",
};

/* A valid small safetensors file to mutate. */
static unsigned char st_seed[256];
static int64_t st_seed_len;

static void make_st_seed(void) {
    const char *h = "{\"__metadata__\":{\"k\":\"v\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
                    "\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"U8\",\"shape\":[3],"
                    "\"data_offsets\":[8,11]}}";
    size_t n = strlen(h);
    for (int i = 0; i < 8; i++) st_seed[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(st_seed + 8, h, n);
    for (int i = 0; i < 11; i++) st_seed[8 + n + (size_t)i] = (unsigned char)i;
    st_seed_len = 8 + (int64_t)n + 11;
}

static void mutate(unsigned char *b, int64_t *n, int64_t cap) {
    int edits = 1 + (int)(next() % 4);
    for (int e = 0; e < edits; e++) {
        uint32_t kind = next() % 4;
        if (*n == 0) kind = 2;
        int64_t at = *n ? (int64_t)(next() % (uint32_t)*n) : 0;
        if (kind == 0) {
            b[at] = (unsigned char)next(); /* replace a byte */
        } else if (kind == 1) {
            b[at] ^= (unsigned char)(1u << (next() % 8)); /* flip a bit */
        } else if (kind == 2 && *n < cap) {
            memmove(b + at + 1, b + at, (size_t)(*n - at)); /* insert */
            b[at] = "{}[],:\"\\0-e.tfnu"[next() % 16];
            (*n)++;
        } else if (*n > 0) {
            *n = at; /* truncate */
        }
    }
}

int main(void) {
    const char *env = getenv("LW_FUZZ_CASES");
    int cases = env ? atoi(env) : 20000;
    make_st_seed();
    unsigned char buf[512];
    int parsed_json = 0, parsed_st = 0;
    for (int c = 0; c < cases; c++) {
        int64_t n;
        if (c % 4 == 0) { /* pure noise */
            n = next() % 64;
            for (int64_t i = 0; i < n; i++) buf[i] = (unsigned char)next();
        } else {
            const char *seed = json_seeds[next() % 3];
            n = (int64_t)strlen(seed);
            memcpy(buf, seed, (size_t)n);
            mutate(buf, &n, sizeof buf);
        }
        lw_json *j = NULL;
        lw_status st = lw_json_parse((const char *)buf, n, &j);
        if (st == LW_OK) {
            parsed_json++;
            /* walk everything the parser built */
            for (int32_t k = 0; k < lw_json_count(j); k++) {
                for (int32_t m = 0; m < lw_json_length(j, k); m++) {
                    CHECK(lw_json_child(j, k, m) > k);
                    if (lw_json_type_of(j, k) == LW_JSON_OBJECT) CHECK(lw_json_key(j, k, m) != NULL);
                }
                int64_t len;
                (void)lw_json_string(j, k, &len);
            }
            lw_json_free(j);
        } else {
            CHECK(j == NULL && strlen(lw_last_error()) > 0);
        }

        n = st_seed_len;
        memcpy(buf, st_seed, (size_t)n);
        if (c % 8 == 0) {
            n = next() % 48;
            for (int64_t i = 0; i < n; i++) buf[i] = (unsigned char)next();
        } else {
            mutate(buf, &n, sizeof buf);
        }
        lw_safetensors *s = NULL;
        if (lw_safetensors_parse(buf, n, "fuzz", &s) == LW_OK) {
            parsed_st++;
            for (int32_t k = 0; k < lw_safetensors_count(s); k++) {
                lw_tensor_view v;
                CHECK_OK(lw_safetensors_tensor(s, k, &v));
                volatile unsigned char sum = 0;
                for (int64_t i = 0; i < v.bytes; i++) sum ^= ((const unsigned char *)v.data)[i];
            }
            lw_safetensors_free(s);
        } else {
            CHECK(s == NULL && strlen(lw_last_error()) > 0);
        }
    }
    printf("%d cases: %d JSON and %d safetensors inputs parsed, the rest refused\n", cases,
           parsed_json, parsed_st);
    CHECK(parsed_json > 0 && parsed_st > 0); /* the mutations keep some inputs valid */
    return check_exit("test_parsers_fuzz");
}
