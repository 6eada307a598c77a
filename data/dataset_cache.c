/* HDF5 caches of IDX datasets (see dataset_cache.h): deciding whether the cache at a path can be
 * used (its record of the sources against the sources as they are now), building it
 * under a name of its own and renaming it into place, and opening it so that its samples are the
 * idx dataset's. HDF5 calls hold ct_h5_lock, as everywhere in ctrainer. */
#include "data/dataset_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <hdf5.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/format/h5io.h"
#include "core/fs.h"
#include "core/log.h"
#include "data/convert.h"

/* Bumped when the layout or the record's meaning changes, so older caches are rebuilt. */
#define RECORD_VERSION "ctrainer dataset cache 1 (idx)"

typedef enum cache_state { CACHE_MISSING, CACHE_STALE, CACHE_FRESH } cache_state;

/* One line of the record: the source's real path (so a config moved elsewhere that names the same
 * files still matches), size and mtime. */
static int record_line(char *buf, size_t cap, const char *role, const char *path, const struct stat *st) {
    char real[PATH_MAX];
    const char *name = realpath(path, real) ? real : path;
    return snprintf(buf, cap, "%s %s %lld %lld.%09ld\n", role, name, (long long)st->st_size,
                    (long long)st->st_mtim.tv_sec, (long)st->st_mtim.tv_nsec);
}

static ct_status make_record(const char *images, const struct stat *si, const char *labels, const struct stat *sl,
                             char **out) {
    size_t cap = strlen(images) + strlen(labels) + 2 * PATH_MAX + 256;
    char *r = malloc(cap);
    if (!r) return ct_error(CT_ERR_NOMEM, "dataset cache: out of memory");
    size_t n = (size_t)snprintf(r, cap, "%s\n", RECORD_VERSION);
    n += (size_t)record_line(r + n, cap - n, "images", images, si);
    record_line(r + n, cap - n, "labels", labels, sl);
    *out = r;
    return CT_OK;
}

/* The labels' "num_classes" attribute (max label + 1, written by the conversion); false if absent. */
static bool read_max_classes(hid_t file, int64_t *out) {
    if (H5Lexists(file, "labels", H5P_DEFAULT) <= 0) return false;
    if (H5Aexists_by_name(file, "labels", "num_classes", H5P_DEFAULT) <= 0) return false;
    hid_t a = H5Aopen_by_name(file, "labels", "num_classes", H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) return false;
    /* One integer, as the conversion writes it: H5Aread writes every element, so an array there
     * would overflow *out. */
    hid_t type = H5Aget_type(a), space = H5Aget_space(a);
    bool ok = type >= 0 && space >= 0 && H5Tget_class(type) == H5T_INTEGER &&
              H5Sget_simple_extent_npoints(space) == 1 && H5Aread(a, H5T_NATIVE_INT64, out) >= 0 && *out > 0;
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    H5Aclose(a);
    return ok;
}

/* Decides what to do with the file at cache (st: its stat) given the sources' record and stats.
 * CACHE_STALE and a damaged cache of ours come with a reason; a file that is not ours is an error. */
static ct_status inspect(const char *cache, const struct stat *st, const char *record, const char *const *src,
                         const struct stat *src_st, cache_state *state, char *reason, size_t cap,
                         int64_t *max_classes) {
    *max_classes = 0;
    if (S_ISDIR(st->st_mode)) return ct_error(CT_ERR_IO, "%s: is a directory, expected a dataset cache file", cache);
    for (int i = 0; i < 2; i++)
        if (st->st_dev == src_st[i].st_dev && st->st_ino == src_st[i].st_ino)
            return ct_error(CT_ERR_INVALID_ARG,
                            "%s: the cache is the same file as the source %s; give it a path of its own", cache, src[i]);
    if (access(cache, R_OK) != 0) return ct_error(CT_ERR_IO, "%s: cannot read the cache: %s", cache, strerror(errno));
    CT_TRY(ct_check_regular_file(cache));
    ct_h5_lock();
    ct_h5_quiet();
    hid_t f = H5Fis_hdf5(cache) > 0 ? H5Fopen(cache, H5F_ACC_RDONLY, H5P_DEFAULT) : -1;
    char *have = NULL;
    ct_status s = CT_OK;
    if (f < 0) {
        s = ct_error(CT_ERR_FORMAT, "%s: exists but is not a dataset cache written by ctrainer (not a readable HDF5 "
                                    "file); it is left as it is: delete it or choose another path for the cache",
                     cache);
    } else if (H5Aexists(f, CT_DATASET_CACHE_ATTR) <= 0 ||
               ct_h5_read_string_attr(f, CT_DATASET_CACHE_ATTR, &have) != CT_OK) {
        s = ct_error(CT_ERR_FORMAT, "%s: exists but is not a dataset cache written by ctrainer (an HDF5 file without "
                                    "the '" CT_DATASET_CACHE_ATTR "' attribute); it is left as it is: delete it or "
                                    "choose another path for the cache", cache);
    } else if (strncmp(have, RECORD_VERSION "\n", strlen(RECORD_VERSION) + 1) != 0) {
        *state = CACHE_STALE;
        snprintf(reason, cap, "written by another version of ctrainer");
    } else if (strcmp(have, record) != 0) {
        *state = CACHE_STALE;
        snprintf(reason, cap, "built from other files, or from other versions of these (size or mtime changed)");
    } else if (!read_max_classes(f, max_classes)) {
        *state = CACHE_STALE;
        snprintf(reason, cap, "damaged: its labels have no readable 'num_classes' attribute");
    } else {
        *state = CACHE_FRESH;
    }
    free(have);
    if (f >= 0) H5Fclose(f);
    ct_h5_unlock();
    return s;
}

/* The directories of the cache's path that do not exist yet, made as output_dir is (mkdir -p);
 * *made is the outermost of them ("" when none was missing), which unmake_dirs takes back. */
static ct_status make_dirs(const char *cache, char *made, size_t cap) {
    char dir[PATH_MAX + 320], up[PATH_MAX + 320];
    ct_path_parent(cache, dir, sizeof dir);
    made[0] = '\0';
    struct stat st;
    for (snprintf(up, sizeof up, "%s", dir); stat(up, &st) != 0 && errno == ENOENT;) {
        snprintf(made, cap, "%s", up);
        char next[sizeof up];
        ct_path_parent(up, next, sizeof next);
        if (strcmp(next, up) == 0) break;
        snprintf(up, sizeof up, "%s", next);
    }
    ct_status s = ct_make_dirs(dir);
    return s == CT_OK ? s : ct_error_prefix(s, "%s: cannot build the cache: ", cache);
}

/* Removes the directories make_dirs made for the cache, innermost first, while they are empty
 * (rmdir never removes what another process put there meanwhile). */
static void unmake_dirs(const char *cache, const char *made) {
    if (!made[0]) return;
    char dir[PATH_MAX + 320];
    ct_path_parent(cache, dir, sizeof dir);
    for (;;) {
        if (rmdir(dir) != 0 || strcmp(dir, made) == 0) return;
        char up[sizeof dir];
        ct_path_parent(dir, up, sizeof up);
        snprintf(dir, sizeof dir, "%s", up);
    }
}

/* Writes the cache (its sources already checked); on failure nothing of it is left: the file under
 * its temporary name is removed, the directories made for it too. */
static ct_status build(const char *images, const char *labels, const char *cache, const char *record,
                       const char *what, const char *reason) {
    ct_log_info("%s: building %s from %s and %s (%s)", what, cache, images, labels, reason);
    fflush(stderr);
    char made[PATH_MAX + 320];
    ct_status s = make_dirs(cache, made, sizeof made);
    if (s != CT_OK) {
        unmake_dirs(cache, made); /* a part of the path made before another part failed */
        return s;
    }
    /* Built in memory with its record and written under a name of this process's own (ct_atomic_file
     * names it after the host and the pid: nodes sharing a file system may build the same cache at
     * once, and process ids repeat across nodes), then renamed into place whole. */
    s = ct_convert_idx_to_hdf5_tagged(images, labels, cache, 0, -1, CT_DATASET_CACHE_ATTR, record);
    if (s != CT_OK) {
        unmake_dirs(cache, made);
        return ct_error_prefix(s, "%s: cannot build the cache: ", cache);
    }
    return CT_OK;
}

/* When the cache cannot be written (a full disk, a quota, a read-only file system, no permission, a
 * path that cannot be made), the run reads the IDX files themselves: the cache is an optimisation,
 * and its samples are theirs bit for bit. Said once, with the reason (the last error). */
static void warn_without_cache(const char *images, const char *labels, const char *cache, const char *what) {
    ct_log_warning("%s: the cache %s cannot be written (%s); reading %s and %s instead", what, cache, ct_last_error(),
                   images, labels);
    fflush(stderr);
}

ct_status ct_idx_cache_open(const char *images_path, const char *labels_path, double scale, int64_t num_classes,
                            const char *cache_path, const char *what, bool *built, ct_dataset **out) {
    CT_ASSERT(images_path && labels_path && cache_path && out);
    *out = NULL;
    bool built_here = false;
    if (built) *built = false;
    if (!what) what = "dataset cache";
    /* The HDF5 dataset multiplies in double by the scale it is given, which for the idx dataset's
     * float32 scale is exactly that scale; 0 there means "the default", so a scale that is 0 in
     * float32 (or infinite) has no equivalent. */
    float fscale = (float)scale;
    if (!(scale >= 0) || (scale != 0 && (fscale == 0 || isinf(fscale))))
        return ct_error(CT_ERR_INVALID_ARG,
                        "scale %g is %s in float32, which the cached dataset cannot express; use a scale in "
                        "[%g, %g] or no cache",
                        scale, fscale == 0 ? "0" : "infinite", (double)FLT_MIN, (double)FLT_MAX);
    const char *src[2] = {images_path, labels_path};
    struct stat src_st[2];
    for (int i = 0; i < 2; i++)
        if (stat(src[i], &src_st[i]) != 0) {
            /* The message the idx type gives for a missing or unreadable source. */
            ct_dataset *ds;
            ct_status s = ct_idx_dataset_create(images_path, labels_path, scale, num_classes, &ds);
            if (s == CT_OK) {
                ct_dataset_free(ds);
                s = ct_error(CT_ERR_IO, "%s: cannot stat: %s", src[i], strerror(errno));
            }
            return s;
        }
    char *record = NULL;
    CT_TRY(make_record(images_path, &src_st[0], labels_path, &src_st[1], &record));

    ct_hdf5_dataset_config cfg = {.path = cache_path, .scale = scale != 0 ? (double)fscale : 0.0,
                                  .num_classes = num_classes};
    ct_status s = CT_OK;
    const char *damaged = NULL; /* set when our own cache did not open: build it again */
    char msg[1024];
    for (int attempt = 0; attempt < 2; attempt++) {
        struct stat st;
        cache_state state = CACHE_MISSING;
        char reason[1200] = "it does not exist yet";
        int64_t max_classes = 0;
        s = CT_OK;
        if (damaged) {
            state = CACHE_STALE;
            snprintf(reason, sizeof reason, "damaged: %s", damaged);
        } else if (stat(cache_path, &st) == 0) {
            s = inspect(cache_path, &st, record, src, src_st, &state, reason, sizeof reason, &max_classes);
        } else if (errno != ENOENT) {
            /* No file can be there (a part of the path is a file, or not searchable): nor can one be made. */
            ct_error(CT_ERR_IO, "%s: %s", cache_path, strerror(errno));
            warn_without_cache(images_path, labels_path, cache_path, what);
            s = ct_idx_dataset_create(images_path, labels_path, scale, num_classes, out);
            break;
        }
        if (s != CT_OK) break;
        if (state == CACHE_FRESH && num_classes > 0 && max_classes > num_classes) {
            /* What the idx type says of a label outside [0, num_classes), where the cache knows only
             * the largest label (the conversion's num_classes attribute). */
            s = ct_error(CT_ERR_FORMAT,
                         "%s: label %lld is outside [0, %lld) (the largest label, as recorded in the cache %s)",
                         labels_path, (long long)(max_classes - 1), (long long)num_classes, cache_path);
            break;
        }
        if (state != CACHE_FRESH) {
            /* The sources as the idx type checks them, so that a bad source gives the message it
             * gives without a cache, and nothing is written for it. */
            ct_dataset *sources;
            if ((s = ct_idx_dataset_create(images_path, labels_path, scale, num_classes, &sources)) != CT_OK) break;
            if (build(images_path, labels_path, cache_path, record, what, reason) != CT_OK) {
                warn_without_cache(images_path, labels_path, cache_path, what);
                *out = sources;
                s = CT_OK;
                break;
            }
            ct_dataset_free(sources);
            built_here = true;
        }
        s = ct_hdf5_dataset_create(&cfg, out);
        if (s == CT_OK || built_here) break;
        /* Ours (it has the record) but it does not open as a dataset: damaged; build it again. */
        snprintf(msg, sizeof msg, "%s", ct_last_error());
        damaged = msg;
        ct_log_warning("%s: the cache %s cannot be read (%s); rebuilding it", what, cache_path, msg);
        fflush(stderr);
    }
    free(record);
    if (built) *built = built_here;
    return s;
}
