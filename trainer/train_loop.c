/* The training loop: Hugging Face's _inner_training_loop and _maybe_log_save_evaluate.
 *
 * An epoch is the training loader's global batches, grouped into optimizer steps of
 * gradient_accumulation_steps micro-batches (the last group of an epoch may be shorter and still
 * steps). max_steps, when not given, is ceil(num_train_epochs x max(batches // accumulation, 1)),
 * Hugging Face's formula, and the flow callback stops the run when global_step reaches it. Events
 * fire in Hugging Face's order; the flow callback and the application's callbacks decide when to
 * log, evaluate, save and stop.
 *
 * Weighting: each micro-batch adds the gradient of its loss SUM; at the end of the step the
 * gradients are scaled by 1 / (the step's total count), so the update is that of one batch holding
 * every micro-batch. The loss logged for a step is the step's sum / count; "loss" in the logs is the
 * mean of that over the steps since the last log, and train_loss the mean over all steps, as HF.
 *
 * nan_inf_policy: before anything is updated, the step's loss sum and gradient norm are checked
 * (trainer/step_agree.c: one verdict for every process, agreed with the step's loss totals). "error"
 * ends the run naming the step, the quantity and the rank; "stop" first saves the checkpoint of the
 * last good step; "skip" finishes the step without an update, as Hugging Face finishes a step the
 * AMP grad scaler skipped: gradients dropped, the optimizer's step count and the scheduler
 * unchanged, global_step and the data advance, a warning names the step, and the logs count the
 * skipped steps ("nan_inf_skipped").
 *
 * Dynamic loss scaling (fp16, or ct_trainer_setup.grad_scaler; optim/grad_scaler.h), as HF runs
 * torch's GradScaler: the loss gradient is multiplied by the scale (the default training_step), the
 * gradients are divided by it in the same pass as by the step's count, before clipping; gradients
 * that overflowed (a non-finite norm while the loss is finite) are the scaler's business, not
 * nan_inf_policy's: the optimizer does not step, nor does the scheduler (HF steps it only when the
 * optimizer stepped), the events fire as for any step, and the scale backs off. A non-finite loss
 * stays nan_inf_policy's; the scale backs off after it too, as torch's would on its NaN gradients.
 *
 * Why one file of over 600 lines: the loop reads top to bottom as Hugging Face's
 * _inner_training_loop does and its steps share the loop's private state; the parts that stand
 * alone are files of their own (step_agree.c, snapshot.c, device_batch.c, evaluate.c). */
#define _GNU_SOURCE /* sigaction */
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/log.h"
#include "core/ops/ops.h"
#include "trainer/async_eval.h"
#include "trainer/memory.h"
#include "trainer/trainer_impl.h"
#include "core/util.h"

/* The signal that asked the run to stop (0: none). Set by the handler, read at step boundaries. */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig) { stop_signal = sig; }

int ct_trainer_stop_signal(void) { return stop_signal; }

static ct_status fire(ct_trainer *t, ct_event e) {
    ct_callback_args a = ct_trainer_callback_args(t);
    return ct_callbacks_fire(&t->callbacks, e, &a);
}

/* Hugging Face's _determine_best_metric: *is_new_best when the metric for best model improved. */
static ct_status determine_best(ct_trainer *t, const json_t *metrics, bool *is_new_best) {
    *is_new_best = false;
    const char *name = t->args.metric_for_best_model;
    if (!name[0]) return CT_OK;
    char key[CT_ARGS_NAME_MAX + 8];
    snprintf(key, sizeof key, "%s%s", strncmp(name, "eval_", 5) == 0 ? "" : "eval_", name);
    const json_t *v = json_object_get(metrics, key);
    if (v && !json_is_number(v))
        return ct_error(CT_ERR_CONFIG, "training_args.metric_for_best_model: '%s' is %s, not one number to compare "
                        "evaluations by; name a scalar metric (for a per-class or matrix metric, one of its averages: "
                        "f1_macro, ...)", key,
                        json_is_array(v) ? "a list (per class, or a matrix)"
                        : json_is_null(v) ? "NaN (null) in this evaluation"
                                          : "not a number");
    if (!v) {
        char avail[512] = "";
        const char *k;
        const json_t *x;
        json_object_foreach((json_t *)metrics, k, x) {
            size_t len = strlen(avail);
            snprintf(avail + len, sizeof avail - len, "%s%s", len ? ", " : "", k);
        }
        return ct_error(CT_ERR_CONFIG,
                        "training_args.metric_for_best_model: '%s' is not among the evaluation metrics (%s)", key,
                        avail);
    }
    double value = json_number_value(v);
    bool greater = t->args.greater_is_better == 1;
    if (!t->state.has_best || (greater ? value > t->state.best_metric : value < t->state.best_metric)) {
        t->state.has_best = true;
        t->state.best_metric = value;
        /* HF records best_global_step only for the strategies that save on a schedule (steps, epoch);
         * the loop's own record says which save is the best one under "best". */
        if (t->args.save_strategy == CT_INTERVAL_STEPS || t->args.save_strategy == CT_INTERVAL_EPOCH)
            t->state.best_global_step = t->state.global_step;
        t->priv->progress.best_step = t->state.global_step;
        *is_new_best = true;
    }
    return CT_OK;
}

/* A metric-driven scheduler (reduce_lr_on_plateau) follows metric_for_best_model (or the loss). */
static ct_status feed_scheduler(ct_trainer *t, const json_t *metrics) {
    if (!ct_scheduler_needs_metric(t->lr_scheduler)) return CT_OK;
    const char *name = t->args.metric_for_best_model[0] ? t->args.metric_for_best_model : "loss";
    char key[CT_ARGS_NAME_MAX + 8];
    snprintf(key, sizeof key, "%s%s", strncmp(name, "eval_", 5) == 0 ? "" : "eval_", name);
    const json_t *v = json_object_get(metrics, key);
    return json_is_number(v) ? ct_scheduler_step_metric(t->lr_scheduler, json_number_value(v))
                             : ct_error(CT_ERR_CONFIG, "reduce_lr_on_plateau: no metric '%s' to follow", key);
}

/* Hugging Face's _evaluate followed by _determine_best_metric: evaluate, feed a metric-driven
 * scheduler, track the best metric. */
static ct_status evaluate_during_training(ct_trainer *t, bool *is_new_best) {
    json_t *metrics = NULL;
    CT_TRY(ct_trainer_evaluate(t, NULL, "eval", &metrics));
    ct_status s = feed_scheduler(t, metrics);
    if (s == CT_OK) s = determine_best(t, metrics, is_new_best);
    json_decref(metrics);
    return s;
}

/* eval_on_start is HF's _evaluate(skip_scheduler=True) alone: a sanity check before training that
 * neither steps a plateau scheduler nor counts towards the best metric (so early stopping still sees
 * no best at the first evaluation in training, and no checkpoint can be "the best" of step 0). */
static ct_status evaluate_on_start(ct_trainer *t) {
    json_t *metrics = NULL;
    CT_TRY(ct_trainer_evaluate(t, NULL, "eval", &metrics));
    json_decref(metrics);
    return CT_OK;
}

/* --- asynchronous evaluation (eval_async; trainer/async_eval.h) ----------------------------------- *
 * Only the world's process zero runs an evaluator; it evaluates the whole sets on one replica, so
 * no evaluation collective ever meets a training one. Results reach every process at the same step
 * boundary: one small all-reduce says how many are ready on rank 0, which then broadcasts each. */

/* A snapshot of the weights now, to the evaluator (rank 0; the others hold the same weights). */
static ct_status submit_snapshot(ct_trainer *t) {
    /* As a synchronous evaluation's on_evaluate would: the request is served. */
    t->control.should_evaluate = false;
    if (!t->priv->async_eval) return CT_OK;
    bool accepted;
    return ct_async_eval_submit(t->priv->async_eval, &accepted);
}

/* Rank 0: the message every process handles for result r (compute_metrics runs here, on the
 * training thread, with the outputs the evaluator kept). */
static json_t *result_message(ct_trainer *t, ct_async_result *r) {
    ct_status s = r->status;
    char error[1100];
    snprintf(error, sizeof error, "%s", r->error);
    for (int i = 0; s == CT_OK && i < r->n_sets; i++) {
        s = ct_trainer_call_compute_metrics(t, &r->outputs[i], r->prefixes[i], json_array_get(r->metrics, i));
        if (s != CT_OK) snprintf(error, sizeof error, "%s", ct_last_error());
    }
    if (s != CT_OK)
        return json_pack("{s:I, s:f, s:i, s:s}", "step", (json_int_t)r->step, "epoch", r->epoch, "status", (int)s,
                         "error", error);
    return json_pack("{s:I, s:f, s:O}", "step", (json_int_t)r->step, "epoch", r->epoch, "metrics", r->metrics);
}

/* A new best from an asynchronous result: the checkpoint of the snapshot's step when one was saved
 * there (its weights are the snapshot's); else, when the best must be kept (save_strategy best,
 * load_best_model_at_end), a model-only checkpoint written from the snapshot (not resumable: the
 * optimizer has moved on since). */
static ct_status keep_best(ct_trainer *t, int64_t step, const ct_async_result *r) {
    /* checkpoint-<step> may still be on its way (save_async): it must be there before we look. */
    CT_TRY(ct_trainer_async_save_drain(t));
    char dir[CT_ARGS_PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/checkpoint-%lld", t->args.output_dir, (long long)step);
    struct stat st;
    bool exists = stat(dir, &st) == 0;
    if (!exists && (t->args.save_strategy == CT_INTERVAL_BEST || t->args.load_best_model_at_end)) {
        if (r) CT_TRY(ct_async_save_model_checkpoint(t, r, dir));
        if (t->world_size > 1) {
            ct_comm_set_label(t->comm, "best-model checkpoint of step %lld written", (long long)step);
            CT_TRY(ct_comm_barrier(t->comm)); /* the others point at it after it exists */
        }
        exists = true;
    }
    if (exists) snprintf(t->state.best_model_checkpoint, sizeof t->state.best_model_checkpoint, "%s", dir);
    return CT_OK;
}

/* Handles one result as Hugging Face handles an evaluation at the snapshot's step: a log_history
 * entry and on_evaluate for each set, as a synchronous evaluation makes them; the plateau scheduler,
 * the best metric and its checkpoint from every set's metrics together. */
static ct_status handle_result(ct_trainer *t, const json_t *msg, const ct_async_result *r) {
    int64_t step = json_integer_value(json_object_get(msg, "step"));
    double epoch = json_number_value(json_object_get(msg, "epoch"));
    const json_t *err = json_object_get(msg, "error");
    if (err)
        return ct_error((ct_status)json_integer_value(json_object_get(msg, "status")),
                        "asynchronous evaluation of step %lld: %s", (long long)step, json_string_value(err));
    const json_t *sets = json_object_get(msg, "metrics");
    json_t *metrics = json_object();
    if (!metrics) return ct_error(CT_ERR_NOMEM, "out of memory");
    int64_t now_step = t->state.global_step;
    double now_epoch = t->state.epoch;
    t->state.global_step = step;
    t->state.epoch = epoch;
    ct_status s = CT_OK;
    size_t i;
    json_t *set;
    json_array_foreach(sets, i, set) {
        if (s == CT_OK) s = ct_trainer_log(t, json_deep_copy(set));
        if (s == CT_OK) {
            ct_callback_args a = ct_trainer_callback_args(t);
            a.metrics = set;
            s = ct_callbacks_fire(&t->callbacks, CT_ON_EVALUATE, &a);
        }
        if (s == CT_OK && json_object_update(metrics, set)) s = ct_error(CT_ERR_NOMEM, "out of memory");
    }
    /* step 0 is eval_on_start's snapshot: no scheduler step, no best metric (evaluate_on_start) */
    bool on_start = step == 0;
    if (s == CT_OK && !on_start) s = feed_scheduler(t, metrics);
    bool is_new_best = false;
    if (s == CT_OK && !on_start) s = determine_best(t, metrics, &is_new_best);
    if (s == CT_OK && is_new_best) s = keep_best(t, step, r);
    json_decref(metrics);
    t->state.global_step = now_step;
    t->state.epoch = now_epoch;
    if (s == CT_OK && is_new_best && t->args.save_strategy == CT_INTERVAL_BEST && t->rank == 0)
        s = ct_trainer_rotate_checkpoints(t);
    return s;
}

/* The finished results, oldest first, on every process: `agreed` of them (the step's agreement
 * counted them), or with agreed < 0 every one finished now (collective when there are several). */
static ct_status take_async_results(ct_trainer *t, int64_t agreed) {
    if (!t->args.eval_async) return CT_OK;
    int64_t n = agreed >= 0 ? agreed : t->priv->async_eval ? ct_async_eval_ready(t->priv->async_eval) : 0;
    if (agreed < 0 && t->world_size > 1) {
        ct_comm_set_label(t->comm, "asynchronous evaluation results ready");
        CT_TRY(ct_comm_all_reduce_i64(t->comm, &n, 1, CT_MAX));
    }
    for (int64_t i = 0; i < n; i++) {
        ct_async_result *r = t->priv->async_eval ? ct_async_eval_take(t->priv->async_eval) : NULL;
        json_t *msg = r ? result_message(t, r) : NULL;
        ct_status s = r && !msg ? ct_error(CT_ERR_NOMEM, "out of memory") : CT_OK;
        if (t->priv->async_eval && !r)
            s = ct_error(CT_ERR_STATE, "eval_async: %lld results were agreed on, but only %lld were ready",
                         (long long)n, (long long)i);
        if (s == CT_OK) s = ct_trainer_share_json(t, &msg);
        /* The result's on_evaluate resets should_evaluate, which may already ask for this step's
         * own evaluation: that request stays. */
        bool requested = t->control.should_evaluate;
        if (s == CT_OK) s = handle_result(t, msg, r);
        t->control.should_evaluate = requested;
        json_decref(msg);
        ct_async_eval_recycle(t->priv->async_eval, r);
        CT_TRY(s);
    }
    return CT_OK;
}

/* The end of training: what is running or waiting finishes and is handled. */
static ct_status finish_async_evaluations(ct_trainer *t) {
    if (!t->args.eval_async) return CT_OK;
    if (t->priv->async_eval) ct_async_eval_drain(t->priv->async_eval, false);
    return take_async_results(t, -1);
}

/* Python's round(x, 4): the decimal rounding of x's exact binary value, which printf also does. */
static double round4(double x) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.4f", x);
    return strtod(buf, NULL);
}

/* async_ready: the eval_async results the step's agreement counted, or -1 outside a step (agree now). */
static ct_status maybe_log_save_evaluate(ct_trainer *t, int64_t async_ready) {
    ct_train_progress *L = &t->priv->progress;
    /* the steps' statistics on the device, before anything logs, evaluates or saves them */
    if (t->control.should_log || t->control.should_evaluate || t->control.should_save) CT_TRY(ct_step_stats_read(t));
    if (t->control.should_log && t->state.global_step > L->last_logged_step) {
        int64_t steps = t->state.global_step - L->last_logged_step;
        json_t *logs = json_object();
        json_object_set_new(logs, "loss", json_real(round4(L->tr_loss / (double)steps)));
        /* a skipped step's non-finite norm has no JSON form: left out */
        if (L->has_grad_norm && isfinite(L->grad_norm)) json_object_set_new(logs, "grad_norm", json_real(L->grad_norm));
        json_object_set_new(logs, "learning_rate", json_real(L->learning_rate));
        if (L->nan_inf_skipped > 0) json_object_set_new(logs, "nan_inf_skipped", json_integer(L->nan_inf_skipped));
        L->total_loss += L->tr_loss;
        L->tr_loss = 0;
        ct_step_stats_logged(t);
        L->last_logged_step = t->state.global_step;
        CT_TRY(ct_trainer_log(t, logs));
    }
    CT_TRY(take_async_results(t, async_ready));
    if (t->control.should_evaluate && t->args.eval_async) {
        CT_TRY(submit_snapshot(t));
    } else if (t->control.should_evaluate) {
        bool is_new_best;
        CT_TRY(evaluate_during_training(t, &is_new_best));
        if (t->args.save_strategy == CT_INTERVAL_BEST) t->control.should_save = is_new_best;
    }
    /* continuous: the next evaluation starts on the newest weights as soon as the last one ended */
    ct_async_eval *ae = t->priv->async_eval;
    if (t->args.eval_strategy == CT_INTERVAL_CONTINUOUS && ae && ct_async_eval_idle(ae))
        CT_TRY(submit_snapshot(t));
    if (t->control.should_save) {
        CT_TRY(ct_trainer_save_checkpoint(t));
        /* A save that failed while on_save_error is "continue" saved nothing to announce. */
        if (t->priv->saved_step == t->state.global_step)
            CT_TRY(fire(t, CT_ON_SAVE));
        else
            t->control.should_save = false;
    }
    return CT_OK;
}

/* Before the run stops (a signal, nan_inf_policy "stop"): the checkpoint of this step, unless the
 * last save was of this very state, on disk when this returns (collective: every process is here at
 * the same step). dir receives its path; *saved is false when its save failed and on_save_error
 * "continue" let the run go on (the warning said why). */
static ct_status save_before_stopping(ct_trainer *t, char *dir, size_t cap, bool *saved) {
    CT_TRY(ct_step_stats_read(t));
    snprintf(dir, cap, "%s/checkpoint-%lld", t->args.output_dir, (long long)t->state.global_step);
    if (t->priv->saved_step != t->state.global_step || t->priv->saved_epoch_done != t->priv->progress.epoch_done)
        CT_TRY(ct_trainer_save_checkpoint(t));
    CT_TRY(ct_trainer_async_save_drain(t));
    *saved = t->priv->saved_step == t->state.global_step;
    return CT_OK;
}

/* After a signal asked to stop: save a checkpoint here, at a step boundary, and stop with
 * CT_ERR_INTERRUPTED. agreed: the signal every process agreed on already (the step's agreement), or
 * -1 to agree now. */
static ct_status honour_stop_signal(ct_trainer *t, int agreed) {
    int64_t sig = agreed >= 0 ? agreed : stop_signal;
    /* All processes stop at the same step, or the checkpoint's collectives would not pair up. */
    if (agreed < 0 && t->world_size > 1) {
        ct_comm_set_label(t->comm, "stop-signal agreement");
        CT_TRY(ct_comm_all_reduce_i64(t->comm, &sig, 1, CT_MAX));
    }
    if (!sig) return CT_OK;
    stop_signal = (sig_atomic_t)sig;
    char dir[CT_ARGS_PATH_MAX + 32];
    bool saved;
    /* The step's own save may have just written this very state. */
    CT_TRY(save_before_stopping(t, dir, sizeof dir, &saved));
    if (!saved)
        return ct_error(CT_ERR_INTERRUPTED, "stopped by signal %d at step %lld; its checkpoint %s could not be "
                        "saved (see the warning): resume with --resume_from_checkpoint latest from an earlier one",
                        (int)sig, (long long)t->state.global_step, dir);
    return ct_error(CT_ERR_INTERRUPTED, "stopped by signal %d at step %lld; the checkpoint %s holds the run: "
                    "resume with --resume_from_checkpoint latest", (int)sig, (long long)t->state.global_step, dir);
}

/* nan_inf_policy on a step whose loss or gradient norm is not finite (c, the same on every process;
 * trainer/step_agree.c). "error" and "stop" return the error that ends the run; "skip" returns CT_OK
 * and the caller finishes the step without an update, as Hugging Face finishes one the AMP grad
 * scaler skipped: on_pre_optimizer_step (fired here unless pre_fired) and on_optimizer_step fire, the
 * scheduler does not step, global_step advances. */
static ct_status nan_inf_step(ct_trainer *t, const ct_step_check *c, int64_t epoch, bool pre_fired) {
    char what[512];
    ct_nan_inf_describe(t, c, epoch, what, sizeof what);
    switch (t->args.nan_inf_policy) {
    case CT_NAN_INF_SKIP:
        t->priv->progress.nan_inf_skipped++;
        if (t->rank == 0)
            ct_log_warning("%s; its update is skipped (nan_inf_policy 'skip', %lld step%s skipped so far)", what,
                           (long long)t->priv->progress.nan_inf_skipped,
                           t->priv->progress.nan_inf_skipped == 1 ? "" : "s");
        return pre_fired ? CT_OK : fire(t, CT_ON_PRE_OPTIMIZER_STEP);
    case CT_NAN_INF_STOP: {
        /* the last good state: step global_step, which this step's work has not touched (its
         * gradients are not part of a checkpoint; they are dropped anyway) */
        ct_model_zero_grad(t->model);
        char dir[CT_ARGS_PATH_MAX + 32];
        bool saved;
        CT_TRY(save_before_stopping(t, dir, sizeof dir, &saved));
        if (!saved)
            return ct_error(CT_ERR_NUMERIC, "%s; nan_inf_policy 'stop': the checkpoint of the last good step, %s, "
                            "could not be saved (see the warning); training stopped", what, dir);
        return ct_error(CT_ERR_NUMERIC, "%s; nan_inf_policy 'stop': training stopped, the last good step (%lld) is "
                        "saved in %s: resume with --resume_from_checkpoint latest", what,
                        (long long)t->state.global_step, dir);
    }
    case CT_NAN_INF_ERROR:
        break;
    }
    return ct_error(CT_ERR_NUMERIC, "%s; nan_inf_policy 'error' ends the run ('skip' would drop the step's "
                    "update, 'stop' save the last good step first)", what);
}

/* include_num_input_tokens_seen: the input elements (tokens of token data) of global batch b->index,
 * every process's rows, known from the sampler's arithmetic without communicating. */
static int64_t input_elements(const ct_trainer *t, const ct_batch *b) {
    int64_t G = t->args.per_device_train_batch_size * t->world_size, n = ct_dataset_length(t->train_dataset);
    int64_t rows = n - b->index * G < G ? n - b->index * G : G;
    return rows * ct_shape_numel(&t->train_dataset->spec.feature_shape);
}

/* The micro-batches [first, first + n) of the epoch: forward, loss and backward of each, the
 * gradient sums of every process gathered by the distribution strategy during the last backward.
 * *loss and *flops: this process's own. */
static ct_status accumulate_gradients(ct_trainer *t, ct_loader *loader, int64_t epoch, int64_t first, int64_t n,
                                      int64_t steps_in_epoch, ct_loss_value *loss, double *flops) {
    ct_dist *dist = &t->priv->dist;
    int64_t n_train = ct_dataset_length(t->train_dataset), B = t->args.per_device_train_batch_size;
    for (int64_t i = 0; i < n; i++) {
        int64_t step = first + i;
        ct_batch *b;
        CT_TRY(ct_loader_next(loader, &b));
        if (!b) return ct_error(CT_ERR_STATE, "the training loader ended at batch %lld of %lld", (long long)step,
                                (long long)steps_in_epoch);
        if (i == 0) CT_TRY(fire(t, CT_ON_STEP_BEGIN));
        /* Randomness that touches samples (dropout) is keyed by the step and the sample's global
         * position, so it does not depend on batch size splits or the number of processes. */
        ct_model_set_step(t->model, (uint64_t)t->state.global_step,
                          epoch * n_train + b->index * B * t->world_size + (int64_t)t->rank * B);
        ct_loss_value lv = {0, 0};
        /* Only the last micro-batch communicates: its backward sends finished gradient buckets. */
        bool last = i + 1 == n;
        if (last) ct_dist_begin_step(dist);
        /* In the short last global batch some processes may have no samples: they add nothing but
         * still take part in the step's collectives. */
        const ct_batch *db = b;
        ct_status s = b->rows > 0 ? ct_trainer_prepare_inputs(t, b, &db) : CT_OK;
        if (s == CT_OK && b->rows > 0)
            s = t->priv->step_stats_on ? ct_trainer_training_step_acc(t, db, &t->priv->step_block)
                                       : ct_trainer_training_step(t, db, &lv);
        if (last) {
            ct_status f = ct_dist_finish_grads(dist, s == CT_OK);
            if (s == CT_OK) s = f;
        }
        CT_TRY(s);
        *loss = ct_loss_value_add(*loss, lv);
        if (t->args.include_num_input_tokens_seen) t->state.num_input_tokens_seen += input_elements(t, b);
        if (b->rows > 0) *flops += ct_trainer_floating_point_ops(t, b);
        t->priv->trained_rows += b->rows;
        t->priv->trained_inputs += b->rows * ct_shape_numel(&t->train_dataset->spec.feature_shape);
        if (!last) CT_TRY(fire(t, CT_ON_SUBSTEP_END));
    }
    return CT_OK;
}

/* The step's gradients scaled by 1 / (its total count) (and by 1 / the loss scale) and clipped,
 * checked by nan_inf_policy, and the optimizer's update (on_pre_optimizer_step first). *check: the
 * verdict (on a bad one nothing was updated); *overflow: with loss scaling, the gradients were not
 * finite (nothing was updated); *norm: the gradient norm, NaN when it was not computed. */
static ct_status update(ct_trainer *t, const ct_step_totals *a, int64_t epoch, double lr, ct_step_check *check,
                        bool *overflow, double *norm, bool *pre_fired) {
    ct_dist *dist = &t->priv->dist;
    bool scaling = t->priv->scaling;
    /* Unscaling goes into the 1 / count pass (a power-of-two scale divides exactly), unless the
     * product would leave float32's normal range: the kernels multiply in float32, which flushes
     * such a factor to 0, so a large scale (PyTorch multiplies by 1 / scale alone) takes its own pass. */
    double per_count = a->loss.count > 0 ? 1.0 / a->loss.count : 1.0, inv_scale = 1.0 / ct_trainer_loss_scale(t);
    double scale = per_count * inv_scale;
    if (scaling && !(scale >= FLT_MIN)) {
        ct_op_scale(&t->model->params.grads, inv_scale);
        scale = per_count;
    }
    double max_norm = t->args.max_grad_norm;
    bool norm_known;
    ct_status s = ct_dist_prepare_grads(dist, scale, max_norm, norm, &norm_known);
    /* the loss and the gradient norm are checked before anything is updated; with loss scaling the
     * gradients are the scaler's */
    *check = ct_nan_inf_verdict(a, norm_known && !scaling, *norm);
    *overflow = scaling && norm_known && !isfinite(*norm);
    if (s == CT_OK && !check->bad) {
        CT_TRY(fire(t, CT_ON_PRE_OPTIMIZER_STEP));
        *pre_fired = true;
        if (!*overflow) s = ct_dist_optimizer_step(dist, t->optimizer, lr, scale, max_norm, norm);
        /* a norm known only inside the step (ZeRO-1) fails alike on every process, nothing updated */
        if (s == CT_ERR_NUMERIC && !isfinite(*norm)) {
            if (scaling)
                *overflow = true;
            else
                *check = (ct_step_check){.bad = true, .loss = false, .rank = -1, .value = *norm};
            s = CT_OK;
        }
    }
    if (s != CT_OK)
        return ct_error_prefix(s, "optimizer step %lld (epoch %lld, loss %g): ", (long long)t->state.global_step + 1,
                               (long long)epoch, ct_loss_value_mean(a->loss));
    return CT_OK;
}

/* What the step adds to the progress after its update (or its skip): learning rate, gradient norm,
 * flops and the loss to log (the last two from the device's block when the step kept its statistics
 * there: ct_step_stats_read). */
static void record_step(ct_trainer *t, const ct_step_totals *a, double lr, double norm) {
    ct_train_progress *L = &t->priv->progress;
    bool clip = t->args.max_grad_norm > 0;
    double loss = ct_loss_value_mean(a->loss);
    L->learning_rate = lr;
    L->has_grad_norm = clip;
    t->state.total_flos += a->flos;
    if (t->priv->step_stats_on) return;
    /* (a skipped step's norm is NaN when it was not computed: the loss decided first) */
    if (clip) L->grad_norm = norm;
    if (t->args.logging_nan_inf_filter && !isfinite(loss))
        L->tr_loss += L->tr_loss / (double)(1 + t->state.global_step - L->last_logged_step);
    else
        L->tr_loss += loss;
}

/* One optimizer step over the micro-batches [first, first + n) of the epoch; *stop when a callback
 * asked to stop the epoch or the run. Every process's gradient sums (the strategy), loss, count and
 * flops: the step is that of one global batch. */
static ct_status optimizer_step(ct_trainer *t, ct_loader *loader, int64_t epoch, int64_t first, int64_t n,
                                int64_t steps_in_epoch, bool *stop) {
    ct_train_progress *L = &t->priv->progress;
    ct_loss_value own_loss = {0, 0};
    double own_flops = 0, lr = ct_scheduler_lr(t->lr_scheduler), norm = NAN;
    CT_TRY(accumulate_gradients(t, loader, epoch, first, n, steps_in_epoch, &own_loss, &own_flops));
    ct_step_totals totals;
    CT_TRY(ct_step_agree(t, own_loss, own_flops, stop_signal, &totals));
    ct_step_check check = {.bad = false};
    bool pre_fired = false, overflow = false;
    if (t->priv->step_stats_on) {
        /* the verdict stays on the device: the optimizer reads it (trainer/step_stats.c) */
        ct_step_stats_update(t);
        CT_TRY(fire(t, CT_ON_PRE_OPTIMIZER_STEP));
        CT_TRY(ct_step_stats_optimizer_step(t, lr));
    } else {
        CT_TRY(update(t, &totals, epoch, lr, &check, &overflow, &norm, &pre_fired));
    }
    if (check.bad) CT_TRY(nan_inf_step(t, &check, epoch, pre_fired)); /* returns only to skip the update */
    if (t->priv->scaling) {
        /* torch's scaler sees the NaN gradients of a NaN loss too; nan_inf_policy counted that step */
        ct_grad_scaler_update(&t->priv->scaler_opts, &L->scaler, overflow || (check.bad && !isfinite(norm)));
        if (overflow && !check.bad) {
            L->scaler_skipped++;
            ct_log_debug("optimizer step %lld: the gradients overflowed; skipped, loss scale now %g",
                         (long long)t->state.global_step + 1, L->scaler.scale);
        }
    }
    record_step(t, &totals, lr, norm);
    CT_TRY(fire(t, CT_ON_OPTIMIZER_STEP));
    /* Hugging Face steps the scheduler only when the optimizer stepped (AMP's skipped steps do not) */
    if (!check.bad && !overflow) ct_scheduler_step(t->lr_scheduler);
    ct_model_zero_grad(t->model);
    t->state.global_step++;
    t->state.epoch = (double)epoch + (double)(first + n) / (double)steps_in_epoch;
    L->epoch = epoch;
    L->next_batch = first + n;
    L->epoch_done = false;
    CT_TRY(fire(t, CT_ON_STEP_END));
    CT_TRY(maybe_log_save_evaluate(t, t->world_size > 1 ? totals.async_ready : -1));
    /* save_async: a finished save's error surfaces here; with several processes, one agreement */
    CT_TRY(ct_trainer_async_save_poll(t));
    /* with several processes, the signal the step's agreement found (one received later stops the
     * run at the next step's end) */
    CT_TRY(honour_stop_signal(t, t->world_size > 1 ? totals.signal : -1));
    *stop = t->control.should_epoch_stop || t->control.should_training_stop;
    return CT_OK;
}

/* Epoch `epoch` from global batch `first` (0, or where a resumed run stopped). */
static ct_status run_epoch(ct_trainer *t, ct_loader *loader, int64_t epoch, int64_t first, int64_t steps_in_epoch) {
    CT_TRY(ct_loader_set_position(loader, (ct_loader_position){.epoch = epoch, .batch = first}));
    CT_TRY(fire(t, CT_ON_EPOCH_BEGIN));
    int64_t ga = t->args.gradient_accumulation_steps;
    bool stop = false;
    for (; first < steps_in_epoch && !stop; first += ga) {
        int64_t n = steps_in_epoch - first < ga ? steps_in_epoch - first : ga;
        CT_TRY(optimizer_step(t, loader, epoch, first, n, steps_in_epoch, &stop));
    }
    CT_TRY(fire(t, CT_ON_EPOCH_END));
    t->priv->progress.epoch = epoch;
    t->priv->progress.next_batch = steps_in_epoch;
    t->priv->progress.epoch_done = true;
    CT_TRY(maybe_log_save_evaluate(t, -1));
    return honour_stop_signal(t, -1);
}

void ct_trainer_speed_metrics(json_t *m, const char *split, double runtime, double samples, double steps) {
    char key[64];
    snprintf(key, sizeof key, "%s_runtime", split);
    json_object_set_new(m, key, json_real(round(runtime * 1e4) / 1e4));
    if (runtime <= 0) return;
    snprintf(key, sizeof key, "%s_samples_per_second", split);
    json_object_set_new(m, key, json_real(round(samples / runtime * 1e3) / 1e3));
    snprintf(key, sizeof key, "%s_steps_per_second", split);
    json_object_set_new(m, key, json_real(round(steps / runtime * 1e3) / 1e3));
}

/* Throughput per device, beside Hugging Face's speed metrics: train_tokens_per_second (this process's
 * input elements, the tokens of token data, per second: Hugging Face's include_tokens_per_second) and,
 * where the device's peak is known (GPUs), train_mfu: the model FLOPs of the samples this process
 * trained (three forward passes' matrix products each, llm.c's and nanoGPT's count) per second over
 * that peak in the run's math mode. Both are also logged as one line. */
static void throughput_metrics(ct_trainer *t, json_t *m, double runtime) {
    const struct ct_trainer_private *p = t->priv;
    double peak = ct_device_peak_flops(t->model->opts.device, p->math);
    if (runtime <= 0 || (!t->args.include_tokens_per_second && peak <= 0)) return;
    double tokens = (double)p->trained_inputs / runtime;
    json_object_set_new(m, "train_tokens_per_second", json_real(round(tokens * 1e3) / 1e3));
    if (peak <= 0) {
        ct_log_info("training: %.0f tokens/s on this process", tokens);
        return;
    }
    double mfu = 3.0 * ct_module_forward_flops(t->model->root) * (double)p->trained_rows / runtime / peak;
    json_object_set_new(m, "train_mfu", json_real(round(mfu * 1e4) / 1e4));
    char dev[32];
    ct_log_info("training: %.0f tokens/s on %s, MFU %.1f%% of its %.1f TFLOP/s peak in %s", tokens,
                ct_device_str(t->model->opts.device, dev, sizeof dev), 100.0 * mfu, peak * 1e-12,
                ct_math_mode_name(p->math));
}

/* Training's activations are done with. A fresh layout of the same size replaces them, whose pages the
 * system provides only when written (ct_host_alloc), so the final saves (a model's file is built in
 * memory) and evaluations do not add to them, as they would not in a framework that frees its
 * activations after each backward. A layout that cannot be had is reported, not fatal: the trained
 * weights are still saved, and an evaluation then says the model has no buffers. */
static void release_activations(ct_trainer *t) {
    ct_status s = ct_model_set_max_batch(t->model, t->model->opts.max_batch);
    if (s != CT_OK)
        ct_log_warning("after training, the model's buffers could not be laid out again: %s", ct_last_error());
}

/* The run's identity (ct_train_progress.run_id): a resumed run keeps its checkpoint's, a fresh one
 * (or one resumed from a checkpoint written before runs had one) draws it; every process takes
 * process zero's, so that each rank's progress file names the same run. */
static ct_status agree_run_id(ct_trainer *t, char *id) {
    if (t->rank == 0 && !id[0]) ct_train_progress_new_run_id(id);
    if (t->world_size <= 1) return CT_OK;
    int64_t words = (CT_RUN_ID_LEN + 7) / 8;
    ct_tensor w;
    CT_TRY(ct_tensor_alloc(&w, CT_I64, CT_CPU, 1, &words));
    memset(w.data, 0, (size_t)words * 8);
    memcpy(w.data, id, strlen(id));
    ct_comm_set_label(t->comm, "the run's identity from rank 0");
    ct_status s = ct_comm_broadcast(t->comm, &w, 0);
    if (s == CT_OK) {
        memcpy(id, w.data, CT_RUN_ID_LEN);
        id[CT_RUN_ID_LEN] = '\0';
    }
    ct_tensor_free(&w);
    return s;
}

static ct_status train(ct_trainer *t, ct_loader *loader, const char *resume, ct_train_output *out) {
    const ct_training_args *a = &t->args;
    int64_t len = ct_loader_num_batches(loader), ga = a->gradient_accumulation_steps;
    if (len <= 0)
        return ct_error(CT_ERR_CONFIG, "the training dataset%s%s gives no batches (%lld samples)%s",
                        t->train_dataset->source[0] ? " " : "", t->train_dataset->source,
                        (long long)ct_dataset_length(t->train_dataset),
                        a->dataloader_drop_last ? " (dataloader_drop_last drops a batch smaller than "
                                                  "per_device_train_batch_size x processes: is it larger than the set?)"
                                                : "");
    int64_t updates_per_epoch = len / ga > 1 ? len / ga : 1, max_steps, epochs;
    if (a->max_steps > 0) {
        max_steps = a->max_steps;
        epochs = max_steps / updates_per_epoch + (max_steps % updates_per_epoch > 0);
    } else {
        double steps = ceil(a->num_train_epochs * (double)updates_per_epoch);
        if (!(steps < 9e18)) /* int64 */
            return ct_error(CT_ERR_CONFIG, "training_args.num_train_epochs: %g epochs of %lld steps are more steps "
                            "than a run can count (2^63)", a->num_train_epochs, (long long)updates_per_epoch);
        max_steps = (int64_t)steps;
        epochs = (int64_t)ceil(a->num_train_epochs);
    }
    if (max_steps <= 0) return ct_error(CT_ERR_CONFIG, "training_args.num_train_epochs: the run has no steps");
    CT_TRY(ct_trainer_create_optimizer_and_scheduler(t, max_steps));
    t->priv->progress = (ct_train_progress){.grad_norm = NAN};
    ct_train_progress *L0 = &t->priv->progress;
    t->priv->batches_per_epoch = len;
    if (resume) CT_TRY(ct_trainer_resume(t, resume));
    CT_TRY(agree_run_id(t, L0->run_id));
    /* a fresh run's loss scale, or a resumed one's that was taken without scaling (HF starts a new
     * GradScaler where a checkpoint has no scaler state) */
    if (t->priv->scaling && !L0->has_scaler) {
        if (resume) ct_log_info("%s has no loss scaler state: the loss scale starts at %g", resume,
                                t->priv->scaler_opts.init_scale);
        L0->has_scaler = true;
        L0->scaler = ct_grad_scaler_start(&t->priv->scaler_opts);
    }
    /* ignore_data_skip (HF): the interrupted epoch's data starts again from its first batch */
    if (resume && a->ignore_data_skip && !t->priv->progress.epoch_done) t->priv->progress.next_batch = 0;
    CT_TRY(ct_dist_broadcast_params(&t->priv->dist));
    ct_trainer_state_resolve(&t->state, a, max_steps, epochs);
    ct_trainer_log_run_summary(t, max_steps, epochs);
    ct_model_train(t->model, true);
    ct_model_zero_grad(t->model);
    CT_TRY(ct_step_stats_begin(t));
    t->priv->train_start_time = ct_monotonic_seconds();
    t->priv->trained_rows = t->priv->trained_inputs = 0;
    ct_train_progress *L = &t->priv->progress;
    CT_TRY(fire(t, CT_ON_TRAIN_BEGIN));
    /* A resumed run evaluated on start the first time; doing it again would add a log entry the
     * uninterrupted run does not have. */
    if (a->eval_on_start && !resume && a->eval_async) {
        CT_TRY(submit_snapshot(t));
    } else if (a->eval_on_start && !resume) {
        CT_TRY(evaluate_on_start(t));
    }
    int64_t first_epoch = L->epoch_done ? L->epoch + 1 : L->epoch, first_batch = L->epoch_done ? 0 : L->next_batch;
    /* Resumed from the run's last step: nothing is left to train (the flow callback would only stop
     * the run after one more step). */
    if (t->state.global_step >= max_steps) t->control.should_training_stop = true;
    for (int64_t epoch = first_epoch; epoch < epochs && !t->control.should_training_stop; epoch++) {
        CT_TRY(run_epoch(t, loader, epoch, epoch == first_epoch ? first_batch : 0, len));
    }
    CT_TRY(ct_step_stats_read(t));
    CT_TRY(finish_async_evaluations(t));
    if (a->load_best_model_at_end && t->state.best_model_checkpoint[0]) CT_TRY(ct_trainer_load_best_model(t));
    release_activations(t);
    L->total_loss += L->tr_loss;
    L->tr_loss = 0;
    double runtime = ct_monotonic_seconds() - t->priv->train_start_time;
    double train_loss = L->total_loss / (t->state.global_step > 0 ? (double)t->state.global_step : 0.001);
    json_t *m = json_object();
    /* Hugging Face's num_train_samples: the steps' samples under max_steps, else the set's samples
     * times num_train_epochs (what the epochs would see, counted in samples) */
    double samples = a->max_steps > 0
                         ? (double)max_steps * (double)(a->per_device_train_batch_size * ga * t->world_size)
                         : (double)ct_dataset_length(t->train_dataset) * a->num_train_epochs;
    ct_trainer_speed_metrics(m, "train", runtime, samples, (double)max_steps);
    throughput_metrics(t, m, runtime);
    json_object_set_new(m, "total_flos", json_real(t->state.total_flos));
    json_object_set_new(m, "train_loss", json_real(train_loss));
    if (L->nan_inf_skipped > 0) json_object_set_new(m, "nan_inf_skipped", json_integer(L->nan_inf_skipped));
    /* HF: the memory report joins the metrics before they are logged. */
    ct_status ms = ct_memory_tracker_stop(t->priv->memory, CT_MEM_TRAIN, CT_OK, m);
    if (ms != CT_OK) {
        json_decref(m);
        return ms;
    }
    out->global_step = t->state.global_step;
    out->training_loss = train_loss;
    out->metrics = json_deep_copy(m);
    CT_TRY(ct_trainer_log(t, m));
    if (out->metrics) json_object_set_new(out->metrics, "epoch", json_real(t->state.epoch));
    CT_TRY(ct_trainer_finish_checkpoints(t));
    return fire(t, CT_ON_TRAIN_END);
}

ct_status ct_trainer_train(ct_trainer *t, const char *resume_from_checkpoint, ct_train_output *out) {
    memset(out, 0, sizeof *out);
    if (!t->train_dataset) return ct_error(CT_ERR_STATE, "train: no training dataset was given");
    if ((t->args.eval_strategy != CT_INTERVAL_NO || t->args.eval_on_start) && t->n_eval == 0)
        return ct_error(CT_ERR_CONFIG, "training_args.eval_strategy: is '%s' but no evaluation dataset was given",
                        ct_interval_name(t->args.eval_strategy));
    /* before anything reads a checkpoint or writes into output_dir */
    CT_TRY(ct_trainer_claim_output_dir(t));
    if (t->args.save_strategy == CT_INTERVAL_BEST && t->args.eval_strategy == CT_INTERVAL_NO && t->rank == 0)
        ct_log_warning("save_strategy 'best' saves when an evaluation finds a new best metric, but eval_strategy is "
                       "'no': no checkpoint will be saved");
    ct_memory_tracker_start(t->priv->memory, CT_MEM_TRAIN);
    ct_loader *loader;
    ct_status ls = ct_trainer_get_train_dataloader(t, &loader);
    if (ls != CT_OK) return ct_memory_tracker_stop(t->priv->memory, CT_MEM_TRAIN, ls, NULL);
    bool flush = ct_set_flush_denormal(true);
    /* SIGTERM / SIGINT (pre-emption, Ctrl-C) stop the run at the next step boundary with a checkpoint. */
    struct sigaction act = {.sa_handler = on_stop_signal}, old_term, old_int;
    sigemptyset(&act.sa_mask);
    stop_signal = 0;
    sigaction(SIGTERM, &act, &old_term);
    sigaction(SIGINT, &act, &old_int);
    /* The evaluator of eval_async runs on the world's process zero (see take_async_results). */
    ct_status s = CT_OK;
    if (t->args.eval_async && t->rank == 0) s = ct_async_eval_create(t, &t->priv->async_eval);
    ct_trainer_math_begin(t, t->model->params.device);
    if (s == CT_OK) s = train(t, loader, resume_from_checkpoint, out);
    ct_step_stats_end(t);
    ct_trainer_math_end(t, t->model->params.device);
    /* Saves still being written (save_async) complete before training returns, on every path: the
     * checkpoint of a stop signal is whole on disk then. The first error stays. */
    s = ct_trainer_async_save_end_train(t, s);
    /* After an error or a stop signal a waiting snapshot is dropped and a running evaluation ends
     * unreported: nothing of it was written. */
    ct_async_eval_free(t->priv->async_eval);
    t->priv->async_eval = NULL;
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGINT, &old_int, NULL);
    ct_set_flush_denormal(flush);
    ct_loader_free(loader);
    s = ct_memory_tracker_stop(t->priv->memory, CT_MEM_TRAIN, s, NULL); /* a failed run's stage is dropped */
    if (s != CT_OK) ct_train_output_free(out);
    return s;
}

void ct_train_output_free(ct_train_output *o) {
    json_decref(o->metrics);
    o->metrics = NULL;
}
