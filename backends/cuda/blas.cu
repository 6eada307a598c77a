/* GEMM on the GPU through cuBLAS, and the per-thread math mode that says what float32 GEMMs and
 * convolutions may compute with inside.
 *
 * Tensors are row-major and cuBLAS is column-major. A row-major [r, c] matrix is, read
 * column-major, its transpose [c, r] with leading dimension c; so instead of C = op(A) op(B) we ask
 * cuBLAS for C^T = op(B)^T op(A)^T, passing B first and A second with the SAME transpose flags:
 * the memory of row-major B read column-major already is B^T, which is op(B)^T when op is the
 * identity, and asking cuBLAS to transpose it gives B, which is op(B)^T when op transposes. C^T
 * read column-major with leading dimension n is row-major C, so nothing is copied. */
#include <climits>

#include "backends/cuda/cuda_handles.h"
#include "backends/cuda/ops_cuda.h"

static thread_local ct_math_mode math_mode = CT_MATH_F32;

extern "C" void ct_cuda_set_math_mode(ct_math_mode m) {
    CT_ASSERT(m == CT_MATH_F32 || m == CT_MATH_TF32 || m == CT_MATH_BF16 || m == CT_MATH_FP16);
    math_mode = m;
}

extern "C" ct_math_mode ct_cuda_math_mode(void) { return math_mode; }

extern "C" void ct_cuda_op_gemm(bool trans_a, bool trans_b, double alpha, const ct_tensor *a, const ct_tensor *b,
                                double beta, ct_tensor *c) {
    CT_ASSERT(a->ndim == 2 && b->ndim == 2 && c->ndim == 2);
    CT_ASSERT(a->dtype == b->dtype && a->dtype == c->dtype);
    CT_ASSERT(a->device.kind == CT_DEVICE_CUDA && b->device.kind == CT_DEVICE_CUDA && c->device.kind == CT_DEVICE_CUDA);
    int64_t m = trans_a ? a->shape[1] : a->shape[0];
    int64_t k = trans_a ? a->shape[0] : a->shape[1];
    int64_t kb = trans_b ? b->shape[1] : b->shape[0];
    int64_t n = trans_b ? b->shape[0] : b->shape[1];
    CT_ASSERT(k == kb && c->shape[0] == m && c->shape[1] == n);
    CT_ASSERT(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX);
    if (m == 0 || n == 0) return;
    if (k == 0) {
        /* An empty sum: C = beta * C, which BLAS does too. cuBLAS would reject the zero leading
         * dimensions of the empty operands. beta == 0 overwrites (NaNs in C do not survive). */
        if (beta == 0.0)
            ct_cuda_op_fill(c, 0.0);
        else
            ct_cuda_op_scale(c, beta);
        return;
    }
    cublasHandle_t h = ct_cublas_handle();
    cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    /* Leading dimensions: the row length of each row-major buffer. */
    int lda = (int)a->shape[1], ldb = (int)b->shape[1], ldc = (int)n;
    if (a->dtype == CT_F32) {
        float al = (float)alpha, be = (float)beta;
        CT_CUBLAS_CHECK(cublasGemmEx(h, tb, ta, (int)n, (int)m, (int)k, &al, b->data, CUDA_R_32F, ldb, a->data,
                                     CUDA_R_32F, lda, &be, c->data, CUDA_R_32F, ldc,
                                     ct_cuda_f32_compute_type(math_mode), CUBLAS_GEMM_DEFAULT));
    } else if (a->dtype == CT_F64) {
        CT_CUBLAS_CHECK(cublasDgemm(h, tb, ta, (int)n, (int)m, (int)k, &alpha, (const double *)b->data, ldb,
                                    (const double *)a->data, lda, &beta, (double *)c->data, ldc));
    } else {
        ct_abort_at(__FILE__, __LINE__, "gemm: unsupported dtype %s", ct_dtype_name(a->dtype));
    }
}
