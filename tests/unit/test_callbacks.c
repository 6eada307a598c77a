/* Hugging Face's flow callback and early stopping: DefaultFlowCallback driven through a simulation of
 * HF's training loop (epochs x batches with gradient accumulation) against a table of schedules
 * computed by hand from HF's rules, and early stopping (both directions, threshold, saved state).
 * The callback machinery is test_callback_dispatch.c's, the output callbacks (printer, JSON lines,
 * progress bar) test_callback_output.c's, the trainer state test_trainer_state.c's.
 *
 * Modes for tests/oracle/test_flow_callback.py, which drives transformers' own callbacks through
 * the same loop on random configurations and compares:
 *   test_callbacks --flow-schedule '<config or list of configs>'   the flags each event raised
 *   test_callbacks --early-stopping '<spec or list of specs>'      counters and the stopping point
 *   test_callbacks --print-logs '<list of log objects>'            the printer's lines
 *   test_callbacks --state-roundtrip IN OUT                        trainer_state.json read and rewritten
 *
 * Why one file of over 600 lines: the simulated loop and early stopping are what the oracle's modes
 * run, so the program the oracle calls and the tests of what it runs stay together. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "callbacks/callback.h"
#include "callbacks/state.h"
#include "core/json.h"
#include "core/rng.h"
#include "core/util.h"
#include "testlib.h"

static ct_rng rng;

/* Hugging Face's defaults for the fields callbacks read (filled by hand: these tests do not need
 * the argument table). */
static void default_args(ct_training_args *a) {
    memset(a, 0, sizeof *a);
    a->num_train_epochs = 3;
    a->max_steps = -1;
    a->per_device_train_batch_size = 8;
    a->gradient_accumulation_steps = 1;
    a->logging_strategy = CT_INTERVAL_STEPS;
    a->logging_steps = 500;
    a->save_strategy = CT_INTERVAL_STEPS;
    a->save_steps = 500;
    a->eval_strategy = CT_INTERVAL_NO;
    a->greater_is_better = -1;
}

/* --- (d) the flow callback under a simulated training loop ----------------------------------------- */

typedef struct flow_cfg {
    int64_t len, ga; /* batches per epoch, gradient_accumulation_steps */
    double epochs;
    int64_t max_steps;
    ct_interval log_s;
    double log_steps;
    bool first;
    ct_interval eval_s;
    double eval_steps, eval_delay;
    ct_interval save_s;
    double save_steps;
} flow_cfg;

static ct_status fire(const ct_callback_list *l, ct_event e, ct_callback_args *a) { return ct_callbacks_fire(l, e, a); }

static void record(json_t *res, const ct_trainer_control *c, char where, int64_t gs) {
    char tag[32];
    snprintf(tag, sizeof tag, "%c%lld", where, (long long)gs);
    if (c->should_log) json_array_append_new(json_object_get(res, "log"), json_string(tag));
    if (c->should_evaluate) json_array_append_new(json_object_get(res, "evaluate"), json_string(tag));
    if (c->should_save) json_array_append_new(json_object_get(res, "save"), json_string(tag));
}

/* HF's _maybe_log_save_evaluate, with the callbacks' side of it: logging only past the last logged
 * step, an evaluation logs its metrics then fires on_evaluate, a save fires on_save. */
static ct_status log_save_evaluate(const ct_callback_list *l, ct_callback_args *a, int64_t *last_logged) {
    if (a->control->should_log && a->state->global_step > *last_logged) {
        *last_logged = a->state->global_step;
        json_t *logs = json_pack("{s:f}", "loss", 0.5);
        a->logs = logs;
        ct_status s = fire(l, CT_ON_LOG, a);
        a->logs = NULL;
        json_decref(logs);
        CT_TRY(s);
    }
    if (a->control->should_evaluate) {
        json_t *m = json_pack("{s:f}", "eval_loss", 0.25);
        a->logs = a->metrics = m;
        ct_status s = fire(l, CT_ON_LOG, a);
        if (s == CT_OK) s = fire(l, CT_ON_EVALUATE, a);
        a->logs = a->metrics = NULL;
        json_decref(m);
        CT_TRY(s);
    }
    if (a->control->should_save) CT_TRY(fire(l, CT_ON_SAVE, a));
    return CT_OK;
}

static void cfg_to_args(const flow_cfg *f, ct_training_args *args) {
    default_args(args);
    args->num_train_epochs = f->epochs;
    args->max_steps = f->max_steps;
    args->gradient_accumulation_steps = f->ga;
    args->logging_strategy = f->log_s;
    args->logging_steps = f->log_steps;
    args->logging_first_step = f->first;
    args->eval_strategy = f->eval_s;
    args->eval_steps = f->eval_steps;
    args->eval_delay = f->eval_delay;
    args->save_strategy = f->save_s;
    args->save_steps = f->save_steps;
}

/* HF's _inner_training_loop, reduced to its events: set_initial_training_values' step counts, then
 * per epoch the batches, on_step_begin at each accumulation window's first batch, an optimizer
 * step when the window is full or the epoch's batches run out, on_step_end and
 * _maybe_log_save_evaluate after it, on_substep_end otherwise, the stop checks, on_epoch_end.
 * Returns the flags each on_step_end ("s<step>") and on_epoch_end ("e<step>") left raised. */
static ct_status simulate(const flow_cfg *f, json_t **out) {
    ct_training_args args;
    cfg_to_args(f, &args);
    int64_t nupe = CT_MAX(f->len / f->ga, 1);
    int64_t max_steps, num_epochs;
    if (f->max_steps > 0) {
        max_steps = f->max_steps;
        num_epochs = max_steps / nupe + (max_steps % nupe > 0);
    } else {
        max_steps = (int64_t)ceil(f->epochs * (double)nupe);
        num_epochs = (int64_t)ceil(f->epochs);
    }
    ct_trainer_state st;
    CT_TRY(ct_trainer_state_init(&st));
    ct_trainer_state_resolve(&st, &args, max_steps, num_epochs);
    ct_trainer_control c = {0};
    ct_callback_list l = {0};
    ct_callback *flow;
    ct_status s = ct_flow_callback_create(&flow);
    if (s == CT_OK) s = ct_callback_list_add(&l, flow);
    json_t *res = json_pack("{s:I,s:I,s:I,s:I,s:I,s:[],s:[],s:[]}", "max_steps", (json_int_t)max_steps,
                            "num_train_epochs", (json_int_t)num_epochs, "logging_steps", (json_int_t)st.logging_steps,
                            "eval_steps", (json_int_t)st.eval_steps, "save_steps", (json_int_t)st.save_steps, "log",
                            "evaluate", "save");
    ct_callback_args a = {.args = &args, .state = &st, .control = &c};
    int64_t last_logged = 0;
    if (s == CT_OK) s = fire(&l, CT_ON_TRAIN_BEGIN, &a);
    for (int64_t epoch = 0; s == CT_OK && epoch < num_epochs; epoch++) {
        int64_t steps_in_epoch = f->len;
        s = fire(&l, CT_ON_EPOCH_BEGIN, &a);
        for (int64_t step = 0; s == CT_OK && step < steps_in_epoch; step++) {
            bool sync = (step + 1) % f->ga == 0 || step + 1 == steps_in_epoch;
            if (step % f->ga == 0) s = fire(&l, CT_ON_STEP_BEGIN, &a);
            if (s != CT_OK) break;
            if (sync) {
                s = fire(&l, CT_ON_PRE_OPTIMIZER_STEP, &a);
                if (s == CT_OK) s = fire(&l, CT_ON_OPTIMIZER_STEP, &a);
                st.global_step++;
                st.epoch = (double)epoch + (double)(step + 1) / (double)steps_in_epoch;
                if (s == CT_OK) s = fire(&l, CT_ON_STEP_END, &a);
                record(res, &c, 's', st.global_step);
                if (s == CT_OK) s = log_save_evaluate(&l, &a, &last_logged);
            } else {
                s = fire(&l, CT_ON_SUBSTEP_END, &a);
            }
            if (c.should_epoch_stop || c.should_training_stop) break;
        }
        if (s == CT_OK) s = fire(&l, CT_ON_EPOCH_END, &a);
        record(res, &c, 'e', st.global_step);
        if (s == CT_OK) s = log_save_evaluate(&l, &a, &last_logged);
        if (c.should_training_stop) break;
    }
    if (s == CT_OK) s = fire(&l, CT_ON_TRAIN_END, &a);
    json_object_set_new(res, "global_step", json_integer(st.global_step));
    json_object_set_new(res, "epoch", json_real(st.epoch));
    ct_callback_list_free(&l);
    ct_trainer_state_free(&st);
    if (s != CT_OK) {
        json_decref(res);
        return s;
    }
    *out = res;
    return CT_OK;
}

static char *joined(const json_t *arr) {
    static char buf[4][1024];
    static int k;
    char *b = buf[k++ % 4];
    b[0] = 0;
    size_t i;
    const json_t *v;
    json_array_foreach(arr, i, v) {
        size_t n = strlen(b);
        snprintf(b + n, 1024 - n, "%s%s", i ? " " : "", json_string_value(v));
    }
    return b;
}

#define NO CT_INTERVAL_NO
#define ST CT_INTERVAL_STEPS
#define EP CT_INTERVAL_EPOCH
#define BEST CT_INTERVAL_BEST

typedef struct flow_case {
    const char *name;
    flow_cfg cfg;
    const char *log, *evaluate, *save;
    int64_t stop;       /* global step at the end */
    double stop_epoch;  /* state.epoch at the end */
    int64_t logging_steps, eval_steps, save_steps; /* resolved intervals */
} flow_case;

/* Worked out by hand from DefaultFlowCallback (4.51) and _inner_training_loop; see each comment. */
static const flow_case flow_cases[] = {
    /* 3 epochs x 10 = 30 steps; logging every 4, saving every 5 (step 30 is also the end save). */
    {"steps", {10, 1, 3, -1, ST, 4, false, NO, 0, 0, ST, 5},
     "s4 s8 s12 s16 s20 s24 s28", "", "s5 s10 s15 s20 s25 s30", 30, 3.0, 4, 500, 5},
    /* max_steps 10 overrides the epochs; logging 0.25 -> ceil(2.5) = 3; eval_steps unset -> logging's
     * 0.25 -> 3; save 0.34 -> ceil(10 * 0.34) = ceil(3.4000000000000004) = 4, and 10 is the end save. */
    {"ratios", {10, 1, 3, 10, ST, 0.25, false, ST, 0, 0, ST, 0.34},
     "s3 s6 s9", "s3 s6 s9", "s4 s8 s10", 10, 1.0, 3, 3, 4},
    /* 100 steps, save 0.07: 100 * 0.07 is 7.000000000000001 in double, so Python's ceil gives 8. */
    {"ratio rounding", {50, 1, 2, -1, NO, 500, false, NO, 0, 0, ST, 0.07},
     "", "", "s8 s16 s24 s32 s40 s48 s56 s64 s72 s80 s88 s96 s100", 100, 2.0, 500, 500, 8},
    /* eval every 3 steps, eval_delay 7 steps: 3 and 6 are too early; no saving, no logging. */
    {"eval_delay steps", {8, 1, 2, -1, NO, 500, false, ST, 3, 7, NO, 500},
     "", "s9 s12 s15", "", 16, 2.0, 500, 3, 500},
    /* eval_delay equal to a multiple: 6 <= 6 counts. */
    {"eval_delay exact", {8, 1, 2, -1, NO, 500, false, ST, 3, 6, NO, 500},
     "", "s6 s9 s12 s15", "", 16, 2.0, 500, 3, 500},
    /* per-epoch everything; eval_delay 1.5 epochs skips the first epoch's evaluation only. */
    {"epoch strategies", {5, 1, 4, -1, EP, 500, false, EP, 0, 1.5, EP, 500},
     "e5 e10 e15 e20", "e10 e15 e20", "e5 e10 e15 e20", 20, 4.0, 500, 500, 500},
    /* eval_delay 2 epochs: the evaluation at epoch 2.0 counts (2 <= 2). */
    {"eval_delay exact epochs", {4, 1, 3, -1, NO, 500, false, EP, 0, 2, NO, 500},
     "", "e8 e12", "", 12, 3.0, 500, 500, 500},
    /* logging_first_step adds step 1 to every 5 steps. */
    {"logging_first_step", {6, 1, 2, -1, ST, 5, true, NO, 0, 0, NO, 500},
     "s1 s5 s10", "", "", 12, 2.0, 5, 500, 500},
    /* max_steps 6 with 4 batches an epoch: 2 epochs, training stops in the middle of the second;
     * the epoch end still fires there (log/eval by epoch), and step 6 gets the end save. */
    {"max_steps mid-epoch", {4, 1, 100, 6, EP, 500, false, EP, 0, 0, ST, 4},
     "e4 e6", "e4 e6", "s4 s6", 6, 1.5, 500, 500, 4},
    /* 10 batches, accumulation 3: windows of 3,3,3 and a partial 1 that still steps, so 4 updates
     * an epoch while HF counts max(10 // 3, 1) = 3 per epoch: max_steps 6 ends at the second
     * update of epoch 2 (epoch 1 + 6/10 = 1.6 >= eval_delay 1.5; epoch 1.0 was not). */
    {"accumulation partial window", {10, 3, 2, -1, ST, 2, false, EP, 0, 1.5, ST, 4},
     "s2 s4 s6", "e6", "s4 s6", 6, 1.6, 2, 500, 4},
    /* accumulation 4 over 2 batches: one (partial) update an epoch, 3 epochs -> 3 steps. */
    {"accumulation beyond the epoch", {2, 4, 3, -1, ST, 1, false, NO, 0, 0, EP, 500},
     "s1 s2 s3", "", "e1 e2 e3", 3, 3.0, 1, 500, 500},
    /* 1.5 epochs of 10: max_steps ceil(15) = 15, 2 epochs begun, the second cut at 15. */
    {"fractional epochs", {10, 1, 1.5, -1, ST, 7, false, ST, 5, 0, EP, 500},
     "s7 s14", "s5 s10 s15", "e10 e15", 15, 1.5, 7, 5, 500},
    /* save_strategy "best" is never raised by the flow (the Trainer saves on a new best), not even
     * at the end; logging "no" logs nothing. */
    {"save best", {5, 1, 2, -1, NO, 500, false, ST, 2, 0, BEST, 500},
     "", "s2 s4 s6 s8 s10", "", 10, 2.0, 500, 2, 500},
    /* one batch an epoch: step 1 logs (first step), and each epoch end asks to log again; at the
     * first one step 1 was already logged, so the flag stays raised (HF logs once per step). */
    {"first step and epoch logging", {1, 1, 3, -1, EP, 500, true, NO, 0, 0, NO, 500},
     "s1 e1 e2 e3", "", "", 3, 3.0, 500, 500, 500},
    /* eval_steps unset under the epoch strategy keeps TrainerState's 500. */
    {"eval epoch, eval_steps unset", {3, 1, 1, -1, ST, 500, false, EP, 0, 0, ST, 500},
     "", "e3", "s3", 3, 1.0, 500, 500, 500},
    /* 9 batches, accumulation 3 (no partial window), max_steps 5: epochs of 3 updates, stop at the
     * second update of epoch 2; eval_delay 3 skips step 2. */
    {"accumulation exact windows", {9, 3, 1, 5, ST, 2, false, ST, 2, 3, ST, 2},
     "s2 s4", "s4", "s2 s4 s5", 5, 1.0 + 6.0 / 9.0, 2, 2, 2},
    /* 7 batches, accumulation 2: windows 2,2,2,1 -> 4 updates an epoch, HF counts 3, max_steps 6;
     * eval 0.5 -> 3; logging 0.34 -> ceil(2.04) = 3. */
    {"accumulation ratios", {7, 2, 2, -1, ST, 0.34, false, ST, 0.5, 0, NO, 500},
     "s3 s6", "s3 s6", "", 6, 1.0 + 4.0 / 7.0, 3, 3, 500},
};

static void test_flow_table(void) {
    for (size_t i = 0; i < CT_ARRAY_LEN(flow_cases); i++) {
        const flow_case *fc = &flow_cases[i];
        json_t *res = NULL;
        ct_status s = simulate(&fc->cfg, &res);
        CHECK(s == CT_OK, "%s: %s", fc->name, ct_last_error());
        if (!res) continue;
        const char *got_log = joined(json_object_get(res, "log"));
        const char *got_eval = joined(json_object_get(res, "evaluate"));
        const char *got_save = joined(json_object_get(res, "save"));
        CHECK(strcmp(got_log, fc->log) == 0, "%s: log at '%s', want '%s'", fc->name, got_log, fc->log);
        CHECK(strcmp(got_eval, fc->evaluate) == 0, "%s: evaluate at '%s', want '%s'", fc->name, got_eval,
              fc->evaluate);
        CHECK(strcmp(got_save, fc->save) == 0, "%s: save at '%s', want '%s'", fc->name, got_save, fc->save);
        int64_t gs = json_integer_value(json_object_get(res, "global_step"));
        double ep = json_real_value(json_object_get(res, "epoch"));
        CHECK(gs == fc->stop, "%s: stopped at step %lld, want %lld", fc->name, (long long)gs, (long long)fc->stop);
        CHECK(fabs(ep - fc->stop_epoch) < 1e-12, "%s: stopped at epoch %.17g, want %.17g", fc->name, ep,
              fc->stop_epoch);
        CHECK(json_integer_value(json_object_get(res, "logging_steps")) == fc->logging_steps &&
                  json_integer_value(json_object_get(res, "eval_steps")) == fc->eval_steps &&
                  json_integer_value(json_object_get(res, "save_steps")) == fc->save_steps,
              "%s: intervals %lld/%lld/%lld, want %lld/%lld/%lld", fc->name,
              (long long)json_integer_value(json_object_get(res, "logging_steps")),
              (long long)json_integer_value(json_object_get(res, "eval_steps")),
              (long long)json_integer_value(json_object_get(res, "save_steps")), (long long)fc->logging_steps,
              (long long)fc->eval_steps, (long long)fc->save_steps);
        json_decref(res);
    }
}

/* A stopping callback in the loop: should_epoch_stop ends the epoch early (the next one starts
 * afresh), should_training_stop ends the run; the flow's flags keep their steps. */
typedef struct stopper_cb {
    ct_callback base;
    int64_t epoch_stop_at, train_stop_at;
} stopper_cb;

static ct_status stopper_step_end(ct_callback *cb, const ct_callback_args *a) {
    stopper_cb *s = ct_container_of(cb, stopper_cb, base);
    if (a->state->global_step == s->epoch_stop_at) a->control->should_epoch_stop = true;
    if (a->state->global_step == s->train_stop_at) a->control->should_training_stop = true;
    return CT_OK;
}

static const ct_callback_ops stopper_ops = {.size = sizeof(ct_callback_ops), .name = "Stopper",
                                            .on_step_end = stopper_step_end};

static void test_flow_stops(void) {
    /* 3 epochs of 5 batches; stop epoch 1 at step 2, then training at step 6 (epoch 2, batch 4).
     * The epoch stop moves epoch 2's steps to 3..7 (its batches start over). */
    ct_training_args args;
    default_args(&args);
    args.logging_strategy = CT_INTERVAL_EPOCH;
    args.save_strategy = CT_INTERVAL_NO;
    ct_trainer_state st;
    CHECK_OK(ct_trainer_state_init(&st));
    ct_trainer_state_resolve(&st, &args, 15, 3);
    ct_callback_list l = {0};
    ct_callback *flow;
    CHECK_OK(ct_flow_callback_create(&flow));
    CHECK_OK(ct_callback_list_add(&l, flow));
    stopper_cb *sc = calloc(1, sizeof *sc);
    sc->base.ops = &stopper_ops;
    sc->epoch_stop_at = 2;
    sc->train_stop_at = 6;
    CHECK_OK(ct_callback_list_add(&l, &sc->base));
    ct_trainer_control c = {0};
    ct_callback_args a = {.args = &args, .state = &st, .control = &c};
    char trace[256] = "";
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_TRAIN_BEGIN, &a));
    for (int epoch = 0; epoch < 3; epoch++) {
        CHECK_OK(ct_callbacks_fire(&l, CT_ON_EPOCH_BEGIN, &a));
        CHECK(!c.should_epoch_stop, "epoch begin clears should_epoch_stop");
        for (int step = 0; step < 5; step++) {
            CHECK_OK(ct_callbacks_fire(&l, CT_ON_STEP_BEGIN, &a));
            st.global_step++;
            st.epoch = epoch + (step + 1) / 5.0;
            CHECK_OK(ct_callbacks_fire(&l, CT_ON_STEP_END, &a));
            if (c.should_epoch_stop || c.should_training_stop) break;
        }
        CHECK_OK(ct_callbacks_fire(&l, CT_ON_EPOCH_END, &a));
        size_t n = strlen(trace);
        snprintf(trace + n, sizeof trace - n, "e%lld%s ", (long long)st.global_step, c.should_log ? "L" : "");
        if (c.should_training_stop) break;
        c.should_log = false; /* the trainer's on_log */
    }
    CHECK(strcmp(trace, "e2L e6L ") == 0, "epoch ends at %s", trace);
    CHECK(st.global_step == 6, "stopped at 6, got %lld", (long long)st.global_step);
    ct_callback_list_free(&l);
    ct_trainer_state_free(&st);
}

/* --- (e) early stopping -------------------------------------------------------------------------------- */

/* HF's _determine_best_metric after each evaluation (the Trainer's part). */
static void update_best(ct_trainer_state *st, const ct_training_args *args, double v) {
    bool greater = args->greater_is_better >= 0 ? args->greater_is_better != 0
                                                : !(strlen(args->metric_for_best_model) >= 4 &&
                                                    strcmp(args->metric_for_best_model +
                                                               strlen(args->metric_for_best_model) - 4,
                                                           "loss") == 0);
    if (!st->has_best) {
        st->has_best = true;
        st->best_metric = greater ? -INFINITY : INFINITY;
    }
    if (greater ? v > st->best_metric : v < st->best_metric) st->best_metric = v;
}

static int64_t es_counter(ct_callback *cb) {
    json_t *s = NULL;
    ct_status st = cb->ops->save_state(cb, &s);
    CT_ASSERT(st == CT_OK);
    const json_t *attrs = json_object_get(s, "attributes");
    int64_t c = json_integer_value(json_object_get(attrs, "early_stopping_patience_counter"));
    json_decref(s);
    return c;
}

/* Feeds values (key = metric name in the metrics dict) and returns the index at which training
 * was asked to stop (-1: never); counters[i] gets the counter after evaluation i. The callback
 * may be replaced halfway through by a fresh one restored from the saved state. */
static int run_early(const ct_training_args *args, int64_t patience, double threshold, const char *key,
                     const double *values, int n, int64_t *counters, int restore_at) {
    ct_callback *cb;
    CT_ASSERT(ct_early_stopping_callback_create(patience, threshold, &cb) == CT_OK);
    ct_callback_list l = {0};
    CT_ASSERT(ct_callback_list_add(&l, cb) == CT_OK);
    ct_trainer_state st;
    CT_ASSERT(ct_trainer_state_init(&st) == CT_OK);
    ct_trainer_control c = {0};
    ct_callback_args a = {.args = args, .state = &st, .control = &c};
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_TRAIN_BEGIN, &a));
    int stop = -1;
    for (int i = 0; i < n; i++) {
        if (i == restore_at) {
            /* Resume: the state goes through trainer_state.json's stateful_callbacks. */
            json_t *saved = json_object();
            CHECK_OK(ct_callbacks_save_state(&l, saved));
            ct_callback_list_free(&l);
            ct_callback *fresh;
            CHECK_OK(ct_early_stopping_callback_create(patience + 5, threshold + 1, &fresh));
            CHECK_OK(ct_callback_list_add(&l, fresh));
            CHECK_OK(ct_callbacks_load_state(&l, saved, "trainer_state.json"));
            json_decref(saved);
        }
        json_t *m = json_pack("{s:f,s:f}", key, values[i], "eval_other", 123.0);
        a.metrics = m;
        CHECK_OK(ct_callbacks_fire(&l, CT_ON_EVALUATE, &a));
        a.metrics = NULL;
        json_decref(m);
        update_best(&st, args, values[i]);
        counters[i] = es_counter(l.items[0]);
        if (c.should_training_stop && stop < 0) stop = i;
    }
    ct_callback_list_free(&l);
    ct_trainer_state_free(&st);
    return stop;
}

static void test_early_stopping(void) {
    ct_training_args args;
    default_args(&args);
    args.eval_strategy = CT_INTERVAL_STEPS;
    args.load_best_model_at_end = true;
    snprintf(args.metric_for_best_model, sizeof args.metric_for_best_model, "loss");

    /* Lower is better (greater_is_better unset, name ends in "loss"), patience 2, threshold 0.1:
     * 1.0 first (counter 0); 0.95 improves by only 0.05 (1); 0.80 by 0.15 from the best 0.95 (0);
     * 0.85 worse (1); 0.75 better than 0.80 by only 0.05 (2 = patience: stop). */
    double v1[] = {1.0, 0.95, 0.80, 0.85, 0.75, 0.1};
    int64_t want1[] = {0, 1, 0, 1, 2};
    int64_t got[8];
    for (int restore = -1; restore < 5; restore++) {
        int stop = run_early(&args, 2, 0.1, "eval_loss", v1, 5, got, restore);
        CHECK(stop == 4, "loss: stop at %d, want 4 (restore at %d)", stop, restore);
        for (int i = 0; i < 5; i++)
            CHECK(got[i] == want1[i], "loss: counter[%d] = %lld, want %lld (restore at %d)", i, (long long)got[i],
                  (long long)want1[i], restore);
    }

    /* Higher is better, metric named with its eval_ prefix, patience 1, threshold 0: an equal value
     * is no improvement. */
    snprintf(args.metric_for_best_model, sizeof args.metric_for_best_model, "eval_accuracy");
    double v2[] = {0.5, 0.6, 0.6, 0.7};
    int stop = run_early(&args, 1, 0.0, "eval_accuracy", v2, 4, got, -1);
    CHECK(stop == 2 && got[0] == 0 && got[1] == 0 && got[2] == 1, "accuracy: stop %d, counters %lld %lld %lld", stop,
          (long long)got[0], (long long)got[1], (long long)got[2]);
    /* greater_is_better given explicitly overrides the name rule: "accuracy" minimised. */
    args.greater_is_better = 0;
    double v3[] = {0.5, 0.4, 0.45, 0.3, 0.35, 0.36};
    int64_t want3[] = {0, 0, 1, 0, 1, 2};
    stop = run_early(&args, 2, 0.0, "eval_accuracy", v3, 6, got, 3);
    CHECK(stop == 5, "minimised accuracy: stop %d, want 5", stop);
    for (int i = 0; i < 6; i++)
        CHECK(got[i] == want3[i], "minimised accuracy counter[%d] = %lld", i, (long long)got[i]);
    args.greater_is_better = -1;

    /* A missing metric leaves the counter alone (HF warns and skips). */
    snprintf(args.metric_for_best_model, sizeof args.metric_for_best_model, "f1");
    stop = run_early(&args, 1, 0.0, "eval_accuracy", v2, 4, got, -1);
    CHECK(stop == -1 && got[3] == 0, "missing metric: no stop (%d), counter %lld", stop, (long long)got[3]);

    /* Train-begin checks, named through the dispatcher. */
    ct_callback *cb;
    CHECK_OK(ct_early_stopping_callback_create(3, 0.0, &cb));
    ct_callback_list l = {0};
    CHECK_OK(ct_callback_list_add(&l, cb));
    ct_trainer_state st;
    CHECK_OK(ct_trainer_state_init(&st));
    ct_trainer_control c = {0};
    ct_callback_args a = {.args = &args, .state = &st, .control = &c};
    args.metric_for_best_model[0] = 0;
    CHECK_ERR(ct_callbacks_fire(&l, CT_ON_TRAIN_BEGIN, &a), CT_ERR_CONFIG,
              "callback 'EarlyStoppingCallback' on_train_begin: ", "metric_for_best_model");
    snprintf(args.metric_for_best_model, sizeof args.metric_for_best_model, "loss");
    args.eval_strategy = CT_INTERVAL_NO;
    CHECK_ERR(ct_callbacks_fire(&l, CT_ON_TRAIN_BEGIN, &a), CT_ERR_CONFIG, "eval_strategy is \"no\"");
    args.eval_strategy = CT_INTERVAL_EPOCH;
    args.load_best_model_at_end = false; /* allowed, as in HF (a warning) */
    st.is_world_process_zero = false;    /* (and not printed here) */
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_TRAIN_BEGIN, &a));

    /* Saved state: HF's ExportableState layout. */
    json_t *s = NULL;
    CHECK_OK(cb->ops->save_state(cb, &s));
    json_t *want = json_pack("{s:{s:I,s:f},s:{s:I}}", "args", "early_stopping_patience", (json_int_t)3,
                             "early_stopping_threshold", 0.0, "attributes", "early_stopping_patience_counter",
                             (json_int_t)0);
    CHECK(json_equal(s, want), "saved state layout");
    json_decref(want);
    json_decref(s);
    /* Bad states. */
    json_t *bad = json_pack("{s:{s:I}}", "attributes", "early_stopping_patience_countr", (json_int_t)1);
    CHECK_ERR(cb->ops->load_state(cb, bad), CT_ERR_FORMAT, "early_stopping_patience_countr",
              "did you mean 'early_stopping_patience_counter'");
    json_decref(bad);
    bad = json_pack("{s:{s:s}}", "attributes", "early_stopping_patience_counter", "two");
    CHECK_ERR(cb->ops->load_state(cb, bad), CT_ERR_FORMAT, "early_stopping_patience_counter");
    json_decref(bad);
    bad = json_pack("{s:{s:I}}", "args", "early_stopping_patience", (json_int_t)0);
    CHECK_ERR(cb->ops->load_state(cb, bad), CT_ERR_FORMAT, "patience 0");
    json_decref(bad);
    bad = json_pack("{s:{s:{s:I}}}", "EarlyStoppingCallback", "attributes", "early_stopping_patience_counter",
                    (json_int_t)-1);
    CHECK_ERR(ct_callbacks_load_state(&l, bad, "ckpt/trainer_state.json"), CT_ERR_FORMAT,
              "ckpt/trainer_state.json: stateful_callbacks.EarlyStoppingCallback: ", "out of range");
    json_decref(bad);
    CHECK_ERR(ct_early_stopping_callback_create(0, 0.0, &cb), CT_ERR_INVALID_ARG, "early_stopping_patience", "0");
    CHECK_ERR(ct_early_stopping_callback_create(1, -0.5, &cb), CT_ERR_INVALID_ARG, "early_stopping_threshold");
    CHECK_ERR(ct_early_stopping_callback_create(1, NAN, &cb), CT_ERR_INVALID_ARG, "early_stopping_threshold");

    /* Two callbacks of one name are saved as a list and restored in order; names nobody has are
     * ignored. */
    ct_callback *e2;
    CHECK_OK(ct_early_stopping_callback_create(7, 0.5, &e2));
    CHECK_OK(ct_callback_list_add(&l, e2));
    json_t *stateful = json_pack("{s:{s:{s:b}}}", "TrainerControl", "args", "should_save", 1);
    CHECK_OK(ct_callbacks_save_state(&l, stateful));
    json_t *entry = json_object_get(stateful, "EarlyStoppingCallback");
    CHECK(json_is_array(entry) && json_array_size(entry) == 2, "two states as a list");
    CHECK(json_object_get(stateful, "TrainerControl") != NULL, "other entries kept");
    json_int_t p1 = 0, p2 = 0;
    json_unpack(json_array_get(entry, 0), "{s:{s:I}}", "args", "early_stopping_patience", &p1);
    json_unpack(json_array_get(entry, 1), "{s:{s:I}}", "args", "early_stopping_patience", &p2);
    CHECK(p1 == 3 && p2 == 7, "list order: patience %lld, %lld", (long long)p1, (long long)p2);
    /* Saving again replaces (does not append to) the list. */
    CHECK_OK(ct_callbacks_save_state(&l, stateful));
    entry = json_object_get(stateful, "EarlyStoppingCallback"); /* the first list was replaced */
    CHECK(json_array_size(entry) == 2, "second save replaces");
    json_object_set_new(stateful, "SomeoneElsesCallback", json_object());
    ct_callback_list l2 = {0};
    ct_callback *f1, *f2;
    CHECK_OK(ct_early_stopping_callback_create(1, 0, &f1));
    CHECK_OK(ct_early_stopping_callback_create(1, 0, &f2));
    CHECK_OK(ct_callback_list_add(&l2, f1));
    CHECK_OK(ct_callback_list_add(&l2, f2));
    CHECK_OK(ct_callbacks_load_state(&l2, stateful, "trainer_state.json"));
    json_t *r1, *r2;
    CHECK_OK(f1->ops->save_state(f1, &r1));
    CHECK_OK(f2->ops->save_state(f2, &r2));
    CHECK(json_equal(r1, json_array_get(entry, 0)) && json_equal(r2, json_array_get(entry, 1)),
          "restored in order");
    json_decref(r1);
    json_decref(r2);
    json_decref(stateful);
    ct_callback_list_free(&l2);
    ct_callback_list_free(&l);
    ct_trainer_state_free(&st);
}

/* --- oracle modes ------------------------------------------------------------------------------------- */

static ct_status interval_of(const json_t *cfg, const char *key, ct_interval def, ct_interval *out) {
    const char *v;
    CT_TRY(ct_json_string(cfg, "config", key, false, NULL, &v));
    if (!v) {
        *out = def;
        return CT_OK;
    }
    static const char *const names[] = {"no", "steps", "epoch", "best", NULL};
    for (int i = 0; names[i]; i++)
        if (strcmp(v, names[i]) == 0) {
            *out = (ct_interval)i;
            return CT_OK;
        }
    return ct_error(CT_ERR_CONFIG, "config.%s: unknown strategy '%s'", key, v);
}

static ct_status flow_cfg_from_json(const json_t *j, flow_cfg *f) {
    static const char *const keys[] = {"len_dataloader", "gradient_accumulation_steps", "num_train_epochs",
                                       "max_steps", "logging_strategy", "logging_steps", "logging_first_step",
                                       "eval_strategy", "eval_steps", "eval_delay", "save_strategy", "save_steps",
                                       NULL};
    CT_TRY(ct_json_check_keys(j, "config", keys));
    CT_TRY(ct_json_int(j, "config", "len_dataloader", true, 0, &f->len));
    CT_TRY(ct_json_int(j, "config", "gradient_accumulation_steps", false, 1, &f->ga));
    CT_TRY(ct_json_real(j, "config", "num_train_epochs", false, 3, &f->epochs));
    CT_TRY(ct_json_int(j, "config", "max_steps", false, -1, &f->max_steps));
    CT_TRY(interval_of(j, "logging_strategy", CT_INTERVAL_STEPS, &f->log_s));
    CT_TRY(ct_json_real(j, "config", "logging_steps", false, 500, &f->log_steps));
    CT_TRY(ct_json_bool(j, "config", "logging_first_step", false, false, &f->first));
    CT_TRY(interval_of(j, "eval_strategy", CT_INTERVAL_NO, &f->eval_s));
    const json_t *es = json_object_get(j, "eval_steps");
    f->eval_steps = 0;
    if (es && !json_is_null(es)) CT_TRY(ct_json_real(j, "config", "eval_steps", false, 0, &f->eval_steps));
    CT_TRY(ct_json_real(j, "config", "eval_delay", false, 0, &f->eval_delay));
    CT_TRY(interval_of(j, "save_strategy", CT_INTERVAL_STEPS, &f->save_s));
    CT_TRY(ct_json_real(j, "config", "save_steps", false, 500, &f->save_steps));
    if (f->len < 1 || f->ga < 1) return ct_error(CT_ERR_CONFIG, "config: len_dataloader and accumulation must be >= 1");
    return CT_OK;
}

static ct_status early_mode_one(const json_t *j, json_t **out) {
    ct_training_args args;
    default_args(&args);
    args.eval_strategy = CT_INTERVAL_STEPS;
    args.load_best_model_at_end = true;
    int64_t patience;
    double threshold;
    const char *metric;
    CT_TRY(ct_json_int(j, "spec", "patience", true, 1, &patience));
    CT_TRY(ct_json_real(j, "spec", "threshold", true, 0, &threshold));
    CT_TRY(ct_json_string(j, "spec", "metric_for_best_model", true, NULL, &metric));
    snprintf(args.metric_for_best_model, sizeof args.metric_for_best_model, "%s", metric);
    const json_t *g = json_object_get(j, "greater_is_better");
    args.greater_is_better = !g || json_is_null(g) ? -1 : json_is_true(g);
    const char *key;
    CT_TRY(ct_json_string(j, "spec", "key", true, NULL, &key));
    const json_t *vals = json_object_get(j, "values");
    int64_t restore_at;
    CT_TRY(ct_json_int(j, "spec", "restore_at", false, -1, &restore_at));
    int n = (int)json_array_size(vals);
    double *v = calloc((size_t)n + 1, sizeof *v);
    int64_t *counters = calloc((size_t)n + 1, sizeof *counters);
    for (int i = 0; i < n; i++) v[i] = json_number_value(json_array_get(vals, (size_t)i));
    int stop = run_early(&args, patience, threshold, key, v, n, counters, (int)restore_at);
    json_t *cs = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(cs, json_integer(counters[i]));
    *out = json_pack("{s:o,s:i}", "counters", cs, "stop", stop);
    free(v);
    free(counters);
    return CT_OK;
}

/* Runs one oracle mode over a config or a list of them; prints the JSON result. */
static int oracle_mode(const char *mode, const char *text) {
    json_error_t err;
    json_t *in = json_loads(text, 0, &err);
    if (!in) {
        fprintf(stderr, "%s: bad JSON: %s\n", mode, err.text);
        return 2;
    }
    bool list = json_is_array(in);
    json_t *items = list ? json_incref(in) : json_pack("[O]", in);
    json_t *outs = json_array();
    size_t i;
    json_t *item;
    ct_status s = CT_OK;
    json_array_foreach(items, i, item) {
        json_t *r = NULL;
        if (strcmp(mode, "--flow-schedule") == 0) {
            flow_cfg f;
            s = flow_cfg_from_json(item, &f);
            if (s == CT_OK) s = simulate(&f, &r);
        } else if (strcmp(mode, "--early-stopping") == 0) {
            s = early_mode_one(item, &r);
        } else {
            /* --print-logs: the printer's line for each object */
            ct_training_args args;
            default_args(&args);
            ct_trainer_state st;
            ct_trainer_state_init(&st);
            ct_trainer_control c = {0};
            ct_callback *p;
            ct_printer_callback_create(stdout, &p);
            ct_callback_list l = {0};
            ct_callback_list_add(&l, p);
            ct_callback_args a = {.args = &args, .state = &st, .control = &c, .logs = item};
            s = ct_callbacks_fire(&l, CT_ON_LOG, &a);
            ct_callback_list_free(&l);
            ct_trainer_state_free(&st);
            r = json_null();
        }
        if (s != CT_OK) break;
        json_array_append_new(outs, r);
    }
    int rc = 0;
    if (s != CT_OK) {
        fprintf(stderr, "%s: %s\n", mode, ct_last_error());
        rc = 1;
    } else if (strcmp(mode, "--print-logs") != 0) {
        char *t = json_dumps(list ? outs : json_array_get(outs, 0), JSON_COMPACT | JSON_REAL_PRECISION(17));
        puts(t);
        free(t);
    }
    json_decref(outs);
    json_decref(items);
    json_decref(in);
    return rc;
}

/* Reads a trainer_state.json (Hugging Face's) and writes it back through ct_trainer_state. */
static int state_roundtrip(const char *in, const char *out) {
    ct_trainer_state s;
    ct_status st = ct_trainer_state_init(&s);
    if (st == CT_OK) st = ct_trainer_state_load(&s, in);
    if (st == CT_OK) st = ct_trainer_state_save(&s, out);
    ct_trainer_state_free(&s);
    if (st != CT_OK) fprintf(stderr, "--state-roundtrip: %s\n", ct_last_error());
    return st == CT_OK ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--state-roundtrip") == 0) return state_roundtrip(argv[2], argv[3]);
    if (argc == 3 && (strcmp(argv[1], "--flow-schedule") == 0 || strcmp(argv[1], "--early-stopping") == 0 ||
                      strcmp(argv[1], "--print-logs") == 0))
        return oracle_mode(argv[1], argv[2]);
    if (argc != 1) {
        fprintf(stderr, "usage: test_callbacks [--flow-schedule|--early-stopping|--print-logs JSON | "
                        "--state-roundtrip IN OUT]\n");
        return 2;
    }
    ct_test_begin("test_callbacks");
    ct_rng_init(&rng, ct_test_seed, 0, 0);
    test_flow_table();
    test_flow_stops();
    test_early_stopping();
    return ct_test_finish();
}
