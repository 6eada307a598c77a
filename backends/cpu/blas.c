/* GEMM through OpenBLAS's CBLAS interface (OpenBLAS picks its own kernels for the CPU at run time;
 * the thread count it shares with our OpenMP loops is set in threads.c). */
#include <cblas.h>

#include "backends/cpu/cpu_impl.h"
#include "core/ops/ops.h"

void ct_cpu_gemm(bool trans_a, bool trans_b, double alpha, const ct_tensor *a, const ct_tensor *b, double beta,
                 ct_tensor *c) {
    int64_t m = trans_a ? a->shape[1] : a->shape[0];
    int64_t k = trans_a ? a->shape[0] : a->shape[1];
    int64_t n = trans_b ? b->shape[0] : b->shape[1];
    if (m == 0 || n == 0) return;
    CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
    if (a->dtype == CT_F32)
        cblas_sgemm(CblasRowMajor, ta, tb, (int)m, (int)n, (int)k, (float)alpha, a->data, (int)a->shape[1],
                    b->data, (int)b->shape[1], (float)beta, c->data, (int)n);
    else if (a->dtype == CT_F64)
        cblas_dgemm(CblasRowMajor, ta, tb, (int)m, (int)n, (int)k, alpha, a->data, (int)a->shape[1], b->data,
                    (int)b->shape[1], beta, c->data, (int)n);
    else
        ct_abort_at(__FILE__, __LINE__, "gemm: unsupported dtype %s", ct_dtype_name(a->dtype));
}
