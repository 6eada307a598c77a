/* Elementwise ops, bias and activations on the CPU (see ops.h); kernels in elementwise_tmpl.h. */
#include <stdbool.h>
#include <string.h>

#include "backends/cpu/cpu_impl.h"
#include "core/ops/ops.h"

#define R float
#define FN(name) name##_f32
#include "backends/cpu/elementwise_tmpl.h"
#undef R
#undef FN
#define R double
#define FN(name) name##_f64
#include "backends/cpu/elementwise_tmpl.h"
#undef R
#undef FN

const char *ct_activation_name(ct_activation a) {
    switch (a) {
    case CT_ACT_NONE: return "identity";
    case CT_ACT_RELU: return "relu";
    case CT_ACT_GELU: return "gelu";
    case CT_ACT_GELU_TANH: return "gelu_tanh";
    case CT_ACT_TANH: return "tanh";
    case CT_ACT_SIGMOID: return "sigmoid";
    }
    return "?";
}

void ct_op_fill(ct_tensor *t, double value) {
    CT_ON_CUDA(t, ct_cuda_op_fill(t, value));
    int64_t n = ct_tensor_numel(t);
    if (value == 0.0 && ct_dtype_is_float(t->dtype)) {
        memset(t->data, 0, ct_tensor_nbytes(t));
        return;
    }
    if (t->dtype == CT_F32)
        fill_f32(t->data, n, (float)value);
    else if (t->dtype == CT_F64)
        fill_f64(t->data, n, value);
    else
        ct_tensor_fill(t, value);
}

void ct_op_copy(ct_tensor *dst, const ct_tensor *src) {
    CT_ON_CUDA(dst, ct_cuda_op_copy(dst, src));
    CT_CHECK_CPU(src);
    CT_ASSERT(dst->dtype == src->dtype && ct_tensor_numel(dst) == ct_tensor_numel(src));
    if (dst->data != src->data) memmove(dst->data, src->data, ct_tensor_nbytes(src));
}

void ct_op_add(const ct_tensor *a, const ct_tensor *b, ct_tensor *out) {
    CT_ON_CUDA(out, ct_cuda_op_add(a, b, out));
    int64_t n = ct_tensor_numel(out);
    CT_ASSERT(ct_tensor_numel(a) == n && ct_tensor_numel(b) == n && a->dtype == out->dtype && b->dtype == out->dtype);
    CT_REAL_DISPATCH(out, add, a->data, b->data, out->data, n);
}

void ct_op_axpy(double alpha, const ct_tensor *x, ct_tensor *y) {
    CT_ON_CUDA(y, ct_cuda_op_axpy(alpha, x, y));
    int64_t n = ct_tensor_numel(y);
    CT_ASSERT(ct_tensor_numel(x) == n && x->dtype == y->dtype);
    CT_REAL_DISPATCH(y, axpy, alpha, x->data, y->data, n);
}

void ct_op_scale(ct_tensor *t, double s) {
    CT_ON_CUDA(t, ct_cuda_op_scale(t, s));
    CT_REAL_DISPATCH(t, scale, t->data, ct_tensor_numel(t), s);
}

bool ct_op_all_finite(const ct_tensor *t) {
    CT_ON_CUDA_RETURN(t, ct_cuda_op_all_finite(t));
    bool ok = true;
    CT_REAL_DISPATCH(t, all_finite, t->data, ct_tensor_numel(t), &ok);
    return ok;
}

void ct_op_bias_add(ct_tensor *y, const ct_tensor *bias, int64_t inner) {
    CT_ON_CUDA(y, ct_cuda_op_bias_add(y, bias, inner));
    int64_t c = ct_tensor_numel(bias);
    CT_ASSERT(c > 0 && inner > 0 && ct_tensor_numel(y) % (c * inner) == 0 && y->dtype == bias->dtype);
    CT_REAL_DISPATCH(y, bias_add, y->data, bias->data, ct_tensor_numel(y) / (c * inner), c, inner);
}

void ct_op_bias_grad(const ct_tensor *dy, ct_tensor *dbias, int64_t inner) {
    CT_ON_CUDA(dy, ct_cuda_op_bias_grad(dy, dbias, inner));
    int64_t c = ct_tensor_numel(dbias);
    CT_ASSERT(c > 0 && inner > 0 && ct_tensor_numel(dy) % (c * inner) == 0 && dy->dtype == dbias->dtype);
    CT_REAL_DISPATCH(dy, bias_grad, dy->data, dbias->data, ct_tensor_numel(dy) / (c * inner), c, inner);
}

void ct_op_activation_forward(ct_activation act, const ct_tensor *x, ct_tensor *y) {
    CT_ON_CUDA(x, ct_cuda_op_activation_forward(act, x, y));
    CT_ASSERT(ct_tensor_numel(x) == ct_tensor_numel(y) && x->dtype == y->dtype);
    CT_REAL_DISPATCH(x, act_fwd, act, x->data, y->data, ct_tensor_numel(x));
}

void ct_op_activation_backward(ct_activation act, const ct_tensor *x, const ct_tensor *y, const ct_tensor *dy,
                               ct_tensor *dx) {
    CT_ON_CUDA(dy, ct_cuda_op_activation_backward(act, x, y, dy, dx));
    int64_t n = ct_tensor_numel(dy);
    CT_ASSERT(ct_tensor_numel(dx) == n && dx->dtype == dy->dtype);
    CT_REAL_DISPATCH(dy, act_bwd, act, x ? x->data : NULL, y ? y->data : NULL, dy->data, dx->data, n);
}
