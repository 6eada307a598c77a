/* BatchNorm2d, LayerNorm, Dropout, Embedding and Residual: finite-difference gradients in float64
 * (training and eval), running statistics by hand, float64 accumulation of float32 statistics, the
 * statistical and keying properties of dropout masks (rate, exact scale, split invariance, step and
 * layer keys, thread-count independence), embedding padding and id errors, residual shape errors
 * and parameter names.
 *
 * Why one file of over 600 lines: the five layers go through the same finite-difference harness
 * (fd_check_model) and model builder written here. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/ops.h"
#include "model/layers.h"
#include "model/model.h"
#include "model/params.h"
#include "testlib.h"

static ct_rng test_rng;

static double uniform(double lo, double hi) { return lo + (hi - lo) * ct_rng_uniform(&test_rng); }

static ct_shape shape1(int64_t a) { return (ct_shape){1, {a}}; }
static ct_shape shape2(int64_t a, int64_t b) { return (ct_shape){2, {a, b}}; }
static ct_shape shape3(int64_t a, int64_t b, int64_t c) { return (ct_shape){3, {a, b, c}}; }

static ct_status build(ct_model *model, ct_module *m, ct_shape in, ct_dtype dt, int64_t max_batch) {
    ct_model_options mo = {.dtype = dt, .max_batch = max_batch, .seed = ct_test_seed};
    return ct_model_build(model, m, &in, &mo);
}

/* A [batch, in...] tensor of the given dtype filled with U(lo, hi). */
static ct_tensor random_input(const ct_shape *in, int64_t batch, ct_dtype dt, double lo, double hi) {
    int ndim;
    int64_t shape[CT_MAX_DIMS];
    ct_shape_with_batch(in, batch, &ndim, shape);
    ct_tensor x;
    ct_tensor_alloc(&x, dt, CT_CPU, ndim, shape);
    for (int64_t i = 0; i < ct_tensor_numel(&x); i++) ct_tensor_set(&x, i, uniform(lo, hi));
    return x;
}

static ct_module *seq_of(int n, ct_module **layers) {
    ct_module *seq;
    CHECK_OK(ct_sequential_create(&seq));
    for (int i = 0; i < n; i++) CHECK_OK(ct_module_add_child(seq, layers[i], NULL));
    return seq;
}

/* --- finite differences on a model built by the caller (for state gradcheck cannot set) ------------ */

static double objective(ct_model *model, const ct_tensor *x, const double *r) {
    ct_tensor y;
    if (ct_model_forward(model, x, &y) != CT_OK) return NAN;
    double acc = 0;
    for (int64_t i = 0; i < ct_tensor_numel(&y); i++) acc += ((double *)y.data)[i] * r[i];
    return acc;
}

typedef struct model_objective {
    ct_model *model;
    ct_tensor *x;
    const double *r;
} model_objective;

static double model_sum(void *ctx) {
    model_objective *o = ctx;
    return objective(o->model, o->x, o->r);
}

/* Every element probed (these models are small). */
static double fd_rel(ct_model *model, ct_tensor *x, const double *r, double *target, const double *analytic,
                     int64_t n) {
    model_objective ctx = {model, x, r};
    ct_fd_result res = ct_fd_check(model_sum, &ctx, target, analytic, n, (int)n, false, &test_rng);
    CHECK(!res.analytic_zero, "analytic gradient is all zero: the check would prove nothing");
    return res.rel;
}

/* Checks every input and parameter gradient of an f64 model (input gradient enabled) on x. */
static void fd_check_model(const char *label, ct_model *model, ct_tensor *x) {
    ct_tensor y;
    CHECK_OK(ct_model_forward(model, x, &y));
    int64_t ny = ct_tensor_numel(&y), nx = ct_tensor_numel(x), np = ct_tensor_numel(&model->params.grads);
    double *r = malloc((size_t)ny * sizeof *r);
    for (int64_t i = 0; i < ny; i++) r[i] = uniform(-1, 1);
    ct_tensor dy;
    ct_tensor_alloc(&dy, CT_F64, CT_CPU, y.ndim, y.shape);
    memcpy(dy.data, r, (size_t)ny * sizeof *r);
    ct_model_zero_grad(model);
    CHECK_OK(ct_model_backward(model, &dy));
    double *dx = malloc((size_t)nx * sizeof *dx), *dp = malloc((size_t)np * sizeof *dp);
    memcpy(dx, ct_model_input_grad(model)->data, (size_t)nx * sizeof *dx);
    memcpy(dp, model->params.grads.data, (size_t)np * sizeof *dp);
    double ex = fd_rel(model, x, r, x->data, dx, nx);
    double ep = np > 0 ? fd_rel(model, x, r, model->params.values.data, dp, np) : 0.0;
    CHECK(ex < 1e-6, "%s: input gradient relative error %.3g", label, ex);
    CHECK(ep < 1e-6, "%s: parameter gradient relative error %.3g", label, ep);
    printf("%s: input %.3g, parameters %.3g\n", label, ex, ep);
    free(r);
    free(dx);
    free(dp);
    ct_tensor_free(&dy);
}

/* --- batch norm ------------------------------------------------------------------------------------ */

static void batchnorm_gradchecks(void) {
    ct_module *m;
    int64_t c = 1 + (int64_t)ct_rng_below(&test_rng, 4), h = 1 + (int64_t)ct_rng_below(&test_rng, 3),
            w = 2 + (int64_t)ct_rng_below(&test_rng, 3);
    ct_shape in = shape3(c, h, w);
    ct_gradcheck_opts o = ct_gradcheck_defaults(2 + (int64_t)ct_rng_below(&test_rng, 4));
    o.max_probes = 64;
    CHECK_OK(ct_batchnorm2d_create(c, 1e-5, 0.1, true, &m));
    ct_gradcheck_module("batchnorm2d train", m, &in, &o);
    CHECK_OK(ct_batchnorm2d_create(0, 1e-3, 0.3, false, &m));
    ct_gradcheck_module("batchnorm2d train (no affine, inferred C)", m, &in, &o);
    /* Batch 1 is fine in training as long as H*W > 1; with exactly two values per channel the
     * normalised output is +-1 up to eps and its gradient is too small to check by differences, so
     * give each channel at least three. */
    ct_gradcheck_opts o1 = o;
    o1.batch = 1;
    ct_shape in1 = shape3(c, h, w + 1);
    CHECK_OK(ct_batchnorm2d_create(c, 1e-5, 0.1, true, &m));
    ct_gradcheck_module("batchnorm2d train batch 1", m, &in1, &o1);

    /* Eval with random running statistics: a plain affine map, checked on a model we can set up. */
    for (int affine = 0; affine < 2; affine++) {
        ct_model model;
        CHECK_OK(ct_batchnorm2d_create(c, 1e-5, 0.1, affine, &m));
        if (build(&model, m, in, CT_F64, 3) != CT_OK) continue;
        CHECK_OK(ct_model_enable_input_grad(&model));
        ct_model_train(&model, false);
        double *buf = model.params.buffers.data;
        const ct_param *rm = ct_params_find(&model.params, "running_mean"),
                       *rv = ct_params_find(&model.params, "running_var");
        CHECK(rm && rv && (rm->flags & CT_PARAM_BUFFER) && (rv->flags & CT_PARAM_BUFFER), "running stats are buffers");
        for (int64_t i = 0; i < c; i++) {
            buf[rm->offset + i] = uniform(-1, 1);
            buf[rv->offset + i] = uniform(0.3, 2);
        }
        double *pv = model.params.values.data;
        for (int64_t i = 0; i < ct_tensor_numel(&model.params.values); i++) pv[i] += uniform(-0.3, 0.3);
        ct_tensor x = random_input(&in, 3, CT_F64, -2, 2);
        fd_check_model(affine ? "batchnorm2d eval" : "batchnorm2d eval (no affine)", &model, &x);
        ct_tensor_free(&x);
        ct_model_free(&model);
    }
}

/* Running statistics, eval normalisation and the unbiased update against sums by hand. */
static void batchnorm_stats(void) {
    int64_t c = 3, h = 2, w = 3, b = 4;
    double momentum = uniform(0.05, 0.9), eps = 1e-5;
    ct_module *m;
    ct_model model;
    CHECK_OK(ct_batchnorm2d_create(0, eps, momentum, true, &m));
    ct_shape in = shape3(c, h, w);
    if (build(&model, m, in, CT_F64, b) != CT_OK) return;
    const ct_param *pw = ct_params_find(&model.params, "weight"), *pb = ct_params_find(&model.params, "bias");
    const ct_param *rm = ct_params_find(&model.params, "running_mean");
    const ct_param *rv = ct_params_find(&model.params, "running_var");
    /* Hugging Face's get_decay_parameter_names: a BatchNorm2d's weight is decayed, its bias is not */
    CHECK(pw && pb && !(pw->flags & CT_PARAM_NO_DECAY) && (pb->flags & CT_PARAM_NO_DECAY),
          "weight decayed, bias no-decay");
    CHECK(rm && rv, "running_mean and running_var exist");
    if (!pw || !pb || !rm || !rv) return;
    for (int64_t i = 0; i < c; i++) {
        CHECK(ct_tensor_get(pw->value, i) == 1.0 && ct_tensor_get(pb->value, i) == 0.0, "init weight 1, bias 0");
        CHECK(ct_tensor_get(rm->value, i) == 0.0 && ct_tensor_get(rv->value, i) == 1.0, "init running stats 0 / 1");
        ct_tensor_set(pw->value, i, uniform(0.5, 2));
        ct_tensor_set(pb->value, i, uniform(-1, 1));
    }
    double expect_rm[3] = {0, 0, 0}, expect_rv[3] = {1, 1, 1};
    ct_tensor y;
    for (int step = 0; step < 3; step++) {
        ct_tensor x = random_input(&in, b, CT_F64, -1 + step, 2 + 2 * step);
        CHECK_OK(ct_model_forward(&model, &x, &y));
        const double *xd = x.data, *yd = y.data;
        for (int64_t ch = 0; ch < c; ch++) {
            double sum = 0, sq = 0, n = (double)(b * h * w);
            for (int64_t i = 0; i < b; i++)
                for (int64_t s = 0; s < h * w; s++) sum += xd[(i * c + ch) * h * w + s];
            double mean = sum / n;
            for (int64_t i = 0; i < b; i++)
                for (int64_t s = 0; s < h * w; s++) sq += pow(xd[(i * c + ch) * h * w + s] - mean, 2);
            expect_rm[ch] = (1 - momentum) * expect_rm[ch] + momentum * mean;
            expect_rv[ch] = (1 - momentum) * expect_rv[ch] + momentum * sq / (n - 1);
            int64_t k = (1 * c + ch) * h * w + 1; /* one output element per channel */
            double want =
                (xd[k] - mean) / sqrt(sq / n + eps) * ct_tensor_get(pw->value, ch) + ct_tensor_get(pb->value, ch);
            CHECK_NEAR(yd[k], want, 1e-12);
        }
        ct_tensor_free(&x);
    }
    for (int64_t ch = 0; ch < c; ch++) {
        CHECK_NEAR(ct_tensor_get(rm->value, ch), expect_rm[ch], 1e-12);
        CHECK_NEAR(ct_tensor_get(rv->value, ch), expect_rv[ch], 1e-12);
    }
    /* Eval: running statistics, and they no longer move. */
    ct_model_train(&model, false);
    ct_tensor x = random_input(&in, 2, CT_F64, -1, 1);
    CHECK_OK(ct_model_forward(&model, &x, &y));
    for (int64_t ch = 0; ch < c; ch++) {
        int64_t k = (1 * c + ch) * h * w + 2;
        double xk = ((double *)x.data)[k];
        double want = (xk - expect_rm[ch]) / sqrt(expect_rv[ch] + eps) * ct_tensor_get(pw->value, ch) +
                      ct_tensor_get(pb->value, ch);
        CHECK_NEAR(((double *)y.data)[k], want, 1e-12);
        CHECK_NEAR(ct_tensor_get(rm->value, ch), expect_rm[ch], 1e-15);
    }
    ct_tensor_free(&x);
    /* One value per channel cannot be normalised in training (PyTorch's error); eval is fine. */
    ct_model_free(&model);
    CHECK_OK(ct_batchnorm2d_create(2, eps, momentum, true, &m));
    if (build(&model, m, shape3(2, 1, 1), CT_F64, 4) == CT_OK) {
        ct_tensor xs = random_input(&model.in_shape, 1, CT_F64, -1, 1);
        CHECK_ERR(ct_model_forward(&model, &xs, &y), CT_ERR_SHAPE, "batchnorm2d", "more than 1 value per channel",
                  "[1, 2, 1, 1]");
        ct_model_train(&model, false);
        CHECK_OK(ct_model_forward(&model, &xs, &y));
        ct_tensor_free(&xs);
        ct_model_free(&model);
    }
}

/* float32 input far from zero: statistics accumulated in float32 would lose the variance. */
static void batchnorm_f32_accuracy(void) {
    int64_t c = 2, h = 16, w = 16, b = 32;
    ct_module *m;
    ct_model model;
    CHECK_OK(ct_batchnorm2d_create(c, 1e-5, 0.1, true, &m));
    ct_shape in = shape3(c, h, w);
    if (build(&model, m, in, CT_F32, b) != CT_OK) return;
    ct_tensor x = random_input(&in, b, CT_F32, 1000, 1001), y;
    CHECK_OK(ct_model_forward(&model, &x, &y));
    const float *xd = x.data, *yd = y.data;
    double worst = 0, scale = 0;
    for (int64_t ch = 0; ch < c; ch++) {
        double sum = 0, sq = 0, n = (double)(b * h * w);
        for (int64_t i = 0; i < b; i++)
            for (int64_t s = 0; s < h * w; s++) sum += xd[(i * c + ch) * h * w + s];
        double mean = sum / n;
        for (int64_t i = 0; i < b; i++)
            for (int64_t s = 0; s < h * w; s++) sq += pow(xd[(i * c + ch) * h * w + s] - mean, 2);
        double rstd = 1 / sqrt(sq / n + 1e-5);
        for (int64_t i = 0; i < b; i++)
            for (int64_t s = 0; s < h * w; s++) {
                int64_t k = (i * c + ch) * h * w + s;
                double want = (xd[k] - mean) * rstd;
                worst = fmax(worst, fabs(yd[k] - want));
                scale = fmax(scale, fabs(want));
            }
    }
    CHECK(worst / scale < 1e-6, "batchnorm2d f32 with mean 1000: relative error %.3g", worst / scale);
    ct_tensor_free(&x);
    ct_model_free(&model);
}

static void batchnorm_errors(void) {
    ct_module *m;
    ct_model model;
    CHECK_OK(ct_batchnorm2d_create(0, 1e-5, 0.1, true, &m));
    CHECK_ERR(build(&model, m, shape1(8), CT_F32, 2), CT_ERR_SHAPE, "batchnorm2d", "[N, 8]", "[N, C, H, W]");
    CHECK_OK(ct_batchnorm2d_create(4, 1e-5, 0.1, true, &m));
    CHECK_ERR(build(&model, m, shape3(3, 2, 2), CT_F32, 2), CT_ERR_SHAPE, "[N, 3, 2, 2]", "num_features=4");
    CHECK_ERR(ct_batchnorm2d_create(4, 1e-5, 1.5, true, &m), CT_ERR_INVALID_ARG, "momentum=1.5");
    CHECK_ERR(ct_batchnorm2d_create(4, 0, 0.1, true, &m), CT_ERR_INVALID_ARG, "eps=0");
    json_t *spec = json_loads("{\"type\": \"batchnorm2d\", \"momentun\": 0.1}", 0, NULL);
    CHECK_ERR(ct_module_from_json(spec, "model", &m), CT_ERR_CONFIG, "momentun", "momentum");
    json_decref(spec);
}

/* --- layer norm ------------------------------------------------------------------------------------ */

static void layernorm_checks(void) {
    ct_module *m;
    int64_t f = 3 + (int64_t)ct_rng_below(&test_rng, 8), t = 1 + (int64_t)ct_rng_below(&test_rng, 4);
    ct_gradcheck_opts o = ct_gradcheck_defaults(1 + (int64_t)ct_rng_below(&test_rng, 5));
    o.max_probes = 64;
    ct_shape in2 = shape1(f), in3 = shape2(t, f);
    CHECK_OK(ct_layernorm_create(f, 1e-5, true, true, &m));
    ct_gradcheck_module("layernorm [B, F]", m, &in2, &o);
    CHECK_OK(ct_layernorm_create(0, 1e-5, true, true, &m));
    ct_gradcheck_module("layernorm [B, T, F]", m, &in3, &o);
    CHECK_OK(ct_layernorm_create(f, 1e-5, true, false, &m));
    ct_gradcheck_module("layernorm [B, T, F] without bias", m, &in3, &o);
    CHECK_OK(ct_layernorm_create(f, 1e-3, false, true, &m));
    ct_gradcheck_module("layernorm [B, T, F] without affine", m, &in3, &o);
    ct_shape in4 = shape3(2, t, f);
    CHECK_OK(ct_layernorm_create(f, 1e-5, true, true, &m));
    ct_gradcheck_module("layernorm [B, 2, T, F]", m, &in4, &o);

    /* Normalised rows, init 1 / 0, names and flags. */
    ct_model model;
    CHECK_OK(ct_layernorm_create(f, 1e-5, true, true, &m));
    if (build(&model, m, in3, CT_F64, 3) == CT_OK) {
        const ct_param *pw = ct_params_find(&model.params, "weight"), *pb = ct_params_find(&model.params, "bias");
        CHECK(pw && pb && (pw->flags & CT_PARAM_NO_DECAY) && (pb->flags & CT_PARAM_NO_DECAY), "weight/bias no-decay");
        ct_tensor x = random_input(&in3, 3, CT_F64, -5, 3), y;
        CHECK_OK(ct_model_forward(&model, &x, &y));
        for (int64_t r = 0; r < 3 * t; r++) {
            double s = 0, s2 = 0, xs = 0, xs2 = 0;
            for (int64_t j = 0; j < f; j++) {
                double v = ((double *)y.data)[r * f + j], u = ((double *)x.data)[r * f + j];
                s += v;
                s2 += v * v;
                xs += u;
                xs2 += u * u;
            }
            CHECK(fabs(s / f) < 1e-12, "row %lld mean %g", (long long)r, s / f);
            /* The normalised row's variance is var / (var + eps) for the row's own biased variance. */
            double var = xs2 / f - (xs / f) * (xs / f);
            CHECK_NEAR(s2 / f, var / (var + 1e-5), 1e-9);
        }
        ct_tensor_free(&x);
        ct_model_free(&model);
    }
    CHECK_OK(ct_layernorm_create(5, 1e-5, true, true, &m));
    CHECK_ERR(build(&model, m, shape2(3, 4), CT_F32, 2), CT_ERR_SHAPE, "layernorm", "[N, 3, 4]", "expected 5");
    json_t *spec = json_loads("{\"type\": \"layernorm\", \"normalized_shape\": [3, 4]}", 0, NULL);
    CHECK_ERR(ct_module_from_json(spec, "model", &m), CT_ERR_CONFIG, "model.normalized_shape", "last dimension");
    json_decref(spec);
    spec = json_loads("{\"type\": \"layernorm\", \"normalized_shape\": [6], \"bias\": false}", 0, NULL);
    CHECK_OK(ct_module_from_json(spec, "model", &m));
    json_decref(spec);
    if (build(&model, m, shape2(2, 6), CT_F32, 2) == CT_OK) {
        CHECK(ct_params_find(&model.params, "weight") && !ct_params_find(&model.params, "bias"),
              "bias=false keeps weight only");
        ct_model_free(&model);
    }
}

/* --- dropout --------------------------------------------------------------------------------------- */

/* Builds a dropout model; x is random away from 0, so an output of 0 means dropped. */
static ct_status dropout_model(ct_model *model, double p, ct_shape in, ct_dtype dt, int64_t batch) {
    ct_module *m;
    CT_TRY(ct_dropout_create(p, &m));
    return build(model, m, in, dt, batch);
}

static ct_tensor nonzero_input(const ct_shape *in, int64_t batch, ct_dtype dt) {
    ct_tensor x = random_input(in, batch, dt, 0.5, 2);
    for (int64_t i = 0; i < ct_tensor_numel(&x); i += 2) ct_tensor_set(&x, i, -ct_tensor_get(&x, i));
    return x;
}

static void dropout_properties(void) {
    double p = uniform(0.05, 0.9);
    int64_t f = 1000, b = 64;
    ct_shape in = shape1(f);
    ct_model model;
    if (dropout_model(&model, p, in, CT_F32, b) != CT_OK) {
        CHECK(false, "dropout build: %s", ct_last_error());
        return;
    }
    ct_tensor x = nonzero_input(&in, b, CT_F32), y;
    int64_t n = b * f;
    uint64_t step = ct_rng_below(&test_rng, 1000000);
    int64_t offset = (int64_t)ct_rng_below(&test_rng, 1000000);
    ct_model_set_step(&model, step, offset);
    CHECK_OK(ct_model_forward(&model, &x, &y));
    uint8_t *mask = malloc((size_t)n);
    float *y0 = malloc((size_t)n * sizeof *y0);
    memcpy(y0, y.data, (size_t)n * sizeof *y0);
    int64_t dropped = 0, inexact = 0;
    double scale = 1.0 / (1.0 - p);
    for (int64_t i = 0; i < n; i++) {
        float xv = ((float *)x.data)[i];
        mask[i] = y0[i] != 0;
        dropped += !mask[i];
        if (mask[i] && y0[i] != (float)((double)xv * scale)) inexact++;
    }
    double se = sqrt(p * (1 - p) / (double)n), frac = (double)dropped / (double)n;
    CHECK(fabs(frac - p) < 6 * se, "dropped fraction %.5f vs p=%.5f (6 SE = %.5f)", frac, p, 6 * se);
    CHECK(inexact == 0, "%lld kept elements are not exactly x / (1 - p)", (long long)inexact);

    /* Same (seed, step, offset): same mask. Different step: a different one. */
    CHECK_OK(ct_model_forward(&model, &x, &y));
    CHECK(memcmp(y.data, y0, (size_t)n * sizeof *y0) == 0, "same step and offset give the same output");
    ct_model_set_step(&model, step + 1, offset);
    CHECK_OK(ct_model_forward(&model, &x, &y));
    int64_t differ = 0;
    for (int64_t i = 0; i < n; i++) differ += (((float *)y.data)[i] != 0) != mask[i];
    double expect_differ = 2 * p * (1 - p) * (double)n;
    CHECK(fabs(differ - expect_differ) < 6 * sqrt(expect_differ),
          "next step: %lld of %lld mask bits differ (expected ~%.0f)", (long long)differ, (long long)n, expect_differ);

    /* Split invariance: row r of a batch at offset o is row 0 of a batch at offset o + r, and a
     * batch split in two halves gives the two halves of the whole. */
    for (int k = 0; k < 4; k++) {
        int64_t r = (int64_t)ct_rng_below(&test_rng, (uint64_t)b);
        ct_tensor xr = ct_tensor_rows(&x, r, 1);
        ct_model_set_step(&model, step, offset + r);
        CHECK_OK(ct_model_forward(&model, &xr, &y));
        CHECK(memcmp(y.data, y0 + r * f, (size_t)f * sizeof *y0) == 0, "row %lld alone at offset o+%lld differs",
              (long long)r, (long long)r);
    }
    int64_t half = 1 + (int64_t)ct_rng_below(&test_rng, (uint64_t)(b - 1));
    ct_tensor lo = ct_tensor_rows(&x, 0, half), hi = ct_tensor_rows(&x, half, b - half);
    ct_model_set_step(&model, step, offset);
    CHECK_OK(ct_model_forward(&model, &lo, &y));
    CHECK(memcmp(y.data, y0, (size_t)(half * f) * sizeof *y0) == 0, "first part of a split batch differs");
    ct_model_set_step(&model, step, offset + half);
    CHECK_OK(ct_model_forward(&model, &hi, &y));
    CHECK(memcmp(y.data, y0 + half * f, (size_t)((b - half) * f) * sizeof *y0) == 0,
          "second part of a split batch differs");

    /* The mask does not depend on the number of threads. */
    int threads = ct_get_num_threads();
    ct_set_num_threads(1);
    ct_model_set_step(&model, step, offset);
    CHECK_OK(ct_model_forward(&model, &x, &y));
    CHECK(memcmp(y.data, y0, (size_t)n * sizeof *y0) == 0, "one thread gives another mask than %d", threads);
    ct_set_num_threads(threads);

    /* Backward: dx = dy * mask / (1 - p). */
    CHECK_OK(ct_model_forward(&model, &x, &y));
    ct_tensor dy = random_input(&in, b, CT_F32, -1, 1);
    CHECK_OK(ct_model_enable_input_grad(&model));
    CHECK_OK(ct_model_forward(&model, &x, &y));
    CHECK_OK(ct_model_backward(&model, &dy));
    const float *dx = ct_model_input_grad(&model)->data;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += dx[i] != (mask[i] ? (float)(((float *)dy.data)[i] * scale) : 0.0f);
    CHECK(bad == 0, "%lld input-gradient elements do not follow the forward mask", (long long)bad);

    /* NaN and infinity: PyTorch multiplies by the mask, so a dropped NaN or inf gives NaN rather
     * than 0 (NaN reaches the loss and nan_inf_policy), a kept one NaN or inf; the same for dy. */
    int64_t poison[4];
    const float bad_values[4] = {NAN, INFINITY, -INFINITY, NAN};
    for (int k = 0; k < 4; k++) {
        poison[k] = (int64_t)ct_rng_below(&test_rng, (uint64_t)n);
        ((float *)x.data)[poison[k]] = bad_values[k];
        ((float *)dy.data)[poison[k]] = bad_values[k];
    }
    ct_model_set_step(&model, step, offset);
    CHECK_OK(ct_model_forward(&model, &x, &y));
    CHECK_OK(ct_model_backward(&model, &dy));
    dx = ct_model_input_grad(&model)->data;
    for (int k = 0; k < 4; k++) {
        int64_t i = poison[k];
        float want = mask[i] ? (float)((double)((float *)x.data)[i] * scale) : NAN;
        float got = ((float *)y.data)[i], got_dx = dx[i];
        CHECK(isnan(want) ? isnan(got) : got == want, "dropout of %g (%s) at %lld gave %g, PyTorch gives %g",
              (double)bad_values[k], mask[i] ? "kept" : "dropped", (long long)i, (double)got, (double)want);
        CHECK(isnan(want) ? isnan(got_dx) : got_dx == want, "dropout's gradient of %g (%s) at %lld is %g, expected %g",
              (double)bad_values[k], mask[i] ? "kept" : "dropped", (long long)i, (double)got_dx, (double)want);
    }

    /* Eval: the identity. */
    ct_model_train(&model, false);
    CHECK_OK(ct_model_forward(&model, &x, &y));
    CHECK(memcmp(y.data, x.data, (size_t)n * sizeof(float)) == 0, "eval dropout is not the identity");
    CHECK_OK(ct_model_backward(&model, &dy));
    CHECK(memcmp(ct_model_input_grad(&model)->data, dy.data, (size_t)n * sizeof(float)) == 0,
          "eval dropout gradient is not dy");
    ct_tensor_free(&dy);
    ct_tensor_free(&x);
    free(mask);
    free(y0);
    ct_model_free(&model);
}

/* The layer's name and the run seed key the mask: two layers, or two seeds, drop differently. */
static void dropout_keys(void) {
    int64_t rows = 8, f = 512, n = rows * f;
    int64_t shape[2] = {rows, f};
    ct_tensor x, y, mask[3];
    ct_tensor_alloc(&x, CT_F64, CT_CPU, 2, shape);
    ct_tensor_alloc(&y, CT_F64, CT_CPU, 2, shape);
    ct_tensor_fill(&x, 1.0);
    for (int k = 0; k < 3; k++) ct_tensor_alloc(&mask[k], CT_U8, CT_CPU, 2, shape);
    ct_dropout_ctx ctx = {.step = 7, .sample_offset = 100};
    ct_dropout_key(ct_test_seed, ct_hash_name("layers.0"), ctx.key);
    ct_op_dropout_forward(&x, 0.5, &ctx, &mask[0], &y);
    ct_dropout_key(ct_test_seed, ct_hash_name("layers.1"), ctx.key);
    ct_op_dropout_forward(&x, 0.5, &ctx, &mask[1], &y);
    ct_dropout_key(ct_test_seed + 1, ct_hash_name("layers.0"), ctx.key);
    ct_op_dropout_forward(&x, 0.5, &ctx, &mask[2], &y);
    int64_t d01 = 0, d02 = 0, ones = 0;
    for (int64_t i = 0; i < n; i++) {
        uint8_t a = ((uint8_t *)mask[0].data)[i];
        d01 += a != ((uint8_t *)mask[1].data)[i];
        d02 += a != ((uint8_t *)mask[2].data)[i];
        ones += a;
    }
    /* Independent p = 0.5 masks differ in half the elements (6 SE: 6 * sqrt(n / 4)). */
    CHECK(fabs(d01 - n / 2.0) < 3 * sqrt((double)n), "layers.0 and layers.1 masks differ in %lld of %lld",
          (long long)d01, (long long)n);
    CHECK(fabs(d02 - n / 2.0) < 3 * sqrt((double)n), "seeds s and s+1 masks differ in %lld of %lld", (long long)d02,
          (long long)n);
    /* Kept elements are 1 / (1 - 0.5) = 2 exactly, dropped 0; backward follows the mask. */
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += ((double *)y.data)[i] != (((uint8_t *)mask[2].data)[i] ? 2.0 : 0.0);
    CHECK(bad == 0 && ones > 0, "op output does not match its mask");
    ct_op_dropout_backward(&x, &mask[2], 0.5, &y);
    bad = 0;
    for (int64_t i = 0; i < n; i++) bad += ((double *)y.data)[i] != (((uint8_t *)mask[2].data)[i] ? 2.0 : 0.0);
    CHECK(bad == 0, "op backward does not match its mask");
    /* p = 1 drops everything, p = 0 nothing. */
    ct_op_dropout_forward(&x, 1.0, &ctx, &mask[0], &y);
    CHECK(ct_op_sum_squares_det(&y) == 0.0, "p = 1 leaves nonzero outputs");
    ct_op_dropout_forward(&x, 0.0, &ctx, &mask[0], &y);
    CHECK(ct_op_sum_squares_det(&y) == (double)n, "p = 0 drops something");
    ct_tensor_free(&x);
    ct_tensor_free(&y);
    for (int k = 0; k < 3; k++) ct_tensor_free(&mask[k]);
}

static void dropout_gradcheck_and_errors(void) {
    ct_module *m;
    ct_shape in = shape2(3, 7);
    ct_gradcheck_opts o = ct_gradcheck_defaults(4);
    CHECK_OK(ct_dropout_create(uniform(0.1, 0.7), &m));
    ct_gradcheck_module("dropout train", m, &in, &o);
    CHECK_OK(ct_dropout_create(0.0, &m));
    ct_gradcheck_module("dropout p=0", m, &in, &o);
    o.training = false;
    CHECK_OK(ct_dropout_create(0.5, &m));
    ct_gradcheck_module("dropout eval", m, &in, &o);

    /* p = 1: zeros forward and backward, as PyTorch. */
    ct_model model;
    if (dropout_model(&model, 1.0, in, CT_F32, 2) == CT_OK) {
        CHECK_OK(ct_model_enable_input_grad(&model));
        ct_tensor x = nonzero_input(&in, 2, CT_F32), y;
        CHECK_OK(ct_model_forward(&model, &x, &y));
        CHECK(ct_op_sum_squares_det(&y) == 0.0, "p = 1 output is not zero");
        CHECK_OK(ct_model_backward(&model, &x));
        CHECK(ct_op_sum_squares_det(ct_model_input_grad(&model)) == 0.0, "p = 1 gradient is not zero");
        ct_tensor_free(&x);
        ct_model_free(&model);
    }
    CHECK_ERR(ct_dropout_create(1.5, &m), CT_ERR_INVALID_ARG, "p=1.5");
    CHECK_ERR(ct_dropout_create(-0.1, &m), CT_ERR_INVALID_ARG, "p=-0.1");
    json_t *spec = json_loads("{\"type\": \"dropout\", \"p\": 2}", 0, NULL);
    CHECK_ERR(ct_module_from_json(spec, "model.layers[3]", &m), CT_ERR_CONFIG, "model.layers[3]", "p=2");
    json_decref(spec);
}

/* --- embedding ------------------------------------------------------------------------------------- */

static void embedding_checks(void) {
    ct_module *m;
    /* dim >= 3: the layer norm in the stack below is degenerate for 1 or 2 features (x - mean is
     * constant or +-|x1 - x2| / 2), and its gradient too small to check by differences. */
    int64_t num = 3 + (int64_t)ct_rng_below(&test_rng, 8), dim = 3 + (int64_t)ct_rng_below(&test_rng, 4);
    ct_gradcheck_opts o = ct_gradcheck_defaults(3);
    o.integer_input_max = (int)num;
    o.max_probes = 200;
    ct_shape in1 = shape1(5), in2 = shape2(2, 3);
    CHECK_OK(ct_embedding_create(num, dim, -1, &m));
    ct_gradcheck_module("embedding [B, T]", m, &in1, &o);
    CHECK_OK(ct_embedding_create(num, dim, -1, &m));
    ct_gradcheck_module("embedding [B, T1, T2]", m, &in2, &o);
    /* Embedding -> LayerNorm -> Residual(Linear, GELU, Linear) -> Dropout: a small transformer stack. */
    ct_module *inner_layers[3], *layers[4];
    CHECK_OK(ct_linear_create(0, 2 * dim, true, &inner_layers[0]));
    CHECK_OK(ct_activation_create(CT_ACT_GELU, &inner_layers[1]));
    CHECK_OK(ct_linear_create(0, dim, true, &inner_layers[2]));
    CHECK_OK(ct_embedding_create(num, dim, -1, &layers[0]));
    CHECK_OK(ct_layernorm_create(0, 1e-5, true, true, &layers[1]));
    CHECK_OK(ct_residual_create(seq_of(3, inner_layers), &layers[2]));
    CHECK_OK(ct_dropout_create(0.25, &layers[3]));
    ct_gradcheck_module("embedding, layernorm, residual mlp, dropout", seq_of(4, layers), &in1, &o);

    /* padding_idx: a zero row at init that never gets a gradient, while its output is the row. */
    int64_t pad = (int64_t)ct_rng_below(&test_rng, (uint64_t)num);
    ct_model model;
    CHECK_OK(ct_embedding_create(num, dim, pad, &m));
    if (build(&model, m, in1, CT_F64, 4) == CT_OK) {
        CHECK(model.in_dtype == CT_I64, "an embedding model takes int64 ids");
        const ct_param *w = ct_params_find(&model.params, "weight");
        CHECK(w && w->shape[0] == num && w->shape[1] == dim, "weight is [num_embeddings, dim]");
        double pad_norm = 0;
        for (int64_t j = 0; j < dim; j++) pad_norm += fabs(ct_tensor_get(w->value, pad * dim + j));
        CHECK(pad_norm == 0.0, "padding row is not zero at init");
        double *wv = w->value->data;
        for (int64_t i = 0; i < num * dim; i++) wv[i] = uniform(-1, 1);
        ct_tensor ids, y, dy;
        int64_t ishape[2] = {4, 5};
        ct_tensor_alloc(&ids, CT_I64, CT_CPU, 2, ishape);
        int64_t *id = ids.data;
        for (int64_t i = 0; i < 20; i++) id[i] = i % 3 == 0 ? pad : (int64_t)ct_rng_below(&test_rng, (uint64_t)num);
        CHECK_OK(ct_model_forward(&model, &ids, &y));
        int64_t wrong = 0;
        for (int64_t i = 0; i < 20; i++)
            for (int64_t j = 0; j < dim; j++) wrong += ((double *)y.data)[i * dim + j] != wv[id[i] * dim + j];
        CHECK(wrong == 0, "embedding output is not the weight rows");
        dy = random_input(&model.out_shape, 4, CT_F64, -1, 1);
        ct_model_zero_grad(&model);
        CHECK_OK(ct_model_backward(&model, &dy));
        double *gw = w->grad->data;
        double worst = 0;
        for (int64_t row = 0; row < num; row++)
            for (int64_t j = 0; j < dim; j++) {
                double want = 0;
                for (int64_t i = 0; i < 20; i++)
                    if (id[i] == row && row != pad) want += ((double *)dy.data)[i * dim + j];
                worst = fmax(worst, fabs(gw[row * dim + j] - want));
            }
        CHECK(worst < 1e-12, "embedding gradient off by %g (padding row must stay 0)", worst);
        /* Out-of-range and negative ids: an error naming the id, where it is, and the table size. */
        id[13] = num + 4;
        CHECK_ERR(ct_model_forward(&model, &ids, &y), CT_ERR_INVALID_ARG, "embedding", "[2, 3]", "num_embeddings=");
        char want[64];
        snprintf(want, sizeof want, "token id %lld", (long long)(num + 4));
        CHECK(strstr(ct_last_error(), want) != NULL, "message lacks '%s': %s", want, ct_last_error());
        id[13] = 0;
        id[4] = -2;
        CHECK_ERR(ct_model_forward(&model, &ids, &y), CT_ERR_INVALID_ARG, "token id -2", "[0, 4]");
        ct_tensor_free(&ids);
        ct_tensor_free(&dy);
        ct_model_free(&model);
    }

    /* N(0, 1) init on a large table. */
    CHECK_OK(ct_embedding_create(500, 128, -1, &m));
    if (build(&model, m, in1, CT_F32, 1) == CT_OK) {
        const ct_param *w = ct_params_find(&model.params, "weight");
        double s = 0, s2 = 0, n = 500 * 128;
        for (int64_t i = 0; i < 500 * 128; i++) {
            double v = ct_tensor_get(w->value, i);
            s += v;
            s2 += v * v;
        }
        CHECK(fabs(s / n) < 6 / sqrt(n), "embedding init mean %g", s / n);
        CHECK(fabs(s2 / n - 1) < 6 * sqrt(2 / n), "embedding init variance %g", s2 / n);
        ct_model_free(&model);
    }

    /* Backward is the same for any thread count, with many repeated ids (exercises the parallel path). */
    CHECK_OK(ct_embedding_create(7, 256, 3, &m));
    if (build(&model, m, shape1(64), CT_F32, 32) == CT_OK) {
        int64_t ishape[2] = {32, 64};
        ct_tensor ids, y;
        ct_tensor_alloc(&ids, CT_I64, CT_CPU, 2, ishape);
        for (int64_t i = 0; i < 32 * 64; i++) ((int64_t *)ids.data)[i] = (int64_t)ct_rng_below(&test_rng, 7);
        CHECK_OK(ct_model_forward(&model, &ids, &y));
        ct_tensor dy = random_input(&model.out_shape, 32, CT_F32, -1, 1);
        int threads = ct_get_num_threads();
        ct_model_zero_grad(&model);
        CHECK_OK(ct_model_backward(&model, &dy));
        size_t bytes = ct_tensor_nbytes(&model.params.grads);
        void *g = malloc(bytes);
        memcpy(g, model.params.grads.data, bytes);
        ct_set_num_threads(1);
        ct_model_zero_grad(&model);
        CHECK_OK(ct_model_backward(&model, &dy));
        CHECK(memcmp(g, model.params.grads.data, bytes) == 0, "embedding gradient depends on the thread count");
        ct_set_num_threads(threads);
        free(g);
        ct_tensor_free(&ids);
        ct_tensor_free(&dy);
        ct_model_free(&model);
    }

    CHECK_ERR(ct_embedding_create(5, 4, 5, &m), CT_ERR_INVALID_ARG, "padding_idx=5");
    CHECK_ERR(ct_embedding_create(0, 4, -1, &m), CT_ERR_INVALID_ARG, "num_embeddings=0");
    json_t *spec = json_loads("{\"type\": \"embedding\", \"num_embeddings\": 5, \"embedding_dim\": 2, "
                              "\"padding_idx\": -1}", 0, NULL);
    CHECK_ERR(ct_module_from_json(spec, "model", &m), CT_ERR_CONFIG, "model.padding_idx", "-1");
    json_decref(spec);
    spec = json_loads("{\"type\": \"embedding\", \"num_embeddings\": 5, \"embedding_dim\": 2, \"padding_idx\": null}",
                      0, NULL);
    CHECK_OK(ct_module_from_json(spec, "model", &m));
    ct_module_destroy(m);
    json_decref(spec);
    spec = json_loads("{\"type\": \"embedding\", \"embedding_dim\": 2}", 0, NULL);
    CHECK_ERR(ct_module_from_json(spec, "model", &m), CT_ERR_CONFIG, "num_embeddings");
    json_decref(spec);
}

/* --- residual -------------------------------------------------------------------------------------- */

static ct_module *mlp(int64_t hidden, int64_t out, ct_activation act) {
    ct_module *l[3];
    CHECK_OK(ct_linear_create(0, hidden, true, &l[0]));
    CHECK_OK(ct_activation_create(act, &l[1]));
    CHECK_OK(ct_linear_create(0, out, true, &l[2]));
    return seq_of(3, l);
}

static void residual_checks(void) {
    ct_module *m;
    int64_t f = 3 + (int64_t)ct_rng_below(&test_rng, 5);
    ct_gradcheck_opts o = ct_gradcheck_defaults(3);
    ct_shape in = shape1(f), in3 = shape2(3, f);
    CHECK_OK(ct_residual_create(mlp(5, f, CT_ACT_TANH), &m));
    ct_gradcheck_module("residual(mlp)", m, &in, &o);
    ct_module *ln;
    CHECK_OK(ct_layernorm_create(0, 1e-5, true, true, &ln));
    CHECK_OK(ct_residual_create(ln, &m));
    ct_gradcheck_module("residual(layernorm) on [B, T, F]", m, &in3, &o);
    /* Chained residuals behind a linear: dx flows through both paths of each. */
    ct_module *layers[4], *drop;
    CHECK_OK(ct_linear_create(0, f, true, &layers[0]));
    CHECK_OK(ct_residual_create(mlp(4, f, CT_ACT_SIGMOID), &layers[1]));
    CHECK_OK(ct_dropout_create(0.3, &drop));
    CHECK_OK(ct_residual_create(drop, &layers[2]));
    CHECK_OK(ct_residual_create(mlp(3, f, CT_ACT_GELU_TANH), &layers[3]));
    ct_gradcheck_module("linear, residual x3", seq_of(4, layers), &in3, &o);
    /* A residual as the first layer (no input gradient needed) still trains its inner module. */
    ct_gradcheck_opts oi = ct_gradcheck_defaults(3);
    ct_module *emb_layers[2];
    CHECK_OK(ct_embedding_create(6, f, -1, &emb_layers[0]));
    CHECK_OK(ct_residual_create(mlp(4, f, CT_ACT_TANH), &emb_layers[1]));
    oi.integer_input_max = 6;
    ct_gradcheck_module("embedding, residual", seq_of(2, emb_layers), &in, &oi);

    /* Names: the inner module is "fn". */
    ct_model model;
    CHECK_OK(ct_residual_create(mlp(4, f, CT_ACT_RELU), &m));
    if (build(&model, m, in, CT_F32, 2) == CT_OK) {
        CHECK(ct_params_find(&model.params, "fn.0.weight") && ct_params_find(&model.params, "fn.2.bias"),
              "residual parameters are fn.0.weight, fn.2.bias");
        ct_model_free(&model);
    }
    json_t *spec = json_loads("{\"type\": \"sequential\", \"layers\": [{\"type\": \"residual\", \"module\": "
                              "{\"type\": \"linear\", \"out_features\": 4}}, {\"type\": \"residual\", \"layers\": "
                              "[{\"type\": \"layernorm\"}, {\"type\": \"linear\", \"out_features\": 4}]}]}",
                              0, NULL);
    CHECK_OK(ct_module_from_json(spec, "model", &m));
    json_decref(spec);
    if (build(&model, m, shape1(4), CT_F32, 2) == CT_OK) {
        CHECK(ct_params_find(&model.params, "0.fn.weight") && ct_params_find(&model.params, "1.fn.0.weight") &&
                  ct_params_find(&model.params, "1.fn.1.bias"),
              "JSON residual names: 0.fn.weight, 1.fn.0.weight, 1.fn.1.bias");
        ct_model_free(&model);
    }

    /* Inner output shape must equal the input shape; the error names both and the layer. */
    ct_module *lin, *seq;
    CHECK_OK(ct_linear_create(0, f + 1, true, &lin));
    CHECK_OK(ct_residual_create(lin, &m));
    seq = seq_of(1, &m);
    char want_in[32], want_out[32];
    snprintf(want_in, sizeof want_in, "[N, 3, %lld]", (long long)f);
    snprintf(want_out, sizeof want_out, "[N, 3, %lld]", (long long)f + 1);
    CHECK_ERR(build(&model, seq, in3, CT_F32, 2), CT_ERR_SHAPE, "residual '0'", "'0.fn'", want_in, want_out);
    spec = json_loads("{\"type\": \"residual\"}", 0, NULL);
    CHECK_ERR(ct_module_from_json(spec, "model.layers[1]", &m), CT_ERR_CONFIG, "model.layers[1]", "exactly one");
    json_decref(spec);
    spec = json_loads("{\"type\": \"residual\", \"layers\": [{\"type\": \"linea\"}]}", 0, NULL);
    CHECK_ERR(ct_module_from_json(spec, "model", &m), CT_ERR_CONFIG, "model.layers[0]", "linear");
    json_decref(spec);
    CHECK_ERR(ct_residual_create(NULL, &m), CT_ERR_INVALID_ARG, "residual");
}

int main(void) {
    ct_test_begin("test_norm_misc");
    ct_set_num_threads(2); /* the thread-independence checks compare against one thread */
    ct_rng_init(&test_rng, ct_test_seed, 0, CT_RNG_USER + 1);
    batchnorm_gradchecks();
    batchnorm_stats();
    batchnorm_f32_accuracy();
    batchnorm_errors();
    layernorm_checks();
    dropout_properties();
    dropout_keys();
    dropout_gradcheck_and_errors();
    embedding_checks();
    residual_checks();
    return ct_test_finish();
}
