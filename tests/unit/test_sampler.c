/* Samplers: the properties distributed training and resumption stand on. For world sizes 1..5,
 * dataset sizes that batches do not divide, with and without drop_last and shuffling: every sample
 * exactly once per epoch over all ranks (with drop_last: all but exactly the dropped tail of the
 * epoch's order); the concatenated rank slices of each global batch give the same sequence for every
 * world size; orders differ between epochs and seeds and repeat for the same (seed, epoch); the
 * shuffle is uniform (all permutations of 4 equally likely). Evaluation shards: every sample exactly
 * once with mask 1, equal batch counts on all ranks, padding rows with mask 0 and a valid index. */
#include <stdlib.h>
#include <string.h>

#include "data/sampler.h"
#include "testlib.h"

static ct_rng rng;

static int64_t randint(int64_t lo, int64_t hi) { return lo + (int64_t)ct_rng_below(&rng, (uint64_t)(hi - lo + 1)); }

static bool is_permutation(const int64_t *p, int64_t n) {
    char *seen = calloc((size_t)n + 1, 1);
    bool ok = true;
    for (int64_t i = 0; i < n && ok; i++) {
        ok = p[i] >= 0 && p[i] < n && !seen[p[i]];
        if (ok) seen[p[i]] = 1;
    }
    free(seen);
    return ok;
}

/* One configuration of the train sampler over all ranks of a world: checks the global sequence and
 * the per-rank row counts, and returns the concatenated sequence (caller frees) and its length. */
static int64_t *train_world(int64_t n, int64_t b, int w, uint64_t seed, bool shuffle, bool drop_last, int64_t epoch,
                            int64_t *len) {
    int64_t g_size = b * w;
    int64_t nb = drop_last ? n / g_size : (n + g_size - 1) / g_size;
    int64_t *seq = malloc((size_t)(n + 1) * sizeof *seq), *buf = malloc((size_t)b * sizeof *buf);
    int64_t pos = 0;
    ct_train_sampler *s = calloc((size_t)w, sizeof *s);
    for (int r = 0; r < w; r++) {
        CHECK_OK(ct_train_sampler_init(&s[r], n, b, r, w, seed, shuffle, drop_last));
        CHECK(ct_train_sampler_num_batches(&s[r]) == nb, "n %lld B %lld W %d drop_last %d: %lld batches, expected %lld",
              (long long)n, (long long)b, w, drop_last, (long long)ct_train_sampler_num_batches(&s[r]), (long long)nb);
    }
    for (int64_t g = 0; g < nb; g++)
        for (int r = 0; r < w; r++) {
            int64_t rows = ct_train_sampler_batch(&s[r], epoch, g, buf);
            int64_t first = g * g_size + r * b, want = first >= n ? 0 : (n - first < b ? n - first : b);
            CHECK(rows == want, "n %lld B %lld W %d: rank %d batch %lld has %lld rows, expected %lld", (long long)n,
                  (long long)b, w, r, (long long)g, (long long)rows, (long long)want);
            if (rows != want || pos + rows > n) continue;
            memcpy(seq + pos, buf, (size_t)rows * sizeof *buf);
            pos += rows;
        }
    for (int r = 0; r < w; r++) ct_train_sampler_free(&s[r]);
    free(s);
    free(buf);
    *len = pos;
    return seq;
}

static void train_properties(void) {
    int64_t sizes[] = {1, 2, 7, 13, 61, 100, 257};
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes + 4; si++) {
        int64_t n = si < sizeof sizes / sizeof *sizes ? sizes[si] : randint(1, 300);
        int64_t b = randint(1, 9);
        uint64_t seed = ct_rng_u64(&rng);
        int64_t epoch = randint(0, 1000);
        for (int shuffle = 0; shuffle < 2; shuffle++) {
            int64_t *perm = malloc((size_t)n * sizeof *perm);
            if (shuffle)
                ct_epoch_permutation(n, seed, epoch, perm);
            else
                for (int64_t i = 0; i < n; i++) perm[i] = i;
            CHECK(is_permutation(perm, n), "epoch permutation of %lld is not a permutation", (long long)n);
            for (int drop_last = 0; drop_last < 2; drop_last++)
                for (int w = 1; w <= 5; w++) {
                    int64_t len, *seq = train_world(n, b, w, seed, shuffle, drop_last, epoch, &len);
                    int64_t want = drop_last ? n / (b * w) * (b * w) : n;
                    /* The concatenation is a prefix of the epoch's order: with drop_last exactly the
                     * tail past the last whole global batch is missing, otherwise nothing; every
                     * sample appears once because the order is a permutation. */
                    CHECK(len == want && memcmp(seq, perm, (size_t)len * sizeof *seq) == 0,
                          "n %lld B %lld W %d shuffle %d drop_last %d: ranks together give %lld samples, not the "
                          "first %lld of the epoch's order",
                          (long long)n, (long long)b, w, shuffle, drop_last, (long long)len, (long long)want);
                    /* The same global sequence with another split of the same global batch. */
                    if (w > 1) {
                        int64_t len1, *seq1 = train_world(n, b * w, 1, seed, shuffle, drop_last, epoch, &len1);
                        CHECK(len1 == len && memcmp(seq1, seq, (size_t)len * sizeof *seq) == 0,
                              "n %lld: W %d x B %lld and W 1 x B %lld give different sequences", (long long)n, w,
                              (long long)b, (long long)(b * w));
                        free(seq1);
                    }
                    free(seq);
                }
            free(perm);
        }
    }
}

static void epochs_and_seeds(void) {
    int64_t n = 1000;
    int64_t *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    uint64_t seed = ct_rng_u64(&rng);
    ct_epoch_permutation(n, seed, 3, a);
    ct_epoch_permutation(n, seed, 3, b);
    CHECK(memcmp(a, b, n * sizeof *a) == 0, "the same (seed, epoch) gives different orders");
    ct_epoch_permutation(n, seed, 4, b);
    CHECK(memcmp(a, b, n * sizeof *a) != 0, "epochs 3 and 4 give the same order");
    ct_epoch_permutation(n, seed + 1, 3, b);
    CHECK(memcmp(a, b, n * sizeof *a) != 0, "seeds %llu and %llu give the same order", (unsigned long long)seed,
          (unsigned long long)seed + 1);
    int64_t fixed = 0;
    for (int64_t i = 0; i < n; i++) fixed += a[i] == i;
    CHECK(fixed < 10, "the shuffle left %lld of 1000 samples in place", (long long)fixed);

    /* The sampler follows the epoch it is asked for, back and forth (its cached order is reused only
     * for the same epoch). */
    ct_train_sampler s;
    CHECK_OK(ct_train_sampler_init(&s, n, n, 0, 1, seed, true, false));
    ct_train_sampler_batch(&s, 4, 0, b);
    ct_train_sampler_batch(&s, 3, 0, b);
    CHECK(memcmp(a, b, n * sizeof *a) == 0, "the sampler's epoch 3 differs from ct_epoch_permutation's");
    ct_train_sampler_free(&s);
    free(a);
    free(b);

    /* Uniformity: all 24 permutations of 4 samples, over 24000 epochs. Chi-square with 23 degrees of
     * freedom exceeds 70 with probability below 1e-6; a biased shuffle (Sattolo's, an off-by-one
     * bound) gives hundreds or thousands. */
    int counts[24] = {0};
    uint64_t seed2 = ct_rng_u64(&rng);
    for (int64_t e = 0; e < 24000; e++) {
        int64_t p[4];
        ct_epoch_permutation(4, seed2, e, p);
        /* Lehmer code of p: its rank among the 24 permutations. */
        int code = 0;
        for (int i = 0; i < 4; i++) {
            int smaller = 0;
            for (int j = i + 1; j < 4; j++) smaller += p[j] < p[i];
            code = code * (4 - i) + smaller;
        }
        counts[code]++;
    }
    double chi2 = 0;
    for (int i = 0; i < 24; i++) chi2 += (counts[i] - 1000.0) * (counts[i] - 1000.0) / 1000.0;
    CHECK(chi2 < 70, "shuffle of 4 is not uniform over 24000 epochs: chi-square %.1f (23 dof)", chi2);
}

static void eval_properties(void) {
    int64_t sizes[] = {1, 2, 3, 5, 11, 64, 101};
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes + 4; si++) {
        int64_t n = si < sizeof sizes / sizeof *sizes ? sizes[si] : randint(1, 300);
        int64_t b = randint(1, 9);
        for (int w = 1; w <= 5; w++) {
            int *seen = calloc((size_t)n, sizeof *seen);
            int64_t *idx = malloc((size_t)b * sizeof *idx);
            uint8_t *mask = malloc((size_t)b);
            int64_t batches0 = -1, real = 0;
            for (int r = 0; r < w; r++) {
                ct_eval_sampler s;
                CHECK_OK(ct_eval_sampler_init(&s, n, b, r, w));
                int64_t nb = ct_eval_sampler_num_batches(&s);
                if (r == 0) batches0 = nb;
                CHECK(nb == batches0 && nb == ((n + b - 1) / b + w - 1) / w,
                      "eval n %lld B %lld W %d: rank %d has %lld batches, rank 0 %lld", (long long)n, (long long)b, w,
                      r, (long long)nb, (long long)batches0);
                int64_t rows_total = 0, prev = -1, own = 0;
                CHECK(s.shard_begin == (r * nb * b < n ? r * nb * b : n), "eval n %lld B %lld W %d rank %d: shard at %lld",
                      (long long)n, (long long)b, w, r, (long long)s.shard_begin);
                for (int64_t k = 0; k < nb; k++) {
                    int64_t rows = ct_eval_sampler_batch(&s, k, idx, mask);
                    const int64_t first = (r * nb + k) * b; /* the batch's place in the dataset's batches */
                    CHECK(rows == (first < n && n - first < b ? n - first : b) && rows > 0,
                          "eval n %lld B %lld W %d rank %d: batch %lld has %lld rows", (long long)n, (long long)b, w,
                          r, (long long)k, (long long)rows);
                    for (int64_t i = 0; i < rows; i++) {
                        CHECK(idx[i] >= 0 && idx[i] < n && mask[i] <= 1,
                              "eval rank %d: row %lld has index %lld, mask %d", r, (long long)i, (long long)idx[i],
                              mask[i]);
                        if (!(idx[i] >= 0 && idx[i] < n)) continue;
                        if (mask[i]) {
                            seen[idx[i]]++;
                            real++;
                            /* A rank's real samples are a contiguous run of the dataset, in order, and
                             * come before any padding. */
                            CHECK(idx[i] == prev + 1 || prev == -1, "eval rank %d: index %lld after %lld", r,
                                  (long long)idx[i], (long long)prev);
                            CHECK(rows_total + i == idx[i] - s.shard_begin, "eval rank %d: real row after padding", r);
                            /* the same row of a batch whatever the number of ranks */
                            CHECK(i == idx[i] % b, "eval n %lld B %lld W %d: sample %lld in row %lld", (long long)n,
                                  (long long)b, w, (long long)idx[i], (long long)i);
                            prev = idx[i];
                            own++;
                        }
                    }
                    rows_total += rows;
                }
                CHECK(own == s.shard_end - s.shard_begin, "eval n %lld W %d rank %d: %lld real rows, shard of %lld",
                      (long long)n, w, r, (long long)own, (long long)(s.shard_end - s.shard_begin));
            }
            int64_t once = 0;
            for (int64_t i = 0; i < n; i++) once += seen[i] == 1;
            CHECK(once == n && real == n,
                  "eval n %lld B %lld W %d: %lld of %lld samples seen exactly once (%lld real rows)",
                  (long long)n, (long long)b, w, (long long)once, (long long)n, (long long)real);
            free(seen);
            free(idx);
            free(mask);
        }
    }
    /* A rank past the end of a tiny dataset still runs its batch, all padding. */
    ct_eval_sampler s;
    CHECK_OK(ct_eval_sampler_init(&s, 5, 4, 3, 4)); /* batches [0, 4) and [4, 5): rank 3 starts at 12 > 5 */
    int64_t idx[4];
    uint8_t mask[4];
    CHECK(ct_eval_sampler_num_batches(&s) == 1, "rank past the end has %lld batches",
          (long long)ct_eval_sampler_num_batches(&s));
    int64_t rows = ct_eval_sampler_batch(&s, 0, idx, mask);
    bool all_padding = rows == 4;
    for (int i = 0; i < 4 && all_padding; i++) all_padding = mask[i] == 0 && idx[i] >= 0 && idx[i] < 5;
    CHECK(all_padding, "rank past the end: %lld rows, masks %d %d %d %d, indices %lld %lld %lld %lld", (long long)rows,
          mask[0], mask[1], mask[2], mask[3], (long long)idx[0], (long long)idx[1], (long long)idx[2],
          (long long)idx[3]);
}

static void bad_arguments(void) {
    ct_train_sampler t;
    ct_eval_sampler e;
    CHECK_ERR(ct_train_sampler_init(&t, 10, 0, 0, 1, 1, true, false), CT_ERR_INVALID_ARG, "train sampler",
              "batch size must be positive, got 0");
    CHECK_ERR(ct_train_sampler_init(&t, 10, 4, 2, 2, 1, true, false), CT_ERR_INVALID_ARG, "rank 2",
              "world of size 2");
    CHECK_ERR(ct_train_sampler_init(&t, -1, 4, 0, 1, 1, true, false), CT_ERR_INVALID_ARG, "dataset length -1");
    CHECK_ERR(ct_eval_sampler_init(&e, 10, 4, -1, 2), CT_ERR_INVALID_ARG, "eval sampler", "rank -1");
    CHECK_ERR(ct_eval_sampler_init(&e, 10, -3, 0, 2), CT_ERR_INVALID_ARG, "got -3");
    /* An empty dataset has no batches (and nothing to compute). */
    CHECK_OK(ct_train_sampler_init(&t, 0, 4, 0, 1, 1, true, false));
    CHECK(ct_train_sampler_num_batches(&t) == 0, "empty dataset: %lld batches",
          (long long)ct_train_sampler_num_batches(&t));
    ct_train_sampler_free(&t);
    CHECK_OK(ct_eval_sampler_init(&e, 0, 4, 1, 2));
    CHECK(ct_eval_sampler_num_batches(&e) == 0, "empty eval dataset: %lld batches",
          (long long)ct_eval_sampler_num_batches(&e));
}

int main(void) {
    ct_test_begin("test_sampler");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    train_properties();
    epochs_and_seeds();
    eval_properties();
    bad_arguments();
    return ct_test_finish();
}
