/* Registries of application types (core/registry.h) and the run builder's C-made pieces:
 *  - every register function (layers, datasets, metrics, losses, callbacks) refuses a NULL, empty,
 *    overlong or built-in name and a NULL reader, accepts the same pair twice and refuses a name
 *    bound to another reader;
 *  - each registered type is built from JSON by its kind's reader: a dataset with "limit" (which its
 *    reader never sees), a metric by name and as an object, a loss by name, a callback; unknown
 *    names suggest the registered ones; a reader's error gets the spec's path; what a reader
 *    returns with a broken table is refused;
 *  - ct_run_build_with: a C dataset with the JSON model (the preset's num_classes taken from the C
 *    data), and a piece the config names too refused at its line. */
#include <stdlib.h>
#include <string.h>

#include "callbacks/callback.h"
#include "core/json.h"
#include "data/dataset_json.h"
#include "eval/metric.h"
#include "model/layers.h"
#include "model/loss.h"
#include "testlib.h"
#include "trainer/run.h"

/* --- a dataset type: {"type": "ramp", "n": N, "classes": C} -------------------------------------- */

static ct_status ramp_make(int64_t n, int64_t classes, ct_dataset **out) {
    ct_tensor x, y;
    CT_TRY(ct_tensor_alloc(&x, CT_F32, CT_CPU, 2, (int64_t[]){n, 4}));
    ct_status s = ct_tensor_alloc(&y, CT_I64, CT_CPU, 1, (int64_t[]){n});
    if (s != CT_OK) {
        ct_tensor_free(&x);
        return s;
    }
    for (int64_t i = 0; i < n * 4; i++) ((float *)x.data)[i] = (float)((i * 7) % 5) / 5.0f - 0.3f;
    for (int64_t i = 0; i < n; i++) ((int64_t *)y.data)[i] = i % classes;
    s = ct_tensor_dataset_create(&x, &y, classes, out);
    ct_tensor_free(&x);
    ct_tensor_free(&y);
    return s;
}

static ct_status ramp_from_json(const json_t *spec, const char *path, const char *base_dir, ct_dataset **out) {
    (void)base_dir;
    static const char *const keys[] = {"type", "n", "classes", NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys)); /* "limit" never reaches it */
    int64_t n, classes;
    CT_TRY(ct_json_int(spec, path, "n", true, 0, &n));
    CT_TRY(ct_json_int(spec, path, "classes", false, 3, &classes));
    if (n < 1) return ct_error(CT_ERR_INVALID_ARG, "n must be at least 1, got %lld", (long long)n);
    return ramp_make(n, classes, out);
}

static const ct_dataset_ops broken_dataset_ops = {.name = "broken"}; /* no .size */

static ct_status broken_from_json(const json_t *spec, const char *path, const char *base_dir, ct_dataset **out) {
    static ct_dataset ds;
    ds.ops = &broken_dataset_ops;
    *out = &ds;
    return CT_OK;
}

/* --- a metric type: "label_sum" ------------------------------------------------------------------ */

static ct_status label_sum_update(ct_metric *m, const ct_eval_batch *b) {
    for (int64_t i = 0; i < b->labels->shape[0]; i++)
        if (ct_metric_row_real(b, i)) m->sums[0] += (double)ct_metric_label(b->labels, i);
    return CT_OK;
}

static ct_status label_sum_compute(const ct_metric *m, const char *prefix, json_t *out) {
    return ct_metric_put(out, prefix, "label_sum", m->sums[0]);
}

static const ct_metric_ops label_sum_ops = {.size = sizeof(ct_metric_ops), .name = "label_sum",
                                            .update = label_sum_update, .compute = label_sum_compute};

static ct_status label_sum_from_json(const json_t *spec, const char *path, ct_metric **out) {
    if (json_is_object(spec)) {
        static const char *const keys[] = {"type", NULL};
        CT_TRY(ct_json_check_keys(spec, path, keys));
    }
    ct_metric *m = calloc(1, sizeof *m);
    if (!m) return ct_error(CT_ERR_NOMEM, "out of memory");
    ct_status s = ct_metric_base_init(m, &label_sum_ops, 0, NULL, 1, NULL);
    if (s != CT_OK) free(m);
    else *out = m;
    return s;
}

/* --- a loss type and a callback type --------------------------------------------------------------- */

static ct_status my_mse_from_json(const json_t *spec, const char *path, ct_loss **out) {
    static const char *const keys[] = {"type", NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys));
    return ct_mse_loss_create(out);
}

static const ct_callback_ops noop_ops = {.size = sizeof(ct_callback_ops), .name = "Noop"};
static const ct_callback_ops nameless_ops = {.size = sizeof(ct_callback_ops)}; /* no .name */

/* The last callback noop_from_json made: one the library refuses stays the maker's to free (a table
 * that fails its check cannot be trusted to free itself). */
static ct_callback *last_made;

static ct_status noop_from_json(const json_t *spec, const char *path, ct_callback **out) {
    ct_callback *cb = calloc(1, sizeof *cb);
    if (!cb) return ct_error(CT_ERR_NOMEM, "out of memory");
    last_made = cb;
    const char *type = json_string_value(json_object_get(spec, "type"));
    cb->ops = strcmp(type, "nameless") == 0 ? &nameless_ops : &noop_ops;
    *out = cb;
    return CT_OK;
}

static ct_status other_dataset(const json_t *s, const char *p, const char *b, ct_dataset **o) {
    return ramp_from_json(s, p, b, o);
}

static json_t *parse(const char *text) {
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    if (!j) abort();
    return j;
}

/* The same refusals from every register function, through one wrapper per kind. */
typedef ct_status (*reg_fn)(const char *name, int which);
static ct_status reg_layer(const char *n, int w) {
    return ct_register_module_type(n, w ? (ct_module_from_json_fn)ct_linear_from_json : NULL);
}
static ct_status reg_dataset(const char *n, int w) {
    return ct_register_dataset_type(n, w == 1 ? ramp_from_json : w == 2 ? other_dataset : NULL);
}
static ct_status reg_metric(const char *n, int w) { return ct_register_metric_type(n, w ? label_sum_from_json : NULL); }
static ct_status reg_loss(const char *n, int w) { return ct_register_loss_type(n, w ? my_mse_from_json : NULL); }
static ct_status reg_callback(const char *n, int w) { return ct_register_callback_type(n, w ? noop_from_json : NULL); }

static void test_register_refusals(void) {
    static const struct {
        reg_fn fn;
        const char *function, *builtin, *fresh;
    } kinds[] = {{reg_layer, "ct_register_module_type", "linear", "my_linear"},
                 {reg_dataset, "ct_register_dataset_type", "hdf5", "ramp"},
                 {reg_metric, "ct_register_metric_type", "top_3_accuracy", "label_sum"},
                 {reg_loss, "ct_register_loss_type", "mse", "my_mse"},
                 {reg_callback, "ct_register_callback_type", "early_stopping", "noop"}};
    char longname[100];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        CHECK_ERR(kinds[k].fn(NULL, 1), CT_ERR_INVALID_ARG, kinds[k].function, "name is NULL");
        CHECK_ERR(kinds[k].fn("", 1), CT_ERR_INVALID_ARG, kinds[k].function, "name is empty");
        CHECK_ERR(kinds[k].fn(longname, 1), CT_ERR_INVALID_ARG, kinds[k].function, "longer than 63");
        CHECK_ERR(kinds[k].fn(kinds[k].fresh, 0), CT_ERR_INVALID_ARG, kinds[k].function, "constructor is NULL");
        CHECK_ERR(kinds[k].fn(kinds[k].builtin, 1), CT_ERR_INVALID_ARG, kinds[k].builtin, "is a built-in");
        CHECK_OK(kinds[k].fn(kinds[k].fresh, 1));
        CHECK_OK(kinds[k].fn(kinds[k].fresh, 1)); /* the same pair again is harmless */
    }
    CHECK_ERR(reg_dataset("ramp", 2), CT_ERR_INVALID_ARG, "'ramp' is already registered with another constructor");
    CHECK_OK(ct_register_dataset_type("broken", broken_from_json));
    CHECK_OK(ct_register_callback_type("nameless", noop_from_json));
}

static void test_dataset_type(void) {
    json_t *spec = parse("{\"type\": \"ramp\", \"n\": 10, \"classes\": 4, \"limit\": 6}");
    ct_dataset *ds = NULL;
    CHECK_OK(ct_dataset_from_json(spec, "data.train", NULL, &ds));
    CHECK(ds && ct_dataset_length(ds) == 6 && ds->spec.num_classes == 4, "ramp with limit 6: %lld samples",
          ds ? (long long)ct_dataset_length(ds) : -1LL);
    ct_dataset_free(ds);
    json_decref(spec);
    spec = parse("{\"type\": \"ramp\", \"n\": 0}");
    CHECK_ERR(ct_dataset_from_json(spec, "data.train", NULL, &ds), CT_ERR_CONFIG, "data.train: n must be at least 1");
    json_decref(spec);
    spec = parse("{\"type\": \"ramp\", \"n\": 3, \"colour\": 1}");
    CHECK_ERR(ct_dataset_from_json(spec, "data.eval", NULL, &ds), CT_ERR_CONFIG, "data.eval: unknown key 'colour'");
    json_decref(spec);
    spec = parse("{\"type\": \"rmap\"}");
    CHECK_ERR(ct_dataset_from_json(spec, "data.test", NULL, &ds), CT_ERR_CONFIG,
              "data.test.type: unknown dataset type 'rmap', did you mean 'ramp'?");
    json_decref(spec);
    spec = parse("{\"type\": \"broken\"}");
    CHECK_ERR(ct_dataset_from_json(spec, "data.train", NULL, &ds), CT_ERR_INVALID_ARG, "data.train: ",
              "ct_dataset_ops.size is 0");
    CHECK(ds == NULL, "a dataset with a broken table is not returned");
    json_decref(spec);
}

static void test_metric_loss_callback_types(void) {
    json_t *list = parse("[\"accuracy\", \"label_sum\"]");
    ct_metric_set set = {0};
    CHECK_OK(ct_metric_set_from_json(list, "metrics", &set));
    CHECK(set.n == 3 && set.items[2]->ops == &label_sum_ops, "metrics: loss, accuracy, label_sum (%d)", set.n);
    ct_metric_set_free(&set);
    json_decref(list);
    list = parse("[{\"type\": \"label_sum\", \"k\": 2}]");
    CHECK_ERR(ct_metric_set_from_json(list, "metrics", &set), CT_ERR_CONFIG, "metrics[0]: unknown key 'k'");
    json_decref(list);
    list = parse("[\"label_sun\"]");
    CHECK_ERR(ct_metric_set_from_json(list, "metrics", &set), CT_ERR_CONFIG, "did you mean 'label_sum'?");
    json_decref(list);

    json_t *spec = json_string("my_mse");
    ct_loss *loss = NULL;
    CHECK_OK(ct_loss_from_json(spec, "loss", &loss));
    CHECK(loss && strcmp(ct_loss_name(loss), "mse") == 0, "loss: my_mse builds an MSE loss");
    ct_loss_free(loss);
    json_decref(spec);
    spec = parse("{\"type\": \"my_mse\", \"delta\": 1}");
    CHECK_ERR(ct_loss_from_json(spec, "loss", &loss), CT_ERR_CONFIG, "loss: unknown key 'delta'");
    json_decref(spec);
    spec = parse("{\"type\": \"my_mes\"}");
    CHECK_ERR(ct_loss_from_json(spec, "loss", &loss), CT_ERR_CONFIG, "loss.type: unknown loss 'my_mes'",
              "did you mean 'my_mse'?");
    json_decref(spec);

    spec = parse("{\"type\": \"noop\"}");
    ct_callback *cb = NULL;
    CHECK_OK(ct_callback_from_json(spec, "callbacks[0]", &cb));
    CHECK(cb && cb->ops == &noop_ops, "callback: noop");
    free(cb);
    json_decref(spec);
    spec = parse("{\"type\": \"nameless\"}");
    CHECK_ERR(ct_callback_from_json(spec, "callbacks[1]", &cb), CT_ERR_INVALID_ARG, "callbacks[1]: ",
              "ct_callback_ops.name");
    CHECK(cb == NULL, "a refused callback is not handed out");
    free(last_made);
    json_decref(spec);
}

static const char *const RUN_TEXT = "{\n"
                                    "  \"model\": {\"type\": \"mlp\", \"hidden\": [8]},\n"
                                    "  \"training_args\": {\"output_dir\": \"unused\", \"max_steps\": 2}\n"
                                    "}\n";

static void test_run_pieces(void) {
    ct_run_config cfg;
    CHECK_OK(ct_run_config_parse(RUN_TEXT, "run.json", &cfg));
    ct_run r;
    CHECK_OK(ct_run_resolve(&r, &cfg, NULL, 0));
    ct_run_pieces p = {0};
    CHECK_OK(ramp_make(12, 5, &p.train));
    CHECK_OK(ramp_make(6, 5, &p.eval[0]));
    p.n_eval = 1;
    CHECK_OK(ct_run_build_with(&r, CT_RUN_TRAIN, NULL, &p));
    CHECK(p.train == NULL && p.eval[0] == NULL, "pieces: moved into the run");
    CHECK(r.train && r.n_eval == 1 && r.loss, "pieces: the run holds the C datasets and the default loss");
    CHECK(r.model_built && r.model.out_shape.ndim == 1 && r.model.out_shape.dims[0] == 5,
          "pieces: the mlp preset's num_classes comes from the C dataset (%lld)",
          r.model_built ? (long long)r.model.out_shape.dims[0] : -1LL);
    ct_run_free(&r);

    /* label_smoothing_factor (Hugging Face's) reaches the default cross-entropy: its loss on a
     * batch equals a cross-entropy made with that label_smoothing, and differs from a plain one. */
    CHECK_OK(ct_run_config_parse(RUN_TEXT, "run.json", &cfg));
    ct_arg_override smooth = {"label_smoothing_factor", "0.2"};
    CHECK_OK(ct_run_resolve(&r, &cfg, &smooth, 1));
    memset(&p, 0, sizeof p);
    CHECK_OK(ramp_make(12, 5, &p.train));
    CHECK_OK(ct_run_build_with(&r, CT_RUN_TRAIN, NULL, &p));
    if (r.loss) {
        float logits[2 * 5] = {0.3f, -1.2f, 2.0f, 0.1f, -0.4f, 1.5f, 0.2f, -0.7f, 0.9f, -2.0f};
        int64_t labels[2] = {2, 4}, ls[2] = {2, 5}, ys[1] = {2};
        ct_tensor x = ct_tensor_view(logits, CT_F32, CT_CPU, 2, ls), y = ct_tensor_view(labels, CT_I64, CT_CPU, 1, ys);
        ct_loss *want = NULL, *plain = NULL;
        ct_cross_entropy_opts o = ct_cross_entropy_defaults();
        CHECK_OK(ct_cross_entropy_loss_create(&o, &plain));
        o.label_smoothing = 0.2;
        CHECK_OK(ct_cross_entropy_loss_create(&o, &want));
        ct_loss_value got = {0}, w = {0}, p0 = {0};
        CHECK_OK(ct_loss_forward(r.loss, &x, &y, &got));
        if (want && plain) {
            CHECK_OK(ct_loss_forward(want, &x, &y, &w));
            CHECK_OK(ct_loss_forward(plain, &x, &y, &p0));
        }
        CHECK(got.sum == w.sum && got.count == w.count && got.sum != p0.sum,
              "label_smoothing_factor 0.2: loss %.17g, cross-entropy with smoothing 0.2 %.17g, without %.17g", got.sum,
              w.sum, p0.sum);
        ct_loss_free(want);
        ct_loss_free(plain);
    }
    ct_run_free(&r);

    /* A piece the config names too, and a loss beside the config's. */
    const char *both = "{\n"
                       "  \"model\": {\"type\": \"mlp\", \"hidden\": [8]},\n"
                       "  \"data\": {\"train\": {\"type\": \"ramp\", \"n\": 4}},\n"
                       "  \"loss\": \"mse\"\n"
                       "}\n";
    CHECK_OK(ct_run_config_parse(both, "both.json", &cfg));
    CHECK_OK(ct_run_resolve(&r, &cfg, NULL, 0));
    p = (ct_run_pieces){0};
    CHECK_OK(ramp_make(4, 3, &p.train));
    CHECK_ERR(ct_run_build_with(&r, CT_RUN_TRAIN, NULL, &p), CT_ERR_CONFIG,
              "both.json:3:21: data.train: the program gives this dataset too");
    CHECK(p.train == NULL, "pieces: taken (and freed) also on failure");
    CHECK_OK(ct_run_config_parse(both, "both.json", &cfg));
    CHECK_OK(ct_run_resolve(&r, &cfg, NULL, 0));
    p = (ct_run_pieces){0};
    CHECK_OK(ct_mse_loss_create(&p.loss));
    CHECK_ERR(ct_run_build_with(&r, CT_RUN_TRAIN, NULL, &p), CT_ERR_CONFIG, "both.json:4:11: loss: the program gives a loss too");
    /* The JSON names the registered dataset type: the same run without pieces builds. */
    CHECK_OK(ct_run_config_parse(both, "both.json", &cfg));
    CHECK_OK(ct_run_resolve(&r, &cfg, NULL, 0));
    CHECK_OK(ct_run_build(&r, CT_RUN_TRAIN, NULL));
    ct_run_free(&r);
}

int main(void) {
    ct_test_begin("test_registry");
    test_register_refusals();
    test_dataset_type();
    test_metric_loss_callback_types();
    test_run_pieces();
    return ct_test_finish();
}
