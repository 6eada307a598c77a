/* The CPU's float GEMM (ct_op_gemm on float32; backends/cpu/sgemm.c) against what it promises.
 *
 * On every engine: each element of C = alpha op(A) op(B) + beta C within float32 rounding of a
 * float64 sum computed from the definition, on random shapes around the tile sizes of every level
 * (rows 1 to 2 x 14 + 1, columns 1 to 2 x 32 + 1, k across the K block of 256, columns across the
 * packed block of 512, and a K of 1100 against few rows and columns), every transpose combination,
 * alpha and beta 0, 1 and others; beta 0 never reads C (a C of NaN gives numbers). On the built-in
 * engine alpha 0 does not read A or B either (BLAS's meaning; OpenBLAS 0.3.21 does).
 *
 * On the built-in engine, also its rounding: every element is, for each block of 256 k from k = 0, the
 * chain s_b = fma(a_ik, alpha b_kj, s_b) over the block's k in order from zero (a multiply then an
 * add at levels without FMA), the blocks' sums added in order, s = s + s_b, then fma(beta, C, s),
 * bit for bit.
 * That makes an element's bits independent of the call's row count, of the row's place in it and of
 * the thread count, which the test checks directly too: every row recomputed alone, and a product
 * large enough to be split between threads at 1, 2 and 3 threads (on a library engine, that split
 * within float32 rounding). The isa label runs this at every level. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/ops.h"
#include "testlib.h"

static ct_rng rng;
static bool builtin; /* the built-in engine runs, whose rounding is checked bit for bit */
static bool fma_chain; /* its level multiplies and adds with one rounding */

static int pick(int count) { return (int)ct_test_between(&rng, 0, count - 1); }

static ct_tensor random_matrix(int64_t rows, int64_t cols) {
    ct_tensor t = ct_test_alloc(CT_F32, 2, (int64_t[]){rows, cols});
    for (int64_t i = 0; i < rows * cols; i++) ((float *)t.data)[i] = (float)ct_rng_normal(&rng);
    return t;
}

/* op(t)'s element (r, c). */
static float at(const ct_tensor *t, bool trans, int64_t r, int64_t c) {
    const float *p = t->data;
    return trans ? p[c * t->shape[1] + r] : p[r * t->shape[1] + c];
}

/* The built-in engine's result for element (i, j): a chain from zero over each K block of 256, the
 * blocks' sums added in order, then beta C added (c0: C's value before the call). */
static float chain(const ct_tensor *a, bool ta, const ct_tensor *b, bool tb, int64_t k, float alpha, float beta,
                   int64_t i, int64_t j, float c0) {
    float s = 0.0f;
    if (alpha != 0.0f) /* else A and B are not read */
        for (int64_t p0 = 0; p0 < k; p0 += 256) {
            float sb = 0.0f;
            for (int64_t p = p0; p < k && p < p0 + 256; p++) {
                const float bb = alpha * at(b, tb, p, j), aa = at(a, ta, i, p);
                if (fma_chain) {
                    sb = fmaf(aa, bb, sb);
                } else {
                    volatile float product = aa * bb; /* rounded on its own, as the kernel's multiply is */
                    sb = sb + product;
                }
            }
            s = p0 == 0 ? sb : s + sb;
        }
    if (beta == 0.0f) return s;
    if (alpha == 0.0f || k == 0) return beta * c0;
    if (fma_chain) return fmaf(beta, c0, s);
    volatile float scaled = beta * c0;
    return s + scaled;
}

/* One product of m x n x k, checked element by element; c_nan fills C with NaN first. */
static void one_case(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, float beta, bool c_nan) {
    ct_tensor a = ta ? random_matrix(k, m) : random_matrix(m, k);
    ct_tensor b = tb ? random_matrix(n, k) : random_matrix(k, n);
    ct_tensor c = random_matrix(m, n), c0 = random_matrix(m, n);
    if (c_nan)
        for (int64_t i = 0; i < m * n; i++) ((float *)c.data)[i] = NAN;
    /* not read at alpha 0, on the built-in engine (OpenBLAS 0.3.21 reads it: 0 x NaN is NaN) */
    if (alpha == 0.0f && m * k > 0 && builtin) ((float *)a.data)[0] = NAN;
    memcpy(c0.data, c.data, sizeof(float) * (size_t)(m * n));
    ct_op_gemm(ta, tb, alpha, &a, &b, beta, &c);

    int64_t bad = 0, unchained = 0, c_read = 0;
    double worst = 0;
    const float *cv = c.data, *c0v = c0.data;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            const float got = cv[i * n + j];
            double sum = 0, mag = 0;
            if (alpha != 0.0f)
                for (int64_t p = 0; p < k; p++) {
                    const double t = (double)at(&a, ta, i, p) * (double)at(&b, tb, p, j);
                    sum += t;
                    mag += fabs(t);
                }
            const double c_before = beta == 0.0f ? 0.0 : (double)c0v[i * n + j];
            const double want = (double)alpha * sum + (double)beta * c_before;
            const double scale = fabs((double)alpha) * mag + fabs((double)beta * c_before) + 1e-30;
            const double err = fabs((double)got - want) / scale;
            if (!isfinite(got) && !c_nan) bad++;
            if (c_nan && beta == 0.0f && isnan(got)) c_read++;
            if (err > worst && isfinite(err)) worst = err;
            if (err > 1e-5 && (alpha != 0.0f || beta != 0.0f)) bad++;
            if (builtin) {
                const float want_bits = chain(&a, ta, &b, tb, k, alpha, beta, i, j, c0v[i * n + j]);
                if (memcmp(&want_bits, &got, sizeof got) != 0 && !(isnan(want_bits) && isnan(got))) unchained++;
            }
        }
    CHECK(bad == 0 && c_read == 0, "%c%c %lldx%lldx%lld alpha %g beta %g: %lld elements off (worst relative %.2e), "
          "%lld read a C of NaN under beta 0", ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)m, (long long)n, (long long)k,
          alpha, beta, (long long)bad, worst, (long long)c_read);
    if (builtin)
        CHECK(unchained == 0, "%c%c %lldx%lldx%lld alpha %g beta %g: %lld elements are not the chain of "
              "multiply-adds over k in order", ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)m, (long long)n,
              (long long)k, alpha, beta, (long long)unchained);

    /* every row alone, as in an evaluation batch of one: the same bits (the built-in engine) */
    if (builtin && m > 1 && !ta) {
        int64_t moved = 0;
        ct_tensor arow = ct_test_alloc(CT_F32, 2, (int64_t[]){1, k});
        ct_tensor crow = ct_test_alloc(CT_F32, 2, (int64_t[]){1, n});
        for (int64_t i = 0; i < m; i++) {
            memcpy(arow.data, (float *)a.data + i * k, sizeof(float) * (size_t)k);
            memcpy(crow.data, c0v + i * n, sizeof(float) * (size_t)n);
            ct_op_gemm(false, tb, alpha, &arow, &b, beta, &crow);
            if (memcmp(crow.data, cv + i * n, sizeof(float) * (size_t)n) != 0) moved++;
        }
        CHECK(moved == 0, "N%c %lldx%lldx%lld: %lld rows change their bits when computed alone", tb ? 'T' : 'N',
              (long long)m, (long long)n, (long long)k, (long long)moved);
        ct_tensor_free(&arow);
        ct_tensor_free(&crow);
    }
    ct_tensor_free(&a);
    ct_tensor_free(&b);
    ct_tensor_free(&c);
    ct_tensor_free(&c0);
}

/* A linear layer's forward, y = act(x w^T + b) (the built-in engine adds the bias and applies the
 * ReLU in the GEMM's last step): the same bits as the bias copied into y, the GEMM with beta 1, and
 * the ReLU after it, as on the other engines; sizes large enough for the thread split too. */
static void linear_case(int64_t m, int64_t n, int64_t k, bool relu) {
    ct_tensor x = random_matrix(m, k), w = random_matrix(n, k), y = random_matrix(m, n), ref = random_matrix(m, n);
    ct_tensor bias = ct_test_alloc(CT_F32, 1, (int64_t[]){n});
    for (int64_t j = 0; j < n; j++) ((float *)bias.data)[j] = (float)ct_rng_normal(&rng);
    ct_op_linear_forward(&x, &w, &bias, relu ? CT_ACT_RELU : CT_ACT_NONE, NULL, &y);
    float *r = ref.data;
    for (int64_t i = 0; i < m; i++) memcpy(r + i * n, bias.data, sizeof(float) * (size_t)n);
    ct_op_gemm(false, true, 1.0, &x, &w, 1.0, &ref);
    if (relu)
        for (int64_t i = 0; i < m * n; i++) r[i] = r[i] < 0 ? 0 : r[i];
    CHECK(memcmp(y.data, ref.data, sizeof(float) * (size_t)(m * n)) == 0,
          "linear %lldx%lldx%lld%s: not the bits of the bias, the GEMM with beta 1 and the ReLU in turn", (long long)m,
          (long long)n, (long long)k, relu ? " + ReLU" : "");
    ct_tensor_free(&x);
    ct_tensor_free(&w);
    ct_tensor_free(&bias);
    ct_tensor_free(&y);
    ct_tensor_free(&ref);
}

/* A product split between threads (ct_cpu_gemm's block per thread): 1, 2 and 3 threads, the same bits
 * on the built-in engine. A library's bits may change with the block that holds an element (OpenBLAS
 * 0.3.21's Haswell kernels round a column differently when the columns are split), so there the three
 * results are checked against the float64 sum, on a sample of elements, within float32 rounding. */
static void threads_case(bool ta, bool tb, int64_t m, int64_t n, int64_t k) {
    ct_tensor a = ta ? random_matrix(k, m) : random_matrix(m, k);
    ct_tensor b = tb ? random_matrix(n, k) : random_matrix(k, n);
    ct_tensor c[3];
    const int threads = ct_get_num_threads();
    for (int t = 0; t < 3; t++) {
        c[t] = ct_test_alloc(CT_F32, 2, (int64_t[]){m, n});
        ct_set_num_threads(t + 1);
        ct_op_gemm(ta, tb, 1.0, &a, &b, 0.0, &c[t]);
    }
    ct_set_num_threads(threads);
    const size_t bytes = sizeof(float) * (size_t)(m * n);
    if (builtin) {
        CHECK(memcmp(c[0].data, c[1].data, bytes) == 0 && memcmp(c[0].data, c[2].data, bytes) == 0,
              "%c%c %lldx%lldx%lld: 1, 2 and 3 threads give different bits", ta ? 'T' : 'N', tb ? 'T' : 'N',
              (long long)m, (long long)n, (long long)k);
    } else {
        int64_t bad = 0;
        for (int e = 0; e < 256; e++) {
            const int64_t i = pick((int)m), j = pick((int)n);
            double sum = 0, mag = 0;
            for (int64_t p = 0; p < k; p++) {
                const double t = (double)at(&a, ta, i, p) * (double)at(&b, tb, p, j);
                sum += t;
                mag += fabs(t);
            }
            for (int t = 0; t < 3; t++)
                if (!(fabs((double)((float *)c[t].data)[i * n + j] - sum) <= 1e-5 * mag)) bad++;
        }
        CHECK(bad == 0, "%c%c %lldx%lldx%lld: %lld sampled elements of the 1, 2 and 3 thread results are off",
              ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)m, (long long)n, (long long)k, (long long)bad);
    }
    for (int t = 0; t < 3; t++) ct_tensor_free(&c[t]);
    ct_tensor_free(&a);
    ct_tensor_free(&b);
}

int main(void) {
    ct_test_begin("test_float_gemm");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    builtin = strstr(ct_cpu_gemm_engine(), "built-in") != NULL;
#ifdef __FMA__
    fma_chain = true; /* a build for an FMA target: every copy of the kernels has it */
#else
    fma_chain = ct_cpu_isa_level() >= 3;
#endif
    const int64_t rows[] = {1, 2, 5, 6, 7, 13, 14, 15, 28, 29, 113, 120};
    const int64_t cols[] = {1, 3, 4, 8, 9, 16, 17, 31, 32, 33, 64, 65, 530};
    const int64_t ks[] = {1, 2, 7, 16, 33, 255, 256, 257, 600};
    const float alphas[] = {1.0f, 0.5f, -1.25f, 0.0f}, betas[] = {0.0f, 1.0f, 0.75f};
    for (int t = 0; t < 4; t++) {
        const bool ta = t & 1, tb = t & 2;
        for (int rep = 0; rep < 12; rep++) {
            const int64_t m = rows[pick(12)], n = cols[pick(13)];
            int64_t k = ks[pick(9)];
            if (m * n * k > 4000000) k = ks[pick(5)]; /* the reference loops stay quick under the sanitizers */
            const float alpha = alphas[rep % 4], beta = betas[rep / 4];
            one_case(ta, tb, m, n, k, alpha, beta, beta == 0.0f && rep % 2 == 0);
        }
        threads_case(ta, tb, 300, 200, 100); /* split by rows */
        threads_case(ta, tb, 64, 700, 90);   /* split by columns */
    }
    /* A long K against few rows and columns (a weight gradient over many rows): blocks of B that hold
     * one K block each, which every row block passes in turn, the sums kept for all rows (beta 1): the
     * order one thread takes for the whole of the first two products, and the threads' blocks of the
     * last two for some of their blocks only. */
    const int threads = ct_get_num_threads();
    ct_set_num_threads(1);
    one_case(true, false, 120, 300, 1100, 1.0f, 1.0f, false);
    one_case(false, true, 120, 300, 1100, 0.5f, 0.0f, true);
    ct_set_num_threads(threads);
    threads_case(true, false, 120, 600, 1100);
    threads_case(false, false, 40, 600, 1100);
    for (int relu = 0; relu < 2; relu++) {
        linear_case(rows[pick(12)], cols[pick(13)], ks[pick(9)], relu);
        linear_case(128, 256, 784, relu); /* the MLP's first layer: K blocks, columns split between threads */
        linear_case(300, 33, 40, relu);   /* rows split, the last columns an edge tile */
    }
    return ct_test_finish();
}
