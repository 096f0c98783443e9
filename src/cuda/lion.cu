// lion.cu: the table's Lion entry on a GPU: Lion over many tensors in one launch (up to
// LWC_LION_PER_LAUNCH, their pointers in the kernel's arguments), as adamw.cu does AdamW, since
// the elements it is given are many small runs and one launch each would cost more than the
// arithmetic. Each element is read and written once (w, g, m in; w, m out). Bit for bit the
// CPU's (src/core/device/cpu/lion.c): the same operations in the same order, each rounded on its
// own (__fmul_rn and the like, which nvcc never contracts into an FMA).
#include "cuda/cuda.h"

// Tensors per launch: 48 bytes each, well within the 4 KiB of arguments any kernel may take.
#define LWC_LION_PER_LAUNCH 48

namespace {

constexpr int THREADS = 256;

struct tensor_list {
    lwi_update_tensor t[LWC_LION_PER_LAUNCH];
    int32_t count;
};

// sign(c) as the CPU's step_sign: 0 for either zero, NaN for NaN (a NaN gradient reaches w).
__device__ __forceinline__ float step_sign(float c) {
    return c > 0.0f ? 1.0f : c < 0.0f ? -1.0f : c == 0.0f ? 0.0f : c;
}

__global__ void lion_kernel(const tensor_list list, float b1, float b2, float grad_scale) {
    const float k1 = 1.0f - b1, k2 = 1.0f - b2;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int32_t k = 0; k < list.count; k++) {
        const lwi_update_tensor x = list.t[k];
        for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < x.n; i += stride) {
            const float gi = __fmul_rn(grad_scale, x.g[i]);
            const float mi = x.m[i], wi = x.w[i];
            const float s = step_sign(__fadd_rn(__fmul_rn(b1, mi), __fmul_rn(k1, gi)));
            x.w[i] = __fsub_rn(wi, __fmul_rn(x.lr, __fadd_rn(s, __fmul_rn(x.weight_decay, wi))));
            x.m[i] = __fadd_rn(__fmul_rn(b2, mi), __fmul_rn(k2, gi));
        }
    }
}

} // namespace

// Lion over `count` tensors (host list) in as few launches as the kernel's argument space allows
// (LWC_LION_PER_LAUNCH tensors each); a launch whose tensors are all empty is skipped.
static cudaError_t lion_tensors(cudaStream_t stream, const lwi_update_tensor *tensors,
                                int32_t count, float beta1, float beta2, float grad_scale) {
    for (int32_t first = 0; first < count; first += LWC_LION_PER_LAUNCH) {
        tensor_list list;
        list.count = count - first < LWC_LION_PER_LAUNCH ? count - first : LWC_LION_PER_LAUNCH;
        int64_t largest = 0;
        for (int32_t k = 0; k < list.count; k++) {
            list.t[k] = tensors[first + k];
            if (list.t[k].n > largest) largest = list.t[k].n;
        }
        if (largest == 0) continue;
        // four elements per thread of the largest tensor, a grid the GPU holds a few times over
        int64_t blocks = (largest + 4 * THREADS - 1) / (4 * THREADS);
        if (blocks > 4096) blocks = 4096;
        lion_kernel<<<(unsigned)blocks, THREADS, 0, stream>>>(list, beta1, beta2, grad_scale);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

// ---- the table's entry --------------------------------------------------------------------------

lw_status lwc_lion(lw_stream *s, const lw_lion_options *o, const lwi_update_tensor *tensors,
                   int32_t count, float grad_scale) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    return lwc_launched(
        s, lion_tensors(lwc_cuda_stream(s), tensors, count, o->beta1, o->beta2, grad_scale),
        "the Lion kernel");
}
