/* The checked device (backends/checked/): with CTRAINER_CHECKED_DEVICE set, "cuda" devices are host
 * memory that the host may touch only inside ops and device copies. Checked here: the registry swaps
 * it in, ops on it compute bit for bit what the CPU computes, a model built on it starts from the
 * CPU's values and runs a step identically, a host read or write of its memory outside an op dies
 * with SIGSEGV, and a breach of the asynchronous copies' contract (uploads, downloads) aborts (in child
 * processes); host copies taken without waiting (core/host_copy.h) hold the values after their wait. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/device.h"
#include "core/host_copy.h"
#include "core/ops/backend.h"
#include "core/tensor.h"
#include "model/layers.h"
#include "model/model.h"
#include "testlib.h"

static const ct_device GPU = {CT_DEVICE_CUDA, 0};

/* A tensor on dev holding the given host values. */
static ct_tensor on(ct_device dev, const float *host, int ndim, const int64_t *shape) {
    ct_tensor t = {0}, h = ct_tensor_view((void *)host, CT_F32, CT_CPU, ndim, shape);
    if (ct_tensor_alloc(&t, CT_F32, dev, ndim, shape) != CT_OK || ct_tensor_copy_to(&t, &h) != CT_OK)
        ct_test_fail(__FILE__, __LINE__, "cannot place a tensor on the device");
    return t;
}

static bool same_bits(const ct_tensor *dev, const ct_tensor *cpu) {
    size_t n = ct_tensor_nbytes(cpu);
    void *back = malloc(n);
    ct_tensor h = ct_tensor_view(back, cpu->dtype, CT_CPU, cpu->ndim, cpu->shape);
    bool same = ct_tensor_copy_to(&h, dev) == CT_OK && memcmp(back, cpu->data, n) == 0;
    free(back);
    return same;
}

static void fill_normal(float *x, int64_t n, ct_rng *rng) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)ct_rng_normal(rng);
}

static void test_registry(void) {
    const ct_backend_ops *b = ct_backend_for_kind(CT_DEVICE_CUDA);
    CHECK(ct_device_count(CT_DEVICE_CUDA) == 2, "CTRAINER_CHECKED_DEVICE=2 gives 2 devices, not %d",
          ct_device_count(CT_DEVICE_CUDA));
    CHECK(b == ct_backend_checked(), "the CUDA kind is served by the checked device");
    CHECK(ct_device_check(GPU) == CT_OK && ct_device_check((ct_device){CT_DEVICE_CUDA, 1}) == CT_OK,
          "cuda:0 and cuda:1 are usable");
    CHECK_ERR(ct_device_check((ct_device){CT_DEVICE_CUDA, 2}), CT_ERR_DEVICE, "2 CUDA device(s) visible");
}

/* A GEMM, an activation and an Adam step on the checked device give the CPU's bits. */
static void test_ops_match_cpu(void) {
    ct_rng rng;
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    int64_t sa[2] = {7, 5}, sb[2] = {5, 3}, sc[2] = {7, 3};
    float a[35], b[15], c[21];
    fill_normal(a, 35, &rng), fill_normal(b, 15, &rng), fill_normal(c, 21, &rng);
    ct_tensor ga = on(GPU, a, 2, sa), gb = on(GPU, b, 2, sb), gc = on(GPU, c, 2, sc), gy = on(GPU, c, 2, sc);
    ct_tensor ca = on(CT_CPU, a, 2, sa), cb = on(CT_CPU, b, 2, sb), cc = on(CT_CPU, c, 2, sc), cy = on(CT_CPU, c, 2, sc);
    ct_op_gemm(false, false, 1.5, &ga, &gb, 0.5, &gc);
    ct_op_gemm(false, false, 1.5, &ca, &cb, 0.5, &cc);
    CHECK(same_bits(&gc, &cc), "gemm on the checked device differs from the CPU's");
    ct_op_activation_forward(CT_ACT_GELU, &gc, &gy);
    ct_op_activation_forward(CT_ACT_GELU, &cc, &cy);
    CHECK(same_bits(&gy, &cy), "gelu on the checked device differs from the CPU's");
    CHECK(ct_op_all_finite(&gy), "all_finite reads device memory inside the op");
    ct_tensor m1 = {0}, v1 = {0}, m2 = {0}, v2 = {0};
    ct_tensor_alloc(&m1, CT_F32, GPU, 2, sc), ct_tensor_alloc(&v1, CT_F32, GPU, 2, sc);
    ct_tensor_alloc(&m2, CT_F32, CT_CPU, 2, sc), ct_tensor_alloc(&v2, CT_F32, CT_CPU, 2, sc);
    ct_adam_args args = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1, .decoupled_decay = true, .step = 1};
    ct_op_adam_step(&gc, &gy, &m1, &v1, NULL, &args);
    ct_op_adam_step(&cc, &cy, &m2, &v2, NULL, &args);
    CHECK(same_bits(&gc, &cc) && same_bits(&v1, &v2), "an Adam step on the checked device differs from the CPU's");
    ct_tensor *all[] = {&ga, &gb, &gc, &gy, &ca, &cb, &cc, &cy, &m1, &v1, &m2, &v2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ct_tensor_free(all[i]);
}

/* A host access in a child: true when the access faulted, that is when the child did not come back
 * from it (it dies of SIGSEGV; under AddressSanitizer, whose handler reports the SEGV, it exits with
 * an error instead). An access that works ends the child with 0. */
static bool host_access_faults(volatile float *p, bool write) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (write) p[0] = 1.0f;
        else if (p[0] == 12345.0f) _exit(0); /* a read the compiler cannot drop */
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_host_access_faults(void) {
    int64_t n = 1000;
    ct_tensor t = {0};
    CHECK_OK(ct_tensor_alloc(&t, CT_F32, GPU, 1, &n));
    CHECK(host_access_faults(t.data, false), "a host read of device memory outside an op does not fault");
    CHECK(host_access_faults(t.data, true), "a host write of device memory outside an op does not fault");
    ct_tensor h = {0};
    CHECK_OK(ct_tensor_alloc(&h, CT_F32, CT_CPU, 1, &n));
    CHECK(!host_access_faults(h.data, false) && !host_access_faults(h.data, true),
          "host memory is not affected by the checked device");
    /* Memory allocated while another thread's op runs opens with it and closes with it. */
    ct_backend_checked()->op_begin();
    ct_tensor u = {0};
    CHECK_OK(ct_tensor_alloc(&u, CT_F32, GPU, 1, &n));
    ((float *)u.data)[0] = 2.0f;
    ct_backend_checked()->op_end();
    CHECK(host_access_faults(u.data, false), "memory allocated inside an op stays open after it");
    ct_tensor_free(&t), ct_tensor_free(&h), ct_tensor_free(&u);
}

/* --- asynchronous uploads ------------------------------------------------------------------------ */

typedef struct upload_case {
    float *src;  /* pinned, 1000 floats */
    ct_tensor dst; /* on the device */
    ct_device_event done;
} upload_case;

static void upload_case_init(upload_case *c) {
    int64_t n = 1000;
    void *p = NULL;
    CHECK_OK(ct_device_pinned_alloc(GPU, n * sizeof(float), &p));
    c->src = p;
    CHECK_OK(ct_tensor_alloc(&c->dst, CT_F32, GPU, 1, &n));
    CHECK_OK(ct_device_event_create(GPU, &c->done));
}

static void upload_case_free(upload_case *c) {
    ct_device_pinned_free(GPU, c->src);
    ct_tensor_free(&c->dst);
    ct_device_event_destroy(&c->done);
}

static void upload(upload_case *c, float first) {
    for (int i = 0; i < 1000; i++) c->src[i] = first + (float)i;
    CHECK_OK(ct_device_upload(GPU, c->dst.data, c->src, 1000 * sizeof(float), NULL, &c->done));
}

/* Breaches of the copies' contract, each run in a child that must die of the checked device's abort. */
static void overwrite_then_wait(void) {
    upload_case c;
    upload_case_init(&c);
    upload(&c, 0);
    c.src[7] = -1; /* before the copy is known to have read it */
    (void)ct_device_event_wait(&c.done);
}
static void upload_again_unwaited(void) {
    upload_case c;
    upload_case_init(&c);
    upload(&c, 0);
    upload(&c, 5);
}
static void free_unwaited(void) {
    upload_case c;
    upload_case_init(&c);
    upload(&c, 0);
    ct_device_pinned_free(GPU, c.src);
}

static bool dies(void (*breach)(void)) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        breach();
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT; /* the checker's abort, not any failure */
}

/* ct_device_upload on the checked device: the device holds the values (an op reads them), and the
 * host is held to the contract of a GPU's copy stream: the source untouched until an event recorded
 * after the upload has been waited for. */
static void test_uploads(void) {
    upload_case a, b;
    upload_case_init(&a), upload_case_init(&b);
    float want[1000];
    for (int i = 0; i < 1000; i++) want[i] = 2.0f * (3.0f + (float)i);
    int64_t n = 1000;
    ct_tensor expect = ct_tensor_view(want, CT_F32, CT_CPU, 1, &n);
    upload(&a, 3);
    ct_op_scale(&a.dst, 2.0);
    CHECK(same_bits(&a.dst, &expect), "an op after an upload does not see the uploaded values");
    CHECK_OK(ct_device_event_wait(&a.done));
    upload(&a, 3); /* its source may be refilled once the upload's event has passed */
    /* a copy stream runs in order: waiting for a later upload ends an earlier one */
    upload(&b, 0);
    CHECK_OK(ct_device_event_wait(&b.done));
    upload(&a, 3);
    /* so does an event recorded on the device's work after the upload (the work waited for it) */
    ct_device_event mark;
    CHECK_OK(ct_device_event_create(GPU, &mark));
    CHECK_OK(ct_device_event_record(&mark));
    CHECK_OK(ct_device_event_wait(&mark));
    upload(&a, 3);
    CHECK_OK(ct_device_event_wait(&a.done));
    ct_device_event_destroy(&mark);
    upload_case_free(&a), upload_case_free(&b);
    CHECK(dies(overwrite_then_wait), "a source changed before its upload's event passed is not caught");
    CHECK(dies(upload_again_unwaited), "a second upload from a source still in flight is not caught");
    CHECK(dies(free_unwaited), "pinned memory released under an upload is not caught");
    /* The CPU has no asynchronous copies: no event handle, and an upload is a copy. */
    ct_device_event cpu_done;
    CHECK_OK(ct_device_event_create(CT_CPU, &cpu_done));
    CHECK(cpu_done.handle == NULL, "the CPU's events have a handle");
    float src[3] = {1, 2, 3}, dst[3] = {0};
    CHECK_OK(ct_device_upload(CT_CPU, dst, src, sizeof src, NULL, &cpu_done));
    CHECK(memcmp(dst, src, sizeof src) == 0 && ct_device_event_wait(&cpu_done) == CT_OK,
          "an upload to the CPU is not a copy");
    ct_device_event_destroy(&cpu_done);
}

/* --- asynchronous downloads ---------------------------------------------------------------------- */

typedef struct download_case {
    ct_tensor src; /* on the device, 1000 floats: 0, 1, 2, ... */
    float *dst;    /* pinned */
    ct_device_event done;
} download_case;

static void download_case_init(download_case *c) {
    float v[1000];
    for (int i = 0; i < 1000; i++) v[i] = (float)i;
    int64_t n = 1000;
    c->src = on(GPU, v, 1, &n);
    void *p = NULL;
    CHECK_OK(ct_device_pinned_alloc(GPU, sizeof v, &p));
    c->dst = p;
    CHECK_OK(ct_device_event_create(GPU, &c->done));
}

static void download(download_case *c) {
    CHECK_OK(ct_device_download(GPU, c->dst, c->src.data, 1000 * sizeof(float), &c->done));
}

static void write_then_wait(void) {
    download_case c;
    download_case_init(&c);
    download(&c);
    c.dst[3] = 7; /* the copy would land over it */
    (void)ct_device_event_wait(&c.done);
}
static void free_undelivered(void) {
    download_case c;
    download_case_init(&c);
    download(&c);
    ct_device_pinned_free(GPU, c.dst);
}
static void download_again_unwaited(void) {
    download_case c;
    download_case_init(&c);
    download(&c);
    download(&c);
}
static void upload_from_undelivered(void) {
    download_case c;
    download_case_init(&c);
    download(&c);
    ct_device_event up;
    (void)ct_device_event_create(GPU, &up);
    (void)ct_device_upload(GPU, c.src.data, c.dst, 1000 * sizeof(float), NULL, &up);
}

/* ct_device_download on the checked device: the values are those of the device's work before the
 * download (not of work after it), and the host is held to a GPU's contract: the destination is the
 * host's only once an event recorded after the download has been waited for (before, it reads 0xff,
 * NaN in every float). */
static void test_downloads(void) {
    download_case c;
    download_case_init(&c);
    download(&c);
    ct_op_scale(&c.src, 2.0); /* enqueued after the download: not in it */
    bool poisoned = true;
    for (int i = 0; i < 1000; i++) poisoned &= isnan(c.dst[i]);
    CHECK(poisoned, "a download's destination holds values before its event has been waited for");
    CHECK_OK(ct_device_event_wait(&c.done));
    bool right = true;
    for (int i = 0; i < 1000; i++) right &= c.dst[i] == (float)i;
    CHECK(right, "the download does not hold the device's values as they were when it was enqueued");
    /* an event recorded on the device's work after the download covers it */
    ct_device_event mark;
    CHECK_OK(ct_device_event_create(GPU, &mark));
    download(&c);
    CHECK_OK(ct_device_event_record(&mark));
    CHECK_OK(ct_device_event_wait(&mark));
    CHECK(c.dst[999] == 1998.0f, "an event recorded after a download does not deliver it: %g", (double)c.dst[999]);
    /* an upload runs on the copy stream: waiting for it delivers a download only through its `after` */
    upload_case u;
    upload_case_init(&u);
    download(&c);
    upload(&u, 0);
    CHECK_OK(ct_device_event_wait(&u.done));
    CHECK(isnan(c.dst[0]), "waiting for an upload delivered a download on the other stream");
    CHECK_OK(ct_device_event_record(&mark));
    CHECK_OK(ct_device_upload(GPU, u.dst.data, u.src, 1000 * sizeof(float), &mark, &u.done));
    CHECK_OK(ct_device_event_wait(&u.done));
    CHECK(c.dst[1] == 2.0f, "an upload after an event recorded after a download does not deliver it");
    upload_case_free(&u);
    ct_device_event_destroy(&mark);
    ct_device_event_destroy(&c.done);
    ct_device_pinned_free(GPU, c.dst);
    ct_tensor_free(&c.src);
    CHECK(dies(write_then_wait), "a host write into an undelivered download is not caught");
    CHECK(dies(free_undelivered), "pinned memory released under a download is not caught");
    CHECK(dies(download_again_unwaited), "a second download into memory still in flight is not caught");
    CHECK(dies(upload_from_undelivered), "an upload from an undelivered download is not caught");
}

/* ct_host_copies: copies of device and host tensors in one set, read after one wait; a spare's memory
 * taken over when it fits; a tensor of another device refused. */
static void test_host_copies(void) {
    float v[6] = {1, 2, 3, 4, 5, 6}, w[4] = {9, 8, 7, 6};
    int64_t n6 = 6, n4 = 4;
    ct_tensor dev = on(GPU, v, 1, &n6), host = ct_tensor_view(w, CT_F32, CT_CPU, 1, &n4), other = on((ct_device){
                                                                                               CT_DEVICE_CUDA, 1},
                                                                                           v, 1, &n6);
    ct_host_copies set;
    CHECK_OK(ct_host_copies_init(&set, GPU));
    ct_tensor a, b, c, empty, none = {0};
    CHECK_OK(ct_host_copies_take(&set, &a, &dev, NULL));
    CHECK_OK(ct_host_copies_take(&set, &b, &host, NULL));
    CHECK_OK(ct_host_copies_take(&set, &empty, &none, NULL));
    CHECK(empty.data == NULL, "an empty tensor's copy has memory");
    CHECK_OK(ct_host_copies_wait(&set));
    CHECK(memcmp(a.data, v, sizeof v) == 0 && memcmp(b.data, w, sizeof w) == 0 && ct_device_eq(a.device, CT_CPU),
          "the copies do not hold the tensors' values on the host");
    void *mem = a.data;
    CHECK_OK(ct_host_copies_take(&set, &c, &dev, &b)); /* b does not fit: left to its owner */
    CHECK(b.data != NULL && c.data != mem, "a spare that does not fit was taken");
    CHECK_OK(ct_host_copies_wait(&set)); /* (released under its copy, it would abort) */
    ct_host_copies_release(&set, &c);
    CHECK_OK(ct_host_copies_take(&set, &c, &dev, &a));
    CHECK(a.data == NULL && c.data == mem, "a spare that fits was not taken over");
    CHECK_ERR(ct_host_copies_take(&set, &a, &other, NULL), CT_ERR_DEVICE, "a host copy of a tensor on cuda:1");
    CHECK_OK(ct_host_copies_wait(&set));
    CHECK(memcmp(c.data, v, sizeof v) == 0, "the copy into a spare's memory does not hold the values");
    ct_host_copies_release(&set, &b);
    ct_host_copies_release(&set, &c);
    ct_host_copies_destroy(&set);
    ct_tensor_free(&dev), ct_tensor_free(&other);
}

/* An MLP built on the checked device starts from the CPU's initial values, and a forward and
 * backward give the CPU's outputs and gradients. */
static void test_model_on_device(void) {
    json_t *spec = json_pack("{s:s, s:[i,i], s:i}", "type", "mlp", "hidden", 16, 8, "num_classes", 4);
    ct_module *r1 = NULL, *r2 = NULL;
    CHECK_OK(ct_module_from_json(spec, "model", &r1));
    CHECK_OK(ct_module_from_json(spec, "model", &r2));
    json_decref(spec);
    if (!r1 || !r2) return;
    ct_shape in = {.ndim = 1, .dims = {12}};
    ct_model gm, cm;
    ct_model_options o = {.dtype = CT_F32, .device = GPU, .max_batch = 5, .seed = ct_test_seed};
    CHECK_OK(ct_model_build(&gm, r1, &in, &o));
    o.device = CT_CPU;
    CHECK_OK(ct_model_build(&cm, r2, &in, &o));
    CHECK(ct_device_eq(gm.params.values.device, GPU), "the parameters live on the device");
    CHECK(same_bits(&gm.params.values, &cm.params.values), "initial values on the device differ from the CPU's");
    ct_rng rng;
    ct_rng_init(&rng, ct_test_seed, 1, CT_RNG_USER);
    float x[60], dy[20];
    fill_normal(x, 60, &rng), fill_normal(dy, 20, &rng);
    int64_t sx[2] = {5, 12}, sy[2] = {5, 4};
    ct_tensor gx = on(GPU, x, 2, sx), cx = on(CT_CPU, x, 2, sx), gdy = on(GPU, dy, 2, sy), cdy = on(CT_CPU, dy, 2, sy);
    ct_tensor gy, cy;
    CHECK_OK(ct_model_forward(&gm, &gx, &gy));
    CHECK_OK(ct_model_forward(&cm, &cx, &cy));
    CHECK(same_bits(&gy, &cy), "the forward pass on the device differs from the CPU's");
    CHECK_OK(ct_model_backward(&gm, &gdy));
    CHECK_OK(ct_model_backward(&cm, &cdy));
    CHECK(same_bits(&gm.params.grads, &cm.params.grads), "gradients on the device differ from the CPU's");
    ct_tensor_free(&gx), ct_tensor_free(&cx), ct_tensor_free(&gdy), ct_tensor_free(&cdy);
    ct_model_free(&gm), ct_model_free(&cm);
}

int main(int argc, char **argv) {
    (void)argc;
    if (!ct_test_use_checked_device(argv, "2")) return 1;
    ct_test_begin("checked_device");
    test_registry();
    test_ops_match_cpu();
    test_host_access_faults();
    test_uploads();
    test_downloads();
    test_host_copies();
    test_model_on_device();
    return ct_test_finish();
}
