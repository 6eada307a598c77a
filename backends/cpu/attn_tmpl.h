/* Attention kernels over one real type R (EXP: its exponential, GEMM: its CBLAS GEMM); included by
 * attn.c for float and double. */
#include <stdint.h>
#include <string.h>

static void FN(heads_split)(const R *x, R *out, int64_t B, int64_t T, int64_t W, int64_t off, int64_t H, int64_t D) {
#pragma omp parallel for collapse(2) schedule(static) if (B * H * T * D > CT_OMP_MIN)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const R *src = x + b * T * W + off + h * D;
            R *dst = out + (b * H + h) * T * D;
            for (int64_t t = 0; t < T; t++) memcpy(dst + t * D, src + t * W, (size_t)D * sizeof(R));
        }
}

static void FN(heads_merge)(const R *x, R *out, int64_t B, int64_t T, int64_t W, int64_t off, int64_t H, int64_t D) {
#pragma omp parallel for collapse(2) schedule(static) if (B * H * T * D > CT_OMP_MIN)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const R *src = x + (b * H + h) * T * D;
            R *dst = out + b * T * W + off + h * D;
            for (int64_t t = 0; t < T; t++) memcpy(dst + t * W, src + t * D, (size_t)D * sizeof(R));
        }
}

/* Row reductions go through ATTN_LANES independent accumulators combined in lane order at the end,
 * so that they vectorise (one running max or sum is a chain of dependent operations); the order is
 * the source's, the same at every level. A NaN score is skipped by the max as before (a comparison
 * with it is false), unless it is the row's first, which every lane starts from. */
#ifndef ATTN_LANES
#define ATTN_LANES 8
#endif

/* Softmax of one row of scores over its first len keys (the ones its query sees), zeros after them,
 * in place or not: element j is read before it is written, and never read again. EXP takes
 * arguments <= 0 (and NaN) only. Returns the row's log-sum-exp, m + log(sum_j exp(p[j] - m)). */
static inline double FN(softmax_row_fwd)(const R *p, R *q, int64_t len, int64_t Tk) {
    R mx[ATTN_LANES];
    for (int l = 0; l < ATTN_LANES; l++) mx[l] = p[0];
    int64_t j = 0;
    for (; j + ATTN_LANES <= len; j += ATTN_LANES)
        for (int l = 0; l < ATTN_LANES; l++) mx[l] = p[j + l] > mx[l] ? p[j + l] : mx[l];
    R m = mx[0];
    for (int l = 1; l < ATTN_LANES; l++) m = mx[l] > m ? mx[l] : m;
    for (; j < len; j++) m = p[j] > m ? p[j] : m;
    double acc[ATTN_LANES] = {0};
    for (j = 0; j + ATTN_LANES <= len; j += ATTN_LANES)
        for (int l = 0; l < ATTN_LANES; l++) {
            R e = EXP(p[j + l] - m);
            q[j + l] = e;
            acc[l] += (double)e;
        }
    double sum = 0.0;
    for (int l = 0; l < ATTN_LANES; l++) sum += acc[l];
    for (; j < len; j++) {
        R e = EXP(p[j] - m);
        q[j] = e;
        sum += (double)e;
    }
    const R inv = (R)(1.0 / sum);
    for (j = 0; j < len; j++) q[j] *= inv;
    for (j = len; j < Tk; j++) q[j] = (R)0;
    return (double)m + log(sum);
}

/* Its gradient given its output row p; o may alias g: the dot product is complete before the first
 * write. */
static inline void FN(softmax_row_bwd)(const R *p, const R *g, R *o, int64_t len, int64_t Tk) {
    double acc[ATTN_LANES] = {0};
    int64_t j = 0;
    for (; j + ATTN_LANES <= len; j += ATTN_LANES)
        for (int l = 0; l < ATTN_LANES; l++) acc[l] += (double)p[j + l] * (double)g[j + l];
    double dot = 0.0;
    for (int l = 0; l < ATTN_LANES; l++) dot += acc[l];
    for (; j < len; j++) dot += (double)p[j] * (double)g[j];
    for (j = 0; j < len; j++) o[j] = (R)((double)p[j] * ((double)g[j] - dot));
    for (j = len; j < Tk; j++) o[j] = (R)0;
}

/* One row per iteration; row r is query i = r % Tq, which sees keys [0, i + shift]. */
static void FN(causal_softmax_fwd)(const R *x, R *y, int64_t rows, int64_t Tq, int64_t Tk) {
    const int64_t shift = Tk - Tq;
#pragma omp parallel for schedule(static) if (rows * Tk > CT_OMP_MIN)
    for (int64_t r = 0; r < rows; r++) FN(softmax_row_fwd)(x + r * Tk, y + r * Tk, r % Tq + shift + 1, Tk);
}

static void FN(causal_softmax_bwd)(const R *y, const R *dy, R *dx, int64_t rows, int64_t Tq, int64_t Tk) {
    const int64_t shift = Tk - Tq;
#pragma omp parallel for schedule(static) if (rows * Tk > CT_OMP_MIN)
    for (int64_t r = 0; r < rows; r++)
        FN(softmax_row_bwd)(y + r * Tk, dy + r * Tk, dx + r * Tk, r % Tq + shift + 1, Tk);
}

/* Fused causal self-attention (ct_op_causal_attention_forward / _backward), flash-style: no [T, T]
 * matrix is kept. The (batch, head) blocks are split over the threads, and each block's GEMMs run on
 * one thread (neither GEMM engine starts a team inside a parallel region) reading q, k and v where
 * the projection left them (rows 3C apart) and writing y, dq, dk and dv there too, so no head is
 * copied. Queries are taken in chunks of ATTN_ROWS rows whose scores, softmax and gradients live in
 * the thread's slot of the workspace; a chunk's GEMMs stop at its last query's keys: the masked
 * scores (half of them) are neither computed nor multiplied, which leaves every result as the full
 * products give it, since their terms there are exact zeros. The forward keeps each row's
 * log-sum-exp; the backward makes the chunk's P again from it and the scores, and since a chunk holds
 * whole rows, forms the softmax's row dot products from P and dP directly (y is not needed). */
#ifndef ATTN_ROWS
#define ATTN_ROWS 32
#endif

/* The threads a fused op may run: one per workspace slot at most, one for a problem too small to share. */
static int FN(attention_threads)(int64_t slots, int64_t B, int64_t T, int64_t H, int64_t D) {
    int nt = omp_get_max_threads();
    if (nt > slots) nt = (int)slots;
    if (B * H * T * T * D <= CT_OMP_MIN) nt = 1;
    return nt;
}

/* ws: slots of 2 * ATTN_ROWS * T elements, one per thread; the forward uses the first half of its own. */
static void FN(attention_fwd)(const R *qkv, R *lse, R *y, R *ws, int64_t slots, int64_t B, int64_t T, int64_t H,
                              int64_t D, R scale) {
    const int64_t C = H * D, ld = 3 * C;
#pragma omp parallel for schedule(static) num_threads(FN(attention_threads)(slots, B, T, H, D))
    for (int64_t blk = 0; blk < B * H; blk++) {
        const int64_t b = blk / H, h = blk % H;
        const R *q = qkv + b * T * ld + h * D, *k = q + C, *v = q + 2 * C;
        R *p = ws + (int64_t)omp_get_thread_num() * 2 * ATTN_ROWS * T, *yb = y + b * T * C + h * D;
        for (int64_t i0 = 0; i0 < T; i0 += ATTN_ROWS) {
            const int64_t rows = T - i0 < ATTN_ROWS ? T - i0 : ATTN_ROWS, keys = i0 + rows;
            GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)keys, (int)D, scale, q + i0 * ld, (int)ld, k,
                 (int)ld, 0, p, (int)keys);
            for (int64_t r = 0; r < rows; r++)
                lse[blk * T + i0 + r] = (R)FN(softmax_row_fwd)(p + r * keys, p + r * keys, i0 + r + 1, keys);
            GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)D, (int)keys, 1, p, (int)keys, v, (int)ld,
                 0, yb + i0 * C, (int)C);
        }
    }
}

/* A chunk row's P again from its scores s (in place): exp(s - lse) over the len keys its query sees,
 * zeros after them up to keys. lse >= the row's largest score (the forward rounded a larger value),
 * so EXP's argument is <= 0. */
static inline void FN(softmax_row_again)(R *s, R lse, int64_t len, int64_t keys) {
    int64_t j = 0;
    for (; j < len; j++) s[j] = EXP(s[j] - lse);
    for (; j < keys; j++) s[j] = (R)0;
}

/* dv and dk sum over the query chunks that see a key, so their chunks' GEMMs accumulate after the
 * first (beta 1): the first chunk to reach a key row is the one that starts at it. */
static void FN(attention_bwd)(const R *qkv, const R *lse, const R *dy, R *dqkv, R *ws, int64_t slots, int64_t B,
                              int64_t T, int64_t H, int64_t D, R scale) {
    const int64_t C = H * D, ld = 3 * C;
#pragma omp parallel for schedule(static) num_threads(FN(attention_threads)(slots, B, T, H, D))
    for (int64_t blk = 0; blk < B * H; blk++) {
        const int64_t b = blk / H, h = blk % H;
        const R *q = qkv + b * T * ld + h * D, *k = q + C, *v = q + 2 * C;
        const R *g = dy + b * T * C + h * D;
        R *dq = dqkv + b * T * ld + h * D, *dk = dq + C, *dv = dq + 2 * C;
        R *p = ws + (int64_t)omp_get_thread_num() * 2 * ATTN_ROWS * T, *ds = p + ATTN_ROWS * T;
        /* the last chunk first: it reaches every key, so it sets dk and dv whole and the others add */
        for (int64_t i0 = (T - 1) / ATTN_ROWS * ATTN_ROWS; i0 >= 0; i0 -= ATTN_ROWS) {
            const int64_t rows = T - i0 < ATTN_ROWS ? T - i0 : ATTN_ROWS, keys = i0 + rows;
            const R first = i0 + ATTN_ROWS >= T ? 0 : 1;
            const R *gi = g + i0 * C;
            /* P = exp(q k^T * scale - lse); dP = dy v^T; dv += P^T dy */
            GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)keys, (int)D, scale, q + i0 * ld, (int)ld, k,
                 (int)ld, 0, p, (int)keys);
            for (int64_t r = 0; r < rows; r++)
                FN(softmax_row_again)(p + r * keys, lse[blk * T + i0 + r], i0 + r + 1, keys);
            GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)keys, (int)D, 1, gi, (int)C, v, (int)ld, 0,
                 ds, (int)keys);
            GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)keys, (int)D, (int)rows, 1, p, (int)keys, gi, (int)C,
                 first, dv, (int)ld);
            /* dS = softmax'(P, dP) in place; dq = dS k * scale; dk += dS^T q * scale */
            for (int64_t r = 0; r < rows; r++)
                FN(softmax_row_bwd)(p + r * keys, ds + r * keys, ds + r * keys, i0 + r + 1, keys);
            GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)D, (int)keys, scale, ds, (int)keys, k,
                 (int)ld, 0, dq + i0 * ld, (int)ld);
            GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)keys, (int)D, (int)rows, scale, ds, (int)keys,
                 q + i0 * ld, (int)ld, first, dk, (int)ld);
        }
    }
}
