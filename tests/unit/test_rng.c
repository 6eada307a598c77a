/* Philox4x32-10 against Random123's published known-answer vectors; state save/restore; stream
 * independence; and the moments of the uniform and normal draws. */
#include <string.h>

#include "core/rng.h"
#include "testlib.h"

static void known_answers(void) {
    /* From Random123's kat_vectors (philox4x32 10 rounds): counter, key, expected output. */
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e,
         0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb,
         0x5001e420, 0x24126ea1},
    };
    for (int v = 0; v < 3; v++) {
        uint32_t out[4];
        ct_philox4x32(kat[v], kat[v] + 4, out);
        CHECK(memcmp(out, kat[v] + 6, sizeof out) == 0, "KAT %d: got %08x %08x %08x %08x", v, out[0], out[1], out[2],
              out[3]);
    }
}

static void save_restore(void) {
    ct_rng a;
    ct_rng_init(&a, ct_test_seed, 3, CT_RNG_DROPOUT);
    int skip = (int)(ct_test_seed % 7);
    for (int i = 0; i < skip; i++) ct_rng_u32(&a);
    ct_rng_state st = ct_rng_get_state(&a);
    uint32_t expect[9];
    for (int i = 0; i < 9; i++) expect[i] = ct_rng_u32(&a);
    ct_rng b;
    ct_rng_init(&b, 12345, 0, 0);
    ct_rng_set_state(&b, st);
    for (int i = 0; i < 9; i++) CHECK(ct_rng_u32(&b) == expect[i], "restored stream differs at draw %d", i);
}

static void streams_differ(void) {
    ct_rng a, b, c;
    ct_rng_init(&a, ct_test_seed, 0, CT_RNG_INIT);
    ct_rng_init(&b, ct_test_seed, 1, CT_RNG_INIT);
    ct_rng_init(&c, ct_test_seed, 0, CT_RNG_SAMPLER);
    int same_ab = 0, same_ac = 0;
    for (int i = 0; i < 1000; i++) {
        uint32_t x = ct_rng_u32(&a), y = ct_rng_u32(&b), z = ct_rng_u32(&c);
        same_ab += x == y;
        same_ac += x == z;
    }
    CHECK(same_ab < 3 && same_ac < 3, "streams overlap: %d and %d equal draws of 1000", same_ab, same_ac);
}

static void moments(void) {
    ct_rng r;
    ct_rng_init(&r, ct_test_seed, 0, CT_RNG_USER);
    const int n = 200000;
    double su = 0, su2 = 0, sn = 0, sn2 = 0;
    uint64_t below_hist[5] = {0};
    int outside = 0;
    for (int i = 0; i < n; i++) {
        double u = ct_rng_uniform(&r), z = ct_rng_normal(&r);
        outside += !(u >= 0.0 && u < 1.0);
        su += u;
        su2 += u * u;
        sn += z;
        sn2 += z * z;
        below_hist[ct_rng_below(&r, 5)]++;
    }
    CHECK(outside == 0, "%d uniforms outside [0, 1)", outside);
    /* Bounds are about six standard errors: a correct generator fails them ~never. */
    CHECK(fabs(su / n - 0.5) < 6 * sqrt(1.0 / 12 / n), "uniform mean %g", su / n);
    CHECK(fabs(su2 / n - su * su / n / n - 1.0 / 12) < 0.002, "uniform variance %g", su2 / n - su * su / n / n);
    CHECK(fabs(sn / n) < 6 / sqrt(n), "normal mean %g", sn / n);
    CHECK(fabs(sn2 / n - 1.0) < 6 * sqrt(2.0 / n), "normal variance %g", sn2 / n);
    for (int k = 0; k < 5; k++)
        CHECK(fabs((double)below_hist[k] / n - 0.2) < 6 * sqrt(0.16 / n), "below(5) bin %d: %g", k,
              (double)below_hist[k] / n);
}

int main(void) {
    ct_test_begin("test_rng");
    known_answers();
    save_restore();
    streams_differ();
    moments();
    return ct_test_finish();
}
