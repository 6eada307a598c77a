/* The meaning of a checkpoint, checked before a resume commits to it: the manifest proves that the
 * bytes are the ones written, not that they make sense, and a checkpoint edited and re-signed (or
 * written by a buggy tool) could carry global_step -5, an epoch of 1e15 or a scheduler a billion
 * steps ahead of the optimizer, and train garbage without a word. Every field the resume uses is
 * checked here, in one place: its range, its agreement with the other files (the optimizer and the
 * scheduler stepped once per global step not skipped by nan_inf_policy; the position inside the
 * steps taken) and with this run's arguments (the global batch, gradient accumulation, the batches
 * of an epoch, which a checkpoint records). Each message names the file and the key. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "checkpoint/checkpoint_impl.h"

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The file's name inside the checkpoint, for messages ("rng_state_0.json", not the whole path). */
static const char *base(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* An integer key of the progress file that must be there and within [lo, hi]. */
static ct_status need_int(const ct_checkpoint_read *r, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    const json_t *v = json_object_get(r->progress_json, key);
    if (!json_is_integer(v))
        return ct_error(CT_ERR_FORMAT, "%s: %s: %s", r->progress_file, key, v ? "not an integer" : "missing");
    *out = json_integer_value(v);
    if (*out < lo || *out > hi)
        return ct_error(CT_ERR_FORMAT, "%s: %s: %lld is outside [%lld, %lld]", r->progress_file, key, (long long)*out,
                        (long long)lo, (long long)hi);
    return CT_OK;
}

/* The progress file against this run: its batching (the saved position counts global batches of a
 * given size, grouped into optimizer steps, so another global batch or accumulation would read it
 * as other samples; another number of processes with the same global batch is fine) and its own
 * rank. */
static ct_status check_run(const ct_checkpoint_snapshot *snap, const ct_checkpoint_read *r) {
    const char *format = json_string_value(json_object_get(r->progress_json, "format"));
    if (!format || strcmp(format, "ctrainer-progress") != 0)
        return ct_error(CT_ERR_FORMAT, "%s: format: not a ctrainer progress file (expected \"ctrainer-progress\")",
                        r->progress_file);
    int64_t g = 0, ga = 0, world = 0, rank = 0;
    CT_TRY(need_int(r, "global_batch_size", 1, INT64_MAX, &g));
    CT_TRY(need_int(r, "gradient_accumulation_steps", 1, INT64_MAX, &ga));
    CT_TRY(need_int(r, "world_size", 1, INT32_MAX, &world));
    CT_TRY(need_int(r, "rank", 0, world - 1, &rank));
    if (g % world != 0)
        return ct_error(CT_ERR_FORMAT, "%s: global_batch_size: %lld is not a multiple of world_size %lld",
                        r->progress_file, (long long)g, (long long)world);
    if (rank != r->progress_rank)
        return ct_error(CT_ERR_FORMAT, "%s: rank: %lld, but the file is rank %d's", r->progress_file, (long long)rank,
                        r->progress_rank);
    int64_t mine = snap->args->per_device_train_batch_size * snap->world_size;
    if (g != mine)
        return ct_error(CT_ERR_CONFIG,
                        "%s: the checkpoint was taken with a global batch of %lld samples "
                        "(per_device_train_batch_size x processes), this run has %lld (%lld x %d): its position "
                        "would point at other samples",
                        r->progress_file, (long long)g, (long long)mine,
                        (long long)snap->args->per_device_train_batch_size, snap->world_size);
    if (ga != snap->args->gradient_accumulation_steps)
        return ct_error(CT_ERR_CONFIG,
                        "%s: the checkpoint was taken with gradient_accumulation_steps %lld, this run has %lld",
                        r->progress_file, (long long)ga, (long long)snap->args->gradient_accumulation_steps);
    /* the sampler's seed (data_seed, else seed): another one shuffles the interrupted epoch otherwise,
     * and the position would skip samples never trained on and repeat others, unless that epoch is to
     * start again (ignore_data_skip); the epochs after it may take any order. Recorded since
     * checkpoints knew it. */
    int64_t data_seed = -1;
    if (json_object_get(r->progress_json, "data_seed")) CT_TRY(need_int(r, "data_seed", 0, INT64_MAX, &data_seed));
    if (data_seed >= 0 && snap->args->data_seed >= 0 && data_seed != snap->args->data_seed &&
        !r->progress->epoch_done && !snap->args->ignore_data_skip)
        return ct_error(CT_ERR_CONFIG,
                        "%s: the checkpoint's epoch was shuffled with data seed %lld (data_seed, else seed), this run "
                        "has %lld: its position would skip samples and repeat others; resume with the same seed, or "
                        "with ignore_data_skip true to start the interrupted epoch again in the new order",
                        r->progress_file, (long long)data_seed, (long long)snap->args->data_seed);
    /* recorded since checkpoints knew it; an older one is judged by check_progress alone */
    int64_t len = 0;
    if (json_object_get(r->progress_json, "batches_per_epoch"))
        CT_TRY(need_int(r, "batches_per_epoch", 1, INT64_MAX, &len));
    if (len > 0 && snap->batches_per_epoch > 0 && len != snap->batches_per_epoch)
        return ct_error(CT_ERR_CONFIG,
                        "%s: the checkpoint was taken with %lld batches per epoch, this run has %lld (a training set "
                        "of another size, or another dataloader_drop_last): its position would point at other "
                        "samples; train on the new set in a fresh run from the checkpoint's weights instead",
                        r->progress_file, (long long)len, (long long)snap->batches_per_epoch);
    return CT_OK;
}

/* The loop's position and carried values, alone and against the steps taken. */
static ct_status check_progress(const ct_checkpoint_snapshot *snap, const ct_checkpoint_read *r) {
    const ct_train_progress *p = r->progress;
    const char *f = r->progress_file;
    const int64_t step = r->state->global_step, ga = snap->args->gradient_accumulation_steps;
    const int64_t len = snap->batches_per_epoch;
    const struct {
        const char *key;
        int64_t v;
    } counts[] = {{"epoch", p->epoch}, {"next_batch", p->next_batch}, {"last_logged_step", p->last_logged_step},
                  {"nan_inf_skipped", p->nan_inf_skipped}, {"grad_scaler.skipped", p->scaler_skipped}};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        if (counts[i].v < 0) return ct_error(CT_ERR_FORMAT, "%s: %s: %lld is negative", f, counts[i].key, (long long)counts[i].v);
    if (p->last_logged_step > step)
        return ct_error(CT_ERR_FORMAT, "%s: last_logged_step: %lld is beyond global_step %lld", f,
                        (long long)p->last_logged_step, (long long)step);
    if (p->nan_inf_skipped > step || p->scaler_skipped > step - p->nan_inf_skipped)
        return ct_error(CT_ERR_FORMAT, "%s: %s: %lld steps skipped by nan_inf_policy and %lld by the loss scaler, of "
                        "%lld taken", f, p->nan_inf_skipped > step ? "nan_inf_skipped" : "grad_scaler.skipped",
                        (long long)p->nan_inf_skipped, (long long)p->scaler_skipped, (long long)step);
    /* the loss scale goes on from where it was: a state this run's rule can be in (a run without
     * scaling keeps only the count of the steps it skipped) */
    if (p->has_scaler && snap->grad_scaler) CT_TRY(ct_grad_scaler_state_check(snap->grad_scaler, &p->scaler, f));
    if (len > 0 && p->next_batch > len)
        return ct_error(CT_ERR_FORMAT, "%s: next_batch: %lld is beyond this run's %lld batches per epoch", f,
                        (long long)p->next_batch, (long long)len);
    if (len > 0 && p->epoch_done && p->next_batch != len)
        return ct_error(CT_ERR_FORMAT, "%s: next_batch: %lld with epoch_done, but an epoch has %lld batches", f,
                        (long long)p->next_batch, (long long)len);
    if (p->next_batch % ga != 0 && p->next_batch != len)
        return ct_error(CT_ERR_FORMAT,
                        "%s: next_batch: %lld is not a step boundary (gradient_accumulation_steps %lld)", f,
                        (long long)p->next_batch, (long long)ga);
    /* Every epoch entered ran at least one step; none ran more than its batches allow. */
    int64_t in_epoch = p->epoch_done ? 1 : ceil_div(p->next_batch, ga);
    if (p->epoch > step || step - p->epoch < in_epoch)
        return ct_error(CT_ERR_FORMAT,
                        "%s: epoch: %lld (batch %lld%s) cannot be reached in global_step %lld steps (every epoch "
                        "takes at least one)",
                        f, (long long)p->epoch, (long long)p->next_batch, p->epoch_done ? ", done" : "",
                        (long long)step);
    if (len > 0) {
        int64_t per_epoch = ceil_div(len, ga);
        bool fits = p->epoch <= (INT64_MAX - per_epoch) / per_epoch &&
                    step <= p->epoch * per_epoch + (p->epoch_done ? per_epoch : ceil_div(p->next_batch, ga));
        if (!fits)
            return ct_error(CT_ERR_FORMAT,
                            "%s: epoch: global_step %lld steps do not fit in epoch %lld batch %lld at %lld steps "
                            "per epoch (this run's data and batching)",
                            f, (long long)step, (long long)p->epoch, (long long)p->next_batch, (long long)per_epoch);
    }
    /* A bad step skipped under logging_nan_inf_filter false carries its NaN loss into the sums. */
    const struct {
        const char *key;
        double v;
        bool any_sign;
    } reals[] = {{"tr_loss", p->tr_loss, true}, {"total_loss", p->total_loss, true}, {"grad_norm", p->grad_norm, false}};
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++) {
        double v = reals[i].v;
        if (i == 2 && !p->has_grad_norm) continue;
        /* an overflow the loss scaler skipped leaves a non-finite gradient norm */
        if (!isfinite(v) && p->nan_inf_skipped == 0 && !(i == 2 && p->scaler_skipped > 0))
            return ct_error(CT_ERR_FORMAT, "%s: %s: %g with no step skipped by nan_inf_policy%s", f, reals[i].key, v,
                            i == 2 ? " or the loss scaler" : "");
        if (!reals[i].any_sign && v < 0) return ct_error(CT_ERR_FORMAT, "%s: %s: %g is negative", f, reals[i].key, v);
    }
    if (!(isfinite(p->learning_rate) && p->learning_rate >= 0))
        return ct_error(CT_ERR_FORMAT, "%s: learning_rate: %g (must be finite and >= 0)", f, p->learning_rate);
    /* trainer_state.json's fractional epoch lies inside the epoch the progress file is in */
    const double e = r->state->epoch;
    if (!(isfinite(e) && e >= (double)p->epoch - 1e-9 && e <= (double)p->epoch + 1 + 1e-9))
        return ct_error(CT_ERR_FORMAT, "%s: epoch: %g, but %s is in epoch %lld", r->state_file, e, base(f),
                        (long long)p->epoch);
    return CT_OK;
}

/* trainer_state.json alone and against the checkpoint's name and the progress. */
static ct_status check_state(const ct_checkpoint_read *r) {
    const ct_trainer_state *s = r->state;
    const char *f = r->state_file;
    if (s->global_step < 0) return ct_error(CT_ERR_FORMAT, "%s: global_step: %lld is negative", f, (long long)s->global_step);
    if (r->dir_step >= 0 && s->global_step != r->dir_step)
        return ct_error(CT_ERR_FORMAT, "%s: global_step: %lld, but the directory is checkpoint-%lld", f,
                        (long long)s->global_step, (long long)r->dir_step);
    const struct {
        const char *key;
        int64_t v;
    } counts[] = {{"max_steps", s->max_steps},         {"logging_steps", s->logging_steps},
                  {"eval_steps", s->eval_steps},       {"save_steps", s->save_steps},
                  {"num_train_epochs", s->num_train_epochs}, {"num_input_tokens_seen", s->num_input_tokens_seen},
                  {"best_global_step", s->best_global_step}};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        if (counts[i].v < 0) return ct_error(CT_ERR_FORMAT, "%s: %s: %lld is negative", f, counts[i].key, (long long)counts[i].v);
    if (s->best_global_step > s->global_step)
        return ct_error(CT_ERR_FORMAT, "%s: best_global_step: %lld is beyond global_step %lld", f,
                        (long long)s->best_global_step, (long long)s->global_step);
    if (s->has_best && !isfinite(s->best_metric))
        return ct_error(CT_ERR_FORMAT, "%s: best_metric: %g is not finite", f, s->best_metric);
    if (!(isfinite(s->total_flos) && s->total_flos >= 0))
        return ct_error(CT_ERR_FORMAT, "%s: total_flos: %g (must be finite and >= 0)", f, s->total_flos);
    size_t i;
    const json_t *e;
    json_array_foreach(s->log_history, i, e) {
        const json_t *st = json_object_get(e, "step");
        if (st && !(json_is_integer(st) && json_integer_value(st) >= 0 && json_integer_value(st) <= s->global_step))
            return ct_error(CT_ERR_FORMAT, "%s: log_history[%zu].step: must be an integer in [0, global_step %lld]", f,
                            i, (long long)s->global_step);
    }
    return CT_OK;
}

/* The optimizer and the scheduler step once per global step that nan_inf_policy did not skip. */
static ct_status check_steps(const ct_checkpoint_read *r) {
    const int64_t skipped = r->progress->nan_inf_skipped + r->progress->scaler_skipped;
    const int64_t taken = r->state->global_step - skipped;
    if (r->optimizer_step != taken)
        return ct_error(CT_ERR_FORMAT,
                        "%s/optimizer.h5: step: %lld, but trainer_state.json's global_step %lld less the %lld skipped "
                        "by nan_inf_policy and the loss scaler gives %lld",
                        r->dir, (long long)r->optimizer_step, (long long)r->state->global_step, (long long)skipped,
                        (long long)taken);
    if (!r->scheduler_same_type) return CT_OK;
    /* a plateau scheduler counts evaluations, at most one per step besides the one on start */
    int64_t st = r->scheduler.step;
    bool ok = r->scheduler_needs_metric ? st >= 0 && st <= r->state->global_step + 1 : st == taken;
    if (!ok)
        return ct_error(CT_ERR_FORMAT,
                        "%s/scheduler.json: state.step: %lld, but %s (trainer_state.json's global_step %lld, %lld "
                        "skipped by nan_inf_policy and the loss scaler)",
                        r->dir, (long long)st,
                        r->scheduler_needs_metric ? "a plateau scheduler steps at most once per evaluation"
                                                  : "it must equal the optimizer steps taken",
                        (long long)r->state->global_step, (long long)skipped);
    return CT_OK;
}

ct_status ct_checkpoint_validate(const ct_checkpoint_snapshot *snap, const ct_checkpoint_read *r) {
    CT_TRY(check_run(snap, r));
    CT_TRY(check_state(r));
    CT_TRY(check_progress(snap, r));
    return check_steps(r);
}
