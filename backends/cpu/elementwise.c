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

void ct_cpu_fill(ct_tensor *t, double value) {
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

void ct_cpu_copy(ct_tensor *dst, const ct_tensor *src) {
    if (dst->data != src->data) memmove(dst->data, src->data, ct_tensor_nbytes(src));
}

void ct_cpu_add(const ct_tensor *a, const ct_tensor *b, ct_tensor *out) {
    int64_t n = ct_tensor_numel(out);
    CT_REAL_DISPATCH(out, add, a->data, b->data, out->data, n);
}

void ct_cpu_axpy(double alpha, const ct_tensor *x, ct_tensor *y) {
    int64_t n = ct_tensor_numel(y);
    CT_REAL_DISPATCH(y, axpy, alpha, x->data, y->data, n);
}

void ct_cpu_scale(ct_tensor *t, double s) {
    CT_REAL_DISPATCH(t, scale, t->data, ct_tensor_numel(t), s);
}

bool ct_cpu_all_finite(const ct_tensor *t) {
    bool ok = true;
    CT_REAL_DISPATCH(t, all_finite, t->data, ct_tensor_numel(t), &ok);
    return ok;
}

void ct_cpu_bias_add(ct_tensor *y, const ct_tensor *bias, int64_t inner) {
    int64_t c = ct_tensor_numel(bias);
    CT_REAL_DISPATCH(y, bias_add, y->data, bias->data, ct_tensor_numel(y) / (c * inner), c, inner);
}

void ct_cpu_bias_grad(const ct_tensor *dy, ct_tensor *dbias, int64_t inner) {
    int64_t c = ct_tensor_numel(dbias);
    CT_REAL_DISPATCH(dy, bias_grad, dy->data, dbias->data, ct_tensor_numel(dy) / (c * inner), c, inner);
}

void ct_cpu_activation_forward(ct_activation act, const ct_tensor *x, ct_tensor *y) {
    CT_REAL_DISPATCH(x, act_fwd, act, x->data, y->data, ct_tensor_numel(x));
}

void ct_cpu_activation_backward(ct_activation act, const ct_tensor *x, const ct_tensor *y, const ct_tensor *dy,
                                ct_tensor *dx) {
    int64_t n = ct_tensor_numel(dy);
    CT_REAL_DISPATCH(dy, act_bwd, act, x ? x->data : NULL, y ? y->data : NULL, dy->data, dx->data, n);
}
