/* Ops of multi-head causal attention (CPU kernels in backends/cpu/attn.c, their CUDA twins in
 * backends/cuda/attn.cu). Not included by core/ops/ops.h: attention layers include it themselves.
 *
 * The projection [B, T, 3C] holds q | k | v, each C = H * D wide, head h in columns h*D .. h*D+D.
 * Where the backend has them (CT_BACKEND_HAS(dev, causal_attention_forward)), one op does a layer's
 * whole attention, flash-style: reading the heads where the projection left them and never keeping
 * a [T, T] matrix, only each query row's log-sum-exp, from which the backward makes the softmax
 * again. Without them (or with dropout on the attention weights) a layer computes it per (batch,
 * head) with ct_op_gemm on contiguous [T, D] blocks: the heads are first copied into head-major
 * [B, H, T, D] tensors (ct_op_heads_split) and the heads' outputs copied back into [B, T, C]
 * (ct_op_heads_merge), which is what PyTorch's view + transpose + contiguous do. Split and merge are
 * each other's backward.
 *
 * The causal softmax normalises each row of the scores over the keys a query may see and writes
 * zeros after them, so the masked scores need not be set to -inf first and their values (whatever
 * the GEMM left there) never matter. Row sums are accumulated in float64 whatever the dtype. */
#ifndef CT_OPS_ATTN_H
#define CT_OPS_ATTN_H

#include <stdint.h>

#include "core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[b, h, t, d] = x[b, t, offset + h * D + d] for x [B, T, W] and out [B, H, T, D], where
 * offset + H * D <= W. */
void ct_op_heads_split(const ct_tensor *x, int64_t offset, ct_tensor *out);

/* out[b, t, offset + h * D + d] = x[b, h, t, d] for x [B, H, T, D] and out [B, T, W]; the other
 * columns of out are left as they are (three merges at offsets 0, C, 2C fill a [B, T, 3C] gradient). */
void ct_op_heads_merge(const ct_tensor *x, int64_t offset, ct_tensor *out);

/* Causal softmax of scores x viewed as [N, Tq, Tk] (Tk >= Tq, at least 2-D; N = the leading
 * dimensions). Query i sits at position i + Tk - Tq of the keys (the last query sees every key, as
 * with a cache of earlier keys; Tq == Tk is the usual square mask) and sees keys 0 .. i + Tk - Tq:
 *   y[n, i, j] = exp(x[n, i, j] - m) / sum_{k <= i + Tk - Tq} exp(x[n, i, k] - m)   for those j,
 *   y[n, i, j] = 0                                                               for the later ones,
 * m the row's largest visible score. y may alias x. */
void ct_op_causal_softmax_forward(const ct_tensor *x, ct_tensor *y);

/* The gradient of ct_op_causal_softmax_forward given its output y:
 *   dx[n, i, j] = y[n, i, j] * (dy[n, i, j] - sum_k y[n, i, k] * dy[n, i, k])   (visible j; 0 after),
 * overwritten; dx may alias dy. */
void ct_op_causal_softmax_backward(const ct_tensor *y, const ct_tensor *dy, ct_tensor *dx);

/* Causal self-attention of qkv [B, T, 3C] with n_head heads of D = C / n_head (square mask):
 *   S[b, h] = q k^T / sqrt(D) [T, T], P = causal_softmax(S) (never stored),
 *   y[b, t, h*D + d] = (P v)[t, d], the heads merged into y [B, T, C],
 *   lse[b, h, t] = log(sum_{j <= t} exp(S[t, j])), kept for the backward.
 * The result is that of ct_op_gemm and ct_op_causal_softmax_forward on split heads, to rounding.
 * ws: scratch of the same dtype, ct_causal_attention_workspace_numel(T) elements or a multiple of
 * its per-thread share (fewer threads work with less; a backend may not need it). */
void ct_op_causal_attention_forward(const ct_tensor *qkv, int64_t n_head, ct_tensor *lse, ct_tensor *y,
                                    ct_tensor *ws);
/* The largest head dimension D every backend's fused attention takes (a GPU keeps a row of D in
 * registers); a layer with larger heads computes its attention unfused. */
#define CT_FUSED_ATTENTION_MAX_HEAD_DIM 256

/* Its backward, given the forward's qkv, y and lse and dy [B, T, C], the gradient of y: dqkv
 * [B, T, 3C] (the gradients of q, k and v) is overwritten, P made again as exp(S - lse). ws as the
 * forward's. */
void ct_op_causal_attention_backward(const ct_tensor *qkv, int64_t n_head, const ct_tensor *y,
                                     const ct_tensor *lse, const ct_tensor *dy, ct_tensor *dqkv, ct_tensor *ws);
int64_t ct_causal_attention_workspace_numel(int64_t T);

#ifdef __cplusplus
}
#endif

#endif
