/* Gradient clipping by global L2 norm, as torch.nn.utils.clip_grad_norm_ does it, on the flat
 * gradient buffer (model/params.h: ct_param_store.grads), so the norm is the norm of all gradients
 * together. Alignment padding between parameters is zero and adds nothing to the norm.
 *
 * The norm is accumulated in float64 in a fixed order (ct_op_l2_norm), so it is bit-identical for
 * any number of threads. When max_norm > 0, the gradients are multiplied by
 * coef = max_norm / (norm + 1e-6) if coef < 1 (PyTorch multiplies by min(coef, 1); skipping the
 * multiplication by 1 changes nothing).
 *
 * Non-finite gradients: when the norm is inf or NaN, *total_norm receives it, the gradients are left
 * UNCHANGED and the status is CT_ERR_NUMERIC with a message; the caller (the Trainer) decides what to
 * do: skip the step, stop, or go on. (PyTorch would scale every gradient by 0 or NaN.) This holds for
 * max_norm <= 0 too, which means "only compute the norm".
 *
 * In data-parallel training each rank holds the full gradient after the all-reduce, so the local
 * norm is the global one; with sharded gradients, all-reduce the squares and call
 * ct_clip_grad_norm_apply with the global norm. */
#ifndef CT_CLIP_H
#define CT_CLIP_H

#include "core/status.h"
#include "core/tensor.h"

/* grads: an f32 or f64 tensor (CT_ERR_DTYPE otherwise). total_norm may be NULL. */
ct_status ct_clip_grad_norm(ct_tensor *grads, double max_norm, double *total_norm);

/* The scaling step alone, for a norm computed elsewhere (e.g. summed over shards): the same rules
 * (CT_ERR_NUMERIC and no change for a non-finite norm, nothing to do for max_norm <= 0). */
ct_status ct_clip_grad_norm_apply(ct_tensor *grads, double max_norm, double total_norm);

#endif
