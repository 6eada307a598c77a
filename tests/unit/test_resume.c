/* Exact resume: a run interrupted (mid-epoch, at an epoch boundary, inside a gradient-accumulation
 * cycle, by SIGTERM) and resumed from its latest checkpoint logs exactly what the uninterrupted run
 * logs (loss, learning_rate, grad_norm, eval values at every step; only timings may differ) and ends
 * with bit-identical weights. The model has dropout, so the randomness keyed by step and sample
 * position is exercised too. Then the errors: nothing to resume from, another model, another
 * optimizer, a checkpoint saved with save_only_model. */
#include <math.h>
#include <signal.h>
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

/* 100 samples, batch 10, accumulation 2: 5 optimizer steps per epoch, 3 epochs = 15 steps. */
static void run_args(ct_training_args *a, const char *name) {
    ct_fixture_args(a, tmp_root, name);
    a->per_device_train_batch_size = 10;
    a->per_device_eval_batch_size = 16;
    a->gradient_accumulation_steps = 2;
    a->num_train_epochs = 3;
    a->learning_rate = 5e-3;
    a->warmup_steps = 3;
    a->logging_steps = 2;
    a->eval_strategy = CT_INTERVAL_STEPS;
    a->eval_steps = 4;
    a->save_strategy = CT_INTERVAL_STEPS;
    a->save_steps = 3;
    a->eval_bootstrap_resamples = 50;
}

/* A callback that fails (a simulated crash) or raises a signal at one event of one step. */
typedef struct crasher {
    ct_callback base;
    ct_event event;
    int64_t step; /* global_step at which to act (for epoch events: the epoch index) */
    int signal;   /* 0: fail; otherwise raise this signal */
    int fired;
} crasher;

static ct_status crash_here(ct_callback *cb, const ct_callback_args *a, ct_event e) {
    crasher *c = ct_container_of(cb, crasher, base);
    bool epoch_event = e == CT_ON_EPOCH_BEGIN || e == CT_ON_EPOCH_END;
    int64_t at = epoch_event ? (int64_t)floor(a->state->epoch + 1e-9) : a->state->global_step;
    if (c->fired || e != c->event || at != c->step) return CT_OK;
    c->fired = 1;
    if (c->signal) {
        raise(c->signal);
        return CT_OK;
    }
    return ct_error(CT_ERR_IO, "simulated crash");
}

#define HOOK(ev, name) \
    static ct_status name(ct_callback *cb, const ct_callback_args *a) { return crash_here(cb, a, ev); }
HOOK(CT_ON_STEP_END, c_step_end)
HOOK(CT_ON_SUBSTEP_END, c_substep_end)
HOOK(CT_ON_EPOCH_BEGIN, c_epoch_begin)
HOOK(CT_ON_EPOCH_END, c_epoch_end)

static const ct_callback_ops crasher_ops = {.size = sizeof(ct_callback_ops),
                                            .name = "crasher",
                                            .on_step_end = c_step_end,
                                            .on_substep_end = c_substep_end,
                                            .on_epoch_begin = c_epoch_begin,
                                            .on_epoch_end = c_epoch_end};

/* One ct_trainer_train call on fresh objects; crash (optional) is handed to the trainer. */
static ct_fixture_run run(const ct_training_args *a, const char *resume, crasher *crash, int64_t hidden) {
    ct_fixture_run o;
    ct_dataset *train = ct_fixture_small_data(100, 1), *eval = ct_fixture_small_data(30, 2);
    ct_model m;
    ct_fixture_mlp mo = {.dim = 6, .classes = 3, .hidden = {hidden}, .dropout = 0.2, .max_batch = 16, .seed = 5};
    if (ct_fixture_mlp_build(&mo, &m) != CT_OK) abort();
    ct_callback_list cbs = {0};
    if (crash) ct_callback_list_add(&cbs, &crash->base);
    ct_trainer_setup setup = {.model = &m, .train_dataset = train, .n_eval = 1, .callbacks = &cbs};
    setup.eval_datasets[0] = eval;
    ct_trainer t;
    if (ct_fixture_train(&t, NULL, a, &setup, resume, &o)) ct_trainer_free(&t);
    ct_callback_list_free(&cbs);
    ct_model_free(&m);
    ct_dataset_free(train);
    ct_dataset_free(eval);
    return o;
}

static void compare(const char *label, const ct_fixture_run *want, const ct_fixture_run *got) {
    CHECK(got->status == CT_OK, "%s: the resumed run failed: %s", label, got->message);
    if (got->status != CT_OK) return;
    ct_fixture_check_same_log(label, want->log, got->log);
    CHECK(ct_fixture_same_bits(&want->weights, &got->weights), "%s: final weights are not bit-identical", label);
}

static void interrupted(const char *name, const ct_fixture_run *want, ct_event event, int64_t step, int sig) {
    ct_training_args a;
    run_args(&a, name);
    ct_fixture_remove(a.output_dir);
    crasher *c = calloc(1, sizeof *c);
    c->base.ops = &crasher_ops;
    c->event = event;
    c->step = step;
    c->signal = sig;
    ct_fixture_run first = run(&a, NULL, c, 8);
    ct_status expected = sig ? CT_ERR_INTERRUPTED : CT_ERR_IO;
    CHECK(first.status == expected, "%s: the interrupted run returned %s: %s", name, ct_status_str(first.status),
          ct_last_error());
    if (sig) CHECK(ct_trainer_stop_signal() == sig, "%s: stop signal %d", name, ct_trainer_stop_signal());
    ct_fixture_run second = run(&a, "latest", NULL, 8);
    compare(name, want, &second);
    ct_fixture_run_free(&first);
    ct_fixture_run_free(&second);
    ct_training_args_free(&a);
}

static void test_errors(const ct_fixture_run *want) {
    (void)want;
    ct_training_args a;
    run_args(&a, "errors");
    ct_fixture_remove(a.output_dir);
    ct_fixture_run none = run(&a, "latest", NULL, 8);
    CHECK_ERR(none.status, CT_ERR_IO, "no checkpoint in");
    ct_fixture_run_free(&none);
    a.max_steps = 3;
    ct_fixture_run first = run(&a, NULL, NULL, 8);
    CHECK_OK(first.status);
    ct_fixture_run_free(&first);
    ct_fixture_run other_model = run(&a, "latest", NULL, 12);
    CHECK_ERR(other_model.status, CT_ERR_SHAPE, "resume from", "checkpoint-3", "1.weight", "[8, 6]", "expected [12, 6]");
    ct_fixture_run_free(&other_model);
    snprintf(a.optim, sizeof a.optim, "sgd");
    ct_fixture_run other_optim = run(&a, "latest", NULL, 8);
    CHECK(other_optim.status != CT_OK && strstr(ct_last_error(), "sgd") && strstr(ct_last_error(), "adam"),
          "resuming AdamW state into SGD: %s", ct_last_error());
    ct_fixture_run_free(&other_optim);
    snprintf(a.optim, sizeof a.optim, "adamw_torch");
    a.per_device_train_batch_size = 5; /* the saved position counts batches of 10 */
    ct_fixture_run other_batch = run(&a, "latest", NULL, 8);
    CHECK_ERR(other_batch.status, CT_ERR_CONFIG, "global batch of 10 samples", "this run has 5");
    ct_fixture_run_free(&other_batch);
    a.per_device_train_batch_size = 10;
    a.gradient_accumulation_steps = 3;
    ct_fixture_run other_ga = run(&a, "latest", NULL, 8);
    CHECK_ERR(other_ga.status, CT_ERR_CONFIG, "gradient_accumulation_steps 2, this run has 3");
    ct_fixture_run_free(&other_ga);
    a.gradient_accumulation_steps = 2;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/checkpoint-3", a.output_dir);
    ct_fixture_run named = run(&a, dir, NULL, 8); /* a directory by name works too */
    CHECK_OK(named.status);
    ct_fixture_run_free(&named);
    ct_training_args_free(&a);
    /* an allowed change: more epochs. The run continues from its last checkpoint to the new end. */
    run_args(&a, "more_epochs");
    ct_fixture_remove(a.output_dir);
    a.num_train_epochs = 2;
    ct_fixture_run two = run(&a, NULL, NULL, 8);
    CHECK_OK(two.status);
    a.num_train_epochs = 3;
    ct_fixture_run three = run(&a, "latest", NULL, 8);
    CHECK_OK(three.status);
    json_t *last = json_array_get(three.log, json_array_size(three.log) - 1);
    CHECK(json_integer_value(json_object_get(last, "step")) == 15, "more epochs: the run ended at step %lld",
          (long long)json_integer_value(json_object_get(last, "step")));
    ct_fixture_run_free(&two);
    ct_fixture_run_free(&three);
    ct_training_args_free(&a);
    run_args(&a, "only_model");
    ct_fixture_remove(a.output_dir);
    a.max_steps = 3;
    a.save_only_model = true;
    ct_fixture_run only = run(&a, NULL, NULL, 8);
    ct_fixture_run_free(&only);
    ct_fixture_run again = run(&a, "latest", NULL, 8);
    CHECK_ERR(again.status, CT_ERR_STATE, "save_only_model");
    ct_fixture_run_free(&again);
    ct_training_args_free(&a);
}

int main(void) {
    ct_test_begin("test_resume");
    if (!(tmp_root = ct_fixture_tmp_root("ct_test_resume"))) return 1;
    ct_training_args a;
    run_args(&a, "uninterrupted");
    ct_fixture_run want = run(&a, NULL, NULL, 8);
    CHECK_OK(want.status);
    CHECK(json_array_size(want.log) > 10, "only %zu log entries", json_array_size(want.log));
    ct_training_args_free(&a);
    /* checkpoints at steps 3, 6, 9, 12, 15; epochs end at steps 5, 10, 15 */
    interrupted("mid-epoch", &want, CT_ON_STEP_END, 8, 0);
    interrupted("across an epoch boundary", &want, CT_ON_EPOCH_BEGIN, 2, 0);
    interrupted("inside an accumulation cycle", &want, CT_ON_SUBSTEP_END, 10, 0);
    interrupted("SIGTERM mid-epoch", &want, CT_ON_STEP_END, 7, SIGTERM);
    /* saved after the last step of epoch 2 but before its end-of-epoch events: they must run on resume */
    interrupted("SIGTERM at the last step of an epoch", &want, CT_ON_STEP_END, 10, SIGTERM);
    /* saved after the end-of-epoch events of epoch 1: they must not run again */
    interrupted("SIGTERM at the end of an epoch", &want, CT_ON_EPOCH_END, 1, SIGTERM);
    interrupted("SIGINT inside an accumulation cycle", &want, CT_ON_SUBSTEP_END, 4, SIGINT);
    test_errors(&want);
    ct_fixture_run_free(&want);
    ct_fixture_cleanup();
    return ct_test_finish();
}
