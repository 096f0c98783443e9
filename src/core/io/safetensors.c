/* safetensors.c: reading and writing safetensors files (an 8-byte little-endian header length,
 * a JSON header, then the tensor bytes). Reading is strict and bounded, so a truncated, flipped
 * or hostile file gives an error naming the file and the problem, never a read out of bounds;
 * only a regular file is read (never a FIFO or device). Writing creates a new file at its name,
 * never writing through a link or another name of the file that was there. */
#define _DEFAULT_SOURCE /* fdopen */
#include "io/io.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_HEADER (INT64_C(100) << 20)

typedef struct entry {
    char *name; /* [owned] */
    char dtype[8];
    int32_t ndim;
    int64_t shape[8];
    int64_t begin; /* within the data section */
    int64_t end;
} entry;

struct lw_safetensors {
    char *what;            /* [owned] file name for messages */
    unsigned char *bytes;  /* [owned] the whole file */
    int64_t n_bytes;
    const unsigned char *data; /* the data section */
    int32_t n;
    entry *entries;        /* [owned] in header order */
    const entry **by_name; /* [owned] [n] the entries sorted by name, for find's search */
    int32_t n_meta;
    char **meta_keys;      /* [owned] */
    char **meta_values;    /* [owned] */
};

static const struct {
    const char *name;
    int size;
} DTYPES[] = {{"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F64", 8}, {"I64", 8},
              {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U8", 1},  {"BOOL", 1}};

static int dtype_size(const char *name) {
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
        if (strcmp(DTYPES[i].name, name) == 0) return DTYPES[i].size;
    return 0;
}

void lw_safetensors_free(lw_safetensors *st) {
    if (st == NULL) return;
    for (int32_t i = 0; i < st->n; i++) free(st->entries[i].name);
    for (int32_t i = 0; i < st->n_meta; i++) free(st->meta_keys[i]), free(st->meta_values[i]);
    free(st->entries);
    free((void *)st->by_name);
    free(st->meta_keys);
    free(st->meta_values);
    free(st->bytes);
    free(st->what);
    free(st);
}

#define BAD(...) (st = lwi_fail(LW_ERR_INVALID, __VA_ARGS__))

/* A non-negative integer that a double represents exactly. */
static bool whole(const lw_json *j, int32_t node, int64_t *out) {
    if (lw_json_type_of(j, node) != LW_JSON_NUMBER) return false;
    double v = lw_json_number(j, node);
    if (!(v >= 0 && v <= 9007199254740992.0) || v != floor(v)) return false;
    *out = (int64_t)v;
    return true;
}

static lw_status read_entry(lw_safetensors *s, const lw_json *j, int32_t value, const char *name,
                            int64_t data_size, entry *e) {
    lw_status st = LW_OK;
    int32_t dt = lw_json_member(j, value, "dtype"), sh = lw_json_member(j, value, "shape");
    int32_t off = lw_json_member(j, value, "data_offsets");
    if (lw_json_type_of(j, value) != LW_JSON_OBJECT || dt < 0 || sh < 0 || off < 0 ||
        lw_json_length(j, value) != 3)
        return BAD("safetensors: %s: tensor '%s' needs exactly dtype, shape and data_offsets",
                   s->what, name);
    const char *dtype = lw_json_string(j, dt, NULL);
    int size = dtype ? dtype_size(dtype) : 0;
    if (size == 0)
        return BAD("safetensors: %s: tensor '%s' has unknown dtype %s", s->what, name,
                   dtype ? dtype : "(not a string)");
    strcpy(e->dtype, dtype);
    if (lw_json_type_of(j, sh) != LW_JSON_ARRAY || lw_json_length(j, sh) > 8)
        return BAD("safetensors: %s: tensor '%s' has a shape that is not a list of at most 8 "
                   "sizes", s->what, name);
    e->ndim = lw_json_length(j, sh);
    int64_t numel = 1;
    for (int32_t d = 0; d < e->ndim; d++) {
        if (!whole(j, lw_json_child(j, sh, d), &e->shape[d]))
            return BAD("safetensors: %s: tensor '%s' has a size that is not a whole number",
                       s->what, name);
        if (e->shape[d] != 0 && numel > data_size / e->shape[d] + 1)
            return BAD("safetensors: %s: tensor '%s' is larger than the file", s->what, name);
        numel *= e->shape[d];
    }
    if (lw_json_type_of(j, off) != LW_JSON_ARRAY || lw_json_length(j, off) != 2 ||
        !whole(j, lw_json_child(j, off, 0), &e->begin) ||
        !whole(j, lw_json_child(j, off, 1), &e->end))
        return BAD("safetensors: %s: tensor '%s' needs data_offsets [begin, end]", s->what, name);
    if (e->begin > e->end || e->end > data_size)
        return BAD("safetensors: %s: tensor '%s' bytes [%lld, %lld) fall outside the %lld-byte "
                   "data section (truncated file?)", s->what, name, (long long)e->begin,
                   (long long)e->end, (long long)data_size);
    if (e->end - e->begin != numel * size)
        return BAD("safetensors: %s: tensor '%s' has %lld bytes but %s x %lld elements need "
                   "%lld", s->what, name, (long long)(e->end - e->begin), dtype,
                   (long long)numel, (long long)(numel * size));
    e->name = strdup(name);
    return e->name ? LW_OK : lwi_fail(LW_ERR_NOMEM, "safetensors: out of memory");
}

static lw_status read_metadata(lw_safetensors *s, const lw_json *j, int32_t value) {
    lw_status st = LW_OK;
    if (lw_json_type_of(j, value) != LW_JSON_OBJECT)
        return BAD("safetensors: %s: __metadata__ is not an object", s->what);
    int32_t n = lw_json_length(j, value);
    s->meta_keys = calloc((size_t)(n ? n : 1), sizeof(char *));
    s->meta_values = calloc((size_t)(n ? n : 1), sizeof(char *));
    if (s->meta_keys == NULL || s->meta_values == NULL)
        return lwi_fail(LW_ERR_NOMEM, "safetensors: out of memory");
    for (int32_t k = 0; k < n; k++) {
        const char *v = lw_json_string(j, lw_json_child(j, value, k), NULL);
        if (v == NULL)
            return BAD("safetensors: %s: __metadata__ value of '%s' is not a string", s->what,
                       lw_json_key(j, value, k));
        s->meta_keys[k] = strdup(lw_json_key(j, value, k));
        s->meta_values[k] = strdup(v);
        s->n_meta++;
        if (!s->meta_keys[k] || !s->meta_values[k])
            return lwi_fail(LW_ERR_NOMEM, "safetensors: out of memory");
    }
    return LW_OK;
}

static int by_begin(const void *a, const void *b) {
    const entry *x = *(const entry *const *)a, *y = *(const entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* The tensors' byte ranges must tile the data section: no gap, no overlap, nothing left. */
static lw_status check_tiling(lw_safetensors *s, int64_t data_size) {
    lw_status st = LW_OK;
    entry **order = malloc(sizeof(entry *) * (size_t)(s->n ? s->n : 1));
    if (order == NULL) return lwi_fail(LW_ERR_NOMEM, "safetensors: out of memory");
    for (int32_t i = 0; i < s->n; i++) order[i] = &s->entries[i];
    qsort(order, (size_t)s->n, sizeof(entry *), by_begin);
    int64_t at = 0;
    for (int32_t i = 0; i < s->n && st == LW_OK; i++) {
        if (order[i]->begin != at)
            BAD("safetensors: %s: tensor '%s' starts at byte %lld, expected %lld (gap or "
                "overlap)", s->what, order[i]->name, (long long)order[i]->begin, (long long)at);
        at = order[i]->end;
    }
    if (st == LW_OK && at != data_size)
        BAD("safetensors: %s: %lld bytes follow the last tensor", s->what,
            (long long)(data_size - at));
    free(order);
    return st;
}

static int by_name(const void *a, const void *b) {
    return strcmp((*(const entry *const *)a)->name, (*(const entry *const *)b)->name);
}

/* The name index that lets find search in log n: a file of many tensors, each looked up by
 * name, would take time quadratic in their number with a linear search. The header's names are
 * distinct (the JSON parser refuses duplicate members). */
static lw_status index_names(lw_safetensors *s) {
    s->by_name = malloc(sizeof(entry *) * (size_t)(s->n ? s->n : 1));
    if (s->by_name == NULL) return lwi_fail(LW_ERR_NOMEM, "safetensors: out of memory");
    for (int32_t i = 0; i < s->n; i++)
        s->by_name[i] = &s->entries[i];
    qsort(s->by_name, (size_t)s->n, sizeof(entry *), by_name);
    return LW_OK;
}

static uint64_t le64(const unsigned char *b) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
    return v;
}

/* Takes ownership of bytes. */
static lw_status parse_owned(unsigned char *bytes, int64_t n, const char *what,
                             lw_safetensors **out) {
    lw_status st = LW_OK;
    lw_json *j = NULL;
    lw_safetensors *s = calloc(1, sizeof *s);
    if (s == NULL || (s->what = strdup(what ? what : "(memory)")) == NULL) {
        free(bytes);
        lw_safetensors_free(s);
        return lwi_fail(LW_ERR_NOMEM, "safetensors: out of memory");
    }
    s->bytes = bytes;
    s->n_bytes = n;
    if (n < 8) {
        BAD("safetensors: %s: %lld bytes is too short for a header", s->what, (long long)n);
        goto fail;
    }
    uint64_t h = le64(bytes);
    if (h > (uint64_t)MAX_HEADER || (int64_t)h > n - 8) {
        BAD("safetensors: %s: header length %llu exceeds the file (%lld bytes) or the 100 MB "
            "limit", s->what, (unsigned long long)h, (long long)n);
        goto fail;
    }
    if ((st = lw_json_parse((const char *)bytes + 8, (int64_t)h, &j)) != LW_OK) {
        BAD("safetensors: %s: header: %s", s->what, lw_last_error());
        goto fail;
    }
    if (lw_json_type_of(j, 0) != LW_JSON_OBJECT) {
        BAD("safetensors: %s: header is not a JSON object", s->what);
        goto fail;
    }
    int64_t data_size = n - 8 - (int64_t)h;
    s->data = bytes + 8 + h;
    int32_t members = lw_json_length(j, 0);
    s->entries = calloc((size_t)(members ? members : 1), sizeof(entry));
    if (s->entries == NULL) {
        st = lwi_fail(LW_ERR_NOMEM, "safetensors: out of memory");
        goto fail;
    }
    for (int32_t k = 0; k < members && st == LW_OK; k++) {
        const char *name = lw_json_key(j, 0, k);
        int32_t value = lw_json_child(j, 0, k);
        if (strcmp(name, "__metadata__") == 0) {
            st = read_metadata(s, j, value);
        } else {
            st = read_entry(s, j, value, name, data_size, &s->entries[s->n]);
            if (st == LW_OK) s->n++;
        }
    }
    if (st == LW_OK) st = check_tiling(s, data_size);
    if (st == LW_OK) st = index_names(s);
    if (st != LW_OK) goto fail;
    lw_json_free(j);
    *out = s;
    return LW_OK;
fail:
    lw_json_free(j);
    lw_safetensors_free(s);
    return st;
}

lw_status lw_safetensors_parse(const void *bytes, int64_t n, const char *what,
                               lw_safetensors **out) {
    if (out == NULL) return lwi_fail(LW_ERR_INVALID, "safetensors: out pointer is NULL");
    *out = NULL;
    if (n < 0 || (n > 0 && bytes == NULL))
        return lwi_fail(LW_ERR_INVALID, "safetensors: %lld bytes at %p", (long long)n, bytes);
    unsigned char *copy = malloc((size_t)(n ? n : 1));
    if (copy == NULL) return lwi_fail(LW_ERR_NOMEM, "safetensors: out of memory");
    if (n > 0) memcpy(copy, bytes, (size_t)n);
    return parse_owned(copy, n, what, out);
}

lw_status lw_safetensors_open(const char *path, lw_safetensors **out) {
    if (out == NULL || path == NULL)
        return lwi_fail(LW_ERR_INVALID, "safetensors: path and out must not be NULL");
    *out = NULL;
    /* a FIFO or device at path is refused before anything waits on it */
    const int fd = lwi_open_regular("safetensors", path, true);
    if (fd < 0) return LW_ERR_IO;
    FILE *f = fdopen(fd, "rb");
    if (f == NULL) {
        close(fd);
        return lwi_fail(LW_ERR_IO, "safetensors: cannot open %s: %s", path, strerror(errno));
    }
    struct stat info;
    if (fstat(fd, &info) != 0) {
        fclose(f);
        return lwi_fail(LW_ERR_IO, "safetensors: cannot look at %s: %s", path, strerror(errno));
    }
    int64_t n = (int64_t)info.st_size;
    unsigned char *bytes = malloc((size_t)(n ? n : 1));
    if (bytes == NULL) {
        fclose(f);
        return lwi_fail(LW_ERR_NOMEM, "safetensors: out of memory for %s (%lld bytes)", path,
                        (long long)n);
    }
    size_t got = n > 0 ? fread(bytes, 1, (size_t)n, f) : 0;
    fclose(f);
    if ((int64_t)got != n) {
        free(bytes);
        return lwi_fail(LW_ERR_IO, "safetensors: %s: read %zu of %lld bytes", path, got,
                        (long long)n);
    }
    return parse_owned(bytes, n, path, out);
}

int32_t lw_safetensors_count(const lw_safetensors *s) { return s ? s->n : 0; }

lw_status lw_safetensors_tensor(const lw_safetensors *s, int32_t i, lw_tensor_view *out) {
    if (s == NULL || out == NULL) return lwi_fail(LW_ERR_INVALID, "safetensors: NULL argument");
    if (i < 0 || i >= s->n)
        return lwi_fail(LW_ERR_RANGE, "safetensors: tensor index %d out of range [0, %d)", i, s->n);
    const entry *e = &s->entries[i];
    memset(out, 0, sizeof *out);
    out->name = e->name;
    out->dtype = e->dtype;
    out->ndim = e->ndim;
    memcpy(out->shape, e->shape, sizeof out->shape);
    out->data = s->data + e->begin;
    out->bytes = e->end - e->begin;
    return LW_OK;
}

lw_status lw_safetensors_find(const lw_safetensors *s, const char *name, int32_t *i) {
    if (s == NULL || name == NULL || i == NULL)
        return lwi_fail(LW_ERR_INVALID, "safetensors: NULL argument");
    int32_t lo = 0, hi = s->n; /* the name, if there, is at by_name[lo, hi) */
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        int c = strcmp(s->by_name[mid]->name, name);
        if (c == 0) {
            *i = (int32_t)(s->by_name[mid] - s->entries);
            return LW_OK;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lwi_fail(LW_ERR_RANGE, "safetensors: %s has no tensor named '%s'", s->what, name);
}

const char *lw_safetensors_metadata(const lw_safetensors *s, const char *key) {
    if (s == NULL || key == NULL) return NULL;
    for (int32_t k = 0; k < s->n_meta; k++)
        if (strcmp(s->meta_keys[k], key) == 0) return s->meta_values[k];
    return NULL;
}

/* ---- writing ------------------------------------------------------------------------------- */

typedef struct text {
    char *s;
    size_t n, cap;
    bool failed;
} text;

static void add(text *t, const char *s, size_t n) {
    if (t->failed) return;
    if (t->n + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 1024;
        while (cap < t->n + n + 1) cap *= 2;
        char *grown = realloc(t->s, cap);
        if (grown == NULL) {
            t->failed = true;
            return;
        }
        t->s = grown;
        t->cap = cap;
    }
    memcpy(t->s + t->n, s, n);
    t->n += n;
    t->s[t->n] = '\0';
}

static void add_str(text *t, const char *s) { add(t, s, strlen(s)); }

/* A JSON string literal; control characters escaped, everything else as it is (UTF-8). */
static void add_quoted(text *t, const char *s) {
    add(t, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char buf[8];
        if (*p == '"' || *p == '\\') {
            buf[0] = '\\', buf[1] = (char)*p;
            add(t, buf, 2);
        } else if (*p < 0x20) {
            snprintf(buf, sizeof buf, "\\u%04x", *p);
            add(t, buf, 6);
        } else {
            add(t, (const char *)p, 1);
        }
    }
    add(t, "\"", 1);
}

static lw_status write_all(int fd, const void *data, int64_t n, const char *path, uint32_t *crc) {
    const char *p = data;
    if (crc) *crc = lw_crc32c(*crc, data, n);
    while (n > 0) {
        ssize_t w = write(fd, p, (size_t)(n > (1 << 30) ? (1 << 30) : n));
        if (w < 0) {
            if (errno == EINTR) continue;
            return lwi_fail(LW_ERR_IO, "safetensors: writing %s: %s", path, strerror(errno));
        }
        p += w;
        n -= w;
    }
    return LW_OK;
}

lw_status lw_safetensors_write(const char *path, const lw_tensor_view *tensors, int32_t n,
                               const char *const *keys, const char *const *values,
                               int32_t n_meta, int64_t *bytes, uint32_t *crc) {
    if (path == NULL || (n > 0 && tensors == NULL) || n < 0 || n_meta < 0 ||
        (n_meta > 0 && (keys == NULL || values == NULL)))
        return lwi_fail(LW_ERR_INVALID, "safetensors: bad arguments to write");
    text h = {0};
    add_str(&h, "{");
    if (n_meta > 0) {
        add_str(&h, "\"__metadata__\":{");
        for (int32_t k = 0; k < n_meta; k++) {
            if (k) add_str(&h, ",");
            add_quoted(&h, keys[k]);
            add_str(&h, ":");
            add_quoted(&h, values[k]);
        }
        add_str(&h, "}");
    }
    int64_t at = 0;
    for (int32_t i = 0; i < n; i++) {
        const lw_tensor_view *t = &tensors[i];
        int size = t->dtype ? dtype_size(t->dtype) : 0;
        int64_t numel = 1;
        for (int32_t d = 0; d < t->ndim && d < 8; d++) numel *= t->shape[d];
        if (t->name == NULL || size == 0 || t->ndim < 0 || t->ndim > 8 || numel * size != t->bytes ||
            (t->bytes > 0 && t->data == NULL)) {
            free(h.s);
            return lwi_fail(LW_ERR_INVALID, "safetensors: tensor %d ('%s') has a bad dtype, "
                            "shape or size", i, t->name ? t->name : "?");
        }
        char buf[64];
        if (i || n_meta > 0) add_str(&h, ",");
        add_quoted(&h, t->name);
        add_str(&h, ":{\"dtype\":");
        add_quoted(&h, t->dtype);
        add_str(&h, ",\"shape\":[");
        for (int32_t d = 0; d < t->ndim; d++) {
            snprintf(buf, sizeof buf, d ? ",%lld" : "%lld", (long long)t->shape[d]);
            add_str(&h, buf);
        }
        snprintf(buf, sizeof buf, "],\"data_offsets\":[%lld,%lld]}", (long long)at,
                 (long long)(at + t->bytes));
        add_str(&h, buf);
        at += t->bytes;
    }
    add_str(&h, "}");
    while (!h.failed && h.n % 8 != 0) add_str(&h, " "); /* data 8-byte aligned */
    if (h.failed) {
        free(h.s);
        return lwi_fail(LW_ERR_NOMEM, "safetensors: out of memory");
    }
    int fd = lwi_create_new("safetensors", path);
    if (fd < 0) {
        free(h.s);
        return LW_ERR_IO;
    }
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)h.n >> (8 * i));
    uint32_t sum = 0;
    lw_status st = write_all(fd, len, 8, path, &sum);
    if (st == LW_OK) st = write_all(fd, h.s, (int64_t)h.n, path, &sum);
    for (int32_t i = 0; i < n && st == LW_OK; i++)
        st = write_all(fd, tensors[i].data, tensors[i].bytes, path, &sum);
    if (st == LW_OK && fsync(fd) != 0)
        st = lwi_fail(LW_ERR_IO, "safetensors: fsync %s: %s", path, strerror(errno));
    if (close(fd) != 0 && st == LW_OK)
        st = lwi_fail(LW_ERR_IO, "safetensors: closing %s: %s", path, strerror(errno));
    if (st == LW_OK) {
        if (bytes) *bytes = 8 + (int64_t)h.n + at;
        if (crc) *crc = sum;
    }
    free(h.s);
    return st;
}
