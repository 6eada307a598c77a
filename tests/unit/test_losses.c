/* Losses: finite-difference gradients of the sum in float64 for every loss and option combination,
 * the fused forward_backward of cross-entropy (in place) against forward and backward, values
 * against naive reimplementations, count semantics, the split-batch property the Trainer
 * relies on, thread-count independence, NaN propagation, the vtable defaults, and the errors bad
 * tensors and bad JSON get; a language model's per-token values (ct_op_token_values).
 *
 * Why one file of over 600 lines: every loss goes through the same finite-difference harness and
 * the naive references written here. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/backend.h"
#include "core/ops/ops.h"
#include "core/util.h"
#include "model/loss.h"
#include "testlib.h"

static ct_rng rng;

static double unif(double lo, double hi) { return lo + (hi - lo) * ct_rng_uniform(&rng); }
static int64_t below(int64_t n) { return (int64_t)ct_rng_below(&rng, (uint64_t)n); }


static void fill_uniform(ct_tensor *t, double lo, double hi) {
    for (int64_t i = 0; i < ct_tensor_numel(t); i++) ct_tensor_set(t, i, unif(lo, hi));
}

/* The loss sum of pred against target, as the finite-difference checker's objective. */
typedef struct loss_objective {
    ct_loss *l;
    const ct_tensor *pred, *target;
} loss_objective;

static double loss_sum(void *ctx) {
    loss_objective *o = ctx;
    ct_loss_value v = {NAN, NAN};
    ct_status s = ct_loss_forward(o->l, o->pred, o->target, &v);
    if (s != CT_OK) ct_test_fail(__FILE__, __LINE__, "forward failed: %s", ct_last_error());
    return v.sum;
}

/* Central differences of the sum against backward (scale 1), on every element of small tensors and
 * 64 random ones otherwise; relative error of the probed vectors as in testlib's gradcheck. Then
 * backward with a random scale must be that scale times the first (dpred overwritten, not added). */
static void gradcheck(const char *label, ct_loss *l, ct_tensor *pred, const ct_tensor *target) {
    int64_t n = ct_tensor_numel(pred);
    ct_tensor g = ct_test_alloc(CT_F64, pred->ndim, pred->shape), g2 = ct_test_alloc(CT_F64, pred->ndim, pred->shape);
    ct_tensor_fill(&g, 123.0);
    CHECK_OK(ct_loss_backward(l, pred, target, 1.0, &g));
    double *a = g.data;
    loss_objective ctx = {l, pred, target};
    ct_fd_result res = ct_fd_check(loss_sum, &ctx, pred->data, a, n, 64, false, &rng);
    CHECK(res.rel < 1e-6, "%s: gradient relative error %.3g (bound 1e-6)", label, res.rel);
    CHECK(!res.analytic_zero, "%s: gradient is all zero, the check proves nothing", label);
    printf("%s: relative gradient error %.3g over %d probes\n", label, res.rel, res.probes);

    double scale = unif(0.01, 3.0), worst = 0, gmax = 0;
    ct_tensor_fill(&g2, -7.0);
    CHECK_OK(ct_loss_backward(l, pred, target, scale, &g2));
    for (int64_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs(((double *)g2.data)[i] - scale * a[i]));
        gmax = fmax(gmax, fabs(a[i]));
    }
    /* Rounding is relative to the terms a gradient is made of (probabilities, smoothed targets and
     * inputs, all of order 1 here), not to the result: with label smoothing 1 the gradient
     * p - 1/C cancels to ~1e-3 while its terms are ~0.1, and a few ulps of the terms is 1e-17. */
    CHECK(worst <= 1e-14 * fmax(gmax, 1.0) * scale, "%s: backward(scale %g) is not scale * backward(1): %.3g",
          label, scale, worst);
    ct_tensor_free(&g);
    ct_tensor_free(&g2);
}

/* --- cross-entropy -------------------------------------------------------------------------------- */

typedef struct xent_case {
    const char *label;
    bool tokens;     /* [N, T, C] instead of [N, C] */
    bool i32;        /* int32 targets */
    bool weighted;
    double smoothing;
    bool ignore;     /* some targets set to ignore_index */
    int64_t ignore_index;
} xent_case;

/* Fills logits and targets for a case; returns the class count. */
static void xent_data(const xent_case *c, int64_t n, int64_t t, int64_t classes, ct_tensor *logits,
                      ct_tensor *target) {
    int64_t ls[3] = {n, t, classes}, ls2[2] = {n, classes};
    *logits = c->tokens ? ct_test_alloc(CT_F64, 3, ls) : ct_test_alloc(CT_F64, 2, ls2);
    *target = ct_test_alloc(c->i32 ? CT_I32 : CT_I64, c->tokens ? 2 : 1, ls);
    fill_uniform(logits, -3, 3);
    int64_t rows = ct_tensor_numel(target);
    for (int64_t r = 0; r < rows; r++) {
        int64_t y = below(classes);
        /* roughly a third ignored, but never all: row 0 keeps a class that is not ignore_index */
        if (c->ignore && r > 0 && below(3) == 0) y = c->ignore_index;
        if (r == 0 && y == c->ignore_index) y = (y + 1) % classes;
        ct_tensor_set(target, r, (double)y);
    }
}

static ct_loss *xent_make(const xent_case *c, int64_t classes, double *w) {
    ct_cross_entropy_opts o = ct_cross_entropy_defaults();
    if (c->weighted) {
        for (int64_t j = 0; j < classes; j++) w[j] = unif(0.2, 2.0);
        o.weight = w;
        o.n_weight = classes;
    }
    o.label_smoothing = c->smoothing;
    o.ignore_index = c->ignore_index;
    ct_loss *l = NULL;
    CHECK_OK(ct_cross_entropy_loss_create(&o, &l));
    return l;
}

/* Naive reference: PyTorch's formula written out with an explicit softmax, per row. */
static ct_loss_value xent_naive(const xent_case *c, const ct_tensor *logits, const ct_tensor *target,
                                const double *w) {
    int64_t classes = logits->shape[logits->ndim - 1], rows = ct_tensor_numel(target);
    const double *z = logits->data;
    ct_loss_value v = {0, 0};
    for (int64_t r = 0; r < rows; r++) {
        int64_t y = (int64_t)ct_tensor_get(target, r);
        if (y == c->ignore_index) continue;
        double denom = 0;
        for (int64_t j = 0; j < classes; j++) denom += exp(z[r * classes + j]);
        double wy = w ? w[y] : 1.0, smooth = 0;
        for (int64_t j = 0; j < classes; j++) smooth -= (w ? w[j] : 1.0) * log(exp(z[r * classes + j]) / denom);
        double nll = -wy * log(exp(z[r * classes + y]) / denom);
        v.sum += (1 - c->smoothing) * nll + c->smoothing / (double)classes * smooth;
        v.count += wy;
    }
    return v;
}

/* The fused forward_backward (ct_op_fused_classifier) in place on a copy of the logits gives the
 * forward's (sum, count) and the backward's gradient g (scale 1) to the bit: the same row formulas
 * and the same chunked sums, so gradcheck's finite differences hold for it too. Then a separate
 * output buffer, and a target made invalid: the error names it and the logits are left untouched. */
static void fused_matches(const char *label, ct_loss *l, const ct_tensor *logits, const ct_tensor *target,
                          ct_loss_value v, const ct_tensor *g) {
    int64_t n = ct_tensor_numel(logits);
    ct_tensor z = ct_test_alloc(logits->dtype, logits->ndim, logits->shape);
    ct_tensor d = ct_test_alloc(logits->dtype, logits->ndim, logits->shape);
    memcpy(z.data, logits->data, (size_t)n * sizeof(double));
    ct_loss_value f = {NAN, NAN};
    CHECK_OK(ct_loss_forward_backward(l, &z, target, 1.0, &z, &f));
    CHECK(f.sum == v.sum && f.count == v.count, "%s: fused (%.17g, %g) != forward (%.17g, %g)", label, f.sum, f.count,
          v.sum, v.count);
    CHECK(memcmp(z.data, g->data, (size_t)n * sizeof(double)) == 0, "%s: fused in-place gradient != backward's", label);

    memcpy(z.data, logits->data, (size_t)n * sizeof(double));
    ct_tensor_fill(&d, 9.0);
    CHECK_OK(ct_loss_forward_backward(l, &z, target, 1.0, &d, &f));
    CHECK(memcmp(d.data, g->data, (size_t)n * sizeof(double)) == 0, "%s: fused gradient into dpred != backward's",
          label);
    CHECK(memcmp(z.data, logits->data, (size_t)n * sizeof(double)) == 0, "%s: fused wrote its input", label);

    /* The last row's target out of range: refused before any row (the first ones included) is written. */
    int64_t rows = ct_tensor_numel(target), classes = logits->shape[logits->ndim - 1];
    ct_tensor t = ct_test_alloc(target->dtype, target->ndim, target->shape);
    for (int64_t r = 0; r < rows; r++) ct_tensor_set(&t, r, ct_tensor_get(target, r));
    ct_tensor_set(&t, rows - 1, (double)(classes + 3));
    CHECK_ERR(ct_loss_forward_backward(l, &z, &t, 1.0, &z, &f), CT_ERR_INVALID_ARG, "is outside [0, ");
    CHECK(memcmp(z.data, logits->data, (size_t)n * sizeof(double)) == 0,
          "%s: a refused fused call changed the logits", label);
    ct_tensor_free(&t);
    ct_tensor_free(&z);
    ct_tensor_free(&d);
}

/* Per-sample values (ct_loss_forward_rows, one pass of ct_op_cross_entropy_rows) are forward's on
 * each sample alone, to the bit (a sample's positions added in order, as forward's chunks add at most
 * one position each for these sizes), and the op's per-position values forward's on each position; an
 * invalid target is named as forward names it. */
static void rows_match(const char *label, ct_loss *l, const ct_tensor *logits, const ct_tensor *target,
                       const xent_case *c, const double *w) {
    int64_t n = logits->shape[0], positions = ct_tensor_numel(target), classes = logits->shape[logits->ndim - 1];
    ct_loss_value rows[8];
    CHECK_OK(ct_loss_forward_rows(l, logits, target, rows));
    for (int64_t i = 0; i < n; i++) {
        ct_tensor p = ct_tensor_rows(logits, i, 1), y = ct_tensor_rows(target, i, 1);
        ct_loss_value v;
        CHECK_OK(ct_loss_forward(l, &p, &y, &v));
        CHECK(rows[i].sum == v.sum && rows[i].count == v.count, "%s: row %lld (%.17g, %g), forward (%.17g, %g)",
              label, (long long)i, rows[i].sum, rows[i].count, v.sum, v.count);
    }
    double loss[64], count[64];
    ct_tensor wt = ct_tensor_view((void *)w, CT_F64, CT_CPU, 1, &classes);
    ct_xent_opts o = {.weight = c->weighted ? &wt : NULL, .label_smoothing = c->smoothing,
                      .ignore_index = c->ignore_index};
    CHECK(ct_op_cross_entropy_rows(logits, target, &o, loss, count) == -1, "%s: rows op refused a target", label);
    int64_t one[2] = {1, classes};
    for (int64_t r = 0; r < positions; r++) {
        ct_tensor z = ct_tensor_view((double *)logits->data + r * classes, CT_F64, CT_CPU, 2, one);
        ct_tensor y = ct_tensor_view((char *)target->data + r * ct_dtype_size(target->dtype), target->dtype, CT_CPU, 1,
                                     one);
        double s, k;
        CHECK(ct_op_cross_entropy_forward(&z, &y, &o, &s, &k) == -1 && s == loss[r] && k == count[r],
              "%s: position %lld (%.17g, %g), forward (%.17g, %g)", label, (long long)r, loss[r], count[r], s, k);
    }
    ct_tensor t = ct_test_alloc(target->dtype, target->ndim, target->shape);
    for (int64_t r = 0; r < positions; r++) ct_tensor_set(&t, r, ct_tensor_get(target, r));
    ct_tensor_set(&t, positions - 1, (double)(classes + 3));
    char want[64];
    snprintf(want, sizeof want, "target %lld at ", (long long)(classes + 3));
    CHECK_ERR(ct_loss_forward_rows(l, logits, &t, rows), CT_ERR_INVALID_ARG, want, "is outside [0, ");
    ct_tensor_free(&t);
}

static void xent_cases(void) {
    const xent_case cases[] = {
        {"cross_entropy", false, false, false, 0.0, false, -100},
        {"cross_entropy int32 targets", false, true, false, 0.0, false, -100},
        {"cross_entropy tokens [N, T, C]", true, false, false, 0.0, false, -100},
        {"cross_entropy weighted", false, false, true, 0.0, false, -100},
        {"cross_entropy label_smoothing", false, false, false, 0.3, false, -100},
        {"cross_entropy ignore_index", true, false, false, 0.0, true, -100},
        {"cross_entropy weight+smoothing", false, true, true, 0.15, false, -100},
        {"cross_entropy weight+smoothing+ignore_index", true, false, true, 0.2, true, -100},
        {"cross_entropy ignore_index = class 0", false, false, true, 0.1, true, 0},
        {"cross_entropy smoothing 1", false, false, true, 1.0, true, -1},
    };
    for (size_t k = 0; k < CT_ARRAY_LEN(cases); k++) {
        const xent_case *c = &cases[k];
        int64_t n = 1 + below(6), t = 1 + below(4), classes = 2 + below(8);
        double w[16];
        ct_loss *l = xent_make(c, classes, w);
        ct_tensor logits, target;
        xent_data(c, n, t, classes, &logits, &target);
        ct_loss_value v, ref = xent_naive(c, &logits, &target, c->weighted ? w : NULL);
        CHECK_OK(ct_loss_forward(l, &logits, &target, &v));
        CHECK_NEAR(v.sum, ref.sum, 1e-12);
        CHECK_NEAR(v.count, ref.count, 1e-14);
        if (!c->weighted) {
            int64_t kept = 0;
            for (int64_t r = 0; r < ct_tensor_numel(&target); r++) kept += ct_tensor_get(&target, r) != c->ignore_index;
            CHECK(v.count == (double)kept, "%s: count %g, expected the %lld non-ignored targets", c->label, v.count,
                  (long long)kept);
        }
        gradcheck(c->label, l, &logits, &target);

        /* ignored rows get exactly zero gradient */
        ct_tensor g = ct_test_alloc(CT_F64, logits.ndim, logits.shape);
        ct_tensor_fill(&g, 5.0);
        CHECK_OK(ct_loss_backward(l, &logits, &target, 1.0, &g));
        fused_matches(c->label, l, &logits, &target, v, &g);
        rows_match(c->label, l, &logits, &target, c, c->weighted ? w : NULL);
        for (int64_t r = 0; r < ct_tensor_numel(&target); r++) {
            if (ct_tensor_get(&target, r) != c->ignore_index) continue;
            bool zero = true;
            for (int64_t j = 0; j < classes; j++) zero &= ((double *)g.data)[r * classes + j] == 0.0;
            CHECK(zero, "%s: ignored row %lld has a nonzero gradient", c->label, (long long)r);
        }
        ct_tensor_free(&g);
        ct_tensor_free(&logits);
        ct_tensor_free(&target);
        ct_loss_free(l);
    }

    /* All targets ignored: (0, 0), as PyTorch's sum (its mean is NaN). */
    ct_loss *l;
    CHECK_OK(ct_cross_entropy_loss_create(NULL, &l));
    int64_t ls[2] = {3, 4};
    ct_tensor z = ct_test_alloc(CT_F64, 2, ls), y = ct_test_alloc(CT_I64, 1, ls);
    fill_uniform(&z, -1, 1);
    ct_tensor_fill(&y, -100);
    ct_loss_value v;
    CHECK_OK(ct_loss_forward(l, &z, &y, &v));
    CHECK(v.sum == 0 && v.count == 0, "all ignored: (%g, %g), expected (0, 0)", v.sum, v.count);
    CHECK(isnan(ct_loss_value_mean(v)), "all ignored: mean of nothing is NaN");

    /* An empty batch: (0, 0) and an empty gradient, not an error. */
    ct_tensor z0 = ct_tensor_rows(&z, 0, 0), y0 = ct_tensor_rows(&y, 0, 0);
    ct_tensor g0 = ct_test_alloc(CT_F64, 2, ls);
    ct_tensor g0v = ct_tensor_rows(&g0, 0, 0);
    CHECK_OK(ct_loss_forward(l, &z0, &y0, &v));
    CHECK(v.sum == 0 && v.count == 0, "empty batch: (%g, %g)", v.sum, v.count);
    CHECK_OK(ct_loss_backward(l, &z0, &y0, 1.0, &g0v));
    ct_tensor_free(&g0);

    /* Huge logits stay finite (log-sum-exp subtracts the row max). */
    ct_tensor_fill(&y, 1);
    for (int64_t i = 0; i < 12; i++) ct_tensor_set(&z, i, (i % 4) * 400.0 - 600.0);
    CHECK_OK(ct_loss_forward(l, &z, &y, &v));
    CHECK_NEAR(v.sum, 3 * 800.0, 1e-12); /* target logit -200, max 600: -log p = 800 (+ e^-400 terms) */
    ct_tensor_free(&z);
    ct_tensor_free(&y);
    ct_loss_free(l);
}

/* --- elementwise losses ---------------------------------------------------------------------------- */

typedef struct pw_case {
    const char *label;
    const char *json;
    double target_lo, target_hi; /* target range */
    double kink;                 /* |pred - target| values to stay away from, besides 0 (l1) */
} pw_case;

static double pw_naive(const char *type, double x, double y, double delta, double pw) {
    double d = x - y;
    if (strcmp(type, "mse") == 0) return d * d;
    if (strcmp(type, "l1") == 0) return fabs(d);
    if (strcmp(type, "huber") == 0) return fabs(d) < delta ? 0.5 * d * d : delta * (fabs(d) - 0.5 * delta);
    /* -[pw y log s(x) + (1 - y) log(1 - s(x))], fine for moderate x */
    double s = 1 / (1 + exp(-x));
    return -(pw * y * log(s) + (1 - y) * log(1 - s));
}

/* Per-sample values (ct_loss_forward_rows, one pass of ct_op_pointwise_loss_rows): each row's sum is
 * forward's on the row alone, to the bit, its count the row's elements, and the naive formula's sum
 * over the row (huber's delta; pos_weight pw, or pwv[j % last] by the element's index j when pwv is
 * given). */
static void pointwise_rows_match(const char *label, ct_loss *l, const ct_tensor *x, const ct_tensor *y, double delta,
                                 double pw, const double *pwv, int64_t last) {
    int64_t n = x->shape[0], m = ct_tensor_numel(x) / n;
    ct_loss_value rows[8];
    CT_ASSERT(n <= 8);
    CHECK_OK(ct_loss_forward_rows(l, x, y, rows));
    for (int64_t i = 0; i < n; i++) {
        ct_tensor p = ct_tensor_rows(x, i, 1), t = ct_tensor_rows(y, i, 1);
        ct_loss_value v;
        CHECK_OK(ct_loss_forward(l, &p, &t, &v));
        CHECK(rows[i].sum == v.sum && rows[i].count == (double)m && v.count == (double)m,
              "%s: row %lld (%.17g, %g), forward (%.17g, %g)", label, (long long)i, rows[i].sum, rows[i].count, v.sum,
              v.count);
        double ref = 0;
        for (int64_t j = i * m; j < (i + 1) * m; j++)
            ref += pw_naive(ct_loss_name(l), ct_tensor_get(x, j), ct_tensor_get(y, j), delta, pwv ? pwv[j % last] : pw);
        CHECK_NEAR(rows[i].sum, ref, 1e-12);
    }
}

static void pointwise_cases(void) {
    double delta = unif(0.3, 2.0);
    char huber[64], pw_vec[256];
    snprintf(huber, sizeof huber, "{\"type\": \"huber\", \"delta\": %.17g}", delta);
    int64_t last = 1 + below(5);
    double pwv[8];
    int len = snprintf(pw_vec, sizeof pw_vec, "{\"type\": \"bce_with_logits\", \"pos_weight\": [");
    for (int64_t j = 0; j < last; j++) {
        pwv[j] = unif(0.1, 4.0);
        len += snprintf(pw_vec + len, sizeof pw_vec - (size_t)len, "%s%.17g", j ? ", " : "", pwv[j]);
    }
    snprintf(pw_vec + len, sizeof pw_vec - (size_t)len, "]}");
    const pw_case cases[] = {
        {"mse", "\"mse\"", -2, 2, 0},
        {"l1", "{\"type\": \"l1\"}", -2, 2, 0},
        {"huber default delta", "{\"type\": \"huber\"}", -3, 3, 1.0},
        {"huber", huber, -3, 3, delta},
        {"bce_with_logits", "{\"type\": \"bce_with_logits\"}", 0, 1, 0},
        {"bce_with_logits pos_weight scalar", "{\"type\": \"bce_with_logits\", \"pos_weight\": 2.5}", 0, 1, 0},
        {"bce_with_logits pos_weight per class", pw_vec, 0, 1, 0},
    };
    for (size_t k = 0; k < CT_ARRAY_LEN(cases); k++) {
        const pw_case *c = &cases[k];
        json_error_t err;
        json_t *spec = json_loads(c->json, JSON_DECODE_ANY, &err);
        CT_ASSERT(spec);
        ct_loss *l = NULL;
        CHECK_OK(ct_loss_from_json(spec, "loss", &l));
        json_decref(spec);
        if (!l) continue;
        int64_t shape[3] = {2 + below(6), 1 + below(3), last};
        ct_tensor x = ct_test_alloc(CT_F64, 3, shape), y = ct_test_alloc(CT_F64, 3, shape);
        fill_uniform(&y, c->target_lo, c->target_hi);
        for (int64_t i = 0; i < ct_tensor_numel(&x); i++) {
            double v, t = ct_tensor_get(&y, i);
            do v = unif(-4, 4);
            while (fabs(v - t) < 1e-3 || (c->kink > 0 && fabs(fabs(v - t) - c->kink) < 1e-3));
            ct_tensor_set(&x, i, v);
        }
        ct_loss_value v;
        CHECK_OK(ct_loss_forward(l, &x, &y, &v));
        CHECK(v.count == (double)ct_tensor_numel(&x), "%s: count %g, expected %lld elements", c->label, v.count,
              (long long)ct_tensor_numel(&x));
        const char *type = ct_loss_name(l);
        double ref = 0;
        for (int64_t i = 0; i < ct_tensor_numel(&x); i++) {
            double pw = k == 5 ? 2.5 : k == 6 ? pwv[i % last] : 1.0;
            ref += pw_naive(type, ct_tensor_get(&x, i), ct_tensor_get(&y, i), c->kink > 0 ? c->kink : 1.0, pw);
        }
        CHECK_NEAR(v.sum, ref, 1e-12);
        pointwise_rows_match(c->label, l, &x, &y, c->kink > 0 ? c->kink : 1.0, k == 5 ? 2.5 : 1.0, k == 6 ? pwv : NULL,
                             last);
        gradcheck(c->label, l, &x, &y);
        ct_tensor_free(&x);
        ct_tensor_free(&y);
        ct_loss_free(l);
    }

    /* bce_with_logits is stable where the naive formula overflows: log(1 + e^800) = 800. */
    ct_loss *l;
    CHECK_OK(ct_bce_with_logits_loss_create(NULL, 0, &l));
    int64_t two[1] = {2};
    ct_tensor x = ct_test_alloc(CT_F64, 1, two), y = ct_test_alloc(CT_F64, 1, two), g = ct_test_alloc(CT_F64, 1, two);
    ct_tensor_set(&x, 0, 800.0);
    ct_tensor_set(&x, 1, -800.0);
    ct_tensor_set(&y, 0, 0.0);
    ct_tensor_set(&y, 1, 1.0);
    ct_loss_value v;
    CHECK_OK(ct_loss_forward(l, &x, &y, &v));
    CHECK_NEAR(v.sum, 1600.0, 1e-15);
    CHECK_OK(ct_loss_backward(l, &x, &y, 1.0, &g));
    CHECK(ct_tensor_get(&g, 0) == 1.0 && ct_tensor_get(&g, 1) == -1.0, "bce saturated gradients %g %g",
          ct_tensor_get(&g, 0), ct_tensor_get(&g, 1));
    ct_loss_free(l);
    /* One value per sample, pos_weight one per sample too (pred's last dimension is its first): each
     * row's loss weighs its own sample, as the batch's forward does. */
    double pw2[2] = {unif(0.2, 3.0), unif(0.2, 3.0)};
    CHECK_OK(ct_bce_with_logits_loss_create(pw2, 2, &l));
    for (int i = 0; i < 2; i++) {
        ct_tensor_set(&x, i, unif(-2, 2));
        ct_tensor_set(&y, i, 1.0);
    }
    ct_loss_value rows[2];
    CHECK_OK(ct_loss_forward_rows(l, &x, &y, rows));
    CHECK_OK(ct_loss_forward(l, &x, &y, &v));
    for (int i = 0; i < 2; i++)
        CHECK_NEAR(rows[i].sum, pw_naive("bce_with_logits", ct_tensor_get(&x, i), 1.0, 1.0, pw2[i]), 1e-13);
    CHECK(rows[0].sum + rows[1].sum == v.sum && rows[0].count == 1 && rows[1].count == 1,
          "per-sample pos_weight rows (%.17g, %g) + (%.17g, %g) != forward %.17g", rows[0].sum, rows[0].count,
          rows[1].sum, rows[1].count, v.sum);
    ct_loss_free(l);
    ct_tensor_free(&x);
    ct_tensor_free(&y);
    ct_tensor_free(&g);
}

/* --- the Trainer's property: adding (sum, count) over parts gives the whole batch's mean ------------- */

static void split_batch(void) {
    double w[16];
    const xent_case xc = {"cross_entropy weight+smoothing+ignore_index", true, false, true, 0.1, true, -100};
    const xent_case xu = {"cross_entropy ignore_index", false, false, false, 0.0, true, -100};
    const char *pw_specs[] = {"\"mse\"", "\"l1\"", "{\"type\": \"huber\", \"delta\": 0.7}",
                              "{\"type\": \"bce_with_logits\", \"pos_weight\": 3}"};
    for (int k = 0; k < 2 + (int)CT_ARRAY_LEN(pw_specs); k++) {
        int64_t n = 4 + below(12), classes = 2 + below(8), t = 1 + below(4);
        ct_loss *l = NULL;
        ct_tensor pred, target;
        const char *label;
        if (k < 2) {
            const xent_case *c = k == 0 ? &xc : &xu;
            label = c->label;
            l = xent_make(c, classes, w);
            xent_data(c, n, t, classes, &pred, &target);
        } else {
            json_t *spec = json_loads(pw_specs[k - 2], JSON_DECODE_ANY, NULL);
            CHECK_OK(ct_loss_from_json(spec, "loss", &l));
            json_decref(spec);
            label = ct_loss_name(l);
            int64_t shape[2] = {n, classes};
            pred = ct_test_alloc(CT_F64, 2, shape);
            target = ct_test_alloc(CT_F64, 2, shape);
            fill_uniform(&pred, -2, 2);
            fill_uniform(&target, 0, 1);
        }
        int64_t cut = 1 + below(n - 1); /* uneven halves */
        ct_tensor pa = ct_tensor_rows(&pred, 0, cut), pb = ct_tensor_rows(&pred, cut, n - cut);
        ct_tensor ta = ct_tensor_rows(&target, 0, cut), tb = ct_tensor_rows(&target, cut, n - cut);
        ct_loss_value whole, a, b;
        CHECK_OK(ct_loss_forward(l, &pred, &target, &whole));
        CHECK_OK(ct_loss_forward(l, &pa, &ta, &a));
        CHECK_OK(ct_loss_forward(l, &pb, &tb, &b));
        ct_loss_value both = ct_loss_value_add(a, b);
        if (k == 0)
            CHECK_NEAR(both.count, whole.count, 1e-15); /* sums of real weights: equal up to rounding */
        else
            CHECK(both.count == whole.count, "%s: counts %g + %g != %g", label, a.count, b.count, whole.count);
        CHECK_NEAR(ct_loss_value_mean(both), ct_loss_value_mean(whole), 1e-14);
        /* Averaging the halves' means would be wrong whenever their counts and their means differ: it
         * misses by (mean_a - mean_b)(count_a - count_b) / 2(count_a + count_b), so halves whose means or
         * weighted counts happen to agree (one draw in a few thousand) cannot tell the two apart. */
        double ma = ct_loss_value_mean(a), mb = ct_loss_value_mean(b), naive = 0.5 * (ma + mb);
        double miss = fabs((ma - mb) * (a.count - b.count)) / (2 * (a.count + b.count));
        if (a.count > 0 && b.count > 0 && miss > 1e-6 * fabs(ct_loss_value_mean(whole)))
            CHECK(fabs(naive - ct_loss_value_mean(whole)) > 1e-9 * fabs(ct_loss_value_mean(whole)),
                  "%s: the mean of means equals the mean, the check proves nothing", label);

        /* Gradients with the global 1/count are the same rows, bit for bit. */
        ct_tensor g = ct_test_alloc(CT_F64, pred.ndim, pred.shape), gs = ct_test_alloc(CT_F64, pred.ndim, pred.shape);
        ct_tensor ga = ct_tensor_rows(&gs, 0, cut), gb = ct_tensor_rows(&gs, cut, n - cut);
        double scale = 1.0 / whole.count;
        CHECK_OK(ct_loss_backward(l, &pred, &target, scale, &g));
        CHECK_OK(ct_loss_backward(l, &pa, &ta, scale, &ga));
        CHECK_OK(ct_loss_backward(l, &pb, &tb, scale, &gb));
        CHECK(memcmp(g.data, gs.data, ct_tensor_nbytes(&g)) == 0, "%s: split gradients differ from the whole's",
              label);
        ct_tensor_free(&g);
        ct_tensor_free(&gs);
        ct_tensor_free(&pred);
        ct_tensor_free(&target);
        ct_loss_free(l);
    }
}

/* --- float32, threads, NaN -------------------------------------------------------------------------- */

static void f32_and_threads(void) {
    /* Big enough for the OpenMP path: [N, T, C] with N*T*C > CT_OMP_MIN. */
    int64_t shape[3] = {16, 64, 100};
    ct_tensor z64 = ct_test_alloc(CT_F64, 3, shape), z32 = ct_test_alloc(CT_F32, 3, shape), y = ct_test_alloc(CT_I64, 2, shape);
    fill_uniform(&z64, -5, 5);
    for (int64_t i = 0; i < ct_tensor_numel(&z64); i++) ct_tensor_set(&z32, i, ct_tensor_get(&z64, i));
    for (int64_t i = 0; i < ct_tensor_numel(&y); i++) ct_tensor_set(&y, i, i % 7 == 0 ? -100 : (double)below(100));
    ct_cross_entropy_opts o = ct_cross_entropy_defaults();
    o.label_smoothing = 0.1;
    ct_loss *l;
    CHECK_OK(ct_cross_entropy_loss_create(&o, &l));
    int threads = ct_get_num_threads();
    ct_loss_value v1, v2, v32;
    ct_set_num_threads(1);
    CHECK_OK(ct_loss_forward(l, &z64, &y, &v1));
    ct_set_num_threads(2);
    CHECK_OK(ct_loss_forward(l, &z64, &y, &v2));
    ct_set_num_threads(threads);
    CHECK(v1.sum == v2.sum && v1.count == v2.count, "sum with 1 thread %.17g != with 2 threads %.17g", v1.sum,
          v2.sum);
    /* float32 logits: the same numbers rounded, accumulated in double. */
    CHECK_OK(ct_loss_forward(l, &z32, &y, &v32));
    double ref = 0;
    {
        ct_tensor zr = ct_test_alloc(CT_F64, 3, shape);
        for (int64_t i = 0; i < ct_tensor_numel(&zr); i++) ct_tensor_set(&zr, i, ct_tensor_get(&z32, i));
        ct_loss_value vr;
        CHECK_OK(ct_loss_forward(l, &zr, &y, &vr));
        ref = vr.sum;
        ct_tensor_free(&zr);
    }
    CHECK_NEAR(v32.sum, ref, 1e-12);
    ct_tensor g32 = ct_test_alloc(CT_F32, 3, shape), g64 = ct_test_alloc(CT_F64, 3, shape);
    CHECK_OK(ct_loss_backward(l, &z32, &y, 1.0 / v32.count, &g32));
    CHECK_OK(ct_loss_backward(l, &z64, &y, 1.0 / v1.count, &g64));
    double worst = 0, gmax = 0;
    for (int64_t i = 0; i < ct_tensor_numel(&g32); i++) {
        worst = fmax(worst, fabs(ct_tensor_get(&g32, i) - ct_tensor_get(&g64, i)));
        gmax = fmax(gmax, fabs(ct_tensor_get(&g64, i)));
    }
    CHECK(worst < 1e-5 * gmax, "float32 gradient off by %.3g (max %.3g)", worst, gmax);
    /* The fused path on float32, in place, on 1 and 2 threads: the forward's sum and the backward's
     * gradient to the bit, whatever the thread count. */
    for (int th = 1; th <= 2; th++) {
        ct_tensor f32 = ct_test_alloc(CT_F32, 3, shape);
        memcpy(f32.data, z32.data, (size_t)ct_tensor_numel(&z32) * sizeof(float));
        ct_loss_value fv;
        ct_set_num_threads(th);
        CHECK_OK(ct_loss_forward_backward(l, &f32, &y, 1.0 / v32.count, &f32, &fv));
        ct_set_num_threads(threads);
        CHECK(fv.sum == v32.sum && fv.count == v32.count, "fused float32 sum %.17g != forward's %.17g (%d threads)",
              fv.sum, v32.sum, th);
        CHECK(memcmp(f32.data, g32.data, (size_t)ct_tensor_numel(&g32) * sizeof(float)) == 0,
              "fused float32 gradient != backward's (%d threads)", th);
        ct_tensor_free(&f32);
    }
    /* Per-position values of float32 logits on the OpenMP path, on 1 and 2 threads: each position's
     * forward alone, to the bit; their sum in order is the forward's sum to rounding. */
    int64_t positions = ct_tensor_numel(&y), one[2] = {1, shape[2]};
    double *pl = malloc((size_t)positions * 2 * sizeof *pl), *pc = pl + positions;
    ct_xent_opts xo = {.label_smoothing = o.label_smoothing, .ignore_index = o.ignore_index};
    for (int th = 1; th <= 2; th++) {
        ct_set_num_threads(th);
        CHECK(ct_op_cross_entropy_rows(&z32, &y, &xo, pl, pc) == -1, "rows op refused a target (%d threads)", th);
        ct_set_num_threads(threads);
        bool same = true;
        double total = 0;
        for (int64_t r = 0; r < positions; r += 37) {
            ct_tensor zr = ct_tensor_view((float *)z32.data + r * shape[2], CT_F32, CT_CPU, 2, one);
            ct_tensor yr = ct_tensor_view((int64_t *)y.data + r, CT_I64, CT_CPU, 1, one);
            double s, k;
            same &= ct_op_cross_entropy_forward(&zr, &yr, &xo, &s, &k) == -1 && s == pl[r] && k == pc[r];
        }
        for (int64_t r = 0; r < positions; r++) total += pl[r];
        CHECK(same, "float32 per-position values differ from each position's forward (%d threads)", th);
        CHECK_NEAR(total, v32.sum, 1e-9 * fabs(v32.sum));
    }
    free(pl);
    ct_tensor_free(&g32);
    ct_tensor_free(&g64);
    ct_loss_free(l);

    /* Elementwise on the OpenMP path, f32. */
    ct_tensor t32 = ct_test_alloc(CT_F32, 3, shape);
    fill_uniform(&t32, 0, 1);
    CHECK_OK(ct_bce_with_logits_loss_create(NULL, 0, &l));
    ct_set_num_threads(1);
    CHECK_OK(ct_loss_forward(l, &z32, &t32, &v1));
    ct_set_num_threads(2);
    CHECK_OK(ct_loss_forward(l, &z32, &t32, &v2));
    ct_set_num_threads(threads);
    CHECK(v1.sum == v2.sum, "bce sum with 1 thread %.17g != with 2 threads %.17g", v1.sum, v2.sum);
    ct_loss_free(l);
    /* Its per-sample values on the OpenMP path (rows of 6400 elements, pos_weight per class), on 1 and
     * 2 threads: each row's forward alone, to the bit. */
    double pw[100];
    for (int j = 0; j < 100; j++) pw[j] = unif(0.2, 3.0);
    CHECK_OK(ct_bce_with_logits_loss_create(pw, 100, &l));
    for (int th = 1; th <= 2; th++) {
        ct_loss_value rows[16];
        ct_set_num_threads(th);
        CHECK_OK(ct_loss_forward_rows(l, &z32, &t32, rows));
        ct_set_num_threads(threads);
        for (int64_t i = 0; i < shape[0]; i++) {
            ct_tensor p = ct_tensor_rows(&z32, i, 1), t = ct_tensor_rows(&t32, i, 1);
            CHECK_OK(ct_loss_forward(l, &p, &t, &v1));
            CHECK(rows[i].sum == v1.sum && rows[i].count == v1.count, "bce row %lld %.17g != its forward %.17g "
                  "(%d threads)", (long long)i, rows[i].sum, v1.sum, th);
        }
    }
    ct_loss_free(l);
    ct_tensor_free(&t32);
    ct_tensor_free(&z64);
    ct_tensor_free(&z32);
    ct_tensor_free(&y);
}

static void nan_propagates(void) {
    const char *specs[] = {"\"cross_entropy\"", "\"mse\"", "\"l1\"", "\"huber\"", "\"bce_with_logits\""};
    for (size_t k = 0; k < CT_ARRAY_LEN(specs); k++) {
        json_t *spec = json_loads(specs[k], JSON_DECODE_ANY, NULL);
        ct_loss *l;
        CHECK_OK(ct_loss_from_json(spec, "loss", &l));
        json_decref(spec);
        int64_t shape[2] = {3, 4};
        ct_tensor x = ct_test_alloc(CT_F32, 2, shape), g = ct_test_alloc(CT_F32, 2, shape);
        ct_tensor y = k == 0 ? ct_test_alloc(CT_I64, 1, shape) : ct_test_alloc(CT_F32, 2, shape);
        fill_uniform(&x, -1, 1);
        if (k > 0) fill_uniform(&y, 0, 1);
        /* first element of a row: the case a max-by-comparison would skip */
        ct_tensor_set(&x, 4, NAN);
        ct_loss_value v;
        CHECK_OK(ct_loss_forward(l, &x, &y, &v));
        CHECK(isnan(v.sum), "%s: a NaN prediction gives sum %g, expected NaN", ct_loss_name(l), v.sum);
        CHECK_OK(ct_loss_backward(l, &x, &y, 1.0, &g));
        CHECK(isnan(ct_tensor_get(&g, 4)), "%s: NaN prediction, gradient %g", ct_loss_name(l), ct_tensor_get(&g, 4));
        if (k > 0) {
            ct_tensor_set(&x, 4, 0.5);
            ct_tensor_set(&y, 7, NAN);
            CHECK_OK(ct_loss_forward(l, &x, &y, &v));
            CHECK(isnan(v.sum), "%s: a NaN target gives sum %g, expected NaN", ct_loss_name(l), v.sum);
        }
        ct_tensor_free(&x);
        ct_tensor_free(&y);
        ct_tensor_free(&g);
        ct_loss_free(l);
    }
}

/* --- the vtable ------------------------------------------------------------------------------------- */

typedef struct const_loss {
    ct_loss base;
    double value;
} const_loss;

static ct_status const_forward(ct_loss *l, const ct_tensor *pred, const ct_tensor *target, ct_loss_value *out) {
    const_loss *c = ct_container_of(l, const_loss, base);
    *out = (ct_loss_value){c->value * (double)pred->shape[0], (double)pred->shape[0]};
    return CT_OK;
}

static ct_status failing_backward(ct_loss *l, const ct_tensor *p, const ct_tensor *t, double s, ct_tensor *d) {
    return ct_error(CT_ERR_NUMERIC, "backward blew up");
}

static void vtable(void) {
    /* name and destroy NULL: "custom" and free(); a table written before `backward` existed. */
    static const ct_loss_ops old = {offsetof(ct_loss_ops, backward), NULL, const_forward, failing_backward, NULL, NULL,
                                    NULL, NULL};
    static const ct_loss_ops full = {sizeof(ct_loss_ops), "const", const_forward, failing_backward, NULL, NULL, NULL,
                                     NULL};
    const_loss *c = calloc(1, sizeof *c);
    ct_loss_base_init(&c->base, &old);
    c->value = 2.5;
    int64_t shape[2] = {3, 2};
    ct_tensor x = ct_test_alloc(CT_F32, 2, shape), g = ct_test_alloc(CT_F32, 2, shape);
    ct_loss_value v;
    CHECK(strcmp(ct_loss_name(&c->base), "custom") == 0, "NULL name reads 'custom'");
    CHECK_OK(ct_loss_forward(&c->base, &x, &x, &v));
    CHECK(v.sum == 7.5 && v.count == 3, "custom forward (%g, %g)", v.sum, v.count);
    CHECK_ERR(ct_loss_backward(&c->base, &x, &x, 1.0, &g), CT_ERR_UNSUPPORTED, "custom loss: has no backward");
    c->base.ops = &full;
    CHECK_ERR(ct_loss_backward(&c->base, &x, &x, 1.0, &g), CT_ERR_NUMERIC, "const loss: backward blew up");
    /* No forward_backward: the wrapper runs forward (the value arrives), then backward (its error). */
    v = (ct_loss_value){0, 0};
    CHECK_ERR(ct_loss_forward_backward(&c->base, &x, &x, 1.0, &g, &v), CT_ERR_NUMERIC, "const loss: backward blew up");
    c->base.ops = &old;
    CHECK_ERR(ct_loss_forward_backward(&c->base, &x, &x, 1.0, &g, &v), CT_ERR_UNSUPPORTED,
              "custom loss: has no backward");
    c->base.ops = &full;
    /* No forward_rows: the wrapper calls forward on each row alone. */
    ct_loss_value rows[3] = {{0, 0}};
    CHECK_OK(ct_loss_forward_rows(&c->base, &x, &x, rows));
    CHECK(rows[0].sum == 2.5 && rows[1].count == 1 && rows[2].sum == 2.5, "custom per-row values (%g, %g)",
          rows[2].sum, rows[2].count);
    ct_tensor y2 = ct_tensor_rows(&x, 0, 2);
    CHECK_ERR(ct_loss_forward_rows(&c->base, &x, &y2, rows), CT_ERR_SHAPE, "const loss: per-row losses", "same rows");
    ct_loss_free(&c->base); /* the default destroy frees it; ASan would see a leak or a bad free */
    ct_loss_free(NULL);
    ct_tensor_free(&x);
    ct_tensor_free(&g);
}

/* --- errors ----------------------------------------------------------------------------------------- */

static ct_status from_json_text(const char *text, ct_loss **out) {
    json_error_t err;
    json_t *spec = json_loads(text, JSON_DECODE_ANY, &err);
    CT_ASSERT(spec);
    ct_status s = ct_loss_from_json(spec, "trainer.loss", out);
    json_decref(spec);
    return s;
}

static void errors(void) {
    ct_loss *l = NULL;
    int64_t s84[2] = {8, 4}, s8[1] = {8}, s9[1] = {9}, s85[3] = {8, 5, 4};
    ct_tensor z = ct_test_alloc(CT_F32, 2, s84), y = ct_test_alloc(CT_I64, 1, s8), y9 = ct_test_alloc(CT_I64, 1, s9);
    ct_tensor yf = ct_test_alloc(CT_F32, 1, s8), zt = ct_test_alloc(CT_F32, 3, s85), yt = ct_test_alloc(CT_I32, 2, s85);
    ct_tensor zi = ct_test_alloc(CT_I64, 2, s84), g = ct_test_alloc(CT_F32, 2, s84), g64 = ct_test_alloc(CT_F64, 2, s84);
    fill_uniform(&z, -1, 1);
    fill_uniform(&zt, -1, 1);
    ct_loss_value v;
    CHECK_OK(ct_cross_entropy_loss_create(NULL, &l));
    CHECK_ERR(ct_loss_forward(l, &z, &y9, &v), CT_ERR_SHAPE, "cross_entropy loss", "[9]", "[8, 4]", "expected targets [8]");
    CHECK_ERR(ct_loss_forward(l, &z, &yf, &v), CT_ERR_DTYPE, "cross_entropy loss", "class indices", "[8] f32");
    CHECK_ERR(ct_loss_forward(l, &zi, &y, &v), CT_ERR_DTYPE, "cross_entropy loss", "[8, 4] i64", "f32 or f64");
    CHECK_ERR(ct_loss_forward(l, &y, &y, &v), CT_ERR_DTYPE, "cross_entropy loss");
    ct_tensor_set(&y, 5, 4);
    CHECK_ERR(ct_loss_forward(l, &z, &y, &v), CT_ERR_INVALID_ARG, "cross_entropy loss", "target 4 at [5]",
              "outside [0, 4)", "ignore_index -100");
    CHECK_ERR(ct_loss_backward(l, &z, &y, 1.0, &g), CT_ERR_INVALID_ARG, "target 4 at [5]");
    ct_tensor_set(&y, 5, 0);
    ct_tensor_set(&y, 2, -3);
    CHECK_ERR(ct_loss_forward(l, &z, &y, &v), CT_ERR_INVALID_ARG, "target -3 at [2]");
    ct_tensor_set(&y, 2, 1);
    CHECK_OK(ct_loss_forward(l, &z, &y, &v));
    ct_tensor_set(&yt, 3 * 5 + 2, 77);
    CHECK_ERR(ct_loss_forward(l, &zt, &yt, &v), CT_ERR_INVALID_ARG, "target 77 at [3, 2]", "[8, 5] i32");
    CHECK_ERR(ct_loss_backward(l, &z, &y, 1.0, &g64), CT_ERR_SHAPE, "cross_entropy loss", "gradient [8, 4] f64",
              "[8, 4] f32");
    CHECK_ERR(ct_loss_backward(l, &z, &y, NAN, &g), CT_ERR_INVALID_ARG, "scale");
    ct_loss_free(l);

    double w3[3] = {1, 2, 3};
    ct_cross_entropy_opts o = ct_cross_entropy_defaults();
    o.weight = w3;
    o.n_weight = 3;
    CHECK_OK(ct_cross_entropy_loss_create(&o, &l));
    CHECK_ERR(ct_loss_forward(l, &z, &y, &v), CT_ERR_SHAPE, "3 class weights", "[8, 4] f32", "4 classes");
    ct_loss_free(l);
    o.label_smoothing = 1.5;
    CHECK_ERR(ct_cross_entropy_loss_create(&o, &l), CT_ERR_INVALID_ARG, "label_smoothing 1.5");
    o.label_smoothing = 0;
    w3[1] = -1;
    CHECK_ERR(ct_cross_entropy_loss_create(&o, &l), CT_ERR_INVALID_ARG, "weight[1] = -1");
    CHECK_ERR(ct_huber_loss_create(0.0, &l), CT_ERR_INVALID_ARG, "huber loss", "delta 0");

    CHECK_OK(ct_mse_loss_create(&l));
    CHECK_ERR(ct_loss_forward(l, &z, &g64, &v), CT_ERR_DTYPE, "mse loss", "[8, 4] f64", "[8, 4] f32");
    CHECK_ERR(ct_loss_forward(l, &z, &zt, &v), CT_ERR_SHAPE, "mse loss", "[8, 5, 4]", "[8, 4]");
    CHECK_ERR(ct_loss_forward(l, &z, &y, &v), CT_ERR_DTYPE, "mse loss", "[8] i64");
    {   /* one output a row: [8, 1] predictions against [8] targets value by value (Hugging Face's
         * regression squeezes both), the same loss and gradient as [8] against [8]; [8, 4] stays refused */
        ct_tensor p1 = ct_test_alloc(CT_F32, 2, (int64_t[]){8, 1}), t1 = ct_test_alloc(CT_F32, 1, (int64_t[]){8}),
                  g1 = ct_test_alloc(CT_F32, 2, (int64_t[]){8, 1}), g0 = ct_test_alloc(CT_F32, 1, (int64_t[]){8});
        fill_uniform(&p1, -2, 2);
        fill_uniform(&t1, -2, 2);
        ct_tensor p0 = ct_tensor_view(p1.data, CT_F32, CT_CPU, 1, (int64_t[]){8});
        ct_loss_value v1, v0;
        CHECK_OK(ct_loss_forward(l, &p1, &t1, &v1));
        CHECK_OK(ct_loss_forward(l, &p0, &t1, &v0));
        CHECK(v1.sum == v0.sum && v1.count == 8 && v0.count == 8, "mse [8, 1] against [8]: %g / %g, count %g",
              v1.sum, v0.sum, v1.count);
        double want = 0;
        for (int i = 0; i < 8; i++) want += pow(ct_tensor_get(&p1, i) - ct_tensor_get(&t1, i), 2);
        CHECK(fabs(v1.sum - want) <= 1e-6 * want, "mse [8, 1] against [8]: sum %.9g, expected %.9g", v1.sum, want);
        CHECK_OK(ct_loss_backward(l, &p1, &t1, 1.0, &g1));
        CHECK_OK(ct_loss_backward(l, &p0, &t1, 1.0, &g0));
        CHECK(memcmp(g1.data, g0.data, 8 * sizeof(float)) == 0, "mse [8, 1] against [8]: another gradient");
        CHECK_ERR(ct_loss_forward(l, &z, &t1, &v), CT_ERR_SHAPE, "mse loss", "[8] f32", "[8, 4] f32");
        ct_tensor ts[] = {p1, t1, g1, g0};
        for (int i = 0; i < 4; i++) ct_tensor_free(&ts[i]);
    }
    ct_loss_free(l);
    double pw3[3] = {1, 2, 3};
    CHECK_OK(ct_bce_with_logits_loss_create(pw3, 3, &l));
    CHECK_ERR(ct_loss_forward(l, &z, &g, &v), CT_ERR_SHAPE, "bce_with_logits loss", "3 pos_weight", "(4)", "[8, 4]");
    ct_loss_free(l);

    /* JSON */
    CHECK_ERR(from_json_text("{\"type\": \"cross_entropi\"}", &l), CT_ERR_CONFIG, "trainer.loss.type",
              "'cross_entropi'", "did you mean 'cross_entropy'");
    CHECK_ERR(from_json_text("{\"type\": \"focal\"}", &l), CT_ERR_CONFIG, "unknown loss 'focal'", "known:");
    CHECK_ERR(from_json_text("{\"type\": \"cross_entropy\", \"label_smothing\": 0.1}", &l), CT_ERR_CONFIG,
              "trainer.loss", "'label_smothing'", "did you mean 'label_smoothing'");
    CHECK_ERR(from_json_text("{\"type\": \"cross_entropy\", \"label_smoothing\": 2}", &l), CT_ERR_CONFIG,
              "trainer.loss.label_smoothing", "outside [0, 1]");
    CHECK_ERR(from_json_text("{\"type\": \"cross_entropy\", \"weight\": [1, \"2\"]}", &l), CT_ERR_CONFIG,
              "trainer.loss.weight[1]: expected a number");
    CHECK_ERR(from_json_text("{\"type\": \"cross_entropy\", \"weight\": [1, -2]}", &l), CT_ERR_CONFIG,
              "trainer.loss.weight[1]", "-2");
    CHECK_ERR(from_json_text("{\"type\": \"cross_entropy\", \"weight\": 3}", &l), CT_ERR_CONFIG,
              "trainer.loss.weight: expected a list of numbers");
    CHECK_ERR(from_json_text("{\"type\": \"cross_entropy\", \"ignore_index\": 1.5}", &l), CT_ERR_CONFIG,
              "trainer.loss.ignore_index");
    CHECK_ERR(from_json_text("{\"type\": \"huber\", \"delta\": -1}", &l), CT_ERR_CONFIG, "trainer.loss.delta");
    CHECK_ERR(from_json_text("{\"type\": \"mse\", \"delta\": 1}", &l), CT_ERR_CONFIG, "trainer.loss",
              "unknown key 'delta'");
    CHECK_ERR(from_json_text("{\"type\": \"bce_with_logits\", \"pos_weight\": []}", &l), CT_ERR_CONFIG,
              "trainer.loss.pos_weight");
    CHECK_ERR(from_json_text("{\"label_smoothing\": 0.1}", &l), CT_ERR_CONFIG, "trainer.loss", "'type'");
    CHECK_ERR(from_json_text("42", &l), CT_ERR_CONFIG, "trainer.loss: expected a loss name");
    CHECK(l == NULL, "a failed from_json leaves *out NULL");

    CHECK_OK(from_json_text("{\"type\": \"cross_entropy\", \"weight\": [1, 2, 0.5, 1], \"label_smoothing\": 0.1, "
                            "\"ignore_index\": 3}", &l));
    if (l) {
        ct_tensor_set(&y, 0, 3);
        CHECK_OK(ct_loss_forward(l, &z, &y, &v));
        double want = 0;
        for (int64_t r = 0; r < 8; r++) {
            int64_t c = (int64_t)ct_tensor_get(&y, r);
            want += c == 3 ? 0 : c == 1 ? 2 : c == 2 ? 0.5 : 1;
        }
        CHECK(v.count == want, "JSON weights and ignore_index reach the loss: count %g, expected %g", v.count, want);
        CHECK(strcmp(ct_loss_name(l), "cross_entropy") == 0, "name");
        ct_loss_free(l);
    }
    ct_tensor *all[] = {&z, &y, &y9, &yf, &zt, &yt, &zi, &g, &g64};
    for (size_t i = 0; i < CT_ARRAY_LEN(all); i++) ct_tensor_free(all[i]);
}

/* Cross-entropy over logits spread far beyond exp's range (a softmax term of e^-1500 next to ones of
 * order 1, a -inf logit, a row whose target is far below its maximum), in float and double, against
 * the softmax and its log evaluated in long double: the loss to 1e-12 relative, each gradient element
 * to 1e-12 of the row's scale (1e-7 for float's stored gradient). */
static void xent_wide_logits(void) {
    static const double rows[3][6] = {{0.0, -800.0, -1500.0, -INFINITY, 3.0, 700.0},
                                      {-0.25, 0.5, -30.0, -708.5, -745.0, 0.125},
                                      {1e4, -1e4, 0.0, 9999.5, -3.0, 2.0}};
    static const int64_t labels[3] = {2, 4, 3};
    for (int f32 = 0; f32 < 2; f32++) {
        const ct_dtype dt = f32 ? CT_F32 : CT_F64;
        ct_tensor z = ct_test_alloc(dt, 2, (int64_t[]){3, 6}), g = ct_test_alloc(dt, 2, (int64_t[]){3, 6});
        ct_tensor y = ct_test_alloc(CT_I64, 1, (int64_t[]){3});
        for (int i = 0; i < 18; i++) ct_tensor_set(&z, i, rows[i / 6][i % 6]);
        memcpy(y.data, labels, sizeof labels);
        ct_loss *l;
        CHECK_OK(ct_cross_entropy_loss_create(NULL, &l));
        ct_loss_value v;
        CHECK_OK(ct_loss_forward_backward(l, &z, &y, 1.0, &g, &v));
        long double want = 0;
        double worst = 0;
        for (int r = 0; r < 3; r++) {
            long double m = -INFINITY, se = 0;
            for (int j = 0; j < 6; j++) m = fmaxl(m, (long double)ct_tensor_get(&z, r * 6 + j));
            for (int j = 0; j < 6; j++) se += expl((long double)ct_tensor_get(&z, r * 6 + j) - m);
            const long double lse = m + logl(se);
            want += lse - (long double)ct_tensor_get(&z, r * 6 + labels[r]);
            for (int j = 0; j < 6; j++) {
                const long double p = expl((long double)ct_tensor_get(&z, r * 6 + j) - lse);
                const double d = fabs((double)(p - (j == labels[r]) - (long double)ct_tensor_get(&g, r * 6 + j)));
                worst = d > worst ? d : worst;
            }
        }
        CHECK(fabs(v.sum - (double)want) <= 1e-12 * fabs((double)want), "%s wide logits: loss %.17g, expected %.17Lg",
              f32 ? "float" : "double", v.sum, want);
        CHECK(worst <= (f32 ? 1e-7 : 1e-12), "%s wide logits: a gradient element %.3g from the softmax",
              f32 ? "float" : "double", worst);
        ct_tensor_free(&z);
        ct_tensor_free(&g);
        ct_tensor_free(&y);
        ct_loss_free(l);
    }
}

/* ct_op_token_values against a long double reference on random logits with the rows that decide
 * its rules planted: a NaN (NLL NaN, the first NaN is the argmax), a largest +inf (NLL NaN), tied
 * maxima (the first wins), a -inf that is not the largest (a finite NLL, infinite when it is the
 * label), a confident token (its NLL near 1e-25 kept), a row of -inf (the first is the argmax, NLL
 * NaN), a padded vocabulary's -inf tail after tied maxima, a label outside [0, C) (0 and 0); float32 and
 * float64, int64 and int32 labels, and the same bits on 1 and 2 threads past the OpenMP threshold. */
static long double ref_token_nll(const double *z, int64_t c, int64_t y, int64_t *argmax) {
    int64_t a = 0;
    for (int64_t j = 1; j < c && !isnan(z[a]); j++)
        if (isnan(z[j]) || z[j] > z[a]) a = j;
    *argmax = a;
    if (!isfinite(z[a])) return NAN;
    long double rest = 0;
    for (int64_t j = 0; j < c; j++)
        if (j != a) rest += expl((long double)z[j] - (long double)z[a]);
    return ((long double)z[a] - (long double)z[y]) + log1pl(rest);
}

static void token_values_cases(void) {
    const int threads = ct_get_num_threads();
    for (int setup = 0; setup < 12; setup++) {
        const ct_dtype dt = setup % 2 ? CT_F32 : CT_F64, lt = setup % 3 ? CT_I64 : CT_I32;
        static const int64_t widths[] = {1, 5, 33, 300, 1100};
        const int64_t c = widths[below(5)], rows = setup >= 10 ? 64 : 8 + below(24);
        const double spread = unif(0.1, 30.0);
        ct_tensor z = ct_test_alloc(dt, 2, (int64_t[]){rows, c}), y = ct_test_alloc(lt, 1, (int64_t[]){rows});
        fill_uniform(&z, -spread, spread);
        for (int64_t r = 0; r < rows; r++) ct_tensor_set(&y, r, (double)(below(c + 2) - 1)); /* -1 and c: outside */
        for (int64_t r = 0; r < rows && c > 2; r += 7) { /* rows 0, 7, 14, ...: one planted rule each */
            int64_t j = below(c), k = (j + 1 + below(c - 1)) % c;
            switch (r / 7 % 8) {
            case 0: ct_tensor_set(&z, r * c + j, NAN); break;
            case 1: ct_tensor_set(&z, r * c + j, INFINITY); break;
            case 2: ct_tensor_set(&z, r * c + j, 2 * spread), ct_tensor_set(&z, r * c + k, 2 * spread); break;
            case 3: ct_tensor_set(&z, r * c + j, -INFINITY), ct_tensor_set(&z, r * c + k, 2 * spread); break;
            case 4:
                for (int64_t i = 0; i < c; i++) ct_tensor_set(&z, r * c + i, i == j ? 60.0 : 0.0);
                ct_tensor_set(&y, r, (double)j);
                break;
            case 5: /* every entry -inf: the first is the argmax, the NLL NaN */
                for (int64_t i = 0; i < c; i++) ct_tensor_set(&z, r * c + i, -INFINITY);
                break;
            case 6: { /* a padded vocabulary's -inf tail [t, c), and tied maxima before it (8 apart: one lane) */
                int64_t t = c / 2 + below(c - c / 2), p = below(t), q = p + 8 < t ? p + 8 : (p + 1) % t;
                for (int64_t i = t; i < c; i++) ct_tensor_set(&z, r * c + i, -INFINITY);
                ct_tensor_set(&z, r * c + p, 2 * spread), ct_tensor_set(&z, r * c + q, 2 * spread);
                break;
            }
            default: ct_tensor_set(&y, r, below(2) ? (double)c : -100.0);
            }
        }
        double *got = malloc(4 * (size_t)rows * sizeof *got), *zd = malloc((size_t)(rows * c) * sizeof *zd);
        ct_tensor_copy_to_f64(&z, zd);
        int bad = 0;
        for (int th = 1; th <= 2; th++) {
            ct_set_num_threads(th);
            ct_op_token_values(&z, &y, got + 2 * (th - 1) * rows, got + (2 * (th - 1) + 1) * rows);
            ct_set_num_threads(threads);
        }
        CHECK(memcmp(got, got + 2 * rows, 2 * (size_t)rows * sizeof *got) == 0,
              "token values (%s, C %lld): 1 and 2 threads differ", ct_dtype_name(dt), (long long)c);
        /* a device whose backend lacks the kernel (the CPU's table without it, standing in for the
         * CUDA kind): the dispatch copies to the host and runs the CPU's, the same bits */
        const ct_backend_ops *cuda = ct_backends[CT_DEVICE_CUDA];
        ct_backend_ops without = *ct_backends[CT_DEVICE_CPU];
        without.token_values = NULL;
        ct_backends[CT_DEVICE_CUDA] = &without;
        const ct_device dev = {CT_DEVICE_CUDA, 0};
        ct_tensor dz, dy;
        CHECK_OK(ct_tensor_alloc(&dz, dt, dev, 2, z.shape));
        CHECK_OK(ct_tensor_alloc(&dy, lt, dev, 1, y.shape));
        CHECK_OK(ct_tensor_copy_to(&dz, &z));
        CHECK_OK(ct_tensor_copy_to(&dy, &y));
        ct_op_token_values(&dz, &dy, got + 2 * rows, got + 3 * rows);
        ct_tensor_free(&dz);
        ct_tensor_free(&dy);
        ct_backends[CT_DEVICE_CUDA] = cuda;
        CHECK(memcmp(got, got + 2 * rows, 2 * (size_t)rows * sizeof *got) == 0,
              "token values (%s, C %lld): a backend without the kernel gives other values", ct_dtype_name(dt),
              (long long)c);
        for (int64_t r = 0; r < rows; r++) {
            const int64_t label = (int64_t)ct_tensor_get(&y, r);
            const double nll = got[r], hit = got[rows + r];
            if (label < 0 || label >= c) {
                bad += !(nll == 0 && hit == 0);
                continue;
            }
            int64_t a;
            long double want = ref_token_nll(zd + r * c, c, label, &a);
            bool same = isnan(want) ? isnan(nll) : (long double)nll == want || fabsl((long double)nll - want) <= 1e-13L * fabsl(want);
            if (!same || hit != (a == label))
                CHECK(bad++ > 0, "token values (%s, C %lld), row %lld, label %lld: nll %.17g hit %g, expected %.17Lg and "
                      "%d (argmax %lld)", ct_dtype_name(dt), (long long)c, (long long)r, (long long)label, nll, hit,
                      want, a == label, (long long)a);
        }
        CHECK(bad == 0, "token values (%s, C %lld): %d of %lld rows wrong", ct_dtype_name(dt), (long long)c, bad,
              (long long)rows);
        free(got);
        free(zd);
        ct_tensor_free(&z);
        ct_tensor_free(&y);
    }
}

int main(void) {
    ct_test_begin("test_losses");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    xent_cases();
    pointwise_cases();
    split_batch();
    f32_and_threads();
    nan_propagates();
    xent_wide_logits();
    token_values_cases();
    vtable();
    errors();
    return ct_test_finish();
}
