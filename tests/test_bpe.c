/* test_bpe.c: the byte-level BPE core: GPT-2's pre-tokenizer's chunks on crafted strings
 * (contractions, spaces before words, runs of spaces, numbers, punctuation, non-ASCII letters,
 * numbers and spaces, invalid UTF-8), training on tiny corpora against merges worked out by
 * hand (ties, the minimum count, special tokens), merges applied in rank order (where a greedy
 * left-to-right merge differs), round trips of arbitrary bytes, errors that name the value, and
 * token shards written and read back. */
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* The chunks of text joined by '|' into out. */
static const char *chunks(const char *text) {
    static char out[512];
    int64_t len = (int64_t)strlen(text), at = 0;
    size_t k = 0;
    while (at < len) {
        int64_t end = lw_bpe_chunk(text, len, at);
        if (k > 0) out[k++] = '|';
        memcpy(out + k, text + at, (size_t)(end - at));
        k += (size_t)(end - at);
        at = end;
    }
    out[k] = 0;
    return out;
}

#define CHECK_CHUNKS(text, want)                                                                   \
    do {                                                                                           \
        const char *got = chunks(text);                                                            \
        if (strcmp(got, want) != 0) fprintf(stderr, "chunks of \"%s\": \"%s\"\n", text, got);    \
        CHECK(strcmp(got, want) == 0);                                                             \
    } while (0)

static void test_chunks(void) {
    CHECK_CHUNKS("Hello world", "Hello| world");
    CHECK_CHUNKS("I'm sure they're here, don't go", "I|'m| sure| they|'re| here|,| don|'t| go");
    CHECK_CHUNKS("'s 't 're 've 'm 'll 'd", "'s| '|t| '|re| '|ve| '|m| '|ll| '|d");
    CHECK_CHUNKS("'S 'sam ''s", "'|S| '|sam| ''|s"); /* upper case is no contraction */
    CHECK_CHUNKS("'sam", "'s|am");
    CHECK_CHUNKS("abc123 456 7", "abc|123| 456| 7");
    CHECK_CHUNKS("Hi!!! ... (x)", "Hi|!!!| ...| (|x|)");
    /* runs of spaces: all but the last, which joins the word after it */
    CHECK_CHUNKS("a  b", "a| | b");
    CHECK_CHUNKS("a    b", "a|   | b");
    CHECK_CHUNKS("a \n\nb", "a| \n|\n|b");
    CHECK_CHUNKS("a\nb", "a|\n|b");
    CHECK_CHUNKS("a\tb", "a|\t|b");
    CHECK_CHUNKS("end   ", "end|   ");
    CHECK_CHUNKS("   ", "   ");
    CHECK_CHUNKS(" ", " ");
    CHECK_CHUNKS("x \n", "x| \n");
    CHECK_CHUNKS(" \x01", " \x01"); /* a control character is punctuation's class */
    /* Unicode: letters, numbers (the superscript two is N), spaces (no-break space) */
    CHECK_CHUNKS("caf\xc3\xa9 \xc3\xbc" "ber", "caf\xc3\xa9| \xc3\xbc" "ber");
    CHECK_CHUNKS("x\xc2\xb2 \xd9\xa3", "x|\xc2\xb2| \xd9\xa3");
    CHECK_CHUNKS("a\xc2\xa0" "b", "a|\xc2\xa0|b");
    CHECK_CHUNKS("\xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x91\x8b!", /* CJK letters, an emoji */
                 "\xe4\xbd\xa0\xe5\xa5\xbd| \xf0\x9f\x91\x8b!");
    CHECK_CHUNKS("\xe2\x80\x9cHi\xe2\x80\x9d", "\xe2\x80\x9c|Hi|\xe2\x80\x9d");
    /* invalid UTF-8: every byte that begins no valid sequence is punctuation's class */
    CHECK_CHUNKS("ab\xff\xfe" "cd", "ab|\xff\xfe|cd");
    CHECK_CHUNKS("a\xc3", "a|\xc3");
    CHECK_CHUNKS("a\xc3(", "a|\xc3(");
    CHECK_CHUNKS("\xc0\xaf" "x", "\xc0\xaf|x");         /* an overlong '/' */
    CHECK_CHUNKS("\xed\xa0\x80" "x", "\xed\xa0\x80|x"); /* a surrogate */
    CHECK_EQ(lw_bpe_chunk("abc", 3, 3), 3);
    CHECK_EQ(lw_bpe_chunk("abc", 3, -1), -1);
}

/* The tokenizer trained on text with vocab and min_count (one special, "<|endoftext|>"). */
static lw_bpe *trained(const char *text, int32_t vocab, int64_t min_count) {
    const char *special[] = {"<|endoftext|>"};
    lw_bpe_trainer *t = NULL;
    lw_bpe *b = NULL;
    CHECK_OK(lw_bpe_trainer_new(vocab, min_count, special, 1, &t));
    CHECK_OK(lw_bpe_trainer_add_text(t, text, (int64_t)strlen(text)));
    CHECK_OK(lw_bpe_trainer_train(t, &b));
    lw_bpe_trainer_free(t);
    return b;
}

static void check_merges(const lw_bpe *b, const int32_t (*want)[2], int32_t n) {
    CHECK_EQ(lw_bpe_merge_count(b), n);
    for (int32_t r = 0; r < n && r < lw_bpe_merge_count(b); r++) {
        int32_t left, right, id;
        CHECK_OK(lw_bpe_merge(b, r, &left, &right, &id));
        CHECK_EQ(left, want[r][0]);
        CHECK_EQ(right, want[r][1]);
        CHECK_EQ(id, 256 + r);
    }
}

static void check_encode(lw_bpe *b, const char *text, bool special, const int32_t *want,
                         int64_t n) {
    int32_t ids[256];
    int64_t got = -1;
    CHECK_OK(lw_bpe_encode(b, text, (int64_t)strlen(text), special, ids, &got));
    CHECK_EQ(got, n);
    for (int64_t i = 0; i < n && i < got; i++) CHECK_EQ(ids[i], want[i]);
}

static void test_train(void) {
    /* one chunk: aa 4 times, then ab and (aa, a) twice each: the smaller left id (a) wins the
     * tie; then (aa, ab) twice; every other pair once, below min_count 2 */
    lw_bpe *b = trained("aaabdaaabac", 300, 2);
    const int32_t one[][2] = {{'a', 'a'}, {'a', 'b'}, {256, 257}};
    check_merges(b, one, 3);
    CHECK_EQ(lw_bpe_vocab(b), 260); /* fewer merges than asked: the special follows them */
    int32_t id;
    int64_t len;
    const char *text = lw_bpe_special(b, 0, &id, &len);
    CHECK(text != NULL && len == 13 && memcmp(text, "<|endoftext|>", 13) == 0);
    CHECK_EQ(id, 259);
    const int32_t abc[] = {258, 'd', 258, 'a', 'c'};
    check_encode(b, "aaabdaaabac", true, abc, 5);
    lw_bpe_free(b);

    /* chunks counted with their frequencies: "low", " low" x2, " lower", " lowest". (l, o) and
     * (o, w) tie at 5: l < o, so lo (256); then (lo, w) 5: low (257); (' ', low) 4: " low"
     * (258); (" low", e) 2: " lowe" (259); every pair left (e r, e s, s t, ...) is seen once */
    b = trained("low low low lower lowest", 300, 2);
    const int32_t two[][2] = {{'l', 'o'}, {256, 'w'}, {' ', 257}, {258, 'e'}};
    check_merges(b, two, 4);
    const int32_t lowest[] = {257, 259, 's', 't'};
    check_encode(b, "low lowest", true, lowest, 4);
    lw_bpe_free(b);

    /* min_count 1 merges pairs seen once too; vocab caps the merges; text is cut at the
     * special token, so no pair spans it */
    b = trained("ab<|endoftext|>cd", 258, 1);
    const int32_t three[][2] = {{'a', 'b'}};
    check_merges(b, three, 1);
    CHECK_EQ(lw_bpe_vocab(b), 258);
    const int32_t split[] = {256, 257, 'c', 'd'};
    check_encode(b, "ab<|endoftext|>cd", true, split, 4);
    lw_bpe_free(b);

    /* nothing to learn: empty text */
    b = trained("", 1000, 2);
    CHECK_EQ(lw_bpe_merge_count(b), 0);
    CHECK_EQ(lw_bpe_vocab(b), 257);
    lw_bpe_free(b);
}

static void test_rank_order(void) {
    lw_bpe *b = NULL;
    CHECK_OK(lw_bpe_new(NULL, &b));
    CHECK_OK(lw_bpe_add_merge(b, 'b', 'c', 256)); /* rank 0 */
    CHECK_OK(lw_bpe_add_merge(b, 'a', 'b', 257)); /* rank 1 */
    CHECK_OK(lw_bpe_add_merge(b, 'a', 'a', 258));
    CHECK_OK(lw_bpe_add_merge(b, 257, 256, 259));
    /* "abc": (b, c) ranks first, so a stays alone; left to right, (a, b) would have won */
    const int32_t abc[] = {'a', 256};
    check_encode(b, "abc", true, abc, 2);
    const int32_t abbc[] = {259}; /* ab and bc, then (ab, bc) */
    check_encode(b, "abbc", true, abbc, 1);
    const int32_t ababc[] = {257, 'a', 256}; /* (b, c) first, then (a, b) at the left */
    check_encode(b, "ababc", true, ababc, 3);
    /* occurrences of one pair left to right, without overlap */
    const int32_t aaa[] = {258, 'a'}, aaaa[] = {258, 258};
    check_encode(b, "aaa", true, aaa, 2);
    check_encode(b, "aaaa", true, aaaa, 2);
    /* a merge never crosses chunks: " abc" is one chunk, "ab" then "!" two */
    const int32_t two[] = {257, '!'};
    check_encode(b, "ab!", true, two, 2);
    lw_bpe_free(b);
}

/* decode(encode(text)) == text for n bytes, with and without special tokens. */
static void round_trip(lw_bpe *b, const char *text, int64_t n) {
    int32_t *ids = malloc((size_t)(n + 1) * sizeof *ids);
    char *back = malloc((size_t)n + 1);
    for (int special = 0; special < 2; special++) {
        int64_t k = -1, len = -1;
        CHECK_OK(lw_bpe_encode(b, text, n, special, ids, &k));
        CHECK(k >= 0 && k <= n);
        CHECK_OK(lw_bpe_decode(b, ids, k, NULL, 0, &len));
        CHECK_EQ(len, n);
        CHECK_OK(lw_bpe_decode(b, ids, k, back, n, &len));
        CHECK(len == n && (n == 0 || memcmp(back, text, (size_t)n) == 0));
    }
    free(ids);
    free(back);
}

static void test_round_trip(void) {
    const char *corpus = "In the beginning God created the heaven and the earth. And the earth "
                         "was without form, and void; and darkness was upon the face of the "
                         "deep.\n\n  It's 1611: caf\xc3\xa9 na\xc3\xafve \xe2\x80\x94 done.\n";
    lw_bpe *b = trained(corpus, 400, 2);
    CHECK(lw_bpe_merge_count(b) > 10);
    round_trip(b, corpus, (int64_t)strlen(corpus));
    round_trip(b, "", 0);
    static const char odd[] = "\xff\xfe\xc3(\xed\xa0\x80 the\x00 end"; /* invalid UTF-8, a NUL */
    round_trip(b, odd, (int64_t)sizeof odd - 1);
    round_trip(b, "the<|endoftext|>the <|endoftext|", 32);
    char all[1024];
    unsigned x = 7;
    for (int i = 0; i < 1024; i++)
        all[i] = (char)(i < 256 ? (unsigned)i : (x = x * 1103515245 + 12345) >> 16);
    round_trip(b, all, 1024);
    /* the special token's text is its id when asked, text otherwise */
    int32_t ids[64];
    int64_t n;
    CHECK_OK(lw_bpe_encode(b, "a<|endoftext|>", 14, true, ids, &n));
    CHECK(n == 2 && ids[0] == 'a' && ids[1] == lw_bpe_vocab(b) - 1);
    CHECK_OK(lw_bpe_encode(b, "a<|endoftext|>", 14, false, ids, &n));
    CHECK(n > 2);
    for (int64_t i = 0; i < n; i++) CHECK(ids[i] != lw_bpe_vocab(b) - 1);
    lw_bpe_free(b);
}

static void test_errors(void) {
    lw_bpe *b = NULL;
    int32_t bytes[256];
    for (int i = 0; i < 256; i++) bytes[i] = 1000 - i;
    bytes[7] = bytes[8];
    CHECK_FAILS(lw_bpe_new(bytes, &b), LW_ERR_INVALID,
                "the token 992 of byte 8 is a token already");
    bytes[7] = -1;
    CHECK_FAILS(lw_bpe_new(bytes, &b), LW_ERR_INVALID, "the token -1 of byte 7 is outside");
    bytes[7] = 993;
    CHECK_OK(lw_bpe_new(bytes, &b));
    CHECK_EQ(lw_bpe_vocab(b), 1001);
    int64_t len;
    CHECK(lw_bpe_token(b, 5, &len) == NULL);
    CHECK(lw_bpe_token(b, 1000, &len) != NULL && len == 1);
    CHECK_FAILS(lw_bpe_add_merge(b, 1000, 5, 2000), LW_ERR_INVALID,
                "merge 0 (1000 5 -> 2000): token 5 is not in the vocabulary");
    CHECK_FAILS(lw_bpe_add_merge(b, 1000, 999, 998), LW_ERR_INVALID,
                "the new token 998 is a token already");
    CHECK_OK(lw_bpe_add_merge(b, 1000, 999, 5));
    CHECK_FAILS(lw_bpe_add_merge(b, 1000, 999, 6), LW_ERR_INVALID,
                "merge 1 (1000 999 -> 6): the pair is merge 0 already");
    CHECK_OK(lw_bpe_add_special(b, "<s>", 3, 1001));
    CHECK_FAILS(lw_bpe_add_special(b, "<s>", 3, 1002), LW_ERR_INVALID,
                "special token 1002 has the text of special token 1001");
    CHECK_FAILS(lw_bpe_add_special(b, "", 0, 1002), LW_ERR_INVALID,
                "special token 1002 has 0 bytes");
    int32_t ids[] = {5, 1001, 4};
    CHECK_FAILS(lw_bpe_decode(b, ids, 3, NULL, 0, &len), LW_ERR_RANGE,
                "id 4 (at 2) is no token of this tokenizer");
    char out[4];
    CHECK_FAILS(lw_bpe_decode(b, ids, 2, out, 4, &len), LW_ERR_RANGE, "needs 5 bytes");
    CHECK_OK(lw_bpe_decode(b, ids, 2, NULL, 0, &len));
    CHECK_EQ(len, 5);
    int32_t *file_ids = NULL;
    int64_t n = 0;
    CHECK_FAILS(lw_bpe_encode_file(b, "/nonexistent/x.txt", true, &file_ids, &n), LW_ERR_IO,
                "/nonexistent/x.txt");
    lw_bpe_free(b);
    lw_bpe_free(NULL);
    lw_bpe_trainer *t = NULL;
    const char *special[] = {"<|endoftext|>"};
    CHECK_FAILS(lw_bpe_trainer_new(256, 2, special, 1, &t), LW_ERR_INVALID,
                "vocab 256 is smaller than the 256 byte tokens and 1 special token");
    CHECK_FAILS(lw_bpe_trainer_new(100, 2, NULL, 0, &t), LW_ERR_INVALID, "vocab 100");
    CHECK_OK(lw_bpe_trainer_new(300, 2, special, 1, &t));
    CHECK_FAILS(lw_bpe_trainer_add_file(t, "/nonexistent/y.txt"), LW_ERR_IO, "/nonexistent/y.txt");
    lw_bpe_trainer_free(t);
}

static void test_files(void) {
    char dir[] = "/tmp/lwopt-bpe-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char text[300], shard[300];
    snprintf(text, sizeof text, "%s/t.txt", dir);
    snprintf(shard, sizeof shard, "%s/s.bin", dir);
    FILE *f = fopen(text, "wb");
    fputs("the cat and the hat and the bat", f);
    fclose(f);
    lw_bpe_trainer *t = NULL;
    lw_bpe *b = NULL;
    CHECK_OK(lw_bpe_trainer_new(280, 2, NULL, 0, &t));
    CHECK_OK(lw_bpe_trainer_add_file(t, text));
    int64_t bytes, chunk_count, distinct;
    lw_bpe_trainer_counts(t, &bytes, &chunk_count, &distinct);
    CHECK_EQ(bytes, 31);
    CHECK_EQ(chunk_count, 8);
    CHECK_EQ(distinct, 6); /* the, " cat", " and", " the", " hat", " bat" */
    CHECK_OK(lw_bpe_trainer_train(t, &b));
    int32_t *ids = NULL;
    int64_t n = 0;
    CHECK_OK(lw_bpe_encode_file(b, text, true, &ids, &n));
    CHECK(n > 0 && n < 31);
    CHECK_OK(lw_token_shards_write(shard, 1, ids, n));
    lw_token_shards *s = NULL;
    const char *paths[] = {shard};
    CHECK_OK(lw_token_shards_open(paths, 1, &s));
    CHECK_EQ(lw_token_shards_total(s), n);
    int32_t back[64];
    CHECK_OK(lw_token_shards_read(s, 0, n, 0, back));
    CHECK(memcmp(back, ids, (size_t)n * sizeof *ids) == 0);
    lw_token_shards_free(s);
    int32_t big[] = {1, 70000};
    CHECK_FAILS(lw_token_shards_write(shard, 1, big, 2), LW_ERR_INVALID,
                "token 70000 at 1 does not fit a version 1 shard");
    CHECK_OK(lw_token_shards_write(shard, 2, big, 2));
    CHECK_FAILS(lw_token_shards_write(shard, 2, big, 0), LW_ERR_INVALID, "0 tokens");
    lw_bpe_ids_free(ids);
    lw_bpe_free(b);
    lw_bpe_trainer_free(t);
    unlink(text);
    unlink(shard);
    rmdir(dir);
}

int main(void) {
    test_chunks();
    test_train();
    test_rank_order();
    test_round_trip();
    test_errors();
    test_files();
    return check_exit("test_bpe");
}
