/* The CUDA runtime glue of cuda_rt.h and cuda_handles.h: memory, copies, per-thread streams and
 * library handles. A device's default compute stream is one non-blocking stream per process and
 * device (never the legacy NULL stream, which would serialise against every other stream). */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "backends/cuda/cuda_handles.h"

#define MAX_DEVICES 64

namespace {

std::mutex mu; /* guards everything below */
cudaStream_t compute_stream[MAX_DEVICES];
size_t allocated[MAX_DEVICES], peak[MAX_DEVICES];
std::unordered_map<void *, size_t> *sizes; /* live device allocations (cudaFree does not tell sizes) */

struct thread_state {
    cudaStream_t current[MAX_DEVICES]; /* NULL: the device's compute stream */
    cudaStream_t copy[MAX_DEVICES];    /* the thread's uploads (ct_cuda_upload), beside its compute stream */
    cublasHandle_t blas[MAX_DEVICES];
    cublasLtHandle_t lt[MAX_DEVICES];
    cudnnHandle_t dnn[MAX_DEVICES];
    void *ws[MAX_DEVICES];
    size_t ws_bytes[MAX_DEVICES];
};
thread_local thread_state ts;

int device_now() {
    int d = 0;
    CT_CUDA_CHECK(cudaGetDevice(&d));
    if (d < 0 || d >= MAX_DEVICES) ct_abort_at(__FILE__, __LINE__, "CUDA device %d beyond %d", d, MAX_DEVICES);
    return d;
}

cudaStream_t default_stream(int d) {
    std::lock_guard<std::mutex> lock(mu);
    if (!compute_stream[d]) CT_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_stream[d], cudaStreamNonBlocking));
    return compute_stream[d];
}

/* The calling thread's copy stream on device d (current): a thread's uploads wait only for its own
 * work, never for another thread's (an evaluator's batches for training's). */
cudaStream_t upload_stream(int d) {
    if (!ts.copy[d]) CT_CUDA_CHECK(cudaStreamCreateWithFlags(&ts.copy[d], cudaStreamNonBlocking));
    return ts.copy[d];
}

/* Runs f with `device` current, restoring the caller's device after. */
template <typename F> auto on_device(int device, F f) -> decltype(f()) {
    int prev = device_now();
    if (prev != device) CT_CUDA_CHECK(cudaSetDevice(device));
    auto r = f();
    if (prev != device) CT_CUDA_CHECK(cudaSetDevice(prev));
    return r;
}

}  // namespace

extern "C" void ct_cuda_check_at(int err, const char *what, const char *file, int line) {
    if (err == cudaSuccess) return;
    int d = -1;
    cudaGetDevice(&d);
    ct_abort_at(file, line, "CUDA error on cuda:%d in %s: %s (%s)", d, what, cudaGetErrorString((cudaError_t)err),
                cudaGetErrorName((cudaError_t)err));
}

void ct_cublas_check_at(cublasStatus_t s, const char *what, const char *file, int line) {
    if (s == CUBLAS_STATUS_SUCCESS) return;
    ct_abort_at(file, line, "cuBLAS error in %s: %s", what, cublasGetStatusString(s));
}

void ct_cudnn_check_at(cudnnStatus_t s, const char *what, const char *file, int line) {
    if (s == CUDNN_STATUS_SUCCESS) return;
    ct_abort_at(file, line, "cuDNN error in %s: %s", what, cudnnGetErrorString(s));
}

extern "C" ct_status ct_cuda_set_device(int index) {
    cudaError_t e = cudaSetDevice(index);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return ct_error(CT_ERR_DEVICE, "cuda:%d: cannot select the device: %s", index, cudaGetErrorString(e));
    }
    return CT_OK;
}

extern "C" int ct_cuda_current_device(void) { return device_now(); }

extern "C" void ct_cuda_use_device(int index) {
    if (device_now() != index) CT_CUDA_CHECK(cudaSetDevice(index));
}

extern "C" ct_status ct_cuda_malloc(int device, size_t bytes, void **out) {
    *out = NULL;
    if (device < 0 || device >= MAX_DEVICES) return ct_error(CT_ERR_DEVICE, "cuda:%d: no such device", device);
    void *p = NULL;
    /* Zeroed like host tensors, on the calling thread's stream (ordered before its ops that use it;
     * another thread's stream reaches it through ct_cuda_thread_stream_begin's order or an event). */
    cudaError_t e = on_device(device, [&] {
        cudaError_t r = cudaMalloc(&p, bytes ? bytes : 1);
        if (r == cudaSuccess) r = cudaMemsetAsync(p, 0, bytes ? bytes : 1, ct_cuda_stream_t());
        return r;
    });
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (p) cudaFree(p);
        size_t free_b = 0, total_b = 0;
        on_device(device, [&] { return cudaMemGetInfo(&free_b, &total_b); });
        return ct_error(CT_ERR_NOMEM, "cuda:%d: cannot allocate %zu bytes (%zu of %zu bytes free): %s", device, bytes,
                        free_b, total_b, cudaGetErrorString(e));
    }
    std::lock_guard<std::mutex> lock(mu);
    if (!sizes) sizes = new std::unordered_map<void *, size_t>();
    (*sizes)[p] = bytes;
    allocated[device] += bytes;
    if (allocated[device] > peak[device]) peak[device] = allocated[device];
    *out = p;
    return CT_OK;
}

extern "C" void ct_cuda_free(int device, void *p) {
    if (!p) return;
    /* Whatever a stream still does with the memory finishes first (cudaFree synchronises). */
    on_device(device, [&] { return (CT_CUDA_CHECK(cudaFree(p)), 0); });
    std::lock_guard<std::mutex> lock(mu);
    auto it = sizes ? sizes->find(p) : decltype(sizes->end()){};
    if (sizes && it != sizes->end()) {
        allocated[device] -= it->second;
        sizes->erase(it);
    }
}

extern "C" ct_status ct_cuda_host_alloc(size_t bytes, void **out) {
    cudaError_t e = cudaHostAlloc(out, bytes ? bytes : 1, cudaHostAllocPortable);
    if (e != cudaSuccess) {
        cudaGetLastError();
        *out = NULL;
        return ct_error(CT_ERR_NOMEM, "cannot allocate %zu bytes of pinned host memory: %s", bytes,
                        cudaGetErrorString(e));
    }
    memset(*out, 0, bytes);
    return CT_OK;
}

extern "C" void ct_cuda_host_free(void *p) {
    if (p) CT_CUDA_CHECK(cudaFreeHost(p));
}

cudaStream_t ct_cuda_stream_t(void) {
    int d = device_now();
    return ts.current[d] ? ts.current[d] : default_stream(d);
}

extern "C" void *ct_cuda_stream(void) { return (void *)ct_cuda_stream_t(); }

extern "C" void ct_cuda_use_stream(void *stream) { ts.current[device_now()] = (cudaStream_t)stream; }

extern "C" ct_status ct_cuda_stream_create(void **out) {
    cudaStream_t s;
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return ct_error(CT_ERR_DEVICE, "cannot create a CUDA stream: %s", cudaGetErrorString(e));
    }
    *out = (void *)s;
    return CT_OK;
}

extern "C" void ct_cuda_stream_destroy(void *stream) {
    if (stream) CT_CUDA_CHECK(cudaStreamDestroy((cudaStream_t)stream));
}

extern "C" ct_status ct_cuda_thread_stream_begin(int index, void **out) {
    *out = NULL;
    ct_cuda_use_device(index);
    void *s = NULL;
    CT_TRY(ct_cuda_stream_create(&s));
    /* after what the device's shared stream holds so far (a replica's zeroing, its first weights) */
    cudaEvent_t shared_point;
    CT_CUDA_CHECK(cudaEventCreateWithFlags(&shared_point, cudaEventDisableTiming));
    CT_CUDA_CHECK(cudaEventRecord(shared_point, default_stream(index)));
    CT_CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)s, shared_point, 0));
    CT_CUDA_CHECK(cudaEventDestroy(shared_point)); /* released once the wait is done with it */
    ct_cuda_use_stream(s);
    *out = s;
    return CT_OK;
}

extern "C" void ct_cuda_thread_stream_end(int index, void *stream) {
    ct_cuda_use_device(index);
    CT_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)stream));
    /* what the thread kept on the device goes with its stream (made again if it works on) */
    if (ts.copy[index]) {
        CT_CUDA_CHECK(cudaStreamSynchronize(ts.copy[index]));
        ct_cuda_stream_destroy(ts.copy[index]);
        ts.copy[index] = nullptr;
    }
    if (ts.blas[index]) CT_CUBLAS_CHECK(cublasDestroy(ts.blas[index]));
    if (ts.lt[index]) CT_CUBLAS_CHECK(cublasLtDestroy(ts.lt[index]));
    if (ts.dnn[index]) CT_CUDNN_CHECK(cudnnDestroy(ts.dnn[index]));
    ct_cuda_free(index, ts.ws[index]);
    ts.blas[index] = nullptr, ts.lt[index] = nullptr, ts.dnn[index] = nullptr, ts.ws[index] = nullptr;
    ts.ws_bytes[index] = 0;
    ct_cuda_use_stream(NULL);
    ct_cuda_stream_destroy(stream);
}

extern "C" ct_status ct_cuda_stream_synchronize(void) {
    cudaError_t e = cudaStreamSynchronize(ct_cuda_stream_t());
    if (e != cudaSuccess) ct_cuda_check_at((int)e, "cudaStreamSynchronize", __FILE__, __LINE__);
    return CT_OK;
}

static cudaMemcpyKind kind_of(ct_device dd, ct_device sd) {
    bool d_gpu = dd.kind == CT_DEVICE_CUDA, s_gpu = sd.kind == CT_DEVICE_CUDA;
    return d_gpu && s_gpu ? cudaMemcpyDeviceToDevice
           : d_gpu        ? cudaMemcpyHostToDevice
           : s_gpu        ? cudaMemcpyDeviceToHost
                          : cudaMemcpyHostToHost;
}

extern "C" ct_status ct_cuda_memcpy_async(void *dst, ct_device dd, const void *src, ct_device sd, size_t bytes) {
    if (!bytes) return CT_OK;
    cudaMemcpyKind k = kind_of(dd, sd);
    if (k == cudaMemcpyHostToHost) {
        memcpy(dst, src, bytes);
        return CT_OK;
    }
    CT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k, ct_cuda_stream_t()));
    return CT_OK;
}

extern "C" ct_status ct_cuda_memcpy(void *dst, ct_device dd, const void *src, ct_device sd, size_t bytes) {
    /* on the stream of the device written to (read from, for a copy to the host), ordered with its ops */
    ct_cuda_use_device(dd.kind == CT_DEVICE_CUDA ? dd.index : sd.index);
    CT_TRY(ct_cuda_memcpy_async(dst, dd, src, sd, bytes));
    /* The host reads (or may overwrite) its side right after: wait for the copy. */
    if (bytes && kind_of(dd, sd) != cudaMemcpyDeviceToDevice && kind_of(dd, sd) != cudaMemcpyHostToHost)
        return ct_cuda_stream_synchronize();
    return CT_OK;
}

extern "C" void ct_cuda_memset_zero(int device, void *dst, size_t bytes) {
    ct_cuda_use_device(device);
    if (bytes) CT_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, ct_cuda_stream_t()));
}

extern "C" size_t ct_cuda_peak_allocated(int device) {
    std::lock_guard<std::mutex> lock(mu);
    return device >= 0 && device < MAX_DEVICES ? peak[device] : 0;
}

extern "C" void ct_cuda_reset_peak(int device) {
    std::lock_guard<std::mutex> lock(mu);
    if (device >= 0 && device < MAX_DEVICES) peak[device] = allocated[device];
}

cublasHandle_t ct_cublas_handle(void) {
    int d = device_now();
    if (!ts.blas[d]) {
        CT_CUBLAS_CHECK(cublasCreate(&ts.blas[d]));
        /* Deterministic results: no atomics-based reductions inside cuBLAS. */
        CT_CUBLAS_CHECK(cublasSetAtomicsMode(ts.blas[d], CUBLAS_ATOMICS_NOT_ALLOWED));
    }
    CT_CUBLAS_CHECK(cublasSetStream(ts.blas[d], ct_cuda_stream_t()));
    return ts.blas[d];
}

cublasLtHandle_t ct_cublaslt_handle(void) {
    int d = device_now();
    if (!ts.lt[d]) CT_CUBLAS_CHECK(cublasLtCreate(&ts.lt[d]));
    return ts.lt[d];
}

cudnnHandle_t ct_cudnn_handle(void) {
    int d = device_now();
    if (!ts.dnn[d]) CT_CUDNN_CHECK(cudnnCreate(&ts.dnn[d]));
    CT_CUDNN_CHECK(cudnnSetStream(ts.dnn[d], ct_cuda_stream_t()));
    return ts.dnn[d];
}

void *ct_cuda_workspace(size_t bytes) {
    int d = device_now();
    if (ts.ws_bytes[d] < bytes) {
        if (ts.ws[d]) ct_cuda_free(d, ts.ws[d]);
        ts.ws[d] = NULL;
        ts.ws_bytes[d] = 0;
        if (ct_cuda_malloc(d, bytes, &ts.ws[d]) != CT_OK)
            ct_abort_at(__FILE__, __LINE__, "cuda:%d: no memory for a %zu-byte library workspace", d, bytes);
        ts.ws_bytes[d] = bytes;
    }
    return ts.ws[d];
}

extern "C" ct_status ct_cuda_event_create(int index, void **out) {
    cudaEvent_t e = nullptr;
    cudaError_t r = on_device(index, [&] { return cudaEventCreateWithFlags(&e, cudaEventDisableTiming); });
    if (r != cudaSuccess) {
        cudaGetLastError();
        *out = NULL;
        return ct_error(CT_ERR_DEVICE, "cuda:%d: cannot create an event: %s", index, cudaGetErrorString(r));
    }
    *out = (void *)e;
    return CT_OK;
}

extern "C" void ct_cuda_event_destroy(void *event) {
    if (event) CT_CUDA_CHECK(cudaEventDestroy((cudaEvent_t)event));
}

extern "C" ct_status ct_cuda_event_record(void *event) {
    CT_CUDA_CHECK(cudaEventRecord((cudaEvent_t)event, ct_cuda_stream_t()));
    return CT_OK;
}

extern "C" ct_status ct_cuda_event_wait(void *event) {
    CT_CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)event));
    return CT_OK;
}

extern "C" ct_status ct_cuda_download(int index, void *dst, const void *src, size_t bytes, void *done) {
    if (index < 0 || index >= MAX_DEVICES) return ct_error(CT_ERR_DEVICE, "cuda:%d: no such device", index);
    return on_device(index, [&] {
        /* on the compute stream: after the step that wrote src, before any that writes it again */
        if (bytes) CT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ct_cuda_stream_t()));
        CT_CUDA_CHECK(cudaEventRecord((cudaEvent_t)done, ct_cuda_stream_t()));
        return CT_OK;
    });
}

extern "C" ct_status ct_cuda_upload(int index, void *dst, const void *src, size_t bytes, void *after, void *done) {
    if (index < 0 || index >= MAX_DEVICES) return ct_error(CT_ERR_DEVICE, "cuda:%d: no such device", index);
    return on_device(index, [&] {
        cudaStream_t copy = upload_stream(index);
        if (after) CT_CUDA_CHECK(cudaStreamWaitEvent(copy, (cudaEvent_t)after, 0));
        if (bytes) CT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, copy));
        CT_CUDA_CHECK(cudaEventRecord((cudaEvent_t)done, copy));
        /* the caller's next ops read dst: its stream waits for the copy, the host does not */
        CT_CUDA_CHECK(cudaStreamWaitEvent(ct_cuda_stream_t(), (cudaEvent_t)done, 0));
        return CT_OK;
    });
}
