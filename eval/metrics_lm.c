/* Language-model token metrics: "token_loss", "perplexity" and "token_accuracy" over logits
 * [rows, T, V] (any [rows, ..., V]) and integer labels [rows, T] (the logits' shape without V),
 * already aligned with the logits' positions (the token dataset shifts them), skipping tokens whose
 * label is ignore_index (default -100, as torch.nn.functional.cross_entropy):
 *   token_loss      sum of token NLLs / number of tokens: F.cross_entropy(reduction="mean") over
 *                   every non-ignored token of the whole set, not a mean of per-batch means; each
 *                   NLL is (m - logit[label]) + log1p(sum over j != argmax of exp(logit_j - m)),
 *                   m the largest logit, in float64: float32 logits lose nothing, large logits do
 *                   not overflow, and a confidently right token keeps its tiny loss (1e-21 stays
 *                   1e-21, where log(1 + 1e-21) would round to 0);
 *   perplexity      exp(token_loss);
 *   token_accuracy  argmax == label over the same tokens (first maximum wins, NaN the largest, as
 *                   torch.argmax).
 * A NaN logit, or an infinite largest one, makes its token's NLL NaN, as log_softmax does in PyTorch.
 * A metric that has seen no token (every token ignored, every row masked) adds no key.
 *
 * The per-token values are ct_op_token_values' (core/ops/ops_loss.h): the batch's own when the
 * evaluation computed them where the logits are (ct_eval_batch.tokens: on a GPU, so that the logits
 * stay there, and once for all three metrics), else computed here from the outputs.
 *
 * State: tokens, correct tokens and sequences with at least one token (int64), the NLL sum, and the
 * sequence-level sums sum a_i^2, sum a_i b_i, sum b_i^2, where for sequence (row) i a_i is its NLL
 * sum (token_accuracy: its correct count) and b_i its number of tokens. Each row's (a_i, b_i) is
 * computed on its own and then added to the state in row order, so the result does not depend on
 * the batch size; the per-token values are independent of the thread count.
 *
 * Uncertainty. Tokens of one sequence are not independent samples (a model that is lost in a
 * document is lost for all its tokens), so the unit is the sequence: every metric is a ratio
 * sum a_i / sum b_i over sequences. With resamples > 0, a percentile bootstrap over the kept
 * per-sequence records (a_i, b_i); perplexity's interval is exp of token_loss's (the same
 * resamples). With resamples = 0, the closed form for a ratio estimator over clusters (the
 * delta / sandwich estimate, ct_ratio_interval, the same as the loss metric's with tokens as
 * weights): var = n / (n - 1) * sum (a_i - R b_i)^2 / (sum b_i)^2, a normal interval for token_loss
 * and token_accuracy (cut to [0, 1]) and exp of token_loss's for perplexity (its standard error by
 * the delta method, exp(R) se). A binomial interval over tokens (treating them as independent)
 * would be narrower and wrong for text: on sequences that are all right or all wrong it is
 * sqrt(tokens per sequence) times too narrow. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/ops/ops.h"
#include "core/util.h"
#include "eval/metric.h"
#include "eval/uncertainty.h"

typedef struct lm_metric {
    ct_metric base;
    ct_lm_kind kind;
    int64_t ignore_index;
} lm_metric;

static const lm_metric *lm_of(const ct_metric *m) { return ct_container_of(m, const lm_metric, base); }

enum { TOKENS, CORRECT, SEQS, N_COUNTS };
enum { NLL, AA, AB, BB, N_SUMS };

static inline int64_t label_at(const ct_tensor *l, int64_t p) {
    return l->dtype == CT_I64 ? ((const int64_t *)l->data)[p] : ((const int32_t *)l->data)[p];
}

/* --- update ------------------------------------------------------------------------------------- */

/* Logits [rows, ..., V] (the outputs, or the shape the batch's token values came from), labels
 * [rows, ...] int64/int32, every label of a real row ignore_index or in [0, V). Writes the positions
 * per row T. */
static ct_status check_batch(const lm_metric *lm, const ct_eval_batch *b, int64_t *t_out) {
    char t[128], u[128];
    const ct_tensor *o = b->outputs, *l = b->labels;
    const ct_token_values *tv = b->tokens;
    if (!o && !tv) return ct_error(CT_ERR_INVALID_ARG, "needs the model's logits [rows, T, vocab]");
    if (!l) return ct_error(CT_ERR_INVALID_ARG, "needs token labels, and the data has none");
    if (tv && (!tv->nll || !tv->hit || tv->ndim < 1 || tv->ndim > CT_MAX_DIMS))
        return ct_error(CT_ERR_INVALID_ARG, "token values without their nll, hit or logits' shape");
    int ndim = tv ? tv->ndim : o->ndim;
    const int64_t *shape = tv ? tv->shape : o->shape;
    char what[160]; /* "outputs [2, 3, 4] f32 cpu", or the shape the token values came from */
    if (tv)
        snprintf(what, sizeof what, "the token values of logits %s", ct_shape_str(ndim, shape, t, sizeof t));
    else
        snprintf(what, sizeof what, "outputs %s", ct_tensor_str(o, t, sizeof t));
    if (ndim < 2 || shape[ndim - 1] < 1)
        return ct_error(CT_ERR_SHAPE, "%s: expected logits [rows, T, vocab]", what);
    bool fits = (l->dtype == CT_I64 || l->dtype == CT_I32) && l->ndim == ndim - 1;
    for (int d = 0; fits && d < l->ndim; d++)
        fits = l->shape[d] == shape[d];
    if (!fits)
        return ct_error(CT_ERR_SHAPE,
                        "labels %s: expected token ids %s int64 or int32 (the logits' shape without "
                        "the vocabulary) for %s",
                        ct_tensor_str(l, t, sizeof t), ct_shape_str(ndim - 1, shape, u, sizeof u), what);
    int64_t v = shape[ndim - 1], per_row = 1;
    for (int d = 1; d < l->ndim; d++)
        per_row *= l->shape[d];
    for (int64_t i = 0; i < l->shape[0]; i++) {
        if (!ct_metric_row_real(b, i)) continue;
        for (int64_t p = i * per_row; p < (i + 1) * per_row; p++) {
            int64_t y = label_at(l, p);
            if (y != lm->ignore_index && (y < 0 || y >= v))
                return ct_error(CT_ERR_INVALID_ARG,
                                "label %lld at row %lld, position %lld of the batch is outside [0, %lld) (the "
                                "vocabulary) and is not ignore_index %lld",
                                (long long)y, (long long)i, (long long)(p - i * per_row), (long long)v,
                                (long long)lm->ignore_index);
        }
    }
    *t_out = per_row;
    return CT_OK;
}

static ct_status lm_update(ct_metric *m, const ct_eval_batch *b) {
    const lm_metric *lm = lm_of(m);
    int64_t T;
    CT_TRY(check_batch(lm, b, &T));
    const ct_tensor *o = b->outputs, *l = b->labels;
    const int64_t rows = l->shape[0], n = rows * T, ignore = lm->ignore_index;
    const bool accuracy = lm->kind == CT_LM_TOKEN_ACCURACY;

    /* Sequences with a token: one record each, room made first so nothing below fails half-way. */
    int64_t seqs = 0;
    for (int64_t i = 0; i < rows; i++) {
        if (!ct_metric_row_real(b, i)) continue;
        int64_t p = i * T;
        while (p < (i + 1) * T && label_at(l, p) == ignore)
            p++;
        seqs += p < (i + 1) * T;
    }
    if (m->samples.width > 0) CT_TRY(ct_metric_samples_reserve(m, seqs));
    /* The token values: the batch's, or computed here from the outputs (both NLL and hit: one pass) */
    double *own = NULL;
    const double *val;
    if (b->tokens) {
        val = accuracy ? b->tokens->hit : b->tokens->nll;
    } else {
        own = malloc((size_t)(n > 0 ? 2 * n : 1) * sizeof *own);
        if (!own) return ct_error(CT_ERR_NOMEM, "out of memory for %lld token values", (long long)n);
        if (n > 0) ct_op_token_values(o, l, own, own + n);
        val = accuracy ? own + n : own;
    }
    /* Per sequence, in order, straight into the state. */
    for (int64_t i = 0; i < rows; i++) {
        if (!ct_metric_row_real(b, i)) continue;
        double a = 0;
        int64_t tokens = 0;
        for (int64_t p = i * T; p < (i + 1) * T; p++)
            if (label_at(l, p) != ignore) {
                a += val[p];
                tokens++;
            }
        if (tokens == 0) continue;
        double bt = (double)tokens;
        if (accuracy)
            m->counts[CORRECT] += (int64_t)a;
        else
            m->sums[NLL] += a;
        m->counts[TOKENS] += tokens;
        m->counts[SEQS]++;
        m->sums[AA] += a * a;
        m->sums[AB] += a * bt;
        m->sums[BB] += bt * bt;
        if (m->samples.width > 0) {
            double *rec = m->samples.values + m->samples.n * m->samples.width;
            rec[0] = a;
            rec[1] = bt;
            m->samples.n++;
        }
    }
    free(own);
    return CT_OK;
}

/* --- compute ------------------------------------------------------------------------------------ */

static const char *const kind_names[] = {"token_loss", "perplexity", "token_accuracy", NULL};

/* token_loss or token_accuracy: the ratio the metric is (before perplexity's exp). */
static double lm_ratio(const ct_metric *m) {
    double num = lm_of(m)->kind == CT_LM_TOKEN_ACCURACY ? (double)m->counts[CORRECT] : m->sums[NLL];
    return num / (double)m->counts[TOKENS];
}

static ct_status lm_compute(const ct_metric *m, const char *prefix, json_t *out) {
    if (m->counts[TOKENS] == 0) return CT_OK; /* no token seen: no key */
    const lm_metric *lm = lm_of(m);
    double r = lm_ratio(m);
    return ct_metric_put(out, prefix, kind_names[lm->kind], lm->kind == CT_LM_PERPLEXITY ? exp(r) : r);
}

/* --- uncertainty ------------------------------------------------------------------------------- */

typedef struct boot_ctx {
    const double *rec; /* (a_i, b_i) per sequence */
    bool finite;       /* every a_i finite: 0 * a_i is 0, no select needed */
} boot_ctx;

/* The ratio sum a / sum b of a resample of the sequences' (a, b) records. It runs resamples x
 * sequences times: with finite records, branch-free; otherwise an undrawn NaN or infinite a_i is
 * selected away (0 * NaN would be NaN), as when resampling the sequences one by one. */
static void ratio_stat(const int64_t *mult, int64_t n, const void *ctx, void *scratch, double *values) {
    const boot_ctx *c = ctx;
    const double *rec = c->rec;
    double a = 0, b = 0;
    if (c->finite) {
        for (int64_t i = 0; i < n; i++) {
            const double w = (double)mult[i];
            a += w * rec[2 * i];
            b += w * rec[2 * i + 1];
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            const double w = (double)mult[i];
            a += w * (mult[i] ? rec[2 * i] : 0.0);
            b += w * rec[2 * i + 1];
        }
    }
    values[0] = a / b;
}

static ct_status lm_uncertainty(const ct_metric *m, const ct_uncertainty_config *cfg, const char *prefix, json_t *out) {
    if (m->counts[TOKENS] == 0) return CT_OK; /* no value, no interval */
    const lm_metric *lm = lm_of(m);
    const char *name = kind_names[lm->kind];
    const bool ppl = lm->kind == CT_LM_PERPLEXITY, acc = lm->kind == CT_LM_TOKEN_ACCURACY;
    double se, lo, hi;
    if (cfg->resamples == 0) { /* the closed form: a ratio estimator over sequences */
        ct_ratio_sums rs = {.n = (double)m->counts[SEQS],
                            .w = (double)m->counts[TOKENS],
                            .wl = acc ? (double)m->counts[CORRECT] : m->sums[NLL],
                            .w2 = m->sums[BB],
                            .w2l = m->sums[AB],
                            .w2l2 = m->sums[AA]};
        double r;
        ct_ratio_interval(&rs, cfg->confidence, &r, &se, &lo, &hi);
        if (isnan(r)) se = lo = hi = NAN; /* a NaN loss has no spread (the helper clamps a NaN variance to 0) */
        if (ppl) {                        /* exp of token_loss's interval; the delta method for the standard error */
            se *= exp(r);
            lo = exp(lo);
            hi = exp(hi);
        } else if (acc) { /* a proportion: the normal interval is cut to [0, 1] */
            lo = fmax(lo, 0.0);
            hi = fmin(hi, 1.0);
        }
        return ct_uncertainty_put(out, prefix, name, se, lo, hi);
    }
    const int64_t n = m->samples.n;
    CT_ASSERT(n == m->counts[SEQS]); /* one record per sequence with a token */
    double *values = malloc((size_t)cfg->resamples * sizeof *values);
    if (!values) return ct_error(CT_ERR_NOMEM, "out of memory for %lld bootstrap values", (long long)cfg->resamples);
    boot_ctx ctx = {m->samples.values, true};
    for (int64_t i = 0; i < n && ctx.finite; i++)
        ctx.finite = isfinite(ctx.rec[2 * i]);
    ct_status s = ct_bootstrap_samples(cfg, n, ratio_stat, &ctx, 0, 1, values);
    if (s == CT_OK && !ppl) s = ct_bootstrap_put(out, prefix, name, values, cfg->resamples, cfg->confidence);
    if (s == CT_OK && ppl) {
        /* exp is increasing, so perplexity's interval is exp of token_loss's; its standard error is
         * the spread of the resamples' perplexities. */
        s = ct_bootstrap_interval(values, cfg->resamples, cfg->confidence, &lo, &hi);
        for (int64_t i = 0; i < cfg->resamples; i++)
            values[i] = exp(values[i]);
        if (s == CT_OK)
            s = ct_uncertainty_put(out, prefix, name, ct_bootstrap_stderr(values, cfg->resamples), exp(lo), exp(hi));
    }
    free(values);
    return s;
}

static bool lm_same_config(const ct_metric *a, const ct_metric *b) {
    return lm_of(a)->kind == lm_of(b)->kind && lm_of(a)->ignore_index == lm_of(b)->ignore_index;
}

#define LM_OPS(NAME)                                                                                                   \
    {                                                                                                                  \
        .size = sizeof(ct_metric_ops), .name = NAME, .update = lm_update, .compute = lm_compute,                       \
        .same_config = lm_same_config, .uncertainty = lm_uncertainty, .takes_token_values = true                       \
    }
static const ct_metric_ops lm_ops[] = {LM_OPS("token_loss"), LM_OPS("perplexity"), LM_OPS("token_accuracy")};

/* --- constructors and JSON ---------------------------------------------------------------------- */

const char *const ct_lm_metric_names[] = {"token_loss", "perplexity", "token_accuracy", NULL};

ct_status ct_lm_metric_create(ct_lm_kind kind, int64_t ignore_index, ct_metric **out) {
    CT_ASSERT(out);
    CT_ASSERT(kind >= CT_LM_TOKEN_LOSS && kind <= CT_LM_TOKEN_ACCURACY);
    *out = NULL;
    lm_metric *lm = calloc(1, sizeof *lm);
    if (!lm) return ct_error(CT_ERR_NOMEM, "metric '%s': out of memory", kind_names[kind]);
    lm->kind = kind;
    lm->ignore_index = ignore_index;
    ct_status s = ct_metric_base_init(&lm->base, &lm_ops[kind], N_COUNTS, NULL, N_SUMS, NULL);
    if (s != CT_OK) { /* base_init leaves nothing allocated on failure */
        free(lm);
        return s;
    }
    s = ct_metric_keep_samples(&lm->base, 2);
    if (s != CT_OK) {
        ct_metric_free(&lm->base);
        return s;
    }
    *out = &lm->base;
    return CT_OK;
}

ct_status ct_lm_metric_from_json(const json_t *spec, const char *path, ct_metric **out) {
    CT_ASSERT(out);
    *out = NULL;
    if (!path) path = "metric";
    if (json_is_string(spec)) {
        int kind;
        CT_TRY(ct_metric_kind_index(json_string_value(spec), kind_names, "language-model", path, &kind));
        return ct_metric_spec_error(ct_lm_metric_create((ct_lm_kind)kind, -100, out), path);
    }
    if (!json_is_object(spec))
        return ct_error(CT_ERR_CONFIG, "%s: expected a metric name (\"perplexity\") or an object with a \"type\"",
                        path);
    const char *type;
    CT_TRY(ct_json_string(spec, path, "type", true, NULL, &type));
    char type_path[512];
    snprintf(type_path, sizeof type_path, "%s.type", path);
    int kind;
    CT_TRY(ct_metric_kind_index(type, kind_names, "language-model", type_path, &kind));
    static const char *const keys[] = {"type", "ignore_index", NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys));
    int64_t ignore;
    CT_TRY(ct_json_int(spec, path, "ignore_index", false, -100, &ignore));
    return ct_metric_spec_error(ct_lm_metric_create((ct_lm_kind)kind, ignore, out), path);
}
