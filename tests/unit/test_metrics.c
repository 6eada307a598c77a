/* Metrics: loss, accuracy and top-k accuracy against references written here a different way
 * (accuracy by "first index holding the maximum", top-k by sorting (score, index) pairs the way
 * scikit-learn's stable argsort does), on fresh random data with and without ties and NaN, float32
 * and float64 outputs, int64 and int32 labels; the sufficient-statistics property (the merged states
 * of any random split equal one state over everything, exactly; results do not depend on the batch
 * size); masks (padding rows with any label are ignored); edge cases (a class never predicted, all
 * right, all wrong, one sample, k >= C, one class, no samples); keys and prefixes; a user metric
 * with MIN/MAX fields and a destroy override; and every error message. The metric core's newer parts:
 * state declarations of any size, blank states that adopt the other's declaration on merge,
 * per-sample records (append, reserve, reset, merge appending in order, width mismatches), the
 * uncertainty wrappers, and the closed forms of the basic metrics (accuracy and top-k: Wilson;
 * loss: the ratio estimator from per-row losses, checked against its direct formula, and no keys
 * when a batch lacked per-row losses), with the per-row tensors' validation.
 *
 * `test_metrics --compute IN.h5` is the mode tests/oracle/test_metrics.py drives to compare with
 * scikit-learn: IN.h5 holds attribute "spec" (JSON: "metrics", "prefix", "batch_size", "ranks") and
 * datasets outputs [N, C], labels [N], optional mask [N] u8 and losses [N] f64 (a batch's loss is
 * the sum over its real rows, its count their number). Batches are dealt round-robin to `ranks`
 * metric sets, which are then merged; the computed JSON object is printed on stdout.
 *
 * Why one file of over 600 lines: the metric core and the basic metrics are checked through the
 * same references written here, which the --compute mode for scikit-learn uses too. */
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

enum { CONTINUOUS, TIES, TIES_NAN };

typedef struct data {
    int64_t n, c;
    ct_tensor outputs, labels, mask;
    double *losses;
    bool has_mask;
} data;

static void data_make(data *d, int64_t n, int64_t c, ct_dtype odt, ct_dtype ldt, int kind, double mask_p) {
    memset(d, 0, sizeof *d);
    d->n = n;
    d->c = c;
    int64_t os[2] = {n, c};
    CT_ASSERT(ct_tensor_alloc(&d->outputs, odt, CT_CPU, 2, os) == CT_OK);
    CT_ASSERT(ct_tensor_alloc(&d->labels, ldt, CT_CPU, 1, &n) == CT_OK);
    CT_ASSERT(ct_tensor_alloc(&d->mask, CT_U8, CT_CPU, 1, &n) == CT_OK);
    d->losses = malloc((size_t)(n ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n * c; i++) {
        double v = kind == CONTINUOUS ? 3.0 * ct_rng_normal(&rng) : (double)ct_rng_below(&rng, 3);
        if (kind == TIES_NAN && ct_rng_uniform(&rng) < 0.05) v = NAN;
        ct_tensor_set(&d->outputs, i, v);
    }
    d->has_mask = mask_p > 0;
    for (int64_t i = 0; i < n; i++) {
        bool real = !(ct_rng_uniform(&rng) < mask_p);
        ((uint8_t *)d->mask.data)[i] = real;
        /* Padding rows get labels no metric would accept, so counting one shows. */
        int64_t y = real ? (int64_t)ct_rng_below(&rng, (uint64_t)c) : (ct_rng_below(&rng, 2) ? -1 : c + 7);
        ct_tensor_set(&d->labels, i, (double)y);
        d->losses[i] = (double)(1 + ct_rng_below(&rng, 64)) / 8.0; /* dyadic: sums exact in any order */
    }
}

static void data_free(data *d) {
    ct_tensor_free(&d->outputs);
    ct_tensor_free(&d->labels);
    ct_tensor_free(&d->mask);
    free(d->losses);
}

static bool real_row(const data *d, int64_t i) { return !d->has_mask || ((uint8_t *)d->mask.data)[i]; }

/* Rows [start, start + len) as a batch, with the loss of its real rows. */
static ct_eval_batch batch_of(const data *d, int64_t start, int64_t len, ct_tensor *o, ct_tensor *l, ct_tensor *k) {
    *o = ct_tensor_rows(&d->outputs, start, len);
    *l = ct_tensor_rows(&d->labels, start, len);
    *k = ct_tensor_rows(&d->mask, start, len);
    ct_eval_batch b = {.outputs = o, .labels = l, .mask = d->has_mask ? k : NULL};
    for (int64_t i = start; i < start + len; i++)
        if (real_row(d, i)) {
            b.loss.sum += d->losses[i];
            b.loss.count += 1;
        }
    return b;
}

/* --- references --------------------------------------------------------------------------------- */

static double score(const data *d, int64_t i, int64_t j) { return ct_tensor_get(&d->outputs, i * d->c + j); }

/* The first position holding the maximum; NaN is the maximum when present (numpy.argmax). */
static int64_t ref_argmax(const data *d, int64_t i) {
    for (int64_t j = 0; j < d->c; j++)
        if (isnan(score(d, i, j))) return j;
    double m = -INFINITY;
    for (int64_t j = 0; j < d->c; j++) m = fmax(m, score(d, i, j));
    for (int64_t j = 0;; j++)
        if (score(d, i, j) == m) return j;
}

typedef struct pair {
    double v;
    int64_t j;
} pair;

/* Ascending (NaN last), equal values in index order: numpy's stable argsort. */
static int cmp_pair(const void *pa, const void *pb) {
    const pair *a = pa, *b = pb;
    bool na = isnan(a->v), nb = isnan(b->v);
    if (na != nb) return na ? 1 : -1;
    if (!na && a->v != b->v) return a->v < b->v ? -1 : 1;
    return a->j < b->j ? -1 : a->j > b->j;
}

/* scikit-learn: argsort(kind="mergesort")[::-1][:k] contains the label. */
static bool ref_in_top_k(const data *d, int64_t i, int64_t y, int64_t k) {
    pair *p = malloc((size_t)d->c * sizeof *p);
    for (int64_t j = 0; j < d->c; j++) p[j] = (pair){score(d, i, j), j};
    qsort(p, (size_t)d->c, sizeof *p, cmp_pair);
    bool hit = false;
    for (int64_t r = 0; r < k && r < d->c; r++) hit |= p[d->c - 1 - r].j == y;
    free(p);
    return hit;
}

typedef struct ref {
    int64_t correct, top_hits, total;
    double loss_sum;
} ref;

static ref reference(const data *d, int64_t k) {
    ref r = {0};
    for (int64_t i = 0; i < d->n; i++) {
        if (!real_row(d, i)) continue;
        int64_t y = (int64_t)ct_tensor_get(&d->labels, i);
        r.correct += ref_argmax(d, i) == y;
        r.top_hits += ref_in_top_k(d, i, y, k);
        r.total++;
        r.loss_sum += d->losses[i];
    }
    return r;
}

/* --- helpers ------------------------------------------------------------------------------------ */

/* loss, accuracy, top_k. */
static ct_metric_set make_set(int64_t k) {
    ct_metric_set s = {0};
    ct_metric *m;
    CT_ASSERT(ct_loss_metric_create(&m) == CT_OK && ct_metric_set_add(&s, m) == CT_OK);
    CT_ASSERT(ct_accuracy_metric_create(&m) == CT_OK && ct_metric_set_add(&s, m) == CT_OK);
    CT_ASSERT(ct_top_k_accuracy_metric_create(k, &m) == CT_OK && ct_metric_set_add(&s, m) == CT_OK);
    return s;
}

/* Feeds rows [start, start+len) in batches of `bs`. */
static ct_status feed(ct_metric_set *s, const data *d, int64_t start, int64_t len, int64_t bs) {
    for (int64_t r = start; r < start + len; r += bs) {
        ct_tensor o, l, k;
        int64_t n = CT_MIN(bs, start + len - r);
        ct_eval_batch b = batch_of(d, r, n, &o, &l, &k);
        CT_TRY(ct_metric_set_update(s, &b));
    }
    return CT_OK;
}

static bool same_state(const ct_metric *a, const ct_metric *b) {
    if (a->n_counts != b->n_counts || a->n_sums != b->n_sums) return false;
    for (int i = 0; i < a->n_counts; i++)
        if (a->counts[i] != b->counts[i]) return false;
    for (int i = 0; i < a->n_sums; i++)
        if (memcmp(&a->sums[i], &b->sums[i], sizeof(double)) != 0) return false;
    return true;
}

static double get_real(const json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* --- tests -------------------------------------------------------------------------------------- */

/* Values against the references, all dtypes and data kinds, small and large (threaded) batches. */
static void test_values(void) {
    static const ct_dtype odts[] = {CT_F32, CT_F64};
    static const ct_dtype ldts[] = {CT_I64, CT_I32};
    for (int trial = 0; trial < 24; trial++) {
        int kind = trial % 3;
        int64_t c = 1 + (int64_t)ct_rng_below(&rng, 12);
        int64_t n = trial % 8 == 7 ? 4000 + (int64_t)ct_rng_below(&rng, 4000) : 1 + (int64_t)ct_rng_below(&rng, 300);
        int64_t k = 1 + (int64_t)ct_rng_below(&rng, (uint64_t)c); /* k == C included; above C is refused */
        ct_dtype odt = odts[trial & 1], ldt = ldts[(trial >> 1) & 1];
        double mask_p = trial % 4 == 3 ? 0.3 : 0.0;
        data d;
        data_make(&d, n, c, odt, ldt, kind, mask_p);
        ref r = reference(&d, k);
        ct_metric_set s = make_set(k);
        CHECK_OK(feed(&s, &d, 0, n, 1 + (int64_t)ct_rng_below(&rng, (uint64_t)n)));
        json_t *out = json_object();
        CHECK_OK(ct_metric_set_compute(&s, "eval", out));
        char topk[64];
        snprintf(topk, sizeof topk, "eval_top_%lld_accuracy", (long long)k);
        if (r.total > 0) {
            CHECK(get_real(out, "eval_accuracy") == (double)r.correct / (double)r.total,
                  "trial %d (n %lld c %lld kind %d %s): accuracy %.17g, reference %lld/%lld", trial, (long long)n,
                  (long long)c, kind, ct_dtype_name(odt), get_real(out, "eval_accuracy"), (long long)r.correct,
                  (long long)r.total);
            CHECK(get_real(out, topk) == (double)r.top_hits / (double)r.total,
                  "trial %d (n %lld c %lld k %lld kind %d): %s %.17g, reference %lld/%lld", trial, (long long)n,
                  (long long)c, (long long)k, kind, topk, get_real(out, topk), (long long)r.top_hits,
                  (long long)r.total);
            CHECK(get_real(out, "eval_loss") == r.loss_sum / (double)r.total, "trial %d: loss %.17g vs %.17g", trial,
                  get_real(out, "eval_loss"), r.loss_sum / (double)r.total);
            if (k >= c) CHECK(r.top_hits == r.total, "k >= C must hit every row");
            if (c == 1) CHECK(r.correct == r.total, "one class: always right");
        }
        CHECK(json_object_size(out) == (r.total > 0 ? 3u : 0u), "trial %d: %zu keys", trial, json_object_size(out));
        json_decref(out);
        ct_metric_set_free(&s);
        data_free(&d);
    }
}

/* Any split into pieces, each into its own state (a rank), merged == one state over all, bit for bit;
 * and the batch size does not matter. */
static void test_merge_property(void) {
    for (int trial = 0; trial < 20; trial++) {
        int64_t c = 2 + (int64_t)ct_rng_below(&rng, 9), n = 1 + (int64_t)ct_rng_below(&rng, 500);
        int64_t k = 1 + (int64_t)ct_rng_below(&rng, (uint64_t)c);
        data d;
        data_make(&d, n, c, trial & 1 ? CT_F64 : CT_F32, CT_I64, trial % 3, trial % 2 ? 0.25 : 0.0);
        ct_metric_set whole = make_set(k);
        CHECK_OK(feed(&whole, &d, 0, n, n));

        int parts = 1 + (int)ct_rng_below(&rng, 6);
        ct_metric_set merged = make_set(k);
        int64_t start = 0;
        for (int p = 0; p < parts; p++) {
            int64_t len = p == parts - 1 ? n - start : (int64_t)ct_rng_below(&rng, (uint64_t)(n - start + 1));
            ct_metric_set piece = make_set(k);
            CHECK_OK(feed(&piece, &d, start, len, 1 + (int64_t)ct_rng_below(&rng, 64)));
            CHECK_OK(ct_metric_set_merge(&merged, &piece));
            ct_metric_set_free(&piece);
            start += len;
        }
        for (int i = 0; i < whole.n; i++)
            CHECK(same_state(whole.items[i], merged.items[i]), "trial %d: metric %s: merged state of %d pieces differs",
                  trial, ct_metric_name(whole.items[i]), parts);

        /* Batch-size independence: the same numbers for two batch sizes. */
        ct_metric_set a = make_set(k), b = make_set(k);
        CHECK_OK(feed(&a, &d, 0, n, 1));
        CHECK_OK(feed(&b, &d, 0, n, 1 + (int64_t)ct_rng_below(&rng, (uint64_t)n)));
        json_t *ja = json_object(), *jb = json_object();
        CHECK_OK(ct_metric_set_compute(&a, "", ja));
        CHECK_OK(ct_metric_set_compute(&b, "", jb));
        CHECK(json_equal(ja, jb), "trial %d: results depend on the batch size", trial);
        json_decref(ja);
        json_decref(jb);
        ct_metric_set_free(&a);
        ct_metric_set_free(&b);

        /* Merging a fresh state changes nothing; reset returns to fresh. */
        ct_metric_set fresh = make_set(k);
        CHECK_OK(ct_metric_set_merge(&merged, &fresh));
        for (int i = 0; i < whole.n; i++) CHECK(same_state(whole.items[i], merged.items[i]), "merge of a fresh state");
        ct_metric_set_reset(&merged);
        for (int i = 0; i < whole.n; i++) CHECK(same_state(fresh.items[i], merged.items[i]), "reset");
        ct_metric_set_free(&fresh);
        ct_metric_set_free(&merged);
        ct_metric_set_free(&whole);
        data_free(&d);
    }
}

/* The mask: padding rows are skipped whatever their labels and outputs; the same numbers as the
 * real rows alone. */
static void test_mask(void) {
    for (int trial = 0; trial < 10; trial++) {
        int64_t c = 3 + (int64_t)ct_rng_below(&rng, 6), n = 20 + (int64_t)ct_rng_below(&rng, 200);
        data d;
        data_make(&d, n, c, CT_F32, CT_I64, trial % 3, 0.4);
        /* The real rows, packed. */
        data p;
        int64_t real = 0;
        for (int64_t i = 0; i < n; i++) real += real_row(&d, i);
        data_make(&p, real, c, CT_F32, CT_I64, CONTINUOUS, 0.0);
        for (int64_t i = 0, r = 0; i < n; i++) {
            if (!real_row(&d, i)) continue;
            for (int64_t j = 0; j < c; j++) ct_tensor_set(&p.outputs, r * c + j, score(&d, i, j));
            ct_tensor_set(&p.labels, r, ct_tensor_get(&d.labels, i));
            p.losses[r] = d.losses[i];
            r++;
        }
        ct_metric_set a = make_set(2), b = make_set(2);
        CHECK_OK(feed(&a, &d, 0, n, 7));
        CHECK_OK(feed(&b, &p, 0, real, 5));
        for (int i = 0; i < a.n; i++) CHECK(same_state(a.items[i], b.items[i]), "mask: %s", ct_metric_name(a.items[i]));
        CHECK(a.items[1]->counts[1] == real, "accuracy total %lld, real rows %lld", (long long)a.items[1]->counts[1],
              (long long)real);
        ct_metric_set_free(&a);
        ct_metric_set_free(&b);
        data_free(&p);
        data_free(&d);
    }
    /* Every row masked: nothing counted, no keys. */
    data d;
    data_make(&d, 5, 3, CT_F64, CT_I64, CONTINUOUS, 0.0);
    memset(d.mask.data, 0, 5);
    d.has_mask = true;
    ct_metric_set s = make_set(1);
    CHECK_OK(feed(&s, &d, 0, 5, 2));
    json_t *out = json_object();
    CHECK_OK(ct_metric_set_compute(&s, "eval", out));
    CHECK(json_object_size(out) == 0, "all masked: %zu keys", json_object_size(out));
    json_decref(out);
    ct_metric_set_free(&s);
    data_free(&d);
}

/* One batch from literal values. */
static json_t *run_literal(int64_t n, int64_t c, const double *scores, const int64_t *labels, int64_t k,
                           const char *prefix) {
    int64_t os[2] = {n, c};
    ct_tensor o = ct_tensor_view((void *)scores, CT_F64, CT_CPU, 2, os);
    ct_tensor l = ct_tensor_view((void *)labels, CT_I64, CT_CPU, 1, &n);
    ct_eval_batch b = {.outputs = &o, .labels = &l, .loss = {1.5 * (double)n, (double)n}};
    ct_metric_set s = make_set(k);
    json_t *out = json_object();
    CHECK_OK(ct_metric_set_update(&s, &b));
    CHECK_OK(ct_metric_set_compute(&s, prefix, out));
    ct_metric_set_free(&s);
    return out;
}

static void test_edge_cases(void) {
    /* Class 2 never predicted; labels include it. */
    double s1[] = {5, 1, 0, 0, 4, 1, 3, 2, 1, 0, 9, 8};
    int64_t y1[] = {0, 1, 2, 1};
    json_t *o = run_literal(4, 3, s1, y1, 2, "eval");
    CHECK(get_real(o, "eval_accuracy") == 0.75, "never predicted: accuracy %g", get_real(o, "eval_accuracy"));
    CHECK(get_real(o, "eval_top_2_accuracy") == 0.75, "never predicted: top_2 %g", get_real(o, "eval_top_2_accuracy"));
    CHECK(get_real(o, "eval_loss") == 1.5, "loss %g", get_real(o, "eval_loss"));
    json_decref(o);
    /* All right, all wrong. */
    int64_t right[] = {0, 1, 0, 1}, wrong[] = {2, 2, 1, 0};
    o = run_literal(4, 3, s1, right, 1, "");
    CHECK(get_real(o, "accuracy") == 1.0 && get_real(o, "top_1_accuracy") == 1.0, "all right");
    CHECK(json_object_get(o, "loss") != NULL, "prefix \"\": key 'loss'");
    json_decref(o);
    o = run_literal(4, 3, s1, wrong, 1, "test");
    CHECK(get_real(o, "test_accuracy") == 0.0 && get_real(o, "test_top_1_accuracy") == 0.0, "all wrong");
    json_decref(o);
    /* One sample; k >= C. */
    double s2[] = {0.1, 0.7, 0.2};
    int64_t y2[] = {2};
    o = run_literal(1, 3, s2, y2, 3, "eval");
    CHECK(get_real(o, "eval_accuracy") == 0.0 && get_real(o, "eval_top_3_accuracy") == 1.0, "one sample, k = C");
    json_decref(o);
    o = run_literal(1, 3, s2, y2, 2, "eval");
    CHECK(get_real(o, "eval_top_2_accuracy") == 1.0, "one sample, k = 2 (second best)");
    json_decref(o);
    /* Ties: argmax takes the lowest index; top_k ranks the higher index first (scikit-learn). */
    double s3[] = {1, 1, 1, 2, 5, 5, 5, 0};
    int64_t y3a[] = {0, 1}, y3b[] = {2, 2};
    o = run_literal(2, 4, s3, y3a, 1, "eval");
    CHECK(get_real(o, "eval_accuracy") == 0.0, "ties: row 0 argmax is 3, row 1 argmax is 0: %g",
          get_real(o, "eval_accuracy"));
    json_decref(o);
    o = run_literal(2, 4, s3, y3b, 1, "eval");
    CHECK(get_real(o, "eval_top_1_accuracy") == 0.5, "ties: class 2 is top of [5,5,5,0]: %g",
          get_real(o, "eval_top_1_accuracy"));
    json_decref(o);
    int64_t y3c[] = {0, 0};
    o = run_literal(2, 4, s3, y3c, 3, "eval");
    /* Row 0: 3 > then 2, 1 tie above 0: rank 3, miss at k=3. Row 1: 2, 1 above 0: rank 2, hit. */
    CHECK(get_real(o, "eval_top_3_accuracy") == 0.5, "ties k = 3: %g", get_real(o, "eval_top_3_accuracy"));
    json_decref(o);
    /* NaN is the largest score. */
    double s4[] = {1, NAN, 3, NAN, 0, NAN};
    int64_t y4[] = {1, 0};
    o = run_literal(2, 3, s4, y4, 1, "eval");
    CHECK(get_real(o, "eval_accuracy") == 1.0, "NaN argmax (the first NaN): %g", get_real(o, "eval_accuracy"));
    CHECK(get_real(o, "eval_top_1_accuracy") == 0.5, "NaN top_1 (row 1: the later NaN wins): %g",
          get_real(o, "eval_top_1_accuracy"));
    json_decref(o);
    /* One class. */
    double s5[] = {-3, 2};
    int64_t y5[] = {0, 0};
    o = run_literal(2, 1, s5, y5, 4, "eval");
    CHECK(get_real(o, "eval_accuracy") == 1.0 && get_real(o, "eval_top_4_accuracy") == 1.0, "one class");
    json_decref(o);

    /* No data: no keys. A NaN loss: null. */
    ct_metric_set s = make_set(5);
    json_t *out = json_object();
    CHECK_OK(ct_metric_set_compute(&s, "eval", out));
    CHECK(json_object_size(out) == 0, "nothing seen: %zu keys", json_object_size(out));
    ct_eval_batch nan_loss = {.loss = {NAN, 4}};
    CHECK_OK(ct_metric_update(s.items[0], &nan_loss));
    CHECK_OK(ct_metric_set_compute(&s, "eval", out));
    CHECK(json_is_null(json_object_get(out, "eval_loss")), "NaN loss is null");
    json_decref(out);
    /* A loss-only batch (no outputs, no labels) feeds the loss metric. */
    ct_metric_reset(s.items[0]);
    ct_eval_batch only_loss = {.loss = {3.0, 2.0}};
    CHECK_OK(ct_metric_update(s.items[0], &only_loss));
    out = json_object();
    CHECK_OK(ct_metric_compute(s.items[0], NULL, out));
    CHECK(get_real(out, "loss") == 1.5, "loss-only batch: %g", get_real(out, "loss"));
    json_decref(out);
    ct_metric_set_free(&s);
}

/* --- a user metric: MIN/MAX fields, a destroy override, an old-size ops table ---------------------- */

typedef struct range_metric {
    ct_metric base;
    int *destroyed;
} range_metric;

enum { MIN_LABEL, MAX_LABEL };
enum { MIN_SCORE, MAX_SCORE, SUM_SCORE };

static ct_status range_update(ct_metric *m, const ct_eval_batch *b) {
    int64_t rows, c;
    CT_TRY(ct_metric_check_classification(b, &rows, &c));
    for (int64_t i = 0; i < rows; i++) {
        if (!ct_metric_row_real(b, i)) continue;
        int64_t y = ct_metric_label(b->labels, i);
        m->counts[MIN_LABEL] = CT_MIN(m->counts[MIN_LABEL], y);
        m->counts[MAX_LABEL] = CT_MAX(m->counts[MAX_LABEL], y);
        for (int64_t j = 0; j < c; j++) {
            double v = ct_tensor_get(b->outputs, i * c + j);
            m->sums[MIN_SCORE] = fmin(m->sums[MIN_SCORE], v);
            m->sums[MAX_SCORE] = fmax(m->sums[MAX_SCORE], v);
            m->sums[SUM_SCORE] += v;
        }
    }
    return CT_OK;
}

static ct_status range_compute(const ct_metric *m, const char *prefix, json_t *out) {
    CT_TRY(ct_metric_put(out, prefix, "min_score", m->sums[MIN_SCORE]));
    return ct_metric_put(out, prefix, "max_label", (double)m->counts[MAX_LABEL]);
}

static void range_destroy(ct_metric *m) {
    (*ct_container_of(m, range_metric, base)->destroyed)++;
    ct_metric_default_destroy(m);
}

static bool never_called(const ct_metric *a, const ct_metric *b) {
    ct_abort_at(__FILE__, __LINE__, "same_config beyond the table's size was called");
}

/* Written before same_config existed: its size stops at destroy, so the member must be ignored. */
static const ct_metric_ops range_ops = {.size = offsetof(ct_metric_ops, same_config),
                                        .name = "range",
                                        .update = range_update,
                                        .compute = range_compute,
                                        .destroy = range_destroy,
                                        .same_config = never_called};

static ct_metric *range_create(int *destroyed) {
    range_metric *r = calloc(1, sizeof *r);
    static const ct_reduce_op cops[] = {CT_REDUCE_MIN, CT_REDUCE_MAX};
    static const ct_reduce_op sops[] = {CT_REDUCE_MIN, CT_REDUCE_MAX, CT_REDUCE_SUM};
    CT_ASSERT(ct_metric_base_init(&r->base, &range_ops, 2, cops, 3, sops) == CT_OK);
    r->destroyed = destroyed;
    return &r->base;
}

static void test_user_metric(void) {
    int destroyed = 0, created = 2;
    ct_metric *whole = range_create(&destroyed), *merged = range_create(&destroyed);
    CHECK(whole->counts[MIN_LABEL] == INT64_MAX && whole->counts[MAX_LABEL] == INT64_MIN, "count identities");
    CHECK(whole->sums[MIN_SCORE] == INFINITY && whole->sums[MAX_SCORE] == -INFINITY && whole->sums[SUM_SCORE] == 0,
          "sum identities");
    data d;
    data_make(&d, 300, 6, CT_F64, CT_I32, TIES, 0.2);
    for (int64_t i = 0; i < 300 * 6; i++) ct_tensor_set(&d.outputs, i, (double)ct_rng_below(&rng, 1000) / 4.0 - 100);
    ct_tensor o, l, k;
    ct_eval_batch b = batch_of(&d, 0, 300, &o, &l, &k);
    CHECK_OK(ct_metric_update(whole, &b));
    for (int64_t r = 0; r < 300;) {
        int64_t want = 1 + (int64_t)ct_rng_below(&rng, 80); /* not inside CT_MIN, which evaluates twice */
        int64_t len = CT_MIN(300 - r, want);
        ct_metric *piece = range_create(&destroyed);
        created++;
        ct_eval_batch pb = batch_of(&d, r, len, &o, &l, &k);
        CHECK_OK(ct_metric_update(piece, &pb));
        CHECK_OK(ct_metric_merge(merged, piece));
        ct_metric_free(piece);
        r += len;
    }
    CHECK(same_state(whole, merged), "MIN/MAX/SUM fields: merged pieces == whole");
    json_t *out = json_object();
    CHECK_OK(ct_metric_compute(whole, "eval", out));
    CHECK(json_object_get(out, "eval_min_score") && json_object_get(out, "eval_max_label"), "user metric keys");
    json_decref(out);
    /* In a set: same ops with no same_config (it lies beyond the table's size) means a duplicate. */
    ct_metric_set s = {0};
    CHECK_OK(ct_metric_set_add(&s, range_create(&destroyed)));
    CHECK_ERR(ct_metric_set_add(&s, range_create(&destroyed)), CT_ERR_INVALID_ARG, "metric 'range' is already in the set");
    ct_metric_set_free(&s);
    created += 2; /* the set's, including the refused duplicate, which the set frees */
    ct_metric_free(whole);
    ct_metric_free(merged);
    CHECK(destroyed == created, "destroy override: %d of %d metrics destroyed", destroyed, created);
    data_free(&d);
}

/* --- errors ------------------------------------------------------------------------------------- */

static void test_errors(void) {
    ct_metric *acc, *top5, *top1, *loss;
    CHECK_OK(ct_accuracy_metric_create(&acc));
    CHECK_OK(ct_top_k_accuracy_metric_create(5, &top5));
    CHECK_OK(ct_top_k_accuracy_metric_create(1, &top1));
    CHECK_OK(ct_loss_metric_create(&loss));
    ct_metric *none = (ct_metric *)&none;
    CHECK_ERR(ct_top_k_accuracy_metric_create(0, &none), CT_ERR_INVALID_ARG, "metric 'top_k_accuracy': k = 0");
    CHECK(none == NULL, "failed create leaves NULL");
    /* k above the classes the model scores counts every sample: refused, naming both; k = C and
     * other metrics pass */
    int64_t classes = 1 + (int64_t)ct_rng_below(&rng, 4);
    CHECK_OK(ct_metric_check_classes(top5, 5));
    CHECK_OK(ct_metric_check_classes(top1, classes));
    CHECK_OK(ct_metric_check_classes(acc, 1));
    CHECK_OK(ct_metric_check_classes(loss, 1));
    char want[96];
    snprintf(want, sizeof want, "k = 5 is more than the %lld classes the model scores", (long long)classes);
    CHECK_ERR(ct_metric_check_classes(top5, classes), CT_ERR_INVALID_ARG, "metric 'top_k_accuracy': ", want,
              "top_5_accuracy 1.0");

    double sc[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    int64_t lab[4] = {0, 1, 2, 1}, os[2] = {4, 3}, n4 = 4, os3[3] = {2, 2, 3}, n3 = 3;
    int32_t lab32[4] = {0, 1, 2, 1};
    float labf[4] = {0, 1, 2, 1};
    uint8_t mask[4] = {1, 0, 1, 1}, badmask[4] = {1, 2, 1, 1};
    ct_tensor o = ct_tensor_view(sc, CT_F64, CT_CPU, 2, os), l = ct_tensor_view(lab, CT_I64, CT_CPU, 1, &n4);
    ct_eval_batch good = {.outputs = &o, .labels = &l};
    CHECK_OK(ct_metric_update(acc, &good));
    int64_t before = acc->counts[0], before_total = acc->counts[1];

    ct_tensor oi = ct_tensor_view(lab, CT_I64, CT_CPU, 2, (int64_t[]){4, 1});
    ct_eval_batch b = {.outputs = &oi, .labels = &l};
    CHECK_ERR(ct_metric_update(acc, &b), CT_ERR_DTYPE, "metric 'accuracy': ", "outputs [4, 1] i64", "float32 or float64");
    ct_tensor o3 = ct_tensor_view(sc, CT_F64, CT_CPU, 3, os3);
    ct_tensor l2 = ct_tensor_view(lab, CT_I64, CT_CPU, 1, (int64_t[]){2});
    b = (ct_eval_batch){.outputs = &o3, .labels = &l2};
    CHECK_ERR(ct_metric_update(acc, &b), CT_ERR_SHAPE, "metric 'accuracy': outputs [2, 2, 3]", "[rows, classes]");
    ct_tensor l3 = ct_tensor_view(lab, CT_I64, CT_CPU, 1, &n3);
    b = (ct_eval_batch){.outputs = &o, .labels = &l3};
    CHECK_ERR(ct_metric_update(top5, &b), CT_ERR_SHAPE, "metric 'top_k_accuracy': outputs [4, 3]", "labels [3]",
              "different numbers of rows");
    ct_tensor lf = ct_tensor_view(labf, CT_F32, CT_CPU, 1, &n4);
    b = (ct_eval_batch){.outputs = &o, .labels = &lf};
    CHECK_ERR(ct_metric_update(acc, &b), CT_ERR_SHAPE, "labels [4] f32", "int64 or int32");
    int64_t bad_lab[4] = {0, 1, 3, 1};
    ct_tensor lb = ct_tensor_view(bad_lab, CT_I64, CT_CPU, 1, &n4);
    b = (ct_eval_batch){.outputs = &o, .labels = &lb};
    CHECK_ERR(ct_metric_update(acc, &b), CT_ERR_INVALID_ARG, "metric 'accuracy': label 3 at row 2 of the batch is outside [0, 3)");
    ct_tensor mk = ct_tensor_view(mask, CT_U8, CT_CPU, 1, &n4);
    bad_lab[1] = -100; /* masked: fine */
    bad_lab[2] = 2;
    b = (ct_eval_batch){.outputs = &o, .labels = &lb, .mask = &mk};
    CHECK_OK(ct_metric_update(acc, &b));
    CHECK(acc->counts[1] == before_total + 3, "masked row with label -100 skipped");
    before = acc->counts[0];
    before_total = acc->counts[1];
    ct_tensor mbad = ct_tensor_view(badmask, CT_U8, CT_CPU, 1, &n4);
    b = (ct_eval_batch){.outputs = &o, .labels = &l, .mask = &mbad};
    CHECK_ERR(ct_metric_update(acc, &b), CT_ERR_INVALID_ARG, "metric 'accuracy': mask value 2 at row 1",
              "expected 0 (padding) or 1");
    ct_tensor m3 = ct_tensor_view(mask, CT_U8, CT_CPU, 1, &n3);
    b = (ct_eval_batch){.outputs = &o, .labels = &l, .mask = &m3};
    CHECK_ERR(ct_metric_update(acc, &b), CT_ERR_SHAPE, "mask [3] u8", "expected [4] u8");
    ct_tensor mi = ct_tensor_view(lab, CT_I64, CT_CPU, 1, &n4);
    b = (ct_eval_batch){.outputs = &o, .labels = &l, .mask = &mi};
    CHECK_ERR(ct_metric_update(acc, &b), CT_ERR_SHAPE, "mask [4] i64");
    b = (ct_eval_batch){.outputs = &o, .labels = NULL};
    CHECK_ERR(ct_metric_update(acc, &b), CT_ERR_INVALID_ARG, "metric 'accuracy': needs labels");
    b = (ct_eval_batch){.outputs = NULL, .labels = &l};
    CHECK_ERR(ct_metric_update(top5, &b), CT_ERR_INVALID_ARG, "metric 'top_k_accuracy': needs the model's outputs");
    b = (ct_eval_batch){.outputs = &o, .labels = &l, .loss = {1.0, -2.0}};
    CHECK_ERR(ct_metric_update(loss, &b), CT_ERR_INVALID_ARG, "metric 'loss': loss count -2");
    b = (ct_eval_batch){.outputs = &o, .labels = &l, .loss = {1.0, INFINITY}};
    CHECK_ERR(ct_metric_update(loss, &b), CT_ERR_INVALID_ARG, "metric 'loss': loss count inf");
    CHECK(acc->counts[0] == before && acc->counts[1] == before_total, "failed updates leave the state unchanged");
    CHECK(loss->sums[0] == 0 && loss->sums[1] == 0, "failed loss updates leave the state unchanged");
    ct_tensor l32 = ct_tensor_view(lab32, CT_I32, CT_CPU, 1, &n4);
    b = (ct_eval_batch){.outputs = &o, .labels = &l32};
    CHECK_OK(ct_metric_update(top5, &b));

    /* Merges across kinds or settings. */
    CHECK_ERR(ct_metric_merge(acc, top5), CT_ERR_INVALID_ARG, "metric 'accuracy': cannot merge the state of metric 'top_k_accuracy'",
              "another kind of metric");
    CHECK_ERR(ct_metric_merge(top1, top5), CT_ERR_INVALID_ARG, "metric 'top_k_accuracy'", "different settings");
    ct_metric_set s1 = {0}, s2 = {0};
    CHECK_OK(ct_metric_set_add(&s1, acc));
    CHECK_OK(ct_metric_set_add(&s1, top5));
    CHECK_OK(ct_metric_set_add(&s2, loss));
    CHECK_ERR(ct_metric_set_merge(&s1, &s2), CT_ERR_INVALID_ARG, "cannot merge a set of 1 metrics into one of 2");
    CHECK_OK(ct_metric_set_add(&s2, top1));
    CHECK_ERR(ct_metric_set_merge(&s1, &s2), CT_ERR_INVALID_ARG, "metric 0 is 'accuracy' in one set and 'loss'");
    ct_metric *again;
    CHECK_OK(ct_top_k_accuracy_metric_create(5, &again));
    CHECK_ERR(ct_metric_set_add(&s1, again), CT_ERR_INVALID_ARG, "metric 'top_k_accuracy' is already in the set");
    CHECK_OK(ct_top_k_accuracy_metric_create(3, &again));
    CHECK_OK(ct_metric_set_add(&s1, again)); /* another k is another metric */
    ct_metric_set_free(&s1);
    ct_metric_set_free(&s2);
}

/* --- JSON --------------------------------------------------------------------------------------- */

static ct_status set_from(const char *text, ct_metric_set *s) {
    json_error_t e;
    json_t *j = text ? json_loads(text, 0, &e) : NULL;
    CT_ASSERT(!text || j);
    ct_status st = ct_metric_set_from_json(j, NULL, s);
    json_decref(j);
    return st;
}

static void check_keys(const char *text, const char *const *want) {
    ct_metric_set s;
    CHECK_OK(set_from(text, &s));
    /* One row with every metric defined, to list the keys in order. */
    double sc[3] = {0.5, 0.25, 0.125};
    int64_t lab[1] = {0}, n = 1, os[2] = {1, 3};
    ct_tensor o = ct_tensor_view(sc, CT_F64, CT_CPU, 2, os), l = ct_tensor_view(lab, CT_I64, CT_CPU, 1, &n);
    ct_eval_batch b = {.outputs = &o, .labels = &l, .loss = {2.0, 1.0}};
    CHECK_OK(ct_metric_set_update(&s, &b));
    json_t *out = json_object();
    CHECK_OK(ct_metric_set_compute(&s, "eval", out));
    int i = 0;
    for (; want[i]; i++) {
        CHECK(i < s.n, "%s: only %d metrics", text ? text : "NULL", s.n);
        CHECK(json_object_get(out, want[i]) != NULL, "%s: no key %s", text ? text : "NULL", want[i]);
    }
    CHECK(i == s.n && json_object_size(out) == (size_t)i, "%s: %d metrics, %zu keys, wanted %d",
          text ? text : "NULL", s.n, json_object_size(out), i);
    CHECK(s.n > 0 && strcmp(ct_metric_name(s.items[0]), "loss") == 0, "%s: loss first", text ? text : "NULL");
    json_decref(out);
    ct_metric_set_free(&s);
}

static void test_json(void) {
    check_keys(NULL, (const char *const[]){"eval_loss", NULL});
    check_keys("[]", (const char *const[]){"eval_loss", NULL});
    check_keys("[\"accuracy\"]", (const char *const[]){"eval_loss", "eval_accuracy", NULL});
    check_keys("[\"accuracy\", \"loss\", {\"type\": \"loss\"}]", (const char *const[]){"eval_loss", "eval_accuracy", NULL});
    check_keys("[{\"type\": \"top_k_accuracy\", \"k\": 5}, \"top_2_accuracy\", {\"type\": \"accuracy\"}]",
               (const char *const[]){"eval_loss", "eval_top_5_accuracy", "eval_top_2_accuracy", "eval_accuracy", NULL});
    ct_metric *m;
    json_t *j = json_string("top_12_accuracy");
    CHECK_OK(ct_metric_from_json(j, "m", &m));
    json_t *keys = json_object();
    CHECK_OK(ct_metric_compute(m, "", keys)); /* nothing seen: no key, so feed one row */
    double one[13] = {0};
    int64_t y0 = 0, n1 = 1, os13[2] = {1, 13};
    ct_tensor to = ct_tensor_view(one, CT_F64, CT_CPU, 2, os13), tl = ct_tensor_view(&y0, CT_I64, CT_CPU, 1, &n1);
    CHECK_OK(ct_metric_update(m, &(ct_eval_batch){.outputs = &to, .labels = &tl}));
    CHECK_OK(ct_metric_compute(m, "", keys));
    CHECK(json_object_size(keys) == 1 && get_real(keys, "top_12_accuracy") == 0.0,
          "top_12_accuracy: 12 of 13 tied classes rank above class 0");
    json_decref(keys);
    ct_metric_free(m);
    json_decref(j);

    ct_metric_set s;
    CHECK_ERR(set_from("[\"accuracy\", \"loss\", \"acuracy\"]", &s), CT_ERR_CONFIG,
              "metrics[2]: unknown metric 'acuracy', did you mean 'accuracy'?");
    CHECK(s.n == 0 && s.items == NULL, "failed set is empty");
    CHECK_ERR(set_from("[\"qqqqqqqq\"]", &s), CT_ERR_CONFIG,
              "metrics[0]: unknown metric 'qqqqqqqq' (known: loss, accuracy, top_k_accuracy, confusion_matrix, precision");
    CHECK_ERR(set_from("[\"balanced_acuracy\"]", &s), CT_ERR_CONFIG,
              "metrics[0]: unknown metric 'balanced_acuracy', did you mean 'balanced_accuracy'?");
    CHECK_ERR(set_from("[{\"type\": \"f1\", \"average\": \"macr\"}]", &s), CT_ERR_CONFIG,
              "metrics[0].average: unknown average 'macr', did you mean 'macro'?");
    CHECK_ERR(set_from("[{\"type\": \"mcc\", \"average\": \"macro\"}]", &s), CT_ERR_CONFIG, "metrics[0]");
    CHECK_ERR(set_from("[\"f1\", {\"type\": \"f1\", \"average\": \"macro\"}]", &s), CT_ERR_CONFIG,
              "metrics[1]: metric 'f1' is listed twice");
    CHECK_ERR(set_from("[{\"type\": \"top_k_acuracy\", \"k\": 3}]", &s), CT_ERR_CONFIG,
              "metrics[0].type: unknown metric type 'top_k_acuracy', did you mean 'top_k_accuracy'?");
    CHECK_ERR(set_from("[{\"type\": \"top_k_accuracy\"}]", &s), CT_ERR_CONFIG, "metrics[0]: missing required key 'k'");
    CHECK_ERR(set_from("[{\"type\": \"top_k_accuracy\", \"k\": 0}]", &s), CT_ERR_CONFIG, "metrics[0].k: 0; expected an integer >= 1");
    CHECK_ERR(set_from("[{\"type\": \"top_k_accuracy\", \"k\": \"5\"}]", &s), CT_ERR_CONFIG, "metrics[0].k: expected an integer");
    CHECK_ERR(set_from("[{\"type\": \"top_k_accuracy\", \"kk\": 5}]", &s), CT_ERR_CONFIG,
              "metrics[0]: unknown key 'kk', did you mean 'k'?");
    CHECK_ERR(set_from("[{\"type\": \"accuracy\", \"k\": 5}]", &s), CT_ERR_CONFIG, "metrics[0]: unknown key 'k'");
    CHECK_ERR(set_from("[{\"k\": 5}]", &s), CT_ERR_CONFIG, "metrics[0]: missing required key 'type'");
    CHECK_ERR(set_from("[3]", &s), CT_ERR_CONFIG, "metrics[0]: expected a metric name");
    CHECK_ERR(set_from("{\"accuracy\": true}", &s), CT_ERR_CONFIG, "metrics: expected a list of metric names or objects");
    CHECK_ERR(set_from("[\"top_k_accuracy\"]", &s), CT_ERR_CONFIG, "metrics[0]: 'top_k_accuracy' needs its k");
    CHECK_ERR(set_from("[\"top_0_accuracy\"]", &s), CT_ERR_CONFIG, "metrics[0]: unknown metric 'top_0_accuracy'");
    CHECK_ERR(set_from("[\"accuracy\", \"top_5_accuracy\", {\"type\": \"top_k_accuracy\", \"k\": 5}]", &s), CT_ERR_CONFIG,
              "metrics[2]: metric 'top_k_accuracy' is listed twice");
    CHECK_ERR(set_from("[\"accuracy\", \"accuracy\"]", &s), CT_ERR_CONFIG, "metrics[1]: metric 'accuracy' is listed twice");
    j = json_loads("[\"acc\"]", 0, NULL);
    CHECK_ERR(ct_metric_set_from_json(j, "run.metrics", &s), CT_ERR_CONFIG, "run.metrics[0]: unknown metric 'acc'");
    json_decref(j);
}


/* --- the core's newer parts --------------------------------------------------------------------- */

/* A metric that keeps records of width 2 (value, row index) and declares its fields at the first
 * batch: 3 counts then, like a metric that learns its shape from the data. */
static ct_status rec_update(ct_metric *m, const ct_eval_batch *b) {
    int64_t rows = b->labels->shape[0], real = 0;
    for (int64_t i = 0; i < rows; i++) real += ct_metric_row_real(b, i);
    if (m->n_counts == 0) CT_TRY(ct_metric_redeclare(m, 3, NULL, 1, NULL));
    if (m->samples.width == 0) CT_TRY(ct_metric_keep_samples(m, 2));
    CT_TRY(ct_metric_samples_reserve(m, real));
    int64_t cap = m->samples.cap;
    for (int64_t i = 0; i < rows; i++)
        if (ct_metric_row_real(b, i)) {
            double r[2] = {(double)ct_metric_label(b->labels, i), (double)i};
            CT_TRY(ct_metric_samples_append(m, r));
            m->counts[0]++;
            m->sums[0] += r[0];
        }
    CT_ASSERT(m->samples.cap == cap); /* reserved: no growth while appending */
    return CT_OK;
}
static ct_status rec_compute(const ct_metric *m, const char *prefix, json_t *out) {
    return m->n_counts ? ct_metric_put(out, prefix, "records", (double)m->samples.n) : CT_OK;
}
static const ct_metric_ops rec_ops = {.size = sizeof(ct_metric_ops), .name = "records", .update = rec_update,
                                      .compute = rec_compute};

static void test_samples(void) {
    /* large declarations: no field limit any more */
    ct_metric *big = calloc(1, sizeof *big);
    CHECK_OK(ct_metric_base_init(big, &rec_ops, 100000, NULL, 70000, NULL));
    CHECK(big->n_counts == 100000 && big->counts[99999] == 0 && big->sum_ops[69999] == CT_REDUCE_SUM, "big state");
    ct_metric_free(big);

    int64_t n = 1 + (int64_t)ct_rng_below(&rng, 3000);
    int64_t *lab = malloc((size_t)n * sizeof *lab);
    uint8_t *mask = malloc((size_t)n);
    for (int64_t i = 0; i < n; i++) {
        lab[i] = (int64_t)ct_rng_below(&rng, 1000);
        mask[i] = ct_rng_uniform(&rng) < 0.8;
    }
    ct_tensor l = ct_tensor_view(lab, CT_I64, CT_CPU, 1, &n), k = ct_tensor_view(mask, CT_U8, CT_CPU, 1, &n);
    ct_metric *whole = calloc(1, sizeof *whole), *merged = calloc(1, sizeof *merged);
    CHECK_OK(ct_metric_base_init(whole, &rec_ops, 0, NULL, 0, NULL));
    CHECK_OK(ct_metric_base_init(merged, &rec_ops, 0, NULL, 0, NULL));
    ct_eval_batch b = {.labels = &l, .mask = &k};
    CHECK_OK(ct_metric_update(whole, &b));
    int64_t real = 0;
    for (int64_t i = 0; i < n; i++) real += mask[i];
    CHECK(whole->samples.n == real && whole->samples.width == 2, "records: %lld of %lld", (long long)whole->samples.n,
          (long long)real);
    /* pieces in order, some empty (blank), merged: the same records in the same order */
    for (int64_t start = 0; start < n;) {
        int64_t want = (int64_t)ct_rng_below(&rng, 400), len = CT_MIN(n - start, want); /* CT_MIN evaluates twice */
        ct_tensor lp = ct_tensor_rows(&l, start, len), kp = ct_tensor_rows(&k, start, len);
        ct_metric *piece = calloc(1, sizeof *piece);
        CHECK_OK(ct_metric_base_init(piece, &rec_ops, 0, NULL, 0, NULL));
        ct_eval_batch pb = {.labels = &lp, .mask = &kp};
        if (len > 0) CHECK_OK(ct_metric_update(piece, &pb));
        CHECK_OK(ct_metric_merge(merged, piece));
        ct_metric_free(piece);
        start += len;
    }
    bool same = merged->samples.n == whole->samples.n && merged->n_counts == 3 && merged->counts[0] == whole->counts[0];
    for (int64_t i = 0; same && i < whole->samples.n; i++) same = merged->samples.values[2 * i] == whole->samples.values[2 * i];
    CHECK(same, "merged records equal the whole's, in order");
    /* a blank state adopts a used one; reset keeps the memory */
    ct_metric *blank = calloc(1, sizeof *blank);
    CHECK_OK(ct_metric_base_init(blank, &rec_ops, 0, NULL, 0, NULL));
    CHECK_OK(ct_metric_merge(blank, whole));
    CHECK(blank->samples.n == real && blank->counts[0] == whole->counts[0] && blank->sums[0] == whole->sums[0],
          "blank adopts");
    double *mem = blank->samples.values;
    ct_metric_reset(blank);
    CHECK(blank->samples.n == 0 && blank->samples.values == mem && blank->samples.width == 2 && blank->counts[0] == 0,
          "reset empties the records and keeps the memory");
    /* widths must agree */
    ct_metric *wide = calloc(1, sizeof *wide);
    CHECK_OK(ct_metric_base_init(wide, &rec_ops, 3, NULL, 1, NULL));
    CHECK_OK(ct_metric_keep_samples(wide, 5));
    CHECK_ERR(ct_metric_merge(wide, whole), CT_ERR_INVALID_ARG, "metric 'records'", "records of a different width");
    double r5[5] = {1, 2, 3, 4, 5};
    CHECK_OK(ct_metric_samples_append(wide, r5));
    CHECK_ERR(ct_metric_keep_samples(wide, 2), CT_ERR_STATE, "cannot change the record width from 5 to 2");
    CHECK_OK(ct_metric_keep_samples(wide, 5));
    CHECK(wide->samples.n == 1 && wide->samples.values[4] == 5, "append copies the record");
    /* a blank state merging a blank one stays blank */
    ct_metric *b1 = calloc(1, sizeof *b1), *b2 = calloc(1, sizeof *b2);
    CHECK_OK(ct_metric_base_init(b1, &rec_ops, 0, NULL, 0, NULL));
    CHECK_OK(ct_metric_base_init(b2, &rec_ops, 0, NULL, 0, NULL));
    CHECK_OK(ct_metric_merge(b1, b2));
    CHECK(b1->n_counts == 0 && b1->samples.width == 0, "blank + blank = blank");
    /* uncertainty: a metric without the op writes nothing */
    json_t *out = json_object();
    ct_uncertainty_config cfg = {.resamples = 10, .confidence = 0.95, .seed = 1};
    CHECK_OK(ct_metric_uncertainty(whole, &cfg, "eval", out));
    CHECK(json_object_size(out) == 0, "no uncertainty op: no key");
    json_decref(out);
    ct_metric_free(b1);
    ct_metric_free(b2);
    ct_metric_free(wide);
    ct_metric_free(blank);
    ct_metric_free(whole);
    ct_metric_free(merged);
    free(lab);
    free(mask);
}

static void test_basic_uncertainty(void) {
    int64_t c = 2 + (int64_t)ct_rng_below(&rng, 8), n = 10 + (int64_t)ct_rng_below(&rng, 2000);
    data d;
    data_make(&d, n, c, CT_F32, CT_I64, CONTINUOUS, 0.2);
    ((uint8_t *)d.mask.data)[n - 1] = 1; /* at least one real row */
    ct_tensor_set(&d.labels, n - 1, 0);
    ct_metric_set s = make_set(2);
    /* per-row losses: a sum and a weight (tokens) per row, masked rows 0 */
    int64_t n1 = n;
    ct_tensor sl, sw;
    CT_ASSERT(ct_tensor_alloc(&sl, CT_F64, CT_CPU, 1, &n1) == CT_OK && ct_tensor_alloc(&sw, CT_F64, CT_CPU, 1, &n1) == CT_OK);
    double W = 0, WL = 0;
    for (int64_t i = 0; i < n; i++) {
        double w = real_row(&d, i) ? (double)ct_rng_below(&rng, 9) : 0, l = w * d.losses[i];
        ((double *)sw.data)[i] = w;
        ((double *)sl.data)[i] = l;
        W += w;
        WL += l;
    }
    int64_t bs = 1 + (int64_t)ct_rng_below(&rng, 64);
    for (int64_t r = 0; r < n; r += bs) {
        ct_tensor o, l, k;
        int64_t len = CT_MIN(bs, n - r);
        ct_eval_batch b = batch_of(&d, r, len, &o, &l, &k);
        ct_tensor slb = ct_tensor_rows(&sl, r, len), swb = ct_tensor_rows(&sw, r, len);
        b.sample_loss = &slb;
        b.sample_weight = &swb;
        b.loss.sum = b.loss.count = 0;
        for (int64_t i = r; i < r + len; i++)
            if (real_row(&d, i)) {
                b.loss.sum += ((double *)sl.data)[i];
                b.loss.count += ((double *)sw.data)[i];
            }
        CHECK_OK(ct_metric_set_update(&s, &b));
    }
    ct_uncertainty_config cfg = {.resamples = 0, .confidence = 0.9, .seed = 0};
    json_t *out = json_object();
    CHECK_OK(ct_metric_set_compute(&s, "eval", out));
    CHECK_OK(ct_metric_set_uncertainty(&s, &cfg, "eval", out));
    ref r = reference(&d, 2);
    if (W > 0 && r.total > 1) {
        double L = WL / W, ss = 0;
        for (int64_t i = 0; i < n; i++)
            if (real_row(&d, i)) {
                double e = ((double *)sl.data)[i] - L * ((double *)sw.data)[i];
                ss += e * e;
            }
        double se = sqrt((double)r.total / (double)(r.total - 1) * ss) / W;
        CHECK_NEAR(get_real(out, "eval_loss"), L, 1e-13);
        CHECK_NEAR(get_real(out, "eval_loss_stderr"), se, 1e-8);
        CHECK_NEAR(get_real(out, "eval_loss_ci_high") - get_real(out, "eval_loss"), ct_confidence_z(0.9) * se, 1e-7);
    }
    double p, se, lo, hi;
    ct_proportion_interval(r.correct, r.total, 0.9, &p, &se, &lo, &hi);
    CHECK(get_real(out, "eval_accuracy_stderr") == se && get_real(out, "eval_accuracy_ci_low") == lo &&
              get_real(out, "eval_accuracy_ci_high") == hi,
          "accuracy: the Wilson closed form, even with resamples 0");
    ct_proportion_interval(r.top_hits, r.total, 0.9, &p, &se, &lo, &hi);
    CHECK(get_real(out, "eval_top_2_accuracy_stderr") == se && get_real(out, "eval_top_2_accuracy_ci_high") == hi,
          "top-k: the Wilson closed form");
    CHECK(json_object_size(out) == 12, "3 values and 9 uncertainty keys: %zu", json_object_size(out));
    json_decref(out);

    /* one batch without per-row losses: no loss uncertainty (its rows would be missing) */
    ct_tensor o, l, k;
    int64_t first = 0;
    while (!real_row(&d, first)) first++; /* a real row: a batch of padding carries no loss */
    ct_eval_batch b = batch_of(&d, first, 1, &o, &l, &k);
    CHECK_OK(ct_metric_set_update(&s, &b));
    out = json_object();
    CHECK_OK(ct_metric_set_uncertainty(&s, &cfg, "eval", out));
    CHECK(!json_object_get(out, "eval_loss_stderr") && json_object_get(out, "eval_accuracy_stderr"),
          "a batch without per-row losses: no loss stderr");
    json_decref(out);

    /* validation of the per-row tensors */
    ct_tensor slb = ct_tensor_rows(&sl, first, 1), swb = ct_tensor_rows(&sw, first, 1), sw2 = ct_tensor_rows(&sw, 0, 2);
    b.sample_loss = &slb;
    CHECK_ERR(ct_metric_update(s.items[0], &b), CT_ERR_INVALID_ARG, "metric 'loss': sample_loss and sample_weight come together");
    b.sample_weight = &sw2;
    CHECK_ERR(ct_metric_update(s.items[0], &b), CT_ERR_SHAPE, "metric 'loss': sample_weight", "expected [1] float64");
    double neg = -1;
    ct_tensor negt = ct_tensor_view(&neg, CT_F64, CT_CPU, 1, (int64_t[]){1});
    b.sample_weight = &negt;
    b.mask = NULL;
    CHECK_ERR(ct_metric_update(s.items[0], &b), CT_ERR_INVALID_ARG, "sample_weight -1 at row 0");
    b.sample_weight = &swb;
    ct_tensor lab32 = ct_tensor_rows(&d.labels, first, 1);
    b.sample_loss = &lab32; /* int64 */
    CHECK_ERR(ct_metric_update(s.items[0], &b), CT_ERR_SHAPE, "sample_loss");
    ct_tensor_free(&sl);
    ct_tensor_free(&sw);
    ct_metric_set_free(&s);
    data_free(&d);
}


int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--compute") == 0)
        return ct_test_metric_compute_main("test_metrics", argv[2], CT_I64, NULL);
    ct_test_begin("test_metrics");
    ct_rng_init(&rng, ct_test_seed, 0, 0);
    test_values();
    test_merge_property();
    test_mask();
    test_edge_cases();
    test_user_metric();
    test_errors();
    test_json();
    test_samples();
    test_basic_uncertainty();
    return ct_test_finish();
}
