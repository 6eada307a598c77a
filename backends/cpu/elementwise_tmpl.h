/* Elementwise kernels over one real type R; included by elementwise.c for float and double. */
#include <math.h>
#include <stdint.h>

static void FN(fill)(R *t, int64_t n, R v) {
#pragma omp parallel for if (n > CT_OMP_MIN)
    for (int64_t i = 0; i < n; i++) t[i] = v;
}

static void FN(add)(const R *a, const R *b, R *out, int64_t n) {
#pragma omp parallel for if (n > CT_OMP_MIN)
    for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

static void FN(axpy)(R alpha, const R *x, R *y, int64_t n) {
#pragma omp parallel for if (n > CT_OMP_MIN)
    for (int64_t i = 0; i < n; i++) y[i] += alpha * x[i];
}

static void FN(scale)(R *t, int64_t n, R s) {
#pragma omp parallel for if (n > CT_OMP_MIN)
    for (int64_t i = 0; i < n; i++) t[i] *= s;
}

static void FN(all_finite)(const R *t, int64_t n, bool *ok) {
    bool finite = true;
    for (int64_t i = 0; i < n; i++) finite &= isfinite(t[i]) != 0;
    *ok = finite;
}

static void FN(bias_add)(R *y, const R *bias, int64_t rows, int64_t c, int64_t inner) {
    if (inner == 1) { /* the linear layer's case: a contiguous row add that vectorises */
#pragma omp parallel for if (rows * c > CT_OMP_MIN)
        for (int64_t r = 0; r < rows; r++) {
            R *restrict p = y + r * c;
            for (int64_t j = 0; j < c; j++) p[j] += bias[j];
        }
        return;
    }
#pragma omp parallel for if (rows * c * inner > CT_OMP_MIN)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < c; j++) {
            R *p = y + (r * c + j) * inner;
            R b = bias[j];
            for (int64_t s = 0; s < inner; s++) p[s] += b;
        }
}

/* Per channel of a [rows, c, inner] gradient with inner > 1 (a convolution's); the linear layer's
 * case, inner 1, is ct_cpu_bias_grad_linear (blas.c). */
static void FN(bias_grad)(const R *dy, R *db, int64_t rows, int64_t c, int64_t inner) {
    /* Parallel over channels: each thread owns its db[j], so no reduction races. */
#pragma omp parallel for if (rows * c * inner > CT_OMP_MIN)
    for (int64_t j = 0; j < c; j++) {
        double acc = 0.0;
        for (int64_t r = 0; r < rows; r++) {
            const R *p = dy + (r * c + j) * inner;
            for (int64_t s = 0; s < inner; s++) acc += p[s];
        }
        db[j] += (R)acc;
    }
}

static void FN(act_fwd)(ct_activation act, const R *x, R *y, int64_t n) {
    switch (act) {
    case CT_ACT_NONE:
        if (y != x)
            for (int64_t i = 0; i < n; i++) y[i] = x[i];
        break;
    case CT_ACT_RELU:
        /* PyTorch's clamp_min: NaN (and -0.0) pass through, so a NaN reaches the loss and
         * nan_inf_policy instead of turning into 0 */
#pragma omp parallel for if (n > CT_OMP_MIN)
        for (int64_t i = 0; i < n; i++) y[i] = x[i] < 0 ? 0 : x[i];
        break;
    case CT_ACT_GELU:
#pragma omp parallel for if (n > CT_OMP_MIN)
        for (int64_t i = 0; i < n; i++) y[i] = (R)(0.5 * x[i] * (1.0 + erf(x[i] * M_SQRT1_2)));
        break;
    case CT_ACT_GELU_TANH:
        FN(gelu_tanh_fwd)(x, y, n); /* elementwise.c */
        break;
    case CT_ACT_TANH:
#pragma omp parallel for if (n > CT_OMP_MIN)
        for (int64_t i = 0; i < n; i++) y[i] = (R)tanh(x[i]);
        break;
    case CT_ACT_SIGMOID:
#pragma omp parallel for if (n > CT_OMP_MIN)
        for (int64_t i = 0; i < n; i++) {
            /* Split by sign so exp never overflows. */
            double v = x[i];
            y[i] = (R)(v >= 0 ? 1.0 / (1.0 + exp(-v)) : exp(v) / (1.0 + exp(v)));
        }
        break;
    }
}

static void FN(act_bwd)(ct_activation act, const R *x, const R *y, const R *dy, R *dx, int64_t n) {
    switch (act) {
    case CT_ACT_NONE:
        for (int64_t i = 0; i < n; i++) dx[i] = dy[i];
        break;
    case CT_ACT_RELU:
        /* PyTorch's threshold_backward: blocked only where the output is <= 0, so a NaN passes */
#pragma omp parallel for if (n > CT_OMP_MIN)
        for (int64_t i = 0; i < n; i++) dx[i] = y[i] <= 0 ? 0 : dy[i];
        break;
    case CT_ACT_GELU:
#pragma omp parallel for if (n > CT_OMP_MIN)
        for (int64_t i = 0; i < n; i++) {
            double v = x[i];
            double cdf = 0.5 * (1.0 + erf(v * M_SQRT1_2));
            double pdf = exp(-0.5 * v * v) * (0.5 * M_2_SQRTPI * M_SQRT1_2);
            dx[i] = (R)(dy[i] * (cdf + v * pdf));
        }
        break;
    case CT_ACT_GELU_TANH:
        FN(gelu_tanh_bwd)(x, dy, dx, n); /* elementwise.c */
        break;
    case CT_ACT_TANH:
#pragma omp parallel for if (n > CT_OMP_MIN)
        for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * (1 - y[i] * y[i]);
        break;
    case CT_ACT_SIGMOID:
#pragma omp parallel for if (n > CT_OMP_MIN)
        for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * y[i] * (1 - y[i]);
        break;
    }
}
