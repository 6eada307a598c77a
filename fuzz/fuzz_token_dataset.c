/* Fuzz target: token files (data/token_dataset.c), the flat uint16/uint32 arrays language models
 * train on (`ctrainer data tokenize` writes them).
 *
 * Input: the configuration (bytes_per_token, context, stride, vocab_size: each a u8 choosing
 * among valid, boundary and invalid values, some taken from the input), then the file's bytes.
 * The file is opened (which maps it and checks every id against the vocabulary) and, when that
 * works, the first and last windows and a few from the input are fetched, as the loader does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "data/dataset.h"

/* Window length fetched at most (the configuration may ask for 2^39). */
#define MAX_CONTEXT ((int64_t)1 << 16)

static int64_t pick(fz_input *in, const int64_t *table, int n) {
    int k = fz_pick(in, n + 1);
    return k < n ? table[k] : (int64_t)fz_u64(in);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static bool ready;
    if (!ready) {
        fz_init();
        ready = true;
    }
    fz_input in = {data, size};
    static const int64_t widths[] = {2, 4, 0, 1, 3, 8};
    static const int64_t contexts[] = {1, 2, 3, 4, 7, 16, 0, -1, (int64_t)1 << 39, ((int64_t)1 << 39) + 1, INT64_MAX};
    static const int64_t strides[] = {0, 1, 2, 3, 5, 64, -1, (int64_t)1 << 39, ((int64_t)1 << 39) + 1, INT64_MIN};
    static const int64_t vocabs[] = {0, 1, 2, 10, 256, 257, 65535, 65536, 50257, -1, (int64_t)1 << 32};
    int bpt = (int)pick(&in, widths, 6);
    ct_token_dataset_config cfg = {.bytes_per_token = bpt,
                                   .context = pick(&in, contexts, 11),
                                   .stride = pick(&in, strides, 10),
                                   .vocab_size = pick(&in, vocabs, 11)};
    size_t n;
    const uint8_t *p = fz_rest(&in, &n);
    char path[512];
    fz_write_file(fz_path(path, sizeof path, "tokens.bin"), p, n);
    cfg.path = path;
    ct_dataset *ds = NULL;
    if (fz_report("ct_token_dataset_create", ct_token_dataset_create(&cfg, &ds)) == CT_OK) {
        int64_t len = ct_dataset_length(ds);
        ct_tensor f, l;
        if (len > 0 && cfg.context <= MAX_CONTEXT && ct_dataset_alloc_batch(ds, 4, &f, &l) == CT_OK) {
            int64_t idx[4] = {0, len - 1, len / 2, (int64_t)(n % (size_t)len)};
            fz_report("get_batch", ct_dataset_get_batch(ds, idx, 4, &(ct_fetch_ctx){.seed = 1}, &f, &l));
            /* windows are next-token pairs: labels are the features shifted by one */
            const int64_t *x = f.data, *y = l.data;
            for (int64_t t = 0; t + 1 < cfg.context; t++)
                if (y[t] != x[t + 1]) {
                    fprintf(stderr, "fuzz: window 0: label %lld at %lld is not feature %lld\n", (long long)y[t],
                            (long long)t, (long long)x[t + 1]);
                    abort();
                }
            ct_tensor_free(&f);
            ct_tensor_free(&l);
        }
        ct_dataset_free(ds);
    }
    ct_error_clear();
    return 0;
}
