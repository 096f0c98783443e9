// update_tensors.h: what the element-wise rules' kernels share on a GPU (adamw.cu, lion.cu): a
// list of tensors that fits in a kernel's arguments, and the launches that cover a longer list.
// The optimizer hands a rule many small runs (gains, biases, embeddings, slices), and one launch
// each would cost more than the arithmetic. For nvcc only (C++).
#ifndef LWC_UPDATE_TENSORS_H
#define LWC_UPDATE_TENSORS_H

#include "cuda/cuda.h"

// Tensors per launch: 48 of 48 bytes, well within the 4 KiB of arguments any kernel may take.
#define LWC_TENSORS_PER_LAUNCH 48
#define LWC_UPDATE_THREADS 256

struct lwc_tensor_list {
    lwi_update_tensor t[LWC_TENSORS_PER_LAUNCH];
    int32_t count;
};

// Calls launch(list, blocks) for each run of up to LWC_TENSORS_PER_LAUNCH of the `count`
// tensors (host list), blocks of LWC_UPDATE_THREADS threads: four elements per thread of the
// run's largest tensor, at most 4096 blocks (a grid the GPU holds a few times over; the kernels
// stride over the rest). A run whose tensors are all empty launches nothing.
template <typename Launch>
static cudaError_t lwc_each_tensor_list(const lwi_update_tensor *tensors, int32_t count,
                                        Launch launch) {
    for (int32_t first = 0; first < count; first += LWC_TENSORS_PER_LAUNCH) {
        lwc_tensor_list list;
        list.count = count - first < LWC_TENSORS_PER_LAUNCH ? count - first
                                                            : LWC_TENSORS_PER_LAUNCH;
        int64_t largest = 0;
        for (int32_t k = 0; k < list.count; k++) {
            list.t[k] = tensors[first + k];
            if (list.t[k].n > largest) largest = list.t[k].n;
        }
        if (largest == 0) continue;
        int64_t blocks = (largest + 4 * LWC_UPDATE_THREADS - 1) / (4 * LWC_UPDATE_THREADS);
        if (blocks > 4096) blocks = 4096;
        launch(list, (unsigned)blocks);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

#endif
