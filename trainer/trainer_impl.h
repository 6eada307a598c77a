/* What the Trainer's own files share and applications do not need. */
#ifndef CT_TRAINER_IMPL_H
#define CT_TRAINER_IMPL_H

#include "core/fs.h"
#include "trainer/trainer.h"

/* The application's hook `member` when its ops table has one (not NULL, and the table was written
 * after the member was added), NULL otherwise: the caller then uses the default. */
#define CT_TRAINER_HOOK(t, member)                                                                       \
    ((t)->ops && (t)->ops->size >= offsetof(ct_trainer_ops, member) + sizeof((t)->ops->member) ? (t)->ops->member \
                                                                                                : NULL)

/* Data parallelism (trainer/ddp.c): rank 0's parameters and buffers to every process; the gradient
 * sums of every process added up (bucketed non-blocking all-reduce). No-ops for one process. */
ct_status ct_trainer_broadcast_params(ct_trainer *t);
/* The gradient buckets of a data-parallel run, cut for t's model and ddp_bucket_cap_mb. For an
 * optimizer step: ct_ddp_begin_step before the backward of its last micro-batch (buckets then start
 * while backward runs), ct_ddp_finish_step after it (starts the rest when start_rest, waits for all
 * started; after a failure pass false: only the started ones are waited for). */
typedef struct ct_ddp ct_ddp;
ct_status ct_ddp_create(ct_trainer *t, ct_ddp **out);
void ct_ddp_free(ct_ddp *d);
int ct_ddp_num_buckets(const ct_ddp *d);
void ct_ddp_begin_step(ct_ddp *d);
ct_status ct_ddp_finish_step(ct_ddp *d, bool start_rest);

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
/* predict_with_generate (trainer/generate_outputs.c): the run config's "generation" section with
 * generation_max_length applied for prompts of prompt_len tokens; and every sample's continuation,
 * [N, max_new_tokens] int64 padded with -100, on the world's process zero ([0, M] elsewhere). */
struct ct_generation_config;
ct_status ct_trainer_generation_config(const ct_trainer *t, int64_t prompt_len, struct ct_generation_config *g);
ct_status ct_trainer_generate_outputs(ct_trainer *t, ct_dataset *ds, ct_tensor *generated);
/* ct_trainer_save_model with copies of the model's flat parameters and buffers (a snapshot) instead
 * of its live weights (NULL: the live ones). */
ct_status ct_trainer_save_model_from(ct_trainer *t, const char *dir, const ct_tensor *values, const ct_tensor *buffers);
/* Seconds on a monotonic clock. */
double ct_trainer_now(void);
/* Adds Hugging Face's speed_metrics to m: <split>_runtime, <split>_samples_per_second and
 * <split>_steps_per_second, rounded as HF rounds them. */
void ct_trainer_speed_metrics(json_t *m, const char *split, double runtime, double samples, double steps);

/* nan_inf_policy (trainer/nan_inf.c): what one optimizer step's numbers say, the same on every
 * process. Collective with several processes (one 8-byte all-reduce): the verdict from this
 * process's own loss sum (its micro-batches), the step's all-reduced loss sum and, when norm_known,
 * the gradient norm this process computed. ct_nan_inf_describe writes "optimizer step N (epoch E): the
 * loss is nan, first on rank R of W" or "...: the gradient norm is inf while the loss is finite". */
typedef struct ct_step_check {
    bool bad;     /* the loss or the gradient norm is NaN or infinite */
    bool loss;    /* it is the loss (else the gradient norm) */
    int rank;     /* the first process whose own loss was not finite; -1 when none or not known */
    double value; /* the offending value: the loss sum or the norm */
} ct_step_check;
ct_status ct_nan_inf_check(ct_trainer *t, double local_loss_sum, double loss_sum, bool norm_known, double norm,
                           ct_step_check *out);
void ct_nan_inf_describe(const ct_trainer *t, const ct_step_check *c, int64_t epoch, char *buf, size_t cap);

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
/* Writes v to file (indented, keys sorted) through a temporary name and a rename. */
ct_status ct_write_json_file(const json_t *v, const char *file);

#endif
