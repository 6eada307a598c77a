/* Text generation with a causal language model (a "gpt" or any model mapping token ids [B, T] to
 * next-token logits [B, T, V]): greedy decoding and temperature / top-k / top-p sampling, Hugging
 * Face's GenerationConfig names and order of logit processing.
 *
 * The model is used as it was built: input windows of its length W. A sequence of L tokens is fed as
 * its last min(L, W) tokens at positions 0.. (nanoGPT's crop when it outgrows the context), padding
 * after them (causal attention: a position never sees later ones), and the next token comes from the
 * logits at its last position. Each new token costs one forward of the window (no key/value cache).
 *
 * Sampling draws one uniform number per (sequence, step) from Philox keyed by the seed, with the
 * sequence's index as counter: a sequence's continuation depends on its prompt, its index and the
 * seed only, never on the batch it ran in or on how many processes shared the work. */
#ifndef CT_GENERATE_H
#define CT_GENERATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "model/model.h"

typedef struct ct_generation_config {
    int64_t max_new_tokens; /* 20 */
    bool do_sample;         /* false: greedy (the first largest logit) */
    double temperature;     /* 1.0: logits are divided by it before top-k / top-p (sampling only) */
    int64_t top_k;          /* 50: keep the k largest logits (and ties with the k-th); 0 = off */
    double top_p;           /* 1.0 = off: keep the smallest set of most likely tokens whose mass >= top_p */
    int64_t eos_token_id;   /* -1 = none: a sequence ends after emitting it */
    uint64_t seed;          /* sampling's key */
} ct_generation_config;

/* HF's GenerationConfig defaults (max_new_tokens 20, greedy, temperature 1, top_k 50, top_p 1). */
ct_generation_config ct_generation_config_default(void);

/* Fills *g from defaults and a JSON object with GenerationConfig's keys (max_new_tokens, do_sample,
 * temperature, top_k, top_p, eos_token_id, seed); NULL obj leaves the defaults. Errors name path.key. */
ct_status ct_generation_config_from_json(const json_t *obj, const char *path, ct_generation_config *g);
/* Rejects values generation cannot use (max_new_tokens < 1, temperature <= 0 when sampling, top_p
 * outside (0, 1], top_k < 0), naming `what` (e.g. "generation"). */
ct_status ct_generation_config_check(const ct_generation_config *g, const char *what);

/* The distribution sampling draws from for one row of V logits, into p[V]: softmax of the logits
 * divided by temperature, after top-k and top-p removed tokens (probability 0). order: V int64 of
 * scratch. CT_ERR_NUMERIC when a logit is NaN or every one is -inf. */
ct_status ct_generation_probs(const ct_generation_config *g, const double *logits, int64_t V, int64_t *order,
                              double *p);
/* The next token for one row of V logits: greedy (the first largest logit), or ct_generation_probs'
 * distribution sampled at u in [0, 1) by inverse CDF over token order. p (V doubles) and order (V
 * int64) are scratch. */
ct_status ct_generation_pick(const ct_generation_config *g, const double *logits, int64_t V, double u, double *p,
                             int64_t *order, int64_t *token);

/* The uniform number in [0, 1) that sampling uses for `sequence` at `step`. */
double ct_generation_uniform(uint64_t seed, uint64_t sequence, uint64_t step);

/* Continues n sequences in place. ids is [n, stride] (row i: len[i] tokens, room for stride); each
 * row grows by up to max_new_tokens (never beyond stride), stopping early after eos_token_id;
 * len[i] is updated. first_index is the global index of row 0 (sampling's counter). Runs the model in
 * eval mode (restoring its mode) in chunks of its max_batch; allocates its scratch per call. */
ct_status ct_generate(ct_model *model, const ct_generation_config *g, int64_t n, int64_t stride, int64_t *ids,
                      int64_t *len, uint64_t first_index);

#endif
