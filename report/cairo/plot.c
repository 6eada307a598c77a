/* Drawing the training curves (see plot.h) with cairo: one figure, drawn once per output surface
 * (an image surface written as PNG, an SVG surface), so both files show the same picture.
 *
 * Layout: a header (title and a line on the run's length), then the panels in a grid of two columns
 * (one when there is a single panel). Each panel has its title and legend above the plot area, tick
 * labels and axis names around it, grid lines at the ticks, epoch ends as dashed lines, confidence
 * bands under the lines, and markers on evaluation points while they are few enough to tell apart.
 * All panels share one step axis, so a change in one can be read against the others. Built with
 * cairo only (CTRAINER_PLOT, cmake/CtrainerPlot.cmake; plot_off.c stands in without it). */
#include <cairo-svg.h>
#include <cairo.h>
#include <errno.h>
#include <fontconfig/fontconfig.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "report/plot.h"
#include "report/plot_impl.h"

#if !CAIRO_HAS_PNG_FUNCTIONS || !CAIRO_HAS_SVG_SURFACE
#error "the training curves need cairo built with PNG and SVG support"
#endif

/* Whether this process has drawn text: cairo and fontconfig then hold font caches until the end. */
static bool fonts_loaded;

/* --- look --------------------------------------------------------------------------------------- */

typedef struct rgb {
    double r, g, b;
} rgb;

#define HEX(h) {((h) >> 16 & 255) / 255.0, ((h) >> 8 & 255) / 255.0, ((h) & 255) / 255.0}

/* Training in blue, evaluation sets in the next colours (matplotlib's "tab10", which people know). */
static const rgb PALETTE[] = {HEX(0x1f77b4), HEX(0xff7f0e), HEX(0x2ca02c), HEX(0xd62728), HEX(0x9467bd),
                              HEX(0x8c564b), HEX(0xe377c2), HEX(0x7f7f7f), HEX(0xbcbd22), HEX(0x17becf)};
static const rgb INK = HEX(0x1d1d22), MUTED = HEX(0x5f6068), FAINT = HEX(0x8a8b94), GRID = HEX(0xe4e5ea),
                 MINOR_GRID = HEX(0xf0f1f4), FRAME = HEX(0xc4c6cf), AREA = HEX(0xfcfcfd), EPOCH = HEX(0xa9abb8),
                 WHITE = HEX(0xffffff);

#define FONT "sans-serif"
#define FIG_W 1280.0  /* two columns */
#define FIG_W1 720.0  /* one panel */
#define MARGIN 24.0
#define GAP_X 28.0
#define GAP_Y 18.0
#define HEADER_H 76.0
#define PANEL_H 330.0
#define MAX_MARKERS 80       /* evaluation series with more points are drawn as lines only */
#define MAX_TRAIN_MARKERS 24 /* and training series with more than this */

typedef struct fig {
    cairo_t *cr;
    double scale; /* device pixels per unit, for crisp 1-unit lines */
    const ct_plot_data *d;
    const ct_plot_options *o;
    ct_plot_axis x; /* shared by every panel */
} fig;

static rgb colour(int i) { return PALETTE[(i < 0 ? 0 : i) % (int)(sizeof PALETTE / sizeof PALETTE[0])]; }

static void set_rgb(cairo_t *cr, rgb c, double alpha) { cairo_set_source_rgba(cr, c.r, c.g, c.b, alpha); }

/* A coordinate on the device pixel grid's centre, so 1-unit lines stay one pixel wide and sharp. */
static double snap(const fig *f, double v) { return (floor(v * f->scale) + 0.5) / f->scale; }

static void font(cairo_t *cr, double size, bool bold) {
    fonts_loaded = true;
    cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL, bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
}

static double text_width(cairo_t *cr, const char *s, double size, bool bold) {
    font(cr, size, bold);
    cairo_text_extents_t e;
    cairo_text_extents(cr, s, &e);
    return e.x_advance;
}

/* Text with its baseline at y; align -1 left at x, 0 centred on x, 1 right at x. Returns its width. */
static double text(cairo_t *cr, double x, double y, const char *s, double size, bool bold, int align, rgb c) {
    double w = text_width(cr, s, size, bold);
    set_rgb(cr, c, 1);
    cairo_move_to(cr, align < 0 ? x : align == 0 ? x - w / 2 : x - w, y);
    cairo_show_text(cr, s);
    return w;
}

/* --- one panel ------------------------------------------------------------------------------------ */

typedef struct box {
    double x0, y0, x1, y1;
} box;

typedef struct panel_view {
    const ct_plot_panel *p;
    ct_plot_axis y;
    box area; /* the plot area */
    bool any_band;
} panel_view;

static double px(const fig *f, const panel_view *v, double x) {
    return v->area.x0 + (x - f->x.lo) / (f->x.hi - f->x.lo) * (v->area.x1 - v->area.x0);
}

/* NaN for values a log axis cannot show. */
static double py(const panel_view *v, double y) {
    double t = y;
    if (v->y.log) t = y > 0 ? log10(y) : NAN;
    return v->area.y1 - (t - v->y.lo) / (v->y.hi - v->y.lo) * (v->area.y1 - v->area.y0);
}

/* The y axis: every value and interval end of the panel; a log scale for the loss when it spans
 * more than a decade (a loss falling from 2.3 to 0.02 is a straight story there, a cliff otherwise). */
static void choose_y(panel_view *v) {
    double lo = INFINITY, hi = -INFINITY, min_pos = INFINITY;
    for (int i = 0; i < v->p->n_series; i++) {
        const ct_plot_series *s = &v->p->series[i];
        for (int64_t j = 0; j < s->n; j++) {
            double vals[3] = {s->y[j], s->lo[j], s->hi[j]};
            for (int k = 0; k < 3; k++) {
                if (!isfinite(vals[k])) continue;
                lo = fmin(lo, vals[k]);
                hi = fmax(hi, vals[k]);
                if (vals[k] > 0) min_pos = fmin(min_pos, vals[k]);
            }
            if (isfinite(s->lo[j]) && isfinite(s->hi[j])) v->any_band = true;
        }
    }
    /* only the values themselves decide on the log scale; an interval reaching below 0 is clipped */
    double vmin = INFINITY, vmax = -INFINITY;
    for (int i = 0; i < v->p->n_series; i++)
        for (int64_t j = 0; j < v->p->series[i].n; j++) {
            vmin = fmin(vmin, v->p->series[i].y[j]);
            vmax = fmax(vmax, v->p->series[i].y[j]);
        }
    if (v->p->may_log_scale && vmin > 0 && vmax / vmin > 10) {
        ct_plot_axis_log(fmax(min_pos, vmin / 10), hi, &v->y);
        return;
    }
    ct_plot_axis_linear(lo, hi, 0.06, 6, &v->y);
}

typedef struct legend_item {
    const char *label;
    rgb c;
    int kind; /* 0 line, 1 line with a marker, 2 band */
    double w;
} legend_item;

static int legend_items(const fig *f, const panel_view *v, legend_item *items) {
    int n = 0;
    for (int i = 0; i < v->p->n_series; i++) {
        const ct_plot_series *s = &v->p->series[i];
        bool markers = (s->eval && s->n <= MAX_MARKERS) || s->n <= MAX_TRAIN_MARKERS;
        items[n++] = (legend_item){s->label, colour(s->color), markers ? 1 : 0, 0};
    }
    if (v->any_band) items[n++] = (legend_item){"confidence interval", FAINT, 2, 0};
    for (int i = 0; i < n; i++) items[i].w = 22 + text_width(f->cr, items[i].label, 12, false);
    return n;
}

static void legend_swatch(const fig *f, const legend_item *it, double x, double y) {
    cairo_t *cr = f->cr;
    if (it->kind == 2) {
        set_rgb(cr, it->c, 0.25);
        cairo_rectangle(cr, x, y - 5, 16, 10);
        cairo_fill(cr);
        return;
    }
    set_rgb(cr, it->c, 1);
    cairo_set_line_width(cr, 2.2);
    cairo_move_to(cr, x, y);
    cairo_line_to(cr, x + 16, y);
    cairo_stroke(cr);
    if (it->kind == 1) {
        cairo_arc(cr, x + 8, y, 3.4, 0, 2 * M_PI);
        cairo_fill_preserve(cr);
        set_rgb(cr, WHITE, 1);
        cairo_set_line_width(cr, 1.1);
        cairo_stroke(cr);
    }
}

/* Title and legend: the legend sits right of the title when it fits, else in rows under it.
 * Returns the height they take. */
static double draw_heading(const fig *f, const panel_view *v, box b, bool draw) {
    cairo_t *cr = f->cr;
    legend_item items[CT_PLOT_MAX_SERIES + 1];
    int n = legend_items(f, v, items);
    double title_w = text_width(cr, v->p->title, 15, true);
    double note_w = v->y.log ? 8 + text_width(cr, "log scale", 12, false) : 0;
    double legend_w = 0;
    for (int i = 0; i < n; i++) legend_w += items[i].w + (i ? 14 : 0);
    double avail = b.x1 - b.x0;
    double base = b.y0 + 18;
    if (draw) {
        text(cr, b.x0, base, v->p->title, 15, true, -1, INK);
        if (v->y.log) text(cr, b.x0 + title_w + 8, base, "log scale", 12, false, -1, FAINT);
    }
    double h = 28;
    if (title_w + note_w + 24 + legend_w <= avail) {
        /* one row, right-aligned */
        double x = b.x1 - legend_w;
        for (int i = 0; i < n && draw; i++) {
            legend_swatch(f, &items[i], x, base - 4);
            text(cr, x + 22, base, items[i].label, 12, false, -1, MUTED);
            x += items[i].w + 14;
        }
        return h;
    }
    double x = b.x0, y = base + 20;
    for (int i = 0; i < n; i++) {
        if (x > b.x0 && x + items[i].w > b.x1) {
            x = b.x0;
            y += 18;
        }
        if (draw) {
            legend_swatch(f, &items[i], x, y - 4);
            text(cr, x + 22, y, items[i].label, 12, false, -1, MUTED);
        }
        x += items[i].w + 14;
    }
    return y - b.y0 + 8;
}

static void draw_grid(const fig *f, const panel_view *v) {
    cairo_t *cr = f->cr;
    box a = v->area;
    cairo_set_line_width(cr, 1 / f->scale);
    if (v->y.log) {
        /* minor lines at 2..9 x each power of ten */
        set_rgb(cr, MINOR_GRID, 1);
        for (double d = floor(v->y.lo); d <= ceil(v->y.hi); d++)
            for (int m = 2; m <= 9; m++) {
                double t = d + log10(m);
                if (t <= v->y.lo || t >= v->y.hi) continue;
                double y = snap(f, py(v, pow(10, t)));
                cairo_move_to(cr, a.x0, y);
                cairo_line_to(cr, a.x1, y);
            }
        cairo_stroke(cr);
    }
    set_rgb(cr, GRID, 1);
    for (int i = 0; i < v->y.n_ticks; i++) {
        double y = snap(f, py(v, v->y.ticks[i]));
        cairo_move_to(cr, a.x0, y);
        cairo_line_to(cr, a.x1, y);
    }
    for (int i = 0; i < f->x.n_ticks; i++) {
        double x = snap(f, px(f, v, f->x.ticks[i]));
        cairo_move_to(cr, x, a.y0);
        cairo_line_to(cr, x, a.y1);
    }
    cairo_stroke(cr);
}

/* Epoch ends, from the run's steps per epoch; labelled above the plot area, at most about 8 labels. */
static void draw_epochs(const fig *f, const panel_view *v) {
    const ct_plot_data *d = f->d;
    if (f->o->no_epoch_markers || !(d->steps_per_epoch > 0) || d->max_epoch < 1) return;
    int n = (int)floor(d->max_epoch + 1e-9);
    if (n > 60) return; /* a wall of lines says nothing */
    cairo_t *cr = f->cr;
    int every = (n + 7) / 8;
    double dashes[] = {4, 3}, last_label_end = -INFINITY;
    for (int e = 1; e <= n; e++) {
        double step = e * d->steps_per_epoch;
        if (step > f->x.hi) break;
        double x = snap(f, px(f, v, step));
        set_rgb(cr, EPOCH, 1);
        cairo_set_line_width(cr, 1 / f->scale);
        cairo_set_dash(cr, dashes, 2, 0);
        cairo_move_to(cr, x, v->area.y0);
        cairo_line_to(cr, x, v->area.y1);
        cairo_stroke(cr);
        cairo_set_dash(cr, NULL, 0, 0);
        if (e % every == 0 || e == n) {
            char label[32];
            snprintf(label, sizeof label, "epoch %d", e);
            double w = text_width(cr, label, 10, false);
            double lx = fmin(x, v->area.x1 - w / 2); /* the last one may sit at the right edge */
            if (lx - w / 2 < last_label_end + 6) continue; /* the last one too close to the one before */
            text(cr, lx, v->area.y0 - 4, label, 10, false, 0, FAINT);
            last_label_end = lx + w / 2;
        }
    }
}

/* Confidence bands: a filled band over each run of consecutive points with an interval; a lone
 * point with an interval gets an error bar. */
static void draw_bands(const fig *f, const panel_view *v, const ct_plot_series *s) {
    cairo_t *cr = f->cr;
    rgb c = colour(s->color);
    double floor_y = v->y.log ? pow(10, v->y.lo) : -INFINITY; /* where a log axis ends */
    for (int64_t i = 0; i < s->n;) {
        if (!(isfinite(s->lo[i]) && isfinite(s->hi[i]))) {
            i++;
            continue;
        }
        int64_t j = i;
        while (j + 1 < s->n && isfinite(s->lo[j + 1]) && isfinite(s->hi[j + 1])) j++;
        if (j == i) {
            double x = px(f, v, s->x[i]), y0 = py(v, fmax(s->lo[i], floor_y)), y1 = py(v, s->hi[i]);
            set_rgb(cr, c, 0.55);
            cairo_set_line_width(cr, 1.4);
            cairo_move_to(cr, x, y0);
            cairo_line_to(cr, x, y1);
            cairo_move_to(cr, x - 4, y0);
            cairo_line_to(cr, x + 4, y0);
            cairo_move_to(cr, x - 4, y1);
            cairo_line_to(cr, x + 4, y1);
            cairo_stroke(cr);
        } else {
            set_rgb(cr, c, 0.14);
            cairo_move_to(cr, px(f, v, s->x[i]), py(v, s->hi[i]));
            for (int64_t k = i + 1; k <= j; k++) cairo_line_to(cr, px(f, v, s->x[k]), py(v, s->hi[k]));
            for (int64_t k = j; k >= i; k--) cairo_line_to(cr, px(f, v, s->x[k]), py(v, fmax(s->lo[k], floor_y)));
            cairo_close_path(cr);
            cairo_fill(cr);
            /* thin edges in the set's colour, so overlapping bands can still be told apart */
            set_rgb(cr, c, 0.45);
            cairo_set_line_width(cr, 0.8);
            cairo_move_to(cr, px(f, v, s->x[i]), py(v, s->hi[i]));
            for (int64_t k = i + 1; k <= j; k++) cairo_line_to(cr, px(f, v, s->x[k]), py(v, s->hi[k]));
            cairo_move_to(cr, px(f, v, s->x[i]), py(v, fmax(s->lo[i], floor_y)));
            for (int64_t k = i + 1; k <= j; k++) cairo_line_to(cr, px(f, v, s->x[k]), py(v, fmax(s->lo[k], floor_y)));
            cairo_stroke(cr);
        }
        i = j + 1;
    }
}

static void draw_series(const fig *f, const panel_view *v, const ct_plot_series *s) {
    cairo_t *cr = f->cr;
    rgb c = colour(s->color);
    set_rgb(cr, c, 1);
    cairo_set_line_width(cr, s->n > 400 ? 1.4 : 2);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
    bool pen_down = false;
    for (int64_t i = 0; i < s->n; i++) {
        double y = py(v, s->y[i]);
        if (!isfinite(y)) {
            pen_down = false;
            continue;
        }
        if (pen_down) cairo_line_to(cr, px(f, v, s->x[i]), y);
        else cairo_move_to(cr, px(f, v, s->x[i]), y);
        pen_down = true;
    }
    cairo_stroke(cr);
    /* markers show where the values are while there are few: evaluations, short runs */
    double r = s->eval && s->n <= MAX_MARKERS ? 3.6 : s->n <= MAX_TRAIN_MARKERS ? 2.6 : 0;
    if (s->n == 1) r = 4.2;
    if (r > 0) {
        for (int64_t i = 0; i < s->n; i++) {
            double y = py(v, s->y[i]);
            if (!isfinite(y)) continue;
            cairo_new_sub_path(cr);
            cairo_arc(cr, px(f, v, s->x[i]), y, r, 0, 2 * M_PI);
        }
        set_rgb(cr, c, 1);
        cairo_fill_preserve(cr);
        set_rgb(cr, WHITE, 1);
        cairo_set_line_width(cr, 1.2);
        cairo_stroke(cr);
    }
}

static void draw_axes(const fig *f, const panel_view *v) {
    cairo_t *cr = f->cr;
    box a = v->area;
    char label[64];
    for (int i = 0; i < v->y.n_ticks; i++) {
        ct_plot_format_tick(&v->y, v->y.ticks[i], false, label, sizeof label);
        text(cr, a.x0 - 7, py(v, v->y.ticks[i]) + 4, label, 11, false, 1, MUTED);
    }
    for (int i = 0; i < f->x.n_ticks; i++) {
        ct_plot_format_tick(&f->x, f->x.ticks[i], true, label, sizeof label);
        text(cr, px(f, v, f->x.ticks[i]), a.y1 + 16, label, 11, false, 0, MUTED);
    }
    text(cr, (a.x0 + a.x1) / 2, a.y1 + 34, "step", 12, false, 0, MUTED);
}

static double y_tick_width(const fig *f, const panel_view *v) {
    double w = 0;
    char label[64];
    for (int i = 0; i < v->y.n_ticks; i++) {
        ct_plot_format_tick(&v->y, v->y.ticks[i], false, label, sizeof label);
        w = fmax(w, text_width(f->cr, label, 11, false));
    }
    return w;
}

/* tick_w: the widest y tick label of the panel's column, so the plot areas of a column line up. */
static void draw_panel(const fig *f, const ct_plot_panel *p, box b, double tick_w) {
    cairo_t *cr = f->cr;
    panel_view v = {.p = p};
    choose_y(&v);
    double heading = draw_heading(f, &v, b, false);
    bool epochs = !f->o->no_epoch_markers && f->d->steps_per_epoch > 0 && f->d->max_epoch >= 1 &&
                  f->d->max_epoch <= 60;
    double ylabel_x = b.x0 + 6;
    v.area = (box){b.x0 + 22 + tick_w + 10, b.y0 + heading + (epochs ? 16 : 6), b.x1 - 8, b.y1 - 42};
    draw_heading(f, &v, b, true);

    set_rgb(cr, AREA, 1);
    cairo_rectangle(cr, v.area.x0, v.area.y0, v.area.x1 - v.area.x0, v.area.y1 - v.area.y0);
    cairo_fill(cr);
    draw_grid(f, &v);
    draw_epochs(f, &v);

    cairo_save(cr);
    cairo_rectangle(cr, v.area.x0, v.area.y0, v.area.x1 - v.area.x0, v.area.y1 - v.area.y0);
    cairo_clip(cr);
    for (int i = 0; i < p->n_series; i++) draw_bands(f, &v, &p->series[i]);
    for (int i = 0; i < p->n_series; i++) draw_series(f, &v, &p->series[i]);
    cairo_restore(cr);

    set_rgb(cr, FRAME, 1);
    cairo_set_line_width(cr, 1 / f->scale);
    cairo_rectangle(cr, snap(f, v.area.x0), snap(f, v.area.y0), snap(f, v.area.x1) - snap(f, v.area.x0),
                    snap(f, v.area.y1) - snap(f, v.area.y0));
    cairo_stroke(cr);
    draw_axes(f, &v);

    cairo_save(cr);
    cairo_translate(cr, ylabel_x + 10, (v.area.y0 + v.area.y1) / 2);
    cairo_rotate(cr, -M_PI / 2);
    text(cr, 0, 0, p->ylabel, 12, false, 0, MUTED);
    cairo_restore(cr);
}

/* --- the figure ------------------------------------------------------------------------------------ */

static int columns(const ct_plot_data *d) { return d->n_panels > 1 ? 2 : 1; }

static void fig_size(const ct_plot_data *d, double *w, double *h) {
    int rows = (d->n_panels + columns(d) - 1) / columns(d);
    *w = columns(d) == 2 ? FIG_W : FIG_W1;
    *h = HEADER_H + rows * PANEL_H + (rows - 1) * GAP_Y + MARGIN;
}

static void draw_figure(fig *f) {
    cairo_t *cr = f->cr;
    const ct_plot_data *d = f->d;
    double w, h;
    fig_size(d, &w, &h);
    set_rgb(cr, WHITE, 1);
    cairo_paint(cr);

    const char *title = f->o->title && f->o->title[0] ? f->o->title : "Training curves";
    text(cr, MARGIN, 38, title, 22, true, -1, INK);
    char sub[256], step[32], epoch[32];
    ct_plot_format_value(d->max_step, step, sizeof step);
    ct_plot_format_value(d->max_epoch, epoch, sizeof epoch);
    int n = snprintf(sub, sizeof sub, "up to global step %s", step);
    if (d->max_epoch > 0) n += snprintf(sub + n, sizeof sub - (size_t)n, " \xc2\xb7 epoch %s", epoch);
    if (d->skipped > 0)
        snprintf(sub + n, sizeof sub - (size_t)n, " \xc2\xb7 more metrics than fit: the first %d panels are shown",
                 CT_PLOT_MAX_PANELS);
    text(cr, MARGIN, 60, sub, 13, false, -1, MUTED);

    int cols = columns(d);
    double pw = (w - 2 * MARGIN - (cols - 1) * GAP_X) / cols;
    double tick_w[2] = {0, 0};
    for (int i = 0; i < d->n_panels; i++) {
        panel_view v = {.p = &d->panels[i]};
        choose_y(&v);
        tick_w[i % cols] = fmax(tick_w[i % cols], y_tick_width(f, &v));
    }
    for (int i = 0; i < d->n_panels; i++) {
        int r = i / cols, c = i % cols;
        double x0 = MARGIN + c * (pw + GAP_X), y0 = HEADER_H + r * (PANEL_H + GAP_Y);
        draw_panel(f, &d->panels[i], (box){x0, y0, x0 + pw, y0 + PANEL_H}, tick_w[c]);
    }
    (void)h;
}

/* --- files ----------------------------------------------------------------------------------------- */

static cairo_status_t write_fn(void *closure, const unsigned char *data, unsigned int len) {
    return fwrite(data, 1, len, closure) == len ? CAIRO_STATUS_SUCCESS : CAIRO_STATUS_WRITE_ERROR;
}

/* One image file being written: cairo writes to the stream of an atomic file (core/fs.h), so a
 * reader never sees half a figure and a failed write leaves the old one. */
typedef struct out_file {
    ct_atomic_file a; /* stays put while f is open: the stream points at it */
    FILE *f;
} out_file;

static ct_status open_out(out_file *o, const char *path) {
    ct_status s = ct_atomic_file_open(&o->a, path);
    if (s == CT_OK && !(o->f = ct_atomic_file_stream(&o->a))) {
        s = CT_ERR_IO; /* the message is set */
        ct_atomic_file_discard(&o->a);
    }
    return s == CT_OK ? CT_OK : ct_error_prefix(s, "training curves: ");
}

/* Commits when cairo succeeded; removes the temporary file otherwise. */
static ct_status close_out(out_file *o, cairo_status_t cs) {
    ct_status s;
    if (cs == CAIRO_STATUS_WRITE_ERROR) /* the stream's errno (the disk), kept by the atomic file */
        s = ct_error(CT_ERR_IO, "cannot write '%s': %s", o->a.path, strerror(o->a.err ? o->a.err : errno ? errno : EIO));
    else if (cs != CAIRO_STATUS_SUCCESS)
        s = ct_error(CT_ERR_IO, "cannot write '%s': %s", o->a.path, cairo_status_to_string(cs));
    else
        s = ct_atomic_file_commit(&o->a);
    if (s == CT_OK) return CT_OK;
    ct_atomic_file_discard(&o->a);
    return ct_error_prefix(s, "training curves: ");
}

static ct_status write_png(const ct_plot_data *d, const ct_plot_options *opts, const char *path) {
    double w, h, scale = opts->scale > 0 ? opts->scale : 1;
    fig_size(d, &w, &h);
    cairo_surface_t *surf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)ceil(w * scale), (int)ceil(h * scale));
    cairo_t *cr = cairo_create(surf);
    cairo_scale(cr, scale, scale);
    fig f = {.cr = cr, .scale = scale, .d = d, .o = opts};
    ct_plot_axis_steps(fmin(0, d->min_step), fmax(d->max_step, 1), 0.02, 8, &f.x);
    draw_figure(&f);
    cairo_status_t cs = cairo_status(cr);
    cairo_destroy(cr);
    ct_status s = CT_OK;
    if (cs != CAIRO_STATUS_SUCCESS) {
        cairo_surface_destroy(surf);
        return ct_error(CT_ERR_IO, "training curves: drawing '%s' failed: %s", path, cairo_status_to_string(cs));
    }
    out_file o;
    s = open_out(&o, path);
    if (s == CT_OK) {
        errno = 0;
        cs = cairo_surface_write_to_png_stream(surf, write_fn, o.f);
        s = close_out(&o, cs);
    }
    cairo_surface_destroy(surf);
    return s;
}

static ct_status write_svg(const ct_plot_data *d, const ct_plot_options *opts, const char *path) {
    double w, h;
    fig_size(d, &w, &h);
    out_file o;
    CT_TRY(open_out(&o, path));
    errno = 0;
    cairo_surface_t *surf = cairo_svg_surface_create_for_stream(write_fn, o.f, w, h);
    cairo_svg_surface_restrict_to_version(surf, CAIRO_SVG_VERSION_1_1);
    cairo_t *cr = cairo_create(surf);
    fig f = {.cr = cr, .scale = 1, .d = d, .o = opts};
    ct_plot_axis_steps(fmin(0, d->min_step), fmax(d->max_step, 1), 0.02, 8, &f.x);
    draw_figure(&f);
    cairo_status_t cs = cairo_status(cr);
    cairo_destroy(cr);
    cairo_surface_finish(surf); /* writes the document */
    if (cs == CAIRO_STATUS_SUCCESS) cs = cairo_surface_status(surf);
    cairo_surface_destroy(surf);
    return close_out(&o, cs);
}

const char *ct_plot_cairo_version(void) { return cairo_version_string(); }

ct_status ct_plot_training_curves(const json_t *history, const ct_plot_options *opts, const char *png_file,
                                  const char *svg_file) {
    ct_plot_options defaults = {0};
    if (!opts) opts = &defaults;
    ct_plot_data *d;
    CT_TRY(ct_plot_data_build(history, &d));
    ct_status s = CT_OK;
    if (d->n_values == 0)
        s = ct_error(CT_ERR_INVALID_ARG,
                     "training curves: nothing to plot: the log history (%zu entries) has no loss, learning_rate, grad_norm or "
                     "eval_* values with a step",
                     json_array_size(history));
    if (s == CT_OK && png_file) s = write_png(d, opts, png_file);
    if (s == CT_OK && svg_file) s = write_svg(d, opts, svg_file);
    ct_plot_data_free(d);
    return s;
}

void ct_plot_release_fonts(void) {
    if (!fonts_loaded) return;
    cairo_debug_reset_static_data();
    FcFini();
    fonts_loaded = false;
}
