/* Philox4x32-10 and the stream helpers built on it (see rng.h). Constants are those of the
 * Random123 reference; tests/unit/test_rng.c checks its published known-answer vectors. */
#include "core/rng.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void ct_philox4x32(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

void ct_rng_init(ct_rng *r, uint64_t seed, uint32_t rank, uint32_t purpose) {
    r->key[0] = (uint32_t)seed;
    r->key[1] = (uint32_t)(seed >> 32);
    r->block = 0;
    r->stream = ((uint64_t)rank << 32) | purpose;
    r->used = 4;
}

static void refill(ct_rng *r) {
    uint32_t ctr[4] = {(uint32_t)r->block, (uint32_t)(r->block >> 32), (uint32_t)r->stream,
                       (uint32_t)(r->stream >> 32)};
    ct_philox4x32(ctr, r->key, r->buf);
    r->block++;
    r->used = 0;
}

uint32_t ct_rng_u32(ct_rng *r) {
    if (r->used >= 4) refill(r);
    return r->buf[r->used++];
}

uint64_t ct_rng_u64(ct_rng *r) {
    uint64_t lo = ct_rng_u32(r);
    return lo | ((uint64_t)ct_rng_u32(r) << 32);
}

double ct_rng_uniform(ct_rng *r) { return (double)(ct_rng_u64(r) >> 11) * 0x1.0p-53; }

uint64_t ct_rng_below(ct_rng *r, uint64_t n) {
    if (n <= 1) return 0;
    /* Rejection sampling: discard the top partial range so every residue is equally likely. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = ct_rng_u64(r);
    while (x >= limit);
    return x % n;
}

double ct_rng_normal(ct_rng *r) {
    double u1 = ct_rng_uniform(r), u2 = ct_rng_uniform(r);
    /* 1 - u1 lies in (0, 1], so the logarithm is finite. */
    return sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
}

ct_rng_state ct_rng_get_state(const ct_rng *r) {
    return (ct_rng_state){.key = r->key[0] | ((uint64_t)r->key[1] << 32), .block = r->block,
                          .stream = r->stream, .used = (uint64_t)r->used};
}

void ct_rng_set_state(ct_rng *r, ct_rng_state s) {
    r->key[0] = (uint32_t)s.key;
    r->key[1] = (uint32_t)(s.key >> 32);
    r->stream = s.stream;
    /* The buffered block is recomputed from the counter, so the state stays four integers. */
    if (s.used < 4 && s.block > 0) {
        r->block = s.block - 1;
        refill(r);
        r->used = (int)s.used;
    } else {
        r->block = s.block;
        r->used = 4;
    }
}
