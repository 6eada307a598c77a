/* A C application that subclasses the Trainer: a class-weighted loss, an L2 penalty added on top of
 * the default compute_loss ("super"), and a callback of its own.
 *
 * This is Hugging Face's "CustomTrainer" example in C. The class-weighted cross-entropy needs no
 * hook: it is the trainer's loss (ct_trainer_setup.loss), which the default compute_loss uses. The
 * application embeds ct_trainer as the first member of its own struct and overrides one hook
 * (compute_loss) in a const ops table, leaving every other member NULL (the default); the override
 * calls the default first, so it keeps everything the default does (padding rows, devices), and
 * adds a penalty by the contract trainer.h states for compute_loss. A callback reports each
 * evaluation and stops training once the accuracy reaches a target, showing how callbacks steer the
 * loop through TrainerControl. Models, data and training arguments still come from a JSON run config.
 *
 *   weighted_trainer CONFIG [--weight CLASS=W ...] [--l2 LAMBDA] [--stop-at ACCURACY] [--set dotted.key=JSON ...]
 *
 * Fashion-MNIST's hardest class is 6 (shirt); by default it weighs 2 and the others 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/ops.h"
#include "core/ops/ops_optim.h"
#include "core/util.h"
#include "trainer/run.h"

#define MAX_CLASSES 1024

/* --- the subclass ------------------------------------------------------------------------------------ */

typedef struct weighted_trainer {
    ct_trainer base; /* first: the Trainer hands hooks a ct_trainer *, container_of gives this back */
    ct_loss *weighted;
    double l2; /* the penalty's lambda: loss + l2/2 * |parameters|^2 */
} weighted_trainer;

/* "super" (the default: forward, the trainer's loss over the batch's real rows, its gradient), then
 * the penalty while training (dloss != NULL). The Trainer's step loss is (sum of the micro-batches'
 * sums) / (sum of their counts), over every micro-batch and process of the step, and it scales the
 * gradients by 1 / that count: so l2/2 |p|^2 x this batch's count added to the sum, and
 * l2 x count x p added to the parameter gradients, give exactly mean + l2/2 |p|^2 and its gradient,
 * whatever the accumulation or the number of processes. Both go through ops, which run where the
 * model lives (no host access to device memory). */
static ct_status weighted_compute_loss(ct_trainer *t, const ct_batch *b, ct_loss_value *loss, ct_tensor *outputs,
                                       ct_tensor *dloss) {
    weighted_trainer *w = ct_container_of(t, weighted_trainer, base);
    CT_TRY(ct_trainer_default_compute_loss(t, b, loss, outputs, dloss));
    if (!dloss || w->l2 == 0) return CT_OK;
    ct_param_store *ps = &t->model->params;
    double norm = ct_op_l2_norm(&ps->values);
    loss->sum += 0.5 * w->l2 * norm * norm * loss->count;
    ct_op_axpy(w->l2 * loss->count, &ps->values, &ps->grads);
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
    double stop_at, l2;
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
        } else if (strcmp(argv[i], "--l2") == 0 && i + 1 < argc) {
            o->l2 = atof(argv[++i]);
        } else if (strcmp(argv[i], "--stop-at") == 0 && i + 1 < argc) {
            o->stop_at = atof(argv[++i]);
        } else if (strcmp(argv[i], "--set") == 0 && i + 1 < argc && o->n_sets < 64) {
            o->sets[o->n_sets++] = argv[++i];
        } else if (argv[i][0] != '-' && !o->config) {
            o->config = argv[i];
        } else {
            fprintf(stderr, "usage: weighted_trainer CONFIG [--weight CLASS=W ...] [--l2 LAMBDA] [--stop-at ACCURACY] "
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
    w->l2 = o->l2;
    ct_trainer_setup setup = ct_run_setup(r);
    setup.loss = w->weighted; /* the default compute_loss takes the trainer's loss */
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
