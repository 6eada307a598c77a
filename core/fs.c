/* File-system helpers (see fs.h). */
#include <errno.h>
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

