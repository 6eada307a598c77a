/* GEMM through the CBLAS interface (float: ct_cpu_sgemm, the built-in kernels of sgemm.c or the
 * library CT_CPU_GEMM names; double: OpenBLAS's, which picks its kernels for the CPU at run time;
 * the libraries share the OpenMP thread team of our loops, threads.c), a linear layer's forward
 * with its bias and ReLU (linear_tmpl.h), and its backward (weight, bias and input gradients in one
 * parallel region).
 *
 * A product large enough for the team is split here into one block of rows or columns per thread,
 * each computed by a single-threaded GEMM (every engine runs single-threaded inside a parallel
 * region): the team meets once per product instead of at every synchronisation point of
 * OpenBLAS's own threading, where a thread waiting for the other yields its core (on a loaded
 * machine, for a whole time slice), and the linear forward adds its bias and applies its ReLU to
 * the block a thread has just written, while it is in that thread's cache. The split is along the
 * larger of C's two dimensions, so that the operand every thread packs whole is the smaller one;
 * blocks start at multiples of CT_GEMM_BLOCK. Products below CT_GEMM_SPLIT_MIN multiply-adds, and
 * any product inside a parallel region, are one call (the built-in engine runs it on the calling
 * thread; a library may thread it). On the built-in engine (sgemm.c) each element of C is the same
 * chain over k whichever block holds it; a library's may round differently by the block (OpenBLAS
 * 0.3.21's Haswell kernels do when the columns are split), so its bits can change with the thread
 * count.
 *
 * A batch of small products (attention's per-(sample, head) GEMMs where the fused attention does
 * not apply) runs in one parallel region, each product on one thread: called one at a time,
 * OpenBLAS would open a thread team for every product above its small threshold, and each team
 * waits at its end for its slowest thread, a wait a competing process can stretch by keeping a
 * thread off its core. Products are handed out one at a time (schedule(dynamic)), so a thread that
 * is preempted holds up one product, not half of them; each is the same single-threaded GEMM
 * whatever the thread count. */
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

/* C = alpha op(A) op(B) + beta C for row-major A (lda columns), B (ldb columns), C [m, n] (ldc
 * columns): the one CBLAS call. CBLAS wants leading dimensions of at least 1, even where k or n is 0. */
static void gemm_raw(ct_dtype dt, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                     const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc) {
    CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
    int ilda = (int)(lda ? lda : 1), ildb = (int)(ldb ? ldb : 1), ildc = (int)(ldc ? ldc : 1);
    if (dt == CT_F32)
        ct_cpu_sgemm(CblasRowMajor, ta, tb, (int)m, (int)n, (int)k, (float)alpha, a, ilda, b, ildb, (float)beta, c,
                     ildc);
    else if (dt == CT_F64)
        cblas_dgemm(CblasRowMajor, ta, tb, (int)m, (int)n, (int)k, alpha, a, ilda, b, ildb, beta, c, ildc);
    else
        ct_abort_at(__FILE__, __LINE__, "gemm: unsupported dtype %s", ct_dtype_name(dt));
}

static void gemm_block(const gemm_args *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    int64_t lda = g->a->shape[1], ldb = g->b->shape[1], ldc = g->n;
    int64_t aoff = g->ta ? m0 : m0 * lda, boff = g->tb ? n0 * ldb : n0, coff = m0 * ldc + n0;
    size_t es = ct_dtype_size(g->c->dtype);
    gemm_raw(g->c->dtype, g->ta, g->tb, m1 - m0, n1 - n0, g->k, g->alpha, (const char *)g->a->data + aoff * es, lda,
             (const char *)g->b->data + boff * es, ldb, g->beta, (char *)g->c->data + coff * es, ldc);
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
                 pb + (size_t)(i * br * bc) * es, bc, beta, pc + (size_t)(i * m * n) * es, n);
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

/* One thread's block of y = act(x w^T + b), the product written to g->c: y itself, or with GELU the
 * pre-activation buffer that the activation's backward reads. On the built-in engine (float) the bias
 * and the ReLU are the tiles' last step. Elsewhere the bias is the GEMM's starting value (beta 1 adds
 * the product to it with the one rounding a separate bias pass makes, and the engine then skips the
 * pass that clears C for beta 0). The ReLU or GELU follows on the block while it is in cache. */
static void linear_block(const gemm_args *g, const ct_tensor *bias, ct_activation act, ct_tensor *y, int64_t m0,
                         int64_t m1, int64_t n0, int64_t n1) {
    bool done = false;
    if (g->c->dtype == CT_F32) {
        const int64_t k = g->k, ldc = g->n;
        const float *x = (const float *)g->a->data + m0 * k, *w = (const float *)g->b->data + n0 * k;
        done = ct_cpu_sgemm_linear((int)(m1 - m0), (int)(n1 - n0), (int)k, x, (int)(k ? k : 1), w, (int)(k ? k : 1),
                                   bias ? (const float *)bias->data + n0 : NULL, act == CT_ACT_RELU,
                                   (float *)g->c->data + m0 * ldc + n0, (int)ldc);
    }
    if (!done) {
        if (bias) CT_REAL_DISPATCH(g->c, bias_rows, bias->data, g->c->data, g->n, m0, m1, n0, n1);
        gemm_block(g, m0, m1, n0, n1);
        if (act == CT_ACT_RELU) CT_REAL_DISPATCH(g->c, relu_rows, g->c->data, g->n, m0, m1, n0, n1);
    }
    if (act == CT_ACT_GELU_TANH)
        for (int64_t r = m0; r < m1; r++) {
            const int64_t at = r * g->n + n0, n = n1 - n0;
            if (y->dtype == CT_F32)
                ct_cpu_gelu_tanh_span_f32((const float *)g->c->data + at, (float *)y->data + at, n);
            else
                ct_cpu_gelu_tanh_span_f64((const double *)g->c->data + at, (double *)y->data + at, n);
        }
}

void ct_cpu_linear_forward(const ct_tensor *x, const ct_tensor *weight, const ct_tensor *bias, ct_activation act,
                           ct_tensor *pre, ct_tensor *y) {
    int64_t m = y->shape[0], n = y->shape[1], k = x->shape[1];
    if (m == 0) return;
    gemm_args g = {false, true, 1.0, bias ? 1.0 : 0.0, x, weight, pre ? pre : y, n, k};
    bool by_rows;
    int nt = gemm_threads(m, n, k, &by_rows);
    if (nt == 1) {
        linear_block(&g, bias, act, y, 0, m, 0, n);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        gemm_part(by_rows ? m : n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        if (by_rows)
            linear_block(&g, bias, act, y, lo, hi, 0, n);
        else
            linear_block(&g, bias, act, y, 0, m, lo, hi);
    }
}

/* Thread t of T's columns of a bias gradient: all of them on the last thread where the sum is too small
 * to share. */
static void bias_grad_part(const ct_tensor *dy, ct_tensor *dbias, bool shared, int t, int T) {
    int64_t rows = dy->shape[0], c = dy->shape[1], lo = 0, hi = c;
    if (shared)
        gemm_part(c, t, T, &lo, &hi);
    else if (t != T - 1)
        return;
    CT_REAL_DISPATCH(dy, bias_grad_cols, dy->data, dbias->data, rows, c, lo, hi);
}

/* Whether a rows x c bias gradient is worth a thread team. */
static bool bias_grad_shared(const ct_tensor *dy) {
    return (double)dy->shape[0] * (double)dy->shape[1] > CT_OMP_MIN && dy->shape[1] / CT_GEMM_BLOCK >= 2;
}

void ct_cpu_bias_grad_linear(const ct_tensor *dy, ct_tensor *dbias) {
    if (!bias_grad_shared(dy) || omp_in_parallel() || omp_get_max_threads() < 2) {
        bias_grad_part(dy, dbias, false, 0, 1);
        return;
    }
#pragma omp parallel
    bias_grad_part(dy, dbias, true, omp_get_thread_num(), omp_get_num_threads());
}

/* Thread t of T's share of the product g, which nt threads split (nt 1: one thread does it whole, the
 * thread `whole`). The blocks are ct_cpu_gemm's, so each element of C is the same dot product. */
static void gemm_part_of(const gemm_args *g, int64_t m, int nt, bool by_rows, int whole, int t, int T) {
    if (nt == 1) {
        if (t == whole) gemm_block(g, 0, m, 0, g->n);
        return;
    }
    int64_t lo, hi;
    gemm_part(by_rows ? m : g->n, t, T, &lo, &hi);
    if (by_rows)
        gemm_block(g, lo, hi, 0, g->n);
    else
        gemm_block(g, 0, m, lo, hi);
}

/* Thread t of T's share of dweight += dy^T x, split as gemm_part_of splits it (nt 1: all of it on the
 * first thread), on the built-in engine with the bias gradient's sums taken as the GEMM packs dy
 * (ct_cpu_sgemm_weight_grad): those of the rows of dweight the thread computes, or all of them on the
 * thread of the first block where the threads split its columns (each packs all of dy). */
static void weight_grad_part(const gemm_args *g, ct_tensor *dbias, int64_t m, int nt, bool by_rows, int t, int T) {
    int64_t lo = 0, hi = by_rows ? m : g->n;
    if (nt == 1 && t != 0) return;
    if (nt > 1) gemm_part(by_rows ? m : g->n, t, T, &lo, &hi);
    const int64_t m0 = by_rows ? lo : 0, m1 = by_rows ? hi : m, n0 = by_rows ? 0 : lo, n1 = by_rows ? g->n : hi;
    const int64_t lda = g->a->shape[1], ldb = g->b->shape[1];
    float *db = by_rows || lo == 0 ? (float *)dbias->data + m0 : NULL;
    bool done = ct_cpu_sgemm_weight_grad((int)(m1 - m0), (int)(n1 - n0), (int)g->k, (const float *)g->a->data + m0,
                                         (int)lda, (const float *)g->b->data + n0, (int)ldb,
                                         (float *)g->c->data + m0 * g->n + n0, (int)g->n, db);
    CT_ASSERT(done); /* the caller checked the engine and the sizes */
}

/* A linear layer's backward (ct_op_linear_backward): dweight += dy^T x, dbias += dy's column sums, dx =
 * dy weight, each split over the threads as ct_cpu_gemm and ct_cpu_bias_grad would split it (so the
 * same bits), but in one parallel region: the three are independent (they read dy, x and weight and
 * write different tensors), so no thread waits for another between them, and the team is woken once
 * instead of three times (under OMP_WAIT_POLICY=PASSIVE, each wake of a sleeping thread costs tens of
 * microseconds on a virtual machine). A product too small to split runs whole on one thread, the
 * weight gradient's on the first and the input gradient's on the last. */
void ct_cpu_linear_backward(const ct_tensor *dy, const ct_tensor *x, const ct_tensor *weight, ct_tensor *dweight,
                            ct_tensor *dbias, ct_tensor *dx) {
    const int64_t rows = dy->shape[0], out = dy->shape[1], in = x->shape[1];
    if (rows == 0) return; /* dweight and dbias gain nothing, dx has no rows */
    const gemm_args gw = {true, false, 1.0, 1.0, dy, x, dweight, in, rows};
    const gemm_args gx = {false, false, 1.0, 0.0, dy, weight, dx, in, out};
    bool w_rows = false, x_rows = false;
    const int nw = gemm_threads(out, in, rows, &w_rows), nx = dx ? gemm_threads(rows, in, out, &x_rows) : 1;
    /* the built-in float GEMM takes the bias gradient's sums as it packs dy for the weight gradient */
    const bool fused_bias =
        dbias && dy->dtype == CT_F32 && ct_cpu_gemm_engine_kind() == CT_GEMM_BUILTIN && in > 0 && out > 0;
    const bool b_shared = dbias && !fused_bias && bias_grad_shared(dy) && !omp_in_parallel();
    int nt = nw > nx ? nw : nx;
    if (b_shared && nt < omp_get_max_threads()) nt = omp_get_max_threads();
    if (nt == 1) {
        if (fused_bias) {
            weight_grad_part(&gw, dbias, out, 1, w_rows, 0, 1);
        } else {
            gemm_block(&gw, 0, out, 0, in);
            if (dbias) bias_grad_part(dy, dbias, false, 0, 1);
        }
        if (dx) gemm_block(&gx, 0, rows, 0, in);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        const int t = omp_get_thread_num(), T = omp_get_num_threads();
        if (fused_bias) {
            weight_grad_part(&gw, dbias, out, nw, w_rows, t, T);
        } else {
            gemm_part_of(&gw, out, nw, w_rows, 0, t, T);
            if (dbias) bias_grad_part(dy, dbias, b_shared, t, T);
        }
        if (dx) gemm_part_of(&gx, rows, nx, x_rows, T - 1, t, T);
    }
}
