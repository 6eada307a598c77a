/* The attention ops (core/ops/ops_attn.h) on CUDA against the CPU backend, on fresh random inputs each
 * run: head split and merge (copies: bit-identical, merge leaving the other columns alone), the
 * causal softmax forward (square and with more keys than queries, in place too) and backward (dx
 * aliasing dy too), f32 and f64, rows from 1 to 300 keys (one and several passes of a block); and
 * the fused (flash-style) attention's y, log-sum-exps and d(qkv), f32 and f64, contexts across the
 * kernels' 64-row blocks and staged tiles, head dimensions of every kernel instance (1 to 256), also
 * in bf16 and fp16 math (the tensor-core kernels up to 128, bf16 tolerance), every
 * output element written (the GPU's outputs start as NaN); errors relative to the larger of an
 * element and its tensor's RMS, since sums in another order leave an absolute error at that scale. */
#include <math.h>
#include <stdio.h>

#include "core/ops/ops.h"
#include "core/ops/ops_attn.h"
#include "cuda_testlib.h"
#ifdef CT_HAVE_CUDA
#include "backends/cuda/ops_cuda.h"
#endif

static ct_rng rng;

static int64_t irand(int64_t lo, int64_t hi) { return lo + (int64_t)ct_rng_below(&rng, (uint64_t)(hi - lo + 1)); }

/* The CUDA backend's math mode on this thread (a build without CUDA skips these tests). */
static void use_math_mode(ct_math_mode m) {
#ifdef CT_HAVE_CUDA
    ct_cuda_set_math_mode(m);
#else
    (void)m;
#endif
}

static void heads_case(ct_dtype dt) {
    int64_t B = irand(1, 4), T = irand(1, 40), H = irand(1, 6), D = irand(1, 20);
    int64_t off = irand(0, 8), W = off + H * D + irand(0, 5);
    int64_t s3[3] = {B, T, W}, s4[4] = {B, H, T, D};
    ct_tensor x = ct_ct_rand(&rng, dt, 3, s3, -2, 2), h = ct_ct_zeros(dt, 4, s4);
    ct_tensor gx = ct_ct_to_gpu(&x), gh = ct_ct_to_gpu(&h);
    ct_op_heads_split(&x, off, &h);
    ct_op_heads_split(&gx, off, &gh);
    ct_ct_check_equal("heads_split", &gh, &h);
    ct_tensor back = ct_ct_rand(&rng, dt, 3, s3, -2, 2);
    ct_tensor gback = ct_ct_to_gpu(&back);
    ct_op_heads_merge(&h, off, &back);
    ct_op_heads_merge(&gh, off, &gback);
    ct_ct_check_equal("heads_merge (other columns untouched)", &gback, &back);
    ct_tensor *all[] = {&x, &h, &gx, &gh, &back, &gback};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ct_tensor_free(all[i]);
}

static void softmax_case(ct_dtype dt, bool square, bool in_place) {
    int64_t N = irand(1, 4), H = irand(1, 4), tq = irand(1, 300), tk = square ? tq : tq + irand(1, 40);
    int64_t s[4] = {N, H, tq, tk};
    double tol = dt == CT_F32 ? 1e-5 : 1e-12;
    char what[160];
    snprintf(what, sizeof what, "causal softmax %s [%lld, %lld, %lld, %lld]%s", ct_dtype_name(dt), (long long)N,
             (long long)H, (long long)tq, (long long)tk, in_place ? " in place" : "");
    ct_tensor x = ct_ct_rand(&rng, dt, 4, s, -6, 6), y = ct_ct_zeros(dt, 4, s);
    ct_tensor gx = ct_ct_to_gpu(&x), gy = ct_ct_to_gpu(&y);
    ct_op_causal_softmax_forward(&x, &y);
    ct_op_causal_softmax_forward(&gx, in_place ? &gx : &gy);
    ct_ct_check_close(what, in_place ? &gx : &gy, &y, tol, 1e-6);
    /* the backward from the CPU's y on both sides: an output that cancels ((dy - dot) near 0) would
     * magnify the forwards' last-bit differences */
    ct_tensor_copy_to(&gy, &y);

    ct_tensor dy = ct_ct_rand(&rng, dt, 4, s, -1, 1), dx = ct_ct_zeros(dt, 4, s);
    ct_tensor gdy = ct_ct_to_gpu(&dy), gdx = ct_ct_to_gpu(&dx);
    ct_op_causal_softmax_backward(&y, &dy, &dx);
    ct_op_causal_softmax_backward(&gy, &gdy, in_place ? &gdy : &gdx);
    char w2[200];
    snprintf(w2, sizeof w2, "%s: backward", what);
    /* dx = y (dy - dot) cancels where dy is near the row's dot product, which the two sides sum in
     * other orders: relative to dx's scale there */
    ct_ct_check_close(w2, in_place ? &gdy : &gdx, &dx, tol, fmax(ct_ct_rms(&dx), 1e-30));
    ct_tensor *all[] = {&x, &y, &gx, &gy, &dy, &dx, &gdy, &gdx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ct_tensor_free(all[i]);
}

/* gpu against cpu: within tol of the larger of each element and `floor`; in reduced-precision math,
 * whose rounding (of q, k, v, dy to bf16 and of P and dS before their products) leaves each element an
 * independent error, within 1e-2 in root mean square (at most 6e-3 seen over 140 cases) and 0.25 at
 * worst (7e-2 seen, where a gradient's terms cancel; a wrong row or tile is off by its whole size). */
static void compare(const char *what, const ct_tensor *gpu, const ct_tensor *cpu, bool reduced, double tol,
                    double floor) {
    ct_ct_check_close(what, gpu, cpu, reduced ? 0.25 : tol, floor);
    if (reduced) ct_ct_check_rms_close(what, gpu, cpu, 1e-2);
}

/* The fused attention on the GPU under math mode `mode` against the CPU's float32 or float64: exact
 * math within rounding, bf16 and fp16 (the tensor-core kernels, bf16 inputs) as compare() says. */
static void fused_case(ct_dtype dt, int64_t D, ct_math_mode mode) {
    int64_t B = irand(1, 3), T = irand(1, 200), H = irand(1, 4), C = H * D;
    int64_t sq[3] = {B, T, 3 * C}, sy[3] = {B, T, C}, sl[3] = {B, H, T};
    int64_t sw[1] = {ct_causal_attention_workspace_numel(T)};
    const bool reduced = (mode == CT_MATH_BF16 || mode == CT_MATH_FP16) && dt == CT_F32 && D <= 128;
    double tol = dt == CT_F32 ? 1e-4 : 1e-11;
    char what[160];
    snprintf(what, sizeof what, "fused attention %s%s B=%lld T=%lld H=%lld D=%lld", ct_dtype_name(dt),
             mode == CT_MATH_BF16 ? " (bf16 math)" : mode == CT_MATH_FP16 ? " (fp16 math)" : "", (long long)B,
             (long long)T, (long long)H, (long long)D);
    ct_tensor qkv = ct_ct_rand(&rng, dt, 3, sq, -2, 2), dy = ct_ct_rand(&rng, dt, 3, sy, -1, 1);
    ct_tensor y = ct_ct_zeros(dt, 3, sy), lse = ct_ct_zeros(dt, 3, sl), dqkv = ct_ct_zeros(dt, 3, sq);
    ct_tensor ws = ct_ct_zeros(dt, 1, sw);
    ct_tensor gqkv = ct_ct_to_gpu(&qkv), gdy = ct_ct_to_gpu(&dy), gy = ct_ct_to_gpu(&y), glse = ct_ct_to_gpu(&lse);
    ct_tensor gdqkv = ct_ct_to_gpu(&dqkv), gws = ct_ct_to_gpu(&ws);
    ct_op_fill(&gy, NAN);
    ct_op_fill(&glse, NAN);
    ct_op_fill(&gdqkv, NAN);
    ct_op_causal_attention_forward(&qkv, H, &lse, &y, &ws);
    use_math_mode(mode);
    ct_op_causal_attention_forward(&gqkv, H, &glse, &gy, &gws);
    use_math_mode(CT_MATH_F32);
    char w[200];
    snprintf(w, sizeof w, "%s: y", what);
    compare(w, &gy, &y, reduced, tol, fmax(ct_ct_rms(&y), 1e-30));
    snprintf(w, sizeof w, "%s: lse", what);
    compare(w, &glse, &lse, reduced, tol, 1.0);
    /* both backwards from the CPU's forward, so that only the backward is compared */
    ct_tensor y_cpu_on_gpu = ct_ct_to_gpu(&y), lse_cpu_on_gpu = ct_ct_to_gpu(&lse);
    ct_op_causal_attention_backward(&qkv, H, &y, &lse, &dy, &dqkv, &ws);
    use_math_mode(mode);
    ct_op_causal_attention_backward(&gqkv, H, &y_cpu_on_gpu, &lse_cpu_on_gpu, &gdy, &gdqkv, &gws);
    use_math_mode(CT_MATH_F32);
    snprintf(w, sizeof w, "%s: d(qkv)", what);
    compare(w, &gdqkv, &dqkv, reduced, tol, fmax(ct_ct_rms(&dqkv), 1e-30));
    ct_tensor *all[] = {&qkv, &dy, &y, &lse, &dqkv, &ws, &gqkv, &gdy, &gy, &glse, &gdqkv, &gws, &y_cpu_on_gpu,
                        &lse_cpu_on_gpu};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ct_tensor_free(all[i]);
}

int main(void) {
    ct_cuda_test_begin("test_cuda_attn");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    for (int k = 0; k < 12; k++) {
        ct_dtype dt = k % 2 ? CT_F64 : CT_F32;
        heads_case(dt);
        softmax_case(dt, k % 3 != 0, k % 4 < 2);
    }
    /* a head dimension in each of the kernel's register widths (32, 64, 128, 256), both dtypes */
    const int64_t dims[] = {1, irand(2, 32), 64, irand(33, 64), irand(65, 128), 128, irand(129, 256), 256};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        fused_case(CT_F32, dims[i], CT_MATH_F32);
        fused_case(CT_F64, dims[i], CT_MATH_F32);
    }
    /* the tensor-core kernels: each width instance (32, 64, 128), bf16 and fp16 math; wider heads
     * take the CUDA cores' kernels in these modes too; float64 ignores the mode */
    const int64_t tc_dims[] = {irand(1, 32), 32, irand(33, 64), 64, irand(65, 128), 128, irand(129, 256)};
    for (size_t i = 0; i < sizeof tc_dims / sizeof tc_dims[0]; i++) {
        fused_case(CT_F32, tc_dims[i], i % 2 ? CT_MATH_FP16 : CT_MATH_BF16);
        if (i == 0) fused_case(CT_F64, tc_dims[i], CT_MATH_BF16);
    }
    return ct_test_finish();
}
