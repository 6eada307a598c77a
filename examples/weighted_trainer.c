/* A C application that subclasses the Trainer: a class-weighted loss and a callback of its own.
 *
 * This is Hugging Face's "CustomTrainer" example in C. The application embeds ct_trainer as the
 * first member of its own struct, overrides one hook (compute_loss) in a const ops table, and
 * leaves every other member NULL, which means the default. It adds a callback that reports each
 * evaluation and stops training once the accuracy reaches a target, showing how callbacks steer the
 * loop through TrainerControl. Models, data and training arguments still come from a JSON run config.
 *
 *   weighted_trainer CONFIG [--weight CLASS=W ...] [--stop-at ACCURACY] [--set dotted.key=JSON ...]
 *
 * Fashion-MNIST's hardest class is 6 (shirt); by default it weighs 2 and the others 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "trainer/run.h"

#define MAX_CLASSES 1024

/* --- the subclass ------------------------------------------------------------------------------------ */

typedef struct weighted_trainer {
    ct_trainer base; /* first: the Trainer hands hooks a ct_trainer *, container_of gives this back */
    ct_loss *weighted;
} weighted_trainer;

/* Cross-entropy with class weights. Evaluation batches may end with padding rows (mask 0) on
 * processes whose share of the data ran out: the loss is taken over the leading b->valid rows.
 * The count a weighted cross-entropy returns is the sum of the weights, PyTorch's denominator, so
 * the Trainer's division by the step's total count gives exactly PyTorch's weighted mean. */
static ct_status weighted_compute_loss(ct_trainer *t, const ct_batch *b, ct_loss_value *loss, ct_tensor *outputs,
                                       ct_tensor *dloss) {
    weighted_trainer *w = ct_container_of(t, weighted_trainer, base);
    CT_TRY(ct_model_forward(t->model, &b->features, outputs));
    ct_tensor out = ct_tensor_rows(outputs, 0, b->valid), labels = ct_tensor_rows(&b->labels, 0, b->valid);
    CT_TRY(ct_loss_forward(w->weighted, &out, &labels, loss));
    if (dloss) CT_TRY(ct_loss_backward(w->weighted, outputs, &b->labels, 1.0, dloss));
    return CT_OK;
}

static const ct_trainer_ops weighted_ops = {
    .size = sizeof(ct_trainer_ops),
    .compute_loss = weighted_compute_loss,
};

/* --- the callback --------------------------------------------------------------------------------------- */

typedef struct target_callback {
    ct_callback base;
    double target;
    int evaluations;
} target_callback;

static ct_status target_on_evaluate(ct_callback *cb, const ct_callback_args *a) {
    target_callback *c = ct_container_of(cb, target_callback, base);
    c->evaluations++;
    const json_t *acc = json_object_get(a->metrics, "eval_accuracy");
    if (!json_is_number(acc)) return CT_OK;
    printf("[weighted_trainer] evaluation %d at step %lld: accuracy %.4f\n", c->evaluations,
           (long long)a->state->global_step, json_number_value(acc));
    if (c->target > 0 && json_number_value(acc) >= c->target) {
        printf("[weighted_trainer] reached the target accuracy %.4f: stopping\n", c->target);
        a->control->should_training_stop = true;
    }
    return CT_OK;
}

static ct_status target_on_train_end(ct_callback *cb, const ct_callback_args *a) {
    target_callback *c = ct_container_of(cb, target_callback, base);
    printf("[weighted_trainer] training ended at step %lld of %lld after %d evaluations\n",
           (long long)a->state->global_step, (long long)a->state->max_steps, c->evaluations);
    return CT_OK;
}

static const ct_callback_ops target_ops = {
    .size = sizeof(ct_callback_ops),
    .name = "target_accuracy",
    .on_evaluate = target_on_evaluate,
    .on_train_end = target_on_train_end,
};

/* --- the program ------------------------------------------------------------------------------------ */

typedef struct options {
    const char *config;
    double weights[MAX_CLASSES];
    double stop_at;
    const char *sets[64];
    int n_sets;
} options;

static int parse(int argc, char **argv, options *o) {
    for (int i = 0; i < MAX_CLASSES; i++) o->weights[i] = 1.0;
    o->weights[6] = 2.0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--weight") == 0 && i + 1 < argc) {
            int k;
            double w;
            if (sscanf(argv[++i], "%d=%lf", &k, &w) != 2 || k < 0 || k >= MAX_CLASSES || w < 0) {
                fprintf(stderr, "weighted_trainer: --weight expects CLASS=WEIGHT, got '%s'\n", argv[i]);
                return 2;
            }
            o->weights[k] = w;
        } else if (strcmp(argv[i], "--stop-at") == 0 && i + 1 < argc) {
            o->stop_at = atof(argv[++i]);
        } else if (strcmp(argv[i], "--set") == 0 && i + 1 < argc && o->n_sets < 64) {
            o->sets[o->n_sets++] = argv[++i];
        } else if (argv[i][0] != '-' && !o->config) {
            o->config = argv[i];
        } else {
            fprintf(stderr, "usage: weighted_trainer CONFIG [--weight CLASS=W ...] [--stop-at ACCURACY] "
                            "[--set dotted.key=JSON ...]\n");
            return 2;
        }
    }
    if (!o->config) {
        fprintf(stderr, "weighted_trainer: no config given\n");
        return 2;
    }
    return -1;
}

static ct_status run(const options *o, ct_run *r, weighted_trainer *w) {
    int64_t classes = r->train->spec.num_classes;
    if (classes <= 0 || classes > MAX_CLASSES)
        return ct_error(CT_ERR_CONFIG, "the training data has %lld classes; a class-weighted loss needs 1 to %d",
                        (long long)classes, MAX_CLASSES);
    ct_cross_entropy_opts ce = ct_cross_entropy_defaults();
    ce.weight = o->weights;
    ce.n_weight = classes;
    CT_TRY(ct_cross_entropy_loss_create(&ce, &w->weighted));
    ct_trainer_setup setup = ct_run_setup(r);
    CT_TRY(ct_trainer_init(&w->base, &weighted_ops, &r->args, &setup));
    target_callback *cb = calloc(1, sizeof *cb);
    if (!cb) return ct_error(CT_ERR_NOMEM, "out of memory");
    cb->base.ops = &target_ops;
    cb->target = o->stop_at;
    CT_TRY(ct_trainer_add_callback(&w->base, &cb->base));
    ct_train_output out;
    CT_TRY(ct_trainer_train(&w->base, NULL, &out));
    ct_trainer_log_metrics(&w->base, "train", out.metrics);
    ct_train_output_free(&out);
    CT_TRY(ct_trainer_save_model(&w->base, NULL));
    CT_TRY(ct_trainer_save_state(&w->base));
    json_t *metrics;
    CT_TRY(ct_trainer_evaluate(&w->base, NULL, "eval", &metrics));
    ct_trainer_log_metrics(&w->base, "eval", metrics);
    ct_status s = ct_trainer_save_metrics(&w->base, "eval", metrics);
    json_decref(metrics);
    return s;
}

int main(int argc, char **argv) {
    options o = {0};
    int code = parse(argc, argv, &o);
    if (code >= 0) return code;
    ct_run_config config = {0};
    ct_status s = ct_run_config_load(o.config, &config);
    for (int i = 0; s == CT_OK && i < o.n_sets; i++) s = ct_run_config_set(&config, o.sets[i]);
    if (s != CT_OK) {
        fprintf(stderr, "weighted_trainer: %s\n", ct_last_error());
        if (config.root) ct_run_config_free(&config);
        return 2;
    }
    ct_run r;
    s = ct_run_prepare(&r, &config, NULL, 0, CT_RUN_TRAIN);
    if (s != CT_OK) {
        fprintf(stderr, "weighted_trainer: %s\n", ct_last_error());
        return 2;
    }
    weighted_trainer w = {0};
    s = run(&o, &r, &w);
    if (s != CT_OK) fprintf(stderr, "weighted_trainer: %s\n", ct_last_error());
    ct_trainer_free(&w.base);
    ct_loss_free(w.weighted);
    ct_run_free(&r);
    return s == CT_OK ? 0 : s == CT_ERR_CONFIG ? 2 : 1;
}
