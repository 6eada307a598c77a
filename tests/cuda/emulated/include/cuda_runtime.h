/* The CUDA runtime's types and the few calls the backend's kernel files make, for the host emulation
 * (../cuda_emulation.h): device memory is host memory, every stream is the host's one order, so an
 * asynchronous copy or memset is done when the call returns. */
#ifndef CT_FAKE_CUDA_RUNTIME_H
#define CT_FAKE_CUDA_RUNTIME_H

#include <cstddef>
#include <cstring>

#include "../cuda_emulation.h"

typedef struct ct_emu_stream *cudaStream_t;
typedef int cudaError_t;
enum { cudaSuccess = 0 };
enum cudaMemcpyKind {
    cudaMemcpyHostToHost,
    cudaMemcpyHostToDevice,
    cudaMemcpyDeviceToHost,
    cudaMemcpyDeviceToDevice,
    cudaMemcpyDefault
};

inline cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t = nullptr) {
    std::memset(p, value, bytes);
    return cudaSuccess;
}

inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind, cudaStream_t = nullptr) {
    std::memcpy(dst, src, bytes);
    return cudaSuccess;
}

inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    return cudaMemcpyAsync(dst, src, bytes, kind);
}

inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

/* A kernel's opt-in to more than 48 KiB of dynamic shared memory: nothing to do on the host, where
 * ct_emu_launch holds a launch to the hardware's 227 KiB. */
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
template <typename F> cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) { return cudaSuccess; }
inline cudaError_t cudaGetLastError(void) { return cudaSuccess; }
inline const char *cudaGetErrorString(cudaError_t) { return "no error (emulated)"; }

#endif
