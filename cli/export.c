/* `ctrainer export` (being written). */
#include <stdio.h>

#include "cli/cli.h"

int ct_cli_export(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "ctrainer export: not available in this build\n");
    return 2;
}
