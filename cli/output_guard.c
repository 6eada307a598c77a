/* The check of cli/output_guard.h: a command's output compared, by device and inode, with what the
 * command reads, and its directory's manifest asked whether the name is one of a saved model's files. */
#include "cli/output_guard.h"

#include <dirent.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_io.h"
#include "core/dir_lock.h"

bool cli_same_file(const char *path, const char *other) {
    struct stat x, y;
    return path && other && stat(path, &x) == 0 && stat(other, &y) == 0 && x.st_dev == y.st_dev &&
           x.st_ino == y.st_ino;
}

/* The first string of the JSON value v (searched whole) that names the same file as path, taken
 * relative to base_dir unless absolute; NULL when none does. */
static const char *names_file(const json_t *v, const char *path, const char *base_dir) {
    const char *key;
    const json_t *child;
    size_t i;
    if (json_is_string(v)) {
        const char *other = json_string_value(v);
        char full[4096];
        if (other[0] == '/' || !base_dir) snprintf(full, sizeof full, "%s", other);
        else snprintf(full, sizeof full, "%s/%s", base_dir, other);
        return cli_same_file(path, full) ? other : NULL;
    }
    const char *found = NULL;
    if (json_is_object(v))
        json_object_foreach((json_t *)v, key, child) if (!found) found = names_file(child, path, base_dir);
    if (json_is_array(v))
        json_array_foreach(v, i, child) if (!found) found = names_file(child, path, base_dir);
    return found;
}

ct_status cli_check_output(const char *flag, const char *output, const char *const *inputs, int n,
                           const ct_run_config *rc) {
    const char *hit = NULL;
    for (int i = 0; !hit && i < n; i++)
        if (cli_same_file(output, inputs[i])) hit = inputs[i];
    if (!hit && rc) hit = names_file(ct_run_config_section(rc, "data"), output, rc->base_dir);
    if (!hit && rc) hit = names_file(ct_run_config_section(rc, "init_from"), output, rc->base_dir);
    if (hit)
        return ct_error(CT_ERR_CONFIG, "%s %s is '%s', which this command reads; write to another file", flag, output,
                        hit);
    struct stat st;
    if (stat(output, &st) != 0) return CT_OK; /* a new file */
    char dir_buf[4096], base_buf[4096];
    snprintf(dir_buf, sizeof dir_buf, "%s", output);
    snprintf(base_buf, sizeof base_buf, "%s", output);
    const char *dir = dirname(dir_buf), *base = basename(base_buf);
    if (ct_checkpoint_manifest_lists(dir, base))
        return ct_error(CT_ERR_CONFIG, "%s %s is a file of the saved model in '%s' (its manifest.json lists it); "
                        "write to another file", flag, output, dir);
    return CT_OK;
}

int64_t cli_dir_entries(const char *dir, char *first, size_t cap) {
    if (cap) first[0] = '\0';
    DIR *d = opendir(dir);
    if (!d) return 0;
    int64_t entries = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 || strcmp(e->d_name, CT_DIR_LOCK_NAME) == 0 ||
            ct_checkpoint_is_leftover(dir, e->d_name))
            continue;
        if (!entries++) snprintf(first, cap, "%s", e->d_name);
    }
    closedir(d);
    return entries;
}
