/* The asynchronous evaluator (see async_eval.h): one thread, one replica, a waiting slot and a queue
 * of finished results, all under one mutex. The evaluator sees the trainer through a "shadow": a
 * ct_trainer value holding the replica, its own metric set and the evaluation sets, one process,
 * no callbacks and the default hooks, so the ordinary evaluation loop (evaluate.c) runs on it
 * unchanged and computes exactly what a synchronous evaluation of the same weights computes. */
#include "trainer/async_eval.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "callbacks/state.h"
#include "checkpoint/checkpoint_io.h"
#include "core/log.h"
#include "core/ops/ops.h"
#include "model/model_io.h"
#include "trainer/trainer_impl.h"

/* A snapshot handed over is its result-to-be: the weights, step and epoch are filled on the training
 * thread (nothing is allocated on the evaluator thread but the metrics), the rest by the evaluator. */
typedef struct result_node {
    ct_async_result *r;
    struct result_node *next;
} result_node;

struct ct_async_eval {
    ct_trainer *t;
    ct_trainer shadow; /* what the evaluation loop sees; never passed to ct_trainer_free */
    struct ct_trainer_private shadow_priv; /* its device batch buffers: nothing else is used */
    ct_model replica;
    bool replica_built, keep_outputs, skip_policy, wait_policy;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    result_node *waiting;       /* the next snapshot to evaluate */
    result_node *running;       /* the one being evaluated */
    bool stop;
    int64_t last_step;          /* step of the last accepted snapshot (-1: none) */
    result_node *head, *tail;   /* finished, oldest first */
    int n_ready;
    /* a handled result's weights' memory, for the next snapshot: pinned memory is slow to allocate */
    ct_tensor spare_values, spare_buffers;
    ct_device spare_device; /* whose pinned memory they are */
};

void ct_async_result_free(ct_async_result *r) {
    if (!r) return;
    json_decref(r->metrics);
    for (int i = 0; i < r->n_sets; i++) ct_prediction_output_free(&r->outputs[i]);
    if (r->has_copies) {
        (void)ct_host_copies_wait(&r->copies); /* nothing released under a copy still filling it */
        ct_host_copies_release(&r->copies, &r->values);
        ct_host_copies_release(&r->copies, &r->buffers);
        ct_host_copies_destroy(&r->copies);
    }
    free(r);
}

void ct_async_eval_recycle(ct_async_eval *e, ct_async_result *r) {
    if (e && r && r->has_copies && ct_host_copies_wait(&r->copies) == CT_OK) {
        pthread_mutex_lock(&e->mu);
        if (!e->spare_values.data) {
            e->spare_values = r->values;
            e->spare_buffers = r->buffers;
            e->spare_device = r->copies.device;
            r->values.data = r->buffers.data = NULL;
        }
        pthread_mutex_unlock(&e->mu);
    }
    ct_async_result_free(r);
}

static void node_free(result_node *n) {
    if (!n) return;
    ct_async_result_free(n->r);
    free(n);
}

/* r's host copies of the model's weights, taken without waiting for the device (the spare's memory
 * reused where it fits); the evaluator waits for them. */
static ct_status take_weights(ct_async_eval *e, ct_async_result *r) {
    const ct_param_store *ps = &e->t->model->params;
    CT_TRY(ct_host_copies_init(&r->copies, ps->values.device));
    r->has_copies = true;
    pthread_mutex_lock(&e->mu);
    ct_tensor spare_values = e->spare_values, spare_buffers = e->spare_buffers;
    e->spare_values.data = e->spare_buffers.data = NULL;
    pthread_mutex_unlock(&e->mu);
    ct_status s = ct_host_copies_take(&r->copies, &r->values, &ps->values, &spare_values);
    if (s == CT_OK) s = ct_host_copies_take(&r->copies, &r->buffers, &ps->buffers, &spare_buffers);
    ct_host_copies_release(&r->copies, &spare_values); /* what did not fit */
    ct_host_copies_release(&r->copies, &spare_buffers);
    return s;
}

/* The evaluation of one snapshot on the evaluator thread: load it into the replica, then every set. */
static void evaluate(ct_async_eval *e, ct_async_result *r) {
    ct_param_store *ps = &e->replica.params;
    ct_status s = ct_host_copies_wait(&r->copies);
    if (s == CT_OK) s = ct_tensor_copy_to(&ps->values, &r->values);
    if (s == CT_OK && r->buffers.data) s = ct_tensor_copy_to(&ps->buffers, &r->buffers);
    r->metrics = json_array();
    if (s == CT_OK && !r->metrics) s = ct_error(CT_ERR_NOMEM, "out of memory");
    const ct_trainer *t = e->t;
    for (int i = 0; s == CT_OK && i < t->n_eval; i++) {
        if (t->eval_names[i][0]) snprintf(r->prefixes[i], sizeof r->prefixes[i], "eval_%s", t->eval_names[i]);
        else snprintf(r->prefixes[i], sizeof r->prefixes[i], "eval");
        r->n_sets = i + 1;
        json_t *m = NULL;
        s = ct_trainer_evaluation_pass(&e->shadow, t->eval_datasets[i], r->prefixes[i],
                                       e->keep_outputs ? &r->outputs[i] : NULL, &m);
        if (s == CT_OK && json_array_append_new(r->metrics, m)) s = ct_error(CT_ERR_NOMEM, "out of memory");
        else if (s != CT_OK) json_decref(m);
    }
    r->status = s;
    if (s != CT_OK) snprintf(r->error, sizeof r->error, "%s", ct_last_error());
}

static void *evaluator_main(void *arg) {
    ct_async_eval *e = arg;
    /* As the training thread runs (ct_trainer_train), so the numbers equal a synchronous evaluation. */
    ct_set_flush_denormal(true);
    /* and with training's precision where the replica's device has it */
    ct_trainer_math_begin(e->t, e->replica.params.device);
    /* on a stream of its own, so that on the training GPU its work runs beside training's rather than
     * queued behind it (and its waits for results do not wait for training's kernels); on the shared
     * stream when the device cannot give one */
    void *stream = NULL;
    if (ct_device_stream_begin(e->replica.params.device, &stream) != CT_OK)
        ct_log_warning("asynchronous evaluation: on the device's shared stream (%s)", ct_last_error());
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->stop && !e->waiting) pthread_cond_wait(&e->cv, &e->mu);
        if (e->stop) break;
        result_node *node = e->waiting;
        e->waiting = NULL;
        e->running = node;
        pthread_cond_broadcast(&e->cv); /* the slot is free ("wait" policy) */
        pthread_mutex_unlock(&e->mu);
        evaluate(e, node->r);
        pthread_mutex_lock(&e->mu);
        if (e->tail) e->tail->next = node;
        else e->head = node;
        e->tail = node;
        e->n_ready++;
        e->running = NULL;
        pthread_cond_broadcast(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    ct_device_stream_end(e->replica.params.device, stream);
    ct_trainer_math_end(e->t, e->replica.params.device);
    return NULL;
}

/* The evaluator's view of the trainer: only what the evaluation loop reads. */
static void make_shadow(ct_async_eval *e, ct_metric_set metrics) {
    const ct_trainer *t = e->t;
    ct_trainer *s = &e->shadow;
    memset(s, 0, sizeof *s);
    memset(&e->shadow_priv, 0, sizeof e->shadow_priv);
    s->priv = &e->shadow_priv;
    s->args = t->args; /* shares lr_scheduler_kwargs, which the evaluation never reads */
    s->model = &e->replica;
    s->loss = t->loss;
    s->n_eval = t->n_eval;
    for (int i = 0; i < t->n_eval; i++) {
        s->eval_datasets[i] = t->eval_datasets[i];
        memcpy(s->eval_names[i], t->eval_names[i], sizeof s->eval_names[i]);
    }
    s->metrics = metrics;
    s->rank = 0;
    s->world_size = 1;
    ct_trainer_state_init(&s->state);
}

ct_status ct_async_eval_create(ct_trainer *t, ct_async_eval **out) {
    *out = NULL;
    if (!t->priv->make_model)
        return ct_error(CT_ERR_CONFIG, "training_args.eval_async: asynchronous evaluation needs a way to build a "
                        "model replica (ct_trainer_setup.make_model; run configs have one)");
    /* The evaluator's shadow trainer is not embedded in the application's struct, so its hooks (which
     * recover that struct with ct_container_of) cannot run there; left out, eval_loss would silently
     * be the default loss's instead of the override's. */
    const char *hook = CT_TRAINER_HOOK(t, compute_loss)          ? "compute_loss"
                       : CT_TRAINER_HOOK(t, prediction_step)     ? "prediction_step"
                       : CT_TRAINER_HOOK(t, get_eval_dataloader) ? "get_eval_dataloader"
                       : CT_TRAINER_HOOK(t, evaluate)            ? "evaluate"
                                                                 : NULL;
    if (hook)
        return ct_error(CT_ERR_CONFIG, "training_args.eval_async: the application overrides %s, which runs on the "
                        "training trainer and cannot run on the evaluator's replica; evaluate synchronously",
                        hook);
    if (t->n_eval == 0) return ct_error(CT_ERR_CONFIG, "training_args.eval_async: no evaluation dataset was given");
    /* "auto": the replica lives where the trained model does. */
    ct_device dev = t->model->params.device;
    if (strcmp(t->args.eval_device, "auto") != 0) CT_TRY(ct_device_parse(t->args.eval_device, &dev));
    ct_status usable = ct_device_check(dev);
    if (usable != CT_OK) return ct_error_prefix(usable, "training_args.eval_device: ");
    ct_async_eval *e = calloc(1, sizeof *e);
    if (!e) return ct_error(CT_ERR_NOMEM, "out of memory");
    e->t = t;
    e->last_step = -1;
    e->keep_outputs = CT_TRAINER_HOOK(t, compute_metrics) != NULL;
    e->skip_policy = strcmp(t->args.eval_async_policy, "skip") == 0;
    e->wait_policy = strcmp(t->args.eval_async_policy, "wait") == 0;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    ct_metric_set metrics = {0};
    ct_status s = t->priv->make_model(t->priv->make_model_ctx, t->args.per_device_eval_batch_size, dev, &e->replica);
    if (s != CT_OK) s = ct_error_prefix(s, "asynchronous evaluation: the model replica: ");
    e->replica_built = s == CT_OK;
    if (s == CT_OK && (ct_tensor_numel(&e->replica.params.values) != ct_tensor_numel(&t->model->params.values) ||
                       ct_tensor_numel(&e->replica.params.buffers) != ct_tensor_numel(&t->model->params.buffers)))
        s = ct_error(CT_ERR_STATE, "asynchronous evaluation: the replica's parameters are not laid out like the "
                     "trained model's (%lld vs %lld values)",
                     (long long)ct_tensor_numel(&e->replica.params.values),
                     (long long)ct_tensor_numel(&t->model->params.values));
    if (s == CT_OK) s = ct_trainer_make_metrics(t, &metrics);
    if (s == CT_OK) {
        make_shadow(e, metrics);
        ct_model_train(&e->replica, false);
        if (pthread_create(&e->thread, NULL, evaluator_main, e) != 0)
            s = ct_error(CT_ERR_STATE, "asynchronous evaluation: cannot start the evaluator thread");
        else
            e->thread_started = true;
    } else {
        ct_metric_set_free(&metrics);
    }
    if (s != CT_OK) {
        ct_async_eval_free(e);
        return s;
    }
    *out = e;
    return CT_OK;
}

void ct_async_eval_free(ct_async_eval *e) {
    if (!e) return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->mu);
        e->stop = true;
        node_free(e->waiting);
        e->waiting = NULL;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL); /* a running evaluation finishes first */
        ct_metric_set_free(&e->shadow.metrics);
        ct_trainer_state_free(&e->shadow.state);
        ct_trainer_free_device_batch(&e->shadow);
    }
    node_free(e->waiting);
    while (e->head) {
        result_node *n = e->head;
        e->head = n->next;
        node_free(n);
    }
    if (e->replica_built) ct_model_free(&e->replica);
    ct_host_copies spare = {.device = e->spare_device}; /* the model may be gone by now */
    ct_host_copies_release(&spare, &e->spare_values);
    ct_host_copies_release(&spare, &e->spare_buffers);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

/* Hands a snapshot of the model's weights now, evaluated as those of (step, epoch), to the evaluator.
 * wait: until the waiting slot is free, so that it replaces none ("wait" policy, and resumed
 * evaluations); else "latest" replaces a waiting snapshot. */
static ct_status submit(ct_async_eval *e, int64_t step, double epoch, bool wait) {
    /* The copy is taken on the training thread, before the weights change again. */
    result_node *node = calloc(1, sizeof *node);
    ct_async_result *r = node ? calloc(1, sizeof *r) : NULL;
    ct_status s = r ? CT_OK : ct_error(CT_ERR_NOMEM, "out of memory");
    if (node) node->r = r;
    if (s == CT_OK) {
        r->step = step;
        r->epoch = epoch;
        s = take_weights(e, r);
    }
    if (s != CT_OK) {
        node_free(node);
        return ct_error_prefix(s, "asynchronous evaluation: snapshot of step %lld: ", (long long)step);
    }
    pthread_mutex_lock(&e->mu);
    while (wait && e->waiting) pthread_cond_wait(&e->cv, &e->mu);
    result_node *replaced = e->waiting;
    e->waiting = node; /* the evaluator's from here */
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (replaced) {
        ct_log_info("asynchronous evaluation: the snapshot of step %lld replaces the waiting one of step %lld",
                    (long long)step, (long long)replaced->r->step);
        node_free(replaced);
    }
    e->last_step = step;
    return CT_OK;
}

ct_status ct_async_eval_submit(ct_async_eval *e, bool *accepted) {
    *accepted = false;
    int64_t step = e->t->state.global_step;
    /* The same weights twice (a step's end and the epoch's end that follows it): once is enough. */
    if (step == e->last_step) return CT_OK;
    pthread_mutex_lock(&e->mu);
    bool busy = e->running || e->waiting;
    pthread_mutex_unlock(&e->mu);
    if (e->skip_policy && busy) {
        ct_log_info("asynchronous evaluation: step %lld skipped (an evaluation is still running)", (long long)step);
        return CT_OK;
    }
    CT_TRY(submit(e, step, e->t->state.epoch, e->wait_policy));
    *accepted = true;
    return CT_OK;
}

/* r's weights as a pending evaluation, once their copies have landed (a checkpoint reads them); *s
 * keeps the first failure. */
static void add_pending(ct_pending_evals *out, const ct_async_result *r, ct_status *s) {
    out->items[out->n++] = (ct_pending_eval){.step = r->step, .epoch = r->epoch, .values = r->values,
                                             .buffers = r->buffers};
    ct_status w = r->has_copies ? ct_host_copies_wait(&r->copies) : CT_OK;
    if (*s == CT_OK) *s = w;
}

ct_status ct_async_eval_pending(ct_async_eval *e, ct_pending_evals *out) {
    *out = (ct_pending_evals){.last_step = e->last_step};
    pthread_mutex_lock(&e->mu);
    int n = e->n_ready + (e->running != NULL) + (e->waiting != NULL);
    out->items = n ? calloc((size_t)n, sizeof *out->items) : NULL;
    ct_status s = n && !out->items ? ct_error(CT_ERR_NOMEM, "asynchronous evaluation: out of memory") : CT_OK;
    if (out->items) {
        /* oldest first: finished, then running, then waiting */
        for (result_node *q = e->head; q; q = q->next) add_pending(out, q->r, &s);
        if (e->running) add_pending(out, e->running->r, &s);
        if (e->waiting) add_pending(out, e->waiting->r, &s);
    }
    pthread_mutex_unlock(&e->mu);
    return s;
}

ct_status ct_async_eval_resume(ct_async_eval *e, const ct_pending_evals *p) {
    ct_model *m = e->t->model;
    bool moved = false; /* the model holds another step's weights */
    ct_status s = CT_OK;
    for (int i = 0; s == CT_OK && i < p->n; i++) {
        const ct_pending_eval *q = &p->items[i];
        bool own = strcmp(q->file, p->model_file) == 0;
        if (!own || moved) s = ct_model_load_h5(m, q->file);
        moved = !own;
        if (s == CT_OK) s = submit(e, q->step, q->epoch, true);
        if (s != CT_OK) s = ct_error_prefix(s, "asynchronous evaluation of step %lld (not recorded in the checkpoint): ",
                                            (long long)q->step);
    }
    if (moved) {
        ct_status r = ct_model_load_h5(m, p->model_file);
        if (s == CT_OK) s = r;
    }
    if (s == CT_OK) {
        e->last_step = p->last_step;
        if (p->n) ct_log_info("asynchronous evaluation: %d evaluation(s) the checkpoint has no result of run again", p->n);
    }
    return s;
}

bool ct_async_eval_idle(ct_async_eval *e) {
    pthread_mutex_lock(&e->mu);
    bool idle = !e->running && !e->waiting;
    pthread_mutex_unlock(&e->mu);
    return idle;
}

int ct_async_eval_ready(ct_async_eval *e) {
    pthread_mutex_lock(&e->mu);
    int n = e->n_ready;
    pthread_mutex_unlock(&e->mu);
    return n;
}

ct_async_result *ct_async_eval_take(ct_async_eval *e) {
    pthread_mutex_lock(&e->mu);
    result_node *n = e->head;
    if (n) {
        e->head = n->next;
        if (!e->head) e->tail = NULL;
        e->n_ready--;
    }
    pthread_mutex_unlock(&e->mu);
    if (!n) return NULL;
    ct_async_result *r = n->r;
    free(n);
    return r;
}

void ct_async_eval_drain(ct_async_eval *e, bool drop_waiting) {
    pthread_mutex_lock(&e->mu);
    if (drop_waiting) {
        node_free(e->waiting);
        e->waiting = NULL;
    }
    while (e->running || e->waiting) pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
}

ct_status ct_async_save_model_checkpoint(ct_trainer *t, const ct_async_result *r, const char *dir) {
    if (t->rank != 0) return CT_OK;
    char tmp[4200], path[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", dir);
    ct_status s = ct_trainer_save_model_from(t, tmp, &r->values, r->buffers.data ? &r->buffers : NULL);
    snprintf(path, sizeof path, "%s/trainer_state.json", tmp);
    if (s == CT_OK) s = ct_trainer_store_callback_state(t);
    if (s == CT_OK) s = ct_trainer_state_save(&t->state, path);
    if (s == CT_OK) s = ct_checkpoint_write_manifest(tmp);
    if (s == CT_OK) s = ct_checkpoint_commit(tmp, dir);
    return s == CT_OK ? CT_OK : ct_error_prefix(s, "best model of step %lld: ", (long long)r->step);
}
