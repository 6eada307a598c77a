/* The epilogue of a linear layer's forward over one real type R (blas.c includes it for float and
 * double): on the block [m0, m1) x [n0, n1) of y[., ld], the bias before the GEMM, the ReLU after. */
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
