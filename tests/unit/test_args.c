/* Training arguments: the schema table, Hugging Face's defaults, set() from command-line text for
 * every type (and the messages bad text gets), JSON in and out (round trips of random arguments,
 * unknown keys with "did you mean", all-or-nothing from_json), every validation rule with its exact
 * message, the derived defaults validate() resolves, the optimizer and scheduler configurations the
 * arguments map to, and docs/config.md against the schema (when CT_SOURCE_DIR names the source tree).
 *
 * The binary also serves tests/oracle/test_training_args.py, which compares it with Hugging Face:
 *   test_args --dump-defaults   prints the defaults as JSON
 *   test_args --validate        reads one JSON object of arguments per line from stdin and prints, per
 *                               line, {"ok": true, "args": resolved} or {"ok": false, "error": message}
 *   test_args --markdown        prints docs/config.md's text (regenerate the file with it).
 *
 * Why one file of over 600 lines: it is the test of one table (config/args.c) and the program
 * tests/oracle/test_training_args.py drives; every section walks the same schema rows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/args.h"
#include "config/args_impl.h"
#include "core/rng.h"
#include "testlib.h"

static ct_rng rng;

/* The status is CT_ERR_CONFIG and the message is exactly `want`. */
#define CHECK_MSG(expr, want)                                                                                          \
    do {                                                                                                               \
        ct_status s2_ = (expr);                                                                                        \
        CHECK(s2_ == CT_ERR_CONFIG, "%s -> %s, wanted a config error", #expr, ct_status_str(s2_));                     \
        CHECK(strcmp(ct_last_error(), (want)) == 0, "%s:\n   got: %s\n  want: %s", #expr, ct_last_error(), (want));    \
    } while (0)

static json_t *parse(const char *text) {
    json_error_t err;
    json_t *v = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    if (!v) {
        printf("bad JSON in the test: %s: %s\n", text, err.text);
        abort();
    }
    return v;
}

/* Fresh defaults, then the JSON object `text` applied. */
static ct_status args_from(ct_training_args *a, const char *text) {
    ct_training_args_default(a);
    json_t *o = parse(text);
    ct_status s = ct_training_args_from_json(a, o, "training_args");
    json_decref(o);
    return s;
}

/* Defaults + text, validated at "training_args"; the args are freed. */
static ct_status validate_text(const char *text) {
    ct_training_args a;
    ct_status s = args_from(&a, text);
    CHECK(s == CT_OK, "applying %s: %s", text, ct_last_error());
    if (s == CT_OK) s = ct_training_args_validate_at(&a, "training_args");
    ct_training_args_free(&a);
    return s;
}

static void test_schema(void) {
    int n = 0;
    const ct_arg_spec *rows = ct_training_args_schema(&n);
    CHECK(n >= 40, "schema has %d rows", n);
    for (int i = 0; i < n; i++) {
        const ct_arg_spec *r = &rows[i];
        CHECK(r->name && r->name[0] && r->doc && strlen(r->doc) > 10, "row %d has a name and a doc", i);
        CHECK(ct_training_args_find(r->name) == r, "find(%s)", r->name);
        for (int j = 0; j < i; j++) CHECK(strcmp(rows[j].name, r->name) != 0, "duplicate row %s", r->name);
        json_error_t err;
        json_t *d = json_loads(r->default_text, JSON_DECODE_ANY, &err);
        CHECK(d != NULL, "%s: default '%s' is JSON", r->name, r->default_text);
        json_decref(d);
        if (r->type == CT_ARG_ENUM || r->type == CT_ARG_LIST)
            CHECK(r->allowed && r->allowed[0], "%s: an enum or list row lists its values", r->name);
        CHECK(strchr(r->doc, '\n') == NULL, "%s: the doc is one line", r->name);
    }
    CHECK(ct_training_args_find("learning_rat") == NULL, "find of an unknown name");
    CHECK(ct_training_args_find(NULL) == NULL, "find(NULL)");
    CHECK(strcmp(ct_interval_name(CT_INTERVAL_BEST), "best") == 0 &&
              strcmp(ct_interval_name(CT_INTERVAL_NO), "no") == 0,
          "interval names");
    CHECK(strcmp(ct_log_level_name(CT_LOG_PASSIVE), "passive") == 0 &&
              strcmp(ct_log_level_name(CT_LOG_CRITICAL), "critical") == 0,
          "log level names");
}

/* Hugging Face 4.51's TrainingArguments defaults (the oracle test checks them against the real class). */
static void test_defaults(void) {
    ct_training_args a;
    ct_training_args_default(&a);
    CHECK(strcmp(a.output_dir, "trainer_output") == 0, "output_dir %s", a.output_dir);
    CHECK(!a.overwrite_output_dir, "overwrite_output_dir");
    CHECK(a.num_train_epochs == 3.0 && a.max_steps == -1, "length");
    CHECK(a.per_device_train_batch_size == 8 && a.per_device_eval_batch_size == 8, "batch sizes");
    CHECK(a.gradient_accumulation_steps == 1 && !a.dataloader_drop_last && a.dataloader_num_workers == 0, "batches");
    CHECK(strcmp(a.optim, "adamw_torch") == 0, "optim %s", a.optim);
    CHECK(a.learning_rate == 5e-5 && a.weight_decay == 0 && a.adam_beta1 == 0.9 && a.adam_beta2 == 0.999 &&
              a.adam_epsilon == 1e-8 && a.max_grad_norm == 1.0,
          "optimizer values");
    CHECK(strcmp(a.lr_scheduler_type, "linear") == 0 && a.lr_scheduler_kwargs == NULL, "scheduler");
    CHECK(a.warmup_ratio == 0 && a.warmup_steps == 0, "warmup");
    CHECK(a.eval_strategy == CT_INTERVAL_NO && a.eval_steps == 0 && a.eval_delay == 0 && !a.eval_on_start, "eval");
    CHECK(a.save_strategy == CT_INTERVAL_STEPS && a.save_steps == 500 && a.save_total_limit == 0 && !a.save_only_model,
          "save");
    CHECK(!a.load_best_model_at_end && a.metric_for_best_model[0] == '\0' && a.greater_is_better == -1, "best model");
    CHECK(a.logging_strategy == CT_INTERVAL_STEPS && a.logging_steps == 500 && !a.logging_first_step &&
              a.logging_nan_inf_filter,
          "logging");
    CHECK(a.log_level == CT_LOG_PASSIVE && a.log_level_replica == CT_LOG_WARNING && a.log_on_each_node, "log levels");
    CHECK(a.report_to == 0 && !a.disable_tqdm, "report_to, tqdm");
    CHECK(a.seed == 42 && a.data_seed == -1, "seeds");

    /* Defaults validate, resolving only data_seed (no best-model metric without load_best_model_at_end). */
    CHECK_OK(ct_training_args_validate(&a));
    CHECK(a.data_seed == 42 && a.metric_for_best_model[0] == '\0' && a.greater_is_better == -1 && a.eval_steps == 0,
          "resolved defaults");
    ct_training_args_free(&a);
}

/* set() from text, for every type. */
static void test_set_text(void) {
    ct_training_args a;
    ct_training_args_default(&a);

    /* bool: Hugging Face's string_to_bool words, any case */
    const char *yes[] = {"true", "True", "TRUE", "yes", "y", "t", "1"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
        a.overwrite_output_dir = false;
        CHECK_OK(ct_training_args_set(&a, "overwrite_output_dir", yes[i]));
        CHECK(a.overwrite_output_dir, "'%s' is true", yes[i]);
    }
    const char *no[] = {"false", "False", "no", "n", "f", "0"};
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
        a.logging_nan_inf_filter = true;
        CHECK_OK(ct_training_args_set(&a, "logging_nan_inf_filter", no[i]));
        CHECK(!a.logging_nan_inf_filter, "'%s' is false", no[i]);
    }
    CHECK_MSG(ct_training_args_set(&a, "eval_on_start", "maybe"), "eval_on_start: expected true or false, got 'maybe'");
    CHECK_MSG(ct_training_args_set(&a, "eval_on_start", ""), "eval_on_start: expected true or false, got ''");

    /* int */
    CHECK_OK(ct_training_args_set(&a, "per_device_train_batch_size", "64"));
    CHECK(a.per_device_train_batch_size == 64, "int set");
    CHECK_OK(ct_training_args_set(&a, "max_steps", "-1"));
    CHECK(a.max_steps == -1, "negative int");
    CHECK_OK(ct_training_args_set(&a, "max_steps", "1e3"));
    CHECK(a.max_steps == 1000, "1e3 is an integer");
    CHECK_MSG(ct_training_args_set(&a, "max_steps", "1.5"), "max_steps: expected an integer, got '1.5'");
    CHECK_MSG(ct_training_args_set(&a, "seed", "forty"), "seed: expected an integer, got 'forty'");
    CHECK_MSG(ct_training_args_set(&a, "seed", "12abc"), "seed: expected an integer, got '12abc'");
    CHECK_MSG(ct_training_args_set(&a, "seed", "0x10"), "seed: expected an integer, got '0x10'");
    CHECK_MSG(ct_training_args_set(&a, "seed", "99999999999999999999999"),
              "seed: 99999999999999999999999 is not a 64-bit integer (they run from -9223372036854775808 to "
              "9223372036854775807)");
    CHECK_MSG(ct_training_args_set(&a, "seed", "-9223372036854775809"),
              "seed: -9223372036854775809 is not a 64-bit integer (they run from -9223372036854775808 to "
              "9223372036854775807)");
    /* the ends of the range are integers like any other (the value's own rules judge them) */
    CHECK_OK(ct_training_args_set(&a, "max_steps", "9223372036854775807"));
    CHECK(a.max_steps == INT64_MAX, "max_steps 2^63 - 1: %lld", (long long)a.max_steps);
    CHECK(a.seed == 42, "a failed set leaves the value: %lld", (long long)a.seed);
    /* nullable int */
    CHECK_OK(ct_training_args_set(&a, "save_total_limit", "3"));
    CHECK(a.save_total_limit == 3, "save_total_limit");
    CHECK_OK(ct_training_args_set(&a, "save_total_limit", "None"));
    CHECK(a.save_total_limit == 0, "None unsets");
    CHECK_OK(ct_training_args_set(&a, "data_seed", "7"));
    CHECK_OK(ct_training_args_set(&a, "data_seed", "null"));
    CHECK(a.data_seed == -1, "null unsets data_seed");
    CHECK_MSG(ct_training_args_set(&a, "data_seed", "nil"), "data_seed: expected an integer or null, got 'nil'");

    /* real */
    CHECK_OK(ct_training_args_set(&a, "learning_rate", "3e-4"));
    CHECK(a.learning_rate == 3e-4, "learning_rate %g", a.learning_rate);
    CHECK_OK(ct_training_args_set(&a, "num_train_epochs", "2"));
    CHECK(a.num_train_epochs == 2.0, "integer text for a real");
    CHECK_OK(ct_training_args_set(&a, "save_steps", "0.25"));
    CHECK(a.save_steps == 0.25, "ratio");
    CHECK_MSG(ct_training_args_set(&a, "learning_rate", "fast"), "learning_rate: expected a number, got 'fast'");
    CHECK_MSG(ct_training_args_set(&a, "learning_rate", "nan"), "learning_rate: expected a number, got 'nan'");
    CHECK_MSG(ct_training_args_set(&a, "learning_rate", "inf"), "learning_rate: expected a number, got 'inf'");
    CHECK_MSG(ct_training_args_set(&a, "learning_rate", "1e999"), "learning_rate: expected a number, got '1e999'");
    CHECK_MSG(ct_training_args_set(&a, "learning_rate", "0.1x"), "learning_rate: expected a number, got '0.1x'");
    CHECK_MSG(ct_training_args_set(&a, "learning_rate", "0x10"), "learning_rate: expected a number, got '0x10'");
    CHECK_MSG(ct_training_args_set(&a, "learning_rate", " 3"), "learning_rate: expected a number, got ' 3'");
    CHECK(a.learning_rate == 3e-4, "unchanged after bad text");
    CHECK_OK(ct_training_args_set(&a, "eval_steps", "null"));
    CHECK(a.eval_steps == 0, "eval_steps null is 0 (unset)");

    /* string, with and without a closed set */
    CHECK_OK(ct_training_args_set(&a, "output_dir", "runs/exp 1"));
    CHECK(strcmp(a.output_dir, "runs/exp 1") == 0, "output_dir");
    char long_dir[2000];
    memset(long_dir, 'x', sizeof long_dir - 1);
    long_dir[sizeof long_dir - 1] = '\0';
    CHECK_MSG(ct_training_args_set(&a, "output_dir", long_dir), "output_dir: too long (1999 bytes, at most 1023)");
    CHECK_MSG(ct_training_args_set(&a, "output_dir", "\xff\xfe"), "output_dir: '\xff\xfe' is not valid UTF-8");
    CHECK_OK(ct_training_args_set(&a, "optim", "sgd"));
    CHECK(strcmp(a.optim, "sgd") == 0, "optim");
    CHECK_MSG(
        ct_training_args_set(&a, "optim", "adamw_torh"),
        "optim: unknown value 'adamw_torh', did you mean 'adamw_torch'? (allowed: adamw_torch, adamw, adam, sgd)");
    CHECK_MSG(ct_training_args_set(&a, "optim", "lion"),
              "optim: unknown value 'lion' (allowed: adamw_torch, adamw, adam, sgd)");
    CHECK(strcmp(a.optim, "sgd") == 0, "optim unchanged");
    CHECK_OK(ct_training_args_set(&a, "lr_scheduler_type", "cosine_with_restarts"));
    CHECK_ERR(ct_training_args_set(&a, "lr_scheduler_type", "cosin"), CT_ERR_CONFIG,
              "lr_scheduler_type: unknown value 'cosin', did you mean 'cosine'?");
    CHECK_OK(ct_training_args_set(&a, "metric_for_best_model", "accuracy"));
    CHECK(strcmp(a.metric_for_best_model, "accuracy") == 0, "metric");
    CHECK_OK(ct_training_args_set(&a, "metric_for_best_model", "None"));
    CHECK(a.metric_for_best_model[0] == '\0', "metric unset");

    /* enum */
    CHECK_OK(ct_training_args_set(&a, "eval_strategy", "epoch"));
    CHECK(a.eval_strategy == CT_INTERVAL_EPOCH, "eval_strategy");
    CHECK_OK(ct_training_args_set(&a, "save_strategy", "best"));
    CHECK(a.save_strategy == CT_INTERVAL_BEST, "save_strategy best");
    CHECK_MSG(ct_training_args_set(&a, "eval_strategy", "best"),
              "eval_strategy: unknown value 'best' (allowed: no, steps, epoch, continuous)");
    CHECK_MSG(ct_training_args_set(&a, "eval_strategy", "epochs"),
              "eval_strategy: unknown value 'epochs', did you mean 'epoch'? (allowed: no, steps, epoch, continuous)");
    CHECK(a.eval_strategy == CT_INTERVAL_EPOCH, "unchanged");
    /* Asynchronous evaluation's arguments (ctrainer's own). */
    {
        ct_training_args b;
        ct_training_args_default(&b);
        CHECK(!b.eval_async && !b.save_async && strcmp(b.eval_device, "auto") == 0 &&
                  strcmp(b.eval_async_policy, "latest") == 0,
              "async defaults");
        CHECK_OK(ct_training_args_set(&b, "eval_strategy", "continuous"));
        CHECK_MSG(ct_training_args_validate(&b), "eval_strategy: 'continuous' evaluates beside training, one evaluation "
                  "after the other, and needs eval_async true");
        CHECK_OK(ct_training_args_set(&b, "eval_async", "true"));
        CHECK_OK(ct_training_args_validate(&b));
        CHECK(b.eval_strategy == CT_INTERVAL_CONTINUOUS, "continuous");
        CHECK_MSG(ct_training_args_set(&b, "eval_async_policy", "latests"),
                  "eval_async_policy: unknown value 'latests', did you mean 'latest'? (allowed: latest, skip, wait)");
        CHECK_OK(ct_training_args_set(&b, "eval_device", "gpu"));
        CHECK_MSG(ct_training_args_validate(&b),
                  "eval_device: 'gpu' is not a device (expected \"auto\", \"cpu\" or \"cuda:N\")");
        CHECK_OK(ct_training_args_set(&b, "eval_device", "cuda:1"));
        CHECK_OK(ct_training_args_validate(&b));
        CHECK_MSG(ct_training_args_set(&b, "logging_strategy", "continuous"),
                  "logging_strategy: unknown value 'continuous' (allowed: no, steps, epoch)");
        b.logging_strategy = CT_INTERVAL_CONTINUOUS;
        CHECK_MSG(ct_training_args_validate(&b), "logging_strategy: 'continuous' is an eval_strategy only");
        ct_training_args_free(&b);
    }
    /* The device (ctrainer's device, Hugging Face's use_cpu). */
    {
        ct_training_args b;
        ct_training_args_default(&b);
        CHECK(strcmp(b.device, "auto") == 0 && !b.use_cpu, "device defaults: auto, use_cpu false");
        ct_device d;
        CHECK_OK(ct_training_args_device(&b, 0, &d));
        CHECK(d.kind == (ct_device_count(CT_DEVICE_CUDA) > 0 ? CT_DEVICE_CUDA : CT_DEVICE_CPU),
              "auto takes a GPU exactly when one is visible");
        CHECK_OK(ct_training_args_set(&b, "use_cpu", "true"));
        CHECK_OK(ct_training_args_device(&b, 3, &d));
        CHECK(d.kind == CT_DEVICE_CPU, "use_cpu forces the CPU");
        CHECK_OK(ct_training_args_set(&b, "device", "cuda:1"));
        CHECK_MSG(ct_training_args_validate(&b),
                  "device: 'cuda:1' contradicts use_cpu true (leave device \"auto\" or set \"cpu\")");
        CHECK_OK(ct_training_args_set(&b, "use_cpu", "false"));
        CHECK_OK(ct_training_args_validate(&b));
        CHECK_OK(ct_training_args_set(&b, "device", "gpu"));
        CHECK_MSG(ct_training_args_validate(&b),
                  "device: 'gpu' is not a device (expected \"auto\", \"cpu\", \"cuda\" or \"cuda:N\")");
        CHECK_OK(ct_training_args_set(&b, "device", "cuda:99"));
        CHECK_OK(ct_training_args_validate(&b));
        CHECK_ERR(ct_training_args_device(&b, 0, &d), CT_ERR_DEVICE, "training_args.device: device cuda:99");
        CHECK_OK(ct_training_args_set(&b, "device", "cpu"));
        CHECK_OK(ct_training_args_device(&b, 5, &d));
        CHECK(d.kind == CT_DEVICE_CPU, "cpu is the CPU on any local rank");
        ct_training_args_free(&b);
    }
    CHECK_OK(ct_training_args_set(&a, "log_level", "debug"));
    CHECK(a.log_level == CT_LOG_DEBUG, "log_level");
    CHECK_MSG(
        ct_training_args_set(&a, "log_level_replica", "warnng"),
        "log_level_replica: unknown value 'warnng', did you mean 'warning'? (allowed: passive, debug, info, warning, "
        "error, critical)");

    /* tri-state bool */
    CHECK_OK(ct_training_args_set(&a, "greater_is_better", "false"));
    CHECK(a.greater_is_better == 0, "greater_is_better false");
    CHECK_OK(ct_training_args_set(&a, "greater_is_better", "True"));
    CHECK(a.greater_is_better == 1, "greater_is_better true");
    CHECK_OK(ct_training_args_set(&a, "greater_is_better", "null"));
    CHECK(a.greater_is_better == -1, "greater_is_better unset");
    CHECK_MSG(ct_training_args_set(&a, "greater_is_better", "2"),
              "greater_is_better: expected true, false or null, got '2'");

    /* object */
    CHECK_OK(ct_training_args_set(&a, "lr_scheduler_kwargs", "{\"num_cycles\": 2}"));
    CHECK(a.lr_scheduler_kwargs && json_integer_value(json_object_get(a.lr_scheduler_kwargs, "num_cycles")) == 2,
          "kwargs object");
    CHECK_MSG(ct_training_args_set(&a, "lr_scheduler_kwargs", "[1]"),
              "lr_scheduler_kwargs: expected an object, got [1]");
    CHECK_ERR(ct_training_args_set(&a, "lr_scheduler_kwargs", "{num_cycles: 2}"), CT_ERR_CONFIG,
              "lr_scheduler_kwargs: expected a JSON object, got '{num_cycles: 2}' (");
    CHECK(a.lr_scheduler_kwargs != NULL, "kwargs unchanged by a bad set");
    CHECK_OK(ct_training_args_set(&a, "lr_scheduler_kwargs", "{}"));
    CHECK(a.lr_scheduler_kwargs == NULL, "{} is no kwargs");

    /* list */
    CHECK_OK(ct_training_args_set(&a, "report_to", "jsonl"));
    CHECK(a.report_to == CT_REPORT_JSONL, "report_to jsonl");
    CHECK_OK(ct_training_args_set(&a, "report_to", "none"));
    CHECK(a.report_to == 0, "report_to none");
    CHECK_OK(ct_training_args_set(&a, "report_to", "all"));
    CHECK(a.report_to == (CT_REPORT_JSONL | CT_REPORT_TENSORBOARD), "report_to all");
    CHECK_OK(ct_training_args_set(&a, "report_to", "[\"tensorboard\", \"jsonl\"]"));
    CHECK(a.report_to == (CT_REPORT_JSONL | CT_REPORT_TENSORBOARD), "report_to [tensorboard, jsonl]");
    CHECK_OK(ct_training_args_set(&a, "report_to", "[]"));
    CHECK(a.report_to == 0, "report_to []");
    CHECK_OK(ct_training_args_set(&a, "report_to", "[\"jsonl\"]"));
    CHECK(a.report_to == CT_REPORT_JSONL, "report_to [jsonl]");
    CHECK_MSG(ct_training_args_set(&a, "report_to", "jsonl,none"),
              "report_to[1]: 'none' cannot be combined with other values");
    CHECK_MSG(ct_training_args_set(&a, "report_to", "wandb"),
              "report_to: unknown value 'wandb' (allowed: none, all, jsonl, tensorboard)");
    CHECK_MSG(ct_training_args_set(&a, "report_to", "[1]"),
              "report_to[0]: expected a string or a list of strings of: none, all, jsonl, tensorboard, got 1");
    CHECK(a.report_to == CT_REPORT_JSONL, "report_to unchanged");

    /* unknown names */
    CHECK_MSG(ct_training_args_set(&a, "learning_rat", "1"),
              "learning_rat: unknown training argument, did you mean 'learning_rate'?");
    CHECK_MSG(ct_training_args_set(&a, "xyzzy", "1"), "xyzzy: unknown training argument");
    ct_training_args_free(&a);
}

static void test_json_in(void) {
    ct_training_args a;
    ct_training_args_default(&a);
    json_t *v = parse("\"3\"");
    CHECK_MSG(ct_training_args_set_json(&a, "seed", v, "training_args.seed"),
              "training_args.seed: expected an integer, got \"3\"");
    CHECK_MSG(ct_training_args_set_json(&a, "learning_rate", v, NULL), "learning_rate: expected a number, got \"3\"");
    json_decref(v);
    v = parse("null");
    CHECK_MSG(ct_training_args_set_json(&a, "learning_rate", v, "training_args.learning_rate"),
              "training_args.learning_rate: expected a number, got null");
    CHECK_OK(ct_training_args_set_json(&a, "eval_steps", v, "x"));
    CHECK_OK(ct_training_args_set_json(&a, "lr_scheduler_kwargs", v, "x"));
    json_decref(v);
    v = parse("12.0");
    CHECK_OK(ct_training_args_set_json(&a, "seed", v, NULL));
    CHECK(a.seed == 12, "integral real for an int");
    json_decref(v);
    v = parse("12.5");
    CHECK_MSG(ct_training_args_set_json(&a, "seed", v, NULL), "seed: expected an integer, got 12.5");
    json_decref(v);
    v = parse("\"a\\u0000b\"");
    CHECK_MSG(ct_training_args_set_json(&a, "output_dir", v, "training_args.output_dir"),
              "training_args.output_dir: the string contains a NUL character");
    json_decref(v);
    v = parse("1");
    CHECK_MSG(ct_training_args_set_json(&a, "learnin_rate", v, "training_args.learnin_rate"),
              "training_args.learnin_rate: unknown key 'learnin_rate', did you mean 'learning_rate'?");
    CHECK_MSG(ct_training_args_set_json(&a, "eval_strategy", v, "training_args.eval_strategy"),
              "training_args.eval_strategy: expected one of: no, steps, epoch, continuous, got 1");
    CHECK_MSG(ct_training_args_set_json(&a, "dataloader_drop_last", v, "training_args.dataloader_drop_last"),
              "training_args.dataloader_drop_last: expected true or false, got 1");
    json_decref(v);

    /* from_json: unknown keys with and without a hint, the path in every message, all or nothing */
    ct_training_args_free(&a);
    CHECK_MSG(args_from(&a, "{\"learning_rate\": 0.1, \"per_device_train_batch_sz\": 4}"),
              "training_args.per_device_train_batch_sz: unknown key 'per_device_train_batch_sz', did you mean "
              "'per_device_train_batch_size'?");
    CHECK(a.learning_rate == 5e-5, "from_json is all or nothing: %g", a.learning_rate);
    ct_training_args_free(&a);
    CHECK_MSG(args_from(&a, "{\"banana\": 1}"), "training_args.banana: unknown key 'banana'");
    ct_training_args_free(&a);
    CHECK_MSG(args_from(&a, "{\"lr_scheduler_kwargs\": {\"a\": 1}, \"save_strategy\": \"sometimes\"}"),
              "training_args.save_strategy: unknown value 'sometimes' (allowed: no, steps, epoch, best)");
    CHECK(a.lr_scheduler_kwargs == NULL, "kwargs not applied either");
    ct_training_args_free(&a);
    CHECK_MSG(args_from(&a, "{\"report_to\": [\"jsonl\", \"wandb\"]}"),
              "training_args.report_to[1]: unknown value 'wandb' (allowed: none, all, jsonl, tensorboard)");

    ct_training_args_free(&a);
    ct_training_args_default(&a);
    v = parse("[1, 2]");
    CHECK_MSG(ct_training_args_from_json(&a, v, "training_args"),
              "training_args: expected an object of training arguments, got [1,2]");
    json_decref(v);
    CHECK_OK(ct_training_args_from_json(&a, NULL, "training_args"));
    CHECK_OK(args_from(&a, "{\"seed\": 7, \"eval_strategy\": \"epoch\", \"report_to\": \"jsonl\", "
                           "\"lr_scheduler_kwargs\": {\"num_cycles\": 0.25}}"));
    CHECK(a.seed == 7 && a.eval_strategy == CT_INTERVAL_EPOCH && a.report_to == CT_REPORT_JSONL &&
              a.lr_scheduler_kwargs,
          "from_json applied");
    CHECK(a.learning_rate == 5e-5, "keys not given keep their values");
    ct_training_args_free(&a);
}

/* A random valid value for row r, as JSON. */
static json_t *random_value(const ct_arg_spec *r) {
    switch (r->type) {
    case CT_ARG_BOOL:
        if (strcmp(r->default_text, "null") == 0 && ct_rng_below(&rng, 3) == 0) return json_null();
        return json_boolean(ct_rng_below(&rng, 2));
    case CT_ARG_INT:
        if (strcmp(r->default_text, "null") == 0 && ct_rng_below(&rng, 3) == 0) return json_null();
        return json_integer((json_int_t)ct_rng_below(&rng, 100000) + 1);
    case CT_ARG_REAL: {
        if (strcmp(r->default_text, "null") == 0 && ct_rng_below(&rng, 3) == 0) return json_null();
        /* integral counts, ratios and awkward reals that need all 17 digits */
        int k = (int)ct_rng_below(&rng, 3);
        if (k == 0) return json_integer((json_int_t)ct_rng_below(&rng, 5000) + 1);
        if (k == 1) return json_real(ct_rng_uniform(&rng));
        return json_real(ct_rng_uniform(&rng) * pow(10.0, (double)ct_rng_below(&rng, 12) - 6.0));
    }
    case CT_ARG_STRING:
        if (r->allowed) {
            int n = 0;
            while (r->allowed[n]) n++;
            return json_string(r->allowed[ct_rng_below(&rng, (uint64_t)n)]);
        }
        if (strcmp(r->default_text, "null") == 0 && ct_rng_below(&rng, 3) == 0) return json_null();
        {
            char s[40];
            snprintf(s, sizeof s, "v\"%llu\\é/", (unsigned long long)ct_rng_below(&rng, 1000000));
            return json_string(s);
        }
    case CT_ARG_ENUM: {
        int n = 0;
        while (r->allowed[n]) n++;
        return json_string(r->allowed[ct_rng_below(&rng, (uint64_t)n)]);
    }
    case CT_ARG_OBJECT:
        if (ct_rng_below(&rng, 2)) return json_object();
        return json_pack("{s:f, s:[i, s]}", "num_cycles", ct_rng_uniform(&rng), "x", 1, "y");
    case CT_ARG_LIST: {
        /* one allowed word alone, or a list of the last one */
        int n = 0;
        while (r->allowed[n]) n++;
        if (ct_rng_below(&rng, 2)) return json_string(r->allowed[ct_rng_below(&rng, (uint64_t)n)]);
        return json_pack("[s]", r->allowed[n - 1]);
    }
    }
    return json_null();
}

static void test_round_trip(void) {
    int n;
    const ct_arg_spec *rows = ct_training_args_schema(&n);
    ct_training_args a, b;
    ct_training_args_default(&a);
    json_t *j1 = NULL, *j2 = NULL;
    CHECK_OK(ct_training_args_to_json(&a, &j1));
    CHECK(j1 && (int)json_object_size(j1) == n, "to_json has every argument");
    /* The defaults as JSON are the table's default texts, except report_to's list form. */
    for (int i = 0; i < n && j1; i++) {
        json_t *want = parse(rows[i].default_text);
        json_t *got = json_object_get(j1, rows[i].name);
        bool same =
            json_equal(want, got) ||
            (json_is_number(want) && json_is_number(got) && json_number_value(want) == json_number_value(got)) ||
            (strcmp(rows[i].name, "report_to") == 0 && json_is_array(got) && json_array_size(got) == 0);
        char *g = got ? json_dumps(got, JSON_ENCODE_ANY) : NULL;
        CHECK(same, "default of %s: to_json gives %s, the table says %s", rows[i].name, g ? g : "nothing",
              rows[i].default_text);
        free(g);
        json_decref(want);
    }
    ct_training_args_default(&b);
    CHECK_OK(ct_training_args_from_json(&b, j1, "training_args"));
    CHECK_OK(ct_training_args_to_json(&b, &j2));
    CHECK(json_equal(j1, j2), "defaults round trip");
    json_decref(j1);
    json_decref(j2);
    ct_training_args_free(&a);
    ct_training_args_free(&b);

    /* Random arguments: set every row through JSON, to_json, from_json into fresh defaults, to_json
     * again: equal JSON, and a deep copy gives the same too. */
    for (int trial = 0; trial < 200; trial++) {
        ct_training_args_default(&a);
        for (int i = 0; i < n; i++) {
            json_t *v = random_value(&rows[i]);
            ct_status s = ct_training_args_set_json(&a, rows[i].name, v, NULL);
            CHECK(s == CT_OK, "random %s: %s", rows[i].name, ct_last_error());
            json_decref(v);
        }
        j1 = j2 = NULL;
        CHECK_OK(ct_training_args_to_json(&a, &j1));
        ct_training_args_default(&b);
        CHECK_OK(ct_training_args_from_json(&b, j1, "training_args"));
        CHECK_OK(ct_training_args_to_json(&b, &j2));
        CHECK(j1 && j2 && json_equal(j1, j2), "random arguments round trip (trial %d)", trial);
        if (j1 && j2 && !json_equal(j1, j2)) {
            char *x = json_dumps(j1, 0), *y = json_dumps(j2, 0);
            printf("  %s\n  %s\n", x, y);
            free(x);
            free(y);
        }
        /* every field equal, reals bit for bit */
        CHECK(b.learning_rate == a.learning_rate && b.save_steps == a.save_steps && b.eval_steps == a.eval_steps &&
                  b.warmup_ratio == a.warmup_ratio && b.greater_is_better == a.greater_is_better &&
                  b.data_seed == a.data_seed && strcmp(a.output_dir, b.output_dir) == 0 && a.report_to == b.report_to,
              "fields equal after the round trip");
        ct_training_args c;
        CHECK_OK(ct_training_args_copy(&c, &a));
        json_t *j3 = NULL;
        CHECK_OK(ct_training_args_to_json(&c, &j3));
        CHECK(j3 && json_equal(j1, j3), "copy gives the same arguments");
        CHECK(a.lr_scheduler_kwargs == NULL || c.lr_scheduler_kwargs != a.lr_scheduler_kwargs, "copy is deep");
        ct_training_args_free(&c);
        json_decref(j3);
        json_decref(j1);
        json_decref(j2);
        ct_training_args_free(&a);
        ct_training_args_free(&b);
    }

    /* Values JSON cannot hold are errors, not bad output. */
    ct_training_args_default(&a);
    a.learning_rate = NAN;
    j1 = NULL;
    CHECK_ERR(ct_training_args_to_json(&a, &j1), CT_ERR_CONFIG, "learning_rate: not a finite number");
    CHECK(j1 == NULL, "no output on error");
    ct_training_args_free(&a);
}

/* Every validation rule, with its exact message. */
static void test_validate_rules(void) {
    /* one argument at a time */
    CHECK_MSG(validate_text("{\"output_dir\": \"\"}"), "training_args.output_dir: must not be empty");
    CHECK_MSG(validate_text("{\"num_train_epochs\": -1}"), "training_args.num_train_epochs: must be >= 0, got -1");
    CHECK_MSG(validate_text("{\"max_steps\": 0}"),
              "training_args.max_steps: must be -1 (train for num_train_epochs) or > 0, got 0");
    CHECK_MSG(validate_text("{\"max_steps\": -5}"),
              "training_args.max_steps: must be -1 (train for num_train_epochs) or > 0, got -5");
    CHECK_MSG(validate_text("{\"per_device_train_batch_size\": 0}"),
              "training_args.per_device_train_batch_size: must be >= 1, got 0");
    CHECK_MSG(validate_text("{\"per_device_eval_batch_size\": -2}"),
              "training_args.per_device_eval_batch_size: must be >= 1, got -2");
    CHECK_MSG(validate_text("{\"gradient_accumulation_steps\": 0}"),
              "training_args.gradient_accumulation_steps: must be >= 1, got 0");
    CHECK_MSG(validate_text("{\"generation_max_length\": -3}"),
              "training_args.generation_max_length: must be > 0 tokens (null means the prompt plus max_new_tokens), "
              "got -3");
    CHECK_MSG(validate_text("{\"dataloader_num_workers\": -1}"),
              "training_args.dataloader_num_workers: must be >= 0, got -1");
    /* the optimizer's own rules, on the argument they are about */
    CHECK_MSG(
        validate_text("{\"learning_rate\": -0.001}"),
        "training_args.learning_rate: optimizer 'adamw': invalid learning_rate = -0.001 (must be finite and >= 0)");
    CHECK_MSG(validate_text("{\"weight_decay\": -1}"),
              "training_args.weight_decay: optimizer 'adamw': invalid weight_decay = -1 (must be finite and >= 0)");
    CHECK_MSG(validate_text("{\"adam_beta1\": 1.0}"),
              "training_args.adam_beta1: optimizer 'adamw': invalid adam_beta1 = 1 (must be in [0, 1))");
    CHECK_MSG(validate_text("{\"optim\": \"adam\", \"adam_beta2\": -0.5}"),
              "training_args.adam_beta2: optimizer 'adam': invalid adam_beta2 = -0.5 (must be in [0, 1))");
    CHECK_MSG(validate_text("{\"adam_epsilon\": -1e-8}"),
              "training_args.adam_epsilon: optimizer 'adamw': invalid adam_epsilon = -1e-08 (must be finite and >= 0)");
    CHECK_OK(validate_text("{\"optim\": \"sgd\", \"adam_beta1\": 7}")); /* SGD has no betas */
    CHECK_MSG(validate_text("{\"max_grad_norm\": -1}"),
              "training_args.max_grad_norm: must be >= 0 (0 disables clipping), got -1");
    CHECK_MSG(validate_text("{\"warmup_ratio\": 1.5}"), "training_args.warmup_ratio: must lie in [0, 1], got 1.5");
    CHECK_MSG(validate_text("{\"warmup_ratio\": -0.1}"), "training_args.warmup_ratio: must lie in [0, 1], got -0.1");
    CHECK_MSG(validate_text("{\"warmup_steps\": -3}"),
              "training_args.warmup_steps: must be >= 0 (a count, or a ratio of the run below 1), got -3");
    CHECK_MSG(
        validate_text("{\"warmup_steps\": 2.5}"),
        "training_args.warmup_steps: must be a whole number when above 1 (below 1 it is a ratio of the run), got 2.5");
    CHECK_OK(validate_text("{\"warmup_steps\": 0.1}"));
    /* lr_scheduler_kwargs are checked against the scheduler that takes them */
    CHECK_MSG(validate_text("{\"lr_scheduler_type\": \"cosine\", \"lr_scheduler_kwargs\": {\"num_cycle\": 2}}"),
              "training_args.lr_scheduler_kwargs: unknown key 'num_cycle', did you mean 'num_cycles'?");
    CHECK_ERR(validate_text("{\"lr_scheduler_kwargs\": {\"power\": 2}}"), CT_ERR_CONFIG,
              "training_args.lr_scheduler_kwargs: unexpected key 'power' for scheduler 'linear'");
    CHECK_MSG(validate_text("{\"lr_scheduler_type\": \"polynomial\", \"lr_scheduler_kwargs\": {\"power\": \"2\"}}"),
              "training_args.lr_scheduler_kwargs.power: expected a number");
    CHECK_OK(validate_text("{\"lr_scheduler_type\": \"polynomial\", \"lr_scheduler_kwargs\": {\"power\": 2}}"));
    CHECK_MSG(validate_text("{\"eval_delay\": -1}"), "training_args.eval_delay: must be >= 0, got -1");
    CHECK_MSG(validate_text("{\"save_total_limit\": -1}"),
              "training_args.save_total_limit: must be >= 0 (0 or null keeps every checkpoint), got -1");
    CHECK_MSG(validate_text("{\"seed\": -1}"), "training_args.seed: must be >= 0, got -1");
    CHECK_MSG(validate_text("{\"data_seed\": -2}"), "training_args.data_seed: must be >= 0 (or null: seed), got -2");

    /* steps strategies: > 0, whole numbers above 1 */
    CHECK_MSG(
        validate_text("{\"logging_steps\": 0}"),
        "training_args.logging_steps: must be > 0 when logging_strategy is 'steps' (a count, or a ratio of the run "
        "below 1), got 0");
    CHECK_OK(validate_text("{\"logging_steps\": 0, \"logging_strategy\": \"epoch\"}"));
    CHECK_MSG(
        validate_text("{\"logging_steps\": -3}"),
        "training_args.logging_steps: must be > 0 when logging_strategy is 'steps' (a count, or a ratio of the run "
        "below 1), got -3");
    CHECK_MSG(
        validate_text("{\"save_steps\": 2.5}"),
        "training_args.save_steps: must be a whole number when above 1 (below 1 it is a ratio of the run), got 2.5");
    CHECK_OK(validate_text("{\"save_steps\": 2.5, \"save_strategy\": \"epoch\"}"));
    CHECK_MSG(
        validate_text("{\"save_steps\": -1}"),
        "training_args.save_steps: must be > 0 when save_strategy is 'steps' (a count, or a ratio of the run below "
        "1), got -1");
    CHECK_MSG(
        validate_text("{\"eval_strategy\": \"steps\", \"eval_steps\": 10.5}"),
        "training_args.eval_steps: must be a whole number when above 1 (below 1 it is a ratio of the run), got 10.5");
    CHECK_MSG(
        validate_text("{\"eval_strategy\": \"steps\", \"eval_steps\": -0.5}"),
        "training_args.eval_steps: must be > 0 when eval_strategy is 'steps' (a count, or a ratio of the run below "
        "1), got -0.5");
    CHECK_MSG(
        validate_text("{\"eval_strategy\": \"steps\", \"logging_strategy\": \"no\", \"logging_steps\": 0}"),
        "training_args.eval_steps: eval_strategy 'steps' needs eval_steps or logging_steps > 0, but eval_steps is "
        "not set and logging_steps is 0");
    CHECK_MSG(validate_text("{\"eval_steps\": -1}"), "training_args.eval_steps: must be >= 0, got -1");
    CHECK_OK(validate_text("{\"save_steps\": 1}"));
    CHECK_OK(validate_text("{\"save_steps\": 0.999}"));

    /* load_best_model_at_end */
    CHECK_MSG(validate_text("{\"load_best_model_at_end\": true, \"eval_strategy\": \"epoch\"}"),
              "training_args.load_best_model_at_end: requires the save and evaluation strategies to match, but "
              "save_strategy is 'steps' and eval_strategy is 'epoch'");
    CHECK_MSG(validate_text("{\"load_best_model_at_end\": true}"),
              "training_args.load_best_model_at_end: requires the save and evaluation strategies to match, but "
              "save_strategy is 'steps' and eval_strategy is 'no'");
    CHECK_MSG(validate_text("{\"load_best_model_at_end\": true, \"eval_strategy\": \"steps\", \"eval_steps\": 300, "
                            "\"save_steps\": 500}"),
              "training_args.load_best_model_at_end: requires save_steps to be a round multiple of eval_steps, but "
              "save_steps is 500 and eval_steps is 300");
    CHECK_MSG(
        validate_text("{\"load_best_model_at_end\": true, \"eval_strategy\": \"steps\", \"eval_steps\": 0.1, "
                      "\"save_steps\": 500}"),
        "training_args.load_best_model_at_end: requires save_steps to be a multiple of eval_steps, which cannot be "
        "guaranteed when one is a ratio and the other a count, but save_steps is 500 and eval_steps is 0.1");
    CHECK_MSG(validate_text("{\"load_best_model_at_end\": true, \"eval_strategy\": \"steps\", \"eval_steps\": 0.2, "
                            "\"save_steps\": 0.3}"),
              "training_args.load_best_model_at_end: requires save_steps to be a round multiple of eval_steps, but "
              "save_steps is 0.3 and eval_steps is 0.2");
    CHECK_OK(validate_text("{\"load_best_model_at_end\": true, \"eval_strategy\": \"steps\", \"eval_steps\": 100}"));
    CHECK_OK(validate_text("{\"load_best_model_at_end\": true, \"eval_strategy\": \"steps\", \"eval_steps\": 0.25, "
                           "\"save_steps\": 0.5}"));
    /* eval_steps inherited from logging_steps before the multiple check */
    CHECK_MSG(validate_text("{\"load_best_model_at_end\": true, \"eval_strategy\": \"steps\", \"logging_steps\": 30}"),
              "training_args.load_best_model_at_end: requires save_steps to be a round multiple of eval_steps, but "
              "save_steps is 500 and eval_steps is 30");
    CHECK_OK(validate_text(
        "{\"load_best_model_at_end\": true, \"eval_strategy\": \"epoch\", \"save_strategy\": \"epoch\"}"));
    CHECK_OK(
        validate_text("{\"load_best_model_at_end\": true, \"eval_strategy\": \"epoch\", \"save_strategy\": \"best\"}"));

    /* save_strategy best, reduce_lr_on_plateau */
    CHECK_MSG(validate_text("{\"save_strategy\": \"best\", \"eval_strategy\": \"epoch\"}"),
              "training_args.save_strategy: 'best' requires metric_for_best_model, which is not set");
    /* accepted as Hugging Face accepts it (the Trainer warns that nothing will be saved) */
    CHECK_OK(validate_text("{\"save_strategy\": \"best\", \"metric_for_best_model\": \"accuracy\"}"));
    CHECK_OK(validate_text(
        "{\"save_strategy\": \"best\", \"eval_strategy\": \"epoch\", \"metric_for_best_model\": \"f1\"}"));
    CHECK_MSG(
        validate_text("{\"lr_scheduler_type\": \"reduce_lr_on_plateau\"}"),
        "training_args.lr_scheduler_type: 'reduce_lr_on_plateau' requires evaluations, but eval_strategy is 'no'");
    CHECK_OK(validate_text("{\"lr_scheduler_type\": \"reduce_lr_on_plateau\", \"eval_strategy\": \"epoch\"}"));

    /* Without a path, messages start with the argument's name. */
    ct_training_args a;
    ct_training_args_default(&a);
    a.gradient_accumulation_steps = 0;
    CHECK_MSG(ct_training_args_validate(&a), "gradient_accumulation_steps: must be >= 1, got 0");
    a.gradient_accumulation_steps = 1;
    a.load_best_model_at_end = true;
    a.eval_strategy = CT_INTERVAL_EPOCH;
    CHECK_MSG(
        ct_training_args_validate(&a),
        "load_best_model_at_end: requires the save and evaluation strategies to match, but save_strategy is 'steps' "
        "and eval_strategy is 'epoch'");
    /* Values only a program can put there. */
    ct_training_args_default(&a);
    a.eval_strategy = CT_INTERVAL_BEST;
    CHECK_MSG(ct_training_args_validate(&a),
              "eval_strategy: 'best' is a save_strategy only (allowed: no, steps, epoch)");
    ct_training_args_default(&a);
    a.save_strategy = (ct_interval)9;
    CHECK_MSG(ct_training_args_validate(&a), "save_strategy: invalid value 9 (allowed: no, steps, epoch, best)");
    ct_training_args_default(&a);
    a.log_level = (ct_log_level)25;
    CHECK_ERR(ct_training_args_validate(&a), CT_ERR_CONFIG, "log_level: invalid value 25");
    ct_training_args_default(&a);
    a.save_steps = INFINITY;
    CHECK_MSG(ct_training_args_validate(&a), "save_steps: must be finite, got inf");
    ct_training_args_default(&a);
    a.greater_is_better = 5;
    CHECK_MSG(ct_training_args_validate(&a), "greater_is_better: must be -1 (unset), 0 or 1, got 5");
    ct_training_args_default(&a);
    a.report_to = 1u << 7;
    CHECK_MSG(ct_training_args_validate(&a), "report_to: invalid value 0x80");
    ct_training_args_default(&a);
    memset(a.optim, 'x', sizeof a.optim);
    CHECK_MSG(ct_training_args_validate(&a), "optim: not NUL-terminated");
    ct_training_args_default(&a);
    snprintf(a.optim, sizeof a.optim, "adamax");
    CHECK_ERR(ct_training_args_validate(&a), CT_ERR_CONFIG, "optim: unknown value 'adamax'");
    ct_training_args_free(&a);
}

/* What validate() resolves, as Hugging Face's __post_init__ does. */
static void test_derived(void) {
    ct_training_args a;
    CHECK_OK(args_from(&a,
                       "{\"load_best_model_at_end\": true, \"eval_strategy\": \"epoch\", \"save_strategy\": \"epoch\", "
                       "\"seed\": 9}"));
    CHECK_OK(ct_training_args_validate(&a));
    CHECK(strcmp(a.metric_for_best_model, "loss") == 0 && a.greater_is_better == 0, "loss, lower is better");
    CHECK(a.data_seed == 9, "data_seed from seed");
    ct_training_args_free(&a);

    CHECK_OK(args_from(&a, "{\"metric_for_best_model\": \"accuracy\", \"data_seed\": 5}"));
    CHECK_OK(ct_training_args_validate(&a));
    CHECK(a.greater_is_better == 1 && a.data_seed == 5, "accuracy: greater is better; data_seed kept");
    ct_training_args_free(&a);

    CHECK_OK(args_from(&a, "{\"metric_for_best_model\": \"eval_cross_entropy_loss\", \"greater_is_better\": true}"));
    CHECK_OK(ct_training_args_validate(&a));
    CHECK(a.greater_is_better == 1, "an explicit greater_is_better wins");
    ct_training_args_free(&a);

    CHECK_OK(args_from(&a, "{\"metric_for_best_model\": \"eval_loss\"}"));
    CHECK_OK(ct_training_args_validate(&a));
    CHECK(a.greater_is_better == 0, "eval_loss: lower is better");
    ct_training_args_free(&a);

    CHECK_OK(args_from(&a, "{\"lr_scheduler_type\": \"reduce_lr_on_plateau\", \"eval_strategy\": \"epoch\"}"));
    CHECK_OK(ct_training_args_validate(&a));
    CHECK(strcmp(a.metric_for_best_model, "loss") == 0 && a.greater_is_better == 0, "plateau watches the loss");
    ct_training_args_free(&a);

    CHECK_OK(args_from(&a, "{\"eval_strategy\": \"steps\", \"logging_steps\": 0.05}"));
    CHECK_OK(ct_training_args_validate(&a));
    CHECK(a.eval_steps == 0.05, "eval_steps from logging_steps (a ratio too): %g", a.eval_steps);
    ct_training_args_free(&a);

    /* validate() twice gives the same arguments */
    CHECK_OK(args_from(&a, "{\"eval_strategy\": \"steps\", \"load_best_model_at_end\": true}"));
    CHECK_OK(ct_training_args_validate(&a));
    json_t *j1 = NULL, *j2 = NULL;
    CHECK_OK(ct_training_args_to_json(&a, &j1));
    CHECK_OK(ct_training_args_validate(&a));
    CHECK_OK(ct_training_args_to_json(&a, &j2));
    CHECK(json_equal(j1, j2), "validate is idempotent");
    json_decref(j1);
    json_decref(j2);
    ct_training_args_free(&a);
}

static void test_optim_config(void) {
    struct {
        const char *name;
        ct_optim_kind kind;
    } cases[] = {
        {"adamw_torch", CT_OPTIM_ADAMW}, {"adamw", CT_OPTIM_ADAMW}, {"adam", CT_OPTIM_ADAM}, {"sgd", CT_OPTIM_SGD}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ct_training_args a;
        ct_training_args_default(&a);
        CHECK_OK(ct_training_args_set(&a, "optim", cases[i].name));
        a.learning_rate = 0.01 + ct_rng_uniform(&rng);
        a.weight_decay = ct_rng_uniform(&rng);
        a.adam_beta1 = 0.5 * ct_rng_uniform(&rng);
        a.adam_beta2 = 0.9 + 0.09 * ct_rng_uniform(&rng);
        a.adam_epsilon = 1e-6 * ct_rng_uniform(&rng);
        ct_optim_config c;
        CHECK_OK(ct_training_args_optim_config(&a, &c));
        CHECK(c.optim == cases[i].kind, "%s maps to kind %d, got %d", cases[i].name, cases[i].kind, c.optim);
        CHECK(c.learning_rate == a.learning_rate && c.weight_decay == a.weight_decay && c.adam_beta1 == a.adam_beta1 &&
                  c.adam_beta2 == a.adam_beta2 && c.adam_epsilon == a.adam_epsilon,
              "%s: values carried", cases[i].name);
        ct_optim_config d = ct_optim_config_default();
        CHECK(c.momentum == d.momentum && c.dampening == d.dampening && !c.nesterov && !c.amsgrad, "the rest default");
        ct_training_args_free(&a);
    }
    ct_training_args a;
    ct_training_args_default(&a);
    a.learning_rate = -1;
    ct_optim_config c;
    CHECK_MSG(ct_training_args_optim_config(&a, &c),
              "learning_rate: optimizer 'adamw': invalid learning_rate = -1 (must be finite and >= 0)");
    ct_training_args_free(&a);
}

static void test_scheduler_config(void) {
    ct_training_args a;
    ct_scheduler_config c;
    ct_training_args_default(&a);
    CHECK_OK(ct_training_args_scheduler_config(&a, &c));
    CHECK(strcmp(c.lr_scheduler_type, "linear") == 0 && c.warmup_steps == 0 && c.warmup_ratio == 0, "default schedule");
    CHECK(isnan(c.kwargs.num_cycles) && c.kwargs.patience == CT_SCHED_UNSET_INT, "no kwargs set");

    /* a count */
    a.warmup_steps = 37;
    a.warmup_ratio = 0.5;
    CHECK_OK(ct_training_args_scheduler_config(&a, &c));
    CHECK(c.warmup_steps == 37 && c.warmup_ratio == 0.5, "count: %lld, %g", (long long)c.warmup_steps, c.warmup_ratio);
    /* exactly 1 is a count of one step */
    a.warmup_steps = 1;
    CHECK_OK(ct_training_args_scheduler_config(&a, &c));
    CHECK(c.warmup_steps == 1, "1 is a count");
    /* a ratio in warmup_steps becomes the scheduler's ratio and wins over warmup_ratio */
    double r = 0.01 + 0.98 * ct_rng_uniform(&rng);
    a.warmup_steps = r;
    CHECK_OK(ct_training_args_scheduler_config(&a, &c));
    CHECK(c.warmup_steps == 0 && c.warmup_ratio == r, "ratio %g -> warmup_ratio %g", r, c.warmup_ratio);
    /* which gives ceil(total * ratio) warmup steps, as Hugging Face's ratios do */
    ct_scheduler *s = NULL;
    CHECK_OK(ct_scheduler_create(&c, 0.1, 1000, &s));
    if (s) CHECK(s->num_warmup_steps == (int64_t)ceil(1000 * r), "warmup %lld", (long long)s->num_warmup_steps);
    ct_scheduler_destroy(s);

    CHECK_OK(ct_training_args_set(&a, "lr_scheduler_type", "cosine_with_restarts"));
    CHECK_OK(ct_training_args_set(&a, "lr_scheduler_kwargs", "{\"num_cycles\": 3}"));
    CHECK_OK(ct_training_args_scheduler_config(&a, &c));
    CHECK(strcmp(c.lr_scheduler_type, "cosine_with_restarts") == 0 && c.kwargs.num_cycles == 3, "kwargs carried");
    CHECK_OK(ct_training_args_set(&a, "lr_scheduler_kwargs", "{\"factor\": 0.5}"));
    CHECK_ERR(ct_training_args_scheduler_config(&a, &c), CT_ERR_CONFIG,
              "lr_scheduler_kwargs: unexpected key 'factor' for scheduler 'cosine_with_restarts'");

    /* The kwargs' values are checked with the arguments, under their path; what needs the run's
     * length only when max_steps gives it. */
    CHECK_OK(ct_training_args_set(&a, "lr_scheduler_kwargs", "{\"num_cycles\": -1}"));
    CHECK_ERR(ct_training_args_validate_at(&a, "training_args"), CT_ERR_CONFIG,
              "training_args.lr_scheduler_kwargs.num_cycles: must be finite and > 0 (got -1)");
    CHECK_OK(ct_training_args_set(&a, "lr_scheduler_type", "polynomial"));
    CHECK_OK(ct_training_args_set(&a, "lr_scheduler_kwargs", "{\"lr_end\": 0.5}"));
    CHECK_ERR(ct_training_args_validate_at(&a, "training_args"), CT_ERR_CONFIG,
              "training_args.lr_scheduler_kwargs.lr_end: (0.5) must be smaller than the initial learning rate");
    a.warmup_steps = 0;
    a.warmup_ratio = 0;
    CHECK_OK(ct_training_args_set(&a, "lr_scheduler_type", "warmup_stable_decay"));
    CHECK_OK(ct_training_args_set(&a, "lr_scheduler_kwargs", "{\"num_decay_steps\": 50}"));
    CHECK_OK(ct_training_args_validate_at(&a, "training_args"));
    a.max_steps = 40;
    CHECK_ERR(ct_training_args_validate_at(&a, "training_args"), CT_ERR_CONFIG,
              "training_args.lr_scheduler_kwargs.num_decay_steps", "do not fit in the 40 training steps");
    a.max_steps = 50;
    CHECK_OK(ct_training_args_validate_at(&a, "training_args"));
    ct_training_args_free(&a);
}

/* docs/config.md is the generated text. */
/* Hugging Face's arguments added for parity, and those refused with a reason. */
static void test_hf_parity_args(void) {
    ct_training_args a;
    ct_training_args_default(&a);
    CHECK(!a.do_train && !a.do_eval && !a.do_predict && !a.prediction_loss_only && a.include_for_metrics == 0 &&
              !a.batch_eval_metrics && !a.include_num_input_tokens_seen && a.save_safetensors &&
              a.label_smoothing_factor == 0 && !a.full_determinism && !a.restore_callback_states_from_checkpoint &&
              !a.ignore_data_skip && a.eval_accumulation_steps == 0,
          "Hugging Face's defaults of the parity arguments");
    CHECK_OK(ct_training_args_set(&a, "include_for_metrics", "inputs,loss"));
    CHECK(a.include_for_metrics == (CT_INCLUDE_INPUTS | CT_INCLUDE_LOSS), "include_for_metrics inputs,loss");
    CHECK_MSG(ct_training_args_set(&a, "include_for_metrics", "input"),
              "include_for_metrics: unknown value 'input', did you mean 'inputs'? (allowed: inputs, loss)");
    /* max_grad_norm null: no clipping, as Hugging Face's None (its default stays 1.0) */
    CHECK(a.max_grad_norm == 1.0, "max_grad_norm default %g", a.max_grad_norm);
    CHECK_OK(ct_training_args_set(&a, "max_grad_norm", "null"));
    CHECK(a.max_grad_norm == 0, "max_grad_norm null -> %g, want 0 (off)", a.max_grad_norm);
    {
        ct_training_args n;
        CHECK_OK(args_from(&n, "{\"max_grad_norm\": null}"));
        CHECK(n.max_grad_norm == 0, "max_grad_norm: null in JSON -> %g", n.max_grad_norm);
        ct_training_args_free(&n);
    }
    /* do_eval follows an evaluation strategy, as __post_init__ sets it */
    CHECK_OK(ct_training_args_set(&a, "eval_strategy", "epoch"));
    CHECK_OK(ct_training_args_validate(&a));
    CHECK(a.do_eval, "do_eval set by eval_strategy epoch");
    ct_training_args_free(&a);
    CHECK_MSG(validate_text("{\"eval_accumulation_steps\": -2}"),
              "training_args.eval_accumulation_steps: must be > 0 batches (or null), got -2");
    {   /* 0 is refused when given, not taken for null (which is stored as 0) */
        ct_training_args z;
        CHECK_MSG(args_from(&z, "{\"eval_accumulation_steps\": 0}"),
                  "training_args.eval_accumulation_steps: must be > 0, or null, got 0");
        ct_training_args_free(&z);
        CHECK_MSG(args_from(&z, "{\"ddp_bucket_cap_mb\": 0}"),
                  "training_args.ddp_bucket_cap_mb: must be > 0, or null, got 0");
        ct_training_args_free(&z);
        CHECK_OK(args_from(&z, "{\"ddp_bucket_cap_mb\": null}"));
        CHECK(z.ddp_bucket_cap_mb == 0, "null ddp_bucket_cap_mb is stored as 0");
        ct_training_args_free(&z);
    }
    CHECK_MSG(validate_text("{\"label_smoothing_factor\": 1.5}"),
              "training_args.label_smoothing_factor: must lie in [0, 1], got 1.5");
    CHECK_OK(validate_text("{\"eval_accumulation_steps\": 4, \"label_smoothing_factor\": 0.1}"));

    /* Refused: a value that asks for nothing is ignored (a config written for HF runs), any other is an
     * error with the reason; in JSON and on a command line alike. */
    CHECK_OK(validate_text("{\"fp16_full_eval\": false, \"deepspeed\": null, \"push_to_hub\": false, \"fsdp\": \"\", "
                           "\"hub_strategy\": \"every_save\", \"debug\": [], \"remove_unused_columns\": true}"));
    ct_training_args_default(&a);
    ct_training_args b;
    CHECK_OK(ct_training_args_copy(&b, &a));
    json_t *o = json_loads("{\"learning_rate\": 0.5, \"deepspeed\": \"ds.json\"}", 0, NULL);
    CHECK_MSG(ct_training_args_from_json(&a, o, "training_args"),
              "training_args.deepspeed: Hugging Face's argument is not supported by ctrainer (DeepSpeed does not "
              "exist for C (optimizer_sharding zero1 is ZeRO stage 1)), got \"ds.json\"; leave it out or at null");
    CHECK(a.learning_rate == b.learning_rate, "a refused key leaves the arguments as they were");
    json_decref(o);
    CHECK_MSG(ct_training_args_set(&a, "half_precision_backend", "\"apex\""),
              "half_precision_backend: Hugging Face's argument is not supported by ctrainer (ctrainer has one "
              "mixed-precision backend, the device's own tensor cores (no apex, no cpu_amp)), got \"apex\"; leave it "
              "out or at \"auto\"");
    CHECK_OK(ct_training_args_set(&a, "half_precision_backend", "\"auto\""));
    /* A refused name is never one the schema takes (the refusal would never be reached, and
     * docs/config.md would list the argument twice); no_cuda names its replacement. */
    int n_refused;
    const ct_refused_arg *refused = ct_refused_args(&n_refused);
    CHECK(n_refused > 40, "%d refused arguments", n_refused);
    for (int i = 0; i < n_refused; i++)
        CHECK(!ct_training_args_find(refused[i].name), "'%s' is both in the schema and refused", refused[i].name);
    CHECK_MSG(ct_training_args_set(&a, "no_cuda", "true"),
              "no_cuda: Hugging Face's argument is not supported by ctrainer (deprecated by Hugging Face itself: use "
              "use_cpu (or device \"cpu\")), got true; leave it out or at false");
    /* mixed precision: HF's arguments; which one the device runs is the Trainer's to check */
    CHECK_OK(ct_training_args_set(&a, "fp16", "true"));
    CHECK(ct_training_args_math_mode(&a) == CT_MATH_FP16, "fp16 true: fp16 GEMMs");
    CHECK_MSG(validate_text("{\"fp16\": true, \"bf16\": true}"),
              "training_args.fp16: at most one of fp16 and bf16 can be true, but not both");
    CHECK_OK(ct_training_args_set(&a, "fp16", "false"));
    CHECK_OK(ct_training_args_set(&a, "bf16", "true"));
    CHECK(ct_training_args_math_mode(&a) == CT_MATH_BF16, "bf16 true: bf16 GEMMs");
    CHECK_OK(ct_training_args_set(&a, "bf16", "false"));
    CHECK_OK(ct_training_args_set(&a, "tf32", "true"));
    CHECK(ct_training_args_math_mode(&a) == CT_MATH_TF32, "tf32 true: TF32 GEMMs");
    CHECK_OK(ct_training_args_set(&a, "tf32", "null"));
    CHECK(ct_training_args_math_mode(&a) == CT_MATH_F32, "tf32 null: float32");
    CHECK_OK(ct_training_args_set(&a, "hub_token", "None"));
    /* gradient checkpointing: HF's flag; of torch.utils.checkpoint's keyword arguments only use_reentrant,
     * whose two values give the same gradients, asks for nothing here */
    CHECK_OK(ct_training_args_set(&a, "gradient_checkpointing", "true"));
    CHECK(a.gradient_checkpointing, "gradient_checkpointing true");
    CHECK_OK(ct_training_args_set(&a, "gradient_checkpointing_kwargs", "{\"use_reentrant\": false}"));
    CHECK_OK(ct_training_args_set(&a, "gradient_checkpointing_kwargs", "{\"use_reentrant\": true}"));
    CHECK_OK(ct_training_args_set(&a, "gradient_checkpointing_kwargs", "{}"));
    CHECK_OK(ct_training_args_set(&a, "gradient_checkpointing_kwargs", "null"));
    const char *kwargs_why = "gradient_checkpointing_kwargs: Hugging Face's argument is not supported by ctrainer (the "
                             "keyword arguments of torch.utils.checkpoint: {\"use_reentrant\": true or false} asks for "
                             "nothing here (both of PyTorch's variants give the gradients that ctrainer's one way of "
                             "recomputing gives)), got ";
    char want[512];
    snprintf(want, sizeof want, "%s%s; leave it out or at null", kwargs_why,
             "{\"use_reentrant\":false,\"preserve_rng_state\":true}");
    CHECK_MSG(ct_training_args_set(&a, "gradient_checkpointing_kwargs",
                                   "{\"use_reentrant\": false, \"preserve_rng_state\": true}"), want);
    snprintf(want, sizeof want, "%s%s; leave it out or at null", kwargs_why, "{\"use_reentrant\":\"no\"}");
    CHECK_MSG(ct_training_args_set(&a, "gradient_checkpointing_kwargs", "{\"use_reentrant\": \"no\"}"), want);
    snprintf(want, sizeof want, "%s%s; leave it out or at null", kwargs_why, "[\"use_reentrant\"]");
    CHECK_MSG(ct_training_args_set(&a, "gradient_checkpointing_kwargs", "[\"use_reentrant\"]"), want);
    ct_training_args_free(&a);
    ct_training_args_free(&b);
}

static void test_docs(void) {
    char *md = ct_training_args_markdown();
    CHECK(md != NULL, "markdown");
    if (!md) return;
    int n;
    const ct_arg_spec *rows = ct_training_args_schema(&n);
    for (int i = 0; i < n; i++) {
        char cell[128];
        snprintf(cell, sizeof cell, "| `%s` |", rows[i].name);
        CHECK(strstr(md, cell) != NULL, "the table has a row for %s", rows[i].name);
    }
    const char *src = getenv("CT_SOURCE_DIR");
    if (!src || !src[0]) {
        printf("note: CT_SOURCE_DIR is not set, docs/config.md not compared with the schema\n");
        free(md);
        return;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/docs/config.md", src);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "cannot open %s", path);
    if (f) {
        size_t cap = strlen(md) + 65536;
        char *text = calloc(1, cap);
        size_t len = fread(text, 1, cap - 1, f);
        fclose(f);
        text[len] = '\0';
        CHECK(
            strcmp(text, md) == 0,
            "%s differs from the schema in config/args.c; regenerate it with `test_args --markdown > docs/config.md`",
            path);
        free(text);
    }
    free(md);
}

/* --- modes for the oracle test ---------------------------------------------------------------------- */

static int dump_defaults(void) {
    ct_training_args a;
    ct_training_args_default(&a);
    json_t *j = NULL;
    if (ct_training_args_to_json(&a, &j) != CT_OK) {
        fprintf(stderr, "%s\n", ct_last_error());
        return 1;
    }
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    printf("%s\n", s);
    free(s);
    json_decref(j);
    ct_training_args_free(&a);
    return 0;
}

static int validate_lines(void) {
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, stdin) > 0) {
        json_error_t err;
        json_t *in = json_loads(line, 0, &err);
        json_t *out;
        if (!in) {
            out = json_pack("{s:b, s:s}", "ok", 0, "error", err.text);
        } else {
            ct_training_args a;
            ct_training_args_default(&a);
            ct_status s = ct_training_args_from_json(&a, in, "training_args");
            if (s == CT_OK) s = ct_training_args_validate_at(&a, "training_args");
            json_t *resolved = NULL;
            if (s == CT_OK) s = ct_training_args_to_json(&a, &resolved);
            out = s == CT_OK ? json_pack("{s:b, s:o}", "ok", 1, "args", resolved)
                             : json_pack("{s:b, s:s}", "ok", 0, "error", ct_last_error());
            ct_training_args_free(&a);
            json_decref(in);
        }
        char *text = json_dumps(out, JSON_COMPACT | JSON_REAL_PRECISION(17));
        printf("%s\n", text);
        free(text);
        json_decref(out);
    }
    free(line);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--dump-defaults") == 0) return dump_defaults();
    if (argc > 1 && strcmp(argv[1], "--validate") == 0) return validate_lines();
    if (argc > 1 && strcmp(argv[1], "--markdown") == 0) {
        char *md = ct_training_args_markdown();
        if (!md) return 1;
        fputs(md, stdout);
        free(md);
        return 0;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    ct_test_begin("test_args");
    ct_rng_init(&rng, ct_test_seed, 0, 0);
    test_schema();
    test_defaults();
    test_set_text();
    test_json_in();
    test_round_trip();
    test_validate_rules();
    test_derived();
    test_optim_config();
    test_scheduler_config();
    test_hf_parity_args();
    test_docs();
    return ct_test_finish();
}
