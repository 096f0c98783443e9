/* json.c: a strict, bounded JSON parser for checkpoint manifests and safetensors headers
 * (RFC 8259 only: no comments, trailing commas or NaN; UTF-8 checked; duplicate keys and nesting
 * beyond 64 refused). It builds a flat node table; it does not write JSON (Lua's json.lua and
 * safetensors.c do). Every error names what is wrong and the byte offset. */
#include "base/base.h"

#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

typedef struct node {
    lw_json_type type;
    int32_t n_kids;
    int32_t first_kid; /* into kids[], after parsing */
    int32_t next;      /* next sibling while parsing, -1 at the end */
    int32_t last;      /* last child while parsing */
    int64_t key;       /* member name offset in strings, -1 if not a member */
    int64_t str;       /* string value offset in strings */
    int64_t str_len;
    double number;
} node;

struct lw_json {
    node *nodes;
    int32_t n;
    int32_t *kids; /* children of every container, each container's contiguous */
    char *strings; /* unescaped strings, each NUL-terminated */
};

typedef struct parser {
    const unsigned char *s;
    int64_t len;
    int64_t pos;
    int depth;
    node *nodes;
    int32_t n;
    int32_t cap;
    char *strings;
    int64_t str_len;
    int64_t str_cap;
} parser;

static lw_status fail_at(const parser *p, const char *what) {
    return lwi_fail(LW_ERR_INVALID, "json: %s at byte %lld", what, (long long)p->pos);
}

static void skip_ws(parser *p) {
    while (p->pos < p->len) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static lw_status new_node(parser *p, lw_json_type type, int32_t *out) {
    if (p->n == p->cap) {
        int32_t cap = p->cap ? p->cap * 2 : 64;
        node *grown = realloc(p->nodes, sizeof(node) * (size_t)cap);
        if (grown == NULL) return lwi_fail(LW_ERR_NOMEM, "json: out of memory");
        p->nodes = grown;
        p->cap = cap;
    }
    node *nd = &p->nodes[p->n];
    memset(nd, 0, sizeof *nd);
    nd->type = type;
    nd->next = nd->last = -1;
    nd->key = nd->str = -1;
    *out = p->n++;
    return LW_OK;
}

static lw_status put_bytes(parser *p, const void *b, int64_t n) {
    if (p->str_len + n + 1 > p->str_cap) {
        int64_t cap = p->str_cap ? p->str_cap * 2 : 256;
        while (cap < p->str_len + n + 1) cap *= 2;
        char *grown = realloc(p->strings, (size_t)cap);
        if (grown == NULL) return lwi_fail(LW_ERR_NOMEM, "json: out of memory");
        p->strings = grown;
        p->str_cap = cap;
    }
    memcpy(p->strings + p->str_len, b, (size_t)n);
    p->str_len += n;
    return LW_OK;
}

static lw_status put_utf8(parser *p, uint32_t cp) {
    unsigned char b[4];
    int n;
    if (cp < 0x80) b[0] = (unsigned char)cp, n = 1;
    else if (cp < 0x800) b[0] = (unsigned char)(0xC0 | cp >> 6), b[1] = (unsigned char)(0x80 | (cp & 0x3F)), n = 2;
    else if (cp < 0x10000)
        b[0] = (unsigned char)(0xE0 | cp >> 12), b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)),
        b[2] = (unsigned char)(0x80 | (cp & 0x3F)), n = 3;
    else
        b[0] = (unsigned char)(0xF0 | cp >> 18), b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F)),
        b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)), b[3] = (unsigned char)(0x80 | (cp & 0x3F)),
        n = 4;
    return put_bytes(p, b, n);
}

static int hex(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static lw_status read_u4(parser *p, uint32_t *out) {
    if (p->pos + 4 > p->len) return fail_at(p, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hex(p->s[p->pos + i]);
        if (h < 0) return fail_at(p, "bad hex digit in \\u escape");
        v = v << 4 | (uint32_t)h;
    }
    p->pos += 4;
    *out = v;
    return LW_OK;
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 if invalid (overlong, surrogate, too
 * large, truncated). */
static int utf8_length(const unsigned char *s, int64_t n) {
    unsigned char c = s[0];
    int len;
    uint32_t cp;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07;
    else return 0;
    if (n < len) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

/* Reads a string (p->pos at the opening quote) into the string buffer; *off its offset. */
static lw_status read_string(parser *p, int64_t *off, int64_t *len) {
    p->pos++;
    int64_t start = p->str_len;
    for (;;) {
        if (p->pos >= p->len) return fail_at(p, "unterminated string");
        unsigned char c = p->s[p->pos];
        lw_status st = LW_OK;
        if (c == '"') {
            p->pos++;
            break;
        } else if (c < 0x20) {
            return fail_at(p, "control character in string");
        } else if (c == '\\') {
            if (p->pos + 1 >= p->len) return fail_at(p, "unterminated escape");
            unsigned char e = p->s[p->pos + 1];
            p->pos += 2;
            const char *simple = strchr("\"\\/bfnrt", e);
            if (e != 'u' && (simple == NULL || e == '\0')) {
                p->pos -= 2;
                return fail_at(p, "bad escape");
            }
            if (e == 'u') {
                uint32_t cp;
                if ((st = read_u4(p, &cp)) != LW_OK) return st;
                if (cp >= 0xDC00 && cp <= 0xDFFF) return fail_at(p, "lone low surrogate");
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    uint32_t lo;
                    if (p->pos + 2 > p->len || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
                        return fail_at(p, "high surrogate without its low half");
                    p->pos += 2;
                    if ((st = read_u4(p, &lo)) != LW_OK) return st;
                    if (lo < 0xDC00 || lo > 0xDFFF) return fail_at(p, "bad surrogate pair");
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                st = put_utf8(p, cp);
            } else {
                static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
                char out = to[strchr(from, e) - from];
                st = put_bytes(p, &out, 1);
            }
        } else {
            int n = utf8_length(p->s + p->pos, p->len - p->pos);
            if (n == 0) return fail_at(p, "invalid UTF-8");
            st = put_bytes(p, p->s + p->pos, n);
            p->pos += n;
        }
        if (st != LW_OK) return st;
    }
    *off = start;
    *len = p->str_len - start;
    char nul = '\0';
    return put_bytes(p, &nul, 1);
}

static lw_status read_number(parser *p, double *out) {
    int64_t start = p->pos;
    const unsigned char *s = p->s;
    if (p->pos < p->len && s[p->pos] == '-') p->pos++;
    if (p->pos >= p->len) return fail_at(p, "truncated number");
    if (s[p->pos] == '0') {
        p->pos++;
    } else if (s[p->pos] >= '1' && s[p->pos] <= '9') {
        while (p->pos < p->len && s[p->pos] >= '0' && s[p->pos] <= '9') p->pos++;
    } else {
        return fail_at(p, "bad number");
    }
    if (p->pos < p->len && s[p->pos] == '.') {
        p->pos++;
        if (p->pos >= p->len || s[p->pos] < '0' || s[p->pos] > '9')
            return fail_at(p, "digit expected after the decimal point");
        while (p->pos < p->len && s[p->pos] >= '0' && s[p->pos] <= '9') p->pos++;
    }
    if (p->pos < p->len && (s[p->pos] == 'e' || s[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < p->len && (s[p->pos] == '+' || s[p->pos] == '-')) p->pos++;
        if (p->pos >= p->len || s[p->pos] < '0' || s[p->pos] > '9')
            return fail_at(p, "digit expected in the exponent");
        while (p->pos < p->len && s[p->pos] >= '0' && s[p->pos] <= '9') p->pos++;
    }
    char buf[64];
    int64_t n = p->pos - start;
    if (n >= (int64_t)sizeof buf) return fail_at(p, "number longer than 63 characters");
    memcpy(buf, s + start, (size_t)n);
    buf[n] = '\0';
    *out = strtod(buf, NULL);
    return LW_OK;
}

static lw_status literal(parser *p, const char *word) {
    size_t n = strlen(word);
    if (p->pos + (int64_t)n > p->len || memcmp(p->s + p->pos, word, n) != 0)
        return fail_at(p, "unexpected character");
    p->pos += (int64_t)n;
    return LW_OK;
}

static void append_child(parser *p, int32_t parent, int32_t child) {
    node *par = &p->nodes[parent];
    if (par->last < 0) par->first_kid = child;
    else p->nodes[par->last].next = child;
    par->last = child;
    par->n_kids++;
}

static lw_status parse_value(parser *p, int32_t *out);

static lw_status parse_container(parser *p, bool object, int32_t *out) {
    int32_t self = -1;
    lw_status st = new_node(p, object ? LW_JSON_OBJECT : LW_JSON_ARRAY, &self);
    if (st != LW_OK) return st;
    if (++p->depth > MAX_DEPTH) return fail_at(p, "nesting deeper than 64");
    p->pos++;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == (object ? '}' : ']')) {
        p->pos++;
    } else {
        for (;;) {
            int64_t key = -1, key_len = 0;
            skip_ws(p);
            if (object) {
                if (p->pos >= p->len || p->s[p->pos] != '"') return fail_at(p, "member name expected");
                if ((st = read_string(p, &key, &key_len)) != LW_OK) return st;
                skip_ws(p);
                if (p->pos >= p->len || p->s[p->pos] != ':') return fail_at(p, "':' expected");
                p->pos++;
            }
            int32_t child;
            if ((st = parse_value(p, &child)) != LW_OK) return st;
            p->nodes[child].key = key;
            append_child(p, self, child);
            skip_ws(p);
            if (p->pos >= p->len) return fail_at(p, "unterminated container");
            unsigned char c = p->s[p->pos++];
            if (c == ',') continue;
            if (c == (object ? '}' : ']')) break;
            p->pos--;
            return fail_at(p, object ? "',' or '}' expected" : "',' or ']' expected");
        }
    }
    p->depth--;
    *out = self;
    return LW_OK;
}

static lw_status parse_value(parser *p, int32_t *out) {
    skip_ws(p);
    if (p->pos >= p->len) return fail_at(p, "value expected");
    unsigned char c = p->s[p->pos];
    lw_status st;
    if (c == '{' || c == '[') return parse_container(p, c == '{', out);
    if (c == '"') {
        if ((st = new_node(p, LW_JSON_STRING, out)) != LW_OK) return st;
        int64_t off, len;
        if ((st = read_string(p, &off, &len)) != LW_OK) return st;
        p->nodes[*out].str = off;
        p->nodes[*out].str_len = len;
        return LW_OK;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        double v = 0.0;
        if ((st = read_number(p, &v)) != LW_OK) return st;
        if ((st = new_node(p, LW_JSON_NUMBER, out)) != LW_OK) return st;
        p->nodes[*out].number = v;
        return LW_OK;
    }
    lw_json_type type = c == 't' ? LW_JSON_TRUE : c == 'f' ? LW_JSON_FALSE : LW_JSON_NULL;
    const char *word = c == 't' ? "true" : c == 'f' ? "false" : "null";
    if (c != 't' && c != 'f' && c != 'n') return fail_at(p, "unexpected character");
    if ((st = literal(p, word)) != LW_OK) return st;
    return new_node(p, type, out);
}

typedef struct key_ref {
    const char *s;
    int64_t len;
} key_ref;

static int key_cmp(const void *a, const void *b) {
    const key_ref *x = a, *y = b;
    int64_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->s, y->s, (size_t)n);
    return c != 0 ? c : (x->len > y->len) - (x->len < y->len);
}

/* Flattens the sibling lists into kids[] and refuses duplicate member names. */
static lw_status finish(lw_json *j) {
    j->kids = malloc(sizeof(int32_t) * (size_t)(j->n > 1 ? j->n : 1));
    key_ref *keys = malloc(sizeof(key_ref) * (size_t)(j->n > 1 ? j->n : 1));
    if (j->kids == NULL || keys == NULL) {
        free(keys);
        return lwi_fail(LW_ERR_NOMEM, "json: out of memory");
    }
    int32_t at = 0;
    lw_status st = LW_OK;
    for (int32_t i = 0; i < j->n && st == LW_OK; i++) {
        node *nd = &j->nodes[i];
        int32_t first = at;
        for (int32_t k = nd->n_kids > 0 ? nd->first_kid : -1; k >= 0; k = j->nodes[k].next)
            j->kids[at++] = k;
        nd->first_kid = first;
        if (nd->type != LW_JSON_OBJECT || nd->n_kids < 2) continue;
        for (int32_t k = 0; k < nd->n_kids; k++) {
            const node *member = &j->nodes[j->kids[first + k]];
            /* the name's length: up to its NUL, which may not be its end (a \u0000 inside) */
            const char *name = j->strings + member->key;
            int64_t len = (int64_t)strlen(name);
            keys[k] = (key_ref){name, len};
        }
        qsort(keys, (size_t)nd->n_kids, sizeof(key_ref), key_cmp);
        for (int32_t k = 1; k < nd->n_kids; k++)
            if (key_cmp(&keys[k - 1], &keys[k]) == 0) {
                st = lwi_fail(LW_ERR_INVALID, "json: duplicate member name '%.*s'",
                              (int)(keys[k].len > 200 ? 200 : keys[k].len), keys[k].s);
                break;
            }
    }
    free(keys);
    return st;
}

lw_status lw_json_parse(const char *text, int64_t len, lw_json **out) {
    if (out == NULL) return lwi_fail(LW_ERR_INVALID, "json: out pointer is NULL");
    *out = NULL;
    if (len < 0 || (len > 0 && text == NULL))
        return lwi_fail(LW_ERR_INVALID, "json: %lld bytes at %p", (long long)len, (const void *)text);
    if (len > (INT64_C(1) << 31))
        return lwi_fail(LW_ERR_INVALID, "json: %lld bytes is more than the 2 GiB allowed",
                        (long long)len);
    parser p;
    memset(&p, 0, sizeof p);
    p.s = (const unsigned char *)text;
    p.len = len;
    int32_t root;
    lw_status st = parse_value(&p, &root);
    if (st == LW_OK) {
        skip_ws(&p);
        if (p.pos != p.len) st = fail_at(&p, "trailing characters after the value");
    }
    lw_json *j = NULL;
    if (st == LW_OK) {
        j = calloc(1, sizeof *j);
        if (j == NULL) st = lwi_fail(LW_ERR_NOMEM, "json: out of memory");
    }
    if (st != LW_OK) {
        free(p.nodes);
        free(p.strings);
        return st;
    }
    j->nodes = p.nodes;
    j->n = p.n;
    j->strings = p.strings;
    if ((st = finish(j)) != LW_OK) {
        lw_json_free(j);
        return st;
    }
    *out = j;
    return LW_OK;
}

void lw_json_free(lw_json *j) {
    if (j == NULL) return;
    free(j->nodes);
    free(j->kids);
    free(j->strings);
    free(j);
}

static const node *get(const lw_json *j, int32_t i) {
    return (j != NULL && i >= 0 && i < j->n) ? &j->nodes[i] : NULL;
}

int32_t lw_json_count(const lw_json *j) { return j ? j->n : 0; }

lw_json_type lw_json_type_of(const lw_json *j, int32_t i) {
    const node *nd = get(j, i);
    return nd ? nd->type : LW_JSON_NULL;
}

int32_t lw_json_length(const lw_json *j, int32_t i) {
    const node *nd = get(j, i);
    return nd ? nd->n_kids : 0;
}

int32_t lw_json_child(const lw_json *j, int32_t i, int32_t k) {
    const node *nd = get(j, i);
    return (nd && k >= 0 && k < nd->n_kids) ? j->kids[nd->first_kid + k] : -1;
}

const char *lw_json_key(const lw_json *j, int32_t i, int32_t k) {
    const node *nd = get(j, i);
    if (nd == NULL || nd->type != LW_JSON_OBJECT || k < 0 || k >= nd->n_kids) return NULL;
    return j->strings + j->nodes[j->kids[nd->first_kid + k]].key;
}

int32_t lw_json_member(const lw_json *j, int32_t i, const char *key) {
    const node *nd = get(j, i);
    if (nd == NULL || nd->type != LW_JSON_OBJECT || key == NULL) return -1;
    for (int32_t k = 0; k < nd->n_kids; k++) {
        int32_t c = j->kids[nd->first_kid + k];
        if (strcmp(j->strings + j->nodes[c].key, key) == 0) return c;
    }
    return -1;
}

double lw_json_number(const lw_json *j, int32_t i) {
    const node *nd = get(j, i);
    return (nd && nd->type == LW_JSON_NUMBER) ? nd->number : 0.0;
}

const char *lw_json_string(const lw_json *j, int32_t i, int64_t *len) {
    const node *nd = get(j, i);
    if (nd == NULL || nd->type != LW_JSON_STRING) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = nd->str_len;
    return j->strings + nd->str;
}
