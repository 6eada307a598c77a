/* Axes of the training curves (see plot_impl.h): ranges with a little room, ticks at "nice" values
 * (1, 2 or 5 times a power of ten, as a person would number an axis) and labels that carry exactly
 * the precision the tick spacing needs. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "report/plot_impl.h"

double ct_plot_nice_step(double lo, double hi, int target) {
    double range = hi - lo;
    if (!(range > 0)) range = fabs(hi) > 0 ? fabs(hi) : 1;
    if (target < 1) target = 1;
    double raw = range / target;
    double e = floor(log10(raw));
    double f = raw / pow(10, e);
    /* the smallest nice step at least as wide as raw, so there are at most `target` intervals */
    double nf = f <= 1 + 1e-9 ? 1 : f <= 2 + 1e-9 ? 2 : f <= 5 + 1e-9 ? 5 : 10;
    return nf * pow(10, e);
}

/* Ticks k * step inside [lo, hi]; k integer, so no rounding drift accumulates along the axis. */
static void fill_ticks(ct_plot_axis *a, double step) {
    a->step = step;
    a->n_ticks = 0;
    double k0 = ceil(a->lo / step - 1e-9), k1 = floor(a->hi / step + 1e-9);
    for (double k = k0; k <= k1 && a->n_ticks < CT_PLOT_MAX_TICKS; k++) {
        double t = k * step;
        if (fabs(t) < step * 1e-9) t = 0; /* no "-0" */
        a->ticks[a->n_ticks++] = t;
    }
}

void ct_plot_axis_linear(double lo, double hi, double pad, int target, ct_plot_axis *a) {
    memset(a, 0, sizeof *a);
    if (hi < lo) {
        double t = lo;
        lo = hi;
        hi = t;
    }
    if (hi - lo <= 1e-12 * fmax(fabs(lo), fabs(hi))) {
        /* one value (or several equal up to rounding): a range around it that still reads well */
        lo = hi = 0.5 * (lo + hi);
        double d = lo == 0 ? 1 : fabs(lo) * 0.1;
        lo -= d;
        hi += d;
    }
    double span = hi - lo;
    lo -= pad * span;
    hi += pad * span;
    a->lo = lo;
    a->hi = hi;
    fill_ticks(a, ct_plot_nice_step(lo, hi, target));
}

void ct_plot_axis_steps(double lo, double hi, double pad, int target, ct_plot_axis *a) {
    ct_plot_axis_linear(lo, hi, pad, target, a);
    if (a->step < 1) fill_ticks(a, 1);
}

void ct_plot_axis_log(double lo, double hi, ct_plot_axis *a) {
    memset(a, 0, sizeof *a);
    a->log = true;
    double l = log10(lo), h = log10(hi);
    if (h - l < 1e-9) {
        l -= 0.5;
        h += 0.5;
    }
    double pad = 0.04 * (h - l);
    a->lo = l - pad;
    a->hi = h + pad;
    double d0 = floor(a->lo), d1 = ceil(a->hi);
    double decades = a->hi - a->lo;
    /* short ranges get 2x and 5x between the powers of ten, long ones only every k-th decade */
    static const double MULT_FINE[] = {1, 2, 5};
    int n_mult = decades <= 2.5 ? 3 : 1;
    int every = decades > 8 ? (int)ceil(decades / 8) : 1;
    for (double d = d0; d <= d1 && a->n_ticks < CT_PLOT_MAX_TICKS; d++) {
        if (((long)(d - d0)) % every != 0) continue;
        for (int m = 0; m < n_mult; m++) {
            double v = MULT_FINE[m] * pow(10, d);
            double lv = log10(v);
            if (lv >= a->lo - 1e-9 && lv <= a->hi + 1e-9 && a->n_ticks < CT_PLOT_MAX_TICKS) a->ticks[a->n_ticks++] = v;
        }
    }
}

/* "2.5e-04" -> "2.5e-4", "1.50e+06" -> "1.5e6": trailing zeros of the mantissa and of the exponent go. */
static void compact_exponent(char *s) {
    char *e = strchr(s, 'e');
    if (!e) return;
    size_t len = strlen(s); /* the result is never longer */
    char exp[16];
    snprintf(exp, sizeof exp, "%s", e + 1);
    /* mantissa: drop trailing zeros and a bare point */
    char *m_end = e;
    if (memchr(s, '.', (size_t)(e - s))) {
        while (m_end > s && m_end[-1] == '0') m_end--;
        if (m_end > s && m_end[-1] == '.') m_end--;
    }
    const char *p = exp;
    bool neg = *p == '-';
    if (*p == '-' || *p == '+') p++;
    while (*p == '0' && p[1]) p++;
    snprintf(m_end, len + 1 - (size_t)(m_end - s), "e%s%s", neg ? "-" : "", p);
}

void ct_plot_format_value(double v, char *buf, size_t cap) {
    if (!isfinite(v)) {
        snprintf(buf, cap, "%s", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
        return;
    }
    snprintf(buf, cap, "%.4g", v);
    compact_exponent(buf);
}

void ct_plot_format_tick(const ct_plot_axis *a, double v, bool thousands, char *buf, size_t cap) {
    if (v == 0) {
        snprintf(buf, cap, "0");
        return;
    }
    if (a->log) {
        snprintf(buf, cap, "%.3g", v);
        compact_exponent(buf);
        return;
    }
    double step = a->step > 0 ? a->step : 1;
    double max_abs = fmax(fabs(a->lo), fabs(a->hi));
    int step_exp = (int)floor(log10(step) + 1e-9);
    if (thousands && step >= 1000 && max_abs >= 1e4) {
        int dec = step_exp - 3 >= 0 ? 0 : 3 - step_exp;
        snprintf(buf, cap, "%.*fk", dec, v / 1000);
        return;
    }
    if (max_abs >= 1e6 || step_exp < -4) {
        int e = (int)floor(log10(fabs(v)) + 1e-9);
        int dec = e - step_exp > 0 ? e - step_exp : 0;
        snprintf(buf, cap, "%.*e", dec, v);
        compact_exponent(buf);
        return;
    }
    snprintf(buf, cap, "%.*f", step_exp < 0 ? -step_exp : 0, v);
}
