/* Language-model token metrics (token_loss, perplexity, token_accuracy; eval/metrics_lm.c) against
 * a reference written here another way (log-sum-exp in long double without the max shift; argmax
 * as "the first position holding the maximum"), on fresh random logits [rows, T, V] in float32 and
 * float64 (continuous, tied integers with NaN, and logits of size 1e3 that overflow a naive exp in
 * double), int64 and int32 labels, ignore_index -100, -1 or a real token id, masked rows whose
 * labels are out of range and whose logits are NaN (so counting one shows). The sufficient-
 * statistics property: merged random splits equal one state (counts exact, sums within 1e-12,
 * records exact), the batch size and the thread count never change a bit. Edge cases: every token
 * ignored (no keys), rows without tokens, NaN and infinite logits (null), huge finite logits
 * (finite losses), one token. Errors and JSON. Uncertainty: the closed form (resamples = 0)
 * against the sequence-level formula written out, the bootstrap against the same resamples fed to
 * a reference over the tokens, perplexity's interval = exp of token_loss's bit for bit, and the
 * cluster standard error on sequences that are all right or all wrong (sqrt(p(1-p)/(n-1)), not
 * the tokens' binomial one). Token values given with the batch (ct_eval_batch.tokens) in place of
 * the outputs.
 *
 * `test_metrics_lm --compute IN.h5` serves tests/oracle/test_metrics_lm.py: IN.h5 holds attribute
 * "spec" (JSON: "metrics" (specs for ct_lm_metric_from_json), "prefix", "batch_size", "ranks",
 * "dtype" ("f32"/"f64"), "label_dtype" ("i64"/"i32"), optional "uncertainty": {"resamples",
 * "confidence", "seed"}) and datasets outputs [N, T, V], labels [N, T] and optional mask [N] u8.
 * Batches are dealt round-robin to `ranks` states, merged, and the JSON object printed.
 *
 * Why one file of over 600 lines: it tests one source file (eval/metrics_lm.c), and the reference
 * written here serves both its checks and the --compute mode its oracle drives. */
#include <float.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/format/h5io.h"
#include "core/ops/ops.h"
#include "core/rng.h"
#include "core/util.h"
#include "eval/metric.h"
#include "eval/uncertainty.h"
#include "metric_compute.h"
#include "testlib.h"

static ct_rng rng;

/* --- random data -------------------------------------------------------------------------------- */

enum { CONTINUOUS, TIES_NAN, LARGE };

typedef struct data {
    int64_t n, t, v, ignore;
    ct_tensor logits, labels, mask;
    bool has_mask;
} data;

static void data_make(data *d, int64_t n, int64_t t, int64_t v, ct_dtype odt, ct_dtype ldt, int kind, double ignore_p,
                      int64_t ignore, double mask_p) {
    memset(d, 0, sizeof *d);
    d->n = n;
    d->t = t;
    d->v = v;
    d->ignore = ignore;
    int64_t os[3] = {n, t, v};
    CT_ASSERT(ct_tensor_alloc(&d->logits, odt, CT_CPU, 3, os) == CT_OK);
    CT_ASSERT(ct_tensor_alloc(&d->labels, ldt, CT_CPU, 2, os) == CT_OK);
    CT_ASSERT(ct_tensor_alloc(&d->mask, CT_U8, CT_CPU, 1, &n) == CT_OK);
    d->has_mask = mask_p > 0;
    for (int64_t i = 0; i < n; i++) {
        bool real = !(ct_rng_uniform(&rng) < mask_p);
        ((uint8_t *)d->mask.data)[i] = real;
        for (int64_t p = i * t; p < (i + 1) * t; p++) {
            for (int64_t j = 0; j < v; j++) {
                double x = kind == CONTINUOUS ? 3 * ct_rng_normal(&rng)
                           : kind == LARGE    ? 1e3 * ct_rng_normal(&rng)
                                              : (double)ct_rng_below(&rng, 3);
                if (kind == TIES_NAN && ct_rng_uniform(&rng) < 0.02) x = NAN;
                if (!real) x = NAN;
                ct_tensor_set(&d->logits, p * v + j, x);
            }
            int64_t y = ct_rng_uniform(&rng) < ignore_p ? ignore : (int64_t)ct_rng_below(&rng, (uint64_t)v);
            if (!real) y = v + 3; /* neither a token nor ignore_index: counting it would fail */
            ct_tensor_set(&d->labels, p, (double)y);
        }
    }
}

static void data_free(data *d) {
    ct_tensor_free(&d->logits);
    ct_tensor_free(&d->labels);
    ct_tensor_free(&d->mask);
}

static bool real_row(const data *d, int64_t i) { return !d->has_mask || ((uint8_t *)d->mask.data)[i]; }
static double x_at(const data *d, int64_t p, int64_t j) { return ct_tensor_get(&d->logits, p * d->v + j); }
static int64_t y_at(const data *d, int64_t p) { return (int64_t)ct_tensor_get(&d->labels, p); }
static bool counted(const data *d, int64_t p) { return real_row(d, p / d->t) && y_at(d, p) != d->ignore; }

static ct_eval_batch batch_of(const data *d, int64_t start, int64_t len, ct_tensor *o, ct_tensor *l, ct_tensor *k) {
    *o = ct_tensor_rows(&d->logits, start, len);
    *l = ct_tensor_rows(&d->labels, start, len);
    *k = ct_tensor_rows(&d->mask, start, len);
    return (ct_eval_batch){.outputs = o, .labels = l, .mask = d->has_mask ? k : NULL};
}

/* --- reference ---------------------------------------------------------------------------------- */

/* -log softmax(x)[y] as log(sum exp(x_j - m)) + m - x_y in long double (the metric: float64 and
 * log1p of the terms other than the maximum). Its absolute error is a few long double eps (1e-19),
 * hence the absolute floor CLOSE allows below. */
static double ref_nll(const data *d, int64_t p) {
    long double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < d->v; j++)
        m = fmaxl(m, (long double)x_at(d, p, j));
    for (int64_t j = 0; j < d->v; j++)
        s += expl((long double)x_at(d, p, j) - m);
    for (int64_t j = 0; j < d->v; j++)
        if (isnan(x_at(d, p, j))) return NAN;
    return (double)(logl(s) + (m - (long double)x_at(d, p, y_at(d, p))));
}

/* |a - b| <= rel * max(|a|, |b|) + abs. */
#define CHECK_CLOSE(a, b, rel, abs)                                                                                    \
    do {                                                                                                               \
        double a__ = (a), b__ = (b);                                                                                   \
        CHECK(fabs(a__ - b__) <= (rel)*fmax(fabs(a__), fabs(b__)) + (abs), "%s = %.17g vs %s = %.17g", #a, a__, #b,    \
              b__);                                                                                                    \
    } while (0)

static int64_t ref_argmax(const data *d, int64_t p) {
    for (int64_t j = 0; j < d->v; j++)
        if (isnan(x_at(d, p, j))) return j;
    double m = -INFINITY;
    for (int64_t j = 0; j < d->v; j++)
        m = fmax(m, x_at(d, p, j));
    for (int64_t j = 0;; j++)
        if (x_at(d, p, j) == m) return j;
}

typedef struct ref {
    int64_t tokens, correct, seqs;
    double nll; /* sum */
} ref;

static ref reference(const data *d) {
    ref r = {0};
    long double nll = 0;
    for (int64_t i = 0; i < d->n; i++) {
        int64_t tokens = 0;
        for (int64_t p = i * d->t; p < (i + 1) * d->t; p++) {
            if (!counted(d, p)) continue;
            nll += ref_nll(d, p);
            r.correct += ref_argmax(d, p) == y_at(d, p);
            tokens++;
        }
        r.tokens += tokens;
        r.seqs += tokens > 0;
    }
    r.nll = (double)nll;
    return r;
}

/* --- helpers ------------------------------------------------------------------------------------ */

static const char *const names[] = {"token_loss", "perplexity", "token_accuracy"};

static ct_metric_set make_set(int64_t ignore) {
    ct_metric_set s = {0};
    for (int kind = 0; kind < 3; kind++) {
        ct_metric *m;
        CT_ASSERT(ct_lm_metric_create((ct_lm_kind)kind, ignore, &m) == CT_OK);
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
    if (a->samples.width != b->samples.width || a->samples.n != b->samples.n) return false;
    return a->samples.n == 0 || memcmp(a->samples.values, b->samples.values,
                                       (size_t)(a->samples.n * a->samples.width) * sizeof(double)) == 0;
}

static bool same_state(const ct_metric *a, const ct_metric *b) {
    if (a->n_counts != b->n_counts || a->n_sums != b->n_sums) return false;
    if (memcmp(a->counts, b->counts, (size_t)a->n_counts * sizeof *a->counts)) return false;
    if (memcmp(a->sums, b->sums, (size_t)a->n_sums * sizeof *a->sums)) return false;
    return same_records(a, b);
}

static bool near_state(const ct_metric *a, const ct_metric *b, double rel) {
    if (a->n_counts != b->n_counts || a->n_sums != b->n_sums) return false;
    if (memcmp(a->counts, b->counts, (size_t)a->n_counts * sizeof *a->counts)) return false;
    for (int64_t i = 0; i < a->n_sums; i++) {
        double x = a->sums[i], y = b->sums[i];
        if (!(x == y) && !(fabs(x - y) <= rel * fmax(fabs(x), fabs(y))) && !(isnan(x) && isnan(y))) return false;
    }
    return same_records(a, b);
}

static double get_real(const json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static bool is_null(const json_t *o, const char *key) { return json_is_null(json_object_get(o, key)); }

/* out[key] is exp(x): the same double, or null where exp overflows (huge losses). */
static bool is_exp_of(const json_t *out, const char *key, double x) {
    double e = exp(x);
    return isfinite(e) ? get_real(out, key) == e : is_null(out, key);
}

static json_t *compute_set(const ct_metric_set *s, const char *prefix) {
    json_t *out = json_object();
    CHECK_OK(ct_metric_set_compute(s, prefix, out));
    return out;
}

static int64_t random_ignore(void) {
    static const int64_t choices[] = {-100, -1, 0, 2};
    return choices[ct_rng_below(&rng, 4)];
}

/* --- values ------------------------------------------------------------------------------------- */

static void test_values(void) {
    static const ct_dtype odts[] = {CT_F32, CT_F64};
    static const ct_dtype ldts[] = {CT_I64, CT_I32};
    for (int trial = 0; trial < 30; trial++) {
        int kind = trial % 3;
        int64_t n = 1 + (int64_t)ct_rng_below(&rng, 24), t = 1 + (int64_t)ct_rng_below(&rng, 20);
        int64_t v = trial % 7 == 6 ? 500 + (int64_t)ct_rng_below(&rng, 600) : 1 + (int64_t)ct_rng_below(&rng, 40);
        int64_t ignore = random_ignore();
        ct_dtype odt = odts[trial & 1], ldt = ldts[(trial >> 1) & 1];
        data d;
        data_make(&d, n, t, v, odt, ldt, kind, trial % 5 == 0 ? 0.0 : 0.3, ignore, trial % 4 == 3 ? 0.3 : 0.0);
        ref r = reference(&d);
        ct_metric_set s = make_set(ignore);
        CHECK_OK(feed(&s, &d, 0, n, 1 + (int64_t)ct_rng_below(&rng, (uint64_t)n)));
        json_t *out = compute_set(&s, "eval");
        if (r.tokens > 0) {
            double loss = r.nll / (double)r.tokens;
            if (kind == TIES_NAN && isnan(loss)) {
                CHECK(is_null(out, "eval_token_loss") && is_null(out, "eval_perplexity"),
                      "trial %d: a NaN logit: loss and perplexity null", trial);
            } else {
                CHECK_CLOSE(get_real(out, "eval_token_loss"), loss, 1e-12, 1e-17);
                if (isfinite(exp(loss)))
                    CHECK_NEAR(get_real(out, "eval_perplexity"), exp(loss), 1e-12 * fmax(1, fabs(loss)));
                else
                    CHECK(is_null(out, "eval_perplexity"), "trial %d: exp(%g) overflows: perplexity null", trial, loss);
            }
            CHECK(get_real(out, "eval_token_accuracy") == (double)r.correct / (double)r.tokens,
                  "trial %d (n %lld T %lld V %lld kind %d ignore %lld): accuracy %.17g, reference %lld/%lld", trial,
                  (long long)n, (long long)t, (long long)v, kind, (long long)ignore,
                  get_real(out, "eval_token_accuracy"), (long long)r.correct, (long long)r.tokens);
            CHECK(s.items[0]->counts[0] == r.tokens && s.items[0]->counts[2] == r.seqs,
                  "trial %d: %lld tokens in %lld sequences, reference %lld in %lld", trial,
                  (long long)s.items[0]->counts[0], (long long)s.items[0]->counts[2], (long long)r.tokens,
                  (long long)r.seqs);
            CHECK(s.items[2]->samples.n == r.seqs, "one record per sequence with a token");
        }
        CHECK(json_object_size(out) == (r.tokens > 0 ? 3u : 0u), "trial %d: %zu keys", trial, json_object_size(out));
        json_decref(out);
        ct_metric_set_free(&s);
        data_free(&d);
    }
}

/* --- merge property, batch size, threads --------------------------------------------------------- */

static void test_merge_property(void) {
    for (int trial = 0; trial < 20; trial++) {
        int64_t n = 1 + (int64_t)ct_rng_below(&rng, 40), t = 1 + (int64_t)ct_rng_below(&rng, 12);
        int64_t v = 2 + (int64_t)ct_rng_below(&rng, 30), ignore = random_ignore();
        data d;
        data_make(&d, n, t, v, trial & 1 ? CT_F64 : CT_F32, CT_I64, trial % 2 ? CONTINUOUS : LARGE, 0.25, ignore,
                  trial % 3 == 1 ? 0.25 : 0.0);
        ct_metric_set whole = make_set(ignore);
        CHECK_OK(feed(&whole, &d, 0, n, n));
        int parts = 1 + (int)ct_rng_below(&rng, 6);
        ct_metric_set merged = make_set(ignore);
        int64_t start = 0;
        for (int p = 0; p < parts; p++) {
            int64_t len = p == parts - 1 ? n - start : (int64_t)ct_rng_below(&rng, (uint64_t)(n - start + 1));
            ct_metric_set piece = make_set(ignore);
            CHECK_OK(feed(&piece, &d, start, len, 1 + (int64_t)ct_rng_below(&rng, 8)));
            CHECK_OK(ct_metric_set_merge(&merged, &piece));
            ct_metric_set_free(&piece);
            start += len;
        }
        for (int i = 0; i < whole.n; i++)
            CHECK(near_state(whole.items[i], merged.items[i], 1e-12), "trial %d: %s: merged state of %d pieces differs",
                  trial, ct_metric_name(whole.items[i]), parts);
        json_t *jw = compute_set(&whole, ""), *jm = compute_set(&merged, "");
        for (int i = 0; i < 3; i++) {
            double a = get_real(jw, names[i]), b = get_real(jm, names[i]);
            CHECK((isnan(a) && isnan(b)) || fabs(a - b) <= 1e-12 * fabs(a) || a == b, "trial %d: %s %.17g vs %.17g",
                  trial, names[i], a, b);
        }
        json_decref(jw);
        json_decref(jm);

        ct_metric_set a = make_set(ignore), b = make_set(ignore);
        CHECK_OK(feed(&a, &d, 0, n, 1));
        CHECK_OK(feed(&b, &d, 0, n, 1 + (int64_t)ct_rng_below(&rng, (uint64_t)n)));
        for (int i = 0; i < a.n; i++)
            CHECK(same_state(a.items[i], b.items[i]), "trial %d: %s depends on the batch size", trial,
                  ct_metric_name(a.items[i]));
        ct_metric_set_free(&a);
        ct_metric_set_free(&b);

        ct_metric_set fresh = make_set(ignore);
        CHECK_OK(ct_metric_set_merge(&merged, &fresh));
        ct_metric_set_reset(&merged);
        for (int i = 0; i < whole.n; i++)
            CHECK(same_state(fresh.items[i], merged.items[i]), "reset: %s", ct_metric_name(fresh.items[i]));
        ct_metric_set_free(&fresh);
        ct_metric_set_free(&merged);
        ct_metric_set_free(&whole);
        data_free(&d);
    }
    /* A batch big enough for the threaded loop: 1 thread and several give the same bits. */
    data d;
    data_make(&d, 8, 64, 300, CT_F32, CT_I64, CONTINUOUS, 0.2, -100, 0.1);
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    ct_metric_set one = make_set(-100);
    CHECK_OK(feed(&one, &d, 0, 8, 8));
    omp_set_num_threads(threads > 1 ? threads : 2);
    ct_metric_set many = make_set(-100);
    CHECK_OK(feed(&many, &d, 0, 8, 8));
    omp_set_num_threads(threads);
    for (int i = 0; i < one.n; i++)
        CHECK(same_state(one.items[i], many.items[i]), "%s depends on the threads", ct_metric_name(one.items[i]));
    ref r = reference(&d);
    CHECK_CLOSE(one.items[0]->sums[0], r.nll, 1e-12, 1e-15);
    ct_metric_set_free(&one);
    ct_metric_set_free(&many);
    data_free(&d);
}

/* A batch's token values (ct_eval_batch.tokens, what an evaluation computes where the logits are):
 * given them and no outputs, the metrics reach the states the outputs give, bit for bit; given both,
 * they read the token values (doubled NLLs double the NLL sum); token values without their arrays, or
 * of logits that do not fit the labels, are refused naming them. */
static void test_token_values_batch(void) {
    for (int trial = 0; trial < 6; trial++) {
        int64_t n = 1 + (int64_t)ct_rng_below(&rng, 12), t = 1 + (int64_t)ct_rng_below(&rng, 9);
        int64_t v = 2 + (int64_t)ct_rng_below(&rng, 40), ignore = random_ignore();
        data d;
        data_make(&d, n, t, v, trial & 1 ? CT_F64 : CT_F32, trial & 2 ? CT_I32 : CT_I64, trial % 3 ? CONTINUOUS : TIES_NAN,
                  0.2, ignore, 0.25);
        double *vals = malloc(2 * (size_t)(n * t) * sizeof *vals);
        ct_op_token_values(&d.logits, &d.labels, vals, vals + n * t);
        ct_token_values tv = {.nll = vals, .hit = vals + n * t, .ndim = 3, .shape = {n, t, v}};
        ct_tensor o, l, k;
        ct_eval_batch from_outputs = batch_of(&d, 0, n, &o, &l, &k), from_tokens = from_outputs;
        from_tokens.outputs = NULL;
        from_tokens.tokens = &tv;
        ct_metric_set a = make_set(ignore), b = make_set(ignore);
        CHECK_OK(ct_metric_set_update(&a, &from_outputs));
        CHECK_OK(ct_metric_set_update(&b, &from_tokens));
        for (int i = 0; i < a.n; i++)
            CHECK(same_state(a.items[i], b.items[i]), "trial %d: %s from token values differs from the outputs'",
                  trial, ct_metric_name(a.items[i]));
        for (int64_t p = 0; p < n * t; p++) vals[p] *= 2;
        ct_metric_set c = make_set(ignore);
        from_tokens.outputs = &o;
        CHECK_OK(ct_metric_set_update(&c, &from_tokens));
        double s1 = a.items[0]->sums[0], s2 = c.items[0]->sums[0];
        CHECK(s2 == 2 * s1 || (isnan(s1) && isnan(s2)), "trial %d: given outputs and token values, the NLL sum is %.17g, "
              "not twice the outputs' %.17g", trial, s2, s1);
        ct_metric_set_free(&a);
        ct_metric_set_free(&b);
        ct_metric_set_free(&c);
        from_tokens.outputs = NULL;
        ct_metric *m;
        CHECK_OK(ct_lm_metric_create(CT_LM_TOKEN_LOSS, ignore, &m));
        ct_token_values no_hit = tv;
        no_hit.hit = NULL;
        from_tokens.tokens = &no_hit;
        CHECK_ERR(ct_metric_update(m, &from_tokens), CT_ERR_INVALID_ARG, "token values without their nll, hit");
        ct_token_values wider = tv;
        wider.shape[1] = t + 1;
        from_tokens.tokens = &wider;
        CHECK_ERR(ct_metric_update(m, &from_tokens), CT_ERR_SHAPE, "for the token values of logits");
        ct_metric_free(m);
        free(vals);
        data_free(&d);
    }
}

/* --- ignore_index, masks, edge cases ----------------------------------------------------------- */

static json_t *run_literal(int64_t n, int64_t t, int64_t v, const double *x, const int64_t *y, int64_t ignore,
                           const uint8_t *mask) {
    int64_t os[3] = {n, t, v};
    ct_tensor o = ct_tensor_view((void *)x, CT_F64, CT_CPU, 3, os),
              l = ct_tensor_view((void *)y, CT_I64, CT_CPU, 2, os);
    ct_tensor k = ct_tensor_view((void *)mask, CT_U8, CT_CPU, 1, os);
    ct_eval_batch b = {.outputs = &o, .labels = &l, .mask = mask ? &k : NULL};
    ct_metric_set s = make_set(ignore);
    CHECK_OK(ct_metric_set_update(&s, &b));
    json_t *out = compute_set(&s, "eval");
    ct_uncertainty_config cfg = {.resamples = 20, .confidence = 0.95, .seed = 1};
    CHECK_OK(ct_metric_set_uncertainty(&s, &cfg, "eval", out));
    ct_metric_set_free(&s);
    return out;
}

static void test_edge_cases(void) {
    /* Two sequences of two tokens, V = 2. */
    double x[8] = {0, 0, 1e30, 0, 2, 1, NAN, 5};
    int64_t y_all_ignored[4] = {-100, -100, -100, -100};
    json_t *o = run_literal(2, 2, 2, x, y_all_ignored, -100, NULL);
    CHECK(json_object_size(o) == 0, "every token ignored: no keys (%zu)", json_object_size(o));
    json_decref(o);
    /* Tokens 0 and 1 only: log 2 and 1e30 (no overflow from a huge logit). */
    int64_t y1[4] = {1, 1, -100, -100};
    o = run_literal(2, 2, 2, x, y1, -100, NULL);
    CHECK_NEAR(get_real(o, "eval_token_loss"), (log(2.0) + 1e30) / 2, 1e-15);
    CHECK(is_null(o, "eval_perplexity"), "exp(5e29) overflows: null");
    CHECK(get_real(o, "eval_token_accuracy") == 0.0, "argmax: a tie -> class 0, 1e30 -> class 0: both miss label 1");
    json_decref(o);
    int64_t y2[4] = {0, 0, -100, -100};
    o = run_literal(2, 2, 2, x, y2, -100, NULL);
    CHECK_NEAR(get_real(o, "eval_token_loss"), log(2.0) / 2, 1e-15);
    CHECK(get_real(o, "eval_token_accuracy") == 1.0, "first maximum wins a tie: %g",
          get_real(o, "eval_token_accuracy"));
    json_decref(o);
    /* A NaN logit: its loss is NaN (null); argmax takes the NaN. */
    int64_t y3[4] = {-100, -100, -100, 0};
    o = run_literal(2, 2, 2, x, y3, -100, NULL);
    CHECK(is_null(o, "eval_token_loss") && is_null(o, "eval_perplexity"), "NaN logit: null loss");
    CHECK(get_real(o, "eval_token_accuracy") == 1.0, "NaN is the argmax");
    CHECK(is_null(o, "eval_token_loss_stderr"), "NaN loss: null stderr");
    json_decref(o);
    /* The same row masked: gone, whatever its labels. */
    uint8_t mask[2] = {1, 0};
    int64_t y4[4] = {1, 0, 77, -5};
    o = run_literal(2, 2, 2, x, y4, -100, mask);
    CHECK_NEAR(get_real(o, "eval_token_loss"), (log(2.0) + 0) / 2, 1e-15);
    CHECK(get_real(o, "eval_token_accuracy") == 0.5, "masked row: %g", get_real(o, "eval_token_accuracy"));
    json_decref(o);
    /* ignore_index = a real token id (1): its tokens are skipped. Left: [1e30, 0] -> 0 and
     * [2, 1] -> log(1 + e^-1). */
    int64_t y5[4] = {1, 0, 0, 1};
    o = run_literal(2, 2, 2, x, y5, 1, NULL);
    CHECK_NEAR(get_real(o, "eval_token_loss"), log1p(exp(-1.0)) / 2, 1e-15);
    CHECK(get_real(o, "eval_token_accuracy") == 1.0, "ignore_index 1: %g", get_real(o, "eval_token_accuracy"));
    json_decref(o);
    /* An infinite logit: NaN, as log_softmax. */
    double xi[2] = {INFINITY, 0};
    int64_t yi[1] = {0};
    o = run_literal(1, 1, 2, xi, yi, -100, NULL);
    CHECK(is_null(o, "eval_token_loss"), "inf logit: null");
    CHECK(get_real(o, "eval_token_accuracy") == 1.0, "inf logit: argmax");
    json_decref(o);
    /* One token, V = 1: loss 0, perplexity 1, accuracy 1; one sequence: stderr undefined. */
    double x1[1] = {-7.5};
    o = run_literal(1, 1, 1, x1, yi, -100, NULL);
    CHECK(get_real(o, "eval_token_loss") == 0 && get_real(o, "eval_perplexity") == 1 &&
              get_real(o, "eval_token_accuracy") == 1,
          "one token");
    CHECK(get_real(o, "eval_token_loss_stderr") == 0, "one sequence: every resample is it: stderr 0");
    json_decref(o);
    /* Logits [rows, V] with labels [rows] work too (T = 1). */
    double x2[6] = {1, 2, 3, 3, 2, 1};
    int64_t y6[2] = {2, 2}, os2[2] = {2, 3}, n2 = 2;
    ct_tensor ot = ct_tensor_view(x2, CT_F64, CT_CPU, 2, os2), lt = ct_tensor_view(y6, CT_I64, CT_CPU, 1, &n2);
    ct_metric_set s = make_set(-100);
    CHECK_OK(ct_metric_set_update(&s, &(ct_eval_batch){.outputs = &ot, .labels = &lt}));
    o = compute_set(&s, "");
    CHECK(get_real(o, "token_accuracy") == 0.5, "[rows, V] logits: %g", get_real(o, "token_accuracy"));
    json_decref(o);
    ct_metric_set_free(&s);
}

/* --- errors ------------------------------------------------------------------------------------- */

static void test_errors(void) {
    ct_metric *loss, *acc, *loss1;
    CHECK_OK(ct_lm_metric_create(CT_LM_TOKEN_LOSS, -100, &loss));
    CHECK_OK(ct_lm_metric_create(CT_LM_TOKEN_ACCURACY, -100, &acc));
    CHECK_OK(ct_lm_metric_create(CT_LM_TOKEN_LOSS, -1, &loss1));
    double x[24];
    for (int i = 0; i < 24; i++)
        x[i] = sin(i);
    int64_t y[6] = {0, 1, 2, 3, -100, 1}, os[3] = {2, 3, 4}, ls[2] = {2, 3};
    ct_tensor o = ct_tensor_view(x, CT_F64, CT_CPU, 3, os), l = ct_tensor_view(y, CT_I64, CT_CPU, 2, ls);
    ct_eval_batch good = {.outputs = &o, .labels = &l};
    CHECK_OK(ct_metric_update(loss, &good));
    double before = loss->sums[0];
    int64_t before_tokens = loss->counts[0], before_records = loss->samples.n;

    int64_t bad[6] = {0, 1, 2, 3, 4, 1};
    ct_tensor lb = ct_tensor_view(bad, CT_I64, CT_CPU, 2, ls);
    ct_eval_batch b = {.outputs = &o, .labels = &lb};
    CHECK_ERR(ct_metric_update(loss, &b), CT_ERR_INVALID_ARG,
              "metric 'token_loss': label 4 at row 1, position 1 of the batch is outside [0, 4)",
              "is not ignore_index -100");
    bad[4] = -100;
    CHECK_ERR(ct_metric_update(loss1, &b), CT_ERR_INVALID_ARG, "label -100 at row 1, position 1", "ignore_index -1");
    uint8_t mask[2] = {1, 0};
    bad[4] = 99;
    ct_tensor mk = ct_tensor_view(mask, CT_U8, CT_CPU, 1, ls);
    b = (ct_eval_batch){.outputs = &o, .labels = &lb, .mask = &mk};
    CHECK_OK(ct_metric_update(acc, &b)); /* the bad label is in a padding row */
    ct_tensor l13 = ct_tensor_view(y, CT_I64, CT_CPU, 2, (int64_t[]){2, 2});
    b = (ct_eval_batch){.outputs = &o, .labels = &l13};
    CHECK_ERR(ct_metric_update(loss, &b), CT_ERR_SHAPE, "metric 'token_loss': labels [2, 2] i64 cpu",
              "expected token ids [2, 3] int64 or int32", "outputs [2, 3, 4] f64 cpu");
    float yf[6] = {0};
    ct_tensor lf = ct_tensor_view(yf, CT_F32, CT_CPU, 2, ls);
    b = (ct_eval_batch){.outputs = &o, .labels = &lf};
    CHECK_ERR(ct_metric_update(loss, &b), CT_ERR_SHAPE, "labels [2, 3] f32 cpu");
    ct_tensor o1 = ct_tensor_view(x, CT_F64, CT_CPU, 1, (int64_t[]){6});
    ct_tensor l1 = ct_tensor_view(y, CT_I64, CT_CPU, 1, (int64_t[]){6});
    b = (ct_eval_batch){.outputs = &o1, .labels = &l1};
    CHECK_ERR(ct_metric_update(loss, &b), CT_ERR_SHAPE, "outputs [6] f64 cpu: expected logits [rows, T, vocab]");
    b = (ct_eval_batch){.outputs = &o};
    CHECK_ERR(ct_metric_update(acc, &b), CT_ERR_INVALID_ARG, "metric 'token_accuracy': needs token labels");
    b = (ct_eval_batch){.labels = &l};
    CHECK_ERR(ct_metric_update(acc, &b), CT_ERR_INVALID_ARG, "metric 'token_accuracy': needs the model's logits");
    CHECK(loss->sums[0] == before && loss->counts[0] == before_tokens && loss->samples.n == before_records,
          "failed updates leave the state unchanged");
    CHECK_ERR(ct_metric_merge(loss, loss1), CT_ERR_INVALID_ARG, "metric 'token_loss': cannot merge",
              "different settings");
    CHECK_ERR(ct_metric_merge(loss, acc), CT_ERR_INVALID_ARG, "another kind of metric");
    ct_metric_set s = {0};
    CHECK_OK(ct_metric_set_add(&s, loss));
    CHECK_OK(ct_metric_set_add(&s, loss1)); /* another ignore_index is another metric */
    ct_metric *again;
    CHECK_OK(ct_lm_metric_create(CT_LM_TOKEN_LOSS, -100, &again));
    CHECK_ERR(ct_metric_set_add(&s, again), CT_ERR_INVALID_ARG, "metric 'token_loss' is already in the set");
    ct_metric_set_free(&s);
    ct_metric_free(acc);
}

/* --- JSON --------------------------------------------------------------------------------------- */

static ct_status from_text(const char *text, ct_metric **m) {
    json_t *j = json_loads(text, JSON_DECODE_ANY, NULL);
    CT_ASSERT(j);
    ct_status s = ct_lm_metric_from_json(j, "metrics[0]", m);
    json_decref(j);
    return s;
}

static void test_json(void) {
    static const char *const ok[] = {"\"token_loss\"", "\"perplexity\"", "\"token_accuracy\"",
                                     "{\"type\": \"perplexity\", \"ignore_index\": -1}",
                                     "{\"type\": \"token_accuracy\"}"};
    static const char *const want[] = {"token_loss", "perplexity", "token_accuracy", "perplexity", "token_accuracy"};
    for (int i = 0; i < 5; i++) {
        ct_metric *m = NULL;
        CHECK_OK(from_text(ok[i], &m));
        CHECK(m && strcmp(ct_metric_name(m), want[i]) == 0, "%s: %s", ok[i], m ? ct_metric_name(m) : "NULL");
        ct_metric_free(m);
    }
    /* ignore_index from JSON is honoured: -1 skips tokens labelled -1, -100 is then out of range. */
    ct_metric *m;
    CHECK_OK(from_text("{\"type\": \"token_loss\", \"ignore_index\": -1}", &m));
    double x[4] = {0, 0, 1, 2};
    int64_t y[2] = {-1, 1}, os[3] = {1, 2, 2};
    ct_tensor o = ct_tensor_view(x, CT_F64, CT_CPU, 3, os), l = ct_tensor_view(y, CT_I64, CT_CPU, 2, os);
    CHECK_OK(ct_metric_update(m, &(ct_eval_batch){.outputs = &o, .labels = &l}));
    CHECK(m->counts[0] == 1, "ignore_index -1 from JSON: %lld tokens", (long long)m->counts[0]);
    ct_metric_free(m);
    for (int i = 0; ct_lm_metric_names[i]; i++)
        CHECK(strcmp(ct_lm_metric_names[i], names[i]) == 0, "names[%d] = %s", i, ct_lm_metric_names[i]);
    m = (ct_metric *)&m;
    CHECK_ERR(from_text("\"perplexty\"", &m), CT_ERR_CONFIG,
              "metrics[0]: unknown language-model metric 'perplexty', did you mean 'perplexity'?");
    CHECK(m == NULL, "failed reader leaves NULL");
    CHECK_ERR(from_text("\"bleu\"", &m), CT_ERR_CONFIG, "(known: token_loss, perplexity, token_accuracy)");
    CHECK_ERR(from_text("{\"type\": \"token_acuracy\"}", &m), CT_ERR_CONFIG,
              "metrics[0].type: unknown language-model metric 'token_acuracy', did you mean 'token_accuracy'?");
    CHECK_ERR(from_text("{\"type\": \"token_loss\", \"ignore_idx\": 3}", &m), CT_ERR_CONFIG,
              "metrics[0]: unknown key 'ignore_idx', did you mean 'ignore_index'?");
    CHECK_ERR(from_text("{\"type\": \"token_loss\", \"ignore_index\": \"-100\"}", &m), CT_ERR_CONFIG,
              "metrics[0].ignore_index");
    CHECK_ERR(from_text("[1]", &m), CT_ERR_CONFIG, "metrics[0]: expected a metric name");
}

/* --- uncertainty -------------------------------------------------------------------------------- */

typedef struct seq_ref {
    int64_t n;     /* sequences with a token */
    double *a, *b; /* per sequence: NLL sum (or correct count), tokens */
    double *tok;   /* per sequence, per position: the reference token value (0 when not counted) */
    const data *d;
} seq_ref;

static seq_ref sequences(const data *d, bool accuracy) {
    seq_ref s = {.d = d,
                 .a = calloc((size_t)d->n, sizeof(double)),
                 .b = calloc((size_t)d->n, sizeof(double)),
                 .tok = calloc((size_t)(d->n * d->t), sizeof(double))};
    for (int64_t i = 0; i < d->n; i++) {
        double a = 0, b = 0;
        for (int64_t p = i * d->t; p < (i + 1) * d->t; p++) {
            if (!counted(d, p)) continue;
            double v = accuracy ? (double)(ref_argmax(d, p) == y_at(d, p)) : ref_nll(d, p);
            s.tok[s.n * d->t + (p - i * d->t)] = v;
            a += v;
            b += 1;
        }
        if (b == 0) continue;
        s.a[s.n] = a;
        s.b[s.n] = b;
        s.n++;
    }
    return s;
}

static void seq_free(seq_ref *s) {
    free(s->a);
    free(s->b);
    free(s->tok);
}

/* A resample's ratio from the tokens themselves: every token of sequence i, mult[i] times. */
static void ref_stat(const int64_t *mult, int64_t n, const void *ctx, void *scratch, double *values) {
    const seq_ref *s = ctx;
    long double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < mult[i]; c++)
            for (int64_t p = 0; p < s->d->t; p++) {
                num += s->tok[i * s->d->t + p];
            }
    for (int64_t i = 0; i < n; i++)
        den += (long double)mult[i] * s->b[i];
    values[0] = (double)(num / den);
}

static void test_uncertainty(void) {
    for (int trial = 0; trial < 12; trial++) {
        /* Trials 10, 11: one counted token has a NaN logit. Its sequence's NLL is NaN, so are
         * token_loss and the closed form, but resamples that do not draw that sequence are finite,
         * as when resampling the sequences one by one (the record is selected away, not multiplied
         * by 0). */
        bool has_nan = trial >= 10;
        int64_t n = (has_nan ? 6 : 2) + (int64_t)ct_rng_below(&rng, has_nan ? 10 : 40);
        int64_t t = 1 + (int64_t)ct_rng_below(&rng, 8);
        int64_t v = 2 + (int64_t)ct_rng_below(&rng, 10), ignore = random_ignore();
        data d;
        data_make(&d, n, t, v, trial & 1 ? CT_F32 : CT_F64, CT_I64, trial % 2 ? CONTINUOUS : LARGE, 0.3, ignore,
                  trial % 3 == 0 ? 0.2 : 0.0);
        if (has_nan) {
            int64_t p = (int64_t)ct_rng_below(&rng, (uint64_t)(n * t));
            while (p < n * t && !counted(&d, p))
                p++;
            if (p == n * t)
                has_nan = false; /* no counted token: nothing to poison */
            else
                ct_tensor_set(&d.logits, p * v + (int64_t)ct_rng_below(&rng, (uint64_t)v), NAN);
        }
        ct_metric_set s = make_set(ignore);
        CHECK_OK(feed(&s, &d, 0, n, 1 + (int64_t)ct_rng_below(&rng, 8)));
        json_t *vals = compute_set(&s, "eval");
        if (json_object_size(vals) == 0) { /* every token ignored: nothing to estimate */
            json_decref(vals);
            ct_metric_set_free(&s);
            data_free(&d);
            continue;
        }
        double conf = trial % 2 ? 0.95 : 0.8, z = ct_confidence_z(conf);

        /* Closed form: a ratio over sequences. */
        ct_uncertainty_config none = {.resamples = 0, .confidence = conf};
        json_t *out = json_object();
        CHECK_OK(ct_metric_set_uncertainty(&s, &none, "eval", out));
        CHECK(json_object_size(out) == 9, "trial %d: closed forms: %zu keys", trial, json_object_size(out));
        if (has_nan)
            CHECK(is_null(vals, "eval_token_loss") && is_null(out, "eval_token_loss_stderr"),
                  "NaN logit: token_loss and its closed form are null");
        for (int acc = has_nan; acc < 2; acc++) {
            seq_ref q = sequences(&d, acc);
            long double A = 0, B = 0, ss = 0;
            for (int64_t i = 0; i < q.n; i++) {
                A += q.a[i];
                B += q.b[i];
            }
            long double R = A / B;
            for (int64_t i = 0; i < q.n; i++)
                ss += (q.a[i] - R * q.b[i]) * (q.a[i] - R * q.b[i]);
            double se = q.n > 1 ? (double)(sqrtl((long double)q.n / (q.n - 1) * ss) / B) : NAN;
            const char *nm = acc ? "eval_token_accuracy" : "eval_token_loss";
            char kse[64], klo[64], khi[64];
            snprintf(kse, sizeof kse, "%s_stderr", nm);
            snprintf(klo, sizeof klo, "%s_ci_low", nm);
            snprintf(khi, sizeof khi, "%s_ci_high", nm);
            if (q.n < 2) {
                CHECK(is_null(out, kse), "trial %d: one sequence: %s null", trial, kse);
            } else {
                /* The metric expands sum (a_i - R b_i)^2 into mergeable sums, which costs a few eps
                 * times sum a_i^2 / sum (a_i - R b_i)^2: the bound follows the data's conditioning. */
                long double a2 = 0;
                for (int64_t i = 0; i < q.n; i++)
                    a2 += (long double)q.a[i] * q.a[i];
                double tol = 1e-12 + 64 * DBL_EPSILON * (double)(ss > 0 ? a2 / ss : 1);
                CHECK_CLOSE(get_real(out, kse), se, tol, 1e-17);
                /* the centre is the metric, held to the value check's bounds (1e-12 relative, 1e-17
                 * absolute: a confident token's NLL of 1e-276 is 0 in the reference's log-sum-exp) */
                double lo = (double)R - z * se, hi = (double)R + z * se,
                       slack = z * se * tol + 1e-12 * fabs((double)R) + 1e-17;
                if (acc) {
                    lo = fmax(lo, 0);
                    hi = fmin(hi, 1);
                }
                CHECK(fabs(get_real(out, klo) - lo) <= slack, "trial %d: %s %.17g vs %.17g", trial, klo,
                      get_real(out, klo), lo);
                CHECK(fabs(get_real(out, khi) - hi) <= slack, "trial %d: %s %.17g vs %.17g", trial, khi,
                      get_real(out, khi), hi);
                if (!acc) {
                    if (isfinite(exp((double)R) * se))
                        CHECK_NEAR(get_real(out, "eval_perplexity_stderr"), exp((double)R) * se, tol + 1e-12);
                    else
                        CHECK(is_null(out, "eval_perplexity_stderr"), "overflowing perplexity: null stderr");
                    CHECK(is_exp_of(out, "eval_perplexity_ci_low", get_real(out, klo)) &&
                              is_exp_of(out, "eval_perplexity_ci_high", get_real(out, khi)),
                          "closed form: perplexity interval [%.17g, %.17g] = exp(token_loss interval [%.17g, %.17g])",
                          get_real(out, "eval_perplexity_ci_low"), get_real(out, "eval_perplexity_ci_high"),
                          get_real(out, klo), get_real(out, khi));
                }
            }
            seq_free(&q);
        }
        json_decref(out);

        /* Bootstrap: the same resamples through the reference over the tokens. */
        ct_uncertainty_config cfg = {
            .resamples = 100 + (int64_t)ct_rng_below(&rng, 300), .confidence = conf, .seed = ct_rng_u64(&rng)};
        out = json_object();
        CHECK_OK(ct_metric_set_uncertainty(&s, &cfg, "eval", out));
        double *bv = malloc((size_t)cfg.resamples * sizeof *bv);
        for (int acc = 0; acc < 2; acc++) {
            seq_ref q = sequences(&d, acc);
            CHECK_OK(ct_bootstrap_samples(&cfg, q.n, ref_stat, &q, 0, 1, bv));
            double lo, hi, se = ct_bootstrap_stderr(bv, cfg.resamples);
            CHECK_OK(ct_bootstrap_interval(bv, cfg.resamples, cfg.confidence, &lo, &hi));
            const char *nm = acc ? "eval_token_accuracy" : "eval_token_loss";
            char key[64];
            snprintf(key, sizeof key, "%s_stderr", nm);
            CHECK_CLOSE(get_real(out, key), se, 1e-9, 1e-17);
            snprintf(key, sizeof key, "%s_ci_low", nm);
            CHECK_CLOSE(get_real(out, key), lo, 1e-11, 1e-17);
            snprintf(key, sizeof key, "%s_ci_high", nm);
            CHECK_CLOSE(get_real(out, key), hi, 1e-11, 1e-17);
            if (has_nan) CHECK(isfinite(get_real(out, key)), "NaN logit: %s is finite (resamples without it)", key);
            seq_free(&q);
        }
        free(bv);
        CHECK(is_exp_of(out, "eval_perplexity_ci_low", get_real(out, "eval_token_loss_ci_low")) &&
                  is_exp_of(out, "eval_perplexity_ci_high", get_real(out, "eval_token_loss_ci_high")),
              "bootstrap: perplexity interval [%.17g, %.17g] = exp(token_loss interval [%.17g, %.17g])",
              get_real(out, "eval_perplexity_ci_low"), get_real(out, "eval_perplexity_ci_high"),
              get_real(out, "eval_token_loss_ci_low"), get_real(out, "eval_token_loss_ci_high"));
        /* Thread count and seed reuse: the same bits. */
        int threads = omp_get_max_threads();
        omp_set_num_threads(1);
        json_t *again = json_object();
        CHECK_OK(ct_metric_set_uncertainty(&s, &cfg, "eval", again));
        omp_set_num_threads(threads);
        CHECK(json_equal(out, again), "trial %d: bootstrap depends on the thread count", trial);
        json_decref(again);
        json_decref(out);
        json_decref(vals);
        ct_metric_set_free(&s);
        data_free(&d);
    }

    /* Sequences all right or all wrong: tokens of a sequence are one observation. The standard error
     * is sqrt(p (1 - p) / (n - 1)) over n sequences, sqrt(n T / (n - 1)) times the binomial one over
     * the n T tokens. */
    int64_t n = 50, t = 16, v = 3;
    data d;
    data_make(&d, n, t, v, CT_F64, CT_I64, CONTINUOUS, 0.0, -100, 0.0);
    int64_t right = 0;
    for (int64_t i = 0; i < n; i++) {
        bool ok = i % 3 != 0;
        right += ok;
        for (int64_t p = i * t; p < (i + 1) * t; p++) {
            int64_t am = ref_argmax(&d, p);
            ct_tensor_set(&d.labels, p, (double)(ok ? am : (am + 1) % v));
        }
    }
    ct_metric *acc;
    CHECK_OK(ct_lm_metric_create(CT_LM_TOKEN_ACCURACY, -100, &acc));
    ct_tensor o, l, k;
    ct_eval_batch b = batch_of(&d, 0, n, &o, &l, &k);
    CHECK_OK(ct_metric_update(acc, &b));
    json_t *out = json_object();
    CHECK_OK(ct_metric_compute(acc, "", out));
    ct_uncertainty_config none = {.resamples = 0, .confidence = 0.95};
    CHECK_OK(ct_metric_uncertainty(acc, &none, "", out));
    double p = (double)right / (double)n;
    CHECK(get_real(out, "token_accuracy") == p, "accuracy %g vs %g", get_real(out, "token_accuracy"), p);
    CHECK_NEAR(get_real(out, "token_accuracy_stderr"), sqrt(p * (1 - p) / (double)(n - 1)), 1e-12);
    double binomial = sqrt(p * (1 - p) / (double)(n * t));
    CHECK(get_real(out, "token_accuracy_stderr") > 3.9 * binomial, "cluster stderr %g, token binomial %g",
          get_real(out, "token_accuracy_stderr"), binomial);
    ct_uncertainty_config cfg = {.resamples = 4000, .confidence = 0.95, .seed = ct_rng_u64(&rng)};
    json_t *boot = json_object();
    CHECK_OK(ct_metric_uncertainty(acc, &cfg, "", boot));
    double bse = get_real(boot, "token_accuracy_stderr"), want = sqrt(p * (1 - p) / (double)n);
    CHECK(fabs(bse - want) < 0.1 * want, "bootstrap over sequences: stderr %g, expected about %g", bse, want);
    json_decref(boot);
    json_decref(out);
    ct_metric_free(acc);
    data_free(&d);
}


int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--compute") == 0)
        return ct_test_metric_compute_main("test_metrics_lm", argv[2], CT_I64, NULL);
    ct_test_begin("test_metrics_lm");
    ct_rng_init(&rng, ct_test_seed, 0, 0);
    test_values();
    test_merge_property();
    test_token_values_batch();
    test_edge_cases();
    test_errors();
    test_json();
    test_uncertainty();
    return ct_test_finish();
}
