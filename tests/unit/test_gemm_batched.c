/* ct_op_gemm_batched (core/ops/ops.h) against a float64 reference loop, on random shapes, every
 * transpose combination, float32 and float64, alpha and beta != 0 and 1: batches of one matrix, small
 * batches that stay on one thread and batches large enough for the parallel region. Each product is
 * one single-threaded GEMM whatever the thread count, so 1 and 2 threads give the same bits. The op's
 * path for backends without the kernel (one ct_op_gemm per matrix) is checked against the same
 * reference, with the CPU's table swapped for a copy that lacks it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/backend.h"
#include "core/ops/ops.h"
#include "testlib.h"

static ct_rng rng;

static int64_t between(int64_t lo, int64_t hi) { return ct_test_between(&rng, lo, hi); }

static ct_tensor alloc3(ct_dtype dt, int64_t n, int64_t r, int64_t c) {
    ct_tensor t = ct_test_alloc(dt, 3, (int64_t[]){n, r, c});
    for (int64_t i = 0; i < ct_tensor_numel(&t); i++) ct_tensor_set(&t, i, ct_rng_normal(&rng));
    return t;
}

/* Element (r, c) of matrix i of t, read as op(matrix) when trans. */
static double at(const ct_tensor *t, int64_t i, int64_t r, int64_t c, bool trans) {
    const int64_t rows = t->shape[1], cols = t->shape[2];
    return trans ? ct_tensor_get(t, (i * rows + c) * cols + r) : ct_tensor_get(t, (i * rows + r) * cols + c);
}

static void one_case(ct_dtype dt, bool ta, bool tb, int64_t count, int64_t m, int64_t n, int64_t k) {
    const double alpha = 0.5 + ct_rng_uniform(&rng), beta = ct_rng_uniform(&rng) - 0.5;
    ct_tensor a = ta ? alloc3(dt, count, k, m) : alloc3(dt, count, m, k);
    ct_tensor b = tb ? alloc3(dt, count, n, k) : alloc3(dt, count, k, n);
    ct_tensor c = alloc3(dt, count, m, n), c0 = alloc3(dt, count, m, n), c2 = alloc3(dt, count, m, n);
    ct_tensor c3 = alloc3(dt, count, m, n);
    ct_op_copy(&c0, &c);
    ct_op_copy(&c2, &c);
    ct_op_copy(&c3, &c);
    /* the fallback: the CPU's kernels but gemm_batched */
    const ct_backend_ops *cpu = ct_backends[CT_DEVICE_CPU];
    ct_backend_ops without = *cpu;
    without.gemm_batched = NULL;
    ct_backends[CT_DEVICE_CPU] = &without;
    ct_op_gemm_batched(ta, tb, alpha, &a, &b, beta, &c3);
    ct_backends[CT_DEVICE_CPU] = cpu;
    const int threads = ct_get_num_threads();
    ct_set_num_threads(1);
    ct_op_gemm_batched(ta, tb, alpha, &a, &b, beta, &c);
    ct_set_num_threads(2);
    ct_op_gemm_batched(ta, tb, alpha, &a, &b, beta, &c2);
    ct_set_num_threads(threads);

    const double tol = dt == CT_F32 ? 1e-5 : 1e-12;
    int64_t bad = 0, bad_fallback = 0, differ = 0;
    double worst = 0;
    for (int64_t i = 0; i < count; i++)
        for (int64_t r = 0; r < m; r++)
            for (int64_t col = 0; col < n; col++) {
                double sum = 0, mag = 0;
                for (int64_t p = 0; p < k; p++) {
                    double term = at(&a, i, r, p, ta) * at(&b, i, p, col, tb);
                    sum += term;
                    mag += fabs(term);
                }
                const int64_t e = (i * m + r) * n + col;
                const double old = ct_tensor_get(&c0, e), want = alpha * sum + beta * old;
                const double err = fabs(ct_tensor_get(&c, e) - want) / (alpha * mag + fabs(beta * old) + 1e-30);
                if (err > tol) bad++;
                bad_fallback += fabs(ct_tensor_get(&c3, e) - want) / (alpha * mag + fabs(beta * old) + 1e-30) > tol;
                if (err > worst) worst = err;
                differ += memcmp((char *)c.data + e * ct_dtype_size(dt), (char *)c2.data + e * ct_dtype_size(dt),
                                 ct_dtype_size(dt)) != 0;
            }
    CHECK(bad == 0, "%s ta=%d tb=%d count=%lld m=%lld n=%lld k=%lld: %lld of %lld elements off the reference "
          "(worst relative error %.3g > %.3g)", ct_dtype_name(dt), ta, tb, (long long)count, (long long)m,
          (long long)n, (long long)k, (long long)bad, (long long)(count * m * n), worst, tol);
    CHECK(bad_fallback == 0, "%s ta=%d tb=%d count=%lld m=%lld n=%lld k=%lld, without the kernel: %lld elements "
          "off the reference", ct_dtype_name(dt), ta, tb, (long long)count, (long long)m, (long long)n, (long long)k,
          (long long)bad_fallback);
    CHECK(differ == 0, "%s ta=%d tb=%d count=%lld m=%lld n=%lld k=%lld: %lld elements differ between 1 and 2 "
          "threads", ct_dtype_name(dt), ta, tb, (long long)count, (long long)m, (long long)n, (long long)k,
          (long long)differ);
    ct_tensor_free(&a);
    ct_tensor_free(&b);
    ct_tensor_free(&c);
    ct_tensor_free(&c0);
    ct_tensor_free(&c2);
    ct_tensor_free(&c3);
}

int main(void) {
    ct_test_begin("test_gemm_batched");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    const ct_dtype dts[] = {CT_F32, CT_F64};
    for (int d = 0; d < 2; d++)
        for (int t = 0; t < 4; t++) {
            const bool ta = t & 1, tb = t & 2;
            one_case(dts[d], ta, tb, 1, between(1, 40), between(1, 40), between(1, 40)); /* one matrix */
            one_case(dts[d], ta, tb, between(2, 5), between(1, 6), between(1, 6), between(1, 6)); /* one thread */
            /* Attention's shapes: many products, well above CT_OMP_MIN multiply-adds together. */
            one_case(dts[d], ta, tb, between(16, 40), between(17, 48), between(17, 48), between(8, 40));
        }
    return ct_test_finish();
}
