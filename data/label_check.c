/* Checking a dataset's labels against what a classification loss and the model's outputs accept
 * (see ct_dataset_check_labels in dataset.h), once, at the start of a run: a label that is no class
 * would otherwise end the run at the batch that holds it, after hours of training when it sits in
 * an evaluation set, with a message about the loss rather than the file.
 *
 * A dataset that can read its labels alone (the check_labels member of its table) is asked for
 * them; others are fetched whole, in blocks of samples. The comparisons and the message are here
 * once, for every dataset: the file (the dataset's source), the sample, the element of a sequence
 * label, and the value as the data holds it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/vtable.h"
#include "data/dataset.h"

/* Samples fetched together by the fallback: about 16 MB of features, at most 4096 samples. */
#define FETCH_BYTES ((size_t)16 << 20)
#define FETCH_MAX 4096

/* " (element 3)" for sequence labels, "" for one label a sample. */
static const char *element_of(int64_t i, int64_t per_sample, char *buf, size_t cap) {
    buf[0] = '\0';
    if (per_sample > 1) snprintf(buf, cap, " (element %lld)", (long long)(i % per_sample));
    return buf;
}

/* " or its ignore_index -100" when the ignored id is not a class anyway. */
static const char *ignored(const ct_label_rule *r, char *buf, size_t cap) {
    buf[0] = '\0';
    if (r->ignore_index < 0 || r->ignore_index >= r->classes)
        snprintf(buf, cap, " or its ignore_index %lld", (long long)r->ignore_index);
    return buf;
}

static ct_status bad_label(const char *value, int64_t i, int64_t per_sample, int64_t first, const char *source,
                           const char *where, const ct_label_rule *r) {
    char elem[48], ign[64];
    return ct_error(CT_ERR_FORMAT, "%s: label %s of sample %lld%s%s is not a class of %s: the %s loss expects an "
                    "integer in [0, %lld)%s",
                    source, value, (long long)(first + i / per_sample), element_of(i, per_sample, elem, sizeof elem),
                    where, r->of, r->loss, (long long)r->classes, ignored(r, ign, sizeof ign));
}

ct_status ct_labels_check_i64(const int64_t *v, int64_t count, int64_t per_sample, int64_t first,
                              const char *source, const char *where, const ct_label_rule *rule) {
    for (int64_t i = 0; i < count; i++)
        if ((v[i] < 0 || v[i] >= rule->classes) && v[i] != rule->ignore_index) {
            char value[32];
            snprintf(value, sizeof value, "%lld", (long long)v[i]);
            return bad_label(value, i, per_sample > 0 ? per_sample : 1, first, source, where, rule);
        }
    return CT_OK;
}

int64_t ct_labels_find_bad_f64(const double *v, int64_t count, const ct_label_rule *rule) {
    for (int64_t i = 0; i < count; i++) {
        double x = v[i];
        /* NaN fails the first test; an integer beyond int64 the second. */
        if (!(x == floor(x) && fabs(x) < 9.2e18 &&
              ((x >= 0 && x < (double)rule->classes) || (int64_t)x == rule->ignore_index)))
            return i;
    }
    return -1;
}

ct_status ct_labels_check_f64(const double *v, int64_t count, int64_t per_sample, int64_t first,
                              const char *source, const char *where, const ct_label_rule *rule) {
    int64_t i = ct_labels_find_bad_f64(v, count, rule);
    if (i < 0) return CT_OK;
    char value[40];
    snprintf(value, sizeof value, "%.17g", v[i]);
    return bad_label(value, i, per_sample > 0 ? per_sample : 1, first, source, where, rule);
}

/* Without a check_labels member: the samples fetched whole, block by block. */
static ct_status check_by_fetching(ct_dataset *ds, int64_t from, int64_t len, const ct_label_rule *rule) {
    const ct_sample_spec *sp = &ds->spec;
    int64_t per = 1, feat = 1;
    for (int i = 0; i < sp->label_shape.ndim; i++) per *= sp->label_shape.dims[i];
    for (int i = 0; i < sp->feature_shape.ndim; i++) feat *= sp->feature_shape.dims[i];
    size_t row_bytes = (size_t)(feat > 0 ? feat : 1) * ct_dtype_size(sp->feature_dtype);
    int64_t rows = (int64_t)(FETCH_BYTES / row_bytes);
    if (rows > FETCH_MAX) rows = FETCH_MAX;
    if (rows > len) rows = len;
    if (rows < 1) rows = 1;
    ct_tensor features = {0}, labels = {0};
    int64_t *idx = malloc((size_t)rows * sizeof *idx);
    double *vals = malloc((size_t)(rows * (per > 0 ? per : 1)) * sizeof *vals);
    ct_status s = idx && vals ? ct_dataset_alloc_batch(ds, rows, &features, &labels)
                              : ct_error(CT_ERR_NOMEM, "%s: out of memory checking the labels", ds->source);
    ct_fetch_ctx ctx = {0, 0};
    for (int64_t first = from; s == CT_OK && first < from + len; first += rows) {
        int64_t n = from + len - first < rows ? from + len - first : rows;
        for (int64_t i = 0; i < n; i++) idx[i] = first + i;
        s = ct_dataset_get_batch(ds, idx, n, &ctx, &features, &labels);
        if (s != CT_OK) break;
        if (labels.dtype == CT_I64) {
            s = ct_labels_check_i64(labels.data, n * per, per, first, ds->source, "", rule);
        } else {
            for (int64_t i = 0; i < n * per; i++) vals[i] = ct_tensor_get(&labels, i);
            s = ct_labels_check_f64(vals, n * per, per, first, ds->source, "", rule);
        }
    }
    free(idx);
    free(vals);
    ct_tensor_free(&features);
    ct_tensor_free(&labels);
    return s;
}

ct_status ct_dataset_check_label_range(ct_dataset *ds, int64_t first, int64_t n, const ct_label_rule *rule) {
    if (n <= 0) return CT_OK;
    if (CT_OPS_HAS(ds->ops, ct_dataset_ops, check_labels)) return ds->ops->check_labels(ds, first, n, rule);
    return check_by_fetching(ds, first, n, rule);
}

ct_status ct_dataset_check_labels(ct_dataset *ds, const ct_label_rule *rule) {
    CT_TRY(ct_dataset_check(ds));
    CT_TRY(ct_dataset_check_label_range(ds, 0, ct_dataset_length(ds), rule));
    ct_dtype dt = ds->spec.label_dtype;
    if (dt == CT_I64 || dt == CT_I32) return CT_OK;
    return ct_error(CT_ERR_FORMAT, "%s: the labels are %s, but they are classes of %s: the %s loss expects "
                    "integer class ids (i64 or i32); store the labels as integers", ds->source, ct_dtype_name(dt),
                    rule->of, rule->loss);
}
