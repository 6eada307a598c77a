/* cuBLAS, cuBLASLt and cuDNN handles for the kernels (C++ only: included by .cu files). One handle of
 * each per (thread, device); cuBLAS's and cuDNN's are bound to the thread's current stream each time
 * they are fetched, so ops enqueue on whatever stream their thread runs (cuBLASLt takes the stream
 * with each call). Workspace for the libraries is owned here too. */
#ifndef CT_CUDA_HANDLES_H
#define CT_CUDA_HANDLES_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "backends/cuda/cuda_rt.h"

cudaStream_t ct_cuda_stream_t(void);
cublasHandle_t ct_cublas_handle(void);
cublasLtHandle_t ct_cublaslt_handle(void);
cudnnHandle_t ct_cudnn_handle(void);
/* A device buffer of at least `bytes` for library workspaces, reused (grown, never shrunk) per
 * (thread, device). Valid until the next call on this thread. */
void *ct_cuda_workspace(size_t bytes);

void ct_cublas_check_at(cublasStatus_t s, const char *what, const char *file, int line);
void ct_cudnn_check_at(cudnnStatus_t s, const char *what, const char *file, int line);
#define CT_CUBLAS_CHECK(call) ct_cublas_check_at((call), #call, __FILE__, __LINE__)
#define CT_CUDNN_CHECK(call) ct_cudnn_check_at((call), #call, __FILE__, __LINE__)

/* The cuBLAS compute type of a float32 GEMM under math mode m: exact float32, or tensor cores that
 * round the float32 inputs to tf32 / bf16 / fp16 and accumulate in float32. */
static inline cublasComputeType_t ct_cuda_f32_compute_type(ct_math_mode m) {
    switch (m) {
    case CT_MATH_F32: return CUBLAS_COMPUTE_32F;
    case CT_MATH_TF32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case CT_MATH_BF16: return CUBLAS_COMPUTE_32F_FAST_16BF;
    case CT_MATH_FP16: return CUBLAS_COMPUTE_32F_FAST_16F;
    }
    ct_abort_at(__FILE__, __LINE__, "gemm: unknown math mode %d", (int)m);
}

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
