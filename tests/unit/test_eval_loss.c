/* An evaluation batch's loss from one pass over the outputs (trainer/eval_loss.c).
 *
 * With the default hooks the evaluator takes the batch's loss from the per-row losses it needs for
 * the loss's standard error, and for a plain cross-entropy from the token values the language-model
 * metrics need, instead of a pass of the loss of its own for each. Checked against the hooks' path,
 * which a prediction_step hook that calls the default one keeps: the same metrics (eval_loss within
 * float64 rounding of the other order of additions, everything else equal), and the op profile's
 * count of the passes over the logits each path made. Also: a cross-entropy with class weights and
 * label smoothing (rows from the loss's own pass), padding rows and ignored labels; regressions whose
 * elementwise losses (mse, huber, bce_with_logits with pos_weight) give their rows in one pass too. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/op_profile.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "model/loss.h"
#include "testlib.h"
#include "trainer/trainer.h"
#include "trainer_fixture.h"

static const char *tmp_root;
static ct_rng rng;

/* The hooks' path: the default prediction_step, called as an application's override would. */
static ct_status hook_prediction_step(ct_trainer *t, const ct_batch *b, bool loss_only, ct_loss_value *loss,
                                      ct_tensor *outputs) {
    return ct_trainer_default_prediction_step(t, b, loss_only, loss, outputs);
}
static const ct_trainer_ops hook_ops = {.size = sizeof(ct_trainer_ops), .prediction_step = hook_prediction_step};

/* An override whose loss is its own (ten times the default's): the per-row losses do not explain it. */
static ct_status scaled_prediction_step(ct_trainer *t, const ct_batch *b, bool loss_only, ct_loss_value *loss,
                                        ct_tensor *outputs) {
    CT_TRY(ct_trainer_default_prediction_step(t, b, loss_only, loss, outputs));
    loss->sum *= 10;
    return CT_OK;
}
static const ct_trainer_ops scaled_ops = {.size = sizeof(ct_trainer_ops), .prediction_step = scaled_prediction_step};

/* Calls of the ops that pass over the outputs, from the profile's table: the loss's forward and its
 * per-row pass (cross-entropy's or an elementwise loss's), and the token values. */
typedef struct op_calls {
    long long forward, rows, token_values;
} op_calls;

static op_calls profiled_calls(void) {
    return (op_calls){ct_op_profile_calls("cross_entropy_forward") + ct_op_profile_calls("pointwise_loss_forward"),
                      ct_op_profile_calls("cross_entropy_rows") + ct_op_profile_calls("pointwise_loss_rows"),
                      ct_op_profile_calls("token_values")};
}

/* One evaluation of `model` on `data` with the given hooks: its metrics (NULL on an error, the
 * message then in err) and the passes it made. */
typedef struct eval_case {
    ct_model *model;
    ct_dataset *data;
    ct_loss *loss; /* NULL: the default cross-entropy */
    const char *metrics;
    int64_t batch;
} eval_case;

static json_t *evaluate(const eval_case *c, const ct_trainer_ops *ops, op_calls *calls, char *err, size_t cap) {
    ct_training_args a;
    ct_fixture_args(&a, tmp_root, "eval_loss");
    a.per_device_eval_batch_size = c->batch;
    json_t *list = c->metrics ? json_loads(c->metrics, 0, NULL) : NULL;
    ct_trainer_setup setup = {.model = c->model, .loss = c->loss, .n_eval = 1, .metrics = list};
    setup.eval_datasets[0] = c->data;
    ct_trainer t;
    json_t *metrics = NULL;
    CHECK_OK(ct_trainer_init(&t, ops, &a, &setup));
    ct_op_profile_reset();
    ct_op_profile_enable(true);
    ct_status s = ct_trainer_evaluate(&t, NULL, "eval", &metrics);
    ct_op_profile_enable(false);
    *calls = profiled_calls();
    snprintf(err, cap, "%s", s == CT_OK ? "" : ct_last_error());
    if (s != CT_OK) metrics = NULL;
    ct_trainer_free(&t);
    json_decref(list);
    ct_training_args_free(&a);
    return metrics;
}

static bool is_speed_key(const char *k) { return strstr(k, "_runtime") || strstr(k, "_per_second"); }

/* The batches of `batch` samples that have a label other than -100: those the hooks' path takes the
 * rows of (it skips a batch whose loss counts nothing). */
static int64_t batches_with_labels(ct_dataset *d, int64_t batch) {
    int64_t n = ct_dataset_length(d), counted = 0;
    for (int64_t first = 0; first < n; first += batch) {
        int64_t rows = n - first < batch ? n - first : batch, idx[64];
        ct_tensor f, l;
        CHECK_OK(ct_dataset_alloc_batch(d, rows, &f, &l));
        for (int64_t i = 0; i < rows; i++) idx[i] = first + i;
        CHECK_OK(ct_dataset_get_batch(d, idx, rows, NULL, &f, &l));
        bool any = false;
        for (int64_t i = 0; i < ct_tensor_numel(&l); i++) any |= ct_tensor_get(&l, i) != -100.0;
        counted += any;
        ct_tensor_free(&f);
        ct_tensor_free(&l);
    }
    return counted;
}

/* The default path against the hooks' path on one case; want: the passes the default path makes
 * (the hooks' path makes one loss pass and one rows pass a batch, and the token values when asked). */
static void compare(const char *what, const eval_case *c, op_calls want, long long batches, bool tokens) {
    op_calls got, hooks;
    char err[2048], herr[2048];
    json_t *m = evaluate(c, NULL, &got, err, sizeof err);
    json_t *h = evaluate(c, &hook_ops, &hooks, herr, sizeof herr);
    CHECK(m && h, "%s: evaluation failed: '%s' / hooks' '%s'", what, err, herr);
    int compared = 0;
    const char *k;
    json_t *v;
    /* The loss's terms are the same float64 values added in another order (and, from token values,
     * each token's NLL by a formula that keeps a confident token's small loss): eval_loss agrees to
     * its rounding. Its standard error is a root of squared differences of row values of
     * eval_loss's size, so their rounding is measured against eval_loss too (it differs by a few
     * 1e-14 on about one draw in six, which a bound relative to the small standard error refused). */
    const double loss = fabs(json_number_value(json_object_get(h, "eval_loss")));
    json_object_foreach(h, k, v) {
        if (is_speed_key(k)) continue;
        json_t *w = json_object_get(m, k);
        compared++;
        if (json_is_number(v) && json_is_number(w)) {
            double x = json_number_value(v), y = json_number_value(w), scale = fmax(fabs(x), loss);
            CHECK(fabs(x - y) <= 1e-12 * fmax(scale, 1e-300), "%s: %s = %.17g, the hooks' path %.17g", what, k, y, x);
        } else {
            CHECK(json_equal(v, w), "%s: %s differs from the hooks' path's", what, k);
        }
    }
    CHECK(compared >= (tokens ? 6 : 3), "%s: only %d metrics compared", what, compared);
    CHECK(json_object_get(m, "eval_loss") != NULL, "%s: no eval_loss", what);
    CHECK(got.forward == want.forward && got.rows == want.rows && got.token_values == want.token_values,
          "%s: passes forward/rows/token values %lld/%lld/%lld, expected %lld/%lld/%lld", what, got.forward, got.rows,
          got.token_values, want.forward, want.rows, want.token_values);
    const int64_t counted = batches_with_labels(c->data, c->batch);
    CHECK(hooks.forward == batches && hooks.rows == counted && hooks.token_values == (tokens ? batches : 0),
          "%s: the hooks' path made %lld/%lld/%lld passes for %lld batches (%lld with labels)", what, hooks.forward,
          hooks.rows, hooks.token_values, batches, (long long)counted);
    json_decref(m);
    json_decref(h);
}

/* --- a language model: rows from the token values -------------------------------------------------- */

/* n sequences of T ids below vocab; labels other draws, each -100 with probability `ignored`. */
static ct_dataset *token_data(int64_t n, int64_t T, int64_t vocab, double ignored) {
    ct_tensor x, y;
    int64_t shape[2] = {n, T};
    if (ct_tensor_alloc(&x, CT_I64, CT_CPU, 2, shape) != CT_OK) abort();
    if (ct_tensor_alloc(&y, CT_I64, CT_CPU, 2, shape) != CT_OK) abort();
    int64_t *xi = x.data, *yi = y.data;
    for (int64_t i = 0; i < n * T; i++) {
        xi[i] = (int64_t)ct_rng_below(&rng, (uint64_t)vocab);
        yi[i] = ct_rng_uniform(&rng) < ignored ? -100 : (int64_t)ct_rng_below(&rng, (uint64_t)vocab);
    }
    ct_dataset *d;
    if (ct_tensor_dataset_create(&x, &y, 0, &d) != CT_OK) abort();
    ct_tensor_free(&x);
    ct_tensor_free(&y);
    return d;
}

static void test_language_model(void) {
    int64_t vocab = ct_test_between(&rng, 40, 400), T = ct_test_between(&rng, 2, 8);
    int64_t batch = ct_test_between(&rng, 2, 5);
    /* not a multiple of the batch: the last batch has padding rows */
    int64_t n = batch * ct_test_between(&rng, 2, 4) + ct_test_between(&rng, 1, batch - 1);
    int64_t batches = (n + batch - 1) / batch;
    ct_model m;
    ct_fixture_gpt g = {.vocab = vocab, .positions = T, .n_embd = 16, .n_head = 2, .n_layer = 1, .max_batch = batch,
                        .seed = ct_test_seed};
    CHECK_OK(ct_fixture_gpt_build(&g, &m));
    ct_dataset *d = token_data(n, T, vocab, 0.2);
    eval_case c = {.model = &m, .data = d, .metrics = "[\"token_loss\", \"perplexity\", \"token_accuracy\"]",
                   .batch = batch};
    char what[96];
    snprintf(what, sizeof what, "gpt vocab %lld, T %lld, %lld samples by %lld", (long long)vocab, (long long)T,
             (long long)n, (long long)batch);
    /* one pass over the logits a batch: the token values' */
    compare(what, &c, (op_calls){0, 0, batches}, batches, true);
    /* without the token metrics, the rows' pass alone */
    c.metrics = NULL;
    compare("gpt, loss only", &c, (op_calls){0, batches, 0}, batches, false);
    ct_dataset_free(d);
    ct_model_free(&m);
}

/* --- a classifier: rows from the loss's own pass ---------------------------------------------------- */

static void test_classifier(void) {
    int64_t classes = ct_test_between(&rng, 2, 9), dim = 5, batch = ct_test_between(&rng, 3, 16);
    int64_t n = batch * 3 + ct_test_between(&rng, 1, batch - 1), batches = (n + batch - 1) / batch;
    ct_fixture_data fd = {.kind = CT_FIXTURE_IGNORED, .n = n, .dim = dim, .classes = classes, .seed = ct_test_seed,
                          .ignored = 0.1};
    ct_dataset *d = ct_fixture_dataset(&fd);
    ct_model m;
    ct_fixture_mlp o = {.dim = dim, .classes = classes, .hidden = {8}, .max_batch = batch, .seed = ct_test_seed};
    CHECK_OK(ct_fixture_mlp_build(&o, &m));
    /* class weights and label smoothing: a row's loss is not its token's NLL; ignored labels (which
     * the classification metrics refuse: the loss alone) */
    double w[9];
    for (int64_t i = 0; i < classes; i++) w[i] = 0.25 + ct_rng_uniform(&rng);
    ct_cross_entropy_opts xo = ct_cross_entropy_defaults();
    xo.weight = w;
    xo.n_weight = classes;
    xo.label_smoothing = 0.1;
    ct_loss *loss;
    CHECK_OK(ct_cross_entropy_loss_create(&xo, &loss));
    eval_case c = {.model = &m, .data = d, .loss = loss, .batch = batch};
    compare("weighted, smoothed classifier", &c, (op_calls){0, batches, 0}, batches, false);
    ct_loss_free(loss);
    ct_dataset_free(d);
    /* plain, with metrics that read the outputs: the rows' pass too */
    fd.kind = CT_FIXTURE_UNIFORM;
    c.data = d = ct_fixture_dataset(&fd);
    c.loss = NULL;
    c.metrics = "[\"accuracy\", \"f1_macro\"]";
    compare("classifier", &c, (op_calls){0, batches, 0}, batches, false);
    /* a prediction_step with a loss of its own: its eval_loss, and no interval the rows would make
     * around another loss */
    op_calls calls;
    char err[2048];
    json_t *plain = evaluate(&c, NULL, &calls, err, sizeof err), *scaled = evaluate(&c, &scaled_ops, &calls, err,
                                                                                          sizeof err);
    double l0 = json_number_value(json_object_get(plain, "eval_loss")),
           l1 = json_number_value(json_object_get(scaled, "eval_loss"));
    CHECK(plain && scaled && fabs(l1 - 10 * l0) <= 1e-9 * fabs(l1), "scaled loss: eval_loss %.17g, 10 x %.17g", l1, l0);
    CHECK(json_object_get(plain, "eval_loss_stderr") && scaled && !json_object_get(scaled, "eval_loss_stderr") &&
              !json_object_get(scaled, "eval_loss_ci_low") && json_object_get(scaled, "eval_accuracy"),
          "scaled loss: the loss's stderr and interval are not left out (or the metrics are missing)");
    json_decref(plain);
    json_decref(scaled);
    ct_model_free(&m);
    ct_dataset_free(d);
}

/* --- regression: rows from an elementwise loss's own pass ----------------------------------------- */

/* n samples of dim features U(-1, 1) with `outputs` float targets each (U(0, 1): also bce's). */
static ct_dataset *regression_data(int64_t n, int64_t dim, int64_t outputs) {
    ct_tensor x, y;
    if (ct_tensor_alloc(&x, CT_F32, CT_CPU, 2, (int64_t[]){n, dim}) != CT_OK) abort();
    if (ct_tensor_alloc(&y, CT_F32, CT_CPU, 2, (int64_t[]){n, outputs}) != CT_OK) abort();
    for (int64_t i = 0; i < n * dim; i++) ((float *)x.data)[i] = (float)(2 * ct_rng_uniform(&rng) - 1);
    for (int64_t i = 0; i < n * outputs; i++) ((float *)y.data)[i] = (float)ct_rng_uniform(&rng);
    ct_dataset *d;
    if (ct_tensor_dataset_create(&x, &y, 0, &d) != CT_OK) abort();
    ct_tensor_free(&x);
    ct_tensor_free(&y);
    return d;
}

static void test_regression(void) {
    int64_t outputs = ct_test_between(&rng, 1, 4), dim = 5, batch = ct_test_between(&rng, 2, 16);
    int64_t n = batch * 3 + ct_test_between(&rng, 1, batch - 1), batches = (n + batch - 1) / batch;
    ct_dataset *d = regression_data(n, dim, outputs);
    ct_model m;
    ct_fixture_mlp o = {.dim = dim, .classes = outputs, .hidden = {8}, .max_batch = batch, .seed = ct_test_seed};
    CHECK_OK(ct_fixture_mlp_build(&o, &m));
    double pw[4];
    for (int64_t i = 0; i < outputs; i++) pw[i] = 0.25 + 2 * ct_rng_uniform(&rng);
    ct_loss *losses[3];
    CHECK_OK(ct_mse_loss_create(&losses[0]));
    CHECK_OK(ct_huber_loss_create(0.2 + ct_rng_uniform(&rng), &losses[1]));
    CHECK_OK(ct_bce_with_logits_loss_create(pw, outputs, &losses[2]));
    for (int k = 0; k < 3; k++) {
        eval_case c = {.model = &m, .data = d, .loss = losses[k], .batch = batch,
                       .metrics = k == 0 ? "[\"mse\", \"r2\"]" : NULL};
        char what[96];
        snprintf(what, sizeof what, "%s regression, %lld outputs, %lld samples by %lld", ct_loss_name(losses[k]),
                 (long long)outputs, (long long)n, (long long)batch);
        compare(what, &c, (op_calls){0, batches, 0}, batches, false);
        ct_loss_free(losses[k]);
    }
    ct_model_free(&m);
    ct_dataset_free(d);
}

int main(void) {
    ct_test_begin("test_eval_loss");
    ct_rng_init(&rng, ct_test_seed, 0, 0);
    if (!(tmp_root = ct_fixture_tmp_root("ct_test_eval_loss"))) return 1;
    for (int rep = 0; rep < 3; rep++) test_language_model();
    for (int rep = 0; rep < 3; rep++) test_classifier();
    for (int rep = 0; rep < 3; rep++) test_regression();
    ct_op_profile_reset(); /* the report at exit: empty */
    ct_fixture_cleanup();
    return ct_test_finish();
}
