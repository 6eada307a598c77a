/* The Trainer: Hugging Face's Trainer for C, subclassed through a vtable.
 *
 * A ct_trainer runs the training loop of Hugging Face's Trainer (transformers 4.51): epochs of
 * global batches, gradient accumulation, clipping, optimizer and scheduler steps, and the callbacks
 * that decide when to log, evaluate, save and stop. Everything a user may want to change is a hook in
 * a const ct_trainer_ops table (size first, members only ever appended). A NULL member means the
 * default, and every default is exported (ct_trainer_default_compute_loss, ...) so an override can
 * call "super". To subclass, embed ct_trainer as the FIRST member of your struct, pass your ops table
 * to ct_trainer_init and recover your struct inside a hook with ct_container_of(t, my_trainer, base).
 * The core calls each hook through one wrapper (ct_trainer_compute_loss, ...), the one place that
 * applies defaults and prefixes errors with the hook's name.
 *
 * Exact weighting: compute_loss yields the SUM of the batch's losses and their COUNT, and gradients
 * of the sum; training_step accumulates both over the micro-batches of an optimizer step, and the
 * Trainer scales the gradients by 1 / (the step's total count) before clipping and stepping. So a
 * batch of 96 and 3 accumulated batches of 32 give the same update, up to float rounding.
 *
 * Data parallelism: with a communicator of W processes (mpirun -np W), every process runs this loop
 * on its slice of each global batch; parameters start from rank 0's, gradient sums and the step's
 * count are all-reduced, so W processes x batch B give the update of one process with batch W x B.
 * Evaluation reduces metric states (and gathers per-sample records) so its numbers do not depend on W.
 *
 * Ownership: the model, datasets, loss and communicator given to ct_trainer_init are borrowed and must
 * outlive the trainer; the optimizer, scheduler, loaders, metrics, callbacks and state belong to the
 * trainer. */
#ifndef CT_TRAINER_H
#define CT_TRAINER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "callbacks/callback.h"
#include "callbacks/state.h"
#include "config/args.h"
#include "core/status.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "dist/comm.h"
#include "eval/metric.h"
#include "model/loss.h"
#include "model/model.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"

#define CT_TRAINER_MAX_EVAL_SETS 8

/* What predict() returns: outputs and labels of the samples in dataset order, plus metrics. With
 * several processes the outputs are gathered to the world's process zero (as compute_metrics, which
 * runs there); the others get empty [0, ...] arrays and the same metrics. */
typedef struct ct_prediction_output {
    ct_tensor predictions; /* [N, ...] float32 model outputs (logits) */
    ct_tensor label_ids;   /* [N, ...] the dataset's labels (empty when it has none) */
    ct_tensor generated;   /* predict_with_generate: [N, new tokens] int64 continuations, -100 after an
                            * early end; empty otherwise */
    json_t *metrics;       /* "<prefix>_loss", ..., "<prefix>_runtime", ... */
} ct_prediction_output;
void ct_prediction_output_free(ct_prediction_output *p);
/* Writes /logits (the outputs, float32), /predictions (int64 argmax of the last dimension), when
 * there are labels /labels, and with predict_with_generate /generated to an HDF5 file (through a
 * temporary name), in dataset order. */
ct_status ct_prediction_output_save_h5(const ct_prediction_output *p, const char *file);

/* What train() returns (Hugging Face's TrainOutput). */
typedef struct ct_train_output {
    int64_t global_step;
    double training_loss;
    json_t *metrics; /* train_runtime, train_samples_per_second, train_steps_per_second, total_flos,
                      * train_loss, epoch */
} ct_train_output;
void ct_train_output_free(ct_train_output *o);

typedef struct ct_trainer ct_trainer;

typedef struct ct_trainer_ops {
    size_t size; /* sizeof(ct_trainer_ops) when the table was written: required (ct_trainer_init refuses
                  * a table whose size is 0 or too small, naming the fix, rather than ignoring its hooks) */
    /* Loaders over the training set, an evaluation set and a test set (*out belongs to the caller,
     * who frees it with ct_loader_free). */
    ct_status (*get_train_dataloader)(ct_trainer *t, ct_loader **out);
    ct_status (*get_eval_dataloader)(ct_trainer *t, ct_dataset *eval_set, ct_loader **out);
    ct_status (*get_test_dataloader)(ct_trainer *t, ct_dataset *test_set, ct_loader **out);
    /* Set t->optimizer / t->lr_scheduler when they are NULL (a user may have set them already). */
    ct_status (*create_optimizer)(ct_trainer *t);
    ct_status (*create_scheduler)(ct_trainer *t, int64_t num_training_steps);
    ct_status (*create_optimizer_and_scheduler)(ct_trainer *t, int64_t num_training_steps);
    /* Forward pass and loss of one batch: *loss = (sum over the batch's samples, their count);
     * *outputs = the model's outputs (a view of its buffer). When dloss is not NULL, also writes
     * d(loss.sum)/d(outputs) into it (shaped like outputs) for training_step to backpropagate.
     * The contract an override relies on:
     *  - dloss != NULL means training (training_step calls it); NULL means evaluation or
     *    prediction (prediction_step), where nothing may change the gradients.
     *  - The step's loss is (sum of every micro-batch's and process's sum) / (sum of their counts),
     *    and before clipping the Trainer scales the flat gradients by 1 / that count. So a penalty
     *    R(params) meant to join the step's mean is added as R x loss->count to loss->sum, and its
     *    gradient as dR x loss->count straight into the parameter gradients (t->model->params.grads:
     *    allowed here, before the model's backward, which only accumulates); the result is the
     *    same for any accumulation and number of processes.
     *  - Call "super" (ct_trainer_default_compute_loss) first rather than copying it: it skips the
     *    padding rows of evaluation batches (b->valid) and keeps what later versions add.
     *  - Memory may be on a device: touch parameters and gradients through ops (core/ops/), never
     *    with host loads (CTRAINER_CHECKED_DEVICE=1 finds one). examples/weighted_trainer.c adds an
     *    L2 penalty this way; tests/unit/test_trainer_init.c checks that it is exact under
     *    accumulation. */
    ct_status (*compute_loss)(ct_trainer *t, const ct_batch *b, ct_loss_value *loss, ct_tensor *outputs,
                              ct_tensor *dloss);
    /* One micro-batch of training: forward, loss, backward (gradients of the SUM accumulate in the
     * model's flat gradient buffer). *loss = the batch's (sum, count). */
    ct_status (*training_step)(ct_trainer *t, const ct_batch *b, ct_loss_value *loss);
    /* One batch of evaluation, in eval mode: *loss (count 0 when prediction_loss_only is false and
     * the data has no labels), *outputs (a view valid until the next forward). While neither this
     * nor compute_loss is overridden, the evaluator does the default's work itself: the model's
     * forward, and the loss as the sum of the per-row losses it needs for the standard error
     * (trainer/eval_loss.c), one pass over the outputs where the default and that took two. An
     * override's batches get per-row losses (the loss's standard error) only while the rows add up to
     * the loss it returns. */
    ct_status (*prediction_step)(ct_trainer *t, const ct_batch *b, bool prediction_loss_only, ct_loss_value *loss,
                                 ct_tensor *outputs);
    /* Evaluates on eval_set (NULL: every configured evaluation set, each prefixed
     * "<prefix>_<name>" when they are named) and returns the metrics (*metrics is the caller's). Logs
     * them and fires on_evaluate. */
    ct_status (*evaluate)(ct_trainer *t, ct_dataset *eval_set, const char *metric_key_prefix, json_t **metrics);
    /* Predicts on test_set: outputs and labels in dataset order, and metrics with the prefix. */
    ct_status (*predict)(ct_trainer *t, ct_dataset *test_set, const char *metric_key_prefix,
                         ct_prediction_output *out);
    /* Adds "epoch" (and "step") to logs, appends them to log_history and fires on_log. Takes logs. */
    ct_status (*log)(ct_trainer *t, json_t *logs);
    /* Floating-point operations of one training batch (forward + backward); feeds total_flos.
     * Default: Hugging Face's estimate, 6 x the parameters but the embeddings' x the input's elements
     * (tokens for a language model). */
    double (*floating_point_ops)(ct_trainer *t, const ct_batch *b);
    /* Hugging Face's compute_metrics: called on the main process after each evaluation and
     * prediction pass with every output and label of the set in dataset order (p->metrics is NULL
     * then); adds its own values to `metrics` under "<prefix>_<name>". Setting it makes the
     * evaluation loop keep the outputs (memory: samples x outputs). NULL: none (no default). */
    ct_status (*compute_metrics)(ct_trainer *t, const ct_prediction_output *p, const char *prefix, json_t *metrics);
} ct_trainer_ops;

/* What a trainer is built from. Datasets may be NULL where not needed (no eval set without an
 * evaluation strategy). */
typedef struct ct_trainer_setup {
    ct_model *model;          /* required; ct_trainer_init grows its activation buffers to the larger of
                               * the train and eval batch sizes when it was built for less */
    ct_loss *loss;            /* NULL: cross-entropy (owned by the trainer then) */
    ct_dataset *train_dataset;
    int n_eval;               /* evaluation sets; names "" for a single unnamed one */
    ct_dataset *eval_datasets[CT_TRAINER_MAX_EVAL_SETS];
    const char *eval_names[CT_TRAINER_MAX_EVAL_SETS];
    const json_t *metrics;    /* a run config's "metrics" list (NULL: loss only) */
    json_t *config;           /* the resolved run config, saved with models (borrowed; may be NULL) */
    ct_callback_list *callbacks; /* moved into the trainer (the list is left empty), after the
                                  * built-ins and before on_init_end; may be NULL */
    ct_comm *comm;               /* the processes of a data-parallel run (borrowed); NULL: the trainer
                                  * creates ct_comm_create_default (MPI under mpirun, else single) */
    /* Builds another model of the same architecture on `device` for batches up to max_batch (its
     * weights are overwritten from snapshots): what eval_async evaluates on. NULL: eval_async is
     * refused. ct_run_setup fills it from the run config's "model". */
    ct_status (*make_model)(void *ctx, int64_t max_batch, ct_device device, ct_model *out);
    void *make_model_ctx;
    /* The application's metric objects (its own ct_metric_ops, or built-ins made in C): appends new
     * ones to `set` with ct_metric_set_add, after the "metrics" list's. Called for the trainer's own
     * set at ct_trainer_init and again for each evaluator that needs its own copies (eval_async's,
     * whose metrics are updated on the evaluator thread), so every call must make new objects and
     * never hand out one it kept. A call that adds nothing, or fails, fails ct_trainer_init
     * ("make_metrics: ..."). NULL: JSON only. */
    ct_status (*make_metrics)(void *ctx, ct_metric_set *set);
    void *make_metrics_ctx;
    /* Dynamic loss scaling (optim/grad_scaler.h) with these settings, on any device. NULL: only with
     * fp16, where it is on with PyTorch's defaults. */
    const ct_grad_scaler_opts *grad_scaler;
    /* The set ct_trainer_predict will be given (borrowed; may be NULL): ct_trainer_init checks it as
     * it checks the others (its samples, every label), so that a bad one surfaces before training,
     * not after. A set evaluate or predict is given that init did not see is checked there. */
    ct_dataset *test_dataset;
} ct_trainer_setup;

/* The trainer. Its members are what a subclass (an application's hooks) reads; the rule for this
 * struct, which applications embed as the first member of their own: members are only ever
 * appended, and everything the trainer keeps for itself lives behind `priv` (trainer/trainer_impl.h),
 * which stays the last member. So an application compiled against an older header still finds every
 * member where it was. */
struct ct_trainer_private;
struct ct_trainer {
    const ct_trainer_ops *ops;
    ct_training_args args;
    ct_model *model;
    ct_loss *loss;
    ct_dataset *train_dataset;
    int n_eval;
    ct_dataset *eval_datasets[CT_TRAINER_MAX_EVAL_SETS];
    char eval_names[CT_TRAINER_MAX_EVAL_SETS][64];
    ct_metric_set metrics;
    json_t *config;
    ct_optimizer *optimizer;
    ct_scheduler *lr_scheduler;
    ct_trainer_state state;
    ct_trainer_control control;
    ct_callback_list callbacks;
    ct_comm *comm; /* rank and world size come from it */
    int rank, world_size;
    /* The trainer's own state (trainer/trainer_impl.h); allocated by ct_trainer_init, freed by
     * ct_trainer_free. Stays the last member. */
    struct ct_trainer_private *priv;
};

/* Builds a trainer: copies and validates args (start from ct_training_args_default: a zeroed struct is
 * refused, saying so), installs the flow callback, then the progress bar (on a terminal, unless
 * disable_tqdm) or the printer, and the JSON-lines logger when report_to asks for it. ops NULL: every
 * default. Checks, before any step: every table (core/vtable.h: the hooks', the datasets', the
 * loss's, the layers'), each dataset's samples against the model's input shape and dtype, a
 * classifier's outputs against the data's num_classes, and (with the default compute_loss) the
 * loss on the first sample's label; a loss without backward is refused when there is a training
 * set. Fires on_init_end. On failure nothing is left to free, and ct_trainer_free(t) is still safe
 * (also twice, and on a zeroed ct_trainer). */
ct_status ct_trainer_init(ct_trainer *t, const ct_trainer_ops *ops, const ct_training_args *args,
                          const ct_trainer_setup *setup);
void ct_trainer_free(ct_trainer *t);

/* The training loop. resume_from_checkpoint: NULL, "latest" (the newest valid checkpoint in
 * output_dir) or a checkpoint directory; the resumed run continues exactly where the checkpoint was
 * taken (same batches, same numbers as the uninterrupted run). While it runs, SIGTERM and SIGINT
 * stop it at the next optimizer-step boundary: it saves a checkpoint there and returns
 * CT_ERR_INTERRUPTED (ct_trainer_stop_signal() then says which signal). With several processes the
 * signal is agreed in the step's one agreement, after its micro-batches: one that arrives later
 * stops the run at the end of the following step, on every process alike. */
ct_status ct_trainer_train(ct_trainer *t, const char *resume_from_checkpoint, ct_train_output *out);
/* The signal that stopped the last ct_trainer_train (0: none). */
int ct_trainer_stop_signal(void);

/* The wrappers the core calls (NULL hook -> default; errors prefixed with the hook's name). */
ct_status ct_trainer_get_train_dataloader(ct_trainer *t, ct_loader **out);
ct_status ct_trainer_get_eval_dataloader(ct_trainer *t, ct_dataset *eval_set, ct_loader **out);
ct_status ct_trainer_get_test_dataloader(ct_trainer *t, ct_dataset *test_set, ct_loader **out);
ct_status ct_trainer_create_optimizer(ct_trainer *t);
ct_status ct_trainer_create_scheduler(ct_trainer *t, int64_t num_training_steps);
ct_status ct_trainer_create_optimizer_and_scheduler(ct_trainer *t, int64_t num_training_steps);
ct_status ct_trainer_compute_loss(ct_trainer *t, const ct_batch *b, ct_loss_value *loss, ct_tensor *outputs,
                                  ct_tensor *dloss);
ct_status ct_trainer_training_step(ct_trainer *t, const ct_batch *b, ct_loss_value *loss);
ct_status ct_trainer_prediction_step(ct_trainer *t, const ct_batch *b, bool prediction_loss_only,
                                     ct_loss_value *loss, ct_tensor *outputs);
ct_status ct_trainer_evaluate(ct_trainer *t, ct_dataset *eval_set, const char *metric_key_prefix, json_t **metrics);
ct_status ct_trainer_predict(ct_trainer *t, ct_dataset *test_set, const char *metric_key_prefix,
                             ct_prediction_output *out);
ct_status ct_trainer_log(ct_trainer *t, json_t *logs);
double ct_trainer_floating_point_ops(ct_trainer *t, const ct_batch *b);
/* The factor the loss gradient is multiplied by before backward: the grad scaler's scale (fp16 or
 * setup.grad_scaler), 1 without one. The default training_step applies it; an override that runs
 * its own backward multiplies its loss gradient by it, as HF's calls accelerator.backward. */
double ct_trainer_loss_scale(const ct_trainer *t);

/* The defaults, for overrides that call "super". */
ct_status ct_trainer_default_get_train_dataloader(ct_trainer *t, ct_loader **out);
ct_status ct_trainer_default_get_eval_dataloader(ct_trainer *t, ct_dataset *eval_set, ct_loader **out);
ct_status ct_trainer_default_get_test_dataloader(ct_trainer *t, ct_dataset *test_set, ct_loader **out);
ct_status ct_trainer_default_create_optimizer(ct_trainer *t);
ct_status ct_trainer_default_create_scheduler(ct_trainer *t, int64_t num_training_steps);
ct_status ct_trainer_default_create_optimizer_and_scheduler(ct_trainer *t, int64_t num_training_steps);
ct_status ct_trainer_default_compute_loss(ct_trainer *t, const ct_batch *b, ct_loss_value *loss, ct_tensor *outputs,
                                          ct_tensor *dloss);
ct_status ct_trainer_default_training_step(ct_trainer *t, const ct_batch *b, ct_loss_value *loss);
ct_status ct_trainer_default_prediction_step(ct_trainer *t, const ct_batch *b, bool prediction_loss_only,
                                             ct_loss_value *loss, ct_tensor *outputs);
ct_status ct_trainer_default_evaluate(ct_trainer *t, ct_dataset *eval_set, const char *metric_key_prefix,
                                      json_t **metrics);
ct_status ct_trainer_default_predict(ct_trainer *t, ct_dataset *test_set, const char *metric_key_prefix,
                                     ct_prediction_output *out);
ct_status ct_trainer_default_log(ct_trainer *t, json_t *logs);
double ct_trainer_default_floating_point_ops(ct_trainer *t, const ct_batch *b);

/* Outputs, as Hugging Face writes them. Every write into output_dir happens under its lock. */
/* Collective with several processes: the world's process zero locks output_dir for the trainer's
 * lifetime (core/dir_lock.h) and cleans what a dead run left there (ct_checkpoint_clean_leftovers),
 * before any process reads a checkpoint or writes; when it fails (another run holds the directory),
 * every process returns its error. Training claims it first; a program that only evaluates claims it
 * before its work so that a busy directory fails early (the saves below would claim it otherwise). */
ct_status ct_trainer_claim_output_dir(ct_trainer *t);
/* Writes the model to dir/model.h5 (model/model_io.h) and the arguments to dir/training_args.json. */
ct_status ct_trainer_save_model(ct_trainer *t, const char *dir);
/* Writes output_dir/trainer_state.json. */
ct_status ct_trainer_save_state(ct_trainer *t);
/* Prints "***** <split> metrics *****" and the metrics, one per line (process zero only). */
void ct_trainer_log_metrics(ct_trainer *t, const char *split, const json_t *metrics);
/* Writes output_dir/<split>_results.json and merges the metrics into all_results.json. */
ct_status ct_trainer_save_metrics(ct_trainer *t, const char *split, const json_t *metrics);
bool ct_trainer_is_world_process_zero(const ct_trainer *t);
bool ct_trainer_is_local_process_zero(const ct_trainer *t);
/* Hugging Face's TrainingArguments.should_log: this process is the one that logs (the node's first
 * with log_on_each_node, else the world's first). ct_trainer_init sets the process's log threshold
 * (core/log.h) from it: log_level where it is true, log_level_replica elsewhere, passive leaving the
 * threshold as it was; and the "[rank R/W] " prefix of log lines when there are several processes. */
bool ct_trainer_should_log(const ct_trainer *t);
/* Hugging Face's "***** Running training *****" block, at info level (one line each: examples,
 * epochs, per-device batch, total batch, accumulation, optimization steps, trainable parameters);
 * the training loop calls it once max_steps and the number of epochs are known. */
void ct_trainer_log_run_summary(const ct_trainer *t, int64_t max_steps, int64_t epochs);

/* Checkpoints (checkpoint/checkpoint.h, from the snapshot of the trainer that trainer/snapshot.c
 * takes). Saves checkpoint-<global_step>, updates best_model_checkpoint, then rotates. A save still
 * in flight (save_async) completes first; with save_async this one is then written by the writer
 * thread and committed later (checkpoint/checkpoint_async.h). Collective with several processes. A
 * save that fails leaves nothing of itself on disk and earlier checkpoints untouched; on_save_error
 * "stop" returns its error, "continue" a warning and CT_OK with this step no longer counted as saved
 * (how the caller tells that nothing was saved). */
ct_status ct_trainer_save_checkpoint(ct_trainer *t);
/* At the end of training: with save_total_limit 1 and a best checkpoint, deletes every other one.
 * Like ct_trainer_load_best_model, first waits until every save in flight is committed. */
ct_status ct_trainer_finish_checkpoints(ct_trainer *t);
/* Hugging Face's rotation (save_total_limit, the best kept) over output_dir's checkpoints now. */
ct_status ct_trainer_rotate_checkpoints(ct_trainer *t);
/* Continues from a checkpoint (spec: "latest" or a directory, see ct_checkpoint_resolve): model,
 * optimizer, scheduler, trainer state, callback and control state, and the loop's progress. Call
 * after the optimizer and scheduler exist. Nothing of the trainer's own state changes on failure. */
ct_status ct_trainer_resume(ct_trainer *t, const char *spec);
/* Loads the weights of state.best_model_checkpoint into the model. */
ct_status ct_trainer_load_best_model(ct_trainer *t);

/* Callbacks (the trainer owns what it is given; one that fails ct_callback_check is refused and
 * stays the caller's). */
ct_status ct_trainer_add_callback(ct_trainer *t, ct_callback *cb);
ct_callback *ct_trainer_pop_callback(ct_trainer *t, const char *name);

#endif
