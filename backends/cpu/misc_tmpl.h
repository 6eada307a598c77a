/* Dropout and embedding kernels over one real type R; included by misc.c for float and double. */
#include <stdint.h>

/* One row (one sample) per iteration: each Philox call yields the words of four consecutive
 * elements, so a row costs numel/4 evaluations whatever the batch around it. */
static void FN(dropout_fwd)(const R *x, R *y, uint8_t *mask, int64_t rows, int64_t row_numel, uint64_t threshold,
                            double scale, const ct_dropout_ctx *ctx) {
#pragma omp parallel for schedule(static) if (rows * row_numel > CT_OMP_MIN / 4)
    for (int64_t r = 0; r < rows; r++) {
        const R *p = x + r * row_numel;
        R *q = y + r * row_numel;
        uint8_t *m = mask + r * row_numel;
        uint64_t sample = (uint64_t)(ctx->sample_offset + r);
        for (int64_t e0 = 0; e0 < row_numel; e0 += 4) {
            uint32_t words[4];
            dropout_words(ctx, sample, (uint64_t)e0 / 4, words);
            int64_t e1 = e0 + 4 < row_numel ? e0 + 4 : row_numel;
            for (int64_t e = e0; e < e1; e++) {
                uint8_t keep = (uint64_t)words[e - e0] >= threshold;
                m[e] = keep;
                /* PyTorch multiplies by the mask: a dropped NaN or inf stays NaN (and -1 gives -0) */
                q[e] = (R)(p[e] * (keep ? scale : 0.0));
            }
        }
    }
}

static void FN(dropout_bwd)(const R *dy, const uint8_t *mask, double scale, R *dx, int64_t n) {
#pragma omp parallel for schedule(static) if (n > CT_OMP_MIN)
    for (int64_t i = 0; i < n; i++) dx[i] = (R)(dy[i] * (mask[i] ? scale : 0.0));
}

/* dweight rows gather the gradients of every token with that id. A thread owns a block of columns
 * and walks all tokens in order, so repeated ids never race and sums are thread-count independent. */
static void FN(embedding_bwd)(const int64_t *ids, const R *dy, int64_t n, int64_t dim, int64_t padding_idx, R *dw) {
    int64_t blocks = (dim + CT_EMB_COLS - 1) / CT_EMB_COLS;
#pragma omp parallel for schedule(static) if (n * dim > CT_OMP_MIN)
    for (int64_t blk = 0; blk < blocks; blk++) {
        int64_t j0 = blk * CT_EMB_COLS, j1 = j0 + CT_EMB_COLS < dim ? j0 + CT_EMB_COLS : dim;
        for (int64_t i = 0; i < n; i++) {
            int64_t id = ids[i];
            if (id == padding_idx) continue;
            const R *g = dy + i * dim;
            R *w = dw + id * dim;
            for (int64_t j = j0; j < j1; j++) w[j] += g[j];
        }
    }
}
