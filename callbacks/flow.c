/* DefaultFlowCallback (transformers 4.51), rule for rule: it decides at which optimizer steps and
 * epoch ends the Trainer logs, evaluates and saves, and stops training at max_steps. The state's
 * intervals are already resolved (ratios turned into counts by ct_trainer_state_resolve).
 * eval_on_start and save_strategy "best" are the Trainer's business, not this callback's: HF's
 * callback never raises should_save for "best" (the Trainer saves when an evaluation sets a new best). */
#include <stdlib.h>

#include "callbacks/callback.h"

static ct_status flow_step_end(ct_callback *cb, const ct_callback_args *a) {
    (void)cb;
    const ct_training_args *args = a->args;
    const ct_trainer_state *s = a->state;
    ct_trainer_control *c = a->control;
    /* HF divides by the interval unguarded (TrainingArguments rejects a zero one for the "steps"
     * strategy); an interval of 0 here means "never" instead of a division by zero. */
    if (s->global_step == 1 && args->logging_first_step) c->should_log = true;
    if (args->logging_strategy == CT_INTERVAL_STEPS && s->logging_steps > 0 && s->global_step % s->logging_steps == 0)
        c->should_log = true;

    if (args->eval_strategy == CT_INTERVAL_STEPS && s->eval_steps > 0 && s->global_step % s->eval_steps == 0 &&
        args->eval_delay <= (double)s->global_step)
        c->should_evaluate = true;

    if (args->save_strategy == CT_INTERVAL_STEPS && s->save_steps > 0 && s->global_step % s->save_steps == 0)
        c->should_save = true;

    if (s->global_step >= s->max_steps) {
        c->should_training_stop = true;
        /* The end of training is always saved under the "steps" strategy. */
        if (args->save_strategy == CT_INTERVAL_STEPS) c->should_save = true;
    }
    return CT_OK;
}

static ct_status flow_epoch_end(ct_callback *cb, const ct_callback_args *a) {
    (void)cb;
    const ct_training_args *args = a->args;
    ct_trainer_control *c = a->control;
    if (args->logging_strategy == CT_INTERVAL_EPOCH) c->should_log = true;
    /* eval_delay counts (fractional) epochs here, steps above. */
    if (args->eval_strategy == CT_INTERVAL_EPOCH && args->eval_delay <= a->state->epoch) c->should_evaluate = true;
    if (args->save_strategy == CT_INTERVAL_EPOCH) c->should_save = true;
    return CT_OK;
}

static const ct_callback_ops flow_ops = {
    .size = sizeof(ct_callback_ops),
    .name = "DefaultFlowCallback",
    .on_step_end = flow_step_end,
    .on_epoch_end = flow_epoch_end,
};

ct_status ct_flow_callback_create(ct_callback **out) {
    ct_callback *cb = malloc(sizeof *cb);
    if (!cb) return ct_error(CT_ERR_NOMEM, "DefaultFlowCallback: out of memory");
    cb->ops = &flow_ops;
    *out = cb;
    return CT_OK;
}
