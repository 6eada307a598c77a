/* Ranking metrics (AUROC, average precision) against references written from the definitions
 * (AUROC: every (positive, negative) pair counted, ties 1/2; AP: one pass over the distinct
 * thresholds, counting the rows at or above each one), on fresh random data: binary scores [n],
 * [n, 1] and two logits [n, 2], multiclass softmax one-vs-rest, macro and weighted, continuous and
 * heavily tied (integer) scores, float32 and float64, int64 and int32 labels, masks. Then: the
 * merge property (random splits merged == one state, records in dataset order), batch-size
 * independence, ties and edge cases (all scores equal, one class present, a class never present,
 * one sample, non-finite scores), and the bootstrap: reproducible for a seed and any thread count,
 * exactly the values of resampling the samples one by one (each resample rebuilt from the same
 * Philox stream and scored by the reference), and by distribution against indices drawn one by one
 * from another stream. Errors and JSON specs last.
 *
 * `test_metrics_ranking --compute IN.h5` is the mode tests/oracle/test_metrics_ranking.py drives
 * to compare with scikit-learn: IN.h5 holds attribute "spec" (JSON: "metrics" (ranking specs),
 * "prefix", "batch_size", "ranks", "dtype", "label_dtype", optional "uncertainty": {"resamples",
 * "confidence", "seed"}) and datasets outputs ([N] or [N, C]), labels [N] and optional mask [N] u8.
 * Batches are dealt round-robin to `ranks` states that are merged in rank order; the values (and
 * the uncertainty keys) are printed as one JSON object.
 *
 * Why one file of over 600 lines: it tests one source file (eval/metrics_ranking.c), and the
 * references written here serve both its checks and the --compute mode its oracle drives. */
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

enum { CONTINUOUS, TIES };

typedef struct data {
    int64_t n, c; /* c: 0 = 1-d scores [n], else [n, c] */
    ct_tensor outputs, labels, mask;
    bool has_mask;
} data;

static int64_t classes_of(const data *d) { return d->c <= 2 ? 2 : d->c; }
static int64_t cols_of(const data *d) { return d->c ? d->c : 1; }

static void data_make(data *d, int64_t n, int64_t c, ct_dtype odt, ct_dtype ldt, int kind, double mask_p) {
    memset(d, 0, sizeof *d);
    d->n = n;
    d->c = c;
    int64_t os[2] = {n, c};
    CT_ASSERT(ct_tensor_alloc(&d->outputs, odt, CT_CPU, c ? 2 : 1, c ? os : &n) == CT_OK);
    CT_ASSERT(ct_tensor_alloc(&d->labels, ldt, CT_CPU, 1, &n) == CT_OK);
    CT_ASSERT(ct_tensor_alloc(&d->mask, CT_U8, CT_CPU, 1, &n) == CT_OK);
    int64_t k = classes_of(d);
    for (int64_t i = 0; i < n * cols_of(d); i++)
        ct_tensor_set(&d->outputs, i, kind == CONTINUOUS ? 2.0 * ct_rng_normal(&rng) : (double)ct_rng_below(&rng, 4));
    d->has_mask = mask_p > 0;
    for (int64_t i = 0; i < n; i++) {
        bool real = !(ct_rng_uniform(&rng) < mask_p);
        ((uint8_t *)d->mask.data)[i] = real;
        /* Padding rows get labels no metric would accept, so counting one shows. */
        int64_t y = real ? (int64_t)ct_rng_below(&rng, (uint64_t)k) : (ct_rng_below(&rng, 2) ? -1 : k + 3);
        ct_tensor_set(&d->labels, i, (double)y);
    }
}

static void data_free(data *d) {
    ct_tensor_free(&d->outputs);
    ct_tensor_free(&d->labels);
    ct_tensor_free(&d->mask);
}

static bool real_row(const data *d, int64_t i) { return !d->has_mask || ((uint8_t *)d->mask.data)[i]; }
static int64_t label(const data *d, int64_t i) { return (int64_t)ct_tensor_get(&d->labels, i); }
static double out(const data *d, int64_t i, int64_t j) { return ct_tensor_get(&d->outputs, i * cols_of(d) + j); }

static ct_eval_batch batch_of(const data *d, int64_t start, int64_t len, ct_tensor *o, ct_tensor *l, ct_tensor *k) {
    *o = ct_tensor_rows(&d->outputs, start, len);
    *l = ct_tensor_rows(&d->labels, start, len);
    *k = ct_tensor_rows(&d->mask, start, len);
    return (ct_eval_batch){.outputs = o, .labels = l, .mask = d->has_mask ? k : NULL};
}

/* --- references --------------------------------------------------------------------------------- */

/* A flat sample list: score of the column and whether the row is a positive of it. */
typedef struct column {
    int64_t n;
    double *s;
    bool *pos;
} column;

/* Mann-Whitney over every (positive, negative) pair; NaN without both. */
static double ref_auroc(const column *c) {
    double good = 0, pairs = 0;
    for (int64_t i = 0; i < c->n; i++)
        for (int64_t j = 0; j < c->n; j++)
            if (c->pos[i] && !c->pos[j]) {
                pairs += 1;
                good += c->s[i] > c->s[j] ? 1.0 : c->s[i] == c->s[j] ? 0.5 : 0.0;
            }
    return pairs > 0 ? good / pairs : NAN;
}

/* Step sum over the distinct thresholds in decreasing order; NaN without positives. */
static double ref_ap(const column *c) {
    double P = 0;
    for (int64_t i = 0; i < c->n; i++) P += c->pos[i];
    if (P == 0) return NAN;
    double ap = 0, prev_tps = 0, t = INFINITY;
    for (;;) {
        double next = -INFINITY; /* the largest score below t */
        bool any = false;
        for (int64_t i = 0; i < c->n; i++)
            if (c->s[i] < t && (!any || c->s[i] > next)) {
                next = c->s[i];
                any = true;
            }
        if (!any) break;
        t = next;
        double tps = 0, all = 0;
        for (int64_t i = 0; i < c->n; i++)
            if (c->s[i] >= t) {
                tps += c->pos[i];
                all += 1;
            }
        ap += (tps - prev_tps) / P * (tps / all);
        prev_tps = tps;
    }
    return ap;
}

/* Softmax row the metric's way (it is the input of the ranking, not what is under test here). */
static void ref_softmax(const double *l, int64_t c, double *p) {
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < c; j++) mx = fmax(mx, l[j]);
    for (int64_t j = 0; j < c; j++) {
        p[j] = exp(l[j] - mx);
        sum += p[j];
    }
    for (int64_t j = 0; j < c; j++) p[j] /= sum;
}

/* The reference value over an explicit list of rows (rows[] index the data; repeats allowed). */
static double ref_value(const data *d, const int64_t *rows, int64_t m, ct_ranking_kind kind, ct_ranking_average avg) {
    int64_t ncols = d->c <= 2 ? 1 : d->c;
    column col = {m, malloc((size_t)(m ? m : 1) * sizeof(double)), malloc((size_t)(m ? m : 1) * sizeof(bool))};
    double *logits = malloc((size_t)cols_of(d) * sizeof(double)), *p = malloc((size_t)cols_of(d) * sizeof(double));
    double num = 0, den = 0, result = NAN;
    bool undefined = false;
    for (int64_t c = 0; c < ncols; c++) {
        double support = 0;
        for (int64_t r = 0; r < m; r++) {
            int64_t i = rows[r];
            for (int64_t j = 0; j < cols_of(d); j++) logits[j] = out(d, i, j);
            if (d->c <= 2) {
                col.s[r] = d->c == 2 ? logits[1] - logits[0] : logits[0];
                col.pos[r] = label(d, i) == 1;
            } else {
                ref_softmax(logits, d->c, p);
                col.s[r] = p[c];
                col.pos[r] = label(d, i) == c;
            }
            support += col.pos[r];
        }
        double v = kind == CT_RANKING_AUROC ? ref_auroc(&col) : ref_ap(&col);
        if (ncols == 1) {
            result = v;
            break;
        }
        if (isnan(v)) {
            if (kind == CT_RANKING_AVERAGE_PRECISION && avg == CT_RANKING_WEIGHTED && support == 0) continue;
            undefined = true;
            continue;
        }
        double w = avg == CT_RANKING_WEIGHTED ? support : 1.0;
        num += w * v;
        den += w;
    }
    if (ncols > 1) result = undefined || den == 0 ? NAN : num / den;
    free(col.s);
    free(col.pos);
    free(logits);
    free(p);
    return result;
}

/* Rows in the metric's canonical order: ascending lexicographic order of their records (the
 * ranked values, then the label), which is how the bootstrap numbers samples. */
typedef struct rowrec {
    double v[16];
    int w;
    int64_t row;
} rowrec;

static int cmp_rowrec(const void *pa, const void *pb) {
    const rowrec *a = pa, *b = pb;
    for (int j = 0; j < a->w; j++)
        if (a->v[j] != b->v[j]) return a->v[j] < b->v[j] ? -1 : 1;
    return 0;
}

static void canonical_sort(const data *d, int64_t *rows, int64_t m) {
    CT_ASSERT(d->c < 16);
    rowrec *r = malloc((size_t)(m ? m : 1) * sizeof *r);
    double logits[16];
    for (int64_t k = 0; k < m; k++) {
        int64_t i = rows[k];
        for (int64_t j = 0; j < cols_of(d); j++) logits[j] = out(d, i, j);
        r[k].row = i;
        if (d->c <= 2) {
            r[k].w = 2;
            r[k].v[0] = d->c == 2 ? logits[1] - logits[0] : logits[0];
        } else {
            r[k].w = (int)d->c + 1;
            ref_softmax(logits, d->c, r[k].v);
        }
        r[k].v[r[k].w - 1] = (double)label(d, i);
    }
    qsort(r, (size_t)m, sizeof *r, cmp_rowrec);
    for (int64_t k = 0; k < m; k++) rows[k] = r[k].row;
    free(r);
}

/* The real rows in order. */
static int64_t real_rows(const data *d, int64_t *rows) {
    int64_t m = 0;
    for (int64_t i = 0; i < d->n; i++)
        if (real_row(d, i)) rows[m++] = i;
    return m;
}

/* --- helpers ------------------------------------------------------------------------------------ */

static const char *key_of(ct_ranking_kind kind, ct_ranking_average avg, char *buf, size_t cap) {
    snprintf(buf, cap, "%s%s", kind == CT_RANKING_AUROC ? "auroc" : "average_precision",
             avg == CT_RANKING_WEIGHTED ? "_weighted" : "");
    return buf;
}

/* All four metrics (two kinds x two averages), in one set. */
static ct_metric_set make_set(void) {
    ct_metric_set s = {0};
    for (int kind = 0; kind < 2; kind++)
        for (int avg = 0; avg < 2; avg++) {
            ct_metric *m;
            CT_ASSERT(ct_ranking_metric_create((ct_ranking_kind)kind, (ct_ranking_average)avg, &m) == CT_OK);
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

static bool same_records(const ct_metric *a, const ct_metric *b) {
    const ct_metric_samples *x = &a->samples, *y = &b->samples;
    if (x->n != y->n || (x->n && x->width != y->width)) return false;
    return x->n == 0 || memcmp(x->values, y->values, (size_t)(x->n * x->width) * sizeof(double)) == 0;
}

/* NaN for JSON null or a missing key. */
static double get_real(const json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static bool is_null(const json_t *o, const char *key) { return json_is_null(json_object_get(o, key)); }

static bool near(double a, double b, double rel) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return fabs(a - b) <= rel * fmax(fabs(a), fabs(b)) || a == b;
}

/* --- tests -------------------------------------------------------------------------------------- */

static void test_values(void) {
    static const int64_t widths[] = {0, 1, 2, 3, 4, 7};
    for (int trial = 0; trial < 48; trial++) {
        int64_t c = widths[trial % 6];
        int kind = (trial / 6) % 2 ? TIES : CONTINUOUS;
        int64_t n = 1 + (int64_t)ct_rng_below(&rng, trial % 8 == 7 ? 600 : 160);
        ct_dtype odt = trial & 1 ? CT_F64 : CT_F32, ldt = trial & 2 ? CT_I32 : CT_I64;
        double mask_p = trial % 5 == 4 ? 0.3 : 0.0;
        data d;
        data_make(&d, n, c, odt, ldt, kind, mask_p);
        ct_metric_set s = make_set();
        CHECK_OK(feed(&s, &d, 0, n, 1 + (int64_t)ct_rng_below(&rng, (uint64_t)n)));
        json_t *o = json_object();
        CHECK_OK(ct_metric_set_compute(&s, "eval", o));
        int64_t *rows = malloc((size_t)n * sizeof *rows);
        int64_t m = real_rows(&d, rows);
        for (int k = 0; k < 2; k++)
            for (int a = 0; a < 2; a++) {
                char name[64], key[80];
                key_of((ct_ranking_kind)k, (ct_ranking_average)a, name, sizeof name);
                snprintf(key, sizeof key, "eval_%s", name);
                if (m == 0) {
                    CHECK(json_object_get(o, key) == NULL, "trial %d: no rows, yet key %s", trial, key);
                    continue;
                }
                double want = ref_value(&d, rows, m, (ct_ranking_kind)k, (ct_ranking_average)a);
                double got = get_real(o, key);
                CHECK(json_object_get(o, key) != NULL, "trial %d: no key %s", trial, key);
                CHECK(near(got, want, 1e-12), "trial %d (n %lld c %lld kind %d %s): %s %.17g, reference %.17g", trial,
                      (long long)n, (long long)c, kind, ct_dtype_name(odt), key, got, want);
                /* AUROC is a ratio of integers: exact */
                if (k == CT_RANKING_AUROC && c <= 2)
                    CHECK(got == want || (isnan(got) && isnan(want)), "trial %d: binary AUROC %.17g vs %.17g (exact)",
                          trial, got, want);
            }
        free(rows);
        json_decref(o);
        ct_metric_set_free(&s);
        data_free(&d);
    }
}

/* Random splits into separate states, merged in order == one state: the same records (dataset
 * order) and the same values; the batch size changes nothing. */
static void test_merge_property(void) {
    for (int trial = 0; trial < 16; trial++) {
        int64_t c = (int64_t[]){0, 1, 2, 5}[trial % 4], n = 1 + (int64_t)ct_rng_below(&rng, 400);
        data d;
        data_make(&d, n, c, trial & 1 ? CT_F64 : CT_F32, CT_I64, trial % 3 == 0 ? CONTINUOUS : TIES,
                  trial % 2 ? 0.25 : 0.0);
        ct_metric_set whole = make_set(), merged = make_set();
        CHECK_OK(feed(&whole, &d, 0, n, n));
        int parts = 1 + (int)ct_rng_below(&rng, 6);
        int64_t start = 0;
        for (int p = 0; p < parts; p++) {
            int64_t len = p == parts - 1 ? n - start : (int64_t)ct_rng_below(&rng, (uint64_t)(n - start + 1));
            ct_metric_set piece = make_set();
            CHECK_OK(feed(&piece, &d, start, len, 1 + (int64_t)ct_rng_below(&rng, 64)));
            CHECK_OK(ct_metric_set_merge(&merged, &piece));
            ct_metric_set_free(&piece);
            start += len;
        }
        for (int i = 0; i < whole.n; i++)
            CHECK(same_records(whole.items[i], merged.items[i]), "trial %d: %s: merged records of %d pieces differ",
                  trial, ct_metric_name(whole.items[i]), parts);
        /* dataset order: record r is real row r's label */
        int64_t *rows = malloc((size_t)n * sizeof *rows);
        int64_t m = real_rows(&d, rows);
        const ct_metric_samples *rec = &merged.items[0]->samples;
        bool order = rec->n == m;
        for (int64_t r = 0; order && r < m; r++)
            order = rec->values[r * rec->width + rec->width - 1] == label(&d, rows[r]);
        CHECK(order, "trial %d: records are not in dataset order", trial);
        free(rows);

        /* Batches dealt round-robin to 3 states merged in rank order (a distributed sampler's
         * order): other record order, same values and same intervals. */
        ct_metric_set rr[3] = {make_set(), make_set(), make_set()};
        int64_t rbs = 1 + (int64_t)ct_rng_below(&rng, 16);
        for (int64_t r = 0, batch = 0; r < n; r += rbs, batch++)
            CHECK_OK(feed(&rr[batch % 3], &d, r, CT_MIN(rbs, n - r), rbs));
        CHECK_OK(ct_metric_set_merge(&rr[0], &rr[1]));
        CHECK_OK(ct_metric_set_merge(&rr[0], &rr[2]));
        ct_uncertainty_config cfg = {.resamples = 40, .confidence = 0.9, .seed = ct_rng_u64(&rng)};
        json_t *ju = json_object(), *jr = json_object();
        CHECK_OK(ct_metric_set_compute(&whole, "", ju));
        CHECK_OK(ct_metric_set_uncertainty(&whole, &cfg, "", ju));
        CHECK_OK(ct_metric_set_compute(&rr[0], "", jr));
        CHECK_OK(ct_metric_set_uncertainty(&rr[0], &cfg, "", jr));
        CHECK(json_equal(ju, jr) && json_object_size(ju) == (whole.items[0]->samples.n ? 16u : 0u),
              "trial %d: round-robin shards change the values or intervals", trial);
        json_decref(ju);
        json_decref(jr);
        for (int r = 0; r < 3; r++) ct_metric_set_free(&rr[r]);

        ct_metric_set a = make_set();
        CHECK_OK(feed(&a, &d, 0, n, 1 + (int64_t)ct_rng_below(&rng, (uint64_t)n)));
        json_t *ja = json_object(), *jb = json_object(), *jw = json_object();
        CHECK_OK(ct_metric_set_compute(&a, "", ja));
        CHECK_OK(ct_metric_set_compute(&merged, "", jb));
        CHECK_OK(ct_metric_set_compute(&whole, "", jw));
        CHECK(json_equal(ja, jw) && json_equal(jb, jw), "trial %d: values depend on the batch size or the split",
              trial);
        json_decref(ja);
        json_decref(jb);
        json_decref(jw);
        /* merging a fresh state changes nothing; reset empties */
        ct_metric_set fresh = make_set();
        CHECK_OK(ct_metric_set_merge(&merged, &fresh));
        CHECK_OK(ct_metric_set_merge(&fresh, &whole)); /* a blank state adopts the width */
        for (int i = 0; i < whole.n; i++) {
            CHECK(same_records(whole.items[i], merged.items[i]), "merge of a fresh state");
            CHECK(same_records(whole.items[i], fresh.items[i]), "fresh state merged with data");
        }
        ct_metric_set_reset(&merged);
        CHECK(merged.items[0]->samples.n == 0, "reset keeps no records");
        ct_metric_set_free(&fresh);
        ct_metric_set_free(&a);
        ct_metric_set_free(&merged);
        ct_metric_set_free(&whole);
        data_free(&d);
    }
}

/* Values from literal binary scores (1-d, float64). */
static json_t *run_binary(int64_t n, const double *scores, const int64_t *labels) {
    ct_tensor o = ct_tensor_view((void *)scores, CT_F64, CT_CPU, 1, &n);
    ct_tensor l = ct_tensor_view((void *)labels, CT_I64, CT_CPU, 1, &n);
    ct_eval_batch b = {.outputs = &o, .labels = &l};
    ct_metric_set s = make_set();
    json_t *o_ = json_object();
    CHECK_OK(ct_metric_set_update(&s, &b));
    CHECK_OK(ct_metric_set_compute(&s, "", o_));
    ct_metric_set_free(&s);
    return o_;
}

static void test_ties_and_edges(void) {
    /* scikit-learn's docstring examples */
    double s1[] = {0.1, 0.4, 0.35, 0.8};
    int64_t y1[] = {0, 0, 1, 1};
    json_t *o = run_binary(4, s1, y1);
    CHECK(get_real(o, "auroc") == 0.75, "docstring AUROC %.17g", get_real(o, "auroc"));
    CHECK(near(get_real(o, "average_precision"), 0.5 * 1.0 + 0.5 * (2.0 / 3.0), 1e-15), "docstring AP %.17g",
          get_real(o, "average_precision"));
    CHECK(get_real(o, "auroc_weighted") == 0.75, "binary data: weighted is the binary value");
    json_decref(o);
    /* all scores equal: AUROC 1/2, AP = prevalence */
    double s2[] = {3, 3, 3, 3, 3};
    int64_t y2[] = {1, 0, 0, 1, 0};
    o = run_binary(5, s2, y2);
    CHECK(get_real(o, "auroc") == 0.5, "all tied AUROC %.17g", get_real(o, "auroc"));
    CHECK(get_real(o, "average_precision") == 0.4, "all tied AP %.17g", get_real(o, "average_precision"));
    json_decref(o);
    /* ties across classes: groups {5: +,-} {4: -} {2: +,+,-}: AUROC pairs: pos@5 vs neg@5 (1/2), neg@4 (1), neg@2 (1);
     * pos@2 (x2) vs neg@5 (0), neg@4 (0), neg@2 (1/2 each) -> (2.5 + 2 * 0.5) / 9 */
    double s3[] = {2, 5, 4, 2, 5, 2};
    int64_t y3[] = {1, 1, 0, 1, 0, 0};
    o = run_binary(6, s3, y3);
    CHECK(get_real(o, "auroc") == 3.5 / 9.0, "grouped ties AUROC %.17g", get_real(o, "auroc"));
    /* AP: after {5}: tps 1 fps 1 -> (1/3)(1/2); {4}: no positives; {2}: tps 3 fps 3 -> (2/3)(1/2) */
    CHECK(near(get_real(o, "average_precision"), 1.0 / 6 + 1.0 / 3, 1e-15), "grouped ties AP %.17g",
          get_real(o, "average_precision"));
    json_decref(o);
    /* one class present: AUROC undefined (null); AP of positives only is 1, of negatives only null */
    int64_t pos[] = {1, 1, 1, 1}, neg[] = {0, 0, 0, 0};
    o = run_binary(4, s1, pos);
    CHECK(is_null(o, "auroc") && is_null(o, "auroc_weighted"), "only positives: AUROC null");
    CHECK(get_real(o, "average_precision") == 1.0, "only positives: AP 1");
    json_decref(o);
    o = run_binary(4, s1, neg);
    CHECK(is_null(o, "auroc") && is_null(o, "average_precision") && is_null(o, "average_precision_weighted"),
          "only negatives: both null");
    json_decref(o);
    /* one sample */
    o = run_binary(1, s1, pos);
    CHECK(is_null(o, "auroc") && get_real(o, "average_precision") == 1.0, "one positive sample");
    json_decref(o);
    /* non-finite scores: null */
    double s4[] = {0.1, NAN, 0.3, 0.2};
    o = run_binary(4, s4, y1);
    CHECK(is_null(o, "auroc") && is_null(o, "average_precision"), "NaN score: null");
    json_decref(o);
    double s5[] = {0.1, INFINITY, 0.3, 0.2};
    o = run_binary(4, s5, y1);
    CHECK(is_null(o, "auroc") && is_null(o, "average_precision"), "inf score: null");
    json_decref(o);

    /* multiclass with class 2 never present: macro null; weighted AP defined (weight 0), weighted AUROC null */
    double lg[] = {2, 1, 0, 0.5, 1, 0, 0, 3, 1, 1, 1, 0, 0, 0.2, 2};
    int64_t yc[] = {0, 1, 1, 0, 1};
    int64_t n = 5, os[2] = {5, 3};
    ct_tensor to = ct_tensor_view(lg, CT_F64, CT_CPU, 2, os), tl = ct_tensor_view(yc, CT_I64, CT_CPU, 1, &n);
    ct_metric_set s = make_set();
    CHECK_OK(ct_metric_set_update(&s, &(ct_eval_batch){.outputs = &to, .labels = &tl}));
    o = json_object();
    CHECK_OK(ct_metric_set_compute(&s, "eval", o));
    CHECK(is_null(o, "eval_auroc") && is_null(o, "eval_auroc_weighted") && is_null(o, "eval_average_precision"),
          "absent class: macro and AUROC null");
    data d = {.n = 5, .c = 3, .outputs = to, .labels = tl};
    int64_t rows[5] = {0, 1, 2, 3, 4};
    double want = ref_value(&d, rows, 5, CT_RANKING_AVERAGE_PRECISION, CT_RANKING_WEIGHTED);
    CHECK(!isnan(want) && near(get_real(o, "eval_average_precision_weighted"), want, 1e-12),
          "absent class: weighted AP %.17g vs %.17g", get_real(o, "eval_average_precision_weighted"), want);
    json_decref(o);
    /* uncertainty of an undefined value: null keys */
    o = json_object();
    ct_uncertainty_config cfg = {.resamples = 50, .confidence = 0.9, .seed = 3};
    CHECK_OK(ct_metric_set_uncertainty(&s, &cfg, "eval", o));
    CHECK(is_null(o, "eval_auroc_stderr") && is_null(o, "eval_auroc_ci_low") && is_null(o, "eval_auroc_ci_high"),
          "undefined value: null interval");
    CHECK(json_is_number(json_object_get(o, "eval_average_precision_weighted_ci_low")), "weighted AP has an interval");
    json_decref(o);
    ct_metric_set_free(&s);

    /* nothing seen: no keys, no uncertainty keys */
    s = make_set();
    o = json_object();
    CHECK_OK(ct_metric_set_compute(&s, "eval", o));
    CHECK_OK(ct_metric_set_uncertainty(&s, &cfg, "eval", o));
    CHECK(json_object_size(o) == 0, "nothing seen: %zu keys", json_object_size(o));
    json_decref(o);
    ct_metric_set_free(&s);
}

/* --- bootstrap ---------------------------------------------------------------------------------- */

static json_t *uncertainty_of(ct_metric_set *s, int64_t resamples, uint64_t seed, double confidence) {
    ct_uncertainty_config cfg = {.resamples = resamples, .confidence = confidence, .seed = seed};
    json_t *o = json_object();
    CHECK_OK(ct_metric_set_uncertainty(s, &cfg, "eval", o));
    return o;
}

static void test_bootstrap(void) {
    for (int trial = 0; trial < 6; trial++) {
        int64_t c = (int64_t[]){2, 0, 4}[trial % 3], n = 20 + (int64_t)ct_rng_below(&rng, 60);
        data d;
        data_make(&d, n, c, CT_F32, CT_I64, trial & 1 ? TIES : CONTINUOUS, trial == 5 ? 0.2 : 0.0);
        ct_metric_set s = make_set();
        CHECK_OK(feed(&s, &d, 0, n, 7));
        uint64_t seed = ct_rng_u64(&rng);
        int64_t R = 200 + (int64_t)ct_rng_below(&rng, 200);
        double conf = 0.8 + 0.19 * ct_rng_uniform(&rng);

        /* reproducible, and the same for any number of threads */
        int threads = omp_get_max_threads();
        omp_set_num_threads(1);
        json_t *a = uncertainty_of(&s, R, seed, conf);
        omp_set_num_threads(threads > 1 ? threads : 2);
        json_t *b = uncertainty_of(&s, R, seed, conf), *other = uncertainty_of(&s, R, seed + 1, conf);
        omp_set_num_threads(threads);
        CHECK(json_equal(a, b), "trial %d: the interval depends on the thread count or is not reproducible", trial);
        CHECK(!json_equal(a, other), "trial %d: another seed gives the same interval", trial);
        CHECK(json_object_size(a) == 12, "trial %d: %zu uncertainty keys", trial, json_object_size(a));
        json_t *none = uncertainty_of(&s, 0, seed, conf);
        CHECK(json_object_size(none) == 0, "resamples 0: no keys");
        json_decref(none);

        /* exactly the values of resampling one by one: rebuild each resample from its stream, as a
         * list of rows (the k-th row of the canonical order repeated mult[k] times), and score it
         * with the reference */
        int64_t *rows = malloc((size_t)n * sizeof *rows), *list = malloc((size_t)n * sizeof *list);
        int64_t m = real_rows(&d, rows);
        canonical_sort(&d, rows, m);
        int64_t *mult = malloc((size_t)m * sizeof *mult);
        double *vals = malloc((size_t)(4 * R) * sizeof *vals);
        for (int64_t r = 0; r < R; r++) {
            ct_rng g;
            ct_bootstrap_stream(&g, seed, r);
            ct_bootstrap_multiplicities(&g, m, mult);
            int64_t len = 0;
            for (int64_t i = 0; i < m; i++)
                for (int64_t k = 0; k < mult[i]; k++) list[len++] = rows[i];
            for (int k = 0; k < 4; k++)
                vals[k * R + r] = ref_value(&d, list, len, (ct_ranking_kind)(k / 2), (ct_ranking_average)(k % 2));
        }
        for (int k = 0; k < 4; k++) {
            char name[64], key[96];
            key_of((ct_ranking_kind)(k / 2), (ct_ranking_average)(k % 2), name, sizeof name);
            double lo, hi, se = ct_bootstrap_stderr(vals + k * R, R);
            CHECK_OK(ct_bootstrap_interval(vals + k * R, R, conf, &lo, &hi));
            snprintf(key, sizeof key, "eval_%s_stderr", name);
            CHECK(near(get_real(a, key), se, 1e-9), "trial %d: %s %.17g, one by one %.17g", trial, key,
                  get_real(a, key), se);
            snprintf(key, sizeof key, "eval_%s_ci_low", name);
            CHECK(near(get_real(a, key), lo, 1e-12), "trial %d: %s %.17g, one by one %.17g", trial, key,
                  get_real(a, key), lo);
            snprintf(key, sizeof key, "eval_%s_ci_high", name);
            CHECK(near(get_real(a, key), hi, 1e-12), "trial %d: %s %.17g, one by one %.17g", trial, key,
                  get_real(a, key), hi);
        }
        free(vals);
        free(mult);
        free(list);
        free(rows);
        json_decref(a);
        json_decref(b);
        json_decref(other);
        ct_metric_set_free(&s);
        data_free(&d);
    }

    /* By distribution, with fixed seeds: indices drawn one by one from an unrelated stream give the
     * same standard error and interval up to Monte Carlo noise (2000 resamples: the stderr
     * estimates' relative noise is about 1/sqrt(2 x 2000) = 1.6% each). */
    ct_rng saved = rng;
    ct_rng_init(&rng, 12345, 0, 0);
    data d;
    data_make(&d, 300, 2, CT_F64, CT_I64, CONTINUOUS, 0.0);
    for (int64_t i = 0; i < 300; i++) /* some signal, so the AUROC is away from 1/2 */
        ct_tensor_set(&d.outputs, 2 * i + 1, out(&d, i, 1) + 1.5 * (double)label(&d, i));
    ct_metric *m;
    CHECK_OK(ct_ranking_metric_create(CT_RANKING_AUROC, CT_RANKING_MACRO, &m));
    ct_tensor o, l, k;
    ct_eval_batch bb = batch_of(&d, 0, 300, &o, &l, &k);
    CHECK_OK(ct_metric_update(m, &bb));
    ct_uncertainty_config cfg = {.resamples = 2000, .confidence = 0.95, .seed = 99};
    json_t *got = json_object();
    CHECK_OK(ct_metric_uncertainty(m, &cfg, "", got));
    int64_t list[300]; /* every row is real here: row indices are sample indices */
    double *vals = malloc(2000 * sizeof *vals);
    ct_rng g;
    ct_rng_init(&g, 777, 0, CT_RNG_USER);
    for (int r = 0; r < 2000; r++) {
        for (int64_t i = 0; i < 300; i++) list[i] = (int64_t)ct_rng_below(&g, 300);
        vals[r] = ref_value(&d, list, 300, CT_RANKING_AUROC, CT_RANKING_MACRO);
    }
    double lo, hi, se = ct_bootstrap_stderr(vals, 2000);
    CHECK_OK(ct_bootstrap_interval(vals, 2000, 0.95, &lo, &hi));
    CHECK(fabs(get_real(got, "auroc_stderr") / se - 1) < 0.08, "by distribution: stderr %.5f vs %.5f",
          get_real(got, "auroc_stderr"), se);
    CHECK(fabs(get_real(got, "auroc_ci_low") - lo) < 0.25 * se && fabs(get_real(got, "auroc_ci_high") - hi) < 0.25 * se,
          "by distribution: interval [%.5f, %.5f] vs [%.5f, %.5f]", get_real(got, "auroc_ci_low"),
          get_real(got, "auroc_ci_high"), lo, hi);
    free(vals);
    json_decref(got);
    ct_metric_free(m);
    data_free(&d);
    rng = saved;
}

/* --- errors and JSON ---------------------------------------------------------------------------- */

static void test_errors(void) {
    ct_metric *m;
    CHECK_OK(ct_ranking_metric_create(CT_RANKING_AUROC, CT_RANKING_MACRO, &m));
    double sc[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    int64_t lab[4] = {0, 1, 1, 0}, n4 = 4, os2[2] = {4, 2}, os3[2] = {4, 3}, os0[2] = {4, 0}, os33[3] = {2, 2, 3};
    float labf[4] = {0, 1, 1, 0};
    ct_tensor o2 = ct_tensor_view(sc, CT_F64, CT_CPU, 2, os2), l = ct_tensor_view(lab, CT_I64, CT_CPU, 1, &n4);
    CHECK_OK(ct_metric_update(m, &(ct_eval_batch){.outputs = &o2, .labels = &l}));
    CHECK(m->samples.n == 4 && m->samples.width == 2, "binary records");

    ct_tensor o3 = ct_tensor_view(sc, CT_F64, CT_CPU, 2, os3);
    CHECK_ERR(ct_metric_update(m, &(ct_eval_batch){.outputs = &o3, .labels = &l}), CT_ERR_SHAPE,
              "metric 'auroc': outputs [4, 3] f64 cpu give 3 classes, but the earlier batches gave binary scores");
    int64_t bad[4] = {0, 1, 2, 0};
    ct_tensor lb = ct_tensor_view(bad, CT_I64, CT_CPU, 1, &n4);
    CHECK_ERR(
        ct_metric_update(m, &(ct_eval_batch){.outputs = &o2, .labels = &lb}), CT_ERR_INVALID_ARG,
        "metric 'auroc': label 2 at row 2 of the batch; binary scores (outputs with 2 columns) need labels 0 or 1");
    uint8_t mask[4] = {1, 1, 0, 1};
    ct_tensor mk = ct_tensor_view(mask, CT_U8, CT_CPU, 1, &n4);
    CHECK_OK(ct_metric_update(m, &(ct_eval_batch){.outputs = &o2, .labels = &lb, .mask = &mk}));
    CHECK(m->samples.n == 7, "masked bad label skipped: %lld records", (long long)m->samples.n);
    ct_tensor ob = ct_tensor_view(sc, CT_F64, CT_CPU, 3, os33);
    int64_t two = 2;
    ct_tensor l2 = ct_tensor_view(lab, CT_I64, CT_CPU, 1, &two);
    CHECK_ERR(ct_metric_update(m, &(ct_eval_batch){.outputs = &ob, .labels = &l2}), CT_ERR_SHAPE,
              "outputs [2, 2, 3] f64 cpu: expected binary scores [rows], [rows, 1] or [rows, 2]");
    ct_tensor oz = ct_tensor_view(sc, CT_F64, CT_CPU, 2, os0);
    CHECK_ERR(ct_metric_update(m, &(ct_eval_batch){.outputs = &oz, .labels = &l}), CT_ERR_SHAPE, "outputs [4, 0] f64");
    ct_tensor lf = ct_tensor_view(labf, CT_F32, CT_CPU, 1, &n4);
    CHECK_ERR(ct_metric_update(m, &(ct_eval_batch){.outputs = &o2, .labels = &lf}), CT_ERR_SHAPE,
              "labels [4] f32 cpu: expected class ids [4] int64 or int32");
    CHECK_ERR(ct_metric_update(m, &(ct_eval_batch){.outputs = &o2}), CT_ERR_INVALID_ARG,
              "metric 'auroc': needs labels");
    CHECK_ERR(ct_metric_update(m, &(ct_eval_batch){.labels = &l}), CT_ERR_INVALID_ARG,
              "metric 'auroc': needs the model's outputs");
    CHECK(m->samples.n == 7, "failed updates leave the records unchanged");

    /* multiclass label range; merging binary with multiclass states */
    ct_metric *mc;
    CHECK_OK(ct_ranking_metric_create(CT_RANKING_AUROC, CT_RANKING_MACRO, &mc));
    int64_t badc[4] = {0, 3, 1, 2};
    ct_tensor lc = ct_tensor_view(badc, CT_I64, CT_CPU, 1, &n4);
    CHECK_ERR(ct_metric_update(mc, &(ct_eval_batch){.outputs = &o3, .labels = &lc}), CT_ERR_INVALID_ARG,
              "label 3 at row 1 of the batch is outside [0, 3)");
    CHECK(mc->samples.width == 0, "a failed first batch fixes no width");
    badc[1] = 2;
    CHECK_OK(ct_metric_update(mc, &(ct_eval_batch){.outputs = &o3, .labels = &lc}));
    CHECK(mc->samples.width == 4, "multiclass record width %d", mc->samples.width);
    CHECK_ERR(ct_metric_merge(m, mc), CT_ERR_INVALID_ARG, "cannot merge", "records of a different width");
    ct_metric *ap;
    CHECK_OK(ct_ranking_metric_create(CT_RANKING_AVERAGE_PRECISION, CT_RANKING_MACRO, &ap));
    CHECK_ERR(ct_metric_merge(ap, m), CT_ERR_INVALID_ARG, "another kind of metric");
    ct_metric *w;
    CHECK_OK(ct_ranking_metric_create(CT_RANKING_AUROC, CT_RANKING_WEIGHTED, &w));
    CHECK_ERR(ct_metric_merge(w, m), CT_ERR_INVALID_ARG, "different settings");
    ct_metric *none = (ct_metric *)&none;
    CHECK_ERR(ct_ranking_metric_create(CT_RANKING_AUROC, (ct_ranking_average)7, &none), CT_ERR_INVALID_ARG,
              "metric 'auroc': average = 7");
    CHECK(none == NULL, "failed create leaves NULL");
    ct_metric_free(m);
    ct_metric_free(mc);
    ct_metric_free(ap);
    ct_metric_free(w);
}

static ct_status from_text(const char *text, ct_metric **m) {
    json_t *j = json_loads(text, JSON_DECODE_ANY, NULL);
    CT_ASSERT(j);
    ct_status s = ct_ranking_metric_from_json(j, "metrics[1]", m);
    json_decref(j);
    return s;
}

static void test_json(void) {
    static const struct {
        const char *spec, *key;
    } ok[] = {{"\"auroc\"", "auroc"},
              {"\"average_precision\"", "average_precision"},
              {"{\"type\": \"auroc\", \"average\": \"weighted\"}", "auroc_weighted"},
              {"{\"type\": \"average_precision\", \"average\": \"macro\"}", "average_precision"},
              {"{\"type\": \"average_precision\", \"average\": \"weighted\"}", "average_precision_weighted"}};
    double sc[3] = {0.5, 0.25, 0.125};
    int64_t lab[3] = {0, 1, 1}, n = 3;
    ct_tensor o = ct_tensor_view(sc, CT_F64, CT_CPU, 1, &n), l = ct_tensor_view(lab, CT_I64, CT_CPU, 1, &n);
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        ct_metric *m;
        CHECK_OK(from_text(ok[i].spec, &m));
        if (!m) continue;
        CHECK_OK(ct_metric_update(m, &(ct_eval_batch){.outputs = &o, .labels = &l}));
        json_t *out = json_object();
        CHECK_OK(ct_metric_compute(m, "test", out));
        char key[96];
        snprintf(key, sizeof key, "test_%s", ok[i].key);
        CHECK(json_object_size(out) == 1 && json_object_get(out, key), "%s: key %s", ok[i].spec, key);
        json_decref(out);
        ct_metric_free(m);
    }
    ct_metric *m;
    CHECK_ERR(from_text("\"aurco\"", &m), CT_ERR_CONFIG,
              "metrics[1]: unknown ranking metric 'aurco', did you mean 'auroc'?");
    CHECK_ERR(from_text("{\"type\": \"average_precison\"}", &m), CT_ERR_CONFIG,
              "metrics[1].type: unknown ranking metric 'average_precison', did you mean 'average_precision'?");
    CHECK_ERR(from_text("{\"type\": \"auroc\", \"average\": \"wieghted\"}", &m), CT_ERR_CONFIG,
              "metrics[1].average: unknown value 'wieghted', did you mean 'weighted'?");
    CHECK_ERR(from_text("{\"type\": \"auroc\", \"average\": \"micro\"}", &m), CT_ERR_CONFIG,
              "metrics[1].average: unknown value 'micro'");
    CHECK_ERR(from_text("{\"type\": \"auroc\", \"averge\": \"macro\"}", &m), CT_ERR_CONFIG,
              "metrics[1]: unknown key 'averge', did you mean 'average'?");
    CHECK_ERR(from_text("{\"average\": \"macro\"}", &m), CT_ERR_CONFIG, "metrics[1]: missing required key 'type'");
    CHECK_ERR(from_text("[1]", &m), CT_ERR_CONFIG, "metrics[1]: expected a metric name");
    CHECK(m == NULL, "failed reader leaves NULL");
    CHECK(strcmp(ct_ranking_metric_names[0], "auroc") == 0 &&
              strcmp(ct_ranking_metric_names[1], "average_precision") == 0 && ct_ranking_metric_names[2] == NULL,
          "names list");
}


int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--compute") == 0)
        return ct_test_metric_compute_main("test_metrics_ranking", argv[2], CT_I64, NULL);
    ct_test_begin("test_metrics_ranking");
    ct_rng_init(&rng, ct_test_seed, 0, 0);
    test_values();
    test_merge_property();
    test_ties_and_edges();
    test_bootstrap();
    test_errors();
    test_json();
    return ct_test_finish();
}
