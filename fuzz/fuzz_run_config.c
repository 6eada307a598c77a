/* Fuzz target: run configs (config/run_config.h, trainer/run.h) and everything that reads their
 * sections, as `ctrainer train|evaluate|search` do before any step is trained.
 *
 * Input: the run config's text; optionally, after a NUL byte, a search space (search/hp_space.h,
 * the JSON of `ctrainer search --space`), and after a second NUL, command-line overrides separated
 * by NULs: "key.path=JSON" is a --set, "--name=value" a training-argument override.
 *
 * What runs: parsing (syntax errors with line:column), locating every JSON path of the config in its
 * text and annotating an error at each, the search space (grid size, sampled trials, the key check
 * against the config, a trial applied as --set), the --set assignments, resolution of the training
 * arguments and their cross-checks (then a round trip through JSON, which must give the same
 * arguments), the optimizer and scheduler they describe, the generation settings, the model (built
 * and run forward and backward on a batch of two when small: at most MAX_PARAMS parameters and
 * MAX_ACTIVATIONS activation elements per sample, checked by running infer and declare first), the
 * loss, metrics, callbacks and transforms, and the datasets.
 *
 * The datasets read files, so a spec is opened only when every string in it is a relative path
 * without "..", it has no "cache" (which writes), and a fashion_mnist spec names its "dir": paths
 * then resolve against the target's temporary directory, which holds tiny data files of every kind
 * under the names the dictionary (fuzz/run_config.dict) knows. The search space's key check opens
 * datasets too, so it runs only for spaces without "data." keys. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "callbacks/callback.h"
#include "common.h"
#include "data/convert.h"
#include "data/dataset_json.h"
#include "data/transform.h"
#include "eval/metric.h"
#include "generate/generate.h"
#include "model/layers.h"
#include "model/loss.h"
#include "model/model.h"
#include "model/model_safetensors.h"
#include "model/params.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"
#include "search/hp_search.h"
#include "search/hp_space.h"
#include "trainer/run.h"

#define MAX_TEXT ((size_t)1 << 16)
#define MAX_OVERRIDES 8
#define MAX_PARAMS ((int64_t)1 << 18)
#define MAX_ACTIVATIONS ((int64_t)1 << 18)

/* --- the data files the specs may name --------------------------------------------------------------- */

static void write_gz(const char *name, const void *data, size_t n) {
    char path[512];
    gzFile f = gzopen(fz_path(path, sizeof path, name), "wb");
    if (!f || gzwrite(f, data, (unsigned)n) != (int)n || gzclose(f) != Z_OK) abort();
}

static void setup(void) {
    fz_init();
    static const uint8_t img[] = {0, 0, 8, 3, 0, 0, 0, 4, 0, 0, 0, 2, 0, 0, 0, 2,
                                  1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    static const uint8_t lab[] = {0, 0, 8, 1, 0, 0, 0, 4, 0, 1, 2, 1};
    static const uint8_t tokens[] = {1, 0, 2, 0, 3, 0, 4, 0, 0, 0, 5, 0, 6, 0, 7, 0, 8, 0, 9, 0};
    char path[512], labels[512], h5[512];
    fz_write_file(fz_path(path, sizeof path, "images.idx"), img, sizeof img);
    fz_write_file(fz_path(labels, sizeof labels, "labels.idx"), lab, sizeof lab);
    /* "features" [4, 1, 2, 2] and "labels" [4], as `ctrainer data convert` writes them */
    fz_check(ct_convert_idx_to_hdf5(path, labels, fz_path(h5, sizeof h5, "data.h5"), 0, 0), "writing data.h5");
    fz_write_file(fz_path(path, sizeof path, "tokens.bin"), tokens, sizeof tokens);
    write_gz("images.idx.gz", img, sizeof img);
    write_gz("labels.idx.gz", lab, sizeof lab);
    /* fashion_mnist with "dir": "." */
    write_gz("train-images-idx3-ubyte.gz", img, sizeof img);
    write_gz("train-labels-idx1-ubyte.gz", lab, sizeof lab);
    write_gz("t10k-images-idx3-ubyte.gz", img, sizeof img);
    write_gz("t10k-labels-idx1-ubyte.gz", lab, sizeof lab);
}

/* --- the dataset policy ------------------------------------------------------------------------------- */

static bool safe_value(const json_t *v) {
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        return s[0] != '/' && !strstr(s, "..");
    }
    if (json_is_object(v)) {
        const char *k;
        const json_t *x;
        json_object_foreach((json_t *)v, k, x) if (strcmp(k, "cache") == 0 || !safe_value(x)) return false;
    }
    if (json_is_array(v)) {
        size_t i;
        const json_t *x;
        json_array_foreach(v, i, x) if (!safe_value(x)) return false;
    }
    return true;
}

static bool openable(const json_t *spec) {
    const char *type = json_string_value(json_object_get(spec, "type"));
    if (type && strcmp(type, "fashion_mnist") == 0 && !json_object_get(spec, "dir")) return false;
    return safe_value(spec);
}

/* --- walking the config ---------------------------------------------------------------------------------- */

/* Locates every value's path in the text and annotates an error at it (the locator reads the
 * config's text, which the fuzzer wrote). */
static void locate_all(const ct_run_config *c, const json_t *v, char *path, size_t len, size_t cap, int depth) {
    int line, col;
    if (len > 0) {
        ct_run_config_locate(c, path, &line, &col);
        ct_run_config_annotate(c, ct_error(CT_ERR_CONFIG, "%s: fuzz", path));
    }
    if (depth > 8) return;
    if (json_is_object(v)) {
        const char *k;
        const json_t *x;
        json_object_foreach((json_t *)v, k, x) {
            int n = snprintf(path + len, cap - len, "%s%s", len ? "." : "", k);
            if (n > 0 && (size_t)n < cap - len) locate_all(c, x, path, len + (size_t)n, cap, depth + 1);
            path[len] = '\0';
        }
    } else if (json_is_array(v)) {
        size_t i;
        const json_t *x;
        json_array_foreach(v, i, x) {
            if (i >= 16) break;
            int n = snprintf(path + len, cap - len, "[%zu]", i);
            if (n > 0 && (size_t)n < cap - len) locate_all(c, x, path, len + (size_t)n, cap, depth + 1);
            path[len] = '\0';
        }
    }
}

/* --- the model ------------------------------------------------------------------------------------- */

static int64_t sat_add(int64_t a, int64_t b) { return a > INT64_MAX - b ? INT64_MAX : a + b; }

static int64_t safe_numel(const ct_shape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) {
        if (s->dims[i] < 0) return INT64_MAX;
        if (s->dims[i] && n > INT64_MAX / s->dims[i]) return INT64_MAX;
        n *= s->dims[i];
    }
    return n;
}

static int64_t activations(const ct_module *m) {
    int64_t n = safe_numel(&m->out_shape);
    for (int i = 0; i < m->n_children; i++) n = sat_add(n, activations(m->children[i]));
    return n;
}

/* infer and declare as ct_model_build runs them, without allocating anything: is the model small? */
static bool small_model(const json_t *spec, const ct_shape *in) {
    ct_module *m;
    if (ct_module_from_json(spec, "model", &m) != CT_OK) return false;
    static ct_step_ctx step;
    ct_module_configure(m, CT_F32, CT_CPU, &step);
    ct_module_assign_names(m, "");
    m->need_input_grad = false;
    ct_shape out;
    bool ok = fz_report("infer", ct_module_infer(m, in, &out)) == CT_OK && activations(m) <= MAX_ACTIVATIONS;
    ct_param_store ps;
    ct_params_init(&ps, CT_F32, CT_CPU);
    if (ok) ok = ct_module_declare(m, &ps) == CT_OK;
    int64_t params = 0;
    for (int i = 0; ok && i < ps.count; i++) params = sat_add(params, ps.items[i].numel);
    ok = ok && params <= MAX_PARAMS;
    ct_params_free(&ps);
    ct_module_destroy(m);
    return ok;
}

/* Builds the model for `in`, runs a batch of two forward and backward, and builds the optimizer
 * the arguments describe over its parameters (and steps it once). */
static void run_model(const ct_run *r, const json_t *spec, const ct_shape *in, fz_input *bytes) {
    if (!small_model(spec, in)) return;
    ct_module *root;
    if (ct_module_from_json(spec, "model", &root) != CT_OK) return;
    ct_model model;
    ct_model_options o = {.dtype = CT_F32, .device = CT_CPU, .max_batch = 2, .seed = 3};
    if (fz_report("ct_model_build", ct_model_build(&model, root, in, &o)) != CT_OK) return;
    int ndim;
    int64_t shape[CT_MAX_DIMS];
    ct_shape_with_batch(in, 2, &ndim, shape);
    ct_tensor x, dy;
    if (ct_tensor_alloc(&x, model.in_dtype == CT_I64 ? CT_I64 : CT_F32, CT_CPU, ndim, shape) == CT_OK) {
        int64_t n = ct_tensor_numel(&x);
        for (int64_t i = 0; i < n; i++) {
            uint8_t b = fz_u8(bytes);
            if (x.dtype == CT_I64) ((int64_t *)x.data)[i] = b % 8;
            else ((float *)x.data)[i] = (float)b / 64.0f - 2.0f;
        }
        ct_model_train(&model, true);
        ct_model_set_step(&model, 1, 0);
        ct_tensor y;
        if (fz_report("forward", ct_model_forward(&model, &x, &y)) == CT_OK &&
            ct_tensor_alloc(&dy, y.dtype, CT_CPU, y.ndim, y.shape) == CT_OK) {
            int64_t m = ct_tensor_numel(&dy);
            for (int64_t i = 0; i < m; i++) ct_tensor_set(&dy, i, 1.0 / (double)(1 + i % 7));
            fz_report("backward", ct_model_backward(&model, &dy));
            ct_tensor_free(&dy);
        }
        ct_tensor_free(&x);
    }
    ct_optim_config oc;
    ct_optimizer *opt;
    if (ct_training_args_optim_config(&r->args, &oc) == CT_OK &&
        fz_report("ct_optimizer_create", ct_optimizer_create(&oc, &model.params, &opt)) == CT_OK) {
        fz_report("optimizer step", ct_optimizer_step(opt, oc.learning_rate));
        ct_optimizer_destroy(opt);
    }
    const json_t *init = ct_run_config_section(&r->config, "init_from");
    if (init && safe_value(init)) fz_report("init_from", ct_model_init_from_json(&model, init, fz_tmpdir()));
    ct_model_free(&model);
}

/* --- the sections ---------------------------------------------------------------------------------- */

/* Opens the spec (when the policy allows), fetches its first and last samples, and keeps the first
 * dataset opened in *first (its samples give the model's input shape). */
static void open_dataset(const json_t *spec, const char *path, ct_dataset **first) {
    if (!json_is_object(spec) || !openable(spec)) return;
    ct_dataset *ds = NULL;
    if (fz_report("ct_dataset_from_json", ct_dataset_from_json(spec, path, fz_tmpdir(), &ds)) != CT_OK) return;
    {
        int64_t n = ct_dataset_length(ds);
        ct_tensor f, l;
        if (n > 0 && safe_numel(&ds->spec.feature_shape) <= MAX_ACTIVATIONS &&
            safe_numel(&ds->spec.label_shape) <= MAX_ACTIVATIONS && ct_dataset_alloc_batch(ds, 2, &f, &l) == CT_OK) {
            int64_t idx[2] = {0, n - 1};
            fz_report("get_batch", ct_dataset_get_batch(ds, idx, 2, &(ct_fetch_ctx){.seed = 1, .epoch = 2}, &f, &l));
            ct_tensor_free(&f);
            ct_tensor_free(&l);
        }
        if (!*first) *first = ds;
        else ct_dataset_free(ds);
    }
}

static void open_datasets(const ct_run *r, ct_dataset **first) {
    const json_t *data = ct_run_config_section(&r->config, "data");
    open_dataset(json_object_get(data, "train"), "data.train", first);
    const json_t *eval = json_object_get(data, "eval");
    if (json_is_object(eval) && !json_object_get(eval, "type")) {
        const char *k;
        const json_t *spec;
        int n = 0;
        json_object_foreach((json_t *)eval, k, spec) if (n++ < 4) open_dataset(spec, "data.eval", first);
    } else {
        open_dataset(eval, "data.eval", first);
    }
    open_dataset(json_object_get(data, "test"), "data.test", first);
}

static void transforms_of(const json_t *data) {
    const char *k;
    const json_t *spec;
    json_object_foreach((json_t *)data, k, spec) {
        const json_t *list = json_object_get(spec, "transforms");
        for (size_t i = 0; i < json_array_size(list) && i < 16; i++) {
            ct_transform *t = NULL;
            fz_report("ct_transform_from_json", ct_transform_from_json(json_array_get(list, i), "transforms", &t));
            ct_transform_free(t);
        }
    }
}

static void sections(ct_run *r, fz_input *bytes) {
    const json_t *loss = ct_run_config_section(&r->config, "loss");
    if (loss) {
        ct_loss *l = NULL;
        fz_report("ct_loss_from_json", ct_loss_from_json(loss, "loss", &l));
        ct_loss_free(l);
    }
    ct_metric_set ms = {0};
    fz_report("ct_metric_set_from_json",
              ct_metric_set_from_json(ct_run_config_section(&r->config, "metrics"), "metrics", &ms));
    ct_metric_set_free(&ms);
    const json_t *cbs = ct_run_config_section(&r->config, "callbacks");
    for (size_t i = 0; i < json_array_size(cbs) && i < 16; i++) {
        ct_callback *cb = NULL;
        fz_report("ct_callback_from_json", ct_callback_from_json(json_array_get(cbs, i), "callbacks", &cb));
        ct_callback_free(cb);
    }
    transforms_of(ct_run_config_section(&r->config, "data"));

    ct_scheduler_config sc;
    ct_scheduler *sched;
    int64_t steps = r->args.max_steps > 0 && r->args.max_steps < 1000000 ? r->args.max_steps : 100;
    if (ct_training_args_scheduler_config(&r->args, &sc) == CT_OK &&
        fz_report("ct_scheduler_create", ct_scheduler_create(&sc, r->args.learning_rate, steps, &sched)) == CT_OK) {
        for (int64_t k = 0; k < 3; k++) {
            (void)ct_scheduler_lr(sched);
            ct_scheduler_step(sched);
        }
        (void)ct_scheduler_lr_at(sched, steps);
        (void)ct_scheduler_lr_at(sched, steps + 1);
        fz_report("step_metric", ct_scheduler_step_metric(sched, 0.5));
        ct_scheduler_destroy(sched);
    }

    ct_dataset *ds = NULL;
    open_datasets(r, &ds);
    json_t *model = json_deep_copy(ct_run_config_section(&r->config, "model"));
    if (model) {
        /* as ct_run_build does: the mlp and cnn presets take num_classes from the data */
        const char *type = json_string_value(json_object_get(model, "type"));
        bool preset = type && (strcmp(type, "mlp") == 0 || strcmp(type, "cnn") == 0);
        int64_t classes = ds && ds->spec.num_classes > 0 ? ds->spec.num_classes : 3;
        if (preset && !json_object_get(model, "num_classes"))
            json_object_set_new(model, "num_classes", json_integer(classes));
        if (ds) {
            run_model(r, model, &ds->spec.feature_shape, bytes);
        } else {
            run_model(r, model, &(ct_shape){3, {1, 6, 6}}, bytes);
            run_model(r, model, &(ct_shape){1, {8}}, bytes);
        }
        json_decref(model);
    }
    ct_dataset_free(ds);
}

/* The resolved arguments must survive their own JSON form unchanged. */
static void round_trip(const ct_training_args *a) {
    json_t *j1 = NULL, *j2 = NULL;
    if (ct_training_args_to_json(a, &j1) != CT_OK) return;
    ct_training_args b;
    ct_training_args_default(&b);
    ct_status s = ct_training_args_from_json(&b, j1, "training_args");
    if (s == CT_OK) s = ct_training_args_to_json(&b, &j2);
    if (s != CT_OK || !json_equal(j1, j2)) {
        char *t1 = json_dumps(j1, JSON_SORT_KEYS), *t2 = j2 ? json_dumps(j2, JSON_SORT_KEYS) : NULL;
        fprintf(stderr, "fuzz: training arguments do not survive their JSON: %s\n%s\n%s\n", ct_last_error(), t1,
                t2 ? t2 : "(none)");
        abort();
    }
    ct_training_args_free(&b);
    json_decref(j1);
    json_decref(j2);
}

/* --- the search space ------------------------------------------------------------------------------- */

static void search_space(const char *text, ct_run_config *c, bool have_config) {
    json_error_t err;
    json_t *root = json_loads(text, 0, &err);
    if (!root) return;
    ct_hp_space space;
    if (fz_report("ct_hp_space_from_json", ct_hp_space_from_json(root, "space.json", &space)) == CT_OK) {
        int64_t grid;
        if (ct_hp_grid_size(&space, &grid) == CT_OK && grid > 0) {
            json_t *p = NULL;
            fz_report("ct_hp_grid_point", ct_hp_grid_point(&space, grid - 1, &p));
            json_decref(p);
        }
        json_t *trial = NULL;
        for (int64_t k = 0; k < 3; k++) {
            json_decref(trial);
            trial = NULL;
            fz_report("ct_hp_sample_random", ct_hp_sample_random(&space, 7, k, &trial));
        }
        bool data_keys = false;
        for (int i = 0; i < space.n; i++) data_keys = data_keys || strncmp(space.dims[i].key, "data", 4) == 0;
        if (have_config && !data_keys) {
            fz_report("ct_hp_check_config_keys", ct_hp_check_config_keys(&space, "space.json", c));
            if (trial) fz_report("ct_hp_apply_params", ct_hp_apply_params(c, trial));
        }
        json_decref(trial);
        ct_hp_space_free(&space);
    }
    json_decref(root);
}

/* --- the input ----------------------------------------------------------------------------------------- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static bool ready;
    if (!ready) {
        setup();
        fz_h5_mark_handles();
        ready = true;
    }
    if (size > MAX_TEXT) return 0;
    /* text NUL space NUL override NUL override ... (a terminating NUL added) */
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    const char *parts[2 + MAX_OVERRIDES] = {buf};
    int n_parts = 1;
    for (size_t i = 0; i < size && n_parts < 2 + MAX_OVERRIDES; i++)
        if (buf[i] == '\0') parts[n_parts++] = buf + i + 1;

    ct_run_config c;
    bool have_config = fz_report("ct_run_config_parse", ct_run_config_parse(parts[0], "fuzz.json", &c)) == CT_OK;
    if (n_parts > 1) search_space(parts[1], &c, have_config);
    if (!have_config) {
        free(buf);
        ct_error_clear();
        return 0;
    }
    ct_arg_override ov[MAX_OVERRIDES];
    char *names[MAX_OVERRIDES];
    int n_ov = 0;
    for (int i = 2; i < n_parts; i++) {
        const char *a = parts[i];
        if (strncmp(a, "--", 2) == 0) {
            const char *eq = strchr(a, '=');
            if (!eq) continue;
            names[n_ov] = strndup(a + 2, (size_t)(eq - a - 2));
            if (!names[n_ov]) continue;
            ov[n_ov] = (ct_arg_override){names[n_ov], eq + 1};
            n_ov++;
        } else {
            fz_report("ct_run_config_set", ct_run_config_set(&c, a));
        }
    }
    char path[512] = "";
    locate_all(&c, c.root, path, 0, sizeof path, 0);

    ct_run r;
    if (fz_report("ct_run_resolve", ct_run_resolve(&r, &c, ov, n_ov)) == CT_OK) {
        round_trip(&r.args);
        fz_input bytes = {data, size};
        sections(&r, &bytes);
        ct_run_free(&r);
    }
    for (int i = 0; i < n_ov; i++) free(names[i]);
    free(buf);
    fz_h5_check_handles();
    ct_error_clear();
    return 0;
}
