/* Asynchronous checkpoint saving (save_async, checkpoint/checkpoint_async.h), one process.
 *
 *  - The same run with save_async and with synchronous saves writes the same checkpoints, file for
 *    file: every step saved, every 3 steps with accumulation and rotation, evaluation with the best
 *    model kept and loaded at the end (save_total_limit 1), save_only_model. Byte for byte, except
 *    what differs by nature: training_args.json says save_async, the evaluation timings in
 *    trainer_state.json's log history, and — while core/format/h5io.c lets HDF5 record object times (a
 *    probe at start tells) — the HDF5 files, which are then compared dataset by dataset and
 *    attribute by attribute. The training itself (logs, final weights) is bit-identical.
 *  - Resume: a run that fails at step 7 or 8 and is resumed from its latest checkpoint ends with
 *    the weights of the uninterrupted run, with save_async as without (so the async save in flight
 *    when the run failed was completed: nothing is lost).
 *  - SIGTERM with a save in flight (at a save step, and one step later): the run returns
 *    CT_ERR_INTERRUPTED with whole, verified checkpoints and no temporary directory; resuming from
 *    it gives the uninterrupted run.
 *  - Errors: an output_dir that cannot be created fails the save at once, naming the checkpoint;
 *    a write that fails in the writer thread (RLIMIT_FSIZE below model.h5's size: EFBIG) stops
 *    training with an error naming the checkpoint directory, and nothing is committed.
 *  - The writer never reads live weights: with save_steps 1, each checkpoint's model.h5 equals the
 *    weights a callback copied at that step's on_step_end, although the callback held the writer
 *    back (through the HDF5 lock it needs) until the next optimizer step had changed the weights.
 *
 * Why one file of over 600 lines: every check compares a run with save_async against the
 * synchronous one, through one run helper and the file comparison written here. */
#define _GNU_SOURCE
#include <dirent.h>
#include <hdf5.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_io.h"
#include "core/format/h5io.h"
#include "core/rng.h"
#include "core/util.h"
#include "model/layers.h"
#include "model/model_io.h"
#include "testlib.h"
#include "trainer_fixture.h"
#include "trainer/trainer.h"

static const char *root; /* the fixture's temporary root */
static bool h5_deterministic; /* two writes of the same tensors give the same bytes */

/* --- runs ----------------------------------------------------------------------------------------- */

static ct_status make_model(ct_model *m, int64_t hidden) {
    ct_fixture_mlp o = {.dim = 6, .classes = 3, .hidden = {hidden, hidden}, .dropout = 0.1, .max_batch = 16, .seed = 11};
    return ct_fixture_mlp_build(&o, m);
}

/* 100 samples, batch 10: 10 batches per epoch. */
static void base_args(ct_training_args *a, const char *name) {
    ct_fixture_args(a, root, name);
    a->per_device_train_batch_size = 10;
    a->per_device_eval_batch_size = 16;
    a->num_train_epochs = 2;
    a->learning_rate = 5e-3;
    a->warmup_steps = 2;
    a->logging_steps = 4;
    a->save_strategy = CT_INTERVAL_STEPS;
    a->save_steps = 3;
    a->eval_bootstrap_resamples = 20;
}

/* A callback that fails or raises a signal at on_step_end of one step. */
typedef struct crasher {
    ct_callback base;
    int64_t step;
    int signal; /* 0: fail */
} crasher;

static ct_status crash_step_end(ct_callback *cb, const ct_callback_args *a) {
    crasher *c = ct_container_of(cb, crasher, base);
    if (a->state->global_step != c->step) return CT_OK;
    c->step = -1;
    if (c->signal) {
        raise(c->signal);
        return CT_OK;
    }
    return ct_error(CT_ERR_IO, "simulated crash");
}

static const ct_callback_ops crasher_ops = {
    .size = sizeof(ct_callback_ops), .name = "crasher", .on_step_end = crash_step_end};

static ct_callback *new_crasher(int64_t step, int sig) {
    crasher *c = calloc(1, sizeof *c);
    c->base.ops = &crasher_ops;
    c->step = step;
    c->signal = sig;
    return &c->base;
}

/* Copies the flat weights at every on_step_end (index: global_step). And makes sure the writer
 * serialises each checkpoint after the weights changed: at on_step_end of step k (just before the
 * save of step k) it takes the process-wide HDF5 lock, which the writer needs to build model.h5, and
 * gives it back at on_optimizer_step of step k + 1, once the optimizer has updated the live weights;
 * meanwhile it counts the updates made while the checkpoint of step k was not committed. A writer
 * that read the live weights would write those of step k + 1. */
typedef struct recorder {
    ct_callback base;
    ct_tensor w[64];
    int64_t max_steps;
    bool locked;
    int overlaps;
} recorder;

static ct_status record_step_end(ct_callback *cb, const ct_callback_args *a) {
    recorder *r = ct_container_of(cb, recorder, base);
    int64_t k = a->state->global_step;
    const ct_tensor *v = &a->trainer->model->params.values;
    if (k >= 64) return CT_OK;
    CT_TRY(ct_tensor_alloc(&r->w[k], v->dtype, CT_CPU, 1, v->shape));
    memcpy(r->w[k].data, v->data, ct_tensor_nbytes(v));
    /* The save of step k first waits for that of step k - 1, whose writer needs the lock: it must
     * be through (committed) before the lock is taken again. */
    char prev[600];
    struct stat st;
    snprintf(prev, sizeof prev, "%s/checkpoint-%lld", a->args->output_dir, (long long)k - 1);
    for (int i = 0; k > 1 && stat(prev, &st) != 0; i++) {
        if (i == 60000) return ct_error(CT_ERR_STATE, "recorder: %s was not committed within 60 s", prev);
        usleep(1000);
    }
    /* not at the last step: nothing would give the lock back before the end of training waits */
    if (k < r->max_steps && !r->locked) {
        ct_h5_lock();
        r->locked = true;
    }
    return CT_OK;
}

/* after the update of step global_step + 1 */
static ct_status record_optimizer_step(ct_callback *cb, const ct_callback_args *a) {
    recorder *r = ct_container_of(cb, recorder, base);
    char prev[600];
    struct stat st;
    snprintf(prev, sizeof prev, "%s/checkpoint-%lld", a->args->output_dir, (long long)a->state->global_step);
    if (a->state->global_step > 0 && stat(prev, &st) != 0) r->overlaps++;
    if (r->locked) {
        r->locked = false;
        ct_h5_unlock();
    }
    return CT_OK;
}

static void recorder_destroy(ct_callback *cb) { (void)cb; /* owned by the test */ }

static const ct_callback_ops recorder_ops = {.size = sizeof(ct_callback_ops),
                                             .name = "recorder",
                                             .on_step_end = record_step_end,
                                             .on_optimizer_step = record_optimizer_step,
                                             .destroy = recorder_destroy};

typedef ct_fixture_run outcome;

static bool timing_key(const char *k) { return strstr(k, "_runtime") || strstr(k, "_per_second"); }

/* A copy of v without the timing keys (and save_async), at any depth. */
static json_t *normalized(const json_t *v) {
    if (json_is_object(v)) {
        json_t *o = json_object();
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) if (!timing_key(k) && strcmp(k, "save_async") != 0 &&
                                                   strcmp(k, "run_id") != 0)
            json_object_set_new(o, k, normalized(x));
        return o;
    }
    if (json_is_array(v)) {
        json_t *a = json_array();
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) json_array_append_new(a, normalized(x));
        return a;
    }
    return json_deep_copy(v);
}

static outcome run(const ct_training_args *a, const char *resume, ct_callback *cb, int64_t hidden, bool with_eval) {
    outcome o;
    ct_dataset *train = ct_fixture_small_data(100, 1), *eval = ct_fixture_small_data(30, 2);
    ct_model m;
    if (make_model(&m, hidden) != CT_OK) abort();
    ct_callback_list cbs = {0};
    if (cb) ct_callback_list_add(&cbs, cb);
    ct_trainer_setup setup = {.model = &m, .train_dataset = train, .callbacks = &cbs};
    if (with_eval) {
        setup.n_eval = 1;
        setup.eval_datasets[0] = eval;
    }
    ct_trainer t;
    if (ct_fixture_train(&t, NULL, a, &setup, resume, &o)) {
        json_decref(o.log); /* compared without save_async too, and without timings at any depth */
        o.log = normalized(t.state.log_history);
        ct_trainer_free(&t);
    }
    ct_callback_list_free(&cbs);
    ct_model_free(&m);
    ct_dataset_free(train);
    ct_dataset_free(eval);
    return o;
}

static void same_training(const char *label, const outcome *want, const outcome *got) {
    CHECK(got->status == CT_OK, "%s: the run failed: %s", label, got->message);
    if (got->status != CT_OK || want->status != CT_OK) return;
    CHECK(json_equal(want->log, got->log), "%s: the log histories differ", label);
    CHECK(ct_fixture_same_bits(&want->weights, &got->weights), "%s: the final weights are not bit-identical", label);
}

/* --- comparing checkpoint directories ------------------------------------------------------------- */

static bool same_bytes(const char *a, const char *b) {
    size_t na, nb;
    char *x = ct_test_read_file(a, &na), *y = ct_test_read_file(b, &nb);
    bool same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The sorted entry names of dir (without . and ..), count in *n. */
static char **list_dir(const char *dir, int *n) {
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char **names = malloc(256 * sizeof *names);
    for (struct dirent *e; (e = readdir(d)) && *n < 256;)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) names[(*n)++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)*n, sizeof *names, cmp_names);
    return names;
}

static void free_list(char **l, int n) {
    for (int i = 0; i < n; i++) free(l[i]);
    free(l);
}

static bool has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static herr_t collect(hid_t g, const char *name, const H5L_info_t *info, void *data) {
    (void)g, (void)info;
    json_array_append_new(data, json_string(name));
    return 0;
}

static herr_t collect_attr(hid_t loc, const char *name, const H5A_info_t *info, void *data) {
    (void)loc, (void)info;
    json_array_append_new(data, json_string(name));
    return 0;
}

/* Same datasets (names, types, shapes, bytes) and root attributes (names, types, values). */
static bool same_h5_content(const char *a, const char *b, char *why, size_t cap) {
    ct_h5_lock();
    ct_h5_quiet();
    hid_t fa = H5Fopen(a, H5F_ACC_RDONLY, H5P_DEFAULT), fb = H5Fopen(b, H5F_ACC_RDONLY, H5P_DEFAULT);
    bool same = fa >= 0 && fb >= 0;
    if (!same) snprintf(why, cap, "cannot open");
    json_t *la = json_array(), *lb = json_array();
    if (same) {
        H5Literate(fa, H5_INDEX_NAME, H5_ITER_INC, NULL, collect, la);
        H5Literate(fb, H5_INDEX_NAME, H5_ITER_INC, NULL, collect, lb);
        same = json_equal(la, lb) && json_array_size(la) > 0;
        if (!same) snprintf(why, cap, "other datasets");
    }
    for (size_t i = 0; same && i < json_array_size(la); i++) {
        const char *name = json_string_value(json_array_get(la, i));
        hid_t da = H5Dopen2(fa, name, H5P_DEFAULT), db = H5Dopen2(fb, name, H5P_DEFAULT);
        hid_t ta = H5Dget_type(da), tb = H5Dget_type(db);
        hid_t sa = H5Dget_space(da), sb = H5Dget_space(db);
        hsize_t na = (hsize_t)H5Sget_simple_extent_npoints(sa), nb = (hsize_t)H5Sget_simple_extent_npoints(sb);
        size_t es = H5Tget_size(ta);
        same = H5Tequal(ta, tb) > 0 && na == nb && H5Sget_simple_extent_ndims(sa) == H5Sget_simple_extent_ndims(sb);
        if (same) {
            char *x = malloc(na * es + 1), *y = malloc(na * es + 1);
            same = H5Dread(da, ta, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) >= 0 &&
                   H5Dread(db, tb, H5S_ALL, H5S_ALL, H5P_DEFAULT, y) >= 0 && memcmp(x, y, na * es) == 0;
            free(x);
            free(y);
        }
        if (!same) snprintf(why, cap, "dataset '%s' differs", name);
        H5Sclose(sa), H5Sclose(sb), H5Tclose(ta), H5Tclose(tb), H5Dclose(da), H5Dclose(db);
    }
    json_t *aa_names = json_array(), *ab_names = json_array();
    if (same) {
        H5Aiterate2(fa, H5_INDEX_NAME, H5_ITER_INC, NULL, collect_attr, aa_names);
        H5Aiterate2(fb, H5_INDEX_NAME, H5_ITER_INC, NULL, collect_attr, ab_names);
        same = json_equal(aa_names, ab_names);
        if (!same) snprintf(why, cap, "other attributes");
    }
    for (size_t i = 0; same && i < json_array_size(aa_names); i++) {
        const char *name = json_string_value(json_array_get(aa_names, i));
        hid_t aa = H5Aopen(fa, name, H5P_DEFAULT), ab = H5Aopen(fb, name, H5P_DEFAULT);
        hid_t ta = H5Aget_type(aa), tb = H5Aget_type(ab);
        same = H5Tequal(ta, tb) > 0 && H5Tget_class(ta) != H5T_VLEN && H5Tis_variable_str(ta) <= 0;
        if (same) {
            size_t n = H5Tget_size(ta);
            char *x = calloc(1, n + 1), *y = calloc(1, n + 1);
            same = H5Aread(aa, ta, x) >= 0 && H5Aread(ab, tb, y) >= 0 && memcmp(x, y, n) == 0;
            free(x);
            free(y);
        }
        if (!same) snprintf(why, cap, "attribute '%s' differs", name);
        H5Tclose(ta), H5Tclose(tb), H5Aclose(aa), H5Aclose(ab);
    }
    json_decref(aa_names);
    json_decref(ab_names);
    json_decref(la);
    json_decref(lb);
    if (fa >= 0) H5Fclose(fa);
    if (fb >= 0) H5Fclose(fb);
    ct_h5_unlock();
    return same;
}

static json_t *load_json(const char *path) { return json_load_file(path, 0, NULL); }

/* What may differ between the runs by nature: training_args.json (save_async), the log history's
 * timings when the run evaluates, the progress files' run_id (each run draws its own), and the HDF5
 * files while HDF5 records object times. */
static bool differs_by_nature(const char *name, bool timings) {
    return strcmp(name, "training_args.json") == 0 || (timings && strcmp(name, "trainer_state.json") == 0) ||
           strncmp(name, "rng_state_", 10) == 0 || (!h5_deterministic && has_suffix(name, ".h5"));
}

/* The manifests list the same files with the same sizes, and the same checksums for every file
 * that must be byte-identical. */
static void same_manifest(const char *label, const char *a, const char *b, bool timings) {
    json_t *ma = load_json(a), *mb = load_json(b);
    json_t *fa = json_object_get(ma, "files"), *fb = json_object_get(mb, "files");
    CHECK(json_is_object(fa) && json_is_object(fb) && json_object_size(fa) == json_object_size(fb) &&
              json_object_size(fa) > 2,
          "%s: the manifests list other files", label);
    const char *name;
    json_t *ea;
    json_object_foreach(fa, name, ea) {
        json_t *eb = json_object_get(fb, name);
        CHECK(eb != NULL, "%s: %s is not in the asynchronous checkpoint's manifest", label, name);
        if (!eb || (differs_by_nature(name, timings) && !has_suffix(name, ".h5"))) continue;
        CHECK(json_equal(json_object_get(ea, "size"), json_object_get(eb, "size")), "%s: %s: other size", label,
              name);
        if (!differs_by_nature(name, timings))
            CHECK(json_equal(json_object_get(ea, "crc32"), json_object_get(eb, "crc32")),
                  "%s: %s: other checksum in the manifest", label, name);
    }
    json_decref(ma);
    json_decref(mb);
}

/* Every checkpoint of sync_dir exists in async_dir with the same files (see differs_by_nature). */
static void same_checkpoints(const char *label, const char *sync_dir, const char *async_dir, bool timings) {
    char **ls, **la;
    int ns, na;
    CHECK_OK(ct_checkpoint_list(sync_dir, &ls, &ns));
    CHECK_OK(ct_checkpoint_list(async_dir, &la, &na));
    CHECK(ns == na && ns > 0, "%s: %d checkpoints synchronously, %d asynchronously", label, ns, na);
    int files = 0, bytes = 0;
    for (int i = 0; i < ns && i < na; i++) {
        const char *bs = strrchr(ls[i], '/') + 1, *ba = strrchr(la[i], '/') + 1;
        CHECK(strcmp(bs, ba) == 0, "%s: checkpoint %d is %s synchronously, %s asynchronously", label, i, bs, ba);
        CHECK_OK(ct_checkpoint_verify(la[i]));
        int nfs, nfa;
        char **fs = list_dir(ls[i], &nfs), **fa = list_dir(la[i], &nfa);
        CHECK(nfs == nfa && nfs > 0, "%s: %s has %d files synchronously, %d asynchronously", label, bs, nfs, nfa);
        for (int j = 0; j < nfs && j < nfa; j++) {
            CHECK(strcmp(fs[j], fa[j]) == 0, "%s: %s: file %s vs %s", label, bs, fs[j], fa[j]);
            char ps[1200], pa[1200], why[256] = "";
            snprintf(ps, sizeof ps, "%s/%s", ls[i], fs[j]);
            snprintf(pa, sizeof pa, "%s/%s", la[i], fa[j]);
            files++;
            if (strcmp(fs[j], "manifest.json") == 0) {
                same_manifest(label, ps, pa, timings);
                continue;
            }
            if (!differs_by_nature(fs[j], timings)) {
                bytes++;
                CHECK(same_bytes(ps, pa), "%s: %s/%s is not byte-identical", label, bs, fs[j]);
            } else if (has_suffix(fs[j], ".h5")) {
                CHECK(same_h5_content(ps, pa, why, sizeof why), "%s: %s/%s: %s", label, bs, fs[j], why);
            } else {
                json_t *x = load_json(ps), *y = load_json(pa);
                json_t *nx = normalized(x), *ny = normalized(y);
                CHECK(x && y && json_equal(nx, ny), "%s: %s/%s differs beyond save_async and timings", label, bs,
                      fs[j]);
                if (strcmp(fs[j], "training_args.json") == 0)
                    CHECK(json_is_false(json_object_get(x, "save_async")) &&
                              json_is_true(json_object_get(y, "save_async")),
                          "%s: training_args.json: save_async is not false / true", label);
                json_decref(x), json_decref(y), json_decref(nx), json_decref(ny);
            }
        }
        free_list(fs, nfs);
        free_list(fa, nfa);
    }
    printf("  %s: %d checkpoints, %d files, %d of them compared byte for byte\n", label, ns, files, bytes);
    ct_checkpoint_list_free(ls, ns);
    ct_checkpoint_list_free(la, na);
}

/* No `*.tmp` (a save not committed) or `*.deleting` (rotation not finished) left in dir. */
static void no_leftovers(const char *label, const char *dir) {
    int n;
    char **l = list_dir(dir, &n);
    for (int i = 0; i < n; i++)
        CHECK(!has_suffix(l[i], ".tmp") && !has_suffix(l[i], ".deleting"), "%s: %s/%s was left behind", label, dir,
              l[i]);
    free_list(l, n);
}

/* --- cases ---------------------------------------------------------------------------------------- */

typedef void (*configure_fn)(ct_training_args *a);

static void every_step(ct_training_args *a) {
    a->save_steps = 1;
    a->max_steps = 12;
}
static void accumulation_rotation(ct_training_args *a) {
    a->gradient_accumulation_steps = 2; /* 5 steps per epoch, 10 in all */
    a->save_steps = 3;
    a->save_total_limit = 2;
}
static void best_model(ct_training_args *a) {
    a->num_train_epochs = 3;
    a->save_steps = 4;
    a->eval_strategy = CT_INTERVAL_STEPS;
    a->eval_steps = 4;
    snprintf(a->metric_for_best_model, sizeof a->metric_for_best_model, "loss");
    a->greater_is_better = 0;
    a->load_best_model_at_end = true;
    a->save_total_limit = 1;
}
static void only_model(ct_training_args *a) {
    a->save_steps = 5;
    a->save_only_model = true;
}

/* The same run synchronously (its directory then moved aside, so both runs have the same
 * output_dir and their files name the same paths) and with save_async. */
static void same_files(const char *name, configure_fn configure, bool with_eval) {
    ct_training_args a;
    base_args(&a, name);
    configure(&a);
    char sync_dir[600];
    snprintf(sync_dir, sizeof sync_dir, "%s.sync", a.output_dir);
    ct_fixture_remove(a.output_dir);
    ct_fixture_remove(sync_dir);
    outcome s = run(&a, NULL, NULL, 8, with_eval);
    CHECK(s.status == CT_OK, "%s: the synchronous run failed: %s", name, s.message);
    CHECK(rename(a.output_dir, sync_dir) == 0, "%s: cannot move %s aside", name, a.output_dir);
    a.save_async = true;
    outcome as = run(&a, NULL, NULL, 8, with_eval);
    same_training(name, &s, &as);
    same_checkpoints(name, sync_dir, a.output_dir, with_eval);
    no_leftovers(name, a.output_dir);
    ct_fixture_run_free(&s);
    ct_fixture_run_free(&as);
    ct_training_args_free(&a);
}

/* Fails at step `at` (save_steps 3), resumes from the latest checkpoint: the weights of want. */
static void crash_and_resume(const char *name, bool async, int64_t at, const outcome *want, outcome *got) {
    ct_training_args a;
    base_args(&a, name);
    a.save_async = async;
    ct_fixture_remove(a.output_dir);
    outcome first = run(&a, NULL, new_crasher(at, 0), 8, false);
    CHECK_ERR(first.status == CT_OK ? CT_OK : ct_error(first.status, "%s", first.message), CT_ERR_IO,
              "simulated crash");
    char latest[600];
    CHECK_OK(ct_checkpoint_find_latest(a.output_dir, latest, sizeof latest));
    CHECK(has_suffix(latest, at >= 6 ? "checkpoint-6" : "checkpoint-3"), "%s: the latest checkpoint is %s", name,
          latest);
    *got = run(&a, "latest", NULL, 8, false);
    same_training(name, want, got);
    no_leftovers(name, a.output_dir);
    ct_fixture_run_free(&first);
    ct_training_args_free(&a);
}

static void test_resume(void) {
    ct_training_args a;
    base_args(&a, "uninterrupted");
    ct_fixture_remove(a.output_dir);
    outcome want = run(&a, NULL, NULL, 8, false);
    CHECK_OK(want.status);
    for (int64_t at = 7; at <= 8; at++) {
        outcome s, as;
        char ns[64], na[64];
        snprintf(ns, sizeof ns, "resume sync, failed at %lld", (long long)at);
        snprintf(na, sizeof na, "resume async, failed at %lld", (long long)at);
        crash_and_resume(ns, false, at, &want, &s);
        crash_and_resume(na, true, at, &want, &as);
        same_training("resumed async vs resumed sync", &s, &as);
        ct_fixture_run_free(&s);
        ct_fixture_run_free(&as);
    }
    /* SIGTERM at a save step (its save in flight when the stop is honoured) and one step later (the
     * stop's own save waits for the one in flight) */
    for (int64_t at = 6; at <= 7; at++) {
        char name[64], dir[700];
        snprintf(name, sizeof name, "SIGTERM at step %lld", (long long)at);
        ct_training_args b;
        base_args(&b, name);
        b.save_async = true;
        ct_fixture_remove(b.output_dir);
        outcome first = run(&b, NULL, new_crasher(at, SIGTERM), 8, false);
        CHECK(first.status == CT_ERR_INTERRUPTED, "%s: returned %s: %s", name, ct_status_str(first.status),
              first.message);
        CHECK(first.global_step == at, "%s: stopped at step %lld", name, (long long)first.global_step);
        for (int64_t k = 6; k <= at; k++) {
            snprintf(dir, sizeof dir, "%s/checkpoint-%lld", b.output_dir, (long long)k);
            CHECK_OK(ct_checkpoint_verify(dir));
        }
        no_leftovers(name, b.output_dir);
        outcome second = run(&b, "latest", NULL, 8, false);
        same_training(name, &want, &second);
        ct_fixture_run_free(&first);
        ct_fixture_run_free(&second);
        ct_training_args_free(&b);
    }
    ct_fixture_run_free(&want);
    ct_training_args_free(&a);
}

/* At on_step_end of one step, moves output_dir away and leaves a regular file at its name: the next
 * save cannot make its directory. */
typedef struct blocker {
    ct_callback base;
    int64_t step;
} blocker;

static ct_status block_step_end(ct_callback *cb, const ct_callback_args *a) {
    blocker *b = ct_container_of(cb, blocker, base);
    if (a->state->global_step != b->step) return CT_OK;
    char moved[1100];
    snprintf(moved, sizeof moved, "%s.moved", a->args->output_dir);
    FILE *f = NULL;
    if (rename(a->args->output_dir, moved) != 0 || !(f = fopen(a->args->output_dir, "w")))
        return ct_error(CT_ERR_IO, "the test could not block %s", a->args->output_dir);
    fclose(f);
    return CT_OK;
}

static const ct_callback_ops blocker_ops = {
    .size = sizeof(ct_callback_ops), .name = "blocker", .on_step_end = block_step_end};

static void test_errors(void) {
    /* an output_dir that became a regular file during the run: the save fails at once, on the
     * training thread (one that cannot be made at all is refused at the start: test_dir_lock) */
    ct_training_args a;
    base_args(&a, "blocked");
    char dir[700];
    a.save_async = true;
    blocker *bl = calloc(1, sizeof *bl);
    bl->base.ops = &blocker_ops;
    bl->step = 2;
    outcome o = run(&a, NULL, &bl->base, 8, false);
    snprintf(dir, sizeof dir, "%s/checkpoint-3", a.output_dir);
    CHECK_ERR(o.status == CT_OK ? CT_OK : ct_error(o.status, "%s", o.message), CT_ERR_IO, dir, "Not a directory");
    CHECK(o.global_step == 3, "blocked output_dir: training went on to step %lld", (long long)o.global_step);
    ct_fixture_run_free(&o);
    ct_training_args_free(&a);

    /* a write that fails in the writer thread: files may not grow beyond 64 KiB (model.h5 is larger),
     * so HDF5's writes fail with EFBIG */
    base_args(&a, "too_large");
    a.save_async = true;
    a.save_steps = 2;
    a.max_steps = 20;
    a.logging_steps = 100;
    ct_fixture_remove(a.output_dir);
    struct rlimit old, small = {.rlim_cur = 64 << 10};
    getrlimit(RLIMIT_FSIZE, &old);
    small.rlim_max = old.rlim_max;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &small);
    o = run(&a, NULL, NULL, 160, false);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, old_handler);
    snprintf(dir, sizeof dir, "%s/checkpoint-2", a.output_dir);
    CHECK_ERR(o.status == CT_OK ? CT_OK : ct_error(o.status, "%s", o.message), CT_ERR_IO, "asynchronous save of",
              dir, "model.h5");
    CHECK(o.global_step < 20, "a failing background save did not stop training (step %lld)", (long long)o.global_step);
    struct stat st;
    CHECK(stat(dir, &st) != 0, "%s was committed after its write failed", dir);
    char latest[600];
    CHECK(ct_checkpoint_find_latest(a.output_dir, latest, sizeof latest) != CT_OK, "a checkpoint was found: %s",
          latest);
    printf("  background failure surfaced at step %lld: %s\n", (long long)o.global_step, o.message);
    ct_fixture_run_free(&o);
    ct_training_args_free(&a);
}

/* save_steps 1: each model.h5 holds the weights of its step, although the writer built it only after
 * the next optimizer step had changed the live weights (see recorder). */
static void test_snapshot_isolation(void) {
    enum { STEPS = 16 };
    ct_training_args a;
    base_args(&a, "isolation");
    a.save_async = true;
    a.save_steps = 1;
    a.max_steps = STEPS;
    ct_fixture_remove(a.output_dir);
    recorder *r = calloc(1, sizeof *r);
    r->base.ops = &recorder_ops;
    r->max_steps = STEPS;
    const int64_t hidden = 64;
    outcome o = run(&a, NULL, &r->base, hidden, false);
    CHECK(o.status == CT_OK, "isolation: %s", o.message);
    ct_model m;
    CHECK_OK(make_model(&m, hidden));
    int matched = 0;
    for (int64_t k = 1; k <= STEPS; k++) {
        char path[700];
        snprintf(path, sizeof path, "%s/checkpoint-%lld/model.h5", a.output_dir, (long long)k);
        ct_tensor_fill(&m.params.values, 0.0);
        ct_status s = ct_model_load_h5(&m, path);
        CHECK(s == CT_OK, "isolation: %s", ct_last_error());
        bool same = s == CT_OK && r->w[k].data &&
                    memcmp(m.params.values.data, r->w[k].data, ct_tensor_nbytes(&r->w[k])) == 0;
        /* the weights recorded at step k differ from those of step k+1: the comparison can fail */
        if (k < STEPS)
            CHECK(memcmp(r->w[k].data, r->w[k + 1].data, ct_tensor_nbytes(&r->w[k])) != 0,
                  "isolation: steps %lld and %lld have the same weights", (long long)k, (long long)k + 1);
        CHECK(same, "isolation: checkpoint-%lld/model.h5 does not hold the weights of step %lld", (long long)k,
              (long long)k);
        matched += same;
    }
    printf("  isolation: %d of %d checkpoints hold their step's weights; %d of %d optimizer steps changed the "
           "weights while the previous checkpoint was being written\n",
           matched, STEPS, r->overlaps, STEPS - 1);
    CHECK(r->overlaps == STEPS - 1, "isolation: the weights changed while a checkpoint was in flight at %d of %d steps",
          r->overlaps, STEPS - 1);
    CHECK(!r->locked, "isolation: the HDF5 lock is still held");
    ct_model_free(&m);
    for (int i = 0; i < 64; i++) ct_tensor_free(&r->w[i]);
    free(r);
    ct_fixture_run_free(&o);
    ct_training_args_free(&a);
}

/* Whether two writes of the same tensor, a second apart, give the same bytes (HDF5 records object
 * modification times unless told not to). */
static bool probe_h5_deterministic(void) {
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/probe_a.h5", root);
    snprintf(b, sizeof b, "%s/probe_b.h5", root);
    ct_tensor t;
    if (ct_tensor_alloc(&t, CT_F32, CT_CPU, 1, (int64_t[]){4}) != CT_OK) abort();
    ct_tensor_fill(&t, 1.5);
    for (int i = 0; i < 2; i++) {
        if (i) usleep(1100 * 1000);
        ct_h5_lock();
        hid_t f = H5Fcreate(i ? b : a, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
        if (ct_h5_write_tensor(f, "x", &t) != CT_OK) abort();
        H5Fclose(f);
        ct_h5_unlock();
    }
    ct_tensor_free(&t);
    return same_bytes(a, b);
}

int main(void) {
    ct_test_begin("test_async_save");
    if (!(root = ct_fixture_tmp_root("ct_test_async_save"))) return 1;
    h5_deterministic = probe_h5_deterministic();
    printf("HDF5 files are %s\n", h5_deterministic ? "byte-deterministic: compared byte for byte"
                                                   : "stamped with object times by HDF5: compared by content");
    same_files("every step", every_step, false);
    same_files("accumulation and rotation", accumulation_rotation, false);
    same_files("best model kept and loaded", best_model, true);
    same_files("save_only_model", only_model, false);
    test_resume();
    test_errors();
    test_snapshot_isolation();
    ct_fixture_cleanup();
    return ct_test_finish();
}
