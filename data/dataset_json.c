/* Datasets from JSON specs (see dataset_json.h): reads a spec's keys into the constructors of
 * data/dataset.h, then wraps the result in a subset ("limit") and a transformed dataset
 * ("transforms"). Both wrappers take ownership of what they wrap, also when they fail, so the
 * returned dataset owns the whole chain and ct_dataset_free of it frees everything.
 *
 * Messages start with the JSON path of the value they are about, so the run config can point at
 * the line: a missing or unreadable file names the key that gave it ("data.train.images: /d/x.gz:
 * cannot open: ..."); a value the constructor refuses names the spec ("data.train: /d/t.bin:
 * context 0 must be at least 1") and becomes a config error. */
#include "data/dataset_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/registry.h"
#include "core/util.h"
#include "data/dataset_cache.h"
#include "data/transform.h"

#define FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* path as given when absolute (or no base_dir), else base_dir/path. */
static ct_status resolve(const char *base_dir, const char *file, const char *key_path, char *buf, size_t cap) {
    int n;
    if (file[0] == '/' || !base_dir || !base_dir[0] || strcmp(base_dir, ".") == 0)
        n = snprintf(buf, cap, "%s", file);
    else
        n = snprintf(buf, cap, "%s%s%s", base_dir, base_dir[strlen(base_dir) - 1] == '/' ? "" : "/", file);
    if (n < 0 || (size_t)n >= cap)
        return ct_error(CT_ERR_CONFIG, "%s: the path '%s' is longer than %zu characters", key_path, file, cap - 1);
    return CT_OK;
}

/* A file path from key `key` of spec, resolved; empty strings are refused here, where the key is known. */
static ct_status file_key(const json_t *spec, const char *path, const char *key, const char *base_dir, char *buf,
                          size_t cap) {
    const char *file;
    CT_TRY(ct_json_string(spec, path, key, true, NULL, &file));
    char key_path[600];
    snprintf(key_path, sizeof key_path, "%s.%s", path, key);
    if (!file[0]) return ct_error(CT_ERR_CONFIG, "%s: expected a file path, got an empty string", key_path);
    return resolve(base_dir, file, key_path, buf, cap);
}

/* Puts the right JSON path in front of a constructor's error. I/O and format errors about one of the
 * spec's files name that file's key; anything else is about the spec's values (a config error). */
static ct_status constructor_error(ct_status s, const char *path, const char *const *keys, const char *const *files,
                                   int n_files) {
    if (s == CT_ERR_IO || s == CT_ERR_FORMAT) {
        const char *msg = ct_last_error();
        for (int i = 0; i < n_files; i++)
            if (keys[i] && strncmp(msg, files[i], strlen(files[i])) == 0 && msg[strlen(files[i])] == ':')
                return ct_error_prefix(s, "%s.%s: ", path, keys[i]);
        return ct_error_prefix(s, "%s: ", path);
    }
    return ct_error_prefix(s == CT_ERR_INVALID_ARG ? CT_ERR_CONFIG : s, "%s: ", path);
}

/* An IDX pair (the idx and fashion_mnist types), through the spec's "cache" when it has one
 * (data/dataset_cache.h). fkeys name the keys that gave images and labels (NULL: the spec itself). */
static ct_status idx_pair(const json_t *spec, const char *path, const char *base_dir, const char *images,
                          const char *labels, const char *const fkeys[2], double scale, int64_t num_classes,
                          ct_dataset **out) {
    const char *files[3] = {images, labels, NULL};
    const char *keys[3] = {fkeys[0], fkeys[1], "cache"};
    ct_status s;
    if (!json_object_get(spec, "cache")) {
        s = ct_idx_dataset_create(images, labels, scale, num_classes, out);
        return s == CT_OK ? s : constructor_error(s, path, keys, files, 2);
    }
    char cache[4096], what[600];
    CT_TRY(file_key(spec, path, "cache", base_dir, cache, sizeof cache));
    snprintf(what, sizeof what, "%s.cache", path);
    s = ct_idx_cache_open(images, labels, scale, num_classes, cache, what, NULL, out);
    if (s == CT_OK) return s;
    /* Whatever is wrong with the cache file itself (not ctrainer's, the same file as a source) is
     * named by "cache"; the sources' errors as without a cache. */
    const char *msg = ct_last_error();
    size_t n = strlen(cache);
    if (strncmp(msg, cache, n) == 0 && msg[n] == ':')
        return ct_error_prefix(s == CT_ERR_INVALID_ARG ? CT_ERR_CONFIG : s, "%s.cache: ", path);
    files[2] = cache;
    return constructor_error(s, path, keys, files, 3);
}

/* --- the types ---------------------------------------------------------------------------------- */

static ct_status fashion_mnist(const json_t *spec, const char *path, const char *base_dir, ct_dataset **out) {
    static const char *const keys[] = {"type", "split", "dir", "cache", "limit", "transforms", NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys));
    const char *split, *dir_given;
    CT_TRY(ct_json_string(spec, path, "split", false, "train", &split));
    CT_TRY(ct_json_string(spec, path, "dir", false, NULL, &dir_given));
    static const char *const splits[] = {"train", "test", NULL};
    if (strcmp(split, "train") != 0 && strcmp(split, "test") != 0) {
        const char *hint = ct_closest_word(split, splits);
        return ct_error(CT_ERR_CONFIG, "%s.split: unknown split '%s'%s%s%s (expected train or test)", path, split,
                        hint ? ", did you mean '" : "", hint ? hint : "", hint ? "'?" : "");
    }
    char dir[4096], images[4200], labels[4200], key_path[600];
    snprintf(key_path, sizeof key_path, "%s.dir", path);
    if (dir_given && !dir_given[0])
        return ct_error(CT_ERR_CONFIG, "%s: expected a directory, got an empty string", key_path);
    CT_TRY(resolve(base_dir, dir_given ? dir_given : FASHION_MNIST_DIR, key_path, dir, sizeof dir));
    /* The file names of the original distribution (and of torchvision's raw folder). */
    const char *stem = strcmp(split, "train") == 0 ? "train" : "t10k";
    snprintf(images, sizeof images, "%s/%s-images-idx3-ubyte.gz", dir, stem);
    snprintf(labels, sizeof labels, "%s/%s-labels-idx1-ubyte.gz", dir, stem);
    /* The files are named by "dir" when it was given; by the spec itself when the default was used. */
    const char *const fkeys[2] = {dir_given ? "dir" : NULL, dir_given ? "dir" : NULL};
    return idx_pair(spec, path, base_dir, images, labels, fkeys, 0.0, 10, out);
}

static ct_status idx(const json_t *spec, const char *path, const char *base_dir, ct_dataset **out) {
    static const char *const keys[] = {"type",  "images", "labels",     "num_classes", "scale",
                                       "cache", "limit",  "transforms", NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys));
    char images[4096], labels[4096];
    CT_TRY(file_key(spec, path, "images", base_dir, images, sizeof images));
    CT_TRY(file_key(spec, path, "labels", base_dir, labels, sizeof labels));
    int64_t num_classes;
    double scale;
    CT_TRY(ct_json_int(spec, path, "num_classes", false, 0, &num_classes));
    CT_TRY(ct_json_real(spec, path, "scale", false, 0.0, &scale));
    if (num_classes < 0)
        return ct_error(CT_ERR_CONFIG, "%s.num_classes: %lld; expected >= 0 (0 = max label + 1)", path,
                        (long long)num_classes);
    if (!(scale >= 0))
        return ct_error(CT_ERR_CONFIG, "%s.scale: %g; expected a number >= 0 (0 = the default)", path, scale);
    static const char *const fkeys[2] = {"images", "labels"};
    return idx_pair(spec, path, base_dir, images, labels, fkeys, scale, num_classes, out);
}

static ct_status hdf5(const json_t *spec, const char *path, const char *base_dir, ct_dataset **out) {
    static const char *const keys[] = {"type",  "path",  "features", "labels", "scale", "num_classes",
                                       "limit", "transforms", NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys));
    char file[4096];
    CT_TRY(file_key(spec, path, "path", base_dir, file, sizeof file));
    ct_hdf5_dataset_config cfg = {.path = file};
    CT_TRY(ct_json_string(spec, path, "features", false, NULL, &cfg.features));
    CT_TRY(ct_json_string(spec, path, "labels", false, NULL, &cfg.labels));
    CT_TRY(ct_json_real(spec, path, "scale", false, 0.0, &cfg.scale));
    CT_TRY(ct_json_int(spec, path, "num_classes", false, 0, &cfg.num_classes));
    ct_status s = ct_hdf5_dataset_create(&cfg, out);
    if (s == CT_OK) return s;
    const char *files[] = {file};
    const char *fkeys[] = {"path"};
    return constructor_error(s, path, fkeys, files, 1);
}

static ct_status tokens(const json_t *spec, const char *path, const char *base_dir, ct_dataset **out) {
    static const char *const keys[] = {"type",       "path",  "bytes_per_token", "context", "stride", "vocab_size",
                                       "limit", "transforms", NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys));
    char file[4096];
    CT_TRY(file_key(spec, path, "path", base_dir, file, sizeof file));
    ct_token_dataset_config cfg = {.path = file};
    int64_t bpt;
    CT_TRY(ct_json_int(spec, path, "bytes_per_token", false, 2, &bpt));
    if (bpt != 2 && bpt != 4)
        return ct_error(CT_ERR_CONFIG, "%s.bytes_per_token: %lld; expected 2 (uint16 ids) or 4 (uint32 ids)", path,
                        (long long)bpt);
    cfg.bytes_per_token = (int)bpt;
    CT_TRY(ct_json_int(spec, path, "context", true, 0, &cfg.context));
    CT_TRY(ct_json_int(spec, path, "stride", false, 0, &cfg.stride));
    CT_TRY(ct_json_int(spec, path, "vocab_size", false, 0, &cfg.vocab_size));
    ct_status s = ct_token_dataset_create(&cfg, out);
    if (s == CT_OK) return s;
    const char *files[] = {file};
    const char *fkeys[] = {"path"};
    return constructor_error(s, path, fkeys, files, 1);
}

/* --- wrappers ----------------------------------------------------------------------------------- */

/* The spec's transforms, parsed before any file is read so that a typo costs no loading time. */
static ct_status parse_transforms(const json_t *list, const char *tpath, ct_transform ***out, int *count) {
    *out = NULL;
    *count = 0;
    if (!json_is_array(list))
        return ct_error(CT_ERR_CONFIG, "%s: expected a list of transforms, e.g. [{\"type\": \"random_hflip\"}]",
                        tpath);
    size_t n = json_array_size(list);
    if (n == 0) return CT_OK;
    if (n > 1024) return ct_error(CT_ERR_CONFIG, "%s: %zu transforms; at most 1024 are supported", tpath, n);
    ct_transform **ts = calloc(n, sizeof *ts);
    if (!ts) return ct_error(CT_ERR_NOMEM, "%s: out of memory", tpath);
    ct_status s = CT_OK;
    for (size_t i = 0; s == CT_OK && i < n; i++) {
        char epath[640];
        snprintf(epath, sizeof epath, "%s[%zu]", tpath, i);
        s = ct_transform_from_json(json_array_get(list, i), epath, &ts[i]);
    }
    if (s != CT_OK) {
        for (size_t i = 0; i < n; i++) ct_transform_free(ts[i]);
        free(ts);
        return s == CT_ERR_INVALID_ARG ? CT_ERR_CONFIG : s; /* a value the transform refuses */
    }
    *out = ts;
    *count = (int)n;
    return CT_OK;
}

typedef ct_status (*builtin_fn)(const json_t *, const char *, const char *, ct_dataset **);
static const struct {
    const char *type;
    builtin_fn fn;
} types[] = {{"fashion_mnist", fashion_mnist}, {"idx", idx}, {"hdf5", hdf5}, {"tokens", tokens}};

static builtin_fn find_builtin(const char *type) {
    for (size_t i = 0; i < CT_ARRAY_LEN(types); i++)
        if (strcmp(types[i].type, type) == 0) return types[i].fn;
    return NULL;
}

static bool is_builtin(const char *type) { return find_builtin(type) != NULL; }

static ct_registry user = CT_REGISTRY_INIT("dataset type", "ct_register_dataset_type", is_builtin);

ct_status ct_register_dataset_type(const char *type, ct_dataset_from_json_fn fn) {
    return ct_registry_add(&user, type, (ct_registry_fn)fn);
}

/* An application's type: its reader sees the spec without the keys handled here, and its errors
 * name the spec when they do not already. */
static ct_status registered(ct_dataset_from_json_fn fn, const json_t *spec, const char *path, const char *base_dir,
                            ct_dataset **out) {
    json_t *own = json_copy((json_t *)spec);
    if (!own) return ct_error(CT_ERR_NOMEM, "%s: out of memory", path);
    json_object_del(own, "limit");
    json_object_del(own, "transforms");
    ct_status s = fn(own, path, base_dir, out);
    json_decref(own);
    if (s == CT_OK && !*out) s = ct_error(CT_ERR_INVALID_ARG, "%s: the reader of '%s' returned CT_OK but no dataset",
                                          path, json_string_value(json_object_get(spec, "type")));
    /* A table that fails its check cannot be trusted to free itself either: it is left alone. */
    if (s == CT_OK && (s = ct_dataset_check(*out)) != CT_OK) {
        *out = NULL;
        return ct_error_prefix(s, "%s: ", path);
    }
    if (s == CT_OK) return CT_OK;
    *out = NULL;
    return ct_registry_error(s, path);
}

ct_status ct_dataset_from_json(const json_t *spec, const char *path, const char *base_dir, ct_dataset **out) {
    CT_ASSERT(out);
    *out = NULL;
    if (!path) path = "data";
    if (!json_is_object(spec))
        return ct_error(CT_ERR_CONFIG, "%s: expected a dataset object with a \"type\" (fashion_mnist, idx, hdf5, tokens, "
                        "or one registered with ct_register_dataset_type)", path);
    const char *type;
    CT_TRY(ct_json_string(spec, path, "type", true, NULL, &type));
    builtin_fn fn = find_builtin(type);
    ct_dataset_from_json_fn user_fn = fn ? NULL : (ct_dataset_from_json_fn)ct_registry_find(&user, type);
    if (!fn && !user_fn) {
        static const char *const names[] = {"fashion_mnist", "idx", "hdf5", "tokens", NULL};
        char type_path[600];
        snprintf(type_path, sizeof type_path, "%s.type", path);
        return ct_registry_unknown(&user, names, type_path, type);
    }
    /* Checked before the files are read, so a typo costs no loading time. */
    int64_t limit = 0;
    json_t *limit_v = json_object_get(spec, "limit");
    if (limit_v) {
        CT_TRY(ct_json_int(spec, path, "limit", true, 0, &limit));
        if (limit < 1)
            return ct_error(CT_ERR_CONFIG, "%s.limit: %lld; expected a number of samples >= 1", path, (long long)limit);
    }
    char tpath[600];
    snprintf(tpath, sizeof tpath, "%s.transforms", path);
    ct_transform **ts = NULL;
    int n_ts = 0;
    json_t *transforms = json_object_get(spec, "transforms");
    if (transforms) CT_TRY(parse_transforms(transforms, tpath, &ts, &n_ts));

    ct_dataset *ds;
    ct_status s = fn ? fn(spec, path, base_dir, &ds) : registered(user_fn, spec, path, base_dir, &ds);
    if (s == CT_OK && limit_v) {
        s = ct_subset_dataset_create(ds, limit, &ds); /* owns ds, also on failure */
        if (s != CT_OK) ct_error_prefix(s, "%s.limit: ", path);
    }
    if (s != CT_OK) {
        for (int i = 0; i < n_ts; i++) ct_transform_free(ts[i]);
        free(ts);
        return s;
    }
    if (n_ts > 0) {
        /* Takes ownership of ds and the transforms, also on failure. A transform that does not fit the
         * samples (a crop of flat vectors) is a mistake in the config. */
        s = ct_transformed_dataset_create(ds, ts, n_ts, &ds);
        free(ts);
        if (s != CT_OK)
            return ct_error_prefix(s == CT_ERR_NOMEM ? s : CT_ERR_CONFIG, "%s: ", tpath);
    }
    *out = ds;
    return CT_OK;
}
