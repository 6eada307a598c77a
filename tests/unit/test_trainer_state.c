/* trainer_state.json (callbacks/state.h): Hugging Face's keys, a random state written and read back
 * field for field, the errors of damaged files, and resolve (HF's compute_steps: ratios of the
 * run's steps, the eval_steps fallback). tests/oracle/test_flow_callback.py reads and rewrites HF's
 * own files through test_callbacks --state-roundtrip. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "callbacks/state.h"
#include "config/args.h"
#include "core/rng.h"
#include "core/util.h"
#include "testlib.h"

static ct_rng rng;

static const char *const hf_state_keys[] = {"best_global_step",
                                            "best_metric",
                                            "best_model_checkpoint",
                                            "epoch",
                                            "eval_steps",
                                            "global_step",
                                            "is_hyper_param_search",
                                            "is_local_process_zero",
                                            "is_world_process_zero",
                                            "log_history",
                                            "logging_steps",
                                            "max_steps",
                                            "num_input_tokens_seen",
                                            "num_train_epochs",
                                            "save_steps",
                                            "stateful_callbacks",
                                            "total_flos",
                                            "train_batch_size",
                                            "trial_name",
                                            "trial_params",
                                            NULL};

static void test_state(void) {
    ct_trainer_state s;
    CHECK_OK(ct_trainer_state_init(&s));
    CHECK(s.is_world_process_zero && s.is_local_process_zero && json_array_size(s.log_history) == 0 &&
              json_object_size(s.stateful_callbacks) == 0 && s.global_step == 0 && !s.has_best,
          "init");
    /* Fresh state: HF's nulls. */
    json_t *o;
    CHECK_OK(ct_trainer_state_to_json(&s, &o));
    size_t nkeys = 0;
    for (const char *const *k = hf_state_keys; *k; k++, nkeys++)
        CHECK(json_object_get(o, *k) != NULL, "key %s present", *k);
    CHECK(json_object_size(o) == nkeys, "exactly HF's %zu keys, got %zu", nkeys, json_object_size(o));
    CHECK(json_is_null(json_object_get(o, "best_metric")) && json_is_null(json_object_get(o, "best_global_step")) &&
              json_is_null(json_object_get(o, "best_model_checkpoint")) &&
              json_is_null(json_object_get(o, "train_batch_size")) && json_is_null(json_object_get(o, "trial_name")),
          "unset values are null");
    json_decref(o);

    /* Random contents survive to_json/from_json and save/load. */
    s.epoch = 2.0 + ct_rng_uniform(&rng);
    s.global_step = 1 + (int64_t)ct_rng_below(&rng, 100000);
    s.max_steps = s.global_step + (int64_t)ct_rng_below(&rng, 1000);
    s.logging_steps = 1 + (int64_t)ct_rng_below(&rng, 50);
    s.eval_steps = 1 + (int64_t)ct_rng_below(&rng, 50);
    s.save_steps = 1 + (int64_t)ct_rng_below(&rng, 50);
    s.train_batch_size = 1 + (int64_t)ct_rng_below(&rng, 512);
    s.num_train_epochs = 3;
    s.num_input_tokens_seen = (int64_t)ct_rng_below(&rng, 1u << 30) * 1000;
    s.total_flos = ct_rng_uniform(&rng) * 1e18;
    s.has_best = true;
    s.best_metric = ct_rng_normal(&rng);
    s.best_global_step = s.global_step / 2;
    snprintf(s.best_model_checkpoint, sizeof s.best_model_checkpoint, "out/checkpoint-%lld",
             (long long)s.best_global_step);
    s.is_local_process_zero = false;
    s.is_hyper_param_search = true;
    for (int i = 0; i < 3; i++) {
        json_t *e = json_pack("{s:f,s:f,s:I}", "loss", ct_rng_uniform(&rng), "epoch", 0.1 * i, "step", (json_int_t)i);
        CHECK_OK(ct_trainer_state_log(&s, e));
        json_decref(e);
    }
    json_t *not_obj = json_integer(3);
    CHECK_ERR(ct_trainer_state_log(&s, not_obj), CT_ERR_INVALID_ARG, "log entry");
    json_decref(not_obj);
    ct_trainer_control ctl = {.should_save = true, .should_log = true};
    json_t *cs;
    CHECK_OK(ct_trainer_control_save_state(&ctl, &cs));
    json_object_set_new(s.stateful_callbacks, "TrainerControl", cs);

    char dir[] = "/tmp/ct_test_state_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char file[256];
    snprintf(file, sizeof file, "%s/trainer_state.json", dir);
    CHECK_OK(ct_trainer_state_save(&s, file));
    ct_trainer_state t;
    CHECK_OK(ct_trainer_state_init(&t));
    CHECK_OK(ct_trainer_state_load(&t, file));
    CHECK(t.epoch == s.epoch && t.global_step == s.global_step && t.max_steps == s.max_steps &&
              t.logging_steps == s.logging_steps && t.eval_steps == s.eval_steps && t.save_steps == s.save_steps &&
              t.train_batch_size == s.train_batch_size && t.num_train_epochs == s.num_train_epochs &&
              t.num_input_tokens_seen == s.num_input_tokens_seen && t.total_flos == s.total_flos && t.has_best &&
              t.best_metric == s.best_metric && t.best_global_step == s.best_global_step &&
              strcmp(t.best_model_checkpoint, s.best_model_checkpoint) == 0 && !t.is_local_process_zero &&
              t.is_world_process_zero && t.is_hyper_param_search,
          "state round trip through %s", file);
    CHECK(json_equal(t.log_history, s.log_history), "log_history round trip");
    CHECK(json_equal(t.stateful_callbacks, s.stateful_callbacks), "stateful_callbacks round trip");
    ct_trainer_control back = {0};
    CHECK_OK(ct_trainer_control_load_state(&back, json_object_get(t.stateful_callbacks, "TrainerControl"), "x"));
    CHECK(memcmp(&back, &ctl, sizeof ctl) == 0, "TrainerControl round trip");
    json_t *badc = json_pack("{s:{s:b}}", "args", "should_sav", 1);
    CHECK_ERR(ct_trainer_control_load_state(&back, badc, "tc"), CT_ERR_FORMAT,
              "tc.args: unknown TrainerControl flag 'should_sav', did you mean 'should_save'?");
    json_decref(badc);

    /* The file: HF's layout (sorted keys, indent 2, final newline), no temporary left behind. */
    FILE *f = fopen(file, "r");
    char text[1 << 14];
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = 0;
    if (f) fclose(f);
    CHECK(n > 0 && text[n - 1] == '\n' && strncmp(text, "{\n  \"best_global_step\": ", 24) == 0, "layout: %.60s", text);
    CHECK(strstr(text, "\"trial_params\": null\n}") != NULL, "last key trial_params");
    int files = 0;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "ls -A %s | wc -l", dir);
    FILE *ls = popen(cmd, "r");
    if (ls && fscanf(ls, "%d", &files) != 1) files = -1;
    if (ls) pclose(ls);
    CHECK(files == 1, "only trainer_state.json in the directory, %d entries", files);

    /* A file as Hugging Face writes it (floats written by Python, a null epoch, no stateful key,
     * an unknown key): defaults where absent. */
    const char *hf = "{\n  \"best_global_step\": null,\n  \"best_metric\": null,\n  \"best_model_checkpoint\": null,\n"
                     "  \"epoch\": null,\n  \"eval_steps\": 500,\n  \"global_step\": 0,\n  \"future_key\": [1, 2],\n"
                     "  \"log_history\": [{\"loss\": 2.3, \"step\": 5}],\n  \"max_steps\": 0,\n"
                     "  \"num_train_epochs\": 0,\n  \"total_flos\": 0,\n  \"train_batch_size\": null\n}\n";
    json_t *hj = json_loads(hf, 0, NULL);
    CHECK_OK(ct_trainer_state_from_json(&t, hj, "hf.json"));
    CHECK(t.epoch == 0 && !t.has_best && t.best_model_checkpoint[0] == 0 && t.logging_steps == 500 &&
              t.save_steps == 500 && t.train_batch_size == 0 && t.is_world_process_zero && t.is_local_process_zero &&
              json_array_size(t.log_history) == 1 && json_object_size(t.stateful_callbacks) == 0,
          "HF file with nulls and absent keys");
    json_decref(hj);

    /* Errors: missing file, bad JSON with its position, wrong types, state left unchanged. */
    snprintf(file, sizeof file, "%s/missing.json", dir);
    CHECK_ERR(ct_trainer_state_load(&t, file), CT_ERR_IO, "missing.json: cannot open");
    snprintf(file, sizeof file, "%s/bad.json", dir);
    f = fopen(file, "w");
    fputs("{\n  \"global_step\": 3,\n  oops\n}\n", f);
    fclose(f);
    CHECK_ERR(ct_trainer_state_load(&t, file), CT_ERR_FORMAT, "bad.json:3:");
    remove(file);
    int64_t before = t.global_step;
    json_t *w = json_pack("{s:s}", "global_step", "ten");
    CHECK_ERR(ct_trainer_state_from_json(&t, w, "ckpt/trainer_state.json"), CT_ERR_FORMAT,
              "ckpt/trainer_state.json: 'global_step' must be an integer");
    json_decref(w);
    w = json_pack("{s:[i]}", "log_history", 1);
    CHECK_ERR(ct_trainer_state_from_json(&t, w, "st"), CT_ERR_FORMAT, "st: log_history[0] must be an object");
    json_decref(w);
    w = json_pack("{s:i}", "best_metric", 1);
    CHECK_OK(ct_trainer_state_from_json(&t, w, "st"));
    CHECK(t.has_best && t.best_metric == 1.0, "an integer best_metric reads as a number");
    json_decref(w);
    w = json_pack("{s:s}", "best_metric", "high");
    CHECK_ERR(ct_trainer_state_from_json(&t, w, "st"), CT_ERR_FORMAT, "'best_metric' must be a number or null");
    json_decref(w);
    CHECK(t.has_best && t.global_step == 0 && before == 0, "a failed read leaves the state as it was");
    w = json_integer(1);
    CHECK_ERR(ct_trainer_state_from_json(&t, w, "st"), CT_ERR_FORMAT, "st: a trainer state must be a JSON object");
    json_decref(w);
    snprintf(file, sizeof file, "/nonexistent/dir/trainer_state.json");
    CHECK_ERR(ct_trainer_state_save(&s, file), CT_ERR_IO, "/nonexistent/dir/trainer_state.json");
    snprintf(file, sizeof file, "%s/trainer_state.json", dir);
    remove(file);
    rmdir(dir);
    ct_trainer_state_free(&t);
    ct_trainer_state_free(&s);
    ct_trainer_state_free(&s); /* twice is harmless */

    /* resolve: HF's compute_steps and eval_steps fallback. */
    ct_training_args args;
    ct_training_args_default(&args);
    CHECK_OK(ct_trainer_state_init(&s));
    args.per_device_train_batch_size = 16;
    args.logging_steps = 0.25;
    args.save_steps = 0.3; /* 10 * 0.3 is exactly 3.0 in double */
    args.eval_strategy = CT_INTERVAL_STEPS;
    ct_trainer_state_resolve(&s, &args, 10, 2);
    CHECK(s.max_steps == 10 && s.num_train_epochs == 2 && s.train_batch_size == 16 && s.logging_steps == 3 &&
              s.save_steps == 3 && s.eval_steps == 3,
          "ratios: %lld %lld %lld", (long long)s.logging_steps, (long long)s.save_steps, (long long)s.eval_steps);
    args.logging_steps = 1;
    args.eval_steps = 0.999;
    args.save_steps = 7;
    ct_trainer_state_resolve(&s, &args, 1000, 1);
    CHECK(s.logging_steps == 1 && s.eval_steps == 999 && s.save_steps == 7, "1 is a count; 0.999 a ratio");
    args.eval_steps = 0;
    args.eval_strategy = CT_INTERVAL_EPOCH;
    ct_trainer_state_resolve(&s, &args, 1000, 1);
    CHECK(s.eval_steps == 500, "unset eval_steps off the steps strategy: HF's 500, got %lld", (long long)s.eval_steps);
    args.eval_strategy = CT_INTERVAL_STEPS;
    args.logging_steps = 0.05;
    ct_trainer_state_resolve(&s, &args, 7, 1);
    CHECK(s.eval_steps == 1 && s.logging_steps == 1, "ceil(0.35) = 1");
    ct_trainer_state_free(&s);
}

int main(void) {
    ct_test_begin("test_trainer_state");
    ct_rng_init(&rng, ct_test_seed, 0, 0);
    test_state();
    return ct_test_finish();
}
