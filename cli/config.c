/* `ctrainer config`: the training arguments' defaults and documentation, from the schema.
 *
 *   ctrainer config --defaults   every training argument at its default, as JSON
 *   ctrainer config --markdown   the reference table of docs/config.md */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "config/args.h"

static void usage(FILE *f) {
    fprintf(f, "usage: ctrainer config --defaults | --markdown\n"
               "  --defaults  print every training argument at its default (the \"training_args\" of a run config)\n"
               "  --markdown  print the training-argument reference (docs/config.md)\n");
}

int ct_cli_config(int argc, char **argv) {
    if (argc != 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--markdown") == 0) {
        char *md = ct_training_args_markdown();
        if (!md) return fprintf(stderr, "ctrainer config: out of memory\n"), 1;
        fputs(md, stdout);
        free(md);
        return 0;
    }
    if (strcmp(argv[1], "--defaults") != 0) {
        fprintf(stderr, "ctrainer config: unknown option '%s'\n", argv[1]);
        usage(stderr);
        return 2;
    }
    ct_training_args a;
    ct_training_args_default(&a);
    json_t *args = NULL;
    ct_status s = ct_training_args_to_json(&a, &args);
    ct_training_args_free(&a);
    if (s != CT_OK) return fprintf(stderr, "ctrainer config: %s\n", ct_last_error()), 1;
    json_t *doc = json_pack("{s:o}", "training_args", args);
    char *text = doc ? json_dumps(doc, JSON_INDENT(2) | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(doc);
    if (!text) return fprintf(stderr, "ctrainer config: out of memory\n"), 1;
    puts(text);
    free(text);
    return 0;
}
