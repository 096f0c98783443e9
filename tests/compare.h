/* compare.h: how the tests measure a result against a reference, shared by the CPU and GPU
 * tests so that the measure itself runs (and is checked) on every machine. Equal values differ
 * by nothing, infinities included (a kernel that writes -inf where the reference has -inf is
 * right: |-inf - -inf| would be NaN); a NaN on either side is a difference that no tolerance
 * accepts; a floor taken from a tensor's scale ignores its non-finite values. */
#ifndef LW_TEST_COMPARE_H
#define LW_TEST_COMPARE_H

#include "check.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* |got - ref| / max(|ref|, floor); 0 when equal (infinities of one sign too), NaN when either is
 * NaN, infinite when only one is infinite or they are infinities of opposite signs. */
static inline double compare_rel(double got, double ref, double floor) {
    if (got == ref) return 0.0;
    if (isnan(got) || isnan(ref)) return NAN;
    if (isinf(got) || isinf(ref)) return INFINITY;
    return fabs(got - ref) / fmax(fabs(ref), floor);
}

/* The worst compare_rel over n elements; NaN as soon as one is NaN (so `worst <= tol` fails). */
static inline double max_rel(const float *got, const float *ref, int64_t n, double floor) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = compare_rel(got[i], ref[i], floor);
        if (isnan(d)) return d;
        if (d > m) m = d;
    }
    return m;
}

/* max |x| over the finite elements (0 when there are none): a floor at the tensor's scale. */
static inline double largest_finite(const float *x, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(x[i])) m = fmax(m, fabs((double)x[i]));
    return m;
}

/* max_rel within tol; said on stderr when not. */
static inline bool close_to(const char *what, const char *shape, const float *got,
                            const float *ref, int64_t n, double tol, double floor) {
    const double worst = max_rel(got, ref, n, floor);
    if (!(worst <= tol))
        fprintf(stderr, "%s (%s): worst relative difference %.3g, tolerance %.1g\n", what, shape,
                worst, tol);
    return worst <= tol;
}

/* The scale the maxima and target logits of n rows of a vocabulary shard's statistics (below)
 * are judged at: the largest finite of each, added. */
static inline double partial_stats_scale(const float *ref, int64_t n) {
    return fmax(largest_finite(ref, n) + largest_finite(ref + 2 * n, n), 1e-30);
}

/* A vocabulary shard's softmax statistics (lw_cross_entropy_partial_forward: n row maxima, n
 * sums of exponentials, n target logits) against a reference computed elsewhere: the maxima and
 * target logits are logits, compared at the scale of the largest finite one (returned: the worse
 * of the two); the sums relative (in *sums). A shard of padding alone has maxima -inf, sums and
 * target logits 0 on both sides, which compare as equal; a NaN anywhere is NaN. */
static inline double partial_stats_distance(const float *got, const float *ref, int64_t n,
                                            double *sums) {
    const double big = partial_stats_scale(ref, n);
    const double max = max_rel(got, ref, n, big);
    const double target = max_rel(got + 2 * n, ref + 2 * n, n, big);
    *sums = max_rel(got + n, ref + n, n, 1e-30);
    return isnan(max) || isnan(target) ? NAN : fmax(max, target);
}

/* The statistics within 1e-5 each (the GPU's against the CPU's); said on stderr when not. */
static inline bool partial_stats_close(const char *shape, const float *got, const float *ref,
                                       int64_t n) {
    double sums = 0;
    const double logits = partial_stats_distance(got, ref, n, &sums);
    const bool ok = logits <= 1e-5 && sums <= 1e-5;
    if (!ok)
        fprintf(stderr, "partial head (%s): maxima and target logits %.3g of their scale, sums "
                "%.3g relative, tolerance 1e-5\n", shape, logits, sums);
    return ok;
}

#endif
