/* The metric test programs' `--compute` mode (see metric_compute.h). */
#include "metric_compute.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/format/h5io.h"
#include "core/util.h"

static ct_dtype dtype_named(const char *name, ct_dtype def) {
    if (!name) return def;
    if (strcmp(name, "f64") == 0) return CT_F64;
    if (strcmp(name, "f32") == 0) return CT_F32;
    if (strcmp(name, "i32") == 0) return CT_I32;
    if (strcmp(name, "i64") == 0) return CT_I64;
    return def;
}

typedef struct inputs {
    json_t *spec;
    ct_tensor outputs, labels, mask, losses, sample_loss, sample_weight;
} inputs;

static ct_status read_inputs(hid_t f, ct_dtype default_labels, inputs *in) {
    char *text = NULL;
    ct_status s = ct_h5_read_string_attr(f, "spec", &text);
    if (s == CT_OK && !(in->spec = json_loads(text, 0, NULL))) s = ct_error(CT_ERR_CONFIG, "spec is not JSON");
    free(text);
    CT_TRY(s);
    const char *odt = json_string_value(json_object_get(in->spec, "dtype"));
    const char *ldt = json_string_value(json_object_get(in->spec, "label_dtype"));
    CT_TRY(ct_h5_read_tensor_alloc(f, "outputs", dtype_named(odt, CT_F32), &in->outputs));
    CT_TRY(ct_h5_read_tensor_alloc(f, "labels", dtype_named(ldt, default_labels), &in->labels));
    if (ct_h5_exists(f, "mask")) CT_TRY(ct_h5_read_tensor_alloc(f, "mask", CT_U8, &in->mask));
    if (ct_h5_exists(f, "losses")) CT_TRY(ct_h5_read_tensor_alloc(f, "losses", CT_F64, &in->losses));
    if (ct_h5_exists(f, "sample_loss")) {
        CT_TRY(ct_h5_read_tensor_alloc(f, "sample_loss", CT_F64, &in->sample_loss));
        CT_TRY(ct_h5_read_tensor_alloc(f, "sample_weight", CT_F64, &in->sample_weight));
    }
    return CT_OK;
}

static bool real(const ct_tensor *mask, int64_t i) { return !mask->data || ((const uint8_t *)mask->data)[i]; }

/* Batch [start, start + len) with its loss (sum, count) over its real rows. */
static ct_status update(ct_metric_set *set, const inputs *in, int64_t start, int64_t len) {
    ct_tensor ob = ct_tensor_rows(&in->outputs, start, len), lb = ct_tensor_rows(&in->labels, start, len);
    ct_tensor mb = in->mask.data ? ct_tensor_rows(&in->mask, start, len) : (ct_tensor){0};
    ct_tensor slb = {0}, swb = {0};
    ct_eval_batch b = {.outputs = &ob, .labels = &lb, .mask = in->mask.data ? &mb : NULL};
    if (in->sample_loss.data) {
        slb = ct_tensor_rows(&in->sample_loss, start, len);
        swb = ct_tensor_rows(&in->sample_weight, start, len);
        b.sample_loss = &slb;
        b.sample_weight = &swb;
    }
    for (int64_t i = start; i < start + len; i++) {
        if (!real(&in->mask, i)) continue;
        if (in->losses.data) {
            b.loss.sum += ((const double *)in->losses.data)[i];
            b.loss.count += 1;
        } else if (in->sample_loss.data) {
            b.loss.sum += ((const double *)in->sample_loss.data)[i];
            b.loss.count += ((const double *)in->sample_weight.data)[i];
        }
    }
    return ct_metric_set_update(set, &b);
}

static ct_status compute(const inputs *in, ct_test_metric_extra_fn extra, json_t *out) {
    int64_t bs = json_integer_value(json_object_get(in->spec, "batch_size"));
    int ranks = (int)json_integer_value(json_object_get(in->spec, "ranks"));
    if (bs < 1) bs = 1;
    if (ranks < 1) ranks = 1;
    ct_metric_set *sets = calloc((size_t)ranks, sizeof *sets);
    if (!sets) return ct_error(CT_ERR_NOMEM, "out of memory");
    ct_status s = CT_OK;
    for (int r = 0; s == CT_OK && r < ranks; r++)
        s = ct_metric_set_from_json(json_object_get(in->spec, "metrics"), "metrics", &sets[r]);
    int64_t n = in->outputs.shape[0];
    /* batches are dealt to the "ranks" in turn, then merged: the merge property under test */
    for (int64_t start = 0, batch = 0; s == CT_OK && start < n; start += bs, batch++)
        s = update(&sets[batch % ranks], in, start, CT_MIN(bs, n - start));
    for (int r = 1; s == CT_OK && r < ranks; r++) s = ct_metric_set_merge(&sets[0], &sets[r]);
    const char *prefix = json_string_value(json_object_get(in->spec, "prefix"));
    if (!prefix) prefix = "eval";
    if (s == CT_OK) s = ct_metric_set_compute(&sets[0], prefix, out);
    const json_t *u = json_object_get(in->spec, "uncertainty");
    if (s == CT_OK && u) {
        ct_uncertainty_config cfg = {.resamples = json_integer_value(json_object_get(u, "resamples")),
                                     .confidence = json_number_value(json_object_get(u, "confidence")),
                                     .seed = (uint64_t)json_integer_value(json_object_get(u, "seed"))};
        s = ct_metric_set_uncertainty(&sets[0], &cfg, prefix, out);
        if (s == CT_OK && extra && json_is_true(json_object_get(in->spec, "dump_bootstrap")))
            s = extra(&sets[0], &cfg, out);
    }
    for (int r = 0; r < ranks; r++) ct_metric_set_free(&sets[r]);
    free(sets);
    return s;
}

int ct_test_metric_compute_main(const char *program, const char *file, ct_dtype default_labels,
                                ct_test_metric_extra_fn extra) {
    ct_h5_quiet();
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    inputs in = {0};
    json_t *out = json_object();
    ct_status s = f < 0 ? ct_error(CT_ERR_IO, "cannot open %s", file) : read_inputs(f, default_labels, &in);
    if (s == CT_OK) s = compute(&in, extra, out);
    if (s == CT_OK) {
        char *dump = json_dumps(out, JSON_REAL_PRECISION(17) | JSON_SORT_KEYS | JSON_COMPACT);
        printf("%s\n", dump);
        free(dump);
    } else {
        fprintf(stderr, "%s: %s: %s\n", program, ct_status_str(s), ct_last_error());
    }
    json_decref(out);
    json_decref(in.spec);
    ct_tensor *t[] = {&in.outputs, &in.labels, &in.mask, &in.losses, &in.sample_loss, &in.sample_weight};
    for (size_t i = 0; i < CT_ARRAY_LEN(t); i++) ct_tensor_free(t[i]);
    if (f >= 0) H5Fclose(f);
    return s == CT_OK ? 0 : 1;
}
