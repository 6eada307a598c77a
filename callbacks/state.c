/* TrainerState: init/free, the interval resolution of Hugging Face's _inner_training_loop, the log
 * history, and trainer_state.json in Hugging Face's exact field names (transformers 4.51
 * TrainerState.save_to_json: every dataclass field, keys sorted, indent 2, a final newline), written
 * to a temporary file and renamed so a crash never leaves half a state behind. TrainerControl's
 * saved form ({"args": {...flags}, "attributes": {}}) lives here too, next to the state it travels
 * with in stateful_callbacks. */
#include "callbacks/state.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/args.h"
#include "core/fs.h"
#include "core/json.h"

ct_status ct_trainer_state_init(ct_trainer_state *s) {
    memset(s, 0, sizeof *s);
    s->is_local_process_zero = true;
    s->is_world_process_zero = true;
    s->log_history = json_array();
    s->stateful_callbacks = json_object();
    if (!s->log_history || !s->stateful_callbacks) {
        ct_trainer_state_free(s);
        return ct_error(CT_ERR_NOMEM, "trainer state: out of memory");
    }
    return CT_OK;
}

void ct_trainer_state_free(ct_trainer_state *s) {
    if (!s) return;
    json_decref(s->log_history);
    json_decref(s->stateful_callbacks);
    s->log_history = NULL;
    s->stateful_callbacks = NULL;
}

/* TrainerState.compute_steps: a value below 1 is a fraction of max_steps, rounded up. The product
 * is taken in double exactly as Python does (int * float), so ceil(10 * 0.3) is 4 here as there. */
static int64_t resolve_steps(double v, int64_t max_steps) {
    if (v < 1) return (int64_t)ceil((double)max_steps * v);
    return (int64_t)v;
}

void ct_trainer_state_resolve(ct_trainer_state *s, const struct ct_training_args *args, int64_t max_steps,
                              int64_t num_train_epochs) {
    s->max_steps = max_steps;
    s->num_train_epochs = num_train_epochs;
    s->train_batch_size = args->per_device_train_batch_size;
    s->logging_steps = resolve_steps(args->logging_steps, max_steps);
    s->save_steps = resolve_steps(args->save_steps, max_steps);
    if (args->eval_steps != 0)
        s->eval_steps = resolve_steps(args->eval_steps, max_steps);
    else if (args->eval_strategy == CT_INTERVAL_STEPS)
        /* TrainingArguments.__post_init__ fills an unset eval_steps from logging_steps, but only
         * for the "steps" strategy ... */
        s->eval_steps = resolve_steps(args->logging_steps, max_steps);
    else
        /* ... otherwise it stays None and the state keeps its dataclass default, which is what
         * Hugging Face's trainer_state.json then shows. */
        s->eval_steps = 500;
}

ct_status ct_trainer_state_log(ct_trainer_state *s, const json_t *entry) {
    CT_ASSERT(s->log_history && entry);
    if (!json_is_object(entry)) return ct_error(CT_ERR_INVALID_ARG, "trainer state: a log entry must be an object");
    json_t *copy = json_deep_copy(entry);
    if (!copy || json_array_append_new(s->log_history, copy) != 0)
        return ct_error(CT_ERR_NOMEM, "trainer state: out of memory appending to log_history");
    return CT_OK;
}

/* json_object_set_new that reports a failed allocation (a NULL value included). */
static bool put(json_t *o, const char *key, json_t *v) { return v && json_object_set_new(o, key, v) == 0; }

ct_status ct_trainer_state_to_json(const ct_trainer_state *s, json_t **out) {
    json_t *o = json_object();
    json_t *hist = s->log_history ? json_deep_copy(s->log_history) : json_array();
    json_t *cbs = s->stateful_callbacks ? json_deep_copy(s->stateful_callbacks) : json_object();
    bool ok = o && hist && cbs;
    ok = ok && put(o, "best_global_step", s->best_global_step > 0 ? json_integer(s->best_global_step) : json_null());
    ok = ok && put(o, "best_metric", s->has_best ? json_real(s->best_metric) : json_null());
    ok = ok && put(o, "best_model_checkpoint",
                   s->best_model_checkpoint[0] ? json_string(s->best_model_checkpoint) : json_null());
    ok = ok && put(o, "epoch", json_real(s->epoch));
    ok = ok && put(o, "eval_steps", json_integer(s->eval_steps));
    ok = ok && put(o, "global_step", json_integer(s->global_step));
    ok = ok && put(o, "is_hyper_param_search", json_boolean(s->is_hyper_param_search));
    ok = ok && put(o, "is_local_process_zero", json_boolean(s->is_local_process_zero));
    ok = ok && put(o, "is_world_process_zero", json_boolean(s->is_world_process_zero));
    ok = ok && put(o, "log_history", hist);
    hist = NULL;
    ok = ok && put(o, "logging_steps", json_integer(s->logging_steps));
    ok = ok && put(o, "max_steps", json_integer(s->max_steps));
    ok = ok && put(o, "num_input_tokens_seen", json_integer(s->num_input_tokens_seen));
    ok = ok && put(o, "num_train_epochs", json_integer(s->num_train_epochs));
    ok = ok && put(o, "save_steps", json_integer(s->save_steps));
    ok = ok && put(o, "stateful_callbacks", cbs);
    cbs = NULL;
    ok = ok && put(o, "total_flos", json_real(s->total_flos));
    ok = ok && put(o, "train_batch_size", s->train_batch_size > 0 ? json_integer(s->train_batch_size) : json_null());
    /* Hyperparameter search is not a ctrainer feature; the keys are there because HF writes them. */
    ok = ok && put(o, "trial_name", json_null());
    ok = ok && put(o, "trial_params", json_null());
    json_decref(hist);
    json_decref(cbs);
    if (!ok) {
        json_decref(o);
        return ct_error(CT_ERR_NOMEM, "trainer state: out of memory building its JSON");
    }
    *out = o;
    return CT_OK;
}

/* --- reading ---------------------------------------------------------------------------------------- */

static ct_status bad_field(const char *path, const char *key, const char *want) {
    return ct_error(CT_ERR_FORMAT, "%s: '%s' must be %s", path, key, want);
}

/* Each reader: an absent key (or null where HF allows None) leaves *out at the default the caller
 * put there, as TrainerState's dataclass defaults do. */
static ct_status get_int(const json_t *o, const char *path, const char *key, bool nullable, int64_t *out) {
    const json_t *v = json_object_get(o, key);
    if (!v || (nullable && json_is_null(v))) return CT_OK;
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return CT_OK;
    }
    /* Python writes 3.0 for an int-valued float field; accept whole numbers. */
    if (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v) && fabs(json_real_value(v)) < 9e15) {
        *out = (int64_t)json_real_value(v);
        return CT_OK;
    }
    return bad_field(path, key, nullable ? "an integer or null" : "an integer");
}

static ct_status get_real(const json_t *o, const char *path, const char *key, bool nullable, double *out,
                          bool *present) {
    const json_t *v = json_object_get(o, key);
    if (present) *present = false;
    if (!v || (nullable && json_is_null(v))) return CT_OK;
    if (!json_is_number(v)) return bad_field(path, key, nullable ? "a number or null" : "a number");
    *out = json_number_value(v);
    if (present) *present = true;
    return CT_OK;
}

static ct_status get_bool(const json_t *o, const char *path, const char *key, bool *out) {
    const json_t *v = json_object_get(o, key);
    if (!v) return CT_OK;
    if (!json_is_boolean(v)) return bad_field(path, key, "true or false");
    *out = json_is_true(v);
    return CT_OK;
}

static ct_status read_fields(ct_trainer_state *t, const json_t *obj, const char *path) {
    CT_TRY(get_real(obj, path, "epoch", true, &t->epoch, NULL));
    CT_TRY(get_int(obj, path, "global_step", false, &t->global_step));
    CT_TRY(get_int(obj, path, "max_steps", false, &t->max_steps));
    CT_TRY(get_int(obj, path, "logging_steps", false, &t->logging_steps));
    CT_TRY(get_int(obj, path, "eval_steps", true, &t->eval_steps));
    CT_TRY(get_int(obj, path, "save_steps", false, &t->save_steps));
    CT_TRY(get_int(obj, path, "train_batch_size", true, &t->train_batch_size));
    CT_TRY(get_int(obj, path, "num_train_epochs", false, &t->num_train_epochs));
    CT_TRY(get_int(obj, path, "num_input_tokens_seen", false, &t->num_input_tokens_seen));
    CT_TRY(get_real(obj, path, "total_flos", false, &t->total_flos, NULL));
    CT_TRY(get_real(obj, path, "best_metric", true, &t->best_metric, &t->has_best));
    CT_TRY(get_int(obj, path, "best_global_step", true, &t->best_global_step));
    CT_TRY(get_bool(obj, path, "is_local_process_zero", &t->is_local_process_zero));
    CT_TRY(get_bool(obj, path, "is_world_process_zero", &t->is_world_process_zero));
    CT_TRY(get_bool(obj, path, "is_hyper_param_search", &t->is_hyper_param_search));

    const json_t *ckpt = json_object_get(obj, "best_model_checkpoint");
    if (ckpt && !json_is_null(ckpt)) {
        if (!json_is_string(ckpt)) return bad_field(path, "best_model_checkpoint", "a string or null");
        if (strlen(json_string_value(ckpt)) >= sizeof t->best_model_checkpoint)
            return ct_error(CT_ERR_FORMAT, "%s: best_model_checkpoint is longer than %zu characters", path,
                            sizeof t->best_model_checkpoint - 1);
        snprintf(t->best_model_checkpoint, sizeof t->best_model_checkpoint, "%s", json_string_value(ckpt));
    }

    const json_t *hist = json_object_get(obj, "log_history");
    if (hist && !json_is_null(hist)) {
        if (!json_is_array(hist)) return bad_field(path, "log_history", "a list");
        size_t i;
        const json_t *e;
        json_array_foreach(hist, i, e) {
            if (!json_is_object(e))
                return ct_error(CT_ERR_FORMAT, "%s: log_history[%zu] must be an object", path, i);
        }
        json_t *copy = json_deep_copy(hist);
        if (!copy) return ct_error(CT_ERR_NOMEM, "%s: out of memory reading log_history", path);
        json_decref(t->log_history);
        t->log_history = copy;
    }

    const json_t *cbs = json_object_get(obj, "stateful_callbacks");
    if (cbs && !json_is_null(cbs)) {
        if (!json_is_object(cbs)) return bad_field(path, "stateful_callbacks", "an object");
        json_t *copy = json_deep_copy(cbs);
        if (!copy) return ct_error(CT_ERR_NOMEM, "%s: out of memory reading stateful_callbacks", path);
        json_decref(t->stateful_callbacks);
        t->stateful_callbacks = copy;
    }
    return CT_OK;
}

ct_status ct_trainer_state_from_json(ct_trainer_state *s, const json_t *obj, const char *path) {
    if (!json_is_object(obj)) return ct_error(CT_ERR_FORMAT, "%s: a trainer state must be a JSON object", path);
    ct_trainer_state t;
    CT_TRY(ct_trainer_state_init(&t));
    /* TrainerState's dataclass defaults for keys the file lacks. */
    t.logging_steps = t.eval_steps = t.save_steps = 500;
    ct_status st = read_fields(&t, obj, path);
    if (st != CT_OK) {
        ct_trainer_state_free(&t);
        return st;
    }
    ct_trainer_state_free(s);
    *s = t;
    return CT_OK;
}

/* --- files -------------------------------------------------------------------------------------------- */

ct_status ct_trainer_state_save(const ct_trainer_state *s, const char *file) {
    json_t *o;
    CT_TRY(ct_trainer_state_to_json(s, &o));
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
    json_decref(o);
    if (!text) return ct_error(CT_ERR_NOMEM, "trainer state: out of memory serialising %s", file);

    /* atomically and durably: a resume after a crash reads the old state or the whole new one */
    ct_atomic_file a;
    ct_status st = ct_atomic_file_open(&a, file);
    if (st == CT_OK) st = ct_atomic_file_write(&a, text, strlen(text));
    if (st == CT_OK) st = ct_atomic_file_write(&a, "\n", 1);
    if (st == CT_OK) st = ct_atomic_file_commit(&a);
    if (st != CT_OK) {
        ct_atomic_file_discard(&a);
        st = ct_error_prefix(st, "trainer state: ");
    }
    free(text);
    return st;
}

ct_status ct_trainer_state_load(ct_trainer_state *s, const char *file) {
    FILE *f;
    CT_TRY(ct_fopen_read(file, &f));
    json_error_t err;
    json_t *root = json_loadf(f, 0, &err);
    fclose(f);
    if (!root) return ct_error(CT_ERR_FORMAT, "%s:%d:%d: %s", file, err.line, err.column, err.text);
    ct_status st = ct_trainer_state_from_json(s, root, file);
    json_decref(root);
    return st;
}

/* --- TrainerControl ------------------------------------------------------------------------------- */

static const char *const control_flags[] = {"should_training_stop", "should_epoch_stop", "should_save",
                                            "should_evaluate", "should_log", NULL};

static bool *control_flag(ct_trainer_control *c, int i) {
    bool *flags[] = {&c->should_training_stop, &c->should_epoch_stop, &c->should_save, &c->should_evaluate,
                     &c->should_log};
    return flags[i];
}

ct_status ct_trainer_control_save_state(const ct_trainer_control *c, json_t **out) {
    json_t *o = json_object(), *args = json_object(), *attrs = json_object();
    bool ok = o && args && attrs;
    for (int i = 0; ok && control_flags[i]; i++)
        ok = put(args, control_flags[i], json_boolean(*control_flag((ct_trainer_control *)c, i)));
    if (ok) {
        ok = put(o, "args", args);
        args = NULL;
    }
    if (ok) {
        ok = put(o, "attributes", attrs);
        attrs = NULL;
    }
    json_decref(args);
    json_decref(attrs);
    if (!ok) {
        json_decref(o);
        return ct_error(CT_ERR_NOMEM, "TrainerControl: out of memory saving its state");
    }
    *out = o;
    return CT_OK;
}

ct_status ct_trainer_control_load_state(ct_trainer_control *c, const json_t *state, const char *path) {
    if (!json_is_object(state)) return ct_error(CT_ERR_FORMAT, "%s: TrainerControl state must be an object", path);
    const json_t *args = json_object_get(state, "args");
    if (!args) return CT_OK;
    if (!json_is_object(args)) return ct_error(CT_ERR_FORMAT, "%s.args: must be an object", path);
    ct_trainer_control t = *c;
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)args, key, v) {
        int i = 0;
        while (control_flags[i] && strcmp(control_flags[i], key) != 0) i++;
        if (!control_flags[i]) {
            /* HF would fail constructing TrainerControl(**args) with an unknown keyword. */
            const char *hint = ct_closest_word(key, control_flags);
            if (hint)
                return ct_error(CT_ERR_FORMAT, "%s.args: unknown TrainerControl flag '%s', did you mean '%s'?", path,
                                key, hint);
            return ct_error(CT_ERR_FORMAT, "%s.args: unknown TrainerControl flag '%s'", path, key);
        }
        if (!json_is_boolean(v)) return ct_error(CT_ERR_FORMAT, "%s.args.%s: must be true or false", path, key);
        *control_flag(&t, i) = json_is_true(v);
    }
    *c = t;
    return CT_OK;
}
