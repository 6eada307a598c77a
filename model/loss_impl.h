/* Private helpers shared by the loss files (model/loss*.c); not part of the public API. */
#ifndef CT_LOSS_IMPL_H
#define CT_LOSS_IMPL_H

#include <jansson.h>
#include <stdbool.h>

#include "model/loss.h"

/* Reads spec[key] as a list of finite numbers (or, with allow_scalar, one number) into a malloc'd
 * array; absent key: *vals = NULL, *n = 0. min_value: every value must be >= it. Errors name
 * "path.key[i]". */
ct_status ct_loss_json_reals(const json_t *spec, const char *path, const char *key, bool allow_scalar,
                             double min_value, double **vals, int64_t *n);

/* Copies n doubles into a freshly allocated float64 CPU tensor [n]. */
ct_status ct_loss_copy_reals(const char *who, const double *vals, int64_t n, ct_tensor *out);

#endif
