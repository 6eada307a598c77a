/* cuBLAS's handle, status, operation and compute types, for the host emulation's compile of the
 * backend's files (the kernel files declare cuBLAS; linear.cu calls cuBLASLt, include/cublasLt.h). */
#ifndef CT_FAKE_CUBLAS_V2_H
#define CT_FAKE_CUBLAS_V2_H
typedef struct ct_emu_cublas *cublasHandle_t;
typedef int cublasStatus_t;
enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
typedef enum { CUBLAS_OP_N, CUBLAS_OP_T } cublasOperation_t;
typedef enum {
    CUBLAS_COMPUTE_32F,
    CUBLAS_COMPUTE_32F_FAST_TF32,
    CUBLAS_COMPUTE_32F_FAST_16BF,
    CUBLAS_COMPUTE_32F_FAST_16F,
} cublasComputeType_t;
typedef enum { CUDA_R_32F } cudaDataType_t;
inline const char *cublasGetStatusString(cublasStatus_t) { return "an error status (emulated)"; }
#endif
