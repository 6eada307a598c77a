/* The backends' registry and the device functions of core/device.h that go through it.
 *
 * One table per device kind, indexed by the kind: the CPU's is part of the library; CUDA's lives in
 * a module of its own (libctrainer_cuda.so, built by backends/cuda/ in builds with CUDA) that is
 * opened the first time the CUDA kind is looked up. The module brings the CUDA runtime, cuBLAS,
 * cuDNN and NCCL with it: linked into the library, they were mapped and relocated at every start
 * (over 200 MiB of resident memory for `ctrainer version`), by runs that never touch a GPU too. This
 * is the one file outside backends/cuda/ that knows whether CUDA is compiled in.
 *
 * The module calls the library's own functions (errors, tensors, the MPI communicator): it leaves
 * them undefined and the dynamic loader binds them to the copy already in the process, the shared
 * library's or, for programs linked with the static one, the program's (which therefore exports its
 * symbols: the static target asks for that, see CMakeLists.txt; tests/layers/check_backends.py
 * checks that the program and the shared library define every function the module needs).
 * CTRAINER_CUDA_MODULE names the module to load instead, in any build: the tests' emulated CUDA
 * backend (tests/cuda/emulated/) is one. */
#define _GNU_SOURCE /* dladdr */
#include "core/ops/backend.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"

const ct_backend_ops *ct_backends[CT_DEVICE_KINDS] = {
    [CT_DEVICE_CPU] = &ct_backend_cpu,
};

/* When the library loads, before any device memory can exist (so that every lookup of a kind meets
 * one table): the CPU's table of the instruction-set level to run (backends/cpu/isa.c; the baseline
 * one above is what a lookup before this meets), and with CTRAINER_CHECKED_DEVICE the checked device
 * (backends/checked/) in CUDA's place, built on that CPU table (no module is loaded then). */
__attribute__((constructor)) static void settle_registry(void) {
    ct_backends[CT_DEVICE_CPU] = ct_backend_cpu_select();
    const char *checked = getenv("CTRAINER_CHECKED_DEVICE");
    if (checked && *checked && strcmp(checked, "0") != 0) ct_backends[CT_DEVICE_CUDA] = ct_backend_checked();
}

/* --- the CUDA module ------------------------------------------------------------------------------ */

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static void *cuda_module;
static char cuda_error[1024];
static bool cuda_failed; /* a module was there and did not load */

#ifdef CT_CUDA_MODULE
/* Whether this machine shows an NVIDIA GPU to user space at all: the driver's control node, or WSL's
 * GPU device. Without one no GPU can be used, and the module (cuBLAS, cuDNN) is not worth loading
 * to count zero devices. CTRAINER_CUDA_MODULE skips the question. */
static bool gpu_device_nodes(void) { return access("/dev/nvidiactl", F_OK) == 0 || access("/dev/dxg", F_OK) == 0; }

/* The folder of the file this code was loaded from (the shared library, or the program the static
 * library is part of), with a trailing '/'; "" when unknown. */
static void own_folder(char *buf, size_t cap) {
    Dl_info info;
    char path[PATH_MAX] = "";
    if (dladdr((void *)&ct_backend_load, &info) && info.dli_fname && strchr(info.dli_fname, '/'))
        snprintf(path, sizeof path, "%s", info.dli_fname);
    else {
        ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
        path[n > 0 ? n : 0] = 0;
    }
    char *slash = strrchr(path, '/');
    if (slash) slash[1] = 0;
    snprintf(buf, cap, "%s", slash ? path : "");
}

#endif

/* The module's file name in messages (a build without CUDA can still load one it is given). */
#ifdef CT_CUDA_MODULE
#define MODULE_NAME CT_CUDA_MODULE
#else
#define MODULE_NAME "libctrainer_cuda.so"
#endif

/* Opens the module at path and takes its table; false with the reason in *why when it cannot. */
static bool open_module(const char *path, const char **why) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    *why = h ? NULL : dlerror();
    const ct_backend_ops *table = h ? dlsym(h, "ct_backend_cuda") : NULL;
    if (h && !table) {
        *why = "it has no ct_backend_cuda table";
        dlclose(h);
    }
    if (!table) return false;
    ct_log_debug("CUDA backend: loaded %s", path); /* which file, where several could be */
    cuda_module = h;
    __atomic_store_n(&ct_backends[CT_DEVICE_CUDA], table, __ATOMIC_RELEASE);
    return true;
}

/* CTRAINER_CUDA_MODULE names the module to load, in any build (a test's emulated backend, say);
 * otherwise a build with CUDA looks for its own where a GPU is, and one without has none. */
static void load_cuda(void) {
    if (__atomic_load_n(&ct_backends[CT_DEVICE_CUDA], __ATOMIC_ACQUIRE)) return; /* the checked device serves it */
    const char *forced = getenv("CTRAINER_CUDA_MODULE"), *why = NULL;
    if (forced && *forced) {
        if (!open_module(forced, &why)) { /* the loader's reason names the file */
            snprintf(cuda_error, sizeof cuda_error, "the CUDA backend (%s) could not be loaded: %s", MODULE_NAME,
                     why ? why : "unknown error");
            cuda_failed = true;
        }
        return;
    }
#ifdef CT_CUDA_MODULE
    if (!gpu_device_nodes()) {
        snprintf(cuda_error, sizeof cuda_error,
                 "no NVIDIA GPU device node (/dev/nvidiactl) on this machine, so the CUDA backend was not loaded");
        return;
    }
    char here[PATH_MAX], beside[PATH_MAX + 64], installed[PATH_MAX + 64];
    own_folder(here, sizeof here);
    snprintf(beside, sizeof beside, "%s%s", here, CT_CUDA_MODULE);
    snprintf(installed, sizeof installed, "%s/%s", CT_CUDA_MODULE_DIR, CT_CUDA_MODULE);
    /* beside the library (a build tree, or an installed lib folder); where it was installed; the
     * loader's own search (LD_LIBRARY_PATH, the system folders) */
    const char *candidates[] = {beside, installed, CT_CUDA_MODULE};
    char tried[768] = "";
    for (size_t i = 0; i < sizeof candidates / sizeof *candidates; i++) {
        if (open_module(candidates[i], &why)) {
            cuda_error[0] = 0;
            return;
        }
        /* keep the most telling reason: a module that exists but failed beats one not found */
        if (!tried[0] || (why && strstr(why, "No such file") == NULL))
            snprintf(tried, sizeof tried, "%s", why ? why : "unknown error");
    }
    snprintf(cuda_error, sizeof cuda_error, "the CUDA backend (%s) could not be loaded: %s", MODULE_NAME, tried);
    cuda_failed = strstr(tried, "No such file") == NULL; /* one was found: not merely absent */
#else
    snprintf(cuda_error, sizeof cuda_error, "this build has no CUDA backend (configure with -DCTRAINER_CUDA=ON)");
#endif
}

const ct_backend_ops *ct_backend_load(ct_device_kind kind) {
    if (kind != CT_DEVICE_CUDA) return NULL;
    pthread_once(&cuda_once, load_cuda);
    return __atomic_load_n(&ct_backends[CT_DEVICE_CUDA], __ATOMIC_ACQUIRE);
}

const char *ct_backend_load_error(ct_device_kind kind) {
    if (kind != CT_DEVICE_CUDA) return "";
    pthread_once(&cuda_once, load_cuda);
    return cuda_error;
}

bool ct_backend_module_failed(ct_device_kind kind) {
    if (kind != CT_DEVICE_CUDA) return false;
    pthread_once(&cuda_once, load_cuda);
    return cuda_failed;
}

void *ct_backend_symbol(ct_device_kind kind, const char *name) {
    return ct_backend_load(kind) && kind == CT_DEVICE_CUDA && cuda_module ? dlsym(cuda_module, name) : NULL;
}

/* Kinds named in messages where no table (and so no table's name) is there. */
static const char *const kind_names[CT_DEVICE_KINDS] = {[CT_DEVICE_CPU] = "CPU", [CT_DEVICE_CUDA] = "CUDA"};

/* A table's member, or NULL when the table predates it (a shorter size) or leaves it out. */
#define MEMBER(b, m) ((b) && (b)->size >= offsetof(ct_backend_ops, m) + sizeof((b)->m) ? (b)->m : NULL)

int ct_device_count(ct_device_kind kind) {
    const ct_backend_ops *b = ct_backend_for_kind(kind);
    return MEMBER(b, device_count) ? b->device_count() : 0;
}

ct_status ct_device_check(ct_device d) {
    if (d.kind == CT_DEVICE_CPU) return CT_OK;
    char name[32];
    ct_device_str(d, name, sizeof name);
    if (!ct_backend_for(d)) return ct_error(CT_ERR_DEVICE, "device %s: %s", name, ct_backend_load_error(d.kind));
    int n = ct_device_count(d.kind);
    if (d.index < 0 || d.index >= n)
        return ct_error(CT_ERR_DEVICE, "device %s: %d %s device(s) visible%s", name, n, kind_names[d.kind],
                        d.kind == CT_DEVICE_CUDA && getenv("CUDA_VISIBLE_DEVICES") ? " (CUDA_VISIBLE_DEVICES is set)"
                                                                                     : "");
    return CT_OK;
}

ct_status ct_device_alloc(ct_device d, size_t bytes, void **out) {
    *out = NULL;
    CT_TRY(ct_device_check(d));
    const ct_backend_ops *b = ct_backend_for(d);
    if (!MEMBER(b, alloc)) return ct_error(CT_ERR_DEVICE, "%s backend: no device memory", b->name);
    return b->alloc(d.index, bytes, out);
}

void ct_device_free(ct_device d, void *p) {
    const ct_backend_ops *b = ct_backend_for(d);
    if (p && MEMBER(b, free)) b->free(d.index, p);
}

ct_status ct_device_copy(void *dst, ct_device dd, const void *src, ct_device sd, size_t bytes) {
    /* The device side's backend copies (it knows the host too); host to host is the CPU's. A device
     * this build or machine lacks is an error here, not an abort inside its runtime. */
    ct_device side = dd.kind != CT_DEVICE_CPU ? dd : sd;
    if (side.kind != CT_DEVICE_CPU && ct_backend_for(side)) {
        ct_status usable = ct_device_check(side);
        if (usable != CT_OK) return ct_error_prefix(usable, "copy: ");
    }
    const ct_backend_ops *b = ct_backend_for(side);
    if (!MEMBER(b, copy_bytes)) {
        char name[32];
        return ct_error(CT_ERR_DEVICE, "copy: %s: %s", ct_device_str(side, name, sizeof name),
                        (unsigned)side.kind < CT_DEVICE_KINDS ? ct_backend_load_error(side.kind) : "no such device kind");
    }
    return b->copy_bytes(dst, dd, src, sd, bytes);
}

void ct_device_zero(ct_device d, void *p, size_t bytes) {
    const ct_backend_ops *b = ct_backend_for(d);
    if (bytes == 0) return;
    if (!MEMBER(b, memset_zero)) {
        char name[32];
        ct_abort_at(__FILE__, __LINE__, "zero: no backend for device %s", ct_device_str(d, name, sizeof name));
    }
    b->memset_zero(d.index, p, bytes);
}

ct_status ct_device_event_create(ct_device d, ct_device_event *out) {
    *out = (ct_device_event){.device = d};
    const ct_backend_ops *b = ct_backend_for(d);
    return MEMBER(b, event_create) ? b->event_create(d.index, &out->handle) : CT_OK;
}

void ct_device_event_destroy(ct_device_event *e) {
    if (!e->handle) return;
    ct_backend_for(e->device)->event_destroy(e->handle);
    e->handle = NULL;
}

ct_status ct_device_event_record(ct_device_event *e) {
    if (!e->handle) return CT_OK;
    const ct_backend_ops *b = ct_backend_for(e->device);
    if (MEMBER(b, use_device)) b->use_device(e->device.index); /* recorded on the work of e's device */
    return b->event_record(e->handle);
}

ct_status ct_device_event_wait(const ct_device_event *e) {
    return e->handle ? ct_backend_for(e->device)->event_wait(e->handle) : CT_OK;
}

ct_status ct_device_pinned_alloc(ct_device d, size_t bytes, void **out) {
    const ct_backend_ops *b = ct_backend_for(d);
    if (MEMBER(b, pinned_alloc)) return b->pinned_alloc(bytes, out);
    *out = ct_host_alloc(bytes);
    return *out ? CT_OK : ct_error(CT_ERR_NOMEM, "cannot allocate %zu bytes of host memory", bytes);
}

void ct_device_pinned_free(ct_device d, void *p) {
    const ct_backend_ops *b = ct_backend_for(d);
    if (!p) return;
    if (MEMBER(b, pinned_free))
        b->pinned_free(p);
    else
        ct_host_free(p);
}

ct_status ct_device_upload(ct_device d, void *dst, const void *src, size_t bytes, const ct_device_event *after,
                           ct_device_event *done) {
    CT_ASSERT(done && ct_device_eq(done->device, d));
    const ct_backend_ops *b = ct_backend_for(d);
    if (!MEMBER(b, upload) || !done->handle) return ct_device_copy(dst, d, src, CT_CPU, bytes);
    return b->upload(d.index, dst, src, bytes, after ? after->handle : NULL, done->handle);
}

ct_status ct_device_download(ct_device d, void *dst, const void *src, size_t bytes, ct_device_event *done) {
    CT_ASSERT(done && ct_device_eq(done->device, d));
    const ct_backend_ops *b = ct_backend_for(d);
    if (!MEMBER(b, download) || !done->handle) return ct_device_copy(dst, CT_CPU, src, d, bytes);
    if (MEMBER(b, use_device)) b->use_device(d.index); /* on the work of src's device */
    return b->download(d.index, dst, src, bytes, done->handle);
}

ct_status ct_device_stream_begin(ct_device d, void **stream) {
    *stream = NULL;
    const ct_backend_ops *b = ct_backend_for(d);
    return MEMBER(b, stream_begin) ? b->stream_begin(d.index, stream) : CT_OK;
}

void ct_device_stream_end(ct_device d, void *stream) {
    const ct_backend_ops *b = ct_backend_for(d);
    if (stream && MEMBER(b, stream_end)) b->stream_end(d.index, stream);
}

int64_t ct_device_peak_allocated(ct_device d) {
    const ct_backend_ops *b = ct_backend_for(d);
    return MEMBER(b, peak_allocated) ? (int64_t)b->peak_allocated(d.index) : -1;
}

void ct_device_reset_peak(ct_device d) {
    const ct_backend_ops *b = ct_backend_for(d);
    if (MEMBER(b, reset_peak)) b->reset_peak(d.index);
}

double ct_device_peak_flops(ct_device d, ct_math_mode m) {
    const ct_backend_ops *b = ct_backend_for(d);
    double peak = MEMBER(b, peak_flops) ? b->peak_flops(d.index, m) : 0.0;
    return peak > 0 ? peak : 0.0;
}

const char *ct_math_mode_name(ct_math_mode m) {
    static const char *const names[] = {"float32", "tf32", "bf16", "fp16"};
    return m >= CT_MATH_F32 && m <= CT_MATH_FP16 ? names[m] : "unknown";
}

ct_status ct_device_set_math_mode(ct_device d, ct_math_mode m) {
    CT_ASSERT(m >= CT_MATH_F32 && m <= CT_MATH_FP16);
    const ct_backend_ops *b = ct_backend_for(d);
    if (MEMBER(b, set_math_mode)) {
        b->set_math_mode(m);
        return CT_OK;
    }
    if (m == CT_MATH_F32) return CT_OK;
    char name[32];
    return ct_error(CT_ERR_UNSUPPORTED, "%s matrix multiplies need a device whose backend has them (CUDA's tensor "
                    "cores); %s computes in float32 only", ct_math_mode_name(m), ct_device_str(d, name, sizeof name));
}
