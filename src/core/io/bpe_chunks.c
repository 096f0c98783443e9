/* bpe_chunks.c: GPT-2's pre-tokenizer without a regex library: where each chunk of a text ends,
 * by the rules of its pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|
 * \s+(?!\S)|\s+ (docs/tokenizers.md). Code points are read as UTF-8; a byte that does not begin
 * a valid sequence is one code point of its own, neither letter, number nor space. */
#include "io/bpe.h"
#include "io/bpe_unicode.h"

enum { LETTER, NUMBER, SPACE, OTHER };

/* Whether c is in the sorted, inclusive ranges r[0 .. n). */
static bool in_ranges(const uint32_t (*r)[2], int32_t n, uint32_t c) {
    int32_t lo = 0, hi = n - 1;
    while (lo <= hi) {
        int32_t mid = (lo + hi) / 2;
        if (c < r[mid][0]) hi = mid - 1;
        else if (c > r[mid][1]) lo = mid + 1;
        else return true;
    }
    return false;
}

/* Unicode's White_Space property (what \s matches in GPT-2's and Hugging Face's regex engines). */
static bool is_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
           c == 0x205f || c == 0x3000;
}

/* The class of the code point at t[i] (i < n) and its length in bytes ([out] *len). */
static int class_at(const unsigned char *t, int64_t n, int64_t i, int64_t *len) {
    unsigned b = t[i];
    *len = 1;
    if (b < 0x80) {
        if ((b | 0x20) >= 'a' && (b | 0x20) <= 'z') return LETTER;
        if (b >= '0' && b <= '9') return NUMBER;
        return is_space(b) ? SPACE : OTHER;
    }
    /* the well-formed sequences of Unicode's table 3-7: no overlong forms, no surrogates */
    int need;
    uint32_t c, lo = 0x80, hi = 0xbf;
    if (b >= 0xc2 && b <= 0xdf) need = 1, c = b & 0x1f;
    else if (b >= 0xe0 && b <= 0xef) need = 2, c = b & 0x0f;
    else if (b >= 0xf0 && b <= 0xf4) need = 3, c = b & 0x07;
    else return OTHER;
    if (b == 0xe0) lo = 0xa0;
    if (b == 0xed) hi = 0x9f;
    if (b == 0xf0) lo = 0x90;
    if (b == 0xf4) hi = 0x8f;
    if (i + need >= n) return OTHER; /* cut short by the end of the text */
    for (int k = 1; k <= need; k++) {
        unsigned x = t[i + k];
        if (x < (k == 1 ? lo : 0x80) || x > (k == 1 ? hi : 0xbf)) return OTHER;
        c = c << 6 | (x & 0x3f);
    }
    *len = need + 1;
    if (is_space(c)) return SPACE;
    int32_t n_letters = (int32_t)(sizeof bpe_letters / sizeof bpe_letters[0]);
    int32_t n_numbers = (int32_t)(sizeof bpe_numbers / sizeof bpe_numbers[0]);
    if (in_ranges(bpe_letters, n_letters, c)) return LETTER;
    if (in_ranges(bpe_numbers, n_numbers, c)) return NUMBER;
    return OTHER;
}

/* The end of the run of code points of class k that starts at i. */
static int64_t run_end(const unsigned char *t, int64_t n, int64_t i, int k) {
    int64_t len;
    while (i < n && class_at(t, n, i, &len) == k) i += len;
    return i;
}

/* The length of a contraction ('s 't 're 've 'm 'll 'd, lower case) at t[i], or 0. */
static int64_t contraction(const unsigned char *t, int64_t n, int64_t i) {
    if (t[i] != '\'' || i + 1 >= n) return 0;
    unsigned a = t[i + 1], b = i + 2 < n ? t[i + 2] : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

int64_t lw_bpe_chunk(const char *text, int64_t len, int64_t at) {
    if (text == NULL || at < 0 || at >= len) return at;
    const unsigned char *t = (const unsigned char *)text;
    int64_t c = contraction(t, len, at);
    if (c > 0) return at + c;
    int64_t step;
    /* " ?" then a run of letters, numbers or others: the space joins what follows it */
    if (t[at] == ' ' && at + 1 < len) {
        int k = class_at(t, len, at + 1, &step);
        if (k != SPACE) return run_end(t, len, at + 1, k);
    }
    int k = class_at(t, len, at, &step);
    if (k != SPACE) return run_end(t, len, at, k);
    /* a run of spaces: \s+(?!\S) leaves its last one to what follows it (which a space then
     * joins); a single space before a non-space is \s+ alone */
    int64_t end = at, last = at;
    while (end < len && class_at(t, len, end, &step) == SPACE) last = end, end += step;
    if (end == len || last == at) return end;
    return last;
}
