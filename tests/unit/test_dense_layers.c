/* Linear, activations, Flatten and Sequential: finite-difference gradients in float64, PyTorch's
 * init bounds, the errors bad inputs get, and the paths of ct_op_linear_forward and
 * ct_op_linear_backward for backends without the kernel (gemm, bias_add, activation; gemm,
 * bias_grad, gemm) against the CPU's kernels. */
#include <math.h>
#include <string.h>

#include "core/ops/backend.h"
#include "core/ops/ops.h"
#include "model/layers.h"
#include "model/model.h"
#include "testlib.h"

static ct_shape shape1(int64_t a) { return (ct_shape){1, {a}}; }

static void gradchecks(void) {
    ct_module *m;
    ct_shape in = shape1(7);
    ct_gradcheck_opts o = ct_gradcheck_defaults(5);
    CHECK_OK(ct_linear_create(7, 4, true, &m));
    ct_gradcheck_module("linear", m, &in, &o);
    CHECK_OK(ct_linear_create(0, 3, false, &m));
    ct_gradcheck_module("linear (no bias, inferred in_features)", m, &in, &o);
    ct_shape seq_in = {2, {3, 7}}; /* [B, T, C]: linear over the last dimension */
    CHECK_OK(ct_linear_create(7, 2, true, &m));
    ct_gradcheck_module("linear on [B, T, C]", m, &seq_in, &o);

    const ct_activation acts[] = {CT_ACT_RELU, CT_ACT_GELU, CT_ACT_GELU_TANH, CT_ACT_TANH, CT_ACT_SIGMOID};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        CHECK_OK(ct_activation_create(acts[i], &m));
        ct_gradcheck_opts oa = o;
        oa.input_scale = 3.0;
        oa.kink_margin = acts[i] == CT_ACT_RELU ? 1e-3 : 0;
        ct_gradcheck_module(ct_activation_name(acts[i]), m, &in, &oa);
    }

    /* linear -> tanh -> flatten -> linear over a [B, 2, 3] input. */
    ct_module *seq, *c;
    CHECK_OK(ct_sequential_create(&seq));
    CHECK_OK(ct_flatten_create(&c));
    ct_module_add_child(seq, c, NULL);
    CHECK_OK(ct_linear_create(0, 5, true, &c));
    ct_module_add_child(seq, c, NULL);
    CHECK_OK(ct_activation_create(CT_ACT_TANH, &c));
    ct_module_add_child(seq, c, NULL);
    CHECK_OK(ct_linear_create(0, 3, true, &c));
    ct_module_add_child(seq, c, NULL);
    ct_shape img = {2, {2, 3}};
    ct_gradcheck_module("sequential", seq, &img, &o);

    /* linear -> ReLU / tanh GELU -> linear: the activation applied by the first linear's kernel */
    const ct_activation fused[] = {CT_ACT_RELU, CT_ACT_GELU_TANH};
    for (int i = 0; i < 2; i++) {
        CHECK_OK(ct_sequential_create(&seq));
        CHECK_OK(ct_linear_create(7, 6, true, &c));
        ct_module_add_child(seq, c, NULL);
        CHECK_OK(ct_activation_create(fused[i], &c));
        ct_module_add_child(seq, c, NULL);
        CHECK_OK(ct_linear_create(6, 3, true, &c));
        ct_module_add_child(seq, c, NULL);
        /* ReLU's kink is at the first linear's output, which no input margin keeps away from 0:
         * the piecewise checker skips probes whose step crosses it */
        ct_gradcheck_opts of = o;
        of.piecewise = fused[i] == CT_ACT_RELU;
        char name[64];
        snprintf(name, sizeof name, "linear + %s (fused) + linear", ct_activation_name(fused[i]));
        ct_gradcheck_module(name, seq, &seq_in, &of);
    }
}

static void init_bounds_and_names(void) {
    ct_module *seq, *c;
    ct_sequential_create(&seq);
    ct_linear_create(784, 256, true, &c);
    ct_module_add_child(seq, c, NULL);
    ct_activation_create(CT_ACT_RELU, &c);
    ct_module_add_child(seq, c, NULL);
    ct_linear_create(256, 10, true, &c);
    ct_module_add_child(seq, c, NULL);
    ct_model model;
    ct_shape in = shape1(784);
    ct_model_options mo = {.dtype = CT_F32, .max_batch = 4, .seed = ct_test_seed};
    CHECK_OK(ct_model_build(&model, seq, &in, &mo));
    const ct_param *w = ct_params_find(&model.params, "0.weight");
    const ct_param *b = ct_params_find(&model.params, "2.bias");
    CHECK(w && b, "parameters are named like PyTorch's (0.weight, 2.bias)");
    CHECK(ct_params_count(&model.params) == 784 * 256 + 256 + 256 * 10 + 10, "parameter count %lld",
          (long long)ct_params_count(&model.params));
    CHECK(b && (b->flags & CT_PARAM_NO_DECAY), "biases are excluded from weight decay");
    if (w) {
        /* U(-1/sqrt(784), 1/sqrt(784)): bounded, mean ~0, variance bound^2/3. */
        double bound = 1.0 / 28.0, sum = 0, sum2 = 0, maxabs = 0;
        int64_t n = w->numel;
        for (int64_t i = 0; i < n; i++) {
            double v = ct_tensor_get(w->value, i);
            sum += v;
            sum2 += v * v;
            maxabs = fmax(maxabs, fabs(v));
        }
        /* A draw just under the bound may round up to the float nearest the bound, never past it. */
        double stored_bound = (float)bound;
        CHECK(maxabs <= stored_bound, "weight %.9g outside the kaiming-uniform bound %.9g", maxabs, stored_bound);
        CHECK(fabs(sum / n) < 6 * bound / sqrt(3.0 * n), "weight mean %g", sum / n);
        CHECK(fabs(sum2 / n / (bound * bound / 3) - 1) < 0.02, "weight variance ratio %g", sum2 / n / (bound * bound / 3));
    }
    /* Views point into one flat buffer, in declaration order. */
    const ct_param *w0 = ct_params_find(&model.params, "0.weight"), *w2 = ct_params_find(&model.params, "2.weight");
    CHECK(w0 && w2 && (char *)w2->value->data > (char *)w0->value->data &&
              (char *)w2->value->data < (char *)model.params.values.data + ct_tensor_nbytes(&model.params.values),
          "parameters live in the flat buffer");
    ct_model_free(&model);
}

static void bad_inputs(void) {
    ct_module *seq, *c;
    ct_sequential_create(&seq);
    ct_linear_create(784, 16, true, &c);
    ct_module_add_child(seq, c, NULL);
    ct_model model;
    ct_shape in = shape1(784);
    ct_model_options mo = {.dtype = CT_F32, .max_batch = 8, .seed = 1};
    CHECK_OK(ct_model_build(&model, seq, &in, &mo));
    int64_t bad_shape[2] = {8, 783};
    ct_tensor x, y;
    ct_tensor_alloc(&x, CT_F32, CT_CPU, 2, bad_shape);
    CHECK_ERR(ct_model_forward(&model, &x, &y), CT_ERR_SHAPE, "'model'", "[8, 783]", "[N, 784]");
    ct_tensor_free(&x);
    int64_t big[2] = {9, 784};
    ct_tensor_alloc(&x, CT_F32, CT_CPU, 2, big);
    CHECK_ERR(ct_model_forward(&model, &x, &y), CT_ERR_SHAPE, "'model'", "batch 9");
    ct_tensor_free(&x);
    int64_t ok[2] = {8, 784};
    ct_tensor_alloc(&x, CT_F64, CT_CPU, 2, ok);
    CHECK_ERR(ct_model_forward(&model, &x, &y), CT_ERR_DTYPE, "'model'", "f64", "f32");
    ct_tensor_free(&x);
    ct_tensor_alloc(&x, CT_F32, CT_CPU, 2, ok);
    x.device = (ct_device){CT_DEVICE_CUDA, 0};
    CHECK_ERR(ct_model_forward(&model, &x, &y), CT_ERR_DEVICE, "'model'", "cuda:0", "cpu");
    x.device = CT_CPU;
    CHECK_OK(ct_model_forward(&model, &x, &y));
    ct_tensor dy;
    int64_t dshape[2] = {8, 15};
    ct_tensor_alloc(&dy, CT_F32, CT_CPU, 2, dshape);
    CHECK_ERR(ct_model_backward(&model, &dy), CT_ERR_SHAPE, "'model'", "[8, 15]", "[N, 16]");
    ct_tensor_free(&dy);
    ct_tensor_free(&x);
    ct_model_free(&model);

    /* A layer that cannot take the input shape is rejected at build time, by name. */
    ct_sequential_create(&seq);
    ct_linear_create(10, 4, true, &c);
    ct_module_add_child(seq, c, NULL);
    ct_linear_create(5, 4, true, &c);
    ct_module_add_child(seq, c, NULL);
    ct_shape in10 = shape1(10);
    CHECK_ERR(ct_model_build(&model, seq, &in10, &mo), CT_ERR_SHAPE, "linear '1'", "in_features=5");
    CHECK_ERR(ct_linear_create(3, 0, true, &c), CT_ERR_INVALID_ARG, "out_features=0");
    ct_device d;
    CHECK_ERR(ct_device_parse("gpu0", &d), CT_ERR_INVALID_ARG, "'gpu0'");
}

/* The model's state machine and aliasing rules: what a caller can get wrong must be an error. */
static void model_misuse(void) {
    ct_module *seq, *c;
    ct_model model;
    ct_model_options mo = {.dtype = CT_F32, .max_batch = 4, .seed = 3};
    ct_shape in = shape1(5);
    ct_sequential_create(&seq);
    ct_linear_create(5, 5, true, &c);
    ct_module_add_child(seq, c, NULL);
    CHECK(ct_residual_create(NULL, &c) == CT_ERR_INVALID_ARG, "a residual without an inner module is accepted");
    ct_activation_create(CT_ACT_RELU, &c);
    ct_module *res;
    CHECK_OK(ct_residual_create(c, &res));
    ct_module_add_child(seq, res, NULL);
    CHECK_OK(ct_model_build(&model, seq, &in, &mo));
    int64_t shape[2] = {4, 5};
    ct_tensor x, dy, y;
    ct_tensor_alloc(&x, CT_F32, CT_CPU, 2, shape);
    ct_tensor_alloc(&dy, CT_F32, CT_CPU, 2, shape);
    for (int i = 0; i < 20; i++) ((float *)x.data)[i] = (float)(i % 7) - 3.0f;
    ct_op_fill(&dy, 1.0);
    CHECK_ERR(ct_model_backward(&model, &dy), CT_ERR_STATE, "backward without a forward");
    CHECK_OK(ct_model_forward(&model, &x, &y));
    float expect[20];
    memcpy(expect, y.data, sizeof expect);
    /* The same tensor as input and output struct: layers must read *x before writing *y. */
    ct_tensor t = x;
    CHECK_OK(ct_model_forward(&model, &t, &t));
    CHECK(memcmp(t.data, expect, sizeof expect) == 0, "forward(x, x) differs from forward(x, y)");
    CHECK_ERR(ct_model_backward(&model, &t), CT_ERR_INVALID_ARG, "output buffer");
    /* Resizing drops what the last forward saved. */
    CHECK_OK(ct_model_enable_input_grad(&model));
    CHECK_ERR(ct_model_backward(&model, &dy), CT_ERR_STATE, "backward without a forward");
    CHECK_ERR(ct_model_set_max_batch(&model, (int64_t)1 << 60), CT_ERR_SHAPE, "too large");
    CHECK_ERR(ct_model_forward(&model, &x, &y), CT_ERR_STATE, "no activation buffers");
    CHECK_OK(ct_model_set_max_batch(&model, 4));
    CHECK_OK(ct_model_forward(&model, &x, &y));
    CHECK(memcmp(y.data, expect, sizeof expect) == 0, "the model computes differently after a failed resize");
    CHECK_OK(ct_model_backward(&model, &dy));
    ct_tensor empty = ct_tensor_rows(&x, 0, 0);
    CHECK_ERR(ct_model_forward(&model, &empty, &y), CT_ERR_SHAPE, "empty batch");
    ct_tensor_free(&x);
    ct_tensor_free(&dy);
    ct_model_free(&model);

    ct_shape zero = {2, {3, 0}};
    ct_linear_create(0, 2, true, &c);
    CHECK_ERR(ct_model_build(&model, c, &zero, &mo), CT_ERR_SHAPE, "[N, 3, 0]", "below 1");
    int64_t huge[3] = {(int64_t)1 << 40, (int64_t)1 << 30, 16};
    CHECK_ERR(ct_tensor_alloc(&x, CT_F32, CT_CPU, 3, huge), CT_ERR_SHAPE, "too large");
}

/* ct_op_linear_forward with and without the backend's kernel (the CPU's table swapped for a copy
 * that lacks it): the same values, float64 and float32, with and without bias, with no activation, a
 * ReLU and a tanh GELU (whose input both paths keep in pre), on rows the kernel splits over threads:
 * within the bound two summation orders allow (relative to each sum's term sizes), which an engine's
 * own split over threads can change. */
static void linear_forward_fallback(void) {
    ct_rng rng;
    ct_rng_init(&rng, ct_test_seed, 7, CT_RNG_USER);
    const int64_t rows = 300, in = 70, out = 90;
    const ct_dtype dtypes[] = {CT_F64, CT_F32};
    const ct_activation acts[] = {CT_ACT_NONE, CT_ACT_RELU, CT_ACT_GELU_TANH};
    const ct_backend_ops *cpu = ct_backends[CT_DEVICE_CPU];
    ct_backend_ops without = *cpu;
    without.linear_forward = NULL;
    for (int d = 0; d < 2; d++) {
        const ct_dtype dt = dtypes[d];
        /* Two summation orders of in + 1 terms (the engines split the products differently) differ by at
         * most 2 (in + 1) u of the sum of the terms' sizes, u the dtype's unit roundoff; the GELU's slope
         * (below 1.13) carries that to its output. */
        const double tol = 2.0 * (double)(in + 1) * (dt == CT_F64 ? 0x1p-53 : 0x1p-24);
        ct_tensor x = ct_test_alloc(dt, 2, (int64_t[]){rows, in}), w = ct_test_alloc(dt, 2, (int64_t[]){out, in});
        ct_tensor b = ct_test_alloc(dt, 1, (int64_t[]){out}), y[2], pre[2];
        for (int k = 0; k < 2; k++) {
            y[k] = ct_test_alloc(dt, 2, (int64_t[]){rows, out});
            pre[k] = ct_test_alloc(dt, 2, (int64_t[]){rows, out});
        }
        for (int64_t i = 0; i < rows * in; i++) ct_tensor_set(&x, i, ct_rng_normal(&rng));
        for (int64_t i = 0; i < out * in; i++) ct_tensor_set(&w, i, ct_rng_normal(&rng) / sqrt((double)in));
        for (int64_t i = 0; i < out; i++) ct_tensor_set(&b, i, ct_rng_normal(&rng));
        /* each output's sum of term sizes: |x| |w|^T + |b|, in float64 */
        ct_tensor scale = ct_test_alloc(CT_F64, 2, (int64_t[]){rows, out});
        for (int64_t r = 0; r < rows; r++)
            for (int64_t o = 0; o < out; o++) {
                double t = fabs(ct_tensor_get(&b, o));
                for (int64_t i = 0; i < in; i++)
                    t += fabs(ct_tensor_get(&x, r * in + i) * ct_tensor_get(&w, o * in + i));
                ct_tensor_set(&scale, r * out + o, t);
            }
        for (int with_bias = 0; with_bias < 2; with_bias++)
            for (int a = 0; a < 3; a++) {
                const ct_activation act = acts[a];
                const bool gelu = act == CT_ACT_GELU_TANH;
                for (int k = 0; k < 2; k++) {
                    ct_op_fill(&pre[k], NAN);
                    ct_backends[CT_DEVICE_CPU] = k ? &without : cpu;
                    ct_op_linear_forward(&x, &w, with_bias ? &b : NULL, act, gelu ? &pre[k] : NULL, &y[k]);
                    ct_backends[CT_DEVICE_CPU] = cpu;
                }
                double worst = 0, lowest = INFINITY;
                for (int64_t i = 0; i < rows * out; i++) {
                    const double want = ct_tensor_get(&y[1], i), want_pre = ct_tensor_get(&pre[1], i);
                    const double sz = ct_tensor_get(&scale, i) * (gelu ? 1.13 : 1.0);
                    double d1 = fabs(ct_tensor_get(&y[0], i) - want) / sz;
                    if (gelu) d1 = fmax(d1, fabs(ct_tensor_get(&pre[0], i) - want_pre) / ct_tensor_get(&scale, i));
                    worst = d1 > worst || d1 != d1 ? d1 : worst;
                    lowest = fmin(lowest, want);
                }
                CHECK(worst <= tol, "linear_forward %s bias=%d %s: kernel and three-op path differ by %.3g",
                      ct_dtype_name(dt), with_bias, ct_activation_name(act), worst);
                /* each activation's range: the ReLU's >= 0, the GELU's >= its minimum -0.170 */
                const double floor = act == CT_ACT_RELU ? 0.0 : gelu ? -0.1701 : -INFINITY;
                CHECK(lowest >= floor && (act == CT_ACT_RELU ? lowest == 0 : lowest < 0),
                      "linear_forward %s bias=%d %s: lowest output %.4g", ct_dtype_name(dt), with_bias,
                      ct_activation_name(act), lowest);
            }
        ct_tensor *all[] = {&x, &w, &b, &y[0], &y[1], &pre[0], &pre[1], &scale};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) ct_tensor_free(all[i]);
    }
}

/* ct_op_linear_backward with and without the backend's kernel, float32, at 1 to 3 threads: the same
 * bits (the kernel splits each product as ct_op_gemm would, in one parallel region), with and
 * without the bias and input gradients, at shapes whose products split by rows, by columns or not at
 * all, and whose bias gradient is shared by the threads or not (on the built-in engine, taken by
 * the weight gradient's GEMM). dweight and dbias accumulate onto random values. */
static void linear_backward_fallback(void) {
    ct_rng rng;
    ct_rng_init(&rng, ct_test_seed, 8, CT_RNG_USER);
    /* the last two: a long K (the built-in GEMM's blocks of B hold one K block each) and, at one
     * thread, two blocks of columns (the bias gradient's sums are taken while the first packs dy) */
    const int64_t shapes[][3] = {{300, 70, 90}, {40, 200, 24}, {1000, 8, 600}, {5, 3, 4}, {4096, 128, 257},
                                 {300, 1000, 260}};
    const ct_backend_ops *cpu = ct_backends[CT_DEVICE_CPU];
    ct_backend_ops without = *cpu;
    without.linear_backward = NULL;
    const int threads = ct_get_num_threads();
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t rows = shapes[s][0], in = shapes[s][1], out = shapes[s][2];
        ct_tensor dy = ct_test_alloc(CT_F32, 2, (int64_t[]){rows, out});
        ct_tensor x = ct_test_alloc(CT_F32, 2, (int64_t[]){rows, in});
        ct_tensor w = ct_test_alloc(CT_F32, 2, (int64_t[]){out, in});
        ct_tensor dw0 = ct_test_alloc(CT_F32, 2, (int64_t[]){out, in});
        ct_tensor db0 = ct_test_alloc(CT_F32, 1, (int64_t[]){out});
        ct_tensor *fill[] = {&dy, &x, &w, &dw0, &db0};
        for (size_t f = 0; f < sizeof fill / sizeof fill[0]; f++)
            for (int64_t i = 0; i < ct_tensor_numel(fill[f]); i++) ct_tensor_set(fill[f], i, ct_rng_normal(&rng));
        ct_tensor dw[2], db[2], dx[2];
        for (int k = 0; k < 2; k++) {
            dw[k] = ct_test_alloc(CT_F32, 2, (int64_t[]){out, in});
            db[k] = ct_test_alloc(CT_F32, 1, (int64_t[]){out});
            dx[k] = ct_test_alloc(CT_F32, 2, (int64_t[]){rows, in});
        }
        /* the products and sums in float64 from the definitions, for the kernel's float32 results */
        ct_tensor rw = ct_test_alloc(CT_F64, 2, (int64_t[]){out, in}), rb = ct_test_alloc(CT_F64, 1, (int64_t[]){out});
        ct_tensor rx = ct_test_alloc(CT_F64, 2, (int64_t[]){rows, in});
        for (int64_t o = 0; o < out; o++) {
            double sb = ct_tensor_get(&db0, o);
            for (int64_t r = 0; r < rows; r++) sb += ct_tensor_get(&dy, r * out + o);
            ct_tensor_set(&rb, o, sb);
            for (int64_t i = 0; i < in; i++) {
                double sw = ct_tensor_get(&dw0, o * in + i);
                for (int64_t r = 0; r < rows; r++)
                    sw += ct_tensor_get(&dy, r * out + o) * ct_tensor_get(&x, r * in + i);
                ct_tensor_set(&rw, o * in + i, sw);
            }
        }
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; i < in; i++) {
                double sx = 0;
                for (int64_t o = 0; o < out; o++)
                    sx += ct_tensor_get(&dy, r * out + o) * ct_tensor_get(&w, o * in + i);
                ct_tensor_set(&rx, r * in + i, sx);
            }
        for (int nt = 1; nt <= 3; nt++)
            for (int with_bias = 0; with_bias < 2; with_bias++)
                for (int with_dx = 0; with_dx < 2; with_dx++) {
                    ct_set_num_threads(nt);
                    for (int k = 0; k < 2; k++) {
                        ct_op_copy(&dw[k], &dw0);
                        ct_op_copy(&db[k], &db0);
                        ct_op_fill(&dx[k], NAN); /* dx is overwritten, never read */
                        ct_backends[CT_DEVICE_CPU] = k ? &without : cpu;
                        ct_op_linear_backward(&dy, &x, &w, &dw[k], with_bias ? &db[k] : NULL, with_dx ? &dx[k] : NULL);
                        ct_backends[CT_DEVICE_CPU] = cpu;
                    }
                    CHECK(memcmp(dw[0].data, dw[1].data, ct_tensor_nbytes(&dw[0])) == 0 &&
                              memcmp(db[0].data, db[1].data, ct_tensor_nbytes(&db[0])) == 0 &&
                              (!with_dx || memcmp(dx[0].data, dx[1].data, ct_tensor_nbytes(&dx[0])) == 0),
                          "linear_backward %lldx%lld->%lld, %d threads, bias=%d dx=%d: kernel and three-op path differ",
                          (long long)rows, (long long)in, (long long)out, nt, with_bias, with_dx);
                    CHECK(memcmp(dw[0].data, dw0.data, ct_tensor_nbytes(&dw0)) != 0 &&
                              (memcmp(db[0].data, db0.data, ct_tensor_nbytes(&db0)) != 0) == with_bias &&
                              (!with_dx || ct_op_all_finite(&dx[0])),
                          "linear_backward %lldx%lld->%lld, %d threads, bias=%d dx=%d: a gradient not written",
                          (long long)rows, (long long)in, (long long)out, nt, with_bias, with_dx);
                    /* error bound: float32 rounding of sums of up to `rows` (or `out`) terms of size ~1 */
                    double worst = 0;
                    const ct_tensor *got[3] = {&dw[0], with_bias ? &db[0] : NULL, with_dx ? &dx[0] : NULL};
                    const ct_tensor *want[3] = {&rw, &rb, &rx};
                    for (int g = 0; g < 3; g++)
                        for (int64_t i = 0; got[g] && i < ct_tensor_numel(got[g]); i++) {
                            const double d = fabs(ct_tensor_get(got[g], i) - ct_tensor_get(want[g], i));
                            worst = d > worst ? d : worst;
                        }
                    CHECK(worst <= 1e-5 * (double)(rows > out ? rows : out),
                          "linear_backward %lldx%lld->%lld, %d threads, bias=%d dx=%d: %.3g from the float64 sums",
                          (long long)rows, (long long)in, (long long)out, nt, with_bias, with_dx, worst);
                }
        ct_tensor_free(&rw);
        ct_tensor_free(&rb);
        ct_tensor_free(&rx);
        ct_set_num_threads(threads);
        for (int k = 0; k < 2; k++) {
            ct_tensor_free(&dw[k]);
            ct_tensor_free(&db[k]);
            ct_tensor_free(&dx[k]);
        }
        for (size_t f = 0; f < sizeof fill / sizeof fill[0]; f++) ct_tensor_free(fill[f]);
    }
}

static bool any_nonzero(const ct_tensor *t) {
    for (int64_t i = 0; i < ct_tensor_numel(t); i++)
        if (ct_tensor_get(t, i) != 0.0) return true;
    return false;
}

/* A Sequential gives a child its input's gradient only where a module before it may hold parameters:
 * in [flatten, dropout, [dropout, linear], relu, [flatten, linear]] the first linear computes no dx
 * (and the modules ahead of it keep no gradient buffers), the parameters get the same gradients as
 * with the model's input gradient on, and turning that on gives every child its dx. */
static void input_grad_only_where_used(void) {
    ct_module *seq, *first, *last, *c;
    CHECK_OK(ct_sequential_create(&seq));
    CHECK_OK(ct_sequential_create(&first));
    CHECK_OK(ct_sequential_create(&last));
    CHECK_OK(ct_flatten_create(&c));
    ct_module_add_child(seq, c, NULL);
    CHECK_OK(ct_dropout_create(0.25, &c));
    ct_module_add_child(seq, c, NULL);
    CHECK_OK(ct_dropout_create(0.25, &c));
    ct_module_add_child(first, c, NULL);
    CHECK_OK(ct_linear_create(12, 6, true, &c));
    ct_module_add_child(first, c, NULL);
    ct_module_add_child(seq, first, NULL);
    CHECK_OK(ct_activation_create(CT_ACT_RELU, &c));
    ct_module_add_child(seq, c, NULL);
    CHECK_OK(ct_flatten_create(&c));
    ct_module_add_child(last, c, NULL);
    CHECK_OK(ct_linear_create(6, 3, true, &c));
    ct_module_add_child(last, c, NULL);
    ct_module_add_child(seq, last, NULL);
    ct_model model;
    ct_model_options mo = {.dtype = CT_F64, .device = CT_CPU, .max_batch = 5, .seed = 3};
    ct_shape in = {2, {3, 4}};
    CHECK_OK(ct_model_build(&model, seq, &in, &mo));
    const ct_module *const modules[] = {seq->children[0], seq->children[1], first, first->children[0],
                                        first->children[1], seq->children[3], last, last->children[0],
                                        last->children[1]};
    const bool needed[] = {false, false, false, false, false, true, true, true, true};
    for (int i = 0; i < 9; i++)
        CHECK(modules[i]->need_input_grad == needed[i], "module %d: need_input_grad %d, expected %d", i,
              modules[i]->need_input_grad, needed[i]);
    ct_rng rng;
    ct_rng_init(&rng, ct_test_seed, 11, CT_RNG_USER);
    ct_tensor x = ct_test_alloc(CT_F64, 3, (int64_t[]){5, 3, 4}), dy = ct_test_alloc(CT_F64, 2, (int64_t[]){5, 3});
    for (int64_t i = 0; i < ct_tensor_numel(&x); i++) ct_tensor_set(&x, i, ct_rng_normal(&rng));
    for (int64_t i = 0; i < ct_tensor_numel(&dy); i++) ct_tensor_set(&dy, i, ct_rng_normal(&rng));
    ct_tensor grads[2], y;
    for (int with_dx = 0; with_dx < 2; with_dx++) {
        if (with_dx) {
            CHECK_OK(ct_model_enable_input_grad(&model));
            for (int i = 0; i < 9; i++) CHECK(modules[i]->need_input_grad, "module %d: no input gradient", i);
        }
        ct_model_zero_grad(&model);
        CHECK_OK(ct_model_forward(&model, &x, &y));
        CHECK_OK(ct_model_backward(&model, &dy));
        grads[with_dx] = ct_test_alloc(CT_F64, 1, (int64_t[]){ct_tensor_numel(&model.params.grads)});
        memcpy(grads[with_dx].data, model.params.grads.data, ct_tensor_nbytes(&grads[with_dx]));
    }
    CHECK(memcmp(grads[0].data, grads[1].data, ct_tensor_nbytes(&grads[0])) == 0,
          "the parameters' gradients depend on whether the input's is computed");
    CHECK(any_nonzero(&grads[0]), "no parameter gradient was written");
    const ct_tensor *dx = ct_model_input_grad(&model);
    CHECK(dx && ct_op_all_finite(dx) && any_nonzero(dx), "the input gradient, once asked for, is not computed");
    ct_tensor_free(&x);
    ct_tensor_free(&dy);
    ct_tensor_free(&grads[0]);
    ct_tensor_free(&grads[1]);
    ct_model_free(&model);
}

int main(void) {
    ct_test_begin("test_dense_layers");
    model_misuse();
    gradchecks();
    init_bounds_and_names();
    bad_inputs();
    linear_forward_fallback();
    linear_backward_fallback();
    input_grad_only_where_used();
    return ct_test_finish();
}
