/* lw_optim_kernels.h: the optimizer's kernels on one device: vector kernels (norms, scaling,
 * bf16 conversions), Muon (Newton-Schulz orthogonalisation and its update), AdamW and Lion. Each
 * runs on the stream's device (NULL: the CPU) over arrays in that device's memory. The
 * optimizer of lw_optimizer.h drives them over the buffers; Muon's TP modes and the bf16
 * rounding rules are set out in docs/c_api.md.
 */
#ifndef LW_OPTIM_KERNELS_API_H
#define LW_OPTIM_KERNELS_API_H

#include "lw_base.h"
#include "lw_device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* LW_CDEF_BEGIN */

/* ---- vector kernels ------------------------------------------------------------------------ */

/* acc[0] += sum of squares of x (in double), acc[1] += number of elements exactly zero: the
 * gradient norm and zero count. acc: two doubles in the device's memory. */
lw_status lw_vec_norm_stats(lw_stream *stream, const float *x, int64_t n, double *acc);
/* [out] *finite (host): whether every element is finite. Waits for the stream. */
lw_status lw_vec_all_finite(lw_stream *stream, const float *x, int64_t n, bool *finite);
/* x *= alpha */
lw_status lw_vec_scale(lw_stream *stream, float *x, int64_t n, float alpha);
/* y = a + b (y may be a or b) */
lw_status lw_vec_add(lw_stream *stream, float *y, const float *a, const float *b, int64_t n);
/* y += alpha * x */
lw_status lw_vec_axpy(lw_stream *stream, float *y, float alpha, const float *x, int64_t n);

/* bf16 is stored as its 16 raw bits in a uint16_t. y and x: n elements each, not overlapping;
 * n <= 0 does nothing; every device gives the same bits. */
/* y[i] = x[i] rounded to bf16, to nearest, ties to even; overflow to infinity and NaNs kept
 * quiet NaNs, exactly as docs/c_api.md says. */
lw_status lw_vec_to_bf16(lw_stream *stream, uint16_t *y, const float *x, int64_t n);
/* y[i] = the bf16 x[i] as fp32, exactly (a NaN keeps its sign and payload). */
lw_status lw_vec_from_bf16(lw_stream *stream, float *y, const uint16_t *x, int64_t n);

/* ---- Muon ---------------------------------------------------------------------------------- */

typedef enum lw_ns_coeffs {
    LW_NS_SIMPLE = 0,        /* (3.4445, -4.7750, 2.0315), cycled */
    LW_NS_QUINTIC = 1,       /* five triples, cycled */
    LW_NS_POLAR_EXPRESS = 2, /* eight triples, the last repeated */
    LW_NS_CUBIC5 = 3,        /* five (a, b) pairs, exactly 5 steps */
    LW_NS_CUSTOM = 4,        /* options.custom */
    LW_NS_IDENTITY = 5,      /* no orthogonalisation, X = U: for tests and ablations */
    LW_NS_NANOCHAT = 6       /* nanochat's Polar Express: five triples, ns_steps <= 5 (the first
                                ns_steps), U divided by 1.01 ||U||_F + 1e-6 instead of
                                max(||U||_F, eps) */
} lw_ns_coeffs;

/* Newton-Schulz's arithmetic on a GPU: bf16 inputs with fp32 sums on tensor cores (the
 * default, as Muon is run in practice), TF32, or exact fp32. The CPU computes fp32. */
typedef enum lw_ns_precision {
    LW_NS_BF16 = 0,
    LW_NS_TF32 = 1,
    LW_NS_FP32 = 2
} lw_ns_precision;

typedef enum lw_weight_decay {
    LW_WD_DECOUPLED = 0,   /* W -= lr * wd * W */
    LW_WD_INDEPENDENT = 1, /* W -= wd * W */
    LW_WD_L2 = 2,          /* G += wd * W */
    LW_WD_SCALED = 3       /* W -= lr * scale * extra * wd * W: the step's scale on the decay too
                              (nanochat's), applied with the step (lw_muon_apply_decay) */
} lw_weight_decay;

typedef enum lw_muon_scale {
    LW_MUON_SCALE_SPECTRAL = 0,      /* sqrt(max(rows, cols)) */
    LW_MUON_SCALE_UNIT_RMS_NORM = 1, /* sqrt(rows / cols) */
    LW_MUON_SCALE_SHAPE_SCALING = 2, /* sqrt(max(1, rows / cols)) */
    LW_MUON_SCALE_MOONLIGHT = 3      /* 0.2 * sqrt(max(rows, cols)) */
} lw_muon_scale;

/* The names of the enums above (as lw_dtype_name): "simple", "quintic", "polar_express",
 * "cubic5", "custom", "identity", "nanochat"; "decoupled", "independent", "l2", "scaled";
 * "spectral", "unit_rms_norm", "shape_scaling", "moonlight"; "bf16", "tf32", "fp32". */
const char *lw_ns_coeffs_name(lw_ns_coeffs coeffs);
lw_status lw_ns_coeffs_from_name(const char *name, lw_ns_coeffs *out);
const char *lw_weight_decay_name(lw_weight_decay mode);
lw_status lw_weight_decay_from_name(const char *name, lw_weight_decay *out);
const char *lw_muon_scale_name(lw_muon_scale scale);
lw_status lw_muon_scale_from_name(const char *name, lw_muon_scale *out);
const char *lw_ns_precision_name(lw_ns_precision precision);
lw_status lw_ns_precision_from_name(const char *name, lw_ns_precision *out);

/* Muon on a TP-sharded matrix (lw_param_spec.tp_blocks) with a TP communicator of size > 1;
 * the scale always from the full shape. Duplicated: the whole matrix on every TP rank, as
 * TP 1; distributed: Newton-Schulz sharded, equal up to rounding; blockwise: each shard alone,
 * no communication (docs/c_api.md). */
typedef enum lw_muon_tp_mode {
    LW_MUON_TP_DUPLICATED = 0,
    LW_MUON_TP_DISTRIBUTED = 1,
    LW_MUON_TP_BLOCKWISE = 2
} lw_muon_tp_mode;

/* "duplicated", "distributed", "blockwise". */
const char *lw_muon_tp_mode_name(lw_muon_tp_mode mode);
lw_status lw_muon_tp_mode_from_name(const char *name, lw_muon_tp_mode *out);

typedef struct lw_muon_options {
    size_t size;          /* sizeof, set by lw_muon_defaults() (docs/c_api.md) */
    float momentum;       /* beta in [0, 1) */
    bool nesterov;
    int32_t ns_steps;     /* >= 1 */
    lw_ns_coeffs coeffs;
    const float *custom;  /* [borrowed, copied] n_custom (a, b, c) triples for LW_NS_CUSTOM */
    int32_t n_custom;
    bool custom_repeat;   /* custom: keep the last triple (true) or cycle the list (false) */
    lw_weight_decay weight_decay_mode;
    lw_muon_scale scale;
    float extra_scale;
    float eps;            /* Frobenius normalisation floor */
    bool symmetric;       /* X X^T and A A through SYRK/SYMM (default); false: full GEMMs */
    lw_ns_precision precision; /* Newton-Schulz's arithmetic on a GPU (the CPU computes fp32) */
    /* Read by the optimizer (lw_optimizer_new), not by lw_muon's own calls: */
    lw_muon_tp_mode tp_mode; /* TP-sharded matrices, with a TP communicator of size > 1 */
    bool split_qkv;          /* a fused QKV weight (lw_param_spec.qkv_groups) orthogonalised
                                as three matrices Q, K, V, each with its own scale; false: as
                                one matrix */
    /* Appended in the struct's former tail padding (its size is unchanged; docs/c_api.md): */
    bool row_equilibrate; /* before Newton-Schulz each row of U scaled to ||U||_F / sqrt(rows),
                             its norm floored at 1e-6 (MuonEq; a zero row stays zero) */
    bool renormalize;     /* after Newton-Schulz X scaled to ||X||_F = sqrt(min(rows, cols)),
                             ||X||_F floored at 1e-6 (Muon+) */
    bool cautious_wd;     /* the decay of W only where X * W >= 0, X the orthogonalised update,
                             applied with the step; weight_decay_mode decoupled, independent or
                             scaled; extra_scale > 0 */
} lw_muon_options;

/* momentum 0.95, nesterov, 5 steps, quintic, decoupled wd, moonlight scale (AdamW learning
 * rates carry over), extra 1, eps 1e-7, symmetric, TP mode duplicated, split_qkv on (as
 * Megatron's command line); no row equilibration, renormalisation or cautious decay. */
lw_muon_options lw_muon_defaults(void);

/* Muon's kernels and their workspace (the stream's device memory, grown on demand, kept
 * between calls, moved when a call comes on another device). */
typedef struct lw_muon lw_muon;
lw_status lw_muon_new(const lw_muon_options *opts, lw_muon **out);
void lw_muon_free(lw_muon *muon);
/* x = Newton-Schulz orthogonalisation of the rows x cols matrix u (row-major); x may be u. */
lw_status lw_muon_orthogonalize(lw_muon *muon, lw_stream *stream, const float *u, float *x,
                                int64_t rows, int64_t cols);
/* The element-wise part of an update, on any n elements of a matrix (a row shard): weight
 * decay of w (unless the options put it at the step: lw_muon_apply_decay), momentum m from
 * gradient grad_scale * g, and the update to orthogonalise in u. */
lw_status lw_muon_momentum(lw_muon *muon, lw_stream *stream, float *w, const float *g, float *m,
                           float *u, int64_t n, float lr, float weight_decay, float grad_scale);
/* w -= lr * scale * extra * x on n elements of a rows x cols matrix (scale from its shape). */
lw_status lw_muon_apply(lw_muon *muon, lw_stream *stream, float *w, const float *x, int64_t n,
                        int64_t rows, int64_t cols, float lr);
/* lw_muon_apply with the weight decay the options put at the step (cautious_wd, or
 * weight_decay_mode scaled), from w as it was: w -= lr * scale * extra * x + d * w, under
 * cautious_wd only where x * w >= 0, d = lr * wd (decoupled), wd (independent) or
 * lr * scale * extra * wd (scaled). Otherwise exactly lw_muon_apply (lw_muon_momentum decayed). */
lw_status lw_muon_apply_decay(lw_muon *muon, lw_stream *stream, float *w, const float *x, int64_t n,
                              int64_t rows, int64_t cols, float lr, float weight_decay);
/* One Muon update of w (rows x cols) with gradient g (read as grad_scale * g), momentum m:
 * weight decay, momentum, Newton-Schulz (with row equilibration and renormalisation as the
 * options say), then the step, with the decay the options put there. g is not modified. */
lw_status lw_muon_update(lw_muon *muon, lw_stream *stream, float *w, const float *g, float *m,
                         int64_t rows, int64_t cols, float lr, float weight_decay,
                         float grad_scale);

/* ---- AdamW --------------------------------------------------------------------------------- */

typedef struct lw_adamw_options {
    size_t size; /* sizeof, set by lw_adamw_defaults() (docs/c_api.md) */
    float beta1;
    float beta2;
    float eps;
} lw_adamw_options;

/* beta1 0.9, beta2 0.95, eps 1e-8. */
lw_adamw_options lw_adamw_defaults(void);
/* One AdamW update of n elements at step t >= 1 (bias correction), gradient grad_scale * g. */
lw_status lw_adamw_update(lw_stream *stream, const lw_adamw_options *opts, float *w,
                          const float *g, float *m, float *v, int64_t n, int64_t t, float lr,
                          float weight_decay, float grad_scale);

/* ---- Lion ---------------------------------------------------------------------------------- */

typedef struct lw_lion_options {
    size_t size; /* sizeof, set by lw_lion_defaults() (docs/c_api.md) */
    float beta1; /* the step's interpolation: sign(beta1 * m + (1 - beta1) * g), in [0, 1) */
    float beta2; /* the momentum's decay, in [0, 1) */
} lw_lion_options;

/* beta1 0.9, beta2 0.99 (the paper's). */
lw_lion_options lw_lion_defaults(void);
/* One Lion update of n elements, gradient grad_scale * g, momentum m (n floats, the only state):
 * w -= lr * (sign(beta1 m + (1 - beta1) g) + weight_decay * w), then m = beta2 m + (1 - beta2) g
 * (sign(0) = 0; a NaN in g makes w and m NaN there). Betas outside [0, 1): LW_ERR_INVALID. */
lw_status lw_lion_update(lw_stream *stream, const lw_lion_options *opts, float *w, const float *g,
                         float *m, int64_t n, float lr, float weight_decay, float grad_scale);

/* ---- NorMuon ------------------------------------------------------------------------------- */

/* NorMuon's options beyond Muon's (a NorMuon step is Muon's, lw_muon_options, with the variance
 * reduction after orthogonalisation: docs/algorithms.md section 6). */
typedef struct lw_normuon_options {
    size_t size; /* sizeof, set by lw_normuon_defaults() (docs/c_api.md) */
    float beta2; /* the second moment's decay, in [0, 1) */
    float floor; /* > 0: the second moment's and the scaled norm's floor */
} lw_normuon_options;

/* beta2 0.9 and floor 1e-10 (nanochat's). */
lw_normuon_options lw_normuon_defaults(void);

/* LW_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* LW_OPTIM_KERNELS_API_H */
