/* Dynamic loss scaling (optim/grad_scaler.h, trainer/train_loop.c) and mixed-precision arguments.
 *
 * The rule alone: growth after exactly growth_interval clean steps, backoff and tracker reset on an
 * overflow, no growth past float32's range, the options and a loaded state checked. (PyTorch's own
 * semantics: tests/oracle/test_grad_scaler.py.)
 *
 * The Trainer, on the CPU and on the checked device (CTRAINER_CHECKED_DEVICE: device memory the host
 * may not touch outside ops; this program re-executes itself with it set):
 *   - without an overflow, a run with the scaler ends bit for bit where the run without it does (a
 *     power-of-two scale multiplies and divides exactly), with the same log;
 *   - an overflow injected into the loss gradient of chosen steps (through ops, so on the device
 *     too) under nan_inf_policy "error" is no error: the step changes no weight, the optimizer's
 *     step count and the learning rate wait (HF does not step the scheduler), the scale halves;
 *   - a real overflow (init_scale 2^127) backs off until the gradients are finite;
 *   - a NaN loss stays nan_inf_policy's error;
 *   - a crash and a resume give the uninterrupted run's weights, log and scaler state; a damaged
 *     scaler state in the checkpoint is refused naming the file and the key;
 * and fp16, bf16 and tf32 are refused on devices whose backend computes in float32 only. The
 * checked device's memory statistics make HF's _gpu_ memory keys testable: they are reported, and
 * device memory does not grow over many steps. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint/checkpoint_io.h"
#include "core/json.h"
#include "core/ops/ops.h"
#include "core/util.h"
#include "optim/grad_scaler.h"
#include "testlib.h"
#include "trainer/trainer_impl.h"
#include "trainer_fixture.h"

static const char *tmp_root;
static ct_device dev; /* the device of the runs in progress */

/* --- the rule --------------------------------------------------------------------------------------- */

static void test_rule(void) {
    ct_grad_scaler_opts o = ct_grad_scaler_default_opts();
    CHECK(o.init_scale == 65536 && o.growth_factor == 2 && o.backoff_factor == 0.5 && o.growth_interval == 2000,
          "PyTorch's defaults");
    o.growth_interval = 3;
    ct_grad_scaler_state s = ct_grad_scaler_start(&o);
    ct_grad_scaler_update(&o, &s, false);
    ct_grad_scaler_update(&o, &s, false);
    CHECK(s.scale == 65536 && s.growth_tracker == 2, "two clean steps count: %g %lld", s.scale,
          (long long)s.growth_tracker);
    ct_grad_scaler_update(&o, &s, false);
    CHECK(s.scale == 131072 && s.growth_tracker == 0, "the third grows: %g %lld", s.scale, (long long)s.growth_tracker);
    ct_grad_scaler_update(&o, &s, false);
    ct_grad_scaler_update(&o, &s, true);
    CHECK(s.scale == 65536 && s.growth_tracker == 0, "an overflow backs off and restarts: %g %lld", s.scale,
          (long long)s.growth_tracker);
    s = (ct_grad_scaler_state){.scale = 0x1p127, .growth_tracker = 2};
    ct_grad_scaler_update(&o, &s, false);
    CHECK(s.scale == 0x1p127 && s.growth_tracker == 0, "no growth past float32's range: %g %lld", s.scale,
          (long long)s.growth_tracker);
    o.backoff_factor = 0.3; /* rounded to float32 as PyTorch's float scale is */
    s = ct_grad_scaler_start(&o);
    ct_grad_scaler_update(&o, &s, true);
    CHECK(s.scale == (float)(65536 * 0.3), "backoff rounds to float32: %.17g", (double)s.scale);

    ct_grad_scaler_opts bad = ct_grad_scaler_default_opts();
    bad.growth_factor = 1;
    CHECK_ERR(ct_grad_scaler_opts_check(&bad), CT_ERR_INVALID_ARG, "growth_factor");
    bad = ct_grad_scaler_default_opts();
    bad.backoff_factor = 1;
    CHECK_ERR(ct_grad_scaler_opts_check(&bad), CT_ERR_INVALID_ARG, "backoff_factor");
    bad = ct_grad_scaler_default_opts();
    bad.init_scale = 1e39;
    CHECK_ERR(ct_grad_scaler_opts_check(&bad), CT_ERR_INVALID_ARG, "init_scale");
    bad = ct_grad_scaler_default_opts();
    bad.growth_interval = 0;
    CHECK_ERR(ct_grad_scaler_opts_check(&bad), CT_ERR_INVALID_ARG, "growth_interval");
    o = ct_grad_scaler_default_opts();
    CHECK_ERR(ct_grad_scaler_state_check(&o, &(ct_grad_scaler_state){.scale = -2}, "f.json"), CT_ERR_FORMAT,
              "f.json", "grad_scaler.scale");
    CHECK_ERR(ct_grad_scaler_state_check(&o, &(ct_grad_scaler_state){.scale = INFINITY}, "f.json"), CT_ERR_FORMAT,
              "grad_scaler.scale: inf");
    CHECK_ERR(ct_grad_scaler_state_check(&o, &(ct_grad_scaler_state){.scale = 2, .growth_tracker = 2000}, "f.json"),
              CT_ERR_FORMAT, "grad_scaler.growth_tracker", "2000");
    CHECK_OK(ct_grad_scaler_state_check(&o, &(ct_grad_scaler_state){.scale = 0x1p-140, .growth_tracker = 1999}, "f"));
}

/* --- runs ------------------------------------------------------------------------------------------- */

#define MAX_STEPS 12

/* 80 samples, batch 10, accumulation 2: 4 optimizer steps per epoch. */
static void run_args(ct_training_args *a, const char *name) {
    const char *device = dev.kind == CT_DEVICE_CPU ? "cpu" : "cuda";
    char dir[256];
    snprintf(dir, sizeof dir, "%s-%s", name, device);
    ct_fixture_args(a, tmp_root, dir);
    ct_fixture_remove(a->output_dir);
    snprintf(a->device, sizeof a->device, "%s", device);
    a->per_device_train_batch_size = 10;
    a->gradient_accumulation_steps = 2;
    a->max_steps = MAX_STEPS;
    a->learning_rate = 5e-3;
    a->warmup_steps = 0; /* every step taken moves the weights and the learning rate */
    a->logging_steps = 1;
    a->max_grad_norm = 1.0;
    a->save_strategy = CT_INTERVAL_NO;
}

typedef struct poison_trainer {
    ct_trainer base;
    uint64_t steps; /* bit g: an infinite loss gradient in the step taken at global_step g */
    bool nan_loss;  /* a NaN loss there instead */
} poison_trainer;

static ct_status poisoned_compute_loss(ct_trainer *t, const ct_batch *b, ct_loss_value *loss, ct_tensor *outputs,
                                       ct_tensor *dloss) {
    poison_trainer *p = ct_container_of(t, poison_trainer, base);
    CT_TRY(ct_trainer_default_compute_loss(t, b, loss, outputs, dloss));
    int64_t g = t->state.global_step;
    if (!dloss || g >= 64 || !(p->steps >> g & 1)) return CT_OK;
    if (p->nan_loss) loss->sum = NAN;
    /* through an op: dloss lives on the model's device */
    ct_tensor row = ct_tensor_rows(dloss, 1, 1);
    ct_op_fill(&row, p->nan_loss ? NAN : INFINITY);
    return CT_OK;
}

static const ct_trainer_ops poison_ops = {.size = sizeof(ct_trainer_ops), .compute_loss = poisoned_compute_loss};

/* Records, per step, whether the weights changed, the optimizer's steps and the learning rate. */
typedef struct watcher {
    ct_callback base;
    ct_tensor before;
    bool changed[MAX_STEPS];
    int64_t optim_steps[MAX_STEPS];
    double lr[MAX_STEPS], scale[MAX_STEPS];
    int crash_at; /* > 0: fail at the end of this global_step */
} watcher;

static void host_copy(ct_tensor *dst, const ct_tensor *src) {
    if (!dst->data && ct_tensor_alloc(dst, src->dtype, CT_CPU, src->ndim, src->shape) != CT_OK) abort();
    if (ct_tensor_copy_to(dst, src) != CT_OK) abort();
}

static ct_status w_step_begin(ct_callback *cb, const ct_callback_args *a) {
    watcher *w = ct_container_of(cb, watcher, base);
    host_copy(&w->before, &a->trainer->model->params.values);
    return CT_OK;
}

static ct_status w_step_end(ct_callback *cb, const ct_callback_args *a) {
    watcher *w = ct_container_of(cb, watcher, base);
    int64_t g = a->state->global_step - 1;
    ct_tensor now = {0};
    host_copy(&now, &a->trainer->model->params.values);
    if (g >= 0 && g < MAX_STEPS) {
        w->changed[g] = memcmp(w->before.data, now.data, ct_tensor_nbytes(&now)) != 0;
        w->optim_steps[g] = a->trainer->optimizer->step;
        w->lr[g] = ct_scheduler_lr(a->trainer->lr_scheduler);
        w->scale[g] = ct_trainer_loss_scale(a->trainer);
    }
    ct_tensor_free(&now);
    if (w->crash_at > 0 && a->state->global_step == w->crash_at) return ct_error(CT_ERR_IO, "simulated crash");
    return CT_OK;
}

static void w_destroy(ct_callback *cb) {
    watcher *w = ct_container_of(cb, watcher, base);
    ct_tensor_free(&w->before);
    free(w);
}

static const ct_callback_ops watcher_ops = {.size = sizeof(ct_callback_ops), .name = "watcher",
                                            .on_step_begin = w_step_begin, .on_step_end = w_step_end,
                                            .destroy = w_destroy};

typedef struct outcome {
    ct_fixture_run run;
    watcher w; /* its records (without its tensor) */
} outcome;

static outcome run(const ct_training_args *a, const ct_grad_scaler_opts *scaler, const char *resume, uint64_t steps,
                   bool nan_loss, int crash_at) {
    outcome o = {0};
    ct_dataset *train = ct_fixture_small_data(80, 1);
    ct_model m;
    ct_fixture_mlp mo = {.dim = 6, .classes = 3, .hidden = {8}, .max_batch = 16, .seed = 5, .device = dev};
    if (ct_fixture_mlp_build(&mo, &m) != CT_OK) abort();
    watcher *w = calloc(1, sizeof *w);
    w->base.ops = &watcher_ops;
    w->crash_at = crash_at;
    ct_callback_list cbs = {0};
    ct_callback_list_add(&cbs, &w->base);
    ct_trainer_setup setup = {.model = &m, .train_dataset = train, .callbacks = &cbs, .grad_scaler = scaler};
    poison_trainer pt = {.steps = steps, .nan_loss = nan_loss};
    if (ct_fixture_train(&pt.base, &poison_ops, a, &setup, resume, &o.run)) {
        ct_callback *cb = ct_trainer_pop_callback(&pt.base, "watcher");
        watcher *got = ct_container_of(cb, watcher, base);
        o.w = *got;
        o.w.before = (ct_tensor){0};
        ct_callback_free(cb);
        ct_trainer_free(&pt.base);
    }
    ct_callback_list_free(&cbs);
    ct_model_free(&m);
    ct_dataset_free(train);
    return o;
}

static void outcome_free(outcome *o) { ct_fixture_run_free(&o->run); }

static const char *dev_name(void) { return dev.kind == CT_DEVICE_CPU ? "cpu" : "cuda (checked)"; }

/* Scaling by a power of two and unscaling in the 1/count pass is exact: the same run, bit for bit. */
static void test_exact_without_overflow(void) {
    ct_training_args a;
    run_args(&a, "plain");
    outcome plain = run(&a, NULL, NULL, 0, false, 0);
    run_args(&a, "scaled");
    ct_grad_scaler_opts o = ct_grad_scaler_default_opts();
    o.growth_interval = 5; /* the scale grows twice within the run */
    outcome scaled = run(&a, &o, NULL, 0, false, 0);
    CHECK(plain.run.status == CT_OK && scaled.run.status == CT_OK, "%s: runs: %s / %s", dev_name(), plain.run.message,
          scaled.run.message);
    CHECK(ct_fixture_same_bits(&plain.run.weights, &scaled.run.weights), "%s: with the scaler the weights differ from the run without", dev_name());
    CHECK(json_equal(plain.run.log, scaled.run.log), "%s: with the scaler the log differs", dev_name());
    CHECK(scaled.run.progress.has_scaler && scaled.run.progress.scaler.scale == 65536 * 4 &&
              scaled.run.progress.scaler.growth_tracker == 2 && scaled.run.progress.scaler_skipped == 0,
          "%s: the scale grew twice in 12 clean steps: %g, tracker %lld", dev_name(), scaled.run.progress.scaler.scale,
          (long long)scaled.run.progress.scaler.growth_tracker);
    CHECK(!plain.run.progress.has_scaler && ct_trainer_loss_scale(&(ct_trainer){0}) == 1.0, "no scaler: scale 1");
    outcome_free(&plain);
    outcome_free(&scaled);
}

/* An overflow is the scaler's: skipped without an error, the scheduler and optimizer wait. */
static void test_injected_overflow(void) {
    ct_training_args a;
    run_args(&a, "overflow");
    CHECK(a.nan_inf_policy == CT_NAN_INF_ERROR, "nan_inf_policy error by default");
    uint64_t poisoned = 1u << 3 | 1u << 4 | 1u << 9;
    outcome r = run(&a, &(ct_grad_scaler_opts){65536, 2, 0.5, 4}, NULL, poisoned, false, 0);
    CHECK(r.run.status == CT_OK, "%s: overflows are no nan_inf error: %s", dev_name(), r.run.message);
    /* the rule by hand: clean steps 0-2 (tracker 3), backoff at 3 and 4, 5-8 grow once at 8, 9 backs
     * off, 10-11 count 2 */
    double want_scale[MAX_STEPS] = {65536, 65536, 65536, 32768, 16384, 16384, 16384, 16384, 32768, 16384, 16384, 16384};
    int64_t optim = 0;
    for (int g = 0; g < MAX_STEPS; g++) {
        bool skip = poisoned >> g & 1;
        optim += !skip;
        CHECK(r.w.changed[g] == !skip, "%s: step %d %s the weights", dev_name(), g, r.w.changed[g] ? "changed" : "kept");
        CHECK(r.w.optim_steps[g] == optim, "%s: step %d: the optimizer took %lld steps, expected %lld", dev_name(), g,
              (long long)r.w.optim_steps[g], (long long)optim);
        /* the scheduler steps only with the optimizer (warmup, then linear decay: every step moves it) */
        if (g > 0)
            CHECK((r.w.lr[g] == r.w.lr[g - 1]) == skip, "%s: step %d: the learning rate %s", dev_name(), g,
                  skip ? "moved on a skipped step" : "stayed on a step taken");
        CHECK(r.w.scale[g] == want_scale[g], "%s: the scale after step %d is %g, expected %g", dev_name(), g,
              r.w.scale[g], want_scale[g]);
    }
    CHECK(r.run.progress.scaler_skipped == 3 && r.run.progress.nan_inf_skipped == 0, "%s: 3 skipped by the scaler, got %lld",
          dev_name(), (long long)r.run.progress.scaler_skipped);
    CHECK(!json_object_get(r.run.metrics, "nan_inf_skipped"), "%s: scaler skips are not nan_inf_skipped", dev_name());
    outcome_free(&r);
}

/* A scale far too large overflows for real and backs off until the gradients are finite. */
static void test_real_overflow(void) {
    ct_training_args a;
    run_args(&a, "real");
    outcome r = run(&a, &(ct_grad_scaler_opts){0x1p127, 2, 0.5, 2000}, NULL, 0, false, 0);
    CHECK(r.run.status == CT_OK, "%s: %s", dev_name(), r.run.message);
    int64_t k = r.run.progress.scaler_skipped;
    CHECK(k >= 1 && k < MAX_STEPS, "%s: %lld steps skipped", dev_name(), (long long)k);
    CHECK(r.run.progress.scaler.scale == ldexp(1, 127 - (int)k), "%s: the scale is 2^127 halved %lld times: %g",
          dev_name(), (long long)k, r.run.progress.scaler.scale);
    /* a step whose scale backed off is one that kept the weights; the first surely overflows */
    CHECK(!r.w.changed[0] && r.w.scale[0] == 0x1p126, "%s: 2^127 overflows at once", dev_name());
    for (int g = 0; g < MAX_STEPS; g++) {
        bool backed_off = r.w.scale[g] < (g ? r.w.scale[g - 1] : 0x1p127);
        CHECK(r.w.changed[g] != backed_off, "%s: step %d %s the weights with the scale at %g", dev_name(), g,
              r.w.changed[g] ? "changed" : "kept", r.w.scale[g]);
    }
    bool finite = true;
    const float *w = r.run.weights.data;
    for (int64_t i = 0; i < ct_tensor_numel(&r.run.weights); i++) finite &= isfinite(w[i]) != 0;
    CHECK(finite, "%s: the weights are finite", dev_name());
    outcome_free(&r);
}

/* A NaN loss is nan_inf_policy's, scaler or not. */
static void test_nan_loss(void) {
    ct_training_args a;
    run_args(&a, "nanloss");
    outcome r = run(&a, &(ct_grad_scaler_opts){65536, 2, 0.5, 2000}, NULL, 1u << 2, true, 0);
    CHECK(r.run.status == CT_ERR_NUMERIC && strstr(r.run.message, "the loss is nan"), "%s: a NaN loss: %s", dev_name(),
          r.run.message);
    outcome_free(&r);
}

/* file's grad_scaler.key set to value (taken), the checkpoint re-signed. */
static void set_scaler_key(const char *dir, const char *file, const char *key, json_t *value) {
    json_t *root = json_load_file(file, 0, NULL);
    json_t *sc = json_object_get(root, "grad_scaler");
    CHECK(sc != NULL, "%s holds the scaler state", file);
    json_object_set_new(sc, key, value);
    CHECK_OK(ct_json_write_file(root, file));
    json_decref(root);
    CHECK_OK(ct_checkpoint_write_manifest(dir));
}

/* The scaler's state survives a crash; damaged, it is refused by name. */
static void test_resume(void) {
    ct_training_args a;
    ct_grad_scaler_opts o = {65536, 2, 0.5, 3};
    uint64_t poisoned = 1u << 2 | 1u << 6;
    run_args(&a, "whole");
    outcome whole = run(&a, &o, NULL, poisoned, false, 0);
    run_args(&a, "crash");
    a.save_strategy = CT_INTERVAL_STEPS;
    a.save_steps = 4;
    outcome crashed = run(&a, &o, NULL, poisoned, false, 7);
    CHECK(crashed.run.status == CT_ERR_IO, "%s: the simulated crash: %s", dev_name(), crashed.run.message);
    char ckpt[4400], file[4500];
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint-4", a.output_dir);
    outcome resumed = run(&a, &o, ckpt, poisoned, false, 0);
    CHECK(resumed.run.status == CT_OK, "%s: resume: %s", dev_name(), resumed.run.message);
    CHECK(ct_fixture_same_bits(&whole.run.weights, &resumed.run.weights), "%s: the resumed run's weights differ", dev_name());
    CHECK(json_equal(whole.run.log, resumed.run.log), "%s: the resumed run's log differs", dev_name());
    CHECK(resumed.run.progress.scaler.scale == whole.run.progress.scaler.scale &&
              resumed.run.progress.scaler.growth_tracker == whole.run.progress.scaler.growth_tracker &&
              resumed.run.progress.scaler_skipped == 2 && whole.run.progress.scaler_skipped == 2,
          "%s: the scaler state after resuming: %g/%lld/%lld, uninterrupted %g/%lld/%lld", dev_name(),
          resumed.run.progress.scaler.scale, (long long)resumed.run.progress.scaler.growth_tracker,
          (long long)resumed.run.progress.scaler_skipped, whole.run.progress.scaler.scale,
          (long long)whole.run.progress.scaler.growth_tracker, (long long)whole.run.progress.scaler_skipped);
    /* damaged states, each in a re-signed copy of the file */
    snprintf(file, sizeof file, "%s/rng_state_0.json", ckpt);
    json_t *orig = json_load_file(file, 0, NULL);
    const struct {
        const char *key;
        json_t *value;
        const char *want;
    } cases[] = {{"growth_tracker", json_integer(3), "grad_scaler.growth_tracker: 3 is outside [0, 3)"},
                 {"growth_tracker", json_integer(-1), "grad_scaler.growth_tracker: -1"},
                 {"skipped", json_integer(9), "grad_scaler.skipped"},
                 {"skipped", json_integer(0), "optimizer.h5: step: 3"},
                 {"scale", json_string("-1"), "grad_scaler.scale: -1"},
                 {"scale", json_string("0.1"), "grad_scaler.scale: 0.10000000000000001 is not a float32"},
                 {"scale", json_string("x"), "grad_scaler.scale must be a number"},
                 {"skipped", json_string("1"), "grad_scaler must be an object"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK_OK(ct_json_write_file(orig, file));
        set_scaler_key(ckpt, file, cases[i].key, cases[i].value);
        outcome bad = run(&a, &o, ckpt, poisoned, false, 0);
        CHECK(bad.run.status == CT_ERR_FORMAT && strstr(bad.run.message, cases[i].want) &&
                  strstr(bad.run.message, i == 3 ? "checkpoint-4/optimizer.h5" : "checkpoint-4/rng_state_0.json"),
              "%s: grad_scaler.%s damaged is refused naming it (%s): %s: %s", dev_name(), cases[i].key, cases[i].want,
              ct_status_str(bad.run.status), bad.run.message);
        outcome_free(&bad);
    }
    CHECK_OK(ct_json_write_file(orig, file));
    json_decref(orig);
    outcome_free(&whole);
    outcome_free(&crashed);
    outcome_free(&resumed);
}

/* --- precision arguments ---------------------------------------------------------------------------- */

static void test_precision_refused(void) {
    const char *names[] = {"fp16", "bf16", "tf32"};
    for (int i = 0; i < 3; i++) {
        ct_training_args a;
        run_args(&a, "precision");
        CHECK_OK(ct_training_args_set(&a, names[i], "true"));
        outcome r = run(&a, NULL, NULL, 0, false, 0);
        char want[64];
        snprintf(want, sizeof want, "training_args.%s: ", names[i]);
        CHECK(r.run.status == CT_ERR_CONFIG && strstr(r.run.message, want) && strstr(r.run.message, "computes in float32 only") &&
                  strstr(r.run.message, dev.kind == CT_DEVICE_CPU ? "cpu" : "cuda"),
              "%s: %s true is refused naming the device: %s: %s", dev_name(), names[i], ct_status_str(r.run.status),
              r.run.message);
        outcome_free(&r);
    }
    ct_training_args a;
    run_args(&a, "tf32false");
    CHECK_OK(ct_training_args_set(&a, "tf32", "false"));
    outcome r = run(&a, NULL, NULL, 0, false, 0);
    CHECK(r.run.status == CT_OK, "%s: tf32 false asks for float32: %s", dev_name(), r.run.message);
    outcome_free(&r);
}

/* --- device memory ---------------------------------------------------------------------------------- */

typedef struct mem_watch {
    ct_callback base;
    int64_t at_10, peak_after_10, at_end;
} mem_watch;

static ct_status mem_step_end(ct_callback *cb, const ct_callback_args *a) {
    mem_watch *w = ct_container_of(cb, mem_watch, base);
    int64_t g = a->state->global_step;
    if (g == 10) {
        ct_device_reset_peak(dev); /* the peak is the count now */
        w->at_10 = ct_device_peak_allocated(dev);
    } else if (g == a->state->max_steps) {
        w->peak_after_10 = ct_device_peak_allocated(dev);
        ct_device_reset_peak(dev);
        w->at_end = ct_device_peak_allocated(dev);
    }
    return CT_OK;
}

static const ct_callback_ops mem_ops = {.size = sizeof(ct_callback_ops), .name = "mem", .on_step_end = mem_step_end,
                                        .destroy = (void (*)(ct_callback *))free};

static void test_device_memory(void) {
    ct_training_args a;
    run_args(&a, "memory");
    a.skip_memory_metrics = false;
    a.max_steps = 1000;
    a.logging_steps = 100;
    a.eval_strategy = CT_INTERVAL_STEPS;
    a.eval_steps = 250;
    ct_dataset *train = ct_fixture_small_data(80, 1);
    ct_dataset *eval = ct_fixture_small_data(30, 2);
    ct_model m;
    ct_fixture_mlp mo = {.dim = 6, .classes = 3, .hidden = {8}, .max_batch = 16, .seed = 5, .device = dev};
    if (ct_fixture_mlp_build(&mo, &m) != CT_OK) abort();
    mem_watch *w = calloc(1, sizeof *w);
    w->base.ops = &mem_ops;
    ct_callback_list cbs = {0};
    ct_callback_list_add(&cbs, &w->base);
    ct_trainer t;
    ct_trainer_setup setup = {.model = &m, .train_dataset = train, .n_eval = 1, .eval_datasets = {eval},
                              .callbacks = &cbs};
    CHECK_OK(ct_trainer_init(&t, NULL, &a, &setup));
    ct_callback_list_free(&cbs);
    ct_train_output out = {0};
    CHECK_OK(ct_trainer_train(&t, NULL, &out));
    const char *keys[] = {"init_mem_gpu_alloc_delta", "init_mem_gpu_peaked_delta", "train_mem_gpu_alloc_delta",
                          "train_mem_gpu_peaked_delta", "before_init_mem_gpu"};
    for (int i = 0; i < 5; i++) {
        const json_t *v = json_object_get(out.metrics, keys[i]);
        if (dev.kind == CT_DEVICE_CPU)
            CHECK(!v, "cpu: no %s (the CPU's memory is the process's)", keys[i]);
        else
            CHECK(json_is_integer(v) && json_integer_value(v) >= 0, "%s: %s is reported (%s)", dev_name(), keys[i],
                  v ? "not a count >= 0" : "missing");
    }
    if (dev.kind != CT_DEVICE_CPU) {
        /* init allocates the model's buffers on the device; training adds the optimizer state, the
         * loss gradient and the batch buffers, and nothing per step */
        CHECK(json_integer_value(json_object_get(out.metrics, "init_mem_gpu_alloc_delta")) > 0,
              "the model's device memory counts in init");
        CHECK(json_integer_value(json_object_get(out.metrics, "train_mem_gpu_alloc_delta")) > 0,
              "the optimizer state counts in train");
        ct_callback *cb = ct_trainer_pop_callback(&t, "mem");
        mem_watch *got = ct_container_of(cb, mem_watch, base);
        CHECK(got->at_10 > 0 && got->at_end == got->at_10 && got->peak_after_10 == got->at_10,
              "device memory over 990 steps with evaluations: %lld bytes at step 10, peak %lld after, %lld at the end",
              (long long)got->at_10, (long long)got->peak_after_10, (long long)got->at_end);
        ct_callback_free(cb);
    }
    ct_train_output_free(&out);
    ct_trainer_free(&t);
    ct_model_free(&m);
    ct_dataset_free(train);
    ct_dataset_free(eval);
}

int main(int argc, char **argv) {
    (void)argc;
    if (!ct_test_use_checked_device(argv, "1")) return 1;
    ct_test_begin("grad_scaler");
    tmp_root = ct_fixture_tmp_root("test_grad_scaler");
    test_rule();
    const ct_device devices[] = {CT_CPU, {CT_DEVICE_CUDA, 0}};
    for (int i = 0; i < 2; i++) {
        dev = devices[i];
        test_exact_without_overflow();
        test_injected_overflow();
        test_real_overflow();
        test_nan_loss();
        test_resume();
        test_precision_refused();
        test_device_memory();
    }
    ct_fixture_cleanup();
    return ct_test_finish();
}
