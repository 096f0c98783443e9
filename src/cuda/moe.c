/* moe.c: the table's entries for a mixture of experts' router and load-balancing loss on a GPU
 * (kernels in moe.cu): the router and its backward; the loss's per-expert counts and column sums
 * on the device, added up on the host in double as the CPU adds them, and its backward. Moving
 * rows to and from the experts is gather.c's. */
#include "cuda/cuda.h"

lw_status lwc_moe_router_forward(lw_stream *s, int32_t *experts, float *weights, float *probs,
                                 const float *logits, int64_t n, int64_t e, int64_t k) {
    if (n <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(
        s, lwc_moe_router(lwc_cuda_stream(s), experts, weights, probs, logits, n, e, k),
        "the router kernel");
}

lw_status lwc_moe_router_backward(lw_stream *s, float *dlogits, const float *dweights,
                                  const float *dprobs, const float *probs, const int32_t *experts,
                                  int64_t n, int64_t e, int64_t k) {
    if (n <= 0) return LW_OK;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(
        s,
        lwc_moe_router_grad(lwc_cuda_stream(s), dlogits, dweights, dprobs, probs, experts, n, e, k),
        "the router backward kernel");
}

/* The statistics' grid is (e, chunks): e blocks in x (at most 2^31 - 1). */
static lw_status check_experts(lw_stream *s, const char *what, int64_t e) {
    if (e > INT32_MAX)
        return lwc_host->fail(LW_ERR_RANGE, "%s: %s: %lld experts, at most %d", s->device->name,
                              what, (long long)e, INT32_MAX);
    return LW_OK;
}

lw_status lwc_moe_aux_loss_forward(lw_stream *s, const float *probs, const int32_t *experts,
                                   int64_t n, int64_t e, int64_t k, float coef, double *loss) {
    *loss = 0;
    if (n <= 0) return LW_OK;
    lw_status st = check_experts(s, "aux loss forward", e);
    if (st != LW_OK) return st;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    int64_t per = 1;
    const int64_t chunks = lwc_moe_aux_chunks(n, &per), cells = chunks * e;
    /* device and host alike: counts[chunks, e] (long long) | cols[chunks, e] (double) */
    void *dev = NULL, *host = NULL;
    st = lwc_workspace(s, 16 * cells, &dev);
    if (st == LW_OK) st = lwc_host_workspace(s, 16 * cells, &host);
    if (st != LW_OK) return st;
    cudaStream_t cs = lwc_cuda_stream(s);
    cudaError_t err =
        lwc_moe_aux_stats(cs, probs, experts, n, e, k, (long long *)dev, (double *)dev + cells);
    if (err != cudaSuccess) return lwc_fail(s->device, err, "the aux loss kernel");
    err = cudaMemcpyAsync(host, dev, (size_t)(16 * cells), cudaMemcpyDeviceToHost, cs);
    if (err == cudaSuccess) err = cudaStreamSynchronize(cs);
    if (err != cudaSuccess) return lwc_fail(s->device, err, "copying the aux loss's statistics");
    const long long *counts = host;
    const double *cols = (const double *)host + cells;
    /* the CPU's sum: expert by expert, count_j times column j's sum, in double (the column
     * sums' own order differs: chunks of the rows, then the chunks in order) */
    double total = 0;
    for (int64_t j = 0; j < e; j++) {
        long long count = 0;
        double col = 0;
        for (int64_t c = 0; c < chunks; c++) {
            count += counts[c * e + j];
            col += cols[c * e + j];
        }
        if (count != 0) total += (double)count * col;
    }
    *loss = (double)coef * (double)e * total / ((double)n * (double)n * (double)k);
    return LW_OK;
}

lw_status lwc_moe_aux_loss_backward(lw_stream *s, float *dprobs, const int32_t *experts, int64_t n,
                                    int64_t e, int64_t k, float coef, float scale) {
    if (n <= 0) return LW_OK;
    lw_status st = check_experts(s, "aux loss backward", e);
    if (st != LW_OK) return st;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    int64_t rows_per = 1;
    const int64_t cells = lwc_moe_aux_chunks(n, &rows_per) * e;
    /* counts[chunks, e] (long long) | g[e] (float) */
    void *dev = NULL;
    st = lwc_workspace(s, 8 * cells + 4 * e, &dev);
    if (st != LW_OK) return st;
    /* the CPU's expression, so that each column's float is the CPU's */
    const double per = (double)scale * (double)coef * (double)e / ((double)n * (double)n * k);
    cudaStream_t cs = lwc_cuda_stream(s);
    cudaError_t err = lwc_moe_aux_stats(cs, NULL, experts, n, e, k, (long long *)dev, NULL);
    if (err == cudaSuccess)
        err = lwc_moe_aux_grad(cs, dprobs, (const long long *)dev, n, e, per,
                               (float *)((long long *)dev + cells));
    return lwc_launched(s, err, "the aux loss backward kernels");
}
