/* attention.c: causal multi-head self-attention on the CPU, forward and backward, with grouped
 * KV heads and a sliding window. Each (batch, head) is worked in blocks of ATT_ROWS query rows,
 * with the head's keys and values packed first (transposed where a product runs along them) so
 * that no tile reads rows of qkv, thousands of floats apart: at 768 floats such rows fall in a
 * few L1 sets and evict each other. The products are
 * register tiles in GCC's vector extensions (fast_math.h): the scores' 4 rows x 16 keys along
 * head_dim, and the sums over keys or rows into 2 rows x 32 channels. Tiles stop at the
 * diagonal, so the work is the causal triangle's plus a tile's edge, not a block's square; the
 * probabilities past a row's last key are written as zeros, so the tiles that run over them
 * stay causal. Under a window a block's scores start at its first row's earliest key (rounded
 * down to a tile), and the probabilities before a row's earliest key are zeros as well. Only the
 * rows' log-sum-exp is kept for the backward, which recomputes the probabilities from it (the
 * contract every device shares: no t x t matrix per head lives between passes). The forward's
 * (batch, head) pairs, the backward's (batch, KV head) pairs (a KV head's gradient sums over its
 * query heads) are split over the CPU pool's threads (pool.c), each with its own part of the
 * scratch. */
#include "device/cpu/cpu.h"
#include "device/cpu/fast_math.h"
#include "device/cpu/pool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Query rows per block: a block's scores (rows x keys) stay in L2 for any t. */
#define ATT_ROWS 64
/* The scores' tile (rows x keys) and the sums' tile (rows x channels): 8 and 8 accumulators,
 * with room in the 16 vector registers for the operands of a separate multiply and add (the
 * kernels are built without contraction into FMAs: fast_math.h). */
#define SCORE_ROWS 4
#define SCORE_KEYS 16
#define SUM_ROWS   2
#define SUM_VECS   4

static int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

/* The row stride of a matrix whose columns a tile walks down (keys' scores, K^T and V^T): the
 * keys rounded up to SCORE_KEYS, and to an odd multiple of it. At 128 floats, 512 bytes, a
 * column's rows fall in 8 of L1's 64 sets and evict each other; at an odd multiple of 64 bytes
 * they spread over all 64. */
static int64_t key_stride(int64_t keys) { return round_up(keys, SCORE_KEYS) | SCORE_KEYS; }

/* A part's scratch, in floats, for head dim hd: keys padded to SCORE_KEYS (tp) and channels to
 * 8 (hd8). kt: K^T scaled by 1/sqrt(hd), hd x tp; vt: V^T (backward); rows: V (forward) or K
 * (backward), tp x hd8; dk, dv: the backward's sums, tp x hd8 each; qb, gb: a block's q and
 * dout rows, ATT_ROWS x hd8 each (the forward's output tile in qb); s, ds: a block's scores and
 * their gradient, ATT_ROWS x tp each. */
typedef struct {
    float *kt, *vt, *rows, *dk, *dv, *qb, *gb, *s, *ds;
} att_part;

static int64_t part_floats(int64_t t, int64_t hd) {
    const int64_t tp = key_stride(t), hd8 = round_up(hd, 8);
    const int64_t m = t < ATT_ROWS ? t : ATT_ROWS;
    return 2 * hd * tp + 3 * tp * hd8 + 2 * m * hd8 + 2 * m * tp;
}

static att_part part_at(float *scratch, int32_t part, int64_t t, int64_t hd) {
    const int64_t tp = key_stride(t), hd8 = round_up(hd, 8);
    const int64_t m = t < ATT_ROWS ? t : ATT_ROWS;
    float *p = scratch + part * part_floats(t, hd);
    att_part a;
    a.kt = p, p += hd * tp;
    a.vt = p, p += hd * tp;
    a.rows = p, p += tp * hd8;
    a.dk = p, p += tp * hd8;
    a.dv = p, p += tp * hd8;
    a.qb = p, p += m * hd8;
    a.gb = p, p += m * hd8;
    a.s = p, p += m * tp;
    a.ds = p;
    return a;
}

int64_t lwi_cpu_attention_scratch_floats(int64_t b, int64_t t, int64_t c, int64_t nh, int64_t nkv,
                                         int64_t window) {
    (void)b, (void)nkv, (void)window;
    if (t <= 0 || c <= 0 || nh <= 0) return 0;
    return LWI_POOL_MAX * part_floats(t, c / nh);
}

/* ---- tiles ----------------------------------------------------------------------------------- */

/* s[r][0, 16) = sum_d a[r][d] bt[d][0, 16) for r < R: a's rows (stride lda) against a packed
 * transpose (stride ldb). */
LWI_ROW_HELPER void score_tile(float *s, int64_t lds, const float *a, int64_t lda, const float *bt,
                               int64_t ldb, int64_t hd, int R) {
    lwi_v8f acc[SCORE_ROWS][2];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        acc[r][0] = acc[r][1] = lwi_v8_splat(0.0f);
    for (int64_t d = 0; d < hd; d++) {
        const lwi_v8f b0 = lwi_v8_load(bt + d * ldb), b1 = lwi_v8_load(bt + d * ldb + 8);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const float x = a[r * lda + d];
            acc[r][0] += x * b0;
            acc[r][1] += x * b1;
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        lwi_v8_store(s + r * lds, acc[r][0]);
        lwi_v8_store(s + r * lds + 8, acc[r][1]);
    }
}

/* The scores of a block's rows [0, m) against the keys (columns of bt and s) from row r's
 * earliest, first + r (rounded down to a tile; 0 at most), to its diagonal, diag + r, and on to
 * the tile's edge, into s (stride lds): a's rows stride lda, bt (hd x ldb) packed. */
LWI_ROW_HELPER void scores(float *s, int64_t lds, const float *a, int64_t lda, const float *bt,
                           int64_t ldb, int64_t hd, int64_t diag, int64_t first, int64_t m) {
    for (int64_t r = 0; r < m; r += SCORE_ROWS) {
        const int R = m - r < SCORE_ROWS ? (int)(m - r) : SCORE_ROWS;
        const int64_t keys = diag + r + R;
        const int64_t from = first + r > 0 ? (first + r) / SCORE_KEYS * SCORE_KEYS : 0;
        for (int64_t j = from; j < keys; j += SCORE_KEYS) {
            float *sp = s + r * lds + j;
            const float *ap = a + r * lda;
            switch (R) {
            case 4:
                score_tile(sp, lds, ap, lda, bt + j, ldb, hd, 4);
                break;
            case 3:
                score_tile(sp, lds, ap, lda, bt + j, ldb, hd, 3);
                break;
            case 2:
                score_tile(sp, lds, ap, lda, bt + j, ldb, hd, 2);
                break;
            default:
                score_tile(sp, lds, ap, lda, bt + j, ldb, hd, 1);
                break;
            }
        }
    }
}

/* out[r][0, 8 NV) (+)= sum_{k in [k0, k1)} p[r ps + k ks] v[k][0, 8 NV) for r < R: a sum along
 * p's rows (ps = lds, ks = 1) or down its columns (ps = 1, ks = lds). */
LWI_ROW_HELPER void sum_tile(float *out, int64_t ldo, const float *p, int64_t ps, int64_t ks,
                             const float *v, int64_t ldv, int64_t k0, int64_t k1, int R, int NV,
                             bool accumulate) {
    lwi_v8f acc[SUM_ROWS][SUM_VECS];
#pragma GCC unroll 2
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int q = 0; q < NV; q++)
            acc[r][q] = accumulate ? lwi_v8_load(out + r * ldo + 8 * q) : lwi_v8_splat(0.0f);
    for (int64_t k = k0; k < k1; k++) {
        lwi_v8f vk[SUM_VECS];
#pragma GCC unroll 4
        for (int q = 0; q < NV; q++)
            vk[q] = lwi_v8_load(v + k * ldv + 8 * q);
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) {
            const float x = p[r * ps + k * ks];
#pragma GCC unroll 4
            for (int q = 0; q < NV; q++)
                acc[r][q] += x * vk[q];
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int q = 0; q < NV; q++)
            lwi_v8_store(out + r * ldo + 8 * q, acc[r][q]);
}

/* sum_tile over an output of `rows` rows x hd8 channels, in tiles: output row r sums k over
 * [max(0, r + k_from), min(kmax, r + k_to)), a tile over its rows' union (the zeros past the
 * diagonal cover the difference). */
LWI_ROW_HELPER void sums(float *out, int64_t ldo, const float *p, int64_t ps, int64_t ks,
                         const float *v, int64_t ldv, int64_t rows, int64_t hd8, int64_t k_from,
                         int64_t k_to, int64_t kmax, bool accumulate) {
    for (int64_t r = 0; r < rows; r += SUM_ROWS) {
        const int R = rows - r < SUM_ROWS ? (int)(rows - r) : SUM_ROWS;
        const int64_t k0 = r + k_from > 0 ? r + k_from : 0;
        const int64_t k1 = r + R - 1 + k_to < kmax ? r + R - 1 + k_to : kmax;
        for (int64_t c0 = 0; c0 < hd8; c0 += 8 * SUM_VECS) {
            const int NV = hd8 - c0 < 8 * SUM_VECS ? (int)((hd8 - c0) / 8) : SUM_VECS;
            float *o = out + r * ldo + c0;
            const float *pr = p + r * ps, *vc = v + c0;
#define SUM_TILE(RR, VV) sum_tile(o, ldo, pr, ps, ks, vc, ldv, k0, k1, RR, VV, accumulate)
            if (R == 2) {
                switch (NV) {
                case 4:
                    SUM_TILE(2, 4);
                    break;
                case 3:
                    SUM_TILE(2, 3);
                    break;
                case 2:
                    SUM_TILE(2, 2);
                    break;
                default:
                    SUM_TILE(2, 1);
                    break;
                }
            } else {
                switch (NV) {
                case 4:
                    SUM_TILE(1, 4);
                    break;
                case 3:
                    SUM_TILE(1, 3);
                    break;
                case 2:
                    SUM_TILE(1, 2);
                    break;
                default:
                    SUM_TILE(1, 1);
                    break;
                }
            }
#undef SUM_TILE
        }
    }
}

/* ---- packing --------------------------------------------------------------------------------- */

/* dst[d][0, 8) = alpha src[0, 8)[d] for d < 8: an 8 x 8 transpose in registers (unpack pairs of
 * rows, then pairs of pairs, then swap the 128-bit halves); a float at a time, the stores down
 * dst's columns took a tenth of the backward. */
LWI_ROW_HELPER void transpose_8x8(float *dst, int64_t ldd, const float *src, int64_t lds,
                                  float alpha) {
    typedef int32_t v8i __attribute__((vector_size(32)));
    const v8i lo = {0, 8, 1, 9, 4, 12, 5, 13}, hi = {2, 10, 3, 11, 6, 14, 7, 15};
    const v8i lo2 = {0, 1, 8, 9, 4, 5, 12, 13}, hi2 = {2, 3, 10, 11, 6, 7, 14, 15};
    const v8i lo4 = {0, 1, 2, 3, 8, 9, 10, 11}, hi4 = {4, 5, 6, 7, 12, 13, 14, 15};
    lwi_v8f r[8], t[8], u[8];
    for (int i = 0; i < 8; i++)
        r[i] = lwi_v8_load(src + i * lds) * alpha;
    for (int i = 0; i < 8; i += 2) {
        t[i] = __builtin_shuffle(r[i], r[i + 1], lo);
        t[i + 1] = __builtin_shuffle(r[i], r[i + 1], hi);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = __builtin_shuffle(t[i], t[i + 2], lo2);
        u[i + 1] = __builtin_shuffle(t[i], t[i + 2], hi2);
        u[i + 2] = __builtin_shuffle(t[i + 1], t[i + 3], lo2);
        u[i + 3] = __builtin_shuffle(t[i + 1], t[i + 3], hi2);
    }
    for (int i = 0; i < 4; i++) {
        lwi_v8_store(dst + i * ldd, __builtin_shuffle(u[i], u[i + 4], lo4));
        lwi_v8_store(dst + (i + 4) * ldd, __builtin_shuffle(u[i], u[i + 4], hi4));
    }
}

/* dst[d][j] = alpha src[j][d] for j < t (rows stride lds), zero for j in [t, tp) */
LWI_ROW_HELPER void pack_transposed(float *dst, const float *src, int64_t lds, int64_t t,
                                    int64_t tp, int64_t hd, float alpha) {
    const int64_t t8 = t / 8 * 8, hd8 = hd / 8 * 8;
    for (int64_t j = 0; j < t8; j += 8)
        for (int64_t d = 0; d < hd8; d += 8)
            transpose_8x8(dst + d * tp + j, tp, src + j * lds + d, lds, alpha);
    for (int64_t j = 0; j < t; j++)
        for (int64_t d = j < t8 ? hd8 : 0; d < hd; d++)
            dst[d * tp + j] = alpha * src[j * lds + d];
    for (int64_t d = 0; d < hd; d++)
        for (int64_t j = t; j < tp; j++)
            dst[d * tp + j] = 0.0f;
}

/* dst[j][0, hd8) = src[j][0, hd) and zeros, for j < t */
LWI_ROW_HELPER void pack_rows(float *dst, const float *src, int64_t lds, int64_t t, int64_t hd,
                              int64_t hd8) {
    for (int64_t j = 0; j < t; j++)
        for (int64_t d = 0; d < hd8; d++)
            dst[j * hd8 + d] = d < hd ? src[j * lds + d] : 0.0f;
}

/* ---- rows of probabilities ------------------------------------------------------------------- */

/* Over the row's first n8 (n rounded up to 8) entries, in vectors. */
LWI_ROW_HELPER float row_max(float *row, int64_t n, int64_t n8) {
    for (int64_t j = n; j < n8; j++)
        row[j] = -INFINITY;
    lwi_v8f m = lwi_v8_load(row);
    for (int64_t j = 8; j < n8; j += 8)
        m = lwi_v8_max(lwi_v8_load(row + j), m);
    float mx = m[0];
    for (int k = 1; k < 8; k++)
        mx = m[k] > mx ? m[k] : mx;
    return mx;
}

/* row[j] = exp(row[j] - shift) for j in [from, n), zero for j < from (keys before the window)
 * and in [n, width), returning the sum (in double, in 8 lanes). The argument is clamped at
 * LWI_EXP_MIN: a term that small is nothing beside the row's largest, which is about 1. The
 * clamp keeps a NaN (max(lo, NaN) is NaN), so a NaN score makes the row NaN rather than a zero
 * probability; a key outside the window is a zero whatever its score. */
LWI_ROW_HELPER double exp_shifted(float *row, int64_t from, int64_t n, int64_t n8, int64_t width,
                                  float shift) {
    const lwi_v8f lo = lwi_v8_splat(LWI_EXP_MIN);
    for (int64_t j = 0; j < n8; j += 8)
        lwi_v8_store(row + j, lwi_v8_exp_fast(lwi_v8_max(lo, lwi_v8_load(row + j) - shift)));
    if (from > 0) memset(row, 0, sizeof(float) * (size_t)from);
    memset(row + n, 0, sizeof(float) * (size_t)(width - n));
    return lwi_row_sum(row, n8);
}

/* sum_i x[i] y[i] in double */
LWI_ROW_HELPER double row_dot(const float *x, const float *y, int64_t n) {
    double acc[LWI_LANES] = {0};
    int64_t i = 0;
    for (; i + LWI_LANES <= n; i += LWI_LANES)
        for (int k = 0; k < LWI_LANES; k++)
            acc[k] += (double)x[i + k] * (double)y[i + k];
    double s = 0.0;
    for (; i < n; i++)
        s += (double)x[i] * (double)y[i];
    for (int k = 0; k < LWI_LANES; k++)
        s += acc[k];
    return s;
}

/* ---- forward and backward of one head -------------------------------------------------------- */

/* What a part of the pool needs to run its heads, forward or backward. */
typedef struct {
    float *out, *lse, *dqkv, *scratch;
    float *bh_max; /* forward, when asked: each (batch, head)'s largest score */
    const float *qkv, *dout, *saved_out, *saved_lse;
    int64_t t, c, nh, nkv, hd, window;
    int64_t ld; /* qkv's row: c + 2 nkv hd */
    float scale;
} att_job;

/* A window of t - 1 keys or more is every earlier key: 0 (which keeps the bounds below from
 * overflowing for any window). */
static int64_t effective_window(int64_t window, int64_t t) { return window < t - 1 ? window : 0; }

/* A block's first key (rows from i0 on): the earliest its first row sees under the window,
 * rounded down to a tile so that packed columns stay aligned; 0 without a window. */
static int64_t block_keys_from(int64_t i0, int64_t window) {
    return window > 0 && i0 > window ? (i0 - window) / SCORE_KEYS * SCORE_KEYS : 0;
}

/* The earliest key of a block's row 0 relative to its first key k0 (negative: none before it):
 * query i sees keys [i - window, i] under a window, [0, i] without (m: the block's rows). */
static int64_t block_first(int64_t i0, int64_t m, int64_t k0, int64_t window) {
    return window > 0 ? i0 - window - k0 : -(i0 + m);
}

/* The larger of a and b, NaN when either is: a head's maximum is NaN when one of its rows is. */
LWI_ROW_HELPER float max_or_nan(float a, float b) { return isnan(a) || a > b ? a : b; }

/* One head: q, k, v rows strided by ld, o strided by c, lse[t]; returns its largest score over
 * the rows' unmasked keys (NaN when a row's sum is: a NaN score, or an infinite one). */
LWI_SIMD_CLONES
static float head_forward(const att_part *w, float *o, float *lse, const float *q, const float *k,
                          const float *v, int64_t t, int64_t hd, int64_t ld, int64_t c,
                          int64_t window, float scale) {
    const int64_t tp = key_stride(t), hd8 = round_up(hd, 8);
    pack_transposed(w->kt, k, ld, t, tp, hd, scale);
    pack_rows(w->rows, v, ld, t, hd, hd8);
    float top = -INFINITY;
    for (int64_t i0 = 0; i0 < t; i0 += ATT_ROWS) {
        const int64_t m = t - i0 < ATT_ROWS ? t - i0 : ATT_ROWS;
        const int64_t k0 = block_keys_from(i0, window), first = block_first(i0, m, k0, window);
        const int64_t lds = key_stride(i0 + m - k0);
        scores(w->s, lds, q + i0 * ld, ld, w->kt + k0, tp, hd, i0 - k0, first, m);
        float inv[ATT_ROWS];
        for (int64_t r = 0; r < m; r++) {
            float *row = w->s + r * lds;
            /* keys [from, n) of the row's (relative to k0); the diagonal is never masked */
            const int64_t from = first + r > 0 ? first + r : 0;
            const int64_t n = i0 + r + 1 - k0, n8 = round_up(n, 8);
            for (int64_t j = 0; j < from; j++)
                row[j] = -INFINITY;
            /* Subtracting the row max keeps exp in range; the sum is then >= 1. */
            const float mx = row_max(row, n, n8);
            const double sum = exp_shifted(row, from, n, n8, lds, mx);
            inv[r] = (float)(1.0 / sum);
            lse[i0 + r] = (float)((double)mx + log(sum));
            /* mx is the row's largest score (row_max saw its window's keys alone) unless one is
             * NaN, which row_max may pass over: the sum is NaN then */
            top = max_or_nan(top, isnan(sum) ? NAN : mx);
        }
        /* o = (e v) / sum, rows at a time over their keys */
        sums(w->qb, hd8, w->s, lds, 1, w->rows + k0 * hd8, hd8, m, hd8, first, i0 + 1 - k0,
             i0 + m - k0, false);
        for (int64_t r = 0; r < m; r++)
            for (int64_t d = 0; d < hd; d++)
                o[(i0 + r) * c + d] = w->qb[r * hd8 + d] * inv[r];
    }
    return top;
}

static void forward_heads(void *ctx, int64_t begin, int64_t end, int32_t part) {
    const att_job *j = ctx;
    const int64_t t = j->t, c = j->c, nh = j->nh, hd = j->hd, ld = j->ld;
    const int64_t group = nh / j->nkv;
    const att_part w = part_at(j->scratch, part, t, hd);
    for (int64_t bh = begin; bh < end; bh++) {
        const int64_t bi = bh / nh, h = bh % nh;
        const float *row0 = j->qkv + bi * t * ld, *k = row0 + c + h / group * hd;
        const float top =
            head_forward(&w, j->out + bi * t * c + h * hd, j->lse + bh * t, row0 + h * hd, k,
                         k + j->nkv * hd, t, hd, ld, c, j->window, j->scale);
        if (j->bh_max != NULL) j->bh_max[bh] = top;
    }
}

/* A bf16 qkv is widened into memory of the call's own; a bf16 output is computed in fp32 into
 * such memory, then rounded. The heads' maxima are taken per (batch, head) by the threads, then
 * over the batch here. */
lw_status lwi_cpu_attention_forward(lw_stream *stream, void *out, lw_dtype out_dtype, float *lse,
                                    float *head_max, float *scratch, const void *qkv,
                                    lw_dtype qkv_dtype, int64_t b, int64_t t, int64_t c, int64_t nh,
                                    int64_t nkv, int64_t window) {
    (void)stream;
    /* the dispatcher checked the shapes: some work, heads dividing the channels, KV heads the
     * heads */
    const int64_t hd = c / nh, ld = c + 2 * nkv * hd;
    const float *qkv32;
    float *owned;
    lw_status st = lwi_cpu_as_f32(qkv, qkv_dtype, b * t * ld, &qkv32, &owned);
    if (st != LW_OK) return st;
    float *out32 = out, *bh_max = NULL;
    if ((out_dtype == LW_DTYPE_BF16 &&
         (out32 = malloc(sizeof(float) * (size_t)(b * t * c))) == NULL) ||
        (head_max != NULL && (bh_max = malloc(sizeof(float) * (size_t)(b * nh))) == NULL)) {
        if (out32 != out) free(out32);
        free(owned);
        return lwi_fail(LW_ERR_NOMEM,
                        "cpu: out of memory for the attention's fp32 output or heads' maxima");
    }
    att_job j = {.out = out32,
                 .lse = lse,
                 .bh_max = bh_max,
                 .scratch = scratch,
                 .qkv = qkv32,
                 .t = t,
                 .c = c,
                 .nh = nh,
                 .nkv = nkv,
                 .hd = hd,
                 .window = effective_window(window, t),
                 .ld = ld,
                 .scale = 1.0f / sqrtf((float)hd)};
    lwi_cpu_parallel(b * nh, 1, forward_heads, &j);
    for (int64_t h = 0; head_max != NULL && h < nh; h++) {
        float m = -INFINITY;
        for (int64_t bi = 0; bi < b; bi++)
            m = max_or_nan(m, bh_max[bi * nh + h]);
        head_max[h] = m;
    }
    free(bh_max);
    if (out32 != out) {
        lwi_cpu_vec_to_bf16(NULL, out, out32, b * t * c);
        free(out32);
    }
    free(owned);
    return LW_OK;
}

/* Adds alpha src[j][0, hd) (packed, stride hd8) to dst's rows (stride ld), j < t. */
LWI_ROW_HELPER void add_rows(float *dst, int64_t ld, const float *src, int64_t hd8, int64_t t,
                             int64_t hd, float alpha) {
    for (int64_t j = 0; j < t; j++)
        for (int64_t d = 0; d < hd; d++)
            dst[j * ld + d] += alpha * src[j * hd8 + d];
}

/* One query head's backward against the KV head packed in w (kt, vt, rows = K): into dq
 * (strided by ld) and into w's dk and dv sums, from q (strided by ld), dout and out (strided by
 * c). */
LWI_SIMD_CLONES
static void head_backward(const att_part *w, float *dq, const float *q, const float *dout,
                          const float *out, const float *lse, int64_t t, int64_t hd, int64_t ld,
                          int64_t c, int64_t window, float scale) {
    const int64_t tp = key_stride(t), hd8 = round_up(hd, 8);
    for (int64_t i0 = 0; i0 < t; i0 += ATT_ROWS) {
        const int64_t m = t - i0 < ATT_ROWS ? t - i0 : ATT_ROWS, keys = i0 + m;
        const int64_t k0 = block_keys_from(i0, window), first = block_first(i0, m, k0, window);
        const int64_t lds = key_stride(keys - k0);
        pack_rows(w->qb, q + i0 * ld, ld, m, hd, hd8);
        pack_rows(w->gb, dout + i0 * c, c, m, hd, hd8);
        /* p = exp(q k^T scale - lse), datt = dout v^T */
        scores(w->s, lds, w->qb, hd8, w->kt + k0, tp, hd, i0 - k0, first, m);
        scores(w->ds, lds, w->gb, hd8, w->vt + k0, tp, hd, i0 - k0, first, m);
        for (int64_t r = 0; r < m; r++) {
            float *prow = w->s + r * lds, *drow = w->ds + r * lds;
            const int64_t from = first + r > 0 ? first + r : 0;
            const int64_t n = i0 + r + 1 - k0, n8 = round_up(n, 8);
            exp_shifted(prow, from, n, n8, lds, lse[i0 + r]);
            /* sum_j p_ij datt_ij = dout_i . out_i: the softmax's backward from the saved
             * output, as flash attention does (a device needs no row of p for it). dS is
             * zero outside the window, where p is (before it, a score never computed). */
            const float s = (float)row_dot(dout + (i0 + r) * c, out + (i0 + r) * c, hd);
            if (from > 0) memset(drow, 0, sizeof(float) * (size_t)from);
            for (int64_t j = from; j < n8; j++)
                drow[j] = prow[j] * (drow[j] - s);
            memset(drow + n8, 0, sizeof(float) * (size_t)(lds - n8));
        }
        /* dv[j] += sum_i p_ij dout_i, dk[j] += sum_i dS_ij q_i (scaled at the end): key j sees
         * the block's rows from i = j on, and under a window up to i = j + window */
        const int64_t to = window > 0 ? k0 + window + 1 - i0 : m;
        sums(w->dv + k0 * hd8, hd8, w->s, 1, lds, w->gb, hd8, keys - k0, hd8, k0 - i0, to, m, true);
        sums(w->dk + k0 * hd8, hd8, w->ds, 1, lds, w->qb, hd8, keys - k0, hd8, k0 - i0, to, m,
             true);
        /* dq_i += scale sum_j dS_ij k_j, through the output tile qb (q is packed no longer) */
        sums(w->qb, hd8, w->ds, lds, 1, w->rows + k0 * hd8, hd8, m, hd8, first, i0 + 1 - k0,
             keys - k0, false);
        add_rows(dq + i0 * ld, ld, w->qb, hd8, m, hd, scale);
    }
}

/* A KV head's backward: its keys and values packed once, the query heads that read it one after
 * another (their dk and dv summed in the part's scratch), then dk and dv added to dqkv. */
LWI_SIMD_CLONES
static void group_backward(const att_part *w, const att_job *j, int64_t bi, int64_t kh) {
    const int64_t t = j->t, c = j->c, hd = j->hd, ld = j->ld, nh = j->nh;
    const int64_t group = nh / j->nkv, tp = key_stride(t), hd8 = round_up(hd, 8);
    const int64_t off = bi * t * ld, koff = off + c + kh * hd, voff = koff + j->nkv * hd;
    pack_transposed(w->kt, j->qkv + koff, ld, t, tp, hd, j->scale);
    pack_transposed(w->vt, j->qkv + voff, ld, t, tp, hd, 1.0f);
    pack_rows(w->rows, j->qkv + koff, ld, t, hd, hd8);
    memset(w->dk, 0, sizeof(float) * (size_t)(tp * hd8));
    memset(w->dv, 0, sizeof(float) * (size_t)(tp * hd8));
    for (int64_t h = kh * group; h < (kh + 1) * group; h++) {
        const int64_t o = bi * t * c + h * hd;
        head_backward(w, j->dqkv + off + h * hd, j->qkv + off + h * hd, j->dout + o,
                      j->saved_out + o, j->saved_lse + (bi * nh + h) * t, t, hd, ld, c, j->window,
                      j->scale);
    }
    add_rows(j->dqkv + koff, ld, w->dk, hd8, t, hd, j->scale);
    add_rows(j->dqkv + voff, ld, w->dv, hd8, t, hd, 1.0f);
}

static void backward_heads(void *ctx, int64_t begin, int64_t end, int32_t part) {
    const att_job *j = ctx;
    const att_part w = part_at(j->scratch, part, j->t, j->hd);
    for (int64_t bk = begin; bk < end; bk++)
        group_backward(&w, j, bk / j->nkv, bk % j->nkv);
}

/* A bf16 dqkv is widened into memory of the call's own, accumulated there, then rounded back. */
lw_status lwi_cpu_attention_backward(lw_stream *stream, void *dqkv, lw_dtype dqkv_dtype,
                                     float *scratch, const float *dout, const void *qkv,
                                     lw_dtype qkv_dtype, const void *out, lw_dtype out_dtype,
                                     const float *lse, int64_t b, int64_t t, int64_t c, int64_t nh,
                                     int64_t nkv, int64_t window) {
    (void)stream;
    /* the dispatcher checked the shapes: some work, heads dividing the channels, KV heads the
     * heads */
    const int64_t hd = c / nh, ld = c + 2 * nkv * hd, nq = b * t * ld;
    const float *out32, *qkv32, *dqkv_in;
    float *owned, *owned_qkv = NULL, *owned_d = NULL;
    lw_status st = lwi_cpu_as_f32(out, out_dtype, b * t * c, &out32, &owned);
    if (st == LW_OK) st = lwi_cpu_as_f32(qkv, qkv_dtype, nq, &qkv32, &owned_qkv);
    if (st == LW_OK) st = lwi_cpu_as_f32(dqkv, dqkv_dtype, nq, &dqkv_in, &owned_d);
    if (st == LW_OK) {
        att_job j = {.dqkv = owned_d != NULL ? owned_d : dqkv,
                     .scratch = scratch,
                     .qkv = qkv32,
                     .dout = dout,
                     .saved_out = out32,
                     .saved_lse = lse,
                     .t = t,
                     .c = c,
                     .nh = nh,
                     .nkv = nkv,
                     .hd = hd,
                     .window = effective_window(window, t),
                     .ld = ld,
                     .scale = 1.0f / sqrtf((float)hd)};
        lwi_cpu_parallel(b * nkv, 1, backward_heads, &j);
        if (owned_d != NULL) lwi_cpu_vec_to_bf16(NULL, dqkv, owned_d, nq);
    }
    free(owned), free(owned_qkv), free(owned_d);
    return st;
}
