/* Search spaces (see hp_space.h): reading them with messages that name the file and the key, and
 * the two samplers. The random sampler draws trial k from its own Philox stream (key = seed,
 * stream = k), so no trial's values depend on how many trials came before it. */
#include "search/hp_space.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "core/json.h"
#include "core/rng.h"

/* The purpose of the search's streams (core/rng.h), apart from any purpose a run uses. */
#define HP_RNG_PURPOSE (CT_RNG_USER + 11)

static const char *const TYPES[] = {"uniform", "loguniform", "float", "int", "categorical", NULL};

void ct_hp_space_free(ct_hp_space *s) {
    for (int i = 0; i < s->n; i++) {
        free(s->dims[i].key);
        json_decref(s->dims[i].values);
    }
    free(s->dims);
    s->dims = NULL;
    s->n = 0;
}

/* A number at spec[k] (required); where names "file: key" in messages. */
static ct_status number(const json_t *spec, const char *where, const char *k, bool required, double def,
                        double *out) {
    const json_t *v = json_object_get(spec, k);
    if (!v) {
        if (required) return ct_error(CT_ERR_CONFIG, "%s: missing \"%s\"", where, k);
        *out = def;
        return CT_OK;
    }
    if (!json_is_number(v)) return ct_error(CT_ERR_CONFIG, "%s.%s: expected a number", where, k);
    *out = json_number_value(v);
    if (!isfinite(*out)) return ct_error(CT_ERR_CONFIG, "%s.%s: expected a finite number", where, k);
    return CT_OK;
}

static ct_status integer(const json_t *spec, const char *where, const char *k, bool required, int64_t def,
                         double *out) {
    const json_t *v = json_object_get(spec, k);
    if (!v) {
        if (required) return ct_error(CT_ERR_CONFIG, "%s: missing \"%s\"", where, k);
        *out = (double)def;
        return CT_OK;
    }
    /* 3.0 is an integer too (Optuna accepts it); 3.5 is not. Beyond 2^53 doubles skip integers. */
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    if (!json_is_number(v)) return ct_error(CT_ERR_CONFIG, "%s.%s: expected an integer", where, k);
    if (!(x == floor(x)) || fabs(x) > 9007199254740992.0)
        return ct_error(CT_ERR_CONFIG, "%s.%s: expected an integer, got %.17g", where, k, x);
    *out = x;
    return CT_OK;
}

static ct_status boolean(const json_t *spec, const char *where, const char *k, bool *out) {
    const json_t *v = json_object_get(spec, k);
    *out = false;
    if (!v) return CT_OK;
    if (!json_is_boolean(v)) return ct_error(CT_ERR_CONFIG, "%s.%s: expected true or false", where, k);
    *out = json_is_true(v);
    return CT_OK;
}

static ct_status categorical(const json_t *values, const char *where, ct_hp_dim *d) {
    if (!json_is_array(values) || json_array_size(values) == 0)
        return ct_error(CT_ERR_CONFIG, "%s: a categorical needs a non-empty list of values", where);
    d->kind = CT_HP_CATEGORICAL;
    d->values = json_deep_copy(values);
    if (!d->values) return ct_error(CT_ERR_NOMEM, "%s: out of memory", where);
    return CT_OK;
}

/* One key's distribution; where = "file: key". */
static ct_status read_dim(const json_t *spec, const char *where, ct_hp_dim *d) {
    if (json_is_array(spec)) return categorical(spec, where, d);
    if (!json_is_object(spec))
        return ct_error(CT_ERR_CONFIG,
                        "%s: expected a distribution ({\"type\": \"loguniform\", \"low\": ..., \"high\": ...}) or a "
                        "list of values",
                        where);
    const char *type;
    CT_TRY(ct_json_string(spec, where, "type", true, NULL, &type));
    int t = -1;
    for (int i = 0; TYPES[i]; i++)
        if (strcmp(TYPES[i], type) == 0) t = i;
    if (t < 0) {
        const char *hint = ct_closest_word(type, TYPES);
        return ct_error(CT_ERR_CONFIG, "%s.type: unknown distribution '%s'%s%s%s (uniform, loguniform, float, int, "
                        "categorical)", where, type, hint ? ", did you mean '" : "", hint ? hint : "", hint ? "'?" : "");
    }
    if (strcmp(type, "categorical") == 0) {
        static const char *const keys[] = {"type", "values", NULL};
        CT_TRY(ct_json_check_keys(spec, where, keys));
        const json_t *values = json_object_get(spec, "values");
        if (!values) return ct_error(CT_ERR_CONFIG, "%s: missing \"values\"", where);
        return categorical(values, where, d);
    }
    bool is_int = strcmp(type, "int") == 0, is_float = strcmp(type, "float") == 0;
    static const char *const plain[] = {"type", "low", "high", NULL};
    static const char *const stepped[] = {"type", "low", "high", "step", "log", NULL};
    CT_TRY(ct_json_check_keys(spec, where, is_int || is_float ? stepped : plain));
    if (is_int) {
        CT_TRY(integer(spec, where, "low", true, 0, &d->low));
        CT_TRY(integer(spec, where, "high", true, 0, &d->high));
        CT_TRY(integer(spec, where, "step", false, 1, &d->step));
        if (d->step < 1) return ct_error(CT_ERR_CONFIG, "%s.step: expected a positive integer, got %.17g", where, d->step);
    } else {
        CT_TRY(number(spec, where, "low", true, 0, &d->low));
        CT_TRY(number(spec, where, "high", true, 0, &d->high));
        CT_TRY(number(spec, where, "step", false, 0, &d->step));
        if (json_object_get(spec, "step") && !(d->step > 0))
            return ct_error(CT_ERR_CONFIG, "%s.step: expected a positive number, got %.17g", where, d->step);
    }
    CT_TRY(boolean(spec, where, "log", &d->log));
    if (d->low > d->high)
        return ct_error(CT_ERR_CONFIG, "%s: low (%.17g) must not exceed high (%.17g)", where, d->low, d->high);
    bool log = d->log || strcmp(type, "loguniform") == 0;
    if (log && !(d->low > 0))
        return ct_error(CT_ERR_CONFIG, "%s: a log distribution needs low > 0, got %.17g", where, d->low);
    /* Optuna refuses both too: steps are even on a linear scale, not on a log one. */
    if (log && json_object_get(spec, "step") && !(is_int && d->step == 1))
        return ct_error(CT_ERR_CONFIG, "%s: \"step\" and \"log\" cannot be used together", where);
    if (is_int) {
        d->kind = CT_HP_INT;
    } else {
        d->kind = log ? CT_HP_LOGUNIFORM : CT_HP_UNIFORM;
        d->log = false;
    }
    return CT_OK;
}

ct_status ct_hp_space_from_json(const json_t *spec, const char *name, ct_hp_space *out) {
    memset(out, 0, sizeof *out);
    if (!json_is_object(spec))
        return ct_error(CT_ERR_CONFIG, "%s: expected an object of config keys and distributions", name);
    if (json_object_size(spec) == 0) return ct_error(CT_ERR_CONFIG, "%s: the space has no keys", name);
    out->dims = calloc(json_object_size(spec), sizeof *out->dims);
    if (!out->dims) return ct_error(CT_ERR_NOMEM, "%s: out of memory", name);
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)spec, key, v) {
        ct_hp_dim *d = &out->dims[out->n++];
        d->key = strdup(key);
        char where[1024];
        snprintf(where, sizeof where, "%s: %s", name, key);
        ct_status s = d->key ? read_dim(v, where, d) : ct_error(CT_ERR_NOMEM, "%s: out of memory", name);
        if (s == CT_OK && !key[0]) s = ct_error(CT_ERR_CONFIG, "%s: an empty key", name);
        if (s != CT_OK) {
            ct_hp_space_free(out);
            return s;
        }
    }
    return CT_OK;
}

ct_status ct_hp_space_load(const char *file, ct_hp_space *out) {
    memset(out, 0, sizeof *out);
    FILE *f;
    CT_TRY(ct_fopen_read(file, &f));
    json_error_t err;
    json_t *spec = json_loadf(f, JSON_REJECT_DUPLICATES, &err);
    fclose(f);
    if (!spec) return ct_error(CT_ERR_CONFIG, "%s:%d:%d: %s", file, err.line, err.column, err.text);
    ct_status s = ct_hp_space_from_json(spec, file, out);
    json_decref(spec);
    return s;
}

const ct_hp_dim *ct_hp_space_find(const ct_hp_space *s, const char *key) {
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->dims[i].key, key) == 0) return &s->dims[i];
    return NULL;
}

int64_t ct_hp_dim_count(const ct_hp_dim *d) {
    switch (d->kind) {
    case CT_HP_CATEGORICAL: return (int64_t)json_array_size(d->values);
    case CT_HP_INT: return (int64_t)floor((d->high - d->low) / d->step) + 1;
    case CT_HP_UNIFORM:
        /* A small tolerance keeps high in the set when (high - low) / step is a whole number that
         * rounding left just below (0.3 - 0.1) / 0.1 = 1.9999999999999998. */
        return d->step > 0 ? (int64_t)floor((d->high - d->low) / d->step * (1 + 1e-12) + 1e-9) + 1 : 0;
    case CT_HP_LOGUNIFORM: return 0;
    }
    return 0;
}

json_t *ct_hp_dim_value(const ct_hp_dim *d, int64_t i) {
    if (d->kind == CT_HP_CATEGORICAL) return json_deep_copy(json_array_get(d->values, (size_t)i));
    if (d->kind == CT_HP_INT) return json_integer((json_int_t)(d->low + (double)i * d->step));
    double x = d->low + (double)i * d->step;
    return json_real(x > d->high ? d->high : x);
}

/* One draw of d from r. */
static json_t *draw(const ct_hp_dim *d, ct_rng *r) {
    switch (d->kind) {
    case CT_HP_CATEGORICAL:
    case CT_HP_INT:
        if (d->kind == CT_HP_INT && d->log) {
            /* Optuna's IntDistribution(log=True): log-uniform on [low - 0.5, high + 0.5], rounded, so
             * integer i gets the weight log((i + 0.5) / (i - 0.5)). */
            double lo = log(d->low - 0.5), hi = log(d->high + 0.5);
            double x = round(exp(lo + (hi - lo) * ct_rng_uniform(r)));
            return json_integer((json_int_t)fmin(fmax(x, d->low), d->high));
        }
        return ct_hp_dim_value(d, (int64_t)ct_rng_below(r, (uint64_t)ct_hp_dim_count(d)));
    case CT_HP_UNIFORM:
        if (d->step > 0) return ct_hp_dim_value(d, (int64_t)ct_rng_below(r, (uint64_t)ct_hp_dim_count(d)));
        return json_real(d->low + (d->high - d->low) * ct_rng_uniform(r));
    case CT_HP_LOGUNIFORM: {
        double lo = log(d->low), hi = log(d->high);
        /* exp of the end points can come out a rounding away from them: keep the draw inside. */
        return json_real(fmin(fmax(exp(lo + (hi - lo) * ct_rng_uniform(r)), d->low), d->high));
    }
    }
    return NULL;
}

ct_status ct_hp_sample_random(const ct_hp_space *s, uint64_t seed, int64_t k, json_t **out) {
    CT_ASSERT(k >= 0 && k <= UINT32_MAX);
    ct_rng r;
    ct_rng_init(&r, seed, (uint32_t)k, HP_RNG_PURPOSE);
    json_t *params = json_object();
    if (!params) return ct_error(CT_ERR_NOMEM, "hyperparameter search: out of memory");
    for (int i = 0; i < s->n; i++) {
        if (json_object_set_new(params, s->dims[i].key, draw(&s->dims[i], &r)) != 0) {
            json_decref(params);
            return ct_error(CT_ERR_NOMEM, "hyperparameter search: out of memory");
        }
    }
    *out = params;
    return CT_OK;
}

ct_status ct_hp_grid_size(const ct_hp_space *s, int64_t *out) {
    int64_t n = 1;
    for (int i = 0; i < s->n; i++) {
        const ct_hp_dim *d = &s->dims[i];
        int64_t c = ct_hp_dim_count(d);
        if (c == 0)
            return ct_error(CT_ERR_CONFIG,
                            "grid search: '%s' is %s, which has no finite set of values; give it a list of values, "
                            "an int range or a float with \"step\", or use --method random",
                            d->key, d->kind == CT_HP_LOGUNIFORM ? "loguniform" : "uniform");
        if (n > INT64_MAX / c) return ct_error(CT_ERR_CONFIG, "grid search: the grid has more than 2^63 points");
        n *= c;
    }
    *out = n;
    return CT_OK;
}

ct_status ct_hp_grid_point(const ct_hp_space *s, int64_t k, json_t **out) {
    int64_t size;
    CT_TRY(ct_hp_grid_size(s, &size));
    CT_ASSERT(k >= 0 && k < size);
    int64_t *index = calloc((size_t)s->n, sizeof *index);
    json_t *params = json_object();
    ct_status st = index && params ? CT_OK : ct_error(CT_ERR_NOMEM, "hyperparameter search: out of memory");
    /* itertools.product order: the last key varies fastest. */
    for (int i = s->n - 1; st == CT_OK && i >= 0; i--) {
        int64_t c = ct_hp_dim_count(&s->dims[i]);
        index[i] = k % c;
        k /= c;
    }
    for (int i = 0; st == CT_OK && i < s->n; i++)
        if (json_object_set_new(params, s->dims[i].key, ct_hp_dim_value(&s->dims[i], index[i])) != 0)
            st = ct_error(CT_ERR_NOMEM, "hyperparameter search: out of memory");
    free(index);
    if (st != CT_OK) {
        json_decref(params);
        return st;
    }
    *out = params;
    return CT_OK;
}
