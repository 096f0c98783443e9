/* test_json.c: the strict JSON parser: values, escapes and UTF-8, and a refusal with a message
 * for every malformed input class. */
#include "check.h"

static lw_json *parse(const char *s) {
    lw_json *j = NULL;
    CHECK_OK(lw_json_parse(s, (int64_t)strlen(s), &j));
    return j;
}

static void rejects(const char *s, const char *message) {
    lw_json *j = (lw_json *)1;
    CHECK_FAILS(lw_json_parse(s, (int64_t)strlen(s), &j), LW_ERR_INVALID, message);
    CHECK(j == NULL);
}

static void test_values(void) {
    lw_json *j = parse(" {\"a\": [1, -2.5e3, true, false, null], \"b\": {\"c\": \"x\\ty\"}, "
                       "\"\": 0} ");
    CHECK(lw_json_type_of(j, 0) == LW_JSON_OBJECT);
    CHECK_EQ(lw_json_length(j, 0), 3);
    CHECK(strcmp(lw_json_key(j, 0, 0), "a") == 0);
    int32_t a = lw_json_member(j, 0, "a");
    CHECK_EQ(lw_json_length(j, a), 5);
    CHECK(lw_json_number(j, lw_json_child(j, a, 1)) == -2500.0);
    CHECK(lw_json_type_of(j, lw_json_child(j, a, 2)) == LW_JSON_TRUE);
    CHECK(lw_json_type_of(j, lw_json_child(j, a, 4)) == LW_JSON_NULL);
    CHECK_EQ(lw_json_child(j, a, 5), -1);
    int32_t c = lw_json_member(j, lw_json_member(j, 0, "b"), "c");
    int64_t len;
    CHECK(strcmp(lw_json_string(j, c, &len), "x\ty") == 0);
    CHECK_EQ(len, 3);
    CHECK(lw_json_member(j, 0, "") >= 0);
    CHECK_EQ(lw_json_member(j, 0, "missing"), -1);
    CHECK(lw_json_string(j, a, &len) == NULL);
    lw_json_free(j);

    j = parse("\"\\u00e9\\ud83d\\ude00 caf\xc3\xa9 \\\" \\\\ \\/\"");
    CHECK(strcmp(lw_json_string(j, 0, &len), "\xc3\xa9\xf0\x9f\x98\x80 caf\xc3\xa9 \" \\ /") == 0);
    lw_json_free(j);
    j = parse("[[[]], {}, 0, 0.5, 1E+2, 123456789012]");
    CHECK(lw_json_number(j, lw_json_child(j, 0, 4)) == 100.0);
    CHECK(lw_json_number(j, lw_json_child(j, 0, 5)) == 123456789012.0);
    lw_json_free(j);
    lw_json_free(NULL);
}

static void test_rejections(void) {
    rejects("", "value expected at byte 0");
    rejects("{\"a\":1,}", "member name expected");
    rejects("[1,]", "unexpected character at byte 3");
    rejects("[1 2]", "',' or ']' expected at byte 3");
    rejects("{\"a\" 1}", "':' expected");
    rejects("{\"a\":1,\"a\":2}", "duplicate member name 'a'");
    rejects("01", "trailing characters");
    rejects("1.", "digit expected after the decimal point");
    rejects("1e", "digit expected in the exponent");
    rejects("-", "truncated number");
    rejects("NaN", "unexpected character");
    rejects("tru", "unexpected character");
    rejects("\"abc", "unterminated string");
    rejects("\"a\nb\"", "control character in string");
    rejects("\"\\x\"", "bad escape");
    rejects("\"\\u12\"", "truncated \\u escape");
    rejects("\"\\u12zz\"", "bad hex digit");
    rejects("\"\\udc00\"", "lone low surrogate");
    rejects("\"\\ud800x\"", "high surrogate without its low half");
    rejects("\"\xc0\xaf\"", "invalid UTF-8");          /* overlong */
    rejects("\"\xed\xa0\x80\"", "invalid UTF-8");      /* encoded surrogate */
    rejects("\"\xf4\x90\x80\x80\"", "invalid UTF-8");  /* beyond U+10FFFF */
    rejects("[1] x", "trailing characters after the value at byte 4");
    rejects("/* c */ 1", "unexpected character");
    char deep[200];
    memset(deep, '[', 65);
    memset(deep + 65, ']', 65);
    deep[130] = '\0';
    rejects(deep, "nesting deeper than 64");
    deep[64] = ']';
    deep[129] = '\0'; /* 64 deep is fine */
    memset(deep, '[', 64);
    memset(deep + 64, ']', 64);
    deep[128] = '\0';
    lw_json *j = parse(deep);
    lw_json_free(j);
    /* a NUL inside the given length is a control character, not an end */
    lw_json *k = NULL;
    CHECK_FAILS(lw_json_parse("\"a\0b\"", 5, &k), LW_ERR_INVALID, "control character");
}

int main(void) {
    test_values();
    test_rejections();
    return check_exit("test_json");
}
