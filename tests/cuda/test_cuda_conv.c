/* 2-D convolution on CUDA against the CPU backend: forward (with and without bias) and every gradient on the same
 * random inputs, over random geometries (stride 2, padding, dilation 2, 1x1 and 5x5 kernels, rectangular kernels, odd
 * sizes, batch 1) plus a fixed list of the shapes networks use. float32 and float64 in exact math, float32 in the
 * TF32, bf16 and fp16 math modes with their looser tolerances. Parameter gradients start non-zero on both sides, so a
 * backward that overwrote instead of accumulating fails; a second backward run checks the GPU is deterministic.
 *
 * Errors in exact math are relative to max(|cpu|, floor) with the floor at the rms of the CPU tensor, since near-zero
 * elements of a sum of many terms cannot be judged against their own (arbitrarily small) size. In the reduced-precision
 * modes, whose rounding of every input (2^-11 relative for TF32 and fp16, 2^-8 for bf16) leaves each product off by
 * about twice that, each element is judged against the sum of its terms' sizes (the same convolution of |inputs|, and
 * |dweight| before for the accumulated gradient), test_cuda_dense's bound: a range-based floor let a few-term sum's
 * rounding pass 1e-3 of the largest output (seed 1795923405451677, a 1x1 kernel's dweight in tf32). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/ops/ops.h"
#include "cuda_testlib.h"
#ifdef CT_HAVE_CUDA
#include "backends/cuda/ops_cuda.h"
#endif

static ct_rng rng;

static int64_t rnd(int64_t lo, int64_t hi) { return lo + (int64_t)ct_rng_below(&rng, (uint64_t)(hi - lo + 1)); }

/* Compares with the floor at the tensor's scale (see the top of the file; never below a tiny absolute value). */
static void close_to(const char *what, const ct_tensor *gpu, const ct_tensor *cpu, double tol) {
    ct_ct_check_close(what, gpu, cpu, tol, fmax(ct_ct_rms(cpu), 1e-30));
}

typedef enum { MODE_F32, MODE_TF32, MODE_BF16, MODE_FP16 } mode;
static const char *mode_name[] = {"f32", "tf32", "bf16", "fp16"};

static void set_mode(mode m) {
#ifdef CT_HAVE_CUDA
    static const ct_math_mode mm[] = {CT_MATH_F32, CT_MATH_TF32, CT_MATH_BF16, CT_MATH_FP16};
    ct_cuda_set_math_mode(mm[m]);
#else
    (void)m;
#endif
}

/* One geometry, dtype and math mode: CPU and GPU forward and backward from the same inputs. */
static void check_case(const ct_conv2d_geom *g, int64_t batch, ct_dtype dt, mode m, bool with_bias, double tol) {
    char what[256];
    snprintf(what, sizeof what,
             "%s/%s B=%lld C=%lld %lldx%lld O=%lld k=%lldx%lld s=%lld,%lld p=%lld,%lld d=%lld,%lld bias=%d",
             ct_dtype_name(dt), mode_name[m], (long long)batch, (long long)g->in_channels, (long long)g->in_h,
             (long long)g->in_w, (long long)g->out_channels, (long long)g->kernel[0], (long long)g->kernel[1],
             (long long)g->stride[0], (long long)g->stride[1], (long long)g->padding[0], (long long)g->padding[1],
             (long long)g->dilation[0], (long long)g->dilation[1], with_bias);
    int64_t xs[4] = {batch, g->in_channels, g->in_h, g->in_w};
    int64_t ys[4] = {batch, g->out_channels, g->out_h, g->out_w};
    int64_t ws4[4] = {g->out_channels, g->in_channels, g->kernel[0], g->kernel[1]};
    int64_t bs[1] = {g->out_channels};
    int64_t wsn = ct_conv2d_workspace_numel(g, batch), one = 1;

    ct_tensor x = ct_ct_rand(&rng, dt, 4, xs, -1, 1), w = ct_ct_rand(&rng, dt, 4, ws4, -1, 1);
    ct_tensor b = ct_ct_rand(&rng, dt, 1, bs, -1, 1), dy = ct_ct_rand(&rng, dt, 4, ys, -1, 1);
    ct_tensor dw = ct_ct_rand(&rng, dt, 4, ws4, -1, 1), db = ct_ct_rand(&rng, dt, 1, bs, -1, 1);
    ct_tensor dw_start = ct_ct_abs(&dw); /* |dweight before|, for the reduced modes' scale */
    ct_tensor y = ct_ct_zeros(dt, 4, ys), dx = ct_ct_zeros(dt, 4, xs), ws = ct_ct_zeros(dt, 1, &wsn);
    ct_tensor gx = ct_ct_to_gpu(&x), gw = ct_ct_to_gpu(&w), gb = ct_ct_to_gpu(&b), gdy = ct_ct_to_gpu(&dy);
    ct_tensor gdw = ct_ct_to_gpu(&dw), gdb = ct_ct_to_gpu(&db), gy = ct_ct_to_gpu(&y), gdx = ct_ct_to_gpu(&dx);
    /* The GPU ignores the im2col workspace; a token one proves it. */
    ct_tensor gws = ct_ct_zeros(dt, 1, &one), gws_gpu = ct_ct_to_gpu(&gws);

    ct_op_conv2d_forward(g, &x, &w, with_bias ? &b : NULL, &y, &ws);
    ct_op_conv2d_backward(g, &x, &w, &dy, &dw, with_bias ? &db : NULL, &dx, &ws);
    set_mode(m);
    ct_op_conv2d_forward(g, &gx, &gw, with_bias ? &gb : NULL, &gy, &gws_gpu);
    ct_op_conv2d_backward(g, &gx, &gw, &gdy, &gdw, with_bias ? &gdb : NULL, &gdx, &gws_gpu);
    set_mode(MODE_F32);

    char label[320];
    const bool reduced = m != MODE_F32 && dt == CT_F32;
    ct_tensor sy = {0}, sdx = {0}, ax = {0}, aw = {0}, ab = {0}, ady = {0};
    if (reduced) { /* each element against the sum of its terms' sizes: the same convolution of |inputs| */
        ax = ct_ct_abs(&x), aw = ct_ct_abs(&w), ab = ct_ct_abs(&b), ady = ct_ct_abs(&dy);
        sy = ct_ct_zeros(dt, 4, ys), sdx = ct_ct_zeros(dt, 4, xs);
        ct_op_conv2d_forward(g, &ax, &aw, with_bias ? &ab : NULL, &sy, &ws);
        ct_op_conv2d_backward(g, &ax, &aw, &ady, &dw_start, NULL, &sdx, &ws);
    }
    snprintf(label, sizeof label, "%s: y", what);
    if (reduced)
        ct_ct_check_scaled(label, &gy, &y, &sy, tol);
    else
        close_to(label, &gy, &y, tol);
    snprintf(label, sizeof label, "%s: dx", what);
    if (reduced)
        ct_ct_check_scaled(label, &gdx, &dx, &sdx, tol);
    else
        close_to(label, &gdx, &dx, tol);
    snprintf(label, sizeof label, "%s: dweight (accumulated)", what);
    if (reduced)
        ct_ct_check_scaled(label, &gdw, &dw, &dw_start, tol);
    else
        close_to(label, &gdw, &dw, tol);
    if (with_bias) {
        /* Summed in double on both sides: as tight as the dtype allows whatever the math mode. */
        snprintf(label, sizeof label, "%s: dbias (accumulated)", what);
        close_to(label, &gdb, &db, dt == CT_F64 ? 1e-12 : 1e-6);
    }

    /* Determinism: the same backward again gives the same bits (dx is overwritten; dweight restarts from 0). */
    ct_tensor dx_first = ct_ct_to_cpu(&gdx);
    ct_tensor zero_w = ct_ct_zeros(dt, 4, ws4), gdw0 = ct_ct_to_gpu(&zero_w), gdw1 = ct_ct_to_gpu(&zero_w);
    set_mode(m);
    ct_op_conv2d_backward(g, &gx, &gw, &gdy, &gdw0, NULL, &gdx, &gws_gpu);
    /* dx skipped (NULL): only dweight */
    ct_op_conv2d_backward(g, &gx, &gw, &gdy, &gdw1, NULL, NULL, &gws_gpu);
    set_mode(MODE_F32);
    ct_tensor dw0 = ct_ct_to_cpu(&gdw0);
    snprintf(label, sizeof label, "%s: dx deterministic", what);
    ct_ct_check_equal(label, &gdx, &dx_first);
    snprintf(label, sizeof label, "%s: dweight deterministic, with and without dx", what);
    ct_ct_check_equal(label, &gdw1, &dw0);

    ct_tensor *all[] = {&x,   &w,   &b,  &dy,  &dw,  &db,  &y,  &dx,       &ws,     &gx,     &gw,     &gb,  &gdy,
                        &gdw, &gdb, &gy, &gdx, &gws, &gws_gpu, &dx_first, &zero_w, &gdw0, &gdw1, &dw0,
                        &dw_start, &sy, &sdx, &ax, &aw, &ab, &ady};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ct_tensor_free(all[i]);
}

static bool finish_geom(ct_conv2d_geom *g) {
    g->out_h = ct_conv_out_size(g->in_h, g->kernel[0], g->stride[0], g->padding[0], g->dilation[0]);
    g->out_w = ct_conv_out_size(g->in_w, g->kernel[1], g->stride[1], g->padding[1], g->dilation[1]);
    return g->out_h >= 1 && g->out_w >= 1;
}

static ct_conv2d_geom geom(int64_t c, int64_t h, int64_t w, int64_t o, int64_t k, int64_t s, int64_t p, int64_t d) {
    ct_conv2d_geom g = {.in_channels = c,
                        .in_h = h,
                        .in_w = w,
                        .out_channels = o,
                        .kernel = {k, k},
                        .stride = {s, s},
                        .padding = {p, p},
                        .dilation = {d, d}};
    CT_ASSERT(finish_geom(&g));
    return g;
}

static ct_conv2d_geom random_geom(void) {
    static const int64_t kernels[] = {1, 2, 3, 5};
    for (;;) {
        ct_conv2d_geom g = {
            .in_channels = rnd(1, 6), .in_h = rnd(3, 15), .in_w = rnd(3, 15), .out_channels = rnd(1, 7)};
        for (int a = 0; a < 2; a++) {
            g.kernel[a] = kernels[rnd(0, 3)];
            g.stride[a] = rnd(1, 2);
            g.dilation[a] = rnd(1, 2);
            g.padding[a] = rnd(0, g.kernel[a] / 2 + 1);
        }
        if (finish_geom(&g)) return g;
    }
}

int main(void) {
    ct_cuda_test_begin("test_cuda_conv");
    ct_rng_init(&rng, ct_test_seed, 0, 0);

    /* The shapes networks use, then random ones. */
    const struct {
        ct_conv2d_geom g;
        int64_t batch;
    } fixed[] = {
        {geom(1, 28, 28, 8, 3, 1, 1, 1), 4},  /* LeNet-like first layer, "same" padding */
        {geom(8, 14, 14, 16, 5, 1, 2, 1), 2}, /* 5x5 */
        {geom(6, 9, 9, 4, 1, 1, 0, 1), 3},    /* 1x1 */
        {geom(3, 11, 13, 5, 3, 2, 1, 1), 1},  /* stride 2, odd sizes, batch 1 */
        {geom(4, 10, 9, 3, 3, 1, 2, 2), 2},   /* dilation 2 */
        {geom(2, 7, 7, 2, 5, 2, 0, 1), 5},    /* 5x5 stride 2, no padding */
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        check_case(&fixed[i].g, fixed[i].batch, CT_F32, MODE_F32, true, 1e-5);
        check_case(&fixed[i].g, fixed[i].batch, CT_F64, MODE_F32, true, 1e-12);
        check_case(&fixed[i].g, fixed[i].batch, CT_F32, MODE_TF32, true, 1e-3);
    }
    for (int t = 0; t < 24; t++) {
        ct_conv2d_geom g = random_geom();
        int64_t batch = rnd(1, 4);
        bool bias = rnd(0, 3) != 0;
        check_case(&g, batch, CT_F32, MODE_F32, bias, 1e-5);
        check_case(&g, batch, CT_F64, MODE_F32, bias, 1e-12);
        if (t % 2 == 0) check_case(&g, batch, CT_F32, MODE_TF32, bias, 1e-3);
        if (t % 4 == 1) check_case(&g, batch, CT_F32, MODE_BF16, bias, 1e-2);
        if (t % 4 == 3) check_case(&g, batch, CT_F32, MODE_FP16, bias, 1e-2);
    }
    return ct_test_finish();
}
