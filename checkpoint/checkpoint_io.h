/* The files of a checkpoint directory, each written and read on its own, and the manifest that
 * says whether a directory is a whole checkpoint.
 *
 *   model.h5             model/model_io.h
 *   optimizer.h5         every optimizer state tensor (exp_avg, exp_avg_sq, momentum_buffer, ...) as
 *                        a 1-D dataset laid out like the flat parameter buffer, and the attributes
 *                        "optim" (its name), "step" (steps taken, an int64) and "config" (the
 *                        ct_optim_config as JSON with TrainingArguments' keys), so a resume can say
 *                        which setting changed
 *   scheduler.json       {"lr_scheduler_type": ..., "state": ct_scheduler_state_to_json(...)}
 *   trainer_state.json   callbacks/state.h
 *   rng_state_<rank>.json  what the process needs to continue exactly: the loader position and the
 *                        loop's carried values (ct_train_progress, checkpoint/snapshot.h; checkpoint.c)
 *   eval_pending_<step>.h5  the weights of an asynchronous evaluation of an earlier step whose result
 *                        was not recorded yet (model.h5's format; rng_state_0.json lists them)
 *   training_args.json, run_config.json
 *   manifest.json        {"format": "ctrainer-checkpoint", "version": 1, "files": {"model.h5":
 *                        {"size": bytes, "crc32": "8 hex digits"}, ...}} over every other file
 *
 * Crash safety: files are written into `<dir>.tmp`, each fsync'd, the manifest last, then the
 * directory is fsync'd and renamed to its final name and the parent fsync'd. A directory is a
 * checkpoint only if its manifest exists, parses, and every file it lists has the listed size and
 * CRC-32 (zlib's); anything else is reported with the name of the file that does not match. Files
 * the manifest does not list are ignored. */
#ifndef CT_CHECKPOINT_IO_H
#define CT_CHECKPOINT_IO_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"
#include "model/model.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"

/* --- optimizer and scheduler files --------------------------------------------------------------- */

ct_status ct_optimizer_save_h5(ct_optimizer *opt, const char *file);

/* What optimizer.h5 holds, apart from the optimizer: its name, configuration, step count and named
 * state tensors. ct_optimizer_snapshot_view points the tensors at the optimizer's own (for a write
 * right away: ct_optimizer_save_h5 is view + save); an asynchronous save (checkpoint/checkpoint_async.h)
 * replaces them with host copies it owns, so that the writer thread never touches the optimizer.
 * Both paths write the file through ct_optimizer_snapshot_save_h5: the same bytes. */
typedef struct ct_optimizer_snapshot {
    char name[64];
    ct_optim_config config;
    int64_t step;
    int n_state;
    char state_names[CT_OPTIM_MAX_STATE][64];
    ct_tensor state[CT_OPTIM_MAX_STATE]; /* CPU tensors when written */
} ct_optimizer_snapshot;
ct_status ct_optimizer_snapshot_view(ct_optimizer *opt, ct_optimizer_snapshot *out);
ct_status ct_optimizer_snapshot_save_h5(const ct_optimizer_snapshot *snap, const char *file);
/* Restores the state tensors and the step count into opt, which must have been created over the same
 * parameters. A different optimizer ("optimizer.h5 holds 'sgd' state, this run uses 'adamw'"), a
 * different layout (sizes) or a changed hyper-parameter that changes the meaning of the state
 * (adam_beta1/2, amsgrad; momentum, dampening) is CT_ERR_CONFIG naming it and both values;
 * learning_rate, weight_decay, adam_epsilon and nesterov may change: the run's own values apply, and a
 * warning names a changed rate (Hugging Face's resume would keep the checkpoint's). HDF5 converts f64 <-> f32.
 * A missing or corrupt file is CT_ERR_IO / CT_ERR_FORMAT naming it. On failure opt is unchanged. */
ct_status ct_optimizer_load_h5(ct_optimizer *opt, const char *file);
/* The step count optimizer.h5 records, without loading anything (a resume checks it first). */
ct_status ct_optimizer_read_step_h5(const char *file, int64_t *step);

ct_status ct_scheduler_save_json(const ct_scheduler *s, const char *file);
/* The text ct_scheduler_save_json writes (malloc'd; NULL when out of memory). */
char *ct_scheduler_json_text(const ct_scheduler *s);
/* CT_ERR_CONFIG when the file's lr_scheduler_type differs from s's (naming both). */
ct_status ct_scheduler_load_json(ct_scheduler *s, const char *file);
/* What scheduler.json holds, without loading it: its lr_scheduler_type and state. */
ct_status ct_scheduler_read_json(const char *file, char *type, size_t cap, ct_scheduler_state *st);

/* --- whole directories ------------------------------------------------------------------------- */

/* Writes dir/manifest.json over every regular file in dir (except the manifest; subdirectories are
 * not listed). Each file is fsync'd as it is checksummed, then the manifest and dir itself, so the
 * writers of the files need not sync them. */
ct_status ct_checkpoint_write_manifest(const char *dir);
/* The same over the n files named (a saved model in a run's output_dir, whose other files change
 * later: results, trainer_state.json, the model card). */
ct_status ct_checkpoint_write_manifest_of(const char *dir, const char *const *names, int n);
/* CT_OK when dir is a whole checkpoint; otherwise CT_ERR_FORMAT (or CT_ERR_IO) with a message that
 * names the directory and the file at fault: "checkpoint-40: model.h5 is 1024 bytes, the manifest
 * says 4096 (truncated?)", "...: optimizer.h5 does not match its checksum", "...: no manifest.json
 * (an incomplete save)". */
ct_status ct_checkpoint_verify(const char *dir);
/* Whether dir holds a manifest.json of ctrainer's format (a regular file; its entries are not
 * checked against the files): what makes a directory one that ctrainer wrote, for rotation, which
 * deletes nothing else. */
bool ct_checkpoint_has_manifest(const char *dir);
/* The run identity recorded in checkpoint dir's progress file (rng_state_0.json; see
 * ct_train_progress.run_id) into id; false (id "") when it records none: saved before runs had one,
 * by save_only_model, or unreadable. Never blocks on a FIFO. */
bool ct_checkpoint_run_id(const char *dir, char *id, size_t cap);
/* Whether `name` is one of the files a saved model or checkpoint in dir is made of: dir's manifest of
 * ctrainer's format itself, or a file it lists. */
bool ct_checkpoint_manifest_lists(const char *dir, const char *name);
/* The one reader of a saved model directory (a checkpoint-N, or a run's output_dir, whose saved model
 * has a manifest of its own files): verifies dir (ct_checkpoint_verify), then loads dir/model.h5 into
 * m, so that a flipped bit is an error naming the file instead of a model that evaluates to 1e36.
 * `ctrainer evaluate/predict/generate --model`, the best model at the end of training and resume
 * (through ct_checkpoint_resolve) read weights only after this check; export verifies first too. */
ct_status ct_checkpoint_load_model(ct_model *m, const char *dir);
/* Renames `tmp` to `dir` (replacing an older `dir`) after fsyncing tmp, then fsyncs the parent. An
 * existing `dir` is swapped with tmp in one step (renameat2 RENAME_EXCHANGE), so `dir` is a whole
 * checkpoint at every moment, and the old one is then deleted; where the file system cannot swap, the
 * old one goes to `<dir>.old`, the new one in, the old one is deleted (a crash in between leaves both
 * whole copies, under `<dir>.old` and `tmp`). */
ct_status ct_checkpoint_commit(const char *tmp, const char *dir);

/* The newest valid checkpoint-<step> directory of output_dir into out. Invalid ones met on the way
 * are skipped with a warning on stderr naming them and the reason. CT_ERR_IO "no checkpoint in
 * '<output_dir>'" when there is none (also when all are invalid: the message lists them). */
ct_status ct_checkpoint_find_latest(const char *output_dir, char *out, size_t cap);

/* Resolves --resume_from_checkpoint: "latest" (or NULL) -> ct_checkpoint_find_latest; a directory ->
 * verified (an invalid one named explicitly is an error, not a warning). Errors are prefixed
 * "resume_from_checkpoint '<spec>': ". */
ct_status ct_checkpoint_resolve(const char *output_dir, const char *spec, char *out, size_t cap);

#endif
