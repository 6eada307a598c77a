/* Token-file datasets: random files of uint16 and uint32 ids read back window by window (features
 * the window, labels the window shifted by one), the sample count for random sizes, contexts and
 * strides against the formula, and bad input (missing, odd-sized, too short, ids outside the
 * vocabulary, bad arguments) rejected with messages that name the file and the numbers. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/rng.h"
#include "data/dataset.h"
#include "testlib.h"

static char path[] = "/tmp/ct_tokens_XXXXXX";

/* Writes ids little-endian with `width` bytes each (plus `extra` stray bytes). */
static void write_tokens(const uint32_t *ids, int64_t n, int width, int extra) {
    FILE *f = fopen(path, "wb");
    for (int64_t i = 0; i < n; i++) {
        unsigned char b[4] = {(unsigned char)ids[i], (unsigned char)(ids[i] >> 8), (unsigned char)(ids[i] >> 16),
                              (unsigned char)(ids[i] >> 24)};
        fwrite(b, 1, (size_t)width, f);
    }
    for (int i = 0; i < extra; i++) fputc(0x5A, f);
    fclose(f);
}

static uint32_t *random_ids(ct_rng *r, int64_t n, int width, uint32_t vocab) {
    uint32_t *ids = malloc((size_t)(n > 0 ? n : 1) * sizeof *ids);
    for (int64_t i = 0; i < n; i++) {
        uint32_t v = width == 2 ? (ct_rng_u32(r) & 0xFFFFu) : ct_rng_u32(r);
        ids[i] = vocab ? v % vocab : v;
    }
    return ids;
}

static int64_t expected_samples(int64_t n, int64_t context, int64_t stride) {
    return n >= context + 1 ? (n - context - 1) / stride + 1 : 0;
}

/* Every sample of random files equals its window of the source, fetched in shuffled batches. */
static void windows_match_source(void) {
    ct_rng r;
    ct_rng_init(&r, ct_test_seed, 0, CT_RNG_USER);
    for (int trial = 0; trial < 16; trial++) {
        int width = trial % 2 ? 4 : 2;
        int64_t context = 1 + (int64_t)ct_rng_below(&r, 24);
        int64_t stride = (int64_t)ct_rng_below(&r, 2 * (uint64_t)context + 1); /* 0 = context */
        int64_t n = context + 1 + (int64_t)ct_rng_below(&r, 400);
        uint32_t *ids = random_ids(&r, n, width, 0);
        /* The extremes of each width, to catch sign or byte-order slips. */
        ids[0] = width == 2 ? 0xFFFFu : 0xFFFFFFFFu;
        ids[n - 1] = width == 2 ? 0x8001u : 0x80000001u;
        write_tokens(ids, n, width, 0);
        ct_token_dataset_config cfg = {.path = path, .bytes_per_token = width, .context = context, .stride = stride};
        ct_dataset *ds;
        CHECK_OK(ct_token_dataset_create(&cfg, &ds));
        if (!ds) {
            free(ids);
            continue;
        }
        int64_t eff = stride ? stride : context;
        int64_t len = ct_dataset_length(ds);
        CHECK(len == expected_samples(n, context, eff), "n=%lld T=%lld stride=%lld: %lld samples, want %lld",
              (long long)n, (long long)context, (long long)stride, (long long)len,
              (long long)expected_samples(n, context, eff));
        const ct_sample_spec *sp = &ds->spec;
        CHECK(sp->feature_shape.ndim == 1 && sp->feature_shape.dims[0] == context && sp->feature_dtype == CT_I64 &&
                  sp->label_shape.ndim == 1 && sp->label_shape.dims[0] == context && sp->label_dtype == CT_I64 &&
                  sp->num_classes == 0 && ds->thread_safe,
              "spec of a token dataset with context %lld", (long long)context);
        /* All samples, in a random order, batched with random sizes (duplicates included). */
        int64_t *order = malloc((size_t)(len + 1) * sizeof *order);
        for (int64_t i = 0; i < len; i++) order[i] = i;
        for (int64_t i = len - 1; i > 0; i--) {
            int64_t j = (int64_t)ct_rng_below(&r, (uint64_t)i + 1), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        order[len] = order[0];
        ct_tensor f, l;
        CHECK_OK(ct_dataset_alloc_batch(ds, 9, &f, &l));
        int64_t bad = 0, last_window_end = 0;
        for (int64_t at = 0; at < len + 1;) {
            int64_t b = 1 + (int64_t)ct_rng_below(&r, 9);
            if (b > len + 1 - at) b = len + 1 - at;
            ct_fetch_ctx ctx = {.seed = ct_rng_u64(&r), .epoch = ct_rng_below(&r, 5)};
            CHECK_OK(ct_dataset_get_batch(ds, order + at, b, &ctx, &f, &l));
            const int64_t *x = f.data, *y = l.data;
            for (int64_t k = 0; k < b; k++) {
                int64_t start = order[at + k] * eff;
                for (int64_t t = 0; t < context; t++) {
                    bad += x[k * context + t] != (int64_t)ids[start + t];
                    bad += y[k * context + t] != (int64_t)ids[start + t + 1];
                }
                if (start + context + 1 > last_window_end) last_window_end = start + context + 1;
            }
            at += b;
        }
        CHECK(bad == 0, "width %d, T=%lld, stride=%lld: %lld fetched ids differ from the file", width,
              (long long)context, (long long)eff, (long long)bad);
        /* The last sample is the last window that fits: fewer than `stride` tokens are left unused. */
        CHECK(last_window_end <= n && n - last_window_end < eff,
              "last window ends at %lld of %lld tokens (stride %lld)", (long long)last_window_end, (long long)n,
              (long long)eff);
        int64_t past[1] = {len};
        CHECK_ERR(ct_dataset_get_batch(ds, past, 1, NULL, &f, &l), CT_ERR_INVALID_ARG, path, "outside");
        ct_tensor_free(&f);
        ct_tensor_free(&l);
        free(order);
        ct_dataset_free(ds);
        free(ids);
    }
}

/* The sample count over many random sizes, contexts and strides, including the boundary n = T + 1. */
static void sample_counts(void) {
    ct_rng r;
    ct_rng_init(&r, ct_test_seed, 1, CT_RNG_USER);
    int bad = 0;
    for (int trial = 0; trial < 200; trial++) {
        int width = ct_rng_below(&r, 2) ? 4 : 2;
        int64_t context = 1 + (int64_t)ct_rng_below(&r, 64);
        int64_t stride = 1 + (int64_t)ct_rng_below(&r, 100);
        int64_t n = trial % 4 == 0 ? context + 1 : context + 1 + (int64_t)ct_rng_below(&r, 1000);
        uint32_t *ids = random_ids(&r, n, width, 50);
        write_tokens(ids, n, width, 0);
        free(ids);
        ct_token_dataset_config cfg = {
            .path = path, .bytes_per_token = width, .context = context, .stride = stride, .vocab_size = 50};
        ct_dataset *ds;
        ct_status s = ct_token_dataset_create(&cfg, &ds);
        CHECK(s == CT_OK, "create: %s", ct_last_error());
        if (s != CT_OK) continue;
        int64_t want = expected_samples(n, context, stride);
        if (ct_dataset_length(ds) != want) {
            bad++;
            printf("n=%lld T=%lld stride=%lld: %lld samples, want %lld\n", (long long)n, (long long)context,
                   (long long)stride, (long long)ct_dataset_length(ds), (long long)want);
        }
        CHECK(ds->spec.num_classes == 50, "num_classes is the vocabulary size");
        ct_dataset_free(ds);
    }
    CHECK(bad == 0, "%d sample counts differ from floor((n - T - 1) / stride) + 1", bad);
}

static void bad_inputs(void) {
    ct_rng r;
    ct_rng_init(&r, ct_test_seed, 2, CT_RNG_USER);
    ct_dataset *ds = (ct_dataset *)&r; /* must be reset to NULL on failure */
    ct_token_dataset_config cfg = {.path = "/nonexistent/dir/tokens.bin", .bytes_per_token = 2, .context = 8};
    CHECK_ERR(ct_token_dataset_create(&cfg, &ds), CT_ERR_IO, "/nonexistent/dir/tokens.bin", "cannot open");
    CHECK(ds == NULL, "out is NULL after a failure");

    /* Odd size: 2-byte tokens plus one stray byte; 4-byte tokens plus 1..3 bytes. */
    uint32_t *ids = random_ids(&r, 100, 4, 1000);
    write_tokens(ids, 100, 2, 1);
    cfg = (ct_token_dataset_config){.path = path, .bytes_per_token = 2, .context = 8};
    CHECK_ERR(ct_token_dataset_create(&cfg, &ds), CT_ERR_FORMAT, path, "size 201 bytes", "multiple of 2");
    int extra = 1 + (int)ct_rng_below(&r, 3);
    write_tokens(ids, 100, 4, extra);
    cfg.bytes_per_token = 4;
    char size[64];
    snprintf(size, sizeof size, "size %d bytes", 400 + extra);
    CHECK_ERR(ct_token_dataset_create(&cfg, &ds), CT_ERR_FORMAT, path, size, "multiple of 4");

    /* Too short: exactly T tokens (one short of a sample with its label), and an empty file. */
    write_tokens(ids, 8, 4, 0);
    CHECK_ERR(ct_token_dataset_create(&cfg, &ds), CT_ERR_FORMAT, path, "has 8 tokens", "at least context + 1 = 9");
    write_tokens(ids, 0, 4, 0);
    CHECK_ERR(ct_token_dataset_create(&cfg, &ds), CT_ERR_FORMAT, path, "has 0 tokens", "= 9");
    write_tokens(ids, 9, 4, 0);
    CHECK_OK(ct_token_dataset_create(&cfg, &ds));
    CHECK(ds && ct_dataset_length(ds) == 1, "T + 1 tokens make exactly one sample");
    ct_dataset_free(ds);

    /* An id outside the vocabulary at a random position; the first offender is reported. */
    for (int width = 2; width <= 4; width += 2) {
        int64_t pos = (int64_t)ct_rng_below(&r, 90);
        uint32_t saved = ids[pos], saved2 = ids[pos + 5];
        ids[pos] = 1000 + (uint32_t)ct_rng_below(&r, 5000);
        ids[pos + 5] = 60000; /* a later offender must not be the one reported */
        write_tokens(ids, 100, width, 0);
        cfg = (ct_token_dataset_config){.path = path, .bytes_per_token = width, .context = 8, .vocab_size = 1000};
        char id[64], at[64];
        snprintf(id, sizeof id, "token id %u", ids[pos]);
        snprintf(at, sizeof at, "at position %lld", (long long)pos);
        CHECK_ERR(ct_token_dataset_create(&cfg, &ds), CT_ERR_FORMAT, path, id, at, "[0, 1000)");
        /* The vocabulary check is off with vocab_size 0, and an exact fit passes. */
        cfg.vocab_size = 0;
        CHECK_OK(ct_token_dataset_create(&cfg, &ds));
        ct_dataset_free(ds);
        ids[pos] = saved;
        ids[pos + 5] = saved2;
        uint32_t max_id = 0;
        for (int i = 0; i < 100; i++) max_id = ids[i] > max_id ? ids[i] : max_id;
        write_tokens(ids, 100, width, 0);
        cfg.vocab_size = max_id + 1;
        CHECK_OK(ct_token_dataset_create(&cfg, &ds));
        ct_dataset_free(ds);
        cfg.vocab_size = max_id;
        snprintf(id, sizeof id, "token id %u", max_id);
        CHECK_ERR(ct_token_dataset_create(&cfg, &ds), CT_ERR_FORMAT, path, id);
    }

    /* Arguments. */
    write_tokens(ids, 100, 2, 0);
    cfg = (ct_token_dataset_config){.path = path, .bytes_per_token = 3, .context = 8};
    CHECK_ERR(ct_token_dataset_create(&cfg, &ds), CT_ERR_INVALID_ARG, path, "bytes_per_token 3");
    cfg = (ct_token_dataset_config){.path = path, .bytes_per_token = 2, .context = 0};
    CHECK_ERR(ct_token_dataset_create(&cfg, &ds), CT_ERR_INVALID_ARG, path, "context 0");
    cfg = (ct_token_dataset_config){.path = path, .bytes_per_token = 2, .context = 4, .stride = -1};
    CHECK_ERR(ct_token_dataset_create(&cfg, &ds), CT_ERR_INVALID_ARG, path, "stride -1");
    cfg = (ct_token_dataset_config){.path = path, .bytes_per_token = 2, .context = 4, .vocab_size = -5};
    CHECK_ERR(ct_token_dataset_create(&cfg, &ds), CT_ERR_INVALID_ARG, path, "vocab_size -5");
    cfg = (ct_token_dataset_config){.path = NULL, .bytes_per_token = 2, .context = 4};
    CHECK_ERR(ct_token_dataset_create(&cfg, &ds), CT_ERR_INVALID_ARG, "token dataset", "path");
    cfg = (ct_token_dataset_config){.path = "/tmp", .bytes_per_token = 2, .context = 4};
    CHECK_ERR(ct_token_dataset_create(&cfg, &ds), CT_ERR_IO, "/tmp");
    free(ids);
}

int main(void) {
    ct_test_begin("test_token_dataset");
    int fd = mkstemp(path);
    if (fd < 0) {
        printf("cannot create a temporary file\n");
        return 1;
    }
    close(fd);
    windows_match_source();
    sample_counts();
    bad_inputs();
    unlink(path);
    return ct_test_finish();
}
