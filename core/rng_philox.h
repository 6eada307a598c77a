/* Philox4x32-10 (Salmon et al., SC'11) as a header-only function that compiles as C and as CUDA
 * host/device code, so the CPU generator (core/rng.c's ct_philox4x32), the CPU dropout kernels and
 * the CUDA dropout kernels run the very same instructions and produce the same bits. Constants are
 * the Random123 reference's; tests/unit/test_rng.c checks its published known-answer vectors.
 *
 * Also here: the counter layout of dropout masks (core/ops/ops_misc.h), for the same reason: a mask is
 * a function of (key, step, sample, element block) and both backends must agree on it bit for bit. */
#ifndef CT_RNG_PHILOX_H
#define CT_RNG_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define CT_PHILOX_FN static inline __host__ __device__
#else
#define CT_PHILOX_FN static inline
#endif

#define CT_PHILOX_M0 0xD2511F53u
#define CT_PHILOX_M1 0xCD9E8D57u
#define CT_PHILOX_W0 0x9E3779B9u
#define CT_PHILOX_W1 0xBB67AE85u

/* out = philox4x32-10(counter, key). The 32x32 -> 64-bit products are exact in either compiler, so
 * there is nothing target-dependent in here. */
CT_PHILOX_FN void ct_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)CT_PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)CT_PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += CT_PHILOX_W0;
        k1 += CT_PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* The four Philox words of dropout elements 4 * block .. 4 * block + 3 of `sample` at `step`. The
 * counter packs word 0 = the element block, word 1 = the low 32 bits of the sample index, word 2 =
 * the low 32 bits of the step, word 3 = the next 16 bits of each; so counters are distinct for
 * samples and steps below 2^48 and up to 2^34 elements per sample, far beyond any run. */
CT_PHILOX_FN void ct_dropout_philox(const uint32_t key[2], uint64_t step, uint64_t sample, uint64_t block,
                                    uint32_t out[4]) {
    uint32_t ctr[4] = {(uint32_t)block, (uint32_t)sample, (uint32_t)step,
                       (uint32_t)(((sample >> 32) & 0xFFFFu) | (((step >> 32) & 0xFFFFu) << 16))};
    ct_philox4x32_10(ctr, key, out);
}

#endif
