/* ct_model_from_pretrained: a model built in C from every kind of built-in layer (no JSON anywhere),
 * trained a few steps and saved by the Trainer, comes back in one call with the same outputs bit for
 * bit; so does a GPT (token ids in), a model from a JSON preset, and a run config's preset whose
 * num_classes came from the data; each layer's to_json reads back
 * to the same spec. A saved model whose layer cannot describe itself, a missing directory, a FIFO
 * in place of model.h5 and a damaged file are errors naming what is wrong. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/pretrained.h"
#include "core/rng.h"
#include "model/layers.h"
#include "core/util.h"
#include "testlib.h"
#include "trainer/run.h"
#include "trainer/trainer.h"
#include "trainer_fixture.h"

static const char *tmp_root;

/* conv2d, batchnorm2d, relu, maxpool2d, avgpool2d, flatten, linear, layernorm, gelu (tanh), dropout,
 * residual(linear), sigmoid, linear: one of each built-in layer type that takes [C, H, W] in. */
static ct_module *every_layer(void) {
    ct_module *seq, *m, *inner;
    CT_ASSERT(ct_sequential_create(&seq) == CT_OK);
#define ADD_NAMED(expr, name)                                                                      \
    do {                                                                                           \
        CT_ASSERT((expr) == CT_OK);                                                                \
        CT_ASSERT(ct_module_add_child(seq, m, name) == CT_OK);                                     \
    } while (0)
#define ADD(expr) ADD_NAMED(expr, NULL)
    ct_conv2d_config c = {.in_channels = 0, .out_channels = 4, .kernel = {3, 3}, .stride = {1, 1}, .padding = {1, 1},
                          .dilation = {1, 1}, .bias = true};
    ADD_NAMED(ct_conv2d_create(&c, &m), "conv1"); /* named as a PyTorch module's attribute would be */
    ADD(ct_batchnorm2d_create(0, 1e-5, 0.1, true, &m));
    ADD(ct_activation_create(CT_ACT_RELU, &m));
    ct_pool2d_config p = {.kernel = {2, 2}, .stride = {2, 2}, .dilation = {1, 1}, .count_include_pad = true};
    ADD(ct_maxpool2d_create(&p, &m));
    ct_pool2d_config a = {.kernel = {2, 2}, .stride = {1, 1}, .padding = {1, 1}, .count_include_pad = false};
    ADD(ct_avgpool2d_create(&a, &m));
    ADD(ct_flatten_create(&m));
    ADD_NAMED(ct_linear_create(0, 12, true, &m), "fc1");
    ADD(ct_layernorm_create(12, 1e-5, true, false, &m));
    ADD(ct_activation_create(CT_ACT_GELU_TANH, &m));
    ADD(ct_dropout_create(0.25, &m));
    CT_ASSERT(ct_linear_create(12, 12, false, &inner) == CT_OK);
    ADD(ct_residual_create(inner, &m));
    ADD(ct_activation_create(CT_ACT_SIGMOID, &m));
    ADD_NAMED(ct_linear_create(0, 3, true, &m), "head");
#undef ADD
#undef ADD_NAMED
    return seq;
}

static ct_dataset *images(int64_t n) {
    int64_t fs[4] = {n, 2, 6, 6}, ls[1] = {n};
    ct_tensor x, y;
    CT_ASSERT(ct_tensor_alloc(&x, CT_F32, CT_CPU, 4, fs) == CT_OK && ct_tensor_alloc(&y, CT_I64, CT_CPU, 1, ls) == CT_OK);
    ct_rng rng;
    ct_rng_init(&rng, ct_test_seed, 0, 0);
    for (int64_t i = 0; i < n * 72; i++) ((float *)x.data)[i] = (float)(2 * ct_rng_uniform(&rng) - 1);
    for (int64_t i = 0; i < n; i++) ((int64_t *)y.data)[i] = i % 3;
    ct_dataset *ds;
    CT_ASSERT(ct_tensor_dataset_create(&x, &y, 3, &ds) == CT_OK);
    ct_tensor_free(&x);
    ct_tensor_free(&y);
    return ds;
}

/* Trains m two steps on ds and saves it (and a checkpoint) under tmp_root/name. */
static void train_and_save(ct_model *m, ct_dataset *ds, const char *name, char *dir, size_t cap) {
    ct_training_args a;
    ct_training_args_default(&a);
    snprintf(a.output_dir, sizeof a.output_dir, "%s/%s", tmp_root, name);
    snprintf(dir, cap, "%s", a.output_dir);
    a.disable_tqdm = true;
    a.logging_strategy = CT_INTERVAL_NO;
    a.save_strategy = CT_INTERVAL_STEPS;
    a.save_steps = 2;
    a.per_device_train_batch_size = 4;
    a.max_steps = 2;
    ct_trainer t;
    CHECK_OK(ct_trainer_init(&t, NULL, &a, &(ct_trainer_setup){.model = m, .train_dataset = ds}));
    ct_train_output out = {0};
    CHECK_OK(ct_trainer_train(&t, NULL, &out));
    CHECK_OK(ct_trainer_save_model(&t, a.output_dir));
    ct_train_output_free(&out);
    ct_trainer_free(&t);
    ct_training_args_free(&a);
}

/* Eval-mode outputs of a and b on x are equal bit for bit. */
static void same_outputs(ct_model *a, ct_model *b, const ct_tensor *x, const char *what) {
    ct_model_train(a, false);
    ct_model_train(b, false);
    ct_tensor ya, yb;
    CHECK_OK(ct_model_forward(a, x, &ya));
    CHECK_OK(ct_model_forward(b, x, &yb));
    CHECK(ct_shape_eq(&ya, &yb) && memcmp(ya.data, yb.data, ct_tensor_nbytes(&ya)) == 0,
          "%s: the reloaded model computes other outputs", what);
}

static void test_c_model(void) {
    ct_dataset *ds = images(16);
    ct_model m;
    ct_shape in = ds->spec.feature_shape;
    CHECK_OK(ct_model_build(&m, every_layer(), &in, &(ct_model_options){.max_batch = 4, .seed = 5}));
    char dir[1024], ckpt[1100];
    train_and_save(&m, ds, "c_model", dir, sizeof dir);
    ct_model back;
    CHECK_OK(ct_model_from_pretrained(dir, NULL, &back));
    CHECK(!back.root->training, "from_pretrained returned a model in training mode (dropout on)");
    ct_tensor x, y;
    CHECK_OK(ct_dataset_alloc_batch(ds, 4, &x, &y));
    int64_t idx[4] = {0, 5, 10, 15};
    CHECK_OK(ct_dataset_get_batch(ds, idx, 4, NULL, &x, &y));
    same_outputs(&m, &back, &x, "output_dir");
    /* Children named in C keep their names: the same parameter names, in the same order. */
    bool same_names = m.params.count == back.params.count;
    for (int i = 0; same_names && i < m.params.count; i++)
        same_names = strcmp(m.params.items[i].name, back.params.items[i].name) == 0;
    CHECK(same_names && strcmp(m.params.items[0].name, "conv1.weight") == 0,
          "parameter names after reload: %s ... (%d), before: %s ... (%d)", back.params.items[0].name,
          back.params.count, m.params.items[0].name, m.params.count);
    /* The specs the layers give are what their readers take: the reloaded model says the same. */
    json_t *ja, *jb;
    CHECK_OK(ct_module_to_json(m.root, &ja));
    CHECK_OK(ct_module_to_json(back.root, &jb));
    CHECK(json_equal(ja, jb), "to_json of the reloaded model differs");
    json_decref(ja);
    json_decref(jb);
    ct_model_free(&back);
    /* A checkpoint directory works the same way. */
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint-2", dir);
    CHECK_OK(ct_model_from_pretrained(ckpt, &(ct_pretrained_options){.max_batch = 4}, &back));
    same_outputs(&m, &back, &x, "checkpoint-2");
    ct_model_free(&back);
    /* A damaged model.h5: the manifest check names the file. */
    char file[1200];
    snprintf(file, sizeof file, "%s/model.h5", ckpt);
    FILE *f = fopen(file, "r+b");
    CHECK(f != NULL, "open %s", file);
    if (f) {
        fseek(f, -8, SEEK_END);
        fputc(0x5a, f);
        fclose(f);
    }
    CHECK_ERR(ct_model_from_pretrained(ckpt, NULL, &back), CT_ERR_FORMAT, "model.h5");
    ct_tensor_free(&x);
    ct_tensor_free(&y);
    ct_model_free(&m);
    ct_dataset_free(ds);
}

static void test_gpt_and_preset(void) {
    /* A GPT made in C: token ids in. */
    ct_gpt_config g = {.vocab_size = 17, .n_positions = 8, .n_embd = 8, .n_layer = 1, .n_head = 2, .bias = true,
                       .layer_norm_epsilon = 1e-5};
    ct_module *root;
    CHECK_OK(ct_gpt_create(&g, &root));
    ct_model m;
    ct_shape in = {.ndim = 1, .dims = {8}};
    CHECK_OK(ct_model_build(&m, root, &in, &(ct_model_options){.max_batch = 2, .seed = 9}));
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/gpt", tmp_root);
    ct_training_args a;
    ct_training_args_default(&a);
    snprintf(a.output_dir, sizeof a.output_dir, "%s", dir);
    ct_trainer t;
    CHECK_OK(ct_trainer_init(&t, NULL, &a, &(ct_trainer_setup){.model = &m}));
    CHECK_OK(ct_trainer_save_model(&t, dir));
    ct_trainer_free(&t);
    ct_training_args_free(&a);
    ct_model back;
    CHECK_OK(ct_model_from_pretrained(dir, NULL, &back));
    int64_t shape[2] = {2, 8};
    ct_tensor ids;
    CHECK_OK(ct_tensor_alloc(&ids, CT_I64, CT_CPU, 2, shape));
    for (int i = 0; i < 16; i++) ((int64_t *)ids.data)[i] = (i * 7) % 17;
    same_outputs(&m, &back, &ids, "gpt");
    ct_tensor_free(&ids);
    ct_model_free(&back);
    ct_model_free(&m);
    /* A JSON preset: the spec stored is the preset itself. */
    ct_model mlp;
    CHECK_OK(ct_fixture_mlp_build(&(ct_fixture_mlp){.dim = 5, .classes = 4, .hidden = {6}, .max_batch = 3, .seed = 2},
                                  &mlp));
    snprintf(dir, sizeof dir, "%s/mlp", tmp_root);
    ct_training_args_default(&a);
    snprintf(a.output_dir, sizeof a.output_dir, "%s", dir);
    CHECK_OK(ct_trainer_init(&t, NULL, &a, &(ct_trainer_setup){.model = &mlp}));
    CHECK_OK(ct_trainer_save_model(&t, dir));
    ct_trainer_free(&t);
    ct_training_args_free(&a);
    CHECK_OK(ct_model_from_pretrained(dir, NULL, &back));
    int64_t xs[2] = {3, 5};
    ct_tensor x;
    CHECK_OK(ct_tensor_alloc(&x, CT_F32, CT_CPU, 2, xs));
    for (int i = 0; i < 15; i++) ((float *)x.data)[i] = (float)i / 7.0f - 1.0f;
    same_outputs(&mlp, &back, &x, "mlp");
    ct_tensor_free(&x);
    ct_model_free(&back);
    ct_model_free(&mlp);
}

/* A run config's preset whose num_classes the data gives: the config model.h5 records has it filled
 * in, so the model reloads without the data. */
static void test_preset_classes_from_data(void) {
    ct_tensor x, y;
    CHECK_OK(ct_tensor_alloc(&x, CT_F32, CT_CPU, 2, (int64_t[]){12, 5}));
    CHECK_OK(ct_tensor_alloc(&y, CT_I64, CT_CPU, 1, (int64_t[]){12}));
    for (int i = 0; i < 60; i++) ((float *)x.data)[i] = (float)((i * 37) % 11) / 5.0f - 1.0f;
    for (int i = 0; i < 12; i++) ((int64_t *)y.data)[i] = i % 3;
    ct_run_pieces pieces = {0};
    CHECK_OK(ct_tensor_dataset_create(&x, &y, 3, &pieces.train));
    char dir[1024], text[1400];
    snprintf(dir, sizeof dir, "%s/preset_from_data", tmp_root);
    snprintf(text, sizeof text, "{\"model\": {\"type\": \"mlp\", \"hidden\": [4]}, \"training_args\": "
             "{\"output_dir\": \"%s\", \"max_steps\": 2, \"per_device_train_batch_size\": 4, "
             "\"disable_tqdm\": true}}", dir);
    ct_run_config rc;
    CHECK_OK(ct_run_config_parse(text, "run.json", &rc));
    ct_run r;
    CHECK_OK(ct_run_resolve(&r, &rc, NULL, 0));
    CHECK_OK(ct_run_build_with(&r, CT_RUN_TRAIN, NULL, &pieces));
    ct_trainer t;
    ct_trainer_setup setup = ct_run_setup(&r);
    CHECK_OK(ct_trainer_init(&t, NULL, &r.args, &setup));
    ct_train_output out = {0};
    CHECK_OK(ct_trainer_train(&t, NULL, &out));
    ct_train_output_free(&out);
    CHECK_OK(ct_trainer_save_model(&t, dir));
    ct_model back;
    ct_status s = ct_model_from_pretrained(dir, NULL, &back);
    CHECK(s == CT_OK, "the saved preset does not reload: %s", ct_last_error());
    if (s == CT_OK) {
        ct_tensor few = ct_tensor_rows(&x, 0, 4); /* within both models' batch */
        same_outputs(&r.model, &back, &few, "mlp preset with num_classes from the data");
        CHECK(back.out_shape.ndim == 1 && back.out_shape.dims[0] == 3, "the reloaded model scores %lld classes, not 3",
              (long long)back.out_shape.dims[0]);
        ct_model_free(&back);
    }
    ct_trainer_free(&t);
    ct_run_free(&r);
    ct_tensor_free(&x);
    ct_tensor_free(&y);
}

/* A layer without to_json: the model saves (weights only) and from_pretrained says why it cannot. */
static ct_status id_forward(ct_module *m, const ct_tensor *x, ct_tensor *y) {
    (void)m;
    *y = *x;
    return CT_OK;
}
static ct_status id_backward(ct_module *m, const ct_tensor *dy, ct_tensor *dx) {
    (void)m;
    if (dx) *dx = *dy;
    return CT_OK;
}
static const ct_module_ops opaque_ops = {
    .size = sizeof(ct_module_ops), .type = "opaque", .forward = id_forward, .backward = id_backward};

static void test_errors(void) {
    ct_model back;
    CHECK_ERR(ct_model_from_pretrained("/nonexistent-dir", NULL, &back), CT_ERR_IO,
              "/nonexistent-dir/model.h5: cannot open: No such file or directory");
    /* a FIFO in place of model.h5 is refused, not opened (HDF5's open would wait for a writer) */
    char fifo_dir[1024], fifo[1100];
    snprintf(fifo_dir, sizeof fifo_dir, "%s/fifo", tmp_root);
    snprintf(fifo, sizeof fifo, "%s/model.h5", fifo_dir);
    CT_ASSERT(mkdir(fifo_dir, 0700) == 0 && mkfifo(fifo, 0600) == 0);
    CHECK_ERR(ct_model_from_pretrained(fifo_dir, NULL, &back), CT_ERR_IO, "model.h5: cannot read: Is a FIFO");
    ct_module *seq, *lin, *opaque = calloc(1, sizeof *opaque);
    CHECK_OK(ct_sequential_create(&seq));
    CHECK_OK(ct_linear_create(4, 3, true, &lin));
    CHECK_OK(ct_module_add_child(seq, lin, NULL));
    ct_module_base_init(opaque, &opaque_ops);
    CHECK_OK(ct_module_add_child(seq, opaque, NULL));
    json_t *spec;
    CHECK_ERR(ct_module_to_json(seq, &spec), CT_ERR_UNSUPPORTED, "layer '1' (type 'opaque') has no to_json");
    ct_model m;
    ct_shape in = {.ndim = 1, .dims = {4}};
    CHECK_OK(ct_model_build(&m, seq, &in, &(ct_model_options){.max_batch = 2}));
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/opaque", tmp_root);
    ct_training_args a;
    ct_training_args_default(&a);
    snprintf(a.output_dir, sizeof a.output_dir, "%s", dir);
    ct_trainer t;
    CHECK_OK(ct_trainer_init(&t, NULL, &a, &(ct_trainer_setup){.model = &m}));
    CHECK_OK(ct_trainer_save_model(&t, dir));
    ct_trainer_free(&t);
    ct_training_args_free(&a);
    CHECK_ERR(ct_model_from_pretrained(dir, NULL, &back), CT_ERR_FORMAT, "model.h5: the file holds weights but not "
              "the architecture");
    ct_model_free(&m);
}

/* A sequence's "name" in a layer spec (what a C-named child saves as): the parameters take it; a bad,
 * numeric or repeated name is refused naming the layer. */
static void test_named_layers_json(void) {
    static const struct {
        const char *name_a, *name_b, *error;
    } cases[] = {{"fc1", "out", NULL},
                 {"fc1", "fc1", "model.layers[2].name: 'fc1' names layer 0 too"},
                 {"fc1", "2", "model.layers[2].name: '2' is a number"},
                 {"fc.1", "out", "model.layers[0].name: expected a name of 1 to"},
                 {"", "out", "model.layers[0].name: expected a name of 1 to"}};
    for (size_t i = 0; i < CT_ARRAY_LEN(cases); i++) {
        json_t *spec = json_pack("{s:s, s:[{s:s, s:i, s:s}, {s:s}, {s:s, s:i, s:s}]}", "type", "sequential", "layers",
                                 "type", "linear", "out_features", 4, "name", cases[i].name_a, "type", "relu", "type",
                                 "linear", "out_features", 2, "name", cases[i].name_b);
        ct_module *root = NULL;
        ct_status s = ct_module_from_json(spec, "model", &root);
        if (cases[i].error) {
            CHECK(s == CT_ERR_CONFIG && strstr(ct_last_error(), cases[i].error), "case %zu: %s: %s", i,
                  ct_status_str(s), ct_last_error());
        } else {
            ct_model m;
            CHECK_OK(s);
            if (s == CT_OK && ct_model_build(&m, root, &(ct_shape){.ndim = 1, .dims = {3}},
                                             &(ct_model_options){.max_batch = 2}) == CT_OK) {
                CHECK(m.params.count == 4 && strcmp(m.params.items[0].name, "fc1.weight") == 0 &&
                          strcmp(m.params.items[3].name, "out.bias") == 0,
                      "named layers' parameters: %s ... %s", m.params.items[0].name, m.params.items[3].name);
                json_t *again;
                CHECK_OK(ct_module_to_json(m.root, &again));
                json_t *layers = json_object_get(again, "layers");
                const char *n0 = json_string_value(json_object_get(json_array_get(layers, 0), "name")),
                           *n2 = json_string_value(json_object_get(json_array_get(layers, 2), "name"));
                CHECK(n0 && strcmp(n0, "fc1") == 0 && n2 && strcmp(n2, "out") == 0 &&
                          !json_object_get(json_array_get(layers, 1), "name"),
                      "to_json: the names are not given back (only the named layers have one)");
                json_decref(again);
                ct_model_free(&m);
            }
        }
        json_decref(spec);
    }
}

int main(void) {
    ct_test_begin("test_pretrained");
    test_named_layers_json();
    if (!(tmp_root = ct_fixture_tmp_root("ct_pretrained"))) return 1;
    test_c_model();
    test_gpt_and_preset();
    test_preset_classes_from_data();
    test_errors();
    ct_fixture_cleanup();
    return ct_test_finish();
}
