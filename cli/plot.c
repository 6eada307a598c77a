/* `ctrainer plot OUTPUT_DIR`: the run's curves (loss, evaluation metrics with their intervals,
 * learning rate, gradient norm) from OUTPUT_DIR/trainer_state.json, as PNG and SVG. The drawing is
 * the library's (report/plot.h); this file only reads the command line. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "core/fs.h"
#include "report/log_history.h"
#include "report/plot.h"

static void usage(FILE *f) {
    fprintf(f, "usage: ctrainer plot OUTPUT_DIR [--output FILE_PREFIX] [--format png|svg|both] [--title TEXT]\n"
               "                     [--scale FACTOR] [--no-epochs]\n"
               "\n"
               "Draws a run's training curves from OUTPUT_DIR/trainer_state.json (a checkpoint directory, or a\n"
               "trainer_state.json file itself, works too; Hugging Face's files as well): the training and\n"
               "evaluation loss, each evaluation metric with its confidence band, the learning rate and the\n"
               "gradient norm, against the global step, with the ends of epochs marked.\n"
               "\n"
               "  --output FILE_PREFIX  write FILE_PREFIX.png and/or FILE_PREFIX.svg\n"
               "                        (default: OUTPUT_DIR/training_curves)\n"
               "  --format FORMAT       png, svg or both (default both)\n"
               "  --title TEXT          the figure's title (default \"Training curves: <run directory's name>\")\n"
               "  --scale FACTOR        PNG pixels per figure unit, 0.5 to 4 (default 1: 1280 pixels wide)\n"
               "  --no-epochs           no dashed lines at the ends of epochs\n");
}

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "ctrainer plot: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    usage(stderr);
    return 2;
}


int ct_cli_plot(int argc, char **argv) {
    const char *run = NULL, *prefix = NULL, *format = "both", *title = NULL;
    double scale = 1;
    bool no_epochs = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--no-epochs") == 0) {
            no_epochs = true;
            continue;
        }
        bool takes_value = strcmp(a, "--output") == 0 || strcmp(a, "-o") == 0 || strcmp(a, "--format") == 0 ||
                           strcmp(a, "--title") == 0 || strcmp(a, "--scale") == 0;
        if (takes_value) {
            if (i + 1 >= argc) return usage_error("%s needs a value", a);
            const char *v = argv[++i];
            if (strcmp(a, "--format") == 0) {
                if (strcmp(v, "png") != 0 && strcmp(v, "svg") != 0 && strcmp(v, "both") != 0)
                    return usage_error("--format expects png, svg or both, got '%s'", v);
                format = v;
            } else if (strcmp(a, "--title") == 0) {
                title = v;
            } else if (strcmp(a, "--scale") == 0) {
                char *end;
                scale = strtod(v, &end);
                if (*end || end == v || !(scale >= 0.5 && scale <= 4))
                    return usage_error("--scale expects a number from 0.5 to 4, got '%s'", v);
            } else {
                prefix = v;
            }
            continue;
        }
        if (a[0] == '-' && a[1]) return usage_error("unknown option '%s'", a);
        if (run) {
            fprintf(stderr, "ctrainer plot: unexpected argument '%s' (the run directory is '%s')\n", a, run);
            return 2;
        }
        run = a;
    }
    if (!run) {
        usage(stderr);
        return 2;
    }
    if (!ct_plot_cairo_version()) {
        fprintf(stderr, "ctrainer plot: this ctrainer was built without plotting support (cairo; configure with "
                        "-DCTRAINER_PLOT=ON)\n");
        return 1;
    }

    /* A directory holds trainer_state.json; a file is taken as the state file itself, and a path that
     * does not exist as the run directory it names unless it ends in .json (so the error names the
     * file that was looked for). */
    char state_file[4096], dir[4096];
    struct stat st;
    size_t run_len = strlen(run);
    bool exists = stat(run, &st) == 0;
    bool is_dir = exists ? S_ISDIR(st.st_mode) : !(run_len > 5 && strcmp(run + run_len - 5, ".json") == 0);
    if (is_dir) {
        snprintf(dir, sizeof dir, "%s", run);
        snprintf(state_file, sizeof state_file, "%s/trainer_state.json", run);
    } else {
        snprintf(state_file, sizeof state_file, "%s", run);
        const char *slash = strrchr(run, '/');
        if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash == run ? 1 : slash - run), run);
        else snprintf(dir, sizeof dir, ".");
    }

    char out[4096];
    if (prefix) {
        size_t n = strlen(prefix);
        if (n > 4 && (strcmp(prefix + n - 4, ".png") == 0 || strcmp(prefix + n - 4, ".svg") == 0)) n -= 4;
        snprintf(out, sizeof out, "%.*s", (int)n, prefix);
    } else {
        snprintf(out, sizeof out, "%s/training_curves", dir);
    }
    char png[4200], svg[4200], default_title[512], name[256];
    snprintf(png, sizeof png, "%s.png", out);
    snprintf(svg, sizeof svg, "%s.svg", out);
    ct_path_base_name(is_dir ? run : dir, name, sizeof name);
    snprintf(default_title, sizeof default_title, "Training curves: %s", name);
    bool want_png = strcmp(format, "svg") != 0, want_svg = strcmp(format, "png") != 0;

    json_t *history;
    ct_status s = ct_log_history_load(state_file, &history);
    if (s == CT_OK) {
        if (json_array_size(history) == 0)
            s = ct_error(CT_ERR_FORMAT, "%s: log_history is empty: nothing to plot yet (the run has not logged)",
                         state_file);
        else {
            ct_plot_options o = {.title = title ? title : default_title, .no_epoch_markers = no_epochs, .scale = scale};
            s = ct_plot_training_curves(history, &o, want_png ? png : NULL, want_svg ? svg : NULL);
            ct_plot_release_fonts();
            if (s == CT_ERR_INVALID_ARG) ct_error_prefix(s, "%s: ", state_file); /* nothing to plot in it */
        }
        json_decref(history);
    }
    if (s != CT_OK) {
        fprintf(stderr, "ctrainer plot: %s\n", ct_last_error());
        return 1;
    }
    if (want_png) printf("wrote %s\n", png);
    if (want_svg) printf("wrote %s\n", svg);
    return 0;
}
