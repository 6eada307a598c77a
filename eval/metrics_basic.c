/* The built-in metrics (loss, accuracy, top_k_accuracy), the JSON specs of every metric family
 * (dispatching to metrics_confusion.c, metrics_regression.c, metrics_lm.c, metrics_ranking.c), and
 * metric sets from a run config's "metrics" list.
 *
 * Uncertainty, all closed forms (eval/uncertainty.h), reported even with resamples = 0:
 *  - accuracy and top-k accuracy are binomial proportions: stderr sqrt(p(1-p)/n), Wilson interval.
 *  - loss: when every batch that carried a loss also carried per-row losses (ct_eval_batch's
 *    sample_loss = the row's loss sum, sample_weight = its count), the rows are the sampled units
 *    and the loss sum(sample_loss) / sum(sample_weight) is a ratio estimator; its stderr is the
 *    delta-method one, se^2 = n/(n-1) sum_i (s_i - L w_i)^2 / (sum w)^2 (s_i the row's loss sum,
 *    w_i its weight, n the real rows), kept as mergeable sums of w, s, w^2, w s, s^2
 *    (ct_ratio_sums); with unit weights it is the mean's s/sqrt(n). Normal interval. Without per-row
 *    losses (or when some batch lacked them) the loss has no uncertainty keys.
 *
 * Each state is integers and float64 sums only, so any split of the data merges to the same state.
 * Classification metrics count into locals and add to the state at the end, so a failing batch
 * leaves the state as it was. Accuracy and top-k read a batch's class ranks (ct_op_class_ranks, one
 * pass shared by every classification metric, where the outputs are): rankings treat NaN as the
 * largest score, as numpy's argmax and argsort do; ties are broken as torch.argmax/numpy.argmax
 * (accuracy: lowest index) and as scikit-learn's top_k_accuracy_score (top_k: the higher class index
 * ranks first). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/registry.h"
#include "core/util.h"
#include "eval/metric.h"
#include "eval/uncertainty.h"

/* --- loss --------------------------------------------------------------------------------------- */

/* UNCOVERED: the loss count of batches without per-row losses (a sum over rows, so any split of the
 * data gives the same state); LOSS_ROWS: real rows that came with per-row losses. */
enum { LOSS_SUM, LOSS_COUNT, UNCOVERED, R_W, R_WL, R_W2, R_W2L, R_W2L2, LOSS_SUMS };
enum { LOSS_ROWS, LOSS_COUNTS };

static ct_status loss_update(ct_metric *m, const ct_eval_batch *b) {
    if (b->sample_loss) {
        /* check_batch validated both tensors: float64 [rows], weights finite and >= 0 */
        const double *l = b->sample_loss->data, *w = b->sample_weight->data;
        int64_t rows = b->sample_loss->shape[0], n = 0;
        ct_ratio_sums r = {0};
        for (int64_t i = 0; i < rows; i++)
            if (ct_metric_row_real(b, i)) {
                ct_ratio_sums_add_total(&r, w[i], l[i]);
                n++;
            }
        m->counts[LOSS_ROWS] += n;
        m->sums[R_W] += r.w;
        m->sums[R_WL] += r.wl;
        m->sums[R_W2] += r.w2;
        m->sums[R_W2L] += r.w2l;
        m->sums[R_W2L2] += r.w2l2;
    } else
        m->sums[UNCOVERED] += b->loss.count;
    m->sums[LOSS_SUM] += b->loss.sum;
    m->sums[LOSS_COUNT] += b->loss.count;
    return CT_OK;
}

static ct_status loss_compute(const ct_metric *m, const char *prefix, json_t *out) {
    if (m->sums[LOSS_COUNT] == 0) return CT_OK; /* no loss was computed: no key, as Hugging Face */
    return ct_metric_put(out, prefix, "loss", m->sums[LOSS_SUM] / m->sums[LOSS_COUNT]);
}

static ct_status loss_uncertainty(const ct_metric *m, const ct_uncertainty_config *cfg, const char *prefix,
                                  json_t *out) {
    if (m->sums[LOSS_COUNT] == 0 || m->sums[UNCOVERED] > 0 || m->counts[LOSS_ROWS] == 0) return CT_OK;
    ct_ratio_sums r = {.n = (double)m->counts[LOSS_ROWS], .w = m->sums[R_W], .wl = m->sums[R_WL],
                       .w2 = m->sums[R_W2], .w2l = m->sums[R_W2L], .w2l2 = m->sums[R_W2L2]};
    double mean, se, lo, hi;
    ct_ratio_interval(&r, cfg->confidence, &mean, &se, &lo, &hi);
    return ct_uncertainty_put(out, prefix, "loss", se, lo, hi);
}

static const ct_metric_ops loss_ops = {.size = sizeof(ct_metric_ops),
                                       .name = "loss",
                                       .update = loss_update,
                                       .compute = loss_compute,
                                       .uncertainty = loss_uncertainty};

bool ct_metric_set_reads_outputs(const ct_metric_set *s) {
    for (int i = 0; i < s->n; i++)
        if (s->items[i]->ops != &loss_ops && !ct_metric_takes_token_values(s->items[i]) &&
            !ct_metric_takes_class_values(s->items[i]))
            return true;
    return false;
}

bool ct_metric_set_takes_token_values(const ct_metric_set *s) {
    for (int i = 0; i < s->n; i++)
        if (ct_metric_takes_token_values(s->items[i])) return true;
    return false;
}

bool ct_metric_set_takes_class_values(const ct_metric_set *s) {
    for (int i = 0; i < s->n; i++)
        if (ct_metric_takes_class_values(s->items[i])) return true;
    return false;
}

ct_status ct_loss_metric_create(ct_metric **out) {
    CT_ASSERT(out);
    *out = NULL;
    ct_metric *m = calloc(1, sizeof *m);
    if (!m) return ct_error(CT_ERR_NOMEM, "metric 'loss': out of memory");
    ct_status s = ct_metric_base_init(m, &loss_ops, LOSS_COUNTS, NULL, LOSS_SUMS, NULL);
    if (s != CT_OK) {
        free(m);
        return s;
    }
    *out = m;
    return CT_OK;
}

/* --- accuracy ----------------------------------------------------------------------------------- */

enum { CORRECT, TOTAL };

/* A batch's real rows, and those that count: the label in the top k (fewer than k classes above it)
 * or, for accuracy (k 0), the prediction equal to the label. The two differ on ties: the label ties
 * with a lower class, torch.argmax picks the lower one, and scikit-learn's order ranks the label first. */
static ct_status count_hits(const ct_eval_batch *b, int64_t k, int64_t *hits, int64_t *total) {
    int64_t rows, c, *own;
    CT_TRY(ct_metric_check_classification(b, &rows, &c));
    ct_class_values cv;
    CT_TRY(ct_metric_class_values(b, &cv, &own));
    *hits = *total = 0;
    for (int64_t i = 0; i < rows; i++) {
        if (!ct_metric_row_real(b, i)) continue;
        *hits += k > 0 ? cv.above[i] < k : cv.pred[i] == ct_metric_label(b->labels, i);
        ++*total;
    }
    free(own);
    return CT_OK;
}

static ct_status accuracy_update(ct_metric *m, const ct_eval_batch *b) {
    int64_t correct, total;
    CT_TRY(count_hits(b, 0, &correct, &total));
    m->counts[CORRECT] += correct;
    m->counts[TOTAL] += total;
    return CT_OK;
}

static ct_status accuracy_compute(const ct_metric *m, const char *prefix, json_t *out) {
    if (m->counts[TOTAL] == 0) return CT_OK;
    return ct_metric_put(out, prefix, "accuracy", (double)m->counts[CORRECT] / (double)m->counts[TOTAL]);
}

static ct_status accuracy_uncertainty(const ct_metric *m, const ct_uncertainty_config *cfg, const char *prefix,
                                      json_t *out) {
    if (m->counts[TOTAL] == 0) return CT_OK;
    double p, se, lo, hi;
    ct_proportion_interval(m->counts[CORRECT], m->counts[TOTAL], cfg->confidence, &p, &se, &lo, &hi);
    return ct_uncertainty_put(out, prefix, "accuracy", se, lo, hi);
}

static const ct_metric_ops accuracy_ops = {.size = sizeof(ct_metric_ops),
                                           .name = "accuracy",
                                           .update = accuracy_update,
                                           .compute = accuracy_compute,
                                           .uncertainty = accuracy_uncertainty,
                                           .takes_class_values = true};

ct_status ct_accuracy_metric_create(ct_metric **out) {
    CT_ASSERT(out);
    *out = NULL;
    ct_metric *m = calloc(1, sizeof *m);
    if (!m) return ct_error(CT_ERR_NOMEM, "metric 'accuracy': out of memory");
    ct_status s = ct_metric_base_init(m, &accuracy_ops, 2, NULL, 0, NULL);
    if (s != CT_OK) {
        free(m);
        return s;
    }
    *out = m;
    return CT_OK;
}

/* --- top-k accuracy ----------------------------------------------------------------------------- */

typedef struct top_k_metric {
    ct_metric base;
    int64_t k;
} top_k_metric;

static int64_t top_k_of(const ct_metric *m) { return ct_container_of(m, const top_k_metric, base)->k; }

static ct_status top_k_update(ct_metric *m, const ct_eval_batch *b) {
    int64_t hits, total;
    CT_TRY(count_hits(b, top_k_of(m), &hits, &total));
    m->counts[CORRECT] += hits;
    m->counts[TOTAL] += total;
    return CT_OK;
}

static ct_status top_k_compute(const ct_metric *m, const char *prefix, json_t *out) {
    if (m->counts[TOTAL] == 0) return CT_OK;
    char name[64];
    snprintf(name, sizeof name, "top_%lld_accuracy", (long long)top_k_of(m));
    return ct_metric_put(out, prefix, name, (double)m->counts[CORRECT] / (double)m->counts[TOTAL]);
}

static bool top_k_same_config(const ct_metric *a, const ct_metric *b) { return top_k_of(a) == top_k_of(b); }

static ct_status top_k_uncertainty(const ct_metric *m, const ct_uncertainty_config *cfg, const char *prefix,
                                   json_t *out) {
    if (m->counts[TOTAL] == 0) return CT_OK;
    char name[64];
    snprintf(name, sizeof name, "top_%lld_accuracy", (long long)top_k_of(m));
    double p, se, lo, hi;
    ct_proportion_interval(m->counts[CORRECT], m->counts[TOTAL], cfg->confidence, &p, &se, &lo, &hi);
    return ct_uncertainty_put(out, prefix, name, se, lo, hi);
}

static const ct_metric_ops top_k_ops = {.size = sizeof(ct_metric_ops),
                                        .name = "top_k_accuracy",
                                        .update = top_k_update,
                                        .compute = top_k_compute,
                                        .same_config = top_k_same_config,
                                        .uncertainty = top_k_uncertainty,
                                        .takes_class_values = true};

ct_status ct_metric_check_classes(const ct_metric *m, int64_t classes) {
    if (m->ops != &top_k_ops || top_k_of(m) <= classes) return CT_OK;
    return ct_error(CT_ERR_INVALID_ARG, "metric 'top_k_accuracy': k = %lld is more than the %lld classes the model "
                    "scores, so every sample would count as a hit (top_%lld_accuracy 1.0 whatever the model); use "
                    "k <= %lld",
                    (long long)top_k_of(m), (long long)classes, (long long)top_k_of(m), (long long)classes);
}

ct_status ct_top_k_accuracy_metric_create(int64_t k, ct_metric **out) {
    CT_ASSERT(out);
    *out = NULL;
    if (k < 1) return ct_error(CT_ERR_INVALID_ARG, "metric 'top_k_accuracy': k = %lld; expected k >= 1", (long long)k);
    top_k_metric *t = calloc(1, sizeof *t);
    if (!t) return ct_error(CT_ERR_NOMEM, "metric 'top_k_accuracy': out of memory");
    ct_status s = ct_metric_base_init(&t->base, &top_k_ops, 2, NULL, 0, NULL);
    if (s != CT_OK) {
        free(t);
        return s;
    }
    t->k = k;
    *out = &t->base;
    return CT_OK;
}

/* --- JSON --------------------------------------------------------------------------------------- */

static const char *const basic_names[] = {"loss", "accuracy", "top_k_accuracy", NULL};

/* The other metric families: their names (as strings or "type"s) and their JSON constructors. A
 * family's from_json is called only for a name it lists (or, with `knows`, accepts). */
typedef struct family {
    const char *const *names;
    bool (*knows)(const char *name);
    ct_status (*from_json)(const json_t *spec, const char *path, ct_metric **out);
} family;
static const family families[] = {
    {ct_confusion_metric_names, ct_confusion_metric_knows, ct_confusion_metric_from_json},
    {ct_regression_metric_names, NULL, ct_regression_metric_from_json},
    {ct_lm_metric_names, NULL, ct_lm_metric_from_json},
    {ct_ranking_metric_names, NULL, ct_ranking_metric_from_json},
};
#define N_FAMILIES (sizeof families / sizeof families[0])

static bool listed(const char *const *names, const char *name) {
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], name) == 0) return true;
    return false;
}

static const family *family_of(const char *name) {
    for (size_t f = 0; f < N_FAMILIES; f++)
        if (families[f].knows ? families[f].knows(name) : listed(families[f].names, name)) return &families[f];
    return NULL;
}

/* "top_5_accuracy": the key spelling of {"type": "top_k_accuracy", "k": 5}. Returns k, or 0. */
static int64_t parse_top_k_name(const char *name) {
    if (strncmp(name, "top_", 4) != 0 || name[4] < '0' || name[4] > '9') return 0;
    char *end;
    errno = 0;
    long long k = strtoll(name + 4, &end, 10);
    if (errno || strcmp(end, "_accuracy") != 0 || k < 1) return 0;
    return (int64_t)k;
}

static bool is_builtin(const char *name) {
    return listed(basic_names, name) || family_of(name) || parse_top_k_name(name) > 0;
}

static ct_registry user = CT_REGISTRY_INIT("metric type", "ct_register_metric_type", is_builtin);

ct_status ct_register_metric_type(const char *name, ct_metric_from_json_fn fn) {
    return ct_registry_add(&user, name, (ct_registry_fn)fn);
}

/* An application's metric from its registered reader, checked before anything else uses it. */
static ct_status registered(ct_metric_from_json_fn fn, const json_t *spec, const char *path, ct_metric **out) {
    ct_status s = fn(spec, path, out);
    if (s != CT_OK) {
        *out = NULL;
        return ct_registry_error(s, path);
    }
    if (!*out) return ct_error(CT_ERR_INVALID_ARG, "%s: the metric's reader returned CT_OK but no metric", path);
    if ((s = ct_metric_check(*out)) != CT_OK) {
        *out = NULL; /* a table that fails its check cannot be trusted to free itself either */
        return ct_error_prefix(s, "%s: ", path);
    }
    return CT_OK;
}

static ct_status unknown_metric(const char *path, const char *what, const char *name) {
    const char *all[64 + CT_REGISTRY_CAPACITY];
    char known[2048] = "";
    size_t n = 0, len = 0;
    for (int i = 0; basic_names[i] && n < 63; i++) all[n++] = basic_names[i];
    for (size_t f = 0; f < N_FAMILIES; f++)
        for (int i = 0; families[f].names[i] && n < 63; i++) all[n++] = families[f].names[i];
    ct_registry_names(&user, all, &n, CT_ARRAY_LEN(all));
    const char *hint = ct_closest_word(name, all);
    if (hint) return ct_error(CT_ERR_CONFIG, "%s: unknown %s '%s', did you mean '%s'?", path, what, name, hint);
    for (size_t i = 0; i < n && len < sizeof known; i++)
        len += (size_t)snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "", all[i]);
    return ct_error(CT_ERR_CONFIG, "%s: unknown %s '%s' (known: %s)", path, what, name, known);
}

static ct_status metric_from_name(const char *name, const char *path, ct_metric **out) {
    if (strcmp(name, "loss") == 0) return ct_metric_spec_error(ct_loss_metric_create(out), path);
    if (strcmp(name, "accuracy") == 0) return ct_metric_spec_error(ct_accuracy_metric_create(out), path);
    if (strcmp(name, "top_k_accuracy") == 0)
        return ct_error(CT_ERR_CONFIG,
                        "%s: 'top_k_accuracy' needs its k: write {\"type\": \"top_k_accuracy\", \"k\": 5} or "
                        "\"top_5_accuracy\"",
                        path);
    int64_t k = parse_top_k_name(name);
    if (k > 0) return ct_metric_spec_error(ct_top_k_accuracy_metric_create(k, out), path);
    return unknown_metric(path, "metric", name);
}

ct_status ct_metric_from_json(const json_t *spec, const char *path, ct_metric **out) {
    CT_ASSERT(out);
    *out = NULL;
    if (!path) path = "metric";
    if (json_is_string(spec)) {
        const family *f = family_of(json_string_value(spec));
        ct_metric_from_json_fn fn = (ct_metric_from_json_fn)ct_registry_find(&user, json_string_value(spec));
        return f ? f->from_json(spec, path, out) : fn ? registered(fn, spec, path, out)
                                                      : metric_from_name(json_string_value(spec), path, out);
    }
    if (!json_is_object(spec))
        return ct_error(CT_ERR_CONFIG, "%s: expected a metric name (\"accuracy\") or an object with a \"type\"", path);
    const char *type;
    CT_TRY(ct_json_string(spec, path, "type", true, NULL, &type));
    char type_path[512];
    snprintf(type_path, sizeof type_path, "%s.type", path);
    if (strcmp(type, "top_k_accuracy") == 0) {
        static const char *const keys[] = {"type", "k", NULL};
        CT_TRY(ct_json_check_keys(spec, path, keys));
        int64_t k;
        CT_TRY(ct_json_int(spec, path, "k", true, 0, &k));
        if (k < 1) return ct_error(CT_ERR_CONFIG, "%s.k: %lld; expected an integer >= 1", path, (long long)k);
        return ct_metric_spec_error(ct_top_k_accuracy_metric_create(k, out), path);
    }
    if (strcmp(type, "loss") == 0 || strcmp(type, "accuracy") == 0) {
        static const char *const keys[] = {"type", NULL};
        CT_TRY(ct_json_check_keys(spec, path, keys));
        return metric_from_name(type, path, out);
    }
    const family *f = family_of(type);
    if (f) return f->from_json(spec, path, out);
    ct_metric_from_json_fn fn = (ct_metric_from_json_fn)ct_registry_find(&user, type);
    if (fn) return registered(fn, spec, path, out);
    return unknown_metric(type_path, "metric type", type);
}

ct_status ct_metric_set_from_json(const json_t *list, const char *path, ct_metric_set *out) {
    CT_ASSERT(out);
    *out = (ct_metric_set){0};
    if (!path) path = "metrics";
    if (list && !json_is_array(list))
        return ct_error(CT_ERR_CONFIG, "%s: expected a list of metric names or objects, e.g. [\"accuracy\"]", path);
    ct_metric *loss;
    CT_TRY(ct_loss_metric_create(&loss));
    ct_status s = ct_metric_set_add(out, loss);
    size_t n = list ? json_array_size(list) : 0;
    char elem[512];
    for (size_t i = 0; s == CT_OK && i < n; i++) {
        snprintf(elem, sizeof elem, "%s[%zu]", path, i);
        ct_metric *m;
        s = ct_metric_from_json(json_array_get(list, i), elem, &m);
        if (s != CT_OK) break;
        if (m->ops == loss->ops) { /* "loss" is already first */
            ct_metric_free(m);
            continue;
        }
        for (int j = 0; j < out->n; j++)
            if (ct_metric_compatible(out->items[j], m)) {
                s = ct_error(CT_ERR_CONFIG, "%s: metric '%s' is listed twice with the same settings", elem,
                             ct_metric_name(m));
                break;
            }
        if (s != CT_OK) {
            ct_metric_free(m);
            break;
        }
        s = ct_metric_set_add(out, m);
        if (s != CT_OK) ct_error_prefix(s, "%s: ", elem);
    }
    if (s != CT_OK) ct_metric_set_free(out);
    return s;
}
