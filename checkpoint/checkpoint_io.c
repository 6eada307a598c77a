/* The files of a checkpoint directory and the manifest that makes it whole (see checkpoint_io.h;
 * optimizer.h5 and scheduler.json are optimizer_io.c's). The manifest holds each file's size and
 * zlib CRC-32; a directory whose files do not match it is not a checkpoint, which is how a crash in
 * the middle of a save (or a later corruption) is told from a whole checkpoint. */
#define _GNU_SOURCE /* renameat2 */
#include "checkpoint/checkpoint_io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "checkpoint/checkpoint.h"
#include "core/format/h5_image.h"
#include "core/fs.h"
#include "core/log.h"
#include "model/model_io.h"

#define MANIFEST "manifest.json"
#define MANIFEST_FORMAT "ctrainer-checkpoint"
#define MANIFEST_VERSION 1
#define JSON_FLAGS (JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17))

/* --- small file helpers ------------------------------------------------------------------------- */

/* Size and CRC-32 of a file, read in chunks; with sync, the file is also fsync'd (the manifest
 * writer reads every file anyway, so it is the natural place to make them durable). */
static ct_status file_crc(const char *path, bool sync, int64_t *size, uint32_t *crc) {
    int fd;
    CT_TRY(ct_open_read(path, &fd));
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
    s = ct_checkpoint_write_manifest_of(dir, (const char *const *)names, n);
    free_names(names, n);
    return s;
}

ct_status ct_checkpoint_write_manifest_of(const char *dir, const char *const *names, int n) {
    ct_status s = CT_OK;
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
    FILE *f;
    ct_status os = ct_fopen_read(path, &f);
    if (os != CT_OK) return ct_error_prefix(os, "%s: ", dir);
    json_t *root = json_loadf(f, 0, &jerr);
    fclose(f);
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

/* dir's manifest.json when it is a regular file of ctrainer's format, else NULL. */
static json_t *read_our_manifest(const char *dir) {
    char path[4352];
    struct stat st;
    snprintf(path, sizeof path, "%s/" MANIFEST, dir);
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) return NULL;
    json_t *root = json_load_file(path, 0, NULL);
    const char *format = json_string_value(json_object_get(root, "format"));
    if (format && strcmp(format, MANIFEST_FORMAT) == 0) return root;
    json_decref(root);
    return NULL;
}

bool ct_checkpoint_has_manifest(const char *dir) {
    json_t *root = read_our_manifest(dir);
    bool ours = root != NULL;
    json_decref(root);
    return ours;
}

bool ct_checkpoint_manifest_lists(const char *dir, const char *name) {
    json_t *root = read_our_manifest(dir);
    bool listed = root && (strcmp(name, MANIFEST) == 0 || json_object_get(json_object_get(root, "files"), name));
    json_decref(root);
    return listed;
}

ct_status ct_checkpoint_load_model(ct_model *m, const char *dir) {
    CT_TRY(ct_checkpoint_verify(dir));
    char path[4352];
    if (snprintf(path, sizeof path, "%s/model.h5", dir) >= (int)sizeof path)
        return ct_error(CT_ERR_INVALID_ARG, "%s: path too long", dir);
    return ct_model_load_h5(m, path);
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

bool ct_checkpoint_run_id(const char *dir, char *id, size_t cap) {
    char file[4400];
    snprintf(file, sizeof file, "%s/rng_state_0.json", dir);
    FILE *f = NULL;
    json_t *o = NULL;
    if (ct_fopen_read(file, &f) == CT_OK) {
        o = json_loadf(f, 0, NULL);
        fclose(f);
    }
    ct_error_clear();
    const char *v = json_string_value(json_object_get(o, "run_id"));
    bool found = v && strlen(v) < cap;
    snprintf(id, cap, "%s", found ? v : "");
    json_decref(o);
    return found;
}

/* A warning when output_dir's checkpoints come from more than one run (written into again with
 * overwrite_output_dir): "latest" is the highest step, which may be the other run's. */
static void warn_other_runs(char **list, int n, int chosen) {
    char mine[64], other[64];
    if (!ct_checkpoint_run_id(list[chosen], mine, sizeof mine)) return;
    for (int i = 0; i < n; i++) {
        if (i == chosen || !ct_checkpoint_run_id(list[i], other, sizeof other) || strcmp(mine, other) == 0) continue;
        ct_log_warning("resume_from_checkpoint 'latest' is %s, the highest step, but %s was saved by another run "
                       "(the output_dir was written into again): name the checkpoint to resume from if that is not "
                       "the run to continue", list[chosen], list[i]);
        return;
    }
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
                warn_other_runs(list, n, i);
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
