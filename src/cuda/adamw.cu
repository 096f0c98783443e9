// adamw.cu: the table's AdamW entry on a GPU: the bias corrections in double, then AdamW over many
// tensors per launch (update_tensors.h). Each element is read and written once (w, g, m, v in;
// w, m, v out). Rounding as the CPU reference's (no FMA).
#include "cuda/update_tensors.h"

#include <math.h>

namespace {

__global__ void adamw_kernel(const lwc_tensor_list list, float b1, float b2, float eps, float c1,
                             float c2, float grad_scale) {
    const float k1 = 1.0f - b1, k2 = 1.0f - b2;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int32_t k = 0; k < list.count; k++) {
        const lwi_update_tensor x = list.t[k];
        for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < x.n; i += stride) {
            const float gi = __fmul_rn(grad_scale, x.g[i]);
            const float mi = __fadd_rn(__fmul_rn(b1, x.m[i]), __fmul_rn(k1, gi));
            const float vi = __fadd_rn(__fmul_rn(b2, x.v[i]), __fmul_rn(__fmul_rn(k2, gi), gi));
            x.m[i] = mi;
            x.v[i] = vi;
            const float mhat = __fmul_rn(mi, c1), vhat = __fmul_rn(vi, c2);
            const float wi = x.w[i];
            const float step = __fadd_rn(__fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), eps)),
                                         __fmul_rn(x.weight_decay, wi));
            x.w[i] = __fsub_rn(wi, __fmul_rn(x.lr, step));
        }
    }
}

} // namespace

// ---- the table's entry --------------------------------------------------------------------------

lw_status lwc_adamw(lw_stream *s, const lw_adamw_options *o, const lwi_update_tensor *tensors,
                    int32_t count, int64_t t, float grad_scale) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    // bias corrections in double, as on the CPU: 1 - beta^t loses digits in float for small t
    const float c1 = (float)(1.0 / (1.0 - pow((double)o->beta1, (double)t)));
    const float c2 = (float)(1.0 / (1.0 - pow((double)o->beta2, (double)t)));
    cudaStream_t stream = lwc_cuda_stream(s);
    const cudaError_t e =
        lwc_each_tensor_list(tensors, count, [&](const lwc_tensor_list &list, unsigned blocks) {
            adamw_kernel<<<blocks, LWC_UPDATE_THREADS, 0, stream>>>(list, o->beta1, o->beta2,
                                                                    o->eps, c1, c2, grad_scale);
        });
    return lwc_launched(s, e, "the AdamW kernel");
}
