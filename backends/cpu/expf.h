/* exp for float that the compiler vectorises at every level: Cody-Waite range reduction and the
 * degree-6 polynomial of Cephes' expf (1-2 ulp over the normal range), written branch-free so that a
 * loop over it becomes SIMD code of the copy's level instead of a libm call per element.
 *
 * ct_cpu_expf_neg takes x <= 0 (and NaN) only, the case of activations that evaluate exp(-|u|) so
 * that it never overflows: below -87.3 the result is 0 (the normal range ends there), NaN stays NaN.
 * Included by the family files that need it (elementwise.c: GELU; attn.c: the causal softmax). */
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

#endif
