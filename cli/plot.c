/* `ctrainer plot` (being written). */
#include <stdio.h>

#include "cli/cli.h"

int ct_cli_plot(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "ctrainer plot: not available in this build\n");
    return 2;
}
