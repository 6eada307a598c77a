/* A linear layer's work beside its GEMMs over one real type R (blas.c includes it for float and
 * double): the forward's epilogue on the block [m0, m1) x [n0, n1) of y[., ld] (the bias before the
 * GEMM, the ReLU after), and the backward's bias gradient over a range of columns. */
#include <string.h>

static void FN(bias_rows)(const R *bias, R *y, int64_t ld, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    for (int64_t r = m0; r < m1; r++) memcpy(y + r * ld + n0, bias + n0, (size_t)(n1 - n0) * sizeof(R));
}

/* ReLU as ct_op_activation_forward applies it: NaN and -0.0 pass (PyTorch's clamp_min). */
static void FN(relu_rows)(R *y, int64_t ld, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    for (int64_t r = m0; r < m1; r++) {
        R *p = y + r * ld;
        for (int64_t j = n0; j < n1; j++) p[j] = p[j] < 0 ? 0 : p[j];
    }
}

/* db[j] += the sum over rows of dy[., j] for j in [j0, j1), dy [rows, c]: rows walked contiguously into
 * a block of float64 accumulators (vectorises; a per-column walk would stride through memory). A
 * column's sum is the same whatever range or block holds it. */
static void FN(bias_grad_cols)(const R *dy, R *db, int64_t rows, int64_t c, int64_t j0, int64_t j1) {
    enum { BLOCK = 256 };
    for (; j0 < j1; j0 += BLOCK) {
        const int64_t w = j1 - j0 < BLOCK ? j1 - j0 : BLOCK;
        double acc[BLOCK] = {0};
        for (int64_t r = 0; r < rows; r++) {
            const R *restrict p = dy + r * c + j0;
            for (int64_t j = 0; j < w; j++) acc[j] += p[j];
        }
        for (int64_t j = 0; j < w; j++) db[j0 + j] += (R)acc[j];
    }
}
