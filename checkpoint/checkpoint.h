/* Checkpoints: output_dir/checkpoint-<global_step>/ directories, their rotation, and loading the best.
 *
 * A checkpoint holds everything a run needs to continue exactly (checkpoint/checkpoint_io.h lists the
 * files): the model, optimizer and scheduler state, trainer_state.json, the loop's progress and the
 * arguments. It is written into a temporary directory with a manifest of sizes and checksums, fsync'd
 * and renamed when complete, so a crash never leaves half of one under the final name. Rotation follows Hugging
 * Face's _rotate_checkpoints: with save_total_limit N the oldest checkpoints go, but never the best
 * one (it is moved to the end of the deletion order), and with a limit of 1 the best and the last
 * both stay; it deletes only directories it has proven to be the run's checkpoints (rotation.c).
 * The synchronous and the asynchronous save (save_async) share every writer: see
 * checkpoint/checkpoint_async.h. */
#ifndef CT_CHECKPOINT_H
#define CT_CHECKPOINT_H

#include "checkpoint/snapshot.h"

/* Each call takes the snapshot of its caller's live state (checkpoint/snapshot.h); the Trainer's
 * ct_trainer_save_checkpoint, ct_trainer_resume, ... (trainer/trainer.h) build one and call these. */

/* Saves checkpoint-<global_step>, updates best_model_checkpoint, then rotates. A save still in flight
 * (save_async) completes first; with save_async this one is then written by the writer thread and
 * committed later (checkpoint/checkpoint_async.h). Collective with several processes. A save that fails
 * leaves nothing of itself on disk and earlier checkpoints untouched; on_save_error "stop" returns
 * its error, "continue" a warning and CT_OK with *saved_step no longer this step (how the caller
 * tells that nothing was saved). */
ct_status ct_checkpoint_save_step(ct_checkpoint_snapshot *snap);
/* At the end of training: with save_total_limit 1 and a best checkpoint that is one of output_dir's,
 * deletes every other one (a best elsewhere: keeps them all, with a warning). Like
 * ct_checkpoint_load_best, first waits until every save in flight is committed. */
ct_status ct_checkpoint_finish(ct_checkpoint_snapshot *snap);
/* Hugging Face's rotation (save_total_limit, the best kept) over output_dir's checkpoints now. */
ct_status ct_checkpoint_rotate(const ct_checkpoint_snapshot *snap);
/* Continues from a checkpoint (spec: "latest" or a directory, see ct_checkpoint_resolve): model,
 * optimizer, scheduler, trainer state, callback and control state, the loop's progress, and (into
 * snap->evals when not NULL) eval_async's evaluations whose results the checkpoint does not hold. Call
 * after the optimizer and scheduler exist. On failure the trainer state and progress the snapshot
 * points at are unchanged (the model, optimizer and scheduler each load all or nothing). */
ct_status ct_checkpoint_resume(ct_checkpoint_snapshot *snap, const char *spec);
/* Frees p's list and empties it (last_step -1); the tensors are views, never freed here. */
void ct_pending_evals_clear(ct_pending_evals *p);
/* Loads the weights of state->best_model_checkpoint into the model. */
ct_status ct_checkpoint_load_best(ct_checkpoint_snapshot *snap);
/* Puts the callbacks' and the control's saved state into state->stateful_callbacks (Hugging Face's
 * ExportableState), before trainer_state.json is written; the control's should_log, should_evaluate
 * and should_save are saved down. */
ct_status ct_checkpoint_store_callback_state(const ct_callback_list *callbacks, const ct_trainer_control *control,
                                             ct_trainer_state *state);
/* Deletes what a run that died left in output_dir: checkpoint-<step>.tmp (a save not committed),
 * .deleting (rotation's victims), .old (put back when its checkpoint is missing) and this host's
 * orphaned temporaries of atomic writes; nothing else (leftovers.c). Only for the holder of
 * output_dir's lock (core/dir_lock.h): no other run writes there then. */
ct_status ct_checkpoint_clean_leftovers(const char *output_dir);
/* Whether the entry `name` of output_dir is such a leftover (what ct_checkpoint_clean_leftovers would
 * clean): the run's own bookkeeping, not a file of anyone else's. */
bool ct_checkpoint_is_leftover(const char *output_dir, const char *name);
/* The checkpoint directories of dir, oldest first by step (*out and its strings are malloc'd; free
 * with ct_checkpoint_list_free). */
ct_status ct_checkpoint_list(const char *dir, char ***out, int *n);
void ct_checkpoint_list_free(char **list, int n);

#endif
