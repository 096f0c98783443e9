/* test_runtime_check.c: the rules about which runtime choices go together (lw_runtime_check),
 * one case each way per rule, the same rules reached through lw_buffers_new, and the layout
 * algorithms the choices stand for (lw_runtime_layout). */
#include "layout_util.h"

#define INVALID LW_ERR_INVALID

static lw_runtime_options choose(lw_mode mode, int32_t zero, lw_shard shard) {
    lw_runtime_options o = lw_runtime_defaults();
    o.mode = mode;
    o.zero = zero;
    o.shard = shard;
    return o;
}

static void test_defaults(void) {
    lw_runtime_options o = lw_runtime_defaults();
    CHECK_EQ(o.mode, LW_MODE_LAYERWISE);
    CHECK_EQ(o.zero, 1);
    CHECK_EQ(o.shard, LW_SHARD_ALIGNED);
    CHECK_EQ(o.algorithm, LW_ALGORITHM_AUTO);
    CHECK_EQ(o.adamw_algorithm, LW_ALGORITHM_AUTO);
    CHECK_OK(lw_runtime_check(&o, NULL));
    CHECK_FAILS(lw_runtime_check(NULL, NULL), INVALID, "runtime: NULL options");
}

/* Each choice on its own: known values, zero 1..3. */
static void test_values(void) {
    lw_runtime_options o = lw_runtime_defaults();
    o.mode = (lw_mode)3;
    CHECK_FAILS(lw_runtime_check(&o, NULL), INVALID, "runtime: unknown mode 3");
    o = lw_runtime_defaults();
    o.zero = 0;
    CHECK_FAILS(lw_runtime_check(&o, NULL), INVALID, "runtime: zero must be 1, 2 or 3, got 0");
    o.zero = 4;
    CHECK_FAILS(lw_runtime_check(&o, NULL), INVALID, "zero must be 1, 2 or 3, got 4");
    for (o.zero = 1; o.zero <= 3; o.zero++)
        CHECK_OK(lw_runtime_check(&o, NULL));
    o = lw_runtime_defaults();
    o.shard = (lw_shard)2;
    CHECK_FAILS(lw_runtime_check(&o, NULL), INVALID, "runtime: unknown shard 2");
    o = lw_runtime_defaults();
    o.algorithm = (lw_algorithm)8;
    CHECK_FAILS(lw_runtime_check(&o, NULL), INVALID, "runtime: unknown algorithm 8");
    o.algorithm = LW_ALGORITHM_ROWS;
    CHECK_OK(lw_runtime_check(&o, NULL));
    o = lw_runtime_defaults();
    o.adamw_algorithm = (lw_algorithm)-2;
    CHECK_FAILS(lw_runtime_check(&o, NULL), INVALID, "runtime: unknown AdamW algorithm -2");
    o.adamw_algorithm = LW_ALGORITHM_LEGACY;
    CHECK_OK(lw_runtime_check(&o, NULL));
}

/* ZeRO-2/3 need mode layerwise. */
static void test_zero_needs_layerwise(void) {
    lw_runtime_options o = choose(LW_MODE_LEGACY, 2, LW_SHARD_ALIGNED);
    CHECK_FAILS(lw_runtime_check(&o, NULL), INVALID,
                "runtime: zero 2 shards gradients across ranks; mode 'legacy' keeps them whole "
                "(use mode 'layerwise')");
    o = choose(LW_MODE_REPLICATED, 3, LW_SHARD_ALIGNED);
    CHECK_FAILS(lw_runtime_check(&o, NULL), INVALID,
                "zero 3 shards gradients and parameters across ranks; mode 'replicated' keeps "
                "them whole");
    o = choose(LW_MODE_LEGACY, 1, LW_SHARD_ALIGNED);
    CHECK_OK(lw_runtime_check(&o, NULL));
    o = choose(LW_MODE_REPLICATED, 1, LW_SHARD_ALIGNED);
    CHECK_OK(lw_runtime_check(&o, NULL));
    o = choose(LW_MODE_LAYERWISE, 2, LW_SHARD_ALIGNED);
    CHECK_OK(lw_runtime_check(&o, NULL));
}

/* Shard rows needs ZeRO-3 and takes no algorithm (an AdamW one is not refused here). */
static void test_rows(void) {
    lw_runtime_options o = choose(LW_MODE_LAYERWISE, 1, LW_SHARD_ROWS);
    CHECK_FAILS(lw_runtime_check(&o, NULL), INVALID,
                "runtime: shard 'rows' is row-sharded FSDP: it needs zero 3, got zero 1");
    o.zero = 2;
    CHECK_FAILS(lw_runtime_check(&o, NULL), INVALID, "it needs zero 3, got zero 2");
    o.zero = 3;
    CHECK_OK(lw_runtime_check(&o, NULL));
    o.algorithm = LW_ALGORITHM_LPT;
    CHECK_FAILS(lw_runtime_check(&o, NULL), INVALID,
                "runtime: shard 'rows' lays the Muon matrices out by rows; algorithm 'lpt' is for "
                "shard 'aligned'");
    o.algorithm = LW_ALGORITHM_AUTO;
    o.adamw_algorithm = LW_ALGORITHM_DISTOPT;
    CHECK_OK(lw_runtime_check(&o, NULL));
    /* a mode that cannot shard says so before the sharding */
    o = choose(LW_MODE_LEGACY, 1, LW_SHARD_ROWS);
    CHECK_FAILS(lw_runtime_check(&o, NULL), INVALID, "shard 'rows' is row-sharded FSDP");
    o.zero = 3;
    CHECK_FAILS(lw_runtime_check(&o, NULL), INVALID, "mode 'legacy' keeps them whole");
}

/* Modes legacy and replicated fix the layout. */
static void test_mode_fixes_the_layout(void) {
    lw_runtime_options o = choose(LW_MODE_LEGACY, 1, LW_SHARD_ALIGNED);
    o.algorithm = LW_ALGORITHM_LPT;
    CHECK_FAILS(lw_runtime_check(&o, NULL), INVALID,
                "runtime: mode 'legacy' fixes the layout; algorithm and adamw_layout are for mode "
                "'layerwise'");
    o.algorithm = LW_ALGORITHM_LEGACY; /* even the one it would pick */
    CHECK_FAILS(lw_runtime_check(&o, NULL), INVALID, "mode 'legacy' fixes the layout");
    o = choose(LW_MODE_REPLICATED, 1, LW_SHARD_ALIGNED);
    o.adamw_algorithm = LW_ALGORITHM_DISTOPT;
    CHECK_FAILS(lw_runtime_check(&o, NULL), INVALID, "mode 'replicated' fixes the layout");
    o = choose(LW_MODE_LAYERWISE, 1, LW_SHARD_ALIGNED);
    o.algorithm = LW_ALGORITHM_SIZE_MATCHING;
    o.adamw_algorithm = LW_ALGORITHM_SIZE_MATCHING;
    CHECK_OK(lw_runtime_check(&o, NULL));
}

/* With a layout: ZeRO-2/3 need sharded buffers; at ZeRO-3 buckets hold the largest parameter
 * (outside rows buffers). */
static void test_layout_rules(void) {
    lw_param_spec s[] = {mat("w", 40, 20, true), mat("big", 50, 40, true), vec("ln", 30)};
    lw_runtime_options o = lw_runtime_defaults();
    lw_layout *l = make_layout(s, 3, 2, INT64_MAX, LW_ALGORITHM_LEGACY, LW_ALGORITHM_LEGACY);
    CHECK_OK(lw_runtime_check(&o, l));
    o.zero = 2;
    CHECK_FAILS(lw_runtime_check(&o, l), INVALID,
                "runtime: ZeRO-2 shards gradients across ranks, so it needs sharded buffers (the "
                "layer-wise mode), but buffer #1 has the unsharded 'legacy' layout");
    lw_layout_free(l);

    /* one unsharded buffer is enough: Muon shard-aligned, AdamW default */
    l = make_layout(s, 3, 2, INT64_MAX, LW_ALGORITHM_COST, LW_ALGORITHM_DEFAULT);
    o.zero = 3;
    CHECK_FAILS(lw_runtime_check(&o, l), INVALID,
                "ZeRO-3 shards gradients and parameters across ranks, so it needs sharded "
                "buffers (the layer-wise mode), but buffer #2 has the unsharded 'default' layout");
    lw_layout_free(l);

    l = make_layout(s, 3, 2, 1000, LW_ALGORITHM_COST, LW_ALGORITHM_DISTOPT);
    o.zero = 2;
    CHECK_OK(lw_runtime_check(&o, l));
    o.zero = 3;
    CHECK_FAILS(lw_runtime_check(&o, l), INVALID,
                "runtime: at ZeRO-3 a bucket group is gathered whole, but bucket_size 1000 is "
                "smaller than 'big' (2000 elements): use a bucket size of at least 2000");
    lw_layout_free(l);
    l = make_layout(s, 3, 2, 2000, LW_ALGORITHM_COST, LW_ALGORITHM_DISTOPT);
    CHECK_OK(lw_runtime_check(&o, l));
    lw_layout_free(l);

    /* rows buffers hold each matrix alone, whatever the bucket size; AdamW buffers still count */
    o = choose(LW_MODE_LAYERWISE, 3, LW_SHARD_ROWS);
    l = make_layout(s, 3, 2, 100, LW_ALGORITHM_ROWS, LW_ALGORITHM_DISTOPT);
    CHECK_OK(lw_runtime_check(&o, l));
    lw_layout_free(l);
    l = make_layout(s, 3, 2, 20, LW_ALGORITHM_ROWS, LW_ALGORITHM_DISTOPT);
    CHECK_FAILS(lw_runtime_check(&o, l), INVALID, "smaller than 'ln' (30 elements)");
    lw_layout_free(l);

    /* packed buffers (unequal shards) are sharded buffers: every ZeRO level takes them */
    for (int32_t zero = 1; zero <= 3; zero++) {
        o = choose(LW_MODE_LAYERWISE, zero, LW_SHARD_ALIGNED);
        l = make_layout(s, 3, 2, INT64_MAX, LW_ALGORITHM_PACKED, LW_ALGORITHM_DISTOPT);
        CHECK_OK(lw_runtime_check(&o, l));
        lw_layout_free(l);
    }

    /* the options are checked before the layout */
    o = choose(LW_MODE_LEGACY, 2, LW_SHARD_ALIGNED);
    l = make_layout(s, 3, 2, INT64_MAX, LW_ALGORITHM_LEGACY, LW_ALGORITHM_LEGACY);
    CHECK_FAILS(lw_runtime_check(&o, l), INVALID, "zero 2 shards gradients across ranks; mode");
    lw_layout_free(l);
}

/* lw_buffers_new checks its ZeRO level against its layout through the same function. */
static void test_buffers_use_the_check(void) {
    lw_param_spec s[] = {mat("w", 40, 20, true), mat("big", 50, 40, true), vec("ln", 30)};
    lw_comm *c = NULL;
    CHECK_OK(lw_comm_self(&c));
    lw_buffers_options bo = lw_buffers_defaults();
    lw_buffers *bs = NULL;
    lw_layout *l = make_layout(s, 3, 1, INT64_MAX, LW_ALGORITHM_DEFAULT, LW_ALGORITHM_DEFAULT);
    bo.zero = 2;
    CHECK_FAILS(lw_buffers_new(l, c, NULL, &bo, &bs), INVALID,
                "runtime: ZeRO-2 shards gradients across ranks, so it needs sharded buffers");
    bo.zero = 0;
    CHECK_FAILS(lw_buffers_new(l, c, NULL, &bo, &bs), INVALID,
                "runtime: zero must be 1, 2 or 3, got 0");
    bo.zero = 1;
    CHECK_OK(lw_buffers_new(l, c, NULL, &bo, &bs));
    lw_buffers_free(bs);
    lw_layout_free(l);
    l = make_layout(s, 3, 1, 1500, LW_ALGORITHM_COST, LW_ALGORITHM_DISTOPT);
    bo.zero = 3;
    CHECK_FAILS(lw_buffers_new(l, c, NULL, &bo, &bs), INVALID,
                "bucket_size 1500 is smaller than 'big' (2000 elements)");
    lw_layout_free(l);
    lw_comm_free(c);
}

/* The layout the choices stand for. */
static void test_runtime_layout(void) {
    lw_layout_options lo = lw_layout_defaults();
    lo.dp = 4;
    lo.bucket_size = 77;
    lw_runtime_options o = lw_runtime_defaults();
    CHECK_OK(lw_runtime_layout(&o, &lo));
    CHECK_EQ(lo.algorithm, LW_ALGORITHM_COST);
    CHECK_EQ(lo.adamw_algorithm, LW_ALGORITHM_DISTOPT);
    CHECK_EQ(lo.dp, 4); /* the rest left alone */
    CHECK_EQ(lo.bucket_size, 77);
    o.algorithm = LW_ALGORITHM_LPT;
    o.adamw_algorithm = LW_ALGORITHM_LPT;
    CHECK_OK(lw_runtime_layout(&o, &lo));
    CHECK_EQ(lo.algorithm, LW_ALGORITHM_LPT);
    CHECK_EQ(lo.adamw_algorithm, LW_ALGORITHM_LPT);
    o = choose(LW_MODE_LAYERWISE, 3, LW_SHARD_ROWS);
    CHECK_OK(lw_runtime_layout(&o, &lo));
    CHECK_EQ(lo.algorithm, LW_ALGORITHM_ROWS);
    CHECK_EQ(lo.adamw_algorithm, LW_ALGORITHM_DISTOPT);
    o = choose(LW_MODE_LEGACY, 1, LW_SHARD_ALIGNED);
    CHECK_OK(lw_runtime_layout(&o, &lo));
    CHECK_EQ(lo.algorithm, LW_ALGORITHM_LEGACY);
    CHECK_EQ(lo.adamw_algorithm, LW_ALGORITHM_LEGACY);
    o = choose(LW_MODE_REPLICATED, 1, LW_SHARD_ALIGNED);
    CHECK_OK(lw_runtime_layout(&o, &lo));
    CHECK_EQ(lo.algorithm, LW_ALGORITHM_DEFAULT);
    CHECK_EQ(lo.adamw_algorithm, LW_ALGORITHM_DEFAULT);
    /* broken choices fail and leave the options as they were */
    o.zero = 2;
    CHECK_FAILS(lw_runtime_layout(&o, &lo), INVALID, "mode 'replicated' keeps them whole");
    CHECK_EQ(lo.algorithm, LW_ALGORITHM_DEFAULT);
    CHECK_FAILS(lw_runtime_layout(&o, NULL), INVALID, "runtime: NULL layout options");
}

int main(void) {
    test_defaults();
    test_values();
    test_zero_needs_layerwise();
    test_rows();
    test_mode_fixes_the_layout();
    test_layout_rules();
    test_buffers_use_the_check();
    test_runtime_layout();
    return check_exit("test_runtime_check");
}
