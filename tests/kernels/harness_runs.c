/* harness_runs.c: a run of a case on one device: the buffers its run function places in the
 * device's memory (guards around each, outputs starting as NaN), the kernel's results read back
 * and the guards and inputs checked; and the seeded inputs the case files make. The comparisons
 * between runs are harness.c's. */
#include "harness.h"

/* ---- buffers --------------------------------------------------------------------------------- */

enum { GUARD_BYTES = 256 };

/* Every word of a guard: a NaN that no kernel computes (a double guard reads as a NaN too). */
static const uint32_t GUARD_WORD = 0x7fa5a5a5u;

void call(run *r, lw_status st) {
    if (st != LW_OK && r->st == LW_OK) {
        r->st = st;
        snprintf(r->error, sizeof r->error, "%s", lw_last_error());
    }
}

static void *place(run *r, const char *what, role kind, elem_type type, int64_t n,
                   const void *start) {
    if (r->nb == MAX_BUFFERS) {
        fprintf(stderr, "test_kernels: more than %d buffers in one run\n", MAX_BUFFERS);
        exit(1);
    }
    buffer *b = &r->b[r->nb++];
    const size_t es = elem_size(type), data = (size_t)n * es;
    const int64_t bytes = 2 * GUARD_BYTES + (int64_t)data;
    *b = (buffer){.what = what, .role = kind, .type = type, .n = n};
    b->start = malloc(data + es);
    b->got = malloc(data + es);
    if (start != NULL && !(kind == ACCUMULATED && r->zeroed))
        memcpy(b->start, start, data);
    else if (kind == ACCUMULATED || type == I32) /* from zeros; ids start at 0x7f7f7f7f */
        memset(b->start, kind == ACCUMULATED ? 0 : 0x7f, data);
    else
        for (int64_t i = 0; i < n; i++)
            type == F32       ? (void)(((float *)b->start)[i] = NAN)
            : bf16_type(type) ? (void)(((uint16_t *)b->start)[i] = BF16_UNWRITTEN)
                              : (void)(((double *)b->start)[i] = NAN);
    char *host = malloc((size_t)bytes);
    for (int64_t i = 0; i < GUARD_BYTES / 4; i++) {
        memcpy(host + 4 * i, &GUARD_WORD, 4);
        memcpy(host + GUARD_BYTES + data + 4 * i, &GUARD_WORD, 4);
    }
    memcpy(host + GUARD_BYTES, b->start, data);
    lw_status st = lw_device_alloc(r->device, bytes, (void **)&b->alloc);
    if (st == LW_OK) st = lw_device_copy(r->s, b->alloc, host, bytes, LW_COPY_HOST_TO_DEVICE);
    free(host);
    if (st != LW_OK) { /* a kernel would be handed a bad pointer: nothing sensible follows */
        fprintf(stderr, "test_kernels: %s: placing %s: %s\n", lw_device_name(r->device), what,
                lw_last_error());
        exit(1);
    }
    return b->alloc + GUARD_BYTES;
}

/* A buffer the kernel writes: placed, and compared between runs as how says. */
static void *place_measured(run *r, const char *what, role kind, elem_type type, int64_t n,
                            const void *start, measure how) {
    void *p = place(r, what, kind, type, n, start);
    r->b[r->nb - 1].how = how;
    return p;
}

const float *input(run *r, const float *host, int64_t n) {
    return place(r, "an input", INPUT, F32, n, host);
}
const int32_t *input_ids(run *r, const int32_t *host, int64_t n) {
    return place(r, "an input", INPUT, I32, n, host);
}
float *output(run *r, const char *what, int64_t n, measure how) {
    return place_measured(r, what, WRITTEN, F32, n, NULL, how);
}
int32_t *output_ids(run *r, const char *what, int64_t n) {
    return place_measured(r, what, WRITTEN, I32, n, NULL, bits());
}
const uint16_t *input_bf16(run *r, const uint16_t *host, int64_t n) {
    return place(r, "an input", INPUT, BF16, n, host);
}
uint16_t *output_bf16(run *r, const char *what, int64_t n) {
    return place_measured(r, what, WRITTEN, BF16, n, NULL, bits());
}
uint16_t *output_bf16_values(run *r, const char *what, int64_t n, measure how) {
    return place_measured(r, what, WRITTEN, BF16V, n, NULL, how);
}
float *updated(run *r, const char *what, const float *start, int64_t n, measure how) {
    return place_measured(r, what, UPDATED, F32, n, start, how);
}
uint16_t *updated_bf16(run *r, const char *what, const uint16_t *start, int64_t n, measure how) {
    return place_measured(r, what, UPDATED, BF16V, n, start, how);
}
uint16_t *accumulated_bf16(run *r, const char *what, const uint16_t *start, int64_t n,
                           measure how) {
    return place_measured(r, what, ACCUMULATED, BF16V, n, start, how);
}
float *accumulated(run *r, const char *what, const float *start, int64_t n, measure how) {
    return place_measured(r, what, ACCUMULATED, F32, n, start, how);
}
double *accumulated_f64(run *r, const char *what, const double *start, int64_t n, measure how) {
    return place_measured(r, what, ACCUMULATED, F64, n, start, how);
}
float *scratch(run *r, int64_t n) { return place(r, "scratch", SCRATCH, F32, n, NULL); }

void result_of(run *r, const char *what, double value, measure how) {
    if (r->nres < MAX_RESULTS) r->res[r->nres++] = (result){what, value, how};
}

const void *got_of(const run *r, const char *what) {
    for (int i = 0; i < r->nb; i++)
        if (r->b[i].role != INPUT && strcmp(r->b[i].what, what) == 0) return r->b[i].got;
    return NULL;
}
double result_named(const run *r, const char *what) {
    for (int i = 0; i < r->nres; i++)
        if (strcmp(r->res[i].what, what) == 0) return r->res[i].value;
    return NAN;
}

void run_free(run *r) {
    for (int i = 0; i < r->nb; i++)
        free(r->b[i].start), free(r->b[i].got);
    r->nb = 0;
}

/* ---- a run ---------------------------------------------------------------------------------- */

/* The kernel, then every buffer read back and checked. */
void run_on(run *r, const kernel_case *k, lw_device *d, lw_matmul matmul, bool zeroed) {
    *r = (run){.device = d, .s = lw_device_stream(d), .matmul = matmul, .zeroed = zeroed};
    EXPECT_OK(lw_device_set_matmul(d, matmul));
    k->fn(r, k->args);
    call(r, lw_stream_synchronize(r->s));
    EXPECT_OK(lw_device_set_matmul(d, LW_MATMUL_FP32));
    for (int i = 0; i < r->nb; i++) {
        buffer *b = &r->b[i];
        const size_t data = (size_t)b->n * elem_size(b->type);
        char *host = malloc(2 * GUARD_BYTES + data);
        EXPECT_OK(lw_device_copy(r->s, host, b->alloc, 2 * GUARD_BYTES + (int64_t)data,
                                 LW_COPY_DEVICE_TO_HOST));
        lw_device_free(d, b->alloc);
        memcpy(b->got, host + GUARD_BYTES, data);
        int64_t spoilt = 0;
        for (int64_t w = 0; w < GUARD_BYTES / 4; w++)
            spoilt += memcmp(host + 4 * w, &GUARD_WORD, 4) != 0;
        for (int64_t w = 0; w < GUARD_BYTES / 4; w++)
            spoilt += memcmp(host + GUARD_BYTES + data + 4 * w, &GUARD_WORD, 4) != 0;
        free(host);
        if (r->st != LW_OK) continue;
        if (spoilt > 0)
            failed(k, r, "%s (%lld elements): %lld words of its guards written", b->what,
                   (long long)b->n, (long long)spoilt);
        else if (b->role == INPUT && memcmp(b->got, b->start, data) != 0)
            failed(k, r, "an input of %lld elements was written", (long long)b->n);
        else
            passed();
    }
}

/* ---- seeded inputs --------------------------------------------------------------------------- */

float *scaled_random(int64_t n, float scale, float offset) {
    float *x = random_floats(n);
    for (int64_t i = 0; i < n; i++)
        x[i] = offset + scale * x[i];
    return x;
}

float *prefill(int64_t n) { return scaled_random(n, 0.01f, 0.0f); }

int32_t *random_ids(int64_t n, int64_t bound) {
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++)
        ids[i] = random_below(bound);
    return ids;
}

float *cpu_array(int64_t n) { return malloc(sizeof(float) * (size_t)(n > 0 ? n : 1)); }

bool any_nan(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (isnan(x[i])) return true;
    return false;
}
