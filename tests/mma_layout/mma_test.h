/* mma_test.h: what the files of test_mma_layout share: the ISA's hardware (ptx.c), the emulated
 * warp's pieces and faults (warp.c), the emulated kernels (forward.c, backward.c), double attention
 * (reference.c), the checks (layouts.c, emulation.c, orders.c), --harness (harness.c). A file
 * here includes no other test header: check.h's counters belong to driver.c, so checks count
 * through EXPECT. */
#ifndef LW_TEST_MMA_LAYOUT_MMA_TEST_H
#define LW_TEST_MMA_LAYOUT_MMA_TEST_H

#include "cuda/mma_layout.h"

#include <stdbool.h>
#include <stdint.h>

/* ---- ptx.c: the hardware, as the PTX ISA describes it ---------------------------------------- */

int ptx_a_row(int lane, int i);
int ptx_a_col(int lane, int i);
int ptx_b_row(int lane, int i);
int ptx_b_col(int lane, int i);
int ptx_c_row(int lane, int i);
int ptx_c_col(int lane, int i);
uint16_t half_of(uint32_t reg, int h);
void ptx_ldmatrix_x4(uint32_t r[32][4], const uint16_t *tile, int hd, const int rows[32],
                     const int cols[32], bool trans);
void ptx_mma(float *d[32], uint32_t *a[32], uint32_t b[32][4], int pair);

/* ---- warp.c: a warp's pieces, and the faults the comparisons must catch ---------------------- */

enum { FAULT_NONE, FAULT_B_HALVES, FAULT_PACK, FAULT_MASK, FAULT_QUAD, FAULT_BUFFER, FAULT_COUNT };
extern int fault; /* the one injected: emulation.c sets it, the pieces and forward.c read it */
/* the grids' block order the emulated kernels run in (LWC_FA_ORDER_*): orders.c sets it */
extern int emu_order;

static const float LOG2E = 1.44269504088896341f;

enum { MAX_ND = 16, MAX_NT = 8, MAX_KD = 8 }; /* hd 128: 16 C tiles of output, 8 k steps */

void emu_load_block(uint32_t r[32][4], const uint16_t *tile, int row, int col, int kind, int hd);
void emu_mma(float (*d)[4], int tiles, int j, uint32_t (*a)[4], int a_stride, uint32_t b[32][4],
             int pair);
void emu_quad_max(float v[32][2]);
void emu_quad_sum(float v[32][2]);
void emu_stage(uint16_t *tile, const float *src, int64_t stride, int r0, int rows, int64_t t,
               int hd);
/* the pipelined variant: bf16 (its bits) copied in 16-byte chunks, zeros past t; the buffer the
 * n-th step computes on (the other one with FAULT_BUFFER); a tensor's bf16 bits */
void emu_stage_async(uint16_t *tile, const uint16_t *src, int64_t stride, int r0, int rows,
                     int64_t t, int hd);
int emu_buffer(int n);
/* the kernels' key_step: the step's K and V tiles; q16 (qkv's bf16 bits) given: pipelined */
void emu_key_step(const uint16_t **kb, const uint16_t **vb, uint16_t *ks, uint16_t *vs,
                  const float *qkv, const uint16_t *q16, int64_t k_at, int64_t v_at, int64_t c3,
                  int step, int first, int last, int64_t t, int hd);
uint16_t *bf16_bits_of(const float *x, int64_t n);
void emu_score_pair(float (*s)[4], float (*dp)[4], const uint16_t *x, const uint16_t *w,
                    const uint16_t *y, const uint16_t *z, int warp, int nt, int hd);
void emu_accumulate(float (*acc)[4], float (*p)[MAX_NT][4], const uint16_t *tile, int nt, int hd);
uint16_t *smem_of(int hd, int kernel, int variant);

/* ---- forward.c, backward.c: the kernels' tile loops, the heads bh < heads ------------------- *
 * qkv[b, t, c + 2 nkv hd]: nh query heads reading nkv KV heads (query head h KV head h / (nh /
 * nkv)), a window (0: none), as lw_model_kernels.h says; heads a multiple of nh / nkv, so that
 * a KV head's gradient is over query heads all emulated or all left out. variant: mma_layout.h's
 * LWC_FA_SYNC or LWC_FA_PIPELINED (qkv then bf16 values, as the GPU's bf16 qkv). */

void emulate_forward(float *out, float *lse, float *rowmax, const float *qkv, int64_t b, int64_t t,
                     int64_t c, int64_t nh, int64_t nkv, int window, int64_t heads, int variant);
void emulate_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                      const float *lse, int64_t b, int64_t t, int64_t c, int64_t nh, int64_t nkv,
                      int window, int64_t heads, int variant);

/* ---- reference.c: double-precision attention, and each output's bound ------------------------ */

/* out, lse, and (dout given) dqkv = d0 + the gradient, of the heads bh < heads; the bounds
 * (tol_* NULL: not wanted) of reference.c's header for inputs that are bf16 already. */
typedef struct {
    double *out, *lse, *dqkv;
    double *tol_out, *tol_dqkv;
    double *rowmax; /* each row's largest scaled score (optional) */
} reference;

void reference_attention(reference *ref, const float *qkv, const float *dout, const float *d0,
                         int64_t b, int64_t t, int64_t c, int64_t nh, int64_t nkv, int window,
                         int64_t heads);
/* n values scale * [-1, 1) from the one seeded sequence (rounded to bf16 if bf16) */
float *random_array(int64_t n, float scale, bool bf16);

/* ---- the checks, run by driver.c in this order; --harness ------------------------------------ */

void test_fragments(void); /* layouts.c */
void test_ldmatrix(void);
void test_plan(void);
void test_pipeline(void);
void test_nan_key(void); /* emulation.c */
void test_emulation(void);
void test_orders(void); /* orders.c */
void test_orders_emulated(void);
void harness(void); /* harness.c */

/* check.h's CHECK, counted in driver.c */
void expect_true(const char *file, int line, const char *expr, bool ok);
#define EXPECT(cond) expect_true(__FILE__, __LINE__, #cond, (cond))

#endif
