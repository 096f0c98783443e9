/* cross_entropy_reference.h: the LM head's softmax cross-entropy in float64, with or without the
 * logits' softcap, on one rank or as one rank's share of a vocabulary, and its gradients: what
 * the capped cases of cross_entropy.c are held to (the code: cross_entropy_reference.c). */
#ifndef LW_TEST_KERNELS_CROSS_ENTROPY_REFERENCE_H
#define LW_TEST_KERNELS_CROSS_ENTROPY_REFERENCE_H

#include "harness.h"

/* The head of this rank: rows [first, first + v) of a vocabulary `vocab` (one rank: first 0,
 * vocab v; rows past vocab are padding), h [n, c], w [v, c], the logits capped at cap (0: none).
 * peer: NULL on one rank, else the other ranks' statistics [3, n] (their largest logit, their
 * sum of exp(logit - max), the target's logit where they hold it), constants of the loss. The
 * loss is loss_scale times the mean over rows with a target in [0, vocab). */
typedef struct {
    int64_t n, c, v, first, vocab;
    double cap, loss_scale;
    const float *h, *w, *peer;
    const int32_t *targets;
} ce_reference;

/* The loss at the head's h and w; each row's loss and log-sum-exp over the whole vocabulary
 * (losses, lse: [n], or NULL) and this rank's statistics (stats [3, n], or NULL). */
double ce_reference_forward(const ce_reference *p, double *losses, double *lse, double *stats);
/* The loss's gradients dh [n, c] and dw [v, c] in float64: by central differences of
 * ce_reference_forward when the head is small (n v c <= 1e5), else by the formula (the
 * softmax's gradient times the cap's slope). */
void ce_reference_grads(const ce_reference *p, double *dh, double *dw);

#endif
