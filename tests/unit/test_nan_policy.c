/* nan_inf_policy (trainer/train_loop.c, trainer/step_agree.c) on one process.
 *
 * A trainer subclass poisons chosen optimizer steps through its compute_loss hook, in one micro-batch
 * of the step (accumulation 2): a NaN loss with NaN gradients, an infinite gradient under a finite
 * loss, an infinite loss over finite gradients, or an empty step (every sample ignored: a count of 0,
 * which is no error). A watcher callback snapshots the weights, the optimizer's step count and the
 * learning rate at each step's begin and end. For every policy, with clipping on and off, plain and
 * ZeRO-1 (world 1):
 *   - error: the run fails with CT_ERR_NUMERIC naming the step, the quantity and the policy; the
 *     poisoned step changed no weight;
 *   - skip: the run goes to its end; a skipped step changes no weight, nor the optimizer's step
 *     count, nor the learning rate (the scheduler waits, as Hugging Face's under AMP), every other step
 *     changes the weights; the count of skipped steps is in the progress, the logs and the train
 *     metrics, and survives a crash and resume (then bit-identical to the uninterrupted run);
 *   - stop: the run fails naming the step and the checkpoint of the last good step, which verifies,
 *     holds the weights the run stopped with, and resumes (poison gone) to the very weights and log of
 *     a run that never met the poison; also at step 0 and with save_async.
 * Poisoned steps, modes and settings are drawn from the seed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/checkpoint_io.h"
#include "core/rng.h"
#include "core/util.h"
#include "model/layers.h"
#include "model/model_io.h"
#include "testlib.h"
#include "trainer/trainer_impl.h"
#include "trainer_fixture.h"
#include "trainer/trainer.h"

static const char *tmp_root; /* the fixture's temporary root */
static ct_rng rng;

#define MAX_STEPS 12

typedef enum poison { P_NONE, P_LOSS_NAN, P_GRAD_INF, P_LOSS_INF, P_EMPTY } poison;
static const char *const poison_names[] = {"none", "NaN loss", "inf gradient", "inf loss", "empty step"};

/* 6 -> 8 -> 3 with dropout, for batches up to 16. */
static const ct_fixture_mlp model_opts = {.dim = 6, .classes = 3, .hidden = {8}, .dropout = 0.1, .max_batch = 16, .seed = 5};

/* 80 samples, batch 10, accumulation 2: 4 optimizer steps per epoch; 12 steps in all. */
static void run_args(ct_training_args *a, const char *name) {
    ct_fixture_args(a, tmp_root, name);
    a->per_device_train_batch_size = 10;
    a->gradient_accumulation_steps = 2;
    a->max_steps = MAX_STEPS;
    a->learning_rate = 5e-3;
    a->warmup_steps = 2;
    a->logging_steps = 2;
    a->save_strategy = CT_INTERVAL_STEPS;
    a->save_steps = 4;
}

/* --- the poisoning trainer and the watcher ------------------------------------------------------- */

typedef struct nan_trainer {
    ct_trainer base;
    poison mode;
    uint64_t steps;  /* bit g: poison the optimizer step taken at global_step g */
    int64_t seen_step;
    int micro;       /* micro-batches of seen_step so far */
} nan_trainer;

static ct_status poisoned_compute_loss(ct_trainer *t, const ct_batch *b, ct_loss_value *loss, ct_tensor *outputs,
                                       ct_tensor *dloss) {
    nan_trainer *n = ct_container_of(t, nan_trainer, base);
    CT_TRY(ct_trainer_default_compute_loss(t, b, loss, outputs, dloss));
    if (!dloss) return CT_OK; /* evaluation */
    int64_t g = t->state.global_step;
    if (g != n->seen_step) {
        n->seen_step = g;
        n->micro = 0;
    }
    /* the second micro-batch of the step: the first one's gradients are finite already */
    if (n->micro++ != 1 || g >= 64 || !(n->steps >> g & 1)) return CT_OK;
    float *d = dloss->data;
    int64_t k = ct_tensor_numel(dloss);
    switch (n->mode) {
    case P_LOSS_NAN:
        loss->sum = NAN;
        for (int64_t i = 0; i < k; i++) d[i] = NAN;
        break;
    case P_GRAD_INF:
        d[k / 2] = INFINITY;
        break;
    case P_LOSS_INF:
        loss->sum = INFINITY;
        break;
    case P_EMPTY:
        *loss = (ct_loss_value){0, 0};
        memset(d, 0, (size_t)k * sizeof *d);
        break;
    case P_NONE:
        break;
    }
    return CT_OK;
}

static const ct_trainer_ops nan_ops = {.size = sizeof(ct_trainer_ops), .compute_loss = poisoned_compute_loss};

typedef struct watcher {
    ct_callback base;
    ct_tensor before;              /* the weights at the begin of the step in progress */
    bool changed[MAX_STEPS + 1];   /* step g changed the weights */
    int64_t optim_steps[MAX_STEPS + 1];
    double lr_begin[MAX_STEPS + 1], lr_end[MAX_STEPS + 1];
    int crash_at;                  /* > 0: fail at the end of this global_step (a simulated crash) */
} watcher;

static ct_status w_step_begin(ct_callback *cb, const ct_callback_args *a) {
    watcher *w = ct_container_of(cb, watcher, base);
    const ct_tensor *v = &a->trainer->model->params.values;
    if (!w->before.data) CT_TRY(ct_tensor_alloc(&w->before, v->dtype, CT_CPU, v->ndim, v->shape));
    memcpy(w->before.data, v->data, ct_tensor_nbytes(v));
    int64_t g = a->state->global_step;
    if (g <= MAX_STEPS) w->lr_begin[g] = ct_scheduler_lr(a->trainer->lr_scheduler);
    return CT_OK;
}

static ct_status w_step_end(ct_callback *cb, const ct_callback_args *a) {
    watcher *w = ct_container_of(cb, watcher, base);
    int64_t g = a->state->global_step - 1; /* the step just taken */
    const ct_tensor *v = &a->trainer->model->params.values;
    if (g >= 0 && g <= MAX_STEPS) {
        w->changed[g] = memcmp(w->before.data, v->data, ct_tensor_nbytes(v)) != 0;
        w->optim_steps[g] = a->trainer->optimizer->step;
        w->lr_end[g] = ct_scheduler_lr(a->trainer->lr_scheduler);
    }
    if (w->crash_at > 0 && a->state->global_step == w->crash_at) return ct_error(CT_ERR_IO, "simulated crash");
    return CT_OK;
}

static void w_destroy(ct_callback *cb) {
    watcher *w = ct_container_of(cb, watcher, base);
    ct_tensor_free(&w->before);
    free(w);
}

static const ct_callback_ops watcher_ops = {.size = sizeof(ct_callback_ops),
                                            .name = "watcher",
                                            .on_step_begin = w_step_begin,
                                            .on_step_end = w_step_end,
                                            .destroy = w_destroy};

/* --- one run -------------------------------------------------------------------------------------- */

typedef struct outcome {
    ct_fixture_run run;
    ct_tensor before; /* the weights at the begin of the last step begun */
    watcher w;        /* its records (without its tensor) */
} outcome;

static outcome *run(const ct_training_args *a, const char *resume, poison mode, uint64_t steps, int crash_at) {
    outcome *o = calloc(1, sizeof *o);
    ct_dataset *train = ct_fixture_small_data(80, 1);
    ct_model m;
    if (ct_fixture_mlp_build(&model_opts, &m) != CT_OK) abort();
    /* the trainer owns the watcher; its records are copied out before the trainer goes */
    watcher *w = calloc(1, sizeof *w);
    w->base.ops = &watcher_ops;
    w->crash_at = crash_at;
    ct_callback_list cbs = {0};
    ct_callback_list_add(&cbs, &w->base);
    ct_trainer_setup setup = {.model = &m, .train_dataset = train, .callbacks = &cbs};
    nan_trainer nt = {.mode = mode, .steps = steps, .seen_step = -1};
    if (ct_fixture_train(&nt.base, &nan_ops, a, &setup, resume, &o->run)) {
        ct_callback *cb = ct_trainer_pop_callback(&nt.base, "watcher");
        if (cb) {
            watcher *got = ct_container_of(cb, watcher, base);
            o->w = *got;
            o->w.before = (ct_tensor){0};
            if (got->before.data) {
                if (ct_tensor_alloc(&o->before, got->before.dtype, CT_CPU, got->before.ndim, got->before.shape) != CT_OK) abort();
                memcpy(o->before.data, got->before.data, ct_tensor_nbytes(&got->before));
            }
            ct_callback_free(cb);
        }
        ct_trainer_free(&nt.base);
    }
    ct_callback_list_free(&cbs);
    ct_model_free(&m);
    ct_dataset_free(train);
    return o;
}

static void outcome_free(outcome *o) {
    ct_fixture_run_free(&o->run);
    ct_tensor_free(&o->before);
    free(o);
}

/* A random setting: clipping on or off, plain or ZeRO-1 (one process), and a poison that is an
 * error (not the empty step). */
static void random_setting(ct_training_args *a, poison *mode, char *label, size_t cap, const char *what) {
    bool clip = ct_rng_uniform(&rng) < 0.6, zero1 = ct_rng_uniform(&rng) < 0.35;
    a->max_grad_norm = clip ? 1.0 : 0.0;
    snprintf(a->optimizer_sharding, sizeof a->optimizer_sharding, "%s", zero1 ? "zero1" : "none");
    *mode = (poison)(P_LOSS_NAN + (int)(ct_rng_uniform(&rng) * 3));
    snprintf(label, cap, "%s (%s, clipping %s, %s)", what, poison_names[*mode], clip ? "on" : "off",
             zero1 ? "zero1" : "plain");
}

/* --- error ---------------------------------------------------------------------------------------- */

static void test_error(int round) {
    ct_training_args a;
    char name[64], label[256];
    snprintf(name, sizeof name, "error_%d", round);
    run_args(&a, name);
    ct_fixture_remove(a.output_dir);
    CHECK(a.nan_inf_policy == CT_NAN_INF_ERROR, "the default nan_inf_policy is %d", (int)a.nan_inf_policy);
    poison mode;
    random_setting(&a, &mode, label, sizeof label, "error");
    int p = 1 + (int)(ct_rng_uniform(&rng) * (MAX_STEPS - 2)); /* global_step of the poisoned step */
    if (p % 4 == 0) p++;                                      /* not a save step */
    outcome *o = run(&a, NULL, mode, 1ull << p, 0);
    char step[64];
    snprintf(step, sizeof step, "optimizer step %d (epoch %d):", p + 1, p / 4);
    const char *quantity = mode == P_GRAD_INF ? "the gradient norm is" : "the loss is";
    const char *value = mode == P_LOSS_INF ? "is inf" : mode == P_LOSS_NAN ? "is nan" : "the gradient norm is";
    CHECK(o->run.status == CT_ERR_NUMERIC, "%s: %s: %s", label, ct_status_str(o->run.status), o->run.message);
    CHECK(strstr(o->run.message, step) && strstr(o->run.message, quantity) && strstr(o->run.message, value) &&
              strstr(o->run.message, "nan_inf_policy 'error'"),
          "%s: message '%s' lacks '%s', '%s' or the policy", label, o->run.message, step, quantity);
    CHECK(o->run.global_step == p, "%s: stopped at global_step %lld, the poisoned step is %d", label,
          (long long)o->run.global_step, p);
    CHECK(ct_fixture_same_bits(&o->run.weights, &o->before), "%s: the failing step changed the weights", label);
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/checkpoint-%d", a.output_dir, p);
    CHECK(access(dir, F_OK) != 0, "%s: 'error' wrote %s", label, dir);
    outcome_free(o);
    ct_training_args_free(&a);
}

/* A step whose count is 0 (every sample ignored) has a sum of 0: no error under any policy. */
static void test_empty_step(void) {
    ct_training_args a;
    run_args(&a, "empty");
    ct_fixture_remove(a.output_dir);
    a.save_strategy = CT_INTERVAL_NO;
    outcome *o = run(&a, NULL, P_EMPTY, 1ull << 3 | 1ull << 8, 0);
    CHECK(o->run.status == CT_OK, "empty steps: %s", o->run.message);
    CHECK(o->run.global_step == MAX_STEPS && o->run.progress.nan_inf_skipped == 0, "empty steps: step %lld, skipped %lld",
          (long long)o->run.global_step, (long long)o->run.progress.nan_inf_skipped);
    outcome_free(o);
    ct_training_args_free(&a);
}

/* --- skip ----------------------------------------------------------------------------------------- */

static void test_skip(int round) {
    ct_training_args a;
    char name[64], label[256];
    snprintf(name, sizeof name, "skip_%d", round);
    run_args(&a, name);
    ct_fixture_remove(a.output_dir);
    CT_ASSERT(ct_training_args_set(&a, "nan_inf_policy", "skip") == CT_OK);
    poison mode;
    random_setting(&a, &mode, label, sizeof label, "skip");
    /* two or three poisoned steps after warmup (the learning rate moves at every step there) */
    uint64_t steps = 0;
    int k = 0;
    while (k < 2 + (round & 1)) {
        int g = 2 + (int)(ct_rng_uniform(&rng) * (MAX_STEPS - 3));
        if (!(steps >> g & 1)) {
            steps |= 1ull << g;
            k++;
        }
    }
    outcome *o = run(&a, NULL, mode, steps, 0);
    CHECK(o->run.status == CT_OK, "%s: %s", label, o->run.message);
    CHECK(o->run.global_step == MAX_STEPS, "%s: ended at step %lld", label, (long long)o->run.global_step);
    CHECK(o->run.progress.nan_inf_skipped == k, "%s: %lld skipped, %d poisoned", label, (long long)o->run.progress.nan_inf_skipped, k);
    CHECK(o->run.optimizer_steps == MAX_STEPS - k, "%s: the optimizer took %lld steps, expected %d", label,
          (long long)o->run.optimizer_steps, MAX_STEPS - k);
    int64_t taken = 0;
    for (int g = 0; g < MAX_STEPS; g++) {
        bool skipped = steps >> g & 1;
        taken += !skipped;
        /* (the first step has learning rate 0 in the warmup: no change either way) */
        if (skipped || o->w.lr_begin[g] > 0)
            CHECK(o->w.changed[g] == !skipped, "%s: step %d (%s) %s the weights", label, g + 1,
              skipped ? "skipped" : "not skipped", o->w.changed[g] ? "changed" : "did not change");
        CHECK(o->w.optim_steps[g] == taken, "%s: after step %d the optimizer has taken %lld steps, expected %lld",
              label, g + 1, (long long)o->w.optim_steps[g], (long long)taken);
        if (skipped)
            CHECK(o->w.lr_end[g] == o->w.lr_begin[g], "%s: the scheduler moved at skipped step %d (%g -> %g)",
                  label, g + 1, o->w.lr_begin[g], o->w.lr_end[g]);
        else
            CHECK(o->w.lr_end[g] != o->w.lr_begin[g], "%s: the scheduler did not move at step %d", label, g + 1);
    }
    /* the logs: finite losses (logging_nan_inf_filter), the running count of skipped steps */
    size_t i;
    json_t *e;
    int64_t last_count = 0;
    json_array_foreach(o->run.log, i, e) {
        json_t *loss = json_object_get(e, "loss");
        if (!loss) continue;
        CHECK(isfinite(json_number_value(loss)), "%s: log entry %zu has loss %g", label, i, json_number_value(loss));
        int64_t step = json_integer_value(json_object_get(e, "step"));
        int64_t want = 0;
        for (int g = 0; g < step; g++) want += steps >> g & 1;
        json_t *c = json_object_get(e, "nan_inf_skipped");
        CHECK(want == 0 ? c == NULL : json_integer_value(c) == want,
              "%s: the log at step %lld says nan_inf_skipped %lld, %lld were skipped", label, (long long)step,
              (long long)json_integer_value(c), (long long)want);
        last_count = json_integer_value(c);
    }
    CHECK(last_count == k, "%s: the last log counts %lld skipped steps", label, (long long)last_count);
    CHECK(json_integer_value(json_object_get(o->run.metrics, "nan_inf_skipped")) == k,
          "%s: the train metrics lack nan_inf_skipped = %d", label, k);
    /* A crash after a skip and a resume: the count comes back from the checkpoint and the run ends as
     * the uninterrupted one, bit for bit. */
    int last_skip = 0;
    for (int g = 0; g < MAX_STEPS; g++)
        if (steps >> g & 1) last_skip = g;
    int crash = ((last_skip + 1 + 3) / 4) * 4 + 1; /* just after the first save following the last skip */
    if (crash < MAX_STEPS) {
        char resumed_label[300];
        snprintf(resumed_label, sizeof resumed_label, "%s, crash at step %d and resume", label, crash);
        char name2[64];
        snprintf(name2, sizeof name2, "skip_%d_crash", round);
        snprintf(a.output_dir, sizeof a.output_dir, "%s/%s", tmp_root, name2);
        outcome *c1 = run(&a, NULL, mode, steps, crash);
        CHECK(c1->run.status == CT_ERR_IO, "%s: %s", resumed_label, c1->run.message);
        outcome *c2 = run(&a, "latest", mode, steps, 0);
        CHECK(c2->run.status == CT_OK, "%s: %s", resumed_label, c2->run.message);
        CHECK(c2->run.progress.nan_inf_skipped == k, "%s: %lld skipped after the resume", resumed_label,
              (long long)c2->run.progress.nan_inf_skipped);
        CHECK(ct_fixture_same_bits(&c2->run.weights, &o->run.weights), "%s: final weights differ", resumed_label);
        ct_fixture_check_same_log(resumed_label, o->run.log, c2->run.log);
        outcome_free(c1);
        outcome_free(c2);
    }
    outcome_free(o);
    ct_training_args_free(&a);
}

/* --- stop ----------------------------------------------------------------------------------------- */

static void test_stop(int round, int p, bool save_async, const outcome *clean) {
    ct_training_args a;
    char name[64], label[256];
    snprintf(name, sizeof name, "stop_%d", round);
    run_args(&a, name);
    ct_fixture_remove(a.output_dir);
    CT_ASSERT(ct_training_args_set(&a, "nan_inf_policy", "stop") == CT_OK);
    a.save_async = save_async;
    poison mode;
    char what[64];
    snprintf(what, sizeof what, "stop at step %d%s", p + 1, save_async ? ", save_async" : "");
    random_setting(&a, &mode, label, sizeof label, what);
    /* the clean run was plain with clipping: compare only where the setting is the same */
    bool comparable = a.max_grad_norm == 1.0 && strcmp(a.optimizer_sharding, "none") == 0;
    outcome *o = run(&a, NULL, mode, 1ull << p, 0);
    char dir[1200], step[64];
    snprintf(dir, sizeof dir, "%s/checkpoint-%d", a.output_dir, p);
    snprintf(step, sizeof step, "optimizer step %d (epoch %d):", p + 1, p / 4);
    CHECK(o->run.status == CT_ERR_NUMERIC, "%s: %s: %s", label, ct_status_str(o->run.status), o->run.message);
    CHECK(strstr(o->run.message, step) && strstr(o->run.message, "nan_inf_policy 'stop'") && strstr(o->run.message, dir) &&
              strstr(o->run.message, "resume_from_checkpoint"),
          "%s: message '%s' lacks the step, the policy or %s", label, o->run.message, dir);
    CHECK(ct_fixture_same_bits(&o->run.weights, &o->before), "%s: the failing step changed the weights", label);
    ct_status v = ct_checkpoint_verify(dir);
    CHECK(v == CT_OK, "%s: %s does not verify: %s", label, dir, ct_last_error());
    if (v == CT_OK) {
        ct_model m;
        char file[1300];
        snprintf(file, sizeof file, "%s/model.h5", dir);
        CT_ASSERT(ct_fixture_mlp_build(&model_opts, &m) == CT_OK);
        CHECK_OK(ct_model_load_h5(&m, file));
        CHECK(ct_fixture_same_bits(&m.params.values, &o->run.weights), "%s: %s does not hold the weights the run stopped with",
              label, dir);
        ct_model_free(&m);
    }
    /* the poison is gone (the data was fixed): the resumed run is the run that never met it */
    outcome *r = run(&a, "latest", P_NONE, 0, 0);
    CHECK(r->run.status == CT_OK, "%s: resume: %s", label, r->run.message);
    CHECK(r->run.global_step == MAX_STEPS, "%s: the resumed run ended at %lld", label, (long long)r->run.global_step);
    if (comparable) {
        CHECK(ct_fixture_same_bits(&r->run.weights, &clean->run.weights), "%s: resumed weights differ from the clean run's", label);
        char l2[300];
        snprintf(l2, sizeof l2, "%s: the resumed log is the clean run's", label);
        ct_fixture_check_same_log(l2, clean->run.log, r->run.log);
    }
    outcome_free(o);
    outcome_free(r);
    ct_training_args_free(&a);
}

int main(void) {
    ct_test_begin("test_nan_policy");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    if (!(tmp_root = ct_fixture_tmp_root("ct_test_nan_policy"))) return 1;
    /* the values */
    ct_training_args a;
    ct_training_args_default(&a);
    CHECK_ERR(ct_training_args_set(&a, "nan_inf_policy", "ignore"), CT_ERR_CONFIG, "nan_inf_policy", "ignore",
              "skip");
    CHECK_OK(ct_training_args_set(&a, "nan_inf_policy", "stop"));
    CHECK(a.nan_inf_policy == CT_NAN_INF_STOP, "nan_inf_policy stop -> %d", (int)a.nan_inf_policy);
    ct_training_args_free(&a);
    for (int i = 0; i < 4; i++) test_error(i);
    test_empty_step();
    for (int i = 0; i < 4; i++) test_skip(i);
    run_args(&a, "clean");
    outcome *clean = run(&a, NULL, P_NONE, 0, 0);
    CHECK(clean->run.status == CT_OK && clean->run.global_step == MAX_STEPS, "the clean run: %s", clean->run.message);
    ct_training_args_free(&a);
    test_stop(0, 0, false, clean); /* the very first step: checkpoint-0 */
    for (int i = 1; i < 5; i++) {
        int p = 1 + (int)(ct_rng_uniform(&rng) * (MAX_STEPS - 2));
        test_stop(i, p, i >= 3, clean);
    }
    test_stop(5, 4, true, clean); /* a step whose checkpoint the save_steps save already wrote */
    outcome_free(clean);
    ct_fixture_cleanup();
    return ct_test_finish();
}
