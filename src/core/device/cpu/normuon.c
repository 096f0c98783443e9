/* normuon.c: the CPU's reference of NorMuon's variance reduction (docs/algorithms.md section 6):
 * the per-line second moment of an orthogonalised update, and the update normalised by it with
 * its Frobenius norm kept. Where it runs in a step is the optimizer's (optim/normuon.c). */
#include "device/cpu/cpu.h"

#include <math.h>

/* A line's sum of squares: a row's are contiguous, a column's cols apart. */
static double line_squares(const float *x, int64_t line, bool by_row, int64_t rows, int64_t cols) {
    double s = 0.0;
    if (by_row) return lwi_cpu_sum_squares(x + line * cols, cols);
    for (int64_t r = 0; r < rows; r++)
        s += (double)x[r * cols + line] * x[r * cols + line];
    return s;
}

/* The means are floats, as nanochat's fp32 mean is; the norms sum them in double. */
lw_status lwi_cpu_normuon_variance(lw_stream *stream, float *x, float *v, int64_t rows,
                                   int64_t cols, float beta2, float floor, double *work) {
    (void)stream;
    const bool by_row = rows >= cols;
    const int64_t lines = by_row ? rows : cols, reduced = by_row ? cols : rows;
    const float rate = 1.0f - beta2;
    double norm_sq = 0.0, scaled_sq = 0.0;
    for (int64_t l = 0; l < lines; l++) {
        const float mean = (float)(line_squares(x, l, by_row, rows, cols) / (double)reduced);
        v[l] = v[l] + rate * (mean - v[l]);
        const float step = 1.0f / sqrtf(v[l] > floor ? v[l] : floor);
        work[l] = step;
        norm_sq += (double)mean * (double)reduced;
        scaled_sq += (double)mean * (double)reduced * (double)step * (double)step;
    }
    const double scaled = sqrt(scaled_sq);
    const float ratio = (float)(sqrt(norm_sq) / (scaled > floor ? scaled : (double)floor));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            x[r * cols + c] *= (float)work[by_row ? r : c] * ratio;
    return LW_OK;
}
