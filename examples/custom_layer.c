/* A C application that adds a layer type of its own and trains a JSON-configured model that uses it.
 *
 * The layer (swish_layer.c: Swish with a learnable slope per feature) is a struct embedding
 * ct_module plus a const ct_module_ops table. Registering its JSON reader under a type name makes
 * the name usable wherever a run config names layers, here inside a "sequential":
 *
 *   {"type": "sequential", "layers": [{"type": "flatten"}, {"type": "linear", "out_features": 64},
 *                                     {"type": "swish", "beta": 1.0}, {"type": "linear", "out_features": 10}]}
 *
 * The rest is the library's: data, the Trainer (no ops overridden), evaluation, the saved model.
 * Registration must come before the config's model is built; the type then also loads back from
 * the model.h5 the run saves (its spec is stored with the weights) in any program that registers it.
 *
 *   custom_layer CONFIG [--set dotted.key=JSON ...]
 *
 * It ends by printing the evaluation's accuracy and how far training moved the learned slopes. The
 * layer's gradients are checked against finite differences by tests/unit/test_custom_layer.c. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/layers.h"
#include "model/params.h"
#include "swish_layer.h"
#include "trainer/run.h"

/* Mean, min and max of every "<layer>.beta" of the model, and how many there are. */
static int64_t beta_stats(const ct_model *m, double *mean, double *lo, double *hi) {
    int64_t n = 0;
    double sum = 0;
    *lo = INFINITY;
    *hi = -INFINITY;
    for (int i = 0; i < m->params.count; i++) {
        const ct_param *p = &m->params.items[i];
        size_t len = strlen(p->name);
        if (len < 5 || strcmp(p->name + len - 5, ".beta") != 0) continue;
        for (int64_t k = 0; k < p->numel; k++) {
            double v = ct_tensor_get(p->value, k);
            sum += v;
            *lo = fmin(*lo, v);
            *hi = fmax(*hi, v);
            n++;
        }
    }
    *mean = n ? sum / (double)n : NAN;
    return n;
}

static ct_status run(ct_run *r, ct_trainer *t) {
    ct_trainer_setup setup = ct_run_setup(r);
    CT_TRY(ct_trainer_init(t, NULL, &r->args, &setup)); /* NULL ops: the stock Trainer */
    ct_train_output out;
    CT_TRY(ct_trainer_train(t, NULL, &out));
    ct_trainer_log_metrics(t, "train", out.metrics);
    ct_train_output_free(&out);
    CT_TRY(ct_trainer_save_model(t, NULL));
    json_t *metrics;
    CT_TRY(ct_trainer_evaluate(t, NULL, "eval", &metrics));
    ct_trainer_log_metrics(t, "eval", metrics);
    double acc = json_number_value(json_object_get(metrics, "eval_accuracy"));
    ct_status s = ct_trainer_save_metrics(t, "eval", metrics);
    json_decref(metrics);
    CT_TRY(s);
    double mean, lo, hi;
    int64_t n = beta_stats(&r->model, &mean, &lo, &hi);
    if (n == 0) return ct_error(CT_ERR_CONFIG, "the model has no swish layer");
    /* every slope started at the config's beta; training moves them */
    printf("[custom_layer] eval accuracy %.4f; %lld learned slopes: mean %.4f, min %.4f, max %.4f\n", acc,
           (long long)n, mean, lo, hi);
    return CT_OK;
}

int main(int argc, char **argv) {
    const char *config_path = NULL;
    const char *sets[64];
    int n_sets = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--set") == 0 && i + 1 < argc && n_sets < 64) {
            sets[n_sets++] = argv[++i];
        } else if (argv[i][0] != '-' && !config_path) {
            config_path = argv[i];
        } else {
            fprintf(stderr, "usage: custom_layer CONFIG [--set dotted.key=JSON ...]\n");
            return 2;
        }
    }
    if (!config_path) {
        fprintf(stderr, "custom_layer: no config given\n");
        return 2;
    }
    /* before any model is built from JSON */
    ct_status s = ct_register_module_type("swish", swish_from_json);
    ct_run_config config = {0};
    if (s == CT_OK) s = ct_run_config_load(config_path, &config);
    for (int i = 0; s == CT_OK && i < n_sets; i++) s = ct_run_config_set(&config, sets[i]);
    if (s != CT_OK) {
        fprintf(stderr, "custom_layer: %s\n", ct_last_error());
        if (config.root) ct_run_config_free(&config);
        return 2;
    }
    ct_run r;
    s = ct_run_prepare(&r, &config, NULL, 0, CT_RUN_TRAIN);
    if (s != CT_OK) {
        fprintf(stderr, "custom_layer: %s\n", ct_last_error());
        return 2;
    }
    ct_trainer t = {0};
    s = run(&r, &t);
    if (s != CT_OK) fprintf(stderr, "custom_layer: %s\n", ct_last_error());
    ct_trainer_free(&t);
    ct_run_free(&r);
    return s == CT_OK ? 0 : s == CT_ERR_CONFIG ? 2 : 1;
}
