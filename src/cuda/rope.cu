// rope.cu: the table's rotary embedding entries on a GPU, in place on heads of strided rows: a
// thread per (row, pair), its angle, cosine and sine taken once in double for every head of the
// row, the rotation in double and rounded once, as the CPU does (device/cpu/rope.c; __dmul_rn /
// __dsub_rn: no FMA contraction). Both devices' double cos, sin and pow are within an ulp or two
// of double, so their fp32 results agree but where a value lies at a rounding point.
#include "cuda/bf16_bits.h"
#include "cuda/cuda.h"

namespace {

constexpr int THREADS = 256;

// Pair i of a head turned by the angle whose cosine and sine (sign applied) are c and s.
template <typename X>
__global__ void rope_kernel(X *x, int64_t b, int64_t t, int64_t pos0, int64_t stride, int64_t col0,
                            int64_t n_heads, int64_t hd, double base, double sign, bool halves) {
    const int64_t half = hd / 2, total = b * t * half;
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < total;
         k += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = k / half, i = k % half;
        const double pos = (double)(row % t + pos0);
        const double angle = __dmul_rn(pos, pow(base, -(double)(2 * i) / (double)hd));
        const double c = cos(angle), s = sign * sin(angle);
        const int64_t ia = halves ? i : 2 * i, ib = halves ? i + half : 2 * i + 1;
        X *head = x + row * stride + col0;
        for (int64_t h = 0; h < n_heads; h++, head += hd) {
            const double xa = lwc_load(head, ia), xb = lwc_load(head, ib);
            lwc_store(head, ia, (float)__dsub_rn(__dmul_rn(xa, c), __dmul_rn(xb, s)));
            lwc_store(head, ib, (float)__dadd_rn(__dmul_rn(xb, c), __dmul_rn(xa, s)));
        }
    }
}

} // namespace

// Both entries: the rotation by sign times the angles, launched on s; `what` names the kernel in
// a launch's error.
static lw_status rope(lw_stream *s, void *x, lw_dtype dtype, int64_t b, int64_t t, int64_t pos0,
                      int64_t stride, int64_t col0, int64_t n_heads, int64_t hd, float base,
                      lw_rope_pairing pairing, double sign, const char *what) {
    if (lwc_use(s->device) != LW_OK) return LW_ERR_IO;
    const int64_t total = b * t * (hd / 2);
    const int64_t want = (total + THREADS - 1) / THREADS;
    const unsigned blocks = (unsigned)(want < 1 ? 1 : want > 65535 ? 65535 : want);
    const bool halves = pairing == LW_ROPE_HALVES;
    cudaStream_t stream = lwc_cuda_stream(s);
    if (dtype == LW_DTYPE_BF16)
        rope_kernel<<<blocks, THREADS, 0, stream>>>(static_cast<unsigned short *>(x), b, t, pos0,
                                                    stride, col0, n_heads, hd, (double)base, sign,
                                                    halves);
    else
        rope_kernel<<<blocks, THREADS, 0, stream>>>(static_cast<float *>(x), b, t, pos0, stride,
                                                    col0, n_heads, hd, (double)base, sign, halves);
    return lwc_launched(s, cudaGetLastError(), what);
}

// ---- the table's entries ------------------------------------------------------------------------

lw_status lwc_rope_forward(lw_stream *s, void *x, lw_dtype dtype, int64_t b, int64_t t,
                           int64_t pos0, int64_t row_stride, int64_t col0, int64_t n_heads,
                           int64_t hd, float base, lw_rope_pairing pairing) {
    return rope(s, x, dtype, b, t, pos0, row_stride, col0, n_heads, hd, base, pairing, 1.0,
                "the rope kernel");
}

lw_status lwc_rope_backward(lw_stream *s, void *dx, lw_dtype dtype, int64_t b, int64_t t,
                            int64_t pos0, int64_t row_stride, int64_t col0, int64_t n_heads,
                            int64_t hd, float base, lw_rope_pairing pairing) {
    return rope(s, dx, dtype, b, t, pos0, row_stride, col0, n_heads, hd, base, pairing, -1.0,
                "the rope backward kernel");
}
