/* Ops: normalisation (batch norm over channels, layer norm over the last dimension). Included by
 * core/ops/ops.h; CPU kernels in backends/cpu/norm.c.
 *
 * Statistics are accumulated in float64 whatever the dtype (a float32 sum of squares over a large
 * batch loses digits PyTorch keeps), and the per-channel / per-row mean and 1/sqrt(var + eps) that
 * backward needs are saved as float64 tensors (save_mean, save_rstd) which the layer reserves.
 * weight and bias may be NULL (affine=False, bias=False); their gradients then are too. */
#ifndef CT_OPS_NORM_H
#define CT_OPS_NORM_H

#include <stdbool.h>

#include "core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Batch norm of x viewed as [N, C, inner] (N = x->shape[0], C = numel of running_mean, inner the
 * rest: H*W for BatchNorm2d), as nn.BatchNorm*d.
 * training: normalise with the batch mean and biased variance, save them, and update
 *   running_mean = (1 - momentum) * running_mean + momentum * mean,
 *   running_var  = (1 - momentum) * running_var  + momentum * var * n / (n - 1)   (n = N * inner > 1).
 * eval: normalise with the running statistics, and save those (for backward).
 * y may not alias x. save_mean and save_rstd are float64 tensors of C elements. */
void ct_op_batchnorm_forward(const ct_tensor *x, const ct_tensor *weight, const ct_tensor *bias,
                             ct_tensor *running_mean, ct_tensor *running_var, bool training, double momentum,
                             double eps, ct_tensor *y, ct_tensor *save_mean, ct_tensor *save_rstd);

/* Gradients of ct_op_batchnorm_forward with the statistics it saved: dx (overwritten; NULL to skip)
 * through the batch statistics when training, as a fixed affine map in eval; dweight and dbias
 * (accumulated; NULL without affine). */
void ct_op_batchnorm_backward(const ct_tensor *x, const ct_tensor *dy, const ct_tensor *weight,
                              const ct_tensor *save_mean, const ct_tensor *save_rstd, bool training, ct_tensor *dx,
                              ct_tensor *dweight, ct_tensor *dbias);

/* Layer norm over the last dimension F of x (rows = numel / F), as nn.LayerNorm(F): biased variance,
 * y = (x - mean) * rstd * weight + bias. save_mean / save_rstd: float64 tensors of `rows` elements.
 * With residual (else NULL, and sum NULL), the layer normalises x + residual, which it writes to sum
 * as well: a transformer's residual add and the norm that reads the new stream, in one pass (the
 * same bits as ct_op_add into sum, then the norm of sum). sum may be x or residual. */
void ct_op_layernorm_forward(const ct_tensor *x, const ct_tensor *residual, const ct_tensor *weight,
                             const ct_tensor *bias, double eps, ct_tensor *sum, ct_tensor *y, ct_tensor *save_mean,
                             ct_tensor *save_rstd);

/* x: what was normalised (the sum, with a residual). dx overwritten (NULL to skip); with dresidual
 * (else NULL), dx = dresidual + the norm's input gradient: the gradient that reaches the sum by the
 * residual path too, added as the row is written (the same bits as ct_op_add after). dresidual may
 * be dx. dweight, dbias accumulated (NULL when absent). */
void ct_op_layernorm_backward(const ct_tensor *x, const ct_tensor *dy, const ct_tensor *weight,
                              const ct_tensor *save_mean, const ct_tensor *save_rstd, const ct_tensor *dresidual,
                              ct_tensor *dx, ct_tensor *dweight, ct_tensor *dbias);

#ifdef __cplusplus
}
#endif

#endif
