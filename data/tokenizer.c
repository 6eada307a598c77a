/* The byte-level tokenizer and token-file writer (see tokenizer.h). Inputs are read whole (text
 * corpora for this tokenizer are small next to memory) and checked before any output is opened, so
 * a missing or empty input leaves no half-written file behind. */
#include "data/tokenizer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"

void ct_byte_encode(const unsigned char *bytes, size_t n, int64_t *ids) {
    for (size_t i = 0; i < n; i++) ids[i] = bytes[i];
}

ct_status ct_byte_decode(const int64_t *ids, size_t n, unsigned char *out, size_t *out_len) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] == CT_BYTE_EOT) continue;
        if (ids[i] < 0 || ids[i] > CT_BYTE_EOT)
            return ct_error(CT_ERR_INVALID_ARG, "byte decode: id %lld at position %zu is not a byte (0..255) or the "
                            "end-of-text id 256", (long long)ids[i], i);
        out[k++] = (unsigned char)ids[i];
    }
    *out_len = k;
    return CT_OK;
}

/* Length of the well-formed UTF-8 sequence at s[0..n), or of its maximal ill-formed prefix as a
 * negative number (at least 1 byte): Unicode's "maximal subpart" rule (chapter 3, U+FFFD
 * substitution), which Python's errors="replace" follows too. */
static int utf8_sequence(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    int len;
    unsigned char lo = 0x80, hi = 0xBF; /* the range of the second byte */
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return -1;
    for (int i = 1; i < len; i++) {
        unsigned char b = (size_t)i < n ? s[i] : 0;
        bool ok = (size_t)i < n && (i == 1 ? b >= lo && b <= hi : b >= 0x80 && b <= 0xBF);
        if (!ok) return -i;
    }
    return len;
}

size_t ct_utf8_sanitize(const unsigned char *in, size_t n, char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        int len = utf8_sequence(in + i, n - i);
        if (len > 0) {
            memcpy(out + k, in + i, (size_t)len);
            k += (size_t)len;
            i += (size_t)len;
        } else {
            memcpy(out + k, "\xEF\xBF\xBD", 3); /* U+FFFD */
            k += 3;
            i += (size_t)-len;
        }
    }
    out[k] = '\0';
    return k;
}

/* --- reading ------------------------------------------------------------------------------------- */

typedef struct text {
    unsigned char *data;
    size_t len;
    size_t cut; /* bytes [0, cut) go to training, [cut, len) to validation */
} text;

/* The whole file: a regular one (a FIFO could block for ever). */
static ct_status read_all(const char *path, text *t) {
    FILE *f;
    CT_TRY(ct_fopen_read(path, &f));
    size_t cap = 1 << 16, len = 0;
    unsigned char *buf = malloc(cap);
    ct_status s = CT_OK;
    for (;;) {
        if (!buf) {
            s = ct_error(CT_ERR_NOMEM, "%s: out of memory reading it", path);
            break;
        }
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap) break;
        unsigned char *grown = realloc(buf, cap * 2);
        if (!grown) free(buf);
        buf = grown;
        cap *= 2;
    }
    if (s == CT_OK && ferror(f)) s = ct_error(CT_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    fclose(f);
    if (s != CT_OK) {
        free(buf);
        return s;
    }
    t->data = buf;
    t->len = len;
    return CT_OK;
}

/* Where validation starts: the nominal point, moved to the start of the next line when one
 * begins before the end of the file. */
static size_t split_point(const text *t, double val_fraction) {
    size_t nominal = t->len - (size_t)llround((double)t->len * val_fraction);
    if (nominal == 0 || nominal >= t->len || t->data[nominal - 1] == '\n') return nominal;
    const unsigned char *nl = memchr(t->data + nominal, '\n', t->len - nominal);
    if (nl && (size_t)(nl - t->data) + 1 < t->len) return (size_t)(nl - t->data) + 1;
    return nominal;
}

/* --- writing ------------------------------------------------------------------------------------- */

typedef struct writer {
    const char *path;
    ct_atomic_file a; /* the token file, committed whole (core/fs.h) */
    bool open;        /* a holds a temporary: commit or abort it */
    int bpt;
    int64_t tokens;
} writer;

static ct_status writer_open(writer *w, const char *path, int bpt) {
    memset(w, 0, sizeof *w);
    w->path = path;
    w->bpt = bpt;
    char *dir = strdup(path);
    if (!dir) return ct_error(CT_ERR_NOMEM, "%s: out of memory", path);
    char *slash = strrchr(dir, '/');
    ct_status s = CT_OK;
    if (slash && slash != dir) {
        *slash = '\0';
        s = ct_make_dirs(dir);
    }
    free(dir);
    CT_TRY(s);
    s = ct_atomic_file_open(&w->a, path);
    if (s != CT_OK) return ct_error_prefix(s, "%s: ", path);
    w->open = true;
    return CT_OK;
}

/* Appends the ids of bytes (and an end-of-text id), little-endian, through a fixed chunk buffer. */
static ct_status writer_put(writer *w, const unsigned char *bytes, size_t n, bool eot) {
    unsigned char chunk[1 << 16];
    const size_t per = sizeof chunk / 4;
    for (size_t i = 0; i < n || eot;) {
        size_t k = 0, bytes_out = 0;
        for (; k < per && (i < n || eot); k++) {
            uint32_t id = i < n ? bytes[i++] : (eot = false, (uint32_t)CT_BYTE_EOT);
            for (int b = 0; b < w->bpt; b++) chunk[bytes_out++] = (unsigned char)(id >> (8 * b));
        }
        CT_TRY(ct_atomic_file_write(&w->a, chunk, bytes_out));
        w->tokens += (int64_t)k;
    }
    return CT_OK;
}

static ct_status writer_commit(writer *w) {
    ct_status s = ct_atomic_file_commit(&w->a);
    if (s != CT_OK) return s; /* writer_abort removes the temporary */
    w->open = false;
    return CT_OK;
}

static void writer_abort(writer *w) {
    if (w->open) ct_atomic_file_discard(&w->a);
    memset(w, 0, sizeof *w);
}

/* --- the whole job ------------------------------------------------------------------------------- */

static ct_status check_opts(const ct_tokenize_opts *o) {
    if (o->n_inputs < 1 || !o->inputs) return ct_error(CT_ERR_INVALID_ARG, "tokenize: no input files");
    if (!o->output || !o->output[0]) return ct_error(CT_ERR_INVALID_ARG, "tokenize: no output file");
    if (o->bytes_per_token != 0 && o->bytes_per_token != 2 && o->bytes_per_token != 4)
        return ct_error(CT_ERR_INVALID_ARG, "tokenize: bytes_per_token %d (2 for uint16 ids, 4 for uint32)",
                        o->bytes_per_token);
    if (o->val_output) {
        if (!o->val_output[0]) return ct_error(CT_ERR_INVALID_ARG, "tokenize: empty validation output path");
        if (!(o->val_fraction > 0 && o->val_fraction < 1))
            return ct_error(CT_ERR_INVALID_ARG, "tokenize: val_fraction %g must be in (0, 1) with a validation output",
                            o->val_fraction);
        if (strcmp(o->val_output, o->output) == 0)
            return ct_error(CT_ERR_INVALID_ARG, "tokenize: the training and validation outputs are both '%s'",
                            o->output);
    } else if (o->val_fraction != 0) {
        return ct_error(CT_ERR_INVALID_ARG, "tokenize: val_fraction %g given without a validation output",
                        o->val_fraction);
    }
    return CT_OK;
}

static ct_status write_all(const ct_tokenize_opts *o, const text *texts, ct_tokenize_result *r) {
    const int bpt = o->bytes_per_token ? o->bytes_per_token : 2;
    writer train, val = {0};
    CT_TRY(writer_open(&train, o->output, bpt));
    ct_status s = o->val_output ? writer_open(&val, o->val_output, bpt) : CT_OK;
    for (int i = 0; s == CT_OK && i < o->n_inputs; i++) {
        const text *t = &texts[i];
        if (t->cut > 0) s = writer_put(&train, t->data, t->cut, o->eot);
        if (s == CT_OK && t->len > t->cut) s = writer_put(&val, t->data + t->cut, t->len - t->cut, o->eot);
    }
    if (s == CT_OK) s = writer_commit(&train);
    if (s == CT_OK && o->val_output) s = writer_commit(&val);
    if (s != CT_OK) {
        writer_abort(&train);
        writer_abort(&val);
        return s;
    }
    r->train_tokens = train.tokens;
    r->val_tokens = val.tokens;
    return CT_OK;
}

ct_status ct_tokenize_files(const ct_tokenize_opts *o, ct_tokenize_result *result) {
    CT_ASSERT(o && result);
    memset(result, 0, sizeof *result);
    CT_TRY(check_opts(o));
    text *texts = calloc((size_t)o->n_inputs, sizeof *texts);
    if (!texts) return ct_error(CT_ERR_NOMEM, "tokenize: out of memory");
    ct_status s = CT_OK;
    size_t total = 0, train_bytes = 0;
    for (int i = 0; s == CT_OK && i < o->n_inputs; i++) {
        s = read_all(o->inputs[i], &texts[i]);
        if (s != CT_OK) break;
        texts[i].cut = o->val_output ? split_point(&texts[i], o->val_fraction) : texts[i].len;
        total += texts[i].len;
        train_bytes += texts[i].cut;
    }
    if (s == CT_OK && total == 0)
        s = ct_error(CT_ERR_INVALID_ARG, "tokenize: no text: %s empty", o->n_inputs == 1 ? "the input is" :
                     "every input is");
    if (s == CT_OK && o->val_output && (train_bytes == 0 || train_bytes == total))
        s = ct_error(CT_ERR_INVALID_ARG, "tokenize: val_fraction %g of %zu bytes leaves the %s part empty",
                     o->val_fraction, total, train_bytes == 0 ? "training" : "validation");
    if (s == CT_OK) s = write_all(o, texts, result);
    if (s == CT_OK) result->vocab_size = o->eot ? CT_BYTE_VOCAB_EOT : CT_BYTE_VOCAB;
    for (int i = 0; i < o->n_inputs; i++) free(texts[i].data);
    free(texts);
    return s;
}
