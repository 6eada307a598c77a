/* The keyed randomness of augmentation, for the built-in transforms and for applications that write
 * their own random transforms and want the same guarantees.
 *
 * A sample's random words are one Philox4x32-10 block:
 *     key     = mix64(seed ^ mix64(salt + 0x9E3779B97F4A7C15 * CT_RNG_AUGMENT))   (low word, high word)
 *     counter = (index low 32 bits, index high 32 bits, epoch low 32 bits, epoch high 32 bits)
 * with mix64 splitmix64's finaliser (as dropout keys use, with another purpose constant), salt the
 * transform's position in its list, index the sample's dataset index and (seed, epoch) the fetch
 * context. The words thus depend only on (seed, epoch, index, transform position): never on which
 * batch, worker, thread or rank fetched the sample. For a fixed salt the key is a bijection of the
 * seed, and the counter is a bijection of (index, epoch), so no two samples or epochs share a block.
 * Four words per sample and transform are enough for the built-ins (a crop uses two, a flip one). */
#ifndef CT_TRANSFORM_RANDOM_H
#define CT_TRANSFORM_RANDOM_H

#include <stdint.h>

#include "data/dataset.h"

void ct_augment_random(const ct_fetch_ctx *ctx, uint32_t salt, int64_t index, uint32_t out[4]);

/* floor(word * n / 2^32): an integer in [0, n) from one word; each value's probability is within
 * 2^-32 of 1/n, far below anything a training run could detect. */
static inline uint32_t ct_augment_below(uint32_t word, uint32_t n) { return (uint32_t)(((uint64_t)word * n) >> 32); }

/* True with probability p (exactly never for p <= 0, always for p >= 1). */
static inline int ct_augment_bernoulli(uint32_t word, double p) { return (double)word < p * 4294967296.0; }

#endif
