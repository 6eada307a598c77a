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
 *   "loss"             the loss the prediction step computed: sum of losses / their count;
 *                      stderr from per-row losses when given (ct_eval_batch.sample_loss)
 *   "accuracy"         argmax of [N, C] outputs against int labels [N]; ties go to the lowest class
 *                      index and NaN counts as the largest value (torch.argmax, numpy.argmax);
 *                      stderr sqrt(p(1-p)/n) and Wilson interval (also top-k), even with resamples 0
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
 * Subclassing: embed ct_metric first in your struct, give it a const ct_metric_ops; size, name,
 * update and compute are required (ct_metric_base_init and ct_metric_set_add check them, naming the
 * table and the fix: "ct_metric_ops.size is 0: set .size = sizeof(ct_metric_ops)"); the state's fields are declared with ct_metric_base_init in the
 * constructor (or at the first batch with ct_metric_redeclare), per-sample records with
 * ct_metric_keep_samples. update() must leave the state unchanged when it fails (count into locals,
 * add at the end; reserve records before appending). Classification metrics validate their batch
 * with ct_metric_check_classification. The uncertainty op reports "<key>_stderr", "<key>_ci_low"
 * and "<key>_ci_high" (eval/uncertainty.h has the closed forms and the bootstrap). */
#ifndef CT_METRIC_H
#define CT_METRIC_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "core/tensor.h"
#include "dist/comm.h"
#include "model/loss.h"

/* A language model's token values of one batch: ct_op_token_values over the positions of logits
 * [rows, ..., V] and their labels, computed where the logits are (a GPU's evaluation then copies 16
 * bytes per token to the host instead of V logits), and the logits' shape (the token metrics check
 * the labels against it). nll and hit: host memory, one value per position, rows x positions. */
typedef struct ct_token_values {
    const double *nll, *hit;
    int ndim;
    int64_t shape[CT_MAX_DIMS];
} ct_token_values;

/* A classifier's class ranks of one batch: ct_op_class_ranks over scores [rows, C] and the labels,
 * computed where the scores are (a GPU's evaluation then copies 8 bytes per row instead of C scores)
 * and shared by every classification metric of the set. pred[i]: row i's predicted class (the first
 * maximum, NaN the largest); above[i]: how many classes rank above its label (ops_loss.h has the
 * order; -1 for a label outside [0, classes)). Host memory, `rows` entries each. */
typedef struct ct_class_values {
    const int64_t *pred, *above;
    int64_t rows, classes;
} ct_class_values;

/* One evaluation batch as metrics see it. */
typedef struct ct_eval_batch {
    const ct_tensor *outputs; /* model outputs, [rows, ...] float32/float64; NULL when not read */
    const ct_tensor *labels;  /* [rows, ...] or NULL when the data has no labels */
    const ct_tensor *mask;    /* [rows] u8 (1 = real sample) or NULL: all real */
    ct_loss_value loss;       /* the batch's loss over its real rows; count 0 when none was computed */
    /* Optional, both or neither: [rows] float64 loss SUM of each row (0 for masked rows) and [rows]
     * float64 COUNT of each row (its share of loss.count: 1, a class weight, or its number of
     * non-ignored tokens), so loss.sum = sum of sample_loss and loss.count = sum of sample_weight
     * over the real rows. The loss metric's standard error comes from them (the per-row means
     * sample_loss / sample_weight, weighted by sample_weight). NULL when not computed. */
    const ct_tensor *sample_loss, *sample_weight;
    /* Optional: the outputs' token values, for the metrics that take them (ct_metric_ops.
     * takes_token_values): given, those metrics read them instead of the outputs. NULL: not computed. */
    const ct_token_values *tokens;
    /* Optional: the outputs' class ranks, for the metrics that take them (ct_metric_ops.
     * takes_class_values): given, those metrics read them instead of the outputs. NULL: not computed. */
    const ct_class_values *classes;
} ct_eval_batch;

typedef enum ct_reduce_op { CT_REDUCE_SUM, CT_REDUCE_MIN, CT_REDUCE_MAX } ct_reduce_op;

typedef struct ct_metric ct_metric;
struct ct_uncertainty_config; /* below; named here so the vtable can take it */

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
    /* Optional: adds "<key>_stderr", "<key>_ci_low" and "<key>_ci_high" for each value compute()
     * writes (see ct_uncertainty_config). NULL: the metric reports no uncertainty. */
    ct_status (*uncertainty)(const ct_metric *m, const struct ct_uncertainty_config *cfg, const char *prefix,
                             json_t *out);
    /* Optional: update reads a batch's token values (ct_eval_batch.tokens) when it has them, and then
     * not its outputs (the language-model metrics). */
    bool takes_token_values;
    /* Optional: update reads a batch's class ranks (ct_eval_batch.classes) when it has them, and then
     * not its outputs (accuracy, top-k accuracy, the confusion-matrix family). */
    bool takes_class_values;
} ct_metric_ops;

/* How uncertainty is estimated: a closed form where one exists (a mean's standard error, a
 * binomial proportion), otherwise a percentile bootstrap with `resamples` draws from a Philox stream
 * keyed by `seed`, so the same data and seed give the same interval. `confidence` is the interval's
 * coverage (0.95). Metrics computed from a confusion matrix resample its cells (one multinomial draw
 * of n over the C x C cells per resample, O(resamples x C^2)); metrics that need per-sample data
 * resample the kept samples. */
typedef struct ct_uncertainty_config {
    int64_t resamples; /* >= 0; 0 turns bootstrapping off (closed forms still apply) */
    double confidence; /* in (0, 1) */
    uint64_t seed;
} ct_uncertainty_config;

/* Per-sample records, for metrics no fixed-size statistic can give (AUROC, average precision) and
 * for bootstrapping them: `width` doubles per sample (a score and a label, or C scores and a label),
 * appended in the order samples arrive; merge appends the other state's records after these, so
 * merging shards in rank order keeps dataset order. Kept only by metrics that declare them. */
typedef struct ct_metric_samples {
    int width;       /* doubles per record; 0 = no records */
    int64_t n, cap;  /* records held / allocated */
    double *values;  /* n x width, owned */
} ct_metric_samples;

struct ct_metric {
    const ct_metric_ops *ops;
    int64_t n_counts, n_sums;  /* any number of fields (a confusion matrix has C x C counts) */
    int64_t *counts;           /* owned state, zero after reset */
    double *sums;
    ct_reduce_op *count_ops, *sum_ops; /* owned, one per field */
    ct_metric_samples samples;
};

/* Sets ops and declares the state: n_counts int64 fields and n_sums float64 fields with their
 * reductions (NULL: all sums), any number of each. Allocates the state and the reduction arrays
 * (released by ct_metric_default_destroy); reset to zero (min fields to +inf/INT64_MAX, max to
 * -inf/INT64_MIN). No per-sample records until ct_metric_keep_samples. On failure nothing is left
 * allocated and m may simply be freed. */
ct_status ct_metric_base_init(ct_metric *m, const ct_metric_ops *ops, int64_t n_counts, const ct_reduce_op *count_ops,
                              int64_t n_sums, const ct_reduce_op *sum_ops);
/* Checks m's table as ct_metric_base_init does (CT_ERR_INVALID_ARG; m NULL too). */
ct_status ct_metric_check(const ct_metric *m);
/* Redeclares the state of a metric whose shape is known only from its first batch (a confusion
 * matrix learns C there): same contract as ct_metric_base_init, the state is reset, m->ops kept.
 * On failure the old declaration is kept. A state with no fields and no record width is "blank":
 * it merges with any state of the same kind (adopting its declaration), so a process or a split
 * that saw no batch merges cleanly. */
ct_status ct_metric_redeclare(ct_metric *m, int64_t n_counts, const ct_reduce_op *count_ops, int64_t n_sums,
                              const ct_reduce_op *sum_ops);
/* Declares that m keeps `width` (>= 1) doubles per sample in m->samples (call it in the constructor,
 * after ct_metric_base_init, or later on an empty state; the width is then fixed). Reset empties
 * the records and keeps the memory; merge appends the other state's records (same width required). */
ct_status ct_metric_keep_samples(ct_metric *m, int width);
/* Appends one record of m->samples.width doubles; storage grows geometrically (amortised O(1), no
 * allocation per sample). On CT_ERR_NOMEM the records are unchanged. */
ct_status ct_metric_samples_append(ct_metric *m, const double *record);
/* Makes room for `more` further records at once (an update() that knows its batch's row count
 * reserves first, so appending cannot fail half-way and the state stays unchanged on failure). */
ct_status ct_metric_samples_reserve(ct_metric *m, int64_t more);
void ct_metric_reset(ct_metric *m);
/* Validates what every metric relies on, then calls update. Outputs may be NULL (a loss-only batch)
 * and are otherwise float32/float64 [rows, ...] on the CPU; labels, when given, have the same rows;
 * the mask is u8 [rows] of 0 and 1; loss.count is finite and >= 0. Errors start "metric '<name>': ". */
ct_status ct_metric_update(ct_metric *m, const ct_eval_batch *b);
/* dst = reduce(dst, src), field by field. Both must be the same kind of metric (same ops and, with
 * same_config, the same settings): CT_ERR_INVALID_ARG otherwise. */
ct_status ct_metric_merge(ct_metric *dst, const ct_metric *src);
/* Whether m's update takes a batch's token values (ct_metric_ops.takes_token_values). */
bool ct_metric_takes_token_values(const ct_metric *m);
/* Whether m's update takes a batch's class ranks (ct_metric_ops.takes_class_values). */
bool ct_metric_takes_class_values(const ct_metric *m);
/* Adds m's values to the JSON object out; prefix NULL means "". */
ct_status ct_metric_compute(const ct_metric *m, const char *prefix, json_t *out);
/* Adds m's "<key>_stderr", "<key>_ci_low", "<key>_ci_high" to out (prefix NULL means ""); a metric
 * without the uncertainty op adds nothing. cfg: resamples in [0, 2^32], confidence in (0, 1), else
 * CT_ERR_INVALID_ARG. Errors start "metric '<name>': ". Helpers for the op: eval/uncertainty.h. */
ct_status ct_metric_uncertainty(const ct_metric *m, const struct ct_uncertainty_config *cfg, const char *prefix,
                                json_t *out);
void ct_metric_free(ct_metric *m);
void ct_metric_default_destroy(ct_metric *m);
const char *ct_metric_name(const ct_metric *m);
/* Whether a and b can be merged: same ops and, with same_config, the same settings. */
bool ct_metric_compatible(const ct_metric *a, const ct_metric *b);

/* --- helpers for metric implementations --------------------------------------------------------- */

/* "<prefix>_<name>" into buf (just name for prefix "" or NULL); CT_ERR_INVALID_ARG when it does not fit. */
ct_status ct_metric_key(const char *prefix, const char *name, char *buf, size_t cap);
/* Constructor errors are about a spec's values: s as a config error at the spec's JSON path
 * (CT_ERR_INVALID_ARG becomes CT_ERR_CONFIG, the message gets "<path>: "); CT_OK stays CT_OK. */
ct_status ct_metric_spec_error(ct_status s, const char *path);
/* *kind = the index of name in the NULL-terminated list names; otherwise CT_ERR_CONFIG "<path>:
 * unknown <family> metric '<name>'" with the nearest name as a hint, or the list when none is near. */
ct_status ct_metric_kind_index(const char *name, const char *const *names, const char *family, const char *path,
                               int *kind);
/* out["<prefix>_<name>"] = value (null when not finite). */
ct_status ct_metric_put(json_t *out, const char *prefix, const char *name, double value);
/* For metrics over class scores: outputs [rows, C] (C >= 1) float32/float64, or the class ranks of
 * such outputs, labels int64/int32 [rows] with every label of a real row in [0, C). Writes rows and C.
 * Errors name the tensors and the first bad label (the wrapper's "metric '<name>': " prefix is added
 * by ct_metric_update). */
ct_status ct_metric_check_classification(const ct_eval_batch *b, int64_t *rows, int64_t *classes);
/* The class ranks of a batch that passed ct_metric_check_classification: the batch's own, or computed
 * here from its outputs (ct_op_class_ranks) into memory *own then holds, which the caller frees. */
ct_status ct_metric_class_values(const ct_eval_batch *b, ct_class_values *cv, int64_t **own);
/* The predicted class of row i of outputs [rows, C] float32/float64: the first maximum, NaN being
 * larger than any number (torch.argmax, numpy.argmax). */
int64_t ct_metric_argmax(const ct_tensor *outputs, int64_t i);
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
/* Whether m can mean something for a model that scores `classes` classes: a top_k_accuracy with k
 * above them counts every sample (scikit-learn returns 1.0) and is CT_ERR_INVALID_ARG naming k and
 * the classes; every other metric passes. ct_trainer_init checks its metrics with it (the run
 * config's, where their line is known, when the run is built). */
ct_status ct_metric_check_classes(const ct_metric *m, int64_t classes);
/* A metric from its JSON spec: a name ("accuracy") or an object ({"type": "top_k_accuracy", "k": 5}). */
ct_status ct_metric_from_json(const json_t *spec, const char *path, ct_metric **out);

/* An application's metric type: builds *out from spec, which is the registered name as a string
 * ("my_metric") or an object with that "type" and the metric's own keys. Errors should start with
 * `path`; any that does not is prefixed with it. */
typedef ct_status (*ct_metric_from_json_fn)(const json_t *spec, const char *path, ct_metric **out);
/* Registers a metric type for ct_metric_from_json (and so for run configs' "metrics" list and the
 * Trainer's, asynchronous evaluation included), under a name that is not a built-in one
 * (core/registry.h lists what is refused; "top_<k>_accuracy" and the confusion family's spellings
 * count as built-in). The metric it returns is checked with ct_metric_check. */
ct_status ct_register_metric_type(const char *name, ct_metric_from_json_fn fn);

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
/* Appends m (taking ownership, also on failure, except when m fails ct_metric_check: a table that
 * cannot be trusted stays the caller's); CT_ERR_INVALID_ARG when a compatible metric (same type and
 * settings) is already in the set. A zeroed ct_metric_set is an empty set. */
ct_status ct_metric_set_add(ct_metric_set *s, ct_metric *m);
void ct_metric_set_free(ct_metric_set *s);
void ct_metric_set_reset(ct_metric_set *s);
/* Updates every metric; on the first failure, stops and returns it (metrics before it are updated). */
ct_status ct_metric_set_update(ct_metric_set *s, const ct_eval_batch *b);
/* Whether some metric of the set reads the batch's outputs when given token values and class ranks:
 * every one but "loss", which reads only the loss values, and those that take token values or class
 * ranks (so an evaluation on a GPU that keeps nothing copies no outputs back); whether some metric
 * takes token values; whether some takes class ranks. */
bool ct_metric_set_reads_outputs(const ct_metric_set *s);
bool ct_metric_set_takes_token_values(const ct_metric_set *s);
bool ct_metric_set_takes_class_values(const ct_metric_set *s);
/* dst.items[i] = merge(dst.items[i], src.items[i]); the sets must hold the same metrics in order. */
ct_status ct_metric_set_merge(ct_metric_set *dst, const ct_metric_set *src);
ct_status ct_metric_set_compute(const ct_metric_set *s, const char *prefix, json_t *out);

/* --- across processes (eval/metric_reduce.c) ------------------------------------------------------ */

/* Combines the states of every process of c: each field all-reduced with its reduction (every
 * process gets the whole set's counts and sums), per-sample records gathered to `root` in rank
 * order (dataset order for contiguous shards; the other processes keep only their own). Every
 * process must call it; CT_ERR_STATE when states have different layouts on different processes. */
ct_status ct_metric_reduce(ct_metric *m, ct_comm *c, int root);
ct_status ct_metric_set_reduce(ct_metric_set *s, ct_comm *c, int root);
/* ct_metric_uncertainty for every metric of the set that has the op, in order. */
ct_status ct_metric_set_uncertainty(const ct_metric_set *s, const struct ct_uncertainty_config *cfg,
                                    const char *prefix, json_t *out);

/* --- confusion-matrix metrics (eval/metrics_confusion.c) ---------------------------------------- */

/* Single-label classification metrics over argmax(outputs [rows, C]) and int labels [rows], all
 * computed from one C x C int64 confusion matrix (rows: true class, columns: predicted class, as
 * scikit-learn's confusion_matrix). C is the outputs' width at the first batch and then fixed (a
 * later batch with another C is CT_ERR_SHAPE); a state that saw no batch is blank and merges with
 * any. Specs and keys (prefix "eval"):
 *   "confusion_matrix"                   eval_confusion_matrix: [[...], ...] C lists of C counts
 *   {"type": "f1", "average": A}         eval_f1_<A>; A in micro, macro (the default), weighted,
 *                                        per_class; also the strings "f1" and "f1_<A>"
 *   the same for "precision" and "recall" eval_precision_macro, eval_recall_per_class, ...
 *   "mcc"                                eval_mcc (Matthews correlation, multiclass)
 *   "balanced_accuracy"                  eval_balanced_accuracy
 * Definitions are scikit-learn's with zero_division = 0 (its default "warn" without the warning):
 *   precision_k = tp/(tp+fp), recall_k = tp/(tp+fn), f1_k = 2tp/(2tp+fp+fn), 0 when the denominator
 *   is 0; micro pools the counts (= accuracy for single-label data); macro is the unweighted mean
 *   over the classes that occur in the labels or the predictions (scikit-learn's labels=None: a
 *   class never seen either way does not drag the mean down); weighted weighs class k by its
 *   support (true count); per_class lists all C classes (labels=range(C)) as a JSON list.
 *   mcc = (c s - sum_k t_k p_k) / sqrt((s^2 - sum p_k^2)(s^2 - sum t_k^2)), 0 when the root is 0;
 *   balanced accuracy = the mean recall over classes with support > 0.
 * Uncertainty (not for confusion_matrix, which reports counts): a percentile bootstrap that resamples
 * the confusion matrix's cells, one multinomial draw of n over the C^2 cells per resample with the
 * observed proportions, the metric recomputed from the drawn matrix: O(resamples x C^2), the same
 * law as resampling the n samples one by one. per_class gives lists of stderr / ci_low / ci_high.
 * resamples = 0: no uncertainty keys. */
typedef enum ct_average {
    CT_AVERAGE_MICRO,
    CT_AVERAGE_MACRO,
    CT_AVERAGE_WEIGHTED,
    CT_AVERAGE_PER_CLASS
} ct_average;
typedef enum ct_confusion_kind {
    CT_CONFUSION_MATRIX,
    CT_CONFUSION_PRECISION,
    CT_CONFUSION_RECALL,
    CT_CONFUSION_F1,
    CT_CONFUSION_MCC,
    CT_CONFUSION_BALANCED_ACCURACY
} ct_confusion_kind;
/* average matters for precision, recall and f1 only (pass CT_AVERAGE_MACRO otherwise). */
ct_status ct_confusion_metric_create(ct_confusion_kind kind, ct_average average, ct_metric **out);
/* The names ct_confusion_metric_from_json accepts as a string or a "type", NULL-terminated
 * ("f1_macro" style spellings are accepted as strings too but not listed). */
extern const char *const ct_confusion_metric_names[];
/* Whether name is one of them or a "<precision|recall|f1>_<average>" spelling. */
bool ct_confusion_metric_knows(const char *name);
ct_status ct_confusion_metric_from_json(const json_t *spec, const char *path, ct_metric **out);
/* The confusion matrix of a confusion metric that has seen data: C and the C x C counts (m->counts;
 * C = 0 when blank). */
int64_t ct_confusion_classes(const ct_metric *m);
/* The raw bootstrap values of a confusion metric (not confusion_matrix): *values (malloc'd, to
 * free) holds cfg->resamples values per output value, value v of resample b at v * resamples + b;
 * *n_values is 1, or C for per_class. For tests and benchmarks; ct_metric_uncertainty summarises
 * the same values. CT_ERR_STATE when the metric has seen no sample. */
ct_status ct_confusion_bootstrap_values(const ct_metric *m, const struct ct_uncertainty_config *cfg, double **values,
                                        int *n_values);

/* --- regression metrics (eval/metrics_regression.c) -------------------------------------------- */

/* "mse", "rmse", "mae", "r2" over float outputs and float targets [rows] or [rows, k], as
 * scikit-learn's multioutput="uniform_average". rmse and r2 average per-output values, so they keep
 * per-output fields: num_outputs 0 learns k from the first batch, >= 1 fixes it; mse and mae take
 * any k (num_outputs >= 1 only checks it). See the file for the state and the uncertainty (mse,
 * mae: closed form; rmse, r2: bootstrap over rows). */
typedef enum ct_regression_kind {
    CT_REGRESSION_MSE,
    CT_REGRESSION_RMSE,
    CT_REGRESSION_MAE,
    CT_REGRESSION_R2
} ct_regression_kind;
ct_status ct_regression_metric_create(ct_regression_kind kind, int64_t num_outputs, ct_metric **out);
/* Their names, NULL-terminated, for ct_metric_from_json's dispatch and "did you mean" list. */
extern const char *const ct_regression_metric_names[];
/* From a spec whose name or "type" is one of ct_regression_metric_names: "r2", or
 * {"type": "r2", "num_outputs": 3} (optional, >= 1). Errors are CT_ERR_CONFIG and start with path. */
ct_status ct_regression_metric_from_json(const json_t *spec, const char *path, ct_metric **out);

/* --- language-model token metrics (eval/metrics_lm.c) ------------------------------------------- */

/* "token_loss" (mean token cross-entropy), "perplexity" (its exp), "token_accuracy" over logits
 * [rows, T, V] and int64/int32 labels [rows, T] (labels already aligned with the logits' positions),
 * skipping tokens whose label is ignore_index (default -100). Uncertainty: bootstrap over sequences
 * (rows), or with resamples = 0 the closed-form sequence-level (cluster) standard error. */
typedef enum ct_lm_kind { CT_LM_TOKEN_LOSS, CT_LM_PERPLEXITY, CT_LM_TOKEN_ACCURACY } ct_lm_kind;
ct_status ct_lm_metric_create(ct_lm_kind kind, int64_t ignore_index, ct_metric **out);
extern const char *const ct_lm_metric_names[];
/* "perplexity", or {"type": "perplexity", "ignore_index": -1}. Errors are CT_ERR_CONFIG at path. */
ct_status ct_lm_metric_from_json(const json_t *spec, const char *path, ct_metric **out);

/* --- ranking metrics (eval/metrics_ranking.c) --------------------------------------------------- */

/* "auroc" and "average_precision", exactly as scikit-learn's roc_auc_score and
 * average_precision_score (ties included). Binary: outputs [rows] or [rows, 1] (the score) or
 * [rows, 2] (two logits; the score is logit1 - logit0), labels 0/1. Multiclass, outputs [rows, C]
 * with C >= 3: one-vs-rest over the float64 softmax probabilities, averaged "macro" (key "auroc",
 * "average_precision") or "weighted" by class support (key "auroc_weighted", ...). They keep one
 * record per sample ((score, label) or (C probabilities, label)); undefined values (a class with no
 * positives or, for AUROC, no negatives) are JSON null. Uncertainty: percentile bootstrap over the
 * samples, O(resamples x C x n) after one sort per class. See the file for the rules. */
typedef enum ct_ranking_kind { CT_RANKING_AUROC, CT_RANKING_AVERAGE_PRECISION } ct_ranking_kind;
typedef enum ct_ranking_average { CT_RANKING_MACRO, CT_RANKING_WEIGHTED } ct_ranking_average;
ct_status ct_ranking_metric_create(ct_ranking_kind kind, ct_ranking_average average, ct_metric **out);
/* Their names, NULL-terminated, for ct_metric_from_json's dispatch and "did you mean" list. */
extern const char *const ct_ranking_metric_names[];
/* "auroc", or {"type": "auroc", "average": "weighted"}. Errors are CT_ERR_CONFIG at path. */
ct_status ct_ranking_metric_from_json(const json_t *spec, const char *path, ct_metric **out);

#endif
