/* names.c: the names of the public enums (lw_<enum>_name, lw_<enum>_from_name), the words Lua,
 * the recipes, messages and documentation use: the only copy of them. A value appended to an
 * enum gets its name here. The comm ops keep theirs in comm/watchdog.c (lw_comm_op_name). */
#include "base/base.h"

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

static const char *const dtype_names[] = {
    [LW_DTYPE_F32] = "f32", [LW_DTYPE_BF16] = "bf16", [LW_DTYPE_F16] = "f16",
    [LW_DTYPE_F64] = "f64", [LW_DTYPE_I64] = "i64",
};
static const names DTYPE = NAMES("dtype", dtype_names);

const char *lw_dtype_name(lw_dtype dtype) { return name_of(DTYPE, (int32_t)dtype); }

lw_status lw_dtype_from_name(const char *name, lw_dtype *out) {
    int32_t v = 0;
    lw_status st = value_of(DTYPE, name, out != NULL, &v);
    if (st == LW_OK) *out = (lw_dtype)v;
    return st;
}

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
static const names ALGORITHM = NAMES("algorithm", algorithm_names);

const char *lw_algorithm_name(lw_algorithm algorithm) {
    return name_of(ALGORITHM, (int32_t)algorithm);
}

lw_status lw_algorithm_from_name(const char *name, lw_algorithm *out) {
    int32_t v = 0;
    lw_status st = value_of(ALGORITHM, name, out != NULL, &v);
    if (st == LW_OK) *out = (lw_algorithm)v;
    return st;
}

static const char *const mode_names[] = {
    [LW_MODE_LAYERWISE] = "layerwise",
    [LW_MODE_LEGACY] = "legacy",
    [LW_MODE_REPLICATED] = "replicated",
};
static const names MODE = NAMES("mode", mode_names);

const char *lw_mode_name(lw_mode mode) { return name_of(MODE, (int32_t)mode); }

lw_status lw_mode_from_name(const char *name, lw_mode *out) {
    int32_t v = 0;
    lw_status st = value_of(MODE, name, out != NULL, &v);
    if (st == LW_OK) *out = (lw_mode)v;
    return st;
}

static const char *const shard_names[] = {
    [LW_SHARD_ALIGNED] = "aligned",
    [LW_SHARD_ROWS] = "rows",
};
static const names SHARD = NAMES("shard", shard_names);

const char *lw_shard_name(lw_shard shard) { return name_of(SHARD, (int32_t)shard); }

lw_status lw_shard_from_name(const char *name, lw_shard *out) {
    int32_t v = 0;
    lw_status st = value_of(SHARD, name, out != NULL, &v);
    if (st == LW_OK) *out = (lw_shard)v;
    return st;
}

static const char *const reduce_op_names[] = {
    [LW_REDUCE_SUM] = "sum",
    [LW_REDUCE_MAX] = "max",
    [LW_REDUCE_MIN] = "min",
};
static const names REDUCE_OP = NAMES("reduce op", reduce_op_names);

const char *lw_reduce_op_name(lw_reduce_op op) { return name_of(REDUCE_OP, (int32_t)op); }

lw_status lw_reduce_op_from_name(const char *name, lw_reduce_op *out) {
    int32_t v = 0;
    lw_status st = value_of(REDUCE_OP, name, out != NULL, &v);
    if (st == LW_OK) *out = (lw_reduce_op)v;
    return st;
}

static const char *const ns_coeffs_names[] = {
    [LW_NS_SIMPLE] = "simple", [LW_NS_QUINTIC] = "quintic", [LW_NS_POLAR_EXPRESS] = "polar_express",
    [LW_NS_CUBIC5] = "cubic5", [LW_NS_CUSTOM] = "custom",   [LW_NS_IDENTITY] = "identity",
};
static const names NS_COEFFS = NAMES("coefficient set", ns_coeffs_names);

const char *lw_ns_coeffs_name(lw_ns_coeffs coeffs) { return name_of(NS_COEFFS, (int32_t)coeffs); }

lw_status lw_ns_coeffs_from_name(const char *name, lw_ns_coeffs *out) {
    int32_t v = 0;
    lw_status st = value_of(NS_COEFFS, name, out != NULL, &v);
    if (st == LW_OK) *out = (lw_ns_coeffs)v;
    return st;
}

static const char *const ns_precision_names[] = {
    [LW_NS_BF16] = "bf16",
    [LW_NS_TF32] = "tf32",
    [LW_NS_FP32] = "fp32",
};
static const names NS_PRECISION = NAMES("Newton-Schulz precision", ns_precision_names);

const char *lw_ns_precision_name(lw_ns_precision precision) {
    return name_of(NS_PRECISION, (int32_t)precision);
}

lw_status lw_ns_precision_from_name(const char *name, lw_ns_precision *out) {
    int32_t v = 0;
    lw_status st = value_of(NS_PRECISION, name, out != NULL, &v);
    if (st == LW_OK) *out = (lw_ns_precision)v;
    return st;
}

static const char *const matmul_names[] = {
    [LW_MATMUL_FP32] = "fp32",
    [LW_MATMUL_TF32] = "tf32",
    [LW_MATMUL_BF16] = "bf16",
};
static const names MATMUL = NAMES("matmul precision", matmul_names);

const char *lw_matmul_name(lw_matmul matmul) { return name_of(MATMUL, (int32_t)matmul); }

lw_status lw_matmul_from_name(const char *name, lw_matmul *out) {
    int32_t v = 0;
    lw_status st = value_of(MATMUL, name, out != NULL, &v);
    if (st == LW_OK) *out = (lw_matmul)v;
    return st;
}

static const char *const weight_decay_names[] = {
    [LW_WD_DECOUPLED] = "decoupled",
    [LW_WD_INDEPENDENT] = "independent",
    [LW_WD_L2] = "l2",
};
static const names WEIGHT_DECAY = NAMES("weight decay mode", weight_decay_names);

const char *lw_weight_decay_name(lw_weight_decay mode) {
    return name_of(WEIGHT_DECAY, (int32_t)mode);
}

lw_status lw_weight_decay_from_name(const char *name, lw_weight_decay *out) {
    int32_t v = 0;
    lw_status st = value_of(WEIGHT_DECAY, name, out != NULL, &v);
    if (st == LW_OK) *out = (lw_weight_decay)v;
    return st;
}

static const char *const muon_scale_names[] = {
    [LW_MUON_SCALE_SPECTRAL] = "spectral",
    [LW_MUON_SCALE_UNIT_RMS_NORM] = "unit_rms_norm",
    [LW_MUON_SCALE_SHAPE_SCALING] = "shape_scaling",
    [LW_MUON_SCALE_MOONLIGHT] = "moonlight",
};
static const names MUON_SCALE = NAMES("Muon scale", muon_scale_names);

const char *lw_muon_scale_name(lw_muon_scale scale) { return name_of(MUON_SCALE, (int32_t)scale); }

lw_status lw_muon_scale_from_name(const char *name, lw_muon_scale *out) {
    int32_t v = 0;
    lw_status st = value_of(MUON_SCALE, name, out != NULL, &v);
    if (st == LW_OK) *out = (lw_muon_scale)v;
    return st;
}

static const char *const muon_tp_mode_names[] = {
    [LW_MUON_TP_DUPLICATED] = "duplicated",
    [LW_MUON_TP_DISTRIBUTED] = "distributed",
    [LW_MUON_TP_BLOCKWISE] = "blockwise",
};
static const names MUON_TP_MODE = NAMES("Muon TP mode", muon_tp_mode_names);

const char *lw_muon_tp_mode_name(lw_muon_tp_mode mode) {
    return name_of(MUON_TP_MODE, (int32_t)mode);
}

lw_status lw_muon_tp_mode_from_name(const char *name, lw_muon_tp_mode *out) {
    int32_t v = 0;
    lw_status st = value_of(MUON_TP_MODE, name, out != NULL, &v);
    if (st == LW_OK) *out = (lw_muon_tp_mode)v;
    return st;
}

static const char *const device_comm_names[] = {
    [LW_DEVICE_COMM_AUTO] = "auto",
    [LW_DEVICE_COMM_NCCL] = "nccl",
    [LW_DEVICE_COMM_STAGED] = "staged",
};
static const names DEVICE_COMM = NAMES("device communicator", device_comm_names);

const char *lw_device_comm_name(lw_device_comm kind) {
    return name_of(DEVICE_COMM, (int32_t)kind);
}

lw_status lw_device_comm_from_name(const char *name, lw_device_comm *out) {
    int32_t v = 0;
    lw_status st = value_of(DEVICE_COMM, name, out != NULL, &v);
    if (st == LW_OK) *out = (lw_device_comm)v;
    return st;
}

static const char *const path_kind_names[] = {
    [LW_PATH_MISSING] = "missing",
    [LW_PATH_FILE] = "file",
    [LW_PATH_DIR] = "dir",
    [LW_PATH_OTHER] = "other",
};
static const names PATH_KIND = NAMES("path kind", path_kind_names);

const char *lw_path_kind_name(lw_path_kind kind) { return name_of(PATH_KIND, (int32_t)kind); }

lw_status lw_path_kind_from_name(const char *name, lw_path_kind *out) {
    int32_t v = 0;
    lw_status st = value_of(PATH_KIND, name, out != NULL, &v);
    if (st == LW_OK) *out = (lw_path_kind)v;
    return st;
}
