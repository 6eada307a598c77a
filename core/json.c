/* Typed JSON lookups with path-naming errors (see json.h). */
#include "core/json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"

static ct_status missing(const char *path, const char *key) {
    return ct_error(CT_ERR_CONFIG, "%s: missing required key '%s'", path, key);
}

static ct_status wrong_type(const char *path, const char *key, const char *want) {
    return ct_error(CT_ERR_CONFIG, "%s.%s: expected %s", path, key, want);
}

ct_status ct_json_int(const json_t *obj, const char *path, const char *key, bool required, int64_t def,
                      int64_t *out) {
    json_t *v = json_object_get(obj, key);
    if (!v) {
        if (required) return missing(path, key);
        *out = def;
        return CT_OK;
    }
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return CT_OK;
    }
    if (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v) && fabs(json_real_value(v)) < 9e15) {
        *out = (int64_t)json_real_value(v);
        return CT_OK;
    }
    return wrong_type(path, key, "an integer");
}

ct_status ct_json_real(const json_t *obj, const char *path, const char *key, bool required, double def,
                       double *out) {
    json_t *v = json_object_get(obj, key);
    if (!v) {
        if (required) return missing(path, key);
        *out = def;
        return CT_OK;
    }
    if (!json_is_number(v)) return wrong_type(path, key, "a number");
    *out = json_number_value(v);
    return CT_OK;
}

ct_status ct_json_bool(const json_t *obj, const char *path, const char *key, bool required, bool def, bool *out) {
    json_t *v = json_object_get(obj, key);
    if (!v) {
        if (required) return missing(path, key);
        *out = def;
        return CT_OK;
    }
    if (!json_is_boolean(v)) return wrong_type(path, key, "true or false");
    *out = json_is_true(v);
    return CT_OK;
}

ct_status ct_json_string(const json_t *obj, const char *path, const char *key, bool required, const char *def,
                         const char **out) {
    json_t *v = json_object_get(obj, key);
    if (!v) {
        if (required) return missing(path, key);
        *out = def;
        return CT_OK;
    }
    if (!json_is_string(v)) return wrong_type(path, key, "a string");
    *out = json_string_value(v);
    return CT_OK;
}

ct_status ct_json_ints(const json_t *obj, const char *path, const char *key, bool required, int64_t def, int n,
                       int64_t *out) {
    json_t *v = json_object_get(obj, key);
    if (v && json_is_array(v)) {
        if ((int)json_array_size(v) != n)
            return ct_error(CT_ERR_CONFIG, "%s.%s: expected an integer or a list of %d integers", path, key, n);
        for (int i = 0; i < n; i++) {
            json_t *e = json_array_get(v, (size_t)i);
            if (!json_is_integer(e))
                return ct_error(CT_ERR_CONFIG, "%s.%s[%d]: expected an integer", path, key, i);
            out[i] = json_integer_value(e);
        }
        return CT_OK;
    }
    int64_t single;
    CT_TRY(ct_json_int(obj, path, key, required, def, &single));
    for (int i = 0; i < n; i++) out[i] = single;
    return CT_OK;
}

static size_t edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64) return 99;
    size_t row[65];
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t sub = diag + (a[i - 1] != b[j - 1]);
            size_t best = up + 1 < row[j - 1] + 1 ? up + 1 : row[j - 1] + 1;
            row[j] = sub < best ? sub : best;
            diag = up;
        }
    }
    return row[lb];
}

const char *ct_closest_word(const char *word, const char *const *allowed) {
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (const char *const *w = allowed; *w; w++) {
        size_t d = edit_distance(word, *w);
        if (d < best_d) {
            best_d = d;
            best = *w;
        }
    }
    /* Close means at most a third of the word changed (and at least one edit allowed). */
    size_t limit = strlen(word) / 3 + 1;
    return best_d <= limit ? best : NULL;
}

ct_status ct_json_check_keys(const json_t *obj, const char *path, const char *const *allowed) {
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)obj, key, value) {
        bool known = false;
        for (const char *const *w = allowed; *w && !known; w++) known = strcmp(*w, key) == 0;
        if (known) continue;
        const char *hint = ct_closest_word(key, allowed);
        if (hint) return ct_error(CT_ERR_CONFIG, "%s: unknown key '%s', did you mean '%s'?", path, key, hint);
        return ct_error(CT_ERR_CONFIG, "%s: unknown key '%s'", path, key);
    }
    return CT_OK;
}

ct_status ct_json_write_file(const json_t *v, const char *path) {
    char *text = json_dumps(v, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
    if (!text) return ct_error(CT_ERR_NOMEM, "cannot write '%s': out of memory", path);
    ct_status s = ct_write_file_atomic(path, text, strlen(text));
    free(text);
    return s;
}
