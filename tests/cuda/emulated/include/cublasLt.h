/* The part of cuBLASLt that backends/cuda/linear.cu calls, for the host emulation
 * (../emulated_cublaslt.cpp): column-major GEMMs with the bias, GELU and bias-gradient epilogues,
 * described by the library's descriptor objects and chosen through its heuristic. The enumerators
 * are NVIDIA's names; their values are the emulation's own. */
#ifndef CT_FAKE_CUBLASLT_H
#define CT_FAKE_CUBLASLT_H

#include <cstddef>
#include <cstdint>

#include <cublas_v2.h>
#include <cuda_runtime.h>

typedef struct ct_emu_lt *cublasLtHandle_t;
typedef struct ct_emu_lt_op *cublasLtMatmulDesc_t;
typedef struct ct_emu_lt_layout *cublasLtMatrixLayout_t;
typedef struct ct_emu_lt_pref *cublasLtMatmulPreference_t;

typedef enum {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_GELU_AUX = 160,
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164,
    CUBLASLT_EPILOGUE_BGRADB = 512,
} cublasLtEpilogue_t;

typedef enum {
    CUBLASLT_MATMUL_DESC_TRANSA,
    CUBLASLT_MATMUL_DESC_TRANSB,
    CUBLASLT_MATMUL_DESC_EPILOGUE,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
} cublasLtMatmulDescAttributes_t;

typedef enum {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
} cublasLtMatmulPreferenceAttributes_t;

typedef struct {
    uint64_t data[8];
} cublasLtMatmulAlgo_t;

typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;

cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute,
                                        cudaDataType_t scale);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType_t type, uint64_t rows,
                                          uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t size);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t *results, int *count);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t op, const void *alpha, const void *a,
                              cublasLtMatrixLayout_t adesc, const void *b, cublasLtMatrixLayout_t bdesc,
                              const void *beta, const void *c, cublasLtMatrixLayout_t cdesc, void *d,
                              cublasLtMatrixLayout_t ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspace_bytes, cudaStream_t stream);
#endif
