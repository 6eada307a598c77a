/* Token-file dataset (see dataset.h): a flat little-endian array of uint16 or uint32 token ids,
 * memory-mapped read-only, cut into windows of `context` ids whose labels are the same window
 * shifted by one token (next-token prediction).
 *
 * The file is mapped rather than read so that corpora larger than memory work and every loader
 * worker shares the page cache; the mapping is never written, so fetching is thread-safe. Every
 * id is checked against vocab_size once at open, so a corrupt or mismatched file fails up front
 * with the position of the offending id instead of as an out-of-range embedding lookup mid-run. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/util.h"
#include "data/dataset.h"

typedef struct token_dataset {
    ct_dataset base;
    const unsigned char *map; /* the whole file */
    size_t map_bytes;
    int bytes_per_token;
    int64_t num_tokens;
    int64_t context, stride;
    int64_t num_samples;
    int64_t vocab_size; /* > 0: every id of the file was found below it at open */
} token_dataset;

/* Explicit little-endian assembly: correct on any host, and a plain load on x86 and ARM. */
static inline int64_t token_at(const token_dataset *td, int64_t i) {
    const unsigned char *p = td->map + (size_t)i * (size_t)td->bytes_per_token;
    if (td->bytes_per_token == 2) return (int64_t)((uint32_t)p[0] | (uint32_t)p[1] << 8);
    return (int64_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

static int64_t token_length(ct_dataset *ds) { return ct_container_of(ds, token_dataset, base)->num_samples; }

static ct_status token_get_batch(ct_dataset *ds, const int64_t *indices, int64_t n, const ct_fetch_ctx *ctx,
                                 ct_tensor *features, ct_tensor *labels) {
    (void)ctx; /* no randomness */
    token_dataset *td = ct_container_of(ds, token_dataset, base);
    const int64_t T = td->context;
    int64_t *x = features->data, *y = labels->data;
    for (int64_t r = 0; r < n; r++) {
        int64_t start = indices[r] * td->stride;
        /* Window [start, start + T] read once: ids 0..T-1 are features, 1..T labels. */
        int64_t prev = token_at(td, start);
        for (int64_t t = 0; t < T; t++) {
            int64_t next = token_at(td, start + t + 1);
            x[r * T + t] = prev;
            y[r * T + t] = next;
            prev = next;
        }
    }
    return CT_OK;
}

/* The labels of windows first..first+n-1 (tokens [i*stride + 1, i*stride + context]), each token
 * read once however the windows overlap; none when the whole file was checked against a vocabulary
 * no larger than the rule's classes at open. */
static ct_status token_check_labels(ct_dataset *ds, int64_t first, int64_t n, const ct_label_rule *rule) {
    token_dataset *td = ct_container_of(ds, token_dataset, base);
    if (td->vocab_size > 0 && td->vocab_size <= rule->classes) return CT_OK;
    const int64_t T = td->context, S = td->stride;
    int64_t done = 0; /* tokens below it were read with an earlier window */
    for (int64_t i = first; i < first + n; i++) {
        int64_t lo = i * S + 1, hi = i * S + T + 1;
        for (int64_t p = lo > done ? lo : done; p < hi; p++) {
            int64_t v = token_at(td, p);
            if (v < rule->classes) continue;
            char where[96];
            snprintf(where, sizeof where, " (element %lld, the token at position %lld)", (long long)(p - lo),
                     (long long)p);
            CT_TRY(ct_labels_check_i64(&v, 1, 1, i, ds->source, where, rule));
        }
        done = hi;
    }
    return CT_OK;
}

static void token_destroy(ct_dataset *ds) {
    token_dataset *td = ct_container_of(ds, token_dataset, base);
    if (td->map) munmap((void *)td->map, td->map_bytes);
    free(td);
}

static const ct_dataset_ops token_ops = {
    .size = sizeof(ct_dataset_ops),
    .name = "tokens",
    .length = token_length,
    .get_batch = token_get_batch,
    .destroy = token_destroy,
    .check_labels = token_check_labels,
};

/* The position of the first id >= vocab, or -1. The width is a constant in each call so the loop
 * compiles to plain loads; the scan touches every page of the file once. */
static inline int64_t scan_vocab(const unsigned char *p, int64_t count, int width, int64_t vocab) {
    for (int64_t i = 0; i < count; i++) {
        const unsigned char *q = p + (size_t)i * (size_t)width;
        uint32_t id = width == 2 ? (uint32_t)q[0] | (uint32_t)q[1] << 8
                                 : (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
        if ((int64_t)id >= vocab) return i;
    }
    return -1;
}

static int64_t first_out_of_vocab(const token_dataset *td, int64_t vocab) {
    return td->bytes_per_token == 2 ? scan_vocab(td->map, td->num_tokens, 2, vocab)
                                    : scan_vocab(td->map, td->num_tokens, 4, vocab);
}

ct_status ct_token_dataset_create(const ct_token_dataset_config *cfg, ct_dataset **out) {
    CT_ASSERT(cfg && out);
    *out = NULL;
    const char *path = cfg->path;
    if (!path || !*path) return ct_error(CT_ERR_INVALID_ARG, "token dataset: no file path given");
    if (cfg->bytes_per_token != 2 && cfg->bytes_per_token != 4)
        return ct_error(CT_ERR_INVALID_ARG, "%s: bytes_per_token %d is not supported (2 for uint16, 4 for uint32)",
                        path, cfg->bytes_per_token);
    if (cfg->context < 1)
        return ct_error(CT_ERR_INVALID_ARG, "%s: context %lld must be at least 1", path, (long long)cfg->context);
    if (cfg->stride < 0)
        return ct_error(CT_ERR_INVALID_ARG, "%s: stride %lld must be >= 0 (0 = context)", path, (long long)cfg->stride);
    const int64_t limit = (int64_t)1 << 39; /* keeps window arithmetic far from overflow */
    if (cfg->context > limit || cfg->stride > limit)
        return ct_error(CT_ERR_INVALID_ARG, "%s: context %lld or stride %lld exceeds 2^39", path,
                        (long long)cfg->context, (long long)cfg->stride);
    if (cfg->vocab_size < 0)
        return ct_error(CT_ERR_INVALID_ARG, "%s: vocab_size %lld must be >= 0 (0 = unchecked)", path,
                        (long long)cfg->vocab_size);

    int fd;
    CT_TRY(ct_open_read(path, &fd)); /* a regular file (mmap of a FIFO or device is no token file) */
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return ct_error(CT_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ct_error(CT_ERR_IO, "%s: not a regular file", path);
    }
    size_t bytes = (size_t)st.st_size;
    const int bpt = cfg->bytes_per_token;
    if (bytes % (size_t)bpt != 0) {
        close(fd);
        return ct_error(CT_ERR_FORMAT, "%s: size %zu bytes is not a multiple of %d bytes per token", path, bytes, bpt);
    }
    int64_t num_tokens = (int64_t)(bytes / (size_t)bpt);
    if (num_tokens < cfg->context + 1) {
        close(fd);
        return ct_error(CT_ERR_FORMAT,
                        "%s: the file has %lld tokens but needs at least context + 1 = %lld for one sample", path,
                        (long long)num_tokens, (long long)cfg->context + 1);
    }
    /* bytes > 0 here (num_tokens >= 2), so the mapping is well-defined. The descriptor is not needed
     * once the mapping exists. */
    void *map = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) return ct_error(CT_ERR_IO, "%s: cannot map %zu bytes: %s", path, bytes, strerror(map_errno));

    token_dataset *td = calloc(1, sizeof *td);
    if (!td) {
        munmap(map, bytes);
        return ct_error(CT_ERR_NOMEM, "%s: out of memory for the token dataset", path);
    }
    ct_dataset_base_init(&td->base, &token_ops);
    snprintf(td->base.source, sizeof td->base.source, "%s", path);
    td->map = map;
    td->map_bytes = bytes;
    td->bytes_per_token = bpt;
    td->num_tokens = num_tokens;
    td->context = cfg->context;
    td->stride = cfg->stride ? cfg->stride : cfg->context;
    td->num_samples = (num_tokens - td->context - 1) / td->stride + 1;
    td->vocab_size = cfg->vocab_size;

    if (cfg->vocab_size > 0) {
        /* One sequential pass: let the kernel read far ahead, then go back to normal read-ahead for
         * the shuffled windows of training. Both are hints; a failure is harmless. */
        madvise(map, bytes, MADV_SEQUENTIAL);
        int64_t bad = first_out_of_vocab(td, cfg->vocab_size);
        if (bad >= 0) {
            ct_status s =
                ct_error(CT_ERR_FORMAT, "%s: token id %lld at position %lld is outside the vocabulary [0, %lld)", path,
                         (long long)token_at(td, bad), (long long)bad, (long long)cfg->vocab_size);
            token_destroy(&td->base);
            return s;
        }
        madvise(map, bytes, MADV_NORMAL);
    }

    ct_sample_spec *sp = &td->base.spec;
    sp->feature_shape = (ct_shape){.ndim = 1, .dims = {td->context}};
    sp->feature_dtype = CT_I64;
    sp->label_shape = (ct_shape){.ndim = 1, .dims = {td->context}};
    sp->label_dtype = CT_I64;
    /* Every label is a class of the next-token softmax; known only when the vocabulary was given. */
    sp->num_classes = cfg->vocab_size;
    td->base.thread_safe = true;
    *out = &td->base;
    return CT_OK;
}
