// attention_stage.h: how the tensor-core attention (attention_mma.cu) stages its tiles into
// shared memory: synchronously (fp32 rounded to bf16, bf16 copied: through registers), and in
// its pipelined variant by cp.async (bf16 only, 16 bytes a chunk, not through registers) with
// the commit and wait that fence the copies; the forward's and dq's key steps either way, and
// the dk/dv steps' pieces (tiles, and the queries' lse and D through registers). The chunks and the
// tiles' layout are mma_layout.h's. nvcc only; compute capability 8.0 or later.
#ifndef LWC_ATTENTION_STAGE_H
#define LWC_ATTENTION_STAGE_H

#include "cuda/mma_layout.h"

// Rows [r0, r0 + ROWS) of one head's [t, D] slice of a tensor (rows `stride` values apart) into
// a shared tile in bf16: fp32 values rounded, bf16 ones (T uint16_t) copied; rows at or past t
// are zeros. A fixed count of 4-value chunks per thread (THREADS threads), unrolled, so that a
// thread's loads are issued before its first store waits on one.
__device__ __forceinline__ uint2 lwc_chunk_bf16(const float *p) {
    const float4 v = *reinterpret_cast<const float4 *>(p);
    return make_uint2(lwc_mma_pack(v.x, v.y), lwc_mma_pack(v.z, v.w));
}
__device__ __forceinline__ uint2 lwc_chunk_bf16(const uint16_t *p) {
    return *reinterpret_cast<const uint2 *>(p);
}

template <int D, int ROWS, int THREADS, typename T>
__device__ __forceinline__ void lwc_stage(uint16_t *tile, const T *src, int64_t stride, int r0,
                                          int t) {
    static_assert(ROWS * D / 4 % THREADS == 0, "whole chunks per thread");
#pragma unroll
    for (int i = 0; i < ROWS * D / 4 / THREADS; i++) {
        const int e = threadIdx.x + i * THREADS;
        int row, col;
        lwc_fa_chunk(e, D, &row, &col);
        uint2 v = make_uint2(0u, 0u);
        if (r0 + row < t) v = lwc_chunk_bf16(src + (int64_t)(r0 + row) * stride + col);
        *reinterpret_cast<uint2 *>(tile + lwc_fa_at(row, col, D)) = v;
    }
}

// Rows [r0, r0 + ROWS) of one head's [t, D] bf16 slice (rows `stride` elements apart, 16-byte
// aligned) into a shared tile, each of THREADS threads issuing the same count of chunks. Rows
// at or past t are zeros: cp.async's source size 0 reads nothing and fills the 16 bytes with
// zeros (the address given stays the slice's first row, which exists). .cg: the tiles are
// read once per block from L2, so they skip L1.
template <int D, int ROWS, int THREADS>
__device__ __forceinline__ void lwc_stage_async(uint16_t *tile, const uint16_t *src, int64_t stride,
                                                int r0, int t) {
    static_assert(ROWS * D / 8 % THREADS == 0, "whole 16-byte chunks per thread");
#pragma unroll
    for (int i = 0; i < ROWS * D / 8 / THREADS; i++) {
        int row, col;
        lwc_fa_chunk16((int)threadIdx.x + i * THREADS, D, &row, &col);
        const bool real = r0 + row < t;
        const uint16_t *p = src + (real ? (int64_t)(r0 + row) * stride : 0) + col;
        const unsigned dst =
            static_cast<unsigned>(__cvta_generic_to_shared(tile + lwc_fa_at(row, col, D)));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(p),
                     "r"(real ? 16 : 0)
                     : "memory");
    }
}

// Closes the thread's copies issued since the last commit into one group.
__device__ __forceinline__ void lwc_stage_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits for every group the thread committed; a __syncthreads after it makes every thread's
// copies visible to the block.
__device__ __forceinline__ void lwc_stage_wait_all() {
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// The forward's and the dq kernel's key step `step` (of first .. last) in shared memory, *kb and
// *vb set to its K and V tiles: staged into ks and vs between two barriers, or (PIPE) waited for
// in the step's buffer, the next step's then sent to the other (buffer 1's tiles KV_BUF past
// buffer 0's) once every warp is done with it.
template <int D, bool PIPE, int THREADS, typename QKV>
__device__ __forceinline__ void lwc_key_step(const uint16_t **kb, const uint16_t **vb, uint16_t *ks,
                                             uint16_t *vs, const QKV *k, const QKV *v, int64_t ld,
                                             int step, int first, int last, int t) {
    constexpr int KV_BUF = 2 * LWC_FA_STEP * (D + LWC_FA_PAD);
    if constexpr (PIPE) {
        const int buf = lwc_fa_stage_buffer(step - first);
        *kb = ks + buf * KV_BUF, *vb = vs + buf * KV_BUF;
        lwc_stage_wait_all();
        __syncthreads(); // this step's tiles are in; every warp is done with the other buffer
        if (step < last) {
            const int next = (step + 1) * LWC_FA_STEP;
            lwc_stage_async<D, LWC_FA_STEP, THREADS>(ks + (1 - buf) * KV_BUF, k, ld, next, t);
            lwc_stage_async<D, LWC_FA_STEP, THREADS>(vs + (1 - buf) * KV_BUF, v, ld, next, t);
            lwc_stage_commit();
        }
    } else {
        *kb = ks, *vb = vs;
        __syncthreads(); // every warp is done with the last step's
        lwc_stage<D, LWC_FA_STEP, THREADS>(ks, k, ld, step * LWC_FA_STEP, t);
        lwc_stage<D, LWC_FA_STEP, THREADS>(vs, v, ld, step * LWC_FA_STEP, t);
        __syncthreads();
    }
}

// The lse (times lse_scale) and D of the query a thread holds in a dk/dv step of M queries from
// q0 (thread r < M: query q0 + r; 0 past t), loaded into registers: the pipelined kernel stores
// them (lwc_query_floats_store) only after the step's products, which hide the loads' latency.
struct lwc_query_floats {
    float l, d;
};

template <int M, int THREADS>
__device__ __forceinline__ lwc_query_floats lwc_query_floats_load(const float *lse, const float *dd,
                                                                  float lse_scale, int q0, int t) {
    static_assert(M <= THREADS, "a query per thread at most");
    const int r = (int)threadIdx.x;
    lwc_query_floats f = {0.0f, 0.0f};
    if (r < M && q0 + r < t) f.l = lse[q0 + r] * lse_scale, f.d = dd[q0 + r];
    return f;
}

template <int M>
__device__ __forceinline__ void lwc_query_floats_store(float *lb, float *db, lwc_query_floats f) {
    if ((int)threadIdx.x < M) lb[threadIdx.x] = f.l, db[threadIdx.x] = f.d;
}

// The dk/dv kernel's step under the pipeline: M rows of a query head's Q and dO (slices q and
// dout, rows ld and c apart) from q0 into one buffer by cp.async (the caller commits).
template <int D, int M, int THREADS>
__device__ __forceinline__ void lwc_stage_query_tiles(uint16_t *qb, uint16_t *ob, const uint16_t *q,
                                                      int64_t ld, const uint16_t *dout, int64_t c,
                                                      int q0, int t) {
    lwc_stage_async<D, M, THREADS>(qb, q, ld, q0, t);
    lwc_stage_async<D, M, THREADS>(ob, dout, c, q0, t);
}

#endif
