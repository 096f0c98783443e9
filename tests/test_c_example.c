/* test_c_example.c: the example of docs/c_api.md, as a C user writes it against the installed
 * header (#include <lw.h>, pkg-config's -I.../include/lwopt): one rank on the CPU trains a
 * matrix (Muon) and a bias (AdamW) towards a target, and checks that the loss fell. */
#include <lw.h>
#include <stdio.h>

/* Prints the failed call and lw_last_error() ("object: what went wrong"), and fails. */
#define TRY(call)                                                                                  \
    do {                                                                                           \
        if ((call) != LW_OK) {                                                                     \
            fprintf(stderr, "%s: %s\n", #call, lw_last_error());                                   \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

int main(void) {
    /* Two parameters: a 16 x 16 matrix that Muon updates and a 16-vector for AdamW. */
    const lw_param_spec specs[2] = {
        {.name = "w", .ndim = 2, .shape = {16, 16}, .optimizer = LW_OPTIMIZER_MUON},
        {.name = "b", .ndim = 1, .shape = {16}},
    };
    lw_layout *layout = NULL;
    lw_comm *comm = NULL;
    lw_buffers *buffers = NULL;
    lw_optimizer *opt = NULL;
    int status = 1;
    double first = -1.0, loss = 0.0;

    /* Every options struct starts from its defaults function (which sets its size). */
    lw_layout_options lo = lw_layout_defaults();
    TRY(lw_layout_new(specs, 2, &lo, &layout));
    TRY(lw_comm_self(&comm)); /* one rank; lw_comm_init for the ranks of an MPI job */
    lw_buffers_options bo = lw_buffers_defaults();
    TRY(lw_buffers_new(layout, comm, NULL, &bo, &buffers));
    lw_optimizer_options oo = lw_optimizer_defaults();
    oo.clip = 1.0f;
    TRY(lw_optimizer_new(buffers, &oo, &opt));
    TRY(lw_optimizer_set_hparams(opt, 0, 0.05f, 0.0f));

    /* loss = 0.5 * sum (p - 0.1)^2 over every element; its gradient is p - 0.1 */
    for (int step = 0; step < 30; step++) {
        TRY(lw_buffers_zero_grad(buffers));
        loss = 0.0;
        for (int32_t p = 1; p >= 0; p--) { /* backprop order: the last parameter first */
            float *w, *g;
            int64_t n = p == 0 ? 16 * 16 : 16;
            TRY(lw_buffers_acquire(buffers, p, LW_PASS_BACKWARD, false));
            TRY(lw_buffers_param(buffers, p, &w));
            TRY(lw_buffers_grad(buffers, p, &g));
            for (int64_t i = 0; i < n; i++) {
                g[i] = w[i] - 0.1f;
                loss += 0.5 * (double)g[i] * g[i];
            }
            TRY(lw_buffers_release(buffers, p));
            TRY(lw_buffers_grad_ready(buffers, p));
        }
        TRY(lw_buffers_end_backward(buffers));
        lw_step_result r;
        TRY(lw_optimizer_step(opt, &r)); /* gradient sync, norm, clip, Muon, AdamW */
        TRY(lw_buffers_finish_param_sync(buffers, -1));
        if (first < 0.0) first = loss;
    }
    printf("lwopt %s: loss %.4f -> %.4f\n", lw_version(), first, loss);
    status = loss < 0.5 * first ? 0 : 1;
done:
    lw_optimizer_free(opt);
    lw_buffers_free(buffers);
    lw_comm_free(comm);
    lw_layout_free(layout);
    return status;
}
