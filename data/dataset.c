/* The dataset wrapper functions (see dataset.h): every fetch is validated here once, so datasets
 * can trust their indices and tensors. */
#include "data/dataset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/vtable.h"

static ct_status check_ops(const ct_dataset_ops *ops) {
    CT_TRY(CT_OPS_CHECK_SIZE(ct_dataset_ops, ops, get_batch));
    CT_TRY(CT_OPS_CHECK_MEMBER(ct_dataset_ops, ops, length, "gives the number of samples"));
    return CT_OPS_CHECK_MEMBER(ct_dataset_ops, ops, get_batch, "fetches the samples");
}

ct_status ct_dataset_base_init(ct_dataset *ds, const ct_dataset_ops *ops) {
    memset(ds, 0, sizeof *ds);
    ds->ops = ops;
    ds->spec.feature_dtype = CT_F32;
    ds->spec.label_dtype = CT_I64;
    return check_ops(ops);
}

ct_status ct_dataset_check(const ct_dataset *ds) {
    if (!ds) return ct_error(CT_ERR_INVALID_ARG, "dataset is NULL");
    ct_status s = check_ops(ds->ops);
    if (s != CT_OK) return ct_error_prefix(s, "dataset '%s': ", ds->source[0] ? ds->source : "(no source)");
    return CT_OK;
}

int64_t ct_dataset_length(ct_dataset *ds) { return ds->ops->length(ds); }

static bool rows_fit(const ct_tensor *t, const ct_shape *shape, ct_dtype dt, int64_t n) {
    if (t->dtype != dt || t->ndim != shape->ndim + 1 || t->shape[0] < n || t->device.kind != CT_DEVICE_CPU)
        return false;
    for (int i = 0; i < shape->ndim; i++)
        if (t->shape[i + 1] != shape->dims[i]) return false;
    return true;
}

ct_status ct_dataset_get_batch(ct_dataset *ds, const int64_t *indices, int64_t n, const ct_fetch_ctx *ctx,
                               ct_tensor *features, ct_tensor *labels) {
    int64_t len = ct_dataset_length(ds);
    for (int64_t i = 0; i < n; i++)
        if (indices[i] < 0 || indices[i] >= len)
            return ct_error(CT_ERR_INVALID_ARG, "%s: sample index %lld is outside [0, %lld)", ds->source,
                            (long long)indices[i], (long long)len);
    const ct_sample_spec *sp = &ds->spec;
    if (!rows_fit(features, &sp->feature_shape, sp->feature_dtype, n) ||
        !rows_fit(labels, &sp->label_shape, sp->label_dtype, n)) {
        char f[128], l[128], fs[96], ls[96];
        return ct_error(CT_ERR_SHAPE, "%s: batch tensors %s and %s cannot hold %lld samples of %s %s and %s %s",
                        ds->source, ct_tensor_str(features, f, sizeof f), ct_tensor_str(labels, l, sizeof l),
                        (long long)n, ct_sample_shape_str(&sp->feature_shape, fs, sizeof fs),
                        ct_dtype_name(sp->feature_dtype), ct_sample_shape_str(&sp->label_shape, ls, sizeof ls),
                        ct_dtype_name(sp->label_dtype));
    }
    if (n == 0) return CT_OK;
    ct_fetch_ctx zero = {0, 0};
    ct_status s = ds->ops->get_batch(ds, indices, n, ctx ? ctx : &zero, features, labels);
    if (s != CT_OK && strncmp(ct_last_error(), ds->source, strlen(ds->source)) != 0)
        ct_error_prefix(s, "%s: ", ds->source);
    return s;
}

void ct_dataset_free(ct_dataset *ds) {
    if (!ds) return;
    if (ds->ops && CT_OPS_HAS(ds->ops, ct_dataset_ops, destroy))
        ds->ops->destroy(ds);
    else
        free(ds);
}

ct_status ct_dataset_alloc_batch(const ct_dataset *ds, int64_t rows, ct_tensor *features, ct_tensor *labels) {
    int ndim;
    int64_t shape[CT_MAX_DIMS];
    ct_shape_with_batch(&ds->spec.feature_shape, rows, &ndim, shape);
    CT_TRY(ct_tensor_alloc(features, ds->spec.feature_dtype, CT_CPU, ndim, shape));
    ct_shape_with_batch(&ds->spec.label_shape, rows, &ndim, shape);
    ct_status s = ct_tensor_alloc(labels, ds->spec.label_dtype, CT_CPU, ndim, shape);
    if (s != CT_OK) ct_tensor_free(features);
    return s;
}
