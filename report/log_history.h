/* Reading a run's log history (trainer_state.json's "log_history", Hugging Face's format) for the
 * curves (report/plot.h) and the model card (report/model_card.h), which must agree on what an
 * entry means.
 *
 * Entries are flat objects with "step" and "epoch": training logs ("loss", "grad_norm",
 * "learning_rate"), evaluations ("eval_loss", "eval_accuracy" and their "_stderr" / "_ci_low" /
 * "_ci_high" companions; with named evaluation sets "eval_<name>_loss", ...) and the end-of-training
 * summary ("train_runtime", ...). An evaluation key splits into its set and its metric:
 * "eval_small_top_3_accuracy" is metric "top_3_accuracy" of set "small". Set names are taken from the
 * history itself: each named set's evaluation logs its own entry with "eval_<name>_loss" (and no
 * "eval_loss", which is what tells a set name from a metric such as "eval_nll_loss"). */
#ifndef CT_LOG_HISTORY_H
#define CT_LOG_HISTORY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"

#define CT_LOG_MAX_EVAL_SETS 16
#define CT_LOG_NAME_MAX 80

typedef struct ct_log_eval_sets {
    int n;
    char name[CT_LOG_MAX_EVAL_SETS][CT_LOG_NAME_MAX]; /* "small" for keys "eval_small_..." */
} ct_log_eval_sets;

/* Reads state_file (a trainer_state.json, ctrainer's or Hugging Face's) and returns its log_history
 * (a new reference; an array of objects, possibly empty). Python's json module writes NaN, Infinity
 * and -Infinity for non-finite floats, which strict JSON (and jansson) refuses: such tokens read as
 * null, that is, as values that are not there. Errors: CT_ERR_IO naming the file when it cannot be
 * read, CT_ERR_FORMAT with file:line:column for malformed JSON and with the field for a state whose
 * fields have the wrong types (callbacks/state.h's reader). */
ct_status ct_log_history_load(const char *state_file, json_t **history);

/* The named evaluation sets of history, in order of first appearance (at most CT_LOG_MAX_EVAL_SETS;
 * further ones are read as unnamed). */
void ct_log_eval_sets_find(const json_t *history, ct_log_eval_sets *sets);

/* Splits an evaluation key into set (index into sets, -1 for the unnamed set) and metric (a pointer
 * into key). False for keys that are no metric value: keys not starting with "eval_", the
 * bookkeeping (_runtime, _samples_per_second, _steps_per_second, _jit_compilation_time,
 * _model_preparation_time), the uncertainty companions (_stderr, _ci_low, _ci_high) and memory
 * reports (mem_*). */
bool ct_log_eval_key(const char *key, const ct_log_eval_sets *sets, int *set, const char **metric);

/* entry[key] as a finite number; false when absent, null, not a number, NaN or infinite. */
bool ct_log_number(const json_t *entry, const char *key, double *out);

/* The interval of the value at key: entry[key + "_ci_low"] and entry[key + "_ci_high"], both finite. */
bool ct_log_interval(const json_t *entry, const char *key, double *lo, double *hi);

/* "top_3_accuracy" -> "Top 3 Accuracy", as Hugging Face's model card names its columns. */
void ct_log_display_name(const char *metric, char *buf, size_t cap);

#endif
