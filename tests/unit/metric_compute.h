/* The `--compute IN.h5` mode the metric test programs share with their oracle tests: the Python
 * test writes outputs, labels (and optionally a mask, per-row losses) with a JSON spec into an HDF5
 * file; the program deals the rows into batches of spec.batch_size over spec.ranks metric sets,
 * merges them, computes the metrics (and their uncertainty when spec.uncertainty is given) and
 * prints them as one JSON object, which the test compares with scikit-learn / PyTorch / numpy. */
#ifndef CT_TEST_METRIC_COMPUTE_H
#define CT_TEST_METRIC_COMPUTE_H

#include <jansson.h>

#include "eval/metric.h"

/* Called after the uncertainty when spec.dump_bootstrap is true (extra output for the oracle). */
typedef ct_status (*ct_test_metric_extra_fn)(const ct_metric_set *s, const ct_uncertainty_config *cfg, json_t *out);

/* Runs the mode on `file` and returns the process's exit code (errors printed as "program: ...").
 * Labels are read as spec.label_dtype ("i32", "i64", "f32", "f64") or default_labels.
 * Per-row losses: dataset "losses" (each row counts 1) or "sample_loss" + "sample_weight" (also
 * handed to the metrics as ct_eval_batch.sample_loss / sample_weight). */
int ct_test_metric_compute_main(const char *program, const char *file, ct_dtype default_labels,
                                ct_test_metric_extra_fn extra);

#endif
