/* What a checkpoint is saved from and resumed into: the snapshot.
 *
 * The checkpoint code never sees the Trainer (it sits below it). The Trainer fills a
 * ct_checkpoint_snapshot with pointers to its live pieces (trainer/snapshot.c) and passes it to every
 * call of checkpoint/checkpoint.h and checkpoint/checkpoint_async.h; filling one costs nothing, so the
 * Trainer makes a fresh one for each call. A synchronous save writes the files straight from these
 * pointers; an asynchronous one (save_async) copies what the files hold (the tensors to host memory,
 * the JSON as text) into buffers of its own and hands the copy to the writer thread, which then
 * touches nothing here: both go through the same writers and produce the same bytes. A resume writes
 * what it loads through the same pointers: the model, optimizer and scheduler each all or nothing, in
 * that order after the progress and trainer state were read and checked; the trainer state and the
 * loop's progress only once everything loaded. */
#ifndef CT_CHECKPOINT_SNAPSHOT_H
#define CT_CHECKPOINT_SNAPSHOT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "callbacks/callback.h"
#include "callbacks/state.h"
#include "config/args.h"
#include "dist/comm.h"
#include "model/model.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"

/* Where the training loop stands, and the values it carries between optimizer steps: what a
 * checkpoint needs, besides the model, optimizer, scheduler and trainer state, for the resumed run to
 * log exactly what the uninterrupted one would have (rng_state_<rank>.json). */
#define CT_RUN_ID_LEN 32

typedef struct ct_train_progress {
    int64_t epoch;        /* the epoch in progress */
    int64_t next_batch;   /* its next global batch */
    bool epoch_done;      /* its end-of-epoch events have run: resume at the next epoch */
    double tr_loss;       /* sum of step losses since the last log */
    double total_loss;    /* sum of the step losses already logged */
    int64_t last_logged_step;
    double grad_norm;     /* of the last step */
    bool has_grad_norm;
    double learning_rate; /* of the last step */
    int64_t nan_inf_skipped; /* optimizer steps skipped by nan_inf_policy "skip" so far */
    /* dynamic loss scaling (optim/grad_scaler.h): its state when a run used it (has_scaler), and the
     * optimizer steps it skipped because the gradients overflowed */
    bool has_scaler;
    ct_grad_scaler_state scaler;
    int64_t scaler_skipped;
    /* the step whose evaluation set the best metric last, under every save_strategy (HF's
     * best_global_step exists only for steps and epoch); tells a "best" save that it is the best.
     * Not saved: a resumed run's next best is found after its own evaluations. */
    int64_t best_step;
    /* The run's identity: random hex digits drawn when a run starts fresh, kept by its resumptions, in
     * every checkpoint it saves; rotation deletes only checkpoints of the same run. Empty in a
     * checkpoint written before runs had one. */
    char run_id[CT_RUN_ID_LEN + 1];
} ct_train_progress;

/* Fills id (CT_RUN_ID_LEN + 1 bytes) with a new run identity. */
void ct_train_progress_new_run_id(char *id);

/* An evaluation eval_async's evaluator accepted whose result is not in log_history yet (finished
 * but not taken, running, or waiting). A checkpoint keeps its step, epoch and weights, and the
 * resumed run evaluates it again (trainer/async_eval.h): a crash while it ran must not lose it. */
typedef struct ct_pending_eval {
    int64_t step;
    double epoch;
    ct_tensor values, buffers; /* saving: the weights it evaluates (views); empty when resumed */
    char file[4400];           /* resuming: the checkpoint file holding them */
} ct_pending_eval;

/* The evaluator's record in a checkpoint (world process zero's rng_state_0.json and, for a pending
 * evaluation of an earlier step than the checkpoint's, eval_pending_<step>.h5). */
typedef struct ct_pending_evals {
    int n;
    ct_pending_eval *items;  /* oldest first; malloc'd (ct_pending_evals_clear frees it) */
    int64_t last_step;       /* the step of the last snapshot accepted (-1: none) */
    char model_file[4400];   /* resuming: the checkpoint's model.h5 (its own weights) */
} ct_pending_evals;

/* save_async's writer thread and the save in flight (checkpoint/checkpoint_async.c); its owner keeps
 * the pointer (NULL until the first asynchronous save) and frees it with ct_checkpoint_async_free. */
typedef struct ct_async_saver ct_async_saver;

typedef struct ct_checkpoint_snapshot {
    /* the process: a save's agreements and ZeRO-1's gather are collectives over comm */
    int rank, world_size;
    ct_comm *comm;
    /* output_dir, save_total_limit, save_only_model, save_async, on_save_error, save_strategy, the
     * batching (checked on resume); written whole as training_args.json */
    const ct_training_args *args;
    const json_t *run_config; /* run_config.json, and its "model" as model.h5's spec (NULL: none) */
    /* the state: weights (the flat parameter values and buffers), optimizer, scheduler */
    ct_model *model;
    ct_optimizer *optimizer;  /* NULL with save_only_model before the optimizer exists */
    bool zero1;               /* optimizer is a ZeRO-1 shard optimizer (dist/zero.h) */
    ct_scheduler *scheduler;
    /* the run's loss scaling (NULL: none); a resumed scaler state is checked against it */
    const ct_grad_scaler_opts *grad_scaler;
    /* trainer_state.json; a save updates best_model_checkpoint, a resume replaces it */
    ct_trainer_state *state;
    /* the callbacks' and the control's state, stored in state->stateful_callbacks when saved */
    ct_callback_list *callbacks;
    ct_trainer_control *control;
    ct_train_progress *progress; /* the loop's progress (rng_state_<rank>.json) */
    int64_t batches_per_epoch;   /* the training loader's global batches per epoch (0: not known), which a
                                  * resumed position must fit */
    /* the owner's record of saves: global_step of the last checkpoint written (-1: none; a failed
     * save forgets its step) and that checkpoint's progress.epoch_done */
    int64_t *saved_step;
    bool *saved_epoch_done;
    ct_async_saver **saver; /* the writer, created by the first asynchronous save */
    /* eval_async's unrecorded evaluations (NULL: no evaluator): read by a save, filled by a resume */
    ct_pending_evals *evals;
} ct_checkpoint_snapshot;

#endif
