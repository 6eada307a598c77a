/* The byte-level tokenizer and `ctrainer data tokenize` (see cli/data.c).
 *
 * Every byte of a text is one token whose id is the byte's value, 0..255, so any file (UTF-8 or
 * not) round-trips exactly and no vocabulary file is needed. One more id, CT_BYTE_EOT = 256, marks
 * the end of a text (GPT-2's <|endoftext|>) when documents are separated: a model trained on such
 * data needs vocab_size 257 (CT_BYTE_VOCAB_EOT), otherwise 256 (CT_BYTE_VOCAB).
 *
 * Token files are what the "tokens" dataset reads (data/token_dataset.c): a flat little-endian
 * array of uint16 (bytes_per_token 2, the default) or uint32 ids, nothing else. */
#ifndef CT_TOKENIZER_H
#define CT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define CT_BYTE_VOCAB 256
#define CT_BYTE_EOT 256
#define CT_BYTE_VOCAB_EOT 257

/* ids[i] = bytes[i]. */
void ct_byte_encode(const unsigned char *bytes, size_t n, int64_t *ids);

/* The text of n ids into out (room for n bytes); end-of-text ids are dropped, so *out_len <= n.
 * An id outside [0, 256] is CT_ERR_INVALID_ARG naming it and its position. */
ct_status ct_byte_decode(const int64_t *ids, size_t n, unsigned char *out, size_t *out_len);

/* Copies n bytes of text into out (room for 3 n + 1) as valid UTF-8, NUL-terminated: each maximal
 * ill-formed subsequence becomes U+FFFD, as Python's bytes.decode("utf-8", errors="replace") does
 * (a model's bytes are not always UTF-8, and JSON needs it). Returns the length. */
size_t ct_utf8_sanitize(const unsigned char *in, size_t n, char *out);

typedef struct ct_tokenize_opts {
    const char *const *inputs; /* text files, tokenized in this order */
    int n_inputs;
    const char *output;     /* the training token file */
    const char *val_output; /* the validation token file, or NULL for none */
    /* With val_output: the share of each input, from its end, that goes to validation, in (0, 1).
     * The cut moves forward to the start of the next line (when the rest of the file has one), so
     * no line is split between the two; every input contributes to both files, which keeps them
     * alike when inputs differ in kind. */
    double val_fraction;
    int bytes_per_token; /* 2 or 4 (0: 2) */
    bool eot;            /* end every input's part with CT_BYTE_EOT (vocabulary 257) */
} ct_tokenize_opts;

typedef struct ct_tokenize_result {
    int64_t train_tokens, val_tokens;
    int64_t vocab_size; /* what a model of this data needs: 256, or 257 with eot */
} ct_tokenize_result;

/* Tokenizes the inputs into the output files, creating their directories, each written under a
 * temporary name and renamed when complete. Errors: an input that cannot be read (CT_ERR_IO
 * naming it), inputs without a single byte, or a split that leaves either file empty
 * (CT_ERR_INVALID_ARG), bad options (CT_ERR_INVALID_ARG), an output that cannot be written. */
ct_status ct_tokenize_files(const ct_tokenize_opts *o, ct_tokenize_result *result);

#endif
