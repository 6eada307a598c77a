/* Checkpoint directories: saving one, rotating old ones, loading the best (see checkpoint.h). */
#define _GNU_SOURCE /* nftw */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "trainer/checkpoint.h"
#include "trainer/model_io.h"
#include "trainer/trainer_impl.h"

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
        qsort(e, (size_t)cnt, sizeof *e, by_step);
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

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static ct_status remove_tree(const char *path) {
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
        return ct_error(CT_ERR_IO, "cannot delete '%s': %s", path, strerror(errno));
    return CT_OK;
}

static bool same_path(const char *a, const char *b) {
    struct stat x, y;
    return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/* Hugging Face's _sorted_checkpoints + _rotate_checkpoints. */
static ct_status rotate(ct_trainer *t) {
    int64_t limit = t->args.save_total_limit;
    if (limit <= 0) return CT_OK;
    char **list;
    int n;
    CT_TRY(ct_checkpoint_list(t->args.output_dir, &list, &n));
    const char *best = t->state.best_model_checkpoint;
    /* The best checkpoint moves to the second-to-last place of the deletion order, so it goes last
     * but one: only the newest checkpoint outlives it. */
    for (int i = 0; best[0] && i < n; i++) {
        if (!same_path(list[i], best)) continue;
        char *b = list[i];
        for (int j = i; j < n - 2; j++) list[j] = list[j + 1];
        if (i < n - 2) list[n - 2] = b;
        break;
    }
    if (best[0] && limit == 1 && n > 0 && !same_path(list[n - 1], best)) limit = 2;
    ct_status s = CT_OK;
    for (int i = 0; i < n - limit && s == CT_OK; i++) s = remove_tree(list[i]);
    ct_checkpoint_list_free(list, n);
    return s;
}

ct_status ct_trainer_save_checkpoint(ct_trainer *t) {
    char dir[4096], tmp[4200];
    snprintf(dir, sizeof dir, "%s/" PREFIX "%lld", t->args.output_dir, (long long)t->state.global_step);
    snprintf(tmp, sizeof tmp, "%s.tmp", dir);
    if (t->args.save_strategy == CT_INTERVAL_BEST && t->state.best_global_step == t->state.global_step)
        snprintf(t->state.best_model_checkpoint, sizeof t->state.best_model_checkpoint, "%s", dir);
    else if (t->state.best_global_step > 0) {
        char best[4096];
        struct stat st;
        snprintf(best, sizeof best, "%s/" PREFIX "%lld", t->args.output_dir, (long long)t->state.best_global_step);
        if (t->state.best_global_step == t->state.global_step || stat(best, &st) == 0)
            snprintf(t->state.best_model_checkpoint, sizeof t->state.best_model_checkpoint, "%s", best);
    }
    if (!ct_trainer_is_world_process_zero(t)) return CT_OK;
    CT_TRY(remove_tree(tmp));
    CT_TRY(ct_trainer_save_model(t, tmp));
    char path[4300];
    snprintf(path, sizeof path, "%s/trainer_state.json", tmp);
    CT_TRY(ct_trainer_store_callback_state(t));
    CT_TRY(ct_trainer_state_save(&t->state, path));
    CT_TRY(remove_tree(dir));
    if (rename(tmp, dir) != 0) return ct_error(CT_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, dir, strerror(errno));
    return rotate(t);
}

ct_status ct_trainer_finish_checkpoints(ct_trainer *t) {
    if (!ct_trainer_is_world_process_zero(t) || t->args.save_total_limit != 1 || !t->state.best_model_checkpoint[0])
        return CT_OK;
    char **list;
    int n;
    CT_TRY(ct_checkpoint_list(t->args.output_dir, &list, &n));
    ct_status s = CT_OK;
    for (int i = 0; i < n && s == CT_OK; i++)
        if (!same_path(list[i], t->state.best_model_checkpoint)) s = remove_tree(list[i]);
    ct_checkpoint_list_free(list, n);
    return s;
}

ct_status ct_trainer_load_best_model(ct_trainer *t) {
    char path[4200];
    snprintf(path, sizeof path, "%s/model.h5", t->state.best_model_checkpoint);
    ct_status s = ct_model_load_h5(t->model, path);
    if (s != CT_OK) return ct_error_prefix(s, "load_best_model_at_end: ");
    return CT_OK;
}
