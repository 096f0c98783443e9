/* test_safetensors.c: write and read back, CRC32C, and a clear error for every corruption: a
 * truncated file, a flipped header byte, offsets out of range, gaps and overlaps, a wrong size,
 * an unknown dtype, trailing bytes, a header length past the end. */
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char path[64];

static void test_crc32c(void) {
    CHECK(lw_crc32c(0, "123456789", 9) == 0xE3069283u); /* the standard check value */
    CHECK(lw_crc32c(0, "", 0) == 0);
    unsigned char buf[1000];
    for (int i = 0; i < 1000; i++) buf[i] = (unsigned char)(i * 31 + 7);
    uint32_t whole = lw_crc32c(0, buf, 1000), parts = lw_crc32c(lw_crc32c(0, buf, 333), buf + 333, 667);
    CHECK(whole == parts);
}

static unsigned char *slurp(const char *p, long *n) {
    FILE *f = fopen(p, "rb");
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*n);
    CHECK(fread(b, 1, (size_t)*n, f) == (size_t)*n);
    fclose(f);
    return b;
}

static void test_round_trip(void) {
    float a[6] = {1, 2, 3, 4, 5, 6};
    double b[2] = {-1.5, 1e300};
    lw_tensor_view t[2];
    memset(t, 0, sizeof t);
    t[0] = (lw_tensor_view){"layer.weight", "F32", 2, {2, 3}, a, sizeof a};
    t[1] = (lw_tensor_view){"scale \"quoted\"", "F64", 1, {2}, b, sizeof b};
    const char *keys[] = {"format", "step"}, *values[] = {"lwopt", "12"};
    int64_t bytes = 0;
    uint32_t crc = 0;
    CHECK_OK(lw_safetensors_write(path, t, 2, keys, values, 2, &bytes, &crc));
    long n;
    unsigned char *raw = slurp(path, &n);
    CHECK_EQ(bytes, n);
    CHECK(crc == lw_crc32c(0, raw, n));
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--) h = h << 8 | raw[i];
    CHECK_EQ((8 + h) % 8, 0); /* data 8-byte aligned */
    free(raw);

    lw_safetensors *st = NULL;
    CHECK_OK(lw_safetensors_open(path, &st));
    CHECK_EQ(lw_safetensors_count(st), 2);
    int32_t i;
    CHECK_OK(lw_safetensors_find(st, "scale \"quoted\"", &i));
    lw_tensor_view v;
    CHECK_OK(lw_safetensors_tensor(st, i, &v));
    CHECK(strcmp(v.dtype, "F64") == 0 && v.ndim == 1 && v.shape[0] == 2 && v.bytes == 16);
    CHECK(memcmp(v.data, b, sizeof b) == 0);
    CHECK_OK(lw_safetensors_find(st, "layer.weight", &i));
    CHECK_OK(lw_safetensors_tensor(st, i, &v));
    CHECK(memcmp(v.data, a, sizeof a) == 0 && v.shape[1] == 3);
    CHECK(strcmp(lw_safetensors_metadata(st, "step"), "12") == 0);
    CHECK(lw_safetensors_metadata(st, "nope") == NULL);
    CHECK_FAILS(lw_safetensors_find(st, "nope", &i), LW_ERR_RANGE, "no tensor named 'nope'");
    lw_safetensors_free(st);
}

/* Every name found at its own index among many, written in an order that is not the names'
 * (find searches a sorted index), and names beside them, before them and after them not found. */
static void test_find_many(void) {
    enum { N = 1000 };
    static char names[N][16];
    static lw_tensor_view t[N];
    float one = 1;
    for (int k = 0; k < N; k++) {
        snprintf(names[k], sizeof names[k], "t.%d", (k * 617) % N); /* 617 is prime to N */
        t[k] = (lw_tensor_view){names[k], "F32", 1, {1}, &one, sizeof one};
    }
    CHECK_OK(lw_safetensors_write(path, t, N, NULL, NULL, 0, NULL, NULL));
    lw_safetensors *st = NULL;
    CHECK_OK(lw_safetensors_open(path, &st));
    for (int k = 0; k < N; k++) {
        int32_t i = -1;
        CHECK_OK(lw_safetensors_find(st, names[k], &i));
        CHECK_EQ(i, k); /* the header keeps the order written */
        lw_tensor_view v;
        CHECK_OK(lw_safetensors_tensor(st, i, &v));
        CHECK(strcmp(v.name, names[k]) == 0);
    }
    int32_t i;
    const char *absent[] = {"", "a", "t.", "t.1000", "t.5x", "u"};
    for (size_t k = 0; k < sizeof absent / sizeof absent[0]; k++)
        CHECK_FAILS(lw_safetensors_find(st, absent[k], &i), LW_ERR_RANGE, "no tensor named");
    lw_safetensors_free(st);
}

/* Parses `header` + data bytes (size n_data of pattern) and expects a failure with message. */
static void rejects(const char *header, int64_t n_data, const char *message) {
    size_t h = strlen(header);
    unsigned char *b = calloc(8 + h + (size_t)n_data + 1, 1);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    lw_safetensors *st = (lw_safetensors *)1;
    CHECK_FAILS(lw_safetensors_parse(b, 8 + (int64_t)h + n_data, "t.safetensors", &st),
                LW_ERR_INVALID, message);
    CHECK(st == NULL);
    free(b);
}

static void test_corruption(void) {
    rejects("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
            "fall outside the 4-byte data section (truncated file?)");
    rejects("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
            "has 8 bytes but F32 x 3 elements need 12");
    rejects("{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
            "unknown dtype Q4");
    rejects("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
            "starts at byte 4, expected 0 (gap or overlap)");
    rejects("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
            "gap or overlap");
    rejects("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8,
            "4 bytes follow the last tensor");
    rejects("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4,
            "not a whole number");
    rejects("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
            "needs exactly dtype, shape and data_offsets");
    rejects("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4,
            "needs data_offsets [begin, end]");
    rejects("{\"__metadata__\":{\"k\":1}}", 0, "__metadata__ value of 'k' is not a string");
    rejects("[1]", 0, "header is not a JSON object");
    rejects("{\"a\":", 0, "t.safetensors: header: json: value expected at byte 5");
    rejects("{\"a\":{\"dtype\":\"F32\",\"shape\":[9007199254740992,9007199254740992],"
            "\"data_offsets\":[0,4]}}", 4, "larger than the file");

    /* a header length past the end, and a file too short for one */
    unsigned char b[16] = {200, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    lw_safetensors *st = NULL;
    CHECK_FAILS(lw_safetensors_parse(b, 10, "t", &st), LW_ERR_INVALID, "header length 200 exceeds");
    CHECK_FAILS(lw_safetensors_parse(b, 5, "t", &st), LW_ERR_INVALID, "too short for a header");

    /* the real file, truncated by one byte, and with one header byte flipped */
    long n;
    unsigned char *raw = slurp(path, &n);
    CHECK_FAILS(lw_safetensors_parse(raw, n - 1, "cut", &st), LW_ERR_INVALID, "cut:");
    raw[9] ^= 0x20;
    CHECK_FAILS(lw_safetensors_parse(raw, n, "flipped", &st), LW_ERR_INVALID, "flipped:");
    free(raw);
    CHECK_FAILS(lw_safetensors_open("/nonexistent/x.safetensors", &st), LW_ERR_IO,
                "cannot open /nonexistent/x.safetensors");
    CHECK_FAILS(lw_safetensors_open("/tmp", &st), LW_ERR_IO, "is not a regular file");
}

int main(void) {
    snprintf(path, sizeof path, "/tmp/lwopt-test-%d.safetensors", (int)getpid());
    test_crc32c();
    test_round_trip();
    test_find_many();
    test_corruption();
    unlink(path);
    return check_exit("test_safetensors");
}
