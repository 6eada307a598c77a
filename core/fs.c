/* File-system helpers (see fs.h). */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fs.h"

ct_status ct_make_dirs(const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return ct_error(CT_ERR_INVALID_ARG, "path too long: %s", dir);
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return ct_error(CT_ERR_IO, "cannot create directory '%s': %s", path, strerror(errno));
        *p = c;
        if (!c) break;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return ct_error(CT_ERR_IO, "'%s' is not a directory", dir);
    return CT_OK;
}

void ct_path_base_name(const char *path, char *buf, size_t cap) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t start = n;
    while (start > 0 && path[start - 1] != '/') start--;
    snprintf(buf, cap, "%.*s", (int)(n - start), path + start);
    char resolved[PATH_MAX];
    if ((strcmp(buf, ".") == 0 || strcmp(buf, "..") == 0) && realpath(path, resolved) && strcmp(resolved, "/") != 0)
        snprintf(buf, cap, "%s", strrchr(resolved, '/') + 1);
}
