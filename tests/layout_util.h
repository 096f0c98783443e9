/* layout_util.h: spec builders and placement expectations shared by the layout tests. */
#ifndef LW_TEST_LAYOUT_UTIL_H
#define LW_TEST_LAYOUT_UTIL_H

#include "check.h"

static inline lw_param_spec mat(const char *name, int64_t rows, int64_t cols, bool muon) {
    lw_param_spec s;
    memset(&s, 0, sizeof s);
    s.name = name;
    s.ndim = 2;
    s.shape[0] = rows;
    s.shape[1] = cols;
    s.optimizer = muon ? LW_OPTIMIZER_MUON : LW_OPTIMIZER_ADAMW;
    return s;
}

static inline lw_param_spec vec(const char *name, int64_t n) {
    lw_param_spec s;
    memset(&s, 0, sizeof s);
    s.name = name;
    s.ndim = 1;
    s.shape[0] = n;
    return s;
}

static inline lw_layout *make_layout(const lw_param_spec *specs, int n, int dp, int64_t bucket_size,
                                     lw_algorithm muon_alg, lw_algorithm adamw_alg) {
    lw_layout_options o = lw_layout_defaults();
    o.dp = dp;
    o.expert_dp = dp;
    o.bucket_size = bucket_size;
    o.algorithm = muon_alg;
    o.adamw_algorithm = adamw_alg;
    lw_layout *l = NULL;
    CHECK_OK(lw_layout_new(specs, n, &o, &l));
    if (l != NULL) CHECK_OK(lw_layout_check(l));
    return l;
}

/* name is in buffer/bucket (0-based) at start, owned by owner (-1: element-wise/unsharded). */
#define EXPECT_PLACE(l, name, buffer, bucket, start, owner)                                        \
    expect_place(__FILE__, __LINE__, l, name, buffer, bucket, start, owner)

static inline void expect_place(const char *file, int line, const lw_layout *l, const char *name,
                                int buffer, int bucket, int64_t start, int owner) {
    int32_t i = -1;
    lw_param_place p = {0, 0, 0, 0, 0};
    if (l == NULL || lw_layout_find(l, name, &i) != LW_OK || lw_layout_place(l, i, &p) != LW_OK) {
        check_failures++;
        fprintf(stderr, "%s:%d: '%s' not found\n", file, line, name);
        return;
    }
    if (p.buffer != buffer || p.bucket != bucket || p.start != start || p.owner != owner) {
        check_failures++;
        fprintf(stderr,
                "%s:%d: '%s' expected buffer %d bucket %d start %lld owner %d, got "
                "buffer %d bucket %d start %lld owner %d\n",
                file, line, name, buffer, bucket, (long long)start, owner, p.buffer, p.bucket,
                (long long)p.start, p.owner);
        return;
    }
    check_passes++;
}

#define EXPECT_BUCKET(l, buffer, bucket, start, stop, shard)                                       \
    expect_bucket(__FILE__, __LINE__, l, buffer, bucket, start, stop, shard)

static inline void expect_bucket(const char *file, int line, const lw_layout *l, int buffer,
                                 int bucket, int64_t start, int64_t stop, int64_t shard) {
    lw_bucket_info b = {0, 0, 0, 0, 0};
    if (l == NULL || lw_layout_bucket(l, buffer, bucket, &b) != LW_OK) {
        check_failures++;
        fprintf(stderr, "%s:%d: buffer %d bucket %d missing\n", file, line, buffer, bucket);
        return;
    }
    if (b.start != start || b.stop != stop || b.shard_size != shard) {
        check_failures++;
        fprintf(stderr,
                "%s:%d: buffer %d bucket %d expected [%lld, %lld) shard %lld, got "
                "[%lld, %lld) shard %lld\n",
                file, line, buffer, bucket, (long long)start, (long long)stop, (long long)shard,
                (long long)b.start, (long long)b.stop, (long long)b.shard_size);
        return;
    }
    check_passes++;
}

static inline int num_buckets(const lw_layout *l, int buffer) {
    lw_buffer_info b;
    return (l != NULL && lw_layout_buffer(l, buffer, &b) == LW_OK) ? b.n_buckets : -1;
}

#endif
