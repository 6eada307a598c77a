/* Conv2d, MaxPool2d and AvgPool2d: finite-difference gradients in float64 (fixed and random
 * hyperparameters, and a small CNN), forward values against direct loops, chunked vs whole-batch
 * workspaces, PyTorch's tie and padding rules for max pooling, init bounds, and the errors bad
 * shapes and configs get.
 *
 * Why one file of over 600 lines: the three layers share the finite-difference harness and the
 * direct-loop references written here. */
#include <stdlib.h>
#include <string.h>

#include "core/ops/ops.h"
#include "core/util.h"
#include "model/layers.h"
#include "model/model.h"
#include "testlib.h"

static ct_rng rng;

static ct_shape chw(int64_t c, int64_t h, int64_t w) { return (ct_shape){3, {c, h, w}}; }

static int64_t rnd(int64_t lo, int64_t hi) { return lo + (int64_t)ct_rng_below(&rng, (uint64_t)(hi - lo + 1)); }

static ct_conv2d_config conv_cfg(int64_t in, int64_t out, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
                                 int64_t pw, int64_t dh, int64_t dw, bool bias) {
    return (ct_conv2d_config){.in_channels = in, .out_channels = out, .kernel = {kh, kw}, .stride = {sh, sw},
                              .padding = {ph, pw}, .dilation = {dh, dw}, .bias = bias};
}

static ct_pool2d_config pool_cfg(int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
                                 int64_t dw, bool count_include_pad) {
    return (ct_pool2d_config){.kernel = {kh, kw}, .stride = {sh, sw}, .padding = {ph, pw}, .dilation = {dh, dw},
                              .count_include_pad = count_include_pad};
}

/* Whether some kernel tap of some output lands on a real input element along one dimension. */
static bool reads_input(int64_t n, int64_t k, int64_t s, int64_t p, int64_t d) {
    int64_t out = ct_conv_out_size(n, k, s, p, d);
    for (int64_t o = 0; o < out; o++)
        for (int64_t j = 0; j < k; j++)
            if (o * s - p + j * d >= 0 && o * s - p + j * d < n) return true;
    return false;
}

static void conv_gradchecks(void) {
    struct {
        const char *label;
        ct_conv2d_config cfg;
        ct_shape in;
    } cases[] = {
        {"conv 3x3 pad 1", conv_cfg(3, 4, 3, 3, 1, 1, 1, 1, 1, 1, true), chw(3, 7, 6)},
        {"conv stride 2", conv_cfg(2, 3, 3, 3, 2, 2, 0, 0, 1, 1, true), chw(2, 9, 8)},
        {"conv dilation 2 pad 2", conv_cfg(2, 3, 3, 3, 1, 1, 2, 2, 2, 2, true), chw(2, 6, 7)},
        {"conv rectangular, no bias", conv_cfg(3, 2, 2, 3, 2, 1, 1, 0, 1, 2, false), chw(3, 7, 8)},
        {"conv 1x1 (in_channels inferred)", conv_cfg(0, 5, 1, 1, 0, 0, 0, 0, 0, 0, true), chw(4, 3, 5)},
        {"conv stride 3 pad 2 (kernel 2)", conv_cfg(2, 2, 2, 2, 3, 3, 2, 2, 1, 1, true), chw(2, 5, 6)},
    };
    for (size_t i = 0; i < CT_ARRAY_LEN(cases); i++) {
        ct_module *m;
        CHECK_OK(ct_conv2d_create(&cases[i].cfg, &m));
        ct_gradcheck_opts o = ct_gradcheck_defaults(3);
        ct_gradcheck_module(cases[i].label, m, &cases[i].in, &o);
    }
    /* Random hyperparameters: the input is sized so the dilated kernel always fits, and configurations
     * whose outputs see only padding (all-zero gradients, nothing to check) are drawn again. */
    for (int t = 0; t < 4; t++) {
        ct_conv2d_config c;
        int64_t h, w;
        do {
            c = conv_cfg(rnd(1, 3), rnd(1, 4), rnd(1, 4), rnd(1, 4), rnd(1, 3), rnd(1, 3), rnd(0, 2), rnd(0, 2),
                         rnd(1, 2), rnd(1, 2), rnd(0, 1));
            h = c.dilation[0] * (c.kernel[0] - 1) + 1 + rnd(0, 5);
            w = c.dilation[1] * (c.kernel[1] - 1) + 1 + rnd(0, 5);
        } while (!reads_input(h, c.kernel[0], c.stride[0], c.padding[0], c.dilation[0]) ||
                 !reads_input(w, c.kernel[1], c.stride[1], c.padding[1], c.dilation[1]));
        char label[200];
        snprintf(label, sizeof label,
                 "conv random in=%lld out=%lld k=(%lld,%lld) s=(%lld,%lld) p=(%lld,%lld) d=(%lld,%lld) bias=%d on %lldx%lld",
                 (long long)c.in_channels, (long long)c.out_channels, (long long)c.kernel[0], (long long)c.kernel[1],
                 (long long)c.stride[0], (long long)c.stride[1], (long long)c.padding[0], (long long)c.padding[1],
                 (long long)c.dilation[0], (long long)c.dilation[1], c.bias, (long long)h, (long long)w);
        ct_module *m;
        CHECK_OK(ct_conv2d_create(&c, &m));
        ct_shape in = chw(c.in_channels, h, w);
        ct_gradcheck_opts o = ct_gradcheck_defaults(rnd(1, 3));
        ct_gradcheck_module(label, m, &in, &o);
    }
}

/* ct_gradcheck_module for piecewise-linear modules (max pooling, and CNNs of conv, ReLU and max
 * pooling): a max-pool choice or a ReLU that flips inside the +-h step is a kink, which the checker
 * skips (two window values within 1e-6 of each other happen about one run in 500). */
static void gradcheck_piecewise(const char *label, ct_module *m, const ct_shape *in, int64_t batch) {
    ct_gradcheck_opts o = ct_gradcheck_defaults(batch);
    o.piecewise = true;
    ct_gradcheck_module(label, m, in, &o);
}

static void pool_gradchecks(void) {
    struct {
        const char *label;
        bool is_max;
        ct_pool2d_config cfg;
        ct_shape in;
    } cases[] = {
        {"maxpool 2x2", true, pool_cfg(2, 2, 0, 0, 0, 0, 0, 0, false), chw(2, 6, 6)},
        {"maxpool 3x3 stride 2 pad 1", true, pool_cfg(3, 3, 2, 2, 1, 1, 1, 1, false), chw(2, 7, 6)},
        {"maxpool rectangular dilated", true, pool_cfg(3, 2, 1, 2, 1, 1, 2, 1, false), chw(3, 7, 7)},
        {"maxpool overlapping stride 1", true, pool_cfg(2, 3, 1, 1, 0, 1, 1, 1, false), chw(1, 5, 6)},
        {"avgpool 3x3 stride 2 pad 1 count_include_pad", false, pool_cfg(3, 3, 2, 2, 1, 1, 0, 0, true), chw(2, 7, 6)},
        {"avgpool 3x3 stride 2 pad 1 exclude pad", false, pool_cfg(3, 3, 2, 2, 1, 1, 0, 0, false), chw(2, 7, 6)},
        {"avgpool 2x3 stride (1,2) pad 1 count_include_pad", false, pool_cfg(2, 3, 1, 2, 1, 1, 0, 0, true), chw(2, 5, 7)},
        {"avgpool 2x3 stride (1,2) pad 1 exclude pad", false, pool_cfg(2, 3, 1, 2, 1, 1, 0, 0, false), chw(2, 5, 7)},
        {"avgpool 2x2 default stride", false, pool_cfg(2, 2, 0, 0, 0, 0, 0, 0, true), chw(3, 4, 5)},
    };
    for (size_t i = 0; i < CT_ARRAY_LEN(cases); i++) {
        ct_module *m;
        if (cases[i].is_max) {
            CHECK_OK(ct_maxpool2d_create(&cases[i].cfg, &m));
            gradcheck_piecewise(cases[i].label, m, &cases[i].in, 2);
        } else {
            CHECK_OK(ct_avgpool2d_create(&cases[i].cfg, &m));
            ct_gradcheck_opts o = ct_gradcheck_defaults(2);
            ct_gradcheck_module(cases[i].label, m, &cases[i].in, &o);
        }
    }
}

/* conv(0 -> 4, 3x3, p1) relu maxpool(2) conv(4 -> 6, 3x3, p1) relu maxpool(2) flatten linear(5). */
static void cnn_gradcheck(void) {
    ct_module *seq, *c;
    CHECK_OK(ct_sequential_create(&seq));
    ct_conv2d_config c1 = conv_cfg(0, 4, 3, 3, 1, 1, 1, 1, 1, 1, true), c2 = conv_cfg(4, 6, 3, 3, 1, 1, 1, 1, 1, 1, true);
    ct_pool2d_config p = pool_cfg(2, 2, 0, 0, 0, 0, 0, 0, false);
    CHECK_OK(ct_conv2d_create(&c1, &c));
    ct_module_add_child(seq, c, NULL);
    CHECK_OK(ct_activation_create(CT_ACT_RELU, &c));
    ct_module_add_child(seq, c, NULL);
    CHECK_OK(ct_maxpool2d_create(&p, &c));
    ct_module_add_child(seq, c, NULL);
    CHECK_OK(ct_conv2d_create(&c2, &c));
    ct_module_add_child(seq, c, NULL);
    CHECK_OK(ct_activation_create(CT_ACT_RELU, &c));
    ct_module_add_child(seq, c, NULL);
    CHECK_OK(ct_maxpool2d_create(&p, &c));
    ct_module_add_child(seq, c, NULL);
    CHECK_OK(ct_flatten_create(&c));
    ct_module_add_child(seq, c, NULL);
    CHECK_OK(ct_linear_create(0, 5, true, &c));
    ct_module_add_child(seq, c, NULL);
    ct_shape in = chw(2, 8, 8);
    gradcheck_piecewise("cnn sequential", seq, &in, 2);
}

static void fill_random(ct_tensor *t) {
    for (int64_t i = 0; i < ct_tensor_numel(t); i++) ct_tensor_set(t, i, ct_rng_normal(&rng));
}

static double max_rel_diff(const ct_tensor *a, const ct_tensor *b) {
    double diff = 0, scale = 1e-300;
    for (int64_t i = 0; i < ct_tensor_numel(a); i++) {
        diff = fmax(diff, fabs(ct_tensor_get(a, i) - ct_tensor_get(b, i)));
        scale = fmax(scale, fabs(ct_tensor_get(b, i)));
    }
    return diff / scale;
}

/* Forward against direct loops, and every chunking of the batch against the whole batch at once. */
static void conv_op_values(void) {
    /* Three threads over five samples: uneven shares, and slot sums added in order. */
    int threads = ct_get_num_threads();
    ct_set_num_threads(3);
    for (int t = 0; t < 6; t++) {
        ct_conv2d_geom g = {.in_channels = rnd(1, 3), .in_h = rnd(5, 9), .in_w = rnd(5, 9), .out_channels = rnd(1, 4),
                            .kernel = {rnd(1, 3), rnd(1, 3)}, .stride = {rnd(1, 2), rnd(1, 2)},
                            .padding = {rnd(0, 2), rnd(0, 2)}, .dilation = {rnd(1, 2), rnd(1, 2)}};
        if (t >= 3) {
            /* big enough to run on the threads; the last a 1x1 convolution, which needs no columns */
            g.in_channels = rnd(5, 8), g.out_channels = rnd(6, 9), g.in_h = rnd(10, 13), g.in_w = rnd(10, 13);
            if (t == 4)
                g.kernel[0] = g.kernel[1] = g.stride[0] = g.stride[1] = 1, g.padding[0] = g.padding[1] = 0;
        }
        if (t == 5) /* output rows as wide as the input's, stride 1: im2col and col2im move blocks */
            g = (ct_conv2d_geom){.in_channels = 3, .in_h = rnd(6, 9), .in_w = rnd(6, 9), .out_channels = 4,
                                 .kernel = {3, 5}, .stride = {1, 1}, .padding = {1, 2}, .dilation = {2, 1}};
        g.out_h = ct_conv_out_size(g.in_h, g.kernel[0], g.stride[0], g.padding[0], g.dilation[0]);
        g.out_w = ct_conv_out_size(g.in_w, g.kernel[1], g.stride[1], g.padding[1], g.dilation[1]);
        int64_t B = 5, C = g.in_channels, O = g.out_channels, H = g.in_h, W = g.in_w, OH = g.out_h, OW = g.out_w;
        int64_t xs[4] = {B, C, H, W}, ys[4] = {B, O, OH, OW}, wsh[4] = {O, C, g.kernel[0], g.kernel[1]};
        ct_tensor x, y, yref, w, bias, dy, dx, dw, db, dx1, dw1, db1;
        ct_tensor_alloc(&x, CT_F64, CT_CPU, 4, xs);
        ct_tensor_alloc(&dx, CT_F64, CT_CPU, 4, xs);
        ct_tensor_alloc(&dx1, CT_F64, CT_CPU, 4, xs);
        ct_tensor_alloc(&y, CT_F64, CT_CPU, 4, ys);
        ct_tensor_alloc(&yref, CT_F64, CT_CPU, 4, ys);
        ct_tensor_alloc(&dy, CT_F64, CT_CPU, 4, ys);
        ct_tensor_alloc(&w, CT_F64, CT_CPU, 4, wsh);
        ct_tensor_alloc(&dw, CT_F64, CT_CPU, 4, wsh);
        ct_tensor_alloc(&dw1, CT_F64, CT_CPU, 4, wsh);
        ct_tensor_alloc(&bias, CT_F64, CT_CPU, 1, &O);
        ct_tensor_alloc(&db, CT_F64, CT_CPU, 1, &O);
        ct_tensor_alloc(&db1, CT_F64, CT_CPU, 1, &O);
        fill_random(&x);
        fill_random(&w);
        fill_random(&bias);
        fill_random(&dy);
        const double *xd = x.data, *wd = w.data, *bd = bias.data;
        double *yr = yref.data;
        for (int64_t b = 0; b < B; b++)
            for (int64_t o = 0; o < O; o++)
                for (int64_t oh = 0; oh < OH; oh++)
                    for (int64_t ow = 0; ow < OW; ow++) {
                        double acc = bd[o];
                        for (int64_t c = 0; c < C; c++)
                            for (int64_t ki = 0; ki < g.kernel[0]; ki++)
                                for (int64_t kj = 0; kj < g.kernel[1]; kj++) {
                                    int64_t ih = oh * g.stride[0] - g.padding[0] + ki * g.dilation[0];
                                    int64_t iw = ow * g.stride[1] - g.padding[1] + kj * g.dilation[1];
                                    if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                    acc += xd[((b * C + c) * H + ih) * W + iw] *
                                           wd[((o * C + c) * g.kernel[0] + ki) * g.kernel[1] + kj];
                                }
                        yr[((b * O + o) * OH + oh) * OW + ow] = acc;
                    }
        /* The workspace for the whole batch (a slot per thread), then for one and two threads. */
        int64_t full = ct_conv2d_workspace_numel(&g, B), one = ct_conv2d_workspace_numel(&g, 1);
        int64_t slots = ct_get_num_threads() < B ? ct_get_num_threads() : B;
        CHECK(full == slots * one, "workspace for %lld samples: %lld elements, one slot %lld", (long long)B,
              (long long)full, (long long)one);
        ct_tensor ws;
        ct_tensor_alloc(&ws, CT_F64, CT_CPU, 1, &full);
        ct_op_conv2d_forward(&g, &x, &w, &bias, &y, &ws);
        CHECK(max_rel_diff(&y, &yref) < 1e-10, "conv forward vs direct loops: %.3g", max_rel_diff(&y, &yref));
        ct_op_conv2d_backward(&g, &x, &w, &dy, &dw, &db, &dx, &ws);
        for (int64_t per = 1; per <= 2; per++) {
            ct_tensor small = ct_tensor_view(ws.data, CT_F64, CT_CPU, 1, (int64_t[]){per * one});
            ct_op_fill(&y, 7.0);
            ct_op_conv2d_forward(&g, &x, &w, &bias, &y, &small);
            CHECK(max_rel_diff(&y, &yref) < 1e-10, "conv forward with %lld slot(s): %.3g", (long long)per,
                  max_rel_diff(&y, &yref));
            ct_op_fill(&dw1, 0.0);
            ct_op_fill(&db1, 0.0);
            ct_op_fill(&dx1, 7.0);
            ct_op_conv2d_backward(&g, &x, &w, &dy, &dw1, &db1, &dx1, &small);
            CHECK(max_rel_diff(&dw1, &dw) < 1e-10 && max_rel_diff(&db1, &db) < 1e-10 && max_rel_diff(&dx1, &dx) < 1e-10,
                  "conv backward with %lld slot(s): dw %.3g db %.3g dx %.3g", (long long)per, max_rel_diff(&dw1, &dw),
                  max_rel_diff(&db1, &db), max_rel_diff(&dx1, &dx));
        }
        /* Gradients accumulate into dw and db; dx is overwritten. */
        ct_op_conv2d_backward(&g, &x, &w, &dy, &dw1, &db1, &dx1, &ws);
        ct_op_scale(&dw1, 0.5);
        ct_op_scale(&db1, 0.5);
        CHECK(max_rel_diff(&dw1, &dw) < 1e-10 && max_rel_diff(&db1, &db) < 1e-10 && max_rel_diff(&dx1, &dx) < 1e-10,
              "conv backward accumulates dw/db and overwrites dx");
        ct_tensor *all[] = {&x, &y, &yref, &w, &bias, &dy, &dx, &dw, &db, &dx1, &dw1, &db1, &ws};
        for (size_t i = 0; i < CT_ARRAY_LEN(all); i++) ct_tensor_free(all[i]);
    }
    ct_set_num_threads(threads);
}

/* Ties go to the first maximum in row-major order; padding never wins; avg pooling's divisors. */
static void pool_op_values(void) {
    ct_pool2d_geom g = {.channels = 1, .in_h = 4, .in_w = 4, .kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1},
                        .dilation = {1, 1}, .count_include_pad = true};
    g.out_h = g.out_w = ct_conv_out_size(4, 3, 2, 1, 1);
    CHECK(g.out_h == 2, "maxpool out size %lld", (long long)g.out_h);
    int64_t xs[4] = {1, 1, 4, 4}, ys[4] = {1, 1, 2, 2};
    ct_tensor x, y, idx, dy, dx;
    ct_tensor_alloc(&x, CT_F32, CT_CPU, 4, xs);
    ct_tensor_alloc(&dx, CT_F32, CT_CPU, 4, xs);
    ct_tensor_alloc(&y, CT_F32, CT_CPU, 4, ys);
    ct_tensor_alloc(&dy, CT_F32, CT_CPU, 4, ys);
    ct_tensor_alloc(&idx, CT_I32, CT_CPU, 4, ys);
    ct_op_fill(&x, -2.0); /* all equal and negative: the padding (-inf) must not win, the first real one must */
    ct_op_maxpool2d_forward(&g, &x, &y, &idx);
    const int32_t *ip = idx.data;
    /* Windows start at (-1,-1), (-1,1), (1,-1), (1,1): first real elements 0, 1, 4, 5. */
    CHECK(ip[0] == 0 && ip[1] == 1 && ip[2] == 4 && ip[3] == 5, "tie indices %d %d %d %d (want 0 1 4 5)", ip[0],
          ip[1], ip[2], ip[3]);
    CHECK(ct_tensor_get(&y, 0) == -2.0, "maxpool of a constant plane: %g", ct_tensor_get(&y, 0));
    ct_tensor_set(&x, 5, 3.0);
    ct_tensor_set(&x, 6, 3.0); /* a tie inside window (1,1) at 5 and 6: 5 wins; window (-1,1) sees 5 and 6 */
    ct_op_maxpool2d_forward(&g, &x, &y, &idx);
    CHECK(ip[0] == 5 && ip[1] == 5 && ip[2] == 5 && ip[3] == 5, "tie indices %d %d %d %d (want 5 5 5 5)", ip[0],
          ip[1], ip[2], ip[3]);
    ct_op_fill(&dy, 1.0);
    ct_op_maxpool2d_backward(&g, &dy, &idx, &dx);
    CHECK(ct_tensor_get(&dx, 5) == 4.0 && ct_tensor_get(&dx, 6) == 0.0, "maxpool backward sums at the argmax: %g %g",
          ct_tensor_get(&dx, 5), ct_tensor_get(&dx, 6));
    /* All -inf: the index still starts at each window's first real element (PyTorch's). */
    ct_op_fill(&x, -INFINITY);
    ct_op_maxpool2d_forward(&g, &x, &y, &idx);
    CHECK(ip[0] == 0 && ip[1] == 1 && ip[2] == 4 && ip[3] == 5 && isinf(ct_tensor_get(&y, 3)),
          "-inf indices %d %d %d %d (want 0 1 4 5)", ip[0], ip[1], ip[2], ip[3]);
    /* NaN wins, and of two NaNs in a window the last one (PyTorch's `v > max || isnan(v)`). */
    ct_op_fill(&x, -2.0);
    ct_tensor_set(&x, 6, NAN);
    ct_tensor_set(&x, 9, NAN);
    ct_op_maxpool2d_forward(&g, &x, &y, &idx);
    CHECK(ip[0] == 0 && ip[1] == 6 && ip[2] == 9 && ip[3] == 9 && ct_tensor_get(&y, 0) == -2.0 &&
              isnan(ct_tensor_get(&y, 1)) && isnan(ct_tensor_get(&y, 3)),
          "NaN indices %d %d %d %d (want 0 6 9 9)", ip[0], ip[1], ip[2], ip[3]);

    /* The same rules on the 2x2 / stride 2 path. */
    ct_pool2d_geom g2 = {.channels = 1, .in_h = 4, .in_w = 4, .out_h = 2, .out_w = 2, .kernel = {2, 2},
                         .stride = {2, 2}, .dilation = {1, 1}};
    ct_op_fill(&x, 1.0);
    ct_op_maxpool2d_forward(&g2, &x, &y, &idx);
    CHECK(ip[0] == 0 && ip[1] == 2 && ip[2] == 8 && ip[3] == 10, "2x2 tie indices %d %d %d %d (want 0 2 8 10)", ip[0],
          ip[1], ip[2], ip[3]);
    ct_tensor_set(&x, 11, 3.0);
    ct_tensor_set(&x, 14, 3.0);
    ct_tensor_set(&x, 15, 3.0);
    ct_tensor_set(&x, 1, NAN);
    ct_tensor_set(&x, 5, NAN);
    ct_op_maxpool2d_forward(&g2, &x, &y, &idx);
    CHECK(ip[0] == 5 && ip[1] == 2 && ip[2] == 8 && ip[3] == 11 && isnan(ct_tensor_get(&y, 0)) &&
              ct_tensor_get(&y, 3) == 3.0,
          "2x2 NaN and tie indices %d %d %d %d (want 5 2 8 11)", ip[0], ip[1], ip[2], ip[3]);
    ct_op_fill(&x, -INFINITY);
    ct_op_maxpool2d_forward(&g2, &x, &y, &idx);
    CHECK(ip[0] == 0 && ip[1] == 2 && ip[2] == 8 && ip[3] == 10, "2x2 -inf indices %d %d %d %d (want 0 2 8 10)",
          ip[0], ip[1], ip[2], ip[3]);

    /* Avg pooling on a plane of ones: window (0,0) covers 2x2 real elements of a 3x3 window. */
    ct_op_fill(&x, 1.0);
    ct_op_avgpool2d_forward(&g, &x, &y);
    CHECK_NEAR(ct_tensor_get(&y, 0), 4.0 / 9.0, 1e-7);
    CHECK_NEAR(ct_tensor_get(&y, 3), 1.0, 1e-7); /* window (1,1) covers rows 1..3, columns 1..3: all real */
    g.count_include_pad = false;
    ct_op_avgpool2d_forward(&g, &x, &y);
    CHECK_NEAR(ct_tensor_get(&y, 0), 1.0, 1e-7);
    ct_op_avgpool2d_backward(&g, &dy, &dx);
    /* Element 0 lies only in window (0,0), which divides by its 4 real elements. */
    CHECK_NEAR(ct_tensor_get(&dx, 0), 0.25, 1e-7);
    ct_tensor *all[] = {&x, &y, &idx, &dy, &dx};
    for (size_t i = 0; i < CT_ARRAY_LEN(all); i++) ct_tensor_free(all[i]);
}

/* 2x2 / stride 2 backward writes every input position itself (the windows do not overlap): on odd
 * heights and widths the last row and column, which no window covers, must come out 0 whatever the
 * buffer held. Against the scatter of dy at the indices into zeros. */
static void maxpool_2x2_backward_values(void) {
    for (int t = 0; t < 4; t++) {
        const int64_t C = 3, H = 4 + (t & 1), W = 4 + (t >> 1) + (t & 1) * 2; /* 4x4, 5x6, 4x5, 5x7 */
        ct_pool2d_geom g = {.channels = C, .in_h = H, .in_w = W, .out_h = H / 2, .out_w = W / 2, .kernel = {2, 2},
                            .stride = {2, 2}, .dilation = {1, 1}};
        int64_t xs[4] = {2, C, H, W}, ys[4] = {2, C, H / 2, W / 2};
        ct_tensor x, y, idx, dy, dx;
        ct_tensor_alloc(&x, CT_F64, CT_CPU, 4, xs);
        ct_tensor_alloc(&dx, CT_F64, CT_CPU, 4, xs);
        ct_tensor_alloc(&y, CT_F64, CT_CPU, 4, ys);
        ct_tensor_alloc(&dy, CT_F64, CT_CPU, 4, ys);
        ct_tensor_alloc(&idx, CT_I32, CT_CPU, 4, ys);
        fill_random(&x);
        fill_random(&dy);
        ct_op_maxpool2d_forward(&g, &x, &y, &idx);
        ct_op_fill(&dx, 7.0);
        ct_op_maxpool2d_backward(&g, &dy, &idx, &dx);
        double worst = 0;
        const int32_t *ip = idx.data;
        for (int64_t p = 0; p < 2 * C; p++)
            for (int64_t i = 0; i < H * W; i++) {
                double want = 0;
                for (int64_t o = 0; o < (H / 2) * (W / 2); o++)
                    if (ip[p * (H / 2) * (W / 2) + o] == i) want += ct_tensor_get(&dy, p * (H / 2) * (W / 2) + o);
                double d = fabs(ct_tensor_get(&dx, p * H * W + i) - want);
                if (d > worst) worst = d;
            }
        CHECK(worst == 0, "2x2 maxpool backward on %lldx%lld: worst difference %g from the scatter", (long long)H,
              (long long)W, worst);
        ct_tensor *all[] = {&x, &y, &idx, &dy, &dx};
        for (size_t i = 0; i < CT_ARRAY_LEN(all); i++) ct_tensor_free(all[i]);
    }
}

static void init_bounds(void) {
    ct_conv2d_config c = conv_cfg(16, 32, 3, 5, 1, 1, 0, 0, 1, 1, true);
    ct_module *m;
    CHECK_OK(ct_conv2d_create(&c, &m));
    ct_model model;
    ct_shape in = chw(16, 10, 10);
    ct_model_options mo = {.dtype = CT_F32, .max_batch = 2, .seed = ct_test_seed};
    CHECK_OK(ct_model_build(&model, m, &in, &mo));
    const ct_param *w = ct_params_find(&model.params, "weight"), *b = ct_params_find(&model.params, "bias");
    CHECK(w && b && w->ndim == 4 && w->shape[0] == 32 && w->shape[1] == 16 && w->shape[2] == 3 && w->shape[3] == 5,
          "conv weight is [out, in, kh, kw]");
    CHECK(b && (b->flags & CT_PARAM_NO_DECAY), "conv bias is excluded from weight decay");
    if (w && b) {
        double bound = 1.0 / sqrt(16.0 * 3 * 5), sum2 = 0, maxabs = 0, bmax = 0;
        for (int64_t i = 0; i < w->numel; i++) {
            double v = ct_tensor_get(w->value, i);
            sum2 += v * v;
            maxabs = fmax(maxabs, fabs(v));
        }
        for (int64_t i = 0; i < b->numel; i++) bmax = fmax(bmax, fabs(ct_tensor_get(b->value, i)));
        CHECK(maxabs <= bound && maxabs > 0.95 * bound, "weight max %g vs bound 1/sqrt(fan_in) = %g", maxabs, bound);
        CHECK(fabs(sum2 / w->numel / (bound * bound / 3) - 1) < 0.05, "weight variance ratio %g",
              sum2 / w->numel / (bound * bound / 3));
        CHECK(bmax <= bound && bmax > 0, "bias max %g vs bound %g", bmax, bound);
    }
    ct_model_free(&model);
}

/* Builds a one-layer model from JSON text for the given input; returns the build status. */
static ct_status build_json(const char *text, ct_shape in, ct_shape *out_shape) {
    json_error_t err;
    json_t *spec = json_loads(text, 0, &err);
    CT_ASSERT(spec);
    ct_module *m;
    ct_status s = ct_module_from_json(spec, "model", &m);
    json_decref(spec);
    if (s != CT_OK) return s;
    ct_model model;
    ct_model_options mo = {.dtype = CT_F32, .max_batch = 2, .seed = 1};
    s = ct_model_build(&model, m, &in, &mo);
    if (s == CT_OK) {
        if (out_shape) *out_shape = model.out_shape;
        ct_model_free(&model);
    }
    return s;
}

static void json_and_errors(void) {
    ct_shape out;
    CHECK_OK(build_json("{\"type\": \"conv2d\", \"in_channels\": 3, \"out_channels\": 8, \"kernel_size\": [3, 5], "
                        "\"stride\": 2, \"padding\": [1, 2], \"dilation\": 1, \"bias\": false}",
                        chw(3, 11, 12), &out));
    CHECK(out.ndim == 3 && out.dims[0] == 8 && out.dims[1] == 6 && out.dims[2] == 6, "conv JSON output [%lld, %lld, %lld]",
          (long long)out.dims[0], (long long)out.dims[1], (long long)out.dims[2]);
    CHECK_OK(build_json("{\"type\": \"maxpool2d\", \"kernel_size\": 3, \"stride\": null, \"padding\": 1}", chw(2, 9, 7),
                        &out));
    CHECK(out.dims[0] == 2 && out.dims[1] == 3 && out.dims[2] == 3, "maxpool JSON output [%lld, %lld, %lld]",
          (long long)out.dims[0], (long long)out.dims[1], (long long)out.dims[2]);
    CHECK_OK(build_json("{\"type\": \"avgpool2d\", \"kernel_size\": 2, \"count_include_pad\": false}", chw(1, 5, 5), &out));
    CHECK(out.dims[1] == 2 && out.dims[2] == 2, "avgpool JSON output [%lld, %lld]", (long long)out.dims[1],
          (long long)out.dims[2]);

    CHECK_ERR(build_json("{\"type\": \"conv2d\", \"out_channels\": 4, \"kernel_sise\": 3}", chw(1, 5, 5), NULL),
              CT_ERR_CONFIG, "model", "kernel_sise", "did you mean 'kernel_size'");
    CHECK_ERR(build_json("{\"type\": \"conv2d\", \"out_channels\": 4}", chw(1, 5, 5), NULL), CT_ERR_CONFIG,
              "kernel_size");
    CHECK_ERR(build_json("{\"type\": \"conv2d\", \"out_channels\": 4, \"kernel_size\": 3, \"stride\": 0}", chw(1, 5, 5),
                         NULL),
              CT_ERR_CONFIG, "model.stride");
    CHECK_ERR(build_json("{\"type\": \"conv2d\", \"out_channels\": 4, \"kernel_size\": [3, 3, 3]}", chw(1, 5, 5), NULL),
              CT_ERR_CONFIG, "model.kernel_size");
    CHECK_ERR(build_json("{\"type\": \"conv2d\", \"out_channels\": 4, \"kernel_size\": 3, \"groups\": 2}", chw(2, 5, 5),
                         NULL),
              CT_ERR_UNSUPPORTED, "model.groups");
    CHECK_ERR(build_json("{\"type\": \"avgpool2d\", \"kernel_size\": 3, \"dilation\": 2}", chw(1, 5, 5), NULL),
              CT_ERR_CONFIG, "unknown key 'dilation'");
    CHECK_ERR(build_json("{\"type\": \"maxpool2d\", \"kernel_size\": 2, \"ceil_mode\": true}", chw(1, 5, 5), NULL),
              CT_ERR_UNSUPPORTED, "ceil_mode");
    CHECK_ERR(build_json("{\"type\": \"maxpool2d\", \"kernel_size\": 3, \"padding\": 2}", chw(1, 9, 9), NULL),
              CT_ERR_CONFIG, "model", "maxpool2d", "padding=(2, 2)", "kernel_size=(3, 3)");

    /* Shapes that do not fit: errors name the layer, the input shape and the offending setting. */
    CHECK_ERR(build_json("{\"type\": \"sequential\", \"layers\": [{\"type\": \"conv2d\", \"in_channels\": 3, "
                         "\"out_channels\": 4, \"kernel_size\": 3}]}",
                         chw(1, 28, 28), NULL),
              CT_ERR_SHAPE, "conv2d '0'", "in_channels=3", "[N, 1, 28, 28]");
    ct_shape flat = {1, {784}};
    CHECK_ERR(build_json("{\"type\": \"conv2d\", \"out_channels\": 4, \"kernel_size\": 3}", flat, NULL), CT_ERR_SHAPE,
              "conv2d", "[N, 784]", "[N, C, H, W]");
    CHECK_ERR(build_json("{\"type\": \"sequential\", \"layers\": [{\"type\": \"conv2d\", \"out_channels\": 4, "
                         "\"kernel_size\": 5, \"padding\": 1}]}",
                         chw(2, 2, 9), NULL),
              CT_ERR_SHAPE, "conv2d '0'", "[N, 2, 2, 9]", "padded to 4x11", "kernel 5x5");
    CHECK_ERR(build_json("{\"type\": \"conv2d\", \"out_channels\": 4, \"kernel_size\": 3, \"dilation\": 3}", chw(1, 6, 9),
                         NULL),
              CT_ERR_SHAPE, "kernel 7x7", "dilation=(3, 3)");
    CHECK_ERR(build_json("{\"type\": \"sequential\", \"layers\": [{\"type\": \"maxpool2d\", \"kernel_size\": 3}]}",
                         chw(4, 2, 5), NULL),
              CT_ERR_SHAPE, "maxpool2d '0'", "[N, 4, 2, 5]", "too small");
    CHECK_ERR(build_json("{\"type\": \"avgpool2d\", \"kernel_size\": 2}", (ct_shape){2, {5, 5}}, NULL), CT_ERR_SHAPE,
              "avgpool2d", "[N, 5, 5]");

    ct_module *m;
    ct_conv2d_config bad = conv_cfg(1, 0, 3, 3, 1, 1, 0, 0, 1, 1, true);
    CHECK_ERR(ct_conv2d_create(&bad, &m), CT_ERR_INVALID_ARG, "conv2d", "out_channels=0");
    bad = conv_cfg(1, 2, 3, 3, 1, 1, -1, 0, 1, 1, true);
    CHECK_ERR(ct_conv2d_create(&bad, &m), CT_ERR_INVALID_ARG, "conv2d", "padding=(-1, 0)");
    ct_pool2d_config pbad = pool_cfg(2, 2, 0, 0, 0, 2, 1, 1, true);
    CHECK_ERR(ct_avgpool2d_create(&pbad, &m), CT_ERR_CONFIG, "avgpool2d", "padding=(0, 2)");

    /* A wrong input at forward time is caught by the module wrapper, naming the layer. */
    ct_conv2d_config ok = conv_cfg(3, 4, 3, 3, 1, 1, 1, 1, 1, 1, true);
    CHECK_OK(ct_conv2d_create(&ok, &m));
    ct_model model;
    ct_shape in = chw(3, 8, 8);
    ct_model_options mo = {.dtype = CT_F32, .max_batch = 2, .seed = 1};
    CHECK_OK(ct_model_build(&model, m, &in, &mo));
    ct_tensor x, y;
    ct_tensor_alloc(&x, CT_F32, CT_CPU, 4, (int64_t[]){2, 1, 8, 8});
    CHECK_ERR(ct_model_forward(&model, &x, &y), CT_ERR_SHAPE, "conv2d", "[2, 1, 8, 8]", "[N, 3, 8, 8]");
    ct_tensor_free(&x);
    ct_model_free(&model);
}

/* 2x2 / stride 2 forward on rows of every width from 1 to 40 outputs (the vector paths' whole
 * chunks, partial chunks and both together), odd input sizes, values from a small set so that ties
 * are everywhere, and now and then a NaN: float and double against a direct scan of each window in
 * row-major order with PyTorch's rule (`v > max || isnan(v)`, so the first maximum and the last NaN
 * win). */
static void maxpool_2x2_forward_values(void) {
    const double levels[5] = {-1.5, 0.0, 0.5, 2.0, NAN};
    for (int t = 0; t < 160; t++) { /* OW = 1..40, W even and odd, float and double */
        const int64_t C = rnd(1, 3), H = rnd(2, 9), W = 2 + (t % 40) * 2 + (t / 40) % 2;
        const ct_dtype dt = t < 80 ? CT_F32 : CT_F64;
        ct_pool2d_geom g = {.channels = C, .in_h = H, .in_w = W, .out_h = H / 2, .out_w = W / 2, .kernel = {2, 2},
                            .stride = {2, 2}, .dilation = {1, 1}};
        int64_t xs[4] = {2, C, H, W}, ys[4] = {2, C, H / 2, W / 2};
        ct_tensor x, y, idx;
        ct_tensor_alloc(&x, dt, CT_CPU, 4, xs);
        ct_tensor_alloc(&y, dt, CT_CPU, 4, ys);
        ct_tensor_alloc(&idx, CT_I32, CT_CPU, 4, ys);
        const bool with_nan = t % 3 == 0;
        for (int64_t i = 0; i < ct_tensor_numel(&x); i++) {
            int level = (int)rnd(0, 3);
            if (with_nan && rnd(0, 40) == 0) level = 4;
            ct_tensor_set(&x, i, levels[level]);
        }
        ct_op_maxpool2d_forward(&g, &x, &y, &idx);
        const int32_t *ip = idx.data;
        int64_t wrong = 0;
        for (int64_t p = 0; p < 2 * C; p++)
            for (int64_t oh = 0; oh < H / 2; oh++)
                for (int64_t ow = 0; ow < W / 2; ow++) {
                    int64_t at = 2 * oh * W + 2 * ow;
                    double best = ct_tensor_get(&x, p * H * W + at);
                    for (int64_t k = 1; k < 4; k++) {
                        const int64_t i = (2 * oh + k / 2) * W + 2 * ow + k % 2;
                        const double v = ct_tensor_get(&x, p * H * W + i);
                        if (v > best || isnan(v)) best = v, at = i;
                    }
                    const int64_t o = (p * (H / 2) + oh) * (W / 2) + ow;
                    const double got = ct_tensor_get(&y, o);
                    wrong += ip[o] != at || !(got == best || (isnan(got) && isnan(best)));
                }
        CHECK(wrong == 0, "2x2 maxpool forward (%s) on %lldx%lldx%lld: %lld outputs differ from the window scan",
              ct_dtype_name(dt), (long long)C, (long long)H, (long long)W, (long long)wrong);
        ct_tensor *all[] = {&x, &y, &idx};
        for (size_t i = 0; i < CT_ARRAY_LEN(all); i++) ct_tensor_free(all[i]);
    }
}

/* conv + ReLU + 2x2 max pooling as one op (ct_op_conv2d_relu_pool_*) against the three ops apart:
 * the forward's pooled output and argmax indices bit for bit, and the gradients (the weight's from
 * the sparse sum where the input has a multiple of 16 channels, the dense GEMM otherwise) to float
 * rounding. Odd output sizes leave a row and a column no window covers; strides, padding and
 * dilation vary the taps; two threads over three samples. */
static void conv_relu_pool_values(void) {
    int threads = ct_get_num_threads();
    ct_set_num_threads(2);
    const int64_t channels[] = {16, 32, 48, 3};
    for (int t = 0; t < 8; t++) {
        const ct_dtype dt = t == 7 ? CT_F32 : CT_F64;
        ct_conv2d_geom g = {.in_channels = channels[t % 4], .in_h = rnd(6, 11), .in_w = rnd(6, 11),
                            .out_channels = rnd(2, 5), .kernel = {rnd(1, 3), rnd(2, 3)},
                            .stride = {t == 5 ? 2 : 1, 1}, .padding = {rnd(0, 1), rnd(0, 1)},
                            .dilation = {t == 6 ? 2 : 1, 1}, .relu = true};
        g.out_h = ct_conv_out_size(g.in_h, g.kernel[0], g.stride[0], g.padding[0], g.dilation[0]);
        g.out_w = ct_conv_out_size(g.in_w, g.kernel[1], g.stride[1], g.padding[1], g.dilation[1]);
        const int64_t B = 3, C = g.in_channels, O = g.out_channels, OH = g.out_h, OW = g.out_w;
        ct_conv2d_geom gp = g;
        gp.pool2x2 = true;
        ct_pool2d_geom pg = {.channels = O, .in_h = OH, .in_w = OW, .out_h = OH / 2, .out_w = OW / 2,
                             .kernel = {2, 2}, .stride = {2, 2}, .dilation = {1, 1}};
        int64_t xs[4] = {B, C, g.in_h, g.in_w}, ys[4] = {B, O, OH, OW}, ps[4] = {B, O, OH / 2, OW / 2};
        int64_t wsh[4] = {O, C, g.kernel[0], g.kernel[1]};
        int64_t n_ws = ct_conv2d_workspace_numel(&g, B), n_wsp = ct_conv2d_workspace_numel(&gp, B);
        ct_tensor x, w, bias, y, yp, yp2, idx, idx2, dyp, dy, dx, dx2, dw, dw2, db, db2, ws, wsp;
        ct_tensor_alloc(&x, dt, CT_CPU, 4, xs);
        ct_tensor_alloc(&w, dt, CT_CPU, 4, wsh);
        ct_tensor_alloc(&bias, dt, CT_CPU, 1, &O);
        ct_tensor_alloc(&y, dt, CT_CPU, 4, ys);
        ct_tensor_alloc(&dy, dt, CT_CPU, 4, ys);
        ct_tensor_alloc(&yp, dt, CT_CPU, 4, ps);
        ct_tensor_alloc(&yp2, dt, CT_CPU, 4, ps);
        ct_tensor_alloc(&dyp, dt, CT_CPU, 4, ps);
        ct_tensor_alloc(&idx, CT_I32, CT_CPU, 4, ps);
        ct_tensor_alloc(&idx2, CT_I32, CT_CPU, 4, ps);
        ct_tensor_alloc(&dx, dt, CT_CPU, 4, xs);
        ct_tensor_alloc(&dx2, dt, CT_CPU, 4, xs);
        ct_tensor_alloc(&dw, dt, CT_CPU, 4, wsh);
        ct_tensor_alloc(&dw2, dt, CT_CPU, 4, wsh);
        ct_tensor_alloc(&db, dt, CT_CPU, 1, &O);
        ct_tensor_alloc(&db2, dt, CT_CPU, 1, &O);
        ct_tensor_alloc(&ws, dt, CT_CPU, 1, &n_ws);
        ct_tensor_alloc(&wsp, dt, CT_CPU, 1, &n_wsp);
        fill_random(&x);
        fill_random(&w);
        fill_random(&bias);
        fill_random(&dyp);
        ct_op_fill(&dw, 0.0);
        ct_op_fill(&db, 0.0);
        ct_op_fill(&dw2, 0.0);
        ct_op_fill(&db2, 0.0);
        ct_op_conv2d_forward(&g, &x, &w, &bias, &y, &ws);
        ct_op_maxpool2d_forward(&pg, &y, &yp, &idx);
        ct_op_maxpool2d_backward(&pg, &dyp, &idx, &dy);
        ct_op_conv2d_relu_backward(&g, &x, &w, &y, &dy, &dw, &db, &dx, &ws);
        ct_op_conv2d_relu_pool_forward(&gp, &x, &w, &bias, &yp2, &idx2, &wsp);
        ct_op_conv2d_relu_pool_backward(&gp, &x, &w, &yp2, &idx2, &dyp, &dw2, &db2, &dx2, &wsp);
        const bool same = memcmp(yp.data, yp2.data, ct_tensor_nbytes(&yp)) == 0 &&
                          memcmp(idx.data, idx2.data, ct_tensor_nbytes(&idx)) == 0;
        const double tol = dt == CT_F32 ? 1e-5 : 1e-12;
        CHECK(same, "conv+relu+pool forward (C %lld, %lldx%lld out) differs from the three ops", (long long)C,
              (long long)OH, (long long)OW);
        CHECK(max_rel_diff(&dw2, &dw) < tol && max_rel_diff(&db2, &db) < tol && max_rel_diff(&dx2, &dx) < tol,
              "conv+relu+pool backward (%s, C %lld, kernel %lldx%lld, %lldx%lld out): dw %.3g db %.3g dx %.3g",
              ct_dtype_name(dt), (long long)C, (long long)g.kernel[0], (long long)g.kernel[1], (long long)OH,
              (long long)OW, max_rel_diff(&dw2, &dw), max_rel_diff(&db2, &db), max_rel_diff(&dx2, &dx));
        ct_tensor *all[] = {&x, &w, &bias, &y, &yp, &yp2, &idx, &idx2, &dyp, &dy, &dx, &dx2, &dw, &dw2, &db, &db2, &ws, &wsp};
        for (size_t i = 0; i < CT_ARRAY_LEN(all); i++) ct_tensor_free(all[i]);
    }
    ct_set_num_threads(threads);
}

int main(void) {
    ct_test_begin("test_conv_pool");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER + 1);
    conv_gradchecks();
    pool_gradchecks();
    cnn_gradcheck();
    conv_op_values();
    pool_op_values();
    maxpool_2x2_forward_values();
    conv_relu_pool_values();
    maxpool_2x2_backward_values();
    init_bounds();
    json_and_errors();
    return ct_test_finish();
}
