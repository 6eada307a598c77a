/* Random numbers: Philox4x32-10, a counter-based generator (Salmon et al., SC'11).
 *
 * Philox is a keyed bijection of a 128-bit counter, so a stream is fully described by its key and
 * counter, and any position of it can be computed directly. That gives us, for free:
 *  - saveable state: four integers (ct_rng_state) restore a generator exactly;
 *  - independent streams: ct_rng_init(seed, rank, purpose) keys the generator with the seed and puts
 *    (rank, purpose) in the upper 64 bits of the counter, so two streams never share a counter value;
 *  - randomness keyed by a sample's global position and the step (ct_philox4x32 called directly),
 *    which is what dropout and augmentation use so that results do not depend on the world size. */
#ifndef CT_RNG_H
#define CT_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Well-known purposes, so streams of different jobs never overlap. */
enum {
    CT_RNG_INIT = 1,    /* parameter initialisation */
    CT_RNG_DROPOUT = 2, /* dropout masks */
    CT_RNG_SAMPLER = 3, /* data order */
    CT_RNG_AUGMENT = 4, /* data augmentation */
    CT_RNG_USER = 100,  /* first purpose free for applications */
};

typedef struct ct_rng {
    uint32_t key[2];
    uint64_t block;     /* counter words 0-1: index of the next 128-bit block */
    uint64_t stream;    /* counter words 2-3: (rank << 32) | purpose */
    uint32_t buf[4];    /* the current block's outputs */
    int used;           /* how many of buf were consumed (4 = none left) */
} ct_rng;

/* The complete state, for checkpoints. */
typedef struct ct_rng_state {
    uint64_t key;    /* key[0] | key[1] << 32 */
    uint64_t block;
    uint64_t stream;
    uint64_t used;
} ct_rng_state;

/* One Philox4x32-10 evaluation: out = philox(counter, key). */
void ct_philox4x32(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);

void ct_rng_init(ct_rng *r, uint64_t seed, uint32_t rank, uint32_t purpose);
uint32_t ct_rng_u32(ct_rng *r);
uint64_t ct_rng_u64(ct_rng *r);
/* Uniform in [0, 1) with 53 random bits. */
double ct_rng_uniform(ct_rng *r);
/* Uniform integer in [0, n), unbiased. */
uint64_t ct_rng_below(ct_rng *r, uint64_t n);
/* Standard normal (Box-Muller on two uniforms). */
double ct_rng_normal(ct_rng *r);

ct_rng_state ct_rng_get_state(const ct_rng *r);
void ct_rng_set_state(ct_rng *r, ct_rng_state s);

/* A uniform in [0, 1) from a 32-bit Philox output word (24 bits, exact in float). */
static inline float ct_u32_to_unit_float(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

#ifdef __cplusplus
}
#endif

#endif
