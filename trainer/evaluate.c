/* Evaluation and prediction: Hugging Face's evaluation_loop, evaluate() and predict().
 *
 * The loop runs prediction_step over an evaluation loader in eval mode and feeds every batch to the
 * metric set, whose states are sufficient statistics (eval/metric.h), so the numbers do not depend on
 * the batch size. Padding rows (mask 0) are skipped by the metrics and never copied into predictions;
 * predictions land at their samples' dataset indices, so they come out in dataset order. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/format/h5io.h"
#include "core/fs.h"
#include "core/ops/ops.h"
#include "data/hdf5_util.h"
#include "trainer/memory.h"
#include "trainer/trainer_impl.h"
#include "core/util.h"

typedef struct eval_run {
    ct_dataset *ds;
    bool test;                 /* use get_test_dataloader */
    ct_prediction_output *out; /* where outputs are kept (predict, or compute_metrics); NULL: none */
    ct_tensor sample_loss, sample_weight; /* per-row losses for the loss metric's standard error */
    ct_loss_value *row_values;            /* the loss's per-row values, per_device_eval_batch_size of them */
    double *token_buf;                    /* a batch's token values (nll, then hit) */
    int64_t token_cap;                    /* positions token_buf holds */
    int64_t *class_buf;                   /* a batch's class ranks (pred, then above), 2 per row */
    ct_batch full;                        /* a short batch padded to per_device_eval_batch_size rows */
    ct_tensor full_features, full_labels, full_mask;
    int64_t *full_indices;
    int64_t samples, steps;
    /* With several processes each keeps its own rows, in the order it saw them, with their dataset
     * indices; rank 0 gathers them into out (only it holds whole arrays). */
    ct_tensor own_out, own_labels, own_idx;
    int64_t own_rows;
    /* An asynchronous evaluation's pass (on the evaluator thread): no compute_metrics and nothing
     * shared between processes; the caller handles both on the training thread. */
    bool detached;
} eval_run;

/* Every evaluation forward runs on exactly per_device_eval_batch_size rows: BLAS picks its kernels
 * by the row count, and a short batch would round its outputs differently from the same rows inside
 * a full one, so a shard's last batch (whose size depends on the number of processes) would change
 * the numbers. A short batch is completed with copies of its first row, masked out. */
static const ct_batch *full_batch(eval_run *r, const ct_batch *b) {
    int64_t cap = r->full_features.shape[0], n = b->rows;
    if (n >= cap || n == 0) return b;
    size_t fb = ct_tensor_nbytes(&b->features) / (size_t)n, lb = ct_tensor_nbytes(&b->labels) / (size_t)n;
    char *f = r->full_features.data, *l = r->full_labels.data;
    uint8_t *m = r->full_mask.data;
    memcpy(f, b->features.data, fb * (size_t)n);
    memcpy(l, b->labels.data, lb * (size_t)n);
    memcpy(m, b->mask.data, (size_t)n);
    memcpy(r->full_indices, b->indices, sizeof(int64_t) * (size_t)n);
    for (int64_t i = n; i < cap; i++) {
        memcpy(f + fb * (size_t)i, b->features.data, fb);
        memcpy(l + lb * (size_t)i, b->labels.data, lb);
        m[i] = 0;
        r->full_indices[i] = b->indices[0];
    }
    r->full = *b;
    r->full.features = r->full_features;
    r->full.labels = r->full_labels;
    r->full.mask = r->full_mask;
    r->full.indices = r->full_indices;
    r->full.rows = cap;
    return &r->full;
}

static ct_status alloc_full_batch(ct_trainer *t, eval_run *r) {
    int64_t bs = t->args.per_device_eval_batch_size;
    CT_TRY(ct_dataset_alloc_batch(r->ds, bs, &r->full_features, &r->full_labels));
    CT_TRY(ct_tensor_alloc(&r->full_mask, CT_U8, CT_CPU, 1, &bs));
    r->full_indices = malloc(sizeof(int64_t) * (size_t)bs);
    return r->full_indices ? CT_OK : ct_error(CT_ERR_NOMEM, "out of memory");
}

static void free_full_batch(eval_run *r) {
    ct_tensor_free(&r->full_features);
    ct_tensor_free(&r->full_labels);
    ct_tensor_free(&r->full_mask);
    free(r->full_indices);
    r->full_indices = NULL;
}

/* Per-row (sum, count) of the trainer's loss over the real rows, for the loss metric's standard
 * error. from_rows (the default hooks): the rows give the batch's loss too (trainer/eval_loss.c).
 * Otherwise only with the default compute_loss (an override may weigh rows its own way), and only
 * when the rows add up to the loss prediction_step gave: the batch then has no per-row losses, and
 * the loss metric no standard error. */
static ct_status row_losses(ct_trainer *t, eval_run *r, const ct_batch *b, const ct_batch *db,
                            const ct_tensor *outputs, bool from_rows, ct_eval_batch *eb) {
    ct_loss_value *rows = r->row_values;
    if (from_rows) {
        CT_TRY(ct_eval_row_losses(t, b, db, outputs, eb->tokens, rows, &eb->loss));
    } else {
        if (CT_TRAINER_HOOK(t, compute_loss) || eb->loss.count <= 0) return CT_OK;
        ct_tensor o = ct_tensor_rows(outputs, 0, db->valid), y = ct_tensor_rows(&db->labels, 0, db->valid);
        /* one pass over the batch (on a GPU, one copy back rather than one per row) */
        if (db->valid > 0) CT_TRY(ct_loss_forward_rows(t->loss, &o, &y, rows));
        if (!ct_eval_rows_explain(rows, db->valid, eb->loss)) return CT_OK;
    }
    if (!r->sample_loss.data || eb->loss.count <= 0) return CT_OK;
    double *l = r->sample_loss.data, *w = r->sample_weight.data;
    for (int64_t i = 0; i < b->rows; i++) {
        l[i] = i < b->valid ? rows[i].sum : 0;
        w[i] = i < b->valid ? rows[i].count : 0;
    }
    r->sample_loss.shape[0] = r->sample_weight.shape[0] = b->rows;
    eb->sample_loss = &r->sample_loss;
    eb->sample_weight = &r->sample_weight;
    return CT_OK;
}

/* The batch's token values, computed where its outputs are, for the metrics that take them: the
 * language-model metrics then read 16 bytes per token rather than the logits (which a GPU keeps) and
 * share one pass over them. Only for outputs that are logits of the labels ([rows, ..., V] float and
 * [rows, ...] int on one device); otherwise the metrics read the outputs and name what does not fit.
 * *tv is set and *have true when computed (padding rows too: the metrics skip them by the mask). */
static ct_status token_values(ct_trainer *t, eval_run *r, const ct_batch *db, const ct_tensor *outputs,
                              ct_token_values *tv, bool *have) {
    *have = false;
    if (!ct_metric_set_takes_token_values(&t->metrics)) return CT_OK;
    const ct_tensor *o = outputs, *l = &db->labels;
    bool fits = l->data && o->ndim >= 2 && l->ndim == o->ndim - 1 && l->shape[0] == o->shape[0] &&
                (o->dtype == CT_F32 || o->dtype == CT_F64) && (l->dtype == CT_I64 || l->dtype == CT_I32) &&
                o->shape[o->ndim - 1] > 0 && ct_device_eq(o->device, l->device);
    for (int d = 1; fits && d < l->ndim; d++)
        fits = l->shape[d] == o->shape[d];
    if (!fits) return CT_OK;
    int64_t n = ct_tensor_numel(l);
    if (n > r->token_cap) {
        double *grown = realloc(r->token_buf, 2 * (size_t)n * sizeof *grown);
        if (!grown) return ct_error(CT_ERR_NOMEM, "evaluation: out of memory for %lld token values", (long long)n);
        r->token_buf = grown;
        r->token_cap = n;
    }
    if (n > 0) ct_op_token_values(o, l, r->token_buf, r->token_buf + n);
    *tv = (ct_token_values){.nll = r->token_buf, .hit = r->token_buf + n, .ndim = o->ndim};
    memcpy(tv->shape, o->shape, sizeof tv->shape);
    *have = true;
    return CT_OK;
}

/* The batch's class ranks, computed where its outputs are, for the classification metrics: they then
 * share one pass over the scores and read 8 bytes per row rather than the scores (which a GPU
 * keeps). Only for class scores of the labels ([rows, C] float and [rows] int on one device);
 * otherwise the metrics read the outputs and name what does not fit. *cv is set and *have true when
 * computed (padding rows too: the metrics skip them by the mask). */
static ct_status class_values(ct_trainer *t, eval_run *r, const ct_batch *db, const ct_tensor *outputs,
                              ct_class_values *cv, bool *have) {
    *have = false;
    if (!ct_metric_set_takes_class_values(&t->metrics)) return CT_OK;
    const ct_tensor *o = outputs, *l = &db->labels;
    bool fits = l->data && o->ndim == 2 && l->ndim == 1 && l->shape[0] == o->shape[0] &&
                o->shape[0] <= t->args.per_device_eval_batch_size && (o->dtype == CT_F32 || o->dtype == CT_F64) &&
                (l->dtype == CT_I64 || l->dtype == CT_I32) && o->shape[1] > 0 && o->shape[1] <= INT32_MAX &&
                ct_device_eq(o->device, l->device);
    if (!fits) return CT_OK;
    int64_t n = o->shape[0];
    if (n > 0) ct_op_class_ranks(o, l, r->class_buf, r->class_buf + n);
    *cv = (ct_class_values){.pred = r->class_buf, .above = r->class_buf + n, .rows = n, .classes = o->shape[1]};
    *have = true;
    return CT_OK;
}

static size_t row_bytes(const ct_tensor *t) {
    return t->ndim > 0 && t->shape[0] > 0 ? ct_tensor_nbytes(t) / (size_t)t->shape[0] : 0;
}

/* dst row `at` = src row i (same row size). */
static void copy_row(ct_tensor *dst, int64_t at, const ct_tensor *src, int64_t i, size_t bytes) {
    memcpy((char *)dst->data + (size_t)at * bytes, (const char *)src->data + (size_t)i * bytes, bytes);
}

/* One process: the real rows of a batch go straight to their dataset indices in the output arrays. */
static void place_rows(ct_prediction_output *p, const ct_batch *b, const ct_tensor *outputs) {
    size_t orow = row_bytes(outputs), lrow = p->label_ids.data ? row_bytes(&b->labels) : 0;
    const uint8_t *mask = b->mask.data;
    for (int64_t i = 0; i < b->rows; i++) {
        if (mask && !mask[i]) continue;
        copy_row(&p->predictions, b->indices[i], outputs, i, orow);
        if (lrow) copy_row(&p->label_ids, b->indices[i], &b->labels, i, lrow);
    }
}

/* Makes room for `need` own rows: a new tensor like t with rows doubled, the first `used` copied. */
static ct_status grow_rows(ct_tensor *t, int64_t used, int64_t need) {
    if (t->shape[0] >= need) return CT_OK;
    int64_t shape[CT_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[0] = need > 2 * t->shape[0] ? need : 2 * t->shape[0];
    ct_tensor bigger;
    CT_TRY(ct_tensor_alloc(&bigger, t->dtype, CT_CPU, t->ndim, shape));
    if (used > 0) memcpy(bigger.data, t->data, (size_t)used * row_bytes(t));
    ct_tensor_free(t);
    *t = bigger;
    return CT_OK;
}

/* Several processes: the real rows of a batch are appended to this process's own rows. */
static ct_status keep_own_rows(eval_run *r, const ct_batch *b, const ct_tensor *outputs) {
    int64_t need = r->own_rows + b->valid;
    CT_TRY(grow_rows(&r->own_out, r->own_rows, need));
    CT_TRY(grow_rows(&r->own_idx, r->own_rows, need));
    if (r->own_labels.data) CT_TRY(grow_rows(&r->own_labels, r->own_rows, need));
    size_t orow = row_bytes(outputs), lrow = r->own_labels.data ? row_bytes(&b->labels) : 0;
    const uint8_t *mask = b->mask.data;
    for (int64_t i = 0; i < b->rows; i++) {
        if (mask && !mask[i]) continue;
        copy_row(&r->own_out, r->own_rows, outputs, i, orow);
        if (lrow) copy_row(&r->own_labels, r->own_rows, &b->labels, i, lrow);
        ((int64_t *)r->own_idx.data)[r->own_rows++] = b->indices[i];
    }
    return CT_OK;
}

static void free_own_rows(eval_run *r) {
    ct_tensor_free(&r->own_out);
    ct_tensor_free(&r->own_labels);
    ct_tensor_free(&r->own_idx);
}

/* The output arrays: [n, ...] for every sample of the set on the process that assembles them (the
 * only one, or rank 0); empty ([0, ...]) elsewhere, where own rows of about n / W start instead. */
static ct_status alloc_outputs(ct_trainer *t, eval_run *r) {
    ct_prediction_output *p = r->out;
    int64_t n = ct_dataset_length(r->ds), shape[CT_MAX_DIMS + 1], lshape[CT_MAX_DIMS + 1];
    const ct_shape *o = &t->model->out_shape;
    const ct_sample_spec *spec = &r->ds->spec;
    for (int i = 0; i < o->ndim; i++) shape[i + 1] = o->dims[i];
    for (int i = 0; i < spec->label_shape.ndim; i++) lshape[i + 1] = spec->label_shape.dims[i];
    ct_dtype dt = t->model->params.dtype;
    int ndim = o->ndim + 1, lndim = spec->label_shape.ndim + 1;
    if (t->world_size > 1) {
        shape[0] = lshape[0] = (n + t->world_size - 1) / t->world_size;
        CT_TRY(ct_tensor_alloc(&r->own_out, dt, CT_CPU, ndim, shape));
        CT_TRY(ct_tensor_alloc(&r->own_labels, spec->label_dtype, CT_CPU, lndim, lshape));
        CT_TRY(ct_tensor_alloc(&r->own_idx, CT_I64, CT_CPU, 1, shape));
    }
    shape[0] = lshape[0] = t->rank == 0 ? n : 0;
    if (t->rank != 0) {
        p->predictions = ct_tensor_view(NULL, dt, CT_CPU, ndim, shape);
        p->label_ids = ct_tensor_view(NULL, spec->label_dtype, CT_CPU, lndim, lshape);
        return CT_OK;
    }
    CT_TRY(ct_tensor_alloc(&p->predictions, dt, CT_CPU, ndim, shape));
    return ct_tensor_alloc(&p->label_ids, spec->label_dtype, CT_CPU, lndim, lshape);
}

/* The first `rows` rows of t as one flat 1-D tensor. */
static ct_tensor first_rows_flat(const ct_tensor *t, int64_t rows) {
    int64_t numel = rows * (int64_t)(row_bytes(t) / ct_dtype_size(t->dtype));
    return ct_tensor_view(t->data, t->dtype, CT_CPU, 1, &numel);
}

/* Rank 0 receives every process's own rows (variable counts) and puts each at its dataset index;
 * a sample that arrives twice, or not at all, is an error: it would be counted wrongly. */
static ct_status gather_outputs(ct_trainer *t, eval_run *r) {
    ct_prediction_output *p = r->out;
    ct_tensor o = first_rows_flat(&r->own_out, r->own_rows), l = first_rows_flat(&r->own_labels, r->own_rows),
              i = first_rows_flat(&r->own_idx, r->own_rows);
    ct_tensor go = {0}, gl = {0}, gi = {0};
    ct_comm_set_label(t->comm, "evaluation outputs to rank 0");
    ct_status s = ct_comm_gather_v(t->comm, &o, 0, &go);
    if (s == CT_OK) ct_comm_set_label(t->comm, "evaluation labels to rank 0");
    if (s == CT_OK) s = ct_comm_gather_v(t->comm, &l, 0, &gl);
    if (s == CT_OK) ct_comm_set_label(t->comm, "evaluation sample indices to rank 0");
    if (s == CT_OK) s = ct_comm_gather_v(t->comm, &i, 0, &gi);
    if (s == CT_OK && t->rank == 0) {
        int64_t n = p->predictions.shape[0], got = ct_tensor_numel(&gi);
        size_t orow = row_bytes(&p->predictions), lrow = row_bytes(&p->label_ids);
        uint8_t *seen = calloc((size_t)(n ? n : 1), 1);
        const int64_t *idx = gi.data;
        if (!seen) s = ct_error(CT_ERR_NOMEM, "out of memory");
        for (int64_t k = 0; s == CT_OK && k < got; k++) {
            int64_t at = idx[k];
            if (at < 0 || at >= n || seen[at])
                s = ct_error(CT_ERR_STATE, "evaluation: sample %lld %s", (long long)at,
                             at < 0 || at >= n ? "is outside the dataset" : "came from two processes");
            else {
                seen[at] = 1;
                copy_row(&p->predictions, at, &go, k, orow);
                copy_row(&p->label_ids, at, &gl, k, lrow);
            }
        }
        if (s == CT_OK && got != n)
            s = ct_error(CT_ERR_STATE, "evaluation: the processes evaluated %lld of the %lld samples",
                         (long long)got, (long long)n);
        free(seen);
    }
    ct_tensor_free(&go);
    ct_tensor_free(&gl);
    ct_tensor_free(&gi);
    return s;
}

static ct_status run_batches(ct_trainer *t, eval_run *r, ct_loader *loader) {
    CT_TRY(ct_loader_start_epoch(loader, 0));
    ct_metric_set_reset(&t->metrics);
    for (;;) {
        ct_batch *next;
        CT_TRY(ct_loader_next(loader, &next));
        if (!next) break;
        if (next->rows == 0) continue;
        /* b on the host, db its copy on the model's device (b itself on the CPU): the step runs on
         * db; the metrics and kept predictions read b's labels and a host copy of the outputs. */
        const ct_batch *b = full_batch(r, next), *db;
        CT_TRY(ct_trainer_prepare_inputs(t, b, &db));
        ct_loss_value loss = {0, 0};
        ct_tensor outputs, host_outputs = {0};
        bool from_rows = ct_eval_loss_from_rows(t, db);
        if (from_rows)
            CT_TRY(ct_eval_forward(t, db, &outputs));
        else
            CT_TRY(ct_trainer_prediction_step(t, db, false, &loss, &outputs));
        /* outputs on a device come back only when something reads them (a metric that takes no
         * token values, kept predictions) */
        ct_token_values tv;
        ct_class_values cv;
        bool tokens, classes;
        CT_TRY(token_values(t, r, db, &outputs, &tv, &tokens));
        CT_TRY(class_values(t, r, db, &outputs, &cv, &classes));
        bool read = outputs.device.kind == CT_DEVICE_CPU || r->out || ct_metric_set_reads_outputs(&t->metrics) ||
                    (ct_metric_set_takes_token_values(&t->metrics) && !tokens) ||
                    (ct_metric_set_takes_class_values(&t->metrics) && !classes);
        if (read) CT_TRY(ct_trainer_outputs_to_host(t, &outputs, &host_outputs));
        ct_eval_batch eb = {.outputs = read ? &host_outputs : NULL, .labels = &b->labels, .mask = &b->mask,
                            .loss = loss, .tokens = tokens ? &tv : NULL, .classes = classes ? &cv : NULL};
        CT_TRY(row_losses(t, r, b, db, &outputs, from_rows, &eb));
        CT_TRY(ct_metric_set_update(&t->metrics, &eb));
        if (r->out && t->world_size > 1) CT_TRY(keep_own_rows(r, b, &host_outputs));
        else if (r->out) place_rows(r->out, b, &host_outputs);
        r->samples += b->valid;
        r->steps++;
        ct_callback_args a = ct_trainer_callback_args(t);
        CT_TRY(ct_callbacks_fire(&t->callbacks, CT_ON_PREDICTION_STEP, &a));
    }
    return CT_OK;
}

/* Each process evaluated its shard: metric states are all-reduced (records gathered to rank 0 in
 * dataset order), and kept outputs gathered to rank 0. */
static ct_status reduce_across_processes(ct_trainer *t, eval_run *r) {
    if (t->world_size <= 1) return CT_OK;
    CT_TRY(ct_metric_set_reduce(&t->metrics, t->comm, 0));
    ct_comm_set_label(t->comm, "evaluation sample count");
    CT_TRY(ct_comm_all_reduce_i64(t->comm, &r->samples, 1, CT_SUM));
    return r->out ? gather_outputs(t, r) : CT_OK;
}

static ct_status run_loop(ct_trainer *t, eval_run *r, ct_loader *loader, double *runtime) {
    if (r->out) CT_TRY(alloc_outputs(t, r));
    int64_t bs[1] = {t->args.per_device_eval_batch_size};
    CT_TRY(alloc_full_batch(t, r));
    CT_TRY(ct_tensor_alloc(&r->sample_loss, CT_F64, CT_CPU, 1, bs));
    CT_TRY(ct_tensor_alloc(&r->sample_weight, CT_F64, CT_CPU, 1, bs));
    r->row_values = malloc((size_t)bs[0] * sizeof *r->row_values);
    if (!r->row_values) return ct_error(CT_ERR_NOMEM, "evaluation: out of memory for per-row losses");
    r->class_buf = malloc(2 * (size_t)bs[0] * sizeof *r->class_buf);
    if (!r->class_buf) return ct_error(CT_ERR_NOMEM, "evaluation: out of memory for per-row class ranks");
    bool was_training = t->model->root->training;
    ct_model_train(t->model, false);
    double t0 = ct_monotonic_seconds();
    ct_status s = run_batches(t, r, loader);
    if (s == CT_OK) s = reduce_across_processes(t, r);
    *runtime = ct_monotonic_seconds() - t0;
    ct_model_train(t->model, was_training);
    return s;
}

/* The metrics of a finished pass: the metric set's values and their uncertainty, compute_metrics'
 * values, and the speed metrics. */
static ct_status finish_metrics(ct_trainer *t, eval_run *r, const char *prefix, double runtime, json_t *m) {
    /* With several processes only rank 0 holds the gathered records: it computes, the others
     * receive its numbers (share_metrics). */
    if (t->rank != 0) return CT_OK;
    CT_TRY(ct_metric_set_compute(&t->metrics, prefix, m));
    ct_uncertainty_config u = {.resamples = t->args.eval_bootstrap_resamples,
                               .confidence = t->args.eval_confidence_level,
                               .seed = (uint64_t)t->args.seed};
    CT_TRY(ct_metric_set_uncertainty(&t->metrics, &u, prefix, m));
    if (t->args.prediction_loss_only) {
        /* HF's prediction_loss_only: the loss (here with its uncertainty) and nothing else */
        char loss[128];
        int n = snprintf(loss, sizeof loss, "%s_loss", prefix);
        const char *k;
        json_t *v;
        void *tmp;
        json_object_foreach_safe(m, tmp, k, v) {
            if (strncmp(k, loss, (size_t)n) != 0) json_object_del(m, k);
        }
    } else if (!r->detached) {
        CT_TRY(ct_trainer_call_compute_metrics(t, r->out, prefix, m));
    }
    double total_batch = (double)(t->args.per_device_eval_batch_size * t->world_size);
    ct_trainer_speed_metrics(m, prefix, runtime, (double)r->samples, ceil((double)r->samples / total_batch));
    return CT_OK;
}

ct_status ct_trainer_call_compute_metrics(ct_trainer *t, const ct_prediction_output *p, const char *prefix,
                                         json_t *metrics) {
    ct_status (*cm)(ct_trainer *, const ct_prediction_output *, const char *, json_t *) =
        CT_TRAINER_HOOK(t, compute_metrics);
    if (!cm) return CT_OK;
    ct_status s = cm(t, p, prefix, metrics);
    return s == CT_OK ? CT_OK : ct_error_prefix(s, "compute_metrics: ");
}

/* One pass over r->ds: metrics (with speed metrics) into a new object *metrics. */
static ct_status evaluation_loop(ct_trainer *t, eval_run *r, const char *prefix, json_t **metrics) {
    *metrics = NULL;
    CT_TRY(ct_trainer_check_dataset(t, r->ds, r->test ? "test_dataset" : "eval_dataset"));
    ct_loader *loader;
    CT_TRY(r->test ? ct_trainer_get_test_dataloader(t, r->ds, &loader) : ct_trainer_get_eval_dataloader(t, r->ds, &loader));
    /* compute_metrics sees every output: keep them even when the caller does not want them. */
    ct_prediction_output kept = {0};
    bool keep_for_hook = !r->out && CT_TRAINER_HOOK(t, compute_metrics) && !t->args.prediction_loss_only;
    if (keep_for_hook) r->out = &kept;
    double runtime = 0;
    ct_status s = run_loop(t, r, loader, &runtime);
    /* Seq2SeqTrainer: the generated continuations join the kept outputs; their time counts. */
    if (s == CT_OK && r->out && !r->detached && t->args.predict_with_generate) {
        double t0 = ct_monotonic_seconds();
        s = ct_trainer_generate_outputs(t, r->ds, &r->out->generated);
        runtime += ct_monotonic_seconds() - t0;
    }
    ct_loader_free(loader);
    ct_tensor_free(&r->sample_loss);
    free(r->row_values);
    r->row_values = NULL;
    free(r->token_buf);
    r->token_buf = NULL;
    r->token_cap = 0;
    free(r->class_buf);
    r->class_buf = NULL;
    ct_tensor_free(&r->sample_weight);
    free_full_batch(r);
    free_own_rows(r);
    json_t *m = s == CT_OK ? json_object() : NULL;
    if (s == CT_OK && !m) s = ct_error(CT_ERR_NOMEM, "out of memory");
    if (s == CT_OK) s = finish_metrics(t, r, prefix, runtime, m);
    if (s == CT_OK && !r->detached) s = ct_trainer_share_json(t, &m);
    if (keep_for_hook) {
        ct_prediction_output_free(&kept);
        r->out = NULL;
    }
    if (s != CT_OK) {
        json_decref(m);
        return s;
    }
    *metrics = m;
    return CT_OK;
}

ct_status ct_trainer_evaluation_pass(ct_trainer *t, ct_dataset *ds, const char *prefix, ct_prediction_output *keep,
                                    json_t **metrics) {
    eval_run r = {.ds = ds, .out = keep, .detached = true};
    return evaluation_loop(t, &r, prefix, metrics);
}

/* Evaluates one set, logs the metrics and fires on_evaluate. */
static ct_status evaluate_one(ct_trainer *t, ct_dataset *ds, const char *prefix, json_t *all) {
    eval_run r = {.ds = ds};
    json_t *m;
    CT_TRY(evaluation_loop(t, &r, prefix, &m));
    json_object_update(all, m);
    ct_status s = ct_trainer_log(t, json_deep_copy(m));
    if (s == CT_OK) {
        ct_callback_args a = ct_trainer_callback_args(t);
        a.metrics = m;
        s = ct_callbacks_fire(&t->callbacks, CT_ON_EVALUATE, &a);
    }
    json_decref(m);
    return s;
}

ct_status ct_trainer_default_evaluate(ct_trainer *t, ct_dataset *eval_set, const char *metric_key_prefix,
                                      json_t **metrics) {
    const char *prefix = metric_key_prefix ? metric_key_prefix : "eval";
    json_t *all = json_object();
    if (!all) return ct_error(CT_ERR_NOMEM, "out of memory");
    ct_status s = CT_OK;
    if (eval_set) {
        s = evaluate_one(t, eval_set, prefix, all);
    } else if (t->n_eval == 0) {
        s = ct_error(CT_ERR_STATE, "no evaluation dataset was given");
    } else {
        for (int i = 0; i < t->n_eval && s == CT_OK; i++) {
            char p[128];
            if (t->eval_names[i][0]) snprintf(p, sizeof p, "%s_%s", prefix, t->eval_names[i]);
            else snprintf(p, sizeof p, "%s", prefix);
            s = evaluate_one(t, t->eval_datasets[i], p, all);
        }
    }
    if (s != CT_OK) {
        json_decref(all);
        return s;
    }
    *metrics = all;
    return CT_OK;
}

ct_status ct_trainer_evaluate(ct_trainer *t, ct_dataset *eval_set, const char *metric_key_prefix, json_t **metrics) {
    *metrics = NULL;
    ct_status (*f)(ct_trainer *, ct_dataset *, const char *, json_t **) = CT_TRAINER_HOOK(t, evaluate);
    ct_memory_tracker_start(t->priv->memory, CT_MEM_EVAL);
    ct_trainer_math_begin(t, t->model->params.device);
    ct_status s = (f ? f : ct_trainer_default_evaluate)(t, eval_set, metric_key_prefix, metrics);
    ct_trainer_math_end(t, t->model->params.device);
    s = ct_memory_tracker_stop(t->priv->memory, CT_MEM_EVAL, s, *metrics); /* HF's memory report, after the log */
    if (s != CT_OK) return ct_error_prefix(s, "evaluate: ");
    if (!*metrics) return ct_error(CT_ERR_STATE, "evaluate: the hook returned no metrics");
    return CT_OK;
}

ct_status ct_trainer_default_predict(ct_trainer *t, ct_dataset *test_set, const char *metric_key_prefix,
                                     ct_prediction_output *out) {
    if (!test_set) return ct_error(CT_ERR_STATE, "no test dataset was given");
    eval_run r = {.ds = test_set, .test = true, .out = out};
    CT_TRY(evaluation_loop(t, &r, metric_key_prefix ? metric_key_prefix : "test", &out->metrics));
    ct_callback_args a = ct_trainer_callback_args(t);
    a.metrics = out->metrics;
    return ct_callbacks_fire(&t->callbacks, CT_ON_PREDICT, &a);
}

ct_status ct_trainer_predict(ct_trainer *t, ct_dataset *test_set, const char *metric_key_prefix,
                             ct_prediction_output *out) {
    memset(out, 0, sizeof *out);
    ct_status (*f)(ct_trainer *, ct_dataset *, const char *, ct_prediction_output *) = CT_TRAINER_HOOK(t, predict);
    ct_memory_tracker_start(t->priv->memory, CT_MEM_TEST);
    ct_trainer_math_begin(t, t->model->params.device);
    ct_status s = (f ? f : ct_trainer_default_predict)(t, test_set, metric_key_prefix, out);
    ct_trainer_math_end(t, t->model->params.device);
    s = ct_memory_tracker_stop(t->priv->memory, CT_MEM_TEST, s, out->metrics); /* HF's memory report */
    if (s != CT_OK) {
        ct_prediction_output_free(out);
        return ct_error_prefix(s, "predict: ");
    }
    return CT_OK;
}

void ct_prediction_output_free(ct_prediction_output *p) {
    ct_tensor_free(&p->predictions);
    ct_tensor_free(&p->label_ids);
    ct_tensor_free(&p->generated);
    json_decref(p->metrics);
    memset(p, 0, sizeof *p);
}

/* Writes /logits, /predictions (argmax of the last dimension) and /labels. */
ct_status ct_prediction_output_save_h5(const ct_prediction_output *p, const char *file) {
    const ct_tensor *logits = &p->predictions;
    if (logits->dtype != CT_F32 || logits->ndim < 2)
        return ct_error(CT_ERR_DTYPE, "save predictions: logits must be float32 [N, ..., C]");
    int64_t c = logits->shape[logits->ndim - 1], rows = ct_tensor_numel(logits) / (c ? c : 1);
    int64_t pshape[CT_MAX_DIMS];
    for (int i = 0; i < logits->ndim - 1; i++) pshape[i] = logits->shape[i];
    ct_tensor pred = {0};
    CT_TRY(ct_tensor_alloc(&pred, CT_I64, CT_CPU, logits->ndim - 1, pshape));
    /* the metrics' argmax over a [rows, C] view: a NaN logit is the prediction, as torch.argmax */
    ct_tensor rows_view = *logits;
    rows_view.ndim = 2;
    rows_view.shape[0] = rows;
    rows_view.shape[1] = c;
    int64_t *y = pred.data;
    for (int64_t r = 0; r < rows; r++) y[r] = ct_metric_argmax(&rows_view, r);
    /* core/fs.h's durable atomic write: HDF5 writes the temporary by name, then it is committed */
    ct_atomic_file af;
    ct_status s = ct_atomic_file_open(&af, file);
    if (s == CT_OK && (s = ct_atomic_file_close_fd(&af)) != CT_OK) ct_atomic_file_discard(&af);
    if (s != CT_OK) {
        ct_tensor_free(&pred);
        return s;
    }
    ct_h5_lock();
    ct_h5_quiet();
    hid_t f;
    char why[512];
    s = ct_h5_file_create(af.tmp, &f);
    if (s == CT_OK) s = ct_h5_write_tensor(f, "logits", logits);
    if (s == CT_OK) s = ct_h5_write_tensor(f, "predictions", &pred);
    if (s == CT_OK && p->label_ids.data) s = ct_h5_write_tensor(f, "labels", &p->label_ids);
    if (s == CT_OK && p->generated.data) s = ct_h5_write_tensor(f, "generated", &p->generated);
    /* HDF5 writes out what it buffered at the close: a failed close is a file not whole */
    if (f >= 0 && H5Fclose(f) < 0 && s == CT_OK)
        s = ct_error(CT_ERR_IO, "cannot write '%s': %s", af.tmp, ct_h5_error_detail(why, sizeof why));
    ct_h5_unlock();
    ct_tensor_free(&pred);
    if (s == CT_OK) s = ct_atomic_file_commit(&af);
    if (s != CT_OK) ct_atomic_file_discard(&af);
    return s;
}
