/* Uncertainty of metric values: closed forms, the percentile bootstrap, and exact samplers for it.
 *
 * Usage (inside a metric's `uncertainty` op, see ct_uncertainty_config in eval/metric.h):
 *   - a proportion k/n (accuracy):   ct_proportion_interval(k, n, cfg->confidence, &p, &se, &lo, &hi);
 *                                    ct_uncertainty_put(out, prefix, "accuracy", se, lo, hi);
 *   - a mean of n values with their sum and sum of squares (MAE, MSE per sample):
 *                                    ct_mean_interval(n, sum, sum_sq, cfg->confidence, &m, &se, &lo, &hi);
 *   - a statistic of a table of counts (a confusion matrix): resample the cells, O(resamples x cells):
 *         double *v = malloc(n_values * cfg->resamples * sizeof *v);
 *         ct_bootstrap_cells(cfg, cells, k, my_stat, ctx, scratch_bytes, n_values, v);
 *         ct_bootstrap_put(out, prefix, "f1_macro", v + j * cfg->resamples, cfg->resamples, cfg->confidence);
 *   - a statistic of kept per-sample records (AUROC): resample the samples, O(resamples x n):
 *         ct_bootstrap_samples(cfg, m->samples.n, my_stat, ctx, scratch_bytes, n_values, v);
 *     my_stat receives each sample's multiplicity in the resample (how many times it was drawn; the
 *     same law as drawing n indices with replacement), so sorted data can stay sorted.
 *   With cfg->resamples == 0, bootstrap-based metrics write no uncertainty keys; closed forms still do.
 *
 * Keys: "<prefix>_<name>_stderr", "<prefix>_<name>_ci_low", "<prefix>_<name>_ci_high" (JSON null
 * when not finite, as ct_metric_put).
 *
 * Randomness: resample b of a run draws from its own Philox stream, ct_bootstrap_stream(seed, b)
 * (key = seed, counter = (b, CT_RNG_BOOTSTRAP)), so the values do not depend on the number of threads
 * and the same data and seed give the same interval bit for bit.
 *
 * Rules (chosen here, documented once):
 *   - Percentile interval: lo and hi are the (1-confidence)/2 and (1+confidence)/2 quantiles of the
 *     bootstrap values with numpy's default rule ("linear", Hyndman-Fan type 7): sorted x[0..m-1],
 *     h = (m-1) q, Q = x[floor h] + (h - floor h) (x[floor h + 1] - x[floor h]).
 *   - Bootstrap standard error: the sample standard deviation (divisor m-1) of the bootstrap values.
 *   - Non-finite bootstrap values (a statistic undefined on a resample) are left out of both; with
 *     fewer than 2 finite values the standard error is NaN, with none the interval is NaN.
 *   - Mean: standard error s / sqrt(n) (s the sample standard deviation, divisor n-1), interval
 *     mean +- z se with the normal quantile z (not Student's t: evaluation sets are large, and the
 *     normal z keeps every closed form on one rule; for n = 30 t would widen it by 4%).
 *   - Proportion: standard error sqrt(p(1-p)/n) (the binomial one, as usually reported), interval
 *     Wilson's score interval: unlike p +- z se (Wald) it stays inside [0, 1], does not collapse to a
 *     point at p = 0 or 1 (an all-correct evaluation still gets an honest interval), and keeps close
 *     to its nominal coverage for small n (Brown, Cai & DasGupta 2001).
 *   - Weighted mean of per-row values (the loss, weights = tokens per row): rows are the sampled
 *     units, L = sum(w l) / sum(w) is a ratio estimator, and its standard error is the delta-method
 *     (linearisation) one, se^2 = n/(n-1) sum(w_i^2 (l_i - L)^2) / (sum w)^2 — what a bootstrap over
 *     rows converges to; with unit weights it is s / sqrt(n). ct_ratio_sums keeps the mergeable sums. */
#ifndef CT_UNCERTAINTY_H
#define CT_UNCERTAINTY_H

#include <jansson.h>
#include <stdint.h>

#include "core/rng.h"
#include "core/status.h"
#include "eval/metric.h"

/* The Philox purpose of bootstrap streams (between the well-known purposes of core/rng.h and
 * CT_RNG_USER). */
#define CT_RNG_BOOTSTRAP 50

/* --- closed forms ------------------------------------------------------------------------------- */

/* The standard normal quantile: z with P(Z <= z) = p, for p in (0, 1) (NaN outside), to double
 * precision (Newton on erfc). */
double ct_normal_quantile(double p);
/* z of a two-sided interval: ct_normal_quantile((1 + confidence) / 2); 1.959964 for 0.95. */
double ct_confidence_z(double confidence);

/* Mean of n values from their sum and sum of squares: mean, standard error s/sqrt(n) and the normal
 * interval. n = 0: all NaN; n = 1: se and interval NaN. The variance is clamped at 0 (rounding). */
void ct_mean_interval(double n, double sum, double sum_sq, double confidence, double *mean, double *se, double *lo,
                      double *hi);

/* Proportion k/n: p, se = sqrt(p(1-p)/n) and the Wilson score interval. n = 0: all NaN. */
void ct_proportion_interval(int64_t k, int64_t n, double confidence, double *p, double *se, double *lo, double *hi);

/* Mergeable sums for the ratio estimator of a weighted mean over rows (add field by field). */
typedef struct ct_ratio_sums {
    double n;                /* rows */
    double w, wl;            /* sum w_i, sum w_i l_i */
    double w2, w2l, w2l2;    /* sum w_i^2, sum w_i^2 l_i, sum w_i^2 l_i^2 */
} ct_ratio_sums;
static inline void ct_ratio_sums_add(ct_ratio_sums *s, double w, double l) {
    s->n += 1;
    s->w += w;
    s->wl += w * l;
    s->w2 += w * w;
    s->w2l += w * w * l;
    s->w2l2 += w * w * l * l;
}
/* The same from the row's weight and its total w l (a loss sum over its tokens): fine for w = 0. */
static inline void ct_ratio_sums_add_total(ct_ratio_sums *s, double w, double wl) {
    s->n += 1;
    s->w += w;
    s->wl += wl;
    s->w2 += w * w;
    s->w2l += w * wl;
    s->w2l2 += wl * wl;
}
/* L = wl / w, its delta-method standard error (see the top of this file) and the normal interval.
 * w = 0: all NaN; n < 2: se and interval NaN. */
void ct_ratio_interval(const ct_ratio_sums *s, double confidence, double *mean, double *se, double *lo, double *hi);

/* --- samplers ----------------------------------------------------------------------------------- */

/* The stream of resample b (0 <= b < 2^32) of a bootstrap seeded with seed. */
void ct_bootstrap_stream(ct_rng *r, uint64_t seed, int64_t b);

/* One Binomial(n, p) draw, exact: inversion (sequential search from 0, expected O(np) steps) when
 * min(p, 1-p) n < 10, otherwise Hormann's BTRS transformed rejection (1993; the sampler of TensorFlow
 * and of numpy's Generator for large n p), O(1) expected (about 1.15 trials per draw).
 * n >= 0, p in [0, 1]. */
int64_t ct_binomial(ct_rng *r, int64_t n, double p);

/* One multinomial draw of n over k cells with probabilities weights[i] / sum(weights) (int64
 * weights >= 0, sum > 0: the exact proportions of observed counts) into out[k], by conditional
 * binomials: out[i] ~ Binomial(n - out[0..i-1], weights[i] / sum(weights[i..k-1])). O(k) expected.
 * Cells of weight 0 get 0. */
void ct_multinomial(ct_rng *r, int64_t n, const int64_t *weights, int64_t k, int64_t *out);

/* Multiplicities of a resample of n items with replacement: n uniform indices counted into mult[n]. */
void ct_bootstrap_multiplicities(ct_rng *r, int64_t n, int64_t *mult);

/* --- the bootstrap ------------------------------------------------------------------------------ */

/* A statistic of a resampled table of counts, writing n_values values. Called from several threads
 * at once: ctx is shared (read only), scratch is the calling thread's scratch_bytes (may be NULL). */
typedef void (*ct_cells_stat_fn)(const int64_t *cells, int64_t k, const void *ctx, void *scratch, double *values);
/* cfg->resamples draws; draw b is a multinomial of sum(cells) over the k cells with the observed
 * proportions; stat's j-th value of draw b lands in values[j * resamples + b]. Runs on several
 * threads; CT_ERR_NOMEM when scratch cannot be had, CT_ERR_INVALID_ARG for an empty table. */
ct_status ct_bootstrap_cells(const ct_uncertainty_config *cfg, const int64_t *cells, int64_t k, ct_cells_stat_fn stat,
                             const void *ctx, size_t scratch_bytes, int n_values, double *values);

/* A statistic of n kept samples, each with its multiplicity in the resample (sum = n). */
typedef void (*ct_samples_stat_fn)(const int64_t *mult, int64_t n, const void *ctx, void *scratch, double *values);
/* As ct_bootstrap_cells, each draw being n samples drawn one by one with replacement. n >= 1. */
ct_status ct_bootstrap_samples(const ct_uncertainty_config *cfg, int64_t n, ct_samples_stat_fn stat, const void *ctx,
                               size_t scratch_bytes, int n_values, double *values);

/* The percentile interval of n bootstrap values (rule at the top of this file); values untouched. */
ct_status ct_bootstrap_interval(const double *values, int64_t n, double confidence, double *lo, double *hi);
/* The sample standard deviation of the finite values (NaN with fewer than 2). */
double ct_bootstrap_stderr(const double *values, int64_t n);

/* out["<prefix>_<name>_stderr" / "_ci_low" / "_ci_high"] = se, lo, hi (null when not finite). */
ct_status ct_uncertainty_put(json_t *out, const char *prefix, const char *name, double se, double lo, double hi);
/* ct_bootstrap_stderr + ct_bootstrap_interval + ct_uncertainty_put. */
ct_status ct_bootstrap_put(json_t *out, const char *prefix, const char *name, const double *values, int64_t n,
                           double confidence);

#endif
