/* ct_trainer_hyperparameter_search (see hp_search.h): Hugging Face's Trainer.hyperparameter_search
 * with Trainer(model_init=...), in this process. Each trial is a fresh trainer over a fresh model
 * from the model_init hook, with the trial's training arguments, in its own directory; the search
 * driver (hp_search.c) samples, scores and writes the results. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "search/hp_search.h"

#define TA_PREFIX "training_args."

typedef struct in_process {
    const ct_trainer_setup *setup;
    const ct_training_args *base;
    const ct_hp_search_opts *opts;
} in_process;

/* The search's keys, before any trial runs: training arguments that exist (not output_dir, which the
 * search sets), and other keys only when a model_init will read them. */
static ct_status check_keys(const ct_hp_space *space, const ct_hp_search_opts *o) {
    for (int i = 0; i < space->n; i++) {
        const char *key = space->dims[i].key;
        if (strncmp(key, TA_PREFIX, strlen(TA_PREFIX)) == 0) {
            const char *name = key + strlen(TA_PREFIX);
            if (strcmp(name, "output_dir") == 0)
                return ct_error(CT_ERR_CONFIG, "hyperparameter search: %s: the search sets it (one directory per trial)",
                                key);
            if (!ct_training_args_find(name)) {
                /* The schema's own message, with its "did you mean". */
                ct_training_args scratch;
                ct_training_args_default(&scratch);
                ct_status s = ct_training_args_set_json(&scratch, name, json_null(), key);
                ct_training_args_free(&scratch);
                if (s == CT_OK) ct_error(CT_ERR_CONFIG, "%s: unknown training argument", key);
                return ct_error_prefix(CT_ERR_CONFIG, "hyperparameter search: ");
            }
        } else if (!o->model_init) {
            return ct_error(CT_ERR_CONFIG,
                            "hyperparameter search: %s is not a training argument (training_args.<name>), and without a "
                            "model_init nothing reads it",
                            key);
        }
    }
    return CT_OK;
}

static ct_status trial_args(const in_process *c, const ct_hp_trial *t, ct_training_args *a) {
    CT_TRY(ct_training_args_copy(a, c->base));
    const char *key;
    const json_t *v;
    ct_status s = CT_OK;
    json_object_foreach(t->params, key, v) {
        if (strncmp(key, TA_PREFIX, strlen(TA_PREFIX)) != 0) continue;
        s = ct_training_args_set_json(a, key + strlen(TA_PREFIX), v, key);
        if (s != CT_OK) break;
    }
    if (s == CT_OK) snprintf(a->output_dir, sizeof a->output_dir, "%s", t->output_dir);
    if (s == CT_OK) s = ct_training_args_validate_at(a, "training_args");
    if (s != CT_OK) ct_training_args_free(a);
    return s;
}

/* Train, evaluate, save: what `ctrainer train` does with a run, minus prediction. *metrics gets the
 * train and eval metrics together. */
static ct_status train_and_evaluate(const in_process *c, ct_trainer *tr, json_t **metrics) {
    ct_train_output out;
    CT_TRY(ct_trainer_train(tr, NULL, &out));
    json_t *m = out.metrics;
    out.metrics = NULL;
    ct_train_output_free(&out);
    ct_status s = ct_trainer_save_model(tr, NULL);
    if (s == CT_OK) s = ct_trainer_save_metrics(tr, "train", m);
    if (s == CT_OK) s = ct_trainer_save_state(tr);
    if (s == CT_OK && c->setup->n_eval > 0) {
        json_t *e = NULL;
        s = ct_trainer_evaluate(tr, NULL, "eval", &e);
        if (s == CT_OK) {
            json_object_set_new(e, "epoch", json_real(tr->state.epoch));
            s = ct_trainer_save_metrics(tr, "eval", e);
            json_object_update(m, e);
        }
        json_decref(e);
    }
    if (s != CT_OK) {
        json_decref(m);
        return s;
    }
    *metrics = m;
    return CT_OK;
}

static ct_status run_trial(void *ctx, ct_hp_trial *t) {
    const in_process *c = ctx;
    ct_training_args a;
    CT_TRY(trial_args(c, t, &a));
    int64_t max_batch = a.per_device_train_batch_size > a.per_device_eval_batch_size ? a.per_device_train_batch_size
                                                                                    : a.per_device_eval_batch_size;
    ct_device device = c->setup->model ? c->setup->model->opts.device : CT_CPU;
    ct_model model;
    memset(&model, 0, sizeof model);
    ct_status s = c->opts->model_init
                      ? c->opts->model_init(c->opts->model_init_ctx, t->params, max_batch, device, &model)
                      : c->setup->make_model(c->setup->make_model_ctx, max_batch, device, &model);
    if (s != CT_OK) {
        ct_training_args_free(&a);
        return ct_error_prefix(s, "model_init: ");
    }
    ct_trainer_setup su = *c->setup;
    su.model = &model;
    su.callbacks = NULL;
    ct_trainer tr;
    s = ct_trainer_init(&tr, c->opts->ops, &a, &su);
    if (s == CT_OK) s = train_and_evaluate(c, &tr, &t->metrics);
    ct_trainer_free(&tr);
    ct_model_free(&model);
    ct_training_args_free(&a);
    return s;
}

ct_status ct_trainer_hyperparameter_search(const ct_trainer_setup *setup, const ct_training_args *base,
                                           const ct_hp_space *space, const ct_hp_search_opts *opts,
                                           ct_hp_results *out) {
    CT_ASSERT(setup && base && space && opts && out);
    memset(out, 0, sizeof *out);
    out->best = -1;
    if (!opts->model_init && !setup->make_model)
        return ct_error(CT_ERR_INVALID_ARG, "hyperparameter search: no model_init (and the setup has no make_model): "
                                            "every trial needs a fresh model");
    if (setup->callbacks && setup->callbacks->n > 0)
        return ct_error(CT_ERR_INVALID_ARG,
                        "hyperparameter search: the setup has %d callbacks, which the first trial's trainer would take "
                        "over; a search's setup must have none",
                        setup->callbacks->n);
    CT_TRY(check_keys(space, opts));
    ct_hp_search_opts o = *opts;
    char metric[CT_ARGS_NAME_MAX + 8];
    if (!o.compute_objective && !o.metric) {
        ct_hp_default_metric(base, metric, sizeof metric);
        o.metric = metric;
    }
    if (!o.compute_objective && setup->n_eval == 0 && strncmp(o.metric, "train_", 6) != 0)
        return ct_error(CT_ERR_INVALID_ARG,
                        "hyperparameter search: the objective '%s' needs an evaluation set, and the setup has none",
                        o.metric);
    if (!o.output_dir) o.output_dir = base->output_dir;
    in_process ctx = {setup, base, &o};
    return ct_hp_search_run(space, &o, run_trial, &ctx, out);
}
