/* Attention helpers on the CPU (see ops_attn.h): head split/merge copies and the causal softmax;
 * typed kernels in attn_tmpl.h. Tensors on a CUDA device go to the twins in backends/cuda/attn.cu. */
#include <math.h>

#include "backends/cpu/cpu_impl.h"
#include "core/ops/ops_attn.h"

#define R float
#define FN(name) name##_f32
#define EXP expf
#include "backends/cpu/attn_tmpl.h"
#undef R
#undef FN
#undef EXP
#define R double
#define FN(name) name##_f64
#define EXP exp
#include "backends/cpu/attn_tmpl.h"
#undef R
#undef FN
#undef EXP

/* The shared shape checks of split and merge: t3 is [B, T, W], t4 is [B, H, T, D]. */
static void check_heads(const ct_tensor *t3, const ct_tensor *t4, int64_t offset) {
    CT_ASSERT(t3->ndim == 3 && t4->ndim == 4 && t3->dtype == t4->dtype);
    CT_ASSERT(t3->shape[0] == t4->shape[0] && t3->shape[1] == t4->shape[2]);
    CT_ASSERT(offset >= 0 && offset + t4->shape[1] * t4->shape[3] <= t3->shape[2]);
}

void ct_op_heads_split(const ct_tensor *x, int64_t offset, ct_tensor *out) {
    CT_ON_CUDA(x, ct_cuda_op_heads_split(x, offset, out));
    CT_CHECK_CPU(out);
    check_heads(x, out, offset);
    CT_REAL_DISPATCH(x, heads_split, x->data, out->data, x->shape[0], x->shape[1], x->shape[2], offset, out->shape[1],
                     out->shape[3]);
}

void ct_op_heads_merge(const ct_tensor *x, int64_t offset, ct_tensor *out) {
    CT_ON_CUDA(x, ct_cuda_op_heads_merge(x, offset, out));
    CT_CHECK_CPU(out);
    check_heads(out, x, offset);
    CT_REAL_DISPATCH(x, heads_merge, x->data, out->data, out->shape[0], out->shape[1], out->shape[2], offset,
                     x->shape[1], x->shape[3]);
}

/* Rows, queries and keys of scores viewed as [N, Tq, Tk]. */
static void score_dims(const ct_tensor *t, int64_t *rows, int64_t *tq, int64_t *tk) {
    CT_ASSERT(t->ndim >= 2);
    *tq = t->shape[t->ndim - 2];
    *tk = t->shape[t->ndim - 1];
    CT_ASSERT(*tq >= 1 && *tk >= *tq);
    *rows = ct_tensor_numel(t) / *tk;
}

void ct_op_causal_softmax_forward(const ct_tensor *x, ct_tensor *y) {
    CT_ON_CUDA(x, ct_cuda_op_causal_softmax_forward(x, y));
    CT_CHECK_CPU(y);
    int64_t rows, tq, tk;
    score_dims(x, &rows, &tq, &tk);
    CT_ASSERT(y->dtype == x->dtype && ct_tensor_numel(y) == ct_tensor_numel(x));
    CT_REAL_DISPATCH(x, causal_softmax_fwd, x->data, y->data, rows, tq, tk);
}

void ct_op_causal_softmax_backward(const ct_tensor *y, const ct_tensor *dy, ct_tensor *dx) {
    CT_ON_CUDA(y, ct_cuda_op_causal_softmax_backward(y, dy, dx));
    CT_CHECK_CPU(dy);
    CT_CHECK_CPU(dx);
    int64_t rows, tq, tk;
    score_dims(y, &rows, &tq, &tk);
    CT_ASSERT(dy->dtype == y->dtype && dx->dtype == y->dtype);
    CT_ASSERT(ct_tensor_numel(dy) == ct_tensor_numel(y) && ct_tensor_numel(dx) == ct_tensor_numel(y));
    CT_REAL_DISPATCH(y, causal_softmax_bwd, y->data, dy->data, dx->data, rows, tq, tk);
}
