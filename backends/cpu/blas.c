/* GEMM through OpenBLAS's CBLAS interface, and the thread count shared with our OpenMP loops.
 * We link OpenBLAS's OpenMP build where it is installed, so BLAS calls and our own parallel loops
 * use one thread team instead of two pools spinning against each other. */
#include <cblas.h>
#include <omp.h>
#if defined(__SSE3__)
#include <pmmintrin.h>
#include <xmmintrin.h>
#endif

#include "backends/cpu/cpu_impl.h"
#include "core/ops/ops.h"

void ct_set_num_threads(int n) {
    if (n <= 0) return;
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

int ct_get_num_threads(void) { return omp_get_max_threads(); }

bool ct_set_flush_denormal(bool on) {
#if defined(__SSE3__)
    /* MXCSR is per thread: set it in the calling thread and in each member of the OpenMP team,
     * which OpenBLAS's OpenMP build also runs on. */
    _MM_SET_FLUSH_ZERO_MODE(on ? _MM_FLUSH_ZERO_ON : _MM_FLUSH_ZERO_OFF);
    _MM_SET_DENORMALS_ZERO_MODE(on ? _MM_DENORMALS_ZERO_ON : _MM_DENORMALS_ZERO_OFF);
#pragma omp parallel
    {
        _MM_SET_FLUSH_ZERO_MODE(on ? _MM_FLUSH_ZERO_ON : _MM_FLUSH_ZERO_OFF);
        _MM_SET_DENORMALS_ZERO_MODE(on ? _MM_DENORMALS_ZERO_ON : _MM_DENORMALS_ZERO_OFF);
    }
    return true;
#else
    (void)on;
    return false;
#endif
}

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
