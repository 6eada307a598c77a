/* The training curves' data (see plot_impl.h): a log history sorted into panels and series. Every
 * point is (global step, value), with the value's confidence interval where the entry has one;
 * entries without a step, and values that are not finite numbers, are left out. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/plot.h"
#include "report/plot_impl.h"

static ct_status push(ct_plot_data *d, ct_plot_series *s, double x, double y, double lo, double hi) {
    if (s->n == s->cap) {
        int64_t cap = s->cap ? 2 * s->cap : 64;
        double *nx = realloc(s->x, (size_t)cap * sizeof *nx);
        if (nx) s->x = nx;
        double *ny = nx ? realloc(s->y, (size_t)cap * sizeof *ny) : NULL;
        if (ny) s->y = ny;
        double *nl = ny ? realloc(s->lo, (size_t)cap * sizeof *nl) : NULL;
        if (nl) s->lo = nl;
        double *nh = nl ? realloc(s->hi, (size_t)cap * sizeof *nh) : NULL;
        if (nh) s->hi = nh;
        if (!nh) return ct_error(CT_ERR_NOMEM, "training curves: out of memory collecting '%s'", s->label);
        s->cap = cap;
    }
    s->x[s->n] = x;
    s->y[s->n] = y;
    s->lo[s->n] = lo;
    s->hi[s->n] = hi;
    s->n++;
    if (d->n_values == 0 || x < d->min_step) d->min_step = x;
    if (d->n_values == 0 || x > d->max_step) d->max_step = x;
    d->n_values++;
    return CT_OK;
}

/* The panel for key, created (empty) on first use; NULL when the figure is full. */
static ct_plot_panel *panel(ct_plot_data *d, const char *key, const char *title, const char *ylabel) {
    for (int i = 0; i < d->n_panels; i++)
        if (strcmp(d->panels[i].key, key) == 0) return &d->panels[i];
    if (d->n_panels == CT_PLOT_MAX_PANELS) {
        d->skipped++;
        return NULL;
    }
    ct_plot_panel *p = &d->panels[d->n_panels++];
    snprintf(p->key, sizeof p->key, "%s", key);
    snprintf(p->title, sizeof p->title, "%s", title);
    snprintf(p->ylabel, sizeof p->ylabel, "%s", ylabel);
    p->may_log_scale = strcmp(key, "loss") == 0;
    return p;
}

static ct_plot_series *series(ct_plot_panel *p, const char *label, int color, bool eval) {
    for (int i = 0; i < p->n_series; i++)
        if (strcmp(p->series[i].label, label) == 0) return &p->series[i];
    if (p->n_series == CT_PLOT_MAX_SERIES) return NULL;
    ct_plot_series *s = &p->series[p->n_series++];
    memset(s, 0, sizeof *s);
    snprintf(s->label, sizeof s->label, "%s", label);
    s->color = color;
    s->eval = eval;
    return s;
}

/* A training value (entry[key]) into its panel. */
static ct_status add_train(ct_plot_data *d, const json_t *e, double step, const char *key, const char *title,
                           const char *ylabel) {
    double v;
    if (!ct_log_number(e, key, &v)) return CT_OK;
    ct_plot_panel *p = panel(d, key, title, ylabel);
    ct_plot_series *s = p ? series(p, "train", 0, false) : NULL;
    return s ? push(d, s, step, v, NAN, NAN) : CT_OK;
}

static void eval_label(const ct_log_eval_sets *sets, int set, char *buf, size_t cap) {
    if (set < 0) snprintf(buf, cap, "eval");
    else snprintf(buf, cap, "eval: %s", sets->name[set]);
}

/* Each evaluation value of entry e whose metric is (want_loss ? "loss" : anything else). */
static ct_status add_eval(ct_plot_data *d, const ct_log_eval_sets *sets, const json_t *e, double step, bool want_loss) {
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)e, k, v) {
        int set;
        const char *metric;
        double y, lo = NAN, hi = NAN;
        if (!ct_log_eval_key(k, sets, &set, &metric) || (strcmp(metric, "loss") == 0) != want_loss) continue;
        if (!ct_log_number(e, k, &y)) continue;
        ct_log_interval(e, k, &lo, &hi);
        ct_plot_panel *p;
        if (want_loss) {
            p = panel(d, "loss", "Loss", "loss");
        } else {
            char title[96], ylabel[96];
            ct_log_display_name(metric, title, sizeof title);
            snprintf(ylabel, sizeof ylabel, "%s", metric);
            for (char *c = ylabel; *c; c++)
                if (*c == '_') *c = ' ';
            p = panel(d, metric, title, ylabel);
        }
        char label[96];
        eval_label(sets, set, label, sizeof label);
        ct_plot_series *s = p ? series(p, label, 1 + (set < 0 ? 0 : set), true) : NULL;
        if (s) CT_TRY(push(d, s, step, y, lo, hi));
    }
    return CT_OK;
}

static ct_status build(ct_plot_data *d, const json_t *history) {
    ct_log_eval_sets sets;
    ct_log_eval_sets_find(history, &sets);
    /* A pass per group, so the panels come in the order a reader looks at them: the loss, the
     * evaluation metrics, then the optimizer's side (learning rate, gradient norm), whichever of
     * them a run happened to log first. */
    for (int pass = 0; pass < 5; pass++) {
        size_t i;
        const json_t *e;
        json_array_foreach(history, i, e) {
            double step;
            if (!json_is_object(e) || !ct_log_number(e, "step", &step)) continue;
            if (pass == 0) {
                /* training first, so it leads the legend even after an evaluation at step 0 */
                CT_TRY(add_train(d, e, step, "loss", "Loss", "loss"));
            } else if (pass == 1) {
                CT_TRY(add_eval(d, &sets, e, step, true));
            } else if (pass == 2) {
                CT_TRY(add_eval(d, &sets, e, step, false));
            } else if (pass == 3) {
                CT_TRY(add_train(d, e, step, "learning_rate", "Learning rate", "learning rate"));
            } else {
                CT_TRY(add_train(d, e, step, "grad_norm", "Gradient norm", "grad norm"));
                double epoch;
                if (ct_log_number(e, "epoch", &epoch)) {
                    if (epoch > d->max_epoch) d->max_epoch = epoch;
                    /* epoch is fractional (batches done / batches per epoch), so the last entry
                     * with both gives the run's steps per epoch best */
                    if (epoch > 0 && step > 0) d->steps_per_epoch = step / epoch;
                }
            }
        }
    }
    return CT_OK;
}

ct_status ct_plot_data_build(const json_t *history, ct_plot_data **out) {
    if (!json_is_array(history)) return ct_error(CT_ERR_INVALID_ARG, "training curves: the log history must be a list");
    ct_plot_data *d = calloc(1, sizeof *d);
    if (!d) return ct_error(CT_ERR_NOMEM, "training curves: out of memory");
    ct_status s = build(d, history);
    if (s != CT_OK) {
        ct_plot_data_free(d);
        return s;
    }
    *out = d;
    return CT_OK;
}

void ct_plot_data_free(ct_plot_data *d) {
    if (!d) return;
    for (int i = 0; i < d->n_panels; i++)
        for (int j = 0; j < d->panels[i].n_series; j++) {
            ct_plot_series *s = &d->panels[i].series[j];
            free(s->x);
            free(s->y);
            free(s->lo);
            free(s->hi);
        }
    free(d);
}

int64_t ct_plot_count_values(const json_t *history) {
    ct_plot_data *d;
    if (ct_plot_data_build(history, &d) != CT_OK) return 0;
    int64_t n = d->n_values;
    ct_plot_data_free(d);
    return n;
}
