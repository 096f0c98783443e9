/* test_nn_activations.c: the MLP activations and the logits' softcap beside GELU's (ReLU^2,
 * SwiGLU over fused [gate | up] rows, cap tanh(x / cap)): each forward against its formula in
 * float64, each backward against finite differences and against the float64 derivative, the
 * accumulate (+=) contract, and the softcap in place. */
#include "nn_check.h"

#include <stdio.h>
#include <string.h>

static void check_tol(const char *kernel, int64_t n, const char *what, double err, double tol) {
    nn_within(err, tol, "%s n=%lld %s", kernel, (long long)n, what);
}

/* The kernel under test, its sizes and arrays: y [ny] from x [nx] (SwiGLU: n rows of fused width
 * c, ny = nx / 2), the loss's weights r [ny]. */
typedef enum { RELU2, SWIGLU, SOFTCAP } kernel;

typedef struct {
    kernel kind;
    float *x, *y, *r;
    int64_t n, c, nx, ny;
    float cap;
} ctx_t;

static const char *kernel_name(kernel k) {
    return k == RELU2 ? "relu2" : k == SWIGLU ? "swiglu" : "softcap";
}

static void forward(ctx_t *k) {
    if (k->kind == RELU2)
        CHECK_OK(lw_relu2_forward(NULL, k->y, LW_DTYPE_F32, k->x, LW_DTYPE_F32, k->nx));
    else if (k->kind == SWIGLU)
        CHECK_OK(lw_swiglu_forward(NULL, k->y, LW_DTYPE_F32, k->x, LW_DTYPE_F32, k->n, k->c));
    else
        CHECK_OK(lw_softcap_forward(NULL, k->y, k->x, k->nx, k->cap));
}

/* dx += the input gradient of sum(y r) */
static void backward(ctx_t *k, float *dx) {
    if (k->kind == RELU2)
        CHECK_OK(lw_relu2_backward(NULL, dx, LW_DTYPE_F32, k->r, k->x, LW_DTYPE_F32, k->nx));
    else if (k->kind == SWIGLU)
        CHECK_OK(lw_swiglu_backward(NULL, dx, LW_DTYPE_F32, k->r, k->x, LW_DTYPE_F32, k->n, k->c));
    else
        CHECK_OK(lw_softcap_backward(NULL, dx, k->r, k->y, k->nx, k->cap));
}

static double loss(void *p) {
    ctx_t *k = p;
    forward(k);
    return nn_dot(k->y, k->r, k->ny);
}

/* y and dL/dx in float64 from x: ref_y [ny], ref_dx [nx] */
static void reference(const ctx_t *k, double *ref_y, double *ref_dx) {
    if (k->kind == SWIGLU) {
        const int64_t h = k->c / 2;
        for (int64_t i = 0; i < k->n; i++)
            for (int64_t j = 0; j < h; j++) {
                const double a = k->x[i * k->c + j], b = k->x[i * k->c + h + j];
                const double s = 1.0 / (1.0 + exp(-a)), r = k->r[i * h + j];
                ref_y[i * h + j] = a * s * b;
                ref_dx[i * k->c + j] = r * b * (s + a * s * (1.0 - s));
                ref_dx[i * k->c + h + j] = r * a * s;
            }
        return;
    }
    for (int64_t i = 0; i < k->nx; i++) {
        const double x = k->x[i];
        if (k->kind == RELU2) {
            const double v = x > 0 ? x : 0;
            ref_y[i] = v * v, ref_dx[i] = k->r[i] * 2.0 * v;
        } else {
            const double t = tanh(x / k->cap);
            ref_y[i] = k->cap * t, ref_dx[i] = k->r[i] * (1.0 - t * t);
        }
    }
}

/* max |got - ref| / (1 + |ref|) */
static double mixed_error(const float *got, const double *ref, int64_t n) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++)
        worst = fmax(worst, fabs(got[i] - ref[i]) / (1.0 + fabs(ref[i])));
    return worst;
}

/* fd_eps: the central differences' step for x's scale; fd_tol: their tolerance (said at the
 * call). */
static void test_kernel(kernel kind, int64_t n, int64_t c, float scale, float cap, float fd_eps,
                        double fd_tol) {
    const int64_t nx = n * c, ny = kind == SWIGLU ? nx / 2 : nx;
    ctx_t k = {kind, nn_alloc(nx), nn_alloc(ny), nn_alloc(ny), n, c, nx, ny, cap};
    const char *name = kernel_name(kind);
    nn_fill(k.x, nx, scale);
    nn_fill(k.r, ny, 1.0f);
    double *ref_y = malloc(sizeof(double) * (size_t)ny);
    double *ref_dx = malloc(sizeof(double) * (size_t)nx);
    reference(&k, ref_y, ref_dx);

    /* (a) forward: an exp or tanh within a few ulps and a division or two: 1e-6 mixed */
    forward(&k);
    check_tol(name, nx, "forward", mixed_error(k.y, ref_y, ny), 1e-6);

    /* (b) dx against the float64 derivative (a few roundings: 1e-6 mixed) and against central
     * differences */
    float *dx = nn_alloc(nx);
    backward(&k, dx);
    check_tol(name, nx, "dx vs float64 derivative", mixed_error(dx, ref_dx, nx), 1e-6);
    check_tol(name, nx, "fd dx", nn_fd_worst(k.x, dx, nx, loss, &k, fd_eps, 1000), fd_tol);
    forward(&k); /* the y the softcap's backward reads, after the differences moved it */

    /* (c) accumulate: element-wise, so backward into random contents is bit for bit the random
     * contents plus the gradient from zeros (one float addition of the same operands) */
    float *pre = nn_alloc(nx), *acc = nn_alloc(nx);
    nn_fill(pre, nx, 1.0f);
    memcpy(acc, pre, sizeof(float) * (size_t)nx);
    backward(&k, acc);
    int exact = 1;
    for (int64_t i = 0; i < nx; i++)
        exact &= acc[i] == pre[i] + dx[i];
    CHECK(exact);

    /* (d) the softcap in place: y over x gives the bits it gives apart */
    if (kind == SOFTCAP) {
        float *in_place = nn_alloc(nx);
        memcpy(in_place, k.x, sizeof(float) * (size_t)nx);
        CHECK_OK(lw_softcap_forward(NULL, in_place, in_place, nx, cap));
        CHECK(memcmp(in_place, k.y, sizeof(float) * (size_t)nx) == 0);
        free(in_place);
    }
    free(k.x), free(k.y), free(k.r), free(ref_y), free(ref_dx), free(dx), free(pre), free(acc);
}

/* The tails: ReLU^2 of -inf and -0 is +0, of NaN NaN; SwiGLU's gate far out gives silu's limits
 * (0 and slope 0 below, a and slope 1 above) and no NaN; the softcap's infinities give +-cap
 * with slope 0. */
static void test_tails(void) {
    const float x[] = {-INFINITY, -0.0f, NAN, INFINITY};
    float y[4], dx[4] = {0}, dy[4] = {1, 1, 1, 1};
    CHECK_OK(lw_relu2_forward(NULL, y, LW_DTYPE_F32, x, LW_DTYPE_F32, 4));
    CHECK(y[0] == 0 && y[1] == 0 && !signbit(y[1]) && isnan(y[2]) && y[3] == INFINITY);
    /* gates -inf, -1000, 1000, inf, their up halves 2 */
    const float f[8] = {-INFINITY, -1000.0f, 1000.0f, INFINITY, 2, 2, 2, 2};
    float sy[4], sdx[8] = {0};
    CHECK_OK(lw_swiglu_forward(NULL, sy, LW_DTYPE_F32, f, LW_DTYPE_F32, 1, 8));
    CHECK_OK(lw_swiglu_backward(NULL, sdx, LW_DTYPE_F32, dy, f, LW_DTYPE_F32, 1, 8));
    CHECK(fabsf(sy[0]) < 1e-35f && fabsf(sy[1]) < 1e-35f && sy[2] == 2000.0f && sy[3] == INFINITY);
    CHECK(fabsf(sdx[0]) < 1e-35f && fabsf(sdx[1]) < 1e-35f && sdx[2] == 2.0f && sdx[3] == 2.0f);
    CHECK(fabsf(sdx[4]) < 1e-35f && sdx[6] == 1000.0f && sdx[7] == INFINITY);
    CHECK_OK(lw_softcap_forward(NULL, y, x, 4, 15.0f));
    CHECK(y[0] == -15.0f && y[3] == 15.0f && isnan(y[2]) && signbit(y[1]));
    CHECK_OK(lw_softcap_backward(NULL, dx, dy, y, 4, 15.0f));
    CHECK(dx[0] == 0 && dx[3] == 0 && dx[1] == 1.0f);
}

int main(void) {
    /* Central differences of an element-wise function: each x moves one y. ReLU^2's second
     * derivative is 2 above 0 and 0 below: truncation 0, but within eps of the kink at 0 the
     * difference is off by up to eps / 2, hence eps = 1e-3 there (rounding ~1e-7 |y| / eps,
     * 1e-4 of |y| ~ 25 against a denominator as large). SwiGLU's third derivative is O(1) for
     * |a| < 6: eps = 1e-2 truncates at ~2e-5. The softcap's third derivative is ~2 / cap^2:
     * at cap 2 and eps 1e-2, ~1e-5. Measured below 1e-4 each; 1e-3 keeps a margin, and a
     * dropped term (silu's a s (1 - s), the softcap's t^2) is off by O(0.1). */
    test_kernel(RELU2, 1, 7, 3.0f, 0, 1e-3f, 1e-3);
    test_kernel(RELU2, 1, 1031, 5.0f, 0, 1e-3f, 1e-3);
    test_kernel(SWIGLU, 3, 10, 3.0f, 0, 1e-2f, 1e-3);
    test_kernel(SWIGLU, 5, 518, 6.0f, 0, 1e-2f, 1e-3);
    test_kernel(SOFTCAP, 1, 13, 6.0f, 2.0f, 1e-2f, 1e-3);
    test_kernel(SOFTCAP, 1, 1031, 60.0f, 15.0f, 1e-2f, 1e-3);
    test_tails();
    return check_exit("test_nn_activations");
}
