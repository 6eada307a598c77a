/* EarlyStoppingCallback (transformers 4.51): after each evaluation, compares
 * metric_for_best_model with the best value so far (state->best_metric, which the Trainer updates
 * AFTER on_evaluate, as HF's _determine_best_metric does); an evaluation that does not beat it by
 * more than the threshold counts towards the patience, one that does resets the count, and when the
 * count reaches the patience training stops.
 *
 * Checks at train begin, as HF's asserts, but as CT_ERR_CONFIG messages: metric_for_best_model must
 * be set and eval_strategy must not be "no". load_best_model_at_end is NOT required: HF 4.51 only
 * warns that the best model will not be loaded at the end, and early stopping works without it
 * because the Trainer tracks best_metric whenever metric_for_best_model is set. We follow HF and
 * print the same warning (once per run, on the world's process zero).
 *
 * Its saved state is HF's ExportableState form: {"args": {"early_stopping_patience",
 * "early_stopping_threshold"}, "attributes": {"early_stopping_patience_counter"}}; loading it
 * restores all three, as HF re-creates the callback from the saved args. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "callbacks/callback.h"
#include "core/json.h"
#include "core/log.h"
#include "core/util.h"

typedef struct early_cb {
    ct_callback base;
    int64_t patience;
    double threshold;
    int64_t counter; /* evaluations in a row without enough improvement */
} early_cb;

static bool greater_is_better(const ct_training_args *args) {
    if (args->greater_is_better >= 0) return args->greater_is_better != 0;
    /* Unset: TrainingArguments.__post_init__'s rule, in case validation did not resolve it. */
    size_t n = strlen(args->metric_for_best_model);
    return !(n >= 4 && strcmp(args->metric_for_best_model + n - 4, "loss") == 0);
}

static ct_status early_train_begin(ct_callback *cb, const ct_callback_args *a) {
    (void)cb;
    if (!a->args->metric_for_best_model[0])
        return ct_error(CT_ERR_CONFIG, "early stopping needs metric_for_best_model (e.g. \"loss\" or \"accuracy\"), "
                                       "but it is not set");
    if (a->args->eval_strategy == CT_INTERVAL_NO)
        return ct_error(CT_ERR_CONFIG, "early stopping needs evaluations, but eval_strategy is \"no\" (use \"steps\" "
                                       "or \"epoch\")");
    if (!a->args->load_best_model_at_end && a->state->is_world_process_zero)
        ct_log_warning("early stopping without load_best_model_at_end: once training is finished, the best model "
                       "will not be loaded automatically");
    return CT_OK;
}

static ct_status early_evaluate(ct_callback *cb, const ct_callback_args *a) {
    early_cb *e = ct_container_of(cb, early_cb, base);
    const char *m = a->args->metric_for_best_model;
    char key[CT_ARGS_NAME_MAX + 8];
    snprintf(key, sizeof key, "%s%s", strncmp(m, "eval_", 5) == 0 ? "" : "eval_", m);
    const json_t *v = a->metrics ? json_object_get(a->metrics, key) : NULL;
    /* HF warns and skips this evaluation when the metric is missing; the Trainer's best-metric
     * tracking reports the missing key as an error right after, so nothing is lost by skipping. */
    if (!v || !json_is_number(v)) return CT_OK;
    double value = json_number_value(v);
    const ct_trainer_state *s = a->state;
    bool improved;
    if (!s->has_best)
        improved = true;
    else if (greater_is_better(a->args))
        improved = value > s->best_metric && fabs(value - s->best_metric) > e->threshold;
    else
        improved = value < s->best_metric && fabs(value - s->best_metric) > e->threshold;
    e->counter = improved ? 0 : e->counter + 1;
    if (e->counter >= e->patience) a->control->should_training_stop = true;
    return CT_OK;
}

static ct_status early_save_state(ct_callback *cb, json_t **out) {
    early_cb *e = ct_container_of(cb, early_cb, base);
    json_t *o = json_pack("{s:{s:I,s:f},s:{s:I}}", "args", "early_stopping_patience", (json_int_t)e->patience,
                          "early_stopping_threshold", e->threshold, "attributes", "early_stopping_patience_counter",
                          (json_int_t)e->counter);
    if (!o) return ct_error(CT_ERR_NOMEM, "out of memory saving the state");
    *out = o;
    return CT_OK;
}

static ct_status early_load_state(ct_callback *cb, const json_t *state) {
    early_cb *e = ct_container_of(cb, early_cb, base);
    if (!json_is_object(state)) return ct_error(CT_ERR_FORMAT, "the saved state must be an object");
    early_cb t = *e;
    const json_t *args = json_object_get(state, "args");
    const json_t *attrs = json_object_get(state, "attributes");
    if (args && !json_is_object(args)) return ct_error(CT_ERR_FORMAT, "args: must be an object");
    if (attrs && !json_is_object(attrs)) return ct_error(CT_ERR_FORMAT, "attributes: must be an object");
    static const char *const arg_keys[] = {"early_stopping_patience", "early_stopping_threshold", NULL};
    static const char *const attr_keys[] = {"early_stopping_patience_counter", NULL};
    ct_status st;
    if (args) {
        if ((st = ct_json_check_keys(args, "args", arg_keys)) != CT_OK ||
            (st = ct_json_int(args, "args", "early_stopping_patience", false, t.patience, &t.patience)) != CT_OK ||
            (st = ct_json_real(args, "args", "early_stopping_threshold", false, t.threshold, &t.threshold)) != CT_OK)
            return st == CT_ERR_CONFIG ? CT_ERR_FORMAT : st;
    }
    if (attrs) {
        if ((st = ct_json_check_keys(attrs, "attributes", attr_keys)) != CT_OK ||
            (st = ct_json_int(attrs, "attributes", "early_stopping_patience_counter", false, t.counter, &t.counter)) !=
                CT_OK)
            return st == CT_ERR_CONFIG ? CT_ERR_FORMAT : st;
    }
    if (t.patience < 1 || t.threshold < 0 || t.counter < 0)
        return ct_error(CT_ERR_FORMAT, "patience %lld, threshold %g, counter %lld: out of range", (long long)t.patience,
                        t.threshold, (long long)t.counter);
    *e = t;
    return CT_OK;
}

static const ct_callback_ops early_ops = {
    .size = sizeof(ct_callback_ops),
    .name = "EarlyStoppingCallback",
    .on_train_begin = early_train_begin,
    .on_evaluate = early_evaluate,
    .save_state = early_save_state,
    .load_state = early_load_state,
};

ct_status ct_early_stopping_callback_create(int64_t patience, double threshold, ct_callback **out) {
    if (patience < 1)
        return ct_error(CT_ERR_INVALID_ARG,
                        "EarlyStoppingCallback: early_stopping_patience must be at least 1, got %lld",
                        (long long)patience);
    if (!(threshold >= 0))
        return ct_error(CT_ERR_INVALID_ARG, "EarlyStoppingCallback: early_stopping_threshold must be >= 0, got %g",
                        threshold);
    early_cb *e = calloc(1, sizeof *e);
    if (!e) return ct_error(CT_ERR_NOMEM, "EarlyStoppingCallback: out of memory");
    e->base.ops = &early_ops;
    e->patience = patience;
    e->threshold = threshold;
    *out = &e->base;
    return CT_OK;
}
