/* Dynamic loss scaling, as torch.cuda.amp.GradScaler does it (PyTorch's _amp_update_scale_).
 *
 * fp16 training multiplies the loss gradient by a scale so that small gradients survive the
 * half-precision matmuls, divides the gradients by it again before clipping and the optimizer, and
 * skips the optimizer step when a gradient overflowed (inf or NaN), halving the scale. After
 * growth_interval steps in a row without an overflow the scale doubles. The Trainer applies it
 * (trainer/train_loop.c): the scaled loss gradient, the unscaling folded into its 1 / count factor,
 * and the overflow found by the gradient norm it computes anyway, so everything on the device runs
 * through ops and the rule below works on two host numbers.
 *
 * The scale is a float32 here as in PyTorch, so each update rounds to float32 as there; a growth
 * that would make it infinite is not taken (the tracker still restarts), as PyTorch's kernel does. */
#ifndef CT_GRAD_SCALER_H
#define CT_GRAD_SCALER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

/* GradScaler's constructor arguments. */
typedef struct ct_grad_scaler_opts {
    double init_scale;      /* 2^16 */
    double growth_factor;   /* 2 */
    double backoff_factor;  /* 0.5 */
    int64_t growth_interval; /* 2000 */
} ct_grad_scaler_opts;

/* What a checkpoint keeps (GradScaler's state_dict: "scale", "_growth_tracker"). */
typedef struct ct_grad_scaler_state {
    float scale;            /* float32, as PyTorch's scale tensor (every update rounds to it) */
    int64_t growth_tracker; /* steps without an overflow since the last change, < growth_interval */
} ct_grad_scaler_state;

/* PyTorch's defaults. */
ct_grad_scaler_opts ct_grad_scaler_default_opts(void);
/* CT_ERR_INVALID_ARG naming the field: init_scale finite and > 0 (and a float32), growth_factor > 1,
 * backoff_factor in (0, 1), growth_interval >= 1 (what GradScaler asserts). */
ct_status ct_grad_scaler_opts_check(const ct_grad_scaler_opts *o);
/* The state a run starts from. */
ct_grad_scaler_state ct_grad_scaler_start(const ct_grad_scaler_opts *o);
/* One step's update: found_inf (an overflow, the step skipped) backs off and restarts the tracker;
 * otherwise the tracker counts and, at growth_interval, the scale grows. */
void ct_grad_scaler_update(const ct_grad_scaler_opts *o, ct_grad_scaler_state *s, bool found_inf);
/* A state read from a file, checked against the run's options: CT_ERR_FORMAT naming `where` and the
 * key when the scale is not finite and >= 0 or the tracker is outside [0, growth_interval). */
ct_status ct_grad_scaler_state_check(const ct_grad_scaler_opts *o, const ct_grad_scaler_state *s, const char *where);

#endif
