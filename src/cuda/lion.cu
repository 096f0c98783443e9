// lion.cu: the table's Lion entry on a GPU: Lion over many tensors per launch (update_tensors.h),
// as adamw.cu does AdamW. Each element is read and written once (w, g, m in; w, m out). Bit for bit the
// CPU's (src/core/device/cpu/lion.c): the same operations in the same order, each rounded on its
// own (__fmul_rn and the like, which nvcc never contracts into an FMA).
#include "cuda/update_tensors.h"

namespace {

// sign(c) as the CPU's step_sign: 0 for either zero, NaN for NaN (a NaN gradient reaches w).
__device__ __forceinline__ float step_sign(float c) {
    return c > 0.0f ? 1.0f : c < 0.0f ? -1.0f : c == 0.0f ? 0.0f : c;
}

__global__ void lion_kernel(const lwc_tensor_list list, float b1, float b2, float grad_scale) {
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

// ---- the table's entry --------------------------------------------------------------------------

lw_status lwc_lion(lw_stream *s, const lw_lion_options *o, const lwi_update_tensor *tensors,
                   int32_t count, float grad_scale) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    cudaStream_t stream = lwc_cuda_stream(s);
    const cudaError_t e =
        lwc_each_tensor_list(tensors, count, [&](const lwc_tensor_list &list, unsigned blocks) {
            lion_kernel<<<blocks, LWC_UPDATE_THREADS, 0, stream>>>(list, o->beta1, o->beta2,
                                                                   grad_scale);
        });
    return lwc_launched(s, e, "the Lion kernel");
}
