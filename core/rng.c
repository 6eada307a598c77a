/* Philox4x32-10 and the stream helpers built on it (see rng.h). The generator itself is
 * core/rng_philox.h (shared with the CUDA kernels); tests/unit/test_rng.c checks Random123's
 * published known-answer vectors through ct_philox4x32. */
#include "core/rng.h"

#include <math.h>

#include "core/rng_philox.h"

/* The one implementation lives in rng_philox.h, shared with the CUDA kernels. */
void ct_philox4x32(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
    ct_philox4x32_10(counter, key, out);
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
