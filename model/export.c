/* `ctrainer export` (see export.h): model.h5's tensors and spec to model.safetensors and
 * config.json. */
#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/format/h5io.h"
#include "core/fs.h"
#include "core/json.h"
#include "model/export.h"
#include "model/layers.h"
#include "model/model_safetensors.h"

typedef struct h5_tensors {
    ct_named_tensor *items;
    int n, cap;
    ct_status status;
} h5_tensors;

static void tensors_free(h5_tensors *t) {
    for (int i = 0; i < t->n; i++) {
        free((char *)t->items[i].name);
        ct_tensor_free(&t->items[i].value);
    }
    free(t->items);
}

/* The dtype a dataset was saved in: float32 or float64 (what ctrainer's models are). */
static ct_status saved_dtype(hid_t f, const char *name, ct_dtype *out) {
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    if (ds < 0) return ct_error(CT_ERR_FORMAT, "'%s' is not a dataset", name);
    hid_t type = H5Dget_type(ds);
    H5T_class_t cls = H5Tget_class(type);
    size_t size = H5Tget_size(type);
    H5Tclose(type);
    H5Dclose(ds);
    if (cls != H5T_FLOAT || (size != 4 && size != 8))
        return ct_error(CT_ERR_FORMAT, "tensor '%s' is not float32 or float64", name);
    *out = size == 4 ? CT_F32 : CT_F64;
    return CT_OK;
}

static herr_t read_link(hid_t g, const char *name, const H5L_info_t *info, void *data) {
    (void)info;
    h5_tensors *t = data;
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        ct_named_tensor *grown = realloc(t->items, sizeof *grown * (size_t)cap);
        if (!grown) {
            t->status = ct_error(CT_ERR_NOMEM, "out of memory");
            return -1;
        }
        t->items = grown;
        t->cap = cap;
    }
    ct_dtype dt = CT_F32;
    ct_status s = saved_dtype(g, name, &dt);
    ct_named_tensor *item = &t->items[t->n];
    if (s == CT_OK) s = ct_h5_read_tensor_alloc(g, name, dt, &item->value);
    /* a NaN weight exported would pass for a trained model in PyTorch */
    if (s == CT_OK && (s = ct_tensor_check_finite(&item->value)) != CT_OK) {
        ct_tensor_free(&item->value);
        s = ct_error_prefix(s, "tensor '%s': ", name);
    }
    if (s == CT_OK && !(item->name = strdup(name))) {
        ct_tensor_free(&item->value);
        s = ct_error(CT_ERR_NOMEM, "out of memory");
    }
    if (s != CT_OK) {
        t->status = s;
        return -1;
    }
    t->n++;
    return 0;
}

/* Every tensor of model.h5, and its spec unless one is given (*spec is then a new reference). */
static ct_status read_model_h5(const char *file, h5_tensors *t, json_t **spec) {
    if (access(file, R_OK) != 0)
        return ct_error(CT_ERR_IO, "cannot read '%s': %s (not a saved model directory?)", file, strerror(errno));
    CT_TRY(ct_check_regular_file(file)); /* HDF5 would block on a FIFO */
    ct_h5_lock();
    ct_h5_quiet();
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    ct_status s = CT_OK;
    if (f < 0) s = ct_error(CT_ERR_FORMAT, "%s: not an HDF5 file (or corrupt)", file);
    if (s == CT_OK && H5Literate(f, H5_INDEX_NAME, H5_ITER_INC, NULL, read_link, t) < 0)
        s = t->status != CT_OK ? t->status : ct_error(CT_ERR_FORMAT, "cannot list the tensors");
    if (s == CT_OK && !*spec && H5Aexists(f, "config") > 0) {
        char *text;
        s = ct_h5_read_string_attr(f, "config", &text);
        if (s == CT_OK) {
            json_error_t err;
            *spec = json_loads(text, 0, &err);
            if (!*spec) s = ct_error(CT_ERR_FORMAT, "its \"config\" attribute is not JSON: %s", err.text);
            free(text);
        }
    } else if (*spec) {
        json_incref(*spec);
    }
    if (f >= 0) H5Fclose(f);
    ct_h5_unlock();
    if (s != CT_OK) return ct_error_prefix(s, "%s: ", file);
    if (t->n == 0) return ct_error(CT_ERR_FORMAT, "%s: no tensors", file);
    return CT_OK;
}

static const ct_named_tensor *find(const h5_tensors *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->items[i].name, name) == 0) return &t->items[i];
    return NULL;
}

/* The presets' output layer is the Linear with the highest index of their nn.Sequential. */
static int64_t preset_classes(const h5_tensors *t) {
    int best = -1;
    int64_t classes = 0;
    for (int i = 0; i < t->n; i++) {
        int k, end = 0;
        if (sscanf(t->items[i].name, "%d.weight%n", &k, &end) == 1 && end > 0 && t->items[i].name[end] == '\0' &&
            t->items[i].value.ndim == 2 && k > best) {
            best = k;
            classes = t->items[i].value.shape[0];
        }
    }
    return classes;
}

static ct_status set_default(json_t *spec, const char *key, json_t *value) {
    if (!value) return ct_error(CT_ERR_NOMEM, "out of memory");
    if (json_object_get(spec, key)) {
        json_decref(value);
        return CT_OK;
    }
    return json_object_set_new(spec, key, value) == 0 ? CT_OK : ct_error(CT_ERR_NOMEM, "out of memory");
}

/* config.json: the spec with what its builder would take from defaults or from the data. */
static ct_status resolve_spec(const json_t *spec, const h5_tensors *t, json_t **out) {
    *out = NULL;
    const char *type = json_string_value(json_object_get(spec, "type"));
    if (!json_is_object(spec) || !type)
        return ct_error(CT_ERR_CONFIG, "model: expected a model spec with a \"type\" (e.g. {\"type\": \"mlp\", ...})");
    json_t *r = json_deep_copy(spec);
    if (!r) return ct_error(CT_ERR_NOMEM, "out of memory");
    ct_status s = CT_OK;
    if (strcmp(type, "gpt") == 0) {
        ct_gpt_config d = ct_gpt_config_default();
        const ct_named_tensor *wte = find(t, "transformer.wte.weight");
        if (wte && wte->value.ndim == 2) s = set_default(r, "vocab_size", json_integer(wte->value.shape[0]));
        if (s == CT_OK) s = set_default(r, "n_positions", json_integer(d.n_positions));
        if (s == CT_OK) s = set_default(r, "n_embd", json_integer(d.n_embd));
        if (s == CT_OK) s = set_default(r, "n_layer", json_integer(d.n_layer));
        if (s == CT_OK) s = set_default(r, "n_head", json_integer(d.n_head));
        if (s == CT_OK) s = set_default(r, "dropout", json_real(d.dropout));
        if (s == CT_OK) s = set_default(r, "bias", json_boolean(d.bias));
        if (s == CT_OK) s = set_default(r, "layer_norm_epsilon", json_real(d.layer_norm_epsilon));
    } else if ((strcmp(type, "mlp") == 0 || strcmp(type, "cnn") == 0) && preset_classes(t) > 0) {
        s = set_default(r, "num_classes", json_integer(preset_classes(t)));
    }
    /* Built once (no input shape needed) so that config.json is known to be a valid spec. */
    ct_module *check = NULL;
    if (s == CT_OK) s = ct_module_from_json(r, "model", &check);
    if (check) ct_module_destroy(check);
    if (s != CT_OK) {
        json_decref(r);
        return s;
    }
    *out = r;
    return CT_OK;
}

static ct_status parse_dtype(const char *name, ct_st_dtype *out) {
    *out = CT_ST_NUM_DTYPES;
    if (!name || !*name) return CT_OK;
    static const struct {
        const char *name;
        ct_st_dtype dt;
    } known[] = {{"f32", CT_ST_F32}, {"f64", CT_ST_F64}, {"bf16", CT_ST_BF16}, {"f16", CT_ST_F16}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(name, known[i].name) == 0) {
            *out = known[i].dt;
            return CT_OK;
        }
    return ct_error(CT_ERR_CONFIG, "dtype: unknown dtype '%s' (f32, f64, bf16 or f16)", name);
}

static ct_status export_to(const ct_export_options *o, ct_st_dtype dtype, const h5_tensors *t, const json_t *spec,
                           int *n_tensors) {
    json_t *config;
    CT_TRY(resolve_spec(spec, t, &config));
    const char *dir = o->output_dir && *o->output_dir ? o->output_dir : o->model_dir;
    char path[4096];
    ct_status s = ct_make_dirs(dir);
    if (s == CT_OK && snprintf(path, sizeof path, "%s/model.safetensors", dir) >= (int)sizeof path)
        s = ct_error(CT_ERR_INVALID_ARG, "output path too long: %s", dir);
    const char *type = json_string_value(json_object_get(config, "type"));
    if (s == CT_OK) s = ct_state_dict_save_safetensors(type, t->items, t->n, dtype, path);
    /* Read back: the file must pass the reader's every check. */
    ct_st_file *check = NULL;
    if (s == CT_OK) s = ct_st_open(path, &check);
    if (s == CT_OK && n_tensors) *n_tensors = ct_st_count(check);
    ct_st_close(check);
    if (s == CT_OK) {
        snprintf(path, sizeof path, "%s/config.json", dir);
        s = ct_json_write_file(config, path);
    }
    json_decref(config);
    return s;
}

ct_status ct_export_safetensors(const ct_export_options *o, int *n_tensors) {
    CT_ASSERT(o && o->model_dir);
    char file[4096];
    if (snprintf(file, sizeof file, "%s/model.h5", o->model_dir) >= (int)sizeof file)
        return ct_error(CT_ERR_INVALID_ARG, "model directory path too long: %s", o->model_dir);
    ct_st_dtype dtype;
    CT_TRY(parse_dtype(o->dtype, &dtype));
    if (o->verify_dir) CT_TRY(o->verify_dir(o->model_dir));
    h5_tensors t = {.status = CT_OK};
    json_t *spec = (json_t *)o->model_spec;
    ct_status s = read_model_h5(file, &t, &spec);
    if (s == CT_OK && !spec)
        s = ct_error(CT_ERR_CONFIG,
                     "%s has no model spec (saved without a config): give the run config that "
                     "trained it",
                     file);
    if (s == CT_OK) s = export_to(o, dtype, &t, spec, n_tensors);
    json_decref(spec);
    tensors_free(&t);
    return s;
}
