/* A linear layer's forward and backward on the GPU (ct_op_linear_forward / _backward: cuBLASLt with
 * the bias, GELU and bias-gradient epilogues, backends/cuda/linear.cu) against the CPU's, from the
 * same random inputs: with and without bias, no activation, ReLU and tanh GELU (and the GELU's input
 * kept in pre), widths that are and are not multiples of 8 (the GELU epilogue needs one; the others
 * take the separate ops), tensors that start one row into a buffer (pointers cuBLASLt sees with less
 * alignment), the same shapes twice (a remembered algorithm), float64 (separate ops), and the TF32,
 * BF16 and FP16 math modes. The backward accumulates into gradients that start non-zero, as they do
 * over micro-batches, and dx is overwritten. And the tied LM head's -inf padding mask as the bias.
 *
 * Bounds: test_cuda_dense's componentwise ones, each element against the sum of its terms' absolute
 * values: float32 1e-5, float64 1e-12, TF32 and FP16 1e-3, BF16 1e-2; a NaN fails. */
#include <math.h>

#include "core/ops/ops.h"
#include "cuda_testlib.h"
#ifdef CT_HAVE_CUDA
#include "backends/cuda/ops_cuda.h"
#endif

#ifdef CT_HAVE_CUDA

static ct_rng rng;

static double tolerance(ct_dtype dt, ct_math_mode mode) {
    if (mode == CT_MATH_BF16) return 1e-2; /* 7 mantissa bits: each product within 2^-7 of its size */
    if (mode != CT_MATH_F32) return 1e-3;  /* tf32, fp16: 10 bits */
    return dt == CT_F64 ? 1e-12 : 1e-5;
}

/* A [rows, cols] tensor of uniform values that starts `offset` rows into a buffer of its own (the
 * buffer's other rows are never read): CPU and GPU twins, the GPU one sharing the offset. */
typedef struct {
    ct_tensor cpu_buf, gpu_buf, cpu, gpu;
} twin;

static twin twin_rand(ct_dtype dt, int64_t rows, int64_t cols, int64_t offset, double lo, double hi) {
    twin t;
    t.cpu_buf = ct_ct_rand(&rng, dt, 2, (int64_t[]){rows + offset, cols}, lo, hi);
    t.gpu_buf = ct_ct_to_gpu(&t.cpu_buf);
    t.cpu = ct_tensor_rows(&t.cpu_buf, offset, rows);
    t.gpu = ct_tensor_rows(&t.gpu_buf, offset, rows);
    return t;
}

static void twin_free(twin *t) {
    ct_tensor_free(&t->cpu_buf);
    ct_tensor_free(&t->gpu_buf);
}

/* One forward and backward of a rows x in -> out linear layer on both devices. */
static void linear_case(ct_dtype dt, ct_math_mode mode, int64_t rows, int64_t in, int64_t out, bool bias,
                        ct_activation act, int64_t offset) {
    const bool gelu = act == CT_ACT_GELU_TANH;
    char what[160];
    snprintf(what, sizeof what, "linear %s %s %lldx%lld->%lld bias=%d %s offset=%lld", ct_dtype_name(dt),
             ct_math_mode_name(mode), (long long)rows, (long long)in, (long long)out, bias,
             ct_activation_name(act), (long long)offset);
    const double bound = 1.0 / sqrt((double)in);
    twin x = twin_rand(dt, rows, in, offset, -1, 1), w = twin_rand(dt, out, in, 0, -bound, bound);
    twin b = twin_rand(dt, 1, out, 0, -0.5, 0.5);
    twin y = twin_rand(dt, rows, out, offset, -9, 9), pre = twin_rand(dt, rows, out, offset, -9, 9);
    twin dy = twin_rand(dt, rows, out, offset, -1, 1), dx = twin_rand(dt, rows, in, offset, -9, 9);
    twin dw = twin_rand(dt, out, in, 0, -1, 1), db = twin_rand(dt, 1, out, 0, -1, 1);
    ct_tensor b1 = ct_tensor_view(b.cpu.data, dt, CT_CPU, 1, &out), gb1 = ct_tensor_view(b.gpu.data, dt, b.gpu.device,
                                                                                         1, &out);
    ct_tensor db1 = ct_tensor_view(db.cpu.data, dt, CT_CPU, 1, &out),
              gdb1 = ct_tensor_view(db.gpu.data, dt, db.gpu.device, 1, &out);

    ct_tensor dw0 = ct_ct_abs(&dw.cpu), db0 = ct_ct_abs(&db1); /* |the gradients before|, for the scales */
    ct_op_linear_forward(&x.cpu, &w.cpu, bias ? &b1 : NULL, act, gelu ? &pre.cpu : NULL, &y.cpu);
    ct_op_linear_backward(&dy.cpu, &x.cpu, &w.cpu, &dw.cpu, bias ? &db1 : NULL, &dx.cpu);
    ct_cuda_set_math_mode(mode);
    ct_op_linear_forward(&x.gpu, &w.gpu, bias ? &gb1 : NULL, act, gelu ? &pre.gpu : NULL, &y.gpu);
    ct_op_linear_backward(&dy.gpu, &x.gpu, &w.gpu, &dw.gpu, bias ? &gdb1 : NULL, &dx.gpu);
    ct_cuda_set_math_mode(CT_MATH_F32);

    /* the scales: the same products over absolute values, the starting gradients' too */
    const double tol = tolerance(dt, mode);
    ct_tensor ax = ct_ct_abs(&x.cpu), aw = ct_ct_abs(&w.cpu), ab = ct_ct_abs(&b1), ady = ct_ct_abs(&dy.cpu);
    ct_tensor s_pre = ct_ct_zeros(dt, 2, y.cpu.shape), s_dx = ct_ct_zeros(dt, 2, dx.cpu.shape);
    ct_tensor s_dw = ct_ct_abs(&dw0), s_db = ct_ct_abs(&db0);
    ct_op_linear_forward(&ax, &aw, bias ? &ab : NULL, CT_ACT_NONE, NULL, &s_pre);
    ct_op_linear_backward(&ady, &ax, &aw, &s_dw, bias ? &s_db : NULL, &s_dx);

    char name[200];
    snprintf(name, sizeof name, "%s: y", what);
    ct_ct_check_scaled(name, &y.gpu, &y.cpu, &s_pre, gelu ? 1.5 * tol : tol); /* the GELU's slope is at most 1.13 */
    if (gelu) {
        snprintf(name, sizeof name, "%s: the GELU's input", what);
        ct_ct_check_scaled(name, &pre.gpu, &pre.cpu, &s_pre, tol);
    }
    snprintf(name, sizeof name, "%s: dweight (accumulated)", what);
    ct_ct_check_scaled(name, &dw.gpu, &dw.cpu, &s_dw, tol);
    if (bias) {
        snprintf(name, sizeof name, "%s: dbias (accumulated)", what);
        ct_ct_check_scaled(name, &gdb1, &db1, &s_db, tol);
    }
    snprintf(name, sizeof name, "%s: dx", what);
    ct_ct_check_scaled(name, &dx.gpu, &dx.cpu, &s_dx, tol);
    ct_tensor *scales[] = {&ax, &aw, &ab, &ady, &s_pre, &s_dx, &s_dw, &s_db, &dw0, &db0};
    for (size_t i = 0; i < sizeof scales / sizeof *scales; i++) ct_tensor_free(scales[i]);
    twin *all[] = {&x, &w, &b, &y, &pre, &dy, &dx, &dw, &db};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) twin_free(all[i]);
}

static void test_shapes(ct_dtype dt, ct_math_mode mode) {
    static const int64_t shapes[][3] = {{1, 1, 8}, {7, 5, 3}, {33, 20, 16}, {64, 48, 96}, {130, 64, 40}, {5, 17, 9}};
    const ct_activation acts[] = {CT_ACT_NONE, CT_ACT_RELU, CT_ACT_GELU_TANH};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int a = 0; a < 3; a++)
            for (int bias = 0; bias < 2; bias++)
                for (int64_t offset = 0; offset < 2; offset++)
                    linear_case(dt, mode, shapes[s][0], shapes[s][1], shapes[s][2], bias, acts[a], offset);
}

/* The tied LM head's padding mask as the bias (model/gpt.c): 0 for the first `real` columns, -inf for
 * the padding ones (whose weight rows are 0), which must come out exactly -inf as on the CPU. */
static void mask_bias_case(ct_math_mode mode, int64_t rows, int64_t in, int64_t out, int64_t real) {
    const double bound = 1.0 / sqrt((double)in), tol = tolerance(CT_F32, mode);
    ct_tensor x = ct_ct_rand(&rng, CT_F32, 2, (int64_t[]){rows, in}, -1, 1);
    ct_tensor w = ct_ct_rand(&rng, CT_F32, 2, (int64_t[]){out, in}, -bound, bound);
    ct_tensor mask = ct_ct_zeros(CT_F32, 1, &out), y = ct_ct_zeros(CT_F32, 2, (int64_t[]){rows, out});
    for (int64_t j = real * in; j < out * in; j++) ((float *)w.data)[j] = 0.0f;
    for (int64_t j = real; j < out; j++) ((float *)mask.data)[j] = -INFINITY;
    ct_op_linear_forward(&x, &w, &mask, CT_ACT_NONE, NULL, &y);
    ct_tensor gx = ct_ct_to_gpu(&x), gw = ct_ct_to_gpu(&w), gm = ct_ct_to_gpu(&mask), gy = ct_ct_to_gpu(&y);
    ct_cuda_set_math_mode(mode);
    ct_op_linear_forward(&gx, &gw, &gm, CT_ACT_NONE, NULL, &gy);
    ct_cuda_set_math_mode(CT_MATH_F32);
    ct_tensor back = ct_ct_to_cpu(&gy), ax = ct_ct_abs(&x), aw = ct_ct_abs(&w);
    ct_tensor scale = ct_ct_zeros(CT_F32, 2, (int64_t[]){rows, out});
    ct_op_gemm(false, true, 1.0, &ax, &aw, 0.0, &scale);
    const float *got = back.data, *want = y.data, *sc = scale.data;
    int64_t bad = 0;
    for (int64_t i = 0; i < rows * out; i++)
        bad += i % out >= real ? !(got[i] == -INFINITY && want[i] == -INFINITY)
                               : !(fabsf(got[i] - want[i]) <= tol * sc[i] + 1e-30f);
    CHECK(bad == 0, "linear %s %lldx%lld->%lld, the last %lld columns masked by a -inf bias: %lld of %lld outputs wrong",
          ct_math_mode_name(mode), (long long)rows, (long long)in, (long long)out, (long long)(out - real),
          (long long)bad, (long long)(rows * out));
    ct_tensor *all[] = {&x, &w, &mask, &y, &gx, &gw, &gm, &gy, &back, &ax, &aw, &scale};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ct_tensor_free(all[i]);
}

#endif

int main(void) {
    ct_cuda_test_begin("test_cuda_linear");
#ifdef CT_HAVE_CUDA
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    test_shapes(CT_F32, CT_MATH_F32);
    test_shapes(CT_F32, CT_MATH_F32); /* again: the algorithms remembered the first time */
    test_shapes(CT_F64, CT_MATH_F32);
    test_shapes(CT_F32, CT_MATH_TF32);
    test_shapes(CT_F32, CT_MATH_BF16);
    test_shapes(CT_F32, CT_MATH_FP16);
    /* a width of GPT-2 small's MLP ratio at a test's size */
    linear_case(CT_F32, CT_MATH_BF16, 256, 64, 256, true, CT_ACT_GELU_TANH, 0);
    linear_case(CT_F32, CT_MATH_BF16, 256, 256, 64, true, CT_ACT_NONE, 0);
    mask_bias_case(CT_MATH_F32, 33, 20, 24, 19);
    mask_bias_case(CT_MATH_BF16, 64, 64, 128, 100); /* GPT-2's 50257 of 50304, in small */
#endif
    return ct_test_finish();
}
