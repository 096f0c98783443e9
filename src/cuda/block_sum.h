// block_sum.h: the sums in double that the optimizer's kernels reduce a block to (muon_rescale.cu,
// normuon.cu): a warp's by shuffles, then a block's through shared memory, always in the same
// tree, so a result depends on the shapes alone, never on timing. For nvcc only (C++).
#ifndef LWC_BLOCK_SUM_H
#define LWC_BLOCK_SUM_H

// The warp's sum, in lane 0.
static __device__ __forceinline__ double lwc_warp_sum(double v) {
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

// The block's sum (THREADS threads, a multiple of 32), returned to every thread: each block
// reduces alike. Every thread of the block must call it.
template <int THREADS> static __device__ double lwc_block_sum(double v) {
    constexpr int WARPS = THREADS / 32;
    __shared__ double shared[WARPS];
    __shared__ double total;
    v = lwc_warp_sum(v);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < WARPS ? shared[lane] : 0.0;
        v = lwc_warp_sum(v);
        if (lane == 0) total = v;
    }
    __syncthreads();
    return total;
}

#endif
