/* Elementwise ops, bias and activations on the GPU against the CPU, through the public ct_op_*
 * entry points (so their CUDA dispatch is tested too), on fresh random shapes and values, float32 and
 * float64:
 *  - fill (every dtype, zero and non-zero values), copy, add (also in place), scale and bias_add are
 *    single IEEE operations per element: the GPU must give the same bits;
 *  - axpy (a multiply-add that one compiler may fuse and the other not): float32 < 1e-5 relative to
 *    max(|y|, 0.1) (a fused and an unfused y + a*x differ by an ulp of a*x), float64 < 1e-12;
 *  - all_finite: true on finite data and false with one inf, -inf or NaN anywhere; empty is true;
 *  - bias_grad: accumulates (+=) into a non-zero dbias; both backends sum in double and round once,
 *    so float32 agrees < 1e-5 relative, float64 < 1e-12 relative to max(|db|, 1) (float64 sums taken
 *    in different orders);
 *  - every activation forward (also in place) and backward, with the tensor the formula does not
 *    read passed as NULL, as layers do: float32 < 1e-5 (floor 1e-6), float64 < 1e-12 (floor 1e-6);
 *    inputs in [-2, 2], so tanh's float32 1 - y * y (fused by one compiler, maybe not by the other)
 *    loses at most a factor of 15 to cancellation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/ops.h"
#include "cuda_testlib.h"

#ifdef CT_HAVE_CUDA

static ct_rng rng;

static int64_t rand_in(int64_t lo, int64_t hi) { return lo + (int64_t)ct_rng_below(&rng, (uint64_t)(hi - lo + 1)); }

/* A random 1-4 dimensional shape of about up to `max` elements (sometimes a single element). */
static int rand_shape(int64_t *shape, int64_t max) {
    int nd = (int)rand_in(1, 4);
    int64_t left = max;
    for (int d = 0; d < nd; d++) {
        int64_t cap = left < 64 ? left : d == nd - 1 ? left : 64;
        shape[d] = rand_in(1, cap < 1 ? 1 : cap);
        left /= shape[d];
        if (left < 1) left = 1;
    }
    return nd;
}

static void free_all(ct_tensor **ts, int n) {
    for (int i = 0; i < n; i++) ct_tensor_free(ts[i]);
}

static const ct_dtype REALS[] = {CT_F32, CT_F64};

static void test_fill_copy(void) {
    static const ct_dtype all[] = {CT_F32, CT_F64, CT_I32, CT_I64, CT_U8, CT_BF16};
    for (size_t d = 0; d < sizeof all / sizeof *all; d++) {
        int64_t shape[4];
        int nd = rand_shape(shape, 5000);
        ct_tensor c = ct_ct_zeros(all[d], nd, shape);
        ct_tensor g = ct_ct_to_gpu(&c);
        double values[] = {0.0, 37.0, ct_dtype_is_float(all[d]) ? -1.7 + ct_rng_uniform(&rng) : 200.0};
        for (int v = 0; v < 3; v++) {
            ct_op_fill(&c, values[v]);
            ct_op_fill(&g, values[v]);
            ct_ct_check_equal(ct_dtype_name(all[d]), &g, &c);
        }
        ct_tensor_free(&c);
        ct_tensor_free(&g);
    }
    for (int d = 0; d < 2; d++) {
        int64_t shape[4];
        int nd = rand_shape(shape, 100000);
        ct_tensor src = ct_ct_rand(&rng, REALS[d], nd, shape, -5, 5), zero = ct_ct_zeros(REALS[d], nd, shape);
        ct_tensor gs = ct_ct_to_gpu(&src), gd = ct_ct_to_gpu(&zero);
        ct_op_copy(&gd, &gs);
        ct_ct_check_equal("copy", &gd, &src);
        ct_op_copy(&gd, &gd); /* onto itself: nothing changes */
        ct_ct_check_equal("copy onto itself", &gd, &src);
        ct_tensor *ts[] = {&src, &zero, &gs, &gd};
        free_all(ts, 4);
    }
}

static void test_arith(void) {
    for (int rep = 0; rep < 3; rep++)
        for (int d = 0; d < 2; d++) {
            ct_dtype dt = REALS[d];
            int64_t shape[4];
            int nd = rand_shape(shape, rep == 2 ? 300000 : 3000);
            ct_tensor a = ct_ct_rand(&rng, dt, nd, shape, -1, 1), b = ct_ct_rand(&rng, dt, nd, shape, -1, 1);
            ct_tensor out = ct_ct_zeros(dt, nd, shape);
            ct_tensor ga = ct_ct_to_gpu(&a), gb = ct_ct_to_gpu(&b), gout = ct_ct_to_gpu(&out);

            ct_op_add(&a, &b, &out);
            ct_op_add(&ga, &gb, &gout);
            ct_ct_check_equal("add", &gout, &out);
            ct_op_add(&a, &b, &a); /* in place */
            ct_op_add(&ga, &gb, &ga);
            ct_ct_check_equal("add in place", &ga, &a);

            double s = (ct_rng_uniform(&rng) - 0.5) * 6;
            ct_op_scale(&b, s);
            ct_op_scale(&gb, s);
            ct_ct_check_equal("scale", &gb, &b);

            double alpha = (ct_rng_uniform(&rng) - 0.5) * 4;
            ct_op_axpy(alpha, &a, &b);
            ct_op_axpy(alpha, &ga, &gb);
            ct_ct_check_close("axpy", &gb, &b, dt == CT_F32 ? 1e-5 : 1e-12, 0.1);
            ct_tensor *ts[] = {&a, &b, &out, &ga, &gb, &gout};
            free_all(ts, 6);
        }
}

static void test_all_finite(void) {
    for (int d = 0; d < 2; d++) {
        ct_dtype dt = REALS[d];
        int64_t n = rand_in(1, 200000);
        ct_tensor t = ct_ct_rand(&rng, dt, 1, &n, -1e30, 1e30);
        ct_tensor g = ct_ct_to_gpu(&t);
        CHECK(ct_op_all_finite(&g) && ct_op_all_finite(&t), "%s: finite data reported non-finite", ct_dtype_name(dt));
        const double bad[] = {INFINITY, -INFINITY, NAN};
        for (int b = 0; b < 3; b++) {
            int64_t at = rand_in(0, n - 1);
            ct_tensor_set(&t, at, bad[b]);
            ct_tensor g2 = ct_ct_to_gpu(&t);
            CHECK(!ct_op_all_finite(&g2), "%s: %g at %lld of %lld not seen", ct_dtype_name(dt), bad[b], (long long)at,
                  (long long)n);
            CHECK(!ct_op_all_finite(&t), "cpu: %g not seen", bad[b]);
            ct_tensor_set(&t, at, 0.5);
            ct_tensor_free(&g2);
        }
        /* The last element (the tail of the grid-stride loop) and the first. */
        ct_tensor_set(&t, n - 1, NAN);
        ct_tensor g3 = ct_ct_to_gpu(&t);
        CHECK(!ct_op_all_finite(&g3), "%s: NaN in the last element not seen", ct_dtype_name(dt));
        ct_tensor_free(&g3);
        ct_tensor_set(&t, n - 1, 1.0);
        ct_tensor_set(&t, 0, -INFINITY);
        g3 = ct_ct_to_gpu(&t);
        CHECK(!ct_op_all_finite(&g3), "%s: -inf in the first element not seen", ct_dtype_name(dt));
        ct_tensor_free(&g3);
        /* A flag left from a failing call must not leak into the next. */
        CHECK(ct_op_all_finite(&g), "%s: finite data after a non-finite call", ct_dtype_name(dt));
        int64_t zero = 0;
        ct_tensor e = ct_ct_zeros(dt, 1, &zero);
        ct_tensor ge = ct_ct_to_gpu(&e);
        CHECK(ct_op_all_finite(&ge), "%s: an empty tensor is not all finite", ct_dtype_name(dt));
        ct_tensor *ts[] = {&t, &g, &e, &ge};
        free_all(ts, 4);
    }
}

static void test_bias(void) {
    for (int rep = 0; rep < 8; rep++)
        for (int d = 0; d < 2; d++) {
            ct_dtype dt = REALS[d];
            /* inner == 1 is the linear layer's case, inner > 1 convolution's. */
            int64_t rows = rand_in(1, 70), c = rand_in(1, rep == 7 ? 3000 : 40), inner = rep % 2 ? 1 : rand_in(1, 200);
            int64_t shape[3] = {rows, c, inner};
            ct_tensor y = ct_ct_rand(&rng, dt, 3, shape, -1, 1), bias = ct_ct_rand(&rng, dt, 1, &c, -1, 1);
            ct_tensor db = ct_ct_rand(&rng, dt, 1, &c, -3, 3); /* non-zero: the op adds to it */
            ct_tensor gy = ct_ct_to_gpu(&y), gbias = ct_ct_to_gpu(&bias), gdb = ct_ct_to_gpu(&db);

            ct_op_bias_add(&y, &bias, inner);
            ct_op_bias_add(&gy, &gbias, inner);
            ct_ct_check_equal("bias_add", &gy, &y);

            ct_op_bias_grad(&y, &db, inner);
            ct_op_bias_grad(&gy, &gdb, inner);
            double err = ct_ct_check_close("bias_grad", &gdb, &db, dt == CT_F32 ? 1e-5 : 1e-12, dt == CT_F32 ? 1e-6 : 1);
            if (err > (dt == CT_F32 ? 1e-5 : 1e-12))
                printf("  bias_grad %s rows=%lld c=%lld inner=%lld\n", ct_dtype_name(dt), (long long)rows,
                       (long long)c, (long long)inner);
            ct_tensor *ts[] = {&y, &bias, &db, &gy, &gbias, &gdb};
            free_all(ts, 6);
        }
}

static const ct_activation ACTS[] = {CT_ACT_NONE, CT_ACT_RELU, CT_ACT_GELU, CT_ACT_GELU_TANH, CT_ACT_TANH,
                                     CT_ACT_SIGMOID};

static void test_activations(void) {
    for (size_t ai = 0; ai < sizeof ACTS / sizeof *ACTS; ai++)
        for (int d = 0; d < 2; d++) {
            ct_activation act = ACTS[ai];
            ct_dtype dt = REALS[d];
            double tol = dt == CT_F32 ? 1e-5 : 1e-12;
            char what[64];
            int64_t shape[4];
            int nd = rand_shape(shape, ai % 2 ? 200000 : 5000);
            ct_tensor x = ct_ct_rand(&rng, dt, nd, shape, -2, 2), y = ct_ct_zeros(dt, nd, shape);
            ct_tensor dy = ct_ct_rand(&rng, dt, nd, shape, -1, 1), dx = ct_ct_zeros(dt, nd, shape);
            ct_tensor gx = ct_ct_to_gpu(&x), gy = ct_ct_to_gpu(&y), gdx = ct_ct_to_gpu(&dx);

            ct_op_activation_forward(act, &x, &y);
            ct_op_activation_forward(act, &gx, &gy);
            snprintf(what, sizeof what, "%s forward %s", ct_activation_name(act), ct_dtype_name(dt));
            ct_ct_check_close(what, &gy, &y, tol, 1e-6);

            /* Backward from the same x, y (the CPU's) and dy on both sides; the tensor the formula
             * does not read is passed as NULL, as layers may. */
            ct_tensor gyc = ct_ct_to_gpu(&y), gdy = ct_ct_to_gpu(&dy);
            bool from_x = act == CT_ACT_GELU || act == CT_ACT_GELU_TANH;
            ct_op_activation_backward(act, from_x ? &x : NULL, from_x ? NULL : &y, &dy, &dx);
            ct_op_activation_backward(act, from_x ? &gx : NULL, from_x ? NULL : &gyc, &gdy, &gdx);
            snprintf(what, sizeof what, "%s backward %s", ct_activation_name(act), ct_dtype_name(dt));
            /* relative to dy's scale where dx is smaller: GELU's derivative crosses zero near x = -0.75,
             * where its two terms (each dy-sized) cancel, and the CPU's float formula (a sigmoid)
             * and the GPU's (tanh in double) leave roundings of the terms, not of the result */
            ct_ct_check_close(what, &gdx, &dx, tol, fmax(ct_ct_rms(&dy), 1e-30));

            /* In place: y = act(x) over x's own memory. */
            ct_op_activation_forward(act, &x, &x);
            ct_op_activation_forward(act, &gx, &gx);
            snprintf(what, sizeof what, "%s forward in place %s", ct_activation_name(act), ct_dtype_name(dt));
            ct_ct_check_close(what, &gx, &x, tol, 1e-6);
            ct_tensor *ts[] = {&x, &y, &dy, &dx, &gx, &gy, &gdx, &gyc, &gdy};
            free_all(ts, 9);
        }
}

#endif

int main(void) {
    ct_cuda_test_begin("test_cuda_elementwise");
#ifdef CT_HAVE_CUDA
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    test_fill_copy();
    test_arith();
    test_all_finite();
    test_bias();
    test_activations();
#endif
    return ct_test_finish();
}
