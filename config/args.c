/* Training arguments (see args.h): the schema table and everything read from it.
 *
 * ARGS_TABLE below is the only place an argument is declared. It expands twice: once into the
 * public ct_arg_spec rows (name, type, default as JSON text, allowed values, doc) and once into the
 * private field_info rows (where the value lives in ct_training_args and how it is stored). Defaults
 * are made by parsing each row's default_text through the same setter JSON goes through, to_json
 * and the Markdown reference walk the same rows, so no list of arguments exists anywhere else.
 *
 * Validation follows Hugging Face's TrainingArguments.__post_init__ (transformers 4.51) for the
 * arguments that exist here, plus range checks Hugging Face leaves to the failures they would cause
 * later (a batch size of 0, save_steps -1). Every message starts with the argument's name, or its
 * JSON path when the caller gives one, so run-config errors can be pointed at their line.
 *
 * Hugging Face's arguments that ctrainer refuses are listed in args_refused.c, and the reference
 * page (docs/config.md) is written by args_doc.c.
 *
 * Why one long file: the table, its two expansions and the cross-argument rules must be read
 * together (a new argument is one row here and nothing elsewhere); split, each part would need the
 * other's private field_info rows. */
#include "config/args.h"
#include "config/args_impl.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/json.h"
#include "core/util.h"

/* --- allowed values ------------------------------------------------------------------------------ */

static const char *const interval_names[] = {"no", "steps", "epoch", NULL};
static const int interval_values[] = {CT_INTERVAL_NO, CT_INTERVAL_STEPS, CT_INTERVAL_EPOCH};
static const char *const eval_names[] = {"no", "steps", "epoch", "continuous", NULL};
static const int eval_values[] = {CT_INTERVAL_NO, CT_INTERVAL_STEPS, CT_INTERVAL_EPOCH, CT_INTERVAL_CONTINUOUS};
static const char *const save_names[] = {"no", "steps", "epoch", "best", NULL};
static const int save_values[] = {CT_INTERVAL_NO, CT_INTERVAL_STEPS, CT_INTERVAL_EPOCH, CT_INTERVAL_BEST};
static const char *const async_policy_names[] = {"latest", "skip", "wait", NULL};
static const char *const log_names[] = {"passive", "debug", "info", "warning", "error", "critical", NULL};
static const int log_values[] = {CT_LOG_PASSIVE, CT_LOG_DEBUG, CT_LOG_INFO,
                                 CT_LOG_WARNING, CT_LOG_ERROR, CT_LOG_CRITICAL};
static const char *const nan_inf_names[] = {"error", "skip", "stop", NULL};
static const int nan_inf_values[] = {CT_NAN_INF_ERROR, CT_NAN_INF_SKIP, CT_NAN_INF_STOP};
static const char *const save_error_names[] = {"stop", "continue", NULL};
static const int save_error_values[] = {CT_SAVE_ERROR_STOP, CT_SAVE_ERROR_CONTINUE};
static const char *const optim_names[] = {"adamw_torch", "adamw", "adam", "sgd", NULL};
static const char *const sharding_names[] = {"none", "zero1", NULL};
static const ct_optim_kind optim_kinds[] = {CT_OPTIM_ADAMW, CT_OPTIM_ADAMW, CT_OPTIM_ADAM, CT_OPTIM_SGD};
/* List rows (S_MASK) store a bit set: each word's value is its bits. A word of no bit or of several
 * (report_to's "none" and "all") names a whole set and stands alone. */
static const char *const report_names[] = {"none", "all", "jsonl", "tensorboard", NULL};
#define REPORT_ALL (CT_REPORT_JSONL | CT_REPORT_TENSORBOARD)
static const int report_values[] = {0, REPORT_ALL, CT_REPORT_JSONL, CT_REPORT_TENSORBOARD};
static const char *const include_names[] = {"inputs", "loss", NULL};
static const int include_values[] = {CT_INCLUDE_INPUTS, CT_INCLUDE_LOSS};

_Static_assert(sizeof(ct_interval) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof(ct_log_level) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof(ct_nan_inf_policy) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof(ct_on_save_error) == sizeof(int), "enum fields are stored as int");

/* --- the table ----------------------------------------------------------------------------------- */

/* How a value is stored in ct_training_args. */
typedef enum storage {
    S_BOOL,    /* bool */
    S_TRIBOOL, /* int: -1 unset, 0, 1 */
    S_I64,     /* int64_t */
    S_F64,     /* double */
    S_STR,     /* char[N] */
    S_ENUM,    /* an int-sized enum; allowed[i] maps to enum_values[i] */
    S_JSON,    /* json_t *, owned object or NULL */
    S_MASK,    /* unsigned bit set (report_to) */
} storage;

/* F_COUNT: "a count or a ratio"; written as a JSON integer when integral, as Hugging Face prints
 * them after __post_init__ turned them into ints. F_WHOLE: written so too, but never a ratio
 * (eval_delay: a float of epochs or steps). F_POSITIVE: a 0 given is refused, not taken for null
 * (which is stored as 0); validation refuses other values <= 0. F_NULL_OFF: a null given means 0, the
 * setting off, as Hugging Face's None does for a row whose default is not null (max_grad_norm). */
enum { F_COUNT = 1, F_WHOLE = 2, F_POSITIVE = 4, F_NULL_OFF = 8 };

typedef struct field_info {
    size_t offset, size;
    storage st;
    const int *enum_values;
    unsigned flags;
    double unset; /* the stored value of null, for nullable numeric rows */
} field_info;

/* X(name, spec type, storage, default JSON, allowed, enum values, flags, unset, doc) */
#define ARGS_TABLE(X)                                                                                                  \
    X(output_dir, STRING, S_STR, "\"trainer_output\"", NULL, NULL, 0, 0,                                               \
      "Directory for checkpoints, logs and the final model; a training run locks it (one run at a time).")             \
    X(overwrite_output_dir, BOOL, S_BOOL, "false", NULL, NULL, 0, 0,                                                   \
      "ctrainer train starts a fresh run (no resume) in an output_dir that holds files only when true, as "            \
      "Hugging Face's example scripts; its files then replace those of the same names.")                               \
    X(do_train, BOOL, S_BOOL, "false", NULL, NULL, 0, 0,                                                               \
      "For scripts, as in Hugging Face (the Trainer does not read it): whether to train. ctrainer's "                  \
      "commands say what runs.")                                                                                       \
    X(do_eval, BOOL, S_BOOL, "false", NULL, NULL, 0, 0,                                                                \
      "For scripts: whether to evaluate; set to true when eval_strategy is not no, as Hugging Face does.")             \
    X(do_predict, BOOL, S_BOOL, "false", NULL, NULL, 0, 0,                                                             \
      "For scripts: whether to predict on the test set.")                                                              \
    X(num_train_epochs, REAL, S_F64, "3.0", NULL, NULL, 0, 0,                                                          \
      "Epochs to train for (a fraction trains part of the last one); ignored when max_steps > 0.")                     \
    X(max_steps, INT, S_I64, "-1", NULL, NULL, 0, 0,                                                                   \
      "Optimizer steps to train for, overriding num_train_epochs; -1 derives it from num_train_epochs.")               \
    X(per_device_train_batch_size, INT, S_I64, "8", NULL, NULL, 0, 0, "Training samples per batch per process.")       \
    X(per_device_eval_batch_size, INT, S_I64, "8", NULL, NULL, 0, 0, "Evaluation samples per batch per process.")      \
    X(gradient_accumulation_steps, INT, S_I64, "1", NULL, NULL, 0, 0,                                                  \
      "Batches whose gradients are summed before each optimizer step.")                                                \
    X(eval_accumulation_steps, INT, S_I64, "null", NULL, NULL, F_POSITIVE, 0,                                          \
      "Evaluation batches whose outputs are gathered before moving to the host; null means at the end. "               \
      "ctrainer keeps outputs on the host already, so only the value is checked (> 0).")                               \
    X(dataloader_drop_last, BOOL, S_BOOL, "false", NULL, NULL, 0, 0, "Drop the last incomplete batch of each epoch.")  \
    X(dataloader_num_workers, INT, S_I64, "0", NULL, NULL, 0, 0,                                                       \
      "Threads that load batches ahead of the training step; 0 loads them in the training thread.")                    \
    X(optim, STRING, S_STR, "\"adamw_torch\"", optim_names, NULL, 0, 0,                                                \
      "The optimizer: AdamW (adamw_torch or adamw), Adam with L2 penalty (adam) or SGD (sgd).")                        \
    X(learning_rate, REAL, S_F64, "5e-05", NULL, NULL, 0, 0, "The initial (peak) learning rate.")                      \
    X(weight_decay, REAL, S_F64, "0.0", NULL, NULL, 0, 0,                                                              \
      "Weight decay for all parameters but biases and LayerNorm weights (a BatchNorm's weight is decayed).")           \
    X(adam_beta1, REAL, S_F64, "0.9", NULL, NULL, 0, 0, "Beta1 of Adam and AdamW.")                                    \
    X(adam_beta2, REAL, S_F64, "0.999", NULL, NULL, 0, 0, "Beta2 of Adam and AdamW.")                                  \
    X(adam_epsilon, REAL, S_F64, "1e-08", NULL, NULL, 0, 0, "Epsilon of Adam and AdamW.")                              \
    X(max_grad_norm, REAL, S_F64, "1.0", NULL, NULL, F_NULL_OFF, 0,                                                    \
      "Clip gradients to this global L2 norm; 0 (or null, as Hugging Face's None) disables clipping.")                 \
    X(label_smoothing_factor, REAL, S_F64, "0.0", NULL, NULL, 0, 0,                                                    \
      "Label smoothing of the default cross-entropy loss (0 = none); a loss section sets its own "                     \
      "label_smoothing instead.")                                                                                      \
    X(nan_inf_policy, ENUM, S_ENUM, "\"error\"", nan_inf_names, nan_inf_values, 0, 0,                                  \
      "ctrainer: an optimizer step whose loss or gradient norm is NaN or infinite: error fails naming the step, skip " \
      "drops its update (the scheduler waits, global_step advances), stop saves the last good step and fails.")        \
    X(lr_scheduler_type, STRING, S_STR, "\"linear\"", ct_scheduler_names, NULL, 0, 0, "The learning-rate schedule.")   \
    X(lr_scheduler_kwargs, OBJECT, S_JSON, "{}", NULL, NULL, 0, 0,                                                     \
      "Settings of the schedule, e.g. {\"num_cycles\": 2} for cosine_with_restarts.")                                  \
    X(warmup_ratio, REAL, S_F64, "0.0", NULL, NULL, 0, 0,                                                              \
      "Linear warmup over this fraction of the training steps (rounded up).")                                          \
    X(warmup_steps, REAL, S_F64, "0", NULL, NULL, F_COUNT, 0,                                                          \
      "Linear warmup over this many steps (a value in (0, 1) is a ratio); wins over warmup_ratio.")                    \
    X(eval_strategy, ENUM, S_ENUM, "\"no\"", eval_names, eval_values, 0, 0,                                            \
      "When to evaluate: never, every eval_steps steps, at the end of each epoch, or continuously (eval_async).")     \
    X(eval_steps, REAL, S_F64, "null", NULL, NULL, F_COUNT, 0,                                                         \
      "Steps between evaluations (a value below 1 is a ratio of the run); null means logging_steps.")                  \
    X(eval_delay, REAL, S_F64, "0", NULL, NULL, F_WHOLE, 0,                                                            \
      "Epochs or steps (by eval_strategy) to wait before the first evaluation.")                                       \
    X(eval_on_start, BOOL, S_BOOL, "false", NULL, NULL, 0, 0, "Evaluate once before training, as a sanity check.")     \
    X(prediction_loss_only, BOOL, S_BOOL, "false", NULL, NULL, 0, 0,                                                   \
      "Evaluate and predict the loss only: no other metric, no compute_metrics, no outputs kept.")                     \
    X(include_for_metrics, LIST, S_MASK, "[]", include_names, include_values, 0, 0,                                    \
      "What compute_metrics receives besides outputs and labels: inputs (the features) and loss (per-sample "          \
      "losses).")                                                                                                      \
    X(batch_eval_metrics, BOOL, S_BOOL, "false", NULL, NULL, 0, 0,                                                     \
      "Compute metrics batch by batch instead of on all outputs at the end (ctrainer's metrics always "                \
      "accumulate per batch; a compute_metrics hook is then refused).")                                                \
    X(save_strategy, ENUM, S_ENUM, "\"steps\"", save_names, save_values, 0, 0,                                         \
      "When to save a checkpoint: never, every save_steps steps, each epoch, or at each new best metric.")             \
    X(save_steps, REAL, S_F64, "500", NULL, NULL, F_COUNT, 0,                                                          \
      "Steps between checkpoints (a value below 1 is a ratio of the run).")                                            \
    X(save_total_limit, INT, S_I64, "null", NULL, NULL, 0, 0,                                                          \
      "Keep at most this many checkpoints (plus the best one); null keeps all.")                                       \
    X(save_only_model, BOOL, S_BOOL, "false", NULL, NULL, 0, 0,                                                        \
      "Save only the model in checkpoints, not the optimizer, scheduler and RNG state (no resuming then).")            \
    X(save_safetensors, BOOL, S_BOOL, "true", NULL, NULL, 0, 0,                                                        \
      "Also write the final model as model.safetensors (PyTorch state_dict names) beside model.h5.")                   \
    X(restore_callback_states_from_checkpoint, BOOL, S_BOOL, "false", NULL, NULL, 0, 0,                                \
      "On resume, restore the callbacks' saved state (early stopping's counter) and TrainerControl; false "            \
      "starts them afresh, as Hugging Face.")                                                                          \
    X(ignore_data_skip, BOOL, S_BOOL, "false", NULL, NULL, 0, 0,                                                       \
      "On resume, start the interrupted epoch's data from its beginning instead of skipping the batches "              \
      "already trained on.")                                                                                           \
    X(on_save_error, ENUM, S_ENUM, "\"stop\"", save_error_names, save_error_values, 0, 0,                              \
      "ctrainer: a checkpoint save that fails (disk full, unwritable output_dir): stop fails the run, continue warns " \
      "and trains on; earlier checkpoints are never touched.")                                                        \
    X(load_best_model_at_end, BOOL, S_BOOL, "false", NULL, NULL, 0, 0,                                                 \
      "Load the checkpoint with the best metric_for_best_model at the end of training.")                               \
    X(metric_for_best_model, STRING, S_STR, "null", NULL, NULL, 0, 0,                                                  \
      "Evaluation metric that ranks checkpoints; loss when load_best_model_at_end and not set.")                       \
    X(greater_is_better, BOOL, S_TRIBOOL, "null", NULL, NULL, 0, -1,                                                   \
      "Whether a larger metric_for_best_model is better; null means unless its name ends in loss.")                    \
    X(eval_bootstrap_resamples, INT, S_I64, "1000", NULL, NULL, 0, 0,                                                  \
      "ctrainer: bootstrap resamples behind each metric's standard error and interval; 0 keeps closed forms only.")    \
    X(eval_confidence_level, REAL, S_F64, "0.95", NULL, NULL, 0, 0,                                                    \
      "ctrainer: coverage of the confidence interval reported with each evaluation metric.")                          \
    X(logging_strategy, ENUM, S_ENUM, "\"steps\"", interval_names, interval_values, 0, 0,                              \
      "When to log the training loss and learning rate.")                                                              \
    X(logging_steps, REAL, S_F64, "500", NULL, NULL, F_COUNT, 0,                                                       \
      "Steps between logs (a value below 1 is a ratio of the run).")                                                   \
    X(logging_first_step, BOOL, S_BOOL, "false", NULL, NULL, 0, 0, "Also log after the first optimizer step.")         \
    X(logging_nan_inf_filter, BOOL, S_BOOL, "true", NULL, NULL, 0, 0,                                                  \
      "Leave NaN and infinite losses out of the logged average (they count as the average so far).")                   \
    X(include_num_input_tokens_seen, BOOL, S_BOOL, "false", NULL, NULL, 0, 0,                                          \
      "Count the input elements trained on (tokens of token data) in num_input_tokens_seen, and log it.")              \
    X(include_tokens_per_second, BOOL, S_BOOL, "false", NULL, NULL, 0, 0,                                              \
      "Report train_tokens_per_second (input elements per second per process); GPU runs report it with train_mfu.")   \
    X(log_level, ENUM, S_ENUM, "\"passive\"", log_names, log_values, 0, 0,                                             \
      "Verbosity of the main process; passive keeps the library's default.")                                           \
    X(log_level_replica, ENUM, S_ENUM, "\"warning\"", log_names, log_values, 0, 0,                                     \
      "Verbosity of the other processes.")                                                                             \
    X(log_on_each_node, BOOL, S_BOOL, "true", NULL, NULL, 0, 0,                                                        \
      "In multi-node runs, log from the main process of every node, not only the first.")                              \
    X(report_to, LIST, S_MASK, "\"none\"", report_names, report_values, 0, 0,                                          \
      "Where logs go besides the console: jsonl writes output_dir/log.jsonl, tensorboard event files under "         \
      "logging_dir; all or none.")                                                                                     \
    X(logging_dir, STRING, S_STR, "null", NULL, NULL, 0, 0,                                                            \
      "TensorBoard's directory; null means output_dir/runs/<date>_<host>, as Hugging Face.")                          \
    X(skip_memory_metrics, BOOL, S_BOOL, "true", NULL, NULL, 0, 0,                                                     \
      "Leave out the memory report (init/train/eval mem_*_delta metrics); measuring costs a little time.")            \
    X(disable_tqdm, BOOL, S_BOOL, "false", NULL, NULL, 0, 0,                                                           \
      "Hide the progress bar (it is also hidden when stderr is not a terminal).")                                      \
    X(use_cpu, BOOL, S_BOOL, "false", NULL, NULL, 0, 0,                                                                \
      "Train and evaluate on the CPU even where a GPU is visible (device cpu).")                                      \
    X(device, STRING, S_STR, "\"auto\"", NULL, NULL, 0, 0,                                                              \
      "ctrainer: auto (a GPU where one is visible, each process its local rank's), cpu, cuda or cuda:N.")             \
    X(bf16, BOOL, S_BOOL, "false", NULL, NULL, 0, 0,                                                                   \
      "Mixed precision: matrix multiplies and convolutions on bf16 tensor cores with float32 accumulation; "          \
      "weights, gradients and optimizer state stay float32. Needs a CUDA device.")                                     \
    X(fp16, BOOL, S_BOOL, "false", NULL, NULL, 0, 0,                                                                   \
      "Mixed precision: fp16 tensor cores with float32 accumulation and dynamic loss scaling (torch's GradScaler: "   \
      "2^16 at first, an overflow skips the step). Needs a CUDA device.")                                              \
    X(tf32, BOOL, S_TRIBOOL, "null", NULL, NULL, 0, -1,                                                                \
      "Let float32 matrix multiplies and convolutions use TF32 tensor cores (CUDA only); null or false: exact "      \
      "float32.")                                                                                                      \
    X(gradient_checkpointing, BOOL, S_BOOL, "false", NULL, NULL, 0, 0,                                                 \
      "Keep only each transformer block's input and output in the forward and recompute the rest in its backward: "  \
      "activation memory of one block instead of all, for about a third more compute; the same gradients.")           \
    X(ddp_timeout, INT, S_I64, "1800", NULL, NULL, 0, 0,                                                               \
      "Seconds a process waits for the others in a collective, MPI's start or its end before the job ends with an "   \
      "error.")                                                                                                       \
    X(ddp_bucket_cap_mb, INT, S_I64, "null", NULL, NULL, F_POSITIVE, 0,                                                \
      "MiB of gradients per all-reduce bucket, sent while backward goes on; null means 25 (PyTorch's).")              \
    X(save_on_each_node, BOOL, S_BOOL, "false", NULL, NULL, 0, 0,                                                      \
      "In multi-node runs, write checkpoints from every node's main process, not only the first.")                    \
    X(optimizer_sharding, STRING, S_STR, "\"none\"", sharding_names, NULL, 0, 0,                                       \
      "ctrainer: none (every process holds the optimizer state) or zero1 (each holds a shard; ZeRO stage 1).")        \
    X(eval_async, BOOL, S_BOOL, "false", NULL, NULL, 0, 0,                                                             \
      "ctrainer: evaluate snapshots of the weights on a thread of their own while training goes on.")                 \
    X(eval_device, STRING, S_STR, "\"auto\"", NULL, NULL, 0, 0,                                                         \
      "ctrainer: where asynchronous evaluations run: auto (the training device), cpu or cuda:N.")                    \
    X(eval_async_policy, STRING, S_STR, "\"latest\"", async_policy_names, NULL, 0, 0,                                   \
      "ctrainer: an evaluation due while one waits: latest replaces the waiting one, skip drops the new one, wait blocks.") \
    X(save_async, BOOL, S_BOOL, "false", NULL, NULL, 0, 0,                                                             \
      "ctrainer: write checkpoints from an in-memory snapshot in the background; training waits for the copy only.")  \
    X(predict_with_generate, BOOL, S_BOOL, "false", NULL, NULL, 0, 0,                                                  \
      "Seq2Seq: predictions are generated continuations of each sample (the run config's generation section).")      \
    X(generation_max_length, INT, S_I64, "null", NULL, NULL, F_POSITIVE, 0,                                            \
      "Seq2Seq: length of prompt plus generated tokens per sample; null means the generation section's max_new_tokens.") \
    X(seed, INT, S_I64, "42", NULL, NULL, 0, 0, "Seed of every random stream: initialisation, dropout, sampling.")     \
    X(full_determinism, BOOL, S_BOOL, "false", NULL, NULL, 0, 0,                                                       \
      "Deterministic algorithms everywhere. ctrainer is deterministic for a given config, world size and "             \
      "thread count already; accepted for portability.")                                                               \
    X(data_seed, INT, S_I64, "null", NULL, NULL, 0, -1, "Seed of the data sampler; null means seed.")

#define SPEC_ROW(name, type, st, def, allowed, values, flags, unset, doc) {#name, CT_ARG_##type, def, allowed, doc},
static const ct_arg_spec specs[] = {ARGS_TABLE(SPEC_ROW)};

#define INFO_ROW(name, type, st, def, allowed, values, flags, unset, doc)                                              \
    {offsetof(ct_training_args, name), sizeof(((ct_training_args *)0)->name), st, values, flags, unset},
static const field_info infos[] = {ARGS_TABLE(INFO_ROW)};

#define N_ARGS ((int)CT_ARRAY_LEN(specs))
_Static_assert(CT_ARRAY_LEN(specs) == CT_ARRAY_LEN(infos), "one info row per spec row");

/* Nullable rows are those whose default is null (see args.h). */
static bool is_nullable(int i) { return strcmp(specs[i].default_text, "null") == 0; }

static int find_index(const char *name) {
    for (int i = 0; i < N_ARGS; i++)
        if (strcmp(specs[i].name, name) == 0) return i;
    return -1;
}

const ct_arg_spec *ct_training_args_schema(int *n) {
    if (n) *n = N_ARGS;
    return specs;
}

const ct_arg_spec *ct_training_args_find(const char *name) {
    int i = name ? find_index(name) : -1;
    return i < 0 ? NULL : &specs[i];
}

#define NAME_ROW(name, type, st, def, allowed, values, flags, unset, doc) #name,
static const char *const names_list[] = {ARGS_TABLE(NAME_ROW) NULL};

static const char *const *arg_names(void) { return names_list; }

/* --- formatting helpers ---------------------------------------------------------------------------- */

/* The shortest "%.*g" that reads back as v. */
static const char *num_str(double v, char buf[32]) {
    if (floor(v) == v && fabs(v) < 1e15) {
        snprintf(buf, 32, "%.0f", v); /* 500, not 5e+02 */
        return buf;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, 32, "%.*g", p, v);
        if (strtod(buf, NULL) == v) return buf;
    }
    return buf;
}

/* A JSON value as short text for messages. */
static const char *json_str(const json_t *v, char buf[80]) {
    if (!v) return strcpy(buf, "nothing");
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!s) return strcpy(buf, "?");
    if (strlen(s) > 60)
        snprintf(buf, 80, "%.57s...", s);
    else
        snprintf(buf, 80, "%s", s);
    free(s);
    return buf;
}

/* "no, steps, epoch" */
static const char *list_str(const char *const *names, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = '\0';
    for (const char *const *w = names; *w && len < cap; w++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", w == names ? "" : ", ", *w);
    return buf;
}

/* "path.name: message", or "name: message" without a path. */
static ct_status bad(const char *path, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static ct_status bad(const char *path, const char *name, const char *fmt, ...) {
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (path && path[0]) return ct_error(CT_ERR_CONFIG, "%s.%s: %s", path, name, msg);
    return ct_error(CT_ERR_CONFIG, "%s: %s", name, msg);
}

/* --- field access ---------------------------------------------------------------------------------- */

static void *field(ct_training_args *a, int i) { return (char *)a + infos[i].offset; }
static const void *cfield(const ct_training_args *a, int i) { return (const char *)a + infos[i].offset; }

static int get_int(const ct_training_args *a, int i) {
    int v;
    memcpy(&v, cfield(a, i), sizeof v);
    return v;
}

/* Every bit a list row's words can set. */
static unsigned mask_all(int i) {
    unsigned m = 0;
    for (int k = 0; specs[i].allowed[k]; k++) m |= (unsigned)infos[i].enum_values[k];
    return m;
}

/* The index of value in an enum row's values, or -1. */
static int enum_index(int i, int value) {
    for (int k = 0; specs[i].allowed[k]; k++)
        if (infos[i].enum_values[k] == value) return k;
    return -1;
}

/* The allowed word `s` of row i (k gets its index), or an error naming `where`. */
static ct_status pick(int i, const char *s, const char *where, int *k) {
    const char *const *allowed = specs[i].allowed;
    for (int j = 0; allowed[j]; j++)
        if (strcmp(allowed[j], s) == 0) {
            *k = j;
            return CT_OK;
        }
    char list[400];
    const char *hint = ct_closest_word(s, allowed);
    if (hint)
        return ct_error(CT_ERR_CONFIG, "%s: unknown value '%s', did you mean '%s'? (allowed: %s)", where, s, hint,
                        list_str(allowed, list, sizeof list));
    return ct_error(CT_ERR_CONFIG, "%s: unknown value '%s' (allowed: %s)", where, s,
                    list_str(allowed, list, sizeof list));
}

/* --- setting from JSON ----------------------------------------------------------------------------- */

/* What row i accepts, for "expected ..." messages. */
static const char *expected(int i, char *buf, size_t cap) {
    const char *base = "a value";
    switch (specs[i].type) {
    case CT_ARG_BOOL: base = is_nullable(i) ? "true, false" : "true or false"; break;
    case CT_ARG_INT: base = "an integer"; break;
    case CT_ARG_REAL: base = "a number"; break;
    case CT_ARG_STRING: base = "a string"; break;
    case CT_ARG_OBJECT: base = "an object"; break;
    case CT_ARG_ENUM:
    case CT_ARG_LIST: {
        char list[400];
        snprintf(buf, cap, "%s of: %s", specs[i].type == CT_ARG_ENUM ? "one" : "a string or a list of strings",
                 list_str(specs[i].allowed, list, sizeof list));
        return buf;
    }
    }
    snprintf(buf, cap, "%s%s", base, is_nullable(i) ? " or null" : "");
    return buf;
}

static ct_status wrong_type(int i, const json_t *v, const char *where) {
    char want[480], got[80];
    return ct_error(CT_ERR_CONFIG, "%s: expected %s, got %s", where, expected(i, want, sizeof want), json_str(v, got));
}

/* Sets row i from v; `where` names the value in errors. The field changes only on success. */
static ct_status set_row(ct_training_args *a, int i, const json_t *v, const char *where) {
    const field_info *f = &infos[i];
    void *p = field(a, i);
    if (json_is_null(v) && (f->flags & F_NULL_OFF) && f->st == S_F64) {
        *(double *)p = 0;
        return CT_OK;
    }
    if (json_is_null(v) && is_nullable(i)) {
        switch (f->st) {
        case S_TRIBOOL: {
            int u = (int)f->unset;
            memcpy(p, &u, sizeof u);
            return CT_OK;
        }
        case S_I64: *(int64_t *)p = (int64_t)f->unset; return CT_OK;
        case S_F64: *(double *)p = f->unset; return CT_OK;
        case S_STR: ((char *)p)[0] = '\0'; return CT_OK;
        default: CT_ASSERT(!"nullable row of this storage");
        }
    }
    switch (f->st) {
    case S_BOOL:
        if (!json_is_boolean(v)) return wrong_type(i, v, where);
        *(bool *)p = json_is_true(v);
        return CT_OK;
    case S_TRIBOOL: {
        if (!json_is_boolean(v)) return wrong_type(i, v, where);
        int b = json_is_true(v) ? 1 : 0;
        memcpy(p, &b, sizeof b);
        return CT_OK;
    }
    case S_I64:
        if ((f->flags & F_POSITIVE) && json_is_number(v) && json_number_value(v) == 0) { /* not null's 0 */
            char got[80];
            return ct_error(CT_ERR_CONFIG, "%s: must be > 0, or null, got %s", where, json_str(v, got));
        }
        if (json_is_integer(v)) {
            *(int64_t *)p = json_integer_value(v);
            return CT_OK;
        }
        if (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v) && fabs(json_real_value(v)) < 9e15) {
            *(int64_t *)p = (int64_t)json_real_value(v);
            return CT_OK;
        }
        return wrong_type(i, v, where);
    case S_F64:
        if (!json_is_number(v)) return wrong_type(i, v, where);
        if (!isfinite(json_number_value(v))) return ct_error(CT_ERR_CONFIG, "%s: expected a finite number", where);
        *(double *)p = json_number_value(v);
        return CT_OK;
    case S_STR: {
        if (!json_is_string(v)) return wrong_type(i, v, where);
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        if (n != strlen(s)) return ct_error(CT_ERR_CONFIG, "%s: the string contains a NUL character", where);
        if (n >= f->size)
            return ct_error(CT_ERR_CONFIG, "%s: too long (%zu bytes, at most %zu)", where, n, f->size - 1);
        if (specs[i].allowed) {
            int k;
            CT_TRY(pick(i, s, where, &k));
        }
        memcpy(p, s, n + 1);
        return CT_OK;
    }
    case S_ENUM: {
        if (!json_is_string(v)) return wrong_type(i, v, where);
        int k;
        CT_TRY(pick(i, json_string_value(v), where, &k));
        memcpy(p, &f->enum_values[k], sizeof(int));
        return CT_OK;
    }
    case S_JSON: {
        json_t **slot = p;
        if (json_is_null(v) || (json_is_object(v) && json_object_size(v) == 0)) {
            json_decref(*slot);
            *slot = NULL;
            return CT_OK;
        }
        if (!json_is_object(v)) return wrong_type(i, v, where);
        json_t *copy = json_deep_copy(v);
        if (!copy) return ct_error(CT_ERR_NOMEM, "%s: out of memory copying the object", where);
        json_decref(*slot);
        *slot = copy;
        return CT_OK;
    }
    case S_MASK: {
        /* A word or a list of words; "none" and "all" only stand alone. */
        const json_t *words = v;
        json_t *single = NULL;
        if (json_is_string(v)) words = single = json_pack("[O]", v);
        if (!json_is_array(words)) return wrong_type(i, v, where);
        unsigned mask = 0;
        size_t n = json_array_size(words), idx;
        json_t *w;
        ct_status s = CT_OK;
        json_array_foreach(words, idx, w) {
            char item[300];
            snprintf(item, sizeof item, single ? "%s" : "%s[%zu]", where, idx);
            int k;
            if (!json_is_string(w)) {
                s = wrong_type(i, w, item);
                break;
            }
            if ((s = pick(i, json_string_value(w), item, &k)) != CT_OK) break;
            unsigned bits = (unsigned)f->enum_values[k];
            if ((bits == 0 || (bits & (bits - 1)) != 0) && n > 1) {
                s = ct_error(CT_ERR_CONFIG, "%s: '%s' cannot be combined with other values", item,
                             specs[i].allowed[k]);
                break;
            }
            mask |= bits;
        }
        json_decref(single);
        if (s != CT_OK) return s;
        *(unsigned *)p = mask;
        return CT_OK;
    }
    }
    return CT_OK;
}

/* --- Hugging Face's arguments that do not apply here (args_refused.c) --------------------------- */

/* CT_OK (the key is ignored) when v asks for nothing; else CT_ERR_CONFIG with the reason. */
static ct_status refuse(const ct_refused_arg *r, const json_t *v, const char *where) {
    if (ct_refused_arg_asks_nothing(r, v)) return CT_OK;
    char got[80];
    return ct_error(CT_ERR_CONFIG, "%s: Hugging Face's argument is not supported by ctrainer (%s), got %s; leave it "
                    "out or at %s", where, r->why, json_str(v, got), r->hf_default);
}

static ct_status unknown_name(const char *name, const char *path) {
    const char *hint = ct_closest_word(name, arg_names());
    if (path && path[0] && strcmp(path, name) != 0) {
        if (hint) return ct_error(CT_ERR_CONFIG, "%s: unknown key '%s', did you mean '%s'?", path, name, hint);
        return ct_error(CT_ERR_CONFIG, "%s: unknown key '%s'", path, name);
    }
    if (hint) return ct_error(CT_ERR_CONFIG, "%s: unknown training argument, did you mean '%s'?", name, hint);
    return ct_error(CT_ERR_CONFIG, "%s: unknown training argument", name);
}

ct_status ct_training_args_set_json(ct_training_args *a, const char *name, const json_t *value, const char *path) {
    CT_ASSERT(a && name);
    const char *where = path && path[0] ? path : name;
    int i = find_index(name);
    if (!value) return ct_error(CT_ERR_CONFIG, "%s: no value", where);
    if (i < 0 && ct_refused_arg_find(name)) return refuse(ct_refused_arg_find(name), value, where);
    if (i < 0) return unknown_name(name, where);
    return set_row(a, i, value, where);
}

ct_status ct_training_args_from_json(ct_training_args *a, const json_t *obj, const char *path) {
    CT_ASSERT(a);
    const char *p = path && path[0] ? path : "training_args";
    if (!obj || json_is_null(obj)) return CT_OK;
    if (!json_is_object(obj)) {
        char got[80];
        return ct_error(CT_ERR_CONFIG, "%s: expected an object of training arguments, got %s", p, json_str(obj, got));
    }
    /* All or nothing: a failing key leaves *a as it was. */
    ct_training_args tmp;
    CT_TRY(ct_training_args_copy(&tmp, a));
    const char *key;
    json_t *value;
    ct_status s = CT_OK;
    json_object_foreach((json_t *)obj, key, value) {
        char where[CT_ARGS_PATH_MAX];
        snprintf(where, sizeof where, "%s.%s", p, key);
        int i = find_index(key);
        if (i >= 0) s = set_row(&tmp, i, value, where);
        else
            s = ct_refused_arg_find(key) ? refuse(ct_refused_arg_find(key), value, where) : unknown_name(key, where);
        if (s != CT_OK) break;
    }
    if (s != CT_OK) {
        ct_training_args_free(&tmp);
        return s;
    }
    ct_training_args_free(a);
    *a = tmp;
    return CT_OK;
}

/* --- setting from command-line text ---------------------------------------------------------------- */

static bool text_is(const char *text, const char *const *words) {
    for (const char *const *w = words; *w; w++)
        if (strcasecmp(text, *w) == 0) return true;
    return false;
}

static const char *const true_words[] = {"true", "t", "yes", "y", "1", NULL};
static const char *const false_words[] = {"false", "f", "no", "n", "0", NULL};

/* Whether a command-line number is written as JSON and Hugging Face's argparse write them: digits, a
 * sign, a point, an exponent; not strtod's hexadecimal, infinities or leading blanks. */
static bool decimal_text(const char *t) {
    if (!*t) return false;
    for (; *t; t++)
        if (!strchr("0123456789+-.eE", *t)) return false;
    return true;
}

/* Parses text the way row i reads a command line into a JSON value (NULL + error when it cannot). */
static ct_status parse_text(int i, const char *text, json_t **out) {
    const char *name = specs[i].name;
    *out = NULL;
    char want[480];
    if ((is_nullable(i) || (infos[i].flags & F_NULL_OFF)) && (strcmp(text, "null") == 0 || strcmp(text, "None") == 0)) {
        *out = json_null();
        return CT_OK;
    }
    switch (specs[i].type) {
    case CT_ARG_BOOL:
        if (text_is(text, true_words)) *out = json_true();
        if (text_is(text, false_words)) *out = json_false();
        break;
    case CT_ARG_INT: {
        if (!decimal_text(text)) break;
        char *end;
        errno = 0;
        long long v = strtoll(text, &end, 10);
        if (end != text && *end == '\0' && errno == ERANGE)
            return ct_error(CT_ERR_CONFIG, "%s: %s is not a 64-bit integer (they run from %lld to %lld)", name, text,
                            LLONG_MIN, LLONG_MAX);
        if (end != text && *end == '\0') {
            *out = json_integer(v);
            break;
        }
        double d = strtod(text, &end);
        if (end != text && *end == '\0' && isfinite(d) && floor(d) == d && fabs(d) < 9e15)
            *out = json_integer((json_int_t)d);
        break;
    }
    case CT_ARG_REAL: {
        if (!decimal_text(text)) break;
        char *end;
        double d = strtod(text, &end);
        if (end != text && *end == '\0' && isfinite(d)) *out = json_real(d);
        break;
    }
    case CT_ARG_STRING:
    case CT_ARG_ENUM:
        *out = json_string(text);
        if (!*out) return ct_error(CT_ERR_CONFIG, "%s: '%s' is not valid UTF-8", name, text);
        break;
    case CT_ARG_OBJECT: {
        json_error_t err;
        *out = json_loads(text, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &err);
        if (!*out)
            return ct_error(CT_ERR_CONFIG, "%s: expected a JSON object, got '%s' (%s at column %d)", name, text,
                            err.text, err.column);
        break;
    }
    case CT_ARG_LIST:
        if (!strchr(text, ',') && text[0] != '[') {
            *out = json_string(text);
            if (!*out) return ct_error(CT_ERR_CONFIG, "%s: '%s' is not valid UTF-8", name, text);
        } else if (text[0] == '[') {
            json_error_t err;
            *out = json_loads(text, JSON_REJECT_DUPLICATES, &err);
            if (!*out)
                return ct_error(CT_ERR_CONFIG, "%s: expected a JSON list, got '%s' (%s at column %d)", name, text,
                                err.text, err.column);
        } else {
            /* "jsonl" or "a,b": comma-separated words */
            *out = json_array();
            const char *p = text;
            for (;;) {
                const char *comma = strchr(p, ',');
                size_t n = comma ? (size_t)(comma - p) : strlen(p);
                json_t *w = json_stringn(p, n);
                if (!w) {
                    json_decref(*out);
                    *out = NULL;
                    return ct_error(CT_ERR_CONFIG, "%s: '%s' is not valid UTF-8", name, text);
                }
                json_array_append_new(*out, w);
                if (!comma) break;
                p = comma + 1;
            }
        }
        break;
    }
    if (!*out) return ct_error(CT_ERR_CONFIG, "%s: expected %s, got '%s'", name, expected(i, want, sizeof want), text);
    return CT_OK;
}

ct_status ct_training_args_set(ct_training_args *a, const char *name, const char *text) {
    CT_ASSERT(a && name && text);
    int i = find_index(name);
    if (i < 0 && ct_refused_arg_find(name)) {
        /* as a command line spells it: JSON, Python's None, or else a string */
        json_t *v = strcmp(text, "None") == 0 ? json_null() : json_loads(text, JSON_DECODE_ANY, NULL);
        if (!v) v = json_string(text);
        ct_status s = v ? refuse(ct_refused_arg_find(name), v, name)
                        : ct_error(CT_ERR_CONFIG, "%s: '%s' is not valid UTF-8", name, text);
        json_decref(v);
        return s;
    }
    if (i < 0) return unknown_name(name, NULL);
    json_t *v;
    CT_TRY(parse_text(i, text, &v));
    ct_status s = set_row(a, i, v, name);
    json_decref(v);
    return s;
}

/* --- defaults, copies, JSON out -------------------------------------------------------------------- */

void ct_training_args_default(ct_training_args *a) {
    CT_ASSERT(a);
    memset(a, 0, sizeof *a);
    for (int i = 0; i < N_ARGS; i++) {
        /* The storage a row declares must fit its field (a mismatch is a bug in the table). */
        static const size_t sizes[] = {
            [S_BOOL] = sizeof(bool), [S_TRIBOOL] = sizeof(int),   [S_I64] = sizeof(int64_t),  [S_F64] = sizeof(double),
            [S_ENUM] = sizeof(int),  [S_JSON] = sizeof(json_t *), [S_MASK] = sizeof(unsigned)};
        CT_ASSERT(infos[i].st == S_STR || infos[i].size == sizes[infos[i].st]);
        json_error_t err;
        json_t *v = json_loads(specs[i].default_text, JSON_DECODE_ANY, &err);
        CT_ASSERT(v != NULL);
        ct_status s = set_row(a, i, v, specs[i].name);
        json_decref(v);
        if (s != CT_OK) ct_abort_at(__FILE__, __LINE__, "bad default of %s: %s", specs[i].name, ct_last_error());
    }
}

void ct_training_args_free(ct_training_args *a) {
    if (!a) return;
    json_decref(a->lr_scheduler_kwargs);
    a->lr_scheduler_kwargs = NULL;
}

ct_status ct_training_args_copy(ct_training_args *dst, const ct_training_args *src) {
    CT_ASSERT(dst && src);
    json_t *kw = NULL;
    if (src->lr_scheduler_kwargs) {
        kw = json_deep_copy(src->lr_scheduler_kwargs);
        if (!kw) return ct_error(CT_ERR_NOMEM, "training arguments: out of memory copying lr_scheduler_kwargs");
    }
    memmove(dst, src, sizeof *dst);
    dst->lr_scheduler_kwargs = kw;
    return CT_OK;
}

/* Row i of a as JSON (NULL + error for a value JSON cannot hold). */
static ct_status row_json(const ct_training_args *a, int i, json_t **out) {
    const field_info *f = &infos[i];
    const void *p = cfield(a, i);
    const char *name = specs[i].name;
    *out = NULL;
    switch (f->st) {
    case S_BOOL: *out = json_boolean(*(const bool *)p); break;
    case S_TRIBOOL: {
        int v = get_int(a, i);
        *out = v < 0 ? json_null() : json_boolean(v);
        break;
    }
    case S_I64: {
        int64_t v = *(const int64_t *)p;
        *out = is_nullable(i) && v == (int64_t)f->unset ? json_null() : json_integer(v);
        break;
    }
    case S_F64: {
        double v = *(const double *)p;
        if (is_nullable(i) && v == f->unset)
            *out = json_null();
        else if (!isfinite(v))
            return ct_error(CT_ERR_CONFIG, "%s: not a finite number (%g)", name, v);
        else if ((f->flags & (F_COUNT | F_WHOLE)) && floor(v) == v && fabs(v) < 9e15)
            *out = json_integer((json_int_t)v);
        else
            *out = json_real(v);
        break;
    }
    case S_STR: {
        const char *s = p;
        if (memchr(s, '\0', f->size) == NULL) return ct_error(CT_ERR_CONFIG, "%s: not NUL-terminated", name);
        *out = is_nullable(i) && !s[0] ? json_null() : json_string(s);
        if (!*out) return ct_error(CT_ERR_CONFIG, "%s: '%s' is not valid UTF-8", name, s);
        break;
    }
    case S_ENUM: {
        int k = enum_index(i, get_int(a, i));
        if (k < 0) return ct_error(CT_ERR_CONFIG, "%s: invalid value %d", name, get_int(a, i));
        *out = json_string(specs[i].allowed[k]);
        break;
    }
    case S_JSON: {
        json_t *o = *(json_t *const *)p;
        *out = o ? json_deep_copy(o) : json_object();
        break;
    }
    case S_MASK: {
        unsigned m = *(const unsigned *)p;
        if (m & ~mask_all(i)) return ct_error(CT_ERR_CONFIG, "%s: invalid value 0x%x", name, m);
        *out = json_array();
        for (int k = 0; specs[i].allowed[k]; k++) {
            unsigned bits = (unsigned)f->enum_values[k];
            if (bits && (bits & (bits - 1)) == 0 && (m & bits))
                json_array_append_new(*out, json_string(specs[i].allowed[k]));
        }
        break;
    }
    }
    if (!*out) return ct_error(CT_ERR_NOMEM, "%s: out of memory", name);
    return CT_OK;
}

ct_status ct_training_args_to_json(const ct_training_args *a, json_t **out) {
    CT_ASSERT(a && out);
    *out = NULL;
    json_t *o = json_object();
    if (!o) return ct_error(CT_ERR_NOMEM, "training arguments: out of memory");
    for (int i = 0; i < N_ARGS; i++) {
        json_t *v;
        ct_status s = row_json(a, i, &v);
        if (s != CT_OK) {
            json_decref(o);
            return s;
        }
        json_object_set_new(o, specs[i].name, v);
    }
    *out = o;
    return CT_OK;
}

/* --- names ------------------------------------------------------------------------------------------ */

const char *ct_interval_name(ct_interval v) {
    if (v == CT_INTERVAL_CONTINUOUS) return "continuous";
    for (int k = 0; save_names[k]; k++)
        if (save_values[k] == (int)v) return save_names[k];
    return "?";
}

const char *ct_log_level_name(ct_log_level v) {
    for (int k = 0; log_names[k]; k++)
        if (log_values[k] == (int)v) return log_names[k];
    return "?";
}

/* --- optimizer and scheduler ------------------------------------------------------------------------ */

static ct_status optim_kind(const ct_training_args *a, const char *path, ct_optim_kind *kind) {
    for (int k = 0; optim_names[k]; k++)
        if (strcmp(optim_names[k], a->optim) == 0) {
            *kind = optim_kinds[k];
            return CT_OK;
        }
    char where[CT_ARGS_PATH_MAX];
    snprintf(where, sizeof where, "%s%s%s", path && path[0] ? path : "", path && path[0] ? "." : "", "optim");
    int k;
    return pick(find_index("optim"), a->optim, where, &k);
}

/* ct_optim_config_validate knows what each optimizer accepts; asking it about one argument at a time
 * (the others at their defaults) tells which argument a failure is about, so the message can start
 * with that argument's name. */
static ct_status optim_config_at(const ct_training_args *a, const char *path, ct_optim_config *out) {
    ct_optim_config cfg = ct_optim_config_default();
    CT_TRY(optim_kind(a, path, &cfg.optim));
    static const struct {
        const char *name;
        size_t args_off, cfg_off;
    } rows[] = {
        {"learning_rate", offsetof(ct_training_args, learning_rate), offsetof(ct_optim_config, learning_rate)},
        {"weight_decay", offsetof(ct_training_args, weight_decay), offsetof(ct_optim_config, weight_decay)},
        {"adam_beta1", offsetof(ct_training_args, adam_beta1), offsetof(ct_optim_config, adam_beta1)},
        {"adam_beta2", offsetof(ct_training_args, adam_beta2), offsetof(ct_optim_config, adam_beta2)},
        {"adam_epsilon", offsetof(ct_training_args, adam_epsilon), offsetof(ct_optim_config, adam_epsilon)},
    };
    for (size_t r = 0; r < CT_ARRAY_LEN(rows); r++) {
        ct_optim_config one = ct_optim_config_default();
        one.optim = cfg.optim;
        double v;
        memcpy(&v, (const char *)a + rows[r].args_off, sizeof v);
        memcpy((char *)&one + rows[r].cfg_off, &v, sizeof v);
        memcpy((char *)&cfg + rows[r].cfg_off, &v, sizeof v);
        if (ct_optim_config_validate(&one) != CT_OK) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", ct_last_error());
            return bad(path, rows[r].name, "%s", msg);
        }
    }
    if (ct_optim_config_validate(&cfg) != CT_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", ct_last_error());
        return bad(path, "optim", "%s", msg);
    }
    *out = cfg;
    return CT_OK;
}

ct_status ct_training_args_optim_config(const ct_training_args *a, ct_optim_config *out) {
    CT_ASSERT(a && out);
    return optim_config_at(a, NULL, out);
}

static ct_status scheduler_config_at(const ct_training_args *a, const char *path, ct_scheduler_config *out) {
    ct_scheduler_config cfg = ct_scheduler_config_default();
    char where[CT_ARGS_PATH_MAX];
    const char *pre = path && path[0] ? path : "", *dot = path && path[0] ? "." : "";
    if (strnlen(a->lr_scheduler_type, sizeof a->lr_scheduler_type) >= sizeof cfg.lr_scheduler_type) {
        snprintf(where, sizeof where, "%s%slr_scheduler_type", pre, dot);
        return ct_error(CT_ERR_CONFIG, "%s: unknown scheduler", where);
    }
    snprintf(cfg.lr_scheduler_type, sizeof cfg.lr_scheduler_type, "%s", a->lr_scheduler_type);
    int k;
    snprintf(where, sizeof where, "%s%slr_scheduler_type", pre, dot);
    CT_TRY(pick(find_index("lr_scheduler_type"), a->lr_scheduler_type, where, &k));
    /* warmup_steps is a count from 1 up and a ratio below 1, which the scheduler takes as warmup_ratio
     * (warmup_steps wins over warmup_ratio either way, as in Hugging Face). */
    if (a->warmup_steps >= 1) {
        cfg.warmup_steps = (int64_t)a->warmup_steps;
        cfg.warmup_ratio = a->warmup_ratio;
    } else if (a->warmup_steps > 0) {
        cfg.warmup_ratio = a->warmup_steps;
    } else {
        cfg.warmup_ratio = a->warmup_ratio;
    }
    snprintf(where, sizeof where, "%s%slr_scheduler_kwargs", pre, dot);
    CT_TRY(ct_scheduler_kwargs_from_json(a->lr_scheduler_kwargs, where, cfg.lr_scheduler_type, &cfg.kwargs));
    *out = cfg;
    return CT_OK;
}

ct_status ct_training_args_scheduler_config(const ct_training_args *a, ct_scheduler_config *out) {
    CT_ASSERT(a && out);
    return scheduler_config_at(a, NULL, out);
}

/* --- validation ------------------------------------------------------------------------------------- */

/* A "count or ratio" argument of a steps strategy: > 0, and a whole number above 1 (HF: "--save_steps
 * must be an integer if bigger than 1"). strategy_arg names the strategy that needs it. */
static ct_status check_steps(const char *path, const char *name, double v, const char *strategy_arg) {
    char b[32];
    if (!(v > 0))
        return bad(path, name, "must be > 0 when %s is 'steps' (a count, or a ratio of the run below 1), got %s",
                   strategy_arg, num_str(v, b));
    if (v > 1 && floor(v) != v)
        return bad(path, name, "must be a whole number when above 1 (below 1 it is a ratio of the run), got %s",
                   num_str(v, b));
    return CT_OK;
}

ct_status ct_training_args_device(const ct_training_args *a, int local_rank, ct_device *out) {
    ct_status s = ct_device_resolve(a->use_cpu ? "cpu" : a->device, local_rank, out);
    return s == CT_OK ? s : ct_error_prefix(s, "training_args.device: ");
}

ct_math_mode ct_training_args_math_mode(const ct_training_args *a) {
    return a->fp16 ? CT_MATH_FP16 : a->bf16 ? CT_MATH_BF16 : a->tf32 == 1 ? CT_MATH_TF32 : CT_MATH_F32;
}

ct_status ct_training_args_validate_at(ct_training_args *a, const char *path) {
    CT_ASSERT(a);
    char b1[32], b2[32];
    /* A struct declared `= {0}` (or memset) rather than filled by ct_training_args_default: no field
     * would be named rightly by its first invalid value (log_level 0), so say what to call instead. */
    if (a->log_level == 0 && a->log_level_replica == 0 && a->per_device_train_batch_size == 0 && !a->output_dir[0])
        return ct_error(CT_ERR_CONFIG, "%s%straining arguments are zero-initialised: fill them with "
                        "ct_training_args_default(&args) first, then change what you need", path ? path : "",
                        path && path[0] ? ": " : "");
    /* Values a program (not JSON) may have put in the struct. */
    if (a->eval_strategy == CT_INTERVAL_BEST)
        return bad(path, "eval_strategy", "'best' is a save_strategy only (allowed: no, steps, epoch)");
    if (a->logging_strategy == CT_INTERVAL_BEST)
        return bad(path, "logging_strategy", "'best' is a save_strategy only (allowed: no, steps, epoch)");
    if (a->logging_strategy == CT_INTERVAL_CONTINUOUS || a->save_strategy == CT_INTERVAL_CONTINUOUS)
        return bad(path, a->logging_strategy == CT_INTERVAL_CONTINUOUS ? "logging_strategy" : "save_strategy",
                   "'continuous' is an eval_strategy only");
    for (int i = 0; i < N_ARGS; i++) {
        if (infos[i].st == S_STR && !memchr(field(a, i), '\0', infos[i].size))
            return bad(path, specs[i].name, "not NUL-terminated");
        if (infos[i].st == S_ENUM && enum_index(i, get_int(a, i)) < 0) {
            char list[200];
            return bad(path, specs[i].name, "invalid value %d (allowed: %s)", get_int(a, i),
                       list_str(specs[i].allowed, list, sizeof list));
        }
        if (infos[i].st == S_F64 && !isfinite(*(double *)field(a, i)))
            return bad(path, specs[i].name, "must be finite, got %g", *(double *)field(a, i));
        if (infos[i].st == S_TRIBOOL && get_int(a, i) != -1 && get_int(a, i) != 0 && get_int(a, i) != 1)
            return bad(path, specs[i].name, "must be -1 (unset), 0 or 1, got %d", get_int(a, i));
    }
    for (int i = 0; i < N_ARGS; i++)
        if (infos[i].st == S_MASK && (*(unsigned *)field(a, i) & ~mask_all(i)))
            return bad(path, specs[i].name, "invalid value 0x%x", *(unsigned *)field(a, i));
    if (a->lr_scheduler_kwargs && !json_is_object(a->lr_scheduler_kwargs))
        return bad(path, "lr_scheduler_kwargs", "must be an object");

    /* One argument at a time. */
    if (!a->output_dir[0]) return bad(path, "output_dir", "must not be empty");
    if (!(a->num_train_epochs >= 0))
        return bad(path, "num_train_epochs", "must be >= 0, got %s", num_str(a->num_train_epochs, b1));
    if (a->max_steps != -1 && a->max_steps <= 0)
        return bad(path, "max_steps", "must be -1 (train for num_train_epochs) or > 0, got %lld",
                   (long long)a->max_steps);
    if (a->per_device_train_batch_size < 1)
        return bad(path, "per_device_train_batch_size", "must be >= 1, got %lld",
                   (long long)a->per_device_train_batch_size);
    if (a->per_device_eval_batch_size < 1)
        return bad(path, "per_device_eval_batch_size", "must be >= 1, got %lld",
                   (long long)a->per_device_eval_batch_size);
    if (a->gradient_accumulation_steps < 1)
        return bad(path, "gradient_accumulation_steps", "must be >= 1, got %lld",
                   (long long)a->gradient_accumulation_steps);
    /* Batch sizes multiply (samples per optimizer step = per-device batch x accumulation steps x
     * processes, in int64 counts and float64 throughputs): past 2^40 samples per process and step no
     * data set fills one step, and the products overflow (2^62 accumulation steps made the reported
     * samples per second 0). */
    const int64_t max_step_samples = (int64_t)1 << 40;
    if (a->per_device_train_batch_size > max_step_samples || a->per_device_eval_batch_size > max_step_samples)
        return bad(path,
                   a->per_device_train_batch_size > max_step_samples ? "per_device_train_batch_size"
                                                                     : "per_device_eval_batch_size",
                   "must be at most 2^40 (%lld) samples, got %lld", (long long)max_step_samples,
                   (long long)CT_MAX(a->per_device_train_batch_size, a->per_device_eval_batch_size));
    if (a->gradient_accumulation_steps > max_step_samples / a->per_device_train_batch_size)
        return bad(path, "gradient_accumulation_steps",
                   "%lld steps of per_device_train_batch_size %lld are more than 2^40 (%lld) samples per optimizer "
                   "step and process",
                   (long long)a->gradient_accumulation_steps, (long long)a->per_device_train_batch_size,
                   (long long)max_step_samples);
    if (a->dataloader_num_workers < 0)
        return bad(path, "dataloader_num_workers", "must be >= 0, got %lld", (long long)a->dataloader_num_workers);
    ct_optim_config ocfg;
    CT_TRY(optim_config_at(a, path, &ocfg));
    if (!(a->max_grad_norm >= 0))
        return bad(path, "max_grad_norm", "must be >= 0 (0 disables clipping), got %s", num_str(a->max_grad_norm, b1));
    if (!(a->warmup_ratio >= 0 && a->warmup_ratio <= 1))
        return bad(path, "warmup_ratio", "must lie in [0, 1], got %s", num_str(a->warmup_ratio, b1));
    if (!(a->warmup_steps >= 0))
        return bad(path, "warmup_steps", "must be >= 0 (a count, or a ratio of the run below 1), got %s",
                   num_str(a->warmup_steps, b1));
    if (a->warmup_steps > 1 && floor(a->warmup_steps) != a->warmup_steps)
        return bad(path, "warmup_steps",
                   "must be a whole number when above 1 (below 1 it is a ratio of the run), got %s",
                   num_str(a->warmup_steps, b1));
    ct_scheduler_config scfg;
    CT_TRY(scheduler_config_at(a, path, &scfg));
    /* The kwargs' values, now where the config names them, rather than when the trainer starts. */
    CT_TRY(ct_scheduler_config_check(&scfg, path, a->learning_rate, a->max_steps > 0 ? a->max_steps : 0));
    if (!(a->eval_delay >= 0)) return bad(path, "eval_delay", "must be >= 0, got %s", num_str(a->eval_delay, b1));
    if (a->save_total_limit < 0)
        return bad(path, "save_total_limit", "must be >= 0 (0 or null keeps every checkpoint), got %lld",
                   (long long)a->save_total_limit);
    if (a->seed < 0) return bad(path, "seed", "must be >= 0, got %lld", (long long)a->seed);
    if (a->eval_accumulation_steps < 0)
        return bad(path, "eval_accumulation_steps", "must be > 0 batches (or null), got %lld",
                   (long long)a->eval_accumulation_steps);
    if (!(a->label_smoothing_factor >= 0 && a->label_smoothing_factor <= 1))
        return bad(path, "label_smoothing_factor", "must lie in [0, 1], got %s",
                   num_str(a->label_smoothing_factor, b1));
    if (a->ddp_bucket_cap_mb < 0)
        return bad(path, "ddp_bucket_cap_mb", "must be > 0 MiB (null means 25), got %lld", (long long)a->ddp_bucket_cap_mb);
    if (a->generation_max_length < 0)
        return bad(path, "generation_max_length", "must be > 0 tokens (null means the prompt plus max_new_tokens), got %lld",
                   (long long)a->generation_max_length);
    if (a->ddp_timeout <= 0) return bad(path, "ddp_timeout", "must be > 0 seconds, got %lld", (long long)a->ddp_timeout);
    if (a->eval_bootstrap_resamples < 0)
        return bad(path, "eval_bootstrap_resamples", "must be >= 0, got %lld", (long long)a->eval_bootstrap_resamples);
    if (!(a->eval_confidence_level > 0 && a->eval_confidence_level < 1))
        return bad(path, "eval_confidence_level", "must be in (0, 1), got %g", a->eval_confidence_level);
    if (a->data_seed < -1)
        return bad(path, "data_seed", "must be >= 0 (or null: seed), got %lld", (long long)a->data_seed);
    ct_device dev;
    if (strcmp(a->device, "auto") != 0 && ct_device_parse(a->device, &dev) != CT_OK)
        return bad(path, "device", "'%s' is not a device (expected \"auto\", \"cpu\", \"cuda\" or \"cuda:N\")",
                   a->device);
    if (a->bf16 && a->fp16) return bad(path, "fp16", "at most one of fp16 and bf16 can be true, but not both");
    if (a->use_cpu && strcmp(a->device, "auto") != 0 && strcmp(a->device, "cpu") != 0)
        return bad(path, "device", "'%s' contradicts use_cpu true (leave device \"auto\" or set \"cpu\")", a->device);
    ct_device eval_dev;
    if (strcmp(a->eval_device, "auto") != 0 && ct_device_parse(a->eval_device, &eval_dev) != CT_OK)
        return bad(path, "eval_device", "'%s' is not a device (expected \"auto\", \"cpu\" or \"cuda:N\")",
                   a->eval_device);
    if (a->eval_strategy == CT_INTERVAL_CONTINUOUS && !a->eval_async)
        return bad(path, "eval_strategy",
                   "'continuous' evaluates beside training, one evaluation after the other, and needs eval_async true");

    /* Hugging Face's __post_init__, in its order. eval_steps unset falls back to logging_steps. */
    if (a->eval_strategy == CT_INTERVAL_STEPS && a->eval_steps == 0) {
        if (!(a->logging_steps > 0))
            return bad(path, "eval_steps",
                       "eval_strategy 'steps' needs eval_steps or logging_steps > 0, but eval_steps "
                       "is not set and logging_steps is %s",
                       num_str(a->logging_steps, b1));
        a->eval_steps = a->logging_steps;
    }
    if (a->logging_strategy == CT_INTERVAL_STEPS)
        CT_TRY(check_steps(path, "logging_steps", a->logging_steps, "logging_strategy"));
    if (a->eval_strategy == CT_INTERVAL_STEPS) CT_TRY(check_steps(path, "eval_steps", a->eval_steps, "eval_strategy"));
    if (a->save_strategy == CT_INTERVAL_STEPS) CT_TRY(check_steps(path, "save_steps", a->save_steps, "save_strategy"));
    if (!(a->eval_steps >= 0)) return bad(path, "eval_steps", "must be >= 0, got %s", num_str(a->eval_steps, b1));

    if (a->load_best_model_at_end && a->save_strategy != CT_INTERVAL_BEST) {
        if (a->eval_strategy != a->save_strategy)
            return bad(path, "load_best_model_at_end",
                       "requires the save and evaluation strategies to match, but save_strategy is '%s' and "
                       "eval_strategy is '%s'",
                       ct_interval_name(a->save_strategy), ct_interval_name(a->eval_strategy));
        /* fmod is Python's % for positive operands; any remainder fails, as it does in Hugging Face
         * (whose finer test for two ratios is followed by an unconditional raise). */
        if (a->eval_strategy == CT_INTERVAL_STEPS && fmod(a->save_steps, a->eval_steps) != 0) {
            if ((a->eval_steps < 1) != (a->save_steps < 1))
                return bad(path, "load_best_model_at_end",
                           "requires save_steps to be a multiple of eval_steps, which cannot be guaranteed when one is "
                           "a ratio and the other a count, but save_steps is %s and eval_steps is %s",
                           num_str(a->save_steps, b1), num_str(a->eval_steps, b2));
            return bad(path, "load_best_model_at_end",
                       "requires save_steps to be a round multiple of eval_steps, but save_steps is %s and eval_steps "
                       "is %s",
                       num_str(a->save_steps, b1), num_str(a->eval_steps, b2));
        }
    }
    if ((a->load_best_model_at_end || strcmp(a->lr_scheduler_type, "reduce_lr_on_plateau") == 0) &&
        !a->metric_for_best_model[0])
        snprintf(a->metric_for_best_model, sizeof a->metric_for_best_model, "loss");
    if (a->greater_is_better < 0 && a->metric_for_best_model[0]) {
        size_t n = strlen(a->metric_for_best_model);
        a->greater_is_better = !(n >= 4 && strcmp(a->metric_for_best_model + n - 4, "loss") == 0);
    }
    /* Trainer.__init__'s check (save_strategy "best" compares metric_for_best_model). "best" with
     * eval_strategy "no" is accepted as HF accepts it (configs move between the two); it never saves,
     * which the Trainer warns about when training starts. */
    if (a->save_strategy == CT_INTERVAL_BEST && !a->metric_for_best_model[0])
        return bad(path, "save_strategy", "'best' requires metric_for_best_model, which is not set");
    if (strcmp(a->lr_scheduler_type, "reduce_lr_on_plateau") == 0 && a->eval_strategy == CT_INTERVAL_NO)
        return bad(path, "lr_scheduler_type", "'reduce_lr_on_plateau' requires evaluations, but eval_strategy is 'no'");
    if (a->data_seed < 0) a->data_seed = a->seed;
    /* __post_init__: "do_eval" follows from an evaluation strategy */
    if (a->eval_strategy != CT_INTERVAL_NO) a->do_eval = true;
    return CT_OK;
}

ct_status ct_training_args_validate(ct_training_args *a) { return ct_training_args_validate_at(a, NULL); }

/* --- what the reference page needs (args_doc.c) ------------------------------------------------- */

bool ct_training_args_count_or_ratio(int i) { return i >= 0 && i < N_ARGS && (infos[i].flags & F_COUNT); }
