/* GEMM through OpenBLAS's CBLAS interface (OpenBLAS picks its own kernels for the CPU at run time;
 * the thread count it shares with our OpenMP loops is set in threads.c).
 *
 * A batch of small products (attention's per-(sample, head) GEMMs) runs in one parallel region, each
 * product on one thread: OpenBLAS's OpenMP build computes a GEMM called inside a parallel region on
 * the calling thread. Called one at a time, OpenBLAS would open a thread team for every product above
 * its small threshold, and each team waits at its end for its slowest thread: a thousand such waits
 * a GPT step, any of which a competing process can stretch by keeping a thread off its core. Products are
 * handed out one at a time (schedule(dynamic)), so a thread that is preempted holds up one product,
 * not half of them. Each product is the same single-threaded GEMM whatever the thread count. */
#include <cblas.h>

#include "backends/cpu/cpu_impl.h"
#include "core/ops/ops.h"

/* C = alpha op(A) op(B) + beta C for row-major A (lda columns), B (ldb columns), C [m, n]. */
static void gemm_raw(ct_dtype dt, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                     const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c) {
    CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
    if (dt == CT_F32)
        cblas_sgemm(CblasRowMajor, ta, tb, (int)m, (int)n, (int)k, (float)alpha, a, (int)lda, b, (int)ldb,
                    (float)beta, c, (int)n);
    else if (dt == CT_F64)
        cblas_dgemm(CblasRowMajor, ta, tb, (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)n);
    else
        ct_abort_at(__FILE__, __LINE__, "gemm: unsupported dtype %s", ct_dtype_name(dt));
}

void ct_cpu_gemm(bool trans_a, bool trans_b, double alpha, const ct_tensor *a, const ct_tensor *b, double beta,
                 ct_tensor *c) {
    int64_t m = trans_a ? a->shape[1] : a->shape[0];
    int64_t k = trans_a ? a->shape[0] : a->shape[1];
    int64_t n = trans_b ? b->shape[0] : b->shape[1];
    if (m == 0 || n == 0) return;
    gemm_raw(a->dtype, trans_a, trans_b, m, n, k, alpha, a->data, a->shape[1], b->data, b->shape[1], beta, c->data);
}

void ct_cpu_gemm_batched(bool trans_a, bool trans_b, double alpha, const ct_tensor *a, const ct_tensor *b,
                         double beta, ct_tensor *c) {
    const int64_t ar = a->shape[a->ndim - 2], ac = a->shape[a->ndim - 1];
    const int64_t br = b->shape[b->ndim - 2], bc = b->shape[b->ndim - 1];
    const int64_t m = c->shape[c->ndim - 2], n = c->shape[c->ndim - 1], k = trans_a ? ar : ac;
    if (m == 0 || n == 0) return;
    const int64_t count = ct_tensor_numel(c) / (m * n);
    const size_t es = ct_dtype_size(c->dtype);
    const char *pa = a->data, *pb = b->data;
    char *pc = c->data;
#pragma omp parallel for schedule(dynamic) if (count > 1 && count * m * n * k > CT_OMP_MIN)
    for (int64_t i = 0; i < count; i++)
        gemm_raw(c->dtype, trans_a, trans_b, m, n, k, alpha, pa + (size_t)(i * ar * ac) * es, ac,
                 pb + (size_t)(i * br * bc) * es, bc, beta, pc + (size_t)(i * m * n) * es);
}
