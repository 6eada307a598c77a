/* GEMM through OpenBLAS's CBLAS interface (OpenBLAS picks its own kernels for the CPU at run time;
 * the thread count it shares with our OpenMP loops is set in threads.c), and a linear layer's
 * forward with its bias and ReLU (linear_tmpl.h).
 *
 * A product large enough for the team is split here into one block of rows or columns per thread,
 * each computed by a single-threaded GEMM (OpenBLAS's OpenMP build runs single-threaded inside a
 * parallel region): the team meets once per product instead of at every synchronisation point of
 * OpenBLAS's own threading, where a thread waiting for the other yields its core (on a loaded
 * machine, for a whole time slice), and the linear forward adds its bias and applies its ReLU to
 * the block a thread has just written, while it is in that thread's cache. The split is along the
 * larger of C's two dimensions, so that the operand every thread packs whole is the smaller one;
 * blocks start at multiples of CT_GEMM_BLOCK. Products below CT_GEMM_SPLIT_MIN multiply-adds, and
 * any product inside a parallel region, are one call, where OpenBLAS decides. Each element of C is
 * the same dot product over k whichever block holds it. */
#include <cblas.h>
#include <omp.h>
#include <string.h>

#include "backends/cpu/cpu_impl.h"
#include "core/ops/ops.h"

#define CT_GEMM_BLOCK 16
#define CT_GEMM_SPLIT_MIN 262144.0

/* C = alpha op(A) op(B) + beta C, row-major, over C's rows [m0, m1) and columns [n0, n1). */
typedef struct gemm_args {
    bool ta, tb;
    double alpha, beta;
    const ct_tensor *a, *b;
    ct_tensor *c;
    int64_t n, k;
} gemm_args;

static void gemm_block(const gemm_args *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    int64_t lda = g->a->shape[1], ldb = g->b->shape[1], ldc = g->n;
    int64_t aoff = g->ta ? m0 : m0 * lda, boff = g->tb ? n0 * ldb : n0, coff = m0 * ldc + n0;
    /* CBLAS wants leading dimensions of at least 1, even where k or n is 0. */
    int ilda = (int)(lda ? lda : 1), ildb = (int)(ldb ? ldb : 1), ildc = (int)(ldc ? ldc : 1);
    CBLAS_TRANSPOSE ta = g->ta ? CblasTrans : CblasNoTrans, tb = g->tb ? CblasTrans : CblasNoTrans;
    if (g->c->dtype == CT_F32)
        cblas_sgemm(CblasRowMajor, ta, tb, (int)(m1 - m0), (int)(n1 - n0), (int)g->k, (float)g->alpha,
                    (const float *)g->a->data + aoff, ilda, (const float *)g->b->data + boff, ildb, (float)g->beta,
                    (float *)g->c->data + coff, ildc);
    else if (g->c->dtype == CT_F64)
        cblas_dgemm(CblasRowMajor, ta, tb, (int)(m1 - m0), (int)(n1 - n0), (int)g->k, g->alpha,
                    (const double *)g->a->data + aoff, ilda, (const double *)g->b->data + boff, ildb, g->beta,
                    (double *)g->c->data + coff, ildc);
    else
        ct_abort_at(__FILE__, __LINE__, "gemm: unsupported dtype %s", ct_dtype_name(g->c->dtype));
}

/* How many threads share an m x n x k product (1: none) and whether they split its rows. */
static int gemm_threads(int64_t m, int64_t n, int64_t k, bool *by_rows) {
    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    *by_rows = m >= n;
    if (nt < 2 || (double)m * (double)n * (double)k < CT_GEMM_SPLIT_MIN) return 1;
    return (*by_rows ? m : n) / CT_GEMM_BLOCK >= nt ? nt : 1;
}

/* Thread t of T's part [*lo, *hi) of a dimension of extent len, in whole blocks but the last. */
static void gemm_part(int64_t len, int t, int T, int64_t *lo, int64_t *hi) {
    int64_t blocks = len / CT_GEMM_BLOCK;
    *lo = blocks * t / T * CT_GEMM_BLOCK;
    *hi = t == T - 1 ? len : blocks * (t + 1) / T * CT_GEMM_BLOCK;
}

void ct_cpu_gemm(bool trans_a, bool trans_b, double alpha, const ct_tensor *a, const ct_tensor *b, double beta,
                 ct_tensor *c) {
    int64_t m = trans_a ? a->shape[1] : a->shape[0];
    int64_t k = trans_a ? a->shape[0] : a->shape[1];
    int64_t n = trans_b ? b->shape[0] : b->shape[1];
    if (m == 0 || n == 0) return;
    gemm_args g = {trans_a, trans_b, alpha, beta, a, b, c, n, k};
    bool by_rows;
    int nt = gemm_threads(m, n, k, &by_rows);
    if (nt == 1) {
        gemm_block(&g, 0, m, 0, n);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        gemm_part(by_rows ? m : n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        if (by_rows)
            gemm_block(&g, lo, hi, 0, n);
        else
            gemm_block(&g, 0, m, lo, hi);
    }
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

/* One thread's block of y = act(x w^T + b): the bias is the GEMM's starting value (beta 1 adds the
 * product to it with the one rounding a separate bias pass makes, and OpenBLAS then skips the pass
 * that clears C for beta 0), the ReLU follows on the block while it is in cache. */
static void linear_block(const gemm_args *g, const ct_tensor *bias, ct_activation act, int64_t m0, int64_t m1,
                         int64_t n0, int64_t n1) {
    if (bias) CT_REAL_DISPATCH(g->c, bias_rows, bias->data, g->c->data, g->n, m0, m1, n0, n1);
    gemm_block(g, m0, m1, n0, n1);
    if (act == CT_ACT_RELU) CT_REAL_DISPATCH(g->c, relu_rows, g->c->data, g->n, m0, m1, n0, n1);
}

void ct_cpu_linear_forward(const ct_tensor *x, const ct_tensor *weight, const ct_tensor *bias, ct_activation act,
                           ct_tensor *y) {
    int64_t m = y->shape[0], n = y->shape[1], k = x->shape[1];
    if (m == 0) return;
    gemm_args g = {false, true, 1.0, bias ? 1.0 : 0.0, x, weight, y, n, k};
    bool by_rows;
    int nt = gemm_threads(m, n, k, &by_rows);
    if (nt == 1) {
        linear_block(&g, bias, act, 0, m, 0, n);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        gemm_part(by_rows ? m : n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        if (by_rows)
            linear_block(&g, bias, act, lo, hi, 0, n);
        else
            linear_block(&g, bias, act, 0, m, lo, hi);
    }
}
