/* test_layout_aligned.c: the shard-aligned layouts (cost, lpt, size_matching) on small cases
 * whose offsets were worked out by hand from docs/algorithms.md section 4. */
#include "layout_util.h"

#define NONE    INT64_MAX
#define COST    LW_ALGORITHM_COST
#define LPT     LW_ALGORITHM_LPT
#define SM      LW_ALGORITHM_SIZE_MATCHING
#define DISTOPT LW_ALGORITHM_DISTOPT

static void test_padding_rules(void) {
    CHECK_EQ(lw_bucket_end_divisor(1, false), 128);
    CHECK_EQ(lw_bucket_end_divisor(3, false), 384);
    CHECK_EQ(lw_bucket_end_divisor(8, false), 128);
    CHECK_EQ(lw_bucket_end_divisor(256, false), 256);
    CHECK_EQ(lw_bucket_end_divisor(8, true), 65536);
    CHECK_EQ(lw_bucket_end_divisor(3, true), 196608);
    CHECK_EQ(lw_shard_divisor(1, false), 128);
    CHECK_EQ(lw_shard_divisor(2, false), 64);
    CHECK_EQ(lw_shard_divisor(3, false), 128);
    CHECK_EQ(lw_shard_divisor(4, false), 64);
    CHECK_EQ(lw_shard_divisor(8, false), 64);
    CHECK_EQ(lw_shard_divisor(256, false), 64);
    CHECK_EQ(lw_shard_divisor(8, true), 8192);
    CHECK_EQ(lw_shard_divisor(0, false), 0);
}

/* Four equal 64x64 matrices at dp 2 pack two per shard with no padding, in every algorithm. */
static void test_equal_sizes_pack_without_padding(void) {
    lw_param_spec s[] = {mat("p0", 64, 64, true), mat("p1", 64, 64, true), mat("p2", 64, 64, true),
                         mat("p3", 64, 64, true)};
    lw_algorithm algs[] = {COST, LPT, SM};
    for (int a = 0; a < 3; a++) {
        lw_layout *l = make_layout(s, 4, 2, NONE, algs[a], DISTOPT);
        EXPECT_BUCKET(l, 0, 0, 0, 16384, 8192);
        EXPECT_PLACE(l, "p3", 0, 0, 0, 0);
        EXPECT_PLACE(l, "p1", 0, 0, 4096, 0);
        EXPECT_PLACE(l, "p2", 0, 0, 8192, 1);
        EXPECT_PLACE(l, "p0", 0, 0, 12288, 1);
        lw_layout_stats st;
        CHECK_OK(lw_layout_stats_get(l, &st));
        CHECK_EQ(st.padding, 0);
        CHECK(st.numel_imbalance == 1.0 && st.cost_imbalance == 1.0);
        lw_layout_free(l);
    }
}

/* Three equal matrices at dp 2: no shard has room under 1.3 x the mean for the third, so cost
 * falls back to the smallest fill (shard 0, lowest on the tie); the other shard is padded. */
static void test_remainder_needs_padding(void) {
    lw_param_spec s[] = {mat("p0", 64, 64, true), mat("p1", 64, 64, true), mat("p2", 64, 64, true)};
    lw_layout *l = make_layout(s, 3, 2, NONE, COST, DISTOPT);
    EXPECT_BUCKET(l, 0, 0, 0, 16384, 8192);
    EXPECT_PLACE(l, "p2", 0, 0, 0, 0);
    EXPECT_PLACE(l, "p0", 0, 0, 4096, 0);
    EXPECT_PLACE(l, "p1", 0, 0, 8192, 1);
    lw_layout_stats st;
    CHECK_OK(lw_layout_stats_get(l, &st));
    CHECK_EQ(st.padding, 4096);
    CHECK(st.overhead == 4096.0 / 12288.0);
    lw_layout_free(l);
}

/* Mixed sizes that are not multiples of 64: starts inside a shard are padded to 64. */
static void test_mixed_sizes_align_to_64(void) {
    lw_param_spec s[] = {mat("p0", 10, 10, true), mat("p1", 5, 10, true), mat("p2", 3, 10, true)};
    lw_layout *l = make_layout(s, 3, 2, NONE, LPT, DISTOPT);
    /* lpt: p0 (100) -> shard 0, p1 (50) -> shard 1, p2 (30) -> shard 1 at pad64(50) = 64;
     * S = pad(100, 64) = 128 */
    EXPECT_BUCKET(l, 0, 0, 0, 256, 128);
    EXPECT_PLACE(l, "p0", 0, 0, 0, 0);
    EXPECT_PLACE(l, "p1", 0, 0, 128, 1);
    EXPECT_PLACE(l, "p2", 0, 0, 192, 1);
    lw_layout_free(l);
}

/* A large matrix that no shard can take under the 1.3 cap goes to the emptiest shard alone;
 * its small neighbours pack onto the other shard. */
static void test_large_param_small_neighbours(void) {
    lw_param_spec s[] = {mat("a", 32, 32, true), mat("b", 32, 32, true), mat("big", 128, 128, true),
                         mat("c", 32, 32, true), mat("d", 32, 32, true)};
    lw_layout *l = make_layout(s, 5, 2, NONE, COST, DISTOPT);
    EXPECT_BUCKET(l, 0, 0, 0, 32768, 16384);
    EXPECT_PLACE(l, "big", 0, 0, 0, 0);
    EXPECT_PLACE(l, "d", 0, 0, 16384, 1);
    EXPECT_PLACE(l, "c", 0, 0, 17408, 1);
    EXPECT_PLACE(l, "b", 0, 0, 18432, 1);
    EXPECT_PLACE(l, "a", 0, 0, 19456, 1);
    lw_layout_free(l);
}

/* dp 1: one shard, padded to shard_divisor(1) = 128. */
static void test_dp1(void) {
    lw_param_spec s[] = {mat("p0", 10, 10, true), mat("p1", 3, 3, true)};
    lw_algorithm algs[] = {COST, LPT, SM};
    for (int a = 0; a < 3; a++) {
        lw_layout *l = make_layout(s, 2, 1, NONE, algs[a], DISTOPT);
        EXPECT_BUCKET(l, 0, 0, 0, 256, 256);
        if (algs[a] == SM) { /* pool order: p1 seeds, p0 follows */
            EXPECT_PLACE(l, "p1", 0, 0, 0, 0);
            EXPECT_PLACE(l, "p0", 0, 0, 64, 0);
            EXPECT_BUCKET(l, 0, 0, 0, 256, 256); /* cursor 164 -> 256 */
        } else {
            EXPECT_PLACE(l, "p0", 0, 0, 0, 0);
            EXPECT_PLACE(l, "p1", 0, 0, 128, 0);
        }
        lw_layout_free(l);
    }
}

/* The soft minimum: with bucket_size 0 a chunk may close once it holds 0.9 x dp x its largest
 * param, but a param that fits into the padding the chunk already has is absorbed (E), and
 * only the next one (F) opens a new bucket. dp 3, shard_divisor 128. */
static void test_soft_minimum_absorbs_into_padding(void) {
    lw_param_spec s[] = {mat("F", 32, 32, true), mat("E", 32, 32, true), mat("D", 32, 32, true),
                         mat("C", 32, 64, true), mat("B", 64, 64, true), mat("A", 64, 64, true)};
    lw_layout *l = make_layout(s, 6, 3, 0, LPT, DISTOPT);
    CHECK_EQ(num_buckets(l, 0), 2);
    EXPECT_BUCKET(l, 0, 0, 0, 12288, 4096);
    EXPECT_PLACE(l, "A", 0, 0, 0, 0);
    EXPECT_PLACE(l, "B", 0, 0, 4096, 1);
    EXPECT_PLACE(l, "C", 0, 0, 8192, 2);
    EXPECT_PLACE(l, "D", 0, 0, 10240, 2);
    EXPECT_PLACE(l, "E", 0, 0, 11264, 2);
    EXPECT_BUCKET(l, 0, 1, 12288, 15360, 1024);
    EXPECT_PLACE(l, "F", 0, 1, 12288, 0);
    lw_layout_free(l);
}

/* Bucket size closes chunks: lpt with bucket_size 8192 on four 64x64 at dp 2. Before the third
 * param the chunk holds 8192 >= max(8192, 7372) and the param does not fit into padding. */
static void test_bucket_size_makes_buckets(void) {
    lw_param_spec s[] = {mat("p0", 64, 64, true), mat("p1", 64, 64, true), mat("p2", 64, 64, true),
                         mat("p3", 64, 64, true)};
    lw_layout *l = make_layout(s, 4, 2, 8192, LPT, DISTOPT);
    CHECK_EQ(num_buckets(l, 0), 2);
    EXPECT_BUCKET(l, 0, 0, 0, 8192, 4096);
    EXPECT_BUCKET(l, 0, 1, 8192, 16384, 4096);
    EXPECT_PLACE(l, "p3", 0, 0, 0, 0);
    EXPECT_PLACE(l, "p2", 0, 0, 4096, 1);
    EXPECT_PLACE(l, "p1", 0, 1, 8192, 0);
    EXPECT_PLACE(l, "p0", 0, 1, 12288, 1);
    lw_layout_free(l);
}

/* Equal numel, unequal Newton-Schulz cost: lpt deals by numel and puts both 256x256 matrices on
 * shard 0; cost pairs each with a cheap 16x4096 one. */
static void test_cost_beats_numel_balancing(void) {
    lw_param_spec s[] = {mat("D", 16, 4096, true), mat("C", 256, 256, true),
                         mat("A", 16, 4096, true), mat("B", 256, 256, true)};
    lw_layout *lpt = make_layout(s, 4, 2, NONE, LPT, DISTOPT);
    EXPECT_PLACE(lpt, "B", 0, 0, 0, 0);
    EXPECT_PLACE(lpt, "C", 0, 0, 65536, 0);
    EXPECT_PLACE(lpt, "A", 0, 0, 131072, 1);
    EXPECT_PLACE(lpt, "D", 0, 0, 196608, 1);
    lw_layout *cost = make_layout(s, 4, 2, NONE, COST, DISTOPT);
    EXPECT_PLACE(cost, "B", 0, 0, 0, 0);
    EXPECT_PLACE(cost, "A", 0, 0, 65536, 0);
    EXPECT_PLACE(cost, "C", 0, 0, 131072, 1);
    EXPECT_PLACE(cost, "D", 0, 0, 196608, 1);
    lw_layout_stats a, b;
    CHECK_OK(lw_layout_stats_get(lpt, &a));
    CHECK_OK(lw_layout_stats_get(cost, &b));
    CHECK(a.numel_imbalance == 1.0 && b.numel_imbalance == 1.0);
    CHECK(a.cost_imbalance == 33554432.0 / 17825792.0);
    CHECK(b.cost_imbalance == 1.0);
    CHECK(b.cost_imbalance_bound == 1.0);
    int64_t numel;
    double load;
    CHECK_OK(lw_layout_rank_load(lpt, 0, &numel, &load));
    CHECK_EQ(numel, 131072);
    CHECK(load == 33554432.0);
    CHECK_FAILS(lw_layout_rank_load(lpt, 2, &numel, &load), LW_ERR_RANGE, "rank 2");
    lw_layout_free(lpt);
    lw_layout_free(cost);
}

/* Compute loads carry across the buckets of a buffer: after bucket 1 puts the expensive matrix
 * on shard 0, bucket 2's expensive one goes to shard 1. */
static void test_cost_loads_persist_across_buckets(void) {
    lw_param_spec s[] = {mat("y2", 16, 4096, true), mat("y1", 256, 256, true),
                         mat("x2", 16, 4096, true), mat("x1", 256, 256, true)};
    lw_layout *l = make_layout(s, 4, 2, 131072, COST, DISTOPT);
    CHECK_EQ(num_buckets(l, 0), 2);
    EXPECT_PLACE(l, "x1", 0, 0, 0, 0);
    EXPECT_PLACE(l, "x2", 0, 0, 65536, 1);
    EXPECT_PLACE(l, "y1", 0, 1, 196608, 1);
    EXPECT_PLACE(l, "y2", 0, 1, 131072, 0);
    lw_layout_free(l);
}

/* size_matching: an exact-size partner is taken from anywhere in the pool; without one, the
 * shard is greedily filled with the next params while they fit into the seed's size. */
static void test_size_matching(void) {
    lw_param_spec exact[] = {mat("C", 64, 64, true), mat("B", 32, 32, true),
                             mat("A", 64, 64, true)};
    lw_layout *l = make_layout(exact, 3, 2, NONE, SM, DISTOPT);
    EXPECT_BUCKET(l, 0, 0, 0, 10240, 5120);
    EXPECT_PLACE(l, "A", 0, 0, 0, 0);
    EXPECT_PLACE(l, "B", 0, 0, 4096, 0);
    EXPECT_PLACE(l, "C", 0, 0, 5120, 1);
    lw_layout_free(l);

    /* with bucket_size 8192 the first round fills a bucket: dp * pad(4096, 64) >= 8192 */
    l = make_layout(exact, 3, 2, 8192, SM, DISTOPT);
    CHECK_EQ(num_buckets(l, 0), 2);
    EXPECT_BUCKET(l, 0, 0, 0, 8192, 4096);
    EXPECT_PLACE(l, "A", 0, 0, 0, 0);
    EXPECT_PLACE(l, "C", 0, 0, 4096, 1);
    EXPECT_BUCKET(l, 0, 1, 8192, 10240, 1024);
    EXPECT_PLACE(l, "B", 0, 1, 8192, 0);
    lw_layout_free(l);

    lw_param_spec greedy[] = {mat("D", 32, 64, true), mat("C", 32, 32, true),
                              mat("B", 32, 32, true), mat("A", 64, 64, true)};
    l = make_layout(greedy, 4, 2, NONE, SM, DISTOPT);
    EXPECT_BUCKET(l, 0, 0, 0, 8192, 4096);
    EXPECT_PLACE(l, "A", 0, 0, 0, 0);
    EXPECT_PLACE(l, "B", 0, 0, 4096, 1);
    EXPECT_PLACE(l, "C", 0, 0, 5120, 1);
    EXPECT_PLACE(l, "D", 0, 0, 6144, 1);
    lw_layout_free(l);

    /* the greedy fill stops at the first param that does not fit, even if a later one would */
    lw_param_spec stop[] = {mat("small", 8, 8, true), mat("big", 64, 128, true),
                            mat("seed", 64, 64, true)};
    l = make_layout(stop, 3, 2, NONE, SM, DISTOPT);
    EXPECT_PLACE(l, "seed", 0, 0, 0, 0);
    /* round 2: big seeds shard 0 at 4096; small goes to shard 1 at 4096 */
    EXPECT_PLACE(l, "big", 0, 0, 4096, 0);
    EXPECT_BUCKET(l, 0, 0, 0, 24576, 12288);
    EXPECT_PLACE(l, "small", 0, 0, 12288 + 4096, 1);
    lw_layout_free(l);
}

/* A shared embedding (here in an AdamW buffer laid out shard-aligned) sits alone in shard 0 of
 * its own bucket, the other shards padding of its size; it splits size_matching's pools. */
static void test_shared_embedding_aligned(void) {
    lw_param_spec s[] = {mat("x", 32, 32, false), mat("wte", 100, 64, false),
                         mat("w", 64, 64, true), mat("y", 32, 32, false)};
    s[1].shared_embedding = true;
    int dps[] = {2, 4, 8};
    for (int k = 0; k < 3; k++) {
        int dp = dps[k];
        lw_layout *l = make_layout(s, 4, dp, NONE, COST, COST);
        /* buffer 0 (first seen: x) is AdamW: backprop y, wte, x */
        EXPECT_BUCKET(l, 0, 0, 0, 1024 * dp, 1024);
        EXPECT_PLACE(l, "y", 0, 0, 0, 0);
        EXPECT_BUCKET(l, 0, 1, 1024 * dp, 1024 * dp + 6400 * dp, 6400);
        EXPECT_PLACE(l, "wte", 0, 1, 1024 * dp, 0);
        EXPECT_BUCKET(l, 0, 2, 7424 * dp, 8448 * dp, 1024);
        EXPECT_PLACE(l, "x", 0, 2, 7424 * dp, 0);
        EXPECT_PLACE(l, "w", 1, 0, 0, 0);
        lw_layout_free(l);
        l = make_layout(s, 4, dp, NONE, SM, SM);
        CHECK_EQ(num_buckets(l, 0), 3);
        EXPECT_PLACE(l, "wte", 0, 1, 1024 * dp, 0);
        EXPECT_PLACE(l, "x", 0, 2, 7424 * dp, 0);
        lw_layout_free(l);
    }
}

/* Expert params form their own buffer, sharded by expert_dp. */
static void test_expert_buffer_uses_expert_dp(void) {
    lw_param_spec s[] = {mat("w", 64, 64, true), mat("e0", 64, 64, true), mat("e1", 64, 64, true)};
    s[1].expert = s[2].expert = true;
    lw_layout_options o = lw_layout_defaults();
    o.dp = 4;
    o.expert_dp = 2;
    lw_layout *l = NULL;
    CHECK_OK(lw_layout_new(s, 3, &o, &l));
    CHECK_OK(lw_layout_check(l));
    lw_buffer_info b;
    CHECK_OK(lw_layout_buffer(l, 1, &b));
    CHECK(b.expert && b.optimizer == LW_OPTIMIZER_MUON && b.whole);
    CHECK_EQ(b.dp, 2);
    EXPECT_PLACE(l, "e1", 1, 0, 0, 0);
    EXPECT_PLACE(l, "e0", 1, 0, 4096, 1);
    EXPECT_BUCKET(l, 0, 0, 0, 16384, 4096); /* w alone at dp 4: three shards of padding */
    lw_layout_stats st;
    CHECK_OK(lw_layout_stats_get(l, &st));
    CHECK_EQ(st.ranks, 4);
    lw_layout_free(l);
}

int main(void) {
    test_padding_rules();
    test_equal_sizes_pack_without_padding();
    test_remainder_needs_padding();
    test_mixed_sizes_align_to_64();
    test_large_param_small_neighbours();
    test_dp1();
    test_soft_minimum_absorbs_into_padding();
    test_bucket_size_makes_buckets();
    test_cost_beats_numel_balancing();
    test_cost_loads_persist_across_buckets();
    test_size_matching();
    test_shared_embedding_aligned();
    test_expert_buffer_uses_expert_dp();
    return check_exit("test_layout_aligned");
}
