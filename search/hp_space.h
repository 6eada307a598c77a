/* Search spaces of a hyperparameter search, and the samplers that draw trials from them.
 *
 * A space maps dotted config keys ("training_args.learning_rate", "model.hidden") to distributions,
 * in Optuna's vocabulary:
 *   {"type": "uniform", "low": a, "high": b}             a real in [a, b]
 *   {"type": "loguniform", "low": a, "high": b}          a real whose log is uniform (0 < a <= b)
 *   {"type": "float", "low", "high", "log"?, "step"?}    Optuna's FloatDistribution (step: the
 *                                                        values low, low + step, ... <= high)
 *   {"type": "int", "low", "high", "step"?, "log"?}      Optuna's IntDistribution: low, low + step,
 *                                                        ... <= high; log: log-uniform over
 *                                                        [low - 0.5, high + 0.5], rounded (as Optuna)
 *   {"type": "categorical", "values": [v, ...]}          one of the values (any JSON)
 *   [v, ...]                                             the same as categorical
 * Keys keep the file's order; it is the order of the grid and of the random draws.
 *
 * Random search: trial k's values come from a Philox stream keyed by (seed, k) (core/rng.h), one
 * draw after the other in key order, so a trial's values depend only on the seed, k and the space
 * up to its key: any trial can be recomputed alone, and a search is reproducible.
 * Grid search: the product of every key's finite set of values (categorical, int, float with step)
 * in itertools.product order: the first key varies slowest. A continuous key (uniform, loguniform,
 * float without step) has no grid; asking for one is a CT_ERR_CONFIG naming the key. */
#ifndef CT_HP_SPACE_H
#define CT_HP_SPACE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

typedef enum ct_hp_kind {
    CT_HP_UNIFORM,     /* uniform / float */
    CT_HP_LOGUNIFORM,  /* loguniform / float with log */
    CT_HP_INT,         /* int */
    CT_HP_CATEGORICAL, /* categorical / a plain list */
} ct_hp_kind;

typedef struct ct_hp_dim {
    char *key;         /* the dotted config key */
    ct_hp_kind kind;
    double low, high;  /* UNIFORM, LOGUNIFORM, INT */
    double step;       /* INT: >= 1 (default 1); UNIFORM: > 0 for a discrete float, 0 continuous */
    bool log;          /* INT: log-uniform */
    json_t *values;    /* CATEGORICAL: the values (owned array, not empty) */
} ct_hp_dim;

typedef struct ct_hp_space {
    int n;
    ct_hp_dim *dims;
} ct_hp_space;

/* Reads a space from a JSON object; `name` (a file name) starts every message, followed by the key:
 * "space.json: training_args.learning_rate: low (0.1) must not exceed high (0.01)". Unknown
 * distribution types and keys get "did you mean". CT_ERR_CONFIG; on failure nothing is left. */
ct_status ct_hp_space_from_json(const json_t *spec, const char *name, ct_hp_space *out);
/* Reads the file (CT_ERR_IO when it cannot be read, CT_ERR_CONFIG "file:line:column: ..." for a
 * syntax error, then as from_json). */
ct_status ct_hp_space_load(const char *file, ct_hp_space *out);
void ct_hp_space_free(ct_hp_space *s);

/* The dimension named key, or NULL. */
const ct_hp_dim *ct_hp_space_find(const ct_hp_space *s, const char *key);

/* Number of values of a finite dimension (categorical, int, float with step); 0 for a continuous one. */
int64_t ct_hp_dim_count(const ct_hp_dim *d);
/* Value i (0 <= i < count) of a finite dimension, as JSON (a new reference). */
json_t *ct_hp_dim_value(const ct_hp_dim *d, int64_t i);

/* Trial k of a random search with `seed`: {key: value, ...} in the space's order (*out is new). */
ct_status ct_hp_sample_random(const ct_hp_space *s, uint64_t seed, int64_t k, json_t **out);
/* Size of the grid (the product of the counts). CT_ERR_CONFIG naming the first continuous key, or
 * when the product exceeds INT64_MAX. */
ct_status ct_hp_grid_size(const ct_hp_space *s, int64_t *out);
/* Point k (0 <= k < size) of the grid, {key: value, ...} (*out is new). */
ct_status ct_hp_grid_point(const ct_hp_space *s, int64_t k, json_t **out);

#endif
