/* Trainer state and control: Hugging Face's TrainerState and TrainerControl.
 *
 * The state is what trainer_state.json holds and what callbacks read: progress (global_step, a
 * fractional epoch), the resolved intervals (logging_steps, eval_steps, save_steps: ratios of
 * max_steps already turned into step counts), the log history and the best metric so far. Its JSON
 * form uses Hugging Face's field names so their tooling reads it.
 *
 * The control is the set of flags callbacks raise to steer the loop. The callback dispatcher
 * (callbacks/callback.h) resets them with Hugging Face's rules: should_training_stop at train begin,
 * should_epoch_stop at each epoch begin, should_log / should_evaluate / should_save at each step
 * begin, and each of the last three when its event (on_log, on_evaluate, on_save) fires. */
#ifndef CT_STATE_H
#define CT_STATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

typedef struct ct_trainer_state {
    double epoch;        /* fractional: epoch + (batches done in it) / (batches per epoch) */
    int64_t global_step; /* optimizer steps done */
    int64_t max_steps;
    int64_t logging_steps, eval_steps, save_steps; /* resolved counts (ratios applied) */
    int64_t train_batch_size;                      /* per device */
    int64_t num_train_epochs;
    int64_t num_input_tokens_seen;
    double total_flos;
    json_t *log_history; /* owned array of objects */
    bool has_best;       /* best_metric is null in JSON until the first evaluation */
    double best_metric;
    int64_t best_global_step;               /* 0 = none */
    char best_model_checkpoint[1024];       /* "" = none */
    bool is_local_process_zero, is_world_process_zero;
    bool is_hyper_param_search;
    json_t *stateful_callbacks; /* owned object: callback name -> its saved state */
} ct_trainer_state;

typedef struct ct_trainer_control {
    bool should_training_stop;
    bool should_epoch_stop;
    bool should_save;
    bool should_evaluate;
    bool should_log;
} ct_trainer_control;

/* Zeroed state with empty log_history / stateful_callbacks, process-zero flags true. */
ct_status ct_trainer_state_init(ct_trainer_state *s);
void ct_trainer_state_free(ct_trainer_state *s);
/* Sets max_steps, num_train_epochs, train_batch_size and the interval counts from the arguments,
 * as Hugging Face's _inner_training_loop does: a *_steps value below 1 is a ratio of max_steps,
 * rounded up (ceil(max_steps * ratio) in double, as Python computes it); eval_steps 0 (unset) means
 * logging_steps when eval_strategy is "steps" (TrainingArguments.__post_init__), and otherwise
 * TrainerState's default 500, which is what HF's trainer_state.json shows then. */
struct ct_training_args;
void ct_trainer_state_resolve(ct_trainer_state *s, const struct ct_training_args *args, int64_t max_steps,
                              int64_t num_train_epochs);
/* Appends a copy of entry to log_history. */
ct_status ct_trainer_state_log(ct_trainer_state *s, const json_t *entry);
/* Hugging Face's trainer_state.json object (all fields above, with its names). */
ct_status ct_trainer_state_to_json(const ct_trainer_state *s, json_t **out);
/* Reads it back (the file's fields; unknown keys are ignored as HF does; absent ones take
 * TrainerState's defaults). s must be initialised (ct_trainer_state_init); its contents are replaced
 * on success and left untouched on failure. path names it in errors (CT_ERR_FORMAT). */
ct_status ct_trainer_state_from_json(ct_trainer_state *s, const json_t *obj, const char *path);
/* Writes/reads trainer_state.json at `file` (written to a temporary name, then renamed). */
ct_status ct_trainer_state_save(const ct_trainer_state *s, const char *file);
ct_status ct_trainer_state_load(ct_trainer_state *s, const char *file);

/* TrainerControl's saved form, as HF keeps it in stateful_callbacks["TrainerControl"]:
 * {"args": {"should_training_stop": ..., ...}, "attributes": {}}. load_state sets the flags the
 * state names (an unknown flag is CT_ERR_FORMAT naming path). */
ct_status ct_trainer_control_save_state(const ct_trainer_control *c, json_t **out);
ct_status ct_trainer_control_load_state(ct_trainer_control *c, const json_t *state, const char *path);

#endif
