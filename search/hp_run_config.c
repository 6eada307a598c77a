/* Searches over run configs (see the end of hp_search.h): checking a space's keys against a config
 * before any trial runs, applying a trial's values as --set assignments, and writing the best
 * trial's config.
 *
 * Which keys a config accepts is known only to the readers of its sections (the layer registry, the
 * loss, metric, callback and dataset readers, the training-argument schema), which all report an
 * unknown key the same way: "<path>: unknown key '<name>'...". So the check sets each key of the
 * space, with each of its candidate values, into a copy of the config, runs the reader of the key's
 * section, and refuses the key when the reader calls it (or a key on its path) unknown. Any other
 * complaint is about the value, which is a trial's business: the trial fails with it and the search
 * goes on. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "data/dataset_json.h"
#include "eval/metric.h"
#include "model/layers.h"
#include "model/loss.h"
#include "search/hp_search.h"

char *ct_hp_assignment(const char *key, const json_t *value) {
    char *v = json_dumps(value, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(17));
    if (!v) return NULL;
    size_t n = strlen(key) + strlen(v) + 2;
    char *a = malloc(n);
    if (a) snprintf(a, n, "%s=%s", key, v);
    free(v);
    return a;
}

ct_status ct_hp_apply_params(ct_run_config *c, const json_t *params) {
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)params, key, v) {
        char *a = ct_hp_assignment(key, v);
        if (!a) return ct_error(CT_ERR_NOMEM, "hyperparameter search: out of memory");
        ct_status s = ct_run_config_set(c, a);
        free(a);
        CT_TRY(s);
    }
    return CT_OK;
}

/* A copy of base's root with its names (a run config built in memory). */
static ct_status copy_config(const ct_run_config *base, ct_run_config *out) {
    memset(out, 0, sizeof *out);
    out->root = base->root ? json_deep_copy(base->root) : json_object();
    out->file = strdup(base->file ? base->file : "<memory>");
    out->base_dir = strdup(base->base_dir ? base->base_dir : ".");
    out->modified = true;
    if (!out->root || !out->file || !out->base_dir) {
        ct_run_config_free(out);
        return ct_error(CT_ERR_NOMEM, "hyperparameter search: out of memory");
    }
    return CT_OK;
}

/* --- the key check ------------------------------------------------------------------------------------- */

/* p is key itself or a leading part of it that ends where a component ends. */
static bool is_path_prefix(const char *p, size_t n, const char *key) {
    return strncmp(key, p, n) == 0 && (key[n] == '\0' || key[n] == '.' || key[n] == '[');
}

/* The message (ct_last_error) says "<path>: unknown key '<name>'" about key or a key on its path:
 * <path>.<name> leads to key (check_keys' form), or <path> leads to key and ends with <name> (the
 * training-argument schema's form). */
static bool unknown_key_of(const char *msg, const char *key) {
    const char *mark = strstr(msg, ": unknown key '");
    if (!mark) return false;
    size_t plen = (size_t)(mark - msg);
    const char *name = mark + strlen(": unknown key '");
    const char *end = strchr(name, '\'');
    if (!end) return false;
    size_t nlen = (size_t)(end - name);
    char joined[1024];
    if (plen + 1 + nlen < sizeof joined) {
        snprintf(joined, sizeof joined, "%.*s.%.*s", (int)plen, msg, (int)nlen, name);
        if (is_path_prefix(joined, plen + 1 + nlen, key)) return true;
    }
    return is_path_prefix(msg, plen, key) && plen > nlen && msg[plen - nlen - 1] == '.' &&
           strncmp(msg + plen - nlen, name, nlen) == 0;
}

static ct_status read_dataset(const json_t *spec, const char *path, const char *base_dir) {
    ct_dataset *ds = NULL;
    ct_status s = ct_dataset_from_json(spec, path, base_dir, &ds);
    ct_dataset_free(ds);
    return s;
}

/* The dataset reader for the spec a data.* key is in (only that one: reading opens the data). */
static ct_status read_data(const ct_run_config *c, const char *key) {
    static const char *const sets[] = {"train", "eval", "test", NULL};
    const json_t *data = ct_run_config_section(c, "data");
    CT_TRY(ct_json_check_keys(data, "data", sets));
    char set[64] = "", name[256] = "";
    sscanf(key, "data.%63[^.[].%255[^.[]", set, name);
    const json_t *spec = json_object_get(data, set);
    char path[512];
    snprintf(path, sizeof path, "data.%s", set);
    if (!spec) return CT_OK;
    if (strcmp(set, "eval") == 0 && json_is_object(spec) && !json_object_get(spec, "type")) {
        /* named evaluation sets: {"name": spec, ...} */
        if (!name[0]) return CT_OK;
        spec = json_object_get(spec, name);
        snprintf(path, sizeof path, "data.eval.%s", name);
        if (!spec) return CT_OK;
    }
    return read_dataset(spec, path, c->base_dir);
}

static ct_status read_callbacks(const json_t *cbs) {
    if (!json_is_array(cbs)) return ct_error(CT_ERR_CONFIG, "callbacks: expected a list of callbacks");
    for (size_t i = 0; i < json_array_size(cbs); i++) {
        char path[64];
        snprintf(path, sizeof path, "callbacks[%zu]", i);
        ct_callback *cb = NULL;
        CT_TRY(ct_callback_from_json(json_array_get(cbs, i), path, &cb));
        ct_callback_free(cb);
    }
    return CT_OK;
}

/* Runs the reader of key's section over c. */
static ct_status read_section(const ct_run_config *c, const char *key) {
    const json_t *sec;
    if (strncmp(key, "training_args", 13) == 0 && (sec = ct_run_config_section(c, "training_args"))) {
        ct_training_args a;
        ct_training_args_default(&a);
        ct_status s = ct_training_args_from_json(&a, sec, "training_args");
        ct_training_args_free(&a);
        return s;
    }
    if (strncmp(key, "model", 5) == 0 && (sec = ct_run_config_section(c, "model"))) {
        ct_module *m = NULL;
        ct_status s = ct_module_from_json(sec, "model", &m);
        if (m) ct_module_destroy(m);
        return s;
    }
    if (strncmp(key, "loss", 4) == 0 && (sec = ct_run_config_section(c, "loss"))) {
        ct_loss *l = NULL;
        ct_status s = ct_loss_from_json(sec, "loss", &l);
        ct_loss_free(l);
        return s;
    }
    if (strncmp(key, "metrics", 7) == 0 && (sec = ct_run_config_section(c, "metrics"))) {
        ct_metric_set m = {0};
        ct_status s = ct_metric_set_from_json(sec, "metrics", &m);
        ct_metric_set_free(&m);
        return s;
    }
    if (strncmp(key, "callbacks", 9) == 0 && (sec = ct_run_config_section(c, "callbacks"))) return read_callbacks(sec);
    if (strncmp(key, "data", 4) == 0 && ct_run_config_section(c, "data")) return read_data(c, key);
    return CT_OK;
}

/* The values a key is tried with: every categorical value (up to 16), else both ends. */
static int candidates(const ct_hp_dim *d, json_t **out, int cap) {
    int n = 0;
    if (d->kind == CT_HP_CATEGORICAL) {
        for (size_t i = 0; i < json_array_size(d->values) && n < cap; i++) out[n++] = ct_hp_dim_value(d, (int64_t)i);
    } else {
        out[n++] = d->kind == CT_HP_INT ? json_integer((json_int_t)d->low) : json_real(d->low);
        out[n++] = d->kind == CT_HP_INT ? json_integer((json_int_t)d->high) : json_real(d->high);
    }
    return n;
}

static ct_status check_key(const ct_hp_dim *d, const ct_run_config *base) {
    if (strcmp(d->key, "training_args.output_dir") == 0)
        return ct_error(CT_ERR_CONFIG, "the search sets it (one directory per trial: <output>/trial-<k>)");
    json_t *values[16];
    int n = candidates(d, values, 16);
    ct_status s = CT_OK;
    for (int i = 0; i < n && s == CT_OK; i++) {
        ct_run_config c;
        s = copy_config(base, &c);
        char *a = s == CT_OK ? ct_hp_assignment(d->key, values[i]) : NULL;
        if (s == CT_OK && !a) s = ct_error(CT_ERR_NOMEM, "out of memory");
        /* A path that cannot be set (unknown section, an index past a list's end, a value in the way)
         * is wrong whatever the value. */
        if (s == CT_OK) s = ct_run_config_set(&c, a);
        if (s == CT_OK && read_section(&c, d->key) != CT_OK) {
            if (unknown_key_of(ct_last_error(), d->key)) s = CT_ERR_CONFIG;
            else ct_error_clear();
        }
        free(a);
        ct_run_config_free(&c);
    }
    for (int i = 0; i < n; i++) json_decref(values[i]);
    return s;
}

ct_status ct_hp_check_config_keys(const ct_hp_space *space, const char *space_name, const ct_run_config *base) {
    for (int i = 0; i < space->n; i++) {
        ct_status s = check_key(&space->dims[i], base);
        if (s != CT_OK) {
            /* "--set 'key=value': ..." from the setter says the same with the value: the key is what counts. */
            const char *msg = ct_last_error();
            if (strncmp(msg, "--set '", 7) == 0 && strstr(msg, "': ")) msg = strstr(msg, "': ") + 3;
            /* and a message that starts with the key needs it once */
            size_t klen = strlen(space->dims[i].key);
            if (strncmp(msg, space->dims[i].key, klen) == 0 && strncmp(msg + klen, ": ", 2) == 0) msg += klen + 2;
            char copy[2048];
            snprintf(copy, sizeof copy, "%s", msg);
            return ct_error(s, "%s: %s: %s", space_name, space->dims[i].key, copy);
        }
    }
    return CT_OK;
}

/* --- the best config ------------------------------------------------------------------------------------ */

/* Relative file names of a dataset spec made absolute against dir (the config's directory), so the
 * config can be read from anywhere. The keys that name files, by dataset type (data/dataset_json.c;
 * an hdf5 set's "labels" is a dataset inside its file, not a file). */
static ct_status rebase_spec(json_t *spec, const char *dir) {
    static const struct {
        const char *type, *keys[4];
    } file_keys[] = {{"fashion_mnist", {"dir", "cache", NULL}},
                     {"idx", {"images", "labels", "cache", NULL}},
                     {"hdf5", {"path", NULL}},
                     {"tokens", {"path", NULL}}};
    const char *type = json_string_value(json_object_get(spec, "type"));
    for (size_t t = 0; type && t < sizeof file_keys / sizeof file_keys[0]; t++) {
        if (strcmp(type, file_keys[t].type) != 0) continue;
        for (int k = 0; file_keys[t].keys[k]; k++) {
            const char *f = json_string_value(json_object_get(spec, file_keys[t].keys[k]));
            if (!f || !f[0] || f[0] == '/') continue;
            char abs[PATH_MAX + 4096];
            snprintf(abs, sizeof abs, "%s/%s", dir, f);
            if (json_object_set_new(spec, file_keys[t].keys[k], json_string(abs)) != 0)
                return ct_error(CT_ERR_NOMEM, "out of memory");
        }
    }
    return CT_OK;
}

static ct_status rebase_data(json_t *root, const char *base_dir) {
    json_t *data = json_object_get(root, "data");
    if (!json_is_object(data)) return CT_OK;
    char dir[PATH_MAX];
    if (!realpath(base_dir, dir)) return ct_error(CT_ERR_IO, "%s: cannot resolve the config's directory", base_dir);
    CT_TRY(rebase_spec(json_object_get(data, "train"), dir));
    CT_TRY(rebase_spec(json_object_get(data, "test"), dir));
    json_t *eval = json_object_get(data, "eval");
    if (json_is_object(eval) && !json_object_get(eval, "type")) {
        const char *name;
        json_t *spec;
        json_object_foreach(eval, name, spec) CT_TRY(rebase_spec(spec, dir));
        return CT_OK;
    }
    return rebase_spec(eval, dir);
}

ct_status ct_hp_write_best_config(const ct_run_config *base, const json_t *params, const char *file) {
    ct_run_config c;
    CT_TRY(copy_config(base, &c));
    ct_status s = ct_hp_apply_params(&c, params);
    if (s == CT_OK) s = rebase_data(c.root, c.base_dir);
    if (s == CT_OK) s = ct_hp_write_json(c.root, file);
    ct_run_config_free(&c);
    return s;
}
