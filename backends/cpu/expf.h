/* exp that the compiler vectorises at every level, for float and for double: Cody-Waite range
 * reduction and Cephes' approximations of exp on [-ln2/2, ln2/2] (expf's degree-6 polynomial, 1-2
 * ulp; exp's rational function, about 1 ulp), written branch-free so that a loop over them becomes
 * SIMD code of the copy's level instead of a libm call per element.
 *
 * ct_cpu_expf_neg and ct_cpu_exp_neg take x <= 0 (and NaN) only, the case of softmaxes that subtract
 * the row's maximum, so that they never overflow: below the normal range (-87.3 for float, -708.39 for
 * double) the result is 0, NaN stays NaN. ct_cpu_expf_in_range is the float core without those
 * checks, for a caller that clamps its argument itself (GELU). Included by the family files that need
 * them (elementwise.c: GELU; attn.c: the causal softmax; loss.c: the cross-entropy's softmax, in
 * double because its sums are). */
#ifndef CT_CPU_EXPF_H
#define CT_CPU_EXPF_H

#include <stdint.h>
#include <string.h>

/* exp(x) for x in [-87.3, 88.3], where both the result and 2^n below are normal floats; no check of
 * the range (the callers clamp). n = x / ln2 rounded to an integer by adding 1.5 * 2^23, after which it
 * sits in the low bits of the sum: no rounding instruction (the baseline has none), no conversion. */
static inline float ct_cpu_expf_in_range(float x) {
    const float magic = 12582912.0f;
    const float shifted = x * 1.44269504088896341f + magic, n = shifted - magic;
    /* x = n ln2 + r, |r| <= ln2 / 2, ln2 split in two so that n ln2 is exact enough */
    const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    /* 2^n as a float's exponent field: shifted's bits are magic's plus n, and magic's bits shifted
     * left by 23 vanish from 32 bits, so (bits + 127) << 23 is (n + 127) << 23 */
    uint32_t bits;
    memcpy(&bits, &shifted, sizeof bits);
    const uint32_t scale_bits = (bits + 127u) << 23;
    float scale;
    memcpy(&scale, &scale_bits, sizeof scale);
    return p * scale;
}

static inline float ct_cpu_expf_neg(float x) {
    const float lo = -87.3f;
    /* max(x, lo), a NaN to lo: in range for the approximation; the NaN comes back through x - x, which
     * is 0 for every finite x and NaN for a NaN (and for -inf, which the last line sends to 0) */
    const float e = ct_cpu_expf_in_range(x > lo ? x : lo) + (x - x);
    return x < lo ? 0.0f : e;
}

static inline double ct_cpu_exp_neg(double x) {
    const double lo = -708.39; /* exp(lo) is still a normal double: the scale below stays valid */
    const double xc = x < lo ? lo : x == x ? x : 0.0;
    /* x = n ln2 + r, |r| <= ln2 / 2, ln2 split in two so that n ln2 is exact enough; n is x / ln2
     * rounded to an integer by adding 1.5 * 2^52, after which it sits in the low bits of the sum (no
     * rounding instruction, which the baseline lacks, and no conversion to a 64-bit integer, which
     * SSE and AVX2 lack) */
    const double magic = 6755399441055744.0;
    const double shifted = xc * 1.4426950408889634074 + magic, n = shifted - magic;
    const double r = (xc - n * 6.93145751953125e-1) - n * 1.42860682030941723212e-6;
    /* exp(r) = 1 + 2 r P(r^2) / (Q(r^2) - r P(r^2)) */
    const double rr = r * r;
    const double p = r * ((1.26177193074810590878e-4 * rr + 3.02994407707441961300e-2) * rr +
                          9.99999999999999999910e-1);
    const double q = ((3.00198505138664455042e-6 * rr + 2.52448340349684104192e-3) * rr +
                      2.27265548208155028766e-1) * rr + 2.00000000000000000009e0;
    const double e = 1.0 + 2.0 * (p / (q - p));
    /* 2^n as a double's exponent field, n in [-1022, 0] */
    uint64_t bits, magic_bits;
    memcpy(&bits, &shifted, sizeof bits);
    memcpy(&magic_bits, &magic, sizeof magic_bits);
    const uint64_t scale_bits = (bits - magic_bits + 1023) << 52;
    double scale;
    memcpy(&scale, &scale_bits, sizeof scale);
    return x < lo ? 0.0 : x == x ? e * scale : x;
}

#endif
