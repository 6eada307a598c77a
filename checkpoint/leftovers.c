/* What a run that died leaves in its output_dir, cleaned by the next run once it holds the
 * directory's lock (see checkpoint.h), so no other run can be writing them:
 *   checkpoint-<step>.tmp       a save not committed (or, after a crash inside a commit's exchange,
 *                               the old copy of a checkpoint already replaced): deleted;
 *   checkpoint-<step>.deleting  rotation's victims, renamed aside before their files go: deleted;
 *   checkpoint-<step>.old       the commit's fallback where the file system cannot exchange two
 *                               names: the old copy, put back under its name when the new one never
 *                               arrived, else deleted;
 *   NAME.tmp-<host>-<pid>       an atomic write's temporary whose writer on this host no longer runs
 *                               (core/fs.h): deleted.
 * Only real directories (files for the last kind) of exactly these names are touched; a symbolic
 * link, a name with another step spelling or anything else stays as it is. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_impl.h"
#include "core/fs.h"
#include "core/log.h"

enum { NONE, TMP, DELETING, OLD, ORPHAN };

/* What kind of leftover the entry `name` of dir is (NONE: not one). */
static int leftover_kind(const char *dir, const char *name) {
    static const char *const suffix[] = {[TMP] = ".tmp", [DELETING] = ".deleting", [OLD] = ".old"};
    char path[4400];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (lstat(path, &st) != 0) return NONE;
    if (S_ISREG(st.st_mode)) return ct_atomic_file_is_orphan(name) ? ORPHAN : NONE;
    if (!S_ISDIR(st.st_mode)) return NONE;
    for (int k = TMP; k <= OLD; k++) {
        size_t n = strlen(name), m = strlen(suffix[k]);
        char stem[256];
        if (n <= m || n - m >= sizeof stem || strcmp(name + n - m, suffix[k]) != 0) continue;
        snprintf(stem, sizeof stem, "%.*s", (int)(n - m), name);
        return ct_checkpoint_step_of(stem) >= 0 ? k : NONE;
    }
    return NONE;
}

bool ct_checkpoint_is_leftover(const char *output_dir, const char *name) {
    return leftover_kind(output_dir, name) != NONE;
}

ct_status ct_checkpoint_clean_leftovers(const char *output_dir) {
    DIR *d = opendir(output_dir);
    if (!d) return errno == ENOENT ? CT_OK : ct_error(CT_ERR_IO, "cannot list '%s': %s", output_dir, strerror(errno));
    /* names first, then changes: a directory is not changed while it is read */
    char **names = NULL;
    int *kinds = NULL, n = 0, cap = 0;
    ct_status s = CT_OK;
    for (struct dirent *e; s == CT_OK && (e = readdir(d));) {
        int k = leftover_kind(output_dir, e->d_name);
        if (k == NONE) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            char **gn = realloc(names, (size_t)cap * sizeof *names);
            if (gn) names = gn;
            int *gk = realloc(kinds, (size_t)cap * sizeof *kinds);
            if (gk) kinds = gk;
            if (!gn || !gk) s = ct_error(CT_ERR_NOMEM, "out of memory");
        }
        if (s == CT_OK && !(names[n] = strdup(e->d_name))) s = ct_error(CT_ERR_NOMEM, "out of memory");
        if (s == CT_OK) kinds[n++] = k;
    }
    closedir(d);
    for (int i = 0; s == CT_OK && i < n; i++) {
        char path[4400], whole[4400];
        snprintf(path, sizeof path, "%s/%s", output_dir, names[i]);
        if (kinds[i] == OLD) {
            struct stat st;
            snprintf(whole, sizeof whole, "%.*s", (int)(strlen(path) - 4), path);
            if (lstat(whole, &st) != 0 && errno == ENOENT) {
                if (rename(path, whole) != 0)
                    s = ct_error(CT_ERR_IO, "cannot put '%s' back as '%s': %s", path, whole, strerror(errno));
                else
                    ct_log_warning("%s: put back from '%s', where an interrupted save had left it", whole, path);
                continue;
            }
        }
        s = ct_remove_tree(path);
        if (s == CT_OK) ct_log_info("%s: deleted, a leftover of a run that did not end cleanly", path);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    free(kinds);
    if (s != CT_OK) return ct_error_prefix(s, "cleaning output_dir '%s' of what an earlier run left: ", output_dir);
    return CT_OK;
}
