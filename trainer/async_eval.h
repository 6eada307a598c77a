/* Asynchronous evaluation (eval_async): evaluations run on a thread of their own, on a replica of
 * the model loaded from a snapshot of the weights, while training goes on.
 *
 * The training thread hands over snapshots (a copy of the flat parameters and buffers, tagged with
 * the global step and epoch they were taken at); the evaluator thread loads each into its replica
 * (built by the setup's make_model on eval_device) and runs the default evaluation loop over every
 * evaluation set with its own metric set and loaders, exactly as a synchronous evaluation of those
 * weights would, then queues the result. At most one snapshot waits: with eval_async_policy
 * "latest" a newer one replaces it; with "skip" a snapshot that arrives while one waits or runs is
 * dropped; with "wait" the training thread waits until the waiting one has started, so every due
 * evaluation runs (the same evaluations as synchronous evaluation, still beside training). The training thread takes finished results at step boundaries (train_loop.c), oldest
 * first, and handles each as if the evaluation had run at its snapshot's step.
 *
 * What runs on the evaluator thread touches only its own objects: the replica, its metric set, its
 * loaders, the snapshot; the datasets and the loss are shared read-only (the built-in ones are
 * safe for that). The application's compute_metrics runs on the training thread when the result
 * is taken (the outputs travel with it); an overridden prediction_step or get_eval_dataloader
 * cannot run on a replica and is refused.
 *
 * A checkpoint records every evaluation accepted whose result is not yet in log_history (finished
 * but not taken, running, waiting) with its weights (ct_async_eval_pending), and a resumed run hands
 * them to its evaluator again (ct_async_eval_resume): a crash or a stop signal while an evaluation
 * runs loses nothing of the uninterrupted run's log_history. */
#ifndef CT_ASYNC_EVAL_H
#define CT_ASYNC_EVAL_H

#include "checkpoint/snapshot.h"
#include "core/host_copy.h"
#include "trainer/trainer.h"

typedef struct ct_async_eval ct_async_eval;

/* A finished evaluation. */
typedef struct ct_async_result {
    int64_t step;       /* global_step of the snapshot */
    double epoch;       /* state.epoch of the snapshot */
    ct_status status;   /* CT_OK, or why the evaluation failed (message in error) */
    char error[1024];
    json_t *metrics;    /* an array: each set's metrics, prefixed as ct_trainer_evaluate prefixes them */
    int n_sets;
    char prefixes[CT_TRAINER_MAX_EVAL_SETS][128];
    ct_prediction_output outputs[CT_TRAINER_MAX_EVAL_SETS]; /* kept when the trainer has compute_metrics */
    ct_tensor values, buffers; /* the snapshot's weights (for a best-model checkpoint), copies' */
    ct_host_copies copies;     /* taken without waiting: read them after its wait */
    bool has_copies;
} ct_async_result;

/* Builds the evaluator for t (replica, metric set, thread). */
ct_status ct_async_eval_create(ct_trainer *t, ct_async_eval **out);
/* Waits for a running evaluation (a waiting one is dropped), stops the thread, frees everything. */
void ct_async_eval_free(ct_async_eval *e);
/* Snapshot of t's weights now (state.global_step, state.epoch), handed to the evaluator by the policy.
 * *accepted says whether it will be evaluated. */
ct_status ct_async_eval_submit(ct_async_eval *e, bool *accepted);
/* True when nothing runs and nothing waits (continuous evaluation submits then). */
bool ct_async_eval_idle(ct_async_eval *e);
/* Finished results not yet taken. */
int ct_async_eval_ready(ct_async_eval *e);
/* The oldest finished result (NULL when none); the caller frees it. */
ct_async_result *ct_async_eval_take(ct_async_eval *e);
/* Every evaluation accepted whose result was not taken yet, oldest first, with views of its weights
 * (valid until the training thread next calls into e: the evaluator never frees them), and the
 * step of the last one accepted; free out's list with ct_pending_evals_clear. */
ct_status ct_async_eval_pending(ct_async_eval *e, ct_pending_evals *out);
/* Resuming: each evaluation of p (from ct_checkpoint_resume) loaded from its file into the trainer's
 * model and handed over (none replaces another, whatever the policy), then the model's own weights
 * (p->model_file) back; the last accepted step is p's. */
ct_status ct_async_eval_resume(ct_async_eval *e, const ct_pending_evals *p);
/* Waits until nothing runs and nothing waits; drop_waiting drops a waiting snapshot first. */
void ct_async_eval_drain(ct_async_eval *e, bool drop_waiting);
void ct_async_result_free(ct_async_result *r);
/* ct_async_result_free, but the weights' pinned memory is kept for e's next snapshot (e may be NULL). */
void ct_async_eval_recycle(ct_async_eval *e, ct_async_result *r);
/* Writes dir (checkpoint-<step>) holding r's snapshot as the model, with the trainer state and
 * arguments: model-only (no optimizer, scheduler or progress: not resumable), crash-safe like every
 * checkpoint (temporary directory, manifest, rename). World process zero only. */
ct_status ct_async_save_model_checkpoint(ct_trainer *t, const ct_async_result *r, const char *dir);

#endif
