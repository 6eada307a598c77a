/* Uncertainty helpers (see uncertainty.h): the normal quantile and the closed forms, the exact
 * binomial and multinomial samplers the confusion-matrix bootstrap rests on, the two bootstrap
 * drivers (table cells, kept samples), and the percentile summary.
 *
 * The drivers give every resample its own Philox stream, so they split resamples over threads
 * freely: the values are the same for any number of threads. */
#include "eval/uncertainty.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* resamples x cells (or samples) above which a bootstrap runs on several threads. */
#define PARALLEL_MIN 4096

/* --- closed forms ------------------------------------------------------------------------------- */

/* z >= 0 with Q(z) = P(Z > z) = q, for q in (0, 0.5]. Newton on log Q, which is concave and
 * decreasing, so from any start the iterates reach the root's right side in one step and then
 * come back monotonically, quadratically at the end; working with log Q keeps the steps sensible
 * far in the tail, where Q itself is tiny. */
static double upper_quantile(double q) {
    const double log_q = log(q), inv_sqrt2 = 0.70710678118654752440, log_sqrt_2pi = 0.91893853320467274178;
    /* Start from Abramowitz & Stegun 26.2.23 (error < 4.5e-4), so Newton never leaves the range
     * where erfc is representable. */
    double t = sqrt(-2 * log_q);
    double z = t - (2.515517 + t * (0.802853 + t * 0.010328)) / (1 + t * (1.432788 + t * (0.189269 + t * 0.001308)));
    if (z < 0) z = 0;
    for (int it = 0; it < 200; it++) {
        double Q = 0.5 * erfc(z * inv_sqrt2);
        double log_phi = -0.5 * z * z - log_sqrt_2pi;
        /* g(z) = log Q - log q, g'(z) = -phi / Q */
        double step = (log(Q) - log_q) * Q / exp(log_phi);
        z += step;
        if (fabs(step) <= 1e-15 * (1 + fabs(z))) break;
    }
    return z;
}

double ct_normal_quantile(double p) {
    if (!(p > 0 && p < 1)) return NAN;
    if (p == 0.5) return 0;
    return p > 0.5 ? upper_quantile(1 - p) : -upper_quantile(p);
}

double ct_confidence_z(double confidence) { return ct_normal_quantile(0.5 + 0.5 * confidence); }

void ct_mean_interval(double n, double sum, double sum_sq, double confidence, double *mean, double *se, double *lo,
                      double *hi) {
    double m = n > 0 ? sum / n : NAN, s = NAN;
    if (n > 1) {
        double var = (sum_sq - sum * m) / (n - 1);
        /* rounding can make a zero variance slightly negative; NaN must stay NaN */
        s = sqrt((var < 0 ? 0 : var) / n);
    }
    double z = ct_confidence_z(confidence);
    *mean = m;
    *se = s;
    *lo = m - z * s;
    *hi = m + z * s;
}

void ct_proportion_interval(int64_t k, int64_t n, double confidence, double *p, double *se, double *lo, double *hi) {
    if (n <= 0) {
        *p = *se = *lo = *hi = NAN;
        return;
    }
    double nn = (double)n, pp = (double)k / nn, z = ct_confidence_z(confidence), z2 = z * z;
    double denom = 1 + z2 / nn;
    double center = (pp + z2 / (2 * nn)) / denom;
    double half = z * sqrt(pp * (1 - pp) / nn + z2 / (4 * nn * nn)) / denom;
    *p = pp;
    *se = sqrt(pp * (1 - pp) / nn);
    /* at k = 0 (k = n) the lower (upper) end is exactly 0 (1); rounding must not move it */
    *lo = k == 0 ? 0.0 : fmax(0.0, center - half);
    *hi = k == n ? 1.0 : fmin(1.0, center + half);
}

void ct_ratio_interval(const ct_ratio_sums *s, double confidence, double *mean, double *se, double *lo, double *hi) {
    double L = s->w != 0 ? s->wl / s->w : NAN, e = NAN;
    if (s->w != 0 && s->n > 1) {
        /* sum w_i^2 (l_i - L)^2, expanded into the mergeable sums */
        double ss = s->w2l2 - 2 * L * s->w2l + L * L * s->w2;
        e = sqrt(s->n / (s->n - 1) * (ss < 0 ? 0 : ss)) / fabs(s->w); /* NaN stays NaN */
    }
    double z = ct_confidence_z(confidence);
    *mean = L;
    *se = e;
    *lo = L - z * e;
    *hi = L + z * e;
}

/* --- samplers ----------------------------------------------------------------------------------- */

void ct_bootstrap_stream(ct_rng *r, uint64_t seed, int64_t b) {
    CT_ASSERT(b >= 0 && b <= (int64_t)UINT32_MAX);
    ct_rng_init(r, seed, (uint32_t)b, CT_RNG_BOOTSTRAP);
}

/* Sequential search from 0 through the pmf, f(x) = f(x-1) (n-x+1)/x p/q: expected np + 1 steps.
 * Only used for n p < 10, where f(0) = q^n >= e^-10.5 or so cannot underflow. A u left over by
 * rounding after the whole mass (the search runs past n, or the pmf underflows to 0 far in the
 * tail) starts over with a fresh u, which keeps the draw exact. */
static int64_t binomial_inversion(ct_rng *r, int64_t n, double p) {
    double q = 1 - p, s = p / q, a = (double)(n + 1) * s, f0 = exp((double)n * log1p(-p));
    for (;;) {
        double u = ct_rng_uniform(r), f = f0;
        int64_t x = 0;
        while (u > f) {
            u -= f;
            x++;
            f *= a / (double)x - s;
            if (x > n || f == 0) break;
        }
        if (u <= f && x <= n) return x;
    }
}

/* log(k!) - [(k + 1/2) log(k + 1) - (k + 1) + log(sqrt(2 pi))]: the Stirling remainder of k!,
 * from the series in z = k + 1 (error below 1e-17 from k = 10 on), exact values below that. */
static double stirling_tail(double k) {
    static const double small[10] = {0.0810614667953272,  0.0413406959554092,  0.0276779256849983,
                                     0.02079067210376509, 0.0166446911898211,  0.0138761288230707,
                                     0.0118967099458917,  0.0104112652619720,  0.00925546218271273,
                                     0.00833056343336287};
    if (k <= 9) return small[(int)k];
    double z = k + 1, z2 = z * z;
    return (1.0 / 12 - (1.0 / 360 - (1.0 / 1260 - 1.0 / (1680 * z2)) / z2) / z2) / z;
}

/* Hormann's BTRS (W. Hormann, "The generation of binomial random variates", J. Statist. Comput.
 * Simul. 46, 1993), for p <= 1/2 and n p >= 10: a transformed-rejection hat with a squeeze that
 * accepts most draws at once; the rest are accepted against log(f(k)/f(m)) (m the mode), written
 * with Stirling remainders so that no large log-factorials cancel. */
static int64_t binomial_btrs(ct_rng *g, int64_t n, double p) {
    double nn = (double)n, q = 1 - p, spq = sqrt(nn * p * q);
    double b = 1.15 + 2.53 * spq, a = -0.0873 + 0.0248 * b + 0.01 * p, c = nn * p + 0.5;
    double v_r = 0.92 - 4.2 / b, alpha = (2.83 + 5.1 / b) * spq, r = p / q;
    double m = floor((nn + 1) * p);
    double hm = stirling_tail(m) + stirling_tail(nn - m);
    for (;;) {
        double u = ct_rng_uniform(g) - 0.5, v = ct_rng_uniform(g);
        double us = 0.5 - fabs(u);
        double k = floor((2 * a / us + b) * u + c);
        if (k < 0 || k > nn) continue;
        if (us >= 0.07 && v <= v_r) return (int64_t)k;
        v = log(v * alpha / (a / (us * us) + b));
        /* log f(k) - log f(m) = (m + 1/2) log(m + 1) - (k + 1/2) log(k + 1) + (n - m + 1/2) log(n - m + 1)
         *   - (n - k + 1/2) log(n - k + 1) + (k - m) log r + tails, grouped as in TensorFlow's BTRS so
         * that the logs are of ratios near 1 rather than differences of large numbers. */
        double bound = (m + 0.5) * log((m + 1) / (r * (nn - m + 1))) + (nn + 1) * log((nn - m + 1) / (nn - k + 1)) +
                       (k + 0.5) * log(r * (nn - k + 1) / (k + 1)) + hm - stirling_tail(k) - stirling_tail(nn - k);
        if (v <= bound) return (int64_t)k;
    }
}

int64_t ct_binomial(ct_rng *r, int64_t n, double p) {
    CT_ASSERT(n >= 0 && p >= 0 && p <= 1);
    if (n == 0 || p == 0) return 0;
    if (p == 1) return n;
    bool flip = p > 0.5;
    double pp = flip ? 1 - p : p;
    int64_t x = pp * (double)n < 10 ? binomial_inversion(r, n, pp) : binomial_btrs(r, n, pp);
    return flip ? n - x : x;
}

void ct_multinomial(ct_rng *r, int64_t n, const int64_t *weights, int64_t k, int64_t *out) {
    CT_ASSERT(n >= 0 && k >= 1);
    int64_t rest_w = 0;
    for (int64_t i = 0; i < k; i++) {
        CT_ASSERT(weights[i] >= 0);
        rest_w += weights[i];
    }
    CT_ASSERT(rest_w > 0);
    int64_t rest_n = n;
    for (int64_t i = 0; i < k; i++) {
        int64_t w = weights[i], x;
        if (rest_n == 0 || w == 0)
            x = 0;
        else if (w == rest_w)
            x = rest_n; /* the last cell with mass takes what is left */
        else
            x = ct_binomial(r, rest_n, (double)w / (double)rest_w);
        out[i] = x;
        rest_n -= x;
        rest_w -= w;
    }
}

void ct_bootstrap_multiplicities(ct_rng *r, int64_t n, int64_t *mult) {
    CT_ASSERT(n >= 1);
    memset(mult, 0, (size_t)n * sizeof *mult);
    for (int64_t i = 0; i < n; i++) mult[ct_rng_below(r, (uint64_t)n)]++;
}

/* --- the bootstrap drivers ---------------------------------------------------------------------- */

typedef struct driver {
    const ct_uncertainty_config *cfg;
    int64_t k;        /* cells, or samples */
    const int64_t *cells; /* NULL: resample samples */
    int64_t total;    /* sum of cells */
    ct_cells_stat_fn cell_stat;
    ct_samples_stat_fn sample_stat;
    const void *ctx;
    size_t scratch_bytes;
    int n_values;
    double *values;
} driver;

static ct_status run(const driver *d) {
    int64_t R = d->cfg->resamples;
    CT_ASSERT(d->n_values >= 1 && d->values);
    if (R < 0 || R > (int64_t)UINT32_MAX + 1)
        return ct_error(CT_ERR_INVALID_ARG, "bootstrap: resamples = %lld; expected 0 to 2^32", (long long)R);
    bool failed = false;
#pragma omp parallel if (R * d->k > PARALLEL_MIN)
    {
        /* Per thread, once: the resampled table, the statistic's values, its scratch. */
        int64_t *draw = malloc((size_t)d->k * sizeof *draw);
        double *vals = malloc((size_t)d->n_values * sizeof *vals);
        void *scratch = d->scratch_bytes ? malloc(d->scratch_bytes) : NULL;
        bool ok = draw && vals && (!d->scratch_bytes || scratch);
        if (!ok) {
#pragma omp atomic write
            failed = true;
        }
#pragma omp for schedule(static)
        for (int64_t b = 0; b < R; b++) {
            if (!ok) continue;
            ct_rng rng;
            ct_bootstrap_stream(&rng, d->cfg->seed, b);
            if (d->cells) {
                ct_multinomial(&rng, d->total, d->cells, d->k, draw);
                d->cell_stat(draw, d->k, d->ctx, scratch, vals);
            } else {
                ct_bootstrap_multiplicities(&rng, d->k, draw);
                d->sample_stat(draw, d->k, d->ctx, scratch, vals);
            }
            for (int j = 0; j < d->n_values; j++) d->values[(int64_t)j * R + b] = vals[j];
        }
        free(draw);
        free(vals);
        free(scratch);
    }
    if (failed) return ct_error(CT_ERR_NOMEM, "bootstrap: out of memory for the per-thread buffers");
    return CT_OK;
}

ct_status ct_bootstrap_cells(const ct_uncertainty_config *cfg, const int64_t *cells, int64_t k, ct_cells_stat_fn stat,
                             const void *ctx, size_t scratch_bytes, int n_values, double *values) {
    CT_ASSERT(cfg && cells && stat && k >= 1);
    int64_t total = 0;
    for (int64_t i = 0; i < k; i++) {
        if (cells[i] < 0)
            return ct_error(CT_ERR_INVALID_ARG, "bootstrap: cell %lld holds %lld; counts must be >= 0", (long long)i,
                            (long long)cells[i]);
        total += cells[i];
    }
    if (total == 0) return ct_error(CT_ERR_INVALID_ARG, "bootstrap: the table of %lld cells is empty", (long long)k);
    driver d = {.cfg = cfg, .k = k, .cells = cells, .total = total, .cell_stat = stat, .ctx = ctx,
                .scratch_bytes = scratch_bytes, .n_values = n_values, .values = values};
    return run(&d);
}

ct_status ct_bootstrap_samples(const ct_uncertainty_config *cfg, int64_t n, ct_samples_stat_fn stat, const void *ctx,
                               size_t scratch_bytes, int n_values, double *values) {
    CT_ASSERT(cfg && stat);
    if (n < 1) return ct_error(CT_ERR_INVALID_ARG, "bootstrap: no samples to resample");
    driver d = {.cfg = cfg, .k = n, .sample_stat = stat, .ctx = ctx, .scratch_bytes = scratch_bytes,
                .n_values = n_values, .values = values};
    return run(&d);
}

/* --- summaries ---------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* numpy's "linear" quantile of sorted x[0..m-1]. */
static double quantile_sorted(const double *x, int64_t m, double q) {
    double h = (double)(m - 1) * q, f = floor(h);
    int64_t i = (int64_t)f;
    if (i >= m - 1) return x[m - 1];
    return x[i] + (h - f) * (x[i + 1] - x[i]);
}

ct_status ct_bootstrap_interval(const double *values, int64_t n, double confidence, double *lo, double *hi) {
    CT_ASSERT(n >= 0 && lo && hi);
    *lo = *hi = NAN;
    if (!(confidence > 0 && confidence < 1))
        return ct_error(CT_ERR_INVALID_ARG, "bootstrap interval: confidence = %g; expected a number in (0, 1)",
                        confidence);
    double *x = malloc((size_t)(n ? n : 1) * sizeof *x);
    if (!x) return ct_error(CT_ERR_NOMEM, "bootstrap interval: out of memory for %lld values", (long long)n);
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(values[i])) x[m++] = values[i];
    if (m > 0) {
        qsort(x, (size_t)m, sizeof *x, cmp_double);
        double tail = 0.5 * (1 - confidence);
        *lo = quantile_sorted(x, m, tail);
        *hi = quantile_sorted(x, m, 1 - tail);
    }
    free(x);
    return CT_OK;
}

/* Two passes (mean, then squared deviations): no cancellation when the spread is small. */
double ct_bootstrap_stderr(const double *values, int64_t n) {
    /* Deviations are taken from the first finite value, not only from the mean: resamples that all
     * agree (one sequence, every token right) then give exactly 0 rather than the rounding of their
     * sum, and a spread small beside the values' magnitude keeps its digits. */
    double shift = NAN, sum = 0;
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(values[i])) {
            if (m == 0) shift = values[i];
            sum += values[i] - shift;
            m++;
        }
    if (m < 2) return NAN;
    double mean = sum / (double)m, ss = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(values[i])) {
            double d = values[i] - shift - mean;
            ss += d * d;
        }
    return sqrt(ss / (double)(m - 1));
}

ct_status ct_uncertainty_put(json_t *out, const char *prefix, const char *name, double se, double lo, double hi) {
    char key[256];
    static const char *const suffix[3] = {"stderr", "ci_low", "ci_high"};
    double v[3] = {se, lo, hi};
    for (int i = 0; i < 3; i++) {
        int len = snprintf(key, sizeof key, "%s_%s", name, suffix[i]);
        if (len < 0 || (size_t)len >= sizeof key)
            return ct_error(CT_ERR_INVALID_ARG, "metric key '%s_%s' is too long", name, suffix[i]);
        CT_TRY(ct_metric_put(out, prefix, key, v[i]));
    }
    return CT_OK;
}

ct_status ct_bootstrap_put(json_t *out, const char *prefix, const char *name, const double *values, int64_t n,
                           double confidence) {
    double lo, hi;
    CT_TRY(ct_bootstrap_interval(values, n, confidence, &lo, &hi));
    return ct_uncertainty_put(out, prefix, name, ct_bootstrap_stderr(values, n), lo, hi);
}
