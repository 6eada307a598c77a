/* Internals of the training curves (report/plot.h), shared by the files that build the figure's
 * data (plot_series.c), choose its axes (plot_axis.c) and draw it (plot.c). */
#ifndef CT_PLOT_IMPL_H
#define CT_PLOT_IMPL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "report/log_history.h"

#define CT_PLOT_MAX_PANELS 24
#define CT_PLOT_MAX_SERIES (CT_LOG_MAX_EVAL_SETS + 2)
#define CT_PLOT_MAX_TICKS 40

/* Colours are indices into the palette (plot.c): training series take 0, evaluation set k takes
 * 1 + k in every panel, so a set keeps its colour across the figure. */
typedef struct ct_plot_series {
    char label[96];
    int color;
    bool eval;             /* evaluation points: markers while they are few */
    int64_t n, cap;
    double *x, *y, *lo, *hi; /* lo/hi NaN where the entry has no interval */
} ct_plot_series;

typedef struct ct_plot_panel {
    char key[CT_LOG_NAME_MAX]; /* "loss", "learning_rate", "grad_norm" or the metric's name */
    char title[96], ylabel[96];
    bool may_log_scale; /* the loss: log scale when its values span more than a decade */
    int n_series;
    ct_plot_series series[CT_PLOT_MAX_SERIES];
} ct_plot_panel;

typedef struct ct_plot_data {
    int n_panels;
    ct_plot_panel panels[CT_PLOT_MAX_PANELS];
    int64_t n_values;
    double min_step, max_step;
    double steps_per_epoch; /* from the training logs' (step, epoch); 0: unknown */
    double max_epoch;
    int64_t skipped; /* values of metrics left out: the figure had CT_PLOT_MAX_PANELS panels already */
} ct_plot_data;

/* Collects history's series into panels: the loss first, then each metric in order of first
 * appearance, then the learning rate and the gradient norm. */
ct_status ct_plot_data_build(const json_t *history, ct_plot_data **out);
void ct_plot_data_free(ct_plot_data *d);

/* One axis: its range and ticks. Linear ticks are 1, 2 or 5 times a power of ten apart; log ticks
 * sit on powers of ten (and 2x, 5x between them when the range is short). */
typedef struct ct_plot_axis {
    double lo, hi; /* the data range shown (log10 of it on a log axis) */
    bool log;
    int n_ticks;
    double ticks[CT_PLOT_MAX_TICKS]; /* values (not logs) */
    double step;                     /* linear tick spacing (labels' precision) */
} ct_plot_axis;

/* The step of at most about `target` nice ticks over [lo, hi]: 1, 2 or 5 x 10^k. */
double ct_plot_nice_step(double lo, double hi, int target);
/* A linear axis over the data range [lo, hi] (lo <= hi, both finite; equal values get a range around
 * them), with `pad` (a fraction) of room at each end and ticks inside. */
void ct_plot_axis_linear(double lo, double hi, double pad, int target, ct_plot_axis *a);
/* ct_plot_axis_linear for global steps: ticks at whole steps. */
void ct_plot_axis_steps(double lo, double hi, double pad, int target, ct_plot_axis *a);
/* A log axis over [lo, hi] (0 < lo <= hi). */
void ct_plot_axis_log(double lo, double hi, ct_plot_axis *a);
/* A tick's label: fixed point with the decimals the step needs, or scientific for very small or
 * large numbers ("3e-4", "1.5e6"); thousands on a step axis read "20k" when `thousands`. */
void ct_plot_format_tick(const ct_plot_axis *a, double v, bool thousands, char *buf, size_t cap);
/* A value in running text: 4 significant digits, compact exponent. */
void ct_plot_format_value(double v, char *buf, size_t cap);

#endif
