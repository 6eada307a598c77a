/* What ct_trainer_init checks before any step runs, so that a mistake in the pieces an application
 * hands over surfaces at init with the piece's name instead of at the first batch: every table
 * (core/vtable.h), the model's batch size (grown to what the arguments ask for), each dataset's
 * samples against the model's input, every label of each dataset against the classes of the
 * model's outputs (for cross-entropy: a bad label in an evaluation set would otherwise end the run
 * after all of its training), and the loss and an evaluated set's metrics against a sample's labels.
 * Only host memory is touched: the loss and the metrics are tried on a host copy of one sample's label
 * and zero outputs, never on the model's device. */
#include <stdio.h>
#include <string.h>

#include "core/vtable.h"
#include "trainer/trainer_impl.h"

ct_status ct_trainer_check_ops(const ct_trainer_ops *ops) {
    if (!ops) return CT_OK; /* every default */
    ct_status s = CT_OPS_CHECK_SIZE(ct_trainer_ops, ops, get_train_dataloader);
    return s == CT_OK ? s : ct_error_prefix(s, "trainer: ");
}

/* The dataset's samples are what the model takes: the same per-sample shape and dtype. */
static ct_status check_features(const ct_model *m, const ct_dataset *ds, const char *role) {
    const ct_sample_spec *sp = &ds->spec;
    bool same = sp->feature_shape.ndim == m->in_shape.ndim && sp->feature_dtype == m->in_dtype;
    for (int i = 0; same && i < m->in_shape.ndim; i++) same = sp->feature_shape.dims[i] == m->in_shape.dims[i];
    if (same) return CT_OK;
    char a[96], b[96];
    return ct_error(CT_ERR_SHAPE, "%s '%s': samples are %s %s, but the model was built for inputs %s %s",
                    role, ds->source, ct_sample_shape_str(&sp->feature_shape, a, sizeof a),
                    ct_dtype_name(sp->feature_dtype), ct_sample_shape_str(&m->in_shape, b, sizeof b),
                    ct_dtype_name(m->in_dtype));
}

/* A classifier needs an output per class of the data. */
static ct_status check_classes(const ct_trainer *t, const ct_dataset *ds, const char *role) {
    const ct_shape *out = &t->model->out_shape;
    int64_t classes = ds->spec.num_classes;
    if (classes <= 0 || ds->spec.label_shape.ndim != 0 || out->ndim != 1 ||
        strcmp(ct_loss_name(t->loss), "cross_entropy") != 0 || out->dims[0] >= classes)
        return CT_OK;
    return ct_error(CT_ERR_SHAPE, "%s '%s' has %lld classes, but the model outputs %lld scores per sample; "
                    "give the last layer %lld outputs", role, ds->source, (long long)classes,
                    (long long)out->dims[0], (long long)classes);
}

/* The loss on zero outputs of the model's shape against the first sample's label: a label of the
 * wrong shape, dtype or range is the loss's error now; for a set that is evaluated, the metrics too
 * (a regression metric on class labels, say, would otherwise end the run at its first evaluation),
 * their state reset after. Host tensors only. */
static ct_status check_labels(ct_trainer *t, ct_dataset *ds, const char *role, bool evaluated) {
    ct_tensor features = {0}, labels = {0}, out = {0};
    int64_t shape[CT_MAX_DIMS];
    int ndim;
    ct_shape_with_batch(&t->model->out_shape, 1, &ndim, shape);
    ct_status s = ct_dataset_alloc_batch(ds, 1, &features, &labels);
    if (s == CT_OK) s = ct_tensor_alloc(&out, t->model->params.dtype, CT_CPU, ndim, shape);
    if (s == CT_OK) {
        memset(out.data, 0, ct_tensor_nbytes(&out));
        int64_t first = 0;
        ct_fetch_ctx ctx = {.seed = (uint64_t)t->args.seed, .epoch = 0};
        s = ct_dataset_get_batch(ds, &first, 1, &ctx, &features, &labels);
        ct_loss_value v;
        if (s == CT_OK) {
            s = ct_loss_forward(t->loss, &out, &labels, &v);
            if (s != CT_OK) ct_error_prefix(s, "%s '%s' does not fit the loss and the model's outputs: ", role,
                                            ds->source);
        }
        if (s == CT_OK && evaluated) {
            ct_eval_batch b = {.outputs = &out, .labels = &labels};
            s = ct_metric_set_update(&t->metrics, &b);
            ct_metric_set_reset(&t->metrics);
            /* the metrics list is the config's to fix (exit 2) */
            if (s != CT_OK) s = ct_error_prefix(CT_ERR_CONFIG, "%s '%s' does not fit the metrics: ", role, ds->source);
        }
    }
    ct_tensor_free(&features);
    ct_tensor_free(&labels);
    ct_tensor_free(&out);
    return s;
}

/* Every label is a class id of the model's outputs (their last dimension) or the loss's
 * ignore_index: one pass over the labels (the dataset's own check_labels), or none where the
 * dataset counted its classes from every label at open. A bad one is the data's error (exit 1). */
static ct_status check_label_values(ct_trainer *t, ct_dataset *ds, const char *role) {
    const ct_shape *out = &t->model->out_shape;
    int64_t ignore;
    if (out->ndim < 1 || !ct_loss_class_targets(t->loss, &ignore)) return CT_OK;
    /* a padded vocabulary's extra logits are -inf: a label there would be an infinite loss */
    int64_t outputs = out->dims[out->ndim - 1], classes = ct_model_output_classes(t->model);
    char of[160];
    if (classes < outputs)
        snprintf(of, sizeof of, "the model's %lld classes (of its %lld outputs, the others padding)",
                 (long long)classes, (long long)outputs);
    else
        snprintf(of, sizeof of, "the model's %lld outputs", (long long)outputs);
    ct_label_rule rule = {.classes = classes, .ignore_index = ignore, .of = of, .loss = ct_loss_name(t->loss)};
    ct_status s = ct_dataset_check_labels(ds, &rule);
    return s == CT_OK ? s : ct_error_prefix(s, "%s: ", role);
}

static bool labels_shaped_as_classes(const ct_model *m, const ct_dataset *ds) {
    const ct_shape *out = &m->out_shape, *lab = &ds->spec.label_shape;
    bool same = out->ndim >= 1 && lab->ndim == out->ndim - 1;
    for (int i = 0; same && i < lab->ndim; i++) same = lab->dims[i] == out->dims[i];
    return same;
}

/* A label beyond the model's classes in data that counts more classes than the model has outputs:
 * the model may be what is wrong, so the message also says how to give it enough. */
static ct_status class_count_hint(const ct_trainer *t, const ct_dataset *ds, ct_status s) {
    int64_t classes = ds->spec.num_classes, outputs = ct_model_output_classes(t->model);
    if (classes <= outputs) return s;
    char why[1024];
    snprintf(why, sizeof why, "%s", ct_last_error()); /* the message is rewritten from a copy */
    return ct_error(s, "%s (the data has %lld classes: if the model is what is wrong, give the last layer %lld "
                    "outputs)", why, (long long)classes, (long long)classes);
}

static ct_status check_dataset(ct_trainer *t, ct_dataset *ds, const char *role) {
    CT_TRY(ct_dataset_check(ds));
    CT_TRY(check_features(t->model, ds, role));
    /* An overridden compute_loss decides itself what it compares the outputs with. */
    bool own_loss = CT_TRAINER_HOOK(t, compute_loss) != NULL;
    /* Every label's value first, naming the sample, where the labels are shaped as class ids of the
     * outputs (one per position of the outputs but the last dimension); labels of another shape
     * (regression targets) are the loss's to judge, on the first sample, below. */
    if (!own_loss && labels_shaped_as_classes(t->model, ds)) {
        ct_status s = check_label_values(t, ds, role);
        if (s != CT_OK) return class_count_hint(t, ds, s);
    }
    CT_TRY(check_classes(t, ds, role));
    if (own_loss || ct_dataset_length(ds) == 0) return CT_OK;
    return check_labels(t, ds, role, ds != t->train_dataset);
}

/* "eval_dataset 'val'" */
static const char *eval_role(const ct_trainer *t, int i, char *buf, size_t cap) {
    snprintf(buf, cap, "eval_dataset%s%s%s", t->eval_names[i][0] ? " '" : "", t->eval_names[i],
             t->eval_names[i][0] ? "'" : "");
    return buf;
}

ct_status ct_trainer_check_dataset(ct_trainer *t, ct_dataset *ds, const char *role) {
    if (ds == t->train_dataset || ds == t->priv->test_dataset) return CT_OK;
    for (int i = 0; i < t->n_eval; i++)
        if (ds == t->eval_datasets[i]) return CT_OK;
    return check_dataset(t, ds, role);
}

/* A metric that cannot mean anything for the model's classes (the last dimension of its outputs). */
static ct_status check_metrics(const ct_trainer *t) {
    const ct_shape *out = &t->model->out_shape;
    for (int i = 0; out->ndim >= 1 && i < t->metrics.n; i++) {
        ct_status s = ct_metric_check_classes(t->metrics.items[i], out->dims[out->ndim - 1]);
        if (s != CT_OK) return ct_error_prefix(s, "metrics: ");
    }
    return CT_OK;
}

ct_status ct_trainer_check_setup(ct_trainer *t) {
    CT_TRY(ct_module_check(t->model->root));
    CT_TRY(check_metrics(t));
    CT_TRY(ct_loss_check(t->loss, t->train_dataset != NULL));
    /* Evaluation forwards run on per_device_eval_batch_size rows, training on the train batch: the
     * model takes the larger, grown here rather than failing at the first batch. */
    int64_t need = t->args.per_device_eval_batch_size;
    if (t->train_dataset && t->args.per_device_train_batch_size > need) need = t->args.per_device_train_batch_size;
    if (t->model->opts.max_batch < need) CT_TRY(ct_model_set_max_batch(t->model, need));
    /* Hugging Face's Trainer turns it on in the model (gradient_checkpointing_enable); off leaves a
     * model that an application set up with it as it is. */
    if (t->args.gradient_checkpointing) {
        ct_status s = ct_model_set_gradient_checkpointing(t->model, true);
        if (s != CT_OK) return ct_error_prefix(CT_ERR_CONFIG, "training_args.gradient_checkpointing: ");
    }
    if (t->train_dataset) CT_TRY(check_dataset(t, t->train_dataset, "train_dataset"));
    char role[96];
    for (int i = 0; i < t->n_eval; i++)
        CT_TRY(check_dataset(t, t->eval_datasets[i], eval_role(t, i, role, sizeof role)));
    if (t->priv->test_dataset) CT_TRY(check_dataset(t, t->priv->test_dataset, "test_dataset"));
    return CT_OK;
}
