/* A checkpoint whose files were edited and re-signed (the manifest rewritten, so every checksum
 * holds) must still make sense before a resume uses it (checkpoint/validate.c): each tampered field
 * below (out of range, or disagreeing with another file or with this run) is refused with the file
 * and the key named, and the untouched checkpoint resumes, so every refusal is the edit's. */
#include <hdf5.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint_io.h"
#include "core/json.h"
#include "testlib.h"
#include "trainer/trainer.h"
#include "trainer_fixture.h"

static char dir[600];

/* 100 samples, batch 10, accumulation 2: 5 optimizer steps (10 batches) per epoch; a checkpoint at
 * step 3, and a resume that trains to step 4. */
static void run_args(ct_training_args *a, const char *root) {
    ct_fixture_args(a, root, "run");
    a->per_device_train_batch_size = 10;
    a->gradient_accumulation_steps = 2;
    a->max_steps = 4;
    a->logging_steps = 1;
    a->save_strategy = CT_INTERVAL_STEPS;
    a->save_steps = 3;
}

static ct_status train(const ct_training_args *a, const char *resume) {
    ct_dataset *data = ct_fixture_small_data(100, 1);
    ct_model m;
    ct_fixture_mlp o = {.dim = 6, .classes = 3, .hidden = {8}, .max_batch = 10, .seed = 5};
    ct_status s = ct_fixture_mlp_build(&o, &m);
    if (s != CT_OK) return s;
    ct_trainer_setup setup = {.model = &m, .train_dataset = data};
    ct_trainer t;
    s = ct_trainer_init(&t, NULL, a, &setup);
    if (s == CT_OK) {
        ct_train_output out;
        s = ct_trainer_train(&t, resume, &out);
        if (s == CT_OK) ct_train_output_free(&out);
        ct_trainer_free(&t);
    }
    ct_model_free(&m);
    ct_dataset_free(data);
    return s;
}

/* Sets the JSON value at a key path of dir/file ("state.step": objects down to the key; "-" deletes
 * the key) and re-signs the checkpoint. Returns the file's old text, to restore. */
static char *edit_json(const char *file, const char *key_path, json_t *value) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    char *old = ct_test_read_file(path, NULL);
    json_t *root = old ? json_loads(old, 0, NULL) : NULL, *obj = root;
    char keys[128];
    snprintf(keys, sizeof keys, "%s", key_path);
    char *dot, *key = keys;
    while (obj && (dot = strchr(key, '.'))) {
        *dot = 0;
        obj = json_is_array(obj) ? json_array_get(obj, (size_t)atoi(key)) : json_object_get(obj, key);
        key = dot + 1;
    }
    CHECK(obj != NULL, "%s has no %s", file, key_path);
    if (obj && value) json_object_set_new(obj, key, value);
    if (obj && !value) json_object_del(obj, key);
    CHECK_OK(ct_json_write_file(root, path));
    json_decref(root);
    CHECK_OK(ct_checkpoint_write_manifest(dir));
    return old;
}

static void restore(const char *file, char *old) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(old ? old : "", f);
        fclose(f);
    }
    free(old);
    CHECK_OK(ct_checkpoint_write_manifest(dir));
}

/* optimizer.h5's "step" attribute set to step, re-signed. */
static void set_optimizer_step(int64_t step) {
    char path[700];
    snprintf(path, sizeof path, "%s/optimizer.h5", dir);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK(f >= 0, "cannot open %s", path);
    if (f < 0) return;
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attr = H5Aopen(f, "step", H5P_DEFAULT);
    CHECK(attr >= 0 && H5Awrite(attr, H5T_NATIVE_INT64, &step) >= 0, "cannot write the step attribute");
    if (attr >= 0) H5Aclose(attr);
    H5Sclose(space);
    H5Fclose(f);
    CHECK_OK(ct_checkpoint_write_manifest(dir));
}

typedef struct tamper {
    const char *file, *key;
    json_t *(*value)(void); /* NULL: delete the key */
    const char *want1, *want2;
} tamper;

static json_t *minus_five(void) { return json_integer(-5); }
static json_t *four(void) { return json_integer(4); }
static json_t *nine(void) { return json_integer(9); }
static json_t *fifty(void) { return json_integer(50); }
static json_t *one(void) { return json_integer(1); }
static json_t *huge_epoch(void) { return json_integer(1000000000000000LL); }
static json_t *huge_step(void) { return json_integer(1000000000000000000LL); }
static json_t *many_batches(void) { return json_integer(99); }
static json_t *odd_batch(void) { return json_integer(5); }
static json_t *far_epoch(void) { return json_real(7.5); }
static json_t *negative_flos(void) { return json_real(-1); }
static json_t *nan_text(void) { return json_string("nan"); }
static json_t *world_three(void) { return json_integer(3); }

int main(void) {
    ct_test_begin("test_checkpoint_meaning");
    const char *root = ct_fixture_tmp_root("ct_test_meaning");
    if (!root) return 1;
    ct_training_args a;
    run_args(&a, root);
    a.max_steps = 3;
    CHECK_OK(train(&a, NULL));
    a.max_steps = 4;
    snprintf(dir, sizeof dir, "%s/checkpoint-3", a.output_dir);
    CHECK_OK(ct_checkpoint_verify(dir));

    const tamper cases[] = {
        {"trainer_state.json", "global_step", minus_five, "trainer_state.json: global_step: -5 is negative", NULL},
        {"trainer_state.json", "global_step", four, "global_step: 4, but the directory is checkpoint-3", NULL},
        {"trainer_state.json", "best_global_step", nine, "trainer_state.json: best_global_step: 9 is beyond", NULL},
        {"trainer_state.json", "epoch", far_epoch, "trainer_state.json: epoch: 7.5", "rng_state_0.json is in epoch 0"},
        {"trainer_state.json", "total_flos", negative_flos, "trainer_state.json: total_flos: -1", NULL},
        {"trainer_state.json", "log_history.0.step", fifty, "trainer_state.json: log_history[0].step", NULL},
        {"rng_state_0.json", "epoch", huge_epoch, "rng_state_0.json: epoch: 1000000000000000",
         "cannot be reached in global_step 3 steps"},
        {"rng_state_0.json", "global_batch_size", NULL, "rng_state_0.json: global_batch_size: missing", NULL},
        {"rng_state_0.json", "next_batch", many_batches, "rng_state_0.json: next_batch: 99",
         "this run's 10 batches per epoch"},
        {"rng_state_0.json", "next_batch", odd_batch, "rng_state_0.json: next_batch: 5 is not a step boundary", NULL},
        {"rng_state_0.json", "last_logged_step", fifty, "rng_state_0.json: last_logged_step: 50 is beyond", NULL},
        {"rng_state_0.json", "nan_inf_skipped", one, "optimizer.h5: step: 3", "less the 1 skipped"},
        {"rng_state_0.json", "rank", one, "rng_state_0.json: rank: 1 is outside [0, 0]", NULL},
        {"rng_state_0.json", "world_size", world_three, "rng_state_0.json: global_batch_size", NULL},
        {"rng_state_0.json", "tr_loss", nan_text, "rng_state_0.json: tr_loss: nan with no step skipped", NULL},
        {"rng_state_0.json", "batches_per_epoch", minus_five, "rng_state_0.json: batches_per_epoch: -5 is outside",
         NULL},
        {"scheduler.json", "state.step", huge_step, "scheduler.json: state.step: 1000000000000000000",
         "global_step 3"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const tamper *c = &cases[i];
        char *old = edit_json(c->file, c->key, c->value ? c->value() : NULL);
        ct_status s = train(&a, "latest");
        CHECK(s == CT_ERR_FORMAT, "%s %s: %s, wanted CT_ERR_FORMAT: %s", c->file, c->key, ct_status_str(s),
              ct_last_error());
        const char *subs[] = {c->want1, c->want2};
        for (int k = 0; k < 2; k++)
            if (subs[k])
                CHECK(strstr(ct_last_error(), subs[k]), "%s %s: the message lacks '%s': %s", c->file, c->key, subs[k],
                      ct_last_error());
        restore(c->file, old);
    }
    set_optimizer_step(7);
    CHECK_ERR(train(&a, "latest"), CT_ERR_FORMAT, "optimizer.h5: step: 7",
              "trainer_state.json's global_step 3 less the 0 skipped by nan_inf_policy and the loss scaler gives 3");
    set_optimizer_step(3);
    /* the checkpoint as written resumes: the refusals above were the edits' */
    CHECK_OK(train(&a, "latest"));
    ct_training_args_free(&a);
    ct_fixture_cleanup();
    return ct_test_finish();
}
