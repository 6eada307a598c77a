/* Attention helpers on the CPU (see ops_attn.h): head split/merge copies and the causal softmax;
 * typed kernels in attn_tmpl.h. Members of ct_backend_cpu (backend_cpu.c); the CUDA twins are in
 * backends/cuda/attn.cu. */
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

void ct_cpu_heads_split(const ct_tensor *x, int64_t offset, ct_tensor *out) {
    CT_REAL_DISPATCH(x, heads_split, x->data, out->data, x->shape[0], x->shape[1], x->shape[2], offset, out->shape[1],
                     out->shape[3]);
}

void ct_cpu_heads_merge(const ct_tensor *x, int64_t offset, ct_tensor *out) {
    CT_REAL_DISPATCH(x, heads_merge, x->data, out->data, out->shape[0], out->shape[1], out->shape[2], offset,
                     x->shape[1], x->shape[3]);
}

/* Rows, queries and keys of scores viewed as [N, Tq, Tk]. */
static void score_dims(const ct_tensor *t, int64_t *rows, int64_t *tq, int64_t *tk) {
    *tq = t->shape[t->ndim - 2];
    *tk = t->shape[t->ndim - 1];
    *rows = ct_tensor_numel(t) / *tk;
}

void ct_cpu_causal_softmax_forward(const ct_tensor *x, ct_tensor *y) {
    int64_t rows, tq, tk;
    score_dims(x, &rows, &tq, &tk);
    CT_REAL_DISPATCH(x, causal_softmax_fwd, x->data, y->data, rows, tq, tk);
}

void ct_cpu_causal_softmax_backward(const ct_tensor *y, const ct_tensor *dy, ct_tensor *dx) {
    int64_t rows, tq, tk;
    score_dims(y, &rows, &tq, &tk);
    CT_REAL_DISPATCH(y, causal_softmax_bwd, y->data, dy->data, dx->data, rows, tq, tk);
}
