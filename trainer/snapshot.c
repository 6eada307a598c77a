/* The Trainer's side of checkpoints: the snapshot of its live state that checkpoint/ saves from and
 * resumes into (checkpoint/snapshot.h), and the ct_trainer_* calls that pass it on. The checkpoint
 * code sits below the Trainer and never sees a ct_trainer; this file is the one place that says
 * which of the trainer's pieces a checkpoint holds. */
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_async.h"
#include "core/log.h"
#include "trainer/async_eval.h"
#include "trainer/trainer_impl.h"

void ct_trainer_checkpoint_snapshot(ct_trainer *t, ct_checkpoint_snapshot *out) {
    *out = (ct_checkpoint_snapshot){
        .rank = t->rank,
        .world_size = t->world_size,
        .comm = t->comm,
        .args = &t->args,
        .run_config = t->config,
        .model = t->model,
        .optimizer = t->optimizer,
        .zero1 = ct_trainer_uses_zero1(t),
        .scheduler = t->lr_scheduler,
        .grad_scaler = t->priv->scaling ? &t->priv->scaler_opts : NULL,
        .state = &t->state,
        .callbacks = &t->callbacks,
        .control = &t->control,
        .progress = &t->priv->progress,
        .batches_per_epoch = t->priv->batches_per_epoch,
        .saved_step = &t->priv->saved_step,
        .saved_epoch_done = &t->priv->saved_epoch_done,
        .saver = &t->priv->saver,
    };
}

ct_status ct_trainer_save_checkpoint(ct_trainer *t) {
    /* HF's save_model line: at info level, so the CLI's main process shows every save */
    if (t->rank == 0)
        ct_log_info("Saving model checkpoint to %s/checkpoint-%lld", t->args.output_dir,
                    (long long)t->state.global_step);
    ct_checkpoint_snapshot s;
    ct_trainer_checkpoint_snapshot(t, &s);
    /* eval_async: what the evaluator holds unrecorded goes into the checkpoint with its weights */
    ct_pending_evals evals;
    if (t->priv->async_eval) {
        CT_TRY(ct_async_eval_pending(t->priv->async_eval, &evals));
        s.evals = &evals;
    }
    ct_status st = ct_checkpoint_save_step(&s);
    if (s.evals) ct_pending_evals_clear(&evals);
    return st;
}

ct_status ct_trainer_finish_checkpoints(ct_trainer *t) {
    ct_checkpoint_snapshot s;
    ct_trainer_checkpoint_snapshot(t, &s);
    return ct_checkpoint_finish(&s);
}

ct_status ct_trainer_rotate_checkpoints(ct_trainer *t) {
    ct_checkpoint_snapshot s;
    ct_trainer_checkpoint_snapshot(t, &s);
    return ct_checkpoint_rotate(&s);
}

ct_status ct_trainer_resume(ct_trainer *t, const char *spec) {
    ct_checkpoint_snapshot s;
    ct_trainer_checkpoint_snapshot(t, &s);
    /* Evaluations the checkpoint holds without their results run again (the world's process zero
     * reads them: only it evaluates asynchronously, and rank 0's progress file holds them). */
    ct_pending_evals evals = {.last_step = -1};
    if (t->rank == 0) s.evals = &evals;
    ct_status st = ct_checkpoint_resume(&s, spec);
    if (st == CT_OK && t->priv->async_eval)
        st = ct_async_eval_resume(t->priv->async_eval, &evals);
    else if (st == CT_OK && evals.n)
        ct_log_warning("resume: the checkpoint holds %d asynchronous evaluation(s) without their results (the first "
                       "of step %lld); this run has no eval_async, so they are not run again",
                       evals.n, (long long)evals.items[0].step);
    ct_pending_evals_clear(&evals);
    return st;
}

ct_status ct_trainer_load_best_model(ct_trainer *t) {
    ct_checkpoint_snapshot s;
    ct_trainer_checkpoint_snapshot(t, &s);
    return ct_checkpoint_load_best(&s);
}

ct_status ct_trainer_async_save_poll(ct_trainer *t) {
    ct_checkpoint_snapshot s;
    ct_trainer_checkpoint_snapshot(t, &s);
    return ct_checkpoint_async_poll(&s);
}

ct_status ct_trainer_async_save_drain(ct_trainer *t) {
    ct_checkpoint_snapshot s;
    ct_trainer_checkpoint_snapshot(t, &s);
    return ct_checkpoint_async_drain(&s);
}

ct_status ct_trainer_async_save_end_train(ct_trainer *t, ct_status st) {
    ct_checkpoint_snapshot s;
    ct_trainer_checkpoint_snapshot(t, &s);
    return ct_checkpoint_async_end_train(&s, st);
}

void ct_trainer_async_save_free(ct_trainer *t) {
    if (!t->priv->saver) return; /* no save_async ever ran (or init failed before it could) */
    ct_checkpoint_snapshot s;
    ct_trainer_checkpoint_snapshot(t, &s);
    ct_checkpoint_async_free(&s);
}
