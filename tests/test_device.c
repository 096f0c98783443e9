/* test_device.c: the device layer on the CPU: names, memory (zeroed, set, copies), streams and
 * events, kernels on an explicit stream equal to the NULL stream's, Muon's workspace; and the
 * loader: without a CUDA library lw_has_cuda() is false and asking for "cuda" names what is
 * missing; with LWOPT_CUDA_LIB naming the test's fake library (ctest test_device_plugin), the
 * core runs the library's table and a kernel it lacks fails by name. The CPU's lw_device_info. */
#include "check.h"

#include <stdlib.h>

static void test_cpu_device(void) {
    lw_device *cpu = NULL, *again = NULL;
    CHECK_OK(lw_device_get("cpu", &cpu));
    CHECK_OK(lw_device_get("cpu", &again));
    CHECK(cpu == again && cpu == lw_device_cpu());
    CHECK(strcmp(lw_device_name(cpu), "cpu") == 0);
    CHECK(lw_device_is_host(cpu));
    CHECK(lw_stream_device(lw_device_stream(cpu)) == cpu);
    CHECK(lw_stream_device(NULL) == cpu);
    CHECK_FAILS(lw_device_get("tpu", &again), LW_ERR_INVALID, "unknown device 'tpu'");
    CHECK_FAILS(lw_device_get("cuda:x", &again), LW_ERR_INVALID, "cpu, cuda or cuda:N");
    /* the matmul setting: fp32 unless set, kept, and a value without a name refused */
    CHECK_EQ(lw_device_matmul(cpu), LW_MATMUL_FP32);
    CHECK_OK(lw_device_set_matmul(cpu, LW_MATMUL_TF32));
    CHECK_EQ(lw_device_matmul(cpu), LW_MATMUL_TF32);
    CHECK_FAILS(lw_device_set_matmul(cpu, (lw_matmul)7), LW_ERR_INVALID, "matmul precision 7");
    CHECK_EQ(lw_device_matmul(cpu), LW_MATMUL_TF32);
    CHECK_FAILS(lw_device_set_matmul(cpu, (lw_matmul)3), LW_ERR_INVALID, "or bf16 (2)");
    CHECK_OK(lw_device_set_matmul(cpu, LW_MATMUL_BF16));
    CHECK_EQ(lw_device_matmul(cpu), LW_MATMUL_BF16);
    /* the CPU computes fp32 whatever is set: 1 + 2^-12 would round to 1 in bf16 (8 bits) */
    const float x1 = 1.0f + 0x1p-12f, w1 = 3.0f;
    float y1 = 0.0f;
    CHECK_OK(lw_linear_forward(NULL, &y1, LW_DTYPE_F32, &x1, LW_DTYPE_F32, &w1, LW_DTYPE_F32, NULL,
                               1, 1, 1));
    CHECK(y1 == x1 * w1 && y1 != 3.0f);
    CHECK_OK(lw_device_set_matmul(cpu, LW_MATMUL_FP32));
    CHECK_EQ(lw_device_matmul(cpu), LW_MATMUL_FP32);

    float *a = NULL, *b = NULL;
    CHECK_OK(lw_device_alloc(cpu, 40, (void **)&a));
    CHECK_OK(lw_device_alloc(cpu, 40, (void **)&b));
    CHECK(a[0] == 0.0f && a[9] == 0.0f && ((uintptr_t)a & 63) == 0);
    void *none = NULL;
    CHECK_FAILS(lw_device_alloc(cpu, -1, &none), LW_ERR_INVALID, "-1 bytes");
    CHECK(none == NULL);
    float host[10];
    for (int i = 0; i < 10; i++)
        host[i] = (float)i;
    lw_stream *s = NULL;
    CHECK_OK(lw_stream_new(cpu, &s));
    CHECK_OK(lw_device_copy(s, a, host, sizeof host, LW_COPY_HOST_TO_DEVICE));
    CHECK_OK(lw_device_copy(s, b, a, sizeof host, LW_COPY_DEVICE_TO_DEVICE));
    CHECK_OK(lw_device_set(s, b, 0, 8));
    float back[10];
    CHECK_OK(lw_device_copy(s, back, b, sizeof back, LW_COPY_DEVICE_TO_HOST));
    CHECK(back[0] == 0.0f && back[1] == 0.0f && back[2] == 2.0f && back[9] == 9.0f);
    CHECK_FAILS(lw_device_copy(s, NULL, a, 4, LW_COPY_DEVICE_TO_DEVICE), LW_ERR_INVALID,
                "copy of 4 bytes");
    CHECK_FAILS(lw_device_set(s, b, 256, 4), LW_ERR_INVALID, "set of 4 bytes to 256");

    /* events on the CPU are complete once recorded; waits are no-ops */
    lw_event *e = NULL;
    CHECK_OK(lw_event_new(cpu, &e));
    CHECK_OK(lw_event_record(e, s));
    bool done = false;
    CHECK_OK(lw_event_query(e, &done));
    CHECK(done);
    CHECK_OK(lw_stream_wait(NULL, e));
    CHECK_OK(lw_event_synchronize(e));
    CHECK_OK(lw_stream_synchronize(s));

    /* the same kernel on an explicit stream and on NULL */
    CHECK_OK(lw_vec_scale(s, a, 10, 2.0f));
    CHECK_OK(lw_vec_scale(NULL, b, 10, 2.0f));
    CHECK(a[9] == 18.0f && b[9] == 18.0f && b[0] == 0.0f);

    /* Muon's workspace is device memory, found again on the next call */
    lw_muon *m = NULL;
    CHECK_OK(lw_muon_new(NULL, &m));
    float c[10];
    CHECK_OK(lw_muon_orthogonalize(m, s, a, b, 2, 5));
    CHECK_OK(lw_muon_orthogonalize(m, NULL, a, c, 2, 5));
    CHECK(memcmp(b, c, sizeof c) == 0 && b[9] != 0.0f);
    lw_muon_free(m);

    lw_event_free(e);
    lw_stream_free(s);
    lw_stream_free(lw_device_stream(cpu)); /* the default stream is never freed */
    lw_device_free(cpu, a);
    lw_device_free(cpu, b);
}

/* The CPU's info: the machine as sysconf sees it. */
static void test_cpu_info(void) {
    lw_device_info info;
    memset(&info, 0x5a, sizeof info); /* every field must be written */
    CHECK_OK(lw_device_get_info(lw_device_cpu(), &info));
    CHECK(strcmp(info.name, "cpu") == 0);
    CHECK(info.total_bytes >= ((int64_t)64 << 20));
    CHECK(info.free_bytes > 0 && info.free_bytes <= info.total_bytes);
    CHECK_EQ(info.capability, 0);
    CHECK(info.processors >= 1 && info.processors <= 65536);
    CHECK(info.software[0] == '\0');
    CHECK_FAILS(lw_device_get_info(NULL, &info), LW_ERR_INVALID, "must not be NULL");
}

/* Without a GPU. Where the CUDA library was not built the loader names the places it looked;
 * where it was (LWOPT_TEST_CUDA_LIB, set by CMake), it must load and say why there is no GPU:
 * no usable driver, or a driver that sees none. On a machine with a GPU, "cuda" must work
 * instead (tests/test_cuda.c checks it). */
static void test_without_cuda(void) {
    lw_device *d = (lw_device *)1;
    if (lw_has_cuda()) {
        printf("test_device: a GPU is here; checking that \"cuda\" opens instead\n");
        CHECK_OK(lw_device_get("cuda", &d));
        CHECK(d != NULL && !lw_device_is_host(d));
        return;
    }
#ifdef LWOPT_TEST_CUDA_LIB
    CHECK(lw_device_get("cuda", &d) == LW_ERR_UNSUPPORTED);
    const char *why = lw_last_error();
    printf("test_device: %s is built; without a GPU: %s\n", LWOPT_TEST_CUDA_LIB, why);
    CHECK(strstr(why, "CUDA is not available: ") != NULL);
    CHECK(strstr(why, "could not be loaded") == NULL); /* the library itself loads */
    CHECK(strstr(why, "no usable NVIDIA driver") != NULL ||
          strstr(why, "the driver sees no GPU") != NULL);
    CHECK(d == NULL);
    /* a second ask, for another ordinal, says the same */
    CHECK_FAILS(lw_device_get("cuda:1", &d), LW_ERR_UNSUPPORTED, "CUDA is not available: ");
    CHECK(!lw_has_cuda());
#else
    CHECK_FAILS(lw_device_get("cuda", &d), LW_ERR_UNSUPPORTED,
                "liblwopt_cuda.so could not be loaded");
    CHECK(d == NULL);
    CHECK_FAILS(lw_device_get("cuda:1", &d), LW_ERR_UNSUPPORTED, "LWOPT_CUDA_LIB");
#endif
}

static void test_fake_library(void) {
    CHECK(lw_has_cuda());
    lw_device *d = NULL, *again = NULL;
    CHECK_OK(lw_device_get("cuda", &d));
    CHECK_OK(lw_device_get("cuda:0", &again));
    CHECK(d != NULL && d == again);
    CHECK(strcmp(lw_device_name(d), "cuda:0") == 0);
    CHECK(!lw_device_is_host(d));
    CHECK_FAILS(lw_device_get("cuda:3", &again), LW_ERR_UNSUPPORTED, "no GPU 3");
    float *x = NULL, host[4] = {1, 2, 3, 4}, back[4];
    CHECK_OK(lw_device_alloc(d, sizeof host, (void **)&x));
    lw_stream *s = lw_device_stream(d);
    CHECK_OK(lw_device_copy(s, x, host, sizeof host, LW_COPY_HOST_TO_DEVICE));
    CHECK_OK(lw_vec_scale(s, x, 4, 0.5f));
    CHECK_OK(lw_device_copy(s, back, x, sizeof back, LW_COPY_DEVICE_TO_HOST));
    CHECK(back[0] == 0.5f && back[3] == 2.0f);
    CHECK_FAILS(lw_vec_add(s, x, x, x, 4), LW_ERR_UNSUPPORTED, "cuda:0 has no vec_add kernel");
    lw_event *e = NULL;
    CHECK_OK(lw_event_new(d, &e));
    CHECK_FAILS(lw_event_record(e, NULL), LW_ERR_INVALID, "cannot be recorded on cpu");
    /* buffers of device memory need a communicator that moves it (NCCL) */
    lw_param_spec spec = {.name = "w", .ndim = 2, .shape = {4, 4, 0, 0}, .dtype = LW_DTYPE_F32,
                          .grad_dtype = LW_DTYPE_F32, .optimizer = LW_OPTIMIZER_MUON};
    lw_layout *l = NULL;
    lw_comm *c = NULL;
    lw_buffers *bs = NULL;
    CHECK_OK(lw_layout_new(&spec, 1, NULL, &l));
    CHECK_OK(lw_comm_self(&c));
    lw_buffers_options bo = lw_buffers_defaults();
    bo.device = d;
    CHECK(!lw_comm_reaches(c, d));
    CHECK_FAILS(lw_buffers_new(l, c, NULL, &bo, &bs), LW_ERR_UNSUPPORTED,
                "buffers on cuda:0 need a communicator that moves its memory");
    /* ... which a library without comm_new cannot give: the staged one serves instead, and
     * says why; asked for by name, NCCL is refused */
    lw_comm *dc = (lw_comm *)1;
    CHECK_FAILS(lw_comm_device_new_kind(c, d, LW_DEVICE_COMM_NCCL, &dc), LW_ERR_UNSUPPORTED,
                "but cuda:0's library on rank 0 has none (built without NCCL)");
    CHECK(dc == NULL);
    CHECK_OK(lw_comm_device_new(c, d, &dc));
    CHECK(dc != NULL && strcmp(lw_comm_backend(dc), "staged") == 0);
    CHECK(strstr(lw_comm_about(dc), "the device library has no NCCL") != NULL);
    CHECK(lw_comm_reaches(dc, d));
    CHECK_OK(lw_buffers_new(l, dc, NULL, &bo, &bs));
    lw_buffers_free(bs);
    lw_comm_free(dc);
    lw_comm_free(c);
    lw_layout_free(l);
    lw_event_free(e);
    lw_device_free(d, x);
}

int main(void) {
    test_cpu_device();
    test_cpu_info();
    if (getenv("LWOPT_CUDA_LIB") != NULL)
        test_fake_library();
    else
        test_without_cuda();
    return check_exit("test_device");
}
