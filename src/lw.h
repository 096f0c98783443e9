/* lw.h: the whole public C API of lwopt, and the contract of the LuaJIT binding.
 *
 * The region between the LW_CDEF markers is copied verbatim into the Lua binding at build time,
 * so it holds plain declarations only: no macros, no #if, only stddef/stdint/stdbool types.
 * Conventions: calls that can fail return lw_status (0 ok, negative error) and write results
 * through out pointers; lw_last_error() then says "object: what went wrong, with the value".
 * Objects are opaque; option structs are plain data with a lw_<x>_defaults() function.
 * Enum values are explicit and only ever appended. Offsets are element offsets, 0-based,
 * half-open [start, stop). Indices of buffers, buckets and params are 0-based.
 */
#ifndef LW_H
#define LW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* LW_CDEF_BEGIN */

/* ---- status ------------------------------------------------------------------------------ */

typedef enum lw_status {
    LW_OK = 0,
    LW_ERR_INVALID = -1,     /* bad argument or input; the message names it */
    LW_ERR_NOMEM = -2,       /* an allocation failed */
    LW_ERR_UNSUPPORTED = -3, /* not built in (e.g. CUDA) or not implemented for this case */
    LW_ERR_RANGE = -4,       /* an index or name out of range / not found */
    LW_ERR_STATE = -5,       /* object in the wrong state for this call */
    LW_ERR_IO = -6           /* file or system error */
} lw_status;

/* Message of the last failed call on this thread; "" if none. [borrowed] valid until the next
 * failing call on the same thread. */
const char *lw_last_error(void);
/* Library version, "MAJOR.MINOR.PATCH". [borrowed] static string. */
const char *lw_version(void);
/* Whether the CUDA backend (liblwopt_cuda.so) is built and loadable. */
bool lw_has_cuda(void);

/* ---- parameter specs ----------------------------------------------------------------------- */

typedef enum lw_dtype { LW_DTYPE_F32 = 0, LW_DTYPE_BF16 = 1, LW_DTYPE_F16 = 2 } lw_dtype;

/* One model parameter, as the layout engine sees it. */
typedef struct lw_param_spec {
    const char *name;      /* [borrowed] unique, non-empty; copied by lw_layout_new */
    int32_t ndim;          /* 1..4 */
    int64_t shape[4];      /* shape[0..ndim-1] > 0; e.g. {out, in} for a linear weight */
    lw_dtype dtype;        /* parameter dtype */
    lw_dtype grad_dtype;   /* gradient dtype */
    bool expert;           /* sharded over the expert data-parallel group */
    bool shared_embedding; /* one tensor used as input embedding and LM head: never Muon,
                              isolated in its own bucket */
    bool muon;             /* managed by Muon (routed); false = AdamW */
} lw_param_spec;

/* ---- layouts ------------------------------------------------------------------------------- */

typedef enum lw_algorithm {
    LW_ALGORITHM_COST = 0,          /* shard-aligned, balances Newton-Schulz cost */
    LW_ALGORITHM_LPT = 1,           /* shard-aligned, largest-first on contiguous chunks */
    LW_ALGORITHM_SIZE_MATCHING = 2, /* shard-aligned, first published version */
    LW_ALGORITHM_DISTOPT = 3,       /* element-wise ZeRO-1: rank r owns the r-th slice */
    LW_ALGORITHM_DEFAULT = 4,       /* unpadded, unsharded (plain data parallel) */
    LW_ALGORITHM_LEGACY = 5         /* unpadded, whole params owned by ping-pong dealing */
} lw_algorithm;

typedef struct lw_layout_options {
    int32_t dp;                   /* data-parallel size for non-expert buffers, >= 1 */
    int32_t expert_dp;            /* data-parallel size for expert buffers, >= 1 */
    int64_t bucket_size;          /* elements, >= 0; INT64_MAX = one bucket per buffer */
    lw_algorithm algorithm;       /* layout of Muon buffers */
    lw_algorithm adamw_algorithm; /* layout of AdamW buffers (DISTOPT, or a shard-aligned one
                                     for owning AdamW params whole) */
    bool high_busbw;              /* pad bucket ends to lcm(dp, 128, 65536) */
} lw_layout_options;

/* dp 1, expert_dp 1, no bucket limit, cost for Muon, distopt for AdamW, no high-busbw pad. */
lw_layout_options lw_layout_defaults(void);

typedef struct lw_layout lw_layout;

/* A buffer: the params of one (dtype, grad dtype, expert, muon) key, in one flat array. */
typedef struct lw_buffer_info {
    lw_dtype param_dtype;
    lw_dtype grad_dtype;
    bool expert;
    bool muon;
    lw_algorithm algorithm;
    int32_t dp;    /* size of the group that shards it */
    int64_t numel; /* elements, padding included */
    int32_t n_buckets;
    int32_t n_params;
} lw_buffer_info;

/* A bucket: [start, stop) of its buffer, dp equal shards of shard_size elements. */
typedef struct lw_bucket_info {
    int64_t start;
    int64_t stop;
    int64_t shard_size;     /* (stop - start) / dp; stop - start for the unsharded layouts */
    int64_t numel_unpadded; /* sum of the real sizes of its params */
    int32_t n_params;
} lw_bucket_info;

/* Where a parameter lives. */
typedef struct lw_param_place {
    int32_t buffer;
    int32_t bucket;
    int64_t start; /* element offset in the buffer */
    int64_t stop;  /* start + numel */
    int32_t owner; /* rank within the buffer's group that owns it whole; -1 if element-wise
                      (distopt: split across ranks) or unsharded (default: every rank) */
} lw_param_place;

/* Whole-model statistics. Per-rank figures cover Muon buffers only, over
 * max(dp, expert_dp) ranks: owned numel, and owned Newton-Schulz cost (max(m,n) * min(m,n)^2
 * for an m x n matrix, numel otherwise; an element-wise slice counts its share). */
typedef struct lw_layout_stats {
    int32_t params;       /* number of parameters */
    int64_t numel;        /* sum of real parameter sizes */
    int64_t buffer_numel; /* sum of buffer sizes, padding included */
    int64_t padding;      /* buffer_numel - numel */
    double overhead;      /* padding / numel */
    int64_t muon_numel;   /* the same, for Muon buffers only */
    int64_t muon_buffer_numel;
    double muon_overhead;
    double numel_imbalance; /* max over ranks / mean over ranks; 1 when nothing is owned */
    double cost_imbalance;
    double cost_imbalance_bound; /* lower bound for whole-matrix ownership:
                                    max(total/ranks, largest cost) / (total/ranks) */
    int32_t ranks;               /* number of per-rank entries, max(dp, expert_dp) */
} lw_layout_stats;

/* Computes the layout of n params (definition order) under opts. [out] *out owned by the
 * caller, freed with lw_layout_free. Validates every input; on error *out is NULL. */
lw_status lw_layout_new(const lw_param_spec *specs, int32_t n, const lw_layout_options *opts,
                        lw_layout **out);
void lw_layout_free(lw_layout *layout);

lw_layout_options lw_layout_get_options(const lw_layout *layout);
int32_t lw_layout_num_params(const lw_layout *layout);
int32_t lw_layout_num_buffers(const lw_layout *layout);
lw_status lw_layout_buffer(const lw_layout *layout, int32_t buffer, lw_buffer_info *out);
lw_status lw_layout_bucket(const lw_layout *layout, int32_t buffer, int32_t bucket,
                           lw_bucket_info *out);
/* The k-th param of a bucket, in placement order: [out] *param is its index in the specs. */
lw_status lw_layout_bucket_param(const lw_layout *layout, int32_t buffer, int32_t bucket, int32_t k,
                                 int32_t *param);
/* Place of the param with this index in the specs. */
lw_status lw_layout_place(const lw_layout *layout, int32_t param, lw_param_place *out);
/* Index of the param with this name; LW_ERR_RANGE if none. */
lw_status lw_layout_find(const lw_layout *layout, const char *name, int32_t *param);
/* Name of a param. [out] *name borrowed from the layout. */
lw_status lw_layout_param_name(const lw_layout *layout, int32_t param, const char **name);
lw_status lw_layout_stats_get(const lw_layout *layout, lw_layout_stats *out);
/* Owned numel and cost of one rank (0 <= rank < stats.ranks), Muon buffers. */
lw_status lw_layout_rank_load(const lw_layout *layout, int32_t rank, int64_t *numel, double *cost);
/* Checks every invariant; LW_ERR_INVALID with the first violation named if one fails. */
lw_status lw_layout_check(const lw_layout *layout);
/* Stable 64-bit hash of options and placement, as 16 hex digits. [out] hex: 17 bytes. */
lw_status lw_layout_hash(const lw_layout *layout, char *hex);

/* Padding rules of REFERENCE.md section 3. */
int64_t lw_bucket_end_divisor(int32_t dp, bool high_busbw);
int64_t lw_shard_divisor(int32_t dp, bool high_busbw);

/* LW_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* LW_H */
