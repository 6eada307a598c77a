/* Fuzz target: resuming from a checkpoint (ct_trainer_resume, checkpoint/checkpoint.h), which reads
 * every file of a checkpoint directory: manifest.json (sizes and CRCs), rng_state_<rank>.json (the
 * loop's position), trainer_state.json (with the callbacks' and TrainerControl's saved state),
 * model.h5, optimizer.h5 and scheduler.json.
 *
 * At start-up the target trains a tiny run for two steps (an MLP, AdamW, a linear schedule, an
 * early-stopping callback) and keeps the checkpoint it saves as a template: the files the project
 * writes today, so the seeds stay valid as formats evolve. Each input then rebuilds that checkpoint
 * with one part replaced, writes its manifest (except where the manifest is the part), and resumes a
 * trainer of the same configuration from it. The input: a u8 choosing the part, a u8 of flags
 * (bit 0: resume "latest" rather than the directory), then
 *   0 model.h5, 1 optimizer.h5     an HDF5 file as fuzz/h5gen.h describes it (names: the model's
 *                                  parameters, the optimizer's state, their attributes)
 *   2 trainer_state.json, 3 scheduler.json, 4 rng_state_0.json
 *                                  the file's bytes
 *   5 manifest.json                a JSON object merged into the directory's true manifest (sizes
 *                                  and CRCs differ between processes: the training times in
 *                                  trainer_state.json), or bytes written as they are
 *   6                              a u8 mask of template files left out
 *   7                              the directory's name after "checkpoint-" (bytes; "latest")
 * With CT_FUZZ_WRITE_SEEDS set, the template's parts are written there as seeds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "callbacks/callback.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_io.h"
#include "common.h"
#include "h5gen.h"
#include "model/layers.h"
#include "trainer/trainer.h"

enum { P_MODEL, P_OPTIMIZER, P_STATE, P_SCHEDULER, P_RNG, P_MANIFEST, P_DROP, P_NAME, N_PARTS };

/* The template's files, in part order for the first six. */
static const char *const files[] = {"model.h5", "optimizer.h5", "trainer_state.json", "scheduler.json",
                                    "rng_state_0.json", "manifest.json", "training_args.json", "run_config.json"};
#define N_FILES (int)(sizeof files / sizeof files[0])
static uint8_t *template[N_FILES];
static size_t template_size[N_FILES];
static bool template_has[N_FILES];

static ct_model model;
static ct_dataset *train_set, *eval_set;
static ct_trainer trainer;
static char out_dir[512];

static const char *names_table[64];
static fz_h5_names names = {names_table, 0};

static ct_dataset *make_data(int64_t n) {
    ct_tensor x, y;
    fz_check(ct_tensor_alloc(&x, CT_F32, CT_CPU, 2, (int64_t[]){n, 6}), "data");
    fz_check(ct_tensor_alloc(&y, CT_I64, CT_CPU, 1, (int64_t[]){n}), "data");
    for (int64_t i = 0; i < n * 6; i++) ((float *)x.data)[i] = (float)((i * 37) % 11) / 5.0f - 1.0f;
    for (int64_t i = 0; i < n; i++) ((int64_t *)y.data)[i] = i % 3;
    ct_dataset *ds;
    fz_check(ct_tensor_dataset_create(&x, &y, 3, &ds), "data");
    ct_tensor_free(&x);
    ct_tensor_free(&y);
    return ds;
}

static void make_args(ct_training_args *a) {
    ct_training_args_default(a);
    snprintf(a->output_dir, sizeof a->output_dir, "%s", out_dir);
    a->disable_tqdm = true;
    a->per_device_train_batch_size = 4;
    a->per_device_eval_batch_size = 4;
    a->max_steps = 2;
    a->learning_rate = 1e-2;
    a->warmup_steps = 1;
    a->eval_strategy = CT_INTERVAL_STEPS;
    a->eval_steps = 1;
    a->save_strategy = CT_INTERVAL_STEPS;
    a->save_steps = 2;
    a->logging_steps = 1;
    a->eval_bootstrap_resamples = 0;
    fz_check(ct_training_args_set(a, "metric_for_best_model", "loss"), "metric_for_best_model");
}

/* A trainer over the fixed model and data, with an early-stopping callback (which has saved state). */
static void make_trainer(ct_trainer *t) {
    ct_training_args a;
    make_args(&a);
    ct_callback_list cbs = {0};
    ct_callback *es;
    fz_check(ct_early_stopping_callback_create(3, 0.0, &es), "callback");
    fz_check(ct_callback_list_add(&cbs, es), "callback");
    ct_trainer_setup setup = {.model = &model, .train_dataset = train_set, .n_eval = 1, .callbacks = &cbs};
    setup.eval_datasets[0] = eval_set;
    fz_check(ct_trainer_init(t, NULL, &a, &setup), "ct_trainer_init");
    ct_callback_list_free(&cbs);
    ct_training_args_free(&a);
}

static void setup(void) {
    fz_init();
    fz_path(out_dir, sizeof out_dir, "run");
    json_t *spec = json_pack("{s:s, s:[i], s:i}", "type", "mlp", "hidden", 4, "num_classes", 3);
    ct_module *root;
    fz_check(ct_module_from_json(spec, "model", &root), "model spec");
    json_decref(spec);
    ct_model_options o = {.dtype = CT_F32, .device = CT_CPU, .max_batch = 4, .seed = 5};
    fz_check(ct_model_build(&model, root, &(ct_shape){1, {6}}, &o), "model");
    train_set = make_data(8);
    eval_set = make_data(4);

    /* the template: two steps, saved at step 2 */
    ct_trainer t;
    make_trainer(&t);
    ct_train_output res;
    fz_check(ct_trainer_train(&t, NULL, &res), "training the template run");
    ct_train_output_free(&res);
    ct_trainer_free(&t);
    char dir[700], path[800];
    snprintf(dir, sizeof dir, "%s/checkpoint-2", out_dir);
    for (int i = 0; i < N_FILES; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        template_has[i] = access(path, R_OK) == 0;
        if (template_has[i]) template[i] = fz_read_file(path, &template_size[i]);
    }
    if (!template_has[P_MODEL] || !template_has[P_OPTIMIZER] || !template_has[P_STATE]) {
        fprintf(stderr, "fuzz: the template checkpoint %s lacks a file\n", dir);
        abort();
    }

    /* the names of the HDF5 files' objects */
    int n = 0;
    for (int i = 0; i < model.params.count && n < 48; i++) names_table[n++] = model.params.items[i].name;
    static const char *const more[] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer",
                                       "optim",   "step",       "config"};
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) names_table[n++] = more[i];
    names.n = n;

    if (fz_writing_seeds()) {
        for (int part = 0; part < N_PARTS; part++) {
            fz_output so = {0};
            fzo_u8(&so, (uint8_t)part);
            fzo_u8(&so, 0);
            if (part == P_MODEL || part == P_OPTIMIZER) {
                snprintf(path, sizeof path, "%s/%s", dir, files[part]);
                if (!fz_h5e_from_file(&so, path, &names)) fprintf(stderr, "fuzz: not all of %s encoded\n", path);
            } else if (part == P_DROP) {
                fzo_u8(&so, 0);
            } else if (part == P_NAME) {
                fzo_raw(&so, "2", 1);
            } else if (part == P_MANIFEST) {
                fzo_raw(&so, "{}", 2); /* the true manifest */
            } else if (template_has[part]) {
                fzo_raw(&so, template[part], template_size[part]);
            }
            char name[64];
            snprintf(name, sizeof name, "template_%s", part < 6 ? files[part] : part == P_DROP ? "all" : "name");
            fz_seed(name, so.p, so.n);
            fzo_free(&so);
        }
    }
    fz_remove_tree(out_dir);
    make_trainer(&trainer);
    fz_check(ct_trainer_create_optimizer_and_scheduler(&trainer, 2), "optimizer and scheduler");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static bool ready;
    if (!ready) {
        setup();
        fz_h5_mark_handles();
        ready = true;
    }
    fz_input in = {data, size};
    int part = fz_u8(&in) % N_PARTS;
    uint8_t flags = fz_u8(&in);
    uint8_t drop = part == P_DROP ? fz_u8(&in) : 0;

    char dir[1024], path[1200];
    if (part == P_NAME) {
        size_t n;
        const uint8_t *p = fz_bytes(&in, 40, &n);
        char name[48];
        for (size_t i = 0; i < n; i++) name[i] = p[i] && p[i] != '/' ? (char)p[i] : '_';
        name[n] = '\0';
        snprintf(dir, sizeof dir, "%s/checkpoint-%s", out_dir, name);
    } else {
        snprintf(dir, sizeof dir, "%s/checkpoint-2", out_dir);
    }
    if (mkdir(out_dir, 0700) != 0 || mkdir(dir, 0700) != 0) {
        fz_remove_tree(out_dir);
        return 0;
    }
    for (int i = 0; i < N_FILES; i++) {
        if (!template_has[i] || i == P_MANIFEST || (drop >> i & 1)) continue;
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (i == part && (part == P_MODEL || part == P_OPTIMIZER)) {
            if (!fz_h5_build(&in, path, &names)) {
                fz_remove_tree(out_dir);
                return 0;
            }
        } else if (i == part) {
            size_t n;
            const uint8_t *p = fz_rest(&in, &n);
            fz_write_file(path, p, n);
        } else {
            fz_write_file(path, template[i], template_size[i]);
        }
    }
    if (part == P_MANIFEST) {
        /* The directory's true manifest with the input merged into it when the input is a JSON
         * object (sizes and checksums of this process's files are not known to a seed), else the
         * input's bytes as they are. */
        fz_check(ct_checkpoint_write_manifest(dir), "writing the manifest");
        size_t n;
        const uint8_t *p = fz_rest(&in, &n);
        snprintf(path, sizeof path, "%s/manifest.json", dir);
        json_t *patch = json_loadb((const char *)p, n, JSON_DECODE_ANY, NULL);
        json_t *manifest = json_is_object(patch) ? json_load_file(path, 0, NULL) : NULL;
        char *text = NULL;
        if (manifest && json_object_update_recursive(manifest, patch) == 0) text = json_dumps(manifest, JSON_INDENT(2));
        if (text) fz_write_file(path, text, strlen(text));
        else fz_write_file(path, p, n);
        free(text);
        json_decref(manifest);
        json_decref(patch);
    } else if (!(drop >> P_MANIFEST & 1)) {
        fz_check(ct_checkpoint_write_manifest(dir), "writing the manifest");
    }
    fz_report("ct_trainer_resume", ct_trainer_resume(&trainer, flags & 1 ? "latest" : dir));
    fz_remove_tree(out_dir);
    fz_h5_check_handles();
    ct_error_clear();
    return 0;
}
