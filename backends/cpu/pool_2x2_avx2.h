/* The 2x2 stride-2 max-pooling row of pool_tmpl.h for float with AVX2, the twin of
 * pool_2x2_avx512.h for x86-64-v3 (included by pool.c where the compiler targets AVX2 but not
 * AVX-512). A row goes 8 outputs at a time, the last chunk with masked loads and stores (the CNN's
 * rows are 14 and 7 outputs wide); each output's window is deinterleaved from two rows of 16 inputs
 * (an in-lane shuffle, then the 64-bit blocks put in order), and the tournament (a, b, c, d in
 * row-major order, only a strictly greater value wins, so ties go to the first) is the portable
 * loop's, with the same result bit for bit. Returns nonzero when the row holds a NaN. */
#include <immintrin.h>
#include <stdint.h>

/* even (odd) elements of the 16 floats lo:hi, in order */
static inline __m256 pool_avx2_pick(__m256 lo, __m256 hi, int odd) {
    const __m256 s = odd ? _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1)) : _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(s), _MM_SHUFFLE(3, 1, 2, 0)));
}

static int maxpool_row_2x2_f32_avx2(const float *xp, int32_t W, int32_t oh, int32_t OW, float *best, int32_t *where) {
    const float *r0 = xp + 2 * oh * W, *r1 = r0 + W;
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), twice = _mm256_add_epi32(lane, lane);
    __m256 nan = _mm256_setzero_ps();
    for (int32_t ow = 0; ow < OW; ow += 8) {
        const int32_t n = OW - ow < 8 ? OW - ow : 8;
        const __m256i out = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane);
        const __m256i lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(2 * n), lane);
        const __m256i hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(2 * n - 8), lane);
        const float *p0 = r0 + 2 * ow, *p1 = r1 + 2 * ow;
        /* masked-off lanes read nothing (no fault past the row) and give 0 */
        const __m256 x00 = _mm256_maskload_ps(p0, lo), x01 = _mm256_maskload_ps(p0 + 8, hi);
        const __m256 x10 = _mm256_maskload_ps(p1, lo), x11 = _mm256_maskload_ps(p1 + 8, hi);
        const __m256 a = pool_avx2_pick(x00, x01, 0), b = pool_avx2_pick(x00, x01, 1);
        const __m256 c = pool_avx2_pick(x10, x11, 0), d = pool_avx2_pick(x10, x11, 1);
        const __m256 b_wins = _mm256_cmp_ps(b, a, _CMP_GT_OQ), d_wins = _mm256_cmp_ps(d, c, _CMP_GT_OQ);
        const __m256 ab = _mm256_blendv_ps(a, b, b_wins), cd = _mm256_blendv_ps(c, d, d_wins);
        const __m256 lower_wins = _mm256_cmp_ps(cd, ab, _CMP_GT_OQ);
        /* the window's first input, at0 + 2 * (ow + j); a win of b or d (all ones, -1) adds one */
        const __m256i first = _mm256_add_epi32(_mm256_set1_epi32(2 * oh * W + 2 * ow), twice);
        const __m256i top = _mm256_sub_epi32(first, _mm256_castps_si256(b_wins));
        const __m256i bottom =
            _mm256_sub_epi32(_mm256_add_epi32(first, _mm256_set1_epi32(W)), _mm256_castps_si256(d_wins));
        _mm256_maskstore_ps(best + ow, out, _mm256_blendv_ps(ab, cd, lower_wins));
        _mm256_maskstore_epi32(where + ow, out, _mm256_blendv_epi8(top, bottom, _mm256_castps_si256(lower_wins)));
        const __m256 unordered = _mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_UNORD_Q), _mm256_cmp_ps(c, d, _CMP_UNORD_Q));
        nan = _mm256_or_ps(nan, _mm256_and_ps(_mm256_castsi256_ps(out), unordered));
    }
    return !_mm256_testz_ps(nan, nan);
}
