/* A checkpoint save that fails: a full disk, a file size limit, an output_dir that cannot be made.
 *
 * The primary tool is the write fault hook (core/io_fault.h): at the end of a chosen step the test
 * arms it so that the save of that step runs out of space at a chosen byte, inside each of the
 * checkpoint's files in turn (their sizes come from a clean run's checkpoint of the same step) or at
 * a random one. Then, synchronous and with save_async:
 *   - on_save_error "stop" (the default): the run fails with CT_ERR_IO; the message names the
 *     checkpoint, the file being written, "No space left on device" and the newest checkpoint left;
 *     no trace of the failed save stays on disk (no <dir>, <dir>.tmp or .part file); the earlier
 *     checkpoint verifies and resumes (the space back) to the clean run's weights and log, bit for bit;
 *   - "continue": the run ends normally, without that checkpoint (on_save does not fire for it), the
 *     next save succeeds once the space is back, the weights are the clean run's; a failed save of a
 *     new best checkpoint leaves best_model_checkpoint on one that exists (load_best_model_at_end
 *     then works).
 * Real failures too: an output_dir under a regular file (ENOTDIR), a file size limit (RLIMIT_FSIZE:
 * EFBIG, "File too large") and, where this process may mount one (root, or a user namespace), a
 * small tmpfs that really fills up (ENOSPC), in a child process with a mount namespace of its own;
 * that part is skipped when mounting is not allowed. And the hook itself: short write at the
 * boundary, the failures, the space coming back, CT_IO_FAULT from the environment. */
#define _GNU_SOURCE /* unshare */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_io.h"
#include "core/io_fault.h"
#include "core/rng.h"
#include "core/util.h"
#include "model/layers.h"
#include "testlib.h"
#include "trainer_fixture.h"
#include "trainer/trainer.h"
#include "trainer/trainer_impl.h" /* ct_trainer_async_save_drain */

static const char *tmp_root; /* the fixture's temporary root */
static ct_rng rng;

#define MAX_STEPS 12

/* 80 samples, batch 10, accumulation 2: 4 steps per epoch; checkpoints at steps 4, 8 and 12. */
static void run_args(ct_training_args *a, const char *root, const char *name) {
    ct_fixture_args(a, root, name);
    a->log_level = CT_LOG_ERROR; /* the warnings of "continue" are expected here */
    a->per_device_train_batch_size = 10;
    a->gradient_accumulation_steps = 2;
    a->max_steps = MAX_STEPS;
    a->learning_rate = 5e-3;
    a->logging_steps = 2;
    a->save_strategy = CT_INTERVAL_STEPS;
    a->save_steps = 4;
}

static int64_t file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}

/* --- a callback that arms the fault (or remounts) at the end of chosen steps ------------------------ */

typedef struct faulter {
    ct_callback base;
    int64_t arm_step, after_bytes, failures; /* arm at the end of arm_step (0: never) */
    int err;
    int64_t space_back_step;                  /* disarm at the end of this step (0: never) */
    void (*space_back)(void);                 /* what "the space comes back" does (NULL: disarm the hook) */
    int saves;                                /* on_save events */
} faulter;

static ct_status f_step_end(ct_callback *cb, const ct_callback_args *a) {
    faulter *f = ct_container_of(cb, faulter, base);
    int64_t g = a->state->global_step;
    if (g == f->arm_step || g == f->space_back_step) {
        /* a save still being written (save_async) ends first: the fault is meant for the next one */
        CT_TRY(ct_trainer_async_save_drain(a->trainer));
    }
    if (g == f->arm_step) ct_io_fault_arm(f->after_bytes, f->failures, f->err);
    if (g == f->space_back_step) {
        if (f->space_back)
            f->space_back();
        else
            ct_io_fault_disarm();
    }
    return CT_OK;
}

static ct_status f_save(ct_callback *cb, const ct_callback_args *a) {
    (void)a;
    ct_container_of(cb, faulter, base)->saves++;
    return CT_OK;
}

static const ct_callback_ops faulter_ops = {
    .size = sizeof(ct_callback_ops), .name = "faulter", .on_step_end = f_step_end, .on_save = f_save};

/* --- one run -------------------------------------------------------------------------------------- */

typedef struct outcome {
    ct_fixture_run run;
    int saves; /* on_save calls the faulter saw */
} outcome;

/* The trainer's hooks for the next runs (NULL: the defaults). */
static const ct_trainer_ops *run_ops;

static outcome run(const ct_training_args *a, const char *resume, const faulter *plan) {
    outcome o = {0};
    ct_dataset *train = ct_fixture_small_data(80, 1), *eval = ct_fixture_small_data(30, 2);
    ct_model m;
    ct_fixture_mlp mo = {.dim = 6, .classes = 3, .hidden = {16}, .max_batch = 16, .seed = 5};
    if (ct_fixture_mlp_build(&mo, &m) != CT_OK) abort();
    faulter *f = calloc(1, sizeof *f);
    if (plan) *f = *plan;
    f->base.ops = &faulter_ops;
    ct_callback_list cbs = {0};
    ct_callback_list_add(&cbs, &f->base);
    ct_trainer_setup setup = {.model = &m, .train_dataset = train, .callbacks = &cbs};
    if (a->eval_strategy != CT_INTERVAL_NO) {
        setup.n_eval = 1;
        setup.eval_datasets[0] = eval;
    }
    ct_trainer t;
    if (ct_fixture_train(&t, run_ops, a, &setup, resume, &o.run)) {
        ct_callback *cb = ct_trainer_pop_callback(&t, "faulter");
        if (cb) {
            o.saves = ct_container_of(cb, faulter, base)->saves;
            ct_callback_free(cb);
        }
        ct_trainer_free(&t);
    }
    ct_callback_list_free(&cbs);
    ct_io_fault_disarm(); /* whatever the run left armed */
    ct_model_free(&m);
    ct_dataset_free(train);
    ct_dataset_free(eval);
    return o;
}

static void outcome_free(outcome *o) { ct_fixture_run_free(&o->run); }

/* Nothing of a failed save in output_dir: no checkpoint-<step>, no .tmp directory, no .part file, no
 * temporary of an atomic file write (core/fs.h: "<file>.tmp-<host>-<pid>"). */
static void no_trace(const char *label, const char *output_dir, int64_t step) {
    char path[1400];
    snprintf(path, sizeof path, "%s/checkpoint-%lld", output_dir, (long long)step);
    CHECK(access(path, F_OK) != 0, "%s: %s exists", label, path);
    DIR *d = opendir(output_dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        bool stray = (n > 4 && strcmp(e->d_name + n - 4, ".tmp") == 0) || strstr(e->d_name, ".tmp-") ||
                     strstr(e->d_name, ".part") || strstr(e->d_name, ".deleting");
        CHECK(!stray, "%s: %s/%s was left behind", label, output_dir, e->d_name);
    }
    if (d) closedir(d);
}

/* The files of a checkpoint in the order the writer writes them, and their sizes. */
static const char *const write_order[] = {"model.h5",       "training_args.json", "trainer_state.json",
                                          "optimizer.h5",   "scheduler.json",     "rng_state_0.json",
                                          "manifest.json"};
#define N_FILES ((int)(sizeof write_order / sizeof write_order[0]))

typedef struct layout {
    int64_t offset[N_FILES], size[N_FILES], total;
    int64_t pages; /* bytes of whole 4 KiB pages the files take (what a tmpfs counts) */
} layout;

static bool measure(const char *dir, layout *l) {
    l->total = l->pages = 0;
    for (int i = 0; i < N_FILES; i++) {
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", dir, write_order[i]);
        l->size[i] = file_size(path);
        if (l->size[i] <= 16) return false;
        l->offset[i] = l->total;
        l->total += l->size[i];
        l->pages += (l->size[i] + 4095) / 4096 * 4096;
    }
    return true;
}

/* A random byte of file i, 8 bytes clear of its ends: the runs' training_args.json differ from the
 * clean run's by a few characters ("continue", save_async true), which moves the later files a bit. */
static int64_t byte_in(const layout *l, int i) {
    return l->offset[i] + 8 + (int64_t)(ct_rng_uniform(&rng) * (double)(l->size[i] - 16));
}

/* --- the hook's own behaviour ---------------------------------------------------------------------- */

static void test_hook(void) {
    char path[300];
    snprintf(path, sizeof path, "%s/hook.bin", tmp_root);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CT_ASSERT(fd >= 0);
    char buf[10] = "0123456789";
    /* CT_IO_FAULT=5:1:EIO was set before the first write: 5 bytes, one failure, then fine */
    ssize_t w = ct_io_write(fd, buf, 10);
    CHECK(w == 5, "the environment's fault: first write gave %zd, expected the short write 5", w);
    errno = 0;
    w = ct_io_write(fd, buf, 10);
    CHECK(w == -1 && errno == EIO, "the environment's fault: %zd, errno %d (want -1, EIO)", w, errno);
    CHECK(ct_io_fault_count() == 1, "%lld failures counted", (long long)ct_io_fault_count());
    CHECK(ct_io_write(fd, buf, 10) == 10, "after its one failure the hook lets writes through");
    ct_io_fault_arm(3, 2, ENOSPC);
    CHECK(ct_io_write(fd, buf, 2) == 2 && ct_io_write(fd, buf, 10) == 1, "3 bytes through, in pieces");
    CHECK(ct_io_write(fd, buf, 4) == -1 && errno == ENOSPC && ct_io_write(fd, buf, 1) == -1 && errno == ENOSPC,
          "then two ENOSPC failures");
    CHECK(ct_io_write(fd, buf, 10) == 10, "then the space is back");
    ct_io_fault_arm(0, -1, ENOSPC);
    CHECK(ct_io_write(fd, buf, 1) == -1 && ct_io_write(fd, buf, 1) == -1 && ct_io_write(fd, buf, 1) == -1,
          "failures -1: every write fails");
    ct_io_fault_disarm();
    CHECK(ct_io_write(fd, buf, 10) == 10, "disarmed");
    close(fd);
    CHECK(file_size(path) == 5 + 10 + 3 + 10 + 10, "the file holds %lld bytes", (long long)file_size(path));
    unlink(path);
}

/* --- the fault hook in saves --------------------------------------------------------------------- */

static void check_stop(const char *label, const ct_training_args *a, const outcome *o, const outcome *clean,
                       int64_t step, const char *file, const char *errtext) {
    char dir[1300], prev[1300];
    snprintf(dir, sizeof dir, "%s/checkpoint-%lld", a->output_dir, (long long)step);
    snprintf(prev, sizeof prev, "%s/checkpoint-%lld", a->output_dir, (long long)step - 4);
    CHECK(o->run.status == CT_ERR_IO, "%s: %s: %s", label, ct_status_str(o->run.status), o->run.message);
    CHECK(strstr(o->run.message, errtext) && strstr(o->run.message, file) && strstr(o->run.message, dir) &&
              strstr(o->run.message, "on_save_error 'stop'") && strstr(o->run.message, prev),
          "%s: the message lacks '%s', '%s', %s, the policy or the newest checkpoint %s: %s", label, errtext, file,
          dir, prev, o->run.message);
    no_trace(label, a->output_dir, step);
    CHECK(ct_checkpoint_verify(prev) == CT_OK, "%s: %s does not verify: %s", label, prev, ct_last_error());
    /* the space is back: the run resumes from the checkpoint before and ends as the clean run */
    outcome r = run(a, "latest", NULL);
    char l2[400];
    snprintf(l2, sizeof l2, "%s, resumed", label);
    CHECK(r.run.status == CT_OK, "%s: %s", l2, r.run.message);
    CHECK(ct_fixture_same_bits(&r.run.weights, &clean->run.weights), "%s: the weights differ from the clean run's", l2);
    ct_fixture_check_same_log(l2, clean->run.log, r.run.log);
    outcome_free(&r);
}

/* The save of step 8 runs out of space at byte `at` (of its checkpoint's bytes, in write order). */
static void test_full_disk(const char *name, bool save_async, bool go_on, int64_t at, const char *file,
                           const outcome *clean) {
    ct_training_args a;
    run_args(&a, tmp_root, name);
    ct_fixture_remove(a.output_dir);
    a.save_async = save_async;
    a.on_save_error = go_on ? CT_SAVE_ERROR_CONTINUE : CT_SAVE_ERROR_STOP;
    char label[300];
    snprintf(label, sizeof label, "%s: no space at byte %lld (in %s)%s, on_save_error %s", name, (long long)at, file,
             save_async ? ", save_async" : "", go_on ? "continue" : "stop");
    faulter plan = {.arm_step = 8, .after_bytes = at, .failures = -1, .err = ENOSPC,
                    .space_back_step = go_on ? 9 : 0};
    outcome o = run(&a, NULL, &plan);
    if (!go_on) {
        check_stop(label, &a, &o, clean, 8, file, "No space left on device");
    } else {
        CHECK(o.run.status == CT_OK, "%s: %s", label, o.run.message);
        CHECK(o.run.global_step == MAX_STEPS, "%s: ended at step %lld", label, (long long)o.run.global_step);
        no_trace(label, a.output_dir, 8);
        for (int s = 4; s <= 12; s += 8) {
            char dir[1300];
            snprintf(dir, sizeof dir, "%s/checkpoint-%d", a.output_dir, s);
            CHECK(ct_checkpoint_verify(dir) == CT_OK, "%s: %s: %s", label, dir, ct_last_error());
        }
        if (!save_async) CHECK(o.saves == 2, "%s: on_save fired %d times (3 saves, one failed)", label, o.saves);
        CHECK(ct_fixture_same_bits(&o.run.weights, &clean->run.weights), "%s: the weights differ from the clean run's", label);
    }
    outcome_free(&o);
    ct_training_args_free(&a);
}

/* A metric that improves at every evaluation: "eval_step", the step evaluated. */
static ct_status step_metric(ct_trainer *t, const ct_prediction_output *p, const char *prefix, json_t *metrics) {
    (void)p;
    char key[64];
    snprintf(key, sizeof key, "%s_step", prefix);
    json_object_set_new(metrics, key, json_integer(t->state.global_step));
    return CT_OK;
}

/* A new best checkpoint whose save fails: best_model_checkpoint stays on one that exists. */
static void test_best_lost(void) {
    ct_training_args a;
    run_args(&a, tmp_root, "best_lost");
    ct_fixture_remove(a.output_dir);
    a.eval_strategy = CT_INTERVAL_STEPS;
    a.eval_steps = 4;
    a.load_best_model_at_end = true;
    snprintf(a.metric_for_best_model, sizeof a.metric_for_best_model, "step");
    a.greater_is_better = 1;
    a.on_save_error = CT_SAVE_ERROR_CONTINUE;
    a.eval_bootstrap_resamples = 0;
    /* every save from step 8 on fails, and steps 8 and 12 are each a new best */
    static const ct_trainer_ops ops = {.size = sizeof(ct_trainer_ops), .compute_metrics = step_metric};
    run_ops = &ops;
    faulter plan = {.arm_step = 8, .after_bytes = 100, .failures = -1, .err = ENOSPC};
    outcome o = run(&a, NULL, &plan);
    run_ops = NULL;
    CHECK(o.run.status == CT_OK, "best lost: %s", o.run.message);
    char four[1300];
    snprintf(four, sizeof four, "%s/checkpoint-4", a.output_dir);
    CHECK(strcmp(o.run.best_model_checkpoint, four) == 0 && access(four, F_OK) == 0,
          "best lost: best_model_checkpoint is '%s', the only checkpoint is %s", o.run.best_model_checkpoint, four);
    outcome_free(&o);
    ct_training_args_free(&a);
}

/* Real failures: an output_dir under a regular file; a file size limit. */
static void test_real_failures(const outcome *clean, const layout *l) {
    ct_training_args a;
    char blocker[300], root[400];
    snprintf(blocker, sizeof blocker, "%s/a_file", tmp_root);
    FILE *f = fopen(blocker, "w");
    CT_ASSERT(f);
    fclose(f);
    snprintf(root, sizeof root, "%s/a_file", tmp_root);
    run_args(&a, root, "out");
    outcome o = run(&a, NULL, NULL);
    /* refused at the start, before the first step, rather than at the first save */
    CHECK(o.run.status == CT_ERR_IO && strstr(o.run.message, "Not a directory") &&
              strstr(o.run.message, "output_dir '") && strstr(o.run.message, "a_file/out") && o.run.global_step == 0,
          "output_dir under a file: %s: %s (step %lld)", ct_status_str(o.run.status), o.run.message,
          (long long)o.run.global_step);
    outcome_free(&o);
    a.on_save_error = CT_SAVE_ERROR_CONTINUE;
    o = run(&a, NULL, NULL);
    CHECK(o.run.status == CT_OK && ct_fixture_same_bits(&o.run.weights, &clean->run.weights), "output_dir under a file, continue: %s", o.run.message);
    outcome_free(&o);
    ct_training_args_free(&a);
    /* RLIMIT_FSIZE: no file may grow past half of model.h5 (EFBIG, "File too large"; SIGXFSZ ignored) */
    struct rlimit old;
    CT_ASSERT(getrlimit(RLIMIT_FSIZE, &old) == 0);
    struct rlimit lim = {.rlim_cur = (rlim_t)(l->size[0] / 2), .rlim_max = old.rlim_max};
    if (old.rlim_max != RLIM_INFINITY && old.rlim_max < lim.rlim_cur) {
        printf("skipped: RLIMIT_FSIZE (hard limit %llu)\n", (unsigned long long)old.rlim_max);
        return;
    }
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    run_args(&a, tmp_root, "fsize");
    ct_fixture_remove(a.output_dir);
    /* the checkpoint of step 4 is written before the limit: the limit comes at the end of step 8 */
    CT_ASSERT(setrlimit(RLIMIT_FSIZE, &old) == 0);
    a.save_steps = 4;
    a.max_steps = 8;
    outcome first = run(&a, NULL, NULL); /* checkpoints 4 and 8, whole */
    CHECK(first.run.status == CT_OK, "fsize, the first part: %s", first.run.message);
    outcome_free(&first);
    a.max_steps = MAX_STEPS;
    CT_ASSERT(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    o = run(&a, "latest", NULL); /* resumed at 8: the save of 12 hits the limit */
    CT_ASSERT(setrlimit(RLIMIT_FSIZE, &old) == 0);
    signal(SIGXFSZ, prev);
    char dir[1300], eight[1300];
    snprintf(dir, sizeof dir, "%s/checkpoint-12", a.output_dir);
    snprintf(eight, sizeof eight, "%s/checkpoint-8", a.output_dir);
    CHECK(o.run.status == CT_ERR_IO && strstr(o.run.message, "File too large") && strstr(o.run.message, "model.h5") &&
              strstr(o.run.message, dir) && strstr(o.run.message, eight),
          "file size limit: %s: %s", ct_status_str(o.run.status), o.run.message);
    no_trace("file size limit", a.output_dir, 12);
    CHECK(ct_checkpoint_verify(eight) == CT_OK, "file size limit: %s: %s", eight, ct_last_error());
    outcome_free(&o);
    ct_training_args_free(&a);
}

/* --- a real small file system (tmpfs), in a child with a mount namespace of its own ---------------- */

static char tmpfs_dir[300];
static int64_t tmpfs_big;

static void remount_big(void) {
    char opts[64];
    snprintf(opts, sizeof opts, "size=%lld", (long long)tmpfs_big);
    if (mount("tmpfs", tmpfs_dir, "tmpfs", MS_REMOUNT, opts) != 0) perror("remount");
}

static bool write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY);
    if (fd < 0) return false;
    bool ok = write(fd, text, strlen(text)) == (ssize_t)strlen(text);
    close(fd);
    return ok;
}

/* A private mount namespace (root, else a user namespace mapping this user to root): false when
 * neither is allowed here. */
static bool private_mounts(void) {
    uid_t uid = getuid();
    gid_t gid = getgid();
    if (unshare(CLONE_NEWNS) != 0) {
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return false;
        char map[64];
        write_file("/proc/self/setgroups", "deny");
        snprintf(map, sizeof map, "0 %u 1", (unsigned)uid);
        if (!write_file("/proc/self/uid_map", map)) return false;
        snprintf(map, sizeof map, "0 %u 1", (unsigned)gid);
        if (!write_file("/proc/self/gid_map", map)) return false;
    }
    return mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0;
}

static int tmpfs_child(void) {
    if (!private_mounts()) {
        printf("skipped: tmpfs: no mount namespace here (%s)\n", strerror(errno));
        return 77;
    }
    /* a clean run on the ordinary disk: the results and a checkpoint's size */
    ct_training_args a;
    run_args(&a, tmp_root, "tmpfs_clean");
    a.save_total_limit = 1;
    outcome clean = run(&a, NULL, NULL);
    CHECK(clean.run.status == CT_OK, "tmpfs, the clean run: %s", clean.run.message);
    char ck[1300];
    snprintf(ck, sizeof ck, "%s/checkpoint-12", a.output_dir);
    layout l;
    CT_ASSERT(measure(ck, &l));
    ct_training_args_free(&a);
    /* room for one checkpoint and a half: the second one cannot be written beside the first */
    int64_t page = 4096, small = (l.pages * 3 / 2 + page - 1) / page * page;
    tmpfs_big = 16 * small;
    snprintf(tmpfs_dir, sizeof tmpfs_dir, "%s/tmpfs", tmp_root);
    mkdir(tmpfs_dir, 0755);
    char opts[64];
    snprintf(opts, sizeof opts, "size=%lld", (long long)small);
    if (mount("tmpfs", tmpfs_dir, "tmpfs", 0, opts) != 0) {
        printf("skipped: tmpfs: mount: %s\n", strerror(errno));
        outcome_free(&clean);
        return 77;
    }
    printf("tmpfs of %lld bytes for checkpoints of %lld bytes (%lld in pages)\n", (long long)small,
           (long long)l.total, (long long)l.pages);
    /* stop: the save of step 8 finds the disk full */
    run_args(&a, tmpfs_dir, "stop");
    a.save_total_limit = 1;
    outcome o = run(&a, NULL, NULL);
    char eight[1300], four[1300];
    snprintf(eight, sizeof eight, "%s/checkpoint-8", a.output_dir);
    snprintf(four, sizeof four, "%s/checkpoint-4", a.output_dir);
    CHECK(o.run.status == CT_ERR_IO && strstr(o.run.message, "No space left on device") && strstr(o.run.message, eight) &&
              strstr(o.run.message, four) && strstr(o.run.message, "on_save_error 'stop'"),
          "tmpfs, stop: %s: %s", ct_status_str(o.run.status), o.run.message);
    no_trace("tmpfs, stop", a.output_dir, 8);
    CHECK(ct_checkpoint_verify(four) == CT_OK, "tmpfs, stop: %s: %s", four, ct_last_error());
    outcome_free(&o);
    /* space back: the run resumes from checkpoint-4 and ends as the clean run */
    remount_big();
    o = run(&a, "latest", NULL);
    CHECK(o.run.status == CT_OK && ct_fixture_same_bits(&o.run.weights, &clean.run.weights), "tmpfs, resumed with space: %s", o.run.message);
    ct_fixture_check_same_log("tmpfs, resumed with space", clean.run.log, o.run.log);
    outcome_free(&o);
    ct_training_args_free(&a);
    ct_fixture_remove(a.output_dir);
    /* continue: the save of 8 fails for want of space, which comes back after step 9; the save of 12
     * succeeds and rotation (save_total_limit 1) deletes checkpoint-4 */
    snprintf(opts, sizeof opts, "size=%lld", (long long)small);
    CT_ASSERT(mount("tmpfs", tmpfs_dir, "tmpfs", MS_REMOUNT, opts) == 0);
    run_args(&a, tmpfs_dir, "continue");
    a.save_total_limit = 1;
    a.on_save_error = CT_SAVE_ERROR_CONTINUE;
    faulter plan = {.space_back_step = 9, .space_back = remount_big};
    o = run(&a, NULL, &plan);
    char twelve[1300];
    snprintf(twelve, sizeof twelve, "%s/checkpoint-12", a.output_dir);
    snprintf(four, sizeof four, "%s/checkpoint-4", a.output_dir);
    CHECK(o.run.status == CT_OK && ct_fixture_same_bits(&o.run.weights, &clean.run.weights), "tmpfs, continue: %s", o.run.message);
    CHECK(o.saves == 2, "tmpfs, continue: on_save fired %d times (3 saves, one failed)", o.saves);
    no_trace("tmpfs, continue", a.output_dir, 8);
    CHECK(ct_checkpoint_verify(twelve) == CT_OK && access(four, F_OK) != 0,
          "tmpfs, continue: checkpoint-12 (%s) whole and checkpoint-4 rotated away", ct_last_error());
    outcome_free(&o);
    ct_training_args_free(&a);
    outcome_free(&clean);
    umount(tmpfs_dir);
    printf("the tmpfs part (a child process; its counts include the checks before the fork): ");
    return ct_test_finish();
}

/* Forked first, before this process has any thread: the child may unshare and use OpenMP freely. */
static void test_tmpfs(void) {
    fflush(stdout);
    pid_t pid = fork();
    CT_ASSERT(pid >= 0);
    if (pid == 0) {
        int code = tmpfs_child();
        fflush(stdout); /* _exit does not flush */
        _exit(code);
    }
    int status;
    waitpid(pid, &status, 0);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code == 77) return; /* skipped: said so */
    CHECK(code == 0, "the tmpfs child failed (exit %d): see its output above", code);
}

int main(void) {
    /* before the first write of the process: the environment arms the hook */
    setenv("CT_IO_FAULT", "5:1:EIO", 1);
    ct_test_begin("test_save_errors");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    if (!(tmp_root = ct_fixture_tmp_root("ct_test_save_errors"))) return 1;
    test_hook();
    unsetenv("CT_IO_FAULT");
    test_tmpfs();
    ct_training_args a;
    ct_training_args_default(&a);
    CHECK(a.on_save_error == CT_SAVE_ERROR_STOP, "the default on_save_error is %d", (int)a.on_save_error);
    CHECK_ERR(ct_training_args_set(&a, "on_save_error", "ignore"), CT_ERR_CONFIG, "on_save_error", "continue");
    ct_training_args_free(&a);
    /* the clean run: its checkpoint-8 says where each file's bytes lie */
    run_args(&a, tmp_root, "clean");
    outcome clean = run(&a, NULL, NULL);
    CHECK(clean.run.status == CT_OK && clean.run.global_step == MAX_STEPS, "the clean run: %s", clean.run.message);
    char ck[1300];
    snprintf(ck, sizeof ck, "%s/checkpoint-8", a.output_dir);
    layout l;
    CT_ASSERT(measure(ck, &l));
    ct_training_args_free(&a);
    /* stop, synchronous: a random byte inside each file in turn */
    for (int i = 0; i < N_FILES; i++) {
        char name[64];
        snprintf(name, sizeof name, "stop_%d", i);
        test_full_disk(name, false, false, byte_in(&l, i), write_order[i], &clean);
    }
    /* a random file: asynchronous stop, continue both ways, and the very first byte */
    for (int i = 0; i < 5; i++) {
        char name[64];
        int k = (int)(ct_rng_uniform(&rng) * N_FILES);
        snprintf(name, sizeof name, "mixed_%d", i);
        bool save_async = i == 0 || i == 3, go_on = i == 2 || i == 3;
        test_full_disk(name, save_async, go_on, i == 4 ? 0 : byte_in(&l, k), write_order[i == 4 ? 0 : k], &clean);
    }
    test_best_lost();
    test_real_failures(&clean, &l);
    outcome_free(&clean);
    ct_fixture_cleanup();
    return ct_test_finish();
}
