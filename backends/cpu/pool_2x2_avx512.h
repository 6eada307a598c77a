/* The 2x2 stride-2 max-pooling row of pool_tmpl.h for float with AVX-512, included by pool.c where
 * the compiler targets it. The portable loop vectorises only in whole vectors and leaves the rest of
 * a row to scalar code; the CNN's rows are 14 and 7 outputs wide, so most of the work landed there.
 * Here a row goes 16 outputs at a time, the last chunk with masked loads and stores: each output's
 * window is deinterleaved from two rows of 32 inputs, and the tournament (a, b, c, d in row-major
 * order, only a strictly greater value wins, so ties go to the first) is the same as the portable
 * loop's, with the same result bit for bit. Returns nonzero when the row holds a NaN. */
#include <immintrin.h>
#include <stdint.h>

static int maxpool_row_2x2_f32_avx512(const float *xp, int32_t W, int32_t oh, int32_t OW, float *best,
                                      int32_t *where) {
    const float *r0 = xp + 2 * oh * W, *r1 = r0 + W;
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1)), one = _mm512_set1_epi32(1);
    __mmask16 nan = 0;
    for (int32_t ow = 0; ow < OW; ow += 16) {
        const int32_t n = OW - ow < 16 ? OW - ow : 16, n_in = 2 * n;
        const __mmask16 out = (__mmask16)((1u << n) - 1);
        const __mmask16 lo = (__mmask16)(n_in >= 16 ? 0xFFFFu : (1u << n_in) - 1);
        const __mmask16 hi = (__mmask16)(n_in > 16 ? (1u << (n_in - 16)) - 1 : 0);
        const float *p0 = r0 + 2 * ow, *p1 = r1 + 2 * ow;
        const __m512 x00 = _mm512_maskz_loadu_ps(lo, p0), x10 = _mm512_maskz_loadu_ps(lo, p1);
        const __m512 x01 = hi ? _mm512_maskz_loadu_ps(hi, p0 + 16) : _mm512_setzero_ps();
        const __m512 x11 = hi ? _mm512_maskz_loadu_ps(hi, p1 + 16) : _mm512_setzero_ps();
        const __m512 a = _mm512_permutex2var_ps(x00, even, x01), b = _mm512_permutex2var_ps(x00, odd, x01);
        const __m512 c = _mm512_permutex2var_ps(x10, even, x11), d = _mm512_permutex2var_ps(x10, odd, x11);
        const __mmask16 b_wins = _mm512_cmp_ps_mask(b, a, _CMP_GT_OQ), d_wins = _mm512_cmp_ps_mask(d, c, _CMP_GT_OQ);
        const __m512 ab = _mm512_mask_blend_ps(b_wins, a, b), cd = _mm512_mask_blend_ps(d_wins, c, d);
        const __mmask16 lower_wins = _mm512_cmp_ps_mask(cd, ab, _CMP_GT_OQ);
        /* the window's first input, at0 + 2 * (ow + j) */
        const __m512i first = _mm512_add_epi32(_mm512_set1_epi32(2 * oh * W + 2 * ow), even);
        const __m512i top = _mm512_mask_add_epi32(first, b_wins, first, one);
        const __m512i below = _mm512_add_epi32(first, _mm512_set1_epi32(W));
        const __m512i bottom = _mm512_mask_add_epi32(below, d_wins, below, one);
        _mm512_mask_storeu_ps(best + ow, out, _mm512_mask_blend_ps(lower_wins, ab, cd));
        _mm512_mask_storeu_epi32(where + ow, out, _mm512_mask_blend_epi32(lower_wins, top, bottom));
        nan |= out & (_mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(c, d, _CMP_UNORD_Q));
    }
    return nan != 0;
}
