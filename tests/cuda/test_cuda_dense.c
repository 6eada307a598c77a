/* GEMM on the GPU (cuBLAS) against the CPU (OpenBLAS), through the public ct_op_gemm (so the
 * CUDA dispatch of the CPU entry point is tested too): all four transpose combinations, alpha and
 * beta (beta = 0, beta = 1 accumulating into a non-zero C, any beta), sizes of 1, non-multiples of 8
 * and random ones, k = 0, float32 and float64, and the TF32 / BF16 / FP16 math modes; the math mode
 * being per thread.
 *
 * Error measure: GEMM's componentwise backward-error scale. For each element,
 *   err = |gpu - cpu| / (|alpha| * sum_k |a_ik| |b_kj| + |beta| |c0_ij|),
 * which is what rounding inputs or reordering the sum can change; a plain relative error would be
 * meaningless on elements that cancel to nearly zero. Bounds: float32 1e-5 (both sides exact float32
 * products summed in different orders), float64 1e-12, TF32 and FP16 1e-3 (inputs rounded to nearest
 * with 10 mantissa bits: each product off by at most 2^-10 of its size), BF16 1e-2 (7 bits: 2^-7).
 * In the reduced-precision modes the inputs are kept at magnitudes >= 0.01, inside fp16's normal
 * range (a subnormal fp16 operand carries fewer bits than the bound assumes). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "core/ops/ops.h"
#include "cuda_testlib.h"
#ifdef CT_HAVE_CUDA
#include "backends/cuda/ops_cuda.h"
#endif

#ifdef CT_HAVE_CUDA

static ct_rng rng;

static int64_t rand_in(int64_t lo, int64_t hi) { return lo + (int64_t)ct_rng_below(&rng, (uint64_t)(hi - lo + 1)); }

static const char *mode_name(ct_math_mode m) {
    switch (m) {
    case CT_MATH_F32: return "f32";
    case CT_MATH_TF32: return "tf32";
    case CT_MATH_BF16: return "bf16";
    case CT_MATH_FP16: return "fp16";
    }
    return "?";
}

/* Moves every value of t to magnitude >= lo (same sign): fp16 has no normal numbers below 6e-5,
 * and an operand rounded to a subnormal would be off by far more than the mode's rounding bound. */
static void away_from_zero(ct_tensor *t, double lo) {
    for (int64_t i = 0; i < ct_tensor_numel(t); i++) {
        double v = ct_tensor_get(t, i);
        ct_tensor_set(t, i, copysign(lo + (1 - lo) * fabs(v), v));
    }
}

static double *host_f64(const ct_tensor *t) {
    double *d = malloc(sizeof(double) * (size_t)(ct_tensor_numel(t) + 1));
    ct_tensor_copy_to_f64(t, d);
    return d;
}

/* One GEMM of the given shape and options on both backends; returns the worst componentwise error. */
static double gemm_case(ct_dtype dt, ct_math_mode mode, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                        double alpha, double beta, double tol) {
    int64_t ash[2] = {ta ? k : m, ta ? m : k}, bsh[2] = {tb ? n : k, tb ? k : n}, csh[2] = {m, n};
    ct_tensor a = ct_ct_rand(&rng, dt, 2, ash, -1, 1), b = ct_ct_rand(&rng, dt, 2, bsh, -1, 1);
    if (mode != CT_MATH_F32) {
        away_from_zero(&a, 0.01);
        away_from_zero(&b, 0.01);
    }
    /* C starts non-zero, so beta's part (accumulation when beta = 1) is tested. */
    ct_tensor c0 = ct_ct_rand(&rng, dt, 2, csh, -1, 1), c = ct_ct_zeros(dt, 2, csh);
    ct_op_copy(&c, &c0);
    ct_tensor ga = ct_ct_to_gpu(&a), gb = ct_ct_to_gpu(&b), gc = ct_ct_to_gpu(&c0);

    ct_op_gemm(ta, tb, alpha, &a, &b, beta, &c);
    ct_cuda_set_math_mode(mode);
    ct_op_gemm(ta, tb, alpha, &ga, &gb, beta, &gc);
    ct_cuda_set_math_mode(CT_MATH_F32);
    ct_tensor back = ct_ct_to_cpu(&gc);

    double *ha = host_f64(&a), *hb = host_f64(&b), *hc0 = host_f64(&c0), *hc = host_f64(&c), *hg = host_f64(&back);
    double worst = 0;
    int64_t wi = 0, wj = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double scale = fabs(beta) * fabs(hc0[i * n + j]);
            for (int64_t p = 0; p < k; p++)
                scale += fabs(alpha) * fabs(ha[ta ? p * m + i : i * k + p] * hb[tb ? j * k + p : p * n + j]);
            double g = hg[i * n + j], want = hc[i * n + j];
            double err = g == want ? 0 : fabs(g - want) / fmax(scale, 1e-300);
            if (!(err <= worst)) { /* NaN counts as the worst */
                worst = err;
                wi = i;
                wj = j;
            }
        }
    CHECK(worst <= tol,
          "gemm %s %s ta=%d tb=%d m=%lld n=%lld k=%lld alpha=%g beta=%g: error %.3g > %.3g at [%lld, %lld] "
          "(gpu %.9g, cpu %.9g)",
          ct_dtype_name(dt), mode_name(mode), ta, tb, (long long)m, (long long)n, (long long)k, alpha, beta, worst,
          tol, (long long)wi, (long long)wj, m && n ? hg[wi * n + wj] : 0.0, m && n ? hc[wi * n + wj] : 0.0);
    free(ha);
    free(hb);
    free(hc0);
    free(hc);
    free(hg);
    ct_tensor *all[] = {&a, &b, &c0, &c, &ga, &gb, &gc, &back};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ct_tensor_free(all[i]);
    return worst;
}

static double rand_alpha(void) {
    double v = ct_rng_uniform(&rng) * 3.0 + 0.25;
    return ct_rng_below(&rng, 2) ? v : -v;
}

/* float32 and float64 in exact math: every transpose pair over edge shapes and random ones, with
 * beta 0, 1 (accumulation) and random. */
static void test_exact(ct_dtype dt) {
    double tol = dt == CT_F32 ? 1e-5 : 1e-12;
    static const int64_t edge[][3] = {{1, 1, 1}, {1, 7, 5}, {9, 1, 3}, {5, 6, 1}, {7, 9, 13},
                                      {17, 33, 65}, {1, 1, 129}, {8, 8, 8}, {31, 1, 1}, {3, 250, 2}};
    double worst = 0;
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2;
        for (size_t e = 0; e < sizeof edge / sizeof *edge; e++)
            worst = fmax(worst, gemm_case(dt, CT_MATH_F32, ta, tb, edge[e][0], edge[e][1], edge[e][2], rand_alpha(),
                                          e % 3 == 0 ? 0.0 : e % 3 == 1 ? 1.0 : rand_alpha(), tol));
        for (int r = 0; r < 6; r++)
            worst = fmax(worst, gemm_case(dt, CT_MATH_F32, ta, tb, rand_in(1, 130), rand_in(1, 130), rand_in(1, 300),
                                          rand_alpha(), r % 3 == 0 ? 0.0 : r % 3 == 1 ? 1.0 : rand_alpha(), tol));
        /* An empty sum: C = beta * C (and beta = 0 clears C). */
        worst = fmax(worst, gemm_case(dt, CT_MATH_F32, ta, tb, rand_in(1, 20), rand_in(1, 20), 0, 1.5, 0.5, tol));
        worst = fmax(worst, gemm_case(dt, CT_MATH_F32, ta, tb, rand_in(1, 20), rand_in(1, 20), 0, 1.5, 0.0, tol));
        /* alpha = 0: A and B do not count. */
        worst = fmax(worst, gemm_case(dt, CT_MATH_F32, ta, tb, rand_in(1, 20), rand_in(1, 20), rand_in(1, 20), 0.0,
                                      rand_alpha(), tol));
    }
    /* Nothing to compute: the op returns without touching C. */
    gemm_case(dt, CT_MATH_F32, false, false, 0, 5, 3, 1.0, 1.0, tol);
    gemm_case(dt, CT_MATH_F32, true, true, 4, 0, 3, 1.0, 1.0, tol);
    printf("gemm %s: worst componentwise error %.3g\n", ct_dtype_name(dt), worst);
}

/* Reduced-precision tensor-core math on float32 tensors. */
static void test_mixed(ct_math_mode mode, double tol) {
    double worst = 0;
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2;
        worst = fmax(worst, gemm_case(CT_F32, mode, ta, tb, 1, 1, 1, rand_alpha(), 0.0, tol));
        worst = fmax(worst, gemm_case(CT_F32, mode, ta, tb, 7, 13, 9, rand_alpha(), 1.0, tol));
        for (int r = 0; r < 4; r++)
            worst = fmax(worst, gemm_case(CT_F32, mode, ta, tb, rand_in(1, 200), rand_in(1, 200), rand_in(1, 400),
                                          rand_alpha(), r % 2 ? 1.0 : rand_alpha(), tol));
        worst = fmax(worst, gemm_case(CT_F32, mode, ta, tb, 256, 128, 512, 1.0, 0.0, tol));
    }
    printf("gemm f32 in %s math: worst componentwise error %.3g\n", mode_name(mode), worst);
}

static void *other_thread(void *arg) {
    *(ct_math_mode *)arg = ct_cuda_math_mode();
    return NULL;
}

/* The math mode is the calling thread's: another thread starts at exact float32. */
static void test_mode_per_thread(void) {
    CHECK(ct_cuda_math_mode() == CT_MATH_F32, "the default math mode is %s", mode_name(ct_cuda_math_mode()));
    ct_cuda_set_math_mode(CT_MATH_BF16);
    CHECK(ct_cuda_math_mode() == CT_MATH_BF16, "set_math_mode(bf16) reads back %s", mode_name(ct_cuda_math_mode()));
    ct_math_mode seen = CT_MATH_TF32;
    pthread_t th;
    CHECK(pthread_create(&th, NULL, other_thread, &seen) == 0, "pthread_create");
    pthread_join(th, NULL);
    CHECK(seen == CT_MATH_F32, "another thread sees math mode %s", mode_name(seen));
    ct_cuda_set_math_mode(CT_MATH_F32);
}

#endif

int main(void) {
    ct_cuda_test_begin("test_cuda_dense");
#ifdef CT_HAVE_CUDA
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    test_mode_per_thread();
    test_exact(CT_F32);
    test_exact(CT_F64);
    test_mixed(CT_MATH_TF32, 1e-3);
    test_mixed(CT_MATH_FP16, 1e-3);
    test_mixed(CT_MATH_BF16, 1e-2);
#endif
    return ct_test_finish();
}
