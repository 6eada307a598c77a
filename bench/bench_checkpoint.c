/* Checkpoint save and load: time and size of a training state (a model's weights and its AdamW
 * state after one step) written and read the way the Trainer does it (model/model_io.h,
 * checkpoint/checkpoint_io.h). bench/checkpoint.py runs it next to torch.save / torch.load of the same
 * state and prints both.
 *
 * Four figures, each the median of REPEAT runs (the files stay in the page cache, as they do for a
 * run that saves every few minutes; the disk's own speed is not what is compared):
 *   save           model.h5 + optimizer.h5 written
 *   save_synced    a whole checkpoint as the Trainer commits it: both files into DIR/checkpoint.tmp,
 *                  the manifest (sizes and CRC-32s, every file fsync'd), then fsync and rename
 *   load           both files read into a second model and optimizer built the same way
 *   load_verified  the manifest checked (every file read and checksummed) and then loaded
 * The loaded tensors are compared with the saved ones byte for byte; a difference is an error.
 *
 * Usage: bench_checkpoint MODEL_SPEC_JSON DIR [REPEAT]. MODEL_SPEC_JSON is a model section such as
 * {"type": "mlp", "hidden": [256, 128], "num_classes": 10}; the input is a 1x28x28 image. Prints one
 * JSON line. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "checkpoint/checkpoint_io.h"
#include "core/rng.h"
#include "model/layers.h"
#include "model/model.h"
#include "model/model_io.h"
#include "optim/optimizer.h"

#define MAX_REPEAT 1000

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static long long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* A model and its AdamW (lr 1e-3, weight decay 0.01, PyTorch's betas and epsilon) as the Trainer
 * builds them; the seed only decides the initial weights. */
static ct_status build(const json_t *spec, uint64_t seed, ct_model *m, ct_optimizer **opt) {
    ct_module *root;
    CT_TRY(ct_module_from_json(spec, "model", &root));
    ct_shape in = {.ndim = 3, .dims = {1, 28, 28}};
    ct_model_options o = {.dtype = CT_F32, .device = CT_CPU, .max_batch = 1, .seed = seed};
    CT_TRY(ct_model_build(m, root, &in, &o));
    ct_optim_config cfg = ct_optim_config_default();
    cfg.optim = CT_OPTIM_ADAMW;
    cfg.learning_rate = 1e-3;
    cfg.weight_decay = 0.01;
    ct_status s = ct_optimizer_create(&cfg, &m->params, opt);
    if (s != CT_OK) ct_model_free(m);
    return s;
}

/* One AdamW step from random gradients, so that the weights and both moments are all non-trivial. */
static ct_status one_step(ct_model *m, ct_optimizer *opt) {
    ct_rng r;
    ct_rng_init(&r, 1234, 0, 0);
    float *g = m->params.grads.data;
    int64_t n = ct_tensor_numel(&m->params.grads);
    for (int64_t i = 0; i < n; i++) g[i] = (float)(0.01 * ct_rng_normal(&r));
    return ct_optimizer_step(opt, 1e-3);
}

static bool same_bytes(const ct_tensor *a, const ct_tensor *b) {
    return ct_tensor_numel(a) == ct_tensor_numel(b) &&
           memcmp(a->data, b->data, (size_t)ct_tensor_numel(a) * ct_dtype_size(a->dtype)) == 0;
}

/* The loaded state must be the saved one, bit for bit. */
static ct_status same_state(ct_model *a, ct_optimizer *oa, ct_model *b, ct_optimizer *ob) {
    if (!same_bytes(&a->params.values, &b->params.values) || !same_bytes(&a->params.buffers, &b->params.buffers))
        return ct_error(CT_ERR_STATE, "bench_checkpoint: the loaded weights differ from the saved ones");
    if (ct_optimizer_step_count(oa) != ct_optimizer_step_count(ob))
        return ct_error(CT_ERR_STATE, "bench_checkpoint: step count %lld loaded as %lld",
                        (long long)ct_optimizer_step_count(oa), (long long)ct_optimizer_step_count(ob));
    for (int i = 0; i < ct_optimizer_state_count(oa); i++) {
        const char *name;
        ct_tensor *t;
        CT_TRY(ct_optimizer_state_get(oa, i, &name, &t));
        ct_tensor *u = ct_optimizer_state_find(ob, name);
        if (!u || !same_bytes(t, u))
            return ct_error(CT_ERR_STATE, "bench_checkpoint: optimizer state '%s' differs after loading", name);
    }
    return CT_OK;
}

static ct_status bench(const json_t *spec, const char *dir, int repeat, json_t *out) {
    ct_model m, m2;
    ct_optimizer *opt, *opt2;
    CT_TRY(build(spec, 42, &m, &opt));
    ct_status s = build(spec, 7, &m2, &opt2);
    if (s != CT_OK) {
        ct_optimizer_destroy(opt);
        ct_model_free(&m);
        return s;
    }
    char model_file[4096], optim_file[4096], tmp[4096], ckpt[4096], path[4200];
    snprintf(model_file, sizeof model_file, "%s/model.h5", dir);
    snprintf(optim_file, sizeof optim_file, "%s/optimizer.h5", dir);
    snprintf(tmp, sizeof tmp, "%s/checkpoint.tmp", dir);
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint", dir);
    double t_save[MAX_REPEAT], t_synced[MAX_REPEAT], t_load[MAX_REPEAT], t_verified[MAX_REPEAT];
    s = one_step(&m, opt);
    for (int r = 0; r < repeat && s == CT_OK; r++) {
        double t0 = now();
        s = ct_model_save_h5(&m, spec, model_file);
        if (s == CT_OK) s = ct_optimizer_save_h5(opt, optim_file);
        t_save[r] = now() - t0;
        if (s != CT_OK) break;

        if (mkdir(tmp, 0777) != 0) {
            s = ct_error(CT_ERR_IO, "bench_checkpoint: cannot create '%s'", tmp);
            break;
        }
        t0 = now();
        snprintf(path, sizeof path, "%s/model.h5", tmp);
        s = ct_model_save_h5(&m, spec, path);
        snprintf(path, sizeof path, "%s/optimizer.h5", tmp);
        if (s == CT_OK) s = ct_optimizer_save_h5(opt, path);
        if (s == CT_OK) s = ct_checkpoint_write_manifest(tmp);
        if (s == CT_OK) s = ct_checkpoint_commit(tmp, ckpt);
        t_synced[r] = now() - t0;
        if (s != CT_OK) break;

        t0 = now();
        s = ct_model_load_h5(&m2, model_file);
        if (s == CT_OK) s = ct_optimizer_load_h5(opt2, optim_file);
        t_load[r] = now() - t0;
        if (s == CT_OK) s = same_state(&m, opt, &m2, opt2);
        if (s != CT_OK) break;

        t0 = now();
        s = ct_checkpoint_verify(ckpt);
        snprintf(path, sizeof path, "%s/model.h5", ckpt);
        if (s == CT_OK) s = ct_model_load_h5(&m2, path);
        snprintf(path, sizeof path, "%s/optimizer.h5", ckpt);
        if (s == CT_OK) s = ct_optimizer_load_h5(opt2, path);
        t_verified[r] = now() - t0;
        if (s == CT_OK) s = same_state(&m, opt, &m2, opt2);
    }
    if (s == CT_OK) {
        snprintf(path, sizeof path, "%s/manifest.json", ckpt);
        json_object_set_new(out, "params", json_integer(ct_params_count(&m.params)));
        json_object_set_new(out, "save_s", json_real(median(t_save, repeat)));
        json_object_set_new(out, "save_synced_s", json_real(median(t_synced, repeat)));
        json_object_set_new(out, "load_s", json_real(median(t_load, repeat)));
        json_object_set_new(out, "load_verified_s", json_real(median(t_verified, repeat)));
        json_object_set_new(out, "model_bytes", json_integer(file_size(model_file)));
        json_object_set_new(out, "optimizer_bytes", json_integer(file_size(optim_file)));
        json_object_set_new(out, "manifest_bytes", json_integer(file_size(path)));
    }
    ct_optimizer_destroy(opt2);
    ct_model_free(&m2);
    ct_optimizer_destroy(opt);
    ct_model_free(&m);
    return s;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_checkpoint MODEL_SPEC_JSON DIR [REPEAT]\n");
        return 2;
    }
    int repeat = argc > 3 ? atoi(argv[3]) : 20;
    if (repeat < 1 || repeat > MAX_REPEAT) {
        fprintf(stderr, "bench_checkpoint: REPEAT must be in [1, %d], got '%s'\n", MAX_REPEAT, argv[3]);
        return 2;
    }
    json_error_t err;
    json_t *spec = json_loads(argv[1], 0, &err);
    if (!json_is_object(spec)) {
        fprintf(stderr, "bench_checkpoint: MODEL_SPEC_JSON: %s\n", spec ? "expected an object" : err.text);
        json_decref(spec);
        return 2;
    }
    json_t *out = json_pack("{s:s, s:O, s:i}", "bench", "checkpoint", "model", spec, "repeat", repeat);
    ct_status s = bench(spec, argv[2], repeat, out);
    if (s != CT_OK) {
        fprintf(stderr, "bench_checkpoint: %s\n", ct_last_error());
        json_decref(out);
        json_decref(spec);
        return 1;
    }
    char *text = json_dumps(out, JSON_COMPACT);
    printf("%s\n", text);
    free(text);
    json_decref(out);
    json_decref(spec);
    return 0;
}
