/* What the CUDA backend takes from the CUDA runtime, cuBLAS and cuDNN, in the host emulation: the
 * functions of backends/cuda/cuda_rt.h and cuda_handles.h (one device "cuda:0" whose memory is host
 * memory, streams that are the host's one order, a workspace per thread) and the two families the
 * backend leaves to NVIDIA's libraries, GEMMs (blas.cu; cuBLASLt's are emulated_cublaslt.cpp's) and
 * convolutions (conv.cu), done by the CPU backend on the same memory. Every other op of the table
 * (backends/cuda/backend_cuda.c) is the backend's own kernel code, compiled from its .cu file by the host compiler
 * (rewrite_launches.py, cuda_emulation.h). GEMMs and convolutions round their float32 inputs as
 * tensor cores do under the thread's math mode (tf32, bf16, fp16), so mixed-precision training
 * differs from float32 here as it would on a GPU. So the emulated module checks the kernels' indexing,
 * synchronisation and arithmetic and the table's wiring, not NVIDIA's libraries or real streams. */
#include "cuda_emulation.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <mutex>
#include <new>

#include "backends/cuda/cuda_handles.h"
#include "backends/cuda/ops_cuda.h"
#include "core/ops/backend.h"
#include "emulated_libraries.h"

namespace {

std::mutex memory_lock;
/* Live allocations by address: their size and device (one map, ordered for the lookup of an address
 * inside one). */
struct allocation {
    size_t bytes;
    int device;
    uint64_t zeroed; /* when its zeroing was enqueued on the allocating thread's stream (allocations so far) */
};
uint64_t allocations_made;
std::map<const unsigned char *, allocation> live;
/* CTRAINER_EMULATED_DEVICES (1 to 8; 1 without it) devices share the host's memory; the calling
 * thread's current one is device 0 until it sets another, as CUDA's. */
thread_local int current_device;

int emulated_devices() {
    static const int n = [] {
        const char *v = std::getenv("CTRAINER_EMULATED_DEVICES");
        int k = v ? std::atoi(v) : 1;
        return k >= 1 && k <= 8 ? k : 1;
    }();
    return n;
}
size_t allocated, peak;
thread_local ct_math_mode math_mode = CT_MATH_F32;
thread_local std::vector<unsigned char> workspace;

/* The same memory as a CPU tensor, for the CPU backend's kernels (NULL stays NULL). */
struct on_cpu {
    ct_tensor t;
    const ct_tensor *p;
    explicit on_cpu(const ct_tensor *g) : t(g ? *g : ct_tensor{}), p(g ? &t : nullptr) { t.device = CT_CPU; }
    ct_tensor *get() { return (ct_tensor *)p; }
};

/* A float32 value as tensor cores take it: rounded to nearest even to tf32's 10-bit or bf16's 7-bit
 * mantissa (float32's range), or converted to fp16, whose range ends at 65504 (larger values become
 * infinite, as cuBLAS's and cuDNN's down-conversion makes them: what fp16's loss scaler is for). */
float tensor_core_input(float x, ct_math_mode m) {
    if (m == CT_MATH_FP16) return (float)(_Float16)x;
    if (m == CT_MATH_F32 || std::isnan(x)) return x;
    const unsigned dropped = m == CT_MATH_TF32 ? 13 : 16;
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    u += ((1u << (dropped - 1)) - 1) + ((u >> dropped) & 1); /* to nearest, ties to even */
    u &= ~((1u << dropped) - 1);
    std::memcpy(&x, &u, sizeof x);
    return x;
}

/* An operand of a GEMM or convolution as NVIDIA's libraries read it under math mode m: float32
 * inputs rounded (tensor_core_input) into a copy; float64, exact float32 and NULL as they are. */
struct operand {
    on_cpu view;
    ct_tensor copy{};
    operand(const ct_tensor *g, ct_math_mode m) : view(g) {
        if (!g || g->dtype != CT_F32 || m == CT_MATH_F32) return;
        if (ct_tensor_alloc(&copy, CT_F32, CT_CPU, g->ndim, g->shape) != CT_OK)
            ct_abort_at(__FILE__, __LINE__, "%s", ct_last_error());
        const float *from = (const float *)g->data;
        float *to = (float *)copy.data;
        for (int64_t i = 0, n = ct_tensor_numel(g); i < n; i++) to[i] = tensor_core_input(from[i], m);
    }
    ~operand() { ct_tensor_free(&copy); }
    operand(const operand &) = delete;
    operand &operator=(const operand &) = delete;
    const ct_tensor *get() { return copy.data ? &copy : view.get(); }
};

const ct_backend_ops &cpu() { return *ct_backend_for_kind(CT_DEVICE_CPU); }

}  // namespace

extern "C" int ct_cuda_device_count(void) { return emulated_devices(); }

extern "C" void ct_cuda_describe(int index, char *buf, size_t cap) {
    std::snprintf(buf, cap, "cuda:%d: the CUDA backend's kernels emulated on the host (tests/cuda/emulated)", index);
}

extern "C" double ct_cuda_peak_flops(int, ct_math_mode) { return 0.0; }
extern "C" ct_status ct_cuda_set_device(int index) {
    if (index < 0 || index >= emulated_devices())
        return ct_error(CT_ERR_INVALID_ARG, "emulated CUDA: no device cuda:%d", index);
    current_device = index;
    return CT_OK;
}
extern "C" int ct_cuda_current_device(void) { return current_device; }
extern "C" void ct_cuda_use_device(int index) {
    if (ct_cuda_set_device(index) != CT_OK) ct_abort_at(__FILE__, __LINE__, "%s", ct_last_error());
}

/* A kernel reads memory of the device it runs on, the calling thread's current one: with several
 * devices, an argument inside another device's allocation is a launch on the wrong device. */
void ct_emu_check_current_device(const void *p) {
    std::lock_guard<std::mutex> hold(memory_lock);
    auto it = live.upper_bound((const unsigned char *)p);
    if (it == live.begin()) return;
    --it;
    if ((const unsigned char *)p >= it->first + std::max<size_t>(it->second.bytes, 1)) return;
    if (it->second.device != current_device)
        ct_abort_at(__FILE__, __LINE__, "emulated CUDA: a kernel on cuda:%d given memory of cuda:%d (%p)",
                    current_device, it->second.device, p);
}

extern "C" ct_status ct_cuda_malloc(int device, size_t bytes, void **out) {
    void *p = std::calloc(1, bytes ? bytes : 1);
    if (!p) return ct_error(CT_ERR_NOMEM, "emulated CUDA: cannot allocate %zu bytes", bytes);
    std::lock_guard<std::mutex> hold(memory_lock);
    live[(const unsigned char *)p] = {bytes, device, ++allocations_made};
    allocated += bytes;
    peak = std::max(peak, allocated);
    *out = p;
    return CT_OK;
}

extern "C" void ct_cuda_free(int, void *p) {
    if (!p) return;
    {
        std::lock_guard<std::mutex> hold(memory_lock);
        auto it = live.find((const unsigned char *)p);
        if (it == live.end()) ct_abort_at(__FILE__, __LINE__, "emulated CUDA: free of %p, not an allocation", p);
        allocated -= it->second.bytes;
        live.erase(it);
    }
    std::free(p);
}

extern "C" ct_status ct_cuda_host_alloc(size_t bytes, void **out) {
    *out = std::calloc(1, bytes ? bytes : 1);
    return *out ? CT_OK : ct_error(CT_ERR_NOMEM, "emulated CUDA: cannot allocate %zu pinned bytes", bytes);
}
extern "C" void ct_cuda_host_free(void *p) { std::free(p); }

/* Copies and memsets make the device they work on current, as cuda_rt.cu's do. */
extern "C" ct_status ct_cuda_memcpy(void *dst, ct_device dd, const void *src, ct_device sd, size_t bytes) {
    ct_cuda_use_device(dd.kind == CT_DEVICE_CUDA ? dd.index : sd.index);
    if (bytes) std::memmove(dst, src, bytes);
    return CT_OK;
}
extern "C" ct_status ct_cuda_memcpy_async(void *dst, ct_device, const void *src, ct_device, size_t bytes) {
    if (bytes) std::memmove(dst, src, bytes);
    return CT_OK;
}
extern "C" void ct_cuda_memset_zero(int device, void *dst, size_t bytes) {
    ct_cuda_use_device(device);
    std::memset(dst, 0, bytes);
}

/* Events: every stream is the host's one order, so each has passed when it is recorded. */
/* Events: every stream is the host's one order, so each has passed when it is recorded. What a GPU
 * would refuse or race on is refused here: an event recorded on a thread whose current device is not
 * the event's, and an upload to memory whose zeroing (on the allocating thread's stream, which the
 * copy stream does not follow) no `after` event covers. */
struct emu_event {
    int device;
    uint64_t allocations; /* allocations made when it was last recorded */
};
extern "C" ct_status ct_cuda_event_create(int index, void **out) {
    emu_event *e = new (std::nothrow) emu_event{index, 0};
    *out = e;
    return e ? CT_OK : ct_error(CT_ERR_NOMEM, "out of memory");
}
extern "C" void ct_cuda_event_destroy(void *event) { delete (emu_event *)event; }
extern "C" ct_status ct_cuda_event_record(void *event) {
    emu_event *e = (emu_event *)event;
    if (e->device != current_device)
        ct_abort_at(__FILE__, __LINE__, "emulated CUDA: an event of cuda:%d recorded on cuda:%d's stream", e->device,
                    current_device);
    std::lock_guard<std::mutex> hold(memory_lock);
    e->allocations = allocations_made;
    return CT_OK;
}
extern "C" ct_status ct_cuda_event_wait(void *) { return CT_OK; }
extern "C" ct_status ct_cuda_upload(int index, void *dst, const void *src, size_t bytes, void *after, void *done) {
    emu_event *a = (emu_event *)after, *d = (emu_event *)done;
    if (!d || d->device != index || (a && a->device != index))
        ct_abort_at(__FILE__, __LINE__, "emulated CUDA: an upload to cuda:%d without its done event, or with events of "
                    "another device", index);
    {
        std::lock_guard<std::mutex> hold(memory_lock);
        auto it = live.upper_bound((const unsigned char *)dst);
        if (it != live.begin() && (--it, (const unsigned char *)dst < it->first + it->second.bytes) &&
            (!a || a->allocations < it->second.zeroed))
            ct_abort_at(__FILE__, __LINE__, "emulated CUDA: an upload to %p may run before the zeroing of its new "
                        "memory: no `after` event recorded since it was allocated", dst);
    }
    std::memcpy(dst, src, bytes);
    return CT_OK;
}

/* A download reads memory of its own device, on that device's stream (cuda_rt.cu makes it current). */
extern "C" ct_status ct_cuda_download(int index, void *dst, const void *src, size_t bytes, void *done) {
    emu_event *d = (emu_event *)done;
    if (!d || d->device != index)
        ct_abort_at(__FILE__, __LINE__, "emulated CUDA: a download from cuda:%d without its done event, or with an "
                    "event of another device", index);
    ct_cuda_use_device(index);
    if (bytes) ct_emu_check_current_device(src);
    std::memcpy(dst, src, bytes);
    return ct_cuda_event_record(done);
}

/* Streams: a token each, all in the host's one order. */
static thread_local void *current_stream;
extern "C" void *ct_cuda_stream(void) { return current_stream; }
extern "C" void ct_cuda_use_stream(void *stream) { current_stream = stream; }
extern "C" ct_status ct_cuda_stream_create(void **out) {
    *out = std::malloc(1);
    return *out ? CT_OK : ct_error(CT_ERR_NOMEM, "emulated CUDA: no stream");
}
extern "C" void ct_cuda_stream_destroy(void *stream) { std::free(stream); }
extern "C" ct_status ct_cuda_stream_synchronize(void) { return CT_OK; }
extern "C" ct_status ct_cuda_thread_stream_begin(int index, void **out) {
    ct_cuda_use_device(index);
    CT_TRY(ct_cuda_stream_create(out));
    ct_cuda_use_stream(*out);
    return CT_OK;
}
extern "C" void ct_cuda_thread_stream_end(int index, void *stream) {
    ct_cuda_use_device(index);
    if (ct_cuda_stream() != stream) ct_abort_at(__FILE__, __LINE__, "emulated CUDA: a thread's stream ended elsewhere");
    ct_cuda_use_stream(nullptr);
    ct_cuda_stream_destroy(stream);
}
cudaStream_t ct_cuda_stream_t(void) { return (cudaStream_t)current_stream; }

extern "C" size_t ct_cuda_peak_allocated(int) {
    std::lock_guard<std::mutex> hold(memory_lock);
    return peak;
}
extern "C" void ct_cuda_reset_peak(int) {
    std::lock_guard<std::mutex> hold(memory_lock);
    peak = allocated;
}

extern "C" void ct_cuda_check_at(int err, const char *what, const char *file, int line) {
    if (err != 0) ct_abort_at(file, line, "%s failed (%d)", what, err);
}
void ct_cublas_check_at(cublasStatus_t s, const char *what, const char *file, int line) {
    ct_cuda_check_at(s, what, file, line);
}
void ct_cudnn_check_at(cudnnStatus_t s, const char *what, const char *file, int line) {
    ct_cuda_check_at(s, what, file, line);
}
cublasHandle_t ct_cublas_handle(void) { return nullptr; }
cudnnHandle_t ct_cudnn_handle(void) { return nullptr; }
cublasLtHandle_t ct_cublaslt_handle(void) {
    cublasLtHandle_t h;
    cublasLtCreate(&h);
    return h;
}

void *ct_cuda_workspace(size_t bytes) {
    if (workspace.size() < bytes) workspace.resize(bytes);
    return workspace.data();
}

/* --- what NVIDIA's libraries do on a GPU: the CPU backend's kernels on the same memory ---------- */

extern "C" void ct_cuda_set_math_mode(ct_math_mode m) { math_mode = m; }
extern "C" ct_math_mode ct_cuda_math_mode(void) { return math_mode; }

/* What NVIDIA's libraries are given lives on the thread's current device (NULL tensors skipped). */
static void on_current_device(std::initializer_list<const ct_tensor *> ts) {
    for (const ct_tensor *t : ts)
        if (t) ct_emu_check_current_device(t->data);
}

/* cuBLAS's float32 compute types (blas.cu): tensor cores that round the inputs under the math
 * mode and accumulate in float32. */
void ct_emu_gemm(ct_math_mode mode, bool trans_a, bool trans_b, double alpha, const ct_tensor *a, const ct_tensor *b,
                 double beta, ct_tensor *c) {
    on_current_device({a, b, c});
    operand ca(a, mode), cb(b, mode);
    on_cpu cc(c);
    cpu().gemm(trans_a, trans_b, alpha, ca.get(), cb.get(), beta, cc.get());
}

extern "C" void ct_cuda_op_gemm(bool trans_a, bool trans_b, double alpha, const ct_tensor *a, const ct_tensor *b,
                                double beta, ct_tensor *c) {
    ct_emu_gemm(math_mode, trans_a, trans_b, alpha, a, b, beta, c);
}

/* What cuDNN's math type may do to a float32 convolution's inputs under the math mode (conv.cu's
 * wanted_math): TF32 tensor cores in tf32 and bf16 modes, down-conversion to fp16 in fp16 mode. */
static ct_math_mode conv_math(void) { return math_mode == CT_MATH_BF16 ? CT_MATH_TF32 : math_mode; }

/* The CPU's convolution needs its own scratch: a slot per thread for the batch given. */
static ct_tensor conv_scratch(const ct_conv2d_geom *g, const ct_tensor *x) {
    const int64_t shape[1] = {ct_conv2d_workspace_numel(g, x->shape[0])};
    ct_tensor ws;
    if (ct_tensor_alloc(&ws, x->dtype, CT_CPU, 1, shape) != CT_OK)
        ct_abort_at(__FILE__, __LINE__, "%s", ct_last_error());
    return ws;
}

extern "C" void ct_cuda_op_conv2d_forward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                                          const ct_tensor *bias, ct_tensor *y, ct_tensor *) {
    CT_ASSERT(!g->relu && !g->pool2x2); /* as cuDNN's path: the activation is a layer of its own */
    on_current_device({x, weight, bias, y});
    operand cx(x, conv_math()), cw(weight, conv_math());
    on_cpu cb(bias), cy(y);
    ct_tensor ws = conv_scratch(g, x);
    cpu().conv2d_forward(g, cx.get(), cw.get(), cb.get(), cy.get(), &ws);
    ct_tensor_free(&ws);
}

extern "C" void ct_cuda_op_conv2d_backward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                                           const ct_tensor *dy, ct_tensor *dweight, ct_tensor *dbias, ct_tensor *dx,
                                           ct_tensor *) {
    on_current_device({x, weight, dy, dweight, dbias, dx});
    operand cx(x, conv_math()), cw(weight, conv_math()), cdy(dy, conv_math());
    on_cpu exact_dy(dy), cdw(dweight), cdb(dbias), cdx(dx);
    ct_tensor ws = conv_scratch(g, x);
    cpu().conv2d_backward(g, cx.get(), cw.get(), cdy.get(), cdw.get(), nullptr, cdx.get(), &ws);
    /* the bias gradient is the backend's own kernel's sum (conv.cu), of the exact dy */
    if (dbias) cpu().conv2d_backward(g, cx.get(), cw.get(), exact_dy.get(), nullptr, cdb.get(), nullptr, &ws);
    ct_tensor_free(&ws);
}
