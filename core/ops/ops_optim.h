/* Ops: optimizer updates and the gradient norm (CPU kernels in backends/cpu/optim.c). Included by core/ops/ops.h.
 *
 * Each update is fused: one pass over a contiguous range of the flat parameter buffer reads the
 * gradient and the optimizer's state and writes the parameter and the state, in the order of
 * operations of PyTorch 1.13's single-tensor optimizers (torch.optim.SGD, Adam, AdamW). Callers pass
 * views of the same range of the flat parameter, gradient and state buffers; the ops never allocate.
 * f32 kernels compute in float with the scalar coefficients rounded once, as PyTorch does. With
 * clear_grad set, each gradient element is set to zero once read: the step and the zero_grad that
 * follows it in one pass over the gradients (ct_optimizer_step_zero_grad). */
#ifndef CT_OPS_OPTIM_H
#define CT_OPS_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "core/device.h"
#include "core/ops/step_rule.h"
#include "core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* torch.optim.SGD for one range:
 *   d = g + weight_decay * p
 *   buf = first ? d : momentum * buf + (1 - dampening) * d     (only when momentum != 0)
 *   d = nesterov ? d + momentum * buf : buf
 *   p -= lr * d */
typedef struct ct_sgd_args {
    double lr, weight_decay, momentum, dampening;
    bool nesterov;
    bool first_step; /* the momentum buffer starts as a copy of d, as PyTorch's does */
    bool clear_grad; /* grad is zero afterwards */
    /* NULL, or a float64 in the parameters' device memory: where it is 0 the update is skipped (the
     * gradient still cleared with clear_grad), so a verdict taken on the device needs no wait */
    const double *gate;
} ct_sgd_args;

/* momentum_buffer: NULL when momentum == 0 (PyTorch keeps none either). */
void ct_op_sgd_step(ct_tensor *param, ct_tensor *grad, ct_tensor *momentum_buffer, const ct_sgd_args *a);

/* torch.optim.Adam (L2 decay: g += weight_decay * p) or AdamW (decoupled: p *= 1 - lr * weight_decay,
 * before the moments), for one range:
 *   m = beta1 * m + (1 - beta1) * g;   v = beta2 * v + (1 - beta2) * g * g
 *   vmax = max(vmax, v)                                           (amsgrad)
 *   p -= lr / (1 - beta1^step) * m / (sqrt(amsgrad ? vmax : v) / sqrt(1 - beta2^step) + eps) */
typedef struct ct_adam_args {
    double lr, weight_decay, beta1, beta2, eps;
    bool decoupled_decay; /* AdamW */
    bool amsgrad;
    int64_t step; /* 1 for the first step: the bias corrections use it */
    bool clear_grad; /* grad is zero afterwards */
    const double *gate; /* as ct_sgd_args' */
} ct_adam_args;

/* max_exp_avg_sq: NULL unless amsgrad. */
void ct_op_adam_step(ct_tensor *param, ct_tensor *grad, ct_tensor *exp_avg, ct_tensor *exp_avg_sq,
                     ct_tensor *max_exp_avg_sq, const ct_adam_args *a);

/* Sum of squares of a float tensor, accumulated in float64 in an order that depends only on the
 * element count (fixed blocks summed in sequence), so the result is bit-identical for any number of
 * threads. inf when an element is infinite, NaN when one is NaN. */
double ct_op_sum_squares_det(const ct_tensor *t);

/* The L2 norm from ct_op_sum_squares_det; when squares overflow float64 although every element is
 * finite (f64 values near 1e154 and beyond), the norm is recomputed scaled by the largest magnitude,
 * so it is finite whenever it is representable. */
double ct_op_l2_norm(const ct_tensor *t);

/* --- the step's statistics on the device (core/ops/step_rule.h) ----------------------------------- *
 * stats: the float64 block of CT_STEP_SLOTS on the tensors' device. None of these waits for the
 * device, but for ct_op_l2_norm_into of a float64 tensor on a GPU (whose squares may overflow: the
 * rescaled second pass decides on the host). */

/* Whether the backend of device d has these ops (and the losses' _acc ones). */
bool ct_op_step_stats_supported(ct_device d);
/* t *= stats[slot], as ct_op_scale(t, stats[slot]) would multiply (nothing changes where it is 1). */
void ct_op_scale_by(ct_tensor *t, const ct_tensor *stats, int slot);
/* stats[slot] = ct_op_l2_norm(t). */
void ct_op_l2_norm_into(const ct_tensor *t, ct_tensor *stats, int slot);
/* ct_step_rule_apply on the block, on its device. */
void ct_op_step_rule(ct_tensor *stats, const ct_step_rule *rule);

#ifdef __cplusplus
}
#endif

#endif
