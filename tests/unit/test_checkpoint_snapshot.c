/* Checkpoints saved from and resumed into a snapshot (checkpoint/snapshot.h) with no Trainer at all:
 * the pieces a Trainer would hold (model, AdamW, scheduler, trainer state, control, progress,
 * arguments) are built here and the snapshot points at them.
 *
 *   - a synchronous and an asynchronous save of the same state write the same JSON files byte for
 *     byte, and both resume to bit-identical weights, buffers, optimizer state and step count,
 *     scheduler state, trainer state and loop progress (the doubles compared bit for bit);
 *   - an asynchronous save writes its copies, not the live tensors: the live weights and optimizer
 *     state are overwritten before the writer is drained, and the checkpoint still holds the old;
 *   - the control is saved with should_save/should_log/should_evaluate down;
 *   - the owner's record of saves (saved_step, saved_epoch_done) follows each save, and a failed
 *     save with on_save_error "continue" forgets its step and leaves nothing on disk;
 *   - a resume that fails (another model; another gradient accumulation) changes nothing the
 *     snapshot points at;
 *   - rotation keeps the newest save_total_limit checkpoints, and the best one; checkpoints of later
 *     steps than the run's (an earlier run's in the same output_dir) are not its own;
 *   - rotation deletes only what it proved to be the run's own checkpoints: never a symbolic link
 *     named like one (nor what it points at), a directory without a ctrainer manifest, a name a
 *     save does not write (checkpoint-02, checkpoint-+3) or a file; nothing is left half-deleted;
 *   - a best_model_checkpoint that does not resolve is found again, never a licence to delete:
 *     output_dir moved (the best found by its step), a run resumed into another output_dir (the
 *     end-of-training clean-up of save_total_limit 1 keeps every checkpoint there, with a warning),
 *     a resumed run whose checkpoints moved (the name follows them), a best that is gone (a
 *     warning);
 *   - the clean-up of a dead run's leftovers deletes checkpoint-<step>.tmp and .deleting, puts a
 *     .old back when its checkpoint is missing, deletes this host's orphaned atomic temporaries, and
 *     leaves everything else (links, other names, live or foreign temporaries, checkpoints).
 *
 * Why one file of over 600 lines: every check saves or resumes the same hand-built pieces a
 * snapshot points at. */
#define _GNU_SOURCE /* nftw */
#include <dirent.h>
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_async.h"
#include "checkpoint/checkpoint_io.h"
#include "core/format/h5io.h"
#include "core/fs.h"
#include "core/log.h"
#include "model/layers.h"
#include "testlib.h"

static char root[] = "/tmp/ct_test_snapshot_XXXXXX";
static ct_rng rng;
static ct_comm *comm;

/* What a Trainer would hold, and the snapshot pointing at it. */
typedef struct run {
    ct_training_args args;
    ct_model model;
    ct_optimizer *opt;
    ct_scheduler *sched;
    ct_trainer_state state;
    ct_trainer_control control;
    ct_callback_list callbacks;
    ct_train_progress progress;
    int64_t saved_step;
    bool saved_epoch_done;
    ct_async_saver *saver;
    json_t *config;
} run;

static void snapshot_of(run *r, ct_checkpoint_snapshot *s) {
    *s = (ct_checkpoint_snapshot){.rank = 0,
                                  .world_size = 1,
                                  .comm = comm,
                                  .args = &r->args,
                                  .run_config = r->config,
                                  .model = &r->model,
                                  .optimizer = r->opt,
                                  .scheduler = r->sched,
                                  .state = &r->state,
                                  .callbacks = &r->callbacks,
                                  .control = &r->control,
                                  .progress = &r->progress,
                                  .saved_step = &r->saved_step,
                                  .saved_epoch_done = &r->saved_epoch_done,
                                  .saver = &r->saver};
}

static void fill_random(ct_tensor *t) {
    int64_t n = ct_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) ((float *)t->data)[i] = (float)(ct_rng_uniform(&rng) * 2 - 1);
}

/* Random values in every parameter (grads: their gradients), buffers too; the alignment padding
 * between them stays as built (a checkpoint does not hold it). */
static void fill_params(ct_param_store *ps, bool grads) {
    for (int i = 0; i < ps->count; i++) {
        ct_tensor *t = grads ? ps->items[i].grad : ps->items[i].value;
        if (t) fill_random(t);
    }
}

static double random_double(void) { return ct_rng_uniform(&rng) * 10 - 5; }

/* An MLP of the given width; AdamW after `steps` random steps (state not zero), less the ones
 * nan_inf_policy skipped; a linear scheduler with warmup stepped as often; a trainer state at
 * global_step `steps`; random progress that a resume's checks accept (a position inside the steps
 * taken, on a step boundary). */
static void run_init(run *r, const char *name, int64_t hidden, int steps) {
    memset(r, 0, sizeof *r);
    ct_training_args_default(&r->args);
    snprintf(r->args.output_dir, sizeof r->args.output_dir, "%s/%s", root, name);
    r->args.per_device_train_batch_size = 4;
    r->args.gradient_accumulation_steps = 2;
    r->saved_step = -1;
    r->config = json_pack("{s:{s:s, s:[I], s:i}}", "model", "type", "mlp", "hidden", (json_int_t)hidden,
                          "num_classes", 3);
    ct_module *m;
    CHECK_OK(ct_module_from_json(json_object_get(r->config, "model"), "model", &m));
    ct_model_options o = {.dtype = CT_F32, .device = CT_CPU, .max_batch = 4, .seed = ct_test_seed};
    CHECK_OK(ct_model_build(&r->model, m, &(ct_shape){.ndim = 1, .dims = {5}}, &o));
    fill_params(&r->model.params, false);
    ct_optim_config oc = ct_optim_config_default();
    oc.optim = CT_OPTIM_ADAMW;
    oc.learning_rate = 1e-2;
    oc.weight_decay = 0.01;
    CHECK_OK(ct_optimizer_create(&oc, &r->model.params, &r->opt));
    ct_scheduler_config sc = ct_scheduler_config_default();
    sc.warmup_steps = 2;
    CHECK_OK(ct_scheduler_create(&sc, oc.learning_rate, 20, &r->sched));
    for (int i = 0; i < steps - steps / 3; i++) {
        fill_params(&r->model.params, true);
        CHECK_OK(ct_optimizer_step(r->opt, ct_scheduler_lr(r->sched)));
        ct_scheduler_step(r->sched);
    }
    CHECK_OK(ct_trainer_state_init(&r->state));
    r->state.global_step = steps;
    r->state.epoch = steps / 7.0;
    r->state.max_steps = 20;
    r->progress = (ct_train_progress){.epoch = steps / 7,
                                      .next_batch = 2 * (steps % 7),
                                      .epoch_done = steps % 2 == 1,
                                      .tr_loss = random_double(),
                                      .total_loss = random_double(),
                                      .last_logged_step = steps > 0 ? steps - 1 : 0,
                                      .grad_norm = fabs(random_double()),
                                      .has_grad_norm = true,
                                      .learning_rate = ct_scheduler_lr(r->sched),
                                      .nan_inf_skipped = steps / 3};
    ct_train_progress_new_run_id(r->progress.run_id); /* every run its own, as a fresh run draws one */
}

static void run_free(run *r) {
    ct_checkpoint_snapshot s;
    snapshot_of(r, &s);
    ct_checkpoint_async_free(&s);
    ct_optimizer_destroy(r->opt);
    ct_scheduler_destroy(r->sched);
    ct_model_free(&r->model);
    ct_trainer_state_free(&r->state);
    ct_callback_list_free(&r->callbacks);
    json_decref(r->config);
}

static ct_status save(run *r) {
    ct_checkpoint_snapshot s;
    snapshot_of(r, &s);
    return ct_checkpoint_save_step(&s);
}

static ct_status drain(run *r) {
    ct_checkpoint_snapshot s;
    snapshot_of(r, &s);
    return ct_checkpoint_async_drain(&s);
}

static ct_status resume(run *r, const char *spec) {
    ct_checkpoint_snapshot s;
    snapshot_of(r, &s);
    return ct_checkpoint_resume(&s, spec);
}

static bool same_tensor(const ct_tensor *a, const ct_tensor *b) {
    if (!a->data || !b->data) return a->data == b->data;
    return ct_tensor_numel(a) == ct_tensor_numel(b) &&
           memcmp(a->data, b->data, (size_t)ct_tensor_numel(a) * ct_dtype_size(a->dtype)) == 0;
}

static bool same_double(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

static bool same_progress(const ct_train_progress *a, const ct_train_progress *b) {
    return a->epoch == b->epoch && a->next_batch == b->next_batch && a->epoch_done == b->epoch_done &&
           same_double(a->tr_loss, b->tr_loss) && same_double(a->total_loss, b->total_loss) &&
           a->last_logged_step == b->last_logged_step && same_double(a->grad_norm, b->grad_norm) &&
           a->has_grad_norm == b->has_grad_norm && same_double(a->learning_rate, b->learning_rate) &&
           a->nan_inf_skipped == b->nan_inf_skipped && strcmp(a->run_id, b->run_id) == 0;
}

/* Deep copies of what the run's tensors hold now. */
typedef struct copy {
    ct_tensor values, buffers, optim[CT_OPTIM_MAX_STATE];
    int n_optim;
    int64_t optim_step;
} copy;

static void clone(ct_tensor *dst, const ct_tensor *src) {
    CHECK_OK(ct_tensor_alloc(dst, src->dtype, CT_CPU, src->ndim, src->shape));
    CHECK_OK(ct_tensor_copy_to(dst, src));
}

static void copy_of(run *r, copy *c) {
    memset(c, 0, sizeof *c);
    clone(&c->values, &r->model.params.values);
    if (r->model.params.buffers.data) clone(&c->buffers, &r->model.params.buffers);
    ct_optimizer_snapshot v;
    CHECK_OK(ct_optimizer_snapshot_view(r->opt, &v));
    c->n_optim = v.n_state;
    for (int i = 0; i < v.n_state; i++) clone(&c->optim[i], &v.state[i]);
    c->optim_step = ct_optimizer_step_count(r->opt);
}

static void copy_free(copy *c) {
    ct_tensor_free(&c->values);
    ct_tensor_free(&c->buffers);
    for (int i = 0; i < c->n_optim; i++) ct_tensor_free(&c->optim[i]);
}

/* r's tensors equal c's bit for bit. */
static bool matches(run *r, const copy *c) {
    ct_optimizer_snapshot v;
    if (ct_optimizer_snapshot_view(r->opt, &v) != CT_OK || v.n_state != c->n_optim) return false;
    bool ok = same_tensor(&r->model.params.values, &c->values) && ct_optimizer_step_count(r->opt) == c->optim_step;
    if (r->model.params.buffers.data) ok = ok && same_tensor(&r->model.params.buffers, &c->buffers);
    for (int i = 0; i < v.n_state; i++) ok = ok && same_tensor(&v.state[i], &c->optim[i]);
    return ok;
}

static char *file_text(const char *dir, const char *name) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return ct_test_read_file(path, NULL);
}

static bool exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

/* --- tests ---------------------------------------------------------------------------------------- */

/* Sync and async saves of one state: the same text files; the async one holds its copies even when
 * the live state changes before the writer is drained; both resume to the state as saved. */
static void test_sync_async_resume(void) {
    run a, b;
    run_init(&a, "sync", 7, 5);
    /* the same state in b: the same seed path is not needed, the tensors are copied over */
    run_init(&b, "async", 7, 5);
    b.args.save_async = true;
    CHECK_OK(ct_tensor_copy_to(&b.model.params.values, &a.model.params.values));
    if (a.model.params.buffers.data) CHECK_OK(ct_tensor_copy_to(&b.model.params.buffers, &a.model.params.buffers));
    ct_optimizer_snapshot va, vb;
    CHECK_OK(ct_optimizer_snapshot_view(a.opt, &va));
    CHECK_OK(ct_optimizer_snapshot_view(b.opt, &vb));
    for (int i = 0; i < va.n_state; i++) CHECK_OK(ct_tensor_copy_to(&vb.state[i], &va.state[i]));
    b.progress = a.progress;
    a.control.should_save = a.control.should_log = true;
    b.control = a.control;

    copy saved;
    copy_of(&a, &saved);
    ct_train_progress saved_progress = a.progress;
    double saved_lr = ct_scheduler_lr(a.sched);

    CHECK_OK(save(&a));
    CHECK(a.saved_step == 5 && a.saved_epoch_done == a.progress.epoch_done, "saved_step %lld", (long long)a.saved_step);
    CHECK_OK(save(&b));
    CHECK(b.saver != NULL, "save_async made no writer");
    /* training goes on while the writer writes: the live state changes under it */
    fill_random(&b.model.params.values);
    for (int i = 0; i < vb.n_state; i++) fill_random(&vb.state[i]);
    CHECK_OK(drain(&b));
    CHECK(b.saved_step == 5, "async saved_step %lld", (long long)b.saved_step);

    char da[4200], db[4200];
    snprintf(da, sizeof da, "%s/checkpoint-5", a.args.output_dir);
    snprintf(db, sizeof db, "%s/checkpoint-5", b.args.output_dir);
    CHECK_OK(ct_checkpoint_verify(da));
    CHECK_OK(ct_checkpoint_verify(db));
    const char *texts[] = {"trainer_state.json", "scheduler.json", "rng_state_0.json", "run_config.json"};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        char *x = file_text(da, texts[i]), *y = file_text(db, texts[i]);
        CHECK(x && y && strcmp(x, y) == 0, "%s differs between the sync and the async save", texts[i]);
        free(x);
        free(y);
    }
    /* training_args.json differs only in save_async and output_dir: not compared */
    char *st = file_text(da, "trainer_state.json");
    json_t *o = st ? json_loads(st, 0, NULL) : NULL;
    json_t *ctl = json_object_get(json_object_get(o, "stateful_callbacks"), "TrainerControl");
    json_t *args = json_object_get(ctl, "args");
    CHECK(args != NULL, "no TrainerControl args in trainer_state.json: %s", st ? st : "(none)");
    /* as Hugging Face's _save_checkpoint records it: before on_save lowers should_save */
    CHECK(json_is_true(json_object_get(args, "should_save")),
          "the control was not saved as it was during the save (should_save true): %s", st ? st : "(none)");
    json_decref(o);
    free(st);

    for (int k = 0; k < 2; k++) {
        run c;
        run_init(&c, k ? "async" : "sync", 7, 0);
        c.control.should_save = true;
        CHECK(!matches(&c, &saved), "the fresh run already equals the saved one");
        CHECK_OK(resume(&c, "latest"));
        CHECK(matches(&c, &saved), "%s: weights, buffers or optimizer state differ after resume", k ? "async" : "sync");
        CHECK(same_progress(&c.progress, &saved_progress), "%s: the progress differs after resume",
              k ? "async" : "sync");
        CHECK(c.state.global_step == 5 && same_double(ct_scheduler_lr(c.sched), saved_lr),
              "%s: global_step %lld, lr %.17g vs %.17g", k ? "async" : "sync", (long long)c.state.global_step,
              ct_scheduler_lr(c.sched), saved_lr);
        CHECK(!c.control.should_save, "%s: should_save came back up", k ? "async" : "sync");
        run_free(&c);
    }
    copy_free(&saved);
    run_free(&a);
    run_free(&b);
}

/* A resume that fails after the files were found changes nothing the snapshot points at. */
static void test_failed_resume(void) {
    run a;
    run_init(&a, "fail", 7, 3);
    CHECK_OK(save(&a));
    run c; /* another model: model.h5 does not fit */
    run_init(&c, "fail", 9, 1);
    copy before;
    copy_of(&c, &before);
    ct_train_progress p = c.progress;
    CHECK(resume(&c, "latest") != CT_OK, "a resume into another model succeeded");
    CHECK(strstr(ct_last_error(), "resume from") != NULL, "message: %s", ct_last_error());
    CHECK(matches(&c, &before) && same_progress(&c.progress, &p) && c.state.global_step == 1,
          "a failed resume changed the run");
    copy_free(&before);
    run_free(&c);

    run_init(&c, "fail", 7, 1); /* the same model, another accumulation: the position means other samples */
    c.args.gradient_accumulation_steps = 3;
    copy_of(&c, &before);
    p = c.progress;
    CHECK_ERR(resume(&c, "latest"), CT_ERR_CONFIG, "gradient_accumulation_steps 2, this run has 3");
    CHECK(matches(&c, &before) && same_progress(&c.progress, &p) && c.state.global_step == 1,
          "a refused resume changed the run");
    copy_free(&before);
    run_free(&c);
    run_free(&a);
}

/* A save that cannot be written, on_save_error "continue": CT_OK, the step forgotten, nothing left. */
static void test_failed_save(void) {
    run a;
    run_init(&a, "blocked", 7, 2);
    char blocker[4200];
    snprintf(blocker, sizeof blocker, "%s/blocker", root);
    FILE *f = fopen(blocker, "w");
    CHECK(f != NULL, "cannot create %s", blocker);
    if (f) fclose(f);
    snprintf(a.args.output_dir, sizeof a.args.output_dir, "%s/out", blocker); /* under a regular file */
    a.args.on_save_error = CT_SAVE_ERROR_CONTINUE;
    CHECK_OK(save(&a));
    CHECK(a.saved_step == -1, "a failed save kept saved_step %lld", (long long)a.saved_step);
    a.args.on_save_error = CT_SAVE_ERROR_STOP;
    CHECK_ERR(save(&a), CT_ERR_IO, "checkpoint-2 could not be saved", "cannot create directory", "Not a directory",
              "training stops");
    CHECK(a.saved_step == -1, "a failed save kept saved_step %lld", (long long)a.saved_step);
    run_free(&a);
}

/* save_total_limit 2 keeps the two newest, and the best one besides. */
static void test_rotation(void) {
    run a;
    run_init(&a, "rotate", 7, 0);
    a.args.save_total_limit = 2;
    for (int step = 1; step <= 4; step++) {
        a.state.global_step = step;
        if (step == 1) a.state.best_global_step = 1; /* evaluated best at step 1 */
        CHECK_OK(save(&a));
    }
    char **list;
    int n;
    CHECK_OK(ct_checkpoint_list(a.args.output_dir, &list, &n));
    CHECK(n == 2 && strstr(list[0], "checkpoint-1") && strstr(list[1], "checkpoint-4"),
          "after rotation: %d checkpoints, %s .. %s", n, n ? list[0] : "-", n ? list[n - 1] : "-");
    ct_checkpoint_list_free(list, n);
    char best[4200];
    snprintf(best, sizeof best, "%s/checkpoint-1", a.args.output_dir);
    CHECK(strcmp(a.state.best_model_checkpoint, best) == 0, "best_model_checkpoint '%s'",
          a.state.best_model_checkpoint);
    CHECK(exists(best), "the best checkpoint was rotated away");
    run_free(&a);
}

/* A run writing into an output_dir that holds an earlier run's checkpoints of later steps, saved
 * before runs had an identity: rotation neither deletes nor counts them, and keeps the run's own
 * newest. */
static void test_rotation_beyond_step(void) {
    run old, a;
    run_init(&old, "beyond", 7, 0);
    old.progress.run_id[0] = '\0';
    for (int step = 10; step <= 11; step++) {
        old.state.global_step = step;
        CHECK_OK(save(&old));
    }
    run_init(&a, "beyond", 7, 0);
    a.args.save_total_limit = 1;
    for (int step = 1; step <= 3; step++) {
        a.state.global_step = step;
        CHECK_OK(save(&a));
    }
    char **list;
    int n;
    CHECK_OK(ct_checkpoint_list(a.args.output_dir, &list, &n));
    CHECK(n == 3 && strstr(list[0], "checkpoint-3") && strstr(list[1], "checkpoint-10") &&
              strstr(list[2], "checkpoint-11"),
          "after rotation: %d checkpoints, %s .. %s (expected the run's 3 and the earlier run's 10 and 11)", n,
          n ? list[0] : "-", n ? list[n - 1] : "-");
    ct_checkpoint_list_free(list, n);
    run_free(&a);
    run_free(&old);
}

static ct_status finish(run *r) {
    ct_checkpoint_snapshot s;
    snapshot_of(r, &s);
    return ct_checkpoint_finish(&s);
}

typedef struct latest_call {
    const char *dir;
    char found[4200];
    ct_status s;
} latest_call;

static void call_find_latest(void *arg) {
    latest_call *c = arg;
    c->s = ct_checkpoint_find_latest(c->dir, c->found, sizeof c->found);
}

/* A run written into the output_dir of another (overwrite_output_dir): rotation deletes only its own
 * checkpoints, whatever their steps; a checkpoint it saved over one of the other run's is its own. */
static void test_rotation_other_run(void) {
    run old, a;
    run_init(&old, "other_run", 7, 0);
    for (int step = 1; step <= 6; step++) {
        old.state.global_step = step;
        CHECK_OK(save(&old));
    }
    run_init(&a, "other_run", 7, 0);
    a.args.save_total_limit = 1;
    for (int step = 2; step <= 4; step += 2) {
        a.state.global_step = step;
        CHECK_OK(save(&a));
    }
    CHECK_OK(finish(&a));
    char **list;
    int n;
    CHECK_OK(ct_checkpoint_list(a.args.output_dir, &list, &n));
    static const char *const want[] = {"checkpoint-1", "checkpoint-3", "checkpoint-4", "checkpoint-5", "checkpoint-6"};
    bool same = n == 5;
    for (int i = 0; same && i < n; i++) {
        char base[64];
        ct_path_base_name(list[i], base, sizeof base);
        same = strcmp(base, want[i]) == 0;
    }
    CHECK(same, "after rotation: %d checkpoints, %s .. %s (expected the other run's 1, 3, 5, 6 and the run's 4)", n,
          n ? list[0] : "-", n ? list[n - 1] : "-");
    ct_checkpoint_list_free(list, n);
    /* "latest" is still the highest step, with a warning that another run saved some of them */
    latest_call call = {.dir = a.args.output_dir, .found = "", .s = CT_OK};
    char *err = ct_test_capture_stderr(call_find_latest, &call);
    CHECK(call.s == CT_OK && strstr(call.found, "/checkpoint-6") && err &&
              strstr(err, "checkpoint-6, the highest step, but ") && strstr(err, "was saved by another run"),
          "latest: %s (%s), warnings: %s", call.found, ct_status_str(call.s), err ? err : "");
    free(err);
    run_free(&a);
    run_free(&old);
}

static void path_in(char *out, size_t cap, const run *r, const char *name) {
    snprintf(out, cap, "%s/%s", r->args.output_dir, name);
}

static bool has(const run *r, const char *name) {
    char p[4400];
    path_in(p, sizeof p, r, name);
    struct stat st;
    return lstat(p, &st) == 0;
}

/* No `.deleting` (a rotation cut short) or `.tmp` (a save not committed) in dir. */
static bool no_leftovers(const char *dir) {
    DIR *d = opendir(dir);
    bool clean = true;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if ((n > 9 && strcmp(e->d_name + n - 9, ".deleting") == 0) || (n > 4 && strcmp(e->d_name + n - 4, ".tmp") == 0))
            clean = false;
    }
    if (d) closedir(d);
    return clean;
}

static void put_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CT_ASSERT(f);
    fputs(text, f);
    fclose(f);
}

/* Things named like checkpoints that rotation never deletes: a symbolic link to a real checkpoint
 * elsewhere, a directory without a manifest, names a save never writes, a regular file. */
static void test_rotation_proves(void) {
    run other, a;
    run_init(&other, "elsewhere", 7, 1);
    CHECK_OK(save(&other)); /* a real checkpoint, outside the rotated output_dir */
    run_init(&a, "proves", 7, 0);
    a.args.save_total_limit = 2;
    CHECK_OK(ct_make_dirs(a.args.output_dir));
    char p[4400], target[4400];
    path_in(target, sizeof target, &other, "checkpoint-1");
    path_in(p, sizeof p, &a, "checkpoint-1");
    CT_ASSERT(symlink(target, p) == 0);
    path_in(p, sizeof p, &a, "checkpoint-2");
    CHECK_OK(ct_make_dirs(p));
    strcat(p, "/notes.txt");
    put_file(p, "mine");
    const char *odd[] = {"checkpoint-02", "checkpoint-+3"};
    for (int i = 0; i < 2; i++) { /* whole checkpoints, under names a save never writes */
        char to[4400];
        path_in(to, sizeof to, &a, odd[i]);
        CHECK_OK(ct_make_dirs(to));
        const char *files[] = {"manifest.json", "model.h5"};
        for (int f = 0; f < 2; f++) {
            char src[4500], dst[4500];
            snprintf(src, sizeof src, "%s/%s", target, files[f]);
            snprintf(dst, sizeof dst, "%s/%s", to, files[f]);
            CT_ASSERT(link(src, dst) == 0);
        }
    }
    path_in(p, sizeof p, &a, "checkpoint-4");
    put_file(p, "a file");
    for (int step = 5; step <= 8; step++) {
        a.state.global_step = step;
        CHECK_OK(save(&a));
    }
    CHECK(!has(&a, "checkpoint-5") && !has(&a, "checkpoint-6") && has(&a, "checkpoint-7") && has(&a, "checkpoint-8"),
          "rotation of the run's own checkpoints");
    const char *kept[] = {"checkpoint-1", "checkpoint-2/notes.txt", "checkpoint-02/model.h5", "checkpoint-+3/model.h5",
                          "checkpoint-4"};
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++) CHECK(has(&a, kept[i]), "rotation deleted %s", kept[i]);
    CHECK(ct_checkpoint_verify(target) == CT_OK, "the checkpoint a link pointed at was damaged: %s", ct_last_error());
    CHECK(no_leftovers(a.args.output_dir), "rotation left a .deleting or .tmp behind");
    run_free(&a);
    run_free(&other);
}

/* Saves steps [first, last] of r (best_global_step as set by the caller). */
/* Saves at global steps first..last, the optimizer, scheduler and position advanced with them, so
 * that each checkpoint is one a resume's checks accept (as run_init's is). */
static void save_steps(run *r, int first, int last) {
    for (int step = first; step <= last; step++) {
        r->state.global_step = step;
        while (ct_optimizer_step_count(r->opt) < step - r->progress.nan_inf_skipped) {
            fill_params(&r->model.params, true);
            CHECK_OK(ct_optimizer_step(r->opt, ct_scheduler_lr(r->sched)));
            ct_scheduler_step(r->sched);
        }
        r->progress.epoch = step / 7;
        r->progress.next_batch = 2 * (step % 7);
        r->progress.last_logged_step = step - 1;
        r->progress.learning_rate = ct_scheduler_lr(r->sched);
        CHECK_OK(save(r));
    }
}

typedef struct finish_call {
    run *r;
    ct_status status;
} finish_call;

static void call_finish(void *arg) {
    finish_call *c = arg;
    c->status = finish(c->r);
}

typedef struct resume_call {
    run *r;
    const char *spec;
    ct_status status;
} resume_call;

static void call_resume(void *arg) {
    resume_call *c = arg;
    c->status = resume(c->r, c->spec);
}

static void move_output_dir(run *r, const char *name) {
    char to[4200];
    snprintf(to, sizeof to, "%s/%s", root, name);
    CT_ASSERT(rename(r->args.output_dir, to) == 0);
    snprintf(r->args.output_dir, sizeof r->args.output_dir, "%s", to);
}

static void test_best_that_does_not_resolve(void) {
    /* output_dir moved under a run whose best_model_checkpoint names the old place (a trainer_state
     * without best_global_step, so that no save renames it first): found by its step */
    run a;
    run_init(&a, "moved_from", 7, 0);
    a.args.save_total_limit = 2;
    a.state.best_global_step = 1;
    save_steps(&a, 1, 3); /* 1 (the best) and 3 stay */
    CHECK(has(&a, "checkpoint-1") && !has(&a, "checkpoint-2") && has(&a, "checkpoint-3"), "before the move");
    move_output_dir(&a, "moved_to");
    a.state.best_global_step = 0;
    save_steps(&a, 4, 4);
    CHECK(has(&a, "checkpoint-1") && !has(&a, "checkpoint-3") && has(&a, "checkpoint-4"),
          "after the move, the best (checkpoint-1, named '%s') was not kept", a.state.best_model_checkpoint);
    a.args.save_total_limit = 1;
    CHECK_OK(finish(&a)); /* the best is positively this output_dir's checkpoint-1: the rest goes */
    CHECK(has(&a, "checkpoint-1") && !has(&a, "checkpoint-4"), "limit 1 at the end after the move");

    /* a run resumed into another output_dir: its best is the old directory's */
    run src, dst;
    run_init(&src, "resume_src", 7, 0);
    src.args.save_total_limit = 1;
    src.state.best_global_step = 1;
    save_steps(&src, 1, 3);
    run_init(&dst, "resume_dst", 7, 0);
    dst.args.save_total_limit = 1;
    char from[4400];
    path_in(from, sizeof from, &src, "checkpoint-3");
    CHECK_OK(resume(&dst, from));
    char want[4400];
    path_in(want, sizeof want, &src, "checkpoint-1");
    CHECK(strcmp(dst.state.best_model_checkpoint, want) == 0, "best after resuming into another output_dir: '%s'",
          dst.state.best_model_checkpoint);
    save_steps(&dst, 4, 5);
    CHECK(has(&dst, "checkpoint-4") && has(&dst, "checkpoint-5"), "rotation in the new output_dir");
    finish_call fc = {.r = &dst};
    char *err = ct_test_capture_stderr(call_finish, &fc);
    CHECK(fc.status == CT_OK && has(&dst, "checkpoint-4") && has(&dst, "checkpoint-5"),
          "the end of training deleted the new output_dir's checkpoints: %s", err);
    CHECK(strstr(err, "is not one of output_dir") && strstr(err, want), "no warning naming the best: %s", err);
    free(err);
    CHECK(has(&src, "checkpoint-1") && has(&src, "checkpoint-3"), "the old output_dir lost a checkpoint");

    /* resumed after the run's output_dir moved: the best's name follows it */
    move_output_dir(&src, "resume_src_moved");
    run c;
    run_init(&c, "resume_src_moved", 7, 0);
    resume_call rc = {.r = &c, .spec = "latest"};
    ct_log_set_level(CT_LOG_LEVEL_INFO);
    err = ct_test_capture_stderr(call_resume, &rc);
    ct_log_set_level(CT_LOG_LEVEL_WARNING);
    path_in(want, sizeof want, &c, "checkpoint-1");
    CHECK(rc.status == CT_OK && strcmp(c.state.best_model_checkpoint, want) == 0 && strstr(err, want),
          "best after the move: '%s' (%s)", c.state.best_model_checkpoint, err);
    free(err);

    /* the best is gone: a warning, and the name stays */
    char best[4400];
    path_in(best, sizeof best, &c, "checkpoint-1");
    CHECK_OK(ct_remove_tree(best));
    run d;
    run_init(&d, "resume_src_moved", 7, 0);
    rc = (resume_call){.r = &d, .spec = "latest"};
    err = ct_test_capture_stderr(call_resume, &rc);
    CHECK(rc.status == CT_OK && strstr(err, "is gone") && strstr(d.state.best_model_checkpoint, "checkpoint-1"),
          "a best that is gone: %s", err);
    free(err);
    run_free(&d);
    run_free(&c);
    run_free(&dst);
    run_free(&src);
    run_free(&a);
}

static void make_dir_with(const run *r, const char *name, const char *file) {
    char p[4400];
    path_in(p, sizeof p, r, name);
    CHECK_OK(ct_make_dirs(p));
    if (file) {
        strcat(p, "/");
        strcat(p, file);
        put_file(p, name);
    }
}

static void test_leftovers(void) {
    run a, other;
    run_init(&a, "leftovers", 7, 0);
    run_init(&other, "leftovers_elsewhere", 7, 0);
    make_dir_with(&a, "checkpoint-3.tmp", "model.h5");
    make_dir_with(&a, "checkpoint-4.deleting", "model.h5");
    make_dir_with(&a, "checkpoint-5.old", "model.h5"); /* checkpoint-5 missing: put back */
    make_dir_with(&a, "checkpoint-6.old", "model.h5"); /* checkpoint-6 there: deleted */
    make_dir_with(&a, "checkpoint-6", "model.h5");
    make_dir_with(&other, "target", "precious");
    char p[4400], target[4400];
    path_in(target, sizeof target, &other, "target");
    path_in(p, sizeof p, &a, "checkpoint-7.tmp");
    CT_ASSERT(symlink(target, p) == 0);
    const char *kept_dirs[] = {"notes.tmp", "checkpoint-08.tmp", "checkpoint-x.deleting", "checkpoint-10"};
    for (size_t i = 0; i < sizeof kept_dirs / sizeof *kept_dirs; i++) make_dir_with(&a, kept_dirs[i], "f");
    path_in(p, sizeof p, &a, "checkpoint-9.tmp");
    put_file(p, "a file, not a save");
    /* atomic temporaries: of a process of this host that ended, of this one, of another host */
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    for (char *c = host; *c; c++)
        if (*c == '/' || *c == '.') *c = '_';
    pid_t child = fork();
    CT_ASSERT(child >= 0);
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0);
    char dead[600], live[600];
    snprintf(dead, sizeof dead, "trainer_state.json.tmp-%s-%ld", host, (long)child);
    snprintf(live, sizeof live, "trainer_state.json.tmp-%s-%ld", host, (long)getpid());
    const char *files[] = {dead, live, "model.h5.tmp-some-other-host-1"};
    for (int i = 0; i < 3; i++) {
        path_in(p, sizeof p, &a, files[i]);
        put_file(p, "partial");
    }
    ct_log_set_level(CT_LOG_LEVEL_INFO);
    CHECK_OK(ct_checkpoint_clean_leftovers(a.args.output_dir));
    ct_log_set_level(CT_LOG_LEVEL_WARNING);
    const char *gone[] = {"checkpoint-3.tmp", "checkpoint-4.deleting", "checkpoint-5.old", "checkpoint-6.old", dead};
    for (size_t i = 0; i < sizeof gone / sizeof *gone; i++) CHECK(!has(&a, gone[i]), "%s was left", gone[i]);
    const char *kept[] = {"checkpoint-5/model.h5",  "checkpoint-6/model.h5", "checkpoint-7.tmp", "checkpoint-9.tmp",
                          "notes.tmp/f", "checkpoint-08.tmp/f", "checkpoint-x.deleting/f", "checkpoint-10/f", live,
                          "model.h5.tmp-some-other-host-1"};
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++) CHECK(has(&a, kept[i]), "%s was deleted", kept[i]);
    strcat(target, "/precious");
    struct stat st;
    CHECK(stat(target, &st) == 0, "the target of a link named like a leftover was deleted");
    CHECK_OK(ct_checkpoint_clean_leftovers(a.args.output_dir)); /* nothing left to do: no error */
    run_free(&other);
    run_free(&a);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

int main(void) {
    ct_test_begin("test_checkpoint_snapshot");
    ct_h5_quiet();
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    CHECK_OK(ct_comm_create_default(60, &comm));
    test_sync_async_resume();
    test_failed_resume();
    test_failed_save();
    test_rotation();
    test_rotation_proves();
    test_rotation_beyond_step();
    test_rotation_other_run();
    test_best_that_does_not_resolve();
    test_leftovers();
    ct_comm_free(comm);
    nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return ct_test_finish();
}
