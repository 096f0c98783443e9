/* harness_activation.c: what the activation case files (gelu.c, relu2.c, swiglu.c) share: their
 * inputs, beside their bf16 roundings, and their runs on fp32 and bf16 inputs and outputs. What
 * each kernel computes (its references, its specials) stays in its own file. */
#include "harness.h"

activation_inputs activation_inputs_new(int64_t nx, int64_t ny, float scale, const float *specials,
                                        size_t n_specials) {
    activation_inputs in = {.nx = nx, .ny = ny};
    in.x = scaled_random(nx, scale, 0.0f), in.dy = random_floats(ny), in.dx0 = random_floats(nx);
    if (n_specials > 0) memcpy(in.x, specials, sizeof(float) * n_specials);
    in.x16 = round_copy(in.x, nx, &in.xw);
    in.dx0_16 = round_copy(in.dx0, nx, &in.dx0_w);
    return in;
}

void activation_inputs_free(activation_inputs *in) {
    free(in->x), free(in->dy), free(in->dx0), free(in->x16), free(in->xw), free(in->dx0_16);
    free(in->dx0_w);
}

void run_activation_forward(run *r, const void *args, const activation_inputs *in,
                            activation_forward_fn forward) {
    const int64_t nx = in->nx, ny = in->ny;
    const float *x = input(r, in->x, nx);
    float *y = output(r, "y", ny, bits());
    r->nan_fed = any_nan(in->x, nx);
    call(r, forward(args, r->s, y, LW_DTYPE_F32, x, LW_DTYPE_F32));
    uint16_t *y16 = output_bf16_values(r, "y bf16", ny, bits());
    call(r, forward(args, r->s, y16, LW_DTYPE_BF16, x, LW_DTYPE_F32));
    /* a bf16 x, and its widening */
    float *yx = output(r, "y of bf16 x", ny, bits());
    call(r, forward(args, r->s, yx, LW_DTYPE_F32, input_bf16(r, in->x16, nx), LW_DTYPE_BF16));
    float *yw = output(r, "y of bf16 x (widened)", ny, bits());
    call(r, forward(args, r->s, yw, LW_DTYPE_F32, input(r, in->xw, nx), LW_DTYPE_F32));
}

void run_activation_backward(run *r, const void *args, const activation_inputs *in,
                             activation_backward_fn backward) {
    const int64_t nx = in->nx;
    const float *dy = input(r, in->dy, in->ny), *x = input(r, in->x, nx);
    float *dx = accumulated(r, "dx", in->dx0, nx, bits());
    r->nan_fed = any_nan(in->x, nx);
    call(r, backward(args, r->s, dx, LW_DTYPE_F32, dy, x, LW_DTYPE_F32));
    float *dxx = accumulated(r, "dx of bf16 x", in->dx0, nx, bits());
    call(r, backward(args, r->s, dxx, LW_DTYPE_F32, dy, input_bf16(r, in->x16, nx), LW_DTYPE_BF16));
    float *dxw = accumulated(r, "dx of bf16 x (widened)", in->dx0, nx, bits());
    call(r, backward(args, r->s, dxw, LW_DTYPE_F32, dy, input(r, in->xw, nx), LW_DTYPE_F32));
    /* a bf16 dx: accumulated in fp32, rounded; against the fp32 run from its widened start */
    float *dxs = accumulated(r, "dx from a bf16 start", in->dx0_w, nx, bits());
    call(r, backward(args, r->s, dxs, LW_DTYPE_F32, dy, x, LW_DTYPE_F32));
    uint16_t *dx16 = accumulated_bf16(r, "dx from a bf16 start bf16", in->dx0_16, nx, bits());
    call(r, backward(args, r->s, dx16, LW_DTYPE_BF16, dy, x, LW_DTYPE_F32));
}

void after_activation(const kernel_case *k, const run *r, bool forward, int64_t m) {
    after_bf16_output(k, r, forward ? "y" : "dx from a bf16 start", m);
    widening_exact(k, r, forward ? "y of bf16 x" : "dx of bf16 x", m);
}
