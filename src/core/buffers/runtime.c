/* runtime.c: the runtime choices (mode, ZeRO level, sharding, layout algorithms), the rules
 * about which of them go together (lw_runtime_check, the only place they are checked: lw.ddp.new,
 * the recipes and lw_buffers_new call it) and the layout they stand for (lw_runtime_layout).
 * Reads a layout through the public API only; builds no layout and no buffers. */
#include "buffers/buffers_state.h"

lw_runtime_options lw_runtime_defaults(void) {
    lw_runtime_options o = {sizeof(lw_runtime_options), LW_MODE_LAYERWISE, 1, LW_SHARD_ALIGNED,
                            LW_ALGORITHM_AUTO, LW_ALGORITHM_AUTO};
    return o;
}

/* Buffers of these layouts are reduce-scattered and all-gathered (buffers.c's SYNC_SHARDED);
 * default buffers are all-reduced and legacy ones gathered whole. */
static bool sharded(lw_algorithm a) {
    return a != LW_ALGORITHM_DEFAULT && a != LW_ALGORITHM_LEGACY;
}

/* Each choice on its own. */
static lw_status check_values(const lw_runtime_options *o) {
    if (lw_mode_name(o->mode) == NULL)
        return lwi_fail(LW_ERR_INVALID, "runtime: unknown mode %d", (int)o->mode);
    if (o->zero < 1 || o->zero > 3)
        return lwi_fail(LW_ERR_INVALID, "runtime: zero must be 1, 2 or 3, got %d", (int)o->zero);
    if (lw_shard_name(o->shard) == NULL)
        return lwi_fail(LW_ERR_INVALID, "runtime: unknown shard %d", (int)o->shard);
    if (o->algorithm != LW_ALGORITHM_AUTO && lw_algorithm_name(o->algorithm) == NULL)
        return lwi_fail(LW_ERR_INVALID, "runtime: unknown algorithm %d", (int)o->algorithm);
    if (o->adamw_algorithm != LW_ALGORITHM_AUTO && lw_algorithm_name(o->adamw_algorithm) == NULL)
        return lwi_fail(LW_ERR_INVALID, "runtime: unknown AdamW algorithm %d",
                        (int)o->adamw_algorithm);
    return LW_OK;
}

/* The choices together. */
static lw_status check_combination(const lw_runtime_options *o) {
    if (o->zero > 1 && o->mode != LW_MODE_LAYERWISE)
        return lwi_fail(LW_ERR_INVALID,
                        "runtime: zero %d shards gradients%s across ranks; mode '%s' keeps them "
                        "whole (use mode 'layerwise')",
                        (int)o->zero, o->zero == 3 ? " and parameters" : "", lw_mode_name(o->mode));
    if (o->shard == LW_SHARD_ROWS && o->zero != 3)
        return lwi_fail(LW_ERR_INVALID,
                        "runtime: shard 'rows' is row-sharded FSDP: it needs zero 3, got zero %d",
                        (int)o->zero);
    if (o->shard == LW_SHARD_ROWS && o->algorithm != LW_ALGORITHM_AUTO)
        return lwi_fail(LW_ERR_INVALID,
                        "runtime: shard 'rows' lays the Muon matrices out by rows; algorithm "
                        "'%s' is for shard 'aligned'",
                        lw_algorithm_name(o->algorithm));
    if (o->mode != LW_MODE_LAYERWISE &&
        (o->algorithm != LW_ALGORITHM_AUTO || o->adamw_algorithm != LW_ALGORITHM_AUTO))
        return lwi_fail(LW_ERR_INVALID,
                        "runtime: mode '%s' fixes the layout; algorithm and adamw_layout are for "
                        "mode 'layerwise'",
                        lw_mode_name(o->mode));
    return LW_OK;
}

/* ZeRO-2/3 shard what every rank would otherwise hold whole: sharded buffers only; at ZeRO-3 a
 * group is gathered whole, so a bucket size below the largest parameter would not bound it. */
static lw_status check_layout(const lw_layout *l, int32_t zero) {
    lw_buffer_info info;
    lw_status st;
    if (zero == 1) return LW_OK;
    for (int32_t b = 0; b < lw_layout_num_buffers(l); b++) {
        if ((st = lw_layout_buffer(l, b, &info)) != LW_OK) return st;
        if (!sharded(info.algorithm))
            return lwi_fail(LW_ERR_INVALID,
                            "runtime: ZeRO-%d shards gradients%s across ranks, so it needs "
                            "sharded buffers (the layer-wise mode), but buffer #%d has the "
                            "unsharded '%s' layout",
                            (int)zero, zero == 3 ? " and parameters" : "", b + 1,
                            lw_algorithm_name(info.algorithm));
    }
    const int64_t bucket_size = lw_layout_get_options(l).bucket_size;
    if (zero < 3 || bucket_size == INT64_MAX) return LW_OK;
    lw_param_place place;
    const char *name;
    for (int32_t i = 0; i < lw_layout_num_params(l); i++) {
        if ((st = lw_layout_place(l, i, &place)) != LW_OK ||
            (st = lw_layout_buffer(l, place.buffer, &info)) != LW_OK)
            return st;
        const int64_t numel = place.stop - place.start;
        if (info.algorithm == LW_ALGORITHM_ROWS || numel <= bucket_size) continue;
        if ((st = lw_layout_param_name(l, i, &name)) != LW_OK) return st;
        return lwi_fail(LW_ERR_INVALID,
                        "runtime: at ZeRO-3 a bucket group is gathered whole, but bucket_size "
                        "%lld is smaller than '%s' (%lld elements): use a bucket size of at "
                        "least %lld",
                        (long long)bucket_size, name, (long long)numel, (long long)numel);
    }
    return LW_OK;
}

lw_status lw_runtime_check(const lw_runtime_options *opts, const lw_layout *layout) {
    if (opts == NULL) return lwi_fail(LW_ERR_INVALID, "runtime: NULL options");
    const lw_runtime_options d = lw_runtime_defaults();
    lw_runtime_options o;
    lw_status st = lwi_options_read("runtime", &lwi_runtime_options_kind, opts, &d, &o);
    if (st == LW_OK) st = check_values(&o);
    if (st == LW_OK) st = check_combination(&o);
    if (st == LW_OK && layout != NULL) st = check_layout(layout, o.zero);
    return st;
}

lw_status lw_runtime_layout(const lw_runtime_options *opts, lw_layout_options *layout) {
    if (layout == NULL) return lwi_fail(LW_ERR_INVALID, "runtime: NULL layout options");
    lw_status st = lw_runtime_check(opts, NULL);
    if (st != LW_OK) return st;
    /* *layout is written, not read: its size only says it is a struct this library knows */
    const lw_layout_options d = lw_layout_defaults();
    lw_layout_options checked;
    st = lwi_options_read("runtime", &lwi_layout_options_kind, layout, &d, &checked);
    if (st != LW_OK) return st;
    switch (opts->mode) {
    case LW_MODE_LEGACY:
        layout->algorithm = layout->adamw_algorithm = LW_ALGORITHM_LEGACY;
        return LW_OK;
    case LW_MODE_REPLICATED:
        layout->algorithm = layout->adamw_algorithm = LW_ALGORITHM_DEFAULT;
        return LW_OK;
    case LW_MODE_LAYERWISE:
        break;
    }
    if (opts->shard == LW_SHARD_ROWS)
        layout->algorithm = LW_ALGORITHM_ROWS;
    else
        layout->algorithm = opts->algorithm != LW_ALGORITHM_AUTO ? opts->algorithm : d.algorithm;
    layout->adamw_algorithm =
        opts->adamw_algorithm != LW_ALGORITHM_AUTO ? opts->adamw_algorithm : d.adamw_algorithm;
    return LW_OK;
}
