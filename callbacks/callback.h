/* Callbacks: the events of the training loop, the vtable that listens to them, and the built-ins.
 *
 * A callback is a struct whose FIRST member is a ct_callback, with a const ct_callback_ops table
 * (size first, members only ever appended, NULL = nothing to do; `size` and `name` are required and
 * checked when the callback is added). Every event has one signature:
 * the callback gets a ct_callback_args with the trainer, arguments, state and control, plus the
 * event's payload (logs for on_log, metrics for on_evaluate / on_predict), and may raise control
 * flags. Hugging Face's TrainerCallback and CallbackHandler are the model; the event names and the
 * order they fire in are theirs.
 *
 * ct_callbacks_fire is the dispatcher: it applies the control reset rules (callbacks/state.h) before
 * calling the callbacks in the order they were added, and stops at the first error, naming the
 * callback and the event. Callbacks that carry state across a resume (early stopping's patience
 * counter) implement save_state/load_state; the Trainer keeps what they return in
 * trainer_state.json's stateful_callbacks under the callback's name. */
#ifndef CT_CALLBACK_H
#define CT_CALLBACK_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "callbacks/state.h"
#include "config/args.h"
#include "core/status.h"

typedef struct ct_trainer ct_trainer;
typedef struct ct_callback ct_callback;

typedef enum ct_event {
    CT_ON_INIT_END,
    CT_ON_TRAIN_BEGIN,
    CT_ON_TRAIN_END,
    CT_ON_EPOCH_BEGIN,
    CT_ON_EPOCH_END,
    CT_ON_STEP_BEGIN,
    CT_ON_SUBSTEP_END,
    CT_ON_PRE_OPTIMIZER_STEP,
    CT_ON_OPTIMIZER_STEP,
    CT_ON_STEP_END,
    CT_ON_EVALUATE,
    CT_ON_PREDICT,
    CT_ON_SAVE,
    CT_ON_LOG,
    CT_ON_PREDICTION_STEP,
    CT_EVENT_COUNT
} ct_event;

/* "on_step_end" */
const char *ct_event_name(ct_event e);

typedef struct ct_callback_args {
    ct_trainer *trainer; /* NULL in unit tests that drive callbacks without a Trainer */
    const ct_training_args *args;
    ct_trainer_state *state;
    ct_trainer_control *control;
    const json_t *logs;    /* on_log: the entry being logged ({"loss": ..., "step": ...}) */
    const json_t *metrics; /* on_evaluate / on_predict: {"eval_loss": ..., "eval_accuracy": ...} */
    const json_t *config;  /* the run's resolved config (its "model", ...), what a logger records with
                            * the run; NULL when the trainer was given none */
} ct_callback_args;

typedef ct_status (*ct_callback_fn)(ct_callback *cb, const ct_callback_args *a);

typedef struct ct_callback_ops {
    size_t size;      /* sizeof(ct_callback_ops) when the table was written */
    const char *name; /* required: names the callback in errors, remove_callback and saved state */
    ct_callback_fn on_init_end, on_train_begin, on_train_end, on_epoch_begin, on_epoch_end, on_step_begin,
        on_substep_end, on_pre_optimizer_step, on_optimizer_step, on_step_end, on_evaluate, on_predict, on_save,
        on_log, on_prediction_step;
    /* State kept across a resume: *out = a new JSON value (or NULL for none). */
    ct_status (*save_state)(ct_callback *cb, json_t **out);
    ct_status (*load_state)(ct_callback *cb, const json_t *state);
    /* Releases the callback. NULL: free(cb). */
    void (*destroy)(ct_callback *cb);
} ct_callback_ops;

struct ct_callback {
    const ct_callback_ops *ops;
};

const char *ct_callback_name(const ct_callback *cb);
/* Destroys cb (NULL is fine). */
void ct_callback_free(ct_callback *cb);

/* An ordered list of callbacks; it owns them. */
typedef struct ct_callback_list {
    ct_callback **items;
    int n, cap;
} ct_callback_list;

void ct_callback_list_free(ct_callback_list *l);
/* Checks cb's table (core/vtable.h): CT_ERR_INVALID_ARG naming the table and the fix when cb or its
 * ops is NULL, ops->size is 0 or too small, or the required `name` is NULL. */
ct_status ct_callback_check(const ct_callback *cb);
/* Appends cb after ct_callback_check. Ownership passes to the list, also when the list cannot grow
 * (cb is destroyed then); a callback that fails the check stays the caller's. */
ct_status ct_callback_list_add(ct_callback_list *l, ct_callback *cb);
/* Removes the first callback named `name` and returns it to the caller (NULL when none). */
ct_callback *ct_callback_list_pop(ct_callback_list *l, const char *name);
/* Removes and destroys the first callback named `name`; false when none. */
bool ct_callback_list_remove(ct_callback_list *l, const char *name);
/* The first callback named `name`, or NULL. */
ct_callback *ct_callback_list_find(const ct_callback_list *l, const char *name);

/* Fires event e: applies the control resets for e, then calls every callback in order. */
ct_status ct_callbacks_fire(const ct_callback_list *l, ct_event e, const ct_callback_args *a);

/* Puts the save_state of every callback that has one into `stateful` (trainer_state.json's
 * stateful_callbacks object) under its name, replacing what an earlier save left there; several
 * callbacks of one name are stored as a list in list order, as HF does. */
ct_status ct_callbacks_save_state(const ct_callback_list *l, json_t *stateful);
/* Gives each callback its saved entry back (the k-th entry of a list to the k-th callback of that
 * name). Names no callback in l has are ignored, as HF ignores them (it warns). path names the
 * state in errors. */
ct_status ct_callbacks_load_state(const ct_callback_list *l, const json_t *stateful, const char *path);

/* --- built-ins ------------------------------------------------------------------------------------ */

/* Their names (ct_callback_name, list find/pop/remove, stateful_callbacks keys) are Hugging Face's
 * class names, so trainer_state.json reads as HF's does. */
#define CT_FLOW_CALLBACK_NAME "DefaultFlowCallback"
#define CT_PROGRESS_CALLBACK_NAME "ProgressCallback"
#define CT_PRINTER_CALLBACK_NAME "PrinterCallback"
#define CT_JSONL_CALLBACK_NAME "JsonlCallback"
#define CT_EARLY_STOPPING_CALLBACK_NAME "EarlyStoppingCallback"

/* Hugging Face's DefaultFlowCallback: raises should_log / should_evaluate / should_save /
 * should_training_stop at the steps and epochs the strategies name (steps, epoch, eval_delay,
 * logging_first_step, the end of training). The Trainer always installs it first. */
ct_status ct_flow_callback_create(ct_callback **out);

/* A progress bar on `stream` (rate, ETA, current loss) when it is a terminal, with each log entry
 * written above it as HF's progress bar does; otherwise, with disable_tqdm, or off the world's
 * process zero, nothing (install the printer instead: the Trainer picks one of the two). */
ct_status ct_progress_callback_create(FILE *stream, ct_callback **out);

/* Prints each log entry as one line on `stream` ({'loss': 0.31, 'learning_rate': ..., 'epoch': 1.0}
 * in Hugging Face's style); installed instead of the progress bar when that is off. */
ct_status ct_printer_callback_create(FILE *stream, ct_callback **out);

/* Appends each log entry as one JSON line to `path` (created or appended to; opened at train
 * begin on the world's process zero), flushed at once. Evaluation metrics arrive through on_log
 * (the Trainer logs them), so they are written once, from there. Entries without "step" get
 * "step": global_step. */
ct_status ct_jsonl_callback_create(const char *path, ct_callback **out);

/* Hugging Face's EarlyStoppingCallback: stops training when metric_for_best_model has not improved
 * by more than `threshold` for `patience` evaluations in a row. Needs metric_for_best_model and an
 * evaluation strategy (checked at on_train_begin with a clear error); load_best_model_at_end is not
 * required (HF 4.51 only warns, and so do we). It compares with state->best_metric, so the Trainer
 * must update best_metric after on_evaluate whenever metric_for_best_model is set (HF's
 * _determine_best_metric). Its counter (and patience, threshold) is saved state. patience >= 1 and
 * threshold >= 0, else CT_ERR_INVALID_ARG. */
ct_status ct_early_stopping_callback_create(int64_t patience, double threshold, ct_callback **out);

/* A callback from its JSON spec: {"type": "early_stopping", "early_stopping_patience": 3,
 * "early_stopping_threshold": 0.0}, {"type": "jsonl", "path": "..."}, {"type": "printer"}, ...
 * path names spec in errors. */
ct_status ct_callback_from_json(const json_t *spec, const char *path, ct_callback **out);

/* An application's callback type: builds *out from spec, an object whose "type" is the registered
 * name. Errors should start with `path`; any that does not is prefixed with it. */
typedef ct_status (*ct_callback_from_json_fn)(const json_t *spec, const char *path, ct_callback **out);
/* Registers a callback type for ct_callback_from_json (and so for run configs' "callbacks"), under
 * a name that is not a built-in one (core/registry.h lists what is refused). The callback it
 * returns is checked with ct_callback_check. */
ct_status ct_register_callback_type(const char *type, ct_callback_from_json_fn fn);

#endif
