/* Regression metrics (mse, rmse, mae, r2; eval/metrics_regression.c) against a reference written
 * here a different way (two passes per output, long double, scikit-learn's multioutput rules spelt
 * out), on fresh random data: float32/float64 outputs and targets, [rows] and [rows, k] shapes, k
 * learnt from the first batch or configured, masks whose padding rows hold NaN (so counting one
 * shows). The sufficient-statistics property: random splits merged equal one state (bit for bit
 * on dyadic data, where every sum is exact; within 1e-12 otherwise), batch size never matters
 * (rows enter the state one by one), blank states merge. Edge cases: constant targets (r2 1 or 0 as
 * scikit-learn), one row (r2 NaN -> null), no rows, NaN targets, rmse's per-output roots. Errors
 * and JSON. Uncertainty: mse/mae's closed form against the textbook one, rmse/r2's bootstrap
 * against the same resamples fed to a reference that materialises the resampled rows, the same
 * values for any thread count and seed reuse, and the bootstrap standard error of rmse against the
 * delta method's on a large sample.
 *
 * `test_metrics_regression --compute IN.h5` serves tests/oracle/test_metrics_regression.py: IN.h5
 * holds attribute "spec" (JSON: "metrics" (specs for ct_regression_metric_from_json), "prefix",
 * "batch_size", "ranks", "dtype"/"label_dtype" ("f32"/"f64"), optional "uncertainty":
 * {"resamples", "confidence", "seed"}) and datasets outputs, labels ([N] or [N, k]) and optional
 * mask [N] u8. Batches are dealt round-robin to `ranks` states, merged, and the values (and
 * uncertainty keys) printed as one JSON object.
 *
 * Why one file of over 600 lines: it tests one source file (eval/metrics_regression.c), and the
 * reference written here serves both its checks and the --compute mode its oracle drives. */
#include <float.h>
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

/* --- random data -------------------------------------------------------------------------------- */

enum { CONTINUOUS, DYADIC };

typedef struct data {
    int64_t n, k;
    ct_tensor out, lab, mask;
    bool has_mask;
} data;

/* Targets y_j = offset_j + scale_j * N(0, 1), predictions y + bias + noise; DYADIC: multiples of
 * 1/8 in a small range, so every sum of values, squares and products is exact in float64. Padding
 * rows (mask 0) hold NaN. flat: [n] tensors (k must be 1). */
static void data_make(data *d, int64_t n, int64_t k, bool flat, ct_dtype odt, ct_dtype ldt, int kind, double mask_p) {
    memset(d, 0, sizeof *d);
    d->n = n;
    d->k = k;
    int64_t shape[2] = {n, k};
    CT_ASSERT(ct_tensor_alloc(&d->out, odt, CT_CPU, flat ? 1 : 2, shape) == CT_OK);
    CT_ASSERT(ct_tensor_alloc(&d->lab, ldt, CT_CPU, flat ? 1 : 2, shape) == CT_OK);
    CT_ASSERT(ct_tensor_alloc(&d->mask, CT_U8, CT_CPU, 1, &n) == CT_OK);
    d->has_mask = mask_p > 0;
    double offset[8], scale[8], noise = 0.05 + ct_rng_uniform(&rng);
    for (int64_t j = 0; j < k && j < 8; j++) {
        offset[j] = 10 * ct_rng_normal(&rng);
        scale[j] = 0.2 + 3 * ct_rng_uniform(&rng);
    }
    for (int64_t i = 0; i < n; i++) {
        bool real = !(ct_rng_uniform(&rng) < mask_p);
        ((uint8_t *)d->mask.data)[i] = real;
        for (int64_t j = 0; j < k; j++) {
            double y, p;
            if (kind == DYADIC) {
                y = (double)((int64_t)ct_rng_below(&rng, 129) - 64) / 8.0;
                p = y + (double)((int64_t)ct_rng_below(&rng, 17) - 8) / 8.0;
            } else {
                y = offset[j % 8] + scale[j % 8] * ct_rng_normal(&rng);
                p = y + 0.3 * offset[j % 8] / 10 + noise * scale[j % 8] * ct_rng_normal(&rng);
            }
            if (!real) y = p = NAN;
            ct_tensor_set(&d->lab, i * k + j, y);
            ct_tensor_set(&d->out, i * k + j, p);
        }
    }
}

static void data_free(data *d) {
    ct_tensor_free(&d->out);
    ct_tensor_free(&d->lab);
    ct_tensor_free(&d->mask);
}

static bool real_row(const data *d, int64_t i) { return !d->has_mask || ((uint8_t *)d->mask.data)[i]; }
static double y_at(const data *d, int64_t i, int64_t j) { return ct_tensor_get(&d->lab, i * d->k + j); }
static double p_at(const data *d, int64_t i, int64_t j) { return ct_tensor_get(&d->out, i * d->k + j); }

static ct_eval_batch batch_of(const data *d, int64_t start, int64_t len, ct_tensor *o, ct_tensor *l, ct_tensor *k) {
    *o = ct_tensor_rows(&d->out, start, len);
    *l = ct_tensor_rows(&d->lab, start, len);
    *k = ct_tensor_rows(&d->mask, start, len);
    return (ct_eval_batch){.outputs = o, .labels = l, .mask = d->has_mask ? k : NULL};
}

/* --- reference ---------------------------------------------------------------------------------- */

typedef struct ref {
    int64_t rows;
    double mse, rmse, mae, r2;
} ref;

/* scikit-learn's uniform_average, two passes per output in long double, over the rows with w[i]
 * copies each (w NULL: the real rows once). */
static ref reference_w(const data *d, const int64_t *w) {
    ref r = {0};
    long double n = 0;
    /* rows with weight 0 are skipped, not multiplied by 0 (a NaN there must not count) */
#define SKIP(i) (!real_row(d, i) || (w && w[i] == 0))
    for (int64_t i = 0; i < d->n; i++)
        if (!SKIP(i)) n += w ? w[i] : 1;
    r.rows = (int64_t)n;
    long double mse = 0, rmse = 0, mae = 0, r2 = 0;
    for (int64_t j = 0; j < d->k; j++) {
        long double sy = 0, sse = 0, sae = 0, sst = 0;
        for (int64_t i = 0; i < d->n; i++)
            if (!SKIP(i)) sy += (w ? w[i] : 1) * (long double)y_at(d, i, j);
        long double mean = sy / n;
        for (int64_t i = 0; i < d->n; i++) {
            if (SKIP(i)) continue;
            long double c = w ? w[i] : 1, e = (long double)y_at(d, i, j) - (long double)p_at(d, i, j);
            long double dy = (long double)y_at(d, i, j) - mean;
            sse += c * e * e;
            sae += c * fabsl(e);
            sst += c * dy * dy;
        }
        bool constant = true, seen = false;
        double first = 0;
        for (int64_t i = 0; i < d->n; i++)
            if (!SKIP(i)) {
                if (!seen) first = y_at(d, i, j);
                seen = true;
                constant &= y_at(d, i, j) == first;
            }
        mse += sse / n;
        rmse += sqrtl(sse / n);
        mae += sae / n;
        r2 += sse == 0 ? 1.0L : constant ? 0.0L : 1.0L - sse / sst;
    }
    r.mse = (double)(mse / d->k);
    r.rmse = (double)(rmse / d->k);
    r.mae = (double)(mae / d->k);
    r.r2 = n < 2 ? NAN : (double)(r2 / d->k);
    return r;
#undef SKIP
}

static ref reference(const data *d) { return reference_w(d, NULL); }

/* r2's tolerance. SST = sum y^2 - (sum y)^2 / n from float64 sums (see metrics_regression.c) has a
 * rounding error of a few eps * sum y^2, so r2 is known to about eps * max_j(sum y_j^2 / SST_j):
 * the bound is derived from the data's conditioning, not tuned. r2_conditioning is that maximum for
 * the rows taken w[i] times each (NULL: every real row once), as a bootstrap resample takes them. */
static double r2_conditioning(const data *d, const int64_t *w) {
    long double worst = 1;
    for (int64_t j = 0; j < d->k; j++) {
        long double n = 0, sy = 0, syy = 0, sst = 0;
        for (int64_t i = 0; i < d->n; i++)
            if (real_row(d, i) && (!w || w[i])) {
                const long double m = w ? w[i] : 1, y = y_at(d, i, j);
                n += m;
                sy += m * y;
                syy += m * y * y;
            }
        for (int64_t i = 0; i < d->n; i++)
            if (real_row(d, i) && (!w || w[i]))
                sst += (w ? w[i] : 1) * ((long double)y_at(d, i, j) - sy / n) * ((long double)y_at(d, i, j) - sy / n);
        if (sst > 0 && syy / sst > worst) worst = syy / sst;
    }
    return (double)worst;
}

static double r2_tolerance_of(double conditioning) { return 1e-13 + 64 * DBL_EPSILON * conditioning; }
static double r2_tolerance(const data *d) { return r2_tolerance_of(r2_conditioning(d, NULL)); }

/* --- helpers ------------------------------------------------------------------------------------ */

static const char *const names[] = {"mse", "rmse", "mae", "r2"};

/* mse, rmse, mae, r2; num_outputs 0: rmse and r2 learn k from the first batch. */
static ct_metric_set make_set(int64_t num_outputs) {
    ct_metric_set s = {0};
    for (int kind = 0; kind < 4; kind++) {
        ct_metric *m;
        CT_ASSERT(ct_regression_metric_create((ct_regression_kind)kind, num_outputs, &m) == CT_OK);
        CT_ASSERT(ct_metric_set_add(&s, m) == CT_OK);
    }
    return s;
}

static ct_status feed(ct_metric_set *s, const data *d, int64_t start, int64_t len, int64_t bs) {
    for (int64_t r = start; r < start + len; r += bs) {
        ct_tensor o, l, k;
        int64_t n = CT_MIN(bs, start + len - r);
        ct_eval_batch b = batch_of(d, r, n, &o, &l, &k);
        CT_TRY(ct_metric_set_update(s, &b));
    }
    return CT_OK;
}

/* Counts, sums (bits) and records equal. */
static bool same_state(const ct_metric *a, const ct_metric *b) {
    if (a->n_counts != b->n_counts || a->n_sums != b->n_sums) return false;
    if (a->n_counts && memcmp(a->counts, b->counts, (size_t)a->n_counts * sizeof *a->counts)) return false;
    if (a->n_sums && memcmp(a->sums, b->sums, (size_t)a->n_sums * sizeof *a->sums)) return false;
    if (a->samples.width != b->samples.width || a->samples.n != b->samples.n) return false;
    return a->samples.n == 0 || memcmp(a->samples.values, b->samples.values,
                                       (size_t)(a->samples.n * a->samples.width) * sizeof(double)) == 0;
}

/* Counts and records exact, sums within rel (min/max fields exact anyway). */
static bool near_state(const ct_metric *a, const ct_metric *b, double rel) {
    if (a->n_counts != b->n_counts || a->n_sums != b->n_sums) return false;
    for (int64_t i = 0; i < a->n_counts; i++)
        if (a->counts[i] != b->counts[i]) return false;
    for (int64_t i = 0; i < a->n_sums; i++) {
        double x = a->sums[i], y = b->sums[i];
        if (!(fabs(x - y) <= rel * fmax(fabs(x), fabs(y))) && !(x == y)) return false;
    }
    if (a->samples.width != b->samples.width || a->samples.n != b->samples.n) return false;
    return a->samples.n == 0 || memcmp(a->samples.values, b->samples.values,
                                       (size_t)(a->samples.n * a->samples.width) * sizeof(double)) == 0;
}

static double get_real(const json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static bool is_null(const json_t *o, const char *key) { return json_is_null(json_object_get(o, key)); }

/* r2 near 1 - SSE/SST: compare 1 - r2 (a positive ratio) relatively. */
static void check_r2(const char *what, double got, double want, double rel) {
    if (isnan(want)) {
        CHECK(isnan(got), "%s: r2 %.17g, expected NaN", what, got);
        return;
    }
    double a = 1 - got, b = 1 - want;
    CHECK(fabs(a - b) <= rel * fmax(fabs(a), fabs(b)) || a == b, "%s: r2 %.17g vs reference %.17g", what, got, want);
}

static json_t *compute_set(const ct_metric_set *s, const char *prefix) {
    json_t *out = json_object();
    CHECK_OK(ct_metric_set_compute(s, prefix, out));
    return out;
}

/* --- values ------------------------------------------------------------------------------------- */

static void test_values(void) {
    static const ct_dtype dts[] = {CT_F32, CT_F64};
    for (int trial = 0; trial < 40; trial++) {
        int64_t k = trial % 5 == 0 ? 1 : 1 + (int64_t)ct_rng_below(&rng, 5);
        bool flat = k == 1 && trial % 2 == 0;
        int64_t n = trial % 8 == 7 ? 2000 + (int64_t)ct_rng_below(&rng, 3000) : 1 + (int64_t)ct_rng_below(&rng, 300);
        ct_dtype odt = dts[trial & 1], ldt = dts[(trial >> 1) & 1];
        double mask_p = trial % 3 == 2 ? 0.3 : 0.0;
        data d;
        data_make(&d, n, k, flat, odt, ldt, trial % 4 == 3 ? DYADIC : CONTINUOUS, mask_p);
        ref r = reference(&d);
        ct_metric_set s = make_set(trial % 2 ? k : 0);
        CHECK_OK(feed(&s, &d, 0, n, 1 + (int64_t)ct_rng_below(&rng, (uint64_t)n)));
        json_t *out = compute_set(&s, "eval");
        char what[160];
        snprintf(what, sizeof what, "trial %d (n %lld k %lld flat %d %s/%s mask %.1f)", trial, (long long)n,
                 (long long)k, flat, ct_dtype_name(odt), ct_dtype_name(ldt), mask_p);
        if (r.rows > 0) {
            CHECK_NEAR(get_real(out, "eval_mse"), r.mse, 1e-12);
            CHECK_NEAR(get_real(out, "eval_rmse"), r.rmse, 1e-12);
            CHECK_NEAR(get_real(out, "eval_mae"), r.mae, 1e-12);
            if (r.rows >= 2)
                check_r2(what, get_real(out, "eval_r2"), r.r2, r2_tolerance(&d));
            else
                CHECK(is_null(out, "eval_r2"), "%s: one row: r2 must be null", what);
            /* rmse averages per-output roots: not sqrt(mse) when k > 1 (unless equal errors) */
            if (k == 1) CHECK_NEAR(get_real(out, "eval_rmse"), sqrt(get_real(out, "eval_mse")), 1e-12);
        }
        CHECK(json_object_size(out) == (r.rows > 0 ? 4u : 0u), "%s: %zu keys", what, json_object_size(out));
        json_decref(out);
        ct_metric_set_free(&s);
        data_free(&d);
    }
}

/* --- merge property ----------------------------------------------------------------------------- */

static void test_merge_property(void) {
    for (int trial = 0; trial < 30; trial++) {
        bool dyadic = trial % 2 == 0;
        /* dyadic: k a power of two too, so the rows' mean terms (row sum / k) stay exact */
        int64_t k = dyadic ? INT64_C(1) << ct_rng_below(&rng, 3) : 1 + (int64_t)ct_rng_below(&rng, 4);
        int64_t n = 1 + (int64_t)ct_rng_below(&rng, 400);
        data d;
        data_make(&d, n, k, false, trial % 3 ? CT_F32 : CT_F64, CT_F32, dyadic ? DYADIC : CONTINUOUS,
                  trial % 4 == 1 ? 0.25 : 0.0);
        ct_metric_set whole = make_set(0);
        CHECK_OK(feed(&whole, &d, 0, n, n));

        int parts = 1 + (int)ct_rng_below(&rng, 6);
        ct_metric_set merged = make_set(0);
        int64_t start = 0;
        for (int p = 0; p < parts; p++) {
            int64_t len = p == parts - 1 ? n - start : (int64_t)ct_rng_below(&rng, (uint64_t)(n - start + 1));
            ct_metric_set piece = make_set(0); /* empty pieces stay blank: they must merge too */
            CHECK_OK(feed(&piece, &d, start, len, 1 + (int64_t)ct_rng_below(&rng, 64)));
            CHECK_OK(ct_metric_set_merge(&merged, &piece));
            ct_metric_set_free(&piece);
            start += len;
        }
        for (int i = 0; i < whole.n; i++) {
            if (dyadic)
                CHECK(same_state(whole.items[i], merged.items[i]), "trial %d: %s: merged state of %d pieces differs",
                      trial, names[i], parts);
            else
                CHECK(near_state(whole.items[i], merged.items[i], 1e-12),
                      "trial %d: %s: merged state of %d pieces differs beyond 1e-12", trial, names[i], parts);
        }
        json_t *jw = compute_set(&whole, ""), *jm = compute_set(&merged, "");
        if (dyadic) CHECK(json_equal(jw, jm), "trial %d: dyadic data: merged values differ", trial);
        for (int i = 0; i < 3; i++) {
            double a = get_real(jw, names[i]), b = get_real(jm, names[i]);
            CHECK((isnan(a) && isnan(b)) || fabs(a - b) <= 1e-12 * fabs(a), "trial %d: %s %.17g vs %.17g", trial,
                  names[i], a, b);
        }
        check_r2("merged r2", get_real(jm, "r2"), get_real(jw, "r2"), r2_tolerance(&d));
        json_decref(jw);
        json_decref(jm);

        /* Batch size: rows enter the state one by one, so any batch size gives the same bits. */
        ct_metric_set a = make_set(0), b = make_set(0);
        CHECK_OK(feed(&a, &d, 0, n, 1));
        CHECK_OK(feed(&b, &d, 0, n, 1 + (int64_t)ct_rng_below(&rng, (uint64_t)n)));
        for (int i = 0; i < a.n; i++)
            CHECK(same_state(a.items[i], b.items[i]), "trial %d: %s depends on the batch size", trial, names[i]);
        ct_metric_set_free(&a);
        ct_metric_set_free(&b);

        /* A blank (fresh) state merges both ways and changes nothing; reset empties. */
        ct_metric_set fresh = make_set(0), fresh2 = make_set(0);
        CHECK_OK(ct_metric_set_merge(&merged, &fresh));
        CHECK_OK(ct_metric_set_merge(&fresh2, &whole));
        for (int i = 0; i < whole.n; i++) {
            CHECK(near_state(whole.items[i], merged.items[i], dyadic ? 0 : 1e-12), "merge of a fresh state: %s",
                  names[i]);
            CHECK(same_state(whole.items[i], fresh2.items[i]), "fresh state adopting a used one: %s", names[i]);
        }
        ct_metric_set_reset(&merged);
        json_t *empty = compute_set(&merged, "eval");
        CHECK(json_object_size(empty) == 0, "reset: %zu keys", json_object_size(empty));
        json_decref(empty);
        ct_metric_set_free(&fresh);
        ct_metric_set_free(&fresh2);
        ct_metric_set_free(&merged);
        ct_metric_set_free(&whole);
        data_free(&d);
    }
}

/* --- masks -------------------------------------------------------------------------------------- */

static void test_mask(void) {
    for (int trial = 0; trial < 10; trial++) {
        int64_t k = 1 + (int64_t)ct_rng_below(&rng, 3), n = 10 + (int64_t)ct_rng_below(&rng, 200);
        data d;
        data_make(&d, n, k, false, CT_F32, CT_F64, trial % 2 ? DYADIC : CONTINUOUS, 0.4);
        int64_t real = 0;
        for (int64_t i = 0; i < n; i++)
            real += real_row(&d, i);
        data p;
        data_make(&p, real, k, false, CT_F32, CT_F64, CONTINUOUS, 0.0);
        for (int64_t i = 0, r = 0; i < n; i++) {
            if (!real_row(&d, i)) continue;
            for (int64_t j = 0; j < k; j++) {
                ct_tensor_set(&p.out, r * k + j, p_at(&d, i, j));
                ct_tensor_set(&p.lab, r * k + j, y_at(&d, i, j));
            }
            r++;
        }
        ct_metric_set a = make_set(0), b = make_set(0);
        CHECK_OK(feed(&a, &d, 0, n, 7));
        CHECK_OK(feed(&b, &p, 0, real, 5));
        for (int i = 0; i < a.n; i++)
            CHECK(same_state(a.items[i], b.items[i]), "mask: %s differs from the packed real rows", names[i]);
        json_t *out = compute_set(&a, "eval");
        for (int i = 0; real > 1 && i < 4; i++) {
            char key[32];
            snprintf(key, sizeof key, "eval_%s", names[i]);
            CHECK(isfinite(get_real(out, key)), "mask: %s is %g (a NaN padding row was counted?)", key,
                  get_real(out, key));
        }
        json_decref(out);
        ct_metric_set_free(&a);
        ct_metric_set_free(&b);
        data_free(&p);
        data_free(&d);
    }
    /* Every row masked: nothing counted, no keys, no uncertainty keys, and rmse/r2 stay blank. */
    data d;
    data_make(&d, 6, 2, false, CT_F64, CT_F64, CONTINUOUS, 0.0);
    memset(d.mask.data, 0, 6);
    d.has_mask = true;
    ct_metric_set s = make_set(0);
    CHECK_OK(feed(&s, &d, 0, 6, 4));
    json_t *out = compute_set(&s, "eval");
    ct_uncertainty_config cfg = {.resamples = 50, .confidence = 0.95, .seed = 3};
    CHECK_OK(ct_metric_set_uncertainty(&s, &cfg, "eval", out));
    CHECK(json_object_size(out) == 0, "all masked: %zu keys", json_object_size(out));
    json_decref(out);
    ct_metric_set_free(&s);
    data_free(&d);
}

/* --- edge cases --------------------------------------------------------------------------------- */

/* One batch of literal values [n, k] (k 0: flat [n]). */
static json_t *run_literal(int64_t n, int64_t k, const double *y, const double *p) {
    int64_t shape[2] = {n, k};
    ct_tensor o = ct_tensor_view((void *)p, CT_F64, CT_CPU, k ? 2 : 1, shape);
    ct_tensor l = ct_tensor_view((void *)y, CT_F64, CT_CPU, k ? 2 : 1, shape);
    ct_eval_batch b = {.outputs = &o, .labels = &l};
    ct_metric_set s = make_set(0);
    CHECK_OK(ct_metric_set_update(&s, &b));
    json_t *out = compute_set(&s, "");
    ct_metric_set_free(&s);
    return out;
}

static void test_edge_cases(void) {
    /* Output 0 constant and perfectly predicted (r2 1), output 1: 1 - 1.25 / 2 = 0.375. */
    double y1[] = {2.5, 1, 2.5, 2, 2.5, 3}, p1[] = {2.5, 1, 2.5, 2.5, 2.5, 2};
    json_t *o = run_literal(3, 2, y1, p1);
    CHECK(get_real(o, "r2") == (1.0 + 0.375) / 2, "constant perfect output: r2 %.17g", get_real(o, "r2"));
    CHECK_NEAR(get_real(o, "mse"), 1.25 / 6, 1e-15);
    CHECK_NEAR(get_real(o, "rmse"), (0 + sqrt(1.25 / 3)) / 2, 1e-15);
    CHECK_NEAR(get_real(o, "mae"), 1.5 / 6, 1e-15);
    json_decref(o);
    /* Output 0 constant, imperfect: scikit-learn's 0. */
    p1[0] = 2.0;
    o = run_literal(3, 2, y1, p1);
    CHECK(get_real(o, "r2") == (0.0 + 0.375) / 2, "constant imperfect output: r2 %.17g", get_real(o, "r2"));
    json_decref(o);
    /* A constant that is not exactly representable (0.1): still 0 and 1, from min == max. */
    double y2[] = {0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1}, p2[] = {0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.2};
    o = run_literal(7, 0, y2, p2);
    CHECK(get_real(o, "r2") == 0.0, "constant 0.1, imperfect: r2 %.17g", get_real(o, "r2"));
    json_decref(o);
    o = run_literal(7, 0, y2, y2);
    CHECK(get_real(o, "r2") == 1.0 && get_real(o, "mse") == 0 && get_real(o, "rmse") == 0 && get_real(o, "mae") == 0,
          "all perfect: r2 %g mse %g", get_real(o, "r2"), get_real(o, "mse"));
    json_decref(o);
    /* One row: r2 is NaN (null) as scikit-learn's; the others are numbers. */
    double y3[] = {1.0, 4.0}, p3[] = {2.0, 2.0};
    o = run_literal(1, 2, y3, p3);
    CHECK(is_null(o, "r2"), "one row: r2 null");
    CHECK(get_real(o, "mse") == 2.5 && get_real(o, "rmse") == 1.5 && get_real(o, "mae") == 1.5,
          "one row: mse %g rmse %g mae %g", get_real(o, "mse"), get_real(o, "rmse"), get_real(o, "mae"));
    json_decref(o);
    /* rmse is the mean of per-output roots: errors 1 and 3 give 2, not sqrt(5). */
    double y4[] = {0, 0, 0, 0, 0, 0}, p4[] = {1, 3, -1, -3, 1, 3};
    o = run_literal(3, 2, y4, p4);
    CHECK(get_real(o, "rmse") == 2.0 && get_real(o, "mse") == 5.0, "rmse %g mse %g", get_real(o, "rmse"),
          get_real(o, "mse"));
    CHECK(get_real(o, "r2") == 0.0, "constant zero targets, imperfect: r2 %g", get_real(o, "r2"));
    json_decref(o);
    /* [n] and [n, 1] are the same single output. */
    double y5[] = {1, 2, 4, 8, 3}, p5[] = {1.5, 2, 3, 9, 3.25};
    json_t *flat = run_literal(5, 0, y5, p5), *col = run_literal(5, 1, y5, p5);
    CHECK(json_equal(flat, col), "[n] and [n, 1] differ");
    /* r2 = 1 - SSE/SST: mean 3.6, SST = 6.76+2.56+0.16+19.36+0.36 = 29.2, SSE = .25+0+1+1+.0625 */
    CHECK_NEAR(get_real(flat, "r2"), 1 - 2.3125 / 29.2, 1e-14);
    json_decref(flat);
    json_decref(col);
    /* A NaN target makes every value null (JSON has no NaN), not an error. */
    y5[2] = NAN;
    o = run_literal(5, 0, y5, p5);
    CHECK(is_null(o, "mse") && is_null(o, "rmse") && is_null(o, "mae") && is_null(o, "r2"), "NaN target: nulls");
    json_decref(o);
    /* Nothing seen: no keys. */
    ct_metric_set s = make_set(0);
    o = compute_set(&s, "eval");
    CHECK(json_object_size(o) == 0, "nothing seen: %zu keys", json_object_size(o));
    json_decref(o);
    ct_metric_set_free(&s);
}

/* --- errors ------------------------------------------------------------------------------------- */

static void test_errors(void) {
    ct_metric *r2, *rmse, *mse, *r2_fixed;
    CHECK_OK(ct_regression_metric_create(CT_REGRESSION_R2, 0, &r2));
    CHECK_OK(ct_regression_metric_create(CT_REGRESSION_RMSE, 0, &rmse));
    CHECK_OK(ct_regression_metric_create(CT_REGRESSION_MSE, 0, &mse));
    CHECK_OK(ct_regression_metric_create(CT_REGRESSION_R2, 3, &r2_fixed));
    ct_metric *none = (ct_metric *)&none;
    CHECK_ERR(ct_regression_metric_create(CT_REGRESSION_MAE, -1, &none), CT_ERR_INVALID_ARG,
              "metric 'mae': num_outputs = -1");
    CHECK(none == NULL, "failed create leaves NULL");

    double v[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12.5};
    float vf[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    int64_t vi[12] = {0};
    int64_t s42[2] = {4, 2}, s43[2] = {4, 3}, s34[2] = {3, 4}, s6[1] = {6}, s222[3] = {2, 2, 3};
    ct_tensor o42 = ct_tensor_view(v, CT_F64, CT_CPU, 2, s42), l42 = ct_tensor_view(vf, CT_F32, CT_CPU, 2, s42);
    ct_eval_batch good = {.outputs = &o42, .labels = &l42};
    CHECK_OK(ct_metric_update(r2, &good));
    CHECK_OK(ct_metric_update(rmse, &good));
    CHECK(r2->n_sums == 10 && rmse->n_sums == 2 && rmse->samples.width == 2 && r2->samples.width == 4,
          "k = 2 learnt: r2 %lld sums, rmse %lld sums", (long long)r2->n_sums, (long long)rmse->n_sums);
    double before[10];
    memcpy(before, r2->sums, sizeof before);
    int64_t before_rows = r2->counts[0], before_records = r2->samples.n;

    ct_tensor o43 = ct_tensor_view(v, CT_F64, CT_CPU, 2, s43), l43 = ct_tensor_view(vf, CT_F32, CT_CPU, 2, s43);
    ct_eval_batch b = {.outputs = &o43, .labels = &l43};
    CHECK_ERR(ct_metric_update(r2, &b), CT_ERR_SHAPE, "metric 'r2': outputs [4, 3] f64 cpu: 3 outputs per row",
              "earlier batches had 2");
    CHECK_ERR(ct_metric_update(rmse, &b), CT_ERR_SHAPE, "metric 'rmse': ", "earlier batches had 2");
    CHECK_OK(ct_metric_update(mse, &b)); /* mse takes any k */
    ct_tensor o34 = ct_tensor_view(v, CT_F64, CT_CPU, 2, s34), l34 = ct_tensor_view(vf, CT_F32, CT_CPU, 2, s34);
    b = (ct_eval_batch){.outputs = &o34, .labels = &l34};
    CHECK_ERR(ct_metric_update(r2_fixed, &b), CT_ERR_SHAPE, "metric 'r2': outputs [3, 4] f64 cpu: 4 outputs per row",
              "\"num_outputs\": 3");
    b = (ct_eval_batch){.outputs = &o42, .labels = &l43};
    CHECK_ERR(ct_metric_update(mse, &b), CT_ERR_SHAPE, "metric 'mse': outputs [4, 2] f64 cpu and labels [4, 3] f32 cpu",
              "the same shape");
    ct_tensor l6 = ct_tensor_view(vf, CT_F32, CT_CPU, 1, s6);
    ct_tensor o6 = ct_tensor_view(v, CT_F64, CT_CPU, 1, s6);
    ct_tensor o61 = ct_tensor_view(v, CT_F64, CT_CPU, 2, (int64_t[]){6, 1});
    b = (ct_eval_batch){.outputs = &o61, .labels = &l6};
    CHECK_OK(ct_metric_update(mse, &b)); /* [6, 1] and [6] are one output */
    ct_tensor li = ct_tensor_view(vi, CT_I64, CT_CPU, 1, s6);
    b = (ct_eval_batch){.outputs = &o6, .labels = &li};
    CHECK_ERR(ct_metric_update(mse, &b), CT_ERR_DTYPE, "metric 'mse': labels [6] i64", "float32 or float64");
    ct_tensor o3 = ct_tensor_view(v, CT_F64, CT_CPU, 3, s222), l3 = ct_tensor_view(vf, CT_F32, CT_CPU, 3, s222);
    b = (ct_eval_batch){.outputs = &o3, .labels = &l3};
    CHECK_ERR(ct_metric_update(r2, &b), CT_ERR_SHAPE, "outputs [2, 2, 3] f64 cpu and labels [2, 2, 3] f32 cpu",
              "expected [rows] or [rows, outputs]");
    b = (ct_eval_batch){.outputs = &o42};
    CHECK_ERR(ct_metric_update(r2, &b), CT_ERR_INVALID_ARG, "metric 'r2': needs targets");
    b = (ct_eval_batch){.labels = &l42};
    CHECK_ERR(ct_metric_update(r2, &b), CT_ERR_INVALID_ARG, "metric 'r2': needs the model's outputs");
    ct_tensor oi = ct_tensor_view(vi, CT_I64, CT_CPU, 2, s42);
    b = (ct_eval_batch){.outputs = &oi, .labels = &l42};
    CHECK_ERR(ct_metric_update(r2, &b), CT_ERR_DTYPE, "outputs [4, 2] i64");
    CHECK(memcmp(before, r2->sums, sizeof before) == 0 && r2->counts[0] == before_rows &&
              r2->samples.n == before_records,
          "failed updates leave the state unchanged");

    /* Merges across kinds, across k. */
    CHECK_ERR(ct_metric_merge(r2, rmse), CT_ERR_INVALID_ARG, "metric 'r2': cannot merge the state of metric 'rmse'");
    CHECK_ERR(ct_metric_merge(r2_fixed, r2), CT_ERR_INVALID_ARG, "metric 'r2': cannot merge");
    ct_metric *r2b;
    CHECK_OK(ct_regression_metric_create(CT_REGRESSION_R2, 0, &r2b));
    b = (ct_eval_batch){.outputs = &o6, .labels = &l6};
    CHECK_OK(ct_metric_update(r2b, &b));
    CHECK_ERR(ct_metric_merge(r2, r2b), CT_ERR_INVALID_ARG, "metric 'r2': cannot merge");
    /* A set refuses the same metric twice. */
    ct_metric_set set = {0};
    CHECK_OK(ct_metric_set_add(&set, r2b));
    ct_metric *again;
    CHECK_OK(ct_regression_metric_create(CT_REGRESSION_R2, 0, &again));
    CHECK_ERR(ct_metric_set_add(&set, again), CT_ERR_INVALID_ARG, "metric 'r2' is already in the set");
    ct_metric_set_free(&set);
    ct_metric_free(r2);
    ct_metric_free(rmse);
    ct_metric_free(mse);
    ct_metric_free(r2_fixed);
}

/* --- JSON --------------------------------------------------------------------------------------- */

static ct_status from_text(const char *text, ct_metric **m) {
    json_error_t e;
    json_t *j = json_loads(text, JSON_DECODE_ANY, &e);
    CT_ASSERT(j);
    ct_status s = ct_regression_metric_from_json(j, "metrics[1]", m);
    json_decref(j);
    return s;
}

static void test_json(void) {
    static const char *const ok[] = {
        "\"mse\"", "\"rmse\"", "\"mae\"", "\"r2\"", "{\"type\": \"r2\", \"num_outputs\": 2}", "{\"type\": \"mae\"}"};
    static const char *const want[] = {"mse", "rmse", "mae", "r2", "r2", "mae"};
    for (int i = 0; i < 6; i++) {
        ct_metric *m = NULL;
        CHECK_OK(from_text(ok[i], &m));
        CHECK(m && strcmp(ct_metric_name(m), want[i]) == 0, "%s: name %s", ok[i], m ? ct_metric_name(m) : "NULL");
        if (i == 4) CHECK(m && m->n_sums == 10, "num_outputs 2: declared up front (%lld sums)", (long long)m->n_sums);
        if (i == 3) CHECK(m && m->n_sums == 0, "r2: blank until its first batch");
        ct_metric_free(m);
    }
    for (int i = 0; ct_regression_metric_names[i]; i++)
        CHECK(strcmp(ct_regression_metric_names[i], names[i]) == 0, "names[%d] = %s", i, ct_regression_metric_names[i]);
    ct_metric *m = (ct_metric *)&m;
    CHECK_ERR(from_text("\"r3\"", &m), CT_ERR_CONFIG, "metrics[1]: unknown regression metric 'r3', did you mean 'r2'?");
    CHECK(m == NULL, "failed reader leaves NULL");
    CHECK_ERR(from_text("\"accuracy\"", &m), CT_ERR_CONFIG, "metrics[1]: unknown regression metric 'accuracy'",
              "(known: mse, rmse, mae, r2)");
    CHECK_ERR(from_text("{\"type\": \"rmsee\"}", &m), CT_ERR_CONFIG,
              "metrics[1].type: unknown regression metric 'rmsee', did you mean 'rmse'?");
    CHECK_ERR(from_text("{\"type\": \"r2\", \"num_output\": 2}", &m), CT_ERR_CONFIG,
              "metrics[1]: unknown key 'num_output', did you mean 'num_outputs'?");
    CHECK_ERR(from_text("{\"type\": \"r2\", \"num_outputs\": 0}", &m), CT_ERR_CONFIG,
              "metrics[1].num_outputs: 0; expected an integer >= 1");
    CHECK_ERR(from_text("{\"type\": \"r2\", \"num_outputs\": 1.5}", &m), CT_ERR_CONFIG, "metrics[1].num_outputs");
    CHECK_ERR(from_text("{\"type\": \"r2\", \"num_outputs\": 100000000000}", &m), CT_ERR_CONFIG,
              "metrics[1]: metric 'r2': num_outputs = 100000000000");
    CHECK_ERR(from_text("{\"num_outputs\": 2}", &m), CT_ERR_CONFIG, "metrics[1]: missing required key 'type'");
    CHECK_ERR(from_text("7", &m), CT_ERR_CONFIG, "metrics[1]: expected a metric name");
}

/* --- uncertainty -------------------------------------------------------------------------------- */

typedef struct ref_ctx {
    const data *d;
    int which;           /* 1 rmse, 3 r2 */
    int64_t *real_index; /* record i -> data row */
} ref_ctx;

/* The statistic of a resample computed from the data rows themselves, each taken mult times; for
 * r2 also the resample's conditioning (values[1]), which bounds its rounding as r2_tolerance does
 * the whole data's. */
static void ref_stat(const int64_t *mult, int64_t n, const void *ctx, void *scratch, double *values) {
    const ref_ctx *c = ctx;
    int64_t *w = scratch;
    memset(w, 0, (size_t)c->d->n * sizeof *w);
    for (int64_t i = 0; i < n; i++)
        w[c->real_index[i]] = mult[i];
    ref r = reference_w(c->d, w);
    values[0] = c->which == 1 ? r.rmse : r.r2;
    if (c->which == 3) values[1] = r2_conditioning(c->d, w);
}

static double closed_se(const data *d, bool squared, double *mean) {
    /* row terms t_i, two-pass sample variance */
    long double s = 0, n = 0;
    for (int64_t i = 0; i < d->n; i++) {
        if (!real_row(d, i)) continue;
        long double t = 0;
        for (int64_t j = 0; j < d->k; j++) {
            long double e = (long double)y_at(d, i, j) - p_at(d, i, j);
            t += squared ? e * e : fabsl(e);
        }
        s += t / d->k;
        n++;
    }
    long double m = s / n, v = 0;
    for (int64_t i = 0; i < d->n; i++) {
        if (!real_row(d, i)) continue;
        long double t = 0;
        for (int64_t j = 0; j < d->k; j++) {
            long double e = (long double)y_at(d, i, j) - p_at(d, i, j);
            t += squared ? e * e : fabsl(e);
        }
        v += (t / d->k - m) * (t / d->k - m);
    }
    *mean = (double)m;
    return (double)sqrtl(v / (n - 1) / n);
}

static void test_uncertainty(void) {
    for (int trial = 0; trial < 8; trial++) {
        /* Trials 6, 7: one real row's target is NaN. The values are null, but resamples that do not
         * draw that row are finite, as when resampling rows one by one (the record is selected away,
         * not multiplied by 0); n is small there, so that a fair share of resamples misses it. */
        bool has_nan = trial >= 6;
        int64_t k = 1 + (int64_t)ct_rng_below(&rng, 3);
        int64_t n = has_nan ? 10 + (int64_t)ct_rng_below(&rng, 30) : 5 + (int64_t)ct_rng_below(&rng, 150);
        data d;
        data_make(&d, n, k, false, trial % 2 ? CT_F32 : CT_F64, CT_F64, CONTINUOUS, trial % 3 == 0 ? 0.2 : 0.0);
        if (has_nan) {
            int64_t r = (int64_t)ct_rng_below(&rng, (uint64_t)n);
            ((uint8_t *)d.mask.data)[r] = 1;
            ct_tensor_set(&d.lab, r * k + (int64_t)ct_rng_below(&rng, (uint64_t)k), NAN);
        }
        ct_metric_set s = make_set(0);
        CHECK_OK(feed(&s, &d, 0, n, 1 + (int64_t)ct_rng_below(&rng, 40)));
        ct_uncertainty_config cfg = {.resamples = 200 + (int64_t)ct_rng_below(&rng, 300),
                                     .confidence = trial % 2 ? 0.95 : 0.9,
                                     .seed = ct_rng_u64(&rng)};
        json_t *out = compute_set(&s, "eval");
        CHECK_OK(ct_metric_set_uncertainty(&s, &cfg, "eval", out));
        double z = ct_confidence_z(cfg.confidence);
        for (int sq = 0; sq < 2 && !has_nan; sq++) {
            double mean, se = closed_se(&d, sq == 1, &mean);
            const char *nm = sq ? "mse" : "mae";
            char key[64];
            snprintf(key, sizeof key, "eval_%s_stderr", nm);
            CHECK_NEAR(get_real(out, key), se, 1e-9);
            snprintf(key, sizeof key, "eval_%s_ci_high", nm);
            CHECK_NEAR(get_real(out, key), mean + z * se, 1e-9);
            snprintf(key, sizeof key, "eval_%s_ci_low", nm);
            CHECK_NEAR(get_real(out, key), fmax(0.0, mean - z * se), 1e-9);
        }
        /* rmse and r2: the same resamples through the reference, rows materialised. */
        ref_ctx rc = {.d = &d, .real_index = malloc((size_t)n * sizeof(int64_t))};
        int64_t real = 0;
        for (int64_t i = 0; i < n; i++)
            if (real_row(&d, i)) rc.real_index[real++] = i;
        double *vals = malloc(2 * (size_t)cfg.resamples * sizeof *vals);
        for (rc.which = 1; rc.which <= 3; rc.which += 2) {
            CHECK_OK(ct_bootstrap_samples(&cfg, real, ref_stat, &rc, (size_t)n * sizeof(int64_t), rc.which == 3 ? 2 : 1,
                                          vals));
            double lo, hi, se = ct_bootstrap_stderr(vals, cfg.resamples);
            CHECK_OK(ct_bootstrap_interval(vals, cfg.resamples, cfg.confidence, &lo, &hi));
            const char *nm = rc.which == 1 ? "rmse" : "r2";
            char kse[64], klo[64], khi[64];
            snprintf(kse, sizeof kse, "eval_%s_stderr", nm);
            snprintf(klo, sizeof klo, "eval_%s_ci_low", nm);
            snprintf(khi, sizeof khi, "eval_%s_ci_high", nm);
            CHECK_NEAR(get_real(out, kse), se, 1e-8);
            if (rc.which == 1) {
                CHECK_NEAR(get_real(out, klo), lo, 1e-10);
                CHECK_NEAR(get_real(out, khi), hi, 1e-10);
            } else {
                /* An interval end is some resample's r2: within the bound of the worst-conditioned
                 * resample (a resample that repeats a few rows can have a far smaller SST than the
                 * data; the data's own bound failed on one at r2 = -6.26, off by 2e-12). */
                double worst = r2_conditioning(&d, NULL);
                for (int64_t b = 0; b < cfg.resamples; b++) worst = fmax(worst, vals[cfg.resamples + b]);
                check_r2("r2 ci_low", get_real(out, klo), lo, 4 * r2_tolerance_of(worst));
                check_r2("r2 ci_high", get_real(out, khi), hi, 4 * r2_tolerance_of(worst));
            }
            CHECK(get_real(out, klo) <= get_real(out, khi), "%s: interval [%g, %g]", nm, get_real(out, klo),
                  get_real(out, khi));
            if (has_nan) CHECK(isfinite(get_real(out, klo)) && isfinite(se), "NaN row: %s has a finite interval", nm);
        }
        free(vals);
        free(rc.real_index);
        CHECK(json_object_size(out) == 16, "trial %d: %zu keys (4 values x 4)", trial, json_object_size(out));
        if (has_nan)
            CHECK(is_null(out, "eval_rmse") && is_null(out, "eval_r2") && is_null(out, "eval_mse") &&
                      is_null(out, "eval_mse_stderr") && is_null(out, "eval_mae_ci_low"),
                  "NaN row: null values, null closed forms");

        /* Same seed: the same bits, whatever the number of threads; another seed: other values. */
        int threads = omp_get_max_threads();
        omp_set_num_threads(1);
        json_t *again = json_object();
        CHECK_OK(ct_metric_set_uncertainty(&s, &cfg, "eval", again));
        omp_set_num_threads(threads > 1 ? threads : 2);
        json_t *again2 = json_object();
        CHECK_OK(ct_metric_set_uncertainty(&s, &cfg, "eval", again2));
        omp_set_num_threads(threads);
        json_t *only = json_deep_copy(out);
        for (int i = 0; i < 4; i++) {
            char key[32];
            snprintf(key, sizeof key, "eval_%s", names[i]);
            json_object_del(only, key);
        }
        CHECK(json_equal(only, again) && json_equal(only, again2), "uncertainty depends on the thread count");
        ct_uncertainty_config other = cfg;
        other.seed ^= 0x9e3779b97f4a7c15ull;
        json_t *o2 = json_object();
        CHECK_OK(ct_metric_set_uncertainty(&s, &other, "eval", o2));
        CHECK(get_real(o2, "eval_rmse_stderr") != get_real(only, "eval_rmse_stderr"), "another seed, same rmse stderr");
        CHECK(has_nan || get_real(o2, "eval_mse_stderr") == get_real(only, "eval_mse_stderr"),
              "closed form depends on the seed");
        json_decref(o2);
        json_decref(only);
        json_decref(again);
        json_decref(again2);

        /* resamples = 0: closed forms only. */
        ct_uncertainty_config none = {.resamples = 0, .confidence = 0.95};
        json_t *o0 = json_object();
        CHECK_OK(ct_metric_set_uncertainty(&s, &none, "eval", o0));
        CHECK(json_object_size(o0) == 6 && json_object_get(o0, "eval_mae_ci_low") &&
                  !json_object_get(o0, "eval_r2_stderr"),
              "resamples 0: %zu keys", json_object_size(o0));
        json_decref(o0);
        json_decref(out);
        ct_metric_set_free(&s);
        data_free(&d);
    }

    /* Large sample, one output: the bootstrap standard error of rmse agrees with the delta method's
     * se(mse) / (2 rmse) (both estimate the same spread; 2000 resamples give ~2% noise). */
    data d;
    data_make(&d, 4000, 1, true, CT_F64, CT_F64, CONTINUOUS, 0.0);
    ct_metric_set s = make_set(0);
    CHECK_OK(feed(&s, &d, 0, 4000, 512));
    ct_uncertainty_config cfg = {.resamples = 2000, .confidence = 0.95, .seed = ct_rng_u64(&rng)};
    json_t *out = compute_set(&s, "");
    CHECK_OK(ct_metric_set_uncertainty(&s, &cfg, "", out));
    double delta = get_real(out, "mse_stderr") / (2 * get_real(out, "rmse"));
    double boot = get_real(out, "rmse_stderr");
    CHECK(fabs(boot - delta) <= 0.15 * delta, "rmse bootstrap stderr %g vs delta method %g", boot, delta);
    CHECK(get_real(out, "rmse_ci_low") < get_real(out, "rmse") && get_real(out, "rmse") < get_real(out, "rmse_ci_high"),
          "rmse inside its interval");
    CHECK(get_real(out, "r2_ci_low") < get_real(out, "r2") && get_real(out, "r2") < get_real(out, "r2_ci_high"),
          "r2 inside its interval");
    json_decref(out);
    ct_metric_set_free(&s);
    data_free(&d);

    /* One row: mse's standard error is undefined (null); r2's resamples are all NaN (null). */
    double y[] = {1, 2}, p[] = {0, 0};
    int64_t shape[2] = {1, 2};
    ct_tensor o = ct_tensor_view(p, CT_F64, CT_CPU, 2, shape), l = ct_tensor_view(y, CT_F64, CT_CPU, 2, shape);
    ct_metric_set one = make_set(0);
    CHECK_OK(ct_metric_set_update(&one, &(ct_eval_batch){.outputs = &o, .labels = &l}));
    out = json_object();
    CHECK_OK(ct_metric_set_uncertainty(&one, &cfg, "eval", out));
    CHECK(is_null(out, "eval_mse_stderr") && is_null(out, "eval_r2_stderr") && is_null(out, "eval_r2_ci_low"),
          "one row: undefined uncertainty is null");
    /* every resample is the same row: 0, up to the rounding of the resamples' mean (~m eps |rmse|) */
    CHECK(fabs(get_real(out, "eval_rmse_stderr")) <= 1e-12 * 1.5, "one row: rmse stderr %g",
          get_real(out, "eval_rmse_stderr"));
    json_decref(out);
    ct_metric_set_free(&one);
}


int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--compute") == 0)
        return ct_test_metric_compute_main("test_metrics_regression", argv[2], CT_F32, NULL);
    ct_test_begin("test_metrics_regression");
    ct_rng_init(&rng, ct_test_seed, 0, 0);
    test_values();
    test_merge_property();
    test_mask();
    test_edge_cases();
    test_errors();
    test_json();
    test_uncertainty();
    return ct_test_finish();
}
