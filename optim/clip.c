/* Global-norm gradient clipping (see clip.h). */
#include "optim/clip.h"

#include <math.h>

#include "core/ops/ops.h"

static ct_status check_grads(const ct_tensor *grads) {
    if (grads->dtype != CT_F32 && grads->dtype != CT_F64)
        return ct_error(CT_ERR_DTYPE, "clip_grad_norm: gradients are %s; f32 or f64 expected",
                        ct_dtype_name(grads->dtype));
    return CT_OK;
}

ct_status ct_clip_grad_norm_apply(ct_tensor *grads, double max_norm, double total_norm) {
    CT_TRY(check_grads(grads));
    if (!isfinite(total_norm))
        return ct_error(CT_ERR_NUMERIC, "clip_grad_norm: the gradient norm is %s; gradients left unchanged",
                        isnan(total_norm) ? "nan" : "inf");
    if (!(max_norm > 0)) return CT_OK;
    double coef = max_norm / (total_norm + 1e-6);
    if (coef < 1.0) ct_op_scale(grads, coef);
    return CT_OK;
}

ct_status ct_clip_grad_norm(ct_tensor *grads, double max_norm, double *total_norm) {
    CT_TRY(check_grads(grads));
    double norm = ct_op_l2_norm(grads);
    if (total_norm) *total_norm = norm;
    return ct_clip_grad_norm_apply(grads, max_norm, norm);
}
