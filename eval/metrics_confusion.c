/* Confusion-matrix metrics (see the section in metric.h): the confusion matrix itself, precision,
 * recall and F1 with every averaging, Matthews correlation and balanced accuracy, all as functions of
 * one C x C matrix of int64 counts, which is their whole state (so merging is exact and the values do
 * not depend on the batch size or the number of processes). A batch adds its rows' (label,
 * prediction) cells, the predictions from its class ranks (ct_op_class_ranks: computed where the
 * outputs are, once for every classification metric of the set).
 *
 * The same function of a matrix serves compute() and the bootstrap: uncertainty redraws the matrix
 * (a multinomial of n over its cells with the observed proportions, ct_bootstrap_cells) and
 * recomputes the metric, so the cost is O(resamples x C^2) whatever the number of samples. Drawing
 * n samples with replacement from the data and tabulating them gives exactly that multinomial, so
 * this is the ordinary sample bootstrap, computed faster. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/util.h"
#include "eval/metric.h"
#include "eval/uncertainty.h"

/* Bytes of bootstrap values held at once; per_class with many classes is computed in class chunks
 * that each replay the same resamples (same streams, same matrices). */
#define VALUES_BUDGET ((size_t)256 << 20)
/* A bound that keeps C^2 counts allocatable in principle and C^2 from overflowing. */
#define MAX_CLASSES ((int64_t)1 << 20)

typedef struct confusion_metric {
    ct_metric base;
    ct_confusion_kind kind;
    ct_average average;
} confusion_metric;

static const char *const kind_names[] = {"confusion_matrix", "precision", "recall", "f1", "mcc", "balanced_accuracy"};
static const char *const average_names[] = {"micro", "macro", "weighted", "per_class", NULL};

const char *const ct_confusion_metric_names[] = {"confusion_matrix", "precision", "recall", "f1",
                                                 "mcc",              "balanced_accuracy", NULL};

static const confusion_metric *cm_of(const ct_metric *m) { return ct_container_of(m, const confusion_metric, base); }

static bool averaged(ct_confusion_kind k) {
    return k == CT_CONFUSION_PRECISION || k == CT_CONFUSION_RECALL || k == CT_CONFUSION_F1;
}

int64_t ct_confusion_classes(const ct_metric *m) {
    if (m->n_counts == 0) return 0;
    int64_t c = (int64_t)llround(sqrt((double)m->n_counts));
    CT_ASSERT(c * c == m->n_counts);
    return c;
}

static int64_t total(const ct_metric *m) {
    int64_t n = 0;
    for (int64_t i = 0; i < m->n_counts; i++) n += m->counts[i];
    return n;
}

/* "f1_macro", "mcc": the value's name under the prefix. */
static void value_name(const confusion_metric *cm, char *buf, size_t cap) {
    if (averaged(cm->kind))
        snprintf(buf, cap, "%s_%s", kind_names[cm->kind], average_names[cm->average]);
    else
        snprintf(buf, cap, "%s", kind_names[cm->kind]);
}

/* --- the metrics as functions of a matrix ------------------------------------------------------- */

/* How many values a metric has: C for per_class, else 1. */
static int64_t n_values_of(ct_confusion_kind kind, ct_average average, int64_t c) {
    return averaged(kind) && average == CT_AVERAGE_PER_CLASS ? c : 1;
}

/* Writes the metric's values for the matrix cm (C x C, n = sum > 0) into v (n_values_of doubles).
 * scratch: 3 C int64. */
static void metric_values(ct_confusion_kind kind, ct_average average, const int64_t *cm, int64_t c, int64_t *scratch,
                          double *v) {
    int64_t *tp = scratch, *t = scratch + c, *p = scratch + 2 * c; /* diagonal, row (true) and column sums */
    int64_t n = 0, trace = 0;
    for (int64_t k = 0; k < c; k++) t[k] = p[k] = 0;
    for (int64_t i = 0; i < c; i++)
        for (int64_t j = 0; j < c; j++) {
            int64_t x = cm[i * c + j];
            t[i] += x;
            p[j] += x;
        }
    for (int64_t k = 0; k < c; k++) {
        tp[k] = cm[k * c + k];
        trace += tp[k];
        n += t[k];
    }
    if (kind == CT_CONFUSION_MCC) {
        /* Integer covariances, exact for any realistic n (128-bit products), as scikit-learn's int64. */
        __int128 s = n, cov_tp = (__int128)trace * s, cov_pp = s * s, cov_tt = s * s;
        for (int64_t k = 0; k < c; k++) {
            cov_tp -= (__int128)t[k] * p[k];
            cov_pp -= (__int128)p[k] * p[k];
            cov_tt -= (__int128)t[k] * t[k];
        }
        double den = sqrt((double)cov_tt * (double)cov_pp);
        v[0] = den == 0 ? 0.0 : (double)cov_tp / den;
        return;
    }
    if (kind == CT_CONFUSION_BALANCED_ACCURACY) {
        double sum = 0;
        int64_t present = 0;
        for (int64_t k = 0; k < c; k++)
            if (t[k] > 0) {
                sum += (double)tp[k] / (double)t[k];
                present++;
            }
        v[0] = present ? sum / (double)present : 0.0;
        return;
    }
    CT_ASSERT(averaged(kind));
    if (average == CT_AVERAGE_MICRO) { /* pooled: tp = trace, tp+fp = tp+fn = n */
        v[0] = n ? (double)trace / (double)n : 0.0;
        return;
    }
    double sum = 0, wsum = 0;
    int64_t present = 0;
    for (int64_t k = 0; k < c; k++) {
        int64_t num = kind == CT_CONFUSION_F1 ? 2 * tp[k] : tp[k];
        int64_t den = kind == CT_CONFUSION_PRECISION ? p[k] : kind == CT_CONFUSION_RECALL ? t[k] : t[k] + p[k];
        double x = den ? (double)num / (double)den : 0.0; /* zero_division = 0 */
        if (average == CT_AVERAGE_PER_CLASS)
            v[k] = x;
        else if (average == CT_AVERAGE_MACRO) {
            if (t[k] + p[k] > 0) { /* scikit-learn's labels=None: classes seen in labels or predictions */
                sum += x;
                present++;
            }
        } else {
            sum += (double)t[k] * x;
            wsum += (double)t[k];
        }
    }
    if (average == CT_AVERAGE_MACRO) v[0] = present ? sum / (double)present : 0.0;
    if (average == CT_AVERAGE_WEIGHTED) v[0] = wsum > 0 ? sum / wsum : 0.0;
}

/* --- vtable ------------------------------------------------------------------------------------- */

static ct_status confusion_update(ct_metric *m, const ct_eval_batch *b) {
    int64_t rows, c, *own;
    CT_TRY(ct_metric_check_classification(b, &rows, &c));
    int64_t seen = ct_confusion_classes(m);
    if (seen && seen != c) {
        char u[128], t[160] = "this batch's class scores";
        if (b->outputs) snprintf(t, sizeof t, "outputs %s", ct_tensor_str(b->outputs, u, sizeof u));
        return ct_error(CT_ERR_SHAPE, "%s have %lld classes, and earlier batches had %lld", t, (long long)c,
                        (long long)seen);
    }
    if (c > MAX_CLASSES)
        return ct_error(CT_ERR_INVALID_ARG, "%lld classes: a confusion matrix holds at most %lld", (long long)c,
                        (long long)MAX_CLASSES);
    ct_class_values cv;
    CT_TRY(ct_metric_class_values(b, &cv, &own));
    ct_status s = seen ? CT_OK : ct_metric_redeclare(m, c * c, NULL, 0, NULL); /* C is fixed from here on */
    /* Every label was validated above, so nothing can fail from here: counting in place keeps the
     * state unchanged on any failure. */
    for (int64_t i = 0; s == CT_OK && i < rows; i++)
        if (ct_metric_row_real(b, i)) m->counts[ct_metric_label(b->labels, i) * c + cv.pred[i]]++;
    free(own);
    return s;
}

static ct_status put_list(json_t *out, const char *prefix, const char *name, const double *v, int64_t n) {
    char key[256];
    CT_TRY(ct_metric_key(prefix, name, key, sizeof key));
    json_t *list = json_array();
    if (!list) return ct_error(CT_ERR_NOMEM, "%s: out of memory", key);
    for (int64_t i = 0; i < n; i++)
        if (json_array_append_new(list, isfinite(v[i]) ? json_real(v[i]) : json_null()) != 0) {
            json_decref(list);
            return ct_error(CT_ERR_NOMEM, "%s: out of memory", key);
        }
    if (json_object_set_new(out, key, list) != 0) return ct_error(CT_ERR_NOMEM, "%s: out of memory", key);
    return CT_OK;
}

static ct_status put_matrix(json_t *out, const char *prefix, const int64_t *cm, int64_t c) {
    char key[256];
    CT_TRY(ct_metric_key(prefix, "confusion_matrix", key, sizeof key));
    json_t *rows = json_array();
    bool ok = rows != NULL;
    for (int64_t i = 0; ok && i < c; i++) {
        json_t *row = json_array();
        ok = row && json_array_append_new(rows, row) == 0;
        for (int64_t j = 0; ok && j < c; j++) ok = json_array_append_new(row, json_integer(cm[i * c + j])) == 0;
    }
    if (!ok || json_object_set_new(out, key, rows) != 0) {
        if (!ok) json_decref(rows);
        return ct_error(CT_ERR_NOMEM, "%s: out of memory", key);
    }
    return CT_OK;
}

static ct_status confusion_compute(const ct_metric *m, const char *prefix, json_t *out) {
    const confusion_metric *cm = cm_of(m);
    int64_t c = ct_confusion_classes(m);
    if (c == 0 || total(m) == 0) return CT_OK; /* no sample seen: no key */
    if (cm->kind == CT_CONFUSION_MATRIX) return put_matrix(out, prefix, m->counts, c);
    int64_t nv = n_values_of(cm->kind, cm->average, c);
    int64_t *scratch = malloc((size_t)(3 * c) * sizeof *scratch);
    double *v = malloc((size_t)nv * sizeof *v);
    ct_status s = CT_OK;
    if (!scratch || !v)
        s = ct_error(CT_ERR_NOMEM, "out of memory for %lld classes", (long long)c);
    else {
        metric_values(cm->kind, cm->average, m->counts, c, scratch, v);
        char name[64];
        value_name(cm, name, sizeof name);
        s = nv > 1 || cm->average == CT_AVERAGE_PER_CLASS ? put_list(out, prefix, name, v, nv)
                                                           : ct_metric_put(out, prefix, name, v[0]);
    }
    free(scratch);
    free(v);
    return s;
}

/* --- bootstrap ---------------------------------------------------------------------------------- */

typedef struct stat_ctx {
    ct_confusion_kind kind;
    ct_average average;
    int64_t c, first, count; /* the values [first, first + count) of the metric's n_values_of */
} stat_ctx;

/* scratch: 3 C int64, then n_values_of doubles. */
static void cells_stat(const int64_t *cells, int64_t k, const void *ctx, void *scratch, double *values) {
    const stat_ctx *x = ctx;
    int64_t *iscratch = scratch;
    double *all = (double *)(iscratch + 3 * x->c);
    metric_values(x->kind, x->average, cells, x->c, iscratch, all);
    memcpy(values, all + x->first, (size_t)x->count * sizeof *values);
}

static size_t scratch_bytes(int64_t c, int64_t nv) { return (size_t)(3 * c) * sizeof(int64_t) + (size_t)nv * sizeof(double); }

static ct_status check_bootstrap(const ct_metric *m, const ct_uncertainty_config *cfg) {
    if (cm_of(m)->kind == CT_CONFUSION_MATRIX)
        return ct_error(CT_ERR_INVALID_ARG, "the confusion matrix reports counts; it has no bootstrap");
    if (cfg->resamples < 1 || cfg->resamples > (int64_t)UINT32_MAX + 1)
        return ct_error(CT_ERR_INVALID_ARG, "resamples = %lld; expected 1 to 2^32", (long long)cfg->resamples);
    if (ct_confusion_classes(m) == 0 || total(m) == 0)
        return ct_error(CT_ERR_STATE, "no sample seen: nothing to resample");
    return CT_OK;
}

ct_status ct_confusion_bootstrap_values(const ct_metric *m, const ct_uncertainty_config *cfg, double **values,
                                        int *n_values) {
    CT_ASSERT(m && cfg && values && n_values);
    *values = NULL;
    *n_values = 0;
    if (m->ops->update != confusion_update)
        return ct_error(CT_ERR_INVALID_ARG, "metric '%s' is not a confusion-matrix metric", ct_metric_name(m));
    ct_status s = check_bootstrap(m, cfg);
    if (s != CT_OK) return ct_error_prefix(s, "metric '%s': ", ct_metric_name(m));
    const confusion_metric *cm = cm_of(m);
    int64_t c = ct_confusion_classes(m), nv = n_values_of(cm->kind, cm->average, c);
    double *v = malloc((size_t)nv * (size_t)cfg->resamples * sizeof *v);
    if (!v) return ct_error(CT_ERR_NOMEM, "metric '%s': out of memory for %lld bootstrap values", ct_metric_name(m),
                            (long long)(nv * cfg->resamples));
    stat_ctx x = {.kind = cm->kind, .average = cm->average, .c = c, .first = 0, .count = nv};
    s = ct_bootstrap_cells(cfg, m->counts, c * c, cells_stat, &x, scratch_bytes(c, nv), (int)nv, v);
    if (s != CT_OK) {
        free(v);
        return ct_error_prefix(s, "metric '%s': ", ct_metric_name(m));
    }
    *values = v;
    *n_values = (int)nv;
    return CT_OK;
}

static ct_status confusion_uncertainty(const ct_metric *m, const ct_uncertainty_config *cfg, const char *prefix,
                                       json_t *out) {
    const confusion_metric *cm = cm_of(m);
    if (cm->kind == CT_CONFUSION_MATRIX || cfg->resamples == 0 || ct_confusion_classes(m) == 0 || total(m) == 0)
        return CT_OK; /* counts, bootstrap off, or no value */
    CT_TRY(check_bootstrap(m, cfg));
    int64_t c = ct_confusion_classes(m), nv = n_values_of(cm->kind, cm->average, c), R = cfg->resamples;
    int64_t chunk = (int64_t)(VALUES_BUDGET / sizeof(double) / (size_t)R);
    chunk = chunk < 1 ? 1 : chunk > nv ? nv : chunk;
    double *v = malloc((size_t)chunk * (size_t)R * sizeof *v);
    double *se = malloc((size_t)nv * 3 * sizeof *se), *lo = se ? se + nv : NULL, *hi = se ? se + 2 * nv : NULL;
    ct_status s = CT_OK;
    if (!v || !se) s = ct_error(CT_ERR_NOMEM, "out of memory for %lld bootstrap values", (long long)(chunk * R));
    for (int64_t first = 0; s == CT_OK && first < nv; first += chunk) {
        stat_ctx x = {.kind = cm->kind, .average = cm->average, .c = c, .first = first,
                      .count = CT_MIN(chunk, nv - first)};
        s = ct_bootstrap_cells(cfg, m->counts, c * c, cells_stat, &x, scratch_bytes(c, nv), (int)x.count, v);
        for (int64_t j = 0; s == CT_OK && j < x.count; j++) {
            se[first + j] = ct_bootstrap_stderr(v + j * R, R);
            s = ct_bootstrap_interval(v + j * R, R, cfg->confidence, &lo[first + j], &hi[first + j]);
        }
    }
    char name[64], key[96];
    value_name(cm, name, sizeof name);
    if (s == CT_OK && cm->average == CT_AVERAGE_PER_CLASS && averaged(cm->kind)) {
        static const char *const suffix[3] = {"stderr", "ci_low", "ci_high"};
        for (int i = 0; s == CT_OK && i < 3; i++) {
            snprintf(key, sizeof key, "%s_%s", name, suffix[i]);
            s = put_list(out, prefix, key, i == 0 ? se : i == 1 ? lo : hi, nv);
        }
    } else if (s == CT_OK)
        s = ct_uncertainty_put(out, prefix, name, se[0], lo[0], hi[0]);
    free(v);
    free(se);
    return s;
}

static bool confusion_same_config(const ct_metric *a, const ct_metric *b) {
    return cm_of(a)->kind == cm_of(b)->kind && cm_of(a)->average == cm_of(b)->average;
}

#define CONFUSION_OPS(NAME)                                                                                   \
    {.size = sizeof(ct_metric_ops), .name = NAME, .update = confusion_update, .compute = confusion_compute, \
     .same_config = confusion_same_config, .uncertainty = confusion_uncertainty, .takes_class_values = true}
static const ct_metric_ops confusion_ops[] = {CONFUSION_OPS("confusion_matrix"), CONFUSION_OPS("precision"),
                                              CONFUSION_OPS("recall"),           CONFUSION_OPS("f1"),
                                              CONFUSION_OPS("mcc"),              CONFUSION_OPS("balanced_accuracy")};

ct_status ct_confusion_metric_create(ct_confusion_kind kind, ct_average average, ct_metric **out) {
    CT_ASSERT(out);
    CT_ASSERT(kind >= CT_CONFUSION_MATRIX && kind <= CT_CONFUSION_BALANCED_ACCURACY);
    CT_ASSERT(average >= CT_AVERAGE_MICRO && average <= CT_AVERAGE_PER_CLASS);
    *out = NULL;
    confusion_metric *cm = calloc(1, sizeof *cm);
    if (!cm) return ct_error(CT_ERR_NOMEM, "metric '%s': out of memory", kind_names[kind]);
    /* Blank until the first batch says C (ct_metric_redeclare). */
    ct_status s = ct_metric_base_init(&cm->base, &confusion_ops[kind], 0, NULL, 0, NULL);
    if (s != CT_OK) {
        free(cm);
        return s;
    }
    cm->kind = kind;
    cm->average = averaged(kind) ? average : CT_AVERAGE_MACRO;
    *out = &cm->base;
    return CT_OK;
}

/* --- JSON --------------------------------------------------------------------------------------- */

static int find(const char *const *names, const char *s, size_t len) {
    for (int i = 0; names[i]; i++)
        if (strlen(names[i]) == len && strncmp(names[i], s, len) == 0) return i;
    return -1;
}

/* "f1" -> (f1, macro); "recall_per_class" -> (recall, per_class); -1 when not a confusion name. */
static int parse_name(const char *name, ct_average *average) {
    *average = CT_AVERAGE_MACRO;
    int k = find(ct_confusion_metric_names, name, strlen(name));
    if (k >= 0) return k;
    for (int kind = CT_CONFUSION_PRECISION; kind <= CT_CONFUSION_F1; kind++) {
        size_t len = strlen(kind_names[kind]);
        if (strncmp(name, kind_names[kind], len) == 0 && name[len] == '_') {
            int a = find(average_names, name + len + 1, strlen(name + len + 1));
            if (a >= 0) {
                *average = (ct_average)a;
                return kind;
            }
        }
    }
    return -1;
}

bool ct_confusion_metric_knows(const char *name) {
    ct_average a;
    return name && parse_name(name, &a) >= 0;
}

ct_status ct_confusion_metric_from_json(const json_t *spec, const char *path, ct_metric **out) {
    CT_ASSERT(out);
    *out = NULL;
    if (!path) path = "metric";
    ct_average average;
    if (json_is_string(spec)) {
        const char *name = json_string_value(spec);
        int kind = parse_name(name, &average);
        if (kind < 0) return ct_error(CT_ERR_CONFIG, "%s: '%s' is not a confusion-matrix metric", path, name);
        return ct_metric_spec_error(ct_confusion_metric_create((ct_confusion_kind)kind, average, out), path);
    }
    if (!json_is_object(spec))
        return ct_error(CT_ERR_CONFIG, "%s: expected a metric name (\"f1\") or an object with a \"type\"", path);
    const char *type;
    CT_TRY(ct_json_string(spec, path, "type", true, NULL, &type));
    int kind = parse_name(type, &average);
    if (kind < 0) return ct_error(CT_ERR_CONFIG, "%s.type: '%s' is not a confusion-matrix metric", path, type);
    if (averaged((ct_confusion_kind)kind) && find(ct_confusion_metric_names, type, strlen(type)) >= 0) {
        static const char *const keys[] = {"type", "average", NULL};
        CT_TRY(ct_json_check_keys(spec, path, keys));
        const char *a;
        CT_TRY(ct_json_string(spec, path, "average", false, "macro", &a));
        int ai = find(average_names, a, strlen(a));
        if (ai < 0) {
            const char *hint = ct_closest_word(a, average_names);
            if (hint)
                return ct_error(CT_ERR_CONFIG, "%s.average: unknown average '%s', did you mean '%s'?", path, a, hint);
            return ct_error(CT_ERR_CONFIG, "%s.average: unknown average '%s' (known: micro, macro, weighted, per_class)",
                            path, a);
        }
        average = (ct_average)ai;
    } else {
        static const char *const keys[] = {"type", NULL};
        CT_TRY(ct_json_check_keys(spec, path, keys));
    }
    return ct_metric_spec_error(ct_confusion_metric_create((ct_confusion_kind)kind, average, out), path);
}
