/* muon_rescale.c: the CPU's reference of Muon's rescalings around Newton-Schulz (docs/algorithms.md
 * section 6): row equilibration of a batch of updates before it, renormalisation of the batch's
 * results after it, and the step with a weight decay at the step (cautious or scaled). Which of
 * them run, and with what numbers, is the optimizer's choice (optim/muon.c). */
#include "device/cpu/cpu.h"
#include "device/cpu/pool.h"

#include <math.h>

typedef struct {
    const float *u;
    float *x;
    int64_t rows, cols;
    float norm_floor;
    double *work;
} equilibrate_job;

/* A part's matrices: the row norms into work (rows doubles per matrix), then t = ||U||_F /
 * sqrt(rows) from their sum, then each row scaled by t over its norm floored. A zero row stays
 * zero (its norm is floored, not divided by); a NaN anywhere makes t, and so the matrix, NaN. */
static void equilibrate_range(void *ctx, int64_t begin, int64_t end, int32_t part) {
    (void)part;
    const equilibrate_job *j = ctx;
    const int64_t rows = j->rows, cols = j->cols, n = rows * cols;
    for (int64_t b = begin; b < end; b++) {
        const float *u = j->u + b * n;
        float *x = j->x + b * n;
        double *norms = j->work + b * (rows + 1), total = 0.0;
        for (int64_t r = 0; r < rows; r++) {
            norms[r] = lwi_cpu_sum_squares(u + r * cols, cols);
            total += norms[r];
        }
        const double target = sqrt(total) / sqrt((double)rows);
        for (int64_t r = 0; r < rows; r++) {
            const double norm = sqrt(norms[r]);
            const float scale = (float)(target / (norm > j->norm_floor ? norm : j->norm_floor));
            for (int64_t c = 0; c < cols; c++)
                x[r * cols + c] = u[r * cols + c] * scale;
        }
    }
}

/* Matrices side by side on the pool's threads, as Newton-Schulz's batches go. */
lw_status lwi_cpu_muon_equilibrate(lw_stream *stream, const float *u, float *x, int64_t batch,
                                   int64_t rows, int64_t cols, float norm_floor, double *work) {
    (void)stream;
    equilibrate_job j = {u, x, rows, cols, norm_floor, work};
    lwi_cpu_parallel(batch, 1, equilibrate_range, &j);
    return LW_OK;
}

lw_status lwi_cpu_muon_renormalize(lw_stream *stream, float *x, int64_t batch, int64_t n,
                                   float target, float norm_floor, double *work) {
    (void)stream, (void)work;
    for (int64_t b = 0; b < batch; b++) {
        float *xb = x + b * n;
        const double norm = sqrt(lwi_cpu_sum_squares(xb, n));
        const float scale = (float)((double)target / (norm > norm_floor ? norm : norm_floor));
        for (int64_t i = 0; i < n; i++)
            xb[i] *= scale;
    }
    return LW_OK;
}

/* The mask compares the update and the weight before the step; a NaN in either fails it, so
 * the decay skips the element and the NaN reaches w through the step. */
lw_status lwi_cpu_muon_decay_step(lw_stream *stream, float *w, const float *x, int64_t n,
                                  float step, float decay, bool cautious) {
    (void)stream;
    for (int64_t i = 0; i < n; i++) {
        const float wi = w[i], xi = x[i];
        const float d = !cautious || xi * wi >= 0.0f ? decay * wi : 0.0f;
        w[i] = wi - (step * xi + d);
    }
    return LW_OK;
}
