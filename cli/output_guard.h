/* Where a command writes a file the user named (--output, a converted or tokenized file): never
 * over a file the same command reads, nor over a file a saved model or checkpoint is made of (one its
 * manifest lists). A file that merely exists is replaced, as asked: an earlier output of the same
 * command, say. */
#ifndef CT_CLI_OUTPUT_GUARD_H
#define CT_CLI_OUTPUT_GUARD_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/run_config.h"

/* Whether path and other name one existing file (links followed). */
bool cli_same_file(const char *path, const char *other);

/* CT_ERR_CONFIG naming `flag`, `output` and the clash when output is one of the n inputs (NULL ones
 * are skipped), a file the run config rc names in its "data" or "init_from" (relative to its
 * directory; rc may be NULL), or a file of a saved model. */
ct_status cli_check_output(const char *flag, const char *output, const char *const *inputs, int n,
                           const ct_run_config *rc);

/* How many entries dir holds, leaving out a run's lock and what a killed run left (the Trainer's to
 * judge); 0 for a missing directory or a file. The first one's name goes to first. */
int64_t cli_dir_entries(const char *dir, char *first, size_t cap);

#endif
