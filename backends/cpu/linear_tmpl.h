/* A linear layer's forward over one real type R, rows [r0, r1) of y = act(x w^T + b); included by
 * blas.c for float and double, with FN(gemm_nt) its row-major C = A B^T + beta C through CBLAS. */
#include <string.h>

static void FN(linear_rows)(const R *x, const R *w, const R *bias, ct_activation act, R *y, int64_t in, int64_t out,
                            int64_t r0, int64_t r1) {
    R *yr = y + r0 * out;
    int64_t rows = r1 - r0;
    /* The bias is the GEMM's starting value: beta 1 adds the product to it with the one rounding a
     * separate bias pass makes, and OpenBLAS then skips the pass that clears C for beta 0. */
    if (bias)
        for (int64_t r = 0; r < rows; r++) memcpy(yr + r * out, bias, (size_t)out * sizeof(R));
    FN(gemm_nt)(rows, out, in, x + r0 * in, w, bias ? 1 : 0, yr);
    /* ReLU as ct_op_activation_forward applies it: NaN and -0.0 pass (PyTorch's clamp_min). */
    if (act == CT_ACT_RELU)
        for (int64_t i = 0; i < rows * out; i++) yr[i] = yr[i] < 0 ? 0 : yr[i];
}

static void FN(linear_forward)(const R *x, const R *w, const R *bias, ct_activation act, R *y, int64_t rows,
                               int64_t in, int64_t out) {
    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    int64_t blocks = rows / CT_LINEAR_ROW_BLOCK;
    if (nt < 2 || blocks < nt || (double)rows * (double)in * (double)out < CT_LINEAR_SPLIT_MIN) {
        FN(linear_rows)(x, w, bias, act, y, in, out, 0, rows);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        int64_t r0 = blocks * t / T * CT_LINEAR_ROW_BLOCK;
        int64_t r1 = t == T - 1 ? rows : blocks * (t + 1) / T * CT_LINEAR_ROW_BLOCK;
        FN(linear_rows)(x, w, bias, act, y, in, out, r0, r1);
    }
}
