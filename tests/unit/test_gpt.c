/* The GPT model (model/gpt.c): finite-difference gradients in float64 of every parameter element of
 * tiny random GPTs (with and without biases, dropout off, on in training, and in eval); causality
 * (no logit depends on a later token); batch rows independent; nanoGPT's parameter names and
 * shapes, no separate head weight; GPT-2's initialisation statistics; the DDP "grads ready" contract
 * with the tied weight (every report's range final when reported, wte's last); dropout keyed by
 * the step; errors for bad configs, too-long inputs and ids outside the vocabulary; a padded
 * vocabulary (padded_vocab_size) against the same model unpadded. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/ops/ops.h"
#include "model/layers.h"
#include "model/loss.h"
#include "model/model.h"
#include "testlib.h"

static ct_rng rng;

static ct_gpt_config tiny_config(void) {
    ct_gpt_config c = ct_gpt_config_default();
    c.vocab_size = ct_test_between(&rng, 3, 13);
    /* At least 4 features: LayerNorm over 1 or 2 is constant or a sign function (no useful derivative). */
    c.n_head = ct_test_between(&rng, 1, 3);
    c.n_embd = c.n_head * ct_test_between(&rng, c.n_head == 1 ? 4 : 2, 4);
    c.n_layer = ct_test_between(&rng, 1, 2);
    c.n_positions = ct_test_between(&rng, 1, 7);
    c.bias = ct_rng_below(&rng, 4) != 0;
    return c;
}

static ct_status build(const ct_gpt_config *c, int64_t T, ct_dtype dt, int64_t max_batch, ct_model *model) {
    ct_module *m;
    CT_TRY(ct_gpt_create(c, &m));
    ct_shape in = {1, {T}};
    ct_model_options mo = {.dtype = dt, .max_batch = max_batch, .seed = ct_test_seed};
    return ct_model_build(model, m, &in, &mo);
}

static void random_ids(ct_tensor *ids, int64_t vocab) {
    for (int64_t i = 0; i < ct_tensor_numel(ids); i++) ((int64_t *)ids->data)[i] = (int64_t)ct_rng_below(&rng, (uint64_t)vocab);
}

/* --- gradients ------------------------------------------------------------------------------------ */

static void gradchecks(void) {
    for (int rep = 0; rep < 6; rep++) {
        ct_gpt_config c = tiny_config();
        int kind = rep % 3; /* 0: no dropout; 1: dropout in training (fixed masks); 2: dropout, eval */
        c.dropout = kind == 0 ? 0.0 : 0.1 + 0.2 * ct_rng_uniform(&rng);
        /* With dropout in training, a few positions more, so that no path is dropped entirely. */
        if (kind == 1 && c.n_positions < 4) c.n_positions = ct_test_between(&rng, 4, 7);
        int64_t T = ct_test_between(&rng, kind == 1 ? 3 : 1, c.n_positions);
        ct_module *m;
        CHECK_OK(ct_gpt_create(&c, &m));
        ct_gradcheck_opts o = ct_gradcheck_defaults(ct_test_between(&rng, 1, 3));
        o.integer_input_max = (int)c.vocab_size;
        o.max_probes = 1 << 20; /* every element of every parameter */
        o.training = kind != 2;
        ct_shape in = {1, {T}};
        char label[200];
        snprintf(label, sizeof label, "gpt V=%lld C=%lld H=%lld L=%lld P=%lld T=%lld bias=%d dropout=%.2f %s",
                 (long long)c.vocab_size, (long long)c.n_embd, (long long)c.n_head, (long long)c.n_layer,
                 (long long)c.n_positions, (long long)T, c.bias, c.dropout, o.training ? "train" : "eval");
        double worst = ct_gradcheck_module(label, m, &in, &o);
        CHECK(worst < 1e-6, "%s: worst relative error %.3g", label, worst);
    }
}

/* --- causality and batch independence ---------------------------------------------------------- */

static void causal_and_rows(void) {
    ct_gpt_config c = tiny_config();
    c.n_positions = ct_test_between(&rng, 3, 9);
    c.vocab_size = ct_test_between(&rng, 5, 20);
    int64_t T = ct_test_between(&rng, 2, c.n_positions), B = ct_test_between(&rng, 2, 4), V = c.vocab_size;
    ct_model model;
    CHECK_OK(build(&c, T, CT_F64, B, &model));
    ct_model_train(&model, false);
    int64_t shape[2] = {B, T};
    ct_tensor ids;
    ct_tensor_alloc(&ids, CT_I64, CT_CPU, 2, shape);
    random_ids(&ids, V);
    ct_tensor y;
    CHECK_OK(ct_model_forward(&model, &ids, &y));
    size_t bytes = ct_tensor_nbytes(&y);
    double *before = malloc(bytes);
    memcpy(before, y.data, bytes);
    /* Change the token at position t of sample 0: positions < t keep their logits, t changes. */
    int64_t t = ct_test_between(&rng, 1, T - 1);
    int64_t *p = ids.data;
    p[t] = (p[t] + 1 + (int64_t)ct_rng_below(&rng, (uint64_t)(V - 1))) % V;
    CHECK_OK(ct_model_forward(&model, &ids, &y));
    const double *after = y.data;
    int earlier_changed = 0, other_rows_changed = 0;
    double changed_at_t = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t s = 0; s < T; s++)
            for (int64_t v = 0; v < V; v++) {
                int64_t i = (b * T + s) * V + v;
                if (b == 0 && s < t) earlier_changed += after[i] != before[i];
                if (b > 0) other_rows_changed += after[i] != before[i];
                if (b == 0 && s == t) changed_at_t = fmax(changed_at_t, fabs(after[i] - before[i]));
            }
    CHECK(earlier_changed == 0, "causality: changing token %lld changed %d logits of earlier positions", (long long)t,
          earlier_changed);
    CHECK(other_rows_changed == 0, "changing sample 0 changed %d logits of other samples", other_rows_changed);
    CHECK(changed_at_t > 0, "changing token %lld did not change its own logits", (long long)t);
    /* One sample alone gives the same logits as inside the batch. */
    ct_tensor one = ct_tensor_rows(&ids, B - 1, 1);
    CHECK_OK(ct_model_forward(&model, &ids, &y));
    memcpy(before, y.data, bytes);
    CHECK_OK(ct_model_forward(&model, &one, &y));
    double worst = 0;
    for (int64_t i = 0; i < T * V; i++) worst = fmax(worst, fabs(((double *)y.data)[i] - before[(B - 1) * T * V + i]));
    CHECK(worst < 1e-12, "a sample alone differs from the same sample in a batch by %.3g", worst);
    free(before);
    ct_tensor_free(&ids);
    ct_model_free(&model);
}

/* --- names, shapes, initialisation ---------------------------------------------------------------- */

static void expect_param(const ct_model *model, const char *name, int ndim, int64_t d0, int64_t d1, int *seen) {
    const ct_param *p = ct_params_find(&model->params, name);
    CHECK(p != NULL, "no parameter named %s", name);
    if (!p) return;
    (*seen)++;
    bool ok = p->ndim == ndim && p->shape[0] == d0 && (ndim == 1 || p->shape[1] == d1);
    CHECK(ok, "%s has shape [%lld, %lld] (ndim %d), expected [%lld, %lld] (ndim %d)", name, (long long)p->shape[0],
          (long long)(p->ndim > 1 ? p->shape[1] : 0), p->ndim, (long long)d0, (long long)d1, ndim);
}

static void names_and_init(bool bias) {
    ct_gpt_config c = ct_gpt_config_default();
    c.vocab_size = 300;
    c.n_positions = 64;
    c.n_embd = 96;
    c.n_head = 3;
    c.n_layer = 3;
    c.bias = bias;
    ct_model model;
    CHECK_OK(build(&c, 16, CT_F32, 2, &model));
    const int64_t C = c.n_embd, V = c.vocab_size, P = c.n_positions;
    int seen = 0;
    expect_param(&model, "transformer.wte.weight", 2, V, C, &seen);
    expect_param(&model, "transformer.wpe.weight", 2, P, C, &seen);
    char n[128];
    for (int i = 0; i < c.n_layer; i++) {
        const struct {
            const char *suffix;
            int64_t out, in;
        } lin[] = {{"attn.c_attn", 3 * C, C}, {"attn.c_proj", C, C}, {"mlp.c_fc", 4 * C, C}, {"mlp.c_proj", C, 4 * C}};
        for (int k = 0; k < 4; k++) {
            snprintf(n, sizeof n, "transformer.h.%d.%s.weight", i, lin[k].suffix);
            expect_param(&model, n, 2, lin[k].out, lin[k].in, &seen);
            if (bias) {
                snprintf(n, sizeof n, "transformer.h.%d.%s.bias", i, lin[k].suffix);
                expect_param(&model, n, 1, lin[k].out, 0, &seen);
            }
        }
        for (int k = 1; k <= 2; k++) {
            snprintf(n, sizeof n, "transformer.h.%d.ln_%d.weight", i, k);
            expect_param(&model, n, 1, C, 0, &seen);
            if (bias) {
                snprintf(n, sizeof n, "transformer.h.%d.ln_%d.bias", i, k);
                expect_param(&model, n, 1, C, 0, &seen);
            }
        }
    }
    expect_param(&model, "transformer.ln_f.weight", 1, C, 0, &seen);
    if (bias) expect_param(&model, "transformer.ln_f.bias", 1, C, 0, &seen);
    CHECK(seen == model.params.count, "the model has %d parameters, %d of them expected (no lm_head.weight: tied)",
          model.params.count, seen);
    CHECK(ct_params_find(&model.params, "lm_head.weight") == NULL, "the head is tied: no lm_head.weight");
    int64_t per_block = 12 * C * C + (bias ? 13 * C : 2 * C);
    int64_t want = V * C + P * C + c.n_layer * per_block + (bias ? 2 * C : C);
    CHECK(ct_params_count(&model.params) == want, "parameter count %lld, expected %lld",
          (long long)ct_params_count(&model.params), (long long)want);

    /* GPT-2's init: N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 L)), biases 0, norms 1. */
    for (int i = 0; i < model.params.count; i++) {
        const ct_param *p = &model.params.items[i];
        double sum = 0, sum2 = 0;
        for (int64_t j = 0; j < p->numel; j++) {
            double v = ct_tensor_get(p->value, j);
            sum += v;
            sum2 += v * v;
        }
        double mean = sum / p->numel, rms = sqrt(sum2 / p->numel);
        bool is_bias = strstr(p->name, ".bias") != NULL, is_norm = strstr(p->name, ".ln_") != NULL;
        if (is_bias) {
            CHECK(sum2 == 0, "%s: biases start at 0 (rms %g)", p->name, rms);
        } else if (is_norm) {
            CHECK(mean == 1 && rms == 1, "%s: norm weights start at 1 (mean %g)", p->name, mean);
        } else {
            double std = strstr(p->name, "c_proj.weight") ? 0.02 / sqrt(2.0 * c.n_layer) : 0.02;
            double n_el = (double)p->numel;
            CHECK(fabs(rms / std - 1) < 6 / sqrt(2 * n_el), "%s: std %g, expected %g", p->name, rms, std);
            CHECK(fabs(mean) < 6 * std / sqrt(n_el), "%s: mean %g", p->name, mean);
        }
        bool no_decay = (p->flags & CT_PARAM_NO_DECAY) != 0;
        CHECK(no_decay == (is_bias || is_norm), "%s: weight decay flag %d", p->name, no_decay);
        /* the token and position tables: out of the FLOPs per token (HF's exclude_embeddings) */
        bool table = strcmp(p->name, "transformer.wte.weight") == 0 || strcmp(p->name, "transformer.wpe.weight") == 0;
        CHECK(((p->flags & CT_PARAM_EMBEDDING) != 0) == table, "%s: embedding flag %u", p->name, p->flags);
    }
    ct_model_free(&model);
}

/* --- the grads-ready contract --------------------------------------------------------------------- */

#define MAX_REPORTS 256

typedef struct recorder {
    ct_model *model;
    int n;
    int64_t lo[MAX_REPORTS];
    char name[MAX_REPORTS][64];
    double *snapshot[MAX_REPORTS]; /* gradients [lo, end) when reported */
} recorder;

static ct_status record(void *ctx, const ct_module *m) {
    recorder *r = ctx;
    if (r->n == MAX_REPORTS) return CT_OK;
    int64_t end = ct_tensor_numel(&r->model->params.grads);
    r->lo[r->n] = m->grad_lo;
    snprintf(r->name[r->n], sizeof r->name[0], "%s", m->name);
    r->snapshot[r->n] = malloc((size_t)(end - m->grad_lo) * sizeof(double));
    memcpy(r->snapshot[r->n], (double *)r->model->params.grads.data + m->grad_lo,
           (size_t)(end - m->grad_lo) * sizeof(double));
    r->n++;
    return CT_OK;
}

static void grads_ready_contract(void) {
    ct_gpt_config c = tiny_config();
    c.n_layer = 2;
    int64_t T = ct_test_between(&rng, 1, c.n_positions), B = 2;
    ct_model model;
    CHECK_OK(build(&c, T, CT_F64, B, &model));
    int64_t shape[2] = {B, T};
    ct_tensor ids, dy;
    ct_tensor_alloc(&ids, CT_I64, CT_CPU, 2, shape);
    random_ids(&ids, c.vocab_size);
    ct_tensor y;
    CHECK_OK(ct_model_forward(&model, &ids, &y));
    ct_tensor_alloc(&dy, CT_F64, CT_CPU, y.ndim, y.shape);
    for (int64_t i = 0; i < ct_tensor_numel(&dy); i++) ((double *)dy.data)[i] = ct_rng_uniform(&rng) - 0.5;
    recorder *r = calloc(1, sizeof *r);
    r->model = &model;
    ct_model_set_grads_ready(&model, record, r);
    ct_model_zero_grad(&model);
    CHECK_OK(ct_model_backward(&model, &dy));
    ct_model_set_grads_ready(&model, NULL, NULL);
    const double *final = model.params.grads.data;
    int64_t end = ct_tensor_numel(&model.params.grads);
    const ct_param *wte = ct_params_find(&model.params, "transformer.wte.weight");
    int wte_report = -1, late = 0;
    for (int i = 0; i < r->n; i++) {
        int64_t len = end - r->lo[i];
        if (memcmp(r->snapshot[i], final + r->lo[i], (size_t)len * sizeof(double)) != 0) late++;
        if (strcmp(r->name[i], "transformer.wte") == 0) wte_report = i;
    }
    CHECK(late == 0, "%d reports came before their gradients (from grad_lo to the end) were final", late);
    CHECK(r->n > 0 && strcmp(r->name[r->n - 1], "") == 0, "the root reports last");
    /* After wte only its ancestors (transformer, the root) report, and nothing below wte reports
     * after it: the tied weight's range is reported last, after the head's contribution. */
    CHECK(wte_report == r->n - 3, "wte's report is %d of %d (expected the last before its ancestors)", wte_report,
          r->n);
    CHECK(wte && wte->offset == 0, "wte's weight starts the flat buffer");
    /* Reports of modules with parameters come from the end of the buffer down. */
    int out_of_order = 0;
    for (int i = 1; i < r->n; i++) out_of_order += r->lo[i] > r->lo[i - 1];
    CHECK(out_of_order == 0, "%d reports moved up the buffer instead of down", out_of_order);
    for (int i = 0; i < r->n; i++) free(r->snapshot[i]);
    free(r);
    ct_tensor_free(&ids);
    ct_tensor_free(&dy);
    ct_model_free(&model);
}

/* --- dropout -------------------------------------------------------------------------------------- */

static void dropout_keyed(void) {
    ct_gpt_config c = tiny_config();
    c.dropout = 0.3;
    c.n_embd = 8;
    c.n_head = 2;
    int64_t T = c.n_positions, B = 2;
    ct_model model;
    CHECK_OK(build(&c, T, CT_F64, B, &model));
    int64_t shape[2] = {B, T};
    ct_tensor ids;
    ct_tensor_alloc(&ids, CT_I64, CT_CPU, 2, shape);
    random_ids(&ids, c.vocab_size);
    ct_tensor y;
    size_t bytes = (size_t)(B * T * c.vocab_size) * sizeof(double);
    double *a = malloc(bytes), *b = malloc(bytes), *e = malloc(bytes);
    ct_model_train(&model, false);
    CHECK_OK(ct_model_forward(&model, &ids, &y));
    memcpy(e, y.data, bytes);
    ct_model_train(&model, true);
    ct_model_set_step(&model, 5, 0);
    CHECK_OK(ct_model_forward(&model, &ids, &y));
    memcpy(a, y.data, bytes);
    CHECK_OK(ct_model_forward(&model, &ids, &y));
    CHECK(memcmp(a, y.data, bytes) == 0, "the same step gives the same dropout masks");
    ct_model_set_step(&model, 6, 0);
    CHECK_OK(ct_model_forward(&model, &ids, &y));
    memcpy(b, y.data, bytes);
    CHECK(memcmp(a, b, bytes) != 0, "another step gives other dropout masks");
    CHECK(memcmp(a, e, bytes) != 0, "training with dropout differs from eval");
    free(a);
    free(b);
    free(e);
    ct_tensor_free(&ids);
    ct_model_free(&model);
}

/* --- errors --------------------------------------------------------------------------------------- */

static ct_status from_json(const char *text, ct_module **out) {
    json_error_t err;
    json_t *spec = json_loads(text, 0, &err);
    CT_ASSERT(spec);
    ct_status s = ct_module_from_json(spec, "model", out);
    json_decref(spec);
    return s;
}

static void errors(void) {
    ct_gpt_config c = ct_gpt_config_default();
    c.vocab_size = 11;
    c.n_positions = 4;
    c.n_embd = 6;
    c.n_head = 2;
    c.n_layer = 1;
    ct_model model;
    CHECK_ERR(build(&c, 5, CT_F32, 2, &model), CT_ERR_SHAPE, "gpt", "5 positions", "n_positions=4");

    CHECK_OK(build(&c, 4, CT_F32, 2, &model));
    int64_t shape[2] = {2, 4};
    ct_tensor ids, y;
    ct_tensor_alloc(&ids, CT_I64, CT_CPU, 2, shape);
    random_ids(&ids, c.vocab_size);
    ((int64_t *)ids.data)[6] = 11;
    CHECK_ERR(ct_model_forward(&model, &ids, &y), CT_ERR_INVALID_ARG, "embedding 'transformer.wte'", "token id 11",
              "position [1, 2]", "[0, 11)");
    ((int64_t *)ids.data)[6] = -3;
    CHECK_ERR(ct_model_forward(&model, &ids, &y), CT_ERR_INVALID_ARG, "transformer.wte", "token id -3");
    ((int64_t *)ids.data)[6] = 10;
    CHECK_OK(ct_model_forward(&model, &ids, &y));
    /* Float input where token ids belong. */
    ct_tensor fx;
    ct_tensor_alloc(&fx, CT_F32, CT_CPU, 2, shape);
    CHECK_ERR(ct_model_forward(&model, &fx, &y), CT_ERR_DTYPE, "gpt", "i64");
    ct_tensor_free(&fx);
    CHECK_ERR(ct_model_enable_input_grad(&model), CT_ERR_DTYPE, "no gradient");
    ct_tensor_free(&ids);
    ct_model_free(&model);

    ct_module *m;
    ct_shape two = {2, {4, 3}};
    CHECK_OK(ct_gpt_create(&c, &m));
    ct_model_options mo = {.dtype = CT_F32, .max_batch = 1};
    CHECK_ERR(ct_model_build(&model, m, &two, &mo), CT_ERR_SHAPE, "gpt", "token ids [N, T]");

    ct_gpt_config bad = c;
    bad.n_embd = 7;
    CHECK_ERR(ct_gpt_create(&bad, &m), CT_ERR_INVALID_ARG, "gpt: n_embd=7 is not a multiple of n_head=2");
    bad = c;
    bad.n_layer = 0;
    CHECK_ERR(ct_gpt_create(&bad, &m), CT_ERR_INVALID_ARG, "n_layer=0");
    bad = c;
    bad.dropout = 1.0;
    CHECK_ERR(ct_gpt_create(&bad, &m), CT_ERR_INVALID_ARG, "dropout=1");

    CHECK_ERR(from_json("{\"type\": \"gpt\", \"n_layer\": 2}", &m), CT_ERR_CONFIG, "model", "vocab_size");
    CHECK_ERR(from_json("{\"type\": \"gpt\", \"vocab_size\": 10, \"n_ctx\": 8}", &m), CT_ERR_CONFIG, "n_ctx");
    CHECK_ERR(from_json("{\"type\": \"gpt\", \"vocab_size\": 10, \"n_embd\": 10, \"n_head\": 4}", &m), CT_ERR_CONFIG,
              "model: gpt: n_embd=10 is not a multiple of n_head=4");
    CHECK_OK(from_json("{\"type\": \"gpt\", \"vocab_size\": 10, \"n_positions\": 8, \"n_embd\": 8, \"n_layer\": 1,"
                       " \"n_head\": 2, \"dropout\": 0.1, \"bias\": false}",
                       &m));
    ct_shape in = {1, {8}};
    CHECK_OK(ct_model_build(&model, m, &in, &mo));
    CHECK(ct_params_find(&model.params, "transformer.h.0.mlp.c_fc.bias") == NULL, "bias=false: no biases");
    CHECK(ct_params_find(&model.params, "transformer.ln_f.bias") == NULL, "bias=false: no norm biases");
    ct_model_free(&model);
}

/* --- a padded vocabulary (padded_vocab_size) ------------------------------------------------------ */

/* A GPT with vocab V padded to Vp against the same GPT unpadded, given the same weights (the first V
 * rows of wte): the real logits agree, the padding's are -inf, the fused loss and its gradient
 * agree with the unpadded model's (the padding columns' gradient exactly 0), every parameter's
 * gradient agrees and wte's padding rows get exactly 0; they start at 0; padding ids are refused. */
static void padded_vocab(void) {
    ct_gpt_config c = tiny_config();
    ct_gpt_config cp = c;
    cp.padded_vocab_size = c.vocab_size + ct_test_between(&rng, 1, 9);
    int64_t V = c.vocab_size, Vp = cp.padded_vocab_size, C = c.n_embd, T = ct_test_between(&rng, 1, c.n_positions), B = 2;
    ct_model plain, padded;
    CHECK_OK(build(&c, T, CT_F64, B, &plain));
    CHECK_OK(build(&cp, T, CT_F64, B, &padded));
    CHECK(padded.out_shape.dims[1] == Vp, "padded logits have %lld columns, expected %lld",
          (long long)padded.out_shape.dims[1], (long long)Vp);
    const ct_param *wte = ct_params_find(&padded.params, "transformer.wte.weight");
    CHECK(wte && wte->shape[0] == Vp, "wte has padded_vocab_size rows");
    for (int64_t j = V * C; j < Vp * C; j++)
        CHECK(ct_tensor_get(wte->value, j) == 0.0, "wte padding element %lld starts at %g, not 0", (long long)j,
              ct_tensor_get(wte->value, j));
    /* the same weights in both: the padded model's, wte cut to its real rows */
    for (int i = 0; i < plain.params.count; i++) {
        const ct_param *a = &plain.params.items[i], *b = ct_params_find(&padded.params, a->name);
        CT_ASSERT(b && b->numel >= a->numel);
        memcpy(a->value->data, b->value->data, (size_t)a->numel * sizeof(double));
    }

    int64_t shape[2] = {B, T};
    ct_tensor ids, yp, yq, tgt;
    ct_tensor_alloc(&ids, CT_I64, CT_CPU, 2, shape);
    ct_tensor_alloc(&tgt, CT_I64, CT_CPU, 2, shape);
    random_ids(&ids, V);
    random_ids(&tgt, V);
    CHECK_OK(ct_model_forward(&plain, &ids, &yp));
    CHECK_OK(ct_model_forward(&padded, &ids, &yq));
    const double *lp = yp.data, *lq = yq.data;
    for (int64_t r = 0; r < B * T; r++)
        for (int64_t j = 0; j < Vp; j++) {
            if (j >= V) {
                CHECK(isinf(lq[r * Vp + j]) && lq[r * Vp + j] < 0, "padding logit [%lld, %lld] is %g, not -inf",
                      (long long)r, (long long)j, lq[r * Vp + j]);
                continue;
            }
            CHECK_NEAR(lq[r * Vp + j], lp[r * V + j], 1e-12);
        }

    /* The Trainer's loss path, fused, into gradient buffers (the outputs stay for backward). */
    ct_loss *l;
    CHECK_OK(ct_cross_entropy_loss_create(NULL, &l));
    int64_t gs[3] = {B, T, V}, gq[3] = {B, T, Vp};
    ct_tensor dp, dq;
    ct_tensor_alloc(&dp, CT_F64, CT_CPU, 3, gs);
    ct_tensor_alloc(&dq, CT_F64, CT_CPU, 3, gq);
    ct_loss_value vp, vq;
    CHECK_OK(ct_loss_forward_backward(l, &yp, &tgt, 1.0, &dp, &vp));
    CHECK_OK(ct_loss_forward_backward(l, &yq, &tgt, 1.0, &dq, &vq));
    CHECK(isfinite(vq.sum) && vq.count == (double)(B * T), "padded loss (%g, %g)", vq.sum, vq.count);
    CHECK_NEAR(vq.sum, vp.sum, 1e-12);
    for (int64_t r = 0; r < B * T; r++)
        for (int64_t j = 0; j < Vp; j++) {
            double g = ((double *)dq.data)[r * Vp + j];
            if (j >= V)
                CHECK(g == 0.0, "padding logit [%lld, %lld] has gradient %g", (long long)r, (long long)j, g);
            else
                CHECK_NEAR(g, ((double *)dp.data)[r * V + j], 1e-12);
        }
    ct_model_zero_grad(&plain);
    ct_model_zero_grad(&padded);
    CHECK_OK(ct_model_backward(&plain, &dp));
    CHECK_OK(ct_model_backward(&padded, &dq));
    for (int i = 0; i < plain.params.count; i++) {
        const ct_param *a = &plain.params.items[i], *b = ct_params_find(&padded.params, a->name);
        double worst = 0, scale = 1e-300;
        for (int64_t j = 0; j < a->numel; j++) {
            double ga = ct_tensor_get(a->grad, j);
            worst = fmax(worst, fabs(ga - ct_tensor_get(b->grad, j)));
            scale = fmax(scale, fabs(ga));
        }
        CHECK(worst <= 1e-10 * scale, "%s: gradient differs by %.3g (scale %.3g) with padding", a->name, worst, scale);
    }
    for (int64_t j = V * C; j < Vp * C; j++)
        CHECK(ct_tensor_get(wte->grad, j) == 0.0, "wte padding element %lld has gradient %g", (long long)j,
              ct_tensor_get(wte->grad, j));

    /* A padding id is not a token, though wte has a row for it. */
    int64_t bad = V + ct_test_between(&rng, 0, Vp - V - 1);
    ((int64_t *)ids.data)[B * T - 1] = bad;
    char want[64];
    snprintf(want, sizeof want, "token id %lld at position [1, %lld]", (long long)bad, (long long)(T - 1));
    CHECK_ERR(ct_model_forward(&padded, &ids, &yq), CT_ERR_INVALID_ARG, "gpt", want, "padded_vocab_size");

    /* The spec records it, so a saved model rebuilds padded. */
    json_t *spec = NULL;
    CHECK_OK(ct_module_to_json(padded.root, &spec));
    CHECK(json_integer_value(json_object_get(spec, "padded_vocab_size")) == Vp, "to_json keeps padded_vocab_size");
    json_decref(spec);

    ct_loss_free(l);
    ct_tensor *all[] = {&ids, &tgt, &dp, &dq};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ct_tensor_free(all[i]);
    ct_model_free(&plain);
    ct_model_free(&padded);

    ct_module *m;
    ct_gpt_config small = c;
    small.padded_vocab_size = c.vocab_size - 1;
    CHECK_ERR(ct_gpt_create(&small, &m), CT_ERR_INVALID_ARG, "padded_vocab_size", "smaller than vocab_size");
    small.padded_vocab_size = -4;
    CHECK_ERR(ct_gpt_create(&small, &m), CT_ERR_INVALID_ARG, "padded_vocab_size=-4");
    CHECK_ERR(from_json("{\"type\": \"gpt\", \"vocab_size\": 10, \"padded_vocab_size\": 8}", &m), CT_ERR_CONFIG,
              "model: gpt: padded_vocab_size=8 is smaller than vocab_size=10");
    CHECK_ERR(from_json("{\"type\": \"gpt\", \"vocab_size\": 10, \"padded_vocab_size\": \"64\"}", &m),
              CT_ERR_CONFIG, "padded_vocab_size");
}

int main(void) {
    ct_test_begin("test_gpt");
    ct_rng_init(&rng, ct_test_seed, 1, CT_RNG_USER);
    gradchecks();
    for (int i = 0; i < 3; i++) causal_and_rows();
    names_and_init(true);
    names_and_init(false);
    for (int i = 0; i < 3; i++) grads_ready_contract();
    dropout_keyed();
    errors();
    for (int i = 0; i < 3; i++) padded_vocab();
    return ct_test_finish();
}
