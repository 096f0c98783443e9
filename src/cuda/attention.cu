// attention.cu: the table's causal attention entries on a GPU (grouped KV heads, a sliding
// window): the argument checks the kernels rely on (the head dim, shared memory, grid and index
// sizes), the backward's scratch, the choice
// of kernels (attention_mma.cu's on tensor cores under the bf16 matmul setting,
// attention_fp32.cu's in fp32 otherwise), the launches, for the fp32 kernels a bf16 qkv's
// widening and a bf16 output's and dqkv's rounding through the stream's workspace, and the
// heads' largest scores reduced from the rows' that either forward leaves in the scratch, and
// LWOPT_ATTN_PIPELINE and LWOPT_ATTN_ORDER, which pick the tensor-core kernels' staging and
// their grids' block order.
#include "cuda/attention_fp32.h"
#include "cuda/attention_mma.h"
#include "cuda/cuda.h"
#include "cuda/mma_layout.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

namespace {

constexpr int MAX_THREADS = 256;

// The larger of a and b, NaN when either is (a head's maximum is NaN when a row's is).
__device__ float max_or_nan(float a, float b) { return isnan(a) || a > b ? a : b; }

// head_max[h] = the largest of rowmax[bi, h, 0 .. t) over bi < b: a block per head, each thread
// over a stride of every sequence's rows, then a tree over the threads (max is exact: any order
// gives the same value).
__global__ void __launch_bounds__(MAX_THREADS)
    head_max_kernel(float *head_max, const float *rowmax, int64_t b, int t, int nh) {
    __shared__ float part[MAX_THREADS];
    const int h = blockIdx.x;
    float m = -INFINITY;
    for (int64_t bi = 0; bi < b; bi++) {
        const float *r = rowmax + (bi * nh + h) * (int64_t)t;
        for (int i = threadIdx.x; i < t; i += MAX_THREADS)
            m = max_or_nan(m, r[i]);
    }
    part[threadIdx.x] = m;
    __syncthreads();
    for (int half = MAX_THREADS / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half)
            part[threadIdx.x] = max_or_nan(part[threadIdx.x], part[threadIdx.x + half]);
        __syncthreads();
    }
    if (threadIdx.x == 0) head_max[h] = part[0];
}

} // namespace

// head_max[nh] from the rows' maxima a forward left in rowmax[b, nh, t]; nothing without it.
static lw_status heads_max(lw_stream *s, float *head_max, const float *rowmax, int64_t b, int64_t t,
                           int64_t nh) {
    if (head_max == NULL) return LW_OK;
    head_max_kernel<<<(unsigned)nh, MAX_THREADS, 0, lwc_cuda_stream(s)>>>(head_max, rowmax, b,
                                                                          (int)t, (int)nh);
    return lwc_launched(s, cudaGetLastError(), "the attention's heads' maxima");
}

// ---- the table's entries ------------------------------------------------------------------------

// Where dout's bf16 copy starts in the scratch, in floats: past the b nh t row values, at a
// 256-byte boundary (16 bytes is what cp.async needs).
static int64_t dout16_at(int64_t b, int64_t t, int64_t nh) { return (b * nh * t + 63) / 64 * 64; }

// One float per (batch, head, row): the backward's D = rowsum(dout * out), or the forward's rows'
// largest scores when it is asked for the heads' maxima. At a head dim the tensor-core kernels
// serve, room after them for dout in bf16 [b, t, c], which their pipelined backward stages
// (LWOPT_ATTN_PIPELINE=1): sized whatever the variable holds now, since it is read per launch.
int64_t lwc_attention_scratch_floats(int64_t b, int64_t t, int64_t c, int64_t nh, int64_t nkv,
                                     int64_t window) {
    (void)nkv, (void)window;
    if (b <= 0 || t <= 0 || nh <= 0) return 0;
    if (c <= 0 || c % nh != 0 || !lwc_flash_mma_serves(c / nh)) return b * nh * t;
    return dout16_at(b, t, nh) + (b * t * c + 1) / 2;
}

// LWOPT_ATTN_PIPELINE, read at each launch (a benchmark switches it between runs): unset, empty
// or "0", the tensor-core kernels stage each step's tiles synchronously, as they always have;
// "1", a bf16 qkv's a step ahead by cp.async, the backward's dO from the bf16 copy the row dots
// write (an fp32 qkv has the one staging: the variable changes nothing for it). Any other value
// fails the launch with an error that names the variable and its values.
static lw_status pipeline_setting(const lw_stream *s, bool *on) {
    const char *env = getenv("LWOPT_ATTN_PIPELINE");
    *on = env != NULL && strcmp(env, "1") == 0;
    if (env == NULL || env[0] == '\0' || strcmp(env, "0") == 0 || *on) return LW_OK;
    return lwc_host->fail(LW_ERR_INVALID,
                          "%s: attention: LWOPT_ATTN_PIPELINE is \"%s\"; it takes 0 or unset (the "
                          "tensor-core attention stages its tiles synchronously) or 1 (a step "
                          "ahead, by cp.async)",
                          s->device->name, env);
}

// LWOPT_ATTN_ORDER, read at each launch (a benchmark switches it between runs): unset, empty or
// "heads", the tensor-core kernels' grids keep a head's tiles together, as they always have;
// "work", tile-major: every head's heaviest tile first (mma_layout.h's lwc_fa_block; the fp32
// kernels have the one order). Any other value fails the launch with an error that names the
// variable and its values.
static lw_status order_setting(const lw_stream *s, int *order) {
    const char *env = getenv("LWOPT_ATTN_ORDER");
    const bool work = env != NULL && strcmp(env, "work") == 0;
    *order = work ? LWC_FA_ORDER_WORK : LWC_FA_ORDER_HEADS;
    if (env == NULL || env[0] == '\0' || strcmp(env, "heads") == 0 || work) return LW_OK;
    return lwc_host->fail(LW_ERR_INVALID,
                          "%s: attention: LWOPT_ATTN_ORDER is \"%s\"; it takes heads or unset (a "
                          "head's tiles together) or work (tile-major, every head's heaviest "
                          "tile first)",
                          s->device->name, env);
}

// What these kernels need of the shapes (the dispatcher checked that there is work, that nh
// divides c and nkv nh, and the window): a head dim they are compiled for, shared memory the device
// can give a block (the fp32 kernels' when they are the ones to run: the tensor-core kernels'
// smaller tiles were checked by tensor_cores), and grid and index sizes within int.
static lw_status check_attention(lw_stream *s, const char *pass, int64_t b, int64_t t, int64_t c,
                                 int64_t nh, int64_t nkv, bool backward, bool mma) {
    const char *name = s->device->name;
    const int64_t hd = c / nh, limit = lwc_flash_head_dim_limit(), ld = c + 2 * nkv * hd;
    if (hd > limit)
        return lwc_host->fail(LW_ERR_UNSUPPORTED,
                              "%s: attention %s: head dim %lld (c = %lld / nh = %lld) is past the "
                              "CUDA kernels' largest, %lld",
                              name, pass, (long long)hd, (long long)c, (long long)nh,
                              (long long)limit);
    const size_t smem = lwc_flash_smem_bytes(hd, backward);
    const size_t most = lwc_dev(s->device)->prop.sharedMemPerBlockOptin;
    if (!mma && smem > most)
        return lwc_host->fail(LW_ERR_UNSUPPORTED,
                              "%s: attention %s: head dim %lld needs %zu bytes of shared memory "
                              "per block, the GPU gives at most %zu",
                              name, pass, (long long)hd, smem, most);
    // grid (b nh, query tiles of 64): y at most 65535; t, qkv's row (c + 2 nkv hd) and b nh
    // within int; the backward's row dots take a block per 8 of the b nh t rows
    if (b * nh > INT_MAX || t > (int64_t)65535 * 64 || ld > INT_MAX ||
        (b * nh * t + 7) / 8 > INT_MAX)
        return lwc_host->fail(LW_ERR_RANGE,
                              "%s: attention %s: b = %lld, t = %lld, c = %lld, nh = %lld, nkv = "
                              "%lld is past the kernels' sizes (b nh < 2^31, t <= %lld, c + 2 nkv "
                              "c / nh < 2^31, b nh t < 2^34)",
                              name, pass, (long long)b, (long long)t, (long long)c, (long long)nh,
                              (long long)nkv, (long long)65535 * 64);
    return LW_OK;
}

// Whether the tensor-core kernels (attention_mma.cu) run: under the bf16 matmul setting (autocast
// hands SDPA bf16 operands; lw_device_set_matmul asks for that arithmetic), at a head dim they
// are compiled for (64, 128), on a GPU with bf16 mma.sync (compute capability 8.0 on), whose
// shared memory holds their tiles, with a grid within int, and with every tensor 16-byte aligned
// (they read float4 and write float2). Otherwise the fp32 kernels run, as under fp32 and TF32.
static bool tensor_cores(const lw_stream *s, int64_t b, int64_t t, int64_t c, int64_t nh,
                         bool backward, const void *const *tensors, int count) {
    const lwc_device *d = lwc_dev(s->device);
    if (s->device->matmul != LW_MATMUL_BF16 || !lwc_flash_mma_serves(c / nh) || d->prop.major < 8 ||
        lwc_flash_mma_smem_bytes(c / nh, backward, false) > d->prop.sharedMemPerBlockOptin ||
        lwc_flash_mma_blocks(b, t, nh) > INT_MAX)
        return false;
    for (int i = 0; i < count; i++)
        if ((uintptr_t)tensors[i] % 16 != 0) return false;
    return true;
}

// Whether the tensor-core kernels, chosen, take the pipelined staging: asked for
// (pipeline_setting), a bf16 qkv, and their larger tiles within the device's shared memory (at
// head dim 128 the backward's pass an 8.6 or 8.9 GPU's 99 KB: the synchronous staging there).
static bool pipelined(const lw_stream *s, bool asked, bool qkv16, int64_t hd, bool backward) {
    return asked && qkv16 &&
           lwc_flash_mma_smem_bytes(hd, backward, true) <=
               lwc_dev(s->device)->prop.sharedMemPerBlockOptin;
}

// The tensor-core kernels read a bf16 qkv and write a bf16 out as they are. The fp32 kernels
// read a bf16 qkv widened into the stream's workspace, and write a bf16 out's fp32 values there
// (256-byte aligned regions), rounded into out after.
// With head_max the kernels write each row's largest score into the scratch, reduced per head
// after them.
lw_status lwc_attention_forward(lw_stream *s, void *out, lw_dtype out_dtype, float *lse,
                                float *head_max, float *scratch, const void *qkv,
                                lw_dtype qkv_dtype, int64_t b, int64_t t, int64_t c, int64_t nh,
                                int64_t nkv, int64_t window) {
    float *rowmax = head_max != NULL ? scratch : NULL;
    if (head_max != NULL && scratch == NULL)
        return lwc_host->fail(LW_ERR_INVALID,
                              "%s: attention forward: the heads' maxima (head_max) pass through "
                              "the scratch, which is NULL (lw_attention_scratch_floats)",
                              s->device->name);
    const bool out16 = out_dtype == LW_DTYPE_BF16, qkv16 = qkv_dtype == LW_DTYPE_BF16;
    const void *tensors[] = {qkv, out};
    const bool mma = tensor_cores(s, b, t, c, nh, false, tensors, 2);
    bool asked;
    int order;
    lw_status st = pipeline_setting(s, &asked);
    if (st == LW_OK) st = order_setting(s, &order);
    if (st == LW_OK) st = check_attention(s, "forward", b, t, c, nh, nkv, false, mma);
    if (st != LW_OK) return st;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cudaStream_t cs = lwc_cuda_stream(s);
    if (mma) {
        st = lwc_launched(s,
                          lwc_flash_mma_forward(cs, out, out16, lse, rowmax, qkv, qkv16, b, t, c,
                                                nh, nkv, window,
                                                pipelined(s, asked, qkv16, c / nh, false), order),
                          "the attention kernel (tensor cores)");
        return st == LW_OK ? heads_max(s, head_max, rowmax, b, t, nh) : st;
    }
    const int64_t nq = b * t * (c + 2 * nkv * (c / nh));
    const int64_t bytes[2] = {out16 ? 4 * b * t * c : 0, qkv16 ? 4 * nq : 0};
    void *r[2] = {NULL, NULL};
    if ((out16 || qkv16) && (st = lwc_regions(s, 2, bytes, r)) != LW_OK) return st;
    const float *qkv32 = static_cast<const float *>(qkv16 ? r[1] : qkv);
    float *out32 = static_cast<float *>(out16 ? r[0] : out);
    if (qkv16 && (st = lwc_widen(s, static_cast<float *>(r[1]), qkv, nq)) != LW_OK) return st;
    st = lwc_launched(s, lwc_flash_forward(cs, out32, lse, rowmax, qkv32, b, t, c, nh, nkv, window),
                      "the attention kernel");
    if (st == LW_OK) st = heads_max(s, head_max, rowmax, b, t, nh);
    return st == LW_OK && out16 ? lwc_to_bf16(s, out, out32, b * t * c) : st;
}

// The fp32 kernels take a bf16 qkv widened into the stream's workspace and accumulate a bf16
// dqkv there (widened first, rounded back after). The pipelined tensor-core kernels take dout
// in bf16, which the row dots write into the scratch past D (lwc_attention_scratch_floats).
lw_status lwc_attention_backward(lw_stream *s, void *dqkv, lw_dtype dqkv_dtype, float *scratch,
                                 const float *dout, const void *qkv, lw_dtype qkv_dtype,
                                 const void *out, lw_dtype out_dtype, const float *lse, int64_t b,
                                 int64_t t, int64_t c, int64_t nh, int64_t nkv, int64_t window) {
    const bool qkv16 = qkv_dtype == LW_DTYPE_BF16, d16 = dqkv_dtype == LW_DTYPE_BF16;
    const void *tensors[] = {dqkv, dout, qkv};
    const bool mma = tensor_cores(s, b, t, c, nh, true, tensors, 3);
    bool asked;
    int order;
    lw_status st = pipeline_setting(s, &asked);
    if (st == LW_OK) st = order_setting(s, &order);
    if (st == LW_OK) st = check_attention(s, "backward", b, t, c, nh, nkv, true, mma);
    if (st != LW_OK) return st;
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cudaStream_t cs = lwc_cuda_stream(s);
    uint16_t *dout16 = NULL; // the pipelined kernels' dO, where cp.async can read it
    if (mma && pipelined(s, asked, qkv16, c / nh, true) && (uintptr_t)scratch % 16 == 0)
        dout16 = reinterpret_cast<uint16_t *>(scratch + dout16_at(b, t, nh));
    // D = rowsum(dout * out) into the scratch, for either pair of kernels (and dout16)
    st = lwc_launched(
        s,
        lwc_flash_rowdot(cs, scratch, dout, out, out_dtype == LW_DTYPE_BF16, b, t, c, nh, dout16),
        "the attention backward's row sums");
    if (st != LW_OK) return st;
    if (mma)
        return lwc_launched(s,
                            lwc_flash_mma_backward(cs, dqkv, d16, scratch, dout, qkv, qkv16, lse, b,
                                                   t, c, nh, nkv, window, dout16, order),
                            "the attention backward kernels (tensor cores)");
    const int64_t nq = b * t * (c + 2 * nkv * (c / nh));
    const int64_t bytes[2] = {qkv16 ? 4 * nq : 0, d16 ? 4 * nq : 0};
    void *r[2] = {NULL, NULL};
    if ((qkv16 || d16) && (st = lwc_regions(s, 2, bytes, r)) != LW_OK) return st;
    if (qkv16 && (st = lwc_widen(s, static_cast<float *>(r[0]), qkv, nq)) != LW_OK) return st;
    if (d16 && (st = lwc_widen(s, static_cast<float *>(r[1]), dqkv, nq)) != LW_OK) return st;
    float *d32 = static_cast<float *>(d16 ? r[1] : dqkv);
    st = lwc_launched(s,
                      lwc_flash_backward(cs, d32, scratch, dout,
                                         static_cast<const float *>(qkv16 ? r[0] : qkv), lse, b, t,
                                         c, nh, nkv, window),
                      "the attention backward kernels");
    return st == LW_OK && d16 ? lwc_to_bf16(s, dqkv, d32, nq) : st;
}
