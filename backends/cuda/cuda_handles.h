/* cuBLAS and cuDNN handles for the kernels (C++ only: included by .cu files). One handle of each per
 * (thread, device), bound to the thread's current stream each time it is fetched, so ops enqueue on
 * whatever stream their thread runs. Workspace for cuDNN is owned here too. */
#ifndef CT_CUDA_HANDLES_H
#define CT_CUDA_HANDLES_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "backends/cuda/cuda_rt.h"

cudaStream_t ct_cuda_stream_t(void);
cublasHandle_t ct_cublas_handle(void);
cudnnHandle_t ct_cudnn_handle(void);
/* A device buffer of at least `bytes` for library workspaces, reused (grown, never shrunk) per
 * (thread, device). Valid until the next call on this thread. */
void *ct_cuda_workspace(size_t bytes);

void ct_cublas_check_at(cublasStatus_t s, const char *what, const char *file, int line);
void ct_cudnn_check_at(cudnnStatus_t s, const char *what, const char *file, int line);
#define CT_CUBLAS_CHECK(call) ct_cublas_check_at((call), #call, __FILE__, __LINE__)
#define CT_CUDNN_CHECK(call) ct_cudnn_check_at((call), #call, __FILE__, __LINE__)

/* Launch geometry for n elements: 256 threads a block, blocks capped (kernels loop grid-stride). */
static inline unsigned ct_cuda_blocks(long long n) {
    long long b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 65535 * 8 ? 65535 * 8 : b);
}
#define CT_CUDA_THREADS 256
/* Checks the launch that just happened (a bad configuration fails here, not later). */
#define CT_CUDA_LAUNCHED() CT_CUDA_CHECK(cudaGetLastError())

/* fn<float> or fn<double> by the dtype of tensor t (another dtype is a caller's bug: abort). */
#define CT_CUDA_REAL_DISPATCH(t, fn, ...)                                                                              \
    do {                                                                                                               \
        if ((t)->dtype == CT_F32)                                                                                      \
            fn<float>(__VA_ARGS__);                                                                                    \
        else if ((t)->dtype == CT_F64)                                                                                 \
            fn<double>(__VA_ARGS__);                                                                                   \
        else                                                                                                           \
            ct_abort_at(__FILE__, __LINE__, "%s (cuda): unsupported dtype %s", #fn, ct_dtype_name((t)->dtype));        \
    } while (0)

#endif
