/* The optimizer step's statistics on the device: the slots of the block and the rule that turns a
 * step's loss totals and gradient norm into the factors and the verdict the update reads.
 *
 * A run whose model lives on a GPU keeps the step's loss sum and count, its gradient norm and the
 * nan_inf_policy verdict in a small float64 block on the device (trainer/step_stats.c), so that a
 * step does not wait for the device to hand them to the host: the host reads the block only when it
 * logs, saves, evaluates or ends. The losses add into it (ct_op_fused_classifier_acc,
 * ct_op_pointwise_loss_acc), the gradients are scaled and their norm taken through it
 * (ct_op_scale_by, ct_op_l2_norm_into), and ct_op_step_rule applies the rule below on the device.
 * The rule is this header's one function, compiled for the host (the CPU's kernel, the checked
 * device) and for the GPU (a one-thread kernel), so both decide alike.
 *
 * The rule repeats the Trainer's host-side step (trainer/train_loop.c) number for number: the
 * gradients are multiplied by 1 / count (1 when the count is 0), clipped by
 * max_norm / (norm + 1e-6) when that is below 1, and the update is skipped once a step's loss or
 * norm is not finite or a label was outside the loss's classes; that step is kept as the first bad
 * one, and every update after it is skipped too (the verdict is sticky), so the weights stay those of
 * the last good step until the host reads the block and ends the run. */
#ifndef CT_STEP_RULE_H
#define CT_STEP_RULE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define CT_STEP_RULE_FN __host__ __device__ static inline
#else
#define CT_STEP_RULE_FN static inline
#endif

/* The block's float64 slots. */
enum {
    CT_STEP_LOSS_SUM,   /* this step's loss sum over its micro-batches (reset by CT_STEP_DECIDE) */
    CT_STEP_LOSS_COUNT, /* ... and count */
    CT_STEP_BAD_LABEL,  /* 1 + the first micro-batch row whose label was outside the classes; 0: none */
    CT_STEP_GRAD_SCALE, /* 1 / count (CT_STEP_PREPARE) */
    CT_STEP_NORM,       /* the L2 norm of the scaled gradients (ct_op_l2_norm_into) */
    CT_STEP_CLIP,       /* the clipping factor, 1 when none (CT_STEP_DECIDE) */
    CT_STEP_GATE,       /* 1: the optimizer updates; 0: it skips (CT_STEP_DECIDE) */
    CT_STEP_BAD_STEP,   /* the number of the first bad step; 0: none */
    CT_STEP_BAD_KIND,   /* what was bad in it: CT_STEP_BAD_* */
    CT_STEP_BAD_VALUE,  /* the loss sum or the norm that was not finite; the label's row */
    CT_STEP_LOG_LOSS,   /* the sum of the steps' mean losses since CT_STEP_LOG_RESET */
    CT_STEP_SLOTS
};

enum { CT_STEP_BAD_LOSS = 1, CT_STEP_BAD_NORM = 2, CT_STEP_BAD_LABEL_KIND = 3 };

typedef enum ct_step_phase {
    CT_STEP_PREPARE,   /* after the micro-batches: the gradients' factor 1 / count */
    CT_STEP_DECIDE,    /* after the norm: clipping, the verdict, the loss to log; the step's sums reset */
    CT_STEP_LOG_RESET, /* after the host logged: the loss to log starts again from 0 */
    CT_STEP_RESET      /* a fresh block: every slot 0, the gate open */
} ct_step_phase;

typedef struct ct_step_rule {
    ct_step_phase phase;
    double max_norm;        /* max_grad_norm; <= 0: no clipping */
    int64_t step;           /* the number of the step being decided (global_step + 1) */
    bool nan_filter;        /* logging_nan_inf_filter: a non-finite mean adds the running average instead */
    double steps_since_log; /* 1 + the steps since the last log before this one (the filter's divisor) */
    double log_loss;        /* CT_STEP_RESET: the loss to log so far (a resumed run's) */
} ct_step_rule;

CT_STEP_RULE_FN void ct_step_rule_apply(double *s, const ct_step_rule *r) {
    switch (r->phase) {
    case CT_STEP_RESET:
        for (int i = 0; i < CT_STEP_SLOTS; i++) s[i] = 0.0;
        s[CT_STEP_GATE] = 1.0;
        s[CT_STEP_CLIP] = 1.0;
        s[CT_STEP_GRAD_SCALE] = 1.0;
        s[CT_STEP_LOG_LOSS] = r->log_loss;
        return;
    case CT_STEP_PREPARE: {
        double count = s[CT_STEP_LOSS_COUNT];
        s[CT_STEP_GRAD_SCALE] = count > 0 ? 1.0 / count : 1.0;
        return;
    }
    case CT_STEP_DECIDE: {
        double sum = s[CT_STEP_LOSS_SUM], norm = s[CT_STEP_NORM];
        int kind = s[CT_STEP_BAD_LABEL] > 0 ? CT_STEP_BAD_LABEL_KIND
                   : !isfinite(sum)         ? CT_STEP_BAD_LOSS
                   : !isfinite(norm)        ? CT_STEP_BAD_NORM
                                            : 0;
        if (kind && s[CT_STEP_BAD_STEP] == 0) {
            s[CT_STEP_BAD_STEP] = (double)r->step;
            s[CT_STEP_BAD_KIND] = kind;
            s[CT_STEP_BAD_VALUE] = kind == CT_STEP_BAD_LABEL_KIND ? s[CT_STEP_BAD_LABEL] - 1
                                   : kind == CT_STEP_BAD_LOSS     ? sum
                                                                  : norm;
        }
        s[CT_STEP_GATE] = s[CT_STEP_BAD_STEP] == 0 ? 1.0 : 0.0;
        double coef = r->max_norm > 0 && isfinite(norm) ? r->max_norm / (norm + 1e-6) : 1.0;
        s[CT_STEP_CLIP] = coef < 1.0 ? coef : 1.0;
        double mean = sum / s[CT_STEP_LOSS_COUNT];
        if (r->nan_filter && !isfinite(mean))
            s[CT_STEP_LOG_LOSS] += s[CT_STEP_LOG_LOSS] / r->steps_since_log;
        else
            s[CT_STEP_LOG_LOSS] += mean;
        s[CT_STEP_LOSS_SUM] = s[CT_STEP_LOSS_COUNT] = s[CT_STEP_BAD_LABEL] = 0.0;
        return;
    }
    case CT_STEP_LOG_RESET:
        s[CT_STEP_LOG_LOSS] = 0.0;
        return;
    }
}

#endif
