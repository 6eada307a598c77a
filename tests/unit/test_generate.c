/* Generation (generate/generate.h).
 *
 * Without arguments: settings from JSON and their errors; the processed distribution's properties
 * (a distribution; top-k keeps exactly the k largest and their ties; top-p keeps the smallest most
 * likely set reaching the mass; temperature sharpens); inverse-CDF picking against a cumulative sum;
 * greedy = the first largest logit; NaN/inf logits are errors; the decoding loop on tiny random GPTs:
 * greedy continuations equal an independent step-by-step argmax over model forwards (with the
 * window cropped to the model's length), rows do not depend on their batch or chunk, sampling is
 * reproducible, keyed by (seed, sequence index) and changes with the seed, top_k 1 sampling is greedy,
 * eos ends a row early, and the row's room (stride) caps it.
 *
 * With --probs: reads JSON lines {"logits": [... null for -inf], "temperature", "top_k", "top_p"} and
 * prints {"probs": [...]} per line, for tests/oracle/test_generate.py to compare with Hugging Face's
 * logits warpers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "generate/generate.h"
#include "model/layers.h"
#include "testlib.h"

static ct_rng rng;

static int probs_mode(void) {
    char line[1 << 20];
    while (fgets(line, sizeof line, stdin)) {
        json_error_t e;
        json_t *in = json_loads(line, 0, &e);
        if (!in) return fprintf(stderr, "bad line: %s\n", e.text), 1;
        json_t *lj = json_object_get(in, "logits");
        int64_t V = (int64_t)json_array_size(lj);
        double *x = malloc((size_t)V * sizeof *x), *p = malloc((size_t)V * sizeof *p);
        int64_t *order = malloc((size_t)V * sizeof *order);
        for (int64_t j = 0; j < V; j++) {
            json_t *v = json_array_get(lj, (size_t)j);
            x[j] = json_is_null(v) ? -INFINITY : json_number_value(v);
        }
        ct_generation_config g = ct_generation_config_default();
        g.do_sample = true;
        g.temperature = json_number_value(json_object_get(in, "temperature"));
        g.top_k = json_integer_value(json_object_get(in, "top_k"));
        g.top_p = json_number_value(json_object_get(in, "top_p"));
        if (ct_generation_probs(&g, x, V, order, p) != CT_OK) return fprintf(stderr, "%s\n", ct_last_error()), 1;
        printf("{\"probs\": [");
        for (int64_t j = 0; j < V; j++) printf("%s%.17g", j ? ", " : "", p[j]);
        printf("]}\n");
        free(x);
        free(p);
        free(order);
        json_decref(in);
    }
    return 0;
}

/* --- settings ----------------------------------------------------------------------------------- */

static ct_status from_text(const char *text, ct_generation_config *g) {
    json_t *v = json_loads(text, 0, NULL);
    CT_ASSERT(v);
    ct_status s = ct_generation_config_from_json(v, "generation", g);
    json_decref(v);
    return s;
}

static void settings(void) {
    ct_generation_config g;
    CHECK_OK(ct_generation_config_from_json(NULL, "generation", &g));
    CHECK(g.max_new_tokens == 20 && !g.do_sample && g.temperature == 1.0 && g.top_k == 50 && g.top_p == 1.0 &&
              g.eos_token_id == -1,
          "GenerationConfig's defaults");
    CHECK_OK(from_text("{\"max_new_tokens\": 7, \"do_sample\": true, \"temperature\": 0.5, \"top_k\": 0, "
                       "\"top_p\": 0.9, \"eos_token_id\": 3, \"seed\": 11}",
                       &g));
    CHECK(g.max_new_tokens == 7 && g.do_sample && g.temperature == 0.5 && g.top_k == 0 && g.top_p == 0.9 &&
              g.eos_token_id == 3 && g.seed == 11,
          "every key read");
    CHECK_ERR(from_text("{\"max_new_tokens\": 0}", &g), CT_ERR_CONFIG, "generation.max_new_tokens: must be >= 1, got 0");
    CHECK_ERR(from_text("{\"temperature\": 0}", &g), CT_ERR_CONFIG, "generation.temperature: must be a finite number > 0");
    CHECK_ERR(from_text("{\"top_p\": 1.5}", &g), CT_ERR_CONFIG, "generation.top_p: must be in (0, 1]");
    CHECK_ERR(from_text("{\"top_p\": 0}", &g), CT_ERR_CONFIG, "generation.top_p");
    CHECK_ERR(from_text("{\"top_k\": -1}", &g), CT_ERR_CONFIG, "generation.top_k: must be >= 0");
    CHECK_ERR(from_text("{\"seed\": -1}", &g), CT_ERR_CONFIG, "generation.seed: must be >= 0");
    CHECK_ERR(from_text("{\"eos_token_id\": -2}", &g), CT_ERR_CONFIG, "generation.eos_token_id");
    CHECK_ERR(from_text("{\"num_beams\": 4}", &g), CT_ERR_CONFIG, "num_beams");
    CHECK_ERR(from_text("{\"do_sample\": 1}", &g), CT_ERR_CONFIG, "generation.do_sample");
    CHECK_ERR(from_text("[1]", &g), CT_ERR_CONFIG, "generation: expected an object");
}

/* --- one step ------------------------------------------------------------------------------------ */

static void one_step(void) {
    for (int rep = 0; rep < 200; rep++) {
        int64_t V = ct_test_between(&rng, 1, 60);
        double x[60], p[60], work[60];
        int64_t order[60];
        for (int64_t j = 0; j < V; j++) x[j] = 4 * ct_rng_normal(&rng);
        ct_generation_config g = ct_generation_config_default();
        g.do_sample = true;
        g.temperature = 0.2 + 2 * ct_rng_uniform(&rng);
        g.top_k = ct_test_between(&rng, 0, V + 2);
        g.top_p = ct_rng_below(&rng, 2) ? 1.0 : 0.05 + 0.95 * ct_rng_uniform(&rng);
        CHECK_OK(ct_generation_probs(&g, x, V, order, p));
        double sum = 0, kept_min = INFINITY, removed_max = -INFINITY;
        int64_t kept = 0, top = 0;
        for (int64_t j = 0; j < V; j++) {
            sum += p[j];
            kept += p[j] > 0;
            if (x[j] > x[top]) top = j;
        }
        CHECK(fabs(sum - 1) < 1e-12 && p[top] > 0, "a distribution keeping the most likely token (sum %.17g)", sum);
        /* Kept tokens are the most likely: every kept logit >= every removed one. */
        for (int64_t j = 0; j < V; j++) {
            if (p[j] > 0 && x[j] < kept_min) kept_min = x[j];
            if (p[j] == 0 && x[j] > removed_max) removed_max = x[j];
        }
        bool any_removed = kept < V;
        CHECK(!any_removed || kept_min > removed_max, "kept tokens are the most likely ones");
        if (g.top_k > 0 && g.top_k < V && g.top_p == 1.0) CHECK(kept == g.top_k, "top_k %lld kept %lld", (long long)g.top_k, (long long)kept);
        if (g.top_k == 0 || g.top_k >= V) {
            /* Reference: softmax(x / T) over the kept set, renormalised. */
            double m = x[top] / g.temperature, z = 0;
            for (int64_t j = 0; j < V; j++) z += p[j] > 0 ? exp(x[j] / g.temperature - m) : 0;
            for (int64_t j = 0; j < V; j++)
                if (p[j] > 0) CHECK_NEAR(p[j], exp(x[j] / g.temperature - m) / z, 1e-12);
            if (g.top_p < 1.0) {
                /* The kept set is minimal: its mass under the full softmax reaches top_p, and without its
                 * least likely member it does not. */
                double zf = 0, mass = 0, least = INFINITY;
                for (int64_t j = 0; j < V; j++) zf += exp(x[j] / g.temperature - m);
                for (int64_t j = 0; j < V; j++)
                    if (p[j] > 0) {
                        double q = exp(x[j] / g.temperature - m) / zf;
                        mass += q;
                        if (q < least) least = q;
                    }
                CHECK(mass >= g.top_p - 1e-12, "top_p %.3f: kept mass %.6f", g.top_p, mass);
                CHECK(kept == 1 || mass - least < g.top_p + 1e-12, "top_p %.3f: kept set not minimal", g.top_p);
            }
        }
        /* Inverse CDF: the token whose cumulative interval holds u. */
        double u = ct_rng_uniform(&rng), cum = 0;
        int64_t want = -1, got;
        for (int64_t j = 0; j < V && want < 0; j++)
            if (p[j] > 0 && (cum += p[j]) > u) want = j;
        if (want < 0)
            for (int64_t j = 0; j < V; j++)
                if (p[j] > 0) want = j;
        CHECK_OK(ct_generation_pick(&g, x, V, u, work, order, &got));
        CHECK(got == want, "pick at u=%.6f: %lld, want %lld", u, (long long)got, (long long)want);
        g.do_sample = false;
        CHECK_OK(ct_generation_pick(&g, x, V, u, work, order, &got));
        CHECK(got == top, "greedy: %lld, want %lld", (long long)got, (long long)top);
    }
    double x[4] = {1, 3, 3, 0}, p[4];
    int64_t order[4], tok;
    ct_generation_config g = ct_generation_config_default();
    CHECK_OK(ct_generation_pick(&g, x, 4, 0.5, p, order, &tok));
    CHECK(tok == 1, "greedy takes the first of tied largest logits: %lld", (long long)tok);
    g.do_sample = true;
    g.top_k = 1;
    CHECK_OK(ct_generation_probs(&g, x, 4, order, p));
    CHECK(p[1] == 0.5 && p[2] == 0.5 && p[0] == 0 && p[3] == 0, "top_k keeps ties with the k-th");
    x[2] = NAN;
    CHECK_ERR(ct_generation_probs(&g, x, 4, order, p), CT_ERR_NUMERIC, "logit of token 2 is NaN");
    x[2] = INFINITY;
    CHECK_ERR(ct_generation_probs(&g, x, 4, order, p), CT_ERR_NUMERIC, "token 2 is +inf");
    for (int j = 0; j < 4; j++) x[j] = -INFINITY;
    CHECK_ERR(ct_generation_probs(&g, x, 4, order, p), CT_ERR_NUMERIC, "every logit is -inf");
    /* The uniform numbers: in [0, 1), keyed by every input. */
    double a = ct_generation_uniform(1, 2, 3);
    CHECK(a >= 0 && a < 1, "uniform in [0, 1)");
    CHECK(a != ct_generation_uniform(2, 2, 3) && a != ct_generation_uniform(1, 3, 3) && a != ct_generation_uniform(1, 2, 4),
          "seed, sequence and step each change the draw");
    double mean = 0;
    for (int i = 0; i < 20000; i++) mean += ct_generation_uniform(7, (uint64_t)i, 0) / 20000;
    CHECK(fabs(mean - 0.5) < 0.01, "mean of 20000 draws %.4f (sd 0.002)", mean);
}

/* --- the decoding loop ------------------------------------------------------------------------- */

static ct_status build(const ct_gpt_config *c, int64_t W, int64_t max_batch, ct_model *model) {
    ct_module *m;
    CT_TRY(ct_gpt_create(c, &m));
    ct_shape in = {1, {W}};
    ct_model_options mo = {.dtype = CT_F32, .max_batch = max_batch, .seed = ct_test_seed};
    return ct_model_build(model, m, &in, &mo);
}

/* Greedy by hand: one forward of the (cropped, zero-padded) window per token, argmax at its end. */
static void greedy_by_hand(ct_model *m, int64_t *ids, int64_t len, int64_t stride, int64_t max_new) {
    const int64_t W = m->in_shape.dims[0], V = m->out_shape.dims[1];
    int64_t x[64] = {0}, shape[2] = {1, W};
    ct_tensor in = ct_tensor_view(x, CT_I64, CT_CPU, 2, shape), y;
    for (int64_t k = 0; k < max_new && len < stride; k++) {
        int64_t from = len > W ? len - W : 0, n = len - from;
        memset(x, 0, sizeof x);
        memcpy(x, ids + from, (size_t)n * sizeof *x);
        CHECK_OK(ct_model_forward(m, &in, &y));
        const float *row = (const float *)y.data + (n - 1) * V;
        int64_t best = 0;
        for (int64_t j = 1; j < V; j++)
            if (row[j] > row[best]) best = j;
        ids[len++] = best;
    }
}

static void decoding(void) {
    for (int rep = 0; rep < 4; rep++) {
        ct_gpt_config c = ct_gpt_config_default();
        c.vocab_size = ct_test_between(&rng, 5, 40);
        c.n_head = ct_test_between(&rng, 1, 2);
        c.n_embd = 8 * c.n_head;
        c.n_layer = ct_test_between(&rng, 1, 2);
        c.n_positions = ct_test_between(&rng, 4, 12);
        int64_t W = ct_test_between(&rng, 2, c.n_positions), n = ct_test_between(&rng, 3, 7), stride = 40;
        ct_model big, small;
        CHECK_OK(build(&c, W, n, &big));
        CHECK_OK(build(&c, W, 2, &small)); /* same seed: same weights; chunks of 2 rows */
        ct_model_train(&big, true);        /* generation switches to eval mode and back */
        int64_t ids[8 * 40], len[8], ref[8 * 40], sampled[8 * 40], slen[8];
        for (int64_t r = 0; r < n; r++) {
            len[r] = ct_test_between(&rng, 1, 2 * W); /* some prompts longer than the window: cropped */
            for (int64_t j = 0; j < len[r]; j++) ids[r * stride + j] = ct_test_between(&rng, 0, c.vocab_size - 1);
        }
        memcpy(ref, ids, sizeof ids);
        int64_t ref_len[8];
        memcpy(ref_len, len, sizeof len);
        ct_generation_config g = ct_generation_config_default();
        g.max_new_tokens = ct_test_between(&rng, 1, 12);
        CHECK_OK(ct_generate(&big, &g, n, stride, ids, len, 0));
        CHECK(big.root->training, "training mode restored");
        ct_model_train(&big, false);
        for (int64_t r = 0; r < n; r++) {
            greedy_by_hand(&big, ref + r * stride, ref_len[r], stride, g.max_new_tokens);
            CHECK(len[r] == ref_len[r] + g.max_new_tokens, "row %lld grew by max_new_tokens", (long long)r);
            CHECK(memcmp(ids + r * stride, ref + r * stride, (size_t)len[r] * sizeof *ids) == 0,
                  "row %lld: greedy equals step-by-step argmax", (long long)r);
        }
        /* Sampling: batch and chunk invariance, keyed by the sequence index. */
        g.do_sample = true;
        g.top_k = ct_test_between(&rng, 0, 5);
        g.temperature = 0.7 + ct_rng_uniform(&rng);
        g.seed = (uint64_t)ct_test_between(&rng, 0, 1000000);
        for (int64_t r = 0; r < n; r++) slen[r] = ref_len[r];
        memcpy(sampled, ids, sizeof ids);
        CHECK_OK(ct_generate(&big, &g, n, stride, sampled, slen, 5));
        for (int64_t r = 0; r < n; r++) {
            int64_t one[40], one_len = ref_len[r];
            memcpy(one, ids + r * stride, sizeof one);
            CHECK_OK(ct_generate(&small, &g, 1, stride, one, &one_len, 5 + (uint64_t)r));
            CHECK(one_len == slen[r] && memcmp(one, sampled + r * stride, (size_t)one_len * sizeof *one) == 0,
                  "row %lld sampled alone equals its row in the batch", (long long)r);
        }
        int64_t again[8 * 40], again_len[8];
        memcpy(again, ids, sizeof ids);
        memcpy(again_len, ref_len, sizeof ref_len);
        CHECK_OK(ct_generate(&small, &g, n, stride, again, again_len, 5));
        CHECK(memcmp(again, sampled, sizeof again) == 0, "same seed, chunks of 2: same samples");
        g.seed++;
        memcpy(again, ids, sizeof ids);
        memcpy(again_len, ref_len, sizeof ref_len);
        CHECK_OK(ct_generate(&small, &g, n, stride, again, again_len, 5));
        if (g.max_new_tokens * n >= 12 && g.top_k != 1)
            CHECK(memcmp(again, sampled, sizeof again) != 0, "another seed, other samples");
        /* top_k 1 sampling is greedy. */
        g.top_k = 1;
        memcpy(again, ids, sizeof ids);
        memcpy(again_len, ref_len, sizeof ref_len);
        CHECK_OK(ct_generate(&big, &g, n, stride, again, again_len, 0));
        for (int64_t r = 0; r < n; r++)
            CHECK(memcmp(again + r * stride, ids + r * stride, (size_t)len[r] * sizeof *ids) == 0, "top_k 1 = greedy");
        /* eos: a row ends right after the first greedy token that equals it. */
        g = ct_generation_config_default();
        g.max_new_tokens = 12;
        int64_t first_new = ids[ref_len[0]];
        g.eos_token_id = first_new;
        memcpy(again, ids, sizeof ids);
        memcpy(again_len, ref_len, sizeof ref_len);
        CHECK_OK(ct_generate(&big, &g, 1, stride, again, again_len, 0));
        CHECK(again_len[0] == ref_len[0] + 1 && again[ref_len[0]] == first_new, "eos ends the row after emitting it");
        /* The row's room caps it. */
        g.eos_token_id = -1;
        int64_t tight = ref_len[0] + 2;
        int64_t row[40];
        memcpy(row, ids, sizeof row);
        int64_t row_len = ref_len[0];
        CHECK_OK(ct_generate(&big, &g, 1, tight, row, &row_len, 0));
        CHECK(row_len == tight, "stride caps the row: %lld of %lld", (long long)row_len, (long long)tight);
        row_len = 0;
        CHECK_ERR(ct_generate(&big, &g, 1, tight, row, &row_len, 0), CT_ERR_INVALID_ARG, "sequence 0 has 0 tokens");
        /* an end-of-sequence id beyond the vocabulary could never be drawn: refused, not ignored */
        row_len = ref_len[0];
        g.eos_token_id = c.vocab_size;
        char want[96];
        snprintf(want, sizeof want, "generation.eos_token_id: %lld is outside the model's vocabulary [0, %lld)",
                 (long long)c.vocab_size, (long long)c.vocab_size);
        CHECK_ERR(ct_generate(&big, &g, 1, tight, row, &row_len, 0), CT_ERR_CONFIG, want);
        g.eos_token_id = c.vocab_size - 1;
        CHECK_OK(ct_generate(&big, &g, 1, tight, row, &row_len, 0));
        ct_model_free(&big);
        ct_model_free(&small);
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--probs") == 0) return probs_mode();
    ct_test_begin("test_generate");
    ct_rng_init(&rng, ct_test_seed, 1, CT_RNG_USER);
    settings();
    one_step();
    decoding();
    return ct_test_finish();
}
