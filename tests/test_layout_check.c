/* test_layout_check.c: the validator names each violated invariant. Each case builds a valid
 * layout, breaks one invariant through the internal structures, and expects the message. */
#include "layout_util.h"

#include "core/layout/layout.h"

static lw_layout *fresh(lw_algorithm alg) {
    static lw_param_spec s[6];
    s[0] = mat("w0", 64, 64, true);
    s[1] = mat("w1", 64, 64, true);
    s[2] = mat("w2", 32, 32, true);
    s[3] = mat("w3", 64, 64, true);
    s[4] = vec("g", 100);
    s[5] = mat("emb", 10, 64, false);
    s[5].shared_embedding = true;
    return make_layout(s, 6, 2, 4096, alg, LW_ALGORITHM_DISTOPT);
}

static lwi_param *param(lw_layout *l, const char *name) {
    int32_t i = 0;
    CHECK_OK(lw_layout_find(l, name, &i));
    return &l->params[i];
}

static void expect_violation(lw_layout *l, const char *text) {
    CHECK_FAILS(lw_layout_check(l), LW_ERR_INVALID, text);
    lw_layout_free(l);
}

int main(void) {
    lw_layout *l = fresh(LW_ALGORITHM_COST);
    CHECK_OK(lw_layout_check(l));
    lw_layout_free(l);

    l = fresh(LW_ALGORITHM_COST);
    param(l, "w1")->start += 1;
    expect_violation(l, "not a multiple of 64");

    l = fresh(LW_ALGORITHM_COST);
    param(l, "w1")->owner ^= 1;
    expect_violation(l, "'w1' is owned by rank");

    l = fresh(LW_ALGORITHM_COST);
    {
        /* two params of one bucket at the same offset */
        lwi_buffer *buf = &l->buffers[0];
        lwi_bucket *k = &buf->buckets[0];
        CHECK(k->count >= 2);
        lwi_param *moved = &l->params[buf->placed[k->first + 1]];
        moved->start = l->params[buf->placed[k->first]].start;
        moved->owner = l->params[buf->placed[k->first]].owner;
    }
    expect_violation(l, "overlap");

    l = fresh(LW_ALGORITHM_COST);
    l->buffers[0].buckets[0].numel_unpadded -= 1;
    expect_violation(l, "numel_unpadded");

    l = fresh(LW_ALGORITHM_COST);
    {
        lwi_bucket *k = &l->buffers[0].buckets[l->buffers[0].n_buckets - 1];
        k->stop += 64;
        k->shard_size += 32;
        l->buffers[0].numel += 64;
    }
    expect_violation(l, "not a multiple of bucket_end_divisor");

    l = fresh(LW_ALGORITHM_COST);
    {
        /* a param straddling two shards: place w0 at the last 64 elements of shard 0 */
        lwi_param *p = param(l, "w0");
        lwi_bucket *k = &l->buffers[0].buckets[p->bucket];
        p->start = k->start + k->shard_size - 64;
    }
    expect_violation(l, "crosses from shard 0 into shard 1");

    l = fresh(LW_ALGORITHM_COST);
    l->buffers[0].placed[1] = l->buffers[0].placed[0];
    expect_violation(l, "overlap");

    l = fresh(LW_ALGORITHM_COST);
    l->buffers[0].buckets[1].start += 128;
    expect_violation(l, "bucket #2 starts at");

    l = fresh(LW_ALGORITHM_DISTOPT);
    param(l, "g")->owner = 0;
    expect_violation(l, "has owner 0 in an element-wise buffer");

    l = fresh(LW_ALGORITHM_DISTOPT);
    param(l, "emb")->start = param(l, "g")->start;
    expect_violation(l, "bucket #");

    l = fresh(LW_ALGORITHM_DEFAULT);
    param(l, "w0")->owner = 0;
    expect_violation(l, "element-wise buffer");

    l = fresh(LW_ALGORITHM_LEGACY);
    param(l, "w0")->owner = 2;
    expect_violation(l, "has owner 2 outside [0, 2)");

    l = fresh(LW_ALGORITHM_DEFAULT);
    l->buffers[0].buckets[0].stop += 1;
    l->buffers[0].buckets[0].shard_size += 1;
    for (int32_t k = 1; k < l->buffers[0].n_buckets; k++)
        l->buffers[0].buckets[k].start += 1;
    expect_violation(l, "gap");

    l = fresh(LW_ALGORITHM_COST);
    l->params[0].optimizer = LW_OPTIMIZER_ADAMW;
    l->params[0].whole = false;
    expect_violation(l, "does not have the buffer's key");

    {
        /* size_matching may leave a bucket that is not a backprop range (A and C, then B):
         * valid there, a violation for lpt and cost */
        lw_param_spec s[] = {mat("C", 64, 64, true), mat("B", 32, 32, true),
                             mat("A", 64, 64, true)};
        l = make_layout(s, 3, 2, 8192, LW_ALGORITHM_SIZE_MATCHING, LW_ALGORITHM_DISTOPT);
        l->buffers[0].algorithm = LW_ALGORITHM_LPT;
        expect_violation(l, "bucket of 'C' (#1) comes before that of 'B' (#2)");
    }
    /* packed: unequal shards that tile each bucket, owners inside their shards */
    l = fresh(LW_ALGORITHM_PACKED);
    CHECK_OK(lw_layout_check(l));
    lw_layout_free(l);

    l = fresh(LW_ALGORITHM_PACKED);
    {
        lwi_buffer *buf = &l->buffers[0]; /* w0 comes first: the Muon buffer */
        CHECK(buf->whole && buf->algorithm == LW_ALGORITHM_PACKED);
        lwi_param *p = &l->params[buf->placed[buf->buckets[0].first]];
        p->owner = (p->owner + 1) % 2;
    }
    expect_violation(l, "lies outside its shard");

    l = fresh(LW_ALGORITHM_PACKED);
    l->buffers[0].buckets[0].shard_size += 64;
    expect_violation(l, "is not the largest shard");

    l = fresh(LW_ALGORITHM_PACKED);
    l->buffers[0].buckets[0].shards[0] += 64;
    expect_violation(l, "shards span");

    l = fresh(LW_ALGORITHM_PACKED);
    l->buffers[0].buckets[0].shards[1] += 1;
    expect_violation(l, "shard 0 is");

    return check_exit("test_layout_check");
}
