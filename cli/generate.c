/* `ctrainer generate` (being written). */
#include <stdio.h>

#include "cli/cli.h"

int ct_cli_generate(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "ctrainer generate: not available in this build\n");
    return 2;
}
