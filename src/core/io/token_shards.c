/* token_shards.c: the token files llm.c and modded-nanogpt write (256 little-endian int32 of
 * header, then uint16 or uint32 tokens), read as one sequence across a list of shards, and
 * written one shard at a time. Every header is checked when the list is opened; the tokens are
 * mapped read-only and decoded on read, never loaded whole. It does not tokenize, shuffle or
 * choose shards: callers do. */
#include "io/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC 20240520
#define HEADER_BYTES 1024 /* 256 x int32, of which the first three are used */

typedef struct shard {
    char *path; /* [owned] */
    int32_t version;
    int64_t tokens;
    int64_t start;            /* global index of the first token */
    const unsigned char *map; /* [owned] the whole file, mapped read-only */
    size_t map_bytes;
} shard;

struct lw_token_shards {
    int32_t n;
    shard *shards; /* [owned] n, in the order given */
    int64_t total;
};

static int64_t token_bytes(int32_t version) { return version == 1 ? 2 : 4; }

static uint32_t le32(const unsigned char *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

void lw_token_shards_free(lw_token_shards *s) {
    if (s == NULL) return;
    for (int32_t i = 0; i < s->n; i++) {
        if (s->shards[i].map != NULL) munmap((void *)s->shards[i].map, s->shards[i].map_bytes);
        free(s->shards[i].path);
    }
    free(s->shards);
    free(s);
}

/* Reads exactly n bytes at offset 0 (a short read of a regular file means it shrank). */
static lw_status read_header(int fd, const char *path, unsigned char *h, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, h + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            return lwi_fail(LW_ERR_IO, "token_shards: reading %s: %s", path, strerror(errno));
        if (r == 0)
            return lwi_fail(LW_ERR_IO, "token_shards: %s: the file ended while its header was "
                            "read", path);
        got += (size_t)r;
    }
    return LW_OK;
}

/* The header's count against the file's size: a count the size does not match says how. */
static lw_status check_size(const char *path, int32_t version, int64_t count, int64_t size) {
    int64_t body = size - HEADER_BYTES, per = token_bytes(version);
    if (body == count * per) return LW_OK;
    /* a shard of the other version, relabelled, has exactly the other token size */
    int32_t other = version == 1 ? 2 : 1;
    char hint[80] = "";
    if (body == count * token_bytes(other))
        snprintf(hint, sizeof hint, " (the size fits version %d tokens: a mislabelled shard?)",
                 other);
    if (body < count * per)
        return lwi_fail(LW_ERR_INVALID, "token_shards: %s: truncated: header says %lld tokens, "
                        "file holds %lld%s", path, (long long)count, (long long)(body / per),
                        hint);
    return lwi_fail(LW_ERR_INVALID, "token_shards: %s: header says %lld tokens (%lld bytes with "
                    "the header), but the file has %lld bytes%s", path, (long long)count,
                    (long long)(HEADER_BYTES + count * per), (long long)size, hint);
}

/* Checks one file's header and size, then maps it. s->path is set; the rest is filled. */
static lw_status open_shard(shard *s) {
    const char *path = s->path;
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return lwi_fail(LW_ERR_IO, "token_shards: cannot open %s: %s", path, strerror(errno));
    lw_status st = LW_OK;
    struct stat info;
    unsigned char h[12];
    if (fstat(fd, &info) != 0) {
        st = lwi_fail(LW_ERR_IO, "token_shards: cannot look at %s: %s", path, strerror(errno));
        goto done;
    }
    if (!S_ISREG(info.st_mode)) {
        st = lwi_fail(LW_ERR_IO, "token_shards: %s is not a regular file", path);
        goto done;
    }
    int64_t size = (int64_t)info.st_size;
    if (size < HEADER_BYTES) {
        st = lwi_fail(LW_ERR_INVALID, "token_shards: %s: %lld bytes is too short for the "
                      "1024-byte header of a token shard", path, (long long)size);
        goto done;
    }
    if ((st = read_header(fd, path, h, sizeof h)) != LW_OK) goto done;
    int32_t magic = (int32_t)le32(h), version = (int32_t)le32(h + 4);
    int64_t count = (int32_t)le32(h + 8);
    if (magic != MAGIC) {
        st = lwi_fail(LW_ERR_INVALID, "token_shards: %s: not a token shard (magic %d, expected "
                      "%d)", path, magic, MAGIC);
        goto done;
    }
    if (version != 1 && version != 2) {
        st = lwi_fail(LW_ERR_INVALID, "token_shards: %s: unknown version %d (1: uint16 tokens, "
                      "2: uint32 tokens)", path, version);
        goto done;
    }
    if (count <= 0) {
        st = lwi_fail(LW_ERR_INVALID, "token_shards: %s: %s (header says %lld tokens)", path,
                      count == 0 ? "empty shard" : "negative token count", (long long)count);
        goto done;
    }
    if ((st = check_size(path, version, count, size)) != LW_OK) goto done;
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        st = lwi_fail(LW_ERR_IO, "token_shards: cannot map %s (%lld bytes): %s", path,
                      (long long)size, strerror(errno));
        goto done;
    }
    s->map = map;
    s->map_bytes = (size_t)size;
    s->version = version;
    s->tokens = count;
done:
    close(fd); /* the mapping outlives the descriptor */
    return st;
}

lw_status lw_token_shards_open(const char *const *paths, int32_t n, lw_token_shards **out) {
    if (out == NULL) return lwi_fail(LW_ERR_INVALID, "token_shards: out pointer is NULL");
    *out = NULL;
    if (n <= 0 || paths == NULL)
        return lwi_fail(LW_ERR_INVALID, "token_shards: no shards given (%d paths)", n);
    for (int32_t i = 0; i < n; i++)
        if (paths[i] == NULL)
            return lwi_fail(LW_ERR_INVALID, "token_shards: path %d of %d is NULL", i, n);
    lw_token_shards *s = calloc(1, sizeof *s);
    if (s == NULL || (s->shards = calloc((size_t)n, sizeof(shard))) == NULL) {
        free(s);
        return lwi_fail(LW_ERR_NOMEM, "token_shards: out of memory");
    }
    lw_status st = LW_OK;
    for (int32_t i = 0; i < n && st == LW_OK; i++) {
        shard *sh = &s->shards[s->n++];
        if ((sh->path = strdup(paths[i])) == NULL) {
            st = lwi_fail(LW_ERR_NOMEM, "token_shards: out of memory");
            break;
        }
        if ((st = open_shard(sh)) != LW_OK) break;
        sh->start = s->total;
        s->total += sh->tokens;
    }
    if (st != LW_OK) {
        lw_token_shards_free(s);
        return st;
    }
    *out = s;
    return LW_OK;
}

int32_t lw_token_shards_count(const lw_token_shards *s) { return s ? s->n : 0; }

int64_t lw_token_shards_total(const lw_token_shards *s) { return s ? s->total : 0; }

lw_status lw_token_shards_info(const lw_token_shards *s, int32_t i, lw_token_shard_info *out) {
    if (s == NULL || out == NULL) return lwi_fail(LW_ERR_INVALID, "token_shards: NULL argument");
    if (i < 0 || i >= s->n)
        return lwi_fail(LW_ERR_RANGE, "token_shards: shard %d out of range [0, %d)", i, s->n);
    const shard *sh = &s->shards[i];
    *out = (lw_token_shard_info){sh->path, sh->version, sh->tokens, sh->start};
    return LW_OK;
}

/* The shard holding global index pos (0 <= pos < total): the last one starting at or before it. */
static int32_t shard_of(const lw_token_shards *s, int64_t pos) {
    int32_t lo = 0, hi = s->n - 1;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2;
        if (s->shards[mid].start <= pos) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static lw_status bad_token(const shard *sh, int64_t at, uint32_t v, int64_t vocab) {
    if (vocab > 0)
        return lwi_fail(LW_ERR_INVALID, "token_shards: %s: token %u at position %lld is outside "
                        "the vocabulary [0, %lld)", sh->path, v, (long long)at, (long long)vocab);
    return lwi_fail(LW_ERR_INVALID, "token_shards: %s: token %u at position %lld does not fit "
                    "an int32", sh->path, v, (long long)at);
}

lw_status lw_token_shards_read(const lw_token_shards *s, int64_t pos, int64_t len, int64_t vocab,
                               int32_t *out) {
    if (s == NULL || len < 0 || vocab < 0 || (len > 0 && out == NULL))
        return lwi_fail(LW_ERR_INVALID, "token_shards: bad arguments to read (len %lld, vocab "
                        "%lld)", (long long)len, (long long)vocab);
    if (pos < 0 || pos > s->total - len)
        return lwi_fail(LW_ERR_RANGE, "token_shards: tokens [%lld, %lld) are outside [0, %lld)",
                        (long long)pos, (long long)(pos + len), (long long)s->total);
    if (len == 0) return LW_OK;
    uint32_t limit = vocab > 0 && vocab <= INT32_MAX ? (uint32_t)vocab : (uint32_t)INT32_MAX + 1u;
    int64_t done = 0;
    for (int32_t i = shard_of(s, pos); done < len; i++) {
        const shard *sh = &s->shards[i];
        int64_t at = pos + done - sh->start;
        int64_t take = sh->tokens - at < len - done ? sh->tokens - at : len - done;
        const unsigned char *p = sh->map + HEADER_BYTES + at * token_bytes(sh->version);
        int32_t *o = out + done;
        if (sh->version == 1) {
            for (int64_t k = 0; k < take; k++, p += 2) {
                uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8;
                if (v >= limit) return bad_token(sh, at + k, v, vocab);
                o[k] = (int32_t)v;
            }
        } else {
            for (int64_t k = 0; k < take; k++, p += 4) {
                uint32_t v = le32(p);
                if (v >= limit) return bad_token(sh, at + k, v, vocab);
                o[k] = (int32_t)v;
            }
        }
        done += take;
    }
    return LW_OK;
}

/* Writes n bytes of buf to fd, whole. */
static lw_status write_all(int fd, const char *path, const unsigned char *buf, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0)
            return lwi_fail(LW_ERR_IO, "token_shards: writing %s: %s", path, strerror(errno));
        buf += w, n -= (size_t)w;
    }
    return LW_OK;
}

static void put_le(unsigned char *b, uint32_t v, int bytes) {
    for (int i = 0; i < bytes; i++) b[i] = (unsigned char)(v >> (8 * i));
}

lw_status lw_token_shards_write(const char *path, int32_t version, const int32_t *tokens,
                                int64_t n) {
    if (path == NULL || (n > 0 && tokens == NULL))
        return lwi_fail(LW_ERR_INVALID, "token_shards: bad arguments to write");
    if (version != 1 && version != 2)
        return lwi_fail(LW_ERR_INVALID, "token_shards: %s: version %d (1: uint16 tokens, 2: "
                        "uint32)", path, version);
    if (n < 1 || n > INT32_MAX)
        return lwi_fail(LW_ERR_INVALID, "token_shards: %s: %lld tokens; a shard holds 1 to %d",
                        path, (long long)n, INT32_MAX);
    int64_t limit = version == 1 ? 65536 : (int64_t)INT32_MAX + 1;
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= limit)
            return lwi_fail(LW_ERR_INVALID, "token_shards: %s: token %d at %lld does not fit a "
                            "version %d shard (ids below %lld)", path, tokens[i], (long long)i,
                            version, (long long)limit);
    int fd = lwi_create_new("token_shards", path);
    if (fd < 0) return LW_ERR_IO;
    unsigned char header[HEADER_BYTES] = {0};
    put_le(header, MAGIC, 4), put_le(header + 4, (uint32_t)version, 4);
    put_le(header + 8, (uint32_t)n, 4);
    lw_status st = write_all(fd, path, header, sizeof header);
    enum { BLOCK = 1 << 16 };
    unsigned char buf[BLOCK * 4];
    int per = (int)token_bytes(version);
    for (int64_t at = 0; at < n && st == LW_OK; at += BLOCK) {
        int64_t k = n - at < BLOCK ? n - at : BLOCK;
        for (int64_t i = 0; i < k; i++) put_le(buf + i * per, (uint32_t)tokens[at + i], per);
        st = write_all(fd, path, buf, (size_t)(k * per));
    }
    if (st == LW_OK && fsync(fd) != 0)
        st = lwi_fail(LW_ERR_IO, "token_shards: fsync %s: %s", path, strerror(errno));
    if (close(fd) != 0 && st == LW_OK)
        st = lwi_fail(LW_ERR_IO, "token_shards: closing %s: %s", path, strerror(errno));
    return st;
}
