/* test_layout_property.c: random parameter lists (shapes up to 4-D, dp 1..256, bucket sizes,
 * shared embeddings, experts, dtypes) through every algorithm; each layout must pass the
 * validator and keep the properties below (packed: shards that tile each bucket in rank order,
 * owners inside their shards, at most 63 elements of alignment per param, and LPT's 4/3 of the
 * cost bound). Seeded, so a failure reproduces; LW_PROPERTY_CASES
 * overrides the number of cases (default 10000). */
#include "check.h"

#include <stdlib.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t next_u64(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static int64_t uniform(int64_t lo, int64_t hi) { /* inclusive */
    return lo + (int64_t)(next_u64() % (uint64_t)(hi - lo + 1));
}

static bool chance(int percent) { return uniform(1, 100) <= percent; }

static int64_t random_dim(void) {
    switch (uniform(0, 3)) {
    case 0:
        return uniform(1, 70);
    case 1:
        return 64 * uniform(1, 16);
    case 2:
        return uniform(1, 600);
    default:
        return uniform(1, 5000);
    }
}

#define MAX_PARAMS 48

typedef struct random_case {
    lw_param_spec specs[MAX_PARAMS];
    char names[MAX_PARAMS][16];
    int n;
    lw_layout_options opts;
} random_case;

static void make_case(random_case *c) {
    c->n = (int)uniform(1, MAX_PARAMS);
    int64_t total = 0;
    for (int i = 0; i < c->n; i++) {
        lw_param_spec *s = &c->specs[i];
        memset(s, 0, sizeof *s);
        snprintf(c->names[i], sizeof c->names[i], "p%d", i);
        s->name = c->names[i];
        s->ndim = chance(60) ? 2 : (int32_t)uniform(1, 4);
        for (int d = 0; d < s->ndim; d++)
            s->shape[d] = random_dim();
        if (s->ndim > 2) s->shape[0] = uniform(1, 8); /* keep 3-D and 4-D tensors small */
        int64_t numel = 1;
        for (int d = 0; d < s->ndim; d++)
            numel *= s->shape[d];
        total += numel;
        s->expert = chance(15);
        s->optimizer = s->ndim == 2 && chance(60) ? LW_OPTIMIZER_MUON : LW_OPTIMIZER_ADAMW;
        s->shared_embedding = s->optimizer != LW_OPTIMIZER_MUON && chance(8);
        s->dtype = chance(90) ? LW_DTYPE_F32 : (lw_dtype)uniform(1, 2);
        s->grad_dtype = chance(95) ? LW_DTYPE_F32 : LW_DTYPE_BF16;
    }
    lw_layout_options *o = &c->opts;
    *o = lw_layout_defaults();
    o->dp = chance(40) ? (int32_t)uniform(1, 8) : (int32_t)uniform(1, 256);
    o->expert_dp = chance(50) ? o->dp : (int32_t)uniform(1, 64);
    o->bucket_size = chance(30) ? INT64_MAX : chance(15) ? 0 : uniform(1, 2 * total);
    o->high_busbw = chance(10);
    static const lw_algorithm adamw[] = {LW_ALGORITHM_DISTOPT, LW_ALGORITHM_COST,
                                         LW_ALGORITHM_LPT,     LW_ALGORITHM_SIZE_MATCHING,
                                         LW_ALGORITHM_DEFAULT, LW_ALGORITHM_LEGACY,
                                         LW_ALGORITHM_PACKED};
    o->adamw_algorithm = adamw[chance(50) ? 0 : uniform(1, 6)];
}

static bool owns_whole(lw_algorithm a) {
    return a == LW_ALGORITHM_COST || a == LW_ALGORITHM_LPT || a == LW_ALGORITHM_SIZE_MATCHING ||
           a == LW_ALGORITHM_LEGACY || a == LW_ALGORITHM_PACKED;
}

/* lw_layout_shard on every bucket: equal shards at start + r * shard_size, the whole bucket for
 * the unsharded layouts, and for packed shards that tile the bucket in rank order with each
 * owned param inside its owner's. Returns the number of Muon buffers. */
static int check_shards(const lw_layout *l) {
    int muon_buffers = 0;
    for (int32_t b = 0; b < lw_layout_num_buffers(l); b++) {
        lw_buffer_info bi;
        CHECK_OK(lw_layout_buffer(l, b, &bi));
        muon_buffers += bi.whole;
        const bool unsharded = bi.algorithm == LW_ALGORITHM_DEFAULT ||
                               bi.algorithm == LW_ALGORITHM_LEGACY;
        for (int32_t k = 0; k < bi.n_buckets; k++) {
            lw_bucket_info bk;
            CHECK_OK(lw_layout_bucket(l, b, k, &bk));
            if (bi.algorithm != LW_ALGORITHM_PACKED && !unsharded)
                CHECK_EQ((bk.stop - bk.start) % bi.dp, 0); /* docs/algorithms.md section 3 */
            int64_t at = bk.start, largest = 0;
            for (int32_t r = 0; r < bi.dp; r++) {
                int64_t start = -1, count = -1;
                CHECK_OK(lw_layout_shard(l, b, k, r, &start, &count));
                if (unsharded) {
                    CHECK(start == bk.start && count == bk.stop - bk.start);
                    continue;
                }
                CHECK_EQ(start, at);
                CHECK(count >= 0);
                if (bi.algorithm != LW_ALGORITHM_PACKED) CHECK_EQ(count, bk.shard_size);
                largest = count > largest ? count : largest;
                at = start + count;
                for (int32_t e = 0; e < bk.n_params; e++) {
                    int32_t param;
                    lw_param_place place;
                    CHECK_OK(lw_layout_bucket_param(l, b, k, e, &param));
                    CHECK_OK(lw_layout_place(l, param, &place));
                    if (place.owner == r) CHECK(place.start >= start && place.stop <= start + count);
                }
            }
            if (!unsharded) CHECK(at == bk.stop && largest == bk.shard_size);
            if (bi.algorithm == LW_ALGORITHM_PACKED)
                CHECK(bk.stop - bk.start - bk.numel_unpadded <= 63 * (int64_t)bk.n_params);
        }
        int64_t start, count;
        CHECK_FAILS(lw_layout_shard(l, b, 0, bi.dp, &start, &count), LW_ERR_RANGE, "rank");
    }
    return muon_buffers;
}

static int case_failures;

static void run_case(const random_case *c, int index) {
    int before = check_failures;
    lw_layout *l = NULL, *again = NULL;
    CHECK_OK(lw_layout_new(c->specs, c->n, &c->opts, &l));
    if (l == NULL) goto done;
    CHECK_OK(lw_layout_check(l));
    CHECK_OK(lw_layout_new(c->specs, c->n, &c->opts, &again));
    char h1[17], h2[17];
    CHECK_OK(lw_layout_hash(l, h1));
    CHECK_OK(lw_layout_hash(again, h2));
    CHECK(strcmp(h1, h2) == 0);

    lw_layout_stats st;
    CHECK_OK(lw_layout_stats_get(l, &st));
    CHECK(st.buffer_numel >= st.numel && st.padding == st.buffer_numel - st.numel);
    int64_t owned = 0;
    for (int32_t r = 0; r < st.ranks; r++) {
        int64_t n;
        CHECK_OK(lw_layout_rank_load(l, r, &n, NULL));
        owned += n;
    }
    if (c->opts.algorithm != LW_ALGORITHM_DEFAULT) CHECK_EQ(owned, st.muon_numel);
    if (owns_whole(c->opts.algorithm))
        CHECK(st.cost_imbalance >= st.cost_imbalance_bound * (1 - 1e-12));
    const int muon_buffers = check_shards(l);
    /* one Muon buffer over all ranks: its largest-first owners are within LPT's 4/3 of the
     * optimum, itself at least the bound (several buffers balance each on its own) */
    if (c->opts.algorithm == LW_ALGORITHM_PACKED && muon_buffers == 1 &&
        c->opts.dp == c->opts.expert_dp)
        CHECK(st.cost_imbalance <= st.cost_imbalance_bound * (4.0 / 3.0) * (1 + 1e-12));
done:
    lw_layout_free(l);
    lw_layout_free(again);
    if (check_failures != before && case_failures++ < 5)
        fprintf(stderr,
                "  in case %d: %d params, dp %d, expert_dp %d, bucket %lld, algorithm "
                "%d/%d\n",
                index, c->n, c->opts.dp, c->opts.expert_dp, (long long)c->opts.bucket_size,
                (int)c->opts.algorithm, (int)c->opts.adamw_algorithm);
}

/* Equal sizes that are multiples of the shard divisor, a count divisible by dp: every
 * shard-aligned algorithm lays them out with no padding. */
static void zero_padding_case(void) {
    int32_t dp = (int32_t)uniform(1, 16);
    int64_t shard_div = lw_shard_divisor(dp, false);
    int per_rank = (int)uniform(1, 4), n = per_rank * dp;
    if (n > MAX_PARAMS) return;
    lw_param_spec s[MAX_PARAMS];
    char names[MAX_PARAMS][16];
    int64_t rows = shard_div / 64 * uniform(1, 4);
    for (int i = 0; i < n; i++) {
        memset(&s[i], 0, sizeof s[i]);
        snprintf(names[i], sizeof names[i], "w%d", i);
        s[i].name = names[i];
        s[i].ndim = 2;
        s[i].shape[0] = rows;
        s[i].shape[1] = 64;
        s[i].optimizer = LW_OPTIMIZER_MUON;
    }
    static const lw_algorithm algs[] = {LW_ALGORITHM_COST, LW_ALGORITHM_LPT,
                                        LW_ALGORITHM_SIZE_MATCHING, LW_ALGORITHM_PACKED};
    for (int a = 0; a < 4; a++) {
        lw_layout_options o = lw_layout_defaults();
        o.dp = dp;
        o.algorithm = algs[a];
        lw_layout *l = NULL;
        CHECK_OK(lw_layout_new(s, n, &o, &l));
        lw_layout_stats st;
        if (l != NULL && lw_layout_stats_get(l, &st) == LW_OK) {
            if (st.padding != 0)
                fprintf(stderr,
                        "zero-padding case: dp %d, %d x (%lld x 64), algorithm %d: "
                        "padding %lld\n",
                        dp, n, (long long)rows, (int)algs[a], (long long)st.padding);
            CHECK_EQ(st.padding, 0);
            CHECK(st.numel_imbalance == 1.0);
        }
        lw_layout_free(l);
    }
}

int main(void) {
    const char *env = getenv("LW_PROPERTY_CASES");
    int cases = env ? atoi(env) : 10000;
    static const lw_algorithm algs[] = {LW_ALGORITHM_COST,          LW_ALGORITHM_LPT,
                                        LW_ALGORITHM_SIZE_MATCHING, LW_ALGORITHM_DISTOPT,
                                        LW_ALGORITHM_DEFAULT,       LW_ALGORITHM_LEGACY,
                                        LW_ALGORITHM_ROWS,          LW_ALGORITHM_PACKED};
    random_case c;
    for (int i = 0; i < cases; i++) {
        make_case(&c);
        for (int a = 0; a < 8; a++) {
            c.opts.algorithm = algs[a];
            run_case(&c, i);
        }
    }
    for (int i = 0; i < cases / 10; i++)
        zero_padding_case();
    printf("%d random cases x 8 algorithms\n", cases);
    return check_exit("test_layout_property");
}
