/* Generation (see generate.h): the decoding loop over model windows, and the logit processing of one
 * step in Hugging Face's order (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper, then
 * multinomial sampling), in float64 whatever the model's dtype. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/rng.h"
#include "generate/generate.h"

ct_generation_config ct_generation_config_default(void) {
    return (ct_generation_config){.max_new_tokens = 20, .temperature = 1.0, .top_k = 50, .top_p = 1.0,
                                  .eos_token_id = -1, .seed = 42};
}

ct_status ct_generation_config_check(const ct_generation_config *g, const char *what) {
    if (g->max_new_tokens < 1)
        return ct_error(CT_ERR_CONFIG, "%s.max_new_tokens: must be >= 1, got %lld", what, (long long)g->max_new_tokens);
    if (!(g->temperature > 0) || !isfinite(g->temperature))
        return ct_error(CT_ERR_CONFIG, "%s.temperature: must be a finite number > 0, got %g", what, g->temperature);
    if (g->top_k < 0) return ct_error(CT_ERR_CONFIG, "%s.top_k: must be >= 0 (0 = off), got %lld", what, (long long)g->top_k);
    if (!(g->top_p > 0 && g->top_p <= 1))
        return ct_error(CT_ERR_CONFIG, "%s.top_p: must be in (0, 1] (1 = off), got %g", what, g->top_p);
    if (g->eos_token_id < -1)
        return ct_error(CT_ERR_CONFIG, "%s.eos_token_id: must be a token id or -1 (none), got %lld", what,
                        (long long)g->eos_token_id);
    return CT_OK;
}

ct_status ct_generation_config_from_json(const json_t *obj, const char *path, ct_generation_config *g) {
    *g = ct_generation_config_default();
    if (!obj) return CT_OK;
    if (!json_is_object(obj)) return ct_error(CT_ERR_CONFIG, "%s: expected an object of generation settings", path);
    static const char *const keys[] = {"max_new_tokens", "do_sample", "temperature", "top_k",
                                       "top_p",          "eos_token_id", "seed",     NULL};
    CT_TRY(ct_json_check_keys(obj, path, keys));
    ct_generation_config d = *g;
    int64_t seed = (int64_t)d.seed;
    CT_TRY(ct_json_int(obj, path, "max_new_tokens", false, d.max_new_tokens, &g->max_new_tokens));
    CT_TRY(ct_json_bool(obj, path, "do_sample", false, d.do_sample, &g->do_sample));
    CT_TRY(ct_json_real(obj, path, "temperature", false, d.temperature, &g->temperature));
    CT_TRY(ct_json_int(obj, path, "top_k", false, d.top_k, &g->top_k));
    CT_TRY(ct_json_real(obj, path, "top_p", false, d.top_p, &g->top_p));
    CT_TRY(ct_json_int(obj, path, "eos_token_id", false, d.eos_token_id, &g->eos_token_id));
    CT_TRY(ct_json_int(obj, path, "seed", false, seed, &seed));
    if (seed < 0) return ct_error(CT_ERR_CONFIG, "%s.seed: must be >= 0, got %lld", path, (long long)seed);
    g->seed = (uint64_t)seed;
    return ct_generation_config_check(g, path);
}

double ct_generation_uniform(uint64_t seed, uint64_t sequence, uint64_t step) {
    /* A stream of its own: the third counter word tells it apart from the other Philox users. */
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    const uint32_t ctr[4] = {(uint32_t)sequence, (uint32_t)(sequence >> 32), 0x67656eu /* "gen" */, (uint32_t)step};
    uint32_t out[4];
    ct_philox4x32(ctr, key, out);
    uint64_t bits = ((uint64_t)out[0] << 21) ^ (uint64_t)out[1]; /* 53 random bits */
    return (double)(bits & ((UINT64_C(1) << 53) - 1)) * (1.0 / 9007199254740992.0);
}

/* order[] sorts by logit, largest first, ties by token id (qsort is not stable). */
static _Thread_local const double *sort_keys;
static int by_logit_desc(const void *a, const void *b) {
    int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    if (sort_keys[i] != sort_keys[j]) return sort_keys[i] > sort_keys[j] ? -1 : 1;
    return (i > j) - (i < j);
}

ct_status ct_generation_probs(const ct_generation_config *g, const double *logits, int64_t V, int64_t *order,
                              double *p) {
    int64_t top = 0;
    for (int64_t j = 0; j < V; j++) {
        if (isnan(logits[j])) return ct_error(CT_ERR_NUMERIC, "generation: logit of token %lld is NaN", (long long)j);
        if (logits[j] > logits[top]) top = j;
    }
    if (isinf(logits[top]))
        return ct_error(CT_ERR_NUMERIC, logits[top] < 0 ? "generation: every logit is -inf"
                                                        : "generation: logit of token %lld is +inf", (long long)top);
    double *x = p; /* processed in place: scaled logits, then probabilities */
    for (int64_t j = 0; j < V; j++) x[j] = logits[j] / g->temperature;
    bool top_k = g->top_k > 0 && g->top_k < V;
    if (top_k || g->top_p < 1.0) {
        for (int64_t j = 0; j < V; j++) order[j] = j;
        sort_keys = x;
        qsort(order, (size_t)V, sizeof *order, by_logit_desc);
    }
    if (top_k) {
        /* TopKLogitsWarper: remove what is below the k-th largest (ties with it stay). */
        double kth = x[order[g->top_k - 1]];
        for (int64_t r = g->top_k; r < V; r++)
            if (x[order[r]] < kth) x[order[r]] = -INFINITY;
    }
    if (g->top_p < 1.0) {
        /* TopPLogitsWarper: from the least likely up, remove tokens while the mass up to and including
         * them is <= 1 - top_p; the most likely token always stays. */
        double m = x[order[0]], z = 0;
        for (int64_t j = 0; j < V; j++) z += exp(x[j] - m);
        double cum = 0;
        for (int64_t r = V - 1; r > 0; r--) {
            cum += exp(x[order[r]] - m) / z;
            if (cum > 1.0 - g->top_p) break;
            x[order[r]] = -INFINITY;
        }
    }
    double m = x[top], z = 0; /* the largest logit is never removed */
    for (int64_t j = 0; j < V; j++) z += x[j] = exp(x[j] - m);
    for (int64_t j = 0; j < V; j++) p[j] /= z;
    return CT_OK;
}

ct_status ct_generation_pick(const ct_generation_config *g, const double *logits, int64_t V, double u, double *p,
                             int64_t *order, int64_t *token) {
    if (!g->do_sample) {
        int64_t top = 0;
        for (int64_t j = 0; j < V; j++) {
            if (isnan(logits[j])) return ct_error(CT_ERR_NUMERIC, "generation: logit of token %lld is NaN", (long long)j);
            if (logits[j] > logits[top]) top = j;
        }
        *token = top;
        return CT_OK;
    }
    CT_TRY(ct_generation_probs(g, logits, V, order, p));
    /* Inverse CDF in token order; the last token with mass catches rounding at the top. */
    double cum = 0;
    int64_t last = -1;
    for (int64_t j = 0; j < V; j++) {
        if (p[j] == 0) continue;
        last = j;
        cum += p[j];
        if (cum > u) break;
    }
    *token = last;
    return CT_OK;
}

/* Logits of row r's position `pos` as float64. */
static void row_logits(const ct_tensor *y, int64_t r, int64_t pos, int64_t W, int64_t V, double *dst) {
    size_t at = ((size_t)r * (size_t)W + (size_t)pos) * (size_t)V;
    if (y->dtype == CT_F64) {
        memcpy(dst, (const double *)y->data + at, (size_t)V * sizeof(double));
    } else {
        const float *s = (const float *)y->data + at;
        for (int64_t j = 0; j < V; j++) dst[j] = s[j];
    }
}

typedef struct gen_scratch {
    ct_tensor x;    /* I64 [max_batch, W] on the model's device */
    ct_tensor xh;   /* the same on the host */
    ct_tensor yh;   /* model output on the host when the model is not */
    double *logits, *work;
    int64_t *order;
} gen_scratch;

static void scratch_free(gen_scratch *s) {
    ct_tensor_free(&s->x);
    ct_tensor_free(&s->xh);
    ct_tensor_free(&s->yh);
    free(s->logits);
    free(s->work);
    free(s->order);
}

/* One step for rows [r0, r0 + n) that are still running. */
static ct_status step_chunk(ct_model *model, const ct_generation_config *g, gen_scratch *s, int64_t r0, int64_t n,
                            int64_t stride, int64_t *ids, int64_t *len, const int64_t *start, bool *done,
                            uint64_t first_index) {
    const int64_t W = model->in_shape.dims[0], V = model->out_shape.dims[model->out_shape.ndim - 1];
    int64_t *xh = s->xh.data;
    for (int64_t i = 0; i < n; i++) {
        int64_t r = r0 + i, L = len[r], from = L > W ? L - W : 0;
        memcpy(xh + i * W, ids + r * stride + from, (size_t)(L - from) * sizeof *xh);
        memset(xh + i * W + (L - from), 0, (size_t)(W - (L - from)) * sizeof *xh);
    }
    ct_tensor xh_rows = ct_tensor_rows(&s->xh, 0, n), x_rows, y;
    const ct_tensor *in = &xh_rows;
    if (!ct_device_eq(model->opts.device, CT_CPU)) {
        x_rows = ct_tensor_rows(&s->x, 0, n);
        CT_TRY(ct_tensor_copy_to(&x_rows, &xh_rows));
        in = &x_rows;
    }
    CT_TRY(ct_model_forward(model, in, &y));
    if (!ct_device_eq(model->opts.device, CT_CPU)) {
        ct_tensor yh = ct_tensor_rows(&s->yh, 0, n);
        CT_TRY(ct_tensor_copy_to(&yh, &y));
        y = yh;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t r = r0 + i;
        if (done[r]) continue;
        int64_t L = len[r], pos = (L > W ? W : L) - 1, step = L - start[r], tok;
        row_logits(&y, i, pos, W, V, s->logits);
        double u = g->do_sample ? ct_generation_uniform(g->seed, first_index + (uint64_t)r, (uint64_t)step) : 0;
        ct_status st = ct_generation_pick(g, s->logits, V, u, s->work, s->order, &tok);
        if (st != CT_OK) return ct_error_prefix(st, "sequence %llu, new token %lld: ", (unsigned long long)(first_index + r),
                                                (long long)step);
        ids[r * stride + L] = tok;
        len[r] = ++L;
        if (tok == g->eos_token_id || L - start[r] >= g->max_new_tokens || L >= stride) done[r] = true;
    }
    return CT_OK;
}

ct_status ct_generate(ct_model *model, const ct_generation_config *g, int64_t n, int64_t stride, int64_t *ids,
                      int64_t *len, uint64_t first_index) {
    CT_TRY(ct_generation_config_check(g, "generation"));
    if (model->in_shape.ndim != 1 || model->in_dtype != CT_I64 || model->out_shape.ndim != 2 ||
        model->out_shape.dims[0] != model->in_shape.dims[0])
        return ct_error(CT_ERR_SHAPE, "generate: the model does not map token ids [T] to logits [T, V]");
    const int64_t W = model->in_shape.dims[0], V = model->out_shape.dims[1], B = model->opts.max_batch;
    /* an id no logit stands for would never be drawn: generation would silently run to max_new_tokens */
    if (g->eos_token_id >= V)
        return ct_error(CT_ERR_CONFIG, "generation.eos_token_id: %lld is outside the model's vocabulary [0, %lld)",
                        (long long)g->eos_token_id, (long long)V);
    for (int64_t r = 0; r < n; r++)
        if (len[r] < 1 || len[r] > stride)
            return ct_error(CT_ERR_INVALID_ARG, "generate: sequence %lld has %lld tokens (need 1..%lld)", (long long)r,
                            (long long)len[r], (long long)stride);
    gen_scratch s = {0};
    int64_t xs[2] = {B, W}, ys[3] = {B, W, V};
    int64_t *start = malloc((size_t)(n ? n : 1) * sizeof *start);
    bool *done = calloc((size_t)(n ? n : 1), sizeof *done);
    s.logits = malloc((size_t)V * sizeof *s.logits);
    s.work = malloc((size_t)V * sizeof *s.work);
    s.order = malloc((size_t)V * sizeof *s.order);
    ct_status st = start && done && s.logits && s.work && s.order ? CT_OK : ct_error(CT_ERR_NOMEM, "generate: out of memory");
    if (st == CT_OK) st = ct_tensor_alloc(&s.xh, CT_I64, CT_CPU, 2, xs);
    if (st == CT_OK && !ct_device_eq(model->opts.device, CT_CPU)) st = ct_tensor_alloc(&s.x, CT_I64, model->opts.device, 2, xs);
    if (st == CT_OK && !ct_device_eq(model->opts.device, CT_CPU)) st = ct_tensor_alloc(&s.yh, model->opts.dtype, CT_CPU, 3, ys);
    bool was_training = model->root->training;
    ct_model_train(model, false);
    for (int64_t r = 0; r < n; r++) {
        start[r] = len[r];
        done[r] = len[r] >= stride;
    }
    /* Chunks of max_batch rows, each run until all its rows are done (a finished row still rides
     * along in its chunk's forwards; its logits are not read). */
    for (int64_t r0 = 0; st == CT_OK && r0 < n; r0 += B) {
        int64_t m = n - r0 < B ? n - r0 : B;
        for (;;) {
            bool running = false;
            for (int64_t i = 0; i < m; i++) running |= !done[r0 + i];
            if (!running) break;
            st = step_chunk(model, g, &s, r0, m, stride, ids, len, start, done, first_index);
            if (st != CT_OK) break;
        }
    }
    ct_model_train(model, was_training);
    scratch_free(&s);
    free(start);
    free(done);
    return st;
}
