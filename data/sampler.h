/* Samplers: which dataset indices each rank sees, batch by batch.
 *
 * Training (ct_train_sampler): the order of epoch e is a permutation of [0, n) that depends only on
 * (seed, e) — never on the world size. Global batch g is positions [g*G, (g+1)*G) of that order, with
 * G = per_device_batch * world_size, split into contiguous per-rank slices: rank r takes positions
 * [g*G + r*B, g*G + (r+1)*B). The last global batch may be short (then later ranks get fewer or zero
 * samples) or, with drop_last, is dropped. So the samples of a global step are the same for any
 * world size with the same G, and a position (epoch, g) means the same thing to every rank.
 *
 * Evaluation (ct_eval_sampler): dataset order cut into batches of B (the last may be short), each
 * rank a contiguous run of ceil(ceil(n / B) / W) of them, as Accelerate shards evaluation batches.
 * Every rank runs the same number of batches; a rank past the end of the data runs batches of
 * padding rows, which repeat a valid index but carry mask 0, so metrics never count them. Since
 * shards start on batch boundaries, sample i is row i mod B of its batch for every world size: BLAS
 * kernels whose rounding depends on a row's place in the matrix then still give every sample the
 * same outputs on any number of processes. */
#ifndef CT_SAMPLER_H
#define CT_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

typedef struct ct_train_sampler {
    int64_t n;                /* samples per epoch */
    int64_t per_device_batch; /* B */
    int rank, world_size;
    uint64_t seed;
    bool shuffle;             /* false: identity order (still sharded the same way) */
    bool drop_last;
    int64_t *order;           /* permutation of the current epoch */
    int64_t order_epoch;      /* epoch `order` belongs to (-1: none yet) */
} ct_train_sampler;

ct_status ct_train_sampler_init(ct_train_sampler *s, int64_t n, int64_t per_device_batch, int rank, int world_size,
                                uint64_t seed, bool shuffle, bool drop_last);
void ct_train_sampler_free(ct_train_sampler *s);
/* Global batches per epoch: ceil(n / G), or floor with drop_last. */
int64_t ct_train_sampler_num_batches(const ct_train_sampler *s);
/* Writes this rank's indices of global batch g of epoch e into out (room for B); returns their number
 * (0..B). Computes the epoch's permutation when e changes. */
int64_t ct_train_sampler_batch(ct_train_sampler *s, int64_t epoch, int64_t g, int64_t *out);
/* The global order of epoch e (n indices) into out: the same for every world size. */
void ct_epoch_permutation(int64_t n, uint64_t seed, int64_t epoch, int64_t *out);

typedef struct ct_eval_sampler {
    int64_t n, per_device_batch;
    int rank, world_size;
    int64_t shard_begin, shard_end; /* this rank's samples [begin, end) */
    int64_t shard_batches;          /* ceil(ceil(n / B) / W): the batches every rank runs */
} ct_eval_sampler;

ct_status ct_eval_sampler_init(ct_eval_sampler *s, int64_t n, int64_t per_device_batch, int rank, int world_size);
/* Batches per rank (equal on every rank). */
int64_t ct_eval_sampler_num_batches(const ct_eval_sampler *s);
/* Writes batch b's indices and validity mask (1 real, 0 padding); returns its row count: B, fewer
 * for the batch that ends the data, and B rows all with mask 0 for a batch past it (n > 0). */
int64_t ct_eval_sampler_batch(const ct_eval_sampler *s, int64_t b, int64_t *indices, uint8_t *mask);

#endif
