/* A save's image (see checkpoint_impl.h): taken from a snapshot on the training thread, written into
 * the temporary directory by any thread, committed by rank 0. The synchronous and the asynchronous
 * save (checkpoint_async.c) both write through here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_async.h"
#include "checkpoint/checkpoint_impl.h"
#include "core/fs.h"
#include "dist/zero.h"
#include "model/model_io.h"

/* The flags of ct_json_write_file and ct_trainer_state_save: the same bytes as the files written
 * outside checkpoints. */
#define JSON_FLAGS (JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17))

void ct_checkpoint_image_free(ct_checkpoint_image *s) {
    if (!s) return;
    if (s->has_copies) {
        /* no copy may still be filling what is released (a failed save frees its image unwritten) */
        (void)ct_host_copies_wait(&s->copies);
        ct_host_copies *c = &s->copies;
        if (s->owns_weights) {
            ct_host_copies_release(c, &s->values);
            ct_host_copies_release(c, &s->buffers);
        }
        if (s->owns_optim)
            for (int i = 0; i < s->optim.n_state; i++) ct_host_copies_release(c, &s->optim.state[i]);
        for (int i = 0; s->owns_weights && i < s->evals.n; i++) {
            ct_host_copies_release(c, &s->evals.items[i].values);
            ct_host_copies_release(c, &s->evals.items[i].buffers);
        }
        ct_host_copies_destroy(c);
    }
    free(s->evals.items);
    ct_optimizer_destroy(s->gathered);
    json_decref(s->model_spec);
    free(s->training_args);
    free(s->run_config);
    free(s->trainer_state);
    free(s->scheduler);
    free(s->progress);
    free(s);
}

static char *dump(const json_t *v) { return v ? json_dumps(v, JSON_FLAGS) : NULL; }

/* trainer_state.json as ct_trainer_state_save writes it (with a final newline). */
static char *state_text(const ct_trainer_state *st) {
    json_t *o;
    if (ct_trainer_state_to_json(st, &o) != CT_OK) return NULL;
    char *text = dump(o);
    json_decref(o);
    size_t n = text ? strlen(text) : 0;
    char *out = text ? realloc(text, n + 2) : NULL;
    if (!out) {
        free(text);
        return NULL;
    }
    out[n] = '\n';
    out[n + 1] = '\0';
    return out;
}

#define NOMEM_UNLESS(p) ((p) ? CT_OK : ct_error(CT_ERR_NOMEM, "out of memory"))

/* The weights of eval_async's unrecorded evaluations, but for those of this very step (model.h5
 * holds them): views, or host copies that the image owns. */
static ct_status take_evals(const ct_pending_evals *from, ct_checkpoint_image *s, bool copy) {
    s->evals.last_step = from->last_step;
    if (from->n == 0) return CT_OK;
    CT_TRY(NOMEM_UNLESS(s->evals.items = calloc((size_t)from->n, sizeof *s->evals.items)));
    for (int i = 0; i < from->n; i++, s->evals.n++) {
        const ct_pending_eval *p = &from->items[i];
        ct_pending_eval *q = &s->evals.items[i];
        q->step = p->step;
        q->epoch = p->epoch;
        if (p->step == s->step) continue;
        if (!copy) {
            q->values = p->values;
            q->buffers = p->buffers;
            continue;
        }
        CT_TRY(ct_host_copies_take(&s->copies, &q->values, &p->values, NULL));
        if (p->buffers.data) CT_TRY(ct_host_copies_take(&s->copies, &q->buffers, &p->buffers, NULL));
    }
    return CT_OK;
}

/* Rank 0's part: model, arguments, trainer state and (unless save_only_model) the optimizer and
 * scheduler. copy: host copies of the tensors (spare: the previous image, whose memory is reused). */
static ct_status take_shared(ct_checkpoint_snapshot *snap, ct_checkpoint_image *s, bool copy,
                             ct_checkpoint_image *spare) {
    const ct_param_store *ps = &snap->model->params;
    s->model = snap->model;
    if (copy) {
        /* the spare's memory is pinned for the same device (one model), and its copies are done */
        CT_TRY(ct_host_copies_init(&s->copies, ps->values.device));
        s->has_copies = true;
        s->owns_weights = true;
        bool reuse = spare && spare->owns_weights && spare->has_copies &&
                     ct_device_eq(spare->copies.device, s->copies.device);
        CT_TRY(ct_host_copies_take(&s->copies, &s->values, &ps->values, reuse ? &spare->values : NULL));
        CT_TRY(ct_host_copies_take(&s->copies, &s->buffers, &ps->buffers, reuse ? &spare->buffers : NULL));
    } else {
        s->values = ps->values;
        s->buffers = ps->buffers;
    }
    if (snap->evals && !snap->args->save_only_model) CT_TRY(take_evals(snap->evals, s, copy));
    const json_t *spec = snap->run_config ? json_object_get(snap->run_config, "model") : NULL;
    if (spec) CT_TRY(NOMEM_UNLESS(s->model_spec = json_deep_copy(spec)));
    json_t *args;
    CT_TRY(ct_training_args_to_json(snap->args, &args));
    s->training_args = dump(args);
    json_decref(args);
    CT_TRY(NOMEM_UNLESS(s->training_args));
    if (snap->run_config) CT_TRY(NOMEM_UNLESS(s->run_config = dump(snap->run_config)));
    CT_TRY(ct_checkpoint_store_callback_state(snap->callbacks, snap->control, snap->state));
    CT_TRY(NOMEM_UNLESS(s->trainer_state = state_text(snap->state)));
    if (snap->args->save_only_model) return CT_OK;
    CT_TRY(NOMEM_UNLESS(s->scheduler = ct_scheduler_json_text(snap->scheduler)));
    /* a ZeRO-1 shard optimizer's state is gathered by a collective: see ct_checkpoint_image_take */
    if (snap->zero1) return CT_OK;
    ct_optimizer_snapshot live;
    CT_TRY(ct_optimizer_snapshot_view(snap->optimizer, &live));
    s->optim = live;
    s->has_optimizer = true;
    if (!copy) return CT_OK;
    s->owns_optim = true;
    for (int i = 0; i < live.n_state; i++) s->optim.state[i] = (ct_tensor){0};
    bool reuse =
        spare && spare->owns_optim && spare->has_copies && ct_device_eq(spare->copies.device, s->copies.device);
    for (int i = 0; i < live.n_state; i++)
        CT_TRY(ct_host_copies_take(&s->copies, &s->optim.state[i], &live.state[i],
                                       reuse && i < spare->optim.n_state ? &spare->optim.state[i] : NULL));
    return CT_OK;
}

/* Rank 0, before any process writes: a stale temporary directory (of a crash, or of a failed save
 * of this step) goes, a fresh one is made. */
static ct_status prepare_tmp(const char *tmp) {
    struct stat st;
    /* only what is there: a path that cannot be looked at is for ct_make_dirs to name */
    if (lstat(tmp, &st) == 0) CT_TRY(ct_remove_tree(tmp));
    return ct_make_dirs(tmp);
}

ct_status ct_checkpoint_agree(const ct_checkpoint_snapshot *snap, ct_status s, const char *dir, const char *what,
                              bool *comm_failed) {
    int64_t failed = s != CT_OK;
    ct_comm_set_label(snap->comm, "checkpoint agreement (%s, %s)", what, dir);
    ct_status r = ct_comm_all_reduce_i64(snap->comm, &failed, 1, CT_MAX);
    if (r != CT_OK && comm_failed) *comm_failed = true;
    if (s != CT_OK) return s;
    CT_TRY(r);
    if (failed) return ct_error(CT_ERR_IO, "%s: another process failed while %s; nothing was committed", dir, what);
    return CT_OK;
}

ct_status ct_checkpoint_image_take(ct_checkpoint_snapshot *snap, const char *dir, const char *tmp, bool copy,
                                   ct_checkpoint_image *spare, ct_checkpoint_image **out, bool *comm_failed,
                                   bool *own) {
    *out = NULL;
    ct_checkpoint_image *s = calloc(1, sizeof *s);
    if (!s) return ct_error(CT_ERR_NOMEM, "save of %s: out of memory", dir);
    s->step = snap->state->global_step;
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    snprintf(s->tmp, sizeof s->tmp, "%s", tmp);
    s->rank = snap->rank;
    s->shared = snap->rank == 0;
    bool full = !snap->args->save_only_model;
    ct_status st = s->shared ? take_shared(snap, s, copy, spare) : CT_OK;
    if (st == CT_OK && full) st = NOMEM_UNLESS(s->progress = ct_checkpoint_progress_text(snap));
    /* Every process enters the gather, even after a local failure, so that none is left waiting;
     * the gathered state is a copy already (on rank 0). */
    if (full && snap->zero1) {
        ct_status g = ct_zero1_gather_state(snap->optimizer, snap->comm, 0, &s->gathered);
        if (g == CT_OK && s->gathered) {
            g = ct_optimizer_snapshot_view(s->gathered, &s->optim);
            s->has_optimizer = g == CT_OK;
        }
        if (st == CT_OK) st = g;
    }
    if (st == CT_OK && s->shared) st = prepare_tmp(tmp);
    if (st != CT_OK) st = ct_error_prefix(st, "save of %s: ", dir);
    *own = st != CT_OK;
    if (snap->world_size > 1) st = ct_checkpoint_agree(snap, st, dir, "taking its snapshot", comm_failed);
    if (st != CT_OK) {
        ct_checkpoint_image_free(s);
        return st;
    }
    *out = s;
    return CT_OK;
}

/* --- writing (any thread; no communication) ------------------------------------------------------ */

static ct_status write_text(const ct_checkpoint_image *s, const char *name, const char *text) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", s->tmp, name);
    return ct_write_file(path, text, strlen(text)); /* the manifest syncs it, the commit makes it whole */
}

ct_status ct_checkpoint_image_write(const ct_checkpoint_image *s) {
    char path[4400];
    /* the copies were taken without waiting for the device: the writer waits, the training goes on */
    if (s->has_copies) CT_TRY(ct_host_copies_wait(&s->copies));
    if (s->shared) {
        snprintf(path, sizeof path, "%s/model.h5", s->tmp);
        CT_TRY(ct_model_save_h5_values(s->model, &s->values, &s->buffers, s->model_spec, path));
        CT_TRY(write_text(s, "training_args.json", s->training_args));
        if (s->run_config) CT_TRY(write_text(s, "run_config.json", s->run_config));
        CT_TRY(write_text(s, "trainer_state.json", s->trainer_state));
        if (s->has_optimizer) {
            snprintf(path, sizeof path, "%s/optimizer.h5", s->tmp);
            CT_TRY(ct_optimizer_snapshot_save_h5(&s->optim, path));
        }
        if (s->scheduler) CT_TRY(write_text(s, "scheduler.json", s->scheduler));
        for (int i = 0; i < s->evals.n; i++) {
            const ct_pending_eval *p = &s->evals.items[i];
            if (p->step == s->step) continue;
            char name[64];
            ct_checkpoint_pending_file(p->step, s->step, name, sizeof name);
            snprintf(path, sizeof path, "%s/%s", s->tmp, name);
            CT_TRY(ct_model_save_h5_values(s->model, &p->values, p->buffers.data ? &p->buffers : NULL, s->model_spec,
                                           path));
        }
    }
    if (s->progress) {
        char name[64];
        snprintf(name, sizeof name, "rng_state_%d.json", s->rank);
        CT_TRY(write_text(s, name, s->progress));
    }
    return CT_OK;
}

ct_status ct_checkpoint_image_commit(const ct_checkpoint_image *s) {
    CT_TRY(ct_checkpoint_write_manifest(s->tmp));
    return ct_checkpoint_commit(s->tmp, s->dir);
}

