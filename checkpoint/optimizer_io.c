/* optimizer.h5 and scheduler.json (see checkpoint_io.h): the optimizer's state tensors written as
 * they lie in memory (flat tensors like the parameter buffer), so a restore is a copy and a resumed
 * step is bit-identical to an uninterrupted one. Loading is all or nothing: every dataset is read and
 * checked into temporaries before the optimizer is touched, so a mismatch leaves the run as it was. */
#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint/checkpoint_io.h"
#include "core/format/h5_check.h"
#include "core/format/h5_image.h"
#include "core/format/h5io.h"
#include "core/fs.h"
#include "core/log.h"

#define JSON_FLAGS (JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17))

/* --- optimizer ---------------------------------------------------------------------------------- */

/* The configuration with TrainingArguments' names, so ct_optim_config_from_json reads it back. */
static char *optim_config_text(const ct_optim_config *c) {
    json_t *o = json_pack("{sssfsfsfsfsfsbsfsfsb}", "optim", ct_optim_kind_name(c->optim), "learning_rate",
                          c->learning_rate, "weight_decay", c->weight_decay, "adam_beta1", c->adam_beta1, "adam_beta2",
                          c->adam_beta2, "adam_epsilon", c->adam_epsilon, "amsgrad", (int)c->amsgrad, "momentum",
                          c->momentum, "dampening", c->dampening, "nesterov", (int)c->nesterov);
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(o);
    return text;
}

static ct_status write_int_attr(hid_t f, const char *name, int64_t v) {
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attr = H5Acreate2(f, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = attr < 0 ? -1 : H5Awrite(attr, H5T_NATIVE_INT64, &v);
    if (attr >= 0) H5Aclose(attr);
    H5Sclose(space);
    if (rc < 0) return ct_error(CT_ERR_IO, "hdf5: cannot write attribute '%s'", name);
    return CT_OK;
}

static ct_status read_int_attr(hid_t f, const char *name, int64_t *v) {
    if (H5Aexists(f, name) <= 0) return ct_error(CT_ERR_FORMAT, "no attribute '%s'", name);
    hid_t attr = H5Aopen(f, name, H5P_DEFAULT);
    if (attr < 0) return ct_error(CT_ERR_FORMAT, "cannot open attribute '%s'", name);
    hid_t type = H5Aget_type(attr), space = H5Aget_space(attr);
    bool ok = H5Tget_class(type) == H5T_INTEGER && H5Sget_simple_extent_npoints(space) == 1 &&
              H5Aread(attr, H5T_NATIVE_INT64, v) >= 0;
    H5Sclose(space);
    H5Tclose(type);
    H5Aclose(attr);
    if (!ok) return ct_error(CT_ERR_FORMAT, "attribute '%s' is not an integer", name);
    return CT_OK;
}

static ct_status write_optimizer(hid_t f, const ct_optimizer_snapshot *snap, const char *config) {
    for (int i = 0; i < snap->n_state; i++) CT_TRY(ct_h5_write_tensor(f, snap->state_names[i], &snap->state[i]));
    CT_TRY(ct_h5_write_string_attr(f, "optim", snap->name));
    CT_TRY(write_int_attr(f, "step", snap->step));
    return ct_h5_write_string_attr(f, "config", config);
}

ct_status ct_optimizer_snapshot_view(ct_optimizer *opt, ct_optimizer_snapshot *out) {
    memset(out, 0, sizeof *out);
    const char *name = ct_optimizer_name(opt);
    int n = ct_optimizer_state_count(opt);
    if (strlen(name) >= sizeof out->name)
        return ct_error(CT_ERR_INVALID_ARG, "optimizer name '%s' is longer than %zu characters", name,
                        sizeof out->name - 1);
    if (n < 0 || n > CT_OPTIM_MAX_STATE)
        return ct_error(CT_ERR_STATE, "optimizer '%s' has %d state tensors (at most %d)", name, n, CT_OPTIM_MAX_STATE);
    snprintf(out->name, sizeof out->name, "%s", name);
    out->config = opt->config;
    out->step = ct_optimizer_step_count(opt);
    for (int i = 0; i < n; i++) {
        const char *sname;
        ct_tensor *t;
        CT_TRY(ct_optimizer_state_get(opt, i, &sname, &t));
        if (strlen(sname) >= sizeof out->state_names[i])
            return ct_error(CT_ERR_INVALID_ARG, "optimizer '%s': state name '%s' is longer than %zu characters", name,
                            sname, sizeof out->state_names[i] - 1);
        snprintf(out->state_names[i], sizeof out->state_names[i], "%s", sname);
        out->state[i] = *t;
    }
    out->n_state = n;
    return CT_OK;
}

ct_status ct_optimizer_snapshot_save_h5(const ct_optimizer_snapshot *snap, const char *file) {
    char *config = optim_config_text(&snap->config);
    if (!config) return ct_error(CT_ERR_NOMEM, "save optimizer '%s': out of memory", file);
    size_t bytes = 0;
    for (int i = 0; i < snap->n_state; i++) bytes += ct_tensor_nbytes(&snap->state[i]);
    /* built in memory, written without the HDF5 lock (core/format/h5_image.h) */
    void *image = NULL;
    size_t size = 0;
    ct_h5_lock();
    ct_h5_quiet();
    ct_h5_image im;
    ct_status s = ct_h5_image_create(bytes, &im);
    if (s == CT_OK) {
        s = write_optimizer(im.file, snap, config);
        if (s == CT_OK)
            s = ct_h5_image_finish(&im, &image, &size);
        else
            ct_h5_image_discard(&im);
    }
    ct_h5_unlock();
    free(config);
    if (s == CT_OK) s = ct_write_file(file, image, size); /* removes what it could not finish */
    free(image);
    if (s != CT_OK) return ct_error_prefix(s, "save optimizer '%s': ", file);
    return CT_OK;
}

ct_status ct_optimizer_save_h5(ct_optimizer *opt, const char *file) {
    ct_optimizer_snapshot snap;
    ct_status s = ct_optimizer_snapshot_view(opt, &snap);
    if (s != CT_OK) return ct_error_prefix(s, "save optimizer '%s': ", file);
    return ct_optimizer_snapshot_save_h5(&snap, file);
}

/* What a load has read and checked, before anything is copied into the optimizer. */
typedef struct optim_load {
    int n;
    ct_tensor tmp[CT_OPTIM_MAX_STATE];
    ct_tensor *dst[CT_OPTIM_MAX_STATE];
    int64_t step;
    ct_optim_config saved; /* the configuration the file was written with */
} optim_load;

/* The shortest text that reads back as v (0.3, not 0.29999999999999999), so two values that differ
 * print differently and equal-looking ones are not shown as a difference. */
static const char *shortest(double v, char *buf, size_t cap) {
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    return buf;
}

/* A hyper-parameter that changes what the state means: equal in the file and in this run, or
 * CT_ERR_CONFIG naming it. Values compare exactly (the JSON keeps 17 digits). */
static ct_status same_setting(const char *file, const char *key, double saved, double now) {
    if (saved == now) return CT_OK;
    char a[32], b[32];
    return ct_error(CT_ERR_CONFIG,
                    "%s was saved with %s = %s, this run uses %s = %s (the optimizer state depends on it)", file,
                    key, shortest(saved, a, sizeof a), key, shortest(now, b, sizeof b));
}

/* A rate the state does not depend on (learning_rate, weight_decay, adam_epsilon): this run's value
 * is used, and a change is said, since Hugging Face's resume would keep the checkpoint's. */
static void note_changed_setting(const char *file, const char *key, double saved, double now) {
    if (saved == now) return;
    char a[32], b[32];
    ct_log_warning("%s was saved with %s = %s; this resumed run uses its own %s = %s (Hugging Face's Trainer "
                   "would keep the checkpoint's)",
                   file, key, shortest(saved, a, sizeof a), key, shortest(now, b, sizeof b));
}

static void note_changed_settings(const char *file, const ct_optim_config *saved, const ct_optim_config *now) {
    note_changed_setting(file, "learning_rate", saved->learning_rate, now->learning_rate);
    note_changed_setting(file, "weight_decay", saved->weight_decay, now->weight_decay);
    if (now->optim != CT_OPTIM_SGD) note_changed_setting(file, "adam_epsilon", saved->adam_epsilon, now->adam_epsilon);
}

/* Reads the file's configuration into *saved and refuses a change that alters what the state means. */
static ct_status check_config(hid_t f, const ct_optimizer *opt, const char *file, ct_optim_config *saved_out) {
    char *text = NULL;
    ct_status s = ct_h5_read_string_attr(f, "config", &text);
    if (s != CT_OK) return ct_error_prefix(CT_ERR_FORMAT, "%s: ", file);
    json_error_t jerr;
    json_t *obj = json_loads(text, 0, &jerr);
    free(text);
    if (!obj) return ct_error(CT_ERR_FORMAT, "%s: attribute 'config' is not JSON: %s", file, jerr.text);
    ct_optim_config saved;
    s = ct_optim_config_from_json(obj, "config", &saved);
    json_decref(obj);
    if (s != CT_OK) return ct_error_prefix(CT_ERR_FORMAT, "%s: attribute ", file);
    *saved_out = saved;
    const ct_optim_config *now = &opt->config;
    if (saved.optim != now->optim)
        return ct_error(CT_ERR_CONFIG, "%s holds '%s' state, this run uses '%s'", file, ct_optim_kind_name(saved.optim),
                        ct_optim_kind_name(now->optim));
    if (now->optim == CT_OPTIM_SGD) {
        CT_TRY(same_setting(file, "momentum", saved.momentum, now->momentum));
        return same_setting(file, "dampening", saved.dampening, now->dampening);
    }
    if (saved.amsgrad != now->amsgrad)
        return ct_error(CT_ERR_CONFIG, "%s was saved with amsgrad = %s, this run uses amsgrad = %s", file,
                        saved.amsgrad ? "true" : "false", now->amsgrad ? "true" : "false");
    CT_TRY(same_setting(file, "adam_beta1", saved.adam_beta1, now->adam_beta1));
    return same_setting(file, "adam_beta2", saved.adam_beta2, now->adam_beta2);
}

/* Root links of the file that are not state tensors of opt: the first one's name. */
typedef struct extra_search {
    ct_optimizer *opt;
    int links;
    char name[256];
} extra_search;

static herr_t visit_link(hid_t g, const char *name, const H5L_info_t *info, void *data) {
    (void)g, (void)info;
    extra_search *e = data;
    e->links++;
    if (!e->name[0] && !ct_optimizer_state_find(e->opt, name)) snprintf(e->name, sizeof e->name, "%s", name);
    return 0;
}

/* Reads state dataset `name` into a new temporary shaped like dst. */
static ct_status read_state(hid_t f, const char *file, const char *name, const ct_tensor *dst, ct_tensor *tmp) {
    if (!ct_h5_exists(f, name)) return ct_error(CT_ERR_FORMAT, "%s has no state tensor '%s'", file, name);
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    if (ds < 0) return ct_error(CT_ERR_FORMAT, "%s: '%s' is not a dataset", file, name);
    if (ct_h5_check_dataset(ds, name) != CT_OK) {
        H5Dclose(ds);
        return ct_error_prefix(CT_ERR_FORMAT, "%s: ", file);
    }
    hid_t space = H5Dget_space(ds);
    int nd = H5Sget_simple_extent_ndims(space);
    hsize_t dims[CT_MAX_DIMS] = {0};
    if (nd == 1) H5Sget_simple_extent_dims(space, dims, NULL);
    H5Sclose(space);
    int64_t want = ct_tensor_numel(dst);
    ct_status s = CT_OK;
    if (nd != 1)
        s = ct_error(CT_ERR_FORMAT, "%s: state tensor '%s' has %d dimensions, 1 expected", file, name, nd);
    else if ((int64_t)dims[0] != want)
        s = ct_error(CT_ERR_CONFIG,
                     "%s: state tensor '%s' has %lld elements, this run's parameters have %lld (another model?)",
                     file, name, (long long)dims[0], (long long)want);
    if (s == CT_OK) s = ct_tensor_alloc(tmp, dst->dtype, CT_CPU, 1, &want);
    if (s == CT_OK && H5Dread(ds, ct_dtype_size(dst->dtype) == 8 ? H5T_NATIVE_DOUBLE : H5T_NATIVE_FLOAT, H5S_ALL,
                              H5S_ALL, H5P_DEFAULT, tmp->data) < 0) {
        ct_tensor_free(tmp);
        s = ct_error(CT_ERR_FORMAT, "%s: cannot read state tensor '%s' as %s", file, name,
                     ct_dtype_name(dst->dtype));
    } else if (s == CT_OK && (s = ct_tensor_check_finite(tmp)) != CT_OK) {
        /* a NaN moment would poison every later update without a bad step to report */
        ct_tensor_free(tmp);
        s = ct_error_prefix(s, "%s: state tensor '%s': ", file, name);
    }
    H5Dclose(ds);
    return s;
}

static ct_status read_optimizer(hid_t f, ct_optimizer *opt, const char *file, optim_load *ld) {
    char *name = NULL;
    if (ct_h5_read_string_attr(f, "optim", &name) != CT_OK) return ct_error_prefix(CT_ERR_FORMAT, "%s: ", file);
    ct_status s = strcmp(name, ct_optimizer_name(opt)) == 0
                      ? CT_OK
                      : ct_error(CT_ERR_CONFIG, "%s holds '%s' state, this run uses '%s'", file, name,
                                 ct_optimizer_name(opt));
    free(name);
    CT_TRY(s);
    if (read_int_attr(f, "step", &ld->step) != CT_OK) return ct_error_prefix(CT_ERR_FORMAT, "%s: ", file);
    if (ld->step < 0) return ct_error(CT_ERR_FORMAT, "%s: step count %lld is negative", file, (long long)ld->step);
    CT_TRY(check_config(f, opt, file, &ld->saved));

    int n = ct_optimizer_state_count(opt);
    CT_ASSERT(n >= 0 && n <= CT_OPTIM_MAX_STATE);
    for (int i = 0; i < n; i++) {
        const char *sname;
        ct_tensor *t;
        CT_TRY(ct_optimizer_state_get(opt, i, &sname, &t));
        if (t->dtype != CT_F32 && t->dtype != CT_F64)
            return ct_error(CT_ERR_DTYPE, "%s: state tensor '%s' is %s; f32 or f64 expected", file, sname,
                            ct_dtype_name(t->dtype));
        CT_TRY(read_state(f, file, sname, t, &ld->tmp[i]));
        ld->dst[i] = t;
        ld->n = i + 1;
    }
    extra_search e = {.opt = opt};
    H5Literate(f, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, visit_link, &e);
    if (e.links != n)
        return ct_error(CT_ERR_CONFIG, "%s holds state '%s' that this '%s' optimizer does not have", file,
                        e.name[0] ? e.name : "?", ct_optimizer_name(opt));
    return CT_OK;
}

ct_status ct_optimizer_read_step_h5(const char *file, int64_t *step) {
    if (access(file, R_OK) != 0)
        return ct_error(CT_ERR_IO, "load optimizer: cannot read '%s': %s", file, strerror(errno));
    ct_h5_lock();
    ct_h5_quiet();
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    ct_status s = f < 0 ? ct_error(CT_ERR_FORMAT, "%s is not an HDF5 file (or is corrupt)", file)
                        : read_int_attr(f, "step", step);
    if (f >= 0) {
        H5Fclose(f);
        if (s != CT_OK) s = ct_error_prefix(s, "%s: ", file);
    }
    ct_h5_unlock();
    return s == CT_OK ? s : ct_error_prefix(s, "load optimizer: ");
}

ct_status ct_optimizer_load_h5(ct_optimizer *opt, const char *file) {
    if (access(file, R_OK) != 0)
        return ct_error(CT_ERR_IO, "load optimizer: cannot read '%s': %s", file, strerror(errno));
    ct_status rs = ct_check_regular_file(file); /* HDF5 would block on a FIFO */
    if (rs != CT_OK) return ct_error_prefix(rs, "load optimizer: ");
    optim_load ld = {0};
    ct_h5_lock();
    ct_h5_quiet();
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    ct_status s = f < 0 ? ct_error(CT_ERR_FORMAT, "%s is not an HDF5 file (or is corrupt)", file)
                        : read_optimizer(f, opt, file, &ld);
    if (f >= 0) H5Fclose(f);
    ct_h5_unlock();
    if (s == CT_OK) {
        /* The state goes where the optimizer keeps it (a device copy when it lives on a GPU). */
        for (int i = 0; s == CT_OK && i < ld.n; i++) s = ct_tensor_copy_to(ld.dst[i], &ld.tmp[i]);
        if (s == CT_OK) s = ct_optimizer_set_step_count(opt, ld.step); /* cannot fail: checked >= 0 above */
        if (s == CT_OK) note_changed_settings(file, &ld.saved, &opt->config);
    }
    for (int i = 0; i < ld.n; i++) ct_tensor_free(&ld.tmp[i]);
    if (s != CT_OK) return ct_error_prefix(s, "load optimizer: ");
    return CT_OK;
}

/* --- scheduler ---------------------------------------------------------------------------------- */

char *ct_scheduler_json_text(const ct_scheduler *s) {
    ct_scheduler_state st = ct_scheduler_get_state(s);
    json_t *o =
        json_pack("{ssso}", "lr_scheduler_type", ct_scheduler_name(s), "state", ct_scheduler_state_to_json(&st));
    char *text = o ? json_dumps(o, JSON_FLAGS) : NULL;
    json_decref(o);
    return text;
}

ct_status ct_scheduler_save_json(const ct_scheduler *s, const char *file) {
    char *text = ct_scheduler_json_text(s);
    if (!text) return ct_error(CT_ERR_NOMEM, "save scheduler '%s': out of memory", file);
    ct_status rc = ct_write_file_atomic(file, text, strlen(text)); /* durable: fsync'd, then its directory */
    free(text);
    if (rc != CT_OK) return ct_error_prefix(rc, "save scheduler: ");
    return CT_OK;
}

ct_status ct_scheduler_read_json(const char *file, char *type, size_t cap, ct_scheduler_state *st) {
    if (access(file, R_OK) != 0)
        return ct_error(CT_ERR_IO, "load scheduler: cannot read '%s': %s", file, strerror(errno));
    json_error_t jerr;
    FILE *f;
    ct_status os = ct_fopen_read(file, &f);
    if (os != CT_OK) return ct_error_prefix(os, "load scheduler: ");
    json_t *o = json_loadf(f, 0, &jerr);
    fclose(f);
    if (!o)
        return ct_error(CT_ERR_FORMAT, "load scheduler: %s:%d:%d: %s", file, jerr.line, jerr.column, jerr.text);
    ct_status rc = CT_OK;
    const char *name = json_string_value(json_object_get(o, "lr_scheduler_type"));
    if (!json_is_object(o) || !name || strlen(name) >= cap)
        rc = ct_error(CT_ERR_FORMAT, "load scheduler: %s has no string 'lr_scheduler_type'", file);
    else if (ct_scheduler_state_from_json(json_object_get(o, "state"), "state", st) != CT_OK)
        rc = ct_error_prefix(CT_ERR_FORMAT, "load scheduler: %s: ", file);
    else
        memcpy(type, name, strlen(name) + 1);
    json_decref(o);
    return rc;
}

ct_status ct_scheduler_load_json(ct_scheduler *s, const char *file) {
    char type[128];
    ct_scheduler_state st;
    CT_TRY(ct_scheduler_read_json(file, type, sizeof type, &st));
    if (strcmp(type, ct_scheduler_name(s)) != 0)
        return ct_error(CT_ERR_CONFIG, "load scheduler: %s holds '%s' state, this run uses lr_scheduler_type '%s'",
                        file, type, ct_scheduler_name(s));
    ct_status rc = ct_scheduler_set_state(s, &st);
    return rc == CT_OK ? rc : ct_error_prefix(CT_ERR_FORMAT, "load scheduler: %s: ", file);
}
