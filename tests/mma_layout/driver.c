/* driver.c: the driver of test_mma_layout: the tensor-core attention (src/cuda/attention_mma.cu)
 * on the CPU, where no GPU runs it. Its index arithmetic lives in src/cuda/mma_layout.h, which
 * this test shares:
 *   - the layouts (layouts.c): the header's lanes of mma.m16n8k16's A, B and C fragments against
 *     the PTX ISA's formulas (transcribed on their own in ptx.c), each element of A (16 x 16),
 *     B (16 x 8) and C (16 x 8) held by exactly one (lane, register, half); two C tiles are an A
 *     operand element for element (the kernels' P -> A reuse); ldmatrix.x4, emulated from the
 *     ISA's description, at the header's lane addresses delivers exactly those operands for each
 *     kind of read, with 16-byte aligned rows, and with no bank conflict between the 8 rows of a
 *     phase (nor between the stores of a half-warp when tiles are staged);
 *   - the tile plan (layouts.c): every (batch x head, tile) block once, the steps a block runs are
 *     exactly those holding a kept pair, the masks applied exactly where a pair is masked (all t
 *     up to 300), shared memory holding the kernels' tiles; the pipelined staging's 16-byte
 *     chunks, alternating buffers and dk/dv order of steps;
 *   - the kernels' three tile loops run on the CPU step for step (emulate_* in forward.c and
 *     backward.c, numbered as in attention_mma.cu, from warp.c's pieces): 32 lanes' registers as
 *     arrays, mma.sync and ldmatrix emulated from the ISA's layouts, the header's per-lane steps,
 *     the quads' shuffles, the same tiles, causal skipping, online rescaling and order of
 *     accumulation; against double-precision causal attention on bf16-rounded inputs, within a
 *     bound per element (reference.c), the forward's rows' largest scores (lwc_fa_max_score,
 *     which attention.cu reduces per head) as lse is (emulation.c); the pipelined staging's
 *     results bit for bit the synchronous staging's;
 *   - the grids' two block orders (orders.c): every block once in each, "heads" a head's tiles
 *     together, "work" (tile-major) no block's steps above its predecessor's, over grid shapes
 *     with GQA, windows and partial tiles; the emulated kernels the same bits in either;
 *   - that the comparison could fail: five faults injected into the emulation (an operand's
 *     halves swapped, the P -> A packing reordered, the mask one key late, a quad reduced over
 *     two lanes, a step computed on the buffer being filled) must each break it (emulation.c).
 * `test_mma_layout --harness` instead prints what tests/kernels/attention.c's bf16 tolerances are
 * derived from (harness.c). CMake builds every file of tests/mma_layout/ into test_mma_layout. */
#include "../check.h"
#include "mma_test.h"

#include <string.h>

/* check.h's counters are this file's: the other files' EXPECTs count here */
void expect_true(const char *file, int line, const char *expr, bool ok) {
    check_true(file, line, expr, ok);
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--harness") == 0) {
        harness();
        return 0;
    }
    test_fragments();
    test_ldmatrix();
    test_plan();
    test_pipeline();
    test_nan_key();
    test_emulation();
    test_orders();
    test_orders_emulated();
    return check_exit("test_mma_layout");
}
