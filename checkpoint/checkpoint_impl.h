/* What the checkpoint files share among themselves (never installed): the image of a save, its
 * writers, the failure path and rotation.
 *
 * An image is what one process's files of a checkpoint hold at this step, taken from a
 * ct_checkpoint_snapshot on the training thread (checkpoint/image.c): the model's flat parameters and
 * buffers, the optimizer's state tensors and step count (for ZeRO-1 gathered to rank 0 by a
 * collective, here), the scheduler, trainer_state.json (after the callbacks stored their state),
 * training_args.json, run_config.json and this process's progress file as text. Writing it into
 * `<dir>.tmp`, the manifest and the commit (rename) need nothing else, so the synchronous and the
 * asynchronous save share every writer and produce the same bytes. A synchronous save's image points
 * at the live tensors and is written right away; an asynchronous one copies them to host memory
 * (buffers reused from the previous save) and goes to the writer thread (checkpoint_async.c). */
#ifndef CT_CHECKPOINT_IMPL_H
#define CT_CHECKPOINT_IMPL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "checkpoint/checkpoint_io.h"
#include "checkpoint/snapshot.h"
#include "core/host_copy.h"

typedef struct ct_checkpoint_image {
    int64_t step;
    char dir[4096], tmp[4200];
    char prev_best[1024]; /* best_model_checkpoint before this save (restored if it fails) */
    int rank;
    bool shared;        /* rank 0: the files every process shares */
    bool owns_weights;  /* values and buffers are copies owned here (else views of the live ones) */
    bool owns_optim;    /* optim.state are copies owned here */
    bool has_copies;    /* copies holds the owned copies (taken without waiting: read after its wait) */
    ct_host_copies copies;
    const ct_model *model; /* names, shapes and offsets only (fixed once the model is built) */
    ct_tensor values, buffers;
    json_t *model_spec;    /* a private copy of the run config's "model" (NULL: none) */
    char *training_args, *run_config, *trainer_state, *scheduler, *progress;
    bool has_optimizer;
    ct_optimizer_snapshot optim;
    ct_optimizer *gathered; /* ZeRO-1: the full state gathered to rank 0; optim points into it */
    ct_pending_evals evals; /* eval_async's unrecorded evaluations (rank 0); copies when owns_weights */
} ct_checkpoint_image;

void ct_checkpoint_image_free(ct_checkpoint_image *im);
/* Collective (the ZeRO-1 gather and the agreement): every process's image of this step, and the
 * temporary directory made (rank 0). copy: host copies owned by the image (spare: the previous
 * image, whose memory is taken over where it fits), else views of the live tensors. *out is NULL on
 * failure (on every process); *comm_failed is set when the agreement itself failed, *own when this
 * process's own part failed. */
ct_status ct_checkpoint_image_take(ct_checkpoint_snapshot *snap, const char *dir, const char *tmp, bool copy,
                                   ct_checkpoint_image *spare, ct_checkpoint_image **out, bool *comm_failed,
                                   bool *own);
/* This process's files into the temporary directory (any thread; no communication). */
ct_status ct_checkpoint_image_write(const ct_checkpoint_image *im);
/* Rank 0, once every process's part is written: the manifest, then the rename. */
ct_status ct_checkpoint_image_commit(const ct_checkpoint_image *im);
/* Collective: CT_OK on every process only if s is CT_OK on every process; a process that failed
 * returns its own error, the others one that says another process failed while `what`.
 * *comm_failed (may be NULL) is set when the agreement itself failed: then the processes may not
 * agree. */
ct_status ct_checkpoint_agree(const ct_checkpoint_snapshot *snap, ct_status s, const char *dir, const char *what,
                              bool *comm_failed);

/* The checkpoint file holding the weights of an unrecorded evaluation of `step` in the checkpoint of
 * `checkpoint_step`: model.h5 for its own step (the same weights), else eval_pending_<step>.h5. */
void ct_checkpoint_pending_file(int64_t step, int64_t checkpoint_step, char *out, size_t cap);

/* The newest checkpoint directory of output_dir, "none" when there is none (for messages: listed,
 * not verified; rotation.c). */
void ct_checkpoint_newest(const char *output_dir, char *out, size_t cap);
/* stat-equal: the same directory under two names. */
bool ct_checkpoint_same_path(const char *a, const char *b);
/* The step of a directory name "checkpoint-<step>" written as a save writes it (digits only, no
 * leading zero), else -1 (rotation.c). */
int64_t ct_checkpoint_step_of(const char *name);
/* A resumed run's best_model_checkpoint (best, cap bytes) made to name a directory that exists
 * where it can: checkpoint-<its step> beside `resumed` (the checkpoint resumed from: the old
 * output_dir, wherever it is now), else the name as it is, else output_dir's of that step; when none
 * exists the name stays. report: say what changed, or warn that the best is gone (one process
 * does) (rotation.c). */
void ct_checkpoint_rederive_best(char *best, size_t cap, const char *output_dir, const char *resumed, bool report);

/* What a resume read from a checkpoint's files, for ct_checkpoint_validate. */
typedef struct ct_checkpoint_read {
    const char *dir;
    int64_t dir_step;                  /* N of a directory named checkpoint-N, else -1 */
    const char *progress_file;         /* rng_state_<rank>.json (rank 0's for a rank without one) */
    int progress_rank;                 /* the rank that file is for */
    const json_t *progress_json;       /* its keys, also those ct_train_progress does not keep */
    const ct_train_progress *progress; /* and as parsed */
    const char *state_file;            /* trainer_state.json */
    const ct_trainer_state *state;
    int64_t optimizer_step;       /* optimizer.h5's step count */
    ct_scheduler_state scheduler; /* scheduler.json's state */
    bool scheduler_same_type;     /* of this run's type (else its load names the difference) */
    bool scheduler_needs_metric;  /* reduce_lr_on_plateau: its step counts evaluations */
} ct_checkpoint_read;
/* The one check of what a checkpoint means (checkpoint/validate.c): every field a resume uses within
 * its range, consistent with the other files and with this run's arguments (snap->args, world size,
 * batches per epoch). CT_ERR_FORMAT naming the file and the key; CT_ERR_CONFIG for a checkpoint of
 * another batching. */
ct_status ct_checkpoint_validate(const ct_checkpoint_snapshot *snap, const ct_checkpoint_read *r);

#endif
