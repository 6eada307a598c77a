/* Asynchronous checkpoint saving (save_async), and the save both kinds share.
 *
 * Every checkpoint is saved from a snapshot (checkpoint/snapshot.h): from it, on the training thread,
 * the save takes an image of what the checkpoint's files hold at this step — the model's flat
 * parameters and buffers, the optimizer's state tensors and step count (for ZeRO-1 gathered to rank 0
 * by a collective, here), the scheduler, trainer_state.json (after the callbacks stored their state),
 * training_args.json, run_config.json and this process's progress file as text. Writing it into
 * `<dir>.tmp`, the manifest and the commit (rename) need nothing else, so the synchronous and the
 * asynchronous save share every writer and produce the same bytes. A synchronous save's image points
 * at the live tensors and is written right away; an asynchronous one copies them to host memory
 * (buffers reused from the previous save) and hands the image to the snapshot owner's one writer
 * thread (*snapshot.saver): training waits only for the copy.
 *
 * At most one save is in flight: a new one (and load_best_model_at_end, the end of training) first
 * waits for the previous one. The training loop calls ct_checkpoint_async_poll at every optimizer
 * step boundary; a background failure surfaces there (or at the drain) naming the checkpoint
 * directory, never silently: an error, or with on_save_error "continue" a warning (see
 * ct_checkpoint_save_failed).
 *
 * Several processes: MPI is initialised FUNNELED, so the writer threads never communicate. Each rank's
 * writer writes its part into the temporary directory (rank 0 the shared files and its progress
 * file, every other rank its rng_state_<rank>.json); the polls agree on the training thread, one
 * small all-reduce per step boundary while a save is in flight: once every part is written, rank 0's
 * writer writes the manifest and commits; a failure anywhere becomes an error on every rank.
 * Rotation (save_total_limit) runs on rank 0's training thread once the commit is done, with the
 * best checkpoint known then.
 *
 * An uncommitted `<dir>.tmp` is never a checkpoint (ct_checkpoint_list only knows checkpoint-<digits>
 * and the manifest makes a directory whole), so resume and "latest" never see a save in flight. */
#ifndef CT_CHECKPOINT_ASYNC_H
#define CT_CHECKPOINT_ASYNC_H

#include "checkpoint/snapshot.h"

/* --- the training loop's calls (no-ops without a save in flight; collective with several
 *     processes: every rank calls them at the same points) ------------------------------------- */

/* At a step boundary: surfaces a finished save's failure and, with several processes, moves a save
 * in flight on (one all-reduce; the commit once every rank's part is written). Never waits for the
 * disk. */
ct_status ct_checkpoint_async_poll(ct_checkpoint_snapshot *snap);
/* Waits until nothing is in flight: every save committed (or its error returned). */
ct_status ct_checkpoint_async_drain(ct_checkpoint_snapshot *snap);
/* What the Trainer calls once its training loop returned status s, on every path: drains (the stop
 * checkpoint of SIGINT/SIGTERM is whole on disk before the process exits), then frees the writer.
 * After an error other than CT_ERR_INTERRUPTED with several processes the ranks may not be at the
 * same point, so there it only waits for this process's writer (rank 0 still commits a save whose
 * every part is on disk). Returns s when it is an error (the first error stays), else the drain's. */
ct_status ct_checkpoint_async_end_train(ct_checkpoint_snapshot *snap, ct_status s);
/* Waits for this process's writer (no collective), stops it and frees *snap->saver (then NULL; the
 * Trainer calls it from ct_trainer_free). */
void ct_checkpoint_async_free(ct_checkpoint_snapshot *snap);

/* --- the save (checkpoint/checkpoint.h's ct_checkpoint_save_step calls it) ------------------------ */

/* Saves the checkpoint of the current step into dir (through tmp): image, then written right
 * away (synchronous) or handed to the writer (args->save_async). Collective. The caller has drained
 * the previous save and updated state->best_model_checkpoint (prev_best: its value before, restored
 * if this save fails). A failure that every process agreed on goes through ct_checkpoint_save_failed
 * (here, or for save_async at the poll or drain that finds it); a failure of the agreement itself
 * (a collective) is returned as it is. */
ct_status ct_checkpoint_save(ct_checkpoint_snapshot *snap, const char *dir, const char *tmp,
                             const char *prev_best);
/* A save of checkpoint `step` into dir (through tmp) failed with s (its message in ct_last_error()),
 * known to every process at the same point; own: this process's own part failed (its message holds
 * the cause), else another's. Rank 0 deletes tmp (nothing of a failed save stays on disk, earlier
 * checkpoints are never touched), saved_step forgets the step, a best_model_checkpoint naming dir
 * goes back to prev_best; then on_save_error decides: "stop" returns s with a message naming the
 * checkpoint, the cause (the file and errno's text) and the newest checkpoint left; "continue" logs
 * the same as a warning (on rank 0 and on the process whose part failed) and returns CT_OK
 * (checkpoint.c). */
ct_status ct_checkpoint_save_failed(ct_checkpoint_snapshot *snap, int64_t step, const char *dir, const char *tmp,
                                    const char *prev_best, bool own, ct_status s);
/* rng_state_<rank>.json's text: the loop's progress (checkpoint.c; malloc'd, NULL when out of
 * memory). */
char *ct_checkpoint_progress_text(const ct_checkpoint_snapshot *snap);
/* The checkpoints rotation deletes now (save_total_limit, the best kept), oldest first, each
 * already renamed to `<dir>.deleting`: *out their new names, to delete (rotation.c; free with
 * ct_checkpoint_list_free). On failure the ones renamed are deleted and nothing is returned. */
ct_status ct_checkpoint_rotate_aside(const ct_checkpoint_snapshot *snap, char ***out, int *n);

#endif
