/* The byte-level tokenizer and ct_tokenize_files (data/tokenizer.h): random binary and text files
 * (every byte value, 0 and 255 included) go to token files and come back byte for byte, in uint16
 * and uint32, with and without end-of-text ids and a validation split (cut at line starts, every
 * file in both parts); the token dataset reads what was written; errors (a missing input, empty
 * inputs, bad options) leave no output behind. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/dataset.h"
#include "data/tokenizer.h"
#include "testlib.h"

static ct_rng rng;
static char dir[256];

static void write_file(const char *path, const unsigned char *data, size_t n) {
    FILE *f = fopen(path, "wb");
    CT_ASSERT(f);
    CT_ASSERT(fwrite(data, 1, n, f) == n);
    fclose(f);
}

/* The ids of a token file of the given width. */
static int64_t *read_tokens(const char *path, int bpt, size_t *n) {
    size_t bytes;
    unsigned char *raw = (unsigned char *)ct_test_read_file(path, &bytes);
    *n = 0;
    if (!raw) return NULL;
    *n = bytes / (size_t)bpt;
    int64_t *ids = malloc((*n + 1) * sizeof *ids);
    for (size_t i = 0; i < *n; i++) {
        uint32_t v = 0;
        for (int b = 0; b < bpt; b++) v |= (uint32_t)raw[i * (size_t)bpt + (size_t)b] << (8 * b);
        ids[i] = v;
    }
    free(raw);
    return ids;
}

/* Random content: binary (every value) or text-like lines. */
static unsigned char *random_content(size_t n, bool text) {
    unsigned char *p = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        p[i] = text ? (ct_rng_below(&rng, 12) == 0 ? '\n' : (unsigned char)(32 + ct_rng_below(&rng, 95)))
                    : (unsigned char)ct_rng_below(&rng, 256);
    if (!text && n >= 2) {
        p[0] = 0;
        p[n - 1] = 255;
    }
    return p;
}

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* No temporary file (".tmp" in its name) is left in the directory. */
static int leftovers(const char *d) {
    DIR *dd = opendir(d);
    if (!dd) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dd))) n += strstr(e->d_name, ".tmp") != NULL;
    closedir(dd);
    return n;
}

static void round_trip(int rep) {
    enum { N_FILES = 3 };
    char paths[N_FILES][300];
    const char *inputs[N_FILES];
    unsigned char *content[N_FILES];
    size_t len[N_FILES], total = 0;
    bool text = rep % 2 == 0;
    for (int i = 0; i < N_FILES; i++) {
        len[i] = 50 + (size_t)ct_rng_below(&rng, 3000);
        content[i] = random_content(len[i], text);
        snprintf(paths[i], sizeof paths[i], "%s/in%d.txt", dir, i);
        write_file(paths[i], content[i], len[i]);
        inputs[i] = paths[i];
        total += len[i];
    }
    char train[300], val[300];
    snprintf(train, sizeof train, "%s/out%d/sub/train.bin", dir, rep);
    snprintf(val, sizeof val, "%s/out%d/val.bin", dir, rep);
    bool split = rep % 3 != 0, eot = rep % 4 < 2;
    int bpt = rep % 2 ? 4 : 2;
    ct_tokenize_opts o = {.inputs = inputs, .n_inputs = N_FILES, .output = train, .val_output = split ? val : NULL,
                          .val_fraction = split ? 0.05 + 0.4 * ct_rng_uniform(&rng) : 0, .bytes_per_token = bpt,
                          .eot = eot};
    ct_tokenize_result r;
    CHECK_OK(ct_tokenize_files(&o, &r));
    CHECK(r.vocab_size == (eot ? 257 : 256), "vocabulary %lld", (long long)r.vocab_size);
    size_t nt, nv = 0;
    int64_t *t = read_tokens(train, bpt, &nt), *v = split ? read_tokens(val, bpt, &nv) : NULL;
    CHECK(t != NULL && (!split || v != NULL), "the token files exist (directories created)");
    if (!t || (split && !v)) return;
    size_t eots = eot ? N_FILES : 0;
    CHECK(nt + nv == total + eots * (split ? 2 : 1), "%zu + %zu tokens for %zu bytes", nt, nv, total);
    CHECK((int64_t)nt == r.train_tokens && (int64_t)nv == r.val_tokens, "the counts reported are the files'");
    /* The expected files from the documented rule: validation gets the last val_fraction of every
     * input, its start moved to the next line start when one begins before the end. */
    int64_t *want_t = malloc((total + N_FILES) * sizeof *want_t), *want_v = malloc((total + N_FILES) * sizeof *want_v);
    size_t kt = 0, kv = 0;
    int bad_cut = 0;
    for (int i = 0; i < N_FILES; i++) {
        size_t cut = len[i];
        if (split) {
            cut = len[i] - (size_t)llround((double)len[i] * o.val_fraction);
            if (cut > 0 && content[i][cut - 1] != '\n') {
                const unsigned char *nl = memchr(content[i] + cut, '\n', len[i] - cut);
                if (nl && (size_t)(nl - content[i]) + 1 < len[i]) cut = (size_t)(nl - content[i]) + 1;
            }
            bad_cut += cut == 0 || cut == len[i];
        }
        ct_byte_encode(content[i], cut, want_t + kt);
        kt += cut;
        if (eot) want_t[kt++] = CT_BYTE_EOT;
        if (split) {
            ct_byte_encode(content[i] + cut, len[i] - cut, want_v + kv);
            kv += len[i] - cut;
            if (eot) want_v[kv++] = CT_BYTE_EOT;
        }
    }
    CHECK(bad_cut == 0, "%d files were not split into two non-empty parts", bad_cut);
    CHECK(nt == kt && memcmp(t, want_t, kt * sizeof *t) == 0, "training tokens differ from the inputs' bytes (rep %d)",
          rep);
    CHECK(nv == kv && (kv == 0 || memcmp(v, want_v, kv * sizeof *v) == 0),
          "validation tokens differ from the inputs' bytes (rep %d)", rep);
    /* ...and decoding both files gives back the inputs, concatenated. */
    unsigned char *back = malloc(nt + nv + 1), *whole = malloc(total + 1);
    size_t got_t, got_v = 0, k = 0;
    CHECK_OK(ct_byte_decode(t, nt, back, &got_t));
    if (split) CHECK_OK(ct_byte_decode(v, nv, back + got_t, &got_v));
    if (!split) {
        for (int i = 0; i < N_FILES; i++, k += len[i - 1]) memcpy(whole + k, content[i], len[i]);
        CHECK(got_t == total && memcmp(back, whole, total) == 0, "decode(encode(files)) is the files (rep %d)", rep);
    } else {
        CHECK(got_t + got_v == total, "decoded %zu + %zu bytes of %zu", got_t, got_v, total);
    }
    free(back);
    free(whole);
    free(want_t);
    free(want_v);

    /* The token dataset reads the training file: window 0 is its first context + 1 ids. */
    int64_t context = 16;
    ct_token_dataset_config dc = {.path = train, .bytes_per_token = bpt, .context = context,
                                  .vocab_size = r.vocab_size};
    ct_dataset *ds;
    CHECK_OK(ct_token_dataset_create(&dc, &ds));
    if (ds) {
        ct_tensor f, l;
        CHECK_OK(ct_dataset_alloc_batch(ds, 1, &f, &l));
        int64_t idx = 0;
        CHECK_OK(ct_dataset_get_batch(ds, &idx, 1, &(ct_fetch_ctx){0}, &f, &l));
        CHECK(memcmp(f.data, t, (size_t)context * sizeof(int64_t)) == 0 &&
                  memcmp(l.data, t + 1, (size_t)context * sizeof(int64_t)) == 0,
              "the token dataset reads the written ids");
        ct_tensor_free(&f);
        ct_tensor_free(&l);
        ct_dataset_free(ds);
    }
    for (int i = 0; i < N_FILES; i++) free(content[i]);
    free(t);
    free(v);
}

static void errors(void) {
    char a[300], empty[300], out[300], missing[300], sub[300];
    snprintf(a, sizeof a, "%s/a.txt", dir);
    snprintf(empty, sizeof empty, "%s/empty.txt", dir);
    snprintf(out, sizeof out, "%s/err/out.bin", dir);
    snprintf(missing, sizeof missing, "%s/no-such-file.txt", dir);
    snprintf(sub, sizeof sub, "%s/err", dir);
    write_file(a, (const unsigned char *)"hello\nworld\n", 12);
    write_file(empty, (const unsigned char *)"", 0);
    const char *two[] = {a, missing};
    ct_tokenize_opts o = {.inputs = two, .n_inputs = 2, .output = out};
    ct_tokenize_result r;
    CHECK_ERR(ct_tokenize_files(&o, &r), CT_ERR_IO, "no-such-file.txt: cannot open: No such file");
    CHECK(!exists(out) && !exists(sub), "a missing input leaves no output (and no directory) behind");
    const char *empties[] = {empty, empty};
    o.inputs = empties;
    CHECK_ERR(ct_tokenize_files(&o, &r), CT_ERR_INVALID_ARG, "no text", "every input is empty");
    CHECK(!exists(out), "empty inputs leave no output behind");
    const char *one[] = {a};
    o.inputs = one;
    o.n_inputs = 1;
    o.bytes_per_token = 3;
    CHECK_ERR(ct_tokenize_files(&o, &r), CT_ERR_INVALID_ARG, "bytes_per_token 3");
    o.bytes_per_token = 2;
    o.val_fraction = 0.2;
    CHECK_ERR(ct_tokenize_files(&o, &r), CT_ERR_INVALID_ARG, "without a validation output");
    o.val_output = out;
    CHECK_ERR(ct_tokenize_files(&o, &r), CT_ERR_INVALID_ARG, "both");
    char val[300];
    snprintf(val, sizeof val, "%s/err/val.bin", dir);
    o.val_output = val;
    o.val_fraction = 1.0;
    CHECK_ERR(ct_tokenize_files(&o, &r), CT_ERR_INVALID_ARG, "val_fraction 1 must be in (0, 1)");
    /* 1 byte: one of the two parts is necessarily empty. */
    char tiny[300];
    snprintf(tiny, sizeof tiny, "%s/tiny.txt", dir);
    write_file(tiny, (const unsigned char *)"x", 1);
    const char *tinies[] = {tiny};
    o.inputs = tinies;
    o.val_fraction = 0.1;
    CHECK_ERR(ct_tokenize_files(&o, &r), CT_ERR_INVALID_ARG, "leaves the validation part empty");
    o.inputs = one;
    o.output = "/proc/self/no/such/dir/out.bin";
    o.val_output = NULL;
    o.val_fraction = 0;
    CHECK(ct_tokenize_files(&o, &r) == CT_ERR_IO, "an output that cannot be created is an I/O error: %s",
          ct_last_error());
    CHECK(leftovers(sub) == 0, "no temporary files are left");

    int64_t ids[] = {104, 256, 105, 300};
    unsigned char back[4];
    size_t n;
    CHECK_OK(ct_byte_decode(ids, 3, back, &n));
    CHECK(n == 2 && back[0] == 'h' && back[1] == 'i', "decode drops end-of-text ids");
    CHECK_ERR(ct_byte_decode(ids, 4, back, &n), CT_ERR_INVALID_ARG, "id 300 at position 3");
    int64_t neg = -1;
    CHECK_ERR(ct_byte_decode(&neg, 1, back, &n), CT_ERR_INVALID_ARG, "id -1");
    unsigned char all[256];
    int64_t enc[256];
    for (int i = 0; i < 256; i++) all[i] = (unsigned char)i;
    ct_byte_encode(all, 256, enc);
    int wrong = 0;
    for (int i = 0; i < 256; i++) wrong += enc[i] != i;
    CHECK(wrong == 0, "every byte encodes to its value");
}

int main(void) {
    ct_test_begin("test_tokenize");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    snprintf(dir, sizeof dir, "/tmp/ct_test_tokenize_XXXXXX");
    if (!mkdtemp(dir)) {
        printf("cannot create a temporary directory\n");
        return 1;
    }
    for (int rep = 0; rep < 12; rep++) round_trip(rep);
    errors();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("could not remove %s\n", dir);
    return ct_test_finish();
}
