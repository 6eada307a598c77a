/* The optimizer step's statistics kept on the device, so that a step on a GPU never waits for it.
 *
 * On the CPU, and whenever the run needs a number of the step on the host before the next one (a
 * hook of the application computes the loss, several processes agree on the loss, loss scaling
 * adapts its scale, nan_inf_policy 'skip' or 'stop' acts on the step itself), the loop reads the
 * step's loss totals and gradient norm back after each step (trainer/train_loop.c). Otherwise, with
 * the model on a device, the numbers stay in a float64 block there (core/ops/step_rule.h): each
 * micro-batch's loss adds its (sum, count) to it; the gradients are scaled by 1 / count and their
 * norm is taken into it; the rule decides clipping and the nan_inf_policy verdict on the device; and
 * the optimizer reads the verdict as its gate. The host reads the block only when it logs, saves,
 * evaluates or stops (a read waits for the device once), and takes from it the loss to log and the
 * last gradient norm, the same numbers the host's step gives (the checked device runs both paths
 * with the CPU's kernels: the same bits).
 *
 * nan_inf_policy 'error': the first bad step closes the gate for good, so no update after it changes
 * anything; the next read ends the run naming that step, which is then behind the step the run
 * reached, as an asynchronous GPU error is in PyTorch. Nothing is saved or evaluated from such a
 * state: a read comes first. */
#include <math.h>
#include <stdio.h>

#include "core/log.h"
#include "core/ops/ops.h"
#include "trainer/trainer_impl.h"

bool ct_step_stats_wanted(const ct_trainer *t) {
    ct_device d = t->model->params.device;
    return d.kind != CT_DEVICE_CPU && ct_op_step_stats_supported(d) && t->world_size == 1 &&
           t->priv->dist.strategy == &ct_dist_none && !CT_TRAINER_HOOK(t, training_step) &&
           !CT_TRAINER_HOOK(t, compute_loss) && ct_loss_accumulates(t->loss) &&
           ct_optimizer_honours_gate(t->optimizer) && !t->priv->scaling &&
           t->args.nan_inf_policy == CT_NAN_INF_ERROR;
}

ct_status ct_step_stats_begin(ct_trainer *t) {
    struct ct_trainer_private *p = t->priv;
    p->step_stats_on = false;
    if (!ct_step_stats_wanted(t)) return CT_OK;
    if (!p->step_block.data) {
        int64_t n = CT_STEP_SLOTS;
        CT_TRY(ct_tensor_alloc(&p->step_block, CT_F64, t->model->params.device, 1, &n));
    }
    /* a resumed run's loss to log so far carries on from the checkpoint's */
    ct_op_step_rule(&p->step_block, &(ct_step_rule){.phase = CT_STEP_RESET, .log_loss = p->progress.tr_loss});
    t->optimizer->gate = (const double *)p->step_block.data + CT_STEP_GATE;
    p->step_stats_on = true;
    p->steps_on_device = 0;
    ct_log_debug("the optimizer steps keep their statistics on %s; the host reads them when it logs, saves or "
                 "evaluates", p->step_block.device.kind == CT_DEVICE_CUDA ? "the GPU" : "the device");
    return CT_OK;
}

void ct_step_stats_end(ct_trainer *t) {
    struct ct_trainer_private *p = t->priv;
    if (t->optimizer) t->optimizer->gate = NULL;
    p->step_stats_on = false;
}

void ct_step_stats_free(ct_trainer *t) { ct_tensor_free(&t->priv->step_block); }

void ct_step_stats_update(ct_trainer *t) {
    struct ct_trainer_private *p = t->priv;
    ct_tensor *g = &t->model->params.grads, *blk = &p->step_block;
    const ct_train_progress *L = &p->progress;
    ct_op_step_rule(blk, &(ct_step_rule){.phase = CT_STEP_PREPARE});
    ct_op_scale_by(g, blk, CT_STEP_GRAD_SCALE);
    ct_op_l2_norm_into(g, blk, CT_STEP_NORM);
    ct_step_rule decide = {.phase = CT_STEP_DECIDE,
                           .max_norm = t->args.max_grad_norm,
                           .step = t->state.global_step + 1,
                           .nan_filter = t->args.logging_nan_inf_filter,
                           .steps_since_log = (double)(1 + t->state.global_step - L->last_logged_step)};
    ct_op_step_rule(blk, &decide);
    if (t->args.max_grad_norm > 0) ct_op_scale_by(g, blk, CT_STEP_CLIP);
    p->steps_on_device++;
}

ct_status ct_step_stats_optimizer_step(ct_trainer *t, double lr) {
    double norm = NAN;
    ct_status s = ct_dist_optimizer_step(&t->priv->dist, t->optimizer, lr, 1.0, t->args.max_grad_norm, &norm);
    return s == CT_OK ? s : ct_error_prefix(s, "optimizer step %lld: ", (long long)t->state.global_step + 1);
}

static const char *nonfinite_name(double x) { return isnan(x) ? "nan" : x > 0 ? "inf" : "-inf"; }

ct_status ct_step_stats_read(ct_trainer *t) {
    struct ct_trainer_private *p = t->priv;
    if (!p->step_stats_on) return CT_OK;
    double s[CT_STEP_SLOTS];
    int64_t n = CT_STEP_SLOTS;
    ct_tensor host = ct_tensor_view(s, CT_F64, CT_CPU, 1, &n);
    CT_TRY(ct_tensor_copy_to(&host, &p->step_block));
    ct_train_progress *L = &p->progress;
    L->tr_loss = s[CT_STEP_LOG_LOSS];
    if (t->args.max_grad_norm > 0 && p->steps_on_device > 0) L->grad_norm = s[CT_STEP_NORM];
    if (s[CT_STEP_BAD_STEP] == 0) return CT_OK;
    long long bad = (long long)s[CT_STEP_BAD_STEP], now = (long long)t->state.global_step;
    double v = s[CT_STEP_BAD_VALUE];
    char what[256];
    switch ((int)s[CT_STEP_BAD_KIND]) {
    case CT_STEP_BAD_LOSS: snprintf(what, sizeof what, "the loss is %s", nonfinite_name(v)); break;
    case CT_STEP_BAD_NORM:
        snprintf(what, sizeof what, "the gradient norm is %s while the loss is finite", nonfinite_name(v));
        break;
    default:
        snprintf(what, sizeof what, "the label of row %lld of a micro-batch is not one of the %s loss's classes",
                 (long long)v, ct_loss_name(t->loss));
        break;
    }
    return ct_error(CT_ERR_NUMERIC, "optimizer step %lld: %s; nan_inf_policy 'error' ends the run ('skip' would "
                    "drop the step's update, 'stop' save the last good step first). Found at step %lld, when the "
                    "steps' statistics were read from the device: the %lld step%s after it changed nothing", bad,
                    what, now, now - bad, now - bad == 1 ? "" : "s");
}

void ct_step_stats_logged(ct_trainer *t) {
    if (t->priv->step_stats_on) ct_op_step_rule(&t->priv->step_block, &(ct_step_rule){.phase = CT_STEP_LOG_RESET});
}
