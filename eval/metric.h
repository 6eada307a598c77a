/* Metrics as sufficient statistics: the metric vtable, metric sets, and the built-in metrics.
 *
 * A metric never keeps an average. Its state is a few int64 counts and float64 sums, each with a
 * declared reduction (sum, min or max); update() adds a batch into the state, merge() combines two
 * states field by field with those reductions, and compute() turns a state into named values. So
 * merging the states of any split of the data (batches, processes) gives the state of the whole,
 * exactly for counts, and the numbers do not depend on the batch size or the number of processes.
 *
 * Rows whose mask is 0 (padding added by the eval sampler) are skipped by every metric.
 *
 * Built-ins (names as in a run config's "metrics" list):
 *   "loss"             the loss the prediction step computed: sum of losses / their count
 *   "accuracy"         argmax of [N, C] outputs against int labels [N]; ties go to the lowest class
 *                      index and NaN counts as the largest value (torch.argmax, numpy.argmax)
 *   {"type": "top_k_accuracy", "k": 5}, or the string "top_5_accuracy": a row counts when fewer than
 *                      k classes rank above its label, where class j ranks above the label y when
 *                      s[j] > s[y], or s[j] == s[y] and j > y (NaN largest). That is exactly
 *                      scikit-learn's top_k_accuracy_score (a stable ascending argsort, reversed), so
 *                      on ties top_1 may differ from "accuracy"; k >= C gives 1.
 * Keys: "<prefix>_<name>" ("eval_accuracy", "eval_top_5_accuracy"), just the name for prefix "".
 * A metric that has seen no rows (no loss computed, every row masked) adds no key, as Hugging Face
 * leaves out eval_loss when there are no labels; a non-finite value (a NaN loss) is written as JSON
 * null, since JSON has no NaN.
 *
 * Subclassing: embed ct_metric first in your struct, give it a const ct_metric_ops; size/name and
 * update/compute are required; the state's fields are declared with ct_metric_base_init in the
 * constructor. update() must leave the state unchanged when it fails (count into locals, add at the
 * end). Classification metrics validate their batch with ct_metric_check_classification. */
#ifndef CT_METRIC_H
#define CT_METRIC_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "core/tensor.h"
#include "model/loss.h"

/* One evaluation batch as metrics see it. */
typedef struct ct_eval_batch {
    const ct_tensor *outputs; /* model outputs, [rows, ...] float32/float64 */
    const ct_tensor *labels;  /* [rows, ...] or NULL when the data has no labels */
    const ct_tensor *mask;    /* [rows] u8 (1 = real sample) or NULL: all real */
    ct_loss_value loss;       /* the batch's loss over its real rows; count 0 when none was computed */
} ct_eval_batch;

typedef enum ct_reduce_op { CT_REDUCE_SUM, CT_REDUCE_MIN, CT_REDUCE_MAX } ct_reduce_op;

typedef struct ct_metric ct_metric;

typedef struct ct_metric_ops {
    size_t size;
    const char *name; /* "accuracy": the key is "<prefix>_<name>" unless compute says otherwise */
    /* Adds the batch's statistics into m's state. */
    ct_status (*update)(ct_metric *m, const ct_eval_batch *b);
    /* Adds the metric's values to out (a JSON object) under "<prefix>_<key>" (prefix "" = no prefix). */
    ct_status (*compute)(const ct_metric *m, const char *prefix, json_t *out);
    /* NULL: ct_metric_default_destroy. A custom destroy releases what the subclass owns and ends
     * with ct_metric_default_destroy(m) ("super"), which frees the state and the struct. */
    void (*destroy)(ct_metric *m);
    /* Optional: whether a and b (same ops) have the same settings (top_k_accuracy: the same k), so
     * that their states may be merged and a set may not hold both. NULL: same ops is enough. */
    bool (*same_config)(const ct_metric *a, const ct_metric *b);
} ct_metric_ops;

#define CT_METRIC_MAX_FIELDS 16
struct ct_metric {
    const ct_metric_ops *ops;
    int n_counts, n_sums;
    int64_t *counts; /* owned state, zero after reset */
    double *sums;
    ct_reduce_op count_ops[CT_METRIC_MAX_FIELDS], sum_ops[CT_METRIC_MAX_FIELDS];
};

/* Sets ops and declares the state: n_counts int64 fields and n_sums float64 fields with their
 * reductions (NULL: all sums). Allocates the state; reset to zero (min fields to +inf/INT64_MAX,
 * max to -inf/INT64_MIN). */
ct_status ct_metric_base_init(ct_metric *m, const ct_metric_ops *ops, int n_counts, const ct_reduce_op *count_ops,
                              int n_sums, const ct_reduce_op *sum_ops);
void ct_metric_reset(ct_metric *m);
/* Validates what every metric relies on, then calls update. Outputs may be NULL (a loss-only batch)
 * and are otherwise float32/float64 [rows, ...] on the CPU; labels, when given, have the same rows;
 * the mask is u8 [rows] of 0 and 1; loss.count is finite and >= 0. Errors start "metric '<name>': ". */
ct_status ct_metric_update(ct_metric *m, const ct_eval_batch *b);
/* dst = reduce(dst, src), field by field. Both must be the same kind of metric (same ops and, with
 * same_config, the same settings): CT_ERR_INVALID_ARG otherwise. */
ct_status ct_metric_merge(ct_metric *dst, const ct_metric *src);
/* Adds m's values to the JSON object out; prefix NULL means "". */
ct_status ct_metric_compute(const ct_metric *m, const char *prefix, json_t *out);
void ct_metric_free(ct_metric *m);
void ct_metric_default_destroy(ct_metric *m);
const char *ct_metric_name(const ct_metric *m);
/* Whether a and b can be merged: same ops and, with same_config, the same settings. */
bool ct_metric_compatible(const ct_metric *a, const ct_metric *b);

/* --- helpers for metric implementations --------------------------------------------------------- */

/* "<prefix>_<name>" into buf (just name for prefix "" or NULL); CT_ERR_INVALID_ARG when it does not fit. */
ct_status ct_metric_key(const char *prefix, const char *name, char *buf, size_t cap);
/* out["<prefix>_<name>"] = value (null when not finite). */
ct_status ct_metric_put(json_t *out, const char *prefix, const char *name, double value);
/* For metrics over class scores: outputs [rows, C] (C >= 1) float32/float64, labels int64/int32 [rows]
 * with every label of a real row in [0, C). Writes rows and C. Errors name the tensors and the
 * first bad label (the wrapper's "metric '<name>': " prefix is added by ct_metric_update). */
ct_status ct_metric_check_classification(const ct_eval_batch *b, int64_t *rows, int64_t *classes);
/* Row i is real: no mask or mask[i] != 0. */
static inline bool ct_metric_row_real(const ct_eval_batch *b, int64_t i) {
    return !b->mask || ((const uint8_t *)b->mask->data)[i] != 0;
}
/* Label i of an int64/int32 [rows] tensor. */
static inline int64_t ct_metric_label(const ct_tensor *labels, int64_t i) {
    return labels->dtype == CT_I64 ? ((const int64_t *)labels->data)[i] : ((const int32_t *)labels->data)[i];
}

ct_status ct_loss_metric_create(ct_metric **out);
ct_status ct_accuracy_metric_create(ct_metric **out);
ct_status ct_top_k_accuracy_metric_create(int64_t k, ct_metric **out);
/* A metric from its JSON spec: a name ("accuracy") or an object ({"type": "top_k_accuracy", "k": 5}). */
ct_status ct_metric_from_json(const json_t *spec, const char *path, ct_metric **out);

/* An ordered set of metrics, updated and computed together. It owns its metrics. */
typedef struct ct_metric_set {
    ct_metric **items;
    int n, cap;
} ct_metric_set;

/* From a run config's "metrics" list (NULL: just "loss"). "loss" is always included, first, and once
 * even when the list names it. A metric listed twice (same type and settings) is CT_ERR_CONFIG, as
 * its keys would collide. Errors start with the element's path ("metrics[2]: unknown metric
 * 'acuracy', did you mean 'accuracy'?"); path NULL means "metrics". On failure *out is empty. */
ct_status ct_metric_set_from_json(const json_t *list, const char *path, ct_metric_set *out);
/* Appends m (taking ownership, also on failure); CT_ERR_INVALID_ARG when a compatible metric (same
 * type and settings) is already in the set. A zeroed ct_metric_set is an empty set. */
ct_status ct_metric_set_add(ct_metric_set *s, ct_metric *m);
void ct_metric_set_free(ct_metric_set *s);
void ct_metric_set_reset(ct_metric_set *s);
/* Updates every metric; on the first failure, stops and returns it (metrics before it are updated). */
ct_status ct_metric_set_update(ct_metric_set *s, const ct_eval_batch *b);
/* dst.items[i] = merge(dst.items[i], src.items[i]); the sets must hold the same metrics in order. */
ct_status ct_metric_set_merge(ct_metric_set *dst, const ct_metric_set *src);
ct_status ct_metric_set_compute(const ct_metric_set *s, const char *prefix, json_t *out);

#endif
