/* Checkpoint directories: saving one, resuming from one, loading the best (see checkpoint.h); the
 * rotation is in rotation.c, the image a save writes in image.c, the asynchronous writer in
 * checkpoint_async.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_async.h"
#include "checkpoint/checkpoint_impl.h"
#include "checkpoint/checkpoint_io.h"
#include "checkpoint/checkpoint_zero.h"
#include "core/fs.h"
#include "core/log.h"
#include "model/model_io.h"
#include "core/util.h"

#define PREFIX "checkpoint-"

ct_status ct_checkpoint_store_callback_state(const ct_callback_list *callbacks, const ct_trainer_control *control,
                                             ct_trainer_state *state) {
    CT_TRY(ct_callbacks_save_state(callbacks, state->stateful_callbacks));
    /* A checkpoint is taken at a step boundary once that step's log, evaluation and save have run,
     * when their flags are down (their events reset them); a save in progress must not leave
     * should_save up for the resumed run, which would save again at its first chance. */
    ct_trainer_control c = *control;
    c.should_log = c.should_evaluate = c.should_save = false;
    json_t *saved;
    CT_TRY(ct_trainer_control_save_state(&c, &saved));
    if (json_object_set_new(state->stateful_callbacks, "TrainerControl", saved) != 0)
        return ct_error(CT_ERR_NOMEM, "out of memory");
    return CT_OK;
}

/* --- the loop's progress: exact doubles as C99 hex floats, which read back bit for bit --------------- */

static json_t *hex_double(double v) {
    char buf[64];
    snprintf(buf, sizeof buf, "%a", v);
    return json_string(buf);
}

char *ct_checkpoint_progress_text(const ct_checkpoint_snapshot *snap) {
    const ct_train_progress *p = snap->progress;
    json_t *o = json_pack("{s:s, s:i, s:i, s:I, s:I, s:I, s:I, s:b, s:o, s:o, s:I, s:o, s:b, s:o, s:I}", "format",
                          "ctrainer-progress", "rank", snap->rank, "world_size", snap->world_size, "global_batch_size",
                          (json_int_t)(snap->args->per_device_train_batch_size * snap->world_size),
                          "gradient_accumulation_steps", (json_int_t)snap->args->gradient_accumulation_steps, "epoch",
                          (json_int_t)p->epoch, "next_batch", (json_int_t)p->next_batch, "epoch_done", p->epoch_done,
                          "tr_loss", hex_double(p->tr_loss), "total_loss", hex_double(p->total_loss),
                          "last_logged_step", (json_int_t)p->last_logged_step, "grad_norm", hex_double(p->grad_norm),
                          "has_grad_norm", p->has_grad_norm, "learning_rate", hex_double(p->learning_rate),
                          "nan_inf_skipped", (json_int_t)p->nan_inf_skipped);
    /* indented, keys sorted, as ct_json_write_file writes JSON */
    char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(o);
    return text;
}

static ct_status read_double(const json_t *o, const char *file, const char *key, double *out) {
    const char *text = json_string_value(json_object_get(o, key));
    char *end;
    if (!text) return ct_error(CT_ERR_FORMAT, "%s: no \"%s\"", file, key);
    *out = strtod(text, &end);
    if (*end) return ct_error(CT_ERR_FORMAT, "%s: \"%s\" is not a number: '%s'", file, key, text);
    return CT_OK;
}

/* The saved position counts global batches of a given size, grouped into optimizer steps: a run
 * with another global batch (per_device_train_batch_size x processes) or another accumulation would
 * read it as other samples, so those changes are refused; another number of processes with the
 * same global batch is fine. */
static ct_status check_batching(const ct_checkpoint_snapshot *snap, const json_t *o, const char *file) {
    json_int_t g = json_integer_value(json_object_get(o, "global_batch_size")),
               ga = json_integer_value(json_object_get(o, "gradient_accumulation_steps"));
    int64_t mine = snap->args->per_device_train_batch_size * snap->world_size;
    if (g && g != mine)
        return ct_error(CT_ERR_CONFIG,
                        "%s: the checkpoint was taken with a global batch of %lld samples "
                        "(per_device_train_batch_size x processes), this run has %lld (%lld x %d): its position "
                        "would point at other samples",
                        file, (long long)g, (long long)mine, (long long)snap->args->per_device_train_batch_size,
                        snap->world_size);
    if (ga && ga != snap->args->gradient_accumulation_steps)
        return ct_error(CT_ERR_CONFIG,
                        "%s: the checkpoint was taken with gradient_accumulation_steps %lld, this run has %lld", file,
                        (long long)ga, (long long)snap->args->gradient_accumulation_steps);
    return CT_OK;
}

static ct_status read_progress(const ct_checkpoint_snapshot *snap, const char *file, ct_train_progress *p) {
    json_error_t err;
    FILE *f;
    CT_TRY(ct_fopen_read(file, &f));
    json_t *o = json_loadf(f, 0, &err);
    fclose(f);
    if (!o) return ct_error(CT_ERR_FORMAT, "%s:%d:%d: %s", file, err.line, err.column, err.text);
    ct_status bs = check_batching(snap, o, file);
    if (bs != CT_OK) {
        json_decref(o);
        return bs;
    }
    ct_train_progress v = {0};
    json_t *e = json_object_get(o, "epoch"), *b = json_object_get(o, "next_batch"),
           *l = json_object_get(o, "last_logged_step");
    ct_status s = json_is_integer(e) && json_is_integer(b) && json_is_integer(l)
                      ? CT_OK
                      : ct_error(CT_ERR_FORMAT, "%s: epoch, next_batch and last_logged_step must be integers", file);
    if (s == CT_OK) {
        v.epoch = json_integer_value(e);
        v.next_batch = json_integer_value(b);
        v.last_logged_step = json_integer_value(l);
        v.epoch_done = json_is_true(json_object_get(o, "epoch_done"));
        v.has_grad_norm = json_is_true(json_object_get(o, "has_grad_norm"));
        /* absent from checkpoints written before nan_inf_policy existed: none skipped */
        json_t *skipped = json_object_get(o, "nan_inf_skipped");
        v.nan_inf_skipped = json_is_integer(skipped) ? json_integer_value(skipped) : 0;
        if (v.epoch < 0 || v.next_batch < 0 || v.last_logged_step < 0 || v.nan_inf_skipped < 0)
            s = ct_error(CT_ERR_FORMAT, "%s: negative position or count", file);
    }
    if (s == CT_OK) s = read_double(o, file, "tr_loss", &v.tr_loss);
    if (s == CT_OK) s = read_double(o, file, "total_loss", &v.total_loss);
    if (s == CT_OK) s = read_double(o, file, "grad_norm", &v.grad_norm);
    if (s == CT_OK) s = read_double(o, file, "learning_rate", &v.learning_rate);
    json_decref(o);
    if (s == CT_OK) *p = v;
    return s;
}

ct_status ct_checkpoint_save_failed(ct_checkpoint_snapshot *snap, int64_t step, const char *dir, const char *tmp,
                                    const char *prev_best, bool own, ct_status s) {
    char why[2048], newest[4096];
    snprintf(why, sizeof why, "%s", ct_last_error());
    /* Rank 0 made the temporary directory; every process is done writing into it by now. What a full
     * disk holds of a failed save is freed here, and no half-written directory is left behind. */
    struct stat st;
    if (snap->rank == 0 && lstat(tmp, &st) == 0 && ct_remove_tree(tmp) != CT_OK) ct_log_warning("%s", ct_last_error());
    if (*snap->saved_step == step) *snap->saved_step = -1;
    /* The best model cannot point at a checkpoint that does not exist: back to the one before. */
    if (strcmp(snap->state->best_model_checkpoint, dir) == 0)
        snprintf(snap->state->best_model_checkpoint, sizeof snap->state->best_model_checkpoint, "%s", prev_best);
    ct_checkpoint_newest(snap->args->output_dir, newest, sizeof newest);
    if (snap->args->on_save_error == CT_SAVE_ERROR_CONTINUE) {
        if (snap->rank == 0 || own) /* the world's main process, and the one that knows the cause */
            ct_log_warning("step %lld: %s could not be saved: %s; nothing of it was kept, earlier checkpoints are "
                           "intact (the newest: %s); training continues (on_save_error 'continue')",
                           (long long)step, dir, why, newest);
        return CT_OK;
    }
    return ct_error(s,
                    "step %lld: %s could not be saved: %s; nothing of it was kept, earlier checkpoints are intact "
                    "(the newest: %s); training stops (on_save_error 'stop'; 'continue' would go on without it)",
                    (long long)step, dir, why, newest);
}

ct_status ct_checkpoint_save_step(ct_checkpoint_snapshot *snap) {
    /* The previous save (save_async) completes first: one save in flight, and the best checkpoint's
     * existence below is then known. */
    CT_TRY(ct_checkpoint_async_drain(snap));
    char dir[4096], tmp[4200], prev_best[sizeof snap->state->best_model_checkpoint];
    snprintf(prev_best, sizeof prev_best, "%s", snap->state->best_model_checkpoint);
    snprintf(dir, sizeof dir, "%s/" PREFIX "%lld", snap->args->output_dir, (long long)snap->state->global_step);
    snprintf(tmp, sizeof tmp, "%s.tmp", dir);
    if (snap->args->save_strategy == CT_INTERVAL_BEST && snap->state->best_global_step == snap->state->global_step)
        snprintf(snap->state->best_model_checkpoint, sizeof snap->state->best_model_checkpoint, "%s", dir);
    else if (snap->state->best_global_step > 0) {
        char best[4096];
        struct stat st;
        snprintf(best, sizeof best, "%s/" PREFIX "%lld", snap->args->output_dir,
                 (long long)snap->state->best_global_step);
        if (snap->state->best_global_step == snap->state->global_step || stat(best, &st) == 0)
            snprintf(snap->state->best_model_checkpoint, sizeof snap->state->best_model_checkpoint, "%s", best);
    }
    *snap->saved_step = snap->state->global_step;
    *snap->saved_epoch_done = snap->progress->epoch_done;
    /* its image, then written here or by the writer thread (checkpoint/checkpoint_async.h) */
    return ct_checkpoint_save(snap, dir, tmp, prev_best);
}

ct_status ct_checkpoint_resume(ct_checkpoint_snapshot *snap, const char *spec) {
    char dir[4096], path[4300];
    CT_TRY(ct_checkpoint_resolve(snap->args->output_dir, spec, dir, sizeof dir));
    snprintf(path, sizeof path, "%s/optimizer.h5", dir);
    if (access(path, F_OK) != 0)
        return ct_error(CT_ERR_STATE, "%s was saved with save_only_model: it has no optimizer state to resume from",
                        dir);
    ct_train_progress p;
    /* A run resumed on another number of processes has no file of its own: the position is global
     * (a global batch index), so rank 0's says where every process continues. */
    snprintf(path, sizeof path, "%s/rng_state_%d.json", dir, snap->rank);
    if (access(path, F_OK) != 0) snprintf(path, sizeof path, "%s/rng_state_0.json", dir);
    CT_TRY(read_progress(snap, path, &p));
    ct_trainer_state st;
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    CT_TRY(ct_trainer_state_init(&st));
    ct_status s = ct_trainer_state_load(&st, path);
    /* Everything that can fail on a mismatch (another model, another optimizer) comes before the
     * trainer state and the progress the snapshot points at change. */
    if (s == CT_OK) {
        snprintf(path, sizeof path, "%s/model.h5", dir);
        s = ct_model_load_h5(snap->model, path);
    }
    if (s == CT_OK) {
        snprintf(path, sizeof path, "%s/optimizer.h5", dir);
        s = snap->zero1 ? ct_zero1_load_h5(snap->optimizer, snap->comm, 0, path)
                        : ct_optimizer_load_h5(snap->optimizer, path);
    }
    if (s == CT_OK) {
        snprintf(path, sizeof path, "%s/scheduler.json", dir);
        s = ct_scheduler_load_json(snap->scheduler, path);
    }
    if (s == CT_OK) s = ct_callbacks_load_state(snap->callbacks, st.stateful_callbacks, "stateful_callbacks");
    const json_t *control = s == CT_OK ? json_object_get(st.stateful_callbacks, "TrainerControl") : NULL;
    if (control) s = ct_trainer_control_load_state(snap->control, control, "stateful_callbacks.TrainerControl");
    if (s != CT_OK) {
        ct_trainer_state_free(&st);
        return ct_error_prefix(s, "resume from %s: ", dir);
    }
    st.is_world_process_zero = snap->state->is_world_process_zero;
    st.is_local_process_zero = snap->state->is_local_process_zero;
    ct_trainer_state_free(snap->state);
    *snap->state = st;
    *snap->progress = p;
    /* Info: printed where the log level lets it (the main process by default), as HF's logger.info. */
    ct_log_info("Resuming from %s: step %lld, epoch %lld, batch %lld%s", dir, (long long)st.global_step,
                (long long)p.epoch, (long long)p.next_batch, p.epoch_done ? " (epoch done)" : "");
    return CT_OK;
}

ct_status ct_checkpoint_finish(ct_checkpoint_snapshot *snap) {
    CT_TRY(ct_checkpoint_async_drain(snap)); /* every save committed before the last rotation */
    if (snap->rank != 0 || snap->args->save_total_limit != 1 || !snap->state->best_model_checkpoint[0])
        return CT_OK;
    char **list;
    int n;
    CT_TRY(ct_checkpoint_list(snap->args->output_dir, &list, &n));
    ct_status s = CT_OK;
    for (int i = 0; i < n && s == CT_OK; i++)
        if (!ct_checkpoint_same_path(list[i], snap->state->best_model_checkpoint)) s = ct_remove_tree(list[i]);
    ct_checkpoint_list_free(list, n);
    return s;
}

ct_status ct_checkpoint_load_best(ct_checkpoint_snapshot *snap) {
    CT_TRY(ct_checkpoint_async_drain(snap)); /* the best checkpoint may still be being written */
    char path[4200];
    snprintf(path, sizeof path, "%s/model.h5", snap->state->best_model_checkpoint);
    ct_status s = ct_model_load_h5(snap->model, path);
    if (s != CT_OK) return ct_error_prefix(s, "load_best_model_at_end: ");
    return CT_OK;
}
