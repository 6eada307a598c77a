/* The Trainer end to end on small in-memory data:
 *  - gradient accumulation is exact: batch 96 equals 32 x 3 accumulation steps (loss of every step
 *    and final weights), with ignored targets making the micro-batches' counts differ, so averaging
 *    per-micro-batch means would NOT match (checked, so the test can fail);
 *  - the firing schedule of logging, evaluation and saving for a table of strategies, computed by
 *    hand from Hugging Face's rules (steps, epochs, ratios, eval_delay, logging_first_step, max_steps
 *    overriding epochs, accumulation with a short last group, eval_on_start, save_strategy best);
 *  - the order of callback events; early stopping; checkpoint rotation keeping the best;
 *  - the output_dir lock: a second trainer is refused while the first is alive, then resumes after
 *    cleaning what a dead run left;
 *  - a subclass overriding a hook and calling the default ("super");
 *  - the files written to output_dir.
 *
 * Why one file of over 600 lines: every check is a run of the same Trainer on the same small data
 * and model, through one run helper and recording callback. */
#include <math.h>
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

/* Every kind of built-in metric, for the batch-size independence check. */
#define EVAL_METRICS "[\"accuracy\", \"top_2_accuracy\", \"f1_macro\", \"f1_per_class\", \"precision_weighted\", \"recall_micro\", \"mcc\", \"balanced_accuracy\", \"confusion_matrix\", \"auroc\", \"average_precision\"]"

/* --- data and model ------------------------------------------------------------------------------ */

/* n samples of dim features, labels in [0, classes) with about `ignored` of them -100. */
static ct_dataset *make_data(int64_t n, int64_t dim, int64_t classes, double ignored, ct_dtype dt, uint64_t seed) {
    return ct_fixture_dataset(&(ct_fixture_data){.kind = CT_FIXTURE_IGNORED, .n = n, .dim = dim, .classes = classes,
                                                 .seed = seed, .dtype = dt, .ignored = ignored});
}

static ct_status make_model(ct_model *m, int64_t dim, int64_t classes, ct_dtype dt, int64_t max_batch) {
    ct_fixture_mlp o = {.dim = dim, .classes = classes, .hidden = {16}, .dtype = dt, .max_batch = max_batch, .seed = 7};
    return ct_fixture_mlp_build(&o, m);
}

/* Arguments for a quiet test run writing under tmp_root/name. */
static void test_args(ct_training_args *a, const char *name) {
    ct_training_args_default(a);
    snprintf(a->output_dir, sizeof a->output_dir, "%s/%s", tmp_root, name);
    a->disable_tqdm = true;
    a->save_strategy = CT_INTERVAL_NO;
    a->logging_strategy = CT_INTERVAL_NO;
    a->learning_rate = 1e-2;
    a->per_device_train_batch_size = 10;
    a->per_device_eval_batch_size = 16;
    a->num_train_epochs = 1;
}

/* --- a recording subclass and callback -------------------------------------------------------------- */

#define MAX_REC 512

typedef struct rec_trainer {
    ct_trainer base;
    ct_loss_value step[MAX_REC];   /* (sum, count) of each optimizer step */
    double naive[MAX_REC];         /* sum of the micro-batches' means of each step */
    int micro[MAX_REC];
    int super_calls;
} rec_trainer;

static ct_status rec_training_step(ct_trainer *t, const ct_batch *b, ct_loss_value *loss) {
    rec_trainer *r = ct_container_of(t, rec_trainer, base);
    r->super_calls++;
    CT_TRY(ct_trainer_default_training_step(t, b, loss));
    int64_t g = t->state.global_step;
    if (g < MAX_REC) {
        r->step[g] = ct_loss_value_add(r->step[g], *loss);
        r->naive[g] += loss->sum / loss->count;
        r->micro[g]++;
    }
    return CT_OK;
}

/* Hugging Face's compute_metrics: accuracy recomputed from every output and label of the set, plus
 * a check that they arrive in dataset order (row i's label is the dataset's label i). */
static ct_dataset *order_reference;
static int compute_metrics_calls;

static ct_status rec_compute_metrics(ct_trainer *t, const ct_prediction_output *p, const char *prefix,
                                     json_t *metrics) {
    (void)t;
    compute_metrics_calls++;
    int64_t n = p->predictions.shape[0], c = p->predictions.shape[1], correct = 0, in_order = 0;
    const float *z = p->predictions.data;
    const int64_t *y = p->label_ids.data;
    ct_tensor fx, fy;
    CT_TRY(ct_dataset_alloc_batch(order_reference, n, &fx, &fy));
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    for (int64_t i = 0; i < n; i++) idx[i] = i;
    ct_fetch_ctx ctx = {0};
    ct_status s = ct_dataset_get_batch(order_reference, idx, n, &ctx, &fx, &fy);
    for (int64_t i = 0; s == CT_OK && i < n; i++) {
        int64_t best = 0;
        for (int64_t k = 1; k < c; k++)
            if (z[i * c + k] > z[i * c + best]) best = k;
        correct += best == y[i];
        in_order += y[i] == ((int64_t *)fy.data)[i];
    }
    free(idx);
    ct_tensor_free(&fx);
    ct_tensor_free(&fy);
    CT_TRY(s);
    char key[64];
    snprintf(key, sizeof key, "%s_my_accuracy", prefix);
    json_object_set_new(metrics, key, json_real((double)correct / (double)n));
    snprintf(key, sizeof key, "%s_labels_in_order", prefix);
    json_object_set_new(metrics, key, json_integer(in_order == n));
    return CT_OK;
}

static const ct_trainer_ops rec_ops = {.size = sizeof(ct_trainer_ops), .training_step = rec_training_step};
static const ct_trainer_ops metrics_ops = {.size = sizeof(ct_trainer_ops), .compute_metrics = rec_compute_metrics};

typedef struct recorder {
    ct_callback base;
    char events[4096];
    int64_t logs[MAX_REC], evals[MAX_REC], saves[MAX_REC];
    int n_logs, n_evals, n_saves;
} recorder;

static recorder *rec_of(ct_callback *cb) { return ct_container_of(cb, recorder, base); }

static void note(ct_callback *cb, const char *what) {
    recorder *r = rec_of(cb);
    size_t len = strlen(r->events);
    snprintf(r->events + len, sizeof r->events - len, "%s%s", len ? " " : "", what);
}

#define EVENT(name)                                                                                                \
    static ct_status on_##name(ct_callback *cb, const ct_callback_args *a) {                                       \
        (void)a;                                                                                                   \
        note(cb, #name);                                                                                           \
        return CT_OK;                                                                                              \
    }
EVENT(init_end)
EVENT(train_begin)
EVENT(train_end)
EVENT(epoch_begin)
EVENT(epoch_end)
EVENT(step_begin)
EVENT(substep_end)
EVENT(pre_optimizer_step)
EVENT(optimizer_step)
EVENT(step_end)
EVENT(predict)
EVENT(prediction_step)

static ct_status on_log(ct_callback *cb, const ct_callback_args *a) {
    note(cb, "log");
    recorder *r = rec_of(cb);
    if (json_object_get(a->logs, "loss") && r->n_logs < MAX_REC) r->logs[r->n_logs++] = a->state->global_step;
    return CT_OK;
}

static ct_status on_evaluate(ct_callback *cb, const ct_callback_args *a) {
    note(cb, "evaluate");
    recorder *r = rec_of(cb);
    if (r->n_evals < MAX_REC) r->evals[r->n_evals++] = a->state->global_step;
    return CT_OK;
}

static ct_status on_save(ct_callback *cb, const ct_callback_args *a) {
    note(cb, "save");
    recorder *r = rec_of(cb);
    if (r->n_saves < MAX_REC) r->saves[r->n_saves++] = a->state->global_step;
    return CT_OK;
}

static const ct_callback_ops recorder_ops = {
    .size = sizeof(ct_callback_ops),
    .name = "recorder",
    .on_init_end = on_init_end,
    .on_train_begin = on_train_begin,
    .on_train_end = on_train_end,
    .on_epoch_begin = on_epoch_begin,
    .on_epoch_end = on_epoch_end,
    .on_step_begin = on_step_begin,
    .on_substep_end = on_substep_end,
    .on_pre_optimizer_step = on_pre_optimizer_step,
    .on_optimizer_step = on_optimizer_step,
    .on_step_end = on_step_end,
    .on_evaluate = on_evaluate,
    .on_predict = on_predict,
    .on_save = on_save,
    .on_log = on_log,
    .on_prediction_step = on_prediction_step,
};

/* A run: data, model, trainer with the recorder installed before on_init_end. */
typedef struct run {
    ct_dataset *train, *eval;
    ct_model model;
    rec_trainer t;
    recorder *rec;
    ct_train_output out;
} run;

static ct_status run_start(run *r, const ct_training_args *a, int64_t n, ct_dtype dt, double ignored,
                           ct_callback *extra) {
    memset(r, 0, sizeof *r);
    r->train = make_data(n, 6, 4, ignored, dt, 11);
    r->eval = make_data(37, 6, 4, 0, dt, 12);
    int64_t mb = a->per_device_train_batch_size > a->per_device_eval_batch_size ? a->per_device_train_batch_size
                                                                                  : a->per_device_eval_batch_size;
    CT_TRY(make_model(&r->model, 6, 4, dt, mb));
    r->rec = calloc(1, sizeof *r->rec);
    r->rec->base.ops = &recorder_ops;
    ct_callback_list cbs = {0};
    CT_TRY(ct_callback_list_add(&cbs, &r->rec->base));
    if (extra) CT_TRY(ct_callback_list_add(&cbs, extra));
    ct_trainer_setup s = {.model = &r->model, .train_dataset = r->train, .n_eval = 1, .callbacks = &cbs};
    s.eval_datasets[0] = r->eval;
    ct_status st = ct_trainer_init(&r->t.base, &rec_ops, a, &s);
    ct_callback_list_free(&cbs);
    return st;
}

static void run_free(run *r) {
    ct_train_output_free(&r->out);
    ct_trainer_free(&r->t.base);
    ct_model_free(&r->model);
    ct_dataset_free(r->train);
    ct_dataset_free(r->eval);
}

/* --- accumulation -------------------------------------------------------------------------------------- */

static void test_accumulation(ct_dtype dt, double tol) {
    const char *label = dt == CT_F32 ? "f32" : "f64";
    ct_training_args a;
    test_args(&a, "accumulation");
    a.per_device_train_batch_size = 96;
    a.num_train_epochs = 2;
    a.max_grad_norm = 0.5; /* clipping sees the scaled gradients: the same either way */
    a.warmup_steps = 2;
    run big, small;
    CHECK_OK(run_start(&big, &a, 960, dt, 0.3, NULL));
    CHECK_OK(ct_trainer_train(&big.t.base, NULL, &big.out));
    a.per_device_train_batch_size = 32;
    a.gradient_accumulation_steps = 3;
    /* big still holds its output_dir (a trainer keeps it locked until freed) */
    snprintf(a.output_dir, sizeof a.output_dir, "%s/accumulation_small", tmp_root);
    CHECK_OK(run_start(&small, &a, 960, dt, 0.3, NULL));
    CHECK_OK(ct_trainer_train(&small.t.base, NULL, &small.out));
    int64_t steps = big.t.base.state.global_step;
    CHECK(steps == 20 && small.t.base.state.global_step == 20, "%s: steps %lld and %lld, expected 20", label,
          (long long)steps, (long long)small.t.base.state.global_step);
    double naive_gap = 0;
    for (int64_t g = 0; g < steps && g < MAX_REC; g++) {
        double want = big.t.step[g].sum / big.t.step[g].count, got = small.t.step[g].sum / small.t.step[g].count;
        CHECK(fabs(got - want) <= tol * fabs(want), "%s step %lld: loss %.17g with accumulation vs %.17g", label,
              (long long)g, got, want);
        CHECK(big.t.micro[g] == 1 && small.t.micro[g] == 3, "%s step %lld: %d and %d micro-batches", label,
              (long long)g, big.t.micro[g], small.t.micro[g]);
        naive_gap = fmax(naive_gap, fabs(small.t.naive[g] / 3 - want) / fabs(want));
    }
    CHECK(naive_gap > 1e-3, "%s: averaging the micro-batches' means also matches (gap %.3g): the test proves nothing",
          label, naive_gap);
    const ct_tensor *pb = &big.model.params.values, *ps = &small.model.params.values;
    double worst = 0;
    for (int64_t i = 0; i < pb->shape[0]; i++) {
        double x = dt == CT_F32 ? ((float *)pb->data)[i] : ((double *)pb->data)[i];
        double y = dt == CT_F32 ? ((float *)ps->data)[i] : ((double *)ps->data)[i];
        worst = fmax(worst, fabs(x - y) / fmax(fabs(x), 1e-3));
    }
    CHECK(worst <= tol * 10, "%s: final weights differ by %.3g relative", label, worst);
    CHECK(big.t.super_calls == 20 && small.t.super_calls == 60, "%s: training_step override called %d / %d times",
          label, big.t.super_calls, small.t.super_calls);
    run_free(&big);
    run_free(&small);
    ct_training_args_free(&a);
}

/* --- the firing schedule --------------------------------------------------------------------------------- */

typedef struct schedule_case {
    const char *name;
    /* settings */
    double epochs;
    int64_t max_steps, ga;
    ct_interval log_s, eval_s, save_s;
    double log_steps, eval_steps, save_steps, eval_delay;
    bool first_step, eval_on_start, lr_zero;
    /* expected global steps, terminated by -1 */
    int64_t logs[24], evals[24], saves[24];
    int64_t final_step;
} schedule_case;

#define NO CT_INTERVAL_NO
#define STEPS CT_INTERVAL_STEPS
#define EPOCH CT_INTERVAL_EPOCH
#define BEST CT_INTERVAL_BEST

/* 100 samples, batch 10: 10 batches per epoch. */
static const schedule_case schedule[] = {
    {"log every 5 steps, 2 epochs", 2, -1, 1, STEPS, NO, NO, 5, 0, 500, 0, false, false, false,
     {5, 10, 15, 20, -1}, {-1}, {-1}, 20},
    {"max_steps 7 overrides 3 epochs; log 2, eval 3, save 4 (and at the end)", 3, 7, 1, STEPS, STEPS, STEPS, 2, 3, 4,
     0, false, false, false, {2, 4, 6, -1}, {3, 6, -1}, {4, 7, -1}, 7},
    {"ratios of max_steps 20: log 0.25 -> 5, eval 0.3 -> 6, save 0.5 -> 10", 1, 20, 1, STEPS, STEPS, STEPS, 0.25, 0.3,
     0.5, 0, false, false, false, {5, 10, 15, 20, -1}, {6, 12, 18, -1}, {10, 20, -1}, 20},
    {"epoch strategies over 3 epochs", 3, -1, 1, EPOCH, EPOCH, EPOCH, 500, 0, 500, 0, false, false, false,
     {10, 20, 30, -1}, {10, 20, 30, -1}, {10, 20, 30, -1}, 30},
    {"eval every 2 steps after a delay of 5 steps", 1, -1, 1, NO, STEPS, NO, 500, 2, 500, 5, false, false, false,
     {-1}, {6, 8, 10, -1}, {-1}, 10},
    {"eval each epoch after a delay of 1.5 epochs", 3, -1, 1, NO, EPOCH, NO, 500, 0, 500, 1.5, false, false, false,
     {-1}, {20, 30, -1}, {-1}, 30},
    {"logging_first_step with logging every 4 of 9 steps", 1, 9, 1, STEPS, NO, NO, 4, 0, 500, 0, true, false, false,
     {1, 4, 8, -1}, {-1}, {-1}, 9},
    {"eval_steps unset falls back to logging_steps 3", 1, -1, 1, STEPS, STEPS, NO, 3, 0, 500, 0, false, false, false,
     {3, 6, 9, -1}, {3, 6, 9, -1}, {-1}, 10},
    /* 10 batches, accumulation 3: max_steps = 2 x (10 // 3) = 6, but an epoch steps 4 times (3+3+3+1),
     * so the run ends at step 6, two steps into the second epoch. */
    {"accumulation 3 with a short last group", 2, -1, 3, STEPS, EPOCH, NO, 1, 0, 500, 0, false, false, false,
     {1, 2, 3, 4, 5, 6, -1}, {4, 6, -1}, {-1}, 6},
    {"eval_on_start, then each epoch", 2, -1, 1, NO, EPOCH, NO, 500, 0, 500, 0, false, true, false,
     {-1}, {0, 10, 20, -1}, {-1}, 20},
    /* learning rate 0: the loss never changes, so only the first evaluation is a new best. */
    {"save_strategy best saves only on a new best", 1, 8, 1, NO, STEPS, BEST, 500, 2, 500, 0, false, false, true,
     {-1}, {2, 4, 6, 8, -1}, {2, -1}, 8},
};

static void check_steps(const char *name, const char *what, const int64_t *got, int n, const int64_t *want) {
    int m = 0;
    while (want[m] >= 0) m++;
    bool same = n == m;
    for (int i = 0; same && i < n; i++) same = got[i] == want[i];
    char g[256] = "", w[256] = "";
    for (int i = 0; i < n && strlen(g) < 200; i++) snprintf(g + strlen(g), sizeof g - strlen(g), " %lld", (long long)got[i]);
    for (int i = 0; i < m; i++) snprintf(w + strlen(w), sizeof w - strlen(w), " %lld", (long long)want[i]);
    CHECK(same, "%s: %s at steps [%s ] expected [%s ]", name, what, g, w);
}

static void test_schedule(void) {
    for (size_t k = 0; k < CT_ARRAY_LEN(schedule); k++) {
        const schedule_case *c = &schedule[k];
        ct_training_args a;
        test_args(&a, "schedule");
        a.num_train_epochs = c->epochs;
        a.max_steps = c->max_steps;
        a.gradient_accumulation_steps = c->ga;
        a.logging_strategy = c->log_s;
        a.eval_strategy = c->eval_s;
        a.save_strategy = c->save_s;
        a.logging_steps = c->log_steps;
        a.eval_steps = c->eval_steps;
        a.save_steps = c->save_steps;
        a.eval_delay = c->eval_delay;
        a.logging_first_step = c->first_step;
        a.eval_on_start = c->eval_on_start;
        if (c->lr_zero) a.learning_rate = 0;
        if (c->save_s == BEST) snprintf(a.metric_for_best_model, sizeof a.metric_for_best_model, "loss");
        run r;
        ct_status s = run_start(&r, &a, 100, CT_F32, 0, NULL);
        CHECK(s == CT_OK, "%s: init: %s", c->name, ct_last_error());
        if (s == CT_OK) {
            s = ct_trainer_train(&r.t.base, NULL, &r.out);
            CHECK(s == CT_OK, "%s: train: %s", c->name, ct_last_error());
            check_steps(c->name, "logs", r.rec->logs, r.rec->n_logs, c->logs);
            check_steps(c->name, "evaluations", r.rec->evals, r.rec->n_evals, c->evals);
            check_steps(c->name, "saves", r.rec->saves, r.rec->n_saves, c->saves);
            CHECK(r.t.base.state.global_step == c->final_step, "%s: ended at step %lld, expected %lld", c->name,
                  (long long)r.t.base.state.global_step, (long long)c->final_step);
        }
        run_free(&r);
        ct_training_args_free(&a);
    }
}

/* --- event order -------------------------------------------------------------------------------------- */

static void test_event_order(void) {
    ct_training_args a;
    test_args(&a, "events");
    a.gradient_accumulation_steps = 2;
    a.eval_strategy = CT_INTERVAL_EPOCH;
    a.per_device_eval_batch_size = 20; /* 37 samples: 2 evaluation batches */
    run r;
    CHECK_OK(run_start(&r, &a, 40, CT_F32, 0, NULL)); /* 4 batches: 2 optimizer steps */
    CHECK_OK(ct_trainer_train(&r.t.base, NULL, &r.out));
    const char *want = "init_end train_begin epoch_begin "
                       "step_begin substep_end pre_optimizer_step optimizer_step step_end "
                       "step_begin substep_end pre_optimizer_step optimizer_step step_end "
                       "epoch_end prediction_step prediction_step log evaluate log train_end";
    CHECK(strcmp(r.rec->events, want) == 0, "events:\n  got  %s\n  want %s", r.rec->events, want);
    /* predict fires on_predict after its prediction steps */
    r.rec->events[0] = '\0';
    ct_prediction_output p;
    CHECK_OK(ct_trainer_predict(&r.t.base, r.eval, "test", &p));
    CHECK(strcmp(r.rec->events, "prediction_step prediction_step predict") == 0, "predict events: %s", r.rec->events);
    CHECK(p.predictions.ndim == 2 && p.predictions.shape[0] == 37 && p.predictions.shape[1] == 4,
          "predictions shape");
    CHECK(json_is_number(json_object_get(p.metrics, "test_loss")) &&
              json_is_number(json_object_get(p.metrics, "test_runtime")),
          "predict metrics lack test_loss / test_runtime");
    ct_prediction_output_free(&p);
    run_free(&r);
    ct_training_args_free(&a);
}

/* --- early stopping ------------------------------------------------------------------------------------- */

static void test_early_stopping(void) {
    ct_training_args a;
    test_args(&a, "early");
    a.learning_rate = 0; /* the metric never improves after the first evaluation */
    a.num_train_epochs = 5;
    a.eval_strategy = CT_INTERVAL_STEPS;
    a.eval_steps = 2;
    a.save_strategy = CT_INTERVAL_STEPS;
    a.save_steps = 2;
    a.load_best_model_at_end = true;
    ct_callback *es;
    CHECK_OK(ct_early_stopping_callback_create(2, 0.0, &es));
    run r;
    CHECK_OK(run_start(&r, &a, 100, CT_F32, 0, es));
    CHECK_OK(ct_trainer_train(&r.t.base, NULL, &r.out));
    /* evaluation 1 (step 2) is the best; 2 and 3 do not improve: patience 2 runs out at step 6 */
    CHECK(r.t.base.state.global_step == 6, "early stopping ended at step %lld, expected 6",
          (long long)r.t.base.state.global_step);
    CHECK(r.t.base.state.best_global_step == 2, "best step %lld", (long long)r.t.base.state.best_global_step);
    char best[512];
    snprintf(best, sizeof best, "%s/checkpoint-2", a.output_dir);
    CHECK(strcmp(r.t.base.state.best_model_checkpoint, best) == 0, "best_model_checkpoint '%s'",
          r.t.base.state.best_model_checkpoint);
    run_free(&r);
    ct_training_args_free(&a);
}

/* --- rotation ----------------------------------------------------------------------------------------- */

static bool exists(const char *dir, const char *name) {
    char p[1024];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &st) == 0;
}

static void test_rotation(int64_t limit, const char *const *keep, const char *const *gone) {
    ct_training_args a;
    test_args(&a, limit == 1 ? "rotate1" : "rotate2");
    a.learning_rate = 0; /* the first evaluation stays the best: the best checkpoint is the oldest */
    a.max_steps = 10;
    a.eval_strategy = CT_INTERVAL_STEPS;
    a.eval_steps = 2;
    a.save_strategy = CT_INTERVAL_STEPS;
    a.save_steps = 2;
    a.save_total_limit = limit;
    a.load_best_model_at_end = true;
    run r;
    CHECK_OK(run_start(&r, &a, 100, CT_F32, 0, NULL));
    CHECK_OK(ct_trainer_train(&r.t.base, NULL, &r.out));
    for (int i = 0; keep[i]; i++)
        CHECK(exists(a.output_dir, keep[i]), "save_total_limit %lld: %s was deleted", (long long)limit, keep[i]);
    for (int i = 0; gone[i]; i++)
        CHECK(!exists(a.output_dir, gone[i]), "save_total_limit %lld: %s was kept", (long long)limit, gone[i]);
    CHECK(exists(a.output_dir, "checkpoint-2/model.h5") && exists(a.output_dir, "checkpoint-2/trainer_state.json"),
          "checkpoint-2 lacks model.h5 or trainer_state.json");
    run_free(&r);
    ct_training_args_free(&a);
}

/* --- the output_dir lock ------------------------------------------------------------------------------ */

/* A trainer that trained keeps its output_dir locked until it is freed: a second one is refused
 * before it reads or deletes anything there; once the first is freed, the second resumes, after
 * deleting what a dead run left (.tmp, .deleting), and its own end leaves no lock file. */
static void test_output_dir_lock(void) {
    ct_training_args a;
    test_args(&a, "locked");
    a.max_steps = 4;
    a.save_strategy = CT_INTERVAL_STEPS;
    a.save_steps = 2;
    run first, second;
    CHECK_OK(run_start(&first, &a, 100, CT_F32, 0, NULL));
    CHECK_OK(ct_trainer_train(&first.t.base, NULL, &first.out));
    char p[1024];
    const char *leftovers[] = {"checkpoint-9.tmp", "checkpoint-1.deleting"};
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", a.output_dir, leftovers[i]);
        CHECK(mkdir(p, 0755) == 0, "cannot make %s", p);
    }
    CHECK_OK(run_start(&second, &a, 100, CT_F32, 0, NULL));
    CHECK_ERR(ct_trainer_train(&second.t.base, "latest", &second.out), CT_ERR_STATE, "is in use by another run",
              "another trainer of this very process", ".ctrainer.lock");
    CHECK(exists(a.output_dir, "checkpoint-9.tmp") && exists(a.output_dir, "checkpoint-1.deleting") &&
              exists(a.output_dir, "checkpoint-2") && exists(a.output_dir, "checkpoint-4") &&
              exists(a.output_dir, ".ctrainer.lock"),
          "a refused run changed the output_dir of the run holding it");
    run_free(&first);
    CHECK(!exists(a.output_dir, ".ctrainer.lock"), "the freed trainer left its lock file");
    CHECK_OK(ct_trainer_train(&second.t.base, "latest", &second.out));
    CHECK(second.t.base.state.global_step == 4, "resumed at step %lld", (long long)second.t.base.state.global_step);
    CHECK(!exists(a.output_dir, "checkpoint-9.tmp") && !exists(a.output_dir, "checkpoint-1.deleting"),
          "the leftovers of a dead run were not cleaned");
    CHECK(exists(a.output_dir, "checkpoint-2") && exists(a.output_dir, "checkpoint-4"), "a checkpoint was lost");
    run_free(&second);
    CHECK(!exists(a.output_dir, ".ctrainer.lock"), "the second trainer left its lock file");
    ct_training_args_free(&a);
}

/* --- compute_metrics ------------------------------------------------------------------------------------ */

static void test_compute_metrics(void) {
    ct_training_args a;
    test_args(&a, "compute_metrics");
    a.per_device_eval_batch_size = 5; /* 37 samples: the last batch is short */
    ct_dataset *train = make_data(60, 6, 4, 0, CT_F32, 3), *eval = make_data(37, 6, 4, 0, CT_F32, 4);
    ct_model m;
    CHECK_OK(make_model(&m, 6, 4, CT_F32, 10));
    json_t *list = json_pack("[s]", "accuracy");
    ct_trainer_setup setup = {.model = &m, .train_dataset = train, .n_eval = 1, .metrics = list};
    setup.eval_datasets[0] = eval;
    ct_trainer t;
    CHECK_OK(ct_trainer_init(&t, &metrics_ops, &a, &setup));
    order_reference = eval;
    compute_metrics_calls = 0;
    ct_train_output out;
    CHECK_OK(ct_trainer_train(&t, NULL, &out));
    json_t *metrics = NULL;
    CHECK_OK(ct_trainer_evaluate(&t, NULL, "eval", &metrics));
    CHECK(compute_metrics_calls == 1, "compute_metrics called %d times", compute_metrics_calls);
    CHECK(json_integer_value(json_object_get(metrics, "eval_labels_in_order")) == 1,
          "compute_metrics did not get the labels in dataset order");
    double mine = json_number_value(json_object_get(metrics, "eval_my_accuracy")),
           theirs = json_number_value(json_object_get(metrics, "eval_accuracy"));
    CHECK(mine == theirs && json_is_number(json_object_get(metrics, "eval_accuracy")),
          "compute_metrics' accuracy %.17g != the accuracy metric's %.17g", mine, theirs);
    /* every metric comes with an uncertainty: accuracy's closed form, the loss's from per-row losses */
    const char *keys[] = {"eval_accuracy_stderr", "eval_accuracy_ci_low", "eval_accuracy_ci_high",
                          "eval_loss_stderr", "eval_loss_ci_low", "eval_loss_ci_high", NULL};
    for (int i = 0; keys[i]; i++) CHECK(json_is_number(json_object_get(metrics, keys[i])), "metrics lack %s", keys[i]);
    double lo = json_number_value(json_object_get(metrics, "eval_loss_ci_low")),
           hi = json_number_value(json_object_get(metrics, "eval_loss_ci_high")),
           loss = json_number_value(json_object_get(metrics, "eval_loss"));
    CHECK(lo < loss && loss < hi, "eval_loss %g outside its interval [%g, %g]", loss, lo, hi);
    json_decref(metrics);
    ct_prediction_output p;
    CHECK_OK(ct_trainer_predict(&t, eval, "test", &p));
    CHECK(compute_metrics_calls == 2 && json_is_number(json_object_get(p.metrics, "test_my_accuracy")),
          "predict did not call compute_metrics");
    ct_prediction_output_free(&p);
    ct_train_output_free(&out);
    ct_trainer_free(&t);
    json_decref(list);
    ct_model_free(&m);
    ct_dataset_free(train);
    ct_dataset_free(eval);
    ct_training_args_free(&a);
}

/* --- evaluation does not depend on the eval batch size ------------------------------------------------- */

/* The metrics of `list` on one eval set of 203 samples, with eval batch size bs. */
static json_t *evaluate_with_batch(int64_t bs, const json_t *list) {
    ct_training_args a;
    test_args(&a, "eval_batch");
    a.per_device_eval_batch_size = bs;
    ct_dataset *eval = make_data(203, 6, 4, 0, CT_F32, 21);
    ct_model m;
    json_t *metrics = NULL;
    if (make_model(&m, 6, 4, CT_F32, bs) != CT_OK) abort();
    ct_trainer_setup setup = {.model = &m, .n_eval = 1, .metrics = list};
    setup.eval_datasets[0] = eval;
    ct_trainer t;
    CHECK_OK(ct_trainer_init(&t, NULL, &a, &setup));
    CHECK_OK(ct_trainer_evaluate(&t, NULL, "eval", &metrics));
    ct_trainer_free(&t);
    ct_model_free(&m);
    ct_dataset_free(eval);
    ct_training_args_free(&a);
    return metrics;
}

static bool is_speed_key(const char *k) {
    return strstr(k, "_runtime") || strstr(k, "_per_second");
}

static void test_eval_batch_independence(void) {
    json_t *list = json_loads(EVAL_METRICS, 0, NULL);
    CHECK(list != NULL, "bad metric list");
    json_t *ref = evaluate_with_batch(64, list);
    const int64_t sizes[] = {1, 7, 203, 250};
    for (size_t i = 0; ref && i < CT_ARRAY_LEN(sizes); i++) {
        json_t *m = evaluate_with_batch(sizes[i], list);
        const char *k;
        json_t *v;
        int compared = 0;
        json_object_foreach(ref, k, v) {
            if (is_speed_key(k)) continue;
            json_t *w = json_object_get(m, k);
            compared++;
            if (json_is_number(v) && json_is_number(w)) {
                double x = json_number_value(v), y = json_number_value(w);
                /* counts are exact; float64 sums may differ in the last bits with the summation order */
                CHECK(fabs(x - y) <= 1e-12 * fmax(fabs(x), 1e-300), "eval batch %lld: %s = %.17g vs %.17g with batch 64",
                      (long long)sizes[i], k, y, x);
            } else {
                CHECK(json_equal(v, w), "eval batch %lld: %s differs from batch 64's", (long long)sizes[i], k);
            }
        }
        CHECK(compared >= 8, "only %d metrics compared", compared);
        json_decref(m);
    }
    json_decref(ref);
    json_decref(list);
}

/* --- outputs ------------------------------------------------------------------------------------------- */

static void test_outputs(void) {
    ct_training_args a;
    test_args(&a, "outputs");
    a.logging_strategy = CT_INTERVAL_STEPS;
    a.logging_steps = 5;
    a.eval_strategy = CT_INTERVAL_EPOCH;
    a.num_train_epochs = 2;
    run r;
    CHECK_OK(run_start(&r, &a, 95, CT_F32, 0, NULL)); /* 10 batches an epoch, the last one short */
    CHECK_OK(ct_trainer_train(&r.t.base, NULL, &r.out));
    CHECK_OK(ct_trainer_save_model(&r.t.base, NULL));
    CHECK_OK(ct_trainer_save_state(&r.t.base));
    CHECK_OK(ct_trainer_save_metrics(&r.t.base, "train", r.out.metrics));
    const char *keys[] = {"train_runtime", "train_samples_per_second", "train_steps_per_second", "total_flos",
                          "train_loss", "epoch", NULL};
    for (int i = 0; keys[i]; i++)
        CHECK(json_is_number(json_object_get(r.out.metrics, keys[i])), "train metrics lack %s", keys[i]);
    /* Hugging Face counts an epoch-based run's samples as the set's size times num_train_epochs (190),
     * not its steps' full batches (200) */
    double per_step = json_number_value(json_object_get(r.out.metrics, "train_samples_per_second")) /
                      json_number_value(json_object_get(r.out.metrics, "train_steps_per_second"));
    /* total_flos as Hugging Face's PreTrainedModel counts it: 6 x parameters x the input's elements
     * (the 190 samples' features) */
    double flos = json_number_value(json_object_get(r.out.metrics, "total_flos"));
    double elems = 190.0 * (double)ct_shape_numel(&r.t.base.train_dataset->spec.feature_shape);
    double want_flos = 6.0 * (double)ct_params_count(&r.t.base.model->params) * elems;
    CHECK(fabs(flos - want_flos) <= 1e-12 * want_flos, "total_flos %.17g, want 6 x %lld x %g = %.17g", flos,
          (long long)ct_params_count(&r.t.base.model->params), elems, want_flos);
    double want = 190.0 / (double)r.t.base.state.max_steps;
    CHECK(fabs(per_step - want) <= 1e-3 * want, "samples per step %g, want 95 x 2 epochs / %lld steps = %g", per_step,
          (long long)r.t.base.state.max_steps, want);
    char path[1024];
    snprintf(path, sizeof path, "%s/trainer_state.json", a.output_dir);
    json_error_t err;
    json_t *st = json_load_file(path, 0, &err);
    CHECK(st != NULL, "trainer_state.json: %s", err.text);
    const char *fields[] = {"global_step", "epoch", "max_steps", "log_history", "best_metric", "best_model_checkpoint",
                            "total_flos", "logging_steps", "eval_steps", "save_steps", "train_batch_size", NULL};
    for (int i = 0; st && fields[i]; i++) CHECK(json_object_get(st, fields[i]) != NULL, "trainer_state lacks %s", fields[i]);
    json_t *hist = st ? json_object_get(st, "log_history") : NULL;
    /* 4 loss logs, 2 evaluations, the train summary */
    CHECK(json_array_size(hist) == 7, "log_history has %zu entries, expected 7", json_array_size(hist));
    json_t *first = json_array_get(hist, 0);
    CHECK(json_is_number(json_object_get(first, "loss")) && json_is_number(json_object_get(first, "learning_rate")) &&
              json_is_number(json_object_get(first, "grad_norm")) &&
              json_integer_value(json_object_get(first, "step")) == 5 &&
              fabs(json_number_value(json_object_get(first, "epoch")) - 0.5) < 1e-12,
          "first log entry lacks loss / learning_rate / grad_norm, or step 5 at epoch 0.5");
    json_t *eval = json_array_get(hist, 2);
    CHECK(json_is_number(json_object_get(eval, "eval_loss")) && json_is_number(json_object_get(eval, "eval_runtime")) &&
              json_integer_value(json_object_get(eval, "step")) == 10,
          "third log entry is not the evaluation at step 10");
    json_decref(st);
    CHECK(exists(a.output_dir, "model.h5") && exists(a.output_dir, "training_args.json") &&
              exists(a.output_dir, "train_results.json") && exists(a.output_dir, "all_results.json"),
          "output_dir lacks model.h5, training_args.json, train_results.json or all_results.json");
    run_free(&r);
    ct_training_args_free(&a);
}

/* A failed ct_trainer_init leaves nothing to free and a trainer that ct_trainer_free accepts: every
 * early exit (no model, invalid arguments, with and without the memory report) goes through the
 * same clean-up as a trainer that was built, whose private state may then be half made. */
static void test_failed_init(void) {
    ct_model m;
    if (make_model(&m, 6, 4, CT_F32, 8) != CT_OK) abort();
    for (int memory = 0; memory < 2; memory++) {
        ct_training_args a;
        test_args(&a, "failed_init");
        a.skip_memory_metrics = !memory;
        ct_trainer t;
        CHECK_ERR(ct_trainer_init(&t, NULL, &a, &(ct_trainer_setup){0}), CT_ERR_INVALID_ARG, "trainer: no model");
        ct_trainer_free(&t);
        a.learning_rate = -1;
        CHECK_ERR(ct_trainer_init(&t, NULL, &a, &(ct_trainer_setup){.model = &m}), CT_ERR_CONFIG,
                  "learning_rate");
        ct_trainer_free(&t);
        ct_training_args_free(&a);
    }
    /* what can be known at the start is said at the start: an evaluation set without samples, an
     * output_dir that is a regular file */
    int64_t fshape[2] = {0, 6}, lshape[1] = {0};
    ct_tensor feats, labels;
    CHECK_OK(ct_tensor_alloc(&feats, CT_F32, CT_CPU, 2, fshape));
    CHECK_OK(ct_tensor_alloc(&labels, CT_I64, CT_CPU, 1, lshape));
    ct_dataset *empty = NULL;
    CHECK_OK(ct_tensor_dataset_create(&feats, &labels, 4, &empty));
    ct_training_args a;
    test_args(&a, "failed_init");
    ct_trainer t;
    CHECK_ERR(ct_trainer_init(&t, NULL, &a,
                              &(ct_trainer_setup){.model = &m, .n_eval = 1, .eval_datasets = {empty},
                                                  .eval_names = {"val"}}),
              CT_ERR_FORMAT, "evaluation set 'val'", "has no samples");
    ct_trainer_free(&t);
    /* an evaluation strategy with no set to evaluate, as Hugging Face's __init__ refuses it; a trainer
     * that only evaluates or predicts never reaches the strategy */
    ct_dataset *train = ct_fixture_small_data(16, 1);
    a.eval_strategy = CT_INTERVAL_STEPS;
    CHECK_ERR(ct_trainer_init(&t, NULL, &a, &(ct_trainer_setup){.model = &m, .train_dataset = train}),
              CT_ERR_CONFIG, "training_args.eval_strategy: is 'steps' but no evaluation dataset was given");
    ct_trainer_free(&t);
    CHECK_OK(ct_trainer_init(&t, NULL, &a, &(ct_trainer_setup){.model = &m}));
    ct_trainer_free(&t);
    a.eval_strategy = CT_INTERVAL_NO;
    ct_dataset_free(train);
    char file[600];
    snprintf(file, sizeof file, "%s/a_file", tmp_root);
    FILE *f = fopen(file, "w");
    if (f) fclose(f);
    snprintf(a.output_dir, sizeof a.output_dir, "%s", file);
    CHECK_ERR(ct_trainer_init(&t, NULL, &a, &(ct_trainer_setup){.model = &m}), CT_ERR_IO, "training_args.output_dir",
              "a_file' is a regular file, not a directory");
    ct_trainer_free(&t);
    ct_training_args_free(&a);
    ct_dataset_free(empty);
    ct_tensor_free(&feats);
    ct_tensor_free(&labels);
    ct_model_free(&m);
}

int main(void) {
    ct_test_begin("test_trainer");
    if (!(tmp_root = ct_fixture_tmp_root("ct_test_trainer"))) return 1;
    test_accumulation(CT_F32, 1e-6);
    test_accumulation(CT_F64, 1e-12);
    test_schedule();
    test_event_order();
    test_early_stopping();
    static const char *const keep2[] = {"checkpoint-2", "checkpoint-10", NULL};
    static const char *const gone2[] = {"checkpoint-4", "checkpoint-6", "checkpoint-8", NULL};
    test_rotation(2, keep2, gone2);
    /* limit 1: the best and the last are both kept while training; at the end only the best stays */
    static const char *const keep1[] = {"checkpoint-2", NULL};
    static const char *const gone1[] = {"checkpoint-4", "checkpoint-8", "checkpoint-10", NULL};
    test_rotation(1, keep1, gone1);
    test_output_dir_lock();
    test_outputs();
    test_compute_metrics();
    test_eval_batch_independence();
    test_failed_init();
    ct_fixture_cleanup();
    return ct_test_finish();
}
