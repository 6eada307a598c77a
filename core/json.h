/* JSON helpers over jansson: typed lookups whose errors name the JSON path ("model.layers[2].
 * out_features"), a key check that suggests the nearest allowed key for a misspelt one, and the one
 * writer of JSON files. */
#ifndef CT_JSON_H
#define CT_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

/* Each getter: absent key -> *out = def (or an error when required); wrong type -> CT_ERR_CONFIG. */
ct_status ct_json_int(const json_t *obj, const char *path, const char *key, bool required, int64_t def, int64_t *out);
ct_status ct_json_real(const json_t *obj, const char *path, const char *key, bool required, double def, double *out);
ct_status ct_json_bool(const json_t *obj, const char *path, const char *key, bool required, bool def, bool *out);
ct_status ct_json_string(const json_t *obj, const char *path, const char *key, bool required, const char *def,
                         const char **out);
/* An int or a list of n ints (kernel_size: 3 or [3, 3]); a single int is repeated. */
ct_status ct_json_ints(const json_t *obj, const char *path, const char *key, bool required, int64_t def, int n,
                       int64_t *out);

/* CT_ERR_CONFIG for any key of obj not in allowed (NULL-terminated), with a "did you mean" hint. */
ct_status ct_json_check_keys(const json_t *obj, const char *path, const char *const *allowed);

/* v as the new content of path, atomically and durably (core/fs.h), in the layout of Hugging Face's
 * JSON files: indented by 2, keys sorted, reals with 17 significant digits (they read back exactly). */
ct_status ct_json_write_file(const json_t *v, const char *path);

/* The allowed string closest to word by edit distance, or NULL when none is close. */
const char *ct_closest_word(const char *word, const char *const *allowed);

#endif
