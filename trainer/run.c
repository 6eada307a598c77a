/* Builds what a run config describes (see run.h). Every step's config error goes through
 * ct_run_config_annotate, so it comes out as "file:line:column: path: message". The datasets are
 * built inside main_process_first when a communicator is given, so that one process per node
 * builds what they cache. */
#include <stdio.h>
#include <string.h>

#include "core/json.h"
#include "data/dataset_json.h"
#include "generate/generate.h"
#include "model/layers.h"
#include "model/model_safetensors.h"
#include "trainer/run.h"

static const char *const SECTIONS_OF_DATA[] = {"train", "eval", "test", NULL};

static ct_status open_set(ct_run *r, const json_t *spec, const char *path, ct_dataset **out) {
    return ct_run_config_annotate(&r->config, ct_dataset_from_json(spec, path, r->config.base_dir, out));
}

/* "eval" is one dataset spec (an object with "type") or an object of named specs. */
static ct_status open_eval_sets(ct_run *r, const json_t *eval) {
    if (!json_is_object(eval))
        return ct_run_config_annotate(&r->config,
                                      ct_error(CT_ERR_CONFIG, "data.eval: expected a dataset or an object of named datasets"));
    if (json_object_get(eval, "type")) {
        r->n_eval = 1;
        return open_set(r, eval, "data.eval", &r->eval[0]);
    }
    const char *name;
    const json_t *spec;
    json_object_foreach((json_t *)eval, name, spec) {
        if (r->n_eval == CT_TRAINER_MAX_EVAL_SETS)
            return ct_run_config_annotate(&r->config, ct_error(CT_ERR_CONFIG, "data.eval: more than %d evaluation sets",
                                                              CT_TRAINER_MAX_EVAL_SETS));
        char path[128];
        snprintf(path, sizeof path, "data.eval.%s", name);
        snprintf(r->eval_names[r->n_eval], sizeof r->eval_names[0], "%s", name);
        CT_TRY(open_set(r, spec, path, &r->eval[r->n_eval]));
        r->n_eval++;
    }
    return CT_OK;
}

/* The config may also name a set the program gave (ct_run_pieces): one of them would go unused. */
static ct_status given_twice(ct_run *r, const json_t *spec, const char *path) {
    if (!spec) return CT_OK;
    return ct_run_config_annotate(&r->config, ct_error(CT_ERR_CONFIG, "%s: the program gives this dataset too "
                                                       "(ct_run_pieces); remove it from the config or from the program",
                                                       path));
}

static ct_status open_data(ct_run *r, ct_run_purpose purpose) {
    const json_t *data = ct_run_config_section(&r->config, "data");
    bool pieces = r->train || r->n_eval || r->test;
    if (!data && !pieces) return ct_error(CT_ERR_CONFIG, "%s: the run config has no \"data\" section", r->config.file);
    if (data) CT_TRY(ct_run_config_annotate(&r->config, ct_json_check_keys(data, "data", SECTIONS_OF_DATA)));
    const json_t *train = json_object_get(data, "train"), *eval = json_object_get(data, "eval"),
                 *test = json_object_get(data, "test");
    if (r->train) CT_TRY(given_twice(r, train, "data.train"));
    if (r->n_eval) CT_TRY(given_twice(r, eval, "data.eval"));
    if (r->test) CT_TRY(given_twice(r, test, "data.test"));
    bool has_train = train || r->train, has_eval = eval || r->n_eval, has_test = test || r->test;
    if (purpose == CT_RUN_TRAIN && !has_train)
        return ct_run_config_annotate(&r->config, ct_error(CT_ERR_CONFIG, "data: training needs a \"train\" dataset"));
    if (purpose == CT_RUN_EVALUATE && !has_eval && !has_test)
        return ct_run_config_annotate(&r->config,
                                      ct_error(CT_ERR_CONFIG, "data: evaluation needs an \"eval\" or \"test\" dataset"));
    if (purpose == CT_RUN_PREDICT && !has_test && !has_eval)
        return ct_run_config_annotate(&r->config,
                                      ct_error(CT_ERR_CONFIG, "data: prediction needs a \"test\" or \"eval\" dataset"));
    if (train && purpose == CT_RUN_TRAIN) CT_TRY(open_set(r, train, "data.train", &r->train));
    if (eval && purpose != CT_RUN_PREDICT) CT_TRY(open_eval_sets(r, eval));
    if (test && purpose != CT_RUN_EVALUATE) CT_TRY(open_set(r, test, "data.test", &r->test));
    /* The program's sets stand in as the config's would: its test set is evaluated when there is no
     * eval set, its first eval set predicted when there is no test set. */
    if (purpose == CT_RUN_EVALUATE && r->n_eval == 0 && r->test) {
        r->eval[r->n_eval++] = r->test;
        r->test = NULL;
    }
    if (purpose == CT_RUN_PREDICT && !r->test && r->n_eval) {
        r->test = r->eval[0];
        for (int i = 1; i < r->n_eval; i++) {
            r->eval[i - 1] = r->eval[i];
            memcpy(r->eval_names[i - 1], r->eval_names[i], sizeof r->eval_names[0]);
        }
        r->eval[--r->n_eval] = NULL;
    }
    /* Evaluating a config without an eval set evaluates its test set; predicting without a test
     * set predicts the (first) eval set. */
    if (purpose == CT_RUN_EVALUATE && r->n_eval == 0) {
        r->n_eval = 1;
        CT_TRY(open_set(r, test, "data.test", &r->eval[0]));
    }
    if (purpose == CT_RUN_PREDICT && !r->test) {
        const json_t *first = json_object_get(eval, "type") ? eval : NULL;
        const char *name = "data.eval";
        char path[128];
        if (!first) {
            const char *k;
            const json_t *v;
            json_object_foreach((json_t *)eval, k, v) {
                first = v;
                snprintf(path, sizeof path, "data.eval.%s", k);
                name = path;
                break;
            }
        }
        if (!first) return ct_run_config_annotate(&r->config, ct_error(CT_ERR_CONFIG, "data.eval: no dataset"));
        CT_TRY(open_set(r, first, name, &r->test));
    }
    return CT_OK;
}

static ct_dataset *any_set(const ct_run *r) { return r->train ? r->train : r->n_eval ? r->eval[0] : r->test; }

/* A model as the config's "model" section describes it, for batches up to max_batch on dev. */
static ct_status model_from_config(ct_run *r, int64_t max_batch, ct_device dev, ct_model *out) {
    json_t *section = ct_run_config_section(&r->config, "model");
    if (!section) return ct_error(CT_ERR_CONFIG, "%s: the run config has no \"model\" section", r->config.file);
    const char *type = json_string_value(json_object_get(section, "type"));
    const ct_dataset *ds = any_set(r);
    bool preset = type && (strcmp(type, "mlp") == 0 || strcmp(type, "cnn") == 0);
    /* filled into the config itself, which model.h5 and run_config.json record: the model reloads
     * (ct_model_from_pretrained) without the data */
    const char *source = ds->source[0] ? ds->source : "the first dataset";
    if (preset && !json_object_get(section, "num_classes") && ds->spec.num_classes <= 0)
        return ct_run_config_annotate(
            &r->config,
            ct_dataset_length((ct_dataset *)ds) == 0
                ? ct_error(CT_ERR_CONFIG, "model.num_classes: the data it is counted from (%s) holds no samples",
                           source)
                : ct_error(CT_ERR_CONFIG, "model.num_classes: not given, and the labels of %s are not class ids to "
                           "count it from; give it (the number of outputs, for a regression)", source));
    if (preset && !json_object_get(section, "num_classes") &&
        json_object_set_new(section, "num_classes", json_integer(ds->spec.num_classes)) != 0)
        return ct_error(CT_ERR_NOMEM, "out of memory");
    json_t *spec = json_deep_copy(section);
    if (!spec) return ct_error(CT_ERR_NOMEM, "out of memory");
    ct_module *root;
    ct_status s = ct_run_config_annotate(&r->config, ct_module_from_json(spec, "model", &root));
    json_decref(spec);
    CT_TRY(s);
    ct_model_options o = {.dtype = CT_F32, .device = dev, .max_batch = max_batch, .seed = (uint64_t)r->args.seed};
    s = ct_model_build(out, root, &ds->spec.feature_shape, &o);
    if (s != CT_OK) return ct_run_config_annotate(&r->config, ct_error_prefix(s, "model: "));
    return CT_OK;
}

static ct_status build_model(ct_run *r) {
    int64_t max_batch = r->args.per_device_train_batch_size > r->args.per_device_eval_batch_size
                            ? r->args.per_device_train_batch_size
                            : r->args.per_device_eval_batch_size;
    ct_status s = model_from_config(r, max_batch, r->device, &r->model);
    if (s == CT_ERR_NOMEM) /* its activations are sized for the largest batch */
        return ct_error_prefix(s, "a model for batches of %lld samples (training_args.per_device_%s_batch_size): ",
                               (long long)max_batch,
                               max_batch == r->args.per_device_train_batch_size ? "train" : "eval");
    CT_TRY(s);
    r->model_built = true;
    /* "init_from": weights from a safetensors file over the initialisation (model/model_safetensors.h). */
    const json_t *init = ct_run_config_section(&r->config, "init_from");
    if (init) CT_TRY(ct_run_config_annotate(&r->config, ct_model_init_from_json(&r->model, init, r->config.base_dir)));
    return CT_OK;
}

/* ct_trainer_setup.make_model: replicas for asynchronous evaluation. */
static ct_status make_replica(void *ctx, int64_t max_batch, ct_device dev, ct_model *out) {
    return model_from_config(ctx, max_batch, dev, out);
}

/* The metrics list against the model's classes (the last dimension of its outputs), here where
 * the config's line is known: a top_k_accuracy with k above them is a value that cannot work. */
static ct_status check_metric_classes(ct_run *r) {
    const json_t *list = ct_run_config_section(&r->config, "metrics");
    const ct_shape *out = &r->model.out_shape;
    for (size_t i = 0; json_is_array(list) && out->ndim >= 1 && i < json_array_size(list); i++) {
        const json_t *spec = json_array_get(list, i);
        char path[64];
        snprintf(path, sizeof path, "metrics[%zu]", i);
        ct_metric *m;
        CT_TRY(ct_run_config_annotate(&r->config, ct_metric_from_json(spec, path, &m)));
        ct_status s = ct_metric_check_classes(m, out->dims[out->ndim - 1]);
        ct_metric_free(m);
        /* {"type": "top_k_accuracy", "k": 7} points at its k, "top_7_accuracy" at itself */
        if (s != CT_OK)
            return ct_run_config_annotate(&r->config, ct_error_prefix(CT_ERR_CONFIG, "%s%s: ", path,
                                                                      json_is_object(spec) ? ".k" : ""));
    }
    return CT_OK;
}

static ct_status build_rest(ct_run *r) {
    const json_t *loss = ct_run_config_section(&r->config, "loss");
    bool given = r->loss != NULL; /* the program's (ct_run_pieces) */
    if (given && loss)
        return ct_run_config_annotate(&r->config, ct_error(CT_ERR_CONFIG, "loss: the program gives a loss too "
                                                           "(ct_run_pieces); remove it from the config or from the program"));
    if (loss) CT_TRY(ct_run_config_annotate(&r->config, ct_loss_from_json(loss, "loss", &r->loss)));
    else if (!given)
        CT_TRY(ct_cross_entropy_loss_create(
            &(ct_cross_entropy_opts){.ignore_index = -100, .label_smoothing = r->args.label_smoothing_factor},
            &r->loss));
    /* HF's label smoother replaces the model's loss; here a loss section is that loss, and says its own
     * label_smoothing: two settings of one thing would leave one of them unused. */
    if ((loss || given) && r->args.label_smoothing_factor > 0)
        return ct_run_config_annotate(&r->config, ct_error(CT_ERR_CONFIG,
                                      "training_args.label_smoothing_factor: applies to the default cross-entropy "
                                      "loss, but the %s: set \"label_smoothing\" there",
                                      given ? "program gives its own loss" : "config has a loss section"));
    /* The metrics are built by the trainer; building them once here puts their errors in context. */
    ct_metric_set check = {0};
    ct_status s = ct_metric_set_from_json(ct_run_config_section(&r->config, "metrics"), "metrics", &check);
    ct_metric_set_free(&check);
    CT_TRY(ct_run_config_annotate(&r->config, s));
    CT_TRY(check_metric_classes(r));
    const json_t *cbs = ct_run_config_section(&r->config, "callbacks");
    if (cbs && !json_is_array(cbs))
        return ct_run_config_annotate(&r->config, ct_error(CT_ERR_CONFIG, "callbacks: expected a list of callbacks"));
    for (size_t i = 0; cbs && i < json_array_size(cbs); i++) {
        char path[64];
        snprintf(path, sizeof path, "callbacks[%zu]", i);
        ct_callback *cb;
        CT_TRY(ct_run_config_annotate(&r->config, ct_callback_from_json(json_array_get(cbs, i), path, &cb)));
        CT_TRY(ct_callback_list_add(&r->callbacks, cb));
    }
    return CT_OK;
}

static ct_status resolve(ct_run *r, const ct_arg_override *ov, int n) {
    ct_training_args_default(&r->args);
    const json_t *ta = ct_run_config_section(&r->config, "training_args");
    if (ta) CT_TRY(ct_run_config_annotate(&r->config, ct_training_args_from_json(&r->args, ta, "training_args")));
    for (int i = 0; i < n; i++) CT_TRY(ct_training_args_set(&r->args, ov[i].name, ov[i].value));
    /* Cross-argument errors then name "training_args.<argument>", which annotate points at. */
    CT_TRY(ct_run_config_annotate(&r->config, ct_training_args_validate_at(&r->args, "training_args")));
    /* The generation settings fail here, before any data is read or any step is trained. */
    ct_generation_config g;
    return ct_run_config_annotate(
        &r->config, ct_generation_config_from_json(ct_run_config_section(&r->config, "generation"), "generation", &g));
}

typedef struct open_data_ctx {
    ct_run *r;
    ct_run_purpose purpose;
} open_data_ctx;

static ct_status open_data_fn(void *ctx) {
    open_data_ctx *o = ctx;
    return open_data(o->r, o->purpose);
}

static ct_status build(ct_run *r, ct_run_purpose purpose, ct_comm *comm) {
    /* A device this process cannot use fails before any data is read. */
    CT_TRY(ct_run_config_annotate(&r->config, ct_training_args_device(&r->args, comm ? comm->local_rank : 0, &r->device)));
    open_data_ctx ctx = {r, purpose};
    CT_TRY(ct_comm_main_process_first(comm, true, "building datasets", open_data_fn, &ctx));
    CT_TRY(build_model(r));
    return build_rest(r);
}

ct_status ct_run_resolve(ct_run *r, ct_run_config *config, const ct_arg_override *overrides, int n) {
    memset(r, 0, sizeof *r);
    r->config = *config;
    memset(config, 0, sizeof *config);
    ct_status s = resolve(r, overrides, n);
    if (s != CT_OK) ct_run_free(r);
    return s;
}

/* Moves the program's pieces into r, where ct_run_free releases them whatever happens next. */
static ct_status take_pieces(ct_run *r, ct_run_pieces *p) {
    r->train = p->train;
    r->test = p->test;
    r->loss = p->loss;
    int n = p->n_eval;
    if (n < 0 || n > CT_TRAINER_MAX_EVAL_SETS) {
        for (int i = 0; i < CT_TRAINER_MAX_EVAL_SETS; i++) ct_dataset_free(p->eval[i]);
        memset(p, 0, sizeof *p);
        return ct_error(CT_ERR_INVALID_ARG, "ct_run_pieces.n_eval is %d; expected 0 to %d", n, CT_TRAINER_MAX_EVAL_SETS);
    }
    for (int i = 0; i < n; i++) {
        r->eval[i] = p->eval[i];
        snprintf(r->eval_names[i], sizeof r->eval_names[0], "%s", p->eval_names[i] ? p->eval_names[i] : "");
    }
    r->n_eval = n;
    memset(p, 0, sizeof *p);
    for (int i = 0; i < n; i++)
        if (!r->eval[i]) return ct_error(CT_ERR_INVALID_ARG, "ct_run_pieces.eval[%d] is NULL (n_eval is %d)", i, n);
    return CT_OK;
}

ct_status ct_run_build_with(ct_run *r, ct_run_purpose purpose, ct_comm *comm, ct_run_pieces *pieces) {
    ct_status s = pieces ? take_pieces(r, pieces) : CT_OK;
    if (s == CT_OK) s = build(r, purpose, comm);
    if (s != CT_OK) ct_run_free(r);
    return s;
}

ct_status ct_run_build(ct_run *r, ct_run_purpose purpose, ct_comm *comm) {
    return ct_run_build_with(r, purpose, comm, NULL);
}

ct_status ct_run_prepare(ct_run *r, ct_run_config *config, const ct_arg_override *overrides, int n,
                         ct_run_purpose purpose) {
    CT_TRY(ct_run_resolve(r, config, overrides, n));
    return ct_run_build(r, purpose, NULL);
}

ct_trainer_setup ct_run_setup(ct_run *r) {
    ct_trainer_setup s = {.model = &r->model, .loss = r->loss, .train_dataset = r->train, .n_eval = r->n_eval,
                          .metrics = ct_run_config_section(&r->config, "metrics"), .config = r->config.root,
                          .callbacks = &r->callbacks, .make_model = make_replica, .make_model_ctx = r,
                          .test_dataset = r->test};
    for (int i = 0; i < r->n_eval; i++) {
        s.eval_datasets[i] = r->eval[i];
        s.eval_names[i] = r->eval_names[i];
    }
    return s;
}

void ct_run_free(ct_run *r) {
    ct_callback_list_free(&r->callbacks);
    ct_loss_free(r->loss);
    if (r->model_built) ct_model_free(&r->model);
    ct_dataset_free(r->train);
    for (int i = 0; i < r->n_eval; i++) ct_dataset_free(r->eval[i]);
    ct_dataset_free(r->test);
    ct_training_args_free(&r->args);
    ct_run_config_free(&r->config);
    memset(r, 0, sizeof *r);
}
