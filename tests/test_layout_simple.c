/* test_layout_simple.c: the default, distopt and legacy layouts, grouping into buffers, and
 * input validation, on small cases worked out by hand from docs/algorithms.md sections 2-4. */
#include "layout_util.h"

#define NONE    INT64_MAX
#define DEFAULT LW_ALGORITHM_DEFAULT
#define DISTOPT LW_ALGORITHM_DISTOPT
#define LEGACY  LW_ALGORITHM_LEGACY
#define COST    LW_ALGORITHM_COST
#define ROWS    LW_ALGORITHM_ROWS

/* distopt: 64-aligned starts; a bucket closes once param_end - bucket_start >= bucket_size and
 * its end is padded to lcm(dp, 128). Four 1000-element params, dp 2, bucket size 1500. */
static void test_distopt_buckets_and_alignment(void) {
    lw_param_spec s[] = {vec("p0", 1000), vec("p1", 1000), vec("p2", 1000), vec("p3", 1000)};
    lw_layout *l = make_layout(s, 4, 2, 1500, COST, DISTOPT);
    CHECK_EQ(num_buckets(l, 0), 2);
    EXPECT_PLACE(l, "p3", 0, 0, 0, -1);
    EXPECT_PLACE(l, "p2", 0, 0, 1024, -1);
    EXPECT_BUCKET(l, 0, 0, 0, 2048, 1024);
    EXPECT_PLACE(l, "p1", 0, 1, 2048, -1);
    EXPECT_PLACE(l, "p0", 0, 1, 3072, -1);
    EXPECT_BUCKET(l, 0, 1, 2048, 4096, 1024);
    lw_layout_free(l);

    /* dp 3: bucket ends on multiples of 384; one bucket without a size */
    l = make_layout(s, 4, 3, NONE, COST, DISTOPT);
    EXPECT_BUCKET(l, 0, 0, 0, 4224, 1408);
    EXPECT_PLACE(l, "p0", 0, 0, 3072, -1);
    lw_layout_free(l);
}

/* rows: each Muon matrix alone in a bucket of dp shards of whole rows, at least ceil(rows / dp)
 * per shard, more until the bucket is a multiple of lcm(dp, 128). */
static void test_rows(void) {
    lw_param_spec s[] = {mat("a", 10, 64, true), mat("b", 256, 256, true), mat("c", 3, 5, true),
                         vec("ln", 64)};
    lw_layout *l = make_layout(s, 4, 3, NONE, ROWS, DISTOPT);
    /* backprop: c, b, a. c: 3 rows of 5 per shard gives 45, raised to 128 rows (1920 = 5 x 384) */
    EXPECT_PLACE(l, "c", 0, 0, 0, -1);
    EXPECT_BUCKET(l, 0, 0, 0, 1920, 640);
    /* b: 86 rows per shard (258 >= 256), 66048 = 172 x 384 */
    EXPECT_PLACE(l, "b", 0, 1, 1920, -1);
    EXPECT_BUCKET(l, 0, 1, 1920, 1920 + 66048, 22016);
    /* a: 4 rows per shard, 768 = 2 x 384 */
    EXPECT_PLACE(l, "a", 0, 2, 1920 + 66048, -1);
    EXPECT_BUCKET(l, 0, 2, 1920 + 66048, 1920 + 66048 + 768, 256);
    CHECK_OK(lw_layout_check(l));
    lw_layout_free(l);

    l = make_layout(s, 4, 2, NONE, ROWS, DISTOPT);
    EXPECT_BUCKET(l, 0, 1, 640, 640 + 65536, 32768);             /* b: 128 rows each, no padding */
    EXPECT_BUCKET(l, 0, 2, 640 + 65536, 640 + 65536 + 640, 320); /* a: 5 rows each */
    lw_layout_free(l);

    /* AdamW buffers cannot be row-sharded */
    lw_layout_options o = lw_layout_defaults();
    o.adamw_algorithm = ROWS;
    CHECK_FAILS(lw_layout_new(s, 4, &o, &l), LW_ERR_INVALID, "rows layout is for Muon");
}

/* distopt: a shared embedding closes the bucket before it and sits alone in its own. */
static void test_distopt_shared_embedding(void) {
    lw_param_spec s[] = {mat("wte", 100, 64, false), mat("w", 64, 64, true), vec("ln", 64)};
    s[0].shared_embedding = true;
    int dps[] = {2, 4, 8};
    for (int k = 0; k < 3; k++) {
        lw_layout *l = make_layout(s, 3, dps[k], NONE, COST, DISTOPT);
        /* buffer 0 (AdamW: wte, ln), backprop ln, wte */
        CHECK_EQ(num_buckets(l, 0), 2);
        EXPECT_PLACE(l, "ln", 0, 0, 0, -1);
        EXPECT_BUCKET(l, 0, 0, 0, 128, 128 / dps[k]);
        EXPECT_PLACE(l, "wte", 0, 1, 128, -1);
        EXPECT_BUCKET(l, 0, 1, 128, 6528, 6400 / dps[k]);
        EXPECT_PLACE(l, "w", 1, 0, 0, 0);
        lw_layout_free(l);
    }
    /* a shared embedding first in backprop order opens no empty bucket before it */
    lw_param_spec first[] = {vec("ln", 64), mat("wte", 100, 64, false)};
    first[1].shared_embedding = true;
    lw_layout *l = make_layout(first, 2, 2, NONE, COST, DISTOPT);
    EXPECT_PLACE(l, "wte", 0, 0, 0, -1);
    EXPECT_BUCKET(l, 0, 0, 0, 6400, 3200);
    EXPECT_PLACE(l, "ln", 0, 1, 6400, -1);
    EXPECT_BUCKET(l, 0, 1, 6400, 6528, 64);
    lw_layout_free(l);
}

/* default: no padding at all; a bucket closes once it holds bucket_size elements. */
static void test_default_layout(void) {
    lw_param_spec s[] = {vec("p0", 1000), vec("p1", 1000), vec("p2", 1000), vec("p3", 1000)};
    lw_layout *l = make_layout(s, 4, 4, 1500, DEFAULT, DEFAULT);
    CHECK_EQ(num_buckets(l, 0), 2);
    EXPECT_PLACE(l, "p3", 0, 0, 0, -1);
    EXPECT_PLACE(l, "p2", 0, 0, 1000, -1);
    EXPECT_BUCKET(l, 0, 0, 0, 2000, 2000);
    EXPECT_PLACE(l, "p1", 0, 1, 2000, -1);
    EXPECT_PLACE(l, "p0", 0, 1, 3000, -1);
    EXPECT_BUCKET(l, 0, 1, 2000, 4000, 2000);
    lw_layout_free(l);
}

/* legacy ping-pong: stable-sort by numel ascending, deal 0..dp-1, dp-1..0, ... (docs/algorithms.md
 * section 3: with 4 ranks and 10 params the owners are [[p0,p7,p8],[p1,p6,p9],[p2,p5],[p3,p4]]). */
static void test_legacy_ping_pong(void) {
    static const char *names[] = {"p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9"};
    lw_param_spec s[10];
    /* define out of size order to show the sort: sizes 1..10, shuffled definition order */
    static const int order[10] = {3, 9, 0, 5, 1, 8, 2, 7, 4, 6};
    for (int k = 0; k < 10; k++)
        s[k] = mat(names[order[k]], 1, order[k] + 1, true);
    lw_layout *l = make_layout(s, 10, 4, NONE, LEGACY, LEGACY);
    static const int owner[10] = {0, 1, 2, 3, 3, 2, 1, 0, 0, 1};
    for (int k = 0; k < 10; k++) {
        int32_t i;
        lw_param_place p;
        CHECK_OK(lw_layout_find(l, names[k], &i));
        CHECK_OK(lw_layout_place(l, i, &p));
        CHECK_EQ(p.owner, owner[k]);
    }
    /* offsets are the default layout's: unpadded, backprop order */
    EXPECT_PLACE(l, "p6", 0, 0, 0, 1);
    EXPECT_PLACE(l, "p4", 0, 0, 7, 3);
    EXPECT_BUCKET(l, 0, 0, 0, 55, 55);
    /* equal sizes keep definition order (stable sort) */
    lw_param_spec eq[] = {mat("a", 2, 2, true), mat("b", 2, 2, true), mat("c", 2, 2, true)};
    lw_layout *e = make_layout(eq, 3, 2, NONE, LEGACY, LEGACY);
    EXPECT_PLACE(e, "a", 0, 0, 8, 0);
    EXPECT_PLACE(e, "b", 0, 0, 4, 1);
    EXPECT_PLACE(e, "c", 0, 0, 0, 1);
    lw_layout_free(e);
    lw_layout_free(l);
}

/* Buffers by (dtype, grad dtype, expert, muon) in first-seen order; definition order inside. */
static void test_grouping(void) {
    lw_param_spec s[] = {mat("a", 8, 8, true), vec("b", 8), mat("c", 8, 8, true),
                         mat("d", 8, 8, true), vec("e", 8)};
    s[2].dtype = LW_DTYPE_BF16;
    s[3].expert = true;
    s[4].grad_dtype = LW_DTYPE_BF16;
    lw_layout *l = make_layout(s, 5, 2, NONE, COST, DISTOPT);
    CHECK_EQ(lw_layout_num_buffers(l), 5);
    lw_buffer_info b;
    CHECK_OK(lw_layout_buffer(l, 0, &b));
    CHECK(b.optimizer == LW_OPTIMIZER_MUON && !b.expert && b.param_dtype == LW_DTYPE_F32);
    CHECK_OK(lw_layout_buffer(l, 2, &b));
    CHECK(b.optimizer == LW_OPTIMIZER_MUON && b.param_dtype == LW_DTYPE_BF16);
    CHECK_OK(lw_layout_buffer(l, 3, &b));
    CHECK(b.expert);
    CHECK_OK(lw_layout_buffer(l, 4, &b));
    CHECK(b.optimizer == LW_OPTIMIZER_ADAMW && !b.whole && b.grad_dtype == LW_DTYPE_BF16);
    EXPECT_PLACE(l, "e", 4, 0, 0, -1);
    CHECK_FAILS(lw_layout_buffer(l, 5, &b), LW_ERR_RANGE, "buffer index 5");
    lw_layout_free(l);
}

static lw_status try_layout(const lw_param_spec *s, int n, lw_layout_options o) {
    lw_layout *l = (lw_layout *)&o; /* must be reset to NULL on failure */
    lw_status st = lw_layout_new(s, n, &o, &l);
    if (st != LW_OK) CHECK(l == NULL);
    lw_layout_free(st == LW_OK ? l : NULL);
    return st;
}

static void test_bad_input(void) {
    lw_param_spec ok[] = {mat("a", 8, 8, true), vec("b", 8)};
    lw_layout_options o = lw_layout_defaults();
    o.dp = 0;
    CHECK_FAILS(try_layout(ok, 2, o), LW_ERR_INVALID, "dp must be >= 1, got 0");
    o = lw_layout_defaults();
    o.expert_dp = -3;
    CHECK_FAILS(try_layout(ok, 2, o), LW_ERR_INVALID, "expert_dp must be >= 1, got -3");
    o = lw_layout_defaults();
    o.bucket_size = -1;
    CHECK_FAILS(try_layout(ok, 2, o), LW_ERR_INVALID, "bucket_size must be >= 0, got -1");
    o = lw_layout_defaults();
    o.algorithm = (lw_algorithm)17;
    CHECK_FAILS(try_layout(ok, 2, o), LW_ERR_INVALID, "unknown algorithm 17");
    o = lw_layout_defaults();
    o.adamw_algorithm = (lw_algorithm)-1;
    CHECK_FAILS(try_layout(ok, 2, o), LW_ERR_INVALID, "unknown AdamW algorithm -1");
    o = lw_layout_defaults();
    CHECK_FAILS(try_layout(ok, -1, o), LW_ERR_INVALID, "negative parameter count");
    CHECK_FAILS(try_layout(NULL, 2, o), LW_ERR_INVALID, "specs is NULL");
    CHECK_OK(try_layout(NULL, 0, o));

    lw_param_spec bad[2];
    memcpy(bad, ok, sizeof ok);
    bad[1].ndim = 0;
    CHECK_FAILS(try_layout(bad, 2, o), LW_ERR_INVALID, "parameter 'b' has 0 dimensions");
    bad[1].ndim = 5;
    CHECK_FAILS(try_layout(bad, 2, o), LW_ERR_INVALID, "parameter 'b' has 5 dimensions");
    memcpy(bad, ok, sizeof ok);
    bad[0].shape[1] = 0;
    CHECK_FAILS(try_layout(bad, 2, o), LW_ERR_INVALID, "'a' has size 0 in dimension 2");
    bad[0].shape[1] = -4;
    CHECK_FAILS(try_layout(bad, 2, o), LW_ERR_INVALID, "'a' has size -4 in dimension 2");
    memcpy(bad, ok, sizeof ok);
    bad[1].name = "a";
    CHECK_FAILS(try_layout(bad, 2, o), LW_ERR_INVALID, "duplicate parameter name 'a'");
    bad[1].name = "";
    CHECK_FAILS(try_layout(bad, 2, o), LW_ERR_INVALID, "parameter 2 has no name");
    bad[1].name = NULL;
    CHECK_FAILS(try_layout(bad, 2, o), LW_ERR_INVALID, "parameter 2 has no name");
    memcpy(bad, ok, sizeof ok);
    bad[0].dtype = (lw_dtype)9;
    CHECK_FAILS(try_layout(bad, 2, o), LW_ERR_INVALID, "'a' has unknown dtype 9");
    memcpy(bad, ok, sizeof ok);
    bad[1].grad_dtype = (lw_dtype)7;
    CHECK_FAILS(try_layout(bad, 2, o), LW_ERR_INVALID, "'b' has unknown grad dtype 7");
    memcpy(bad, ok, sizeof ok);
    bad[0].shared_embedding = true;
    CHECK_FAILS(try_layout(bad, 2, o), LW_ERR_INVALID,
                "'a' is a shared embedding and cannot be updated by muon, which updates whole "
                "matrices");
    memcpy(bad, ok, sizeof ok);
    bad[1].optimizer = (lw_optimizer_kind)99;
    CHECK_FAILS(try_layout(bad, 2, o), LW_ERR_INVALID, "'b' has unknown optimizer rule 99");
    memcpy(bad, ok, sizeof ok);
    bad[0].shape[0] = INT64_C(1) << 40;
    bad[0].shape[1] = INT64_C(1) << 20;
    CHECK_FAILS(try_layout(bad, 2, o), LW_ERR_INVALID, "more than 2^50 elements");
    CHECK_FAILS(lw_layout_new(ok, 2, &o, NULL), LW_ERR_INVALID, "out pointer is NULL");
    lw_layout_free(NULL);
}

static void test_lookup_and_hash(void) {
    lw_param_spec s[] = {mat("w", 64, 64, true), vec("g", 64)};
    lw_layout *a = make_layout(s, 2, 2, NONE, COST, DISTOPT);
    lw_layout *b = make_layout(s, 2, 2, NONE, COST, DISTOPT);
    lw_layout *c = make_layout(s, 2, 4, NONE, COST, DISTOPT);
    char ha[17], hb[17], hc[17];
    CHECK_OK(lw_layout_hash(a, ha));
    CHECK_OK(lw_layout_hash(b, hb));
    CHECK_OK(lw_layout_hash(c, hc));
    CHECK(strlen(ha) == 16 && strcmp(ha, hb) == 0 && strcmp(ha, hc) != 0);
    int32_t i;
    CHECK_FAILS(lw_layout_find(a, "nope", &i), LW_ERR_RANGE, "no parameter named 'nope'");
    CHECK_OK(lw_layout_find(a, "g", &i));
    CHECK_EQ(i, 1);
    const char *name;
    CHECK_OK(lw_layout_param_name(a, 0, &name));
    CHECK(strcmp(name, "w") == 0);
    lw_param_place p;
    CHECK_FAILS(lw_layout_place(a, 2, &p), LW_ERR_RANGE, "parameter index 2");
    lw_layout_free(a);
    lw_layout_free(b);
    lw_layout_free(c);
}

int main(void) {
    test_rows();
    test_distopt_buckets_and_alignment();
    test_distopt_shared_embedding();
    test_default_layout();
    test_legacy_ping_pong();
    test_grouping();
    test_bad_input();
    test_lookup_and_hash();
    return check_exit("test_layout_simple");
}
