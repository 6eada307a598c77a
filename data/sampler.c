/* Samplers (see sampler.h): the epoch permutation and the per-rank views of it.
 *
 * The permutation of epoch e is a Fisher-Yates shuffle driven by the Philox stream
 * ct_rng_init(seed, 0, CT_RNG_SAMPLER) started at block e * 2^40: every epoch owns its own range of
 * 2^40 blocks (2^42 random words) of the one sampler stream, so epochs never share random numbers,
 * and nothing in it depends on the rank or the world size. A shuffle of n samples consumes about n/2
 * blocks, so ranges cannot overlap for any n below 2^40 (checked at init); epochs up to 2^24 are
 * distinct (checked where the permutation is made). */
#include "data/sampler.h"

#include <stdlib.h>
#include <string.h>

#include "core/rng.h"

#define EPOCH_BLOCK_SHIFT 40
#define MAX_SAMPLES ((int64_t)1 << 39) /* leaves room for rejection draws inside an epoch's range */
#define MAX_EPOCH ((int64_t)1 << 24)   /* epoch << 40 must fit the 64-bit block counter */

void ct_epoch_permutation(int64_t n, uint64_t seed, int64_t epoch, int64_t *out) {
    CT_ASSERT(n >= 0 && n <= MAX_SAMPLES && epoch >= 0 && epoch < MAX_EPOCH);
    for (int64_t i = 0; i < n; i++) out[i] = i;
    ct_rng rng;
    ct_rng_init(&rng, seed, 0, CT_RNG_SAMPLER);
    rng.block = (uint64_t)epoch << EPOCH_BLOCK_SHIFT;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)ct_rng_below(&rng, (uint64_t)i + 1), t = out[i];
        out[i] = out[j];
        out[j] = t;
    }
}

static ct_status check_common(const char *who, int64_t n, int64_t per_device_batch, int rank, int world_size) {
    if (n < 0 || n > MAX_SAMPLES)
        return ct_error(CT_ERR_INVALID_ARG, "%s: dataset length %lld is outside [0, 2^39]", who, (long long)n);
    if (per_device_batch <= 0)
        return ct_error(CT_ERR_INVALID_ARG, "%s: batch size must be positive, got %lld", who,
                        (long long)per_device_batch);
    if (world_size < 1 || rank < 0 || rank >= world_size)
        return ct_error(CT_ERR_INVALID_ARG, "%s: rank %d is outside a world of size %d", who, rank, world_size);
    if (per_device_batch > MAX_SAMPLES / world_size)
        return ct_error(CT_ERR_INVALID_ARG, "%s: global batch %lld x %d is too large", who,
                        (long long)per_device_batch, world_size);
    return CT_OK;
}

ct_status ct_train_sampler_init(ct_train_sampler *s, int64_t n, int64_t per_device_batch, int rank, int world_size,
                                uint64_t seed, bool shuffle, bool drop_last) {
    memset(s, 0, sizeof *s);
    s->order_epoch = -1;
    CT_TRY(check_common("train sampler", n, per_device_batch, rank, world_size));
    if (shuffle) {
        s->order = malloc((size_t)(n > 0 ? n : 1) * sizeof *s->order);
        if (!s->order)
            return ct_error(CT_ERR_NOMEM, "train sampler: cannot allocate the order of %lld samples", (long long)n);
    }
    s->n = n;
    s->per_device_batch = per_device_batch;
    s->rank = rank;
    s->world_size = world_size;
    s->seed = seed;
    s->shuffle = shuffle;
    s->drop_last = drop_last;
    return CT_OK;
}

void ct_train_sampler_free(ct_train_sampler *s) {
    free(s->order);
    s->order = NULL;
    s->order_epoch = -1;
}

int64_t ct_train_sampler_num_batches(const ct_train_sampler *s) {
    int64_t g = s->per_device_batch * s->world_size;
    return s->drop_last ? s->n / g : (s->n + g - 1) / g;
}

int64_t ct_train_sampler_batch(ct_train_sampler *s, int64_t epoch, int64_t g, int64_t *out) {
    CT_ASSERT(epoch >= 0 && g >= 0 && g < ct_train_sampler_num_batches(s));
    int64_t b = s->per_device_batch;
    int64_t begin = g * b * s->world_size + (int64_t)s->rank * b;
    int64_t end = begin + b < s->n ? begin + b : s->n;
    if (end <= begin) return 0; /* a later rank of a short last global batch */
    if (!s->shuffle) {
        for (int64_t i = begin; i < end; i++) out[i - begin] = i;
        return end - begin;
    }
    if (s->order_epoch != epoch) {
        ct_epoch_permutation(s->n, s->seed, epoch, s->order);
        s->order_epoch = epoch;
    }
    memcpy(out, s->order + begin, (size_t)(end - begin) * sizeof *out);
    return end - begin;
}

ct_status ct_eval_sampler_init(ct_eval_sampler *s, int64_t n, int64_t per_device_batch, int rank, int world_size) {
    memset(s, 0, sizeof *s);
    CT_TRY(check_common("eval sampler", n, per_device_batch, rank, world_size));
    s->n = n;
    s->per_device_batch = per_device_batch;
    s->rank = rank;
    s->world_size = world_size;
    const int64_t batches = (n + per_device_batch - 1) / per_device_batch;
    s->shard_batches = (batches + world_size - 1) / world_size;
    const int64_t span = s->shard_batches * per_device_batch;
    s->shard_begin = (int64_t)rank * span < n ? (int64_t)rank * span : n;
    s->shard_end = s->shard_begin + span < n ? s->shard_begin + span : n;
    return CT_OK;
}

int64_t ct_eval_sampler_num_batches(const ct_eval_sampler *s) { return s->shard_batches; }

int64_t ct_eval_sampler_batch(const ct_eval_sampler *s, int64_t b, int64_t *indices, uint8_t *mask) {
    CT_ASSERT(b >= 0 && b < ct_eval_sampler_num_batches(s));
    const int64_t B = s->per_device_batch, first = ((int64_t)s->rank * s->shard_batches + b) * B;
    const int64_t rows = first < s->n && s->n - first < B ? s->n - first : B;
    for (int64_t i = 0; i < rows; i++) {
        const int64_t k = first + i;
        /* Padding wraps around to the dataset's start (as PyTorch's DistributedSampler pads), so it
         * is always a valid index. */
        const bool real = k < s->shard_end;
        indices[i] = real ? k : k % s->n;
        mask[i] = real;
    }
    return rows;
}
