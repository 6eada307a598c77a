/* Rotation of a run's checkpoints (see checkpoint.h): listing output_dir's checkpoint-<step>
 * directories in step order, Hugging Face's choice of which ones go, and deleting them.
 *
 * Rotation deletes only what it has proven to be one of the run's checkpoints: a directory (not a
 * symbolic link) right inside output_dir, named checkpoint-<step> as a save names one, holding a
 * ctrainer manifest, saved by the run (its progress file names the run's identity; one saved before
 * runs had one must be of a step the run has reached), so that another run's checkpoints, in an
 * output_dir written into again with overwrite_output_dir, are left alone. The best checkpoint it
 * keeps is found among those by identity (the same directory under any name). A
 * best_model_checkpoint that names nothing (output_dir moved, or given relative to another working
 * directory) is found again by its step; one that names a directory elsewhere (a run resumed into
 * another output_dir) protects nothing in output_dir and licenses nothing either: the
 * end-of-training clean-up of save_total_limit 1 then keeps every checkpoint and says why. A victim is first renamed to `<dir>.deleting`, so that a crash never leaves part of
 * a checkpoint under a checkpoint's name; the run that next locks output_dir deletes what a crash
 * left (leftovers.c). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_async.h"
#include "checkpoint/checkpoint_impl.h"
#include "checkpoint/checkpoint_io.h"
#include "core/fs.h"
#include "core/log.h"

#define PREFIX "checkpoint-"

int64_t ct_checkpoint_step_of(const char *name) {
    size_t n = strlen(PREFIX);
    if (strncmp(name, PREFIX, n) != 0) return -1;
    const char *d = name + n;
    /* digits only, as "%lld" writes them: no sign, space or leading zero; no overflow */
    if (!*d || (d[0] == '0' && d[1]) || strlen(d) > 18) return -1;
    int64_t v = 0;
    for (; *d; d++) {
        if (*d < '0' || *d > '9') return -1;
        v = v * 10 + (*d - '0');
    }
    return v;
}

/* The step of the directory a path names (its last component), or -1. */
static int64_t path_step(const char *path) {
    char base[256];
    ct_path_base_name(path, base, sizeof base);
    return ct_checkpoint_step_of(base);
}

typedef struct entry {
    int64_t step;
    char *path;
} entry;

static int by_step(const void *a, const void *b) {
    int64_t x = ((const entry *)a)->step, y = ((const entry *)b)->step;
    return (x > y) - (x < y);
}

/* dir's checkpoint-<step> directories, oldest first. owned: only those rotation may delete (not a
 * symbolic link, a ctrainer manifest inside); else every directory of such a name (links followed),
 * for resuming and messages. */
static ct_status list_checkpoints(const char *dir, bool owned, char ***out, int *n) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? CT_OK : ct_error(CT_ERR_IO, "cannot list '%s': %s", dir, strerror(errno));
    entry *e = NULL;
    int cnt = 0, cap = 0;
    ct_status s = CT_OK;
    for (struct dirent *de; (de = readdir(d));) {
        int64_t step = ct_checkpoint_step_of(de->d_name);
        if (step < 0) continue;
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if ((owned ? lstat(path, &st) : stat(path, &st)) != 0 || !S_ISDIR(st.st_mode)) continue;
        if (owned && !ct_checkpoint_has_manifest(path)) continue;
        if (cnt == cap) {
            cap = cap ? cap * 2 : 8;
            entry *grown = realloc(e, (size_t)cap * sizeof *e);
            if (!grown) {
                s = ct_error(CT_ERR_NOMEM, "out of memory");
                break;
            }
            e = grown;
        }
        e[cnt].step = step;
        e[cnt].path = strdup(path);
        if (!e[cnt++].path) {
            s = ct_error(CT_ERR_NOMEM, "out of memory");
            break;
        }
    }
    closedir(d);
    char **list = s == CT_OK && cnt ? malloc((size_t)cnt * sizeof *list) : NULL;
    if (s == CT_OK && cnt && !list) s = ct_error(CT_ERR_NOMEM, "out of memory");
    if (s == CT_OK) {
        if (cnt) qsort(e, (size_t)cnt, sizeof *e, by_step);
        for (int i = 0; i < cnt; i++) list[i] = e[i].path;
        *out = list;
        *n = cnt;
    } else {
        for (int i = 0; i < cnt; i++) free(e[i].path);
    }
    free(e);
    return s;
}

ct_status ct_checkpoint_list(const char *dir, char ***out, int *n) { return list_checkpoints(dir, false, out, n); }

void ct_checkpoint_list_free(char **list, int n) {
    for (int i = 0; i < n; i++) free(list[i]);
    free(list);
}

bool ct_checkpoint_same_path(const char *a, const char *b) {
    struct stat x, y;
    return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/* The index in list (output_dir's own checkpoints) of the best checkpoint, -1 when none of them is
 * it: the same directory as best, or, when best names nothing at all, the one of its step. */
static int find_best(const char *best, char **list, int n) {
    if (!best[0]) return -1;
    for (int i = 0; i < n; i++)
        if (ct_checkpoint_same_path(list[i], best)) return i;
    struct stat st;
    int64_t step = path_step(best);
    if (stat(best, &st) == 0 || step < 0) return -1; /* a directory elsewhere, or not a checkpoint's name */
    for (int i = 0; i < n; i++)
        if (path_step(list[i]) == step) return i;
    return -1;
}

void ct_checkpoint_rederive_best(char *best, size_t cap, const char *output_dir, const char *resumed, bool report) {
    int64_t step = path_step(best);
    if (!best[0] || step < 0) return;
    /* The best was saved beside the checkpoint resumed from (both in that run's output_dir), so it
     * is there still, whatever that directory is called now; then as named; then in output_dir. */
    char parent[4096], beside[4400], mine[4400];
    ct_path_parent(resumed, parent, sizeof parent);
    snprintf(beside, sizeof beside, "%s/" PREFIX "%lld", parent, (long long)step);
    snprintf(mine, sizeof mine, "%s/" PREFIX "%lld", output_dir, (long long)step);
    struct stat st;
    const char *found = stat(beside, &st) == 0 && S_ISDIR(st.st_mode)  ? beside
                        : stat(best, &st) == 0 && S_ISDIR(st.st_mode) ? best
                        : stat(mine, &st) == 0 && S_ISDIR(st.st_mode) ? mine
                                                                      : NULL;
    if (!found) {
        if (report)
            ct_log_warning("the best checkpoint of the resumed run, '%s', is gone (nor is there '%s' or '%s'): "
                           "load_best_model_at_end cannot load it, and rotation keeps no checkpoint in its place",
                           best, beside, mine);
        return;
    }
    if (found == best || ct_checkpoint_same_path(found, best) || strlen(found) >= cap) return;
    if (report) ct_log_info("best_model_checkpoint '%s' is '%s' from here", best, found);
    snprintf(best, cap, "%s", found);
}

/* Whether the checkpoint at path was saved by this run: its progress file names the run's identity.
 * One saved before runs had an identity counts as the run's when its step is one the run has reached
 * (a later one is another run's, in an output_dir written into again with overwrite_output_dir). */
static bool of_this_run(const ct_checkpoint_snapshot *snap, const char *path) {
    char id[64];
    if (ct_checkpoint_run_id(path, id, sizeof id)) return strcmp(id, snap->progress->run_id) == 0;
    return path_step(path) <= snap->state->global_step;
}

/* output_dir's checkpoints that rotation may delete, oldest first: the run's own (another run's are
 * neither deleted nor counted). */
static ct_status own_checkpoints(const ct_checkpoint_snapshot *snap, char ***out, int *n_out) {
    char **list;
    int n;
    CT_TRY(list_checkpoints(snap->args->output_dir, true, &list, &n));
    int kept = 0;
    for (int i = 0; i < n; i++) {
        if (of_this_run(snap, list[i])) list[kept++] = list[i];
        else free(list[i]);
    }
    *out = list;
    *n_out = kept;
    return CT_OK;
}

/* Hugging Face's _sorted_checkpoints + _rotate_checkpoints over output_dir's own checkpoints: the
 * ones to delete, oldest first (*out as ct_checkpoint_list's; *n 0 when none). */
static ct_status rotation_victims(const ct_checkpoint_snapshot *snap, char ***out, int *n_out) {
    *out = NULL;
    *n_out = 0;
    int64_t limit = snap->args->save_total_limit;
    if (limit <= 0) return CT_OK;
    char **list;
    int n;
    CT_TRY(own_checkpoints(snap, &list, &n));
    const char *best = snap->state->best_model_checkpoint;
    /* The best checkpoint moves to the second-to-last place of the deletion order, so it goes last
     * but one: only the newest checkpoint outlives it. */
    int b = find_best(best, list, n);
    bool best_is_newest = b >= 0 && b == n - 1;
    if (b >= 0) {
        char *kept = list[b];
        for (int j = b; j < n - 2; j++) list[j] = list[j + 1];
        if (b < n - 2) list[n - 2] = kept;
    }
    if (best[0] && limit == 1 && n > 0 && !best_is_newest) limit = 2;
    /* the survivors are freed; the victims stay at the front of the array */
    int victims = n > limit ? n - (int)limit : 0;
    for (int i = victims; i < n; i++) free(list[i]);
    if (!victims) {
        free(list);
        list = NULL;
    }
    *out = list;
    *n_out = victims;
    return CT_OK;
}

/* Renames the checkpoint dir to `<dir>.deleting` (replacing such a leftover of an earlier crash):
 * out of every listing at once, whole; *aside its new name (malloc'd). */
static ct_status set_aside(const char *dir, char **aside) {
    char path[4300];
    snprintf(path, sizeof path, "%s.deleting", dir);
    CT_TRY(ct_remove_tree(path));
    if (rename(dir, path) != 0)
        return ct_error(CT_ERR_IO, "cannot rename '%s' to '%s' to delete it: %s", dir, path, strerror(errno));
    if (!(*aside = strdup(path))) return ct_error(CT_ERR_NOMEM, "out of memory");
    return CT_OK;
}

ct_status ct_checkpoint_rotate_aside(const ct_checkpoint_snapshot *snap, char ***out, int *n) {
    CT_TRY(rotation_victims(snap, out, n));
    ct_status s = CT_OK;
    for (int i = 0; i < *n; i++) {
        char *aside = NULL;
        if (s == CT_OK) s = set_aside((*out)[i], &aside);
        free((*out)[i]);
        (*out)[i] = aside; /* NULL: not renamed, nothing to delete */
    }
    if (s != CT_OK) {
        /* what was renamed aside is deleted here; the rest stays a whole checkpoint */
        for (int i = 0; i < *n; i++)
            if ((*out)[i] && ct_remove_tree((*out)[i]) != CT_OK) ct_log_warning("rotation: %s", ct_last_error());
        ct_checkpoint_list_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return s;
}

/* Deletes what ct_checkpoint_rotate_aside renamed (and frees the list). */
static ct_status delete_aside(char **aside, int n) {
    ct_status s = CT_OK;
    for (int i = 0; i < n; i++) {
        ct_status r = ct_remove_tree(aside[i]);
        if (s == CT_OK) s = r;
    }
    ct_checkpoint_list_free(aside, n);
    return s;
}

ct_status ct_checkpoint_rotate(const ct_checkpoint_snapshot *snap) {
    char **aside;
    int n;
    CT_TRY(ct_checkpoint_rotate_aside(snap, &aside, &n));
    return delete_aside(aside, n);
}

ct_status ct_checkpoint_finish(ct_checkpoint_snapshot *snap) {
    CT_TRY(ct_checkpoint_async_drain(snap)); /* every save committed before the last rotation */
    const char *best = snap->state->best_model_checkpoint;
    if (snap->rank != 0 || snap->args->save_total_limit != 1 || !best[0]) return CT_OK;
    char **list;
    int n;
    CT_TRY(own_checkpoints(snap, &list, &n));
    int b = find_best(best, list, n);
    if (b < 0) {
        if (n > 0)
            ct_log_warning("save_total_limit 1: the best checkpoint '%s' is not one of output_dir '%s''s "
                           "checkpoints, so all %d of those are kept", best, snap->args->output_dir, n);
        ct_checkpoint_list_free(list, n);
        return CT_OK;
    }
    /* every checkpoint but the best, renamed aside first, then deleted */
    ct_status s = CT_OK;
    int m = 0;
    for (int i = 0; i < n; i++) {
        char *aside = NULL;
        if (i != b && s == CT_OK) s = set_aside(list[i], &aside);
        free(list[i]);
        if (aside) list[m++] = aside;
    }
    ct_status d = delete_aside(list, m);
    return s != CT_OK ? s : d;
}

void ct_checkpoint_newest(const char *output_dir, char *out, size_t cap) {
    char **list;
    int n;
    if (ct_checkpoint_list(output_dir, &list, &n) != CT_OK) n = 0;
    snprintf(out, cap, "%s", n > 0 ? list[n - 1] : "none");
    if (n > 0) ct_checkpoint_list_free(list, n);
}
