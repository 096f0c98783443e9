/* adamw.c: the table's AdamW entry on a GPU: the bias corrections in double, then the multi-tensor
 * kernel (adamw.cu). */
#include "cuda/cuda.h"

#include <math.h>

lw_status lwc_adamw(lw_stream *s, const lw_adamw_options *o, const lwi_adamw_tensor *tensors,
                    int32_t count, int64_t t, float grad_scale) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    /* bias corrections in double, as on the CPU: 1 - beta^t loses digits in float for small t */
    const float c1 = (float)(1.0 / (1.0 - pow((double)o->beta1, (double)t)));
    const float c2 = (float)(1.0 / (1.0 - pow((double)o->beta2, (double)t)));
    return lwc_launched(s,
                        lwc_adamw_tensors(lwc_cuda_stream(s), tensors, count, o->beta1, o->beta2,
                                          o->eps, c1, c2, grad_scale),
                        "the AdamW kernel");
}
