/* cuBLAS's handle and status types, for the host emulation's compile of the kernel files (which
 * declare, not call, cuBLAS). */
#ifndef CT_FAKE_CUBLAS_V2_H
#define CT_FAKE_CUBLAS_V2_H
typedef struct ct_emu_cublas *cublasHandle_t;
typedef int cublasStatus_t;
#endif
