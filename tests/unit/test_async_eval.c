/* Asynchronous evaluation (eval_async) against synchronous evaluation, on small in-memory data:
 *  - every asynchronous result equals the synchronous evaluation of the same step, bit for bit (all
 *    metrics and intervals), the log_history entries sit at the snapshot's step, and training itself
 *    is untouched (same losses, same final weights);
 *  - continuous evaluation and the waiting policies ("latest", "skip", "wait"): each logged result equals a
 *    synchronous evaluation of the weights recorded at its step, steps strictly increase;
 *  - best-model bookkeeping (metric_for_best_model, load_best_model_at_end, save_strategy best from
 *    the snapshot): best metric, best step, checkpoint and the final weights equal the synchronous
 *    run's; early stopping stops the run (no earlier than the synchronous run), after the same
 *    evaluations, and its best is the best of what it evaluated;
 *  - two evaluation sets: an entry and an on_evaluate per set, as synchronous evaluation makes them;
 *  - compute_metrics runs on the training thread with the snapshot's outputs: same values;
 *  - metric objects made in C (ct_trainer_setup.make_metrics): the evaluator gets its own copies (one
 *    more call of the factory, other objects) and logs the synchronous values;
 *  - errors: no make_model, an overridden prediction_step, a failing compute_metrics (named with
 *    the snapshot's step);
 *  - a stop (SIGTERM) while an evaluation runs and another waits: the checkpoint records both (the
 *    earlier step's weights in a file of their own), and the run resumed from it logs the
 *    uninterrupted run's evaluations and training entries; a resumed run without eval_async says it
 *    does not redo them.
 *
 * Why one file of over 600 lines: every check compares an asynchronous run with the synchronous
 * run of the same arguments, through one run helper. */
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/rng.h"
#include "core/util.h"
#include "model/layers.h"
#include "testlib.h"
#include "trainer_fixture.h"
#include "trainer/trainer.h"

static const char *tmp_root; /* the fixture's temporary root */
static int run_counter;

/* --- data, model, replica factory ------------------------------------------------------------- */

static ct_dataset *make_data(int64_t n, int64_t dim, int64_t classes, uint64_t seed) {
    return ct_fixture_dataset(
        &(ct_fixture_data){.kind = CT_FIXTURE_SIGNAL, .n = n, .dim = dim, .classes = classes, .seed = seed});
}

enum { DIM = 12, CLASSES = 4 };

static ct_status build_model(int64_t max_batch, ct_device dev, ct_model *m) {
    ct_fixture_mlp o = {.dim = DIM, .classes = CLASSES, .hidden = {24}, .dropout = 0.1, .device = dev,
                        .max_batch = max_batch, .seed = 3};
    return ct_fixture_mlp_build(&o, m);
}

static ct_status make_replica(void *ctx, int64_t max_batch, ct_device dev, ct_model *out) {
    (void)ctx;
    return build_model(max_batch, dev, out);
}

/* An evaluation set whose batches wait while `eval_held` is set (at most a minute, so that a broken
 * run fails instead of hanging): the test holds an evaluation running until the checkpoint that must
 * record it is written. */
static atomic_bool eval_held;

typedef struct gated_dataset {
    ct_dataset base;
    ct_dataset *inner;
} gated_dataset;

static int64_t gated_length(ct_dataset *ds) { return ct_dataset_length(((gated_dataset *)ds)->inner); }

static ct_status gated_get_batch(ct_dataset *ds, const int64_t *idx, int64_t n, const ct_fetch_ctx *ctx,
                                 ct_tensor *features, ct_tensor *labels) {
    for (int ms = 0; atomic_load(&eval_held) && ms < 60000; ms++) usleep(1000);
    return ct_dataset_get_batch(((gated_dataset *)ds)->inner, idx, n, ctx, features, labels);
}

static void gated_destroy(ct_dataset *ds) { free(ds); } /* the inner set is the test's */

static const ct_dataset_ops gated_ops = {.size = sizeof(ct_dataset_ops), .name = "gated", .length = gated_length,
                                         .get_batch = gated_get_batch, .destroy = gated_destroy};

static ct_dataset *gated(ct_dataset *inner) {
    gated_dataset *g = calloc(1, sizeof *g);
    ct_dataset_base_init(&g->base, &gated_ops);
    g->base.spec = inner->spec;
    g->inner = inner;
    return &g->base;
}

/* --- a recording trainer ----------------------------------------------------------------------- */

#define MAX_STEPS 64

typedef struct rec_trainer {
    ct_trainer base;
    int64_t n_values;
    float *weights[MAX_STEPS + 1]; /* the weights at the end of each step (0: at the start) */
    bool fail_metrics;
    unsigned step_sleep_us; /* slows training down so that evaluations overlap several steps */
    int64_t stop_at;        /* > 0: SIGTERM at the end of this step; the held evaluation goes on at its save */
    int evaluations;        /* on_evaluate calls */
} rec_trainer;

static ct_status record_step(ct_callback *cb, const ct_callback_args *a) {
    (void)cb;
    rec_trainer *r = ct_container_of(a->trainer, rec_trainer, base);
    int64_t g = a->state->global_step;
    if (g > MAX_STEPS) return CT_OK;
    const ct_tensor *v = &a->trainer->model->params.values;
    r->n_values = ct_tensor_numel(v);
    free(r->weights[g]);
    r->weights[g] = malloc((size_t)r->n_values * sizeof(float));
    memcpy(r->weights[g], v->data, (size_t)r->n_values * sizeof(float));
    if (r->step_sleep_us) usleep(r->step_sleep_us);
    if (r->stop_at > 0 && g == r->stop_at) raise(SIGTERM);
    return CT_OK;
}

static ct_status release_held(ct_callback *cb, const ct_callback_args *a) {
    (void)cb;
    if (a->state->global_step == ct_container_of(a->trainer, rec_trainer, base)->stop_at)
        atomic_store(&eval_held, false);
    return CT_OK;
}

static ct_status count_evaluation(ct_callback *cb, const ct_callback_args *a) {
    (void)cb;
    ct_container_of(a->trainer, rec_trainer, base)->evaluations++;
    return CT_OK;
}

static const ct_callback_ops recorder_ops = {.size = sizeof(ct_callback_ops), .name = "Recorder",
                                             .on_train_begin = record_step, .on_step_end = record_step,
                                             .on_save = release_held, .on_evaluate = count_evaluation};

/* Hugging Face's compute_metrics: the mean of the first logit and the number of rows. */
static ct_status my_compute_metrics(ct_trainer *t, const ct_prediction_output *p, const char *prefix,
                                    json_t *metrics) {
    rec_trainer *r = ct_container_of(t, rec_trainer, base);
    if (r->fail_metrics) return ct_error(CT_ERR_INVALID_ARG, "deliberate failure");
    int64_t n = p->predictions.shape[0], c = p->predictions.shape[1];
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += ((const float *)p->predictions.data)[i * c];
    char key[160];
    snprintf(key, sizeof key, "%s_first_logit_mean", prefix);
    json_object_set_new(metrics, key, json_real(sum / (double)n));
    snprintf(key, sizeof key, "%s_rows", prefix);
    json_object_set_new(metrics, key, json_integer(n));
    return CT_OK;
}

static ct_status my_prediction_step(ct_trainer *t, const ct_batch *b, bool plo, ct_loss_value *loss,
                                    ct_tensor *outputs) {
    return ct_trainer_default_prediction_step(t, b, plo, loss, outputs);
}

/* An override whose eval_loss differs from the default's (every loss doubled): the evaluator's
 * replica could not run it, so eval_async must refuse it rather than report the default's loss. */
static ct_status doubled_compute_loss(ct_trainer *t, const ct_batch *b, ct_loss_value *loss, ct_tensor *outputs,
                                      ct_tensor *dloss) {
    CT_TRY(ct_trainer_default_compute_loss(t, b, loss, outputs, dloss));
    loss->sum *= 2;
    return CT_OK;
}

typedef struct run_opts {
    bool async, compute_metrics, best, early_stopping, no_factory, override_prediction, override_loss, fail_metrics;
    ct_interval eval_strategy, save_strategy;
    const char *policy, *eval_device;
    int64_t eval_steps, max_steps, stop_at;
    unsigned step_sleep_us;
    const char *resume, *output_dir; /* resume_from_checkpoint; an output_dir of an earlier run */
    ct_dataset *eval_data;           /* instead of eval_set */
    bool c_metrics;                  /* make_metrics adds label_mean */
    bool two_sets;                   /* eval sets "a" (eval_set) and "b" (eval_set_b) */
} run_opts;

typedef struct run_out {
    ct_status status;
    char error[1024];
    json_t *history;  /* log_history */
    json_t *state;    /* trainer_state as JSON */
    float *final;
    int64_t n;
    rec_trainer *rec; /* kept for the recorded weights (freed by free_out) */
    char output_dir[512];
} run_out;

/* A metric of the test's own (not a built-in): the mean label of the real rows. make_metrics counts
 * its calls and remembers the objects it made, to show that the evaluator gets objects of its own. */
static ct_status label_mean_update(ct_metric *m, const ct_eval_batch *b) {
    for (int64_t i = 0; i < b->labels->shape[0]; i++) {
        if (!ct_metric_row_real(b, i)) continue;
        m->sums[0] += (double)ct_metric_label(b->labels, i);
        m->counts[0]++;
    }
    return CT_OK;
}

static ct_status label_mean_compute(const ct_metric *m, const char *prefix, json_t *out) {
    return m->counts[0] ? ct_metric_put(out, prefix, "label_mean", m->sums[0] / (double)m->counts[0]) : CT_OK;
}

static const ct_metric_ops label_mean_ops = {.size = sizeof(ct_metric_ops), .name = "label_mean",
                                             .update = label_mean_update, .compute = label_mean_compute};
static int metric_factory_calls;
static ct_metric *metric_made[4];

static ct_status make_metrics(void *ctx, ct_metric_set *set) {
    (void)ctx;
    ct_metric *m = calloc(1, sizeof *m);
    if (!m) return ct_error(CT_ERR_NOMEM, "out of memory");
    ct_status s = ct_metric_base_init(m, &label_mean_ops, 1, NULL, 1, NULL);
    if (s != CT_OK) {
        free(m);
        return s;
    }
    if (metric_factory_calls < 4) metric_made[metric_factory_calls] = m;
    metric_factory_calls++;
    return ct_metric_set_add(set, m);
}

static ct_dataset *train_set, *eval_set, *eval_set_b;

static void run(const run_opts *o, run_out *out) {
    memset(out, 0, sizeof *out);
    ct_model model;
    if (build_model(32, CT_CPU, &model) != CT_OK) abort();
    ct_training_args a;
    ct_training_args_default(&a);
    if (o->output_dir) snprintf(out->output_dir, sizeof out->output_dir, "%s", o->output_dir);
    else snprintf(out->output_dir, sizeof out->output_dir, "%s/run%d", tmp_root, run_counter++);
    snprintf(a.output_dir, sizeof a.output_dir, "%s", out->output_dir);
    a.disable_tqdm = true;
    a.logging_strategy = CT_INTERVAL_STEPS;
    a.logging_steps = 1;
    a.learning_rate = 3e-2;
    a.per_device_train_batch_size = 16;
    a.per_device_eval_batch_size = 32;
    a.max_steps = o->max_steps;
    a.eval_strategy = o->eval_strategy;
    a.eval_steps = (double)o->eval_steps;
    a.save_strategy = o->save_strategy;
    a.save_steps = (double)(o->eval_steps ? o->eval_steps : 1);
    a.eval_bootstrap_resamples = 100;
    a.eval_async = o->async;
    if (o->policy) snprintf(a.eval_async_policy, sizeof a.eval_async_policy, "%s", o->policy);
    if (o->eval_device) snprintf(a.eval_device, sizeof a.eval_device, "%s", o->eval_device);
    if (o->best) {
        snprintf(a.metric_for_best_model, sizeof a.metric_for_best_model, "accuracy");
        a.load_best_model_at_end = true;
    }
    if (o->early_stopping) snprintf(a.metric_for_best_model, sizeof a.metric_for_best_model, "loss");
    json_t *metrics = json_pack("[s, s, s]", "accuracy", "f1_macro", "auroc");
    rec_trainer *rec = calloc(1, sizeof *rec);
    rec->fail_metrics = o->fail_metrics;
    rec->step_sleep_us = o->step_sleep_us;
    rec->stop_at = o->stop_at;
    out->rec = rec;
    ct_trainer_ops ops = {.size = sizeof ops};
    if (o->compute_metrics) ops.compute_metrics = my_compute_metrics;
    if (o->override_prediction) ops.prediction_step = my_prediction_step;
    if (o->override_loss) ops.compute_loss = doubled_compute_loss;
    ct_callback *recorder = calloc(1, sizeof *recorder);
    recorder->ops = &recorder_ops;
    ct_callback_list cbs = {0};
    ct_callback_list_add(&cbs, recorder);
    if (o->early_stopping) {
        ct_callback *es;
        /* an evaluation counts as better only by more than 0.05: the loss's steps shrink as the
         * learning rate decays, so the run stops early whatever the seed (without a threshold a
         * seed whose loss fell at every evaluation ran all 60 steps) */
        json_t *spec = json_pack("{s:s, s:i, s:f}", "type", "early_stopping", "early_stopping_patience", 1,
                                 "early_stopping_threshold", 0.05);
        if (ct_callback_from_json(spec, "callbacks[0]", &es) != CT_OK) abort();
        json_decref(spec);
        ct_callback_list_add(&cbs, es);
    }
    ct_trainer_setup setup = {.model = &model, .train_dataset = train_set, .n_eval = 1,
                              .eval_datasets = {o->eval_data ? o->eval_data : eval_set}, .metrics = metrics,
                              .callbacks = &cbs};
    if (o->two_sets) {
        setup.n_eval = 2;
        setup.eval_datasets[1] = eval_set_b;
        setup.eval_names[0] = "a";
        setup.eval_names[1] = "b";
    }
    if (!o->no_factory) setup.make_model = make_replica;
    if (o->c_metrics) setup.make_metrics = make_metrics;
    out->status = ct_training_args_validate(&a);
    if (out->status == CT_OK) out->status = ct_trainer_init(&rec->base, &ops, &a, &setup);
    if (out->status == CT_OK) {
        ct_train_output to;
        out->status = ct_trainer_train(&rec->base, o->resume, &to);
        if (out->status == CT_OK) ct_train_output_free(&to);
        else snprintf(out->error, sizeof out->error, "%s", ct_last_error());
        out->history = json_deep_copy(rec->base.state.log_history);
        ct_trainer_state_to_json(&rec->base.state, &out->state);
        ct_trainer_free(&rec->base);
    } else {
        snprintf(out->error, sizeof out->error, "%s", ct_last_error());
    }
    ct_callback_list_free(&cbs); /* empty after a move into the trainer, but it still holds its array */
    out->n = ct_tensor_numel(&model.params.values);
    out->final = malloc((size_t)out->n * sizeof(float));
    memcpy(out->final, model.params.values.data, (size_t)out->n * sizeof(float));
    ct_model_free(&model);
    ct_training_args_free(&a);
    json_decref(metrics);
}

static void free_out(run_out *o) {
    json_decref(o->history);
    json_decref(o->state);
    free(o->final);
    for (int i = 0; o->rec && i <= MAX_STEPS; i++) free(o->rec->weights[i]);
    free(o->rec);
}

/* --- comparisons -------------------------------------------------------------------------------- */

static bool speed_key(const char *k) {
    size_t n = strlen(k);
    return (n > 8 && strcmp(k + n - 8, "_runtime") == 0) || strstr(k, "_per_second") != NULL;
}

/* The entries of h holding `loss_key`, without timing keys, as a new array. */
static json_t *entries_with(const json_t *h, const char *loss_key) {
    json_t *out = json_array();
    size_t i;
    const json_t *e;
    json_array_foreach(h, i, e) {
        if (!json_object_get(e, loss_key)) continue;
        json_t *c = json_object();
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)e, k, v) if (!speed_key(k)) json_object_set(c, k, (json_t *)v);
        json_array_append_new(out, c);
    }
    return out;
}

static json_t *eval_entries(const json_t *h) { return entries_with(h, "eval_loss"); }

static json_t *train_entries(const json_t *h) {
    json_t *out = json_array();
    size_t i;
    const json_t *e;
    json_array_foreach(h, i, e) if (json_object_get(e, "loss")) json_array_append(out, (json_t *)e);
    return out;
}

static void check_same_json(const char *what, const json_t *a, const json_t *b) {
    bool same = json_equal((json_t *)a, (json_t *)b);
    if (!same) {
        char *sa = json_dumps(a, JSON_COMPACT | JSON_REAL_PRECISION(17)),
             *sb = json_dumps(b, JSON_COMPACT | JSON_REAL_PRECISION(17));
        CHECK(false, "%s differ:\n  %.1500s\n  %.1500s", what, sa ? sa : "?", sb ? sb : "?");
        free(sa);
        free(sb);
    }
}

/* Each asynchronous result equals a synchronous evaluation of the weights recorded at its step. */
static int check_against_recorded(const char *what, const run_out *r, bool compute_metrics) {
    json_t *ev = eval_entries(r->history);
    ct_model model;
    if (build_model(32, CT_CPU, &model) != CT_OK) abort();
    ct_training_args a;
    ct_training_args_default(&a);
    snprintf(a.output_dir, sizeof a.output_dir, "%s/check%d", tmp_root, run_counter++);
    a.disable_tqdm = true;
    a.per_device_eval_batch_size = 32;
    a.eval_bootstrap_resamples = 100;
    json_t *metrics = json_pack("[s, s, s]", "accuracy", "f1_macro", "auroc");
    rec_trainer checker = {0};
    ct_trainer_ops ops = {.size = sizeof ops, .compute_metrics = compute_metrics ? my_compute_metrics : NULL};
    ct_trainer_setup setup = {.model = &model, .n_eval = 1, .eval_datasets = {eval_set}, .metrics = metrics};
    CHECK_OK(ct_trainer_init(&checker.base, &ops, &a, &setup));
    int64_t last = -1;
    size_t i;
    json_t *e;
    int n = 0;
    json_array_foreach(ev, i, e) {
        int64_t step = json_integer_value(json_object_get(e, "step"));
        CHECK(step > last, "%s: evaluations at increasing steps (%lld after %lld)", what, (long long)step, (long long)last);
        last = step;
        if (step < 0 || step > MAX_STEPS || !r->rec->weights[step]) {
            CHECK(false, "%s: no recorded weights for step %lld", what, (long long)step);
            continue;
        }
        memcpy(model.params.values.data, r->rec->weights[step], (size_t)r->rec->n_values * sizeof(float));
        json_t *m;
        CHECK_OK(ct_trainer_evaluate(&checker.base, NULL, "eval", &m));
        json_t *want = json_object();
        const char *k;
        json_t *v;
        json_object_foreach(m, k, v) if (!speed_key(k)) json_object_set(want, k, v);
        json_t *got = json_deep_copy(e);
        json_object_del(got, "step");
        json_object_del(got, "epoch");
        char label[160];
        snprintf(label, sizeof label, "%s: result of step %lld vs a synchronous evaluation of its weights", what,
                 (long long)step);
        check_same_json(label, got, want);
        json_decref(got);
        json_decref(want);
        json_decref(m);
        n++;
    }
    ct_trainer_free(&checker.base);
    ct_model_free(&model);
    ct_training_args_free(&a);
    json_decref(metrics);
    json_decref(ev);
    return n;
}

static int64_t state_int(const run_out *r, const char *key) {
    return json_integer_value(json_object_get(r->state, key));
}

/* --- the cases ---------------------------------------------------------------------------------- */

static void test_equals_sync(bool compute_metrics) {
    run_opts o = {.eval_strategy = CT_INTERVAL_STEPS, .save_strategy = CT_INTERVAL_NO, .eval_steps = 5,
                  .max_steps = 30, .compute_metrics = compute_metrics, .policy = "wait"};
    run_out sync, async;
    run(&o, &sync);
    o.async = true;
    run(&o, &async);
    const char *what = compute_metrics ? "with compute_metrics" : "steps";
    CHECK(sync.status == CT_OK && async.status == CT_OK, "%s: runs (%s%s)", what, sync.error, async.error);
    json_t *es = eval_entries(sync.history), *ea = eval_entries(async.history);
    CHECK(json_array_size(es) == 6, "%s: 6 synchronous evaluations, got %zu", what, json_array_size(es));
    check_same_json(compute_metrics ? "compute_metrics: eval entries" : "eval entries", ea, es);
    json_t *ts = train_entries(sync.history), *ta = train_entries(async.history);
    check_same_json("training log entries", ta, ts);
    CHECK(sync.n == async.n && memcmp(sync.final, async.final, (size_t)sync.n * sizeof(float)) == 0,
          "%s: training is untouched by asynchronous evaluation (final weights)", what);
    if (compute_metrics)
        CHECK(json_object_get(json_array_get(ea, 0), "eval_first_logit_mean") != NULL, "compute_metrics values logged");
    json_decref(es);
    json_decref(ea);
    json_decref(ts);
    json_decref(ta);
    free_out(&sync);
    free_out(&async);
}

/* Two evaluation sets: each logs an entry of its own and fires on_evaluate, as synchronous
 * evaluation (and Hugging Face's, one evaluate() per set) does, with the same values. */
static void test_two_sets(void) {
    run_opts o = {.eval_strategy = CT_INTERVAL_STEPS, .save_strategy = CT_INTERVAL_NO, .eval_steps = 10,
                  .max_steps = 20, .policy = "wait", .two_sets = true};
    run_out sync, async;
    run(&o, &sync);
    o.async = true;
    run(&o, &async);
    CHECK(sync.status == CT_OK && async.status == CT_OK, "two sets: runs (%s%s)", sync.error, async.error);
    for (int set = 0; set < 2; set++) {
        const char *key = set ? "eval_b_loss" : "eval_a_loss";
        json_t *es = entries_with(sync.history, key), *ea = entries_with(async.history, key);
        CHECK(json_array_size(es) == 2, "two sets: 2 synchronous entries with %s, got %zu", key, json_array_size(es));
        CHECK(json_object_get(json_array_get(es, 0), set ? "eval_a_loss" : "eval_b_loss") == NULL,
              "two sets: a synchronous entry holds one set's metrics");
        check_same_json(set ? "two sets: the entries of set b" : "two sets: the entries of set a", ea, es);
        json_decref(es);
        json_decref(ea);
    }
    CHECK(sync.rec->evaluations == 4 && async.rec->evaluations == 4,
          "two sets: on_evaluate once per set and evaluation (synchronous %d, asynchronous %d, want 4)",
          sync.rec->evaluations, async.rec->evaluations);
    free_out(&sync);
    free_out(&async);
}

/* A metric made in C reaches the evaluator as its own copy, and its values are the synchronous ones. */
static void test_c_metrics(void) {
    run_opts o = {.eval_strategy = CT_INTERVAL_STEPS, .save_strategy = CT_INTERVAL_NO, .eval_steps = 10,
                  .max_steps = 20, .policy = "wait", .c_metrics = true};
    run_out sync, async;
    metric_factory_calls = 0;
    run(&o, &sync);
    CHECK(metric_factory_calls == 1, "make_metrics: called once without eval_async, got %d", metric_factory_calls);
    metric_factory_calls = 0;
    o.async = true;
    run(&o, &async);
    CHECK(sync.status == CT_OK && async.status == CT_OK, "make_metrics: runs (%s%s)", sync.error, async.error);
    CHECK(metric_factory_calls == 2 && metric_made[0] != metric_made[1],
          "make_metrics: the evaluator gets objects of its own (calls %d)", metric_factory_calls);
    json_t *es = eval_entries(sync.history), *ea = eval_entries(async.history);
    CHECK(json_array_size(es) == 2 && json_array_size(ea) == 2, "make_metrics: 2 evaluations each (%zu, %zu)",
          json_array_size(es), json_array_size(ea));
    double mean = json_real_value(json_object_get(json_array_get(ea, 0), "eval_label_mean"));
    CHECK(mean > 0.5 && mean < (double)CLASSES - 1, "make_metrics: eval_label_mean logged by the evaluator (%g)", mean);
    check_same_json("make_metrics: eval entries", ea, es);
    json_decref(es);
    json_decref(ea);
    free_out(&sync);
    free_out(&async);
}

static void test_continuous(const char *policy) {
    run_opts o = {.async = true, .eval_strategy = CT_INTERVAL_CONTINUOUS, .save_strategy = CT_INTERVAL_NO,
                  .max_steps = 60, .policy = policy, .compute_metrics = true, .step_sleep_us = 4000};
    run_out r;
    run(&o, &r);
    char what[64];
    snprintf(what, sizeof what, "continuous (%s)", policy);
    CHECK(r.status == CT_OK, "%s: runs (%s)", what, r.error);
    int n = check_against_recorded(what, &r, true);
    CHECK(n >= 2, "%s: %d evaluations", what, n);
    free_out(&r);

    /* Steps, due every step while each evaluation takes several: some are replaced or skipped. */
    run_opts o2 = {.async = true, .eval_strategy = CT_INTERVAL_STEPS, .save_strategy = CT_INTERVAL_NO,
                   .eval_steps = 1, .max_steps = 60, .policy = policy, .step_sleep_us = 4000};
    run(&o2, &r);
    snprintf(what, sizeof what, "every step (%s)", policy);
    CHECK(r.status == CT_OK, "%s: runs (%s)", what, r.error);
    n = check_against_recorded(what, &r, false);
    /* Due every step: "wait" runs every one; "latest" and "skip" drop those that find the evaluator
     * busy, how many depends on timing (on an idle machine none may be dropped). */
    if (strcmp(policy, "wait") == 0) CHECK(n == 60, "%s: %d evaluations, want all 60", what, n);
    else CHECK(n >= 2 && n <= 60, "%s: %d evaluations", what, n);
    free_out(&r);
}

static void test_best(void) {
    run_opts o = {.eval_strategy = CT_INTERVAL_STEPS, .save_strategy = CT_INTERVAL_BEST, .eval_steps = 4,
                  .max_steps = 32, .best = true, .policy = "wait"};
    run_out sync, async;
    run(&o, &sync);
    o.async = true;
    run(&o, &async);
    CHECK(sync.status == CT_OK && async.status == CT_OK, "best: runs (%s%s)", sync.error, async.error);
    /* Hugging Face records best_global_step only under save_strategy steps and epoch */
    CHECK(json_is_null(json_object_get(sync.state, "best_global_step")) &&
              json_is_null(json_object_get(async.state, "best_global_step")),
          "best: best_global_step %lld vs %lld, both should be null under save_strategy 'best'",
          (long long)state_int(&async, "best_global_step"), (long long)state_int(&sync, "best_global_step"));
    CHECK(json_equal(json_object_get(sync.state, "best_metric"), json_object_get(async.state, "best_metric")),
          "best: best_metric equal");
    const char *bs = json_string_value(json_object_get(sync.state, "best_model_checkpoint"));
    const char *ba = json_string_value(json_object_get(async.state, "best_model_checkpoint"));
    CHECK(bs && ba && strcmp(strrchr(bs, '/'), strrchr(ba, '/')) == 0, "best: checkpoint %s vs %s", ba ? ba : "-",
          bs ? bs : "-");
    struct stat st;
    char path[700];
    snprintf(path, sizeof path, "%s/model.h5", ba ? ba : "");
    CHECK(ba && stat(path, &st) == 0, "best: the asynchronous best checkpoint holds model.h5");
    /* load_best_model_at_end: the final weights are the best step's, so both runs end equal. */
    CHECK(sync.n == async.n && memcmp(sync.final, async.final, (size_t)sync.n * sizeof(float)) == 0,
          "best: final weights (the best model loaded at the end) equal");
    json_t *es = eval_entries(sync.history), *ea = eval_entries(async.history);
    check_same_json("best: eval entries", ea, es);
    json_decref(es);
    json_decref(ea);
    free_out(&sync);
    free_out(&async);
}

static void test_early_stopping(void) {
    run_opts o = {.eval_strategy = CT_INTERVAL_STEPS, .save_strategy = CT_INTERVAL_NO, .eval_steps = 2,
                  .max_steps = 60, .early_stopping = true, .policy = "wait"};
    run_out sync, async;
    run(&o, &sync);
    o.async = true;
    run(&o, &async);
    CHECK(sync.status == CT_OK && async.status == CT_OK, "early stopping: runs (%s%s)", sync.error, async.error);
    int64_t ss = state_int(&sync, "global_step"), sa = state_int(&async, "global_step");
    CHECK(ss < 60, "early stopping: the synchronous run stops early (step %lld)", (long long)ss);
    CHECK(sa < 60 && sa >= ss, "early stopping: the asynchronous run stops at %lld, not before %lld", (long long)sa,
          (long long)ss);
    /* The asynchronous run's evaluations are the synchronous run's, then perhaps a few more (those
     * submitted before the stopping result arrived, reported at the end); its best is the best of
     * all of them, the first lowest loss. */
    json_t *es = eval_entries(sync.history), *ea = eval_entries(async.history);
    double best = INFINITY;
    for (size_t i = 0; i < json_array_size(ea); i++) {
        double l = json_number_value(json_object_get(json_array_get(ea, i), "eval_loss"));
        if (l < best) best = l;
    }
    double got = json_number_value(json_object_get(async.state, "best_metric"));
    CHECK(json_is_number(json_object_get(async.state, "best_metric")) && got == best,
          "early stopping: best_metric %.17g, the history's lowest loss is %.17g", got, best);
    /* save_strategy "no": Hugging Face leaves best_global_step unset */
    CHECK(json_is_null(json_object_get(async.state, "best_global_step")),
          "early stopping: best_global_step %lld under save_strategy 'no'",
          (long long)state_int(&async, "best_global_step"));
    bool prefix = json_array_size(ea) >= json_array_size(es);
    for (size_t i = 0; prefix && i < json_array_size(es); i++)
        prefix = json_equal(json_array_get(es, i), json_array_get(ea, i));
    CHECK(prefix, "early stopping: the synchronous evaluations come first, unchanged");
    json_decref(es);
    json_decref(ea);
    free_out(&sync);
    free_out(&async);
}

static void test_errors(void) {
    run_opts o = {.async = true, .eval_strategy = CT_INTERVAL_STEPS, .save_strategy = CT_INTERVAL_NO,
                  .eval_steps = 5, .max_steps = 10, .no_factory = true};
    run_out r;
    run(&o, &r);
    CHECK(r.status == CT_ERR_CONFIG && strstr(r.error, "make_model"), "no factory: %s", r.error);
    free_out(&r);
    o.no_factory = false;
    o.eval_device = "cuda:99"; /* no machine has it */
    run(&o, &r);
    CHECK(r.status == CT_ERR_DEVICE && strstr(r.error, "training_args.eval_device: device cuda:99"),
          "eval_device cuda:99: %s", r.error);
    free_out(&r);
    o.eval_device = NULL;
    o.override_prediction = true;
    run(&o, &r);
    CHECK(r.status == CT_ERR_CONFIG && strstr(r.error, "prediction_step"), "prediction_step override: %s", r.error);
    free_out(&r);
    o.override_prediction = false;
    o.override_loss = true;
    run(&o, &r);
    CHECK(r.status == CT_ERR_CONFIG && strstr(r.error, "overrides compute_loss") &&
              strstr(r.error, "evaluate synchronously"),
          "compute_loss override: %s", r.error);
    free_out(&r);
    /* Synchronously the override is honoured: the gradients (and so the weights) are the default's,
     * every eval_loss exactly twice the default run's. */
    o.async = false;
    run_out plain;
    run(&o, &r);
    o.override_loss = false;
    run(&o, &plain);
    CHECK(r.status == CT_OK && plain.status == CT_OK, "compute_loss override, synchronous: %s %s", r.error,
          plain.error);
    json_t *ev = eval_entries(r.history), *ev_plain = eval_entries(plain.history);
    CHECK(json_array_size(ev) == 2 && json_array_size(ev_plain) == 2, "synchronous evaluations: %zu and %zu",
          json_array_size(ev), json_array_size(ev_plain));
    for (size_t i = 0; i < json_array_size(ev) && i < json_array_size(ev_plain); i++)
        CHECK_NEAR(json_number_value(json_object_get(json_array_get(ev, i), "eval_loss")),
                   2 * json_number_value(json_object_get(json_array_get(ev_plain, i), "eval_loss")), 1e-12);
    json_decref(ev);
    json_decref(ev_plain);
    free_out(&r);
    free_out(&plain);
    o.async = true;
    o.override_loss = false;
    o.compute_metrics = o.fail_metrics = true;
    o.policy = "wait"; /* step 5's evaluation runs (with "latest" step 10's could replace it) */
    run(&o, &r);
    CHECK(r.status == CT_ERR_INVALID_ARG && strstr(r.error, "asynchronous evaluation of step 5") &&
              strstr(r.error, "deliberate failure"),
          "failing compute_metrics: %s", r.error);
    free_out(&r);
}

/* The "eval_async" record of a checkpoint's rng_state_0.json (NULL when none). */
static json_t *pending_record(const char *ckpt) {
    char path[1024];
    snprintf(path, sizeof path, "%s/rng_state_0.json", ckpt);
    json_t *o = json_load_file(path, 0, NULL);
    json_t *e = json_incref(json_object_get(o, "eval_async"));
    json_decref(o);
    return e;
}

typedef struct run_call {
    const run_opts *o;
    run_out *out;
} run_call;

static void run_captured(void *arg) {
    run_call *c = arg;
    run(c->o, c->out);
}

static void test_stop_while_evaluating(void) {
    /* Evaluations and saves at 4, 8, 12, 16; step 4's evaluation is held running until step 8's
     * save, whose own evaluation then waits; SIGTERM at step 8 stops the run there: checkpoint-8
     * holds neither result. */
    run_opts o = {.async = true, .eval_strategy = CT_INTERVAL_STEPS, .save_strategy = CT_INTERVAL_STEPS,
                  .eval_steps = 4, .max_steps = 16, .policy = "wait"};
    run_out ref, stopped, resumed;
    run(&o, &ref);
    CHECK(ref.status == CT_OK, "stop while evaluating: the uninterrupted run (%s)", ref.error);
    ct_dataset *held = gated(eval_set);
    atomic_store(&eval_held, true);
    o.eval_data = held;
    o.stop_at = 8;
    run(&o, &stopped);
    atomic_store(&eval_held, false);
    CHECK(stopped.status == CT_ERR_INTERRUPTED, "stop while evaluating: stopped by SIGTERM (%s)", stopped.error);
    char ckpt[600], file[700];
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint-8", stopped.output_dir);
    json_t *rec = pending_record(ckpt), *pending = json_object_get(rec, "pending");
    CHECK(json_integer_value(json_object_get(rec, "last_step")) == 8 && json_array_size(pending) == 2 &&
              json_integer_value(json_object_get(json_array_get(pending, 0), "step")) == 4 &&
              json_integer_value(json_object_get(json_array_get(pending, 1), "step")) == 8 &&
              !strcmp(json_string_value(json_object_get(json_array_get(pending, 1), "file")), "model.h5"),
          "checkpoint-8 records the running evaluation of step 4 and the waiting one of step 8");
    snprintf(file, sizeof file, "%s/eval_pending_4.h5", ckpt);
    CHECK(access(file, R_OK) == 0, "checkpoint-8 holds step 4's weights in eval_pending_4.h5");
    json_t *early = eval_entries(stopped.history);
    CHECK(json_array_size(early) == 0, "the stopped run logged no evaluation (%zu)", json_array_size(early));
    json_decref(early);
    json_decref(rec);

    o.eval_data = NULL;
    o.stop_at = 0;
    o.resume = ckpt;
    o.output_dir = stopped.output_dir;
    run(&o, &resumed);
    CHECK(resumed.status == CT_OK, "stop while evaluating: the resumed run (%s)", resumed.error);
    json_t *ew = eval_entries(ref.history), *eg = eval_entries(resumed.history);
    CHECK(json_array_size(ew) == 4, "4 evaluations in the uninterrupted run, got %zu", json_array_size(ew));
    check_same_json("resumed after a stop while evaluating: eval entries", eg, ew);
    json_t *tw = train_entries(ref.history), *tg = train_entries(resumed.history);
    check_same_json("resumed after a stop while evaluating: training entries", tg, tw);
    CHECK(ref.n == resumed.n && memcmp(ref.final, resumed.final, (size_t)ref.n * sizeof(float)) == 0,
          "resumed after a stop while evaluating: the final weights");
    json_decref(ew);
    json_decref(eg);
    json_decref(tw);
    json_decref(tg);
    free_out(&resumed);

    /* Without eval_async the resumed run cannot redo them, and says so instead of losing them silently. */
    o.async = false;
    o.eval_strategy = CT_INTERVAL_NO;
    o.output_dir = NULL; /* its own copy of the checkpoint's directory is not needed: it writes elsewhere */
    run_call call = {&o, &resumed};
    char *text = ct_test_capture_stderr(run_captured, &call);
    CHECK(resumed.status == CT_OK && strstr(text, "2 asynchronous evaluation(s) without their results") &&
              strstr(text, "of step 4"),
          "a resumed run without eval_async warns (%s): %s", resumed.error, text);
    free(text);
    free_out(&resumed);
    free_out(&stopped);
    free_out(&ref);
    ct_dataset_free(held);
}

int main(void) {
    ct_test_begin("test_async_eval");
    if (!(tmp_root = ct_fixture_tmp_root("ct_async_eval"))) return 1;
    train_set = make_data(400, DIM, CLASSES, ct_test_seed);
    eval_set = make_data(601, DIM, CLASSES, ct_test_seed + 1);
    eval_set_b = make_data(203, DIM, CLASSES, ct_test_seed + 2);
    test_equals_sync(false);
    test_two_sets();
    test_equals_sync(true);
    test_c_metrics();
    test_continuous("latest");
    test_continuous("skip");
    test_continuous("wait");
    test_best();
    test_early_stopping();
    test_errors();
    test_stop_while_evaluating();
    ct_dataset_free(train_set);
    ct_dataset_free(eval_set);
    ct_dataset_free(eval_set_b);
    ct_fixture_cleanup();
    return ct_test_finish();
}
