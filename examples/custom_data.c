/* A C application that adds a dataset type and a metric of its own and names both in a run config.
 *
 * Registered by name before the config is read, they join the JSON as the built-in types do:
 *
 *   "data": {"train": {"type": "spirals", "n": 2000, "seed": 1, "limit": 1500},
 *            "eval":  {"type": "spirals", "n": 600, "seed": 2}},
 *   "metrics": ["accuracy", "confidence"]
 *
 * "spirals" (two interleaved spirals in the plane, a classic a linear model cannot separate) is read
 * by spirals_from_json, which checks its own keys; "limit" and "transforms" are applied by the library
 * and never reach it. Its samples' spec gives num_classes, so the config's "mlp" needs none. The
 * metric "confidence" (the mean softmax probability of the predicted class) is a ct_metric with its
 * own ct_metric_ops: its state is sums and counts, so it merges exactly across batches and processes
 * and works under eval_async. Everything else is the library's (ct_run_prepare, the stock Trainer).
 *
 *   custom_data CONFIG [--set dotted.key=JSON ...]
 *
 * It prints the evaluation's accuracy and confidence, and "custom_data ok" when the model learned
 * the spirals (accuracy above 0.8). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/rng.h"
#include "data/dataset_json.h"
#include "eval/metric.h"
#include "trainer/run.h"

#define PI 3.14159265358979323846 /* M_PI is POSIX, not C11 */

/* --- the dataset type ---------------------------------------------------------------------------- */

static ct_status spirals_from_json(const json_t *spec, const char *path, const char *base_dir, ct_dataset **out) {
    (void)base_dir; /* no files */
    static const char *const keys[] = {"type", "n", "seed", "noise", NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys));
    int64_t n, seed;
    double noise;
    CT_TRY(ct_json_int(spec, path, "n", true, 0, &n));
    CT_TRY(ct_json_int(spec, path, "seed", false, 0, &seed));
    CT_TRY(ct_json_real(spec, path, "noise", false, 0.05, &noise));
    /* Starting with the path lets the run config point at the line. */
    if (n < 2) return ct_error(CT_ERR_CONFIG, "%s.n: %lld; expected at least 2 samples", path, (long long)n);
    if (!(noise >= 0)) return ct_error(CT_ERR_CONFIG, "%s.noise: %g; expected a number >= 0", path, noise);
    ct_tensor x, y;
    CT_TRY(ct_tensor_alloc(&x, CT_F32, CT_CPU, 2, (int64_t[]){n, 2}));
    ct_status s = ct_tensor_alloc(&y, CT_I64, CT_CPU, 1, (int64_t[]){n});
    if (s != CT_OK) {
        ct_tensor_free(&x);
        return s;
    }
    ct_rng rng;
    ct_rng_init(&rng, (uint64_t)seed, 0, 0);
    for (int64_t i = 0; i < n; i++) {
        int64_t label = i % 2;
        double t = 0.5 + 3.0 * ct_rng_uniform(&rng); /* angle along the arm, in radians / pi */
        double a = t * PI + (double)label * PI;
        ((float *)x.data)[2 * i] = (float)(t / 3.5 * cos(a) + noise * ct_rng_normal(&rng));
        ((float *)x.data)[2 * i + 1] = (float)(t / 3.5 * sin(a) + noise * ct_rng_normal(&rng));
        ((int64_t *)y.data)[i] = label;
    }
    s = ct_tensor_dataset_create(&x, &y, 2, out); /* copies the tensors */
    ct_tensor_free(&x);
    ct_tensor_free(&y);
    return s;
}

/* --- the metric ---------------------------------------------------------------------------------- */

enum { CONF_SUM = 0 };  /* sums[0]: the predicted class's probabilities */
enum { CONF_ROWS = 0 }; /* counts[0]: the real rows */

static ct_status confidence_update(ct_metric *m, const ct_eval_batch *b) {
    int64_t rows, classes;
    CT_TRY(ct_metric_check_classification(b, &rows, &classes));
    for (int64_t i = 0; i < rows; i++) {
        if (!ct_metric_row_real(b, i)) continue; /* padding rows of the last batch */
        double top = -INFINITY, z = 0;
        for (int64_t c = 0; c < classes; c++) top = fmax(top, ct_tensor_get(b->outputs, i * classes + c));
        for (int64_t c = 0; c < classes; c++) z += exp(ct_tensor_get(b->outputs, i * classes + c) - top);
        m->sums[CONF_SUM] += 1.0 / z; /* softmax of the largest logit */
        m->counts[CONF_ROWS]++;
    }
    return CT_OK;
}

static ct_status confidence_compute(const ct_metric *m, const char *prefix, json_t *out) {
    if (m->counts[CONF_ROWS] == 0) return CT_OK;
    return ct_metric_put(out, prefix, "confidence", m->sums[CONF_SUM] / (double)m->counts[CONF_ROWS]);
}

static const ct_metric_ops confidence_ops = {.size = sizeof(ct_metric_ops), .name = "confidence",
                                             .update = confidence_update, .compute = confidence_compute};

static ct_status confidence_from_json(const json_t *spec, const char *path, ct_metric **out) {
    if (json_is_object(spec)) { /* {"type": "confidence"}: no settings */
        static const char *const keys[] = {"type", NULL};
        CT_TRY(ct_json_check_keys(spec, path, keys));
    }
    ct_metric *m = calloc(1, sizeof *m);
    if (!m) return ct_error(CT_ERR_NOMEM, "%s: out of memory", path);
    ct_status s = ct_metric_base_init(m, &confidence_ops, 1, NULL, 1, NULL); /* reduced with SUM */
    if (s != CT_OK) {
        free(m);
        return s;
    }
    *out = m;
    return CT_OK;
}

/* --- the program --------------------------------------------------------------------------------- */

static ct_status run(ct_run *r, ct_trainer *t, double *acc, double *conf) {
    ct_trainer_setup setup = ct_run_setup(r);
    CT_TRY(ct_trainer_init(t, NULL, &r->args, &setup));
    ct_train_output out;
    CT_TRY(ct_trainer_train(t, NULL, &out));
    ct_train_output_free(&out);
    json_t *metrics;
    CT_TRY(ct_trainer_evaluate(t, NULL, "eval", &metrics));
    ct_trainer_log_metrics(t, "eval", metrics);
    *acc = json_number_value(json_object_get(metrics, "eval_accuracy"));
    *conf = json_number_value(json_object_get(metrics, "eval_confidence"));
    json_decref(metrics);
    return CT_OK;
}

int main(int argc, char **argv) {
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: custom_data CONFIG [--set dotted.key=JSON ...]\n");
        return 2;
    }
    /* Before the config is read: its "data" and "metrics" name these types. */
    ct_status s = ct_register_dataset_type("spirals", spirals_from_json);
    if (s == CT_OK) s = ct_register_metric_type("confidence", confidence_from_json);
    ct_run_config config = {0};
    if (s == CT_OK) s = ct_run_config_load(argv[1], &config);
    for (int i = 2; s == CT_OK && i < argc; i++) {
        if (strcmp(argv[i], "--set") != 0 || i + 1 == argc) {
            s = ct_error(CT_ERR_CONFIG, "unexpected argument '%s' (only --set dotted.key=JSON)", argv[i]);
            break;
        }
        s = ct_run_config_set(&config, argv[++i]);
    }
    ct_run r;
    if (s == CT_OK) s = ct_run_prepare(&r, &config, NULL, 0, CT_RUN_TRAIN); /* takes config */
    else ct_run_config_free(&config);
    if (s != CT_OK) {
        fprintf(stderr, "custom_data: %s\n", ct_last_error());
        return s == CT_ERR_CONFIG || s == CT_ERR_INVALID_ARG ? 2 : 1;
    }
    ct_trainer t = {0};
    double acc = NAN, conf = NAN;
    s = run(&r, &t, &acc, &conf);
    if (s != CT_OK) fprintf(stderr, "custom_data: %s\n", ct_last_error());
    else printf("[custom_data] eval accuracy %.4f, confidence %.4f\n", acc, conf);
    ct_trainer_free(&t);
    ct_run_free(&r);
    if (s == CT_OK && acc > 0.8 && conf > 0.5 && conf <= 1.0) printf("custom_data ok\n");
    return s == CT_OK ? 0 : s == CT_ERR_CONFIG ? 2 : 1;
}
