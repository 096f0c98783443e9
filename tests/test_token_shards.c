/* test_token_shards.c: llm.c / modded-nanogpt token shards: both versions read back across
 * shard boundaries, the vocabulary bound, and a clear error naming the file for every bad one:
 * missing, a directory, too short, wrong magic, unknown version, truncated, too long,
 * mislabelled, empty; and the first bad header of a list is found before anything is read. */
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char root[] = "/tmp/lwopt-shards-XXXXXX";

/* Writes root/name, its path into path[cap]: a header (magic, version, count) and n tokens of
 * `size` bytes each, little-endian. */
static void write_shard(char *path, size_t cap, const char *name, int32_t magic,
                        int32_t version, int32_t count, const uint32_t *tokens, int n, int size) {
    snprintf(path, cap, "%s/%s", root, name);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    int32_t header[256] = {0};
    header[0] = magic, header[1] = version, header[2] = count;
    for (int i = 0; i < 256; i++) {
        uint32_t v = (uint32_t)header[i];
        unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                              (unsigned char)(v >> 24)};
        fwrite(b, 1, 4, f);
    }
    for (int i = 0; i < n; i++) {
        unsigned char b[4] = {(unsigned char)tokens[i], (unsigned char)(tokens[i] >> 8),
                              (unsigned char)(tokens[i] >> 16), (unsigned char)(tokens[i] >> 24)};
        fwrite(b, 1, (size_t)size, f);
    }
    fclose(f);
}

static char a[256], b[256], c[256];
static const uint32_t A[5] = {10, 11, 12, 13, 50256}, B[3] = {20, 70000, 22},
                      C[4] = {30, 31, 32, 33};

static void test_read(void) {
    write_shard(a, sizeof a, "a_000.bin", 20240520, 1, 5, A, 5, 2);
    write_shard(b, sizeof b, "b_001.bin", 20240520, 2, 3, B, 3, 4);
    write_shard(c, sizeof c, "c_002.bin", 20240520, 1, 4, C, 4, 2);
    const char *paths[] = {a, b, c};
    lw_token_shards *s = NULL;
    CHECK_OK(lw_token_shards_open(paths, 3, &s));
    CHECK_EQ(lw_token_shards_count(s), 3);
    CHECK_EQ(lw_token_shards_total(s), 12);
    lw_token_shard_info info;
    CHECK_OK(lw_token_shards_info(s, 1, &info));
    CHECK(strcmp(info.path, b) == 0);
    CHECK_EQ(info.version, 2);
    CHECK_EQ(info.tokens, 3);
    CHECK_EQ(info.start, 5);
    CHECK_FAILS(lw_token_shards_info(s, 3, &info), LW_ERR_RANGE, "shard 3 out of range [0, 3)");

    int32_t all[12], want[12] = {10, 11, 12, 13, 50256, 20, 70000, 22, 30, 31, 32, 33};
    CHECK_OK(lw_token_shards_read(s, 0, 12, 0, all));
    CHECK(memcmp(all, want, sizeof want) == 0);
    /* every start and length, so every boundary is crossed from every side */
    for (int64_t pos = 0; pos <= 12; pos++)
        for (int64_t len = 0; pos + len <= 12; len++) {
            int32_t got[12] = {0};
            CHECK_OK(lw_token_shards_read(s, pos, len, 70001, got));
            CHECK(memcmp(got, want + pos, (size_t)len * sizeof(int32_t)) == 0);
        }
    CHECK_FAILS(lw_token_shards_read(s, 10, 3, 0, all), LW_ERR_RANGE,
                "tokens [10, 13) are outside [0, 12)");
    CHECK_FAILS(lw_token_shards_read(s, -1, 1, 0, all), LW_ERR_RANGE, "outside [0, 12)");
    CHECK_FAILS(lw_token_shards_read(s, 0, -1, 0, all), LW_ERR_INVALID, "bad arguments");

    /* the vocabulary bound names the shard, the token and its position in that shard */
    char message[512];
    snprintf(message, sizeof message, "token_shards: %s: token 70000 at position 1 is outside "
             "the vocabulary [0, 50304)", b);
    CHECK_FAILS(lw_token_shards_read(s, 3, 5, 50304, all), LW_ERR_INVALID, message);
    snprintf(message, sizeof message, "%s: token 50256 at position 4 is outside the vocabulary "
             "[0, 256)", a);
    CHECK_FAILS(lw_token_shards_read(s, 2, 3, 256, all), LW_ERR_INVALID, message);
    CHECK_OK(lw_token_shards_read(s, 0, 4, 14, all)); /* the bound applies to what is read */
    lw_token_shards_free(s);
    lw_token_shards_free(NULL);

    /* a uint32 token that no int32 holds */
    uint32_t huge[2] = {1, 0xFFFFFFFFu};
    char h[256];
    write_shard(h, sizeof h, "huge.bin", 20240520, 2, 2, huge, 2, 4);
    const char *one[] = {h};
    CHECK_OK(lw_token_shards_open(one, 1, &s));
    snprintf(message, sizeof message, "%s: token 4294967295 at position 1 does not fit an int32",
             h);
    CHECK_FAILS(lw_token_shards_read(s, 0, 2, 0, all), LW_ERR_INVALID, message);
    lw_token_shards_free(s);
    unlink(h);
}

/* Opening [good a, path] fails with status and a message that contains `text` and names path. */
static void rejects(const char *path, lw_status status, const char *text) {
    const char *paths[] = {a, path};
    lw_token_shards *s = (lw_token_shards *)1;
    CHECK_FAILS(lw_token_shards_open(paths, 2, &s), status, text);
    CHECK_FAILS(lw_token_shards_open(paths, 2, &s), status, path);
    CHECK(s == NULL);
}

static void test_bad_shards(void) {
    char p[256], message[512];
    uint32_t t[8] = {1, 2, 3, 4, 5, 6, 7, 8};

    snprintf(p, sizeof p, "%s/missing.bin", root);
    snprintf(message, sizeof message, "token_shards: cannot open %s: No such file or directory", p);
    rejects(p, LW_ERR_IO, message);
    rejects(root, LW_ERR_IO, "is not a regular file");

    write_shard(p, sizeof p, "short.bin", 20240520, 1, 0, t, 0, 2);
    CHECK(truncate(p, 100) == 0);
    snprintf(message, sizeof message, "token_shards: %s: 100 bytes is too short for the "
             "1024-byte header of a token shard", p);
    rejects(p, LW_ERR_INVALID, message);

    write_shard(p, sizeof p, "magic.bin", 12345, 1, 8, t, 8, 2);
    snprintf(message, sizeof message, "token_shards: %s: not a token shard (magic 12345, "
             "expected 20240520)", p);
    rejects(p, LW_ERR_INVALID, message);

    write_shard(p, sizeof p, "v3.bin", 20240520, 3, 8, t, 8, 2);
    snprintf(message, sizeof message, "token_shards: %s: unknown version 3 (1: uint16 tokens, 2: "
             "uint32 tokens)", p);
    rejects(p, LW_ERR_INVALID, message);

    write_shard(p, sizeof p, "cut.bin", 20240520, 1, 10, t, 7, 2);
    snprintf(message, sizeof message, "token_shards: %s: truncated: header says 10 tokens, file "
             "holds 7", p);
    rejects(p, LW_ERR_INVALID, message);
    CHECK(truncate(p, 1024 + 7 * 2 + 1) == 0); /* half a token more is still short */
    rejects(p, LW_ERR_INVALID, "truncated: header says 10 tokens, file holds 7");

    write_shard(p, sizeof p, "long.bin", 20240520, 1, 3, t, 5, 2);
    snprintf(message, sizeof message, "token_shards: %s: header says 3 tokens (1030 bytes with "
             "the header), but the file has 1034 bytes", p);
    rejects(p, LW_ERR_INVALID, message);

    /* a version-1 shard labelled 2 looks truncated, a version-2 one labelled 1 too long */
    write_shard(p, sizeof p, "as_v2.bin", 20240520, 2, 8, t, 8, 2);
    snprintf(message, sizeof message, "token_shards: %s: truncated: header says 8 tokens, file "
             "holds 4 (the size fits version 1 tokens: a mislabelled shard?)", p);
    rejects(p, LW_ERR_INVALID, message);
    write_shard(p, sizeof p, "as_v1.bin", 20240520, 1, 8, t, 8, 4);
    rejects(p, LW_ERR_INVALID, "(the size fits version 2 tokens: a mislabelled shard?)");

    write_shard(p, sizeof p, "empty.bin", 20240520, 1, 0, t, 0, 2);
    snprintf(message, sizeof message, "token_shards: %s: empty shard (header says 0 tokens)", p);
    rejects(p, LW_ERR_INVALID, message);
    write_shard(p, sizeof p, "negative.bin", 20240520, 1, -4, t, 0, 2);
    rejects(p, LW_ERR_INVALID, "negative token count (header says -4 tokens)");

    /* every header is checked up front: a bad last shard fails the open, whatever comes first */
    const char *paths[] = {a, b, c, p};
    lw_token_shards *s = NULL;
    CHECK_FAILS(lw_token_shards_open(paths, 4, &s), LW_ERR_INVALID, p);
    CHECK_FAILS(lw_token_shards_open(paths, 0, &s), LW_ERR_INVALID, "no shards given");
    CHECK_FAILS(lw_token_shards_open(NULL, 1, &s), LW_ERR_INVALID, "no shards given");
    const char *null_path[] = {a, NULL};
    CHECK_FAILS(lw_token_shards_open(null_path, 2, &s), LW_ERR_INVALID, "path 1 of 2 is NULL");
}

int main(void) {
    CHECK(mkdtemp(root) != NULL);
    test_read();
    test_bad_shards();
    lw_dir_list *list = NULL;
    CHECK_OK(lw_dir_list_new(root, &list));
    for (int32_t i = 0; i < lw_dir_list_count(list); i++) {
        char p[256];
        snprintf(p, sizeof p, "%s/%s", root, lw_dir_list_name(list, i));
        CHECK_OK(lw_path_remove(p));
    }
    lw_dir_list_free(list);
    CHECK_OK(lw_path_remove(root));
    return check_exit("test_token_shards");
}
