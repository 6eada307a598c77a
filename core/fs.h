/* Small file-system helpers shared by the areas that write files (checkpoints, logs, results). */
#ifndef CT_FS_H
#define CT_FS_H

#include <stddef.h>

#include "core/status.h"

/* mkdir -p: creates dir and its missing parents; CT_ERR_IO naming the part that failed. */
ct_status ct_make_dirs(const char *dir);

/* The last component of a path into buf, trailing slashes ignored; "." and ".." become the name of
 * the directory they stand for (what a person calls a run's output_dir). */
void ct_path_base_name(const char *path, char *buf, size_t cap);

#endif
