/* names.c: the names of the public enums (lw_<enum>_name, lw_<enum>_from_name), the words Lua,
 * the recipes, messages and documentation use: the only copy of them. A value appended to an
 * enum gets its name here. The comm ops keep theirs in comm/watchdog.c (lw_comm_op_name), the
 * optimizer rules theirs in rule_list.h. */
#include "base/base.h"
#include "base/rule_list.h"

#include <stdio.h>
#include <string.h>

/* An enum's names, indexed by value (every public enum counts up from 0), and what a message
 * calls one of its values. */
typedef struct names {
    const char *what;
    const char *const *names;
    int32_t n;
} names;

#define NAMES(what, table)                                                                         \
    { what, table, (int32_t)(sizeof(table) / sizeof((table)[0])) }

static const char *name_of(names e, int32_t value) {
    return value >= 0 && value < e.n ? e.names[value] : NULL;
}

/* [out] *value the value named `name`; LW_ERR_INVALID names the word and lists the valid ones. */
static lw_status value_of(names e, const char *name, bool has_out, int32_t *value) {
    if (!has_out)
        return lwi_fail(LW_ERR_INVALID, "names: the out pointer for a %s is NULL", e.what);
    for (int32_t i = 0; name != NULL && i < e.n; i++)
        if (strcmp(e.names[i], name) == 0) {
            *value = i;
            return LW_OK;
        }
    char list[256] = "";
    size_t used = 0;
    for (int32_t i = 0; i < e.n && used < sizeof list; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i > 0 ? ", " : "",
                                 e.names[i]);
    if (name == NULL) return lwi_fail(LW_ERR_INVALID, "unknown %s NULL (one of %s)", e.what, list);
    return lwi_fail(LW_ERR_INVALID, "unknown %s '%.200s' (one of %s)", e.what, name, list);
}

/* lw_<prefix>_name and lw_<prefix>_from_name of the enum `type`, whose names are `table` and
 * whose values a message calls `what`. */
#define NAME_FUNCTIONS(prefix, type, what, table)                                                  \
    static const names prefix##_enum = NAMES(what, table);                                         \
    const char *lw_##prefix##_name(type value) { return name_of(prefix##_enum, (int32_t)value); } \
    lw_status lw_##prefix##_from_name(const char *name, type *out) {                               \
        int32_t v = 0;                                                                             \
        lw_status st = value_of(prefix##_enum, name, out != NULL, &v);                             \
        if (st == LW_OK) *out = (type)v;                                                           \
        return st;                                                                                 \
    }

static const char *const dtype_names[] = {
    [LW_DTYPE_F32] = "f32", [LW_DTYPE_BF16] = "bf16", [LW_DTYPE_F16] = "f16",
    [LW_DTYPE_F64] = "f64", [LW_DTYPE_I64] = "i64",
};
NAME_FUNCTIONS(dtype, lw_dtype, "dtype", dtype_names)

static const char *const algorithm_names[] = {
    [LW_ALGORITHM_COST] = "cost",
    [LW_ALGORITHM_LPT] = "lpt",
    [LW_ALGORITHM_SIZE_MATCHING] = "size_matching",
    [LW_ALGORITHM_DISTOPT] = "distopt",
    [LW_ALGORITHM_DEFAULT] = "default",
    [LW_ALGORITHM_LEGACY] = "legacy",
    [LW_ALGORITHM_ROWS] = "rows",
    [LW_ALGORITHM_PACKED] = "packed",
};
NAME_FUNCTIONS(algorithm, lw_algorithm, "algorithm", algorithm_names)

static const char *const mode_names[] = {
    [LW_MODE_LAYERWISE] = "layerwise",
    [LW_MODE_LEGACY] = "legacy",
    [LW_MODE_REPLICATED] = "replicated",
};
NAME_FUNCTIONS(mode, lw_mode, "mode", mode_names)

static const char *const shard_names[] = {
    [LW_SHARD_ALIGNED] = "aligned",
    [LW_SHARD_ROWS] = "rows",
};
NAME_FUNCTIONS(shard, lw_shard, "shard", shard_names)

static const char *const reduce_op_names[] = {
    [LW_REDUCE_SUM] = "sum",
    [LW_REDUCE_MAX] = "max",
    [LW_REDUCE_MIN] = "min",
};
NAME_FUNCTIONS(reduce_op, lw_reduce_op, "reduce op", reduce_op_names)

static const char *const ns_coeffs_names[] = {
    [LW_NS_SIMPLE] = "simple", [LW_NS_QUINTIC] = "quintic", [LW_NS_POLAR_EXPRESS] = "polar_express",
    [LW_NS_CUBIC5] = "cubic5", [LW_NS_CUSTOM] = "custom",   [LW_NS_IDENTITY] = "identity",
    [LW_NS_NANOCHAT] = "nanochat",
};
NAME_FUNCTIONS(ns_coeffs, lw_ns_coeffs, "coefficient set", ns_coeffs_names)

static const char *const ns_precision_names[] = {
    [LW_NS_BF16] = "bf16",
    [LW_NS_TF32] = "tf32",
    [LW_NS_FP32] = "fp32",
};
NAME_FUNCTIONS(ns_precision, lw_ns_precision, "Newton-Schulz precision", ns_precision_names)

static const char *const matmul_names[] = {
    [LW_MATMUL_FP32] = "fp32",
    [LW_MATMUL_TF32] = "tf32",
    [LW_MATMUL_BF16] = "bf16",
};
NAME_FUNCTIONS(matmul, lw_matmul, "matmul precision", matmul_names)

static const char *const weight_decay_names[] = {
    [LW_WD_DECOUPLED] = "decoupled",
    [LW_WD_INDEPENDENT] = "independent",
    [LW_WD_L2] = "l2",
    [LW_WD_SCALED] = "scaled",
};
NAME_FUNCTIONS(weight_decay, lw_weight_decay, "weight decay mode", weight_decay_names)

static const char *const muon_scale_names[] = {
    [LW_MUON_SCALE_SPECTRAL] = "spectral",
    [LW_MUON_SCALE_UNIT_RMS_NORM] = "unit_rms_norm",
    [LW_MUON_SCALE_SHAPE_SCALING] = "shape_scaling",
    [LW_MUON_SCALE_MOONLIGHT] = "moonlight",
};
NAME_FUNCTIONS(muon_scale, lw_muon_scale, "Muon scale", muon_scale_names)

static const char *const muon_tp_mode_names[] = {
    [LW_MUON_TP_DUPLICATED] = "duplicated",
    [LW_MUON_TP_DISTRIBUTED] = "distributed",
    [LW_MUON_TP_BLOCKWISE] = "blockwise",
};
NAME_FUNCTIONS(muon_tp_mode, lw_muon_tp_mode, "Muon TP mode", muon_tp_mode_names)

#define RULE_NAME(KIND, name, whole, parts) [LW_OPTIMIZER_##KIND] = #name,
static const char *const optimizer_kind_names[] = {LWI_RULES(RULE_NAME)};
#undef RULE_NAME
NAME_FUNCTIONS(optimizer_kind, lw_optimizer_kind, "optimizer rule", optimizer_kind_names)

static const char *const device_comm_names[] = {
    [LW_DEVICE_COMM_AUTO] = "auto",
    [LW_DEVICE_COMM_NCCL] = "nccl",
    [LW_DEVICE_COMM_STAGED] = "staged",
};
NAME_FUNCTIONS(device_comm, lw_device_comm, "device communicator", device_comm_names)

static const char *const path_kind_names[] = {
    [LW_PATH_MISSING] = "missing",
    [LW_PATH_FILE] = "file",
    [LW_PATH_DIR] = "dir",
    [LW_PATH_OTHER] = "other",
    [LW_PATH_LINK] = "link",
};
NAME_FUNCTIONS(path_kind, lw_path_kind, "path kind", path_kind_names)

static const char *const rope_pairing_names[] = {
    [LW_ROPE_HALVES] = "halves",
    [LW_ROPE_INTERLEAVED] = "interleaved",
};
NAME_FUNCTIONS(rope_pairing, lw_rope_pairing, "rope pairing", rope_pairing_names)
