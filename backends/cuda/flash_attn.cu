/* Launches the flash-style causal attention's kernels (backends/cuda/flash_attn_kernels.cuh) on the
 * calling thread's stream: ct_op_causal_attention_forward / _backward on CUDA tensors. */
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "backends/cuda/cuda_handles.h"
#include "backends/cuda/flash_attn_kernels.cuh"
#include "backends/cuda/flash_attn_tc.cuh"
#include "backends/cuda/ops_cuda.h"

namespace {

using namespace ct_flash;

/* One pass over every (sample, head) block, the tensors' data as R; dy and dqkv are NULL in the
 * forward. */
template <typename R>
void run_pass(pass p, const ct_tensor *qkv, int64_t H, const ct_tensor *y, const ct_tensor *lse, const ct_tensor *dy,
              const ct_tensor *dqkv) {
    const int64_t B = qkv->shape[0], T = qkv->shape[1], C = qkv->shape[2] / 3, D = C / H, BH = B * H;
    if (B == 0 || T == 0) return;
    CT_ASSERT(D >= 1 && D <= CT_FUSED_ATTENTION_MAX_HEAD_DIM);
    const heads_view v = {T, H, D, C, 3 * C};
    const launch_shape s = shape_of(p, BH, T, D, sizeof(R));
    const dim3 grid(s.blocks_x, s.blocks_y);
    const R scale = (R)(1.0 / sqrt((double)D));
    const R *qkv_d = (const R *)qkv->data, *dy_d = dy ? (const R *)dy->data : nullptr;
    R *y_d = (R *)y->data, *lse_d = (R *)lse->data, *dqkv_d = dqkv ? (R *)dqkv->data : nullptr;
    cudaStream_t st = ct_cuda_stream_t();
    by_width(D, [&](auto width) {
        constexpr int W = decltype(width)::value;
        switch (p) {
        case pass::forward:
            flash_fwd<R, W><<<grid, ROWS, s.shared_bytes, st>>>(qkv_d, y_d, lse_d, v, BH, s.tile, scale);
            break;
        case pass::backward_dq:
            flash_bwd_dq<R, W><<<grid, ROWS, s.shared_bytes, st>>>(qkv_d, y_d, lse_d, dy_d, dqkv_d, v, BH, s.tile,
                                                                     scale);
            break;
        case pass::backward_dkv:
            flash_bwd_dkv<R, W><<<grid, ROWS, s.shared_bytes, st>>>(qkv_d, y_d, lse_d, dy_d, dqkv_d, v, BH, s.tile,
                                                                      scale);
            break;
        }
    });
    CT_CUDA_LAUNCHED();
}

/* Tensor cores for float32 when the math mode lets products round their inputs (bf16, fp16; bf16
 * inputs for both, whose range needs no loss scale) and the head fits the widest instance. */
bool on_tensor_cores(const ct_tensor *qkv, int64_t H) {
    const ct_math_mode m = ct_cuda_math_mode();
    return qkv->dtype == CT_F32 && (m == CT_MATH_BF16 || m == CT_MATH_FP16) &&
           qkv->shape[2] / 3 / H <= ct_flash_tc::MAX_WIDTH;
}

/* A kernel's shared memory, opted in past the default 48 KiB. */
template <typename K> size_t opt_in(K kernel, size_t shared) {
    if (shared > 48 * 1024)
        CT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared));
    return shared;
}

/* The pass on tensor cores, the instance of the head's width (32, 64 or 128). */
void run_tc(pass p, const ct_tensor *qkv, int64_t H, const ct_tensor *y, const ct_tensor *lse, const ct_tensor *dy,
            const ct_tensor *dqkv) {
    using namespace ct_flash_tc;
    const int64_t B = qkv->shape[0], T = qkv->shape[1], C = qkv->shape[2] / 3, D = C / H, BH = B * H;
    if (B == 0 || T == 0) return;
    const heads_view v = {T, H, D, C, 3 * C};
    const float scale = (float)(1.0 / sqrt((double)D));
    const float *q = (const float *)qkv->data, *dyd = dy ? (const float *)dy->data : nullptr;
    float *yd = (float *)y->data, *l = (float *)lse->data, *dq = dqkv ? (float *)dqkv->data : nullptr;
    CT_ASSERT(BH <= INT32_MAX && (T + OWN - 1) / OWN <= 65535);
    const dim3 grid((unsigned)BH, (unsigned)((T + OWN - 1) / OWN)); /* (sample, head) pairs, row blocks */
    cudaStream_t st = ct_cuda_stream_t();
    auto go = [&](auto width) {
        constexpr int DP = decltype(width)::value;
        size_t shared;
        switch (p) {
        case pass::forward:
            shared = opt_in(flash_tc_fwd<DP>, fwd_smem<DP>(nullptr).bytes);
            flash_tc_fwd<DP><<<grid, THREADS, shared, st>>>(q, yd, l, v, scale);
            break;
        case pass::backward_dq:
            shared = opt_in(flash_tc_bwd_dq<DP>, dq_smem<DP>(nullptr).bytes);
            flash_tc_bwd_dq<DP><<<grid, THREADS, shared, st>>>(q, yd, l, dyd, dq, v, scale);
            break;
        case pass::backward_dkv:
            shared = opt_in(flash_tc_bwd_dkv<DP>, dkv_smem<DP>(nullptr).bytes);
            flash_tc_bwd_dkv<DP><<<grid, THREADS, shared, st>>>(q, yd, l, dyd, dq, v, scale);
            break;
        }
        CT_CUDA_LAUNCHED();
    };
    if (D <= 32) go(std::integral_constant<int, 32>{});
    else if (D <= 64) go(std::integral_constant<int, 64>{});
    else go(std::integral_constant<int, 128>{});
}

void check_devices(const ct_tensor *qkv, std::initializer_list<const ct_tensor *> others) {
    for (const ct_tensor *t : others) {
        CT_ASSERT(t->device.kind == CT_DEVICE_CUDA && t->device.index == qkv->device.index);
        CT_ASSERT(t->dtype == qkv->dtype);
    }
}

/* The pass on float or double tensors. */
void run(pass p, const ct_tensor *qkv, int64_t H, const ct_tensor *y, const ct_tensor *lse, const ct_tensor *dy,
         const ct_tensor *dqkv) {
    if (on_tensor_cores(qkv, H))
        run_tc(p, qkv, H, y, lse, dy, dqkv);
    else if (qkv->dtype == CT_F32)
        run_pass<float>(p, qkv, H, y, lse, dy, dqkv);
    else if (qkv->dtype == CT_F64)
        run_pass<double>(p, qkv, H, y, lse, dy, dqkv);
    else
        ct_abort_at(__FILE__, __LINE__, "causal attention (cuda): unsupported dtype %s", ct_dtype_name(qkv->dtype));
}

}  // namespace

/* ws is not needed here: every row lives in its thread's registers. */
extern "C" void ct_cuda_op_causal_attention_forward(const ct_tensor *qkv, int64_t n_head, ct_tensor *lse, ct_tensor *y,
                                                    ct_tensor *ws) {
    (void)ws;
    check_devices(qkv, {qkv, lse, y});
    run(pass::forward, qkv, n_head, y, lse, nullptr, nullptr);
}

/* Two passes, so that each gradient element is one thread's sum: the query side writes dq, the key
 * side dk and dv (disjoint columns of dqkv). */
extern "C" void ct_cuda_op_causal_attention_backward(const ct_tensor *qkv, int64_t n_head, const ct_tensor *y,
                                                     const ct_tensor *lse, const ct_tensor *dy, ct_tensor *dqkv,
                                                     ct_tensor *ws) {
    (void)ws;
    check_devices(qkv, {qkv, y, lse, dy, dqkv});
    run(pass::backward_dq, qkv, n_head, y, lse, dy, dqkv);
    run(pass::backward_dkv, qkv, n_head, y, lse, dy, dqkv);
}
