/* GEMM through OpenBLAS's CBLAS interface (OpenBLAS picks its own kernels for the CPU at run time;
 * the thread count it shares with our OpenMP loops is set in threads.c), and a linear layer's
 * forward with its bias and ReLU (linear_tmpl.h).
 *
 * The linear forward gives each thread of the team a block of rows and runs that block's GEMM on
 * the thread (OpenBLAS's OpenMP build runs single-threaded inside a parallel region): the team
 * meets once per layer instead of at every synchronisation point of OpenBLAS's own threading,
 * where a thread waiting for the other yields its core (on a loaded machine, for a whole time
 * slice), and each thread adds the bias and applies the ReLU to rows it has just written. Blocks
 * start at multiples of CT_LINEAR_ROW_BLOCK rows; a product smaller than CT_LINEAR_SPLIT_MIN
 * multiply-adds stays on the calling thread, where OpenBLAS decides. */
#include <cblas.h>
#include <omp.h>

#include "backends/cpu/cpu_impl.h"
#include "core/ops/ops.h"

#define CT_LINEAR_ROW_BLOCK 16
#define CT_LINEAR_SPLIT_MIN 262144.0

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

/* c[m, n] = a[m, k] b[n, k]^T + beta c, row-major and packed (CBLAS wants leading dimensions of at
 * least 1, even for k = 0). */
static void gemm_nt_f32(int64_t m, int64_t n, int64_t k, const float *a, const float *b, float beta, float *c) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, 1.0f, a, (int)(k ? k : 1), b,
                (int)(k ? k : 1), beta, c, (int)n);
}
static void gemm_nt_f64(int64_t m, int64_t n, int64_t k, const double *a, const double *b, double beta, double *c) {
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, 1.0, a, (int)(k ? k : 1), b,
                (int)(k ? k : 1), beta, c, (int)n);
}

#define R float
#define FN(name) name##_f32
#include "backends/cpu/linear_tmpl.h"
#undef R
#undef FN
#define R double
#define FN(name) name##_f64
#include "backends/cpu/linear_tmpl.h"
#undef R
#undef FN

void ct_cpu_linear_forward(const ct_tensor *x, const ct_tensor *weight, const ct_tensor *bias, ct_activation act,
                           ct_tensor *y) {
    int64_t rows = y->shape[0], in = x->shape[1], out = y->shape[1];
    if (rows == 0) return;
    const void *b = bias ? bias->data : NULL;
    CT_REAL_DISPATCH(y, linear_forward, x->data, weight->data, b, act, y->data, rows, in, out);
}
