/* The files of a checkpoint directory and the manifest that makes it whole (see checkpoint_io.h).
 *
 * Optimizer state goes to HDF5 as it lies in memory (flat tensors like the parameter buffer), so a
 * restore is a copy and a resumed step is bit-identical to an uninterrupted one. Loading is all or
 * nothing: every dataset is read and checked into temporaries before the optimizer is touched, so
 * a mismatch leaves the run as it was. The manifest holds each file's size and zlib CRC-32; a
 * directory whose files do not match it is not a checkpoint, which is how a crash in the middle of
 * a save (or a later corruption) is told from a whole checkpoint. */
#define _GNU_SOURCE /* renameat2 */
#include "checkpoint/checkpoint_io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "checkpoint/checkpoint.h"
#include "core/format/h5_image.h"
#include "core/format/h5io.h"
#include "core/fs.h"
#include "core/io_fault.h"
#include "core/json.h"
#include "core/log.h"

#define MANIFEST "manifest.json"
#define MANIFEST_FORMAT "ctrainer-checkpoint"
#define MANIFEST_VERSION 1
#define JSON_FLAGS (JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17))

/* --- small file helpers ------------------------------------------------------------------------- */

ct_status ct_checkpoint_write_text(const char *path, const char *text) {
    char part[4352];
    if (snprintf(part, sizeof part, "%s.part", path) >= (int)sizeof part)
        return ct_error(CT_ERR_INVALID_ARG, "path too long: %s", path);
    /* write() through the fault hook; a partly written .part is removed */
    CT_TRY(ct_write_bytes(part, text, strlen(text)));
    if (rename(part, path) != 0) {
        int err = errno;
        unlink(part);
        return ct_error(CT_ERR_IO, "cannot rename '%s' to '%s': %s", part, path, strerror(err));
    }
    return CT_OK;
}

/* Size and CRC-32 of a file, read in chunks; with sync, the file is also fsync'd (the manifest
 * writer reads every file anyway, so it is the natural place to make them durable). */
static ct_status file_crc(const char *path, bool sync, int64_t *size, uint32_t *crc) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ct_error(CT_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = malloc(CHUNK);
    if (!buf) {
        close(fd);
        return ct_error(CT_ERR_NOMEM, "out of memory reading '%s'", path);
    }
    uLong c = crc32(0L, Z_NULL, 0);
    int64_t n = 0;
    ct_status s = CT_OK;
    for (;;) {
        ssize_t r = read(fd, buf, CHUNK);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            s = ct_error(CT_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
            break;
        }
        if (r == 0) break;
        c = crc32(c, buf, (uInt)r);
        n += r;
    }
    free(buf);
    if (s == CT_OK && sync && fsync(fd) != 0 && errno != EINVAL)
        s = ct_error(CT_ERR_IO, "cannot sync '%s': %s", path, strerror(errno));
    close(fd);
    *size = n;
    *crc = (uint32_t)c;
    return s;
}

/* --- optimizer ---------------------------------------------------------------------------------- */

static const char *kind_name(ct_optim_kind k) {
    switch (k) {
    case CT_OPTIM_SGD: return "sgd";
    case CT_OPTIM_ADAM: return "adam";
    case CT_OPTIM_ADAMW: return "adamw";
    }
    return "?";
}

/* The configuration with TrainingArguments' names, so ct_optim_config_from_json reads it back. */
static char *optim_config_text(const ct_optim_config *c) {
    json_t *o = json_pack("{sssfsfsfsfsfsbsfsfsb}", "optim", kind_name(c->optim), "learning_rate", c->learning_rate,
                          "weight_decay", c->weight_decay, "adam_beta1", c->adam_beta1, "adam_beta2", c->adam_beta2,
                          "adam_epsilon", c->adam_epsilon, "amsgrad", (int)c->amsgrad, "momentum", c->momentum,
                          "dampening", c->dampening, "nesterov", (int)c->nesterov);
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
    hid_t f;
    ct_status s = ct_h5_image_create(bytes, &f);
    if (s == CT_OK) {
        s = write_optimizer(f, snap, config);
        if (s == CT_OK)
            s = ct_h5_image_finish(f, &image, &size);
        else
            H5Fclose(f);
    }
    ct_h5_unlock();
    free(config);
    if (s == CT_OK) s = ct_write_bytes(file, image, size);
    free(image);
    if (s != CT_OK) {
        unlink(file);
        return ct_error_prefix(s, "save optimizer '%s': ", file);
    }
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
} optim_load;

/* A hyper-parameter that changes what the state means: equal in the file and in this run, or
 * CT_ERR_CONFIG naming it. Values compare exactly (the JSON keeps 17 digits). */
/* The shortest text that reads back as v (0.3, not 0.29999999999999999), so two values that differ
 * print differently and equal-looking ones are not shown as a difference. */
static const char *shortest(double v, char *buf, size_t cap) {
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    return buf;
}

static ct_status same_setting(const char *file, const char *key, double saved, double now) {
    if (saved == now) return CT_OK;
    char a[32], b[32];
    return ct_error(CT_ERR_CONFIG,
                    "%s was saved with %s = %s, this run uses %s = %s (the optimizer state depends on it)", file,
                    key, shortest(saved, a, sizeof a), key, shortest(now, b, sizeof b));
}

static ct_status check_config(hid_t f, const ct_optimizer *opt, const char *file) {
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
    const ct_optim_config *now = &opt->config;
    if (saved.optim != now->optim)
        return ct_error(CT_ERR_CONFIG, "%s holds '%s' state, this run uses '%s'", file, kind_name(saved.optim),
                        kind_name(now->optim));
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
    CT_TRY(check_config(f, opt, file));

    int n = ct_optimizer_state_count(opt);
    CT_ASSERT(n >= 0 && n <= CT_OPTIM_MAX_STATE);
    for (int i = 0; i < n; i++) {
        const char *sname;
        ct_tensor *t;
        CT_TRY(ct_optimizer_state_get(opt, i, &sname, &t));
        if (t->device.kind != CT_DEVICE_CPU)
            return ct_error(CT_ERR_DEVICE, "%s: state tensor '%s' is not on the CPU", file, sname);
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

ct_status ct_optimizer_load_h5(ct_optimizer *opt, const char *file) {
    if (access(file, R_OK) != 0)
        return ct_error(CT_ERR_IO, "load optimizer: cannot read '%s': %s", file, strerror(errno));
    optim_load ld = {0};
    ct_h5_lock();
    ct_h5_quiet();
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    ct_status s = f < 0 ? ct_error(CT_ERR_FORMAT, "%s is not an HDF5 file (or is corrupt)", file)
                        : read_optimizer(f, opt, file, &ld);
    if (f >= 0) H5Fclose(f);
    ct_h5_unlock();
    if (s == CT_OK) {
        for (int i = 0; i < ld.n; i++) memcpy(ld.dst[i]->data, ld.tmp[i].data, ct_tensor_nbytes(ld.dst[i]));
        s = ct_optimizer_set_step_count(opt, ld.step); /* cannot fail: checked >= 0 above */
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

ct_status ct_scheduler_load_json(ct_scheduler *s, const char *file) {
    if (access(file, R_OK) != 0)
        return ct_error(CT_ERR_IO, "load scheduler: cannot read '%s': %s", file, strerror(errno));
    json_error_t jerr;
    json_t *o = json_load_file(file, 0, &jerr);
    if (!o)
        return ct_error(CT_ERR_FORMAT, "load scheduler: %s:%d:%d: %s", file, jerr.line, jerr.column, jerr.text);
    ct_status rc = CT_OK;
    const char *type = json_string_value(json_object_get(o, "lr_scheduler_type"));
    ct_scheduler_state st;
    if (!json_is_object(o) || !type)
        rc = ct_error(CT_ERR_FORMAT, "load scheduler: %s has no string 'lr_scheduler_type'", file);
    else if (strcmp(type, ct_scheduler_name(s)) != 0)
        rc = ct_error(CT_ERR_CONFIG, "load scheduler: %s holds '%s' state, this run uses lr_scheduler_type '%s'", file,
                      type, ct_scheduler_name(s));
    else if (ct_scheduler_state_from_json(json_object_get(o, "state"), "state", &st) != CT_OK)
        rc = ct_error_prefix(CT_ERR_FORMAT, "load scheduler: %s: ", file);
    else if ((rc = ct_scheduler_set_state(s, &st)) != CT_OK)
        rc = ct_error_prefix(CT_ERR_FORMAT, "load scheduler: %s: ", file);
    json_decref(o);
    return rc;
}

/* --- the manifest ------------------------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The regular files of dir except the manifest, sorted (malloc'd; free with free_names). */
static ct_status list_files(const char *dir, char ***out, int *count) {
    *out = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (!d) return ct_error(CT_ERR_IO, "cannot list '%s': %s", dir, strerror(errno));
    char **names = NULL;
    int n = 0, cap = 0;
    ct_status s = CT_OK;
    for (struct dirent *de; s == CT_OK && (de = readdir(d));) {
        if (strcmp(de->d_name, MANIFEST) == 0) continue;
        char path[4352];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            char **grown = realloc(names, (size_t)cap * sizeof *names);
            if (!grown) {
                s = ct_error(CT_ERR_NOMEM, "out of memory");
                break;
            }
            names = grown;
        }
        if (!(names[n] = strdup(de->d_name)))
            s = ct_error(CT_ERR_NOMEM, "out of memory");
        else
            n++;
    }
    closedir(d);
    if (s != CT_OK) {
        for (int i = 0; i < n; i++) free(names[i]);
        free(names);
        return s;
    }
    if (n) qsort(names, (size_t)n, sizeof *names, cmp_str);
    *out = names;
    *count = n;
    return CT_OK;
}

static void free_names(char **names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

ct_status ct_checkpoint_write_manifest(const char *dir) {
    char **names;
    int n;
    ct_status s = list_files(dir, &names, &n);
    if (s != CT_OK) return ct_error_prefix(s, "write manifest: ");
    json_t *files = json_object();
    json_t *root = json_pack("{sssiso}", "format", MANIFEST_FORMAT, "version", MANIFEST_VERSION, "files", files);
    if (!root) s = ct_error(CT_ERR_NOMEM, "write manifest: out of memory");
    for (int i = 0; s == CT_OK && i < n; i++) {
        char path[4352], hex[9];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        int64_t size;
        uint32_t crc;
        s = file_crc(path, true, &size, &crc);
        if (s != CT_OK) break;
        snprintf(hex, sizeof hex, "%08x", crc);
        if (json_object_set_new(files, names[i], json_pack("{sIss}", "size", (json_int_t)size, "crc32", hex)) != 0)
            s = ct_error(CT_ERR_NOMEM, "write manifest: out of memory");
    }
    free_names(names, n);
    char *text = s == CT_OK ? json_dumps(root, JSON_FLAGS) : NULL;
    json_decref(root);
    if (s == CT_OK && !text) s = ct_error(CT_ERR_NOMEM, "write manifest: out of memory");
    if (s == CT_OK) {
        char path[4352];
        snprintf(path, sizeof path, "%s/" MANIFEST, dir);
        s = ct_write_file_atomic(path, text, strlen(text)); /* fsync'd, then dir itself */
    }
    free(text);
    if (s != CT_OK) return ct_error_prefix(s, "write manifest of '%s': ", dir);
    return CT_OK;
}

/* A manifest entry may only name a file directly inside the directory. */
static bool plain_name(const char *name) {
    return name[0] && strcmp(name, ".") != 0 && strcmp(name, "..") != 0 && !strchr(name, '/');
}

static bool parse_crc(const char *hex, uint32_t *out) {
    if (!hex || strlen(hex) != 8) return false;
    uint32_t v = 0;
    for (int i = 0; i < 8; i++) {
        char c = hex[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return false;
        v = v << 4 | (uint32_t)d;
    }
    *out = v;
    return true;
}

/* Checks one listed file against its entry. */
static ct_status verify_file(const char *dir, const char *name, const json_t *entry) {
    json_t *jsize = json_object_get(entry, "size");
    uint32_t want_crc;
    if (!json_is_object(entry) || !json_is_integer(jsize) || json_integer_value(jsize) < 0 ||
        !parse_crc(json_string_value(json_object_get(entry, "crc32")), &want_crc))
        return ct_error(CT_ERR_FORMAT, "%s: " MANIFEST " has a malformed entry for '%s'", dir, name);
    if (!plain_name(name))
        return ct_error(CT_ERR_FORMAT, "%s: " MANIFEST " lists '%s', which is not a file name", dir, name);
    int64_t want_size = json_integer_value(jsize);
    char path[4352];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return ct_error(CT_ERR_FORMAT, "%s: %s is missing (listed in " MANIFEST ")", dir, name);
        return ct_error(CT_ERR_IO, "%s: cannot stat %s: %s", dir, name, strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) return ct_error(CT_ERR_FORMAT, "%s: %s is not a regular file", dir, name);
    if ((int64_t)st.st_size != want_size)
        return ct_error(CT_ERR_FORMAT, "%s: %s is %lld bytes, the manifest says %lld%s", dir, name,
                        (long long)st.st_size, (long long)want_size,
                        (int64_t)st.st_size < want_size ? " (truncated?)" : "");
    int64_t size;
    uint32_t crc;
    ct_status s = file_crc(path, false, &size, &crc);
    if (s != CT_OK) return ct_error_prefix(CT_ERR_IO, "%s: ", dir);
    if (size != want_size) /* changed while we read it */
        return ct_error(CT_ERR_FORMAT, "%s: %s is %lld bytes, the manifest says %lld", dir, name, (long long)size,
                        (long long)want_size);
    if (crc != want_crc)
        return ct_error(CT_ERR_FORMAT, "%s: %s does not match its checksum (crc32 %08x, the manifest says %08x)", dir,
                        name, crc, want_crc);
    return CT_OK;
}

ct_status ct_checkpoint_verify(const char *dir) {
    struct stat st;
    if (stat(dir, &st) != 0) return ct_error(CT_ERR_IO, "%s: cannot open: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return ct_error(CT_ERR_FORMAT, "%s: not a directory", dir);
    char path[4352];
    snprintf(path, sizeof path, "%s/" MANIFEST, dir);
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return ct_error(CT_ERR_FORMAT, "%s: no " MANIFEST " (an incomplete save)", dir);
        return ct_error(CT_ERR_IO, "%s: cannot stat " MANIFEST ": %s", dir, strerror(errno));
    }
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root)
        return ct_error(CT_ERR_FORMAT, "%s: " MANIFEST " is not valid JSON (line %d, column %d: %s)", dir, jerr.line,
                        jerr.column, jerr.text);
    ct_status s = CT_OK;
    const char *format = json_string_value(json_object_get(root, "format"));
    json_t *version = json_object_get(root, "version");
    json_t *files = json_object_get(root, "files");
    if (!json_is_object(root) || !format || strcmp(format, MANIFEST_FORMAT) != 0)
        s = ct_error(CT_ERR_FORMAT, "%s: " MANIFEST " is not a ctrainer checkpoint manifest (no format '%s')", dir,
                     MANIFEST_FORMAT);
    else if (!json_is_integer(version) || json_integer_value(version) != MANIFEST_VERSION)
        s = ct_error(CT_ERR_FORMAT, "%s: " MANIFEST " has version %s; this build reads version %d", dir,
                     json_is_integer(version) ? "another" : "no", MANIFEST_VERSION);
    else if (!json_is_object(files))
        s = ct_error(CT_ERR_FORMAT, "%s: " MANIFEST " has no 'files' object", dir);
    else {
        const char *name;
        json_t *entry;
        json_object_foreach(files, name, entry) {
            s = verify_file(dir, name, entry);
            if (s != CT_OK) break;
        }
    }
    json_decref(root);
    return s;
}

/* --- commit, latest, resolve -------------------------------------------------------------------- */

ct_status ct_checkpoint_commit(const char *tmp, const char *dir) {
    struct stat st;
    if (stat(tmp, &st) != 0 || !S_ISDIR(st.st_mode))
        return ct_error(CT_ERR_IO, "commit checkpoint: '%s' is not a directory", tmp);
    CT_TRY(ct_fsync_path(tmp));
    char parent[4096];
    ct_path_parent(dir, parent, sizeof parent);
    if (lstat(dir, &st) != 0) {
        if (rename(tmp, dir) != 0)
            return ct_error(CT_ERR_IO, "commit checkpoint: cannot rename '%s' to '%s': %s", tmp, dir, strerror(errno));
        return ct_fsync_path(parent);
    }
    /* Replacing a checkpoint of the same step. Swapping the two names in one step means `dir` is a
     * whole checkpoint at every moment; the old one, now under `tmp`, is deleted afterwards (a crash
     * before that leaves a stale tmp that the next save of this step clears). */
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) == 0) {
        CT_TRY(ct_fsync_path(parent));
        return ct_remove_tree(tmp);
    }
    if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
        return ct_error(CT_ERR_IO, "commit checkpoint: cannot exchange '%s' and '%s': %s", tmp, dir, strerror(errno));
    /* A file system without the exchange: move the old one aside, the new one in, then delete the
     * old one. A crash in between leaves both whole copies (`dir`.old and `tmp`) on disk. */
    char old[4200];
    snprintf(old, sizeof old, "%s.old", dir);
    CT_TRY(ct_remove_tree(old));
    if (rename(dir, old) != 0)
        return ct_error(CT_ERR_IO, "commit checkpoint: cannot rename '%s' to '%s': %s", dir, old, strerror(errno));
    if (rename(tmp, dir) != 0) {
        int err = errno;
        (void)rename(old, dir); /* puts the old one back under its name if it can; it is whole either way */
        return ct_error(CT_ERR_IO, "commit checkpoint: cannot rename '%s' to '%s': %s", tmp, dir, strerror(err));
    }
    CT_TRY(ct_fsync_path(parent));
    return ct_remove_tree(old);
}

ct_status ct_checkpoint_find_latest(const char *output_dir, char *out, size_t cap) {
    char **list;
    int n;
    CT_TRY(ct_checkpoint_list(output_dir, &list, &n));
    /* The reasons of the invalid ones, for the error when none is left. */
    char skipped[1536] = "";
    size_t used = 0;
    ct_status s = CT_ERR_IO;
    for (int i = n - 1; i >= 0; i--) {
        if (ct_checkpoint_verify(list[i]) == CT_OK) {
            if (strlen(list[i]) >= cap)
                s = ct_error(CT_ERR_INVALID_ARG, "checkpoint path '%s' is longer than %zu characters", list[i],
                             cap - 1);
            else {
                memcpy(out, list[i], strlen(list[i]) + 1);
                s = CT_OK;
            }
            break;
        }
        ct_log_warning("skipping invalid checkpoint: %s", ct_last_error());
        if (used < sizeof skipped) {
            int w = snprintf(skipped + used, sizeof skipped - used, "%s%s", used ? "; " : "", ct_last_error());
            used += w > 0 ? (size_t)w : 0;
        }
    }
    if (s == CT_ERR_IO) {
        if (n == 0)
            ct_error(CT_ERR_IO, "no checkpoint in '%s'", output_dir);
        else
            ct_error(CT_ERR_IO, "no checkpoint in '%s' (every one is invalid: %s)", output_dir, skipped);
    }
    ct_checkpoint_list_free(list, n);
    return s;
}

ct_status ct_checkpoint_resolve(const char *output_dir, const char *spec, char *out, size_t cap) {
    if (!spec || strcmp(spec, "latest") == 0) {
        ct_status s = ct_checkpoint_find_latest(output_dir, out, cap);
        if (s != CT_OK) return ct_error_prefix(s, "resume_from_checkpoint 'latest': ");
        return CT_OK;
    }
    ct_status s = ct_checkpoint_verify(spec);
    if (s != CT_OK) return ct_error_prefix(s, "resume_from_checkpoint '%s': ", spec);
    if (strlen(spec) >= cap)
        return ct_error(CT_ERR_INVALID_ARG, "resume_from_checkpoint: path '%s' is longer than %zu characters", spec,
                        cap - 1);
    memcpy(out, spec, strlen(spec) + 1);
    return CT_OK;
}
