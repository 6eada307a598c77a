/* exp that the compiler vectorises at every level, for float and for double: Cody-Waite range
 * reduction and Cephes' approximations of exp on [-ln2/2, ln2/2] (expf's degree-6 polynomial, 1-2
 * ulp; exp's rational function, about 1 ulp), written branch-free so that a loop over them becomes
 * SIMD code of the copy's level instead of a libm call per element.
 *
 * Both take x <= 0 (and NaN) only, the case of activations that evaluate exp(-|u|) and of softmaxes
 * that subtract the row's maximum, so that they never overflow: below the normal range (-87.3 for
 * float, -708.39 for double) the result is 0, NaN stays NaN. Included by the family files that need
 * them (elementwise.c: GELU; attn.c: the causal softmax; loss.c: the cross-entropy's softmax, in
 * double because its sums are). */
#ifndef CT_CPU_EXPF_H
#define CT_CPU_EXPF_H

#include <stdint.h>
#include <string.h>

static inline float ct_cpu_expf_neg(float x) {
    const float lo = -87.3f; /* exp(lo) is still a normal float: the scale below stays valid */
    /* in range and not NaN, so that the conversion of n to an integer below is defined; a NaN
     * input is returned as it is at the end */
    const float xc = x < lo ? lo : x == x ? x : 0.0f;
    /* x = n ln2 + r, |r| <= ln2 / 2, ln2 split in two so that n ln2 is exact enough */
    const float n = __builtin_floorf(xc * 1.44269504088896341f + 0.5f);
    const float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    /* 2^n as a float's exponent field; n in [-126, 0] here */
    const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return x < lo ? 0.0f : x == x ? p * scale : x;
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
