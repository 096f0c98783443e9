/* cross_entropy.c: the LM head fused with softmax cross-entropy on a GPU, a chunk of rows at a
 * time (lw.h's contract, as device/cpu/cross_entropy.c): the chunk's logits by one cuBLAS GEMM
 * into the scratch, each row's log-sum-exp and loss (cross_entropy.cu), and in the backward the
 * softmax's gradient formed in place and two GEMMs (beta 1) into dh and dw. When all rows fit one
 * chunk the forward leaves the probabilities in the scratch and the backward reuses them;
 * otherwise it recomputes each chunk's logits. The mean loss is summed on the host in double, as
 * on the CPU; the backward's count of counted targets is taken on the device (no wait). Under bf16
 * GEMMs the head's weight w (v x c, 50304 x 768 for GPT-2: every chunk reads all of it; read as it
 * is when it is bf16) and h are rounded to bf16 once per call, not once per chunk, and each
 * chunk's dlogits once for its two GEMMs, each into its own region of the stream's workspace;
 * under fp32 or TF32 GEMMs a bf16 w is widened once per call likewise. bf16 logits (autocast's:
 * the GEMM's fp32 sums rounded) halve every pass over the chunk: under bf16 GEMMs cuBLAS writes
 * them in bf16, twice the rows a chunk in the same scratch, and the backward's dlogits are formed
 * in bf16 in place, read by its GEMMs as they are; under fp32 or TF32 GEMMs (the reference
 * pairing) the logits pass through an fp32 region of a chunk's size and the dlogits are widened
 * into it.
 * At the end the same head split over tensor parallelism's vocabulary ranks: statistics per
 * rank, their combination, and the local backward. */
#include "cuda/cuda.h"

/* Logits held at once: 64 Mi floats (256 MiB), 1334 rows at GPT-2's 50304 tokens. The size
 * depends on (n, v) alone (the table's scratch entry has no device). */
#define CE_CHUNK_FLOATS (INT64_C(1) << 26)

/* Rows per chunk: bf16 logits under bf16 products take twice fp32's in the same scratch (under
 * fp32 or TF32 products they pass through an fp32 region of a chunk's size: fp32's rows). */
static int64_t chunk_rows(int64_t n, int64_t v, bool doubled) {
    int64_t rows = v > 0 ? CE_CHUNK_FLOATS / v : n;
    rows = (rows < 1 ? 1 : rows) * (doubled ? 2 : 1);
    return rows < n ? rows : n;
}

/* The chunk rows of a call with logits of logits_dtype on the stream's device. */
static int64_t call_rows(const lw_stream *s, int64_t n, int64_t v, lw_dtype logits_dtype) {
    return chunk_rows(n, v,
                      logits_dtype == LW_DTYPE_BF16 && s->device->matmul == LW_MATMUL_BF16);
}

/* Values of the staging region a forward needs: bf16 logits under fp32 or TF32 products. */
static int64_t forward_staging(const lw_stream *s, int64_t chunk, int64_t v, lw_dtype dtype) {
    return dtype == LW_DTYPE_BF16 && s->device->matmul != LW_MATMUL_BF16 ? chunk * v : 0;
}

int64_t lwc_cross_entropy_scratch_floats(int64_t n, int64_t v) {
    return n > 0 && v > 0 ? chunk_rows(n, v, false) * v : 0;
}

/* The GEMMs' operands for a call, in the product's type: under bf16, h rounded into the second
 * of the stream's workspace regions, w as it is when bf16 or rounded into the first; otherwise h
 * as it is and w as it is when fp32 or widened into the first region. h is needed by the
 * forward's logits and the backward's dw; w by the logits and dh. `dl`, a third region of a
 * chunk (`chunk_elements` values) in the product's type, where the logits' dtype is not it: fp32
 * logits under bf16 GEMMs round their dlogits there; bf16 logits under fp32 or TF32 GEMMs take
 * their fp32 sums there (then rounded into the scratch) and widen their dlogits there. */
typedef struct ce_operands {
    lwc_operand w, h;
    bool bf16_logits;
    void *dl; /* NULL: the GEMMs read the scratch as it is */
} ce_operands;

static lw_status operands(lw_stream *s, ce_operands *o, const float *h, const void *w,
                          lw_dtype w_dtype, lw_dtype logits_dtype, int64_t n, int64_t c, int64_t v,
                          bool need_w, int64_t chunk_elements) {
    o->w = lwc_typed(w, w_dtype), o->h = lwc_f32(h), o->dl = NULL;
    o->bf16_logits = logits_dtype == LW_DTYPE_BF16;
    if (c <= 0) return LW_OK;
    const bool bf16 = s->device->matmul == LW_MATMUL_BF16;
    const bool convert_w = need_w && o->w.bf16 != bf16;
    const bool staged = o->bf16_logits != bf16 && chunk_elements > 0;
    if (!bf16 && !convert_w && !staged) return LW_OK;
    const int64_t bytes[3] = {convert_w ? (bf16 ? 2 : 4) * v * c : 0, bf16 ? 2 * n * c : 0,
                              staged ? (bf16 ? 2 : 4) * chunk_elements : 0};
    void *r[3];
    lw_status st = lwc_regions(s, 3, bytes, r);
    if (st == LW_OK && convert_w)
        st = bf16 ? lwc_to_bf16(s, r[0], w, v * c) : lwc_widen(s, r[0], w, v * c);
    if (st == LW_OK && bf16) st = lwc_to_bf16(s, r[1], h, n * c);
    if (st != LW_OK) return st;
    if (convert_w) o->w = (lwc_operand){r[0], bf16};
    if (bf16) o->h = lwc_bf16(r[1]);
    if (staged) o->dl = r[2];
    return LW_OK;
}

/* out[rows, v] (the logits' dtype) = h[r0 .. r0 + rows, c] w[v, c]^T. Column-major: out is L^T
 * [v, rows] (ld v), w is W^T [c, v] (ld c), h is H^T [c, rows] (ld c); L^T = W H^T = op_T(w)
 * op_N(h): m = v, n = rows, k = c. The operands are of the product's type already. */
static lw_status logits(lw_stream *s, void *out, const ce_operands *o, int64_t r0, int64_t rows,
                        int64_t c, int64_t v) {
    const char *what = "the LM head's logits";
    if (c <= 0)
        return lwc_launched(s,
                            cudaMemsetAsync(out, 0, (o->bf16_logits ? 2 : 4) * (size_t)(rows * v),
                                            lwc_cuda_stream(s)),
                            "cudaMemsetAsync");
    const lwc_operand h = lwc_operand_at(o->h, r0 * c);
    if (!o->bf16_logits)
        return lwc_gemm(s, true, false, v, rows, c, 1.0f, o->w, c, h, c, 0.0f, out, v, what);
    if (o->dl == NULL) /* bf16 products: cuBLAS rounds the fp32 sums as it stores them */
        return lwc_gemm_ex(s, true, false, v, rows, c, 1.0f, o->w, c, h, c, 0.0f, out, true, v,
                           what);
    lw_status st = lwc_gemm(s, true, false, v, rows, c, 1.0f, o->w, c, h, c, 0.0f, o->dl, v, what);
    return st == LW_OK ? lwc_to_bf16(s, out, o->dl, rows * v) : st;
}

/* The mean over rows with targets in [0, v) of losses[n], summed on the host in double in row
 * order, of the rows' float losses (the CPU sums the unrounded doubles: ~1e-7 relative apart);
 * waits for the stream. */
static lw_status mean_loss(lw_stream *s, const float *losses, const int32_t *targets, int64_t n,
                           int64_t v, double *loss) {
    *loss = 0.0;
    if (n <= 0) return LW_OK;
    cudaStream_t cs = lwc_cuda_stream(s);
    lw_status st;
    void *host = NULL;
    if ((st = lwc_host_workspace(s, 8 * n, &host)) != LW_OK) return st;
    float *hl = host;
    int32_t *ht = (int32_t *)(hl + n);
    cudaError_t e = cudaMemcpyAsync(hl, losses, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost,
                                    cs);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(ht, targets, sizeof(int32_t) * (size_t)n, cudaMemcpyDeviceToHost, cs);
    if (e == cudaSuccess) e = cudaStreamSynchronize(cs);
    if (e != cudaSuccess) return lwc_fail(s->device, e, "copying the losses to the host");
    double total = 0.0;
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++)
        if (ht[i] >= 0 && ht[i] < v) {
            total += (double)hl[i];
            count++;
        }
    *loss = count > 0 ? total / (double)count : 0.0;
    return LW_OK;
}

lw_status lwc_cross_entropy_forward(lw_stream *s, float *losses, float *lse, float *scratch,
                                    const float *h, const void *w, lw_dtype w_dtype,
                                    lw_dtype logits_dtype, const int32_t *targets, int64_t n,
                                    int64_t c, int64_t v, double *loss) {
    *loss = 0.0;
    if (n <= 0 || v <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cudaStream_t cs = lwc_cuda_stream(s);
    const bool bf16 = logits_dtype == LW_DTYPE_BF16;
    const int64_t chunk = call_rows(s, n, v, logits_dtype);
    ce_operands o;
    lw_status st = operands(s, &o, h, w, w_dtype, logits_dtype, n, c, v, true,
                            forward_staging(s, chunk, v, logits_dtype));
    for (int64_t r0 = 0; r0 < n && st == LW_OK; r0 += chunk) {
        const int64_t rows = n - r0 < chunk ? n - r0 : chunk;
        st = logits(s, scratch, &o, r0, rows, c, v);
        /* chunk == n: the probabilities (fp32) or the logits (bf16) stay for the backward */
        if (st == LW_OK)
            st = lwc_launched(s,
                              lwc_ce_rows(cs, scratch, bf16, rows, v, targets + r0, losses + r0,
                                          lse + r0, chunk == n),
                              "the cross-entropy row kernel");
    }
    if (st != LW_OK) return st;
    return mean_loss(s, losses, targets, n, v, loss);
}

/* The LM head's gradients from a chunk's dlogits (scratch: [rows, v], rows r0.. of the batch):
 * dh[rows, c] += dl w (when dh is wanted) and dw[v, c] += dl^T h. dlogits not of the product's
 * type are converted once for both GEMMs into the `dl` region (the scratch is rewritten by the
 * next chunk's logits only after the stream has run these). */
static lw_status head_grads(lw_stream *s, const ce_operands *o, void *scratch, int64_t r0,
                            int64_t rows, int64_t c, int64_t v, float *dh, float *dw) {
    lw_status st = LW_OK;
    lwc_operand dl = {scratch, o->bf16_logits};
    if (o->dl != NULL) {
        st = o->bf16_logits ? lwc_widen(s, o->dl, scratch, rows * v)
                            : lwc_to_bf16(s, o->dl, scratch, rows * v);
        dl = (lwc_operand){o->dl, !o->bf16_logits};
    }
    /* dh: column-major dH^T [c, rows] (ld c) = W^T [c, v] (w as stored, ld c) dL^T [v, rows] (the
     * scratch as stored, ld v): op_N(w) op_N(dl), m = c, n = rows, k = v, beta 1. */
    if (st == LW_OK && dh != NULL)
        st = lwc_gemm(s, false, false, c, rows, v, 1.0f, o->w, c, dl, v, 1.0f, dh + r0 * c, c,
                      "the LM head's input gradient");
    /* dw: column-major dW^T [c, v] (ld c) = H^T [c, rows] (h as stored, ld c) dL [rows, v] (the
     * scratch is dL^T [v, rows], ld v: transposed): op_N(h) op_T(dl), m = c, n = v, k = rows,
     * beta 1. */
    if (st == LW_OK)
        st = lwc_gemm(s, false, true, c, v, rows, 1.0f, lwc_operand_at(o->h, r0 * c), c, dl, v,
                      1.0f, dw, c, "the LM head's weight gradient");
    return st;
}

lw_status lwc_cross_entropy_backward(lw_stream *s, float *dh, float *dw, float *scratch,
                                     const float *h, const void *w, lw_dtype w_dtype,
                                     lw_dtype logits_dtype, const int32_t *targets,
                                     const float *lse, int64_t n, int64_t c, int64_t v,
                                     float loss_scale) {
    if (n <= 0 || v <= 0 || c <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cudaStream_t cs = lwc_cuda_stream(s);
    /* The count stays on the device: the gradient kernel divides by it there. With no counted
     * row every row of dlogits is 0 and the GEMMs add zeros (the CPU skips them). */
    int32_t *count = (int32_t *)((char *)lwc_str(s)->scratch + LWC_SCRATCH_COUNT_OFFSET);
    lw_status st = lwc_launched(s, lwc_ce_count(cs, targets, n, v, count),
                                "the cross-entropy count kernel");
    const bool bf16 = logits_dtype == LW_DTYPE_BF16;
    const int64_t chunk = call_rows(s, n, v, logits_dtype);
    const bool recompute = chunk < n;
    /* w serves the recomputed logits and dh: without either it is not rounded */
    ce_operands o;
    if (st == LW_OK)
        st = operands(s, &o, h, w, w_dtype, logits_dtype, n, c, v, recompute || dh != NULL,
                      chunk * v);
    for (int64_t r0 = 0; r0 < n && st == LW_OK; r0 += chunk) {
        const int64_t rows = n - r0 < chunk ? n - r0 : chunk;
        if (recompute) st = logits(s, scratch, &o, r0, rows, c, v);
        if (st == LW_OK)
            st = lwc_launched(s,
                              lwc_ce_dlogits(cs, scratch, bf16, rows, v, targets + r0, lse + r0,
                                             recompute, loss_scale, count),
                              "the cross-entropy gradient kernel");
        if (st == LW_OK) st = head_grads(s, &o, scratch, r0, rows, c, v, dh, dw);
    }
    return st;
}

/* ---- tensor parallelism: the vocabulary-parallel LM head (lw.h; the CPU's cross_entropy.c) --- */

/* The rows of [first, first + v) below vocab: the real ones. */
static int64_t real_rows(int64_t first, int64_t v, int64_t vocab) {
    const int64_t real = vocab - first;
    return real < 0 ? 0 : real < v ? real : v;
}

lw_status lwc_cross_entropy_partial_forward(lw_stream *s, float *stats, float *scratch,
                                            const float *h, const void *w, lw_dtype w_dtype,
                                            lw_dtype logits_dtype, const int32_t *targets,
                                            int64_t n, int64_t c, int64_t v, int64_t first,
                                            int64_t vocab) {
    if (n <= 0 || v <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cudaStream_t cs = lwc_cuda_stream(s);
    const bool bf16 = logits_dtype == LW_DTYPE_BF16;
    const int64_t chunk = call_rows(s, n, v, logits_dtype), real = real_rows(first, v, vocab);
    if (real == 0) /* all padding: no logits needed, the kernel writes -inf, 0, 0 */
        return lwc_launched(
            s, lwc_ce_partial_rows(cs, scratch, bf16, n, v, 0, targets, first, stats, n, 0),
            "the cross-entropy statistics kernel");
    ce_operands o;
    lw_status st = operands(s, &o, h, w, w_dtype, logits_dtype, n, c, v, true,
                            forward_staging(s, chunk, v, logits_dtype));
    for (int64_t r0 = 0; r0 < n && st == LW_OK; r0 += chunk) {
        const int64_t rows = n - r0 < chunk ? n - r0 : chunk;
        st = logits(s, scratch, &o, r0, rows, c, v);
        /* chunk == n: the logits stay for the backward */
        if (st == LW_OK)
            st = lwc_launched(s,
                              lwc_ce_partial_rows(cs, scratch, bf16, rows, v, real, targets + r0,
                                                  first, stats, n, r0),
                              "the cross-entropy statistics kernel");
    }
    return st;
}

lw_status lwc_cross_entropy_combine(lw_stream *s, float *losses, float *lse, const float *stats,
                                    int64_t parts, const int32_t *targets, int64_t n,
                                    int64_t vocab, double *loss) {
    *loss = 0.0;
    if (n <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    lw_status st = lwc_launched(
        s, lwc_ce_combine(lwc_cuda_stream(s), losses, lse, stats, parts, targets, n, vocab),
        "the cross-entropy combine kernel");
    return st == LW_OK ? mean_loss(s, losses, targets, n, vocab, loss) : st;
}

lw_status lwc_cross_entropy_partial_backward(lw_stream *s, float *dh, float *dw, float *scratch,
                                             const float *h, const void *w, lw_dtype w_dtype,
                                             lw_dtype logits_dtype, const int32_t *targets,
                                             const float *lse, int64_t n, int64_t c, int64_t v,
                                             int64_t first, int64_t vocab, float loss_scale) {
    if (n <= 0 || v <= 0 || c <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cudaStream_t cs = lwc_cuda_stream(s);
    int32_t *count = (int32_t *)((char *)lwc_str(s)->scratch + LWC_SCRATCH_COUNT_OFFSET);
    lw_status st = lwc_launched(s, lwc_ce_count(cs, targets, n, vocab, count),
                                "the cross-entropy count kernel");
    const bool bf16 = logits_dtype == LW_DTYPE_BF16;
    const int64_t chunk = call_rows(s, n, v, logits_dtype), real = real_rows(first, v, vocab);
    const bool recompute = chunk < n;
    ce_operands o;
    if (st == LW_OK)
        st = operands(s, &o, h, w, w_dtype, logits_dtype, n, c, v, recompute || dh != NULL,
                      chunk * v);
    for (int64_t r0 = 0; r0 < n && st == LW_OK; r0 += chunk) {
        const int64_t rows = n - r0 < chunk ? n - r0 : chunk;
        if (recompute) st = logits(s, scratch, &o, r0, rows, c, v);
        if (st == LW_OK)
            st = lwc_launched(s,
                              lwc_ce_partial_dlogits(cs, scratch, bf16, rows, v, real, targets + r0,
                                                     first, vocab, lse + r0, loss_scale, count),
                              "the cross-entropy gradient kernel");
        if (st == LW_OK) st = head_grads(s, &o, scratch, r0, rows, c, v, dh, dw);
    }
    return st;
}
