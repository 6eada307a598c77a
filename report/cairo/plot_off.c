/* Training curves in a ctrainer built without cairo (CTRAINER_PLOT=OFF, or AUTO where cairo or
 * fontconfig was not found; cmake/CtrainerPlot.cmake compiles this file instead of plot.c). The API
 * of plot.h stays, so programs build and link the same way: drawing answers CT_ERR_UNSUPPORTED,
 * `ctrainer plot` exits with that message and the model card goes without its figure. The figure's
 * data (plot_series.c, with ct_plot_count_values) is built in every configuration. */
#include "report/plot.h"

const char *ct_plot_cairo_version(void) { return NULL; }

ct_status ct_plot_training_curves(const json_t *history, const ct_plot_options *opts, const char *png_file,
                                  const char *svg_file) {
    return ct_error(CT_ERR_UNSUPPORTED, "training curves: this ctrainer was built without plotting support (cairo; "
                                        "configure with -DCTRAINER_PLOT=ON)");
}

void ct_plot_release_fonts(void) {}
