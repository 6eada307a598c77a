/* What the CUDA backend takes from the CUDA runtime, cuBLAS and cuDNN, in the host emulation: the
 * functions of backends/cuda/cuda_rt.h and cuda_handles.h (one device "cuda:0" whose memory is host
 * memory, streams that are the host's one order, a workspace per thread) and the two families the
 * backend leaves to NVIDIA's libraries, GEMMs (blas.cu) and convolutions (conv.cu), done by the CPU
 * backend on the same memory. Every other op of the table (backends/cuda/backend_cuda.c) is the
 * backend's own kernel code, compiled from its .cu file by the host compiler
 * (rewrite_launches.py, cuda_emulation.h). So the emulated module checks the kernels' indexing,
 * synchronisation and arithmetic and the table's wiring, not NVIDIA's libraries or real streams. */
#include "cuda_emulation.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "backends/cuda/cuda_handles.h"
#include "backends/cuda/ops_cuda.h"
#include "core/ops/backend.h"

namespace {

std::mutex memory_lock;
std::unordered_map<void *, size_t> live;
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

const ct_backend_ops &cpu() { return *ct_backend_for_kind(CT_DEVICE_CPU); }

}  // namespace

extern "C" int ct_cuda_device_count(void) { return 1; }

extern "C" void ct_cuda_describe(int index, char *buf, size_t cap) {
    std::snprintf(buf, cap, "cuda:%d: the CUDA backend's kernels emulated on the host (tests/cuda/emulated)", index);
}

extern "C" double ct_cuda_peak_flops(int, ct_math_mode) { return 0.0; }
extern "C" ct_status ct_cuda_set_device(int index) {
    return index == 0 ? CT_OK : ct_error(CT_ERR_INVALID_ARG, "emulated CUDA: no device cuda:%d", index);
}
extern "C" int ct_cuda_current_device(void) { return 0; }

extern "C" ct_status ct_cuda_malloc(int, size_t bytes, void **out) {
    void *p = std::calloc(1, bytes ? bytes : 1);
    if (!p) return ct_error(CT_ERR_NOMEM, "emulated CUDA: cannot allocate %zu bytes", bytes);
    std::lock_guard<std::mutex> hold(memory_lock);
    live[p] = bytes;
    allocated += bytes;
    peak = std::max(peak, allocated);
    *out = p;
    return CT_OK;
}

extern "C" void ct_cuda_free(int, void *p) {
    if (!p) return;
    {
        std::lock_guard<std::mutex> hold(memory_lock);
        auto it = live.find(p);
        if (it == live.end()) ct_abort_at(__FILE__, __LINE__, "emulated CUDA: free of %p, not an allocation", p);
        allocated -= it->second;
        live.erase(it);
    }
    std::free(p);
}

extern "C" ct_status ct_cuda_host_alloc(size_t bytes, void **out) {
    *out = std::calloc(1, bytes ? bytes : 1);
    return *out ? CT_OK : ct_error(CT_ERR_NOMEM, "emulated CUDA: cannot allocate %zu pinned bytes", bytes);
}
extern "C" void ct_cuda_host_free(void *p) { std::free(p); }

extern "C" ct_status ct_cuda_memcpy(void *dst, ct_device, const void *src, ct_device, size_t bytes) {
    if (bytes) std::memmove(dst, src, bytes);
    return CT_OK;
}
extern "C" ct_status ct_cuda_memcpy_async(void *dst, ct_device dd, const void *src, ct_device sd, size_t bytes) {
    return ct_cuda_memcpy(dst, dd, src, sd, bytes);
}
extern "C" void ct_cuda_memset_zero(int, void *dst, size_t bytes) { std::memset(dst, 0, bytes); }

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

void *ct_cuda_workspace(size_t bytes) {
    if (workspace.size() < bytes) workspace.resize(bytes);
    return workspace.data();
}

/* --- what NVIDIA's libraries do on a GPU: the CPU backend's kernels on the same memory ---------- */

extern "C" void ct_cuda_set_math_mode(ct_math_mode m) { math_mode = m; }
extern "C" ct_math_mode ct_cuda_math_mode(void) { return math_mode; }

extern "C" void ct_cuda_op_gemm(bool trans_a, bool trans_b, double alpha, const ct_tensor *a, const ct_tensor *b,
                                double beta, ct_tensor *c) {
    on_cpu ca(a), cb(b), cc(c);
    cpu().gemm(trans_a, trans_b, alpha, ca.get(), cb.get(), beta, cc.get());
}

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
    on_cpu cx(x), cw(weight), cb(bias), cy(y);
    ct_tensor ws = conv_scratch(g, x);
    cpu().conv2d_forward(g, cx.get(), cw.get(), cb.get(), cy.get(), &ws);
    ct_tensor_free(&ws);
}

extern "C" void ct_cuda_op_conv2d_backward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                                           const ct_tensor *dy, ct_tensor *dweight, ct_tensor *dbias, ct_tensor *dx,
                                           ct_tensor *) {
    on_cpu cx(x), cw(weight), cdy(dy), cdw(dweight), cdb(dbias), cdx(dx);
    ct_tensor ws = conv_scratch(g, x);
    cpu().conv2d_backward(g, cx.get(), cw.get(), cdy.get(), cdw.get(), cdb.get(), cdx.get(), &ws);
    ct_tensor_free(&ws);
}
