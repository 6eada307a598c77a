/* Batch norm and layer norm on CUDA against the CPU backend on the same random inputs, in float32 and float64.
 *
 * Batch norm: [N, C] (BatchNorm1d), [N, C, L] and [N, C, H, W], with and without weight and bias, training (batch
 * statistics; the running statistics after the momentum update are compared too) and eval (running statistics),
 * forward (y, save_mean, save_rstd) and backward (dx through the batch statistics or as an affine map; dweight and
 * dbias accumulated onto non-zero values; dx skipped). Inputs sit off zero (|mean| > std) as real activations do.
 *
 * Layer norm: rows x F with F from 1 to a few hundred (wider than a block), many rows (the parameter gradients sum
 * over rows in chunks), with and without weight and bias, and with a residual (the norm of x + r, the sum written;
 * dx with the residual path's gradient added); the sum is the same bits on both sides.
 *
 * Both sides accumulate in double and round the same way, so float32 agrees to about an ulp: 1e-5 relative, with the
 * floor at the rms of the CPU tensor for outputs whose elements can cancel to near zero (dx, gradients); float64 to
 * 1e-12. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/ops/ops.h"
#include "cuda_testlib.h"

static ct_rng rng;

static int64_t rnd(int64_t lo, int64_t hi) { return lo + (int64_t)ct_rng_below(&rng, (uint64_t)(hi - lo + 1)); }
static double unif(double lo, double hi) { return lo + (hi - lo) * ct_rng_uniform(&rng); }

static void close_to(const char *what, const char *name, const ct_tensor *gpu, const ct_tensor *cpu, double tol) {
    char label[400];
    snprintf(label, sizeof label, "%s: %s", what, name);
    ct_ct_check_close(label, gpu, cpu, tol, fmax(ct_ct_rms(cpu), 1e-30));
}

/* A normalisation's dx = rstd w (dy - mean(dy) - xhat mean(dy xhat)) cancels to rounding where the
 * sums leave little (a layer-norm row of one element, a batch-norm channel of two samples: dx is
 * 0 but for eps): its error is that of terms of dy * w * rstd's size, the floor here. */
static void dx_close(const char *what, const ct_tensor *gdx, const ct_tensor *dx, const ct_tensor *dy,
                     const ct_tensor *rstd, const ct_tensor *w, double tol) {
    char label[400];
    snprintf(label, sizeof label, "%s: dx", what);
    const double terms = ct_ct_rms(dy) * ct_ct_rms(rstd) * (w ? ct_ct_rms(w) : 1.0);
    ct_ct_check_close(label, gdx, dx, tol, fmax(fmax(ct_ct_rms(dx), terms), 1e-30));
}

static void free_all(ct_tensor **ts, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (ts[i]->data) ct_tensor_free(ts[i]);
}

static void check_batchnorm(int ndim, const int64_t *shape, ct_dtype dt, bool affine, bool bias, bool training) {
    const double tol = dt == CT_F64 ? 1e-12 : 1e-5;
    const int64_t c = shape[1];
    const double momentum = unif(0.01, 0.5), eps = unif(1e-6, 1e-3);
    char what[256], buf[96];
    snprintf(what, sizeof what, "batchnorm %s %s %s affine=%d bias=%d momentum=%.3f eps=%.2e", ct_dtype_name(dt),
             ct_shape_str(ndim, shape, buf, sizeof buf), training ? "train" : "eval", affine, bias, momentum, eps);

    /* Per-channel offsets larger than the spread, as after a ReLU: the two-pass variance matters. */
    ct_tensor x = ct_ct_rand(&rng, dt, ndim, shape, -1, 1);
    int64_t n = ct_tensor_numel(&x), inner = n / (shape[0] * c);
    for (int64_t i = 0; i < n; i++) {
        int64_t ch = (i / inner) % c;
        ct_tensor_set(&x, i, ct_tensor_get(&x, i) * (0.5 + 0.3 * (double)ch) + 2.0 + (double)ch);
    }
    ct_tensor dy = ct_ct_rand(&rng, dt, ndim, shape, -1, 1);
    ct_tensor w = ct_ct_rand(&rng, dt, 1, &c, 0.5, 1.5), b = ct_ct_rand(&rng, dt, 1, &c, -1, 1);
    ct_tensor rm = ct_ct_rand(&rng, dt, 1, &c, -1, 3), rv = ct_ct_rand(&rng, dt, 1, &c, 0.2, 2);
    ct_tensor dw = ct_ct_rand(&rng, dt, 1, &c, -1, 1), db = ct_ct_rand(&rng, dt, 1, &c, -1, 1);
    ct_tensor y = ct_ct_zeros(dt, ndim, shape), dx = ct_ct_zeros(dt, ndim, shape);
    ct_tensor sm = ct_ct_zeros(CT_F64, 1, &c), sr = ct_ct_zeros(CT_F64, 1, &c);
    ct_tensor gx = ct_ct_to_gpu(&x), gdy = ct_ct_to_gpu(&dy), gw = ct_ct_to_gpu(&w), gb = ct_ct_to_gpu(&b);
    ct_tensor grm = ct_ct_to_gpu(&rm), grv = ct_ct_to_gpu(&rv), gdw = ct_ct_to_gpu(&dw), gdb = ct_ct_to_gpu(&db);
    ct_tensor gy = ct_ct_to_gpu(&y), gdx = ct_ct_to_gpu(&dx), gsm = ct_ct_to_gpu(&sm), gsr = ct_ct_to_gpu(&sr);

    ct_op_batchnorm_forward(&x, affine ? &w : NULL, bias ? &b : NULL, &rm, &rv, training, momentum, eps, &y, &sm, &sr);
    ct_op_batchnorm_backward(&x, &dy, affine ? &w : NULL, &sm, &sr, training, &dx, affine ? &dw : NULL,
                             bias ? &db : NULL);
    ct_op_batchnorm_forward(&gx, affine ? &gw : NULL, bias ? &gb : NULL, &grm, &grv, training, momentum, eps, &gy, &gsm,
                            &gsr);
    ct_op_batchnorm_backward(&gx, &gdy, affine ? &gw : NULL, &gsm, &gsr, training, &gdx, affine ? &gdw : NULL,
                             bias ? &gdb : NULL);

    close_to(what, "y", &gy, &y, tol);
    close_to(what, "save_mean", &gsm, &sm, 1e-12);
    close_to(what, "save_rstd", &gsr, &sr, 1e-12);
    close_to(what, "running_mean", &grm, &rm, tol);
    close_to(what, "running_var", &grv, &rv, tol);
    dx_close(what, &gdx, &dx, &dy, &sr, affine ? &w : NULL, tol);
    close_to(what, "dweight (accumulated)", &gdw, &dw, tol);
    close_to(what, "dbias (accumulated)", &gdb, &db, tol);

    /* Parameter gradients without dx: the same sums, added once more on both sides. */
    ct_op_batchnorm_backward(&x, &dy, affine ? &w : NULL, &sm, &sr, training, NULL, affine ? &dw : NULL,
                             bias ? &db : NULL);
    ct_op_batchnorm_backward(&gx, &gdy, affine ? &gw : NULL, &gsm, &gsr, training, NULL, affine ? &gdw : NULL,
                             bias ? &gdb : NULL);
    close_to(what, "dweight (dx skipped)", &gdw, &dw, tol);
    close_to(what, "dbias (dx skipped)", &gdb, &db, tol);

    ct_tensor *all[] = {&x, &dy, &w,   &b,   &rm,  &rv,  &dw,  &db,  &y,  &dx,  &sm,  &sr,
                        &gx, &gdy, &gw, &gb, &grm, &grv, &gdw, &gdb, &gy, &gdx, &gsm, &gsr};
    free_all(all, sizeof all / sizeof all[0]);
}

/* With residual: the norm of x + r (the sum written too) and dx = dres + the norm's gradient. */
static void check_layernorm(int ndim, const int64_t *shape, ct_dtype dt, bool affine, bool bias, bool residual) {
    const double tol = dt == CT_F64 ? 1e-12 : 1e-5;
    const int64_t f = shape[ndim - 1];
    const double eps = unif(1e-6, 1e-3);
    char what[256], buf[96];
    snprintf(what, sizeof what, "layernorm %s %s affine=%d bias=%d residual=%d eps=%.2e", ct_dtype_name(dt),
             ct_shape_str(ndim, shape, buf, sizeof buf), affine, bias, residual, eps);

    ct_tensor x = ct_ct_rand(&rng, dt, ndim, shape, -1, 1);
    int64_t n = ct_tensor_numel(&x), rows = n / f;
    for (int64_t i = 0; i < n; i++) ct_tensor_set(&x, i, ct_tensor_get(&x, i) * 2.0 + 1.5); /* off zero */
    ct_tensor dy = ct_ct_rand(&rng, dt, ndim, shape, -1, 1);
    ct_tensor w = ct_ct_rand(&rng, dt, 1, &f, 0.5, 1.5), b = ct_ct_rand(&rng, dt, 1, &f, -1, 1);
    ct_tensor dw = ct_ct_rand(&rng, dt, 1, &f, -1, 1), db = ct_ct_rand(&rng, dt, 1, &f, -1, 1);
    ct_tensor y = ct_ct_zeros(dt, ndim, shape), dx = ct_ct_zeros(dt, ndim, shape);
    ct_tensor sm = ct_ct_zeros(CT_F64, 1, &rows), sr = ct_ct_zeros(CT_F64, 1, &rows);
    ct_tensor gx = ct_ct_to_gpu(&x), gdy = ct_ct_to_gpu(&dy), gw = ct_ct_to_gpu(&w), gb = ct_ct_to_gpu(&b);
    ct_tensor gdw = ct_ct_to_gpu(&dw), gdb = ct_ct_to_gpu(&db), gy = ct_ct_to_gpu(&y), gdx = ct_ct_to_gpu(&dx);
    ct_tensor gsm = ct_ct_to_gpu(&sm), gsr = ct_ct_to_gpu(&sr);
    ct_tensor r = {0}, sum = {0}, dres = {0}, gr = {0}, gsum = {0}, gdres = {0};
    if (residual) {
        r = ct_ct_rand(&rng, dt, ndim, shape, -1, 1);
        dres = ct_ct_rand(&rng, dt, ndim, shape, -1, 1);
        sum = ct_ct_zeros(dt, ndim, shape);
        gr = ct_ct_to_gpu(&r), gdres = ct_ct_to_gpu(&dres), gsum = ct_ct_to_gpu(&sum);
    }
    /* what is normalised: x, or the sum */
    const ct_tensor *xn = residual ? &sum : &x, *gxn = residual ? &gsum : &gx;

    ct_op_layernorm_forward(&x, residual ? &r : NULL, affine ? &w : NULL, bias ? &b : NULL, eps,
                            residual ? &sum : NULL, &y, &sm, &sr);
    ct_op_layernorm_backward(xn, &dy, affine ? &w : NULL, &sm, &sr, residual ? &dres : NULL, &dx, affine ? &dw : NULL,
                             bias ? &db : NULL);
    ct_op_layernorm_forward(&gx, residual ? &gr : NULL, affine ? &gw : NULL, bias ? &gb : NULL, eps,
                            residual ? &gsum : NULL, &gy, &gsm, &gsr);
    ct_op_layernorm_backward(gxn, &gdy, affine ? &gw : NULL, &gsm, &gsr, residual ? &gdres : NULL, &gdx,
                             affine ? &gdw : NULL, bias ? &gdb : NULL);

    if (residual) ct_ct_check_equal("layernorm: x + residual", &gsum, &sum); /* one rounded add on both sides */
    close_to(what, "y", &gy, &y, tol);
    close_to(what, "save_mean", &gsm, &sm, 1e-12);
    close_to(what, "save_rstd", &gsr, &sr, 1e-12);
    if (residual)
        close_to(what, "dx (with the residual's)", &gdx, &dx, tol);
    else
        dx_close(what, &gdx, &dx, &dy, &sr, affine ? &w : NULL, tol);
    close_to(what, "dweight (accumulated)", &gdw, &dw, tol);
    close_to(what, "dbias (accumulated)", &gdb, &db, tol);

    /* Parameter gradients alone (dx skipped), accumulated once more. */
    ct_op_layernorm_backward(xn, &dy, affine ? &w : NULL, &sm, &sr, NULL, NULL, affine ? &dw : NULL, bias ? &db : NULL);
    ct_op_layernorm_backward(gxn, &gdy, affine ? &gw : NULL, &gsm, &gsr, NULL, NULL, affine ? &gdw : NULL,
                             bias ? &gdb : NULL);
    close_to(what, "dweight (dx skipped)", &gdw, &dw, tol);
    close_to(what, "dbias (dx skipped)", &gdb, &db, tol);

    ct_tensor *all[] = {&x,   &dy,  &w,   &b,  &dw,  &db,   &y,  &dx,   &sm,  &sr,  &gx,   &gdy,  &gw, &gb,
                        &gdw, &gdb, &gy, &gdx, &gsm, &gsr, &r, &sum, &dres, &gr, &gsum, &gdres};
    free_all(all, sizeof all / sizeof all[0]);
}

int main(void) {
    ct_cuda_test_begin("test_cuda_norm");
    ct_rng_init(&rng, ct_test_seed, 0, 0);
    const ct_dtype dts[] = {CT_F32, CT_F64};

    for (int t = 0; t < 24; t++) {
        ct_dtype dt = dts[t % 2];
        int64_t shape[4];
        int ndim = 2 + (t / 2) % 3; /* [N, C], [N, C, L], [N, C, H, W] */
        shape[0] = rnd(1, 8);
        shape[1] = rnd(1, 6);
        for (int d = 2; d < ndim; d++) shape[d] = rnd(1, 12);
        bool training = (t / 6) % 2 == 0;
        int64_t per_channel = shape[0];
        for (int d = 2; d < ndim; d++) per_channel *= shape[d];
        if (training && per_channel < 2) shape[0] = 2; /* the unbiased variance needs two values */
        check_batchnorm(ndim, shape, dt, t % 4 != 3, t % 4 != 2, training);
    }
    /* A channel with many values (several strides of the block) and a BatchNorm1d with many channels. */
    const int64_t big4[4] = {16, 3, 24, 24}, wide2[2] = {64, 700};
    for (int d = 0; d < 2; d++) {
        check_batchnorm(4, big4, dts[d], true, true, true);
        check_batchnorm(4, big4, dts[d], true, true, false);
        check_batchnorm(2, wide2, dts[d], true, true, true);
    }

    for (int t = 0; t < 20; t++) {
        ct_dtype dt = dts[t % 2];
        int64_t shape[3];
        int ndim = 2 + t % 2;
        static const int64_t widths[] = {1, 2, 7, 32, 100, 128, 129, 300};
        shape[ndim - 1] = widths[rnd(0, 7)];
        for (int d = 0; d < ndim - 1; d++) shape[d] = rnd(1, 40);
        check_layernorm(ndim, shape, dt, t % 4 != 3, t % 4 != 2, t % 3 == 0);
    }
    /* Many rows: the row chunks of the parameter gradients, up to their cap. */
    const int64_t tall[2] = {17000, 3}, mid[3] = {8, 100, 64};
    for (int d = 0; d < 2; d++) {
        check_layernorm(2, tall, dts[d], true, true, false);
        check_layernorm(3, mid, dts[d], true, false, true);
    }
    return ct_test_finish();
}
