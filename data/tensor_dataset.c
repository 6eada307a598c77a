/* A dataset over tensors in memory (PyTorch's TensorDataset): sample i is row i of the features
 * and of the labels. Applications with data already in memory, and tests, use it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "data/dataset.h"

typedef struct tensor_dataset {
    ct_dataset base;
    ct_tensor features, labels; /* owned copies */
    size_t frow, lrow;          /* bytes per sample */
} tensor_dataset;

static tensor_dataset *self(ct_dataset *ds) { return ct_container_of(ds, tensor_dataset, base); }

static int64_t length(ct_dataset *ds) { return self(ds)->features.shape[0]; }

static ct_status get_batch(ct_dataset *ds, const int64_t *indices, int64_t n, const ct_fetch_ctx *ctx,
                           ct_tensor *features, ct_tensor *labels) {
    (void)ctx;
    tensor_dataset *d = self(ds);
    for (int64_t i = 0; i < n; i++) {
        if (i + 1 < n)
            ct_dataset_prefetch_row((const char *)d->features.data + (size_t)indices[i + 1] * d->frow, d->frow);
        memcpy((char *)features->data + (size_t)i * d->frow, (const char *)d->features.data + (size_t)indices[i] * d->frow,
               d->frow);
        memcpy((char *)labels->data + (size_t)i * d->lrow, (const char *)d->labels.data + (size_t)indices[i] * d->lrow,
               d->lrow);
    }
    return CT_OK;
}

/* The label rows in memory, as they are: integers, or floats whose values are checked. */
static ct_status check_labels(ct_dataset *ds, int64_t first, int64_t n, const ct_label_rule *rule) {
    tensor_dataset *d = self(ds);
    int64_t per = ct_tensor_row_numel(&d->labels);
    if (d->labels.dtype == CT_I64)
        return ct_labels_check_i64((const int64_t *)d->labels.data + first * per, n * per, per, first, ds->source,
                                   "", rule);
    double *row = malloc((size_t)(per > 0 ? per : 1) * sizeof *row);
    if (!row) return ct_error(CT_ERR_NOMEM, "%s: out of memory checking the labels", ds->source);
    ct_status s = CT_OK;
    for (int64_t k = first; s == CT_OK && k < first + n; k++) {
        for (int64_t j = 0; j < per; j++) row[j] = ct_tensor_get(&d->labels, k * per + j);
        s = ct_labels_check_f64(row, per, per, k, ds->source, "", rule);
    }
    free(row);
    return s;
}

static void destroy(ct_dataset *ds) {
    ct_tensor_free(&self(ds)->features);
    ct_tensor_free(&self(ds)->labels);
    free(self(ds));
}

static const ct_dataset_ops tensor_dataset_ops = {.size = sizeof(ct_dataset_ops),
                                                  .name = "tensors",
                                                  .length = length,
                                                  .get_batch = get_batch,
                                                  .destroy = destroy,
                                                  .check_labels = check_labels};

static ct_shape sample_shape(const ct_tensor *t) {
    ct_shape s = {.ndim = t->ndim - 1};
    for (int i = 1; i < t->ndim; i++) s.dims[i - 1] = t->shape[i];
    return s;
}

static ct_status copy_of(const ct_tensor *src, ct_tensor *dst) {
    CT_TRY(ct_tensor_alloc(dst, src->dtype, CT_CPU, src->ndim, src->shape));
    memcpy(dst->data, src->data, ct_tensor_nbytes(src));
    return CT_OK;
}

ct_status ct_tensor_dataset_create(const ct_tensor *features, const ct_tensor *labels, int64_t num_classes,
                                   ct_dataset **out) {
    CT_ASSERT(out);
    *out = NULL;
    if (!features || !labels)
        return ct_error(CT_ERR_INVALID_ARG, "tensor dataset: %s is NULL; a tensor dataset needs features and labels "
                        "[N, ...] (for predictions on data without labels, give labels of zeros and ignore them)",
                        features ? "labels" : "features");
    if (features->ndim < 1 || labels->ndim < 1 || features->shape[0] != labels->shape[0])
        return ct_error(CT_ERR_SHAPE, "tensor dataset: features and labels need the same number of rows (%lld, %lld)",
                        (long long)(features->ndim ? features->shape[0] : -1),
                        (long long)(labels->ndim ? labels->shape[0] : -1));
    if (features->device.kind != CT_DEVICE_CPU || labels->device.kind != CT_DEVICE_CPU)
        return ct_error(CT_ERR_DEVICE, "tensor dataset: tensors must be on the CPU");
    tensor_dataset *d = calloc(1, sizeof *d);
    if (!d) return ct_error(CT_ERR_NOMEM, "tensor dataset: out of memory");
    ct_dataset_base_init(&d->base, &tensor_dataset_ops);
    ct_status s = copy_of(features, &d->features);
    if (s == CT_OK) s = copy_of(labels, &d->labels);
    if (s != CT_OK) {
        destroy(&d->base);
        return s;
    }
    int64_t n = features->shape[0];
    d->frow = n ? ct_tensor_nbytes(features) / (size_t)n : 0;
    d->lrow = n ? ct_tensor_nbytes(labels) / (size_t)n : 0;
    d->base.spec = (ct_sample_spec){.feature_shape = sample_shape(features), .feature_dtype = features->dtype,
                                    .label_shape = sample_shape(labels), .label_dtype = labels->dtype,
                                    .num_classes = num_classes};
    d->base.thread_safe = true;
    snprintf(d->base.source, sizeof d->base.source, "tensors in memory");
    *out = &d->base;
    return CT_OK;
}
