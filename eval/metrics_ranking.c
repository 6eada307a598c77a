/* Exact ranking metrics: "auroc" (area under the ROC curve) and "average_precision", with
 * scikit-learn's semantics (roc_auc_score, average_precision_score), binary or one-vs-rest.
 *
 * Input. Binary: outputs [rows] or [rows, 1] (one logit: the score) or [rows, 2] (two logits: the
 * score is logit1 - logit0, which orders rows exactly as the softmax probability of class 1 does),
 * labels 0/1. Multiclass (outputs [rows, C], C >= 3, labels in [0, C)): one-vs-rest as
 * roc_auc_score(multi_class="ovr") and average_precision_score on the binarised labels; class c's
 * score is its softmax probability, computed in float64 (scikit-learn's multiclass AUROC takes
 * probabilities, and ranking rows by p_c is not ranking them by logit c). "average": "macro"
 * (default, key "auroc") or "weighted" by class support (key "auroc_weighted"); ignored for binary
 * data, as scikit-learn ignores it.
 *
 * State. Neither value is a function of fixed-size sums, so the metric keeps one record per real
 * row: binary (score, label), multiclass (p_0 .. p_{C-1}, label): 16 or 8 (C + 1) bytes per
 * sample, at most 2^30 samples (the sorted orders index them in 30 bits). The record width, fixed by the
 * first batch with real rows, tells the two apart; merge appends records, so any split of the data
 * merges to the same records and the same values.
 *
 * Values, exactly as scikit-learn (ties included). Rows are sorted by descending score once and
 * swept one tie group (equal scores) at a time:
 *   AUROC = 1 - sum_g pos_g (2 neg_above_g + neg_g) / (2 P N): the trapezoid over distinct
 *           thresholds, i.e. Mann-Whitney with tied (positive, negative) pairs counted 1/2, kept in
 *           int64 until the one division;
 *   AP    = sum_g (pos_g / P) precision_g, precision_g = tps / (tps + fps) after group g: the step
 *           sum without interpolation.
 * Undefined values are JSON null (scikit-learn raises ValueError or returns a placeholder):
 *   - AUROC of a class with no positives or no negatives ("Only one class present in y_true");
 *     macro and weighted AUROC are null when any class's AUROC is, as scikit-learn raises;
 *   - AP of a class with no positives (scikit-learn warns "No positive class found in y_true" and
 *     returns 0, a placeholder that would drag a mean down silently): the binary value and the
 *     macro mean are null; the weighted mean gives such a class weight 0, as scikit-learn does, so
 *     it stays defined;
 *   - any non-finite score (NaN or inf logits; scikit-learn rejects them).
 *
 * Uncertainty: percentile bootstrap over the kept samples (ct_bootstrap_samples: resample b draws n
 * indices with replacement from its own Philox stream and hands over each sample's multiplicity).
 * Each class's order is sorted once (O(C n log n)); a resample is then one O(n) sweep per class
 * over the presorted order, weighting each sample by its multiplicity (a sample drawn twice is two
 * tied rows): O(resamples x C x n) in all, no sorting per resample. Resamples on which the value is
 * undefined (a class drawn zero times) are left out of the interval (uncertainty.h's rule). Sample
 * k of the resampling is the k-th record in ascending lexicographic order of the records' values
 * (label last), so the interval, like the value, depends only on the records and the seed: not on
 * the batch size, the merge order or the number of processes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/util.h"
#include "eval/metric.h"
#include "eval/uncertainty.h"

typedef struct ranking_metric {
    ct_metric base;
    ct_ranking_kind kind;
    ct_ranking_average average;
} ranking_metric;

static const ranking_metric *rank_of(const ct_metric *m) { return ct_container_of(m, const ranking_metric, base); }

/* Indexed by ct_ranking_kind. */
const char *const ct_ranking_metric_names[] = {"auroc", "average_precision", NULL};

/* The key: "auroc" (binary or macro), "auroc_weighted". */
static void key_name(const ct_metric *m, char *buf, size_t cap) {
    const ranking_metric *r = rank_of(m);
    snprintf(buf, cap, "%s%s", ct_ranking_metric_names[r->kind], r->average == CT_RANKING_WEIGHTED ? "_weighted" : "");
}

/* Sorted orders hold a sample index in the low 30 bits and two flags. */
#define POS_BIT 0x80000000u   /* the sample is a positive of this class */
#define END_BIT 0x40000000u   /* the last sample of its tie group */
#define INDEX_MASK 0x3fffffffu
#define MAX_SAMPLES ((int64_t)INDEX_MASK + 1)

/* --- update ------------------------------------------------------------------------------------- */

static inline double out_at(const ct_tensor *t, int64_t i) {
    return t->dtype == CT_F32 ? (double)((const float *)t->data)[i] : ((const double *)t->data)[i];
}

/* "binary scores" or "5 classes", for messages about the record width. */
static const char *describe_width(int width, char *buf, size_t cap) {
    if (width == 2)
        snprintf(buf, cap, "binary scores");
    else
        snprintf(buf, cap, "%d classes", width - 1);
    return buf;
}

static ct_status ranking_update(ct_metric *m, const ct_eval_batch *b) {
    char t[128], u[64], v[64];
    const ct_tensor *o = b->outputs, *l = b->labels;
    if (!o)
        return ct_error(CT_ERR_INVALID_ARG,
                        "needs the model's outputs (binary scores [rows], [rows, 1] or [rows, 2], or class scores "
                        "[rows, classes])");
    if (!l) return ct_error(CT_ERR_INVALID_ARG, "needs labels, and the data has none");
    if (o->ndim > 2 || (o->ndim == 2 && o->shape[1] < 1))
        return ct_error(CT_ERR_SHAPE,
                        "outputs %s: expected binary scores [rows], [rows, 1] or [rows, 2], or class scores "
                        "[rows, classes]",
                        ct_tensor_str(o, t, sizeof t));
    int64_t rows = o->shape[0], c = o->ndim == 1 ? 1 : o->shape[1];
    if ((l->dtype != CT_I64 && l->dtype != CT_I32) || l->ndim != 1 || l->shape[0] != rows)
        return ct_error(CT_ERR_SHAPE, "labels %s: expected class ids [%lld] int64 or int32",
                        ct_tensor_str(l, t, sizeof t), (long long)rows);
    if (c >= INT32_MAX) return ct_error(CT_ERR_SHAPE, "outputs %s: too many classes", ct_tensor_str(o, t, sizeof t));
    bool binary = c <= 2;
    int width = binary ? 2 : (int)c + 1;
    int64_t classes = binary ? 2 : c;
    if (m->samples.width != 0 && m->samples.width != width)
        return ct_error(CT_ERR_SHAPE, "outputs %s give %s, but the earlier batches gave %s",
                        ct_tensor_str(o, t, sizeof t), describe_width(width, u, sizeof u),
                        describe_width(m->samples.width, v, sizeof v));
    int64_t real = 0;
    for (int64_t i = 0; i < rows; i++) {
        if (!ct_metric_row_real(b, i)) continue;
        int64_t y = ct_metric_label(l, i);
        if (y < 0 || y >= classes) {
            if (binary)
                return ct_error(CT_ERR_INVALID_ARG,
                                "label %lld at row %lld of the batch; binary scores (outputs with %lld column%s) "
                                "need labels 0 or 1",
                                (long long)y, (long long)i, (long long)c, c == 1 ? "" : "s");
            return ct_error(CT_ERR_INVALID_ARG,
                            "label %lld at row %lld of the batch is outside [0, %lld) (outputs have %lld classes)",
                            (long long)y, (long long)i, (long long)c, (long long)c);
        }
        real++;
    }
    if (real == 0) return CT_OK;
    if (m->samples.n + real > MAX_SAMPLES)
        return ct_error(CT_ERR_UNSUPPORTED, "more than %lld samples (2^30) to rank", (long long)MAX_SAMPLES);
    /* Everything that can fail happens before a record is written, so a failing batch leaves the
     * state as it was; the records are then written in place into the reserved room. */
    CT_TRY(ct_metric_keep_samples(m, width));
    CT_TRY(ct_metric_samples_reserve(m, real));
    double *rec = m->samples.values + m->samples.n * width;
    for (int64_t i = 0; i < rows; i++) {
        if (!ct_metric_row_real(b, i)) continue;
        if (binary) {
            rec[0] = c == 1 ? out_at(o, i) : out_at(o, 2 * i + 1) - out_at(o, 2 * i);
        } else {
            /* softmax in float64: max-shifted exponentials summed in class order */
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < c; j++) mx = fmax(mx, out_at(o, i * c + j));
            for (int64_t j = 0; j < c; j++) {
                rec[j] = exp(out_at(o, i * c + j) - mx);
                sum += rec[j];
            }
            for (int64_t j = 0; j < c; j++) rec[j] /= sum;
        }
        rec[width - 1] = (double)ct_metric_label(l, i);
        rec += width;
    }
    m->samples.n += real;
    return CT_OK;
}

/* --- ranking ------------------------------------------------------------------------------------ */

/* The records sorted per ranked column: binary has one (the score, positives = label 1), multiclass
 * one per class (p_c, positives = label c). */
typedef struct ranked {
    int64_t n, columns;
    uint32_t *order; /* columns x n: canonical index | POS_BIT | END_BIT, by descending score */
    int64_t *support; /* positives per column */
} ranked;

typedef struct scored {
    double s;
    uint32_t i;
} scored;

/* A record for the canonical order: its values (width doubles, the label last). */
typedef struct record_ref {
    const double *v;
    int width;
    uint32_t i;
} record_ref;

/* Ascending lexicographic order of the records' values; equal records are interchangeable, the
 * index only makes the order total. */
static int cmp_record(const void *pa, const void *pb) {
    const record_ref *a = pa, *b = pb;
    for (int j = 0; j < a->width; j++)
        if (a->v[j] != b->v[j]) return a->v[j] < b->v[j] ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

static int cmp_desc(const void *pa, const void *pb) {
    const scored *a = pa, *b = pb;
    if (a->s != b->s) return a->s > b->s ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i); /* any order within a tie; this one keeps qsort deterministic */
}

static void ranked_free(ranked *r) {
    free(r->order);
    free(r->support);
    *r = (ranked){0};
}

/* Whether every score is finite (records hold nothing else but the label). */
static bool scores_finite(const ct_metric_samples *s) {
    for (int64_t i = 0; i < s->n; i++)
        for (int j = 0; j < s->width - 1; j++)
            if (!isfinite(s->values[i * s->width + j])) return false;
    return true;
}

/* Sorts every column once. The scores must be finite (NaN has no place in an order).
 *
 * Samples are numbered by their canonical position, the ascending lexicographic order of their
 * records, not by arrival: the bootstrap's multiplicity b of sample k then belongs to the k-th
 * record of that order, so the interval depends only on the multiset of records and the seed, not
 * on the batch size, the order in which shards were merged or the number of processes. */
static ct_status ranked_build(const ct_metric *m, ranked *r) {
    const ct_metric_samples *s = &m->samples;
    int64_t n = s->n;
    int width = s->width;
    *r = (ranked){.n = n, .columns = width == 2 ? 1 : width - 1};
    r->order = malloc((size_t)(r->columns * n) * sizeof *r->order);
    r->support = calloc((size_t)r->columns, sizeof *r->support);
    scored *tmp = malloc((size_t)n * sizeof *tmp);
    record_ref *recs = malloc((size_t)n * sizeof *recs);
    uint32_t *canon = malloc((size_t)n * sizeof *canon);
    if (!r->order || !r->support || !tmp || !recs || !canon) {
        free(tmp);
        free(recs);
        free(canon);
        ranked_free(r);
        return ct_error(CT_ERR_NOMEM, "out of memory sorting %lld samples", (long long)n);
    }
    for (int64_t i = 0; i < n; i++) recs[i] = (record_ref){s->values + i * width, width, (uint32_t)i};
    qsort(recs, (size_t)n, sizeof *recs, cmp_record);
    for (int64_t k = 0; k < n; k++) canon[recs[k].i] = (uint32_t)k;
    free(recs);
    for (int64_t c = 0; c < r->columns; c++) {
        /* binary: column 0 is the score and the positive label is 1; multiclass: column c, label c */
        int64_t pos_label = width == 2 ? 1 : c;
        for (int64_t i = 0; i < n; i++) tmp[i] = (scored){s->values[i * width + c], (uint32_t)i};
        qsort(tmp, (size_t)n, sizeof *tmp, cmp_desc);
        uint32_t *ord = r->order + c * n;
        for (int64_t k = 0; k < n; k++) {
            uint32_t i = tmp[k].i;
            bool pos = s->values[(int64_t)i * width + width - 1] == (double)pos_label;
            r->support[c] += pos;
            ord[k] = canon[i] | (pos ? POS_BIT : 0) | (k == n - 1 || tmp[k + 1].s != tmp[k].s ? END_BIT : 0);
        }
    }
    free(tmp);
    free(canon);
    return CT_OK;
}

/* One column's AUROC (ap false) or AP (ap true) with sample k counted mult[k] times (mult NULL:
 * once each); *positives = the column's positives in this (re)sample. NaN where undefined. The
 * sample loop has no data-dependent branch but the tie-group end: whether a sample is a positive is
 * a coin flip to a branch predictor. */
static inline double sweep(const uint32_t *ord, int64_t n, const int64_t *mult, bool ap, int64_t *positives) {
    int64_t tps = 0, fps = 0, gp = 0, gn = 0, bad2 = 0;
    double prec_sum = 0;
    for (int64_t k = 0; k < n; k++) {
        uint32_t e = ord[k];
        int64_t w = mult ? mult[e & INDEX_MASK] : 1;
        int64_t is_pos = -(int64_t)(e >> 31); /* all ones for a positive (POS_BIT is bit 31) */
        gp += w & is_pos;
        gn += w & ~is_pos;
        if (e & END_BIT) {
            /* the group's positives against the negatives above it (count 1) and tied (1/2) */
            bad2 += gp * (2 * fps + gn);
            tps += gp;
            fps += gn;
            /* precision after the group, weighted by its recall step (0 for a group without positives) */
            if (ap) prec_sum += (double)gp * ((double)tps / (double)(tps + fps > 0 ? tps + fps : 1));
            gp = gn = 0;
        }
    }
    *positives = tps;
    if (ap) return tps > 0 ? prec_sum / (double)tps : NAN;
    int64_t pairs2 = 2 * tps * fps;
    return tps > 0 && fps > 0 ? (double)(pairs2 - bad2) / (double)pairs2 : NAN;
}

/* The metric's value over all columns, from per-column values v[] and positives pos[] (see the
 * rules at the top of the file). */
static double combine(ct_ranking_kind kind, ct_ranking_average average, const double *v, const int64_t *pos,
                      int64_t columns) {
    if (columns == 1) return v[0];
    double num = 0, den = 0;
    for (int64_t c = 0; c < columns; c++) {
        if (isnan(v[c])) {
            /* weighted AP: a class without positives has weight 0 */
            if (kind == CT_RANKING_AVERAGE_PRECISION && average == CT_RANKING_WEIGHTED && pos[c] == 0) continue;
            return NAN;
        }
        double w = average == CT_RANKING_WEIGHTED ? (double)pos[c] : 1.0;
        num += w * v[c];
        den += w;
    }
    return den > 0 ? num / den : NAN;
}

typedef struct stat_ctx {
    const ranked *r;
    ct_ranking_kind kind;
    ct_ranking_average average;
} stat_ctx;

/* scratch: columns doubles, then columns int64. */
static void ranking_stat(const int64_t *mult, int64_t n, const void *ctx, void *scratch, double *values) {
    const stat_ctx *x = ctx;
    const ranked *r = x->r;
    double *v = scratch;
    int64_t *pos = (int64_t *)(v + r->columns);
    bool ap = x->kind == CT_RANKING_AVERAGE_PRECISION;
    for (int64_t c = 0; c < r->columns; c++) v[c] = sweep(r->order + c * n, n, mult, ap, &pos[c]);
    values[0] = combine(x->kind, x->average, v, pos, r->columns);
}

static size_t stat_scratch(const ranked *r) { return (size_t)r->columns * (sizeof(double) + sizeof(int64_t)); }

/* --- compute and uncertainty -------------------------------------------------------------------- */

static ct_status point_value(const ct_metric *m, const ranked *r, double *value) {
    const ranking_metric *rm = rank_of(m);
    void *scratch = malloc(stat_scratch(r));
    if (!scratch) return ct_error(CT_ERR_NOMEM, "out of memory");
    stat_ctx x = {r, rm->kind, rm->average};
    ranking_stat(NULL, r->n, &x, scratch, value);
    free(scratch);
    return CT_OK;
}

static ct_status ranking_compute(const ct_metric *m, const char *prefix, json_t *out) {
    if (m->samples.n == 0) return CT_OK; /* nothing seen: no key */
    char key[64];
    key_name(m, key, sizeof key);
    if (!scores_finite(&m->samples)) return ct_metric_put(out, prefix, key, NAN);
    ranked r;
    CT_TRY(ranked_build(m, &r));
    double value;
    ct_status s = point_value(m, &r, &value);
    ranked_free(&r);
    CT_TRY(s);
    return ct_metric_put(out, prefix, key, value);
}

static ct_status ranking_uncertainty(const ct_metric *m, const ct_uncertainty_config *cfg, const char *prefix,
                                     json_t *out) {
    if (m->samples.n == 0 || cfg->resamples == 0) return CT_OK; /* no value, or no bootstrap asked for */
    char key[64];
    key_name(m, key, sizeof key);
    if (!scores_finite(&m->samples)) return ct_uncertainty_put(out, prefix, key, NAN, NAN, NAN);
    ranked r;
    CT_TRY(ranked_build(m, &r));
    double value;
    ct_status s = point_value(m, &r, &value);
    if (s == CT_OK && isnan(value)) {
        /* undefined on the data itself (a class never present): so is its interval */
        ranked_free(&r);
        return ct_uncertainty_put(out, prefix, key, NAN, NAN, NAN);
    }
    double *values = s == CT_OK ? malloc((size_t)cfg->resamples * sizeof *values) : NULL;
    if (s == CT_OK && !values)
        s = ct_error(CT_ERR_NOMEM, "out of memory for %lld bootstrap values", (long long)cfg->resamples);
    if (s == CT_OK) {
        stat_ctx x = {&r, rank_of(m)->kind, rank_of(m)->average};
        s = ct_bootstrap_samples(cfg, r.n, ranking_stat, &x, stat_scratch(&r), 1, values);
    }
    if (s == CT_OK) s = ct_bootstrap_put(out, prefix, key, values, cfg->resamples, cfg->confidence);
    free(values);
    ranked_free(&r);
    return s;
}

static bool ranking_same_config(const ct_metric *a, const ct_metric *b) {
    return rank_of(a)->kind == rank_of(b)->kind && rank_of(a)->average == rank_of(b)->average;
}

#define RANKING_OPS(NAME)                                                                                    \
    {.size = sizeof(ct_metric_ops), .name = NAME, .update = ranking_update, .compute = ranking_compute,      \
     .same_config = ranking_same_config, .uncertainty = ranking_uncertainty}
static const ct_metric_ops ranking_ops[] = {RANKING_OPS("auroc"), RANKING_OPS("average_precision")};

/* --- constructors and JSON ---------------------------------------------------------------------- */

ct_status ct_ranking_metric_create(ct_ranking_kind kind, ct_ranking_average average, ct_metric **out) {
    CT_ASSERT(out);
    CT_ASSERT(kind == CT_RANKING_AUROC || kind == CT_RANKING_AVERAGE_PRECISION);
    *out = NULL;
    if (average != CT_RANKING_MACRO && average != CT_RANKING_WEIGHTED)
        return ct_error(CT_ERR_INVALID_ARG, "metric '%s': average = %d; expected macro or weighted",
                        ct_ranking_metric_names[kind], (int)average);
    ranking_metric *r = calloc(1, sizeof *r);
    if (!r) return ct_error(CT_ERR_NOMEM, "metric '%s': out of memory", ct_ranking_metric_names[kind]);
    r->kind = kind;
    r->average = average;
    /* No fields, and the record width comes with the first batch (binary or C classes). */
    ct_status s = ct_metric_base_init(&r->base, &ranking_ops[kind], 0, NULL, 0, NULL);
    if (s != CT_OK) {
        free(r);
        return s;
    }
    *out = &r->base;
    return CT_OK;
}

ct_status ct_ranking_metric_from_json(const json_t *spec, const char *path, ct_metric **out) {
    CT_ASSERT(out);
    *out = NULL;
    if (!path) path = "metric";
    if (json_is_string(spec)) {
        int kind;
        CT_TRY(ct_metric_kind_index(json_string_value(spec), ct_ranking_metric_names, "ranking", path, &kind));
        return ct_metric_spec_error(ct_ranking_metric_create((ct_ranking_kind)kind, CT_RANKING_MACRO, out), path);
    }
    if (!json_is_object(spec))
        return ct_error(CT_ERR_CONFIG, "%s: expected a metric name (\"auroc\") or an object with a \"type\"", path);
    const char *type;
    CT_TRY(ct_json_string(spec, path, "type", true, NULL, &type));
    char type_path[512];
    snprintf(type_path, sizeof type_path, "%s.type", path);
    int kind;
    CT_TRY(ct_metric_kind_index(type, ct_ranking_metric_names, "ranking", type_path, &kind));
    static const char *const keys[] = {"type", "average", NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys));
    const char *average;
    CT_TRY(ct_json_string(spec, path, "average", false, "macro", &average));
    static const char *const averages[] = {"macro", "weighted", NULL};
    if (strcmp(average, "macro") != 0 && strcmp(average, "weighted") != 0) {
        const char *hint = ct_closest_word(average, averages);
        if (hint)
            return ct_error(CT_ERR_CONFIG, "%s.average: unknown value '%s', did you mean '%s'?", path, average, hint);
        return ct_error(CT_ERR_CONFIG, "%s.average: unknown value '%s' (allowed: macro, weighted)", path, average);
    }
    return ct_metric_spec_error(ct_ranking_metric_create((ct_ranking_kind)kind,
                                            strcmp(average, "weighted") == 0 ? CT_RANKING_WEIGHTED : CT_RANKING_MACRO,
                                            out),
                   path);
}
