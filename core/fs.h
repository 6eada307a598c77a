/* Small file-system helpers shared by the areas that write files (checkpoints, logs, results). */
#ifndef CT_FS_H
#define CT_FS_H

#include "core/status.h"

/* mkdir -p: creates dir and its missing parents; CT_ERR_IO naming the part that failed. */
ct_status ct_make_dirs(const char *dir);

#endif
