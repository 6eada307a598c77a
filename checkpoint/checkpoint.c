/* Checkpoint directories: saving one, resuming from one, loading the best (see checkpoint.h); the
 * rotation is in rotation.c, the image a save writes in image.c, the asynchronous writer in
 * checkpoint_async.c. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/random.h>
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
    /* The control as it is while the checkpoint is written, before on_save lowers should_save, as
     * HF's _save_checkpoint records it (so a scheduled save says should_save true). A resumed run
     * never acts on these flags: on_step_begin lowers log/evaluate/save before its first decision. */
    json_t *saved;
    CT_TRY(ct_trainer_control_save_state(control, &saved));
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

void ct_checkpoint_pending_file(int64_t step, int64_t checkpoint_step, char *out, size_t cap) {
    if (step == checkpoint_step)
        snprintf(out, cap, "model.h5");
    else
        snprintf(out, cap, "eval_pending_%lld.h5", (long long)step);
}

void ct_pending_evals_clear(ct_pending_evals *p) {
    free(p->items);
    *p = (ct_pending_evals){.last_step = -1};
}

/* {"last_step": N, "pending": [{"step", "epoch" (hex), "file"}, ...]}: the evaluator's record. */
static json_t *evals_json(const ct_pending_evals *e, int64_t checkpoint_step) {
    json_t *list = json_array();
    for (int i = 0; list && i < e->n; i++) {
        char file[64];
        ct_checkpoint_pending_file(e->items[i].step, checkpoint_step, file, sizeof file);
        json_array_append_new(list, json_pack("{s:I, s:o, s:s}", "step", (json_int_t)e->items[i].step, "epoch",
                                              hex_double(e->items[i].epoch), "file", file));
    }
    return json_pack("{s:I, s:o}", "last_step", (json_int_t)e->last_step, "pending", list);
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
    if (o && p->run_id[0] && json_object_set_new(o, "run_id", json_string(p->run_id))) {
        json_decref(o);
        o = NULL;
    }
    /* the shuffle the position counts in (a resume with another one is refused) */
    if (o && snap->args->data_seed >= 0 &&
        json_object_set_new(o, "data_seed", json_integer((json_int_t)snap->args->data_seed))) {
        json_decref(o);
        o = NULL;
    }
    /* the epoch's length the position counts in (a resume with another training set size is refused) */
    if (o && snap->batches_per_epoch > 0 &&
        json_object_set_new(o, "batches_per_epoch", json_integer((json_int_t)snap->batches_per_epoch))) {
        json_decref(o);
        o = NULL;
    }
    /* GradScaler's state_dict ("scale", "_growth_tracker") and the steps it skipped */
    if (o && p->has_scaler &&
        json_object_set_new(o, "grad_scaler",
                            json_pack("{s:o, s:I, s:I}", "scale", hex_double(p->scaler.scale), "growth_tracker",
                                      (json_int_t)p->scaler.growth_tracker, "skipped", (json_int_t)p->scaler_skipped))) {
        json_decref(o);
        o = NULL;
    }
    if (o && snap->evals && json_object_set_new(o, "eval_async", evals_json(snap->evals, snap->state->global_step))) {
        json_decref(o);
        o = NULL;
    }
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

/* "grad_scaler" (absent: the run had no loss scaling) into p; what the values mean is
 * ct_checkpoint_validate's to check. */
static ct_status read_scaler(const json_t *o, const char *file, ct_train_progress *p) {
    if (!o) return CT_OK;
    const json_t *tracker = json_object_get(o, "growth_tracker"), *skipped = json_object_get(o, "skipped");
    if (!json_is_object(o) || !json_is_integer(tracker) || !json_is_integer(skipped))
        return ct_error(CT_ERR_FORMAT, "%s: grad_scaler must be an object with integers growth_tracker and skipped",
                        file);
    p->has_scaler = true;
    p->scaler.growth_tracker = json_integer_value(tracker);
    p->scaler_skipped = json_integer_value(skipped);
    double scale;
    if (read_double(o, file, "scale", &scale) != CT_OK)
        return ct_error(CT_ERR_FORMAT, "%s: grad_scaler.scale must be a number written as text, as the other reals",
                        file);
    /* the scale is a float32: a value it cannot hold was not written by a run */
    p->scaler.scale = fabs(scale) <= FLT_MAX ? (float)scale : (float)INFINITY;
    if ((double)p->scaler.scale != scale && !isnan(scale))
        return ct_error(CT_ERR_FORMAT, "%s: grad_scaler.scale: %.17g is not a float32", file, scale);
    return CT_OK;
}

/* rng_state_0.json's "eval_async" (absent: no evaluator ran) into out: every value in range and
 * consistent with the checkpoint's step, every file one of its own. */
static ct_status read_evals(const json_t *o, const char *file, const char *dir, int64_t global_step,
                            ct_pending_evals *out) {
    ct_pending_evals_clear(out);
    if (!o) return CT_OK;
    const json_t *last = json_object_get(o, "last_step"), *list = json_object_get(o, "pending");
    if (!json_is_integer(last) || json_integer_value(last) < -1 || json_integer_value(last) > global_step)
        return ct_error(CT_ERR_FORMAT, "%s: eval_async.last_step must be an integer in [-1, %lld] (the checkpoint's "
                        "step)", file, (long long)global_step);
    if (!json_is_array(list) || json_array_size(list) > 64)
        return ct_error(CT_ERR_FORMAT, "%s: eval_async.pending must be a list of at most 64 evaluations", file);
    out->last_step = json_integer_value(last);
    snprintf(out->model_file, sizeof out->model_file, "%s/model.h5", dir);
    int n = (int)json_array_size(list);
    if (n && !(out->items = calloc((size_t)n, sizeof *out->items))) return ct_error(CT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        const json_t *e = json_array_get(list, (size_t)i), *step = json_object_get(e, "step");
        const char *name = json_string_value(json_object_get(e, "file"));
        ct_pending_eval *q = &out->items[i];
        char want[64];
        q->step = json_integer_value(step);
        ct_checkpoint_pending_file(q->step, global_step, want, sizeof want);
        ct_status s = json_is_integer(step) && q->step >= 0 && q->step <= out->last_step &&
                              (i == 0 || q->step > out->items[i - 1].step)
                          ? read_double(e, file, "epoch", &q->epoch)
                          : ct_error(CT_ERR_FORMAT, "%s: eval_async.pending[%d].step must be an integer above the one "
                                     "before and at most last_step %lld", file, i, (long long)out->last_step);
        if (s == CT_OK && !(isfinite(q->epoch) && q->epoch >= 0))
            s = ct_error(CT_ERR_FORMAT, "%s: eval_async.pending[%d].epoch must be a finite number >= 0", file, i);
        if (s == CT_OK && (!name || strcmp(name, want) != 0))
            s = ct_error(CT_ERR_FORMAT, "%s: eval_async.pending[%d].file must be '%s' (the evaluation of step %lld)",
                         file, i, want, (long long)q->step);
        if (s != CT_OK) {
            ct_pending_evals_clear(out);
            return s;
        }
        out->n = i + 1;
        snprintf(q->file, sizeof q->file, "%s/%s", dir, name);
    }
    return CT_OK;
}

void ct_train_progress_new_run_id(char *id) {
    unsigned char bytes[CT_RUN_ID_LEN / 2];
    if (getrandom(bytes, sizeof bytes, 0) != (ssize_t)sizeof bytes) {
        /* no entropy source: the clock, the process and the address space's layout tell runs apart */
        uint64_t mix = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&mix;
        for (size_t i = 0; i < sizeof bytes; i++) {
            mix = mix * 6364136223846793005ULL + 1442695040888963407ULL;
            bytes[i] = (unsigned char)(mix >> 56);
        }
    }
    for (size_t i = 0; i < sizeof bytes; i++) snprintf(id + 2 * i, 3, "%02x", bytes[i]);
}

/* The optional "run_id" (absent from checkpoints of earlier versions: left empty). */
static ct_status read_run_id(const json_t *o, const char *file, char *id) {
    const json_t *v = json_object_get(o, "run_id");
    id[0] = '\0';
    if (!v) return CT_OK;
    const char *text = json_string_value(v);
    size_t n = text ? strlen(text) : 0;
    if (!text || n == 0 || n > CT_RUN_ID_LEN || strspn(text, "0123456789abcdef") != n)
        return ct_error(CT_ERR_FORMAT, "%s: \"run_id\" must be a string of 1 to %d hexadecimal digits", file,
                        CT_RUN_ID_LEN);
    memcpy(id, text, n + 1);
    return CT_OK;
}

/* Parses rng_state_<rank>.json into *p and returns its JSON in *json (the caller's reference); what
 * the values mean is ct_checkpoint_validate's to check. */
static ct_status read_progress(const char *file, ct_train_progress *p, json_t **json) {
    json_error_t err;
    FILE *f;
    CT_TRY(ct_fopen_read(file, &f));
    json_t *o = json_loadf(f, 0, &err);
    fclose(f);
    if (!o) return ct_error(CT_ERR_FORMAT, "%s:%d:%d: %s", file, err.line, err.column, err.text);
    if (!json_is_object(o)) {
        json_decref(o);
        return ct_error(CT_ERR_FORMAT, "%s: not a JSON object", file);
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
    }
    if (s == CT_OK) s = read_double(o, file, "tr_loss", &v.tr_loss);
    if (s == CT_OK) s = read_double(o, file, "total_loss", &v.total_loss);
    if (s == CT_OK) s = read_double(o, file, "grad_norm", &v.grad_norm);
    if (s == CT_OK) s = read_double(o, file, "learning_rate", &v.learning_rate);
    if (s == CT_OK) s = read_scaler(json_object_get(o, "grad_scaler"), file, &v);
    if (s == CT_OK) s = read_run_id(o, file, v.run_id);
    if (s != CT_OK) {
        json_decref(o);
        return s;
    }
    *p = v;
    *json = o;
    return CT_OK;
}

/* N of a directory named checkpoint-N (its last path component), else -1. */
static int64_t dir_step(const char *dir) {
    const char *name = strrchr(dir, '/');
    name = name ? name + 1 : dir;
    if (strncmp(name, PREFIX, strlen(PREFIX)) != 0) return -1;
    char *end;
    long long n = strtoll(name + strlen(PREFIX), &end, 10);
    return *end || end == name + strlen(PREFIX) || n < 0 ? -1 : (int64_t)n;
}

/* A resume from a checkpoint older than output_dir's newest: the run will save over the later ones as
 * it reaches their steps, as Hugging Face's does; said, since their contents are then gone. */
static void warn_later_checkpoints(const char *output_dir, int64_t step) {
    char **list;
    int n;
    if (ct_checkpoint_list(output_dir, &list, &n) != CT_OK) {
        ct_error_clear();
        return;
    }
    int later = 0;
    for (int i = 0; i < n; i++) later += dir_step(list[i]) > step;
    if (later)
        ct_log_warning("output_dir '%s' holds %d checkpoint%s of later steps than %lld (the newest: %s): a "
                       "checkpoint this run saves at such a step replaces the one there",
                       output_dir, later, later == 1 ? "" : "s", (long long)step, list[n - 1]);
    ct_checkpoint_list_free(list, n);
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
    /* "best" saves right after the evaluation that found a new best (a stop signal may save in
     * between); ctrainer names it best_model_checkpoint, which HF 4.51 leaves unset under "best" */
    if (snap->args->save_strategy == CT_INTERVAL_BEST && snap->state->has_best &&
        snap->progress->best_step == snap->state->global_step)
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
    if (access(path, F_OK) != 0) {
        /* a run's output_dir (its final model) named in place of one of its checkpoints */
        char **list;
        int n;
        if (ct_checkpoint_list(dir, &list, &n) == CT_OK && n > 0) {
            ct_status s = ct_error(CT_ERR_STATE, "%s is a run's output_dir, not a checkpoint: resume from one of its "
                                   "checkpoints ('%s' is the newest), or with --output_dir %s "
                                   "--resume_from_checkpoint latest", dir, list[n - 1], dir);
            ct_checkpoint_list_free(list, n);
            return s;
        }
        ct_error_clear();
        return ct_error(CT_ERR_STATE, "%s was saved with save_only_model: it has no optimizer state to resume from",
                        dir);
    }
    ct_train_progress p;
    json_t *progress_json = NULL;
    /* A run resumed on another number of processes has no file of its own: the position is global
     * (a global batch index), so rank 0's says where every process continues. */
    char progress_file[4300], state_file[4300];
    int progress_rank = snap->rank;
    snprintf(progress_file, sizeof progress_file, "%s/rng_state_%d.json", dir, snap->rank);
    if (access(progress_file, F_OK) != 0) {
        progress_rank = 0;
        snprintf(progress_file, sizeof progress_file, "%s/rng_state_0.json", dir);
    }
    CT_TRY(read_progress(progress_file, &p, &progress_json));
    ct_trainer_state st;
    snprintf(state_file, sizeof state_file, "%s/trainer_state.json", dir);
    ct_status s = ct_trainer_state_init(&st);
    if (s == CT_OK) s = ct_trainer_state_load(&st, state_file);
    /* the bytes are the ones written (the manifest); now what they say, before anything is loaded */
    ct_checkpoint_read r = {.dir = dir,
                            .dir_step = dir_step(dir),
                            .progress_file = progress_file,
                            .progress_rank = progress_rank,
                            .progress_json = progress_json,
                            .progress = &p,
                            .state_file = state_file,
                            .state = &st,
                            .scheduler_needs_metric = ct_scheduler_needs_metric(snap->scheduler)};
    char sched_type[128];
    if (s == CT_OK) {
        snprintf(path, sizeof path, "%s/optimizer.h5", dir);
        s = ct_optimizer_read_step_h5(path, &r.optimizer_step);
    }
    if (s == CT_OK) {
        snprintf(path, sizeof path, "%s/scheduler.json", dir);
        s = ct_scheduler_read_json(path, sched_type, sizeof sched_type, &r.scheduler);
        r.scheduler_same_type = s == CT_OK && strcmp(sched_type, ct_scheduler_name(snap->scheduler)) == 0;
    }
    if (s == CT_OK) s = ct_checkpoint_validate(snap, &r);
    /* Only the world's process zero runs an evaluator, and rank 0's file holds its record. */
    if (s == CT_OK && snap->evals)
        s = read_evals(json_object_get(progress_json, "eval_async"), progress_file, dir, st.global_step, snap->evals);
    json_decref(progress_json);
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
    /* Hugging Face's _load_callback_state: callbacks and TrainerControl come back only when asked to
     * (restore_callback_states_from_checkpoint); otherwise they start afresh, as in a new run. */
    bool restore = snap->args->restore_callback_states_from_checkpoint;
    if (s == CT_OK && restore)
        s = ct_callbacks_load_state(snap->callbacks, st.stateful_callbacks, "stateful_callbacks");
    const json_t *control =
        s == CT_OK && restore ? json_object_get(st.stateful_callbacks, "TrainerControl") : NULL;
    if (control) s = ct_trainer_control_load_state(snap->control, control, "stateful_callbacks.TrainerControl");
    if (s != CT_OK) {
        ct_trainer_state_free(&st);
        if (snap->evals) ct_pending_evals_clear(snap->evals);
        return ct_error_prefix(s, "resume from %s: ", dir);
    }
    /* The best checkpoint's name is the old run's: the checkpoints may have moved since. */
    ct_checkpoint_rederive_best(st.best_model_checkpoint, sizeof st.best_model_checkpoint, snap->args->output_dir,
                                dir, snap->rank == 0);
    /* The step flags say what the saved step decided, and that was done: a resumed run entering at an
     * epoch's end (no step begin lowers them first) must not log, evaluate or save it again. */
    snap->control->should_log = snap->control->should_evaluate = snap->control->should_save = false;
    st.is_world_process_zero = snap->state->is_world_process_zero;
    st.is_local_process_zero = snap->state->is_local_process_zero;
    ct_trainer_state_free(snap->state);
    *snap->state = st;
    *snap->progress = p;
    /* Info: printed where the log level lets it (the main process by default), as HF's logger.info. */
    ct_log_info("Resuming from %s: step %lld, epoch %lld, batch %lld%s", dir, (long long)st.global_step,
                (long long)p.epoch, (long long)p.next_batch, p.epoch_done ? " (epoch done)" : "");
    if (snap->rank == 0) warn_later_checkpoints(snap->args->output_dir, st.global_step);
    return CT_OK;
}

ct_status ct_checkpoint_load_best(ct_checkpoint_snapshot *snap) {
    CT_TRY(ct_checkpoint_async_drain(snap)); /* the best checkpoint may still be being written */
    ct_status s = ct_checkpoint_load_model(snap->model, snap->state->best_model_checkpoint);
    if (s != CT_OK) return ct_error_prefix(s, "load_best_model_at_end: ");
    return CT_OK;
}
