/* IDX dataset: images and labels from two IDX files (see dataset.h). Both files are read into
 * memory in their own element type (Fashion-MNIST: 47 MB of u8 pixels) and converted to float32 row
 * by row as batches are fetched, which costs less than the copy itself. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "data/dataset.h"
#include "data/idx.h"

typedef struct idx_dataset {
    ct_dataset base;
    ct_tensor images, labels; /* as read: images [N, ...], labels [N] */
    int64_t row;              /* elements per image */
    float scale;
    bool div255;              /* the default for u8 pixels: x / 255, as torchvision's ToTensor computes it */
    char labels_path[512];    /* for messages about a label (the source is the images file) */
} idx_dataset;

static idx_dataset *self(ct_dataset *ds) { return ct_container_of(ds, idx_dataset, base); }

static int64_t length(ct_dataset *ds) { return self(ds)->labels.shape[0]; }

static ct_status get_batch(ct_dataset *ds, const int64_t *indices, int64_t n, const ct_fetch_ctx *ctx,
                           ct_tensor *features, ct_tensor *labels) {
    (void)ctx;
    idx_dataset *d = self(ds);
    float *dst = features->data;
    int64_t *lab = labels->data;
    const size_t row_bytes = (size_t)d->row * ct_dtype_size(d->images.dtype);
    for (int64_t i = 0; i < n; i++) {
        int64_t k = indices[i];
        float *out = dst + i * d->row;
        if (i + 1 < n)
            ct_dataset_prefetch_row((const char *)d->images.data + (size_t)indices[i + 1] * row_bytes, row_bytes);
        switch (d->images.dtype) {
        case CT_U8: {
            const uint8_t *src = (const uint8_t *)d->images.data + k * d->row;
            if (d->div255)
                for (int64_t j = 0; j < d->row; j++) out[j] = src[j] / 255.0f;
            else
                for (int64_t j = 0; j < d->row; j++) out[j] = src[j] * d->scale;
            break;
        }
        case CT_I32: {
            const int32_t *src = (const int32_t *)d->images.data + k * d->row;
            for (int64_t j = 0; j < d->row; j++) out[j] = (float)src[j] * d->scale;
            break;
        }
        case CT_F32: {
            const float *src = (const float *)d->images.data + k * d->row;
            for (int64_t j = 0; j < d->row; j++) out[j] = src[j] * d->scale;
            break;
        }
        default: { /* CT_F64, the only other type ct_idx_read returns */
            const double *src = (const double *)d->images.data + k * d->row;
            for (int64_t j = 0; j < d->row; j++) out[j] = (float)(src[j] * d->scale);
            break;
        }
        }
        lab[i] = (int64_t)ct_tensor_get(&d->labels, k);
    }
    return CT_OK;
}

/* Labels in memory (u8 or i32), one at a time: a scan of at most a few MB. */
static ct_status check_labels(ct_dataset *ds, int64_t first, int64_t n, const ct_label_rule *rule) {
    idx_dataset *d = self(ds);
    for (int64_t k = first; k < first + n; k++) {
        int64_t v = (int64_t)ct_tensor_get(&d->labels, k);
        CT_TRY(ct_labels_check_i64(&v, 1, 1, k, d->labels_path, "", rule));
    }
    return CT_OK;
}

static void destroy(ct_dataset *ds) {
    idx_dataset *d = self(ds);
    ct_tensor_free(&d->images);
    ct_tensor_free(&d->labels);
    free(d);
}

static const ct_dataset_ops idx_ops = {.size = sizeof(ct_dataset_ops),
                                       .name = "idx",
                                       .length = length,
                                       .get_batch = get_batch,
                                       .destroy = destroy,
                                       .check_labels = check_labels};

/* Checks the files agree and every label is a class; fills the spec. */
static ct_status validate(idx_dataset *d, const char *images_path, const char *labels_path, int64_t num_classes) {
    char got[128];
    if (d->images.ndim < 2 || d->images.ndim > 4)
        return ct_error(CT_ERR_FORMAT, "%s: expected images of rank 2 to 4 ([N, D] or [N, H, W] or [N, C, H, W]), got %s",
                        images_path, ct_tensor_str(&d->images, got, sizeof got));
    if (d->labels.ndim != 1 || (d->labels.dtype != CT_U8 && d->labels.dtype != CT_I32))
        return ct_error(CT_ERR_FORMAT, "%s: expected integer labels of rank 1, got %s", labels_path,
                        ct_tensor_str(&d->labels, got, sizeof got));
    int64_t n = d->images.shape[0];
    if (d->labels.shape[0] != n)
        return ct_error(CT_ERR_FORMAT, "%s has %lld images but %s has %lld labels", images_path, (long long)n,
                        labels_path, (long long)d->labels.shape[0]);
    int64_t max_label = -1;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = (int64_t)ct_tensor_get(&d->labels, i);
        if (v < 0)
            return ct_error(CT_ERR_FORMAT, "%s: label %lld at position %lld is negative; class ids start at 0",
                            labels_path, (long long)v, (long long)i);
        if (num_classes > 0 && v >= num_classes)
            return ct_error(CT_ERR_FORMAT, "%s: label %lld at position %lld is outside [0, %lld)", labels_path,
                            (long long)v, (long long)i, (long long)num_classes);
        if (v > max_label) max_label = v;
    }
    ct_sample_spec *sp = &d->base.spec;
    sp->feature_dtype = CT_F32;
    sp->label_dtype = CT_I64;
    sp->label_shape.ndim = 0;
    sp->num_classes = num_classes > 0 ? num_classes : max_label + 1;
    /* Images of rank 3 get their channel dimension, as the convolution layers expect. */
    if (d->images.ndim == 3) {
        sp->feature_shape = (ct_shape){3, {1, d->images.shape[1], d->images.shape[2]}};
    } else {
        sp->feature_shape.ndim = d->images.ndim - 1;
        for (int i = 1; i < d->images.ndim; i++) sp->feature_shape.dims[i - 1] = d->images.shape[i];
    }
    d->row = ct_tensor_row_numel(&d->images);
    return CT_OK;
}

ct_status ct_idx_dataset_create(const char *images_path, const char *labels_path, double scale, int64_t num_classes,
                                ct_dataset **out) {
    idx_dataset *d = calloc(1, sizeof *d);
    if (!d) return ct_error(CT_ERR_NOMEM, "idx dataset: out of memory");
    ct_dataset_base_init(&d->base, &idx_ops);
    d->base.thread_safe = true;
    snprintf(d->base.source, sizeof d->base.source, "%s", images_path);
    snprintf(d->labels_path, sizeof d->labels_path, "%s", labels_path);
    ct_status s = ct_idx_read(images_path, &d->images);
    if (s == CT_OK) s = ct_idx_read(labels_path, &d->labels);
    if (s == CT_OK) s = validate(d, images_path, labels_path, num_classes);
    if (s != CT_OK) {
        destroy(&d->base);
        return s;
    }
    d->div255 = scale == 0.0 && d->images.dtype == CT_U8;
    d->scale = (float)(scale != 0.0 ? scale : 1.0);
    *out = &d->base;
    return CT_OK;
}
