/* The CUDA flash-style attention's kernels (backends/cuda/flash_attn_kernels.cuh) run on the host
 * through cuda_emulation.h, against the CPU backend's fused attention on the same random inputs: y
 * and the log-sum-exps of the forward, d(qkv) of the backward (from the CPU's forward, so that only
 * the backward is compared), float32 and float64, with the launch shapes flash_attn.cu uses
 * (shape_of, by_width). Contexts cross the kernels' 64-row blocks and staged tiles; head dimensions
 * fall in each register width (32, 64, 128, 256), with tiles of fewer rows where two [tile, D]
 * blocks of doubles would not fit 48 KiB. Every output element starts as NaN, so one the kernels
 * never write fails. The real kernels on a GPU are tests/cuda/test_cuda_attn.c's. */
#include "cuda_emulation.h"

#include "backends/cuda/flash_attn_kernels.cuh"

extern "C" {
#include "core/ops/ops.h"
#include "core/ops/ops_attn.h"
#include "testlib.h"
}

#include <cmath>
#include <cstring>

using namespace ct_flash;

static ct_rng rng;

static ct_tensor tensor(ct_dtype dt, int64_t a, int64_t b, int64_t c) {
    const int64_t shape[3] = {a, b, c};
    return ct_test_alloc(dt, 3, shape);
}

/* The worst |got - want| / max(|want|, floor) (NaN in either: infinite). */
static double worst_error(const ct_tensor *got, const ct_tensor *want, double floor) {
    double worst = 0;
    for (int64_t i = 0; i < ct_tensor_numel(want); i++) {
        const double g = ct_tensor_get(got, i), w = ct_tensor_get(want, i);
        const double e = std::isnan(g) || std::isnan(w) ? INFINITY : std::fabs(g - w) / std::fmax(std::fabs(w), floor);
        worst = std::fmax(worst, e);
    }
    return worst;
}

static double rms(const ct_tensor *t) {
    double s = 0;
    for (int64_t i = 0; i < ct_tensor_numel(t); i++) s += ct_tensor_get(t, i) * ct_tensor_get(t, i);
    return std::sqrt(s / (double)ct_tensor_numel(t));
}

/* One pass of the kernels over the tensors' data as R, launched as flash_attn.cu launches it. */
template <typename R>
static void emulate(pass p, const ct_tensor *qkv, int64_t H, ct_tensor *y, ct_tensor *lse, const ct_tensor *dy,
                    ct_tensor *dqkv) {
    const int64_t B = qkv->shape[0], T = qkv->shape[1], C = qkv->shape[2] / 3, D = C / H;
    const heads_view v = {T, H, D, C, 3 * C};
    const launch_shape s = shape_of(p, B * H, T, D, sizeof(R));
    CHECK(s.shared_bytes <= 48 * 1024 && s.tile >= 1, "launch of D=%lld: %zu bytes of shared memory, tile %d",
          (long long)D, s.shared_bytes, s.tile);
    const R scale = (R)(1.0 / std::sqrt((double)D));
    const R *q = (const R *)qkv->data, *g = dy ? (const R *)dy->data : nullptr;
    R *yd = (R *)y->data, *ld = (R *)lse->data, *dq = dqkv ? (R *)dqkv->data : nullptr;
    const dim3 grid(s.blocks_x, s.blocks_y);
    by_width(D, [&](auto width) {
        constexpr int W = decltype(width)::value;
        const size_t shm = s.shared_bytes;
        if (p == pass::forward)
            ct_emu_launch(grid, ROWS, shm, flash_fwd<R, W>, q, yd, ld, v, B * H, s.tile, scale);
        else if (p == pass::backward_dq)
            ct_emu_launch(grid, ROWS, shm, flash_bwd_dq<R, W>, q, (const R *)yd, (const R *)ld, g, dq, v, B * H,
                          s.tile, scale);
        else
            ct_emu_launch(grid, ROWS, shm, flash_bwd_dkv<R, W>, q, (const R *)yd, (const R *)ld, g, dq, v, B * H,
                          s.tile, scale);
    });
}

static void one_case(ct_dtype dt, int64_t B, int64_t T, int64_t H, int64_t D) {
    const int64_t C = H * D;
    ct_tensor qkv = tensor(dt, B, T, 3 * C), dy = tensor(dt, B, T, C);
    ct_tensor y = tensor(dt, B, T, C), lse = tensor(dt, B, H, T), dqkv = tensor(dt, B, T, 3 * C);
    ct_tensor ey = tensor(dt, B, T, C), e_lse = tensor(dt, B, H, T), edqkv = tensor(dt, B, T, 3 * C);
    const int64_t wshape[1] = {ct_causal_attention_workspace_numel(T)};
    ct_tensor ws = ct_test_alloc(dt, 1, wshape);
    for (int64_t i = 0; i < ct_tensor_numel(&qkv); i++) ct_tensor_set(&qkv, i, 2 * ct_rng_normal(&rng));
    for (int64_t i = 0; i < ct_tensor_numel(&dy); i++) ct_tensor_set(&dy, i, ct_rng_normal(&rng));
    ct_op_fill(&ey, NAN);
    ct_op_fill(&e_lse, NAN);
    ct_op_fill(&edqkv, NAN);
    ct_op_causal_attention_forward(&qkv, H, &lse, &y, &ws);
    ct_op_causal_attention_backward(&qkv, H, &y, &lse, &dy, &dqkv, &ws);

    void (*pass_of)(pass, const ct_tensor *, int64_t, ct_tensor *, ct_tensor *, const ct_tensor *, ct_tensor *) =
        dt == CT_F32 ? emulate<float> : emulate<double>;
    pass_of(pass::forward, &qkv, H, &ey, &e_lse, nullptr, nullptr);
    /* the backward from the CPU's forward */
    ct_tensor cy = tensor(dt, B, T, C), clse = tensor(dt, B, H, T);
    ct_op_copy(&cy, &y);
    ct_op_copy(&clse, &lse);
    pass_of(pass::backward_dq, &qkv, H, &cy, &clse, &dy, &edqkv);
    pass_of(pass::backward_dkv, &qkv, H, &cy, &clse, &dy, &edqkv);

    const double tol = dt == CT_F32 ? 1e-4 : 1e-11;
    const double ey_err = worst_error(&ey, &y, rms(&y)), el_err = worst_error(&e_lse, &lse, 1.0);
    const double ed_err = worst_error(&edqkv, &dqkv, rms(&dqkv));
    CHECK(ey_err < tol && el_err < tol && ed_err < tol,
          "emulated flash attention %s B=%lld T=%lld H=%lld D=%lld: y off by %.3g, lse by %.3g, d(qkv) by %.3g",
          ct_dtype_name(dt), (long long)B, (long long)T, (long long)H, (long long)D, ey_err, el_err, ed_err);
    ct_tensor *all[] = {&qkv, &dy, &y, &lse, &dqkv, &ey, &e_lse, &edqkv, &ws, &cy, &clse};
    for (ct_tensor *t : all) ct_tensor_free(t);
}

int main() {
    ct_test_begin("test_flash_attn_emulated");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    /* head dimensions in each register width, the boundaries too; contexts within one block, across
     * several, and not a multiple of the tile */
    const int64_t dims[] = {1, ct_test_between(&rng, 2, 31), 32, ct_test_between(&rng, 33, 64),
                            ct_test_between(&rng, 65, 128), ct_test_between(&rng, 129, 256), 256};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        for (ct_dtype dt : {CT_F32, CT_F64}) {
            const int64_t T = i % 3 == 0 ? ct_test_between(&rng, 1, 40) : ct_test_between(&rng, 60, 140);
            one_case(dt, ct_test_between(&rng, 1, 2), T, ct_test_between(&rng, 1, 2), dims[i]);
        }
    return ct_test_finish();
}
