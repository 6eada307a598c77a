/* Max and average pooling on CUDA against the CPU backend, bit for bit: outputs, max-pooling indices and both input
 * gradients must be identical (the GPU kernels pick the same elements and add the same terms in the same order), in
 * float32 and float64, over random geometries (kernels 1-4, rectangular, stride 1-3, padding up to half the kernel,
 * dilation 2 for max pooling, count_include_pad both ways, overlapping windows) and fixed ones: nn.MaxPool2d(2) (the
 * CPU's 2x2 fast path), 3x3 stride 1 (every input in many windows), 3x3 stride 2 padding 1.
 *
 * The data holds ties (values on a coarse grid), so the first-maximum rule is exercised, and some planes hold -inf
 * and NaN, which the max must handle as PyTorch does. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/ops/ops.h"
#include "cuda_testlib.h"

static ct_rng rng;

static int64_t rnd(int64_t lo, int64_t hi) { return lo + (int64_t)ct_rng_below(&rng, (uint64_t)(hi - lo + 1)); }

/* Inputs on a grid of eighths in [-2, 2) (ties are common), with -inf and NaN sprinkled in when asked. */
static ct_tensor grid_input(ct_dtype dt, const int64_t *shape, bool specials) {
    ct_tensor t = ct_ct_rand(&rng, dt, 4, shape, -2, 2);
    int64_t n = ct_tensor_numel(&t);
    for (int64_t i = 0; i < n; i++) {
        double v = floor(ct_tensor_get(&t, i) * 8) / 8;
        if (specials) {
            uint64_t r = ct_rng_below(&rng, 40);
            if (r == 0) v = -INFINITY;
            if (r == 1) v = NAN;
        }
        ct_tensor_set(&t, i, v);
    }
    return t;
}

static void check_max(const ct_pool2d_geom *g, int64_t batch, ct_dtype dt, bool specials) {
    char what[256], label[320];
    snprintf(what, sizeof what, "maxpool %s B=%lld C=%lld %lldx%lld k=%lldx%lld s=%lld,%lld p=%lld,%lld d=%lld,%lld%s",
             ct_dtype_name(dt), (long long)batch, (long long)g->channels, (long long)g->in_h, (long long)g->in_w,
             (long long)g->kernel[0], (long long)g->kernel[1], (long long)g->stride[0], (long long)g->stride[1],
             (long long)g->padding[0], (long long)g->padding[1], (long long)g->dilation[0], (long long)g->dilation[1],
             specials ? " (-inf, NaN)" : "");
    int64_t xs[4] = {batch, g->channels, g->in_h, g->in_w}, ys[4] = {batch, g->channels, g->out_h, g->out_w};
    ct_tensor x = grid_input(dt, xs, specials), dy = ct_ct_rand(&rng, dt, 4, ys, -1, 1);
    ct_tensor y = ct_ct_zeros(dt, 4, ys), idx = ct_ct_zeros(CT_I32, 4, ys), dx = ct_ct_rand(&rng, dt, 4, xs, -1, 1);
    /* Outputs start as garbage on the GPU: everything must be written. */
    ct_tensor junk_y = ct_ct_rand(&rng, dt, 4, ys, 5, 6), junk_i = ct_ct_rand(&rng, CT_I32, 4, ys, 0, 1000);
    ct_tensor gx = ct_ct_to_gpu(&x), gdy = ct_ct_to_gpu(&dy), gy = ct_ct_to_gpu(&junk_y), gidx = ct_ct_to_gpu(&junk_i);
    ct_tensor gdx = ct_ct_to_gpu(&dx);

    ct_op_maxpool2d_forward(g, &x, &y, &idx);
    ct_op_maxpool2d_backward(g, &dy, &idx, &dx);
    ct_op_maxpool2d_forward(g, &gx, &gy, &gidx);
    ct_op_maxpool2d_backward(g, &gdy, &gidx, &gdx);

    snprintf(label, sizeof label, "%s: y", what);
    ct_ct_check_equal(label, &gy, &y);
    snprintf(label, sizeof label, "%s: indices", what);
    ct_ct_check_equal(label, &gidx, &idx);
    snprintf(label, sizeof label, "%s: dx", what);
    ct_ct_check_equal(label, &gdx, &dx);

    ct_tensor *all[] = {&x, &dy, &y, &idx, &dx, &junk_y, &junk_i, &gx, &gdy, &gy, &gidx, &gdx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ct_tensor_free(all[i]);
}

static void check_avg(const ct_pool2d_geom *g, int64_t batch, ct_dtype dt) {
    char what[256], label[320];
    snprintf(what, sizeof what, "avgpool %s B=%lld C=%lld %lldx%lld k=%lldx%lld s=%lld,%lld p=%lld,%lld incl_pad=%d",
             ct_dtype_name(dt), (long long)batch, (long long)g->channels, (long long)g->in_h, (long long)g->in_w,
             (long long)g->kernel[0], (long long)g->kernel[1], (long long)g->stride[0], (long long)g->stride[1],
             (long long)g->padding[0], (long long)g->padding[1], g->count_include_pad);
    int64_t xs[4] = {batch, g->channels, g->in_h, g->in_w}, ys[4] = {batch, g->channels, g->out_h, g->out_w};
    ct_tensor x = ct_ct_rand(&rng, dt, 4, xs, -1, 1), dy = ct_ct_rand(&rng, dt, 4, ys, -1, 1);
    ct_tensor y = ct_ct_zeros(dt, 4, ys), dx = ct_ct_rand(&rng, dt, 4, xs, -1, 1);
    ct_tensor junk_y = ct_ct_rand(&rng, dt, 4, ys, 5, 6);
    ct_tensor gx = ct_ct_to_gpu(&x), gdy = ct_ct_to_gpu(&dy), gy = ct_ct_to_gpu(&junk_y), gdx = ct_ct_to_gpu(&dx);

    ct_op_avgpool2d_forward(g, &x, &y);
    ct_op_avgpool2d_backward(g, &dy, &dx);
    ct_op_avgpool2d_forward(g, &gx, &gy);
    ct_op_avgpool2d_backward(g, &gdy, &gdx);

    snprintf(label, sizeof label, "%s: y", what);
    ct_ct_check_equal(label, &gy, &y);
    snprintf(label, sizeof label, "%s: dx", what);
    ct_ct_check_equal(label, &gdx, &dx);

    ct_tensor *all[] = {&x, &dy, &y, &dx, &junk_y, &gx, &gdy, &gy, &gdx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ct_tensor_free(all[i]);
}

static bool finish_geom(ct_pool2d_geom *g) {
    g->out_h = ct_conv_out_size(g->in_h, g->kernel[0], g->stride[0], g->padding[0], g->dilation[0]);
    g->out_w = ct_conv_out_size(g->in_w, g->kernel[1], g->stride[1], g->padding[1], g->dilation[1]);
    return g->out_h >= 1 && g->out_w >= 1;
}

static ct_pool2d_geom geom(int64_t c, int64_t h, int64_t w, int64_t k, int64_t s, int64_t p, int64_t d, bool incl) {
    ct_pool2d_geom g = {.channels = c,
                        .in_h = h,
                        .in_w = w,
                        .kernel = {k, k},
                        .stride = {s, s},
                        .padding = {p, p},
                        .dilation = {d, d},
                        .count_include_pad = incl};
    CT_ASSERT(finish_geom(&g));
    return g;
}

/* PyTorch's limits: padding at most half the kernel; average pooling has no dilation. */
static ct_pool2d_geom random_geom(bool dilated) {
    for (;;) {
        ct_pool2d_geom g = {.channels = rnd(1, 4), .in_h = rnd(1, 13), .in_w = rnd(1, 13)};
        for (int a = 0; a < 2; a++) {
            g.kernel[a] = rnd(1, 4);
            g.stride[a] = rnd(1, 3);
            g.padding[a] = rnd(0, g.kernel[a] / 2);
            g.dilation[a] = dilated ? rnd(1, 2) : 1;
        }
        g.count_include_pad = rnd(0, 1);
        if (finish_geom(&g)) return g;
    }
}

int main(void) {
    ct_cuda_test_begin("test_cuda_pool");
    ct_rng_init(&rng, ct_test_seed, 0, 0);
    const ct_dtype dts[] = {CT_F32, CT_F64};

    const struct {
        ct_pool2d_geom g;
        int64_t batch;
    } fixed[] = {
        {geom(8, 28, 28, 2, 2, 0, 1, false), 4}, /* nn.MaxPool2d(2): the CPU's 2x2 fast path */
        {geom(3, 9, 11, 2, 2, 0, 1, false), 2},  /* odd sizes: the last row and column dropped */
        {geom(2, 8, 8, 3, 1, 1, 1, true), 3},    /* every input in up to 9 windows */
        {geom(4, 13, 13, 3, 2, 1, 1, false), 1}, /* ResNet-style 3x3 stride 2 padding 1, batch 1 */
        {geom(2, 10, 9, 3, 1, 1, 2, false), 2},  /* dilation 2 (max pooling only) */
        {geom(1, 2, 2, 2, 1, 1, 3, false), 1},   /* dilation 3 on a 2x2 input: windows wholly in the padding */
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        for (int d = 0; d < 2; d++) {
            check_max(&fixed[i].g, fixed[i].batch, dts[d], false);
            check_max(&fixed[i].g, fixed[i].batch, dts[d], true);
            if (fixed[i].g.dilation[0] == 1) check_avg(&fixed[i].g, fixed[i].batch, dts[d]);
        }
    for (int t = 0; t < 40; t++) {
        ct_dtype dt = dts[t % 2];
        ct_pool2d_geom gm = random_geom(true), ga = random_geom(false);
        check_max(&gm, rnd(1, 3), dt, t % 3 == 0);
        check_avg(&ga, rnd(1, 3), dt);
    }
    return ct_test_finish();
}
