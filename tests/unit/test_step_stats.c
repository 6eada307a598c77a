/* The optimizer step's statistics kept on the device (trainer/step_stats.c), on the checked device
 * (CTRAINER_CHECKED_DEVICE: the CPU's kernels on memory the host may not touch outside ops).
 *
 * The same run on the CPU, whose step reads its loss and gradient norm back each step, and on the
 * device, whose step keeps them in the device's block, must agree bit for bit: the log history (the
 * loss logged, the gradient norm), the final weights, the loss to log carried in the progress. On the
 * device no op that hands a number back to the host runs in a step (the op profile: no
 * fused_classifier, no l2_norm; their _acc and _into forms instead, once per micro-batch and step).
 * Cases: clipping or not, gradient accumulation with a shorter last step, SGD and AdamW, logging
 * every step or seldom, cross-entropy and an elementwise loss (huber); a resume on the device from a
 * CPU checkpoint taken between two logs (the loss to log so far carries on); and a run with a NaN
 * in one sample, whose loss is NaN in the step that trains on it: the device's run ends with an
 * error naming the same step as the CPU's, its weights those of the last good step (the CPU's at its
 * error), though it went on to a later step before it read the block. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/ops/op_profile.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "testlib.h"
#include "trainer/trainer.h"
#include "trainer_fixture.h"

static const ct_device GPU = {CT_DEVICE_CUDA, 0};
static const char *tmp_root;
static ct_rng rng;

typedef struct run_case {
    const char *label;
    const char *optim;
    double lr, max_grad_norm;
    int64_t accumulation, steps, logging_steps, save_steps;
    int64_t nan_sample; /* a sample whose first feature is NaN; -1: none */
    bool regression;    /* 3 float targets a sample and a huber loss, instead of a class and cross-entropy */
} run_case;

enum { SAMPLES = 8 * 7 + 5 }; /* batches of 8: the epoch's last batch is short */

/* SAMPLES rows of 6 features U(-1, 1) and a class of 3 (or 3 targets U(0, 1)), the same for every
 * run of the test. */
static ct_dataset *data(int64_t nan_sample, bool regression) {
    ct_rng r;
    ct_rng_init(&r, ct_test_seed, 0, 0);
    ct_tensor x, y;
    if (ct_tensor_alloc(&x, CT_F32, CT_CPU, 2, (int64_t[]){SAMPLES, 6}) != CT_OK) abort();
    ct_status st = regression ? ct_tensor_alloc(&y, CT_F32, CT_CPU, 2, (int64_t[]){SAMPLES, 3})
                              : ct_tensor_alloc(&y, CT_I64, CT_CPU, 1, (int64_t[]){SAMPLES});
    if (st != CT_OK) abort();
    for (int64_t i = 0; i < SAMPLES * 6; i++) ((float *)x.data)[i] = (float)(2 * ct_rng_uniform(&r) - 1);
    for (int64_t i = 0; i < ct_tensor_numel(&y); i++)
        ct_tensor_set(&y, i, regression ? ct_rng_uniform(&r) : (double)ct_rng_below(&r, 3));
    if (nan_sample >= 0) ((float *)x.data)[nan_sample * 6] = NAN;
    ct_dataset *d;
    if (ct_tensor_dataset_create(&x, &y, 0, &d) != CT_OK) abort();
    ct_tensor_free(&x);
    ct_tensor_free(&y);
    return d;
}

/* The loss's passes that hand (sum, count) back and those that add them to the block; the norms. */
typedef struct op_calls {
    long long classifier, classifier_acc, norm, norm_into;
} op_calls;

static op_calls profiled_calls(void) {
    return (op_calls){ct_op_profile_calls("fused_classifier") + ct_op_profile_calls("pointwise_loss_forward"),
                      ct_op_profile_calls("fused_classifier_acc") + ct_op_profile_calls("pointwise_loss_acc"),
                      ct_op_profile_calls("l2_norm"), ct_op_profile_calls("l2_norm_into")};
}

/* One training run of case c on dev, into *r; resume: a checkpoint to start from, or NULL. */
static void train_on(ct_device dev, const run_case *c, const char *name, const char *resume, ct_fixture_run *r,
                     op_calls *calls) {
    ct_training_args a;
    ct_fixture_args(&a, tmp_root, name);
    snprintf(a.optim, sizeof a.optim, "%s", c->optim);
    a.learning_rate = c->lr;
    a.max_grad_norm = c->max_grad_norm;
    a.gradient_accumulation_steps = c->accumulation;
    a.max_steps = c->steps;
    a.per_device_train_batch_size = 8;
    a.logging_steps = (double)c->logging_steps;
    a.save_strategy = c->save_steps > 0 ? CT_INTERVAL_STEPS : CT_INTERVAL_NO;
    a.save_steps = (double)c->save_steps;
    a.seed = 7;
    ct_dataset *d = data(c->nan_sample, c->regression);
    ct_loss *loss = NULL;
    if (c->regression) CHECK_OK(ct_huber_loss_create(0.3, &loss));
    ct_model m;
    ct_fixture_mlp o = {.dim = 6, .classes = 3, .hidden = {16, 8}, .device = dev, .max_batch = 8,
                        .seed = ct_test_seed};
    CHECK_OK(ct_fixture_mlp_build(&o, &m));
    ct_trainer_setup setup = {.model = &m, .train_dataset = d, .loss = loss};
    ct_trainer t;
    ct_op_profile_reset();
    ct_op_profile_enable(true);
    if (ct_fixture_train(&t, NULL, &a, &setup, resume, r)) ct_trainer_free(&t);
    ct_op_profile_enable(false);
    *calls = profiled_calls();
    ct_model_free(&m);
    ct_loss_free(loss);
    ct_dataset_free(d);
    ct_training_args_free(&a);
}

/* The same case on the CPU and on the device: the same numbers, and no read-back op on the device. */
static void same_run(const run_case *c) {
    ct_fixture_run cpu, dev;
    op_calls cc, dc;
    char name[96];
    snprintf(name, sizeof name, "cpu_%s", c->label);
    train_on(CT_CPU, c, name, NULL, &cpu, &cc);
    snprintf(name, sizeof name, "dev_%s", c->label);
    train_on(GPU, c, name, NULL, &dev, &dc);
    CHECK(cpu.status == CT_OK && dev.status == CT_OK, "%s: runs failed: '%s' / '%s'", c->label, cpu.message,
          dev.message);
    if (cpu.status == CT_OK && dev.status == CT_OK) {
        ct_fixture_check_same_log(c->label, cpu.log, dev.log);
        CHECK(ct_fixture_same_bits(&cpu.weights, &dev.weights), "%s: final weights differ", c->label);
        /* (without clipping the norm is not kept: NaN on both) */
        CHECK(cpu.progress.total_loss == dev.progress.total_loss &&
                  memcmp(&cpu.progress.grad_norm, &dev.progress.grad_norm, sizeof(double)) == 0,
              "%s: total loss %.17g / %.17g, grad norm %.17g / %.17g", c->label, cpu.progress.total_loss,
              dev.progress.total_loss, cpu.progress.grad_norm, dev.progress.grad_norm);
    }
    /* micro-batches: 8 batches an epoch; steps of `accumulation` of them, the last of an epoch shorter */
    long long per_epoch = (8 + c->accumulation - 1) / c->accumulation, micro = 0;
    for (long long s = 0; s < c->steps; s++) {
        long long k = s % per_epoch;
        micro += k + 1 < per_epoch ? c->accumulation : 8 - k * c->accumulation;
    }
    /* ct_trainer_init judges regression targets by the loss's forward on the first sample: one pass */
    const long long at_init = c->regression ? 1 : 0;
    CHECK(cc.classifier == micro + at_init && cc.classifier_acc == 0 && cc.norm == c->steps && cc.norm_into == 0,
          "%s: CPU ops classifier %lld, _acc %lld, norm %lld, _into %lld; expected %lld micro-batches, %lld steps",
          c->label, cc.classifier, cc.classifier_acc, cc.norm, cc.norm_into, micro, (long long)c->steps);
    CHECK(dc.classifier == at_init && dc.classifier_acc == micro && dc.norm == 0 && dc.norm_into == c->steps,
          "%s: device ops classifier %lld, _acc %lld, norm %lld, _into %lld; expected %lld micro-batches, %lld steps",
          c->label, dc.classifier, dc.classifier_acc, dc.norm, dc.norm_into, micro, (long long)c->steps);
    ct_fixture_run_free(&cpu);
    ct_fixture_run_free(&dev);
}

/* A run resumed on the device from the CPU's checkpoint of a step between two logs. */
static void resumed_across(void) {
    run_case c = {"resume", "adamw", 3e-3, 1.0, 1, 10, 4, 6, -1, false};
    ct_fixture_run whole, first, rest;
    op_calls calls;
    train_on(CT_CPU, &c, "resume_whole", NULL, &whole, &calls);
    train_on(CT_CPU, &c, "resume_split", NULL, &first, &calls);
    char ckpt[1200];
    snprintf(ckpt, sizeof ckpt, "%s/resume_split/checkpoint-6", tmp_root);
    CHECK(access(ckpt, F_OK) == 0, "no checkpoint at %s", ckpt);
    train_on(GPU, &c, "resume_split", ckpt, &rest, &calls);
    CHECK(whole.status == CT_OK && rest.status == CT_OK, "resume: '%s' / '%s'", whole.message, rest.message);
    if (whole.status == CT_OK && rest.status == CT_OK) {
        ct_fixture_check_same_log("resume", whole.log, rest.log);
        CHECK(ct_fixture_same_bits(&whole.weights, &rest.weights), "resume: final weights differ");
    }
    ct_fixture_run_free(&whole);
    ct_fixture_run_free(&first);
    ct_fixture_run_free(&rest);
}

/* The step named in "optimizer step N" of msg (-1: none). */
static long long named_step(const char *msg) {
    const char *p = strstr(msg, "optimizer step ");
    return p ? atoll(p + strlen("optimizer step ")) : -1;
}

/* A NaN in one sample: the step that trains on it has a NaN loss. */
static void nan_in_data(void) {
    run_case c = {"nan_in_data", "sgd", 0.05, 0.0, 1, 40, 1000, 0, ct_test_between(&rng, 0, SAMPLES - 1), false};
    ct_fixture_run cpu, dev;
    op_calls calls;
    train_on(CT_CPU, &c, "diverge_cpu", NULL, &cpu, &calls);
    train_on(GPU, &c, "diverge_dev", NULL, &dev, &calls);
    long long bad = named_step(cpu.message);
    CHECK(cpu.status == CT_ERR_NUMERIC && bad >= 1 && bad <= 8, "the CPU run did not stop in its first epoch: %s",
          cpu.message);
    CHECK(dev.status == CT_ERR_NUMERIC && named_step(dev.message) == bad &&
              strstr(dev.message, "read from the device") && strstr(dev.message, "nan_inf_policy 'error'"),
          "the device's run: '%s'; the CPU's: '%s'", dev.message, cpu.message);
    /* it noticed at the end of training, after the steps it could not undo, which changed nothing */
    CHECK(dev.global_step == c.steps && dev.global_step > bad, "the device's run ended at step %lld",
          (long long)dev.global_step);
    CHECK(ct_fixture_same_bits(&cpu.weights, &dev.weights),
          "the device's weights are not the last good step's (the CPU's at its error)");
    ct_fixture_run_free(&cpu);
    ct_fixture_run_free(&dev);
}

int main(int argc, char **argv) {
    (void)argc;
    if (!ct_test_use_checked_device(argv, "1")) return 1;
    ct_test_begin("test_step_stats");
    if (!(tmp_root = ct_fixture_tmp_root("ct_test_step_stats"))) return 1;
    ct_rng_init(&rng, ct_test_seed, 1, 0);
    const run_case cases[] = {
        {"clip_adamw", "adamw", 3e-3, 1.0, 1, 9, 3, 0, -1, false},
        {"accumulate_sgd", "sgd", 0.05, 0.0, 3, 7, 2, 0, -1, false},
        {"clip_often_every_log", "adamw", 0.05, 0.05, 2, 6, 1, 0, -1, false},
        {"log_seldom", "adam", 1e-2, 1.0, 1, 12, 100, 0, -1, false},
        {"huber_regression", "adamw", 1e-2, 0.5, 2, 8, 3, 0, -1, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) same_run(&cases[i]);
    resumed_across();
    nan_in_data();
    ct_op_profile_reset();
    ct_fixture_cleanup();
    return ct_test_finish();
}
