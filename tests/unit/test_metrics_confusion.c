/* Confusion-matrix metrics and the uncertainty machinery.
 *
 * Samplers: the normal quantile against erfc; Binomial draws (both the inversion and the BTRS
 * paths, p above and below 1/2) by a chi-square goodness-of-fit test against the exact pmf, with a
 * threshold at p-value 1e-6 (Wilson-Hilferty), plus mean and variance; multinomial draws (totals,
 * zero cells, a cell's marginal, a covariance); multiplicities. Summaries: the type-7 quantile rule,
 * the standard error, NaN handling; closed forms (Wilson's interval checked by its defining score
 * equation, the ratio estimator against its direct formula and the mean's s/sqrt(n)).
 * Bootstrap drivers: reproducible with a seed, the same for 1 and 2 threads, another seed differs.
 *
 * Metrics against references computed here another way (per-sample loops, the covariance form of
 * MCC): random data with float32/float64 outputs and int32/int64 labels, masks, the merge property
 * (counts exact; blank states both ways), batch-size independence, edge cases (a class never
 * predicted / never present, all correct, all wrong, one sample, C = 1), a change of C, keys and
 * JSON. Uncertainty: keys present (lists for per_class), none with resamples = 0 or for the
 * confusion matrix, reproducible with a seed, and the cell bootstrap has the same distribution as
 * resampling the samples one by one (means, standard deviations, two-sample KS).
 *
 * `test_metrics_confusion --compute IN.h5` is the mode tests/oracle/test_metrics_confusion.py
 * drives: IN.h5 holds attribute "spec" (JSON: "metrics", "prefix", "batch_size", "ranks", optional
 * "uncertainty": {"resamples", "confidence", "seed"} and "dump_bootstrap": true) and datasets
 * outputs [N, C] (f32 or f64 as spec "dtype"), labels [N] int64, optional mask [N] u8 and optional
 * sample_loss / sample_weight [N] f64. Batches are dealt round-robin to `ranks` metric sets, which
 * are merged; the printed JSON object holds the values and uncertainty keys, and with
 * dump_bootstrap "__bootstrap__": {metric name: [values]} (ct_confusion_bootstrap_values).
 *
 * Why one file of over 600 lines: it tests one source file (eval/metrics_confusion.c and the
 * uncertainty code under it), and the references written here serve both its checks and the
 * --compute mode its oracle drives. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/format/h5io.h"
#include "core/rng.h"
#include "core/util.h"
#include "eval/metric.h"
#include "eval/uncertainty.h"
#include "metric_compute.h"
#include "testlib.h"

static ct_rng rng;

/* --- samplers ----------------------------------------------------------------------------------- */

static double normal_cdf(double z) { return 0.5 * erfc(-z / sqrt(2.0)); }

static void test_normal_quantile(void) {
    CHECK_NEAR(ct_normal_quantile(0.975), 1.959963984540054, 1e-15);
    CHECK_NEAR(ct_confidence_z(0.95), 1.959963984540054, 1e-15);
    CHECK_NEAR(ct_confidence_z(0.99), 2.5758293035489004, 1e-15);
    CHECK(ct_normal_quantile(0.5) == 0 && isnan(ct_normal_quantile(0)) && isnan(ct_normal_quantile(1)),
          "quantile at 0.5, 0, 1");
    for (int i = 0; i < 200; i++) {
        double p = i < 100 ? ct_rng_uniform(&rng) : pow(10, -1 - 14 * ct_rng_uniform(&rng));
        if (p == 0) continue;
        double z = ct_normal_quantile(p);
        CHECK_NEAR(p < 0.5 ? normal_cdf(z) : 1 - normal_cdf(-z), p, 1e-12);
        double pp = 1 - p, q = 1 - pp; /* 1 - p rounds; q is its exact complement (Sterbenz) */
        CHECK_NEAR(ct_normal_quantile(pp), -ct_normal_quantile(q), 1e-12);
    }
}

/* chi-square quantile at upper tail 1e-6 (Wilson-Hilferty: accurate to a few % for df >= 1). */
static double chi2_bound(int df) {
    double z = ct_normal_quantile(1 - 1e-6), a = 2.0 / (9.0 * df);
    return df * pow(1 - a + z * sqrt(a), 3);
}

/* Chi-square of observed counts obs[0..n] of Binomial(n, p) draws (total m) against the exact pmf,
 * bins pooled from both tails until each expects >= 5. Returns the statistic; *df the degrees. */
static double binomial_chi2(const int64_t *obs, int64_t n, double p, int64_t m, int *df) {
    double *pmf = malloc((size_t)(n + 1) * sizeof *pmf);
    for (int64_t k = 0; k <= n; k++)
        pmf[k] = exp(lgamma((double)n + 1) - lgamma((double)k + 1) - lgamma((double)(n - k) + 1) +
                     (double)k * log(p) + (double)(n - k) * log1p(-p));
    /* bins: consecutive k pooled until each expects >= 5; a short tail joins the last bin */
    double *be = malloc((size_t)(n + 1) * sizeof *be), *bo = malloc((size_t)(n + 1) * sizeof *bo);
    double e = 0, o = 0;
    int bins = 0;
    for (int64_t k = 0; k <= n; k++) {
        e += pmf[k] * (double)m;
        o += (double)obs[k];
        if (e >= 5) {
            be[bins] = e;
            bo[bins++] = o;
            e = o = 0;
        }
    }
    if (bins == 0) {
        be[bins] = e;
        bo[bins++] = o;
    } else {
        be[bins - 1] += e;
        bo[bins - 1] += o;
    }
    double stat = 0;
    for (int i = 0; i < bins; i++) stat += (bo[i] - be[i]) * (bo[i] - be[i]) / be[i];
    free(be);
    free(bo);
    free(pmf);
    *df = bins - 1;
    return stat;
}

static void test_binomial(void) {
    /* (n, p): inversion (n p < 10), BTRS (n p >= 10), flipped (p > 1/2), boundary of the switch */
    static const struct { int64_t n; double p; } cases[] = {
        {1, 0.3},    {7, 0.5},       {40, 0.05},   {200, 0.049}, {200, 0.05}, {1000, 0.3}, {25, 0.9},
        {5000, 0.002}, {100000, 0.4}, {60, 0.75},  {20, 0.5},    {11, 0.95},  {100, 0.1},  {3000, 0.997}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t n = cases[c].n, m = 1000000;
        double p = cases[c].p;
        int64_t *obs = calloc((size_t)n + 1, sizeof *obs);
        double sum = 0, sq = 0;
        bool in_range = true;
        for (int64_t i = 0; i < m; i++) {
            int64_t x = ct_binomial(&rng, n, p);
            in_range &= x >= 0 && x <= n;
            if (x < 0 || x > n) continue;
            obs[x]++;
            sum += (double)x;
            sq += (double)x * (double)x;
        }
        CHECK(in_range, "binomial(%lld, %g): draw out of range", (long long)n, p);
        int df;
        double chi2 = binomial_chi2(obs, n, p, m, &df);
        CHECK(df < 1 || chi2 < chi2_bound(df), "binomial(%lld, %g): chi-square %.1f with %d df (bound %.1f)",
              (long long)n, p, chi2, df, chi2_bound(df));
        double mean = sum / (double)m, var = sq / (double)m - mean * mean, np = (double)n * p, npq = np * (1 - p);
        CHECK(fabs(mean - np) < 6 * sqrt(npq / (double)m) + 1e-12, "binomial(%lld, %g): mean %.6f vs %.6f",
              (long long)n, p, mean, np);
        CHECK(fabs(var / npq - 1) < 6 * sqrt(2.0 / (double)m) + 0.01 / npq, "binomial(%lld, %g): variance %.6f vs %.6f",
              (long long)n, p, var, npq);
        free(obs);
    }
    CHECK(ct_binomial(&rng, 0, 0.3) == 0 && ct_binomial(&rng, 9, 0) == 0 && ct_binomial(&rng, 9, 1) == 9,
          "binomial boundaries");
}

static void test_multinomial(void) {
    int64_t w[7] = {5, 0, 120, 1, 0, 33, 841}, k = 7, W = 1000, n = 1000 + (int64_t)ct_rng_below(&rng, 5000);
    int64_t draws = 50000, *out = malloc((size_t)k * sizeof *out);
    int64_t *marg = calloc((size_t)n + 1, sizeof *marg);
    double s2 = 0, s6 = 0, s26 = 0;
    bool totals = true, zeros = true;
    for (int64_t d = 0; d < draws; d++) {
        ct_multinomial(&rng, n, w, k, out);
        int64_t t = 0;
        for (int64_t i = 0; i < k; i++) t += out[i];
        totals &= t == n;
        zeros &= out[1] == 0 && out[4] == 0;
        marg[out[3]]++; /* a small cell: Binomial(n, 1/1000) */
        s2 += (double)out[2];
        s6 += (double)out[6];
        s26 += (double)out[2] * (double)out[6];
    }
    CHECK(totals, "multinomial: every draw sums to n");
    CHECK(zeros, "multinomial: cells of weight 0 stay 0");
    int df;
    double chi2 = binomial_chi2(marg, n, 1.0 / (double)W, draws, &df);
    CHECK(chi2 < chi2_bound(df), "multinomial marginal: chi-square %.1f with %d df", chi2, df);
    /* cov(X2, X6) = -n p2 p6; the estimate's standard error is about n sqrt(p2 p6 (1 - ...)) / sqrt(draws) */
    double p2 = 0.12, p6 = 0.841, cov = s26 / (double)draws - (s2 / (double)draws) * (s6 / (double)draws);
    double want = -(double)n * p2 * p6, sd = (double)n * sqrt(p2 * p6 * (p2 + p6)) / sqrt((double)draws) * 2;
    CHECK(fabs(cov - want) < 6 * sd, "multinomial covariance %.3f vs %.3f (sd %.3f)", cov, want, sd);
    int64_t one[1] = {3};
    ct_multinomial(&rng, 17, one, 1, out);
    CHECK(out[0] == 17, "one cell takes everything");
    int64_t mult[50];
    ct_bootstrap_multiplicities(&rng, 50, mult);
    int64_t t = 0;
    for (int i = 0; i < 50; i++) t += mult[i];
    CHECK(t == 50, "multiplicities sum to n");
    free(out);
    free(marg);
}

/* --- summaries and closed forms ----------------------------------------------------------------- */

static void test_summaries(void) {
    double v[5] = {4, 1, NAN, 3, 2}, lo, hi;
    CHECK_OK(ct_bootstrap_interval(v, 5, 0.5, &lo, &hi)); /* finite {1,2,3,4}: q .25 -> 1.75, .75 -> 3.25 */
    CHECK(lo == 1.75 && hi == 3.25, "type-7 quantiles: %g %g", lo, hi);
    CHECK_NEAR(ct_bootstrap_stderr(v, 5), sqrt(5.0 / 3.0), 1e-15);
    double one[1] = {7};
    CHECK_OK(ct_bootstrap_interval(one, 1, 0.95, &lo, &hi));
    CHECK(lo == 7 && hi == 7 && isnan(ct_bootstrap_stderr(one, 1)), "one value");
    /* Resamples that all agree (one sequence drawn each time) spread by exactly nothing, whatever
     * the rounding of their sum; and a spread far below the values' magnitude keeps its digits. */
    double same[301], near[301];
    for (int i = 0; i < 301; i++) {
        same[i] = 5.3042258090669554;
        near[i] = 1e15 + (i % 2 ? 0.25 : -0.25); /* exact: 1e15's ulp is 0.125 */
    }
    CHECK(ct_bootstrap_stderr(same, 301) == 0, "equal values: stderr %.17g", ct_bootstrap_stderr(same, 301));
    near[300] = 1e15; /* 300 deviations of 0.25 and one of 0: variance 300 * 0.0625 / 300 */
    CHECK_NEAR(ct_bootstrap_stderr(near, 301), 0.25, 1e-15);
    double none[2] = {NAN, INFINITY};
    CHECK_OK(ct_bootstrap_interval(none, 2, 0.95, &lo, &hi));
    CHECK(isnan(lo) && isnan(hi), "no finite value: NaN interval");
    CHECK_ERR(ct_bootstrap_interval(v, 5, 1.0, &lo, &hi), CT_ERR_INVALID_ARG, "confidence = 1");
    /* random: 1001 values, q = 0.025 -> h = 25 exactly */
    double *r = malloc(1001 * sizeof *r), *sorted = malloc(1001 * sizeof *sorted);
    for (int i = 0; i < 1001; i++) sorted[i] = r[i] = ct_rng_normal(&rng);
    for (int i = 1; i < 1001; i++) /* insertion sort: a different path from qsort */
        for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
            double t = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = t;
        }
    CHECK_OK(ct_bootstrap_interval(r, 1001, 0.95, &lo, &hi));
    /* (1 - 0.95) / 2 is 0.025 plus rounding, so h is 25 + 2e-14: interpolation within 1e-12 */
    CHECK(fabs(lo - sorted[25]) <= 1e-12 * (sorted[26] - sorted[25] + 1) && fabs(hi - sorted[975]) <= 1e-12 * (sorted[976] - sorted[975] + 1),
          "q 0.025 / 0.975 of 1001 values: %.17g %.17g vs %.17g %.17g", lo, hi, sorted[25], sorted[975]);
    free(r);
    free(sorted);

    /* Wilson: the endpoints solve |k/n - p0| = z sqrt(p0 (1 - p0) / n) */
    for (int t = 0; t < 50; t++) {
        int64_t n = 1 + (int64_t)ct_rng_below(&rng, t < 25 ? 30 : 100000), k = (int64_t)ct_rng_below(&rng, (uint64_t)n + 1);
        double conf = 0.5 + 0.49 * ct_rng_uniform(&rng), p, se, lo2, hi2, z = ct_confidence_z(conf);
        if (t == 0) k = 0;
        if (t == 1) k = n;
        ct_proportion_interval(k, n, conf, &p, &se, &lo2, &hi2);
        double ph = (double)k / (double)n;
        CHECK(p == ph && se == sqrt(ph * (1 - ph) / (double)n), "proportion value and stderr");
        CHECK(lo2 >= 0 && hi2 <= 1 && lo2 <= ph && ph <= hi2, "Wilson interval [%g, %g] holds %g", lo2, hi2, ph);
        for (int e = 0; e < 2; e++) {
            double p0 = e ? hi2 : lo2;
            if ((e == 0 && k == 0) || (e == 1 && k == n)) {
                CHECK(p0 == (double)e, "Wilson endpoint at the boundary: %g", p0);
                continue;
            }
            CHECK_NEAR(fabs(ph - p0), z * sqrt(p0 * (1 - p0) / (double)n), 1e-9);
        }
    }
    double p, se, a, b;
    ct_proportion_interval(0, 0, 0.95, &p, &se, &a, &b);
    CHECK(isnan(p) && isnan(se) && isnan(a) && isnan(b), "proportion of nothing");

    /* mean and ratio */
    int64_t n = 2 + (int64_t)ct_rng_below(&rng, 500);
    double sum = 0, sq = 0, mean, lo3, hi3;
    double *x = malloc((size_t)n * sizeof *x), *w = malloc((size_t)n * sizeof *w);
    ct_ratio_sums unit = {0}, rs = {0};
    double sw = 0, swx = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = 2 + ct_rng_normal(&rng);
        w[i] = (double)ct_rng_below(&rng, 6); /* includes zero-weight rows */
        sum += x[i];
        sq += x[i] * x[i];
        ct_ratio_sums_add(&unit, 1, x[i]);
        ct_ratio_sums_add_total(&rs, w[i], w[i] * x[i]);
        sw += w[i];
        swx += w[i] * x[i];
    }
    ct_mean_interval((double)n, sum, sq, 0.9, &mean, &se, &lo3, &hi3);
    double m = sum / (double)n, ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (x[i] - m) * (x[i] - m);
    CHECK_NEAR(se, sqrt(ss / (double)(n - 1) / (double)n), 1e-10);
    CHECK_NEAR(hi3 - mean, ct_confidence_z(0.9) * se, 1e-12);
    double rm, rse, rlo, rhi;
    ct_ratio_interval(&unit, 0.9, &rm, &rse, &rlo, &rhi);
    CHECK_NEAR(rse, se, 1e-9);
    CHECK_NEAR(rm, mean, 1e-13);
    if (sw > 0) {
        double L = swx / sw, d = 0;
        for (int64_t i = 0; i < n; i++) d += w[i] * w[i] * (x[i] - L) * (x[i] - L);
        ct_ratio_interval(&rs, 0.95, &rm, &rse, &rlo, &rhi);
        CHECK_NEAR(rm, L, 1e-13);
        CHECK_NEAR(rse, sqrt((double)n / (double)(n - 1) * d) / sw, 1e-8);
    }
    ct_mean_interval(1, 3, 9, 0.95, &mean, &se, &lo3, &hi3);
    CHECK(mean == 3 && isnan(se) && isnan(lo3), "mean of one value: no stderr");
    free(x);
    free(w);
}

/* --- bootstrap drivers -------------------------------------------------------------------------- */

/* cells[0] / total: an accuracy from a 2-cell table. */
static void share_stat(const int64_t *cells, int64_t k, const void *ctx, void *scratch, double *values) {
    int64_t t = 0;
    for (int64_t i = 0; i < k; i++) t += cells[i];
    values[0] = (double)cells[0] / (double)t;
    values[1] = (double)cells[k - 1];
}

static void mean_stat(const int64_t *mult, int64_t n, const void *ctx, void *scratch, double *values) {
    const double *x = ctx;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)mult[i] * x[i];
    values[0] = s / (double)n;
}

static void test_drivers(void) {
    int64_t cells[5] = {300, 20, 0, 7, 1};
    ct_uncertainty_config cfg = {.resamples = 3000, .confidence = 0.95, .seed = ct_rng_u64(&rng)};
    double *a = malloc(2 * 3000 * sizeof *a), *b = malloc(2 * 3000 * sizeof *b);
    omp_set_num_threads(1);
    CHECK_OK(ct_bootstrap_cells(&cfg, cells, 5, share_stat, NULL, 0, 2, a));
    omp_set_num_threads(2);
    CHECK_OK(ct_bootstrap_cells(&cfg, cells, 5, share_stat, NULL, 0, 2, b));
    CHECK(memcmp(a, b, 2 * 3000 * sizeof *a) == 0, "cells bootstrap: same values on 1 and 2 threads");
    /* the share is a binomial proportion: its bootstrap sd ~ sqrt(p(1-p)/n) */
    double p = 300.0 / 328.0;
    CHECK_NEAR(ct_bootstrap_stderr(a, 3000), sqrt(p * (1 - p) / 328.0), 0.1);
    cfg.seed++;
    CHECK_OK(ct_bootstrap_cells(&cfg, cells, 5, share_stat, NULL, 0, 2, b));
    CHECK(memcmp(a, b, 3000 * sizeof *a) != 0, "another seed, other values");
    int64_t empty[2] = {0, 0};
    CHECK_ERR(ct_bootstrap_cells(&cfg, empty, 2, share_stat, NULL, 0, 2, b), CT_ERR_INVALID_ARG, "empty");

    double x[400];
    for (int i = 0; i < 400; i++) x[i] = ct_rng_normal(&rng) * 2;
    omp_set_num_threads(1);
    CHECK_OK(ct_bootstrap_samples(&cfg, 400, mean_stat, x, 0, 1, a));
    omp_set_num_threads(2);
    CHECK_OK(ct_bootstrap_samples(&cfg, 400, mean_stat, x, 0, 1, b));
    CHECK(memcmp(a, b, 3000 * sizeof *a) == 0, "samples bootstrap: same values on 1 and 2 threads");
    double s = 0, sq = 0;
    for (int i = 0; i < 400; i++) {
        s += x[i];
        sq += x[i] * x[i];
    }
    double mean, se, lo, hi;
    ct_mean_interval(400, s, sq, 0.95, &mean, &se, &lo, &hi);
    /* the bootstrap sd of a mean is s sqrt((n-1)/n) / sqrt(n); Monte-Carlo error ~ 1/sqrt(2R) = 1.3% */
    CHECK_NEAR(ct_bootstrap_stderr(a, 3000), se * sqrt(399.0 / 400.0), 0.08);
    free(a);
    free(b);
}

/* --- confusion metrics: data and references ----------------------------------------------------- */

typedef struct cdata {
    int64_t n, c;
    ct_tensor outputs, labels, mask;
    int64_t *y, *pred; /* pred: the intended argmax */
    bool has_mask;
} cdata;

/* Labels and predictions drawn from class subsets (so classes go missing on either side), outputs
 * whose argmax is pred (ties resolved towards the lower index, which is pred by construction). */
static void cdata_make(cdata *d, int64_t n, int64_t c, ct_dtype odt, ct_dtype ldt, double mask_p, int64_t label_classes,
                       int64_t pred_classes, double right_p) {
    memset(d, 0, sizeof *d);
    d->n = n;
    d->c = c;
    int64_t os[2] = {n, c};
    CT_ASSERT(ct_tensor_alloc(&d->outputs, odt, CT_CPU, 2, os) == CT_OK);
    CT_ASSERT(ct_tensor_alloc(&d->labels, ldt, CT_CPU, 1, &n) == CT_OK);
    CT_ASSERT(ct_tensor_alloc(&d->mask, CT_U8, CT_CPU, 1, &n) == CT_OK);
    d->y = malloc((size_t)(n ? n : 1) * sizeof *d->y);
    d->pred = malloc((size_t)(n ? n : 1) * sizeof *d->pred);
    d->has_mask = mask_p > 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t y = (int64_t)ct_rng_below(&rng, (uint64_t)label_classes);
        int64_t p = ct_rng_uniform(&rng) < right_p && y < pred_classes ? y : (int64_t)ct_rng_below(&rng, (uint64_t)pred_classes);
        bool real = !(ct_rng_uniform(&rng) < mask_p);
        d->y[i] = y;
        d->pred[i] = p;
        ((uint8_t *)d->mask.data)[i] = real;
        ct_tensor_set(&d->labels, i, real ? (double)y : (ct_rng_below(&rng, 2) ? -1.0 : (double)(c + 3)));
        for (int64_t j = 0; j < c; j++) {
            double v = j == p ? 2.0 + ct_rng_uniform(&rng) : ct_rng_uniform(&rng) * 2.0 - 1.0;
            ct_tensor_set(&d->outputs, i * c + j, v);
        }
    }
}

static void cdata_free(cdata *d) {
    ct_tensor_free(&d->outputs);
    ct_tensor_free(&d->labels);
    ct_tensor_free(&d->mask);
    free(d->y);
    free(d->pred);
}

static bool row_real(const cdata *d, int64_t i) { return !d->has_mask || ((uint8_t *)d->mask.data)[i]; }

static ct_eval_batch cbatch(const cdata *d, int64_t start, int64_t len, ct_tensor *o, ct_tensor *l, ct_tensor *k) {
    *o = ct_tensor_rows(&d->outputs, start, len);
    *l = ct_tensor_rows(&d->labels, start, len);
    *k = ct_tensor_rows(&d->mask, start, len);
    return (ct_eval_batch){.outputs = o, .labels = l, .mask = d->has_mask ? k : NULL};
}

static ct_status cfeed(ct_metric_set *s, const cdata *d, int64_t start, int64_t len, int64_t bs) {
    for (int64_t r = start; r < start + len; r += bs) {
        ct_tensor o, l, k;
        ct_eval_batch b = cbatch(d, r, CT_MIN(bs, start + len - r), &o, &l, &k);
        CT_TRY(ct_metric_set_update(s, &b));
    }
    return CT_OK;
}

/* Every confusion metric, every average. Order matters for the reference below. */
static const char *const all_specs =
    "[\"confusion_matrix\", \"precision_micro\", \"precision\", \"precision_weighted\", \"precision_per_class\","
    " {\"type\": \"recall\", \"average\": \"micro\"}, \"recall_macro\", {\"type\": \"recall\", \"average\": \"weighted\"},"
    " \"recall_per_class\", \"f1_micro\", {\"type\": \"f1\"}, \"f1_weighted\", {\"type\": \"f1\", \"average\": \"per_class\"},"
    " \"mcc\", {\"type\": \"balanced_accuracy\"}]";

static ct_metric_set make_all(void) {
    json_t *j = json_loads(all_specs, 0, NULL);
    ct_metric_set s;
    CT_ASSERT(ct_metric_set_from_json(j, "metrics", &s) == CT_OK);
    json_decref(j);
    return s;
}

/* The references, computed sample by sample. */
typedef struct cref {
    int64_t total;
    double prec[3], rec[3], f1[3]; /* micro, macro, weighted */
    double *prec_k, *rec_k, *f1_k;
    double mcc, bal;
    int64_t *cm;
} cref;

static cref creference(const cdata *d) {
    int64_t c = d->c;
    cref r = {0};
    r.prec_k = calloc((size_t)c, sizeof(double));
    r.rec_k = calloc((size_t)c, sizeof(double));
    r.f1_k = calloc((size_t)c, sizeof(double));
    r.cm = calloc((size_t)(c * c), sizeof(int64_t));
    int64_t correct = 0;
    for (int64_t i = 0; i < d->n; i++)
        if (row_real(d, i)) {
            r.cm[d->y[i] * c + d->pred[i]]++;
            r.total++;
            correct += d->y[i] == d->pred[i];
        }
    double macro_n = 0, bal_n = 0;
    for (int64_t k = 0; k < c; k++) {
        int64_t tp = 0, fp = 0, fn = 0;
        for (int64_t i = 0; i < d->n; i++) {
            if (!row_real(d, i)) continue;
            tp += d->y[i] == k && d->pred[i] == k;
            fp += d->y[i] != k && d->pred[i] == k;
            fn += d->y[i] == k && d->pred[i] != k;
        }
        double P = tp + fp ? (double)tp / (double)(tp + fp) : 0, R = tp + fn ? (double)tp / (double)(tp + fn) : 0;
        double F = P + R > 0 ? 2 * P * R / (P + R) : 0; /* the harmonic-mean form, scikit-learn 1.2's */
        r.prec_k[k] = P;
        r.rec_k[k] = R;
        r.f1_k[k] = F;
        if (tp + fp + fn > 0) { /* the class occurs in labels or predictions */
            r.prec[1] += P;
            r.rec[1] += R;
            r.f1[1] += F;
            macro_n++;
        }
        double support = (double)(tp + fn);
        r.prec[2] += support * P;
        r.rec[2] += support * R;
        r.f1[2] += support * F;
        if (tp + fn > 0) {
            r.bal += R;
            bal_n++;
        }
    }
    double acc = r.total ? (double)correct / (double)r.total : 0;
    r.prec[0] = r.rec[0] = r.f1[0] = acc;
    for (int i = 0; i < 1; i++) {
        r.prec[1] /= macro_n;
        r.rec[1] /= macro_n;
        r.f1[1] /= macro_n;
        r.prec[2] /= (double)r.total;
        r.rec[2] /= (double)r.total;
        r.f1[2] /= (double)r.total;
    }
    r.bal /= bal_n;
    /* MCC as the correlation of the one-hot label and prediction matrices (covariance form, long
     * double sums over up to 10^5 terms so that the reference is the more accurate side) */
    long double sxy = 0, sxx = 0, syy = 0, N = (long double)r.total;
    for (int64_t k = 0; k < c; k++) {
        long double mx = 0, my = 0;
        for (int64_t i = 0; i < d->n; i++)
            if (row_real(d, i)) {
                mx += d->y[i] == k;
                my += d->pred[i] == k;
            }
        mx /= N;
        my /= N;
        for (int64_t i = 0; i < d->n; i++)
            if (row_real(d, i)) {
                long double x = (d->y[i] == k) - mx, y = (d->pred[i] == k) - my;
                sxy += x * y;
                sxx += x * x;
                syy += y * y;
            }
    }
    r.mcc = sxx * syy > 0 ? (double)(sxy / sqrtl(sxx * syy)) : 0;
    return r;
}

static void cref_free(cref *r) {
    free(r->prec_k);
    free(r->rec_k);
    free(r->f1_k);
    free(r->cm);
}

static double jget(const json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* Relative, with an absolute floor of rel for values near 0 (an MCC of exactly 0 that the covariance
 * reference gets as 1e-17). */
static bool near(double a, double b, double rel) { return fabs(a - b) <= rel * fmax(1, fmax(fabs(a), fabs(b))) || a == b; }

/* Checks out (prefix "eval") against r: values to 1e-14 (the harmonic-mean F1 and the covariance
 * MCC round differently), counts exactly. Returns the number of mismatches. */
static int check_against(const json_t *out, const cref *r, int64_t c, const char *label) {
    int bad = 0;
    static const char *const avg[3] = {"micro", "macro", "weighted"};
    char key[96];
    for (int a = 0; a < 3; a++) {
        const double *want[3] = {r->prec, r->rec, r->f1};
        static const char *const kinds[3] = {"precision", "recall", "f1"};
        for (int t = 0; t < 3; t++) {
            snprintf(key, sizeof key, "eval_%s_%s", kinds[t], avg[a]);
            double g = jget(out, key);
            if (!near(g, want[t][a], 1e-14)) {
                bad++;
                CHECK(false, "%s: %s %.17g vs reference %.17g", label, key, g, want[t][a]);
            }
        }
    }
    const double *lists[3] = {r->prec_k, r->rec_k, r->f1_k};
    static const char *const lkeys[3] = {"eval_precision_per_class", "eval_recall_per_class", "eval_f1_per_class"};
    for (int t = 0; t < 3; t++) {
        json_t *l = json_object_get(out, lkeys[t]);
        bool ok = json_is_array(l) && (int64_t)json_array_size(l) == c;
        for (int64_t k = 0; ok && k < c; k++) ok = near(json_number_value(json_array_get(l, (size_t)k)), lists[t][k], 1e-15);
        if (!ok) bad++;
        CHECK(ok, "%s: %s", label, lkeys[t]);
    }
    json_t *cm = json_object_get(out, "eval_confusion_matrix");
    bool ok = json_is_array(cm) && (int64_t)json_array_size(cm) == c;
    for (int64_t i = 0; ok && i < c; i++) {
        json_t *row = json_array_get(cm, (size_t)i);
        ok = json_is_array(row) && (int64_t)json_array_size(row) == c;
        for (int64_t j = 0; ok && j < c; j++)
            ok = json_is_integer(json_array_get(row, (size_t)j)) &&
                 json_integer_value(json_array_get(row, (size_t)j)) == r->cm[i * c + j];
    }
    if (!ok) bad++;
    CHECK(ok, "%s: confusion matrix", label);
    if (!near(jget(out, "eval_mcc"), r->mcc, 1e-12)) bad++;
    CHECK(near(jget(out, "eval_mcc"), r->mcc, 1e-12), "%s: mcc %.17g vs %.17g", label, jget(out, "eval_mcc"), r->mcc);
    if (!near(jget(out, "eval_balanced_accuracy"), r->bal, 1e-14)) bad++;
    CHECK(near(jget(out, "eval_balanced_accuracy"), r->bal, 1e-14), "%s: balanced accuracy %.17g vs %.17g", label,
          jget(out, "eval_balanced_accuracy"), r->bal);
    return bad;
}

/* --- confusion metrics: tests ------------------------------------------------------------------- */

static void test_values(void) {
    for (int trial = 0; trial < 30; trial++) {
        int64_t c = 1 + (int64_t)ct_rng_below(&rng, 12);
        int64_t n = trial % 10 == 9 ? 20000 + (int64_t)ct_rng_below(&rng, 20000) : 1 + (int64_t)ct_rng_below(&rng, 400);
        /* some trials leave classes out of the labels or of the predictions */
        int64_t lc = trial % 3 == 1 ? 1 + (int64_t)ct_rng_below(&rng, (uint64_t)c) : c;
        int64_t pc = trial % 3 == 2 ? 1 + (int64_t)ct_rng_below(&rng, (uint64_t)c) : c;
        cdata d;
        cdata_make(&d, n, c, trial & 1 ? CT_F64 : CT_F32, trial & 2 ? CT_I32 : CT_I64, trial % 4 == 3 ? 0.3 : 0.0, lc,
                   pc, ct_rng_uniform(&rng));
        ct_metric_set s = make_all();
        CHECK_OK(cfeed(&s, &d, 0, n, 1 + (int64_t)ct_rng_below(&rng, (uint64_t)n)));
        json_t *out = json_object();
        CHECK_OK(ct_metric_set_compute(&s, "eval", out));
        cref r = creference(&d);
        char label[96];
        snprintf(label, sizeof label, "trial %d (n %lld C %lld labels %lld preds %lld)", trial, (long long)n,
                 (long long)c, (long long)lc, (long long)pc);
        if (r.total > 0) {
            check_against(out, &r, c, label);
            CHECK(json_object_size(out) == 15u, "%s: %zu keys", label, json_object_size(out));
        } else
            CHECK(json_object_size(out) == 0, "%s: no sample, no key (%zu)", label, json_object_size(out));
        cref_free(&r);
        json_decref(out);
        ct_metric_set_free(&s);
        cdata_free(&d);
    }
}

static bool same_state(const ct_metric *a, const ct_metric *b) {
    if (a->n_counts != b->n_counts || a->n_sums != b->n_sums) return false;
    return !a->n_counts || memcmp(a->counts, b->counts, (size_t)a->n_counts * sizeof *a->counts) == 0;
}

static void test_merge_and_batches(void) {
    for (int trial = 0; trial < 20; trial++) {
        int64_t c = 1 + (int64_t)ct_rng_below(&rng, 8), n = 1 + (int64_t)ct_rng_below(&rng, 300);
        cdata d;
        cdata_make(&d, n, c, CT_F32, CT_I64, trial % 2 ? 0.25 : 0, c, c, 0.6);
        ct_metric_set whole = make_all(), merged = make_all();
        CHECK_OK(cfeed(&whole, &d, 0, n, n));
        int parts = 1 + (int)ct_rng_below(&rng, 6);
        int64_t start = 0;
        for (int p = 0; p < parts; p++) {
            int64_t len = p == parts - 1 ? n - start : (int64_t)ct_rng_below(&rng, (uint64_t)(n - start + 1));
            ct_metric_set piece = make_all(); /* an empty piece stays blank and must merge */
            CHECK_OK(cfeed(&piece, &d, start, len, 1 + (int64_t)ct_rng_below(&rng, 32)));
            CHECK_OK(ct_metric_set_merge(&merged, &piece));
            ct_metric_set_free(&piece);
            start += len;
        }
        for (int i = 0; i < whole.n; i++)
            CHECK(same_state(whole.items[i], merged.items[i]), "trial %d: %s: merged state of %d pieces differs", trial,
                  ct_metric_name(whole.items[i]), parts);
        ct_metric_set fresh = make_all(), fresh2 = make_all();
        CHECK_OK(ct_metric_set_merge(&merged, &fresh));
        CHECK_OK(ct_metric_set_merge(&fresh2, &whole));
        for (int i = 0; i < whole.n; i++) {
            CHECK(same_state(whole.items[i], merged.items[i]), "merging a blank state changes nothing");
            CHECK(same_state(whole.items[i], fresh2.items[i]), "a blank state adopts the other");
        }
        ct_metric_set_reset(&merged);
        for (int i = 0; i < merged.n; i++) {
            int64_t t = 0;
            for (int64_t j = 0; j < merged.items[i]->n_counts; j++) t += merged.items[i]->counts[j];
            CHECK(t == 0, "reset empties the matrix");
        }
        /* batch size: identical JSON */
        ct_metric_set a = make_all(), b = make_all();
        CHECK_OK(cfeed(&a, &d, 0, n, 1));
        CHECK_OK(cfeed(&b, &d, 0, n, 1 + (int64_t)ct_rng_below(&rng, (uint64_t)n)));
        json_t *ja = json_object(), *jb = json_object();
        CHECK_OK(ct_metric_set_compute(&a, "", ja));
        CHECK_OK(ct_metric_set_compute(&b, "", jb));
        CHECK(json_equal(ja, jb), "trial %d: results depend on the batch size", trial);
        json_decref(ja);
        json_decref(jb);
        ct_metric_set_free(&a);
        ct_metric_set_free(&b);
        ct_metric_set_free(&fresh);
        ct_metric_set_free(&fresh2);
        ct_metric_set_free(&whole);
        ct_metric_set_free(&merged);
        cdata_free(&d);
    }
}

/* Data from explicit labels and predictions. */
static void cdata_from(cdata *d, int64_t n, int64_t c, const int64_t *y, const int64_t *p) {
    cdata_make(d, n, c, CT_F64, CT_I64, 0, c, c, 0);
    for (int64_t i = 0; i < n; i++) {
        d->y[i] = y[i];
        d->pred[i] = p[i];
        ct_tensor_set(&d->labels, i, (double)y[i]);
        for (int64_t j = 0; j < c; j++) ct_tensor_set(&d->outputs, i * c + j, j == p[i] ? 1.0 : 0.0);
    }
}

static json_t *compute_all(const cdata *d) {
    ct_metric_set s = make_all();
    CT_ASSERT(cfeed(&s, d, 0, d->n, d->n) == CT_OK);
    json_t *out = json_object();
    CT_ASSERT(ct_metric_set_compute(&s, "eval", out) == CT_OK);
    ct_metric_set_free(&s);
    return out;
}

static void test_edge_cases(void) {
    cdata d;
    /* class 2 never predicted, class 3 never present, class 4 neither */
    int64_t y1[8] = {0, 1, 2, 2, 0, 1, 2, 0}, p1[8] = {0, 1, 1, 0, 3, 1, 0, 0};
    cdata_from(&d, 8, 5, y1, p1);
    json_t *out = compute_all(&d);
    cref r = creference(&d);
    check_against(out, &r, 5, "never predicted / never present");
    /* by hand: class 0 P 2/4 R 2/3, class 1 P 2/3 R 1, class 2 P 0 R 0, class 3 P 0 (fp 1) R 0 (no support) */
    CHECK_NEAR(jget(out, "eval_precision_macro"), (0.5 + 2.0 / 3.0 + 0 + 0) / 4.0, 1e-15);
    CHECK_NEAR(jget(out, "eval_recall_macro"), (2.0 / 3.0 + 1.0) / 4.0, 1e-15);
    CHECK_NEAR(jget(out, "eval_balanced_accuracy"), (2.0 / 3.0 + 1.0 + 0) / 3.0, 1e-15);
    cref_free(&r);
    json_decref(out);
    cdata_free(&d);

    /* all correct */
    int64_t y2[6] = {0, 1, 2, 0, 1, 2};
    cdata_from(&d, 6, 4, y2, y2);
    out = compute_all(&d);
    CHECK(jget(out, "eval_f1_macro") == 1 && jget(out, "eval_precision_weighted") == 1 && jget(out, "eval_mcc") == 1 &&
              jget(out, "eval_balanced_accuracy") == 1 && jget(out, "eval_recall_micro") == 1,
          "all correct: ones");
    r = creference(&d);
    check_against(out, &r, 4, "all correct");
    cref_free(&r);
    json_decref(out);
    cdata_free(&d);

    /* all wrong */
    int64_t p3[6] = {1, 2, 0, 2, 0, 1};
    cdata_from(&d, 6, 3, y2, p3);
    out = compute_all(&d);
    CHECK(jget(out, "eval_f1_macro") == 0 && jget(out, "eval_precision_micro") == 0 && jget(out, "eval_mcc") < 0 &&
              jget(out, "eval_balanced_accuracy") == 0,
          "all wrong: zeros, negative MCC %g", jget(out, "eval_mcc"));
    r = creference(&d);
    check_against(out, &r, 3, "all wrong");
    cref_free(&r);
    json_decref(out);
    cdata_free(&d);

    /* one sample, right and wrong */
    for (int right = 0; right < 2; right++) {
        int64_t y4[1] = {1}, p4[1] = {right ? 1 : 2};
        cdata_from(&d, 1, 3, y4, p4);
        out = compute_all(&d);
        r = creference(&d);
        check_against(out, &r, 3, right ? "one sample, right" : "one sample, wrong");
        CHECK(jget(out, "eval_mcc") == 0, "one sample: MCC 0 (zero denominator)");
        CHECK(jget(out, "eval_f1_micro") == right, "one sample: micro F1 %d", right);
        cref_free(&r);
        json_decref(out);
        cdata_free(&d);
    }

    /* C = 1 */
    int64_t y5[4] = {0, 0, 0, 0};
    cdata_from(&d, 4, 1, y5, y5);
    out = compute_all(&d);
    CHECK(jget(out, "eval_f1_macro") == 1 && jget(out, "eval_mcc") == 0 && jget(out, "eval_balanced_accuracy") == 1,
          "C = 1: f1 1, mcc 0, balanced 1");
    r = creference(&d);
    check_against(out, &r, 1, "C = 1");
    cref_free(&r);
    json_decref(out);
    cdata_free(&d);

    /* all rows masked: no key; C fixed from the first batch, another C refused, state kept */
    cdata_make(&d, 10, 3, CT_F32, CT_I64, 1.0 - 1e-12, 3, 3, 0.5);
    memset(d.mask.data, 0, 10);
    ct_metric *m;
    CHECK_OK(ct_confusion_metric_create(CT_CONFUSION_F1, CT_AVERAGE_MACRO, &m));
    ct_tensor o, l, k;
    ct_eval_batch b = cbatch(&d, 0, 10, &o, &l, &k);
    CHECK_OK(ct_metric_update(m, &b));
    out = json_object();
    CHECK_OK(ct_metric_compute(m, "eval", out));
    CHECK(json_object_size(out) == 0 && ct_confusion_classes(m) == 3, "all masked: no key, C = 3 fixed");
    ct_uncertainty_config cfg = {.resamples = 10, .confidence = 0.95, .seed = 1};
    CHECK_OK(ct_metric_uncertainty(m, &cfg, "eval", out));
    CHECK(json_object_size(out) == 0, "all masked: no uncertainty key");
    cdata d2;
    cdata_make(&d2, 5, 4, CT_F32, CT_I64, 0, 4, 4, 0.5);
    ct_eval_batch b2 = cbatch(&d2, 0, 5, &o, &l, &k);
    CHECK_ERR(ct_metric_update(m, &b2), CT_ERR_SHAPE, "metric 'f1': outputs", "have 4 classes, and earlier batches had 3");
    CHECK(m->n_counts == 9, "state kept after the refused batch");
    ct_metric *blank;
    CHECK_OK(ct_confusion_metric_create(CT_CONFUSION_F1, CT_AVERAGE_MACRO, &blank));
    CHECK_OK(ct_metric_update(blank, &b2));
    CHECK_ERR(ct_metric_merge(m, blank), CT_ERR_INVALID_ARG, "another shape");
    ct_metric *other;
    CHECK_OK(ct_confusion_metric_create(CT_CONFUSION_F1, CT_AVERAGE_MICRO, &other));
    CHECK_ERR(ct_metric_merge(blank, other), CT_ERR_INVALID_ARG, "different settings");
    ct_metric_free(other);
    ct_metric_free(blank);
    json_decref(out);
    ct_metric_free(m);
    cdata_free(&d);
    cdata_free(&d2);
}

/* --- uncertainty of the confusion metrics ------------------------------------------------------- */

static json_t *uncertainty_of(ct_metric_set *s, const ct_uncertainty_config *cfg) {
    json_t *out = json_object();
    CT_ASSERT(ct_metric_set_compute(s, "eval", out) == CT_OK);
    ct_status st = ct_metric_set_uncertainty(s, cfg, "eval", out);
    CHECK(st == CT_OK, "uncertainty: %s", ct_last_error());
    return out;
}

static void test_uncertainty_keys(void) {
    int64_t c = 2 + (int64_t)ct_rng_below(&rng, 6), n = 50 + (int64_t)ct_rng_below(&rng, 500);
    cdata d;
    cdata_make(&d, n, c, CT_F32, CT_I64, 0.1, c, c, 0.7);
    ct_metric_set s = make_all();
    CHECK_OK(cfeed(&s, &d, 0, n, 17));
    ct_metric *acc;
    CHECK_OK(ct_accuracy_metric_create(&acc));
    CHECK_OK(ct_metric_set_add(&s, acc));
    CHECK_OK(cfeed(&s, &d, 0, 0, 1));
    ct_metric_set_reset(&s);
    CHECK_OK(cfeed(&s, &d, 0, n, 17));
    ct_uncertainty_config cfg = {.resamples = 500, .confidence = 0.9, .seed = ct_rng_u64(&rng)};
    json_t *a = uncertainty_of(&s, &cfg), *b = uncertainty_of(&s, &cfg);
    CHECK(json_equal(a, b), "same seed: the same uncertainty, bit for bit");
    static const char *const scalars[] = {"precision_micro", "precision_macro", "precision_weighted", "recall_micro",
                                          "recall_macro",    "recall_weighted", "f1_micro",           "f1_macro",
                                          "f1_weighted",     "mcc",             "balanced_accuracy",  "accuracy"};
    char key[96];
    for (size_t i = 0; i < sizeof scalars / sizeof scalars[0]; i++) {
        snprintf(key, sizeof key, "eval_%s", scalars[i]);
        double v = jget(a, key);
        snprintf(key, sizeof key, "eval_%s_stderr", scalars[i]);
        double se = jget(a, key);
        snprintf(key, sizeof key, "eval_%s_ci_low", scalars[i]);
        double lo = jget(a, key);
        snprintf(key, sizeof key, "eval_%s_ci_high", scalars[i]);
        double hi = jget(a, key);
        CHECK(se > 0 && lo <= hi && lo <= v + 0.3 && hi >= v - 0.3, "%s: %g stderr %g interval [%g, %g]", scalars[i], v,
              se, lo, hi);
    }
    /* micro averages are the accuracy; their bootstrap stderr is the binomial one within MC error */
    CHECK_NEAR(jget(a, "eval_f1_micro_stderr"), jget(a, "eval_accuracy_stderr"), 0.2);
    for (int t = 0; t < 3; t++) {
        static const char *const lists[3] = {"eval_precision_per_class", "eval_recall_per_class", "eval_f1_per_class"};
        static const char *const suffix[3] = {"stderr", "ci_low", "ci_high"};
        for (int u = 0; u < 3; u++) {
            snprintf(key, sizeof key, "%s_%s", lists[t], suffix[u]);
            json_t *l = json_object_get(a, key);
            CHECK(json_is_array(l) && (int64_t)json_array_size(l) == c, "%s: a list of C", key);
        }
    }
    CHECK(!json_object_get(a, "eval_confusion_matrix_stderr"), "the confusion matrix has no uncertainty");
    json_decref(b);
    cfg.seed++;
    b = uncertainty_of(&s, &cfg);
    CHECK(jget(a, "eval_f1_macro_stderr") != jget(b, "eval_f1_macro_stderr"), "another seed: another bootstrap");
    json_decref(b);
    cfg.resamples = 0; /* bootstrap off: only the closed form (accuracy) */
    b = uncertainty_of(&s, &cfg);
    size_t with_suffix = 0;
    const char *k;
    json_t *v;
    json_object_foreach(b, k, v) with_suffix += strstr(k, "_stderr") || strstr(k, "_ci_");
    CHECK(with_suffix == 3 && json_object_get(b, "eval_accuracy_stderr"), "resamples 0: accuracy's 3 keys only (%zu)",
          with_suffix);
    json_decref(b);
    cfg.resamples = -1;
    json_t *o = json_object();
    CHECK_ERR(ct_metric_uncertainty(s.items[1], &cfg, "eval", o), CT_ERR_INVALID_ARG, "resamples = -1");
    cfg.resamples = 10;
    cfg.confidence = 1.5;
    CHECK_ERR(ct_metric_uncertainty(s.items[1], &cfg, "eval", o), CT_ERR_INVALID_ARG, "confidence = 1.5");
    json_decref(o);
    json_decref(a);

    /* all correct: every resample is all correct */
    int64_t y[5] = {0, 1, 1, 2, 0};
    ct_metric_set_free(&s);
    cdata_free(&d);
    cdata_from(&d, 5, 3, y, y);
    s = make_all();
    CHECK_OK(cfeed(&s, &d, 0, 5, 2));
    cfg = (ct_uncertainty_config){.resamples = 200, .confidence = 0.95, .seed = 3};
    a = uncertainty_of(&s, &cfg);
    CHECK(jget(a, "eval_f1_macro_stderr") == 0 && jget(a, "eval_f1_macro_ci_low") == 1 &&
              jget(a, "eval_f1_macro_ci_high") == 1,
          "all correct: zero stderr, interval [1, 1]");
    json_decref(a);
    ct_metric_set_free(&s);
    cdata_free(&d);
}

/* The macro F1 of a (weighted) confusion matrix, from counts: the reference statistic for the
 * sample-by-sample bootstrap. */
typedef struct sample_ctx {
    const int64_t *y, *p;
    int64_t c;
} sample_ctx;

static double macro_f1_of(const int64_t *cm, int64_t c) {
    double sum = 0;
    int64_t present = 0;
    for (int64_t k = 0; k < c; k++) {
        int64_t tp = cm[k * c + k], t = 0, p = 0;
        for (int64_t j = 0; j < c; j++) {
            t += cm[k * c + j];
            p += cm[j * c + k];
        }
        if (t + p == 0) continue;
        sum += 2.0 * (double)tp / (double)(t + p);
        present++;
    }
    return sum / (double)present;
}

static void sample_stat(const int64_t *mult, int64_t n, const void *ctx, void *scratch, double *values) {
    const sample_ctx *x = ctx;
    int64_t *cm = scratch;
    memset(cm, 0, (size_t)(x->c * x->c) * sizeof *cm);
    for (int64_t i = 0; i < n; i++) cm[x->y[i] * x->c + x->p[i]] += mult[i];
    values[0] = macro_f1_of(cm, x->c);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Two-sample Kolmogorov-Smirnov statistic (sorts both arrays). */
static double ks_statistic(double *a, int64_t na, double *b, int64_t nb) {
    qsort(a, (size_t)na, sizeof *a, cmp_d);
    qsort(b, (size_t)nb, sizeof *b, cmp_d);
    int64_t i = 0, j = 0;
    double d = 0;
    while (i < na && j < nb) {
        double x = a[i] < b[j] ? a[i] : b[j];
        while (i < na && a[i] == x) i++;
        while (j < nb && b[j] == x) j++;
        d = fmax(d, fabs((double)i / (double)na - (double)j / (double)nb));
    }
    return d;
}

static void test_bootstrap_equivalence(void) {
    int64_t c = 3 + (int64_t)ct_rng_below(&rng, 5), n = 200 + (int64_t)ct_rng_below(&rng, 800), R = 4000;
    cdata d;
    cdata_make(&d, n, c, CT_F64, CT_I64, 0, c, c, 0.5);
    ct_metric *m;
    CHECK_OK(ct_confusion_metric_create(CT_CONFUSION_F1, CT_AVERAGE_MACRO, &m));
    ct_tensor o, l, k;
    ct_eval_batch b = cbatch(&d, 0, n, &o, &l, &k);
    CHECK_OK(ct_metric_update(m, &b));
    ct_uncertainty_config cfg = {.resamples = R, .confidence = 0.95, .seed = ct_rng_u64(&rng)};
    double *cells, *samples = malloc((size_t)R * sizeof *samples);
    int nv;
    CHECK_OK(ct_confusion_bootstrap_values(m, &cfg, &cells, &nv));
    cfg.seed ^= 0x5555; /* independent draws for the other side */
    sample_ctx x = {d.y, d.pred, c};
    CHECK_OK(ct_bootstrap_samples(&cfg, n, sample_stat, &x, (size_t)(c * c) * sizeof(int64_t), 1, samples));
    double ma = 0, mb = 0, sa = ct_bootstrap_stderr(cells, R), sb = ct_bootstrap_stderr(samples, R);
    for (int64_t i = 0; i < R; i++) {
        ma += cells[i] / (double)R;
        mb += samples[i] / (double)R;
    }
    /* means: the difference has sd sqrt(2/R) s; stds: relative sd about 1/sqrt(R) (2 sides); 5 sigma */
    CHECK(fabs(ma - mb) < 5 * sqrt(2.0 / (double)R) * sa, "bootstrap means %.6f (cells) vs %.6f (samples)", ma, mb);
    CHECK(fabs(sa / sb - 1) < 5 / sqrt((double)R), "bootstrap stds %.6f (cells) vs %.6f (samples)", sa, sb);
    /* KS: at level alpha the critical D is sqrt(-ln(alpha/2)/2) sqrt(2/R); alpha = 1e-6 */
    double D = ks_statistic(cells, R, samples, R), crit = sqrt(-log(0.5e-6) / 2) * sqrt(2.0 / (double)R);
    CHECK(D < crit, "two-sample KS %.4f >= %.4f: the cell bootstrap differs from resampling samples", D, crit);
    CHECK(nv == 1, "one value");
    free(cells);
    free(samples);
    ct_metric_free(m);
    cdata_free(&d);
}

/* --- the oracle's mode -------------------------------------------------------------------------- */

static ct_status dump_bootstrap(const ct_metric_set *s, const ct_uncertainty_config *cfg, json_t *out) {
    json_t *all = json_object();
    json_object_set_new(out, "__bootstrap__", all);
    for (int i = 0; i < s->n; i++) {
        const ct_metric *m = s->items[i];
        if (!ct_confusion_metric_knows(ct_metric_name(m)) || strcmp(ct_metric_name(m), "confusion_matrix") == 0)
            continue;
        double *v;
        int nv;
        CT_TRY(ct_confusion_bootstrap_values(m, cfg, &v, &nv));
        json_t *list = json_array();
        for (int64_t j = 0; j < nv * cfg->resamples; j++) json_array_append_new(list, json_real(v[j]));
        free(v);
        json_t *tmp = json_object();
        CT_TRY(ct_metric_compute(m, "", tmp)); /* its key names the entry */
        const char *key = json_object_iter_key(json_object_iter(tmp));
        json_object_set_new(all, key, list);
        json_decref(tmp);
    }
    return CT_OK;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--compute") == 0)
        return ct_test_metric_compute_main("test_metrics_confusion", argv[2], CT_I64, dump_bootstrap);
    ct_test_begin("test_metrics_confusion");
    ct_rng_init(&rng, ct_test_seed, 0, 0);
    test_normal_quantile();
    test_binomial();
    test_multinomial();
    test_summaries();
    test_drivers();
    test_values();
    test_merge_and_batches();
    test_edge_cases();
    test_uncertainty_keys();
    test_bootstrap_equivalence();
    return ct_test_finish();
}
