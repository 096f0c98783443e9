/* harness_bf16.c: what the case files share about bf16: whether a lower matmul precision rounds
 * an operand (so that it must differ from fp32), weights and inputs given in bf16 beside their
 * widening, and bf16 outputs checked against the same kernel's fp32 output. */
#include "harness.h"

/* Whether a GEMM under precision m rounds an operand of these n values that fp32 products read
 * as it is: a value bf16 (8 significant bits) or TF32 (11) cannot hold. bf16 values, a bf16
 * operand's or its widening's, are read exactly by both. A lower precision can be required to
 * differ from fp32 (differing) only where it rounds something: else the sums' order is all
 * that differs. */
bool rounded_by(lw_matmul m, const float *v, int64_t n) {
    const uint32_t lost = m == LW_MATMUL_BF16 ? 0xffffu : m == LW_MATMUL_TF32 ? 0x1fffu : 0;
    for (int64_t i = 0; i < n && lost != 0; i++) {
        uint32_t bits;
        memcpy(&bits, &v[i], sizeof bits);
        if ((bits & lost) != 0 && isfinite(v[i])) return true;
    }
    return false;
}

/* m, no longer required to differ from fp32 where nothing is rounded */
measure differing_if(measure m, bool rounded) {
    if (!rounded) m.differ = 0;
    return m;
}

/* ---- bf16 weights ----------------------------------------------------------------------------- *
 * The kernels that read weight matrices (linear, the embedding tables, the LM head) take their
 * dtype, so that bf16 parameters are read as stored. A case with bf16 weights rounds its host
 * weights to bf16 (the fp32 array then holds the widened values, which the fp64 references and
 * the other checks read) and keeps their bits; its run calls the kernel on the bits, then again on
 * the widened fp32 into outputs named "... (widened)". On the CPU the two agree bit for bit
 * (a bf16 weight gives what its widening gives); on a GPU both meet the case's tolerance against
 * the CPU (under bf16 GEMMs the same bf16 operands, perhaps through another of cuBLAS's kernels;
 * under fp32 and TF32 the weight widened into the workspace). */

/* n weights rounded to bf16 in place (w holds the widened values after); their bits, allocated. */
uint16_t *round_weights(float *w, int64_t n) {
    uint16_t *bits = malloc(sizeof(uint16_t) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        bits[i] = bf16_reference(w[i]);
        w[i] = (float)bf16_reference_value(bits[i]);
    }
    return bits;
}

uint16_t *round_copy(const float *x, int64_t n, float **widened) {
    *widened = cpu_array(n);
    memcpy(*widened, x, sizeof(float) * (size_t)n);
    return round_weights(*widened, n);
}

/* A case's weights (or bf16 input) on the run's device as the kernel reads them: the bf16 bits
 * when it has them, else the fp32 values; *dtype says which. */
const void *input_typed(run *r, const float *w, const uint16_t *bits, int64_t n, lw_dtype *dtype) {
    *dtype = bits != NULL ? LW_DTYPE_BF16 : LW_DTYPE_F32;
    return bits != NULL ? (const void *)input_bf16(r, bits, n) : (const void *)input(r, w, n);
}

/* Output `what` of the bf16 weights (or input) and its "(widened)" twin, n floats, agree bit for
 * bit, on the run's device. */
void widening_exact(const kernel_case *k, const run *r, const char *what, int64_t n) {
    char twin[64];
    snprintf(twin, sizeof twin, "%s (widened)", what);
    const float *a = f32_of(r, what), *b = f32_of(r, twin);
    expect(k, r, a != NULL && b != NULL && memcmp(a, b, 4 * (size_t)n) == 0,
           "bf16 values give their widening's results, bit for bit");
}
/* The same on the CPU alone (a GPU may run another of cuBLAS's kernels on each). */
void same_as_widened(const kernel_case *k, const run *r, const char *what, int64_t n) {
    if (on_cpu(r->device)) widening_exact(k, r, what, n);
}

/* The bf16 outputs (y_dtype or out_dtype bf16: the layer norm's, GELU's, the attention's, the
 * linear layer's) are the same kernel's fp32 output rounded to nearest even: checked on each
 * device against its own fp32 output, bit for bit (after_bf16_output; the linear layer's on the
 * CPU, a GPU's bf16 GEMM output may come from another of cuBLAS's kernels). Against the CPU
 * they are compared by value with the fp32 output's measure widened by a bf16 step: where a
 * device's fp32 value is an ulp from the CPU's, its rounding may land a step away, and a step is
 * 2^-7 of a value at the bottom of its binade (2^-8 at the top). */
measure bf16_step(measure m) {
    if (m.kind == RELATIVE) m.tol += 1.0 / 128;
    m.differ = 0;
    return m;
}

/* Output `what` (bf16 bits, "<what> bf16") is output `what` (fp32) rounded, n values. */
void after_bf16_output(const kernel_case *k, const run *r, const char *what, int64_t n) {
    char name[48];
    snprintf(name, sizeof name, "%s bf16", what);
    const float *y = f32_of(r, what);
    const uint16_t *y16 = got_of(r, name);
    int64_t wrong = y == NULL || y16 == NULL;
    for (int64_t i = 0; i < n && !wrong; i++)
        wrong += y16[i] != bf16_reference(y[i]);
    expect(k, r, wrong == 0, "the bf16 output is the fp32 output rounded to nearest even");
}
