/* test_names.c: the name functions of the public enums: every value's name, the way back from
 * each name, NULL past the last value, and the message naming an unknown word with the valid
 * ones. */
#include "check.h"

/* The names of values 0, 1, ... until NULL, joined by spaces. */
#define NAMES_OF(name_fn, buf)                                                                     \
    do {                                                                                           \
        (buf)[0] = '\0';                                                                           \
        for (int v = 0; name_fn(v) != NULL && v < 64; v++) {                                       \
            if (v > 0) strcat(buf, " ");                                                           \
            strcat(buf, name_fn(v));                                                               \
        }                                                                                          \
    } while (0)

static void test_every_name(void) {
    char buf[512];
    NAMES_OF(lw_dtype_name, buf);
    CHECK(strcmp(buf, "f32 bf16 f16 f64 i64") == 0);
    NAMES_OF(lw_algorithm_name, buf);
    CHECK(strcmp(buf, "cost lpt size_matching distopt default legacy rows packed") == 0);
    NAMES_OF(lw_mode_name, buf);
    CHECK(strcmp(buf, "layerwise legacy replicated") == 0);
    NAMES_OF(lw_shard_name, buf);
    CHECK(strcmp(buf, "aligned rows") == 0);
    NAMES_OF(lw_reduce_op_name, buf);
    CHECK(strcmp(buf, "sum max min") == 0);
    NAMES_OF(lw_ns_coeffs_name, buf);
    CHECK(strcmp(buf, "simple quintic polar_express cubic5 custom identity nanochat") == 0);
    NAMES_OF(lw_weight_decay_name, buf);
    CHECK(strcmp(buf, "decoupled independent l2 scaled") == 0);
    NAMES_OF(lw_muon_scale_name, buf);
    CHECK(strcmp(buf, "spectral unit_rms_norm shape_scaling moonlight") == 0);
    NAMES_OF(lw_muon_tp_mode_name, buf);
    CHECK(strcmp(buf, "duplicated distributed blockwise") == 0);
    NAMES_OF(lw_path_kind_name, buf);
    CHECK(strcmp(buf, "missing file dir other link") == 0);
    NAMES_OF(lw_optimizer_kind_name, buf);
    CHECK(strcmp(buf, "adamw muon lion normuon") == 0);
    NAMES_OF(lw_rope_pairing_name, buf);
    CHECK(strcmp(buf, "halves interleaved") == 0);
}

/* The optimizer rules: as many as names, which of them update whole matrices, their state's
 * part names (what checkpoints store, so fixed once written), nothing past the last. */
static void test_optimizer_kinds(void) {
    CHECK_EQ(lw_optimizer_kind_count(), 4);
    CHECK(!lw_optimizer_kind_whole(LW_OPTIMIZER_LION));
    CHECK_EQ(lw_optimizer_kind_parts(LW_OPTIMIZER_LION), 1);
    CHECK(lw_optimizer_kind_name((lw_optimizer_kind)lw_optimizer_kind_count()) == NULL);
    CHECK(lw_optimizer_kind_whole(LW_OPTIMIZER_MUON));
    CHECK(!lw_optimizer_kind_whole(LW_OPTIMIZER_ADAMW));
    CHECK(!lw_optimizer_kind_whole((lw_optimizer_kind)-1));
    CHECK(!lw_optimizer_kind_whole((lw_optimizer_kind)lw_optimizer_kind_count()));
    CHECK_EQ(lw_optimizer_kind_parts(LW_OPTIMIZER_ADAMW), 2);
    CHECK(strcmp(lw_optimizer_kind_part(LW_OPTIMIZER_ADAMW, 0), "m") == 0);
    CHECK(strcmp(lw_optimizer_kind_part(LW_OPTIMIZER_ADAMW, 1), "v") == 0);
    CHECK(lw_optimizer_kind_part(LW_OPTIMIZER_ADAMW, 2) == NULL);
    CHECK_EQ(lw_optimizer_kind_parts(LW_OPTIMIZER_MUON), 1);
    CHECK(strcmp(lw_optimizer_kind_part(LW_OPTIMIZER_MUON, 0), "m") == 0);
    CHECK(lw_optimizer_kind_part(LW_OPTIMIZER_MUON, -1) == NULL);
    /* NorMuon: m per element, v per line (the larger side's count) */
    CHECK(lw_optimizer_kind_whole(LW_OPTIMIZER_NORMUON));
    CHECK_EQ(lw_optimizer_kind_parts(LW_OPTIMIZER_NORMUON), 2);
    CHECK(strcmp(lw_optimizer_kind_part(LW_OPTIMIZER_NORMUON, 1), "v") == 0);
    CHECK_EQ(lw_optimizer_kind_part_size(LW_OPTIMIZER_NORMUON, 0), LW_PART_ELEMENTS);
    CHECK_EQ(lw_optimizer_kind_part_size(LW_OPTIMIZER_NORMUON, 1), LW_PART_LINES);
    CHECK_EQ(lw_optimizer_kind_part_size(LW_OPTIMIZER_ADAMW, 1), LW_PART_ELEMENTS);
    int64_t count = -1;
    CHECK_OK(lw_optimizer_kind_part_count(LW_OPTIMIZER_NORMUON, 1, 60, 12, 5, &count));
    CHECK_EQ(count, 12);
    CHECK_OK(lw_optimizer_kind_part_count(LW_OPTIMIZER_NORMUON, 1, 60, 5, 12, &count));
    CHECK_EQ(count, 12);
    CHECK_OK(lw_optimizer_kind_part_count(LW_OPTIMIZER_ADAMW, 1, 7, 5, 12, &count));
    CHECK_EQ(count, 7);
    CHECK_FAILS(lw_optimizer_kind_part_count(LW_OPTIMIZER_MUON, 1, 7, 5, 12, &count), LW_ERR_RANGE,
                "optimizer: muon has no state part 1");
    CHECK_EQ(lw_optimizer_kind_parts((lw_optimizer_kind)99), 0);
    CHECK(lw_optimizer_kind_part((lw_optimizer_kind)99, 0) == NULL);
    lw_optimizer_kind k = LW_OPTIMIZER_ADAMW;
    CHECK_OK(lw_optimizer_kind_from_name("muon", &k));
    CHECK_EQ(k, LW_OPTIMIZER_MUON);
    CHECK_FAILS(lw_optimizer_kind_from_name("sgd", &k), LW_ERR_INVALID,
                "unknown optimizer rule 'sgd' (one of adamw, muon, lion, normuon)");
}

static void test_names_match_the_enums(void) {
    CHECK(strcmp(lw_dtype_name(LW_DTYPE_BF16), "bf16") == 0);
    CHECK(strcmp(lw_algorithm_name(LW_ALGORITHM_ROWS), "rows") == 0);
    CHECK(strcmp(lw_mode_name(LW_MODE_REPLICATED), "replicated") == 0);
    CHECK(strcmp(lw_shard_name(LW_SHARD_ROWS), "rows") == 0);
    CHECK(strcmp(lw_reduce_op_name(LW_REDUCE_MIN), "min") == 0);
    CHECK(strcmp(lw_ns_coeffs_name(LW_NS_IDENTITY), "identity") == 0);
    CHECK(strcmp(lw_weight_decay_name(LW_WD_L2), "l2") == 0);
    CHECK(strcmp(lw_muon_scale_name(LW_MUON_SCALE_MOONLIGHT), "moonlight") == 0);
    CHECK(strcmp(lw_path_kind_name(LW_PATH_OTHER), "other") == 0);
    CHECK(strcmp(lw_matmul_name(LW_MATMUL_TF32), "tf32") == 0);
    CHECK(strcmp(lw_matmul_name(LW_MATMUL_BF16), "bf16") == 0);
    CHECK(lw_matmul_name((lw_matmul)3) == NULL);
    /* out of range, and AUTO (a choice, not a layout), have no name */
    CHECK(lw_dtype_name((lw_dtype)-1) == NULL);
    CHECK(lw_dtype_name((lw_dtype)5) == NULL);
    CHECK(lw_algorithm_name(LW_ALGORITHM_AUTO) == NULL);
    CHECK(lw_algorithm_name((lw_algorithm)8) == NULL);
    CHECK(lw_mode_name((lw_mode)3) == NULL);
}

static void test_from_name(void) {
    lw_dtype d = LW_DTYPE_F32;
    CHECK_OK(lw_dtype_from_name("i64", &d));
    CHECK_EQ(d, LW_DTYPE_I64);
    lw_algorithm a = LW_ALGORITHM_COST;
    CHECK_OK(lw_algorithm_from_name("size_matching", &a));
    CHECK_EQ(a, LW_ALGORITHM_SIZE_MATCHING);
    lw_mode m = LW_MODE_LAYERWISE;
    CHECK_OK(lw_mode_from_name("legacy", &m));
    CHECK_EQ(m, LW_MODE_LEGACY);
    lw_shard s = LW_SHARD_ALIGNED;
    CHECK_OK(lw_shard_from_name("rows", &s));
    CHECK_EQ(s, LW_SHARD_ROWS);
    lw_reduce_op r = LW_REDUCE_SUM;
    CHECK_OK(lw_reduce_op_from_name("max", &r));
    CHECK_EQ(r, LW_REDUCE_MAX);
    lw_ns_coeffs c = LW_NS_SIMPLE;
    CHECK_OK(lw_ns_coeffs_from_name("polar_express", &c));
    CHECK_EQ(c, LW_NS_POLAR_EXPRESS);
    lw_weight_decay w = LW_WD_DECOUPLED;
    CHECK_OK(lw_weight_decay_from_name("independent", &w));
    CHECK_EQ(w, LW_WD_INDEPENDENT);
    lw_muon_scale k = LW_MUON_SCALE_SPECTRAL;
    CHECK_OK(lw_muon_scale_from_name("shape_scaling", &k));
    CHECK_EQ(k, LW_MUON_SCALE_SHAPE_SCALING);
    lw_muon_tp_mode tp = LW_MUON_TP_DUPLICATED;
    CHECK_OK(lw_muon_tp_mode_from_name("blockwise", &tp));
    CHECK_EQ(tp, LW_MUON_TP_BLOCKWISE);
    CHECK_FAILS(lw_muon_tp_mode_from_name("sharded", &tp), LW_ERR_INVALID,
                "unknown Muon TP mode 'sharded' (one of duplicated, distributed, blockwise)");
    lw_path_kind p = LW_PATH_MISSING;
    CHECK_OK(lw_path_kind_from_name("dir", &p));
    CHECK_EQ(p, LW_PATH_DIR);
    lw_matmul mm = LW_MATMUL_FP32;
    CHECK_OK(lw_matmul_from_name("bf16", &mm));
    CHECK_EQ(mm, LW_MATMUL_BF16);
    CHECK_FAILS(lw_matmul_from_name("fp16", &mm), LW_ERR_INVALID,
                "unknown matmul precision 'fp16' (one of fp32, tf32, bf16)");
    CHECK_EQ(mm, LW_MATMUL_BF16);
    /* every name of every value comes back to its value */
    for (int v = 0; lw_algorithm_name(v) != NULL; v++) {
        CHECK_OK(lw_algorithm_from_name(lw_algorithm_name(v), &a));
        CHECK_EQ(a, v);
    }
}

static void test_unknown_names(void) {
    lw_algorithm a = LW_ALGORITHM_LPT;
    CHECK_FAILS(lw_algorithm_from_name("greedy", &a), LW_ERR_INVALID,
                "unknown algorithm 'greedy' (one of cost, lpt, size_matching, distopt, default, "
                "legacy, rows, packed)");
    CHECK_EQ(a, LW_ALGORITHM_LPT); /* left as it was */
    CHECK_FAILS(lw_algorithm_from_name("Cost", &a), LW_ERR_INVALID, "unknown algorithm 'Cost'");
    lw_mode m;
    CHECK_FAILS(lw_mode_from_name("zero", &m), LW_ERR_INVALID,
                "unknown mode 'zero' (one of layerwise, legacy, replicated)");
    lw_shard s;
    CHECK_FAILS(lw_shard_from_name(NULL, &s), LW_ERR_INVALID,
                "unknown shard NULL (one of aligned, rows)");
    lw_dtype d;
    CHECK_FAILS(lw_dtype_from_name("fp32", &d), LW_ERR_INVALID,
                "unknown dtype 'fp32' (one of f32, bf16, f16, f64, i64)");
    lw_weight_decay w;
    CHECK_FAILS(lw_weight_decay_from_name("", &w), LW_ERR_INVALID,
                "unknown weight decay mode '' (one of decoupled, independent, l2, scaled)");
    CHECK_FAILS(lw_muon_scale_from_name("moonlight", NULL), LW_ERR_INVALID, "NULL");
}

int main(void) {
    test_every_name();
    test_names_match_the_enums();
    test_from_name();
    test_unknown_names();
    test_optimizer_kinds();
    return check_exit("test_names");
}
