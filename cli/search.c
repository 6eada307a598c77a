/* `ctrainer search` (being written). */
#include <stdio.h>

#include "cli/cli.h"

int ct_cli_search(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "ctrainer search: not available in this build\n");
    return 2;
}
