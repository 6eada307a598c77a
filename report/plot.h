/* Training curves: a run's log history drawn as a figure (PNG and SVG, with cairo).
 *
 * One panel per quantity, all on the global step: the loss (training loss and every evaluation
 * set's loss on the same axes, on a log scale when it spans more than a decade), each evaluation
 * metric (one line per evaluation set, with its confidence band where the log has "_ci_low" /
 * "_ci_high"), the learning rate and the gradient norm. Dashed lines mark epoch ends. Values that
 * are absent, null, NaN or infinite are skipped. `ctrainer plot` and the model card
 * (report/model_card.h) draw with it.
 *
 * Drawing is optional at build time (CTRAINER_PLOT, cairo and fontconfig). Built without it, this
 * API is still there: ct_plot_cairo_version returns NULL, ct_plot_training_curves answers
 * CT_ERR_UNSUPPORTED with a message saying how to build it in, ct_plot_release_fonts does nothing,
 * and ct_plot_count_values works as in every build. */
#ifndef CT_PLOT_H
#define CT_PLOT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

typedef struct ct_plot_options {
    const char *title;     /* NULL: "Training curves" */
    bool no_epoch_markers; /* false: dashed lines at the end of each epoch */
    double scale;          /* PNG pixels per figure unit (the figure is 1280 units wide); 0: 1 */
} ct_plot_options;

/* The version of cairo the curves are drawn with ("1.16.0"), or NULL when this ctrainer was built
 * without them. */
const char *ct_plot_cairo_version(void);

/* How many values of history the figure would show (0: nothing to draw). */
int64_t ct_plot_count_values(const json_t *history);

/* Draws history (a log_history array, report/log_history.h) and writes the figure to png_file
 * and/or svg_file (either may be NULL), each through a temporary file renamed when complete. A
 * history with nothing to draw is CT_ERR_INVALID_ARG ("nothing to plot ..."); a file that cannot be
 * written is CT_ERR_IO naming it. opts may be NULL. */
ct_status ct_plot_training_curves(const json_t *history, const ct_plot_options *opts, const char *png_file,
                                  const char *svg_file);

/* Releases the font caches cairo and fontconfig keep for the rest of the process once text was drawn
 * (not leaks, but leak checkers report them). For the end of a program that drew curves, when
 * nothing else in the process uses cairo or fontconfig any more: `ctrainer` calls it after `plot`
 * and after `train` wrote its model card. A no-op when nothing was drawn. */
void ct_plot_release_fonts(void);

#endif
