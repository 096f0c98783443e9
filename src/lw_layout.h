/* lw_layout.h: parameter specs and layouts: where each parameter of a model lives in the flat
 * buffers (one per kind of parameter), how buffers split into buckets, and which rank owns what.
 * Pure computation on the host: no device, no communicator. The algorithms are described in
 * docs/algorithms.md; the statistics' and TP fields' definitions in docs/c_api.md.
 */
#ifndef LW_LAYOUT_API_H
#define LW_LAYOUT_API_H

#include "lw_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* LW_CDEF_BEGIN */

/* ---- optimizer rules ----------------------------------------------------------------------- */

/* Which rule updates a parameter. Append-only: a value keeps its number and its name; files
 * store the name (lw_optimizer_kind_name), never the number. The list of rules, their state
 * parts and whether they update whole matrices: docs/algorithms.md. */
typedef enum lw_optimizer_kind {
    LW_OPTIMIZER_ADAMW = 0, /* element-wise: Adam with decoupled weight decay */
    LW_OPTIMIZER_MUON = 1,  /* whole matrices: momentum orthogonalised by Newton-Schulz */
    LW_OPTIMIZER_LION = 2,  /* element-wise: the sign of an interpolated momentum */
    LW_OPTIMIZER_NORMUON = 3 /* whole matrices: Muon, its update normalised per row or column */
} lw_optimizer_kind;

/* "adamw", "muon", "lion", "normuon" (names as lw_dtype_name); NULL for a value no rule has. */
const char *lw_optimizer_kind_name(lw_optimizer_kind kind);
lw_status lw_optimizer_kind_from_name(const char *name, lw_optimizer_kind *out);
/* How many rules there are: the kinds are 0 .. count - 1. */
int32_t lw_optimizer_kind_count(void);
/* Whether the rule updates whole matrices (their owner needs all of one: a shard-aligned
 * layout, or row-sharding's gather), rather than element by element. False for no rule. */
bool lw_optimizer_kind_whole(lw_optimizer_kind kind);
/* How many named parts its state has per parameter, and part i's name ("m", "v"; NULL out of
 * range): a checkpoint stores "<part>/<param>". A part's size class says how many floats it
 * holds (lw_optimizer_kind_part_count). */
int32_t lw_optimizer_kind_parts(lw_optimizer_kind kind);
const char *lw_optimizer_kind_part(lw_optimizer_kind kind, int32_t part);

/* A state part's size class. Append-only. */
typedef enum lw_part_size {
    LW_PART_ELEMENTS = 0, /* one float per element the rank updates */
    LW_PART_LINES = 1     /* one float per line of the whole matrix: per row when rows >= cols,
                             else per column (NorMuon's second moment); its owner's */
} lw_part_size;

/* Part i's size class (LW_PART_ELEMENTS out of range). */
lw_part_size lw_optimizer_kind_part_size(lw_optimizer_kind kind, int32_t part);
/* [out] count: the floats of part i for a rank updating `elements` elements of a rows x cols
 * matrix (for an element-wise rule's tensor, any rows and cols): elements, or max(rows, cols). */
lw_status lw_optimizer_kind_part_count(lw_optimizer_kind kind, int32_t part, int64_t elements,
                                       int64_t rows, int64_t cols, int64_t *count);

/* ---- parameter specs ----------------------------------------------------------------------- */

/* One model parameter, as the layout engine sees it. */
typedef struct lw_param_spec {
    const char *name;      /* [borrowed] unique, non-empty; copied by lw_layout_new */
    int32_t ndim;          /* 1..4 */
    int64_t shape[4];      /* shape[0..ndim-1] > 0; e.g. {out, in} for a linear weight */
    lw_dtype dtype;        /* parameter dtype */
    lw_dtype grad_dtype;   /* gradient dtype */
    bool expert;           /* sharded over the expert data-parallel group */
    bool shared_embedding; /* one tensor used as input embedding and LM head: never a
                              whole-matrix rule's, isolated in its own bucket */
    lw_optimizer_kind optimizer; /* the rule that updates it (routed); 0: AdamW */
    int32_t tp_dim;        /* the dimension a TP shard splits: 0 column-, 1 row-parallel */
    int32_t tp_blocks;     /* >= 1: a TP shard of that many blocks (3 for a fused [Q; K; V]);
                              0: replicated over TP, tp_dim ignored */
    int32_t qkv_groups;    /* >= 1: a fused QKV weight of that many groups; 0: not one */
    int64_t qkv_rows[3];   /* q, k and v rows of one group */
} lw_param_spec;

/* ---- layouts ------------------------------------------------------------------------------- */

typedef enum lw_algorithm {
    LW_ALGORITHM_COST = 0,          /* shard-aligned, balances Newton-Schulz cost */
    LW_ALGORITHM_LPT = 1,           /* shard-aligned, largest-first on contiguous chunks */
    LW_ALGORITHM_SIZE_MATCHING = 2, /* shard-aligned, first published version */
    LW_ALGORITHM_DISTOPT = 3,       /* element-wise ZeRO-1: rank r owns the r-th slice */
    LW_ALGORITHM_DEFAULT = 4,       /* unpadded, unsharded (plain data parallel) */
    LW_ALGORITHM_LEGACY = 5,        /* unpadded, whole params owned by ping-pong dealing */
    LW_ALGORITHM_ROWS = 6,          /* one bucket per param, split by rows into dp equal shards
                                       (row-sharded FSDP) */
    LW_ALGORITHM_PACKED = 7,        /* whole matrices owned, no padding: shards of unequal size,
                                       owners balancing Newton-Schulz cost */
    LW_ALGORITHM_AUTO = -1          /* lw_runtime_options only: follows from the mode and shard
                                       (lw_runtime_layout); no layout has it; no name */
} lw_algorithm;

/* "cost", "lpt", "size_matching", "distopt", "default", "legacy", "rows", "packed" (names as
 * lw_dtype_name). */
const char *lw_algorithm_name(lw_algorithm algorithm);
lw_status lw_algorithm_from_name(const char *name, lw_algorithm *out);

typedef struct lw_layout_options {
    size_t size;                  /* sizeof, set by lw_layout_defaults() (docs/c_api.md) */
    int32_t dp;                   /* data-parallel size for non-expert buffers, >= 1 */
    int32_t expert_dp;            /* data-parallel size for expert buffers, >= 1 */
    int64_t bucket_size;          /* elements, >= 0; INT64_MAX = one bucket per buffer */
    lw_algorithm algorithm;       /* layout of Muon buffers (ROWS only here) */
    lw_algorithm adamw_algorithm; /* layout of AdamW buffers (DISTOPT, or a shard-aligned one
                                     for owning AdamW params whole) */
    bool high_busbw;              /* pad bucket ends to lcm(dp, 128, 65536) */
} lw_layout_options;

/* dp 1, expert_dp 1, no bucket limit, cost for Muon, distopt for AdamW, no high-busbw pad. */
lw_layout_options lw_layout_defaults(void);

typedef struct lw_layout lw_layout;

/* A buffer: the params of one (dtype, grad dtype, expert, optimizer) key, in one flat array. */
typedef struct lw_buffer_info {
    lw_dtype param_dtype;
    lw_dtype grad_dtype;
    bool expert;
    lw_optimizer_kind optimizer;
    bool whole; /* its rule updates whole matrices (lw_optimizer_kind_whole) */
    lw_algorithm algorithm;
    int32_t dp;    /* size of the group that shards it */
    int64_t numel; /* elements, padding included */
    int32_t n_buckets;
    int32_t n_params;
} lw_buffer_info;

/* A bucket: [start, stop) of its buffer, in dp shards (lw_layout_shard). */
typedef struct lw_bucket_info {
    int64_t start;
    int64_t stop;
    int64_t shard_size;     /* (stop - start) / dp; stop - start when unsharded; packed: the
                               largest shard */
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

/* Whole-model statistics; the per-rank figures (owned numel, Newton-Schulz cost) cover the
 * whole-matrix rules' buffers over max(dp, expert_dp) ranks, with the costs docs/c_api.md
 * defines. */
typedef struct lw_layout_stats {
    int32_t params;       /* number of parameters */
    int64_t numel;        /* sum of real parameter sizes */
    int64_t buffer_numel; /* sum of buffer sizes, padding included */
    int64_t padding;      /* buffer_numel - numel */
    double overhead;      /* padding / numel */
    int64_t muon_numel;   /* the same, for the buffers of whole-matrix rules (Muon's) only */
    int64_t muon_buffer_numel;
    double muon_overhead;
    double numel_imbalance; /* max over ranks / mean over ranks; 1 when nothing is owned */
    double cost_imbalance;
    double cost_imbalance_bound; /* lower bound for whole-matrix ownership, over the mean */
    int32_t ranks;               /* number of per-rank entries, max(dp, expert_dp) */
} lw_layout_stats;

/* The layout of n params (definition order) under opts; every input is validated. [out] owned
 * (lw_layout_free); NULL on error. */
lw_status lw_layout_new(const lw_param_spec *specs, int32_t n, const lw_layout_options *opts,
                        lw_layout **out);
void lw_layout_free(lw_layout *layout);

lw_layout_options lw_layout_get_options(const lw_layout *layout);
int32_t lw_layout_num_params(const lw_layout *layout);
int32_t lw_layout_num_buffers(const lw_layout *layout);
lw_status lw_layout_buffer(const lw_layout *layout, int32_t buffer, lw_buffer_info *out);
lw_status lw_layout_bucket(const lw_layout *layout, int32_t buffer, int32_t bucket,
                           lw_bucket_info *out);
/* Rank rank's shard of a bucket (0 <= rank < the buffer's dp): [*start, *start + *count) of
 * the buffer. Equal shards: start + rank * shard_size; packed: the run of the params the rank
 * owns there (count 0 if none), the shards tiling the bucket in rank order; the unsharded
 * layouts (default, legacy): the whole bucket. */
lw_status lw_layout_shard(const lw_layout *layout, int32_t buffer, int32_t bucket, int32_t rank,
                          int64_t *start, int64_t *count);
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
/* Stable 64-bit hash of options and placement as 16 hex digits; expert parameters hashed
 * without their names (docs/c_api.md). [out] hex: 17 bytes. */
lw_status lw_layout_hash(const lw_layout *layout, char *hex);

/* Padding rules of docs/algorithms.md section 3. */
int64_t lw_bucket_end_divisor(int32_t dp, bool high_busbw);
int64_t lw_shard_divisor(int32_t dp, bool high_busbw);

/* LW_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* LW_LAYOUT_API_H */
