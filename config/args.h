/* Training arguments: Hugging Face's TrainingArguments, declared once in a schema table.
 *
 * Every argument has one row in the table (config/args.c): its name, type, default, allowed values
 * and a line of documentation. Defaults, set-by-name (the CLI's `--learning_rate 3e-4`), loading
 * from the "training_args" object of a run config, `ctrainer config --defaults`, the JSON written
 * next to checkpoints and docs/config.md all come from that table, so they cannot drift apart.
 *
 * Names, defaults and meanings are Hugging Face's (transformers 4.51). Where Hugging Face takes
 * "a count or a ratio" (eval_steps, save_steps, logging_steps, warmup_steps) the value is a double:
 * below 1 it is a fraction of the run's total optimizer steps, rounded up, as HF does.
 *
 * Validation (ct_training_args_validate) applies the consistency rules Hugging Face's __post_init__
 * enforces (load_best_model_at_end needs matching evaluation and save strategies, and save_steps a
 * multiple of eval_steps; save_strategy "best" needs metric_for_best_model; ...) with a message that
 * names both arguments and their values, before any work starts. */
#ifndef CT_ARGS_H
#define CT_ARGS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/device.h"
#include "core/status.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"

/* eval_strategy, save_strategy, logging_strategy. BEST exists only for save_strategy; CONTINUOUS
 * (ctrainer's) only for eval_strategy with eval_async: a new evaluation starts on the newest weights
 * as soon as the previous one ended. */
typedef enum ct_interval {
    CT_INTERVAL_NO = 0,
    CT_INTERVAL_STEPS = 1,
    CT_INTERVAL_EPOCH = 2,
    CT_INTERVAL_BEST = 3,
    CT_INTERVAL_CONTINUOUS = 4,
} ct_interval;

/* log_level, log_level_replica: "passive" follows the library's default (warning for replicas). */
typedef enum ct_log_level {
    CT_LOG_PASSIVE = -1,
    CT_LOG_DEBUG = 10,
    CT_LOG_INFO = 20,
    CT_LOG_WARNING = 30,
    CT_LOG_ERROR = 40,
    CT_LOG_CRITICAL = 50,
} ct_log_level;

/* nan_inf_policy (ctrainer's own): what an optimizer step whose loss or gradient norm is NaN or
 * infinite does (trainer/train_loop.c). ERROR is 0: the default. */
typedef enum ct_nan_inf_policy {
    CT_NAN_INF_ERROR = 0, /* fail at once, naming the step, the quantity and the rank */
    CT_NAN_INF_SKIP = 1,  /* no update, gradients dropped; global_step advances, the scheduler does not */
    CT_NAN_INF_STOP = 2,  /* save a checkpoint of the last good step, then fail naming the step */
} ct_nan_inf_policy;

/* on_save_error (ctrainer's own): what a checkpoint save that fails (a full disk, an unwritable
 * output_dir) does to the run. STOP is 0: the default. */
typedef enum ct_on_save_error {
    CT_SAVE_ERROR_STOP = 0,     /* the run fails with the save's error */
    CT_SAVE_ERROR_CONTINUE = 1, /* a warning; training goes on and later saves are tried again */
} ct_on_save_error;

/* report_to destinations, a bit set ("none" = 0, "all" = every one). */
enum { CT_REPORT_JSONL = 1 << 0, CT_REPORT_TENSORBOARD = 1 << 1 };
/* include_for_metrics, a bit set. */
enum { CT_INCLUDE_INPUTS = 1 << 0, CT_INCLUDE_LOSS = 1 << 1 };

#define CT_ARGS_PATH_MAX 1024
#define CT_ARGS_NAME_MAX 64

typedef struct ct_training_args {
    char output_dir[CT_ARGS_PATH_MAX]; /* "trainer_output" */
    bool overwrite_output_dir;         /* false */
    /* for scripts (HF's Trainer does not read them); do_eval is set when eval_strategy is not "no" */
    bool do_train, do_eval, do_predict; /* false */
    /* length of the run */
    double num_train_epochs; /* 3.0 (fractions allowed, as HF) */
    int64_t max_steps;       /* -1: from num_train_epochs; > 0 overrides it */
    /* batches */
    int64_t per_device_train_batch_size; /* 8 */
    int64_t per_device_eval_batch_size;  /* 8 */
    int64_t gradient_accumulation_steps; /* 1 */
    int64_t eval_accumulation_steps;     /* 0 = null; outputs stay on the host anyway: checked only */
    bool dataloader_drop_last;           /* false */
    int64_t dataloader_num_workers;      /* 0 */
    /* optimizer (see optim/optimizer.h for their meaning) */
    char optim[CT_ARGS_NAME_MAX]; /* "adamw_torch"; also "adamw", "adam", "sgd" */
    double learning_rate;         /* 5e-5 */
    double weight_decay;          /* 0 */
    double adam_beta1;            /* 0.9 */
    double adam_beta2;            /* 0.999 */
    double adam_epsilon;          /* 1e-8 */
    double max_grad_norm;         /* 1.0; 0 disables clipping */
    double label_smoothing_factor; /* 0: the default cross-entropy loss's label smoothing */
    ct_nan_inf_policy nan_inf_policy; /* ctrainer's own: "error" */
    /* scheduler (see optim/scheduler.h) */
    char lr_scheduler_type[CT_ARGS_NAME_MAX]; /* "linear" */
    json_t *lr_scheduler_kwargs;              /* owned object or NULL ({}) */
    double warmup_ratio;                      /* 0 */
    double warmup_steps;                      /* 0; a count, or a ratio when in (0, 1) */
    /* evaluation */
    ct_interval eval_strategy; /* "no" */
    double eval_steps;         /* 0 = unset: logging_steps, as HF */
    double eval_delay;         /* 0: epochs or steps (by eval_strategy) before the first evaluation */
    bool eval_on_start;        /* false */
    bool prediction_loss_only; /* true: evaluation and prediction compute the loss only */
    unsigned include_for_metrics; /* CT_INCLUDE_* bits: what compute_metrics receives besides outputs */
    bool batch_eval_metrics;   /* false */
    /* saving */
    ct_interval save_strategy; /* "steps" */
    double save_steps;         /* 500 */
    int64_t save_total_limit;  /* 0 = unlimited (HF's None) */
    bool save_only_model;      /* false */
    bool save_safetensors;     /* true: the final model also as model.safetensors */
    bool restore_callback_states_from_checkpoint; /* false: a resume starts callbacks and control afresh */
    bool ignore_data_skip;     /* false: a resume skips the batches of its epoch already trained on */
    ct_on_save_error on_save_error; /* ctrainer's own: "stop" */
    bool load_best_model_at_end;                  /* false */
    char metric_for_best_model[CT_ARGS_NAME_MAX]; /* "" = unset; "loss" when load_best_model_at_end */
    int greater_is_better;                        /* -1 = unset: derived from the metric's name */
    /* uncertainty of evaluation metrics (ctrainer's own; Hugging Face has none) */
    int64_t eval_bootstrap_resamples; /* 1000; 0 = closed forms only */
    double eval_confidence_level;     /* 0.95 */
    /* logging */
    ct_interval logging_strategy; /* "steps" */
    double logging_steps;         /* 500 */
    bool logging_first_step;      /* false */
    bool logging_nan_inf_filter;  /* true */
    bool include_num_input_tokens_seen; /* false */
    bool include_tokens_per_second;     /* false */
    ct_log_level log_level;          /* "passive" */
    ct_log_level log_level_replica;  /* "warning" */
    bool log_on_each_node;           /* true */
    unsigned report_to;              /* "none" by default here; "jsonl" writes output_dir/log.jsonl */
    char logging_dir[CT_ARGS_PATH_MAX]; /* "" = HF's None: output_dir/runs/<date>_<host> */
    bool skip_memory_metrics;        /* true: no mem_* metrics */
    bool disable_tqdm;               /* false; the bar is also off when stderr is not a terminal */
    /* the device */
    bool use_cpu;                 /* false: a visible GPU is used (device "auto") */
    char device[32];              /* ctrainer's own: "auto" (default), "cpu", "cuda" or "cuda:N" (ct_device_resolve) */
    /* precision (Hugging Face's mixed precision): float32 weights, gradients and optimizer state always;
     * what the device's GEMMs and convolutions compute with (ct_training_args_math_mode) */
    bool bf16;                    /* false; true: bf16 tensor cores, float32 accumulation */
    bool fp16;                    /* false; true: fp16 tensor cores and dynamic loss scaling (optim/grad_scaler.h) */
    int tf32;                     /* -1 = unset (float32), 0 false, 1: TF32 tensor cores */
    bool gradient_checkpointing;  /* false; true: blocks recompute their activations in backward (model.h) */
    /* several processes */
    int64_t ddp_timeout;          /* 1800 s: a collective that waits longer ends the job */
    int64_t ddp_bucket_cap_mb;    /* 0 = HF's None: 25 MiB buckets */
    bool save_on_each_node;       /* false: only the world's process zero writes checkpoints */
    char optimizer_sharding[16];  /* ctrainer's own: "none" (DDP) or "zero1" (optimizer state sharded) */
    /* asynchronous evaluation and saving (ctrainer's own) */
    bool eval_async;              /* false: evaluations stop training; true: an evaluator thread runs them on snapshots */
    char eval_device[32];         /* "auto" (default: the training device), "cpu" or "cuda:N": where the evaluator runs */
    char eval_async_policy[16];   /* "latest": a newer snapshot replaces a waiting one; "skip": the new one is
                                   * dropped while one waits or runs; "wait": training waits for the slot */
    bool save_async;              /* false: saving stops training; true: written from a snapshot in the background */
    /* generation (Seq2SeqTrainingArguments) */
    bool predict_with_generate;     /* false */
    int64_t generation_max_length;  /* 0 = None: prompt + the run config's generation.max_new_tokens */
    /* randomness */
    int64_t seed;      /* 42 */
    int64_t data_seed; /* -1 = unset: seed */
    bool full_determinism; /* false; ctrainer is deterministic anyway */
} ct_training_args;

/* The device a process of local rank `local_rank` trains on: device, with use_cpu forcing the CPU
 * (ct_device_resolve says how "auto" and "cuda" choose). Errors name training_args.device. */
ct_status ct_training_args_device(const ct_training_args *a, int local_rank, ct_device *out);
/* What the device's GEMMs and convolutions compute with: fp16, bf16, tf32 true, else float32. */
ct_math_mode ct_training_args_math_mode(const ct_training_args *a);

/* One row of the schema. */
typedef enum ct_arg_type {
    CT_ARG_BOOL,
    CT_ARG_INT,
    CT_ARG_REAL,
    CT_ARG_STRING,
    CT_ARG_ENUM,   /* a string from `allowed`, stored as the enum the row maps it to */
    CT_ARG_OBJECT, /* a JSON object (lr_scheduler_kwargs) */
    CT_ARG_LIST,   /* a string or a list of strings from `allowed` (report_to) */
} ct_arg_type;

/* A row whose default is "null" is nullable: JSON null (and, on a command line, "null" or "None")
 * sets it back to "unset", which is what Hugging Face's None means for it (eval_steps,
 * save_total_limit, metric_for_best_model, greater_is_better, data_seed); to_json writes null for
 * an unset value. ct_training_args_default() parses each row's default_text, so the defaults live
 * only in the table. */
typedef struct ct_arg_spec {
    const char *name;
    ct_arg_type type;
    const char *default_text;  /* the default as JSON text ("5e-05", "\"linear\"", "null") */
    const char *const *allowed; /* NULL-terminated, for ENUM/LIST/STRING with a closed set; else NULL */
    const char *doc;
} ct_arg_spec;

/* The table, in documentation order; *n gets its length. */
const ct_arg_spec *ct_training_args_schema(int *n);
/* The row named `name`, or NULL. */
const ct_arg_spec *ct_training_args_find(const char *name);

/* Every field at its default. Release with ct_training_args_free. */
void ct_training_args_default(ct_training_args *a);
void ct_training_args_free(ct_training_args *a);
/* Deep copy (dst is overwritten; free it afterwards). */
ct_status ct_training_args_copy(ct_training_args *dst, const ct_training_args *src);

/* Sets one argument from text, as typed on a command line: numbers, true/false, strings, and JSON
 * for objects and lists. An unknown name gets "did you mean"; a bad value names the argument, the
 * text and what was expected. CT_ERR_CONFIG. */
ct_status ct_training_args_set(ct_training_args *a, const char *name, const char *text);
/* Sets one argument from a JSON value (what set() does after parsing the text). `path` names the
 * value in errors ("training_args.learning_rate"). */
ct_status ct_training_args_set_json(ct_training_args *a, const char *name, const json_t *value, const char *path);
/* Applies every key of obj (the run config's "training_args"); path names obj in errors. Unknown
 * keys get "did you mean". Keys not given keep their current values. */
ct_status ct_training_args_from_json(ct_training_args *a, const json_t *obj, const char *path);
/* Every argument as a JSON object (the resolved arguments; from_json of it gives the same args). */
ct_status ct_training_args_to_json(const ct_training_args *a, json_t **out);

/* The cross-argument rules, CT_ERR_CONFIG naming the arguments involved (a zero-initialised struct
 * gets "... zero-initialised: fill them with ct_training_args_default(&args) first"). Also resolves the derived
 * defaults HF resolves in __post_init__ (metric_for_best_model "loss" with load_best_model_at_end,
 * greater_is_better from the metric's name, data_seed from seed), hence not const. */
ct_status ct_training_args_validate(ct_training_args *a);
/* The same with messages naming path.argument ("training_args.save_steps: ...") instead of the bare
 * argument name: what a run config's arguments should be validated with, so that
 * ct_run_config_annotate can point at the offending line. validate(a) is validate_at(a, NULL). */
ct_status ct_training_args_validate_at(ct_training_args *a, const char *path);

/* The optimizer and scheduler configuration these arguments describe. */
ct_status ct_training_args_optim_config(const ct_training_args *a, ct_optim_config *out);
ct_status ct_training_args_scheduler_config(const ct_training_args *a, ct_scheduler_config *out);

/* Name of an interval / log level value ("steps", "warning"). */
const char *ct_interval_name(ct_interval v);
const char *ct_log_level_name(ct_log_level v);

/* docs/config.md's whole text: a short introduction and a Markdown table of the schema (argument,
 * type, default, allowed values, description). tests/unit/test_args.c checks the file against it
 * and rewrites nothing; regenerate with `build/tests/test_args --markdown > docs/config.md`.
 * Caller frees. */
char *ct_training_args_markdown(void);

#endif
