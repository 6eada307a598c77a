/* The backend interface (core/ops/backend.h): every device kind's table is registered and complete,
 * the device functions of core/device.h go through it, and the public ops add nothing to what the
 * table's kernel computes (bit-identical results, so dispatch can never change a number).
 *
 * The CUDA table is checked where the build has it (its kernels against the CPU's are tests/cuda/);
 * without it, every CUDA device is refused with a message saying how to build one. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/device.h"
#include "core/ops/backend.h"
#include "core/ops/ops.h"
#include "testlib.h"

typedef void (*any_fn)(void);

/* Members from `gemm` to `l2_norm` are the kernels: all function pointers, in declaration order
 * (op_begin and op_end after them are optional). */
static int missing_kernels(const ct_backend_ops *b) {
    int missing = 0;
    size_t end = offsetof(ct_backend_ops, op_begin) < b->size ? offsetof(ct_backend_ops, op_begin) : b->size;
    for (size_t off = offsetof(ct_backend_ops, gemm); off + sizeof(any_fn) <= end; off += sizeof(any_fn)) {
        any_fn f;
        memcpy(&f, (const char *)b + off, sizeof f);
        missing += f == NULL;
    }
    return missing;
}

static void test_registry(void) {
    const ct_backend_ops *cpu = ct_backend_for(CT_CPU);
    /* the baseline copy's table, or that of the level chosen when the library loaded (test_cpu_isa) */
    CHECK(cpu == &ct_backend_cpu || ct_cpu_isa_level() >= 2, "below level 2 the CPU's table is ct_backend_cpu");
    if (!cpu) return;
    CHECK(cpu->size == sizeof(ct_backend_ops), "cpu table size %zu, struct %zu", cpu->size, sizeof(ct_backend_ops));
    CHECK(strcmp(cpu->name, "cpu") == 0, "cpu table name '%s'", cpu->name);
    CHECK(missing_kernels(cpu) == 0, "the CPU backend lacks %d kernels", missing_kernels(cpu));
    CHECK(cpu->device_count && cpu->alloc && cpu->free && cpu->copy_bytes && cpu->memset_zero && cpu->synchronize &&
              cpu->describe,
          "the CPU backend has all of its memory members");
    CHECK(ct_backend_for_kind((ct_device_kind)CT_DEVICE_KINDS) == NULL, "a kind beyond the last has no table");
    CHECK(ct_backend_for_kind((ct_device_kind)-1) == NULL, "a negative kind has no table");
    CHECK(ct_device_count(CT_DEVICE_CPU) == 1, "one CPU device, not %d", ct_device_count(CT_DEVICE_CPU));
    char what[256] = "";
    cpu->describe(0, what, sizeof what);
    CHECK(strlen(what) > 0, "the CPU describes itself");
}

static ct_rng rng;

static void test_cpu_memory(void) {
    void *p = NULL;
    CHECK_OK(ct_device_alloc(CT_CPU, 1000, &p));
    if (!p) return;
    CHECK(((uintptr_t)p & 63) == 0, "host memory is 64-byte aligned");
    unsigned char *c = p, ref[1000];
    int nonzero = 0;
    for (int i = 0; i < 1000; i++) nonzero += c[i] != 0;
    CHECK(nonzero == 0, "fresh memory is zeroed (%d bytes are not)", nonzero);
    for (int i = 0; i < 1000; i++) ref[i] = (unsigned char)(1 + ct_rng_below(&rng, 255));
    CHECK_OK(ct_device_copy(p, CT_CPU, ref, CT_CPU, sizeof ref));
    CHECK(memcmp(p, ref, sizeof ref) == 0, "a host copy through the table copies");
    ct_backend_cpu.memset_zero(0, c + 10, 20);
    CHECK(c[9] == ref[9] && c[10] == 0 && c[29] == 0 && c[30] == ref[30], "memset_zero clears just its range");
    CHECK_OK(ct_backend_cpu.synchronize());
    /* the host's memory is the process's: the kernel counts it, not the backend */
    CHECK(ct_device_peak_allocated(CT_CPU) == -1, "the CPU reports no peak of its own");
    ct_device_reset_peak(CT_CPU);
    ct_device_free(CT_CPU, p);
    ct_device_free(CT_CPU, NULL);
}

/* Whether a library whose name holds `name` is mapped into this process. */
static bool mapped(const char *name) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f)) found = strstr(line, name) != NULL;
    if (f) fclose(f);
    return found;
}

/* The library maps no CUDA library until the CUDA kind is looked up. Without the CUDA backend (not
 * compiled in, or its module not loaded because the machine shows no GPU) every CUDA device is refused
 * with the reason, and nothing of CUDA is loaded; with it (CTRAINER_CUDA_MODULE loads the module
 * even without a GPU), the table is complete but for the CPU-only fused convolutions, and devices
 * beyond the visible ones are refused. */
static void test_cuda_kind(void) {
    CHECK(!mapped("libcudart") && !mapped("libcublas") && !mapped("libcudnn") && !mapped("libnccl"),
          "no CUDA library is mapped before a GPU is asked for");
    const ct_backend_ops *cuda = ct_backend_for_kind(CT_DEVICE_CUDA);
    ct_device gpu0 = {CT_DEVICE_CUDA, 0};
    void *p = (void *)&p;
    if (!cuda) {
        const char *why = ct_backend_load_error(CT_DEVICE_CUDA);
        bool known = strstr(why, "this build has no CUDA backend (configure with -DCTRAINER_CUDA=ON)") ||
                     strstr(why, "no NVIDIA GPU device node") || strstr(why, "could not be loaded");
        CHECK(known, "the reason there is no CUDA backend: '%s'", why);
        CHECK(!mapped("libcublas") && !mapped("libcudnn"), "without the backend, no CUDA library was loaded");
        CHECK(ct_device_count(CT_DEVICE_CUDA) == 0, "no CUDA devices without the backend");
        CHECK_ERR(ct_device_check(gpu0), CT_ERR_DEVICE, "cuda:0", why);
        CHECK_ERR(ct_device_alloc(gpu0, 16, &p), CT_ERR_DEVICE, why);
        CHECK(p == NULL, "a refused allocation leaves NULL");
        CHECK_ERR(ct_device_copy(&p, CT_CPU, &p, gpu0, sizeof p), CT_ERR_DEVICE, "cuda:0");
        CHECK(ct_device_peak_allocated(gpu0) == -1, "no peak without the backend");
        return;
    }
    CHECK(mapped("libctrainer_cuda") && mapped("libcublas"), "the CUDA module and its libraries are loaded");
    CHECK(cuda->size == sizeof(ct_backend_ops) && strcmp(cuda->name, "cuda") == 0, "the CUDA table's size and name");
    CHECK(missing_kernels(cuda) == 3, "the CUDA backend lacks %d kernels (the 3 fused conv ops expected)",
          missing_kernels(cuda));
    CHECK(cuda->conv2d_relu_backward == NULL && cuda->conv2d_relu_pool_forward == NULL &&
              cuda->conv2d_relu_pool_backward == NULL,
          "the fused conv + ReLU ops are the CPU's");
    int n = ct_device_count(CT_DEVICE_CUDA);
    CHECK(n == cuda->device_count(), "ct_device_count asks the table");
    ct_device beyond = {CT_DEVICE_CUDA, n};
    CHECK_ERR(ct_device_check(beyond), CT_ERR_DEVICE, "CUDA device(s) visible");
}

static void fill_random(ct_tensor *t) {
    for (int64_t i = 0; i < ct_tensor_numel(t); i++) ((double *)t->data)[i] = ct_rng_normal(&rng);
}

/* The public op equals its table kernel on the same inputs, bit for bit. */
static void test_dispatch_adds_nothing(void) {
    const ct_backend_ops *cpu = ct_backend_for_kind(CT_DEVICE_CPU); /* the level's table that runs */
    int64_t sa[2] = {7, 5}, sb[2] = {5, 3}, sc[2] = {7, 3};
    ct_tensor a, b, c1, c2;
    CHECK_OK(ct_tensor_alloc(&a, CT_F64, CT_CPU, 2, sa));
    CHECK_OK(ct_tensor_alloc(&b, CT_F64, CT_CPU, 2, sb));
    CHECK_OK(ct_tensor_alloc(&c1, CT_F64, CT_CPU, 2, sc));
    CHECK_OK(ct_tensor_alloc(&c2, CT_F64, CT_CPU, 2, sc));
    fill_random(&a);
    fill_random(&b);
    fill_random(&c1);
    memcpy(c2.data, c1.data, ct_tensor_nbytes(&c1));
    ct_op_gemm(false, false, 0.75, &a, &b, 0.5, &c1);
    cpu->gemm(false, false, 0.75, &a, &b, 0.5, &c2);
    CHECK(memcmp(c1.data, c2.data, ct_tensor_nbytes(&c1)) == 0, "ct_op_gemm == the CPU table's gemm");
    ct_op_activation_forward(CT_ACT_GELU, &c1, &c1);
    cpu->activation_forward(CT_ACT_GELU, &c2, &c2);
    CHECK(memcmp(c1.data, c2.data, ct_tensor_nbytes(&c1)) == 0, "ct_op_activation_forward == the table's");
    double n1 = ct_op_l2_norm(&a), n2 = cpu->l2_norm(&a);
    CHECK(memcmp(&n1, &n2, sizeof n1) == 0, "ct_op_l2_norm %.17g == the table's %.17g", n1, n2);
    CHECK(ct_op_all_finite(&c1) == cpu->all_finite(&c1), "ct_op_all_finite == the table's");
    ct_tensor_free(&a);
    ct_tensor_free(&b);
    ct_tensor_free(&c1);
    ct_tensor_free(&c2);
}

int main(void) {
    ct_test_begin("test_backend");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    test_registry();
    test_cpu_memory();
    test_cuda_kind();
    test_dispatch_adds_nothing();
    return ct_test_finish();
}
