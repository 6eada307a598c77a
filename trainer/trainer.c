/* The Trainer's construction, its hook wrappers and the default hooks of one step.
 *
 * Every hook is called through its ct_trainer_<hook> wrapper: the one place that picks the
 * application's override or the default (a NULL member, or a table written before the member
 * existed) and prefixes errors with the hook's name. The training loop is in train_loop.c,
 * evaluation and prediction in evaluate.c, files written to output_dir in outputs.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "callbacks/tensorboard.h"
#include "core/dir_lock.h"
#include "core/log.h"
#include "core/ops/ops.h"
#include "trainer/memory.h"
#include "trainer/trainer_impl.h"


/* The arguments' levels are the logger's numbers (both are Python's). */
_Static_assert(CT_LOG_PASSIVE == CT_LOG_LEVEL_PASSIVE && CT_LOG_DEBUG == CT_LOG_LEVEL_DEBUG &&
                   CT_LOG_INFO == CT_LOG_LEVEL_INFO && CT_LOG_WARNING == CT_LOG_LEVEL_WARNING &&
                   CT_LOG_ERROR == CT_LOG_LEVEL_ERROR && CT_LOG_CRITICAL == CT_LOG_LEVEL_CRITICAL,
               "ct_log_level and core/log.h levels differ");

/* trainer.h's rule: priv is the public struct's last member (new public members go before it, and
 * internals behind it). */
_Static_assert(offsetof(ct_trainer, priv) + sizeof(struct ct_trainer_private *) == sizeof(ct_trainer),
               "ct_trainer: priv must stay the last member");

static ct_status hook_error(ct_status s, const char *hook) {
    return s == CT_OK ? s : ct_error_prefix(s, "%s: ", hook);
}

/* --- data ------------------------------------------------------------------------------------------- */

static ct_status make_loader(ct_trainer *t, ct_dataset *ds, bool eval, const char *what, ct_loader **out) {
    if (!ds) return ct_error(CT_ERR_STATE, "no %s dataset was given", what);
    const ct_training_args *a = &t->args;
    ct_loader_config c = {
        .batch_size = eval ? a->per_device_eval_batch_size : a->per_device_train_batch_size,
        .shuffle = !eval,
        .drop_last = !eval && a->dataloader_drop_last,
        .eval = eval,
        .seed = (uint64_t)(a->data_seed >= 0 ? a->data_seed : a->seed),
        .rank = t->rank,
        .world_size = t->world_size,
        .num_workers = (int)a->dataloader_num_workers,
    };
    return ct_loader_create(ds, &c, out);
}

ct_status ct_trainer_default_get_train_dataloader(ct_trainer *t, ct_loader **out) {
    return make_loader(t, t->train_dataset, false, "training", out);
}

ct_status ct_trainer_default_get_eval_dataloader(ct_trainer *t, ct_dataset *eval_set, ct_loader **out) {
    return make_loader(t, eval_set ? eval_set : t->eval_datasets[0], true, "evaluation", out);
}

ct_status ct_trainer_default_get_test_dataloader(ct_trainer *t, ct_dataset *test_set, ct_loader **out) {
    return make_loader(t, test_set, true, "test", out);
}

ct_status ct_trainer_get_train_dataloader(ct_trainer *t, ct_loader **out) {
    *out = NULL;
    ct_status (*f)(ct_trainer *, ct_loader **) = CT_TRAINER_HOOK(t, get_train_dataloader);
    return hook_error((f ? f : ct_trainer_default_get_train_dataloader)(t, out), "get_train_dataloader");
}

ct_status ct_trainer_get_eval_dataloader(ct_trainer *t, ct_dataset *eval_set, ct_loader **out) {
    *out = NULL;
    ct_status (*f)(ct_trainer *, ct_dataset *, ct_loader **) = CT_TRAINER_HOOK(t, get_eval_dataloader);
    return hook_error((f ? f : ct_trainer_default_get_eval_dataloader)(t, eval_set, out), "get_eval_dataloader");
}

ct_status ct_trainer_get_test_dataloader(ct_trainer *t, ct_dataset *test_set, ct_loader **out) {
    *out = NULL;
    ct_status (*f)(ct_trainer *, ct_dataset *, ct_loader **) = CT_TRAINER_HOOK(t, get_test_dataloader);
    return hook_error((f ? f : ct_trainer_default_get_test_dataloader)(t, test_set, out), "get_test_dataloader");
}

/* --- optimizer and scheduler ------------------------------------------------------------------------ */

ct_status ct_trainer_default_create_optimizer(ct_trainer *t) {
    if (t->optimizer) return CT_OK;
    ct_optim_config c;
    CT_TRY(ct_training_args_optim_config(&t->args, &c));
    /* the strategy's optimizer: with ZeRO-1, the state of this process's shard of the parameters only */
    return ct_dist_create_optimizer(&t->priv->dist, &c, &t->optimizer);
}

/* (false on a trainer whose init failed before the strategy was chosen: ct_trainer_free asks too) */
bool ct_trainer_uses_zero1(const ct_trainer *t) {
    return t->priv->dist.strategy && t->priv->dist.strategy->shards_optimizer;
}

ct_status ct_trainer_default_create_scheduler(ct_trainer *t, int64_t num_training_steps) {
    if (t->lr_scheduler) return CT_OK;
    ct_scheduler_config c;
    CT_TRY(ct_training_args_scheduler_config(&t->args, &c));
    return ct_scheduler_create(&c, t->args.learning_rate, num_training_steps, &t->lr_scheduler);
}

ct_status ct_trainer_default_create_optimizer_and_scheduler(ct_trainer *t, int64_t num_training_steps) {
    CT_TRY(ct_trainer_create_optimizer(t));
    return ct_trainer_create_scheduler(t, num_training_steps);
}

ct_status ct_trainer_create_optimizer(ct_trainer *t) {
    ct_status (*f)(ct_trainer *) = CT_TRAINER_HOOK(t, create_optimizer);
    CT_TRY(hook_error((f ? f : ct_trainer_default_create_optimizer)(t), "create_optimizer"));
    if (!t->optimizer) return ct_error(CT_ERR_STATE, "create_optimizer: the hook left no optimizer");
    return CT_OK;
}

ct_status ct_trainer_create_scheduler(ct_trainer *t, int64_t num_training_steps) {
    ct_status (*f)(ct_trainer *, int64_t) = CT_TRAINER_HOOK(t, create_scheduler);
    CT_TRY(hook_error((f ? f : ct_trainer_default_create_scheduler)(t, num_training_steps), "create_scheduler"));
    if (!t->lr_scheduler) return ct_error(CT_ERR_STATE, "create_scheduler: the hook left no scheduler");
    return CT_OK;
}

ct_status ct_trainer_create_optimizer_and_scheduler(ct_trainer *t, int64_t num_training_steps) {
    ct_status (*f)(ct_trainer *, int64_t) = CT_TRAINER_HOOK(t, create_optimizer_and_scheduler);
    if (!f) return ct_trainer_default_create_optimizer_and_scheduler(t, num_training_steps);
    CT_TRY(hook_error(f(t, num_training_steps), "create_optimizer_and_scheduler"));
    if (!t->optimizer || !t->lr_scheduler)
        return ct_error(CT_ERR_STATE, "create_optimizer_and_scheduler: the hook left no %s",
                        t->optimizer ? "scheduler" : "optimizer");
    return CT_OK;
}

/* --- one step ----------------------------------------------------------------------------------------- */

/* Evaluation batches end with padding rows (mask 0) on ranks whose shard ran out: the loss is taken
 * over the leading real rows only. */
ct_status ct_trainer_real_rows(const ct_batch *b, int64_t *n) {
    *n = b->valid;
    if (b->mask.data) {
        const uint8_t *m = b->mask.data;
        for (int64_t i = 0; i < b->rows; i++)
            if ((i < b->valid) != (m[i] != 0))
                return ct_error(CT_ERR_STATE, "batch %lld: padding rows are not at its end", (long long)b->index);
    }
    return CT_OK;
}

ct_status ct_trainer_default_compute_loss(ct_trainer *t, const ct_batch *b, ct_loss_value *loss, ct_tensor *outputs,
                                          ct_tensor *dloss) {
    CT_TRY(ct_model_forward(t->model, &b->features, outputs));
    int64_t n;
    CT_TRY(ct_trainer_real_rows(b, &n));
    ct_tensor out = ct_tensor_rows(outputs, 0, n), labels = ct_tensor_rows(&b->labels, 0, n);
    if (!dloss) return ct_loss_forward(t->loss, &out, &labels, loss);
    if (n != b->rows) return ct_error(CT_ERR_STATE, "a training batch has padding rows");
    /* One call, so that a loss that fuses them (cross-entropy) passes over the outputs once. */
    return ct_loss_forward_backward(t->loss, outputs, &b->labels, 1.0, dloss, loss);
}

ct_status ct_trainer_compute_loss(ct_trainer *t, const ct_batch *b, ct_loss_value *loss, ct_tensor *outputs,
                                  ct_tensor *dloss) {
    *loss = (ct_loss_value){0, 0};
    ct_status (*f)(ct_trainer *, const ct_batch *, ct_loss_value *, ct_tensor *, ct_tensor *) =
        CT_TRAINER_HOOK(t, compute_loss);
    return hook_error((f ? f : ct_trainer_default_compute_loss)(t, b, loss, outputs, dloss), "compute_loss");
}

/* The loss gradient's buffer is sized for per_device_train_batch_size rows. */
static ct_status check_train_rows(const ct_trainer *t, const ct_batch *b) {
    if (b->rows <= t->priv->dloss.shape[0]) return CT_OK;
    return ct_error(CT_ERR_SHAPE, "a batch of %lld rows exceeds per_device_train_batch_size %lld", (long long)b->rows,
                    (long long)t->priv->dloss.shape[0]);
}

ct_status ct_trainer_default_training_step(ct_trainer *t, const ct_batch *b, ct_loss_value *loss) {
    CT_TRY(check_train_rows(t, b));
    ct_tensor outputs, dl = ct_tensor_rows(&t->priv->dloss, 0, b->rows);
    CT_TRY(ct_trainer_compute_loss(t, b, loss, &outputs, &dl));
    /* fp16's loss scaling (HF's accelerator.backward(loss) multiplies the loss by the scale) */
    double scale = ct_trainer_loss_scale(t);
    if (scale != 1.0) ct_op_scale(&dl, scale);
    return ct_model_backward(t->model, &dl);
}

ct_status ct_trainer_training_step_acc(ct_trainer *t, const ct_batch *b, ct_tensor *stats) {
    CT_TRY(hook_error(check_train_rows(t, b), "training_step"));
    ct_tensor outputs, dl = ct_tensor_rows(&t->priv->dloss, 0, b->rows);
    int64_t n = 0;
    ct_status s = ct_model_forward(t->model, &b->features, &outputs);
    if (s == CT_OK) s = ct_trainer_real_rows(b, &n);
    if (s == CT_OK && n != b->rows) s = ct_error(CT_ERR_STATE, "a training batch has padding rows");
    if (s == CT_OK) s = ct_loss_forward_backward_acc(t->loss, &outputs, &b->labels, 1.0, &dl, stats);
    CT_TRY(hook_error(hook_error(s, "compute_loss"), "training_step"));
    return hook_error(ct_model_backward(t->model, &dl), "training_step");
}

ct_status ct_trainer_training_step(ct_trainer *t, const ct_batch *b, ct_loss_value *loss) {
    *loss = (ct_loss_value){0, 0};
    ct_status (*f)(ct_trainer *, const ct_batch *, ct_loss_value *) = CT_TRAINER_HOOK(t, training_step);
    return hook_error((f ? f : ct_trainer_default_training_step)(t, b, loss), "training_step");
}

ct_status ct_trainer_default_prediction_step(ct_trainer *t, const ct_batch *b, bool prediction_loss_only,
                                             ct_loss_value *loss, ct_tensor *outputs) {
    (void)prediction_loss_only;
    if (b->labels.data && b->labels.ndim > 0) return ct_trainer_compute_loss(t, b, loss, outputs, NULL);
    return ct_model_forward(t->model, &b->features, outputs);
}

ct_status ct_trainer_prediction_step(ct_trainer *t, const ct_batch *b, bool prediction_loss_only,
                                     ct_loss_value *loss, ct_tensor *outputs) {
    *loss = (ct_loss_value){0, 0};
    ct_status (*f)(ct_trainer *, const ct_batch *, bool, ct_loss_value *, ct_tensor *) = CT_TRAINER_HOOK(t, prediction_step);
    return hook_error((f ? f : ct_trainer_default_prediction_step)(t, b, prediction_loss_only, loss, outputs),
                      "prediction_step");
}

/* Hugging Face's PreTrainedModel.floating_point_ops: 6 x the parameters but the embeddings' x the
 * input's elements (its tokens, for a language model; every feature of a sample otherwise). */
double ct_trainer_default_floating_point_ops(ct_trainer *t, const ct_batch *b) {
    const ct_param_store *ps = &t->model->params;
    double weights = 0;
    for (int i = 0; i < ps->count; i++)
        if (!(ps->items[i].flags & (CT_PARAM_BUFFER | CT_PARAM_EMBEDDING))) weights += (double)ps->items[i].numel;
    int64_t rows = b->features.ndim > 0 ? b->features.shape[0] : 0;
    double per_row = rows > 0 ? (double)ct_tensor_numel(&b->features) / (double)rows : 0;
    return 6.0 * weights * per_row * (double)b->rows;
}

double ct_trainer_floating_point_ops(ct_trainer *t, const ct_batch *b) {
    double (*f)(ct_trainer *, const ct_batch *) = CT_TRAINER_HOOK(t, floating_point_ops);
    return (f ? f : ct_trainer_default_floating_point_ops)(t, b);
}

ct_callback_args ct_trainer_callback_args(ct_trainer *t) {
    return (ct_callback_args){.trainer = t, .args = &t->args, .state = &t->state, .control = &t->control,
                              .config = t->config};
}

/* --- logging ------------------------------------------------------------------------------------------ */

ct_status ct_trainer_default_log(ct_trainer *t, json_t *logs) {
    json_object_set_new(logs, "epoch", json_real(t->state.epoch));
    if (t->args.include_num_input_tokens_seen)
        json_object_set_new(logs, "num_input_tokens_seen", json_integer(t->state.num_input_tokens_seen));
    json_t *entry = json_deep_copy(logs);
    if (!entry || json_object_set_new(entry, "step", json_integer(t->state.global_step)) != 0) {
        json_decref(entry);
        return ct_error(CT_ERR_NOMEM, "out of memory");
    }
    ct_status s = ct_trainer_state_log(&t->state, entry);
    json_decref(entry);
    CT_TRY(s);
    ct_callback_args a = ct_trainer_callback_args(t);
    a.logs = logs;
    return ct_callbacks_fire(&t->callbacks, CT_ON_LOG, &a);
}

ct_status ct_trainer_log(ct_trainer *t, json_t *logs) {
    ct_status (*f)(ct_trainer *, json_t *) = CT_TRAINER_HOOK(t, log);
    ct_status s = hook_error((f ? f : ct_trainer_default_log)(t, logs), "log");
    json_decref(logs);
    return s;
}

/* --- construction ------------------------------------------------------------------------------------- */

static ct_status install_callbacks(ct_trainer *t) {
    ct_callback *cb;
    CT_TRY(ct_flow_callback_create(&cb));
    CT_TRY(ct_callback_list_add(&t->callbacks, cb));
    bool bar = !t->args.disable_tqdm && isatty(fileno(stderr));
    if (bar) CT_TRY(ct_progress_callback_create(stderr, &cb));
    else CT_TRY(ct_printer_callback_create(stdout, &cb));
    CT_TRY(ct_callback_list_add(&t->callbacks, cb));
    if (t->args.report_to & CT_REPORT_JSONL) {
        CT_TRY(ct_jsonl_callback_create("log.jsonl", &cb)); /* relative: inside output_dir */
        CT_TRY(ct_callback_list_add(&t->callbacks, cb));
    }
    if (t->args.report_to & CT_REPORT_TENSORBOARD) {
        CT_TRY(ct_tensorboard_callback_create(&cb)); /* logging_dir, or output_dir/runs/<date>_<host> */
        CT_TRY(ct_callback_list_add(&t->callbacks, cb));
    }
    return CT_OK;
}

/* 64-bit FNV-1a: a hash to compare configs across processes, not a cryptographic one. */
static uint64_t fnv1a(uint64_t h, const char *text) {
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
    return h;
}

/* Every process must run the same resolved arguments and config, or the collectives would pair up
 * mismatched buffers: compared before any work, with an error on every rank. */
static ct_status check_same_config(ct_trainer *t, const json_t *config) {
    json_t *a;
    CT_TRY(ct_training_args_to_json(&t->args, &a));
    char *at = json_dumps(a, JSON_SORT_KEYS | JSON_COMPACT);
    char *ct = config ? json_dumps(config, JSON_SORT_KEYS | JSON_COMPACT) : NULL;
    json_decref(a);
    uint64_t h = 0xcbf29ce484222325ull;
    if (at) h = fnv1a(h, at);
    if (ct) h = fnv1a(h, ct);
    free(at);
    free(ct);
    return ct_comm_check_same(t->comm, h, "the hash of the resolved run config and training arguments");
}

/* output_dir is written at the first log, save or result: one that exists and is not a directory is
 * refused now, not after training. A missing one is made by its first writer, which names itself
 * when that fails (a regular file on the way, no permission). */
static ct_status check_output_dir(const char *dir) {
    struct stat st;
    if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode))
        return ct_error(CT_ERR_IO, "training_args.output_dir: '%s' is %s, not a directory", dir,
                        S_ISREG(st.st_mode) ? "a regular file" : "another kind of file");
    return CT_OK;
}

/* HF's bf16, fp16 and tf32 on the model's device (HF refuses them where the hardware lacks them, so
 * does this), and the loss scaling of fp16 or of the setup. */
static ct_status init_precision(ct_trainer *t, const ct_trainer_setup *in) {
    t->priv->math = ct_training_args_math_mode(&t->args);
    ct_device d = t->model->params.device;
    ct_status s = ct_device_set_math_mode(d, t->priv->math);
    if (s != CT_OK)
        return ct_error_prefix(CT_ERR_CONFIG, "training_args.%s: ", t->args.fp16 ? "fp16" : t->args.bf16 ? "bf16" : "tf32");
    ct_device_set_math_mode(d, CT_MATH_F32);
    if (!in->grad_scaler && !t->args.fp16) return CT_OK;
    t->priv->scaler_opts = in->grad_scaler ? *in->grad_scaler : ct_grad_scaler_default_opts();
    CT_TRY(ct_grad_scaler_opts_check(&t->priv->scaler_opts));
    t->priv->scaling = true;
    return CT_OK;
}

/* An evaluation inside training begins and ends inside train's own scope: only the outermost sets. */
static _Thread_local int math_depth;

void ct_trainer_math_begin(const ct_trainer *t, ct_device d) {
    if (math_depth++ > 0 || t->priv->math == CT_MATH_F32) return;
    if (ct_device_set_math_mode(d, t->priv->math) != CT_OK) ct_device_set_math_mode(d, CT_MATH_F32);
}

void ct_trainer_math_end(const ct_trainer *t, ct_device d) {
    if (--math_depth == 0 && t->priv->math != CT_MATH_F32) ct_device_set_math_mode(d, CT_MATH_F32);
}

double ct_trainer_loss_scale(const ct_trainer *t) {
    return t->priv && t->priv->scaling ? t->priv->progress.scaler.scale : 1.0;
}

static ct_status init(ct_trainer *t, const ct_training_args *args, const ct_trainer_setup *in) {
    CT_TRY(ct_trainer_check_ops(t->ops));
    if (!in || !in->model) return ct_error(CT_ERR_INVALID_ARG, "trainer: no model");
    if (!args) return ct_error(CT_ERR_INVALID_ARG, "trainer: no training arguments (ct_training_args_default)");
    /* HF's memory report: set up as early as possible; init's numbers join the first stage's. */
    if (!args->skip_memory_metrics)
        CT_TRY(ct_memory_tracker_create(&(ct_memory_tracker_opts){.device = in->model->params.device},
                                        &t->priv->memory));
    ct_memory_tracker_start(t->priv->memory, CT_MEM_INIT);
    CT_TRY(ct_training_args_copy(&t->args, args));
    CT_TRY(ct_training_args_validate(&t->args));
    /* compute_metrics gets the whole set's outputs and labels, once: per-batch calls (HF's
     * batch_eval_metrics) and inputs or per-sample losses beside them (include_for_metrics) are not
     * implemented, and are refused rather than ignored. Without the hook both change nothing, as in
     * HF, where they only concern compute_metrics. */
    if (CT_TRAINER_HOOK(t, compute_metrics) && (t->args.batch_eval_metrics || t->args.include_for_metrics))
        return ct_error(CT_ERR_CONFIG, "training_args.%s: a compute_metrics hook receives the whole set's outputs "
                        "and labels once; %s is not supported with it",
                        t->args.batch_eval_metrics ? "batch_eval_metrics" : "include_for_metrics",
                        t->args.batch_eval_metrics ? "computing it batch by batch" : "passing inputs or losses");
    CT_TRY(check_output_dir(t->args.output_dir));
    if (in->comm) {
        t->comm = in->comm;
    } else {
        CT_TRY(ct_comm_create_default((double)t->args.ddp_timeout, &t->comm));
        t->priv->owns_comm = true;
    }
    t->rank = t->comm->rank;
    t->world_size = t->comm->world_size;
    /* HF's Trainer.__init__: logging.set_verbosity(args.get_process_log_level()), before any work. */
    ct_log_set_rank(t->rank, t->world_size);
    ct_log_set_level(ct_log_process_level(ct_trainer_should_log(t), (int)t->args.log_level,
                                          (int)t->args.log_level_replica));
    if (t->world_size > 1) CT_TRY(check_same_config(t, in->config));
    t->model = in->model;
    /* The distribution strategy, chosen once here. */
    ct_dist_setup ds = {.comm = t->comm, .model = t->model, .bucket_cap_mb = t->args.ddp_bucket_cap_mb};
    CT_TRY(ct_dist_init(&t->priv->dist, ct_dist_strategy_for(t->args.optimizer_sharding, t->world_size), &ds));
    CT_TRY(init_precision(t, in));
    if (in->loss) {
        t->loss = in->loss;
    } else {
        CT_TRY(ct_cross_entropy_loss_create(&(ct_cross_entropy_opts){.ignore_index = -100}, &t->loss));
        t->priv->owns_loss = true;
    }
    t->train_dataset = in->train_dataset;
    if (t->train_dataset) CT_TRY(ct_dataset_check(t->train_dataset));
    if (in->n_eval < 0 || in->n_eval > CT_TRAINER_MAX_EVAL_SETS)
        return ct_error(CT_ERR_INVALID_ARG, "trainer: %d evaluation sets (at most %d)", in->n_eval,
                        CT_TRAINER_MAX_EVAL_SETS);
    t->n_eval = in->n_eval;
    for (int i = 0; i < in->n_eval; i++) {
        t->eval_datasets[i] = in->eval_datasets[i];
        snprintf(t->eval_names[i], sizeof t->eval_names[i], "%s", in->eval_names[i] ? in->eval_names[i] : "");
        if (t->eval_datasets[i]) CT_TRY(ct_dataset_check(t->eval_datasets[i]));
        /* It would evaluate to nothing: no metrics, no log entry, and no word of why. */
        if (!t->eval_datasets[i] || ct_dataset_length(t->eval_datasets[i]) == 0)
            return ct_error(CT_ERR_FORMAT, "evaluation set%s%s%s: %s has no samples, so it would give no metrics",
                            t->eval_names[i][0] ? " '" : "", t->eval_names[i], t->eval_names[i][0] ? "'" : "",
                            t->eval_datasets[i] ? t->eval_datasets[i]->source : "(none)");
    }
    /* Hugging Face refuses this in Trainer.__init__; a trainer built only to evaluate or predict
     * (ctrainer evaluate with a training config) never reaches the strategy */
    if (t->train_dataset && (args->eval_strategy != CT_INTERVAL_NO || args->eval_on_start) && t->n_eval == 0)
        return ct_error(CT_ERR_CONFIG, "training_args.eval_strategy: is '%s' but no evaluation dataset was given; "
                        "give one, or set eval_strategy 'no'", ct_interval_name(args->eval_strategy));
    t->priv->test_dataset = in->test_dataset;
    if (t->priv->test_dataset) CT_TRY(ct_dataset_check(t->priv->test_dataset));
    t->config = in->config ? json_incref(in->config) : NULL;
    if (in->metrics && !(t->priv->metrics_spec = json_deep_copy(in->metrics)))
        return ct_error(CT_ERR_NOMEM, "out of memory");
    t->priv->make_metrics = in->make_metrics;
    t->priv->make_metrics_ctx = in->make_metrics_ctx;
    CT_TRY(ct_trainer_make_metrics(t, &t->metrics));
    t->priv->make_model = in->make_model;
    t->priv->make_model_ctx = in->make_model_ctx;
    CT_TRY(ct_trainer_check_setup(t));
    CT_TRY(ct_trainer_state_init(&t->state));
    t->state.is_world_process_zero = ct_trainer_is_world_process_zero(t);
    t->state.is_local_process_zero = ct_trainer_is_local_process_zero(t);
    int64_t dshape[CT_MAX_DIMS + 1];
    dshape[0] = t->args.per_device_train_batch_size;
    for (int i = 0; i < t->model->out_shape.ndim; i++) dshape[i + 1] = t->model->out_shape.dims[i];
    if (t->train_dataset)
        CT_TRY(ct_tensor_alloc(&t->priv->dloss, t->model->params.dtype, t->model->params.device,
                               t->model->out_shape.ndim + 1, dshape));
    CT_TRY(install_callbacks(t));
    while (in->callbacks && in->callbacks->n > 0) {
        ct_callback *cb = ct_callback_list_pop(in->callbacks, ct_callback_name(in->callbacks->items[0]));
        CT_TRY(ct_callback_list_add(&t->callbacks, cb));
    }
    ct_callback_args a = ct_trainer_callback_args(t);
    CT_TRY(ct_callbacks_fire(&t->callbacks, CT_ON_INIT_END, &a));
    return ct_memory_tracker_stop(t->priv->memory, CT_MEM_INIT, CT_OK, NULL);
}

ct_status ct_trainer_make_metrics(const ct_trainer *t, ct_metric_set *out) {
    ct_status s = ct_metric_set_from_json(t->priv->metrics_spec, "metrics", out);
    if (s == CT_OK && t->priv->make_metrics) {
        int before = out->n;
        s = t->priv->make_metrics(t->priv->make_metrics_ctx, out);
        if (s != CT_OK) s = ct_error_prefix(s, "make_metrics: ");
        else if (out->n == before)
            s = ct_error(CT_ERR_INVALID_ARG, "make_metrics: added no metric to the set (append yours with "
                         "ct_metric_set_add, or leave ct_trainer_setup.make_metrics NULL)");
    }
    if (s != CT_OK) ct_metric_set_free(out);
    return s;
}

ct_status ct_trainer_init(ct_trainer *t, const ct_trainer_ops *ops, const ct_training_args *args,
                          const ct_trainer_setup *in) {
    memset(t, 0, sizeof *t);
    /* a CT_CPU_ISA the CPU cannot honour is the user's mistake, not a reason to run another path */
    CT_TRY(ct_cpu_isa_check());
    CT_TRY(ct_num_threads_check()); /* before libgomp fails at the first parallel region */
    t->ops = ops;
    t->world_size = 1;
    if (!(t->priv = calloc(1, sizeof *t->priv))) return ct_error(CT_ERR_NOMEM, "trainer: out of memory");
    t->priv->saved_step = -1;
    ct_status s = init(t, args, in);
    if (s != CT_OK) ct_trainer_free(t);
    return s;
}

void ct_trainer_free(ct_trainer *t) {
    if (!t || !t->priv) return;
    ct_trainer_async_save_free(t);
    ct_step_stats_free(t);
    ct_dir_lock_release(t->priv->output_lock); /* after the writer's last commit */
    ct_callback_list_free(&t->callbacks);
    ct_optimizer_destroy(t->optimizer);
    ct_scheduler_destroy(t->lr_scheduler);
    ct_metric_set_free(&t->metrics);
    json_decref(t->priv->metrics_spec);
    ct_trainer_state_free(&t->state);
    if (t->priv->owns_loss) ct_loss_free(t->loss);
    ct_tensor_free(&t->priv->dloss);
    ct_trainer_free_device_batch(t);
    json_decref(t->config);
    ct_training_args_free(&t->args);
    if (t->priv->owns_comm) ct_comm_free(t->comm);
    ct_memory_tracker_free(t->priv->memory);
    ct_dist_free(&t->priv->dist);
    free(t->priv);
    const ct_trainer_ops *ops = t->ops;
    memset(t, 0, sizeof *t);
    t->ops = ops;
}

bool ct_trainer_is_world_process_zero(const ct_trainer *t) { return t->rank == 0; }
bool ct_trainer_is_local_process_zero(const ct_trainer *t) { return t->comm ? t->comm->local_rank == 0 : t->rank == 0; }
bool ct_trainer_should_log(const ct_trainer *t) {
    return ct_log_should_log(t->rank, t->comm ? t->comm->local_rank : t->rank, t->args.log_on_each_node);
}

/* Python's f"{n:,}": thousands separated by commas. */
static const char *with_commas(int64_t n, char buf[32]) {
    char digits[24];
    int len = snprintf(digits, sizeof digits, "%llu", (unsigned long long)(n < 0 ? -(uint64_t)n : (uint64_t)n));
    char *o = buf;
    if (n < 0) *o++ = '-';
    for (int i = 0; i < len; i++) {
        if (i > 0 && (len - i) % 3 == 0) *o++ = ',';
        *o++ = digits[i];
    }
    *o = 0;
    return buf;
}

void ct_trainer_log_run_summary(const ct_trainer *t, int64_t max_steps, int64_t epochs) {
    if (!ct_log_enabled(CT_LOG_LEVEL_INFO)) return;
    const ct_training_args *a = &t->args;
    char b[32];
    int64_t examples = t->train_dataset ? ct_dataset_length(t->train_dataset) : 0;
    int64_t total = a->per_device_train_batch_size * a->gradient_accumulation_steps * t->world_size;
    ct_log_info("***** Running training *****");
    ct_log_info("  Num examples = %s", with_commas(examples, b));
    ct_log_info("  Num Epochs = %s", with_commas(epochs, b));
    ct_log_info("  Instantaneous batch size per device = %s", with_commas(a->per_device_train_batch_size, b));
    ct_log_info("  Total train batch size (w. parallel, distributed & accumulation) = %s", with_commas(total, b));
    ct_log_info("  Gradient Accumulation steps = %lld", (long long)a->gradient_accumulation_steps);
    ct_log_info("  Total optimization steps = %s", with_commas(max_steps, b));
    ct_log_info("  Number of trainable parameters = %s", with_commas(ct_params_count(&t->model->params), b));
}

ct_status ct_trainer_add_callback(ct_trainer *t, ct_callback *cb) { return ct_callback_list_add(&t->callbacks, cb); }
ct_callback *ct_trainer_pop_callback(ct_trainer *t, const char *name) {
    return ct_callback_list_pop(&t->callbacks, name);
}
