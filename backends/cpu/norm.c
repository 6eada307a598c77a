/* Batch norm and layer norm on the CPU (see ops_norm.h); kernels in norm_tmpl.h. These members of
 * ct_backend_cpu pick the float or double instance; core/ops/dispatch.c has checked consistency (the
 * layers have validated user input). */
#include <stddef.h>

#include "backends/cpu/cpu_impl.h"
#include "core/ops/ops.h"

#define R float
#define FN(name) name##_f32
#include "backends/cpu/norm_tmpl.h"
#undef R
#undef FN
#define R double
#define FN(name) name##_f64
#include "backends/cpu/norm_tmpl.h"
#undef R
#undef FN

/* The data pointer of an optional tensor, after checking its type and length (the dispatch has
 * checked that it sits on the op's device kind). */
static void *opt_data(const ct_tensor *t, ct_dtype dt, int64_t n) {
    if (!t) return NULL;
    CT_ASSERT(t->dtype == dt && ct_tensor_numel(t) == n);
    return t->data;
}

void ct_cpu_batchnorm_forward(const ct_tensor *x, const ct_tensor *weight, const ct_tensor *bias,
                              ct_tensor *running_mean, ct_tensor *running_var, bool training, double momentum,
                              double eps, ct_tensor *y, ct_tensor *save_mean, ct_tensor *save_rstd) {
    int64_t c = ct_tensor_numel(running_mean), total = ct_tensor_numel(x), n = x->shape[0];
    int64_t inner = total / (n * c);
    if (x->dtype == CT_F32)
        bn_fwd_f32(x->data, opt_data(weight, CT_F32, c), opt_data(bias, CT_F32, c), running_mean->data,
                   running_var->data, training, momentum, eps, y->data, save_mean->data, save_rstd->data, n, c, inner);
    else if (x->dtype == CT_F64)
        bn_fwd_f64(x->data, opt_data(weight, CT_F64, c), opt_data(bias, CT_F64, c), running_mean->data,
                   running_var->data, training, momentum, eps, y->data, save_mean->data, save_rstd->data, n, c, inner);
    else
        ct_abort_at(__FILE__, __LINE__, "batchnorm: unsupported dtype %s", ct_dtype_name(x->dtype));
}

void ct_cpu_batchnorm_backward(const ct_tensor *x, const ct_tensor *dy, const ct_tensor *weight,
                               const ct_tensor *save_mean, const ct_tensor *save_rstd, bool training, ct_tensor *dx,
                               ct_tensor *dweight, ct_tensor *dbias) {
    int64_t c = ct_tensor_numel(save_mean), total = ct_tensor_numel(x), n = x->shape[0];
    int64_t inner = total / (n * c);
    ct_dtype dt = x->dtype;
    void *w = opt_data(weight, dt, c), *dw = opt_data(dweight, dt, c), *db = opt_data(dbias, dt, c);
    void *dxp = dx ? dx->data : NULL;
    if (dt == CT_F32)
        bn_bwd_f32(x->data, dy->data, w, save_mean->data, save_rstd->data, training, dxp, dw, db, n, c, inner);
    else if (dt == CT_F64)
        bn_bwd_f64(x->data, dy->data, w, save_mean->data, save_rstd->data, training, dxp, dw, db, n, c, inner);
    else
        ct_abort_at(__FILE__, __LINE__, "batchnorm: unsupported dtype %s", ct_dtype_name(dt));
}

void ct_cpu_layernorm_forward(const ct_tensor *x, const ct_tensor *residual, const ct_tensor *weight,
                              const ct_tensor *bias, double eps, ct_tensor *sum, ct_tensor *y, ct_tensor *save_mean,
                              ct_tensor *save_rstd) {
    int64_t f = x->shape[x->ndim - 1], total = ct_tensor_numel(x);
    int64_t rows = total / f;
    ct_dtype dt = x->dtype;
    void *w = opt_data(weight, dt, f), *b = opt_data(bias, dt, f);
    const void *r = residual ? residual->data : NULL;
    void *s = sum ? sum->data : NULL;
    if (dt == CT_F32)
        ln_fwd_f32(x->data, r, w, b, eps, s, y->data, save_mean->data, save_rstd->data, rows, f);
    else if (dt == CT_F64)
        ln_fwd_f64(x->data, r, w, b, eps, s, y->data, save_mean->data, save_rstd->data, rows, f);
    else
        ct_abort_at(__FILE__, __LINE__, "layernorm: unsupported dtype %s", ct_dtype_name(dt));
}

void ct_cpu_layernorm_backward(const ct_tensor *x, const ct_tensor *dy, const ct_tensor *weight,
                               const ct_tensor *save_mean, const ct_tensor *save_rstd, const ct_tensor *dresidual,
                               ct_tensor *dx, ct_tensor *dweight, ct_tensor *dbias) {
    int64_t f = x->shape[x->ndim - 1], total = ct_tensor_numel(x);
    int64_t rows = total / f;
    ct_dtype dt = x->dtype;
    void *w = opt_data(weight, dt, f), *dw = opt_data(dweight, dt, f), *db = opt_data(dbias, dt, f);
    void *dxp = dx ? dx->data : NULL;
    const void *dr = dresidual ? dresidual->data : NULL;
    if (dt == CT_F32)
        ln_bwd_f32(x->data, dy->data, w, save_mean->data, save_rstd->data, dr, dxp, dw, db, rows, f);
    else if (dt == CT_F64)
        ln_bwd_f64(x->data, dy->data, w, save_mean->data, save_rstd->data, dr, dxp, dw, db, rows, f);
    else
        ct_abort_at(__FILE__, __LINE__, "layernorm: unsupported dtype %s", ct_dtype_name(dt));
}
