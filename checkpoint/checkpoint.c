/* Checkpoint directories: saving one, rotating old ones, loading the best (see checkpoint.h). */
#define _GNU_SOURCE /* nftw */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_async.h"
#include "checkpoint/checkpoint_io.h"
#include "checkpoint/checkpoint_zero.h"
#include "core/log.h"
#include "model/model_io.h"
#include "trainer/trainer_impl.h"

#define PREFIX "checkpoint-"

/* The step of a "checkpoint-<digits>" name, or -1. */
static int64_t checkpoint_step(const char *name) {
    size_t n = strlen(PREFIX);
    if (strncmp(name, PREFIX, n) != 0 || !name[n]) return -1;
    char *end;
    long long v = strtoll(name + n, &end, 10);
    return *end || v < 0 ? -1 : v;
}

typedef struct entry {
    int64_t step;
    char *path;
} entry;

static int by_step(const void *a, const void *b) {
    int64_t x = ((const entry *)a)->step, y = ((const entry *)b)->step;
    return (x > y) - (x < y);
}

ct_status ct_checkpoint_list(const char *dir, char ***out, int *n) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? CT_OK : ct_error(CT_ERR_IO, "cannot list '%s': %s", dir, strerror(errno));
    entry *e = NULL;
    int cnt = 0, cap = 0;
    ct_status s = CT_OK;
    for (struct dirent *de; (de = readdir(d));) {
        int64_t step = checkpoint_step(de->d_name);
        if (step < 0) continue;
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        if (cnt == cap) {
            cap = cap ? cap * 2 : 8;
            entry *grown = realloc(e, (size_t)cap * sizeof *e);
            if (!grown) {
                s = ct_error(CT_ERR_NOMEM, "out of memory");
                break;
            }
            e = grown;
        }
        e[cnt].step = step;
        e[cnt].path = strdup(path);
        if (!e[cnt++].path) {
            s = ct_error(CT_ERR_NOMEM, "out of memory");
            break;
        }
    }
    closedir(d);
    char **list = s == CT_OK && cnt ? malloc((size_t)cnt * sizeof *list) : NULL;
    if (s == CT_OK && cnt && !list) s = ct_error(CT_ERR_NOMEM, "out of memory");
    if (s == CT_OK) {
        if (cnt) qsort(e, (size_t)cnt, sizeof *e, by_step);
        for (int i = 0; i < cnt; i++) list[i] = e[i].path;
        *out = list;
        *n = cnt;
    } else {
        for (int i = 0; i < cnt; i++) free(e[i].path);
    }
    free(e);
    return s;
}

void ct_checkpoint_list_free(char **list, int n) {
    for (int i = 0; i < n; i++) free(list[i]);
    free(list);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static ct_status remove_tree(const char *path) {
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
        return ct_error(CT_ERR_IO, "cannot delete '%s': %s", path, strerror(errno));
    return CT_OK;
}

static bool same_path(const char *a, const char *b) {
    struct stat x, y;
    return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/* --- the loop's progress: exact doubles as C99 hex floats, which read back bit for bit --------------- */

static json_t *hex_double(double v) {
    char buf[64];
    snprintf(buf, sizeof buf, "%a", v);
    return json_string(buf);
}

char *ct_checkpoint_progress_text(const ct_trainer *t) {
    const ct_train_progress *p = &t->progress;
    json_t *o = json_pack("{s:s, s:i, s:i, s:I, s:I, s:I, s:I, s:b, s:o, s:o, s:I, s:o, s:b, s:o, s:I}", "format",
                          "ctrainer-progress", "rank", t->rank, "world_size", t->world_size, "global_batch_size",
                          (json_int_t)(t->args.per_device_train_batch_size * t->world_size),
                          "gradient_accumulation_steps", (json_int_t)t->args.gradient_accumulation_steps, "epoch",
                          (json_int_t)p->epoch, "next_batch", (json_int_t)p->next_batch, "epoch_done", p->epoch_done,
                          "tr_loss", hex_double(p->tr_loss), "total_loss", hex_double(p->total_loss),
                          "last_logged_step", (json_int_t)p->last_logged_step, "grad_norm", hex_double(p->grad_norm),
                          "has_grad_norm", p->has_grad_norm, "learning_rate", hex_double(p->learning_rate),
                          "nan_inf_skipped", (json_int_t)p->nan_inf_skipped);
    /* indented, keys sorted, as ct_write_json_file writes JSON */
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
static ct_status check_batching(const ct_trainer *t, const json_t *o, const char *file) {
    json_int_t g = json_integer_value(json_object_get(o, "global_batch_size")),
               ga = json_integer_value(json_object_get(o, "gradient_accumulation_steps"));
    int64_t mine = t->args.per_device_train_batch_size * t->world_size;
    if (g && g != mine)
        return ct_error(CT_ERR_CONFIG,
                        "%s: the checkpoint was taken with a global batch of %lld samples "
                        "(per_device_train_batch_size x processes), this run has %lld (%lld x %d): its position "
                        "would point at other samples",
                        file, (long long)g, (long long)mine, (long long)t->args.per_device_train_batch_size,
                        t->world_size);
    if (ga && ga != t->args.gradient_accumulation_steps)
        return ct_error(CT_ERR_CONFIG, "%s: the checkpoint was taken with gradient_accumulation_steps %lld, this run has %lld",
                        file, (long long)ga, (long long)t->args.gradient_accumulation_steps);
    return CT_OK;
}

static ct_status read_progress(const ct_trainer *t, const char *file, ct_train_progress *p) {
    json_error_t err;
    json_t *o = json_load_file(file, 0, &err);
    if (!o) return ct_error(CT_ERR_FORMAT, "%s:%d:%d: %s", file, err.line, err.column, err.text);
    ct_status bs = check_batching(t, o, file);
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

/* Hugging Face's _sorted_checkpoints + _rotate_checkpoints: the checkpoints to delete, oldest first
 * (*out as ct_checkpoint_list's; *n 0 when none). */
ct_status ct_checkpoint_rotation_victims(const ct_trainer *t, char ***out, int *n_out) {
    *out = NULL;
    *n_out = 0;
    int64_t limit = t->args.save_total_limit;
    if (limit <= 0) return CT_OK;
    char **list;
    int n;
    CT_TRY(ct_checkpoint_list(t->args.output_dir, &list, &n));
    const char *best = t->state.best_model_checkpoint;
    /* The best checkpoint moves to the second-to-last place of the deletion order, so it goes last
     * but one: only the newest checkpoint outlives it. */
    for (int i = 0; best[0] && i < n; i++) {
        if (!same_path(list[i], best)) continue;
        char *b = list[i];
        for (int j = i; j < n - 2; j++) list[j] = list[j + 1];
        if (i < n - 2) list[n - 2] = b;
        break;
    }
    if (best[0] && limit == 1 && n > 0 && !same_path(list[n - 1], best)) limit = 2;
    /* the survivors are freed; the victims stay at the front of the array */
    int victims = n > limit ? n - (int)limit : 0;
    for (int i = victims; i < n; i++) free(list[i]);
    if (!victims) {
        free(list);
        list = NULL;
    }
    *out = list;
    *n_out = victims;
    return CT_OK;
}

static ct_status rotate(ct_trainer *t) {
    char **list;
    int n;
    CT_TRY(ct_checkpoint_rotation_victims(t, &list, &n));
    ct_status s = CT_OK;
    for (int i = 0; i < n && s == CT_OK; i++) s = remove_tree(list[i]);
    ct_checkpoint_list_free(list, n);
    return s;
}

ct_status ct_trainer_rotate_checkpoints(ct_trainer *t) { return rotate(t); }

/* The newest checkpoint directory of output_dir, "none" when there is none (for messages: listed,
 * not verified). */
static void newest_checkpoint(const ct_trainer *t, char *out, size_t cap) {
    char **list;
    int n;
    if (ct_checkpoint_list(t->args.output_dir, &list, &n) != CT_OK) n = 0;
    snprintf(out, cap, "%s", n > 0 ? list[n - 1] : "none");
    if (n > 0) ct_checkpoint_list_free(list, n);
}

ct_status ct_checkpoint_save_failed(ct_trainer *t, int64_t step, const char *dir, const char *tmp,
                                    const char *prev_best, bool own, ct_status s) {
    char why[2048], newest[4096];
    snprintf(why, sizeof why, "%s", ct_last_error());
    /* Rank 0 made the temporary directory; every process is done writing into it by now. What a full
     * disk holds of a failed save is freed here, and no half-written directory is left behind. */
    struct stat st;
    if (t->rank == 0 && lstat(tmp, &st) == 0 && remove_tree(tmp) != CT_OK) ct_log_warning("%s", ct_last_error());
    if (t->saved_step == step) t->saved_step = -1;
    /* The best model cannot point at a checkpoint that does not exist: back to the one before. */
    if (strcmp(t->state.best_model_checkpoint, dir) == 0)
        snprintf(t->state.best_model_checkpoint, sizeof t->state.best_model_checkpoint, "%s", prev_best);
    newest_checkpoint(t, newest, sizeof newest);
    if (t->args.on_save_error == CT_SAVE_ERROR_CONTINUE) {
        if (t->rank == 0 || own) /* the world's main process, and the one that knows the cause */
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

ct_status ct_trainer_save_checkpoint(ct_trainer *t) {
    /* The previous save (save_async) completes first: one save in flight, and the best checkpoint's
     * existence below is then known. */
    CT_TRY(ct_trainer_async_save_drain(t));
    char dir[4096], tmp[4200], prev_best[sizeof t->state.best_model_checkpoint];
    snprintf(prev_best, sizeof prev_best, "%s", t->state.best_model_checkpoint);
    snprintf(dir, sizeof dir, "%s/" PREFIX "%lld", t->args.output_dir, (long long)t->state.global_step);
    snprintf(tmp, sizeof tmp, "%s.tmp", dir);
    if (t->args.save_strategy == CT_INTERVAL_BEST && t->state.best_global_step == t->state.global_step)
        snprintf(t->state.best_model_checkpoint, sizeof t->state.best_model_checkpoint, "%s", dir);
    else if (t->state.best_global_step > 0) {
        char best[4096];
        struct stat st;
        snprintf(best, sizeof best, "%s/" PREFIX "%lld", t->args.output_dir, (long long)t->state.best_global_step);
        if (t->state.best_global_step == t->state.global_step || stat(best, &st) == 0)
            snprintf(t->state.best_model_checkpoint, sizeof t->state.best_model_checkpoint, "%s", best);
    }
    t->saved_step = t->state.global_step;
    t->saved_epoch_done = t->progress.epoch_done;
    /* snapshot, then written here or by the writer thread (checkpoint/checkpoint_async.h) */
    return ct_checkpoint_save(t, dir, tmp, prev_best);
}

ct_status ct_trainer_resume(ct_trainer *t, const char *spec) {
    char dir[4096], path[4300];
    CT_TRY(ct_checkpoint_resolve(t->args.output_dir, spec, dir, sizeof dir));
    snprintf(path, sizeof path, "%s/optimizer.h5", dir);
    if (access(path, F_OK) != 0)
        return ct_error(CT_ERR_STATE, "%s was saved with save_only_model: it has no optimizer state to resume from",
                        dir);
    ct_train_progress p;
    /* A run resumed on another number of processes has no file of its own: the position is global
     * (a global batch index), so rank 0's says where every process continues. */
    snprintf(path, sizeof path, "%s/rng_state_%d.json", dir, t->rank);
    if (access(path, F_OK) != 0) snprintf(path, sizeof path, "%s/rng_state_0.json", dir);
    CT_TRY(read_progress(t, path, &p));
    ct_trainer_state st;
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    CT_TRY(ct_trainer_state_init(&st));
    ct_status s = ct_trainer_state_load(&st, path);
    /* Everything that can fail on a mismatch (another model, another optimizer) comes before the
     * trainer's own state changes. */
    if (s == CT_OK) {
        snprintf(path, sizeof path, "%s/model.h5", dir);
        s = ct_model_load_h5(t->model, path);
    }
    if (s == CT_OK) {
        snprintf(path, sizeof path, "%s/optimizer.h5", dir);
        s = ct_trainer_uses_zero1(t) ? ct_zero1_load_h5(t->optimizer, t->comm, 0, path)
                                     : ct_optimizer_load_h5(t->optimizer, path);
    }
    if (s == CT_OK) {
        snprintf(path, sizeof path, "%s/scheduler.json", dir);
        s = ct_scheduler_load_json(t->lr_scheduler, path);
    }
    if (s == CT_OK) s = ct_callbacks_load_state(&t->callbacks, st.stateful_callbacks, "stateful_callbacks");
    const json_t *control = s == CT_OK ? json_object_get(st.stateful_callbacks, "TrainerControl") : NULL;
    if (control) s = ct_trainer_control_load_state(&t->control, control, "stateful_callbacks.TrainerControl");
    if (s != CT_OK) {
        ct_trainer_state_free(&st);
        return ct_error_prefix(s, "resume from %s: ", dir);
    }
    st.is_world_process_zero = t->state.is_world_process_zero;
    st.is_local_process_zero = t->state.is_local_process_zero;
    ct_trainer_state_free(&t->state);
    t->state = st;
    t->progress = p;
    /* Info: printed where the log level lets it (the main process by default), as HF's logger.info. */
    ct_log_info("Resuming from %s: step %lld, epoch %lld, batch %lld%s", dir, (long long)st.global_step,
                (long long)p.epoch, (long long)p.next_batch, p.epoch_done ? " (epoch done)" : "");
    return CT_OK;
}

ct_status ct_trainer_finish_checkpoints(ct_trainer *t) {
    CT_TRY(ct_trainer_async_save_drain(t)); /* every save committed before the last rotation */
    if (!ct_trainer_is_world_process_zero(t) || t->args.save_total_limit != 1 || !t->state.best_model_checkpoint[0])
        return CT_OK;
    char **list;
    int n;
    CT_TRY(ct_checkpoint_list(t->args.output_dir, &list, &n));
    ct_status s = CT_OK;
    for (int i = 0; i < n && s == CT_OK; i++)
        if (!same_path(list[i], t->state.best_model_checkpoint)) s = remove_tree(list[i]);
    ct_checkpoint_list_free(list, n);
    return s;
}

ct_status ct_trainer_load_best_model(ct_trainer *t) {
    CT_TRY(ct_trainer_async_save_drain(t)); /* the best checkpoint may still be being written */
    char path[4200];
    snprintf(path, sizeof path, "%s/model.h5", t->state.best_model_checkpoint);
    ct_status s = ct_model_load_h5(t->model, path);
    if (s != CT_OK) return ct_error_prefix(s, "load_best_model_at_end: ");
    return CT_OK;
}
