/* What the Trainer's own files share and applications do not need. */
#ifndef CT_TRAINER_IMPL_H
#define CT_TRAINER_IMPL_H

#include "checkpoint/snapshot.h"
#include "core/fs.h"
#include "dist/strategy.h"
#include "trainer/trainer.h"

/* The application's hook `member` when its ops table has one (not NULL, and the table was written
 * after the member was added), NULL otherwise: the caller then uses the default. */
#define CT_TRAINER_HOOK(t, member)                                                                       \
    ((t)->ops && (t)->ops->size >= offsetof(ct_trainer_ops, member) + sizeof((t)->ops->member) ? (t)->ops->member \
                                                                                                : NULL)

/* trainer/setup_check.c: the hook table's size (NULL is every default), then, once the trainer holds
 * its pieces, everything ct_trainer_init can check before a step: tables, the model's batch size,
 * datasets against the model, the loss against a sample's labels. */
ct_status ct_trainer_check_ops(const ct_trainer_ops *ops);
ct_status ct_trainer_check_setup(ct_trainer *t);
/* The checks of ct_trainer_check_setup for a dataset given to evaluate or predict that init did not
 * see (role names it in messages); nothing for one it did. */
ct_status ct_trainer_check_dataset(ct_trainer *t, ct_dataset *ds, const char *role);
/* A new metric set as the setup asked: the JSON list's metrics, then make_metrics'. The trainer's own
 * and each asynchronous evaluator's come from here, so no metric object is shared between them. */
ct_status ct_trainer_make_metrics(const ct_trainer *t, ct_metric_set *out);

/* One of the two slots a batch reaches the model's device through (trainer/device_batch.c): the
 * batch's features and then its labels in pinned host memory and in device memory, and the events that
 * say when each may be refilled. */
typedef struct ct_batch_slot {
    ct_device device;
    size_t cap;              /* bytes each side holds */
    void *pinned;            /* copied from the loader's batch by the host */
    ct_tensor on_device;     /* the same bytes on the device (u8), uploaded from `pinned` */
    ct_device_event copied;  /* the last upload has read `pinned` */
    ct_device_event released; /* every op on the slot's last batch was enqueued before this */
    bool used;
} ct_batch_slot;

/* What the trainer keeps for itself (ct_trainer's priv): applications never see these members, so
 * they may change freely. */
struct ct_trainer_private {
    bool owns_loss, owns_comm;
    /* the setup's test set, checked at init with the others (borrowed) */
    ct_dataset *test_dataset;
    /* the gradient of the loss w.r.t. the model's outputs, sized for the train batch */
    ct_tensor dloss;
    /* a batch's features and labels on the model's device, through two slots used in turn, and
     * outputs back on the host (trainer/device_batch.c): kept for the largest batch, unused on the CPU */
    ct_batch device_batch;
    ct_batch_slot batch_slots[2];
    int batch_slot;
    ct_tensor host_outputs;
    double train_start_time;
    /* this process's samples and input elements (tokens of token data) trained since train_start_time:
     * the throughput and MFU of the run's final metrics */
    int64_t trained_rows, trained_inputs;
    /* the distribution strategy (dist/strategy.h), chosen once at init from optimizer_sharding and
     * the world size */
    ct_dist dist;
    /* asynchronous evaluation (eval_async; trainer/async_eval.h): the model builder of the setup, the
     * metrics list the trainer was built with (a copy, for replicas), the evaluator while training
     * runs (world process zero only) */
    ct_status (*make_model)(void *ctx, int64_t max_batch, ct_device device, ct_model *out);
    void *make_model_ctx;
    json_t *metrics_spec;
    ct_status (*make_metrics)(void *ctx, ct_metric_set *set);
    void *make_metrics_ctx;
    struct ct_async_eval *async_eval;
    struct ct_memory_tracker *memory; /* the memory report (trainer/memory.h); NULL when skip_memory_metrics */
    /* where the training loop is (saved in checkpoints), the global_step of the last checkpoint
     * written (-1: none) and its progress.epoch_done, and save_async's writer
     * (checkpoint/checkpoint_async.h): what trainer/snapshot.c hands to checkpoint/ */
    ct_train_progress progress;
    /* dynamic loss scaling (fp16 or setup.grad_scaler; its state is progress.scaler) and what the
     * device's GEMMs compute with (bf16, fp16, tf32), set on each thread that runs the model */
    bool scaling;
    ct_grad_scaler_opts scaler_opts;
    ct_math_mode math;
    int64_t batches_per_epoch; /* of the training loader, once train() made it (0 before) */
    int64_t saved_step;
    bool saved_epoch_done;
    struct ct_async_saver *saver;
    /* the world's process zero: its lock on output_dir, taken when training starts and held until
     * the trainer is freed (NULL: none, or output_dir could not be locked) */
    struct ct_dir_lock *output_lock;
    /* the step's statistics on the device (trainer/step_stats.c): its block (allocated once), whether
     * this training run uses it, and the steps it took since it began */
    ct_tensor step_block;
    bool step_stats_on;
    int64_t steps_on_device;
};

/* The arguments of a callback event: the trainer, its arguments, state and control, and the run
 * config (the event's payload, logs or metrics, is the caller's to add). */
ct_callback_args ct_trainer_callback_args(ct_trainer *t);

/* trainer/device_batch.c: the batch the hooks see, its features and labels on the model's device
 * (the host batch itself on the CPU; valid until the next call); a copy of outputs on the host (a
 * view of outputs on the CPU; valid until the next call); and the release of their buffers. */
ct_status ct_trainer_prepare_inputs(ct_trainer *t, const ct_batch *host, const ct_batch **out);
ct_status ct_trainer_outputs_to_host(ct_trainer *t, const ct_tensor *outputs, ct_tensor *host);
void ct_trainer_free_device_batch(ct_trainer *t);

/* Sets the calling thread's math mode for ops on d to the run's (bf16, fp16, tf32) where d's backend
 * has it, else float32 (an evaluator on the CPU beside a GPU run); ..._end restores float32. Pairs
 * nest (an evaluation during training): the outermost pair decides. */
void ct_trainer_math_begin(const ct_trainer *t, ct_device d);
void ct_trainer_math_end(const ct_trainer *t, ct_device d);

/* optimizer_sharding is "zero1": the optimizer is a shard optimizer (dist/zero.h). */
bool ct_trainer_uses_zero1(const ct_trainer *t);

/* Evaluation pieces the asynchronous evaluator (trainer/async_eval.c) runs apart (evaluate.c):
 * one pass over ds on t's model without compute_metrics, sharing or logging (keep: where the outputs
 * go, for compute_metrics later; NULL: not kept); the compute_metrics hook (if any) on outputs; and
 * rank 0's JSON value to every process (collective). */
ct_status ct_trainer_evaluation_pass(ct_trainer *t, ct_dataset *ds, const char *prefix, ct_prediction_output *keep,
                                    json_t **metrics);
ct_status ct_trainer_call_compute_metrics(ct_trainer *t, const ct_prediction_output *p, const char *prefix,
                                         json_t *metrics);
ct_status ct_trainer_share_json(ct_trainer *t, json_t **value);
/* *n = the batch's leading real rows (b->valid), after checking that its mask puts the padding rows
 * at its end (evaluation shards that ran out pad their last batch). */
ct_status ct_trainer_real_rows(const ct_batch *b, int64_t *n);
/* trainer/eval_loss.c: whether an evaluation batch takes its loss from its rows (the default
 * prediction_step and compute_loss on a batch with labels: one pass over the outputs gives both),
 * and then the model's forward, and the loss and each real row's (sum, count) into rows[] (b the host
 * batch, db its copy on the model's device; tokens: the batch's token values or NULL). */
bool ct_eval_loss_from_rows(const ct_trainer *t, const ct_batch *db);
ct_status ct_eval_forward(ct_trainer *t, const ct_batch *db, ct_tensor *outputs);
ct_status ct_eval_row_losses(ct_trainer *t, const ct_batch *b, const ct_batch *db, const ct_tensor *outputs,
                             const ct_token_values *tokens, ct_loss_value *rows, ct_loss_value *loss);
/* Whether n rows' (sum, count) add up to a batch's loss, to rounding: a prediction_step override that
 * computes its loss its own way (a weight, a penalty) gives one they do not explain. */
bool ct_eval_rows_explain(const ct_loss_value *rows, int64_t n, ct_loss_value loss);
/* predict_with_generate (trainer/generate_outputs.c): the run config's "generation" section with
 * generation_max_length applied for prompts of prompt_len tokens; and every sample's continuation,
 * [N, max_new_tokens] int64 padded with -100, on the world's process zero ([0, M] elsewhere). */
struct ct_generation_config;
ct_status ct_trainer_generation_config(const ct_trainer *t, int64_t prompt_len, struct ct_generation_config *g);
ct_status ct_trainer_generate_outputs(ct_trainer *t, ct_dataset *ds, ct_tensor *generated);
/* ct_trainer_save_model with copies of the model's flat parameters and buffers (a snapshot) instead
 * of its live weights (NULL: the live ones). */
ct_status ct_trainer_save_model_from(ct_trainer *t, const char *dir, const ct_tensor *values, const ct_tensor *buffers);
/* Adds Hugging Face's speed_metrics to m: <split>_runtime, <split>_samples_per_second and
 * <split>_steps_per_second, rounded as HF rounds them. */
void ct_trainer_speed_metrics(json_t *m, const char *split, double runtime, double samples, double steps);

/* The step's one agreement (trainer/step_agree.c; collective with several processes: one small
 * float64 all-reduce): from this process's own loss (sum, count) and flops over the step's
 * micro-batches, the stop signal it has seen and the eval_async results it has ready, the step's
 * totals over every process, the first process whose own loss sum was not finite, the stop signal
 * any process received and the number of results to take. The same on every process. */
typedef struct ct_step_totals {
    ct_loss_value loss; /* the step's loss sum and count over every process */
    double flos;
    int bad_rank; /* the first process whose own loss sum was not finite; -1: none */
    int signal;   /* SIGTERM when a process received it, else SIGINT when one did, else 0 */
    int64_t async_ready; /* eval_async results finished when the step agreed: each process takes these */
} ct_step_totals;
ct_status ct_step_agree(ct_trainer *t, ct_loss_value local, double flos, int signal, ct_step_totals *out);

/* nan_inf_policy: what one optimizer step's numbers say, the same on every process, from the step's
 * agreement and, when norm_known, the gradient norm (computed from the summed gradients).
 * ct_nan_inf_describe writes "optimizer step N (epoch E): the loss is nan, first on rank R of W" or
 * "...: the gradient norm is inf while the loss is finite". */
typedef struct ct_step_check {
    bool bad;     /* the loss or the gradient norm is NaN or infinite */
    bool loss;    /* it is the loss (else the gradient norm) */
    int rank;     /* the first process whose own loss was not finite; -1 when none or not known */
    double value; /* the offending value: the loss sum or the norm */
} ct_step_check;
ct_step_check ct_nan_inf_verdict(const ct_step_totals *a, bool norm_known, double norm);
void ct_nan_inf_describe(const ct_trainer *t, const ct_step_check *c, int64_t epoch, char *buf, size_t cap);

/* The step's statistics on the device (trainer/step_stats.c): whether this run can keep them there;
 * at the start of training, the choice (and the block, seeded with the loss to log so far); at its
 * end, the optimizer's gate released; at the trainer's free, the block. During training: the
 * default training_step with its loss added to the block (trainer.c); the gradients readied from the
 * block (scale, norm, rule, clip), then the optimizer's step, gated by it; the read of the block into the progress (the
 * loss to log, the last norm), which ends the run when a step was bad; and, once the loss was
 * logged, its reset on the device. Without the block (step_stats_on false) read and logged do
 * nothing. */
bool ct_step_stats_wanted(const ct_trainer *t);
ct_status ct_step_stats_begin(ct_trainer *t);
void ct_step_stats_end(ct_trainer *t);
void ct_step_stats_free(ct_trainer *t);
ct_status ct_trainer_training_step_acc(ct_trainer *t, const ct_batch *b, ct_tensor *stats);
void ct_step_stats_update(ct_trainer *t);
ct_status ct_step_stats_optimizer_step(ct_trainer *t, double lr);
ct_status ct_step_stats_read(ct_trainer *t);
void ct_step_stats_logged(ct_trainer *t);

/* Puts the callbacks' and the control's saved state into state.stateful_callbacks (Hugging Face's
 * ExportableState), before trainer_state.json is written (ct_checkpoint_store_callback_state). */
ct_status ct_trainer_store_callback_state(ct_trainer *t);

/* Checkpoints (trainer/snapshot.c): *out = the snapshot of t's live state that every call of
 * checkpoint/ takes (pointers into t, no copy; checkpoint/snapshot.h). */
void ct_trainer_checkpoint_snapshot(ct_trainer *t, ct_checkpoint_snapshot *out);
/* save_async's calls (checkpoint/checkpoint_async.h on t's snapshot; no-ops without a save in
 * flight; collective with several processes): at every optimizer step boundary, surface a finished
 * save's failure and move a save in flight on; wait until every save is committed; at the end of
 * ct_trainer_train on every path (returns s when it is an error, else the drain's); and from
 * ct_trainer_free, stop the writer (no collective). */
ct_status ct_trainer_async_save_poll(ct_trainer *t);
ct_status ct_trainer_async_save_drain(ct_trainer *t);
ct_status ct_trainer_async_save_end_train(ct_trainer *t, ct_status s);
void ct_trainer_async_save_free(ct_trainer *t);

#endif
