/* Rotation of a run's checkpoints (see checkpoint.h): listing output_dir's checkpoint-<step>
 * directories in step order, Hugging Face's choice of which ones go, and deleting them. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_async.h"
#include "checkpoint/checkpoint_impl.h"
#include "core/fs.h"

#define PREFIX "checkpoint-"

/* The step of a "checkpoint-<digits>" name, or -1. */
static int64_t checkpoint_step(const char *name) {
    size_t n = strlen(PREFIX);
    if (strncmp(name, PREFIX, n) != 0 || !name[n]) return -1;
    char *end;
    long long v = strtoll(name + n, &end, 10);
    return *end || v < 0 ? -1 : v;
}

typedef struct entry {
    int64_t step;
    char *path;
} entry;

static int by_step(const void *a, const void *b) {
    int64_t x = ((const entry *)a)->step, y = ((const entry *)b)->step;
    return (x > y) - (x < y);
}

ct_status ct_checkpoint_list(const char *dir, char ***out, int *n) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? CT_OK : ct_error(CT_ERR_IO, "cannot list '%s': %s", dir, strerror(errno));
    entry *e = NULL;
    int cnt = 0, cap = 0;
    ct_status s = CT_OK;
    for (struct dirent *de; (de = readdir(d));) {
        int64_t step = checkpoint_step(de->d_name);
        if (step < 0) continue;
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
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

void ct_checkpoint_list_free(char **list, int n) {
    for (int i = 0; i < n; i++) free(list[i]);
    free(list);
}

bool ct_checkpoint_same_path(const char *a, const char *b) {
    struct stat x, y;
    return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/* Hugging Face's _sorted_checkpoints + _rotate_checkpoints: the checkpoints to delete, oldest first
 * (*out as ct_checkpoint_list's; *n 0 when none). */
ct_status ct_checkpoint_rotation_victims(const ct_checkpoint_snapshot *snap, char ***out, int *n_out) {
    *out = NULL;
    *n_out = 0;
    int64_t limit = snap->args->save_total_limit;
    if (limit <= 0) return CT_OK;
    char **list;
    int n;
    CT_TRY(ct_checkpoint_list(snap->args->output_dir, &list, &n));
    const char *best = snap->state->best_model_checkpoint;
    /* The best checkpoint moves to the second-to-last place of the deletion order, so it goes last
     * but one: only the newest checkpoint outlives it. */
    for (int i = 0; best[0] && i < n; i++) {
        if (!ct_checkpoint_same_path(list[i], best)) continue;
        char *b = list[i];
        for (int j = i; j < n - 2; j++) list[j] = list[j + 1];
        if (i < n - 2) list[n - 2] = b;
        break;
    }
    if (best[0] && limit == 1 && n > 0 && !ct_checkpoint_same_path(list[n - 1], best)) limit = 2;
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

ct_status ct_checkpoint_rotate(const ct_checkpoint_snapshot *snap) {
    char **list;
    int n;
    CT_TRY(ct_checkpoint_rotation_victims(snap, &list, &n));
    ct_status s = CT_OK;
    for (int i = 0; i < n && s == CT_OK; i++) s = ct_remove_tree(list[i]);
    ct_checkpoint_list_free(list, n);
    return s;
}

void ct_checkpoint_newest(const char *output_dir, char *out, size_t cap) {
    char **list;
    int n;
    if (ct_checkpoint_list(output_dir, &list, &n) != CT_OK) n = 0;
    snprintf(out, cap, "%s", n > 0 ? list[n - 1] : "none");
    if (n > 0) ct_checkpoint_list_free(list, n);
}
